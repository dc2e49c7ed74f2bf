/*
 * btable.c - a sequence's block table (layer 3, doc/architecture.md
 * "Layers": over alloc.c; called by the sequence files above it).
 *
 * Owns struct btable (btable.h): an array of block ids, held inline in
 * the struct for short sequences and on the heap once it grows (doubling,
 * so appends reallocate O(log n) times).  Synchronisation is the
 * caller's: btable.h says what it must hold.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "btable.h"

static size_t table_bytes(uint32_t cap)
{
	return (size_t)cap * sizeof(uint32_t);
}

void btable_init(struct btable *t)
{
	t->n = 0;
	t->ids = t->inline_ids;
	t->cap = KVP_INLINE_TABLE;
}

void btable_fini(struct btable *t)
{
	if (t->ids != t->inline_ids)
		kvp_free(t->ids, table_bytes(t->cap));
	btable_init(t);
}

bool btable_valid(const struct btable *t)
{
	return t->n <= t->cap &&
	       (t->ids == t->inline_ids) == (t->cap == KVP_INLINE_TABLE);
}

/* btable_reserve's slow path: a table of at least twice the capacity. */
int btable_grow(struct btable *t, uint32_t need)
{
	uint32_t *ids;
	uint64_t c;

	c = (uint64_t)t->cap * 2;
	if (c < need)
		c = need;
	ids = kvp_malloc(c * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	memcpy(ids, t->ids, (size_t)t->n * sizeof(*ids));
	if (t->ids != t->inline_ids)
		kvp_free(t->ids, table_bytes(t->cap));
	t->ids = ids;
	t->cap = (uint32_t)c;
	return 0;
}

uint32_t *btable_room(struct btable *t, uint32_t n)
{
	if (btable_reserve(t, t->n + n))
		return NULL;
	return t->ids + t->n;
}

void btable_extend(struct btable *t, uint32_t n)
{
	if (config_debug && n > t->cap - t->n)
		kvp_fatal("btable_extend past the reserved room");
	t->n += n;
}

void btable_append(struct btable *t, const uint32_t *ids, uint32_t n)
{
	if (config_debug && n > t->cap - t->n)
		kvp_fatal("btable_append past the reserved room");
	memcpy(t->ids + t->n, ids, (size_t)n * sizeof(*ids));
	t->n += n;
}

uint32_t *btable_truncate(struct btable *t, uint32_t n, uint32_t *dropped)
{
	if (config_debug && n > t->n)
		kvp_fatal("btable_truncate beyond the table's end");
	*dropped = t->n - n;
	t->n = n;
	return t->ids + n;
}

static void reverse(uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0, j = n ? n - 1 : 0; i < j; i++, j--) {
		uint32_t x = ids[i];

		ids[i] = ids[j];
		ids[j] = x;
	}
}

uint32_t *btable_cut(struct btable *t, uint32_t first, uint32_t n)
{
	uint32_t *a = t->ids + first, rest;

	if (config_debug && (first > t->n || n > t->n - first))
		kvp_fatal("btable_cut beyond the table's end");
	/* Rotates [cut][rest] into [rest][cut], both kept in order, by
	 * three reversals: no buffer needed. */
	rest = t->n - first - n;
	reverse(a, n);
	reverse(a + n, rest);
	reverse(a, n + rest);
	t->n -= n;
	return t->ids + t->n;
}

void btable_copy_out(const struct btable *t, uint32_t first, uint32_t n,
		     uint32_t *out)
{
	if (n)
		memcpy(out, t->ids + first, (size_t)n * sizeof(*out));
}

int btable_fork_copy(struct btable *dst, const struct btable *src)
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
