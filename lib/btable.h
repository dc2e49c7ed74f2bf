/* SPDX-License-Identifier: MIT */
/*
 * btable.h - a sequence's block table: the ids of its blocks, in order,
 * shared between forks in reference-counted chunks (layer 5,
 * doc/architecture.md "Layers": btable.c, over pool.c and alloc.c).
 *
 * Owns struct btable and struct btchunk, whose fields no other file
 * touches: the rest of lib/ reaches a table through these functions.
 *
 * Shape.  Blocks [0, n - 1) sit in chunks of BT_K ids, blocks [k * BT_K,
 * (k + 1) * BT_K) in chunks[k]; the last block, n - 1, is the *tail*,
 * held by a reference of its own.  A chunk holds one reference on each
 * of its ids, and a table holds one reference on each of its chunks.  So
 * a block's reference count counts its holders: chunks, tails (and the
 * pool's parked references), not sequences.  doc/architecture.md,
 * "Shared block-table chunks", gives the reasons.
 *
 * Sharing.  A fork copies the chunk pointers and takes one reference per
 * chunk and one on the tail block.  A chunk with more than one reference
 * is immutable; a table that must change one (push a block into it,
 * truncate or cut inside it) first replaces it with a private copy,
 * taking one reference per block it keeps, and drops its reference on
 * the shared one.  So every id of a chunk is in every holder's table,
 * and a block is freed exactly when its last user lets go.
 *
 * Synchronisation.  A table belongs to one sequence and every call runs
 * under that sequence's lock, or on a dead struct its caller alone
 * holds.  A chunk's reference count is atomic: holders in other
 * sequences change it concurrently.  A holder reads a chunk's ids only
 * while it holds a reference, and a chunk with more than one reference is
 * never written, so ids need no atomics.  The argument for the counts:
 * a reference is taken only by a holder (a fork holds the source's lock,
 * and the source holds the chunk), so a count seen as 1 by a holder is
 * its own and stays 1 until the holder hands out another (it may then
 * write the chunk); a count that reaches 0 was dropped by its last
 * holder, who alone releases the chunk's blocks (acq_rel: every other
 * holder's reads of the chunk happen before the chunk's reuse).
 *
 * Blocks a call lets go of (a chunk's when its count reaches 0, a tail
 * dropped by a truncate) are not dropped here: they go to a struct
 * btable_sink, which hands them to the caller's release function in
 * batches, last block first, so that the end of a hash chain is released
 * before its head.
 */
#ifndef KVP_BTABLE_H
#define KVP_BTABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "pool.h"

/* Ids per chunk: a chunk is one cache line. */
#define BT_K 14u
/* Chunk pointers held inside the table: 4 * 14 + 1 = 57 blocks, 912
 * tokens of 16, without a heap array. */
#define BT_INLINE_CHUNKS 4u

struct btchunk {
	/* Holders (tables).  Synchronization: atomic, see the top. */
	_Atomic uint32_t refs;
	/* ids[0..n) in use.  Written only by a sole holder. */
	uint16_t n;
	/* Scratch of kvp_manager_check (quiescent): references seen. */
	uint16_t seen;
	uint32_t ids[BT_K];
};

_Static_assert(sizeof(struct btchunk) == KVP_CACHELINE,
	       "a chunk is one cache line");

struct btable {
	uint32_t n;		 /* blocks in all */
	uint32_t tail;		 /* block n - 1, if n > 0 */
	struct btchunk **chunks; /* inline_chunks until the table grows */
	uint32_t ncap;		 /* room in chunks[] */
	/* chunks[nchunks .. spare_end), if any, are spares: private, empty
	 * chunks of this table's own (btable_reserve_own), which pushes use
	 * before the thread's cache.  A shrink or release frees them. */
	uint32_t spare_end;
	struct btchunk *inline_chunks[BT_INLINE_CHUNKS];
};

/* The bytes of struct btable an append within a block reads (one that
 * takes a new block reads the rest too). */
#define BTABLE_HOT_BYTES offsetof(struct btable, ncap)

/* Where a call puts the blocks it lets go of (see the top). */
struct btable_sink {
	void (*release)(void *ctx, uint32_t *ids, uint32_t n);
	void *ctx;
	uint32_t n;
	uint32_t ids[256];
};

static inline void btable_sink_init(struct btable_sink *sk,
				    void (*release)(void *, uint32_t *,
						    uint32_t),
				    void *ctx)
{
	sk->release = release;
	sk->ctx = ctx;
	sk->n = 0;
}

/* Hands what the sink holds to its release function. */
void btable_sink_flush(struct btable_sink *sk);

/*
 * Whether a chunk its caller holds has other holders.  A count seen as 1
 * by a holder stays 1 (see the top).  Acquire: the holders that dropped
 * theirs (release) read the chunk before we, its sole holder now, write
 * it or its blocks.
 */
static inline bool btchunk_shared(const struct btchunk *c)
{
	return atomic_load_explicit(&c->refs, memory_order_acquire) > 1;
}

/* The number of table entries `tokens` tokens take. */
static inline uint32_t blocks_for(uint32_t tokens, uint32_t block_tokens)
{
	return tokens / block_tokens + (tokens % block_tokens != 0);
}

static inline uint32_t btable_len(const struct btable *t)
{
	return t->n;
}

static inline uint32_t btable_get(const struct btable *t, uint32_t i)
{
	if (i == t->n - 1)
		return t->tail;
	return t->chunks[i / BT_K]->ids[i % BT_K];
}

/* The last id; the table is not empty. */
static inline uint32_t btable_last(const struct btable *t)
{
	return t->tail;
}

/* Replaces the last id (copy-on-write of the last block: the caller
 * drops its reference on the old one). */
static inline void btable_set_last(struct btable *t, uint32_t id)
{
	t->tail = id;
}

/*
 * Whether block i of the table is shared: another holder has it, it is
 * cached, or the chunk that holds it for this table has other holders.
 * A holder must not write a shared block.
 */
static inline bool btable_shared(const struct btable *t,
				 const struct kvp_pool *pool, uint32_t i)
{
	uint32_t id = btable_get(t, i);

	if (i != t->n - 1 && btchunk_shared(t->chunks[i / BT_K]))
		return true;
	return pool_block_shared(pool, id);
}

/* An empty table using its inline storage (a new struct). */
void btable_init(struct btable *t);
/* Frees the table's storage; the table is empty (the struct's end). */
void btable_fini(struct btable *t);
/* Whether the table's own invariants hold (kvp_manager_check). */
bool btable_valid(const struct btable *t);

/*
 * Makes room for `need` entries in all, keeping the current ones: the
 * chunk pointers, and in this thread's chunk cache the chunks a push up
 * to `need` may take (a copy of a shared last chunk included).  Returns 0
 * or -ENOMEM (the table unchanged).  After it, btable_append() of up to
 * need - len entries cannot fail.
 */
int btable_reserve(struct btable *t, uint32_t need);

/*
 * kvp_seq_reserve: room for `need` blocks in all that no later push
 * allocates for, whatever thread pushes: the chunk pointers, the chunks
 * themselves as spares of the table's own, and a private copy of a
 * shared, partly filled last chunk (the shared one's reference goes to
 * sk).  0 or -ENOMEM (the table unchanged but maybe a larger array of
 * chunk pointers).
 */
int btable_reserve_own(struct btable *t, struct kvp_pool *pool, uint32_t need,
		       struct btable_sink *sk);

/*
 * Appends ids[0..n), whose references the caller gives to the table;
 * btable_reserve() made the room.  A shared last chunk is copied first
 * (one reference per block it keeps, on pool's state words), its
 * reference dropped into sk.
 */
void btable_append(struct btable *t, struct kvp_pool *pool,
		   const uint32_t *ids, uint32_t n, struct btable_sink *sk);

/*
 * Keeps entries [0, n), letting the others go into sk.  Returns 0 or
 * -ENOMEM (a shared chunk had to be copied and no memory was left: the
 * table unchanged).
 */
int btable_truncate(struct btable *t, struct kvp_pool *pool, uint32_t n,
		    struct btable_sink *sk);

/*
 * Removes entries [first, first + n) (StreamingLLM trim: the sinks
 * before, the window after), the others kept in order; the removed ones
 * go into sk.  Returns 0, or -ENOMEM (the table unchanged) if a chunk is
 * shared: a table of its own chunks is cut in place, allocating nothing.
 */
int btable_cut(struct btable *t, struct kvp_pool *pool, uint32_t first,
	       uint32_t n, struct btable_sink *sk);

/* Lets every entry go into sk (the sequence's free); the table is empty
 * after it. */
void btable_release(struct btable *t, struct btable_sink *sk);

/* Copies entries [first, first + n) to out. */
void btable_copy_out(const struct btable *t, uint32_t first, uint32_t n,
		     uint32_t *out);

/*
 * Makes the empty table dst share src's chunks and tail (a fork): one
 * reference per chunk and one on the tail block.  Returns 0, -ENOMEM
 * (no room for the pointers) or the tail reference's error (-EOVERFLOW),
 * dst unchanged.
 */
int btable_fork(struct btable *dst, const struct btable *src,
		struct kvp_pool *pool);

/*
 * btable_fork in three steps, for a fork of n tables at once:
 * btable_fork_room makes room in the empty table dst for src's chunk
 * pointers (0 or -ENOMEM, nothing shared yet); btable_share takes n
 * references on each of src's chunks and n on its tail block (0, or
 * -EOVERFLOW with nothing taken); btable_fork_copy then makes dst, with
 * room made, share src's chunks and tail through one of those references.
 */
int btable_fork_room(struct btable *dst, const struct btable *src);
int btable_share(const struct btable *src, struct kvp_pool *pool,
		 uint32_t n);
void btable_fork_copy(struct btable *dst, const struct btable *src);

/*
 * kvp_manager_check, quiescent: call btable_check_begin() on every table,
 * then btable_check_count() on every table, adding each block's holders
 * (a chunk counted once, however many tables share it) to counts[], then
 * btable_check_end() on every table, which fails (false) if a chunk's
 * count differs from the tables that hold it.
 */
void btable_check_begin(const struct btable *t);
void btable_check_count(const struct btable *t, uint32_t *counts);
bool btable_check_end(const struct btable *t);

/* Chunks this thread's cache keeps for later tables (the rest is freed);
 * they go at its exit. */
#define BT_CACHE_MAX 64u

#ifdef KVP_FAULT_INJECTION
/* Test hook: atomic operations on shared state (chunk and block
 * reference counts) made by btable calls in this thread. */
uint64_t btable_atomics(void);
#endif

#endif /* KVP_BTABLE_H */
