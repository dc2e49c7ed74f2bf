/* SPDX-License-Identifier: MIT */
/*
 * model.c - the reference model of kvpool (see model.h).  Written from
 * kvpool.h and doc/errors.md, not from lib/: where the two could differ,
 * the header wins.  Where the header leaves an order of checks open and
 * doc/errors.md records the library's (fork: -EEXIST for dst before
 * -ENOENT for src), the model follows the record.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define DEFAULT_THRESHOLD 0.9f
#define DEFAULT_WATERMARK 0.01f

void model_fail(struct model_pool *mp, const char *fmt, ...)
{
	va_list ap;

	if (mp->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(mp->err, sizeof(mp->err), fmt, ap);
	va_end(ap);
}

const char *model_error(const struct model_pool *mp)
{
	return mp->err[0] ? mp->err : NULL;
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p) {
		fprintf(stderr, "model: out of memory\n");
		abort();
	}
	return p;
}

static uint32_t blocks_for(uint32_t tokens, uint32_t bt)
{
	return tokens / bt + (tokens % bt != 0);
}

/* ------------------------------------------------------------ pools */

static size_t dtype_bytes(enum kvp_dtype dt)
{
	switch (dt) {
	case KVP_F32:
		return 4;
	case KVP_F16:
	case KVP_BF16:
		return 2;
	case KVP_F64:
		return 8;
	case KVP_U8:
		return 1;
	}
	return 0;
}

/* Row and block bytes of a layout; false if invalid or overflowing. */
static bool layout_sizes(const struct kvp_layout *l, uint32_t bt,
			 size_t planes, size_t *row, size_t *block)
{
	size_t el = dtype_bytes(l->dtype), r, b;

	if (!el || !l->num_layers || !l->num_kv_heads || !l->head_dim)
		return false;
	if (__builtin_mul_overflow(el, (size_t)l->num_kv_heads, &r) ||
	    __builtin_mul_overflow(r, (size_t)l->head_dim, &r) ||
	    __builtin_mul_overflow(r, (size_t)l->num_layers, &b) ||
	    __builtin_mul_overflow(b, planes * bt, &b))
		return false;
	*row = r;
	*block = b;
	return true;
}

int model_pool_config_rc(const struct kvp_pool_config *cfg, bool null_out)
{
	size_t row, block, arena;

	if (!cfg || null_out)
		return -EINVAL;
	/* 0 blocks: an empty pool. */
	if (cfg->num_blocks > KVP_MAX_BLOCKS || cfg->block_tokens == 0)
		return -EINVAL;
	if (cfg->cache_blocks > KVP_MAX_CACHE_BLOCKS ||
	    cfg->cache_blocks > cfg->num_blocks)
		return -EINVAL;
	if (cfg->flags & ~(KVP_POOL_ZERO | KVP_POOL_NOCACHE | KVP_POOL_K_ONLY))
		return -EINVAL;
	if ((cfg->flags & KVP_POOL_K_ONLY) && !cfg->layout)
		return -EINVAL;
	if (cfg->layout &&
	    (!layout_sizes(cfg->layout, cfg->block_tokens,
			   (cfg->flags & KVP_POOL_K_ONLY) ? 1 : 2, &row,
			   &block) ||
	     __builtin_mul_overflow(block, (size_t)cfg->num_blocks, &arena)))
		return -EINVAL;
	return 0;
}

struct model_pool *model_pool_new(const struct kvp_pool_config *cfg)
{
	struct model_pool *mp = xcalloc(1, sizeof(*mp));

	mp->num_blocks = cfg->num_blocks;
	mp->block_tokens = cfg->block_tokens;
	mp->flags = cfg->flags;
	mp->refs = xcalloc(cfg->num_blocks, sizeof(*mp->refs));
	mp->free = cfg->num_blocks;
	mp->cached = xcalloc(cfg->num_blocks, sizeof(*mp->cached));
	mp->owner = xcalloc(cfg->num_blocks, sizeof(*mp->owner));
	mp->hash = xcalloc(cfg->num_blocks, sizeof(*mp->hash));
	mp->freed_at = xcalloc(cfg->num_blocks, sizeof(*mp->freed_at));
	mp->prio = xcalloc(cfg->num_blocks, sizeof(*mp->prio));
	mp->expires = xcalloc(cfg->num_blocks, sizeof(*mp->expires));
	if (cfg->layout) {
		size_t rows;

		/* The world's pools keep K and V (K-only pools are only
		 * created and dropped, by op_configs). */
		mp->has_data = layout_sizes(cfg->layout, cfg->block_tokens, 2,
					    &mp->row_bytes, &mp->block_bytes);
		mp->num_layers = cfg->layout->num_layers;
		if (mp->row_bytes > MODEL_MAX_ROW) {
			fprintf(stderr, "model: rows of %zu bytes: too large\n",
				mp->row_bytes);
			abort();
		}
		rows = (size_t)cfg->num_blocks * mp->num_layers * 2 *
		       cfg->block_tokens;
		mp->data = xcalloc(rows, mp->row_bytes);
		/* Fresh pools: the header fixes nothing about the bytes. */
		mp->known = xcalloc(rows, 1);
	}
	return mp;
}

void model_pool_delete(struct model_pool *mp)
{
	if (!mp)
		return;
	free(mp->refs);
	free(mp->cached);
	free(mp->owner);
	free(mp->hash);
	free(mp->freed_at);
	free(mp->prio);
	free(mp->expires);
	free(mp->data);
	free(mp->known);
	free(mp);
}

/* Index of the row of (block, layer, kv, token). */
static size_t row_index(const struct model_pool *mp, uint32_t block,
			uint32_t layer, int kv, uint32_t tok)
{
	return (((size_t)block * mp->num_layers + layer) * 2 + (size_t)kv) *
		       mp->block_tokens +
	       tok;
}

/* A block handed out: zeroed under KVP_POOL_ZERO, unknown otherwise. */
static void data_fresh(struct model_pool *mp, uint32_t b)
{
	size_t first, rows;

	if (!mp->has_data)
		return;
	first = row_index(mp, b, 0, 0, 0);
	rows = (size_t)mp->num_layers * 2 * mp->block_tokens;
	memset(mp->data + first * mp->row_bytes, 0, rows * mp->row_bytes);
	memset(mp->known + first, (mp->flags & KVP_POOL_ZERO) ? 1 : 0, rows);
}

static void emit(struct model_pool *mp, const struct model_mgr *mm,
		 enum kvp_event_type type, const struct kvp_hash *h,
		 const struct kvp_hash *parent)
{
	struct model_event *e;

	if (mp->nevents == MODEL_MAX_EVENTS) {
		model_fail(mp, "model: more than %d events in one call",
			   MODEL_MAX_EVENTS);
		return;
	}
	e = &mp->events[mp->nevents++];
	memset(e, 0, sizeof(*e));
	e->mgr = mm;
	e->type = type;
	if (h)
		e->hash = *h;
	if (parent) {
		e->has_parent = true;
		e->parent = *parent;
	}
}

static void count_cached(struct model_mgr *mm, int delta);

/* Block b's retention goes back to the default; a pin is uncounted. */
static void retain_clear(struct model_pool *mp, uint32_t b)
{
	if (mp->prio[b] == KVP_RETAIN_PIN && mp->owner[b])
		((struct model_mgr *)mp->owner[b])->pinned--;
	mp->prio[b] = KVP_RETAIN_DEFAULT;
	mp->expires[b] = 0;
}

/* Forgets block b's hash (an eviction or a reset). */
static void uncache(struct model_pool *mp, uint32_t b)
{
	retain_clear(mp, b);
	mp->cached[b] = false;
	count_cached((struct model_mgr *)mp->owner[b], -1);
	mp->owner[b] = NULL;
}

/* Cached block b's priority now (its owner's clock). */
static uint32_t level_of(const struct model_pool *mp, uint32_t b)
{
	const struct model_mgr *mm = mp->owner[b];

	if (mp->expires[b] && mm && mm->clock >= mp->expires[b])
		return KVP_RETAIN_DEFAULT;
	return mp->prio[b];
}

uint64_t model_evictable(const struct model_pool *mp)
{
	uint64_t n = 0;

	for (uint32_t b = 0; b < mp->num_blocks; b++)
		n += mp->cached[b] && !mp->refs[b];
	return n;
}

/* Free blocks an allocation may take: all but idle pinned ones. */
static uint64_t allocatable(const struct model_pool *mp)
{
	uint64_t n = mp->free;

	for (uint32_t b = 0; b < mp->num_blocks; b++)
		n -= mp->cached[b] && !mp->refs[b] &&
		     level_of(mp, b) == KVP_RETAIN_PIN;
	return n;
}

/* The next evictable block: of the lowest priority, the least recently
 * freed; never a pin.  UINT32_MAX if none. */
static uint32_t lru_evictable(const struct model_pool *mp)
{
	uint32_t lru = UINT32_MAX;

	for (uint32_t b = 0; b < mp->num_blocks; b++) {
		uint32_t l;

		if (!mp->cached[b] || mp->refs[b])
			continue;
		l = level_of(mp, b);
		if (l == KVP_RETAIN_PIN)
			continue;
		if (lru == UINT32_MAX || l < level_of(mp, lru) ||
		    (l == level_of(mp, lru) &&
		     mp->freed_at[b] < mp->freed_at[lru]))
			lru = b;
	}
	return lru;
}

bool model_evicted_ahead(struct model_pool *mp, const struct model_mgr *mm,
			 const struct kvp_hash *h)
{
	uint32_t lru = lru_evictable(mp);

	if (lru == UINT32_MAX || mp->owner[lru] != (const void *)mm ||
	    memcmp(&mp->hash[lru], h, sizeof(*h)) != 0) {
		model_fail(mp, "an eviction ahead of need removed another "
			       "hash than the next block's in eviction order "
			       "(block %u)",
			   lru);
		return false;
	}
	emit(mp, mp->owner[lru], KVP_EVENT_REMOVED, &mp->hash[lru], NULL);
	((struct model_mgr *)mp->owner[lru])->st.prefix_evictions++;
	uncache(mp, lru);
	mp->cache_evictions++;
	return true;
}

/*
 * Takes n blocks the library chose.  Each must be in range and free (and
 * so distinct, as taking one makes it held); never-cached free blocks
 * come first: if fewer than n are free, the others must be exactly the
 * least recently freed evictable blocks, which lose their hashes
 * (KVP_EVENT_REMOVED, in eviction order).  Returns false (recorded)
 * otherwise.
 */
static bool take_chosen(struct model_pool *mp, uint32_t n,
			const uint32_t *chosen, const char *what)
{
	uint32_t i, plain = 0, evict;

	for (uint32_t b = 0; b < mp->num_blocks; b++)
		plain += !mp->refs[b] && !mp->cached[b];
	evict = n > plain ? n - plain : 0;
	if (n > allocatable(mp)) {
		model_fail(mp, "model: %s takes %u blocks, %llu allocatable",
			   what, n, (unsigned long long)allocatable(mp));
		return false;
	}
	for (i = 0; i < n; i++) {
		uint32_t b = chosen[i];

		if (b >= mp->num_blocks) {
			model_fail(mp, "%s: block %u of %u returned is out of"
				       " range (%u blocks)",
				   what, i, n, b);
			return false;
		}
		for (uint32_t j = 0; j < i; j++)
			if (chosen[j] == b) {
				model_fail(mp, "%s: returned block %u twice",
					   what, b);
				return false;
			}
		if (mp->refs[b]) {
			model_fail(mp, "%s: returned block %u, which has %u"
				       " reference(s)",
				   what, b, mp->refs[b]);
			return false;
		}
		if (mp->cached[b] && !evict) {
			model_fail(mp, "%s: evicted cached block %u while %u"
				       " never-cached block(s) were free",
				   what, b, plain);
			return false;
		}
	}
	/* The evictions, least recently freed first. */
	for (uint32_t k = 0; k < evict; k++) {
		uint32_t lru = lru_evictable(mp);
		bool taken = false;

		for (i = 0; i < n; i++)
			taken |= chosen[i] == lru;
		if (lru == UINT32_MAX || !taken) {
			model_fail(mp, "%s: evicted other blocks than the %u"
				       " least recently freed (block %u was"
				       " due)",
				   what, evict, lru);
			return false;
		}
		emit(mp, mp->owner[lru], KVP_EVENT_REMOVED, &mp->hash[lru],
		     NULL);
		((struct model_mgr *)mp->owner[lru])->st.prefix_evictions++;
		uncache(mp, lru);
		mp->cache_evictions++;
		/* Taken below like a free block. */
	}
	for (i = 0; i < n; i++) {
		uint32_t b = chosen[i];

		if (mp->cached[b]) {
			model_fail(mp, "%s: returned cached block %u, not one"
				       " of the least recently freed",
				   what, b);
			return false;
		}
		mp->refs[b] = 1;
		mp->free--;
		mp->allocs++;
		data_fresh(mp, b);
	}
	return true;
}

/* Drops one reference on each of ids[0..n), last first. */
static void release(struct model_pool *mp, const uint32_t *ids, uint32_t n)
{
	while (n--) {
		uint32_t b = ids[n];

		if (!mp->refs[b]) {
			model_fail(mp, "model: release of free block %u", b);
			continue;
		}
		if (--mp->refs[b] == 0) {
			mp->free++;
			mp->frees++; /* allocs - frees = used, evictable or not */
			if (mp->cached[b]) {
				mp->freed_at[b] = ++mp->release_tick;
				/* An expired priority goes at release. */
				if (mp->prio[b] &&
				    level_of(mp, b) == KVP_RETAIN_DEFAULT)
					retain_clear(mp, b);
			}
		}
	}
}

int model_pool_alloc(struct model_pool *mp, bool null_pool, bool null_ids,
		     uint32_t n, const uint32_t *chosen)
{
	if (null_pool || null_ids || n == 0)
		return -EINVAL;
	if (n > allocatable(mp))
		return -ENOSPC;
	if (chosen)
		(void)take_chosen(mp, n, chosen, "kvp_pool_alloc");
	return 0;
}

int model_pool_free(struct model_pool *mp, bool null_pool, bool null_ids,
		    const uint32_t *ids, uint32_t n, int *alt_rc)
{
	bool range_bad = false, refs_bad = false;
	uint32_t i, j;

	*alt_rc = 1; /* none */
	if (null_pool || null_ids || n == 0)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		uint32_t k = 0;

		if (ids[i] >= mp->num_blocks) {
			range_bad = true;
			continue;
		}
		for (j = 0; j < n; j++)
			k += ids[j] == ids[i];
		if (mp->refs[ids[i]] < k)
			refs_bad = true;
	}
	/* kvpool.h names both errors but not which wins when both apply. */
	if (range_bad && refs_bad)
		*alt_rc = -EALREADY;
	if (range_bad)
		return -ERANGE;
	if (refs_bad)
		return -EALREADY;
	/* The order of the drops is not observable without a prefix
	 * cache; a free list may be in any order. */
	release(mp, ids, n);
	return 0;
}

int model_block_ref(struct model_pool *mp, uint32_t id)
{
	if (!mp)
		return -EINVAL;
	if (id >= mp->num_blocks)
		return -ERANGE;
	if (!mp->refs[id])
		return -EALREADY;
	if (mp->refs[id] == KVP_MAX_REFS)
		return -EOVERFLOW;
	mp->refs[id]++;
	return 0;
}

int model_block_refcount(const struct model_pool *mp, uint32_t id)
{
	if (!mp)
		return -EINVAL;
	if (id >= mp->num_blocks)
		return -ERANGE;
	return (int)mp->refs[id];
}

void model_pool_stats(const struct model_pool *mp, struct kvp_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->total = mp->num_blocks;
	st->free = mp->free;
	st->used = mp->num_blocks - mp->free;
	st->allocs = mp->allocs;
	st->frees = mp->frees;
	st->evictable = model_evictable(mp);
	st->cache_evictions = mp->cache_evictions;
}

/* References per block held by sequences of every manager. */
static uint32_t *table_refs(const struct model_pool *mp)
{
	uint32_t *cnt = xcalloc(mp->num_blocks, sizeof(*cnt));

	for (int i = 0; i < MODEL_MAX_MGRS; i++) {
		const struct model_mgr *mm = mp->mgrs[i];

		if (!mm)
			continue;
		for (uint32_t s = 0; s < mm->nseqs; s++)
			for (uint32_t b = 0; b < mm->seqs[s].nblocks; b++)
				cnt[mm->seqs[s].blocks[b]]++;
	}
	return cnt;
}

uint64_t model_pool_raw_refs(const struct model_pool *mp)
{
	uint32_t *cnt = table_refs(mp);
	uint64_t raw = 0;

	for (uint32_t b = 0; b < mp->num_blocks; b++)
		raw += mp->refs[b] - cnt[b];
	free(cnt);
	return raw;
}

/* ------------------------------------------------------------ managers */

int model_manager_config_rc(const struct kvp_manager_config *cfg,
			    bool null_out)
{
	if (!cfg || null_out || !cfg->pool)
		return -EINVAL;
	if ((unsigned)cfg->policy > KVP_EVICT_PRIORITY)
		return -EINVAL;
	if (!(cfg->eviction_threshold >= 0 && cfg->eviction_threshold <= 1))
		return -EINVAL; /* NaN fails both */
	if (!(cfg->watermark >= 0 && cfg->watermark < 1))
		return -EINVAL;
	if (cfg->flags &
	    ~(KVP_PREFIX_CACHE | KVP_EXACT_LIMITS | KVP_EMIT_CACHED_EVENTS))
		return -EINVAL;
	if ((cfg->flags & KVP_EMIT_CACHED_EVENTS) &&
	    !(cfg->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	return 0;
}

struct model_mgr *model_mgr_new(struct model_pool *mp,
				const struct kvp_manager_config *cfg)
{
	struct model_mgr *mm = xcalloc(1, sizeof(*mm));
	int i;

	mm->pool = mp;
	mm->policy = cfg->policy;
	mm->eviction_threshold = cfg->eviction_threshold;
	mm->watermark = cfg->watermark;
	if (!(cfg->flags & KVP_EXACT_LIMITS)) {
		if (mm->eviction_threshold == 0)
			mm->eviction_threshold = DEFAULT_THRESHOLD;
		if (mm->watermark == 0)
			mm->watermark = DEFAULT_WATERMARK;
	}
	mm->flags = cfg->flags;
	mm->max_pinned = cfg->max_pinned ? cfg->max_pinned : mp->num_blocks / 4;
	for (i = 0; i < MODEL_MAX_MGRS && mp->mgrs[i]; i++)
		;
	if (i == MODEL_MAX_MGRS) {
		fprintf(stderr, "model: more than %d managers\n",
			MODEL_MAX_MGRS);
		abort();
	}
	mp->mgrs[i] = mm;
	return mm;
}

static struct model_seq *find(const struct model_mgr *mm, uint64_t id)
{
	for (uint32_t i = 0; i < mm->nseqs; i++)
		if (mm->seqs[i].id == id)
			return &mm->seqs[i];
	return NULL;
}

const struct model_seq *model_seq_find(const struct model_mgr *mm,
				       uint64_t id)
{
	return find(mm, id);
}

/* Removes sequence s (its blocks released last first). */
static void seq_remove(struct model_mgr *mm, struct model_seq *s)
{
	uint32_t at = (uint32_t)(s - mm->seqs);

	release(mm->pool, s->blocks, s->nblocks);
	mm->st.blocks_released += s->nblocks;
	mm->st.seq_frees++;
	mm->st.sequences--;
	mm->st.tokens -= s->tokens;
	free(s->blocks);
	memmove(&mm->seqs[at], &mm->seqs[at + 1],
		(mm->nseqs - at - 1) * sizeof(*s));
	mm->nseqs--;
}

void model_mgr_delete(struct model_mgr *mm)
{
	struct model_pool *mp;

	if (!mm)
		return;
	mp = mm->pool;
	while (mm->nseqs)
		seq_remove(mm, &mm->seqs[mm->nseqs - 1]);
	/* Its cached blocks are forgotten; the evictable ones are free. */
	for (uint32_t b = 0; b < mp->num_blocks; b++)
		if (mp->cached[b] && mp->owner[b] == mm)
			uncache(mp, b);
	for (int i = 0; i < MODEL_MAX_MGRS; i++)
		if (mp->mgrs[i] == mm)
			mp->mgrs[i] = NULL;
	free(mm->seqs);
	free(mm);
}

static void count_cached(struct model_mgr *mm, int delta)
{
	mm->st.prefix_cached_blocks += (uint64_t)(int64_t)delta;
}

void model_manager_stats(const struct model_mgr *mm, struct kvp_stats *st)
{
	*st = mm->st;
	st->prefix_hit_rate = st->prefix_queries ? (double)st->prefix_hits /
							   (double)st->prefix_queries
						 : 0.0;
	st->blocks_used = mm->pool->num_blocks - mm->pool->free;
	st->blocks_total = mm->pool->num_blocks;
	st->prefix_pinned = mm->pinned;
	st->retention_clock = mm->clock;
	st->bytes_per_block = mm->pool->has_data ? mm->pool->block_bytes : 0;
}

int model_manager_check(const struct model_mgr *mm)
{
	if (!mm)
		return -EINVAL;
	return model_pool_raw_refs(mm->pool) ? -EFAULT : 0;
}

/* ------------------------------------------------------------ sequences */

static void touch(struct model_mgr *mm, struct model_seq *s)
{
	s->last_access = ++mm->pool->clock;
	s->access_count++;
}

/* A new live sequence (blocks to be filled in by the caller). */
static struct model_seq *seq_add(struct model_mgr *mm, uint64_t id,
				 uint32_t tokens, uint32_t nblocks)
{
	struct model_seq *s;

	if (mm->nseqs == mm->cap) {
		mm->cap = mm->cap ? 2 * mm->cap : 8;
		mm->seqs = realloc(mm->seqs, mm->cap * sizeof(*mm->seqs));
		if (!mm->seqs)
			abort();
	}
	s = &mm->seqs[mm->nseqs++];
	memset(s, 0, sizeof(*s));
	s->id = id;
	s->tokens = tokens;
	s->nblocks = nblocks;
	s->cap = nblocks;
	s->blocks = xcalloc(nblocks, sizeof(*s->blocks));
	mm->st.sequences++;
	mm->st.tokens += tokens;
	return s;
}

static void seq_reserve(struct model_seq *s, uint32_t need)
{
	if (need <= s->cap)
		return;
	s->blocks = realloc(s->blocks, (size_t)need * sizeof(*s->blocks));
	if (!s->blocks)
		abort();
	s->cap = need;
}

int model_seq_create(struct model_mgr *mm, uint64_t id, uint32_t tokens,
		     const uint32_t *chosen)
{
	struct model_pool *mp;
	struct model_seq *s;
	uint32_t nb;

	if (!mm)
		return -EINVAL;
	mp = mm->pool;
	nb = blocks_for(tokens, mp->block_tokens);
	if (find(mm, id))
		return -EEXIST;
	if (nb > mp->num_blocks)
		return -ENOSPC;
	if (nb > allocatable(mp))
		return -ENOSPC;
	if (!chosen)
		return 0;
	if (!take_chosen(mp, nb, chosen, "kvp_seq_create"))
		return 0;
	s = seq_add(mm, id, tokens, nb);
	memcpy(s->blocks, chosen, (size_t)nb * sizeof(*chosen));
	touch(mm, s);
	mm->st.seq_creates++;
	mm->st.blocks_allocated += nb;
	return 0;
}

/* Copies the first `tokens` rows of every layer's K and V. */
static void data_copy(struct model_pool *mp, uint32_t src, uint32_t dst,
		      uint32_t tokens)
{
	if (!mp->has_data)
		return;
	for (uint32_t l = 0; l < mp->num_layers; l++)
		for (int kv = 0; kv < 2; kv++) {
			size_t a = row_index(mp, src, l, kv, 0);
			size_t b = row_index(mp, dst, l, kv, 0);

			memcpy(mp->data + b * mp->row_bytes,
			       mp->data + a * mp->row_bytes,
			       (size_t)tokens * mp->row_bytes);
			memcpy(mp->known + b, mp->known + a, tokens);
		}
}

int model_seq_append(struct model_mgr *mm, uint64_t id, uint32_t n,
		     bool null_cow, uint32_t cow_cap, const uint32_t *chosen,
		     struct kvp_copy *cow_out, uint32_t *ncow_out)
{
	struct model_pool *mp;
	struct model_seq *s;
	uint32_t bt, nb, grow, cows = 0, total, last;

	if (!mm || (null_cow && cow_cap))
		return -EINVAL;
	mp = mm->pool;
	bt = mp->block_tokens;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	if (s->tokens > UINT32_MAX - n)
		return -EINVAL;
	total = s->tokens + n;
	nb = blocks_for(total, bt);
	grow = nb - s->nblocks;
	/* A partially filled last block shared with another holder. */
	if (n && s->tokens % bt &&
	    (mp->refs[s->blocks[s->nblocks - 1]] > 1 ||
	     mp->cached[s->blocks[s->nblocks - 1]]))
		cows = 1; /* a cached block is shared with future hits too */
	if (cows && !cow_cap) {
		*ncow_out = 1;
		return -ENOBUFS;
	}
	if (grow + cows > allocatable(mp))
		return -ENOSPC;
	if (!chosen)
		return 0;
	*ncow_out = cows;
	last = s->nblocks - 1;
	/* The copy's block and the new ones are taken before the shared
	 * block is released: none of them can be it. */
	if (cows && !take_chosen(mp, 1, &chosen[last], "kvp_seq_append (copy)"))
		return 0;
	if (!take_chosen(mp, grow, chosen + s->nblocks, "kvp_seq_append"))
		return 0;
	if (cows) {
		uint32_t src = s->blocks[last], dst = chosen[last];

		*cow_out = (struct kvp_copy){
			.src = src, .dst = dst, .tokens = s->tokens % bt};
		data_copy(mp, src, dst, s->tokens % bt);
		s->blocks[last] = dst;
		release(mp, &src, 1);
		mm->st.blocks_released++;
		mm->st.cow_copies++;
	}
	seq_reserve(s, nb);
	memcpy(s->blocks + s->nblocks, chosen + s->nblocks,
	       (size_t)grow * sizeof(*chosen));
	s->nblocks = nb;
	s->tokens = total;
	touch(mm, s);
	mm->st.appends++;
	mm->st.tokens += n;
	mm->st.blocks_allocated += grow + cows;
	return 0;
}

int model_seq_fork(struct model_mgr *mm, uint64_t src, uint64_t dst)
{
	struct model_pool *mp;
	struct model_seq *s, *d;
	uint32_t i;

	if (!mm)
		return -EINVAL;
	mp = mm->pool;
	if (find(mm, dst))
		return -EEXIST;
	s = find(mm, src);
	if (!s)
		return -ENOENT;
	for (i = 0; i < s->nblocks; i++) {
		uint32_t b = s->blocks[i], k = 0;

		/* A block may appear once per table; count repeats anyway. */
		for (uint32_t j = 0; j < s->nblocks; j++)
			k += s->blocks[j] == b;
		if (mp->refs[b] + k > KVP_MAX_REFS)
			return -EOVERFLOW;
	}
	for (i = 0; i < s->nblocks; i++)
		mp->refs[s->blocks[i]]++;
	touch(mm, s);
	/* seq_add may move the array: find src again afterwards. */
	d = seq_add(mm, dst, s->tokens, s->nblocks);
	s = find(mm, src);
	memcpy(d->blocks, s->blocks, (size_t)s->nblocks * sizeof(*d->blocks));
	d->priority = s->priority;
	d->committed = s->committed;
	d->trimmed = s->trimmed;
	touch(mm, d);
	mm->st.forks++;
	return 0;
}

/* kvp_seq_fork_n: kvpool.h's order of errors, then n forks of src with
 * its access moved once (or not, with KVP_FORK_KEEP_SOURCE). */
int model_seq_fork_n(struct model_mgr *mm, uint64_t src,
		     const uint64_t *dsts, uint32_t n, uint32_t flags)
{
	struct model_pool *mp;
	struct model_seq *s, *d;

	if (!mm || !dsts || n == 0 || n > KVP_FORK_N_MAX ||
	    (flags & ~KVP_FORK_KEEP_SOURCE))
		return -EINVAL;
	mp = mm->pool;
	for (uint32_t i = 0; i < n; i++) {
		if (find(mm, dsts[i]))
			return -EEXIST;
		for (uint32_t j = 0; j < i; j++)
			if (dsts[j] == dsts[i])
				return -EEXIST;
	}
	s = find(mm, src);
	if (!s)
		return -ENOENT;
	for (uint32_t i = 0; i < s->nblocks; i++) {
		uint32_t b = s->blocks[i], k = 0;

		for (uint32_t j = 0; j < s->nblocks; j++)
			k += s->blocks[j] == b;
		if (mp->refs[b] + (uint64_t)k * n > KVP_MAX_REFS)
			return -EOVERFLOW;
	}
	for (uint32_t i = 0; i < s->nblocks; i++)
		mp->refs[s->blocks[i]] += n;
	if (!(flags & KVP_FORK_KEEP_SOURCE))
		touch(mm, s);
	for (uint32_t i = 0; i < n; i++) {
		s = find(mm, src);
		d = seq_add(mm, dsts[i], s->tokens, s->nblocks);
		/* seq_add may move the array. */
		s = find(mm, src);
		memcpy(d->blocks, s->blocks,
		       (size_t)s->nblocks * sizeof(*d->blocks));
		d->priority = s->priority;
		d->committed = s->committed;
		d->trimmed = s->trimmed;
		touch(mm, d);
	}
	mm->st.forks += n;
	return 0;
}

int model_seq_free(struct model_mgr *mm, uint64_t id)
{
	struct model_seq *s;

	if (!mm)
		return -EINVAL;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	seq_remove(mm, s);
	return 0;
}

int model_seq_truncate(struct model_mgr *mm, uint64_t id, uint32_t tokens)
{
	struct model_seq *s;
	uint32_t nb;

	if (!mm)
		return -EINVAL;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	if (tokens > s->tokens)
		return -ERANGE;
	nb = blocks_for(tokens, mm->pool->block_tokens);
	release(mm->pool, s->blocks + nb, s->nblocks - nb);
	mm->st.blocks_released += s->nblocks - nb;
	mm->st.tokens -= s->tokens - tokens;
	s->nblocks = nb;
	s->tokens = tokens;
	if (s->committed > tokens / mm->pool->block_tokens)
		s->committed = tokens / mm->pool->block_tokens;
	touch(mm, s);
	return 0;
}

int model_seq_stream_trim(struct model_mgr *mm, uint64_t id, uint32_t sink,
			  uint32_t window, uint32_t *evicted)
{
	struct model_seq *s;
	uint32_t bt, head, tail, gone = 0;

	if (!mm)
		return -EINVAL;
	bt = mm->pool->block_tokens;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	/* Keep blocks [0, head) (the sinks) and [tail, nblocks) (the
	 * window: from the block holding token tokens - window on). */
	head = blocks_for(sink, bt);
	tail = window >= s->tokens ? 0 : (s->tokens - window) / bt;
	if (tail > head) {
		uint32_t n = tail - head;

		release(mm->pool, s->blocks + head, n);
		memmove(s->blocks + head, s->blocks + tail,
			(size_t)(s->nblocks - tail) * sizeof(*s->blocks));
		s->nblocks -= n;
		s->trimmed = true; /* the table no longer follows the chain */
		gone = n * bt;
		s->tokens -= gone;
		mm->st.blocks_released += n;
		mm->st.tokens -= gone;
	}
	touch(mm, s);
	*evicted = gone;
	return 0;
}

int model_seq_set_priority(struct model_mgr *mm, uint64_t id, int32_t prio)
{
	struct model_seq *s;

	if (!mm)
		return -EINVAL;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	s->priority = prio;
	return 0;
}

int model_seq_info(const struct model_mgr *mm, uint64_t id, bool null_info,
		   struct kvp_seq_info *info)
{
	const struct model_seq *s;

	if (!mm || null_info)
		return -EINVAL;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	info->num_tokens = s->tokens;
	info->num_blocks = s->nblocks;
	info->last_access = s->last_access; /* the model's clock */
	info->access_count = s->access_count;
	info->priority = s->priority;
	return 0;
}

int model_seq_blocks(const struct model_mgr *mm, uint64_t id, bool null_ids,
		     uint32_t cap, bool null_n, uint32_t *ids, uint32_t *n)
{
	const struct model_seq *s;

	if (!mm || null_n || (null_ids && cap))
		return -EINVAL;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	*n = s->nblocks;
	if (s->nblocks > cap)
		return -ENOBUFS;
	memcpy(ids, s->blocks, (size_t)s->nblocks * sizeof(*ids));
	return 0;
}

/* ------------------------------------------------------------ prefix */

/* The block m caches under h, or UINT32_MAX. */
static uint32_t lookup(const struct model_mgr *mm, const struct kvp_hash *h)
{
	const struct model_pool *mp = mm->pool;

	for (uint32_t b = 0; b < mp->num_blocks; b++)
		if (mp->cached[b] && mp->owner[b] == mm &&
		    !memcmp(&mp->hash[b], h, sizeof(*h)))
			return b;
	return UINT32_MAX;
}

int model_prefix_match(const struct model_mgr *mm,
		       const struct kvp_hash *hashes, uint32_t nhashes,
		       bool null_hashes, bool null_out, uint32_t *cached)
{
	uint32_t n = 0;

	if (!mm || (null_hashes && nhashes) || null_out ||
	    !(mm->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	while (n < nhashes && lookup(mm, &hashes[n]) != UINT32_MAX)
		n++;
	*cached = n;
	return 0;
}

int model_seq_create_cached(struct model_mgr *mm, uint64_t id,
			    const struct kvp_hash *hashes, uint32_t nhashes,
			    bool null_hashes, uint32_t tokens,
			    const uint32_t *chosen, uint32_t *cached_out)
{
	struct model_pool *mp;
	struct model_seq *s;
	uint32_t bt, nb, limit, hits = 0, revived = 0, revived_pins = 0,
		 hit[MODEL_MAX_HITS];

	if (!mm || (null_hashes && nhashes) || !(mm->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	mp = mm->pool;
	bt = mp->block_tokens;
	nb = blocks_for(tokens, bt);
	if (find(mm, id))
		return -EEXIST;
	if (nb > mp->num_blocks)
		return -ENOSPC;
	/* The last token is always computed: at most (tokens - 1) / bt. */
	limit = tokens ? (tokens - 1) / bt : 0;
	if (limit > nhashes)
		limit = nhashes;
	for (; hits < limit && hits < MODEL_MAX_HITS; hits++) {
		uint32_t b = lookup(mm, &hashes[hits]);

		if (b == UINT32_MAX || mp->refs[b] == KVP_MAX_REFS)
			break;
		hit[hits] = b;
		revived += !mp->refs[b];
		revived_pins +=
			!mp->refs[b] && level_of(mp, b) == KVP_RETAIN_PIN;
	}
	/* A request never evicts its own hits (nor a pin). */
	if (nb - hits > allocatable(mp) - revived + revived_pins)
		return -ENOSPC;
	if (!chosen)
		return 0;
	/* A revived block is allocated again (allocs - frees = used). */
	for (uint32_t i = 0; i < hits; i++) {
		if (!mp->refs[hit[i]]++) {
			mp->free--;
			mp->allocs++;
		}
	}
	if (!take_chosen(mp, nb - hits, chosen + hits,
			 "kvp_seq_create_cached"))
		return 0;
	s = seq_add(mm, id, tokens, nb);
	memcpy(s->blocks, hit, (size_t)hits * sizeof(*hit));
	memcpy(s->blocks + hits, chosen + hits,
	       (size_t)(nb - hits) * sizeof(*chosen));
	s->committed = hits;
	touch(mm, s);
	mm->st.seq_creates++;
	mm->st.blocks_allocated += nb - hits;
	mm->st.prefix_queries += tokens;
	mm->st.prefix_hits += (uint64_t)hits * bt;
	*cached_out = hits * bt;
	return 0;
}

int model_seq_commit(struct model_mgr *mm, uint64_t id,
		     const struct kvp_hash *hashes, uint32_t nhashes,
		     bool null_hashes)
{
	return model_seq_commit_retained(mm, id, hashes, nhashes, null_hashes,
					 NULL, 0, false, NULL);
}

int model_manager_pins_rc(const struct kvp_manager_config *cfg,
			  uint32_t pool_blocks)
{
	return cfg->max_pinned > pool_blocks ? -EINVAL : 0;
}

#define RETAIN_CLOCK_END ((1ull << 56) - 1)

/* The expiry of a priority given now for `duration` ticks (0: never,
 * also past the clock's end). */
static uint64_t expiry_of(const struct model_mgr *mm, uint64_t duration)
{
	return duration && duration < RETAIN_CLOCK_END - mm->clock
		       ? mm->clock + duration
		       : 0;
}

/* The retention ranges give block i: the highest priority of those that
 * cover all its tokens, the longest duration among those (0 longest). */
static void block_retention(const struct model_mgr *mm, uint32_t i,
			    const struct kvp_retention *rg, uint32_t nrg,
			    uint32_t *prio, uint64_t *exp)
{
	uint64_t first = (uint64_t)i * mm->pool->block_tokens,
		 end = first + mm->pool->block_tokens, dur = 0;
	bool any = false;

	*prio = KVP_RETAIN_DEFAULT;
	for (uint32_t r = 0; r < nrg; r++) {
		uint64_t rend = rg[r].num_tokens ? (uint64_t)rg[r].first_token +
							   rg[r].num_tokens
						 : UINT64_MAX;

		if (rg[r].first_token > first || rend < end)
			continue;
		if (!any || rg[r].priority > *prio) {
			*prio = rg[r].priority;
			dur = rg[r].duration;
		} else if (rg[r].priority == *prio && dur &&
			   (!rg[r].duration || rg[r].duration > dur)) {
			dur = rg[r].duration;
		}
		any = true;
	}
	*exp = *prio == KVP_RETAIN_DEFAULT ? 0 : expiry_of(mm, dur);
}

/* Whether one more pin fits under mm's cap (then counted). */
static bool pin_admit(struct model_mgr *mm, uint32_t *unpinned)
{
	if (mm->pinned < mm->max_pinned) {
		mm->pinned++;
		return true;
	}
	(*unpinned)++;
	return false;
}

/* A commit's raise of cached block b (held by the committing sequence)
 * to prio until exp: only upwards, an equal priority's expiry only
 * later (or none). */
static void raise_block(struct model_mgr *mm, uint32_t b, uint32_t prio,
			uint64_t exp, uint32_t *unpinned)
{
	struct model_pool *mp = mm->pool;
	uint32_t cur, old = mp->prio[b];
	uint64_t nexp = exp;

	if (prio == KVP_RETAIN_DEFAULT || !mp->cached[b] || mp->owner[b] != mm)
		return;
	cur = level_of(mp, b);
	if (prio < cur)
		return;
	if (prio == cur) {
		uint64_t e = mp->expires[b];

		nexp = e && exp ? (e > exp ? e : exp) : 0;
		if (mp->prio[b] == prio && mp->expires[b] == nexp)
			return;
	}
	if (prio == KVP_RETAIN_PIN && old != KVP_RETAIN_PIN &&
	    !pin_admit(mm, unpinned)) {
		if (cur >= KVP_RETAIN_MAX)
			return;
		prio = KVP_RETAIN_MAX;
		nexp = exp;
	}
	if (old == KVP_RETAIN_PIN && prio != KVP_RETAIN_PIN)
		mm->pinned--;
	mp->prio[b] = (uint8_t)prio;
	mp->expires[b] = nexp;
}

int model_seq_commit_retained(struct model_mgr *mm, uint64_t id,
			      const struct kvp_hash *hashes, uint32_t nhashes,
			      bool null_hashes,
			      const struct kvp_retention *ranges,
			      uint32_t nranges, bool null_ranges,
			      uint32_t *unpinned_out)
{
	struct model_pool *mp;
	struct model_seq *s;
	uint32_t upto, i, unpinned = 0, prio;
	uint64_t exp;
	int added = 0;

	if (unpinned_out)
		*unpinned_out = 0;
	if (!mm || (null_hashes && nhashes) ||
	    !(mm->flags & KVP_PREFIX_CACHE) || (null_ranges && nranges))
		return -EINVAL;
	for (uint32_t r = 0; r < nranges; r++)
		if (ranges[r].priority > KVP_RETAIN_PIN)
			return -EINVAL;
	mp = mm->pool;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	if (s->trimmed)
		return -EINVAL;
	upto = s->tokens / mp->block_tokens; /* full blocks */
	if (upto > nhashes)
		upto = nhashes;
	for (i = 0; nranges && i < s->committed && i < upto; i++) {
		block_retention(mm, i, ranges, nranges, &prio, &exp);
		raise_block(mm, s->blocks[i], prio, exp, &unpinned);
	}
	for (i = s->committed; i < upto; i++) {
		uint32_t b = s->blocks[i];

		block_retention(mm, i, ranges, nranges, &prio, &exp);
		if (mp->cached[b] || lookup(mm, &hashes[i]) != UINT32_MAX) {
			raise_block(mm, b, prio, exp, &unpinned);
			continue;
		}
		if (prio == KVP_RETAIN_PIN && !pin_admit(mm, &unpinned))
			prio = KVP_RETAIN_MAX;
		mp->cached[b] = true;
		mp->owner[b] = mm;
		mp->hash[b] = hashes[i];
		mp->prio[b] = (uint8_t)prio;
		mp->expires[b] = exp;
		count_cached(mm, 1);
		added++;
		emit(mp, mm, KVP_EVENT_STORED, &hashes[i],
		     i ? &hashes[i - 1] : NULL);
	}
	if (s->committed < upto)
		s->committed = upto;
	mm->st.prefix_commits += (uint64_t)added;
	if (unpinned_out)
		*unpinned_out = unpinned;
	return added;
}

int model_manager_tick(struct model_mgr *mm, uint64_t steps, uint64_t *now)
{
	struct model_pool *mp;

	if (!mm || !(mm->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	if (steps > RETAIN_CLOCK_END - mm->clock)
		return -ERANGE;
	mm->clock += steps;
	if (now)
		*now = mm->clock;
	/* Idle blocks whose priority expired join the default priority as
	 * if just released: lowest priority first, then least recently
	 * freed (the library's list order). */
	mp = mm->pool;
	for (;;) {
		uint32_t next = UINT32_MAX;

		for (uint32_t b = 0; b < mp->num_blocks; b++)
			if (mp->cached[b] && mp->owner[b] == mm &&
			    !mp->refs[b] && mp->prio[b] &&
			    level_of(mp, b) == KVP_RETAIN_DEFAULT &&
			    (next == UINT32_MAX || mp->prio[b] < mp->prio[next] ||
			     (mp->prio[b] == mp->prio[next] &&
			      mp->freed_at[b] < mp->freed_at[next])))
				next = b;
		if (next == UINT32_MAX)
			break;
		retain_clear(mp, next);
		mp->freed_at[next] = ++mp->release_tick;
	}
	return 0;
}

int model_prefix_retention(const struct model_mgr *mm, const struct kvp_hash *h,
			   uint32_t *prio, uint64_t *expires)
{
	uint32_t b;

	if (!mm || !h || !prio || !expires || !(mm->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	b = lookup(mm, h);
	if (b == UINT32_MAX)
		return -ENOENT;
	*prio = level_of(mm->pool, b);
	*expires = *prio == KVP_RETAIN_DEFAULT ? 0 : mm->pool->expires[b];
	return 0;
}

int model_prefix_reset(struct model_mgr *mm)
{
	struct model_pool *mp;

	if (!mm || !(mm->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	mp = mm->pool;
	for (uint32_t b = 0; b < mp->num_blocks; b++)
		if (mp->cached[b] && mp->owner[b] == mm && mp->refs[b])
			return -EBUSY;
	for (uint32_t b = 0; b < mp->num_blocks; b++)
		if (mp->cached[b] && mp->owner[b] == mm)
			uncache(mp, b); /* free already: now never-cached */
	emit(mp, mm, KVP_EVENT_CLEARED, NULL, NULL);
	return 0;
}

/* ------------------------------------------------------------ eviction */

/*
 * fraction * total blocks, as kvpool.h words it: "0.01f of 100 blocks is
 * 1 block" (vLLM's double arithmetic), so a float fraction is read as the
 * decimal it was written as: scaled up by two float ulps.
 */
static double frac_of(float f, uint64_t total)
{
	return (double)f * (double)total * (1.0 + 0x1p-22);
}

int model_admit(const struct model_mgr *mm, uint32_t tokens)
{
	uint64_t total, free_blocks, need, wm;

	if (!mm)
		return -EINVAL;
	total = mm->pool->num_blocks;
	free_blocks = mm->pool->free;
	need = blocks_for(tokens, mm->pool->block_tokens);
	wm = (uint64_t)frac_of(mm->watermark, total);
	if (total < need + wm)
		return KVP_ADMIT_NEVER;
	return free_blocks >= need + wm ? KVP_ADMIT_OK : KVP_ADMIT_LATER;
}

/* Whether a goes before b under the policy; ties: least recently used. */
static bool evict_before(enum kvp_policy p, const struct model_seq *a,
			 const struct model_seq *b)
{
	switch (p) {
	case KVP_EVICT_LFU:
		if (a->access_count != b->access_count)
			return a->access_count < b->access_count;
		break;
	case KVP_EVICT_LONGEST:
		if (a->tokens != b->tokens)
			return a->tokens > b->tokens;
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

/* The sequence the policy preempts first, or NULL. */
static struct model_seq *victim_of(const struct model_mgr *mm)
{
	struct model_seq *best = NULL;

	for (uint32_t i = 0; i < mm->nseqs; i++)
		if (!best || evict_before(mm->policy, &mm->seqs[i], best))
			best = &mm->seqs[i];
	return best;
}

static int evict_one(struct model_mgr *mm, uint64_t *victim)
{
	struct model_seq *best = victim_of(mm);

	if (!best)
		return -ENOENT;
	*victim = best->id;
	seq_remove(mm, best);
	mm->st.evictions++;
	return 0;
}

int model_evict(struct model_mgr *mm, uint64_t *victim)
{
	if (!mm)
		return -EINVAL;
	return evict_one(mm, victim);
}

int model_evict_peek(const struct model_mgr *mm, bool null_victim,
		     uint64_t *victim)
{
	const struct model_seq *best;

	if (!mm || null_victim)
		return -EINVAL;
	best = victim_of(mm);
	if (!best)
		return -ENOENT;
	*victim = best->id;
	return 0;
}

int model_set_policy(struct model_mgr *mm, int policy)
{
	if (!mm || policy < 0 || policy > KVP_EVICT_PRIORITY)
		return -EINVAL;
	mm->policy = (enum kvp_policy)policy;
	return 0;
}

int model_seqs(const struct model_mgr *mm, bool null_ids, uint32_t cap,
	       bool null_n, uint64_t *ids, uint32_t *n)
{
	if (!mm || null_n || (null_ids && cap))
		return -EINVAL;
	*n = mm->nseqs;
	if (mm->nseqs > cap)
		return -ENOBUFS;
	for (uint32_t i = 0; i < mm->nseqs; i++)
		ids[i] = mm->seqs[i].id;
	return 0;
}

int model_seq_reserve(const struct model_mgr *mm, uint64_t id,
		      uint32_t tokens)
{
	if (!mm)
		return -EINVAL;
	if (!find(mm, id))
		return -ENOENT;
	if (blocks_for(tokens, mm->pool->block_tokens) > mm->pool->num_blocks)
		return -ENOSPC;
	return 0;
}

int model_evict_until(struct model_mgr *mm, float target, bool null_victims,
		      uint32_t cap, bool null_n, uint64_t *victims,
		      uint32_t *n)
{
	uint64_t total;

	if (!mm || null_n || (null_victims && cap) || isnan(target) ||
	    target > 1.0f)
		return -EINVAL;
	if (target < 0)
		target = mm->eviction_threshold;
	total = mm->pool->num_blocks;
	*n = 0;
	for (;;) {
		uint64_t used = total - mm->pool->free;

		if ((double)used <= frac_of(target, total))
			return 0;
		if (*n == cap || evict_one(mm, &victims[*n]) != 0)
			return KVP_EVICT_PARTIAL;
		(*n)++;
	}
}

/* ------------------------------------------------------------ exports */

int model_export_block_table(const struct model_mgr *mm, const uint64_t *seqs,
			     uint32_t nseq, bool null_seqs, bool null_table,
			     int32_t *table, uint32_t stride, int32_t pad)
{
	uint32_t longest = 0, i, j;

	if (!mm || (null_seqs && nseq))
		return -EINVAL;
	for (i = 0; i < nseq; i++) {
		const struct model_seq *s = find(mm, seqs[i]);

		if (!s)
			return -ENOENT;
		if (!null_table && s->nblocks > stride)
			return -ENOBUFS;
		if (s->nblocks > longest)
			longest = s->nblocks;
	}
	if (null_table)
		return (int)longest;
	for (i = 0; i < nseq; i++) {
		const struct model_seq *s = find(mm, seqs[i]);
		int32_t *row = table + (size_t)i * stride;

		for (j = 0; j < s->nblocks; j++)
			row[j] = (int32_t)s->blocks[j];
		for (; j < stride; j++)
			row[j] = pad;
	}
	return 0;
}

int model_export_csr(const struct model_mgr *mm, const uint64_t *seqs,
		     uint32_t nseq, bool null_seqs, bool null_indptr,
		     bool null_indices, bool null_lpl, int32_t *indptr,
		     int32_t *indices, uint32_t cap, int32_t *lpl)
{
	uint64_t total = 0;
	uint32_t bt, i, at = 0;

	if (!mm || (null_seqs && nseq))
		return -EINVAL;
	if (!null_indices && (null_indptr || (null_lpl && nseq)))
		return -EINVAL;
	bt = mm->pool->block_tokens;
	for (i = 0; i < nseq; i++) {
		const struct model_seq *s = find(mm, seqs[i]);

		if (!s)
			return -ENOENT;
		total += s->nblocks;
		if (!null_indices && total > cap)
			return -ENOBUFS;
	}
	if (null_indices)
		return total > INT32_MAX ? -EOVERFLOW : (int)total;
	indptr[0] = 0;
	for (i = 0; i < nseq; i++) {
		const struct model_seq *s = find(mm, seqs[i]);

		for (uint32_t j = 0; j < s->nblocks; j++)
			indices[at + j] = (int32_t)s->blocks[j];
		at += s->nblocks;
		indptr[i + 1] = (int32_t)at;
		lpl[i] = s->tokens ? (int32_t)(s->tokens - (s->nblocks - 1) * bt)
				   : 0;
	}
	return 0;
}

int model_export_slot_mapping(const struct model_mgr *mm, uint64_t id,
			      uint32_t first, uint32_t n, bool null_slots,
			      int64_t *slots)
{
	const struct model_seq *s;
	uint32_t bt;

	if (!mm || (null_slots && n))
		return -EINVAL;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	if ((uint64_t)first + n > s->tokens)
		return -ERANGE;
	bt = mm->pool->block_tokens;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t pos = first + i;

		slots[i] = (int64_t)s->blocks[pos / bt] * bt + pos % bt;
	}
	return 0;
}

/* ------------------------------------------------------------ KV data */

static int data_args(const struct model_mgr *mm, uint32_t layer, bool null_buf)
{
	if (!mm || null_buf || !mm->pool->has_data)
		return -EINVAL;
	if (layer >= mm->pool->num_layers)
		return -EINVAL;
	return 0;
}

/* The block holding token pos of sequence id; -ENOENT, -ERANGE. */
static int locate(const struct model_mgr *mm, uint64_t id, uint32_t pos,
		  uint32_t *block)
{
	const struct model_seq *s = find(mm, id);

	if (!s)
		return -ENOENT;
	if (pos >= s->tokens)
		return -ERANGE;
	*block = s->blocks[pos / mm->pool->block_tokens];
	return 0;
}

int model_seq_write(struct model_mgr *mm, uint64_t id, uint32_t pos,
		    uint32_t layer, const void *k, const void *v)
{
	struct model_pool *mp;
	uint32_t b;
	int err = data_args(mm, layer, !k || !v);

	if (err)
		return err;
	mp = mm->pool;
	err = locate(mm, id, pos, &b);
	if (err)
		return err;
	if (mp->refs[b] > 1 || mp->cached[b])
		return -EBUSY;
	for (int kv = 0; kv < 2; kv++) {
		size_t r = row_index(mp, b, layer, kv, pos % mp->block_tokens);

		memcpy(mp->data + r * mp->row_bytes, kv ? v : k, mp->row_bytes);
		mp->known[r] = 1;
	}
	return 0;
}

int model_seq_read(const struct model_mgr *mm, uint64_t id, uint32_t pos,
		   uint32_t layer, bool null_buf, void *k, void *v,
		   bool known[2])
{
	const struct model_pool *mp;
	uint32_t b;
	int err = data_args(mm, layer, null_buf);

	if (err)
		return err;
	mp = mm->pool;
	err = locate(mm, id, pos, &b);
	if (err)
		return err;
	for (int kv = 0; kv < 2; kv++) {
		size_t r = row_index(mp, b, layer, kv, pos % mp->block_tokens);

		memcpy(kv ? v : k, mp->data + r * mp->row_bytes,
		       mp->row_bytes);
		known[kv] = mp->known[r];
	}
	return 0;
}

int model_seq_gather(const struct model_mgr *mm, uint64_t id, uint32_t layer,
		     bool null_buf, void *k, void *v, bool *known_rows)
{
	const struct model_pool *mp;
	const struct model_seq *s;
	int err = data_args(mm, layer, null_buf);

	if (err)
		return err;
	mp = mm->pool;
	s = find(mm, id);
	if (!s)
		return -ENOENT;
	for (uint32_t pos = 0; pos < s->tokens; pos++) {
		uint32_t b = s->blocks[pos / mp->block_tokens];
		uint32_t t = pos % mp->block_tokens;
		size_t rk = row_index(mp, b, layer, 0, t);
		size_t rv = row_index(mp, b, layer, 1, t);

		memcpy((uint8_t *)k + (size_t)pos * mp->row_bytes,
		       mp->data + rk * mp->row_bytes, mp->row_bytes);
		memcpy((uint8_t *)v + (size_t)pos * mp->row_bytes,
		       mp->data + rv * mp->row_bytes, mp->row_bytes);
		known_rows[pos] = mp->known[rk] && mp->known[rv];
	}
	return 0;
}
