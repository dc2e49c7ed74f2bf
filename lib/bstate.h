/*
 * bstate.h - the block state word and its named transitions (layer 1:
 * included by pool.h, which owns the words; the prefix layer reaches them
 * only through pool.h's pool_block_*() functions).  doc/architecture.md,
 * "The block state word", has the whole state machine.
 *
 * A word is a reference count (bits 0..23) and two flags:
 *   CACHED    the block caches a hash (a prefix cache's); with no
 *             reference it is idle (evictable) and on no free list;
 *   EVICTING  an evictor has claimed an idle cached block.
 *
 * The transition table.  Every change of a word is one of these; the
 * "by" column says who may make it, "how" how races are decided.
 *
 *   name        from              to                  by          how
 *   ----------  ----------------  ------------------  ----------  ------
 *   take_sole   0                 1                   allocator   store
 *   ref         r (r >= 1)        r + 1               a holder    CAS
 *   drop        r (r >= 1)        r - 1               a holder    CAS
 *   drop_sole   1                 0                   sole holder store
 *   cache       r (r >= 1)        CACHED | r          a holder    fetch_or
 *   revive      CACHED | r        CACHED | r + 1      a hit       CAS
 *   claim       CACHED | 0        CACHED | EVICTING   an evictor  CAS
 *   unclaim     CACHED | EVICTING CACHED | 0          its claimer store
 *   evicted     CACHED | EVICTING 1                   its claimer store
 *   uncache     CACHED | r (r>0)  r                   reset,      CAS
 *                                                         withdrawal
 *   take_idle   CACHED | 0        1                   reset       CAS
 *
 * revive and claim both start from CACHED | 0 (revive also from a held
 * word), so a hit and an eviction of an idle block cannot both win: the
 * CAS decides.  Only the claimer changes an EVICTING word, so unclaim and
 * evicted are plain stores.  A holder's drop of a CACHED word to zero
 * makes it idle: the dropper hands it to the prefix cache (pool.h's
 * reclaimer idle hook).
 *
 * Orders: revive is acq_rel (it acquires the block's record and data as
 * their registrar and last releaser published them; it releases the
 * hit's earlier reads of the record before any later claim).  claim is
 * acquire (the releasers' writes to the block happen before the evictor
 * reuses it).  cache is release (the record before CACHED).  Each
 * function's comment says the same.
 */
#ifndef KVP_BSTATE_H
#define KVP_BSTATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvpool.h"

#define KVP_ST_REFS_MASK ((uint32_t)KVP_MAX_REFS)
#define KVP_ST_CACHED (1u << 24)
#define KVP_ST_EVICTING (1u << 25)

typedef _Atomic uint32_t bstate_t;

static inline uint32_t bstate_refs(uint32_t s)
{
	return s & KVP_ST_REFS_MASK;
}

static inline bool bstate_is_cached(uint32_t s)
{
	return (s & KVP_ST_CACHED) != 0;
}

/* Idle: cached, unreferenced, unclaimed. */
static inline bool bstate_is_idle(uint32_t s)
{
	return s == KVP_ST_CACHED;
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
		if (!(s & KVP_ST_CACHED) || (s & KVP_ST_EVICTING) ||
		    bstate_refs(s) == KVP_MAX_REFS)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(
		st, &s, s + 1, memory_order_acq_rel, memory_order_relaxed));
	*was = s;
	return true;
}

/* claim: CACHED | 0 -> CACHED | EVICTING.  Acquire: the releasers'
 * writes to the block before the evictor's reuse of it. */
static inline bool bstate_claim(bstate_t *st)
{
	uint32_t s = KVP_ST_CACHED;

	return atomic_compare_exchange_strong_explicit(
		st, &s, KVP_ST_CACHED | KVP_ST_EVICTING, memory_order_acquire,
		memory_order_relaxed);
}

/* unclaim: a claim given back, the block idle again (only the claimer
 * writes an EVICTING word; relaxed: the claim's acquire already ordered
 * the block, and the next claimer acquires it again). */
static inline void bstate_unclaim(bstate_t *st)
{
	atomic_store_explicit(st, KVP_ST_CACHED, memory_order_relaxed);
}

/* evicted: the claimer's block, uncached and held once by it.  Release:
 * whatever the claimer wrote about the block (its record) before a
 * reader that sees the word uncached (a commit's staleness check). */
static inline void bstate_evicted(bstate_t *st)
{
	atomic_store_explicit(st, 1, memory_order_release);
}

/* cache: a held block starts caching a hash.  Release: its record (and
 * data) before CACHED (pairs with revive's acquire). */
static inline void bstate_cache(bstate_t *st)
{
	atomic_fetch_or_explicit(st, KVP_ST_CACHED, memory_order_release);
}

/*
 * uncache: a cached, held, unclaimed block stops being cached; its
 * holders keep their references (their last drop frees it as any
 * block).  Returns false, changing nothing, if the block is not cached,
 * is claimed or has no reference (then take_idle is the transition).
 * Relaxed: the holders' drops order their own uses.
 */
static inline bool bstate_uncache(bstate_t *st)
{
	uint32_t s = atomic_load_explicit(st, memory_order_relaxed);

	do {
		if (!(s & KVP_ST_CACHED) || (s & KVP_ST_EVICTING) ||
		    !bstate_refs(s))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(
		st, &s, s & ~KVP_ST_CACHED, memory_order_relaxed,
		memory_order_relaxed));
	return true;
}

/*
 * take_idle: an idle block (CACHED | 0) becomes held once by the caller,
 * uncached (a reset freeing it).  Acquire as claim.
 */
static inline bool bstate_take_idle(bstate_t *st)
{
	uint32_t s = KVP_ST_CACHED;

	return atomic_compare_exchange_strong_explicit(
		st, &s, 1, memory_order_acquire, memory_order_relaxed);
}

/*
 * drop: one reference less on a held block, by CAS (other holders, and
 * hits on a cached block, change the word meanwhile).  Returns the new
 * word, or UINT32_MAX (nothing changed) if the block had no reference.
 * acq_rel: the release orders this holder's use of the block before the
 * last holder's reuse; the acquire, if we are that last holder.
 */
static inline uint32_t bstate_drop(bstate_t *st)
{
	uint32_t s = atomic_load_explicit(st, memory_order_relaxed);

	do {
		if (!bstate_refs(s))
			return UINT32_MAX;
	} while (!atomic_compare_exchange_weak_explicit(
		st, &s, s - 1, memory_order_acq_rel, memory_order_relaxed));
	return s - 1;
}

#endif /* KVP_BSTATE_H */
