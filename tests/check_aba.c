/* SPDX-License-Identifier: MIT */
/*
 * check_aba.c - the hit's ABA window, forced.  A hit loads a table slot,
 * checks the block's record and then takes its reference with a CAS on
 * the block's state word.  Between the load and the CAS the block may be
 * evicted and cached again under another hash (lib/prefix.c, the
 * argument at the top): the hit must then miss, never return the block
 * as a hit for the old hash.
 *
 * The program compiles the library's sources with -DKVP_FAULT_INJECTION,
 * which gives prefix.c's test hook prefix_take_hook: called by a hit
 * between its load of a slot and its CAS.  The hook here evicts the block
 * (an allocation on a pool whose only free blocks are cached ones) and
 * commits it under another hash, from the same thread, once.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "kvpool.h"
#include "prefix.h"

#define BT 4u

static struct kvp_manager *hook_mgr;
static struct kvp_hash hook_hash;
static uint32_t hook_block, hook_fired;
static uint64_t hook_then_free; /* a sequence the hook frees last (0: none) */

static void mkhash(struct kvp_hash *h, uint8_t tag)
{
	memset(h, 0, sizeof(*h));
	h->b[0] = tag;
	h->b[31] = 0x5a;
}

static struct kvp_pool *mkpool(uint32_t n)
{
	struct kvp_pool_config c;
	struct kvp_pool *p = NULL;

	memset(&c, 0, sizeof(c));
	c.num_blocks = n;
	c.block_tokens = BT;
	c.device_id = -1;
	c.flags = KVP_POOL_NOCACHE; /* every block on the global lists */
	ck_assert_int_eq(kvp_pool_create(&c, &p), 0);
	return p;
}

static struct kvp_manager *mkmgr(struct kvp_pool *p)
{
	struct kvp_manager_config c;
	struct kvp_manager *m = NULL;

	memset(&c, 0, sizeof(c));
	c.pool = p;
	c.flags = KVP_PREFIX_CACHE;
	ck_assert_int_eq(kvp_manager_create(&c, &m), 0);
	return m;
}

/* One block of the manager cached under h, idle: its id. */
static uint32_t cache_one(struct kvp_manager *m, uint64_t seq,
			  const struct kvp_hash *h)
{
	uint32_t b = UINT32_MAX, n = 0;

	ck_assert_int_eq(kvp_seq_create(m, seq, BT), 0);
	ck_assert_int_eq(kvp_seq_commit(m, seq, h, 1), 1);
	ck_assert_int_eq(kvp_seq_blocks(m, seq, &b, 1, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(kvp_seq_free(m, seq), 0);
	return b;
}

/* The hook: the first time a hit reaches the block, evict it and cache
 * it again under hook_hash. */
static void evict_and_recache(struct prefix_cache *pc, uint32_t b)
{
	(void)pc;
	if (hook_fired++ || b != hook_block)
		return;
	ck_assert_uint_eq(cache_one(hook_mgr, 900, &hook_hash), b);
	if (hook_then_free)
		ck_assert_int_eq(kvp_seq_free(hook_mgr, hook_then_free), 0);
}

/*
 * A pool of nb blocks: b caches h1, the others are held by sequence 50.
 * A request of two blocks hits h1 (its first block; the second is
 * computed) and its hit races the hook, which evicts b, caches it again
 * under h2 and frees sequence 50.  The hit must miss.  Returns b and
 * leaves the request as sequence 2.
 */
static uint32_t race_hit(struct kvp_manager *m, uint32_t nb,
			 const struct kvp_hash *h1, const struct kvp_hash *h2)
{
	uint32_t cached = 99, b;

	ck_assert_int_eq(kvp_seq_create(m, 50, (nb - 1) * BT), 0);
	b = cache_one(m, 1, h1);
	hook_mgr = m;
	hook_hash = *h2;
	hook_block = b;
	hook_fired = 0;
	hook_then_free = 50;
	prefix_take_hook = evict_and_recache;
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, h1, 1, 2 * BT, &cached),
			 0);
	prefix_take_hook = NULL;
	ck_assert_uint_eq(hook_fired, 1);
	ck_assert_uint_eq(cached, 0);
	return b;
}

/* Tokens a two-block request of hash h finds cached (sequence 3, freed
 * again); its first block in *first. */
static uint32_t hit_tokens(struct kvp_manager *m, const struct kvp_hash *h,
			   uint32_t *first)
{
	uint32_t cached = 99, ids[2], n = 0;

	ck_assert_int_eq(kvp_seq_create_cached(m, 3, h, 1, 2 * BT, &cached),
			 0);
	ck_assert_int_eq(kvp_seq_blocks(m, 3, ids, 2, &n), 0);
	*first = ids[0];
	ck_assert_int_eq(kvp_seq_free(m, 3), 0);
	return cached;
}

/* Both checks clean, then everything goes. */
static void teardown(struct kvp_pool *p, struct kvp_manager *m)
{
	ck_assert_int_eq(kvp_manager_check(m), 0);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}

/* Two blocks: the request needs both, so it evicts b (now h2's). */
START_TEST(test_aba_other_hash)
{
	struct kvp_pool *p = mkpool(2);
	struct kvp_manager *m = mkmgr(p);
	struct kvp_hash h1, h2;
	uint32_t ids[2], n = 0, b, first;

	mkhash(&h1, 1);
	mkhash(&h2, 2);
	b = race_hit(m, 2, &h1, &h2);
	ck_assert_int_eq(kvp_seq_blocks(m, 2, ids, 2, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert(ids[0] == b || ids[1] == b);
	ck_assert_int_eq(kvp_seq_free(m, 2), 0);
	/* Neither hash is cached now. */
	ck_assert_uint_eq(hit_tokens(m, &h1, &first), 0);
	ck_assert_uint_eq(hit_tokens(m, &h2, &first), 0);
	teardown(p, m);
}
END_TEST

/* Three blocks: the request takes the two sequence 50 freed, b keeps
 * h2, and a later hit on h2 finds it. */
START_TEST(test_aba_keeps_new_hash)
{
	struct kvp_pool *p = mkpool(3);
	struct kvp_manager *m = mkmgr(p);
	struct kvp_hash h1, h2;
	uint32_t ids[2], n = 0, b, first = UINT32_MAX;

	mkhash(&h1, 1);
	mkhash(&h2, 2);
	b = race_hit(m, 3, &h1, &h2);
	ck_assert_int_eq(kvp_seq_blocks(m, 2, ids, 2, &n), 0);
	ck_assert(ids[0] != b && ids[1] != b);
	ck_assert_int_eq(kvp_seq_free(m, 2), 0);
	ck_assert_uint_eq(hit_tokens(m, &h2, &first), BT);
	ck_assert_uint_eq(first, b);
	teardown(p, m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("aba");
	TCase *tc = tcase_create("window");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_aba_other_hash);
	tcase_add_test(tc, test_aba_keeps_new_hash);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
