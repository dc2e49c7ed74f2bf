/*
 * pool.h - the block pool's private structure, shared by pool.c and tcache.c.
 */
#ifndef KVP_POOL_H
#define KVP_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "compiler.h"
#include "kvpool.h"
#include "stack.h"

struct tcache;
struct prefix_pool;

/*
 * Per-block state word: bits 0..23 the reference count (0 = free, unless
 * CACHED); then flags:
 *   CACHED    the block caches a hash of some manager (prefix.c); with 0
 *             references it is evictable, on no free list;
 *   EVICTING  an evictor has claimed an evictable block (prefix.c).
 */
#define KVP_ST_REFS_MASK ((uint32_t)KVP_MAX_REFS)
#define KVP_ST_CACHED (1u << 24)
#define KVP_ST_EVICTING (1u << 25)

struct kvp_pool {
	/* Read-only after creation. */
	uint64_t uid; /* unique per process, never reused */
	uint32_t num_blocks;
	uint32_t block_tokens;
	uint32_t cache_cap; /* per-thread cache capacity, 0 = no caches */
	uint32_t flags;
	int32_t device_id;
	bool has_layout;
	struct kvp_layout layout;
	size_t block_bytes;
	size_t row_bytes; /* one token's K (or V) for one layer */
	size_t arena_bytes;
	unsigned char *data; /* NULL for an ID-only pool */
	/*
	 * state[id]: refcount and flags.  Synchronization: atomic; see
	 * pool.c for the transitions and their orders.
	 */
	_Atomic uint32_t *state;
	/* next[id]: the free stack's links.  See stack.h. */
	_Atomic uint32_t *next;

	/* The global free stack, on its own cache line. */
	kvp_cacheline_aligned struct kvp_stack stack;

	/* Slow-path fields, on their own cache line. */
	kvp_cacheline_aligned _Atomic uint32_t refcnt; /* atomic */
	/*
	 * Serialises cache drains and the attaching of thread caches, so a
	 * drain sees every cache of the pool.  Lock order: tcache_global_lock
	 * before drain_lock.
	 */
	pthread_mutex_t drain_lock;
	/*
	 * The pool's thread caches: an append-only list (appended under
	 * drain_lock with a release store, walked lock-free with acquire
	 * loads); freed only when the pool is destroyed.
	 */
	_Atomic(struct tcache *) tcaches;
	/* Highest `used` observed.  Synchronization: atomic, relaxed. */
	_Atomic uint64_t peak_used;
	/* Blocks allocated / freed without a thread cache.  Atomic, relaxed. */
	_Atomic uint64_t direct_allocs, direct_frees;
	/* Managers over this pool, for kvp_manager_check. */
	pthread_mutex_t mgr_lock;
	struct kvp_manager *managers; /* mgr_lock */
	/* Prefix-cache state (prefix.c), set once by the first manager
	 * with KVP_PREFIX_CACHE (release; read with acquire). */
	_Atomic(struct prefix_pool *) prefix;
	/* Live-pool list of tcache.c.  Synchronization: tcache_global_lock. */
	struct kvp_pool *live_next;
};

/*
 * kvp_pool_free for callers whose ids are distinct (a sequence's block
 * table): skips the check that an id repeated k times has k references.
 */
int pool_free_distinct(struct kvp_pool *pool, const uint32_t *ids,
		       uint32_t n);

/* Records `used` as a candidate for the pool's peak. */
void pool_note_used(struct kvp_pool *pool, uint64_t used);

/*
 * Asks for transparent huge pages over the whole 2 MiB pages inside
 * [p, p + bytes), where the kernel gives them only on request (the data
 * arena; prefix tables and per-block prefix records, read at random:
 * fewer TLB misses).  Before the pages are first touched; a refusal
 * changes nothing.
 */
void kvp_advise_huge(void *p, size_t bytes);

#endif /* KVP_POOL_H */
