/* SPDX-License-Identifier: MIT */
/*
 * minimal.c - the smallest complete use of kvpool: a pool, a manager, a
 * request that is admitted, forked for parallel sampling, decoded, exported
 * as a FlashAttention block table, and freed.
 *
 *   cc minimal.c $(pkg-config --cflags --libs kvpool) -o minimal
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvpool.h>

#define CHECK(call)                                                          \
	do {                                                                 \
		int err_ = (call);                                           \
		if (err_ < 0) {                                              \
			fprintf(stderr, "%s: %s\n", #call,                   \
				kvp_strerror(err_));                         \
			exit(1);                                             \
		}                                                            \
	} while (0)

int main(void)
{
	struct kvp_pool_config pc = {.num_blocks = 1024, .block_tokens = 16,
				     .device_id = -1};
	struct kvp_pool *pool;
	struct kvp_manager *m;
	struct kvp_copy cow[1];
	uint32_t ncow;
	uint64_t seqs[2] = {1, 2};
	int32_t table[2][8];

	CHECK(kvp_pool_create(&pc, &pool));
	struct kvp_manager_config mc = {.pool = pool,
					.policy = KVP_EVICT_LRU};
	CHECK(kvp_manager_create(&mc, &m));
	kvp_pool_unref(pool); /* the manager holds its own reference */

	if (kvp_admit(m, 40) != KVP_ADMIT_OK)
		return 1;
	CHECK(kvp_seq_create(m, 1, 40)); /* a 40-token prompt: 3 blocks */
	CHECK(kvp_seq_fork(m, 1, 2));	 /* a second sample shares them */

	/* One decode step for each sample: the shared, partly filled last
	 * block is copied for whichever sample appends first. */
	for (int i = 0; i < 2; i++) {
		CHECK(kvp_seq_append(m, seqs[i], 1, cow, 1, &ncow));
		if (ncow)
			printf("seq %" PRIu64 ": copy %u tokens of block %u "
			       "into block %u\n",
			       seqs[i], cow[0].tokens, cow[0].src, cow[0].dst);
	}

	CHECK(kvp_export_block_table(m, seqs, 2, &table[0][0], 8, -1));
	for (int i = 0; i < 2; i++) {
		printf("seq %" PRIu64 ":", seqs[i]);
		for (int j = 0; j < 8; j++)
			printf(" %d", table[i][j]);
		printf("\n");
	}
	kvp_manager_dump(m, stdout);
	CHECK(kvp_seq_free(m, 1));
	CHECK(kvp_seq_free(m, 2));
	CHECK(kvp_manager_check(m));
	kvp_manager_destroy(m); /* drops the last pool reference */
	return 0;
}
