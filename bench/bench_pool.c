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

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvpool.h>

#ifdef KVP_BENCH_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

/* ------------------------------------------------------------ parameters */

#define RING 8		     /* live allocations per thread */
#define RING_SLOTS (RING + 1) /* one more: allocate before freeing */
#define MAX_BATCH 16
#define WARMUP_ITERS 2000
#define MAX_THREADS 256
#define MAX_REPS 1000
#define CACHE_LINE 64
#define OBJ_SIZE 64 /* jemalloc object size */

#define DEFAULT_SECONDS 0.3
#define DEFAULT_REPS 5
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
	unsigned threads[MAX_THREADS];
	unsigned nthreads_list;
	double seconds;
	unsigned reps;
	uint32_t cache;
	uint32_t blocks;
	const char *csv;
};

/* --------------------------------------------------------------- helpers */

__attribute__((noreturn, cold, format(printf, 1, 2))) static void
die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("bench_pool: ", stderr);
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

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p)
		die("out of memory");
	return p;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *v, unsigned n)
{
	double *s = xcalloc(n, sizeof(*s));
	double m;

	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return m;
}

/* ------------------------------------------------------ run-wide context */

/* The mutex-wrapped shared allocator. */
struct mutex_pool {
	pthread_mutex_t lock;
	uint32_t n;	  /* blocks */
	uint32_t top;	  /* free ids in stack[0..top) */
	uint32_t *stack;  /* free ids */
	uint32_t *refcnt; /* per-block reference count, 0 = free */
};

struct run;

/* Per-thread slot, one cache line or more, written by its thread only. */
struct thr {
	_Alignas(CACHE_LINE) struct run *run;
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
	pthread_barrier_t start;
	struct kvp_pool *pool;
	struct mutex_pool *mp;
	struct thr *thr;
	_Alignas(CACHE_LINE) _Atomic int stop;
	_Alignas(CACHE_LINE) _Atomic int64_t t0; /* min over barrier exits */
	_Atomic int64_t t1;			  /* max over loop exits */
};

static void run_started(struct run *r)
{
	atomic_min_i64(&r->t0, now_ns());
}

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
		die("kvp_pool_alloc(%u) failed: %s", n, kvp_strerror(rc));
}

static inline void kvp_tls_free(struct kvp_tls *L, const uint32_t *ids,
				uint32_t n)
{
	int rc = kvp_pool_free(L->pool, ids, n);

	if (rc != 0)
		die("kvp_pool_free(%u) failed: %s", n, kvp_strerror(rc));
}

static inline void kvp_tls_fini(struct kvp_tls *L, struct thr *t)
{
	(void)L;
	(void)t;
}

/* --------------------------------------------------- peer: mutex freelist */

struct mtx_tls {
	struct mutex_pool *mp;
};

static inline void mtx_tls_init(struct mtx_tls *L, struct thr *t)
{
	L->mp = t->run->mp;
}

static inline void mtx_tls_alloc(struct mtx_tls *L, uint32_t *ids,
				 uint32_t n)
{
	struct mutex_pool *mp = L->mp;

	pthread_mutex_lock(&mp->lock);
	if (mp->top < n) {
		pthread_mutex_unlock(&mp->lock);
		die("mutex freelist: alloc(%u) failed: pool exhausted", n);
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = mp->stack[--mp->top];

		if (mp->refcnt[id] != 0)
			die("mutex freelist: free list holds used block %u",
			    id);
		mp->refcnt[id] = 1;
		ids[i] = id;
	}
	pthread_mutex_unlock(&mp->lock);
}

static inline void mtx_tls_free(struct mtx_tls *L, const uint32_t *ids,
				uint32_t n)
{
	struct mutex_pool *mp = L->mp;

	pthread_mutex_lock(&mp->lock);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = ids[i];

		if (id >= mp->n || mp->refcnt[id] == 0)
			die("mutex freelist: bad free of block %u", id);
		if (--mp->refcnt[id] == 0)
			mp->stack[mp->top++] = id;
	}
	pthread_mutex_unlock(&mp->lock);
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
		die("bare array: alloc(%u) failed: share exhausted", n);
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
			die("mallocx(%d) failed", OBJ_SIZE);
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
		pthread_barrier_wait(&r->start);                              \
		run_started(r);                                               \
		while (!atomic_load_explicit(&r->stop,                        \
					     memory_order_relaxed)) {         \
			PFX##_tls_alloc(&L, ring[head], n);                   \
			old = head + 1 == RING_SLOTS ? 0 : head + 1;          \
			PFX##_tls_free(&L, ring[old], n);                     \
			head = old;                                           \
			ops += n;                                             \
		}                                                             \
		atomic_max_i64(&r->t1, now_ns());                             \
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
	die("peer %d is not available in this build", (int)p);
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
		die("kvp_pool_create(num_blocks=%u, cache_blocks=%u%s) failed: "
		    "%s",
		    cfg.num_blocks, cfg.cache_blocks,
		    nocache ? ", KVP_POOL_NOCACHE" : "", kvp_strerror(rc));
	return pool;
}

static void check_kvpool(struct kvp_pool *pool, const char *what,
			 uint64_t ops)
{
	struct kvp_pool_stats st;
	int rc = kvp_pool_check(pool);

	if (rc != 0)
		die("%s: kvp_pool_check failed after the run: %s", what,
		    kvp_strerror(rc));
	memset(&st, 0, sizeof(st));
	kvp_pool_stats(pool, &st);
	if (st.free != st.total || st.used != 0)
		die("%s: after the run %llu of %llu blocks are free "
		    "(used %llu): blocks leaked",
		    what, (unsigned long long)st.free,
		    (unsigned long long)st.total, (unsigned long long)st.used);
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
	struct cpu_sample c0, c1;
	struct run *r;
	pthread_t *tids = xcalloc(nthreads, sizeof(*tids));
	uint32_t *bare_mem = NULL;
	worker_fn fn = worker_for(p, w);
	uint64_t ops = 0;
	double mops;
	int64_t elapsed;
	int rc;

	r = aligned_alloc(CACHE_LINE, (sizeof(*r) + CACHE_LINE - 1) /
					      CACHE_LINE * CACHE_LINE);
	if (!r)
		die("out of memory");
	memset(r, 0, sizeof(*r));
	r->peer = p;
	r->batch = wl_batch[w];
	r->nthreads = nthreads;
	atomic_init(&r->stop, 0);
	atomic_init(&r->t0, INT64_MAX);
	atomic_init(&r->t1, 0);
	r->thr = aligned_alloc(CACHE_LINE, nthreads * sizeof(struct thr));
	if (!r->thr)
		die("out of memory");
	memset(r->thr, 0, nthreads * sizeof(struct thr));

	switch (p) {
	case P_KVPOOL:
	case P_NOCACHE:
		r->pool = make_pool(o, p == P_NOCACHE);
		break;
	case P_MUTEX:
		r->mp = xcalloc(1, sizeof(*r->mp));
		pthread_mutex_init(&r->mp->lock, NULL);
		r->mp->n = o->blocks;
		r->mp->stack = xcalloc(o->blocks, sizeof(uint32_t));
		r->mp->refcnt = xcalloc(o->blocks, sizeof(uint32_t));
		for (uint32_t i = 0; i < o->blocks; i++)
			r->mp->stack[i] = o->blocks - 1 - i; /* pops 0, 1, ... */
		r->mp->top = o->blocks;
		break;
	case P_BARE: {
		uint32_t share = o->blocks / nthreads;

		bare_mem = xcalloc(o->blocks, sizeof(uint32_t));
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

	rc = pthread_barrier_init(&r->start, NULL, nthreads + 1);
	if (rc != 0)
		die("pthread_barrier_init: %s", strerror(rc));
	for (unsigned i = 0; i < nthreads; i++) {
		r->thr[i].run = r;
		r->thr[i].tid = i;
		rc = pthread_create(&tids[i], NULL, fn, &r->thr[i]);
		if (rc != 0)
			die("pthread_create: %s", strerror(rc));
	}
	pthread_barrier_wait(&r->start);
	run_started(r);
	cpu_sample(&c0);
	sleep_seconds(o->seconds);
	cpu_sample(&c1);
	atomic_store_explicit(&r->stop, 1, memory_order_relaxed);
	*others = others_share(&c0, &c1);
	for (unsigned i = 0; i < nthreads; i++) {
		rc = pthread_join(tids[i], NULL);
		if (rc != 0)
			die("pthread_join: %s", strerror(rc));
		ops += r->thr[i].ops;
	}
	elapsed = atomic_load(&r->t1) - atomic_load(&r->t0);
	if (elapsed <= 0)
		elapsed = 1;
	mops = (double)ops * 1e3 / (double)elapsed;

	/* Verify: every block is back, nothing was lost or duplicated. */
	switch (p) {
	case P_KVPOOL:
	case P_NOCACHE:
		check_kvpool(r->pool, peer_name[p], ops);
		kvp_pool_unref(r->pool);
		break;
	case P_MUTEX:
		if (r->mp->top != r->mp->n)
			die("mutex freelist: %u of %u blocks free after the run",
			    r->mp->top, r->mp->n);
		for (uint32_t i = 0; i < r->mp->n; i++)
			if (r->mp->refcnt[i] != 0)
				die("mutex freelist: block %u still used", i);
		pthread_mutex_destroy(&r->mp->lock);
		free(r->mp->stack);
		free(r->mp->refcnt);
		free(r->mp);
		break;
	case P_BARE:
		for (unsigned i = 0; i < nthreads; i++)
			if (r->thr[i].bare_top != r->thr[i].bare_cap)
				die("bare array: thread %u ended with %u of "
				    "%u ids",
				    i, r->thr[i].bare_top, r->thr[i].bare_cap);
		free(bare_mem);
		break;
	case P_JEMALLOC:
	case NUM_PEERS:
		break;
	}
	if (ops == 0)
		die("%s %s %u threads: no operation completed in %.3f s",
		    wl_name[w], peer_name[p], nthreads, o->seconds);

	pthread_barrier_destroy(&r->start);
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
		DEFAULT_SECONDS, DEFAULT_REPS, DEFAULT_BLOCKS);
}

static unsigned long parse_ulong(const char *opt, const char *s,
				 unsigned long lo, unsigned long hi)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "bench_pool: %s: expected an integer in "
				"[%lu, %lu], got '%s'\n",
			opt, lo, hi, s);
		exit(2);
	}
	return v;
}

static void parse_threads(struct opts *o, const char *s)
{
	char *copy = strdup(s), *save = NULL, *tok;

	if (!copy)
		die("out of memory");
	o->nthreads_list = 0;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->nthreads_list == MAX_THREADS) {
			fprintf(stderr, "bench_pool: --threads: too many "
					"entries\n");
			exit(2);
		}
		o->threads[o->nthreads_list++] =
			(unsigned)parse_ulong("--threads", tok, 1, MAX_THREADS);
	}
	free(copy);
	if (o->nthreads_list == 0) {
		fprintf(stderr, "bench_pool: --threads: empty list\n");
		exit(2);
	}
}

static void parse_args(struct opts *o, int argc, char **argv)
{
	memset(o, 0, sizeof(*o));
	o->threads[0] = 1;
	o->threads[1] = 2;
	o->threads[2] = 8;
	o->nthreads_list = 3;
	o->seconds = DEFAULT_SECONDS;
	o->reps = DEFAULT_REPS;
	o->cache = 0;
	o->blocks = DEFAULT_BLOCKS;

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
			fprintf(stderr, "bench_pool: unexpected argument '%s'\n",
				a);
			usage(stderr);
			exit(2);
		}
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a) : strlen(a);
		if (len >= sizeof(name)) {
			fprintf(stderr, "bench_pool: unknown option '%s'\n", a);
			exit(2);
		}
		memcpy(name, a, len);
		name[len] = '\0';
		if (eq)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else {
			fprintf(stderr, "bench_pool: %s needs a value\n", name);
			exit(2);
		}

		if (!strcmp(name, "--threads")) {
			parse_threads(o, val);
		} else if (!strcmp(name, "--seconds")) {
			char *end;

			errno = 0;
			o->seconds = strtod(val, &end);
			if (errno || end == val || *end || !(o->seconds > 0) ||
			    o->seconds > 3600) {
				fprintf(stderr, "bench_pool: --seconds: "
						"expected a number in (0, "
						"3600], got '%s'\n",
					val);
				exit(2);
			}
		} else if (!strcmp(name, "--reps")) {
			o->reps = (unsigned)parse_ulong(name, val, 1, MAX_REPS);
		} else if (!strcmp(name, "--cache")) {
			o->cache = (uint32_t)parse_ulong(name, val, 0,
							 KVP_MAX_CACHE_BLOCKS);
		} else if (!strcmp(name, "--blocks")) {
			o->blocks = (uint32_t)parse_ulong(name, val, 1,
							  KVP_MAX_BLOCKS);
		} else if (!strcmp(name, "--csv")) {
			o->csv = val;
		} else {
			fprintf(stderr, "bench_pool: unknown option '%s'\n",
				name);
			usage(stderr);
			exit(2);
		}
	}

	/* Every thread holds up to RING_SLOTS batches; the bare array needs
	 * them in its own share, the shared pools a comfortable margin. */
	for (unsigned i = 0; i < o->nthreads_list; i++) {
		uint64_t need = (uint64_t)o->threads[i] * RING_SLOTS * MAX_BATCH;

		if ((uint64_t)o->blocks < 2 * need) {
			fprintf(stderr,
				"bench_pool: --blocks %u is too small for %u "
				"threads (need at least %llu)\n",
				o->blocks, o->threads[i],
				(unsigned long long)(2 * need));
			exit(2);
		}
	}
}

/* ---------------------------------------------------------------- report */

/* results[w][thread index][peer]: median Mops/s, 0 = not measured;
 * others[...]: the largest share of CPU other processes took during one of
 * the cell's measurements (-1 = unknown). */
static double *results, *others_res;
static unsigned res_nthreads;
static unsigned n_noisy;

#define NOISY_SHARE 0.10

static size_t res_index(enum workload w, unsigned ti, enum peer p)
{
	return ((size_t)w * res_nthreads + ti) * NUM_PEERS + p;
}

static double *res(enum workload w, unsigned ti, enum peer p)
{
	return &results[res_index(w, ti, p)];
}

static double *res_others(enum workload w, unsigned ti, enum peer p)
{
	return &others_res[res_index(w, ti, p)];
}

static double ns_per_block(double mops, unsigned threads)
{
	return mops > 0 ? threads * 1e3 / mops : 0;
}

static int find_threads(const struct opts *o, unsigned n)
{
	for (unsigned i = 0; i < o->nthreads_list; i++)
		if (o->threads[i] == n)
			return (int)i;
	return -1;
}

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
		double m = *res(w, ti, (enum peer)p);

		if (!peer_enabled((enum peer)p))
			continue;
		double oth = *res_others(w, ti, (enum peer)p);

		printf("%-8s %4u  %-28s %9.2f %11.2f", wl_name[w], threads,
		       peer_name[p], m, ns_per_block(m, threads));
		if (oth < 0) {
			printf(" %8s", "?");
		} else {
			printf(" %6.0f%%%c", 100 * oth,
			       oth > NOISY_SHARE ? '!' : ' ');
			n_noisy += oth > NOISY_SHARE;
		}
		if (p == P_KVPOOL) {
			double mu = *res(w, ti, P_MUTEX);
			double nc = *res(w, ti, P_NOCACHE);
			double ba = *res(w, ti, P_BARE);

			printf(" %8.2fx %9.2fx %9.2fx", m / mu, m / nc,
			       ba / m);
		}
		printf("\n");
	}
	printf("\n");
	fflush(stdout);
}

static unsigned n_pass, n_fail, n_skip;

static void verdict(bool ok, const char *label)
{
	printf("  [%s] %s\n", ok ? "PASS" : "FAIL", label);
	if (ok)
		n_pass++;
	else
		n_fail++;
}

static void print_targets(const struct opts *o)
{
	int t1 = find_threads(o, 1), t2 = find_threads(o, 2),
	    t8 = find_threads(o, 8);
	char line[512];

	printf("targets\n");

	/* (1) pair at 2 threads: kvpool >= 10x mutex free list. */
	if (t2 < 0) {
		printf("  [SKIP] (1) pair, 2 threads: kvpool >= 10x mutex "
		       "freelist (2 threads not measured)\n");
		n_skip++;
	} else {
		double k = *res(WL_PAIR, (unsigned)t2, P_KVPOOL);
		double m = *res(WL_PAIR, (unsigned)t2, P_MUTEX);

		snprintf(line, sizeof(line),
			 "(1) pair, 2 threads: kvpool %.2f Mops/s >= 10 x "
			 "mutex freelist %.2f Mops/s  (ratio %.2fx, need "
			 ">= 10x)",
			 k, m, k / m);
		verdict(k >= 10 * m, line);
	}

	/* (2) pair: kvpool at 8 threads >= 0.8x kvpool at 2 threads. */
	if (t2 < 0 || t8 < 0) {
		printf("  [SKIP] (2) pair: kvpool 8 threads >= 0.8x 2 threads "
		       "(2 and 8 threads not both measured)\n");
		n_skip++;
	} else {
		double k8 = *res(WL_PAIR, (unsigned)t8, P_KVPOOL);
		double k2 = *res(WL_PAIR, (unsigned)t2, P_KVPOOL);

		snprintf(line, sizeof(line),
			 "(2) pair: kvpool 8 threads %.2f Mops/s >= 0.8 x "
			 "2 threads %.2f Mops/s  (ratio %.2f, need >= 0.80)",
			 k8, k2, k8 / k2);
		verdict(k8 >= 0.8 * k2, line);
	}

	/* (3) batch16 per-block cost: kvpool <= 3x bare array, 1 thread;
	 * 2 threads printed too. */
	for (int pass = 0; pass < 2; pass++) {
		unsigned n = pass ? 2 : 1;
		int ti = pass ? t2 : t1;
		double k, b;

		if (ti < 0) {
			printf("  [%s] (3) batch16, %u thread%s: kvpool cost "
			       "<= 3x bare array (not measured)\n",
			       pass ? "INFO" : "SKIP", n, n > 1 ? "s" : "");
			if (!pass)
				n_skip++;
			continue;
		}
		k = ns_per_block(*res(WL_BATCH16, (unsigned)ti, P_KVPOOL), n);
		b = ns_per_block(*res(WL_BATCH16, (unsigned)ti, P_BARE), n);
		snprintf(line, sizeof(line),
			 "(3) batch16, %u thread%s: kvpool %.2f ns/block <= "
			 "3 x bare array %.2f ns/block  (ratio %.2fx, need "
			 "<= 3x)",
			 n, n > 1 ? "s" : "", k, b, k / b);
		if (pass)
			printf("  [INFO] %s: would %s\n", line,
			       k <= 3 * b ? "PASS" : "FAIL");
		else
			verdict(k <= 3 * b, line);
	}

	printf("targets: %u passed, %u FAILED, %u skipped\n", n_pass, n_fail,
	       n_skip);
	if (n_noisy)
		printf("warning: %u cell%s marked '!' were measured while other "
		       "processes took more than %.0f%% of the machine's CPU:\n"
		       "         their numbers and the targets built on them are "
		       "unreliable; rerun on an idle machine\n",
		       n_noisy, n_noisy > 1 ? "s" : "", 100 * NOISY_SHARE);
}

static void write_csv(const struct opts *o, FILE *f)
{
	fprintf(f, "workload,peer,threads,rep_median_mops,ns_per_block\n");
	for (int w = 0; w < NUM_WL; w++)
		for (unsigned ti = 0; ti < o->nthreads_list; ti++)
			for (int p = 0; p < NUM_PEERS; p++) {
				double m = *res((enum workload)w, ti,
						(enum peer)p);

				if (!peer_enabled((enum peer)p))
					continue;
				fprintf(f, "%s,%s,%u,%.4f,%.4f\n", wl_name[w],
					peer_csv[p], o->threads[ti], m,
					ns_per_block(m, o->threads[ti]));
			}
}

static void report_busy(const char *when)
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

/*
 * Measures every peer for one workload and thread count, o->reps times,
 * the peers interleaved within each rep so that slow drifts of the machine
 * hit every peer alike, and stores the medians.
 */
static void measure_group(enum workload w, unsigned ti, unsigned n,
			  const struct opts *o, double *samples,
			  double *sample_others)
{
	for (unsigned rep = 0; rep < o->reps; rep++)
		for (int p = 0; p < NUM_PEERS; p++) {
			size_t k = (size_t)p * o->reps + rep;

			if (peer_enabled((enum peer)p))
				samples[k] = measure((enum peer)p, w, n, o,
						     &sample_others[k]);
		}
	for (int p = 0; p < NUM_PEERS; p++) {
		const double *oth = sample_others + (size_t)p * o->reps;
		double worst = 0;

		if (!peer_enabled((enum peer)p))
			continue;
		*res(w, ti, (enum peer)p) =
			median(samples + (size_t)p * o->reps, o->reps);
		for (unsigned rep = 0; rep < o->reps && worst >= 0; rep++)
			worst = oth[rep] < 0 ? -1 : oth[rep] > worst ? oth[rep]
								: worst;
		*res_others(w, ti, (enum peer)p) = worst;
	}
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
	struct opts o;
	FILE *csv = NULL;
	double *samples, *sample_others;
	unsigned npeers = 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct kvp_pool_stats st;
	struct kvp_pool *probe;

	parse_args(&o, argc, argv);
	if (o.csv) {
		csv = fopen(o.csv, "w");
		if (!csv) {
			fprintf(stderr, "bench_pool: %s: %s\n", o.csv,
				strerror(errno));
			return 2;
		}
	}
	for (int p = 0; p < NUM_PEERS; p++)
		npeers += peer_enabled((enum peer)p);

	res_nthreads = o.nthreads_list;
	results = xcalloc((size_t)NUM_WL * o.nthreads_list * NUM_PEERS,
			  sizeof(double));
	others_res = xcalloc((size_t)NUM_WL * o.nthreads_list * NUM_PEERS,
			     sizeof(double));
	samples = xcalloc((size_t)NUM_PEERS * o.reps, sizeof(double));
	sample_others = xcalloc((size_t)NUM_PEERS * o.reps, sizeof(double));

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
	       RING, o.seconds, o.reps, npeers,
	       HAVE_JEMALLOC_PEER ? "" : " (built without jemalloc)");
	report_busy("before the run");
	printf("  estimated run time: %.0f s\n",
	       NUM_WL * o.nthreads_list * npeers * o.reps * o.seconds);
	printf("  Mops/s: blocks allocated+freed per second, all threads; "
	       "ns/blk/thr = threads * 1e3 / Mops\n");
	printf("  x mutex, x nocache: kvpool throughput / that peer's "
	       "(higher is better)\n");
	printf("  cost/bare: kvpool ns per block / bare thread-local array ns "
	       "per block (lower is better, 1 = the physical limit)\n");
	printf("  others: most CPU other processes took during a measurement "
	       "of the cell ('!' above %.0f%%: unreliable)\n\n",
	       100 * NOISY_SHARE);
	print_header();
	fflush(stdout);

	for (int w = 0; w < NUM_WL; w++) {
		for (unsigned ti = 0; ti < o.nthreads_list; ti++) {
			unsigned n = o.threads[ti];

			measure_group((enum workload)w, ti, n, &o, samples,
				      sample_others);
			print_group((enum workload)w, ti, n);
		}
	}

	print_targets(&o);
	report_busy("after the run");

	if (csv) {
		write_csv(&o, csv);
		if (fclose(csv) != 0) {
			fprintf(stderr, "bench_pool: %s: %s\n", o.csv,
				strerror(errno));
			return 2;
		}
		printf("CSV written to %s\n", o.csv);
	}
	free(samples);
	free(sample_others);
	free(others_res);
	free(results);
	return 0;
}
