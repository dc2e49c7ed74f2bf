/* SPDX-License-Identifier: MIT */
/*
 * stress_churn.c - validates thread exit: many short-lived threads.
 *
 * usage: stress_churn TOTAL_THREADS CONCURRENT [--blocks N] [--seed S]
 *
 * One ID-only pool (--blocks, default 4096; cache_blocks 32, so every
 * thread parks blocks) and two managers on it.  TOTAL_THREADS threads run
 * one after another, at most CONCURRENT alive at once; the main thread
 * joins finished ones and starts new ones.  Each thread:
 *
 *   - takes a few sequences that earlier (now dead) threads handed over on
 *     a shared list, checks them (token count, block count), appends to
 *     some, forks some and frees them: sequences outlive their creator and
 *     are freed by another thread;
 *   - allocates and frees blocks directly with kvp_pool_alloc/free (extra
 *     references included), so blocks are parked in its cache;
 *   - creates sequences with ids unique to the thread in a random manager,
 *     appends (copy-on-write of forks), forks, truncates, frees some and
 *     hands some live ones to the shared list;
 *   - some threads only read listed sequences (RCU readers that never
 *     attach a block cache);
 *   - ends with a direct allocate/free so its cache is not empty, and
 *     exits without kvp_thread_flush(): thread exit must return the cached
 *     blocks, orphan the cache and unregister the thread from RCU.
 *
 * Midway and at the end, with every worker joined, the main thread (which
 * never allocates) requires kvp_pool_stats(): in_thread_caches == 0 and
 * threads == 0; kvp_pool_check() and both kvp_manager_check() pass.  A
 * checker thread then verifies every listed sequence, that the used blocks
 * are exactly those the listed sequences hold, and that every free block
 * can be allocated in one call (and one more cannot); after it exits the
 * caches must be empty again.  At the end a cleanup thread frees every
 * listed sequence; then free == total, allocs == frees, no sequence is
 * left, and the checks pass again.  Finally the managers are destroyed:
 * kvp_manager_destroy runs an RCU barrier, which walks liburcu's reader
 * registry, so a thread that exited still registered is a use-after-free
 * (caught by ASan).  The peak RSS is printed midway and at the end, so a
 * per-thread leak shows as growth.  Any violation exits 1.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"

#define STRESS_PROG "stress_churn"
#include "stress_common.h"

#define BT 16		/* tokens per block */
#define CACHE_BLOCKS 32 /* per-thread cache capacity */
#define MAX_BATCH 48	/* direct allocation batch (above the cache) */
#define MAX_LOCAL 16	/* sequences a thread keeps at once */
#define MAX_TOKENS 160	/* at creation */
#define LIST_CAP 128	/* handed-over sequences */

static struct kvp_pool *pool;
static struct kvp_manager *mgr[2];
static uint32_t num_blocks = 4096;

/* Sequences handed over by their (possibly dead) creator. */
struct listed {
	int m; /* manager index */
	uint64_t id;
	uint32_t tokens; /* exact: nobody changes a listed sequence */
};
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct listed list[LIST_CAP];
static uint32_t list_n;

enum {
	C_THREADS,
	C_READERS,
	C_TAKEN,
	C_HANDED,
	C_CREATES,
	C_FORKS,
	C_APPENDS,
	C_COWS,
	C_FREES,
	C_DIRECT,
	C_PARKED,
	C_ENOSPC,
	C_NCOUNTS
};
static const char *const count_names[] = {
	"threads", "readers", "taken", "handed", "creates",	   "forks",
	"appends", "cows",    "frees", "direct", "parked_at_exit", "enospc",
};
static _Atomic uint64_t counts[C_NCOUNTS];

/* Finished workers, for the main thread to join. */
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t run_cond = PTHREAD_COND_INITIALIZER;
static int *done_q;
static int done_n;

struct worker {
	pthread_t tid;
	uint32_t num; /* thread number, 0 .. TOTAL-1: its id space */
	int slot;
	uint64_t seed;
};

struct local {
	int m;
	uint64_t id;
	uint32_t tokens;
};

static void count(int c, uint64_t n)
{
	atomic_fetch_add_explicit(&counts[c], n, memory_order_relaxed);
}

static uint32_t nblocks_for(uint32_t tokens)
{
	return (tokens + BT - 1) / BT;
}

/* The sequence must exist with exactly `tokens` tokens. */
static void check_seq(int m, uint64_t id, uint32_t tokens, const char *who)
{
	struct kvp_seq_info info;
	int err = kvp_seq_info(mgr[m], id, &info);

	if (err)
		fail("%s: info of seq %llu (manager %d): %s\n", who,
		     (unsigned long long)id, m, kvp_strerror(err));
	if (info.num_tokens != tokens || info.num_blocks != nblocks_for(tokens))
		fail("%s: seq %llu has %u tokens in %u blocks, want %u in "
		     "%u\n",
		     who, (unsigned long long)id, info.num_tokens,
		     info.num_blocks, tokens, nblocks_for(tokens));
}

static void check_ids(const uint32_t *ids, uint32_t n, const char *what)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= num_blocks)
			fail("%s: block %u out of range\n", what, ids[i]);
}

/* Appends to a sequence this thread owns; false on -ENOSPC. */
static bool append(struct local *s, uint32_t n)
{
	struct kvp_copy cow[1];
	uint32_t ncow = 0;
	int err = kvp_seq_append(mgr[s->m], s->id, n, cow, 1, &ncow);

	if (err == -ENOSPC) {
		count(C_ENOSPC, 1);
		return false;
	}
	if (err)
		fail("append %u to seq %llu: %s\n", n,
		     (unsigned long long)s->id, kvp_strerror(err));
	if (ncow) {
		if (ncow != 1 || cow[0].src == cow[0].dst ||
		    cow[0].src >= num_blocks || cow[0].dst >= num_blocks ||
		    cow[0].tokens == 0 || cow[0].tokens >= BT)
			fail("bad copy {%u, %u, %u} (ncow %u)\n", cow[0].src,
			     cow[0].dst, cow[0].tokens, ncow);
		count(C_COWS, 1);
	}
	s->tokens += n;
	count(C_APPENDS, 1);
	return true;
}

static void free_seq(int m, uint64_t id)
{
	int err = kvp_seq_free(mgr[m], id);

	if (err)
		fail("free seq %llu (manager %d): %s\n", (unsigned long long)id,
		     m, kvp_strerror(err));
	count(C_FREES, 1);
}

/*
 * Direct allocation: a batch of 1 .. max blocks (max <= MAX_BATCH, which is
 * above the cache's capacity), an extra reference on one block, freed in
 * two parts, the extra reference by passing the id twice.
 */
static void direct_round(uint64_t *seed, uint32_t max)
{
	uint32_t ids[MAX_BATCH + 1], n, k;
	int err;

	n = 1 + (uint32_t)(rnd(seed) % max);
	err = kvp_pool_alloc(pool, n, ids);
	if (err == -ENOSPC) {
		count(C_ENOSPC, 1);
		return;
	}
	if (err)
		fail("kvp_pool_alloc(%u): %s\n", n, kvp_strerror(err));
	check_ids(ids, n, "kvp_pool_alloc");
	for (uint32_t i = 0; i < n; i++) {
		/* Exact: nobody else holds these blocks. */
		int rc = kvp_block_refcount(pool, ids[i]);

		if (rc != 1)
			fail("fresh block %u has refcount %d\n", ids[i], rc);
	}
	if ((err = kvp_block_ref(pool, ids[0])))
		fail("kvp_block_ref(%u): %s\n", ids[0], kvp_strerror(err));
	if (kvp_block_refcount(pool, ids[0]) != 2)
		fail("block %u: refcount %d after a ref, want 2\n", ids[0],
		     kvp_block_refcount(pool, ids[0]));
	ids[n] = ids[0]; /* drops the extra reference */
	k = (uint32_t)(rnd(seed) % (n + 1));
	if (k && (err = kvp_pool_free(pool, ids + n + 1 - k, k)))
		fail("kvp_pool_free(%u): %s\n", k, kvp_strerror(err));
	if ((err = kvp_pool_free(pool, ids, n + 1 - k)))
		fail("kvp_pool_free(%u): %s\n", n + 1 - k, kvp_strerror(err));
	count(C_DIRECT, n);
}

/* Takes a few listed sequences of dead threads and finishes them. */
static void take_listed(struct worker *w, struct local *loc, int *nloc,
			uint64_t *next_id)
{
	int want = (int)(rnd(&w->seed) % 4);

	for (int i = 0; i < want; i++) {
		struct listed e;
		struct local s;

		pthread_mutex_lock(&list_lock);
		if (list_n == 0) {
			pthread_mutex_unlock(&list_lock);
			return;
		}
		/* Any entry: not only the newest. */
		{
			uint32_t j = (uint32_t)(rnd(&w->seed) % list_n);

			e = list[j];
			list[j] = list[--list_n];
		}
		pthread_mutex_unlock(&list_lock);
		count(C_TAKEN, 1);

		check_seq(e.m, e.id, e.tokens, "taken");
		s = (struct local){.m = e.m, .id = e.id, .tokens = e.tokens};
		if (rnd(&w->seed) & 1)
			append(&s, 1 + (uint32_t)(rnd(&w->seed) % 40));
		check_seq(s.m, s.id, s.tokens, "taken after append");
		/* A fork of a dead thread's sequence, kept by this one. */
		if (*nloc < MAX_LOCAL && (rnd(&w->seed) % 3) == 0) {
			uint64_t dst = (*next_id)++;
			int err = kvp_seq_fork(mgr[s.m], s.id, dst);

			if (err)
				fail("fork %llu -> %llu: %s\n",
				     (unsigned long long)s.id,
				     (unsigned long long)dst,
				     kvp_strerror(err));
			count(C_FORKS, 1);
			loc[(*nloc)++] = (struct local){
				.m = s.m, .id = dst, .tokens = s.tokens};
		}
		free_seq(s.m, s.id);
	}
}

/* RCU-only thread: reads listed sequences that others may be freeing. */
static void read_listed(struct worker *w)
{
	struct listed e[4];
	uint32_t n = 0;

	pthread_mutex_lock(&list_lock);
	for (; n < 4 && n < list_n; n++)
		e[n] = list[(uint32_t)(rnd(&w->seed) % list_n)];
	pthread_mutex_unlock(&list_lock);
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_seq_info info;
		int err = kvp_seq_info(mgr[e[i].m], e[i].id, &info);

		if (err == -ENOENT)
			continue; /* taken and freed meanwhile */
		if (err)
			fail("reader: info: %s\n", kvp_strerror(err));
		if (info.num_blocks != nblocks_for(info.num_tokens))
			fail("reader: seq %llu: %u tokens in %u blocks\n",
			     (unsigned long long)e[i].id, info.num_tokens,
			     info.num_blocks);
	}
	count(C_READERS, 1);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct local loc[MAX_LOCAL];
	int nloc = 0, ncreate;
	/* Ids unique to this thread: its number in the high bits. */
	uint64_t next_id = ((uint64_t)w->num + 1) << 20;

	if (rnd(&w->seed) % 8 == 0) {
		/* Registers with RCU only; exits without a block cache. */
		read_listed(w);
		goto out;
	}

	take_listed(w, loc, &nloc, &next_id);
	for (int r = 1 + (int)(rnd(&w->seed) % 3); r > 0; r--)
		direct_round(&w->seed, MAX_BATCH);

	/* Create a few sequences in random managers. */
	ncreate = 1 + (int)(rnd(&w->seed) % 4);
	for (int i = 0; i < ncreate && nloc < MAX_LOCAL; i++) {
		struct local s = {
			.m = (int)(rnd(&w->seed) & 1),
			.id = next_id++,
			.tokens = (uint32_t)(rnd(&w->seed) % MAX_TOKENS)};
		int err = kvp_seq_create(mgr[s.m], s.id, s.tokens);

		if (err == -ENOSPC) {
			count(C_ENOSPC, 1);
			continue;
		}
		if (err)
			fail("create seq %llu: %s\n", (unsigned long long)s.id,
			     kvp_strerror(err));
		count(C_CREATES, 1);
		loc[nloc++] = s;
	}
	/* Appends, forks (then copy-on-write on the forks), truncates. */
	for (int i = 0; i < nloc; i++) {
		struct local *s = &loc[i];

		append(s, (uint32_t)(rnd(&w->seed) % 50));
		if (nloc < MAX_LOCAL && rnd(&w->seed) % 2 == 0) {
			struct local f = {.m = s->m,
					  .id = next_id++,
					  .tokens = s->tokens};
			int err = kvp_seq_fork(mgr[s->m], s->id, f.id);

			if (err)
				fail("fork %llu -> %llu: %s\n",
				     (unsigned long long)s->id,
				     (unsigned long long)f.id,
				     kvp_strerror(err));
			count(C_FORKS, 1);
			loc[nloc++] = f;
			/* Copy-on-write if the shared last block is
			 * partially filled. */
			append(&loc[nloc - 1],
			       1 + (uint32_t)(rnd(&w->seed) % 20));
		}
		if (rnd(&w->seed) % 4 == 0 && s->tokens) {
			uint32_t t = (uint32_t)(rnd(&w->seed) % s->tokens);
			int err = kvp_seq_truncate(mgr[s->m], s->id, t);

			if (err)
				fail("truncate seq %llu to %u: %s\n",
				     (unsigned long long)s->id, t,
				     kvp_strerror(err));
			s->tokens = t;
		}
	}
	for (int i = 0; i < nloc; i++)
		check_seq(loc[i].m, loc[i].id, loc[i].tokens, "own");
	/* More direct traffic while sequences are live. */
	direct_round(&w->seed, MAX_BATCH);

	/* Hand over about half (while the list has room), free the rest. */
	for (int i = 0; i < nloc; i++) {
		uint32_t r = (uint32_t)(rnd(&w->seed) % 6);
		bool handed = false;

		if (r >= 2 && r < 5) {
			pthread_mutex_lock(&list_lock);
			if (list_n < LIST_CAP) {
				list[list_n++] = (struct listed){
					.m = loc[i].m,
					.id = loc[i].id,
					.tokens = loc[i].tokens};
				handed = true;
			}
			pthread_mutex_unlock(&list_lock);
		}
		if (handed)
			count(C_HANDED, 1);
		else
			free_seq(loc[i].m, loc[i].id);
	}

	/* Leave blocks parked in this thread's cache: frees of up to half
	 * a cache go into it. */
	direct_round(&w->seed, CACHE_BLOCKS / 2 - 1);
	{
		struct kvp_pool_stats st;

		/* Approximate, but this thread's own count is exact for it
		 * (unless a drain took it: the pool would be nearly full). */
		kvp_pool_stats(pool, &st);
		if (st.in_thread_caches > 0)
			count(C_PARKED, 1);
	}
out:
	count(C_THREADS, 1);
	pthread_mutex_lock(&run_lock);
	done_q[done_n++] = w->slot;
	pthread_cond_signal(&run_cond);
	pthread_mutex_unlock(&run_lock);
	return NULL; /* no kvp_thread_flush(): exit must do it */
}

static long peak_rss_kib(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return -1;
	return ru.ru_maxrss; /* KiB on Linux */
}

/* With no worker alive: nothing parked, no cache attached. */
static void check_quiescent(const char *when, struct kvp_pool_stats *out)
{
	struct kvp_pool_stats st;
	int err;

	kvp_pool_stats(pool, &st);
	if (st.in_thread_caches != 0)
		fail("%s: %llu blocks still parked in thread caches with "
		     "every worker joined (threads %u)\n",
		     when, (unsigned long long)st.in_thread_caches, st.threads);
	if (st.threads != 0)
		fail("%s: %u thread caches still attached with every worker "
		     "joined\n",
		     when, st.threads);
	if (st.free + st.used != st.total || st.total != num_blocks)
		fail("%s: free %llu + used %llu != total %llu\n", when,
		     (unsigned long long)st.free, (unsigned long long)st.used,
		     (unsigned long long)st.total);
	if ((err = kvp_pool_check(pool)))
		fail("%s: kvp_pool_check: %s\n", when, kvp_strerror(err));
	for (int k = 0; k < 2; k++)
		if ((err = kvp_manager_check(mgr[k])))
			fail("%s: kvp_manager_check(manager %d): %s\n", when, k,
			     kvp_strerror(err));
	if (out)
		*out = st;
}

/*
 * Checker thread, with no worker alive: every listed sequence is intact,
 * the used blocks are exactly those they hold, and every free block (parked
 * ones of dead threads included) can be allocated at once.
 */
static void *checker_main(void *arg)
{
	const char *when = arg;
	uint8_t *held = calloc(num_blocks, 1);
	uint32_t *ids = malloc(((size_t)num_blocks + 1) * sizeof(*ids));
	uint32_t n, distinct = 0;
	struct kvp_pool_stats st;
	int err;

	if (!held || !ids)
		fail("out of memory\n");
	for (uint32_t i = 0; i < list_n; i++) {
		check_seq(list[i].m, list[i].id, list[i].tokens, when);
		err = kvp_seq_blocks(mgr[list[i].m], list[i].id, ids,
				     num_blocks, &n);
		if (err)
			fail("%s: blocks of seq %llu: %s\n", when,
			     (unsigned long long)list[i].id, kvp_strerror(err));
		check_ids(ids, n, when);
		for (uint32_t j = 0; j < n; j++)
			if (!held[ids[j]]++)
				distinct++;
	}
	kvp_pool_stats(pool, &st);
	if (st.used != distinct)
		fail("%s: %llu blocks used, but the %u listed sequences hold "
		     "%u\n",
		     when, (unsigned long long)st.used, list_n, distinct);
	n = (uint32_t)st.free;
	if (n) {
		err = kvp_pool_alloc(pool, n, ids);
		if (err)
			fail("%s: allocating all %u free blocks: %s (parked "
			     "%llu)\n",
			     when, n, kvp_strerror(err),
			     (unsigned long long)st.in_thread_caches);
		check_ids(ids, n, when);
		for (uint32_t j = 0; j < n; j++)
			if (held[ids[j]]++)
				fail("%s: allocated block %u is held by a "
				     "sequence\n",
				     when, ids[j]);
		err = kvp_pool_alloc(pool, 1, ids + n);
		if (err != -ENOSPC)
			fail("%s: allocation from an exhausted pool: %s\n",
			     when, err ? kvp_strerror(err) : "succeeded");
		if ((err = kvp_pool_free(pool, ids, n)))
			fail("%s: freeing %u blocks: %s\n", when, n,
			     kvp_strerror(err));
	}
	free(held);
	free(ids);
	return NULL; /* its cache, too, must come back at exit */
}

/* Cleanup thread: frees every listed sequence. */
static void *cleanup_main(void *arg)
{
	(void)arg;
	for (uint32_t i = 0; i < list_n; i++)
		free_seq(list[i].m, list[i].id);
	list_n = 0;
	return NULL;
}

static void run_thread(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	int err = pthread_create(&t, NULL, fn, arg);

	if (err)
		fail("pthread_create: %s\n", strerror(err));
	pthread_join(t, NULL);
}

/* Joins every finished worker; waits for one if `wait` and none is. */
static int reap(struct worker *ws, int *free_slots, int *nfree, bool wait)
{
	int joined = 0;

	pthread_mutex_lock(&run_lock);
	while (wait && done_n == 0)
		pthread_cond_wait(&run_cond, &run_lock);
	while (done_n > 0) {
		int slot = done_q[--done_n];

		pthread_mutex_unlock(&run_lock);
		pthread_join(ws[slot].tid, NULL);
		free_slots[(*nfree)++] = slot;
		joined++;
		pthread_mutex_lock(&run_lock);
	}
	pthread_mutex_unlock(&run_lock);
	return joined;
}

static void midpoint_checks(const char *when)
{
	struct kvp_pool_stats before, after;

	check_quiescent(when, &before);
	run_thread(checker_main, (void *)when);
	check_quiescent(when, &after);
	if (after.used != before.used)
		fail("%s: used %llu after the checker, %llu before\n", when,
		     (unsigned long long)after.used,
		     (unsigned long long)before.used);
}

int main(int argc, char **argv)
{
	struct kvp_pool_config cfg = {.block_tokens = BT,
				      .cache_blocks = CACHE_BLOCKS,
				      .device_id = -1};
	struct kvp_pool_stats st;
	struct kvp_stats ms[2];
	uint64_t seed = (uint64_t)time(NULL);
	struct worker *ws;
	int *free_slots, nfree, total, conc, started = 0, alive = 0, err;
	long rss_mid = -1, rss_end;
	bool mid_done = false;
	uint32_t listed_mid, listed_end;
	struct timespec t0, t1;
	double secs;

	if (argc < 3) {
		fprintf(stderr,
			"usage: %s TOTAL_THREADS CONCURRENT [--blocks "
			"N] [--seed S]\n",
			argv[0]);
		return 2;
	}
	total = atoi(argv[1]);
	conc = atoi(argv[2]);
	for (int i = 3; i < argc; i += 2) {
		if (i + 1 >= argc) {
			fprintf(stderr, "stress_churn: %s needs a value\n",
				argv[i]);
			return 2;
		}
		if (!strcmp(argv[i], "--blocks"))
			num_blocks = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 0);
		else {
			fprintf(stderr, "stress_churn: unknown option %s\n",
				argv[i]);
			return 2;
		}
	}
	if (total < 1 || conc < 1 || num_blocks < CACHE_BLOCKS ||
	    num_blocks > KVP_MAX_BLOCKS) {
		fprintf(stderr, "stress_churn: bad arguments\n");
		return 2;
	}
	if (conc > total)
		conc = total;

	cfg.num_blocks = num_blocks;
	if ((err = kvp_pool_create(&cfg, &pool)))
		fail("kvp_pool_create: %s\n", kvp_strerror(err));
	kvp_pool_stats(pool, &st);
	if (st.cache_blocks != CACHE_BLOCKS)
		fail("cache_blocks %u in effect, want %u\n", st.cache_blocks,
		     CACHE_BLOCKS);
	two_managers(pool, mgr); /* they hold the pool now */
	printf("stress_churn: %d threads, %d at once, %u blocks, cache %u, "
	       "seed %llu\n",
	       total, conc, num_blocks, CACHE_BLOCKS, (unsigned long long)seed);
	fflush(stdout);

	ws = calloc((size_t)conc, sizeof(*ws));
	free_slots = calloc((size_t)conc, sizeof(*free_slots));
	done_q = calloc((size_t)conc, sizeof(*done_q));
	if (!ws || !free_slots || !done_q)
		fail("out of memory\n");
	for (nfree = 0; nfree < conc; nfree++)
		free_slots[nfree] = conc - 1 - nfree;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	listed_mid = 0;
	while (started < total) {
		struct worker *w;

		if (started == total / 2 && !mid_done) {
			/* Midway: let every worker finish, then check. */
			while (alive > 0)
				alive -= reap(ws, free_slots, &nfree, true);
			listed_mid = list_n;
			midpoint_checks("midway");
			rss_mid = peak_rss_kib();
			mid_done = true;
		}
		if (alive == conc)
			alive -= reap(ws, free_slots, &nfree, true);
		else
			alive -= reap(ws, free_slots, &nfree, false);
		w = &ws[free_slots[--nfree]];
		w->slot = (int)(w - ws);
		w->num = (uint32_t)started;
		w->seed = seed + 0x9e3779b97f4a7c15ull * (uint64_t)started;
		err = pthread_create(&w->tid, NULL, worker_main, w);
		if (err)
			fail("pthread_create (thread %d): %s\n", started,
			     strerror(err));
		started++;
		alive++;
	}
	while (alive > 0)
		alive -= reap(ws, free_slots, &nfree, true);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) +
	       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if ((int)atomic_load(&counts[C_THREADS]) != total)
		fail("%llu workers finished, want %d\n",
		     (unsigned long long)atomic_load(&counts[C_THREADS]),
		     total);

	listed_end = list_n;
	midpoint_checks("end");
	run_thread(cleanup_main, NULL);
	check_quiescent("after cleanup", &st);
	if (st.free != st.total)
		fail("free %llu != total %llu after freeing every sequence\n",
		     (unsigned long long)st.free, (unsigned long long)st.total);
	if (st.allocs != st.frees)
		fail("allocs %llu != frees %llu with every block free\n",
		     (unsigned long long)st.allocs,
		     (unsigned long long)st.frees);
	for (int k = 0; k < 2; k++) {
		kvp_manager_stats(mgr[k], &ms[k]);
		if (ms[k].sequences != 0 || ms[k].tokens != 0)
			fail("manager %d: %llu sequences, %llu tokens left\n",
			     k, (unsigned long long)ms[k].sequences,
			     (unsigned long long)ms[k].tokens);
		if (ms[k].seq_creates + ms[k].forks != ms[k].seq_frees)
			fail("manager %d: %llu creates + %llu forks != %llu "
			     "frees\n",
			     k, (unsigned long long)ms[k].seq_creates,
			     (unsigned long long)ms[k].forks,
			     (unsigned long long)ms[k].seq_frees);
		if (ms[k].blocks_used != 0)
			fail("manager %d: %llu blocks used\n", k,
			     (unsigned long long)ms[k].blocks_used);
	}
	/* An RCU barrier: walks the reader registry (dead threads must have
	 * left it). */
	kvp_manager_destroy(mgr[0]);
	kvp_manager_destroy(mgr[1]);
	rss_end = peak_rss_kib();

	printf("stress_churn:");
	for (int i = 0; i < C_NCOUNTS; i++)
		printf(" %s %llu", count_names[i],
		       (unsigned long long)atomic_load(&counts[i]));
	printf("\nstress_churn: %.2f s, listed %u midway %u at the end, pool "
	       "allocs %llu, peak RSS %ld KiB midway %ld KiB at the end: ok\n",
	       secs, listed_mid, listed_end, (unsigned long long)st.allocs,
	       rss_mid, rss_end);
	free(ws);
	free(free_slots);
	free(done_q);
	return 0;
}
