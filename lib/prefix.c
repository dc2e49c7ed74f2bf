/*
 * prefix.c - the prefix cache policy: each manager's blocks cached by
 * hash (a ptable.c table per manager), the pool's idle cached blocks
 * (idle.c's rings) and the reclaimer hook that ties them to the pool.
 *
 * Correctness argument.
 *
 * The truth about a cached block is its record here (struct
 * prefix_block: its hash, its owner manager, its retention word and its
 * registration generation gen) together with its state word (bstate.h):
 * a block caches hash h for manager pc while its word is CACHED and its
 * record says (pc, h).  The table only points at candidates, and the
 * rings only at blocks that were idle once; every user checks the record
 * and decides by one CAS on the state word.  No lock is taken by a hit,
 * a commit, a release to idle or an eviction.
 *
 * Registration (prefix_store; the committer holds the block, uncached,
 * so nobody else writes its record): bump gen, write hash, owner and
 * retention, set CACHED (release), then insert {tag, gen, b} in the
 * table (ptable.c).  If the insert says the hash is cached already, or
 * raced another insert of it, or found no slot, the committer withdraws:
 * it clears the retention word and CACHED (a hit may hold the block by
 * then: it keeps it, uncached, with correct contents).
 *
 * A hit (prefix_take) finds a slot with the hash's tag, checks the
 * record (owner, gen, hash), revives the block (the state CAS: it fails
 * on a block not CACHED or claimed) and checks the record again: the
 * block is now held, so it cannot be evicted and registered again, and
 * if it was between the first check and the CAS (ABA), gen or the hash
 * differs now and the hit drops its reference and misses.
 *
 * Release to idle: the pool takes a cached block's word to CACHED | 0
 * and calls our idle hook, which queues it (idle.c) at the tail of the
 * ring of its retention priority.  Eviction (the reclaim hook): idle.c
 * claims blocks (CACHED | 0 -> CACHED | EVICTING, a CAS a revival races
 * and only one wins); then, per run of one manager's blocks, we report
 * REMOVED, clear the records' owner and retention, and only then store
 * the words as uncached and held by the allocation (release).  The table
 * is never written: the slots of evicted blocks become stale (their
 * record no longer says CACHED under that gen) and later inserts reuse
 * them.
 *
 * Events are ordered per hash.  A commit of hash h that meets a live
 * entry for h, claimed or not, stores nothing (ptable.c treats an entry
 * whose block is CACHED | EVICTING as live).  An evictor reports REMOVED
 * before it uncaches the block, so a commit that stores h again saw the
 * uncaching (acquire) and reports STORED after that REMOVED: its seq,
 * drawn from the manager's counter after, is higher, and for a sink that
 * is not concurrent, its call comes after.  A block is stored before its
 * holders can release it, and its STORED is reported while the
 * committer holds it, so before it can be evicted.
 *
 * The evictor stays in one RCU read-side section from its claims to its
 * reports, and so does a release that reads an owner's retention clock:
 * a manager being destroyed, which waits for a grace period after
 * forgetting its blocks, outlives them.
 *
 * evictable counts blocks in state CACHED | 0: +n by the release hook,
 * -1 by whoever takes one from zero (a revival, an eviction, a clear).
 * Each pair is ordered on the state word, so the count is exact at
 * quiescence; while threads run it may lag by the releases in flight.
 *
 * Retention.  Each cached block has a retention word (priority and
 * expiry) in its record, and idle.c one ring per priority.  A release
 * queues a block in the ring of its priority at that moment, an expired
 * word being demoted to the default on the way (prefix_level); a block
 * whose word changes while queued is filed again when a consumer reaches
 * its entry.  The evictor takes from the rings from the lowest priority
 * up and never from the pinned one.  A word changes by plain writes on
 * an uncached block held by its registrar (prefix_store), by CAS from a
 * holder (prefix_raise) or a demotion, and by the exchange that clears
 * it when the block stops being cached (forget); each of these that
 * replaces a pin uncounts it, each that writes one counts it.  Expiry
 * is lazy: the word keeps its priority past its expiry, retain_level()
 * reads it as the default, and a release or prefix_tick's rotation
 * (run when the clock passes the earliest expiry among the manager's
 * idle timed blocks, retain_next) moves the block to the default ring.
 * The word is a hint for the order only: the state word alone decides
 * revive against evict.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "idle.h"
#include "pool.h"
#include "prefix.h"
#include "ptable.h"
#include "rcu.h"

/*
 * What the pool keeps per block for the prefix cache, one cache line: a
 * hit reads it, a registration writes it, an eviction reads it.  hash is
 * atomic words: a stale reader may read them while a new registration
 * writes them (a torn value is only a mismatch).
 */
struct prefix_block {
	_Atomic uint64_t hash[4];
	/* The manager caching the block; meaningful only while CACHED. */
	_Atomic(struct prefix_cache *) owner;
	/* Its retention (retain_make()): 0 for the default priority.  See
	 * "Retention" above. */
	_Atomic uint64_t retain;
	/* Registrations of the block so far (its slot carries the low 16
	 * bits).  Written by the registrar alone. */
	_Atomic uint32_t gen;
} __attribute__((aligned(KVP_CACHELINE)));

/*
 * A retention word: the priority in the top 8 bits, the expiry (a time
 * of the owner's retention clock; 0: none) in the low 56.
 */
#define KVP_RETAIN_EXPIRY_MASK ((1ull << 56) - 1)

static inline uint64_t retain_make(uint32_t prio, uint64_t expiry)
{
	return ((uint64_t)prio << 56) | (expiry & KVP_RETAIN_EXPIRY_MASK);
}

static inline uint32_t retain_prio(uint64_t w)
{
	return prefix_word_priority(w);
}

static inline uint64_t retain_expiry(uint64_t w)
{
	return w & KVP_RETAIN_EXPIRY_MASK;
}

/* The priority w gives at time now: its own until it expires, then the
 * default. */
static inline uint32_t retain_level(uint64_t w, uint64_t now)
{
	uint64_t e = retain_expiry(w);

	return e && now >= e ? KVP_RETAIN_DEFAULT : retain_prio(w);
}

/*
 * The reclaimer state of a pool (pool.h's reclaimer ctx): one per pool,
 * built by the first prefix cache over it.
 */
struct prefix_pool {
	struct kvp_pool *pool; /* immutable */
	struct prefix_block *blk; /* the records; the pointer immutable */
	struct idle *idle;	  /* immutable */
	/* Set (never cleared) once a block was committed above the default
	 * priority: until then releases read no retention word.  Relaxed:
	 * a hint for the order. */
	_Atomic bool retained;
	/* Counts (relaxed), on lines of their own: blocks in state
	 * CACHED | 0 (see the argument at the top), revivals by hits.
	 * Blocks released into the idle state are not counted: they are
	 * evictable + revived + evictions + cleared. */
	kvp_cacheline_aligned _Atomic int64_t evictable;
	_Atomic uint64_t revived;
	/* Evictions by allocations, evictable blocks a reset freed. */
	kvp_cacheline_aligned _Atomic uint64_t evictions;
	_Atomic uint64_t cleared;
};

#ifdef KVP_FAULT_INJECTION
void (*prefix_take_hook)(struct prefix_cache *pc, uint32_t b);
#endif

/* ------------------------------------------------------------------ */
/* Records                                                             */
/* ------------------------------------------------------------------ */

static inline void hash_words(const struct kvp_hash *h, uint64_t w[4])
{
	memcpy(w, h->b, 4 * sizeof(uint64_t));
}

/* Relaxed: see the argument at the top (a torn read only mismatches). */
static inline bool hash_is(const struct prefix_block *r, const uint64_t w[4])
{
	return atomic_load_explicit(&r->hash[0], memory_order_relaxed) == w[0] &&
	       atomic_load_explicit(&r->hash[1], memory_order_relaxed) == w[1] &&
	       atomic_load_explicit(&r->hash[2], memory_order_relaxed) == w[2] &&
	       atomic_load_explicit(&r->hash[3], memory_order_relaxed) == w[3];
}

static inline void hash_read(const struct prefix_block *r, uint64_t w[4])
{
	for (int i = 0; i < 4; i++)
		w[i] = atomic_load_explicit(&r->hash[i], memory_order_relaxed);
}

/* Whether record r says (pc, gen): relaxed, a check that the caller's
 * CAS or acquire orders. */
static inline bool rec_is(const struct prefix_block *r,
			  const struct prefix_cache *pc, uint32_t gen)
{
	return atomic_load_explicit(&r->owner, memory_order_relaxed) == pc &&
	       ((atomic_load_explicit(&r->gen, memory_order_relaxed) ^ gen) &
		0xffffu) == 0;
}

/* ptable_ops: a slot {gen, b} of pc's table is live. */
static bool rec_live(void *ctx, uint32_t b, uint32_t gen)
{
	struct prefix_cache *pc = ctx;

	/* Acquire: the record as the registration that set CACHED wrote
	 * it (pairs with bstate_cache's release). */
	return bstate_is_cached(pool_block_word_acquire(pc->pool, b)) &&
	       rec_is(&pc->pp->blk[b], pc, gen);
}

/* ptable_ops: the slot is live and its block caches w. */
static bool rec_holds(void *ctx, uint32_t b, uint32_t gen, const uint64_t w[4])
{
	struct prefix_cache *pc = ctx;

	return rec_live(ctx, b, gen) && hash_is(&pc->pp->blk[b], w);
}

static const struct ptable_ops prefix_table_ops = {
	.live = rec_live,
	.holds = rec_holds,
};

/* Takes b's retention word from w to the default priority: whoever
 * clears a pin uncounts it.  Returns false if w was no longer b's word. */
static bool retain_demote(struct prefix_block *r, struct prefix_cache *pc,
			  uint64_t w)
{
	/* Relaxed: the word orders nothing but itself. */
	if (!atomic_compare_exchange_strong_explicit(
		    &r->retain, &w, 0, memory_order_relaxed,
		    memory_order_relaxed))
		return false;
	if (retain_prio(w) == KVP_RETAIN_PIN && pc)
		atomic_fetch_sub_explicit(&pc->pinned, 1, memory_order_relaxed);
	return true;
}

/* A block stops being cached by pc: its retention word goes (a pin
 * uncounted).  By whoever holds it alone, or before the uncaching CAS. */
static void forget_retention(struct prefix_block *r, struct prefix_cache *pc)
{
	/* Relaxed: the word orders nothing but itself. */
	uint64_t w = atomic_exchange_explicit(&r->retain, 0,
					      memory_order_relaxed);

	if (retain_prio(w) == KVP_RETAIN_PIN)
		atomic_fetch_sub_explicit(&pc->pinned, 1, memory_order_relaxed);
}

/* Lowers *at to v if v is below it (relaxed: a hint for the tick). */
static void atomic_lower(_Atomic uint64_t *at, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(at, memory_order_relaxed);

	while (v < cur && !atomic_compare_exchange_weak_explicit(
				  at, &cur, v, memory_order_relaxed,
				  memory_order_relaxed))
		;
}

/*
 * idle_level_fn: the ring a cached block going idle joins, its priority
 * now.  An expired word is demoted on the way; a timed one lowers its
 * owner's next expiry (see "Retention" above).  Inside an RCU read-side
 * section (the owner outlives it).
 */
static uint32_t prefix_level(void *ctx, uint32_t b)
{
	struct prefix_pool *pp = ctx;
	struct prefix_block *r = &pp->blk[b];
	/* Relaxed: a hint for the order; the state word decides races. */
	uint64_t w = atomic_load_explicit(&r->retain, memory_order_relaxed);
	struct prefix_cache *pc;
	uint64_t now;

	if (w == 0)
		return KVP_RETAIN_DEFAULT;
	if (retain_expiry(w) == 0)
		return retain_prio(w);
	pc = atomic_load_explicit(&r->owner, memory_order_relaxed);
	if (!pc)
		return KVP_RETAIN_DEFAULT;
	now = atomic_load_explicit(&pc->retain_now, memory_order_relaxed);
	if (retain_level(w, now) == KVP_RETAIN_DEFAULT) {
		(void)retain_demote(r, pc, w);
		return KVP_RETAIN_DEFAULT;
	}
	atomic_lower(&pc->retain_next, retain_expiry(w));
	return retain_prio(w);
}

/* The level function releases use: none (the default ring) until some
 * block was committed above the default priority. */
static inline idle_level_fn level_fn(struct prefix_pool *pp)
{
	return atomic_load_explicit(&pp->retained, memory_order_relaxed)
		       ? prefix_level
		       : NULL;
}

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

void prefix_set_event_sink(struct prefix_cache *pc, kvp_event_cb cb,
			   void *arg, bool concurrent)
{
	pc->event_cb = cb;
	pc->event_arg = cb ? arg : NULL;
	pc->event_concurrent = cb && concurrent;
}

int prefix_set_event_medium(struct prefix_cache *pc, const char *medium)
{
	size_t n = medium ? strlen(medium) : 0;

	if (n >= sizeof(pc->event_medium))
		return -EINVAL;
	memset(pc->event_medium, 0, sizeof(pc->event_medium));
	memcpy(pc->event_medium, medium ? medium : "", n);
	return 0;
}

void prefix_emit_event(struct prefix_cache *pc, struct kvp_event *ev)
{
	bool lock;

	if (!pc->event_cb)
		return;
	if (ev->type == KVP_EVENT_STORED) {
		ev->block_tokens = pc->block_tokens;
		ev->num_tokens = ev->nhashes * pc->block_tokens;
	}
	ev->medium = pc->event_medium[0] ? pc->event_medium : NULL;
	lock = !pc->event_concurrent;
	if (lock)
		kvp_check_pthread(pthread_mutex_lock(&pc->event_lock));
	/* Relaxed: the seq orders events of one hash by the happens-before
	 * that orders their causes (see the argument at the top); under the
	 * lock it also numbers the calls in order. */
	ev->seq = atomic_fetch_add_explicit(&pc->event_seq, 1,
					    memory_order_relaxed);
	pc->event_cb(ev, pc->event_arg);
	if (lock)
		kvp_check_pthread(pthread_mutex_unlock(&pc->event_lock));
}

void prefix_emit(struct prefix_cache *pc, enum kvp_event_type type,
		 const struct kvp_hash *hashes, uint32_t n,
		 const struct kvp_hash *parent)
{
	struct kvp_event ev;

	if (!pc->event_cb)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.type = type;
	ev.hashes = hashes;
	ev.nhashes = n;
	ev.parent = parent;
	ev.lora_id = -1;
	prefix_emit_event(pc, &ev);
}

/* ------------------------------------------------------------------ */
/* Pool side: the reclaimer                                            */
/* ------------------------------------------------------------------ */

/* pool_set_reclaimer()'s make(): the reclaimer state of a new pool. */
static int prefix_pool_make(struct kvp_pool *pool, void **ctx)
{
	struct prefix_pool *pp;
	uint32_t n = pool->num_blocks;

	pp = kvp_malloc_aligned(KVP_CACHELINE, sizeof(*pp));
	if (!pp)
		return -ENOMEM;
	memset(pp, 0, sizeof(*pp));
	pp->pool = pool;
	/* Written now (below): left to fault in lazily, their pages would
	 * cost the commits that first touch them. */
	pp->blk = kvp_malloc_aligned(KVP_CACHELINE,
				     (size_t)n * sizeof(*pp->blk));
	/* Hits read blk[] at random (a cached block's id is anyone's):
	 * huge pages spare them a TLB miss each in a large pool. */
	if (pp->blk)
		kvp_advise_huge(pp->blk, (size_t)n * sizeof(*pp->blk));
	if (!pp->blk || idle_create(pool, &pp->idle) != 0) {
		if (pp->blk)
			kvp_free_aligned(pp->blk, KVP_CACHELINE,
					 (size_t)n * sizeof(*pp->blk));
		kvp_free_aligned(pp, KVP_CACHELINE, sizeof(*pp));
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++) {
		atomic_init(&pp->blk[b].owner, NULL);
		for (int i = 0; i < 4; i++)
			atomic_init(&pp->blk[b].hash[i], 0);
		atomic_init(&pp->blk[b].retain, 0);
		atomic_init(&pp->blk[b].gen, 0);
	}
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

	idle_destroy(pp->idle);
	kvp_free_aligned(pp->blk, KVP_CACHELINE, (size_t)n * sizeof(*pp->blk));
	kvp_free_aligned(pp, KVP_CACHELINE, sizeof(*pp));
}

/* The idle hook: a free took cached blocks ids[0..n) to zero, in order. */
static void prefix_release(void *ctx, const uint32_t *ids, uint32_t n)
{
	struct prefix_pool *pp = ctx;
	idle_level_fn lf = level_fn(pp);

	/* Relaxed: a count; the state word orders the transitions. */
	atomic_fetch_add_explicit(&pp->evictable, n, memory_order_relaxed);
	if (!lf) {
		idle_released(pp->idle, ids, n, NULL, NULL);
		return;
	}
	/* prefix_level reads the owners' clocks. */
	kvp_rcu_read_lock();
	idle_released(pp->idle, ids, n, lf, pp);
	kvp_rcu_read_unlock();
}

void prefix_unhit(struct kvp_pool *pool, const uint32_t *blocks, uint32_t n)
{
	struct prefix_pool *pp = pool_reclaimer_ctx(pool);
	uint32_t idle = 0;

	kvp_rcu_read_lock();
	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = blocks[i];

		/* Idle again: back where its entry still is, as if never
		 * hit (a failed call moves no statistic); else, uncached by
		 * a reset meanwhile, it went back to the pool. */
		if (!pool_block_unref(pool, b))
			continue;
		idle++;
		idle_requeue(pp->idle, b,
			     level_fn(pp) ? prefix_level(pp, b)
					  : KVP_RETAIN_DEFAULT);
	}
	kvp_rcu_read_unlock();
	/* Relaxed: counts. */
	if (idle) {
		atomic_fetch_add_explicit(&pp->evictable, idle,
					  memory_order_relaxed);
		atomic_fetch_sub_explicit(&pp->revived, idle,
					  memory_order_relaxed);
	}
}

/* Up to KVP_EVENT_BATCH hashes of one manager per REMOVED event. */
#define KVP_EVENT_BATCH 16

/*
 * The end of an eviction: per run of one manager's claimed blocks,
 * report REMOVED, forget the records, and only then uncache the words
 * (see the argument at the top).  Inside the evictor's RCU section.
 */
static void evict_finish(struct prefix_pool *pp, const uint32_t *ids,
			 uint32_t got)
{
	for (uint32_t i = 0; i < got; i++)
		__builtin_prefetch(&pp->blk[ids[i]], 1);
	for (uint32_t i = 0; i < got;) {
		struct kvp_hash hashes[KVP_EVENT_BATCH];
		struct prefix_cache *pc;
		uint32_t k = 0, end = got - i < KVP_EVENT_BATCH
					      ? got
					      : i + KVP_EVENT_BATCH;

		/* Relaxed: the claim's acquire ordered the records. */
		pc = atomic_load_explicit(&pp->blk[ids[i]].owner,
					 memory_order_relaxed);
		while (i + k < end &&
		       atomic_load_explicit(&pp->blk[ids[i + k]].owner,
					    memory_order_relaxed) == pc) {
			uint64_t w[4];

			hash_read(&pp->blk[ids[i + k]], w);
			memcpy(hashes[k].b, w, sizeof(w));
			k++;
		}
		prefix_emit(pc, KVP_EVENT_REMOVED, hashes, k, NULL);
		for (uint32_t j = i; j < i + k; j++) {
			forget_retention(&pp->blk[ids[j]], pc);
			atomic_store_explicit(&pp->blk[ids[j]].owner, NULL,
					      memory_order_relaxed);
			pool_block_evicted(pp->pool, ids[j]);
		}
		/* Relaxed: counts. */
		atomic_fetch_sub_explicit(&pc->cached, k, memory_order_relaxed);
		atomic_fetch_add_explicit(&pc->evictions, k,
					  memory_order_relaxed);
		i += k;
	}
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
		max = (uint32_t)avail; /* no pass to the end for extras */
	/* One read-side section around the claims and the reports: see
	 * the argument at the top (destroyed managers outlive it). */
	kvp_rcu_read_lock();
	got = idle_take(pp->idle, min, max, ids, level_fn(pp), pp);
	if (got) {
		evict_finish(pp, ids, got);
		atomic_fetch_sub_explicit(&pp->evictable, got,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&pp->evictions, got,
					  memory_order_relaxed);
	}
	kvp_rcu_read_unlock();
	return got;
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
		n += bstate_is_cached(pool_block_word(pool, b));
	return n;
}

#define check_fail(...)                                                      \
	do {                                                                 \
		fprintf(stderr, "kvp_pool_check: " __VA_ARGS__);             \
		return -EFAULT;                                              \
	} while (0)

static int prefix_check_pool(void *ctx)
{
	struct prefix_pool *pp = ctx;
	struct kvp_pool *pool = pp->pool;
	uint64_t idle = 0;

	for (uint32_t b = 0; b < pool->num_blocks; b++) {
		uint32_t s = pool_block_word(pool, b);

		if (s & KVP_ST_EVICTING)
			check_fail("block %u is being evicted at quiescence\n",
				   b);
		if (bstate_is_cached(s) &&
		    !atomic_load_explicit(&pp->blk[b].owner,
					  memory_order_relaxed))
			check_fail("cached block %u has no owner\n", b);
		if (!bstate_is_cached(s) &&
		    atomic_load_explicit(&pp->blk[b].retain,
					 memory_order_relaxed))
			check_fail("uncached block %u keeps a retention\n", b);
		idle += bstate_is_idle(s);
	}
	if ((int64_t)idle != atomic_load_explicit(&pp->evictable,
						  memory_order_relaxed))
		check_fail("%" PRIu64 " evictable blocks, counted %" PRId64
			   "\n",
			   idle,
			   atomic_load_explicit(&pp->evictable,
						memory_order_relaxed));
	return idle_check(pp->idle);
}

/* What the pool sees of the prefix cache (pool.h). */
static const struct pool_reclaimer prefix_reclaimer = {
	.idle = prefix_release,
	.reclaim = prefix_evict,
	.evictable = prefix_evictable,
	.stats = prefix_stats,
	.check = prefix_check_pool,
	.fini = prefix_pool_free,
};

/* ------------------------------------------------------------------ */
/* Manager side                                                        */
/* ------------------------------------------------------------------ */

int prefix_cache_init(struct prefix_cache *pc, struct kvp_pool *pool,
		      uint32_t max_pinned)
{
	int err;

	memset(pc, 0, sizeof(*pc));
	pc->pool = pool;
	pc->block_tokens = pool->block_tokens;
	pc->max_pinned = max_pinned;
	atomic_init(&pc->event_seq, 0);
	atomic_init(&pc->resetting, 0);
	atomic_init(&pc->cached, 0);
	atomic_init(&pc->evictions, 0);
	atomic_init(&pc->uncached, 0);
	atomic_init(&pc->retain_now, 0);
	atomic_init(&pc->retain_next, UINT64_MAX);
	atomic_init(&pc->pinned, 0);
	if (pthread_mutex_init(&pc->event_lock, NULL) != 0)
		return -ENOMEM;
	err = ptable_create(pool->num_blocks, &pc->table);
	if (!err)
		err = pool_set_reclaimer(pool, &prefix_reclaimer,
					 prefix_pool_make);
	if (err) {
		ptable_destroy(pc->table);
		pc->table = NULL;
		pthread_mutex_destroy(&pc->event_lock);
		return err;
	}
	/* Only prefix.c registers a reclaimer. */
	pc->pp = pool_reclaimer_ctx(pool);
	return 0;
}

void prefix_cache_fini(struct prefix_cache *pc)
{
	if (!pc->table)
		return;
	/* Parked references are held ones: dropped first, so that the
	 * blocks they hold go back to the pool now. */
	(void)pool_unpark_all(pc->pool);
	(void)prefix_clear(pc, true);
	/* Wait for evictors still reporting on our blocks (see the top). */
	urcu_memb_synchronize_rcu();
	if (atomic_load_explicit(&pc->cached, memory_order_relaxed) != 0)
		kvp_fatal("a destroyed manager still caches blocks");
	ptable_destroy(pc->table);
	pc->table = NULL;
	pthread_mutex_destroy(&pc->event_lock);
}

void prefix_cache_stats(struct prefix_cache *pc, uint64_t *cached,
			uint64_t *evictions, uint64_t *pinned, uint64_t *clock)
{
	/* Relaxed: statistics. */
	*clock = atomic_load_explicit(&pc->retain_now, memory_order_relaxed);
	*cached = atomic_load_explicit(&pc->cached, memory_order_relaxed);
	*evictions = atomic_load_explicit(&pc->evictions, memory_order_relaxed);
	*pinned = atomic_load_explicit(&pc->pinned, memory_order_relaxed);
}

uint64_t prefix_uncached(struct prefix_cache *pc)
{
	/* Relaxed: a statistic. */
	return atomic_load_explicit(&pc->uncached, memory_order_relaxed);
}

/*
 * Read side: a reference on b if its record says (pc, gen, w);
 * *revived counts the blocks it took from zero.
 */
static bool take_one(struct prefix_cache *pc, struct tcache *tc, uint32_t b,
		     uint32_t gen, const uint64_t w[4], uint32_t *revived)
{
	struct kvp_pool *pool = pc->pool;
	const struct prefix_block *r = &pc->pp->blk[b];
	uint32_t was;

	if (tc && tcache_parks(tc, b) && tcache_unpark(tc, b)) {
		/* Our own parked reference, taken back with no atomic on the
		 * state word (pool.c).  We held b all along, so it is the
		 * block we cached, unless a forced clear uncached it since
		 * (relaxed reads: our hold orders them). */
		if (bstate_is_cached(pool_block_word(pool, b)) &&
		    rec_is(r, pc, gen) && hash_is(r, w))
			return true;
		(void)kvp_pool_free(pool, &b, 1);
		return false;
	}
#ifdef KVP_FAULT_INJECTION
	if (prefix_take_hook)
		prefix_take_hook(pc, b);
#endif
	if (!pool_block_revive(pool, b, &was))
		return false;
	*revived += bstate_refs(was) == 0;
	/* Held now: the record cannot change under us any more. */
	if (!rec_is(r, pc, gen) || !hash_is(r, w)) {
		/* ABA: evicted and cached again since our first check. */
		(void)kvp_pool_free(pool, &b, 1);
		return false;
	}
	return true;
}

/* Read side: the first slot of it whose record says (pc, w), or 0. */
static uint64_t find_slot(struct prefix_cache *pc, struct ptable_iter *it,
			  uint64_t v, const uint64_t w[4])
{
	for (; v; v = ptable_iter_next(it)) {
		const struct prefix_block *r =
			&pc->pp->blk[ptable_slot_block(v)];

		if (rec_is(r, pc, ptable_slot_gen(v)) && hash_is(r, w))
			return v;
	}
	return 0;
}

#define KVP_TAKE_CHUNK 32

/* One chunk of prefix_take: hashes[0..k), blocks into blocks[]; returns
 * how many hit (a miss ends the prefix). */
static uint32_t take_chunk(struct prefix_cache *pc, struct tcache *tc,
			   const struct kvp_hash *hashes, uint32_t k,
			   uint32_t *blocks, uint32_t *revived)
{
	struct ptable_iter it[KVP_TAKE_CHUNK];
	uint64_t cand[KVP_TAKE_CHUNK];
	uint32_t j;

	/* In three passes, so that the misses of a chunk overlap: the keys
	 * (prefetching their buckets), the first candidates (prefetching
	 * their records and, for writing, their state words), then the
	 * checks and CASes. */
	for (j = 0; j < k; j++) {
		uint64_t w[4];

		hash_words(&hashes[j], w);
		ptable_iter_init(pc->table, ptable_key(w), &it[j]);
		ptable_prefetch(pc->table, it[j].key, false);
	}
	for (j = 0; j < k; j++) {
		cand[j] = ptable_iter_next(&it[j]);
		if (!cand[j])
			break;
		__builtin_prefetch(&pc->pp->blk[ptable_slot_block(cand[j])],
				   0);
		pool_block_prefetch(pc->pool, ptable_slot_block(cand[j]));
	}
	k = j;
	for (j = 0; j < k; j++) {
		uint64_t w[4], v;

		hash_words(&hashes[j], w);
		v = find_slot(pc, &it[j], cand[j], w);
		if (!v || !take_one(pc, tc, ptable_slot_block(v),
				    ptable_slot_gen(v), w, revived))
			break;
		blocks[j] = ptable_slot_block(v);
	}
	return j;
}

uint32_t prefix_take(struct prefix_cache *pc, const struct kvp_hash *hashes,
		     uint32_t n, uint32_t *blocks)
{
	struct kvp_pool *pool = pc->pool;
	/* The calling thread's cache, where its parked references are (if
	 * it has one already: a hit creates none). */
	struct tcache *tc = tcache_last_is(&pool->depot) ? tcache_last.tc : NULL;
	uint32_t i = 0, revived = 0;

	while (i < n) {
		uint32_t k = n - i < KVP_TAKE_CHUNK ? n - i : KVP_TAKE_CHUNK;
		uint32_t j = take_chunk(pc, tc, hashes + i, k, blocks + i,
					&revived);

		i += j;
		if (j < KVP_TAKE_CHUNK)
			break; /* a miss (or the end) */
	}
	/* One update for the whole prefix: a line other threads share. */
	if (revived) {
		atomic_fetch_sub_explicit(&pc->pp->evictable, revived,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&pc->pp->revived, revived,
					  memory_order_relaxed);
	}
	return i;
}

uint64_t prefix_store_prepare(struct prefix_cache *pc, uint32_t b,
			      const struct kvp_hash *h)
{
	uint64_t w[4], key;

	hash_words(h, w);
	key = ptable_key(w);
	ptable_prefetch(pc->table, key, true);
	kvp_prefetch_w(&pc->pp->blk[b]);
	pool_block_prefetch(pc->pool, b);
	return key;
}

/*
 * A commit runs inside an RCU read-side section, so that a reset, which
 * raises pc->resetting and then waits for a grace period, sees every
 * commit that missed its flag finished, STORED events included, before
 * it forgets anything: a block registered during the reset's walk would
 * survive it, and its STORED, reported before CLEARED, would tell a
 * router the opposite.  Commits that see the flag store nothing.
 */
bool prefix_store_begin(struct prefix_cache *pc)
{
	kvp_rcu_read_lock();
	/* Acquire: the reset's CLEARED before our STOREDs (pairs with the
	 * release that lowers the flag). */
	return atomic_load_explicit(&pc->resetting, memory_order_acquire) == 0;
}

void prefix_store_end(struct prefix_cache *pc, uint32_t n)
{
	/* Relaxed: a count. */
	if (n)
		atomic_fetch_add_explicit(&pc->cached, n, memory_order_relaxed);
	kvp_rcu_read_unlock();
}

/*
 * Retention, the manager side.  A pin is counted in pc->pinned from the
 * moment a word with the pin priority is written to the moment it is
 * replaced (whoever replaces it uncounts it: a commit here, a demotion,
 * an eviction or reset in forget_retention), so the cap is checked
 * against the words, expired ones included until their demotion.
 */
static void retain_mark(struct prefix_pool *pp, uint32_t prio)
{
	/* Relaxed: a hint for the order (see level_fn). */
	if (!atomic_load_explicit(&pp->retained, memory_order_relaxed))
		atomic_store_explicit(&pp->retained, true,
				      memory_order_relaxed);
	(void)prio;
}

/* Whether one more block may be pinned (then counted), else one more is
 * refused in *unpinned. */
static bool pin_admit(struct prefix_cache *pc, uint32_t *unpinned)
{
	/* Relaxed: a count with a cap, decided by the CAS. */
	uint32_t n = atomic_load_explicit(&pc->pinned, memory_order_relaxed);

	while (n < pc->max_pinned)
		if (atomic_compare_exchange_weak_explicit(
			    &pc->pinned, &n, n + 1, memory_order_relaxed,
			    memory_order_relaxed))
			return true;
	(*unpinned)++;
	return false;
}

/* The word a store or raise may write: want, or a lower priority if
 * that priority's ring cannot be made (no memory). */
static uint64_t retain_ready(struct prefix_cache *pc, uint64_t want)
{
	uint32_t p = retain_prio(want);

	while (p && idle_level_ensure(pc->pp->idle, p) != 0)
		p--;
	return p == retain_prio(want) ? want
				      : p ? retain_make(p, retain_expiry(want))
					  : 0;
}

int prefix_prepare_levels(struct prefix_cache *pc, uint32_t levels)
{
	/* A pin the cap refuses is stored one below. */
	if (levels & (1u << KVP_RETAIN_PIN))
		levels |= 1u << KVP_RETAIN_MAX;
	for (uint32_t l = 1; l < IDLE_LEVELS; l++)
		if ((levels >> l) & 1) {
			int err = idle_level_ensure(pc->pp->idle, l);

			if (err)
				return err;
		}
	return 0;
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

/* The word a raise of current word w (level cur now) to want writes, or
 * w itself if none. */
static uint64_t raise_to(uint64_t w, uint32_t cur, uint64_t want)
{
	uint32_t wp = retain_prio(want);
	uint64_t e = retain_expiry(w), we = retain_expiry(want);

	if (wp < cur)
		return w; /* a hit keeps a higher priority */
	if (wp > cur)
		return want;
	/* The same priority: renewed, never shortened. */
	return retain_make(wp, e && we ? (e > we ? e : we) : 0);
}

void prefix_raise(struct prefix_cache *pc, uint32_t b, uint64_t want,
		  uint32_t *unpinned)
{
	struct prefix_block *r = &pc->pp->blk[b];
	uint64_t w, nw;

	/* Relaxed: we hold b, so it stays cached; whose is it? */
	if (retain_prio(want) == KVP_RETAIN_DEFAULT ||
	    !bstate_is_cached(pool_block_word(pc->pool, b)) ||
	    atomic_load_explicit(&r->owner, memory_order_relaxed) != pc)
		return;
	want = retain_ready(pc, want);
	w = atomic_load_explicit(&r->retain, memory_order_relaxed);
	for (;;) {
		uint64_t now = atomic_load_explicit(&pc->retain_now,
						    memory_order_relaxed);
		bool pin_add;

		nw = raise_to(w, retain_level(w, now), want);
		if (nw == w)
			return;
		pin_add = retain_prio(nw) == KVP_RETAIN_PIN &&
			  retain_prio(w) != KVP_RETAIN_PIN;
		if (pin_add && !pin_admit(pc, unpinned)) {
			if (retain_level(w, now) >= KVP_RETAIN_MAX)
				return;
			nw = retain_ready(pc, retain_make(KVP_RETAIN_MAX,
							  retain_expiry(want)));
			pin_add = false;
		}
		/* Relaxed: the word orders nothing but itself.  A demotion
		 * may replace w meanwhile: then again. */
		if (atomic_compare_exchange_weak_explicit(
			    &r->retain, &w, nw, memory_order_relaxed,
			    memory_order_relaxed))
			break;
		if (pin_add)
			atomic_fetch_sub_explicit(&pc->pinned, 1,
						  memory_order_relaxed);
	}
	if (retain_prio(w) == KVP_RETAIN_PIN &&
	    retain_prio(nw) != KVP_RETAIN_PIN)
		atomic_fetch_sub_explicit(&pc->pinned, 1, memory_order_relaxed);
	retain_mark(pc->pp, retain_prio(nw));
}

int prefix_tick(struct prefix_cache *pc, uint64_t steps, uint64_t *now_out)
{
	uint64_t now;

	/* Relaxed: a logical clock; the rotation's CASes order the rest. */
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
	/* Some idle block of ours has expired: one pass over the rings
	 * above the default priority files every idle block again where
	 * its word says now (expired ones demoted to the default ring's
	 * tail, as if just released) and lowers retain_next again for the
	 * timed ones left. */
	atomic_store_explicit(&pc->retain_next, UINT64_MAX,
			      memory_order_relaxed);
	kvp_rcu_read_lock();
	idle_rotate(pc->pp->idle, prefix_level, pc->pp);
	kvp_rcu_read_unlock();
	return 0;
}

int prefix_retention(struct prefix_cache *pc, const struct kvp_hash *h,
		     uint32_t *prio, uint64_t *expires)
{
	struct ptable_iter it;
	uint64_t w[4], v, word = 0, now;

	hash_words(h, w);
	ptable_iter_init(pc->table, ptable_key(w), &it);
	v = find_slot(pc, &it, ptable_iter_next(&it), w);
	/* A snapshot: the block may be evicted or raised right after. */
	if (!v || !bstate_is_cached(pool_block_word(
			  pc->pool, ptable_slot_block(v))))
		return -ENOENT;
	word = atomic_load_explicit(&pc->pp->blk[ptable_slot_block(v)].retain,
				    memory_order_relaxed);
	now = atomic_load_explicit(&pc->retain_now, memory_order_relaxed);
	*prio = retain_level(word, now);
	*expires = *prio == KVP_RETAIN_DEFAULT ? 0 : retain_expiry(word);
	return 0;
}

/* The retention word a store writes: retain, with the pin cap, at a
 * priority whose ring exists. */
static uint64_t store_word(struct prefix_cache *pc, uint64_t retain,
			   uint32_t *unpinned)
{
	bool pin = retain_prio(retain) == KVP_RETAIN_PIN;

	if (pin && !pin_admit(pc, unpinned)) {
		retain = retain_make(KVP_RETAIN_MAX, retain_expiry(retain));
		pin = false;
	}
	retain = retain ? retain_ready(pc, retain) : 0;
	if (pin && retain_prio(retain) != KVP_RETAIN_PIN)
		atomic_fetch_sub_explicit(&pc->pinned, 1, memory_order_relaxed);
	return retain;
}

int prefix_store(struct prefix_cache *pc, uint32_t b, const struct kvp_hash *h,
		 uint64_t key, uint64_t retain, uint32_t *unpinned)
{
	struct kvp_pool *pool = pc->pool;
	struct prefix_block *r = &pc->pp->blk[b];
	uint32_t gen;
	uint64_t w[4];
	enum ptable_result res;

	/* Relaxed: b is held by the caller; only a registration (by a
	 * holder: a fork's sibling) or a reset changes CACHED meanwhile. */
	if (bstate_is_cached(pool_block_word(pool, b)))
		return 0;
	hash_words(h, w);
	retain = store_word(pc, retain, unpinned);
	/* The registrar alone writes an uncached held block's record. */
	gen = atomic_load_explicit(&r->gen, memory_order_relaxed) + 1;
	for (int i = 0; i < 4; i++)
		atomic_store_explicit(&r->hash[i], w[i], memory_order_relaxed);
	atomic_store_explicit(&r->owner, pc, memory_order_relaxed);
	atomic_store_explicit(&r->retain, retain, memory_order_relaxed);
	atomic_store_explicit(&r->gen, gen, memory_order_relaxed);
	/* Release: the record before CACHED (bstate.h). */
	pool_block_cache(pool, b);
	res = ptable_insert(pc->table, key, w, b, gen, &prefix_table_ops, pc);
	if (res == PTABLE_STORED) {
		if (retain)
			retain_mark(pc->pp, retain_prio(retain));
		return 1;
	}
	/* Withdrawn: the retention first (a pin uncounted), then CACHED.
	 * A hit that took b meanwhile keeps it, uncached.  Only a reset
	 * may have uncached it first. */
	forget_retention(r, pc);
	(void)pool_block_uncache(pool, b);
	if (res == PTABLE_FULL)
		atomic_fetch_add_explicit(&pc->uncached, 1,
					  memory_order_relaxed);
	return 0;
}

/* Whether slot value v of pc's table is live (relaxed: quiescent walks
 * and a reset's snapshot; the state CASes decide). */
static bool slot_live(struct prefix_cache *pc, uint64_t v)
{
	return v && bstate_is_cached(pool_block_word(pc->pool,
						     ptable_slot_block(v))) &&
	       rec_is(&pc->pp->blk[ptable_slot_block(v)], pc,
		      ptable_slot_gen(v));
}

/* Whether a live block of pc is held (a reset's -EBUSY). */
static bool any_held(struct prefix_cache *pc)
{
	for (uint64_t i = 0; i < ptable_nslots(pc->table); i++) {
		uint64_t v = ptable_slot_at(pc->table, i);

		if (slot_live(pc, v) &&
		    bstate_refs(pool_block_word(pc->pool,
						ptable_slot_block(v))))
			return true;
	}
	return false;
}

#define KVP_CLEAR_BATCH 256u

/*
 * Forgets block b of pc (live at the walk).  An idle one is taken (then
 * ours alone: forgotten and listed in freed[] for the pool); a held one
 * loses its retention, then CACHED (its holders' last drop frees it); a
 * claimed one is its evictor's.  Returns whether it stopped being cached
 * by us.
 */
static bool clear_one(struct prefix_cache *pc, uint32_t b, uint32_t *freed,
		      uint32_t *nfreed)
{
	struct prefix_block *r = &pc->pp->blk[b];

	for (;;) {
		uint32_t s = pool_block_word(pc->pool, b);

		if (!bstate_is_cached(s) || (s & KVP_ST_EVICTING))
			return false;
		if (pool_block_take_idle(pc->pool, b)) {
			forget_retention(r, pc);
			atomic_store_explicit(&r->owner, NULL,
					      memory_order_relaxed);
			freed[(*nfreed)++] = b;
			return true;
		}
		if (!bstate_refs(s))
			continue; /* revived or claimed meanwhile */
		/* Held: the retention goes first, while the block is still
		 * ours (after the CAS its holders may free it, and a new
		 * registrar write its record); if a claim wins meanwhile,
		 * its evictor's forget finds the word cleared. */
		forget_retention(r, pc);
		if (pool_block_uncache(pc->pool, b))
			return true;
	}
}

int prefix_clear(struct prefix_cache *pc, bool force)
{
	uint32_t freed[KVP_CLEAR_BATCH], nfreed = 0;
	uint64_t gone = 0, taken = 0;

	/* A snapshot: blocks held now fail the reset; one held after the
	 * walk just stays with its holders, uncached. */
	if (!force && any_held(pc))
		return -EBUSY;
	for (uint64_t i = 0; i < ptable_nslots(pc->table); i++) {
		uint64_t v = ptable_slot_at(pc->table, i);

		if (!slot_live(pc, v))
			continue;
		gone += clear_one(pc, ptable_slot_block(v), freed, &nfreed);
		if (nfreed == KVP_CLEAR_BATCH) {
			pool_give_back(pc->pool, freed, nfreed);
			taken += nfreed;
			nfreed = 0;
		}
	}
	pool_give_back(pc->pool, freed, nfreed);
	taken += nfreed;
	/* Relaxed: counts. */
	atomic_fetch_sub_explicit(&pc->cached, gone, memory_order_relaxed);
	atomic_fetch_sub_explicit(&pc->pp->evictable, (int64_t)taken,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&pc->pp->cleared, taken,
				  memory_order_relaxed);
	return 0;
}

int prefix_reset(struct prefix_cache *pc)
{
	int err;

	/* seq_cst: before the grace period's own barriers, so that a
	 * commit that starts after them sees the flag. */
	atomic_fetch_add_explicit(&pc->resetting, 1, memory_order_seq_cst);
	urcu_memb_synchronize_rcu();
	err = prefix_clear(pc, false);
	if (!err) {
		/* Blocks evictors claimed before our walk reached them are
		 * theirs to report: a second grace period waits for those
		 * reports (an evictor stays in one read-side section from
		 * its claim to its report), so no REMOVED of a block cached
		 * before the reset follows its CLEARED. */
		urcu_memb_synchronize_rcu();
		prefix_emit(pc, KVP_EVENT_CLEARED, NULL, 0, NULL);
	}
	/* Release: our CLEARED before the STOREDs of the commits that see
	 * the flag down (prefix_store_begin's acquire). */
	atomic_fetch_sub_explicit(&pc->resetting, 1, memory_order_release);
	return err;
}

#define mgr_check_fail(...)                                                  \
	do {                                                                 \
		fprintf(stderr, "kvp_manager_check: " __VA_ARGS__);          \
		err = -EFAULT;                                               \
	} while (0)

/* Checks live slot i (value v) of pc's table: in range, homed, and the
 * first entry of its hash a lookup finds.  0 or -EFAULT. */
static int check_slot(struct prefix_cache *pc, uint64_t i, uint64_t v)
{
	uint32_t b = ptable_slot_block(v);
	struct ptable_iter it;
	uint64_t w[4], key, found;
	int err = 0;

	hash_read(&pc->pp->blk[b], w);
	key = ptable_key(w);
	if (!ptable_slot_homed(pc->table, key, i) || !ptable_tag_is(v, key))
		mgr_check_fail("prefix slot %" PRIu64 " of block %u is not "
			       "in its hash's buckets\n",
			       i, b);
	ptable_iter_init(pc->table, key, &it);
	found = find_slot(pc, &it, ptable_iter_next(&it), w);
	if (found != v)
		mgr_check_fail("prefix block %u (slot %" PRIu64 ") cannot be "
			       "found by its hash\n",
			       b, i);
	return err;
}

int prefix_check_cache(struct prefix_cache *pc, uint64_t *nodes)
{
	uint64_t live = 0, pinned = 0;
	int err = 0;

	/* A manager without prefix caching has no table. */
	if (!pc->table)
		return 0;
	for (uint64_t i = 0; i < ptable_nslots(pc->table); i++) {
		uint64_t v = ptable_slot_at(pc->table, i);
		uint32_t b = ptable_slot_block(v);

		if (v && b >= pc->pool->num_blocks) {
			mgr_check_fail("prefix slot %" PRIu64
				       " holds block %u, out of range\n",
				       i, b);
			continue;
		}
		if (!slot_live(pc, v))
			continue;
		live++;
		pinned += retain_prio(atomic_load_explicit(
				  &pc->pp->blk[b].retain,
				  memory_order_relaxed)) == KVP_RETAIN_PIN;
		if (check_slot(pc, i, v))
			err = -EFAULT;
	}
	if (pinned != atomic_load_explicit(&pc->pinned, memory_order_relaxed) ||
	    pinned > pc->max_pinned)
		mgr_check_fail("%" PRIu64 " pinned blocks, counted %u, at "
			       "most %u\n",
			       pinned,
			       atomic_load_explicit(&pc->pinned,
						    memory_order_relaxed),
			       pc->max_pinned);
	if (live != atomic_load_explicit(&pc->cached, memory_order_relaxed))
		mgr_check_fail("the prefix table has %" PRIu64 " live entries, "
			       "counted %" PRIu64 " cached blocks\n",
			       live,
			       atomic_load_explicit(&pc->cached,
						    memory_order_relaxed));
	*nodes += live;
	return err;
}
