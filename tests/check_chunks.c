/* SPDX-License-Identifier: MIT */
/*
 * check_chunks.c - block tables shared in chunks (lib/btable.h): a fork
 * of an n-block sequence takes ceil((n - 1) / BT_K) + 1 atomic operations
 * on shared state (one per chunk, one on the tail block), whatever n is;
 * writes of a shared chunk copy it; and every block is freed exactly when
 * its last user lets go.
 *
 * The program compiles the library's sources with -DKVP_FAULT_INJECTION,
 * which gives btable.c's counter of the atomic operations its calls made
 * in the calling thread (btable_atomics).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "btable.h"
#include "kvpool.h"

#define BT 16u

static struct kvp_pool *mkpool(uint32_t n)
{
	struct kvp_pool_config c;
	struct kvp_pool *p = NULL;

	memset(&c, 0, sizeof(c));
	c.num_blocks = n;
	c.block_tokens = BT;
	c.device_id = -1;
	ck_assert_int_eq(kvp_pool_create(&c, &p), 0);
	return p;
}

static struct kvp_manager *mkmgr(struct kvp_pool *p)
{
	struct kvp_manager_config c;
	struct kvp_manager *m = NULL;

	memset(&c, 0, sizeof(c));
	c.pool = p;
	ck_assert_int_eq(kvp_manager_create(&c, &m), 0);
	return m;
}

static uint32_t pool_used(struct kvp_pool *p)
{
	struct kvp_pool_stats st;

	kvp_pool_stats(p, &st);
	return (uint32_t)st.used;
}

/* Forks of sequences of n full blocks plus a partial one: the atomics
 * are per chunk, not per block. */
START_TEST(test_fork_atomics)
{
	static const uint32_t full[] = {0, 1, 4, 13, 14, 15, 16, 64, 200};
	struct kvp_pool *p = mkpool(1024);
	struct kvp_manager *m = mkmgr(p);

	for (uint32_t i = 0; i < sizeof(full) / sizeof(full[0]); i++) {
		uint32_t n = full[i] + 1; /* blocks */
		uint64_t before;

		ck_assert_int_eq(kvp_seq_create(m, 1, full[i] * BT + 3), 0);
		before = btable_atomics();
		ck_assert_int_eq(kvp_seq_fork(m, 1, 2), 0);
		ck_assert_msg(btable_atomics() - before ==
				      (n - 1 + BT_K - 1) / BT_K + 1,
			      "fork of %u blocks: %llu atomics, want %u", n,
			      (unsigned long long)(btable_atomics() - before),
			      (n - 1 + BT_K - 1) / BT_K + 1);
		ck_assert_int_eq(kvp_manager_check(m), 0);
		ck_assert_int_eq(kvp_seq_free(m, 2), 0);
		ck_assert_int_eq(kvp_seq_free(m, 1), 0);
		ck_assert_uint_eq(pool_used(p), 0);
	}
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

/* Fork, the fork's copy on write of the last block, free: a constant
 * number of atomics, and the source's last block is its own again. */
START_TEST(test_fork_cycle_atomics)
{
	struct kvp_pool *p = mkpool(1024);
	struct kvp_manager *m = mkmgr(p);
	struct kvp_copy cow[1];
	uint32_t ncow;
	uint64_t before;

	ck_assert_int_eq(kvp_seq_create(m, 1, 64 * BT + 4), 0);
	before = btable_atomics();
	ck_assert_int_eq(kvp_seq_fork(m, 1, 2), 0);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_int_eq(kvp_seq_free(m, 2), 0);
	/* 5 chunks taken and dropped, the tail taken: no per-block work. */
	ck_assert_uint_le(btable_atomics() - before, 2 * 5 + 1);
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 0);
	ck_assert_int_eq(kvp_manager_check(m), 0);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

/* Truncates, trims and appends on forks: every block is freed when its
 * last user lets go, never before or after. */
START_TEST(test_shared_chunk_writes)
{
	struct kvp_pool *p = mkpool(256);
	struct kvp_manager *m = mkmgr(p);
	uint32_t a[64], b[64], na, nb, ev, ncow;
	struct kvp_copy cow[1];

	ck_assert_int_eq(kvp_seq_create(m, 1, 30 * BT), 0); /* 30 blocks */
	ck_assert_int_eq(kvp_seq_blocks(m, 1, a, 64, &na), 0);
	ck_assert_int_eq(kvp_seq_fork(m, 1, 2), 0);
	ck_assert_uint_eq(pool_used(p), 30);
	/* Truncate the fork inside its second chunk: its copy keeps the
	 * source's blocks, which the source still holds. */
	ck_assert_int_eq(kvp_seq_truncate(m, 2, 20 * BT + 1), 0);
	ck_assert_uint_eq(pool_used(p), 30);
	ck_assert_int_eq(kvp_seq_blocks(m, 2, b, 64, &nb), 0);
	ck_assert_uint_eq(nb, 21);
	ck_assert_int_eq(memcmp(a, b, 21 * sizeof(*a)), 0);
	/* Its partial last block, the source's too, is copied; its new
	 * blocks are its own. */
	ck_assert_int_eq(kvp_seq_append(m, 2, 5 * BT, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[20]);
	ck_assert_uint_eq(pool_used(p), 30 + 1 + 5);
	ck_assert_int_eq(kvp_manager_check(m), 0);
	/* The source goes: its blocks past the fork's first 20 go with
	 * it. */
	ck_assert_int_eq(kvp_seq_free(m, 1), 0);
	ck_assert_uint_eq(pool_used(p), 20 + 1 + 5);
	ck_assert_int_eq(kvp_manager_check(m), 0);
	/* Trim of a shared table, then of one of its own. */
	ck_assert_int_eq(kvp_seq_fork(m, 2, 3), 0);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 3, BT, 4 * BT, &ev), 0);
	ck_assert_uint_eq(ev, (26 - 1 - 4) * BT - 2 * BT + BT);
	ck_assert_int_eq(kvp_manager_check(m), 0);
	ck_assert_uint_eq(pool_used(p), 26);
	ck_assert_int_eq(kvp_seq_free(m, 2), 0);
	ck_assert_int_eq(kvp_seq_blocks(m, 3, b, 64, &nb), 0);
	ck_assert_uint_eq(pool_used(p), nb);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 3, BT, BT, &ev), 0);
	ck_assert_int_eq(kvp_seq_blocks(m, 3, b, 64, &nb), 0);
	ck_assert_uint_eq(pool_used(p), nb);
	ck_assert_int_eq(kvp_manager_check(m), 0);
	ck_assert_int_eq(kvp_seq_free(m, 3), 0);
	ck_assert_uint_eq(pool_used(p), 0);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("chunks");
	TCase *tc = tcase_create("chunks");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_fork_atomics);
	tcase_add_test(tc, test_fork_cycle_atomics);
	tcase_add_test(tc, test_shared_chunk_writes);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
