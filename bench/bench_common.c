/* SPDX-License-Identifier: MIT */
/*
 * bench_common.c - measurement scaffolding shared by the benchmarks; see
 * bench_common.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <unistd.h>

#include "bench_common.h"

/* --------------------------------------------------------------- helpers */

void bench_die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: ", bench_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_seconds(double s)
{
	struct timespec ts;
	int64_t deadline;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	deadline = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec +
		   (int64_t)(s * 1e9);
	ts.tv_sec = deadline / 1000000000;
	ts.tv_nsec = deadline % 1000000000;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

static void atomic_min_i64(_Atomic int64_t *a, int64_t v)
{
	int64_t cur = atomic_load_explicit(a, memory_order_relaxed);

	while (v < cur && !atomic_compare_exchange_weak_explicit(
				  a, &cur, v, memory_order_relaxed,
				  memory_order_relaxed))
		;
}

static void atomic_max_i64(_Atomic int64_t *a, int64_t v)
{
	int64_t cur = atomic_load_explicit(a, memory_order_relaxed);

	while (v > cur && !atomic_compare_exchange_weak_explicit(
				  a, &cur, v, memory_order_relaxed,
				  memory_order_relaxed))
		;
}

void *bench_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p)
		bench_die("out of memory");
	return p;
}

void *bench_aligned_zalloc(size_t size)
{
	void *p = aligned_alloc(BENCH_CACHE_LINE,
				(size + BENCH_CACHE_LINE - 1) /
					BENCH_CACHE_LINE * BENCH_CACHE_LINE);

	if (!p)
		bench_die("out of memory");
	memset(p, 0, size);
	return p;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_paired_ratio(const double *num, const double *den,
			  unsigned reps)
{
	double *ratio = bench_xcalloc(reps, sizeof(*ratio)), med;

	for (unsigned rep = 0; rep < reps; rep++)
		ratio[rep] = num[rep] / den[rep];
	med = bench_median(ratio, reps);
	free(ratio);
	return med;
}

double bench_median(const double *v, unsigned n)
{
	double *s = bench_xcalloc(n, sizeof(*s));
	double m;

	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return m;
}

/* ------------------------------------------------------ machine noise */

/*
 * Other processes on the machine skew every number.  /proc/stat (Linux)
 * gives the machine's busy and total CPU time in clock ticks; minus this
 * process's own CPU time it gives what other processes took.
 */
static bool read_cpu_times(unsigned long long *busy,
			   unsigned long long *total)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");
	int n;

	if (!f)
		return false;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 5)
		return false;
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	*busy = *total - v[3] - v[4]; /* minus idle and iowait */
	return true;
}

static int64_t process_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct cpu_sample {
	bool ok;
	unsigned long long busy, total; /* ticks, all CPUs */
	int64_t self_ns;		/* this process's CPU time */
};

static void cpu_sample(struct cpu_sample *c)
{
	c->self_ns = process_cpu_ns();
	c->ok = read_cpu_times(&c->busy, &c->total);
}

/* Share of the machine's CPU time other processes used between a and b,
 * 0..1, or -1 if unknown. */
static double others_share(const struct cpu_sample *a,
			   const struct cpu_sample *b)
{
	double tick_ns = 1e9 / (double)sysconf(_SC_CLK_TCK);
	double total, others;

	if (!a->ok || !b->ok || b->total <= a->total)
		return -1;
	total = (double)(b->total - a->total) * tick_ns;
	others = (double)(b->busy - a->busy) * tick_ns -
		 (double)(b->self_ns - a->self_ns);
	if (others < 0)
		others = 0;
	return others / total;
}

void bench_report_busy(const char *when)
{
	unsigned long long b0, t0, b1, t1;
	double frac;

	if (!read_cpu_times(&b0, &t0))
		return;
	sleep_seconds(0.2);
	if (!read_cpu_times(&b1, &t1) || t1 <= t0)
		return;
	frac = (double)(b1 - b0) / (double)(t1 - t0);
	printf("  CPU busy %s (other processes): %.0f%%%s\n", when,
	       100 * frac,
	       frac > 0.10 ? "  <- the machine is not idle: numbers are noisy"
			   : "");
}

/* --------------------------------------------------------------- options */

unsigned long bench_parse_ulong(const char *opt, const char *s,
				unsigned long lo, unsigned long hi)
{
	char *end;
	unsigned long v;

	/* Digits only: strtoul would skip blanks and take a sign after
	 * them (" -1" is ULONG_MAX). */
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || !isdigit((unsigned char)s[0]) || *end || v < lo ||
	    v > hi) {
		fprintf(stderr, "%s: %s: expected an integer in "
				"[%lu, %lu], got '%s'\n",
			bench_prog, opt, lo, hi, s);
		exit(2);
	}
	return v;
}

static void parse_threads(struct bench_opts *o, const char *s)
{
	char *copy = strdup(s), *save = NULL, *tok;

	if (!copy)
		bench_die("out of memory");
	o->nthreads_list = 0;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->nthreads_list == BENCH_MAX_THREADS) {
			fprintf(stderr, "%s: --threads: too many entries\n",
				bench_prog);
			exit(2);
		}
		o->threads[o->nthreads_list++] = (unsigned)bench_parse_ulong(
			"--threads", tok, 1, BENCH_MAX_THREADS);
	}
	free(copy);
	if (o->nthreads_list == 0) {
		fprintf(stderr, "%s: --threads: empty list\n", bench_prog);
		exit(2);
	}
}

static void parse_seconds(struct bench_opts *o, const char *val)
{
	char *end;

	errno = 0;
	o->seconds = strtod(val, &end);
	if (errno || end == val || *end || !(o->seconds > 0) ||
	    o->seconds > 3600) {
		fprintf(stderr, "%s: --seconds: expected a number in (0, "
				"3600], got '%s'\n",
			bench_prog, val);
		exit(2);
	}
}

void bench_opts_defaults(struct bench_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->threads[0] = 1;
	o->threads[1] = 2;
	o->threads[2] = 8;
	o->nthreads_list = 3;
	o->seconds = BENCH_DEFAULT_SECONDS;
	o->reps = BENCH_DEFAULT_REPS;
}

void bench_parse_args(struct bench_opts *o, int argc, char **argv,
		      void (*usage)(FILE *f),
		      bool (*opt)(void *ctx, const char *name,
				  const char *val),
		      void *ctx)
{
	bench_opts_defaults(o);
	bench_parse_args_into(o, argc, argv, usage, opt, ctx);
}

void bench_parse_args_into(struct bench_opts *o, int argc, char **argv,
			   void (*usage)(FILE *f),
			   bool (*opt)(void *ctx, const char *name,
				       const char *val),
			   void *ctx)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;
		const char *eq;
		char name[32];
		size_t len;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (strncmp(a, "--", 2) != 0) {
			fprintf(stderr, "%s: unexpected argument '%s'\n",
				bench_prog, a);
			usage(stderr);
			exit(2);
		}
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a) : strlen(a);
		if (len >= sizeof(name)) {
			fprintf(stderr, "%s: unknown option '%s'\n",
				bench_prog, a);
			exit(2);
		}
		memcpy(name, a, len);
		name[len] = '\0';
		if (eq)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else {
			fprintf(stderr, "%s: %s needs a value\n", bench_prog,
				name);
			exit(2);
		}

		if (!strcmp(name, "--threads")) {
			parse_threads(o, val);
		} else if (!strcmp(name, "--seconds")) {
			parse_seconds(o, val);
		} else if (!strcmp(name, "--reps")) {
			o->reps = (unsigned)bench_parse_ulong(name, val, 1,
							      BENCH_MAX_REPS);
		} else if (!strcmp(name, "--csv")) {
			o->csv = val;
		} else if (!opt(ctx, name, val)) {
			fprintf(stderr, "%s: unknown option '%s'\n",
				bench_prog, name);
			usage(stderr);
			exit(2);
		}
	}
}

int bench_find_threads(const struct bench_opts *o, unsigned n)
{
	for (unsigned i = 0; i < o->nthreads_list; i++)
		if (o->threads[i] == n)
			return (int)i;
	return -1;
}

/* ------------------------------------------------------------ the runner */

void bench_sync_init(struct bench_sync *s, unsigned nthreads)
{
	int rc;

	atomic_init(&s->stop, 0);
	atomic_init(&s->t0, INT64_MAX);
	atomic_init(&s->t1, 0);
	rc = pthread_barrier_init(&s->start, NULL, nthreads + 1);
	if (rc != 0)
		bench_die("pthread_barrier_init: %s", strerror(rc));
}

void bench_sync_destroy(struct bench_sync *s)
{
	pthread_barrier_destroy(&s->start);
}

static void sync_started(struct bench_sync *s)
{
	atomic_min_i64(&s->t0, now_ns());
}

void bench_sync_start(struct bench_sync *s)
{
	pthread_barrier_wait(&s->start);
	sync_started(s);
}

void bench_sync_done(struct bench_sync *s)
{
	atomic_max_i64(&s->t1, now_ns());
}

double bench_sync_window(struct bench_sync *s, double seconds)
{
	struct cpu_sample c0, c1;

	pthread_barrier_wait(&s->start);
	sync_started(s);
	cpu_sample(&c0);
	sleep_seconds(seconds);
	cpu_sample(&c1);
	atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
	return others_share(&c0, &c1);
}

double bench_sync_mops(struct bench_sync *s, uint64_t ops)
{
	int64_t elapsed = atomic_load(&s->t1) - atomic_load(&s->t0);

	if (elapsed <= 0)
		elapsed = 1;
	return (double)ops * 1e3 / (double)elapsed;
}

void bench_thread_create(pthread_t *tid, void *(*fn)(void *), void *arg)
{
	int rc = pthread_create(tid, NULL, fn, arg);

	if (rc != 0)
		bench_die("pthread_create: %s", strerror(rc));
}

void bench_thread_join(pthread_t tid)
{
	int rc = pthread_join(tid, NULL);

	if (rc != 0)
		bench_die("pthread_join: %s", strerror(rc));
}

/* --------------------------------------------------------------- results */

static double *results, *others_res;
static double *samples, *sample_others; /* [peer][rep] */
/* Every stored cell's samples: [workload][thread index][peer][rep]. */
static double *cell_samples;
static unsigned res_nwl, res_nthreads, res_npeers, res_reps;
static unsigned n_noisy, n_pass, n_fail, n_skip;

void bench_res_init(unsigned nwl, unsigned nthreads, unsigned npeers,
		    unsigned reps)
{
	res_nwl = nwl;
	res_nthreads = nthreads;
	res_npeers = npeers;
	res_reps = reps;
	cell_samples = bench_xcalloc((size_t)nwl * nthreads * npeers * reps,
				     sizeof(double));
	results = bench_xcalloc((size_t)nwl * nthreads * npeers,
				sizeof(double));
	others_res = bench_xcalloc((size_t)nwl * nthreads * npeers,
				   sizeof(double));
	samples = bench_xcalloc((size_t)npeers * reps, sizeof(double));
	sample_others = bench_xcalloc((size_t)npeers * reps, sizeof(double));
}

void bench_res_free(void)
{
	free(samples);
	free(sample_others);
	free(cell_samples);
	free(others_res);
	free(results);
}

static size_t res_index(unsigned w, unsigned ti, unsigned p)
{
	return ((size_t)w * res_nthreads + ti) * res_npeers + p;
}

double *bench_res(unsigned w, unsigned ti, unsigned p)
{
	return &results[res_index(w, ti, p)];
}

double *bench_res_others(unsigned w, unsigned ti, unsigned p)
{
	return &others_res[res_index(w, ti, p)];
}

double *bench_sample(unsigned p, unsigned rep)
{
	return &samples[(size_t)p * res_reps + rep];
}

double *bench_sample_others(unsigned p, unsigned rep)
{
	return &sample_others[(size_t)p * res_reps + rep];
}

void bench_res_store(unsigned w, unsigned ti, unsigned p)
{
	const double *others = bench_sample_others(p, 0);
	unsigned reps = res_reps;
	double worst = 0;

	*bench_res(w, ti, p) = bench_median(bench_sample(p, 0), reps);
	memcpy(&cell_samples[res_index(w, ti, p) * reps], bench_sample(p, 0),
	       reps * sizeof(double));
	for (unsigned rep = 0; rep < reps && worst >= 0; rep++)
		if (others[rep] < 0)
			worst = -1;
		else if (others[rep] > worst)
			worst = others[rep];
	*bench_res_others(w, ti, p) = worst;
}

double bench_res_scaling(unsigned w, unsigned ti_hi, unsigned ti_lo,
			 unsigned p)
{
	if (*bench_res(w, ti_hi, p) <= 0 || *bench_res(w, ti_lo, p) <= 0)
		return 0;
	return bench_paired_ratio(
		&cell_samples[res_index(w, ti_hi, p) * res_reps],
		&cell_samples[res_index(w, ti_lo, p) * res_reps], res_reps);
}

void bench_print_own_scaling(const struct bench_opts *o,
			     const char *const *wl_name, unsigned p)
{
	int i1 = bench_find_threads(o, 1), i2 = bench_find_threads(o, 2);

	if (i1 < 0 || i2 < 0) {
		printf("  [INFO] kvpool's own 2 threads / 1 thread: needs 1 "
		       "and 2 threads\n");
		return;
	}
	for (unsigned w = 0; w < res_nwl; w++) {
		double r = bench_res_scaling(w, (unsigned)i2, (unsigned)i1, p);

		if (wl_name[w] && r > 0)
			printf("  [INFO] kvpool's own 2 threads / 1 thread, "
			       "%s: %.2fx (median of %u paired runs)\n",
			       wl_name[w], r, res_reps);
	}
}

double bench_ns_per_op(double mops, unsigned threads)
{
	return mops > 0 ? threads * 1e3 / mops : 0;
}

void bench_print_others(double others)
{
	if (others < 0) {
		printf(" %8s", "?");
	} else {
		printf(" %6.0f%%%c", 100 * others,
		       others > BENCH_NOISY_SHARE ? '!' : ' ');
		n_noisy += others > BENCH_NOISY_SHARE;
	}
}

void bench_print_others_legend(void)
{
	printf("  others: most CPU other processes took during a measurement "
	       "of the cell ('!' above %.0f%%: unreliable)\n\n",
	       100 * BENCH_NOISY_SHARE);
}

void bench_verdict(bool ok, const char *label)
{
	printf("  [%s] %s\n", ok ? "PASS" : "FAIL", label);
	if (ok)
		n_pass++;
	else
		n_fail++;
}

void bench_skip(const char *label)
{
	printf("  [SKIP] %s\n", label);
	n_skip++;
}

void bench_targets_summary(void)
{
	printf("targets: %u passed, %u FAILED, %u skipped\n", n_pass, n_fail,
	       n_skip);
	if (n_noisy)
		printf("warning: %u cell%s marked '!' were measured while "
		       "other processes took more than %.0f%% of the "
		       "machine's CPU:\n"
		       "         their numbers and the targets built on them "
		       "are unreliable; rerun on an idle machine\n",
		       n_noisy, n_noisy > 1 ? "s" : "",
		       100 * BENCH_NOISY_SHARE);
}

/* ------------------------------------------------------------------- CSV */

FILE *bench_csv_open(const char *path)
{
	FILE *f;

	if (!path)
		return NULL;
	if (!strcmp(path, "-"))
		return stdout;
	f = fopen(path, "w");
	if (!f) { /* a file that cannot be written: 1, as a failed write */
		fprintf(stderr, "%s: %s: %s\n", bench_prog, path,
			strerror(errno));
		exit(1);
	}
	return f;
}

void bench_csv_close(FILE *f, const char *path)
{
	if (!f)
		return;
	if (f == stdout) {
		if (fflush(f) != 0) {
			fprintf(stderr, "%s: stdout: %s\n", bench_prog,
				strerror(errno));
			exit(1);
		}
		return;
	}
	if ((ferror(f) | fclose(f)) != 0) {
		fprintf(stderr, "%s: %s: %s\n", bench_prog, path,
			strerror(errno ? errno : EIO));
		exit(1);
	}
	printf("CSV written to %s\n", path);
}

/* The thread of a bench_worker. */
struct measure_arg {
	struct bench_worker *w;
	void (*fn)(struct bench_worker *w);
};

static void *measure_thread(void *arg)
{
	struct measure_arg *a = arg;

	a->fn(a->w);
	return NULL;
}

double bench_measure(unsigned nthreads, double seconds,
		     void (*fn)(struct bench_worker *w), void *ctx,
		     double *others, uint64_t *total)
{
	struct bench_worker *w =
		bench_aligned_zalloc(nthreads * sizeof(*w));
	struct measure_arg *args = bench_xcalloc(nthreads, sizeof(*args));
	struct bench_sync *sync = bench_aligned_zalloc(sizeof(*sync));
	uint64_t ops = 0;
	double mops;

	bench_sync_init(sync, nthreads);
	for (unsigned t = 0; t < nthreads; t++) {
		w[t] = (struct bench_worker){.tid = t, .ctx = ctx, .sync = sync};
		args[t] = (struct measure_arg){.w = &w[t], .fn = fn};
		bench_thread_create(&w[t].thread, measure_thread, &args[t]);
	}
	*others = bench_sync_window(sync, seconds);
	for (unsigned t = 0; t < nthreads; t++) {
		bench_thread_join(w[t].thread);
		ops += w[t].ops;
	}
	mops = bench_sync_mops(sync, ops);
	if (total)
		*total = ops;
	bench_sync_destroy(sync);
	free(sync);
	free(args);
	free(w);
	return mops;
}

/* ------------------------------------------------------------- placement */

#define C2C_ROUNDS 4000u

static _Alignas(BENCH_CACHE_LINE) _Atomic uint64_t c2c_flag;

static bool pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

/* CPU 1's side: answers round i's 2i + 1 with 2i + 2. */
static void *c2c_pong(void *arg)
{
	bool *pinned = arg;

	*pinned = pin_to(1);
	for (uint64_t i = 0; i < C2C_ROUNDS; i++) {
		while (atomic_load_explicit(&c2c_flag, memory_order_acquire) !=
		       2 * i + 1)
			__builtin_ia32_pause();
		atomic_store_explicit(&c2c_flag, 2 * i + 2,
				      memory_order_release);
	}
	return NULL;
}

double bench_c2c_ns(void)
{
	cpu_set_t old;
	pthread_t t;
	bool pinned = false;
	int64_t t0 = 0;
	double ns;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2 ||
	    pthread_getaffinity_np(pthread_self(), sizeof(old), &old) != 0)
		return -1;
	if (!pin_to(0))
		return -1;
	atomic_store(&c2c_flag, 0);
	bench_thread_create(&t, c2c_pong, &pinned);
	for (uint64_t i = 0; i < C2C_ROUNDS; i++) {
		if (i == C2C_ROUNDS / 4)
			t0 = now_ns(); /* past the start-up */
		atomic_store_explicit(&c2c_flag, 2 * i + 1,
				      memory_order_release);
		while (atomic_load_explicit(&c2c_flag, memory_order_acquire) !=
		       2 * i + 2)
			__builtin_ia32_pause();
	}
	ns = (double)(now_ns() - t0) /
	     (2.0 * (C2C_ROUNDS - C2C_ROUNDS / 4));
	bench_thread_join(t);
	(void)pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
	return pinned ? ns : -1;
}

enum bench_place bench_place_of(double before, double after)
{
	if (before < 0 || after < 0)
		return BENCH_UNKNOWN;
	if ((before < BENCH_FAR_NS) != (after < BENCH_FAR_NS))
		return BENCH_MOVED;
	return before < BENCH_FAR_NS ? BENCH_NEAR : BENCH_FAR;
}

const char *bench_place_name(enum bench_place p)
{
	static const char *const name[] = {"near", "far", "moved", "unknown"};

	return name[p];
}
