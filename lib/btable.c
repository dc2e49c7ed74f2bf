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

