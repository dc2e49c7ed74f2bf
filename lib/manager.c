/* SPDX-License-Identifier: MIT */
/*
 * manager.c - managers: kvp_manager_create and _destroy, statistics
 * (kvp_manager_stats, kvp_stats_add), dump
 * and kvp_manager_check (layer 10, doc/architecture.md "Layers": the top
 * of the sequence layers, over seq.c, seqmem.c, seqmap.c, registry.c,
 * mgrstat.c, prefix.c, prefix_pool.c and the pool's files, pool*.c).
 *
 * Owns struct kvp_manager (manager.h): its configuration, read-only after
 * creation; the parts it embeds belong to their own files.  Creation and
 * destruction are not concurrent with any other call on the manager.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "error.h"
#include "manager.h"
#include "prefix.h"
#include "rcu.h"
#include "seq.h"

#define KVP_DEFAULT_EVICTION_THRESHOLD 0.9f
#define KVP_DEFAULT_WATERMARK 0.01f
#define KVP_MANAGER_KNOWN_FLAGS                                              \
	(KVP_PREFIX_CACHE | KVP_EXACT_LIMITS | KVP_EMIT_CACHED_EVENTS)

/* ------------------------------------------------------------------ */
/* Managers                                                            */
/* ------------------------------------------------------------------ */

/*
 * The length of the UTF-8 character at s[0..n), or 0 if it is not one:
 * strictly (RFC 3629), so no overlong form, no surrogate (U+D800 to
 * U+DFFF), nothing above U+10FFFF, no truncated sequence.  *cp gets its
 * code point.
 */
static size_t utf8_char(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len;
	uint32_t c = s[0], min;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0; /* a continuation byte, 0xc0, 0xc1 or over 0xf4 */
	c &= 0x7fu >> len; /* the lead byte's payload bits */
	min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

/* A metrics label value: 1 to KVP_NAME_MAX - 1 bytes of UTF-8 (strict,
 * as utf8_char), no control characters (C0, DEL or C1: a scrape would
 * have to escape them or could not carry them). */
static int validate_name(const char *name)
{
	const unsigned char *s = (const unsigned char *)name;
	size_t n = strnlen(name, KVP_NAME_MAX);

	if (n == 0 || n == KVP_NAME_MAX)
		return -EINVAL;
	for (size_t i = 0, len; i < n; i += len) {
		uint32_t cp;

		len = utf8_char(s + i, n - i, &cp);
		if (len == 0 || cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			return -EINVAL;
	}
	return 0;
}

static int validate_manager_config(const struct kvp_manager_config *cfg)
{
	if (!cfg->pool)
		return -EINVAL;
	if ((unsigned)cfg->policy > KVP_EVICT_PRIORITY)
		return -EINVAL;
	if (isnan(cfg->eviction_threshold) || cfg->eviction_threshold < 0 ||
	    cfg->eviction_threshold > 1)
		return -EINVAL;
	if (isnan(cfg->watermark) || cfg->watermark < 0 || cfg->watermark >= 1)
		return -EINVAL;
	if (cfg->flags & ~KVP_MANAGER_KNOWN_FLAGS)
		return -EINVAL;
	/* Cached-block events need a cache. */
	if ((cfg->flags & KVP_EMIT_CACHED_EVENTS) &&
	    !(cfg->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	if (cfg->max_pinned > cfg->pool->num_blocks)
		return -EINVAL;
	return cfg->name ? validate_name(cfg->name) : 0;
}

KVP_API int kvp_manager_create(const struct kvp_manager_config *cfg,
			       struct kvp_manager **out)
{
	struct kvp_manager *m;
	struct kvp_pool *pool;
	int err;

	if (!cfg || !out)
		return -EINVAL;
	err = validate_manager_config(cfg);
	if (err)
		return err;
	m = kvp_malloc_aligned(KVP_CACHELINE, sizeof(*m));
	if (!m)
		return -ENOMEM;
	memset(m, 0, sizeof(*m));
	err = seqmap_init(&m->map);
	if (err) {
		kvp_free_aligned(m, KVP_CACHELINE, sizeof(*m));
		return err;
	}
	pool = cfg->pool;
	m->uid = kvp_next_uid();
	if (cfg->name)
		memcpy(m->name, cfg->name, strlen(cfg->name) + 1);
	else
		snprintf(m->name, sizeof(m->name), "%" PRIu64, m->uid);
	seqmem_init(m);
	m->pool = kvp_pool_ref(pool);
	m->block_tokens = pool->block_tokens;
	m->bt_shift = (m->block_tokens & (m->block_tokens - 1))
			      ? 32
			      : (uint32_t)__builtin_ctz(m->block_tokens);
	atomic_init(&m->policy, cfg->policy);
	m->eviction_threshold = cfg->eviction_threshold;
	m->watermark = cfg->watermark;
	if (!(cfg->flags & KVP_EXACT_LIMITS)) {
		if (m->eviction_threshold == 0)
			m->eviction_threshold = KVP_DEFAULT_EVICTION_THRESHOLD;
		if (m->watermark == 0)
			m->watermark = KVP_DEFAULT_WATERMARK;
	}
	m->flags = cfg->flags;
	if (m->flags & KVP_PREFIX_CACHE) {
		m->max_pinned = cfg->max_pinned ? cfg->max_pinned
						: pool->num_blocks / 4;
		err = prefix_cache_init(&m->prefix, pool, m->max_pinned);
	}
	if (err) {
		seqmap_fini(&m->map);
		kvp_pool_unref(pool);
		kvp_free_aligned(m, KVP_CACHELINE, sizeof(*m));
		return err;
	}
	registry_add(m);
	*out = m;
	return 0;
}

KVP_API void kvp_manager_destroy(struct kvp_manager *m)
{
	struct seqmap_iter iter;
	struct kvp_seq *s;
	struct kvp_pool *pool;

	if (!m)
		return;
	/* From now on no thread hands stashed structs back to m, and no
	 * reclaim of m starts. */
	seqmem_close(m);
	/* No other thread uses m: no rebuild can be under way, and the
	 * removals inside this read-side section never wait for one. */
	kvp_rcu_read_lock();
	for (s = seqmap_first(&m->map, &iter); s;
	     s = seqmap_next(&m->map, &iter)) {
		seq_lock(s);
		if (atomic_load_explicit(&s->dead, memory_order_relaxed))
			seq_unlock(s);
		else
			seq_remove_locked(m, s);
	}
	kvp_rcu_read_unlock();
	/* Its cached blocks: evictable ones back to the free lists. */
	prefix_cache_fini(&m->prefix);
	/* Every removed struct must be recycled before the map goes. */
	seqmem_fini(m);
	seqmap_fini(&m->map);

	pool = m->pool;
	registry_del(m);
	kvp_free_aligned(m, KVP_CACHELINE, sizeof(*m));
	kvp_pool_unref(pool);
}

/* Hits over queries, 0 with no queries. */
static double hit_rate(const struct kvp_stats *st)
{
	return st->prefix_queries ? (double)st->prefix_hits /
					    (double)st->prefix_queries
				  : 0.0;
}

KVP_API void kvp_manager_stats(struct kvp_manager *m, struct kvp_stats *st)
{
	uint64_t used, total, sum[STAT_FIELDS];

	if (!m || !st)
		return;
	memset(st, 0, sizeof(*st));
	mgr_stat_sum(m->shards, sum);
	st->sequences = STAT_OF(sum, sequences);
	st->tokens = STAT_OF(sum, tokens);
	st->seq_creates = STAT_OF(sum, creates);
	st->seq_frees = STAT_OF(sum, frees);
	st->appends = STAT_OF(sum, appends);
	st->forks = STAT_OF(sum, forks);
	st->evictions = STAT_OF(sum, evictions);
	st->cow_copies = STAT_OF(sum, cows);
	st->blocks_allocated = STAT_OF(sum, blocks_allocated);
	st->blocks_released = STAT_OF(sum, blocks_released);
	used = pool_used_estimate(m->pool);
	total = m->pool->num_blocks;
	st->blocks_used = used;
	st->blocks_total = total;
	st->bytes_per_block = m->pool->block_bytes;
	st->prefix_queries = STAT_OF(sum, prefix_queries);
	st->prefix_hits = STAT_OF(sum, prefix_hits);
	st->prefix_hit_rate = hit_rate(st);
	prefix_cache_stats(&m->prefix, st);
	st->prefix_commits = STAT_OF(sum, prefix_commits);
	st->prefix_uncached = STAT_OF(sum, prefix_uncached);
}

KVP_API uint64_t kvp_manager_id(const struct kvp_manager *m)
{
	return m ? m->uid : 0;
}

KVP_API const char *kvp_manager_name(const struct kvp_manager *m)
{
	return m ? m->name : NULL;
}

KVP_API int kvp_manager_get_config(const struct kvp_manager *m,
				   struct kvp_manager_config *out)
{
	if (!m || !out)
		return -EINVAL;
	*out = (struct kvp_manager_config){
		.pool = m->pool,
		.policy = (enum kvp_policy)atomic_load_explicit(
			&m->policy, memory_order_relaxed),
		.eviction_threshold = m->eviction_threshold,
		.watermark = m->watermark,
		.flags = m->flags,
		.max_pinned = m->max_pinned,
		.name = m->name,
	};
	return 0;
}

KVP_API int kvp_manager_set_policy(struct kvp_manager *m,
				   enum kvp_policy policy)
{
	if (!m || (unsigned)policy > KVP_EVICT_PRIORITY)
		return -EINVAL;
	atomic_store_explicit(&m->policy, policy, memory_order_relaxed);
	return 0;
}

/*
 * A walk of the map inside one read-side section: every sequence alive
 * throughout is seen once (seqmap.h's promise for a walk), and a struct
 * that is dead (being created, or freed) is skipped.  The id comes from
 * the map's slot, not the struct: a freed struct may be reused for
 * another id while the walk reads it.
 */
KVP_API int kvp_manager_seqs(struct kvp_manager *m, uint64_t *ids,
			     uint32_t cap, uint32_t *n)
{
	struct seqmap_iter iter;
	struct kvp_seq *s;
	uint64_t seen = 0;

	if (!m || !n || (!ids && cap))
		return -EINVAL;
	kvp_rcu_read_lock();
	for (s = seqmap_first(&m->map, &iter); s;
	     s = seqmap_next(&m->map, &iter)) {
		/* Relaxed: a listing is advice, as the id read with it. */
		if (atomic_load_explicit(&s->dead, memory_order_relaxed))
			continue;
		if (seen < cap)
			ids[seen] = seqmap_iter_key(&iter);
		seen++;
	}
	kvp_rcu_read_unlock();
	*n = seen > UINT32_MAX ? UINT32_MAX : (uint32_t)seen;
	if (seen > cap) {
		kvp_note_buffer(seen, cap);
		return -ENOBUFS;
	}
	return 0;
}

struct kvp_pool *manager_pool(const struct kvp_manager *m)
{
	return m->pool;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

KVP_API void kvp_stats_add(struct kvp_stats *acc, const struct kvp_stats *st)
{
	if (!acc || !st)
		return;
	acc->sequences += st->sequences;
	acc->tokens += st->tokens;
	acc->seq_creates += st->seq_creates;
	acc->seq_frees += st->seq_frees;
	acc->appends += st->appends;
	acc->forks += st->forks;
	acc->evictions += st->evictions;
	acc->cow_copies += st->cow_copies;
	acc->blocks_allocated += st->blocks_allocated;
	acc->blocks_released += st->blocks_released;
	/* The pool's values: the same pool seen by each of its managers. */
	acc->blocks_used = max_u64(acc->blocks_used, st->blocks_used);
	acc->blocks_total = max_u64(acc->blocks_total, st->blocks_total);
	acc->bytes_per_block =
		max_u64(acc->bytes_per_block, st->bytes_per_block);
	acc->prefix_queries += st->prefix_queries;
	acc->prefix_hits += st->prefix_hits;
	acc->prefix_hit_rate = hit_rate(acc);
	acc->prefix_cached_blocks += st->prefix_cached_blocks;
	acc->prefix_commits += st->prefix_commits;
	acc->prefix_evictions += st->prefix_evictions;
	acc->prefix_pinned += st->prefix_pinned;
	acc->retention_clock =
		max_u64(acc->retention_clock, st->retention_clock);
	acc->prefix_uncached += st->prefix_uncached;
	acc->events += st->events;
}

KVP_API int kvp_manager_dump(struct kvp_manager *m, FILE *f)
{
	struct kvp_stats st;
	uint64_t held, returned;
	double pct;

	if (!m || !f)
		return -EINVAL;
	kvp_manager_stats(m, &st);
	pct = st.blocks_total ? 100.0 * (double)st.blocks_used /
					(double)st.blocks_total
			      : 0.0;
	fprintf(f,
		"kvpool manager %p (pool %p, %" PRIu32 " tokens/block)\n"
		"  blocks:     %" PRIu64 " used / %" PRIu64 " total (%.1f%%)\n"
		"  memory:     %" PRIu64 " bytes used of %" PRIu64
		" (%" PRIu64 " per block)\n"
		"  sequences:  %" PRIu64 " live, %" PRIu64 " tokens\n"
		"  created:    %" PRIu64 ", freed %" PRIu64 ", evicted %" PRIu64
		"\n"
		"  appends:    %" PRIu64 ", forks %" PRIu64
		", copy-on-write copies %" PRIu64 "\n"
		"  blocks:     %" PRIu64 " allocated, %" PRIu64
		" released by this manager\n",
		(void *)m, (void *)m->pool, m->block_tokens, st.blocks_used,
		st.blocks_total, pct, st.blocks_used * st.bytes_per_block,
		st.blocks_total * st.bytes_per_block, st.bytes_per_block,
		st.sequences, st.tokens, st.seq_creates, st.seq_frees,
		st.evictions, st.appends, st.forks, st.cow_copies,
		st.blocks_allocated, st.blocks_released);
	seqmem_counts(m, &held, &returned);
	fprintf(f,
		"  slabs:      %" PRIu64 " held, %" PRIu64
		" returned (of %u sequence structs each)\n",
		held, returned, (unsigned)KVP_SEQ_SLAB);
	if (m->flags & KVP_PREFIX_CACHE)
		fprintf(f,
			"  prefix:     %" PRIu64 " of %" PRIu64
			" tokens hit (%.1f%%), %" PRIu64
			" blocks cached, %" PRIu64 " committed, %" PRIu64
			" evicted\n",
			st.prefix_hits, st.prefix_queries,
			100.0 * st.prefix_hit_rate, st.prefix_cached_blocks,
			st.prefix_commits, st.prefix_evictions);
	return ferror(f) ? -EIO : 0;
}

/* Live sequences of m, one at a time, for kvp_manager_check (quiescent). */
#define for_each_live_seq(m, iter, s)                                        \
	for ((s) = seqmap_first(&(m)->map, &(iter)); (s);                    \
	     (s) = seqmap_next(&(m)->map, &(iter)))                          \
		if (!atomic_load_explicit(&(s)->dead, memory_order_relaxed))

/* kvp_manager_check: one sequence's table against its length and the
 * pool's range; 0 or -EFAULT. */
static int check_seq_table(struct kvp_manager *m, struct kvp_seq *s)
{
	uint32_t tokens = seq_tokens(s), nb = btable_len(&s->table);
	int err = 0;

	if (nb != blocks_for(tokens, m->block_tokens) ||
	    !btable_valid(&s->table)) {
		fprintf(stderr,
			"kvp_manager_check: sequence %" PRIu64
			" has %u tokens in %u blocks\n",
			s->id, tokens, nb);
		return -EFAULT;
	}
	for (uint32_t i = 0; i < nb; i++)
		if (btable_get(&s->table, i) >= m->pool->num_blocks) {
			fprintf(stderr,
				"kvp_manager_check: sequence %" PRIu64
				" holds block %u out of range\n",
				s->id, btable_get(&s->table, i));
			err = -EFAULT;
		}
	return err;
}

/*
 * kvp_manager_check: adds the holders of each block in m's tables to
 * counts[] (a chunk that several tables share counts once, btable.h),
 * and checks each chunk's count against the tables that hold it; 0 or
 * -EFAULT.
 */
static int check_manager_tables(struct kvp_manager *m, uint32_t *counts)
{
	struct seqmap_iter iter;
	struct kvp_seq *s;
	int err = 0;

	kvp_rcu_read_lock();
	for_each_live_seq(m, iter, s)
		if (check_seq_table(m, s))
			err = -EFAULT;
	if (!err) {
		for_each_live_seq(m, iter, s)
			btable_check_begin(&s->table);
		for_each_live_seq(m, iter, s)
			btable_check_count(&s->table, counts);
		for_each_live_seq(m, iter, s)
			if (!btable_check_end(&s->table)) {
				fprintf(stderr,
					"kvp_manager_check: sequence %" PRIu64
					" shares a chunk whose count is not "
					"its holders'\n",
					s->id);
				err = -EFAULT;
			}
	}
	kvp_rcu_read_unlock();
	return err;
}

/* kvp_manager_check's walk over the managers of one pool. */
struct check_walk {
	struct kvp_pool *pool;
	uint32_t *counts; /* table entries per block */
	uint64_t nodes;   /* prefix-cache records */
	int err;
};

/* kvp_manager_check, for each registered manager o (registry lock held). */
static void check_manager(struct kvp_manager *o, void *arg)
{
	struct check_walk *ck = arg;

	if (o->pool != ck->pool)
		return;
	if (check_manager_tables(o, ck->counts))
		ck->err = -EFAULT;
	if (prefix_check_cache(&o->prefix, &ck->nodes))
		ck->err = -EFAULT;
}

KVP_API int kvp_manager_check(struct kvp_manager *m)
{
	struct check_walk ck = {0};
	struct kvp_pool *pool;
	uint32_t *counts;
	int err, bad = 0;

	if (!m)
		return -EINVAL;
	pool = m->pool;
	err = kvp_pool_check(pool);
	if (err)
		return err;
	counts = kvp_calloc(pool->num_blocks, sizeof(*counts));
	if (!counts)
		return -ENOMEM;
	ck.pool = pool;
	ck.counts = counts;
	registry_each(check_manager, &ck);
	if (ck.err)
		err = ck.err;
	pool_count_parked(pool, counts);
	if (ck.nodes != prefix_cached_blocks(pool)) {
		fprintf(stderr,
			"kvp_manager_check: %" PRIu64 " prefix nodes for %" PRIu64
			" cached blocks\n",
			ck.nodes, prefix_cached_blocks(pool));
		err = -EFAULT;
	}
	for (uint32_t b = 0; b < pool->num_blocks; b++) {
		int refs = kvp_block_refcount(pool, b);

		if ((uint32_t)refs == counts[b])
			continue;
		if (bad++ < 10)
			fprintf(stderr,
				"kvp_manager_check: block %u has %d references "
				"but %u holders\n",
				b, refs, counts[b]);
		err = -EFAULT;
	}
	kvp_free(counts, (size_t)pool->num_blocks * sizeof(*counts));
	return err;
}
