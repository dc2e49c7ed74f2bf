/* SPDX-License-Identifier: MIT */
/*
 * pool_alloc.c - the block pool's allocation paths: kvp_pool_alloc's leaf
 * through the calling thread's cache, the refill from the global stack,
 * the allocation without a cache, and, when both run dry, the reclaim:
 * idle cached blocks evicted through the reclaimer (those evicted ahead
 * of need parked in the thread's cache), the other threads' caches
 * drained, the parked references dropped.
 * Floor 4 of lib/ (doc/architecture.md, "Layers"): over pool.c (the
 * parked references' drop), pool_stats.c (the record of a shortage),
 * tcache.c and stack.h.
 *
 * Correctness argument: pool.c's (block states) covers the transitions
 * made here.  An id reaches this thread from exactly one free list (the
 * global stack's pop, or its own cache inside an owner operation), so its
 * 0 -> 1 (give_sole) is a relaxed store: nobody else can reach the block,
 * and the pop's acquire (or program order within the owner thread) makes
 * the previous holder's writes visible.  The blocks the reclaimer evicts
 * come back held once by this thread alone: those taken ahead of need go
 * back to 0 by a plain store (free_sole, a sole holder's free) before
 * they are listed in the cache or pushed.  The cache's busy/drain
 * protocol is argued in tcache.c, the stack's tags in stack.h, and why
 * -ENOSPC is never false in doc/architecture.md, "The pool".
 */
#include <errno.h>
#include <string.h>

#include "conf.h"
#include "pool.h"
#include "pool_int.h"
#include "tcache.h"

/* Zeroes the data of freshly allocated blocks (KVP_POOL_ZERO). */
static void zero_blocks(struct kvp_pool *pool, const uint32_t *ids,
			uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		memset(pool->data + (size_t)ids[i] * pool->block_bytes, 0,
		       pool->block_bytes);
}

/* Marks freshly allocated ids as held once (0 -> 1, see above). */
static inline void mark_allocated(struct kvp_pool *pool, const uint32_t *ids,
				  uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		bstate_give_sole(&pool->state[ids[i]]);
}

static int alloc_reclaim(struct kvp_pool *pool, struct tcache *tc,
			 uint32_t n, uint32_t *ids);

/* No thread cache: straight from the global stack. */
static int alloc_direct(struct kvp_pool *pool, uint32_t n, uint32_t *ids)
{
	uint32_t first;

	if (!stack_pop_chain(&pool->stack, pool->next, n, n, &first)) {
		int err = alloc_reclaim(pool, NULL, n, ids);

		if (!err)
			atomic_fetch_add_explicit(&pool->direct_allocs, n,
						  memory_order_relaxed);
		return err;
	}
	stack_chain_copy(pool->next, first, n, ids);
	mark_allocated(pool, ids, n);
	pool_note_used(pool, pool->num_blocks -
				     atomic_load_explicit(&pool->stack.count,
							  memory_order_relaxed));
	atomic_fetch_add_explicit(&pool->direct_allocs, n,
				  memory_order_relaxed);
	return 0;
}

/*
 * Owner, inside an operation, with c < n parked: tops the cache up from
 * the global stack so that n can be taken and about half a cache remains.
 */
static int alloc_refill(struct kvp_pool *pool, struct tcache *tc, uint32_t c,
			uint32_t n, uint32_t *ids)
{
	uint32_t need = n - c, half = tc->cap / 2, extra = 0, first, k;

	if (n <= tc->cap)
		extra = half < tc->cap - n ? half : tc->cap - n;
	k = stack_pop_chain(&pool->stack, pool->next, need, need + extra,
			    &first);
	if (!k)
		return -ENOSPC;
	if (c + k <= tc->cap) {
		stack_chain_copy(pool->next, first, k, tc->slots + c);
		c += k;
		memcpy(ids, tc->slots + c - n, n * sizeof(*ids));
		tcache_set_count(tc, c - n);
	} else { /* n > cap: everything parked plus the chain */
		memcpy(ids, tc->slots, c * sizeof(*ids));
		stack_chain_copy(pool->next, first, k, ids + c);
		tcache_set_count(tc, 0);
	}
	mark_allocated(pool, ids, n);
	return 0;
}

/*
 * Evictions ahead of need: an allocation of at most evict_ahead_max
 * blocks (conf.h: 128 by default) that must evict takes up to half a
 * cache more, and at most evict_ahead_max, and parks them in the
 * thread's cache, so that the next small allocations (a decode step's
 * new blocks) find them there instead of each taking the evictable
 * list's lock.  At most one block in evict_ahead_share (256 by default;
 * 1 in the test builds, so that the model fuzz's small pools evict ahead
 * as well) of the evictable ones: the blocks evicted early are the next
 * least recently freed, and in a large pool so few that the hit rate
 * cannot tell.  A small pool evicts exactly what it must.
 */
static uint32_t evict_ahead(struct kvp_pool *pool,
			    const struct pool_reclaimer *rc, struct tcache *tc,
			    uint32_t need)
{
	uint32_t room, max = pool->evict_ahead_max;
	uint64_t share;

	if (!tc || need > max)
		return 0;
	share = rc->evictable(pool->reclaimer_ctx) / pool->evict_ahead_share;
	room = tc->cap / 2;
	if (room > max)
		room = max;
	return share < room ? (uint32_t)share : room;
}

/*
 * Owner, not inside an operation: frees ids[0..n) (uncached, held once
 * by the caller alone) into tc, or onto the global stack if they do not
 * fit.
 */
static void park_ahead(struct kvp_pool *pool, struct tcache *tc,
		       const uint32_t *ids, uint32_t n)
{
	uint32_t c;

	/* Held once by us alone (the reclaimer's): free again, with a plain
	 * store, as a sole holder's free (see the top). */
	for (uint32_t i = 0; i < n; i++)
		bstate_free_sole(&pool->state[ids[i]]);
	while (unlikely(!tcache_enter(tc)))
		tcache_wait_drain(tc);
	c = tcache_count(tc);
	if (c + n <= tc->cap) {
		memcpy(tc->slots + c, ids, n * sizeof(*ids));
		tcache_set_count(tc, c + n);
		n = 0;
	}
	tcache_exit(tc);
	if (n)
		stack_push_ids(&pool->stack, pool->next, ids, n);
}

/*
 * Evicts between need and need + ahead blocks (0 < ahead and need at most
 * evict_ahead_max, itself at most CONF_EVICT_AHEAD_LIMIT): the first need
 * into ids, the rest parked in tc.  Returns false (nothing changed) if
 * fewer than need are evictable.
 */
static bool evict_into(struct kvp_pool *pool, const struct pool_reclaimer *rc,
		       struct tcache *tc, uint32_t need, uint32_t ahead,
		       uint32_t *ids)
{
	uint32_t buf[2 * CONF_EVICT_AHEAD_LIMIT], k;

	if (!ahead)
		return rc->reclaim(pool->reclaimer_ctx, need, need, ids) != 0;
	k = rc->reclaim(pool->reclaimer_ctx, need, need + ahead, buf);
	if (!k)
		return false;
	memcpy(ids, buf, need * sizeof(*ids));
	if (k > need)
		park_ahead(pool, tc, buf + need, k - need);
	return true;
}

/*
 * The calling thread's cache and the global stack could not give n
 * blocks.  Never-cached blocks first: what they still hold, then
 * evictable cached blocks (prefix caching), and only then the other
 * threads' caches, drained (topped up by eviction).  Not inside an owner
 * operation.  Returns 0 (ids held once each) or -ENOSPC (nothing changed).
 */
static int alloc_reclaim_once(struct kvp_pool *pool, struct tcache *tc,
			      uint32_t n, uint32_t *ids)
{
	const struct pool_reclaimer *rc = reclaimer_of(pool);
	bool evict = rc != NULL;
	uint64_t free_then;
	uint32_t got = 0, first = KVP_NIL, k;

	if (evict) {
		if (tc) {
			uint32_t c;

			while (unlikely(!tcache_enter(tc)))
				tcache_wait_drain(tc);
			c = tcache_count(tc);
			got = c < n ? c : n;
			memcpy(ids, tc->slots + c - got, got * sizeof(*ids));
			tcache_set_count(tc, c - got);
			tcache_exit(tc);
		}
		if (got < n) {
			k = stack_pop_chain(&pool->stack, pool->next, 1,
					    n - got, &first);
			stack_chain_copy(pool->next, first, k, ids + got);
			got += k;
		}
		if (got == n ||
		    evict_into(pool, rc, tc, n - got,
			       evict_ahead(pool, rc, tc, n - got), ids + got)) {
			/* The evicted ones are held once already. */
			mark_allocated(pool, ids, got);
			return 0;
		}
		if (got)
			stack_push_ids(&pool->stack, pool->next, ids, got);
	}
	k = tcache_drain_alloc(&pool->depot, evict ? 1 : n, n, ids, &free_then);
	pool_note_used(pool, pool->num_blocks - free_then);
	if (k < n &&
	    (!evict || !rc->reclaim(pool->reclaimer_ctx, n - k, n - k, ids + k))) {
		if (k)
			stack_push_ids(&pool->stack, pool->next, ids, k);
		return -ENOSPC;
	}
	mark_allocated(pool, ids, k); /* as above */
	return 0;
}

/*
 * alloc_reclaim_once(), and if it finds too few blocks, again once every
 * parked reference is dropped (their idle blocks become evictable): no
 * false -ENOSPC for blocks only parked references hold.
 */
static __attribute__((noinline)) int
alloc_reclaim(struct kvp_pool *pool, struct tcache *tc, uint32_t n,
	      uint32_t *ids)
{
	int err = alloc_reclaim_once(pool, tc, n, ids);

	if (err == -ENOSPC && reclaimer_of(pool) && pool_unpark_all(pool))
		err = alloc_reclaim_once(pool, tc, n, ids);
	return err;
}

/* Everything but the common case of kvp_pool_alloc; see below. */
static __attribute__((noinline)) int alloc_slow(struct kvp_pool *pool,
						uint32_t n, uint32_t *ids)
{
	struct tcache *tc;
	uint32_t c;
	int err;

	/* The fast path leaves n == 0 to us (it fails its count check). */
	if (unlikely(n == 0))
		return -EINVAL;
	tc = tcache_get(&pool->depot);
	if (unlikely(!tc)) {
		err = alloc_direct(pool, n, ids);
		goto out;
	}
	while (unlikely(!tcache_enter(tc)))
		tcache_wait_drain(tc);
	c = tcache_count(tc);
	if (c >= n) {
		c -= n;
		memcpy(ids, tc->slots + c, n * sizeof(*ids));
		tcache_set_count(tc, c);
		mark_allocated(pool, ids, n);
		err = 0;
	} else {
		err = alloc_refill(pool, tc, c, n, ids);
	}
	tcache_exit(tc);
	if (unlikely(err))
		err = alloc_reclaim(pool, tc, n, ids);
	if (likely(!err))
		tcache_add(&tc->allocs, n);
out:
	if (!err && (pool->flags & KVP_POOL_ZERO) && pool->data)
		zero_blocks(pool, ids, n);
	if (err == -ENOSPC)
		pool_note_nospace(pool, n);
	return err;
}

/*
 * Copies src[0..n) to ids and marks each block held once (0 -> 1, see the
 * top).  Eight per iteration, so the loop's own work is paid per eight
 * blocks; a single block (the commonest call) takes no loop at all.
 */
static inline __attribute__((always_inline)) void
give_sole_all(bstate_t *state, const uint32_t *src, uint32_t n,
	      uint32_t *ids)
{
	const uint32_t *end = src + n;

	if (n == 1) {
		size_t id = *src;

		*ids = (uint32_t)id;
		bstate_give_sole(&state[id]);
		return;
	}
	for (; end - src >= 8; src += 8, ids += 8)
#pragma GCC unroll 8
		for (uint32_t k = 0; k < 8; k++) {
			size_t id = src[k];

			ids[k] = (uint32_t)id;
			bstate_give_sole(&state[id]);
		}
	for (; src < end; src++, ids++) {
		size_t id = *src;

		*ids = (uint32_t)id;
		bstate_give_sole(&state[id]);
	}
}

/*
 * The common case is a leaf: the calling thread's cache for this pool was
 * the last one it used, no drain is in progress, the cache holds n blocks
 * and nothing needs zeroing.  Anything else goes to alloc_slow(), which
 * also refuses n == 0 (it fails the count check here: n - 1 wraps).
 */
KVP_API int kvp_pool_alloc(struct kvp_pool *pool, uint32_t n, uint32_t *ids)
{
	struct tcache *tc;
	bstate_t *state;
	const uint32_t *slots;
	uint32_t c;

	if (unlikely(!pool || !ids))
		return -EINVAL;
	if (unlikely(!tcache_last_is(&pool->depot) ||
		     (pool->flags & KVP_POOL_ZERO)))
		return alloc_slow(pool, n, ids);
	tc = tcache_last.tc;
	if (unlikely(!tcache_enter(tc)))
		return alloc_slow(pool, n, ids);
	c = tcache_count(tc);
	if (unlikely(n - 1 >= c)) { /* c < n, or n == 0 */
		tcache_exit(tc);
		return alloc_slow(pool, n, ids);
	}
	c -= n;
	/* Locals: ids may alias anything, so the compiler would reload the
	 * fields on every iteration. */
	state = pool->state;
	slots = tc->slots + c;
	/* The top n ids, in slot order; one pass copies and marks. */
	give_sole_all(state, slots, n, ids);
	tcache_set_count(tc, c);
	tcache_exit(tc);
	tcache_add(&tc->allocs, n);
	return 0;
}
