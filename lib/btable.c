/* SPDX-License-Identifier: MIT */
/*
 * btable.c - a sequence's block table in shared chunks (layer 5,
 * doc/architecture.md "Layers": over pool.c and alloc.c; called by the
 * sequence files above it).
 *
 * Owns struct btable and struct btchunk (btable.h, which has the
 * correctness argument), and each thread's cache of free chunks.  A
 * chunk is taken from the cache only after btable_reserve() (or the
 * call itself) made sure the cache holds enough, so no change of a table
 * can fail half-way.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "alloc.h"
#include "btable.h"

/* ---- each thread's free chunks ------------------------------------ */

/* A free chunk's first bytes link it into its thread's cache. */
union free_chunk {
	struct btchunk c;
	union free_chunk *next;
};

struct chunk_cache {
	uint32_t n;		 /* chunks on the list */
	union free_chunk *head;
};

static KVP_TLS struct chunk_cache *ccache; /* owner thread only */
static pthread_key_t ccache_key;
static pthread_once_t ccache_once = PTHREAD_ONCE_INIT;

static void chunk_mem_free(struct btchunk *c)
{
	kvp_free_aligned(c, KVP_CACHELINE, sizeof(*c));
}

static void ccache_exit(void *arg)
{
	struct chunk_cache *cc = arg;

	while (cc->head) {
		union free_chunk *f = cc->head;

		cc->head = f->next;
		chunk_mem_free(&f->c);
	}
	kvp_free(cc, sizeof(*cc));
	ccache = NULL;
}

static void ccache_key_create(void)
{
	kvp_check_pthread(pthread_key_create(&ccache_key, ccache_exit));
}

static __attribute__((noinline)) struct chunk_cache *ccache_new(void)
{
	struct chunk_cache *cc = kvp_malloc(sizeof(*cc));

	if (!cc)
		return NULL;
	cc->n = 0;
	cc->head = NULL;
	kvp_check_pthread(pthread_once(&ccache_once, ccache_key_create));
	if (pthread_setspecific(ccache_key, cc)) {
		kvp_free(cc, sizeof(*cc));
		return NULL;
	}
	ccache = cc;
	return cc;
}

/* Makes sure this thread's cache holds at least k chunks (it may hold
 * more than BT_CACHE_MAX for a while).  0 or -ENOMEM (whatever was added
 * stays cached). */
static int chunks_reserve(uint32_t k)
{
	struct chunk_cache *cc = ccache;

	if (likely(cc && cc->n >= k))
		return 0;
	if (!cc && !(cc = ccache_new()))
		return -ENOMEM;
	while (cc->n < k) {
		union free_chunk *f =
			kvp_malloc_aligned(KVP_CACHELINE, sizeof(*f));

		if (!f)
			return -ENOMEM;
		f->next = cc->head;
		cc->head = f;
		cc->n++;
	}
	return 0;
}

/* Makes c a private chunk, empty, held once (relaxed: nobody else can
 * reach it yet). */
static struct btchunk *chunk_init(struct btchunk *c)
{
	atomic_store_explicit(&c->refs, 1, memory_order_relaxed);
	c->n = 0;
	c->seen = 0;
	return c;
}

/* A private chunk from the cache; chunks_reserve() made one ready. */
static struct btchunk *chunk_new(void)
{
	union free_chunk *f = ccache->head;

	ccache->head = f->next;
	ccache->n--;
	return chunk_init(&f->c);
}

/* A private chunk straight from the allocator, for btable_cut (a cut
 * may need more than a cache holds) and for a table's spares. */
static struct btchunk *chunk_alloc(void)
{
	struct btchunk *c = kvp_malloc_aligned(KVP_CACHELINE, sizeof(*c));

	return c ? chunk_init(c) : NULL;
}

static void chunk_free(struct btchunk *c)
{
	struct chunk_cache *cc = ccache;
	union free_chunk *f = (union free_chunk *)c;

	if (cc && cc->n < BT_CACHE_MAX) {
		f->next = cc->head;
		cc->head = f;
		cc->n++;
	} else {
		chunk_mem_free(c);
	}
}

/* ---- counting atomics, for tests ------------------------------------ */

#ifdef KVP_FAULT_INJECTION
static KVP_TLS uint64_t n_atomics;
uint64_t btable_atomics(void)
{
	return n_atomics;
}
#define COUNT_ATOMICS(k) (n_atomics += (k))
#else
#define COUNT_ATOMICS(k) ((void)0)
#endif

/* ---- the sink ------------------------------------------------------- */

void btable_sink_flush(struct btable_sink *sk)
{
	if (sk->n)
		sk->release(sk->ctx, sk->ids, sk->n);
	sk->n = 0;
}

static void sink_put(struct btable_sink *sk, uint32_t id)
{
	if (sk->n == KVP_ARRAY_SIZE(sk->ids))
		btable_sink_flush(sk);
	sk->ids[sk->n++] = id;
}

/* dst[0..n) = src[n - 1], ..., src[0].  Every release of a sequence's
 * blocks passes through here, so it moves four ids at a time where the
 * compiler has a vector shuffle (gcc 12 and clang both do). */
static inline void reverse_copy(uint32_t *restrict dst,
				const uint32_t *restrict src, uint32_t n)
{
	uint32_t j = 0;

#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
	typedef uint32_t v4u __attribute__((vector_size(16), aligned(4)));

	for (; j + 4 <= n; j += 4) {
		v4u v = *(const v4u *)(src + n - 4 - j);

		*(v4u *)(dst + j) = __builtin_shufflevector(v, v, 3, 2, 1, 0);
	}
#endif
#endif
	for (; j < n; j++)
		dst[j] = src[n - 1 - j];
}

/* Puts ids[n - 1], ..., ids[0] (last first). */
static void sink_put_rev(struct btable_sink *sk, const uint32_t *ids,
			 uint32_t n)
{
	while (n) {
		uint32_t room = KVP_ARRAY_SIZE(sk->ids) - sk->n, take;

		if (!room) {
			btable_sink_flush(sk);
			continue;
		}
		take = n < room ? n : room;
		if (take == BT_K) /* a whole chunk: unrolled */
			reverse_copy(sk->ids + sk->n, ids + n - BT_K, BT_K);
		else
			reverse_copy(sk->ids + sk->n, ids + n - take, take);
		sk->n += take;
		n -= take;
	}
}

/* ---- chunk references ----------------------------------------------- */

/* Drops one reference on c; the last one lets its blocks go, last first,
 * and frees it. */
static void chunk_put(struct btchunk *c, struct btable_sink *sk)
{
	/* acq_rel: see btable.h.  A sole holder skips the RMW. */
	if (atomic_load_explicit(&c->refs, memory_order_acquire) != 1) {
		COUNT_ATOMICS(1);
		if (atomic_fetch_sub_explicit(&c->refs, 1,
					      memory_order_acq_rel) != 1)
			return;
	}
	sink_put_rev(sk, c->ids, c->n);
	chunk_free(c);
}

/* Takes one more reference on each of ids[0..n), which the caller holds
 * through a chunk: cannot fail short of KVP_MAX_REFS holders. */
static void refs_take(struct kvp_pool *pool, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (unlikely(pool_block_ref(pool, ids[i])))
			kvp_fatal("btable: a block reached KVP_MAX_REFS "
				  "holders");
	COUNT_ATOMICS(n);
}

/*
 * Replaces the shared chunk *cp by a private copy of its first k ids (one
 * reference each), dropping our reference on the shared one into sk.  A
 * chunk is ready in the cache.
 */
static void chunk_unshare(struct btchunk **cp, uint32_t k,
			  struct kvp_pool *pool, struct btable_sink *sk)
{
	struct btchunk *old = *cp, *c = chunk_new();

	memcpy(c->ids, old->ids, (size_t)k * sizeof(*c->ids));
	c->n = (uint16_t)k;
	refs_take(pool, c->ids, k);
	*cp = c;
	chunk_put(old, sk);
}

/* ---- tables --------------------------------------------------------- */

static uint32_t nchunks_for(uint32_t n)
{
	return n > 1 ? (n - 1 + BT_K - 1) / BT_K : 0;
}

static uint32_t nchunks(const struct btable *t)
{
	return nchunks_for(t->n);
}

void btable_init(struct btable *t)
{
	t->n = 0;
	t->tail = 0;
	t->chunks = t->inline_chunks;
	t->ncap = BT_INLINE_CHUNKS;
	t->spare_end = 0;
}

/* Frees the spares, which start at chunk index `from` (nchunks as it was
 * before a shrink changed n). */
static void spares_drop(struct btable *t, uint32_t from)
{
	for (uint32_t j = from; j < t->spare_end; j++)
		chunk_free(t->chunks[j]);
	t->spare_end = 0;
}

void btable_fini(struct btable *t)
{
	if (config_debug && t->n)
		kvp_fatal("btable_fini of a table in use");
	spares_drop(t, 0);
	if (t->chunks != t->inline_chunks)
		kvp_free(t->chunks, (size_t)t->ncap * sizeof(*t->chunks));
	btable_init(t);
}

bool btable_valid(const struct btable *t)
{
	uint32_t k = nchunks(t);

	if (k > t->ncap ||
	    (t->chunks == t->inline_chunks) != (t->ncap == BT_INLINE_CHUNKS))
		return false;
	for (uint32_t i = 0; i < k; i++) {
		uint32_t want = i + 1 < k ? BT_K : t->n - 1 - i * BT_K;

		if (t->chunks[i]->n != want ||
		    !atomic_load_explicit(&t->chunks[i]->refs,
					  memory_order_relaxed))
			return false;
	}
	if (t->spare_end > t->ncap)
		return false;
	for (uint32_t i = k; i < t->spare_end; i++)
		if (t->chunks[i]->n != 0 ||
		    atomic_load_explicit(&t->chunks[i]->refs,
					 memory_order_relaxed) != 1)
			return false;
	return true;
}

static int ptrs_reserve(struct btable *t, uint32_t k)
{
	struct btchunk **p;
	uint64_t c;

	if (likely(k <= t->ncap))
		return 0;
	c = (uint64_t)t->ncap * 2;
	if (c < k)
		c = k;
	p = kvp_malloc(c * sizeof(*p));
	if (!p)
		return -ENOMEM;
	/* The chunks in use and the spares after them. */
	memcpy(p, t->chunks,
	       (size_t)(t->spare_end > nchunks(t) ? t->spare_end : nchunks(t)) *
		       sizeof(*p));
	if (t->chunks != t->inline_chunks)
		kvp_free(t->chunks, (size_t)t->ncap * sizeof(*t->chunks));
	t->chunks = p;
	t->ncap = (uint32_t)c;
	return 0;
}

/* Whether the next push goes into a shared, partly filled last chunk,
 * which it must copy first. */
static bool last_needs_copy(const struct btable *t)
{
	uint32_t have = nchunks(t);

	return have && t->chunks[have - 1]->n < BT_K &&
	       btchunk_shared(t->chunks[have - 1]);
}

int btable_reserve(struct btable *t, uint32_t need)
{
	uint32_t k = nchunks_for(need), have = nchunks(t), from, fresh;
	int err;

	if (need <= t->n)
		return 0;
	err = ptrs_reserve(t, k);
	if (err)
		return err;
	/* New chunks beyond the spares, plus a copy of the last one if it
	 * is shared.  None needed: not even the cache's first allocation. */
	from = have > t->spare_end ? have : t->spare_end;
	fresh = (k > from ? k - from : 0) + last_needs_copy(t);
	return fresh ? chunks_reserve(fresh) : 0;
}

int btable_reserve_own(struct btable *t, struct kvp_pool *pool, uint32_t need,
		       struct btable_sink *sk)
{
	uint32_t k = nchunks_for(need), have = nchunks(t), from;
	bool copy = last_needs_copy(t);
	int err;

	if (need <= t->n)
		return 0;
	err = ptrs_reserve(t, k);
	if (!err && copy)
		err = chunks_reserve(1);
	if (err)
		return err;
	from = have > t->spare_end ? have : t->spare_end;
	for (uint32_t j = from; j < k; j++) {
		struct btchunk *c = chunk_alloc();

		if (!c) {
			while (j-- > from)
				chunk_mem_free(t->chunks[j]);
			return -ENOMEM;
		}
		t->chunks[j] = c;
	}
	if (k > from)
		t->spare_end = k;
	if (copy)
		chunk_unshare(&t->chunks[have - 1], t->chunks[have - 1]->n,
			      pool, sk);
	return 0;
}

/*
 * Puts ids[0..k), held by the caller, at chunk positions m, m + 1, ...
 * (a run of a table's pushes), a chunk's worth at a time: a new chunk
 * where one starts, the last one copied first if it is shared.
 * btable_reserve() made the chunks ready.
 */
static void chunks_push(struct btable *t, struct kvp_pool *pool, uint32_t m,
			const uint32_t *ids, uint32_t k, struct btable_sink *sk)
{
	while (k) {
		uint32_t o = m % BT_K, take = BT_K - o;
		struct btchunk **cp = &t->chunks[m / BT_K];

		if (take > k)
			take = k;
		if (o == 0) /* a spare of the table's own, or the cache's */
			*cp = m / BT_K < t->spare_end ? chunk_init(*cp)
						      : chunk_new();
		else if (btchunk_shared(*cp))
			chunk_unshare(cp, (*cp)->n, pool, sk);
		if (take == BT_K) /* a whole chunk: a copy of constant size */
			memcpy((*cp)->ids, ids, sizeof((*cp)->ids));
		else
			memcpy((*cp)->ids + o, ids, (size_t)take * sizeof(*ids));
		(*cp)->n = (uint16_t)(o + take);
		m += take;
		ids += take;
		k -= take;
	}
}

void btable_append(struct btable *t, struct kvp_pool *pool,
		   const uint32_t *ids, uint32_t n, struct btable_sink *sk)
{
	uint32_t m = t->n ? t->n - 1 : 0; /* chunk positions in use */

	if (!n)
		return;
	if (t->n) /* the old tail moves into the chunks */
		chunks_push(t, pool, m++, &t->tail, 1, sk);
	chunks_push(t, pool, m, ids, n - 1, sk);
	t->tail = ids[n - 1];
	t->n += n;
}

void btable_release(struct btable *t, struct btable_sink *sk)
{
	uint32_t k = nchunks(t);

	spares_drop(t, k);
	if (t->n)
		sink_put(sk, t->tail);
	while (k-- > 0)
		chunk_put(t->chunks[k], sk);
	t->n = 0;
}

int btable_truncate(struct btable *t, struct kvp_pool *pool, uint32_t n,
		    struct btable_sink *sk)
{
	uint32_t keep, ck, o, have = nchunks(t);
	struct btchunk *c;
	bool shared;

	if (config_debug && n > t->n)
		kvp_fatal("btable_truncate beyond the table's end");
	if (n == t->n)
		return 0;
	if (n == 0) {
		btable_release(t, sk);
		return 0;
	}
	/* The new tail, position n - 1, is in chunk ck at offset o; chunk
	 * ck keeps its first o ids (none: it goes).  The spares go at the
	 * end, once nothing can fail. */
	keep = n - 1;
	ck = keep / BT_K;
	o = keep % BT_K;
	c = t->chunks[ck];
	shared = btchunk_shared(c);
	if (shared && o && chunks_reserve(1))
		return -ENOMEM;
	sink_put(sk, t->tail);
	for (uint32_t j = have; j-- > ck + 1;)
		chunk_put(t->chunks[j], sk);
	t->tail = c->ids[o];
	if (shared) {
		refs_take(pool, &t->tail, 1);
		if (o)
			chunk_unshare(&t->chunks[ck], o, pool, sk);
		else
			chunk_put(c, sk);
	} else {
		for (uint32_t j = c->n; j-- > o + 1;)
			sink_put(sk, c->ids[j]);
		c->n = (uint16_t)o; /* ids[o]'s reference moves to the tail */
		if (!o)
			chunk_free(c);
	}
	spares_drop(t, have);
	t->n = n;
	return 0;
}

static bool in_cut(uint32_t pos, uint32_t first, uint32_t n)
{
	return pos - first < n;
}

/* btable_cut's change of one old chunk j: a private one gives its kept
 * ids' references to the new chunks and lets the cut ones go; a shared
 * one stays with its other holders, the new chunks taking references on
 * its kept ids. */
static void cut_old_chunk(struct btchunk *c, uint32_t j, struct kvp_pool *pool,
			  uint32_t first, uint32_t n, struct btable_sink *sk)
{
	if (btchunk_shared(c)) {
		for (uint32_t x = 0; x < c->n; x++)
			if (!in_cut(j * BT_K + x, first, n))
				refs_take(pool, &c->ids[x], 1);
		chunk_put(c, sk);
		return;
	}
	for (uint32_t x = c->n; x-- > 0;)
		if (in_cut(j * BT_K + x, first, n))
			sink_put(sk, c->ids[x]);
	chunk_free(c);
}

/* btable_cut of a table whose chunks are all its own: in place, with no
 * allocation (the kept ids keep their references and move down). */
static void cut_in_place(struct btable *t, uint32_t first, uint32_t n,
			 struct btable_sink *sk)
{
	uint32_t m = t->n - 1, k = nchunks(t), k2, w = first;

	for (uint32_t i = first + n; i-- > first;)
		sink_put(sk, t->chunks[i / BT_K]->ids[i % BT_K]);
	for (uint32_t i = first + n; i < m; i++, w++)
		t->chunks[w / BT_K]->ids[w % BT_K] =
			t->chunks[i / BT_K]->ids[i % BT_K];
	k2 = (w + BT_K - 1) / BT_K;
	for (uint32_t j = k2; j < k; j++)
		chunk_free(t->chunks[j]);
	if (k2)
		t->chunks[k2 - 1]->n = (uint16_t)(w - (k2 - 1) * BT_K);
	t->n -= n;
}

int btable_cut(struct btable *t, struct kvp_pool *pool, uint32_t first,
	       uint32_t n, struct btable_sink *sk)
{
	uint32_t m = t->n - 1, k = nchunks(t), k2, w = 0;
	struct btchunk *onstack[16], **nc = onstack;
	bool shared = false;

	if (config_debug && (first > t->n || n > t->n - first))
		kvp_fatal("btable_cut beyond the table's end");
	if (!n)
		return 0;
	if (first + n == t->n)
		return btable_truncate(t, pool, first, sk);
	for (uint32_t j = 0; j < nchunks(t) && !shared; j++)
		shared = btchunk_shared(t->chunks[j]);
	if (!shared) {
		cut_in_place(t, first, n, sk);
		spares_drop(t, k);
		return 0;
	}
	k2 = (m - n + BT_K - 1) / BT_K;
	if (k2 > KVP_ARRAY_SIZE(onstack) &&
	    !(nc = kvp_malloc(k2 * sizeof(*nc))))
		return -ENOMEM;
	for (uint32_t i = 0; i < k2; i++) {
		nc[i] = chunk_alloc();
		if (!nc[i]) {
			while (i-- > 0)
				chunk_mem_free(nc[i]);
			if (nc != onstack)
				kvp_free(nc, k2 * sizeof(*nc));
			return -ENOMEM;
		}
	}
	for (uint32_t i = 0; i < m; i++)
		if (!in_cut(i, first, n)) {
			struct btchunk *c = nc[w++ / BT_K];

			c->ids[c->n++] = btable_get(t, i);
		}
	for (uint32_t j = k; j-- > 0;)
		cut_old_chunk(t->chunks[j], j, pool, first, n, sk);
	memcpy(t->chunks, nc, (size_t)k2 * sizeof(*nc));
	spares_drop(t, k);
	t->n -= n;
	if (nc != onstack)
		kvp_free(nc, k2 * sizeof(*nc));
	return 0;
}

void btable_copy_out(const struct btable *t, uint32_t first, uint32_t n,
		     uint32_t *out)
{
	uint32_t end = first + n, m = t->n ? t->n - 1 : 0;

	while (first < end && first < m) {
		const struct btchunk *c = t->chunks[first / BT_K];
		uint32_t o = first % BT_K, k = c->n - o;

		if (k > end - first)
			k = end - first;
		memcpy(out, c->ids + o, (size_t)k * sizeof(*out));
		out += k;
		first += k;
	}
	if (first < end)
		*out = t->tail;
}

int btable_fork_room(struct btable *dst, const struct btable *src)
{
	if (config_debug && dst->n)
		kvp_fatal("btable_fork into a table in use");
	return src->n ? ptrs_reserve(dst, nchunks(src)) : 0;
}

int btable_share(const struct btable *src, struct kvp_pool *pool,
		 uint32_t n)
{
	uint32_t k = nchunks(src);

	if (!src->n)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		int err = pool_block_ref(pool, src->tail);

		if (unlikely(err)) {
			/* Never the last reference: src holds one. */
			while (i--)
				(void)pool_block_drop(pool, src->tail);
			COUNT_ATOMICS(2 * (uint64_t)i);
			return err;
		}
	}
	/* Relaxed: taking a reference publishes nothing (we hold the
	 * source's, through its table). */
	for (uint32_t i = 0; i < k; i++)
		atomic_fetch_add_explicit(&src->chunks[i]->refs, n,
					  memory_order_relaxed);
	COUNT_ATOMICS(k + n);
	return 0;
}

void btable_fork_copy(struct btable *dst, const struct btable *src)
{
	if (!src->n)
		return;
	memcpy(dst->chunks, src->chunks,
	       (size_t)nchunks(src) * sizeof(*dst->chunks));
	dst->tail = src->tail;
	dst->n = src->n;
}

/* btable_fork_room, btable_share(1) and btable_fork_copy in one: a
 * single fork's own path, kept as short as it was. */
int btable_fork(struct btable *dst, const struct btable *src,
		struct kvp_pool *pool)
{
	uint32_t k = nchunks(src);
	int err;

	if (config_debug && dst->n)
		kvp_fatal("btable_fork into a table in use");
	if (!src->n)
		return 0;
	err = ptrs_reserve(dst, k);
	if (err)
		return err;
	err = pool_block_ref(pool, src->tail);
	if (err)
		return err;
	/* Relaxed: as btable_share's. */
	for (uint32_t i = 0; i < k; i++)
		atomic_fetch_add_explicit(&src->chunks[i]->refs, 1,
					  memory_order_relaxed);
	COUNT_ATOMICS(k + 1);
	memcpy(dst->chunks, src->chunks, (size_t)k * sizeof(*dst->chunks));
	dst->tail = src->tail;
	dst->n = src->n;
	return 0;
}

void btable_check_begin(const struct btable *t)
{
	for (uint32_t i = 0, k = nchunks(t); i < k; i++)
		t->chunks[i]->seen = 0;
}

void btable_check_count(const struct btable *t, uint32_t *counts)
{
	for (uint32_t i = 0, k = nchunks(t); i < k; i++) {
		struct btchunk *c = t->chunks[i];

		if (c->seen++ == 0)
			for (uint32_t j = 0; j < c->n; j++)
				counts[c->ids[j]]++;
	}
	if (t->n)
		counts[t->tail]++;
}

bool btable_check_end(const struct btable *t)
{
	for (uint32_t i = 0, k = nchunks(t); i < k; i++)
		if (t->chunks[i]->seen !=
		    (uint16_t)atomic_load_explicit(&t->chunks[i]->refs,
						   memory_order_relaxed))
			return false;
	return true;
}
