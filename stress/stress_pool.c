/* SPDX-License-Identifier: MIT */
/*
 * stress_pool.c - validates the block pool under threads.
 *
 * usage: stress_pool THREADS SECONDS [--blocks N] [--cache C] [--seed S]
 *
 * Worker threads allocate random batches, hold them, take extra references
 * and free in random order.  Every block claims an owner atomically
 * (owner[id]: 0 -> thread) right after allocation and releases it before
 * the last free, so a block handed to two threads at once is caught.  Each
 * worker writes its tag into the block's data and checks it before freeing:
 * under TSan this also proves the pool orders one holder's writes before
 * the next holder's (a missing happens-before is a reported race).
 *
 * Every ~100 ms all workers meet at a barrier, free everything they hold
 * (their caches stay full), and worker 0 must allocate the entire pool in
 * one call while the others are alive and parked: no false exhaustion.
 * A churn thread meanwhile starts short-lived threads that allocate, free
 * and exit with blocks parked in their caches, which must come back.
 *
 * At the end everything is freed; the program requires kvp_pool_check() to
 * pass, free == total, allocs == frees, and exits non-zero otherwise.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"

#define STRESS_PROG "stress_pool"
#include "stress_common.h"

#define MAX_HELD 64 /* batches held per worker */
#define MAX_BATCH 32

static struct kvp_pool *pool;
static uint32_t num_blocks = 4096;
static _Atomic uint32_t *owner; /* 0 = nobody, else thread tag */
static _Atomic int stop;
static pthread_barrier_t round_barrier;
static _Atomic int round_wanted;
static int nworkers;
static _Atomic uint64_t total_ops, total_rounds, total_churned;
static _Atomic uint64_t enospc_seen;

struct batch {
	uint32_t n;
	uint32_t ids[MAX_BATCH];
};

struct worker {
	int idx;
	uint32_t tag;
	uint64_t seed;
	uint64_t ops;
	struct batch held[MAX_HELD];
	int nheld;
};

static void claim(uint32_t tag, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t expect = 0;
		uint64_t *data = kvp_block_data(pool, ids[i]);

		if (ids[i] >= num_blocks) {
			fail("id %u out of range\n", ids[i]);
			return;
		}
		/* Relaxed: the claim only detects double hand-outs; the
		 * data's ordering must come from the pool, not from here. */
		if (!atomic_compare_exchange_strong_explicit(
			    &owner[ids[i]], &expect, tag, memory_order_relaxed,
			    memory_order_relaxed)) {
			fail("block %u handed to thread %u while thread %u "
			     "holds it\n",
			     ids[i], tag, expect);
			return;
		}
		if (kvp_block_refcount(pool, ids[i]) != 1)
			fail("fresh block %u has refcount %d\n", ids[i],
			     kvp_block_refcount(pool, ids[i]));
		data[0] = tag; /* plain write: TSan checks the hand-off */
		data[1] = ids[i];
	}
}

static void unclaim(uint32_t tag, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t expect = tag;
		uint64_t *data = kvp_block_data(pool, ids[i]);

		if (data[0] != tag || data[1] != ids[i])
			fail("block %u data overwritten while held\n",
			     ids[i]);
		if (!atomic_compare_exchange_strong_explicit(
			    &owner[ids[i]], &expect, 0, memory_order_relaxed,
			    memory_order_relaxed))
			fail("block %u owned by %u, freed by %u\n", ids[i],
			     expect, tag);
	}
}

static void free_batch(struct worker *w, int i)
{
	struct batch *b = &w->held[i];
	int err;

	unclaim(w->tag, b->ids, b->n);
	err = kvp_pool_free(pool, b->ids, b->n);
	if (err)
		fail("free of %u blocks: %s\n", b->n, kvp_strerror(err));
	w->held[i] = w->held[--w->nheld];
}

static void free_all(struct worker *w)
{
	while (w->nheld)
		free_batch(w, w->nheld - 1);
}

/* Extra references: ref twice, free three times, in one or two calls. */
static void ref_dance(struct worker *w, struct batch *b)
{
	uint32_t id = b->ids[0];
	uint32_t three[3] = {id, id, id};
	int err;

	if ((err = kvp_block_ref(pool, id)) || (err = kvp_block_ref(pool, id)))
		fail("kvp_block_ref: %s\n", kvp_strerror(err));
	if (kvp_block_refcount(pool, id) != 3)
		fail("refcount %d after two refs\n",
		     kvp_block_refcount(pool, id));
	if (rnd(&w->seed) & 1) {
		if ((err = kvp_pool_free(pool, three, 2)))
			fail("free x2: %s\n", kvp_strerror(err));
	} else {
		/* Four drops of three refs: refused, nothing changes. */
		uint32_t four[4] = {id, id, id, id};

		if (kvp_pool_free(pool, four, 4) != -EALREADY)
			fail("over-free not refused\n");
		if ((err = kvp_pool_free(pool, three, 2)))
			fail("free x2: %s\n", kvp_strerror(err));
	}
	if (kvp_block_refcount(pool, id) != 1)
		fail("refcount %d, want 1\n", kvp_block_refcount(pool, id));
}

/* All workers meet; worker 0 takes the whole pool at once. */
static void exhaustion_round(struct worker *w)
{
	static uint32_t *all;

	free_all(w);
	pthread_barrier_wait(&round_barrier);
	if (w->idx == 0) {
		int err;

		all = malloc(num_blocks * sizeof(*all));
		err = kvp_pool_alloc(pool, num_blocks, all);
		if (err) {
			struct kvp_pool_stats st;

			kvp_pool_stats(pool, &st);
			fail("whole-pool alloc with all blocks free: %s "
			     "(free %llu, parked %llu)\n",
			     kvp_strerror(err), (unsigned long long)st.free,
			     (unsigned long long)st.in_thread_caches);
		} else {
			claim(w->tag, all, num_blocks);
			unclaim(w->tag, all, num_blocks);
			if ((err = kvp_pool_free(pool, all, num_blocks)))
				fail("whole-pool free: %s\n",
				     kvp_strerror(err));
		}
		free(all);
		atomic_store(&round_wanted, 0);
		atomic_fetch_add(&total_rounds, 1);
	}
	pthread_barrier_wait(&round_barrier);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint32_t ids[MAX_BATCH];

	while (!atomic_load(&stop)) {
		uint64_t r = rnd(&w->seed);

		if (atomic_load(&round_wanted)) {
			exhaustion_round(w);
			continue;
		}
		if (w->nheld < MAX_HELD && (r % 100 < 55 || w->nheld == 0)) {
			uint32_t n = 1 + (uint32_t)(rnd(&w->seed) % MAX_BATCH);
			int err = kvp_pool_alloc(pool, n, ids);

			if (err == -ENOSPC) {
				atomic_fetch_add(&enospc_seen, 1);
				free_all(w);
				continue;
			}
			if (err) {
				fail("alloc: %s\n", kvp_strerror(err));
				break;
			}
			claim(w->tag, ids, n);
			w->held[w->nheld].n = n;
			memcpy(w->held[w->nheld].ids, ids, n * sizeof(*ids));
			if (r % 7 == 0)
				ref_dance(w, &w->held[w->nheld]);
			w->nheld++;
		} else if (w->nheld) {
			free_batch(w, (int)(rnd(&w->seed) % (uint64_t)w->nheld));
		}
		if (r % 1000 == 0)
			kvp_thread_flush();
		w->ops++;
	}
	free_all(w);
	atomic_fetch_add(&total_ops, w->ops);
	return NULL;
}

static void *churn_child(void *arg)
{
	uint32_t ids[8];
	uint32_t tag = (uint32_t)(uintptr_t)arg;

	for (int i = 0; i < 4; i++) {
		if (kvp_pool_alloc(pool, 8, ids) != 0)
			return NULL;
		claim(tag, ids, 8);
		unclaim(tag, ids, 8);
		if (kvp_pool_free(pool, ids, 8) != 0)
			fail("churn free\n");
	}
	return NULL; /* exits with blocks parked in its cache */
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct kvp_layout layout = {.num_layers = 1,
				    .num_kv_heads = 1,
				    .head_dim = 1,
				    .dtype = KVP_F64};
	struct kvp_pool_config cfg = {.block_tokens = 1, .device_id = -1,
				      .layout = &layout};
	struct kvp_pool_stats st;
	pthread_t *tids;
	struct worker *ws;
	double seconds, end, next_round;
	uint64_t seed = (uint64_t)time(NULL);
	uint32_t churn_tag = 1u << 30;
	int err;

	if (argc < 3) {
		fprintf(stderr, "usage: %s THREADS SECONDS [--blocks N] "
				"[--cache C] [--seed S]\n",
			argv[0]);
		return 2;
	}
	nworkers = atoi(argv[1]);
	seconds = atof(argv[2]);
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--blocks"))
			num_blocks = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--cache"))
			cfg.cache_blocks = (uint32_t)strtoul(argv[i + 1], NULL,
							     0),
			cfg.flags |= cfg.cache_blocks ? 0 : KVP_POOL_NOCACHE;
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 0);
	}
	if (nworkers < 1 || seconds <= 0) {
		fprintf(stderr, "stress_pool: bad THREADS or SECONDS\n");
		return 2;
	}
	/* data[0..1] are two uint64: block_tokens 1 x K,V x 8 bytes. */
	cfg.num_blocks = num_blocks;
	if ((err = kvp_pool_create(&cfg, &pool))) {
		fprintf(stderr, "kvp_pool_create: %s\n", kvp_strerror(err));
		return 1;
	}
	owner = calloc(num_blocks, sizeof(*owner));
	tids = calloc((size_t)nworkers, sizeof(*tids));
	ws = calloc((size_t)nworkers, sizeof(*ws));
	pthread_barrier_init(&round_barrier, NULL, (unsigned)nworkers);
	printf("stress_pool: %d threads, %.1f s, %u blocks, cache %s, seed "
	       "%llu\n",
	       nworkers, seconds, num_blocks,
	       cfg.flags & KVP_POOL_NOCACHE ? "off" : "on",
	       (unsigned long long)seed);

	for (int i = 0; i < nworkers; i++) {
		ws[i].idx = i;
		ws[i].tag = (uint32_t)i + 1;
		ws[i].seed = seed + (uint64_t)i * 7919;
		pthread_create(&tids[i], NULL, worker_main, &ws[i]);
	}
	end = now() + seconds;
	next_round = now() + 0.1;
	while (now() < end) {
		pthread_t child;
		struct timespec nap = {0, 2000000};

		/* Churn: a short-lived thread exits with parked blocks. */
		if (pthread_create(&child, NULL, churn_child,
				   (void *)(uintptr_t)churn_tag++) == 0) {
			pthread_join(child, NULL);
			atomic_fetch_add(&total_churned, 1);
		}
		if (now() >= next_round) {
			atomic_store(&round_wanted, 1);
			while (atomic_load(&round_wanted))
				nanosleep(&nap, NULL);
			next_round = now() + 0.1;
		}
		nanosleep(&nap, NULL);
	}
	/* Stop only between rounds so no worker waits at a barrier alone. */
	atomic_store(&stop, 1);
	for (int i = 0; i < nworkers; i++)
		pthread_join(tids[i], NULL);

	if ((err = kvp_pool_check(pool)))
		fail("kvp_pool_check: %s\n", kvp_strerror(err));
	kvp_pool_stats(pool, &st);
	if (st.free != st.total)
		fail("free %llu != total %llu at the end\n",
		     (unsigned long long)st.free, (unsigned long long)st.total);
	if (st.allocs != st.frees)
		fail("allocs %llu != frees %llu at the end\n",
		     (unsigned long long)st.allocs,
		     (unsigned long long)st.frees);
	for (uint32_t i = 0; i < num_blocks; i++)
		if (atomic_load(&owner[i]))
			fail("block %u still claimed at the end\n", i);
	printf("stress_pool: %llu ops, %llu whole-pool rounds, %llu churn "
	       "threads, %llu ENOSPC, %llu blocks allocated, peak used %llu: "
	       "ok\n",
	       (unsigned long long)atomic_load(&total_ops),
	       (unsigned long long)atomic_load(&total_rounds),
	       (unsigned long long)atomic_load(&total_churned),
	       (unsigned long long)atomic_load(&enospc_seen),
	       (unsigned long long)st.allocs,
	       (unsigned long long)st.peak_used);
	kvp_pool_unref(pool);
	free(owner);
	free(tids);
	free(ws);
	return 0;
}
