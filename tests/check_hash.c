/* SPDX-License-Identifier: MIT */
/*
 * check_hash.c - kvp_hash_blocks: arguments, chaining, keys, tagging.
 * tests/test_hash.py checks the encoding itself against Python's hashlib.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#define BT 16
#define NTOK (4 * BT + 5) /* four full blocks and a partial one */

static uint32_t tokens[NTOK];
static const enum kvp_hash_algo algos[] = {KVP_HASH_SHA256, KVP_HASH_XXH3_128};

static void fill_tokens(void)
{
	for (uint32_t i = 0; i < NTOK; i++)
		tokens[i] = i * 2654435761u;
}

static int eq(const struct kvp_hash *a, const struct kvp_hash *b)
{
	return memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

START_TEST(test_bad_args)
{
	struct kvp_hash out[4];
	struct kvp_hash_keys bad = {.salt = NULL, .salt_len = 3};

	ck_assert_int_eq(kvp_hash_blocks((enum kvp_hash_algo)7, NULL, NULL,
					 tokens, NTOK, BT, out),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tokens,
					 NTOK, 0, out),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, NULL, 16,
					 BT, out),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tokens,
					 16, BT, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, &bad, tokens,
					 16, BT, out),
			 -EINVAL);
	/* Nothing to hash: fine, with or without buffers. */
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, NULL, 0,
					 BT, NULL),
			 0);
	ck_assert_int_eq(kvp_hash_blocks(KVP_HASH_SHA256, NULL, NULL, tokens,
					 BT - 1, BT, NULL),
			 0);
}
END_TEST

START_TEST(test_full_blocks_only)
{
	enum kvp_hash_algo algo = algos[_i];
	struct kvp_hash out[5];

	memset(out, 0xAB, sizeof(out));
	ck_assert_int_eq(kvp_hash_blocks(algo, NULL, NULL, tokens, NTOK, BT,
					 out),
			 4);
	/* The partial block is not hashed: out[4] untouched. */
	for (size_t i = 0; i < sizeof(out[4].b); i++)
		ck_assert_uint_eq(out[4].b[i], 0xAB);
	/* All distinct, and XXH3 fills 16 bytes only. */
	for (int i = 0; i < 4; i++) {
		for (int j = i + 1; j < 4; j++)
			ck_assert(!eq(&out[i], &out[j]));
		if (algo == KVP_HASH_XXH3_128)
			for (int k = 16; k < 32; k++)
				ck_assert_uint_eq(out[i].b[k], 0);
	}
}
END_TEST

START_TEST(test_chaining)
{
	enum kvp_hash_algo algo = algos[_i];
	struct kvp_hash_keys keys = {.salt = "tenant-7", .salt_len = 8,
				     .lora = "sql-adapter"};
	struct kvp_hash all[4], head[2], tail[2];

	ck_assert_int_eq(kvp_hash_blocks(algo, NULL, &keys, tokens, 4 * BT, BT,
					 all),
			 4);
	ck_assert_int_eq(kvp_hash_blocks(algo, NULL, &keys, tokens, 2 * BT, BT,
					 head),
			 2);
	ck_assert_int_eq(kvp_hash_blocks(algo, &head[1], &keys,
					 tokens + 2 * BT, 2 * BT, BT, tail),
			 2);
	ck_assert(eq(&all[0], &head[0]) && eq(&all[1], &head[1]));
	ck_assert(eq(&all[2], &tail[0]) && eq(&all[3], &tail[1]));
	/* Deterministic. */
	ck_assert_int_eq(kvp_hash_blocks(algo, NULL, &keys, tokens, 2 * BT, BT,
					 tail),
			 2);
	ck_assert(eq(&tail[0], &head[0]) && eq(&tail[1], &head[1]));
}
END_TEST

START_TEST(test_token_change)
{
	enum kvp_hash_algo algo = algos[_i];
	struct kvp_hash a[4], b[4];

	kvp_hash_blocks(algo, NULL, NULL, tokens, 4 * BT, BT, a);
	tokens[2 * BT + 3] ^= 1;
	kvp_hash_blocks(algo, NULL, NULL, tokens, 4 * BT, BT, b);
	tokens[2 * BT + 3] ^= 1;
	ck_assert(eq(&a[0], &b[0]) && eq(&a[1], &b[1]));
	ck_assert(!eq(&a[2], &b[2]) && !eq(&a[3], &b[3]));
}
END_TEST

START_TEST(test_salts)
{
	enum kvp_hash_algo algo = algos[_i];
	struct kvp_hash_keys s1 = {.salt = "alice", .salt_len = 5};
	struct kvp_hash_keys s2 = {.salt = "bob", .salt_len = 3};
	struct kvp_hash_keys empty = {.salt = "", .salt_len = 0};
	struct kvp_hash none[2], a[2], a2[2], b[2], e[2], cont_salt[1],
		cont_none[1];

	kvp_hash_blocks(algo, NULL, NULL, tokens, 2 * BT, BT, none);
	kvp_hash_blocks(algo, NULL, &s1, tokens, 2 * BT, BT, a);
	kvp_hash_blocks(algo, NULL, &s1, tokens, 2 * BT, BT, a2);
	kvp_hash_blocks(algo, NULL, &s2, tokens, 2 * BT, BT, b);
	kvp_hash_blocks(algo, NULL, &empty, tokens, 2 * BT, BT, e);
	/* Different salts never share a block, same salts do. */
	ck_assert(!eq(&a[0], &b[0]) && !eq(&a[1], &b[1]));
	ck_assert(!eq(&a[0], &none[0]) && !eq(&a[1], &none[1]));
	ck_assert(eq(&a[0], &a2[0]) && eq(&a[1], &a2[1]));
	/* An empty salt is no salt. */
	ck_assert(eq(&e[0], &none[0]));
	/* The salt enters through the root only. */
	kvp_hash_blocks(algo, &a[0], &s1, tokens + BT, BT, BT, cont_salt);
	kvp_hash_blocks(algo, &a[0], NULL, tokens + BT, BT, BT, cont_none);
	ck_assert(eq(&cont_salt[0], &cont_none[0]));
	ck_assert(eq(&cont_salt[0], &a[1]));
}
END_TEST

START_TEST(test_lora_and_tagging)
{
	enum kvp_hash_algo algo = algos[_i];
	struct kvp_hash_keys l1 = {.lora = "math"}, l2 = {.lora = "code"};
	struct kvp_hash_keys lnone = {.lora = ""};
	struct kvp_hash_keys salt_ab = {.salt = "ab", .salt_len = 2};
	struct kvp_hash_keys salt_a_lora_b = {.salt = "a", .salt_len = 1,
					      .lora = "b"};
	struct kvp_hash_keys lora_as_salt = {.salt = "math", .salt_len = 4};
	struct kvp_hash x[2], y[2], z[2], w[2];

	kvp_hash_blocks(algo, NULL, &l1, tokens, 2 * BT, BT, x);
	kvp_hash_blocks(algo, NULL, &l2, tokens, 2 * BT, BT, y);
	ck_assert(!eq(&x[0], &y[0]) && !eq(&x[1], &y[1]));
	/* The LoRA name enters every block, also after a parent. */
	kvp_hash_blocks(algo, &x[0], &l2, tokens + BT, BT, BT, z);
	ck_assert(!eq(&z[0], &x[1]));
	/* "" is no LoRA. */
	kvp_hash_blocks(algo, NULL, &lnone, tokens, 2 * BT, BT, z);
	kvp_hash_blocks(algo, NULL, NULL, tokens, 2 * BT, BT, w);
	ck_assert(eq(&z[0], &w[0]));
	/* Tagged, length-prefixed fields: no concatenation collides. */
	kvp_hash_blocks(algo, NULL, &salt_ab, tokens, BT, BT, z);
	kvp_hash_blocks(algo, NULL, &salt_a_lora_b, tokens, BT, BT, w);
	ck_assert(!eq(&z[0], &w[0]));
	kvp_hash_blocks(algo, NULL, &lora_as_salt, tokens, BT, BT, z);
	ck_assert(!eq(&z[0], &x[0]));
}
END_TEST

/* Block boundaries are part of the input: 2 x 8 tokens != 1 x 16. */
START_TEST(test_block_size_matters)
{
	enum kvp_hash_algo algo = algos[_i];
	struct kvp_hash a[2], b[1];

	kvp_hash_blocks(algo, NULL, NULL, tokens, 16, 8, a);
	kvp_hash_blocks(algo, NULL, NULL, tokens, 16, 16, b);
	ck_assert(!eq(&a[1], &b[0]));
}
END_TEST

START_TEST(test_xxh3_seed)
{
	struct kvp_hash secret[1], s1[1], s1b[1], s2[1];

	kvp_hash_blocks(KVP_HASH_XXH3_128, NULL, NULL, tokens, BT, BT, secret);
	ck_assert_int_eq(kvp_hash_set_xxh3_seed(42), 0);
	kvp_hash_blocks(KVP_HASH_XXH3_128, NULL, NULL, tokens, BT, BT, s1);
	kvp_hash_blocks(KVP_HASH_XXH3_128, NULL, NULL, tokens, BT, BT, s1b);
	ck_assert_int_eq(kvp_hash_set_xxh3_seed(43), 0);
	kvp_hash_blocks(KVP_HASH_XXH3_128, NULL, NULL, tokens, BT, BT, s2);
	ck_assert(eq(&s1[0], &s1b[0]));
	ck_assert(!eq(&s1[0], &s2[0]));
	ck_assert(!eq(&s1[0], &secret[0]));
}
END_TEST

static Suite *hash_suite(void)
{
	Suite *s = suite_create("hash");
	TCase *tc = tcase_create("hash");

	fill_tokens();
	tcase_add_test(tc, test_bad_args);
	tcase_add_loop_test(tc, test_full_blocks_only, 0, 2);
	tcase_add_loop_test(tc, test_chaining, 0, 2);
	tcase_add_loop_test(tc, test_token_change, 0, 2);
	tcase_add_loop_test(tc, test_salts, 0, 2);
	tcase_add_loop_test(tc, test_lora_and_tagging, 0, 2);
	tcase_add_loop_test(tc, test_block_size_matters, 0, 2);
	/* Last: it switches XXH3 to a seed for the rest of the process. */
	tcase_add_test(tc, test_xxh3_seed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(hash_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
