/* SPDX-License-Identifier: MIT */
/*
 * peer_mutex.c - the mutex-wrapped peers; see peer_mutex.h.
 *
 * Every function below that takes a struct mm_mgr or mm_pool locks the
 * pool's one mutex around all its reads and writes of shared state; the
 * static helpers marked "Lock held" expect the caller to hold it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "peer_mutex.h"

/* The operations are out of line, like a library's. */
#define MM_API __attribute__((noinline))

/* ceil(a / b). */
static inline uint32_t ceil_div(uint64_t a, uint32_t b)
{
	return (uint32_t)((a + b - 1) / b);
}

/* ------------------------------------------------------ mutex free list */

int mp_init(struct mp_pool *mp, uint32_t n)
{
	int rc;

	memset(mp, 0, sizeof(*mp));
	if (n == 0)
		return -EINVAL;
	mp->stack = calloc(n, sizeof(uint32_t));
	mp->refcnt = calloc(n, sizeof(uint32_t));
	if (!mp->stack || !mp->refcnt) {
		free(mp->stack);
		free(mp->refcnt);
		return -ENOMEM;
	}
	rc = pthread_mutex_init(&mp->lock, NULL);
	if (rc != 0) {
		free(mp->stack);
		free(mp->refcnt);
		return -rc;
	}
	mp->n = n;
	for (uint32_t i = 0; i < n; i++)
		mp->stack[i] = n - 1 - i; /* pops 0, 1, ... */
	mp->top = n;
	return 0;
}

void mp_destroy(struct mp_pool *mp)
{
	pthread_mutex_destroy(&mp->lock);
	free(mp->stack);
	free(mp->refcnt);
}

MM_API int mp_alloc(struct mp_pool *mp, uint32_t n, uint32_t *ids)
{
	if (!ids || n == 0)
		return -EINVAL;
	pthread_mutex_lock(&mp->lock);
	if (mp->top < n) {
		pthread_mutex_unlock(&mp->lock);
		return -ENOSPC;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = mp->stack[--mp->top];

		mp->refcnt[id] = 1;
		ids[i] = id;
	}
	pthread_mutex_unlock(&mp->lock);
	return 0;
}

MM_API int mp_free(struct mp_pool *mp, const uint32_t *ids, uint32_t n)
{
	uint32_t i;
	int rc = 0;

	if (!ids || n == 0)
		return -EINVAL;
	pthread_mutex_lock(&mp->lock);
	for (i = 0; i < n; i++) {
		uint32_t id = ids[i];

		if (id >= mp->n) {
			rc = -ERANGE;
			break;
		}
		if (mp->refcnt[id] == 0) {
			rc = -EALREADY;
			break;
		}
		if (--mp->refcnt[id] == 0)
			mp->stack[mp->top++] = id;
	}
	if (rc != 0) {
		/* All or nothing: undo in reverse, so a block pushed above
		 * is the one on top of the stack. */
		while (i-- > 0)
			if (mp->refcnt[ids[i]]++ == 0)
				mp->top--;
	}
	pthread_mutex_unlock(&mp->lock);
	return rc;
}

int mp_check(struct mp_pool *mp)
{
	uint8_t *seen = calloc(mp->n, 1);
	int rc = 0;

	if (!seen)
		return -ENOMEM;
	if (mp->top != mp->n) {
		fprintf(stderr, "mutex freelist: %u of %u blocks free\n",
			mp->top, mp->n);
		rc = -EFAULT;
	}
	for (uint32_t i = 0; i < mp->top && rc == 0; i++) {
		uint32_t id = mp->stack[i];

		if (id >= mp->n || seen[id] || mp->refcnt[id] != 0) {
			fprintf(stderr,
				"mutex freelist: bad free-list entry %u\n", id);
			rc = -EFAULT;
		} else {
			seen[id] = 1;
		}
	}
	free(seen);
	return rc;
}

/* ---------------------------------------------------- mutex managers */

/* Initial block-table capacity of a sequence (grows by doubling). */
#define MM_MIN_CAP 16u

struct mm_seq {
	uint64_t id;
	uint32_t num_tokens;
	uint32_t nblocks; /* blocks[0..nblocks) */
	uint32_t cap;	  /* capacity of blocks[] */
	int32_t priority;
	uint64_t last_access;
	uint64_t access_count;
	uint32_t *blocks;
};

static inline uint64_t mm_hash(uint64_t x)
{
	return bench_fmix64(x);
}

/* The prefix map's key of a block hash (its first 8 bytes, mixed). */
static inline uint64_t block_hash_key(const struct kvp_hash *h)
{
	uint64_t k;

	memcpy(&k, h->b, sizeof(k));
	return mm_hash(k);
}

/* ------------------------------------------------- block state (pool) */

int mm_pool_init(struct mm_pool *p, uint32_t nblocks, uint32_t block_tokens)
{
	int rc;

	memset(p, 0, sizeof(*p));
	if (nblocks == 0 || block_tokens == 0)
		return -EINVAL;
	p->stack = calloc(nblocks, sizeof(uint32_t));
	p->refcnt = calloc(nblocks, sizeof(uint32_t));
	p->lru_prev = calloc(nblocks, sizeof(uint32_t));
	p->lru_next = calloc(nblocks, sizeof(uint32_t));
	p->owner = calloc(nblocks, sizeof(*p->owner));
	p->bhash = calloc(nblocks, sizeof(*p->bhash));
	if (!p->stack || !p->refcnt || !p->lru_prev || !p->lru_next ||
	    !p->owner || !p->bhash) {
		mm_pool_destroy(p);
		return -ENOMEM;
	}
	rc = pthread_mutex_init(&p->lock, NULL);
	if (rc != 0) {
		mm_pool_destroy(p);
		return -rc;
	}
	p->nblocks = nblocks;
	p->block_tokens = block_tokens;
	for (uint32_t i = 0; i < nblocks; i++)
		p->stack[i] = nblocks - 1 - i; /* pops 0, 1, ... */
	p->top = nblocks;
	p->lru_head = p->lru_tail = MM_NONE;
	return 0;
}

void mm_pool_destroy(struct mm_pool *p)
{
	if (p->nblocks)
		pthread_mutex_destroy(&p->lock);
	free(p->stack);
	free(p->refcnt);
	free(p->lru_prev);
	free(p->lru_next);
	free(p->owner);
	free(p->bhash);
	memset(p, 0, sizeof(*p));
}

uint64_t mm_pool_used(struct mm_pool *p)
{
	uint64_t used;

	pthread_mutex_lock(&p->lock);
	used = p->used;
	pthread_mutex_unlock(&p->lock);
	return used;
}

/* Blocks an allocation can take: never-cached free and evictable.  Lock
 * held. */
static inline uint64_t mm_available(const struct mm_pool *p)
{
	return (uint64_t)p->top + p->lru_count;
}

/* Unlinks evictable block b from the LRU list.  Lock held. */
static void lru_remove(struct mm_pool *p, uint32_t b)
{
	uint32_t pv = p->lru_prev[b], nx = p->lru_next[b];

	if (pv == MM_NONE)
		p->lru_head = nx;
	else
		p->lru_next[pv] = nx;
	if (nx == MM_NONE)
		p->lru_tail = pv;
	else
		p->lru_prev[nx] = pv;
	p->lru_count--;
}

/* Appends b (most recently freed) to the LRU list.  Lock held. */
static void lru_push_tail(struct mm_pool *p, uint32_t b)
{
	p->lru_prev[b] = p->lru_tail;
	p->lru_next[b] = MM_NONE;
	if (p->lru_tail == MM_NONE)
		p->lru_head = b;
	else
		p->lru_next[p->lru_tail] = b;
	p->lru_tail = b;
	p->lru_count++;
}

static void pmap_erase(struct mm_mgr *m, uint32_t b);

/* Takes one block: never-cached first, else evicts the least recently
 * freed cached block.  The caller checked mm_available().  Lock held. */
static inline uint32_t mm_take_block(struct mm_pool *p)
{
	uint32_t id;

	if (p->top) {
		id = p->stack[--p->top];
	} else {
		struct mm_mgr *o;

		id = p->lru_head;
		lru_remove(p, id);
		o = p->owner[id];
		pmap_erase(o, id);
		p->owner[id] = NULL;
		o->st.prefix_evictions++;
		p->cache_evictions++;
	}
	p->refcnt[id] = 1;
	if (++p->used > p->peak_used)
		p->peak_used = p->used;
	return id;
}

/* Drops one reference; a block reaching 0 becomes evictable if cached,
 * free otherwise.  Lock held. */
static inline void mm_put_block(struct mm_pool *p, uint32_t id)
{
	if (--p->refcnt[id] != 0)
		return;
	p->used--;
	if (p->owner[id])
		lru_push_tail(p, id);
	else
		p->stack[p->top++] = id;
}

/* Takes one more reference on a cached block found by a prefix lookup,
 * reviving it if it was evictable.  Lock held. */
static inline void mm_revive(struct mm_pool *p, uint32_t id)
{
	if (p->refcnt[id]++ == 0) {
		lru_remove(p, id);
		if (++p->used > p->peak_used)
			p->peak_used = p->used;
	}
}

/* ------------------------------------------------- prefix map (manager) */

/* The block caching hash h, or MM_NONE.  Lock held. */
static uint32_t pmap_find(const struct mm_mgr *m, const struct kvp_hash *h)
{
	const struct kvp_hash *bh = m->pool->bhash;
	uint64_t i = block_hash_key(h) & m->pmask;

	for (;;) {
		uint32_t e = m->pslots[i];

		if (e == 0)
			return MM_NONE;
		if (!memcmp(&bh[e - 1], h, sizeof(*h)))
			return e - 1;
		i = (i + 1) & m->pmask;
	}
}

/* Inserts block b, whose hash is in pool->bhash[b], into a map of
 * capacity mask + 1 (known not to hold it).  Lock held. */
static void pmap_place(const struct mm_pool *p, uint32_t *slots, uint64_t mask,
		       uint32_t b)
{
	uint64_t i = block_hash_key(&p->bhash[b]) & mask;

	while (slots[i])
		i = (i + 1) & mask;
	slots[i] = b + 1;
}

/* Doubles the prefix map.  Lock held. */
static int pmap_grow(struct mm_mgr *m)
{
	uint64_t ncap = (m->pmask + 1) * 2;
	uint32_t *ns = calloc(ncap, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	for (uint64_t i = 0; i <= m->pmask; i++)
		if (m->pslots[i])
			pmap_place(m->pool, ns, ncap - 1, m->pslots[i] - 1);
	free(m->pslots);
	m->pslots = ns;
	m->pmask = ncap - 1;
	return 0;
}

/* Removes cached block b by backward-shift deletion.  Lock held. */
static void pmap_erase(struct mm_mgr *m, uint32_t b)
{
	const struct kvp_hash *bh = m->pool->bhash;
	uint64_t i = block_hash_key(&bh[b]) & m->pmask, j;

	while (m->pslots[i] != b + 1)
		i = (i + 1) & m->pmask;
	j = i;
	for (;;) {
		uint64_t k;

		j = (j + 1) & m->pmask;
		if (!m->pslots[j])
			break;
		k = block_hash_key(&bh[m->pslots[j] - 1]) & m->pmask;
		/* Slot j may move to i unless its home lies cyclically in
		 * (i, j]. */
		if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
			m->pslots[i] = m->pslots[j];
			i = j;
		}
	}
	m->pslots[i] = 0;
	m->pcount--;
}

/* ----------------------------------------------- sequence map (manager) */

/* The slot holding key, or the empty slot where it would go (*found
 * tells which).  Lock held. */
static inline uint64_t mm_probe(const struct mm_mgr *m, uint64_t key,
				bool *found)
{
	uint64_t i = mm_hash(key) & m->mask;

	for (;;) {
		const struct mm_slot *s = &m->slots[i];

		if (!s->seq) {
			*found = false;
			return i;
		}
		if (s->key == key) {
			*found = true;
			return i;
		}
		i = (i + 1) & m->mask;
	}
}

/* The sequence with id key, or NULL.  Lock held. */
static inline struct mm_seq *mm_lookup(const struct mm_mgr *m, uint64_t key)
{
	bool found;
	uint64_t i = mm_probe(m, key, &found);

	return found ? m->slots[i].seq : NULL;
}

/* Doubles the sequence map.  Lock held. */
static int mm_grow(struct mm_mgr *m)
{
	uint64_t ncap = (m->mask + 1) * 2, nmask = ncap - 1;
	struct mm_slot *ns = calloc(ncap, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	for (uint64_t i = 0; i <= m->mask; i++) {
		uint64_t j;

		if (!m->slots[i].seq)
			continue;
		j = mm_hash(m->slots[i].key) & nmask;
		while (ns[j].seq)
			j = (j + 1) & nmask;
		ns[j] = m->slots[i];
	}
	free(m->slots);
	m->slots = ns;
	m->mask = nmask;
	return 0;
}

/* Makes room for one more sequence; returns the (possibly moved) empty
 * slot for key.  Lock held. */
static int mm_room(struct mm_mgr *m, uint64_t key, uint64_t *slot)
{
	bool found;
	int rc;

	if ((m->count + 1) * 2 <= m->mask + 1)
		return 0;
	rc = mm_grow(m);
	if (rc == 0)
		*slot = mm_probe(m, key, &found);
	return rc;
}

/* Removes slot i by backward-shift deletion.  Lock held. */
static inline void mm_erase(struct mm_mgr *m, uint64_t i)
{
	uint64_t j = i;

	for (;;) {
		uint64_t k;

		j = (j + 1) & m->mask;
		if (!m->slots[j].seq)
			break;
		k = mm_hash(m->slots[j].key) & m->mask; /* home of slot j */
		if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
			m->slots[i] = m->slots[j];
			i = j;
		}
	}
	m->slots[i].seq = NULL;
	m->count--;
}

/* A sequence with room for cap blocks (at least MM_MIN_CAP), or NULL;
 * malloc()ed outside the lock. */
static struct mm_seq *mm_seq_new(uint32_t cap)
{
	struct mm_seq *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	if (cap < MM_MIN_CAP)
		cap = MM_MIN_CAP;
	s->blocks = malloc((size_t)cap * sizeof(uint32_t));
	if (!s->blocks) {
		free(s);
		return NULL;
	}
	s->cap = cap;
	s->priority = 0;
	return s;
}

/* Frees a sequence's memory (outside the lock). */
static void mm_seq_delete(struct mm_seq *s)
{
	free(s->blocks);
	free(s);
}

/* Grows s->blocks to hold at least need entries.  Lock held. */
static int mm_reserve(struct mm_seq *s, uint32_t need)
{
	uint32_t cap = s->cap;
	uint32_t *b;

	if (need <= cap)
		return 0;
	while (cap < need)
		cap = cap > UINT32_MAX / 2 ? need : cap * 2;
	b = realloc(s->blocks, (size_t)cap * sizeof(uint32_t));
	if (!b)
		return -ENOMEM;
	s->blocks = b;
	s->cap = cap;
	return 0;
}

/* Removes the sequence in slot i and drops its blocks, last first.  The
 * caller frees the returned sequence after unlocking.  Lock held. */
static struct mm_seq *mm_remove(struct mm_mgr *m, uint64_t i)
{
	struct mm_seq *s = m->slots[i].seq;

	mm_erase(m, i);
	for (uint32_t b = s->nblocks; b-- > 0;)
		mm_put_block(m->pool, s->blocks[b]);
	m->st.blocks_released += s->nblocks;
	m->st.tokens -= s->num_tokens;
	m->st.seq_frees++;
	return s;
}

/* The smallest power of two >= max(n, 1024). */
static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t c = 1024;

	while (c < n)
		c *= 2;
	return c;
}

int mm_mgr_init(struct mm_mgr *m, struct mm_pool *p, enum kvp_policy policy,
		float watermark, uint32_t flags, uint64_t expected_seqs,
		uint64_t expected_cached)
{
	memset(m, 0, sizeof(*m));
	if (!p || (unsigned)policy > KVP_EVICT_PRIORITY ||
	    (flags & ~KVP_PREFIX_CACHE) || !(watermark >= 0) || watermark >= 1)
		return -EINVAL;
	m->pool = p;
	m->policy = policy;
	m->watermark = watermark > 0 ? watermark : 0.01f;
	m->prefix = flags & KVP_PREFIX_CACHE;
	m->mask = pow2_at_least(4 * expected_seqs) - 1; /* load <= 1/4 */
	m->slots = calloc(m->mask + 1, sizeof(*m->slots));
	if (m->prefix) {
		m->pmask = pow2_at_least(2 * expected_cached) - 1;
		m->pslots = calloc(m->pmask + 1, sizeof(*m->pslots));
	}
	if (!m->slots || (m->prefix && !m->pslots)) {
		free(m->slots);
		free(m->pslots);
		return -ENOMEM;
	}
	return 0;
}

void mm_mgr_destroy(struct mm_mgr *m)
{
	struct mm_pool *p = m->pool;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	for (uint64_t i = 0; i <= m->mask; i++)
		while (m->slots[i].seq) /* erasing may shift another in */
			mm_seq_delete(mm_remove(m, i));
	for (uint64_t i = 0; m->pslots && i <= m->pmask; i++) {
		uint32_t b;

		if (!m->pslots[i])
			continue;
		b = m->pslots[i] - 1;
		p->owner[b] = NULL;
		if (p->refcnt[b] == 0) { /* evictable: now plain free */
			lru_remove(p, b);
			p->stack[p->top++] = b;
		}
	}
	pthread_mutex_unlock(&p->lock);
	free(m->slots);
	free(m->pslots);
	memset(m, 0, sizeof(*m));
}

/* ----------------------------------------------------------- operations */

/* Enters new sequence s (id, tokens and blocks set) at slot, the empty
 * slot mm_room gave for s->id, and counts its creation.  Lock held. */
static void mm_publish_new(struct mm_mgr *m, uint64_t slot, struct mm_seq *s)
{
	s->last_access = ++m->pool->clock;
	s->access_count = 1;
	m->slots[slot].key = s->id;
	m->slots[slot].seq = s;
	m->count++;
	m->st.seq_creates++;
	m->st.tokens += s->num_tokens;
}

MM_API int mm_create(struct mm_mgr *m, uint64_t id, uint32_t num_tokens)
{
	struct mm_pool *p = m->pool;
	uint32_t nb = ceil_div(num_tokens, p->block_tokens);
	struct mm_seq *s = mm_seq_new(nb);
	uint64_t slot;
	bool found;
	int rc;

	if (!s)
		return -ENOMEM;
	s->id = id;
	s->num_tokens = num_tokens;
	s->nblocks = nb;
	pthread_mutex_lock(&p->lock);
	slot = mm_probe(m, id, &found);
	rc = found ? -EEXIST : mm_available(p) < nb ? -ENOSPC : 0;
	if (rc == 0)
		rc = mm_room(m, id, &slot);
	if (rc != 0) {
		pthread_mutex_unlock(&p->lock);
		mm_seq_delete(s);
		return rc;
	}
	for (uint32_t i = 0; i < nb; i++)
		s->blocks[i] = mm_take_block(p);
	mm_publish_new(m, slot, s);
	m->st.blocks_allocated += nb;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

MM_API int mm_create_cached(struct mm_mgr *m, uint64_t id,
			    const struct kvp_hash *hashes, uint32_t nhashes,
			    uint32_t num_tokens, uint32_t *cached_tokens)
{
	struct mm_pool *p = m->pool;
	uint32_t bt = p->block_tokens, nb = ceil_div(num_tokens, bt);
	uint32_t limit = num_tokens ? (num_tokens - 1) / bt : 0;
	uint32_t hits = 0, revive = 0;
	struct mm_seq *s;
	uint64_t slot;
	bool found;
	int rc;

	if (!m->prefix || (!hashes && nhashes))
		return -EINVAL;
	if (limit > nhashes)
		limit = nhashes;
	s = mm_seq_new(nb);
	if (!s)
		return -ENOMEM;
	s->id = id;
	s->num_tokens = num_tokens;
	s->nblocks = nb;
	pthread_mutex_lock(&p->lock);
	slot = mm_probe(m, id, &found);
	if (found) {
		rc = -EEXIST;
		goto fail;
	}
	/* The longest cached prefix; nothing changes before the check. */
	while (hits < limit) {
		uint32_t b = pmap_find(m, &hashes[hits]);

		if (b == MM_NONE || p->refcnt[b] >= KVP_MAX_REFS)
			break;
		revive += p->refcnt[b] == 0;
		s->blocks[hits++] = b;
	}
	if (mm_available(p) - revive < nb - hits) {
		rc = -ENOSPC;
		goto fail;
	}
	rc = mm_room(m, id, &slot);
	if (rc != 0)
		goto fail;
	/* Hits first, so the allocation below never evicts them. */
	for (uint32_t i = 0; i < hits; i++)
		mm_revive(p, s->blocks[i]);
	for (uint32_t i = hits; i < nb; i++)
		s->blocks[i] = mm_take_block(p);
	mm_publish_new(m, slot, s);
	m->st.blocks_allocated += nb - hits;
	m->st.prefix_queries += num_tokens;
	m->st.prefix_hits += (uint64_t)hits * bt;
	pthread_mutex_unlock(&p->lock);
	if (cached_tokens)
		*cached_tokens = hits * bt;
	return 0;
fail:
	pthread_mutex_unlock(&p->lock);
	mm_seq_delete(s);
	return rc;
}

MM_API int mm_commit(struct mm_mgr *m, uint64_t id,
		     const struct kvp_hash *hashes, uint32_t nhashes)
{
	struct mm_pool *p = m->pool;
	struct mm_seq *s;
	uint32_t full, added = 0;
	int rc = 0;

	if (!m->prefix || (!hashes && nhashes))
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	s = mm_lookup(m, id);
	if (!s) {
		pthread_mutex_unlock(&p->lock);
		return -ENOENT;
	}
	full = s->num_tokens / p->block_tokens;
	if (full > nhashes)
		full = nhashes;
	for (uint32_t i = 0; i < full; i++) {
		uint32_t b = s->blocks[i];

		if (p->owner[b] || pmap_find(m, &hashes[i]) != MM_NONE)
			continue; /* cached already, or the hash is taken */
		if ((m->pcount + 1) * 2 > m->pmask + 1) {
			rc = pmap_grow(m);
			if (rc != 0)
				break;
		}
		p->bhash[b] = hashes[i];
		p->owner[b] = m;
		pmap_place(p, m->pslots, m->pmask, b);
		m->pcount++;
		added++;
	}
	m->st.prefix_commits += added;
	pthread_mutex_unlock(&p->lock);
	return rc != 0 ? rc : (int)added;
}

/*
 * One append of num_tokens slots to s, as mm_append; *ncow (not NULL) is
 * set to the copies reported (0 or 1, also on -ENOSPC for a copy that did
 * not fit).  Lock held.
 */
static inline int mm_append_locked(struct mm_mgr *m, struct mm_seq *s,
				   uint32_t num_tokens, struct kvp_copy *cow,
				   uint32_t cow_cap, uint32_t *ncow)
{
	struct mm_pool *p = m->pool;
	uint64_t total = (uint64_t)s->num_tokens + num_tokens;
	uint32_t want, grow, part;
	bool copy;
	int rc;

	*ncow = 0;
	if (total > UINT32_MAX)
		return -EINVAL;
	want = ceil_div(total, p->block_tokens);
	grow = want - s->nblocks;
	part = s->num_tokens % p->block_tokens;
	copy = num_tokens > 0 && part != 0 &&
	       p->refcnt[s->blocks[s->nblocks - 1]] > 1;
	if (copy)
		*ncow = 1;
	if ((copy && cow_cap == 0) || mm_available(p) < grow + (copy ? 1u : 0u))
		return -ENOSPC;
	rc = mm_reserve(s, want);
	if (rc != 0)
		return rc;
	if (copy) {
		uint32_t old = s->blocks[s->nblocks - 1];
		uint32_t fresh = mm_take_block(p);

		mm_put_block(p, old); /* > 1 before: stays referenced */
		s->blocks[s->nblocks - 1] = fresh;
		cow[0].src = old;
		cow[0].dst = fresh;
		cow[0].tokens = part;
		m->st.cow_copies++;
		m->st.blocks_allocated++;
		m->st.blocks_released++;
	}
	for (uint32_t i = 0; i < grow; i++)
		s->blocks[s->nblocks + i] = mm_take_block(p);
	m->st.blocks_allocated += grow;
	s->nblocks = want;
	s->num_tokens = (uint32_t)total;
	s->last_access = ++p->clock;
	s->access_count++;
	m->st.appends++;
	m->st.tokens += num_tokens;
	return 0;
}

MM_API int mm_append(struct mm_mgr *m, uint64_t id, uint32_t num_tokens,
		     struct kvp_copy *cow, uint32_t cow_cap, uint32_t *ncow)
{
	struct mm_pool *p = m->pool;
	struct mm_seq *s;
	uint32_t n = 0;
	int rc;

	if (ncow)
		*ncow = 0;
	if (!cow && cow_cap > 0)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	s = mm_lookup(m, id);
	rc = s ? mm_append_locked(m, s, num_tokens, cow, cow_cap, &n) : -ENOENT;
	pthread_mutex_unlock(&p->lock);
	if (ncow)
		*ncow = n;
	return rc;
}

/*
 * The whole batch under one acquisition of the lock: the mutex design's
 * best case for a decode step.  Stops at the first append that fails, as
 * kvp_seq_append_batch does.
 */
MM_API int mm_append_batch(struct mm_mgr *m, const uint64_t *seqs,
			   const uint32_t *num_tokens, uint32_t nseq,
			   struct kvp_copy *cow, uint32_t cow_cap,
			   uint32_t *ncow)
{
	struct mm_pool *p = m->pool;
	uint32_t i, used = 0;
	int rc = 0;

	if (ncow)
		*ncow = 0;
	if ((!seqs && nseq > 0) || (!cow && cow_cap > 0) || nseq > INT32_MAX)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	for (i = 0; i < nseq; i++) {
		struct mm_seq *s = mm_lookup(m, seqs[i]);
		uint32_t n = 0;

		rc = s ? mm_append_locked(m, s, num_tokens ? num_tokens[i] : 1,
					  cow ? cow + used : NULL,
					  cow_cap - used, &n)
		       : -ENOENT;
		if (rc != 0)
			break;
		used += n;
	}
	pthread_mutex_unlock(&p->lock);
	if (ncow)
		*ncow = used;
	return i == 0 && rc != 0 ? rc : (int)i;
}

MM_API int mm_fork(struct mm_mgr *m, uint64_t src, uint64_t dst)
{
	struct mm_pool *p = m->pool;
	struct mm_seq *d = mm_seq_new(MM_MIN_CAP), *s;
	uint64_t slot;
	bool found;
	int rc;

	if (!d)
		return -ENOMEM;
	pthread_mutex_lock(&p->lock);
	s = mm_lookup(m, src);
	if (!s) {
		rc = -ENOENT;
		goto fail;
	}
	slot = mm_probe(m, dst, &found);
	if (found) {
		rc = -EEXIST;
		goto fail;
	}
	for (uint32_t i = 0; i < s->nblocks; i++)
		if (p->refcnt[s->blocks[i]] >= KVP_MAX_REFS) {
			rc = -EOVERFLOW;
			goto fail;
		}
	rc = mm_reserve(d, s->nblocks);
	if (rc == 0)
		rc = mm_room(m, dst, &slot);
	if (rc != 0)
		goto fail;
	for (uint32_t i = 0; i < s->nblocks; i++) {
		uint32_t b = s->blocks[i];

		p->refcnt[b]++;
		d->blocks[i] = b;
	}
	d->id = dst;
	d->nblocks = s->nblocks;
	d->num_tokens = s->num_tokens;
	d->priority = s->priority;
	d->last_access = s->last_access = ++p->clock;
	d->access_count = 0;
	s->access_count++;
	m->slots[slot].key = dst;
	m->slots[slot].seq = d;
	m->count++;
	m->st.forks++;
	m->st.tokens += d->num_tokens;
	pthread_mutex_unlock(&p->lock);
	return 0;
fail:
	pthread_mutex_unlock(&p->lock);
	mm_seq_delete(d);
	return rc;
}

/* Room in the map for n more sequences.  Lock held. */
static int mm_room_n(struct mm_mgr *m, uint32_t n)
{
	while ((m->count + n) * 2 > m->mask + 1) {
		int rc = mm_grow(m);

		if (rc)
			return rc;
	}
	return 0;
}

/* mm_fork_n under the lock, the children's structs ds[0..n) made: checks
 * everything, then changes everything (all or nothing). */
static int mm_fork_n_locked(struct mm_mgr *m, struct mm_seq *s,
			    const uint64_t *dsts, struct mm_seq **ds,
			    uint32_t n)
{
	struct mm_pool *p = m->pool;
	bool found;
	int rc;

	for (uint32_t i = 0; i < n; i++) {
		(void)mm_probe(m, dsts[i], &found);
		for (uint32_t j = 0; j < i && !found; j++)
			found = dsts[j] == dsts[i];
		if (found)
			return -EEXIST;
	}
	for (uint32_t i = 0; i < s->nblocks; i++)
		if (p->refcnt[s->blocks[i]] > KVP_MAX_REFS - n)
			return -EOVERFLOW;
	for (uint32_t i = 0; i < n; i++)
		if ((rc = mm_reserve(ds[i], s->nblocks)) != 0)
			return rc;
	if ((rc = mm_room_n(m, n)) != 0)
		return rc;
	for (uint32_t i = 0; i < s->nblocks; i++)
		p->refcnt[s->blocks[i]] += n;
	s->last_access = ++p->clock;
	s->access_count++;
	for (uint32_t i = 0; i < n; i++) {
		struct mm_seq *d = ds[i];
		uint64_t slot = mm_probe(m, dsts[i], &found);

		memcpy(d->blocks, s->blocks, s->nblocks * sizeof(uint32_t));
		d->id = dsts[i];
		d->nblocks = s->nblocks;
		d->num_tokens = s->num_tokens;
		d->priority = s->priority;
		d->last_access = ++p->clock;
		d->access_count = 0;
		m->slots[slot].key = dsts[i];
		m->slots[slot].seq = d;
	}
	m->count += n;
	m->st.forks += n;
	m->st.tokens += (uint64_t)n * s->num_tokens;
	return 0;
}

MM_API int mm_fork_n(struct mm_mgr *m, uint64_t src, const uint64_t *dsts,
		     uint32_t n)
{
	struct mm_pool *p = m->pool;
	struct mm_seq *ds[MM_FORK_N_MAX], *s;
	uint32_t made;
	int rc = 0;

	if (n == 0 || n > MM_FORK_N_MAX)
		return -EINVAL;
	/* Host memory outside the lock, as mm_fork's. */
	for (made = 0; made < n; made++)
		if (!(ds[made] = mm_seq_new(MM_MIN_CAP))) {
			rc = -ENOMEM;
			break;
		}
	if (!rc) {
		pthread_mutex_lock(&p->lock);
		s = mm_lookup(m, src);
		rc = s ? mm_fork_n_locked(m, s, dsts, ds, n) : -ENOENT;
		pthread_mutex_unlock(&p->lock);
	}
	if (rc)
		for (uint32_t i = 0; i < made; i++)
			mm_seq_delete(ds[i]);
	return rc;
}

MM_API int mm_free(struct mm_mgr *m, uint64_t id)
{
	struct mm_pool *p = m->pool;
	struct mm_seq *s;
	uint64_t slot;
	bool found;

	pthread_mutex_lock(&p->lock);
	slot = mm_probe(m, id, &found);
	if (!found) {
		pthread_mutex_unlock(&p->lock);
		return -ENOENT;
	}
	s = mm_remove(m, slot);
	pthread_mutex_unlock(&p->lock);
	mm_seq_delete(s);
	return 0;
}

/* Whether a should be evicted before b under the policy (ties: LRU), as
 * the library decides. */
static bool mm_evict_before(enum kvp_policy policy, const struct mm_seq *a,
			    const struct mm_seq *b)
{
	switch (policy) {
	case KVP_EVICT_LFU:
		if (a->access_count != b->access_count)
			return a->access_count < b->access_count;
		break;
	case KVP_EVICT_LONGEST:
		if (a->num_tokens != b->num_tokens)
			return a->num_tokens > b->num_tokens;
		break;
	case KVP_EVICT_PRIORITY:
		if (a->priority != b->priority)
			return a->priority < b->priority;
		break;
	case KVP_EVICT_LRU:
		break;
	}
	return a->last_access < b->last_access;
}

MM_API int mm_evict(struct mm_mgr *m, uint64_t *victim)
{
	struct mm_pool *p = m->pool;
	struct mm_seq *best = NULL, *s;
	uint64_t best_slot = 0;

	pthread_mutex_lock(&p->lock);
	for (uint64_t i = 0; i <= m->mask; i++) {
		s = m->slots[i].seq;
		if (s && (!best || mm_evict_before(m->policy, s, best))) {
			best = s;
			best_slot = i;
		}
	}
	if (!best) {
		pthread_mutex_unlock(&p->lock);
		return -ENOENT;
	}
	if (victim)
		*victim = best->id;
	s = mm_remove(m, best_slot);
	m->st.evictions++;
	pthread_mutex_unlock(&p->lock);
	mm_seq_delete(s);
	return 0;
}

MM_API int mm_admit(struct mm_mgr *m, uint32_t num_tokens)
{
	struct mm_pool *p = m->pool;
	uint64_t total = p->nblocks, free_blocks, required, watermark;

	pthread_mutex_lock(&p->lock);
	free_blocks = total - p->used;
	pthread_mutex_unlock(&p->lock);
	required = ceil_div(num_tokens, p->block_tokens);
	/* As kvp_admit: the fraction in blocks, rounded down. */
	watermark = (uint64_t)((double)m->watermark * (double)total *
			       (1.0 + 0x1p-22));
	if (total < required + watermark)
		return KVP_ADMIT_NEVER;
	if (free_blocks >= required + watermark)
		return KVP_ADMIT_OK;
	return KVP_ADMIT_LATER;
}

MM_API int mm_set_priority(struct mm_mgr *m, uint64_t id, int32_t priority)
{
	struct mm_seq *s;

	pthread_mutex_lock(&m->pool->lock);
	s = mm_lookup(m, id);
	if (s)
		s->priority = priority;
	pthread_mutex_unlock(&m->pool->lock);
	return s ? 0 : -ENOENT;
}

void mm_stats(struct mm_mgr *m, struct kvp_stats *st)
{
	struct mm_pool *p = m->pool;

	pthread_mutex_lock(&p->lock);
	*st = m->st;
	st->sequences = m->count;
	st->blocks_used = p->used;
	st->blocks_total = p->nblocks;
	st->bytes_per_block = 0;
	st->prefix_cached_blocks = m->pcount;
	pthread_mutex_unlock(&p->lock);
	st->prefix_hit_rate =
		st->prefix_queries
			? (double)st->prefix_hits / (double)st->prefix_queries
			: 0;
}

/* ---------------------------------------------------------------- check */

/* Reports a broken invariant on stderr; returns -EFAULT. */
static int check_fail(const char *what, uint64_t a, uint64_t b)
{
	fprintf(stderr, "mutex manager check: %s (%llu, %llu)\n", what,
		(unsigned long long)a, (unsigned long long)b);
	return -EFAULT;
}

int mm_check(struct mm_pool *p, struct mm_mgr *const *mgrs, unsigned n)
{
	uint32_t *refs = calloc(p->nblocks, sizeof(*refs));
	uint8_t *where = calloc(p->nblocks, 1); /* 1 stack, 2 LRU */
	uint64_t used = 0, cached = 0, lru = 0, owned = 0;
	int rc = 0;

	if (!refs || !where) {
		free(refs);
		free(where);
		return -ENOMEM;
	}
	for (unsigned k = 0; k < n && rc == 0; k++) {
		const struct mm_mgr *m = mgrs[k];

		for (uint64_t i = 0; i <= m->mask; i++) {
			const struct mm_seq *s = m->slots[i].seq;

			if (!s)
				continue;
			if (s->nblocks !=
			    ceil_div(s->num_tokens, p->block_tokens))
				rc = check_fail("table length", s->nblocks,
						s->num_tokens);
			for (uint32_t b = 0; b < s->nblocks; b++)
				refs[s->blocks[b]]++;
		}
		for (uint64_t i = 0; m->pslots && i <= m->pmask; i++) {
			uint32_t e = m->pslots[i];

			if (!e)
				continue;
			if (p->owner[e - 1] != m)
				rc = check_fail("cached block not owned by its "
						"map",
						e - 1, k);
			if (pmap_find(m, &p->bhash[e - 1]) != e - 1)
				rc = check_fail("cached block not found by "
						"its hash",
						e - 1, k);
			cached++;
		}
	}
	for (uint32_t i = 0; i < p->top && rc == 0; i++) {
		uint32_t b = p->stack[i];

		if (b >= p->nblocks || where[b] || p->refcnt[b] || p->owner[b])
			rc = check_fail("bad free-list entry", b, i);
		else
			where[b] = 1;
	}
	for (uint32_t b = p->lru_head; b != MM_NONE && rc == 0;
	     b = p->lru_next[b]) {
		if (where[b] || p->refcnt[b] || !p->owner[b])
			rc = check_fail("bad evictable entry", b, lru);
		where[b] = 2;
		lru++;
	}
	if (rc == 0 && lru != p->lru_count)
		rc = check_fail("evictable count", lru, p->lru_count);
	for (uint32_t b = 0; b < p->nblocks && rc == 0; b++) {
		if (refs[b] != p->refcnt[b])
			rc = check_fail("reference count != table entries", b,
					p->refcnt[b]);
		else if (!p->refcnt[b] && !where[b])
			rc = check_fail("block lost", b, 0);
		used += p->refcnt[b] != 0;
		owned += p->owner[b] != NULL;
	}
	if (rc == 0 && used != p->used)
		rc = check_fail("used count", used, p->used);
	if (rc == 0 && owned != cached)
		rc = check_fail("cached blocks != map entries", owned, cached);
	free(refs);
	free(where);
	return rc;
}
