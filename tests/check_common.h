/* SPDX-License-Identifier: MIT */
/*
 * check_common.h - helpers shared by the Check unit tests (check_pool,
 * check_manager, check_data, check_errors).  Helpers named *_ok and
 * expect_* are macros over *_at(..., __LINE__) functions, so a failure
 * names the line of the test that called them.
 */
#ifndef KVP_CHECK_COMMON_H
#define KVP_CHECK_COMMON_H

#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ULL(x) ((unsigned long long)(x))

/* Tokens per block of the pools make_cfg() describes. */
#define CHECK_BLOCK_TOKENS 16u

/* A pool config on the host (device_id -1), CHECK_BLOCK_TOKENS tokens per
 * block. */
static inline struct kvp_pool_config make_cfg(uint32_t num_blocks,
					      uint32_t cache_blocks,
					      uint32_t flags,
					      const struct kvp_layout *layout)
{
	struct kvp_pool_config c;

	memset(&c, 0, sizeof(c));
	c.num_blocks = num_blocks;
	c.block_tokens = CHECK_BLOCK_TOKENS;
	c.cache_blocks = cache_blocks;
	c.device_id = -1;
	c.layout = layout;
	c.flags = flags;
	return c;
}

/* Creates the pool make_cfg() describes; the test fails if it cannot. */
static inline struct kvp_pool *mkpool(uint32_t num_blocks,
				      uint32_t cache_blocks, uint32_t flags,
				      const struct kvp_layout *layout)
{
	struct kvp_pool_config c =
		make_cfg(num_blocks, cache_blocks, flags, layout);
	struct kvp_pool *p = NULL;
	int rc = kvp_pool_create(&c, &p);

	ck_assert_msg(rc == 0,
		      "kvp_pool_create(%u blocks, cache %u, flags %#x)"
		      " = %d (%s)",
		      num_blocks, cache_blocks, flags, rc, kvp_strerror(rc));
	ck_assert_ptr_nonnull(p);
	return p;
}

/* A pool without thread caches: free counts and eviction order exact. */
static inline struct kvp_pool *mkpool_nc(uint32_t num_blocks)
{
	return mkpool(num_blocks, 0, KVP_POOL_NOCACHE, NULL);
}

/* The manager c describes; the test fails if it cannot be created. */
static inline struct kvp_manager *mkmgr_cfg(const struct kvp_manager_config *c)
{
	struct kvp_manager *m = NULL;
	int rc = kvp_manager_create(c, &m);

	ck_assert_msg(rc == 0,
		      "kvp_manager_create(policy %d, threshold %g, "
		      "watermark %g, flags %#x, max_pinned %u) = %d (%s)",
		      (int)c->policy, (double)c->eviction_threshold,
		      (double)c->watermark, c->flags, c->max_pinned, rc,
		      kvp_strerror(rc));
	ck_assert_ptr_nonnull(m);
	return m;
}

/* Worker threads record their first failure here. */
struct errbuf {
	char msg[256];
};

static inline void wfail(struct errbuf *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline void wfail(struct errbuf *e, const char *fmt, ...)
{
	va_list ap;

	if (e->msg[0])
		return;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	if (!e->msg[0])
		e->msg[0] = '?';
}

/* Whether buf[0..n) is all want. */
static inline int all_bytes(const void *buf, size_t n, unsigned char want)
{
	const unsigned char *b = buf;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != want)
			return 0;
	return 1;
}

/*
 * The fields of pool stats a failed call must leave alone; peak_used too
 * if with_peak (parked blocks may move either way).
 */
static inline void expect_pool_stats_same(const struct kvp_pool_stats *a,
					  const struct kvp_pool_stats *b,
					  int with_peak)
{
	ck_assert_uint_eq(a->total, b->total);
	ck_assert_uint_eq(a->free, b->free);
	ck_assert_uint_eq(a->used, b->used);
	ck_assert_uint_eq(a->allocs, b->allocs);
	ck_assert_uint_eq(a->frees, b->frees);
	if (with_peak)
		ck_assert_uint_eq(a->peak_used, b->peak_used);
	ck_assert_uint_eq(a->cache_blocks, b->cache_blocks);
}
#define expect_pool_same(a, b) expect_pool_stats_same((a), (b), 0)
#define expect_pool_same_peak(a, b) expect_pool_stats_same((a), (b), 1)

/* Pool stats at quiescence: exact and self-consistent. */
static inline struct kvp_pool_stats pstats(struct kvp_pool *p)
{
	struct kvp_pool_stats st;

	memset(&st, 0xA5, sizeof(st));
	kvp_pool_stats(p, &st);
	ck_assert_uint_eq(st.free + st.used, st.total);
	return st;
}

static inline struct kvp_stats mstats(struct kvp_manager *m)
{
	struct kvp_stats st;

	memset(&st, 0xA5, sizeof(st));
	kvp_manager_stats(m, &st);
	return st;
}

#define mcheck_ok(m) mcheck_ok_at((m), __LINE__)
static inline void mcheck_ok_at(struct kvp_manager *m, int line)
{
	int rc = kvp_manager_check(m);

	ck_assert_msg(rc == 0, "line %d: kvp_manager_check = %d (%s)", line, rc,
		      kvp_strerror(rc));
}

#define create_ok(m, s, t) create_ok_at((m), (s), (t), __LINE__)
static inline void create_ok_at(struct kvp_manager *m, uint64_t s, uint32_t t,
				int line)
{
	int rc = kvp_seq_create(m, s, t);

	ck_assert_msg(rc == 0, "line %d: kvp_seq_create(%llu, %u) = %d (%s)",
		      line, ULL(s), t, rc, kvp_strerror(rc));
}

/* Appends where no copy-on-write is expected: *ncow must be 0. */
#define append_ok(m, s, t) append_ok_at((m), (s), (t), __LINE__)
static inline void append_ok_at(struct kvp_manager *m, uint64_t s, uint32_t t,
				int line)
{
	struct kvp_copy cow[2];
	uint32_t ncow = 99;
	int rc = kvp_seq_append(m, s, t, cow, ARRAY_SIZE(cow), &ncow);

	ck_assert_msg(rc == 0, "line %d: kvp_seq_append(%llu, %u) = %d (%s)",
		      line, ULL(s), t, rc, kvp_strerror(rc));
	ck_assert_msg(ncow == 0,
		      "line %d: kvp_seq_append(%llu, %u): ncow = %u, want 0",
		      line, ULL(s), t, ncow);
}

#define fork_ok(m, s, d) fork_ok_at((m), (s), (d), __LINE__)
static inline void fork_ok_at(struct kvp_manager *m, uint64_t s, uint64_t d,
			      int line)
{
	int rc = kvp_seq_fork(m, s, d);

	ck_assert_msg(rc == 0, "line %d: kvp_seq_fork(%llu, %llu) = %d (%s)",
		      line, ULL(s), ULL(d), rc, kvp_strerror(rc));
}

#define free_ok(m, s) free_ok_at((m), (s), __LINE__)
static inline void free_ok_at(struct kvp_manager *m, uint64_t s, int line)
{
	int rc = kvp_seq_free(m, s);

	ck_assert_msg(rc == 0, "line %d: kvp_seq_free(%llu) = %d (%s)", line,
		      ULL(s), rc, kvp_strerror(rc));
}

#define info_ok(m, s) info_ok_at((m), (s), __LINE__)
static inline struct kvp_seq_info info_ok_at(struct kvp_manager *m, uint64_t s,
					     int line)
{
	struct kvp_seq_info in;
	int rc;

	memset(&in, 0xA5, sizeof(in));
	rc = kvp_seq_info(m, s, &in);
	ck_assert_msg(rc == 0, "line %d: kvp_seq_info(%llu) = %d (%s)", line,
		      ULL(s), rc, kvp_strerror(rc));
	return in;
}

#define blocks_ok(m, s, ids, cap) blocks_ok_at((m), (s), (ids), (cap), __LINE__)
static inline uint32_t blocks_ok_at(struct kvp_manager *m, uint64_t s,
				    uint32_t *ids, uint32_t cap, int line)
{
	uint32_t n = 0xDEAD;
	int rc = kvp_seq_blocks(m, s, ids, cap, &n);

	ck_assert_msg(rc == 0,
		      "line %d: kvp_seq_blocks(%llu, cap %u) = %d (%s)", line,
		      ULL(s), cap, rc, kvp_strerror(rc));
	ck_assert_msg(n <= cap, "line %d: kvp_seq_blocks n %u > cap %u", line,
		      n, cap);
	return n;
}

#define expect_gone(m, s) expect_gone_at((m), (s), __LINE__)
static inline void expect_gone_at(struct kvp_manager *m, uint64_t s, int line)
{
	struct kvp_seq_info in;
	int rc = kvp_seq_info(m, s, &in);

	ck_assert_msg(rc == -ENOENT,
		      "line %d: kvp_seq_info(%llu) = %d (%s), "
		      "want -ENOENT",
		      line, ULL(s), rc, kvp_strerror(rc));
}

/* Runs suite s; the exit status of a test program. */
static inline int run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* KVP_CHECK_COMMON_H */
