/*
 * btable.h - a sequence's block table: the ids of its blocks, in order
 * (layer 3, doc/architecture.md "Layers": btable.c, over alloc.c).
 *
 * Owns struct btable, whose fields no other file touches: the rest of
 * lib/ reaches a table through these functions, so that a change of its
 * representation (shared chunks of ids, issue 24) lands here alone.
 *
 * Synchronisation: none of its own.  A table belongs to one sequence and
 * every call runs under that sequence's lock (seq_lock), or on a dead
 * struct its caller alone holds.  The ids returned by btable_truncate()
 * and btable_cut() stay readable (and the caller's to reorder) until the
 * table next grows.
 */
#ifndef KVP_BTABLE_H
#define KVP_BTABLE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"

/* Entries held inside the table itself: short sequences allocate none. */
#define KVP_INLINE_TABLE 16

struct btable {
	uint32_t n, cap;	/* ids[0..n) in use, room for cap */
	uint32_t *ids;		/* inline_ids until the table grows */
	uint32_t inline_ids[KVP_INLINE_TABLE];
};

/* The bytes of struct btable an append reads: the rest is the inline
 * storage (struct kvp_seq keeps these in its first cache line). */
#define BTABLE_HOT_BYTES offsetof(struct btable, inline_ids)

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
	return t->ids[i];
}

/* The last id; the table is not empty. */
static inline uint32_t btable_last(const struct btable *t)
{
	return t->ids[t->n - 1];
}

/* Replaces the last id (copy-on-write of the last block). */
static inline void btable_set_last(struct btable *t, uint32_t id)
{
	t->ids[t->n - 1] = id;
}

/* An empty table using its inline storage (a new struct). */
void btable_init(struct btable *t);
/* Frees the table's storage (the struct's destruction). */
void btable_fini(struct btable *t);
/* Whether the table's own invariants hold (kvp_manager_check). */
bool btable_valid(const struct btable *t);

int btable_grow(struct btable *t, uint32_t need);

/* Makes room for `need` entries in all, keeping the current ones.
 * Returns 0 or -ENOMEM (the table unchanged). */
static inline int btable_reserve(struct btable *t, uint32_t need)
{
	return likely(need <= t->cap) ? 0 : btable_grow(t, need);
}

/*
 * The n unused entries after the last one, for the caller to fill in
 * place (a create's hits and allocation write there), then count with
 * btable_extend(); NULL if out of memory.  Makes room like
 * btable_reserve().
 */
static inline uint32_t *btable_room(struct btable *t, uint32_t n)
{
	if (btable_reserve(t, t->n + n))
		return NULL;
	return t->ids + t->n;
}

/* Counts the next n entries, filled through btable_room(). */
static inline void btable_extend(struct btable *t, uint32_t n)
{
	if (config_debug && n > t->cap - t->n)
		kvp_fatal("btable_extend past the reserved room");
	t->n += n;
}

/* Appends ids[0..n); btable_reserve() made the room. */
static inline void btable_append(struct btable *t, const uint32_t *ids,
				 uint32_t n)
{
	if (config_debug && n > t->cap - t->n)
		kvp_fatal("btable_append past the reserved room");
	memcpy(t->ids + t->n, ids, (size_t)n * sizeof(*ids));
	t->n += n;
}

/*
 * Keeps entries [0, n) and returns the dropped ones [n, old length) (see
 * above for how long they stay), their count in *dropped.
 */
static inline uint32_t *btable_truncate(struct btable *t, uint32_t n,
					uint32_t *dropped)
{
	if (config_debug && n > t->n)
		kvp_fatal("btable_truncate beyond the table's end");
	*dropped = t->n - n;
	t->n = n;
	return t->ids + n;
}

/*
 * Removes entries [first, first + n), keeping the others in order
 * (StreamingLLM trim: the sinks before, the window after).  Returns the
 * removed ids, in their order.  Allocates nothing.
 */
uint32_t *btable_cut(struct btable *t, uint32_t first, uint32_t n);

/* Copies entries [first, first + n) to out. */
static inline void btable_copy_out(const struct btable *t, uint32_t first,
				   uint32_t n, uint32_t *out)
{
	if (n)
		memcpy(out, t->ids + first, (size_t)n * sizeof(*out));
}

/* Makes the empty table dst a copy of src (a fork; the caller takes the
 * references).  Returns 0 or -ENOMEM (dst unchanged). */
static inline int btable_fork_copy(struct btable *dst,
				   const struct btable *src)
{
	uint32_t *room;

	if (config_debug && dst->n)
		kvp_fatal("btable_fork_copy into a table in use");
	room = btable_room(dst, src->n);
	if (!room)
		return -ENOMEM;
	btable_copy_out(src, 0, src->n, room);
	dst->n += src->n;
	return 0;
}

#endif /* KVP_BTABLE_H */
