/* SPDX-License-Identifier: MIT */
/*
 * data.c - token-level access to the KV data of data-owning pools.
 * Floor 11 of lib/ (doc/architecture.md, "Layers").
 *
 * A block is [layer][K,V][token][head][dim]: for one layer, the K rows of
 * a block's tokens are contiguous, and so are its V rows, which makes a
 * gather one copy per block and per K/V.  A KVP_POOL_K_ONLY pool has one
 * plane, [layer][token][head][dim], and no V: its calls take V as NULL.  Every access holds the
 * sequence's lock, so it sees the sequence's blocks as of one moment.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "error.h"
#include "manager.h"
#include "seqfields.h"

enum { KV_K = 0, KV_V = 1 };

/* Address of the row of token `tok` (within its block) of one layer. */
static unsigned char *row_at(const struct kvp_pool *pool, uint32_t block,
			     uint32_t layer, int kv, uint32_t tok)
{
	size_t at = ((size_t)layer * pool_planes(pool) + (size_t)kv) *
			    pool->block_tokens +
		    tok;

	return pool->data + (size_t)block * pool->block_bytes +
	       at * pool->row_bytes;
}

static int check_data_args(struct kvp_manager *m, uint32_t layer,
			   const void *k, const void *v)
{
	/* V exactly when the pool keeps it.  A data-owning pool of 0 blocks
	 * has no arena but is data-owning all the same: its sequences hold
	 * no token, so every position is out of range (-ERANGE). */
	if (!m || !k || !m->pool->has_layout ||
	    !v != (pool_planes(m->pool) == 1))
		return -EINVAL;
	if (layer >= m->pool->layout.num_layers)
		return -EINVAL;
	return 0;
}

/* Locks sequence seq and finds the block holding pos. */
static int locate(struct kvp_manager *m, uint64_t seq, uint32_t pos,
		  struct kvp_seq **s, uint32_t *block)
{
	*s = seq_acquire(m, seq);
	if (!*s)
		return -ENOENT;
	if (pos >= atomic_load_explicit(&(*s)->num_tokens,
					memory_order_relaxed)) {
		seq_unlock(*s);
		return -ERANGE;
	}
	*block = btable_get(&(*s)->table, pos / m->block_tokens);
	return 0;
}

/*
 * Moves the K and V rows of token pos of one layer between the caller's
 * buffers and the sequence's block: in (a write, refused on a shared
 * block) or out (a read).
 */
static int move_rows(struct kvp_manager *m, uint64_t seq, uint32_t pos,
		     uint32_t layer, void *k, void *v, bool in)
{
	struct kvp_pool *pool;
	struct kvp_seq *s;
	unsigned char *rk, *rv;
	uint32_t block, tok;
	int err = check_data_args(m, layer, k, v);

	if (err)
		return err;
	pool = m->pool;
	err = locate(m, seq, pos, &s, &block);
	if (err)
		return err;
	tok = pos % m->block_tokens;
	rk = row_at(pool, block, layer, KV_K, tok);
	rv = v ? row_at(pool, block, layer, KV_V, tok) : NULL;
	if (!in) {
		memcpy(k, rk, pool->row_bytes);
		if (v)
			memcpy(v, rv, pool->row_bytes);
	} else if (btable_shared(&s->table, pool, pos / m->block_tokens)) {
		/* While we hold the sequence's lock the count can only fall
		 * (seq.c), so a block seen alone stays ours. */
		err = -EBUSY;
	} else {
		memcpy(rk, k, pool->row_bytes);
		if (v)
			memcpy(rv, v, pool->row_bytes);
	}
	seq_unlock(s);
	return err;
}

KVP_API int kvp_seq_write(struct kvp_manager *m, uint64_t seq, uint32_t pos,
			  uint32_t layer, const void *k, const void *v)
{
	/* The casts only share code with reads: in = true never writes
	 * through k or v. */
	return move_rows(m, seq, pos, layer, (void *)k, (void *)v, true);
}

KVP_API int kvp_seq_read(struct kvp_manager *m, uint64_t seq, uint32_t pos,
			 uint32_t layer, void *k, void *v)
{
	return move_rows(m, seq, pos, layer, k, v, false);
}

/* kvp_seq_gather and its capped form (cap UINT32_MAX: the caller sized
 * the arrays): the tokens copied, or a negative errno. */
static int gather(struct kvp_manager *m, uint64_t seq, uint32_t layer,
		  void *k_out, void *v_out, uint32_t cap)
{
	struct kvp_pool *pool;
	struct kvp_seq *s;
	unsigned char *ko = k_out, *vo = v_out;
	uint32_t bt, left, n_tokens;
	int err = check_data_args(m, layer, k_out, v_out);

	if (err)
		return err;
	pool = m->pool;
	bt = m->block_tokens;
	s = seq_acquire(m, seq);
	if (!s)
		return -ENOENT;
	n_tokens = left = seq_tokens(s);
	if (left > cap) {
		seq_unlock(s);
		kvp_note_buffer(left, cap);
		return -ENOBUFS;
	}
	for (uint32_t i = 0; left; i++) {
		uint32_t n = left < bt ? left : bt;
		size_t bytes = (size_t)n * pool->row_bytes;
		uint32_t b = btable_get(&s->table, i);

		memcpy(ko, row_at(pool, b, layer, KV_K, 0), bytes);
		ko += bytes;
		if (vo) {
			memcpy(vo, row_at(pool, b, layer, KV_V, 0), bytes);
			vo += bytes;
		}
		left -= n;
	}
	seq_unlock(s);
	return (int)n_tokens;
}

KVP_API int kvp_seq_gather(struct kvp_manager *m, uint64_t seq, uint32_t layer,
			   void *k_out, void *v_out)
{
	int n = gather(m, seq, layer, k_out, v_out, UINT32_MAX);

	return n < 0 ? n : 0;
}

KVP_API int kvp_seq_gather_cap(struct kvp_manager *m, uint64_t seq,
			       uint32_t layer, void *k_out, void *v_out,
			       uint32_t cap_tokens)
{
	/* The count returned is an int. */
	if (cap_tokens > INT_MAX)
		cap_tokens = INT_MAX;
	return gather(m, seq, layer, k_out, v_out, cap_tokens);
}
