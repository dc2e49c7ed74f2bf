/* SPDX-License-Identifier: MIT */
/*
 * seq.c - the operations on sequences: create, append (copy-on-write),
 * fork, free, truncate, StreamingLLM trim, priority, info, blocks (layer
 * 8, doc/architecture.md "Layers": over seqmem.c, btable.c, mgrstat.c,
 * prefix.c, prefix_pool.c, prefix_event.c, the pool's files (pool*.c)
 * and seqmap.c).
 *
 * Owns no struct: it changes struct kvp_seq (seqmem.h) under the
 * sequence's lock, and its block table through btable.h.  It also owns
 * the access clock (tick, touch) that the preemption policies read.
 *
 * Correctness argument.
 *
 * A sequence is found and locked through seq_acquire (seqmem.c: the
 * structs are type-stable, a stale pointer is safe to lock and check).
 *
 * Free (and preemption, which is a free chosen by policy, preempt.c):
 * under the lock, set dead; only the thread that flips dead from false to
 * true goes on, so concurrent frees and preemptions free a victim once.
 * It then removes the entry from the map, drops the block references (no
 * one reads the table of a dead sequence) and recycles the struct at once
 * (seqmem_give): threads that found it before the removal may still lock
 * it, see dead or another id, and report -ENOENT.
 *
 * Fork against free of the source: fork takes one reference on each of the
 * source's blocks while holding the source's lock and seeing it alive.  A
 * free either set dead before (fork reports -ENOENT, takes nothing) or
 * waits for the lock and drops only the source's own references: the fork's
 * references keep every block alive.  The new sequence is inserted with
 * seqmap_insert(); if the id is taken, the fork drops the references it
 * took and reports -EEXIST.
 *
 * Append against fork of the same sequence are serialised by the lock, so
 * either the fork sees the appended tokens and blocks or it does not.  The
 * copy-on-write test reads the last block's reference count: while we hold
 * the lock the count can only fall (other holders free), never rise (a new
 * sharer would need our lock to fork), so at worst we copy a block that
 * just stopped being shared, which is harmless.
 *
 * All or nothing: every call validates, then allocates everything it may
 * need (table growth, blocks in one kvp_pool_alloc), and only then
 * changes the sequence; a failure before that point frees what it
 * allocated.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "error.h"
#include "manager.h"
#include "prefix.h"
#include "rcu.h"
#include "seq.h"

/*
 * The access clock.  One shared counter bumped on every access would be a
 * cache line written by every thread on every append.  Instead each thread
 * takes ticks in batches from a process-wide counter and hands them out
 * locally; it takes a fresh batch when its batch is used up or when the
 * shared counter has run more than KVP_TICK_SKEW ahead of it (other threads
 * took many later ticks), so ticks are unique, strictly increasing within
 * a thread, and ordered across threads to within KVP_TICK_SKEW.
 */
#define KVP_TICK_BATCH 256
#define KVP_TICK_SKEW (4 * KVP_TICK_BATCH)
static _Atomic uint64_t clock_base = 1; /* atomic */
static KVP_TLS uint64_t tick_next, tick_end; /* owner thread only */

static uint64_t tick(void)
{
	/* Relaxed: a logical clock orders accesses, it publishes nothing. */
	uint64_t seen = atomic_load_explicit(&clock_base, memory_order_relaxed);

	if (unlikely(tick_next >= tick_end || seen - tick_next > KVP_TICK_SKEW)) {
		tick_next = atomic_fetch_add_explicit(&clock_base,
						      KVP_TICK_BATCH,
						      memory_order_relaxed);
		tick_end = tick_next + KVP_TICK_BATCH;
	}
	return tick_next++;
}

/* Records an access under the sequence's lock. */
static void touch(struct kvp_seq *s)
{
	atomic_store_explicit(&s->last_access, tick(), memory_order_relaxed);
	atomic_store_explicit(
		&s->access_count,
		atomic_load_explicit(&s->access_count, memory_order_relaxed) +
			1,
		memory_order_relaxed);
}

/*
 * Drops one reference on each of ids[0..n), in that order (the end of a
 * chain before its head), parking those on the cached blocks among the
 * last `park` (pool.c, "Parked references").
 */
static void release_in_order(struct kvp_manager *m, uint32_t *ids,
			     uint32_t n, uint32_t park)
{
	if (n == 0)
		return;
	if (unlikely(pool_free_distinct(m->pool, ids, n, park) != 0)) {
		/* Only if someone freed a manager's block behind its back
		 * (every other block was still dropped). */
		fprintf(stderr, "kvpool: a sequence's blocks were freed "
				"outside the manager\n");
	}
}

/* A table's sink (btable.h) hands its blocks, already last first, here. */
static void release_sunk(void *ctx, uint32_t *ids, uint32_t n)
{
	release_in_order(ctx, ids, n, 0);
}

static void sink_init(struct btable_sink *sk, struct kvp_manager *m)
{
	btable_sink_init(sk, release_sunk, m);
}

/* Removes a locked, live sequence; unlocks it.  See the argument above. */
void seq_remove_locked(struct kvp_manager *m, struct kvp_seq *s)
{
	uint32_t tokens = seq_tokens(s), hits = s->hits,
		 nb = btable_len(&s->table);
	struct btable_sink sk;

	atomic_store_explicit(&s->dead, true, memory_order_relaxed);
	seq_unlock(s);
	/* Unlocked: the map may wait for a rebuild, whose grace period
	 * may wait for a reader spinning on our lock. */
	if (!seqmap_remove(&m->map, s->id, s))
		kvp_fatal("a live sequence was missing from its map");
	/* The table is ours: nobody reads a dead sequence's table, and the
	 * struct is reused only after seqmem_give(). */
	sink_init(&sk, m);
	btable_release(&s->table, &sk);
	/* Its hits, the chain's head, come last: what its thread may hit
	 * next, their references may be parked. */
	release_in_order(m, sk.ids, sk.n, hits < sk.n ? hits : sk.n);
	/* Table entries: a shared chunk's blocks are dropped by the last
	 * of its holders (btable.h), kvpool.h's count is of entries. */
	stat_add(m, blocks_released, nb);
	stat_add(m, frees, 1);
	stat_add(m, sequences, -1);
	stat_add(m, tokens, -(int64_t)tokens);
	seqmem_give(s);
}

/*
 * Brings s, published dead under its id by a create or fork and filled
 * in since, to life.  Until then lookups found it dead and reported
 * -ENOENT: the create or fork had not returned yet.
 */
static void seq_bring_alive(struct kvp_manager *m, struct kvp_seq *s)
{
	/* Read while s is ours: once alive, a free may reuse it. */
	uint64_t id = s->id;

	/* No lock: until the store, every locker sees s dead and reads
	 * nothing else; the store releases seq_init's writes and the touch
	 * to the lockers that see s alive (they load `dead` with acquire). */
	touch(s);
	/* The caller's next call on it (an append) needs no map lookup.
	 * Noted while s is still ours and dead: see seqmem_note. */
	seqmem_note(m, id, s);
	atomic_store_explicit(&s->dead, false, memory_order_release);
}

/*
 * Takes a struct and publishes it under id, dead: finders see -ENOENT
 * until seq_bring_alive(), and a dead struct's lockers read nothing but
 * `dead` and its id.  So a create or fork of a taken id fails before it
 * changes anything, with no lookup of its own.  0, -EEXIST or -ENOMEM.
 */
static int seq_publish_dead(struct kvp_manager *m, uint64_t id,
			    struct kvp_seq **out)
{
	struct kvp_seq *s = seqmem_take(m);
	int err;

	if (!s)
		return -ENOMEM;
	s->id = id;
	err = seqmap_insert(&m->map, id, s);
	if (err) {
		seqmem_give(s);
		return err;
	}
	*out = s;
	return 0;
}

/* Takes s, published dead and never brought to life, out of the map and
 * gives it back.  No sequence lock held (seqmap_remove may wait). */
static void seq_unpublish(struct kvp_manager *m, struct kvp_seq *s)
{
	if (!seqmap_remove(&m->map, s->id, s))
		kvp_fatal("a sequence being created was missing from its map");
	seqmem_give(s);
}

/*
 * Fills in a dead struct of ours for a new sequence.  No lock needed:
 * other threads may lock it (a stale lookup-cache entry, a map reader of
 * its last life), but a locker that sees it dead reads nothing else, and
 * seq_bring_alive's release store of `dead` orders these writes before any
 * locker that sees it alive.
 */
static void seq_init(struct kvp_seq *s, uint64_t id, uint32_t tokens,
		     int32_t priority, bool tail_shared,
		     uint32_t committed, uint32_t hits, bool trimmed)
{
	s->id = id;
	s->tail_shared = tail_shared;
	s->committed = committed;
	s->hits = hits;
	s->trimmed = trimmed;
	seq_set_tokens(s, tokens);
	atomic_store_explicit(&s->priority, priority, memory_order_relaxed);
	atomic_store_explicit(&s->access_count, 0, memory_order_relaxed);
}

/*
 * The STORED event of a hit's n blocks (KVP_EMIT_CACHED_EVENTS), which a
 * new sequence, not yet alive, holds: no free can release them, so no
 * REMOVED of theirs comes first; and the event lock orders it after the
 * STORED of the commit that cached them (a commit emits before it
 * releases that lock).
 */
static void emit_reused(struct kvp_manager *m, const struct kvp_hash *hashes,
			uint32_t n)
{
	struct kvp_event ev;

	prefix_event_init(&ev, KVP_EVENT_STORED, hashes, n, NULL);
	ev.reused = 1;
	prefix_events_begin(&m->prefix);
	prefix_emit_event(&m->prefix, &ev);
	prefix_events_end(&m->prefix);
}

/*
 * kvp_seq_create and kvp_seq_create_cached: a sequence of num_tokens whose
 * first blocks are the cached ones for hashes[0..limit) (limit 0: none),
 * the rest freshly allocated.  *hits receives the number of hit blocks.
 * Hits are taken first, so that the allocation cannot evict them; on
 * failure they are given back in place (prefix_unhit).
 */
int seq_create(struct kvp_manager *m, uint64_t id, uint32_t num_tokens,
	       const struct kvp_hash *hashes, uint32_t limit, uint32_t *hits)
{
	struct kvp_seq *s;
	uint32_t nb = blocks_for(num_tokens, m->block_tokens), h = 0;
	uint32_t onstack[256], *ids = onstack;
	struct btable_sink sk;
	int err = 0;

	*hits = 0;
	/* Published dead first: a taken id fails before anything is
	 * allocated, and before the size is judged. */
	err = seq_publish_dead(m, id, &s);
	if (err)
		return err;
	if (nb > m->pool->num_blocks) {
		seq_unpublish(m, s);
		pool_note_nospace(m->pool, nb);
		return -ENOSPC;
	}
	/* The ids are gathered first (hits, then the allocation), then
	 * handed to the table, whose room is made before anything is
	 * taken. */
	if (nb > KVP_ARRAY_SIZE(onstack) &&
	    !(ids = kvp_malloc((size_t)nb * sizeof(*ids))))
		err = -ENOMEM;
	if (!err)
		err = btable_reserve(&s->table, nb);
	if (!err && limit)
		h = prefix_take(&m->prefix, hashes, limit, ids);
	if (!err && nb > h)
		err = kvp_pool_alloc(m->pool, nb - h, ids + h);
	if (err) {
		if (h)
			prefix_unhit(m->pool, ids, h);
		seq_unpublish(m, s);
		goto out;
	}
	sink_init(&sk, m);
	btable_append(&s->table, m->pool, ids, nb, &sk);
	if (h && (m->flags & KVP_EMIT_CACHED_EVENTS))
		emit_reused(m, hashes, h);
	seq_init(s, id, num_tokens, 0, false, h, h, false);
	seq_bring_alive(m, s);
	stat_add(m, creates, 1);
	stat_add(m, sequences, 1);
	stat_add(m, tokens, num_tokens);
	stat_add(m, blocks_allocated, nb - h);
	*hits = h;
out:
	if (ids != onstack)
		kvp_free(ids, (size_t)nb * sizeof(*ids));
	return err;
}

KVP_API int kvp_seq_create(struct kvp_manager *m, uint64_t id,
			   uint32_t num_tokens)
{
	uint32_t hits;

	if (!m)
		return -EINVAL;
	return seq_create(m, id, num_tokens, NULL, 0, &hits);
}

/*
 * A data-owning pool's side of copy-on-write: the first `tokens` rows of
 * every layer's K and V (the rest of dst stays as allocated: zeroed under
 * KVP_POOL_ZERO, never another sequence's rolled-back bytes).
 */
static void copy_block_data(struct kvp_pool *pool, uint32_t src, uint32_t dst,
			    uint32_t tokens)
{
	unsigned char *from = kvp_block_data(pool, src);
	unsigned char *to = kvp_block_data(pool, dst);
	size_t stride = (size_t)pool->block_tokens * pool->row_bytes;

	if (!from || !to)
		return;
	/* [layer][K,V] (or [layer]) runs of block_tokens rows each. */
	for (size_t run = 0; run < pool_planes(pool) * pool->layout.num_layers;
	     run++)
		memcpy(to + run * stride, from + run * stride,
		       (size_t)tokens * pool->row_bytes);
}

/* x / block_tokens and x % block_tokens: a shift and a mask for the
 * usual powers of two (a division is tens of cycles on an append). */
static inline uint32_t bt_div(const struct kvp_manager *m, uint32_t x)
{
	return m->bt_shift < 32 ? x >> m->bt_shift : x / m->block_tokens;
}

static inline uint32_t bt_mod(const struct kvp_manager *m, uint32_t x)
{
	return m->bt_shift < 32 ? x & (m->block_tokens - 1)
				: x % m->block_tokens;
}

/* Sequence locked: append_locked() when a block must be allocated or
 * copied. */
static __attribute__((noinline)) int
append_slow(struct kvp_manager *m, struct kvp_seq *s, uint32_t n,
	    struct kvp_copy *cow, uint32_t cow_cap, uint32_t *ncow)
{
	uint32_t tokens = seq_tokens(s), off = bt_mod(m, tokens), total, nb,
		 grow, cows = 0, got[64], *fresh = got;
	int err;

	if (tokens > UINT32_MAX - n)
		return -EINVAL;
	total = tokens + n;
	nb = bt_div(m, total) + (bt_mod(m, total) != 0);
	grow = nb - btable_len(&s->table);
	/* A shared, partially filled last block must be copied first.
	 * pool_block_shared says why a stale look is safe. */
	if (n && off && s->tail_shared) {
		/* A cached block is shared with future hits too. */
		if (pool_block_shared(m->pool, btable_last(&s->table)))
			cows = 1;
		else
			s->tail_shared = false; /* the other holders left */
	}
	if (ncow)
		*ncow = cows;
	if (cows > cow_cap) {
		kvp_note_buffer(cows, cow_cap);
		return -ENOBUFS;
	}
	if (grow + cows == 0) {
		seq_set_tokens(s, total);
		touch(s);
		return 0;
	}
	if (grow + cows > m->pool->num_blocks) {
		pool_note_nospace(m->pool, grow + cows);
		return -ENOSPC;
	}
	/* A grown table is kept if the allocation then fails: the next
	 * append needs it too. */
	if (btable_reserve(&s->table, nb))
		return -ENOMEM;
	if (grow + cows > KVP_ARRAY_SIZE(got)) {
		fresh = kvp_malloc((grow + cows) * sizeof(*fresh));
		if (!fresh)
			return -ENOMEM;
	}
	err = kvp_pool_alloc(m->pool, grow + cows, fresh);
	if (err)
		goto out;
	/* Nothing can fail from here on. */
	if (cows) {
		uint32_t src = btable_last(&s->table);

		cow[0] = (struct kvp_copy){.src = src, .dst = fresh[0],
					   .tokens = off};
		copy_block_data(m->pool, src, fresh[0], off);
		btable_set_last(&s->table, fresh[0]);
		release_in_order(m, &src, 1, 0);
		stat_add(m, blocks_released, 1);
		stat_add(m, cows, 1);
	}
	if (grow) {
		struct btable_sink sk;

		sink_init(&sk, m);
		btable_append(&s->table, m->pool, fresh + cows, grow, &sk);
		btable_sink_flush(&sk);
	}
	s->tail_shared = false; /* a fresh tail, or a private copy */
	seq_set_tokens(s, total);
	touch(s);
	stat_add(m, blocks_allocated, grow + cows);
out:
	if (fresh != got)
		kvp_free(fresh, (grow + cows) * sizeof(*fresh));
	return err;
}

/* Sequence locked: the append itself, see kvp_seq_append.  Inline for
 * the decode step's usual case, tokens that fit in a partly filled last
 * block of the sequence's own. */
static inline int append_locked(struct kvp_manager *m, struct kvp_seq *s,
				uint32_t n, struct kvp_copy *cow,
				uint32_t cow_cap, uint32_t *ncow)
{
	uint32_t tokens = seq_tokens(s), off = bt_mod(m, tokens);

	if (likely(off && !s->tail_shared && n <= m->block_tokens - off &&
		   tokens <= UINT32_MAX - n)) {
		if (ncow)
			*ncow = 0;
		seq_set_tokens(s, tokens + n);
		touch(s);
		return 0;
	}
	return append_slow(m, s, n, cow, cow_cap, ncow);
}

/* Sequence locked, after a successful append: what it did (n0 blocks
 * before it). */
static void append_info(const struct kvp_seq *s, uint32_t n0, uint32_t cows,
			struct kvp_append_info *info)
{
	uint32_t nb = btable_len(&s->table);

	info->last_block = nb ? btable_last(&s->table) : KVP_NO_BLOCK;
	info->num_tokens = seq_tokens(s);
	info->new_blocks = nb - n0 + cows;
}

/* kvp_seq_append and, with info, kvp_seq_append_ex: inlined into each,
 * so the plain append pays nothing for the report. */
static inline __attribute__((always_inline)) int
append_one(struct kvp_manager *m, uint64_t id, uint32_t num_tokens,
	   struct kvp_copy *cow, uint32_t cow_cap, uint32_t *ncow,
	   struct kvp_append_info *info)
{
	struct kvp_seq *s;
	uint32_t n0 = 0, cows = 0;
	int err;

	if (!m || (!cow && cow_cap))
		return -EINVAL;
	if (ncow)
		*ncow = 0;
	s = seq_acquire(m, id);
	if (!s)
		return -ENOENT;
	if (info) {
		n0 = btable_len(&s->table);
		if (!ncow)
			ncow = &cows;
	}
	err = append_locked(m, s, num_tokens, cow, cow_cap, ncow);
	if (info && !err)
		append_info(s, n0, *ncow, info);
	seq_unlock(s);
	if (!err) {
		struct mgr_shard *sh = mgr_shard(m);

		mgr_stat_bump(&sh->appends, 1);
		mgr_stat_bump(&sh->tokens, num_tokens);
	}
	return err;
}

KVP_API int kvp_seq_append(struct kvp_manager *m, uint64_t id,
			   uint32_t num_tokens, struct kvp_copy *cow,
			   uint32_t cow_cap, uint32_t *ncow)
{
	return append_one(m, id, num_tokens, cow, cow_cap, ncow, NULL);
}

KVP_API int kvp_seq_append_ex(struct kvp_manager *m, uint64_t id,
			      uint32_t num_tokens, struct kvp_copy *cow,
			      uint32_t cow_cap, uint32_t *ncow,
			      struct kvp_append_info *info)
{
	if (!info)
		return -EINVAL;
	return append_one(m, id, num_tokens, cow, cow_cap, ncow, info);
}

KVP_API int kvp_seq_reserve(struct kvp_manager *m, uint64_t id,
			    uint32_t num_tokens)
{
	uint32_t nb;
	struct btable_sink sk;
	struct kvp_seq *s;
	int err;

	if (!m)
		return -EINVAL;
	s = seq_acquire(m, id);
	if (!s)
		return -ENOENT;
	nb = blocks_for(num_tokens, m->block_tokens);
	if (nb > m->pool->num_blocks) {
		seq_unlock(s);
		pool_note_nospace(m->pool, nb);
		return -ENOSPC;
	}
	sink_init(&sk, m);
	err = btable_reserve_own(&s->table, m->pool, nb, &sk);
	seq_unlock(s);
	/* A shared last chunk copied: our reference on it, dropped after
	 * the unlock as any release is. */
	btable_sink_flush(&sk);
	return err;
}

/* Sequences kvp_seq_append_batch looks ahead: their structs are on their
 * way into the cache while the appends before them run. */
#define BATCH_AHEAD 8u

/*
 * Each append is as atomic as kvp_seq_append's; the batch as a whole is
 * not: it stops at the first failure, as write(2) stops at a short count.
 * The decode step of a scheduler, so it runs as kvp_seq_append does with
 * three savings: the structs are prefetched BATCH_AHEAD sequences ahead,
 * the arguments are checked once, and the statistics are added once.
 */
KVP_API int kvp_seq_append_batch(struct kvp_manager *m, const uint64_t *seqs,
				 const uint32_t *num_tokens, uint32_t nseq,
				 struct kvp_copy *cow, uint32_t cow_cap,
				 uint32_t *ncow)
{
	uint32_t i, used = 0;
	uint64_t tokens = 0;
	int err = 0;

	if (!m || (!seqs && nseq) || (!cow && cow_cap) || nseq > INT32_MAX)
		return -EINVAL;
	if (ncow)
		*ncow = 0;
	for (i = 0; i < nseq && i < BATCH_AHEAD; i++)
		seq_prefetch(m, seqs[i]);
	for (i = 0; i < nseq; i++) {
		uint32_t n = num_tokens ? num_tokens[i] : 1, got = 0;
		struct kvp_seq *s;

		if (i + BATCH_AHEAD < nseq)
			seq_prefetch(m, seqs[i + BATCH_AHEAD]);
		s = seq_acquire(m, seqs[i]);
		if (!s) {
			err = -ENOENT;
			break;
		}
		err = append_locked(m, s, n, cow ? cow + used : NULL,
				    cow_cap - used, &got);
		seq_unlock(s);
		if (err)
			break;
		used += got;
		tokens += n;
	}
	if (ncow)
		*ncow = used;
	if (i) {
		struct mgr_shard *sh = mgr_shard(m);

		mgr_stat_bump(&sh->appends, i);
		mgr_stat_bump(&sh->tokens, tokens);
	}
	return err && !i ? err : (int)i;
}

KVP_API int kvp_seq_fork(struct kvp_manager *m, uint64_t src, uint64_t dst)
{
	struct kvp_seq *s, *d;
	uint32_t tokens, committed, hits;
	int32_t priority;
	bool trimmed;
	int err = 0;

	if (!m)
		return -EINVAL;
	/* dst is published first, dead, so that a taken dst, src itself
	 * included, fails before anything changes. */
	err = seq_publish_dead(m, dst, &d);
	if (err)
		return err;
	s = seq_acquire(m, src);
	if (!s) {
		seq_unpublish(m, d);
		return -ENOENT;
	}
	committed = s->committed;
	hits = s->hits;
	trimmed = s->trimmed;
	err = btable_fork(&d->table, &s->table, m->pool);
	if (err) {
		seq_unlock(s);
		seq_unpublish(m, d);
		return err;
	}
	tokens = seq_tokens(s);
	priority = atomic_load_explicit(&s->priority, memory_order_relaxed);
	s->tail_shared = true;
	touch(s);
	seq_unlock(s);
	seq_init(d, dst, tokens, priority, true, committed, hits, trimmed);
	seq_bring_alive(m, d);
	stat_add(m, forks, 1);
	stat_add(m, sequences, 1);
	stat_add(m, tokens, tokens);
	return 0;
}

static void fork_n_unpublish(struct kvp_manager *m, struct kvp_seq *d);

/*
 * kvp_seq_fork_n's children, published dead in order and chained through
 * `link` (a taken struct is on no list), first child first.  0, or the
 * first error (-EEXIST, -ENOMEM) with none of them left published.
 */
static int fork_n_publish(struct kvp_manager *m, const uint64_t *dsts,
			  uint32_t n, struct kvp_seq **first)
{
	struct kvp_seq *last = NULL, *d;

	*first = NULL;
	for (uint32_t i = 0; i < n; i++) {
		int err = seq_publish_dead(m, dsts[i], &d);

		if (err) {
			fork_n_unpublish(m, *first);
			return err;
		}
		/* Relaxed: the struct is ours alone until brought alive. */
		atomic_store_explicit(&d->link, NULL, memory_order_relaxed);
		if (last)
			atomic_store_explicit(&last->link, d,
					      memory_order_relaxed);
		else
			*first = d;
		last = d;
	}
	return 0;
}

static struct kvp_seq *fork_n_next(struct kvp_seq *d)
{
	return atomic_load_explicit(&d->link, memory_order_relaxed);
}

/* Takes the children of fork_n_publish out of the map and gives them
 * back. */
static void fork_n_unpublish(struct kvp_manager *m, struct kvp_seq *d)
{
	while (d) {
		struct kvp_seq *next = fork_n_next(d);

		seq_unpublish(m, d);
		d = next;
	}
}

/* Under src's lock: room in every child's table, then src's references,
 * n at a time.  0, -ENOMEM or -EOVERFLOW with nothing shared. */
static int fork_n_share(struct kvp_manager *m, struct kvp_seq *s,
			struct kvp_seq *first, uint32_t n)
{
	for (struct kvp_seq *d = first; d; d = fork_n_next(d)) {
		int err = btable_fork_room(&d->table, &s->table);

		if (err)
			return err;
	}
	return btable_share(&s->table, m->pool, n);
}

/*
 * Every child is published dead before src is looked up, so a taken id
 * fails first (as kvp_seq_fork's dst); src is locked once, and its
 * references are taken n at a time before any child is filled in.
 */
KVP_API int kvp_seq_fork_n(struct kvp_manager *m, uint64_t src,
			   const uint64_t *dsts, uint32_t n, uint32_t flags)
{
	struct kvp_seq *s, *first, *next;
	uint32_t tokens, committed, hits;
	int32_t priority;
	bool trimmed;
	int err;

	if (!m || !dsts || n == 0 || n > KVP_FORK_N_MAX ||
	    (flags & ~KVP_FORK_KEEP_SOURCE))
		return -EINVAL;
	err = fork_n_publish(m, dsts, n, &first);
	if (err)
		return err;
	s = seq_acquire(m, src);
	if (!s) {
		fork_n_unpublish(m, first);
		return -ENOENT;
	}
	err = fork_n_share(m, s, first, n);
	if (err) {
		seq_unlock(s);
		fork_n_unpublish(m, first);
		return err;
	}
	committed = s->committed;
	hits = s->hits;
	trimmed = s->trimmed;
	tokens = seq_tokens(s);
	priority = atomic_load_explicit(&s->priority, memory_order_relaxed);
	for (struct kvp_seq *d = first; d; d = fork_n_next(d))
		btable_fork_copy(&d->table, &s->table);
	s->tail_shared = true;
	if (!(flags & KVP_FORK_KEEP_SOURCE))
		touch(s);
	seq_unlock(s);
	for (struct kvp_seq *d = first; d; d = next) {
		/* Read first: once alive, a free may reuse d. */
		next = fork_n_next(d);
		seq_init(d, d->id, tokens, priority, true, committed, hits,
			 trimmed);
		seq_bring_alive(m, d);
	}
	stat_add(m, forks, n);
	stat_add(m, sequences, n);
	stat_add(m, tokens, (int64_t)tokens * n);
	return 0;
}

KVP_API int kvp_seq_free(struct kvp_manager *m, uint64_t id)
{
	struct kvp_seq *s;

	if (!m)
		return -EINVAL;
	s = seq_acquire(m, id);
	if (!s)
		return -ENOENT;
	seq_remove_locked(m, s);
	return 0;
}

KVP_API int kvp_seq_truncate(struct kvp_manager *m, uint64_t id,
			     uint32_t num_tokens)
{
	struct kvp_seq *s;
	struct btable_sink sk;
	uint32_t tokens, nb, n0;
	int err;

	if (!m)
		return -EINVAL;
	s = seq_acquire(m, id);
	if (!s)
		return -ENOENT;
	tokens = seq_tokens(s);
	if (num_tokens > tokens) {
		seq_unlock(s);
		return -ERANGE;
	}
	nb = blocks_for(num_tokens, m->block_tokens);
	n0 = btable_len(&s->table);
	sink_init(&sk, m);
	err = btable_truncate(&s->table, m->pool, nb, &sk);
	btable_sink_flush(&sk);
	if (!err) {
		stat_add(m, blocks_released, n0 - nb);
		/* The new last block may be one a fork shares, or cached. */
		s->tail_shared = true;
		if (s->committed > num_tokens / m->block_tokens)
			s->committed = num_tokens / m->block_tokens;
		if (s->hits > nb)
			s->hits = nb;
		seq_set_tokens(s, num_tokens);
		touch(s);
	}
	seq_unlock(s);
	if (!err)
		stat_add(m, tokens, -(int64_t)(tokens - num_tokens));
	return err;
}

KVP_API int kvp_seq_stream_trim(struct kvp_manager *m, uint64_t id,
				uint32_t sink_tokens, uint32_t window_tokens,
				uint32_t *evicted_tokens)
{
	struct kvp_seq *s;
	uint32_t bt, tokens, keep_head, first_tail, gone = 0;

	if (!m)
		return -EINVAL;
	bt = m->block_tokens;
	s = seq_acquire(m, id);
	if (!s)
		return -ENOENT;
	tokens = seq_tokens(s);
	/* Blocks [0, keep_head) hold the sinks; blocks from first_tail on
	 * hold the window; the whole blocks between go. */
	keep_head = blocks_for(sink_tokens, bt);
	first_tail = window_tokens >= tokens ? 0 : (tokens - window_tokens) / bt;
	if (first_tail > keep_head) {
		uint32_t n = first_tail - keep_head;
		struct btable_sink sk;
		int err;

		sink_init(&sk, m);
		err = btable_cut(&s->table, m->pool, keep_head, n, &sk);
		btable_sink_flush(&sk);
		if (err) {
			seq_unlock(s);
			return err;
		}
		stat_add(m, blocks_released, n);
		s->tail_shared = true; /* conservative, as for truncate */
		s->trimmed = true;
		if (s->hits > keep_head)
			s->hits = keep_head;
		gone = n * bt;
		seq_set_tokens(s, tokens - gone);
	}
	touch(s);
	seq_unlock(s);
	stat_add(m, tokens, -(int64_t)gone);
	if (evicted_tokens)
		*evicted_tokens = gone;
	return 0;
}

KVP_API int kvp_seq_set_priority(struct kvp_manager *m, uint64_t id,
				 int32_t priority)
{
	struct kvp_seq *s;

	if (!m)
		return -EINVAL;
	s = seq_acquire(m, id);
	if (s) {
		atomic_store_explicit(&s->priority, priority,
				      memory_order_relaxed);
		seq_unlock(s);
	}
	return s ? 0 : -ENOENT;
}

KVP_API int kvp_seq_info(struct kvp_manager *m, uint64_t id,
			 struct kvp_seq_info *info)
{
	struct kvp_seq *s;

	if (!m || !info)
		return -EINVAL;
	s = seq_acquire(m, id);
	if (s) {
		info->num_tokens = seq_tokens(s);
		info->num_blocks = btable_len(&s->table);
		info->last_access = atomic_load_explicit(&s->last_access,
							 memory_order_relaxed);
		info->access_count = atomic_load_explicit(
			&s->access_count, memory_order_relaxed);
		info->priority =
			atomic_load_explicit(&s->priority, memory_order_relaxed);
		seq_unlock(s);
	}
	return s ? 0 : -ENOENT;
}

KVP_API int kvp_seq_blocks(struct kvp_manager *m, uint64_t id, uint32_t *ids,
			   uint32_t cap, uint32_t *n)
{
	struct kvp_seq *s;
	int err = 0;

	if (!m || !n || (!ids && cap))
		return -EINVAL;
	s = seq_acquire(m, id);
	if (!s)
		return -ENOENT;
	*n = btable_len(&s->table);
	if (*n > cap) {
		kvp_note_buffer(*n, cap);
		err = -ENOBUFS;
	} else
		btable_copy_out(&s->table, 0, *n, ids);
	seq_unlock(s);
	return err;
}

