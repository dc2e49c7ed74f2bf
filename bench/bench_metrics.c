/* SPDX-License-Identifier: MIT */
/*
 * bench_metrics.c - what a Prometheus scrape of kvpool costs.
 *
 * usage: bench_metrics [--blocks N] [--managers M] [--renders R]
 *
 * A pool of N blocks (default 1,048,576) with M prefix-caching managers
 * (default 8), each holding sequences and cached idle blocks, and two
 * threads that keep live thread caches (they allocate and free, then wait
 * until the end): the state a serving process is in when its /metrics is
 * scraped.  Renders kvp_metrics_format R times (default 301) and prints
 * the median, 90th percentile and maximum time per render and the text's
 * size.  The target: a median of at most 1 ms.  Exits 1 if missed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool.h"

#define TARGET_NS 1000000.0

static void die(const char *what, int err)
{
	fprintf(stderr, "bench_metrics: %s: %s\n", what, kvp_strerror(err));
	exit(2);
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

struct holder {
	struct kvp_pool *pool;
	pthread_barrier_t *ready, *done;
};

/* Fills its thread cache, then stays alive until the renders are done. */
static void *holder_main(void *arg)
{
	struct holder *h = arg;
	uint32_t ids[64];
	int err;

	if ((err = kvp_pool_alloc(h->pool, 64, ids)) ||
	    (err = kvp_pool_free(h->pool, ids, 64)))
		die("holder", err);
	pthread_barrier_wait(h->ready);
	pthread_barrier_wait(h->done);
	return NULL;
}

/* Sequences and cached idle blocks in manager m (id base). */
static void populate(struct kvp_manager *m, uint64_t base)
{
	uint32_t toks[256];
	struct kvp_hash h[16];
	int err;

	for (uint64_t s = 0; s < 64; s++) {
		for (uint32_t t = 0; t < 256; t++)
			toks[t] = (uint32_t)(base + s * 1000 + t);
		kvp_hash_blocks(KVP_HASH_XXH3_128, NULL, NULL, toks, 256, 16, h);
		if ((err = kvp_seq_create(m, base + s, 256)) ||
		    (err = kvp_seq_commit(m, base + s, h, 16)) < 0)
			die("populate", err);
		if (s % 2 && (err = kvp_seq_free(m, base + s)))
			die("free", err);
	}
}

static uint32_t opt(int argc, char **argv, const char *name, uint32_t dflt)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return (uint32_t)strtoul(argv[i + 1], NULL, 0);
	return dflt;
}

int main(int argc, char **argv)
{
	uint32_t nblocks = opt(argc, argv, "--blocks", 1u << 20);
	uint32_t nmgr = opt(argc, argv, "--managers", 8);
	uint32_t renders = opt(argc, argv, "--renders", 301);
	struct kvp_pool_config pc = {.num_blocks = nblocks, .block_tokens = 16};
	struct kvp_manager **m;
	struct kvp_pool *pool;
	pthread_barrier_t ready, done;
	struct holder h;
	pthread_t t[2];
	double *ns;
	char *buf;
	size_t cap = 1 << 20, len = 0;
	bool met;
	int err;

	for (int i = 1; i < argc; i += 2)
		if (i + 1 >= argc || (strcmp(argv[i], "--blocks") &&
				      strcmp(argv[i], "--managers") &&
				      strcmp(argv[i], "--renders"))) {
			fprintf(stderr, "usage: bench_metrics [--blocks N] "
					"[--managers M] [--renders R]\n");
			return 2;
		}
	if (nmgr == 0 || renders == 0 || nblocks < nmgr * 64 * 16)
		die("arguments", -EINVAL);
	m = calloc(nmgr, sizeof(*m));
	ns = calloc(renders, sizeof(*ns));
	buf = malloc(cap);
	if (!m || !ns || !buf)
		die("memory", -ENOMEM);
	if ((err = kvp_pool_create(&pc, &pool)))
		die("kvp_pool_create", err);
	for (uint32_t i = 0; i < nmgr; i++) {
		struct kvp_manager_config mc = {.pool = pool,
						.flags = KVP_PREFIX_CACHE};

		if ((err = kvp_manager_create(&mc, &m[i])))
			die("kvp_manager_create", err);
		populate(m[i], (uint64_t)i << 32);
	}
	pthread_barrier_init(&ready, NULL, 3);
	pthread_barrier_init(&done, NULL, 3);
	h = (struct holder){pool, &ready, &done};
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, holder_main, &h);
	pthread_barrier_wait(&ready);
	for (uint32_t r = 0; r < renders; r++) {
		double t0 = now_ns();

		err = kvp_metrics_format(pool, m, nmgr, 0, buf, cap, &len);
		ns[r] = now_ns() - t0;
		if (err)
			die("kvp_metrics_format", err);
	}
	pthread_barrier_wait(&done);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	qsort(ns, renders, sizeof(*ns), cmp_double);
	met = ns[renders / 2] <= TARGET_NS;
	printf("bench_metrics: %u blocks, %u managers, 2 threads with live "
	       "caches: %u renders of %zu bytes: median %.1f us, p90 %.1f us, "
	       "max %.1f us (target: median <= %.0f us): %s\n",
	       nblocks, nmgr, renders, len, ns[renders / 2] / 1e3,
	       ns[renders * 9 / 10] / 1e3, ns[renders - 1] / 1e3,
	       TARGET_NS / 1e3, met ? "met" : "MISSED");
	for (uint32_t i = 0; i < nmgr; i++)
		kvp_manager_destroy(m[i]);
	kvp_pool_unref(pool);
	free(m);
	free(ns);
	free(buf);
	return met ? 0 : 1;
}
