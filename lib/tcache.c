/*
 * tcache.c - per-thread block caches: registry, thread exit, drains.
 *
 * Correctness argument.
 *
 * 1. Owner against drainer (the cache-drain protocol).  A cache's slots and
 *    count are written by its owner thread with plain (relaxed) stores, and
 *    by a drainer only while it has frozen the cache.  The owner brackets
 *    every operation with busy = 1 ... busy = 0 and, after storing busy = 1,
 *    loads `drain`; if set, it leaves without touching the cache.  The
 *    drainer stores drain = 1 for every cache, then waits until each busy
 *    is 0, then takes the slots.  This is Dekker's mutual exclusion: the
 *    owner does (W busy; R drain), the drainer (W drain; R busy), and with
 *    a full barrier between each pair at least one of them sees the other's
 *    store.  The owner's barrier is made asymmetric as in liburcu's memb
 *    flavour: a compiler barrier on the owner's side, and on the drainer's
 *    side sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which executes a
 *    full barrier on every CPU running a thread of this process (a thread
 *    not running gets one at its context switch).  So:
 *      - if the owner's busy = 1 preceded the drainer's membarrier, it is
 *        visible to the drainer's load of busy, which waits for the
 *        owner's release store busy = 0 and then (acquire) sees all its
 *        writes to the cache;
 *      - otherwise the owner's load of drain follows the membarrier and
 *        sees drain = 1, and the owner leaves the cache alone.
 *    Where membarrier is unavailable, both sides use a seq_cst fence.  The
 *    owner never blocks while busy (no lock is taken inside an operation),
 *    so the drainer's wait is bounded by one operation, plus preemption.
 *    An owner that found drain = 1 waits on the pool's drain_lock, which
 *    the drainer holds throughout, and retries; it then loads drain = 0
 *    with acquire, pairing with the drainer's release store, and sees the
 *    drained count.
 *
 * 2. No false exhaustion.  A drain holds pool->drain_lock, which also
 *    guards the attaching of new caches, and freezes every cache of the
 *    pool before emptying them all onto the global stack.  While frozen, no
 *    cache gains or loses a block, so from then on the free blocks are
 *    exactly those on the stack.  The drainer then pops all n ids in one
 *    chain; the pop fails only if the stack, re-read unchanged, held fewer
 *    than n (stack.h): at that moment the whole pool had fewer than n free.
 *
 * 3. Lifetimes.  A cache belongs to its pool and is freed only when the pool
 *    is destroyed; a thread that exits returns its blocks and orphans its
 *    cache, which a later thread adopts.  A thread keeps (pool, uid, cache)
 *    records; uids are never reused, so a record of a destroyed pool never
 *    matches a new pool at the same address.  Thread exit and
 *    kvp_thread_flush touch a pool only after finding it, under
 *    tcache_global_lock, in the list of live pools; pool destruction
 *    removes the pool from that list under the same lock before freeing.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc.h"
#include "tcache.h"
#include "tsan.h"

bool tcache_membarrier_ok;
KVP_TLS struct tcache_tls_last tcache_last;

struct tcache_record {
	struct kvp_pool *pool;
	uint64_t uid;
	struct tcache *tc;
};

/* The calling thread's caches.  Owner thread only. */
struct tcache_thread {
	struct tcache_record *records;
	uint32_t n, cap;
	bool registered; /* exit destructor armed */
};
static KVP_TLS struct tcache_thread self;

/* Guards the live-pool list and cache ownership (attach, orphan, adopt). */
static pthread_mutex_t tcache_global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvp_pool *live_pools; /* tcache_global_lock */
static _Atomic uint64_t last_uid;   /* atomic */
static pthread_key_t exit_key;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void thread_exit(void *arg);

static int membarrier(int cmd)
{
	return (int)syscall(__NR_membarrier, cmd, 0, 0);
}

static void setup(void)
{
	kvp_check_pthread(pthread_key_create(&exit_key, thread_exit));
	tcache_membarrier_ok =
		membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

uint64_t tcache_next_uid(void)
{
	kvp_check_pthread(pthread_once(&setup_once, setup));
	/* Relaxed: uniqueness is all that matters. */
	return atomic_fetch_add_explicit(&last_uid, 1, memory_order_relaxed) +
	       1;
}

static bool pool_is_live(const struct kvp_pool *pool, uint64_t uid)
{
	for (struct kvp_pool *p = live_pools; p; p = p->live_next)
		if (p == pool && p->uid == uid)
			return true;
	return false;
}

void tcache_pool_created(struct kvp_pool *pool)
{
	kvp_check_pthread(pthread_mutex_lock(&tcache_global_lock));
	pool->live_next = live_pools;
	live_pools = pool;
	kvp_check_pthread(pthread_mutex_unlock(&tcache_global_lock));
}

static size_t tcache_size(uint32_t cap)
{
	return sizeof(struct tcache) + (size_t)cap * sizeof(uint32_t);
}

void tcache_pool_destroyed(struct kvp_pool *pool)
{
	struct kvp_pool **pp;
	struct tcache *tc, *next;

	kvp_check_pthread(pthread_mutex_lock(&tcache_global_lock));
	for (pp = &live_pools; *pp; pp = &(*pp)->live_next) {
		if (*pp == pool) {
			*pp = pool->live_next;
			break;
		}
	}
	kvp_check_pthread(pthread_mutex_unlock(&tcache_global_lock));

	tc = atomic_load_explicit(&pool->tcaches, memory_order_acquire);
	for (; tc; tc = next) {
		next = tc->next;
		kvp_free_aligned(tc, KVP_CACHELINE, tcache_size(tc->cap));
	}
}

/* Blocks until the drain in progress on tc's pool has finished. */
void tcache_wait_drain(struct tcache *tc)
{
	kvp_check_pthread(pthread_mutex_lock(&tc->pool->drain_lock));
	kvp_check_pthread(pthread_mutex_unlock(&tc->pool->drain_lock));
}

static void tcache_enter_wait(struct tcache *tc)
{
	while (!tcache_enter(tc))
		tcache_wait_drain(tc);
}

void tcache_flush_half(struct tcache *tc)
{
	struct kvp_pool *pool = tc->pool;
	uint32_t c = tcache_count(tc);
	uint32_t h = c / 2;

	if (h == 0)
		return;
	/* The oldest half goes; the hottest ids stay. */
	stack_push_ids(&pool->stack, pool->next, tc->slots, h);
	memmove(tc->slots, tc->slots + h, (c - h) * sizeof(uint32_t));
	tcache_set_count(tc, c - h);
}

/* Owner: returns every parked block to the global stack. */
static void tcache_flush_all(struct tcache *tc)
{
	uint32_t c;

	tcache_enter_wait(tc);
	c = tcache_count(tc);
	if (c) {
		stack_push_ids(&tc->pool->stack, tc->pool->next, tc->slots, c);
		tcache_set_count(tc, 0);
	}
	tcache_exit(tc);
}

/* tcache_global_lock held: drops records of pools that no longer exist. */
static void prune_records(void)
{
	uint32_t i = 0;

	while (i < self.n) {
		struct tcache_record *r = &self.records[i];

		if (pool_is_live(r->pool, r->uid)) {
			i++;
			continue;
		}
		*r = self.records[--self.n];
	}
	if (tcache_last.tc && !pool_is_live(tcache_last.pool, tcache_last.uid))
		memset(&tcache_last, 0, sizeof(tcache_last));
}

/* tcache_global_lock and pool->drain_lock held. */
static struct tcache *attach(struct kvp_pool *pool)
{
	struct tcache *tc;

	tc = atomic_load_explicit(&pool->tcaches, memory_order_relaxed);
	for (; tc; tc = tc->next) {
		if (!atomic_load_explicit(&tc->owner, memory_order_relaxed)) {
			atomic_store_explicit(&tc->owner, &self,
					      memory_order_relaxed);
			return tc;
		}
	}
	tc = kvp_malloc_aligned(KVP_CACHELINE, tcache_size(pool->cache_cap));
	if (!tc)
		return NULL;
	memset(tc, 0, sizeof(*tc));
	tc->pool = pool;
	tc->cap = pool->cache_cap;
	atomic_init(&tc->owner, &self);
	tc->next = atomic_load_explicit(&pool->tcaches, memory_order_relaxed);
	/* Release: publishes the initialised cache to lock-free walkers. */
	atomic_store_explicit(&pool->tcaches, tc, memory_order_release);
	return tc;
}

struct tcache *tcache_get_slow(struct kvp_pool *pool)
{
	struct tcache *tc = NULL;

	if (pool->cache_cap == 0)
		return NULL;
	for (uint32_t i = 0; i < self.n; i++) {
		struct tcache_record *r = &self.records[i];

		if (r->pool == pool && r->uid == pool->uid) {
			tc = r->tc;
			goto found;
		}
	}

	kvp_check_pthread(pthread_mutex_lock(&tcache_global_lock));
	if (!self.registered) {
		/* Arms thread_exit(); the value only has to be non-NULL. */
		if (pthread_setspecific(exit_key, &self) != 0)
			goto out;
		self.registered = true;
	}
	prune_records();
	if (self.n == self.cap) {
		uint32_t cap = self.cap ? 2 * self.cap : 4;
		struct tcache_record *r =
			kvp_malloc(cap * sizeof(*self.records));

		if (!r)
			goto out;
		if (self.n)
			memcpy(r, self.records, self.n * sizeof(*r));
		kvp_free(self.records, self.cap * sizeof(*self.records));
		self.records = r;
		self.cap = cap;
	}
	kvp_check_pthread(pthread_mutex_lock(&pool->drain_lock));
	tc = attach(pool);
	kvp_check_pthread(pthread_mutex_unlock(&pool->drain_lock));
	if (tc)
		self.records[self.n++] = (struct tcache_record){
			.pool = pool, .uid = pool->uid, .tc = tc};
out:
	kvp_check_pthread(pthread_mutex_unlock(&tcache_global_lock));
	if (!tc)
		return NULL;
found:
	tcache_last = (struct tcache_tls_last){
		.pool = pool, .uid = pool->uid, .tc = tc};
	return tc;
}

/* Returns the calling thread's blocks; orphans its caches if `leave`. */
static void release_all(bool leave)
{
	kvp_check_pthread(pthread_mutex_lock(&tcache_global_lock));
	prune_records();
	for (uint32_t i = 0; i < self.n; i++) {
		struct tcache *tc = self.records[i].tc;

		tcache_flush_all(tc);
		if (leave)
			atomic_store_explicit(&tc->owner, NULL,
					      memory_order_relaxed);
	}
	kvp_check_pthread(pthread_mutex_unlock(&tcache_global_lock));
}

static void thread_exit(void *arg)
{
	(void)arg;
	release_all(true);
	kvp_free(self.records, self.cap * sizeof(*self.records));
	memset(&self, 0, sizeof(self));
	memset(&tcache_last, 0, sizeof(tcache_last));
}

KVP_API void kvp_thread_flush(void)
{
	if (self.n)
		release_all(false);
}

static void drainer_fence(void)
{
	if (!tcache_membarrier_ok) {
		atomic_thread_fence(memory_order_seq_cst);
		return;
	}
	if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
		kvp_fatal("membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed");
}

uint32_t tcache_drain_alloc(struct kvp_pool *pool, uint32_t min, uint32_t max,
			    uint32_t *ids)
{
	struct tcache *head, *tc;
	uint32_t first, k;

	kvp_check_pthread(pthread_mutex_lock(&pool->drain_lock));
	/* Acquire: pairs with attach()'s release; no cache can be attached
	 * while we hold drain_lock, so this list is complete. */
	head = atomic_load_explicit(&pool->tcaches, memory_order_acquire);
	for (tc = head; tc; tc = tc->next)
		/* Relaxed: ordered before the loads of busy by the fence. */
		atomic_store_explicit(&tc->drain, 1, memory_order_relaxed);
	drainer_fence();
	for (tc = head; tc; tc = tc->next) {
		uint32_t c;

		/* Acquire: pairs with tcache_exit()'s release. */
		while (atomic_load_explicit(&tc->busy, memory_order_acquire))
			sched_yield();
		c = tcache_count(tc);
		if (c) {
			stack_push_ids(&pool->stack, pool->next, tc->slots, c);
			tcache_set_count(tc, 0);
		}
	}
	/* Every cache is empty and frozen: the free blocks are the stack's. */
	pool_note_used(pool, pool->num_blocks -
				     atomic_load_explicit(&pool->stack.count,
							  memory_order_relaxed));
	k = stack_pop_chain(&pool->stack, pool->next, min, max, &first);
	if (k)
		stack_chain_copy(pool->next, first, k, ids);
	for (tc = head; tc; tc = tc->next)
		/* Release: publishes the emptied count to the owner. */
		atomic_store_explicit(&tc->drain, 0, memory_order_release);
	kvp_check_pthread(pthread_mutex_unlock(&pool->drain_lock));
	return k;
}

void tcache_sum(struct kvp_pool *pool, uint64_t *parked, uint64_t *allocs,
		uint64_t *frees, uint32_t *threads)
{
	struct tcache *tc;

	*parked = *allocs = *frees = 0;
	*threads = 0;
	/* Acquire: pairs with attach()'s release. */
	tc = atomic_load_explicit(&pool->tcaches, memory_order_acquire);
	for (; tc; tc = tc->next) {
		/* Relaxed: statistics, exact only at quiescence. */
		*parked += atomic_load_explicit(&tc->count,
						memory_order_relaxed);
		*allocs += atomic_load_explicit(&tc->allocs,
						memory_order_relaxed);
		*frees += atomic_load_explicit(&tc->frees,
					       memory_order_relaxed);
		if (atomic_load_explicit(&tc->owner, memory_order_relaxed))
			(*threads)++;
	}
}
