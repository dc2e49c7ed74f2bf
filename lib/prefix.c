/* SPDX-License-Identifier: MIT */
/*
 * prefix.c - the prefix cache: each manager's table hash -> block, and the
 * pool's list of evictable cached blocks.
 * Floor 5 of lib/ (doc/architecture.md, "Layers").
 *
 * Correctness argument.
 *
 * The pool keeps, per block, owner[b] (the manager caching b, or NULL) and
 * hash[b] (the hash b caches, four atomic words), together in one cache
 * line (struct prefix_block).  Each manager has an open-addressing table
 * (linear probing) of 64-bit slots: EMPTY, a TOMBSTONE, or {32-bit tag of
 * the hash's key, b + 1}.  Readers (hits) take no lock: inside an RCU
 * read-side section they load the table pointer and probe from the key's
 * home slot to the first EMPTY one.  Writers (commits, evictions, resets)
 * hold the manager's store lock.  A slot goes EMPTY -> entry -> TOMBSTONE
 * -> entry ...; an entry never moves, and a slot on the probe path of an
 * entry (from its home to it) never becomes EMPTY.  So an entry present
 * from a reader's start to its end is found: every slot between its home
 * and it stays non-EMPTY.  A deleted entry's slot, and the tombstones
 * before it, do go back to EMPTY when the slot after it is EMPTY: a probe
 * path has no EMPTY slot, so none continues through that slot, and none
 * crosses the slots made EMPTY (slot_forget).  A table full of tombstones
 * is replaced under the lock by a rebuilt copy (published with a release
 * store; the old one freed with call_rcu, after every reader that may
 * probe it is done).
 *
 * What a reader finds may be stale (the block evicted since, or an old
 * table): a slot is a hint, and the block's state word decides.  A cached
 * block carries CACHED (bstate.h).  Registration (prefix_store,
 * store lock, the caller holds the block): write hash[b] and owner[b],
 * set CACHED with a release CAS, then publish the slot (release).
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
 * CASes from CACHED|0.  A hit whose block was evicted and then cached
 * again (ABA: another registration, maybe under another hash or manager)
 * would see CACHED again, so after its CAS (acquire: pairs with the
 * registration's release) it checks owner[b] and hash[b] against what it
 * looked for; a mismatch drops the reference just taken, as any holder's
 * release, and reports a miss.  Once the CAS succeeded the hit holds b,
 * so b cannot be evicted and registered again before the check: what the
 * check reads is the registration whose CACHED the CAS saw (or a later one
 * after a reset, which the check then rejects or, same hash and manager,
 * rightly accepts).  hash[b] is read before the CAS too, to skip a CAS on
 * a wrong block; that read may race with a new registration (atomic words:
 * a torn value is only a mismatch), and the check after the CAS decides.
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
 * and unlinks nothing, so a failed allocation changes nothing.  After the
 * claims, per manager, it reports KVP_EVENT_REMOVED and only then, under
 * the store lock, turns the slots into tombstones and clears owner[]:
 * until then a commit of the same hash finds the slot and stores nothing,
 * so per hash, events are in order (a reset skips blocks no longer
 * CACHED: the evictor deletes their slots).  The evictor stays in one RCU
 * read-side section from before its claims to after its deletions, so a
 * manager being destroyed, which waits for a grace period after clearing
 * its table, outlives it.
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
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "conf.h"
#include "pool.h"
#include "prefix.h"
#include "rcu.h"
#include "stack.h"

#define KVP_UNLINKED 0xfffffffeu /* prev[b] of a block not in the list */

#ifdef KVP_FAULT_INJECTION
void (*prefix_take_hook)(struct prefix_cache *pc, uint32_t b);
#endif

/*
 * What the pool keeps per block for the prefix cache: hash[b], the hash
 * b caches (atomic words: a stale reader may read them while a new
 * registration writes them), and owner[b], the manager caching b (NULL
 * if none).  One cache line per block: a hit reads both, a registration
 * writes both and an eviction reads both, so that in a large pool each
 * costs one miss, not two (the 16 bytes of padding buy that).
 */
struct prefix_block {
	_Atomic uint64_t hash[4];
	_Atomic(struct prefix_cache *) owner;
	/* Its retention (retain_make()): 0 for the default priority.
	 * Written by commits (store lock), demotions (list lock) and
	 * evictions (the claimer); atomic, see "Retention" above. */
	_Atomic uint64_t retain;
} __attribute__((aligned(KVP_CACHELINE)));

/*
 * A retention word: the priority in the top 8 bits, the expiry (a time
 * of the owner's retention clock; 0: none) in the low 56.
 */
#define KVP_RETAIN_LEVELS (KVP_RETAIN_PIN + 1)
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
 * The reclaimer state of a pool (pool.h's struct pool_reclaimer): one per
 * pool, built by the first prefix cache over it.
 */
struct prefix_pool {
	struct kvp_pool *pool; /* immutable */
	/* blk[b]: hash[b] and owner[b], written by the registering thread
	 * before CACHED (release); owner cleared under the store lock when
	 * b's slot goes.  prev[b]: the evictable list's back links (lock).
	 * (The array pointers are read-only.) */
	struct prefix_block *blk;
	uint32_t *prev;
	/* level[b]: the list b is linked in, or was last (lock). */
	uint8_t *level;
	/* The evictable lists (lock), one per retention priority, least
	 * recently freed at each head, and the bitmap of the non-empty
	 * ones, on their own cache lines. */
	kvp_cacheline_aligned pthread_mutex_t lock;
	uint32_t nonempty;
	uint32_t head[KVP_RETAIN_LEVELS], tail[KVP_RETAIN_LEVELS];
	/* Set (under the lock, never cleared) once a block was committed
	 * above the default priority: until then releases read no
	 * retention word.  Relaxed: read under the lock. */
	_Atomic bool retained;
	/* Counts hits write (relaxed), on a line of their own: blocks in
	 * state CACHED|0 (see the argument above), and revivals by hits.
	 * Blocks released into the evictable state are not counted: they
	 * are evictable + revived + evictions + cleared. */
	kvp_cacheline_aligned _Atomic int64_t evictable;
	_Atomic uint64_t revived;
	/* Rare: evictions by allocations, evictable blocks a reset freed. */
	kvp_cacheline_aligned _Atomic uint64_t evictions;
	_Atomic uint64_t cleared;
};

/*
 * A manager's table.  Slots: EMPTY, TOMBSTONE, or {tag: 32, b + 1: 32}
 * (b < KVP_MAX_BLOCKS, so b + 1 is never 0: a low word of 0 marks the two
 * kinds of free slot).  The tag is the high half of the hash's key, and
 * its low bits are the home slot, so a rebuild re-homes an entry from the
 * slot alone (in order, without reading any block's hash), and tables
 * have at most 2^32 slots.
 */
#define SLOT_EMPTY 0ull
#define SLOT_TOMB (1ull << 32)
#define KVP_TABLE_MAX (1ull << 32) /* slots */

struct prefix_table {
	uint64_t mask;	      /* slots - 1; immutable */
	uint64_t live, dead;  /* entries, tombstones (store lock) */
	struct rcu_head rcu;
	_Atomic uint64_t slot[];
};

static inline struct prefix_pool *pool_prefix(struct kvp_pool *pool)
{
	/* Only prefix.c registers a reclaimer. */
	return pool_reclaimer_ctx(pool);
}

static inline bool slot_live(uint64_t v)
{
	return (uint32_t)v != 0;
}

static inline uint32_t slot_block(uint64_t v)
{
	return (uint32_t)v - 1;
}

static inline uint64_t slot_make(uint64_t key, uint32_t b)
{
	return (key & 0xffffffff00000000ull) | ((uint64_t)b + 1);
}

static inline bool slot_tag_is(uint64_t v, uint64_t key)
{
	return (v >> 32) == (key >> 32) && slot_live(v);
}

/* The home slot of a key (or of a live slot's entry). */
static inline uint64_t home_of(uint64_t key, uint64_t mask)
{
	return (key >> 32) & mask;
}

/* ------------------------------------------------------------------ */
/* Hashes                                                              */
/* ------------------------------------------------------------------ */

static inline void hash_words(const struct kvp_hash *h, uint64_t w[4])
{
	memcpy(w, h->b, 4 * sizeof(uint64_t));
}

/*
 * The table key's secret: 32 random bytes per process, drawn once, before
 * the first table exists (key_init, from prefix_cache_init; pthread_once
 * orders it before every use).
 *
 * Block hashes are public: vLLM-compatible ones with a known seed, or
 * SHA-256 of prompts a client chooses.  With a key anyone can compute,
 * a client could grind prompts whose blocks share a home slot and make
 * every probe walk one long chain (hash flooding).  Keyed, the home slot
 * and tag are unpredictable without the secret, which never leaves the
 * process.
 */
static uint64_t key_secret[4];
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static inline uint64_t mul_fold64(uint64_t a, uint64_t b)
{
	__uint128_t p = (__uint128_t)a * b;

	return (uint64_t)p ^ (uint64_t)(p >> 64);
}

/*
 * The table key of a hash: all its words, mixed with the secret (callers
 * may pass hashes of their own, not only uniform ones).  It is XXH3's
 * 17-to-32-byte path over the 32 bytes with key_secret as the first 32
 * bytes of its secret (so XXH3_64bits_withSecret on a little-endian
 * machine): two 64x64->128-bit multiplies of input words masked by
 * secret words, folded, then XXH3's avalanche.  Its high 32 bits are the
 * tag kept in the slot, and their low bits the home slot.
 */
static inline uint64_t key_of(const uint64_t w[4])
{
	uint64_t x = 32 * 0x9e3779b185ebca87ull;

	x += mul_fold64(w[0] ^ key_secret[0], w[1] ^ key_secret[1]);
	x += mul_fold64(w[2] ^ key_secret[2], w[3] ^ key_secret[3]);
	x ^= x >> 37;
	x *= 0x165667919e3779f9ull;
	x ^= x >> 32;
	return x;
}

static void key_init(void)
{
	unsigned char *p = (unsigned char *)key_secret;
	size_t got = 0;

	while (got < sizeof(key_secret)) {
		ssize_t r = getrandom(p + got, sizeof(key_secret) - got,
				      GRND_NONBLOCK);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got < sizeof(key_secret)) {
		/* No randomness yet (early boot, a sandbox without the
		 * syscall): the time, the process and an address, so that
		 * the key still differs from process to process. */
		struct timespec ts;
		uint64_t s;

		clock_gettime(CLOCK_REALTIME, &ts);
		s = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		s ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&got;
		for (int i = 0; i < 4; i++) {
			s += 0x9e3779b97f4a7c15ull; /* splitmix64 */
			key_secret[i] = mul_fold64(s ^ (s >> 30),
						   0xbf58476d1ce4e5b9ull) ^
					mul_fold64(s, 0x94d049bb133111ebull);
		}
	}
}

/* Relaxed: see the argument at the top (a torn read only mismatches). */
static inline bool hash_is(const struct prefix_pool *pp, uint32_t b,
			   const uint64_t w[4])
{
	const _Atomic uint64_t *h = pp->blk[b].hash;

	return atomic_load_explicit(&h[0], memory_order_relaxed) == w[0] &&
	       atomic_load_explicit(&h[1], memory_order_relaxed) == w[1] &&
	       atomic_load_explicit(&h[2], memory_order_relaxed) == w[2] &&
	       atomic_load_explicit(&h[3], memory_order_relaxed) == w[3];
}

static inline void hash_read(const struct prefix_pool *pp, uint32_t b,
			     uint64_t w[4])
{
	for (int i = 0; i < 4; i++)
		w[i] = atomic_load_explicit(&pp->blk[b].hash[i],
					    memory_order_relaxed);
}

static inline void hash_write(struct prefix_pool *pp, uint32_t b,
			      const uint64_t w[4])
{
	for (int i = 0; i < 4; i++)
		atomic_store_explicit(&pp->blk[b].hash[i], w[i],
				      memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* The evictable list (pp->lock held)                                  */
/* ------------------------------------------------------------------ */

/* Relaxed next[] accesses: under the lock, on blocks no free list has. */
static uint32_t link_next(struct kvp_pool *pool, uint32_t b)
{
	return atomic_load_explicit(&pool->next[b], memory_order_relaxed);
}

static void set_next(struct kvp_pool *pool, uint32_t b, uint32_t v)
{
	atomic_store_explicit(&pool->next[b], v, memory_order_relaxed);
}

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

/*
 * The list lock (and a manager's store lock) spins a little before it
 * sleeps (glibc's adaptive mutex):
 * it is held for a few hundred nanoseconds per release, and a waiter
 * that goes straight to futex() sleeps, and is woken, for far longer
 * than that (the ChangeLog of 2026-11-22 has the futex counts).
 */
static int list_lock_init(pthread_mutex_t *mu)
{
	pthread_mutexattr_t a;
	int r;

	if ((r = pthread_mutexattr_init(&a)) != 0)
		return r;
#ifdef __GLIBC__
	(void)pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
	r = pthread_mutex_init(mu, &a);
	pthread_mutexattr_destroy(&a);
	return r;
}

static void pp_lock(struct prefix_pool *pp)
{
	kvp_check_pthread(pthread_mutex_lock(&pp->lock));
}

static void pp_unlock(struct prefix_pool *pp)
{
	kvp_check_pthread(pthread_mutex_unlock(&pp->lock));
}

/*
 * A manager's event lock orders its events with the map changes they
 * report (STORED with its insertions, REMOVED with its deletions, CLEARED
 * with a reset), so that per hash the callback sees them in the order the
 * map changed.  Taken only when a callback is set: without one there is
 * nothing to order.  Lock order: event lock, then the list lock.
 */
static void event_lock(struct prefix_cache *pc)
{
	if (pc->event_cb)
		kvp_check_pthread(pthread_mutex_lock(&pc->event_lock));
}

static void event_unlock(struct prefix_cache *pc)
{
	if (pc->event_cb)
		kvp_check_pthread(pthread_mutex_unlock(&pc->event_lock));
}

void prefix_events_begin(struct prefix_cache *pc)
{
	event_lock(pc);
}

void prefix_events_end(struct prefix_cache *pc)
{
	event_unlock(pc);
}

/* ------------------------------------------------------------------ */
/* Pool side                                                           */
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

/* Up to KVP_EVENT_BATCH hashes of one manager per REMOVED event. */
#define KVP_EVENT_BATCH 16

/* Adds v to a counter the store lock serialises (stats read it relaxed):
 * a load and a store, no read-modify-write. */
static void store_count(_Atomic uint64_t *ctr, int64_t v)
{
	atomic_store_explicit(
		ctr,
		atomic_load_explicit(ctr, memory_order_relaxed) + (uint64_t)v,
		memory_order_relaxed);
}

static void store_lock(struct prefix_cache *pc)
{
	kvp_check_pthread(pthread_mutex_lock(&pc->store_lock));
}

static void store_unlock(struct prefix_cache *pc)
{
	kvp_check_pthread(pthread_mutex_unlock(&pc->store_lock));
}

static struct prefix_table *table_of(struct prefix_cache *pc)
{
	/* Acquire: the slots as initialised before the table's publication
	 * (readers); under the store lock the lock orders it anyway. */
	return atomic_load_explicit(&pc->table, memory_order_acquire);
}

static void table_delete(struct prefix_cache *pc, struct prefix_pool *pp,
			 uint32_t b, uint64_t key);

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

/*
 * The first run of one manager's blocks among the n claimed in ids
 * (ours: uncached, held once): reported, then deleted from its table,
 * under its event lock (see the argument at the top).  Each stage asks
 * for the lines of the next one first (owner and hash, then table
 * slots): the blocks are scattered, and their misses overlap.  Returns
 * the run's length (at most KVP_EVENT_BATCH).  In a read-side section.
 */
static uint32_t evict_forget(struct prefix_pool *pp, const uint32_t *ids,
			     uint32_t n)
{
	struct kvp_hash hashes[KVP_EVENT_BATCH];
	uint64_t keys[KVP_EVENT_BATCH];
	const struct prefix_table *t;
	struct prefix_cache *pc;
	uint32_t k = 0, end = n < KVP_EVENT_BATCH ? n : KVP_EVENT_BATCH;

	for (uint32_t j = 0; j < end; j++)
		__builtin_prefetch(&pp->blk[ids[j]], 0);
	/* Acquire: the manager and hash as their registrar wrote them (the
	 * blocks are ours now: nobody else writes them). */
	pc = atomic_load_explicit(&pp->blk[ids[0]].owner, memory_order_acquire);
	/* Only to prefetch slots: a rebuild may replace it. */
	t = table_of(pc);
	while (k < end && atomic_load_explicit(&pp->blk[ids[k]].owner,
					       memory_order_relaxed) == pc) {
		uint64_t w[4];

		hash_read(pp, ids[k], w);
		memcpy(hashes[k].b, w, sizeof(w));
		keys[k] = key_of(w);
		__builtin_prefetch(&t->slot[home_of(keys[k], t->mask)], 1);
		k++;
	}
	event_lock(pc);
	prefix_emit(pc, KVP_EVENT_REMOVED, hashes, k, NULL);
	store_lock(pc);
	for (uint32_t j = 0; j < k; j++)
		table_delete(pc, pp, ids[j], keys[j]);
	store_count(&pc->evictions, k);
	store_unlock(pc);
	event_unlock(pc);
	return k;
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
	 * and owner[] go below. */
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
		i += evict_forget(pp, ids + i, got - i);
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
static const struct pool_reclaimer prefix_reclaimer = {
	.idle = prefix_release,
	.reclaim = prefix_evict,
	.evictable = prefix_evictable,
	.stats = prefix_stats,
	.check = prefix_check_pool,
	.fini = prefix_pool_free,
};

/* ------------------------------------------------------------------ */
/* Manager side: the table                                             */
/* ------------------------------------------------------------------ */

#define KVP_TABLE_MIN 64ull /* slots */

static size_t table_bytes(uint64_t slots)
{
	return sizeof(struct prefix_table) + slots * sizeof(uint64_t);
}

/* A table of `slots` EMPTY slots (a power of two), or NULL. */
static struct prefix_table *table_new(uint64_t slots)
{
	struct prefix_table *t = kvp_malloc(table_bytes(slots));

	if (!t)
		return NULL;
	/* Probed at random: huge pages spare a TLB miss per probe. */
	kvp_advise_huge(t, table_bytes(slots));
	/* Written, not calloc'd: a fresh page first read (a probe) maps the
	 * shared zero page, and the write after it must flush that mapping
	 * from every CPU running the process (an IPI each, in a VM several
	 * microseconds).  Zeroes are EMPTY slots. */
	memset(t, 0, table_bytes(slots));
	t->mask = slots - 1;
	return t;
}

static void table_free(struct prefix_table *t)
{
	if (t)
		kvp_free(t, table_bytes(t->mask + 1));
}

static void table_free_rcu(struct rcu_head *head)
{
	struct prefix_table *t =
		caa_container_of(head, struct prefix_table, rcu);

	kvp_rcu_reclaim_head(head);
	table_free(t);
	kvp_rcu_callback_done();
}

/*
 * A manager's table has, for its whole life, the slots it may ever need:
 * it caches at most every block of the pool, and prefix_slots_per_block
 * slots per block (conf.h: 4 or more, 4 by default; rounded up to a power
 * of two, at least 64, at most 2^32) keep it at most a quarter full of
 * entries, half full with tombstones.  Sized up front, it never grows: a
 * commit never waits for a resize, which for millions of entries takes a
 * good part of a second (faulting the new table's pages in).  Rebuilds
 * only clear deleted entries.
 */
static uint64_t table_slots(const struct prefix_cache *pc)
{
	uint64_t n = KVP_TABLE_MIN,
		 per = conf_val(conf_get(), PREFIX_SLOTS_PER_BLOCK);

	while (n < per * pc->pool->num_blocks && n < KVP_TABLE_MAX)
		n <<= 1;
	return n;
}

/* Whether one more entry or tombstone would leave t more than
 * limit8 / 8 full. */
static bool table_too_full(const struct prefix_table *t, uint64_t limit8)
{
	return (t->live + t->dead + 1) * 8 > (t->mask + 1) * limit8;
}

/* Where b's entry is in t (store lock; key: of b's hash), or -1. */
static int64_t table_find_block(const struct prefix_table *t, uint32_t b,
				uint64_t key)
{
	uint64_t i = home_of(key, t->mask);

	for (uint64_t probes = 0; probes <= t->mask; probes++) {
		uint64_t v = atomic_load_explicit(&t->slot[i],
						  memory_order_relaxed);

		if (v == SLOT_EMPTY)
			break;
		if (slot_live(v) && slot_block(v) == b)
			return (int64_t)i;
		i = (i + 1) & t->mask;
	}
	return -1;
}

/*
 * Turns slot i of t, b's entry, into a free slot and forgets b's owner
 * (store lock).  The slot becomes a tombstone, unless the slot after it
 * is EMPTY: then no entry's probe path crosses slot i (a path from an
 * entry's home to the entry has no EMPTY slot, so it cannot continue
 * through slot i + 1), and slot i, with the tombstones just before it,
 * go back to EMPTY (see the argument at the top).  In a table at most
 * half full most deletions end so, and tombstones, and the rebuilds that
 * clear them, stay rare under churn.
 */
static void slot_forget(struct prefix_cache *pc, struct prefix_table *t,
			struct prefix_pool *pp, uint64_t i, uint32_t b)
{
	uint64_t w;

	t->live--;
	store_count(&pc->cached, -1);
	atomic_store_explicit(&pp->blk[b].owner, NULL, memory_order_relaxed);
	/* An uncached block has the default priority; a pin goes with it.
	 * No CAS: the word's other writers are excluded here (a raise by
	 * our store lock; a demotion because b is claimed, so on no list,
	 * or, in prefix_clear, by the list lock).  Relaxed: the word orders
	 * nothing but itself. */
	w = atomic_load_explicit(&pp->blk[b].retain, memory_order_relaxed);
	if (w) {
		atomic_store_explicit(&pp->blk[b].retain, 0,
				      memory_order_relaxed);
		if (retain_prio(w) == KVP_RETAIN_PIN)
			atomic_fetch_sub_explicit(&pc->pinned, 1,
						  memory_order_relaxed);
	}
	/* Relaxed stores: a reader that reads the old entry is stale anyway
	 * (the state word decides), and one that reads EMPTY stops where
	 * nothing it may look for lies beyond. */
	if (atomic_load_explicit(&t->slot[(i + 1) & t->mask],
				 memory_order_relaxed) != SLOT_EMPTY) {
		atomic_store_explicit(&t->slot[i], SLOT_TOMB,
				      memory_order_relaxed);
		t->dead++;
		return;
	}
	atomic_store_explicit(&t->slot[i], SLOT_EMPTY, memory_order_relaxed);
	for (i = (i - 1) & t->mask;
	     atomic_load_explicit(&t->slot[i], memory_order_relaxed) ==
	     SLOT_TOMB;
	     i = (i - 1) & t->mask) {
		atomic_store_explicit(&t->slot[i], SLOT_EMPTY,
				      memory_order_relaxed);
		t->dead--;
	}
}

/* Deletes b's entry from the manager's table (store lock; key: of b's hash). */
static void table_delete(struct prefix_cache *pc, struct prefix_pool *pp,
			 uint32_t b, uint64_t key)
{
	struct prefix_table *t = table_of(pc);
	int64_t i = table_find_block(t, b, key);

	if (i < 0)
		kvp_fatal("a cached block's slot was missing");
	slot_forget(pc, t, pp, (uint64_t)i, b);
}

/* Puts live slot value v into a fresh table (no tombstones, nothing else
 * writing it). */
static void table_place(struct prefix_table *t, uint64_t v)
{
	uint64_t i = home_of(v, t->mask);

	while (atomic_load_explicit(&t->slot[i], memory_order_relaxed) !=
	       SLOT_EMPTY)
		i = (i + 1) & t->mask;
	atomic_store_explicit(&t->slot[i], v, memory_order_relaxed);
	t->live++;
}

/*
 * Replaces the manager's table by a copy without tombstones (store lock).  Readers
 * go on probing the old one until they are done.  Returns 0 or -ENOMEM
 * (the old table stays).
 */
static int table_rebuild(struct prefix_cache *pc)
{
	struct prefix_table *old = table_of(pc),
			    *t = table_new(old->mask + 1);

	if (!t)
		return -ENOMEM;
	/* In slot order: the writes go to a few sequential streams. */
	for (uint64_t i = 0; i <= old->mask; i++) {
		uint64_t v = atomic_load_explicit(&old->slot[i],
						  memory_order_relaxed);

		if (slot_live(v))
			table_place(t, v);
	}
	/* Release: the slots before the pointer (table_of's acquire). */
	atomic_store_explicit(&pc->table, t, memory_order_release);
	kvp_rcu_call(&old->rcu, table_free_rcu);
	return 0;
}

int prefix_cache_init(struct prefix_cache *pc, struct kvp_pool *pool,
		      uint32_t max_pinned)
{
	struct prefix_table *t;
	int err;

	kvp_check_pthread(pthread_once(&key_once, key_init));
	memset(pc, 0, sizeof(*pc));
	pc->pool = pool;
	pc->block_tokens = pool->block_tokens;
	pc->max_pinned = max_pinned;
	atomic_init(&pc->cached, 0);
	atomic_init(&pc->evictions, 0);
	atomic_init(&pc->retain_now, 0);
	atomic_init(&pc->retain_next, UINT64_MAX);
	atomic_init(&pc->pinned, 0);
	if (pthread_mutex_init(&pc->event_lock, NULL) != 0)
		return -ENOMEM;
	/* Adaptive as the list lock (see list_lock_init): commits hold it
	 * for a few microseconds, evictions for less. */
	if (list_lock_init(&pc->store_lock) != 0) {
		pthread_mutex_destroy(&pc->event_lock);
		return -ENOMEM;
	}
	t = table_new(table_slots(pc));
	err = t ? pool_set_reclaimer(pool, &prefix_reclaimer, prefix_pool_make)
		: -ENOMEM;
	if (err) {
		table_free(t);
		pthread_mutex_destroy(&pc->store_lock);
		pthread_mutex_destroy(&pc->event_lock);
		return err;
	}
	atomic_init(&pc->table, t);
	return 0;
}

void prefix_cache_fini(struct prefix_cache *pc)
{
	struct prefix_table *t = atomic_load_explicit(&pc->table,
						      memory_order_relaxed);

	if (!t)
		return;
	/* Parked references are held ones: dropped first, so that the
	 * blocks they hold go back to the pool now. */
	(void)pool_unpark_all(pc->pool);
	(void)prefix_clear(pc, true);
	/* Wait for evictors still deleting our slots (see the top), then
	 * for old tables' reclamation. */
	urcu_memb_synchronize_rcu();
	kvp_rcu_barrier();
	t = atomic_load_explicit(&pc->table, memory_order_relaxed);
	if (t->live != 0)
		kvp_fatal("a destroyed manager's prefix table is not empty");
	table_free(t);
	atomic_store_explicit(&pc->table, NULL, memory_order_relaxed);
	pthread_mutex_destroy(&pc->store_lock);
	pthread_mutex_destroy(&pc->event_lock);
}

void prefix_set_event_sink(struct prefix_cache *pc, kvp_event_cb cb,
			   void *arg)
{
	pc->event_cb = cb;
	pc->event_arg = cb ? arg : NULL;
}

void prefix_cache_stats(struct prefix_cache *pc, struct kvp_stats *st)
{
	/* Relaxed: statistics. */
	st->retention_clock =
		atomic_load_explicit(&pc->retain_now, memory_order_relaxed);
	st->prefix_cached_blocks =
		atomic_load_explicit(&pc->cached, memory_order_relaxed);
	st->prefix_evictions =
		atomic_load_explicit(&pc->evictions, memory_order_relaxed);
	st->prefix_pinned =
		atomic_load_explicit(&pc->pinned, memory_order_relaxed);
	st->events = atomic_load_explicit(&pc->event_seq, memory_order_relaxed);
}

/*
 * Read side: the first entry of t from `from` on whose tag is key's; its
 * slot in *at.  KVP_NIL at an EMPTY slot (a miss).
 */
static uint32_t probe_tag(const struct prefix_table *t, uint64_t key,
			  uint64_t from, uint64_t *at)
{
	uint64_t i = from;

	for (uint64_t probes = 0; probes <= t->mask; probes++) {
		/* Acquire: the block's hash as its registrar wrote it
		 * (pairs with prefix_store's release). */
		uint64_t v = atomic_load_explicit(&t->slot[i],
						  memory_order_acquire);

		if (v == SLOT_EMPTY)
			break;
		if (slot_tag_is(v, key)) {
			*at = i;
			return slot_block(v);
		}
		i = (i + 1) & t->mask;
	}
	return KVP_NIL;
}

/* Read side: the block whose slot in t holds the hash w, or KVP_NIL. */
static uint32_t lookup(const struct prefix_table *t,
		       const struct prefix_pool *pp, uint64_t key,
		       const uint64_t w[4], uint32_t b, uint64_t at)
{
	/* b at slot `at`: the first candidate, found by probe_tag. */
	while (b != KVP_NIL && !hash_is(pp, b, w))
		b = probe_tag(t, key, (at + 1) & t->mask, &at);
	return b;
}

/*
 * Read side: a reference on b if it is cached by m under hash w;
 * *revived counts the blocks it took from zero.
 */
static bool take_one(struct prefix_cache *pc, struct prefix_pool *pp,
		     struct tcache *tc, uint32_t b, const uint64_t w[4],
		     uint32_t *revived)
{
	struct kvp_pool *pool = pc->pool;
	uint32_t s;

	if (tc && tcache_parks(tc, b) && tcache_unpark(tc, b)) {
		/* Our own parked reference, taken back with no atomic on the
		 * state word (pool.c).  We held b all along, so it is the
		 * block we cached, unless a forced clear uncached it since
		 * (relaxed reads: our hold orders them). */
		if (pool_block_cached(pool, b) &&
		    atomic_load_explicit(&pp->blk[b].owner,
					 memory_order_relaxed) == pc &&
		    hash_is(pp, b, w))
			return true;
		(void)kvp_pool_free(pool, &b, 1);
		return false;
	}
#ifdef KVP_FAULT_INJECTION
	if (prefix_take_hook)
		prefix_take_hook(pc, b);
#endif
	/* Acquires the block's data, owner and hash as published by its
	 * registration and its holders' releases; releases our earlier
	 * reads of hash[b] before an eviction's claim (which must follow
	 * our release of the block). */
	if (!pool_block_revive(pool, b, &s))
		return false;
	*revived += !bstate_held(s);
	if (atomic_load_explicit(&pp->blk[b].owner, memory_order_relaxed) != pc ||
	    !hash_is(pp, b, w)) {
		/* ABA: evicted and cached again under another hash. */
		(void)kvp_pool_free(pool, &b, 1);
		return false;
	}
	return true;
}

#define KVP_TAKE_CHUNK 32

uint32_t prefix_take(struct prefix_cache *pc, const struct kvp_hash *hashes,
		     uint32_t n, uint32_t *blocks)
{
	struct kvp_pool *pool = pc->pool;
	struct prefix_pool *pp = pool_prefix(pool);
	/* The calling thread's cache, where its parked references are (if
	 * it has one already: a hit creates none). */
	struct tcache *tc = tcache_last_is(&pool->depot) ? tcache_last.tc : NULL;
	const struct prefix_table *t;
	uint64_t key[KVP_TAKE_CHUNK], at[KVP_TAKE_CHUNK];
	uint32_t cand[KVP_TAKE_CHUNK];
	uint32_t i = 0, revived = 0;

	kvp_rcu_read_lock();
	t = table_of(pc);
	/* In chunks, in three passes, so that the cache misses of a chunk
	 * overlap: the keys (prefetching their home slots), the probes
	 * (prefetching each candidate's hash and, for writing, its state
	 * word: lines other threads may hold), then the checks and CASes. */
	while (i < n) {
		uint32_t k = n - i < KVP_TAKE_CHUNK ? n - i : KVP_TAKE_CHUNK;
		uint32_t j;

		for (j = 0; j < k; j++) {
			uint64_t w[4];

			hash_words(&hashes[i + j], w);
			key[j] = key_of(w);
			__builtin_prefetch(&t->slot[home_of(key[j], t->mask)],
					   0);
		}
		for (j = 0; j < k; j++) {
			cand[j] = probe_tag(t, key[j],
					    home_of(key[j], t->mask), &at[j]);
			if (cand[j] == KVP_NIL)
				break;
			__builtin_prefetch(&pp->blk[cand[j]], 0);
			pool_block_prefetch_w(pool, cand[j]);
		}
		k = j; /* a miss ends the prefix */
		for (j = 0; j < k; j++) {
			uint64_t w[4];
			uint32_t b;

			hash_words(&hashes[i + j], w);
			b = lookup(t, pp, key[j], w, cand[j], at[j]);
			if (b == KVP_NIL ||
			    !take_one(pc, pp, tc, b, w, &revived))
				break;
			blocks[i + j] = b;
		}
		i += j;
		if (j < KVP_TAKE_CHUNK)
			break; /* a miss (or the end) */
	}
	kvp_rcu_read_unlock();
	/* One update for the whole prefix: a line other threads share. */
	if (revived) {
		atomic_fetch_sub_explicit(&pp->evictable, revived,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&pp->revived, revived,
					  memory_order_relaxed);
	}
	return i;
}

uint32_t prefix_match(struct prefix_cache *pc, const struct kvp_hash *hashes,
		      uint32_t n)
{
	struct kvp_pool *pool = pc->pool;
	struct prefix_pool *pp = pool_prefix(pool);
	const struct prefix_table *t;
	uint32_t i;

	kvp_rcu_read_lock();
	t = table_of(pc);
	for (i = 0; i < n; i++) {
		uint64_t w[4], key, at;
		uint32_t b;

		hash_words(&hashes[i], w);
		key = key_of(w);
		b = probe_tag(t, key, home_of(key, t->mask), &at);
		b = lookup(t, pp, key, w, b, at);
		/* Relaxed: advice, read as take_one reads before its CAS
		 * (every word atomic; a stale one is a miss or a hit that
		 * a later call may not find). */
		if (b == KVP_NIL || !pool_block_cached(pool, b) ||
		    atomic_load_explicit(&pp->blk[b].owner,
					 memory_order_relaxed) != pc)
			break;
	}
	kvp_rcu_read_unlock();
	return i;
}

void prefix_store_begin(struct prefix_cache *pc)
{
	event_lock(pc);
	store_lock(pc);
}

void prefix_store_end(struct prefix_cache *pc)
{
	store_unlock(pc);
	event_unlock(pc);
}

uint64_t prefix_store_prepare(struct prefix_cache *pc, uint32_t b,
			      const struct kvp_hash *h)
{
	/* Relaxed: only an address; the lock holder's table. */
	struct prefix_table *t =
		atomic_load_explicit(&pc->table, memory_order_relaxed);
	struct prefix_pool *pp = pool_prefix(pc->pool);
	uint64_t w[4], key;

	hash_words(h, w);
	key = key_of(w);
	__builtin_prefetch(&t->slot[home_of(key, t->mask)], 1);
	__builtin_prefetch(&pp->blk[b], 1);
	pool_block_prefetch_w(pc->pool, b);
	return key;
}

/*
 * Retention, the manager side (store lock held).  A pin is counted in
 * pc->pinned from the moment a word with the pin priority is written to
 * the moment it is replaced (whoever replaces it uncounts it: a commit
 * here, a demotion, an eviction or reset in slot_forget), so the cap
 * is checked against the words, expired ones included until their
 * demotion.
 */
static void retain_mark(struct prefix_pool *pp)
{
	/* Once per pool: the lock orders it before every later release's
	 * read (lock order: store lock, list lock). */
	if (atomic_load_explicit(&pp->retained, memory_order_relaxed))
		return;
	pp_lock(pp);
	atomic_store_explicit(&pp->retained, true, memory_order_relaxed);
	pp_unlock(pp);
}

/* Whether one more block may be pinned (then counted), else one more is
 * refused in *unpinned. */
static bool pin_admit(struct prefix_cache *pc, uint32_t *unpinned)
{
	/* Relaxed: a count; the store lock serialises the increments. */
	if (atomic_load_explicit(&pc->pinned, memory_order_relaxed) <
	    pc->max_pinned) {
		atomic_fetch_add_explicit(&pc->pinned, 1, memory_order_relaxed);
		return true;
	}
	(*unpinned)++;
	return false;
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
	retain_mark(pp);
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

int prefix_retention(struct prefix_cache *pc, const struct kvp_hash *h,
		     uint32_t *prio, uint64_t *expires)
{
	struct prefix_pool *pp = pool_prefix(pc->pool);
	const struct prefix_table *t;
	uint64_t w[4], key, at = 0, word = 0, now;
	uint32_t b;

	hash_words(h, w);
	key = key_of(w);
	kvp_rcu_read_lock();
	t = table_of(pc);
	b = probe_tag(t, key, home_of(key, t->mask), &at);
	b = lookup(t, pp, key, w, b, at);
	/* A snapshot: the block may be evicted or raised right after. */
	if (b != KVP_NIL &&
	    atomic_load_explicit(&pp->blk[b].owner, memory_order_relaxed) ==
		    pc)
		word = atomic_load_explicit(&pp->blk[b].retain,
					    memory_order_relaxed);
	kvp_rcu_read_unlock();
	if (b == KVP_NIL)
		return -ENOENT;
	now = atomic_load_explicit(&pc->retain_now, memory_order_relaxed);
	*prio = retain_level(word, now);
	*expires = *prio == KVP_RETAIN_DEFAULT ? 0 : retain_expiry(word);
	return 0;
}

int prefix_store(struct prefix_cache *pc, uint32_t b, const struct kvp_hash *h,
		 uint64_t key, uint64_t retain, uint32_t *unpinned)
{
	struct kvp_pool *pool = pc->pool;
	struct prefix_pool *pp = pool_prefix(pool);
	struct prefix_table *t = table_of(pc);
	uint64_t w[4], i, tomb = UINT64_MAX;

	/* Relaxed: owner[] of a block the manager's sequences hold changes only under
	 * the manager's store lock, which we hold. */
	if (atomic_load_explicit(&pp->blk[b].owner, memory_order_relaxed))
		return 0; /* a fork's sibling registered it */
	if (table_too_full(t, 4)) {
		/* Half full, tombstones included (entries alone never are):
		 * rebuild without them.  Without memory, go on up to 7/8
		 * full (probes must meet an EMPTY slot). */
		if (table_rebuild(pc) == 0)
			t = table_of(pc);
		else if (table_too_full(t, 7))
			return -ENOMEM;
	}
	hash_words(h, w);
	i = home_of(key, t->mask);
	for (;;) {
		uint64_t v = atomic_load_explicit(&t->slot[i],
						  memory_order_relaxed);

		if (v == SLOT_EMPTY)
			break;
		if (v == SLOT_TOMB) {
			if (tomb == UINT64_MAX)
				tomb = i;
		} else if (slot_tag_is(v, key) &&
			   hash_is(pp, slot_block(v), w)) {
			return 2; /* another block caches h: no merge */
		}
		i = (i + 1) & t->mask;
	}
	if (tomb != UINT64_MAX) {
		i = tomb;
		t->dead--;
	}
	if (retain_prio(retain) == KVP_RETAIN_PIN && !pin_admit(pc, unpinned))
		retain = retain_make(KVP_RETAIN_MAX, retain_expiry(retain));
	if (retain)
		retain_mark(pp);
	hash_write(pp, b, w);
	atomic_store_explicit(&pp->blk[b].owner, pc, memory_order_relaxed);
	/* Relaxed: ordered before CACHED by the release below. */
	atomic_store_explicit(&pp->blk[b].retain, retain, memory_order_relaxed);
	/* Releases hash[b], owner[b] and the block's data before CACHED
	 * (pairs with take_one's revive). */
	pool_block_cache(pool, b);
	/* Release: hash[b] before the entry (probe_tag's acquire). */
	atomic_store_explicit(&t->slot[i], slot_make(key, b),
			      memory_order_release);
	t->live++;
	store_count(&pc->cached, 1);
	return 1;
}

int prefix_clear(struct prefix_cache *pc, bool force)
{
	struct kvp_pool *pool = pc->pool;
	struct prefix_pool *pp = pool_prefix(pool);
	struct prefix_table *t;
	uint32_t first = KVP_NIL, last = KVP_NIL, nfreed = 0;

	store_lock(pc);
	pp_lock(pp);
	t = table_of(pc);
	for (uint64_t i = 0; !force && i <= t->mask; i++) {
		uint64_t v = atomic_load_explicit(&t->slot[i],
						  memory_order_relaxed);
		uint32_t s;

		if (!slot_live(v))
			continue;
		s = pool_block_word(pool, slot_block(v));
		/* Held; or not CACHED: an evictor's, which has yet to report
		 * it removed (a CLEARED now would come before that REMOVED). */
		if (bstate_refs(s)) {
			pp_unlock(pp);
			store_unlock(pc);
			return -EBUSY;
		}
	}
	for (uint64_t i = 0; i <= t->mask; i++) {
		uint64_t v = atomic_load_explicit(&t->slot[i],
						  memory_order_relaxed);
		uint32_t b, s;

		if (!slot_live(v))
			continue;
		b = slot_block(v);
		/* A racing hit may take a reference until our uncache: then
		 * the block stays with its holder, uncached (the hit's check
		 * sees owner cleared and drops it).  An evictable block
		 * becomes an ordinary free one (the uncache acquires its
		 * releasers' writes; our push below releases them).  CACHED
		 * only changes under the list lock we hold, and an evictor's
		 * claim never outlives it, so a refusal is an evictor that
		 * took b: it deletes the slot. */
		s = pool_block_uncache(pool, b);
		if (s == UINT32_MAX)
			continue;
		list_unlink(pool, pp, b);
		slot_forget(pc, t, pp, i, b);
		if (bstate_refs(s) == 0) {
			atomic_fetch_sub_explicit(&pp->evictable, 1,
						  memory_order_relaxed);
			atomic_fetch_add_explicit(&pp->cleared, 1,
						  memory_order_relaxed);
			/* On no list: chain it for the free stack. */
			set_next(pool, b, first);
			if (first == KVP_NIL)
				last = b;
			first = b;
			nfreed++;
		}
	}
	pp_unlock(pp);
	/* The tombstones stay until a commit finds the table half full. */
	store_unlock(pc);
	/* Free all along (evictable, then on the stack): one push, and
	 * neither an allocation nor a free for the pool's counts. */
	if (nfreed)
		stack_push_chain(&pool->stack, pool->next, first, last,
				 nfreed);
	return 0;
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
	if (!pc->event_cb)
		return;
	if (ev->type == KVP_EVENT_STORED) {
		ev->block_tokens = pc->block_tokens;
		ev->num_tokens = ev->nhashes * pc->block_tokens;
	}
	/* The event lock is held: seq numbers the calls in order. */
	ev->seq = atomic_load_explicit(&pc->event_seq, memory_order_relaxed);
	/* Relaxed: only the statistics read it outside the lock. */
	atomic_store_explicit(&pc->event_seq, ev->seq + 1,
			      memory_order_relaxed);
	ev->medium = pc->event_medium[0] ? pc->event_medium : NULL;
	pc->event_cb(ev, pc->event_arg);
}

void prefix_emit(struct prefix_cache *pc, enum kvp_event_type type,
		 const struct kvp_hash *hashes, uint32_t n,
		 const struct kvp_hash *parent)
{
	struct kvp_event ev;

	if (!pc->event_cb)
		return;
	prefix_event_init(&ev, type, hashes, n, parent);
	prefix_emit_event(pc, &ev);
}

#define mgr_check_fail(...)                                                  \
	do {                                                                 \
		fprintf(stderr, "kvp_manager_check: " __VA_ARGS__);          \
		err = -EFAULT;                                               \
	} while (0)

int prefix_check_cache(struct prefix_cache *pc, uint64_t *nodes)
{
	struct kvp_pool *pool = pc->pool;
	struct prefix_pool *pp;
	struct prefix_table *t;
	uint64_t live = 0, dead = 0, pinned = 0;
	int err = 0;

	/* A manager without prefix caching has no table (nor pool here). */
	if (!atomic_load_explicit(&pc->table, memory_order_relaxed))
		return 0;
	pp = pool_prefix(pool);
	store_lock(pc);
	t = table_of(pc);
	for (uint64_t i = 0; i <= t->mask; i++) {
		uint64_t v = atomic_load_explicit(&t->slot[i],
						  memory_order_relaxed);
		uint64_t w[4], key, at = 0;
		uint32_t b, first, found;

		if (v == SLOT_TOMB)
			dead++;
		if (!slot_live(v))
			continue;
		live++;
		b = slot_block(v);
		if (b >= pool->num_blocks) {
			mgr_check_fail("prefix slot %" PRIu64
				       " holds block %u, out of range\n",
				       i, b);
			continue;
		}
		if (atomic_load_explicit(&pp->blk[b].owner,
					 memory_order_relaxed) != pc ||
		    !pool_block_cached(pool, b))
			mgr_check_fail("prefix block %u is not cached by its "
				       "manager\n",
				       b);
		pinned += retain_prio(atomic_load_explicit(
				  &pp->blk[b].retain, memory_order_relaxed)) ==
			  KVP_RETAIN_PIN;
		/* Reachable from its home, and the first of its hash. */
		hash_read(pp, b, w);
		key = key_of(w);
		if (slot_make(key, b) != v)
			mgr_check_fail("prefix slot %" PRIu64
				       ": the tag is not block %u's\n",
				       i, b);
		first = probe_tag(t, key, home_of(key, t->mask), &at);
		found = lookup(t, pp, key, w, first, at);
		if (found != b)
			mgr_check_fail("prefix block %u (slot %" PRIu64
				       ") cannot be found by its hash: %u "
				       "found (at %" PRIu64 ")\n",
				       b, i, found, at);
	}
	if (pinned != atomic_load_explicit(&pc->pinned, memory_order_relaxed) ||
	    pinned > pc->max_pinned)
		mgr_check_fail("%" PRIu64 " pinned blocks, counted %u, at "
			       "most %u\n",
			       pinned,
			       atomic_load_explicit(&pc->pinned,
						    memory_order_relaxed),
			       pc->max_pinned);
	if (live != t->live || dead != t->dead)
		mgr_check_fail("prefix table counts %" PRIu64 " entries, %" PRIu64
			       " tombstones; found %" PRIu64 ", %" PRIu64 "\n",
			       t->live, t->dead, live, dead);
	store_unlock(pc);
	*nodes += live;
	return err;
}
