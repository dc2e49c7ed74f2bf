/* SPDX-License-Identifier: MIT */
/*
 * sim_opts.c - `kvpool sim`'s command line: one table of the options
 * (name, value, where it goes, help), which both the parser and --help
 * read, the defaults, and the checks of options that go together.
 *
 * Adding an option: a field in struct sim_opts (sim.h) and a row below;
 * a value that needs more than a number in a range or a string gets a
 * set_* handler.  Every error is one line on stderr, then a pointer to
 * --help, and exit status 2.
 *
 * Owns struct opt (a row of the table).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvpool.h>

#include "bench_common.h"
#include "sim.h"

#define SIM_DEFAULT_THREADS 2u
#define SIM_DEFAULT_BLOCK_TOKENS 16u
#define SIM_DEFAULT_MAX_RUNNING 64u
#define SIM_DEFAULT_MAX_ATTEMPTS 1000u
#define SIM_MAX_THREADS 256u
#define SIM_MAX_MODELS 64u
#define SIM_HELP_COLUMN 18 /* an option and its value, before the help */

enum opt_kind {
	OPT_SECTION, /* a heading of --help, not an option */
	OPT_HELP,    /* --help's own line (parsed before the table) */
	OPT_FLAG,    /* bool = true; takes no value */
	OPT_U32,     /* uint32_t in [lo, hi] */
	OPT_U64,     /* uint64_t in [lo, hi] */
	OPT_STR,     /* const char *: the value itself */
	OPT_FN,	     /* set() checks and stores the value */
};

/* A row of the table: an option, or a heading of --help. */
struct opt {
	const char *name; /* "--threads"; a heading's text */
	const char *arg;  /* its value in --help ("N"); NULL for a flag */
	enum opt_kind kind;
	size_t off;	      /* the field: offsetof(struct sim_opts, ...) */
	unsigned long lo, hi; /* OPT_U32, OPT_U64: the range */
	unsigned long def;    /* printed for "%u" in help */
	void (*set)(struct sim_opts *o, const struct opt *row,
		    const char *val); /* OPT_FN */
	/* Its lines, '\n'-separated; the first beside the option, the
	 * others under it. */
	const char *help;
};

/* offsetof(struct sim_opts, f), which does not compile (or warns) unless
 * f has type T: a row's kind and its field cannot disagree. */
#define FIELD(f, T)                                                            \
	(offsetof(struct sim_opts, f) +                                        \
	 0 * sizeof((T *){&((struct sim_opts *)0)->f}))

#define SECTION(title)                                                         \
	{                                                                      \
		.name = (title), .kind = OPT_SECTION                           \
	}
#define FLAG(n, f, h)                                                          \
	{                                                                      \
		.name = (n), .kind = OPT_FLAG, .off = FIELD(f, bool),          \
		.help = (h)                                                    \
	}
#define U32(n, a, f, l, u, d, h)                                               \
	{                                                                      \
		.name = (n), .arg = (a), .kind = OPT_U32,                      \
		.off = FIELD(f, uint32_t), .lo = (l), .hi = (u), .def = (d),   \
		.help = (h)                                                    \
	}
#define U64(n, a, f, l, u, h)                                                  \
	{                                                                      \
		.name = (n), .arg = (a), .kind = OPT_U64,                      \
		.off = FIELD(f, uint64_t), .lo = (l), .hi = (u), .help = (h)   \
	}
#define STR(n, a, f, h)                                                        \
	{                                                                      \
		.name = (n), .arg = (a), .kind = OPT_STR,                      \
		.off = FIELD(f, const char *), .help = (h)                     \
	}
/* A set_* handler; with FN_AT, one that stores through row->off into f. */
#define FN(n, a, fn, h)                                                        \
	{                                                                      \
		.name = (n), .arg = (a), .kind = OPT_FN, .set = (fn),          \
		.help = (h)                                                    \
	}
#define FN_AT(n, a, fn, f, T, h)                                               \
	{                                                                      \
		.name = (n), .arg = (a), .kind = OPT_FN, .set = (fn),          \
		.off = FIELD(f, T), .help = (h)                                \
	}

__attribute__((noreturn, format(printf, 1, 2))) static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("kvpool sim: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(kvpool sim --help lists the options)\n", stderr);
	exit(2);
}

static void *field(struct sim_opts *o, const struct opt *row)
{
	return (char *)o + row->off;
}

/* ------------------------------------------------------ value handlers */

/* A number in (0, 1) for option opt; exits 2 otherwise. */
static float parse_fraction(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v >= 1)
		usage_error("%s: expected a number in (0, 1), got '%s'", opt,
			    s);
	return (float)v;
}

/* A decimal number in [lo, hi] (digits only), or false. */
static bool parse_u64_in(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && !*end && *out >= lo && *out <= hi;
}

/* --retain-system N:P[:STEPS]; exits 2 if malformed. */
static void set_retain(struct sim_opts *o, const struct opt *row,
		       const char *val)
{
	char buf[64], *field[3], *p = buf;
	uint64_t n, prio, steps = 0;
	unsigned nf = 0;

	if (strlen(val) >= sizeof(buf))
		goto bad;
	strcpy(buf, val);
	for (;;) {
		if (nf == 3)
			goto bad; /* a fourth field */
		field[nf++] = p;
		p = strchr(p, ':');
		if (!p)
			break;
		*p++ = '\0';
	}
	if (nf < 2 || !parse_u64_in(field[0], 1, UINT32_MAX, &n) ||
	    !parse_u64_in(field[1], 0, KVP_RETAIN_PIN, &prio) ||
	    (nf == 3 && !parse_u64_in(field[2], 1, UINT64_MAX, &steps)))
		goto bad;
	o->retain = true;
	o->retain_tokens = (uint32_t)n;
	o->retain_prio = (uint32_t)prio;
	o->retain_steps = steps;
	return;
bad:
	usage_error("--retain-system: expected N:P[:STEPS] (N tokens > 0, "
		    "priority 0 to %u, STEPS > 0), got '%s'",
		    KVP_RETAIN_PIN, val);
}

/* An endpoint option's value: a tcp:// port past 65535 is refused
 * (libzmq would bind it modulo 65536, another port than asked for). */
static void set_endpoint(struct sim_opts *o, const struct opt *row,
			 const char *val)
{
	const char *name = row->name;
	const char *port = strrchr(val, ':');

	if (!strncmp(val, "tcp://", 6) && port && port > val + 5 &&
	    strcmp(port + 1, "*") != 0) {
		char *end;
		unsigned long n;

		errno = 0;
		n = strtoul(port + 1, &end, 10);
		if (errno || end == port + 1 || *end || n > 65535)
			usage_error("%s: '%s': the port must be 0 to 65535 or "
				    "*",
				    name, val);
	}
	*(const char **)field(o, row) = val;
}

/* --blocks N: 0 is unlimited; given or not decides the default. */
static void set_blocks(struct sim_opts *o, const struct opt *row,
		       const char *val)
{
	o->blocks = (uint32_t)bench_parse_ulong(row->name, val, 0,
						KVP_MAX_BLOCKS - 1);
	o->blocks_given = true;
}

static void set_policy(struct sim_opts *o, const struct opt *row,
		       const char *val)
{
	unsigned p;

	for (p = 0; p < SIM_NUM_POLICIES; p++)
		if (!strcmp(val, sim_policy_name[p]))
			break;
	if (p == SIM_NUM_POLICIES)
		usage_error("--policy: expected lru, lfu, longest or priority, "
			    "got '%s'",
			    val);
	o->policy = (enum kvp_policy)p;
}

static void set_watermark(struct sim_opts *o, const struct opt *row,
			  const char *val)
{
	o->watermark = parse_fraction(row->name, val);
}

static void set_workload(struct sim_opts *o, const struct opt *row,
			 const char *val)
{
	if (!strcmp(val, "sysprompt"))
		o->sysprompt = true;
	else if (strcmp(val, "mixed") != 0)
		usage_error("--workload: expected mixed or sysprompt, got '%s'",
			    val);
}

static void set_compare(struct sim_opts *o, const struct opt *row,
			const char *val)
{
	if (strcmp(val, "mutex") != 0)
		usage_error("--compare: the only peer is 'mutex', got '%s'",
			    val);
	o->compare = true;
}

static void set_topic(struct sim_opts *o, const struct opt *row,
		      const char *val)
{
	if (strlen(val) > 255)
		usage_error("--topic: at most 255 bytes, got %zu", strlen(val));
	o->topic = val;
}

static void set_hash(struct sim_opts *o, const struct opt *row, const char *val)
{
	if (strcmp(val, "sha256_cbor") && strcmp(val, "xxh3"))
		usage_error("--hash: expected xxh3 or sha256_cbor, got '%s'",
			    val);
	o->cbor = !strcmp(val, "sha256_cbor");
}

static void set_linger(struct sim_opts *o, const struct opt *row,
		       const char *val)
{
	char *end;

	errno = 0;
	o->linger = strtod(val, &end);
	if (errno || end == val || *end || !(o->linger >= 0) ||
	    o->linger > 86400)
		usage_error("--linger: expected seconds in [0, 86400], got "
			    "'%s'",
			    val);
}

/* ------------------------------------------------------------ the table */

static const struct opt options[] = {
	SECTION("workload:"),
	STR("--trace", "FILE", trace,
	    "Mooncake-format JSON-lines trace (default: the embedded\n"
	    "synthetic workload)."),
	U32("--requests", "N", requests, 1, 1u << 24, WL_DEFAULT_REQUESTS,
	    "synthetic workload size (default %u)."),
	U64("--seed", "S", seed, 0, ULONG_MAX,
	    "synthetic workload seed (default 1)."),
	FN("--workload", "W", set_workload,
	   "the synthetic workload: mixed (default) or sysprompt\n"
	   "(a 2,048-token system prompt shared by 1 request in 10)."),
	STR("--dump-workload", "FILE", dump,
	    "write the workload as JSON lines and exit."),
	SECTION("pool and scheduler:"),
	{.name = "--blocks",
	 .arg = "N",
	 .kind = OPT_FN,
	 .set = set_blocks,
	 .def = SIM_DEFAULT_SYNTH_BLOCKS,
	 .help = "pool blocks; 0 = unlimited (nothing is evicted); default:\n"
		 "%u for the synthetic workload, 0 for a trace."},
	U32("--block-tokens", "N", block_tokens, 1, 1u << 16,
	    SIM_DEFAULT_BLOCK_TOKENS, "tokens per block (default %u)."),
	U32("--threads", "N", threads, 1, SIM_MAX_THREADS, SIM_DEFAULT_THREADS,
	    "scheduler threads (default %u)."),
	U32("--models", "M", models, 1, SIM_MAX_MODELS, 1,
	    "managers sharing the pool; request i goes to model i % M\n"
	    "(default 1)."),
	FN("--policy", "P", set_policy,
	   "eviction policy: lru, lfu, longest, priority\n"
	   "(default lru)."),
	U32("--max-running", "N", max_running, 1, 1u << 20,
	    SIM_DEFAULT_MAX_RUNNING,
	    "running requests, all threads (default %u)."),
	FN("--watermark", "F", set_watermark,
	   "fraction kept free at admission (default 0.01)."),
	FLAG("--unordered", unordered,
	     "admit concurrently (default: admissions in trace order)."),
	U32("--max-attempts", "N", max_attempts, 1, UINT32_MAX,
	    SIM_DEFAULT_MAX_ATTEMPTS,
	    "admissions of one request before it is abandoned\n"
	    "(default %u)."),
	FN("--retain-system", "N:P[:STEPS]", set_retain,
	   "commit the first N tokens of every request at\n"
	   "retention priority P (0-15), for STEPS scheduler steps\n"
	   "if given; with --sweep-capacity: the policy with and\n"
	   "without that retention, at each capacity."),
	SECTION("output:"),
	FLAG("--json", json, "one JSON object on stdout."),
	FN("--compare", "mutex", set_compare,
	   "also replay on the mutex manager and print the ratio\n"
	   "(--sweep-capacity always does)."),
	U32("--reps", "R", reps, 1, BENCH_MAX_REPS, 1,
	    "replays per peer; the median time is reported\n"
	    "(default 1)."),
	FLAG("--sweep-capacity", sweep,
	     "replay kvpool and the mutex manager at several\n"
	     "capacities (--policy, --reps): times, ratio and hit rates\n"
	     "as a table, progress on a terminal."),
	FLAG("--sweep-policies", sweep_policies,
	     "a capacity sweep of kvpool alone, every policy's hit\n"
	     "rate at each capacity, as CSV on stdout."),
	STR("--capacities", "LIST", capacities,
	    "the capacities to sweep (blocks, comma-separated;\n"
	    "0 = unlimited)."),
	STR("--csv", "FILE", csv,
	    "with --sweep-capacity: the table as CSV, a row as each\n"
	    "capacity is done ('-': stdout, after the table)."),
	STR("--plot", "FILE", plot,
	    "with a sweep: FILE.png, a plot (needs gnuplot): both\n"
	    "managers' hit rate and throughput against capacity\n"
	    "(--sweep-policies: each policy's hit rate); FILE.gp,\n"
	    "the gnuplot script that draws FILE.png."),
	STR("--metrics", "FILE", metrics,
	    "write the pool's and managers' metrics after the replay\n"
	    "(OpenMetrics text, a Prometheus scrape; kvpool(3))."),
	U64("--metrics-every", "N", metrics_every, 1, UINT64_MAX,
	    "with --metrics: also FILE.000001, FILE.000002, ..., a\n"
	    "scrape every N scheduler steps (all threads' steps)."),
	SECTION("events (libkvpool-events; kvpool(1), doc/events.md):"),
	FN_AT("--publish", "ENDPOINT", set_endpoint, publish, const char *,
	      "publish the replay's KV events, vLLM's wire format\n"
	      "(ZeroMQ PUB bound there, e.g. tcp://127.0.0.1:5557)."),
	FN_AT("--replay", "ENDPOINT", set_endpoint, replay_ep, const char *,
	      "serve replay requests there (ROUTER)."),
	U32("--replay-ring", "N", replay_ring, 1, 1u << 24, 0,
	    "batches kept for replay (default 10000)."),
	U32("--pub-hwm", "N", pub_hwm, 1, INT32_MAX, 0,
	    "the PUB socket's high-water mark (default 100000)."),
	FN("--topic", "T", set_topic, "topic (default kv@<host>@kvpool-sim)."),
	FN("--hash", "H", set_hash,
	   "block hashes: xxh3 (default) or sha256_cbor (vLLM's,\n"
	   "over pseudo-tokens of the hash ids)."),
	STR("--hash-seed", "S", hash_seed,
	    "sha256_cbor's seed, vLLM's PYTHONHASHSEED (default 0)."),
	FN("--linger", "SECONDS", set_linger,
	   "after the replay, keep answering replay requests."),
	{.name = "-h, --help",
	 .kind = OPT_HELP,
	 .help = "this text; kvpool(1) has the details."},
};

#define NUM_OPTIONS (sizeof(options) / sizeof(options[0]))

/* ---------------------------------------------------------------- --help */

/* One line of a row's help, "%u" replaced by the row's def. */
static void help_line(FILE *f, const char *s, size_t len, unsigned long def)
{
	const char *u = memmem(s, len, "%u", 2);

	if (u) {
		fwrite(s, 1, (size_t)(u - s), f);
		fprintf(f, "%lu", def);
		fwrite(u + 2, 1, len - (size_t)(u + 2 - s), f);
	} else {
		fwrite(s, 1, len, f);
	}
	putc('\n', f);
}

/* A row as --help shows it: the option and its value in a column, then
 * the help's lines, the later ones under the first. */
static void help_row(FILE *f, const struct opt *row)
{
	char col[64];
	const char *s = row->help, *nl;

	if (row->kind == OPT_SECTION) {
		fprintf(f, "%s\n", row->name);
		return;
	}
	snprintf(col, sizeof(col), "%s%s%s", row->name, row->arg ? " " : "",
		 row->arg ? row->arg : "");
	fprintf(f, "  %-*s  ", SIM_HELP_COLUMN, col);
	for (;; s = nl + 1) {
		nl = strchr(s, '\n');
		help_line(f, s, nl ? (size_t)(nl - s) : strlen(s), row->def);
		if (!nl)
			break;
		fprintf(f, "%*s", SIM_HELP_COLUMN + 4, "");
	}
}

static void usage(FILE *f)
{
	fputs("usage: kvpool sim [options]\n"
	      "Replays a serving workload through scheduler threads sharing "
	      "one pool.\n"
	      "\n",
	      f);
	for (size_t i = 0; i < NUM_OPTIONS; i++)
		help_row(f, &options[i]);
}

/* -------------------------------------------------------------- parsing */

static void set_defaults(struct sim_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->threads = SIM_DEFAULT_THREADS;
	o->models = 1;
	o->block_tokens = SIM_DEFAULT_BLOCK_TOKENS;
	o->policy = KVP_EVICT_LRU;
	o->max_running = SIM_DEFAULT_MAX_RUNNING;
	o->watermark = 0.01f;
	o->seed = 1;
	o->requests = WL_DEFAULT_REQUESTS;
	o->reps = 1;
	o->max_attempts = SIM_DEFAULT_MAX_ATTEMPTS;
}

/* The option named name, or NULL. */
static const struct opt *find_option(const char *name)
{
	for (size_t i = 0; i < NUM_OPTIONS; i++)
		if (options[i].kind != OPT_SECTION &&
		    options[i].kind != OPT_HELP &&
		    !strcmp(options[i].name, name))
			return &options[i];
	return NULL;
}

/* Stores option row's value val (NULL for a flag) into *o. */
static void apply(struct sim_opts *o, const struct opt *row, const char *val)
{
	switch (row->kind) {
	case OPT_FLAG:
		*(bool *)field(o, row) = true;
		break;
	case OPT_U32:
		*(uint32_t *)field(o, row) = (uint32_t)bench_parse_ulong(
			row->name, val, row->lo, row->hi);
		break;
	case OPT_U64:
		*(uint64_t *)field(o, row) =
			bench_parse_ulong(row->name, val, row->lo, row->hi);
		break;
	case OPT_STR:
		*(const char **)field(o, row) = val;
		break;
	case OPT_FN:
		row->set(o, row, val);
		break;
	case OPT_SECTION:
	case OPT_HELP:
		break;
	}
}

/* Options that only mean something with others, and those that exclude
 * each other. */
static void check_combinations(const struct sim_opts *o)
{
	if ((o->capacities || o->plot || o->csv) && !o->sweep)
		usage_error("--capacities, --plot and --csv go with "
			    "--sweep-capacity");
	if (o->sweep && o->json)
		usage_error("--sweep-capacity prints a table or CSV: it does "
			    "not take --json");
	if (o->csv && (o->sweep_policies || o->retain))
		usage_error("--csv goes with --sweep-capacity (--sweep-policies "
			    "and --retain-system sweeps print CSV on stdout)");
	if (o->sweep_policies && (o->compare || o->retain))
		usage_error("--sweep-policies replays kvpool alone, every "
			    "policy: not with --compare or --retain-system");
	if ((o->trace && (o->seed != 1 || o->requests != WL_DEFAULT_REQUESTS ||
			  o->sysprompt)))
		usage_error("--seed, --requests and --workload shape the "
			    "synthetic workload, not a trace");
	if ((o->replay_ep || o->linger > 0 || o->replay_ring || o->pub_hwm ||
	     o->topic) &&
	    !o->publish)
		usage_error("--replay, --replay-ring, --pub-hwm, --topic and "
			    "--linger go with --publish");
	if (o->metrics_every && !o->metrics)
		usage_error("--metrics-every goes with --metrics");
	if (o->metrics && (o->sweep || o->dump))
		usage_error("--metrics scrapes a replay: not with "
			    "--sweep-capacity or --dump-workload");
	if (o->hash_seed && !o->cbor)
		usage_error("--hash-seed goes with --hash sha256_cbor");
	if (o->publish && (o->compare || o->sweep || o->reps != 1 ||
			   o->models != 1 || o->dump))
		usage_error("--publish streams one replay of one model: not "
			    "with --compare, --sweep-capacity, --reps, "
			    "--models or --dump-workload");
#ifndef KVP_HAVE_EVENTS
	if (o->publish)
		usage_error("--publish: this kvpool was built without "
			    "libkvpool-events (libzmq3-dev, libmsgpack-dev)");
#endif
}

/* sim.h.  "--name value" or "--name=value"; a flag takes no value. */
void sim_parse_args(struct sim_opts *o, int argc, char **argv)
{
	set_defaults(o);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL, *eq;
		const struct opt *row;
		char name[32];
		size_t len;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (strncmp(a, "--", 2) != 0)
			usage_error("unexpected argument '%s'", a);
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a) : strlen(a);
		if (len >= sizeof(name))
			usage_error("unknown option '%s'", a);
		memcpy(name, a, len);
		name[len] = '\0';
		row = find_option(name);
		if (row && row->kind == OPT_FLAG) {
			if (eq)
				usage_error("%s takes no value", name);
		} else if (eq) {
			val = eq + 1;
		} else if (i + 1 < argc) {
			val = argv[++i];
		} else {
			/* Known or not, it cannot be used without a value. */
			usage_error("%s: unknown option or missing value",
				    name);
		}
		if (!row)
			usage_error("unknown option '%s'", name);
		apply(o, row, val);
	}
	o->sweep |= o->sweep_policies; /* a sweep, of every policy */
	check_combinations(o);
	o->progress = isatty(STDERR_FILENO);
}
