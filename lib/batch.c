/*
 * batch.c - kvp_seq_append_batch: one call appending to many sequences.
 *
 * Floor 11 (doc/architecture.md, "Layers"): a loop over kvp_seq_append,
 * for bindings whose per-call cost (Python's) exceeds the append's own.
 * Each append is as atomic as kvp_seq_append's; the batch as a whole is
 * not: it stops at the first failure, like write(2) stops at a short
 * count.
 */
#include <errno.h>
#include <stdint.h>

#include "kvpool.h"

KVP_API int kvp_seq_append_batch(struct kvp_manager *m, const uint64_t *seqs,
				 const uint32_t *num_tokens, uint32_t nseq,
				 struct kvp_copy *cow, uint32_t cow_cap,
				 uint32_t *ncow)
{
	uint32_t i, used = 0;

	if (!m || (!seqs && nseq) || (!cow && cow_cap) || nseq > INT32_MAX)
		return -EINVAL;
	if (ncow)
		*ncow = 0;
	for (i = 0; i < nseq; i++) {
		uint32_t n = num_tokens ? num_tokens[i] : 1, got = 0;
		int err = kvp_seq_append(m, seqs[i], n, cow ? cow + used : NULL,
					 cow_cap - used, &got);

		if (err)
			return i ? (int)i : err;
		used += got;
		if (ncow)
			*ncow = used;
	}
	return (int)nseq;
}
