/* SPDX-License-Identifier: MIT */
/*
 * prefix.c - the prefix cache as managers use it: each manager's table
 * hash -> block (keys, probes, deletions, rebuilds), hits, commits,
 * resets, evictions' deletions, the events, the reclaimer it registers
 * and the check of its table.  The pool side (the blocks' hashes and
 * owners, the evictable lists, retention) is prefix_pool.c's.
 * Floor 5 of lib/ (doc/architecture.md, "Layers"), over prefix_pool.c.
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
 * The state word decides every race on a cached block, as one CAS
 * (prefix_pool.c lists them): a hit revives CACHED|r to CACHED|r+1,
 * lock-free, and an evictor claims CACHED|0 to CACHED|EVICTING, so a
 * revival and an eviction of one block cannot both win.  A hit whose
 * block was evicted and then cached again (ABA: another registration,
 * maybe under another hash or manager) would see CACHED again, so after
 * its CAS (acquire: pairs with the registration's release) it checks
 * owner[b] and hash[b] against what it looked for; a mismatch drops the
 * reference just taken, as any holder's release, and reports a miss.
 * Once the CAS succeeded the hit holds b, so b cannot be evicted and
 * registered again before the check: what the check reads is the
 * registration whose CACHED the CAS saw (or a later one after a reset,
 * which the check then rejects or, same hash and manager, rightly
 * accepts).  hash[b] is read before the CAS too, to skip a CAS on a
 * wrong block; that read may race with a new registration (atomic words:
 * a torn value is only a mismatch), and the check after the CAS decides.
 *
 * Eviction claims its blocks all or nothing (prefix_pool.c).  After the
 * claims, per manager, it reports KVP_EVENT_REMOVED and only then, under
 * the store lock, turns the slots into tombstones and clears owner[]:
 * until then a commit of the same hash finds the slot and stores nothing,
 * so per hash, events are in order (a reset skips blocks no longer
 * CACHED: the evictor deletes their slots).  The evictor stays in one RCU
 * read-side section from before its claims to after its deletions, so a
 * manager being destroyed, which waits for a grace period after clearing
 * its table, outlives it.
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
#include "prefix_pool.h"
#include "rcu.h"
#include "stack.h"

#ifdef KVP_FAULT_INJECTION
void (*prefix_take_hook)(struct prefix_cache *pc, uint32_t b);
#endif

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
		prefix_block_prefetch(pp, ids[j]);
	/* Acquire: the manager and hash as their registrar wrote them (the
	 * blocks are ours now: nobody else writes them). */
	pc = prefix_owner_acquire(pp, ids[0]);
	/* Only to prefetch slots: a rebuild may replace it. */
	t = table_of(pc);
	while (k < end && prefix_owner(pp, ids[k]) == pc) {
		uint64_t w[4];

		hash_read(pp, ids[k], w);
		memcpy(hashes[k].b, w, sizeof(w));
		keys[k] = key_of(w);
		__builtin_prefetch(&t->slot[home_of(keys[k], t->mask)], 1);
		k++;
	}
	prefix_events_begin(pc);
	prefix_emit(pc, KVP_EVENT_REMOVED, hashes, k, NULL);
	store_lock(pc);
	for (uint32_t j = 0; j < k; j++)
		table_delete(pc, pp, ids[j], keys[j]);
	store_count(&pc->evictions, k);
	store_unlock(pc);
	prefix_events_end(pc);
	return k;
}

/* The pool's reclaimer state, made by the first prefix cache over it,
 * with our evict_forget for its evictions (prefix_pool.h). */
static int prefix_make(struct kvp_pool *pool, void **ctx)
{
	return prefix_pool_make(pool, evict_forget, ctx);
}

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
	prefix_set_owner(pp, b, NULL);
	/* An uncached block has the default priority; a pin goes with it.
	 * No CAS: the word's other writers are excluded here (a raise by
	 * our store lock; a demotion because b is claimed, so on no list,
	 * or, in prefix_clear, by the list lock).  Relaxed: the word orders
	 * nothing but itself. */
	w = prefix_retain_of(pp, b);
	if (w) {
		prefix_set_retain(pp, b, 0);
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
	err = t ? pool_set_reclaimer(pool, &prefix_reclaimer, prefix_make)
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
		    prefix_owner(pp, b) == pc &&
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
	if (prefix_owner(pp, b) != pc || !hash_is(pp, b, w)) {
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
			prefix_block_prefetch(pp, cand[j]);
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
		prefix_count_revived(pp, revived);
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
		    prefix_owner(pp, b) != pc)
			break;
	}
	kvp_rcu_read_unlock();
	return i;
}

void prefix_store_begin(struct prefix_cache *pc)
{
	prefix_events_begin(pc);
	store_lock(pc);
}

void prefix_store_end(struct prefix_cache *pc)
{
	store_unlock(pc);
	prefix_events_end(pc);
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
	prefix_block_prefetch_w(pp, b);
	pool_block_prefetch_w(pc->pool, b);
	return key;
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
	if (b != KVP_NIL && prefix_owner(pp, b) == pc)
		word = prefix_retain_of(pp, b);
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
	if (prefix_owner(pp, b))
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
		prefix_retain_mark(pp);
	hash_write(pp, b, w);
	prefix_set_owner(pp, b, pc);
	/* Relaxed: ordered before CACHED by the release below. */
	prefix_set_retain(pp, b, retain);
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
		prefix_list_unlink(pool, pp, b);
		slot_forget(pc, t, pp, i, b);
		if (bstate_refs(s) == 0) {
			prefix_count_cleared(pp);
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
		if (prefix_owner(pp, b) != pc || !pool_block_cached(pool, b))
			mgr_check_fail("prefix block %u is not cached by its "
				       "manager\n",
				       b);
		pinned += retain_prio(prefix_retain_of(pp, b)) ==
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
