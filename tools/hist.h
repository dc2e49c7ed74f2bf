/* SPDX-License-Identifier: MIT */
/*
 * hist.h - log-linear latency histograms (nanoseconds): 16 sub-buckets per
 * power of two, so a percentile is exact below 16 ns and within 1/16
 * (6.25%) above.  One histogram per thread and operation; merged after the
 * threads are joined.  Not thread-safe: one writer at a time.
 */
#ifndef KVP_TOOLS_HIST_H
#define KVP_TOOLS_HIST_H

#include <stdint.h>
#include <time.h>

#define HIST_SUB_BITS 4
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS (64u * HIST_SUB)

struct hist {
	uint64_t count;
	uint64_t max;
	uint64_t sum;
	uint64_t b[HIST_BUCKETS];
};

static inline unsigned hist_bucket(uint64_t ns)
{
	unsigned e;

	if (ns < HIST_SUB)
		return (unsigned)ns;
	e = 63u - (unsigned)__builtin_clzll(ns); /* >= HIST_SUB_BITS */
	return (e - HIST_SUB_BITS + 1) * HIST_SUB +
	       (unsigned)((ns >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

static inline void hist_add(struct hist *h, uint64_t ns)
{
	h->count++;
	h->sum += ns;
	if (ns > h->max)
		h->max = ns;
	h->b[hist_bucket(ns)]++;
}

/* Mean of the samples (0 without any), rounded down. */
static inline uint64_t hist_mean(const struct hist *h)
{
	return h->count ? h->sum / h->count : 0;
}

static inline uint64_t hist_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* dst += src. */
void hist_merge(struct hist *dst, const struct hist *src);

/* The q-quantile (0 < q <= 1) in ns: the lower bound of the bucket
 * holding it (exact below 16 ns); 0 for an empty histogram. */
uint64_t hist_quantile(const struct hist *h, double q);

#endif /* KVP_TOOLS_HIST_H */
