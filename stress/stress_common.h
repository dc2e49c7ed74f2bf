/* SPDX-License-Identifier: MIT */
/*
 * stress_common.h - helpers shared by the stress programs (stress_pool,
 * stress_seq).
 *
 * The including program defines STRESS_PROG, its name as a string literal,
 * before including this header.
 */
#ifndef KVP_STRESS_COMMON_H
#define KVP_STRESS_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "kvpool.h"

#ifndef STRESS_PROG
#error "define STRESS_PROG before including stress_common.h"
#endif

/* A violation ends the run at once: other workers may be at a barrier. */
#define fail(...)                                                            \
	do {                                                                 \
		fprintf(stderr, STRESS_PROG ": FAIL: " __VA_ARGS__);         \
		fflush(stderr);                                              \
		_exit(1);                                                    \
	} while (0)

static inline uint64_t rnd(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * Two managers ("two models") on one pool: LRU and PRIORITY eviction.
 * They take the caller's pool reference over: the pool lives as long as
 * they do.
 */
static inline void two_managers(struct kvp_pool *pool,
				struct kvp_manager *mgr[2])
{
	struct kvp_manager_config mc = {.pool = pool};
	int err;

	mc.policy = KVP_EVICT_LRU;
	if ((err = kvp_manager_create(&mc, &mgr[0])))
		fail("kvp_manager_create: %s\n", kvp_strerror(err));
	mc.policy = KVP_EVICT_PRIORITY;
	if ((err = kvp_manager_create(&mc, &mgr[1])))
		fail("kvp_manager_create: %s\n", kvp_strerror(err));
	kvp_pool_unref(pool);
}

#endif /* KVP_STRESS_COMMON_H */
