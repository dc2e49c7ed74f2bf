/* SPDX-License-Identifier: MIT */
/*
 * prefix_pool.c - the pool side of the prefix cache: per block, the hash,
 * owner and retention word it caches under (struct prefix_block); per
 * pool, the evictable cached blocks in one list per retention priority,
 * their lock and counts (struct prefix_pool); the reclaimer hooks the
 * pool calls (a free's idle blocks, an eviction's claims, counts, stats,
 * check), a failed create's prefix_unhit, and retention (levels, raises,
 * the clock's sweep).
 * Floor 5 of lib/ (doc/architecture.md, "Layers"), under prefix.c, which
 * calls it; it calls nothing of prefix.c (an eviction's deletions go
 * through the forget function prefix.c gives prefix_pool_make).
 *
 * Correctness argument (the table's side, hits and commits: prefix.c).
 *
 * The state word decides every race on a cached block, as one CAS:
 *
 *   CACHED|r -> CACHED|r+1    a hit (prefix_take), lock-free; from r = 0
 *                             it revives an evictable block.
 *   CACHED|r -> CACHED|r-1    a release (pool.c drop_held); reaching 0,
 *                             the releaser links the block at the tail of
 *                             the evictable list (prefix_release).
 *   CACHED|0 -> CACHED|EVICTING   an evictor claims the block, under the
 *                             list lock; a hit sees EVICTING (or, later,
 *                             no CACHED) and misses.
 *   CACHED|EVICTING -> 1      the evictor owns the block: uncached, held
 *                             once, handed to the allocation only after
 *                             its slot is a tombstone.
 *
 * So a revival and an eviction of one block cannot both win: both are
 * CASes from CACHED|0.  (A hit's ABA check after its CAS: prefix.c.)
 *
 * CACHED is cleared only under the list lock (eviction, prefix_clear), so
 * under the lock a CACHED block is never on a free list and its next[]
 * link (the free stack's, pool.h) is free for the evictable list, which
 * is doubly linked through next[] and prev[], least recently freed first.
 * Revivals do not unlink (they take no lock): a held block stays linked
 * until an evictor passes it (it unlinks it) or its holder releases it
 * again (moved to the tail).  A release that finds its block no longer
 * CACHED (prefix_clear took it in between) does not link it.
 *
 * Eviction is all or nothing: the evictor claims blocks from the head
 * (skipping held ones), and if it cannot claim n, restores every claim
 * and unlinks nothing, so a failed allocation changes nothing.  The
 * claimed blocks are then the evictor's: prefix.c's prefix_evict reports
 * them removed and deletes their slots (its argument says in what order).
 *
 * evictable counts blocks in state CACHED|0: +1 by the release that took
 * a block to zero, -1 by whoever takes one from zero (a revival, an
 * eviction, prefix_clear).  Each pair is ordered on the state word, so the
 * count is exact at quiescence; while threads run it may lag by the
 * releases in flight.
 *
 * Retention.  Each cached block has a retention word (priority and
 * expiry, struct prefix_block), and the pool one evictable list per
 * priority, with a bitmap of the non-empty ones; level[b] says which
 * list b is in.  A release links a block (or moves its run) at the tail
 * of the list of its priority at that moment, an expired word being
 * demoted to the default on the way; the evictor walks the lists from
 * the lowest priority up, so it never claims a block while an idle
 * block of a lower priority stays linked, and never walks the pinned
 * list (pins are capped per manager, and go only by expiry, demotion
 * or reset).  (A block of a lower priority
 * may sit in a higher list only while held: a hit revives without
 * unlinking, a commit raises a held block, and its last holder's release
 * relinks it where its word says.)  A word changes only by CAS-free
 * writes on an uncached block held by its registrar (prefix_store), by
 * CAS under the store lock (prefix_raise, whose caller holds the block)
 * or under the list lock (demotions), and by the exchange that clears
 * it when the block's slot goes (slot_forget); each of these that
 * replaces a pin uncounts it, each that writes one counts it.  Expiry is
 * lazy: the word keeps its priority past its expiry, retain_level()
 * reads it as the default, and a release or prefix_tick's sweep (which
 * runs only when the clock passed the earliest expiry among the
 * manager's idle timed blocks, retain_next, kept under the list lock)
 * moves the block to the default list.  The word is a hint for the
 * order only: the state word alone decides revive against evict.
 *
 * Lock order: a manager's event lock, its store lock, the pool's list
 * lock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "pool.h"
#include "prefix.h"
#include "prefix_pool.h"
#include "rcu.h"

static bool list_linked(struct prefix_pool *pp, uint32_t b)
{
	return pp->prev[b] != KVP_UNLINKED;
}

static void list_unlink(struct kvp_pool *pool, struct prefix_pool *pp,
			uint32_t b)
{
	uint32_t p = pp->prev[b], n, l = pp->level[b];

	if (p == KVP_UNLINKED)
		return;
	n = link_next(pool, b);
	if (p == KVP_NIL)
		pp->head[l] = n;
	else
		set_next(pool, p, n);
	if (n == KVP_NIL)
		pp->tail[l] = p;
	else
		pp->prev[n] = p;
	pp->prev[b] = KVP_UNLINKED;
	if (pp->head[l] == KVP_NIL)
		pp->nonempty &= ~(1u << l);
}

/* Links b at the tail of list l. */
static void list_append(struct kvp_pool *pool, struct prefix_pool *pp,
			uint32_t b, uint32_t l)
{
	set_next(pool, b, KVP_NIL);
	pp->prev[b] = pp->tail[l];
	pp->level[b] = (uint8_t)l;
	if (pp->tail[l] == KVP_NIL) {
		pp->head[l] = b;
		pp->nonempty |= 1u << l;
	} else {
		set_next(pool, pp->tail[l], b);
	}
	pp->tail[l] = b;
}


/* pool_set_reclaimer()'s make() (through prefix.c, which gives forget):
 * the reclaimer state of a new pool. */
int prefix_pool_make(struct kvp_pool *pool, prefix_forget_fn forget,
		     void **ctx)
{
	struct prefix_pool *pp;
	uint32_t n = pool->num_blocks;

	pp = kvp_malloc_aligned(KVP_CACHELINE, sizeof(*pp));
	if (!pp)
		return -ENOMEM;
	memset(pp, 0, sizeof(*pp));
	pp->pool = pool;
	pp->forget = forget;
	/* Written now (below): left to fault in lazily, their pages would
	 * cost the commits that first touch them. */
	pp->blk = kvp_malloc_aligned(KVP_CACHELINE,
				     (size_t)n * sizeof(*pp->blk));
	pp->prev = kvp_malloc((size_t)n * sizeof(*pp->prev));
	pp->level = kvp_malloc((size_t)n * sizeof(*pp->level));
	/* Hits read blk[] at random (a cached block's id is anyone's):
	 * huge pages spare them a TLB miss each in a large pool. */
	if (pp->blk)
		kvp_advise_huge(pp->blk, (size_t)n * sizeof(*pp->blk));
	if (!pp->blk || !pp->prev || !pp->level ||
	    list_lock_init(&pp->lock) != 0) {
		if (pp->blk)
			kvp_free_aligned(pp->blk, KVP_CACHELINE,
					 (size_t)n * sizeof(*pp->blk));
		kvp_free(pp->prev, (size_t)n * sizeof(*pp->prev));
		kvp_free(pp->level, (size_t)n * sizeof(*pp->level));
		kvp_free_aligned(pp, KVP_CACHELINE, sizeof(*pp));
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++) {
		atomic_init(&pp->blk[b].owner, NULL);
		for (int i = 0; i < 4; i++)
			atomic_init(&pp->blk[b].hash[i], 0);
		atomic_init(&pp->blk[b].retain, 0);
		pp->prev[b] = KVP_UNLINKED;
		pp->level[b] = KVP_RETAIN_DEFAULT;
	}
	for (uint32_t l = 0; l < KVP_RETAIN_LEVELS; l++)
		pp->head[l] = pp->tail[l] = KVP_NIL;
	pp->nonempty = 0;
	atomic_init(&pp->retained, false);
	atomic_init(&pp->evictable, 0);
	atomic_init(&pp->evictions, 0);
	atomic_init(&pp->revived, 0);
	atomic_init(&pp->cleared, 0);
	*ctx = pp;
	return 0;
}

/* The reclaimer's fini(): the pool is being destroyed. */
static void prefix_pool_free(void *ctx)
{
	struct prefix_pool *pp = ctx;
	uint32_t n = pp->pool->num_blocks;

	pthread_mutex_destroy(&pp->lock);
	kvp_free_aligned(pp->blk, KVP_CACHELINE, (size_t)n * sizeof(*pp->blk));
	kvp_free(pp->prev, (size_t)n * sizeof(*pp->prev));
	kvp_free(pp->level, (size_t)n * sizeof(*pp->level));
	kvp_free_aligned(pp, KVP_CACHELINE, sizeof(*pp));
}

/* Moves the run first..last (linked, in order, in one list) to the tail
 * of its list.  Lock held. */
static void list_move_run(struct kvp_pool *pool, struct prefix_pool *pp,
			  uint32_t first, uint32_t last)
{
	uint32_t p = pp->prev[first], nx = link_next(pool, last),
		 l = pp->level[first];

	if (nx == KVP_NIL)
		return; /* already the tail */
	if (p == KVP_NIL)
		pp->head[l] = nx;
	else
		set_next(pool, p, nx);
	pp->prev[nx] = p;
	set_next(pool, pp->tail[l], first);
	pp->prev[first] = pp->tail[l];
	set_next(pool, last, KVP_NIL);
	pp->tail[l] = last;
}

/* Lowers *at to v if v is below it (relaxed: under the list lock). */
static void atomic_lower(_Atomic uint64_t *at, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(at, memory_order_relaxed);

	while (v < cur && !atomic_compare_exchange_weak_explicit(
				  at, &cur, v, memory_order_relaxed,
				  memory_order_relaxed))
		;
}


/*
 * Takes b's retention word from w to the default priority (list lock or
 * the caller holding b): whoever clears a pin uncounts it.  Returns
 * false if w was no longer b's word.
 */
static bool retain_demote(struct prefix_block *blk, struct prefix_cache *pc,
			  uint64_t w)
{
	/* Relaxed: the word orders nothing but itself. */
	if (!atomic_compare_exchange_strong_explicit(
		    &blk->retain, &w, 0, memory_order_relaxed,
		    memory_order_relaxed))
		return false;
	if (retain_prio(w) == KVP_RETAIN_PIN && pc)
		atomic_fetch_sub_explicit(&pc->pinned, 1,
					  memory_order_relaxed);
	return true;
}

/*
 * The list a cached block going idle joins (lock held): its priority
 * now.  An expired word is demoted on the way; a timed one lowers its
 * owner's next expiry (see "Retention" above).
 */
static uint32_t idle_level(struct prefix_pool *pp, uint32_t b)
{
	struct prefix_block *blk = &pp->blk[b];
	/* Relaxed: a hint for the order; the state word decides races. */
	uint64_t w = atomic_load_explicit(&blk->retain, memory_order_relaxed);
	struct prefix_cache *pc;
	uint64_t now;

	if (w == 0)
		return KVP_RETAIN_DEFAULT;
	if (retain_expiry(w) == 0)
		return retain_prio(w);
	/* A CACHED block under the list lock keeps its owner, which cannot
	 * be destroyed before it clears the block (under this lock). */
	pc = atomic_load_explicit(&blk->owner, memory_order_relaxed);
	if (!pc)
		return KVP_RETAIN_DEFAULT;
	now = atomic_load_explicit(&pc->retain_now, memory_order_relaxed);
	if (retain_level(w, now) == KVP_RETAIN_DEFAULT) {
		(void)retain_demote(blk, pc, w);
		return KVP_RETAIN_DEFAULT;
	}
	atomic_lower(&pc->retain_next, retain_expiry(w));
	return retain_prio(w);
}

/*
 * Links the blocks a free took to zero at the tail, in the order freed.
 * Runs of them already linked one after the other in that order (a
 * prefix freed again as it was freed last time: the common case) move
 * as one, in O(1) writes: the same list as moving them one by one, and
 * a hot prefix's link lines are not written at every release.
 */
static void prefix_release(void *ctx, const uint32_t *ids, uint32_t n)
{
	struct prefix_pool *pp = ctx;
	struct kvp_pool *pool = pp->pool;
	bool retained;

	/* Relaxed: a count; the state word orders the transitions. */
	atomic_fetch_add_explicit(&pp->evictable, n, memory_order_relaxed);
	pp_lock(pp);
	/* Relaxed: set under the lock we hold. */
	retained = atomic_load_explicit(&pp->retained, memory_order_relaxed);
	for (uint32_t i = 0, j; i < n; i = j + 1) {
		uint32_t b = ids[i], l;

		j = i;
		if (!list_linked(pp, b)) {
			/* Relaxed: CACHED only changes under the lock we
			 * hold.  (A linked block is CACHED: whoever clears
			 * CACHED unlinks it, so the state word, a line hits
			 * write, is read only here.) */
			if (pool_block_cached(pool, b))
				list_append(pool, pp, b,
					    retained ? idle_level(pp, b)
						     : KVP_RETAIN_DEFAULT);
			/* else prefix_clear took it meanwhile */
			continue;
		}
		l = retained ? idle_level(pp, b) : KVP_RETAIN_DEFAULT;
		if (l != pp->level[b]) {
			list_unlink(pool, pp, b);
			list_append(pool, pp, b, l);
			continue;
		}
		while (j + 1 < n && link_next(pool, ids[j]) == ids[j + 1] &&
		       (!retained || idle_level(pp, ids[j + 1]) == l))
			j++;
		list_move_run(pool, pp, b, ids[j]);
	}
	pp_unlock(pp);
}

void prefix_unhit(struct kvp_pool *pool, const uint32_t *blocks, uint32_t n)
{
	struct prefix_pool *pp = pool_prefix(pool);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = blocks[i];

		pp_lock(pp);
		/* CACHED only changes under the lock we hold. */
		if (!pool_block_cached(pool, b)) {
			/* prefix_clear uncached it while we held it: an
			 * ordinary block now. */
			pp_unlock(pp);
			(void)kvp_pool_free(pool, &b, 1);
			continue;
		}
		/* As any holder's drop (pool.c); we hold b, so the drop
		 * succeeds. */
		if (!bstate_held(pool_block_drop(pool, b))) {
			uint32_t l = atomic_load_explicit(&pp->retained,
							  memory_order_relaxed)
					     ? idle_level(pp, b)
					     : KVP_RETAIN_DEFAULT;

			/* Evictable again: the revival is undone, counts
			 * included (a failed call moves no statistic). */
			atomic_fetch_add_explicit(&pp->evictable, 1,
						  memory_order_relaxed);
			atomic_fetch_sub_explicit(&pp->revived, 1,
						  memory_order_relaxed);
			/* Still linked in its priority's list: back in its
			 * old place, as if never hit; else (an evictor
			 * passed it, or another holder's commit raised it)
			 * at the tail. */
			if (list_linked(pp, b) && pp->level[b] != l)
				list_unlink(pool, pp, b);
			if (!list_linked(pp, b))
				list_append(pool, pp, b, l);
		}
		pp_unlock(pp);
	}
}

/* Puts block b back at the head of the list it was in (lock held). */
static void list_push_head(struct kvp_pool *pool, struct prefix_pool *pp,
			   uint32_t b)
{
	uint32_t l = pp->level[b];

	set_next(pool, b, pp->head[l]);
	pp->prev[b] = KVP_NIL;
	if (pp->head[l] == KVP_NIL) {
		pp->tail[l] = b;
		pp->nonempty |= 1u << l;
	} else {
		pp->prev[pp->head[l]] = b;
	}
	pp->head[l] = b;
}

/*
 * The claim pass of prefix_evict (pp's lock held): one pass from the
 * head of the lowest priority's list up claims idle blocks and unlinks
 * them, and unlinks held ones passed on the way (their holders relink
 * them at release).  A higher priority's list is entered only while
 * fewer than min are claimed, so the extras up to max (evictions ahead)
 * come from the priority that gave the min-th, every lower one being
 * empty: still no block goes while an idle one of a lower priority
 * stays.  The pinned list is never entered.  Returns the blocks claimed
 * into ids, or 0 with every claim given back if fewer than min.
 */
static uint32_t evict_claim(struct prefix_pool *pp, uint32_t min,
			    uint32_t max, uint32_t *ids)
{
	struct kvp_pool *pool = pp->pool;
	uint32_t got = 0, b, nx;

	for (uint32_t levels = pp->nonempty & ~(1u << KVP_RETAIN_PIN);
	     levels && got < min; levels &= levels - 1) {
		for (b = pp->head[__builtin_ctz(levels)];
		     b != KVP_NIL && got < max; b = nx) {
			nx = link_next(pool, b);
			/* Fails if a hit revived b: it is relinked when its
			 * holders release it.  (The claim acquires the
			 * releasers' writes before our caller's reuse.) */
			if (pool_block_claim(pool, b))
				ids[got++] = b;
			list_unlink(pool, pp, b);
		}
	}
	if (got >= min)
		return got;
	/* Not enough: give the claims back, at the head in their old order
	 * (the held blocks passed are relinked by their holders, as
	 * always).  Only the claimer changes an EVICTING word. */
	while (got) {
		b = ids[--got];
		list_push_head(pool, pp, b);
		pool_block_unclaim(pool, b);
	}
	return 0;
}

static uint32_t prefix_evict(void *ctx, uint32_t min, uint32_t max,
			     uint32_t *ids)
{
	struct prefix_pool *pp = ctx;
	uint32_t got;
	int64_t avail;

	/* Relaxed: a count; a stale one only fails or tries early. */
	avail = atomic_load_explicit(&pp->evictable, memory_order_relaxed);
	if (avail < (int64_t)min)
		return 0;
	if ((int64_t)max > avail)
		max = (uint32_t)avail; /* no walk to the end for extras */
	/* One read-side section around the claims and the deletions: see
	 * the argument at the top (destroyed managers outlive it). */
	kvp_rcu_read_lock();
	pp_lock(pp);
	got = evict_claim(pp, min, max, ids);
	/* The claimed blocks are ours: uncached, held once.  Their slots
	 * and owner[] go below (prefix.c's evict_forget). */
	for (uint32_t i = 0; i < got; i++)
		pool_block_evicted(pp->pool, ids[i]);
	if (got) {
		/* Relaxed: counts (see their declarations). */
		atomic_fetch_sub_explicit(&pp->evictable, got,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&pp->evictions, got,
					  memory_order_relaxed);
	}
	pp_unlock(pp);
	for (uint32_t i = 0; i < got;)
		i += pp->forget(pp, ids + i, got - i);
	kvp_rcu_read_unlock();
	return got;
}

void prefix_list_unlink(struct kvp_pool *pool, struct prefix_pool *pp,
			uint32_t b)
{
	list_unlink(pool, pp, b);
}

static uint64_t prefix_evictable(void *ctx)
{
	struct prefix_pool *pp = ctx;
	/* Relaxed: a count, exact at quiescence. */
	int64_t e = atomic_load_explicit(&pp->evictable, memory_order_relaxed);

	return e > 0 ? (uint64_t)e : 0;
}

static void prefix_stats(void *ctx, struct pool_reclaimer_stats *st)
{
	struct prefix_pool *pp = ctx;

	/* Relaxed: statistics, exact at quiescence.  Blocks released into
	 * the idle state are the idle ones and those that left it. */
	st->evictable = prefix_evictable(pp);
	st->revived = atomic_load_explicit(&pp->revived, memory_order_relaxed);
	st->evictions =
		atomic_load_explicit(&pp->evictions, memory_order_relaxed);
	st->released =
		(uint64_t)atomic_load_explicit(&pp->evictable,
					       memory_order_relaxed) +
		st->revived + st->evictions +
		atomic_load_explicit(&pp->cleared, memory_order_relaxed);
}

uint64_t prefix_cached_blocks(struct kvp_pool *pool)
{
	uint64_t n = 0;

	for (uint32_t b = 0; b < pool->num_blocks; b++)
		n += pool_block_cached(pool, b);
	return n;
}

#define check_fail(...)                                                      \
	do {                                                                 \
		fprintf(stderr, "kvp_pool_check: " __VA_ARGS__);             \
		return -EFAULT;                                              \
	} while (0)

/* kvp_pool_check, the evictable lists: links in range and consistent
 * both ways, cached blocks only, no cycle, tails and the bitmap right;
 * 0 or -EFAULT. */
static int check_lists(struct prefix_pool *pp)
{
	struct kvp_pool *pool = pp->pool;
	uint64_t linked = 0;

	for (uint32_t l = 0; l < KVP_RETAIN_LEVELS; l++) {
		uint32_t prev = KVP_NIL;

		for (uint32_t b = pp->head[l]; b != KVP_NIL;
		     b = link_next(pool, b)) {
			if (b >= pool->num_blocks)
				check_fail("evictable list link %u out of "
					   "range\n",
					   b);
			if (pp->prev[b] != prev || pp->level[b] != l)
				check_fail("evictable list %u: block %u's "
					   "back link is %u (list %u), not "
					   "%u\n",
					   l, b, pp->prev[b], pp->level[b],
					   prev);
			if (!pool_block_cached(pool, b))
				check_fail("uncached block %u on the "
					   "evictable list\n",
					   b);
			if (++linked > pool->num_blocks)
				check_fail("cycle in the evictable list\n");
			prev = b;
		}
		if (pp->tail[l] != prev)
			check_fail("evictable list %u: tail %u, last block "
				   "%u\n",
				   l, pp->tail[l], prev);
		if (((pp->nonempty >> l) & 1) != (prev != KVP_NIL))
			check_fail("evictable list %u: the bitmap says %s\n",
				   l,
				   (pp->nonempty >> l) & 1 ? "non-empty"
							   : "empty");
	}
	return 0;
}

static int prefix_check_pool(void *ctx)
{
	struct prefix_pool *pp = ctx;
	struct kvp_pool *pool = pp->pool;
	uint64_t idle = 0;

	if (check_lists(pp))
		return -EFAULT;
	for (uint32_t b = 0; b < pool->num_blocks; b++) {
		uint32_t s = pool_block_word(pool, b);
		bool cached = bstate_is_cached(s);

		if (bstate_is_claimed(s))
			check_fail("block %u is being evicted at quiescence\n",
				   b);
		if (cached != (atomic_load_explicit(&pp->blk[b].owner,
						    memory_order_relaxed) !=
			       NULL))
			check_fail("block %u: cached flag and owner "
				   "disagree\n",
				   b);
		if (!cached && list_linked(pp, b))
			check_fail("uncached block %u is linked\n", b);
		if (!cached && atomic_load_explicit(&pp->blk[b].retain,
						    memory_order_relaxed))
			check_fail("uncached block %u keeps a retention\n", b);
		if (cached && bstate_refs(s) == 0) {
			uint64_t w = atomic_load_explicit(&pp->blk[b].retain,
							  memory_order_relaxed);

			idle++;
			if (!list_linked(pp, b))
				check_fail("evictable block %u is on no list "
					   "(lost)\n",
					   b);
			if (pp->level[b] != retain_prio(w))
				check_fail("evictable block %u of priority %u "
					   "is in list %u\n",
					   b, retain_prio(w), pp->level[b]);
		}
	}
	if ((int64_t)idle != atomic_load_explicit(&pp->evictable,
						  memory_order_relaxed))
		check_fail("%" PRIu64 " evictable blocks, counted %" PRId64
			   "\n",
			   idle,
			   atomic_load_explicit(&pp->evictable,
						memory_order_relaxed));
	return 0;
}

/* What the pool sees of the prefix cache (pool.h). */
const struct pool_reclaimer prefix_reclaimer = {
	.idle = prefix_release,
	.reclaim = prefix_evict,
	.evictable = prefix_evictable,
	.stats = prefix_stats,
	.check = prefix_check_pool,
	.fini = prefix_pool_free,
};

void prefix_retain_mark(struct prefix_pool *pp)
{
	/* Once per pool: the lock orders it before every later release's
	 * read (lock order: store lock, list lock). */
	if (atomic_load_explicit(&pp->retained, memory_order_relaxed))
		return;
	pp_lock(pp);
	atomic_store_explicit(&pp->retained, true, memory_order_relaxed);
	pp_unlock(pp);
}

uint64_t prefix_retain_word(struct prefix_cache *pc, uint32_t prio,
			    uint64_t duration)
{
	uint64_t now, left;

	if (prio == KVP_RETAIN_DEFAULT)
		return 0;
	if (!duration)
		return retain_make(prio, 0);
	now = atomic_load_explicit(&pc->retain_now, memory_order_relaxed);
	left = KVP_RETAIN_EXPIRY_MASK - now;
	/* Past the clock's range: never expires. */
	return retain_make(prio, duration < left ? now + duration : 0);
}

void prefix_raise(struct prefix_cache *pc, uint32_t b, uint64_t want,
		  uint32_t *unpinned)
{
	struct prefix_pool *pp = pool_prefix(pc->pool);
	struct prefix_block *blk = &pp->blk[b];
	uint32_t wp = retain_prio(want);
	uint64_t w, nw;

	/* Relaxed: we hold b, so it stays cached; whose is it? */
	if (wp == KVP_RETAIN_DEFAULT ||
	    atomic_load_explicit(&blk->owner, memory_order_relaxed) != pc)
		return;
	w = atomic_load_explicit(&blk->retain, memory_order_relaxed);
	for (;;) {
		uint64_t now = atomic_load_explicit(&pc->retain_now,
						    memory_order_relaxed);
		uint32_t cur = retain_level(w, now);
		bool pin_add;

		if (wp < cur)
			return; /* a hit keeps a higher priority */
		nw = want;
		if (wp == cur) {
			/* The same priority: renewed, never shortened. */
			uint64_t e = retain_expiry(w), we = retain_expiry(want);

			nw = retain_make(wp, e && we ? (e > we ? e : we) : 0);
			if (nw == w)
				return;
		}
		pin_add = retain_prio(nw) == KVP_RETAIN_PIN &&
			  retain_prio(w) != KVP_RETAIN_PIN;
		if (pin_add && !pin_admit(pc, unpinned)) {
			if (cur >= KVP_RETAIN_MAX)
				return;
			nw = retain_make(KVP_RETAIN_MAX, retain_expiry(want));
			pin_add = false;
		}
		/* Relaxed: the word orders nothing but itself.  A demotion
		 * (list lock) may replace w meanwhile: then again. */
		if (atomic_compare_exchange_weak_explicit(
			    &blk->retain, &w, nw, memory_order_relaxed,
			    memory_order_relaxed))
			break;
		if (pin_add)
			atomic_fetch_sub_explicit(&pc->pinned, 1,
						  memory_order_relaxed);
	}
	if (retain_prio(w) == KVP_RETAIN_PIN &&
	    retain_prio(nw) != KVP_RETAIN_PIN)
		atomic_fetch_sub_explicit(&pc->pinned, 1, memory_order_relaxed);
	prefix_retain_mark(pp);
}

int prefix_tick(struct prefix_cache *pc, uint64_t steps, uint64_t *now_out)
{
	struct prefix_pool *pp;
	uint64_t now, next = UINT64_MAX;

	/* Relaxed: a logical clock; the list lock orders the sweep. */
	now = atomic_load_explicit(&pc->retain_now, memory_order_relaxed);
	do {
		if (steps > KVP_RETAIN_EXPIRY_MASK - now)
			return -ERANGE;
	} while (!atomic_compare_exchange_weak_explicit(
		&pc->retain_now, &now, now + steps, memory_order_relaxed,
		memory_order_relaxed));
	now += steps;
	if (now_out)
		*now_out = now;
	if (now < atomic_load_explicit(&pc->retain_next, memory_order_relaxed))
		return 0;
	/* Some idle block of ours has expired: demote every such one to
	 * the default list's tail (as if just released), and recompute
	 * the next expiry of those left. */
	pp = pool_prefix(pc->pool);
	pp_lock(pp);
	for (uint32_t levels = pp->nonempty & ~1u; levels;
	     levels &= levels - 1) {
		uint32_t b, nx;

		for (b = pp->head[__builtin_ctz(levels)]; b != KVP_NIL;
		     b = nx) {
			struct prefix_block *blk = &pp->blk[b];
			uint64_t w = atomic_load_explicit(
				&blk->retain, memory_order_relaxed);

			nx = link_next(pc->pool, b);
			/* Held blocks (linked: revived by a hit) are left to
			 * their last holder's release, which demotes them;
			 * relaxed: a hit may revive b right after, which is
			 * as if it came after the sweep. */
			if (atomic_load_explicit(&blk->owner,
						 memory_order_relaxed) != pc ||
			    !retain_expiry(w) ||
			    bstate_held(pool_block_word(pc->pool, b)))
				continue;
			if (retain_level(w, now) != KVP_RETAIN_DEFAULT) {
				if (retain_expiry(w) < next)
					next = retain_expiry(w);
				continue;
			}
			/* A raise (its committer holds b) may win: then b
			 * is relinked at its holder's release. */
			if (retain_demote(blk, pc, w)) {
				list_unlink(pc->pool, pp, b);
				list_append(pc->pool, pp, b,
					    KVP_RETAIN_DEFAULT);
			}
		}
	}
	atomic_store_explicit(&pc->retain_next, next, memory_order_relaxed);
	pp_unlock(pp);
	return 0;
}
