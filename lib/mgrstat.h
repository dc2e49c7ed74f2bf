/* SPDX-License-Identifier: MIT */
/*
 * mgrstat.h - a manager's statistics counters, sharded per thread (layer
 * 3, doc/architecture.md "Layers": mgrstat.c, over compiler.h).
 *
 * Owns struct mgr_shard and the assignment of shards to threads.  The
 * manager embeds KVP_MGR_SHARDS of them (manager.h); the files that
 * count (seq.c, seqprefix.c, preempt.c) bump them through stat_add(), and
 * manager.c sums them for kvp_manager_stats.
 *
 * Synchronisation: a thread bumps only its own shard (see below); readers
 * sum relaxed loads at any time, exact at quiescence.
 */
#ifndef KVP_MGRSTAT_H
#define KVP_MGRSTAT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/*
 * Statistics counters, sharded.  The first KVP_MGR_EXCL_SHARDS shards each
 * belong to one live thread at a time (claimed on first use, given back at
 * thread exit), which bumps them with a plain load and store: no locked
 * instruction on the hot paths.  Threads beyond share the others, with
 * atomic adds.  Readers sum relaxed loads.
 */
#define KVP_MGR_EXCL_SHARDS 16
#define KVP_MGR_SHARED_SHARDS 4
#define KVP_MGR_SHARDS (KVP_MGR_EXCL_SHARDS + KVP_MGR_SHARED_SHARDS)
_Static_assert(KVP_MGR_SHARDS <= 32, "shards_ever is a 32-bit map");
struct mgr_shard {
	kvp_cacheline_aligned _Atomic uint64_t creates;
	_Atomic uint64_t frees, appends, forks, evictions, cows;
	_Atomic uint64_t blocks_allocated, blocks_released;
	_Atomic uint64_t sequences, tokens; /* deltas, wrapping */
	_Atomic uint64_t prefix_queries, prefix_hits, prefix_commits;
	_Atomic uint64_t prefix_uncached;
};
/* The counters of a shard, creates first, prefix_uncached last
 * (mgr_stat_sum reads them as an array). */
#define STAT_FIELDS 14
_Static_assert(sizeof(struct mgr_shard) >= STAT_FIELDS * sizeof(uint64_t) &&
		       offsetof(struct mgr_shard, prefix_uncached) ==
			       (STAT_FIELDS - 1) * sizeof(uint64_t),
	       "struct mgr_shard: STAT_FIELDS consecutive counters");

/* This thread's shard: 1 + index, 0 = not yet assigned (owner only). */
extern KVP_TLS unsigned kvp_stat_shard;

/* Gives this thread a shard (its first count): sets kvp_stat_shard. */
void mgr_shard_assign(void);

/* This thread's shard among shards[0..KVP_MGR_SHARDS). */
static inline struct mgr_shard *mgr_shard_in(struct mgr_shard *shards)
{
	if (unlikely(!kvp_stat_shard))
		mgr_shard_assign();
	return &shards[kvp_stat_shard - 1];
}

/* This thread's statistics shard of manager m (assigned on first use). */
#define mgr_shard(m) mgr_shard_in((m)->shards)

/* Adds v to a counter of this thread's shard.  Relaxed: statistics. */
static inline void mgr_stat_bump(_Atomic uint64_t *counter, uint64_t v)
{
	if (likely(kvp_stat_shard <= KVP_MGR_EXCL_SHARDS))
		/* The shard's only writer: no read-modify-write needed. */
		atomic_store_explicit(
			counter,
			atomic_load_explicit(counter, memory_order_relaxed) +
				v,
			memory_order_relaxed);
	else
		atomic_fetch_add_explicit(counter, v, memory_order_relaxed);
}

/* mgr_shard() runs first, as an argument: the shard is assigned. */
#define mgr_stat_add(m, field, v)                                            \
	mgr_stat_bump(&mgr_shard(m)->field, (uint64_t)(v))

/* Relaxed: statistics. */
#define stat_add(m, field, v) mgr_stat_add(m, field, v)

/* Every counter of shards[0..KVP_MGR_SHARDS) summed, in field order. */
void mgr_stat_sum(const struct mgr_shard *shards, uint64_t sum[STAT_FIELDS]);

/* One counter of a sum from mgr_stat_sum(). */
#define STAT_OF(sum, field)                                                  \
	((sum)[(offsetof(struct mgr_shard, field) -                           \
		offsetof(struct mgr_shard, creates)) /                         \
	       sizeof(uint64_t)])

#endif /* KVP_MGRSTAT_H */
