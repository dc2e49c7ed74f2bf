/* SPDX-License-Identifier: MIT */
/*
 * pool.h - the block pool's structure and its reclaimer hook (layer 4,
 * doc/architecture.md "Layers": pool.c, pool_alloc.c, pool_create.c and
 * pool_stats.c, over tcache.c and stack.h).  The layers above (prefix.c,
 * prefix_pool.c, seq.c, data.c) read the state words, the free stack's
 * links and the data through it; the pool never calls them.
 */
#ifndef KVP_POOL_H
#define KVP_POOL_H

#include <pthread.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bstate.h"
#include "compiler.h"
#include "kvpool.h"
#include "stack.h"
#include "tcache.h"

/*
 * The reclaimer: the layer above that keeps blocks CACHED after their
 * last reference goes (the prefix cache), seen by the pool only through
 * this table, as DPDK's rte_mempool sees its ring through rte_mempool_ops.
 * Registered once per pool (pool_set_reclaimer), by the first
 * prefix-caching manager; a pool without one never has a CACHED block.
 * Every hook may run concurrently with every other and with itself.
 */
struct pool_reclaimer_stats {
	uint64_t evictable; /* idle cached blocks (exact at quiescence) */
	uint64_t evictions; /* taken by allocations so far */
	uint64_t released;  /* cached blocks a free took to zero */
	uint64_t revived;   /* idle ones taken back by hits */
};

struct pool_reclaimer {
	/* "Cached blocks went idle": ids[0..n), cached, are blocks a free
	 * just took to zero, in the order freed. */
	void (*idle)(void *ctx, const uint32_t *ids, uint32_t n);
	/* "Reclaim for an allocation": takes between min and max idle
	 * cached blocks (1 <= min <= max), least recently freed first, each
	 * uncached and held once by the caller.  Returns how many, or 0
	 * (nothing changed) if fewer than min are idle. */
	uint32_t (*reclaim)(void *ctx, uint32_t min, uint32_t max,
			    uint32_t *ids);
	/* Idle cached blocks now (a count, exact at quiescence). */
	uint64_t (*evictable)(void *ctx);
	void (*stats)(void *ctx, struct pool_reclaimer_stats *st);
	/* Quiescent check of what the reclaimer keeps against the state
	 * words: 0 or -EFAULT (details on stderr). */
	int (*check)(void *ctx);
	/* The pool is being destroyed: frees ctx. */
	void (*fini)(void *ctx);
};

struct kvp_pool {
	/* Read-only after creation. */
	uint32_t num_blocks;
	uint32_t block_tokens;
	uint32_t flags;
	int32_t device_id;
	bool has_layout;
	struct kvp_layout layout;
	size_t block_bytes;
	size_t row_bytes; /* one token's K (or V) for one layer */
	size_t arena_bytes;
	unsigned char *data; /* NULL for an ID-only pool */
	/* Tuning from conf.h, copied at creation (pool_create.c). */
	uint32_t evict_ahead_max;   /* <= CONF_EVICT_AHEAD_LIMIT */
	uint32_t evict_ahead_share; /* >= 1 */
	uint32_t idle_batch;	    /* 1 .. CONF_IDLE_BATCH_LIMIT */
	/*
	 * state[id]: refcount and flags.  Synchronization: atomic; changed
	 * only by bstate.h's transitions (their orders are there).
	 */
	bstate_t *state;
	/* next[id]: the free stack's links.  See stack.h. */
	_Atomic uint32_t *next;

	/* The global free stack, on its own cache line. */
	kvp_cacheline_aligned struct kvp_stack stack;

	/* The thread caches in front of it (tcache.h; their uid is the
	 * pool's), their slow-path fields on lines of their own. */
	kvp_cacheline_aligned struct tcache_depot depot;

	/* Slow-path fields, on their own cache line. */
	kvp_cacheline_aligned _Atomic uint32_t refcnt; /* atomic */
	/* Highest `used` observed.  Synchronization: atomic, relaxed. */
	_Atomic uint64_t peak_used;
	/* Blocks allocated / freed without a thread cache.  Atomic, relaxed. */
	_Atomic uint64_t direct_allocs, direct_frees;
	/* The reclaimer and its state, set once under reclaimer_lock
	 * (release; read with acquire: pool_reclaimer_ctx()). */
	pthread_mutex_t reclaimer_lock;
	_Atomic(const struct pool_reclaimer *) reclaimer;
	void *reclaimer_ctx;
};

/*
 * Registers the reclaimer ops for pool, unless it has one: then make(pool,
 * &ctx) builds its state, under the pool's lock, so that concurrent
 * callers register once.  Returns 0 (registered now or before: ops must be
 * the same table) or make()'s negative errno (nothing registered).
 */
int pool_set_reclaimer(struct kvp_pool *pool, const struct pool_reclaimer *ops,
		       int (*make)(struct kvp_pool *pool, void **ctx));

/* The registered reclaimer's state, or NULL. */
static inline void *pool_reclaimer_ctx(struct kvp_pool *pool)
{
	/* Acquire: pairs with pool_set_reclaimer()'s release, so the state
	 * make() built is seen whole. */
	return atomic_load_explicit(&pool->reclaimer, memory_order_acquire)
		       ? pool->reclaimer_ctx
		       : NULL;
}

/*
 * The state words, for the layers above: a read of one, and bstate.h's
 * transitions on one (each function there says its order and what it
 * refuses).  id must be a valid block id.
 */

/* The word now.  Relaxed: the caller orders what it does with the value
 * (its own hold, a lock, or a transition's CAS that follows). */
static inline uint32_t pool_block_word(const struct kvp_pool *pool,
				       uint32_t id)
{
	return atomic_load_explicit(&pool->state[id], memory_order_relaxed);
}

/* Data planes per layer of a block: 2 (K and V), 1 with KVP_POOL_K_ONLY. */
static inline size_t pool_flags_planes(uint32_t flags)
{
	return (flags & KVP_POOL_K_ONLY) ? 1 : 2;
}

static inline size_t pool_planes(const struct kvp_pool *pool)
{
	return pool_flags_planes(pool->flags);
}

static inline bool pool_block_cached(const struct kvp_pool *pool, uint32_t id)
{
	return bstate_is_cached(pool_block_word(pool, id));
}

/*
 * Whether block id is shared: another holder has it, or it is cached (a
 * later hit may take it).  A holder must not write a shared block.  A
 * caller that holds the block and serialises its own holders (a
 * sequence's lock) sees the count only fall while it looks, so a block
 * seen unshared stays so until the caller hands it out again.  Acquire:
 * a caller that sees the block unshared goes on to write it, after the
 * other holders' reads of it (a fork's copy on write), which their
 * release drops published.
 */
static inline bool pool_block_shared(const struct kvp_pool *pool, uint32_t id)
{
	return bstate_is_shared(
		atomic_load_explicit(&pool->state[id], memory_order_acquire));
}

/* Asks for block id's word for writing (a transition soon). */
static inline void pool_block_prefetch_w(const struct kvp_pool *pool,
					 uint32_t id)
{
	kvp_prefetch_w(&pool->state[id]);
}

/* ref: one more reference on a held block: 0, -EALREADY, -EOVERFLOW. */
static inline int pool_block_ref(struct kvp_pool *pool, uint32_t id)
{
	return bstate_ref(&pool->state[id]);
}

static inline bool pool_block_revive(struct kvp_pool *pool, uint32_t id,
				     uint32_t *was)
{
	return bstate_revive(&pool->state[id], was);
}

static inline uint32_t pool_block_drop(struct kvp_pool *pool, uint32_t id)
{
	return bstate_drop(&pool->state[id], pool_block_word(pool, id));
}

static inline void pool_block_cache(struct kvp_pool *pool, uint32_t id)
{
	bstate_cache(&pool->state[id]);
}

static inline bool pool_block_claim(struct kvp_pool *pool, uint32_t id)
{
	return bstate_claim(&pool->state[id]);
}

static inline void pool_block_unclaim(struct kvp_pool *pool, uint32_t id)
{
	bstate_unclaim(&pool->state[id]);
}

static inline void pool_block_evicted(struct kvp_pool *pool, uint32_t id)
{
	bstate_evicted(&pool->state[id]);
}

static inline uint32_t pool_block_uncache(struct kvp_pool *pool, uint32_t id)
{
	return bstate_uncache(&pool->state[id]);
}

/*
 * kvp_pool_free for callers whose ids are distinct (a sequence's block
 * table, released last block first): skips the check that an id repeated
 * k times has k references, and may park the references on the cached
 * blocks among the last `park` of ids (its chain's head: the sequence's
 * prefix-cache hits) in the calling thread's cache (pool.c, "Parked
 * references").
 */
int pool_free_distinct(struct kvp_pool *pool, const uint32_t *ids,
		       uint32_t n, uint32_t park);

/*
 * Drops every thread's parked references on pool's blocks (a drain: the
 * caches are frozen meanwhile).  Not inside an owner operation.  Returns
 * how many.  Before whatever must see them dropped: a reset (else -EBUSY),
 * a manager's destruction.
 */
uint64_t pool_unpark_all(struct kvp_pool *pool);

/*
 * Blocks in use, as kvp_pool_stats's `used` but cheaper, for admission
 * and eviction decisions: every parked reference counts as an evictable
 * block (kvp_pool_stats counts a block parked by several threads once,
 * and one with other holders not at all).  Approximate while threads run.
 */
uint64_t pool_used_estimate(struct kvp_pool *pool);

/* Adds to counts[b] the parked references on block b (quiescent; for
 * kvp_manager_check, which counts every holder of a block). */
void pool_count_parked(struct kvp_pool *pool, uint32_t *counts);

/* Records a shortage of n blocks for kvp_last_error (error.h), with
 * the blocks the pool could have given: for -ENOSPC paths only. */
__attribute__((cold)) void pool_note_nospace(struct kvp_pool *pool,
					     uint64_t n);

#endif /* KVP_POOL_H */
