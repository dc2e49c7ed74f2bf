/* SPDX-License-Identifier: MIT */
/*
 * paged_attention.c - one decode step of multi-head attention computed
 * straight from kvpool's paged KV cache, the way a paged-attention kernel
 * (FlashInfer) reads it, checked against the same attention over
 * contiguous copies of each sequence.
 *
 * Several sequences (lengths at and around block boundaries, plus a fork
 * whose shared last block was copied on write) get random K/V for every
 * token and layer through kvp_seq_write.  For each layer, the paged side
 * exports the batch as CSR (kv_indptr, kv_indices, kv_last_page_len) and
 * walks the pages with kvp_block_data; the reference side gathers each
 * sequence into [tokens][heads][dim] with kvp_seq_gather.  The outputs
 * must agree to floating-point tolerance; the program exits 1 otherwise.
 *
 *   cc paged_attention.c $(pkg-config --cflags --libs kvpool) -lm
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvpool.h>

#define LAYERS 2
#define HEADS 4
#define DIM 32
#define BT 16
#define NSEQ 6

#define CHECK(call)                                                          \
	do {                                                                 \
		int err_ = (call);                                           \
		if (err_ < 0) {                                              \
			fprintf(stderr, "%s: %s\n", #call,                   \
				kvp_strerror(err_));                         \
			exit(1);                                             \
		}                                                            \
	} while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / (double)(1ull << 53)) * 2.0f -
	       1.0f;
}

static void random_row(float *row)
{
	for (int i = 0; i < HEADS * DIM; i++)
		row[i] = frand();
}

/*
 * Attention of one query (all heads) over `tokens` keys and values; K and
 * V rows are found by a callback, so the paged and the contiguous sides
 * share the arithmetic and differ only in where the rows come from.
 */
typedef const float *(*row_fn)(const void *ctx, uint32_t t, int kv);

static void attend(const float *q, uint32_t tokens, row_fn row,
		   const void *ctx, float *out)
{
	float *scores = malloc(tokens * sizeof(*scores));
	const float scale = 1.0f / sqrtf((float)DIM);

	for (int h = 0; h < HEADS; h++) {
		float max = -INFINITY, sum = 0;

		for (uint32_t t = 0; t < tokens; t++) {
			const float *k = row(ctx, t, 0) + h * DIM;
			float s = 0;

			for (int d = 0; d < DIM; d++)
				s += q[h * DIM + d] * k[d];
			scores[t] = s * scale;
			if (scores[t] > max)
				max = scores[t];
		}
		for (uint32_t t = 0; t < tokens; t++) {
			scores[t] = expf(scores[t] - max);
			sum += scores[t];
		}
		for (int d = 0; d < DIM; d++)
			out[h * DIM + d] = 0;
		for (uint32_t t = 0; t < tokens; t++) {
			const float *v = row(ctx, t, 1) + h * DIM;

			for (int d = 0; d < DIM; d++)
				out[h * DIM + d] += scores[t] / sum * v[d];
		}
	}
	free(scores);
}

/* The paged side: CSR pages of one sequence, read in place. */
struct paged {
	struct kvp_pool *pool;
	const int32_t *pages;
	uint32_t layer;
};

static const float *paged_row(const void *ctx, uint32_t t, int kv)
{
	const struct paged *p = ctx;
	const unsigned char *block = kvp_block_data(p->pool, (uint32_t)p->pages[t / BT]);
	size_t row = kvp_pool_row_bytes(p->pool);

	/* Block layout: [layer][K,V][token][head][dim]. */
	return (const float *)(block +
			       (((size_t)p->layer * 2 + (size_t)kv) * BT +
				t % BT) * row);
}

/* The reference side: contiguous [tokens][heads][dim] copies. */
struct contiguous {
	const float *k, *v;
};

static const float *contiguous_row(const void *ctx, uint32_t t, int kv)
{
	const struct contiguous *c = ctx;

	return (kv ? c->v : c->k) + (size_t)t * HEADS * DIM;
}

int main(void)
{
	struct kvp_layout layout = {.num_layers = LAYERS, .num_kv_heads = HEADS,
				    .head_dim = DIM, .dtype = KVP_F32};
	struct kvp_pool_config pc = {.num_blocks = 256, .block_tokens = BT,
				     .device_id = -1, .layout = &layout};
	struct kvp_manager_config mc = {0};
	struct kvp_pool *pool;
	struct kvp_manager *m;
	uint64_t seqs[NSEQ] = {1, 2, 3, 4, 5, 6};
	uint32_t lens[NSEQ] = {1, 15, 16, 17, 100, 0};
	struct kvp_copy cow[1];
	uint32_t ncow, copies = 0;
	float row_k[HEADS * DIM], row_v[HEADS * DIM];
	double worst = 0;
	int32_t indptr[NSEQ + 1], last[NSEQ];
	int32_t *indices;
	int nidx;

	CHECK(kvp_pool_create(&pc, &pool));
	mc.pool = pool;
	CHECK(kvp_manager_create(&mc, &m));
	kvp_pool_unref(pool);

	/* Five prompts, written token by token as a prefill would. */
	for (int i = 0; i < NSEQ - 1; i++) {
		CHECK(kvp_seq_create(m, seqs[i], lens[i]));
		for (uint32_t pos = 0; pos < lens[i]; pos++)
			for (uint32_t l = 0; l < LAYERS; l++) {
				random_row(row_k);
				random_row(row_v);
				CHECK(kvp_seq_write(m, seqs[i], pos, l, row_k,
						    row_v));
			}
	}
	/* A second sample of the 100-token prompt, then one decode step for
	 * both: the shared last block is copied (bytes included) for the
	 * first to append. */
	CHECK(kvp_seq_fork(m, 5, 6));
	for (int i = 4; i < NSEQ; i++) {
		CHECK(kvp_seq_append(m, seqs[i], 1, cow, 1, &ncow));
		copies += ncow;
		lens[i] = 101;
		for (uint32_t l = 0; l < LAYERS; l++) {
			random_row(row_k);
			random_row(row_v);
			CHECK(kvp_seq_write(m, seqs[i], 100, l, row_k, row_v));
		}
	}

	/* The fork shares its parent's first 100 tokens, the copied block's
	 * included: the copy must have carried the bytes. */
	for (uint32_t l = 0; l < LAYERS; l++) {
		size_t bytes = 101 * sizeof(row_k);
		float *k5 = malloc(bytes), *v5 = malloc(bytes);
		float *k6 = malloc(bytes), *v6 = malloc(bytes);

		CHECK(kvp_seq_gather(m, 5, l, k5, v5));
		CHECK(kvp_seq_gather(m, 6, l, k6, v6));
		if (memcmp(k5, k6, 100 * sizeof(row_k)) ||
		    memcmp(v5, v6, 100 * sizeof(row_v))) {
			fprintf(stderr, "paged_attention: the fork's shared "
					"history differs from its parent's\n");
			return 1;
		}
		free(k5);
		free(v5);
		free(k6);
		free(v6);
	}

	nidx = kvp_export_csr(m, seqs, NSEQ, NULL, NULL, 0, NULL);
	CHECK(nidx);
	indices = malloc((size_t)nidx * sizeof(*indices));
	CHECK(kvp_export_csr(m, seqs, NSEQ, indptr, indices, (uint32_t)nidx,
			     last));

	for (uint32_t l = 0; l < LAYERS; l++) {
		for (int i = 0; i < NSEQ; i++) {
			uint32_t pages = (uint32_t)(indptr[i + 1] - indptr[i]);
			uint32_t tokens = (pages - 1) * BT + (uint32_t)last[i];
			float q[HEADS * DIM], out_paged[HEADS * DIM],
				out_ref[HEADS * DIM];
			float *k = malloc((size_t)tokens * sizeof(row_k));
			float *v = malloc((size_t)tokens * sizeof(row_v));
			struct paged p = {pool, indices + indptr[i], l};
			struct contiguous c = {k, v};

			if (tokens != lens[i]) {
				fprintf(stderr, "seq %d: CSR says %u tokens, "
						"not %u\n",
					i, tokens, lens[i]);
				return 1;
			}
			random_row(q);
			CHECK(kvp_seq_gather(m, seqs[i], l, k, v));
			attend(q, tokens, paged_row, &p, out_paged);
			attend(q, tokens, contiguous_row, &c, out_ref);
			for (int d = 0; d < HEADS * DIM; d++) {
				double e = fabs((double)out_paged[d] -
						(double)out_ref[d]);

				if (e > worst)
					worst = e;
			}
			free(k);
			free(v);
		}
	}
	printf("paged_attention: %d sequences, %d layers, %d heads x %d, "
	       "%d pages, %u copy-on-write copies, max |paged - contiguous| "
	       "= %.3g\n",
	       NSEQ, LAYERS, HEADS, DIM, nidx, copies, worst);
	free(indices);
	for (int i = 0; i < NSEQ; i++)
		CHECK(kvp_seq_free(m, seqs[i]));
	CHECK(kvp_manager_check(m));
	kvp_manager_destroy(m);
	if (copies != 1 || worst > 1e-5) {
		fprintf(stderr, "paged_attention: FAILED\n");
		return 1;
	}
	return 0;
}
