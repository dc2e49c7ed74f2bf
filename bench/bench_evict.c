/* SPDX-License-Identifier: MIT */
/*
 * bench_evict.c - the evicting allocation: a pool full of idle cached
 * blocks, where every allocation evicts (the steady state of a serving
 * engine), against a fresh allocation from the free lists.
 *
 * WHAT IS MEASURED
 *
 * One op handles a request of --blocks-per-op blocks (default 64) of 16
 * tokens:
 *
 *   fresh         kvp_seq_create of the request's tokens + kvp_seq_free, on
 *                 a pool with no prefix cache: every block comes from the
 *                 thread cache or the global stack and goes back there;
 *   fresh+commit  kvp_seq_create_cached with hashes never seen (a miss) +
 *                 kvp_seq_commit + kvp_seq_free on a large pool of
 *                 never-cached blocks: the same work as `evict` without
 *                 the eviction.  Every op turns blocks into cached ones
 *                 for good, so a thread that has used up its share ends
 *                 the window early (its rate is over the shorter window,
 *                 and the output says so) rather than start evicting;
 *   evict         the same op on a pool FULL of idle cached blocks (filled
 *                 before the window, so the pool's never-cached free blocks
 *                 are none): every block the create takes is an eviction
 *                 (its hash leaves the table), the commit registers the
 *                 new hashes, the free makes them idle;
 *   evict-4prio   `evict` with retention: each request commits its blocks
 *                 at four priorities (kvp_seq_commit_retained, a quarter
 *                 of its tokens each, the first quarter highest), and so
 *                 did the fill, so that every allocation walks the
 *                 evictable lists of several priorities;
 *   mutex         `evict` on the mutex-wrapped manager (bench/peer_mutex.c,
 *                 the design kvpool replaces), filled the same way.
 *
 * Each thread hashes its own stream (a cheap mix of thread, op and block:
 * no SHA-256 in the timed loop).  After each measurement of `evict` the
 * pool's cache_evictions must have grown by the blocks allocated (the run
 * dies otherwise; the totals are printed), and kvp_manager_check must
 * pass.  Each cell is
 * measured --reps times, rep by rep, and the MEDIAN is reported with the
 * share of the CPU other processes took ("others").
 *
 * PLACEMENT.  The host moves a VM's two vCPUs: next to each other a cache
 * line moves between them in about 30 ns, apart in 100 ns or more, and
 * every line two threads share then costs that much more.  Before and
 * after each 2-thread run the time is probed (bench_c2c_ns) and printed,
 * and the run is classed near, far, or moved (the probes disagree).
 *
 * TARGETS, printed as PASS/FAIL (a full pool that scales):
 *   2 threads over 1 thread, throughput, the median over the reps of one
 *   placement of each rep's 2-thread run over its 1-thread run (paired):
 *     near CPUs: evict >= 1.6x, fresh+commit >= 1.4x, evict-4prio >= 1.4x;
 *     far CPUs: >= 1.0x each (a second thread never makes kvpool slower);
 *   a placement no rep had is a SKIP that says so;
 *   with --baseline CSV (another build's --csv, e.g. the previous
 *   release's, measured just before in the same session): evict at 1
 *   thread at least 1.2x faster per block than the baseline's, and
 *   fresh+commit no slower.  bench/ab.sh -s evict interleaves two builds
 *   round by round for the same comparison.
 * Printed beside them (INFO): evict against fresh (the evicting
 * allocation against a fresh one) and against fresh+commit (the cost of
 * evicting alone), evict-4prio against evict, kvpool against the mutex
 * peer, and kvpool's own 2-thread over 1-thread throughput for every
 * workload (bench_common.c).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "kvpool.h"
#include "peer_mutex.h"

const char bench_prog[] = "bench_evict";

enum workload {
	WL_FRESH,
	WL_FRESH_COMMIT,
	WL_EVICT,
	WL_EVICT_PRIO,
	WL_MUTEX,
	NUM_WL
};
static const char *const wl_name[NUM_WL] = {"fresh", "fresh+commit", "evict",
					    "evict-4prio", "mutex"};

/* kvpool's own workloads, for bench_print_own_scaling (mutex is the
 * peer's). */
static const char *const own_name[NUM_WL] = {"fresh", "fresh+commit",
					     "evict", "evict-4prio", NULL};

/* The scaling targets: 2 threads over 1 thread, paired runs, by where the
 * host put the two CPUs (bench_c2c_ns). */
static const struct {
	enum workload wl;
	double near, far;
} scaling[] = {
	{WL_EVICT, 1.6, 1.0},
	{WL_FRESH_COMMIT, 1.4, 1.0},
	{WL_EVICT_PRIO, 1.4, 1.0},
};

/* Whether w runs on a pool full of idle cached blocks of kvpool. */
static bool evicts(enum workload w)
{
	return w == WL_EVICT || w == WL_EVICT_PRIO;
}

/* evict-4prio: a request's tokens in four quarters, at priorities 3, 2,
 * 1 and 0. */
#define PRIO_LEVELS 4u

#define BLOCK_TOKENS 16u
#define MAX_PER_OP 1024u

struct opts {
	struct bench_opts common;
	uint32_t per_op;      /* blocks per op */
	uint32_t pool_blocks; /* the full pool of `evict` and `mutex` */
	const char *baseline; /* --baseline: another build's --csv */
};

struct run {
	enum workload wl;
	const struct opts *o;
	unsigned nthreads;
	uint32_t blocks; /* of this measurement's pool */
	struct kvp_pool *pool;
	struct kvp_manager *m;
	struct mm_pool mp;
	struct mm_mgr mm;
	uint64_t evictions0;
	uint64_t budget; /* ops per thread in the window, 0 = no limit */
	/* A worker used up the budget: the window ended early. */
	_Atomic bool cut;
	/* Over all the measurements of `evict`: the pool's cache_evictions
	 * and the blocks allocated. */
	uint64_t evicted, evict_allocated;
	unsigned cuts; /* fresh+commit windows that ended early */
};

/* Block i of op `op` of stream s: a cheap, well-mixed 32-byte hash. */
static void mkhash(struct kvp_hash *h, uint64_t s, uint64_t op, uint32_t i)
{
	uint64_t w[4] = {s * 0x9e3779b97f4a7c15ull ^ op,
			 op * 0xc2b2ae3d27d4eb4full + i, s + (op << 20) + i,
			 (op << 32) ^ (s << 16) ^ i};

	for (int k = 0; k < 4; k++) {
		w[k] ^= w[k] >> 31;
		w[k] *= 0xbf58476d1ce4e5b9ull;
		w[k] ^= w[k] >> 29;
	}
	memcpy(h->b, w, sizeof(w));
}

static int commit(const struct run *r, uint64_t id, const struct kvp_hash *h,
		  uint32_t n);

/* One op of stream s (thread), number i. */
static void one_op(struct run *r, uint64_t s, uint64_t i,
		   struct kvp_hash *h)
{
	uint32_t n = r->o->per_op, tokens = n * BLOCK_TOKENS, cached = 0;
	uint64_t id = (s << 40) | i;
	int rc;

	if (r->wl != WL_FRESH)
		for (uint32_t b = 0; b < n; b++)
			mkhash(&h[b], s, i, b);
	switch (r->wl) {
	case WL_FRESH:
		if ((rc = kvp_seq_create(r->m, id, tokens)) != 0)
			bench_die("kvp_seq_create = %d", rc);
		break;
	case WL_FRESH_COMMIT:
	case WL_EVICT:
	case WL_EVICT_PRIO:
		rc = kvp_seq_create_cached(r->m, id, h, n, tokens, &cached);
		if (rc != 0 || cached != 0)
			bench_die("kvp_seq_create_cached = %d (%u cached)", rc,
				  cached);
		if ((rc = commit(r, id, h, n)) != (int)n)
			bench_die("kvp_seq_commit = %d", rc);
		break;
	case WL_MUTEX:
		rc = mm_create_cached(&r->mm, id, h, n, tokens, &cached);
		if (rc != 0 || cached != 0)
			bench_die("mm_create_cached = %d (%u cached)", rc,
				  cached);
		if ((rc = mm_commit(&r->mm, id, h, n)) != (int)n)
			bench_die("mm_commit = %d", rc);
		if ((rc = mm_free(&r->mm, id)) != 0)
			bench_die("mm_free = %d", rc);
		return;
	default:
		abort();
	}
	if ((rc = kvp_seq_free(r->m, id)) != 0)
		bench_die("kvp_seq_free = %d", rc);
}

/* kvp_seq_commit, or for evict-4prio its retained form. */
static int commit(const struct run *r, uint64_t id, const struct kvp_hash *h,
		  uint32_t n)
{
	struct kvp_retention rg[PRIO_LEVELS];
	uint32_t quarter = n * BLOCK_TOKENS / PRIO_LEVELS;

	if (r->wl != WL_EVICT_PRIO)
		return kvp_seq_commit(r->m, id, h, n);
	memset(rg, 0, sizeof(rg));
	for (uint32_t k = 0; k < PRIO_LEVELS; k++) {
		rg[k].first_token = k * quarter;
		rg[k].num_tokens = quarter;
		rg[k].priority = PRIO_LEVELS - 1 - k;
	}
	return kvp_seq_commit_retained(r->m, id, h, n, rg, PRIO_LEVELS, NULL);
}

#define WARMUP 20

static void worker_main(struct bench_worker *w)
{
	struct run *r = w->ctx;
	struct kvp_hash *h = bench_xcalloc(MAX_PER_OP, sizeof(*h));
	uint64_t i = 0, s = w->tid + 1;

	for (; i < WARMUP; i++)
		one_op(r, s, i, h);
	bench_sync_start(w->sync);
	while (!bench_sync_stopped(w->sync)) {
		one_op(r, s, i++, h);
		if (r->budget && i - WARMUP >= r->budget) {
			atomic_store_explicit(&r->cut, true,
					      memory_order_relaxed);
			bench_sync_stop(w->sync);
			break;
		}
	}
	bench_sync_done(w->sync);
	w->ops = i - WARMUP;
	free(h);
}

/* Fills the pool (kvpool or the peer) with idle cached blocks: requests
 * of a stream no worker uses, committed, all held at once, then freed. */
static void fill(struct run *r)
{
	uint32_t n = r->o->per_op, k = 0, cached;
	struct kvp_hash *h = bench_xcalloc(MAX_PER_OP, sizeof(*h));
	int rc;

	for (;; k++) {
		for (uint32_t b = 0; b < n; b++)
			mkhash(&h[b], 0, k, b);
		if (r->wl == WL_MUTEX) {
			rc = mm_create_cached(&r->mm, k, h, n, n * BLOCK_TOKENS,
					      &cached);
			if (rc == 0)
				rc = mm_commit(&r->mm, k, h, n) == (int)n ? 0
									  : -1;
		} else {
			rc = kvp_seq_create_cached(r->m, k, h, n,
						   n * BLOCK_TOKENS, &cached);
			if (rc == 0)
				rc = commit(r, k, h, n) == (int)n ? 0 : -1;
		}
		if (rc == -ENOSPC)
			break;
		if (rc != 0)
			bench_die("filling the pool: %d", rc);
	}
	for (uint32_t j = 0; j < k; j++)
		rc = r->wl == WL_MUTEX ? mm_free(&r->mm, j)
				       : kvp_seq_free(r->m, j);
	free(h);
}

static void setup(struct run *r)
{
	struct kvp_pool_config pc = {.block_tokens = BLOCK_TOKENS,
				     .device_id = -1};
	struct kvp_manager_config mc = {.policy = KVP_EVICT_LRU};
	struct kvp_pool_stats st;
	int rc;

	r->blocks = r->o->pool_blocks;
	r->budget = 0;
	atomic_store_explicit(&r->cut, false, memory_order_relaxed);
	if (r->wl == WL_FRESH_COMMIT) {
		/* A pool that the common window rarely uses up, and a budget
		 * that stops the window before any thread would evict: each
		 * thread's share less an eighth for the blocks thread caches
		 * hold and the warm-up (teardown checks nothing was
		 * evicted). */
		uint32_t share = 8u << 20;

		r->blocks = share * r->nthreads;
		r->budget = (share - share / 8) / r->o->per_op - WARMUP;
	}
	if (r->wl == WL_MUTEX) {
		if ((rc = mm_pool_init(&r->mp, r->blocks, BLOCK_TOKENS)) != 0 ||
		    (rc = mm_mgr_init(&r->mm, &r->mp, KVP_EVICT_LRU, 0,
				      KVP_PREFIX_CACHE, 1024, r->blocks)) != 0)
			bench_die("mutex peer: %d", rc);
		fill(r);
		return;
	}
	pc.num_blocks = r->blocks;
	if ((rc = kvp_pool_create(&pc, &r->pool)) != 0)
		bench_die("kvp_pool_create = %d", rc);
	mc.pool = r->pool;
	mc.flags = r->wl == WL_FRESH ? 0 : KVP_PREFIX_CACHE;
	if ((rc = kvp_manager_create(&mc, &r->m)) != 0)
		bench_die("kvp_manager_create = %d", rc);
	if (evicts(r->wl)) {
		fill(r);
		kvp_thread_flush(); /* the filler's parked references */
		kvp_pool_stats(r->pool, &st);
		if (st.free != st.total || st.free - st.evictable >=
						   r->o->per_op)
			bench_die("the pool is not full of cached blocks: "
				  "%llu free, %llu evictable",
				  (unsigned long long)st.free,
				  (unsigned long long)st.evictable);
		r->evictions0 = st.cache_evictions;
	}
}

static void teardown(struct run *r, uint64_t ops)
{
	struct kvp_pool_stats st;

	if (r->wl == WL_MUTEX) {
		struct mm_mgr *m = &r->mm;

		if (mm_check(&r->mp, &m, 1) != 0)
			bench_die("mutex peer: check failed");
		mm_mgr_destroy(&r->mm);
		mm_pool_destroy(&r->mp);
		return;
	}
	if (kvp_manager_check(r->m) != 0)
		bench_die("kvp_manager_check failed after %s", wl_name[r->wl]);
	kvp_pool_stats(r->pool, &st);
	if (evicts(r->wl)) {
		r->evicted += st.cache_evictions - r->evictions0;
		r->evict_allocated +=
			(ops + WARMUP * r->nthreads) * r->o->per_op;
	}
	if (r->wl == WL_FRESH_COMMIT &&
	    atomic_load_explicit(&r->cut, memory_order_relaxed))
		r->cuts++;
	if (evicts(r->wl) &&
	    st.cache_evictions - r->evictions0 <
		    (ops + WARMUP * r->nthreads) * r->o->per_op)
		bench_die("evict: %llu evictions for %llu blocks allocated: "
			  "not every allocation evicted",
			  (unsigned long long)(st.cache_evictions -
					       r->evictions0),
			  (unsigned long long)((ops + WARMUP * r->nthreads) *
					       r->o->per_op));
	if (r->wl == WL_FRESH_COMMIT && st.cache_evictions != 0)
		bench_die("fresh+commit evicted %llu blocks: the pool is too "
			  "small for the window",
			  (unsigned long long)st.cache_evictions);
	kvp_manager_destroy(r->m);
	kvp_pool_unref(r->pool);
}

static double measure(struct run *r, unsigned nthreads, double *others)
{
	uint64_t ops;
	double mops;

	r->nthreads = nthreads;
	setup(r);
	mops = bench_measure(nthreads, r->o->common.seconds, worker_main, r,
			     others, &ops);
	teardown(r, ops);
	return mops;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench_evict [--threads 1,2] [--seconds S] [--reps R]\n"
		"                   [--blocks-per-op N] [--pool-blocks N] "
		"[--csv FILE]\n"
		"                   [--baseline CSV]\n"
		"Allocations that evict (a pool full of idle cached blocks: "
		"create_cached of\nnew hashes + commit + free) against fresh "
		"allocations and the mutex peer.\nMedians of R runs of S "
		"seconds.\n");
}

static bool parse_opt(void *ctx, const char *name, const char *val)
{
	struct opts *o = ctx;

	if (strcmp(name, "--blocks-per-op") == 0) {
		o->per_op = (uint32_t)bench_parse_ulong(name, val, 1,
							 MAX_PER_OP);
		return true;
	}
	if (strcmp(name, "--baseline") == 0) {
		o->baseline = val;
		return true;
	}
	if (strcmp(name, "--pool-blocks") == 0) {
		o->pool_blocks = (uint32_t)bench_parse_ulong(name, val, 1024,
							      1u << 26);
		return true;
	}
	return false;
}

/* samples[], others[] and the probes of main(), by workload, thread index
 * and rep. */
#define SAMPLE(a, w, ti, rep) \
	(a)[((size_t)(w) * c->nthreads_list + (ti)) * c->reps + (rep)]

/* Nanoseconds per block for one thread from the median Mops/s. */
static double ns_per_block(const struct opts *o, double mops,
			   unsigned threads)
{
	return bench_ns_per_op(mops, threads) / o->per_op;
}

/* Every measurement, by rep; each 2-thread one between two placement
 * probes. */
struct samples {
	double *mops, *others, *before, *after;
};

static void measure_all(struct run *r, const struct bench_opts *c,
			struct samples *sm)
{
	/* Rep by rep, every cell once per rep (see bench_prefix.c). */
	for (unsigned rep = 0; rep < c->reps; rep++)
		for (unsigned ti = 0; ti < c->nthreads_list; ti++)
			for (int w = 0; w < NUM_WL; w++) {
				bool probe = c->threads[ti] == 2;

				r->wl = (enum workload)w;
				if (probe)
					SAMPLE(sm->before, w, ti, rep) =
						bench_c2c_ns();
				SAMPLE(sm->mops, w, ti, rep) =
					measure(r, c->threads[ti],
						&SAMPLE(sm->others, w, ti, rep));
				if (probe)
					SAMPLE(sm->after, w, ti, rep) =
						bench_c2c_ns();
			}
	for (unsigned ti = 0; ti < c->nthreads_list; ti++)
		for (int w = 0; w < NUM_WL; w++) {
			for (unsigned rep = 0; rep < c->reps; rep++) {
				*bench_sample(0, rep) =
					SAMPLE(sm->mops, w, ti, rep);
				*bench_sample_others(0, rep) =
					SAMPLE(sm->others, w, ti, rep);
			}
			bench_res_store(w, ti, 0);
		}
}

static void print_table(const struct opts *o, const struct run *r)
{
	const struct bench_opts *c = &o->common;

	printf("%-13s %7s %12s %14s %8s %9s\n", "workload", "threads",
	       "requests/s", "ns/block/thr", "others", "x mutex");
	for (unsigned ti = 0; ti < c->nthreads_list; ti++)
		for (int w = 0; w < NUM_WL; w++) {
			double mops = *bench_res(w, ti, 0);

			printf("%-13s %7u %12.0f %14.2f", wl_name[w],
			       c->threads[ti], mops * 1e6,
			       ns_per_block(o, mops, c->threads[ti]));
			bench_print_others(*bench_res_others(w, ti, 0));
			if (evicts((enum workload)w))
				printf(" %8.2fx",
				       mops / *bench_res(WL_MUTEX, ti, 0));
			printf("\n");
		}
	bench_print_others_legend();
	printf("evict: %llu cache evictions (the pool's cache_evictions) for "
	       "%llu blocks allocated, over its %u runs\n",
	       (unsigned long long)r->evicted,
	       (unsigned long long)r->evict_allocated,
	       c->reps * c->nthreads_list);
	if (r->cuts)
		printf("fresh+commit: %u of %u windows ended early (the "
		       "never-cached blocks ran out): rate over the shorter "
		       "window\n",
		       r->cuts, c->reps * c->nthreads_list);
}

/* Each 2-thread run's probes, its placement and its paired 2T/1T. */
static void print_placement(const struct bench_opts *c,
			    const struct samples *sm, int i1, int i2)
{
	printf("\nplacement of the 2-thread runs: the one-way time of a "
	       "cache line between\nthe two CPUs before / after the run "
	       "(near below %.0f ns; moved: the two disagree)\n",
	       BENCH_FAR_NS);
	printf("%-13s %4s %16s %8s %9s\n", "workload", "rep",
	       "probe ns", "place", "2T / 1T");
	for (int w = 0; w < NUM_WL; w++)
		for (unsigned rep = 0; rep < c->reps; rep++) {
			double b = SAMPLE(sm->before, w, i2, rep),
			       a = SAMPLE(sm->after, w, i2, rep);

			printf("%-13s %4u %7.0f / %6.0f %8s %8.2fx\n",
			       wl_name[w], rep + 1, b, a,
			       bench_place_name(bench_place_of(b, a)),
			       SAMPLE(sm->mops, w, i2, rep) /
				       SAMPLE(sm->mops, w, i1, rep));
		}
}

/* The median paired 2T/1T of workload w over the reps placed at p (0
 * if none), their count in *n. */
static double scaling_at(const struct bench_opts *c, const struct samples *sm,
			 int w, int i1, int i2, enum bench_place p,
			 unsigned *n)
{
	double *v = bench_xcalloc(c->reps, sizeof(*v)), m;

	*n = 0;
	for (unsigned rep = 0; rep < c->reps; rep++)
		if (bench_place_of(SAMPLE(sm->before, w, i2, rep),
				   SAMPLE(sm->after, w, i2, rep)) == p)
			v[(*n)++] = SAMPLE(sm->mops, w, i2, rep) /
				    SAMPLE(sm->mops, w, i1, rep);
	m = *n ? bench_median(v, *n) : 0;
	free(v);
	return m;
}

static void scaling_targets(const struct bench_opts *c,
			    const struct samples *sm, int i1, int i2)
{
	char line[256];

	for (size_t k = 0; k < sizeof(scaling) / sizeof(scaling[0]); k++)
		for (enum bench_place p = BENCH_NEAR; p <= BENCH_FAR; p++) {
			int w = scaling[k].wl;
			double need = p == BENCH_NEAR ? scaling[k].near
						      : scaling[k].far;
			unsigned n;
			double x = scaling_at(c, sm, w, i1, i2, p, &n);

			if (n == 0) {
				snprintf(line, sizeof(line),
					 "%s, 2 threads over 1, %s CPUs: no "
					 "%s run among the %u reps",
					 wl_name[w], bench_place_name(p),
					 bench_place_name(p), c->reps);
				bench_skip(line);
				continue;
			}
			snprintf(line, sizeof(line),
				 "%s, 2 threads = %.2fx 1 thread, %s CPUs "
				 "(median of %u paired runs), target >= "
				 "%.1fx",
				 wl_name[w], x, bench_place_name(p), n, need);
			bench_verdict(x >= need, line);
		}
}

/* The 1-thread ns/block of workload name in the --baseline CSV (another
 * build's --csv), or dies. */
static double baseline_ns(const char *path, const char *name)
{
	FILE *f = fopen(path, "r");
	char row[256], wl[64];
	unsigned threads;
	double rps, ns;

	if (!f)
		bench_die("--baseline %s: %s", path, strerror(errno));
	while (fgets(row, sizeof(row), f))
		if (sscanf(row, "%63[^,],%u,%lf,%lf", wl, &threads, &rps,
			   &ns) == 4 &&
		    threads == 1 && strcmp(wl, name) == 0) {
			fclose(f);
			return ns;
		}
	fclose(f);
	bench_die("--baseline %s: no 1-thread row of %s", path, name);
	return 0;
}

/* The 1-thread targets against the --baseline build, and the costs
 * printed beside them. */
static void one_thread_targets(const struct opts *o, int i1)
{
	double ev = ns_per_block(o, *bench_res(WL_EVICT, i1, 0), 1),
	       fr = ns_per_block(o, *bench_res(WL_FRESH, i1, 0), 1),
	       fc = ns_per_block(o, *bench_res(WL_FRESH_COMMIT, i1, 0), 1),
	       ep = ns_per_block(o, *bench_res(WL_EVICT_PRIO, i1, 0), 1);
	char line[256];

	if (o->baseline) {
		double bev = baseline_ns(o->baseline, "evict"),
		       bfc = baseline_ns(o->baseline, "fresh+commit");

		snprintf(line, sizeof(line),
			 "evict, 1 thread: %.1f ns/block, %.2fx faster than "
			 "the baseline's %.1f, target >= 1.2x",
			 ev, bev / ev, bev);
		bench_verdict(bev / ev >= 1.2, line);
		snprintf(line, sizeof(line),
			 "fresh+commit, 1 thread: %.1f ns/block, %.2fx the "
			 "baseline's %.1f, target <= 1.0x",
			 fc, fc / bfc, bfc);
		bench_verdict(fc <= bfc, line);
	} else {
		bench_skip("1 thread against another build: needs --baseline "
			   "CSV (that build's bench_evict --csv)");
	}
	printf("  [INFO] evict / fresh, 1 thread: %.2fx (%.1f ns/block)\n",
	       ev / fr, fr);
	printf("  [INFO] evict / fresh+commit (the same op, no eviction), 1 "
	       "thread: %.2fx (%.1f ns/block)\n",
	       ev / fc, fc);
	printf("  [INFO] evict-4prio / evict, 1 thread: %.2fx\n", ep / ev);
}

static void write_csv(const struct opts *o)
{
	const struct bench_opts *c = &o->common;
	FILE *csv = bench_csv_open(c->csv);

	if (!csv)
		return;
	fprintf(csv, "workload,threads,requests_per_s,ns_per_block_thread\n");
	for (unsigned ti = 0; ti < c->nthreads_list; ti++)
		for (int w = 0; w < NUM_WL; w++)
			fprintf(csv, "%s,%u,%.0f,%.3f\n", wl_name[w],
				c->threads[ti], *bench_res(w, ti, 0) * 1e6,
				ns_per_block(o, *bench_res(w, ti, 0),
					     c->threads[ti]));
	bench_csv_close(csv, c->csv);
}

int main(int argc, char **argv)
{
	struct opts o = {.per_op = 64, .pool_blocks = 65536};
	struct bench_opts *c = &o.common;
	struct run r = {.o = &o};
	struct samples sm;
	size_t cells;
	int i1, i2;

	bench_opts_defaults(c);
	c->reps = 3;
	bench_parse_args_into(c, argc, argv, usage, parse_opt, &o);
	if (c->nthreads_list == 3 && c->threads[2] == 8)
		c->nthreads_list = 2; /* the common default: 1 and 2 here */
	if (o.pool_blocks < 4 * o.per_op)
		bench_die("--pool-blocks must be at least 4 x --blocks-per-op");
	if (o.baseline)
		(void)baseline_ns(o.baseline, "evict"); /* fail early */
	bench_res_init(NUM_WL, c->nthreads_list, 1, c->reps);
	cells = (size_t)NUM_WL * c->nthreads_list * c->reps;
	sm.mops = bench_xcalloc(cells, sizeof(double));
	sm.others = bench_xcalloc(cells, sizeof(double));
	sm.before = bench_xcalloc(cells, sizeof(double));
	sm.after = bench_xcalloc(cells, sizeof(double));
	bench_report_busy("before");
	printf("requests of %u blocks of %u tokens; full pools of %u blocks; "
	       "median of %u runs of %.2f s\n\n",
	       o.per_op, BLOCK_TOKENS, o.pool_blocks, c->reps, c->seconds);
	measure_all(&r, c, &sm);
	print_table(&o, &r);
	i1 = bench_find_threads(c, 1);
	i2 = bench_find_threads(c, 2);
	if (i1 >= 0 && i2 >= 0)
		print_placement(c, &sm, i1, i2);
	printf("\ntargets:\n");
	if (i1 >= 0)
		one_thread_targets(&o, i1);
	else
		bench_skip("1-thread targets (needs 1 thread)");
	if (i1 >= 0 && i2 >= 0)
		scaling_targets(c, &sm, i1, i2);
	else
		bench_skip("2 threads over 1 (needs 1 and 2 threads)");
	bench_print_own_scaling(c, own_name, 0);
	bench_targets_summary();
	bench_report_busy("after");
	write_csv(&o);
	bench_res_free();
	free(sm.mops);
	free(sm.others);
	free(sm.before);
	free(sm.after);
	return 0;
}
