/* SPDX-License-Identifier: MIT */
/*
 * bstate.h - the block state word and its named transitions (layer 1:
 * included by pool.h, which owns the words; the layers above reach them
 * only through pool.h's pool_block_*() functions).  doc/architecture.md,
 * "The block state word", draws the state machine.
 *
 * A word is a reference count (bits 0..23) and two flags:
 *   CACHED    the block caches a hash (a prefix cache's); with no
 *             reference it is idle (evictable) and on no free list;
 *   EVICTING  an evictor has claimed an idle cached block.
 * A word of 0 is a free block, on exactly one free list.
 *
 * The transition table.  Every change of a word is one of these; "by"
 * says who may make it, "how" how races with other changes are decided.
 *
 *   name        from              to                 by           how
 *   ----------  ----------------  -----------------  -----------  -------
 *   give_sole   0                 1                  allocator    store
 *   take_sole   1                 0                  sole holder  store
 *   free_sole   1                 0                  sole holder  store
 *   ref         r (r >= 1)        r + 1              a holder     CAS
 *   drop        f | r (r >= 1)    f | r - 1          a holder     CAS
 *   cache       r (r >= 1)        CACHED | r         a holder     fetch_or
 *   revive      CACHED | r        CACHED | r + 1     a hit        CAS
 *   claim       CACHED | 0        CACHED | EVICTING  an evictor   CAS
 *   unclaim     CACHED | EVICTING CACHED | 0         its claimer  store
 *   evicted     CACHED | EVICTING 1                  its claimer  store
 *   uncache     CACHED | r        r (r = 0: free)    a reset      CAS
 *
 * take_sole checks that the word is 1; free_sole is for a caller that
 * knows it (a block it took with evicted).  give_sole and the two takes
 * are plain stores because nobody else can
 * reach the word: a free block is on one free list, which hands it to
 * one thread; a word of exactly 1 is held by the thread that sees it,
 * and taking a reference needs holding one.  (An uncached parked
 * reference is such a holder too: pool.c.)
 *
 * revive and claim both start from CACHED | 0 (revive also from a held
 * word), so a hit and an eviction of an idle block cannot both win: the
 * CAS decides.  Only the claimer changes an EVICTING word, so unclaim and
 * evicted are stores.  A drop that takes a CACHED word to CACHED | 0
 * makes the block idle: the dropper hands it to the prefix cache (pool.h's
 * reclaimer idle hook).  A drop to 0 frees it: the dropper lists it.
 * uncache of an idle block (r = 0) frees it, the uncacher listing it.
 *
 * Orders, each function's comment says the same:
 *  - give_sole, free_sole, ref, unclaim: relaxed (the free lists order a
 *    block's reuse; taking a reference publishes nothing);
 *  - take_sole: its load acquires (pairs with other holders' drops);
 *  - drop: acq_rel (the release orders this holder's use of the block
 *    before the last holder's reuse; the acquire, if we are that last);
 *  - cache: release (the block's record before CACHED, for revive);
 *  - revive: acq_rel (acquires the record and data as their registrar
 *    and last releaser published them; releases the hit's reads of the
 *    record before any later claim);
 *  - claim, uncache: acquire (the releasers' writes to the block happen
 *    before its reuse);
 *  - evicted: release (what the claimer wrote about the block before a
 *    reader that sees the word uncached).
 */
#ifndef KVP_BSTATE_H
#define KVP_BSTATE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvpool.h"

#define KVP_ST_REFS_MASK ((uint32_t)KVP_MAX_REFS)
#define KVP_ST_CACHED (1u << 24)
#define KVP_ST_EVICTING (1u << 25)

typedef _Atomic uint32_t bstate_t;

/* Readers of a word's value (no transition). */
static inline uint32_t bstate_refs(uint32_t s)
{
	return s & KVP_ST_REFS_MASK;
}

static inline bool bstate_held(uint32_t s)
{
	return bstate_refs(s) != 0;
}

static inline bool bstate_is_cached(uint32_t s)
{
	return (s & KVP_ST_CACHED) != 0;
}

static inline bool bstate_is_claimed(uint32_t s)
{
	return (s & KVP_ST_EVICTING) != 0;
}

/* Shared: another holder has it, or a hit may take it (cached). */
static inline bool bstate_is_shared(uint32_t s)
{
	return bstate_refs(s) > 1 || bstate_is_cached(s);
}

/* give_sole: a free block, just taken off a free list, held once. */
static inline void bstate_give_sole(bstate_t *st)
{
	atomic_store_explicit(st, 1, memory_order_relaxed);
}

/*
 * take_sole: a block held once, by the caller alone, freed.  Returns
 * false, changing nothing, if the word is not exactly 1; *seen gets it.
 * The acquire load pairs with other holders' release drops.
 */
static inline bool bstate_take_sole(bstate_t *st, uint32_t *seen)
{
	uint32_t s = atomic_load_explicit(st, memory_order_acquire);

	if (s != 1) {
		*seen = s;
		return false;
	}
	atomic_store_explicit(st, 0, memory_order_relaxed);
	return true;
}

/* free_sole: a block the caller alone holds once, freed.  Relaxed: the
 * free list it goes on orders its reuse. */
static inline void bstate_free_sole(bstate_t *st)
{
	atomic_store_explicit(st, 0, memory_order_relaxed);
}

/*
 * ref: one more reference on a held block.  Returns 0, -EALREADY (free)
 * or -EOVERFLOW (KVP_MAX_REFS references).  Relaxed: publishes nothing.
 */
static inline int bstate_ref(bstate_t *st)
{
	uint32_t s = atomic_load_explicit(st, memory_order_relaxed);

	do {
		if (!bstate_held(s))
			return -EALREADY;
		if (bstate_refs(s) == KVP_MAX_REFS)
			return -EOVERFLOW;
	} while (!atomic_compare_exchange_weak_explicit(
		st, &s, s + 1, memory_order_relaxed, memory_order_relaxed));
	return 0;
}

/*
 * drop: one reference less on a held block, from a word last seen as s
 * (the CAS reloads it).  Returns the new word, or UINT32_MAX (nothing
 * changed) if the block had no reference.  acq_rel: see the top.
 */
static inline uint32_t bstate_drop(bstate_t *st, uint32_t s)
{
	do {
		if (!bstate_held(s))
			return UINT32_MAX;
	} while (!atomic_compare_exchange_weak_explicit(
		st, &s, s - 1, memory_order_acq_rel, memory_order_acquire));
	return s - 1;
}

/* cache: a held block starts caching a hash.  Release: its record (and
 * data) before CACHED (pairs with revive's acquire). */
static inline void bstate_cache(bstate_t *st)
{
	atomic_fetch_or_explicit(st, KVP_ST_CACHED, memory_order_release);
}

/*
 * revive: one more reference on a cached, unclaimed block (a hit).
 * Returns false, changing nothing, if the block is not cached, is being
 * evicted or has KVP_MAX_REFS references.  *was gets the word it
 * changed.  acq_rel: see the top.
 */
static inline bool bstate_revive(bstate_t *st, uint32_t *was)
{
	uint32_t s = atomic_load_explicit(st, memory_order_relaxed);

	do {
		if (!bstate_is_cached(s) || bstate_is_claimed(s) ||
		    bstate_refs(s) == KVP_MAX_REFS)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(
		st, &s, s + 1, memory_order_acq_rel, memory_order_relaxed));
	*was = s;
	return true;
}

/* claim: CACHED | 0 -> CACHED | EVICTING, or false (nothing changed).
 * Acquire: the releasers' writes to the block before its reuse. */
static inline bool bstate_claim(bstate_t *st)
{
	uint32_t s = KVP_ST_CACHED;

	return atomic_compare_exchange_strong_explicit(
		st, &s, KVP_ST_CACHED | KVP_ST_EVICTING, memory_order_acquire,
		memory_order_relaxed);
}

/* unclaim: a claim given back, the block idle again.  Relaxed: the
 * claim's acquire ordered the block, and the next claimer acquires. */
static inline void bstate_unclaim(bstate_t *st)
{
	atomic_store_explicit(st, KVP_ST_CACHED, memory_order_relaxed);
}

/* evicted: the claimer's block, uncached and held once by it.  Release:
 * see the top. */
static inline void bstate_evicted(bstate_t *st)
{
	atomic_store_explicit(st, 1, memory_order_release);
}

/*
 * uncache: a cached, unclaimed block stops being cached; its holders
 * keep their references (their last drop frees it as any block's), and
 * an idle one becomes free, for the caller to list.  Returns the word it
 * changed, or UINT32_MAX (nothing changed) if the block was not cached
 * or was claimed.  Acquire: see the top.
 */
static inline uint32_t bstate_uncache(bstate_t *st)
{
	uint32_t s = atomic_load_explicit(st, memory_order_relaxed);

	do {
		if (!bstate_is_cached(s) || bstate_is_claimed(s))
			return UINT32_MAX;
	} while (!atomic_compare_exchange_weak_explicit(
		st, &s, s & ~KVP_ST_CACHED, memory_order_acquire,
		memory_order_relaxed));
	return s;
}

#endif /* KVP_BSTATE_H */
