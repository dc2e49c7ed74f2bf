/* SPDX-License-Identifier: MIT */
/*
 * prefix.h - the prefix cache (layer 5, doc/architecture.md "Layers"): the
 * managers' hash -> block maps (used by seqprefix.c), and the pool's
 * evictable cached blocks, which the pool reaches only through the
 * reclaimer hook prefix.c registers (pool.h), kept by prefix_pool.c;
 * the events are prefix_event.h's.  The correctness argument is in
 * prefix.c (the table, hits, commits, evictions' deletions) and
 * prefix_pool.c (the state word's races, the lists, retention).
 *
 * Synchronisation table:
 *
 *   operation               may run concurrently with     note
 *   ----------------------  ----------------------------  ----------------
 *   prefix_take             everything                    lock-free (RCU
 *                                                         section, one CAS
 *                                                         per block)
 *   the reclaimer's idle    each other, prefix_take,      the pool's
 *   and reclaim hooks,      prefix_store                  evictable-list
 *   prefix_unhit,                                         lock
 *   prefix_clear
 *   prefix_store,           prefix_take, the pool side,   the manager's
 *   prefix_clear,           other managers                store lock
 *   the reclaim hook's deletions
 *   prefix_check_cache,     nothing on the pool           quiescence
 *   the check hook
 */
#ifndef KVP_PREFIX_H
#define KVP_PREFIX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "compiler.h"
#include "kvpool.h"
#include "pool.h"

struct prefix_table;

/*
 * A manager's prefix cache: its table hash -> block, the locks of the
 * table's writers and of its events, its event sink and its counters.
 * Owned by prefix.c (the manager embeds it and calls the functions
 * below), but for its event fields (event_lock, event_cb, event_arg,
 * event_seq, event_medium: prefix_event.c's) and its retention fields,
 * which prefix_pool.c's retention reads and writes too; the pool sees the prefix cache only as its reclaimer (pool.h),
 * registered by the first prefix_cache_init() over it.
 */
struct prefix_cache {
	struct kvp_pool *pool; /* immutable; the manager's reference */
	uint32_t block_tokens; /* immutable */
	/* The table, replaced under store_lock, read lock-free. */
	_Atomic(struct prefix_table *) table;
	pthread_mutex_t store_lock; /* the table's writers */
	pthread_mutex_t event_lock; /* see prefix_event.c */
	kvp_event_cb event_cb;	    /* set before concurrent use */
	void *event_arg;
	/* The next event's seq, so the events reported: written under
	 * event_lock, read relaxed by the statistics. */
	_Atomic uint64_t event_seq;
	char event_medium[16];	    /* set before concurrent use; "" none */
	/* Cached blocks of this manager, and those evictions took.
	 * Synchronization: written under store_lock, read relaxed. */
	kvp_cacheline_aligned _Atomic uint64_t cached;
	_Atomic uint64_t evictions;
	/* Retention (prefix_pool.c): the retention clock (atomic, relaxed), the
	 * earliest expiry among this manager's idle timed blocks above the
	 * default priority (list lock; read relaxed), the blocks whose
	 * retention word pins them (atomic) and the cap (immutable). */
	kvp_cacheline_aligned _Atomic uint64_t retain_now;
	_Atomic uint64_t retain_next;
	_Atomic uint32_t pinned;
	uint32_t max_pinned;
};

/* The events (prefix_event.c), which need the struct above. */
#include "prefix_event.h"

/*
 * Sets up pc over pool (and the pool's reclaimer, if it has none), with
 * at most max_pinned blocks pinned.  Returns 0 or -ENOMEM (nothing to
 * undo).
 */
int prefix_cache_init(struct prefix_cache *pc, struct kvp_pool *pool,
		      uint32_t max_pinned);
/* Forgets every cached block of pc (as prefix_clear with force) and frees
 * the table; no other thread may use pc. */
void prefix_cache_fini(struct prefix_cache *pc);

/* Fills st's fields of pc (relaxed reads): the blocks it caches, how many
 * evictions took, how many are pinned, its retention clock, and the
 * events it handed to its sink. */
void prefix_cache_stats(struct prefix_cache *pc, struct kvp_stats *st);

/*
 * Takes a reference on the blocks caching hashes[0..n), as long as they
 * are all cached; returns how many (the hit prefix), their ids in
 * blocks[].  Lock-free.
 */
uint32_t prefix_take(struct prefix_cache *pc, const struct kvp_hash *hashes,
		     uint32_t n, uint32_t *blocks);

/*
 * How many of hashes[0..n) are cached now, from the first on, taking no
 * reference and changing nothing (kvp_prefix_match): advice, as a hit
 * may be evicted and a block cached the moment after.  Lock-free.
 */
uint32_t prefix_match(struct prefix_cache *pc, const struct kvp_hash *hashes,
		      uint32_t n);

/*
 * Undoes prefix_take for a failed creation: drops the references on
 * blocks[0..n) and puts a block that becomes evictable again back where it
 * was in the eviction order (unless an evictor unlinked it meanwhile).
 */
void prefix_unhit(struct kvp_pool *pool, const uint32_t *blocks, uint32_t n);

/*
 * A commit: prefix_store_begin takes pc's event and store locks (in that
 * order), prefix_store_end drops them.  In between, prefix_store caches
 * block b (held by the caller, full) under hash h, whose key
 * prefix_store_prepare(pc, b, h) returned (asking for the lines the store
 * will write: call it some blocks ahead).  prefix_store returns 1 if
 * stored, 0 if b is already cached, 2 if another block caches h (b stays
 * uncached), or -ENOMEM (nothing changed).
 */
void prefix_store_begin(struct prefix_cache *pc);
void prefix_store_end(struct prefix_cache *pc);
uint64_t prefix_store_prepare(struct prefix_cache *pc, uint32_t b,
			      const struct kvp_hash *h);
int prefix_store(struct prefix_cache *pc, uint32_t b, const struct kvp_hash *h,
		 uint64_t key, uint64_t retain, uint32_t *unpinned);

/*
 * Retention (prefix_pool.c, "Retention").  prefix_retain_word
 * makes the word prefix_store and prefix_raise take: priority prio
 * (<= KVP_RETAIN_PIN) for `duration` ticks of pc's retention clock from
 * now (0: for ever).  A store that would pin past pc's cap stores
 * KVP_RETAIN_MAX instead and counts one in *unpinned.  prefix_raise
 * (store lock; the caller holds b) gives block b, if pc caches it, the
 * word's priority if that is above its own now, or renews its expiry if
 * equal: a hit keeps its priority unless a commit raises it.
 */
uint64_t prefix_retain_word(struct prefix_cache *pc, uint32_t prio,
			    uint64_t duration);
/* The priority of a word prefix_retain_word made. */
static inline uint32_t prefix_word_priority(uint64_t word)
{
	return (uint32_t)(word >> 56);
}
void prefix_raise(struct prefix_cache *pc, uint32_t b, uint64_t want,
		  uint32_t *unpinned);
/* Advances pc's retention clock by steps (-ERANGE past 2^56 - 1,
 * nothing changed), the new time in *now (if not NULL); idle blocks
 * whose retention expired go back to the default priority. */
int prefix_tick(struct prefix_cache *pc, uint64_t steps, uint64_t *now);
/* The priority and expiry (0: none) of the block caching h, at pc's
 * time now; -ENOENT if pc caches no block under h.  Lock-free. */
int prefix_retention(struct prefix_cache *pc, const struct kvp_hash *h,
		     uint32_t *prio, uint64_t *expires);

/*
 * Forgets every cached block of pc: evictable ones go back to the free
 * lists.  Without force, fails with -EBUSY (nothing changed) if any is
 * referenced; with force, referenced ones just stop being cached.
 * Returns 0 or -EBUSY.
 */
int prefix_clear(struct prefix_cache *pc, bool force);

/*
 * Quiescent check of pc's table against the pool: adds pc's cached
 * blocks to *nodes; 0 or -EFAULT.
 */
int prefix_check_cache(struct prefix_cache *pc, uint64_t *nodes);
/* Cached blocks in the pool (quiescent count). */
uint64_t prefix_cached_blocks(struct kvp_pool *pool);

#ifdef KVP_FAULT_INJECTION
/* Test builds: called by a hit between its load of a slot and its CAS
 * on the block's state word (NULL: nothing), so that a test can evict
 * and re-cache the block inside that window (tests/check_aba.c). */
extern void (*prefix_take_hook)(struct prefix_cache *pc, uint32_t b);
#endif

#endif /* KVP_PREFIX_H */
