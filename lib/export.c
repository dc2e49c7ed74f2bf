/* SPDX-License-Identifier: MIT */
/*
 * export.c - block tables in the formats attention kernels take.
 * Floor 11 of lib/ (doc/architecture.md, "Layers").
 *
 * Each sequence is read under its own lock (seqmem.h), so each row is a
 * consistent snapshot of one sequence; rows of different sequences may be
 * from different moments if other threads append meanwhile.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "manager.h"
#include "seqfields.h"

/* The longest table among seqs, or -ENOENT. */
static int max_blocks(struct kvp_manager *m, const uint64_t *seqs,
		      uint32_t nseq, uint64_t *total)
{
	uint32_t longest = 0;

	*total = 0;
	for (uint32_t i = 0; i < nseq; i++) {
		struct kvp_seq *s = seq_acquire(m, seqs[i]);

		if (!s)
			return -ENOENT;
		uint32_t nb = btable_len(&s->table);

		if (nb > longest)
			longest = nb;
		*total += nb;
		seq_unlock(s);
	}
	return (int)longest;
}

KVP_API int kvp_export_block_table(struct kvp_manager *m, const uint64_t *seqs,
				   uint32_t nseq, int32_t *table,
				   uint32_t stride, int32_t pad)
{
	uint64_t total;
	int err = 0;

	if (!m || (!seqs && nseq))
		return -EINVAL;
	if (!table)
		return max_blocks(m, seqs, nseq, &total);
	for (uint32_t i = 0; i < nseq && !err; i++) {
		int32_t *row = table + (size_t)i * stride;
		struct kvp_seq *s = seq_acquire(m, seqs[i]);
		uint32_t j, nb;

		if (!s) {
			err = -ENOENT;
			break;
		}
		nb = btable_len(&s->table);
		if (nb > stride) {
			kvp_note_buffer(nb, stride);
			err = -ENOBUFS;
		} else {
			/* Ids are below KVP_MAX_BLOCKS = 2^31: int32 safe. */
			for (j = 0; j < nb; j++)
				row[j] = (int32_t)btable_get(&s->table, j);
			for (; j < stride; j++)
				row[j] = pad;
		}
		seq_unlock(s);
	}
	return err;
}

KVP_API int kvp_export_csr(struct kvp_manager *m, const uint64_t *seqs,
			   uint32_t nseq, int32_t *indptr, int32_t *indices,
			   uint32_t cap, int32_t *last_page_len)
{
	uint32_t bt;
	uint64_t total, at = 0;
	int err = 0;

	if (!m || (!seqs && nseq))
		return -EINVAL;
	if (indices && (!indptr || (!last_page_len && nseq)))
		return -EINVAL;
	bt = m->block_tokens;
	if (!indices) {
		err = max_blocks(m, seqs, nseq, &total);
		if (err >= 0)
			err = total > INT32_MAX ? -EOVERFLOW : (int)total;
		return err;
	}
	indptr[0] = 0;
	for (uint32_t i = 0; i < nseq && !err; i++) {
		struct kvp_seq *s = seq_acquire(m, seqs[i]);
		uint32_t tokens, nb;

		if (!s) {
			err = -ENOENT;
			break;
		}
		tokens = atomic_load_explicit(&s->num_tokens,
					      memory_order_relaxed);
		nb = btable_len(&s->table);
		if (at + nb > cap) {
			kvp_note_buffer((uint64_t)at + nb, cap);
			err = -ENOBUFS;
		} else if (at + nb > INT32_MAX) {
			err = -EOVERFLOW;
		} else {
			for (uint32_t j = 0; j < nb; j++)
				indices[at + j] =
					(int32_t)btable_get(&s->table, j);
			at += nb;
			indptr[i + 1] = (int32_t)at;
			last_page_len[i] =
				tokens ? (int32_t)(tokens - (nb - 1) * bt) : 0;
		}
		seq_unlock(s);
	}
	return err;
}

KVP_API int kvp_export_slot_mapping(struct kvp_manager *m, uint64_t seq,
				    uint32_t first_pos, uint32_t n,
				    int64_t *slots)
{
	struct kvp_seq *s;
	uint32_t bt;
	int err = 0;

	if (!m || (!slots && n))
		return -EINVAL;
	bt = m->block_tokens;
	s = seq_acquire(m, seq);
	if (!s)
		return -ENOENT;
	if ((uint64_t)first_pos + n >
	    atomic_load_explicit(&s->num_tokens, memory_order_relaxed)) {
		err = -ERANGE;
	} else {
		for (uint32_t i = 0; i < n; i++) {
			uint32_t pos = first_pos + i;
			int64_t b = btable_get(&s->table, pos / bt);

			slots[i] = b * bt + pos % bt;
		}
	}
	seq_unlock(s);
	return err;
}
