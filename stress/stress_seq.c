/* SPDX-License-Identifier: MIT */
/*
 * stress_seq.c - validates sequences and managers under threads.
 *
 * usage: stress_seq THREADS SECONDS [--blocks N] [--ids K] [--seed S]
 *                   [--fork-tree [--writes 0]] [--reclaim]
 *
 * Two managers (two "models") share one data-owning pool that is small
 * enough to run out.  Every thread picks random operations on a small id
 * space shared by all threads (--ids, default 48 per manager), so frees
 * race forks, appends race frees, and evictors race each other on the same
 * sequences: create, append (with copy-on-write; every other one
 * kvp_seq_append_ex), fork, free, truncate, stream trim, set priority,
 * evict, info, blocks, the three exports, and a scheduler's controls
 * (a policy change, the next victim, the list of sequences, a
 * reservation).
 * Each call's result must be one the API allows in a race (e.g. fork:
 * 0, -ENOENT or -EEXIST); any other aborts the run.  On -ENOSPC a thread
 * checks its kvp_last_error record and evicts by policy.  Tables read back must be well formed.
 *
 * --fork-tree: the threads grow shared fork trees instead.  Most forks
 * take a node another thread (or this one) forked last, so trees grow
 * many levels deep with many live siblings; appends (copy-on-write of a
 * shared last block), frees, truncates (to 0, to block boundaries, a
 * token either side, inside a block), stream trims, preemption
 * (kvp_evict, kvp_evict_until) and (unless --writes 0) writes to shared
 * rows (-EBUSY) race on their nodes.
 *
 * --reclaim: each thread creates bursts of RECLAIM_BURST sequences in an
 * id range of its own (some forked from other threads' ranges), frees
 * them and calls kvp_thread_flush, so that the managers return whole
 * slabs of sequence structs while the others look up, append to, fork
 * and free the same ids: their lookup caches hold entries for structs
 * whose slabs go back (seqmem.c, "Returning slabs").  With two threads
 * or more, the first only pokes: no creates of its own overwrite its
 * cache's entries.  The run fails unless slabs were returned.
 *
 * At the end every sequence is freed; the program requires both managers'
 * kvp_manager_check() (every block's refcount equals the table entries
 * holding it, across both managers), kvp_pool_check(), and free == total.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"

#define STRESS_PROG "stress_seq"
#include "stress_common.h"

#define BT 16
#define MAX_TOKENS 600

static struct kvp_pool *pool;
static struct kvp_manager *mgr[2];
static uint32_t num_blocks = 1024, id_space = 48;
/* --writes 0: fork-tree threads write no rows. */
static int tree_writes = 1;
static _Atomic int stop;
/* --reclaim: threads in all, for their id ranges. */
static int reclaim_threads;
static _Atomic int reclaim_next; /* the next thread's range */
#define RECLAIM_BASE 1000000ull
#define RECLAIM_BURST 2048u
/* Pokes go to the first ids of each range: few enough that a thread's
 * lookup cache keeps entries for them from one burst to the next, so its
 * lookups meet entries whose slabs went back meanwhile. */
#define RECLAIM_POKED 256u
static _Atomic uint64_t counts[16];

enum { OP_CREATE, OP_APPEND, OP_FORK, OP_FREE, OP_TRUNC, OP_TRIM, OP_EVICT,
       OP_READ, OP_EXPORT, OP_COW, OP_ENOSPC, OP_WRITE, OP_BUSY, OP_CONTROL,
       OP_NCOUNTS };
static const char *const op_names[] = {"create", "append", "fork", "free",
				       "truncate", "trim", "evict", "read",
				       "export", "cow", "enospc", "write",
				       "busy", "control"};

/* --fork-tree: the nodes each manager forked last (any thread's: a
 * fork of one of them makes a sibling or a level more), and each id's
 * depth in its tree (statistics only: relaxed, racy). */
#define MAX_IDS 4096
#define NLAST 4
static _Atomic uint64_t last_fork[2][NLAST];
static _Atomic uint32_t depth[2][MAX_IDS];
static _Atomic uint32_t max_depth;

/* Fails unless err is 0 or one of the allowed errors. */
static void expect(const char *what, int err, int a, int b, int c)
{
	if (err == 0 || err == a || err == b || err == c)
		return;
	fail("%s returned %d (%s)\n", what, err, kvp_strerror(err));
}

static void count(int op)
{
	atomic_fetch_add_explicit(&counts[op], 1, memory_order_relaxed);
}

/* A table read back must be well formed. */
static void check_table(const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= num_blocks)
			fail("table holds block %u out of range\n", ids[i]);
}

static void on_enospc(struct kvp_manager *m)
{
	struct kvp_error_info e;
	uint64_t victim;

	/* The thread's own record of the -ENOSPC just returned. */
	if (kvp_last_error(&e) != 0 || e.err != -ENOSPC || e.requested == 0)
		fail("kvp_last_error after -ENOSPC: err %d, requested %llu\n",
		     e.err, (unsigned long long)e.requested);
	count(OP_ENOSPC);
	expect("evict", kvp_evict(m, &victim), -ENOENT, 0, 0);
}

static void do_read(struct kvp_manager *m, uint64_t id)
{
	uint32_t ids[MAX_TOKENS / BT + 64], n;
	struct kvp_seq_info info;
	int err;

	err = kvp_seq_info(m, id, &info);
	expect("info", err, -ENOENT, 0, 0);
	if (!err && info.num_blocks != (info.num_tokens + BT - 1) / BT)
		fail("seq %llu: %u tokens in %u blocks\n",
		     (unsigned long long)id, info.num_tokens, info.num_blocks);
	err = kvp_seq_blocks(m, id, ids, (uint32_t)(sizeof(ids) / sizeof(ids[0])),
			     &n);
	expect("blocks", err, -ENOENT, -ENOBUFS, 0);
	if (!err)
		check_table(ids, n);
}

static void do_export(struct kvp_manager *m, uint64_t *seed)
{
	uint64_t seqs[2] = {rnd(seed) % id_space, rnd(seed) % id_space};
	int32_t table[2 * 128], indptr[3], indices[256], last[2];
	int64_t slots[8];
	int err;

	err = kvp_export_block_table(m, seqs, 2, table, 128, -1);
	expect("block table", err, -ENOENT, -ENOBUFS, 0);
	err = kvp_export_csr(m, seqs, 2, indptr, indices, 256, last);
	expect("csr", err, -ENOENT, -ENOBUFS, 0);
	if (!err) {
		if (indptr[0] != 0 || indptr[1] > indptr[2])
			fail("csr indptr not monotonic\n");
		for (int i = 0; i < 2; i++)
			if (last[i] < 0 || last[i] > BT)
				fail("last_page_len %d\n", last[i]);
	}
	err = kvp_export_slot_mapping(m, seqs[0], 0, 8, slots);
	expect("slots", err, -ENOENT, -ERANGE, 0);
	if (!err)
		for (int i = 0; i < 8; i++)
			if (slots[i] < 0 ||
			    slots[i] >= (int64_t)num_blocks * BT ||
			    slots[i] % BT != i % BT)
				fail("slot %lld for position %d\n",
				     (long long)slots[i], i);
	count(OP_EXPORT);
}

/* An append with room for one copy, which must be well formed; every
 * other one reports what it did, which must be too. */
static void do_append(struct kvp_manager *m, uint64_t id, uint32_t n)
{
	struct kvp_copy cow[1];
	struct kvp_append_info in;
	uint32_t ncow;
	bool ex = n & 1;
	int err = ex ? kvp_seq_append_ex(m, id, n, cow, 1, &ncow, &in)
		     : kvp_seq_append(m, id, n, cow, 1, &ncow);

	if (!err && ex &&
	    (in.num_tokens < n || in.last_block >= num_blocks ||
	     in.new_blocks > (n + BT - 1) / BT + 1 ||
	     (ncow && in.last_block == cow[0].src)))
		fail("append_ex: %u tokens, block %u, %u new\n", in.num_tokens,
		     in.last_block, in.new_blocks);
	expect("append", err, -ENOENT, -ENOSPC, 0);
	if (err == -ENOSPC)
		on_enospc(m);
	if (!err && ncow) {
		if (cow[0].src == cow[0].dst || cow[0].tokens == 0 ||
		    cow[0].tokens >= BT)
			fail("bad copy {%u, %u, %u}\n", cow[0].src, cow[0].dst,
			     cow[0].tokens);
		count(OP_COW);
	}
	count(OP_APPEND);
}

/*
 * What a scheduler asks and changes while others run: a policy change,
 * the next victim, the list of sequences (each id in range, none
 * twice), a reservation.
 */
static void do_control(struct kvp_manager *m, uint64_t id, uint64_t *seed)
{
	uint64_t ids[2 * MAX_IDS], victim;
	uint32_t n;
	int err;

	switch (rnd(seed) % 4) {
	case 0:
		expect("set_policy",
		       kvp_manager_set_policy(m, (enum kvp_policy)(rnd(seed) %
								   4)),
		       0, 0, 0);
		break;
	case 1:
		err = kvp_evict_peek(m, &victim);
		expect("evict_peek", err, -ENOENT, 0, 0);
		if (!err && victim >= id_space)
			fail("evict_peek named %llu\n",
			     (unsigned long long)victim);
		break;
	case 2:
		err = kvp_manager_seqs(m, ids, 2 * MAX_IDS, &n);
		expect("manager_seqs", err, 0, 0, 0);
		for (uint32_t i = 0; i < n; i++) {
			if (ids[i] >= id_space)
				fail("manager_seqs listed %llu\n",
				     (unsigned long long)ids[i]);
			for (uint32_t j = 0; j < i; j++)
				if (ids[j] == ids[i])
					fail("manager_seqs listed %llu twice\n",
					     (unsigned long long)ids[i]);
		}
		break;
	default:
		err = kvp_seq_reserve(m, id, (uint32_t)(rnd(seed) % MAX_TOKENS));
		expect("reserve", err, -ENOENT, 0, 0);
	}
	count(OP_CONTROL);
}

/* A tree node: usually one some thread forked lately, else id. */
static uint64_t tree_node(int k, uint64_t id, uint64_t *seed)
{
	uint64_t r = rnd(seed);

	if (r % 4 == 0)
		return id;
	return atomic_load_explicit(&last_fork[k][(r >> 8) % NLAST],
				    memory_order_relaxed);
}

/* A fork of a tree node into a random id (taken: -EEXIST). */
static void tree_fork(int k, struct kvp_manager *m, uint64_t id, uint64_t *seed)
{
	uint64_t src = tree_node(k, id, seed);
	uint64_t dst = rnd(seed) % id_space;
	int err = kvp_seq_fork(m, src, dst);

	expect("fork", err, -ENOENT, -EEXIST, 0);
	count(OP_FORK);
	if (err)
		return;
	{
		/* Relaxed: statistics and a hint for the next fork. */
		uint32_t d = atomic_load_explicit(&depth[k][src],
						  memory_order_relaxed) +
			     1;

		atomic_store_explicit(&depth[k][dst], d, memory_order_relaxed);
		if (d > atomic_load_explicit(&max_depth, memory_order_relaxed))
			atomic_store_explicit(&max_depth, d,
					      memory_order_relaxed);
		atomic_store_explicit(&last_fork[k][rnd(seed) % NLAST], dst,
				      memory_order_relaxed);
	}
}

/* A cut to 0, a block boundary, a token either side, or inside a
 * block; the length read may be stale (-ERANGE). */
static void tree_truncate(struct kvp_manager *m, uint64_t id, uint64_t *seed)
{
	struct kvp_seq_info info;
	uint32_t k, t, r = (uint32_t)rnd(seed);
	int err;

	if (kvp_seq_info(m, id, &info))
		return;
	k = info.num_blocks ? r % (info.num_blocks + 1) : 0;
	switch ((r >> 16) % 5) {
	case 0:
		t = 0;
		break;
	case 1:
		t = k * BT;
		break;
	case 2:
		t = k * BT + 1;
		break;
	case 3:
		t = k ? k * BT - 1 : 0;
		break;
	default:
		t = k * BT + 1 + (r >> 24) % (BT - 1);
	}
	if (t > info.num_tokens)
		t = info.num_tokens;
	err = kvp_seq_truncate(m, id, t);
	expect("truncate", err, -ENOENT, -ERANGE, 0);
	count(OP_TRUNC);
}

/*
 * A row written into a node: -EBUSY while a fork shares its block.  A
 * write to a block just unshared must come after the copy-on-write read
 * of the fork that let it go (pool_block_shared's acquire): TSan sees
 * the race if it does not.
 */
static void tree_write(struct kvp_manager *m, uint64_t id, uint64_t *seed)
{
	float k[2] = {1.0f, 2.0f}, v[2] = {3.0f, 4.0f};
	int err = kvp_seq_write(m, id, (uint32_t)(rnd(seed) % 64), 0, k, v);

	expect("write", err, -ENOENT, -ERANGE, -EBUSY);
	count(err == -EBUSY ? OP_BUSY : OP_WRITE);
}

static void *tree_worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		int k = (int)(rnd(&seed) & 1);
		struct kvp_manager *m = mgr[k];
		uint64_t id = rnd(&seed) % id_space, victims[4];
		uint64_t node = tree_node(k, id, &seed);
		uint32_t r = (uint32_t)(rnd(&seed) % 100), n;
		int err;

		if (r < 6) {
			err = kvp_seq_create(m, id,
					     (uint32_t)(rnd(&seed) % (4 * BT)));
			expect("create", err, -EEXIST, -ENOSPC, 0);
			if (err == -ENOSPC)
				on_enospc(m);
			if (!err)
				atomic_store_explicit(&depth[k][id], 0,
						      memory_order_relaxed);
			count(OP_CREATE);
		} else if (r < 36) {
			tree_fork(k, m, id, &seed);
		} else if (r < 56) {
			do_append(m, node,
				  1 + (uint32_t)(rnd(&seed) % (2 * BT)));
		} else if (r < 66) {
			expect("free", kvp_seq_free(m, node), -ENOENT, 0, 0);
			count(OP_FREE);
		} else if (r < 76) {
			tree_truncate(m, node, &seed);
		} else if (r < 81) {
			err = kvp_seq_stream_trim(
				m, node, (uint32_t)(rnd(&seed) % 2) * BT,
				BT + (uint32_t)(rnd(&seed) % (2 * BT)), NULL);
			expect("trim", err, -ENOENT, 0, 0);
			count(OP_TRIM);
		} else if (r < 84) {
			uint64_t victim;

			expect("evict", kvp_evict(m, &victim), -ENOENT, 0, 0);
			count(OP_EVICT);
		} else if (r < 86) {
			/* Down to 90% of the pool in use, preempting as
			 * needed (0: nothing to do, n: victims). */
			err = kvp_evict_until(m, 0.9f, victims, 4, &n);
			if (err != 0 && err != KVP_EVICT_PARTIAL)
				fail("evict_until returned %d (%s)\n", err,
				     kvp_strerror(err));
			for (uint32_t i = 0; i < n; i++)
				if (victims[i] >= id_space)
					fail("evict_until: victim %llu\n",
					     (unsigned long long)victims[i]);
			count(OP_EVICT);
		} else if (r < 92) {
			if (tree_writes)
				tree_write(m, node, &seed);
			else
				do_read(m, node);
		} else if (r < 97) {
			do_read(m, id);
			count(OP_READ);
		} else {
			do_export(m, &seed);
		}
		{
			struct kvp_seq_info info;

			if (kvp_seq_info(m, node, &info) == 0 &&
			    info.num_tokens > MAX_TOKENS)
				expect("truncate",
				       kvp_seq_truncate(m, node, 17), -ENOENT,
				       0, 0);
		}
	}
	return NULL;
}

static void *worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		struct kvp_manager *m = mgr[rnd(&seed) & 1];
		uint64_t id = rnd(&seed) % id_space;
		uint32_t r = (uint32_t)(rnd(&seed) % 100);
		uint64_t victim;
		int err;

		if (r < 15) {
			err = kvp_seq_create(m, id,
					     (uint32_t)(rnd(&seed) % 200));
			expect("create", err, -EEXIST, -ENOSPC, 0);
			if (err == -ENOSPC)
				on_enospc(m);
			count(OP_CREATE);
		} else if (r < 45) {
			do_append(m, id, 1 + (uint32_t)(rnd(&seed) % 40));
		} else if (r < 55) {
			err = kvp_seq_fork(m, id, rnd(&seed) % id_space);
			expect("fork", err, -ENOENT, -EEXIST, 0);
			count(OP_FORK);
		} else if (r < 67) {
			expect("free", kvp_seq_free(m, id), -ENOENT, 0, 0);
			count(OP_FREE);
		} else if (r < 72) {
			err = kvp_seq_truncate(m, id,
					       (uint32_t)(rnd(&seed) % 300));
			expect("truncate", err, -ENOENT, -ERANGE, 0);
			count(OP_TRUNC);
		} else if (r < 75) {
			err = kvp_seq_stream_trim(m, id, 4, 64, NULL);
			expect("trim", err, -ENOENT, 0, 0);
			count(OP_TRIM);
		} else if (r < 77) {
			expect("evict", kvp_evict(m, &victim), -ENOENT, 0, 0);
			count(OP_EVICT);
		} else if (r < 79) {
			err = kvp_seq_set_priority(m, id,
						   (int32_t)(rnd(&seed) % 7));
			expect("priority", err, -ENOENT, 0, 0);
		} else if (r < 87) {
			do_read(m, id);
			count(OP_READ);
		} else if (r < 92) {
			do_control(m, id, &seed);
		} else {
			do_export(m, &seed);
		}
		/* Keep sequences short so the pool keeps cycling. */
		{
			struct kvp_seq_info info;

			if (kvp_seq_info(m, id, &info) == 0 &&
			    info.num_tokens > MAX_TOKENS)
				expect("truncate",
				       kvp_seq_truncate(m, id, 17), -ENOENT, 0,
				       0);
		}
	}
	return NULL;
}

/* --reclaim: id i of thread t's range. */
static uint64_t reclaim_id(int t, uint32_t i)
{
	return RECLAIM_BASE + (uint64_t)t * RECLAIM_BURST + i;
}

/* --reclaim: one operation on another thread's range (or ours). */
static void reclaim_poke(struct kvp_manager *m, int me, uint32_t i,
			 uint64_t *seed)
{
	/* The poker's range (me < 0: thread 0's) stays empty. */
	int t = me < 0 ? 1 + (int)(rnd(seed) % (uint64_t)(reclaim_threads - 1))
		       : (int)(rnd(seed) % (uint64_t)reclaim_threads);
	uint64_t other = reclaim_id(t, (uint32_t)(rnd(seed) % RECLAIM_POKED));
	uint32_t r = (uint32_t)(rnd(seed) % 100);
	int err;

	if (r < 50) {
		do_read(m, other);
		count(OP_READ);
	} else if (r < 70) {
		do_append(m, other, 1 + (uint32_t)(rnd(seed) % BT));
	} else if (r < 85 && me >= 0) {
		/* Into our own range: freed with our burst. */
		err = kvp_seq_fork(m, other, reclaim_id(me, i));
		expect("fork", err, -ENOENT, -EEXIST, 0);
		count(OP_FORK);
	} else {
		expect("free", kvp_seq_free(m, other), -ENOENT, 0, 0);
		count(OP_FREE);
	}
}

static void *reclaim_worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;
	int me = atomic_fetch_add_explicit(&reclaim_next, 1,
					   memory_order_relaxed);

	while (me == 0 && reclaim_threads > 1 &&
	       !atomic_load_explicit(&stop, memory_order_relaxed))
		reclaim_poke(mgr[rnd(&seed) & 1], -1, 0, &seed);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		struct kvp_manager *m = mgr[rnd(&seed) & 1];
		int err;

		for (uint32_t i = 0; i < RECLAIM_BURST; i++) {
			uint32_t tokens = rnd(&seed) % 4 ? 0 : 1 + i % BT;

			err = kvp_seq_create(m, reclaim_id(me, i), tokens);
			expect("create", err, -EEXIST, -ENOSPC, 0);
			count(OP_CREATE);
			if (i % 4 == 0)
				reclaim_poke(m, me, i, &seed);
		}
		for (uint32_t i = 0; i < RECLAIM_BURST; i++) {
			expect("free", kvp_seq_free(m, reclaim_id(me, i)),
			       -ENOENT, 0, 0);
			count(OP_FREE);
			if (i % 4 == 0)
				reclaim_poke(m, me, i, &seed);
		}
		kvp_thread_flush();
	}
	return NULL;
}

/* --reclaim: the slabs m returned, from kvp_manager_dump's line. */
static unsigned long long slabs_returned(struct kvp_manager *m)
{
	char buf[4096], *p;
	unsigned long long held, returned;
	FILE *f = fmemopen(buf, sizeof(buf), "w");

	if (!f || kvp_manager_dump(m, f))
		fail("kvp_manager_dump\n");
	fputc(0, f);
	fclose(f);
	buf[sizeof(buf) - 1] = 0;
	p = strstr(buf, "  slabs:");
	if (!p || sscanf(p, "  slabs: %llu held, %llu returned", &held,
			 &returned) != 2)
		fail("no slabs line in kvp_manager_dump\n");
	return returned;
}

/* --reclaim: frees every sequence of the threads' ranges. */
static void reclaim_free_all(int nthreads)
{
	for (int k = 0; k < 2; k++)
		for (int t = 0; t < nthreads; t++)
			for (uint32_t i = 0; i < RECLAIM_BURST; i++)
				expect("final free",
				       kvp_seq_free(mgr[k], reclaim_id(t, i)),
				       -ENOENT, 0, 0);
}

/* --reclaim: the slabs both managers returned; fails if none. */
static unsigned long long reclaim_returned(void)
{
	unsigned long long ret =
		slabs_returned(mgr[0]) + slabs_returned(mgr[1]);

	if (ret == 0)
		fail("no slab was returned\n");
	return ret;
}

int main(int argc, char **argv)
{
	struct kvp_layout layout = {.num_layers = 1, .num_kv_heads = 1,
				    .head_dim = 2, .dtype = KVP_F32};
	struct kvp_pool_config cfg = {.block_tokens = BT, .device_id = -1,
				      .layout = &layout};
	struct kvp_pool_stats st;
	uint64_t seed = (uint64_t)time(NULL);
	pthread_t *tids;
	int nthreads, err;
	double seconds;
	bool fork_tree = false, reclaim = false;
	void *(*fn)(void *);

	if (argc < 3) {
		fprintf(stderr, "usage: %s THREADS SECONDS [--blocks N] "
				"[--ids K] [--seed S] "
				"[--fork-tree [--writes 0]] [--reclaim]\n",
			argv[0]);
		return 2;
	}
	nthreads = atoi(argv[1]);
	seconds = atof(argv[2]);
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--fork-tree"))
			fork_tree = true;
		else if (!strcmp(argv[i], "--reclaim"))
			reclaim = true;
		else if (i + 1 == argc)
			break;
		else if (!strcmp(argv[i], "--blocks"))
			num_blocks = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--ids"))
			id_space = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--writes"))
			tree_writes = atoi(argv[++i]);
		else
			i++;
	}
	if (nthreads < 1 || seconds <= 0 || id_space == 0 ||
	    id_space > MAX_IDS) {
		fprintf(stderr, "stress_seq: bad arguments\n");
		return 2;
	}
	cfg.num_blocks = num_blocks;
	if ((err = kvp_pool_create(&cfg, &pool)))
		fail("kvp_pool_create: %s\n", kvp_strerror(err));
	two_managers(pool, mgr); /* they hold the pool now */
	printf("stress_seq: %d threads, %.1f s, %u blocks, %u ids per "
	       "manager, seed %llu%s\n",
	       nthreads, seconds, num_blocks, id_space,
	       (unsigned long long)seed,
	       fork_tree ? ", fork trees" : reclaim ? ", slab reclaims" : "");
	reclaim_threads = nthreads;
	fn = fork_tree ? tree_worker : reclaim ? reclaim_worker : worker;

	tids = calloc((size_t)nthreads, sizeof(*tids));
	for (int i = 0; i < nthreads; i++)
		pthread_create(&tids[i], NULL, fn,
			       (void *)(uintptr_t)(seed + 7919u * (unsigned)i));
	{
		struct timespec ts = {(time_t)seconds,
				      (long)((seconds - (double)(time_t)seconds) *
					     1e9)};

		nanosleep(&ts, NULL);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(tids[i], NULL);

	/* Mid-state check first: both managers still hold sequences. */
	if ((err = kvp_manager_check(mgr[0])))
		fail("kvp_manager_check with live sequences: %s\n",
		     kvp_strerror(err));
	for (int k = 0; k < 2; k++)
		for (uint64_t id = 0; id < id_space; id++)
			expect("final free", kvp_seq_free(mgr[k], id), -ENOENT,
			       0, 0);
	if (reclaim)
		reclaim_free_all(nthreads);
	for (int k = 0; k < 2; k++)
		if ((err = kvp_manager_check(mgr[k])))
			fail("kvp_manager_check: %s\n", kvp_strerror(err));
	if ((err = kvp_pool_check(pool)))
		fail("kvp_pool_check: %s\n", kvp_strerror(err));
	kvp_pool_stats(pool, &st);
	if (st.free != st.total)
		fail("free %llu != total %llu at the end\n",
		     (unsigned long long)st.free, (unsigned long long)st.total);
	printf("stress_seq:");
	for (int i = 0; i < OP_NCOUNTS; i++)
		printf(" %s %llu", op_names[i],
		       (unsigned long long)atomic_load(&counts[i]));
	if (fork_tree)
		printf(" depth %u", atomic_load(&max_depth));
	if (reclaim)
		printf(" slabs returned %llu", reclaim_returned());
	printf(": ok\n");
	kvp_manager_destroy(mgr[0]);
	kvp_manager_destroy(mgr[1]);
	free(tids);
	return 0;
}
