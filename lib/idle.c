/*
 * idle.c - the idle (evictable) cached blocks of a pool: one FIFO ring
 * (ring.h) of block ids per retention priority, and per block one word
 * that says whether it has an entry.
 *
 * Correctness argument.
 *
 * Each block has an idle word {relgen: 32, qgen: 32}.  relgen counts the
 * block's releases into the idle state; qgen is 0 when the block has no
 * entry in any ring, else the relgen it was queued at.  Invariant: a
 * block has an entry in some ring exactly when its qgen is not 0 (apart
 * from the moments between the CAS that sets qgen and the push, and
 * between a pop and the CAS that clears it, when the entry is in the
 * hands of the one thread that changed the word).  Entries are made only
 * by the thread whose CAS took qgen from 0 to non-zero, and consumed only
 * by the thread that popped them, so a block never has two entries: a
 * ring of capacity num_blocks never overflows.
 *
 * A release (idle_released; the pool has just taken the block's state
 * word to CACHED | 0) bumps relgen and, if qgen was 0, sets it and
 * pushes the block at the tail: one CAS on the word decides both.  If
 * qgen was not 0, the block's older entry stays where it is.
 *
 * A consumer (consume) pops an entry and reads the block's state word:
 *   - idle and not released since it was queued (relgen == qgen): it
 *     may claim it (CACHED | 0 -> CACHED | EVICTING, bstate.h), then
 *     clears qgen.  The claim CAS, not the idle word, decides a race
 *     with a hit: a hit that revived and released the block since only
 *     changed the order (the block is evicted a little early);
 *   - idle but released again since (relgen != qgen), or a rotation:
 *     the entry moves to the tail of the ring of the block's priority
 *     now, by a CAS qgen := relgen (a second chance: a block hit while
 *     queued leaves at its latest release or later, never earlier);
 *   - anything else (held, claimed, or no longer cached): it drops the
 *     entry (CAS qgen := 0), and then reads the state word again: if
 *     the block went idle meanwhile, the consumer queues it itself.
 *
 * No idle block is lost.  A release takes the state word to CACHED | 0
 * and then CASes the idle word; a dropping consumer CASes the idle word
 * and then reads the state word; both pairs are separated by a
 * sequentially consistent fence or operation.  So either the release's
 * CAS sees qgen == 0 (and queues the block), or the consumer's second
 * read sees the block idle (and queues it if nobody has): Dekker's
 * argument.  Either way the block gets an entry; two tries to queue it
 * are decided by the CAS from qgen == 0, so it never gets two.
 *
 * Priorities: the evictor takes from the rings from the lowest priority
 * up and never from the pinned one, so it claims no block while an idle
 * block of a lower priority is queued (short of one being moved between
 * rings at that moment).  A block whose priority changed while queued
 * (a raise, an expiry) is filed again when a consumer reaches its entry
 * (idle_rotate reaches every entry above the default priority).
 *
 * An eviction is all or nothing: if it claims fewer than min blocks it
 * gives every claim back (unclaim, queued again at the tail).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "idle.h"
#include "pool.h"
#include "ring.h"

#define IDLE_BATCH 32u

struct idle {
	struct kvp_pool *pool; /* immutable */
	/* word[b]: {relgen, qgen} (see the top).  Synchronization: atomic;
	 * the Dekker pairs are sequentially consistent. */
	_Atomic uint64_t *word;
	/* ring[l]: made once (lock), then read-only; NULL until made. */
	_Atomic(struct kvp_ring *) ring[IDLE_LEVELS];
	pthread_mutex_t lock; /* ring creation */
	/* Entries per ring whose word is MISFILED (atomic, relaxed: a
	 * count that triggers a refiling pass). */
	kvp_cacheline_aligned _Atomic int64_t misfiled[IDLE_LEVELS];
};

enum consumed { C_CLAIMED, C_REQUEUED, C_DROPPED };
/* What a consumer may claim. */
enum { CLAIM_NONE, CLAIM_ANY, CLAIM_UNPINNED };

/*
 * The idle word: relgen in the high 32 bits; qgen in bits 0..23 (the low
 * 24 bits of relgen when the entry was made, never 0; 0: no entry); the
 * level of the ring the entry is in, bits 24..27; MISFILED, bit 28: the
 * block's priority is no longer that ring's (a release saw it change),
 * so the entry must be filed again: before that ring or one below it is
 * evicted from if the priority fell, at the next rotation if it rose
 * (q->misfiled counts them per ring).
 */
#define W_Q_MASK 0xffffffull
#define W_MIS (1ull << 28)

static inline uint32_t w_rel(uint64_t w)
{
	return (uint32_t)(w >> 32);
}

static inline uint32_t w_q(uint64_t w)
{
	return (uint32_t)(w & W_Q_MASK);
}

static inline uint32_t w_level(uint64_t w)
{
	return (uint32_t)(w >> 24) & 0xfu;
}

static inline bool w_mis(uint64_t w)
{
	return (w & W_MIS) != 0;
}

/* The qgen of relgen rel: its low 24 bits, never 0. */
static inline uint32_t rel_tag(uint32_t rel)
{
	uint32_t t = rel & (uint32_t)W_Q_MASK;

	return t ? t : 1;
}

/* Released since queued: relgen moved past qgen. */
static inline bool w_released_since(uint64_t w)
{
	return rel_tag(w_rel(w)) != w_q(w);
}

static inline uint64_t w_queued(uint32_t rel, uint32_t level)
{
	return (uint64_t)rel << 32 | (uint64_t)level << 24 | rel_tag(rel);
}

static inline uint64_t w_none(uint32_t rel)
{
	return (uint64_t)rel << 32;
}

static struct kvp_ring *ring_of(struct idle *q, uint32_t level)
{
	/* Acquire: the ring as its maker initialised it. */
	return atomic_load_explicit(&q->ring[level], memory_order_acquire);
}

int idle_create(struct kvp_pool *pool, struct idle **out)
{
	uint32_t n = pool->num_blocks;
	struct kvp_ring *r;
	struct idle *q = kvp_malloc(sizeof(*q));

	if (!q)
		return -ENOMEM;
	memset(q, 0, sizeof(*q));
	q->pool = pool;
	q->word = kvp_malloc_aligned(KVP_CACHELINE, (size_t)n * sizeof(*q->word));
	if (!q->word || ring_create(n, &r) != 0) {
		if (q->word)
			kvp_free_aligned(q->word, KVP_CACHELINE,
					 (size_t)n * sizeof(*q->word));
		kvp_free(q, sizeof(*q));
		return -ENOMEM;
	}
	if (pthread_mutex_init(&q->lock, NULL) != 0) {
		ring_destroy(r);
		kvp_free_aligned(q->word, KVP_CACHELINE,
				 (size_t)n * sizeof(*q->word));
		kvp_free(q, sizeof(*q));
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++)
		atomic_init(&q->word[b], 0);
	for (uint32_t l = 0; l < IDLE_LEVELS; l++) {
		atomic_init(&q->ring[l], NULL);
		atomic_init(&q->misfiled[l], 0);
	}
	atomic_init(&q->ring[KVP_RETAIN_DEFAULT], r);
	*out = q;
	return 0;
}

void idle_destroy(struct idle *q)
{
	if (!q)
		return;
	for (uint32_t l = 0; l < IDLE_LEVELS; l++)
		ring_destroy(atomic_load_explicit(&q->ring[l],
						  memory_order_relaxed));
	pthread_mutex_destroy(&q->lock);
	kvp_free_aligned(q->word, KVP_CACHELINE,
			 (size_t)q->pool->num_blocks * sizeof(*q->word));
	kvp_free(q, sizeof(*q));
}

bool idle_level_ready(struct idle *q, uint32_t level)
{
	/* Relaxed: a hint; users of the ring load it with acquire. */
	return atomic_load_explicit(&q->ring[level], memory_order_relaxed);
}

int idle_level_ensure(struct idle *q, uint32_t level)
{
	struct kvp_ring *r;
	int err = 0;

	if (level >= IDLE_LEVELS)
		return -EINVAL;
	if (idle_level_ready(q, level))
		return 0;
	kvp_check_pthread(pthread_mutex_lock(&q->lock));
	if (!atomic_load_explicit(&q->ring[level], memory_order_relaxed)) {
		err = ring_create(q->pool->num_blocks, &r);
		/* Release: the ring's cells before its pointer. */
		if (!err)
			atomic_store_explicit(&q->ring[level], r,
					      memory_order_release);
	}
	kvp_check_pthread(pthread_mutex_unlock(&q->lock));
	return err;
}

/* The nearest level at or below level that has a ring. */
static uint32_t ring_level(struct idle *q, uint32_t level)
{
	while (!ring_of(q, level))
		level--; /* the default priority's always exists */
	return level;
}

/* An entry of a MISFILED word left ring level: uncounted. */
static inline void unmisfile(struct idle *q, uint64_t old)
{
	if (w_mis(old))
		atomic_fetch_sub_explicit(&q->misfiled[w_level(old)], 1,
					  memory_order_relaxed);
}

/* Queues b if it has no entry (qgen 0): the Dekker partner of a
 * release.  Returns whether it did. */
static bool queue_if_unqueued(struct idle *q, uint32_t b, uint32_t level)
{
	_Atomic uint64_t *w = &q->word[b];
	uint64_t old = atomic_load_explicit(w, memory_order_seq_cst);

	level = ring_level(q, level);
	do {
		if (w_q(old))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(
		w, &old, w_queued(w_rel(old), level), memory_order_seq_cst,
		memory_order_seq_cst));
	ring_push(ring_of(q, level), &b, 1);
	return true;
}

/* Level of b for a requeue: level_of's, or the default priority's. */
static inline uint32_t level_for(idle_level_fn level_of, void *ctx,
				 uint32_t b)
{
	return level_of ? level_of(ctx, b) : KVP_RETAIN_DEFAULT;
}

/* Whether b may be claimed: any idle block, or (from the pinned ring)
 * one whose pin is gone. */
static bool claimable(uint32_t b, int may_claim, idle_level_fn level_of,
		      void *ctx)
{
	return may_claim == CLAIM_ANY ||
	       (may_claim == CLAIM_UNPINNED &&
		level_for(level_of, ctx, b) != KVP_RETAIN_PIN);
}

/* Claims idle b for the consumer of its entry, seen as word old.  Returns
 * false (nothing changed) if a hit revived it first. */
static bool claim_entry(struct idle *q, uint32_t b, uint64_t old)
{
	if (!pool_block_claim(q->pool, b))
		return false;
	/* Ours alone now (no holder can release it, no hit revive it):
	 * only the entry to clear.  Relaxed: the next queuing of b follows
	 * its next release, which our uncaching orders. */
	old = atomic_fetch_and_explicit(&q->word[b], ~0xffffffffull,
					memory_order_relaxed);
	unmisfile(q, old);
	return true;
}

/* The consumer of b's entry, just popped (see the argument at the top). */
static enum consumed consume(struct idle *q, uint32_t b, int may_claim,
			     idle_level_fn level_of, void *ctx,
			     uint32_t *requeued)
{
	_Atomic uint64_t *w = &q->word[b];
	uint64_t old = atomic_load_explicit(w, memory_order_seq_cst);

	for (;;) {
		uint32_t s = pool_block_word_acquire(q->pool, b), l;

		if (bstate_is_idle(s) && !w_released_since(old) &&
		    !w_mis(old) && claimable(b, may_claim, level_of, ctx)) {
			if (claim_entry(q, b, old))
				return C_CLAIMED;
			old = atomic_load_explicit(w, memory_order_seq_cst);
			continue;
		}
		if (bstate_is_idle(s)) {
			/* Released since queued, misfiled, or a rotation: to
			 * the tail of its level's ring. */
			l = ring_level(q, level_for(level_of, ctx, b));
			if (!atomic_compare_exchange_weak_explicit(
				    w, &old, w_queued(w_rel(old), l),
				    memory_order_seq_cst,
				    memory_order_seq_cst))
				continue;
			unmisfile(q, old);
			ring_push(ring_of(q, l), &b, 1);
			if (l < *requeued)
				*requeued = l;
			return C_REQUEUED;
		}
		if (!atomic_compare_exchange_weak_explicit(
			    w, &old, w_none(w_rel(old)), memory_order_seq_cst,
			    memory_order_seq_cst))
			continue;
		unmisfile(q, old);
		/* The Dekker read: pairs with the release's fence. */
		atomic_thread_fence(memory_order_seq_cst);
		if (bstate_is_idle(pool_block_word(q->pool, b))) {
			l = level_for(level_of, ctx, b);
			if (queue_if_unqueued(q, b, l) && l < *requeued)
				*requeued = l;
		}
		return C_DROPPED;
	}
}

/* Pushes ids[0..n), all of one level, in order. */
static void push_run(struct idle *q, const uint32_t *ids, uint32_t n,
		     uint32_t level)
{
	if (n)
		ring_push(ring_of(q, level), ids, n);
}

/*
 * One release of b to idle at level (see the top): bumps relgen, and
 * queues it (returns true: the caller pushes it) or, if it has an entry
 * already, leaves it there, MISFILED if its ring is above level now.
 */
static bool release_one(struct idle *q, uint32_t b, uint32_t level)
{
	_Atomic uint64_t *w = &q->word[b];
	uint64_t old = atomic_load_explicit(w, memory_order_relaxed), nw;

	for (;;) {
		uint32_t rel = w_rel(old) + 1;

		if (!w_q(old))
			nw = w_queued(rel, level);
		else if (level != w_level(old))
			nw = (uint64_t)rel << 32 | (old & 0xffffffffull) | W_MIS;
		else
			nw = (uint64_t)rel << 32 | (old & 0xffffffffull);
		if (atomic_compare_exchange_weak_explicit(
			    w, &old, nw, memory_order_seq_cst,
			    memory_order_relaxed))
			break;
	}
	if (w_mis(nw) && !w_mis(old))
		atomic_fetch_add_explicit(&q->misfiled[w_level(old)], 1,
					  memory_order_relaxed);
	return !w_q(old);
}

void idle_released(struct idle *q, const uint32_t *ids, uint32_t n,
		   idle_level_fn level_of, void *ctx)
{
	uint32_t run[IDLE_BATCH], k = 0, run_level = KVP_RETAIN_DEFAULT;

	/* The Dekker fence: the pool's drops to zero before our reads of
	 * the idle words (pairs with consume()'s). */
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; i < n; i++) {
		/* The level even for a block that keeps its entry: level_of
		 * notes a timed priority's expiry for the tick. */
		uint32_t level = level_of ? ring_level(q, level_of(ctx, ids[i]))
					  : KVP_RETAIN_DEFAULT;

		if (!release_one(q, ids[i], level))
			continue; /* its entry stays where it is */
		if (k == IDLE_BATCH || (k && level != run_level)) {
			push_run(q, run, k, run_level);
			k = 0;
		}
		run_level = level;
		run[k++] = ids[i];
	}
	push_run(q, run, k, run_level);
}

void idle_requeue(struct idle *q, uint32_t b, uint32_t level)
{
	/* The Dekker fence, as idle_released's. */
	atomic_thread_fence(memory_order_seq_cst);
	(void)queue_if_unqueued(q, b, level);
}

void idle_unclaim(struct idle *q, uint32_t b, uint32_t level)
{
	pool_block_unclaim(q->pool, b);
	idle_requeue(q, b, level);
}

/* Pops up to max entries of r (at most *budget), and consumes them:
 * the claimed ones go to ids.  Returns how many were claimed; 0 with
 * *budget 0 or r empty ends the level. */
static uint32_t take_some(struct idle *q, struct kvp_ring *r, uint32_t max,
			  uint64_t *budget, uint32_t *ids, bool *empty,
			  uint32_t *requeued, idle_level_fn level_of,
			  void *ctx)
{
	uint32_t buf[IDLE_BATCH], k, got = 0;

	if (max > IDLE_BATCH)
		max = IDLE_BATCH;
	if (max > *budget)
		max = (uint32_t)*budget;
	k = max ? ring_pop(r, buf, max) : 0;
	*empty = k == 0;
	*budget -= k;
	for (uint32_t i = 0; i < k; i++) {
		pool_block_prefetch(q->pool, buf[i]);
		__builtin_prefetch(&q->word[buf[i]], 1);
	}
	for (uint32_t i = 0; i < k; i++)
		if (consume(q, buf[i],
			    r == ring_of(q, KVP_RETAIN_PIN) ? CLAIM_UNPINNED
							    : CLAIM_ANY,
			    level_of, ctx, requeued) == C_CLAIMED)
			ids[got++] = buf[i];
	return got;
}

/* Claims from level l's ring up to max - got more blocks into ids. */
static uint32_t take_level(struct idle *q, uint32_t l, uint32_t got,
			   uint32_t max, uint32_t *ids, uint32_t *requeued,
			   idle_level_fn level_of, void *ctx)
{
	struct kvp_ring *r = ring_of(q, l);
	/* Every entry there now, once, and each requeued one once more: a
	 * bound on a pass, not on the claims. */
	uint64_t budget = r ? 2 * ring_count(r) + max : 0;
	bool empty = false;

	while (got < max && !empty && budget)
		got += take_some(q, r, max - got, &budget, ids + got, &empty,
				 requeued, level_of, ctx);
	return got;
}

/* Passes over the levels that may follow a requeue to a lower one. */
#define IDLE_TAKE_PASSES 4

/* Files again every entry of ring l (once around), as a rotation. */
static void rotate_ring(struct idle *q, uint32_t l, uint32_t *low,
			idle_level_fn level_of, void *ctx)
{
	struct kvp_ring *r = ring_of(q, l);
	uint64_t left = r ? ring_count(r) : 0;

	while (left) {
		uint32_t buf[IDLE_BATCH],
			 k = ring_pop(r, buf,
				      left < IDLE_BATCH ? (uint32_t)left
							: IDLE_BATCH);

		if (!k)
			break;
		left -= k;
		for (uint32_t i = 0; i < k; i++)
			(void)consume(q, buf[i], CLAIM_NONE, level_of, ctx,
				      low);
	}
}

/* Before evicting from ring l: files again the rings at or above l that
 * hold misfiled entries (blocks whose priority fell below their ring). */
static void refile_from(struct idle *q, uint32_t l, uint32_t *low,
			idle_level_fn level_of, void *ctx)
{
	for (; l < IDLE_LEVELS; l++)
		if (atomic_load_explicit(&q->misfiled[l],
					 memory_order_relaxed) > 0)
			rotate_ring(q, l, low, level_of, ctx);
}

uint32_t idle_take(struct idle *q, uint32_t min, uint32_t max, uint32_t *ids,
		   idle_level_fn level_of, void *ctx)
{
	uint32_t got = 0, passes = 0;

	/* The pinned ring last, for blocks queued there whose pin is gone
	 * (a reset); its pinned blocks go back to its tail. */
	for (uint32_t l = 0; l <= KVP_RETAIN_PIN && got < min; l++) {
		/* A block filed again below l (its priority fell while it
		 * was queued above) is evictable now: go back for it. */
		uint32_t requeued = IDLE_LEVELS;

		if (l)
			refile_from(q, l, &requeued, level_of, ctx);
		if (requeued >= l || passes >= IDLE_TAKE_PASSES)
			got = take_level(q, l, got, max, ids, &requeued,
					 level_of, ctx);
		if (requeued < l && got < min && passes++ < IDLE_TAKE_PASSES)
			l = requeued - 1; /* the loop's l++ makes it requeued */
	}
	if (got >= min)
		return got;
	while (got) {
		uint32_t b = ids[--got];

		idle_unclaim(q, b, level_for(level_of, ctx, b));
	}
	return 0;
}

void idle_rotate(struct idle *q, idle_level_fn level_of, void *ctx)
{
	uint32_t low = IDLE_LEVELS; /* unused: a rotation claims nothing */

	/* The default ring only for entries of blocks raised while queued
	 * there (it is the large one). */
	for (uint32_t l = KVP_RETAIN_DEFAULT; l < IDLE_LEVELS; l++)
		if (l != KVP_RETAIN_DEFAULT ||
		    atomic_load_explicit(&q->misfiled[l],
					 memory_order_relaxed) > 0)
			rotate_ring(q, l, &low, level_of, ctx);
}

uint64_t idle_count(struct idle *q)
{
	uint64_t n = 0;

	for (uint32_t l = 0; l < KVP_RETAIN_PIN; l++) {
		struct kvp_ring *r = ring_of(q, l);

		if (r)
			n += ring_count(r);
	}
	return n;
}

#define check_fail(...)                                                      \
	do {                                                                 \
		fprintf(stderr, "kvp_pool_check: " __VA_ARGS__);             \
		err = -EFAULT;                                               \
		goto out;                                                    \
	} while (0)

/* Marks in seen[] the entries of every ring; -EFAULT on a doubled one. */
static int check_rings(struct idle *q, uint8_t *seen, uint32_t *buf)
{
	uint32_t n = q->pool->num_blocks;
	int err = 0;

	for (uint32_t l = 0; l < IDLE_LEVELS; l++) {
		struct kvp_ring *r = ring_of(q, l);
		uint64_t k = r ? ring_snapshot(r, buf, n + 1) : 0;

		if (k > n)
			check_fail("idle ring %u holds %" PRIu64
				   " entries, more than the pool's blocks\n",
				   l, k);
		for (uint64_t i = 0; i < k; i++) {
			if (buf[i] >= n)
				check_fail("idle ring %u: entry %u out of "
					   "range\n",
					   l, buf[i]);
			if (seen[buf[i]]++)
				check_fail("block %u has two idle entries\n",
					   buf[i]);
		}
	}
out:
	return err;
}

int idle_check(struct idle *q)
{
	uint32_t n = q->pool->num_blocks, *buf = malloc(((size_t)n + 1) * 4);
	uint8_t *seen = calloc(n, 1);
	int64_t mis[IDLE_LEVELS];
	int err = 0;

	if (!buf || !seen) {
		fprintf(stderr, "kvp_pool_check: out of memory\n");
		err = -ENOMEM;
		goto out;
	}
	if ((err = check_rings(q, seen, buf)) != 0)
		goto out;
	memset(mis, 0, sizeof(mis));
	for (uint32_t b = 0; b < n; b++) {
		uint64_t w = atomic_load_explicit(&q->word[b],
						  memory_order_relaxed);

		if ((w_q(w) != 0) != (seen[b] != 0))
			check_fail("block %u: qgen %u but %s idle entry\n", b,
				   w_q(w), seen[b] ? "an" : "no");
		if (w_mis(w))
			mis[w_level(w)]++;
		if (bstate_is_idle(pool_block_word(q->pool, b)) && !seen[b])
			check_fail("idle block %u has no entry (lost)\n", b);
	}
	for (uint32_t l = 0; l < IDLE_LEVELS; l++)
		if (mis[l] != atomic_load_explicit(&q->misfiled[l],
						   memory_order_relaxed))
			check_fail("idle ring %u: %" PRId64 " misfiled entries, "
				   "counted %" PRId64 "\n",
				   l, mis[l],
				   atomic_load_explicit(&q->misfiled[l],
							memory_order_relaxed));
out:
	free(buf);
	free(seen);
	return err;
}
