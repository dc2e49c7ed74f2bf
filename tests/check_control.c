/* SPDX-License-Identifier: MIT */
/*
 * check_control.c - what a scheduler ported from another block manager
 * controls and reads: -ENOSPC details (kvp_last_error), empty pools,
 * K-only pools, the configurations in effect, exact limits (threshold and
 * watermark 0), a policy changed on a manager that holds sequences, the
 * victim named without evicting it, the list of a manager's sequences,
 * what an append did (kvp_seq_append_ex), reserved block tables and the
 * cached prefix of a request, looked up without taking it
 * (kvp_prefix_match).
 * tests/check_noalloc.c proves that appends on a reserved sequence
 * allocate no host memory.
 */
#include <math.h>
#include <pthread.h>

#include "check_common.h"

#define BT CHECK_BLOCK_TOKENS

static struct kvp_manager *mkmgr(struct kvp_pool *p, enum kvp_policy policy,
				 float threshold, float watermark,
				 uint32_t flags)
{
	struct kvp_manager_config c = {.pool = p,
				       .policy = policy,
				       .eviction_threshold = threshold,
				       .watermark = watermark,
				       .flags = flags};

	return mkmgr_cfg(&c);
}

/* The thread's record, which must be of err (-ENOSPC or -ENOBUFS). */
static struct kvp_error_info last_error(int err)
{
	struct kvp_error_info e;

	memset(&e, 0xA5, sizeof(e));
	ck_assert_int_eq(kvp_last_error(&e), 0);
	ck_assert_int_eq(e.err, err);
	ck_assert_uint_eq(e.buffer, err == -ENOBUFS);
	return e;
}

START_TEST(test_last_error)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);
	struct kvp_error_info e;
	struct kvp_copy cow[1];
	uint32_t ids[8], n = 0;

	ck_assert_int_eq(kvp_last_error(NULL), -EINVAL);
	create_ok(m, 1, 3 * BT);
	/* Blocks: 6 needed, 5 free. */
	ck_assert_int_eq(kvp_seq_create(m, 2, 6 * BT), -ENOSPC);
	e = last_error(-ENOSPC);
	ck_assert_uint_eq(e.buffer, 0);
	ck_assert_uint_eq(e.requested, 6);
	ck_assert_uint_eq(e.available, 5);
	/* More than the pool has at all. */
	ck_assert_int_eq(kvp_seq_create(m, 2, 9 * BT), -ENOSPC);
	e = last_error(-ENOSPC);
	ck_assert_uint_eq(e.requested, 9);
	ck_assert_uint_eq(e.available, 5);
	/* The pool itself. */
	ck_assert_int_eq(kvp_pool_alloc(p, 7, ids), -ENOSPC);
	e = last_error(-ENOSPC);
	ck_assert_uint_eq(e.requested, 7);
	ck_assert_uint_eq(e.available, 5);
	/* An append: 3 blocks held, 6 more needed. */
	ck_assert_int_eq(kvp_seq_append(m, 1, 6 * BT, NULL, 0, NULL), -ENOSPC);
	e = last_error(-ENOSPC);
	ck_assert_uint_eq(e.requested, 6);
	ck_assert_uint_eq(e.available, 5);
	/* A buffer too small. */
	ck_assert_int_eq(kvp_seq_blocks(m, 1, ids, 2, &n), -ENOBUFS);
	e = last_error(-ENOBUFS);
	ck_assert_uint_eq(e.buffer, 1);
	ck_assert_uint_eq(e.requested, 3);
	ck_assert_uint_eq(e.available, 2);
	/* A copy-on-write with no room for the copy. */
	create_ok(m, 3, BT / 2);
	fork_ok(m, 3, 4);
	ck_assert_int_eq(kvp_seq_append(m, 4, 1, NULL, 0, NULL), -ENOBUFS);
	e = last_error(-ENOBUFS);
	ck_assert_uint_eq(e.buffer, 1);
	ck_assert_uint_eq(e.requested, 1);
	ck_assert_uint_eq(e.available, 0);
	ck_assert_int_eq(kvp_seq_append(m, 4, 1, cow, 1, NULL), 0);
	/* Other errors leave the record alone. */
	ck_assert_int_eq(kvp_seq_free(m, 99), -ENOENT);
	ck_assert_uint_eq(last_error(-ENOBUFS).requested, 1);
	mcheck_ok(m);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

/* The record is per thread. */
static void *other_thread(void *arg)
{
	struct kvp_error_info e;

	*(int *)arg = kvp_last_error(&e);
	return NULL;
}

START_TEST(test_last_error_per_thread)
{
	struct kvp_pool *p = mkpool_nc(1);
	uint32_t ids[2];
	pthread_t t;
	int rc = 0;

	ck_assert_int_eq(kvp_pool_alloc(p, 2, ids), -ENOSPC);
	ck_assert_int_eq(pthread_create(&t, NULL, other_thread, &rc), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(rc, -ENOENT);
	ck_assert_uint_eq(last_error(-ENOSPC).requested, 2);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_empty_pool)
{
	static const struct kvp_layout lay = {2, 2, 4, KVP_F32};
	struct kvp_pool *p = mkpool(0, 0, 0, NULL);
	struct kvp_pool *d = mkpool(0, 0, KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU, 0, 0, KVP_PREFIX_CACHE);
	struct kvp_pool_stats st = pstats(p);
	struct kvp_hash h[1] = {{{1}}};
	uint32_t id = 0, cached = 9, n = 9;
	uint64_t victim;

	ck_assert_uint_eq(st.total, 0);
	ck_assert_uint_eq(st.free, 0);
	ck_assert_uint_eq(st.cache_blocks, 0);
	ck_assert_int_eq(kvp_pool_alloc(p, 1, &id), -ENOSPC);
	ck_assert_uint_eq(last_error(-ENOSPC).available, 0);
	ck_assert_int_eq(kvp_pool_free(p, &id, 1), -ERANGE);
	ck_assert_ptr_null(kvp_block_data(d, 0));
	/* Sequences of 0 tokens work; one token needs a block. */
	create_ok(m, 1, 0);
	append_ok(m, 1, 0);
	ck_assert_int_eq(kvp_seq_append(m, 1, 1, NULL, 0, NULL), -ENOSPC);
	ck_assert_int_eq(kvp_seq_create(m, 2, 1), -ENOSPC);
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, h, 1, BT, &cached),
			 -ENOSPC);
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, h, 0, 0, &cached), 0);
	ck_assert_uint_eq(cached, 0);
	ck_assert_int_eq(kvp_seq_blocks(m, 1, NULL, 0, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvp_admit(m, 0), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(m, 1), KVP_ADMIT_NEVER);
	ck_assert_int_eq(kvp_evict(m, &victim), 0);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	ck_assert_int_eq(kvp_pool_check(d), 0);
	mcheck_ok(m);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
	kvp_pool_unref(d);
}
END_TEST

START_TEST(test_k_only)
{
	static const struct kvp_layout lay = {3, 2, 4, KVP_F32};
	struct kvp_pool *kv = mkpool(8, 0, 0, &lay);
	struct kvp_pool *k1 = mkpool(8, 0, KVP_POOL_K_ONLY | KVP_POOL_ZERO,
				     &lay);
	struct kvp_manager *m = mkmgr(k1, KVP_EVICT_LRU, 0, 0, 0);
	struct kvp_copy cow[1];
	float row[8], back[8], v[8], all[3 * BT * 8];
	uint32_t ncow = 0;

	ck_assert_uint_eq(kvp_pool_row_bytes(k1), sizeof(row));
	ck_assert_uint_eq(kvp_block_bytes(kv), 2 * kvp_block_bytes(k1));
	ck_assert_uint_eq(kvp_block_bytes(k1), 3 * BT * sizeof(row));
	create_ok(m, 1, BT + 3);
	for (uint32_t pos = 0; pos < BT + 3; pos++)
		for (uint32_t layer = 0; layer < 3; layer++) {
			for (int i = 0; i < 8; i++)
				row[i] = (float)(pos * 100 + layer * 10 + i);
			ck_assert_int_eq(kvp_seq_write(m, 1, pos, layer, row, v),
					 -EINVAL);
			ck_assert_int_eq(
				kvp_seq_write(m, 1, pos, layer, row, NULL), 0);
		}
	ck_assert_int_eq(kvp_seq_read(m, 1, 4, 2, back, v), -EINVAL);
	ck_assert_int_eq(kvp_seq_read(m, 1, BT + 1, 2, back, NULL), 0);
	ck_assert(back[7] == (float)((BT + 1) * 100 + 27));
	/* Layers do not overlap: layer 1 of the same token. */
	ck_assert_int_eq(kvp_seq_read(m, 1, BT + 1, 1, back, NULL), 0);
	ck_assert(back[0] == (float)((BT + 1) * 100 + 10));
	ck_assert_int_eq(kvp_seq_gather(m, 1, 1, all, v), -EINVAL);
	ck_assert_int_eq(kvp_seq_gather(m, 1, 1, all, NULL), 0);
	for (uint32_t pos = 0; pos < BT + 3; pos++)
		ck_assert(all[pos * 8 + 3] == (float)(pos * 100 + 13));
	/* Copy-on-write copies the one plane. */
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_int_eq(kvp_seq_read(m, 2, BT + 2, 2, back, NULL), 0);
	ck_assert(back[5] == (float)((BT + 2) * 100 + 25));
	mcheck_ok(m);
	kvp_manager_destroy(m);
	kvp_pool_unref(kv);
	kvp_pool_unref(k1);
}
END_TEST

START_TEST(test_get_config)
{
	static const struct kvp_layout lay = {2, 2, 4, KVP_BF16};
	struct kvp_pool_config c = make_cfg(64, 8, KVP_POOL_ZERO, &lay), got;
	struct kvp_layout l;
	struct kvp_pool *p = NULL, *q = mkpool(16, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager_config mc = {.policy = KVP_EVICT_LFU,
					.flags = KVP_PREFIX_CACHE,
					.name = "cfg"};
	struct kvp_manager *m;

	c.device_id = 3;
	ck_assert_int_eq(kvp_pool_create(&c, &p), 0);
	ck_assert_int_eq(kvp_pool_get_config(p, &got, NULL), -EINVAL);
	ck_assert_int_eq(kvp_pool_get_config(NULL, &got, &l), -EINVAL);
	ck_assert_int_eq(kvp_pool_get_config(p, NULL, &l), -EINVAL);
	ck_assert_int_eq(kvp_pool_get_config(p, &got, &l), 0);
	ck_assert_uint_eq(got.num_blocks, 64);
	ck_assert_uint_eq(got.block_tokens, BT);
	ck_assert_uint_eq(got.cache_blocks, 8);
	ck_assert_int_eq(got.device_id, 3);
	ck_assert_uint_eq(got.flags, KVP_POOL_ZERO);
	ck_assert_ptr_eq(got.layout, &l);
	ck_assert(memcmp(&l, &lay, sizeof(l)) == 0);
	ck_assert_int_eq(kvp_pool_get_config(q, &got, NULL), 0);
	ck_assert_ptr_null(got.layout);
	ck_assert_uint_eq(got.cache_blocks, 0);
	ck_assert_uint_eq(got.flags, KVP_POOL_NOCACHE);

	mc.pool = p;
	m = mkmgr_cfg(&mc);
	memset(&mc, 0, sizeof(mc));
	ck_assert_int_eq(kvp_manager_get_config(NULL, &mc), -EINVAL);
	ck_assert_int_eq(kvp_manager_get_config(m, NULL), -EINVAL);
	ck_assert_int_eq(kvp_manager_get_config(m, &mc), 0);
	ck_assert_ptr_eq(mc.pool, p);
	ck_assert_int_eq(mc.policy, KVP_EVICT_LFU);
	ck_assert(mc.eviction_threshold == 0.9f);
	ck_assert(mc.watermark == 0.01f);
	ck_assert_uint_eq(mc.flags, KVP_PREFIX_CACHE);
	ck_assert_uint_eq(mc.max_pinned, 16);
	ck_assert_str_eq(mc.name, "cfg");
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
	kvp_pool_unref(q);
}
END_TEST

START_TEST(test_exact_limits)
{
	struct kvp_pool *p = mkpool_nc(100);
	struct kvp_manager *m0 = mkmgr(p, KVP_EVICT_LRU, 0, 0, KVP_EXACT_LIMITS);
	struct kvp_manager *md = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);
	struct kvp_manager_config mc;
	uint64_t victims[4];
	uint32_t n = 9;

	ck_assert_int_eq(kvp_manager_get_config(m0, &mc), 0);
	ck_assert(mc.eviction_threshold == 0.0f && mc.watermark == 0.0f);
	ck_assert_int_eq(kvp_manager_get_config(md, &mc), 0);
	ck_assert(mc.eviction_threshold == 0.9f && mc.watermark == 0.01f);
	/* Watermark 0: the whole pool is admissible; the default keeps 1. */
	ck_assert_int_eq(kvp_admit(m0, 100 * BT), KVP_ADMIT_OK);
	ck_assert_int_eq(kvp_admit(md, 100 * BT), KVP_ADMIT_NEVER);
	/* Threshold 0: every sequence goes; the default stops at 0.9. */
	create_ok(m0, 1, BT);
	create_ok(m0, 2, BT);
	ck_assert_int_eq(kvp_evict_until(m0, -1, victims, 4, &n), 0);
	ck_assert_uint_eq(n, 2);
	create_ok(md, 1, BT);
	ck_assert_int_eq(kvp_evict_until(md, -1, victims, 4, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* Out of range stays refused with the flag. */
	{
		struct kvp_manager_config bad = {.pool = p,
						 .eviction_threshold = -0.5f,
						 .flags = KVP_EXACT_LIMITS};
		struct kvp_manager *out = NULL;

		ck_assert_int_eq(kvp_manager_create(&bad, &out), -EINVAL);
		bad.eviction_threshold = 0;
		bad.watermark = 1.0f;
		ck_assert_int_eq(kvp_manager_create(&bad, &out), -EINVAL);
		bad.watermark = NAN;
		ck_assert_int_eq(kvp_manager_create(&bad, &out), -EINVAL);
		ck_assert_ptr_null(out);
	}
	kvp_manager_destroy(m0);
	kvp_manager_destroy(md);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_policy_and_peek)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);
	struct kvp_manager_config mc;
	uint64_t v = 0;

	ck_assert_int_eq(kvp_evict_peek(m, &v), -ENOENT);
	ck_assert_int_eq(kvp_evict_peek(m, NULL), -EINVAL);
	ck_assert_int_eq(kvp_evict_peek(NULL, &v), -EINVAL);
	/* 1: oldest, 2 tokens; 2: longest; 3: newest, lowest priority. */
	create_ok(m, 1, 2);
	create_ok(m, 2, 5 * BT);
	create_ok(m, 3, 2);
	ck_assert_int_eq(kvp_seq_set_priority(m, 3, -5), 0);
	append_ok(m, 1, 0);
	append_ok(m, 1, 0); /* 1: two more accesses, now the newest */
	ck_assert_int_eq(kvp_evict_peek(m, &v), 0);
	ck_assert_uint_eq(v, 2);
	ck_assert_int_eq(kvp_manager_set_policy(m, KVP_EVICT_PRIORITY), 0);
	ck_assert_int_eq(kvp_evict_peek(m, &v), 0);
	ck_assert_uint_eq(v, 3);
	ck_assert_int_eq(kvp_manager_set_policy(m, KVP_EVICT_LONGEST), 0);
	ck_assert_int_eq(kvp_evict_peek(m, &v), 0);
	ck_assert_uint_eq(v, 2);
	ck_assert_int_eq(kvp_manager_set_policy(m, KVP_EVICT_LFU), 0);
	ck_assert_int_eq(kvp_evict_peek(m, &v), 0);
	ck_assert_uint_eq(v, 2); /* 2 and 3 one access each; 2 older */
	/* A bad policy changes nothing. */
	ck_assert_int_eq(kvp_manager_set_policy(m, (enum kvp_policy)4),
			 -EINVAL);
	ck_assert_int_eq(kvp_manager_set_policy(NULL, KVP_EVICT_LRU), -EINVAL);
	ck_assert_int_eq(kvp_manager_get_config(m, &mc), 0);
	ck_assert_int_eq(mc.policy, KVP_EVICT_LFU);
	/* Peeking evicts nothing; evicting takes the one named. */
	ck_assert_int_eq(kvp_evict_peek(m, &v), 0);
	ck_assert_uint_eq(mstats(m).sequences, 3);
	ck_assert_int_eq(kvp_evict(m, &v), 0);
	ck_assert_uint_eq(v, 2);
	/* A fork is an access of its source. */
	ck_assert_int_eq(kvp_manager_set_policy(m, KVP_EVICT_LRU), 0);
	ck_assert_int_eq(kvp_evict_peek(m, &v), 0);
	ck_assert_uint_eq(v, 3);
	fork_ok(m, 3, 4);
	ck_assert_int_eq(kvp_evict_peek(m, &v), 0);
	ck_assert_uint_eq(v, 1);
	mcheck_ok(m);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

START_TEST(test_manager_seqs)
{
	struct kvp_pool *p = mkpool_nc(256);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);
	struct kvp_manager *other = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);
	uint64_t ids[64];
	uint32_t n = 99;

	ck_assert_int_eq(kvp_manager_seqs(m, NULL, 0, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvp_manager_seqs(m, NULL, 1, &n), -EINVAL);
	ck_assert_int_eq(kvp_manager_seqs(m, ids, 1, NULL), -EINVAL);
	ck_assert_int_eq(kvp_manager_seqs(NULL, ids, 1, &n), -EINVAL);
	/* Id 0 (the map's special slot) included. */
	for (uint64_t s = 0; s < 40; s++)
		create_ok(m, s * 7, 1);
	create_ok(other, 1000, 1);
	for (uint64_t s = 0; s < 40; s += 2)
		free_ok(m, s * 7);
	ck_assert_int_eq(kvp_manager_seqs(m, ids, 19, &n), -ENOBUFS);
	ck_assert_uint_eq(n, 20);
	ck_assert_uint_eq(last_error(-ENOBUFS).requested, 20);
	ck_assert_int_eq(kvp_manager_seqs(m, ids, ARRAY_SIZE(ids), &n), 0);
	ck_assert_uint_eq(n, 20);
	qsort(ids, n, sizeof(*ids), cmp_u64);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_uint_eq(ids[i], (2 * i + 1) * 7);
	kvp_manager_destroy(m);
	kvp_manager_destroy(other);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_append_ex)
{
	struct kvp_pool *p = mkpool_nc(64);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);
	struct kvp_append_info in, was;
	struct kvp_copy cow[1];
	uint32_t ids[8], ncow = 9;

	create_ok(m, 1, 0);
	memset(&was, 0x5A, sizeof(was));
	in = was;
	ck_assert_int_eq(kvp_seq_append_ex(m, 1, 1, NULL, 0, NULL, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvp_seq_append_ex(m, 9, 1, NULL, 0, NULL, &in),
			 -ENOENT);
	ck_assert(memcmp(&in, &was, sizeof(in)) == 0);
	ck_assert_int_eq(kvp_seq_append_ex(m, 1, 0, NULL, 0, NULL, &in), 0);
	ck_assert_uint_eq(in.last_block, KVP_NO_BLOCK);
	ck_assert_uint_eq(in.num_tokens, 0);
	ck_assert_uint_eq(in.new_blocks, 0);
	for (uint32_t t = 1; t <= 2 * BT + 1; t++) {
		ck_assert_int_eq(kvp_seq_append_ex(m, 1, 1, NULL, 0, NULL, &in),
				 0);
		ck_assert_uint_eq(blocks_ok(m, 1, ids, 8), (t + BT - 1) / BT);
		ck_assert_uint_eq(in.last_block, ids[(t - 1) / BT]);
		ck_assert_uint_eq(in.num_tokens, t);
		ck_assert_uint_eq(in.new_blocks, t % BT == 1 ? 1 : 0);
	}
	/* Several blocks at once, then a copy-on-write. */
	ck_assert_int_eq(kvp_seq_append_ex(m, 1, 2 * BT, NULL, 0, NULL, &in),
			 0);
	ck_assert_uint_eq(in.new_blocks, 2);
	ck_assert_uint_eq(in.num_tokens, 4 * BT + 1);
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_append_ex(m, 2, 1, cow, 1, &ncow, &in), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(in.new_blocks, 1);
	ck_assert_uint_eq(in.last_block, cow[0].dst);
	ck_assert_int_eq(kvp_seq_append_ex(m, 1, 1, cow, 1, NULL, &in), 0);
	ck_assert_uint_eq(in.new_blocks, 0); /* the source's block is its own */
	ck_assert_uint_eq(in.last_block, cow[0].src);
	mcheck_ok(m);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_reserve)
{
	struct kvp_pool *p = mkpool_nc(1024);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);
	struct kvp_copy cow[1];
	struct kvp_pool_stats before, after;
	uint32_t ids[1024];

	ck_assert_int_eq(kvp_seq_reserve(NULL, 1, 1), -EINVAL);
	ck_assert_int_eq(kvp_seq_reserve(m, 1, 1), -ENOENT);
	create_ok(m, 1, 5);
	before = pstats(p);
	ck_assert_int_eq(kvp_seq_reserve(m, 1, 1025 * BT), -ENOSPC);
	ck_assert_uint_eq(last_error(-ENOSPC).requested, 1025);
	/* A reservation takes no blocks from the pool. */
	ck_assert_int_eq(kvp_seq_reserve(m, 1, 800 * BT), 0);
	after = pstats(p);
	expect_pool_same(&before, &after);
	ck_assert_int_eq(kvp_seq_reserve(m, 1, 3), 0); /* below: no-op */
	mcheck_ok(m);
	for (uint32_t t = 0; t < 300 * BT; t++)
		append_ok(m, 1, 1);
	ck_assert_uint_eq(blocks_ok(m, 1, ids, 1024), 301);
	mcheck_ok(m);
	/* A fork does not inherit it; the source keeps it; a shared,
	 * partly filled last chunk is copied at the reservation. */
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_reserve(m, 2, 600 * BT), 0);
	mcheck_ok(m);
	for (uint32_t t = 0; t < 50 * BT; t++)
		ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, NULL), 0);
	for (uint32_t t = 0; t < 50 * BT; t++)
		ck_assert_int_eq(kvp_seq_append(m, 1, 1, cow, 1, NULL), 0);
	mcheck_ok(m);
	/* A shrink ends the reservation; the sequences stay sound. */
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 10 * BT), 0);
	mcheck_ok(m);
	for (uint32_t t = 0; t < 100 * BT; t++)
		append_ok(m, 1, 1);
	ck_assert_int_eq(kvp_seq_reserve(m, 2, 900 * BT), 0);
	ck_assert_int_eq(kvp_seq_stream_trim(m, 2, BT, 4 * BT, NULL), 0);
	mcheck_ok(m);
	for (uint32_t t = 0; t < 20 * BT; t++)
		append_ok(m, 2, 1);
	/* Freed with spares in place, and on an empty sequence. */
	ck_assert_int_eq(kvp_seq_reserve(m, 1, 1000 * BT), 0);
	free_ok(m, 1);
	create_ok(m, 3, 0);
	ck_assert_int_eq(kvp_seq_reserve(m, 3, 100 * BT), 0);
	mcheck_ok(m);
	kvp_manager_destroy(m);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	ck_assert_uint_eq(pstats(p).used, 0);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_prefix_match)
{
	struct kvp_pool *p = mkpool_nc(8);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU, 0, 0, KVP_PREFIX_CACHE);
	struct kvp_manager *plain = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);
	struct kvp_manager *other =
		mkmgr(p, KVP_EVICT_LRU, 0, 0, KVP_PREFIX_CACHE);
	uint32_t tokens[4 * BT], n = 99, cached;
	struct kvp_hash h[5];
	struct kvp_stats before, after;
	uint32_t ids[8];

	for (uint32_t i = 0; i < 4 * BT; i++)
		tokens[i] = i * 7 + 1;
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tokens,
					 4 * BT, BT, h),
			 4);
	memset(&h[4], 0x77, sizeof(h[4]));
	ck_assert_int_eq(kvp_prefix_match(NULL, h, 4, &n), -EINVAL);
	ck_assert_int_eq(kvp_prefix_match(m, NULL, 4, &n), -EINVAL);
	ck_assert_int_eq(kvp_prefix_match(m, h, 4, NULL), -EINVAL);
	ck_assert_int_eq(kvp_prefix_match(plain, h, 4, &n), -EINVAL);
	ck_assert_uint_eq(n, 99);
	ck_assert_int_eq(kvp_prefix_match(m, NULL, 0, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvp_prefix_match(m, h, 4, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* Three blocks committed: a match of 3, of 2 from a shorter list,
	 * of 0 when the first misses; another manager's cache is not ours. */
	create_ok(m, 1, 3 * BT);
	ck_assert_int_eq(kvp_seq_commit(m, 1, h, 3), 3);
	before = mstats(m);
	ck_assert_int_eq(kvp_prefix_match(m, h, 5, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(kvp_prefix_match(m, h, 2, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(kvp_prefix_match(m, h + 1, 2, &n), 0);
	ck_assert_uint_eq(n, 2); /* a lookup by hash: h[1], h[2] */
	ck_assert_int_eq(kvp_prefix_match(m, h + 3, 1, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvp_prefix_match(other, h, 3, &n), 0);
	ck_assert_uint_eq(n, 0);
	/* Idle cached blocks still match; nothing moved. */
	free_ok(m, 1);
	ck_assert_int_eq(kvp_prefix_match(m, h, 4, &n), 0);
	ck_assert_uint_eq(n, 3);
	after = mstats(m);
	ck_assert_uint_eq(after.prefix_queries, before.prefix_queries);
	ck_assert_uint_eq(after.prefix_hits, before.prefix_hits);
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, h, 4, 4 * BT, &cached),
			 0);
	ck_assert_uint_eq(cached, 3 * BT); /* what the match said */
	free_ok(m, 2);
	/* Evicted (a raw allocation of the whole pool): no match. */
	ck_assert_int_eq(kvp_pool_alloc(p, 8, ids), 0);
	ck_assert_int_eq(kvp_prefix_match(m, h, 4, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvp_pool_free(p, ids, 8), 0);
	kvp_manager_destroy(m);
	kvp_manager_destroy(plain);
	kvp_manager_destroy(other);
	kvp_pool_unref(p);
}
END_TEST

START_TEST(test_duplicate_id_first)
{
	struct kvp_pool *p = mkpool_nc(4);
	struct kvp_manager *m = mkmgr(p, KVP_EVICT_LRU, 0, 0, 0);

	create_ok(m, 1, BT);
	ck_assert_int_eq(kvp_seq_create(m, 1, 100 * BT), -EEXIST);
	ck_assert_int_eq(kvp_seq_create(m, 2, 100 * BT), -ENOSPC);
	expect_gone(m, 2);
	mcheck_ok(m);
	kvp_manager_destroy(m);
	kvp_pool_unref(p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("control");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_last_error);
	tcase_add_test(tc, test_last_error_per_thread);
	tcase_add_test(tc, test_empty_pool);
	tcase_add_test(tc, test_k_only);
	tcase_add_test(tc, test_get_config);
	tcase_add_test(tc, test_exact_limits);
	tcase_add_test(tc, test_policy_and_peek);
	tcase_add_test(tc, test_manager_seqs);
	tcase_add_test(tc, test_append_ex);
	tcase_add_test(tc, test_reserve);
	tcase_add_test(tc, test_duplicate_id_first);
	tcase_add_test(tc, test_prefix_match);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
