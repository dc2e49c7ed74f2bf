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
 * struct ptable_owner's registration words) says whether it is true.  A slot is live while its
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

/* The table key's secret (ptable.h says why), drawn by key_init. */
uint64_t ptable_key_secret[4];
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void key_init(void)
{
	unsigned char *p = (unsigned char *)ptable_key_secret;
	size_t got = 0;

	while (got < sizeof(ptable_key_secret)) {
		ssize_t r = getrandom(p + got, sizeof(ptable_key_secret) - got,
				      GRND_NONBLOCK);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got < sizeof(ptable_key_secret)) {
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
			ptable_key_secret[i] =
				ptable_mul_fold64(s ^ (s >> 30),
						  0xbf58476d1ce4e5b9ull) ^
				ptable_mul_fold64(s, 0x94d049bb133111ebull);
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

void ptable_clear(struct ptable *t, uint64_t i, uint32_t b, uint32_t gen)
{
	_Atomic uint64_t *s;
	uint64_t v;

	if (i >= ptable_nslots(t))
		return;
	s = &t->bucket[i / PTABLE_BUCKET_SLOTS].slot[i % PTABLE_BUCKET_SLOTS];
	/* Relaxed: the slot is a hint; only its own entry is emptied, by
	 * CAS, and an insert that reused it meanwhile keeps it. */
	v = atomic_load_explicit(s, memory_order_relaxed);
	if (v && ptable_slot_block(v) == b &&
	    ptable_slot_gen(v) == (gen & 0xffffu))
		(void)atomic_compare_exchange_strong_explicit(
			s, &v, 0, memory_order_relaxed, memory_order_relaxed);
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
			   const struct ptable_owner *o)
{
	for (uint32_t k = 0; k < 2; k++) {
		const _Atomic uint64_t *slot = it->b[k]->slot;

		for (uint32_t i = 0; i < PTABLE_BUCKET_SLOTS; i++) {
			/* Acquire: the slot's registration (the other
			 * insert's release). */
			uint64_t v = atomic_load_explicit(
				&slot[i], memory_order_acquire);

			if (ptable_tag_is(v, it->key) && &slot[i] != mine &&
			    ptable_live(o, v) &&
			    o->holds(o->ctx, ptable_slot_block(v), w))
				return true;
		}
	}
	return false;
}

/* What an insert's scan found: the live entry holding its hash, or the
 * slot it may take. */
struct scan {
	_Atomic uint64_t *empty[2]; /* each bucket's first empty slot */
	uint32_t nempty[2];	    /* and its empty slots */
	bool held;		    /* a live entry holds the hash */
};

/* One pass over key's buckets: a live entry holding w, and the empty
 * slots. */
static void scan(struct ptable_iter *it, const uint64_t w[4],
		 struct scan *sc, const struct ptable_owner *o)
{
	sc->held = false;
	for (uint32_t k = 0; k < 2; k++) {
		_Atomic uint64_t *slot = (_Atomic uint64_t *)it->b[k]->slot,
				 *empty = NULL;
		uint64_t v[PTABLE_BUCKET_SLOTS], tag = it->key >> 48;
		uint32_t n = 0;

		/* The loads first, then the tests (in locals: the compiler
		 * keeps them in registers). */
		for (uint32_t i = 0; i < PTABLE_BUCKET_SLOTS; i++)
			/* Acquire: as held_elsewhere(). */
			v[i] = atomic_load_explicit(&slot[i],
						    memory_order_acquire);
		for (uint32_t i = PTABLE_BUCKET_SLOTS; i-- > 0;) {
			if (!v[i]) {
				empty = &slot[i];
				n++;
			} else if ((v[i] >> 48) == tag &&
				   ptable_live(o, v[i]) &&
				   o->holds(o->ctx, ptable_slot_block(v[i]),
					    w)) {
				sc->held = true;
				return;
			}
		}
		sc->empty[k] = empty;
		sc->nempty[k] = n;
	}
}

/* The first stale slot of key's buckets (its value in *seen), or NULL:
 * slots whose block left the cache without emptying them (a reset, an
 * eviction on its way). */
static _Atomic uint64_t *first_stale(struct ptable_iter *it, uint64_t *seen,
				     const struct ptable_owner *o)
{
	for (uint32_t k = 0; k < 2; k++) {
		_Atomic uint64_t *slot = (_Atomic uint64_t *)it->b[k]->slot;

		for (uint32_t i = 0; i < PTABLE_BUCKET_SLOTS; i++) {
			/* Relaxed: the CAS from this value decides. */
			uint64_t v = atomic_load_explicit(
				&slot[i], memory_order_relaxed);

			if (v && !ptable_live(o, v)) {
				*seen = v;
				return &slot[i];
			}
		}
	}
	return NULL;
}

/*
 * The slot an insert takes (sc from scan()): an empty one of the bucket
 * with more empty slots (two choices keep the fullest bucket near the
 * average: a table at most two sevenths full practically never has both
 * of a key's buckets full), else a stale one, else NULL (the insert
 * leaves its block uncached, and is counted).  Empty slots cost no read
 * beyond the two bucket lines.
 */
static _Atomic uint64_t *pick(struct ptable_iter *it, const struct scan *sc,
			      uint64_t *seen, const struct ptable_owner *o)
{
	*seen = 0;
	if (sc->nempty[0] || sc->nempty[1])
		return sc->empty[sc->nempty[0] >= sc->nempty[1] ? 0 : 1];
	return first_stale(it, seen, o);
}

enum ptable_result ptable_insert(struct ptable *t, uint64_t key,
				 const uint64_t w[4], uint32_t b, uint32_t gen,
				 const struct ptable_owner *o, uint64_t *slot)
{
	uint64_t mine = ptable_slot_make(key, gen, b), seen, ver, off;
	struct ptable_iter it;
	_Atomic uint64_t *at, *vw;

	ptable_iter_init(t, key, &it);
	vw = (_Atomic uint64_t *)&it.b[0]->ver;
	/* Acquire: every slot published before an insert's version CAS
	 * that this value follows (see the argument at the top). */
	ver = atomic_load_explicit(vw, memory_order_acquire);
	for (;;) {
		struct scan sc;

		scan(&it, w, &sc, o);
		if (sc.held)
			return PTABLE_EXISTS;
		if (!(at = pick(&it, &sc, &seen, o)))
			return PTABLE_FULL;
		/* Release: b's record before the slot (readers' acquire). */
		if (atomic_compare_exchange_strong_explicit(
			    at, &seen, mine, memory_order_release,
			    memory_order_relaxed))
			break;
		/* Another insert took the slot: scan again. */
		ver = atomic_load_explicit(vw, memory_order_acquire);
	}
	off = (uint64_t)((char *)at - (char *)t->bucket);
	*slot = off / sizeof(struct ptable_bucket) * PTABLE_BUCKET_SLOTS +
		off % sizeof(struct ptable_bucket) / sizeof(uint64_t) - 1;
	/* acq_rel: publishes our slot to the inserts that follow ours;
	 * on failure, acquires the slots of the insert that won. */
	while (!atomic_compare_exchange_weak_explicit(
		vw, &ver, ver + 1, memory_order_acq_rel, memory_order_acquire))
		if (held_elsewhere(&it, w, at, o))
			return PTABLE_DUP;
	return PTABLE_STORED;
}
