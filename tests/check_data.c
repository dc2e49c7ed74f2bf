/* SPDX-License-Identifier: MIT */
/*
 * check_data.c - Check unit tests for the KV data of data-owning pools
 * (kvp_pool_row_bytes, kvp_block_bytes, kvp_block_data, kvp_seq_write,
 * kvp_seq_read, kvp_seq_gather, copy-on-write of bytes, KVP_POOL_ZERO).
 *
 * Every expectation below comes from the documentation in kvpool.h and the
 * block layout of the pool (doc/architecture.md, "The pool"): a block is
 * [layer][K,V][token][head][dim], so the K row of token t
 * (t = pos % block_tokens) of layer l starts at
 * ((l * 2 + 0) * block_tokens + t) * row_bytes and its V row at
 * ((l * 2 + 1) * block_tokens + t) * row_bytes.  Worker threads never call
 * ck_assert; they record their first failure in a buffer that the main
 * thread asserts on.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

#include "check_common.h"

#define BT CHECK_BLOCK_TOKENS /* tokens per block unless a test says */

enum { KV_K = 0, KV_V = 1 };

/* An address kvp_pool_create must not write over *out on failure. */
static char out_sentinel_storage;
#define POOL_SENTINEL ((struct kvp_pool *)(void *)&out_sentinel_storage)

/* ------------------------------------------------------------ helpers */

static const enum kvp_dtype all_dtypes[] = {KVP_F32, KVP_F16, KVP_BF16, KVP_F64,
					    KVP_U8};
#define NDTYPES ((int)ARRAY_SIZE(all_dtypes))

/* Element size of a dtype as documented: F32 4, F16/BF16 2, F64 8, U8 1. */
static size_t elsize(enum kvp_dtype t)
{
	switch (t) {
	case KVP_F32:
		return 4;
	case KVP_F16:
	case KVP_BF16:
		return 2;
	case KVP_F64:
		return 8;
	case KVP_U8:
		return 1;
	}
	ck_abort_msg("unknown dtype %d", (int)t);
	return 0;
}

static size_t lay_row(const struct kvp_layout *l)
{
	return (size_t)l->num_kv_heads * l->head_dim * elsize(l->dtype);
}

static size_t lay_block(const struct kvp_layout *l, uint32_t bt)
{
	return (size_t)l->num_layers * 2 * bt * lay_row(l);
}

/* Offset of a row inside a block: [layer][K,V][token][head][dim]. */
static size_t row_off(uint32_t bt, size_t row, uint32_t layer, int kv,
		      uint32_t tok)
{
	return (((size_t)layer * 2 + (size_t)kv) * bt + tok) * row;
}

/* A pool with an explicit block_tokens; the test fails if it cannot. */
static struct kvp_pool *mkpool_bt(uint32_t num_blocks, uint32_t bt,
				  uint32_t cache_blocks, uint32_t flags,
				  const struct kvp_layout *layout)
{
	struct kvp_pool_config c =
		make_cfg(num_blocks, cache_blocks, flags, layout);
	struct kvp_pool *p = NULL;
	int rc;

	c.block_tokens = bt;
	rc = kvp_pool_create(&c, &p);
	ck_assert_msg(rc == 0,
		      "kvp_pool_create(%u blocks, %u tokens, flags %#x) = %d"
		      " (%s)",
		      num_blocks, bt, flags, rc, kvp_strerror(rc));
	ck_assert_ptr_nonnull(p);
	return p;
}

static struct kvp_manager *mkmgr(struct kvp_pool *p)
{
	struct kvp_manager_config c;

	memset(&c, 0, sizeof(c));
	c.pool = p;
	c.policy = KVP_EVICT_LRU;
	return mkmgr_cfg(&c);
}

/* splitmix64: a byte pattern distinct per key. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Fills buf with bytes derived from (seq, pos, layer, kv, gen); no byte
 * is 0, so a row of data never looks zeroed. */
static void pattern(void *buf, size_t n, uint64_t seq, uint32_t pos,
		    uint32_t layer, int kv, uint32_t gen)
{
	unsigned char *b = buf;
	uint64_t key = mix64(seq) ^ mix64(((uint64_t)pos << 32) | layer) ^
		       mix64(((uint64_t)gen << 1) | (uint64_t)kv);
	uint64_t w = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (i % 8 == 0)
			w = mix64(key + i);
		b[i] = (unsigned char)(w >> (8 * (i % 8)));
		if (b[i] == 0)
			b[i] = 0x5A;
	}
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	ck_assert_ptr_nonnull(p);
	return p;
}

#define tokens_of(m, s) (info_ok_at((m), (s), __LINE__).num_tokens)

#define write_ok(m, s, pos, l, k, v)                                           \
	write_ok_at((m), (s), (pos), (l), (k), (v), __LINE__)
static void write_ok_at(struct kvp_manager *m, uint64_t s, uint32_t pos,
			uint32_t layer, const void *k, const void *v, int line)
{
	int rc = kvp_seq_write(m, s, pos, layer, k, v);

	ck_assert_msg(rc == 0,
		      "line %d: kvp_seq_write(seq %llu, pos %u, layer %u) = %d"
		      " (%s)",
		      line, ULL(s), pos, layer, rc, kvp_strerror(rc));
}

#define read_ok(m, s, pos, l, k, v)                                            \
	read_ok_at((m), (s), (pos), (l), (k), (v), __LINE__)
static void read_ok_at(struct kvp_manager *m, uint64_t s, uint32_t pos,
		       uint32_t layer, void *k, void *v, int line)
{
	int rc = kvp_seq_read(m, s, pos, layer, k, v);

	ck_assert_msg(rc == 0,
		      "line %d: kvp_seq_read(seq %llu, pos %u, layer %u) = %d"
		      " (%s)",
		      line, ULL(s), pos, layer, rc, kvp_strerror(rc));
}

/* Writes the pattern of generation gen to (seq, pos, layer). */
static void write_pat(struct kvp_manager *m, size_t row, uint64_t s,
		      uint32_t pos, uint32_t layer, uint32_t gen, int line)
{
	unsigned char *k = xmalloc(row), *v = xmalloc(row);

	pattern(k, row, s, pos, layer, KV_K, gen);
	pattern(v, row, s, pos, layer, KV_V, gen);
	write_ok_at(m, s, pos, layer, k, v, line);
	free(k);
	free(v);
}

/* Reads (seq, pos, layer) and compares with the pattern that sequence
 * `as` wrote there in generation gen (as != seq: data a fork shares or
 * copied). */
static void expect_pat_as(struct kvp_manager *m, size_t row, uint64_t s,
			  uint64_t as, uint32_t pos, uint32_t layer,
			  uint32_t gen, int line)
{
	unsigned char *k = xmalloc(row), *v = xmalloc(row);
	unsigned char *wk = xmalloc(row), *wv = xmalloc(row);

	memset(k, 0xEE, row);
	memset(v, 0xEE, row);
	read_ok_at(m, s, pos, layer, k, v, line);
	pattern(wk, row, as, pos, layer, KV_K, gen);
	pattern(wv, row, as, pos, layer, KV_V, gen);
	ck_assert_msg(memcmp(k, wk, row) == 0,
		      "line %d: K of seq %llu pos %u layer %u differs from"
		      " what seq %llu wrote (gen %u)",
		      line, ULL(s), pos, layer, ULL(as), gen);
	ck_assert_msg(memcmp(v, wv, row) == 0,
		      "line %d: V of seq %llu pos %u layer %u differs from"
		      " what seq %llu wrote (gen %u)",
		      line, ULL(s), pos, layer, ULL(as), gen);
	free(k);
	free(v);
	free(wk);
	free(wv);
}

static void expect_pat(struct kvp_manager *m, size_t row, uint64_t s,
		       uint32_t pos, uint32_t layer, uint32_t gen, int line)
{
	expect_pat_as(m, row, s, s, pos, layer, gen, line);
}

/* A copy of the raw bytes of blocks ids[0..n). */
static unsigned char *snapshot(struct kvp_pool *p, const uint32_t *ids,
			       uint32_t n)
{
	size_t bb = kvp_block_bytes(p);
	unsigned char *s = xmalloc(bb * n);
	uint32_t i;

	for (i = 0; i < n; i++) {
		const void *d = kvp_block_data(p, ids[i]);

		ck_assert_ptr_nonnull(d);
		memcpy(s + (size_t)i * bb, d, bb);
	}
	return s;
}

#define expect_snapshot(p, ids, n, snap)                                       \
	expect_snapshot_at((p), (ids), (n), (snap), __LINE__)
static void expect_snapshot_at(struct kvp_pool *p, const uint32_t *ids,
			       uint32_t n, const unsigned char *snap, int line)
{
	size_t bb = kvp_block_bytes(p);
	uint32_t i;

	for (i = 0; i < n; i++) {
		const unsigned char *d = kvp_block_data(p, ids[i]);
		size_t j;

		ck_assert_ptr_nonnull(d);
		if (memcmp(d, snap + (size_t)i * bb, bb) == 0)
			continue; /* (one ck_assert per byte is slow) */
		for (j = 0; j < bb; j++)
			ck_assert_msg(d[j] == snap[(size_t)i * bb + j],
				      "line %d: block %u byte %zu changed"
				      " (%#x, was %#x)",
				      line, ids[i], j, d[j],
				      snap[(size_t)i * bb + j]);
	}
}

/* Checks, destroys the manager and the pool: the end of most tests. */
static void finish(struct kvp_manager *m, struct kvp_pool *p)
{
	struct kvp_pool_stats st;
	int rc = kvp_manager_check(m);

	ck_assert_msg(rc == 0, "kvp_manager_check = %d (%s)", rc,
		      kvp_strerror(rc));
	kvp_manager_destroy(m);
	memset(&st, 0, sizeof(st));
	kvp_pool_stats(p, &st);
	ck_assert_msg(st.free == st.total,
		      "after kvp_manager_destroy: free %llu of %llu",
		      ULL(st.free), ULL(st.total));
	rc = kvp_pool_check(p);
	ck_assert_msg(rc == 0, "kvp_pool_check = %d (%s)", rc,
		      kvp_strerror(rc));
	kvp_pool_unref(p);
}

/* ------------------------------------------------------------ sizes */

START_TEST(test_sizes_per_dtype)
{
	static const uint32_t bts[] = {1, 7, 16};
	enum kvp_dtype dt = all_dtypes[_i];
	struct kvp_layout lay = {3, 2, 5, dt};
	size_t es = elsize(dt);
	unsigned b;

	ck_assert_uint_eq(lay_row(&lay), 10 * es);
	for (b = 0; b < ARRAY_SIZE(bts); b++) {
		struct kvp_pool *p =
			mkpool_bt(4, bts[b], 0, KVP_POOL_NOCACHE, &lay);
		struct kvp_manager *m;
		struct kvp_stats st;
		size_t row = (size_t)2 * 5 * es;
		size_t blk = (size_t)3 * 2 * bts[b] * row;

		ck_assert_msg(kvp_pool_row_bytes(p) == row,
			      "dtype %d: row bytes %zu, want %zu", (int)dt,
			      kvp_pool_row_bytes(p), row);
		ck_assert_msg(kvp_block_bytes(p) == blk,
			      "dtype %d, %u tokens: block bytes %zu, want %zu",
			      (int)dt, bts[b], kvp_block_bytes(p), blk);
		ck_assert_uint_eq(kvp_pool_block_tokens(p), bts[b]);
		m = mkmgr(p);
		memset(&st, 0xA5, sizeof(st));
		kvp_manager_stats(m, &st);
		ck_assert_uint_eq(st.bytes_per_block, blk);
		finish(m, p);
	}

	/* Each dimension counts: a single-element layout. */
	{
		struct kvp_layout one = {1, 1, 1, dt};
		struct kvp_pool *p = mkpool_bt(2, 1, 0, KVP_POOL_NOCACHE, &one);

		ck_assert_uint_eq(kvp_pool_row_bytes(p), es);
		ck_assert_uint_eq(kvp_block_bytes(p), 2 * es);
		kvp_pool_unref(p);
	}
}
END_TEST

START_TEST(test_sizes_id_only_and_null)
{
	struct kvp_pool *p = mkpool(4, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager *m = mkmgr(p);
	struct kvp_stats st;
	uint32_t id;

	ck_assert_uint_eq(kvp_pool_row_bytes(p), 0);
	ck_assert_uint_eq(kvp_block_bytes(p), 0);
	for (id = 0; id < 4; id++)
		ck_assert_ptr_null(kvp_block_data(p, id));
	memset(&st, 0xA5, sizeof(st));
	kvp_manager_stats(m, &st);
	ck_assert_uint_eq(st.bytes_per_block, 0);
	finish(m, p);

	ck_assert_uint_eq(kvp_pool_row_bytes(NULL), 0);
	ck_assert_uint_eq(kvp_block_bytes(NULL), 0);
	ck_assert_ptr_null(kvp_block_data(NULL, 0));
	ck_assert_uint_eq(kvp_pool_block_tokens(NULL), 0);
}
END_TEST

START_TEST(test_block_data_range)
{
	static const struct kvp_layout lay = {2, 1, 3, KVP_F32};
	struct kvp_pool *p = mkpool(4, 0, KVP_POOL_NOCACHE, &lay);
	size_t bb = kvp_block_bytes(p);
	unsigned char *d[4];
	uint32_t i, j;

	ck_assert_uint_eq(bb, lay_block(&lay, BT));
	for (i = 0; i < 4; i++) {
		d[i] = kvp_block_data(p, i);
		ck_assert_msg(d[i] != NULL, "kvp_block_data(%u) = NULL", i);
		/* Stable: the same address every time. */
		ck_assert_ptr_eq(kvp_block_data(p, i), d[i]);
	}
	ck_assert_ptr_null(kvp_block_data(p, 4));
	ck_assert_ptr_null(kvp_block_data(p, UINT32_MAX));
	/* The blocks' byte ranges are disjoint. */
	for (i = 0; i < 4; i++)
		for (j = 0; j < 4; j++)
			if (i != j)
				ck_assert_msg(d[i] + bb <= d[j] ||
						      d[j] + bb <= d[i],
					      "blocks %u and %u overlap", i, j);
	/* Each block's bytes are usable. */
	for (i = 0; i < 4; i++)
		memset(d[i], (int)(0x10 + i), bb);
	for (i = 0; i < 4; i++)
		ck_assert(all_bytes(d[i], bb, (unsigned char)(0x10 + i)));
	kvp_pool_unref(p);
}
END_TEST

/* ------------------------------------------------------------ layout */

START_TEST(test_layout_placement)
{
	enum kvp_dtype dt = all_dtypes[_i];
	struct kvp_layout lay = {3, 2, 3, dt};
	struct kvp_pool *p =
		mkpool(8, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay), bb = lay_block(&lay, BT);
	static const uint32_t positions[] = {0, 1, 7, 15, 16, 17, 31, 32, 39};
	unsigned char *k = xmalloc(row), *v = xmalloc(row);
	uint32_t ids[4], n, i, l;

	ck_assert_uint_eq(kvp_pool_row_bytes(p), row);
	ck_assert_uint_eq(kvp_block_bytes(p), bb);
	create_ok(m, 7, 40); /* 3 blocks, the last holds 8 tokens */
	n = blocks_ok(m, 7, ids, 4);
	ck_assert_uint_eq(n, 3);

	for (i = 0; i < ARRAY_SIZE(positions); i++) {
		uint32_t pos = positions[i];
		uint32_t tok = pos % BT;
		const unsigned char *base = kvp_block_data(p, ids[pos / BT]);

		ck_assert_ptr_nonnull(base);
		for (l = 0; l < lay.num_layers; l++) {
			pattern(k, row, 7, pos, l, KV_K, 0);
			pattern(v, row, 7, pos, l, KV_V, 0);
			write_ok(m, 7, pos, l, k, v);
			ck_assert_msg(
				memcmp(base + row_off(BT, row, l, KV_K, tok), k,
				       row) == 0,
				"dtype %d: K of pos %u layer %u is not at"
				" ((l*2+0)*bt + t)*row of block %u",
				(int)dt, pos, l, ids[pos / BT]);
			ck_assert_msg(
				memcmp(base + row_off(BT, row, l, KV_V, tok), v,
				       row) == 0,
				"dtype %d: V of pos %u layer %u is not at"
				" ((l*2+1)*bt + t)*row of block %u",
				(int)dt, pos, l, ids[pos / BT]);
		}
	}

	/* Raw bytes put in place are what kvp_seq_read returns. */
	{
		unsigned char *base = kvp_block_data(p, ids[2]);
		unsigned char *rk = xmalloc(row), *rv = xmalloc(row);

		pattern(base + row_off(BT, row, 2, KV_K, 5), row, 7, 37, 2,
			KV_K, 9);
		pattern(base + row_off(BT, row, 2, KV_V, 5), row, 7, 37, 2,
			KV_V, 9);
		read_ok(m, 7, 37, 2, rk, rv);
		ck_assert_int_eq(
			memcmp(rk, base + row_off(BT, row, 2, KV_K, 5), row),
			0);
		ck_assert_int_eq(
			memcmp(rv, base + row_off(BT, row, 2, KV_V, 5), row),
			0);
		free(rk);
		free(rv);
	}
	free(k);
	free(v);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ write/read */

/*
 * Writes every (pos, layer) of two sequences, one write at a time, and
 * after each write compares every block of both sequences with a model of
 * the raw bytes: exactly the two rows written change.
 */
START_TEST(test_rw_roundtrip)
{
	static const struct kvp_layout lay = {4, 2, 8, KVP_F16};
	struct kvp_pool *p =
		mkpool(16, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay), bb = lay_block(&lay, BT);
	static const uint64_t seqs[2] = {100, 0xFFFFFFFFFFFFFFFFull};
	static const uint32_t ntok[2] = {50, 20};
	uint32_t ids[8], n[2], all[8], nall = 0, i, pos, l;
	unsigned char *model, *k = xmalloc(row), *v = xmalloc(row);
	uint32_t gen;

	for (i = 0; i < 2; i++) {
		create_ok(m, seqs[i], ntok[i]);
		n[i] = blocks_ok(m, seqs[i], ids, 8);
		memcpy(all + nall, ids, n[i] * sizeof(*ids));
		nall += n[i];
	}
	ck_assert_uint_eq(nall, 4 + 2);
	model = snapshot(p, all, nall);
	/* KVP_POOL_ZERO: fresh sequences read as zeros. */
	ck_assert(all_bytes(model, bb * nall, 0));

	for (gen = 1; gen <= 2; gen++) {
		for (i = 0; i < 2; i++) {
			uint32_t first = i ? n[0] : 0;

			for (pos = 0; pos < ntok[i]; pos++) {
				for (l = 0; l < lay.num_layers; l++) {
					size_t at =
						(size_t)(first + pos / BT) * bb;

					pattern(k, row, seqs[i], pos, l, KV_K,
						gen);
					pattern(v, row, seqs[i], pos, l, KV_V,
						gen);
					write_ok(m, seqs[i], pos, l, k, v);
					memcpy(model + at +
						       row_off(BT, row, l, KV_K,
							       pos % BT),
					       k, row);
					memcpy(model + at +
						       row_off(BT, row, l, KV_V,
							       pos % BT),
					       v, row);
					expect_snapshot(p, all, nall, model);
				}
			}
		}
		/* Every read returns the last write of its (pos, layer). */
		for (i = 0; i < 2; i++)
			for (pos = 0; pos < ntok[i]; pos++)
				for (l = 0; l < lay.num_layers; l++)
					expect_pat(m, row, seqs[i], pos, l, gen,
						   __LINE__);
	}

	/* One more write, in the middle: nothing else moves. */
	write_pat(m, row, seqs[0], 33, 2, 7, __LINE__);
	for (pos = 0; pos < ntok[0]; pos++)
		for (l = 0; l < lay.num_layers; l++)
			expect_pat(m, row, seqs[0], pos, l,
				   pos == 33 && l == 2 ? 7 : 2, __LINE__);
	for (pos = 0; pos < ntok[1]; pos++)
		for (l = 0; l < lay.num_layers; l++)
			expect_pat(m, row, seqs[1], pos, l, 2, __LINE__);

	free(model);
	free(k);
	free(v);
	finish(m, p);
}
END_TEST

/* A single write into a zeroed sequence: every other row stays zero. */
START_TEST(test_rw_single_write_isolated)
{
	static const struct kvp_layout lay = {3, 1, 4, KVP_F64};
	struct kvp_pool *p =
		mkpool(8, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	unsigned char *k = xmalloc(row), *v = xmalloc(row);
	uint32_t pos, l;

	create_ok(m, 5, 35);
	write_pat(m, row, 5, 18, 1, 1, __LINE__);
	for (pos = 0; pos < 35; pos++)
		for (l = 0; l < lay.num_layers; l++) {
			if (pos == 18 && l == 1) {
				expect_pat(m, row, 5, pos, l, 1, __LINE__);
				continue;
			}
			memset(k, 0xEE, row);
			memset(v, 0xEE, row);
			read_ok(m, 5, pos, l, k, v);
			ck_assert_msg(all_bytes(k, row, 0) &&
					      all_bytes(v, row, 0),
				      "pos %u layer %u changed by a write of"
				      " pos 18 layer 1",
				      pos, l);
		}
	free(k);
	free(v);
	finish(m, p);
}
END_TEST

/* Reads of a sequence sharing blocks with a fork see the same data. */
START_TEST(test_read_shared)
{
	static const struct kvp_layout lay = {2, 2, 2, KVP_BF16};
	struct kvp_pool *p = mkpool(8, 0, KVP_POOL_NOCACHE, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	unsigned char *k = xmalloc(row), *v = xmalloc(row);
	unsigned char *k2 = xmalloc(row), *v2 = xmalloc(row);
	uint32_t pos, l;

	create_ok(m, 1, 21);
	for (pos = 0; pos < 21; pos++)
		for (l = 0; l < 2; l++)
			write_pat(m, row, 1, pos, l, 1, __LINE__);
	fork_ok(m, 1, 2);
	for (pos = 0; pos < 21; pos++)
		for (l = 0; l < 2; l++) {
			read_ok(m, 1, pos, l, k, v);
			read_ok(m, 2, pos, l, k2, v2);
			ck_assert_int_eq(memcmp(k, k2, row), 0);
			ck_assert_int_eq(memcmp(v, v2, row), 0);
			expect_pat(m, row, 1, pos, l, 1, __LINE__);
		}
	free(k);
	free(v);
	free(k2);
	free(v2);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ gather */

#define GUARD 64 /* bytes past the end of gather buffers that must stay */

/* Gathers every layer of seq and compares with the reads of every
 * position; the buffers' guard bytes must stay untouched. */
static void expect_gather_eq_reads(struct kvp_manager *m, size_t row,
				   uint32_t layers, uint64_t s, int line)
{
	uint32_t nt = info_ok_at(m, s, line).num_tokens;
	size_t len = (size_t)nt * row;
	unsigned char *gk = xmalloc(len + GUARD), *gv = xmalloc(len + GUARD);
	unsigned char *ck = xmalloc(len + 1), *cv = xmalloc(len + 1);
	uint32_t l, pos;

	for (l = 0; l < layers; l++) {
		memset(gk, 0xCD, len + GUARD);
		memset(gv, 0xCD, len + GUARD);
		for (pos = 0; pos < nt; pos++)
			read_ok_at(m, s, pos, l, ck + (size_t)pos * row,
				   cv + (size_t)pos * row, line);
		{
			int rc = kvp_seq_gather(m, s, l, gk, gv);

			ck_assert_msg(rc == 0,
				      "line %d: kvp_seq_gather(%llu, layer %u)"
				      " = %d (%s)",
				      line, ULL(s), l, rc, kvp_strerror(rc));
		}
		ck_assert_msg(memcmp(gk, ck, len) == 0,
			      "line %d: gathered K of seq %llu layer %u !="
			      " concatenated reads",
			      line, ULL(s), l);
		ck_assert_msg(memcmp(gv, cv, len) == 0,
			      "line %d: gathered V of seq %llu layer %u !="
			      " concatenated reads",
			      line, ULL(s), l);
		ck_assert_msg(all_bytes(gk + len, GUARD, 0xCD) &&
				      all_bytes(gv + len, GUARD, 0xCD),
			      "line %d: kvp_seq_gather(%llu, layer %u) wrote"
			      " past %u tokens",
			      line, ULL(s), l, nt);
	}
	free(gk);
	free(gv);
	free(ck);
	free(cv);
}

START_TEST(test_gather_matches_reads)
{
	static const uint32_t bts[] = {1, 5, 16};
	static const struct kvp_layout lay = {3, 2, 4, KVP_F32};
	uint32_t bt = bts[_i];
	/* Several blocks and a partial last one (except for bt 1). */
	uint32_t nt = 3 * bt + (bt > 1 ? bt / 2 + 1 : 0) + (bt == 1 ? 4 : 0);
	struct kvp_pool *p = mkpool_bt(64, bt, 0, KVP_POOL_NOCACHE, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	uint32_t pos, l;

	create_ok(m, 3, nt);
	create_ok(m, 4, nt + 1); /* a neighbour with other data */
	for (pos = 0; pos < nt + 1; pos++)
		for (l = 0; l < lay.num_layers; l++) {
			if (pos < nt)
				write_pat(m, row, 3, pos, l, 1, __LINE__);
			write_pat(m, row, 4, pos, l, 1, __LINE__);
		}
	expect_gather_eq_reads(m, row, lay.num_layers, 3, __LINE__);
	expect_gather_eq_reads(m, row, lay.num_layers, 4, __LINE__);

	/* And the reads are what was written, so gather is too. */
	for (pos = 0; pos < nt; pos++)
		for (l = 0; l < lay.num_layers; l++)
			expect_pat(m, row, 3, pos, l, 1, __LINE__);

	/* After appending (a partial block grows or a new one starts). */
	append_ok(m, 3, bt + 1);
	for (pos = nt; pos < nt + bt + 1; pos++)
		for (l = 0; l < lay.num_layers; l++)
			write_pat(m, row, 3, pos, l, 2, __LINE__);
	expect_gather_eq_reads(m, row, lay.num_layers, 3, __LINE__);

	/* A fork gathers the same bytes. */
	fork_ok(m, 3, 5);
	expect_gather_eq_reads(m, row, lay.num_layers, 5, __LINE__);
	{
		size_t len = (size_t)(nt + bt + 1) * row;
		unsigned char *a = xmalloc(len), *b = xmalloc(len);
		unsigned char *c = xmalloc(len), *d = xmalloc(len);

		ck_assert_int_eq(kvp_seq_gather(m, 3, 1, a, b), 0);
		ck_assert_int_eq(kvp_seq_gather(m, 5, 1, c, d), 0);
		ck_assert_int_eq(memcmp(a, c, len), 0);
		ck_assert_int_eq(memcmp(b, d, len), 0);
		free(a);
		free(b);
		free(c);
		free(d);
	}
	finish(m, p);
}
END_TEST

START_TEST(test_gather_empty)
{
	static const struct kvp_layout lay = {2, 1, 2, KVP_F32};
	struct kvp_pool *p = mkpool(4, 0, KVP_POOL_NOCACHE, &lay);
	struct kvp_manager *m = mkmgr(p);
	unsigned char k[GUARD], v[GUARD];

	create_ok(m, 9, 0);
	memset(k, 0xCD, sizeof(k));
	memset(v, 0xCD, sizeof(v));
	ck_assert_int_eq(kvp_seq_gather(m, 9, 0, k, v), 0);
	ck_assert_int_eq(kvp_seq_gather(m, 9, 1, k, v), 0);
	ck_assert(all_bytes(k, sizeof(k), 0xCD));
	ck_assert(all_bytes(v, sizeof(v), 0xCD));
	finish(m, p);
}
END_TEST

/*
 * kvp_seq_gather_cap: the tokens copied when they fit; -ENOBUFS with
 * nothing written, and the need and capacity in kvp_last_error, when the
 * sequence is longer than the arrays (it grew after they were sized).
 */
START_TEST(test_gather_cap)
{
	static const struct kvp_layout lay = {2, 1, 2, KVP_F32};
	struct kvp_pool *p = mkpool(8, 0, KVP_POOL_NOCACHE, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t rb = kvp_pool_row_bytes(p);
	unsigned char k[40 * 8], v[40 * 8], row[8];
	struct kvp_error_info e;

	ck_assert_uint_le(40 * rb, sizeof(k));
	create_ok(m, 1, 20);
	for (uint32_t t = 0; t < 20; t++) {
		memset(row, (int)t + 1, sizeof(row));
		ck_assert_int_eq(kvp_seq_write(m, 1, t, 1, row, row), 0);
	}
	memset(k, 0xCD, sizeof(k));
	memset(v, 0xCD, sizeof(v));
	ck_assert_int_eq(kvp_seq_gather_cap(m, 1, 1, k, v, 19), -ENOBUFS);
	ck_assert(all_bytes(k, sizeof(k), 0xCD));
	ck_assert(all_bytes(v, sizeof(v), 0xCD));
	ck_assert_int_eq(kvp_last_error(&e), 0);
	ck_assert_int_eq(e.err, -ENOBUFS);
	ck_assert_uint_eq(e.buffer, 1);
	ck_assert_uint_eq(e.requested, 20);
	ck_assert_uint_eq(e.available, 19);
	ck_assert_int_eq(kvp_seq_gather_cap(m, 1, 1, k, v, 40), 20);
	for (uint32_t t = 0; t < 20; t++)
		ck_assert(all_bytes(k + t * rb, rb, (unsigned char)(t + 1)));
	ck_assert(all_bytes(k + 20 * rb, sizeof(k) - 20 * rb, 0xCD));
	ck_assert_int_eq(kvp_seq_gather_cap(m, 2, 1, k, v, 40), -ENOENT);
	ck_assert_int_eq(kvp_seq_gather_cap(m, 1, 2, k, v, 40), -EINVAL);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ errors */

START_TEST(test_err_null)
{
	static const struct kvp_layout lay = {2, 1, 4, KVP_U8};
	struct kvp_pool *p =
		mkpool(4, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	unsigned char k[4], v[4], buf[64], buf2[64], *snap;
	uint32_t ids[2], n;

	create_ok(m, 1, 20);
	n = blocks_ok(m, 1, ids, 2);
	memset(k, 0x11, sizeof(k));
	memset(v, 0x22, sizeof(v));
	snap = snapshot(p, ids, n);

	ck_assert_int_eq(kvp_seq_write(NULL, 1, 0, 0, k, v), -EINVAL);
	ck_assert_int_eq(kvp_seq_write(m, 1, 0, 0, NULL, v), -EINVAL);
	ck_assert_int_eq(kvp_seq_write(m, 1, 0, 0, k, NULL), -EINVAL);
	ck_assert_int_eq(kvp_seq_write(m, 1, 0, 0, NULL, NULL), -EINVAL);
	expect_snapshot(p, ids, n, snap);

	memset(k, 0x33, sizeof(k));
	memset(v, 0x44, sizeof(v));
	ck_assert_int_eq(kvp_seq_read(NULL, 1, 0, 0, k, v), -EINVAL);
	ck_assert_int_eq(kvp_seq_read(m, 1, 0, 0, NULL, v), -EINVAL);
	ck_assert(all_bytes(v, sizeof(v), 0x44));
	ck_assert_int_eq(kvp_seq_read(m, 1, 0, 0, k, NULL), -EINVAL);
	ck_assert(all_bytes(k, sizeof(k), 0x33));

	memset(buf, 0x55, sizeof(buf));
	memset(buf2, 0x66, sizeof(buf2));
	ck_assert_int_eq(kvp_seq_gather(NULL, 1, 0, buf, buf2), -EINVAL);
	ck_assert_int_eq(kvp_seq_gather(m, 1, 0, NULL, buf2), -EINVAL);
	ck_assert_int_eq(kvp_seq_gather(m, 1, 0, buf, NULL), -EINVAL);
	ck_assert(all_bytes(buf, sizeof(buf), 0x55));
	ck_assert(all_bytes(buf2, sizeof(buf2), 0x66));
	expect_snapshot(p, ids, n, snap);
	ck_assert_uint_eq(tokens_of(m, 1), 20);
	free(snap);
	finish(m, p);
}
END_TEST

START_TEST(test_err_id_only)
{
	struct kvp_pool *p = mkpool(4, 0, KVP_POOL_NOCACHE, NULL);
	struct kvp_manager *m = mkmgr(p);
	unsigned char k[64], v[64];

	create_ok(m, 1, 20);
	memset(k, 0x11, sizeof(k));
	memset(v, 0x22, sizeof(v));
	ck_assert_int_eq(kvp_seq_write(m, 1, 0, 0, k, v), -EINVAL);
	ck_assert_int_eq(kvp_seq_read(m, 1, 0, 0, k, v), -EINVAL);
	ck_assert_int_eq(kvp_seq_gather(m, 1, 0, k, v), -EINVAL);
	ck_assert(all_bytes(k, sizeof(k), 0x11));
	ck_assert(all_bytes(v, sizeof(v), 0x22));
	ck_assert_uint_eq(tokens_of(m, 1), 20);
	finish(m, p);
}
END_TEST

START_TEST(test_err_layer)
{
	static const struct kvp_layout lay = {3, 1, 2, KVP_F32};
	struct kvp_pool *p =
		mkpool(4, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	unsigned char k[8], v[8], big[20 * 8], big2[20 * 8], *snap;
	static const uint32_t bad[] = {3, 4, UINT32_MAX};
	uint32_t ids[2], n, i;

	create_ok(m, 1, 20);
	n = blocks_ok(m, 1, ids, 2);
	write_pat(m, row, 1, 3, 2, 1, __LINE__); /* the last layer works */
	snap = snapshot(p, ids, n);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		memset(k, 0x11, sizeof(k));
		memset(v, 0x22, sizeof(v));
		ck_assert_int_eq(kvp_seq_write(m, 1, 3, bad[i], k, v), -EINVAL);
		ck_assert_int_eq(kvp_seq_read(m, 1, 3, bad[i], k, v), -EINVAL);
		ck_assert(all_bytes(k, sizeof(k), 0x11));
		ck_assert(all_bytes(v, sizeof(v), 0x22));
		memset(big, 0x33, sizeof(big));
		memset(big2, 0x44, sizeof(big2));
		ck_assert_int_eq(kvp_seq_gather(m, 1, bad[i], big, big2),
				 -EINVAL);
		ck_assert(all_bytes(big, sizeof(big), 0x33));
		ck_assert(all_bytes(big2, sizeof(big2), 0x44));
	}
	expect_snapshot(p, ids, n, snap);
	expect_pat(m, row, 1, 3, 2, 1, __LINE__);
	free(snap);
	finish(m, p);
}
END_TEST

START_TEST(test_err_enoent)
{
	static const struct kvp_layout lay = {2, 1, 2, KVP_F32};
	struct kvp_pool *p =
		mkpool(4, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	unsigned char k[8], v[8], *snap;
	uint32_t ids[2], n;

	create_ok(m, 1, 20);
	n = blocks_ok(m, 1, ids, 2);
	snap = snapshot(p, ids, n);
	memset(k, 0x11, sizeof(k));
	memset(v, 0x22, sizeof(v));
	ck_assert_int_eq(kvp_seq_write(m, 2, 0, 0, k, v), -ENOENT);
	ck_assert_int_eq(kvp_seq_write(m, UINT64_MAX, 0, 0, k, v), -ENOENT);
	ck_assert_int_eq(kvp_seq_read(m, 2, 0, 0, k, v), -ENOENT);
	ck_assert_int_eq(kvp_seq_gather(m, 2, 0, k, v), -ENOENT);
	ck_assert(all_bytes(k, sizeof(k), 0x11));
	ck_assert(all_bytes(v, sizeof(v), 0x22));

	/* A freed sequence is unknown too. */
	create_ok(m, 3, 1);
	free_ok(m, 3);
	ck_assert_int_eq(kvp_seq_write(m, 3, 0, 0, k, v), -ENOENT);
	ck_assert_int_eq(kvp_seq_read(m, 3, 0, 0, k, v), -ENOENT);
	ck_assert_int_eq(kvp_seq_gather(m, 3, 0, k, v), -ENOENT);
	ck_assert(all_bytes(k, sizeof(k), 0x11));
	ck_assert(all_bytes(v, sizeof(v), 0x22));
	expect_snapshot(p, ids, n, snap);
	free(snap);
	finish(m, p);
}
END_TEST

START_TEST(test_err_erange)
{
	static const struct kvp_layout lay = {2, 1, 2, KVP_F32};
	struct kvp_pool *p =
		mkpool(4, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	unsigned char k[8], v[8], *snap;
	/* 20 tokens: pos 20..31 lie in the allocated second block. */
	static const uint32_t bad[] = {20, 21, 31, 32, 1000, UINT32_MAX};
	uint32_t ids[2], n, i;

	create_ok(m, 1, 20);
	create_ok(m, 2, 0);
	n = blocks_ok(m, 1, ids, 2);
	ck_assert_uint_eq(n, 2);
	write_pat(m, row, 1, 19, 1, 1, __LINE__); /* the last pos works */
	snap = snapshot(p, ids, n);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		memset(k, 0x11, sizeof(k));
		memset(v, 0x22, sizeof(v));
		ck_assert_int_eq(kvp_seq_write(m, 1, bad[i], 0, k, v), -ERANGE);
		ck_assert_int_eq(kvp_seq_read(m, 1, bad[i], 1, k, v), -ERANGE);
		ck_assert(all_bytes(k, sizeof(k), 0x11));
		ck_assert(all_bytes(v, sizeof(v), 0x22));
	}
	ck_assert_int_eq(kvp_seq_write(m, 2, 0, 0, k, v), -ERANGE);
	ck_assert_int_eq(kvp_seq_read(m, 2, 0, 0, k, v), -ERANGE);
	ck_assert(all_bytes(k, sizeof(k), 0x11));
	ck_assert(all_bytes(v, sizeof(v), 0x22));
	expect_snapshot(p, ids, n, snap);
	ck_assert_uint_eq(tokens_of(m, 1), 20);
	ck_assert_uint_eq(tokens_of(m, 2), 0);

	/* After a truncate, the cut positions are out of range. */
	ck_assert_int_eq(kvp_seq_truncate(m, 1, 10), 0);
	ck_assert_int_eq(kvp_seq_write(m, 1, 10, 0, k, v), -ERANGE);
	ck_assert_int_eq(kvp_seq_read(m, 1, 15, 0, k, v), -ERANGE);
	write_ok(m, 1, 9, 0, k, v);
	free(snap);
	finish(m, p);
}
END_TEST

START_TEST(test_err_ebusy_fork)
{
	static const struct kvp_layout lay = {2, 2, 2, KVP_F32};
	struct kvp_pool *p =
		mkpool(8, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	unsigned char *k = xmalloc(row), *v = xmalloc(row), *snap;
	uint32_t a[2], b[2], na, nb, pos, l;

	create_ok(m, 1, 20); /* A: a full block and 4 tokens */
	for (pos = 0; pos < 20; pos++)
		for (l = 0; l < 2; l++)
			write_pat(m, row, 1, pos, l, 1, __LINE__);
	fork_ok(m, 1, 2); /* B shares both blocks */
	na = blocks_ok(m, 1, a, 2);
	nb = blocks_ok(m, 2, b, 2);
	ck_assert_uint_eq(na, 2);
	ck_assert_uint_eq(nb, 2);
	ck_assert_uint_eq(a[0], b[0]);
	ck_assert_uint_eq(a[1], b[1]);
	snap = snapshot(p, a, na);

	pattern(k, row, 1, 0, 0, KV_K, 5);
	pattern(v, row, 1, 0, 0, KV_V, 5);
	/* The shared first block, the shared partial last block. */
	ck_assert_int_eq(kvp_seq_write(m, 1, 0, 0, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_write(m, 2, 0, 0, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_write(m, 1, 15, 1, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_write(m, 2, 15, 1, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_write(m, 1, 19, 0, k, v), -EBUSY);
	ck_assert_int_eq(kvp_seq_write(m, 2, 17, 1, k, v), -EBUSY);
	expect_snapshot(p, a, na, snap);
	/* Reads of shared blocks still work. */
	expect_pat(m, row, 1, 0, 0, 1, __LINE__);
	expect_pat_as(m, row, 2, 1, 0, 0, 1, __LINE__);
	expect_pat_as(m, row, 2, 1, 17, 1, 1, __LINE__);
	/* Holders: one shared chunk for a[0], both tables' tails for a[1]. */
	ck_assert_int_eq(kvp_block_refcount(p, a[0]), 1);
	ck_assert_int_eq(kvp_block_refcount(p, a[1]), 2);

	/* Once B is gone, A holds its blocks alone again. */
	free_ok(m, 2);
	write_ok(m, 1, 0, 0, k, v);
	expect_pat(m, row, 1, 0, 0, 5, __LINE__);
	write_pat(m, row, 1, 19, 1, 5, __LINE__);
	expect_pat(m, row, 1, 19, 1, 5, __LINE__);
	expect_pat(m, row, 1, 1, 0, 1, __LINE__);
	free(snap);
	free(k);
	free(v);
	finish(m, p);
}
END_TEST

/* The -EBUSY check is per block: after B's append gives it its own copy of
 * the shared partial last block, writes into that block work for both
 * sequences while the full first block stays shared. */
START_TEST(test_err_ebusy_per_block)
{
	static const struct kvp_layout lay = {1, 1, 4, KVP_U8};
	struct kvp_pool *p =
		mkpool(8, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	struct kvp_copy cow[1];
	uint32_t ncow = 0;
	size_t row = lay_row(&lay);

	create_ok(m, 1, 20);
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	write_pat(m, row, 2, 17, 0, 1, __LINE__);
	write_pat(m, row, 2, 20, 0, 1, __LINE__);
	write_pat(m, row, 1, 17, 0, 2, __LINE__);
	expect_pat(m, row, 2, 17, 0, 1, __LINE__);
	expect_pat(m, row, 1, 17, 0, 2, __LINE__);
	{
		unsigned char k[4] = {1, 2, 3, 4}, v[4] = {5, 6, 7, 8};

		ck_assert_int_eq(kvp_seq_write(m, 1, 3, 0, k, v), -EBUSY);
		ck_assert_int_eq(kvp_seq_write(m, 2, 3, 0, k, v), -EBUSY);
	}
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ cow */

START_TEST(test_cow_copies_bytes)
{
	static const struct kvp_layout lay = {3, 2, 4, KVP_F32};
	struct kvp_pool *p =
		mkpool(8, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	uint32_t a[2], b[2], na, nb, ncow = 0, pos, l, t;
	struct kvp_copy cow[2];
	unsigned char *snap_a;
	const unsigned char *src, *dst;
	int kv;

	create_ok(m, 1, 21); /* A: a full block, then 5 tokens */
	for (pos = 0; pos < 21; pos++)
		for (l = 0; l < lay.num_layers; l++)
			write_pat(m, row, 1, pos, l, 1, __LINE__);
	na = blocks_ok(m, 1, a, 2);
	ck_assert_uint_eq(na, 2);
	fork_ok(m, 1, 2);
	snap_a = snapshot(p, a, na);

	memset(cow, 0xA5, sizeof(cow));
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 2, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[1]);
	ck_assert_uint_eq(cow[0].tokens, 5);
	nb = blocks_ok(m, 2, b, 2);
	ck_assert_uint_eq(nb, 2);
	ck_assert_uint_eq(b[0], a[0]);
	ck_assert_uint_eq(cow[0].dst, b[1]);
	ck_assert_uint_ne(b[1], a[1]);
	ck_assert_uint_eq(tokens_of(m, 2), 22);
	ck_assert_uint_eq(tokens_of(m, 1), 21);

	/* B's new block holds A's first 5 rows of every layer, K and V. */
	src = kvp_block_data(p, a[1]);
	dst = kvp_block_data(p, b[1]);
	ck_assert_ptr_nonnull(src);
	ck_assert_ptr_nonnull(dst);
	for (l = 0; l < lay.num_layers; l++)
		for (kv = KV_K; kv <= KV_V; kv++)
			for (t = 0; t < 5; t++) {
				size_t off = row_off(BT, row, l, kv, t);

				ck_assert_msg(
					memcmp(dst + off, src + off, row) == 0,
					"copied block: layer %u %c token"
					" %u differs from the source",
					l, kv == KV_K ? 'K' : 'V', t);
			}
	for (pos = 0; pos < 21; pos++)
		for (l = 0; l < lay.num_layers; l++)
			expect_pat_as(m, row, 2, 1, pos, l, 1, __LINE__);
	/* The source block is untouched by the copy. */
	expect_snapshot(p, a, na, snap_a);

	/* B writes its new position and its own copy of A's tokens. */
	for (l = 0; l < lay.num_layers; l++) {
		write_pat(m, row, 2, 21, l, 3, __LINE__);
		write_pat(m, row, 2, 17, l, 3, __LINE__);
	}
	for (l = 0; l < lay.num_layers; l++) {
		expect_pat(m, row, 2, 21, l, 3, __LINE__);
		expect_pat(m, row, 2, 17, l, 3, __LINE__);
		expect_pat_as(m, row, 2, 1, 16, l, 1, __LINE__);
	}
	/* A's data is unchanged, in its reads and in its raw blocks. */
	expect_snapshot(p, a, na, snap_a);
	for (pos = 0; pos < 21; pos++)
		for (l = 0; l < lay.num_layers; l++)
			expect_pat(m, row, 1, pos, l, 1, __LINE__);
	/* And B's gather sees A's prefix with its own changes. */
	expect_gather_eq_reads(m, row, lay.num_layers, 2, __LINE__);
	free(snap_a);
	finish(m, p);
}
END_TEST

/* An append that needs a copy and new blocks at once: the copy holds the
 * source's bytes, the new blocks are the sequence's own. */
START_TEST(test_cow_cross_boundary)
{
	static const struct kvp_layout lay = {2, 1, 4, KVP_F32};
	struct kvp_pool *p =
		mkpool(8, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	uint32_t a[4], b[4], na, nb, ncow = 0, pos, l;
	struct kvp_copy cow[2];
	unsigned char *snap_a;

	create_ok(m, 1, 10);
	for (pos = 0; pos < 10; pos++)
		for (l = 0; l < 2; l++)
			write_pat(m, row, 1, pos, l, 1, __LINE__);
	fork_ok(m, 1, 2);
	na = blocks_ok(m, 1, a, 4);
	snap_a = snapshot(p, a, na);
	ck_assert_int_eq(kvp_seq_append(m, 2, 2 * BT, cow, 2, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].src, a[0]);
	ck_assert_uint_eq(cow[0].tokens, 10);
	nb = blocks_ok(m, 2, b, 4);
	ck_assert_uint_eq(nb, 3);
	ck_assert_uint_eq(cow[0].dst, b[0]);
	for (pos = 0; pos < 10; pos++)
		for (l = 0; l < 2; l++)
			expect_pat_as(m, row, 2, 1, pos, l, 1, __LINE__);
	for (pos = 0; pos < 10 + 2 * BT; pos++)
		for (l = 0; l < 2; l++)
			write_pat(m, row, 2, pos, l, 2, __LINE__);
	for (pos = 0; pos < 10 + 2 * BT; pos++)
		for (l = 0; l < 2; l++)
			expect_pat(m, row, 2, pos, l, 2, __LINE__);
	expect_snapshot(p, a, na, snap_a);
	for (pos = 0; pos < 10; pos++)
		for (l = 0; l < 2; l++)
			expect_pat(m, row, 1, pos, l, 1, __LINE__);
	free(snap_a);
	finish(m, p);
}
END_TEST

/*
 * KVP_POOL_ZERO and copy-on-write: the block a copy-on-write allocates is
 * zeroed on allocation and then receives the source's first `tokens` token
 * slots (struct kvp_copy), so its later slots are zero.  A's last block
 * holds stale rows past its token count after a truncate; they must not
 * show up in B's fresh block.
 */
START_TEST(test_cow_zero_tail)
{
	static const struct kvp_layout lay = {2, 1, 4, KVP_F32};
	struct kvp_pool *p =
		mkpool(8, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	unsigned char *k = xmalloc(row), *v = xmalloc(row);
	uint32_t ncow = 0, pos, l, b[2], nb, t;
	struct kvp_copy cow[1];
	const unsigned char *dst;
	int kv;

	create_ok(m, 1, 2 * BT);
	for (pos = 0; pos < 2 * BT; pos++)
		for (l = 0; l < 2; l++)
			write_pat(m, row, 1, pos, l, 1, __LINE__);
	ck_assert_int_eq(kvp_seq_truncate(m, 1, BT + 4), 0);
	fork_ok(m, 1, 2);
	ck_assert_int_eq(kvp_seq_append(m, 2, 1, cow, 1, &ncow), 0);
	ck_assert_uint_eq(ncow, 1);
	ck_assert_uint_eq(cow[0].tokens, 4);
	nb = blocks_ok(m, 2, b, 2);
	ck_assert_uint_eq(nb, 2);
	dst = kvp_block_data(p, b[1]);
	ck_assert_ptr_nonnull(dst);
	for (l = 0; l < 2; l++)
		for (kv = KV_K; kv <= KV_V; kv++)
			for (t = 4; t < BT; t++)
				ck_assert_msg(all_bytes(dst + row_off(BT, row,
								      l, kv, t),
							row, 0),
					      "copy-on-write block %u: layer"
					      " %u %c slot %u is not zero (only"
					      " %u slots are copied into a"
					      " zeroed block)",
					      b[1], l, kv == KV_K ? 'K' : 'V',
					      t, cow[0].tokens);
	/* Through the API: B's new position reads zero before B writes. */
	for (l = 0; l < 2; l++) {
		read_ok(m, 2, BT + 4, l, k, v);
		ck_assert(all_bytes(k, row, 0) && all_bytes(v, row, 0));
	}
	free(k);
	free(v);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ zero */

START_TEST(test_zero_raw_reuse)
{
	static const struct kvp_layout lay = {2, 2, 3, KVP_F16};
	uint32_t nb = (uint32_t)_i + 1; /* 1 or 2 blocks */
	struct kvp_pool *p =
		mkpool(nb, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	size_t bb = kvp_block_bytes(p);
	uint32_t ids[2], round, i;

	ck_assert_uint_eq(bb, lay_block(&lay, BT));
	for (round = 0; round < 3; round++) {
		ck_assert_int_eq(kvp_pool_alloc(p, nb, ids), 0);
		for (i = 0; i < nb; i++) {
			unsigned char *d = kvp_block_data(p, ids[i]);

			ck_assert_ptr_nonnull(d);
			ck_assert_msg(all_bytes(d, bb, 0),
				      "round %u: block %u is not zero when"
				      " allocated",
				      round, ids[i]);
			memset(d, 0xAB, bb);
		}
		ck_assert_int_eq(kvp_pool_free(p, ids, nb), 0);
	}
	kvp_pool_unref(p);
}
END_TEST

/* The same through sequences: a freed sequence's data does not show in the
 * next sequence to get its blocks. */
START_TEST(test_zero_seq_reuse)
{
	static const struct kvp_layout lay = {2, 1, 4, KVP_F32};
	struct kvp_pool *p =
		mkpool(2, 0, KVP_POOL_NOCACHE | KVP_POOL_ZERO, &lay);
	struct kvp_manager *m = mkmgr(p);
	size_t row = lay_row(&lay);
	unsigned char *k = xmalloc(row), *v = xmalloc(row);
	uint32_t pos, l, round, ids[2];

	for (round = 0; round < 3; round++) {
		uint64_t s = 10 + round;
		uint32_t n;

		create_ok(m, s, 2 * BT); /* takes the whole pool */
		n = blocks_ok(m, s, ids, 2);
		ck_assert_uint_eq(n, 2);
		for (pos = 0; pos < 2 * BT; pos++)
			for (l = 0; l < 2; l++) {
				memset(k, 0xEE, row);
				memset(v, 0xEE, row);
				read_ok(m, s, pos, l, k, v);
				ck_assert_msg(all_bytes(k, row, 0) &&
						      all_bytes(v, row, 0),
					      "round %u: pos %u layer %u not"
					      " zero in a fresh sequence",
					      round, pos, l);
				write_pat(m, row, s, pos, l, 1, __LINE__);
			}
		free_ok(m, s);
	}

	/* Blocks taken by append are zeroed too. */
	create_ok(m, 20, BT);
	for (l = 0; l < 2; l++)
		for (pos = 0; pos < BT; pos++)
			write_pat(m, row, 20, pos, l, 1, __LINE__);
	create_ok(m, 21, BT);
	for (l = 0; l < 2; l++)
		for (pos = 0; pos < BT; pos++)
			write_pat(m, row, 21, pos, l, 1, __LINE__);
	free_ok(m, 21);
	append_ok(m, 20, 3);
	for (pos = BT; pos < BT + 3; pos++)
		for (l = 0; l < 2; l++) {
			read_ok(m, 20, pos, l, k, v);
			ck_assert(all_bytes(k, row, 0) && all_bytes(v, row, 0));
		}
	free(k);
	free(v);
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ large */

START_TEST(test_large_arena)
{
	static const struct kvp_layout lay = {4, 8, 128, KVP_F16};
	const uint32_t nblocks = 512;
	struct kvp_pool *p = mkpool(nblocks, 0, KVP_POOL_NOCACHE, &lay);
	size_t bb = kvp_block_bytes(p);
	uint32_t *ids = xmalloc(nblocks * sizeof(*ids));
	unsigned char **d = xmalloc(nblocks * sizeof(*d));
	unsigned char *lo = NULL, *hi = NULL;
	uint32_t i;

	ck_assert_uint_eq(kvp_pool_row_bytes(p), 8 * 128 * 2);
	ck_assert_uint_eq(bb, (size_t)4 * 2 * BT * 8 * 128 * 2);
	ck_assert_uint_ge(bb * nblocks, (size_t)2 << 20);
	ck_assert_int_eq(kvp_pool_alloc(p, nblocks, ids), 0);
	for (i = 0; i < nblocks; i++) {
		d[i] = kvp_block_data(p, i);
		ck_assert_msg(d[i] != NULL, "kvp_block_data(%u) = NULL", i);
		if (!lo || d[i] < lo)
			lo = d[i];
		if (!hi || d[i] > hi)
			hi = d[i];
		d[i][0] = (unsigned char)(i * 7 + 1);
		d[i][bb - 1] = (unsigned char)(i * 13 + 2);
	}
	ck_assert_ptr_null(kvp_block_data(p, nblocks));
	/* Distinct, non-overlapping blocks within one span. */
	ck_assert_msg((size_t)(hi - lo) >= (size_t)(nblocks - 1) * bb,
		      "512 blocks of %zu bytes span only %zu bytes", bb,
		      (size_t)(hi - lo));
	for (i = 0; i < nblocks; i++) {
		ck_assert_msg(d[i][0] == (unsigned char)(i * 7 + 1),
			      "first byte of block %u overwritten", i);
		ck_assert_msg(d[i][bb - 1] == (unsigned char)(i * 13 + 2),
			      "last byte of block %u overwritten", i);
	}
	ck_assert_int_eq(kvp_pool_free(p, ids, nblocks), 0);
	ck_assert_int_eq(kvp_pool_check(p), 0);
	kvp_pool_unref(p);
	free(ids);
	free(d);
}
END_TEST

/* ------------------------------------------------------------ overflow */

static int try_create(uint32_t num_blocks, uint32_t bt,
		      const struct kvp_layout *lay, struct kvp_pool **out)
{
	struct kvp_pool_config c =
		make_cfg(num_blocks, 0, KVP_POOL_NOCACHE, lay);

	c.block_tokens = bt;
	*out = POOL_SENTINEL;
	return kvp_pool_create(&c, out);
}

#define expect_create_fails(nb, bt, lay, want)                                 \
	expect_create_fails_at((nb), (bt), (lay), (want), __LINE__)
static void expect_create_fails_at(uint32_t nb, uint32_t bt,
				   const struct kvp_layout *lay, int want,
				   int line)
{
	struct kvp_pool *p;
	int rc = try_create(nb, bt, lay, &p);

	ck_assert_msg(rc == want,
		      "line %d: kvp_pool_create(%u blocks, %u tokens, layout"
		      " {%u, %u, %u, %d}) = %d (%s), want %d",
		      line, nb, bt, lay->num_layers, lay->num_kv_heads,
		      lay->head_dim, (int)lay->dtype, rc, kvp_strerror(rc),
		      want);
	ck_assert_msg(p == POOL_SENTINEL,
		      "line %d: kvp_pool_create failed but wrote *out", line);
}

START_TEST(test_overflow_block)
{
	/* Row: 2^16 * 2^16 * 8 = 2^35; block: 2^35 * 2^24 * 2 * 16 = 2^64. */
	static const struct kvp_layout exact = {1u << 24, 1u << 16, 1u << 16,
						KVP_F64};
	static const struct kvp_layout huge = {UINT32_MAX, UINT32_MAX,
					       UINT32_MAX, KVP_F64};
	/* Row 2^32 * 8 > SIZE_MAX on 32-bit; fine on 64-bit, block 2^64+. */
	static const struct kvp_layout wide = {UINT32_MAX, 1, UINT32_MAX,
					       KVP_F64};

	expect_create_fails(1, 16, &exact, -EINVAL);
	expect_create_fails(1, UINT32_MAX, &huge, -EINVAL);
	expect_create_fails(1, 1, &huge, -EINVAL);
	expect_create_fails(1, 16, &wide, -EINVAL);
	expect_create_fails(1, UINT32_MAX, &wide, -EINVAL);
	/* The row alone overflows: 8 * 2^31 * 2^30 = 2^64, and 8 * 2^31 *
	 * 2^31 = 2^65, which would wrap to 0. */
	{
		static const struct kvp_layout r64 = {1, 1u << 31, 1u << 30,
						      KVP_F64};
		static const struct kvp_layout r65 = {1, 1u << 31, 1u << 31,
						      KVP_F64};

		expect_create_fails(1, 1, &r64, -EINVAL);
		expect_create_fails(1, 1, &r65, -EINVAL);
	}
	/* Overflow only through block_tokens. */
	{
		static const struct kvp_layout l = {1u << 16, 1u << 16, 1u << 8,
						    KVP_F64};
		/* 2^16*2^8*8*2^16*2 = 2^44 per token, 2^20 tokens: 2^64. */
		expect_create_fails(1, 1u << 20, &l, -EINVAL);
	}
}
END_TEST

START_TEST(test_overflow_arena)
{
	/* Block 2^35 * 2^23 * 2 * 16 = 2^63: fits in size_t (64-bit), but
	 * two blocks are 2^64. */
	static const struct kvp_layout half = {1u << 23, 1u << 16, 1u << 16,
					       KVP_F64};
	/* Block 2^18 * 2^10 * 2 * 16 = 2^33; 2^31 blocks = 2^64. */
	static const struct kvp_layout mid = {1u << 10, 1u << 8, 1u << 8,
					      KVP_F32};
	struct kvp_pool *p;
	int rc;

	expect_create_fails(2, 16, &half, -EINVAL);
	expect_create_fails(KVP_MAX_BLOCKS, 16, &half, -EINVAL);
	expect_create_fails(KVP_MAX_BLOCKS, 16, &mid, -EINVAL);
	/* 2^31 - 1 blocks of 2^33 bytes is below 2^64 but far beyond any
	 * memory: not an overflow, so -ENOMEM (or -EINVAL on 32-bit). */
	rc = try_create(KVP_MAX_BLOCKS - 1, 16, &mid, &p);
	ck_assert_msg(
		rc == -ENOMEM || (SIZE_MAX <= UINT32_MAX && rc == -EINVAL),
		"2^31-1 blocks of 2^33 bytes: %d (%s)", rc, kvp_strerror(rc));
	ck_assert_ptr_eq(p, POOL_SENTINEL);
	/* One block of 2^63 bytes does not overflow either. */
	rc = try_create(1, 16, &half, &p);
	ck_assert_msg(rc == -ENOMEM ||
			      (SIZE_MAX <= UINT32_MAX && rc == -EINVAL),
		      "one block of 2^63 bytes: %d (%s)", rc, kvp_strerror(rc));
	ck_assert_ptr_eq(p, POOL_SENTINEL);
}
END_TEST

START_TEST(test_bad_layout)
{
	static const struct kvp_layout zl = {0, 1, 1, KVP_F32};
	static const struct kvp_layout zh = {1, 0, 1, KVP_F32};
	static const struct kvp_layout zd = {1, 1, 0, KVP_F32};
	struct kvp_layout bad_dt = {1, 1, 1, KVP_F32};

	expect_create_fails(4, 16, &zl, -EINVAL);
	expect_create_fails(4, 16, &zh, -EINVAL);
	expect_create_fails(4, 16, &zd, -EINVAL);
	bad_dt.dtype = (enum kvp_dtype)(KVP_U8 + 1);
	expect_create_fails(4, 16, &bad_dt, -EINVAL);
	bad_dt.dtype = (enum kvp_dtype) - 1;
	expect_create_fails(4, 16, &bad_dt, -EINVAL);
}
END_TEST

/* ------------------------------------------------------------ threads */

#define MT_THREADS 4
#define MT_SEQS 8     /* per thread */
#define MT_TOKENS 120 /* per sequence */
#define MT_LAYERS 2
#define MT_WORDS 8 /* uint32 per row: 2 heads * 4 dims of F32 */

struct mt_worker {
	pthread_t th;
	struct kvp_manager *m;
	unsigned idx;
	struct errbuf err;
};

static uint64_t mt_seq(unsigned t, unsigned j)
{
	return ((uint64_t)(t + 1) << 32) | (j * 7919u + 3);
}

/* The row of (seq, pos, layer, kv): every word names its origin. */
static void mt_row(uint32_t *w, uint64_t seq, uint32_t pos, uint32_t layer,
		   int kv)
{
	unsigned i;

	for (i = 0; i < MT_WORDS; i++)
		w[i] = (uint32_t)mix64(seq * 1000003u + pos * 64u + layer * 8u +
				       (unsigned)kv * 4u + i);
}

static void *mt_thread(void *arg)
{
	struct mt_worker *w = arg;
	uint32_t k[MT_WORDS], v[MT_WORDS], rk[MT_WORDS], rv[MT_WORDS];
	uint32_t pos, l;
	unsigned j;
	int rc;

	for (j = 0; j < MT_SEQS; j++) {
		rc = kvp_seq_create(w->m, mt_seq(w->idx, j), 0);
		if (rc) {
			wfail(&w->err, "create: %d", rc);
			return NULL;
		}
	}
	for (pos = 0; pos < MT_TOKENS; pos++) {
		for (j = 0; j < MT_SEQS; j++) {
			uint64_t s = mt_seq(w->idx, j);
			uint32_t ncow = 99;
			struct kvp_copy cow[1];

			rc = kvp_seq_append(w->m, s, 1, cow, 1, &ncow);
			if (rc || ncow) {
				wfail(&w->err, "append(%llu) = %d ncow %u",
				      ULL(s), rc, ncow);
				return NULL;
			}
			for (l = 0; l < MT_LAYERS; l++) {
				mt_row(k, s, pos, l, KV_K);
				mt_row(v, s, pos, l, KV_V);
				rc = kvp_seq_write(w->m, s, pos, l, k, v);
				if (rc) {
					wfail(&w->err,
					      "write(%llu, %u, %u) = %d",
					      ULL(s), pos, l, rc);
					return NULL;
				}
			}
			/* Read back an earlier token now and then. */
			if (pos % 5 == 0) {
				uint32_t q = pos / 2;

				mt_row(k, s, q, 1, KV_K);
				mt_row(v, s, q, 1, KV_V);
				rc = kvp_seq_read(w->m, s, q, 1, rk, rv);
				if (rc || memcmp(rk, k, sizeof(k)) ||
				    memcmp(rv, v, sizeof(v))) {
					wfail(&w->err,
					      "read(%llu, %u) = %d or wrong"
					      " data",
					      ULL(s), q, rc);
					return NULL;
				}
			}
		}
	}
	return NULL;
}

START_TEST(test_mt_write_read)
{
	static const struct kvp_layout lay = {MT_LAYERS, 2, 4, KVP_F32};
	/* 32 sequences of 8 blocks = 256 blocks; automatic thread caches. */
	struct kvp_pool *p = mkpool(1024, 0, 0, &lay);
	struct kvp_manager *m = mkmgr(p);
	struct mt_worker w[MT_THREADS];
	uint32_t k[MT_WORDS], v[MT_WORDS], rk[MT_WORDS], rv[MT_WORDS];
	unsigned t, j;
	uint32_t pos, l;

	ck_assert_uint_eq(kvp_pool_row_bytes(p), sizeof(k));
	memset(w, 0, sizeof(w));
	for (t = 0; t < MT_THREADS; t++) {
		w[t].m = m;
		w[t].idx = t;
		ck_assert_int_eq(
			pthread_create(&w[t].th, NULL, mt_thread, &w[t]), 0);
	}
	for (t = 0; t < MT_THREADS; t++)
		ck_assert_int_eq(pthread_join(w[t].th, NULL), 0);
	for (t = 0; t < MT_THREADS; t++)
		ck_assert_msg(!w[t].err.msg[0], "thread %u: %s", t,
			      w[t].err.msg);

	for (t = 0; t < MT_THREADS; t++)
		for (j = 0; j < MT_SEQS; j++) {
			uint64_t s = mt_seq(t, j);

			ck_assert_uint_eq(tokens_of(m, s), MT_TOKENS);
			for (pos = 0; pos < MT_TOKENS; pos++)
				for (l = 0; l < MT_LAYERS; l++) {
					mt_row(k, s, pos, l, KV_K);
					mt_row(v, s, pos, l, KV_V);
					read_ok(m, s, pos, l, rk, rv);
					ck_assert_msg(
						memcmp(rk, k, sizeof(k)) == 0 &&
							memcmp(rv, v,
							       sizeof(v)) == 0,
						"seq %llu pos %u layer %u:"
						" wrong data",
						ULL(s), pos, l);
				}
			expect_gather_eq_reads(m, sizeof(k), MT_LAYERS, s,
					       __LINE__);
		}
	finish(m, p);
}
END_TEST

/* ------------------------------------------------------------ suite */

static Suite *data_suite(void)
{
	Suite *s = suite_create("data");
	TCase *tc;

	tc = tcase_create("sizes");
	tcase_add_loop_test(tc, test_sizes_per_dtype, 0, NDTYPES);
	tcase_add_test(tc, test_sizes_id_only_and_null);
	tcase_add_test(tc, test_block_data_range);
	suite_add_tcase(s, tc);

	tc = tcase_create("layout");
	tcase_add_loop_test(tc, test_layout_placement, 0, NDTYPES);
	suite_add_tcase(s, tc);

	tc = tcase_create("rw");
	tcase_add_test(tc, test_rw_roundtrip);
	tcase_add_test(tc, test_rw_single_write_isolated);
	tcase_add_test(tc, test_read_shared);
	suite_add_tcase(s, tc);

	tc = tcase_create("gather");
	tcase_add_loop_test(tc, test_gather_matches_reads, 0, 3);
	tcase_add_test(tc, test_gather_empty);
	tcase_add_test(tc, test_gather_cap);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_add_test(tc, test_err_null);
	tcase_add_test(tc, test_err_id_only);
	tcase_add_test(tc, test_err_layer);
	tcase_add_test(tc, test_err_enoent);
	tcase_add_test(tc, test_err_erange);
	tcase_add_test(tc, test_err_ebusy_fork);
	tcase_add_test(tc, test_err_ebusy_per_block);
	suite_add_tcase(s, tc);

	tc = tcase_create("cow");
	tcase_add_test(tc, test_cow_copies_bytes);
	tcase_add_test(tc, test_cow_cross_boundary);
	tcase_add_test(tc, test_cow_zero_tail);
	suite_add_tcase(s, tc);

	tc = tcase_create("zero");
	tcase_add_loop_test(tc, test_zero_raw_reuse, 0, 2);
	tcase_add_test(tc, test_zero_seq_reuse);
	suite_add_tcase(s, tc);

	tc = tcase_create("large");
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, test_large_arena);
	suite_add_tcase(s, tc);

	tc = tcase_create("overflow");
	tcase_add_test(tc, test_overflow_block);
	tcase_add_test(tc, test_overflow_arena);
	tcase_add_test(tc, test_bad_layout);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_mt_write_read);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return run_suite(data_suite());
}
