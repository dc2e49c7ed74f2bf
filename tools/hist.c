/* SPDX-License-Identifier: MIT */
/*
 * hist.c - log-linear latency histograms; see hist.h.
 */
#include "hist.h"

void hist_merge(struct hist *dst, const struct hist *src)
{
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->max > dst->max)
		dst->max = src->max;
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
}

/* The smallest value that falls in bucket i. */
static uint64_t bucket_low(unsigned i)
{
	unsigned e, sub;

	if (i < HIST_SUB)
		return i;
	e = i / HIST_SUB + HIST_SUB_BITS - 1;
	sub = i % HIST_SUB;
	return (uint64_t)(HIST_SUB + sub) << (e - HIST_SUB_BITS);
}

uint64_t hist_quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0;

	if (h->count == 0)
		return 0;
	rank = (uint64_t)(q * (double)h->count);
	if (rank == 0)
		rank = 1;
	if (rank > h->count)
		rank = h->count;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank)
			return bucket_low(i);
	}
	return h->max;
}
