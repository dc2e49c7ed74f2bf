/* SPDX-License-Identifier: MIT */
/*
 * stress_integrity.c - the KV bytes under concurrency: a data-owning pool,
 * several threads, two managers.
 *
 *   stress_integrity <threads> <seconds> [--blocks N] [--full 1]
 *
 * Every token a sequence writes carries a pattern derived from who wrote
 * it: (writer, position at writing, layer, K or V), where the writer is a
 * prompt (tokens any sequence may get from the prefix cache) or the
 * sequence itself (tokens it appended).  Each thread holds up to SLOTS
 * sequences and, at random: creates one (from a prompt: with
 * kvp_seq_create_cached on a prefix-caching manager, then writes the
 * tokens the cache did not serve and commits the prompt's full blocks),
 * appends to one (copy-on-write of a shared last block) and writes the new
 * tokens, forks one, truncates, stream-trims or frees one, evicts a
 * sequence of a manager (kvp_evict: possibly another thread's, whose owner
 * then sees -ENOENT and forgets it), and reads back every token of a
 * sequence it holds, comparing each byte with the pattern.  A thread
 * remembers, per token of each of its sequences, who wrote it and where:
 * forks copy that, truncations and trims cut it.
 *
 * Manager 0 caches prefixes (LRU); manager 1 does not (PRIORITY), or with
 * --full 1 caches too, in a pool too small for the prompts: the pool is
 * then full of cached blocks and allocations evict them.
 *
 * Requires: 0 corrupted tokens; at the end, after freeing every sequence
 * and resetting the caches, free == total, kvp_pool_check and both
 * kvp_manager_check clean.  Prints operations, tokens verified,
 * corruptions and evictions.
 */
#define STRESS_PROG "stress_integrity"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stress_common.h"

#define BT 4u /* tokens per block */
#define LAYERS 2u
#define PROMPTS 32u	 /* shared prompts */
#define PROMPT_BLOCKS 6u /* full blocks of a prompt */
#define MAX_TOKENS 64u	 /* per sequence */
#define SLOTS 4u	 /* sequences a thread holds */

struct tok {
	uint64_t writer; /* prompt id + 1, or a sequence id (>= 2^32) */
	uint32_t pos;	 /* its position when written */
};

struct slot {
	bool used, trimmed;
	int mgr;
	uint64_t id;
	uint32_t n;
	struct tok t[MAX_TOKENS];
};

static struct kvp_pool *pool;
static struct kvp_manager *mgr[2];
static bool prefix[2];
static size_t row;
static struct kvp_hash prompt_hash[PROMPTS][PROMPT_BLOCKS];
static atomic_bool stop;
static _Atomic uint64_t n_ops, n_verified, n_corrupt, n_evicted, n_lost, n_hits,
	n_cow;

/* Byte j of the row (writer, pos, layer, kv). */
static uint8_t pattern(const struct tok *t, uint32_t layer, int kv, size_t j)
{
	uint64_t s = t->writer * 0x9e3779b97f4a7c15ull ^
		     (uint64_t)t->pos << 20 ^ (uint64_t)layer << 8 ^
		     (uint64_t)kv << 4 ^ (j / 8) << 40;

	return (uint8_t)(rnd(&s) >> (8 * (j % 8)));
}

static void fill(uint8_t *buf, const struct tok *t, uint32_t layer, int kv)
{
	for (size_t j = 0; j < row; j++)
		buf[j] = pattern(t, layer, kv, j);
}

/* The sequence was evicted by someone (kvp_evict): forget it. */
static void lost(struct slot *s)
{
	s->used = false;
	atomic_fetch_add_explicit(&n_lost, 1, memory_order_relaxed);
}

/* Writes tokens [from, s->n) of s; false if s is gone. */
static bool write_tokens(struct slot *s, uint32_t from)
{
	uint8_t k[256], v[256];

	for (uint32_t p = from; p < s->n; p++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			int rc;

			fill(k, &s->t[p], l, 0);
			fill(v, &s->t[p], l, 1);
			rc = kvp_seq_write(mgr[s->mgr], s->id, p, l, k, v);
			if (rc == -ENOENT)
				return false;
			if (rc)
				fail("kvp_seq_write(%llu, pos %u of %u, layer "
				     "%u)"
				     " = %s\n",
				     (unsigned long long)s->id, p, s->n, l,
				     kvp_strerror(rc));
		}
	return true;
}

/* Reads every token of s back; false if s is gone. */
static bool verify(struct slot *s)
{
	uint8_t k[256], v[256];

	for (uint32_t p = 0; p < s->n; p++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			int rc = kvp_seq_read(mgr[s->mgr], s->id, p, l, k, v);
			bool bad = false;

			if (rc == -ENOENT)
				return false;
			if (rc)
				fail("kvp_seq_read(%llu, pos %u of %u) = %s\n",
				     (unsigned long long)s->id, p, s->n,
				     kvp_strerror(rc));
			for (size_t j = 0; j < row && !bad; j++)
				bad = k[j] != pattern(&s->t[p], l, 0, j) ||
				      v[j] != pattern(&s->t[p], l, 1, j);
			if (bad) {
				if (atomic_fetch_add(&n_corrupt, 1) < 10)
					fprintf(stderr,
						STRESS_PROG
						": corrupt token: "
						"seq %llu pos %u layer %u "
						"(written by %llu at %u)\n",
						(unsigned long long)s->id, p, l,
						(unsigned long long)s->t[p]
							.writer,
						s->t[p].pos);
			}
			atomic_fetch_add_explicit(&n_verified, 1,
						  memory_order_relaxed);
		}
	return true;
}

static void op_create(struct slot *s, int m, uint64_t id, uint64_t *rng)
{
	uint32_t p = (uint32_t)(rnd(rng) % PROMPTS), cached = 0;
	uint32_t n = 1 + (uint32_t)(rnd(rng) % (PROMPT_BLOCKS * BT));
	int rc;

	if (prefix[m])
		rc = kvp_seq_create_cached(mgr[m], id, prompt_hash[p],
					   PROMPT_BLOCKS, n, &cached);
	else
		rc = kvp_seq_create(mgr[m], id, n);
	if (rc == -ENOSPC || rc == -ENOMEM)
		return;
	if (rc)
		fail("creating %llu = %s\n", (unsigned long long)id,
		     kvp_strerror(rc));
	s->used = true;
	s->trimmed = false;
	s->mgr = m;
	s->id = id;
	s->n = n;
	for (uint32_t i = 0; i < n; i++)
		s->t[i] = (struct tok){prefix[m] ? p + 1 : id, i};
	if (cached)
		atomic_fetch_add_explicit(&n_hits, cached / BT,
					  memory_order_relaxed);
	if (!write_tokens(s, cached)) {
		lost(s);
		return;
	}
	if (prefix[m]) {
		rc = kvp_seq_commit(mgr[m], id, prompt_hash[p], n / BT);
		if (rc == -ENOENT)
			lost(s);
		else if (rc < 0 && rc != -ENOMEM)
			fail("kvp_seq_commit = %s\n", kvp_strerror(rc));
	}
}

static void op_append(struct slot *s, uint64_t *rng)
{
	uint32_t k = 1 + (uint32_t)(rnd(rng) % 6), from = s->n, ncow = 0;
	struct kvp_copy cow;
	int rc;

	if (s->n + k > MAX_TOKENS)
		return;
	rc = kvp_seq_append(mgr[s->mgr], s->id, k, &cow, 1, &ncow);
	if (rc == -ENOENT) {
		lost(s);
		return;
	}
	if (rc == -ENOSPC || rc == -ENOMEM)
		return;
	if (rc)
		fail("kvp_seq_append = %s\n", kvp_strerror(rc));
	atomic_fetch_add_explicit(&n_cow, ncow, memory_order_relaxed);
	s->n += k;
	for (uint32_t i = from; i < s->n; i++)
		s->t[i] = (struct tok){s->id, i};
	if (!write_tokens(s, from))
		lost(s);
}

static void op_fork(struct slot *s, struct slot *d, uint64_t id)
{
	int rc = kvp_seq_fork(mgr[s->mgr], s->id, id);

	if (rc == -ENOENT) {
		lost(s);
		return;
	}
	if (rc == -ENOMEM)
		return;
	if (rc)
		fail("kvp_seq_fork = %s\n", kvp_strerror(rc));
	*d = *s;
	d->id = id;
}

static void op_trim(struct slot *s, uint64_t *rng)
{
	uint32_t sink = (uint32_t)(rnd(rng) % 6),
		 win = (uint32_t)(rnd(rng) % 9);
	uint32_t ev = 0, start = (sink + BT - 1) / BT * BT;
	int rc = kvp_seq_stream_trim(mgr[s->mgr], s->id, sink, win, &ev);

	if (rc == -ENOENT) {
		lost(s);
		return;
	}
	if (rc)
		fail("kvp_seq_stream_trim = %s\n", kvp_strerror(rc));
	if (!ev)
		return;
	if (start + ev > s->n)
		fail("stream_trim(%u, %u) of %u tokens trimmed %u\n", sink, win,
		     s->n, ev);
	memmove(&s->t[start], &s->t[start + ev],
		(s->n - start - ev) * sizeof(s->t[0]));
	s->n -= ev;
	s->trimmed = true;
}

static void *worker(void *arg)
{
	unsigned tid = (unsigned)(uintptr_t)arg;
	uint64_t rng = 0x1234567ull + tid * 0x9e3779b97f4a7c15ull;
	uint64_t next_id = ((uint64_t)tid + 1) << 32;
	struct slot *sl = calloc(SLOTS, sizeof(*sl));

	if (!sl)
		fail("out of memory\n");
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		struct slot *s = &sl[rnd(&rng) % SLOTS];
		unsigned op = (unsigned)(rnd(&rng) % 16);
		int rc;

		atomic_fetch_add_explicit(&n_ops, 1, memory_order_relaxed);
		if (!s->used) {
			op_create(s, (int)(rnd(&rng) % 2), next_id++, &rng);
			continue;
		}
		if (op < 5) {
			op_append(s, &rng);
		} else if (op < 7) {
			struct slot *d = &sl[rnd(&rng) % SLOTS];

			if (!d->used)
				op_fork(s, d, next_id++);
		} else if (op < 8) {
			uint32_t t = (uint32_t)(rnd(&rng) % (s->n + 1));

			rc = kvp_seq_truncate(mgr[s->mgr], s->id, t);
			if (rc == -ENOENT)
				lost(s);
			else if (rc)
				fail("kvp_seq_truncate = %s\n",
				     kvp_strerror(rc));
			else
				s->n = t;
		} else if (op < 9) {
			op_trim(s, &rng);
		} else if (op < 11) {
			rc = kvp_seq_free(mgr[s->mgr], s->id);
			if (rc && rc != -ENOENT)
				fail("kvp_seq_free = %s\n", kvp_strerror(rc));
			s->used = false;
		} else if (op < 12) {
			uint64_t victim;

			rc = kvp_evict(mgr[rnd(&rng) % 2], &victim);
			if (rc == 0)
				atomic_fetch_add_explicit(&n_evicted, 1,
							  memory_order_relaxed);
			else if (rc != -ENOENT && rc != -ENOSPC)
				fail("kvp_evict = %s\n", kvp_strerror(rc));
		} else if (!verify(s)) {
			lost(s);
		}
	}
	for (unsigned i = 0; i < SLOTS; i++)
		if (sl[i].used && verify(&sl[i]))
			(void)kvp_seq_free(mgr[sl[i].mgr], sl[i].id);
	free(sl);
	return NULL;
}

int main(int argc, char **argv)
{
	struct kvp_layout l = {LAYERS, 2, 8, KVP_U8};
	struct kvp_pool_config pc = {.num_blocks = 512,
				     .block_tokens = BT,
				     .device_id = -1,
				     .layout = &l};
	struct kvp_manager_config mc = {0};
	struct kvp_pool_stats ps;
	unsigned nthreads;
	double seconds;
	bool full = false;
	pthread_t th[64];
	struct timespec ts;
	int rc;

	if (argc < 3) {
		fprintf(stderr, "usage: stress_integrity <threads> <seconds> "
				"[--blocks N] [--full 1]\n");
		return 2;
	}
	nthreads = (unsigned)strtoul(argv[1], NULL, 10);
	seconds = strtod(argv[2], NULL);
	for (int i = 3; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--blocks") == 0)
			pc.num_blocks =
				(uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--full") == 0)
			full = atoi(argv[i + 1]) != 0;
		else {
			fprintf(stderr, STRESS_PROG ": unknown option %s\n",
				argv[i]);
			return 2;
		}
	}
	if (nthreads < 1 || nthreads > 64 || !(seconds > 0) ||
	    pc.num_blocks < 16) {
		fprintf(stderr, STRESS_PROG ": need 1-64 threads, seconds > 0,"
					    " at least 16 blocks\n");
		return 2;
	}
	if ((rc = kvp_pool_create(&pc, &pool)))
		fail("kvp_pool_create: %s\n", kvp_strerror(rc));
	row = kvp_pool_row_bytes(pool);
	if (row > 256)
		fail("row of %zu bytes\n", row);
	for (int m = 0; m < 2; m++) {
		prefix[m] = m == 0 || full;
		mc.pool = pool;
		mc.policy = m == 0 ? KVP_EVICT_LRU : KVP_EVICT_PRIORITY;
		mc.flags = prefix[m] ? KVP_PREFIX_CACHE : 0;
		if ((rc = kvp_manager_create(&mc, &mgr[m])))
			fail("kvp_manager_create: %s\n", kvp_strerror(rc));
	}
	for (uint32_t p = 0; p < PROMPTS; p++)
		for (uint32_t b = 0; b < PROMPT_BLOCKS; b++) {
			uint64_t s = p * 131 + b;

			prompt_hash[p][b].b[0] = p + 1;
			prompt_hash[p][b].b[1] = b;
			prompt_hash[p][b].b[2] = rnd(&s);
			prompt_hash[p][b].b[3] = rnd(&s);
		}
	for (unsigned t = 0; t < nthreads; t++)
		if (pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t))
			fail("pthread_create\n");
	ts.tv_sec = (time_t)seconds;
	ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL);
	atomic_store(&stop, true);
	for (unsigned t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);

	for (int m = 0; m < 2; m++)
		if (prefix[m] && (rc = kvp_prefix_reset(mgr[m])))
			fail("kvp_prefix_reset: %s\n", kvp_strerror(rc));
	kvp_pool_stats(pool, &ps);
	printf(STRESS_PROG
	       ": %u threads, %.1f s, %u blocks%s: %llu ops, "
	       "%llu token rows verified, %llu corrupt; %llu sequences "
	       "evicted (%llu seen gone), %llu cache hits (blocks), %llu "
	       "copies on write, %llu cache evictions\n",
	       nthreads, seconds, pc.num_blocks, full ? " (full)" : "",
	       (unsigned long long)n_ops, (unsigned long long)n_verified,
	       (unsigned long long)n_corrupt, (unsigned long long)n_evicted,
	       (unsigned long long)n_lost, (unsigned long long)n_hits,
	       (unsigned long long)n_cow,
	       (unsigned long long)ps.cache_evictions);
	if (n_corrupt)
		fail("%llu corrupt tokens\n", (unsigned long long)n_corrupt);
	if (ps.free != ps.total)
		fail("free %llu of %llu at the end\n",
		     (unsigned long long)ps.free, (unsigned long long)ps.total);
	if (kvp_pool_check(pool) || kvp_manager_check(mgr[0]) ||
	    kvp_manager_check(mgr[1]))
		fail("a check function failed at the end\n");
	if (n_verified == 0)
		fail("nothing was verified\n");
	for (int m = 0; m < 2; m++)
		kvp_manager_destroy(mgr[m]);
	kvp_pool_unref(pool);
	return 0;
}
