/* SPDX-License-Identifier: MIT */
/*
 * check_prefix.c - Check unit tests for the prefix cache
 * (kvp_seq_create_cached, kvp_seq_commit, kvp_prefix_reset,
 * kvp_manager_set_event_cb, KVP_PREFIX_CACHE, the prefix_* fields of
 * struct kvp_stats and evictable / cache_evictions of struct
 * kvp_pool_stats).
 *
 * Every expectation below comes from the documentation in kvpool.h and
 * doc/architecture.md ("The prefix store"), and follows the public
 * behaviour of vLLM's prefix caching (only full blocks are cached, hits
 * capped at num_tokens - 1, never-cached free blocks are reused before
 * cached ones, the least recently freed cached block is evicted first, a
 * request's blocks are freed tail first, salts and LoRA names isolate, a
 * failed allocation touches nothing, reset fails while blocks are in use,
 * KV events).
 *
 * Pools have 16 tokens per block and no per-thread caches unless a test
 * says otherwise, so free counts and the eviction order are exact.  Token
 * streams are deterministic: token i of stream s is s * 1000003 + i.
 * Every test ends with kvp_manager_check / kvp_pool_check and destroys
 * its managers, after which every block must be free again.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream */
#endif
#include <check.h>
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

#include "check_common.h"

#define BT CHECK_BLOCK_TOKENS /* tokens per block in every pool below */
#define MAXB 16u	      /* the longest chain a test hashes (blocks) */

/* ------------------------------------------------------------ helpers */

static struct kvp_manager *mkmgr_flags(struct kvp_pool *p, uint32_t flags)
{
	struct kvp_manager_config c;

	memset(&c, 0, sizeof(c));
	c.pool = p;
	c.policy = KVP_EVICT_LRU;
	c.flags = flags;
	return mkmgr_cfg(&c);
}

/* A manager with the prefix cache. */
static struct kvp_manager *mkpmgr(struct kvp_pool *p)
{
	return mkmgr_flags(p, KVP_PREFIX_CACHE);
}

/* A token stream and the chained hashes of its full blocks. */
struct chain {
	uint32_t tok[MAXB * BT + BT];
	uint32_t ntok;
	struct kvp_hash h[MAXB + 1];
	uint32_t nh;
};

/* Stream s, ntok tokens, hashed from the root with keys (may be NULL). */
static struct chain mkchain_keys(uint32_t s, uint32_t ntok,
				 const struct kvp_hash_keys *keys)
{
	struct chain c;
	int rc;

	memset(&c, 0, sizeof(c));
	ck_assert_uint_le(ntok, ARRAY_SIZE(c.tok));
	for (uint32_t i = 0; i < ntok; i++)
		c.tok[i] = s * 1000003u + i;
	c.ntok = ntok;
	rc = kvp_hash_blocks(KVP_HASH_SHA256, NULL, keys, c.tok, ntok, BT,
			     c.h);
	ck_assert_msg(rc == (int)(ntok / BT), "kvp_hash_blocks = %d, want %u",
		      rc, ntok / BT);
	c.nh = (uint32_t)rc;
	return c;
}

static struct chain mkchain(uint32_t s, uint32_t ntok)
{
	return mkchain_keys(s, ntok, NULL);
}

static bool hash_eq(const struct kvp_hash *a, const struct kvp_hash *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

/* kvp_seq_create_cached must succeed; returns *cached_tokens. */
#define ccreate_ok(m, id, c, nh, nt)                                         \
	ccreate_ok_at((m), (id), (c)->h, (nh), (nt), __LINE__)
static uint32_t ccreate_ok_at(struct kvp_manager *m, uint64_t id,
			      const struct kvp_hash *h, uint32_t nh,
			      uint32_t nt, int line)
{
	uint32_t cached = 0xDEAD;
	int rc = kvp_seq_create_cached(m, id, h, nh, nt, &cached);

	ck_assert_msg(rc == 0,
		      "line %d: kvp_seq_create_cached(%llu, %u hashes, %u "
		      "tokens) = %d (%s)",
		      line, ULL(id), nh, nt, rc, kvp_strerror(rc));
	ck_assert_msg(cached % BT == 0 && cached <= (nt ? nt - 1 : 0),
		      "line %d: cached_tokens %u for %u tokens", line, cached,
		      nt);
	return cached;
}

/* kvp_seq_commit must return want. */
#define commit_eq(m, id, h, nh, want)                                        \
	commit_eq_at((m), (id), (h), (nh), (want), __LINE__)
static void commit_eq_at(struct kvp_manager *m, uint64_t id,
			 const struct kvp_hash *h, uint32_t nh, int want,
			 int line)
{
	int rc = kvp_seq_commit(m, id, h, nh);

	ck_assert_msg(rc == want,
		      "line %d: kvp_seq_commit(%llu, %u hashes) = %d (%s), "
		      "want %d",
		      line, ULL(id), nh, rc, kvp_strerror(rc), want);
}

/* Block i of a sequence. */
#define blk(m, id, i) blk_at((m), (id), (i), __LINE__)
static uint32_t blk_at(struct kvp_manager *m, uint64_t id, uint32_t i,
		       int line)
{
	uint32_t ids[MAXB * 4];
	uint32_t n = blocks_ok_at(m, id, ids, ARRAY_SIZE(ids), line);

	ck_assert_msg(i < n, "line %d: seq %llu has %u blocks, not %u", line,
		      ULL(id), n, i + 1);
	return ids[i];
}

#define expect_refs(p, id, want) expect_refs_at((p), (id), (want), __LINE__)
static void expect_refs_at(struct kvp_pool *p, uint32_t id, int want, int line)
{
	int got = kvp_block_refcount(p, id);

	ck_assert_msg(got == want, "line %d: block %u refcount %d, want %d",
		      line, id, got, want);
}

/* Pool free / evictable counts at quiescence. */
#define expect_pool(p, fr, ev) expect_pool_at((p), (fr), (ev), __LINE__)
static void expect_pool_at(struct kvp_pool *p, uint64_t fr, uint64_t ev,
			   int line)
{
	struct kvp_pool_stats st = pstats(p);

	ck_assert_msg(st.free == fr && st.evictable == ev,
		      "line %d: pool free %llu evictable %llu, want %llu %llu",
		      line, ULL(st.free), ULL(st.evictable), ULL(fr), ULL(ev));
}

/*
 * Tokens a new request of ntok tokens over chain c would get from the
 * cache, found with a probe sequence that is freed again.  The probe
 * needs free blocks (never-cached ones, to evict nothing) and revives
 * the hits it finds: it moves them to the most recently freed end.
 */
#define PROBE_ID 999999u
#define probe(m, c, nt) probe_at((m), (c), (nt), __LINE__)
static uint32_t probe_at(struct kvp_manager *m, const struct chain *c,
			 uint32_t nt, int line)
{
	uint32_t got = ccreate_ok_at(m, PROBE_ID, c->h, c->nh, nt, line);

	free_ok_at(m, PROBE_ID, line);
	return got;
}

/* Quiescent checks, then the managers go and every block must be free. */
static void finish2(struct kvp_pool *p, struct kvp_manager *a,
		    struct kvp_manager *b)
{
	struct kvp_pool_stats st;

	if (a)
		mcheck_ok(a);
	if (b)
		mcheck_ok(b);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_manager_destroy(a);
	kvp_manager_destroy(b);
	st = pstats(p);
	ck_assert_msg(st.free == st.total && st.evictable == 0,
		      "after destroy: free %llu of %llu, evictable %llu",
		      ULL(st.free), ULL(st.total), ULL(st.evictable));
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}

static void finish(struct kvp_pool *p, struct kvp_manager *m)
{
	finish2(p, m, NULL);
}

/* ------------------------------------------------------------ events */

struct rec_ev {
	enum kvp_event_type type;
	uint32_t n, block_tokens;
	struct kvp_hash h[32];
	bool has_parent, hashes_null;
	struct kvp_hash parent;
	void *arg;
	uint32_t reused;
};

static struct {
	pthread_mutex_t lock;
	uint32_t n;
	struct rec_ev ev[128];
} evlog = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void evlog_reset(void)
{
	pthread_mutex_lock(&evlog.lock);
	evlog.n = 0;
	pthread_mutex_unlock(&evlog.lock);
}

static void record_cb(const struct kvp_event *ev, void *arg)
{
	struct rec_ev *r;

	pthread_mutex_lock(&evlog.lock);
	if (evlog.n < ARRAY_SIZE(evlog.ev)) {
		r = &evlog.ev[evlog.n++];
		memset(r, 0, sizeof(*r));
		r->type = ev->type;
		r->n = ev->nhashes;
		r->block_tokens = ev->block_tokens;
		r->hashes_null = ev->hashes == NULL;
		for (uint32_t i = 0; ev->hashes && i < ev->nhashes &&
				     i < ARRAY_SIZE(r->h);
		     i++)
			r->h[i] = ev->hashes[i];
		r->has_parent = ev->parent != NULL;
		if (ev->parent)
			r->parent = *ev->parent;
		r->arg = arg;
		r->reused = ev->reused;
	}
	pthread_mutex_unlock(&evlog.lock);
}

static void listen(struct kvp_manager *m, void *arg)
{
	ck_assert_int_eq(kvp_manager_set_event_cb(m, record_cb, arg), 0);
}

/* Event i must be STORED of hashes h[0..n) with the given parent. */
#define expect_stored(i, h, n, parent)                                       \
	expect_stored_at((i), (h), (n), (parent), __LINE__)
static void expect_stored_at(uint32_t i, const struct kvp_hash *h, uint32_t n,
			     const struct kvp_hash *parent, int line)
{
	const struct rec_ev *r;

	ck_assert_msg(i < evlog.n, "line %d: %u events, no event %u", line,
		      evlog.n, i);
	r = &evlog.ev[i];
	ck_assert_msg(r->type == KVP_EVENT_STORED,
		      "line %d: event %u type %d, want STORED", line, i,
		      (int)r->type);
	ck_assert_msg(r->n == n, "line %d: STORED event %u has %u hashes, "
				 "want %u",
		      line, i, r->n, n);
	ck_assert_msg(r->block_tokens == BT,
		      "line %d: STORED block_tokens %u", line, r->block_tokens);
	for (uint32_t k = 0; k < n; k++)
		ck_assert_msg(hash_eq(&r->h[k], &h[k]),
			      "line %d: STORED event %u hash %u differs", line,
			      i, k);
	if (!parent)
		ck_assert_msg(!r->has_parent,
			      "line %d: STORED event %u has a parent, want "
			      "NULL (root)",
			      line, i);
	else
		ck_assert_msg(r->has_parent && hash_eq(&r->parent, parent),
			      "line %d: STORED event %u parent %s", line, i,
			      r->has_parent ? "differs" : "missing");
}

/* The REMOVED hashes of events [from, evlog.n), flattened in order; fails
 * on any other event type there. */
static uint32_t removed_since(uint32_t from, struct kvp_hash *out,
			      uint32_t cap)
{
	uint32_t k = 0;

	for (uint32_t i = from; i < evlog.n; i++) {
		ck_assert_msg(evlog.ev[i].type == KVP_EVENT_REMOVED,
			      "event %u type %d, want REMOVED", i,
			      (int)evlog.ev[i].type);
		ck_assert_msg(!evlog.ev[i].has_parent,
			      "REMOVED event %u has a parent", i);
		for (uint32_t j = 0; j < evlog.ev[i].n; j++) {
			ck_assert_uint_lt(k, cap);
			out[k++] = evlog.ev[i].h[j];
		}
	}
	return k;
}

/* Events [from, evlog.n) must be REMOVED of exactly want[0..n), in order. */
#define expect_removed(from, want, n)                                        \
	expect_removed_at((from), (want), (n), __LINE__)
static void expect_removed_at(uint32_t from, const struct kvp_hash *const *want,
			      uint32_t n, int line)
{
	struct kvp_hash got[64];
	uint32_t k = removed_since(from, got, ARRAY_SIZE(got));

	ck_assert_msg(k == n, "line %d: %u hashes removed, want %u", line, k,
		      n);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_msg(hash_eq(&got[i], want[i]),
			      "line %d: removed hash %u is not the one "
			      "expected (eviction order)",
			      line, i);
}

/* ------------------------------------------------------------ basics */

/* Sequences of 2.5 blocks cache 2; a longer request's hits stop there. */
START_TEST(test_partial_block_not_cached)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(1, 2 * BT + BT / 2), a3 = mkchain(1, 3 * BT);
	struct kvp_hash more[3];

	ck_assert_uint_eq(a.nh, 2);
	ck_assert_uint_eq(ccreate_ok(m, 1, &a, a.nh, a.ntok), 0);
	ck_assert_uint_eq(info_ok(m, 1).num_blocks, 3);
	/* The caller may pass more hashes than full blocks: ignored. */
	memcpy(more, a3.h, sizeof(more));
	commit_eq(m, 1, more, 3, 2);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 2);
	ck_assert_uint_eq(mstats(m).prefix_commits, 2);

	/* A request over 3 full blocks of the same stream hits 2. */
	ck_assert_uint_eq(ccreate_ok(m, 2, &a3, a3.nh, 3 * BT + 1), 2 * BT);
	ck_assert_uint_eq(blk(m, 2, 0), blk(m, 1, 0));
	ck_assert_uint_eq(blk(m, 2, 1), blk(m, 1, 1));
	ck_assert_uint_ne(blk(m, 2, 2), blk(m, 1, 2));
	expect_refs(p, blk(m, 1, 2), 1); /* the partial block is not shared */
	expect_refs(p, blk(m, 2, 2), 1);
	expect_refs(p, blk(m, 1, 0), 2);

	/* Filling the partial block and committing caches it. */
	append_ok(m, 1, BT / 2);
	commit_eq(m, 1, a3.h, a3.nh, 1);
	free_ok(m, 2);
	ck_assert_uint_eq(ccreate_ok(m, 3, &a3, a3.nh, 3 * BT + 1), 3 * BT);
	ck_assert_uint_eq(blk(m, 3, 2), blk(m, 1, 2));
	free_ok(m, 1);
	free_ok(m, 3);
	finish(p, m);
}
END_TEST

/* At most (num_tokens - 1) / block_tokens blocks hit. */
START_TEST(test_hit_cap)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(2, 4 * BT);
	static const struct {
		uint32_t tokens, want;
	} cases[] = {
		{0, 0},		 {1, 0},	  {BT, 0},	{BT + 1, BT},
		{2 * BT, BT},	 {2 * BT + 1, 2 * BT}, {3 * BT, 2 * BT},
		{3 * BT + 1, 3 * BT}, {4 * BT, 3 * BT}, {4 * BT + 1, 4 * BT},
		{9 * BT, 4 * BT},
	};

	create_ok(m, 1, 4 * BT);
	commit_eq(m, 1, a.h, a.nh, 4);
	for (uint32_t i = 0; i < ARRAY_SIZE(cases); i++) {
		uint32_t got = ccreate_ok(m, 100 + i, &a, a.nh, cases[i].tokens);

		ck_assert_msg(got == cases[i].want,
			      "%u tokens over 4 cached blocks: %u cached, "
			      "want %u",
			      cases[i].tokens, got, cases[i].want);
		ck_assert_uint_eq(info_ok(m, 100 + i).num_tokens,
				  cases[i].tokens);
		ck_assert_uint_eq(info_ok(m, 100 + i).num_blocks,
				  (cases[i].tokens + BT - 1) / BT);
		if (cases[i].tokens)
			/* The block of the last token is never a hit. */
			expect_refs(p,
				    blk(m, 100 + i, (cases[i].tokens - 1) / BT),
				    1);
		free_ok(m, 100 + i);
	}
	/* Fewer hashes than full blocks: the hashes bound the hits too. */
	ck_assert_uint_eq(ccreate_ok(m, 200, &a, 2, 4 * BT + 1), 2 * BT);
	ck_assert_uint_eq(ccreate_ok(m, 201, &a, 0, 4 * BT + 1), 0);
	/* hashes NULL with nhashes 0: a plain creation. */
	ck_assert_int_eq(kvp_seq_create_cached(m, 202, NULL, 0, BT + 1, NULL),
			 0);
	ck_assert_uint_eq(info_ok(m, 202).num_blocks, 2);
	free_ok(m, 200);
	free_ok(m, 201);
	free_ok(m, 202);
	free_ok(m, 1);
	finish(p, m);
}
END_TEST

/* A second identical prompt shares the full blocks. */
START_TEST(test_share_identical)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(3, 3 * BT + 5);
	uint32_t b0, b1, b2, b3;

	ck_assert_uint_eq(ccreate_ok(m, 1, &a, a.nh, a.ntok), 0);
	commit_eq(m, 1, a.h, a.nh, 3);
	expect_pool(p, 12, 0);
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, a.nh, a.ntok), 3 * BT);
	expect_pool(p, 11, 0); /* only the partial block was allocated */
	for (uint32_t i = 0; i < 3; i++) {
		ck_assert_uint_eq(blk(m, 2, i), blk(m, 1, i));
		expect_refs(p, blk(m, 1, i), 2);
	}
	b3 = blk(m, 2, 3);
	ck_assert_uint_ne(b3, blk(m, 1, 3));
	expect_refs(p, b3, 1);
	/* The hits count as committed: committing them again adds nothing. */
	commit_eq(m, 2, a.h, a.nh, 0);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 3);
	mcheck_ok(m);

	/* Freeing one sharer leaves the other's references. */
	b0 = blk(m, 1, 0);
	b1 = blk(m, 1, 1);
	b2 = blk(m, 1, 2);
	free_ok(m, 1);
	expect_refs(p, b0, 1);
	expect_refs(p, b1, 1);
	expect_refs(p, b2, 1);
	expect_pool(p, 12, 0);
	free_ok(m, 2);
	finish(p, m);
}
END_TEST

/* Hits after every holder freed revive the same blocks; the pool counts
 * evictable blocks as free. */
START_TEST(test_revival)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(4, 2 * BT + 1);
	struct kvp_pool_stats st;
	uint32_t b0, b1;

	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 2);
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, a.nh, a.ntok), 2 * BT);
	b0 = blk(m, 1, 0);
	b1 = blk(m, 1, 1);
	free_ok(m, 1);
	free_ok(m, 2);
	st = pstats(p);
	ck_assert_uint_eq(st.free, 16);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.evictable, 2);
	ck_assert_uint_eq(st.cache_evictions, 0);
	expect_refs(p, b0, 0);
	expect_refs(p, b1, 0);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 2);
	mcheck_ok(m);

	ck_assert_uint_eq(ccreate_ok(m, 3, &a, a.nh, a.ntok), 2 * BT);
	ck_assert_uint_eq(blk(m, 3, 0), b0);
	ck_assert_uint_eq(blk(m, 3, 1), b1);
	expect_refs(p, b0, 1);
	expect_refs(p, b1, 1);
	expect_pool(p, 13, 0);
	/* Revived twice over. */
	free_ok(m, 3);
	expect_pool(p, 16, 2);
	ck_assert_uint_eq(ccreate_ok(m, 4, &a, a.nh, a.ntok), 2 * BT);
	ck_assert_uint_eq(blk(m, 4, 0), b0);
	free_ok(m, 4);
	ck_assert_uint_eq(pstats(p).cache_evictions, 0);
	finish(p, m);
}
END_TEST

/* ------------------------------------------------------------ eviction */

/*
 * Never-cached free blocks go first; then the least recently freed cached
 * block; a request's blocks are freed tail first.
 */
/*
 * A prefix revived and freed again moves to the most recently freed end
 * as a whole, even when its blocks are still linked in the same order
 * (the release moves them as one run): the other chain goes first.
 */
START_TEST(test_eviction_order_rerelease)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(20, 4 * BT + 1), b = mkchain(21, 4 * BT + 1);

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 4);
	free_ok(m, 1); /* a3 a2 a1 a0 */
	ccreate_ok(m, 2, &b, b.nh, b.ntok);
	commit_eq(m, 2, b.h, b.nh, 4);
	free_ok(m, 2); /* a3 a2 a1 a0 b3 b2 b1 b0 */
	ck_assert_uint_eq(ccreate_ok(m, 3, &a, a.nh, a.ntok), 4 * BT);
	free_ok(m, 3); /* b3 b2 b1 b0 a3 a2 a1 a0 */
	expect_pool(p, 16, 8);
	/* 8 never-cached blocks, then b3 and b2. */
	evlog_reset();
	create_ok(m, 4, 10 * BT);
	{
		const struct kvp_hash *want[] = {&b.h[3], &b.h[2]};

		expect_removed(0, want, 2);
	}
	free_ok(m, 4);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 4 * BT);
	ck_assert_uint_eq(probe(m, &b, b.ntok), 2 * BT);
	finish(p, m);
}
END_TEST

/*
 * A release whose blocks sit in the list as two runs, in the other order
 * (a3 a2 linked after a1 a0): each run moves to the tail in the order
 * freed, so the list ends as if they had moved one by one.
 */
START_TEST(test_eviction_order_two_runs)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(22, 4 * BT + 1);

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 4);
	free_ok(m, 1); /* a3 a2 a1 a0 */
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, 2, 2 * BT + 1), 2 * BT);
	ck_assert_uint_eq(ccreate_ok(m, 3, &a, a.nh, a.ntok), 4 * BT);
	free_ok(m, 3); /* a1 a0 held by 2: a1 a0 a3 a2 */
	ck_assert_uint_eq(ccreate_ok(m, 4, &a, a.nh, a.ntok), 4 * BT);
	free_ok(m, 2);
	free_ok(m, 4); /* a3 a2, then a1 a0: a3 a2 a1 a0 */
	expect_pool(p, 16, 4);
	/* 12 never-cached blocks, then a3 and a2. */
	evlog_reset();
	create_ok(m, 5, 14 * BT);
	{
		const struct kvp_hash *want[] = {&a.h[3], &a.h[2]};

		expect_removed(0, want, 2);
	}
	free_ok(m, 5);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 2 * BT);
	finish(p, m);
}
END_TEST

START_TEST(test_eviction_order)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(10, 4 * BT + 1), b = mkchain(11, 2 * BT + 1),
		     c = mkchain(12, 3 * BT + 1);
	uint32_t a2, a3, from;

	listen(m, NULL);
	evlog_reset();
	ccreate_ok(m, 1, &a, a.nh, a.ntok); /* 5 blocks */
	commit_eq(m, 1, a.h, a.nh, 4);
	a2 = blk(m, 1, 2);
	a3 = blk(m, 1, 3);
	free_ok(m, 1); /* evictable, oldest first: a3 a2 a1 a0 */
	expect_pool(p, 8, 4);
	ck_assert_uint_eq(evlog.n, 1);

	/* 4 never-cached blocks are free: b takes 3 of them, evicts none. */
	ck_assert_uint_eq(ccreate_ok(m, 2, &b, b.nh, b.ntok), 0);
	ck_assert_uint_eq(evlog.n, 1);
	expect_pool(p, 5, 4);
	commit_eq(m, 2, b.h, b.nh, 2);
	free_ok(m, 2); /* now a3 a2 a1 a0 b1 b0 */
	expect_pool(p, 8, 6);

	/* c needs 4: the last 2 never-cached, then a3 and a2, in order. */
	from = evlog.n;
	ck_assert_uint_eq(ccreate_ok(m, 3, &c, c.nh, c.ntok), 0);
	{
		const struct kvp_hash *want[] = {&a.h[3], &a.h[2]};

		expect_removed(from, want, 2);
	}
	/* c holds the evicted blocks now. */
	{
		uint32_t ids[4], n = blocks_ok(m, 3, ids, 4), seen = 0;

		for (uint32_t i = 0; i < n; i++)
			seen += (ids[i] == a2) + (ids[i] == a3);
		ck_assert_uint_eq(seen, 2);
	}
	expect_pool(p, 4, 4);
	ck_assert_uint_eq(pstats(p).cache_evictions, 2);
	ck_assert_uint_eq(mstats(m).prefix_evictions, 2);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 4);
	free_ok(m, 3); /* uncommitted: 4 never-cached blocks free again */
	expect_pool(p, 8, 4);

	/* a hits 2 blocks now, b both. */
	from = evlog.n;
	ck_assert_uint_eq(probe(m, &a, a.ntok), 2 * BT);
	ck_assert_uint_eq(probe(m, &b, b.ntok), 2 * BT);
	ck_assert_uint_eq(evlog.n, from); /* the probes evicted nothing */
	finish(p, m);
}
END_TEST

/* A longer scenario: the REMOVED order over a whole drain of the pool. */
START_TEST(test_eviction_order_drain)
{
	struct kvp_pool *p = mkpool_nc(10);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(20, 3 * BT), b = mkchain(21, 2 * BT),
		     c = mkchain(22, 2 * BT);
	uint32_t ids[10], from;

	listen(m, NULL);
	/* a and b live together; b freed first, then a; c last. */
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	ccreate_ok(m, 2, &b, b.nh, b.ntok);
	commit_eq(m, 1, a.h, a.nh, 3);
	commit_eq(m, 2, b.h, b.nh, 2);
	free_ok(m, 2);
	free_ok(m, 1);
	ccreate_ok(m, 3, &c, c.nh, c.ntok);
	commit_eq(m, 3, c.h, c.nh, 2);
	free_ok(m, 3);
	expect_pool(p, 10, 7);
	evlog_reset();
	from = 0;
	/* 3 never-cached, then b1 b0 a2 a1 a0 c1 c0. */
	ck_assert_int_eq(kvp_pool_alloc(p, 3, ids), 0);
	ck_assert_uint_eq(evlog.n, 0);
	for (uint32_t i = 0; i < 7; i++)
		ck_assert_int_eq(kvp_pool_alloc(p, 1, ids + 3 + i), 0);
	{
		const struct kvp_hash *want[] = {&b.h[1], &b.h[0], &a.h[2],
						 &a.h[1], &a.h[0], &c.h[1],
						 &c.h[0]};

		expect_removed(from, want, 7);
	}
	expect_pool(p, 0, 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, ids), -ENOSPC);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 0);
	ck_assert_uint_eq(mstats(m).prefix_evictions, 7);
	ck_assert_uint_eq(pstats(p).cache_evictions, 7);
	ck_assert_int_eq(kvp_pool_free(p, ids, 10), 0);
	expect_pool(p, 10, 0);
	/* Nothing hits any more. */
	ck_assert_uint_eq(probe(m, &a, a.ntok + 1), 0);
	ck_assert_uint_eq(probe(m, &c, c.ntok + 1), 0);
	finish(p, m);
}
END_TEST

/* An allocation of several blocks evicts them in order in one call, and
 * reports them with REMOVED events in that order. */
START_TEST(test_eviction_batch)
{
	struct kvp_pool *p = mkpool_nc(6);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(23, 5 * BT + 1);
	uint32_t ids[6];

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 5);
	free_ok(m, 1);
	evlog_reset();
	ck_assert_int_eq(kvp_pool_alloc(p, 4, ids), 0);
	{
		const struct kvp_hash *want[] = {&a.h[4], &a.h[3], &a.h[2]};

		expect_removed(0, want, 3);
	}
	ck_assert_int_eq(kvp_pool_free(p, ids, 4), 0);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 2 * BT);
	finish(p, m);
}
END_TEST

/* A request's own hits are taken before its new blocks: it never evicts
 * them (they may be at the head of the eviction order). */
START_TEST(test_hits_not_self_evicted)
{
	struct kvp_pool *p = mkpool_nc(4);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(30, 2 * BT + 1), c = mkchain(31, BT);
	uint32_t from;

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, 2 * BT);
	commit_eq(m, 1, a.h, a.nh, 2);
	free_ok(m, 1); /* a1 a0 */
	ccreate_ok(m, 2, &c, c.nh, BT);
	commit_eq(m, 2, c.h, c.nh, 1);
	free_ok(m, 2); /* a1 a0 c0 */
	create_ok(m, 3, 1); /* the last never-cached block */
	expect_pool(p, 3, 3);
	from = evlog.n;
	/* 3 blocks: hits a0 a1 (the head), then evicts c0. */
	ck_assert_uint_eq(ccreate_ok(m, 4, &a, a.nh, a.ntok), 2 * BT);
	{
		const struct kvp_hash *want[] = {&c.h[0]};

		expect_removed(from, want, 1);
	}
	expect_pool(p, 0, 0);
	free_ok(m, 3);
	free_ok(m, 4);
	finish(p, m);
}
END_TEST

/* With per-thread caches: blocks parked in the caller's cache are
 * never-cached blocks and go before any eviction. */
START_TEST(test_eviction_thread_cache)
{
	struct kvp_pool *p = mkpool(16, 4, 0, NULL);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(32, 4 * BT);
	struct kvp_pool_stats st;
	uint32_t ids[16];

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 4);
	free_ok(m, 1);
	st = pstats(p);
	ck_assert_uint_eq(st.free, 16);
	ck_assert_uint_eq(st.evictable, 4);
	evlog_reset();
	ck_assert_int_eq(kvp_pool_alloc(p, 12, ids), 0);
	ck_assert_uint_eq(evlog.n, 0);
	ck_assert_uint_eq(pstats(p).evictable, 4);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, ids + 12), 0);
	{
		const struct kvp_hash *want[] = {&a.h[3]};

		expect_removed(0, want, 1);
	}
	ck_assert_int_eq(kvp_pool_free(p, ids, 13), 0);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 3 * BT);
	finish(p, m);
}
END_TEST

/* Another thread's parked never-cached blocks are taken only when
 * nothing is evictable. */
struct parker {
	struct kvp_pool *p;
	pthread_barrier_t *bar;
	struct errbuf err;
};

static void *parker_main(void *arg)
{
	struct parker *pk = arg;
	uint32_t ids[4];
	int rc;

	/* Allocate 2 and free them one by one: they stay parked in this
	 * thread's cache. */
	if ((rc = kvp_pool_alloc(pk->p, 2, ids)) != 0)
		wfail(&pk->err, "parker alloc %d", rc);
	else if ((rc = kvp_pool_free(pk->p, ids, 1)) != 0 ||
		 (rc = kvp_pool_free(pk->p, ids + 1, 1)) != 0)
		wfail(&pk->err, "parker free %d", rc);
	pthread_barrier_wait(pk->bar); /* parked */
	pthread_barrier_wait(pk->bar); /* main is done */
	return NULL;
}

START_TEST(test_eviction_other_thread_cache)
{
	struct kvp_pool *p = mkpool(8, 4, 0, NULL);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(33, 3 * BT);
	pthread_barrier_t bar;
	pthread_t t;
	struct parker pk;
	uint32_t ids[8], held[3];
	struct kvp_pool_stats st;

	listen(m, NULL);
	/* Hold every block but 2 that another thread parks. */
	ck_assert_int_eq(kvp_pool_alloc(p, 3, held), 0);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 3);
	memset(&pk, 0, sizeof(pk));
	pk.p = p;
	pk.bar = &bar;
	pthread_barrier_init(&bar, NULL, 2);
	ck_assert_int_eq(pthread_create(&t, NULL, parker_main, &pk), 0);
	pthread_barrier_wait(&bar);
	ck_assert_msg(pk.err.msg[0] == 0, "%s", pk.err.msg);
	free_ok(m, 1); /* 3 evictable, 2 parked elsewhere, 0 elsewhere */
	kvp_thread_flush(); /* nothing of ours parked */
	st = pstats(p);
	ck_assert_uint_eq(st.free, 5);
	ck_assert_uint_eq(st.evictable, 3);
	ck_assert_uint_eq(st.in_thread_caches, 2);
	evlog_reset();
	ck_assert_int_eq(kvp_pool_alloc(p, 3, ids), 0);
	{
		const struct kvp_hash *want[] = {&a.h[2], &a.h[1], &a.h[0]};

		expect_removed(0, want, 3);
	}
	/* Now only the parked ones are left: taken by draining. */
	ck_assert_int_eq(kvp_pool_alloc(p, 2, ids + 3), 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, ids + 5), -ENOSPC);
	pthread_barrier_wait(&bar);
	pthread_join(t, NULL);
	pthread_barrier_destroy(&bar);
	ck_assert_int_eq(kvp_pool_free(p, ids, 5), 0);
	ck_assert_int_eq(kvp_pool_free(p, held, 3), 0);
	finish(p, m);
}
END_TEST

/* ------------------------------------------------------------ keys */

START_TEST(test_salt_isolation)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkpmgr(p);
	struct kvp_hash_keys kx = {.salt = "tenant-x", .salt_len = 8},
			     ky = {.salt = "tenant-y", .salt_len = 8},
			     kx2 = {.salt = "tenant-x", .salt_len = 8};
	struct chain x = mkchain_keys(40, 2 * BT + 1, &kx),
		     y = mkchain_keys(40, 2 * BT + 1, &ky),
		     x2 = mkchain_keys(40, 2 * BT + 1, &kx2),
		     none = mkchain(40, 2 * BT + 1);

	ck_assert(!hash_eq(&x.h[0], &y.h[0]));
	ck_assert(!hash_eq(&x.h[1], &y.h[1]));
	ck_assert(!hash_eq(&x.h[0], &none.h[0]));
	ccreate_ok(m, 1, &x, x.nh, x.ntok);
	commit_eq(m, 1, x.h, x.nh, 2);
	/* Other salt, or none: no sharing; the same salt: shared. */
	ck_assert_uint_eq(ccreate_ok(m, 2, &y, y.nh, y.ntok), 0);
	ck_assert_uint_eq(ccreate_ok(m, 3, &none, none.nh, none.ntok), 0);
	ck_assert_uint_eq(ccreate_ok(m, 4, &x2, x2.nh, x2.ntok), 2 * BT);
	ck_assert_uint_eq(blk(m, 4, 0), blk(m, 1, 0));
	ck_assert_uint_ne(blk(m, 2, 0), blk(m, 1, 0));
	ck_assert_uint_ne(blk(m, 3, 0), blk(m, 1, 0));
	/* The other tenant caches its own copy. */
	commit_eq(m, 2, y.h, y.nh, 2);
	ck_assert_uint_eq(ccreate_ok(m, 5, &y, y.nh, y.ntok), 2 * BT);
	ck_assert_uint_eq(blk(m, 5, 1), blk(m, 2, 1));
	ck_assert_uint_ne(blk(m, 5, 1), blk(m, 4, 1));
	for (uint64_t id = 1; id <= 5; id++)
		free_ok(m, id);
	finish(p, m);
}
END_TEST

START_TEST(test_lora_isolation)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkpmgr(p);
	struct kvp_hash_keys l1 = {.lora = "adapter-1"},
			     l2 = {.lora = "adapter-2"},
			     l1b = {.lora = "adapter-1"},
			     salt_as_lora = {.salt = "adapter-1",
					     .salt_len = 9};
	struct chain a1 = mkchain_keys(41, 2 * BT + 1, &l1),
		     a2 = mkchain_keys(41, 2 * BT + 1, &l2),
		     a1b = mkchain_keys(41, 2 * BT + 1, &l1b),
		     s = mkchain_keys(41, 2 * BT + 1, &salt_as_lora),
		     none = mkchain(41, 2 * BT + 1);

	ccreate_ok(m, 1, &a1, a1.nh, a1.ntok);
	commit_eq(m, 1, a1.h, a1.nh, 2);
	ck_assert_uint_eq(ccreate_ok(m, 2, &a2, a2.nh, a2.ntok), 0);
	ck_assert_uint_eq(ccreate_ok(m, 3, &none, none.nh, none.ntok), 0);
	/* A salt equal to the LoRA name is a different key. */
	ck_assert_uint_eq(ccreate_ok(m, 4, &s, s.nh, s.ntok), 0);
	ck_assert_uint_eq(ccreate_ok(m, 5, &a1b, a1b.nh, a1b.ntok), 2 * BT);
	ck_assert_uint_eq(blk(m, 5, 1), blk(m, 1, 1));
	for (uint64_t id = 1; id <= 5; id++)
		free_ok(m, id);
	finish(p, m);
}
END_TEST

/* Two managers on one pool keep separate maps: the same hash in one does
 * not hit in the other. */
START_TEST(test_managers_separate_maps)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m1 = mkpmgr(p), *m2 = mkpmgr(p);
	struct chain a = mkchain(42, 2 * BT + 1);

	ccreate_ok(m1, 1, &a, a.nh, a.ntok);
	commit_eq(m1, 1, a.h, a.nh, 2);
	ck_assert_uint_eq(ccreate_ok(m2, 1, &a, a.nh, a.ntok), 0);
	commit_eq(m2, 1, a.h, a.nh, 2); /* its own copy */
	ck_assert_uint_ne(blk(m2, 1, 0), blk(m1, 1, 0));
	ck_assert_uint_eq(ccreate_ok(m2, 2, &a, a.nh, a.ntok), 2 * BT);
	ck_assert_uint_eq(blk(m2, 2, 0), blk(m2, 1, 0));
	free_ok(m1, 1);
	free_ok(m2, 1);
	free_ok(m2, 2);
	expect_pool(p, 16, 4);
	finish2(p, m1, m2);
}
END_TEST

/* ------------------------------------------------------------ failure */

/*
 * A creation that cannot allocate its new blocks (-ENOSPC) after taking
 * hits leaves every count and the eviction order as they were.
 */
static void enospc_scenario(bool hits_held)
{
	struct kvp_pool *p = mkpool_nc(9);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(50, 6 * BT + 1), b = mkchain(51, 2 * BT + 1);
	struct kvp_pool_stats before, after;
	struct kvp_stats mb, ma;
	uint32_t ids[8], cached = 77;
	int refs_before[9];
	uint32_t from;

	listen(m, NULL);
	ccreate_ok(m, 1, &a, 3, 3 * BT + 1); /* 4 blocks, 3 full */
	commit_eq(m, 1, a.h, a.nh, 3);
	free_ok(m, 1); /* a2 a1 a0 */
	ccreate_ok(m, 2, &b, b.nh, b.ntok);
	commit_eq(m, 2, b.h, b.nh, 2);
	free_ok(m, 2); /* a2 a1 a0 b1 b0 */
	create_ok(m, 3, 3 * BT); /* 3 of the 4 never-cached blocks */
	if (hits_held)
		/* a0 a1 a2 held by another request: not evictable. */
		ck_assert_uint_eq(ccreate_ok(m, 4, &a, 3, 3 * BT + 1), 3 * BT);
	else
		ck_assert_uint_eq(ccreate_ok(m, 4, &b, 0, 1), 0);
	ck_assert_uint_eq(pstats(p).evictable, hits_held ? 2 : 5);
	ck_assert_uint_eq(pstats(p).free, hits_held ? 2 : 5);
	before = pstats(p);
	mb = mstats(m);
	for (uint32_t i = 0; i < 9; i++)
		refs_before[i] = kvp_block_refcount(p, i);
	from = evlog.n;

	/* 7 blocks: hits a0 a1 (a2 too if cached), then needs more than
	 * the evictable rest. */
	ck_assert_int_eq(kvp_seq_create_cached(m, 9, a.h, a.nh, a.ntok,
					       &cached),
			 -ENOSPC);
	expect_gone(m, 9);
	after = pstats(p);
	ma = mstats(m);
	expect_pool_same(&before, &after);
	ck_assert_uint_eq(after.evictable, before.evictable);
	ck_assert_uint_eq(after.cache_evictions, before.cache_evictions);
	for (uint32_t i = 0; i < 9; i++)
		ck_assert_msg(kvp_block_refcount(p, i) == refs_before[i],
			      "block %u refcount %d, was %d", i,
			      kvp_block_refcount(p, i), refs_before[i]);
	ck_assert_uint_eq(evlog.n, from); /* nothing evicted */
	ck_assert_uint_eq(ma.prefix_cached_blocks, mb.prefix_cached_blocks);
	ck_assert_uint_eq(ma.prefix_hits, mb.prefix_hits);
	ck_assert_uint_eq(ma.prefix_queries, mb.prefix_queries);
	ck_assert_uint_eq(ma.seq_creates, mb.seq_creates);
	ck_assert_uint_eq(ma.blocks_allocated, mb.blocks_allocated);
	mcheck_ok(m);

	/* The eviction order is unchanged: drain it one block at a time. */
	if (hits_held) {
		const struct kvp_hash *want[] = {&b.h[1], &b.h[0]};

		ck_assert_int_eq(kvp_pool_alloc(p, 1, ids), 0);
		ck_assert_int_eq(kvp_pool_alloc(p, 1, ids + 1), 0);
		expect_removed(from, want, 2);
		ck_assert_int_eq(kvp_pool_free(p, ids, 2), 0);
	} else {
		const struct kvp_hash *want[] = {&a.h[2], &a.h[1], &a.h[0],
						 &b.h[1], &b.h[0]};

		for (uint32_t i = 0; i < 5; i++)
			ck_assert_int_eq(kvp_pool_alloc(p, 1, ids + i), 0);
		expect_removed(from, want, 5);
		ck_assert_int_eq(kvp_pool_free(p, ids, 5), 0);
	}
	free_ok(m, 3);
	free_ok(m, 4);
	finish(p, m);
}

START_TEST(test_enospc_with_evictable_hits)
{
	enospc_scenario(false);
}
END_TEST

START_TEST(test_enospc_with_held_hits)
{
	enospc_scenario(true);
}
END_TEST

/* -EEXIST takes no hit and moves nothing. */
START_TEST(test_eexist_unchanged)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(52, 2 * BT + 1), z = mkchain(53, BT);
	struct kvp_pool_stats before;
	uint32_t a0, a1, ids[2];

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 2);
	a0 = blk(m, 1, 0);
	a1 = blk(m, 1, 1);
	free_ok(m, 1); /* a1 a0 */
	ccreate_ok(m, 2, &z, z.nh, z.ntok);
	commit_eq(m, 2, z.h, z.nh, 1); /* a1 a0 z0 once freed */
	free_ok(m, 2);
	create_ok(m, 7, 1);
	before = pstats(p);
	ck_assert_int_eq(kvp_seq_create_cached(m, 7, a.h, a.nh, a.ntok, NULL),
			 -EEXIST);
	{ struct kvp_pool_stats now = pstats(p); expect_pool_same(&before, &now); }
	ck_assert_uint_eq(pstats(p).evictable, 3);
	expect_refs(p, a0, 0);
	expect_refs(p, a1, 0);
	ck_assert_uint_eq(info_ok(m, 7).num_tokens, 1);
	/* The order is still a1 a0 z0. */
	evlog_reset();
	create_ok(m, 8, 4 * BT); /* takes 4 never-cached */
	ck_assert_int_eq(kvp_pool_alloc(p, 2, ids), 0);
	{
		const struct kvp_hash *want[] = {&a.h[1], &a.h[0]};

		expect_removed(0, want, 2);
	}
	ck_assert_int_eq(kvp_pool_free(p, ids, 2), 0);
	free_ok(m, 7);
	free_ok(m, 8);
	finish(p, m);
}
END_TEST

/* A creation larger than the pool fails whatever the cache holds. */
START_TEST(test_enospc_too_large)
{
	struct kvp_pool *p = mkpool_nc(4);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(54, 4 * BT);

	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 4);
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, a.h, a.nh, 4 * BT + 1,
					       NULL),
			 -ENOSPC);
	expect_gone(m, 2);
	expect_refs(p, blk(m, 1, 0), 1);
	free_ok(m, 1);
	expect_pool(p, 4, 4);
	finish(p, m);
}
END_TEST

/* ------------------------------------------------------------ reset */

START_TEST(test_reset)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(60, 3 * BT + 1);
	struct kvp_stats before;

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 3);
	ccreate_ok(m, 2, &a, a.nh, a.ntok);
	free_ok(m, 2);
	evlog_reset();
	before = mstats(m);
	/* Busy: seq 1 holds cached blocks; nothing changes. */
	ck_assert_int_eq(kvp_prefix_reset(m), -EBUSY);
	ck_assert_uint_eq(evlog.n, 0);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks,
			  before.prefix_cached_blocks);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 3 * BT);
	expect_refs(p, blk(m, 1, 0), 1);

	/* Busy also when only one of them is referenced. */
	free_ok(m, 1);
	ccreate_ok(m, 3, &a, 1, BT + 1); /* holds a0 only */
	ck_assert_int_eq(kvp_prefix_reset(m), -EBUSY);
	free_ok(m, 3);
	expect_pool(p, 16, 3);
	evlog_reset();
	ck_assert_int_eq(kvp_prefix_reset(m), 0);
	ck_assert_uint_eq(evlog.n, 1);
	ck_assert_int_eq(evlog.ev[0].type, KVP_EVENT_CLEARED);
	ck_assert(evlog.ev[0].hashes_null);
	ck_assert_uint_eq(evlog.ev[0].n, 0);
	expect_pool(p, 16, 0);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 0);
	ck_assert_uint_eq(pstats(p).cache_evictions, 0); /* not evictions */
	mcheck_ok(m);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 0);
	/* Nothing to forget: still 0, and CLEARED again. */
	evlog_reset();
	ck_assert_int_eq(kvp_prefix_reset(m), 0);
	ck_assert_uint_eq(evlog.n, 1);
	ck_assert_int_eq(evlog.ev[0].type, KVP_EVENT_CLEARED);
	/* The cache works after a reset. */
	ccreate_ok(m, 4, &a, a.nh, a.ntok);
	commit_eq(m, 4, a.h, a.nh, 3);
	free_ok(m, 4);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 3 * BT);
	finish(p, m);
}
END_TEST

/* A reset forgets only its own manager's blocks. */
START_TEST(test_reset_other_manager)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m1 = mkpmgr(p), *m2 = mkpmgr(p);
	struct chain a = mkchain(61, 2 * BT + 1);

	ccreate_ok(m1, 1, &a, a.nh, a.ntok);
	commit_eq(m1, 1, a.h, a.nh, 2);
	ccreate_ok(m2, 1, &a, a.nh, a.ntok);
	commit_eq(m2, 1, a.h, a.nh, 2);
	free_ok(m2, 1);
	/* m1's blocks are busy, m2's are not. */
	ck_assert_int_eq(kvp_prefix_reset(m2), 0);
	ck_assert_int_eq(kvp_prefix_reset(m1), -EBUSY);
	ck_assert_uint_eq(mstats(m1).prefix_cached_blocks, 2);
	ck_assert_uint_eq(mstats(m2).prefix_cached_blocks, 0);
	expect_pool(p, 13, 0);
	free_ok(m1, 1);
	finish2(p, m1, m2);
}
END_TEST

/* ------------------------------------------------------------ events */

START_TEST(test_events_stored)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(70, 4 * BT + 3);
	int tag;

	listen(m, &tag);
	evlog_reset();
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	ck_assert_uint_eq(evlog.n, 0); /* creation stores nothing */
	commit_eq(m, 1, a.h, 1, 1);
	expect_stored(0, a.h, 1, NULL);
	ck_assert_ptr_eq(evlog.ev[0].arg, &tag);
	commit_eq(m, 1, a.h, 3, 2);
	expect_stored(1, a.h + 1, 2, &a.h[0]);
	commit_eq(m, 1, a.h, a.nh, 1);
	expect_stored(2, a.h + 3, 1, &a.h[2]);
	commit_eq(m, 1, a.h, a.nh, 0);
	ck_assert_uint_eq(evlog.n, 3);

	/* A hit request's commit stores only its new blocks. */
	{
		struct chain b = mkchain(70, 6 * BT);

		ck_assert_uint_eq(ccreate_ok(m, 2, &b, b.nh, b.ntok), 4 * BT);
		commit_eq(m, 2, b.h, b.nh, 2);
		expect_stored(3, b.h + 4, 2, &b.h[3]);
	}
	free_ok(m, 1);
	free_ok(m, 2);
	finish(p, m);
}
END_TEST

/*
 * KVP_EMIT_CACHED_EVENTS: a creation that reuses cached blocks reports
 * them as one STORED from the root (reused 1); a miss, a plain create and
 * a manager without the flag report nothing; the flag needs the cache.
 */
START_TEST(test_events_reused)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkmgr_flags(p, KVP_PREFIX_CACHE |
						KVP_EMIT_CACHED_EVENTS);
	struct kvp_manager *plain = mkpmgr(p), *bad = NULL;
	struct kvp_manager_config c;
	struct chain a = mkchain(73, 4 * BT), b = mkchain(74, 2 * BT);

	memset(&c, 0, sizeof(c));
	c.pool = p;
	c.flags = KVP_EMIT_CACHED_EVENTS;
	ck_assert_int_eq(kvp_manager_create(&c, &bad), -EINVAL);
	ck_assert_ptr_null(bad);
	listen(m, NULL);
	ck_assert_int_eq(kvp_manager_set_event_cb(plain, record_cb, NULL), 0);
	evlog_reset();
	ck_assert_uint_eq(ccreate_ok(m, 1, &a, a.nh, a.ntok), 0);
	ck_assert_uint_eq(evlog.n, 0); /* a miss reuses nothing */
	commit_eq(m, 1, a.h, a.nh, 4);
	expect_stored(0, a.h, 4, NULL);
	ck_assert_uint_eq(evlog.ev[0].reused, 0);
	/* A hit of 3 blocks (the last token is computed): one event. */
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, a.nh, a.ntok), 3 * BT);
	ck_assert_uint_eq(evlog.n, 2);
	expect_stored(1, a.h, 3, NULL);
	ck_assert_uint_eq(evlog.ev[1].reused, 1);
	ck_assert_uint_eq(ccreate_ok(m, 3, &b, b.nh, b.ntok), 0);
	create_ok(m, 4, 2 * BT);
	ck_assert_uint_eq(evlog.n, 2);
	/* The same hit on a manager without the flag: its own cache is
	 * empty, so commit there, then hit: still one STORED only. */
	ccreate_ok(plain, 1, &b, b.nh, b.ntok);
	commit_eq(plain, 1, b.h, b.nh, 2);
	ck_assert_uint_eq(ccreate_ok(plain, 2, &b, b.nh, b.ntok), BT);
	ck_assert_uint_eq(evlog.n, 3);
	ck_assert_uint_eq(evlog.ev[2].reused, 0);
	for (uint64_t id = 1; id <= 4; id++)
		free_ok(m, id);
	free_ok(plain, 1);
	free_ok(plain, 2);
	finish2(p, m, plain);
}
END_TEST

/* One STORED event per contiguous run of newly cached blocks. */
START_TEST(test_events_runs)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(71, 5 * BT), q = mkchain(72, BT);
	struct kvp_hash yh[2];

	listen(m, NULL);
	/* Seq 9's block 1 caches a2 (any hash may be committed). */
	yh[0] = q.h[0];
	yh[1] = a.h[2];
	create_ok(m, 9, 2 * BT);
	commit_eq(m, 9, yh, 2, 2);
	evlog_reset();
	/* Seq 1: a0 a1 stored, a2 taken (no merge), a3 a4 stored. */
	create_ok(m, 1, 5 * BT);
	commit_eq(m, 1, a.h, a.nh, 4);
	ck_assert_uint_eq(evlog.n, 2);
	expect_stored(0, a.h, 2, NULL);
	expect_stored(1, a.h + 3, 2, &a.h[2]);
	/* a2 still maps to seq 9's block; seq 1's block 2 is not cached. */
	free_ok(m, 1);
	ck_assert_uint_eq(pstats(p).evictable, 4);
	expect_refs(p, blk(m, 9, 1), 1);
	{
		struct kvp_seq_info in;
		uint32_t cached = ccreate_ok(m, 2, &a, a.nh, a.ntok + 1);

		ck_assert_uint_eq(cached, 5 * BT);
		ck_assert_uint_eq(blk(m, 2, 2), blk(m, 9, 1));
		expect_refs(p, blk(m, 9, 1), 2);
		in = info_ok(m, 2);
		ck_assert_uint_eq(in.num_blocks, 6);
	}
	free_ok(m, 2);
	free_ok(m, 9);

	/* A run closed by a skipped block has its own parent: seq 8 holds
	 * b0 and b3; seq 3 stores b1 b2 (parent b0), then b4 (parent b3). */
	{
		struct chain c = mkchain(76, 5 * BT);
		struct kvp_hash zh[2] = {c.h[0], c.h[3]};

		create_ok(m, 8, 2 * BT);
		commit_eq(m, 8, zh, 2, 2);
		evlog_reset();
		create_ok(m, 3, 5 * BT);
		commit_eq(m, 3, c.h, c.nh, 3);
		ck_assert_uint_eq(evlog.n, 2);
		expect_stored(0, c.h + 1, 2, &c.h[0]);
		expect_stored(1, c.h + 4, 1, &c.h[3]);
		free_ok(m, 3);
		free_ok(m, 8);
	}
	finish(p, m);
}
END_TEST

/* A block whose hash is already cached by another block stays uncached
 * (no merge), and commit counts it out. */
START_TEST(test_commit_no_merge)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(73, 3 * BT);
	uint32_t b1;

	listen(m, NULL);
	create_ok(m, 1, 3 * BT);
	create_ok(m, 2, 3 * BT);
	commit_eq(m, 1, a.h, 2, 2);
	evlog_reset();
	commit_eq(m, 2, a.h, a.nh, 1); /* only block 2 */
	ck_assert_uint_eq(evlog.n, 1);
	expect_stored(0, a.h + 2, 1, &a.h[1]);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 3);
	b1 = blk(m, 2, 1);
	free_ok(m, 2);
	/* Seq 2's blocks 0 and 1 were never cached: free, not evictable. */
	expect_pool(p, 16 - 3, 1);
	expect_refs(p, b1, 0);
	/* A hit takes seq 1's blocks, not seq 2's. */
	ck_assert_uint_eq(ccreate_ok(m, 3, &a, a.nh, a.ntok), 2 * BT);
	ck_assert_uint_eq(blk(m, 3, 0), blk(m, 1, 0));
	ck_assert_uint_eq(blk(m, 3, 1), blk(m, 1, 1));
	/* Seq 1's block 2 stays uncached: seq 2's old block has a2. */
	commit_eq(m, 1, a.h, a.nh, 0);
	free_ok(m, 1);
	free_ok(m, 3);
	finish(p, m);
}
END_TEST

START_TEST(test_events_removed_and_cleared)
{
	struct kvp_pool *p = mkpool_nc(4);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(74, 2 * BT), b = mkchain(75, BT);
	uint32_t ids[4];

	listen(m, NULL);
	evlog_reset();
	create_ok(m, 1, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 2);
	free_ok(m, 1);
	create_ok(m, 2, b.ntok);
	commit_eq(m, 2, b.h, b.nh, 1);
	free_ok(m, 2);
	ck_assert_uint_eq(evlog.n, 2);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, ids), 0); /* never-cached */
	ck_assert_uint_eq(evlog.n, 2);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, ids + 1), 0);
	ck_assert_uint_eq(evlog.n, 3);
	ck_assert_int_eq(evlog.ev[2].type, KVP_EVENT_REMOVED);
	ck_assert_uint_eq(evlog.ev[2].n, 1);
	ck_assert(hash_eq(&evlog.ev[2].h[0], &a.h[1]));
	ck_assert_int_eq(kvp_pool_free(p, ids, 2), 0);
	ck_assert_int_eq(kvp_prefix_reset(m), 0);
	ck_assert_uint_eq(evlog.n, 4);
	ck_assert_int_eq(evlog.ev[3].type, KVP_EVENT_CLEARED);
	/* Cleared blocks are no longer cached: nothing to remove later. */
	ck_assert_int_eq(kvp_pool_alloc(p, 4, ids), 0);
	ck_assert_uint_eq(evlog.n, 4);
	ck_assert_int_eq(kvp_pool_free(p, ids, 4), 0);
	/* Without a callback nothing is reported. */
	ck_assert_int_eq(kvp_manager_set_event_cb(m, NULL, NULL), 0);
	create_ok(m, 3, a.ntok);
	commit_eq(m, 3, a.h, a.nh, 2);
	free_ok(m, 3);
	ck_assert_int_eq(kvp_pool_alloc(p, 4, ids), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, 4), 0);
	ck_assert_uint_eq(evlog.n, 4);
	ck_assert_uint_eq(mstats(m).prefix_evictions, 3);
	finish(p, m);
}
END_TEST

/* Eviction by another manager's allocation removes the hash from the
 * owner, whose callback reports it. */
START_TEST(test_cross_manager_eviction)
{
	struct kvp_pool *p = mkpool_nc(6);
	struct kvp_manager *m1 = mkpmgr(p), *m2 = mkmgr_flags(p, 0),
			   *m3 = mkpmgr(p);
	struct chain a = mkchain(80, 3 * BT + 1);
	int tag1, tag3;

	listen(m1, &tag1);
	listen(m3, &tag3);
	ccreate_ok(m1, 1, &a, a.nh, a.ntok);
	commit_eq(m1, 1, a.h, a.nh, 3);
	free_ok(m1, 1);
	evlog_reset();
	/* A plain manager's creation: 3 never-cached + 1 eviction. */
	create_ok(m2, 1, 4 * BT);
	ck_assert_uint_eq(evlog.n, 1);
	ck_assert_ptr_eq(evlog.ev[0].arg, &tag1);
	{
		const struct kvp_hash *want[] = {&a.h[2]};

		expect_removed(0, want, 1);
	}
	ck_assert_uint_eq(mstats(m1).prefix_evictions, 1);
	ck_assert_uint_eq(mstats(m1).prefix_cached_blocks, 2);
	ck_assert_uint_eq(mstats(m2).prefix_evictions, 0);
	ck_assert_uint_eq(pstats(p).cache_evictions, 1);
	/* Another prefix manager's creation evicts the next. */
	ck_assert_uint_eq(ccreate_ok(m3, 1, &a, a.nh, BT), 0);
	ck_assert_uint_eq(evlog.n, 2);
	ck_assert_ptr_eq(evlog.ev[1].arg, &tag1);
	ck_assert(hash_eq(&evlog.ev[1].h[0], &a.h[1]));
	free_ok(m2, 1);
	/* m1 hits only a0 now. */
	ck_assert_uint_eq(probe(m1, &a, a.ntok), BT);
	free_ok(m3, 1);
	mcheck_ok(m3);
	kvp_manager_destroy(m3);
	finish2(p, m1, m2);
}
END_TEST

/* ------------------------------------------------------------ commit */

START_TEST(test_commit_basic)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(90, 5 * BT);

	create_ok(m, 1, 2 * BT + 8);
	commit_eq(m, 1, a.h, 0, 0);
	commit_eq(m, 1, NULL, 0, 0);
	commit_eq(m, 1, a.h, 1, 1);
	commit_eq(m, 1, a.h, a.nh, 1); /* block 1; 2 is partial */
	commit_eq(m, 1, a.h, a.nh, 0);
	ck_assert_uint_eq(mstats(m).prefix_commits, 2);
	append_ok(m, 1, 8 + BT); /* blocks 2 and 3 full */
	commit_eq(m, 1, a.h, 3, 1);
	commit_eq(m, 1, a.h, a.nh, 1);
	ck_assert_uint_eq(mstats(m).prefix_commits, 4);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 4);
	free_ok(m, 1);
	expect_pool(p, 16, 4);
	finish(p, m);
}
END_TEST

/* A stream-trimmed sequence cannot commit; a trim that removed nothing
 * leaves it able to. */
START_TEST(test_commit_after_trim)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(91, 8 * BT);
	uint32_t gone = 99;

	create_ok(m, 1, 8 * BT);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 1, BT, 8 * BT, &gone), 0);
	ck_assert_uint_eq(gone, 0);
	commit_eq(m, 1, a.h, 2, 2);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 1, BT, 2 * BT, &gone), 0);
	ck_assert_uint_eq(gone, 5 * BT);
	commit_eq(m, 1, a.h, a.nh, -EINVAL);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 2);
	/* A fork inherits it. */
	fork_ok(m, 1, 2);
	commit_eq(m, 2, a.h, a.nh, -EINVAL);
	free_ok(m, 1);
	free_ok(m, 2);
	/* a0 stayed cached (block 0 was kept), a1 was trimmed: evictable. */
	expect_pool(p, 16, 2);
	finish(p, m);
}
END_TEST

/* After a rollback, a commit registers only blocks past the kept ones. */
START_TEST(test_commit_after_truncate)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(92, 4 * BT), a2 = mkchain(93, 4 * BT);
	struct chain mix;

	listen(m, NULL);
	/* mix: a's first 2 blocks, then other tokens. */
	mix = a;
	memcpy(mix.tok + 2 * BT, a2.tok + 2 * BT, 2 * BT * sizeof(uint32_t));
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, mix.tok,
					 4 * BT, BT, mix.h),
			 4);
	ck_assert(hash_eq(&mix.h[1], &a.h[1]));
	ck_assert(!hash_eq(&mix.h[2], &a.h[2]));
	create_ok(m, 1, 4 * BT);
	commit_eq(m, 1, a.h, a.nh, 4);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 2 * BT), 0);
	expect_pool(p, 16 - 2, 2); /* a2 a3 evictable */
	append_ok(m, 1, 2 * BT);
	evlog_reset();
	commit_eq(m, 1, mix.h, mix.nh, 2);
	ck_assert_uint_eq(evlog.n, 1);
	expect_stored(0, mix.h + 2, 2, &a.h[1]);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 6);
	/* Both continuations hit. */
	ck_assert_uint_eq(probe(m, &a, a.ntok + 1), 4 * BT);
	ck_assert_uint_eq(probe(m, &mix, mix.ntok + 1), 4 * BT);
	/* Truncating into a cached block, then recommitting the same chain
	 * after appending: the old block still caches the hash. */
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 3 * BT + 5), 0);
	{
		struct kvp_copy cow[1];
		uint32_t ncow = 0;

		ck_assert_int_eq(kvp_seq_append(m, 1, BT - 5, cow, 1, &ncow),
				 0);
		ck_assert_uint_eq(ncow, 1);
	}
	commit_eq(m, 1, mix.h, mix.nh, 0);
	free_ok(m, 1);
	finish(p, m);
}
END_TEST

/* ------------------------------------------------------------ COW */

/* Truncating into a cached full block and appending copies it. */
START_TEST(test_cow_cached_block)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(100, 3 * BT);
	struct kvp_copy cow[2];
	uint32_t ncow = 99, old;

	create_ok(m, 1, 3 * BT);
	commit_eq(m, 1, a.h, a.nh, 3);
	old = blk(m, 1, 2);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 2 * BT + 8), 0);
	expect_refs(p, old, 1); /* ours alone, but cached */
	/* No room for the copy: -ENOBUFS with *ncow 1, nothing changed. */
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, NULL, 0, &ncow), -ENOBUFS);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(blk(m, 1, 2), old);
	ncow = 99;
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, cow, 2, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, old);
	ck_assert_uint_ne(cow[0].dst, old);
	ck_assert_uint_eq(cow[0].tokens, 8);
	ck_assert_uint_eq(blk(m, 1, 2), cow[0].dst);
	ck_assert_uint_eq(mstats(m).cow_copies, 1);
	/* The cached block is evictable, intact and still hits. */
	expect_refs(p, old, 0);
	expect_pool(p, 16 - 3, 1);
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, a.nh, a.ntok + 1), 3 * BT);
	ck_assert_uint_eq(blk(m, 2, 2), old);
	/* The copy is private: appending again copies nothing. */
	append_ok(m, 1, 3);
	free_ok(m, 1);
	free_ok(m, 2);
	finish(p, m);
}
END_TEST

/* A data-owning pool: writes into cached blocks fail with -EBUSY; the
 * bytes a hit sees are the committed ones; copy-on-write copies them. */
START_TEST(test_data_cached_blocks)
{
	const struct kvp_layout lay = {.num_layers = 2, .num_kv_heads = 1,
				       .head_dim = 4, .dtype = KVP_U8};
	struct kvp_pool *p = mkpool(16, 0, KVP_POOL_NOCACHE, &lay);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(101, 2 * BT);
	size_t row = kvp_pool_row_bytes(p);
	unsigned char k[16], v[16], rk[16], rv[16];
	struct kvp_copy cow[1];
	uint32_t ncow = 0;

	ck_assert_uint_eq(row, 4);
	create_ok(m, 1, 2 * BT);
	for (uint32_t pos = 0; pos < 2 * BT; pos++)
		for (uint32_t l = 0; l < 2; l++) {
			memset(k, (int)(pos * 2 + l), row);
			memset(v, (int)(100 + pos * 2 + l), row);
			ck_assert_int_eq(kvp_seq_write(m, 1, pos, l, k, v), 0);
		}
	commit_eq(m, 1, a.h, a.nh, 2);
	/* Cached (though held once): not writable, readable. */
	ck_assert_int_eq(kvp_seq_write(m, 1, 5, 0, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_write(m, 1, BT + 5, 1, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_read(m, 1, 5, 1, rk, rv), 0);
	ck_assert(all_bytes(rk, row, 11));
	ck_assert(all_bytes(rv, row, 111));
	free_ok(m, 1);

	/* Revived: the hit reads the committed bytes, cannot write them,
	 * and writes its own new block. */
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, a.nh, 2 * BT + 4), 2 * BT);
	for (uint32_t pos = 0; pos < 2 * BT; pos++) {
		ck_assert_int_eq(kvp_seq_read(m, 2, pos, 1, rk, rv), 0);
		ck_assert(all_bytes(rk, row, (unsigned char)(pos * 2 + 1)));
		ck_assert(all_bytes(rv, row, (unsigned char)(101 + pos * 2)));
	}
	ck_assert_int_eq(kvp_seq_write(m, 2, 0, 0, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_write(m, 2, 2 * BT, 0, k, v), 0);

	/* Truncate into cached block 1 and append: the copy carries the
	 * first rows; then the copy is writable, the cached block unchanged. */
	ck_assert_int_eq(kvp_seq_truncate(m, 2, BT + 3), 0);
	ck_assert_int_eq(kvp_seq_write(m, 2, BT + 1, 0, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].tokens, 3);
	for (uint32_t pos = BT; pos < BT + 3; pos++) {
		ck_assert_int_eq(kvp_seq_read(m, 2, pos, 0, rk, rv), 0);
		ck_assert(all_bytes(rk, row, (unsigned char)(pos * 2)));
	}
	memset(k, 0xEE, row);
	ck_assert_int_eq(kvp_seq_write(m, 2, BT + 1, 0, k, v), 0);
	{
		const unsigned char *src = kvp_block_data(p, cow[0].src);

		/* K row of token 1, layer 0 of the cached block. */
		ck_assert(all_bytes(src + 1 * row, row,
				    (unsigned char)((BT + 1) * 2)));
	}
	free_ok(m, 2);
	finish(p, m);
}
END_TEST

/* ------------------------------------------------------------ fork */

START_TEST(test_fork_cached)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(110, 2 * BT + 1);
	uint32_t ids[8], b0, b1;

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 2);
	fork_ok(m, 1, 2);
	b0 = blk(m, 1, 0);
	b1 = blk(m, 1, 1);
	ck_assert_uint_eq(blk(m, 2, 0), b0);
	/* Holders (kvp_block_refcount): one chunk that both tables share. */
	expect_refs(p, b0, 1);
	expect_refs(p, b1, 1);
	/* The fork's blocks are committed already. */
	commit_eq(m, 2, a.h, a.nh, 0);
	/* A hit on top: a second holder, its own chunk. */
	ck_assert_uint_eq(ccreate_ok(m, 3, &a, a.nh, a.ntok), 2 * BT);
	expect_refs(p, b0, 2);
	free_ok(m, 1);
	expect_pool(p, 8 - 4, 0);
	free_ok(m, 3);
	free_ok(m, 2);
	/* Evictable once each. */
	expect_pool(p, 8, 2);
	mcheck_ok(m);
	evlog_reset();
	ck_assert_int_eq(kvp_pool_alloc(p, 8, ids), 0);
	{
		const struct kvp_hash *want[] = {&a.h[1], &a.h[0]};

		expect_removed(0, want, 2);
	}
	ck_assert_int_eq(kvp_pool_free(p, ids, 8), 0);
	finish(p, m);
}
END_TEST

/* Two forks commit the same full block: it is cached once. */
START_TEST(test_fork_commit_shared_block)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(111, 2 * BT);

	listen(m, NULL);
	create_ok(m, 1, 2 * BT);
	fork_ok(m, 1, 2);
	evlog_reset();
	commit_eq(m, 2, a.h, a.nh, 2);
	commit_eq(m, 1, a.h, a.nh, 0);
	ck_assert_uint_eq(evlog.n, 1);
	ck_assert_uint_eq(mstats(m).prefix_cached_blocks, 2);
	free_ok(m, 2);
	free_ok(m, 1);
	expect_pool(p, 8, 2);
	finish(p, m);
}
END_TEST

/* ------------------------------------------------------------ errors */

START_TEST(test_bad_input)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p), *plain = mkmgr_flags(p, 0);
	struct chain a = mkchain(120, 2 * BT);
	struct kvp_pool_stats before;
	uint32_t cached;

	create_ok(m, 1, 2 * BT);
	commit_eq(m, 1, a.h, a.nh, 2);
	create_ok(plain, 1, BT);
	before = pstats(p);

	/* kvp_seq_create_cached */
	ck_assert_int_eq(kvp_seq_create_cached(NULL, 2, a.h, a.nh, 33, &cached),
			 -EINVAL);
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, NULL, 1, 33, &cached),
			 -EINVAL);
	ck_assert_int_eq(kvp_seq_create_cached(plain, 2, a.h, a.nh, 33,
					       &cached),
			 -EINVAL);
	ck_assert_int_eq(kvp_seq_create_cached(plain, 2, NULL, 0, 33, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvp_seq_create_cached(m, 1, a.h, a.nh, 33, &cached),
			 -EEXIST);
	{ struct kvp_pool_stats now = pstats(p); expect_pool_same(&before, &now); }
	expect_refs(p, blk(m, 1, 0), 1);
	expect_gone(m, 2);
	expect_gone(plain, 2);
	/* cached_tokens may be NULL. */
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, a.h, a.nh, 33, NULL), 0);
	ck_assert_uint_eq(blk(m, 2, 1), blk(m, 1, 1));

	/* kvp_seq_commit */
	commit_eq(NULL, 1, a.h, a.nh, -EINVAL);
	commit_eq(m, 1, NULL, 1, -EINVAL);
	commit_eq(plain, 1, a.h, a.nh, -EINVAL);
	commit_eq(m, 77, a.h, a.nh, -ENOENT);
	commit_eq(m, 77, NULL, 0, -ENOENT);

	/* kvp_prefix_reset, kvp_manager_set_event_cb */
	ck_assert_int_eq(kvp_prefix_reset(NULL), -EINVAL);
	ck_assert_int_eq(kvp_prefix_reset(plain), -EINVAL);
	ck_assert_int_eq(kvp_manager_set_event_cb(NULL, record_cb, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvp_manager_set_event_cb(plain, NULL, NULL), 0);

	/* Unknown manager flags are still refused. */
	{
		struct kvp_manager_config c;
		struct kvp_manager *x = NULL;

		memset(&c, 0, sizeof(c));
		c.pool = p;
		c.flags = KVP_PREFIX_CACHE | (1u << 7);
		ck_assert_int_eq(kvp_manager_create(&c, &x), -EINVAL);
		ck_assert_ptr_null(x);
	}
	/* A plain manager's stats have no prefix numbers. */
	{
		struct kvp_stats st = mstats(plain);

		ck_assert_uint_eq(st.prefix_queries, 0);
		ck_assert_uint_eq(st.prefix_hits, 0);
		ck_assert(st.prefix_hit_rate == 0.0);
		ck_assert_uint_eq(st.prefix_cached_blocks, 0);
		ck_assert_uint_eq(st.prefix_commits, 0);
		ck_assert_uint_eq(st.prefix_evictions, 0);
	}
	free_ok(m, 1);
	free_ok(m, 2);
	free_ok(plain, 1);
	finish2(p, m, plain);
}
END_TEST

/* ------------------------------------------------------------ stats */

START_TEST(test_stats_scenario)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p), *plain = mkmgr_flags(p, 0);
	struct chain a = mkchain(130, 3 * BT + 1);
	struct kvp_stats st;
	struct kvp_pool_stats ps;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	st = mstats(m);
	ck_assert_uint_eq(st.prefix_queries, 0);
	ck_assert(st.prefix_hit_rate == 0.0);
	ccreate_ok(m, 1, &a, a.nh, a.ntok); /* 49 asked, 0 hit */
	commit_eq(m, 1, a.h, a.nh, 3);
	ccreate_ok(m, 2, &a, a.nh, a.ntok); /* 49 asked, 48 hit */
	create_ok(m, 3, BT);		   /* not a query */
	st = mstats(m);
	ck_assert_uint_eq(st.prefix_queries, 98);
	ck_assert_uint_eq(st.prefix_hits, 48);
	ck_assert_double_eq_tol(st.prefix_hit_rate, 48.0 / 98.0, 1e-12);
	ck_assert_uint_eq(st.prefix_cached_blocks, 3);
	ck_assert_uint_eq(st.prefix_commits, 3);
	ck_assert_uint_eq(st.prefix_evictions, 0);
	ck_assert_uint_eq(st.seq_creates, 3);
	ck_assert_uint_eq(st.sequences, 3);
	ck_assert_uint_eq(st.tokens, 98 + BT);
	free_ok(m, 1);
	free_ok(m, 2);
	free_ok(m, 3);
	ps = pstats(p);
	ck_assert_uint_eq(ps.evictable, 3);
	ck_assert_uint_eq(ps.free, 8);
	ck_assert_uint_eq(ps.cache_evictions, 0);
	create_ok(plain, 1, 6 * BT); /* 5 never-cached + 1 evicted */
	st = mstats(m);
	ps = pstats(p);
	ck_assert_uint_eq(st.prefix_evictions, 1);
	ck_assert_uint_eq(st.prefix_cached_blocks, 2);
	ck_assert_uint_eq(ps.evictable, 2);
	ck_assert_uint_eq(ps.cache_evictions, 1);
	ck_assert_uint_eq(ps.free, 2);
	ck_assert_uint_eq(ps.used, 6);
	ck_assert_uint_eq(st.blocks_used, 6);
	/* Admission counts evictable blocks as free. */
	ck_assert_int_eq(kvp_admit(m, 2 * BT), KVP_ADMIT_OK);

	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvp_manager_dump(m, f), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_msg(strstr(text, "prefix:") != NULL, "no prefix line:\n%s",
		      text);
	ck_assert_msg(strstr(text, "48 of 98 tokens hit") != NULL,
		      "prefix line lacks the hits:\n%s", text);
	ck_assert_msg(strstr(text, "2 blocks cached") != NULL,
		      "prefix line lacks the cached blocks:\n%s", text);
	free(text);
	text = NULL;
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvp_manager_dump(plain, f), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_msg(strstr(text, "prefix:") == NULL,
		      "plain manager dump has a prefix line:\n%s", text);
	free(text);
	free_ok(plain, 1);
	finish2(p, m, plain);
}
END_TEST

/*
 * kvp_pool_stats: allocs counts blocks handed out, frees blocks whose
 * count reached 0 (kvpool.h), so at quiescence allocs - frees == used, as
 * check_pool's helpers require of every pool: evictable blocks are free
 * (counted in `free`), so a cached block's last release must count as a
 * free, or an eviction must not count as an allocation.  Either way, with
 * nothing used and nothing evictable, allocs must equal frees.
 */
START_TEST(test_stats_allocs_frees)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(131, 3 * BT);
	struct kvp_pool_stats st;
	uint32_t ids[8];

	create_ok(m, 1, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 3);
	free_ok(m, 1);
	st = pstats(p);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.evictable, 3);
	ck_assert_int_eq(kvp_pool_alloc(p, 8, ids), 0); /* evicts all 3 */
	ck_assert_int_eq(kvp_pool_free(p, ids, 8), 0);
	st = pstats(p);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.evictable, 0);
	ck_assert_msg(st.allocs - st.frees == st.used,
		      "nothing used or evictable, yet allocs %llu != frees "
		      "%llu (a cached block's last release is not counted, "
		      "its eviction is counted as an allocation)",
		      ULL(st.allocs), ULL(st.frees));
	finish(p, m);
}
END_TEST

/* ------------------------------------------------------------ destroy */

/* Destroying a manager returns its evictable blocks; the pool serves
 * another manager, which sees none of the old cache. */
START_TEST(test_destroy_returns_blocks)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p), *m2;
	struct chain a = mkchain(140, 4 * BT + 1);
	struct kvp_pool_stats st;

	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 4);
	free_ok(m, 1);
	ccreate_ok(m, 2, &a, 2, 2 * BT + 1); /* live, holding a0 a1 */
	expect_pool(p, 8 - 3, 2);
	mcheck_ok(m);
	evlog_reset();
	kvp_manager_destroy(m);
	st = pstats(p);
	ck_assert_uint_eq(st.free, 8);
	ck_assert_uint_eq(st.evictable, 0);
	ck_assert_int_eq(kvp_pool_check(p), 0);

	m2 = mkpmgr(p);
	listen(m2, NULL);
	ck_assert_uint_eq(ccreate_ok(m2, 1, &a, a.nh, a.ntok), 0);
	free_ok(m2, 1);
	{
		uint32_t ids[8];

		ck_assert_int_eq(kvp_pool_alloc(p, 8, ids), 0);
		ck_assert_uint_eq(evlog.n, 0);
		ck_assert_int_eq(kvp_pool_free(p, ids, 8), 0);
	}
	finish(p, m2);
}
END_TEST

/* Destroy with the pool's last reference held by the manager: nothing
 * leaks (ASan) and nothing crashes. */
START_TEST(test_destroy_last_ref)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p), *m2 = mkpmgr(p);
	struct chain a = mkchain(141, 3 * BT);

	kvp_pool_unref(p); /* the managers hold it */
	create_ok(m, 1, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 3);
	free_ok(m, 1);
	create_ok(m2, 1, 3 * BT);
	commit_eq(m2, 1, a.h, a.nh, 3);
	kvp_manager_destroy(m);
	mcheck_ok(m2);
	kvp_manager_destroy(m2);
}
END_TEST

/* ------------------------------------------------------------ threads */

/*
 * Threads hit, revive and evict the same blocks of a small data-owning
 * pool; every hit block's bytes must still be the ones its committer
 * wrote for that hash.
 */
#define MT_THREADS 4
#define MT_ITERS 3000

struct mt_ctx {
	struct kvp_manager *m;
	struct kvp_pool *p;
	struct chain ch[6];
	struct errbuf err[MT_THREADS];
	_Atomic uint64_t hits;
};

struct mt_arg {
	struct mt_ctx *c;
	int idx;
};

static unsigned char mt_byte(const struct kvp_hash *h, uint32_t t)
{
	return (unsigned char)(h->b[t % 32] ^ t);
}

static void *mt_worker(void *arg)
{
	struct mt_arg *a = arg;
	struct mt_ctx *c = a->c;
	struct errbuf *e = &c->err[a->idx];
	uint64_t id = (uint64_t)a->idx << 32;
	unsigned seed = 12345u + (unsigned)a->idx;
	size_t row = kvp_pool_row_bytes(c->p);
	unsigned char k[8], v[8];

	for (int it = 0; it < MT_ITERS && !e->msg[0]; it++, id++) {
		const struct chain *ch;
		uint32_t nb, cached = 0, i, t;
		int rc;

		seed = seed * 1103515245u + 12345u;
		ch = &c->ch[(seed >> 16) % 6];
		nb = 1 + ((seed >> 8) % ch->nh);
		rc = kvp_seq_create_cached(c->m, id, ch->h, ch->nh, nb * BT,
					   &cached);

		if (rc == -ENOSPC)
			continue;
		if (rc) {
			wfail(e, "create_cached %d", rc);
			break;
		}
		for (i = 0; i < nb; i++) {
			for (t = 0; t < BT; t++) {
				uint32_t pos = i * BT + t;

				if (pos < cached) {
					rc = kvp_seq_read(c->m, id, pos, 0, k,
							  v);
					if (rc || !all_bytes(k, row,
							     mt_byte(&ch->h[i],
								     t)))
						wfail(e,
						      "hit block %u token %u: "
						      "rc %d, bytes %u not %u",
						      i, t, rc, k[0],
						      mt_byte(&ch->h[i], t));
					continue;
				}
				memset(k, mt_byte(&ch->h[i], t), row);
				memset(v, 0, row);
				rc = kvp_seq_write(c->m, id, pos, 0, k, v);
				if (rc)
					wfail(e, "write %u: %d", pos, rc);
			}
		}
		if (cached)
			atomic_fetch_add(&c->hits, 1);
		rc = kvp_seq_commit(c->m, id, ch->h, ch->nh);
		if (rc < 0)
			wfail(e, "commit %d", rc);
		rc = kvp_seq_free(c->m, id);
		if (rc)
			wfail(e, "free %d", rc);
	}
	return NULL;
}

START_TEST(test_mt_revive_evict)
{
	const struct kvp_layout lay = {.num_layers = 1, .num_kv_heads = 1,
				       .head_dim = 4, .dtype = KVP_U8};
	struct mt_ctx c;
	struct mt_arg args[MT_THREADS];
	pthread_t t[MT_THREADS];
	struct kvp_pool_stats st;

	memset(&c, 0, sizeof(c));
	c.p = mkpool(16, 0, KVP_POOL_NOCACHE, &lay);
	c.m = mkpmgr(c.p);
	for (int i = 0; i < 6; i++)
		c.ch[i] = mkchain(150 + (uint32_t)i, 6 * BT);
	for (int i = 0; i < MT_THREADS; i++) {
		args[i].c = &c;
		args[i].idx = i;
		ck_assert_int_eq(pthread_create(&t[i], NULL, mt_worker,
						&args[i]),
				 0);
	}
	for (int i = 0; i < MT_THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < MT_THREADS; i++)
		ck_assert_msg(c.err[i].msg[0] == 0, "thread %d: %s", i,
			      c.err[i].msg);
	st = pstats(c.p);
	ck_assert_uint_eq(st.free, st.total);
	ck_assert_uint_gt(st.cache_evictions, 0);
	ck_assert_uint_gt(atomic_load(&c.hits), 0);
	finish(c.p, c.m);
}
END_TEST

/*
 * KVP_EVENT_CLEARED must reach the callback before the STORED of any
 * block registered after the reset forgot everything (kvpool.h: for one
 * hash, events arrive in the order they happened; a router applying
 * CLEARED after such a STORED drops a block that is cached).  One thread
 * commits fresh hashes, another resets; the committer then holds its
 * block through a hit (so no later reset can forget it), waits until the
 * reset running then (if any) has returned, so that every CLEARED of a
 * reset that started before is delivered, checks with a second hit that
 * the hash is still cached (the first may have raced a reset that was
 * forgetting it), and then requires that no CLEARED arrived after its
 * STORED.  Bounded to 3 s.
 */
struct rc_ctx {
	struct kvp_manager *m;
	_Atomic int stop;
	_Atomic uint64_t resetting;	/* odd while kvp_prefix_reset runs */
	_Atomic uint64_t gen;		/* CLEARED events */
	_Atomic uint64_t stored_key;	/* the committer's hash (first word) */
	_Atomic uint64_t stored_gen;	/* gen + 1 when its STORED arrived */
	_Atomic uint64_t resets_ok, rounds, violations;
	struct errbuf err;
};

static uint64_t rc_key(const struct kvp_hash *h)
{
	uint64_t k;

	memcpy(&k, h->b, sizeof(k));
	return k;
}

static void rc_cb(const struct kvp_event *ev, void *arg)
{
	struct rc_ctx *c = arg;

	if (ev->type == KVP_EVENT_CLEARED)
		atomic_fetch_add(&c->gen, 1);
	else if (ev->type == KVP_EVENT_STORED &&
		 rc_key(&ev->hashes[0]) == atomic_load(&c->stored_key))
		atomic_store(&c->stored_gen, atomic_load(&c->gen) + 1);
}

static void *rc_resetter(void *arg)
{
	struct rc_ctx *c = arg;

	while (!atomic_load(&c->stop)) {
		int rc;

		atomic_fetch_add(&c->resetting, 1);
		rc = kvp_prefix_reset(c->m);
		atomic_fetch_add(&c->resetting, 1);
		if (rc == 0)
			atomic_fetch_add(&c->resets_ok, 1);
		else if (rc != -EBUSY)
			wfail(&c->err, "kvp_prefix_reset %d", rc);
	}
	return NULL;
}

START_TEST(test_mt_reset_stored_order)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct rc_ctx c;
	pthread_t t;
	struct timespec t0, now;
	uint64_t it = 0;

	memset(&c, 0, sizeof(c));
	c.m = mkpmgr(p);
	ck_assert_int_eq(kvp_manager_set_event_cb(c.m, rc_cb, &c), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, rc_resetter, &c), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;; it++) {
		struct kvp_hash h;
		uint32_t cached = 0;
		int rc;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec >= 3 || atomic_load(&c.violations))
			break;
		memset(&h, 0, sizeof(h));
		memcpy(h.b, &it, sizeof(it));
		h.b[31] = 0x5a;
		atomic_store(&c.stored_key, rc_key(&h));
		atomic_store(&c.stored_gen, 0);
		create_ok(c.m, 1, BT);
		rc = kvp_seq_commit(c.m, 1, &h, 1);
		free_ok(c.m, 1);
		if (rc != 1)
			continue;
		/* Hold it through a hit: no reset can forget it now.  (A
		 * reset holds the blocks it forgets until it frees them:
		 * -ENOSPC then is no false exhaustion, just a round lost.) */
		rc = kvp_seq_create_cached(c.m, 2, &h, 1, BT + 1, &cached);
		if (rc == -ENOSPC)
			continue;
		ck_assert_int_eq(rc, 0);
		if (cached == BT) {
			uint64_t v = atomic_load(&c.resetting);

			/* Yield: under valgrind, whose threads take turns,
			 * a bare spin can keep the resetter off for long. */
			while ((v & 1) && atomic_load(&c.resetting) == v)
				sched_yield();
			rc = kvp_seq_create_cached(c.m, 3, &h, 1, BT + 1,
						   &cached);
			if (rc == -ENOSPC) {
				free_ok(c.m, 2);
				continue;
			}
			ck_assert_int_eq(rc, 0);
			if (cached == BT) {
				atomic_fetch_add(&c.rounds, 1);
				/* Cached since its STORED: no CLEARED may
				 * have been delivered after it. */
				if (atomic_load(&c.stored_gen) !=
				    atomic_load(&c.gen) + 1)
					atomic_fetch_add(&c.violations, 1);
			}
			free_ok(c.m, 3);
		}
		free_ok(c.m, 2);
	}
	atomic_store(&c.stop, 1);
	pthread_join(t, NULL);
	ck_assert_msg(c.err.msg[0] == 0, "%s", c.err.msg);
	ck_assert_msg(atomic_load(&c.violations) == 0,
		      "a STORED event arrived before the CLEARED of a reset "
		      "that had already forgotten everything: the hash is "
		      "cached but the events say it is not (%llu of %llu "
		      "rounds, %llu resets)",
		      ULL(atomic_load(&c.violations)),
		      ULL(atomic_load(&c.rounds)),
		      ULL(atomic_load(&c.resets_ok)));
	ck_assert_uint_gt(atomic_load(&c.resets_ok), 0);
	finish(p, c.m);
}
END_TEST


/* ------------------------------------------------------------ the table */

/* Hashes of our own (not from kvp_hash_blocks): x in the first word. */
static struct kvp_hash raw_hash(uint64_t w0, uint64_t w1)
{
	struct kvp_hash h;

	memset(&h, 0, sizeof(h));
	memcpy(h.b, &w0, sizeof(w0));
	memcpy(h.b + 8, &w1, sizeof(w1));
	return h;
}

/*
 * Tens of thousands of cached blocks: every one found again; then chain
 * after chain evicts the previous one, so the manager's table fills with
 * deleted entries, new commits reuse them and rebuilds clear them; every
 * chain is found whole after its commit.
 */
#define BIG 20000u
#define ROUNDS 6u
START_TEST(test_table_many)
{
	struct kvp_pool *p = mkpool_nc(2 * BIG + 8);
	struct kvp_manager *m = mkpmgr(p);
	struct kvp_hash *h = calloc(ROUNDS * BIG, sizeof(*h));
	uint32_t cached;

	ck_assert_ptr_nonnull(h);
	for (uint32_t i = 0; i < ROUNDS * BIG; i++)
		h[i] = raw_hash(0x9e3779b97f4a7c15ull * (i + 1), i);
	cached = ccreate_ok_at(m, 1, h, BIG, BIG * BT + 1, __LINE__);
	ck_assert_uint_eq(cached, 0);
	commit_eq(m, 1, h, BIG, (int)BIG);
	cached = ccreate_ok_at(m, 2, h, BIG, BIG * BT + 1, __LINE__);
	ck_assert_uint_eq(cached, BIG * BT);
	mcheck_ok(m);
	free_ok(m, 2);
	free_ok(m, 1);
	for (uint32_t r = 1; r < ROUNDS; r++) {
		const struct kvp_hash *hr = h + (size_t)r * BIG;
		uint64_t id = 10 + 2 * r;

		/* 2 * BIG blocks: never-cached ones first, then evictions
		 * (all of round r - 1's chain but its head). */
		cached = ccreate_ok_at(m, id, hr, BIG, 2 * BIG * BT, __LINE__);
		ck_assert_uint_eq(cached, 0);
		commit_eq(m, id, hr, BIG, (int)BIG);
		free_ok(m, id);
		cached = ccreate_ok_at(m, id + 1, hr, BIG, BIG * BT + 1,
				       __LINE__);
		ck_assert_uint_eq(cached, BIG * BT);
		free_ok(m, id + 1);
		mcheck_ok(m);
	}
	/* Round 0's chain, the least recently freed, is gone (its head
	 * last); a commit caches it whole again. */
	cached = ccreate_ok_at(m, 5, h, BIG, BIG * BT + 1, __LINE__);
	ck_assert_uint_eq(cached, 0);
	commit_eq(m, 5, h, BIG, (int)BIG);
	mcheck_ok(m);
	free_ok(m, 5);
	free(h);
	finish(p, m);
}
END_TEST

/*
 * Two different hashes that a table of hashes' first words, or of a mix
 * of a few words, would confuse (here they mix to the same 64-bit value
 * in kvpool's table): both are cached, each finds its own block, and
 * evicting the first-stored one leaves the other found.
 */
START_TEST(test_table_confusable_hashes)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	const uint64_t a = 0x0123456789abcdefull, c = 0xfedcba9876543210ull;
	uint64_t rc = (c << 17) | (c >> 47); /* rotl(c, 17) */
	struct kvp_hash h1 = raw_hash(a, 0), h2 = raw_hash(a ^ rc, c);
	uint32_t b1, b2;

	ck_assert_uint_eq(ccreate_ok_at(m, 1, &h1, 1, BT + 1, __LINE__), 0);
	commit_eq(m, 1, &h1, 1, 1);
	ck_assert_uint_eq(ccreate_ok_at(m, 2, &h2, 1, BT + 1, __LINE__), 0);
	commit_eq(m, 2, &h2, 1, 1);
	b1 = blk(m, 1, 0);
	b2 = blk(m, 2, 0);
	ck_assert_uint_ne(b1, b2);
	ck_assert_uint_eq(ccreate_ok_at(m, 3, &h2, 1, BT + 1, __LINE__), BT);
	ck_assert_uint_eq(blk(m, 3, 0), b2);
	free_ok(m, 3);
	ck_assert_uint_eq(ccreate_ok_at(m, 4, &h1, 1, BT + 1, __LINE__), BT);
	ck_assert_uint_eq(blk(m, 4, 0), b1);
	free_ok(m, 4);
	mcheck_ok(m);
	/* h1's block evictable, then evicted: seq 2 holds 2 blocks, the
	 * other 6 (h1's included) go to seq 5. */
	free_ok(m, 1);
	expect_pool(p, 6, 1);
	create_ok(m, 5, 6 * BT);
	free_ok(m, 5);
	expect_pool(p, 6, 0);
	ck_assert_uint_eq(ccreate_ok_at(m, 6, &h2, 1, BT + 1, __LINE__), BT);
	ck_assert_uint_eq(blk(m, 6, 0), b2);
	free_ok(m, 6);
	ck_assert_uint_eq(ccreate_ok_at(m, 7, &h1, 1, BT + 1, __LINE__), 0);
	free_ok(m, 7);
	free_ok(m, 2);
	finish(p, m);
}
END_TEST

/* ------------------------------------------------------------ suite */

/* ------------------------------------------------------------ parked */

/*
 * Parked references (pools of 1,024 blocks or more): a sequence's free
 * keeps, in the thread's cache, its references on the cached blocks at
 * the head of its chain; the thread's next hit on them takes them back.
 */
#define PARK_POOL 2048u

/* Blocks of chain c (committed by sequence id), in chain order. */
static void chain_blocks(struct kvp_manager *m, uint64_t id, uint32_t n,
			 uint32_t *out)
{
	for (uint32_t i = 0; i < n; i++)
		out[i] = blk(m, id, i);
}

START_TEST(test_parked_refs)
{
	struct kvp_pool *p = mkpool(PARK_POOL, 0, 0, NULL);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(70, 8 * BT);
	uint32_t b[8], b2[8], parked = 0;
	struct kvp_pool_stats st;

	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 8);
	chain_blocks(m, 1, 8, b);
	free_ok(m, 1);
	/* Blocks nobody hit are never parked: all idle. */
	for (uint32_t i = 0; i < 8; i++)
		expect_refs(p, b[i], 0);
	/* A request that hits 7 of them, freed: a head of its hits is
	 * parked (refcount 1: the thread's parked reference), the rest
	 * idle (0). */
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, a.nh, a.ntok), 7 * BT);
	free_ok(m, 2);
	for (uint32_t i = 0; i < 8; i++) {
		int r = kvp_block_refcount(p, b[i]);

		ck_assert_msg(r == 0 || r == 1, "block %u refcount %d", i, r);
		if (r)
			ck_assert_msg(i == parked++,
				      "block %u parked, block %u not", i,
				      parked - 1);
	}
	ck_assert_uint_ge(parked, 1);
	ck_assert_uint_le(parked, 7);
	/* Counted as evictable; the checks count them as holders. */
	st = pstats(p);
	ck_assert_uint_eq(st.free, st.total);
	ck_assert_uint_eq(st.evictable, 8);
	mcheck_ok(m);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	/* A hit takes the parked references back: no count moves. */
	ck_assert_uint_eq(ccreate_ok(m, 3, &a, a.nh, a.ntok), 7 * BT);
	chain_blocks(m, 3, 8, b2);
	ck_assert_int_eq(memcmp(b, b2, 7 * sizeof(*b)), 0);
	for (uint32_t i = 0; i < 7; i++)
		expect_refs(p, b[i], 1);
	mcheck_ok(m);
	free_ok(m, 3);
	mcheck_ok(m);
	finish(p, m);
}
END_TEST

/* A reset is not refused for parked references: they are dropped. */
START_TEST(test_parked_reset)
{
	struct kvp_pool *p = mkpool(PARK_POOL, 0, 0, NULL);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(71, 6 * BT);
	struct kvp_stats ms;
	uint32_t blk_first;

	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 6);
	blk_first = blk(m, 1, 0);
	free_ok(m, 1);
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, a.nh, a.ntok), 5 * BT);
	free_ok(m, 2); /* parks a head of its hits */
	ck_assert_int_eq(kvp_block_refcount(p, blk_first), 1);
	ck_assert_int_eq(kvp_prefix_reset(m), 0);
	kvp_manager_stats(m, &ms);
	ck_assert_uint_eq(ms.prefix_cached_blocks, 0);
	expect_pool(p, PARK_POOL, 0);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 0);
	finish(p, m);
}
END_TEST

/* No false -ENOSPC: the whole pool can be allocated while references
 * are parked; the parked blocks are evicted like any idle ones. */
START_TEST(test_parked_whole_pool)
{
	struct kvp_pool *p = mkpool(PARK_POOL, 0, 0, NULL);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(72, 8 * BT);
	uint32_t *ids = calloc(PARK_POOL, sizeof(*ids));
	struct kvp_hash gone[16];
	struct kvp_stats ms;

	ck_assert_ptr_nonnull(ids);
	listen(m, NULL);
	ccreate_ok(m, 1, &a, a.nh, a.ntok);
	commit_eq(m, 1, a.h, a.nh, 8);
	free_ok(m, 1);
	ck_assert_uint_eq(ccreate_ok(m, 2, &a, a.nh, a.ntok), 7 * BT);
	free_ok(m, 2); /* parks a head of its hits */
	evlog_reset();
	ck_assert_int_eq(kvp_pool_alloc(p, PARK_POOL, ids), 0);
	ck_assert_uint_eq(removed_since(0, gone, 16), 8);
	kvp_manager_stats(m, &ms);
	ck_assert_uint_eq(ms.prefix_cached_blocks, 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, ids), -ENOSPC);
	ck_assert_int_eq(kvp_pool_free(p, ids, PARK_POOL), 0);
	free(ids);
	finish(p, m);
}
END_TEST

/* A thread that exits drops its parked references. */
struct park_thread {
	struct kvp_pool *p;
	struct kvp_manager *m;
	const struct chain *c;
	uint32_t b[8];
	struct errbuf err;
};

static void *park_thread_main(void *arg)
{
	struct park_thread *pt = arg;
	uint32_t cached;
	int rc;

	rc = kvp_seq_create_cached(pt->m, 4, pt->c->h, pt->c->nh,
				   pt->c->ntok, &cached);
	if (rc == 0)
		rc = kvp_seq_commit(pt->m, 4, pt->c->h, pt->c->nh) == 8 ? 0
									  : -1;
	if (rc == 0)
		rc = kvp_seq_free(pt->m, 4);
	/* A request that hits them: its free parks the head. */
	if (rc == 0)
		rc = kvp_seq_create_cached(pt->m, 5, pt->c->h, pt->c->nh,
					   pt->c->ntok, &cached);
	if (rc == 0 && cached != 7 * BT)
		rc = -2;
	for (uint32_t i = 0; rc == 0 && i < 8; i++) {
		uint32_t ids[8], n = 0;

		rc = kvp_seq_blocks(pt->m, 5, ids, 8, &n);
		pt->b[i] = ids[i];
	}
	if (rc == 0)
		rc = kvp_seq_free(pt->m, 5);
	if (rc == 0 && kvp_block_refcount(pt->p, pt->b[0]) != 1)
		wfail(&pt->err, "the chain's head is not parked");
	if (rc)
		wfail(&pt->err, "parker thread: %d", rc);
	return NULL;
}

START_TEST(test_parked_thread_exit)
{
	struct kvp_pool *p = mkpool(PARK_POOL, 0, 0, NULL);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(73, 8 * BT);
	struct park_thread pt;
	pthread_t t;

	memset(&pt, 0, sizeof(pt));
	pt.p = p;
	pt.m = m;
	pt.c = &a;
	ck_assert_int_eq(pthread_create(&t, NULL, park_thread_main, &pt), 0);
	pthread_join(t, NULL);
	ck_assert_msg(pt.err.msg[0] == 0, "%s", pt.err.msg);
	for (uint32_t i = 0; i < 8; i++)
		expect_refs(p, pt.b[i], 0);
	expect_pool(p, PARK_POOL, 8);
	ck_assert_uint_eq(probe(m, &a, a.ntok), 7 * BT);
	finish(p, m);
}
END_TEST

/*
 * Evictions ahead: in a large pool full of idle cached blocks, a small
 * allocation that must evict takes up to half a thread cache more (at most
 * 1/256 of the evictable blocks), the next least recently freed ones, and
 * keeps them in the thread's cache for the next allocations.
 */
START_TEST(test_evict_ahead)
{
	struct kvp_pool *p = mkpool(PARK_POOL, 0, 0, NULL);
	struct kvp_manager *m = mkpmgr(p);
	uint32_t nseq = PARK_POOL / MAXB, id, ids[16];
	const struct kvp_hash *want[16];
	struct chain *c = calloc(nseq, sizeof(*c));
	struct kvp_pool_stats st;
	uint32_t ahead = PARK_POOL / 256; /* 8, unless half a cache is less */

	ck_assert_ptr_nonnull(c);
	for (uint32_t k = 0; k < nseq; k++) {
		c[k] = mkchain(1000 + k, MAXB * BT);
		ccreate_ok(m, k, &c[k], c[k].nh, c[k].ntok);
		commit_eq(m, k, c[k].h, c[k].nh, (int)MAXB);
	}
	for (uint32_t k = 0; k < nseq; k++)
		free_ok(m, k); /* no hits: nothing parked */
	st = pstats(p);
	ck_assert_uint_eq(st.evictable, PARK_POOL);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	if (ahead > st.cache_blocks / 2)
		ahead = st.cache_blocks / 2;
	listen(m, NULL);
	evlog_reset();
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
	/* The least recently freed: chain 0, released last block first. */
	for (uint32_t i = 0; i <= ahead; i++)
		want[i] = &c[0].h[MAXB - 1 - i];
	expect_removed(0, want, ahead + 1);
	st = pstats(p);
	ck_assert_uint_eq(st.cache_evictions, ahead + 1);
	ck_assert_uint_eq(st.in_thread_caches, ahead);
	ck_assert_uint_eq(st.free, PARK_POOL - 1);
	ck_assert_uint_eq(st.evictable, PARK_POOL - 1 - ahead);
	/* The next allocations take them: no eviction. */
	evlog_reset();
	ck_assert_int_eq(kvp_pool_alloc(p, ahead, ids), 0);
	ck_assert_uint_eq(evlog.n, 0);
	ck_assert_uint_eq(pstats(p).cache_evictions, ahead + 1);
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, ahead), 0);
	mcheck_ok(m);
	free(c);
	finish(p, m);
}
END_TEST

static Suite *prefix_suite(void)
{
	Suite *s = suite_create("prefix");
	TCase *tc;

	tc = tcase_create("basics");
	tcase_add_test(tc, test_partial_block_not_cached);
	tcase_add_test(tc, test_hit_cap);
	tcase_add_test(tc, test_share_identical);
	tcase_add_test(tc, test_revival);
	suite_add_tcase(s, tc);

	tc = tcase_create("eviction");
	tcase_add_test(tc, test_eviction_order);
	tcase_add_test(tc, test_eviction_order_rerelease);
	tcase_add_test(tc, test_eviction_order_two_runs);
	tcase_add_test(tc, test_eviction_order_drain);
	tcase_add_test(tc, test_eviction_batch);
	tcase_add_test(tc, test_hits_not_self_evicted);
	tcase_add_test(tc, test_eviction_thread_cache);
	tcase_add_test(tc, test_eviction_other_thread_cache);
	tcase_add_test(tc, test_cross_manager_eviction);
	suite_add_tcase(s, tc);

	tc = tcase_create("keys");
	tcase_add_test(tc, test_salt_isolation);
	tcase_add_test(tc, test_lora_isolation);
	tcase_add_test(tc, test_managers_separate_maps);
	suite_add_tcase(s, tc);

	tc = tcase_create("failure");
	tcase_add_test(tc, test_enospc_with_evictable_hits);
	tcase_add_test(tc, test_enospc_with_held_hits);
	tcase_add_test(tc, test_eexist_unchanged);
	tcase_add_test(tc, test_enospc_too_large);
	tcase_add_test(tc, test_bad_input);
	suite_add_tcase(s, tc);

	tc = tcase_create("reset");
	tcase_add_test(tc, test_reset);
	tcase_add_test(tc, test_reset_other_manager);
	suite_add_tcase(s, tc);

	tc = tcase_create("events");
	tcase_add_test(tc, test_events_stored);
	tcase_add_test(tc, test_events_reused);
	tcase_add_test(tc, test_events_runs);
	tcase_add_test(tc, test_events_removed_and_cleared);
	suite_add_tcase(s, tc);

	tc = tcase_create("commit");
	tcase_add_test(tc, test_commit_basic);
	tcase_add_test(tc, test_commit_no_merge);
	tcase_add_test(tc, test_commit_after_trim);
	tcase_add_test(tc, test_commit_after_truncate);
	suite_add_tcase(s, tc);

	tc = tcase_create("cow");
	tcase_add_test(tc, test_cow_cached_block);
	tcase_add_test(tc, test_data_cached_blocks);
	tcase_add_test(tc, test_fork_cached);
	tcase_add_test(tc, test_fork_commit_shared_block);
	suite_add_tcase(s, tc);

	tc = tcase_create("stats");
	tcase_add_test(tc, test_stats_scenario);
	tcase_add_test(tc, test_stats_allocs_frees);
	tcase_add_test(tc, test_destroy_returns_blocks);
	tcase_add_test(tc, test_destroy_last_ref);
	suite_add_tcase(s, tc);

	tc = tcase_create("parked");
	tcase_add_test(tc, test_parked_refs);
	tcase_add_test(tc, test_parked_reset);
	tcase_add_test(tc, test_parked_whole_pool);
	tcase_add_test(tc, test_parked_thread_exit);
	tcase_add_test(tc, test_evict_ahead);
	suite_add_tcase(s, tc);

	tc = tcase_create("table");
	tcase_add_test(tc, test_table_many);
	tcase_add_test(tc, test_table_confusable_hashes);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_mt_revive_evict);
	tcase_add_test(tc, test_mt_reset_stored_order);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return run_suite(prefix_suite());
}
