/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the block pool's state words and its free paths: the two-pass
 * drop of references (kvp_pool_free, pool_free_distinct), the sinks that
 * list the blocks a free takes to zero, the parking of references in the
 * threads' caches and their drop, and kvp_block_ref.  The other rooms of
 * the pool share pool.h and pool_int.h: pool_alloc.c (allocation),
 * pool_create.c (creation, configuration, the reclaimer's registration)
 * and pool_stats.c (stats, kvp_pool_check).
 * Floor 4 of lib/ (doc/architecture.md, "Layers"): over tcache.c and
 * stack.h; the pool's other three files call it, and it calls none of them.
 *
 * Correctness argument (block states).
 *
 * state[id] holds the block's reference count (0 = free) and flags, and
 * changes only by bstate.h's named transitions (the whole table is
 * there).  A free block is in exactly one free list: the global stack
 * (stack.h) or one thread's cache (tcache.c); both hand an id to exactly
 * one thread.  The pool's own transitions, and why each is safe:
 *
 *   0 -> 1          give_sole: kvp_pool_alloc, by the thread that removed the id from
 *                   a free list.  No one else can reach the block, so a
 *                   relaxed store suffices; the free list's own ordering
 *                   (the pop's acquire, or program order within the owner
 *                   thread) makes the previous holder's writes visible.
 *   r -> r + 1      ref: kvp_block_ref, by a holder (r >= 1): CAS loop, relaxed
 *                   (taking a reference publishes nothing).
 *   r -> r - 1      drop: kvp_pool_free with r >= 2: CAS loop with release, so
 *                   that the last holder (who loads with acquire) sees this
 *                   holder's writes before the block is reused.
 *   1 -> 0          take_sole: kvp_pool_free by the last holder.  A thread that sees
 *                   exactly 1 holds that one reference itself, so nobody
 *                   else may change the word (taking a reference requires
 *                   holding one), and a plain store suffices: no RMW on the
 *                   common free path.  The acquire load that saw 1 pairs
 *                   with the release decrements of the other holders.
 *
 * kvp_pool_free is all or nothing, in two passes.  The first checks every
 * id, takes each block whose word is exactly 1 to zero and counts, without
 * touching them, the blocks other holders share.  Only the blocks it took
 * to zero can be restored safely on error (nobody else holds them); an
 * undone decrement of a shared block could resurrect a block that another
 * holder freed in between.  So shared blocks are decremented only in the
 * second pass, after an id repeated k times has been checked to have at
 * least k references: for a caller that holds what it frees, the second
 * pass cannot fail.  A block seen free in the first pass (a double free,
 * or an id repeated more often than its references) undoes the pass and
 * returns -EALREADY.
 *
 * Each block a call takes to zero is listed by that call alone, as it
 * takes it: into the cache's slots above the published count (no drainer
 * reads there; freeing up to half a cache) or into a private chain linked
 * through next[] and pushed onto the global stack in one CAS (larger frees,
 * pools without caches).  Never by scanning states afterwards: a shared
 * block that another thread's free took to zero must not be listed twice.
 *
 * A double free that races another free of the same block (two threads
 * both seeing 1) is a caller bug that cannot be detected without an RMW on
 * every free; kvpool.h documents it.
 *
 * The 0 -> 1 of an allocation is made in pool_alloc.c, whose opening
 * comment points here.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "conf.h"
#include "pool.h"
#include "pool_int.h"
#include "tcache.h"

/* Per-block metadata: the state word and the free-stack link, each a
 * 32-bit word that atomics handle without a lock. */
_Static_assert(sizeof(_Atomic uint32_t) == 4 && ATOMIC_INT_LOCK_FREE == 2,
	       "the state and link words must be lock-free 32-bit atomics");

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* The one sole-holder step (1 -> 0, see the top) of every free path. */
static inline __attribute__((always_inline)) bool
take_sole(bstate_t *state, size_t id, uint32_t *seen)
{
	return likely(bstate_take_sole(&state[id], seen));
}

/*
 * Undoes drop_sole() on ids[0..n): a block at zero there is one the call
 * took to zero (a caller holding its references keeps the others above
 * zero), so it goes back to one reference.  The sink is discarded.
 */
static __attribute__((noinline)) void undo_sole(struct kvp_pool *pool,
						const uint32_t *ids,
						uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (pool_block_word(pool, ids[i]) == 0)
			bstate_give_sole(&pool->state[ids[i]]);
}

/*
 * Where kvp_pool_free puts the blocks it takes to zero: an array (the
 * cache's slots above its count) or, if out is NULL, a private chain
 * linked through next[] for one push onto the global stack.  Only the
 * call that took a block to zero ever lists it.
 */
struct free_sink {
	uint32_t *out;
	uint32_t first, last, z;
};

static inline void sink_put(struct kvp_pool *pool, struct free_sink *sk,
			    uint32_t id)
{
	if (sk->out) {
		sk->out[sk->z++] = id;
		return;
	}
	if (sk->z++)
		/* Relaxed: the block is ours; the push publishes it. */
		atomic_store_explicit(&pool->next[sk->last], id,
				      memory_order_relaxed);
	else
		sk->first = id;
	sk->last = id;
}

/* Whether block id, repeated k times in a free, lacks the references. */
static bool too_few_refs(struct kvp_pool *pool, uint32_t id, uint32_t k)
{
	return k > 1 && bstate_refs(pool_block_word(pool, id)) < k;
}

#define KVP_FREE_SORT_MAX 1024u /* shared ids sorted on the stack */

/*
 * An id repeated k times needs k references.  The shared ids (still held
 * after the first pass) are checked against their counts, which a
 * legitimate caller's own references keep at least that high whatever
 * other holders do.  Usually no id repeats: a 64-bit filter proves it in
 * one pass.  Otherwise up to KVP_FREE_SORT_MAX shared ids are sorted in a
 * stack buffer; beyond that each id's occurrences are counted in place.
 * No allocation: a free never fails for lack of memory.
 */
static __attribute__((noinline)) int
check_multiplicity(struct kvp_pool *pool, const uint32_t *ids, uint32_t n)
{
	uint32_t buf[KVP_FREE_SORT_MAX], m = 0;
	uint64_t seen = 0;
	bool collide = false;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t bit;

		if (!bstate_held(pool_block_word(pool, ids[i])))
			continue; /* taken to zero by the first pass */
		bit = 1ull << ((ids[i] * 0x9e3779b1u) >> 26);
		collide |= (seen & bit) != 0;
		seen |= bit;
		if (m < KVP_FREE_SORT_MAX)
			buf[m] = ids[i];
		m++;
	}
	if (!collide)
		return 0;
	if (m > KVP_FREE_SORT_MAX) {
		for (uint32_t i = 0; i < n; i++) {
			uint32_t k = 0;

			for (uint32_t j = 0; j < n; j++)
				k += ids[j] == ids[i];
			if (too_few_refs(pool, ids[i], k))
				return -EALREADY;
		}
		return 0;
	}
	qsort(buf, m, sizeof(*buf), cmp_u32);
	for (uint32_t i = 0, j; i < m; i = j) {
		for (j = i + 1; j < m && buf[j] == buf[i]; j++)
			;
		if (too_few_refs(pool, buf[i], j - i))
			return -EALREADY;
	}
	return 0;
}

/*
 * Cached blocks a free took to zero, handed to the evictable list in the
 * order freed, one reclaimer idle() call (prefix_pool.c: one list lock) per
 * batch of the pool's idle_batch (conf.h: 256 by default, the most): a
 * 4,096-token prompt of 16-token blocks in one.
 */
struct idle_batch {
	uint32_t n;
	uint32_t ids[CONF_IDLE_BATCH_LIMIT];
};

static inline void idle_flush(struct kvp_pool *pool, struct idle_batch *b)
{
	/* Only a pool with a reclaimer has cached blocks. */
	if (b->n)
		reclaimer_of(pool)->idle(pool->reclaimer_ctx, b->ids, b->n);
	b->n = 0;
}

/*
 * Drops one reference on block id, whose word was seen as s, by CAS
 * (other holders, or hits on a cached block, may change it meanwhile).  A
 * block taken to zero goes to the sink, or, if cached, to the idle batch.
 * Returns false, changing nothing, if the block was free.
 */
static inline __attribute__((always_inline)) bool
drop_held(struct kvp_pool *pool, uint32_t id, uint32_t s,
	  struct free_sink *sk, struct idle_batch *idle)
{
	uint32_t nw = bstate_drop(&pool->state[id], s);

	if (nw == UINT32_MAX)
		return false;
	if (bstate_held(nw))
		return true;
	if (!bstate_is_cached(nw)) {
		sink_put(pool, sk, id);
		return true;
	}
	idle->ids[idle->n++] = id;
	if (idle->n >= pool->idle_batch)
		idle_flush(pool, idle);
	return true;
}

/*
 * Second pass of kvp_pool_free over blocks that had other holders: drops
 * one reference per occurrence; a block whose count reaches zero goes to
 * the sink.  Blocks the first pass took to zero are skipped.  Cannot fail
 * once check_multiplicity() passed, short of a racing double free (a
 * caller bug).
 */
static __attribute__((noinline)) void
drop_shared(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
	    struct free_sink *sk)
{
	/* Only n is initialised: the ids are written before they are read
	 * (zeroing the whole batch cost a 1 KiB memset per free). */
	struct idle_batch idle;

	idle.n = 0;
	for (uint32_t i = 0; i < n; i++)
		(void)drop_held(pool, ids[i], pool_block_word(pool, ids[i]),
				sk, &idle);
	idle_flush(pool, &idle);
}

/*
 * First pass of kvp_pool_free (see the argument at the top): checks every
 * id, takes each sole-held block (word exactly 1) to zero and puts it in
 * the sink; counts the blocks with other holders in *shared without
 * touching them.  On error, restores the blocks it took (they are the
 * caller's alone) and returns -ERANGE or -EALREADY.
 */
static inline __attribute__((always_inline)) int
drop_sole(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
	  struct free_sink *sk, uint32_t *shared, const bool to_array)
{
	/* Locals: ids may alias anything, so the compiler would reload the
	 * fields (and the sink) on every iteration.  to_array is a constant
	 * at each call site, so the sink's branch folds away. */
	bstate_t *state = pool->state;
	uint32_t num_blocks = pool->num_blocks, i = 0, z = 0, *out = sk->out;
	uint32_t nshared = 0, seen;
	int err = 0;

	/* The common case first: every block held by the caller alone, so
	 * the i-th id is the i-th block freed. */
	if (to_array) {
		for (; i < n; i++) {
			uint32_t id = ids[i];

			if (unlikely(id >= num_blocks ||
				     !take_sole(state, id, &seen)))
				break;
			out[i] = id;
		}
		z = i;
	}
	for (; i < n; i++) {
		uint32_t id = ids[i], s;

		if (unlikely(id >= num_blocks)) {
			err = -ERANGE;
			break;
		}
		if (likely(take_sole(state, id, &s))) {
			if (to_array)
				out[z++] = id;
			else
				sink_put(pool, sk, id);
		} else if (bstate_held(s)) {
			nshared++;
		} else {
			err = -EALREADY;
			break;
		}
	}
	if (unlikely(err)) {
		undo_sole(pool, ids, i);
		return err;
	}
	if (to_array)
		sk->z = z;
	*shared = nshared;
	return 0;
}

/* State words drop_distinct() prefetches before its first CAS. */
#define KVP_DROP_AHEAD 256u

/*
 * kvp_pool_free's drop for a caller that holds one reference on each of
 * its distinct ids (a sequence's table): one pass, as it cannot fail
 * short of a caller bug (-ERANGE, -EALREADY: then every other id is still
 * dropped, so nothing leaks).  Blocks others share, or cached ones (which
 * hits may take references on at any time), are decremented by CAS.
 *
 * The state words are prefetched for writing (kvp_prefetch_w): the first
 * KVP_DROP_AHEAD at once, then 4 ids ahead.  Shared blocks' lines are
 * often in another core's cache, and a sequence's table covers a few
 * lines of them (a 4,096-token prompt's 256 blocks: 16 lines when they
 * were allocated together), whose transfers then overlap instead of
 * following one another (the builtin's "write" prefetch is a read one on
 * x86-64; the ChangeLog of 2026-11-22 has the measurements).
 */
static inline __attribute__((always_inline)) int
drop_distinct(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
	      struct free_sink *sk)
{
	bstate_t *state = pool->state;
	uint32_t num_blocks = pool->num_blocks;
	struct idle_batch idle; /* only n initialised, as above */
	int err = 0;

	idle.n = 0;
	for (uint32_t i = 0; i < n && i < KVP_DROP_AHEAD; i++)
		if (ids[i] < num_blocks)
			kvp_prefetch_w(&state[ids[i]]);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = ids[i], s;

		if (i + 4 < n && ids[i + 4] < num_blocks)
			kvp_prefetch_w(&state[ids[i + 4]]);
		if (unlikely(id >= num_blocks)) {
			err = -ERANGE;
			continue;
		}
		if (likely(take_sole(state, id, &s))) {
			sink_put(pool, sk, id);
		} else if (unlikely(!drop_held(pool, id, s, sk, &idle))) {
			err = -EALREADY;
		}
	}
	idle_flush(pool, &idle);
	return err;
}

/*
 * Both passes: fills the sink with the blocks taken to zero, or returns a
 * negative errno with nothing changed.
 */
static inline __attribute__((always_inline)) int
drop_refs(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
	  struct free_sink *sk, const bool to_array, const bool distinct)
{
	uint32_t shared = 0;
	int r;

	if (distinct) {
		sk->z = 0;
		return drop_distinct(pool, ids, n, sk);
	}
	r = drop_sole(pool, ids, n, sk, &shared, to_array);
	if (likely(r < 0 || shared == 0))
		return r;
	if (shared > 1) {
		r = check_multiplicity(pool, ids, n);
		if (r) {
			undo_sole(pool, ids, n);
			return r;
		}
	}
	drop_shared(pool, ids, n, sk);
	return 0;
}

/*
 * kvp_pool_free of more ids than half a cache, or without a cache: the
 * blocks taken to zero go to the global stack as one chain.
 */
static int free_to_stack(struct kvp_pool *pool, struct tcache *tc,
			 const uint32_t *ids, uint32_t n, bool distinct)
{
	struct free_sink sk = {.out = NULL};
	int r = distinct ? drop_refs(pool, ids, n, &sk, false, true)
			 : drop_refs(pool, ids, n, &sk, false, false);

	/* A distinct drop that failed keeps what it dropped: list it. */
	if (r < 0 && !distinct)
		return r;
	if (sk.z)
		stack_push_chain(&pool->stack, pool->next, sk.first, sk.last,
				 sk.z);
	if (tc)
		tcache_add(&tc->frees, sk.z);
	else
		atomic_fetch_add_explicit(&pool->direct_frees, sk.z,
					  memory_order_relaxed);
	return r;
}

/*
 * Frees up to half a cache through it, in one pass: blocks reaching zero
 * go straight into the cache above its published count, where no drainer
 * looks; on error the pass is undone and the count never moves.  Owner,
 * inside an operation, with c + n <= cap.
 */
static inline __attribute__((always_inline)) int
free_into_cache(struct kvp_pool *pool, struct tcache *tc, uint32_t c,
		const uint32_t *ids, uint32_t n, const bool distinct)
{
	struct free_sink sk = {.out = tc->slots + c};
	int r = drop_refs(pool, ids, n, &sk, true, distinct);

	/* A distinct drop that failed keeps what it dropped: list it. */
	if (unlikely(r < 0 && !distinct)) {
		tcache_exit(tc);
		return r;
	}
	tcache_set_count(tc, c + sk.z);
	tcache_exit(tc);
	tcache_add(&tc->frees, sk.z);
	return r;
}

/* Everything but the common case of kvp_pool_free; see below. */
static __attribute__((noinline)) int free_slow(struct kvp_pool *pool,
					       const uint32_t *ids, uint32_t n,
					       bool distinct)
{
	struct tcache *tc;
	uint32_t c;

	/* The fast paths leave n == 0 to us (it fails their room check). */
	if (unlikely(n == 0))
		return -EINVAL;
	tc = tcache_get(&pool->depot);
	if (!tc || n > tc->cap / 2)
		return free_to_stack(pool, tc, ids, n, distinct);
	while (unlikely(!tcache_enter(tc)))
		tcache_wait_drain(tc);
	c = tcache_count(tc);
	if (c + n > tc->cap) {
		tcache_flush_half(tc);
		c = tcache_count(tc);
	}
	return distinct ? free_into_cache(pool, tc, c, ids, n, true)
			: free_into_cache(pool, tc, c, ids, n, false);
}

/*
 * The common case of a free: the calling thread's last-used cache is this
 * pool's, no drain is in progress and it has room for n more blocks.
 * Returns the cache entered (its count in *c), or NULL (not entered; also
 * for n == 0, which wraps in the room check and is left to free_slow()).
 */
static inline __attribute__((always_inline)) struct tcache *
free_cache_enter(struct kvp_pool *pool, uint32_t n, uint32_t *c)
{
	struct tcache *tc;

	if (unlikely(!tcache_last_is(&pool->depot)))
		return NULL;
	tc = tcache_last.tc;
	if (unlikely(!tcache_enter(tc)))
		return NULL;
	*c = tcache_count(tc);
	if (unlikely(n - 1 >= tc->cap - *c)) { /* c + n > cap, or n == 0 */
		tcache_exit(tc);
		return NULL;
	}
	return tc;
}


/*
 * Takes ids[0..n) to zero in order and lists them in out[0..n), stopping
 * at the first id out of range or not held exactly once; returns how many
 * it took.  Eight per iteration, so the loop's own work is paid per eight
 * blocks; a single block (the commonest call) takes no loop at all.
 */
static inline __attribute__((always_inline)) uint32_t
take_sole_all(bstate_t *state, uint32_t num_blocks,
	      const uint32_t *ids, uint32_t n, uint32_t *out)
{
	const uint32_t *p = ids, *end = ids + n, *end8 = ids + (n & ~7u);
	uint32_t seen; /* unused: a failed take ends the pass */

	if (n == 1) {
		size_t id = *p;

		*out = (uint32_t)id;
		return likely(id < num_blocks && take_sole(state, id, &seen));
	}
	for (; p < end8; p += 8, out += 8)
#pragma GCC unroll 8
		for (uint32_t k = 0; k < 8; k++) {
			size_t id = p[k];

			out[k] = (uint32_t)id;
			if (unlikely(id >= num_blocks ||
				     !take_sole(state, id, &seen)))
				return (uint32_t)(p - ids) + k;
		}
	for (; p < end; p++, out++) {
		size_t id = *p;

		*out = (uint32_t)id;
		if (unlikely(id >= num_blocks || !take_sole(state, id, &seen)))
			break;
	}
	return (uint32_t)(p - ids);
}

/*
 * kvp_pool_free's fast path met a block it cannot take (out of range, not
 * held exactly once): restores the `took` blocks it took to zero (the
 * caller's alone, on no free list), leaves the cache and hands the whole
 * free to the general path, which finds the error or the shared blocks.
 * The blocks restored are those listed in the cache above its count, as
 * the fast path read them, not the caller's array read again.
 */
static __attribute__((noinline, cold)) int
free_fast_undo(struct kvp_pool *pool, struct tcache *tc, const uint32_t *ids,
	       uint32_t n, uint32_t took)
{
	undo_sole(pool, tc->slots + tcache_count(tc), took);
	tcache_exit(tc);
	return free_slow(pool, ids, n, false);
}

/*
 * The common case is a leaf, as for kvp_pool_alloc: the last-used cache,
 * no drain, room for n more blocks, and every block held by the caller
 * alone (word exactly 1), so the i-th id is the i-th block freed, written
 * straight into the cache above its count (where no drainer looks).  Each
 * id is read once: the value range-checked is the value taken and listed.
 * At the first other block the pass is undone and the general path takes
 * over (free_fast_undo()).
 */
KVP_API int kvp_pool_free(struct kvp_pool *pool, const uint32_t *ids,
			  uint32_t n)
{
	struct tcache *tc;
	uint32_t c, took;

	if (unlikely(!pool || !ids))
		return -EINVAL;
	tc = free_cache_enter(pool, n, &c);
	if (unlikely(!tc))
		return free_slow(pool, ids, n, false);
	took = take_sole_all(pool->state, pool->num_blocks, ids, n,
			     tc->slots + c);
	if (unlikely(took < n))
		return free_fast_undo(pool, tc, ids, n, took);
	/* Reloaded (only we write it) rather than kept in a register
	 * across the loop. */
	tcache_set_count(tc, tcache_count(tc) + n);
	tcache_exit(tc);
	tcache_add(&tc->frees, n);
	return 0;
}

/* A distinct free through the calling thread's cache, or the slow path. */
static int free_distinct(struct kvp_pool *pool, const uint32_t *ids,
			 uint32_t n)
{
	struct tcache *tc;
	uint32_t c;

	tc = free_cache_enter(pool, n, &c);
	if (unlikely(!tc))
		return free_slow(pool, ids, n, true);
	return free_into_cache(pool, tc, c, ids, n, true);
}

/*
 * Parked references (doc/architecture.md, "The pool"; tcache.h keeps
 * them).  A sequence's free parks its references on the blocks that were
 * its prefix-cache hits, the head of its chain (the end of ids: a table is
 * released last block first): blocks other requests share, which the
 * thread is likely to hit again.  At most KVP_PARK_MAX, from the head
 * down to the first block it cannot park: uncached, or whose slot holds
 * a block this same free parked.  Blocks nobody hit are never parked, so
 * the order in which they become evictable is the exact one.  Each free
 * first drops what the thread's previous parking free left parked (what
 * the thread's hits did not take back since), so a thread keeps at most
 * one request's hits parked, and a block's release is late by at most one
 * request of its thread: parked longer, a block would stay cached longer
 * than the least-recently-freed order says (a hit-rate loss on the
 * conversation trace).  Within one free the end of a chain becomes idle
 * first and its head last (when its parked references are dropped).
 * Only in pools of KVP_PARK_MIN_BLOCKS
 * or more: parking delays when blocks become evictable, which a small
 * pool would feel, and the reference model (tests/model.c) keeps to
 * exact LRU order in small pools.
 */
#define KVP_PARK_MAX KVP_PARK_SLOTS
#define KVP_PARK_MIN_BLOCKS 1024u

/*
 * Drops (into out) what the thread's previous parking free left parked,
 * then parks the head of ids (see above): returns j, where ids[j..n) are
 * parked and the caller drops ids[0..j) and out[0..*nout) (room for
 * KVP_PARK_MAX).  n may be 0 (only the drop).  Owner, not inside an
 * operation.
 */
static uint32_t park_head(struct kvp_pool *pool, struct tcache *tc,
			  const uint32_t *ids, uint32_t n, uint32_t *out,
			  uint32_t *nout)
{
	uint32_t j = n;

	*nout = 0;
	if (!tcache_enter(tc))
		return n; /* a drain: it drops the parked ones, we ours */
	for (uint32_t k = 0; k < tc->park_nlast; k++) {
		uint32_t i = tc->park_last[k],
			 v = atomic_load_explicit(&tc->park[i],
						  memory_order_relaxed);

		if (!v)
			continue; /* taken back by a hit, or drained */
		out[(*nout)++] = v - 1;
		atomic_store_explicit(&tc->park[i], 0, memory_order_relaxed);
		tcache_add_parked(tc, -1);
	}
	tc->park_nlast = 0;
	while (j > 0 && n - j < KVP_PARK_MAX) {
		uint32_t b = ids[j - 1], i;

		/* Relaxed: we hold b, so CACHED stays as it is, short of a
		 * forced clear (a parked uncached block is freed when its
		 * reference is dropped). */
		if (b >= pool->num_blocks || !pool_block_cached(pool, b))
			break;
		i = tcache_park_slot(b);
		/* Every slot still full is this free's own (see above). */
		if (atomic_load_explicit(&tc->park[i], memory_order_relaxed))
			break;
		atomic_store_explicit(&tc->park[i], b + 1,
				      memory_order_relaxed);
		tcache_add_parked(tc, 1);
		tc->park_last[tc->park_nlast++] = (uint16_t)i;
		j--;
	}
	tcache_exit(tc);
	return j;
}

int pool_free_distinct(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
		       uint32_t park)
{
	uint32_t displaced[KVP_PARK_MAX], nd = 0, j = n;
	struct tcache *tc;
	int err = 0, e;

	if (unlikely(!pool || !ids || n == 0 || park > n))
		return -EINVAL;
	if (pool->num_blocks >= KVP_PARK_MIN_BLOCKS && reclaimer_of(pool) &&
	    (tc = tcache_get(&pool->depot)) != NULL &&
	    (park || tc->park_nlast))
		j = n - park + park_head(pool, tc, ids + n - park, park,
					 displaced, &nd);
	if (j)
		err = free_distinct(pool, ids, j);
	if (nd && (e = free_distinct(pool, displaced, nd)) != 0 && !err)
		err = e;
	return err;
}

/* The depot's unpark hook: drops parked references (to the global stack
 * and the reclaimer, never through a thread cache). */
void pool_unpark_refs(struct tcache_depot *d, const uint32_t *ids,
		      uint32_t n)
{
	struct kvp_pool *pool =
		(struct kvp_pool *)((char *)d - offsetof(struct kvp_pool, depot));

	(void)free_to_stack(pool, NULL, ids, n, true);
}

uint64_t pool_unpark_all(struct kvp_pool *pool)
{
	uint32_t ids[KVP_PARK_SLOTS], k;
	uint64_t n = 0;

	if (!pool->depot.cap)
		return 0;
	while ((k = tcache_take_parked(&pool->depot, ids, KVP_PARK_SLOTS))) {
		pool_unpark_refs(&pool->depot, ids, k);
		n += k;
	}
	return n;
}

KVP_API int kvp_block_ref(struct kvp_pool *pool, uint32_t id)
{
	if (!pool)
		return -EINVAL;
	if (id >= pool->num_blocks)
		return -ERANGE;
	return bstate_ref(&pool->state[id]);
}

KVP_API int kvp_block_refcount(struct kvp_pool *pool, uint32_t id)
{
	if (!pool)
		return -EINVAL;
	if (id >= pool->num_blocks)
		return -ERANGE;
	return (int)bstate_refs(pool_block_word(pool, id));
}
