/* SPDX-License-Identifier: MIT */
/*
 * stress_prefix.c - validates the prefix cache under threads.
 *
 * usage: stress_prefix THREADS SECONDS [--blocks N] [--prefixes K]
 *                      [--managers 1|2] [--reset 0|1] [--full 0|1]
 *                      [--retain 0|1] [--scrape 0|1] [--seed S]
 *
 * Two managers (or one) with KVP_PREFIX_CACHE share a data-owning pool
 * small enough (--blocks, default 96, 4 tokens per block) that cached
 * blocks are evicted and revived all the time.  Each worker runs requests
 * (at most two live at once: one and a fork of it) over a few shared
 * token streams: K fixed prefixes (--prefixes, default 4) cut at a random
 * length, followed by one of 16 suffix streams drawn at random from the
 * seed, with or without a tenant salt.  A request's cached prefix is
 * looked up first (kvp_prefix_match: advice, racing everything), then it
 * is created with kvp_seq_create_cached, then appended to in random chunks up to its
 * length, committed now and then, sometimes forked (the fork follows the
 * same stream, so both commit the same hashes: no merge), sometimes
 * truncated (into cached blocks: copy-on-write), and freed.  Another
 * thread calls kvp_prefix_reset now and then (0 or -EBUSY).  With --full 1
 * the pool is first filled with cached blocks, and every request runs to
 * a whole number of blocks and caches them all before it is freed: free
 * blocks are then cached ones, and allocations evict (the steady state of
 * a serving engine); the run fails unless at least a fifth of the blocks
 * allocated were evicted ones (the rest: copies, partial blocks, and the
 * blocks each reset frees as never-cached ones; resets are then paced by
 * the pool's allocations, one per 8 pools' worth, so that their share
 * does not grow with a slow build's slowdown).  With --retain 1 commits give a random leading range
 * of their tokens a random retention priority (pins included, the
 * managers' pin cap small), for no time or a few ticks, and workers
 * advance the retention clocks: expiries, demotions and raises race the
 * releases and evictions; kvp_manager_check then also checks each
 * manager's pin count against its blocks' words, and the pool check that
 * every idle block is in its priority's list.
 *
 * Invariants checked during the run:
 *  - every full block a request holds carries bytes that encode its chain
 *    hash: the request writes them (kvp_seq_write, which must succeed on
 *    its fresh or copied blocks) before committing, checks the blocks it
 *    got as hits at once, and all its blocks again before freeing; a
 *    revival racing an eviction that handed out a block in use would show
 *    as other bytes;
 *  - cached_tokens is a multiple of the block size, below the prompt;
 *  - events: STORED only from the committing thread, with the hashes of
 *    the chain it committed, contiguous, the right parent and block size;
 *    per manager and hash, STORED and REMOVED alternate, starting with
 *    STORED, and CLEARED forgets everything (a model of what a router
 *    would believe, kept with relaxed atomics so that it adds no
 *    happens-before edges that could hide a race from TSan).
 * With --scrape 1 a thread scrapes the metrics during the run (scrape.h:
 * well-formed text, counters that never decrease; at the end, block
 * states that sum to the pool's size).
 * At the end: every request freed, free == total (evictable included),
 * kvp_manager_check and kvp_pool_check clean, the model's cached hashes
 * per manager equal prefix_cached_blocks; then one allocation of the
 * whole pool evicts every cached block and the model must be empty.  The
 * run fails unless some requests hit and the pool evicted cached blocks.
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
#include <unistd.h>

#include "kvpool.h"

#define STRESS_PROG "stress_prefix"
#include "stress_common.h"
#include "scrape.h"

#define BT 4		    /* tokens per block */
#define PREFIX_TOKENS 32    /* each fixed prefix stream */
#define NSUFFIX 16	    /* suffix streams */
#define SUFFIX_TOKENS 32    /* the longest suffix */
#define MAXT (PREFIX_TOKENS + SUFFIX_TOKENS)
#define MAXB (MAXT / BT)
#define HEAD_DIM 8	    /* U8 elements: 8-byte rows */
#define MODEL_SLOTS (1u << 18)

static struct kvp_pool *pool;
static struct kvp_manager *mgr[2];
static int nmgr = 2, do_reset = 1, full_mode, retain_mode, scrape_mode;
static struct scraper scraper;
static uint32_t num_blocks = 96, nprefix = 4;
static uint32_t suffix_tok[NSUFFIX][SUFFIX_TOKENS];
static _Atomic int stop;

/* ------------------------------------------------------------ model */

/*
 * What the events say is cached, per manager and hash.  Slots are
 * claimed by key (the hash's first 8 bytes, never 0) and never freed:
 * the streams are fixed, so the set of hashes is bounded.  A slot's word
 * per manager is gen << 1 | cached; a CLEARED event bumps the manager's
 * generation, which uncaches every slot at once.  Relaxed: events of one
 * hash are ordered by the library (happens-before), and coherence makes a
 * relaxed load see the latest store before it; nothing else is ordered
 * through the model, on purpose.
 */
struct slot {
	_Atomic uint64_t key;
	_Atomic uint64_t word[2];
};

static struct slot *model;
static _Atomic uint64_t gen[2];
static _Atomic uint64_t ev_stored, ev_removed, ev_cleared;

static uint64_t hkey(const struct kvp_hash *h)
{
	uint64_t k;

	memcpy(&k, h->b, sizeof(k));
	return k ? k : 1;
}

static struct slot *model_slot(const struct kvp_hash *h)
{
	uint64_t k = hkey(h);
	uint32_t i = (uint32_t)(k ^ (k >> 29)) & (MODEL_SLOTS - 1);

	for (uint32_t n = 0; n < MODEL_SLOTS; n++, i = (i + 1) &
						     (MODEL_SLOTS - 1)) {
		uint64_t cur = atomic_load_explicit(&model[i].key,
						    memory_order_relaxed);

		if (cur == k)
			return &model[i];
		if (cur == 0 &&
		    atomic_compare_exchange_strong_explicit(
			    &model[i].key, &cur, k, memory_order_relaxed,
			    memory_order_relaxed))
			return &model[i];
		if (cur == k)
			return &model[i];
	}
	fail("event model full\n");
}

/* The chain the calling thread is committing (for STORED checks). */
static __thread const struct kvp_hash *tl_chain;
static __thread uint32_t tl_nchain;

static void check_stored(int mi, const struct kvp_event *ev)
{
	uint32_t i;

	if (!tl_chain)
		fail("STORED event outside kvp_seq_commit (manager %d)\n", mi);
	if (ev->nhashes == 0 || !ev->hashes || ev->block_tokens != BT)
		fail("STORED event with %u hashes, block_tokens %u\n",
		     ev->nhashes, ev->block_tokens);
	for (i = 0; i < tl_nchain; i++)
		if (!memcmp(&tl_chain[i], &ev->hashes[0], sizeof(ev->hashes[0])))
			break;
	if (i + ev->nhashes > tl_nchain)
		fail("STORED hashes are not the committed chain's\n");
	if (memcmp(&tl_chain[i], ev->hashes,
		   ev->nhashes * sizeof(ev->hashes[0])))
		fail("STORED hashes are not contiguous in the chain\n");
	if (i == 0 ? ev->parent != NULL
		   : !ev->parent || memcmp(ev->parent, &tl_chain[i - 1],
					   sizeof(*ev->parent)))
		fail("STORED parent wrong for chain block %u\n", i);
	for (uint32_t k = 0; k < ev->nhashes; k++) {
		struct slot *s = model_slot(&ev->hashes[k]);
		uint64_t g = atomic_load_explicit(&gen[mi],
						  memory_order_relaxed);
		uint64_t w = atomic_load_explicit(&s->word[mi],
						  memory_order_relaxed);

		do {
			if ((w & 1) && (w >> 1) == g)
				fail("manager %d: hash %016llx STORED twice "
				     "without REMOVED or CLEARED\n",
				     mi, (unsigned long long)hkey(
						 &ev->hashes[k]));
		} while (!atomic_compare_exchange_weak_explicit(
			&s->word[mi], &w, g << 1 | 1, memory_order_relaxed,
			memory_order_relaxed));
	}
	atomic_fetch_add_explicit(&ev_stored, 1, memory_order_relaxed);
}

static void check_removed(int mi, const struct kvp_event *ev)
{
	if (ev->nhashes == 0 || !ev->hashes || ev->parent)
		fail("REMOVED event with %u hashes, parent %p\n", ev->nhashes,
		     (const void *)ev->parent);
	for (uint32_t k = 0; k < ev->nhashes; k++) {
		struct slot *s = model_slot(&ev->hashes[k]);
		uint64_t g = atomic_load_explicit(&gen[mi],
						  memory_order_relaxed);
		uint64_t w = g << 1 | 1;

		if (!atomic_compare_exchange_strong_explicit(
			    &s->word[mi], &w, g << 1, memory_order_relaxed,
			    memory_order_relaxed))
			fail("manager %d: hash %016llx REMOVED but not cached "
			     "by the events (word %#llx, generation %llu)\n",
			     mi, (unsigned long long)hkey(&ev->hashes[k]),
			     (unsigned long long)w, (unsigned long long)g);
	}
	atomic_fetch_add_explicit(&ev_removed, ev->nhashes,
				  memory_order_relaxed);
}

static void on_event(const struct kvp_event *ev, void *arg)
{
	int mi = (int)(intptr_t)arg;

	switch (ev->type) {
	case KVP_EVENT_STORED:
		check_stored(mi, ev);
		break;
	case KVP_EVENT_REMOVED:
		check_removed(mi, ev);
		break;
	case KVP_EVENT_CLEARED:
		if (ev->nhashes || ev->hashes)
			fail("CLEARED event with hashes\n");
		atomic_fetch_add_explicit(&gen[mi], 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&ev_cleared, 1,
					  memory_order_relaxed);
		break;
	default:
		fail("unknown event type %d\n", (int)ev->type);
	}
}

/* Hashes the model believes manager mi caches now (quiescent). */
static uint64_t model_cached(int mi)
{
	uint64_t g = atomic_load(&gen[mi]), n = 0;

	for (uint32_t i = 0; i < MODEL_SLOTS; i++) {
		uint64_t w = atomic_load(&model[i].word[mi]);

		n += (w & 1) && (w >> 1) == g;
	}
	return n;
}

/* ------------------------------------------------------------ requests */

struct req {
	bool live;
	int mi;
	uint64_t id;
	uint32_t tok[MAXT];
	uint32_t len;	  /* tokens the request will reach */
	uint32_t ntok;	  /* tokens now */
	uint32_t written; /* full blocks [0, written) hold their bytes */
	struct kvp_hash h[MAXB];
	uint32_t nh;
};

struct counters {
	uint64_t requests, hit_requests, hit_blocks, commits, committed,
		forks, truncates, cows, enospc, verified, appends, unpinned,
		ticks;
};

struct worker {
	pthread_t tid;
	int idx;
	uint64_t seed, next_id;
	struct req r[2];
	struct counters c;
};

/* The bytes of token t of a block with hash h: K and V rows. */
static void pattern(const struct kvp_hash *h, uint32_t t, uint8_t *k,
		    uint8_t *v)
{
	for (uint32_t x = 0; x < HEAD_DIM; x++) {
		k[x] = (uint8_t)(h->b[(x + t * HEAD_DIM) % 32] ^ t);
		v[x] = (uint8_t)(h->b[(x * 7 + t + 5) % 32] ^ (0xA0 + t));
	}
}

static void verify_block(const struct req *r, uint32_t i, const char *when)
{
	uint8_t k[HEAD_DIM], v[HEAD_DIM], wk[HEAD_DIM], wv[HEAD_DIM];

	for (uint32_t t = 0; t < BT; t++) {
		int err = kvp_seq_read(mgr[r->mi], r->id, i * BT + t, 0, k, v);

		if (err)
			fail("read of seq %llx block %u: %s\n",
			     (unsigned long long)r->id, i, kvp_strerror(err));
		pattern(&r->h[i], t, wk, wv);
		if (memcmp(k, wk, HEAD_DIM) || memcmp(v, wv, HEAD_DIM))
			fail("%s: seq %llx block %u token %u holds bytes of "
			     "another hash (a block handed out while in use)\n",
			     when, (unsigned long long)r->id, i, t);
	}
}

static void verify_all(struct worker *w, const struct req *r)
{
	for (uint32_t i = 0; i < r->written; i++)
		verify_block(r, i, "held block");
	w->c.verified++;
}

/* Writes the bytes of the blocks that became full. */
static void write_full(struct req *r)
{
	uint8_t k[HEAD_DIM], v[HEAD_DIM];
	uint32_t full = r->ntok / BT;

	for (; r->written < full; r->written++)
		for (uint32_t t = 0; t < BT; t++) {
			int err;

			pattern(&r->h[r->written], t, k, v);
			err = kvp_seq_write(mgr[r->mi], r->id,
					    r->written * BT + t, 0, k, v);
			if (err)
				fail("write of seq %llx block %u (a fresh or "
				     "copied block): %s\n",
				     (unsigned long long)r->id, r->written,
				     kvp_strerror(err));
		}
}

static void commit(struct worker *w, struct req *r)
{
	int got;

	uint32_t unpinned = 0;

	tl_chain = r->h;
	tl_nchain = r->nh;
	if (retain_mode) {
		/* A leading range at a random priority (a pin one time in
		 * four), for ever or a few ticks. */
		struct kvp_retention rg = {
			.first_token = 0,
			.num_tokens = BT * (uint32_t)(rnd(&w->seed) % (MAXB + 1)),
			.priority = rnd(&w->seed) % 4
					    ? (uint32_t)(rnd(&w->seed) %
							 KVP_RETAIN_PIN)
					    : KVP_RETAIN_PIN,
			.duration = rnd(&w->seed) % 2 ? 0
						      : 1 + rnd(&w->seed) % 8};

		got = kvp_seq_commit_retained(mgr[r->mi], r->id, r->h, r->nh,
					      &rg, 1, &unpinned);
	} else {
		got = kvp_seq_commit(mgr[r->mi], r->id, r->h, r->nh);
	}
	tl_chain = NULL;
	if (got < 0 || (uint32_t)got > r->ntok / BT || unpinned > r->nh)
		fail("commit of seq %llx (%u tokens) returned %d (%u "
		     "unpinned)\n",
		     (unsigned long long)r->id, r->ntok, got, unpinned);
	w->c.unpinned += unpinned;
	w->c.commits++;
	w->c.committed += (uint64_t)got;
}

static void req_free(struct req *r)
{
	int err = kvp_seq_free(mgr[r->mi], r->id);

	if (err)
		fail("free of seq %llx: %s\n", (unsigned long long)r->id,
		     kvp_strerror(err));
	r->live = false;
}

static void req_append(struct worker *w, struct req *r);

static void finish_req(struct worker *w, struct req *r)
{
	/* --full: the request runs to its whole length (a multiple of the
	 * block size) and caches every block before it goes, so that the
	 * pool's free blocks are all cached ones. */
	while (full_mode && r->live && r->ntok < r->len)
		req_append(w, r);
	if (!r->live)
		return; /* the append ran out of blocks and finished it */
	if (full_mode)
		commit(w, r);
	verify_all(w, r);
	req_free(r);
}

/* A fresh request in r; false on -ENOSPC. */
static bool req_start(struct worker *w, struct req *r)
{
	uint64_t x = rnd(&w->seed);
	uint32_t k = (uint32_t)(x % nprefix), plen = (uint32_t)((x >> 8) % 33),
		 s = (uint32_t)((x >> 16) % NSUFFIX),
		 slen = 1 + (uint32_t)((x >> 24) % SUFFIX_TOKENS),
		 prompt, cached = 0, matched = 0;
	bool salted = (x >> 32) & 1;
	struct kvp_hash_keys keys = {.salt = "tenant", .salt_len = 6};
	int n, err;

	r->mi = nmgr == 2 && ((x >> 33) % 4) == 0 ? 1 : 0;
	r->id = (uint64_t)(w->idx + 1) << 40 | w->next_id++;
	if (full_mode && slen < BT)
		slen = BT; /* so that the request fills a whole block */
	r->len = plen + slen;
	if (full_mode)
		r->len -= r->len % BT; /* every block full at the end */
	for (uint32_t i = 0; i < plen; i++)
		r->tok[i] = 1000u * (k + 1) + i;
	for (uint32_t i = 0; i < slen; i++)
		r->tok[plen + i] = suffix_tok[s][i];
	n = kvp_hash_blocks(KVP_HASH_SHA256, NULL, salted ? &keys : NULL,
			    r->tok, r->len, BT, r->h);
	if (n != (int)(r->len / BT))
		fail("kvp_hash_blocks returned %d\n", n);
	r->nh = (uint32_t)n;
	prompt = 1 + (uint32_t)((x >> 40) % r->len);
	/* The match a scheduler asks before it admits: advice that races
	 * evictions and commits, so only its range is checked. */
	err = kvp_prefix_match(mgr[r->mi], r->h, r->nh, &matched);
	if (err || matched > r->nh)
		fail("kvp_prefix_match: %d, %u of %u\n", err, matched, r->nh);
	err = kvp_seq_create_cached(mgr[r->mi], r->id, r->h, r->nh, prompt,
				    &cached);
	if (err == -ENOSPC) {
		w->c.enospc++;
		return false;
	}
	if (err)
		fail("kvp_seq_create_cached: %s\n", kvp_strerror(err));
	if (cached % BT || cached > (prompt - 1) / BT * BT ||
	    cached / BT > r->nh)
		fail("cached_tokens %u for a prompt of %u tokens\n", cached,
		     prompt);
	r->live = true;
	r->ntok = prompt;
	r->written = cached / BT;
	w->c.requests++;
	if (cached) {
		w->c.hit_requests++;
		w->c.hit_blocks += cached / BT;
		for (uint32_t i = 0; i < cached / BT; i++)
			verify_block(r, i, "hit");
	}
	write_full(r);
	if (full_mode || rnd(&w->seed) % 4)
		commit(w, r);
	return true;
}

static void req_append(struct worker *w, struct req *r)
{
	uint32_t n = 1 + (uint32_t)(rnd(&w->seed) % 6), ncow = 0;
	struct kvp_copy cow[1];
	int err;

	if (n > r->len - r->ntok)
		n = r->len - r->ntok;
	err = kvp_seq_append(mgr[r->mi], r->id, n, cow, 1, &ncow);
	if (err == -ENOSPC) {
		w->c.enospc++;
		verify_all(w, r);
		req_free(r);
		return;
	}
	if (err)
		fail("append: %s\n", kvp_strerror(err));
	if (ncow) {
		if (cow[0].src == cow[0].dst || cow[0].tokens != r->ntok % BT)
			fail("bad copy {%u, %u, %u} at %u tokens\n", cow[0].src,
			     cow[0].dst, cow[0].tokens, r->ntok);
		w->c.cows++;
	}
	r->ntok += n;
	w->c.appends++;
	write_full(r);
}

static void req_fork(struct worker *w, struct req *r, struct req *f)
{
	int err;

	*f = *r;
	f->id = (uint64_t)(w->idx + 1) << 40 | w->next_id++;
	err = kvp_seq_fork(mgr[r->mi], r->id, f->id);
	if (err)
		fail("fork: %s\n", kvp_strerror(err));
	f->live = true;
	w->c.forks++;
}

static void req_truncate(struct worker *w, struct req *r)
{
	uint32_t t = (uint32_t)(rnd(&w->seed) % (r->ntok + 1));
	int err = kvp_seq_truncate(mgr[r->mi], r->id, t);

	if (err)
		fail("truncate: %s\n", kvp_strerror(err));
	r->ntok = t;
	if (r->written > t / BT)
		r->written = t / BT;
	w->c.truncates++;
}

static void req_info(const struct req *r)
{
	struct kvp_seq_info in;
	int err = kvp_seq_info(mgr[r->mi], r->id, &in);

	if (err)
		fail("info: %s\n", kvp_strerror(err));
	if (in.num_tokens != r->ntok ||
	    in.num_blocks != (r->ntok + BT - 1) / BT)
		fail("seq %llx: %u tokens in %u blocks, want %u\n",
		     (unsigned long long)r->id, in.num_tokens, in.num_blocks,
		     r->ntok);
}

static void step(struct worker *w, int i)
{
	struct req *r = &w->r[i], *other = &w->r[1 - i];
	uint32_t op = (uint32_t)(rnd(&w->seed) % 100);

	if (r->ntok == r->len || op < 4) {
		finish_req(w, r);
	} else if (op < 60) {
		req_append(w, r);
	} else if (op < 72) {
		commit(w, r);
	} else if (op < 78) {
		req_truncate(w, r);
	} else if (op < 84) {
		if (!other->live)
			req_fork(w, r, other);
	} else if (op < 88) {
		verify_all(w, r);
	} else if (op < 92) {
		req_info(r);
	} else if (retain_mode && op < 94) {
		int err = kvp_manager_tick(mgr[r->mi], 1, NULL);

		if (err)
			fail("kvp_manager_tick: %s\n", kvp_strerror(err));
		w->c.ticks++;
	} else {
		req_append(w, r);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		int i;

		if (!w->r[0].live && !w->r[1].live) {
			if (!req_start(w, &w->r[0]))
				continue;
		}
		i = w->r[0].live && w->r[1].live ? (int)(rnd(&w->seed) & 1)
						 : (w->r[0].live ? 0 : 1);
		step(w, i);
	}
	for (int i = 0; i < 2; i++)
		if (w->r[i].live)
			finish_req(w, &w->r[i]);
	return NULL;
}

/* Resets the prefix caches now and then (mostly the quieter manager). */
static _Atomic uint64_t resets_ok, resets_busy;

/* Whether the pool's allocations grew by `pools` pools' worth since
 * *last, which then moves up to now. */
static bool reset_due(uint64_t *last, uint64_t pools)
{
	struct kvp_pool_stats st;

	kvp_pool_stats(pool, &st);
	if (*last == 0)
		*last = st.allocs;
	if (st.allocs - *last < pools * num_blocks)
		return false;
	*last = st.allocs;
	return true;
}

static void *resetter_main(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;

	uint64_t last = 0;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		long ns = 100000 + (long)(rnd(&seed) % 400000);
		struct timespec ts = {0, ns};
		int mi = nmgr == 2 && rnd(&seed) % 4 ? 1 : 0;
		int err;

		nanosleep(&ts, NULL);
		/* Resets are paced by the work, not by the clock, so that
		 * however slow the build the cache fills between two of
		 * them and allocations evict: at most one per pool's worth
		 * of allocations.  --full: a reset frees every idle cached
		 * block as a never-cached one; one per 8 pools' worth keeps
		 * those a small share of what the run allocates. */
		if (!reset_due(&last, full_mode ? 8 : 1))
			continue;
		err = kvp_prefix_reset(mgr[mi]);
		if (err == 0)
			atomic_fetch_add_explicit(&resets_ok, 1,
						  memory_order_relaxed);
		else if (err == -EBUSY)
			atomic_fetch_add_explicit(&resets_busy, 1,
						  memory_order_relaxed);
		else
			fail("kvp_prefix_reset: %s\n", kvp_strerror(err));
	}
	return NULL;
}

/* ------------------------------------------------------------ main */

/* The pool's evictions before the run (--full's fill evicts none, but
 * counts from here on). */
static uint64_t evictions_at_start;

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s,
			      (long)((s - (double)(time_t)s) * 1e9)};

	nanosleep(&ts, NULL);
}

/*
 * Lets the workers run for `seconds`, then on until the run has evicted
 * a cached block (what the end's check asks for), for at most 10 times
 * as long again: a slow build (TSan on a busy machine) may not have
 * filled the pool in the time asked for.
 */
static void run_for(double seconds)
{
	struct kvp_pool_stats st;
	double extra = 0, most = 10 * seconds;

	sleep_s(seconds);
	for (;;) {
		kvp_pool_stats(pool, &st);
		if (st.cache_evictions > evictions_at_start || extra >= most)
			break;
		sleep_s(0.1);
		extra += 0.1;
	}
	if (extra > 0)
		printf("stress_prefix: ran %.1f s more, until a cached block "
		       "was evicted\n", extra);
}

/*
 * --full: fills the pool with cached blocks before the run (chains of
 * their own, which the workers never ask for), so that from the first
 * allocation on, free blocks are cached ones and allocations evict.
 */
static void fill_pool(void)
{
	struct worker w0;
	struct req *fill;
	uint32_t n = 0, cap = num_blocks;

	memset(&w0, 0, sizeof(w0));
	fill = calloc(cap, sizeof(*fill));
	if (!fill)
		fail("out of memory\n");
	for (uint32_t want = MAXB; want >= 1; want = want > 1 ? 1 : 0) {
		for (;;) {
			struct req *r = &fill[n];
			uint32_t cached;
			int err, nh;

			r->mi = (int)(n % (uint32_t)nmgr);
			r->id = (uint64_t)1 << 62 | n;
			r->len = want * BT;
			for (uint32_t i = 0; i < r->len; i++)
				r->tok[i] = 7000000u + n * MAXT + i;
			nh = kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL,
					     r->tok, r->len, BT, r->h);
			if (nh != (int)want)
				fail("kvp_hash_blocks returned %d\n", nh);
			r->nh = want;
			err = kvp_seq_create_cached(mgr[r->mi], r->id, r->h,
						    r->nh, r->len, &cached);
			if (err == -ENOSPC)
				break;
			if (err || cached)
				fail("filling: create: %s, %u cached\n",
				     kvp_strerror(err), cached);
			r->live = true;
			r->ntok = r->len;
			write_full(r);
			commit(&w0, r);
			n++;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		req_free(&fill[i]);
	free(fill);
}

static void check_all(const char *when)
{
	int err;

	for (int k = 0; k < nmgr; k++)
		if ((err = kvp_manager_check(mgr[k])))
			fail("kvp_manager_check %s: %s\n", when,
			     kvp_strerror(err));
	if ((err = kvp_pool_check(pool)))
		fail("kvp_pool_check %s: %s\n", when, kvp_strerror(err));
}

int main(int argc, char **argv)
{
	struct kvp_layout layout = {.num_layers = 1, .num_kv_heads = 1,
				    .head_dim = HEAD_DIM, .dtype = KVP_U8};
	struct kvp_pool_config cfg = {.block_tokens = BT, .device_id = -1,
				      .layout = &layout};
	struct kvp_manager_config mc = {.policy = KVP_EVICT_LRU,
					.flags = KVP_PREFIX_CACHE};
	struct kvp_pool_stats st;
	struct counters sum;
	uint64_t seed = (uint64_t)time(NULL), hits_total = 0, allocated = 0;
	struct worker *w;
	pthread_t reset_tid;
	uint32_t *all;
	int nthreads, err;
	double seconds;

	if (argc < 3) {
		fprintf(stderr, "usage: %s THREADS SECONDS [--blocks N] "
				"[--prefixes K] [--managers 1|2] [--reset 0|1] "
				"[--full 0|1] [--retain 0|1] [--scrape 0|1] "
				"[--seed S]\n",
			argv[0]);
		return 2;
	}
	nthreads = atoi(argv[1]);
	seconds = atof(argv[2]);
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--blocks"))
			num_blocks = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--prefixes"))
			nprefix = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--managers"))
			nmgr = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--reset"))
			do_reset = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--full"))
			full_mode = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--retain"))
			retain_mode = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--scrape"))
			scrape_mode = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 0);
		else {
			fprintf(stderr, "stress_prefix: unknown option %s\n",
				argv[i]);
			return 2;
		}
	}
	if (nthreads < 1 || seconds <= 0 || nprefix == 0 ||
	    num_blocks < 2 * MAXB || (nmgr != 1 && nmgr != 2)) {
		fprintf(stderr, "stress_prefix: bad arguments (at least %u "
				"blocks)\n",
			2 * MAXB);
		return 2;
	}
	{
		uint64_t s = seed ^ 0x5bd1e995u;

		for (int i = 0; i < NSUFFIX; i++)
			for (int j = 0; j < SUFFIX_TOKENS; j++)
				suffix_tok[i][j] =
					100000u + (uint32_t)(rnd(&s) % 50000);
	}
	model = calloc(MODEL_SLOTS, sizeof(*model));
	w = calloc((size_t)nthreads, sizeof(*w));
	all = calloc(num_blocks, sizeof(*all));
	if (!model || !w || !all)
		fail("out of memory\n");
	cfg.num_blocks = num_blocks;
	if ((err = kvp_pool_create(&cfg, &pool)))
		fail("kvp_pool_create: %s\n", kvp_strerror(err));
	mc.pool = pool;
	/* --retain: a cap the pins reach. */
	mc.max_pinned = retain_mode ? num_blocks / 8 : 0;
	for (int k = 0; k < nmgr; k++) {
		if ((err = kvp_manager_create(&mc, &mgr[k])))
			fail("kvp_manager_create: %s\n", kvp_strerror(err));
		kvp_manager_set_event_cb(mgr[k], on_event,
					 (void *)(intptr_t)k);
	}
	kvp_pool_unref(pool); /* the managers hold it */
	if (full_mode) {
		fill_pool();
		kvp_pool_stats(pool, &st);
		if (st.free != st.evictable || st.evictable != st.total)
			fail("--full: after filling, %llu free, %llu of them "
			     "cached, of %llu\n",
			     (unsigned long long)st.free,
			     (unsigned long long)st.evictable,
			     (unsigned long long)st.total);
		evictions_at_start = st.cache_evictions;
	}
	printf("stress_prefix: %d threads, %.1f s, %u blocks, %u prefixes, "
	       "%d managers, seed %llu\n",
	       nthreads, seconds, num_blocks, nprefix, nmgr,
	       (unsigned long long)seed);
	fflush(stdout);

	for (int i = 0; i < nthreads; i++) {
		w[i].idx = i;
		w[i].seed = seed + 7919u * (unsigned)i;
		if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]))
			fail("pthread_create\n");
	}
	if (scrape_mode)
		scrape_start(&scraper, pool, mgr, (uint32_t)nmgr);
	if (do_reset && pthread_create(&reset_tid, NULL, resetter_main,
				       (void *)(uintptr_t)(seed * 31u + 1)))
		fail("pthread_create\n");
	run_for(seconds);
	atomic_store(&stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(w[i].tid, NULL);
	if (do_reset)
		pthread_join(reset_tid, NULL);
	if (scrape_mode)
		scrape_stop(&scraper);

	memset(&sum, 0, sizeof(sum));
	for (int i = 0; i < nthreads; i++) {
		const uint64_t *a = (const uint64_t *)&w[i].c;
		uint64_t *b = (uint64_t *)&sum;

		for (size_t k = 0; k < sizeof(sum) / sizeof(uint64_t); k++)
			b[k] += a[k];
	}

	/* Every request is freed: the pool is all free, evictable included. */
	check_all("after the run");
	if (scrape_mode)
		scrape_check_quiet(&scraper);
	kvp_pool_stats(pool, &st);
	if (st.free != st.total)
		fail("free %llu != total %llu at the end\n",
		     (unsigned long long)st.free, (unsigned long long)st.total);
	for (int k = 0; k < nmgr; k++) {
		struct kvp_stats ms;

		kvp_manager_stats(mgr[k], &ms);
		hits_total += ms.prefix_hits;
		allocated += ms.blocks_allocated;
		if (ms.prefix_cached_blocks != model_cached(k))
			fail("manager %d caches %llu blocks, its events say "
			     "%llu\n",
			     k, (unsigned long long)ms.prefix_cached_blocks,
			     (unsigned long long)model_cached(k));
		if (ms.sequences != 0)
			fail("manager %d still has %llu sequences\n", k,
			     (unsigned long long)ms.sequences);
	}
	printf("stress_prefix: %llu requests (%llu hit, %llu hit blocks), "
	       "%llu appends, %llu commits (%llu blocks), %llu forks, "
	       "%llu truncates, %llu copies, %llu enospc, %llu verified; "
	       "pool: %llu cache evictions, %llu evictable; resets: %llu ok, "
	       "%llu busy; events: %llu stored, %llu removed, %llu cleared\n",
	       (unsigned long long)sum.requests,
	       (unsigned long long)sum.hit_requests,
	       (unsigned long long)sum.hit_blocks,
	       (unsigned long long)sum.appends,
	       (unsigned long long)sum.commits,
	       (unsigned long long)sum.committed,
	       (unsigned long long)sum.forks,
	       (unsigned long long)sum.truncates,
	       (unsigned long long)sum.cows, (unsigned long long)sum.enospc,
	       (unsigned long long)sum.verified,
	       (unsigned long long)st.cache_evictions,
	       (unsigned long long)st.evictable,
	       (unsigned long long)atomic_load(&resets_ok),
	       (unsigned long long)atomic_load(&resets_busy),
	       (unsigned long long)atomic_load(&ev_stored),
	       (unsigned long long)atomic_load(&ev_removed),
	       (unsigned long long)atomic_load(&ev_cleared));
	if (retain_mode) {
		uint64_t pinned = 0;

		for (int k = 0; k < nmgr; k++) {
			struct kvp_stats ms;

			kvp_manager_stats(mgr[k], &ms);
			pinned += ms.prefix_pinned;
		}
		printf("stress_prefix: --retain: %llu ticks, %llu pins refused "
		       "by the cap, %llu blocks pinned at the end\n",
		       (unsigned long long)sum.ticks,
		       (unsigned long long)sum.unpinned,
		       (unsigned long long)pinned);
		if (sum.ticks == 0 || sum.unpinned == 0)
			fail("--retain: the run never ticked or never reached "
			     "the pin cap\n");
	}
	if (sum.hit_blocks == 0 || hits_total == 0)
		fail("no prefix hits: the run did not exercise revivals\n");
	if (st.cache_evictions == 0)
		fail("no cached block was evicted: the pool is too large\n");
	if (full_mode) {
		/* Blocks the run's allocations took, and how many of them
		 * were evicted: all but the never-cached ones (partial tail
		 * blocks, copies, what resets freed).  The fill's own
		 * allocations are left out of both. */
		uint64_t ev = st.cache_evictions - evictions_at_start,
			 run = allocated - num_blocks;

		printf("stress_prefix: --full: %llu of %llu blocks allocated "
		       "during the run were evicted ones (%.0f%%)\n",
		       (unsigned long long)ev, (unsigned long long)run,
		       run ? 100.0 * (double)ev / (double)run : 0.0);
		if (run == 0 || ev * 5 < run)
			fail("--full: fewer than a fifth of the blocks "
			     "allocated were evicted ones\n");
	}

	/* --retain: pinned blocks are never evicted; a reset forgets
	 * them (and everything else: the model with it). */
	for (int k = 0; retain_mode && k < nmgr; k++)
		if ((err = kvp_prefix_reset(mgr[k])))
			fail("kvp_prefix_reset at the end: %s\n",
			     kvp_strerror(err));
	/* Evict everything: one allocation of the whole pool. */
	if ((err = kvp_pool_alloc(pool, num_blocks, all)))
		fail("allocating the whole pool: %s\n", kvp_strerror(err));
	for (int k = 0; k < nmgr; k++) {
		struct kvp_stats ms;

		kvp_manager_stats(mgr[k], &ms);
		if (ms.prefix_cached_blocks != 0 || model_cached(k) != 0 ||
		    ms.prefix_pinned != 0)
			fail("manager %d after evicting all: %llu cached, "
			     "events say %llu, %llu pinned\n",
			     k, (unsigned long long)ms.prefix_cached_blocks,
			     (unsigned long long)model_cached(k),
			     (unsigned long long)ms.prefix_pinned);
	}
	if ((err = kvp_pool_free(pool, all, num_blocks)))
		fail("freeing the whole pool: %s\n", kvp_strerror(err));
	check_all("after evicting all");
	kvp_pool_stats(pool, &st);
	if (st.free != st.total || st.evictable != 0)
		fail("free %llu of %llu, evictable %llu at the end\n",
		     (unsigned long long)st.free, (unsigned long long)st.total,
		     (unsigned long long)st.evictable);
	printf("stress_prefix: ok\n");
	for (int k = 0; k < nmgr; k++)
		kvp_manager_destroy(mgr[k]);
	free(model);
	free(w);
	free(all);
	return 0;
}
