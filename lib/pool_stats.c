/* SPDX-License-Identifier: MIT */
/*
 * pool_stats.c - what a block pool reports: kvp_pool_stats (blocks in
 * thread caches, idle cached blocks and those held only by parked
 * references counted as free), the cheaper estimate of blocks in use,
 * the parked references' counts, the record of a shortage, and
 * kvp_pool_check, the quiescent check of the free lists against the
 * state words.
 * Floor 4 of lib/ (doc/architecture.md, "Layers"): over pool.c (the
 * state words), tcache.c, stack.h and alloc.c; pool_alloc.c calls it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "error.h"
#include "pool.h"
#include "pool_int.h"
#include "tcache.h"

void pool_count_parked(struct kvp_pool *pool, uint32_t *counts)
{
	for (struct tcache *tc = atomic_load_explicit(&pool->depot.tcaches,
						      memory_order_acquire);
	     tc; tc = tc->next)
		for (uint32_t i = 0; i < KVP_PARK_SLOTS; i++) {
			/* Relaxed: quiescent. */
			uint32_t v = atomic_load_explicit(&tc->park[i],
							  memory_order_relaxed);

			if (v && v - 1 < pool->num_blocks)
				counts[v - 1]++;
		}
}

/*
 * Cached blocks held only by parked references: idle in all but name
 * (evictable: a shortage drops the references first).  A block parked by
 * several threads counts once, in the first cache that parks it.
 * Relaxed reads: a statistic, exact at quiescence.
 */
static uint64_t parked_idle(struct kvp_pool *pool)
{
	struct tcache *head = atomic_load_explicit(&pool->depot.tcaches,
						   memory_order_acquire);
	uint64_t n = 0;

	for (struct tcache *tc = head; tc; tc = tc->next)
		for (uint32_t i = 0; i < KVP_PARK_SLOTS; i++) {
			uint32_t v = atomic_load_explicit(&tc->park[i],
							  memory_order_relaxed);
			uint32_t holders = 0, s;
			bool first = true;

			if (!v || v - 1 >= pool->num_blocks)
				continue;
			s = pool_block_word(pool, v - 1);
			if (s == (KVP_ST_CACHED | 1)) {
				n++; /* our parked reference alone */
				continue;
			}
			for (struct tcache *o = head; o; o = o->next)
				if (atomic_load_explicit(&o->park[i],
							 memory_order_relaxed) ==
				    v) {
					first &= holders > 0 || o == tc;
					holders++;
				}
			n += first && bstate_is_cached(s) &&
			     bstate_refs(s) == holders;
		}
	return n;
}

/* The blocks an allocation that failed could have had are the free ones
 * as kvp_pool_stats counts them (idle cached and parked ones included). */
void pool_note_nospace(struct kvp_pool *pool, uint64_t n)
{
	struct kvp_pool_stats st;

	kvp_pool_stats(pool, &st);
	kvp_note_nospace(n, st.free);
}

KVP_API void kvp_pool_stats(struct kvp_pool *pool, struct kvp_pool_stats *st)
{
	const struct pool_reclaimer *rc;
	struct pool_reclaimer_stats rs = {0};
	uint64_t parked, allocs, frees, on_stack, nparked;
	uint32_t threads;

	if (!pool || !st)
		return;
	rc = reclaimer_of(pool);
	if (rc)
		rc->stats(pool->reclaimer_ctx, &rs);
	tcache_sum(&pool->depot, &parked, &allocs, &frees, &nparked,
		   &threads);
	/* Relaxed: statistics. */
	on_stack = atomic_load_explicit(&pool->stack.count,
					memory_order_relaxed);
	memset(st, 0, sizeof(*st));
	st->total = pool->num_blocks;
	st->in_thread_caches = parked;
	st->evictable = rs.evictable + (nparked ? parked_idle(pool) : 0);
	st->cache_evictions = rs.evictions;
	st->free = on_stack + parked + st->evictable;
	if (st->free > st->total)
		st->free = st->total;
	st->used = st->total - st->free;
	pool_note_used(pool, st->used);
	st->peak_used =
		atomic_load_explicit(&pool->peak_used, memory_order_relaxed);
	st->allocs = allocs + rs.revived +
		     atomic_load_explicit(&pool->direct_allocs,
					  memory_order_relaxed);
	st->frees = frees + rs.released +
		    atomic_load_explicit(&pool->direct_frees,
					 memory_order_relaxed);
	st->cache_blocks = pool->depot.cap;
	st->threads = threads;
}

uint64_t pool_used_estimate(struct kvp_pool *pool)
{
	const struct pool_reclaimer *rc = reclaimer_of(pool);
	uint64_t parked, allocs, frees, nparked, free;
	uint32_t threads;

	tcache_sum(&pool->depot, &parked, &allocs, &frees, &nparked,
		   &threads);
	/* Relaxed: an estimate. */
	free = atomic_load_explicit(&pool->stack.count, memory_order_relaxed) +
	       parked + nparked +
	       (rc ? rc->evictable(pool->reclaimer_ctx) : 0);
	return free < pool->num_blocks ? pool->num_blocks - free : 0;
}

/* kvp_pool_check: marks id as seen on a free list; false if it was. */
static bool check_mark(uint8_t *seen, uint32_t id)
{
	bool was = seen[id / 8] & (1u << (id % 8));

	seen[id / 8] |= (uint8_t)(1u << (id % 8));
	return !was;
}

#define check_fail(...)                                                      \
	do {                                                                 \
		fprintf(stderr, "kvp_pool_check: " __VA_ARGS__);             \
		return -EFAULT;                                              \
	} while (0)

/*
 * The checks of kvp_pool_check, each 0 or -EFAULT (the reason printed).
 * Quiescent: relaxed loads see every thread's last writes, ordered by
 * whatever made the pool quiescent (joins, locks).  `seen` marks the
 * blocks found on a free list.
 */
/* The free stack: links in range, no block twice, no cycle, its count. */
static int check_stack(struct kvp_pool *pool, uint8_t *seen,
		       uint64_t *on_stack)
{
	uint64_t counted;
	uint32_t id;

	*on_stack = 0;
	id = stack_top(atomic_load_explicit(&pool->stack.head,
					    memory_order_acquire));
	while (id != KVP_NIL) {
		if (id >= pool->num_blocks)
			check_fail("stack link %u out of range\n", id);
		if (!check_mark(seen, id))
			check_fail("block %u twice on the free lists\n", id);
		if (++*on_stack > pool->num_blocks)
			check_fail("cycle in the free stack\n");
		id = atomic_load_explicit(&pool->next[id],
					  memory_order_relaxed);
	}
	counted = atomic_load_explicit(&pool->stack.count,
				       memory_order_relaxed);
	if (counted != *on_stack)
		check_fail("stack count %llu, but %llu blocks on it\n",
			   (unsigned long long)counted,
			   (unsigned long long)*on_stack);
	return 0;
}

/* The threads' caches: within capacity, idle, ids in range, no block
 * twice; *parked: the blocks they hold. */
static int check_tcaches(struct kvp_pool *pool, uint8_t *seen,
			 uint64_t *parked)
{
	*parked = 0;
	for (struct tcache *tc = atomic_load_explicit(&pool->depot.tcaches,
						      memory_order_acquire);
	     tc; tc = tc->next) {
		uint32_t c = tcache_count(tc);

		if (c > tc->cap)
			check_fail("cache holds %u > capacity %u\n", c,
				   tc->cap);
		if (atomic_load_explicit(&tc->busy, memory_order_relaxed) ||
		    atomic_load_explicit(&tc->drain, memory_order_relaxed))
			check_fail("cache busy or draining at quiescence\n");
		for (uint32_t i = 0; i < c; i++) {
			uint32_t id = tc->slots[i];

			if (id >= pool->num_blocks)
				check_fail("cached id %u out of range\n", id);
			if (!check_mark(seen, id))
				check_fail("block %u twice on the free "
					   "lists\n",
					   id);
		}
		*parked += c;
	}
	return 0;
}

/* Every block: free (state 0) if and only if on a free list. */
static int check_blocks(struct kvp_pool *pool, const uint8_t *seen)
{
	for (uint32_t id = 0; id < pool->num_blocks; id++) {
		uint32_t s = pool_block_word(pool, id);
		bool listed = seen[id / 8] & (1u << (id % 8));

		if (s == 0 && !listed)
			check_fail("free block %u is on no free list (lost)\n",
				   id);
		if (s != 0 && listed)
			check_fail("block %u has %u references (state %#x) "
				   "but is on a free list\n",
				   id, bstate_refs(s), s);
	}
	return 0;
}

KVP_API int kvp_pool_check(struct kvp_pool *pool)
{
	uint64_t on_stack = 0, parked = 0;
	size_t bytes;
	uint8_t *seen;
	int err;

	if (!pool)
		return -EINVAL;
	bytes = pool->num_blocks / 8 + 1;
	seen = kvp_calloc(bytes, 1);
	if (!seen)
		return -ENOMEM;
	err = check_stack(pool, seen, &on_stack);
	if (!err)
		err = check_tcaches(pool, seen, &parked);
	if (!err)
		err = check_blocks(pool, seen);
	if (!err && reclaimer_of(pool))
		err = reclaimer_of(pool)->check(pool->reclaimer_ctx);
	if (!err)
		pool_note_used(pool, pool->num_blocks - on_stack - parked);
	kvp_free(seen, bytes);
	return err;
}
