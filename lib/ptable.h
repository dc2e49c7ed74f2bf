/*
 * ptable.h - a manager's prefix table: hash -> block, a hint (layer 5,
 * beside idle.c; prefix.c ties them).  The correctness argument is in
 * ptable.c.
 *
 * Synchronisation table:
 *
 *   operation            may run concurrently with      note
 *   -------------------  -----------------------------  ---------------
 *   ptable_iter_*        everything                     lock-free reads
 *   ptable_insert        everything but the quiescent   lock-free (CAS)
 *                        walks
 *   ptable_slot_at,      inserts (a snapshot), or       read-only
 *   ptable_holds_slot    nothing (the checks)
 *
 * Slots are hints: a slot names a block and the registration (gen) that
 * put it there; the block's record, kept by the caller, says whether the
 * slot is still true.  The table never reads the record itself: the
 * caller's ops do (struct ptable_ops).
 */
#ifndef KVP_PTABLE_H
#define KVP_PTABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "compiler.h"

#define PTABLE_BUCKET_SLOTS 7

/* One cache line: the insert version word and seven slots.  A slot is
 * 0 (empty) or {tag: 16, gen: 16, block + 1: 32}. */
struct ptable_bucket {
	_Atomic uint64_t ver; /* bumped by each insert homed here (CAS) */
	_Atomic uint64_t slot[PTABLE_BUCKET_SLOTS];
} __attribute__((aligned(KVP_CACHELINE)));

struct ptable {
	uint64_t nbuckets; /* immutable, >= 2 */
	struct ptable_bucket *bucket;
};

/* What the caller knows about blocks (read from their records). */
struct ptable_ops {
	/* Whether block b is still cached by this table's owner under
	 * registration gen (low 16 bits compared): its slot is live. */
	bool (*live)(void *ctx, uint32_t b, uint32_t gen);
	/* live, and caching the hash whose words are w. */
	bool (*holds)(void *ctx, uint32_t b, uint32_t gen, const uint64_t w[4]);
};

enum ptable_result {
	PTABLE_STORED,	/* inserted: the only live entry of its hash */
	PTABLE_EXISTS,	/* another live entry holds the hash */
	PTABLE_DUP,	/* inserted, but raced another insert of the hash:
			 * the caller withdraws (its slot goes stale) */
	PTABLE_FULL,	/* no free or stale slot in either bucket */
};

/* A table for a pool of num_blocks blocks (<= 32 bytes per block).
 * 0 or -ENOMEM. */
int ptable_create(uint32_t num_blocks, struct ptable **out);
void ptable_destroy(struct ptable *t);

/* The table key of the hash words w: keyed with a per-process secret. */
uint64_t ptable_key(const uint64_t w[4]);

static inline uint32_t ptable_slot_block(uint64_t v)
{
	return (uint32_t)v - 1;
}

static inline uint32_t ptable_slot_gen(uint64_t v)
{
	return (uint32_t)(v >> 32) & 0xffffu;
}

static inline uint64_t ptable_slot_make(uint64_t key, uint32_t gen,
					uint32_t b)
{
	return (key & 0xffff000000000000ull) |
	       ((uint64_t)(gen & 0xffffu) << 32) | ((uint64_t)b + 1);
}

static inline bool ptable_tag_is(uint64_t v, uint64_t key)
{
	return v && (v >> 48) == (key >> 48);
}

/* The key's two buckets (distinct). */
static inline void ptable_buckets(const struct ptable *t, uint64_t key,
				  uint64_t *b1, uint64_t *b2)
{
	uint64_t k2 = key * 0x9e3779b97f4a7c15ull;

	*b1 = ((key & 0xffffffffull) * t->nbuckets) >> 32;
	*b2 = ((k2 >> 32) * t->nbuckets) >> 32;
	if (*b2 == *b1)
		*b2 = *b1 + 1 == t->nbuckets ? 0 : *b1 + 1;
}

static inline void ptable_prefetch(const struct ptable *t, uint64_t key,
				   bool write)
{
	uint64_t b1, b2;

	ptable_buckets(t, key, &b1, &b2);
	if (write) {
		kvp_prefetch_w(&t->bucket[b1]);
		kvp_prefetch_w(&t->bucket[b2]);
	} else {
		__builtin_prefetch(&t->bucket[b1], 0);
		__builtin_prefetch(&t->bucket[b2], 0);
	}
}

/* The slots whose tag is a key's, both buckets, in order. */
struct ptable_iter {
	const struct ptable_bucket *b[2];
	uint64_t key;
	uint32_t i;
};

static inline void ptable_iter_init(const struct ptable *t, uint64_t key,
				    struct ptable_iter *it)
{
	uint64_t b1, b2;

	ptable_buckets(t, key, &b1, &b2);
	it->b[0] = &t->bucket[b1];
	it->b[1] = &t->bucket[b2];
	it->key = key;
	it->i = 0;
}

/* The next slot value with the key's tag, or 0 at the end. */
static inline uint64_t ptable_iter_next(struct ptable_iter *it)
{
	while (it->i < 2 * PTABLE_BUCKET_SLOTS) {
		uint32_t i = it->i++;
		/* Acquire: the block's record as its registrar wrote it
		 * before the slot (pairs with ptable_insert's release). */
		uint64_t v = atomic_load_explicit(
			&it->b[i / PTABLE_BUCKET_SLOTS]
				 ->slot[i % PTABLE_BUCKET_SLOTS],
			memory_order_acquire);

		if (ptable_tag_is(v, it->key))
			return v;
	}
	return 0;
}

/*
 * Inserts block b, registration gen, for the hash w (key: ptable_key(w)).
 * The caller holds b, and b's record already says it caches w under gen
 * (ops->holds(b, gen, w) is true): see ptable.c.  Returns an enum
 * ptable_result.  Lock-free.
 */
enum ptable_result ptable_insert(struct ptable *t, uint64_t key,
				 const uint64_t w[4], uint32_t b, uint32_t gen,
				 const struct ptable_ops *ops, void *ctx);

/* Slots, for the quiescent walks: how many, and slot i's value. */
static inline uint64_t ptable_nslots(const struct ptable *t)
{
	return t->nbuckets * PTABLE_BUCKET_SLOTS;
}

static inline uint64_t ptable_slot_at(const struct ptable *t, uint64_t i)
{
	/* Relaxed: a snapshot for a walk; the record decides. */
	return atomic_load_explicit(
		&t->bucket[i / PTABLE_BUCKET_SLOTS]
			 .slot[i % PTABLE_BUCKET_SLOTS],
		memory_order_relaxed);
}

/* Whether slot i is in one of key's buckets. */
bool ptable_slot_homed(const struct ptable *t, uint64_t key, uint64_t i);

#endif /* KVP_PTABLE_H */
