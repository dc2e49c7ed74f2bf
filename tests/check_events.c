/* SPDX-License-Identifier: MIT */
/*
 * check_events.c - the event fields kvp_seq_commit_ex and
 * kvp_manager_set_event_medium add, their numbering and order, argument
 * checks of the event and sha256_cbor functions.  The sha256_cbor values
 * themselves are checked against cbor2 by tests/test_cbor_hash.py; the
 * wire format by tests/test_events_encode.py.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "check_common.h"

#define BT CHECK_BLOCK_TOKENS
#define MAXEV 64

/* What the callback saw, copied (the event's arrays live for the call). */
struct seen {
	enum kvp_event_type type;
	uint64_t seq;
	uint32_t nhashes, num_tokens, nextra;
	int64_t lora_id;
	bool has_tokens, has_parent;
	uint32_t first_token;
	struct kvp_hash first, parent;
	char lora[32], medium[16], key0[32];
};

static struct seen seen[MAXEV];
static unsigned nseen;

static void record(const struct kvp_event *ev, void *arg)
{
	struct seen *s = &seen[nseen++];

	(void)arg;
	ck_assert_uint_lt(nseen, MAXEV);
	memset(s, 0, sizeof(*s));
	s->type = ev->type;
	s->seq = ev->seq;
	s->nhashes = ev->nhashes;
	s->num_tokens = ev->num_tokens;
	s->lora_id = ev->lora_id;
	s->nextra = ev->nextra_keys;
	s->has_tokens = ev->token_ids != NULL;
	s->has_parent = ev->parent != NULL;
	if (ev->token_ids)
		s->first_token = ev->token_ids[0];
	if (ev->nhashes)
		s->first = ev->hashes[0];
	if (ev->parent)
		s->parent = *ev->parent;
	if (ev->lora_name)
		snprintf(s->lora, sizeof(s->lora), "%s", ev->lora_name);
	if (ev->medium)
		snprintf(s->medium, sizeof(s->medium), "%s", ev->medium);
	if (ev->nextra_keys)
		snprintf(s->key0, sizeof(s->key0), "%s", ev->extra_keys[0]);
}

static struct kvp_manager *make_mgr(uint32_t blocks)
{
	struct kvp_pool_config pc = make_cfg(blocks, 0, 0, NULL);
	struct kvp_manager_config mc = {0};
	struct kvp_pool *pool;
	struct kvp_manager *m;

	ck_assert_int_eq(kvp_pool_create(&pc, &pool), 0);
	mc.pool = pool;
	mc.flags = KVP_PREFIX_CACHE;
	ck_assert_int_eq(kvp_manager_create(&mc, &m), 0);
	kvp_pool_unref(pool);
	ck_assert_int_eq(kvp_manager_set_event_cb(m, record, NULL), 0);
	nseen = 0;
	return m;
}

START_TEST(test_commit_ex_fields)
{
	struct kvp_manager *m = make_mgr(64);
	uint32_t tok[4 * BT];
	struct kvp_hash h[4];
	const char *keys[] = {"sql-lora", "salt"};
	struct kvp_commit_info info = {0};
	uint32_t cached;

	for (uint32_t i = 0; i < 4 * BT; i++)
		tok[i] = 1000 + i;
	ck_assert_int_eq(kvp_hash_set_cbor_seed("0"), 0);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256_CBOR, NULL, NULL, tok,
					 4 * BT, BT, h),
			 4);
	ck_assert_int_eq(kvp_manager_set_event_medium(m, "CPU"), 0);
	/* Sequence 1 commits blocks 0-1 (no info: no tokens, no LoRA). */
	ck_assert_int_eq(kvp_seq_create_cached(m, 1, h, 2, 2 * BT, &cached), 0);
	ck_assert_int_eq(kvp_seq_commit(m, 1, h, 2), 2);
	/* Sequence 2 hits them and commits blocks 2-3 with info: the event
	 * carries tokens from block 2 on, and block 1 as parent. */
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, h, 4, 4 * BT + 1,
					       &cached),
			 0);
	ck_assert_uint_eq(cached, 2 * BT);
	info.tokens = tok;
	info.ntokens = 4 * BT;
	info.lora_name = "sql-lora";
	info.lora_id = 7;
	info.extra_keys = keys;
	info.nextra_keys = 2;
	ck_assert_int_eq(kvp_seq_commit_ex(m, 2, h, 4, &info), 2);
	ck_assert_uint_eq(nseen, 2);
	ck_assert_int_eq(seen[0].type, KVP_EVENT_STORED);
	ck_assert_uint_eq(seen[0].seq, 0);
	ck_assert(!seen[0].has_tokens && !seen[0].has_parent);
	ck_assert_int_eq(seen[0].lora_id, -1);
	ck_assert_str_eq(seen[0].medium, "CPU");
	ck_assert_uint_eq(seen[1].seq, 1);
	ck_assert_uint_eq(seen[1].nhashes, 2);
	ck_assert_uint_eq(seen[1].num_tokens, 2 * BT);
	ck_assert(seen[1].has_tokens && seen[1].has_parent);
	ck_assert_uint_eq(seen[1].first_token, 1000 + 2 * BT);
	ck_assert(memcmp(&seen[1].first, &h[2], sizeof(h[2])) == 0);
	ck_assert(memcmp(&seen[1].parent, &h[1], sizeof(h[1])) == 0);
	ck_assert_str_eq(seen[1].lora, "sql-lora");
	ck_assert_int_eq(seen[1].lora_id, 7);
	ck_assert_uint_eq(seen[1].nextra, 2);
	ck_assert_str_eq(seen[1].key0, "sql-lora");
	/* Freed and reset: CLEARED, numbered after everything before. */
	ck_assert_int_eq(kvp_seq_free(m, 1), 0);
	ck_assert_int_eq(kvp_seq_free(m, 2), 0);
	kvp_thread_flush();
	ck_assert_int_eq(kvp_prefix_reset(m), 0);
	ck_assert_int_eq(seen[nseen - 1].type, KVP_EVENT_CLEARED);
	ck_assert_uint_eq(seen[nseen - 1].seq, nseen - 1);
	kvp_manager_destroy(m);
}
END_TEST

START_TEST(test_removed_numbered_after_stored)
{
	/* 8 blocks: a second 8-block prompt evicts the first one's. */
	struct kvp_manager *m = make_mgr(8);
	uint32_t tok[8 * BT];
	struct kvp_hash a[8], b[8];

	for (uint32_t i = 0; i < 8 * BT; i++)
		tok[i] = i;
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tok,
					 8 * BT, BT, a),
			 8);
	tok[0] = 99;
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tok,
					 8 * BT, BT, b),
			 8);
	ck_assert_int_eq(kvp_seq_create_cached(m, 1, a, 8, 8 * BT, NULL), 0);
	ck_assert_int_eq(kvp_seq_commit(m, 1, a, 8), 8);
	ck_assert_int_eq(kvp_seq_free(m, 1), 0);
	kvp_thread_flush();
	ck_assert_int_eq(kvp_seq_create_cached(m, 2, b, 8, 8 * BT, NULL), 0);
	ck_assert_uint_ge(nseen, 2);
	for (unsigned i = 0; i < nseen; i++)
		ck_assert_uint_eq(seen[i].seq, i);
	ck_assert_int_eq(seen[0].type, KVP_EVENT_STORED);
	for (unsigned i = 1; i < nseen; i++) {
		ck_assert_int_eq(seen[i].type, KVP_EVENT_REMOVED);
		ck_assert(!seen[i].has_tokens);
	}
	ck_assert_int_eq(kvp_seq_free(m, 2), 0);
	kvp_manager_destroy(m);
}
END_TEST

START_TEST(test_bad_args)
{
	struct kvp_manager *m = make_mgr(16);
	struct kvp_hash h[2], out;
	uint32_t tok[2 * BT] = {0};
	struct kvp_commit_info info = {0};
	const char *nullkey[] = {NULL};

	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tok,
					 2 * BT, BT, h),
			 2);
	ck_assert_int_eq(kvp_seq_create_cached(m, 1, h, 2, 2 * BT, NULL), 0);
	/* Bad info: nothing committed, no event. */
	info.ntokens = 5; /* tokens NULL */
	ck_assert_int_eq(kvp_seq_commit_ex(m, 1, h, 2, &info), -EINVAL);
	info.ntokens = 0;
	info.nextra_keys = 1; /* extra_keys NULL */
	ck_assert_int_eq(kvp_seq_commit_ex(m, 1, h, 2, &info), -EINVAL);
	info.nextra_keys = 0;
	info.tokens = tok;
	info.ntokens = BT; /* fewer than the 2 blocks cover */
	ck_assert_int_eq(kvp_seq_commit_ex(m, 1, h, 2, &info), -EINVAL);
	ck_assert_uint_eq(nseen, 0);
	ck_assert_int_eq(kvp_seq_commit_ex(NULL, 1, h, 2, NULL), -EINVAL);
	ck_assert_int_eq(kvp_seq_commit_ex(m, 1, NULL, 2, NULL), -EINVAL);
	ck_assert_int_eq(kvp_seq_commit_ex(m, 9, h, 2, NULL), -ENOENT);
	/* info NULL is kvp_seq_commit. */
	ck_assert_int_eq(kvp_seq_commit_ex(m, 1, h, 2, NULL), 2);
	ck_assert_uint_eq(nseen, 1);
	ck_assert_int_eq(kvp_manager_set_event_medium(NULL, "GPU"), -EINVAL);
	ck_assert_int_eq(kvp_manager_set_event_medium(m, "0123456789abcdef"),
			 -EINVAL);
	ck_assert_int_eq(kvp_manager_set_event_medium(m, NULL), 0);
	/* sha256_cbor helpers. */
	ck_assert_int_eq(kvp_hash_set_cbor_seed(NULL), -EINVAL);
	ck_assert_int_eq(kvp_hash_cbor_seed_root(NULL, &out), -EINVAL);
	ck_assert_int_eq(kvp_hash_cbor_seed_root("0", NULL), -EINVAL);
	ck_assert_int_eq(kvp_hash_cbor_block(NULL, tok, 1, NULL, 0, &out),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_cbor_block(&h[0], NULL, 1, NULL, 0, &out),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_cbor_block(&h[0], tok, 1, NULL, 1, &out),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_cbor_block(&h[0], tok, 1, nullkey, 1, &out),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_cbor_block(&h[0], tok, 1, NULL, 0, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_cbor_block(&h[0], NULL, 0, NULL, 0, &out),
			 0);
	ck_assert_int_eq(kvp_seq_free(m, 1), 0);
	kvp_manager_destroy(m);
}
END_TEST

START_TEST(test_hash_to_u64)
{
	struct kvp_hash h;

	for (int i = 0; i < 32; i++)
		h.b[i] = (uint8_t)i;
	/* The last 8 bytes, big-endian. */
	ck_assert_uint_eq(kvp_hash_to_u64(&h), 0x18191a1b1c1d1e1full);
	ck_assert_uint_eq(kvp_hash_to_u64(NULL), 0);
}
END_TEST

START_TEST(test_cbor_profile_chains_and_root)
{
	uint32_t tok[3 * BT];
	struct kvp_hash all[3], tail[2], root, one;
	struct kvp_hash_keys salt = {.salt = "s", .salt_len = 1};

	for (uint32_t i = 0; i < 3 * BT; i++)
		tok[i] = i * 7;
	ck_assert_int_eq(kvp_hash_set_cbor_seed("42"), 0);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256_CBOR, NULL, NULL, tok,
					 3 * BT, BT, all),
			 3);
	/* From the root = from NONE_HASH as the explicit parent. */
	ck_assert_int_eq(kvp_hash_cbor_seed_root("42", &root), 0);
	ck_assert_int_eq(kvp_hash_cbor_block(&root, tok, BT, NULL, 0, &one),
			 0);
	ck_assert(memcmp(&one, &all[0], sizeof(one)) == 0);
	/* Chaining: [a, b, c] from the root = [b, c] from a. */
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256_CBOR, &all[0], NULL,
					 tok + BT, 2 * BT, BT, tail),
			 2);
	ck_assert(memcmp(tail, &all[1], sizeof(tail)) == 0);
	/* The salt changes the root block only when hashing from the root. */
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256_CBOR, NULL, &salt,
					 tok, BT, BT, &one),
			 1);
	ck_assert(memcmp(&one, &all[0], sizeof(one)) != 0);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256_CBOR, &all[0], &salt,
					 tok + BT, 2 * BT, BT, tail),
			 2);
	ck_assert(memcmp(tail, &all[1], sizeof(tail)) == 0);
	/* Another seed, another root. */
	ck_assert_int_eq(kvp_hash_set_cbor_seed("43"), 0);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256_CBOR, NULL, NULL, tok,
					 BT, BT, &one),
			 1);
	ck_assert(memcmp(&one, &all[0], sizeof(one)) != 0);
}
END_TEST

/* Hashing from the root while another thread changes the seed: every
 * hash is the one of the old seed or of the new one, never a torn root. */
static _Atomic int seed_flips_done;

static void *flip_seeds(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2000; i++)
		ck_assert_int_eq(kvp_hash_set_cbor_seed(i % 2 ? "b" : "a"), 0);
	atomic_store(&seed_flips_done, 1);
	return NULL;
}

START_TEST(test_seed_change_while_hashing)
{
	uint32_t tok[BT] = {1, 2, 3};
	struct kvp_hash ra, rb, ha, hb, h;
	pthread_t t;
	unsigned n = 0;

	ck_assert_int_eq(kvp_hash_cbor_seed_root("a", &ra), 0);
	ck_assert_int_eq(kvp_hash_cbor_seed_root("b", &rb), 0);
	ck_assert_int_eq(kvp_hash_cbor_block(&ra, tok, BT, NULL, 0, &ha), 0);
	ck_assert_int_eq(kvp_hash_cbor_block(&rb, tok, BT, NULL, 0, &hb), 0);
	ck_assert_int_eq(kvp_hash_set_cbor_seed("a"), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, flip_seeds, NULL), 0);
	while (!atomic_load(&seed_flips_done) || n < 100) {
		ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256_CBOR, NULL,
						 NULL, tok, BT, BT, &h),
				 1);
		ck_assert(memcmp(&h, &ha, sizeof(h)) == 0 ||
			  memcmp(&h, &hb, sizeof(h)) == 0);
		n++;
	}
	pthread_join(t, NULL);
}
END_TEST

static Suite *events_suite(void)
{
	Suite *s = suite_create("events");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_commit_ex_fields);
	tcase_add_test(tc, test_removed_numbered_after_stored);
	tcase_add_test(tc, test_bad_args);
	tcase_add_test(tc, test_hash_to_u64);
	tcase_add_test(tc, test_cbor_profile_chains_and_root);
	tcase_add_test(tc, test_seed_change_while_hashing);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(events_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
