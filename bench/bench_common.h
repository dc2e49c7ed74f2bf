/* SPDX-License-Identifier: MIT */
/*
 * bench_common.h - measurement scaffolding shared by the benchmarks
 * (bench_pool, bench_seq, bench_prefix, bench_evict): errors, options, the
 * barrier / stop-flag timed window with its CPU-load ("others") sampling
 * from /proc/stat, the table of medians, kvpool's own 2-thread over
 * 1-thread scaling (every workload, paired runs), the targets' verdicts
 * and the CSV file.
 *
 * Each program defines bench_prog, its name, which prefixes every message.
 */
#ifndef KVP_BENCH_COMMON_H
#define KVP_BENCH_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_CACHE_LINE 64
#define BENCH_MAX_THREADS 256
#define BENCH_MAX_REPS 1000

#define BENCH_DEFAULT_SECONDS 0.3
#define BENCH_DEFAULT_REPS 5

/* Cells where other processes took more of the CPU are marked '!'. */
#define BENCH_NOISY_SHARE 0.10

/* The program's name ("bench_pool"), defined by the program. */
extern const char bench_prog[];

/* ---------------------------------------------------------------- errors */

/* Prints "<bench_prog>: <message>" and aborts. */
__attribute__((noreturn, cold, format(printf, 1, 2))) void
bench_die(const char *fmt, ...);

/* calloc() that dies on failure. */
void *bench_xcalloc(size_t n, size_t size);

/* Zeroed memory aligned to a cache line (size rounded up to whole lines);
 * dies on failure. */
void *bench_aligned_zalloc(size_t size);

/* --------------------------------------------------------------- options */

/* The options both programs take. */
struct bench_opts {
	unsigned threads[BENCH_MAX_THREADS]; /* --threads 1,2,8 */
	unsigned nthreads_list;
	double seconds;	 /* --seconds */
	unsigned reps;	 /* --reps */
	const char *csv; /* --csv, NULL = none */
};

/* Parses s as an integer in [lo, hi] for option opt; exits 2 otherwise. */
unsigned long bench_parse_ulong(const char *opt, const char *s,
				unsigned long lo, unsigned long hi);

/*
 * Sets the defaults of *o and parses argv: "--name value" or "--name=value",
 * -h/--help prints usage(stdout) and exits 0.  --threads, --seconds, --reps
 * and --csv fill *o; any other option goes to opt(ctx, name, value), which
 * returns false for an option it does not know.  Exits 2 on an error.
 */
void bench_parse_args(struct bench_opts *o, int argc, char **argv,
		      void (*usage)(FILE *f),
		      bool (*opt)(void *ctx, const char *name,
				  const char *val),
		      void *ctx);

/* The defaults bench_parse_args starts from (threads 1,2,8). */
void bench_opts_defaults(struct bench_opts *o);

/* bench_parse_args without setting the defaults first: a program sets
 * its own defaults in *o, then parses. */
void bench_parse_args_into(struct bench_opts *o, int argc, char **argv,
			   void (*usage)(FILE *f),
			   bool (*opt)(void *ctx, const char *name,
				       const char *val),
			   void *ctx);

/* Index of thread count n in o->threads, or -1. */
int bench_find_threads(const struct bench_opts *o, unsigned n);

/* ------------------------------------------------------------ the runner */

/*
 * One measurement's start barrier (the workers and the main thread), stop
 * flag and clock.  Embedded at the end of a run's context: the flag and the
 * clock each have a cache line of their own.
 */
struct bench_sync {
	pthread_barrier_t start;
	_Alignas(BENCH_CACHE_LINE) _Atomic int stop;
	/* t0: min over barrier exits, t1: max over loop exits */
	_Alignas(BENCH_CACHE_LINE) _Atomic int64_t t0;
	_Atomic int64_t t1;
};

/* For nthreads workers; dies on failure. */
void bench_sync_init(struct bench_sync *s, unsigned nthreads);
void bench_sync_destroy(struct bench_sync *s);

/* Worker: after the warm-up, waits for the others and starts the clock. */
void bench_sync_start(struct bench_sync *s);

/* Worker: whether to leave the timed loop. */
static inline bool bench_sync_stopped(struct bench_sync *s)
{
	return atomic_load_explicit(&s->stop, memory_order_relaxed);
}

/* Worker: ends the window early for every worker (a workload that would
 * run out of something if it ran for the whole window).  The rate stays
 * ops over the time the loops ran.  Relaxed: the flag orders nothing, the
 * others only poll it. */
static inline void bench_sync_stop(struct bench_sync *s)
{
	atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
}

/* Worker: has left the timed loop. */
void bench_sync_done(struct bench_sync *s);

/* Main thread: releases the workers, lets them run for `seconds` and raises
 * the stop flag.  Returns the share of the machine's CPU other processes
 * took meanwhile, 0..1, or -1 if unknown. */
double bench_sync_window(struct bench_sync *s, double seconds);

/* Main thread, after joining the workers: ops per microsecond (Mops/s) from
 * the first barrier exit to the last loop exit. */
double bench_sync_mops(struct bench_sync *s, uint64_t ops);

/* pthread_create / pthread_join that die on failure. */
void bench_thread_create(pthread_t *tid, void *(*fn)(void *), void *arg);
void bench_thread_join(pthread_t tid);

/* One worker of bench_measure(). */
struct bench_worker {
	unsigned tid;		 /* 0 .. nthreads - 1 */
	void *ctx;		 /* the program's, as given */
	struct bench_sync *sync; /* start, stop and clock */
	uint64_t ops;		 /* set by the worker: ops in the window */
	pthread_t thread;
} __attribute__((aligned(BENCH_CACHE_LINE)));

/*
 * One measurement: runs fn on nthreads threads.  fn warms up, calls
 * bench_sync_start(), works until bench_sync_stopped(), calls
 * bench_sync_done() and stores its count in w->ops.  The window lasts
 * `seconds`.  Returns Mops/s over all threads; *others gets the share of
 * the CPU other processes took (bench_sync_window()), *ops (if not NULL)
 * the ops of all threads.
 */
double bench_measure(unsigned nthreads, double seconds,
		     void (*fn)(struct bench_worker *w), void *ctx,
		     double *others, uint64_t *ops);

/* --------------------------------------------------------------- results */

/*
 * The table of results, cell (workload w, thread index ti, peer p): the
 * median Mops/s (0 = not measured) and the largest share of CPU other
 * processes took during one of the cell's measurements (-1 = unknown).
 */
void bench_res_init(unsigned nwl, unsigned nthreads, unsigned npeers,
		    unsigned reps);
void bench_res_free(void);
double *bench_res(unsigned w, unsigned ti, unsigned p);
double *bench_res_others(unsigned w, unsigned ti, unsigned p);

/* The current cell's measurement rep of peer p: Mops/s and others share. */
double *bench_sample(unsigned p, unsigned rep);
double *bench_sample_others(unsigned p, unsigned rep);

/* Stores in cell (w, ti, p) the median of peer p's samples and the largest
 * of its others shares (-1 if one is unknown). */
void bench_res_store(unsigned w, unsigned ti, unsigned p);

/* The median of v[0..n) (n > 0; v is not reordered). */
double bench_median(const double *v, unsigned n);

/*
 * The median over reps of num[rep] / den[rep]: each rep's run against the
 * one measured just before it in the same rep (a scaling ratio that a
 * slow spell of the host, falling on both, cancels out of).
 */
double bench_paired_ratio(const double *num, const double *den,
			  unsigned reps);

/*
 * Scaling of peer p on workload w: bench_paired_ratio of cell (w, ti_hi, p)
 * over cell (w, ti_lo, p), rep k against rep k, from the samples
 * bench_res_store kept; 0 if either cell was not stored.
 */
double bench_res_scaling(unsigned w, unsigned ti_hi, unsigned ti_lo,
			 unsigned p);

/*
 * Every benchmark's report of kvpool's own 2-thread over 1-thread
 * throughput: one "[INFO]" line per workload w with a non-NULL wl_name[w]
 * whose cells of peer p (kvpool's) at 1 and 2 threads were stored, with
 * bench_res_scaling's paired median.
 */
void bench_print_own_scaling(const struct bench_opts *o,
			     const char *const *wl_name, unsigned p);

/* threads * 1e3 / mops: the wall time one thread spends per op, in ns. */
double bench_ns_per_op(double mops, unsigned threads);

/* Prints a cell's "others" column, " ?" or " 12%" plus '!' (counted) when
 * above BENCH_NOISY_SHARE; the legend says what it means. */
void bench_print_others(double others);
void bench_print_others_legend(void);

/* Targets: "  [PASS] label" or "  [FAIL] label", "  [SKIP] label"; each
 * counted for bench_targets_summary(). */
void bench_verdict(bool ok, const char *label);
void bench_skip(const char *label);

/* The "targets: N passed, ..." line and the warning about noisy cells. */
void bench_targets_summary(void);

/* Prints the share of the CPU other processes take now (0.2 s sample). */
void bench_report_busy(const char *when);

/* ------------------------------------------------------------- placement */

/*
 * Where the host put the two CPUs: the one-way time, in ns, a cache line
 * takes between CPU 0 and CPU 1 (a ping-pong of one atomic word, the
 * calling thread pinned to CPU 0 for the probe and restored after it).
 * The host moves a VM's vCPUs: next to each other a line moves in about
 * 30 ns, apart in 100 ns or more, and every line two threads share costs
 * that much more.  -1 if the machine has fewer than 2 CPUs or a thread
 * could not be pinned.
 */
double bench_c2c_ns(void);

/* The probe's verdict: near below BENCH_FAR_NS, far from it on. */
#define BENCH_FAR_NS 60.0

enum bench_place { BENCH_NEAR, BENCH_FAR, BENCH_MOVED, BENCH_UNKNOWN };

/* A 2-thread run's placement from the probes before and after it: near
 * or far when both agree, moved when they do not. */
enum bench_place bench_place_of(double before, double after);
const char *bench_place_name(enum bench_place p);

/* ------------------------------------------------------------------- CSV */

/* Opens path for writing ("-" is stdout), NULL if path is NULL; exits 1
 * (a failed write) on failure. */
FILE *bench_csv_open(const char *path);

/* Closes f (if any; stdout is only flushed) and says so on stdout, or on
 * stderr when the CSV went to stdout; exits 1 on failure. */
void bench_csv_close(FILE *f, const char *path);

/* murmur3's 64-bit finaliser: a full-avalanche mix (unkeyed). */
static inline uint64_t bench_fmix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

#endif /* KVP_BENCH_COMMON_H */
