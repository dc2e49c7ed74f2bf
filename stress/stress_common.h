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

#endif /* KVP_STRESS_COMMON_H */
