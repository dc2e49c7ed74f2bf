/* SPDX-License-Identifier: MIT */
/*
 * bench.c - `kvpool bench`: the pool, sequence and prefix benchmarks in
 * one command, every peer measured in the same run.  See kvpool(1).
 *
 * WORKLOADS AND PEERS
 *
 *   pair      allocate 1 block, free 1 block     (a ring of 8 live
 *   batch16   allocate 16 blocks, free 16 blocks  allocations per thread)
 *       kvpool          kvp_pool_alloc/free, per-thread caches (automatic)
 *       lockfree-stack  the same pool with KVP_POOL_NOCACHE: one global
 *                       lock-free (Treiber) stack, no caches
 *       mutex           bench/peer_mutex.h's mutex free list
 *       cds_lfs         liburcu's lock-free stack of block nodes:
 *                       cds_lfs_push, and cds_lfs_pop_blocking, which takes
 *                       the stack's pop mutex (liburcu's documented way to
 *                       pop without RCU)
 *       jemalloc        mallocx(64, 0) / sdallocx(p, 64, 0): a general
 *                       thread-caching allocator, objects rather than ids
 *                       (built with jemalloc only)
 *   decode    append 1 token to each of 1024 / T sequences per thread in
 *             turn (a sequence is recycled at 2048 tokens)
 *   fork      fork a 100-token sequence, append 1 token (a copy-on-write
 *             of the shared partial block), free the fork
 *   prefix    kvp_seq_create_cached of a 4096-token prompt whose 255 first
 *             blocks are cached (shared by all threads), then free
 *   churn     the same prompt with its last 64 blocks new to the cache:
 *             create_cached (192 hits), commit, free; the pool holds 8192
 *             blocks, so committed blocks are evicted again
 *       kvpool          kvp_manager_* (prefix cache on)
 *       mutex           bench/peer_mutex.h's one-mutex manager
 *
 * Every call is checked; after each measurement the structures are checked
 * (kvp_manager_check / kvp_pool_check, the mutex peers' checks, the
 * cds_lfs stack's node count).  Peers are called through function
 * pointers, all alike.  A cell (workload, threads, peer) is measured --reps
 * times, the peers interleaved, and the median reported; `others` is the
 * largest share of the CPU other processes took during the cell.
 * "kvpool x" is kvpool's throughput over the row's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <urcu/lfstack.h>

#include <kvpool.h>

#ifdef KVP_BENCH_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#include "bench_common.h"
#include "peer_mutex.h"
#include "plot.h"
#include "tools.h"

#define RING 8
#define RING_SLOTS (RING + 1)
#define MAX_BATCH 16u
#define POOL_BLOCKS 65536u
#define WARMUP 2000u
#define BLOCK_TOKENS 16u
#define SEQS 1024u	   /* decode: running sequences, all threads */
#define MAX_TOKENS 2048u   /* decode: recycled at this length */
#define PROMPT 100u	   /* decode, fork */
#define PREFIX_BLOCKS 256u /* prefix, churn: prompt of 4096 tokens */
#define CHURN_NEW 64u	   /* churn: blocks new to the cache per op */
#define CHURN_POOL 8192u

enum wl {
	WL_PAIR,
	WL_BATCH16,
	WL_DECODE,
	WL_FORK,
	WL_PREFIX,
	WL_CHURN,
	NUM_WL
};
static const char *const wl_name[NUM_WL] = {"pair", "batch16", "decode",
					    "fork", "prefix",  "churn"};
static const char *const wl_unit[NUM_WL] = {
	"block allocated and freed",
	"block allocated and freed",
	"append",
	"fork + append + free",
	"cached create + free",
	"create + commit + free",
};

enum peer { P_KVPOOL, P_NOCACHE, P_MUTEX, P_LFS, P_JEMALLOC, NUM_PEERS };
static const char *const peer_name[NUM_PEERS] = {
	"kvpool", "lockfree-stack", "mutex", "cds_lfs", "jemalloc",
};

#ifdef KVP_BENCH_JEMALLOC
#define HAVE_JEMALLOC 1
#else
#define HAVE_JEMALLOC 0
#endif

/* Whether w measures the block pool (else a manager). */
static bool is_pool_wl(enum wl w)
{
	return w == WL_PAIR || w == WL_BATCH16;
}

/* Whether peer p takes part in workload w. */
static bool applies(enum wl w, enum peer p)
{
	if (p == P_KVPOOL || p == P_MUTEX)
		return true;
	if (p == P_JEMALLOC && !HAVE_JEMALLOC)
		return false;
	return is_pool_wl(w);
}

struct opts {
	struct bench_opts common;
	bool run[NUM_WL];
	const char *plot;
};

/* ------------------------------------------------------------ a run */

struct lfs_block {
	struct cds_lfs_node node;
	uint32_t id;
};

struct run;

struct thr {
	_Alignas(BENCH_CACHE_LINE) struct run *run;
	unsigned tid;
	uint64_t ops;
};

/* One measurement's shared state. */
struct run {
	enum wl wl;
	enum peer peer;
	unsigned nthreads;
	uint32_t batch;
	/* pools */
	struct kvp_pool *pool;
	struct mp_pool *mp;
	struct cds_lfs_stack lfs;
	struct lfs_block *lfs_blocks;
	/* managers */
	struct kvp_manager *kmgr;
	struct mm_pool *mpool;
	struct mm_mgr *mmgr;
	struct kvp_hash *hot; /* the shared prompt's hashes */
	struct thr *thr;
	struct bench_sync sync;
};

/* ------------------------------------------------------ pool operations */

/* A ring slot: MAX_BATCH ids (uint32_t) or pointers. */
typedef union {
	uint32_t id[MAX_BATCH];
	void *p[MAX_BATCH];
} slot_t;

/* Allocates n blocks (objects) from the run's peer into s; dies on
 * failure. */
static void pool_alloc(struct run *r, slot_t *s, uint32_t n)
{
	int rc = 0;

	switch (r->peer) {
	case P_KVPOOL:
	case P_NOCACHE:
		rc = kvp_pool_alloc(r->pool, n, s->id);
		break;
	case P_MUTEX:
		rc = mp_alloc(r->mp, n, s->id);
		break;
	case P_LFS:
		for (uint32_t i = 0; i < n; i++) {
			s->p[i] = cds_lfs_pop_blocking(&r->lfs);
			if (!s->p[i])
				rc = -ENOSPC;
		}
		break;
	case P_JEMALLOC:
#ifdef KVP_BENCH_JEMALLOC
		for (uint32_t i = 0; i < n; i++) {
			s->p[i] = mallocx(64, 0);
			if (!s->p[i])
				rc = -ENOMEM;
		}
#endif
		break;
	case NUM_PEERS:
		break;
	}
	if (rc != 0)
		bench_die("%s: allocation of %u failed: %s", peer_name[r->peer],
			  n, kvp_strerror(rc));
}

/* Frees the n blocks (objects) in s; dies on failure. */
static void pool_free(struct run *r, slot_t *s, uint32_t n)
{
	int rc = 0;

	switch (r->peer) {
	case P_KVPOOL:
	case P_NOCACHE:
		rc = kvp_pool_free(r->pool, s->id, n);
		break;
	case P_MUTEX:
		rc = mp_free(r->mp, s->id, n);
		break;
	case P_LFS:
		for (uint32_t i = 0; i < n; i++)
			cds_lfs_push(&r->lfs, s->p[i]);
		break;
	case P_JEMALLOC:
#ifdef KVP_BENCH_JEMALLOC
		for (uint32_t i = 0; i < n; i++)
			sdallocx(s->p[i], 64, 0);
#endif
		break;
	case NUM_PEERS:
		break;
	}
	if (rc != 0)
		bench_die("%s: free of %u failed: %s", peer_name[r->peer], n,
			  kvp_strerror(rc));
}

/* pair / batch16 in one thread: a ring of RING live allocations, warm-up,
 * then the timed loop; frees everything at the end. */
static void *pool_worker(void *arg)
{
	struct thr *t = arg;
	struct run *r = t->run;
	slot_t ring[RING_SLOTS];
	uint32_t n = r->batch;
	unsigned head = RING, old;
	uint64_t ops = 0;

	for (unsigned i = 0; i < RING; i++)
		pool_alloc(r, &ring[i], n);
	for (unsigned i = 0;; i++) {
		if (i == WARMUP)
			bench_sync_start(&r->sync);
		if (i >= WARMUP && bench_sync_stopped(&r->sync))
			break;
		pool_alloc(r, &ring[head], n);
		old = head + 1 == RING_SLOTS ? 0 : head + 1;
		pool_free(r, &ring[old], n);
		head = old;
		ops += i >= WARMUP ? n : 0;
	}
	bench_sync_done(&r->sync);
	t->ops = ops;
	for (unsigned i = 0; i < RING_SLOTS; i++)
		if (i != head)
			pool_free(r, &ring[i], n);
	return NULL;
}

/* --------------------------------------------------- manager operations */

static int m_create(struct run *r, uint64_t id, uint32_t tokens)
{
	return r->peer == P_KVPOOL ? kvp_seq_create(r->kmgr, id, tokens)
				   : mm_create(r->mmgr, id, tokens);
}

static int m_create_cached(struct run *r, uint64_t id, const struct kvp_hash *h,
			   uint32_t n, uint32_t tokens, uint32_t *cached)
{
	return r->peer == P_KVPOOL
		       ? kvp_seq_create_cached(r->kmgr, id, h, n, tokens,
					       cached)
		       : mm_create_cached(r->mmgr, id, h, n, tokens, cached);
}

static int m_commit(struct run *r, uint64_t id, const struct kvp_hash *h,
		    uint32_t n)
{
	return r->peer == P_KVPOOL ? kvp_seq_commit(r->kmgr, id, h, n)
				   : mm_commit(r->mmgr, id, h, n);
}

static int m_append(struct run *r, uint64_t id, struct kvp_copy *cow,
		    uint32_t *ncow)
{
	return r->peer == P_KVPOOL
		       ? kvp_seq_append(r->kmgr, id, 1, cow, 1, ncow)
		       : mm_append(r->mmgr, id, 1, cow, 1, ncow);
}

static int m_fork(struct run *r, uint64_t src, uint64_t dst)
{
	return r->peer == P_KVPOOL ? kvp_seq_fork(r->kmgr, src, dst)
				   : mm_fork(r->mmgr, src, dst);
}

static int m_free(struct run *r, uint64_t id)
{
	return r->peer == P_KVPOOL ? kvp_seq_free(r->kmgr, id)
				   : mm_free(r->mmgr, id);
}

#define CHECK(r, call, what, id)                                               \
	do {                                                                   \
		int rc_ = (call);                                              \
		if (rc_ < 0)                                                   \
			bench_die("%s %s: %s of %#llx failed: %s",             \
				  peer_name[(r)->peer], wl_name[(r)->wl],      \
				  what, (unsigned long long)(id),              \
				  kvp_strerror(rc_));                          \
	} while (0)

/* Thread tid's sequence j (ids never collide between threads). */
static uint64_t seq_id(unsigned tid, uint64_t j)
{
	return ((uint64_t)(tid + 1) << 40) | j;
}

/* A uniform block hash from (tid, counter, block): the library keys its
 * map by the first 8 bytes, as it may (hashes are uniform). */
static void make_hash(struct kvp_hash *h, uint64_t a, uint64_t b)
{
	for (int w = 0; w < 4; w++) {
		uint64_t z = a * 0x9e3779b97f4a7c15ull + b + (uint64_t)w +
			     0x632be59bd9b4e019ull;

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(h->b + 8 * w, &z, sizeof(z));
		a = z;
	}
}

/* One op of a manager workload; i counts the thread's ops. */
static void seq_op(struct run *r, struct thr *t, uint64_t i, uint32_t S,
		   uint32_t *ntok, struct kvp_hash *h)
{
	struct kvp_copy cow;
	uint32_t ncow = 0, cached = 0;
	uint64_t id;

	switch (r->wl) {
	case WL_DECODE: {
		uint32_t j = (uint32_t)(i % S);

		id = seq_id(t->tid, j);
		CHECK(r, m_append(r, id, &cow, &ncow), "append", id);
		if (++ntok[j] >= MAX_TOKENS) {
			CHECK(r, m_free(r, id), "free", id);
			CHECK(r, m_create(r, id, PROMPT), "create", id);
			ntok[j] = PROMPT;
		}
		break;
	}
	case WL_FORK:
		id = seq_id(t->tid, (1ull << 39) | i);
		CHECK(r, m_fork(r, seq_id(t->tid, i % S), id), "fork", id);
		CHECK(r, m_append(r, id, &cow, &ncow), "append", id);
		if (ncow != 1)
			bench_die("%s fork: %u copies, expected 1",
				  peer_name[r->peer], ncow);
		CHECK(r, m_free(r, id), "free", id);
		break;
	case WL_PREFIX:
		id = seq_id(t->tid, i);
		CHECK(r,
		      m_create_cached(r, id, r->hot, PREFIX_BLOCKS,
				      PREFIX_BLOCKS * BLOCK_TOKENS, &cached),
		      "create_cached", id);
		if (cached != (PREFIX_BLOCKS - 1) * BLOCK_TOKENS)
			bench_die("%s prefix: %u tokens cached, expected %u",
				  peer_name[r->peer], cached,
				  (PREFIX_BLOCKS - 1) * BLOCK_TOKENS);
		CHECK(r, m_free(r, id), "free", id);
		break;
	case WL_CHURN:
		id = seq_id(t->tid, i);
		memcpy(h, r->hot, (PREFIX_BLOCKS - CHURN_NEW) * sizeof(*h));
		for (uint32_t k = PREFIX_BLOCKS - CHURN_NEW; k < PREFIX_BLOCKS;
		     k++)
			make_hash(&h[k], id, k);
		CHECK(r,
		      m_create_cached(r, id, h, PREFIX_BLOCKS,
				      PREFIX_BLOCKS * BLOCK_TOKENS, &cached),
		      "create_cached", id);
		CHECK(r, m_commit(r, id, h, PREFIX_BLOCKS), "commit", id);
		CHECK(r, m_free(r, id), "free", id);
		break;
	default:
		bench_die("not a manager workload");
	}
}

/* A manager workload in one thread: its sequences, warm-up, the timed
 * loop, and every sequence freed at the end. */
static void *seq_worker(void *arg)
{
	struct thr *t = arg;
	struct run *r = t->run;
	uint32_t S = SEQS / r->nthreads ? SEQS / r->nthreads : 1;
	uint32_t *ntok = bench_xcalloc(S, sizeof(*ntok));
	struct kvp_hash *h = bench_xcalloc(PREFIX_BLOCKS, sizeof(*h));
	uint64_t ops = 0, i;

	if (r->wl == WL_DECODE || r->wl == WL_FORK)
		for (uint32_t j = 0; j < S; j++) {
			/* decode: staggered lengths, as if running a while */
			ntok[j] = r->wl == WL_FORK
					  ? PROMPT
					  : PROMPT + (uint32_t)((uint64_t)j *
								(MAX_TOKENS -
								 PROMPT) /
								S);
			CHECK(r, m_create(r, seq_id(t->tid, j), ntok[j]),
			      "create", seq_id(t->tid, j));
		}
	for (i = 0; i < WARMUP / 4; i++)
		seq_op(r, t, i, S, ntok, h);
	bench_sync_start(&r->sync);
	while (!bench_sync_stopped(&r->sync)) {
		seq_op(r, t, i++, S, ntok, h);
		ops++;
	}
	bench_sync_done(&r->sync);
	t->ops = ops;
	if (r->wl == WL_DECODE || r->wl == WL_FORK)
		for (uint32_t j = 0; j < S; j++)
			CHECK(r, m_free(r, seq_id(t->tid, j)), "free",
			      seq_id(t->tid, j));
	free(ntok);
	free(h);
	return NULL;
}

/* ------------------------------------------------------ set-up, checks */

static void setup(struct run *r)
{
	bool pool_wl = is_pool_wl(r->wl);
	uint32_t nblocks = pool_wl ? POOL_BLOCKS
			   : r->wl == WL_CHURN
				   ? CHURN_POOL
				   : 2 * SEQS * (MAX_TOKENS / BLOCK_TOKENS);
	int rc = 0;

	if (r->wl == WL_PREFIX || r->wl == WL_CHURN) {
		r->hot = bench_xcalloc(PREFIX_BLOCKS, sizeof(*r->hot));
		for (uint32_t k = 0; k < PREFIX_BLOCKS; k++)
			make_hash(&r->hot[k], 0, k);
	}
	if (r->peer == P_KVPOOL || r->peer == P_NOCACHE) {
		struct kvp_pool_config pc;

		memset(&pc, 0, sizeof(pc));
		pc.num_blocks = nblocks;
		pc.block_tokens = BLOCK_TOKENS;
		pc.device_id = -1;
		pc.flags = r->peer == P_NOCACHE ? KVP_POOL_NOCACHE : 0;
		rc = kvp_pool_create(&pc, &r->pool);
		if (rc == 0 && !pool_wl) {
			struct kvp_manager_config mc;

			memset(&mc, 0, sizeof(mc));
			mc.pool = r->pool;
			mc.flags = KVP_PREFIX_CACHE;
			rc = kvp_manager_create(&mc, &r->kmgr);
		}
	} else if (r->peer == P_MUTEX && pool_wl) {
		r->mp = bench_aligned_zalloc(sizeof(*r->mp));
		rc = mp_init(r->mp, nblocks);
	} else if (r->peer == P_MUTEX) {
		r->mpool = bench_aligned_zalloc(sizeof(*r->mpool));
		r->mmgr = bench_aligned_zalloc(sizeof(*r->mmgr));
		rc = mm_pool_init(r->mpool, nblocks, BLOCK_TOKENS);
		if (rc == 0)
			rc = mm_mgr_init(r->mmgr, r->mpool, KVP_EVICT_LRU, 0,
					 KVP_PREFIX_CACHE, 2 * SEQS + 64,
					 nblocks);
	} else if (r->peer == P_LFS) {
		r->lfs_blocks = bench_xcalloc(nblocks, sizeof(*r->lfs_blocks));
		cds_lfs_init(&r->lfs);
		for (uint32_t i = nblocks; i-- > 0;) {
			cds_lfs_node_init(&r->lfs_blocks[i].node);
			r->lfs_blocks[i].id = i;
			cds_lfs_push(&r->lfs, &r->lfs_blocks[i].node);
		}
	}
	if (rc != 0)
		bench_die("%s %s: set-up failed: %s", peer_name[r->peer],
			  wl_name[r->wl], kvp_strerror(rc));
	/* The shared prompt, cached once (prefix: all of it; churn: its
	 * hot part). */
	if (r->hot) {
		uint64_t id = 1;

		CHECK(r,
		      m_create_cached(r, id, r->hot, PREFIX_BLOCKS,
				      PREFIX_BLOCKS * BLOCK_TOKENS, NULL),
		      "create_cached", id);
		CHECK(r, m_commit(r, id, r->hot, PREFIX_BLOCKS), "commit", id);
		CHECK(r, m_free(r, id), "free", id);
	}
}

/* Checks the peer's structures at quiescence (nothing leaked, invariants
 * sound) and frees them; dies if a check fails. */
static void check_and_teardown(struct run *r)
{
	int rc = 0;

	if (r->kmgr) {
		struct kvp_stats st;

		rc = kvp_manager_check(r->kmgr);
		kvp_manager_stats(r->kmgr, &st);
		if (rc == 0 && (st.sequences || st.blocks_used))
			rc = -EFAULT;
		kvp_manager_destroy(r->kmgr);
	} else if (r->pool) {
		struct kvp_pool_stats ps;

		rc = kvp_pool_check(r->pool);
		kvp_pool_stats(r->pool, &ps);
		if (rc == 0 && ps.used)
			rc = -EFAULT;
	}
	kvp_pool_unref(r->pool);
	if (r->mp) {
		rc = mp_check(r->mp);
		mp_destroy(r->mp);
		free(r->mp);
	}
	if (r->mmgr) {
		rc = mm_check(r->mpool, &r->mmgr, 1);
		if (rc == 0 && mm_pool_used(r->mpool))
			rc = -EFAULT;
		mm_mgr_destroy(r->mmgr);
		mm_pool_destroy(r->mpool);
		free(r->mmgr);
		free(r->mpool);
	}
	if (r->lfs_blocks) {
		uint32_t n = 0;

		while (cds_lfs_pop_blocking(&r->lfs))
			n++;
		if (n != POOL_BLOCKS)
			rc = -EFAULT;
		cds_lfs_destroy(&r->lfs);
		free(r->lfs_blocks);
	}
	free(r->hot);
	if (rc != 0)
		bench_die("%s %s %u threads: the check after the run failed: "
			  "%s",
			  peer_name[r->peer], wl_name[r->wl], r->nthreads,
			  kvp_strerror(rc));
}

/* One measurement; returns Mops/s and the others' CPU share. */
static double measure(enum wl w, enum peer p, unsigned nthreads,
		      const struct opts *o, double *others)
{
	struct run *r = bench_aligned_zalloc(sizeof(*r));
	pthread_t *tids = bench_xcalloc(nthreads, sizeof(*tids));
	uint64_t ops = 0;
	double mops;

	r->wl = w;
	r->peer = p;
	r->nthreads = nthreads;
	r->batch = w == WL_BATCH16 ? MAX_BATCH : 1;
	r->thr = bench_aligned_zalloc(nthreads * sizeof(*r->thr));
	setup(r);
	bench_sync_init(&r->sync, nthreads);
	for (unsigned i = 0; i < nthreads; i++) {
		r->thr[i].run = r;
		r->thr[i].tid = i;
		bench_thread_create(&tids[i],
				    is_pool_wl(w) ? pool_worker : seq_worker,
				    &r->thr[i]);
	}
	*others = bench_sync_window(&r->sync, o->common.seconds);
	for (unsigned i = 0; i < nthreads; i++) {
		bench_thread_join(tids[i]);
		ops += r->thr[i].ops;
	}
	mops = bench_sync_mops(&r->sync, ops);
	bench_sync_destroy(&r->sync);
	check_and_teardown(r);
	if (ops == 0)
		bench_die("%s %s %u threads: no operation completed",
			  peer_name[p], wl_name[w], nthreads);
	free(r->thr);
	free(r);
	free(tids);
	return mops;
}

/* ------------------------------------------------------------- options */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvpool bench [options]\n"
		"Pool, sequence and prefix benchmarks against peers measured "
		"in the same run.\n"
		"  --threads LIST      thread counts (default 1,2,4,8).\n"
		"  --seconds S         one measurement (default 0.2).\n"
		"  --reps R            measurements per cell, the median is "
		"reported\n"
		"                      (default 3).\n"
		"  --workloads LIST    of "
		"pair,batch16,decode,fork,prefix,churn "
		"(default all).\n"
		"  --csv FILE          also write the cells as CSV ('-': "
		"stdout, instead\n"
		"                      of the table).\n"
		"  --plot FILE         FILE.png: throughput against threads "
		"(needs\n"
		"                      gnuplot); FILE.gp: the gnuplot script "
		"that draws\n"
		"                      FILE.png.\n"
		"  -h, --help          this text; kvpool(1) has the details.\n"
		"peers: kvpool, lockfree-stack (kvpool without thread caches), "
		"mutex, cds_lfs\n"
		"(liburcu), jemalloc (%s)\n",
		HAVE_JEMALLOC ? "mallocx/sdallocx" : "not in this build");
}

/* kvpool bench's own options (bench_parse_args_into's callback): false
 * for an unknown one; a bad --workloads list exits 2. */
static bool parse_opt(void *ctx, const char *name, const char *val)
{
	struct opts *o = ctx;

	if (!strcmp(name, "--plot")) {
		o->plot = val;
	} else if (!strcmp(name, "--workloads")) {
		char *copy = strdup(val), *save = NULL, *tok;
		int n, w;

		if (!copy)
			bench_die("out of memory");
		memset(o->run, 0, sizeof(o->run));
		for (tok = strtok_r(copy, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			for (w = 0; w < NUM_WL; w++)
				if (!strcmp(tok, wl_name[w]))
					break;
			if (w == NUM_WL) {
				fprintf(stderr,
					"kvpool bench: --workloads: unknown "
					"workload '%s'\n",
					tok);
				exit(2);
			}
			o->run[w] = true;
		}
		free(copy);
		for (n = 0, w = 0; w < NUM_WL; w++)
			n += o->run[w];
		if (n == 0) { /* '' or ',': an empty table is no run */
			fprintf(stderr, "kvpool bench: --workloads: expected "
					"one or more workloads, got '%s'\n",
				val);
			exit(2);
		}
	} else {
		return false;
	}
	return true;
}

/* ------------------------------------------------------------------ main */

/* The table's heading: the run's parameters and the columns. */
static void print_heading(const struct opts *o)
{
	const struct bench_opts *c = &o->common;
	unsigned cells = 0;

	for (int w = 0; w < NUM_WL; w++)
		for (int p = 0; p < NUM_PEERS; p++)
			cells += o->run[w] && applies((enum wl)w, (enum peer)p);
	printf("kvpool bench: kvpool %d.%d.%d, %ld online CPUs, %.2f s "
	       "per measurement, median of %u\n",
	       KVP_VERSION_MAJOR, KVP_VERSION_MINOR, KVP_VERSION_PATCH,
	       sysconf(_SC_NPROCESSORS_ONLN), c->seconds, c->reps);
	bench_report_busy("before the run");
	printf("  estimated run time: %.0f s\n",
	       cells * c->nthreads_list * c->reps * (c->seconds + 0.05));
	printf("  Mops/s: ops per second, all threads; "
	       "ns/op/thr = threads * 1e3 / Mops\n");
	printf("  kvpool x: kvpool's throughput / the row's (higher "
	       "is better for kvpool)\n");
	bench_print_others_legend();
	printf("%-8s %4s  %-15s %9s %11s %8s %9s\n", "workload", "thr",
	       "peer", "Mops/s", "ns/op/thr", "others", "kvpool x");
}

/* Workload w at the ti-th thread count: every peer's reps, interleaved
 * (odd reps run the peers in reverse order), their medians stored, and
 * the table's rows if `table`. */
static void run_cell(int w, unsigned ti, struct opts *o, bool table)
{
	unsigned n = o->common.threads[ti];

	for (unsigned rep = 0; rep < o->common.reps; rep++)
		for (int q = 0; q < NUM_PEERS; q++) {
			int p = rep % 2 ? NUM_PEERS - 1 - q : q;

			if (!applies((enum wl)w, (enum peer)p))
				continue;
			*bench_sample(p, rep) =
				measure((enum wl)w, (enum peer)p, n, o,
					bench_sample_others(p, rep));
		}
	for (int p = 0; p < NUM_PEERS; p++)
		if (applies((enum wl)w, (enum peer)p))
			bench_res_store(w, ti, p);
	for (int p = 0; table && p < NUM_PEERS; p++) {
		double m = *bench_res(w, ti, p);

		if (!applies((enum wl)w, (enum peer)p))
			continue;
		printf("%-8s %4u  %-15s %9.3f %11.1f", wl_name[w], n,
		       peer_name[p], m, bench_ns_per_op(m, n));
		bench_print_others(*bench_res_others(w, ti, p));
		if (p != P_KVPOOL)
			printf(" %8.2fx", *bench_res(w, ti, P_KVPOOL) / m);
		printf("\n");
	}
	fflush(stdout);
}

/* Every cell as a CSV row. */
static void write_csv(FILE *csv, const struct opts *o)
{
	const struct bench_opts *c = &o->common;

	fprintf(csv, "workload,peer,threads,median_mops,"
		     "ns_per_op_per_thread,kvpool_ratio\n");
	for (int w = 0; w < NUM_WL; w++)
		for (unsigned ti = 0; o->run[w] && ti < c->nthreads_list; ti++)
			for (int p = 0; p < NUM_PEERS; p++) {
				double m = *bench_res(w, ti, p);

				if (!applies((enum wl)w, (enum peer)p))
					continue;
				fprintf(csv, "%s,%s,%u,%.4f,%.4f,%.4f\n",
					wl_name[w], peer_name[p],
					c->threads[ti], m,
					bench_ns_per_op(m, c->threads[ti]),
					*bench_res(w, ti, P_KVPOOL) / m);
			}
}

/* --plot: throughput against threads, a series per workload and peer;
 * 1 if the plot was not written. */
static int write_plot(const struct opts *o)
{
	const struct bench_opts *c = &o->common;
	struct plot_series s[NUM_WL * NUM_PEERS];
	char names[NUM_WL * NUM_PEERS][48];
	double x[NUM_WL * NUM_PEERS][BENCH_MAX_THREADS];
	double y[NUM_WL * NUM_PEERS][BENCH_MAX_THREADS];
	unsigned ns = 0;

	for (int w = 0; w < NUM_WL; w++)
		for (int p = 0; o->run[w] && p < NUM_PEERS; p++) {
			if (!applies((enum wl)w, (enum peer)p))
				continue;
			snprintf(names[ns], sizeof(names[ns]), "%s %s",
				 wl_name[w], peer_name[p]);
			for (unsigned ti = 0; ti < c->nthreads_list; ti++) {
				x[ns][ti] = c->threads[ti];
				y[ns][ti] = *bench_res(w, ti, p);
			}
			s[ns] = (struct plot_series){names[ns], x[ns], y[ns],
						     c->nthreads_list};
			ns++;
		}
	/* A plot asked for and not written is a failure. */
	return plot_png("kvpool bench", o->plot, "throughput against threads",
			"threads", "Mops/s (log)",
			PLOT_LOGX | PLOT_LOGY | PLOT_XTICS, s, ns) != 0;
}

int bench_main(int argc, char **argv)
{
	struct opts o;
	struct bench_opts *c = &o.common;
	bool table;
	FILE *csv;
	int rc = 0;

	memset(&o, 0, sizeof(o));
	bench_opts_defaults(c);
	c->threads[0] = 1;
	c->threads[1] = 2;
	c->threads[2] = 4;
	c->threads[3] = 8;
	c->nthreads_list = 4;
	c->seconds = 0.2;
	c->reps = 3;
	for (int w = 0; w < NUM_WL; w++)
		o.run[w] = true;
	bench_parse_args_into(c, argc, argv, usage, parse_opt, &o);
	csv = bench_csv_open(c->csv);
	table = csv != stdout;

	bench_res_init(NUM_WL, c->nthreads_list, NUM_PEERS, c->reps);
	if (table)
		print_heading(&o);
	for (int w = 0; w < NUM_WL; w++) {
		if (!o.run[w])
			continue;
		if (table)
			printf("-- %s: one op = one %s\n", wl_name[w],
			       wl_unit[w]);
		for (unsigned ti = 0; ti < c->nthreads_list; ti++)
			run_cell(w, ti, &o, table);
	}
	if (csv)
		write_csv(csv, &o);
	bench_csv_close(csv, c->csv);
	if (table)
		bench_report_busy("after the run");
	if (o.plot)
		rc = write_plot(&o);
	bench_res_free();
	return rc;
}
