/* SPDX-License-Identifier: MIT */
/*
 * tcache.c - per-thread block caches: registry, thread exit, drains.
 * Floor 3 of lib/ (doc/architecture.md, "Layers").
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
 *    An owner that found drain = 1 waits on the depot's drain_lock, which
 *    the drainer holds throughout, and retries; it then loads drain = 0
 *    with acquire, pairing with the drainer's release store, and sees the
 *    drained count.
 *
 * 2. No false exhaustion.  A drain holds the depot's drain_lock, which also
 *    guards the attaching of new caches, and freezes every cache of the
 *    pool before emptying them all onto the global stack.  While frozen, no
 *    cache gains or loses a block, so from then on the free blocks are
 *    exactly those on the stack.  The drainer then pops all n ids in one
 *    chain; the pop fails only if the stack, re-read unchanged, held fewer
 *    than n (stack.h): at that moment the whole pool had fewer than n free.
 *
 * 3. Lifetimes.  A cache belongs to its pool's depot and is freed only when
 *    the pool is destroyed; a thread that exits returns its blocks and
 *    orphans its cache, which a later thread adopts.  A thread keeps
 *    (depot, uid, cache) records; uids are never reused, so a record of a
 *    destroyed pool never matches a new pool at the same address.  Thread
 *    exit and kvp_thread_flush touch a depot only after finding it, under
 *    tcache_global_lock, in the list of live depots; pool destruction
 *    removes its depot from that list under the same lock before freeing.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc.h"
#include "kvpool.h"
#include "tcache.h"
#include "tsan.h"

bool tcache_membarrier_ok;
KVP_TLS struct tcache_tls_last tcache_last;

struct tcache_record {
	struct tcache_depot *depot;
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

/* Guards the live-depot list and cache ownership (attach, orphan, adopt). */
static pthread_mutex_t tcache_global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tcache_depot *live_depots; /* tcache_global_lock */
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

static bool depot_is_live(const struct tcache_depot *d, uint64_t uid)
{
	for (struct tcache_depot *p = live_depots; p; p = p->live_next)
		if (p == d && p->uid == uid)
			return true;
	return false;
}

int tcache_depot_init(struct tcache_depot *d, uint32_t cap,
		      struct kvp_stack *stack, _Atomic uint32_t *next,
		      tcache_unpark_fn unpark)
{
	kvp_check_pthread(pthread_once(&setup_once, setup));
	memset(d, 0, sizeof(*d));
	if (pthread_mutex_init(&d->drain_lock, NULL) != 0)
		return -ENOMEM;
	d->uid = kvp_next_uid();
	d->cap = cap;
	d->stack = stack;
	d->next = next;
	d->unpark = unpark;
	atomic_init(&d->tcaches, NULL);
	kvp_check_pthread(pthread_mutex_lock(&tcache_global_lock));
	d->live_next = live_depots;
	live_depots = d;
	kvp_check_pthread(pthread_mutex_unlock(&tcache_global_lock));
	return 0;
}

static size_t tcache_size(uint32_t cap)
{
	return sizeof(struct tcache) + (size_t)cap * sizeof(uint32_t);
}

void tcache_depot_fini(struct tcache_depot *d)
{
	struct tcache_depot **pp;
	struct tcache *tc, *next;

	kvp_check_pthread(pthread_mutex_lock(&tcache_global_lock));
	for (pp = &live_depots; *pp; pp = &(*pp)->live_next) {
		if (*pp == d) {
			*pp = d->live_next;
			break;
		}
	}
	kvp_check_pthread(pthread_mutex_unlock(&tcache_global_lock));

	tc = atomic_load_explicit(&d->tcaches, memory_order_acquire);
	for (; tc; tc = next) {
		next = tc->next;
		kvp_free_aligned(tc, KVP_CACHELINE, tcache_size(tc->cap));
	}
	pthread_mutex_destroy(&d->drain_lock);
}

/* Blocks until the drain in progress on tc's depot has finished. */
void tcache_wait_drain(struct tcache *tc)
{
	kvp_check_pthread(pthread_mutex_lock(&tc->depot->drain_lock));
	kvp_check_pthread(pthread_mutex_unlock(&tc->depot->drain_lock));
}

static void tcache_enter_wait(struct tcache *tc)
{
	while (!tcache_enter(tc))
		tcache_wait_drain(tc);
}

void tcache_flush_half(struct tcache *tc)
{
	struct tcache_depot *d = tc->depot;
	uint32_t c = tcache_count(tc);
	uint32_t h = c / 2;

	if (h == 0)
		return;
	/* The oldest half goes; the hottest ids stay. */
	stack_push_ids(d->stack, d->next, tc->slots, h);
	memmove(tc->slots, tc->slots + h, (c - h) * sizeof(uint32_t));
	tcache_set_count(tc, c - h);
}

/* Owner or a drainer that froze tc: moves tc's parked references into
 * ids (room for KVP_PARK_SLOTS); returns how many. */
static uint32_t take_parked(struct tcache *tc, uint32_t *ids, uint32_t cap)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < KVP_PARK_SLOTS && n < cap; i++) {
		uint32_t v = atomic_load_explicit(&tc->park[i],
						  memory_order_relaxed);

		if (v) {
			ids[n++] = v - 1;
			atomic_store_explicit(&tc->park[i], 0,
					      memory_order_relaxed);
		}
	}
	tcache_add_parked(tc, -(int)n);
	return n;
}

/* Owner: returns every free block to the global stack and drops every
 * parked reference (the pool's unpark hook, outside the operation). */
static void tcache_flush_all(struct tcache *tc)
{
	uint32_t parked[KVP_PARK_SLOTS], c, np;

	tcache_enter_wait(tc);
	c = tcache_count(tc);
	if (c) {
		stack_push_ids(tc->depot->stack, tc->depot->next, tc->slots, c);
		tcache_set_count(tc, 0);
	}
	np = take_parked(tc, parked, KVP_PARK_SLOTS);
	tcache_exit(tc);
	if (np)
		tc->depot->unpark(tc->depot, parked, np);
}

/* tcache_global_lock held: drops records of depots that no longer exist. */
static void prune_records(void)
{
	uint32_t i = 0;

	while (i < self.n) {
		struct tcache_record *r = &self.records[i];

		if (depot_is_live(r->depot, r->uid)) {
			i++;
			continue;
		}
		*r = self.records[--self.n];
	}
	if (tcache_last.tc &&
	    !depot_is_live(tcache_last.depot, tcache_last.uid))
		memset(&tcache_last, 0, sizeof(tcache_last));
}

/* tcache_global_lock and d->drain_lock held. */
static struct tcache *attach(struct tcache_depot *d)
{
	struct tcache *tc;

	tc = atomic_load_explicit(&d->tcaches, memory_order_relaxed);
	for (; tc; tc = tc->next) {
		if (!atomic_load_explicit(&tc->owner, memory_order_relaxed)) {
			atomic_store_explicit(&tc->owner, &self,
					      memory_order_relaxed);
			return tc;
		}
	}
	tc = kvp_malloc_aligned(KVP_CACHELINE, tcache_size(d->cap));
	if (!tc)
		return NULL;
	memset(tc, 0, sizeof(*tc));
	tc->depot = d;
	tc->cap = d->cap;
	atomic_init(&tc->owner, &self);
	tc->next = atomic_load_explicit(&d->tcaches, memory_order_relaxed);
	/* Release: publishes the initialised cache to lock-free walkers. */
	atomic_store_explicit(&d->tcaches, tc, memory_order_release);
	return tc;
}

struct tcache *tcache_get_slow(struct tcache_depot *d)
{
	struct tcache *tc = NULL;

	if (d->cap == 0)
		return NULL;
	for (uint32_t i = 0; i < self.n; i++) {
		struct tcache_record *r = &self.records[i];

		if (r->depot == d && r->uid == d->uid) {
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
	kvp_check_pthread(pthread_mutex_lock(&d->drain_lock));
	tc = attach(d);
	kvp_check_pthread(pthread_mutex_unlock(&d->drain_lock));
	if (tc)
		self.records[self.n++] = (struct tcache_record){
			.depot = d, .uid = d->uid, .tc = tc};
out:
	kvp_check_pthread(pthread_mutex_unlock(&tcache_global_lock));
	if (!tc)
		return NULL;
found:
	tcache_last = (struct tcache_tls_last){
		.depot = d, .uid = d->uid, .tc = tc};
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

void tcache_thread_flush(void)
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

void tcache_fence_all(void)
{
	drainer_fence();
}

/*
 * Locks d's drains and freezes every cache of d (see the argument at the
 * top); returns the first cache.  Caches attach only under drain_lock, so
 * the list is complete until unfreeze().
 */
static struct tcache *freeze(struct tcache_depot *d)
{
	struct tcache *head, *tc;

	kvp_check_pthread(pthread_mutex_lock(&d->drain_lock));
	/* Acquire: pairs with attach()'s release. */
	head = atomic_load_explicit(&d->tcaches, memory_order_acquire);
	for (tc = head; tc; tc = tc->next)
		/* Relaxed: ordered before the loads of busy by the fence. */
		atomic_store_explicit(&tc->drain, 1, memory_order_relaxed);
	drainer_fence();
	for (tc = head; tc; tc = tc->next)
		/* Acquire: pairs with tcache_exit()'s release. */
		while (atomic_load_explicit(&tc->busy, memory_order_acquire))
			sched_yield();
	return head;
}

static void unfreeze(struct tcache_depot *d, struct tcache *head)
{
	for (struct tcache *tc = head; tc; tc = tc->next)
		/* Release: publishes what the drainer changed to the owner. */
		atomic_store_explicit(&tc->drain, 0, memory_order_release);
	kvp_check_pthread(pthread_mutex_unlock(&d->drain_lock));
}

uint32_t tcache_drain_alloc(struct tcache_depot *d, uint32_t min, uint32_t max,
			    uint32_t *ids, uint64_t *free_then)
{
	struct tcache *head = freeze(d), *tc;
	uint32_t first, k;

	for (tc = head; tc; tc = tc->next) {
		uint32_t c = tcache_count(tc);

		if (c) {
			stack_push_ids(d->stack, d->next, tc->slots, c);
			tcache_set_count(tc, 0);
		}
	}
	/* Every cache is empty and frozen: the free blocks are the stack's. */
	*free_then = atomic_load_explicit(&d->stack->count,
					  memory_order_relaxed);
	k = stack_pop_chain(d->stack, d->next, min, max, &first);
	if (k)
		stack_chain_copy(d->next, first, k, ids);
	unfreeze(d, head);
	return k;
}

uint32_t tcache_take_parked(struct tcache_depot *d, uint32_t *ids,
			    uint32_t cap)
{
	struct tcache *head = freeze(d);
	uint32_t n = 0;

	for (struct tcache *tc = head; tc && n < cap; tc = tc->next)
		n += take_parked(tc, ids + n, cap - n);
	unfreeze(d, head);
	return n;
}

void tcache_sum(struct tcache_depot *d, uint64_t *parked, uint64_t *allocs,
		uint64_t *frees, uint64_t *nparked, uint32_t *threads)
{
	struct tcache *tc;

	*parked = *allocs = *frees = *nparked = 0;
	*threads = 0;
	/* Acquire: pairs with attach()'s release. */
	tc = atomic_load_explicit(&d->tcaches, memory_order_acquire);
	for (; tc; tc = tc->next) {
		/* Relaxed: statistics, exact only at quiescence. */
		*parked += atomic_load_explicit(&tc->count,
						memory_order_relaxed);
		*allocs += atomic_load_explicit(&tc->allocs,
						memory_order_relaxed);
		*frees += atomic_load_explicit(&tc->frees,
					       memory_order_relaxed);
		*nparked += atomic_load_explicit(&tc->nparked,
						 memory_order_relaxed);
		if (atomic_load_explicit(&tc->owner, memory_order_relaxed))
			(*threads)++;
	}
}
