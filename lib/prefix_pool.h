/* SPDX-License-Identifier: MIT */
/*
 * prefix_pool.h - the pool side of the prefix cache, as prefix.c sees it
 * (floor 5, doc/architecture.md "Layers": prefix_pool.c, under prefix.c
 * and called by it, never the other way).  Private to the two files.
 *
 * Owned by prefix_pool.c: struct prefix_block (per block: the hash it
 * caches, its owner, its retention word) and struct prefix_pool (a pool's
 * blk[] array, the evictable lists per retention priority, their lock,
 * the counts), the retention word's format and the list lock.  The
 * structs live here, not in prefix_pool.c, because the table's hot paths
 * in prefix.c (a hit's lookup and check, a commit's registration, an
 * eviction's deletion) read and write a block's hash and owner inline,
 * one cache line per block: prefix.c reaches them through the inline
 * functions below, never through the fields.  The pool side reads, for
 * retention, the clock, next expiry and pin count of a block's owner
 * (struct prefix_cache's retention fields, prefix.h).  It calls nothing
 * of prefix.c: an eviction reports and deletes its blocks' slots through
 * the forget function prefix.c gives prefix_pool_make, as the pool
 * reaches the prefix cache through its reclaimer hook.
 *
 * Synchronisation: as prefix.h's table says; each function below says
 * which lock or order it needs.  The correctness argument is in
 * prefix_pool.c (the state word's races, the lists, retention) and
 * prefix.c (the table, hits, commits, eviction's deletions).
 */
#ifndef KVP_PREFIX_POOL_H
#define KVP_PREFIX_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "compiler.h"
#include "kvpool.h"
#include "pool.h"
#include "prefix.h"

#define KVP_UNLINKED 0xfffffffeu /* prev[b] of a block not in the list */

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
	 * evictions (the claimer); atomic, see prefix_pool.c, "Retention". */
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
struct prefix_pool;
typedef uint32_t (*prefix_forget_fn)(struct prefix_pool *pp,
				     const uint32_t *ids, uint32_t n);

struct prefix_pool {
	struct kvp_pool *pool; /* immutable */
	prefix_forget_fn forget; /* immutable: prefix.c's evict_forget */
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
	 * state CACHED|0 (see prefix_pool.c's argument), and revivals by hits.
	 * Blocks released into the evictable state are not counted: they
	 * are evictable + revived + evictions + cleared. */
	kvp_cacheline_aligned _Atomic int64_t evictable;
	_Atomic uint64_t revived;
	/* Rare: evictions by allocations, evictable blocks a reset freed. */
	kvp_cacheline_aligned _Atomic uint64_t evictions;
	_Atomic uint64_t cleared;
};

static inline struct prefix_pool *pool_prefix(struct kvp_pool *pool)
{
	/* Only prefix.c registers a reclaimer. */
	return pool_reclaimer_ctx(pool);
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

/* b's owner (relaxed: each caller says what orders it). */
static inline struct prefix_cache *prefix_owner(const struct prefix_pool *pp,
						 uint32_t b)
{
	return atomic_load_explicit(&pp->blk[b].owner, memory_order_relaxed);
}

/* b's owner, acquiring what its registrar wrote before CACHED. */
static inline struct prefix_cache *
prefix_owner_acquire(const struct prefix_pool *pp, uint32_t b)
{
	return atomic_load_explicit(&pp->blk[b].owner, memory_order_acquire);
}

/* Sets b's owner (relaxed: store lock; see prefix_store and slot_forget). */
static inline void prefix_set_owner(struct prefix_pool *pp, uint32_t b,
				    struct prefix_cache *pc)
{
	atomic_store_explicit(&pp->blk[b].owner, pc, memory_order_relaxed);
}

/* b's retention word (relaxed: the word orders nothing but itself). */
static inline uint64_t prefix_retain_of(const struct prefix_pool *pp,
					uint32_t b)
{
	return atomic_load_explicit(&pp->blk[b].retain, memory_order_relaxed);
}

/* Sets b's retention word (relaxed, as prefix_retain_of). */
static inline void prefix_set_retain(struct prefix_pool *pp, uint32_t b,
				     uint64_t w)
{
	atomic_store_explicit(&pp->blk[b].retain, w, memory_order_relaxed);
}

/* Asks for b's line (hash, owner, retention), to read or to write. */
static inline void prefix_block_prefetch(const struct prefix_pool *pp,
					 uint32_t b)
{
	__builtin_prefetch(&pp->blk[b], 0);
}

static inline void prefix_block_prefetch_w(struct prefix_pool *pp, uint32_t b)
{
	__builtin_prefetch(&pp->blk[b], 1);
}

/* n blocks a hit took from zero (relaxed: counts; the state word orders
 * the transitions). */
static inline void prefix_count_revived(struct prefix_pool *pp, uint32_t n)
{
	atomic_fetch_sub_explicit(&pp->evictable, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&pp->revived, n, memory_order_relaxed);
}

/* An evictable block a reset freed (relaxed, as above). */
static inline void prefix_count_cleared(struct prefix_pool *pp)
{
	atomic_fetch_sub_explicit(&pp->evictable, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&pp->cleared, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* The evictable lists' links and lock                                */
/* ------------------------------------------------------------------ */

/* Relaxed next[] accesses: under the lock, on blocks no free list has. */
static inline uint32_t link_next(struct kvp_pool *pool, uint32_t b)
{
	return atomic_load_explicit(&pool->next[b], memory_order_relaxed);
}

static inline void set_next(struct kvp_pool *pool, uint32_t b, uint32_t v)
{
	atomic_store_explicit(&pool->next[b], v, memory_order_relaxed);
}

/*
 * The list lock (and a manager's store lock) spins a little before it
 * sleeps (glibc's adaptive mutex):
 * it is held for a few hundred nanoseconds per release, and a waiter
 * that goes straight to futex() sleeps, and is woken, for far longer
 * than that (the ChangeLog of 2026-11-22 has the futex counts).
 */
static inline int list_lock_init(pthread_mutex_t *mu)
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

static inline void pp_lock(struct prefix_pool *pp)
{
	kvp_check_pthread(pthread_mutex_lock(&pp->lock));
}

static inline void pp_unlock(struct prefix_pool *pp)
{
	kvp_check_pthread(pthread_mutex_unlock(&pp->lock));
}

/*
 * Retention, the manager side (store lock held).  A pin is counted in
 * pc->pinned from the moment a word with the pin priority is written to
 * the moment it is replaced (whoever replaces it uncounts it: a commit
 * (prefix_store, prefix_raise), a demotion, an eviction or reset in
 * slot_forget), so the cap is checked against the words, expired ones
 * included until their demotion.
 *
 * Whether one more block may be pinned (then counted), else one more is
 * refused in *unpinned.
 */
static inline bool pin_admit(struct prefix_cache *pc, uint32_t *unpinned)
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

/* Notes that pp has a block above the default priority (store lock). */
void prefix_retain_mark(struct prefix_pool *pp);

/* Unlinks b from its evictable list, if linked (pp's lock held). */
void prefix_list_unlink(struct kvp_pool *pool, struct prefix_pool *pp,
			uint32_t b);

/*
 * What the pool sees of the prefix cache (pool.h): the hooks, and the
 * make() that prefix.c's wraps to give the new pool's state forget, its
 * eviction's report and deletions (prefix.c's evict_forget): one
 * manager's run among the n claimed blocks ids[0..n), reported removed
 * and deleted from its table; returns the run's length.  In a read-side
 * section.
 */
extern const struct pool_reclaimer prefix_reclaimer;
int prefix_pool_make(struct kvp_pool *pool, prefix_forget_fn forget,
		     void **ctx);

#endif /* KVP_PREFIX_POOL_H */
