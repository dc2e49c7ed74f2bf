/*
 * sim_opts.c - `kvpool sim`'s command line: the options, their defaults,
 * --help, and the checks of options that go together.  Every error is
 * one line on stderr, then a pointer to --help, and exit status 2.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
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

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvpool sim [options]\n"
		"Replays a serving workload through scheduler threads sharing "
		"one pool.\n"
		"\n"
		"workload:\n"
		"  --trace FILE        Mooncake-format JSON-lines trace "
		"(default: the embedded\n"
		"                      synthetic workload)\n"
		"  --requests N        synthetic workload size (default %u)\n"
		"  --seed S            synthetic workload seed (default 1)\n"
		"  --workload W        the synthetic workload: mixed (default) "
		"or sysprompt\n"
		"                      (a 2,048-token system prompt shared by "
		"1 request in 10)\n"
		"  --dump-workload FILE  write the workload as JSON lines and "
		"exit\n"
		"pool and scheduler:\n"
		"  --blocks N          pool blocks; 0 = unlimited (nothing is "
		"evicted); default:\n"
		"                      %u for the synthetic workload, 0 for "
		"a trace\n"
		"  --block-tokens N    tokens per block (default %u)\n"
		"  --threads N         scheduler threads (default %u)\n"
		"  --models M          managers sharing the pool; request i "
		"goes to model i %% M\n"
		"                      (default 1)\n"
		"  --policy P          eviction policy: lru, lfu, longest, "
		"priority (default lru)\n"
		"  --max-running N     running requests, all threads (default "
		"%u)\n"
		"  --watermark F       fraction kept free at admission "
		"(default 0.01)\n"
		"  --unordered         admit concurrently (default: "
		"admissions in trace order)\n"
		"  --max-attempts N    admissions of one request before it is "
		"abandoned\n"
		"                      (default %u)\n"
		"  --retain-system N:P[:STEPS]  commit the first N tokens of "
		"every request at\n"
		"                      retention priority P (0-15), for STEPS "
		"scheduler steps\n"
		"                      if given; with --sweep-capacity: LRU "
		"with and without\n"
		"output:\n"
		"  --json              one JSON object on stdout\n"
		"  --compare mutex     also replay on the mutex manager and "
		"print the ratio\n"
		"  --reps R            replays per peer; the median time is "
		"reported (default 1)\n"
		"  --sweep-capacity    hit rate against capacity for every "
		"policy, as CSV\n"
		"                      (with --retain-system: LRU with and "
		"without it);\n"
		"                      with --compare mutex: both peers at "
		"each capacity\n"
		"                      (--policy, --reps), time, ratio and hit "
		"rates as a table\n"
		"  --capacities LIST   the capacities to sweep (blocks, "
		"comma-separated;\n"
		"                      0 = unlimited)\n"
		"  --csv FILE          with --sweep-capacity --compare: the "
		"table as CSV\n"
		"                      ('-': stdout)\n"
		"  --plot FILE.png     with --sweep-capacity: a line plot "
		"(needs gnuplot)\n"
		"events (libkvpool-events; kvpool(1), README \"Joining a "
		"cluster\"):\n"
		"  --publish ENDPOINT  publish the replay's KV events, vLLM's "
		"wire format\n"
		"                      (ZeroMQ PUB bound there, e.g. "
		"tcp://127.0.0.1:5557)\n"
		"  --replay ENDPOINT   serve replay requests there (ROUTER)\n"
		"  --replay-ring N     batches kept for replay (default "
		"10000)\n"
		"  --pub-hwm N         the PUB socket's high-water mark "
		"(default 100000)\n"
		"  --topic T           topic (default kv@<host>@kvpool-sim)\n"
		"  --hash H            block hashes: xxh3 (default) or "
		"sha256_cbor (vLLM's,\n"
		"                      over pseudo-tokens of the hash ids)\n"
		"  --hash-seed S       sha256_cbor's seed, vLLM's "
		"PYTHONHASHSEED (default 0)\n"
		"  --linger SECONDS    after the replay, keep answering "
		"replay requests\n"
		"  -h, --help          this text; kvpool(1) has the details\n",
		WL_DEFAULT_REQUESTS, SIM_DEFAULT_SYNTH_BLOCKS,
		SIM_DEFAULT_BLOCK_TOKENS, SIM_DEFAULT_THREADS,
		SIM_DEFAULT_MAX_RUNNING, SIM_DEFAULT_MAX_ATTEMPTS);
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
static void parse_retain(struct sim_opts *o, const char *val)
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

static const char *const flag_opts[] = {"--json", "--sweep-capacity",
					"--unordered"};

/* Fills *o from argv; exits 0 after --help, 2 on a usage error. */
/* An endpoint option's value: a tcp:// port past 65535 is refused
 * (libzmq would bind it modulo 65536, another port than asked for). */
static const char *endpoint_arg(const char *name, const char *val)
{
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
	return val;
}

/* sim.h */
void sim_parse_args(struct sim_opts *o, int argc, char **argv)
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

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL, *eq;
		char name[32];
		size_t len;
		bool flag = false;

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
		for (size_t k = 0; k < sizeof(flag_opts) / sizeof(*flag_opts);
		     k++)
			flag = flag || !strcmp(name, flag_opts[k]);
		if (flag) {
			if (eq)
				usage_error("%s takes no value", name);
		} else if (eq) {
			val = eq + 1;
		} else if (i + 1 < argc) {
			val = argv[++i];
		}

		if (!strcmp(name, "--json")) {
			o->json = true;
		} else if (!strcmp(name, "--sweep-capacity")) {
			o->sweep = true;
		} else if (!strcmp(name, "--unordered")) {
			o->unordered = true;
		} else if (!val) {
			/* Known or not, it cannot be used without a value. */
			usage_error("%s: unknown option or missing value",
				    name);
		} else if (!strcmp(name, "--threads")) {
			o->threads = (unsigned)bench_parse_ulong(
				name, val, 1, SIM_MAX_THREADS);
		} else if (!strcmp(name, "--models")) {
			o->models = (unsigned)bench_parse_ulong(name, val, 1,
								SIM_MAX_MODELS);
		} else if (!strcmp(name, "--blocks")) {
			o->blocks = (uint32_t)bench_parse_ulong(
				name, val, 0, KVP_MAX_BLOCKS - 1);
			o->blocks_given = true;
		} else if (!strcmp(name, "--block-tokens")) {
			o->block_tokens = (uint32_t)bench_parse_ulong(
				name, val, 1, 1u << 16);
		} else if (!strcmp(name, "--policy")) {
			unsigned p;

			for (p = 0; p < 4; p++)
				if (!strcmp(val, sim_policy_name[p]))
					break;
			if (p == 4)
				usage_error("--policy: expected lru, lfu, "
					    "longest or priority, got '%s'",
					    val);
			o->policy = (enum kvp_policy)p;
		} else if (!strcmp(name, "--max-running")) {
			o->max_running = (uint32_t)bench_parse_ulong(
				name, val, 1, 1u << 20);
		} else if (!strcmp(name, "--watermark")) {
			o->watermark = parse_fraction(name, val);
		} else if (!strcmp(name, "--workload")) {
			if (!strcmp(val, "sysprompt"))
				o->sysprompt = true;
			else if (strcmp(val, "mixed") != 0)
				usage_error("--workload: expected mixed or "
					    "sysprompt, got '%s'",
					    val);
		} else if (!strcmp(name, "--retain-system")) {
			parse_retain(o, val);
		} else if (!strcmp(name, "--trace")) {
			o->trace = val;
		} else if (!strcmp(name, "--seed")) {
			o->seed = bench_parse_ulong(name, val, 0, ULONG_MAX);
		} else if (!strcmp(name, "--requests")) {
			o->requests = (uint32_t)bench_parse_ulong(name, val, 1,
								  1u << 24);
		} else if (!strcmp(name, "--capacities")) {
			o->capacities = val;
		} else if (!strcmp(name, "--plot")) {
			o->plot = val;
		} else if (!strcmp(name, "--csv")) {
			o->csv = val;
		} else if (!strcmp(name, "--compare")) {
			if (strcmp(val, "mutex") != 0)
				usage_error("--compare: the only peer is "
					    "'mutex', got '%s'",
					    val);
			o->compare = true;
		} else if (!strcmp(name, "--reps")) {
			o->reps = (unsigned)bench_parse_ulong(name, val, 1,
							      BENCH_MAX_REPS);
		} else if (!strcmp(name, "--dump-workload")) {
			o->dump = val;
		} else if (!strcmp(name, "--publish")) {
			o->publish = endpoint_arg(name, val);
		} else if (!strcmp(name, "--replay")) {
			o->replay_ep = endpoint_arg(name, val);
		} else if (!strcmp(name, "--replay-ring")) {
			o->replay_ring = (uint32_t)bench_parse_ulong(
				name, val, 1, 1u << 24);
		} else if (!strcmp(name, "--pub-hwm")) {
			o->pub_hwm = (uint32_t)bench_parse_ulong(name, val, 1,
								 INT32_MAX);
		} else if (!strcmp(name, "--topic")) {
			if (strlen(val) > 255)
				usage_error("--topic: at most 255 bytes, got "
					    "%zu",
					    strlen(val));
			o->topic = val;
		} else if (!strcmp(name, "--hash")) {
			if (strcmp(val, "sha256_cbor") && strcmp(val, "xxh3"))
				usage_error("--hash: expected xxh3 or "
					    "sha256_cbor, got '%s'",
					    val);
			o->cbor = !strcmp(val, "sha256_cbor");
		} else if (!strcmp(name, "--hash-seed")) {
			o->hash_seed = val;
		} else if (!strcmp(name, "--linger")) {
			char *end;

			errno = 0;
			o->linger = strtod(val, &end);
			if (errno || end == val || *end || !(o->linger >= 0) ||
			    o->linger > 86400)
				usage_error("--linger: expected seconds in "
					    "[0, 86400], got '%s'",
					    val);
		} else if (!strcmp(name, "--max-attempts")) {
			o->max_attempts = (uint32_t)bench_parse_ulong(
				name, val, 1, UINT32_MAX);
		} else {
			usage_error("unknown option '%s'", name);
		}
	}
	if ((o->capacities || o->plot || o->csv) && !o->sweep)
		usage_error("--capacities, --plot and --csv go with "
			    "--sweep-capacity");
	if (o->sweep && o->json)
		usage_error("--sweep-capacity prints CSV: it does not take "
			    "--json");
	if (o->csv && !o->compare)
		usage_error("--csv goes with --sweep-capacity --compare mutex "
			    "(the plain sweep prints CSV on stdout)");
	if ((o->trace && (o->seed != 1 || o->requests != WL_DEFAULT_REQUESTS ||
			  o->sysprompt)))
		usage_error("--seed, --requests and --workload shape the "
			    "synthetic workload, not a trace");
	if ((o->replay_ep || o->linger > 0 || o->replay_ring || o->pub_hwm ||
	     o->topic) &&
	    !o->publish)
		usage_error("--replay, --replay-ring, --pub-hwm, --topic and "
			    "--linger go with --publish");
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
	o->progress = isatty(STDERR_FILENO);
}
