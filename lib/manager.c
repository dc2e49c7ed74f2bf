/*
 * manager.c - kvp_manager_* for now: creation, destruction, statistics,
 * dump, check, with the prefix-cache glue and admission and preemption
 * (layer 10, doc/architecture.md "Layers").
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "manager.h"
#include "prefix.h"
#include "rcu.h"
#include "seq.h"

#define KVP_DEFAULT_EVICTION_THRESHOLD 0.9f
#define KVP_DEFAULT_WATERMARK 0.01f
#define KVP_MANAGER_KNOWN_FLAGS KVP_PREFIX_CACHE

/* ------------------------------------------------------------------ */
/* Prefix caching (the maps and evictable blocks are prefix.c's)       */
/* ------------------------------------------------------------------ */

KVP_API int kvp_seq_create_cached(struct kvp_manager *m, uint64_t id,
				  const struct kvp_hash *hashes,
				  uint32_t nhashes, uint32_t num_tokens,
				  uint32_t *cached_tokens)
{
	uint32_t limit, hits;
	int err;

	if (cached_tokens)
		*cached_tokens = 0;
	if (!m || (!hashes && nhashes) || !(m->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	/* The last token is always computed (its logits are needed). */
	limit = num_tokens ? (num_tokens - 1) / m->block_tokens : 0;
	if (limit > nhashes)
		limit = nhashes;
	err = seq_create(m, id, num_tokens, hashes, limit, &hits);
	if (err)
		return err;
	stat_add(m, prefix_queries, num_tokens);
	stat_add(m, prefix_hits, (uint64_t)hits * m->block_tokens);
	if (cached_tokens)
		*cached_tokens = hits * m->block_tokens;
	return 0;
}

/* A commit asks for the lines of the block this far ahead (its table
 * slot, hash, owner and state: cache misses, overlapped).  A power of
 * two. */
#define KVP_COMMIT_AHEAD 16

/*
 * The retention word of block i of a sequence under ranges[0..nranges)
 * (kvpool.h, struct kvp_retention): the highest priority of the ranges
 * covering all of its tokens, the longest duration among those.  *until:
 * the first block after i whose word may differ (the next block where a
 * range's covered blocks start or end), so a commit computes one word
 * per stretch of blocks, not per block.
 */
static uint64_t block_retention(struct kvp_manager *m, uint32_t i,
				const struct kvp_retention *ranges,
				uint32_t nranges, uint64_t *until)
{
	uint64_t bt = m->block_tokens, first = (uint64_t)i * bt,
		 end = first + bt, duration = 0;
	uint32_t prio = KVP_RETAIN_DEFAULT;

	*until = UINT64_MAX;
	for (uint32_t r = 0; r < nranges; r++) {
		uint64_t rend = ranges[r].num_tokens
					? (uint64_t)ranges[r].first_token +
						  ranges[r].num_tokens
					: UINT64_MAX;
		/* Blocks [lo, hi) are covered whole by range r. */
		uint64_t lo = (ranges[r].first_token + bt - 1) / bt,
			 hi = rend == UINT64_MAX ? UINT64_MAX : rend / bt;

		if (lo > i && lo < *until)
			*until = lo;
		if (hi > i && hi < *until)
			*until = hi;
		if (ranges[r].first_token > first || rend < end ||
		    ranges[r].priority < prio)
			continue;
		if (ranges[r].priority > prio)
			duration = ranges[r].duration;
		else if (duration && (!ranges[r].duration ||
				      ranges[r].duration > duration))
			duration = ranges[r].duration;
		prio = ranges[r].priority;
	}
	return prefix_retain_word(&m->prefix, prio, duration);
}

/* Retention ranges a commit may take: 0 or -EINVAL. */
static int check_ranges(const struct kvp_retention *ranges, uint32_t nranges)
{
	if (!ranges && nranges)
		return -EINVAL;
	for (uint32_t r = 0; r < nranges; r++)
		if (ranges[r].priority > KVP_RETAIN_PIN)
			return -EINVAL;
	return 0;
}

/* One STORED event for blocks [first, end) of a commit, all of retention
 * priority prio. */
static void commit_emit(struct kvp_manager *m, const struct kvp_hash *hashes,
			uint32_t first, uint32_t end,
			const struct kvp_commit_info *info, uint32_t prio)
{
	struct kvp_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.type = KVP_EVENT_STORED;
	ev.hashes = hashes + first;
	ev.nhashes = end - first;
	ev.parent = first ? &hashes[first - 1] : NULL;
	ev.lora_id = -1;
	ev.priority = prio;
	if (info) {
		if (info->tokens)
			ev.token_ids = info->tokens +
				       (size_t)first * m->block_tokens;
		ev.lora_name = info->lora_name;
		ev.lora_id = info->lora_id;
		ev.extra_keys = info->nextra_keys ? info->extra_keys : NULL;
		ev.nextra_keys = info->nextra_keys;
	}
	prefix_emit_event(&m->prefix, &ev);
}

/*
 * kvp_seq_commit and its forms (arguments checked): info for the events
 * (or NULL), retention ranges (nranges 0: none), pins the cap refused
 * into *unpinned (or NULL).
 */
static int seq_commit(struct kvp_manager *m, uint64_t id,
		      const struct kvp_hash *hashes, uint32_t nhashes,
		      const struct kvp_commit_info *info,
		      const struct kvp_retention *ranges, uint32_t nranges,
		      uint32_t *unpinned)
{
	uint64_t keys[KVP_COMMIT_AHEAD]; /* of blocks [i, i + AHEAD) */
	uint64_t retain = 0, until = 0; /* block i's word, valid to until */
	struct kvp_seq *s;
	uint32_t upto, run = 0, i, refused = 0, run_prio = KVP_RETAIN_DEFAULT;
	int err = 0, added = 0;

	s = seq_acquire(m, id);
	if (!s)
		return -ENOENT;
	if (s->trimmed) {
		seq_unlock(s);
		return -EINVAL;
	}
	upto = seq_tokens(s) / m->block_tokens; /* full blocks */
	if (upto > nhashes)
		upto = nhashes;
	if (info && info->tokens &&
	    (uint64_t)upto * m->block_tokens > info->ntokens) {
		seq_unlock(s);
		return -EINVAL;
	}
	prefix_store_begin(&m->prefix);
	/* Blocks committed before (hits, a fork sibling's) keep their
	 * priority unless this commit raises it. */
	for (i = 0; nranges && i < s->committed && i < upto; i++) {
		if (i >= until)
			retain = block_retention(m, i, ranges, nranges, &until);
		prefix_raise(&m->prefix, btable_get(&s->table, i), retain, &refused);
	}
	for (i = s->committed; i < upto && i < s->committed + KVP_COMMIT_AHEAD;
	     i++)
		keys[i % KVP_COMMIT_AHEAD] =
			prefix_store_prepare(&m->prefix, btable_get(&s->table, i), &hashes[i]);
	/* Blocks [run, i) were stored by this call: one STORED event per
	 * contiguous run of one priority, emitted while we hold the blocks
	 * (so before any can be evicted and reported removed). */
	for (i = run = s->committed; i < upto; i++) {
		uint64_t key = keys[i % KVP_COMMIT_AHEAD];
		uint32_t ahead = i + KVP_COMMIT_AHEAD, was_refused = refused;
		int r;

		if (ahead < upto)
			keys[ahead % KVP_COMMIT_AHEAD] = prefix_store_prepare(
				&m->prefix, btable_get(&s->table, ahead), &hashes[ahead]);
		if (nranges && i >= until)
			retain = block_retention(m, i, ranges, nranges, &until);
		r = prefix_store(&m->prefix, btable_get(&s->table, i), &hashes[i], key,
				 retain, &refused);
		if (r == 1) {
			/* The priority stored: a pin the cap refused is
			 * KVP_RETAIN_MAX. */
			uint32_t p = refused != was_refused
					     ? KVP_RETAIN_MAX
					     : prefix_word_priority(retain);

			if (i > run && p != run_prio) {
				commit_emit(m, hashes, run, i, info, run_prio);
				run = i;
			}
			run_prio = p;
			added++;
			continue;
		}
		if (r == 0 && retain)
			prefix_raise(&m->prefix, btable_get(&s->table, i), retain,
				     &refused);
		if (i > run)
			commit_emit(m, hashes, run, i, info, run_prio);
		run = i + 1;
		if (r < 0) {
			err = r;
			break;
		}
	}
	if (!err && i > run)
		commit_emit(m, hashes, run, i, info, run_prio);
	prefix_store_end(&m->prefix);
	if (s->committed < i)
		s->committed = err ? i : upto;
	seq_unlock(s);
	if (added) {
		stat_add(m, prefix_commits, added);
	}
	if (unpinned)
		*unpinned = refused;
	return err ? err : added;
}

KVP_API int kvp_seq_commit(struct kvp_manager *m, uint64_t id,
			   const struct kvp_hash *hashes, uint32_t nhashes)
{
	if (!m || (!hashes && nhashes) || !(m->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	return seq_commit(m, id, hashes, nhashes, NULL, NULL, 0, NULL);
}

KVP_API int kvp_seq_commit_retained(struct kvp_manager *m, uint64_t id,
				    const struct kvp_hash *hashes,
				    uint32_t nhashes,
				    const struct kvp_retention *ranges,
				    uint32_t nranges, uint32_t *unpinned)
{
	if (unpinned)
		*unpinned = 0;
	if (!m || (!hashes && nhashes) || !(m->flags & KVP_PREFIX_CACHE) ||
	    check_ranges(ranges, nranges))
		return -EINVAL;
	return seq_commit(m, id, hashes, nhashes, NULL, ranges, nranges,
			  unpinned);
}

KVP_API int kvp_seq_commit_ex(struct kvp_manager *m, uint64_t id,
			      const struct kvp_hash *hashes, uint32_t nhashes,
			      const struct kvp_commit_info *info)
{
	if (!m || (!hashes && nhashes) || !(m->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	if (info && ((!info->tokens && info->ntokens) ||
		     (!info->extra_keys && info->nextra_keys) ||
		     check_ranges(info->ranges, info->nranges)))
		return -EINVAL;
	return seq_commit(m, id, hashes, nhashes, info,
			  info ? info->ranges : NULL, info ? info->nranges : 0,
			  NULL);
}

KVP_API int kvp_manager_tick(struct kvp_manager *m, uint64_t steps,
			     uint64_t *now)
{
	if (!m || !(m->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	return prefix_tick(&m->prefix, steps, now);
}

KVP_API int kvp_prefix_retention(struct kvp_manager *m,
				 const struct kvp_hash *hash,
				 uint32_t *priority, uint64_t *expires)
{
	if (!m || !hash || !priority || !expires ||
	    !(m->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	return prefix_retention(&m->prefix, hash, priority, expires);
}

KVP_API int kvp_prefix_reset(struct kvp_manager *m)
{
	int err;

	if (!m || !(m->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	/* Under the event lock: a concurrent commit's STORED comes before
	 * CLEARED if the reset forgot its blocks, after it if not. */
	/* Parked references are references: dropped first (a reset is
	 * rare; this freezes every thread cache of the pool once). */
	(void)pool_unpark_all(m->pool);
	prefix_events_begin(&m->prefix);
	err = prefix_clear(&m->prefix, false);
	if (!err)
		prefix_emit(&m->prefix, KVP_EVENT_CLEARED, NULL, 0, NULL);
	prefix_events_end(&m->prefix);
	return err;
}

KVP_API int kvp_manager_set_event_cb(struct kvp_manager *m, kvp_event_cb cb,
				     void *arg)
{
	if (!m)
		return -EINVAL;
	prefix_set_event_sink(&m->prefix, cb, arg);
	return 0;
}

KVP_API int kvp_manager_set_event_medium(struct kvp_manager *m,
					 const char *medium)
{
	if (!m)
		return -EINVAL;
	return prefix_set_event_medium(&m->prefix, medium);
}

/* ------------------------------------------------------------------ */
/* Admission and eviction                                              */
/* ------------------------------------------------------------------ */

static void pool_usage(struct kvp_pool *pool, uint64_t *used, uint64_t *total)
{
	*used = pool_used_estimate(pool);
	*total = pool->num_blocks;
}

/*
 * fraction * total in blocks.  Fractions arrive as floats, and 0.01f is
 * 0.0099999998: scaled by 1 + 2^-22 (two float ulps), 0.01f of 100 blocks
 * counts as 1 block, as 0.01 does in vLLM's double arithmetic.
 */
static double frac_of(float fraction, uint64_t total)
{
	return (double)fraction * (double)total * (1.0 + 0x1p-22);
}

KVP_API int kvp_admit(struct kvp_manager *m, uint32_t num_tokens)
{
	uint64_t used, total, free_blocks, required, watermark;

	if (!m)
		return -EINVAL;
	pool_usage(m->pool, &used, &total);
	free_blocks = total - used;
	required = blocks_for(num_tokens, m->block_tokens);
	watermark = (uint64_t)frac_of(m->watermark, total); /* rounded down */
	if (total < required + watermark)
		return KVP_ADMIT_NEVER;
	if (free_blocks >= required + watermark)
		return KVP_ADMIT_OK;
	return KVP_ADMIT_LATER;
}

/* Whether a should be evicted before b under the policy (ties: LRU). */
static bool evict_before(enum kvp_policy policy, const struct kvp_seq *a,
			 const struct kvp_seq *b)
{
	uint64_t la = atomic_load_explicit(&a->last_access,
					   memory_order_relaxed);
	uint64_t lb = atomic_load_explicit(&b->last_access,
					   memory_order_relaxed);

	switch (policy) {
	case KVP_EVICT_LFU: {
		uint64_t ca = atomic_load_explicit(&a->access_count,
						   memory_order_relaxed);
		uint64_t cb = atomic_load_explicit(&b->access_count,
						   memory_order_relaxed);

		if (ca != cb)
			return ca < cb;
		break;
	}
	case KVP_EVICT_LONGEST:
		if (seq_tokens(a) != seq_tokens(b))
			return seq_tokens(a) > seq_tokens(b);
		break;
	case KVP_EVICT_PRIORITY: {
		int32_t pa = atomic_load_explicit(&a->priority,
						  memory_order_relaxed);
		int32_t pb = atomic_load_explicit(&b->priority,
						  memory_order_relaxed);

		if (pa != pb)
			return pa < pb;
		break;
	}
	case KVP_EVICT_LRU:
		break;
	}
	return la < lb;
}

/* Evicts one sequence by policy; -ENOENT if none is left. */
static int evict_one(struct kvp_manager *m, uint64_t *victim)
{
	struct seqmap_iter iter;
	struct kvp_seq *s, *best;

	kvp_rcu_read_lock();
	for (;;) {
		best = NULL;
		/* A racy scan: keys are read relaxed, and the choice is
		 * confirmed under the victim's lock below. */
		for (s = seqmap_first(&m->map, &iter); s;
		     s = seqmap_next(&m->map, &iter)) {
			if (atomic_load_explicit(&s->dead,
						 memory_order_relaxed))
				continue;
			if (!best || evict_before(m->policy, s, best))
				best = s;
		}
		if (!best) {
			kvp_rcu_read_unlock();
			return -ENOENT;
		}
		seq_lock(best);
		if (!atomic_load_explicit(&best->dead, memory_order_relaxed))
			break;
		/* Another evictor or a free took it: choose again. */
		seq_unlock(best);
	}
	/* Locked and alive, the struct needs no read-side section (and
	 * the removal must run outside one). */
	kvp_rcu_read_unlock();
	if (victim)
		*victim = best->id;
	seq_remove_locked(m, best);
	stat_add(m, evictions, 1);
	return 0;
}

KVP_API int kvp_evict(struct kvp_manager *m, uint64_t *victim)
{
	if (!m)
		return -EINVAL;
	return evict_one(m, victim);
}

KVP_API int kvp_evict_until(struct kvp_manager *m, float target_util,
			    uint64_t *victims, uint32_t cap, uint32_t *n)
{
	uint64_t used, total;

	if (!m || !n || (!victims && cap) || isnan(target_util) ||
	    target_util > 1.0f)
		return -EINVAL;
	if (target_util < 0)
		target_util = m->eviction_threshold;
	*n = 0;
	for (;;) {
		pool_usage(m->pool, &used, &total);
		if ((double)used <= frac_of(target_util, total))
			return 0;
		if (*n == cap || evict_one(m, &victims[*n]) != 0)
			return KVP_EVICT_PARTIAL;
		(*n)++;
	}
}

/* ------------------------------------------------------------------ */
/* Managers                                                            */
/* ------------------------------------------------------------------ */

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
	if (cfg->max_pinned > cfg->pool->num_blocks)
		return -EINVAL;
	return 0;
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
	seqslab_init(&m->seqs);
	m->pool = kvp_pool_ref(pool);
	m->block_tokens = pool->block_tokens;
	m->bt_shift = (m->block_tokens & (m->block_tokens - 1))
			      ? 32
			      : (uint32_t)__builtin_ctz(m->block_tokens);
	m->policy = cfg->policy;
	m->eviction_threshold = cfg->eviction_threshold > 0
					? cfg->eviction_threshold
					: KVP_DEFAULT_EVICTION_THRESHOLD;
	m->watermark = cfg->watermark > 0 ? cfg->watermark
					  : KVP_DEFAULT_WATERMARK;
	m->flags = cfg->flags;
	if (m->flags & KVP_PREFIX_CACHE)
		err = prefix_cache_init(&m->prefix, pool,
					cfg->max_pinned ? cfg->max_pinned
							: pool->num_blocks / 4);
	if (err) {
		seqmap_fini(&m->map);
		kvp_pool_unref(pool);
		kvp_free_aligned(m, KVP_CACHELINE, sizeof(*m));
		return err;
	}
	seqslab_register(m);
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
	/* From now on no thread hands stashed structs back to m. */
	seqslab_dying(m);
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
	seqslab_flush(m);
	kvp_rcu_barrier();
	seqmap_fini(&m->map);
	seqslab_fini(m);

	pool = m->pool;
	seqslab_unregister(m);
	kvp_free_aligned(m, KVP_CACHELINE, sizeof(*m));
	kvp_pool_unref(pool);
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
	pool_usage(m->pool, &used, &total);
	st->blocks_used = used;
	st->blocks_total = total;
	st->bytes_per_block = m->pool->block_bytes;
	st->prefix_queries = STAT_OF(sum, prefix_queries);
	st->prefix_hits = STAT_OF(sum, prefix_hits);
	st->prefix_hit_rate = st->prefix_queries
				      ? (double)st->prefix_hits /
						(double)st->prefix_queries
				      : 0.0;
	prefix_cache_stats(&m->prefix, &st->prefix_cached_blocks,
			   &st->prefix_evictions, &st->prefix_pinned,
			   &st->retention_clock);
	st->prefix_commits = STAT_OF(sum, prefix_commits);
}

KVP_API int kvp_manager_dump(struct kvp_manager *m, FILE *f)
{
	struct kvp_stats st;
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

/* kvp_manager_check: counts m's table entries per block; 0 or -EFAULT. */
static int check_manager_tables(struct kvp_manager *m, uint32_t *counts)
{
	struct seqmap_iter iter;
	struct kvp_seq *s;
	int err = 0;

	kvp_rcu_read_lock();
	for (s = seqmap_first(&m->map, &iter); s;
	     s = seqmap_next(&m->map, &iter)) {
		uint32_t tokens = seq_tokens(s), nb = btable_len(&s->table);

		if (atomic_load_explicit(&s->dead, memory_order_relaxed))
			continue;
		if (nb != blocks_for(tokens, m->block_tokens) ||
		    !btable_valid(&s->table)) {
			fprintf(stderr,
				"kvp_manager_check: sequence %" PRIu64
				" has %u tokens in %u blocks\n",
				s->id, tokens, nb);
			err = -EFAULT;
		}
		for (uint32_t i = 0; i < nb; i++) {
			uint32_t b = btable_get(&s->table, i);

			if (b >= m->pool->num_blocks) {
				fprintf(stderr,
					"kvp_manager_check: sequence %" PRIu64
					" holds block %u out of range\n",
					s->id, b);
				err = -EFAULT;
				continue;
			}
			counts[b]++;
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
	seqslab_each_manager(check_manager, &ck);
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
				"but %u block-table entries\n",
				b, refs, counts[b]);
		err = -EFAULT;
	}
	kvp_free(counts, (size_t)pool->num_blocks * sizeof(*counts));
	return err;
}
