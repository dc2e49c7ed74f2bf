/* SPDX-License-Identifier: MIT */
/*
 * tcache.h - per-thread block caches (magazines) in front of the global stack.
 * Floor 3 of lib/ (doc/architecture.md, "Layers").
 *
 * The owner thread allocates from and frees into its cache with plain loads
 * and stores on cache lines nobody else writes; a thread that finds the pool
 * nearly exhausted drains every cache (tcache.c has the protocol and its
 * correctness argument).
 *
 * Synchronisation table:
 *   owner operation  vs  owner operation (same cache)   impossible (one owner)
 *   owner operation  vs  drain                          safe: the drain waits
 *                                                        for `busy` to clear;
 *                                                        the owner backs off
 *                                                        when `drain` is set
 *   drain            vs  drain (same pool)              serialised by the
 *                                                        depot's drain_lock
 *                                                        (pool->depot)
 *   stats walk       vs  everything                     safe (relaxed reads)
 */
#ifndef KVP_TCACHE_H
#define KVP_TCACHE_H

#include <stdatomic.h>
#include <stdint.h>

#include <pthread.h>

#include "compiler.h"
#include "stack.h"

struct tcache;
struct tcache_depot;

/*
 * Parked references (doc/architecture.md, "The pool"): a thread may keep
 * the reference it releases on a hot cached block, so that its next hit on
 * that block takes it back with no atomic on the block's state word.  A
 * cache parks at most KVP_PARK_SLOTS, direct-mapped: block b in slot
 * b & (KVP_PARK_SLOTS - 1).  The pool decides what to park (pool.c); this
 * file keeps them, under the same owner / drainer protocol as the free
 * slots, and hands them back to the pool's unpark hook at thread exit and
 * kvp_thread_flush.
 */
#define KVP_PARK_SLOTS 256u

/* Drops the parked references ids[0..n) (the pool's, pool.c): not inside
 * an owner operation, nor with the caches frozen. */
typedef void (*tcache_unpark_fn)(struct tcache_depot *d, const uint32_t *ids,
				 uint32_t n);

/*
 * The caches of one pool, and what they need of it: the free stack they
 * refill from and flush to.  Embedded in the pool (pool.h), owned here.
 */
struct tcache_depot {
	/* Read-only after tcache_depot_init(). */
	uint64_t uid;		      /* unique per process, never reused */
	uint32_t cap;		      /* per-thread capacity, 0 = no caches */
	struct kvp_stack *stack;      /* the pool's global free stack */
	_Atomic uint32_t *next;	      /* its links */
	tcache_unpark_fn unpark;      /* the pool's, for parked references */
	/*
	 * Serialises cache drains and the attaching of thread caches, so a
	 * drain sees every cache of the depot.  Lock order:
	 * tcache_global_lock before drain_lock.
	 */
	pthread_mutex_t drain_lock;
	/*
	 * The depot's thread caches: an append-only list (appended under
	 * drain_lock with a release store, walked lock-free with acquire
	 * loads); freed only by tcache_depot_fini().
	 */
	_Atomic(struct tcache *) tcaches;
	/* The live-depot list.  Synchronization: tcache_global_lock. */
	struct tcache_depot *live_next;
};

struct tcache {
	/* Owner-written line. */
	/* 1 while the owner operates on the cache.  Owner: relaxed store 1,
	 * release store 0; drainer: acquire load. */
	kvp_cacheline_aligned _Atomic uint32_t busy;
	/* Blocks in slots.  Owner, or a drainer that saw busy == 0. */
	_Atomic uint32_t count;
	/* Blocks handed out / returned to free through this cache.  Owner
	 * writes (relaxed load + store, never an RMW); stats read relaxed. */
	_Atomic uint64_t allocs, frees;

	/* Drainer-written line: 1 while a drainer owns the slots. */
	kvp_cacheline_aligned _Atomic uint32_t drain;

	/* Read-mostly. */
	kvp_cacheline_aligned struct tcache_depot *depot; /* immutable */
	uint32_t cap;					/* immutable */
	/* The owning thread's record, NULL for an orphaned cache that a new
	 * thread may adopt.  Synchronization: tcache_global_lock; stats read
	 * it relaxed. */
	_Atomic(void *) owner;
	/* Next cache of the pool.  Immutable after publication. */
	struct tcache *next;
	/* Parked references: park[i] is b + 1 for a cached block b this
	 * thread holds one parked reference on (i = b's slot), or 0.
	 * Synchronization: as slots (owner inside an operation, or a drainer
	 * that froze the cache); stats and checks read them relaxed.
	 * park_last[0..park_nlast): the slots the owner's last parking free
	 * filled (owner only; a drainer may have emptied some since). */
	kvp_cacheline_aligned _Atomic uint32_t park[KVP_PARK_SLOTS];
	uint16_t park_last[KVP_PARK_SLOTS];
	uint32_t park_nlast;
	/* Non-zero park[] entries.  Synchronization: as park[] (written
	 * with a load and a store); estimates read it relaxed. */
	_Atomic uint32_t nparked;
	/* Free block ids, slots[0..count); slots[count - 1] is the hottest. */
	uint32_t slots[];
};

/*
 * Whether sys_membarrier(PRIVATE_EXPEDITED) is registered for this
 * process; if not, owners pay a full fence per operation.  Written once
 * before the first pool exists.  Declared hidden (-fvisibility=hidden
 * covers definitions only), so every owner operation tests it in place
 * instead of first loading its address.
 */
extern __attribute__((visibility("hidden"))) bool tcache_membarrier_ok;

/*
 * Returns the calling thread's cache of depot d, creating or adopting one
 * on first use; NULL if d has no caches or memory ran out (callers then
 * use the global stack directly).
 */
struct tcache *tcache_get_slow(struct tcache_depot *d);
/* Returns the calling thread's cached blocks and parked references to
 * their pools (kvp_thread_flush, seqmem.c, calls it). */
void tcache_thread_flush(void);
/* A full barrier on every CPU that runs a thread of the process
 * (membarrier; a seq_cst fence where it is missing, and then owners
 * fence too: tcache_membarrier_ok).  The drains' fence, for other
 * Dekker pairs of an owner and a rare reader (seqmem.c's lookup-cache
 * readers). */
void tcache_fence_all(void);

struct tcache_tls_last {
	struct tcache_depot *depot;
	uint64_t uid;
	struct tcache *tc;
};
extern KVP_TLS struct tcache_tls_last tcache_last;

/* Whether the calling thread's last-used cache is d's (the fast paths). */
static inline bool tcache_last_is(const struct tcache_depot *d)
{
	/* The uid check makes a stale entry for a destroyed depot at the
	 * same address miss. */
	return likely(tcache_last.depot == d && tcache_last.uid == d->uid);
}

static inline struct tcache *tcache_get(struct tcache_depot *d)
{
	if (tcache_last_is(d))
		return tcache_last.tc;
	return tcache_get_slow(d);
}

/*
 * Enters an owner operation.  Returns false if a drain is in progress (the
 * caller must call tcache_wait_drain() and retry); then the cache is not
 * entered.
 */
static inline bool tcache_enter(struct tcache *tc)
{
	/* Relaxed: ordered before the load of `drain` by the fence below
	 * (or by the drainer's membarrier). */
	atomic_store_explicit(&tc->busy, 1, memory_order_relaxed);
	if (unlikely(!tcache_membarrier_ok))
		atomic_thread_fence(memory_order_seq_cst);
	else
		kvp_compiler_barrier();
	/* Acquire: pairs with the drainer's release store of 0, so the
	 * drained count is seen. */
	if (likely(!atomic_load_explicit(&tc->drain, memory_order_acquire)))
		return true;
	/* Release: pairs with the drainer's acquire load of busy. */
	atomic_store_explicit(&tc->busy, 0, memory_order_release);
	return false;
}

static inline void tcache_exit(struct tcache *tc)
{
	/* Release: publishes slots and count to a drainer that sees 0. */
	atomic_store_explicit(&tc->busy, 0, memory_order_release);
}

/* Blocks until the drain in progress on tc's depot has finished. */
void tcache_wait_drain(struct tcache *tc);

static inline uint32_t tcache_count(struct tcache *tc)
{
	/* Relaxed: only the owner writes it outside drains. */
	return atomic_load_explicit(&tc->count, memory_order_relaxed);
}

static inline void tcache_set_count(struct tcache *tc, uint32_t c)
{
	/* Relaxed: published by tcache_exit()'s release. */
	atomic_store_explicit(&tc->count, c, memory_order_relaxed);
}

/* Owner-only counter bump: a load and a store, never an RMW. */
static inline void tcache_add(_Atomic uint64_t *ctr, uint64_t n)
{
	atomic_store_explicit(
		ctr, atomic_load_explicit(ctr, memory_order_relaxed) + n,
		memory_order_relaxed);
}

/*
 * Owner, inside an operation: moves the oldest half of a full cache to
 * the global stack.
 */
void tcache_flush_half(struct tcache *tc);

/*
 * Drains every cache of d to the global stack, then pops between min and
 * max ids into ids (1 <= min <= max).  *free_then receives how many blocks
 * were free with every cache drained (all on the stack), before the pop.
 * The caller must not be inside an owner operation.  Returns how many,
 * or 0 if fewer than min were free.
 */
uint32_t tcache_drain_alloc(struct tcache_depot *d, uint32_t min, uint32_t max,
			    uint32_t *ids, uint64_t *free_then);

/* Sums d's caches: free blocks parked, allocs, frees, parked
 * references, attached threads. */
void tcache_sum(struct tcache_depot *d, uint64_t *parked, uint64_t *allocs,
		uint64_t *frees, uint64_t *nparked, uint32_t *threads);

/*
 * Takes up to cap parked references out of every cache of d (freezing
 * them as a drain does) into ids; returns how many (0: none left).  The
 * caller drops them (it must not be inside an owner operation).
 */
uint32_t tcache_take_parked(struct tcache_depot *d, uint32_t *ids,
			    uint32_t cap);

/* Parked reference slot of block b. */
static inline uint32_t tcache_park_slot(uint32_t b)
{
	return b & (KVP_PARK_SLOTS - 1);
}

/* Owner inside an operation, or a drainer: adds d to tc->nparked. */
static inline void tcache_add_parked(struct tcache *tc, int d)
{
	atomic_store_explicit(
		&tc->nparked,
		atomic_load_explicit(&tc->nparked, memory_order_relaxed) +
			(uint32_t)d,
		memory_order_relaxed);
}

/* Whether tc parks a reference on b (owner; a hint until entered). */
static inline bool tcache_parks(struct tcache *tc, uint32_t b)
{
	/* Relaxed: the owner's own writes, or a drainer's (then the entry
	 * below sees the drain and backs off). */
	return atomic_load_explicit(&tc->park[tcache_park_slot(b)],
				    memory_order_relaxed) == b + 1;
}

/*
 * Owner, not inside an operation: takes the parked reference on b back,
 * as the caller's own.  False (nothing changed) if b is not parked here,
 * or a drain is in progress (which hands it back to the pool).
 */
static inline bool tcache_unpark(struct tcache *tc, uint32_t b)
{
	bool got;

	if (!tcache_enter(tc))
		return false;
	got = tcache_parks(tc, b);
	if (got) {
		atomic_store_explicit(&tc->park[tcache_park_slot(b)], 0,
				      memory_order_relaxed);
		tcache_add_parked(tc, -1);
	}
	tcache_exit(tc);
	return got;
}

/*
 * Sets up the caches of a new pool (capacity cap, 0 = none) over its free
 * stack and registers them as live: threads may then attach.  unpark
 * drops parked references.  Does the process-wide setup (membarrier, the
 * thread-exit hook) on first use.  Returns 0 or -ENOMEM.
 */
int tcache_depot_init(struct tcache_depot *d, uint32_t cap,
		      struct kvp_stack *stack, _Atomic uint32_t *next,
		      tcache_unpark_fn unpark);
/* Unregisters d and frees its caches; nobody uses it any more. */
void tcache_depot_fini(struct tcache_depot *d);

#endif /* KVP_TCACHE_H */
