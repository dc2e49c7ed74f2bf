/* SPDX-License-Identifier: MIT */
/*
 * check_retention.c - unit tests of cached-block retention (kvpool.h,
 * kvp_seq_commit_retained; doc/architecture.md, "Idle rings"): lower
 * priorities are evicted first, least recently freed first within a
 * priority; token ranges; expiry by the retention clock; the pin cap; a hit
 * keeps its priority unless a commit raises it.
 *
 * Pools have no thread caches (KVP_POOL_NOCACHE): evictions happen one
 * allocation at a time, in the exact order, so a test can tell which
 * block went by asking which hashes are still cached.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check_common.h"
#include "kvpool.h"

#define BT CHECK_BLOCK_TOKENS
#define MAXB 16u

static struct kvp_manager *mkmgr_pinned(struct kvp_pool *p,
					uint32_t max_pinned)
{
	struct kvp_manager_config c;

	memset(&c, 0, sizeof(c));
	c.pool = p;
	c.policy = KVP_EVICT_LRU;
	c.flags = KVP_PREFIX_CACHE;
	c.max_pinned = max_pinned;
	return mkmgr_cfg(&c);
}

static struct kvp_manager *mkpmgr(struct kvp_pool *p)
{
	return mkmgr_pinned(p, 0);
}

/* The chained hashes of stream s's nblocks full blocks. */
struct chain {
	struct kvp_hash h[MAXB];
	uint32_t nh;
};

static struct chain mkchain(uint32_t s, uint32_t nblocks)
{
	uint32_t tok[MAXB * BT];
	struct chain c;
	int rc;

	ck_assert_uint_le(nblocks, MAXB);
	for (uint32_t i = 0; i < nblocks * BT; i++)
		tok[i] = s * 1000003u + i;
	rc = kvp_hash_blocks(KVP_HASH_XXH3_128, NULL, NULL, tok, nblocks * BT,
			     BT, c.h);
	ck_assert_int_eq(rc, (int)nblocks);
	c.nh = nblocks;
	return c;
}

/* One range: tokens [first, first + n) at prio for dur ticks. */
static struct kvp_retention range(uint32_t first, uint32_t n, uint32_t prio,
				  uint64_t dur)
{
	struct kvp_retention r;

	memset(&r, 0, sizeof(r));
	r.first_token = first;
	r.num_tokens = n;
	r.priority = prio;
	r.duration = dur;
	return r;
}

/*
 * Sequence id holds chain c (creating it with whatever hits it gets;
 * with `extra` tokens past its full blocks, so that all of them may hit,
 * or none, so that it has no partial block) and commits it with ranges;
 * the commit must register `added` blocks and refuse `unpinned` pins.
 */
#define hold(m, id, c, rg, nrg, added, unp)                                    \
	hold_at((m), (id), (c), 0, (rg), (nrg), (added), (unp), __LINE__)
#define hold_hit(m, id, c, rg, nrg, added, unp)                                \
	hold_at((m), (id), (c), 1, (rg), (nrg), (added), (unp), __LINE__)
static void hold_at(struct kvp_manager *m, uint64_t id, const struct chain *c,
		    uint32_t extra, const struct kvp_retention *rg,
		    uint32_t nrg, int added, uint32_t unpinned, int line)
{
	uint32_t cached, unp = 0xDEAD;
	int rc = kvp_seq_create_cached(m, id, c->h, c->nh, c->nh * BT + extra,
				       &cached);

	ck_assert_msg(rc == 0, "line %d: create_cached(%llu) = %d (%s)", line,
		      ULL(id), rc, kvp_strerror(rc));
	rc = kvp_seq_commit_retained(m, id, c->h, c->nh, rg, nrg, &unp);
	ck_assert_msg(rc == added && unp == unpinned,
		      "line %d: commit_retained(%llu) = %d (%s), unpinned %u; "
		      "want %d, %u",
		      line, ULL(id), rc, kvp_strerror(rc), unp, added,
		      unpinned);
}

/* Commits c with ranges through sequence id, then frees it. */
#define put(m, id, c, rg, nrg)                                                 \
	do {                                                                   \
		hold_at((m), (id), (c), 0, (rg), (nrg), (int)(c)->nh, 0,       \
			__LINE__);                                             \
		free_ok((m), (id));                                            \
	} while (0)

/* Block i of c must be cached (at priority prio, expiring at exp) or not
 * (prio -1). */
#define expect_ret(m, c, i, prio, exp)                                         \
	expect_ret_at((m), (c), (i), (prio), (exp), __LINE__)
static void expect_ret_at(struct kvp_manager *m, const struct chain *c,
			  uint32_t i, int prio, uint64_t exp, int line)
{
	uint32_t got = 0xDEAD;
	uint64_t e = 0xDEAD;
	int rc = kvp_prefix_retention(m, &c->h[i], &got, &e);

	if (prio < 0) {
		ck_assert_msg(rc == -ENOENT,
			      "line %d: block %u is cached (priority %u), "
			      "want evicted",
			      line, i, got);
		return;
	}
	ck_assert_msg(rc == 0,
		      "line %d: block %u: kvp_prefix_retention = %d "
		      "(%s), want cached",
		      line, i, rc, kvp_strerror(rc));
	ck_assert_msg(got == (uint32_t)prio && e == exp,
		      "line %d: block %u at priority %u expiring %llu, want "
		      "%d expiring %llu",
		      line, i, got, ULL(e), prio, ULL(exp));
}

/*
 * Evicts k blocks: a plain sequence of k blocks takes them (the tests
 * fill their pools with cached blocks, so no never-cached block is
 * free) and keeps them, so that the next eviction evicts too, until
 * unevict() frees every such sequence.
 */
#define EVICTOR_ID 700000u
static uint32_t nevictors;

#define evict(m, k) evict_at((m), (k), __LINE__)
static void evict_at(struct kvp_manager *m, uint32_t k, int line)
{
	create_ok_at(m, EVICTOR_ID + nevictors++, k * BT, line);
}

static void unevict(struct kvp_manager *m)
{
	while (nevictors)
		free_ok(m, EVICTOR_ID + --nevictors);
}

static void finish(struct kvp_pool *p, struct kvp_manager *m)
{
	struct kvp_pool_stats st;

	mcheck_ok(m);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	unevict(m);
	kvp_manager_destroy(m);
	st = pstats(p);
	ck_assert_uint_eq(st.free, st.total);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}

/* ------------------------------------------------------------------ */

/* A retained chain freed first outlives a default one freed after it;
 * then it goes least recently freed first (its last block first). */
START_TEST(test_lower_priority_first)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(1, 4), b = mkchain(2, 4);
	struct kvp_retention r = range(0, 0, 5, 0);

	put(m, 1, &a, &r, 1);
	put(m, 2, &b, NULL, 0);
	ck_assert_uint_eq(pstats(p).evictable, 8);
	evict(m, 2); /* b3, b2 */
	expect_ret(m, &b, 3, -1, 0);
	expect_ret(m, &b, 2, -1, 0);
	expect_ret(m, &b, 1, 0, 0);
	for (uint32_t i = 0; i < 4; i++)
		expect_ret(m, &a, i, 5, 0);
	evict(m, 3); /* b1, b0, then a3 */
	expect_ret(m, &b, 0, -1, 0);
	expect_ret(m, &a, 3, -1, 0);
	expect_ret(m, &a, 2, 5, 0);
	finish(p, m);
}
END_TEST

/* Four priorities, freed highest first: evicted lowest first, one at a
 * time, least recently freed first within each. */
START_TEST(test_levels_in_order)
{
	static const uint32_t prio[4] = {9, 2, 0, 14};
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	struct chain c[4];

	for (uint32_t k = 0; k < 4; k++) {
		struct kvp_retention r = range(0, 0, prio[k], 0);

		c[k] = mkchain(10 + k, 2);
		put(m, 1 + k, &c[k], &r, 1);
	}
	/* Expected order: c[2] (0), c[1] (2), c[0] (9), c[3] (14); each
	 * block 1 (freed first) before block 0. */
	{
		static const uint32_t order[4] = {2, 1, 0, 3};

		for (uint32_t k = 0; k < 4; k++) {
			const struct chain *x = &c[order[k]];

			evict(m, 1);
			expect_ret(m, x, 1, -1, 0);
			expect_ret(m, x, 0, (int)prio[order[k]], 0);
			evict(m, 1);
			expect_ret(m, x, 0, -1, 0);
			if (k < 3)
				expect_ret(m, &c[order[k + 1]], 1,
					   (int)prio[order[k + 1]], 0);
		}
	}
	finish(p, m);
}
END_TEST

/* A range covers a block only if it covers all of its tokens; of several
 * covering ranges, the highest priority wins, and of equal ones the
 * longest duration (0: none). */
START_TEST(test_token_ranges)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(3, 6);
	struct kvp_retention r[4] = {
		range(0, 2 * BT + BT / 2, 7, 0), /* blocks 0, 1 */
		range(3 * BT, 0, 3, 0),		 /* blocks 3.. */
		range(4 * BT, 2 * BT, 3, 0),	 /* 4, 5 again */
		range(5 * BT, BT, 6, 40),	 /* block 5 higher, timed */
	};

	ck_assert_int_eq(kvp_manager_tick(m, 10, NULL), 0);
	put(m, 1, &a, r, 4);
	expect_ret(m, &a, 0, 7, 0);
	expect_ret(m, &a, 1, 7, 0);
	expect_ret(m, &a, 2, 0, 0); /* half covered: the default */
	expect_ret(m, &a, 3, 3, 0);
	expect_ret(m, &a, 4, 3, 0);
	expect_ret(m, &a, 5, 6, 50);
	finish(p, m);
}
END_TEST

START_TEST(test_equal_ranges_longest)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(4, 2);
	struct kvp_retention r[3] = {
		range(0, 2 * BT, 4, 5),
		range(0, BT, 4, 0),  /* block 0: no expiry */
		range(BT, BT, 4, 9), /* block 1: the later one */
	};

	put(m, 1, &a, r, 3);
	expect_ret(m, &a, 0, 4, 0);
	expect_ret(m, &a, 1, 4, 9);
	finish(p, m);
}
END_TEST

/* A timed priority lasts until the clock reaches its expiry; then the
 * block is a default one, as if just released. */
START_TEST(test_expiry_idle)
{
	struct kvp_pool *p = mkpool_nc(6);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(5, 2), b = mkchain(6, 2), c = mkchain(7, 2);
	struct kvp_retention r = range(0, 0, 4, 10);
	uint64_t now = 0;

	put(m, 1, &a, &r, 1); /* expires at 10 */
	put(m, 2, &b, NULL, 0);
	put(m, 3, &c, NULL, 0);
	ck_assert_int_eq(kvp_manager_tick(m, 9, &now), 0);
	ck_assert_uint_eq(now, 9);
	expect_ret(m, &a, 0, 4, 10);
	evict(m, 1); /* b1 */
	expect_ret(m, &b, 1, -1, 0);
	expect_ret(m, &a, 1, 4, 10);
	ck_assert_int_eq(kvp_manager_tick(m, 1, &now), 0);
	ck_assert_uint_eq(now, 10);
	ck_assert_uint_eq(mstats(m).retention_clock, 10);
	expect_ret(m, &a, 0, 0, 0);
	expect_ret(m, &a, 1, 0, 0);
	/* Default order now: b0, c1, c0, then a (demoted after them). */
	evict(m, 3);
	expect_ret(m, &b, 0, -1, 0);
	expect_ret(m, &c, 0, -1, 0);
	expect_ret(m, &a, 1, 0, 0);
	evict(m, 1);
	expect_ret(m, &a, 1, -1, 0);
	expect_ret(m, &a, 0, 0, 0);
	finish(p, m);
}
END_TEST

/* A block whose priority expired while a sequence held it joins the
 * default order when released; one that has not expired keeps it. */
START_TEST(test_expiry_held)
{
	struct kvp_pool *p = mkpool_nc(6);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(8, 2), b = mkchain(9, 2), c = mkchain(10, 2);
	struct kvp_retention ra = range(0, 0, 3, 5), rb = range(0, 0, 3, 50);

	hold(m, 1, &a, &ra, 1, 2, 0);
	hold(m, 2, &b, &rb, 1, 2, 0);
	put(m, 3, &c, NULL, 0);
	ck_assert_int_eq(kvp_manager_tick(m, 7, NULL), 0);
	free_ok(m, 1); /* expired: default, after c */
	free_ok(m, 2);
	expect_ret(m, &a, 0, 0, 0);
	expect_ret(m, &b, 0, 3, 50);
	evict(m, 3); /* c1 c0 a1 */
	expect_ret(m, &c, 0, -1, 0);
	expect_ret(m, &a, 1, -1, 0);
	expect_ret(m, &a, 0, 0, 0);
	expect_ret(m, &b, 1, 3, 50);
	finish(p, m);
}
END_TEST

/* Past the cap, a commit pins nothing more: those blocks get
 * KVP_RETAIN_MAX and the call counts them.  Pinned blocks are never
 * evicted; a reset unpins, and so does an expiry. */
START_TEST(test_pin_cap)
{
	struct kvp_pool *p = mkpool_nc(6);
	struct kvp_manager *m = mkmgr_pinned(p, 2);
	struct chain a = mkchain(11, 4), b = mkchain(12, 2);
	struct kvp_retention r = range(0, 0, KVP_RETAIN_PIN, 0);

	hold(m, 1, &a, &r, 1, 4, 2);
	expect_ret(m, &a, 0, KVP_RETAIN_PIN, 0);
	expect_ret(m, &a, 1, KVP_RETAIN_PIN, 0);
	expect_ret(m, &a, 2, KVP_RETAIN_MAX, 0);
	expect_ret(m, &a, 3, KVP_RETAIN_MAX, 0);
	ck_assert_uint_eq(mstats(m).prefix_pinned, 2);
	free_ok(m, 1);
	put(m, 2, &b, NULL, 0);
	/* 6 idle: b first, then the MAX ones; the pins never. */
	evict(m, 4);
	expect_ret(m, &b, 0, -1, 0);
	expect_ret(m, &a, 3, -1, 0);
	expect_ret(m, &a, 2, -1, 0);
	expect_ret(m, &a, 1, KVP_RETAIN_PIN, 0);
	ck_assert_uint_eq(pstats(p).evictable, 2); /* the pins */
	ck_assert_int_eq(kvp_seq_create(m, 5, BT), -ENOSPC);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &(uint32_t){0}), -ENOSPC);
	expect_ret(m, &a, 0, KVP_RETAIN_PIN, 0);
	expect_ret(m, &a, 1, KVP_RETAIN_PIN, 0);
	ck_assert_uint_eq(mstats(m).prefix_pinned, 2);
	/* A reset forgets the pins; then the cap has room again. */
	ck_assert_int_eq(kvp_prefix_reset(m), 0);
	ck_assert_uint_eq(mstats(m).prefix_pinned, 0);
	unevict(m);
	put(m, 3, &b, &r, 1);
	ck_assert_uint_eq(mstats(m).prefix_pinned, 2);
	/* (finish destroys the manager: its pins go with its blocks.) */
}
END_TEST

/* A timed pin holds until its expiry, then its block is an ordinary
 * idle one (and uncounted). */
START_TEST(test_pin_expires)
{
	struct kvp_pool *p = mkpool_nc(4);
	struct kvp_manager *m = mkmgr_pinned(p, 2);
	struct chain a = mkchain(19, 2), b = mkchain(20, 2);
	struct kvp_retention r = range(0, 0, KVP_RETAIN_PIN, 3);

	put(m, 1, &a, &r, 1);
	put(m, 2, &b, NULL, 0);
	evict(m, 2); /* b */
	ck_assert_int_eq(kvp_seq_create(m, 5, BT), -ENOSPC);
	ck_assert_int_eq(kvp_manager_tick(m, 3, NULL), 0);
	ck_assert_uint_eq(mstats(m).prefix_pinned, 0);
	expect_ret(m, &a, 1, 0, 0);
	evict(m, 1);
	expect_ret(m, &a, 1, -1, 0);
	expect_ret(m, &a, 0, 0, 0);
	finish(p, m);
}
END_TEST

/* A hit keeps its priority unless the new commit raises it; an equal
 * priority renews the expiry, never shortens it. */
START_TEST(test_hit_raise)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(13, 3), c = mkchain(14, 2);
	struct kvp_retention r3 = range(0, 0, 3, 0), r1 = range(0, 0, 1, 0),
			     r8 = range(0, 2 * BT, 8, 0),
			     r8t = range(0, 0, 8, 5), c6 = range(0, 0, 6, 5),
			     c6b = range(0, 0, 6, 10);

	put(m, 1, &a, &r3, 1);
	hold_hit(m, 2, &a, &r1, 1, 0, 0); /* all 3 hit: nothing new */
	expect_ret(m, &a, 0, 3, 0);
	ck_assert_int_eq(kvp_seq_commit_retained(m, 2, a.h, a.nh, &r8, 1, NULL),
			 0);
	expect_ret(m, &a, 0, 8, 0);
	expect_ret(m, &a, 1, 8, 0);
	expect_ret(m, &a, 2, 3, 0); /* outside the range */
	/* The same priority with a duration: no expiry stays none. */
	ck_assert_int_eq(
		kvp_seq_commit_retained(m, 2, a.h, a.nh, &r8t, 1, NULL), 0);
	expect_ret(m, &a, 0, 8, 0);
	expect_ret(m, &a, 2, 8, 5); /* raised from 3, timed */
	free_ok(m, 2);
	/* Timed, then renewed to a later expiry. */
	put(m, 3, &c, &c6, 1);
	expect_ret(m, &c, 0, 6, 5);
	ck_assert_int_eq(kvp_manager_tick(m, 2, NULL), 0);
	hold_hit(m, 4, &c, &c6b, 1, 0, 0);
	expect_ret(m, &c, 0, 6, 12);
	/* A plain commit changes nothing. */
	ck_assert_int_eq(kvp_seq_commit(m, 4, c.h, c.nh), 0);
	expect_ret(m, &c, 1, 6, 12);
	free_ok(m, 4);
	/* An expired pin-less block raised again by a hit. */
	ck_assert_int_eq(kvp_manager_tick(m, 20, NULL), 0);
	expect_ret(m, &c, 0, 0, 0);
	hold_hit(m, 5, &c, &c6, 1, 0, 0);
	expect_ret(m, &c, 0, 6, 27);
	free_ok(m, 5);
	finish(p, m);
}
END_TEST

/* A raise to a pin counts against the cap, as a new pin does. */
START_TEST(test_hit_raise_pin)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr_pinned(p, 1);
	struct chain a = mkchain(15, 2);
	struct kvp_retention pin = range(0, 0, KVP_RETAIN_PIN, 0);
	uint32_t unp = 0xDEAD;

	put(m, 1, &a, NULL, 0);
	hold_hit(m, 2, &a, NULL, 0, 0, 0);
	ck_assert_int_eq(
		kvp_seq_commit_retained(m, 2, a.h, a.nh, &pin, 1, &unp), 0);
	ck_assert_uint_eq(unp, 1);
	expect_ret(m, &a, 0, KVP_RETAIN_PIN, 0);
	expect_ret(m, &a, 1, KVP_RETAIN_MAX, 0);
	ck_assert_uint_eq(mstats(m).prefix_pinned, 1);
	free_ok(m, 2);
	finish(p, m);
}
END_TEST

/* STORED events carry the priority the commit gave their blocks: one
 * event per run of one priority (a pin the cap refused is KVP_RETAIN_MAX). */
static struct {
	uint32_t n, count[8], prio[8];
	struct kvp_hash h0[8];
} stored;

static void on_stored(const struct kvp_event *ev, void *arg)
{
	(void)arg;
	if (ev->type != KVP_EVENT_STORED || stored.n == 8)
		return;
	stored.count[stored.n] = ev->nhashes;
	stored.prio[stored.n] = ev->priority;
	stored.h0[stored.n] = ev->hashes[0];
	stored.n++;
}

START_TEST(test_events_priority)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr_pinned(p, 1);
	struct chain a = mkchain(21, 5);
	struct kvp_retention r[2] = {range(0, 2 * BT, KVP_RETAIN_PIN, 0),
				     range(3 * BT, BT, 4, 0)};
	static const uint32_t want_first[4] = {0, 1, 2, 3},
			      want_count[4] = {1, 1, 1, 2},
			      want_prio[4] = {KVP_RETAIN_PIN, KVP_RETAIN_MAX, 0,
					      4};

	memset(&stored, 0, sizeof(stored));
	ck_assert_int_eq(kvp_manager_set_event_cb(m, on_stored, NULL), 0);
	/* Blocks 0: pinned; 1: its pin refused, KVP_RETAIN_MAX; 2: the
	 * default; 3 and 4: priority 4. */
	r[1].num_tokens = 2 * BT;
	hold(m, 1, &a, r, 2, 5, 1);
	free_ok(m, 1);
	ck_assert_uint_eq(stored.n, 4);
	for (uint32_t k = 0; k < 4; k++) {
		ck_assert_uint_eq(stored.count[k], want_count[k]);
		ck_assert_uint_eq(stored.prio[k], want_prio[k]);
		ck_assert(!memcmp(&stored.h0[k], &a.h[want_first[k]],
				  sizeof(struct kvp_hash)));
	}
	ck_assert_int_eq(kvp_manager_set_event_cb(m, NULL, NULL), 0);
	finish(p, m);
}
END_TEST

/* Bad input changes nothing. */
START_TEST(test_bad_input)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p), *plain, *bad = NULL;
	struct kvp_manager_config mc;
	struct chain a = mkchain(16, 2);
	struct kvp_retention hi = range(0, 0, KVP_RETAIN_PIN + 1, 0);
	uint32_t prio, unp = 0xDEAD;
	uint64_t exp, now;

	memset(&mc, 0, sizeof(mc));
	mc.pool = p;
	mc.flags = KVP_PREFIX_CACHE;
	mc.max_pinned = 9; /* above the pool's 8 blocks */
	ck_assert_int_eq(kvp_manager_create(&mc, &bad), -EINVAL);
	ck_assert_ptr_null(bad);
	mc.flags = 0;
	mc.max_pinned = 0;
	ck_assert_int_eq(kvp_manager_create(&mc, &plain), 0);

	hold(m, 1, &a, NULL, 0, 2, 0);
	ck_assert_int_eq(kvp_seq_commit_retained(m, 1, a.h, a.nh, &hi, 1, &unp),
			 -EINVAL);
	ck_assert_uint_eq(unp, 0);
	ck_assert_int_eq(
		kvp_seq_commit_retained(m, 1, a.h, a.nh, NULL, 1, NULL),
		-EINVAL);
	ck_assert_int_eq(
		kvp_seq_commit_retained(NULL, 1, a.h, a.nh, NULL, 0, NULL),
		-EINVAL);
	ck_assert_int_eq(
		kvp_seq_commit_retained(plain, 1, a.h, a.nh, NULL, 0, NULL),
		-EINVAL);
	ck_assert_int_eq(
		kvp_seq_commit_retained(m, 99, a.h, a.nh, NULL, 0, NULL),
		-ENOENT);
	expect_ret(m, &a, 0, 0, 0);

	ck_assert_int_eq(kvp_manager_tick(NULL, 1, NULL), -EINVAL);
	ck_assert_int_eq(kvp_manager_tick(plain, 1, NULL), -EINVAL);
	ck_assert_int_eq(kvp_manager_tick(m, 5, &now), 0);
	ck_assert_int_eq(kvp_manager_tick(m, UINT64_MAX, &now), -ERANGE);
	ck_assert_int_eq(kvp_manager_tick(m, (1ull << 56) - 5, &now), -ERANGE);
	ck_assert_uint_eq(mstats(m).retention_clock, 5);
	ck_assert_int_eq(kvp_manager_tick(m, (1ull << 56) - 7, &now), 0);
	ck_assert_uint_eq(now, (1ull << 56) - 2);

	ck_assert_int_eq(kvp_prefix_retention(NULL, &a.h[0], &prio, &exp),
			 -EINVAL);
	ck_assert_int_eq(kvp_prefix_retention(m, NULL, &prio, &exp), -EINVAL);
	ck_assert_int_eq(kvp_prefix_retention(m, &a.h[0], NULL, &exp), -EINVAL);
	ck_assert_int_eq(kvp_prefix_retention(m, &a.h[0], &prio, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvp_prefix_retention(plain, &a.h[0], &prio, &exp),
			 -EINVAL);
	{
		struct chain z = mkchain(17, 1);

		ck_assert_int_eq(kvp_prefix_retention(m, &z.h[0], &prio, &exp),
				 -ENOENT);
	}
	free_ok(m, 1);
	kvp_manager_destroy(plain);
	finish(p, m);
}
END_TEST

/* Near the end of the clock a duration saturates: never expires. */
START_TEST(test_duration_saturates)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkpmgr(p);
	struct chain a = mkchain(18, 1);
	struct kvp_retention r = range(0, 0, 2, UINT64_MAX);

	put(m, 1, &a, &r, 1);
	expect_ret(m, &a, 0, 2, 0);
	finish(p, m);
}
END_TEST

static Suite *retention_suite(void)
{
	Suite *s = suite_create("retention");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_lower_priority_first);
	tcase_add_test(tc, test_levels_in_order);
	tcase_add_test(tc, test_token_ranges);
	tcase_add_test(tc, test_equal_ranges_longest);
	tcase_add_test(tc, test_expiry_idle);
	tcase_add_test(tc, test_expiry_held);
	tcase_add_test(tc, test_pin_cap);
	tcase_add_test(tc, test_pin_expires);
	tcase_add_test(tc, test_hit_raise);
	tcase_add_test(tc, test_hit_raise_pin);
	tcase_add_test(tc, test_events_priority);
	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_duration_saturates);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(retention_suite());
}
