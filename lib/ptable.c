/*
 * ptable.c - a manager's prefix table (layer 5): a hint from a block
 * hash to the block caching it, lock-free for readers and writers.
 *
 * Correctness argument.
 *
 * The table is an array of one-cache-line buckets; a hash has two (its
 * key picks them), and its entry, if any, is in one of their fourteen
 * slots.  A slot is empty (0) or {tag, gen, block + 1}: the key's top 16
 * bits, the low 16 bits of the block's registration generation, and the
 * block.  A slot is only a hint: the block's record (hash, owner, gen,
 * the CACHED flag of its state word; the caller's, seen through
 * struct ptable_ops) says whether it is true.  A slot is live while its
 * block is cached by this table's manager under that gen; otherwise it
 * is stale.  Nothing ever deletes a slot: an eviction only changes the
 * block's record and state, which makes the slot stale, and a later
 * insert reuses a stale slot in place (lazy deletion).  So slots change
 * only by an insert's CAS, from empty or from a stale value to a new
 * entry, and readers need no protection: every value they load is a
 * well-formed hint, and they validate it against the record.
 *
 * No ABA on a slot: an insert that judged a slot stale CASes from the
 * exact value it judged.  A stale slot becomes live again only if its
 * block is registered again under the same gen, which needs 2^16
 * registrations of that block inside the insert's window; any other
 * re-registration writes another value, and the CAS fails.
 *
 * One live entry per hash.  The caller has written the block's record
 * (so the new slot is live and holds the hash) before the insert.  An
 * insert of hash h reads the version word of h's first bucket (acquire),
 * scans both buckets for a live entry holding h (found: EXISTS), CASes
 * its slot in (release: the record before the slot), and then CASes the
 * version word from the value it read to the next (acq_rel).  The version
 * word is the only word every insert of h writes, so the successful
 * version CASes of h's inserts are totally ordered.  Take two inserts of
 * h, X before Y in that order.  X's slot was published before X's
 * version CAS; Y's version CAS started from a value at or after X's, so
 * Y read it (acquire) after X's CAS, and Y's scan after that read sees
 * X's slot: Y ends with EXISTS, or, if Y's first read came before X's
 * CAS, Y's version CAS fails, Y reads the new value and rescans, sees X's
 * entry and ends with DUP (it withdraws: the caller uncaches its block,
 * which makes its slot stale).  So of the inserts of h while X's entry is
 * live, only X returns STORED.  Two inserts may both withdraw (each sees
 * the other before either's version CAS): then h is left uncached, which
 * costs a later miss, never a wrong hit.
 *
 * Readers (ptable_iter_next) load slots with acquire, pairing with the
 * insert's release, so a reader that loads an entry reads the record as
 * the registrar wrote it; the record's own checks (after the reader's
 * CAS on the state word) decide.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "ptable.h"

/*
 * The table key's secret: 32 random bytes per process, drawn once, before
 * the first table exists (key_init, from ptable_create; pthread_once
 * orders it before every use).
 *
 * Block hashes are public: vLLM-compatible ones with a known seed, or
 * SHA-256 of prompts a client chooses.  With a key anyone can compute,
 * a client could grind prompts whose blocks share a bucket pair and
 * fill it, so that its commits leave other tenants' blocks uncached.
 * Keyed, the buckets and tag are unpredictable without the secret, which
 * never leaves the process.
 */
static uint64_t key_secret[4];
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static inline uint64_t mul_fold64(uint64_t a, uint64_t b)
{
	__uint128_t p = (__uint128_t)a * b;

	return (uint64_t)p ^ (uint64_t)(p >> 64);
}

/*
 * The table key of a hash: all its words, mixed with the secret (callers
 * may pass hashes of their own, not only uniform ones).  It is XXH3's
 * 17-to-32-byte path over the 32 bytes with key_secret as the first 32
 * bytes of its secret (so XXH3_64bits_withSecret on a little-endian
 * machine): two 64x64->128-bit multiplies of input words masked by
 * secret words, folded, then XXH3's avalanche.
 */
uint64_t ptable_key(const uint64_t w[4])
{
	uint64_t x = 32 * 0x9e3779b185ebca87ull;

	x += mul_fold64(w[0] ^ key_secret[0], w[1] ^ key_secret[1]);
	x += mul_fold64(w[2] ^ key_secret[2], w[3] ^ key_secret[3]);
	x ^= x >> 37;
	x *= 0x165667919e3779f9ull;
	x ^= x >> 32;
	return x;
}

static void key_init(void)
{
	unsigned char *p = (unsigned char *)key_secret;
	size_t got = 0;

	while (got < sizeof(key_secret)) {
		ssize_t r = getrandom(p + got, sizeof(key_secret) - got,
				      GRND_NONBLOCK);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got < sizeof(key_secret)) {
		/* No randomness yet (early boot, a sandbox without the
		 * syscall): the time, the process and an address, so that
		 * the key still differs from process to process. */
		struct timespec ts;
		uint64_t s;

		clock_gettime(CLOCK_REALTIME, &ts);
		s = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		s ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&got;
		for (int i = 0; i < 4; i++) {
			s += 0x9e3779b97f4a7c15ull; /* splitmix64 */
			key_secret[i] = mul_fold64(s ^ (s >> 30),
						   0xbf58476d1ce4e5b9ull) ^
					mul_fold64(s, 0x94d049bb133111ebull);
		}
	}
}

/*
 * One bucket (64 bytes, seven slots) per two blocks of the pool: at most
 * 32 bytes per block, and a manager that caches every block of the pool
 * fills at most two sevenths of the slots with live entries.  The table
 * never grows (a commit never waits for a resize); stale slots are
 * reused in place.
 */
static uint64_t table_buckets(uint32_t num_blocks)
{
	uint64_t n = ((uint64_t)num_blocks + 1) / 2;

	return n < 2 ? 2 : n;
}

int ptable_create(uint32_t num_blocks, struct ptable **out)
{
	struct ptable *t = kvp_malloc(sizeof(*t));
	size_t bytes;

	kvp_check_pthread(pthread_once(&key_once, key_init));
	if (!t)
		return -ENOMEM;
	t->nbuckets = table_buckets(num_blocks);
	bytes = t->nbuckets * sizeof(struct ptable_bucket);
	t->bucket = kvp_malloc_aligned(KVP_CACHELINE, bytes);
	if (!t->bucket) {
		kvp_free(t, sizeof(*t));
		return -ENOMEM;
	}
	/* Read at random: huge pages spare a TLB miss per lookup. */
	kvp_advise_huge(t->bucket, bytes);
	/* Written, not calloc'd: a fresh page first read (a lookup) maps
	 * the shared zero page, and the write after it must flush that
	 * mapping from every CPU running the process.  Zeroes are empty
	 * slots and version 0. */
	memset(t->bucket, 0, bytes);
	*out = t;
	return 0;
}

void ptable_destroy(struct ptable *t)
{
	if (!t)
		return;
	kvp_free_aligned(t->bucket, KVP_CACHELINE,
			 t->nbuckets * sizeof(struct ptable_bucket));
	kvp_free(t, sizeof(*t));
}

bool ptable_slot_homed(const struct ptable *t, uint64_t key, uint64_t i)
{
	uint64_t b1, b2;

	ptable_buckets(t, key, &b1, &b2);
	return i / PTABLE_BUCKET_SLOTS == b1 || i / PTABLE_BUCKET_SLOTS == b2;
}

/* Whether a live slot other than `mine` of key's buckets holds w. */
static bool held_elsewhere(struct ptable_iter *it, const uint64_t w[4],
			   const _Atomic uint64_t *mine,
			   const struct ptable_ops *ops, void *ctx)
{
	for (uint32_t i = 0; i < 2 * PTABLE_BUCKET_SLOTS; i++) {
		const _Atomic uint64_t *s = &it->b[i / PTABLE_BUCKET_SLOTS]
						     ->slot[i % PTABLE_BUCKET_SLOTS];
		/* Acquire: the record of the slot's block (the other
		 * insert's release). */
		uint64_t v = atomic_load_explicit(s, memory_order_acquire);

		if (s != mine && ptable_tag_is(v, it->key) &&
		    ops->holds(ctx, ptable_slot_block(v), ptable_slot_gen(v),
			       w))
			return true;
	}
	return false;
}

/*
 * The scan of an insert: a live entry holding w (then *at is NULL and
 * the result true), else the first empty or stale slot in *at with the
 * value seen in *seen (*at NULL if none).
 */
static bool scan(struct ptable_iter *it, const uint64_t w[4],
		 _Atomic uint64_t **at, uint64_t *seen,
		 const struct ptable_ops *ops, void *ctx)
{
	*at = NULL;
	for (uint32_t i = 0; i < 2 * PTABLE_BUCKET_SLOTS; i++) {
		_Atomic uint64_t *s =
			(_Atomic uint64_t *)&it->b[i / PTABLE_BUCKET_SLOTS]
				->slot[i % PTABLE_BUCKET_SLOTS];
		/* Acquire: as held_elsewhere(). */
		uint64_t v = atomic_load_explicit(s, memory_order_acquire);
		uint32_t b = ptable_slot_block(v), g = ptable_slot_gen(v);

		if (v && ptable_tag_is(v, it->key) && ops->holds(ctx, b, g, w)) {
			*at = NULL;
			return true;
		}
		if (!*at && (!v || !ops->live(ctx, b, g))) {
			*at = s;
			*seen = v;
		}
	}
	return false;
}

enum ptable_result ptable_insert(struct ptable *t, uint64_t key,
				 const uint64_t w[4], uint32_t b, uint32_t gen,
				 const struct ptable_ops *ops, void *ctx)
{
	uint64_t mine = ptable_slot_make(key, gen, b), seen, ver;
	struct ptable_iter it;
	_Atomic uint64_t *at, *vw;

	ptable_iter_init(t, key, &it);
	vw = (_Atomic uint64_t *)&it.b[0]->ver;
	/* Acquire: every slot published before an insert's version CAS
	 * that this value follows (see the argument at the top). */
	ver = atomic_load_explicit(vw, memory_order_acquire);
	for (;;) {
		if (scan(&it, w, &at, &seen, ops, ctx))
			return PTABLE_EXISTS;
		if (!at)
			return PTABLE_FULL;
		/* Release: b's record before the slot (readers' acquire). */
		if (atomic_compare_exchange_strong_explicit(
			    at, &seen, mine, memory_order_release,
			    memory_order_relaxed))
			break;
		/* Another insert took the slot: scan again. */
		ver = atomic_load_explicit(vw, memory_order_acquire);
	}
	/* acq_rel: publishes our slot to the inserts that follow ours;
	 * on failure, acquires the slots of the insert that won. */
	while (!atomic_compare_exchange_weak_explicit(
		vw, &ver, ver + 1, memory_order_acq_rel, memory_order_acquire))
		if (held_elsewhere(&it, w, at, ops, ctx))
			return PTABLE_DUP;
	return PTABLE_STORED;
}
