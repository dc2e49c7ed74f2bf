/* SPDX-License-Identifier: MIT */
/*
 * preempt.c - admission and preemption: kvp_admit, and kvp_evict and
 * kvp_evict_until, which preempt whole sequences (free them, chosen by
 * the manager's policy) to make room, and kvp_evict_peek, which names
 * the next victim without preempting it (layer 9, doc/architecture.md
 * "Layers": over seq.c, seqmem.c, seqmap.c, mgrstat.c and pool_stats.c).
 *
 * Words: "preempt" is taking a running sequence away (vLLM's preemption
 * by recomputation), "evict" is reclaiming an idle cached block
 * (prefix_pool.c, prefix.c).  The public names kvp_evict and kvp_evict_until predate
 * that split and keep their names.
 *
 * Owns no struct.  The victim scan reads the policy keys (last access,
 * access count, tokens, priority) relaxed and without locks; the choice
 * is confirmed under the victim's lock, and seq_remove_locked removes it
 * exactly once (seq.c's argument).
 */
#include <errno.h>
#include <math.h>

#include "manager.h"
#include "rcu.h"
#include "seq.h"

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

/* Whether a should be preempted before b under the policy (ties: LRU). */
static bool preempt_before(enum kvp_policy policy, const struct kvp_seq *a,
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

/*
 * Read side: the live sequence the policy would preempt first, locked
 * (so confirmed alive), or NULL if none is left.  A racy scan: keys are
 * read relaxed, and the choice is confirmed under the victim's lock.
 */
static struct kvp_seq *choose_locked(struct kvp_manager *m)
{
	/* Once per choice: kvp_manager_set_policy may change it. */
	enum kvp_policy policy = (enum kvp_policy)atomic_load_explicit(
		&m->policy, memory_order_relaxed);
	struct seqmap_iter iter;
	struct kvp_seq *s, *best;

	for (;;) {
		best = NULL;
		for (s = seqmap_first(&m->map, &iter); s;
		     s = seqmap_next(&m->map, &iter)) {
			if (atomic_load_explicit(&s->dead,
						 memory_order_relaxed))
				continue;
			if (!best || preempt_before(policy, s, best))
				best = s;
		}
		if (!best)
			return NULL;
		seq_lock(best);
		/* Acquire: see seq_lock_live(). */
		if (!atomic_load_explicit(&best->dead, memory_order_acquire))
			return best;
		/* Another preemption or a free took it: choose again. */
		seq_unlock(best);
	}
}

/* Preempts one sequence by policy; -ENOENT if none is left. */
static int preempt_one(struct kvp_manager *m, uint64_t *victim)
{
	struct kvp_seq *best;

	kvp_rcu_read_lock();
	best = choose_locked(m);
	/* Locked and alive, the struct needs no read-side section (and
	 * the removal must run outside one). */
	kvp_rcu_read_unlock();
	if (!best)
		return -ENOENT;
	if (victim)
		*victim = best->id;
	seq_remove_locked(m, best);
	stat_add(m, evictions, 1);
	return 0;
}

KVP_API int kvp_evict_peek(struct kvp_manager *m, uint64_t *victim)
{
	struct kvp_seq *best;

	if (!m || !victim)
		return -EINVAL;
	kvp_rcu_read_lock();
	best = choose_locked(m);
	if (best) {
		*victim = best->id;
		seq_unlock(best);
	}
	kvp_rcu_read_unlock();
	return best ? 0 : -ENOENT;
}

KVP_API int kvp_evict(struct kvp_manager *m, uint64_t *victim)
{
	if (!m)
		return -EINVAL;
	return preempt_one(m, victim);
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
		if (*n == cap || preempt_one(m, &victims[*n]) != 0)
			return KVP_EVICT_PARTIAL;
		(*n)++;
	}
}

