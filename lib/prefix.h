/*
 * prefix.h - the prefix cache's private interface: the pool's evictable
 * cached blocks (used by pool.c) and the managers' hash -> block maps
 * (used by manager.c).  The correctness argument is in prefix.c.
 *
 * Synchronisation table:
 *
 *   operation               may run concurrently with     note
 *   ----------------------  ----------------------------  ----------------
 *   prefix_take             everything                    lock-free (RCU
 *                                                         section, one CAS
 *                                                         per block)
 *   prefix_release,         each other, prefix_take,      the pool's
 *   prefix_unhit,           prefix_store                  evictable-list
 *   prefix_evict,                                         lock
 *   prefix_clear
 *   prefix_store,           prefix_take, the pool side,   the manager's
 *   prefix_clear,           other managers                store lock
 *   prefix_evict's deletions
 *   prefix_check*           nothing on the pool           quiescence
 */
#ifndef KVP_PREFIX_H
#define KVP_PREFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool.h"

struct kvp_pool;
struct kvp_manager;

/* ---- pool side ---- */

/* Gives the pool its prefix-cache state if it has none; caller holds
 * pool->mgr_lock.  Returns 0 or -ENOMEM. */
int prefix_pool_attach(struct kvp_pool *pool);
/* Frees it (pool destruction). */
void prefix_pool_free(struct kvp_pool *pool);

/*
 * ids[0..n) are cached blocks whose reference count the caller's free
 * just took to zero: they join the tail of the evictable list (most
 * recently freed).
 */
void prefix_release(struct kvp_pool *pool, const uint32_t *ids, uint32_t n);

/*
 * Takes between min and max evictable blocks (1 <= min <= max), least
 * recently freed first, at least min or none: each taken is uncached,
 * held once by the caller, its hash removed from its manager (with a
 * KVP_EVENT_REMOVED event).  Returns how many, or 0 (nothing changed).
 */
uint32_t prefix_evict(struct kvp_pool *pool, uint32_t min, uint32_t max,
		      uint32_t *ids);

/* Cached blocks with no reference (a count: exact at quiescence). */
uint64_t prefix_evictable(struct kvp_pool *pool);
/* Cached blocks evicted by allocations so far. */
uint64_t prefix_evictions(struct kvp_pool *pool);
/* Blocks that became evictable (a free, for the pool's counts) and that
 * left that state other than by eviction (hits, resets: allocations). */
void prefix_transitions(struct kvp_pool *pool, uint64_t *released,
			uint64_t *revived);

/* Quiescent check of the evictable list; 0 or -EFAULT (details on
 * stderr).  Pools without a prefix cache pass. */
int prefix_check_pool(struct kvp_pool *pool);

/* ---- manager side ---- */

int prefix_map_init(struct kvp_manager *m);
/* Forgets every cached block of m (as prefix_clear with force) and frees
 * the table; no other thread may use m. */
void prefix_map_fini(struct kvp_manager *m);

/*
 * Takes a reference on the blocks caching hashes[0..n), as long as they
 * are all cached; returns how many (the hit prefix), their ids in
 * blocks[].  Lock-free.
 */
uint32_t prefix_take(struct kvp_manager *m, const struct kvp_hash *hashes,
		     uint32_t n, uint32_t *blocks);

/*
 * Undoes prefix_take for a failed creation: drops the references on
 * blocks[0..n) and puts a block that becomes evictable again back where it
 * was in the eviction order (unless an evictor unlinked it meanwhile).
 */
void prefix_unhit(struct kvp_pool *pool, const uint32_t *blocks, uint32_t n);

/*
 * A commit: prefix_store_begin takes m's event and store locks (in that
 * order), prefix_store_end drops them.  In between, prefix_store caches
 * block b (held by the caller, full) under hash h, whose key
 * prefix_store_prepare(m, b, h) returned (asking for the lines the store
 * will write: call it some blocks ahead).  prefix_store returns 1 if
 * stored (the caller adds the count to m's prefix_cached statistic), 0 if
 * b is already cached or another block caches h, or -ENOMEM (nothing
 * changed).
 */
void prefix_store_begin(struct kvp_manager *m);
void prefix_store_end(struct kvp_manager *m);
uint64_t prefix_store_prepare(struct kvp_manager *m, uint32_t b,
			      const struct kvp_hash *h);
int prefix_store(struct kvp_manager *m, uint32_t b, const struct kvp_hash *h,
		 uint64_t key);

/*
 * Forgets every cached block of m: evictable ones go back to the free
 * lists.  Without force, fails with -EBUSY (nothing changed) if any is
 * referenced; with force, referenced ones just stop being cached.
 * Returns 0 or -EBUSY.
 */
int prefix_clear(struct kvp_manager *m, bool force);

/* Around a reset: orders its CLEARED event with other threads' events
 * of m (no-ops without a callback). */
void prefix_events_begin(struct kvp_manager *m);
void prefix_events_end(struct kvp_manager *m);

/* Emits an event to m's callback, if any. */
void prefix_emit(struct kvp_manager *m, enum kvp_event_type type,
		 const struct kvp_hash *hashes, uint32_t n,
		 const struct kvp_hash *parent);

/*
 * Quiescent check of m's table against the pool: adds m's cached blocks
 * to *nodes; 0 or -EFAULT.
 */
int prefix_check_manager(struct kvp_manager *m, uint64_t *nodes);
/* Cached blocks in the pool (quiescent count). */
uint64_t prefix_cached_blocks(struct kvp_pool *pool);

#endif /* KVP_PREFIX_H */
