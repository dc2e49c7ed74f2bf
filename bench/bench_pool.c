/* SPDX-License-Identifier: MIT */
/*
 * bench_pool.c - block-id allocator benchmark: kvpool against its peers.
 *
 * WHAT IS MEASURED
 *
 * Every peer hands out blocks from a fixed pool of --blocks N (default
 * 65536) and is driven by the same loop in 1..T threads:
 *
 *   kvpool          kvp_pool_create(), ID-only pool (layout NULL), per-thread
 *                   caches of automatic size (or --cache N).
 *   kvpool-nocache  the same pool with KVP_POOL_NOCACHE: every call goes to
 *                   the one global lock-free (Treiber) stack.
 *   mutex-freelist  a pthread mutex around a plain array stack of free ids
 *                   plus a per-block refcount array: lock, pop/push, set or
 *                   check the refcount, unlock; a batch takes the lock once.
 *                   This is the mutex-wrapped shared allocator kvpool
 *                   replaces.
 *   bare-tls-array  each thread owns a private array holding its share of
 *                   the ids and pops/pushes them with no synchronisation and
 *                   no checks at all: the physical limit of "hand out an id"
 *                   through a function call (alloc and free are out-of-line
 *                   calls with a run-time n, like every other peer's).
 *   jemalloc        (only when built with jemalloc) mallocx(64, 0) and
 *                   sdallocx(p, 64, 0) of 64-byte objects: a general-purpose
 *                   thread-caching allocator, objects not ids, for scale.
 *
 * Workloads, each thread in a loop until the main thread raises a stop flag:
 *
 *   pair     allocate 1 block, free 1 block.
 *   batch16  allocate 16 blocks in one call, free 16 blocks in one call.
 *
 * Each thread keeps a ring of 8 live allocations (8 blocks for pair, 8
 * batches of 16 for batch16): every iteration allocates a new one and then
 * frees the oldest, so a free is never of the block just allocated and each
 * thread keeps a small working set, the same for every peer.  Every
 * allocation is checked (the program aborts if one fails) and after every
 * measurement each pool is checked for leaks (kvp_pool_check() for kvpool).
 *
 * One measurement: threads are started, fill their ring and warm up, then
 * wait on a barrier; time runs (CLOCK_MONOTONIC) from the barrier's release
 * until the last thread has seen the stop flag, which the main thread sets
 * after --seconds S.  One op = one block allocated and freed again; ops of
 * all threads are summed.  Each cell (workload, peer, threads) is measured
 * --reps R times, the peers interleaved within each repetition, and the
 * MEDIAN is reported.
 *
 * HOW TO READ THE TABLE
 *
 *   Mops/s        blocks allocated+freed per second, all threads together
 *                 (millions).  Higher is better.
 *   ns/blk/thr    threads * 1e3 / Mops: the wall time one thread spends per
 *                 block.  With more threads than cores (8 on a 2-core box)
 *                 it includes time spent descheduled.
 *   others        the largest share of the machine's CPU that OTHER
 *                 processes took during one of the cell's measurements
 *                 (from /proc/stat minus this process's CPU time).  Above
 *                 10% the cell is marked '!': on a shared machine a
 *                 competing process changes every number (e.g. a mutex
 *                 whose two threads share one core never contends), so
 *                 rerun on an idle machine before trusting such a cell.
 *   x mutex       (kvpool rows) kvpool Mops / mutex-freelist Mops: how many
 *                 times faster kvpool is than the mutex allocator.
 *   x nocache     (kvpool rows) kvpool Mops / kvpool-nocache Mops: what the
 *                 per-thread caches buy over the bare lock-free stack.
 *   cost/bare     (kvpool rows) kvpool ns per block / bare-tls-array ns per
 *                 block: how many times the physical limit kvpool costs
 *                 (1.0 would be free synchronisation; lower is better).
 *
 * The "targets" section then prints PASS/FAIL for the design goals.  The
 * exit status is 0 whether or not a target passes: this is a benchmark.
 *
 * Options: --threads 1,2,8  --seconds 0.3  --reps 5  --cache N (kvpool's
 * per-thread cache capacity; 0 = automatic)  --blocks 65536  --csv FILE.
 * The defaults (30 cells x 5 reps x 0.3 s) take about 50 s.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvpool.h>

#include "bench_common.h"
#include "peer_mutex.h"

#ifdef KVP_BENCH_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

/* ------------------------------------------------------------ parameters */

#define RING 8		     /* live allocations per thread */
#define RING_SLOTS (RING + 1) /* one more: allocate before freeing */
#define MAX_BATCH 16
#define WARMUP_ITERS 2000
#define OBJ_SIZE 64 /* jemalloc object size */

#define DEFAULT_BLOCKS 65536u

enum workload { WL_PAIR, WL_BATCH16, NUM_WL };
static const char *const wl_name[NUM_WL] = {"pair", "batch16"};
static const uint32_t wl_batch[NUM_WL] = {1, 16};

enum peer { P_KVPOOL, P_NOCACHE, P_MUTEX, P_BARE, P_JEMALLOC, NUM_PEERS };
static const char *const peer_name[NUM_PEERS] = {
	"kvpool", "kvpool-nocache", "mutex-freelist", "bare-tls-array",
	"jemalloc (objects, not ids)",
};
static const char *const peer_csv[NUM_PEERS] = {
	"kvpool", "kvpool-nocache", "mutex-freelist", "bare-tls-array",
	"jemalloc-objects",
};

#ifdef KVP_BENCH_JEMALLOC
#define HAVE_JEMALLOC_PEER 1
#else
#define HAVE_JEMALLOC_PEER 0
#endif

static bool peer_enabled(enum peer p)
{
	return p != P_JEMALLOC || HAVE_JEMALLOC_PEER;
}

struct opts {
	struct bench_opts common; /* --threads, --seconds, --reps, --csv */
	uint32_t cache;
	uint32_t blocks;
};

const char bench_prog[] = "bench_pool";

/* ------------------------------------------------------ run-wide context */

struct run;

/* Per-thread slot, one cache line or more, written by its thread only. */
struct thr {
	_Alignas(BENCH_CACHE_LINE) struct run *run;
	unsigned tid;
	uint32_t *bare_ids; /* bare-tls-array: this thread's share */
	uint32_t bare_top;
	uint32_t bare_cap;
	uint64_t ops;
};

struct run {
	enum peer peer;
	uint32_t batch;
	unsigned nthreads;
	struct kvp_pool *pool;
	struct mp_pool *mp; /* bench/peer_mutex.h */
	struct thr *thr;
	struct bench_sync sync;
};

/* ----------------------------------------------------------- peer: kvpool */

struct kvp_tls {
	struct kvp_pool *pool;
};

static inline void kvp_tls_init(struct kvp_tls *L, struct thr *t)
{
	L->pool = t->run->pool;
}

static inline void kvp_tls_alloc(struct kvp_tls *L, uint32_t *ids,
				 uint32_t n)
{
	int rc = kvp_pool_alloc(L->pool, n, ids);

	if (rc != 0)
		bench_die("kvp_pool_alloc(%u) failed: %s", n, kvp_strerror(rc));
}

static inline void kvp_tls_free(struct kvp_tls *L, const uint32_t *ids,
				uint32_t n)
{
	int rc = kvp_pool_free(L->pool, ids, n);

	if (rc != 0)
		bench_die("kvp_pool_free(%u) failed: %s", n, kvp_strerror(rc));
}

static inline void kvp_tls_fini(struct kvp_tls *L, struct thr *t)
{
	(void)L;
	(void)t;
}

/* --------------------------------------------------- peer: mutex freelist */

struct mtx_tls {
	struct mp_pool *mp;
};

static inline void mtx_tls_init(struct mtx_tls *L, struct thr *t)
{
	L->mp = t->run->mp;
}

static inline void mtx_tls_alloc(struct mtx_tls *L, uint32_t *ids,
				 uint32_t n)
{
	int rc = mp_alloc(L->mp, n, ids);

	if (rc != 0)
		bench_die("mutex freelist: alloc(%u) failed: %s", n,
			  kvp_strerror(rc));
}

static inline void mtx_tls_free(struct mtx_tls *L, const uint32_t *ids,
				uint32_t n)
{
	int rc = mp_free(L->mp, ids, n);

	if (rc != 0)
		bench_die("mutex freelist: free(%u) failed: %s", n,
			  kvp_strerror(rc));
}

static inline void mtx_tls_fini(struct mtx_tls *L, struct thr *t)
{
	(void)L;
	(void)t;
}

/* ---------------------------------------------------- peer: bare TLS array */

/*
 * Out of line and opaque to the optimiser (no inlining, no cloning for a
 * constant n): every other peer pays at least one call with a run-time n,
 * so the bare array does too, and cost/bare measures synchronisation, not
 * call overhead.  Inlined with n = 16 the loop would cost ~0.15 ns/block,
 * which no library call can approach.
 */
#if defined(__clang__)
#define BENCH_OPAQUE __attribute__((noinline))
#else
#define BENCH_OPAQUE __attribute__((noipa))
#endif

struct bare_tls {
	uint32_t *ids;
	uint32_t top;
};

static inline void bare_tls_init(struct bare_tls *L, struct thr *t)
{
	L->ids = t->bare_ids;
	L->top = t->bare_top;
}

BENCH_OPAQUE static void bare_tls_alloc(struct bare_tls *L, uint32_t *ids,
					uint32_t n)
{
	uint32_t top = L->top;

	if (top < n)
		bench_die("bare array: alloc(%u) failed: share exhausted", n);
	top -= n;
	if (n == 1)
		ids[0] = L->ids[top];
	else
		memcpy(ids, L->ids + top, n * sizeof(*ids));
	L->top = top;
}

BENCH_OPAQUE static void bare_tls_free(struct bare_tls *L,
				       const uint32_t *ids, uint32_t n)
{
	uint32_t top = L->top;

	if (n == 1)
		L->ids[top] = ids[0];
	else
		memcpy(L->ids + top, ids, n * sizeof(*ids));
	L->top = top + n;
}

static inline void bare_tls_fini(struct bare_tls *L, struct thr *t)
{
	t->bare_top = L->top;
}

/* --------------------------------------------------------- peer: jemalloc */

#ifdef KVP_BENCH_JEMALLOC
struct je_tls {
	int unused;
};

static inline void je_tls_init(struct je_tls *L, struct thr *t)
{
	(void)L;
	(void)t;
}

static inline void je_tls_alloc(struct je_tls *L, void **objs, uint32_t n)
{
	(void)L;
	for (uint32_t i = 0; i < n; i++) {
		objs[i] = mallocx(OBJ_SIZE, 0);
		if (!objs[i])
			bench_die("mallocx(%d) failed", OBJ_SIZE);
	}
}

static inline void je_tls_free(struct je_tls *L, void *const *objs,
			       uint32_t n)
{
	(void)L;
	for (uint32_t i = 0; i < n; i++)
		sdallocx(objs[i], OBJ_SIZE, 0);
}

static inline void je_tls_fini(struct je_tls *L, struct thr *t)
{
	(void)L;
	(void)t;
}
#endif

/* ---------------------------------------------------------------- worker */

/*
 * One worker body per peer, specialised for a constant batch size (the
 * peers' calls still take n at run time).  Ring: slots hold
 * allocations; after each iteration RING of the RING_SLOTS are live and
 * `head` is the free slot.  An iteration allocates into `head`, then frees
 * the oldest live slot (the one after head), which becomes the new head.
 */
#define DEFINE_WORKER(NAME, T, PFX)                                          \
	static inline __attribute__((always_inline)) void *NAME##_body(       \
		struct thr *t, const uint32_t n)                              \
	{                                                                     \
		struct run *r = t->run;                                       \
		T ring[RING_SLOTS][MAX_BATCH];                                \
		struct PFX##_tls L;                                           \
		unsigned head = RING, old;                                    \
		uint64_t ops = 0;                                             \
                                                                              \
		PFX##_tls_init(&L, t);                                        \
		for (unsigned i = 0; i < RING; i++)                           \
			PFX##_tls_alloc(&L, ring[i], n);                      \
		for (unsigned i = 0; i < WARMUP_ITERS; i++) {                 \
			PFX##_tls_alloc(&L, ring[head], n);                   \
			old = head + 1 == RING_SLOTS ? 0 : head + 1;          \
			PFX##_tls_free(&L, ring[old], n);                     \
			head = old;                                           \
		}                                                             \
		bench_sync_start(&r->sync);                                   \
		while (!bench_sync_stopped(&r->sync)) {                       \
			PFX##_tls_alloc(&L, ring[head], n);                   \
			old = head + 1 == RING_SLOTS ? 0 : head + 1;          \
			PFX##_tls_free(&L, ring[old], n);                     \
			head = old;                                           \
			ops += n;                                             \
		}                                                             \
		bench_sync_done(&r->sync);                                    \
		t->ops = ops;                                                 \
		for (unsigned i = 0; i < RING_SLOTS; i++)                     \
			if (i != head)                                        \
				PFX##_tls_free(&L, ring[i], n);               \
		PFX##_tls_fini(&L, t);                                        \
		return NULL;                                                  \
	}                                                                     \
	static void *NAME##_1(void *arg)                                      \
	{                                                                     \
		return NAME##_body(arg, 1);                                   \
	}                                                                     \
	static void *NAME##_16(void *arg)                                     \
	{                                                                     \
		return NAME##_body(arg, 16);                                  \
	}

DEFINE_WORKER(kvp_worker, uint32_t, kvp)
DEFINE_WORKER(mtx_worker, uint32_t, mtx)
DEFINE_WORKER(bare_worker, uint32_t, bare)
#ifdef KVP_BENCH_JEMALLOC
DEFINE_WORKER(je_worker, void *, je)
#endif

typedef void *(*worker_fn)(void *);

static worker_fn worker_for(enum peer p, enum workload w)
{
	bool b16 = w == WL_BATCH16;

	switch (p) {
	case P_KVPOOL:
	case P_NOCACHE:
		return b16 ? kvp_worker_16 : kvp_worker_1;
	case P_MUTEX:
		return b16 ? mtx_worker_16 : mtx_worker_1;
	case P_BARE:
		return b16 ? bare_worker_16 : bare_worker_1;
	case P_JEMALLOC:
#ifdef KVP_BENCH_JEMALLOC
		return b16 ? je_worker_16 : je_worker_1;
#else
		break;
#endif
	case NUM_PEERS:
		break;
	}
	bench_die("peer %d is not available in this build", (int)p);
}

/* ----------------------------------------------------------- measurement */

static struct kvp_pool *make_pool(const struct opts *o, bool nocache)
{
	struct kvp_pool_config cfg;
	struct kvp_pool *pool = NULL;
	int rc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.num_blocks = o->blocks;
	cfg.block_tokens = 16;
	cfg.cache_blocks = nocache ? 0 : o->cache;
	cfg.device_id = -1;
	cfg.layout = NULL;
	cfg.flags = nocache ? KVP_POOL_NOCACHE : 0;
	rc = kvp_pool_create(&cfg, &pool);
	if (rc != 0)
		bench_die("kvp_pool_create(num_blocks=%u, cache_blocks=%u%s) "
			  "failed: %s",
			  cfg.num_blocks, cfg.cache_blocks,
			  nocache ? ", KVP_POOL_NOCACHE" : "",
			  kvp_strerror(rc));
	return pool;
}

static void check_kvpool(struct kvp_pool *pool, const char *what,
			 uint64_t ops)
{
	struct kvp_pool_stats st;
	int rc = kvp_pool_check(pool);

	if (rc != 0)
		bench_die("%s: kvp_pool_check failed after the run: %s", what,
			  kvp_strerror(rc));
	memset(&st, 0, sizeof(st));
	kvp_pool_stats(pool, &st);
	if (st.free != st.total || st.used != 0)
		bench_die("%s: after the run %llu of %llu blocks are free "
			  "(used %llu): blocks leaked",
			  what, (unsigned long long)st.free,
			  (unsigned long long)st.total,
			  (unsigned long long)st.used);
	if (st.allocs != st.frees || st.allocs < ops)
		fprintf(stderr,
			"bench_pool: warning: %s: stats allocs %llu frees %llu "
			"for %llu measured ops\n",
			what, (unsigned long long)st.allocs,
			(unsigned long long)st.frees, (unsigned long long)ops);
}

/* Runs one measurement and returns Mops/s (blocks allocated+freed); stores
 * in *others the share of CPU other processes took meanwhile (-1 unknown). */
static double measure(enum peer p, enum workload w, unsigned nthreads,
		      const struct opts *o, double *others)
{
	struct run *r;
	pthread_t *tids = bench_xcalloc(nthreads, sizeof(*tids));
	uint32_t *bare_mem = NULL;
	worker_fn fn = worker_for(p, w);
	uint64_t ops = 0;
	double mops;

	r = bench_aligned_zalloc(sizeof(*r));
	r->peer = p;
	r->batch = wl_batch[w];
	r->nthreads = nthreads;
	r->thr = bench_aligned_zalloc(nthreads * sizeof(struct thr));

	switch (p) {
	case P_KVPOOL:
	case P_NOCACHE:
		r->pool = make_pool(o, p == P_NOCACHE);
		break;
	case P_MUTEX: {
		int rc;

		r->mp = bench_aligned_zalloc(sizeof(*r->mp));
		rc = mp_init(r->mp, o->blocks);
		if (rc != 0)
			bench_die("mutex freelist: init failed: %s",
				  kvp_strerror(rc));
		break;
	}
	case P_BARE: {
		uint32_t share = o->blocks / nthreads;

		bare_mem = bench_xcalloc(o->blocks, sizeof(uint32_t));
		for (unsigned i = 0; i < nthreads; i++) {
			struct thr *t = &r->thr[i];

			t->bare_ids = bare_mem + (size_t)i * share;
			for (uint32_t j = 0; j < share; j++)
				t->bare_ids[j] = i * share + share - 1 - j;
			t->bare_top = share;
			t->bare_cap = share;
		}
		break;
	}
	case P_JEMALLOC:
	case NUM_PEERS:
		break;
	}

	bench_sync_init(&r->sync, nthreads);
	for (unsigned i = 0; i < nthreads; i++) {
		r->thr[i].run = r;
		r->thr[i].tid = i;
		bench_thread_create(&tids[i], fn, &r->thr[i]);
	}
	*others = bench_sync_window(&r->sync, o->common.seconds);
	for (unsigned i = 0; i < nthreads; i++) {
		bench_thread_join(tids[i]);
		ops += r->thr[i].ops;
	}
	mops = bench_sync_mops(&r->sync, ops);

	/* Verify: every block is back, nothing was lost or duplicated. */
	switch (p) {
	case P_KVPOOL:
	case P_NOCACHE:
		check_kvpool(r->pool, peer_name[p], ops);
		kvp_pool_unref(r->pool);
		break;
	case P_MUTEX:
		if (mp_check(r->mp) != 0)
			bench_die("mutex freelist: blocks lost after the run");
		mp_destroy(r->mp);
		free(r->mp);
		break;
	case P_BARE:
		for (unsigned i = 0; i < nthreads; i++)
			if (r->thr[i].bare_top != r->thr[i].bare_cap)
				bench_die("bare array: thread %u ended with %u "
					  "of %u ids",
					  i, r->thr[i].bare_top,
					  r->thr[i].bare_cap);
		free(bare_mem);
		break;
	case P_JEMALLOC:
	case NUM_PEERS:
		break;
	}
	if (ops == 0)
		bench_die("%s %s %u threads: no operation completed in %.3f s",
			  wl_name[w], peer_name[p], nthreads,
			  o->common.seconds);

	bench_sync_destroy(&r->sync);
	free(r->thr);
	free(r);
	free(tids);
	return mops;
}

/* --------------------------------------------------------------- options */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench_pool [--threads 1,2,8] [--seconds S] [--reps R]\n"
		"                  [--cache N] [--blocks N] [--csv FILE]\n"
		"  --threads LIST  comma-separated thread counts (default "
		"1,2,8)\n"
		"  --seconds S     duration of one measurement (default %.1f)\n"
		"  --reps R        measurements per cell; the median is "
		"reported (default %d)\n"
		"  --cache N       kvpool per-thread cache capacity in blocks "
		"(default 0 = automatic)\n"
		"  --blocks N      blocks in every pool (default %u)\n"
		"  --csv FILE      also write every cell as CSV:\n"
		"                  workload,peer,threads,rep_median_mops,"
		"ns_per_block\n",
		BENCH_DEFAULT_SECONDS, BENCH_DEFAULT_REPS, DEFAULT_BLOCKS);
}

static bool parse_opt(void *ctx, const char *name, const char *val)
{
	struct opts *o = ctx;

	if (!strcmp(name, "--cache"))
		o->cache = (uint32_t)bench_parse_ulong(name, val, 0,
						       KVP_MAX_CACHE_BLOCKS);
	else if (!strcmp(name, "--blocks"))
		o->blocks = (uint32_t)bench_parse_ulong(name, val, 1,
							KVP_MAX_BLOCKS);
	else
		return false;
	return true;
}

static void parse_args(struct opts *o, int argc, char **argv)
{
	o->cache = 0;
	o->blocks = DEFAULT_BLOCKS;
	bench_parse_args(&o->common, argc, argv, usage, parse_opt, o);

	/* Every thread holds up to RING_SLOTS batches; the bare array needs
	 * them in its own share, the shared pools a comfortable margin. */
	for (unsigned i = 0; i < o->common.nthreads_list; i++) {
		uint64_t need =
			(uint64_t)o->common.threads[i] * RING_SLOTS * MAX_BATCH;

		if ((uint64_t)o->blocks < 2 * need) {
			fprintf(stderr,
				"bench_pool: --blocks %u is too small for %u "
				"threads (need at least %llu)\n",
				o->blocks, o->common.threads[i],
				(unsigned long long)(2 * need));
			exit(2);
		}
	}
}

/* ---------------------------------------------------------------- report */

static void print_header(void)
{
	printf("%-8s %4s  %-28s %9s %11s %8s %9s %10s %10s\n", "workload",
	       "thr", "peer", "Mops/s", "ns/blk/thr", "others", "x mutex",
	       "x nocache", "cost/bare");
	printf("%-8s %4s  %-28s %9s %11s %8s %9s %10s %10s\n", "--------",
	       "---", "----", "------", "----------", "------", "-------",
	       "---------", "---------");
}

static void print_group(enum workload w, unsigned ti, unsigned threads)
{
	for (int p = 0; p < NUM_PEERS; p++) {
		double m = *bench_res(w, ti, p);

		if (!peer_enabled((enum peer)p))
			continue;
		printf("%-8s %4u  %-28s %9.2f %11.2f", wl_name[w], threads,
		       peer_name[p], m, bench_ns_per_op(m, threads));
		bench_print_others(*bench_res_others(w, ti, p));
		if (p == P_KVPOOL) {
			double mu = *bench_res(w, ti, P_MUTEX);
			double nc = *bench_res(w, ti, P_NOCACHE);
			double ba = *bench_res(w, ti, P_BARE);

			printf(" %8.2fx %9.2fx %9.2fx", m / mu, m / nc,
			       ba / m);
		}
		printf("\n");
	}
	printf("\n");
	fflush(stdout);
}

static void print_targets(const struct opts *o)
{
	int t1 = bench_find_threads(&o->common, 1),
	    t2 = bench_find_threads(&o->common, 2),
	    t8 = bench_find_threads(&o->common, 8);
	char line[512];

	printf("targets\n");

	/* (1) pair at 2 threads: kvpool >= 10x mutex free list. */
	if (t2 < 0) {
		bench_skip("(1) pair, 2 threads: kvpool >= 10x mutex freelist "
			   "(2 threads not measured)");
	} else {
		double k = *bench_res(WL_PAIR, (unsigned)t2, P_KVPOOL);
		double m = *bench_res(WL_PAIR, (unsigned)t2, P_MUTEX);

		snprintf(line, sizeof(line),
			 "(1) pair, 2 threads: kvpool %.2f Mops/s >= 10 x "
			 "mutex freelist %.2f Mops/s  (ratio %.2fx, need "
			 ">= 10x)",
			 k, m, k / m);
		bench_verdict(k >= 10 * m, line);
	}

	/* (2) pair: kvpool at 8 threads >= 0.8x kvpool at 2 threads. */
	if (t2 < 0 || t8 < 0) {
		bench_skip("(2) pair: kvpool 8 threads >= 0.8x 2 threads (2 "
			   "and 8 threads not both measured)");
	} else {
		double k8 = *bench_res(WL_PAIR, (unsigned)t8, P_KVPOOL);
		double k2 = *bench_res(WL_PAIR, (unsigned)t2, P_KVPOOL);

		snprintf(line, sizeof(line),
			 "(2) pair: kvpool 8 threads %.2f Mops/s >= 0.8 x "
			 "2 threads %.2f Mops/s  (ratio %.2f, need >= 0.80)",
			 k8, k2, k8 / k2);
		bench_verdict(k8 >= 0.8 * k2, line);
	}

	/* (3) batch16 per-block cost: kvpool <= 3x bare array, 1 thread;
	 * 2 threads printed too. */
	for (int pass = 0; pass < 2; pass++) {
		unsigned n = pass ? 2 : 1;
		int ti = pass ? t2 : t1;
		double k, b;

		if (ti < 0) {
			snprintf(line, sizeof(line),
				 "(3) batch16, %u thread%s: kvpool cost <= 3x "
				 "bare array (not measured)",
				 n, n > 1 ? "s" : "");
			if (pass)
				printf("  [INFO] %s\n", line);
			else
				bench_skip(line);
			continue;
		}
		k = bench_ns_per_op(
			*bench_res(WL_BATCH16, (unsigned)ti, P_KVPOOL), n);
		b = bench_ns_per_op(
			*bench_res(WL_BATCH16, (unsigned)ti, P_BARE), n);
		snprintf(line, sizeof(line),
			 "(3) batch16, %u thread%s: kvpool %.2f ns/block <= "
			 "3 x bare array %.2f ns/block  (ratio %.2fx, need "
			 "<= 3x)",
			 n, n > 1 ? "s" : "", k, b, k / b);
		if (pass)
			printf("  [INFO] %s: would %s\n", line,
			       k <= 3 * b ? "PASS" : "FAIL");
		else
			bench_verdict(k <= 3 * b, line);
	}

	bench_print_own_scaling(&o->common, wl_name, P_KVPOOL);
	bench_targets_summary();
}

static void write_csv(const struct opts *o, FILE *f)
{
	fprintf(f, "workload,peer,threads,rep_median_mops,ns_per_block\n");
	for (int w = 0; w < NUM_WL; w++)
		for (unsigned ti = 0; ti < o->common.nthreads_list; ti++)
			for (int p = 0; p < NUM_PEERS; p++) {
				unsigned n = o->common.threads[ti];
				double m = *bench_res(w, ti, p);

				if (!peer_enabled((enum peer)p))
					continue;
				fprintf(f, "%s,%s,%u,%.4f,%.4f\n", wl_name[w],
					peer_csv[p], n, m,
					bench_ns_per_op(m, n));
			}
}

/*
 * Measures every peer for one workload and thread count, o->reps times,
 * the peers interleaved within each rep so that slow drifts of the machine
 * hit every peer alike, and stores the medians.
 */
static void measure_group(enum workload w, unsigned ti, unsigned n,
			  const struct opts *o)
{
	unsigned reps = o->common.reps;

	for (unsigned rep = 0; rep < reps; rep++)
		for (int p = 0; p < NUM_PEERS; p++)
			if (peer_enabled((enum peer)p))
				*bench_sample(p, rep) =
					measure((enum peer)p, w, n, o,
						bench_sample_others(p, rep));
	for (int p = 0; p < NUM_PEERS; p++)
		if (peer_enabled((enum peer)p))
			bench_res_store(w, ti, p);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
	struct opts o;
	const struct bench_opts *c = &o.common;
	FILE *csv;
	unsigned npeers = 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct kvp_pool_stats st;
	struct kvp_pool *probe;

	parse_args(&o, argc, argv);
	csv = bench_csv_open(c->csv);
	for (int p = 0; p < NUM_PEERS; p++)
		npeers += peer_enabled((enum peer)p);

	bench_res_init(NUM_WL, c->nthreads_list, NUM_PEERS, c->reps);

	/* What the automatic cache size resolves to on this machine. */
	probe = make_pool(&o, false);
	memset(&st, 0, sizeof(st));
	kvp_pool_stats(probe, &st);
	kvp_pool_unref(probe);

	printf("bench_pool: kvpool %d.%d.%d, %ld online CPUs, pool of %u "
	       "blocks, kvpool cache %u blocks/thread (%s)\n",
	       KVP_VERSION_MAJOR, KVP_VERSION_MINOR, KVP_VERSION_PATCH, ncpu,
	       o.blocks, st.cache_blocks, o.cache ? "--cache" : "automatic");
	printf("  %u live allocations per thread (ring), %.2f s per "
	       "measurement, median of %u reps, %u peers%s\n",
	       RING, c->seconds, c->reps, npeers,
	       HAVE_JEMALLOC_PEER ? "" : " (built without jemalloc)");
	bench_report_busy("before the run");
	printf("  estimated run time: %.0f s\n",
	       NUM_WL * c->nthreads_list * npeers * c->reps * c->seconds);
	printf("  Mops/s: blocks allocated+freed per second, all threads; "
	       "ns/blk/thr = threads * 1e3 / Mops\n");
	printf("  x mutex, x nocache: kvpool throughput / that peer's "
	       "(higher is better)\n");
	printf("  cost/bare: kvpool ns per block / bare thread-local array ns "
	       "per block (lower is better, 1 = the physical limit)\n");
	bench_print_others_legend();
	print_header();
	fflush(stdout);

	for (int w = 0; w < NUM_WL; w++) {
		for (unsigned ti = 0; ti < c->nthreads_list; ti++) {
			unsigned n = c->threads[ti];

			measure_group((enum workload)w, ti, n, &o);
			print_group((enum workload)w, ti, n);
		}
	}

	print_targets(&o);
	bench_report_busy("after the run");

	if (csv)
		write_csv(&o, csv);
	bench_csv_close(csv, c->csv);
	bench_res_free();
	return 0;
}
