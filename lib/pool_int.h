/* SPDX-License-Identifier: MIT */
/*
 * pool_int.h - what the pool's four files (pool.c, pool_alloc.c,
 * pool_create.c, pool_stats.c) share and the layers above do not use:
 * the reclaimer's read, the peak's update and the depot's unpark hook.
 * Floor 4 of lib/ (doc/architecture.md, "Layers").
 */
#ifndef KVP_POOL_INT_H
#define KVP_POOL_INT_H

#include <stdatomic.h>
#include <stdint.h>

#include "pool.h"
#include "tcache.h"

/* The registered reclaimer, or NULL. */
static inline const struct pool_reclaimer *reclaimer_of(struct kvp_pool *pool)
{
	/* Acquire: as pool_reclaimer_ctx(). */
	return atomic_load_explicit(&pool->reclaimer, memory_order_acquire);
}

/* Records `used` as a candidate for the pool's peak. */
static inline void pool_note_used(struct kvp_pool *pool, uint64_t used)
{
	uint64_t peak =
		atomic_load_explicit(&pool->peak_used, memory_order_relaxed);

	/* Relaxed: a statistic; the CAS loop only keeps the maximum. */
	while (used > peak &&
	       !atomic_compare_exchange_weak_explicit(&pool->peak_used, &peak,
						      used, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

/* The depot's unpark hook (pool.c; kvp_pool_create registers it). */
void pool_unpark_refs(struct tcache_depot *d, const uint32_t *ids,
		      uint32_t n);

#endif /* KVP_POOL_INT_H */
