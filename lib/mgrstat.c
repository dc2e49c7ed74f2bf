/* SPDX-License-Identifier: MIT */
/*
 * mgrstat.c - the statistics shards of managers (layer 3,
 * doc/architecture.md "Layers": over compiler.h; counted by the
 * sequence files above).
 *
 * Owns the assignment of shards to threads: the first KVP_MGR_EXCL_SHARDS
 * shards each belong to one live thread at a time (claimed by CAS on a
 * bit map, given back by a thread-exit destructor), the others are shared
 * round-robin.  The counters themselves are in each manager (mgrstat.h).
 */
#include <pthread.h>
#include <string.h>

#include "mgrstat.h"

KVP_TLS unsigned kvp_stat_shard;
/* Bit i: exclusive shard i has a live owner.  Atomic; see below. */
static _Atomic uint32_t excl_shards_taken;
static _Atomic unsigned next_shared_shard; /* relaxed: spreads threads */
/* Bit i: some thread was ever given shard i, so only those shards of a
 * manager can be non-zero (mgr_stat_sum sums only them).  Atomic,
 * relaxed: set by a thread before its first update of the shard. */
static _Atomic uint32_t shards_ever;
static pthread_key_t shard_key;
static pthread_once_t shard_once = PTHREAD_ONCE_INIT;

_Static_assert(KVP_MGR_EXCL_SHARDS <= 32, "one bit per exclusive shard");

/* Thread exit: gives the exclusive shard back. */
static void shard_release(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg - 1;

	/* Release: our last bumps before the next owner's (which acquires
	 * the bit); the counters keep their sums. */
	atomic_fetch_and_explicit(&excl_shards_taken, ~(1u << i),
				  memory_order_release);
	kvp_stat_shard = 0;
}

static void shard_key_create(void)
{
	kvp_check_pthread(pthread_key_create(&shard_key, shard_release));
}

static __attribute__((noinline)) void shard_assign(void)
{
	const uint32_t all = KVP_MGR_EXCL_SHARDS == 32
				     ? ~0u
				     : (1u << KVP_MGR_EXCL_SHARDS) - 1;
	uint32_t taken;

	kvp_check_pthread(pthread_once(&shard_once, shard_key_create));
	taken = atomic_load_explicit(&excl_shards_taken, memory_order_relaxed);
	while ((taken & all) != all) {
		unsigned i = (unsigned)__builtin_ctz(~taken);

		/* Acquire: the previous owner's bumps (its release). */
		if (!atomic_compare_exchange_weak_explicit(
			    &excl_shards_taken, &taken, taken | (1u << i),
			    memory_order_acquire, memory_order_relaxed))
			continue;
		if (pthread_setspecific(shard_key, (void *)(uintptr_t)(i + 1)) ==
		    0) {
			kvp_stat_shard = i + 1;
			return;
		}
		/* No destructor could give it back: use a shared shard. */
		atomic_fetch_and_explicit(&excl_shards_taken, ~(1u << i),
					  memory_order_release);
		break;
	}
	kvp_stat_shard = KVP_MGR_EXCL_SHARDS + 1 +
			 atomic_fetch_add_explicit(&next_shared_shard, 1,
						   memory_order_relaxed) %
				 KVP_MGR_SHARED_SHARDS;
}

void mgr_shard_assign(void)
{
	shard_assign();
	/* Relaxed: see shards_ever. */
	atomic_fetch_or_explicit(&shards_ever, 1u << (kvp_stat_shard - 1),
				 memory_order_relaxed);
}

/* One pass over the shards any thread was ever given (a pass per counter
 * over every shard read each shard's lines thirteen times). */
void mgr_stat_sum(const struct mgr_shard *shards, uint64_t sum[STAT_FIELDS])
{
	/* Relaxed: see shards_ever. */
	uint32_t used = atomic_load_explicit(&shards_ever,
					     memory_order_relaxed);

	memset(sum, 0, STAT_FIELDS * sizeof(*sum));
	for (; used; used &= used - 1) {
		const _Atomic uint64_t *f =
			&shards[__builtin_ctz(used)].creates;

		/* Relaxed: statistics. */
		for (int k = 0; k < STAT_FIELDS; k++)
			sum[k] += atomic_load_explicit(&f[k],
						       memory_order_relaxed);
	}
}
