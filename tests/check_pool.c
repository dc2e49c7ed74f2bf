/* SPDX-License-Identifier: MIT */
/*
 * check_pool.c - Check unit tests for the kvpool block pool (kvp_pool_*,
 * kvp_block_*, kvp_thread_flush, kvp_strerror).
 *
 * Every expectation below comes from the documentation in kvpool.h.
 * Worker threads never call ck_assert (a failed assertion in a thread that
 * the main thread waits for on a barrier would hang the test); they record
 * their first failure in a buffer that the main thread asserts on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpool.h"

#include "check_common.h"

#define SENTINEL_ID 0xDEADBEEFu

/* An address that kvp_pool_create must not write over *out on failure. */
static char out_sentinel_storage;
#define OUT_SENTINEL ((struct kvp_pool *)(void *)&out_sentinel_storage)

/* ------------------------------------------------------------ helpers */

static struct kvp_pool_stats get_stats(struct kvp_pool *p)
{
	struct kvp_pool_stats st;

	memset(&st, 0xA5, sizeof(st));
	kvp_pool_stats(p, &st);
	return st;
}

/*
 * Stats of a quiescent pool are exact: free + used == total, parked blocks
 * are a subset of free ones, peak_used covers the used value just seen.
 */
static struct kvp_pool_stats quiet_stats(struct kvp_pool *p)
{
	struct kvp_pool_stats st = get_stats(p);

	ck_assert_uint_eq(st.free + st.used, st.total);
	ck_assert_uint_le(st.in_thread_caches, st.free);
	ck_assert_uint_ge(st.peak_used, st.used);
	ck_assert_uint_le(st.peak_used, st.total);
	ck_assert_uint_ge(st.allocs, st.frees);
	ck_assert_uint_eq(st.allocs - st.frees, st.used);
	return st;
}

static void assert_check_ok(struct kvp_pool *p)
{
	int rc = kvp_pool_check(p);

	ck_assert_msg(rc == 0, "kvp_pool_check = %d (%s)", rc,
		      kvp_strerror(rc));
}

/* Checks, frees all and destroys: the end of most tests. */
static void finish_pool(struct kvp_pool *p)
{
	struct kvp_pool_stats st;

	assert_check_ok(p);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.free, st.total);
	kvp_pool_unref(p);
}

/*
 * Returns NULL if ids[0..n) are distinct and below limit, else a message
 * (static buffer; used from one thread at a time per buffer).
 */
static const char *ids_problem(const uint32_t *ids, uint32_t n, uint32_t limit,
			       char *buf, size_t len)
{
	unsigned char *seen = calloc(limit ? limit : 1, 1);
	uint32_t i;

	if (!seen) {
		snprintf(buf, len, "calloc failed");
		return buf;
	}
	for (i = 0; i < n; i++) {
		if (ids[i] >= limit) {
			snprintf(buf, len, "ids[%u] = %u not below %u", i,
				 ids[i], limit);
			free(seen);
			return buf;
		}
		if (seen[ids[i]]) {
			snprintf(buf, len, "id %u returned twice (ids[%u])",
				 ids[i], i);
			free(seen);
			return buf;
		}
		seen[ids[i]] = 1;
	}
	free(seen);
	return NULL;
}

static void assert_ids_ok(const uint32_t *ids, uint32_t n, uint32_t limit)
{
	char buf[128];
	const char *msg = ids_problem(ids, n, limit, buf, sizeof(buf));

	ck_assert_msg(msg == NULL, "%s", msg ? msg : "");
}

static void assert_all_refcount(struct kvp_pool *p, const uint32_t *ids,
				uint32_t n, int want)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		int rc = kvp_block_refcount(p, ids[i]);

		if (rc != want)
			ck_abort_msg("refcount of block %u = %d, want %d",
				     ids[i], rc, want);
	}
}

static void free_each(struct kvp_pool *p, const uint32_t *ids, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		int rc = kvp_pool_free(p, &ids[i], 1);

		if (rc != 0)
			ck_abort_msg("kvp_pool_free(%u) = %d (%s)", ids[i], rc,
				     kvp_strerror(rc));
	}
}

/*
 * Pool variants exercised by the loop tests: explicit per-thread cache,
 * automatic cache, no cache at all.
 */
struct variant {
	uint32_t cache_blocks;
	uint32_t flags;
};
static const struct variant variants[] = {
	{16, 0},
	{0, 0},
	{0, KVP_POOL_NOCACHE},
};
#define NVARIANTS ((int)ARRAY_SIZE(variants))

static struct kvp_pool *mkvariant(int i, uint32_t num_blocks)
{
	return mkpool(num_blocks, variants[i].cache_blocks, variants[i].flags,
		      NULL);
}

/* Allocates and frees one block at a time so that blocks park in the
 * calling thread's cache.  Returns 0 or records a failure. */
static int park_blocks(struct kvp_pool *p, uint32_t count, struct errbuf *e)
{
	uint32_t ids[256];
	uint32_t i;
	int rc;

	if (count > ARRAY_SIZE(ids))
		count = ARRAY_SIZE(ids);
	for (i = 0; i < count; i++) {
		rc = kvp_pool_alloc(p, 1, &ids[i]);
		if (rc) {
			wfail(e, "park: alloc #%u = %d (%s)", i, rc,
			      kvp_strerror(rc));
			return -1;
		}
	}
	for (i = 0; i < count; i++) {
		rc = kvp_pool_free(p, &ids[i], 1);
		if (rc) {
			wfail(e, "park: free(%u) = %d (%s)", ids[i], rc,
			      kvp_strerror(rc));
			return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ strerror */

static const int known_errs[] = {
	0,	 -EINVAL, -ENOSPC,   -ENOBUFS,	 -ENOMEM, -ENOENT,
	-EEXIST, -ERANGE, -EALREADY, -EOVERFLOW, -EBUSY,
};

START_TEST(test_strerror_known)
{
	size_t i, j;

	for (i = 0; i < ARRAY_SIZE(known_errs); i++) {
		const char *s = kvp_strerror(known_errs[i]);

		ck_assert_msg(s != NULL, "kvp_strerror(%d) is NULL",
			      known_errs[i]);
		ck_assert_msg(s[0] != '\0', "kvp_strerror(%d) is empty",
			      known_errs[i]);
		/* Static: the same text on every call. */
		ck_assert_str_eq(s, kvp_strerror(known_errs[i]));
	}
	for (i = 0; i < ARRAY_SIZE(known_errs); i++)
		for (j = i + 1; j < ARRAY_SIZE(known_errs); j++)
			ck_assert_msg(
				strcmp(kvp_strerror(known_errs[i]),
				       kvp_strerror(known_errs[j])) != 0,
				"kvp_strerror(%d) == kvp_strerror(%d): %s",
				known_errs[i], known_errs[j],
				kvp_strerror(known_errs[i]));
}
END_TEST

START_TEST(test_strerror_unknown)
{
	static const int unknown[] = {-12345,  12345,	1,
				      INT_MIN, INT_MAX, -4096};
	size_t i, j;

	for (i = 0; i < ARRAY_SIZE(unknown); i++) {
		const char *s = kvp_strerror(unknown[i]);

		ck_assert_msg(s != NULL, "kvp_strerror(%d) is NULL",
			      unknown[i]);
		/* An unknown value must not be described as a known one. */
		for (j = 0; j < ARRAY_SIZE(known_errs); j++)
			ck_assert_msg(strcmp(s, kvp_strerror(known_errs[j])) !=
					      0,
				      "kvp_strerror(%d) reads like %d: %s",
				      unknown[i], known_errs[j], s);
	}
}
END_TEST

/* ------------------------------------------------------------ create */

START_TEST(test_create_null_args)
{
	struct kvp_pool_config c = make_cfg(64, 0, 0, NULL);
	struct kvp_pool *out = OUT_SENTINEL;

	ck_assert_int_eq(kvp_pool_create(NULL, &out), -EINVAL);
	ck_assert_ptr_eq(out, OUT_SENTINEL);
	ck_assert_int_eq(kvp_pool_create(&c, NULL), -EINVAL);
}
END_TEST

START_TEST(test_create_bad_config)
{
	static const struct kvp_layout good = {2, 4, 8, KVP_F16};
	struct {
		const char *what;
		struct kvp_pool_config cfg;
	} cases[16];
	size_t n = 0, i;

#define ADD_CASE(w, nb, bt, cb, fl, lay)                                       \
	do {                                                                   \
		cases[n].what = (w);                                           \
		cases[n].cfg = make_cfg((nb), (cb), (fl), (lay));              \
		cases[n].cfg.block_tokens = (bt);                              \
		n++;                                                           \
	} while (0)

	ADD_CASE("num_blocks 0 with cache_blocks 2", 0, 16, 2, 0, NULL);
	ADD_CASE("KVP_POOL_K_ONLY without a layout", 64, 16, 0,
		 KVP_POOL_K_ONLY, NULL);
	ADD_CASE("num_blocks KVP_MAX_BLOCKS+1", KVP_MAX_BLOCKS + 1u, 16, 0, 0,
		 NULL);
	ADD_CASE("num_blocks UINT32_MAX", UINT32_MAX, 16, 0, 0, NULL);
	ADD_CASE("block_tokens 0", 64, 0, 0, 0, NULL);
	ADD_CASE("block_tokens 0 with layout", 64, 0, 0, 0, &good);
	ADD_CASE("cache_blocks > KVP_MAX_CACHE_BLOCKS", 65536, 16,
		 KVP_MAX_CACHE_BLOCKS + 1u, 0, NULL);
	ADD_CASE("cache_blocks UINT32_MAX", 65536, 16, UINT32_MAX, 0, NULL);
	ADD_CASE("cache_blocks > num_blocks", 64, 16, 65, 0, NULL);
	ADD_CASE("cache_blocks > num_blocks (1 block)", 1, 16, 2, 0, NULL);
	ADD_CASE("unknown flag bit 3", 64, 16, 0, 1u << 3, NULL);
	ADD_CASE("unknown flag bit 31", 64, 16, 0, 1u << 31, NULL);
	ADD_CASE("known + unknown flags", 64, 16, 0,
		 KVP_POOL_ZERO | KVP_POOL_NOCACHE | KVP_POOL_K_ONLY | (1u << 7),
		 &good);
#undef ADD_CASE
	ck_assert_uint_le(n, ARRAY_SIZE(cases));

	for (i = 0; i < n; i++) {
		struct kvp_pool *out = OUT_SENTINEL;
		int rc = kvp_pool_create(&cases[i].cfg, &out);

		ck_assert_msg(rc == -EINVAL, "%s: kvp_pool_create = %d (%s)",
			      cases[i].what, rc, kvp_strerror(rc));
		ck_assert_msg(out == OUT_SENTINEL, "%s: *out was written",
			      cases[i].what);
	}
}
END_TEST

START_TEST(test_create_limits_ok)
{
	struct kvp_pool *p;
	struct kvp_pool_stats st;
	struct kvp_pool_config c;
	uint32_t id;

	/* A 1-block pool. */
	p = mkpool(1, 0, 0, NULL);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.total, 1);
	ck_assert_uint_eq(st.cache_blocks, 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
	ck_assert_uint_eq(id, 0);
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	finish_pool(p);

	/* cache_blocks == num_blocks is allowed. */
	p = mkpool(64, 64, 0, NULL);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.cache_blocks, 64);
	finish_pool(p);

	/* cache_blocks == KVP_MAX_CACHE_BLOCKS is allowed. */
	p = mkpool(2 * KVP_MAX_CACHE_BLOCKS, KVP_MAX_CACHE_BLOCKS, 0, NULL);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.cache_blocks, KVP_MAX_CACHE_BLOCKS);
	finish_pool(p);

	/* Every known flag, a GPU device id, unusual block_tokens. */
	c = make_cfg(32, 0, KVP_POOL_ZERO | KVP_POOL_NOCACHE, NULL);
	c.device_id = 3;
	c.block_tokens = 1;
	p = NULL;
	ck_assert_int_eq(kvp_pool_create(&c, &p), 0);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(kvp_pool_block_tokens(p), 1);
	finish_pool(p);

	c = make_cfg(32, 0, 0, NULL);
	c.block_tokens = UINT32_MAX;
	p = NULL;
	ck_assert_int_eq(kvp_pool_create(&c, &p), 0);
	ck_assert_uint_eq(kvp_pool_block_tokens(p), UINT32_MAX);
	finish_pool(p);
}
END_TEST

START_TEST(test_create_idonly)
{
	struct kvp_pool *p = mkpool(100, 0, 0, NULL);
	struct kvp_pool_stats st = quiet_stats(p);
	uint32_t id;

	ck_assert_uint_eq(kvp_block_bytes(p), 0);
	ck_assert_ptr_null(kvp_block_data(p, 0));
	ck_assert_ptr_null(kvp_block_data(p, 99));
	ck_assert_ptr_null(kvp_block_data(p, 100));
	ck_assert_uint_eq(kvp_pool_block_tokens(p), 16);

	ck_assert_uint_eq(st.total, 100);
	ck_assert_uint_eq(st.free, 100);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.allocs, 0);
	ck_assert_uint_eq(st.frees, 0);
	ck_assert_uint_eq(st.peak_used, 0);

	/* Allocated blocks of an ID-only pool have no data either. */
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
	ck_assert_ptr_null(kvp_block_data(p, id));
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	finish_pool(p);

	/* NULL pool accessors. */
	ck_assert_uint_eq(kvp_block_bytes(NULL), 0);
	ck_assert_ptr_null(kvp_block_data(NULL, 0));
	ck_assert_uint_eq(kvp_pool_block_tokens(NULL), 0);
}
END_TEST

#define LAYOUT_BLOCKS 8u
START_TEST(test_create_layout)
{
	static const struct kvp_layout lay = {2, 4, 8, KVP_F16};
	const size_t bytes = (size_t)2 * 2 * 16 * 4 * 8 * 2;
	struct kvp_pool *p = mkpool(LAYOUT_BLOCKS, 0, 0, &lay);
	unsigned char *data[LAYOUT_BLOCKS];
	uint32_t ids[LAYOUT_BLOCKS];
	uint32_t i, j;

	ck_assert_uint_eq(kvp_block_bytes(p), bytes);
	ck_assert_uint_eq(kvp_pool_block_tokens(p), 16);
	ck_assert_ptr_null(kvp_block_data(p, LAYOUT_BLOCKS));
	ck_assert_ptr_null(kvp_block_data(p, UINT32_MAX));

	ck_assert_int_eq(kvp_pool_alloc(p, LAYOUT_BLOCKS, ids), 0);
	assert_ids_ok(ids, LAYOUT_BLOCKS, LAYOUT_BLOCKS);

	for (i = 0; i < LAYOUT_BLOCKS; i++) {
		data[i] = kvp_block_data(p, i);
		ck_assert_msg(data[i] != NULL, "block %u has no data", i);
		/* The same address on every call. */
		ck_assert_ptr_eq(kvp_block_data(p, i), data[i]);
	}
	/* Distinct, non-overlapping ranges. */
	for (i = 0; i < LAYOUT_BLOCKS; i++)
		for (j = i + 1; j < LAYOUT_BLOCKS; j++) {
			uintptr_t a = (uintptr_t)data[i];
			uintptr_t b = (uintptr_t)data[j];

			ck_assert_msg(a + bytes <= b || b + bytes <= a,
				      "data of blocks %u and %u overlap", i, j);
		}
	/* Every byte writable and kept. */
	for (i = 0; i < LAYOUT_BLOCKS; i++)
		memset(data[i], (int)(0x11 * (i + 1)), bytes);
	for (i = 0; i < LAYOUT_BLOCKS; i++)
		ck_assert_msg(all_bytes(data[i], bytes,
					(unsigned char)(0x11 * (i + 1))),
			      "block %u data was changed", i);

	ck_assert_int_eq(kvp_pool_free(p, ids, LAYOUT_BLOCKS), 0);
	finish_pool(p);
}
END_TEST

/* kvp_block_bytes = layers * 2 (K,V) * tokens * heads * dim * dtype size. */
START_TEST(test_create_layout_dtypes)
{
	static const struct {
		enum kvp_dtype dt;
		size_t size;
	} dts[] = {
		{KVP_F32, 4}, {KVP_F16, 2}, {KVP_BF16, 2},
		{KVP_F64, 8}, {KVP_U8, 1},
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(dts); i++) {
		struct kvp_layout lay = {3, 2, 5, dts[i].dt};
		struct kvp_pool_config c = make_cfg(4, 0, 0, &lay);
		struct kvp_pool *p = NULL;
		size_t want = (size_t)3 * 2 * 7 * 2 * 5 * dts[i].size;
		unsigned char *d;

		c.block_tokens = 7;
		ck_assert_int_eq(kvp_pool_create(&c, &p), 0);
		ck_assert_msg(kvp_block_bytes(p) == want,
			      "dtype %d: kvp_block_bytes = %zu, want %zu",
			      (int)dts[i].dt, kvp_block_bytes(p), want);
		d = kvp_block_data(p, 3);
		ck_assert_ptr_nonnull(d);
		memset(d, 0x5A, want);
		ck_assert(all_bytes(d, want, 0x5A));
		finish_pool(p);
	}
}
END_TEST

START_TEST(test_create_layout_invalid)
{
	static const struct kvp_layout bad[] = {
		{0, 4, 8, KVP_F16},
		{2, 0, 8, KVP_F16},
		{2, 4, 0, KVP_F16},
		{2, 4, 8, (enum kvp_dtype)5},
		{2, 4, 8, (enum kvp_dtype)1000},
		{2, 4, 8, (enum kvp_dtype) - 1},
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		struct kvp_pool_config c = make_cfg(8, 0, 0, &bad[i]);
		struct kvp_pool *out = OUT_SENTINEL;
		int rc = kvp_pool_create(&c, &out);

		ck_assert_msg(rc == -EINVAL, "bad layout #%zu: rc = %d (%s)", i,
			      rc, kvp_strerror(rc));
		ck_assert_msg(out == OUT_SENTINEL,
			      "bad layout #%zu: *out was written", i);
	}
}
END_TEST

START_TEST(test_create_layout_overflow)
{
	/* Per-block size far beyond size_t. */
	static const struct kvp_layout huge = {UINT32_MAX, UINT32_MAX,
					       UINT32_MAX, KVP_F64};
	/* Per-block size exactly 2^64: wraps to 0 in size_t arithmetic. */
	static const struct kvp_layout wrap = {1u << 30, 1u << 30, 1, KVP_F64};
	/* 2^62 bytes per block: fits; 8 blocks of it do not. */
	static const struct kvp_layout big = {1u << 29, 1u << 29, 1, KVP_F64};
	struct {
		const char *what;
		const struct kvp_layout *lay;
		uint32_t num_blocks, block_tokens;
	} cases[] = {
		{"huge block", &huge, 4, UINT32_MAX},
		{"block of 2^64 bytes", &wrap, 4, 1},
		{"block of 2^64 bytes (1 block)", &wrap, 1, 1},
		{"8 blocks of 2^62 bytes", &big, 8, 1},
		{"2^31 tokens of 2^62 bytes each", &big, 2, 1u << 31},
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		struct kvp_pool_config c =
			make_cfg(cases[i].num_blocks, 0, 0, cases[i].lay);
		struct kvp_pool *out = OUT_SENTINEL;
		int rc;

		c.block_tokens = cases[i].block_tokens;
		rc = kvp_pool_create(&c, &out);
		ck_assert_msg(rc == -EINVAL, "%s: kvp_pool_create = %d (%s)",
			      cases[i].what, rc, kvp_strerror(rc));
		ck_assert_msg(out == OUT_SENTINEL, "%s: *out was written",
			      cases[i].what);
	}
}
END_TEST

START_TEST(test_pool_zero_single_block)
{
	static const struct kvp_layout lay = {2, 4, 8, KVP_F16};
	struct kvp_pool *p =
		mkpool(1, 0, KVP_POOL_ZERO | KVP_POOL_NOCACHE, &lay);
	size_t bytes = kvp_block_bytes(p);
	unsigned char *d;
	uint32_t id = SENTINEL_ID;
	int round;

	ck_assert_uint_eq(bytes, (size_t)2 * 2 * 16 * 4 * 8 * 2);
	for (round = 0; round < 3; round++) {
		ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
		ck_assert_uint_eq(id, 0);
		d = kvp_block_data(p, id);
		ck_assert_ptr_nonnull(d);
		ck_assert_msg(all_bytes(d, bytes, 0),
			      "round %d: allocated block not zeroed", round);
		memset(d, 0xEE, bytes);
		ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	}
	finish_pool(p);
}
END_TEST

START_TEST(test_pool_zero_cached)
{
	static const struct kvp_layout lay = {1, 2, 16, KVP_F32};
	enum { N = 32 };
	struct kvp_pool *p = mkpool(N, 8, KVP_POOL_ZERO, &lay);
	size_t bytes = kvp_block_bytes(p);
	uint32_t ids[N], i;
	int round;

	ck_assert_uint_eq(bytes, (size_t)1 * 2 * 16 * 2 * 16 * 4);
	for (round = 0; round < 3; round++) {
		/* Allocating all blocks gets every dirtied one back. */
		ck_assert_int_eq(kvp_pool_alloc(p, N, ids), 0);
		assert_ids_ok(ids, N, N);
		for (i = 0; i < N; i++) {
			unsigned char *d = kvp_block_data(p, ids[i]);

			ck_assert_ptr_nonnull(d);
			ck_assert_msg(all_bytes(d, bytes, 0),
				      "round %d: block %u not zeroed", round,
				      ids[i]);
			memset(d, 0xC3, bytes);
		}
		/* Free one at a time so blocks park in the thread cache. */
		free_each(p, ids, N);
	}
	/* Also a single block straight out of the cache. */
	ck_assert_int_eq(kvp_pool_alloc(p, 1, ids), 0);
	ck_assert(all_bytes(kvp_block_data(p, ids[0]), bytes, 0));
	memset(kvp_block_data(p, ids[0]), 0x77, bytes);
	ck_assert_int_eq(kvp_pool_free(p, ids, 1), 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, ids), 0);
	ck_assert(all_bytes(kvp_block_data(p, ids[0]), bytes, 0));
	ck_assert_int_eq(kvp_pool_free(p, ids, 1), 0);
	finish_pool(p);
}
END_TEST

/* Without KVP_POOL_ZERO, data written before a free is seen on the next
 * allocation of that block (kvp_pool_alloc: acquire). */
START_TEST(test_pool_data_kept_without_zero)
{
	static const struct kvp_layout lay = {1, 1, 64, KVP_U8};
	struct kvp_pool *p = mkpool(1, 0, KVP_POOL_NOCACHE, &lay);
	size_t bytes = kvp_block_bytes(p);
	uint32_t id;

	ck_assert_uint_eq(bytes, (size_t)1 * 2 * 16 * 1 * 64);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
	memset(kvp_block_data(p, id), 0x3C, bytes);
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
	ck_assert_uint_eq(id, 0);
	ck_assert(all_bytes(kvp_block_data(p, id), bytes, 0x3C));
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	finish_pool(p);
}
END_TEST

/* ------------------------------------------------------------ ref/unref */

START_TEST(test_pool_ref_unref)
{
	struct kvp_pool *p = mkpool(64, 8, 0, NULL);
	uint32_t ids[64];

	ck_assert_ptr_null(kvp_pool_ref(NULL));
	kvp_pool_unref(NULL); /* ignored */

	ck_assert_ptr_eq(kvp_pool_ref(p), p);
	ck_assert_ptr_eq(kvp_pool_ref(p), p);
	kvp_pool_unref(p);
	kvp_pool_unref(p);

	/* Still the creator's reference: fully usable. */
	ck_assert_int_eq(kvp_pool_alloc(p, 64, ids), 0);
	assert_ids_ok(ids, 64, 64);
	ck_assert_int_eq(kvp_pool_free(p, ids, 64), 0);
	assert_check_ok(p);

	/* Drop the creator's reference while another one is held. */
	ck_assert_ptr_eq(kvp_pool_ref(p), p);
	kvp_pool_unref(p);
	ck_assert_int_eq(kvp_pool_alloc(p, 10, ids), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, 10), 0);
	finish_pool(p);
}
END_TEST

/* ------------------------------------------------------------ alloc */

START_TEST(test_alloc_bad_args)
{
	struct kvp_pool *p = mkvariant(_i, 64);
	struct kvp_pool_stats before, after;
	uint32_t ids[4] = {SENTINEL_ID, SENTINEL_ID, SENTINEL_ID, SENTINEL_ID};
	uint32_t i;

	before = quiet_stats(p);
	ck_assert_int_eq(kvp_pool_alloc(NULL, 1, ids), -EINVAL);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, NULL), -EINVAL);
	ck_assert_int_eq(kvp_pool_alloc(p, 0, ids), -EINVAL);
	ck_assert_int_eq(kvp_pool_alloc(NULL, 0, NULL), -EINVAL);
	for (i = 0; i < 4; i++)
		ck_assert_uint_eq(ids[i], SENTINEL_ID);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);
	ck_assert_uint_eq(after.free, 64);
	finish_pool(p);
}
END_TEST

/* Mixed batch sizes until the pool is empty: ids distinct, < num_blocks,
 * each with exactly one reference. */
START_TEST(test_alloc_distinct)
{
	enum { N = 200 };
	static const uint32_t sizes[] = {1, 3, 16, 7, 1, 40, 2, 64};
	struct kvp_pool *p = mkvariant(_i, N);
	uint32_t ids[N];
	uint32_t got = 0, k = 0;

	while (got < N) {
		uint32_t n = sizes[k++ % ARRAY_SIZE(sizes)];

		if (n > N - got)
			n = N - got;
		ck_assert_int_eq(kvp_pool_alloc(p, n, &ids[got]), 0);
		got += n;
		assert_ids_ok(ids, got, N);
	}
	assert_all_refcount(p, ids, N, 1);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &k), -ENOSPC);
	assert_check_ok(p);
	ck_assert_int_eq(kvp_pool_free(p, ids, N), 0);
	assert_all_refcount(p, ids, N, 0);
	finish_pool(p);
}
END_TEST

START_TEST(test_alloc_exhaust_one_call)
{
	enum { N = 128 };
	struct kvp_pool *p = mkvariant(_i, N);
	uint32_t ids[N + 1], extra = SENTINEL_ID, i;
	struct kvp_pool_stats st;
	int round;

	for (round = 0; round < 3; round++) {
		ck_assert_int_eq(kvp_pool_alloc(p, N, ids), 0);
		assert_ids_ok(ids, N, N);
		st = quiet_stats(p);
		ck_assert_uint_eq(st.used, N);
		ck_assert_uint_eq(st.free, 0);
		ck_assert_int_eq(kvp_pool_alloc(p, 1, &extra), -ENOSPC);
		ck_assert_uint_eq(extra, SENTINEL_ID);
		assert_check_ok(p);
		/* Free in reverse order, one call. */
		for (i = 0; i < N / 2; i++) {
			uint32_t t = ids[i];

			ids[i] = ids[N - 1 - i];
			ids[N - 1 - i] = t;
		}
		ck_assert_int_eq(kvp_pool_free(p, ids, N), 0);
	}
	/* More than the whole pool: never possible. */
	for (i = 0; i <= N; i++)
		ids[i] = SENTINEL_ID;
	ck_assert_int_eq(kvp_pool_alloc(p, N + 1, ids), -ENOSPC);
	for (i = 0; i <= N; i++)
		ck_assert_uint_eq(ids[i], SENTINEL_ID);
	ck_assert_int_eq(kvp_pool_alloc(p, UINT32_MAX, ids), -ENOSPC);
	finish_pool(p);
}
END_TEST

START_TEST(test_alloc_exhaust_one_by_one)
{
	enum { N = 128 };
	struct kvp_pool *p = mkvariant(_i, N);
	uint32_t ids[N], extra, i;
	struct kvp_pool_stats st;
	int round;

	for (round = 0; round < 3; round++) {
		for (i = 0; i < N; i++) {
			int rc = kvp_pool_alloc(p, 1, &ids[i]);

			if (rc)
				ck_abort_msg("round %d: alloc #%u of %u = %d "
					     "(%s)",
					     round, i, N, rc, kvp_strerror(rc));
		}
		assert_ids_ok(ids, N, N);
		extra = SENTINEL_ID;
		ck_assert_int_eq(kvp_pool_alloc(p, 1, &extra), -ENOSPC);
		ck_assert_uint_eq(extra, SENTINEL_ID);
		st = quiet_stats(p);
		ck_assert_uint_eq(st.free, 0);
		ck_assert_uint_eq(st.in_thread_caches, 0);
		assert_check_ok(p);
		free_each(p, ids, N);
		st = quiet_stats(p);
		ck_assert_uint_eq(st.free, N);
	}
	finish_pool(p);
}
END_TEST

START_TEST(test_alloc_all_or_nothing)
{
	enum { N = 64, K = 5 };
	struct kvp_pool *p = mkvariant(_i, N);
	uint32_t ids[N], more[K + 1], i;
	struct kvp_pool_stats before, after;
	uint32_t got = 0;

	/* Phase 1: K blocks left free, taken in small batches. */
	while (got < N - K) {
		uint32_t n = (N - K - got) < 3 ? (N - K - got) : 3;

		ck_assert_int_eq(kvp_pool_alloc(p, n, &ids[got]), 0);
		got += n;
	}
	before = quiet_stats(p);
	ck_assert_uint_eq(before.free, K);
	for (i = 0; i <= K; i++)
		more[i] = SENTINEL_ID;
	ck_assert_int_eq(kvp_pool_alloc(p, K + 1, more), -ENOSPC);
	for (i = 0; i <= K; i++)
		ck_assert_uint_eq(more[i], SENTINEL_ID);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);
	assert_check_ok(p);
	ck_assert_int_eq(kvp_pool_alloc(p, K, more), 0);
	memcpy(&ids[got], more, sizeof(uint32_t) * K);
	got += K;
	assert_ids_ok(ids, N, N);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, more), -ENOSPC);

	/* Phase 2: 10 blocks freed one by one (parked in this thread's cache
	 * where there is one): 11 cannot be had, 10 can. */
	free_each(p, ids, 10);
	before = quiet_stats(p);
	ck_assert_uint_eq(before.free, 10);
	{
		uint32_t eleven[11];

		for (i = 0; i < 11; i++)
			eleven[i] = SENTINEL_ID;
		ck_assert_int_eq(kvp_pool_alloc(p, 11, eleven), -ENOSPC);
		for (i = 0; i < 11; i++)
			ck_assert_uint_eq(eleven[i], SENTINEL_ID);
		after = quiet_stats(p);
		expect_pool_same_peak(&before, &after);
		assert_check_ok(p);
		ck_assert_int_eq(kvp_pool_alloc(p, 10, ids), 0);
	}
	assert_ids_ok(ids, N, N);
	assert_all_refcount(p, ids, N, 1);
	ck_assert_int_eq(kvp_pool_free(p, ids, N), 0);
	finish_pool(p);
}
END_TEST

START_TEST(test_alloc_stats)
{
	enum { N = 256 };
	struct kvp_pool *p = mkvariant(_i, N);
	uint32_t ids[N];
	struct kvp_pool_stats st;

	st = quiet_stats(p);
	ck_assert_uint_eq(st.total, N);
	ck_assert_uint_eq(st.free, N);
	ck_assert_uint_eq(st.allocs, 0);

	ck_assert_int_eq(kvp_pool_alloc(p, 10, ids), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.total, N);
	ck_assert_uint_eq(st.used, 10);
	ck_assert_uint_eq(st.free, N - 10);
	ck_assert_uint_eq(st.allocs, 10);
	ck_assert_uint_eq(st.frees, 0);
	ck_assert_uint_ge(st.peak_used, 10);

	ck_assert_int_eq(kvp_pool_alloc(p, 1, &ids[10]), 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &ids[11]), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 12);
	ck_assert_uint_eq(st.allocs, 12);

	ck_assert_int_eq(kvp_pool_free(p, ids, 4), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 8);
	ck_assert_uint_eq(st.free, N - 8);
	ck_assert_uint_eq(st.allocs, 12);
	ck_assert_uint_eq(st.frees, 4);
	ck_assert_uint_ge(st.peak_used, 12);

	ck_assert_int_eq(kvp_pool_free(p, &ids[4], 8), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.free, N);
	ck_assert_uint_eq(st.frees, 12);
	ck_assert_uint_ge(st.peak_used, 12);
	if (variants[_i].flags & KVP_POOL_NOCACHE)
		ck_assert_uint_eq(st.in_thread_caches, 0);
	else
		ck_assert_uint_le(st.in_thread_caches, st.cache_blocks);
	finish_pool(p);
}
END_TEST

/* ------------------------------------------------------------ free */

START_TEST(test_free_bad_args)
{
	struct kvp_pool *p = mkvariant(_i, 64);
	struct kvp_pool_stats before, after;
	uint32_t id;

	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), 0);
	before = quiet_stats(p);
	ck_assert_int_eq(kvp_pool_free(NULL, &id, 1), -EINVAL);
	ck_assert_int_eq(kvp_pool_free(p, NULL, 1), -EINVAL);
	ck_assert_int_eq(kvp_pool_free(p, &id, 0), -EINVAL);
	ck_assert_int_eq(kvp_block_refcount(p, id), 1);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), 0);
	finish_pool(p);
}
END_TEST

START_TEST(test_free_out_of_range)
{
	enum { N = 64 };
	struct kvp_pool *p = mkvariant(_i, N);
	struct kvp_pool_stats before, after;
	uint32_t a, pair[2];
	const uint32_t bad[] = {N, N + 1, UINT32_MAX, KVP_MAX_BLOCKS};
	size_t i;

	ck_assert_int_eq(kvp_pool_alloc(p, 1, &a), 0);
	before = quiet_stats(p);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_int_eq(kvp_pool_free(p, &bad[i], 1), -ERANGE);
		pair[0] = a;
		pair[1] = bad[i];
		ck_assert_int_eq(kvp_pool_free(p, pair, 2), -ERANGE);
		ck_assert_int_eq(kvp_block_refcount(p, a), 1);
		pair[0] = bad[i];
		pair[1] = a;
		ck_assert_int_eq(kvp_pool_free(p, pair, 2), -ERANGE);
		ck_assert_int_eq(kvp_block_refcount(p, a), 1);
	}
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);
	ck_assert_uint_eq(after.used, 1);
	assert_check_ok(p);
	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 0);
	finish_pool(p);
}
END_TEST

START_TEST(test_free_double)
{
	enum { N = 64 };
	struct kvp_pool *p = mkvariant(_i, N);
	struct kvp_pool_stats before, after;
	uint32_t ids[N], a, i;

	ck_assert_int_eq(kvp_pool_alloc(p, 1, &a), 0);
	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	before = quiet_stats(p);
	ck_assert_int_eq(kvp_pool_free(p, &a, 1), -EALREADY);
	ck_assert_int_eq(kvp_block_refcount(p, a), 0);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);
	assert_check_ok(p);

	/* Blocks never allocated are free too. */
	for (i = 0; i < N; i++)
		ck_assert_int_eq(kvp_pool_free(p, &i, 1), -EALREADY);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);
	assert_check_ok(p);

	/* Double free of a block parked in the global stack (pool
	 * exhausted and refilled in one call, freed in one call). */
	ck_assert_int_eq(kvp_pool_alloc(p, N, ids), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, N), 0);
	for (i = 0; i < N; i++)
		ck_assert_int_eq(kvp_pool_free(p, &ids[i], 1), -EALREADY);
	ck_assert_int_eq(kvp_pool_free(p, ids, N), -EALREADY);
	after = quiet_stats(p);
	ck_assert_uint_eq(after.frees, before.frees + N);
	ck_assert_uint_eq(after.free, N);
	finish_pool(p);
}
END_TEST

START_TEST(test_free_same_id_twice_ref1)
{
	struct kvp_pool *p = mkvariant(_i, 64);
	struct kvp_pool_stats before, after;
	uint32_t a, twice[2], thrice[3];

	ck_assert_int_eq(kvp_pool_alloc(p, 1, &a), 0);
	twice[0] = twice[1] = a;
	before = quiet_stats(p);
	ck_assert_int_eq(kvp_pool_free(p, twice, 2), -EALREADY);
	ck_assert_int_eq(kvp_block_refcount(p, a), 1);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);
	assert_check_ok(p);

	/* Refcount 2, id three times. */
	ck_assert_int_eq(kvp_block_ref(p, a), 0);
	thrice[0] = thrice[1] = thrice[2] = a;
	ck_assert_int_eq(kvp_pool_free(p, thrice, 3), -EALREADY);
	ck_assert_int_eq(kvp_block_refcount(p, a), 2);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);

	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 1);
	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 0);
	finish_pool(p);
}
END_TEST

START_TEST(test_free_same_id_twice_ref2)
{
	struct kvp_pool *p = mkvariant(_i, 64);
	struct kvp_pool_stats before, after;
	uint32_t ab[2], list[3];

	ck_assert_int_eq(kvp_pool_alloc(p, 2, ab), 0);
	ck_assert_int_eq(kvp_block_ref(p, ab[0]), 0);
	ck_assert_int_eq(kvp_block_refcount(p, ab[0]), 2);
	before = quiet_stats(p);
	ck_assert_uint_eq(before.used, 2);

	/* {a, b, a}: a (2 refs) twice, b once: both become free. */
	list[0] = ab[0];
	list[1] = ab[1];
	list[2] = ab[0];
	ck_assert_int_eq(kvp_pool_free(p, list, 3), 0);
	ck_assert_int_eq(kvp_block_refcount(p, ab[0]), 0);
	ck_assert_int_eq(kvp_block_refcount(p, ab[1]), 0);
	after = quiet_stats(p);
	ck_assert_uint_eq(after.used, 0);
	ck_assert_uint_eq(after.free, 64);
	ck_assert_uint_eq(after.frees, before.frees + 2);
	ck_assert_uint_eq(after.allocs, before.allocs);
	ck_assert_int_eq(kvp_pool_free(p, ab, 1), -EALREADY);
	finish_pool(p);
}
END_TEST

START_TEST(test_free_mix_valid_already_free)
{
	struct kvp_pool *p = mkvariant(_i, 64);
	struct kvp_pool_stats before, after;
	uint32_t ab[2], pair[2];

	ck_assert_int_eq(kvp_pool_alloc(p, 2, ab), 0);
	ck_assert_int_eq(kvp_pool_free(p, &ab[1], 1), 0); /* b is free */
	before = quiet_stats(p);

	pair[0] = ab[0];
	pair[1] = ab[1];
	ck_assert_int_eq(kvp_pool_free(p, pair, 2), -EALREADY);
	ck_assert_int_eq(kvp_block_refcount(p, ab[0]), 1);
	pair[0] = ab[1];
	pair[1] = ab[0];
	ck_assert_int_eq(kvp_pool_free(p, pair, 2), -EALREADY);
	ck_assert_int_eq(kvp_block_refcount(p, ab[0]), 1);
	ck_assert_int_eq(kvp_block_refcount(p, ab[1]), 0);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);
	ck_assert_uint_eq(after.used, 1);
	assert_check_ok(p);

	/* a is still held: it can be referenced and freed normally. */
	ck_assert_int_eq(kvp_block_ref(p, ab[0]), 0);
	ck_assert_int_eq(kvp_block_refcount(p, ab[0]), 2);
	pair[0] = pair[1] = ab[0];
	ck_assert_int_eq(kvp_pool_free(p, pair, 2), 0);
	finish_pool(p);
}
END_TEST

/*
 * Every batch size the fast paths treat differently (one block, the
 * eight-block loop and its remainder, more than a cache holds) with a bad
 * id at every position: out of range, already free, the previous id
 * repeated while held once.  Each returns its error and changes nothing;
 * a shared block in the batch just loses one reference.
 */
START_TEST(test_free_bad_id_every_position)
{
	struct kvp_pool *p = mkvariant(_i, 256);
	uint32_t ids[40], bad[40], x;

	for (uint32_t n = 1; n <= 40; n++) {
		for (uint32_t pos = 0; pos < n; pos++) {
			for (int kind = 0; kind < 4; kind++) {
				int want = kind == 0 ? -ERANGE : -EALREADY;
				int rc;

				ck_assert_int_eq(kvp_pool_alloc(p, n, ids), 0);
				memcpy(bad, ids, n * sizeof(*ids));
				if (kind == 0) {
					bad[pos] = 256 + pos;
				} else if (kind == 1) {
					bad[pos] = UINT32_MAX;
					want = -ERANGE;
				} else if (kind == 2) {
					ck_assert_int_eq(kvp_pool_alloc(p, 1, &x),
							 0);
					ck_assert_int_eq(kvp_pool_free(p, &x, 1),
							 0);
					bad[pos] = x;
				} else if (pos > 0) {
					bad[pos] = bad[pos - 1];
				} else {
					/* Shared: a legal batch. */
					ck_assert_int_eq(kvp_block_ref(p, ids[0]),
							 0);
					want = 0;
				}
				rc = kvp_pool_free(p, bad, n);
				ck_assert_msg(rc == want,
					      "n %u, position %u, kind %d: "
					      "free = %d, want %d",
					      n, pos, kind, rc, want);
				if (rc == 0) {
					ck_assert_int_eq(
						kvp_block_refcount(p, ids[0]), 1);
					ck_assert_int_eq(
						kvp_pool_free(p, ids, 1), 0);
					assert_all_refcount(p, ids, n, 0);
				} else {
					assert_all_refcount(p, ids, n, 1);
					ck_assert_int_eq(kvp_pool_free(p, ids, n),
							 0);
				}
			}
		}
		assert_check_ok(p);
	}
	finish_pool(p);
}
END_TEST

/* ------------------------------------------------------------ block ref */

START_TEST(test_block_ref_errors)
{
	enum { N = 32 };
	struct kvp_pool *p = mkvariant(_i, N);
	struct kvp_pool_stats before, after;
	uint32_t a;

	ck_assert_int_eq(kvp_block_ref(NULL, 0), -EINVAL);
	ck_assert_int_eq(kvp_block_refcount(NULL, 0), -EINVAL);
	ck_assert_int_eq(kvp_block_ref(p, N), -ERANGE);
	ck_assert_int_eq(kvp_block_ref(p, UINT32_MAX), -ERANGE);
	ck_assert_int_eq(kvp_block_refcount(p, N), -ERANGE);
	ck_assert_int_eq(kvp_block_refcount(p, UINT32_MAX), -ERANGE);

	/* Free blocks: refcount 0, cannot be referenced. */
	ck_assert_int_eq(kvp_block_refcount(p, 0), 0);
	ck_assert_int_eq(kvp_block_refcount(p, N - 1), 0);
	before = quiet_stats(p);
	ck_assert_int_eq(kvp_block_ref(p, 0), -EALREADY);
	ck_assert_int_eq(kvp_block_ref(p, N - 1), -EALREADY);
	ck_assert_int_eq(kvp_block_refcount(p, 0), 0);
	after = quiet_stats(p);
	expect_pool_same_peak(&before, &after);

	/* A freed block. */
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &a), 0);
	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_ref(p, a), -EALREADY);
	ck_assert_int_eq(kvp_block_refcount(p, a), 0);
	assert_check_ok(p);
	finish_pool(p);
}
END_TEST

START_TEST(test_block_ref_counting)
{
	enum { N = 32 };
	struct kvp_pool *p = mkvariant(_i, N);
	struct kvp_pool_stats st;
	uint32_t a;

	ck_assert_int_eq(kvp_pool_alloc(p, 1, &a), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 1);
	ck_assert_int_eq(kvp_block_ref(p, a), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 2);
	ck_assert_int_eq(kvp_block_ref(p, a), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 3);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 1);
	ck_assert_uint_eq(st.free, N - 1);
	ck_assert_uint_eq(st.allocs, 1);
	assert_check_ok(p);

	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 2);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.free, N - 1);
	ck_assert_uint_eq(st.frees, 0);

	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 1);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.free, N - 1);
	ck_assert_uint_eq(st.frees, 0);
	assert_check_ok(p);

	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.free, N);
	ck_assert_uint_eq(st.frees, 1);
	ck_assert_uint_eq(st.allocs, 1);

	ck_assert_int_eq(kvp_pool_free(p, &a, 1), -EALREADY);
	finish_pool(p);
}
END_TEST

START_TEST(test_block_ref_overflow)
{
	struct kvp_pool *p = mkpool(4, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_pool_stats st;
	uint32_t a, r;
	int rc;

	ck_assert_int_eq(kvp_pool_alloc(p, 1, &a), 0);
	for (r = 1; r < KVP_MAX_REFS; r++) {
		rc = kvp_block_ref(p, a);
		if (rc)
			ck_abort_msg("kvp_block_ref #%u = %d (%s)", r, rc,
				     kvp_strerror(rc));
	}
	ck_assert_int_eq(kvp_block_refcount(p, a), (int)KVP_MAX_REFS);
	ck_assert_int_eq(kvp_block_ref(p, a), -EOVERFLOW);
	ck_assert_int_eq(kvp_block_refcount(p, a), (int)KVP_MAX_REFS);
	assert_check_ok(p);

	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), (int)KVP_MAX_REFS - 1);
	ck_assert_int_eq(kvp_block_ref(p, a), 0);
	ck_assert_int_eq(kvp_block_ref(p, a), -EOVERFLOW);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 1);

	for (r = 0; r < KVP_MAX_REFS - 1; r++) {
		rc = kvp_pool_free(p, &a, 1);
		if (rc)
			ck_abort_msg("free #%u = %d (%s)", r, rc,
				     kvp_strerror(rc));
	}
	ck_assert_int_eq(kvp_block_refcount(p, a), 1);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 1);
	ck_assert_uint_eq(st.frees, 0);
	ck_assert_int_eq(kvp_pool_free(p, &a, 1), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a), 0);
	finish_pool(p);
}
END_TEST

/* ------------------------------------------------------------ stats */

START_TEST(test_stats_null_args)
{
	struct kvp_pool *p = mkpool(16, 0, 0, NULL);
	struct kvp_pool_stats st, copy;

	memset(&st, 0x5C, sizeof(st));
	memcpy(&copy, &st, sizeof(st));
	kvp_pool_stats(NULL, &st);
	ck_assert_int_eq(memcmp(&st, &copy, sizeof(st)), 0);
	kvp_pool_stats(p, NULL);    /* ignored */
	kvp_pool_stats(NULL, NULL); /* ignored */
	finish_pool(p);
}
END_TEST

START_TEST(test_stats_cache_explicit)
{
	static const uint32_t caches[] = {2, 16, 32, 100, 1024};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(caches); i++) {
		struct kvp_pool *p = mkpool(1024, caches[i], 0, NULL);
		struct kvp_pool_stats st = quiet_stats(p);

		ck_assert_msg(st.cache_blocks == caches[i],
			      "cache_blocks %u configured, %u in effect",
			      caches[i], st.cache_blocks);
		finish_pool(p);
	}
}
END_TEST

static uint32_t max_cpus(void)
{
	long a = sysconf(_SC_NPROCESSORS_ONLN);
	long b = sysconf(_SC_NPROCESSORS_CONF);
	long m = a > b ? a : b;
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > m)
		m = CPU_COUNT(&set);
	return m < 1 ? 1 : (uint32_t)m;
}

START_TEST(test_stats_cache_auto)
{
	static const uint32_t sizes[] = {1,   2,    10,	  15,	16,
					 100, 1000, 4096, 65536};
	struct kvp_pool *p;
	struct kvp_pool_stats st;
	uint32_t big;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		p = mkpool(sizes[i], 0, 0, NULL);
		st = quiet_stats(p);
		ck_assert_msg(st.cache_blocks <= 128,
			      "%u blocks: automatic cache %u > 128", sizes[i],
			      st.cache_blocks);
		ck_assert_msg(st.cache_blocks % 2 == 0,
			      "%u blocks: automatic cache %u is odd", sizes[i],
			      st.cache_blocks);
		ck_assert_msg(st.cache_blocks <= sizes[i] / 8,
			      "%u blocks: automatic cache %u > num_blocks/8",
			      sizes[i], st.cache_blocks);
		finish_pool(p);
	}

	/* A 10-block pool gets no cache at all. */
	p = mkpool(10, 0, 0, NULL);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.cache_blocks, 0);
	finish_pool(p);

	/* A pool large enough for any CPU count gets the maximum, 128. */
	big = 8 * 128 * max_cpus();
	p = mkpool(big, 0, 0, NULL);
	st = quiet_stats(p);
	ck_assert_msg(st.cache_blocks == 128,
		      "%u blocks: automatic cache %u, want 128", big,
		      st.cache_blocks);
	finish_pool(p);
}
END_TEST

struct nocache_arg {
	struct kvp_pool *p;
	struct errbuf err;
};

static void *nocache_thread(void *arg)
{
	struct nocache_arg *a = arg;
	struct kvp_pool_stats st;

	if (park_blocks(a->p, 20, &a->err) == 0) {
		kvp_pool_stats(a->p, &st);
		if (st.in_thread_caches != 0)
			wfail(&a->err, "NOCACHE: in_thread_caches = %llu",
			      (unsigned long long)st.in_thread_caches);
	}
	return NULL;
}

START_TEST(test_stats_nocache)
{
	enum { N = 1024 };
	struct kvp_pool *p = mkpool(N, 0, KVP_POOL_NOCACHE, NULL);
	struct nocache_arg a;
	struct kvp_pool_stats st;
	struct errbuf e;
	uint32_t ids[64];
	pthread_t t;

	memset(&e, 0, sizeof(e));
	ck_assert_int_eq(park_blocks(p, 50, &e), 0);
	ck_assert_msg(e.msg[0] == 0, "%s", e.msg);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.free, N);

	ck_assert_int_eq(kvp_pool_alloc(p, 64, ids), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, 64), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.in_thread_caches, 0);

	memset(&a, 0, sizeof(a));
	a.p = p;
	ck_assert_int_eq(pthread_create(&t, NULL, nocache_thread, &a), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_msg(a.err.msg[0] == 0, "%s", a.err.msg);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.allocs, 50 + 64 + 20);
	ck_assert_uint_eq(st.frees, 50 + 64 + 20);
	finish_pool(p);
}
END_TEST

START_TEST(test_stats_peak)
{
	enum { N = 256 };
	struct kvp_pool *p;
	struct kvp_pool_stats st;
	uint32_t ids[N];

	/* Cached pool: peak covers every used value stats has seen. */
	p = mkpool(N, 16, 0, NULL);
	ck_assert_int_eq(kvp_pool_alloc(p, 20, ids), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 20);
	ck_assert_uint_ge(st.peak_used, 20);
	ck_assert_int_eq(kvp_pool_alloc(p, 30, &ids[20]), 0);
	st = quiet_stats(p);
	ck_assert_uint_ge(st.peak_used, 50);
	ck_assert_int_eq(kvp_pool_free(p, ids, 50), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_ge(st.peak_used, 50);
	ck_assert_int_eq(kvp_pool_alloc(p, 5, ids), 0);
	st = quiet_stats(p);
	ck_assert_uint_ge(st.peak_used, 50);
	ck_assert_int_eq(kvp_pool_free(p, ids, 5), 0);
	/* kvp_pool_check observes used too: exhaust, check, free. */
	ck_assert_int_eq(kvp_pool_alloc(p, N, ids), 0);
	assert_check_ok(p);
	ck_assert_int_eq(kvp_pool_free(p, ids, N), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.peak_used, N);
	finish_pool(p);

	/* NOCACHE pool: every allocation observes used, no stats call
	 * needed in between. */
	p = mkpool(N, 0, KVP_POOL_NOCACHE, NULL);
	ck_assert_int_eq(kvp_pool_alloc(p, 40, ids), 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &ids[40]), 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, 41), 0);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.peak_used, 41);
	finish_pool(p);
}
END_TEST

/* ------------------------------------------------------------ check */

START_TEST(test_check_null)
{
	ck_assert_int_eq(kvp_pool_check(NULL), -EINVAL);
}
END_TEST

START_TEST(test_check_states)
{
	enum { N = 100 };
	struct kvp_pool *p = mkvariant(_i, N);
	uint32_t ids[N];

	assert_check_ok(p); /* fresh */
	ck_assert_int_eq(kvp_pool_alloc(p, 37, ids), 0);
	assert_check_ok(p); /* partly used */
	ck_assert_int_eq(kvp_block_ref(p, ids[3]), 0);
	assert_check_ok(p); /* shared block */
	ck_assert_int_eq(kvp_pool_alloc(p, N - 37, &ids[37]), 0);
	assert_check_ok(p); /* exhausted */
	free_each(p, &ids[50], N - 50);
	assert_check_ok(p); /* parked */
	ck_assert_int_eq(kvp_pool_free(p, ids, 50), 0);
	assert_check_ok(p);
	ck_assert_int_eq(kvp_pool_free(p, &ids[3], 1), 0);
	kvp_thread_flush();
	assert_check_ok(p); /* flushed */
	finish_pool(p);
}
END_TEST

/* ------------------------------------------------------------ threads */

struct exit_arg {
	struct kvp_pool *p;
	pthread_barrier_t *bar;
	uint32_t count;
	struct errbuf err;
};

static void *exit_thread(void *arg)
{
	struct exit_arg *a = arg;

	park_blocks(a->p, a->count, &a->err);
	pthread_barrier_wait(a->bar); /* blocks parked */
	pthread_barrier_wait(a->bar); /* main has looked */
	return NULL;
}

START_TEST(test_thread_exit_returns_cache)
{
	enum { N = 1024 };
	struct kvp_pool *p = mkpool(N, 16, 0, NULL);
	pthread_barrier_t bar;
	struct exit_arg a;
	struct kvp_pool_stats st;
	pthread_t t;

	ck_assert_int_eq(pthread_barrier_init(&bar, NULL, 2), 0);
	memset(&a, 0, sizeof(a));
	a.p = p;
	a.bar = &bar;
	a.count = 24;
	ck_assert_int_eq(pthread_create(&t, NULL, exit_thread, &a), 0);
	pthread_barrier_wait(&bar);
	ck_assert_msg(a.err.msg[0] == 0, "%s", a.err.msg);
	st = quiet_stats(p); /* the thread is blocked: quiescent */
	ck_assert_uint_gt(st.in_thread_caches, 0);
	ck_assert_uint_le(st.in_thread_caches, 16);
	ck_assert_uint_ge(st.threads, 1);
	ck_assert_uint_eq(st.free, N);
	assert_check_ok(p);
	pthread_barrier_wait(&bar);
	ck_assert_int_eq(pthread_join(t, NULL), 0);

	st = quiet_stats(p);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.free, st.total);
	ck_assert_uint_eq(st.allocs, 24);
	ck_assert_uint_eq(st.frees, 24);
	pthread_barrier_destroy(&bar);
	finish_pool(p);
}
END_TEST

START_TEST(test_thread_flush)
{
	enum { N = 1024 };
	struct kvp_pool *p = mkpool(N, 16, 0, NULL);
	struct kvp_pool *q = mkpool(N, 16, 0, NULL);
	struct kvp_pool_stats st;
	struct errbuf e;

	/* Harmless with nothing cached. */
	kvp_thread_flush();
	kvp_thread_flush();

	memset(&e, 0, sizeof(e));
	park_blocks(p, 12, &e);
	ck_assert_msg(e.msg[0] == 0, "%s", e.msg);
	st = quiet_stats(p);
	ck_assert_uint_gt(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.free, N);

	kvp_thread_flush();
	st = quiet_stats(p);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.free, st.total);
	assert_check_ok(p);

	/* Flush covers every pool the thread has a cache for. */
	park_blocks(p, 12, &e);
	park_blocks(q, 12, &e);
	ck_assert_msg(e.msg[0] == 0, "%s", e.msg);
	ck_assert_uint_gt(quiet_stats(p).in_thread_caches, 0);
	ck_assert_uint_gt(quiet_stats(q).in_thread_caches, 0);
	kvp_thread_flush();
	st = quiet_stats(p);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.free, N);
	st = quiet_stats(q);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.free, N);

	/* The cache is usable again after a flush. */
	park_blocks(p, 12, &e);
	ck_assert_msg(e.msg[0] == 0, "%s", e.msg);
	ck_assert_uint_gt(quiet_stats(p).in_thread_caches, 0);
	finish_pool(q);
	finish_pool(p);
}
END_TEST

/*
 * No false exhaustion: a live thread's parked blocks are drained by
 * allocations from another thread.
 */
struct nfe_arg {
	struct kvp_pool *p;
	pthread_barrier_t *bar;
	struct errbuf err;
};

static void *nfe_thread(void *arg)
{
	struct nfe_arg *a = arg;

	park_blocks(a->p, 48, &a->err);
	pthread_barrier_wait(a->bar); /* 1: parked */
	pthread_barrier_wait(a->bar); /* 2: main allocated all in one call */
	park_blocks(a->p, 48, &a->err);
	pthread_barrier_wait(a->bar); /* 3: parked again */
	pthread_barrier_wait(a->bar); /* 4: main allocated one by one */
	return NULL;
}

START_TEST(test_no_false_exhaustion)
{
	enum { N = 256 };
	struct kvp_pool *p = mkpool(N, 32, 0, NULL);
	pthread_barrier_t bar;
	struct nfe_arg a;
	struct kvp_pool_stats st;
	uint32_t ids[N], i;
	pthread_t t;
	int rc;

	ck_assert_int_eq(pthread_barrier_init(&bar, NULL, 2), 0);
	memset(&a, 0, sizeof(a));
	a.p = p;
	a.bar = &bar;
	ck_assert_int_eq(pthread_create(&t, NULL, nfe_thread, &a), 0);

	pthread_barrier_wait(&bar); /* 1 */
	ck_assert_msg(a.err.msg[0] == 0, "%s", a.err.msg);
	st = quiet_stats(p);
	ck_assert_uint_gt(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.free, N);
	rc = kvp_pool_alloc(p, N, ids);
	ck_assert_msg(rc == 0,
		      "alloc(%u) with %llu blocks parked in a live "
		      "thread = %d (%s)",
		      N, (unsigned long long)st.in_thread_caches, rc,
		      kvp_strerror(rc));
	assert_ids_ok(ids, N, N);
	st = quiet_stats(p);
	ck_assert_uint_eq(st.used, N);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, N), 0);
	kvp_thread_flush();
	pthread_barrier_wait(&bar); /* 2 */

	pthread_barrier_wait(&bar); /* 3 */
	ck_assert_msg(a.err.msg[0] == 0, "%s", a.err.msg);
	st = quiet_stats(p);
	ck_assert_uint_gt(st.in_thread_caches, 0);
	for (i = 0; i < N; i++) {
		rc = kvp_pool_alloc(p, 1, &ids[i]);
		if (rc)
			ck_abort_msg("alloc #%u of %u one at a time with "
				     "%llu blocks parked = %d (%s)",
				     i, N,
				     (unsigned long long)st.in_thread_caches,
				     rc, kvp_strerror(rc));
	}
	assert_ids_ok(ids, N, N);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &i), -ENOSPC);
	free_each(p, ids, N);
	assert_check_ok(p);
	pthread_barrier_wait(&bar); /* 4 */
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_msg(a.err.msg[0] == 0, "%s", a.err.msg);
	pthread_barrier_destroy(&bar);
	finish_pool(p);
}
END_TEST

/*
 * A pool destroyed while a live thread has blocks of it parked; a new pool
 * (perhaps at the same address) must never see those stale ids.  Thread A
 * parks blocks in pool k; the main thread destroys pool k and creates pool
 * k + 1 with a different num_blocks; A then exhausts pool k + 1 (ids below
 * its num_blocks, distinct, exactly num_blocks of them) and parks blocks in
 * it; and so on.  Sizes alternate below and above the previous pool's, so
 * stale ids are out of range for some pools and would be duplicates in
 * others.  Whether a pool lands at a destroyed one's address depends on
 * the allocator; many rounds make it likely.
 */
#define DESTROY_ROUNDS 24
#define DESTROY_PARK 36 /* below every pool size used */

struct destroy_arg {
	struct kvp_pool *pool; /* the current pool, set by main */
	uint32_t blocks;       /* its num_blocks */
	pthread_barrier_t *bar;
	struct errbuf err;
};

/* Exhausts a fresh pool from a thread with stale caches of older ones. */
static void destroy_verify(struct destroy_arg *a, int round)
{
	uint32_t *ids = calloc(a->blocks + 1, sizeof(*ids));
	uint32_t n = 0, i;
	char buf[128];
	const char *msg;
	int rc;

	if (!ids) {
		wfail(&a->err, "calloc");
		return;
	}
	for (;;) {
		rc = kvp_pool_alloc(a->pool, 1, &ids[n]);
		if (rc)
			break;
		if (ids[n] >= a->blocks) {
			wfail(&a->err,
			      "round %d: pool gave id %u, not below "
			      "%u",
			      round, ids[n], a->blocks);
			goto out;
		}
		if (++n > a->blocks) {
			wfail(&a->err,
			      "round %d: pool gave more than %u "
			      "blocks",
			      round, a->blocks);
			goto out;
		}
	}
	if (rc != -ENOSPC)
		wfail(&a->err, "round %d: alloc after %u = %d (%s)", round, n,
		      rc, kvp_strerror(rc));
	if (n != a->blocks)
		wfail(&a->err, "round %d: pool gave %u blocks, has %u", round,
		      n, a->blocks);
	msg = ids_problem(ids, n, a->blocks, buf, sizeof(buf));
	if (msg)
		wfail(&a->err, "round %d: %s", round, msg);
	if (a->err.msg[0])
		goto out;
	for (i = 0; i < n; i++) {
		rc = kvp_pool_free(a->pool, &ids[i], 1);
		if (rc) {
			wfail(&a->err, "round %d: free(%u) = %d (%s)", round,
			      ids[i], rc, kvp_strerror(rc));
			goto out;
		}
	}
	/* Now the whole pool in one call. */
	rc = kvp_pool_alloc(a->pool, a->blocks, ids);
	if (rc) {
		wfail(&a->err, "round %d: alloc(%u) = %d (%s)", round,
		      a->blocks, rc, kvp_strerror(rc));
		goto out;
	}
	msg = ids_problem(ids, a->blocks, a->blocks, buf, sizeof(buf));
	if (msg)
		wfail(&a->err, "round %d (one call): %s", round, msg);
	rc = kvp_pool_free(a->pool, ids, a->blocks);
	if (rc)
		wfail(&a->err, "round %d: free(%u) = %d (%s)", round, a->blocks,
		      rc, kvp_strerror(rc));
out:
	free(ids);
}

static void *destroy_thread(void *arg)
{
	struct destroy_arg *a = arg;
	int round;

	for (round = 0; round < DESTROY_ROUNDS; round++) {
		pthread_barrier_wait(a->bar); /* 1: a->pool is new */
		if (!a->err.msg[0]) {
			if (round > 0)
				destroy_verify(a, round);
			park_blocks(a->pool, DESTROY_PARK, &a->err);
		}
		pthread_barrier_wait(a->bar); /* 2: blocks parked */
	}
	pthread_barrier_wait(a->bar); /* 3: may exit */
	return NULL;
}

START_TEST(test_destroy_with_parked_cache)
{
	static const uint32_t sizes[] = {1024, 40, 2000, 100, 3000, 64};
	pthread_barrier_t bar;
	struct destroy_arg a;
	struct kvp_pool_stats st;
	struct kvp_pool *old;
	uint64_t allocs_before;
	int round, same_address = 0;
	pthread_t t;

	ck_assert_int_eq(pthread_barrier_init(&bar, NULL, 2), 0);
	memset(&a, 0, sizeof(a));
	a.bar = &bar;
	a.blocks = sizes[0];
	a.pool = mkpool(a.blocks, 32, 0, NULL);
	ck_assert_int_eq(pthread_create(&t, NULL, destroy_thread, &a), 0);

	for (round = 0; round < DESTROY_ROUNDS; round++) {
		pthread_barrier_wait(&bar); /* 1 */
		pthread_barrier_wait(&bar); /* 2 */
		ck_assert_msg(a.err.msg[0] == 0, "%s (same address %d times)",
			      a.err.msg, same_address);
		st = quiet_stats(a.pool);
		ck_assert_uint_eq(st.total, a.blocks);
		ck_assert_uint_eq(st.free, a.blocks);
		ck_assert_uint_gt(st.in_thread_caches, 0);
		allocs_before = round ? 2 * (uint64_t)a.blocks : 0;
		ck_assert_uint_eq(st.allocs, allocs_before + DESTROY_PARK);
		assert_check_ok(a.pool);
		if (round == DESTROY_ROUNDS - 1)
			break;
		old = a.pool;
		kvp_pool_unref(old); /* destroys it, blocks parked in A */
		a.blocks = sizes[(round + 1) % ARRAY_SIZE(sizes)];
		a.pool = mkpool(a.blocks, a.blocks < 64 ? 8 : 32, 0, NULL);
		if (a.pool == old)
			same_address++;
	}
	pthread_barrier_wait(&bar); /* 3 */
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	st = quiet_stats(a.pool);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	pthread_barrier_destroy(&bar);
	finish_pool(a.pool);
}
END_TEST

/*
 * Multi-threaded smoke: random batches, ownership tracked per block.
 *
 * The threads share a budget of MT_BLOCKS blocks: a thread reserves n
 * before kvp_pool_alloc(n) and gives blocks back only after kvp_pool_free
 * returns.  So at every moment at least n blocks are free for a caller
 * holding a reservation of n, and -ENOSPC would be false exhaustion.  The
 * threads allocate more often than they free, so the pool stays close to
 * exhaustion and allocations must drain other threads' caches.
 */
#define MT_THREADS 4
#define MT_BLOCKS 256
#define MT_MAX_HELD 128 /* blocks one thread holds at most */
#define MT_ITERS 4000

struct mt_shared {
	struct kvp_pool *p;
	pthread_barrier_t start;      /* all threads run at once */
	_Atomic uint32_t reserved;    /* blocks held or being allocated */
	_Atomic int owner[MT_BLOCKS]; /* 0 = nobody, else thread + 1 */
};

struct mt_arg {
	struct mt_shared *sh;
	int tid;
	uint64_t allocated;
	uint64_t shares;
	struct errbuf err;
};

static bool mt_reserve(struct mt_shared *sh, uint32_t n)
{
	uint32_t r = atomic_load(&sh->reserved);

	do {
		if (r + n > MT_BLOCKS)
			return false;
	} while (!atomic_compare_exchange_weak(&sh->reserved, &r, r + n));
	return true;
}

static int mt_release(struct mt_arg *a, uint32_t *held, uint32_t *nheld,
		      uint32_t k, unsigned *seed)
{
	struct mt_shared *sh = a->sh;
	size_t bytes = kvp_block_bytes(sh->p);
	uint32_t out[MT_MAX_HELD];
	uint32_t i;
	int rc;

	for (i = 0; i < k; i++) {
		uint32_t j = (uint32_t)rand_r(seed) % *nheld;
		uint32_t id = held[j];
		unsigned char *d = kvp_block_data(sh->p, id);

		held[j] = held[--*nheld];
		if (!d || !all_bytes(d, bytes, (unsigned char)(a->tid + 1))) {
			wfail(&a->err,
			      "thread %d: data of block %u changed "
			      "while held",
			      a->tid, id);
			return -1;
		}
		atomic_store(&sh->owner[id], 0);
		out[i] = id;
	}
	rc = kvp_pool_free(sh->p, out, k);
	if (rc) {
		wfail(&a->err, "thread %d: free(%u) = %d (%s)", a->tid, k, rc,
		      kvp_strerror(rc));
		return -1;
	}
	atomic_fetch_sub(&sh->reserved, k);
	return 0;
}

static int mt_take(struct mt_arg *a, uint32_t *held, uint32_t *nheld,
		   uint32_t n, unsigned r)
{
	struct mt_shared *sh = a->sh;
	size_t bytes = kvp_block_bytes(sh->p);
	uint32_t got[16], i;
	int rc = kvp_pool_alloc(sh->p, n, got);

	if (rc) {
		wfail(&a->err,
		      "thread %d: alloc(%u) with %u blocks reserved "
		      "by all threads = %d (%s)",
		      a->tid, n, atomic_load(&sh->reserved), rc,
		      kvp_strerror(rc));
		return -1;
	}
	a->allocated += n;
	for (i = 0; i < n; i++) {
		int expect = 0;
		unsigned char *d;

		if (got[i] >= MT_BLOCKS) {
			wfail(&a->err, "id %u out of range", got[i]);
			return -1;
		}
		if (!atomic_compare_exchange_strong(&sh->owner[got[i]], &expect,
						    a->tid + 1)) {
			wfail(&a->err,
			      "thread %d got block %u held by "
			      "thread %d",
			      a->tid, got[i], expect - 1);
			return -1;
		}
		d = kvp_block_data(sh->p, got[i]);
		if (!d) {
			wfail(&a->err, "no data for block %u", got[i]);
			return -1;
		}
		memset(d, a->tid + 1, bytes);
		held[(*nheld)++] = got[i];
	}
	if ((r & 0x70) == 0) {
		/* Share a block briefly: 3 references, drop 2 at once. */
		uint32_t id = held[(r >> 8) % *nheld];
		uint32_t two[2] = {id, id};

		a->shares++;
		if (kvp_block_ref(sh->p, id) != 0 ||
		    kvp_block_ref(sh->p, id) != 0 ||
		    kvp_block_refcount(sh->p, id) != 3 ||
		    kvp_pool_free(sh->p, two, 2) != 0 ||
		    kvp_block_refcount(sh->p, id) != 1) {
			wfail(&a->err, "thread %d: ref/free of held block %u",
			      a->tid, id);
			return -1;
		}
	}
	return 0;
}

static void *mt_thread(void *arg)
{
	struct mt_arg *a = arg;
	struct mt_shared *sh = a->sh;
	uint32_t held[MT_MAX_HELD], nheld = 0;
	unsigned seed = 0x9E3779B9u * (unsigned)(a->tid + 1);
	int it;

	pthread_barrier_wait(&sh->start);
	for (it = 0; it < MT_ITERS; it++) {
		unsigned r = (unsigned)rand_r(&seed);
		uint32_t n = 1 + (r >> 1) % 16;

		if (n > MT_MAX_HELD - nheld)
			n = MT_MAX_HELD - nheld;
		/* Allocate two times in three, when the budget allows. */
		if (n && (nheld == 0 || r % 3 != 0) && mt_reserve(sh, n)) {
			if (mt_take(a, held, &nheld, n, r)) {
				atomic_fetch_sub(&sh->reserved, n);
				break;
			}
		} else if (nheld) {
			uint32_t k = 1 + (r >> 5) % (nheld < 16 ? nheld : 16);

			if (mt_release(a, held, &nheld, k, &seed))
				break;
		}
		if ((it & 255) == 0) {
			struct kvp_pool_stats st;

			kvp_pool_stats(sh->p, &st);
			if (st.total != MT_BLOCKS || st.free > MT_BLOCKS ||
			    st.in_thread_caches > MT_BLOCKS) {
				wfail(&a->err,
				      "thread %d: stats total %llu "
				      "free %llu parked %llu",
				      a->tid, (unsigned long long)st.total,
				      (unsigned long long)st.free,
				      (unsigned long long)st.in_thread_caches);
				break;
			}
		}
	}
	if (nheld && !a->err.msg[0])
		mt_release(a, held, &nheld, nheld, &seed);
	return NULL;
}

START_TEST(test_mt_smoke)
{
	static const struct kvp_layout lay = {1, 1, 8, KVP_U8};
	struct mt_shared *sh = calloc(1, sizeof(*sh));
	struct mt_arg args[MT_THREADS];
	pthread_t t[MT_THREADS];
	struct kvp_pool_stats st;
	uint64_t total_allocated = 0;
	int i;

	ck_assert_ptr_nonnull(sh);
	/* _i == 0: explicit cache 16; 1: automatic; 2: no cache. */
	sh->p = mkpool(MT_BLOCKS, variants[_i].cache_blocks, variants[_i].flags,
		       &lay);
	ck_assert_uint_eq(kvp_block_bytes(sh->p), 2 * 16 * 8);
	ck_assert_int_eq(pthread_barrier_init(&sh->start, NULL, MT_THREADS), 0);
	memset(args, 0, sizeof(args));
	for (i = 0; i < MT_THREADS; i++) {
		args[i].sh = sh;
		args[i].tid = i;
		ck_assert_int_eq(
			pthread_create(&t[i], NULL, mt_thread, &args[i]), 0);
	}
	for (i = 0; i < MT_THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	for (i = 0; i < MT_THREADS; i++) {
		ck_assert_msg(args[i].err.msg[0] == 0, "%s", args[i].err.msg);
		total_allocated += args[i].allocated;
	}
	ck_assert_uint_eq(atomic_load(&sh->reserved), 0);
	for (i = 0; i < MT_BLOCKS; i++)
		ck_assert_int_eq(atomic_load(&sh->owner[i]), 0);

	st = quiet_stats(sh->p);
	ck_assert_uint_eq(st.free, st.total);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.in_thread_caches, 0);
	ck_assert_uint_eq(st.allocs, total_allocated);
	ck_assert_uint_eq(st.frees, total_allocated);
	ck_assert_uint_gt(st.peak_used, 0);
	finish_pool(sh->p);
	pthread_barrier_destroy(&sh->start);
	free(sh);
}
END_TEST

/* ------------------------------------------------------------ suite */

static Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc;

	tc = tcase_create("strerror");
	tcase_add_test(tc, test_strerror_known);
	tcase_add_test(tc, test_strerror_unknown);
	suite_add_tcase(s, tc);

	tc = tcase_create("create");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_create_null_args);
	tcase_add_test(tc, test_create_bad_config);
	tcase_add_test(tc, test_create_limits_ok);
	tcase_add_test(tc, test_create_idonly);
	tcase_add_test(tc, test_create_layout);
	tcase_add_test(tc, test_create_layout_dtypes);
	tcase_add_test(tc, test_create_layout_invalid);
	tcase_add_test(tc, test_create_layout_overflow);
	tcase_add_test(tc, test_pool_zero_single_block);
	tcase_add_test(tc, test_pool_zero_cached);
	tcase_add_test(tc, test_pool_data_kept_without_zero);
	suite_add_tcase(s, tc);

	tc = tcase_create("ref");
	tcase_add_test(tc, test_pool_ref_unref);
	suite_add_tcase(s, tc);

	tc = tcase_create("alloc");
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, test_alloc_bad_args, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_alloc_distinct, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_alloc_exhaust_one_call, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_alloc_exhaust_one_by_one, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_alloc_all_or_nothing, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_alloc_stats, 0, NVARIANTS);
	suite_add_tcase(s, tc);

	tc = tcase_create("free");
	tcase_add_loop_test(tc, test_free_bad_args, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_free_out_of_range, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_free_double, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_free_same_id_twice_ref1, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_free_same_id_twice_ref2, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_free_mix_valid_already_free, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_free_bad_id_every_position, 0, NVARIANTS);
	suite_add_tcase(s, tc);

	tc = tcase_create("block_ref");
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, test_block_ref_errors, 0, NVARIANTS);
	tcase_add_loop_test(tc, test_block_ref_counting, 0, NVARIANTS);
	tcase_add_test(tc, test_block_ref_overflow);
	suite_add_tcase(s, tc);

	tc = tcase_create("stats");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_stats_null_args);
	tcase_add_test(tc, test_stats_cache_explicit);
	tcase_add_test(tc, test_stats_cache_auto);
	tcase_add_test(tc, test_stats_nocache);
	tcase_add_test(tc, test_stats_peak);
	suite_add_tcase(s, tc);

	tc = tcase_create("check");
	tcase_add_test(tc, test_check_null);
	tcase_add_loop_test(tc, test_check_states, 0, NVARIANTS);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_thread_exit_returns_cache);
	tcase_add_test(tc, test_thread_flush);
	tcase_add_test(tc, test_no_false_exhaustion);
	tcase_add_test(tc, test_destroy_with_parked_cache);
	tcase_add_loop_test(tc, test_mt_smoke, 0, NVARIANTS);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return run_suite(pool_suite());
}
