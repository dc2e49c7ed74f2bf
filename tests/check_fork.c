/* SPDX-License-Identifier: MIT */
/*
 * check_fork.c - Check unit tests for kvp_seq_fork_n: n children of one
 * source in one call, each as kvp_seq_fork would make it, the source's
 * access moved once (or not at all with KVP_FORK_KEEP_SOURCE), and every
 * error, in kvpool.h's order of precedence, leaving everything as it was.
 * Host-memory failures (-ENOMEM) are walked by tests/check_faults.  And a
 * data-owning pool of 0 blocks answers the data calls as for a position
 * out of range.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#include "check_common.h"

#define BT CHECK_BLOCK_TOKENS
#define NBLOCKS 512u
#define PROMPT 1000u /* tokens: 63 blocks, past a table's inline chunks */
#define SRC 7u

static struct kvp_manager *mkmgr(struct kvp_pool *p)
{
	struct kvp_manager_config c = {.pool = p, .policy = KVP_EVICT_LRU};

	return mkmgr_cfg(&c);
}

static void finish(struct kvp_manager *m, struct kvp_pool *p)
{
	mcheck_ok(m);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}

/* A test took references the manager does not hold (kvp_block_ref). */
static int extra_refs;

/* Everything a failed fork_n must leave as it was. */
struct snap {
	struct kvp_pool_stats ps;
	struct kvp_stats ms;
	struct kvp_seq_info src;
	int refs[NBLOCKS];
};

static void take(struct kvp_manager *m, struct kvp_pool *p, struct snap *s)
{
	memset(s, 0, sizeof(*s));
	s->ps = pstats(p);
	s->ms = mstats(m);
	s->src = info_ok(m, SRC);
	for (uint32_t b = 0; b < NBLOCKS; b++)
		s->refs[b] = kvp_block_refcount(p, b);
}

static void expect_same_at(struct kvp_manager *m, struct kvp_pool *p,
			   const struct snap *a, int line)
{
	struct snap b;

	take(m, p, &b);
	ck_assert_msg(!memcmp(&a->ps, &b.ps, sizeof(a->ps)),
		      "line %d: pool stats changed", line);
	ck_assert_msg(a->ms.sequences == b.ms.sequences &&
			      a->ms.forks == b.ms.forks &&
			      a->ms.tokens == b.ms.tokens &&
			      a->ms.seq_creates == b.ms.seq_creates &&
			      a->ms.seq_frees == b.ms.seq_frees,
		      "line %d: manager stats changed", line);
	ck_assert_msg(!memcmp(&a->src, &b.src, sizeof(a->src)),
		      "line %d: the source's info changed", line);
	for (uint32_t i = 0; i < NBLOCKS; i++)
		ck_assert_msg(a->refs[i] == b.refs[i],
			      "line %d: block %u: %d references, was %d", line,
			      i, b.refs[i], a->refs[i]);
	/* Not while a test holds references of its own on a block. */
	if (!extra_refs)
		mcheck_ok(m);
}
#define expect_same(m, p, a) expect_same_at((m), (p), (a), __LINE__)

/* Each child holds src's blocks and tokens, as a kvp_seq_fork child
 * does; the tail block has a reference per holder. */
START_TEST(test_fork_n_children)
{
	struct kvp_pool *p = mkpool_nc(NBLOCKS);
	struct kvp_manager *m = mkmgr(p);
	static uint32_t a[64], c[64];
	const uint64_t kids[4] = {10, 11, 12, 13};
	struct kvp_seq_info before, after, one, kid;
	struct kvp_copy cow[2];
	uint32_t na, nc, ncow;

	create_ok(m, SRC, PROMPT);
	ck_assert_int_eq(kvp_seq_set_priority(m, SRC, 3), 0);
	na = blocks_ok(m, SRC, a, 64);
	ck_assert_uint_eq(na, 63);
	fork_ok(m, SRC, 9); /* the reference: what one fork makes */
	one = info_ok(m, 9);
	before = info_ok(m, SRC);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, 4, 0), 0);
	after = info_ok(m, SRC);
	/* The source's access moved once. */
	ck_assert_uint_eq(after.access_count, before.access_count + 1);
	ck_assert_uint_gt(after.last_access, before.last_access);
	for (int i = 0; i < 4; i++) {
		kid = info_ok(m, kids[i]);
		ck_assert_uint_eq(kid.num_tokens, PROMPT);
		ck_assert_uint_eq(kid.num_blocks, 63);
		ck_assert_int_eq(kid.priority, 3);
		ck_assert_uint_eq(kid.access_count, one.access_count);
		ck_assert_uint_gt(kid.last_access, after.last_access);
		nc = blocks_ok(m, kids[i], c, 64);
		ck_assert_uint_eq(nc, na);
		ck_assert(!memcmp(a, c, na * sizeof(*a)));
	}
	/* Chunks shared: a full block has one holder; the tail one per
	 * table (src, 9 and the four). */
	ck_assert_int_eq(kvp_block_refcount(p, a[0]), 1);
	ck_assert_int_eq(kvp_block_refcount(p, a[na - 1]), 6);
	ck_assert_uint_eq(mstats(m).forks, 5);
	ck_assert_uint_eq(mstats(m).sequences, 6);
	ck_assert_uint_eq(mstats(m).tokens, 6 * PROMPT);
	mcheck_ok(m);
	/* Each child's append copies the shared partial block. */
	for (int i = 0; i < 4; i++) {
		ncow = 0;
		ck_assert_int_eq(kvp_seq_append(m, kids[i], 1, cow, 2, &ncow),
				 0);
		ck_assert_uint_eq(ncow, 1);
		ck_assert_uint_eq(cow[0].src, a[na - 1]);
	}
	ck_assert_int_eq(kvp_block_refcount(p, a[na - 1]), 2);
	mcheck_ok(m);
	for (int i = 0; i < 4; i++)
		free_ok(m, kids[i]);
	free_ok(m, 9);
	free_ok(m, SRC);
	ck_assert_uint_eq(pstats(p).used, 0);
	finish(m, p);
}
END_TEST

/* KVP_FORK_KEEP_SOURCE: the source's last access and count stay. */
START_TEST(test_fork_n_keep_source)
{
	struct kvp_pool *p = mkpool_nc(NBLOCKS);
	struct kvp_manager *m = mkmgr(p);
	uint64_t kids[16];
	struct kvp_seq_info before, after;

	for (int i = 0; i < 16; i++)
		kids[i] = 100 + (uint64_t)i;
	create_ok(m, SRC, PROMPT);
	before = info_ok(m, SRC);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, 16,
					KVP_FORK_KEEP_SOURCE),
			 0);
	after = info_ok(m, SRC);
	ck_assert_uint_eq(after.last_access, before.last_access);
	ck_assert_uint_eq(after.access_count, before.access_count);
	for (int i = 0; i < 16; i++)
		ck_assert_uint_eq(info_ok(m, kids[i]).num_tokens, PROMPT);
	/* An empty source forks to empty children. */
	create_ok(m, 1, 0);
	ck_assert_int_eq(kvp_seq_fork_n(m, 1, (uint64_t[]){2, 3}, 2, 0), 0);
	ck_assert_uint_eq(info_ok(m, 3).num_tokens, 0);
	finish(m, p);
}
END_TEST

/* -EINVAL first, whatever else is wrong; nothing changed. */
START_TEST(test_fork_n_einval)
{
	struct kvp_pool *p = mkpool_nc(NBLOCKS);
	struct kvp_manager *m = mkmgr(p);
	const uint64_t kids[3] = {20, 21, 22}, taken[2] = {SRC, 20};
	struct snap s;

	create_ok(m, SRC, PROMPT);
	take(m, p, &s);
	ck_assert_int_eq(kvp_seq_fork_n(NULL, SRC, kids, 3, 0), -EINVAL);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, NULL, 3, 0), -EINVAL);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, 0, 0), -EINVAL);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, KVP_FORK_N_MAX + 1, 0),
			 -EINVAL);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, 3, 1u << 1), -EINVAL);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, 3, ~0u), -EINVAL);
	/* Before a taken id, and before an unknown source. */
	ck_assert_int_eq(kvp_seq_fork_n(m, 99, taken, 2, 1u << 5), -EINVAL);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, taken, 0, 0), -EINVAL);
	for (int i = 0; i < 3; i++)
		expect_gone(m, kids[i]);
	expect_same(m, p, &s);
	finish(m, p);
}
END_TEST

/* -EEXIST: a taken id anywhere in dsts, src itself, or a repeat; it wins
 * over an unknown source.  The children before it are gone again. */
START_TEST(test_fork_n_eexist)
{
	struct kvp_pool *p = mkpool_nc(NBLOCKS);
	struct kvp_manager *m = mkmgr(p);
	const uint64_t last_taken[4] = {30, 31, 32, 5};
	const uint64_t first_taken[3] = {5, 31, 32};
	const uint64_t has_src[3] = {30, SRC, 32};
	const uint64_t repeat[4] = {30, 31, 30, 33};
	const uint64_t repeat_last[2] = {34, 34};
	struct snap s;

	create_ok(m, SRC, PROMPT);
	create_ok(m, 5, 3 * BT);
	take(m, p, &s);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, last_taken, 4, 0), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, first_taken, 3, 0), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, has_src, 3, 0), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, repeat, 4, 0), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, repeat_last, 2, 0), -EEXIST);
	ck_assert_int_eq(kvp_seq_fork_n(m, 99, last_taken, 4, 0), -EEXIST);
	for (uint64_t id = 30; id <= 34; id++)
		expect_gone(m, id);
	ck_assert_uint_eq(info_ok(m, 5).num_tokens, 3 * BT);
	expect_same(m, p, &s);
	finish(m, p);
}
END_TEST

/* -ENOENT: src unknown or freed; every dst was free. */
START_TEST(test_fork_n_enoent)
{
	struct kvp_pool *p = mkpool_nc(NBLOCKS);
	struct kvp_manager *m = mkmgr(p);
	const uint64_t kids[3] = {40, 41, 42};
	struct snap s;

	create_ok(m, SRC, PROMPT);
	create_ok(m, 8, BT);
	free_ok(m, 8);
	take(m, p, &s);
	ck_assert_int_eq(kvp_seq_fork_n(m, 99, kids, 3, 0), -ENOENT);
	ck_assert_int_eq(kvp_seq_fork_n(m, 8, kids, 3, 0), -ENOENT);
	ck_assert_int_eq(kvp_seq_fork_n(m, 8, kids, 1, KVP_FORK_KEEP_SOURCE),
			 -ENOENT);
	for (int i = 0; i < 3; i++)
		expect_gone(m, kids[i]);
	expect_same(m, p, &s);
	/* The ids are free still. */
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, 3, 0), 0);
	finish(m, p);
}
END_TEST

/* -EOVERFLOW: the tail block cannot take n more references; all or
 * nothing, and the n that fit succeed. */
START_TEST(test_fork_n_eoverflow)
{
	struct kvp_pool *p = mkpool_nc(NBLOCKS);
	struct kvp_manager *m = mkmgr(p);
	const uint64_t kids[3] = {50, 51, 52};
	static uint32_t a[64];
	uint32_t na, r;
	struct snap s;
	int rc;

	create_ok(m, SRC, PROMPT);
	na = blocks_ok(m, SRC, a, 64);
	/* Room for two more references on the tail. */
	for (r = 1; r < KVP_MAX_REFS - 2; r++) {
		rc = kvp_block_ref(p, a[na - 1]);
		if (rc)
			ck_abort_msg("kvp_block_ref #%u = %d (%s)", r, rc,
				     kvp_strerror(rc));
	}
	extra_refs = 1;
	take(m, p, &s);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, 3, 0), -EOVERFLOW);
	for (int i = 0; i < 3; i++)
		expect_gone(m, kids[i]);
	ck_assert_int_eq(kvp_block_refcount(p, a[na - 1]),
			 (int)KVP_MAX_REFS - 2);
	/* The precedence: a taken id, then the unknown source, first. */
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, (uint64_t[]){50, SRC, 51}, 3,
					0),
			 -EEXIST);
	ck_assert_int_eq(kvp_seq_fork_n(m, 99, kids, 3, 0), -ENOENT);
	expect_same(m, p, &s);
	ck_assert_int_eq(kvp_seq_fork_n(m, SRC, kids, 2, 0), 0);
	ck_assert_int_eq(kvp_block_refcount(p, a[na - 1]), (int)KVP_MAX_REFS);
	free_ok(m, kids[0]);
	free_ok(m, kids[1]);
	for (r = 1; r < KVP_MAX_REFS - 2; r++) {
		rc = kvp_pool_free(p, &a[na - 1], 1);
		if (rc)
			ck_abort_msg("kvp_pool_free #%u = %d (%s)", r, rc,
				     kvp_strerror(rc));
	}
	ck_assert_int_eq(kvp_block_refcount(p, a[na - 1]), 1);
	extra_refs = 0;
	finish(m, p);
}
END_TEST

/* A data-owning pool of 0 blocks is data-owning: -ERANGE, not -EINVAL
 * (an ID-only pool of 0 blocks stays -EINVAL). */
START_TEST(test_data_zero_blocks)
{
	static const struct kvp_layout lay = {2, 2, 4, KVP_F16};
	struct kvp_pool *p = mkpool(0, 0, 0, &lay), *q = mkpool(0, 0, 0, NULL);
	struct kvp_manager *m = mkmgr(p), *n = mkmgr(q);
	unsigned char k[64] = {0}, v[64] = {0};

	ck_assert_uint_eq(kvp_pool_row_bytes(p), 2 * 4 * 2);
	create_ok(m, 1, 0);
	ck_assert_int_eq(kvp_seq_read(m, 1, 0, 0, k, v), -ERANGE);
	ck_assert_int_eq(kvp_seq_write(m, 1, 0, 0, k, v), -ERANGE);
	ck_assert_int_eq(kvp_seq_read(m, 1, 5, 1, k, v), -ERANGE);
	ck_assert_int_eq(kvp_seq_gather(m, 1, 0, k, v), 0);
	ck_assert_int_eq(kvp_seq_read(m, 2, 0, 0, k, v), -ENOENT);
	/* Arguments are judged first, as for any data-owning pool. */
	ck_assert_int_eq(kvp_seq_read(m, 1, 0, 2, k, v), -EINVAL);
	ck_assert_int_eq(kvp_seq_read(m, 1, 0, 0, k, NULL), -EINVAL);
	ck_assert_int_eq(kvp_seq_create(m, 2, 1), -ENOSPC);
	ck_assert_ptr_null(kvp_block_data(p, 0));
	create_ok(n, 1, 0);
	ck_assert_int_eq(kvp_seq_read(n, 1, 0, 0, k, v), -EINVAL);
	kvp_manager_destroy(n);
	kvp_pool_unref(q);
	finish(m, p);
}
END_TEST

static Suite *fork_suite(void)
{
	Suite *s = suite_create("fork");
	TCase *tc = tcase_create("fork_n");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_fork_n_children);
	tcase_add_test(tc, test_fork_n_keep_source);
	tcase_add_test(tc, test_fork_n_einval);
	tcase_add_test(tc, test_fork_n_eexist);
	tcase_add_test(tc, test_fork_n_enoent);
	tcase_add_test(tc, test_fork_n_eoverflow);
	tcase_add_test(tc, test_data_zero_blocks);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fork_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
