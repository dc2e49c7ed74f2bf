/* SPDX-License-Identifier: MIT */
/*
 * seqprefix.c - the prefix cache as sequences use it: kvp_seq_create_cached
 * (hits), kvp_prefix_match (a hit's length, taken by no one),
 * kvp_seq_commit and its forms (retention ranges, STORED events),
 * and the manager-level prefix calls (tick, retention, reset, event sinks)
 * (layer 9, doc/architecture.md "Layers": over seq.c, seqmem.c,
 * btable.c, mgrstat.c and prefix.c).
 *
 * Owns no shared struct: the table, records, evictable lists and events
 * are prefix.c's; this file turns a sequence's blocks and the caller's
 * hashes and ranges into prefix.c's calls, under the sequence's lock.
 */
#include <errno.h>

#include "manager.h"
#include "prefix.h"
#include "seq.h"

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

KVP_API int kvp_prefix_match(struct kvp_manager *m,
			     const struct kvp_hash *hashes, uint32_t nhashes,
			     uint32_t *cached_blocks)
{
	if (!m || (!hashes && nhashes) || !cached_blocks ||
	    !(m->flags & KVP_PREFIX_CACHE))
		return -EINVAL;
	*cached_blocks = prefix_match(&m->prefix, hashes, nhashes);
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

	prefix_event_init(&ev, KVP_EVENT_STORED, hashes + first, end - first,
			  first ? &hashes[first - 1] : NULL);
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

/* A commit in progress (seq_commit) over one locked sequence's table. */
struct commit {
	struct kvp_manager *m;
	const struct btable *table;
	const struct kvp_hash *hashes;
	const struct kvp_commit_info *info; /* for the events, or NULL */
	const struct kvp_retention *ranges; /* nranges 0: none */
	uint32_t nranges;
	uint64_t retain, until; /* block i's retention word, valid to until */
	uint32_t refused;	/* pins the cap refused */
	uint32_t added;		/* blocks this commit stored */
	uint32_t uncached;	/* blocks whose hash another block caches */
};

/* The retention word of block i, from the last one while still valid. */
static uint64_t commit_retention(struct commit *c, uint32_t i)
{
	if (c->nranges && i >= c->until)
		c->retain = block_retention(c->m, i, c->ranges, c->nranges,
					    &c->until);
	return c->retain;
}

/* Blocks [0, end) committed before (hits, a fork sibling's) keep their
 * priority unless this commit raises it. */
static void commit_raise_old(struct commit *c, uint32_t end)
{
	for (uint32_t i = 0; c->nranges && i < end; i++)
		prefix_raise(&c->m->prefix, btable_get(c->table, i),
			     commit_retention(c, i), &c->refused);
}

/*
 * Stores blocks [from, upto) under their hashes, store lock held.  Blocks
 * [run, i) were stored by this call: one STORED event per contiguous run
 * of one priority, emitted while we hold the blocks (so before any can be
 * evicted and reported removed).  Returns the block it stopped at (upto,
 * or the one that failed, its error in *err).
 */
static uint32_t commit_store(struct commit *c, uint32_t from, uint32_t upto,
			     int *err)
{
	uint64_t keys[KVP_COMMIT_AHEAD]; /* of blocks [i, i + AHEAD) */
	struct prefix_cache *pc = &c->m->prefix;
	uint32_t i, run, run_prio = KVP_RETAIN_DEFAULT;

	*err = 0;
	for (i = from; i < upto && i < from + KVP_COMMIT_AHEAD; i++)
		keys[i % KVP_COMMIT_AHEAD] = prefix_store_prepare(
			pc, btable_get(c->table, i), &c->hashes[i]);
	for (i = run = from; i < upto; i++) {
		uint64_t key = keys[i % KVP_COMMIT_AHEAD], retain;
		uint32_t ahead = i + KVP_COMMIT_AHEAD, was_refused = c->refused;
		int r;

		if (ahead < upto)
			keys[ahead % KVP_COMMIT_AHEAD] = prefix_store_prepare(
				pc, btable_get(c->table, ahead),
				&c->hashes[ahead]);
		retain = commit_retention(c, i);
		r = prefix_store(pc, btable_get(c->table, i), &c->hashes[i],
				 key, retain, &c->refused);
		if (r == 1) {
			/* The priority stored: a pin the cap refused is
			 * KVP_RETAIN_MAX. */
			uint32_t p = c->refused != was_refused
					     ? KVP_RETAIN_MAX
					     : prefix_word_priority(retain);

			if (i > run && p != run_prio) {
				commit_emit(c->m, c->hashes, run, i, c->info,
					    run_prio);
				run = i;
			}
			run_prio = p;
			c->added++;
			continue;
		}
		if (r == 2)
			c->uncached++;
		if (r >= 0 && retain)
			prefix_raise(pc, btable_get(c->table, i), retain,
				     &c->refused);
		if (i > run)
			commit_emit(c->m, c->hashes, run, i, c->info, run_prio);
		run = i + 1;
		if (r < 0) {
			*err = r;
			return i;
		}
	}
	if (i > run)
		commit_emit(c->m, c->hashes, run, i, c->info, run_prio);
	return i;
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
	struct commit c = {.m = m, .hashes = hashes, .info = info,
			   .ranges = ranges, .nranges = nranges};
	struct kvp_seq *s;
	uint32_t upto, i;
	int err;

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
	c.table = &s->table;
	prefix_store_begin(&m->prefix);
	commit_raise_old(&c, s->committed < upto ? s->committed : upto);
	i = commit_store(&c, s->committed, upto, &err);
	prefix_store_end(&m->prefix);
	if (s->committed < i)
		s->committed = err ? i : upto;
	seq_unlock(s);
	if (c.added)
		stat_add(m, prefix_commits, c.added);
	if (c.uncached)
		stat_add(m, prefix_uncached, c.uncached);
	if (unpinned)
		*unpinned = c.refused;
	return err ? err : (int)c.added;
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

