/* SPDX-License-Identifier: MIT */
/*
 * stress_fork.c - validates kvp_seq_fork_n under threads.
 *
 * usage: stress_fork THREADS SECONDS [--blocks N] [--ids K] [--seed S]
 *
 * Two managers share one pool.  Sources live in a small id space shared
 * by every thread (--ids, default 32 per manager); each thread's children
 * get fresh ids of its own, which it publishes, once checked, in a ring
 * that every thread reads.  The threads race on the same sequences:
 *
 *   fork_n   n = 1..64 children (KVP_FORK_KEEP_SOURCE half the time) of
 *            a source or of an earlier child; 0, -ENOENT (the source was
 *            freed) or -EOVERFLOW are the answers a race allows.  On
 *            success every child must exist with one token count and one
 *            block table (nobody else knows their ids yet); on failure
 *            none may exist (all or nothing).  Every 16th call repeats an
 *            id or names a live source among the children: -EEXIST
 *            (-ENOENT if the source went first is allowed only without a
 *            taken id), and again none of the fresh ids may exist;
 *   append, truncate, free
 *            of sources and of published children, which race the forks
 *            of them (-ENOENT, -ERANGE of a stale length, -ENOSPC: the
 *            thread then preempts by policy);
 *   create   of a source id (-EEXIST if live).
 *
 * A thread frees its oldest children once it has more than OWN_MAX live.
 * At the end every sequence is freed; the run requires kvp_manager_check
 * of both managers while sequences live and after, kvp_pool_check and
 * free == total.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool.h"

#define STRESS_PROG "stress_fork"
#include "stress_common.h"

#define BT 16
#define MAX_N 64
#define MAX_TOKENS 400
#define RING 256    /* published children, per manager */
#define OWN_MAX 512 /* a thread's live children before it frees some */
#define CHILD_BASE (1ull << 40)

static struct kvp_pool *pool;
static struct kvp_manager *mgr[2];
static uint32_t num_blocks = 4096, id_space = 32;
static _Atomic int stop;
static _Atomic uint64_t ring[2][RING];
static _Atomic uint64_t counts[8];
static int nthreads;

enum { C_FORK, C_CHILDREN, C_FAILED, C_EEXIST, C_APPEND, C_TRUNC, C_FREE,
       C_NCOUNTS };
static const char *const count_names[] = {
	"fork_n", "children", "failed", "eexist", "append", "truncate",
	"free"};

/* A thread's children: ids it made, oldest first (a FIFO). */
struct thread {
	uint64_t seed, next;
	uint64_t own[2][OWN_MAX];
	uint32_t head[2], n[2];
};

static void count(int c, uint64_t by)
{
	atomic_fetch_add_explicit(&counts[c], by, memory_order_relaxed);
}

static void expect(const char *what, int err, int a, int b, int c)
{
	if (err == 0 || err == a || err == b || err == c)
		return;
	fail("%s returned %d (%s)\n", what, err, kvp_strerror(err));
}

/* A source id or, half the time, a child some thread published. */
static uint64_t some_seq(int k, uint64_t *seed)
{
	uint64_t r = rnd(seed);

	if (r & 1)
		return (r >> 8) % id_space;
	/* Relaxed: an id to race on; its sequence may be gone. */
	return atomic_load_explicit(&ring[k][(r >> 8) % RING],
				    memory_order_relaxed);
}

static void own_push(struct thread *th, int k, uint64_t id)
{
	uint32_t at;

	if (th->n[k] == OWN_MAX) {
		/* Another thread may have freed it: -ENOENT. */
		expect("free (oldest)",
		       kvp_seq_free(mgr[k], th->own[k][th->head[k]]), -ENOENT,
		       0, 0);
		th->head[k] = (th->head[k] + 1) % OWN_MAX;
		th->n[k]--;
	}
	at = (th->head[k] + th->n[k]++) % OWN_MAX;
	th->own[k][at] = id;
}

/* After a failed fork_n: none of the fresh ids [from, to) may exist. */
static void expect_none(int k, const uint64_t *dsts, uint32_t n,
			uint64_t from, uint64_t to)
{
	struct kvp_seq_info in;

	for (uint32_t i = 0; i < n; i++)
		if (dsts[i] >= from && dsts[i] < to &&
		    kvp_seq_info(mgr[k], dsts[i], &in) != -ENOENT)
			fail("a failed fork_n left child %llu\n",
			     (unsigned long long)dsts[i]);
}

/* After a successful fork_n: the children, unknown to other threads,
 * are all alike.  A preemption (another thread's kvp_evict after
 * -ENOSPC) may have taken some already: -ENOENT. */
static void expect_all(int k, const uint64_t *dsts, uint32_t n)
{
	uint32_t a[MAX_TOKENS / BT + 2], b[MAX_TOKENS / BT + 2], na = 0, nb;
	bool seen = false;

	for (uint32_t i = 0; i < n; i++) {
		int err = kvp_seq_blocks(mgr[k], dsts[i], seen ? b : a,
					 MAX_TOKENS / BT + 2, seen ? &nb : &na);

		expect("blocks of a child", err, -ENOENT, 0, 0);
		if (err)
			continue;
		if (seen && (na != nb || memcmp(a, b, na * sizeof(*a))))
			fail("the children of one fork_n differ\n");
		seen = true;
	}
}

static void do_fork_n(struct thread *th, int k)
{
	uint64_t src = some_seq(k, &th->seed), dsts[MAX_N], r = rnd(&th->seed);
	uint64_t fresh_from = th->next;
	uint32_t n = 1 + (uint32_t)(r % MAX_N), flags = 0;
	bool bad = n > 1 && (r >> 8) % 16 == 0, repeat = (r >> 24) & 1;
	int err;

	if ((r >> 12) & 1)
		flags = KVP_FORK_KEEP_SOURCE;
	for (uint32_t i = 0; i < n; i++)
		dsts[i] = th->next++;
	if (bad)
		/* A repeat of the first id, or src's own id. */
		dsts[1 + (r >> 16) % (n - 1)] = repeat ? dsts[0] : src;
	err = kvp_seq_fork_n(mgr[k], src, dsts, n, flags);
	count(C_FORK, 1);
	if (bad && repeat)
		expect("fork_n (a repeat)", err, -EEXIST, -EEXIST, -EEXIST);
	else if (bad)
		/* src's id is taken while src lives; once it is gone, the
		 * lookup fails (or a create took the id meanwhile). */
		expect("fork_n (src's id)", err, -EEXIST, -ENOENT, -ENOENT);
	else
		/* Fresh ids are ours: none can be taken. */
		expect("fork_n", err, -ENOENT, -EOVERFLOW, -ENOENT);
	if (err) {
		count(C_FAILED, 1);
		count(C_EEXIST, err == -EEXIST);
		expect_none(k, dsts, n, fresh_from, th->next);
		return;
	}
	expect_all(k, dsts, n);
	count(C_CHILDREN, n);
	for (uint32_t i = 0; i < n; i++) {
		own_push(th, k, dsts[i]);
		/* Relaxed: an id for others to race on. */
		atomic_store_explicit(&ring[k][rnd(&th->seed) % RING],
				      dsts[i], memory_order_relaxed);
	}
}

static void on_enospc(struct kvp_manager *m)
{
	uint64_t victim;

	expect("evict", kvp_evict(m, &victim), -ENOENT, 0, 0);
}

static void do_other(struct thread *th, int k, uint64_t r)
{
	struct kvp_manager *m = mgr[k];
	uint64_t id = some_seq(k, &th->seed);
	struct kvp_copy cow[1];
	struct kvp_seq_info in;
	uint32_t ncow;
	int err;

	switch (r % 5) {
	case 0:
		err = kvp_seq_create(m, rnd(&th->seed) % id_space,
				     (uint32_t)(r >> 8) % (MAX_TOKENS / 2));
		expect("create", err, -EEXIST, -ENOSPC, 0);
		if (err == -ENOSPC)
			on_enospc(m);
		break;
	case 1:
	case 2:
		if (!kvp_seq_info(m, id, &in) && in.num_tokens >= MAX_TOKENS)
			break;
		err = kvp_seq_append(m, id, 1 + (uint32_t)(r >> 8) % 20, cow,
				     1, &ncow);
		expect("append", err, -ENOENT, -ENOSPC, 0);
		if (err == -ENOSPC)
			on_enospc(m);
		count(C_APPEND, 1);
		break;
	case 3:
		if (kvp_seq_info(m, id, &in))
			break;
		err = kvp_seq_truncate(m, id,
				       (uint32_t)((r >> 8) %
						  (in.num_tokens + 1)));
		expect("truncate", err, -ENOENT, -ERANGE, -ENOMEM);
		count(C_TRUNC, 1);
		break;
	default:
		expect("free", kvp_seq_free(m, id), -ENOENT, 0, 0);
		count(C_FREE, 1);
	}
}

static void *worker(void *arg)
{
	struct thread *th = arg;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint64_t r = rnd(&th->seed);
		int k = (int)(r & 1);

		if ((r >> 1) % 3 == 0)
			do_fork_n(th, k);
		else
			do_other(th, k, r >> 3);
	}
	return NULL;
}

static void free_all(struct thread *ths)
{
	for (int k = 0; k < 2; k++) {
		for (uint64_t id = 0; id < id_space; id++)
			expect("final free", kvp_seq_free(mgr[k], id), -ENOENT,
			       0, 0);
		for (int t = 0; t < nthreads; t++)
			for (uint32_t i = 0; i < ths[t].n[k]; i++)
				expect("final free",
				       kvp_seq_free(mgr[k],
						    ths[t].own[k][(ths[t].head[k] +
								   i) %
								  OWN_MAX]),
				       -ENOENT, 0, 0);
	}
}

static void parse(int argc, char **argv, double *seconds, uint64_t *seed)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s THREADS SECONDS [--blocks N] "
				"[--ids K] [--seed S]\n",
			argv[0]);
		exit(2);
	}
	nthreads = atoi(argv[1]);
	*seconds = atof(argv[2]);
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--blocks"))
			num_blocks = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--ids"))
			id_space = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--seed"))
			*seed = strtoull(argv[i + 1], NULL, 0);
	}
	if (nthreads < 1 || *seconds <= 0 || id_space == 0) {
		fprintf(stderr, "stress_fork: bad arguments\n");
		exit(2);
	}
}

int main(int argc, char **argv)
{
	struct kvp_pool_config cfg = {.block_tokens = BT, .device_id = -1};
	struct kvp_pool_stats st;
	uint64_t seed = (uint64_t)time(NULL);
	struct thread *ths;
	pthread_t *tids;
	double seconds;
	int err;

	parse(argc, argv, &seconds, &seed);
	cfg.num_blocks = num_blocks;
	if ((err = kvp_pool_create(&cfg, &pool)))
		fail("kvp_pool_create: %s\n", kvp_strerror(err));
	two_managers(pool, mgr);
	printf("stress_fork: %d threads, %.1f s, %u blocks, %u source ids "
	       "per manager, seed %llu\n",
	       nthreads, seconds, num_blocks, id_space,
	       (unsigned long long)seed);
	ths = calloc((size_t)nthreads, sizeof(*ths));
	tids = calloc((size_t)nthreads, sizeof(*tids));
	if (!ths || !tids)
		fail("out of memory\n");
	for (int i = 0; i < nthreads; i++) {
		ths[i].seed = seed + 7919u * (unsigned)i;
		ths[i].next = CHILD_BASE * (uint64_t)(i + 1);
		pthread_create(&tids[i], NULL, worker, &ths[i]);
	}
	{
		struct timespec ts = {
			(time_t)seconds,
			(long)((seconds - (double)(time_t)seconds) * 1e9)};

		nanosleep(&ts, NULL);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(tids[i], NULL);
	if ((err = kvp_manager_check(mgr[0])))
		fail("kvp_manager_check with live sequences: %s\n",
		     kvp_strerror(err));
	free_all(ths);
	for (int k = 0; k < 2; k++)
		if ((err = kvp_manager_check(mgr[k])))
			fail("kvp_manager_check: %s\n", kvp_strerror(err));
	if ((err = kvp_pool_check(pool)))
		fail("kvp_pool_check: %s\n", kvp_strerror(err));
	kvp_pool_stats(pool, &st);
	if (st.free != st.total)
		fail("free %llu != total %llu at the end\n",
		     (unsigned long long)st.free, (unsigned long long)st.total);
	printf("stress_fork:");
	for (int i = 0; i < C_NCOUNTS; i++)
		printf(" %s %llu", count_names[i],
		       (unsigned long long)atomic_load(&counts[i]));
	printf(": ok\n");
	kvp_manager_destroy(mgr[0]);
	kvp_manager_destroy(mgr[1]);
	free(ths);
	free(tids);
	return 0;
}
