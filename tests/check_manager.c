/* SPDX-License-Identifier: MIT */
/*
 * check_manager.c - Check unit tests for the kvpool sequence manager
 * (kvp_manager_*, kvp_seq_*, kvp_admit, kvp_evict*, kvp_export_*).
 *
 * Every expectation below comes from the documentation in kvpool.h.  Pools
 * are ID-only with 16 tokens per block unless a test needs otherwise, and
 * without per-thread caches where exact free counts matter (free counts
 * include parked blocks anyway).  Worker threads never call ck_assert; they
 * record their first failure in a buffer that the main thread asserts on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream */
#endif
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#include "check_common.h"

#define BT CHECK_BLOCK_TOKENS /* tokens per block in every pool below */

/* An address that kvp_manager_create must not write over *out on failure. */
static char out_sentinel_storage;
#define OUT_SENTINEL ((struct kvp_manager *)(void *)&out_sentinel_storage)

/* ------------------------------------------------------------ helpers */

static uint32_t blocks_for(uint32_t tokens)
{
	return tokens / BT + (tokens % BT != 0);
}

static struct kvp_manager_config mcfg(struct kvp_pool *p, enum kvp_policy pol)
{
	struct kvp_manager_config c;

	memset(&c, 0, sizeof(c));
	c.pool = p;
	c.policy = pol;
	return c;
}

static struct kvp_manager *mkmgr_full(struct kvp_pool *p, enum kvp_policy pol,
				      float threshold, float watermark)
{
	struct kvp_manager_config c = mcfg(p, pol);

	c.eviction_threshold = threshold;
	c.watermark = watermark;
	return mkmgr_cfg(&c);
}

static struct kvp_manager *mkmgr(struct kvp_pool *p, enum kvp_policy pol)
{
	return mkmgr_full(p, pol, 0.0f, 0.0f);
}

static uint64_t pool_free(struct kvp_pool *p)
{
	return pstats(p).free;
}

/* Token and block counts of a sequence, and its table's length. */
#define expect_seq(m, s, t, b) expect_seq_at((m), (s), (t), (b), __LINE__)
static void expect_seq_at(struct kvp_manager *m, uint64_t s, uint32_t tokens,
			  uint32_t blocks, int line)
{
	struct kvp_seq_info in = info_ok_at(m, s, line);
	uint32_t n = 0xDEAD;
	int rc;

	ck_assert_msg(in.num_tokens == tokens,
		      "line %d: seq %llu num_tokens = %u, want %u", line,
		      ULL(s), in.num_tokens, tokens);
	ck_assert_msg(in.num_blocks == blocks,
		      "line %d: seq %llu num_blocks = %u, want %u", line,
		      ULL(s), in.num_blocks, blocks);
	rc = kvp_seq_blocks(m, s, NULL, 0, &n);
	ck_assert_msg(rc == (blocks ? -ENOBUFS : 0),
		      "line %d: kvp_seq_blocks(%llu, NULL, 0) = %d (%s)", line,
		      ULL(s), rc, kvp_strerror(rc));
	ck_assert_msg(n == blocks,
		      "line %d: kvp_seq_blocks(%llu) count = %u, want %u", line,
		      ULL(s), n, blocks);
}

#define expect_refs(p, id, want) expect_refs_at((p), (id), (want), __LINE__)
static void expect_refs_at(struct kvp_pool *p, uint32_t id, int want, int line)
{
	int rc = kvp_block_refcount(p, id);

	ck_assert_msg(rc == want, "line %d: refcount of block %u = %d, want %d",
		      line, id, rc, want);
}

#define expect_table(got, n, want, wn)                                         \
	expect_table_at((got), (n), (want), (wn), __LINE__)
static void expect_table_at(const uint32_t *got, uint32_t n,
			    const uint32_t *want, uint32_t wn, int line)
{
	uint32_t i;

	ck_assert_msg(n == wn, "line %d: table has %u blocks, want %u", line, n,
		      wn);
	for (i = 0; i < n; i++)
		ck_assert_msg(got[i] == want[i],
			      "line %d: table[%u] = %u, want %u", line, i,
			      got[i], want[i]);
}

static void expect_evict(struct kvp_manager *m, uint64_t want, int line)
{
	uint64_t v = 0xDEADBEEF;
	int rc = kvp_evict(m, &v);

	ck_assert_msg(rc == 0, "line %d: kvp_evict = %d (%s)", line, rc,
		      kvp_strerror(rc));
	ck_assert_msg(v == want, "line %d: victim %llu, want %llu", line,
		      ULL(v), ULL(want));
	expect_gone_at(m, want, line);
}
#define EXPECT_EVICT(m, want) expect_evict((m), (want), __LINE__)

/* Checks, destroys the manager and the pool: the end of most tests. */
static void finish(struct kvp_manager *m, struct kvp_pool *p)
{
	struct kvp_pool_stats st;
	int rc;

	mcheck_ok(m);
	kvp_manager_destroy(m);
	st = pstats(p);
	ck_assert_msg(st.free == st.total,
		      "after kvp_manager_destroy: free %llu of %llu",
		      ULL(st.free), ULL(st.total));
	rc = kvp_pool_check(p);
	ck_assert_msg(rc == 0, "kvp_pool_check = %d (%s)", rc,
		      kvp_strerror(rc));
	kvp_pool_unref(p);
}

/* Whether text contains v as a whole decimal number. */
static int has_number(const char *text, unsigned long long v)
{
	char buf[32];
	const char *s = text;
	size_t len;

	snprintf(buf, sizeof(buf), "%llu", v);
	len = strlen(buf);
	while ((s = strstr(s, buf)) != NULL) {
		if ((s == text || !isdigit((unsigned char)s[-1])) &&
		    !isdigit((unsigned char)s[len]))
			return 1;
		s++;
	}
	return 0;
}

/* Pool variants for loop tests: no cache, explicit cache, automatic. */
struct variant {
	uint32_t cache_blocks;
	uint32_t flags;
};
static const struct variant variants[] = {
	{0, KVP_POOL_NOCACHE},
	{4, 0},
	{0, 0},
};
#define NVARIANTS ((int)ARRAY_SIZE(variants))

/* ------------------------------------------------------------ manager */

START_TEST(test_mgr_create_null_args)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager_config c = mcfg(p, KVP_EVICT_LRU);
	struct kvp_manager *out = OUT_SENTINEL;

	ck_assert_int_eq(kvp_manager_create(NULL, &out), -EINVAL);
	ck_assert_ptr_eq(out, OUT_SENTINEL);
	ck_assert_int_eq(kvp_manager_create(&c, NULL), -EINVAL);
	c.pool = NULL;
	ck_assert_int_eq(kvp_manager_create(&c, &out), -EINVAL);
	ck_assert_ptr_eq(out, OUT_SENTINEL);
	ck_assert_uint_eq(pool_free(p), 16);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_mgr_create_bad_config)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct {
		const char *what;
		struct kvp_manager_config cfg;
	} cases[32];
	size_t n = 0, i;

#define ADD_CASE(w, pol, thr, wm, fl)                                          \
	do {                                                                   \
		cases[n].what = (w);                                           \
		cases[n].cfg = mcfg(p, (enum kvp_policy)(pol));                \
		cases[n].cfg.eviction_threshold = (thr);                       \
		cases[n].cfg.watermark = (wm);                                 \
		cases[n].cfg.flags = (fl);                                     \
		n++;                                                           \
	} while (0)

	ADD_CASE("policy 4", 4, 0.0f, 0.0f, 0);
	ADD_CASE("policy 100", 100, 0.0f, 0.0f, 0);
	ADD_CASE("policy -1", -1, 0.0f, 0.0f, 0);
	ADD_CASE("flags bit 3 (unknown)", 0, 0.0f, 0.0f, 1u << 3);
	ADD_CASE("KVP_EMIT_CACHED_EVENTS without KVP_PREFIX_CACHE", 0, 0.0f,
		 0.0f, KVP_EMIT_CACHED_EVENTS);
	ADD_CASE("flags bit 31", 0, 0.0f, 0.0f, 1u << 31);
	ADD_CASE("threshold 1.0001", 0, 1.0001f, 0.0f, 0);
	ADD_CASE("threshold 1.5", 0, 1.5f, 0.0f, 0);
	ADD_CASE("threshold 2", 0, 2.0f, 0.0f, 0);
	ADD_CASE("threshold -0.1", 0, -0.1f, 0.0f, 0);
	ADD_CASE("threshold -1", 0, -1.0f, 0.0f, 0);
	ADD_CASE("threshold NaN", 0, NAN, 0.0f, 0);
	ADD_CASE("threshold -NaN", 0, -NAN, 0.0f, 0);
	ADD_CASE("threshold +inf", 0, INFINITY, 0.0f, 0);
	ADD_CASE("threshold -inf", 0, -INFINITY, 0.0f, 0);
	ADD_CASE("watermark 1", 0, 0.0f, 1.0f, 0);
	ADD_CASE("watermark 1.5", 0, 0.0f, 1.5f, 0);
	ADD_CASE("watermark -0.01", 0, 0.0f, -0.01f, 0);
	ADD_CASE("watermark -1", 0, 0.0f, -1.0f, 0);
	ADD_CASE("watermark NaN", 0, 0.0f, NAN, 0);
	ADD_CASE("watermark +inf", 0, 0.0f, INFINITY, 0);
	ADD_CASE("watermark -inf", 0, 0.0f, -INFINITY, 0);
	ADD_CASE("good policy, bad watermark", 3, 0.5f, 1.0f, 0);
	ADD_CASE("good values, bad flags", 1, 0.5f, 0.5f, 4u);
#undef ADD_CASE
	ck_assert_uint_le(n, ARRAY_SIZE(cases));

	for (i = 0; i < n; i++) {
		struct kvp_manager *out = OUT_SENTINEL;
		int rc = kvp_manager_create(&cases[i].cfg, &out);

		ck_assert_msg(rc == -EINVAL, "%s: kvp_manager_create = %d (%s)",
			      cases[i].what, rc, kvp_strerror(rc));
		ck_assert_msg(out == OUT_SENTINEL, "%s: *out was written",
			      cases[i].what);
	}
	ck_assert_uint_eq(pool_free(p), 16);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_mgr_create_good_config)
{
	struct kvp_pool *p = mkpool_nc(16);
	static const float thresholds[] = {0.0f, 1.0f, 0.5f, 1e-6f, 0.999f};
	static const float watermarks[] = {0.0f, 1e-6f, 0.5f, 0.999f};
	size_t i, j;
	int pol;

	for (pol = KVP_EVICT_LRU; pol <= KVP_EVICT_PRIORITY; pol++)
		for (i = 0; i < ARRAY_SIZE(thresholds); i++)
			for (j = 0; j < ARRAY_SIZE(watermarks); j++) {
				struct kvp_manager *m = mkmgr_full(
					p, (enum kvp_policy)pol, thresholds[i],
					watermarks[j]);

				ck_assert_ptr_ne(m, OUT_SENTINEL);
				create_ok(m, 1, 20);
				mcheck_ok(m);
				kvp_manager_destroy(m);
				ck_assert_uint_eq(pool_free(p), 16);
			}
	kvp_manager_destroy(NULL); /* ignored */
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}
END_TEST

/*
 * threshold 0 means 0.9 and watermark 0 means 0.01; the numbers below have
 * a margin so that float rounding of 0.9 / 0.01 cannot matter.
 */
START_TEST(test_mgr_defaults)
{
	struct kvp_pool *p = mkpool_nc(1000);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_manager *none;
	uint64_t victims[16];
	uint32_t n = 0xDEAD;
	int i;

	/* Watermark 0.01 of 1000 blocks: about 10 blocks kept free. */
	ck_assert_int_eq(kvp_admit(m, 980 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 995 * BT), KVP_ADMIT_NEVER);
	ck_assert_int_eq(kvp_admit(m, 1000 * BT), KVP_ADMIT_NEVER);

	/* A tiny positive watermark means none. */
	none = mkmgr_full(p, KVP_EVICT_LRU, 0.0f, 1e-6f);
	ck_assert_int_eq(kvp_admit(none, 1000 * BT), KVP_ADMIT_OK);
	kvp_manager_destroy(none);

	/* Threshold 0.9: 14 sequences of 70 blocks (980 used). */
	for (i = 0; i < 14; i++)
		create_ok(m, (uint64_t)i, 70 * BT);
	ck_assert_uint_eq(pool_free(p), 20);
	ck_assert_int_eq(kvp_evict_until(m, -1.0f, victims, 16, &n), 0);
	/* 980 -> 910 (> 900) -> 840: two victims, the oldest first. */
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(victims[0], 0);
	ck_assert_uint_eq(victims[1], 1);
	ck_assert_uint_eq(pool_free(p), 160);
	finish(m, p);
}
END_TEST

START_TEST(test_mgr_holds_pool_ref)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_copy cow[1];
	struct kvp_stats st;
	uint32_t ncow = 0;

	kvp_pool_unref(p); /* the caller's reference: the manager keeps one */
	create_ok(m, 1, 40);
	append_ok(m, 1, 10);
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	create_ok(m, 3, 100);
	st = mstats(m);
	ck_assert_uint_eq(st.blocks_total, 32);
	ck_assert_uint_eq(st.blocks_used, 4 + 1 + 7);
	ck_assert_uint_eq(st.sequences, 3);
	ck_assert_int_eq(kvp_admit(m, 10 * BT), KVP_ADMIT_OK);
	mcheck_ok(m);
	/* Live sequences are freed, then the last pool reference dropped
	 * (ASan/valgrind see any leak or use after free). */
	kvp_manager_destroy(m);
}
END_TEST

START_TEST(test_mgr_destroy_frees_all)
{
	struct kvp_pool *p = mkpool(64, 4, 0, NULL);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LFU);
	struct kvp_copy cow[1];
	uint32_t ncow = 0, i;

	for (i = 0; i < 8; i++)
		create_ok(m, i, 5 + 9 * i);
	fork_ok(m, 7, 100);
	fork_ok(m, 100, 101);
	ck_assert_int_eq(kvp_seq_append(m, 101, 3, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_lt(pool_free(p), 64);
	mcheck_ok(m);
	kvp_manager_destroy(m);
	ck_assert_uint_eq(pool_free(p), 64);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_mgr_two_managers)
{
	struct kvp_pool *p = mkpool(64, 4, 0, NULL);
	struct kvp_manager *m1 = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_manager *m2 = mkmgr(p, KVP_EVICT_LONGEST);
	uint32_t a[8], b[8], na, nb, i, j;
	struct kvp_stats s1, s2;

	/* The same ids in both managers are distinct sequences. */
	create_ok(m1, 7, 20);
	create_ok(m2, 7, 40);
	create_ok(m2, 8, 16);
	expect_seq(m1, 7, 20, 2);
	expect_seq(m2, 7, 40, 3);
	expect_gone(m1, 8);
	ck_assert_int_eq(kvp_seq_fork(m1, 8, 9), -ENOENT);
	ck_assert_uint_eq(pool_free(p), 64 - 6);

	na = blocks_ok(m1, 7, a, 8);
	nb = blocks_ok(m2, 7, b, 8);
	for (i = 0; i < na; i++)
		for (j = 0; j < nb; j++)
			ck_assert_uint_ne(a[i], b[j]);

	append_ok(m1, 7, 20);
	expect_seq(m1, 7, 40, 3);
	expect_seq(m2, 7, 40, 3);

	s1 = mstats(m1);
	s2 = mstats(m2);
	ck_assert_uint_eq(s1.sequences, 1);
	ck_assert_uint_eq(s2.sequences, 2);
	ck_assert_uint_eq(s1.seq_creates, 1);
	ck_assert_uint_eq(s2.seq_creates, 2);
	ck_assert_uint_eq(s1.blocks_allocated, 3);
	ck_assert_uint_eq(s2.blocks_allocated, 4);
	/* blocks_used is pool-wide. */
	ck_assert_uint_eq(s1.blocks_used, 7);
	ck_assert_uint_eq(s2.blocks_used, 7);
	mcheck_ok(m1);
	mcheck_ok(m2);

	free_ok(m1, 7);
	expect_gone(m1, 7);
	expect_seq(m2, 7, 40, 3);
	ck_assert_int_eq(kvp_seq_free(m1, 7), -ENOENT);
	ck_assert_uint_eq(pool_free(p), 64 - 4);

	/* Destroying one manager leaves the other's sequences alone. */
	create_ok(m1, 7, 33);
	kvp_manager_destroy(m1);
	ck_assert_uint_eq(pool_free(p), 64 - 4);
	expect_seq(m2, 7, 40, 3);
	expect_seq(m2, 8, 16, 1);
	nb = blocks_ok(m2, 7, b, 8);
	for (i = 0; i < nb; i++)
		expect_refs(p, b[i], 1);
	finish(m2, p);
}
END_TEST

/* ------------------------------------------------------------ create */

START_TEST(test_seq_create_blocks)
{
	static const struct {
		uint32_t tokens, blocks;
	} cases[] = {
		{0, 0},	 {1, 1},  {15, 1}, {16, 1},  {17, 2},
		{31, 2}, {32, 2}, {33, 3}, {100, 7}, {160, 10},
	};
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	unsigned char seen[64];
	uint64_t expect_free = 64;
	uint32_t ids[16], n, i, k;

	memset(seen, 0, sizeof(seen));
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		create_ok(m, 1000 + i, cases[i].tokens);
		expect_free -= cases[i].blocks;
		ck_assert_msg(pool_free(p) == expect_free,
			      "%u tokens: pool free %llu, want %llu",
			      cases[i].tokens, ULL(pool_free(p)),
			      ULL(expect_free));
		expect_seq(m, 1000 + i, cases[i].tokens, cases[i].blocks);
		n = blocks_ok(m, 1000 + i, ids, ARRAY_SIZE(ids));
		ck_assert_uint_eq(n, cases[i].blocks);
		for (k = 0; k < n; k++) {
			ck_assert_uint_lt(ids[k], 64);
			ck_assert_msg(!seen[ids[k]], "block %u in two tables",
				      ids[k]);
			seen[ids[k]] = 1;
			expect_refs(p, ids[k], 1);
		}
	}
	ck_assert_uint_eq(mstats(m).sequences, ARRAY_SIZE(cases));
	ck_assert_uint_eq(mstats(m).seq_creates, ARRAY_SIZE(cases));
	ck_assert_uint_eq(mstats(m).blocks_allocated, 64 - expect_free);
	mcheck_ok(m);
	for (i = 0; i < ARRAY_SIZE(cases); i++)
		free_ok(m, 1000 + i);
	ck_assert_uint_eq(pool_free(p), 64);
	finish(m, p);
}
END_TEST

START_TEST(test_seq_create_extreme_ids)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	static const uint64_t ids[] = {0, UINT64_MAX, 1ull << 63, 1ull << 32,
				       0xFFFFFFFFull};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(ids); i++)
		create_ok(m, ids[i], (uint32_t)(i + 1) * 3);
	for (i = 0; i < ARRAY_SIZE(ids); i++) {
		expect_seq(m, ids[i], (uint32_t)(i + 1) * 3, 1);
		ck_assert_int_eq(kvp_seq_create(m, ids[i], 1), -EEXIST);
	}
	ck_assert_uint_eq(pool_free(p), 16 - ARRAY_SIZE(ids));
	mcheck_ok(m);
	for (i = 0; i < ARRAY_SIZE(ids); i++) {
		free_ok(m, ids[i]);
		expect_gone(m, ids[i]);
	}
	ck_assert_uint_eq(pool_free(p), 16);
	finish(m, p);
}
END_TEST

START_TEST(test_seq_create_duplicate)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t before[4], after[4], nb, na;
	struct kvp_seq_info i0, i1;

	create_ok(m, 5, 20);
	nb = blocks_ok(m, 5, before, 4);
	i0 = info_ok(m, 5);
	ck_assert_int_eq(kvp_seq_create(m, 5, 100), -EEXIST);
	ck_assert_int_eq(kvp_seq_create(m, 5, 20), -EEXIST);
	ck_assert_int_eq(kvp_seq_create(m, 5, 0), -EEXIST);
	ck_assert_uint_eq(pool_free(p), 14);
	i1 = info_ok(m, 5);
	ck_assert_uint_eq(i1.num_tokens, 20);
	ck_assert_uint_eq(i1.num_blocks, 2);
	ck_assert_uint_eq(i1.access_count, i0.access_count);
	na = blocks_ok(m, 5, after, 4);
	expect_table(after, na, before, nb);

	create_ok(m, 6, 0);
	ck_assert_int_eq(kvp_seq_create(m, 6, 0), -EEXIST);
	ck_assert_int_eq(kvp_seq_create(m, 6, 50), -EEXIST);
	ck_assert_uint_eq(pool_free(p), 14);
	expect_seq(m, 6, 0, 0);
	ck_assert_uint_eq(mstats(m).seq_creates, 2);
	ck_assert_uint_eq(mstats(m).sequences, 2);
	ck_assert_uint_eq(mstats(m).blocks_allocated, 2);

	/* The id is free again once its sequence is. */
	free_ok(m, 5);
	create_ok(m, 5, 1);
	expect_seq(m, 5, 1, 1);
	finish(m, p);
}
END_TEST

START_TEST(test_seq_create_nospc)
{
	struct kvp_pool *p =
		mkpool(10, variants[_i].cache_blocks, variants[_i].flags, NULL);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);

	create_ok(m, 1, 100); /* 7 blocks */
	ck_assert_uint_eq(pool_free(p), 3);
	ck_assert_int_eq(kvp_seq_create(m, 2, 64), -ENOSPC); /* 4 blocks */
	ck_assert_int_eq(kvp_seq_create(m, 2, 49), -ENOSPC);
	ck_assert_uint_eq(pool_free(p), 3);
	expect_gone(m, 2);
	/* ceil(UINT32_MAX / 16) blocks must not wrap around to 0. */
	ck_assert_int_eq(kvp_seq_create(m, 2, UINT32_MAX), -ENOSPC);
	ck_assert_int_eq(kvp_seq_create(m, 2, UINT32_MAX - 14), -ENOSPC);
	expect_gone(m, 2);
	ck_assert_uint_eq(pool_free(p), 3);
	ck_assert_uint_eq(mstats(m).seq_creates, 1);
	ck_assert_uint_eq(mstats(m).sequences, 1);
	mcheck_ok(m);

	/* Exactly the rest of the pool fits, even with thread caches. */
	create_ok(m, 2, 48);
	ck_assert_uint_eq(pool_free(p), 0);
	create_ok(m, 3, 0); /* needs no block */
	ck_assert_int_eq(kvp_seq_create(m, 4, 1), -ENOSPC);
	expect_gone(m, 4);
	ck_assert_int_eq(kvp_seq_append(m, 3, 1, NULL, 0, NULL), -ENOSPC);
	expect_seq(m, 3, 0, 0);
	mcheck_ok(m);
	free_ok(m, 1);
	create_ok(m, 4, 7 * BT);
	ck_assert_uint_eq(pool_free(p), 0);
	finish(m, p);
}
END_TEST

START_TEST(test_seq_create_null)
{
	ck_assert_int_eq(kvp_seq_create(NULL, 1, 0), -EINVAL);
	ck_assert_int_eq(kvp_seq_create(NULL, 1, 20), -EINVAL);
}
END_TEST

/* ------------------------------------------------------------ info */

START_TEST(test_seq_info_errors)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_seq_info in;

	create_ok(m, 1, 20);
	ck_assert_int_eq(kvp_seq_info(NULL, 1, &in), -EINVAL);
	ck_assert_int_eq(kvp_seq_info(m, 1, NULL), -EINVAL);
	ck_assert_int_eq(kvp_seq_info(m, 2, &in), -ENOENT);
	ck_assert_int_eq(kvp_seq_info(m, 0, &in), -ENOENT);
	ck_assert_int_eq(kvp_seq_info(m, UINT64_MAX, &in), -ENOENT);
	free_ok(m, 1);
	ck_assert_int_eq(kvp_seq_info(m, 1, &in), -ENOENT);
	finish(m, p);
}
END_TEST

START_TEST(test_seq_blocks_errors)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t ids[8], n;

	create_ok(m, 1, 40); /* 3 blocks */
	create_ok(m, 2, 0);
	ck_assert_int_eq(kvp_seq_blocks(NULL, 1, ids, 8, &n), -EINVAL);
	ck_assert_int_eq(kvp_seq_blocks(m, 1, ids, 8, NULL), -EINVAL);
	ck_assert_int_eq(kvp_seq_blocks(m, 1, NULL, 8, &n), -EINVAL);
	ck_assert_int_eq(kvp_seq_blocks(m, 3, ids, 8, &n), -ENOENT);

	n = 0;
	ck_assert_int_eq(kvp_seq_blocks(m, 1, ids, 2, &n), -ENOBUFS);
	ck_assert_uint_eq(n, 3);
	n = 0;
	ck_assert_int_eq(kvp_seq_blocks(m, 1, ids, 1, &n), -ENOBUFS);
	ck_assert_uint_eq(n, 3);
	n = 0;
	ck_assert_int_eq(kvp_seq_blocks(m, 1, NULL, 0, &n), -ENOBUFS);
	ck_assert_uint_eq(n, 3);
	n = 0;
	ck_assert_int_eq(kvp_seq_blocks(m, 1, ids, 3, &n), 0);
	ck_assert_uint_eq(n, 3);
	n = 99;
	ck_assert_int_eq(kvp_seq_blocks(m, 2, NULL, 0, &n), 0);
	ck_assert_uint_eq(n, 0);
	n = 99;
	ck_assert_int_eq(kvp_seq_blocks(m, 2, ids, 8, &n), 0);
	ck_assert_uint_eq(n, 0);
	finish(m, p);
}
END_TEST

START_TEST(test_seq_blocks_values)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t first[8], ids[8], guard[8], n, i;

	create_ok(m, 1, 20);
	n = blocks_ok(m, 1, first, 8);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_ne(first[0], first[1]);

	/* A larger buffer: only n entries are written. */
	for (i = 0; i < 8; i++)
		guard[i] = ids[i] = 0xCAFEu;
	n = blocks_ok(m, 1, ids, 8);
	ck_assert_uint_eq(n, 2);
	for (i = 2; i < 8; i++)
		ck_assert_uint_eq(ids[i], guard[i]);

	append_ok(m, 1, 40); /* 60 tokens: 4 blocks, the first two kept */
	expect_seq(m, 1, 60, 4);
	n = blocks_ok(m, 1, ids, 8);
	ck_assert_uint_eq(n, 4);
	ck_assert_uint_eq(ids[0], first[0]);
	ck_assert_uint_eq(ids[1], first[1]);
	for (i = 0; i < 4; i++) {
		ck_assert_uint_lt(ids[i], 16);
		expect_refs(p, ids[i], 1);
	}
	ck_assert_uint_ne(ids[2], ids[3]);
	ck_assert_uint_ne(ids[2], ids[0]);
	ck_assert_uint_ne(ids[2], ids[1]);
	ck_assert_uint_ne(ids[3], ids[0]);
	ck_assert_uint_ne(ids[3], ids[1]);
	finish(m, p);
}
END_TEST

START_TEST(test_seq_access_clock)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_seq_info a, b, c, prev;
	int i;

	create_ok(m, 1, 10);
	a = info_ok(m, 1);
	ck_assert_uint_eq(a.access_count, 1);
	create_ok(m, 2, 10);
	b = info_ok(m, 2);
	ck_assert_uint_eq(b.access_count, 1);
	ck_assert_uint_gt(b.last_access, a.last_access);

	append_ok(m, 1, 1);
	prev = a;
	a = info_ok(m, 1);
	ck_assert_uint_eq(a.access_count, 2);
	ck_assert_uint_gt(a.last_access, b.last_access);
	ck_assert_uint_gt(a.last_access, prev.last_access);

	/* Appending 0 tokens only touches the clock. */
	append_ok(m, 2, 0);
	prev = b;
	b = info_ok(m, 2);
	ck_assert_uint_eq(b.access_count, 2);
	ck_assert_uint_eq(b.num_tokens, 10);
	ck_assert_uint_gt(b.last_access, a.last_access);
	ck_assert_uint_gt(b.last_access, prev.last_access);

	/* Successive accesses to the same sequence. */
	for (i = 0; i < 5; i++) {
		prev = a;
		append_ok(m, 1, (uint32_t)i);
		a = info_ok(m, 1);
		ck_assert_uint_eq(a.access_count, prev.access_count + 1);
		ck_assert_uint_gt(a.last_access, prev.last_access);
	}
	ck_assert_uint_gt(a.last_access, b.last_access);

	/* Fork counts as an access of the source. */
	prev = a;
	fork_ok(m, 1, 3);
	a = info_ok(m, 1);
	c = info_ok(m, 3);
	ck_assert_uint_eq(a.access_count, prev.access_count + 1);
	ck_assert_uint_gt(a.last_access, prev.last_access);
	/* The fork's counters start afresh. */
	ck_assert_uint_lt(c.access_count, a.access_count);
	ck_assert_uint_le(c.access_count, 1);

	/* A failed append changes nothing, not even the clock. */
	prev = b;
	ck_assert_int_eq(kvp_seq_append(m, 2, UINT32_MAX, NULL, 0, NULL),
			 -EINVAL);
	b = info_ok(m, 2);
	ck_assert_uint_eq(b.access_count, prev.access_count);
	ck_assert_uint_eq(b.last_access, prev.last_access);
	finish(m, p);
}
END_TEST

/*
 * Across threads the clock is ordered to within KVP_CLOCK_SKEW ticks
 * (kvpool.h: ticks are handed to threads in batches, so that decode steps
 * on several threads do not share one counter's cache line).  Two threads
 * take turns (each waits for the other's access to return); one of them
 * runs far ahead, and the other's next access must still be stamped no
 * more than KVP_CLOCK_SKEW below it, which only holds if a stale batch is
 * refreshed.
 */
#define KVP_CLOCK_SKEW 1024
enum { CLK_CREATE, CLK_TOUCH, CLK_TOUCH_MANY, CLK_EXIT };

struct clk_worker {
	struct kvp_manager *m;
	pthread_barrier_t go, done;
	int op, rc;
	uint64_t seq;
};

static void *clk_thread(void *arg)
{
	struct clk_worker *w = arg;

	for (;;) {
		pthread_barrier_wait(&w->go);
		if (w->op == CLK_EXIT)
			return NULL;
		if (w->op == CLK_CREATE)
			w->rc = kvp_seq_create(w->m, w->seq, 16);
		else if (w->op == CLK_TOUCH)
			w->rc = kvp_seq_append(w->m, w->seq, 0, NULL, 0, NULL);
		else
			for (int k = 0; k < 5000 && !w->rc; k++)
				w->rc = kvp_seq_append(w->m, w->seq, 0, NULL,
						       0, NULL);
		pthread_barrier_wait(&w->done);
	}
}

static int clk_run(struct clk_worker *w, int op, uint64_t seq)
{
	w->op = op;
	w->seq = seq;
	w->rc = op == CLK_TOUCH_MANY ? 0 : -12345;
	pthread_barrier_wait(&w->go);
	if (op == CLK_EXIT)
		return 0;
	pthread_barrier_wait(&w->done);
	return w->rc;
}

START_TEST(test_seq_access_clock_threads)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct clk_worker w[2];
	pthread_t t[2];
	uint64_t la1, la2;
	int i, r;

	for (i = 0; i < 2; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].m = m;
		ck_assert_int_eq(pthread_barrier_init(&w[i].go, NULL, 2), 0);
		ck_assert_int_eq(pthread_barrier_init(&w[i].done, NULL, 2), 0);
		ck_assert_int_eq(pthread_create(&t[i], NULL, clk_thread, &w[i]),
				 0);
	}
	/* Thread 1 owns sequence 2, thread 0 sequence 1. */
	ck_assert_int_eq(clk_run(&w[1], CLK_CREATE, 2), 0);
	ck_assert_int_eq(clk_run(&w[0], CLK_CREATE, 1), 0);
	for (r = 0; r < 3; r++) {
		uint64_t before;

		/* Thread 0 runs 5000 ticks ahead, then thread 1 touches. */
		ck_assert_int_eq(clk_run(&w[0], CLK_TOUCH_MANY, 1), 0);
		ck_assert_int_eq(clk_run(&w[1], CLK_TOUCH, 2), 0);
		la1 = info_ok(m, 1).last_access;
		la2 = info_ok(m, 2).last_access;
		ck_assert_msg(la2 + KVP_CLOCK_SKEW > la1,
			      "round %d: seq 2 accessed after seq 1 but "
			      "last_access %llu lags %llu by more than %d",
			      r, ULL(la2), ULL(la1), KVP_CLOCK_SKEW);
		/* Within one thread the clock strictly increases. */
		before = la2;
		ck_assert_int_eq(clk_run(&w[1], CLK_TOUCH, 2), 0);
		la2 = info_ok(m, 2).last_access;
		ck_assert_uint_gt(la2, before);
		ck_assert_int_eq(clk_run(&w[0], CLK_TOUCH, 1), 0);
		la1 = info_ok(m, 1).last_access;
		ck_assert_msg(la1 + KVP_CLOCK_SKEW > la2,
			      "round %d: seq 1 accessed after seq 2 but "
			      "last_access %llu lags %llu by more than %d",
			      r, ULL(la1), ULL(la2), KVP_CLOCK_SKEW);
	}
	ck_assert_int_eq(clk_run(&w[1], CLK_TOUCH, 2), 0);
	for (i = 0; i < 2; i++) {
		clk_run(&w[i], CLK_EXIT, 0);
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		pthread_barrier_destroy(&w[i].go);
		pthread_barrier_destroy(&w[i].done);
	}
	/* Sequence 1 is the least recently accessed. */
	EXPECT_EVICT(m, 1);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ append */

START_TEST(test_append_within_block)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t before[4], after[4], nb, na;

	create_ok(m, 1, 20);
	nb = blocks_ok(m, 1, before, 4);
	append_ok(m, 1, 1);
	append_ok(m, 1, 11); /* 32: the last block is now full */
	expect_seq(m, 1, 32, 2);
	ck_assert_uint_eq(pool_free(p), 14);
	na = blocks_ok(m, 1, after, 4);
	expect_table(after, na, before, nb);
	ck_assert_uint_eq(mstats(m).appends, 2);
	ck_assert_uint_eq(mstats(m).blocks_allocated, 2);
	ck_assert_uint_eq(mstats(m).tokens, 32);
	finish(m, p);
}
END_TEST

START_TEST(test_append_cross_boundary)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t before[8], after[8], nb, na, i;

	create_ok(m, 1, 32);
	nb = blocks_ok(m, 1, before, 8);
	append_ok(m, 1, 1); /* 33: one new block */
	expect_seq(m, 1, 33, 3);
	ck_assert_uint_eq(pool_free(p), 13);
	na = blocks_ok(m, 1, after, 8);
	for (i = 0; i < nb; i++)
		ck_assert_uint_eq(after[i], before[i]);
	nb = na;
	memcpy(before, after, sizeof(after));

	append_ok(m, 1, 40); /* 73: two more */
	expect_seq(m, 1, 73, 5);
	ck_assert_uint_eq(pool_free(p), 11);
	na = blocks_ok(m, 1, after, 8);
	for (i = 0; i < nb; i++)
		ck_assert_uint_eq(after[i], before[i]);
	for (i = 0; i < na; i++)
		expect_refs(p, after[i], 1);

	append_ok(m, 1, 7); /* 80: fills the last one, nothing new */
	expect_seq(m, 1, 80, 5);
	ck_assert_uint_eq(pool_free(p), 11);

	/* An empty sequence: the first token takes a block. */
	create_ok(m, 2, 0);
	append_ok(m, 2, 16);
	expect_seq(m, 2, 16, 1);
	append_ok(m, 2, 1);
	expect_seq(m, 2, 17, 2);
	ck_assert_uint_eq(pool_free(p), 9);
	ck_assert_uint_eq(mstats(m).blocks_allocated, 7);
	ck_assert_uint_eq(mstats(m).appends, 5);
	finish(m, p);
}
END_TEST

START_TEST(test_append_zero)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_seq_info a, b;

	create_ok(m, 1, 16);
	create_ok(m, 2, 0);
	a = info_ok(m, 1);
	append_ok(m, 1, 0);
	b = info_ok(m, 1);
	ck_assert_uint_eq(b.num_tokens, 16);
	ck_assert_uint_eq(b.num_blocks, 1);
	ck_assert_uint_eq(b.access_count, a.access_count + 1);
	ck_assert_uint_gt(b.last_access, a.last_access);
	ck_assert_int_eq(kvp_seq_append(m, 2, 0, NULL, 0, NULL), 0);
	expect_seq(m, 2, 0, 0);
	ck_assert_uint_eq(pool_free(p), 7);
	finish(m, p);
}
END_TEST

START_TEST(test_append_errors)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_copy cow[1];
	uint32_t ncow = 0;

	create_ok(m, 1, 20);
	ck_assert_int_eq(kvp_seq_append(NULL, 1, 1, cow, 1, &ncow), -EINVAL);
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, NULL, 1, &ncow), -EINVAL);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), -ENOENT);
	ck_assert_int_eq(kvp_seq_append(m, 2, 0, cow, 1, &ncow), -ENOENT);
	expect_gone(m, 2);
	free_ok(m, 1);
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, cow, 1, &ncow), -ENOENT);
	ck_assert_uint_eq(mstats(m).appends, 0);
	ck_assert_uint_eq(pool_free(p), 8);
	/* cow NULL, cow_cap 0 and ncow NULL are fine when nothing is shared. */
	create_ok(m, 3, 20);
	ck_assert_int_eq(kvp_seq_append(m, 3, 30, NULL, 0, NULL), 0);
	expect_seq(m, 3, 50, 4);
	ck_assert_uint_eq(mstats(m).appends, 1);
	finish(m, p);
}
END_TEST

START_TEST(test_append_nospc)
{
	struct kvp_pool *p =
		mkpool(4, variants[_i].cache_blocks, variants[_i].flags, NULL);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_seq_info before, after;
	struct kvp_copy cow[2];
	uint32_t t0[4], t1[4], n0, n1, ncow = 0;
	struct kvp_stats s0, s1;

	create_ok(m, 1, 40); /* 3 blocks, last has 8 tokens */
	n0 = blocks_ok(m, 1, t0, 4);
	before = info_ok(m, 1);
	s0 = mstats(m);
	/* 40 + 25 = 65 tokens: 5 blocks, 2 more than the one free. */
	ck_assert_int_eq(kvp_seq_append(m, 1, 25, cow, 2, &ncow), -ENOSPC);
	after = info_ok(m, 1);
	ck_assert_uint_eq(after.num_tokens, before.num_tokens);
	ck_assert_uint_eq(after.num_blocks, before.num_blocks);
	ck_assert_uint_eq(after.access_count, before.access_count);
	ck_assert_uint_eq(after.last_access, before.last_access);
	n1 = blocks_ok(m, 1, t1, 4);
	expect_table(t1, n1, t0, n0);
	ck_assert_uint_eq(pool_free(p), 1);
	s1 = mstats(m);
	ck_assert_uint_eq(s1.appends, s0.appends);
	ck_assert_uint_eq(s1.blocks_allocated, s0.blocks_allocated);
	ck_assert_uint_eq(s1.tokens, 40);
	mcheck_ok(m);

	/* 40 + 24 = 64 tokens: exactly the last free block. */
	append_ok(m, 1, 24);
	expect_seq(m, 1, 64, 4);
	ck_assert_uint_eq(pool_free(p), 0);
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, cow, 2, &ncow), -ENOSPC);
	expect_seq(m, 1, 64, 4);
	finish(m, p);
}
END_TEST

START_TEST(test_append_overflow)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t t0[4], t1[4], n0, n1;
	struct kvp_copy cow[1];
	uint32_t ncow = 0;

	create_ok(m, 1, 20);
	n0 = blocks_ok(m, 1, t0, 4);
	ck_assert_int_eq(kvp_seq_append(m, 1, UINT32_MAX, cow, 1, &ncow),
			 -EINVAL);
	ck_assert_int_eq(kvp_seq_append(m, 1, UINT32_MAX - 19, cow, 1, &ncow),
			 -EINVAL);
	expect_seq(m, 1, 20, 2);
	n1 = blocks_ok(m, 1, t1, 4);
	expect_table(t1, n1, t0, n0);
	ck_assert_uint_eq(pool_free(p), 6);
	/* Exactly UINT32_MAX tokens does not overflow: it does not fit. */
	ck_assert_int_eq(kvp_seq_append(m, 1, UINT32_MAX - 20, cow, 1, &ncow),
			 -ENOSPC);
	expect_seq(m, 1, 20, 2);
	/* From 0 tokens, UINT32_MAX does not overflow either. */
	create_ok(m, 2, 0);
	ck_assert_int_eq(kvp_seq_append(m, 2, UINT32_MAX, cow, 1, &ncow),
			 -ENOSPC);
	expect_seq(m, 2, 0, 0);
	ck_assert_uint_eq(pool_free(p), 6);
	ck_assert_uint_eq(mstats(m).appends, 0);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ COW */

START_TEST(test_cow_basic)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], b[4], na, nb, ncow = 99, dst;
	struct kvp_copy cow[4];
	int64_t slot;

	create_ok(m, 1, 20); /* 2 blocks, the last holds 4 tokens */
	na = blocks_ok(m, 1, a, 4);
	ck_assert_uint_eq(na, 2);
	fork_ok(m, 1, 2);
	/* kvp_block_refcount counts holders: the fork shares the chunk that
	 * holds the full blocks (one holder) and takes a reference on the
	 * last one, the tail of both tables (two). */
	expect_refs(p, a[0], 1);
	expect_refs(p, a[1], 2);
	ck_assert_uint_eq(pool_free(p), 14);

	memset(cow, 0xFF, sizeof(cow));
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 4, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[1]);
	ck_assert_uint_eq(cow[0].tokens, 4);
	dst = cow[0].dst;
	ck_assert_uint_lt(dst, 16);
	ck_assert_uint_ne(dst, a[0]);
	ck_assert_uint_ne(dst, a[1]);
	ck_assert_uint_eq(pool_free(p), 13);

	/* B: {a0, dst}, 21 tokens; A unchanged. */
	expect_seq(m, 2, 21, 2);
	nb = blocks_ok(m, 2, b, 4);
	ck_assert_uint_eq(nb, 2);
	ck_assert_uint_eq(b[0], a[0]);
	ck_assert_uint_eq(b[1], dst);
	expect_seq(m, 1, 20, 2);
	nb = blocks_ok(m, 1, b, 4);
	expect_table(b, nb, a, na);
	expect_refs(p, a[0], 1); /* one chunk, shared by both tables */
	expect_refs(p, a[1], 1);
	expect_refs(p, dst, 1);
	ck_assert_uint_eq(mstats(m).cow_copies, 1);
	mcheck_ok(m);

	/* A's last block is no longer shared: no copy. */
	ncow = 99;
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, cow, 4, &ncow), 0);
	ck_assert_uint_eq(ncow, 0);
	expect_seq(m, 1, 21, 2);
	nb = blocks_ok(m, 1, b, 4);
	expect_table(b, nb, a, na);
	ck_assert_uint_eq(pool_free(p), 13);

	/* Nor is B's any more. */
	append_ok(m, 2, 1);
	expect_seq(m, 2, 22, 2);
	ck_assert_uint_eq(pool_free(p), 13);
	ck_assert_uint_eq(mstats(m).cow_copies, 1);

	/* Slots follow the new tables. */
	ck_assert_int_eq(kvp_export_slot_mapping(m, 2, 20, 1, &slot), 0);
	ck_assert_int_eq(slot, (int64_t)dst * BT + 4);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 20, 1, &slot), 0);
	ck_assert_int_eq(slot, (int64_t)a[1] * BT + 4);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 2, 3, 1, &slot), 0);
	ck_assert_int_eq(slot, (int64_t)a[0] * BT + 3);
	finish(m, p);
}
END_TEST

START_TEST(test_cow_cap_zero)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_seq_info before, after;
	uint32_t a[4], b[4], na, nb, ncow;
	struct kvp_copy cow[1];

	create_ok(m, 1, 20);
	na = blocks_ok(m, 1, a, 4);
	fork_ok(m, 1, 2);
	before = info_ok(m, 2);

	ncow = 0;
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, NULL, 0, &ncow), -ENOBUFS);
	ck_assert_uint_eq(ncow, 1);
	ncow = 0;
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 0, &ncow), -ENOBUFS);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_int_eq(kvp_seq_append(m, 2, 20, NULL, 0, NULL), -ENOBUFS);
	/* The source needs the copy just as much. */
	ncow = 0;
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, NULL, 0, &ncow), -ENOBUFS);
	ck_assert_uint_eq(ncow, 1);

	after = info_ok(m, 2);
	ck_assert_uint_eq(after.num_tokens, 20);
	ck_assert_uint_eq(after.num_blocks, 2);
	ck_assert_uint_eq(after.access_count, before.access_count);
	ck_assert_uint_eq(after.last_access, before.last_access);
	expect_seq(m, 1, 20, 2);
	nb = blocks_ok(m, 2, b, 4);
	expect_table(b, nb, a, na);
	expect_refs(p, a[0], 1); /* one shared chunk; a[1] is a tail */
	expect_refs(p, a[1], 2);
	ck_assert_uint_eq(pool_free(p), 14);
	ck_assert_uint_eq(mstats(m).cow_copies, 0);
	ck_assert_uint_eq(mstats(m).appends, 0);
	mcheck_ok(m);

	/* A zero-token append needs no copy. */
	ck_assert_int_eq(kvp_seq_append(m, 2, 0, NULL, 0, NULL), 0);
	/* With room for the copy it goes through. */
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[1]);
	finish(m, p);
}
END_TEST

START_TEST(test_cow_full_last_block)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], b[4], na, nb, ncow = 99;
	struct kvp_copy cow[2];

	create_ok(m, 1, 32); /* both blocks full */
	na = blocks_ok(m, 1, a, 4);
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, NULL, 0, &ncow), 0);
	ck_assert_uint_eq(ncow, 0);
	expect_seq(m, 2, 33, 3);
	nb = blocks_ok(m, 2, b, 4);
	ck_assert_uint_eq(b[0], a[0]);
	ck_assert_uint_eq(b[1], a[1]);
	ck_assert_uint_ne(b[2], a[0]);
	ck_assert_uint_ne(b[2], a[1]);
	expect_refs(p, a[0], 2);
	expect_refs(p, a[1], 2);
	expect_refs(p, b[2], 1);
	expect_seq(m, 1, 32, 2);
	nb = blocks_ok(m, 1, b, 4);
	expect_table(b, nb, a, na);
	ck_assert_uint_eq(pool_free(p), 13);

	/* The source appends into its own new block too. */
	ncow = 99;
	ck_assert_int_eq(kvp_seq_append(m, 1, 16, cow, 2, &ncow), 0);
	ck_assert_uint_eq(ncow, 0);
	expect_seq(m, 1, 48, 3);
	ck_assert_uint_eq(pool_free(p), 12);
	ck_assert_uint_eq(mstats(m).cow_copies, 0);
	finish(m, p);
}
END_TEST

START_TEST(test_cow_cross_boundary)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], b[4], na, nb, ncow = 99;
	struct kvp_copy cow[2];

	create_ok(m, 1, 20);
	na = blocks_ok(m, 1, a, 4);
	fork_ok(m, 1, 2);
	/* 20 -> 40 tokens: copy of the shared partial block plus one more. */
	ck_assert_int_eq(kvp_seq_append(m, 2, 20, cow, 2, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[1]);
	ck_assert_uint_eq(cow[0].tokens, 4);
	expect_seq(m, 2, 40, 3);
	nb = blocks_ok(m, 2, b, 4);
	ck_assert_uint_eq(b[0], a[0]);
	ck_assert_uint_eq(b[1], cow[0].dst);
	ck_assert_uint_ne(b[2], a[0]);
	ck_assert_uint_ne(b[2], a[1]);
	ck_assert_uint_ne(b[2], b[1]);
	ck_assert_uint_ne(b[1], a[1]);
	ck_assert_uint_eq(pool_free(p), 12);
	expect_refs(p, a[1], 1);
	expect_seq(m, 1, 20, 2);
	nb = blocks_ok(m, 1, b, 4);
	expect_table(b, nb, a, na);
	finish(m, p);
}
END_TEST

START_TEST(test_cow_nospc)
{
	struct kvp_pool *p = mkpool_nc(4);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], b[4], na, nb, ncow = 0;
	struct kvp_copy cow[2];

	create_ok(m, 1, 20);
	na = blocks_ok(m, 1, a, 4);
	fork_ok(m, 1, 2);
	create_ok(m, 3, 32); /* the pool is full */
	ck_assert_uint_eq(pool_free(p), 0);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 2, &ncow), -ENOSPC);
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, cow, 2, &ncow), -ENOSPC);
	expect_seq(m, 1, 20, 2);
	expect_seq(m, 2, 20, 2);
	nb = blocks_ok(m, 2, b, 4);
	expect_table(b, nb, a, na);
	expect_refs(p, a[0], 1); /* one shared chunk; a[1] is a tail */
	expect_refs(p, a[1], 2);
	ck_assert_uint_eq(mstats(m).cow_copies, 0);
	mcheck_ok(m);

	free_ok(m, 3);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 2, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[1]);
	ck_assert_uint_eq(pool_free(p), 1);
	finish(m, p);
}
END_TEST

/* A data-owning pool copies the first `tokens` token slots itself. */
START_TEST(test_cow_data_copied)
{
	/* Per block: [layer 1][K,V][16 tokens][1 head][4 dims] of bytes. */
	static const struct kvp_layout lay = {1, 1, 4, KVP_U8};
	struct kvp_pool *p =
		mkpool(8, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	unsigned char *src, *dst, ref[128];
	uint32_t a[4], na, ncow = 0, i;
	struct kvp_copy cow[1];

	ck_assert_uint_eq(kvp_block_bytes(p), 128);
	ck_assert_uint_eq(mstats(m).bytes_per_block, 128);
	create_ok(m, 1, 20);
	na = blocks_ok(m, 1, a, 4);
	ck_assert_uint_eq(na, 2);
	src = kvp_block_data(p, a[1]);
	ck_assert_ptr_nonnull(src);
	for (i = 0; i < 128; i++)
		src[i] = (unsigned char)(i + 1);
	memcpy(ref, src, sizeof(ref));

	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[1]);
	ck_assert_uint_eq(cow[0].tokens, 4);
	dst = kvp_block_data(p, cow[0].dst);
	ck_assert_ptr_nonnull(dst);
	/* K of tokens 0..3 at bytes 0..15, V at 64..79. */
	ck_assert_int_eq(memcmp(dst, ref, 16), 0);
	ck_assert_int_eq(memcmp(dst + 64, ref + 64, 16), 0);
	ck_assert_int_eq(memcmp(src, ref, sizeof(ref)), 0);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ fork */

START_TEST(test_fork_refcounts)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[8], b[8], na, nb, i;
	struct kvp_seq_info si, di;

	create_ok(m, 1, 50); /* 4 blocks */
	ck_assert_int_eq(kvp_seq_set_priority(m, 1, 7), 0);
	na = blocks_ok(m, 1, a, 8);
	fork_ok(m, 1, 2);
	ck_assert_uint_eq(pool_free(p), 12); /* nothing allocated */
	nb = blocks_ok(m, 2, b, 8);
	expect_table(b, nb, a, na);
	/* Holders: one chunk shared by both tables, and the tail. */
	for (i = 0; i + 1 < na; i++)
		expect_refs(p, a[i], 1);
	expect_refs(p, a[na - 1], 2);
	si = info_ok(m, 1);
	di = info_ok(m, 2);
	ck_assert_uint_eq(di.num_tokens, 50);
	ck_assert_uint_eq(di.num_blocks, 4);
	ck_assert_int_eq(di.priority, 7); /* inherited */
	ck_assert_int_eq(si.priority, 7);

	/* A chain: three tables, still one chunk; three tails. */
	fork_ok(m, 2, 3);
	for (i = 0; i + 1 < na; i++)
		expect_refs(p, a[i], 1);
	expect_refs(p, a[na - 1], 3);
	ck_assert_uint_eq(pool_free(p), 12);
	ck_assert_uint_eq(mstats(m).forks, 2);
	ck_assert_uint_eq(mstats(m).sequences, 3);
	ck_assert_uint_eq(mstats(m).tokens, 150);
	ck_assert_uint_eq(mstats(m).blocks_allocated, 4);
	mcheck_ok(m);

	/* Forking an empty sequence. */
	create_ok(m, 10, 0);
	fork_ok(m, 10, 11);
	expect_seq(m, 11, 0, 0);
	append_ok(m, 11, 5);
	expect_seq(m, 11, 5, 1);
	expect_seq(m, 10, 0, 0);
	finish(m, p);
}
END_TEST

START_TEST(test_fork_errors)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], b[4], na, nb, i;

	create_ok(m, 1, 20);
	create_ok(m, 2, 40);
	na = blocks_ok(m, 1, a, 4);
	nb = blocks_ok(m, 2, b, 4);
	ck_assert_int_eq(kvp_seq_fork(NULL, 1, 3), -EINVAL);
	ck_assert_int_eq(kvp_seq_fork(m, 1, 1), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork(m, 1, 2), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork(m, 2, 1), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork(m, 9, 3), -ENOENT);
	expect_gone(m, 3);
	for (i = 0; i < na; i++)
		expect_refs(p, a[i], 1);
	for (i = 0; i < nb; i++)
		expect_refs(p, b[i], 1);
	expect_seq(m, 1, 20, 2);
	expect_seq(m, 2, 40, 3);
	ck_assert_uint_eq(mstats(m).forks, 0);
	ck_assert_uint_eq(mstats(m).sequences, 2);
	ck_assert_uint_eq(pool_free(p), 11);
	mcheck_ok(m);
	finish(m, p);
}
END_TEST

START_TEST(test_fork_free_source)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], na, i;

	create_ok(m, 1, 40);
	na = blocks_ok(m, 1, a, 4);
	fork_ok(m, 1, 2);
	free_ok(m, 1);
	expect_gone(m, 1);
	ck_assert_uint_eq(pool_free(p), 13); /* the fork keeps them */
	for (i = 0; i < na; i++)
		expect_refs(p, a[i], 1);
	expect_seq(m, 2, 40, 3);
	mcheck_ok(m);
	/* The fork now owns its last block alone: appends copy nothing. */
	append_ok(m, 2, 1);
	expect_seq(m, 2, 41, 3);
	free_ok(m, 2);
	for (i = 0; i < na; i++)
		expect_refs(p, a[i], 0);
	ck_assert_uint_eq(pool_free(p), 16);
	finish(m, p);
}
END_TEST

/* All or nothing: a block at KVP_MAX_REFS fails the whole fork. */
START_TEST(test_fork_overflow)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], na, r;
	int rc;

	create_ok(m, 1, 20);
	na = blocks_ok(m, 1, a, 4);
	ck_assert_uint_eq(na, 2);
	for (r = 1; r < KVP_MAX_REFS; r++) {
		rc = kvp_block_ref(p, a[1]);
		if (rc)
			ck_abort_msg("kvp_block_ref #%u = %d (%s)", r, rc,
				     kvp_strerror(rc));
	}
	ck_assert_int_eq(kvp_seq_fork(m, 1, 2), -EOVERFLOW);
	expect_gone(m, 2);
	expect_refs(p, a[0], 1);
	expect_refs(p, a[1], (int)KVP_MAX_REFS);
	ck_assert_uint_eq(mstats(m).forks, 0);
	for (r = 1; r < KVP_MAX_REFS; r++) {
		rc = kvp_pool_free(p, &a[1], 1);
		if (rc)
			ck_abort_msg("kvp_pool_free #%u = %d (%s)", r, rc,
				     kvp_strerror(rc));
	}
	expect_refs(p, a[1], 1);
	mcheck_ok(m);
	fork_ok(m, 1, 2);
	expect_refs(p, a[1], 2);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ free */

START_TEST(test_free_basic)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[8], na, i;

	create_ok(m, 1, 100);
	create_ok(m, 2, 0);
	na = blocks_ok(m, 1, a, 8);
	ck_assert_uint_eq(pool_free(p), 9);
	ck_assert_int_eq(kvp_seq_free(NULL, 1), -EINVAL);
	ck_assert_int_eq(kvp_seq_free(m, 3), -ENOENT);
	ck_assert_uint_eq(pool_free(p), 9);
	free_ok(m, 1);
	for (i = 0; i < na; i++)
		expect_refs(p, a[i], 0);
	ck_assert_uint_eq(pool_free(p), 16);
	ck_assert_int_eq(kvp_seq_free(m, 1), -ENOENT);
	free_ok(m, 2);
	ck_assert_int_eq(kvp_seq_free(m, 2), -ENOENT);
	ck_assert_uint_eq(mstats(m).seq_frees, 2);
	ck_assert_uint_eq(mstats(m).sequences, 0);
	ck_assert_uint_eq(mstats(m).tokens, 0);
	ck_assert_uint_eq(mstats(m).blocks_released, 7);
	ck_assert_uint_eq(mstats(m).evictions, 0);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ truncate */

START_TEST(test_truncate_basic)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], b[4], na, nb;

	create_ok(m, 1, 40); /* 3 blocks */
	na = blocks_ok(m, 1, a, 4);
	ck_assert_uint_eq(na, 3);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 33), 0); /* still 3 */
	expect_seq(m, 1, 33, 3);
	ck_assert_uint_eq(pool_free(p), 13);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 17), 0);
	expect_seq(m, 1, 17, 2);
	ck_assert_uint_eq(pool_free(p), 14);
	expect_refs(p, a[2], 0);
	nb = blocks_ok(m, 1, b, 4);
	expect_table(b, nb, a, 2);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 17), 0); /* no change */
	expect_seq(m, 1, 17, 2);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 18), -ERANGE);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, UINT32_MAX), -ERANGE);
	expect_seq(m, 1, 17, 2);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 16), 0);
	expect_seq(m, 1, 16, 1);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 0), 0);
	expect_seq(m, 1, 0, 0);
	ck_assert_uint_eq(pool_free(p), 16);
	expect_refs(p, a[0], 0);
	ck_assert_uint_eq(mstats(m).tokens, 0);
	ck_assert_uint_eq(mstats(m).blocks_released, 3);
	/* It grows again from empty. */
	append_ok(m, 1, 20);
	expect_seq(m, 1, 20, 2);
	finish(m, p);
}
END_TEST

START_TEST(test_truncate_errors)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);

	create_ok(m, 1, 40);
	ck_assert_int_eq(kvp_seq_truncate(NULL, 1, 0), -EINVAL);
	ck_assert_int_eq(kvp_seq_truncate(m, 2, 0), -ENOENT);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 41), -ERANGE);
	expect_seq(m, 1, 40, 3);
	ck_assert_uint_eq(pool_free(p), 5);
	create_ok(m, 3, 0);
	ck_assert_int_eq(kvp_seq_truncate(m, 3, 1), -ERANGE);
	ck_assert_int_eq(kvp_seq_truncate(m, 3, 0), 0);
	expect_seq(m, 3, 0, 0);
	finish(m, p);
}
END_TEST

START_TEST(test_truncate_shared)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], b[4], na, nb, ncow = 0;
	struct kvp_copy cow[1];

	create_ok(m, 1, 40);
	na = blocks_ok(m, 1, a, 4);
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_truncate(m, 2, 10), 0);
	expect_seq(m, 2, 10, 1);
	expect_refs(p, a[0], 2);
	expect_refs(p, a[1], 1);
	expect_refs(p, a[2], 1);
	ck_assert_uint_eq(pool_free(p), 13); /* A still holds them */
	expect_seq(m, 1, 40, 3);
	nb = blocks_ok(m, 1, b, 4);
	expect_table(b, nb, a, na);
	mcheck_ok(m);
	/* B's last block is shared and partial (10 tokens): copied. */
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[0]);
	ck_assert_uint_eq(cow[0].tokens, 10);
	expect_refs(p, a[0], 1);
	ck_assert_uint_eq(pool_free(p), 12);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ trim */

START_TEST(test_trim_example)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[8], b[8], na, nb, ev = 0xDEAD, i;
	uint32_t keep[3];
	int64_t slots[36];

	create_ok(m, 1, 100); /* 7 blocks, the last holds 4 tokens */
	na = blocks_ok(m, 1, a, 8);
	ck_assert_uint_eq(na, 7);
	ck_assert_uint_eq(pool_free(p), 9);
	/* Sinks: tokens 0..3 (block 0); window: 80..99 (blocks 5, 6). */
	ck_assert_int_eq(kvp_seq_stream_trim(m, 1, 4, 20, &ev), 0);
	ck_assert_uint_eq(ev, 64);
	expect_seq(m, 1, 36, 3);
	keep[0] = a[0];
	keep[1] = a[5];
	keep[2] = a[6];
	nb = blocks_ok(m, 1, b, 8);
	expect_table(b, nb, keep, 3);
	for (i = 1; i <= 4; i++)
		expect_refs(p, a[i], 0);
	expect_refs(p, a[0], 1);
	expect_refs(p, a[5], 1);
	expect_refs(p, a[6], 1);
	ck_assert_uint_eq(pool_free(p), 13);
	ck_assert_uint_eq(mstats(m).tokens, 36);
	ck_assert_uint_eq(mstats(m).blocks_released, 4);
	mcheck_ok(m);

	/* Positions are renumbered over the remaining table. */
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 0, 36, slots), 0);
	for (i = 0; i < 36; i++)
		ck_assert_int_eq(slots[i], (int64_t)keep[i / BT] * BT + i % BT);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 36, 1, slots), -ERANGE);

	/* The last block still has 4 tokens: 12 more fit, the 13th does
	 * not. */
	append_ok(m, 1, 12);
	expect_seq(m, 1, 48, 3);
	ck_assert_uint_eq(pool_free(p), 13);
	append_ok(m, 1, 1);
	expect_seq(m, 1, 49, 4);

	/* evicted_tokens may be NULL. */
	ck_assert_int_eq(kvp_seq_stream_trim(m, 1, 0, 16, NULL), 0);
	/* 49 tokens; window 33..48 = blocks 2 and 3: blocks 0, 1 go. */
	expect_seq(m, 1, 17, 2);
	finish(m, p);
}
END_TEST

START_TEST(test_trim_nothing)
{
	static const struct {
		uint32_t sink, window;
	} cases[] = {
		/* sinks 0..47 = blocks 0..2, window 60..99 = blocks 3..6 */
		{48, 40},	 {50, 50},	  {64, 36},
		{0, 100},	 {100, 0},	  {200, 0},
		{0, 200},	 {99, 1},	  {UINT32_MAX, UINT32_MAX},
		{UINT32_MAX, 0}, {0, UINT32_MAX},
	};
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[8], b[8], na, nb, ev;
	size_t i;

	create_ok(m, 1, 100);
	na = blocks_ok(m, 1, a, 8);
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		ev = 0xDEAD;
		ck_assert_msg(kvp_seq_stream_trim(m, 1, cases[i].sink,
						  cases[i].window, &ev) == 0,
			      "trim(%u, %u) failed", cases[i].sink,
			      cases[i].window);
		ck_assert_msg(ev == 0, "trim(%u, %u): evicted %u, want 0",
			      cases[i].sink, cases[i].window, ev);
		expect_seq(m, 1, 100, 7);
		nb = blocks_ok(m, 1, b, 8);
		expect_table(b, nb, a, na);
	}
	ck_assert_uint_eq(pool_free(p), 9);

	/* An empty sequence has nothing to trim. */
	create_ok(m, 2, 0);
	ev = 0xDEAD;
	ck_assert_int_eq(kvp_seq_stream_trim(m, 2, 4, 20, &ev), 0);
	ck_assert_uint_eq(ev, 0);
	expect_seq(m, 2, 0, 0);
	finish(m, p);
}
END_TEST

START_TEST(test_trim_window_zero)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[8], b[8], na, nb, ev = 0xDEAD, keep[2];

	/* Full blocks only: blocks 1..5 go. */
	create_ok(m, 1, 96);
	na = blocks_ok(m, 1, a, 8);
	ck_assert_uint_eq(na, 6);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 1, 16, 0, &ev), 0);
	ck_assert_uint_eq(ev, 80);
	expect_seq(m, 1, 16, 1);
	nb = blocks_ok(m, 1, b, 8);
	expect_table(b, nb, a, 1);

	/*
	 * A partial last block: freeing it would drop 4 tokens, and
	 * evicted_tokens is always a multiple of block_tokens, so the
	 * whole blocks 1..5 go and block 6 (tokens 96..99) stays.
	 */
	create_ok(m, 2, 100);
	na = blocks_ok(m, 2, a, 8);
	ev = 0xDEAD;
	ck_assert_int_eq(kvp_seq_stream_trim(m, 2, 4, 0, &ev), 0);
	ck_assert_uint_eq(ev, 80);
	ck_assert_uint_eq(ev % BT, 0);
	expect_seq(m, 2, 20, 2);
	keep[0] = a[0];
	keep[1] = a[6];
	nb = blocks_ok(m, 2, b, 8);
	expect_table(b, nb, keep, 2);
	ck_assert_uint_eq(pool_free(p), 32 - 1 - 2);
	finish(m, p);
}
END_TEST

START_TEST(test_trim_sink_zero)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[8], b[8], na, nb, ev = 0xDEAD;

	create_ok(m, 1, 100);
	na = blocks_ok(m, 1, a, 8);
	ck_assert_uint_eq(na, 7);
	/* Window 80..99: blocks 5, 6; blocks 0..4 go. */
	ck_assert_int_eq(kvp_seq_stream_trim(m, 1, 0, 20, &ev), 0);
	ck_assert_uint_eq(ev, 80);
	expect_seq(m, 1, 20, 2);
	nb = blocks_ok(m, 1, b, 8);
	expect_table(b, nb, a + 5, 2);
	ck_assert_uint_eq(pool_free(p), 14);

	/* Unaligned sinks: 17 sink tokens keep blocks 0 and 1. */
	create_ok(m, 2, 100);
	na = blocks_ok(m, 2, a, 8);
	ev = 0xDEAD;
	ck_assert_int_eq(kvp_seq_stream_trim(m, 2, 17, 20, &ev), 0);
	ck_assert_uint_eq(ev, 48);
	expect_seq(m, 2, 52, 4);
	nb = blocks_ok(m, 2, b, 8);
	ck_assert_uint_eq(nb, 4);
	ck_assert_uint_eq(b[0], a[0]);
	ck_assert_uint_eq(b[1], a[1]);
	ck_assert_uint_eq(b[2], a[5]);
	ck_assert_uint_eq(b[3], a[6]);
	ck_assert_uint_eq(pool_free(p), 10);
	finish(m, p);
}
END_TEST

START_TEST(test_trim_errors)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t ev = 0;

	create_ok(m, 1, 100);
	ck_assert_int_eq(kvp_seq_stream_trim(NULL, 1, 4, 20, &ev), -EINVAL);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 2, 4, 20, &ev), -ENOENT);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 2, 4, 20, NULL), -ENOENT);
	expect_seq(m, 1, 100, 7);
	ck_assert_uint_eq(pool_free(p), 9);
	finish(m, p);
}
END_TEST

START_TEST(test_trim_shared)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[8], b[8], na, nb, ev = 0, ncow = 0, i;
	struct kvp_copy cow[1];

	create_ok(m, 1, 100);
	na = blocks_ok(m, 1, a, 8);
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 2, 4, 20, &ev), 0);
	ck_assert_uint_eq(ev, 64);
	expect_seq(m, 2, 36, 3);
	for (i = 1; i <= 4; i++)
		expect_refs(p, a[i], 1);
	expect_refs(p, a[0], 2);
	expect_refs(p, a[5], 2);
	expect_refs(p, a[6], 2);
	ck_assert_uint_eq(pool_free(p), 9);
	expect_seq(m, 1, 100, 7);
	nb = blocks_ok(m, 1, b, 8);
	expect_table(b, nb, a, na);
	mcheck_ok(m);
	/* B's last block (4 tokens) is still shared with A. */
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[6]);
	ck_assert_uint_eq(cow[0].tokens, 4);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ priority */

START_TEST(test_priority)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);

	create_ok(m, 1, 20);
	ck_assert_int_eq(kvp_seq_set_priority(m, 1, 42), 0);
	ck_assert_int_eq(info_ok(m, 1).priority, 42);
	ck_assert_int_eq(kvp_seq_set_priority(m, 1, -5), 0);
	ck_assert_int_eq(info_ok(m, 1).priority, -5);
	ck_assert_int_eq(kvp_seq_set_priority(m, 1, INT32_MIN), 0);
	ck_assert_int_eq(info_ok(m, 1).priority, INT32_MIN);
	ck_assert_int_eq(kvp_seq_set_priority(m, 1, INT32_MAX), 0);
	ck_assert_int_eq(info_ok(m, 1).priority, INT32_MAX);
	ck_assert_int_eq(kvp_seq_set_priority(NULL, 1, 3), -EINVAL);
	ck_assert_int_eq(kvp_seq_set_priority(m, 2, 3), -ENOENT);
	expect_gone(m, 2);
	ck_assert_int_eq(info_ok(m, 1).priority, INT32_MAX);
	/* Other fields are untouched. */
	expect_seq(m, 1, 20, 2);
	/* Forks inherit it; later changes are per sequence. */
	fork_ok(m, 1, 2);
	ck_assert_int_eq(info_ok(m, 2).priority, INT32_MAX);
	ck_assert_int_eq(kvp_seq_set_priority(m, 2, 1), 0);
	ck_assert_int_eq(info_ok(m, 2).priority, 1);
	ck_assert_int_eq(info_ok(m, 1).priority, INT32_MAX);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ admit */

/* Watermark 0.25 of 100 blocks = 25 blocks, exact in binary. */
START_TEST(test_admit_exact)
{
	struct kvp_pool *p = mkpool_nc(100);
	struct kvp_manager *m = mkmgr_full(p, KVP_EVICT_LRU, 0.0f, 0.25f);
	struct kvp_manager *m2 = mkmgr(p, KVP_EVICT_LRU);

	/* Empty pool: free = total = 100. */
	ck_assert_int_eq(kvp_admit(m, 0), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 1), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 75 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 74 * BT + 1), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 75 * BT + 1), KVP_ADMIT_NEVER);
	ck_assert_int_eq(kvp_admit(m, 100 * BT), KVP_ADMIT_NEVER);
	ck_assert_int_eq(kvp_admit(m, UINT32_MAX), KVP_ADMIT_NEVER);
	ck_assert_int_eq(kvp_admit(m, UINT32_MAX - 14), KVP_ADMIT_NEVER);

	/* 10 blocks used: free 90. */
	create_ok(m, 1, 10 * BT);
	ck_assert_int_eq(kvp_admit(m, 65 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 65 * BT + 1), KVP_ADMIT_LATER);
	ck_assert_int_eq(kvp_admit(m, 75 * BT), KVP_ADMIT_LATER);
	ck_assert_int_eq(kvp_admit(m, 75 * BT + 1), KVP_ADMIT_NEVER);
	ck_assert_int_eq(kvp_admit(m, 0), KVP_ADMIT_OK);
	/* Advice only: nothing reserved. */
	ck_assert_uint_eq(pool_free(p), 90);

	/* The free count is pool-wide: another manager's 20 blocks count. */
	create_ok(m2, 1, 20 * BT);
	ck_assert_int_eq(kvp_admit(m, 45 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 45 * BT + 1), KVP_ADMIT_LATER);
	ck_assert_int_eq(kvp_admit(m, 75 * BT), KVP_ADMIT_LATER);
	ck_assert_int_eq(kvp_admit(m, 75 * BT + 1), KVP_ADMIT_NEVER);

	/* Nothing free beyond the watermark: only 0 tokens are OK. */
	create_ok(m2, 2, 45 * BT);
	ck_assert_uint_eq(pool_free(p), 25);
	ck_assert_int_eq(kvp_admit(m, 0), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 1), KVP_ADMIT_LATER);
	create_ok(m2, 3, 1);
	ck_assert_int_eq(kvp_admit(m, 0), KVP_ADMIT_LATER);

	ck_assert_int_eq(kvp_admit(NULL, 0), -EINVAL);
	ck_assert_int_eq(kvp_admit(NULL, 16), -EINVAL);
	kvp_manager_destroy(m2);
	finish(m, p);
}
END_TEST

/* The example of the contract: 100 blocks, watermark 0.1 = 10 blocks. */
START_TEST(test_admit_tenth)
{
	struct kvp_pool *p = mkpool_nc(100);
	struct kvp_manager *m = mkmgr_full(p, KVP_EVICT_LRU, 0.0f, 0.1f);

	ck_assert_int_eq(kvp_admit(m, 90 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 90 * BT + 1), KVP_ADMIT_NEVER);
	create_ok(m, 1, 20 * BT); /* free 80 */
	ck_assert_int_eq(kvp_admit(m, 70 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 70 * BT + 1), KVP_ADMIT_LATER);
	ck_assert_int_eq(kvp_admit(m, 90 * BT), KVP_ADMIT_LATER);
	ck_assert_int_eq(kvp_admit(m, 91 * BT), KVP_ADMIT_NEVER);
	finish(m, p);
}
END_TEST

/*
 * Fractions of the pool mean what they say at exact block boundaries:
 * 1% (the default watermark) of 100 blocks is 1 block, 70% is 70 blocks,
 * and 90 of 100 blocks used is a utilisation of at most 0.9, whatever
 * the binary rounding of the float that carries the fraction.
 */
START_TEST(test_fraction_boundaries)
{
	struct kvp_pool *p = mkpool_nc(100);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_manager *m7 = mkmgr_full(p, KVP_EVICT_LRU, 0.9f, 0.7f);
	uint64_t victims[16];
	uint32_t n;
	uint64_t i;

	/* Default watermark 0.01: one block of 100. */
	ck_assert_int_eq(kvp_admit(m, 99 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 100 * BT), KVP_ADMIT_NEVER);
	/* Watermark 0.7: 70 blocks. */
	ck_assert_int_eq(kvp_admit(m7, 30 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m7, 31 * BT), KVP_ADMIT_NEVER);

	for (i = 1; i <= 9; i++)
		create_ok(m, i, 10 * BT); /* 90 used */
	n = 0xDEAD;
	ck_assert_int_eq(kvp_evict_until(m, 0.9f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* m7's own threshold 0.9 is met too (it has nothing to evict). */
	ck_assert_int_eq(kvp_evict_until(m7, -1.0f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* 0.7: 90 -> 80 -> 70, two victims. */
	ck_assert_int_eq(kvp_evict_until(m, 0.7f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(pool_free(p), 30);
	kvp_manager_destroy(m7);
	finish(m, p);
}
END_TEST

/* Block arithmetic with a block size other than 16. */
START_TEST(test_block_tokens_five)
{
	struct kvp_pool_config c;
	struct kvp_pool *p = NULL;
	struct kvp_manager *m;
	uint32_t b[16], nb, ev = 0, ncow = 0;
	int32_t indptr[2], indices[8], lpl[1];
	struct kvp_copy cow[1];
	int64_t slot;

	memset(&c, 0, sizeof(c));
	c.num_blocks = 32;
	c.block_tokens = 5;
	c.device_id = -1;
	c.flags = KVP_POOL_NOCACHE;
	ck_assert_int_eq(kvp_pool_create(&c, &p), 0);
	m = mkmgr(p, KVP_EVICT_LRU);

	create_ok(m, 1, 11);
	expect_seq(m, 1, 11, 3);
	append_ok(m, 1, 4);
	expect_seq(m, 1, 15, 3);
	append_ok(m, 1, 1);
	expect_seq(m, 1, 16, 4);
	nb = blocks_ok(m, 1, b, 16);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 7, 1, &slot), 0);
	ck_assert_int_eq(slot, (int64_t)b[1] * 5 + 2);
	ck_assert_int_eq(kvp_export_csr(m, (const uint64_t[]){1}, 1, indptr,
					indices, 8, lpl),
			 0);
	ck_assert_int_eq(indptr[1], 4);
	ck_assert_int_eq(lpl[0], 1);
	ck_assert_int_eq(kvp_export_block_table(m, (const uint64_t[]){1}, 1,
						NULL, 0, -1),
			 4);

	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, b[nb - 1]);
	ck_assert_uint_eq(cow[0].tokens, 1);

	/* 50 tokens = 10 blocks; sinks 0..2 (block 0), window 38..49
	 * (blocks 7..9): blocks 1..6 go. */
	create_ok(m, 3, 50);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 3, 3, 12, &ev), 0);
	ck_assert_uint_eq(ev, 30);
	expect_seq(m, 3, 20, 4);
	ck_assert_int_eq(kvp_seq_truncate(m, 3, 6), 0);
	expect_seq(m, 3, 6, 2);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ evict */

START_TEST(test_evict_lru)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint64_t v;

	create_ok(m, 1, 16);
	create_ok(m, 2, 160); /* the longest, but not the oldest */
	create_ok(m, 3, 16);
	append_ok(m, 1, 0); /* order now: 2, 3, 1 */
	append_ok(m, 3, 1); /* order now: 2, 1, 3 */
	ck_assert_uint_eq(pool_free(p), 64 - 1 - 10 - 2);
	EXPECT_EVICT(m, 2);
	ck_assert_uint_eq(pool_free(p), 64 - 1 - 2);
	EXPECT_EVICT(m, 1);
	/* victim may be NULL */
	ck_assert_int_eq(kvp_evict(m, NULL), 0);
	expect_gone(m, 3);
	ck_assert_uint_eq(pool_free(p), 64);
	ck_assert_int_eq(kvp_evict(m, &v), -ENOENT);
	ck_assert_uint_eq(mstats(m).evictions, 3);
	ck_assert_uint_eq(mstats(m).seq_frees, 3);
	ck_assert_uint_eq(mstats(m).sequences, 0);
	finish(m, p);
}
END_TEST

/* Fork counts as an access of its source. */
START_TEST(test_evict_lru_fork_touch)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);

	create_ok(m, 1, 16);
	create_ok(m, 2, 16);
	fork_ok(m, 1, 3);
	free_ok(m, 3);
	EXPECT_EVICT(m, 2);
	EXPECT_EVICT(m, 1);
	finish(m, p);
}
END_TEST

START_TEST(test_evict_lfu)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LFU);

	create_ok(m, 3, 16); /* 1 access */
	create_ok(m, 4, 16); /* 1 access, more recent than 3 */
	create_ok(m, 1, 16);
	append_ok(m, 1, 1);
	append_ok(m, 1, 1);
	append_ok(m, 1, 1); /* 4 accesses */
	create_ok(m, 2, 16);
	append_ok(m, 2, 1); /* 2 accesses, the most recent of all */
	EXPECT_EVICT(m, 3);
	EXPECT_EVICT(m, 4);
	EXPECT_EVICT(m, 2);
	EXPECT_EVICT(m, 1);
	ck_assert_int_eq(kvp_evict(m, NULL), -ENOENT);
	finish(m, p);
}
END_TEST

START_TEST(test_evict_longest)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LONGEST);

	create_ok(m, 1, 33);  /* 3 blocks */
	create_ok(m, 2, 100); /* ties with 4: the older goes first */
	create_ok(m, 3, 40);  /* 3 blocks but more tokens than 1 */
	create_ok(m, 4, 100);
	create_ok(m, 5, 0);
	append_ok(m, 1, 0); /* 1 is now the most recent: no effect */
	EXPECT_EVICT(m, 2);
	EXPECT_EVICT(m, 4);
	EXPECT_EVICT(m, 3);
	EXPECT_EVICT(m, 1);
	EXPECT_EVICT(m, 5);
	ck_assert_int_eq(kvp_evict(m, NULL), -ENOENT);
	finish(m, p);
}
END_TEST

START_TEST(test_evict_priority)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_PRIORITY);
	static const int32_t prio[] = {5, -3, 0, -3, INT32_MAX, INT32_MIN};
	static const uint64_t order[] = {6, 2, 4, 3, 1, 5};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(prio); i++) {
		create_ok(m, i + 1, 16 * (uint32_t)(i + 1));
		ck_assert_int_eq(kvp_seq_set_priority(m, i + 1, prio[i]), 0);
	}
	append_ok(m, 2, 1); /* 2 and 4 tie; 2 stays the older */
	append_ok(m, 4, 1);
	for (i = 0; i < ARRAY_SIZE(order); i++)
		EXPECT_EVICT(m, order[i]);
	ck_assert_int_eq(kvp_evict(m, NULL), -ENOENT);
	finish(m, p);
}
END_TEST

START_TEST(test_evict_empty)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_manager *m2 = mkmgr(p, KVP_EVICT_LRU);
	uint64_t v = 0;

	ck_assert_int_eq(kvp_evict(m, &v), -ENOENT);
	ck_assert_int_eq(kvp_evict(m, NULL), -ENOENT);
	ck_assert_int_eq(kvp_evict(NULL, &v), -EINVAL);
	/* Another manager's sequences are not this one's to evict. */
	create_ok(m2, 1, 40);
	ck_assert_int_eq(kvp_evict(m, &v), -ENOENT);
	expect_seq(m2, 1, 40, 3);
	create_ok(m, 2, 16);
	EXPECT_EVICT(m, 2);
	ck_assert_int_eq(kvp_evict(m, &v), -ENOENT);
	expect_seq(m2, 1, 40, 3);
	ck_assert_uint_eq(mstats(m2).evictions, 0);
	ck_assert_uint_eq(mstats(m).evictions, 1);
	/* An evicted fork source leaves the fork intact. */
	fork_ok(m2, 1, 2);
	append_ok(m2, 2, 0); /* 2 is the most recent */
	ck_assert_int_eq(kvp_evict(m2, &v), 0);
	ck_assert_uint_eq(v, 1);
	expect_seq(m2, 2, 40, 3);
	ck_assert_uint_eq(pool_free(p), 13);
	mcheck_ok(m2);
	kvp_manager_destroy(m2);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ evict_until */

/* 10 sequences of 10 blocks, oldest first, in a pool of 100. */
static void fill_ten(struct kvp_manager *m, struct kvp_pool *p)
{
	uint64_t i;

	for (i = 1; i <= 10; i++)
		create_ok(m, i, 10 * BT);
	ck_assert_uint_eq(pool_free(p), 0);
}

START_TEST(test_evict_until_target)
{
	struct kvp_pool *p = mkpool_nc(100);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint64_t victims[16];
	uint32_t n, i;

	fill_ten(m, p);
	n = 0xDEAD;
	ck_assert_int_eq(kvp_evict_until(m, 0.5f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 5);
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(victims[i], i + 1);
		expect_gone(m, i + 1);
	}
	ck_assert_uint_eq(pool_free(p), 50);
	/* Already met: nothing more. */
	n = 0xDEAD;
	ck_assert_int_eq(kvp_evict_until(m, 0.5f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvp_evict_until(m, 1.0f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* With nothing to do, victims may be NULL. */
	ck_assert_int_eq(kvp_evict_until(m, 0.5f, NULL, 0, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* 50 used: 0.35 needs 2 victims (40 > 35, 30 <= 35). */
	ck_assert_int_eq(kvp_evict_until(m, 0.35f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(victims[0], 6);
	ck_assert_uint_eq(victims[1], 7);
	ck_assert_uint_eq(pool_free(p), 70);
	ck_assert_uint_eq(mstats(m).evictions, 7);
	ck_assert_uint_eq(mstats(m).seq_frees, 7);
	/* Target 0: everything. */
	ck_assert_int_eq(kvp_evict_until(m, 0.0f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(victims[0], 8);
	ck_assert_uint_eq(victims[2], 10);
	ck_assert_uint_eq(pool_free(p), 100);
	ck_assert_int_eq(kvp_evict_until(m, 0.0f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 0);
	finish(m, p);
}
END_TEST

START_TEST(test_evict_until_partial)
{
	struct kvp_pool *p = mkpool_nc(100);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint64_t victims[16];
	uint32_t n, raw[30];

	fill_ten(m, p);
	/* The cap is reached first. */
	n = 0xDEAD;
	ck_assert_int_eq(kvp_evict_until(m, 0.0f, victims, 2, &n),
			 KVP_EVICT_PARTIAL);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(victims[0], 1);
	ck_assert_uint_eq(victims[1], 2);
	expect_gone(m, 1);
	expect_gone(m, 2);
	ck_assert_uint_eq(pool_free(p), 20);
	/* cap 0: nothing evicted. */
	ck_assert_int_eq(kvp_evict_until(m, 0.5f, NULL, 0, &n),
			 KVP_EVICT_PARTIAL);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_eq(pool_free(p), 20);
	ck_assert_uint_eq(mstats(m).sequences, 8);
	/* 80 used: the target 0.5 is met by the third victim, which also
	 * fills victims[]: met, so 0. */
	ck_assert_int_eq(kvp_evict_until(m, 0.5f, victims, 3, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(victims[2], 5);
	ck_assert_uint_eq(pool_free(p), 50);
	ck_assert_int_eq(kvp_evict_until(m, 0.0f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 5);
	ck_assert_uint_eq(pool_free(p), 100);

	/* No sequence left while blocks held outside the manager keep the
	 * pool above the target. */
	ck_assert_int_eq(kvp_pool_alloc(p, 30, raw), 0);
	create_ok(m, 20, 10 * BT);
	ck_assert_int_eq(kvp_evict_until(m, 0.1f, victims, 16, &n),
			 KVP_EVICT_PARTIAL);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(victims[0], 20);
	ck_assert_int_eq(kvp_evict_until(m, 0.1f, victims, 16, &n),
			 KVP_EVICT_PARTIAL);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvp_evict_until(m, 0.35f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvp_pool_free(p, raw, 30), 0);
	ck_assert_uint_eq(mstats(m).evictions, 11);
	finish(m, p);
}
END_TEST

START_TEST(test_evict_until_threshold)
{
	struct kvp_pool *p = mkpool_nc(100);
	struct kvp_manager *m = mkmgr_full(p, KVP_EVICT_LRU, 0.5f, 0.0f);
	uint64_t victims[16];
	uint32_t n = 0xDEAD;

	fill_ten(m, p);
	ck_assert_int_eq(kvp_evict_until(m, -1.0f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 5);
	ck_assert_uint_eq(victims[0], 1);
	ck_assert_uint_eq(victims[4], 5);
	ck_assert_uint_eq(pool_free(p), 50);
	ck_assert_int_eq(kvp_evict_until(m, -0.25f, victims, 16, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_eq(pool_free(p), 50);
	finish(m, p);
}
END_TEST

START_TEST(test_evict_until_errors)
{
	struct kvp_pool *p = mkpool_nc(100);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint64_t victims[16];
	uint32_t n = 0;

	fill_ten(m, p);
	ck_assert_int_eq(kvp_evict_until(NULL, 0.5f, victims, 16, &n), -EINVAL);
	ck_assert_int_eq(kvp_evict_until(m, 0.5f, victims, 16, NULL), -EINVAL);
	ck_assert_int_eq(kvp_evict_until(m, 0.5f, NULL, 16, &n), -EINVAL);
	ck_assert_int_eq(kvp_evict_until(m, 1.5f, victims, 16, &n), -EINVAL);
	ck_assert_int_eq(kvp_evict_until(m, 1.0001f, victims, 16, &n), -EINVAL);
	ck_assert_int_eq(kvp_evict_until(m, NAN, victims, 16, &n), -EINVAL);
	ck_assert_int_eq(kvp_evict_until(m, INFINITY, victims, 16, &n),
			 -EINVAL);
	ck_assert_uint_eq(pool_free(p), 0);
	ck_assert_uint_eq(mstats(m).sequences, 10);
	ck_assert_uint_eq(mstats(m).evictions, 0);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ stats */

START_TEST(test_stats_scenario)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_copy cow[2];
	struct kvp_stats st, st2;
	uint32_t ncow = 0;
	uint64_t v = 0;

	st = mstats(m);
	ck_assert_uint_eq(st.sequences, 0);
	ck_assert_uint_eq(st.tokens, 0);
	ck_assert_uint_eq(st.seq_creates, 0);
	ck_assert_uint_eq(st.seq_frees, 0);
	ck_assert_uint_eq(st.appends, 0);
	ck_assert_uint_eq(st.forks, 0);
	ck_assert_uint_eq(st.evictions, 0);
	ck_assert_uint_eq(st.cow_copies, 0);
	ck_assert_uint_eq(st.blocks_allocated, 0);
	ck_assert_uint_eq(st.blocks_released, 0);
	ck_assert_uint_eq(st.blocks_used, 0);
	ck_assert_uint_eq(st.blocks_total, 64);
	ck_assert_uint_eq(st.bytes_per_block, 0);

	create_ok(m, 1, 20); /* {a, b} */
	create_ok(m, 2, 16); /* {c} */
	append_ok(m, 1, 12); /* 32 tokens */
	append_ok(m, 2, 1);  /* {c, d} */
	fork_ok(m, 1, 3);    /* {a, b} shared */
	append_ok(m, 3, 1);  /* {a, b, e}: full last block, no copy */
	create_ok(m, 4, 20); /* {f, g} */
	fork_ok(m, 4, 5);    /* {f, g} shared */
	ck_assert_int_eq(kvp_seq_append(m, 5, 1, cow, 2, &ncow), 0);
	ck_assert_uint_eq(ncow, 1); /* 5: {f, h}, drops its ref on g */

	st = mstats(m);
	ck_assert_uint_eq(st.sequences, 5);
	ck_assert_uint_eq(st.tokens, 32 + 17 + 33 + 20 + 21);
	ck_assert_uint_eq(st.seq_creates, 3);
	ck_assert_uint_eq(st.seq_frees, 0);
	ck_assert_uint_eq(st.appends, 4);
	ck_assert_uint_eq(st.forks, 2);
	ck_assert_uint_eq(st.evictions, 0);
	ck_assert_uint_eq(st.cow_copies, 1);
	ck_assert_uint_eq(st.blocks_allocated, 8);
	ck_assert_uint_eq(st.blocks_released, 1);
	ck_assert_uint_eq(st.blocks_used, 8);
	ck_assert_uint_eq(st.blocks_total, 64);
	mcheck_ok(m);

	/* Failed calls count nothing. */
	ck_assert_int_eq(kvp_seq_create(m, 1, 5), -EEXIST);
	ck_assert_int_eq(kvp_seq_append(m, 99, 5, cow, 2, &ncow), -ENOENT);
	ck_assert_int_eq(kvp_seq_fork(m, 1, 2), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork(m, 99, 98), -ENOENT);
	ck_assert_int_eq(kvp_seq_free(m, 99), -ENOENT);
	ck_assert_int_eq(kvp_seq_create(m, 9, 100 * BT), -ENOSPC);
	st2 = mstats(m);
	ck_assert_int_eq(memcmp(&st, &st2, sizeof(st)), 0);

	free_ok(m, 2); /* releases c, d */
	ck_assert_int_eq(kvp_evict(m, &v), 0);
	ck_assert_uint_eq(v, 1); /* least recently accessed */
	st = mstats(m);
	ck_assert_uint_eq(st.sequences, 3);
	ck_assert_uint_eq(st.tokens, 33 + 20 + 21);
	ck_assert_uint_eq(st.seq_frees, 2);
	ck_assert_uint_eq(st.evictions, 1);
	ck_assert_uint_eq(st.blocks_released, 1 + 2 + 2);
	ck_assert_uint_eq(st.blocks_used, 6); /* a, b, e, f, g, h */
	ck_assert_uint_eq(st.blocks_allocated, 8);

	ck_assert_int_eq(kvp_seq_truncate(m, 3, 16), 0); /* drops b, e */
	st = mstats(m);
	ck_assert_uint_eq(st.tokens, 16 + 20 + 21);
	ck_assert_uint_eq(st.blocks_released, 7);
	ck_assert_uint_eq(st.blocks_used, 4);

	free_ok(m, 3);
	free_ok(m, 4);
	free_ok(m, 5);
	st = mstats(m);
	ck_assert_uint_eq(st.sequences, 0);
	ck_assert_uint_eq(st.tokens, 0);
	ck_assert_uint_eq(st.seq_creates, 3);
	ck_assert_uint_eq(st.seq_frees, 5);
	ck_assert_uint_eq(st.appends, 4);
	ck_assert_uint_eq(st.forks, 2);
	ck_assert_uint_eq(st.evictions, 1);
	ck_assert_uint_eq(st.cow_copies, 1);
	ck_assert_uint_eq(st.blocks_allocated, 8);
	/* Every reference taken (8 allocated + 4 by forks) was dropped. */
	ck_assert_uint_eq(st.blocks_released, 12);
	ck_assert_uint_eq(st.blocks_used, 0);
	finish(m, p);
}
END_TEST

START_TEST(test_stats_null)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_stats st;

	memset(&st, 0x5A, sizeof(st));
	kvp_manager_stats(NULL, &st); /* ignored */
	kvp_manager_stats(m, NULL);   /* ignored */
	kvp_manager_stats(m, &st);
	ck_assert_uint_eq(st.blocks_total, 8);
	finish(m, p);
}
END_TEST

/*
 * kvp_stats_add over two prefix-caching managers of one pool: the counters
 * and per-manager gauges are the sums, the pool's values and the
 * retention clock the larger, and the hit rate is recomputed from the
 * sums (one manager hits, the other does not: not the mean of the two
 * rates).  NULL arguments leave the sum alone.
 */
START_TEST(test_stats_add)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager_config c = mcfg(p, KVP_EVICT_LRU);
	struct kvp_manager *a, *b;
	struct kvp_hash h[3];
	struct kvp_stats sa, sb, acc, before;
	uint32_t cached = 0xDEAD;

	c.flags = KVP_PREFIX_CACHE;
	a = mkmgr_cfg(&c);
	b = mkmgr_cfg(&c);
	memset(h, 0, sizeof(h));
	for (int i = 0; i < 3; i++)
		h[i].b[0] = (uint8_t)(i + 1);
	/* a: commits 3 blocks, then a longer prompt hits all 3. */
	ck_assert_int_eq(kvp_seq_create_cached(a, 1, h, 3, 3 * BT, &cached), 0);
	ck_assert_int_eq(kvp_seq_commit(a, 1, h, 3), 3); /* blocks registered */
	ck_assert_int_eq(kvp_seq_create_cached(a, 2, h, 3, 3 * BT + 1, &cached),
			 0);
	ck_assert_uint_eq(cached, 3 * BT);
	ck_assert_int_eq(kvp_manager_tick(a, 5, NULL), 0);
	/* b: the same hashes miss (its own cache), and appends and a fork. */
	ck_assert_int_eq(kvp_seq_create_cached(b, 1, h, 3, 3 * BT, &cached), 0);
	ck_assert_uint_eq(cached, 0);
	create_ok(b, 2, BT);
	append_ok(b, 2, 1);
	ck_assert_int_eq(kvp_seq_fork(b, 2, 3), 0);
	ck_assert_int_eq(kvp_manager_tick(b, 2, NULL), 0);
	/* Other blocks under a's cached hashes: left uncached. */
	create_ok(a, 9, 3 * BT);
	ck_assert_int_eq(kvp_seq_commit(a, 9, h, 3), 0);
	ck_assert_int_eq(kvp_seq_free(a, 9), 0);

	sa = mstats(a);
	sb = mstats(b);
	memset(&acc, 0, sizeof(acc));
	kvp_stats_add(&acc, &sa);
	kvp_stats_add(&acc, &sb);
	ck_assert_uint_eq(acc.sequences, 5);
	ck_assert_uint_eq(acc.sequences, sa.sequences + sb.sequences);
	ck_assert_uint_eq(acc.tokens, sa.tokens + sb.tokens);
	ck_assert_uint_eq(acc.seq_creates, sa.seq_creates + sb.seq_creates);
	ck_assert_uint_eq(acc.seq_frees, sa.seq_frees + sb.seq_frees);
	ck_assert_uint_eq(acc.appends, sa.appends + sb.appends);
	ck_assert_uint_eq(acc.forks, 1);
	ck_assert_uint_eq(acc.evictions, sa.evictions + sb.evictions);
	ck_assert_uint_eq(acc.cow_copies, sa.cow_copies + sb.cow_copies);
	ck_assert_uint_eq(acc.blocks_allocated,
			  sa.blocks_allocated + sb.blocks_allocated);
	ck_assert_uint_eq(acc.blocks_released,
			  sa.blocks_released + sb.blocks_released);
	/* The pool's values: each manager reports the same pool. */
	ck_assert_uint_eq(acc.blocks_total, 64);
	ck_assert_uint_eq(acc.blocks_used, pstats(p).used);
	ck_assert_uint_eq(acc.bytes_per_block, sa.bytes_per_block);
	ck_assert_uint_eq(acc.prefix_queries, (9 * BT + 1));
	ck_assert_uint_eq(acc.prefix_hits, 3 * BT);
	ck_assert(acc.prefix_hit_rate ==
		  (double)(3 * BT) / (double)(9 * BT + 1));
	ck_assert(acc.prefix_hit_rate !=
		  (sa.prefix_hit_rate + sb.prefix_hit_rate) / 2);
	ck_assert_uint_eq(acc.prefix_cached_blocks,
			  sa.prefix_cached_blocks + sb.prefix_cached_blocks);
	ck_assert_uint_eq(acc.prefix_commits, 3);
	ck_assert_uint_eq(acc.prefix_evictions,
			  sa.prefix_evictions + sb.prefix_evictions);
	ck_assert_uint_eq(acc.prefix_pinned,
			  sa.prefix_pinned + sb.prefix_pinned);
	ck_assert_uint_eq(acc.retention_clock, 5);
	ck_assert_uint_eq(acc.prefix_uncached, 3);
	ck_assert_uint_eq(acc.events, sa.events + sb.events);

	before = acc;
	kvp_stats_add(&acc, NULL);
	kvp_stats_add(NULL, &sa);
	ck_assert(memcmp(&acc, &before, sizeof(acc)) == 0);

	for (uint64_t s = 1; s <= 2; s++)
		ck_assert_int_eq(kvp_seq_free(a, s), 0);
	for (uint64_t s = 1; s <= 3; s++)
		ck_assert_int_eq(kvp_seq_free(b, s), 0);
	kvp_manager_destroy(b);
	finish(a, p);
}
END_TEST

START_TEST(test_dump)
{
	struct kvp_pool *p = mkpool_nc(200);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	struct kvp_stats before, after;

	create_ok(m, 1, 37 * BT); /* 37 of 200 blocks */
	before = mstats(m);
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvp_manager_dump(m, f), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_ptr_nonnull(text);
	ck_assert_uint_gt(len, 0);
	ck_assert_msg(has_number(text, 37), "dump lacks used 37:\n%s", text);
	ck_assert_msg(has_number(text, 200), "dump lacks total 200:\n%s", text);
	free(text);
	after = mstats(m);
	ck_assert_int_eq(memcmp(&before, &after, sizeof(before)), 0);

	ck_assert_int_eq(kvp_manager_dump(NULL, stdout), -EINVAL);
	ck_assert_int_eq(kvp_manager_dump(m, NULL), -EINVAL);

	/* A stream that cannot be written. */
	f = fopen("/dev/null", "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvp_manager_dump(m, f), -EIO);
	fclose(f);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ check */

START_TEST(test_check_extra_ref)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t a[4], na;

	ck_assert_int_eq(kvp_manager_check(NULL), -EINVAL);
	mcheck_ok(m);
	create_ok(m, 1, 40);
	fork_ok(m, 1, 2);
	create_ok(m, 3, 5);
	mcheck_ok(m);
	na = blocks_ok(m, 1, a, 4);
	ck_assert_uint_eq(na, 3);

	ck_assert_int_eq(kvp_block_ref(p, a[2]), 0); /* shared block */
	ck_assert_int_eq(kvp_manager_check(m), -EFAULT);
	ck_assert_int_eq(kvp_pool_free(p, &a[2], 1), 0);
	mcheck_ok(m);

	na = blocks_ok(m, 3, a, 4);
	ck_assert_int_eq(kvp_block_ref(p, a[0]), 0); /* unshared block */
	ck_assert_int_eq(kvp_manager_check(m), -EFAULT);
	ck_assert_int_eq(kvp_pool_free(p, &a[0], 1), 0);
	mcheck_ok(m);
	finish(m, p);
}
END_TEST

START_TEST(test_check_raw_alloc)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t id;

	create_ok(m, 1, 20);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
	ck_assert_int_eq(kvp_manager_check(m), -EFAULT);
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	mcheck_ok(m);
	finish(m, p);
}
END_TEST

START_TEST(test_check_two_managers)
{
	struct kvp_pool *p = mkpool(64, 4, 0, NULL);
	struct kvp_manager *m1 = mkmgr(p, KVP_EVICT_LRU);
	struct kvp_manager *m2 = mkmgr(p, KVP_EVICT_LFU);
	uint32_t a[4], b[4], ncow = 0;
	struct kvp_copy cow[1];

	create_ok(m1, 1, 40);
	create_ok(m2, 1, 20);
	fork_ok(m2, 1, 2);
	ck_assert_int_eq(kvp_seq_append(m2, 2, 3, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	/* Each manager's blocks are accounted for by the other's check. */
	mcheck_ok(m1);
	mcheck_ok(m2);
	blocks_ok(m1, 1, a, 4);
	blocks_ok(m2, 1, b, 4);

	ck_assert_int_eq(kvp_block_ref(p, a[1]), 0);
	ck_assert_int_eq(kvp_manager_check(m1), -EFAULT);
	ck_assert_int_eq(kvp_manager_check(m2), -EFAULT);
	ck_assert_int_eq(kvp_pool_free(p, &a[1], 1), 0);
	mcheck_ok(m1);
	mcheck_ok(m2);

	ck_assert_int_eq(kvp_block_ref(p, b[0]), 0);
	ck_assert_int_eq(kvp_manager_check(m1), -EFAULT);
	ck_assert_int_eq(kvp_pool_free(p, &b[0], 1), 0);
	mcheck_ok(m1);

	free_ok(m2, 1);
	free_ok(m2, 2);
	mcheck_ok(m1);
	mcheck_ok(m2);
	kvp_manager_destroy(m2);
	ck_assert_uint_eq(pool_free(p), 61);
	finish(m1, p);
}
END_TEST

/* ------------------------------------------------------------ exports */

START_TEST(test_export_block_table)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	static const uint64_t seqs[] = {1, 2, 3, 4, 1};
	const uint32_t nseq = ARRAY_SIZE(seqs);
	uint32_t ids[8], n, i, j, stride;
	int32_t table[5 * 6 + 8];

	create_ok(m, 1, 20); /* 2 blocks */
	create_ok(m, 2, 0);  /* none */
	create_ok(m, 3, 50); /* 4 */
	create_ok(m, 4, 16); /* 1 */
	ck_assert_int_eq(kvp_export_block_table(m, seqs, nseq, NULL, 0, -1), 4);
	ck_assert_int_eq(kvp_export_block_table(m, seqs, 2, NULL, 0, -1), 2);
	ck_assert_int_eq(kvp_export_block_table(m, seqs + 1, 1, NULL, 0, -1),
			 0);
	ck_assert_int_eq(kvp_export_block_table(m, seqs, 0, NULL, 0, -1), 0);
	ck_assert_int_eq(kvp_export_block_table(m, NULL, 0, NULL, 0, -1), 0);

	for (stride = 4; stride <= 6; stride++) {
		int32_t pad = stride == 4 ? -1 : (int32_t)(1000 + stride);

		for (i = 0; i < ARRAY_SIZE(table); i++)
			table[i] = 0x7777;
		ck_assert_int_eq(kvp_export_block_table(m, seqs, nseq, table,
							stride, pad),
				 0);
		for (i = 0; i < nseq; i++) {
			n = blocks_ok(m, seqs[i], ids, 8);
			for (j = 0; j < n; j++)
				ck_assert_int_eq(table[i * stride + j],
						 (int32_t)ids[j]);
			for (; j < stride; j++)
				ck_assert_int_eq(table[i * stride + j], pad);
		}
		for (i = nseq * stride; i < ARRAY_SIZE(table); i++)
			ck_assert_int_eq(table[i], 0x7777);
	}
	/* stride too small for sequence 3 */
	ck_assert_int_eq(kvp_export_block_table(m, seqs, nseq, table, 3, -1),
			 -ENOBUFS);
	ck_assert_int_eq(kvp_export_block_table(m, seqs + 2, 1, table, 0, -1),
			 -ENOBUFS);
	mcheck_ok(m);
	finish(m, p);
}
END_TEST

START_TEST(test_export_block_table_errors)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	const uint64_t seqs[] = {1, 9};
	int32_t table[16];

	create_ok(m, 1, 20);
	ck_assert_int_eq(kvp_export_block_table(NULL, seqs, 1, table, 4, -1),
			 -EINVAL);
	ck_assert_int_eq(kvp_export_block_table(m, NULL, 1, table, 4, -1),
			 -EINVAL);
	ck_assert_int_eq(kvp_export_block_table(m, NULL, 1, NULL, 0, -1),
			 -EINVAL);
	ck_assert_int_eq(kvp_export_block_table(m, seqs, 2, table, 4, -1),
			 -ENOENT);
	ck_assert_int_eq(kvp_export_block_table(m, seqs, 2, NULL, 0, -1),
			 -ENOENT);
	ck_assert_int_eq(kvp_export_block_table(m, seqs + 1, 1, table, 8, -1),
			 -ENOENT);
	finish(m, p);
}
END_TEST

START_TEST(test_export_csr)
{
	struct kvp_pool *p = mkpool_nc(32);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	static const uint64_t seqs[] = {1, 2, 3, 4, 5};
	static const int32_t last[] = {4, 0, 16, 1, 2};
	const uint32_t nseq = ARRAY_SIZE(seqs);
	int32_t indptr[6], indices[12], lpl[5];
	uint32_t ids[8], n, i, j;

	create_ok(m, 1, 20); /* 2 blocks, last holds 4 */
	create_ok(m, 2, 0);
	create_ok(m, 3, 32); /* 2, full */
	create_ok(m, 4, 1);  /* 1 */
	create_ok(m, 5, 50); /* 4, last holds 2 */
	ck_assert_int_eq(kvp_export_csr(m, seqs, nseq, indptr, NULL, 0, lpl),
			 9);
	ck_assert_int_eq(kvp_export_csr(m, seqs + 1, 1, indptr, NULL, 0, lpl),
			 0);

	for (i = 0; i < ARRAY_SIZE(indices); i++)
		indices[i] = 0x7777;
	memset(indptr, 0x55, sizeof(indptr));
	memset(lpl, 0x55, sizeof(lpl));
	ck_assert_int_eq(kvp_export_csr(m, seqs, nseq, indptr, indices, 9, lpl),
			 0);
	ck_assert_int_eq(indptr[0], 0);
	for (i = 0; i < nseq; i++) {
		n = blocks_ok(m, seqs[i], ids, 8);
		ck_assert_int_eq(indptr[i + 1] - indptr[i], (int32_t)n);
		for (j = 0; j < n; j++)
			ck_assert_int_eq(indices[indptr[i] + (int32_t)j],
					 (int32_t)ids[j]);
		ck_assert_int_eq(lpl[i], last[i]);
		if (n)
			ck_assert(lpl[i] >= 1 && lpl[i] <= (int32_t)BT);
	}
	ck_assert_int_eq(indptr[nseq], 9);
	for (i = 9; i < ARRAY_SIZE(indices); i++)
		ck_assert_int_eq(indices[i], 0x7777);

	/* A larger cap is fine. */
	ck_assert_int_eq(
		kvp_export_csr(m, seqs, nseq, indptr, indices, 12, lpl), 0);
	ck_assert_int_eq(indptr[nseq], 9);
	ck_assert_int_eq(kvp_export_csr(m, seqs, nseq, indptr, indices, 8, lpl),
			 -ENOBUFS);
	ck_assert_int_eq(kvp_export_csr(m, seqs, nseq, indptr, indices, 0, lpl),
			 -ENOBUFS);
	finish(m, p);
}
END_TEST

START_TEST(test_export_csr_errors)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	const uint64_t seqs[] = {1, 9};
	int32_t indptr[3], indices[8], lpl[2];

	create_ok(m, 1, 20);
	ck_assert_int_eq(kvp_export_csr(NULL, seqs, 1, indptr, indices, 8, lpl),
			 -EINVAL);
	ck_assert_int_eq(kvp_export_csr(m, NULL, 1, indptr, indices, 8, lpl),
			 -EINVAL);
	ck_assert_int_eq(kvp_export_csr(m, seqs, 2, indptr, indices, 8, lpl),
			 -ENOENT);
	ck_assert_int_eq(kvp_export_csr(m, seqs, 2, indptr, NULL, 0, lpl),
			 -ENOENT);
	finish(m, p);
}
END_TEST

START_TEST(test_export_slot_mapping)
{
	struct kvp_pool *p = mkpool_nc(16);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	uint32_t b[4], nb, i;
	int64_t slots[48];

	create_ok(m, 1, 40);
	nb = blocks_ok(m, 1, b, 4);
	ck_assert_uint_eq(nb, 3);
	for (i = 0; i < 48; i++)
		slots[i] = -7;
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 0, 40, slots), 0);
	for (i = 0; i < 40; i++)
		ck_assert_int_eq(slots[i], (int64_t)b[i / BT] * BT + i % BT);
	for (i = 40; i < 48; i++)
		ck_assert_int_eq(slots[i], -7);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 10, 10, slots), 0);
	for (i = 0; i < 10; i++)
		ck_assert_int_eq(slots[i], (int64_t)b[(10 + i) / BT] * BT +
						   (10 + i) % BT);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 39, 1, slots), 0);
	ck_assert_int_eq(slots[0], (int64_t)b[2] * BT + 7);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 0, 0, NULL), 0);

	/* Past the token count. */
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 39, 2, slots), -ERANGE);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 40, 1, slots), -ERANGE);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 0, 41, slots), -ERANGE);
	/* first_pos + n must not wrap around. */
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, UINT32_MAX, 2, slots),
			 -ERANGE);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, UINT32_MAX, 1, slots),
			 -ERANGE);

	/* After an append the new slots follow. */
	append_ok(m, 1, 10);
	nb = blocks_ok(m, 1, b, 4);
	ck_assert_uint_eq(nb, 4);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 40, 10, slots), 0);
	for (i = 0; i < 10; i++)
		ck_assert_int_eq(slots[i], (int64_t)b[(40 + i) / BT] * BT +
						   (40 + i) % BT);

	ck_assert_int_eq(kvp_export_slot_mapping(NULL, 1, 0, 1, slots),
			 -EINVAL);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 1, 0, 1, NULL), -EINVAL);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 2, 0, 1, slots), -ENOENT);
	create_ok(m, 3, 0);
	ck_assert_int_eq(kvp_export_slot_mapping(m, 3, 0, 1, slots), -ERANGE);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ threads */

#define MT_THREADS 4
#define MT_ITERS 3000
#define MT_LIVE 16
#define MT_MAX_TOKENS 400

struct mt_arg {
	struct kvp_manager *m;
	struct kvp_pool *p;
	int tid;
	uint64_t creates, appends, forks, frees, fork_refs;
	struct errbuf err;
};

static int mt_verify(struct mt_arg *a, uint64_t id, uint32_t tokens)
{
	struct kvp_seq_info in;
	uint32_t ids[MT_MAX_TOKENS / BT + 2], n = 0, i;
	int rc = kvp_seq_info(a->m, id, &in);

	if (rc) {
		wfail(&a->err, "thread %d: info(%llu) = %d (%s)", a->tid,
		      ULL(id), rc, kvp_strerror(rc));
		return -1;
	}
	if (in.num_tokens != tokens || in.num_blocks != blocks_for(tokens)) {
		wfail(&a->err,
		      "thread %d: seq %llu has %u tokens / %u blocks, "
		      "want %u / %u",
		      a->tid, ULL(id), in.num_tokens, in.num_blocks, tokens,
		      blocks_for(tokens));
		return -1;
	}
	rc = kvp_seq_blocks(a->m, id, ids, ARRAY_SIZE(ids), &n);
	if (rc || n != blocks_for(tokens)) {
		wfail(&a->err, "thread %d: blocks(%llu) = %d, n %u", a->tid,
		      ULL(id), rc, n);
		return -1;
	}
	for (i = 0; i < n; i++) {
		rc = kvp_block_refcount(a->p, ids[i]);
		if (rc < 1) {
			wfail(&a->err,
			      "thread %d: seq %llu holds block %u with "
			      "refcount %d",
			      a->tid, ULL(id), ids[i], rc);
			return -1;
		}
	}
	return 0;
}

static void *mt_seq_thread(void *arg)
{
	struct mt_arg *a = arg;
	uint64_t ids[MT_LIVE];
	uint32_t toks[MT_LIVE], nlive = 0, k;
	uint64_t next = (uint64_t)(a->tid + 1) << 40;
	unsigned seed = 0x9E3779B9u * (unsigned)(a->tid + 1);
	struct kvp_copy cow[1];
	uint32_t ncow;
	int it, rc;

	for (it = 0; it < MT_ITERS && !a->err.msg[0]; it++) {
		unsigned r = (unsigned)rand_r(&seed);
		unsigned op = r % 10;

		k = nlive ? (r >> 8) % nlive : 0;
		if (nlive == 0 || (op < 3 && nlive < MT_LIVE)) {
			uint32_t t = (r >> 12) % 80;

			rc = kvp_seq_create(a->m, next, t);
			if (rc) {
				wfail(&a->err, "thread %d: create = %d (%s)",
				      a->tid, rc, kvp_strerror(rc));
				break;
			}
			a->creates++;
			ids[nlive] = next++;
			toks[nlive] = t;
			k = nlive++;
		} else if (op < 6) {
			uint32_t t = 1 + (r >> 12) % 20;

			if (toks[k] + t > MT_MAX_TOKENS) {
				t = (r >> 12) % (toks[k] + 1);
				rc = kvp_seq_truncate(a->m, ids[k], t);
			} else {
				rc = kvp_seq_append(a->m, ids[k], t, cow, 1,
						    &ncow);
				if (rc == 0) {
					a->appends++;
					t += toks[k];
				}
			}
			if (rc) {
				wfail(&a->err,
				      "thread %d: append/truncate = %d (%s)",
				      a->tid, rc, kvp_strerror(rc));
				break;
			}
			toks[k] = t;
		} else if (op < 8 && nlive < MT_LIVE) {
			rc = kvp_seq_fork(a->m, ids[k], next);
			if (rc) {
				wfail(&a->err, "thread %d: fork = %d (%s)",
				      a->tid, rc, kvp_strerror(rc));
				break;
			}
			a->forks++;
			a->fork_refs += blocks_for(toks[k]);
			ids[nlive] = next++;
			toks[nlive] = toks[k];
			k = nlive++;
		} else {
			rc = kvp_seq_free(a->m, ids[k]);
			if (rc == 0)
				rc = kvp_seq_free(a->m, ids[k]) == -ENOENT
					     ? 0
					     : -EPROTO;
			if (rc) {
				wfail(&a->err, "thread %d: free = %d (%s)",
				      a->tid, rc, kvp_strerror(rc));
				break;
			}
			a->frees++;
			ids[k] = ids[--nlive];
			toks[k] = toks[nlive];
			continue;
		}
		if (mt_verify(a, ids[k], toks[k]))
			break;
	}
	while (nlive) {
		rc = kvp_seq_free(a->m, ids[--nlive]);
		if (rc)
			wfail(&a->err, "thread %d: final free = %d (%s)",
			      a->tid, rc, kvp_strerror(rc));
		else
			a->frees++;
	}
	return NULL;
}

START_TEST(test_mt_seq_ops)
{
	struct kvp_pool *p = mkpool(4096, 0, 0, NULL);
	struct kvp_manager *mm[2];
	struct mt_arg args[MT_THREADS];
	pthread_t t[MT_THREADS];
	int i, j;

	mm[0] = mkmgr(p, KVP_EVICT_LRU);
	mm[1] = mkmgr(p, KVP_EVICT_LFU);
	memset(args, 0, sizeof(args));
	for (i = 0; i < MT_THREADS; i++) {
		args[i].m = mm[i % 2];
		args[i].p = p;
		args[i].tid = i;
		ck_assert_int_eq(
			pthread_create(&t[i], NULL, mt_seq_thread, &args[i]),
			0);
	}
	for (i = 0; i < MT_THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	for (i = 0; i < MT_THREADS; i++)
		ck_assert_msg(args[i].err.msg[0] == 0, "%s", args[i].err.msg);

	for (j = 0; j < 2; j++) {
		struct kvp_stats st = mstats(mm[j]);
		uint64_t creates = 0, appends = 0, forks = 0, frees = 0;
		uint64_t fork_refs = 0;

		for (i = j; i < MT_THREADS; i += 2) {
			creates += args[i].creates;
			appends += args[i].appends;
			forks += args[i].forks;
			frees += args[i].frees;
			fork_refs += args[i].fork_refs;
		}
		ck_assert_uint_eq(frees, creates + forks);
		ck_assert_uint_eq(st.sequences, 0);
		ck_assert_uint_eq(st.tokens, 0);
		ck_assert_uint_eq(st.seq_creates, creates);
		ck_assert_uint_eq(st.appends, appends);
		ck_assert_uint_eq(st.forks, forks);
		ck_assert_uint_eq(st.seq_frees, frees);
		ck_assert_uint_eq(st.evictions, 0);
		ck_assert_uint_eq(st.blocks_released,
				  st.blocks_allocated + fork_refs);
		ck_assert_uint_eq(st.blocks_used, 0);
		mcheck_ok(mm[j]);
	}
	ck_assert_uint_eq(pool_free(p), 4096);
	kvp_manager_destroy(mm[1]);
	finish(mm[0], p);
}
END_TEST

#define RACE_SEQ 77u
#define RACE_ITERS 4000
#define RACE_FORKERS 2

struct race_shared {
	struct kvp_manager *m;
	struct kvp_pool *p;
	pthread_barrier_t start;
	atomic_int done;
	struct errbuf err;
};

struct race_arg {
	struct race_shared *sh;
	uint64_t dst;
	uint64_t ok, enoent;
	struct errbuf err;
};

static void *race_creator(void *arg)
{
	struct race_shared *sh = arg;
	int i, rc;

	pthread_barrier_wait(&sh->start);
	for (i = 0; i < RACE_ITERS; i++) {
		rc = kvp_seq_create(sh->m, RACE_SEQ, 50);
		if (rc) {
			wfail(&sh->err, "create #%d = %d (%s)", i, rc,
			      kvp_strerror(rc));
			break;
		}
		rc = kvp_seq_free(sh->m, RACE_SEQ);
		if (rc) {
			wfail(&sh->err, "free #%d = %d (%s)", i, rc,
			      kvp_strerror(rc));
			break;
		}
	}
	atomic_store(&sh->done, 1);
	return NULL;
}

static void *race_forker(void *arg)
{
	struct race_arg *a = arg;
	struct race_shared *sh = a->sh;
	struct kvp_seq_info in;
	uint32_t ids[8], n, i;
	int rc;

	memset(&in, 0, sizeof(in));
	pthread_barrier_wait(&sh->start);
	/* At least one attempt, however the threads are scheduled. */
	do {
		rc = kvp_seq_fork(sh->m, RACE_SEQ, a->dst);
		if (rc == -ENOENT) {
			a->enoent++;
			continue;
		}
		if (rc) {
			wfail(&a->err, "fork = %d (%s)", rc, kvp_strerror(rc));
			break;
		}
		a->ok++;
		/* All of the source or nothing. */
		rc = kvp_seq_info(sh->m, a->dst, &in);
		if (rc || in.num_tokens != 50 || in.num_blocks != 4) {
			wfail(&a->err, "fork info = %d: %u tokens, %u blocks",
			      rc, in.num_tokens, in.num_blocks);
			break;
		}
		rc = kvp_seq_blocks(sh->m, a->dst, ids, 8, &n);
		if (rc || n != 4) {
			wfail(&a->err, "fork blocks = %d, n %u", rc, n);
			break;
		}
		for (i = 0; i < n; i++) {
			rc = kvp_block_refcount(sh->p, ids[i]);
			if (rc < 1) {
				wfail(&a->err,
				      "forked block %u has refcount %d", ids[i],
				      rc);
				break;
			}
		}
		rc = kvp_seq_free(sh->m, a->dst);
		if (rc) {
			wfail(&a->err, "free fork = %d (%s)", rc,
			      kvp_strerror(rc));
			break;
		}
	} while (!atomic_load(&sh->done) && !a->err.msg[0]);
	return NULL;
}

START_TEST(test_mt_fork_free_race)
{
	struct kvp_pool *p = mkpool(64, 0, 0, NULL);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct race_shared sh;
	struct race_arg args[RACE_FORKERS];
	pthread_t tc, tf[RACE_FORKERS];
	struct kvp_stats st;
	uint64_t ok = 0;
	int i;

	memset(&sh, 0, sizeof(sh));
	sh.m = m;
	sh.p = p;
	atomic_init(&sh.done, 0);
	ck_assert_int_eq(
		pthread_barrier_init(&sh.start, NULL, RACE_FORKERS + 1), 0);
	memset(args, 0, sizeof(args));
	for (i = 0; i < RACE_FORKERS; i++) {
		args[i].sh = &sh;
		args[i].dst = 1000 + (uint64_t)i;
		ck_assert_int_eq(
			pthread_create(&tf[i], NULL, race_forker, &args[i]), 0);
	}
	ck_assert_int_eq(pthread_create(&tc, NULL, race_creator, &sh), 0);
	ck_assert_int_eq(pthread_join(tc, NULL), 0);
	for (i = 0; i < RACE_FORKERS; i++)
		ck_assert_int_eq(pthread_join(tf[i], NULL), 0);
	ck_assert_msg(sh.err.msg[0] == 0, "creator: %s", sh.err.msg);
	for (i = 0; i < RACE_FORKERS; i++) {
		ck_assert_msg(args[i].err.msg[0] == 0, "forker %d: %s", i,
			      args[i].err.msg);
		ck_assert_uint_gt(args[i].ok + args[i].enoent, 0);
		ok += args[i].ok;
	}
	expect_gone(m, RACE_SEQ);
	st = mstats(m);
	ck_assert_uint_eq(st.sequences, 0);
	ck_assert_uint_eq(st.seq_creates, RACE_ITERS);
	ck_assert_uint_eq(st.forks, ok);
	ck_assert_uint_eq(st.seq_frees, RACE_ITERS + ok);
	ck_assert_uint_eq(pool_free(p), 64);
	pthread_barrier_destroy(&sh.start);
	finish(m, p);
}
END_TEST

#define EV_SEQS 256
#define EV_THREADS 4

struct ev_arg {
	struct kvp_manager *m;
	uint64_t victims[2 * EV_SEQS]; /* every sequence, forks too */
	uint32_t n;
	struct errbuf err;
};

static void *ev_thread(void *arg)
{
	struct ev_arg *a = arg;
	uint64_t v;
	int rc;

	for (;;) {
		rc = kvp_evict(a->m, &v);
		if (rc == -ENOENT)
			break;
		if (rc) {
			wfail(&a->err, "kvp_evict = %d (%s)", rc,
			      kvp_strerror(rc));
			break;
		}
		if (a->n == ARRAY_SIZE(a->victims)) {
			wfail(&a->err, "more than %d victims", 2 * EV_SEQS);
			break;
		}
		a->victims[a->n++] = v;
	}
	return NULL;
}

/* Concurrent evictors never free the same victim twice. */
START_TEST(test_mt_concurrent_evict)
{
	struct kvp_pool *p = mkpool(1024, 0, 0, NULL);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU);
	struct ev_arg *args = calloc(EV_THREADS, sizeof(*args));
	unsigned char seen[2 * EV_SEQS];
	pthread_t t[EV_THREADS];
	uint32_t total = 0, i, k;
	int j;

	ck_assert_ptr_nonnull(args);
	for (i = 0; i < EV_SEQS; i++)
		create_ok(m, i, 1 + i % 40);
	for (i = 0; i < EV_SEQS; i += 8)
		fork_ok(m, i, EV_SEQS + i); /* some shared blocks too */
	for (j = 0; j < EV_THREADS; j++) {
		args[j].m = m;
		ck_assert_int_eq(
			pthread_create(&t[j], NULL, ev_thread, &args[j]), 0);
	}
	for (j = 0; j < EV_THREADS; j++)
		ck_assert_int_eq(pthread_join(t[j], NULL), 0);
	memset(seen, 0, sizeof(seen));
	for (j = 0; j < EV_THREADS; j++) {
		ck_assert_msg(args[j].err.msg[0] == 0, "%s", args[j].err.msg);
		for (k = 0; k < args[j].n; k++) {
			uint64_t v = args[j].victims[k];

			ck_assert_msg(v < EV_SEQS ||
					      (v < 2 * EV_SEQS && v % 8 == 0),
				      "victim %llu was never created", ULL(v));
			ck_assert_msg(!seen[v], "victim %llu evicted twice",
				      ULL(v));
			seen[v] = 1;
			total++;
		}
	}
	ck_assert_uint_eq(total, EV_SEQS + EV_SEQS / 8);
	ck_assert_uint_eq(mstats(m).evictions, total);
	ck_assert_uint_eq(mstats(m).sequences, 0);
	ck_assert_int_eq(kvp_evict(m, NULL), -ENOENT);
	ck_assert_uint_eq(pool_free(p), 1024);
	free(args);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ suite */

static Suite *manager_suite(void)
{
	Suite *s = suite_create("manager");
	TCase *tc;

	tc = tcase_create("manager");
	tcase_add_test(tc, test_mgr_create_null_args);
	tcase_add_test(tc, test_mgr_create_bad_config);
	tcase_add_test(tc, test_mgr_create_good_config);
	tcase_add_test(tc, test_mgr_defaults);
	tcase_add_test(tc, test_mgr_holds_pool_ref);
	tcase_add_test(tc, test_mgr_destroy_frees_all);
	tcase_add_test(tc, test_mgr_two_managers);
	suite_add_tcase(s, tc);

	tc = tcase_create("create");
	tcase_add_test(tc, test_seq_create_blocks);
	tcase_add_test(tc, test_seq_create_extreme_ids);
	tcase_add_test(tc, test_seq_create_duplicate);
	tcase_add_loop_test(tc, test_seq_create_nospc, 0, NVARIANTS);
	tcase_add_test(tc, test_seq_create_null);
	suite_add_tcase(s, tc);

	tc = tcase_create("info");
	tcase_add_test(tc, test_seq_info_errors);
	tcase_add_test(tc, test_seq_blocks_errors);
	tcase_add_test(tc, test_seq_blocks_values);
	tcase_add_test(tc, test_seq_access_clock);
	tcase_add_test(tc, test_seq_access_clock_threads);
	suite_add_tcase(s, tc);

	tc = tcase_create("append");
	tcase_add_test(tc, test_append_within_block);
	tcase_add_test(tc, test_append_cross_boundary);
	tcase_add_test(tc, test_append_zero);
	tcase_add_test(tc, test_append_errors);
	tcase_add_loop_test(tc, test_append_nospc, 0, NVARIANTS);
	tcase_add_test(tc, test_append_overflow);
	suite_add_tcase(s, tc);

	tc = tcase_create("cow");
	tcase_add_test(tc, test_cow_basic);
	tcase_add_test(tc, test_cow_cap_zero);
	tcase_add_test(tc, test_cow_full_last_block);
	tcase_add_test(tc, test_cow_cross_boundary);
	tcase_add_test(tc, test_cow_nospc);
	tcase_add_test(tc, test_cow_data_copied);
	suite_add_tcase(s, tc);

	tc = tcase_create("fork");
	tcase_set_timeout(tc, 30); /* test_fork_overflow: 2^25 ref ops */
	tcase_add_test(tc, test_fork_refcounts);
	tcase_add_test(tc, test_fork_errors);
	tcase_add_test(tc, test_fork_free_source);
	tcase_add_test(tc, test_fork_overflow);
	suite_add_tcase(s, tc);

	tc = tcase_create("free");
	tcase_add_test(tc, test_free_basic);
	tcase_add_test(tc, test_truncate_basic);
	tcase_add_test(tc, test_truncate_errors);
	tcase_add_test(tc, test_truncate_shared);
	suite_add_tcase(s, tc);

	tc = tcase_create("trim");
	tcase_add_test(tc, test_trim_example);
	tcase_add_test(tc, test_trim_nothing);
	tcase_add_test(tc, test_trim_window_zero);
	tcase_add_test(tc, test_trim_sink_zero);
	tcase_add_test(tc, test_trim_errors);
	tcase_add_test(tc, test_trim_shared);
	suite_add_tcase(s, tc);

	tc = tcase_create("policy");
	tcase_add_test(tc, test_priority);
	tcase_add_test(tc, test_admit_exact);
	tcase_add_test(tc, test_admit_tenth);
	tcase_add_test(tc, test_fraction_boundaries);
	tcase_add_test(tc, test_block_tokens_five);
	tcase_add_test(tc, test_evict_lru);
	tcase_add_test(tc, test_evict_lru_fork_touch);
	tcase_add_test(tc, test_evict_lfu);
	tcase_add_test(tc, test_evict_longest);
	tcase_add_test(tc, test_evict_priority);
	tcase_add_test(tc, test_evict_empty);
	tcase_add_test(tc, test_evict_until_target);
	tcase_add_test(tc, test_evict_until_partial);
	tcase_add_test(tc, test_evict_until_threshold);
	tcase_add_test(tc, test_evict_until_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("stats");
	tcase_add_test(tc, test_stats_scenario);
	tcase_add_test(tc, test_stats_null);
	tcase_add_test(tc, test_stats_add);
	tcase_add_test(tc, test_dump);
	tcase_add_test(tc, test_check_extra_ref);
	tcase_add_test(tc, test_check_raw_alloc);
	tcase_add_test(tc, test_check_two_managers);
	suite_add_tcase(s, tc);

	tc = tcase_create("export");
	tcase_add_test(tc, test_export_block_table);
	tcase_add_test(tc, test_export_block_table_errors);
	tcase_add_test(tc, test_export_csr);
	tcase_add_test(tc, test_export_csr_errors);
	tcase_add_test(tc, test_export_slot_mapping);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_mt_seq_ops);
	tcase_add_test(tc, test_mt_fork_free_race);
	tcase_add_test(tc, test_mt_concurrent_evict);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return run_suite(manager_suite());
}
