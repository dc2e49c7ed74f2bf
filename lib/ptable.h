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
 * put it there; the caller's registration words and records say whether
 * the slot is still true (struct ptable_owner).
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

/*
 * What the caller knows about blocks.  reg[b] is {gen & 0xffff, uid}
 * (gen in bits 32..47) while block b is registered by this table's
 * owner under gen, anything else otherwise: a slot {gen, b} is live
 * exactly when reg[b] says so.  holds(ctx, b, w): whether b's record
 * caches the hash whose words are w (asked of live slots only).
 */
struct ptable_owner {
	const _Atomic uint64_t *reg;
	uint64_t uid;
	bool (*holds)(void *ctx, uint32_t b, const uint64_t w[4]);
	void *ctx;
};

/* Whether slot value v (not 0) is live for owner o.  Acquire: the
 * record as its registrar wrote it before reg[b]. */
static inline bool ptable_live(const struct ptable_owner *o, uint64_t v)
{
	return atomic_load_explicit(&o->reg[(uint32_t)v - 1],
				    memory_order_acquire) ==
	       ((v & 0x0000ffff00000000ull) | o->uid);
}

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

/*
 * The table key's secret: 32 random bytes per process, drawn once, before
 * the first table exists (ptable_create; pthread_once orders it before
 * every use).
 *
 * Block hashes are public: vLLM-compatible ones with a known seed, or
 * SHA-256 of prompts a client chooses.  With a key anyone can compute,
 * a client could grind prompts whose blocks share a bucket pair and
 * fill it, so that its commits leave other tenants' blocks uncached.
 * Keyed, the buckets and tag are unpredictable without the secret, which
 * never leaves the process.
 */
extern uint64_t ptable_key_secret[4];

static inline uint64_t ptable_mul_fold64(uint64_t a, uint64_t b)
{
	__uint128_t p = (__uint128_t)a * b;

	return (uint64_t)p ^ (uint64_t)(p >> 64);
}

/*
 * The table key of the hash words w: all of them, mixed with the secret
 * (callers may pass hashes of their own, not only uniform ones).  It is
 * XXH3's 17-to-32-byte path over the 32 bytes with the secret as the
 * first 32 bytes of its secret (so XXH3_64bits_withSecret on a
 * little-endian machine): two 64x64->128-bit multiplies of input words
 * masked by secret words, folded, then XXH3's avalanche.
 */
static inline uint64_t ptable_key(const uint64_t w[4])
{
	const uint64_t *k = ptable_key_secret;
	uint64_t x = 32 * 0x9e3779b185ebca87ull;

	x += ptable_mul_fold64(w[0] ^ k[0], w[1] ^ k[1]);
	x += ptable_mul_fold64(w[2] ^ k[2], w[3] ^ k[3]);
	x ^= x >> 37;
	x *= 0x165667919e3779f9ull;
	x ^= x >> 32;
	return x;
}

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

/* A second look ahead of an insert, once key's buckets have arrived:
 * asks for the registration words of the first slots it may check. */
static inline void ptable_prefetch_owners(const struct ptable *t,
					  uint64_t key,
					  const struct ptable_owner *o)
{
	uint64_t b1, b2;

	ptable_buckets(t, key, &b1, &b2);
	for (uint32_t i = 0; i < PTABLE_BUCKET_SLOTS; i++) {
		/* Relaxed: only an address to prefetch. */
		uint64_t v = atomic_load_explicit(&t->bucket[b1].slot[i],
						  memory_order_relaxed);

		if (v)
			__builtin_prefetch(&o->reg[(uint32_t)v - 1], 0);
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
	uint64_t tag = it->key >> 48;
	uint32_t i = it->i; /* a local: kept in a register */

	for (; i < 2 * PTABLE_BUCKET_SLOTS; i++) {
		const struct ptable_bucket *bk =
			it->b[i >= PTABLE_BUCKET_SLOTS];
		uint32_t j = i >= PTABLE_BUCKET_SLOTS
				     ? i - PTABLE_BUCKET_SLOTS
				     : i;
		/* Acquire: the block's record as its registrar wrote it
		 * before the slot (pairs with ptable_insert's release). */
		uint64_t v = atomic_load_explicit(&bk->slot[j],
						  memory_order_acquire);

		if (v && (v >> 48) == tag) {
			it->i = i + 1;
			return v;
		}
	}
	it->i = i;
	return 0;
}

/*
 * Inserts block b, registration gen, for the hash w (key: ptable_key(w)).
 * The caller holds b, and b's registration word and record already say
 * it caches w under gen: see ptable.c.  Returns an enum ptable_result;
 * for STORED and DUP, the slot's index in *slot (for ptable_clear).
 * Lock-free.
 */
enum ptable_result ptable_insert(struct ptable *t, uint64_t key,
				 const uint64_t w[4], uint32_t b, uint32_t gen,
				 const struct ptable_owner *o, uint64_t *slot);

/* Empties slot i if it still holds block b's entry of registration gen
 * (the block's registration word no longer says so).  Lock-free. */
void ptable_clear(struct ptable *t, uint64_t i, uint32_t b, uint32_t gen);

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
