/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the block pool: creation, per-block state words, alloc and free.
 * Floor 4 of lib/ (doc/architecture.md, "Layers").
 *
 * Correctness argument (block states).
 *
 * state[id] holds the block's reference count (0 = free) and flags, and
 * changes only by bstate.h's named transitions (the whole table is
 * there).  A free block is in exactly one free list: the global stack
 * (stack.h) or one thread's cache (tcache.c); both hand an id to exactly
 * one thread.  The pool's own transitions, and why each is safe:
 *
 *   0 -> 1          give_sole: kvp_pool_alloc, by the thread that removed the id from
 *                   a free list.  No one else can reach the block, so a
 *                   relaxed store suffices; the free list's own ordering
 *                   (the pop's acquire, or program order within the owner
 *                   thread) makes the previous holder's writes visible.
 *   r -> r + 1      ref: kvp_block_ref, by a holder (r >= 1): CAS loop, relaxed
 *                   (taking a reference publishes nothing).
 *   r -> r - 1      drop: kvp_pool_free with r >= 2: CAS loop with release, so
 *                   that the last holder (who loads with acquire) sees this
 *                   holder's writes before the block is reused.
 *   1 -> 0          take_sole: kvp_pool_free by the last holder.  A thread that sees
 *                   exactly 1 holds that one reference itself, so nobody
 *                   else may change the word (taking a reference requires
 *                   holding one), and a plain store suffices: no RMW on the
 *                   common free path.  The acquire load that saw 1 pairs
 *                   with the release decrements of the other holders.
 *
 * kvp_pool_free is all or nothing, in two passes.  The first checks every
 * id, takes each block whose word is exactly 1 to zero and counts, without
 * touching them, the blocks other holders share.  Only the blocks it took
 * to zero can be restored safely on error (nobody else holds them); an
 * undone decrement of a shared block could resurrect a block that another
 * holder freed in between.  So shared blocks are decremented only in the
 * second pass, after an id repeated k times has been checked to have at
 * least k references: for a caller that holds what it frees, the second
 * pass cannot fail.  A block seen free in the first pass (a double free,
 * or an id repeated more often than its references) undoes the pass and
 * returns -EALREADY.
 *
 * Each block a call takes to zero is listed by that call alone, as it
 * takes it: into the cache's slots above the published count (no drainer
 * reads there; freeing up to half a cache) or into a private chain linked
 * through next[] and pushed onto the global stack in one CAS (larger frees,
 * pools without caches).  Never by scanning states afterwards: a shared
 * block that another thread's free took to zero must not be listed twice.
 *
 * A double free that races another free of the same block (two threads
 * both seeing 1) is a caller bug that cannot be detected without an RMW on
 * every free; kvpool.h documents it.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc.h"
#include "conf.h"
#include "error.h"
#include "pool.h"
#include "tcache.h"

static void unpark_refs(struct tcache_depot *d, const uint32_t *ids,
			uint32_t n);

/* Per-block metadata: the state word and the free-stack link, each a
 * 32-bit word that atomics handle without a lock. */
_Static_assert(sizeof(_Atomic uint32_t) == 4 && ATOMIC_INT_LOCK_FREE == 2,
	       "the state and link words must be lock-free 32-bit atomics");

#define KVP_POOL_KNOWN_FLAGS \
	(KVP_POOL_ZERO | KVP_POOL_NOCACHE | KVP_POOL_K_ONLY)

static size_t dtype_size(enum kvp_dtype dt)
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

/* Bytes per row (one token, one layer, K or V) and per block for a
 * layout: [layer][K,V][token][head][dim], or [layer][token][head][dim]
 * for planes == 1 (KVP_POOL_K_ONLY). */
static int layout_bytes(const struct kvp_layout *l, uint32_t tokens,
			size_t planes, size_t *row, size_t *block)
{
	size_t el = dtype_size(l->dtype), r = el, b;

	if (el == 0 || l->num_layers == 0 || l->num_kv_heads == 0 ||
	    l->head_dim == 0)
		return -EINVAL;
	if (__builtin_mul_overflow(r, (size_t)l->num_kv_heads, &r) ||
	    __builtin_mul_overflow(r, (size_t)l->head_dim, &r) ||
	    __builtin_mul_overflow(r, (size_t)l->num_layers, &b) ||
	    __builtin_mul_overflow(b, planes, &b) ||
	    __builtin_mul_overflow(b, (size_t)tokens, &b))
		return -EINVAL;
	*row = r;
	*block = b;
	return 0;
}

/* cache_blocks 0: at most auto_cache_max (conf.h). */
static uint32_t auto_cache_blocks(uint32_t num_blocks, uint32_t max)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t cap;

	if (cpus < 1)
		cpus = 1;
	cap = num_blocks / (8 * (uint64_t)cpus);
	if (cap > max)
		cap = max;
	return (uint32_t)cap;
}

/* The per-thread cache capacity in effect (kvp_pool_config.cache_blocks
 * says the rules): even, and 0 for no cache. */
static uint32_t cache_capacity(const struct kvp_pool_config *cfg,
			       const struct conf *conf)
{
	uint32_t cap = cfg->cache_blocks
			       ? cfg->cache_blocks
			       : auto_cache_blocks(cfg->num_blocks,
						   conf_val(conf, AUTO_CACHE_MAX));

	cap &= ~1u; /* flushes and refills move halves */
	if (cap < 2 || (cfg->flags & KVP_POOL_NOCACHE))
		cap = 0;
	return cap;
}

static int validate_config(const struct kvp_pool_config *cfg)
{
	if (cfg->num_blocks > KVP_MAX_BLOCKS)
		return -EINVAL;
	if (cfg->block_tokens == 0)
		return -EINVAL;
	if (cfg->cache_blocks > KVP_MAX_CACHE_BLOCKS ||
	    cfg->cache_blocks > cfg->num_blocks)
		return -EINVAL;
	if (cfg->flags & ~KVP_POOL_KNOWN_FLAGS)
		return -EINVAL;
	if ((cfg->flags & KVP_POOL_K_ONLY) && !cfg->layout)
		return -EINVAL;
	return 0;
}

/* Entries of the per-block arrays: one at least, so that an empty pool
 * (num_blocks 0) asks no allocator for 0 bytes. */
static size_t meta_entries(uint32_t num_blocks)
{
	return num_blocks ? num_blocks : 1;
}

static void pool_free_memory(struct kvp_pool *pool)
{
	if (pool->data)
		munmap(pool->data, pool->arena_bytes);
	kvp_free(pool->state,
		 meta_entries(pool->num_blocks) * sizeof(*pool->state));
	kvp_free(pool->next,
		 meta_entries(pool->num_blocks) * sizeof(*pool->next));
	kvp_free_aligned(pool, KVP_CACHELINE, sizeof(*pool));
}

#define KVP_HUGE_PAGE ((size_t)2 << 20)

/*
 * One mmap for the whole arena (fresh anonymous pages are zero).  An arena
 * of 2 MiB or more is rounded up to whole 2 MiB pages (Linux aligns such
 * mappings to them); where the kernel gives huge pages only on request, a
 * madvise asks for them, whose failure changes nothing else.  So one
 * syscall per pool, two in the kernel's "madvise" mode.
 */
static int pool_map_arena(struct kvp_pool *pool)
{
	size_t bytes;
	void *p;

	if (__builtin_mul_overflow(pool->block_bytes, (size_t)pool->num_blocks,
				   &bytes))
		return -EINVAL;
	if (bytes >= KVP_HUGE_PAGE) {
		if (__builtin_add_overflow(bytes, KVP_HUGE_PAGE - 1, &bytes))
			return -EINVAL;
		bytes &= ~(KVP_HUGE_PAGE - 1);
	}
	if (kvp_fault_point(bytes))
		return -ENOMEM;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	kvp_advise_huge(p, bytes);
	pool->data = p;
	pool->arena_bytes = bytes;
	return 0;
}

KVP_API int kvp_pool_create(const struct kvp_pool_config *cfg,
			    struct kvp_pool **out)
{
	/* The first pool reads the configuration (KVP_CONF). */
	const struct conf *conf = conf_get();
	struct kvp_pool *pool;
	size_t block_bytes = 0, row_bytes = 0;
	uint32_t cap;
	int err;

	if (!cfg || !out)
		return -EINVAL;
	err = validate_config(cfg);
	if (err)
		return err;
	if (cfg->layout) {
		err = layout_bytes(cfg->layout, cfg->block_tokens,
				   pool_flags_planes(cfg->flags), &row_bytes,
				   &block_bytes);
		if (err)
			return err;
	}
	cap = cache_capacity(cfg, conf);

	pool = kvp_malloc_aligned(KVP_CACHELINE, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	memset(pool, 0, sizeof(*pool));
	pool->num_blocks = cfg->num_blocks;
	pool->block_tokens = cfg->block_tokens;
	pool->flags = cfg->flags;
	pool->device_id = cfg->device_id;
	pool->block_bytes = block_bytes;
	pool->row_bytes = row_bytes;
	pool->evict_ahead_max = conf_val(conf, EVICT_AHEAD_MAX);
	pool->evict_ahead_share = conf_val(conf, EVICT_AHEAD_SHARE);
	pool->idle_batch = conf_val(conf, IDLE_BATCH);
	if (cfg->layout) {
		pool->has_layout = true;
		pool->layout = *cfg->layout;
	}
	/* The arena first: its size check and mmap fail fast, before
	 * gigabytes of metadata are allocated for a pool that cannot be. */
	if (cfg->layout && cfg->num_blocks) {
		err = pool_map_arena(pool);
		if (err) {
			pool_free_memory(pool);
			return err;
		}
	}
	pool->state = kvp_calloc(meta_entries(cfg->num_blocks),
				 sizeof(*pool->state));
	pool->next = kvp_calloc(meta_entries(cfg->num_blocks),
				sizeof(*pool->next));
	if (!pool->state || !pool->next) {
		pool_free_memory(pool);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < cfg->num_blocks; i++)
		atomic_init(&pool->state[i], 0);
	stack_init(&pool->stack, pool->next, cfg->num_blocks);
	if (pthread_mutex_init(&pool->reclaimer_lock, NULL) != 0) {
		pool_free_memory(pool);
		return -ENOMEM;
	}
	atomic_init(&pool->reclaimer, NULL);
	atomic_init(&pool->refcnt, 1);
	/* Last: from here on threads may attach caches. */
	if (tcache_depot_init(&pool->depot, cap, &pool->stack, pool->next,
			      unpark_refs)) {
		pthread_mutex_destroy(&pool->reclaimer_lock);
		pool_free_memory(pool);
		return -ENOMEM;
	}
	*out = pool;
	return 0;
}

KVP_API struct kvp_pool *kvp_pool_ref(struct kvp_pool *pool)
{
	/* Relaxed: the caller already holds a reference (as for shared_ptr). */
	if (pool)
		atomic_fetch_add_explicit(&pool->refcnt, 1,
					  memory_order_relaxed);
	return pool;
}

KVP_API void kvp_pool_unref(struct kvp_pool *pool)
{
	const struct pool_reclaimer *rc;

	if (!pool)
		return;
	/* Acq_rel: every holder's use happens before the destruction. */
	if (atomic_fetch_sub_explicit(&pool->refcnt, 1,
				      memory_order_acq_rel) != 1)
		return;
	tcache_depot_fini(&pool->depot);
	rc = atomic_load_explicit(&pool->reclaimer, memory_order_acquire);
	if (rc)
		rc->fini(pool->reclaimer_ctx);
	pthread_mutex_destroy(&pool->reclaimer_lock);
	pool_free_memory(pool);
}

int pool_set_reclaimer(struct kvp_pool *pool, const struct pool_reclaimer *ops,
		       int (*make)(struct kvp_pool *pool, void **ctx))
{
	int err = 0;

	kvp_check_pthread(pthread_mutex_lock(&pool->reclaimer_lock));
	if (!atomic_load_explicit(&pool->reclaimer, memory_order_relaxed)) {
		void *ctx = NULL;

		err = make(pool, &ctx);
		if (!err) {
			pool->reclaimer_ctx = ctx;
			/* Release: ctx, built by make(), before the ops
			 * (pool_reclaimer_ctx()'s acquire). */
			atomic_store_explicit(&pool->reclaimer, ops,
					      memory_order_release);
		}
	}
	kvp_check_pthread(pthread_mutex_unlock(&pool->reclaimer_lock));
	return err;
}

/* The registered reclaimer, or NULL. */
static inline const struct pool_reclaimer *reclaimer_of(struct kvp_pool *pool)
{
	/* Acquire: as pool_reclaimer_ctx(). */
	return atomic_load_explicit(&pool->reclaimer, memory_order_acquire);
}

/* Records `used` as a candidate for the pool's peak. */
static void pool_note_used(struct kvp_pool *pool, uint64_t used)
{
	uint64_t peak =
		atomic_load_explicit(&pool->peak_used, memory_order_relaxed);

	/* Relaxed: a statistic; the CAS loop only keeps the maximum. */
	while (used > peak &&
	       !atomic_compare_exchange_weak_explicit(&pool->peak_used, &peak,
						      used, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

/* Zeroes the data of freshly allocated blocks (KVP_POOL_ZERO). */
static void zero_blocks(struct kvp_pool *pool, const uint32_t *ids,
			uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		memset(pool->data + (size_t)ids[i] * pool->block_bytes, 0,
		       pool->block_bytes);
}

/* Marks freshly allocated ids as held once (0 -> 1, see above). */
static inline void mark_allocated(struct kvp_pool *pool, const uint32_t *ids,
				  uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		bstate_give_sole(&pool->state[ids[i]]);
}

static int alloc_reclaim(struct kvp_pool *pool, struct tcache *tc,
			 uint32_t n, uint32_t *ids);

/* No thread cache: straight from the global stack. */
static int alloc_direct(struct kvp_pool *pool, uint32_t n, uint32_t *ids)
{
	uint32_t first;

	if (!stack_pop_chain(&pool->stack, pool->next, n, n, &first)) {
		int err = alloc_reclaim(pool, NULL, n, ids);

		if (!err)
			atomic_fetch_add_explicit(&pool->direct_allocs, n,
						  memory_order_relaxed);
		return err;
	}
	stack_chain_copy(pool->next, first, n, ids);
	mark_allocated(pool, ids, n);
	pool_note_used(pool, pool->num_blocks -
				     atomic_load_explicit(&pool->stack.count,
							  memory_order_relaxed));
	atomic_fetch_add_explicit(&pool->direct_allocs, n,
				  memory_order_relaxed);
	return 0;
}

/*
 * Owner, inside an operation, with c < n parked: tops the cache up from
 * the global stack so that n can be taken and about half a cache remains.
 */
static int alloc_refill(struct kvp_pool *pool, struct tcache *tc, uint32_t c,
			uint32_t n, uint32_t *ids)
{
	uint32_t need = n - c, half = tc->cap / 2, extra = 0, first, k;

	if (n <= tc->cap)
		extra = half < tc->cap - n ? half : tc->cap - n;
	k = stack_pop_chain(&pool->stack, pool->next, need, need + extra,
			    &first);
	if (!k)
		return -ENOSPC;
	if (c + k <= tc->cap) {
		stack_chain_copy(pool->next, first, k, tc->slots + c);
		c += k;
		memcpy(ids, tc->slots + c - n, n * sizeof(*ids));
		tcache_set_count(tc, c - n);
	} else { /* n > cap: everything parked plus the chain */
		memcpy(ids, tc->slots, c * sizeof(*ids));
		stack_chain_copy(pool->next, first, k, ids + c);
		tcache_set_count(tc, 0);
	}
	mark_allocated(pool, ids, n);
	return 0;
}

/*
 * Evictions ahead of need: an allocation of at most evict_ahead_max
 * blocks (conf.h: 128 by default) that must evict takes up to half a
 * cache more, and at most evict_ahead_max, and parks them in the
 * thread's cache, so that the next small allocations (a decode step's
 * new blocks) find them there instead of each taking the evictable
 * list's lock.  At most one block in evict_ahead_share (256 by default;
 * 1 in the test builds, so that the model fuzz's small pools evict ahead
 * as well) of the evictable ones: the blocks evicted early are the next
 * least recently freed, and in a large pool so few that the hit rate
 * cannot tell.  A small pool evicts exactly what it must.
 */
static uint32_t evict_ahead(struct kvp_pool *pool,
			    const struct pool_reclaimer *rc, struct tcache *tc,
			    uint32_t need)
{
	uint32_t room, max = pool->evict_ahead_max;
	uint64_t share;

	if (!tc || need > max)
		return 0;
	share = rc->evictable(pool->reclaimer_ctx) / pool->evict_ahead_share;
	room = tc->cap / 2;
	if (room > max)
		room = max;
	return share < room ? (uint32_t)share : room;
}

/*
 * Owner, not inside an operation: frees ids[0..n) (uncached, held once
 * by the caller alone) into tc, or onto the global stack if they do not
 * fit.
 */
static void park_ahead(struct kvp_pool *pool, struct tcache *tc,
		       const uint32_t *ids, uint32_t n)
{
	uint32_t c;

	/* Held once by us alone (the reclaimer's): free again, with a plain
	 * store, as a sole holder's free (see the top). */
	for (uint32_t i = 0; i < n; i++)
		bstate_free_sole(&pool->state[ids[i]]);
	while (unlikely(!tcache_enter(tc)))
		tcache_wait_drain(tc);
	c = tcache_count(tc);
	if (c + n <= tc->cap) {
		memcpy(tc->slots + c, ids, n * sizeof(*ids));
		tcache_set_count(tc, c + n);
		n = 0;
	}
	tcache_exit(tc);
	if (n)
		stack_push_ids(&pool->stack, pool->next, ids, n);
}

/*
 * Evicts between need and need + ahead blocks (0 < ahead and need at most
 * evict_ahead_max, itself at most CONF_EVICT_AHEAD_LIMIT): the first need
 * into ids, the rest parked in tc.  Returns false (nothing changed) if
 * fewer than need are evictable.
 */
static bool evict_into(struct kvp_pool *pool, const struct pool_reclaimer *rc,
		       struct tcache *tc, uint32_t need, uint32_t ahead,
		       uint32_t *ids)
{
	uint32_t buf[2 * CONF_EVICT_AHEAD_LIMIT], k;

	if (!ahead)
		return rc->reclaim(pool->reclaimer_ctx, need, need, ids) != 0;
	k = rc->reclaim(pool->reclaimer_ctx, need, need + ahead, buf);
	if (!k)
		return false;
	memcpy(ids, buf, need * sizeof(*ids));
	if (k > need)
		park_ahead(pool, tc, buf + need, k - need);
	return true;
}

/*
 * The calling thread's cache and the global stack could not give n
 * blocks.  Never-cached blocks first: what they still hold, then
 * evictable cached blocks (prefix caching), and only then the other
 * threads' caches, drained (topped up by eviction).  Not inside an owner
 * operation.  Returns 0 (ids held once each) or -ENOSPC (nothing changed).
 */
static int alloc_reclaim_once(struct kvp_pool *pool, struct tcache *tc,
			      uint32_t n, uint32_t *ids)
{
	const struct pool_reclaimer *rc = reclaimer_of(pool);
	bool evict = rc != NULL;
	uint64_t free_then;
	uint32_t got = 0, first = KVP_NIL, k;

	if (evict) {
		if (tc) {
			uint32_t c;

			while (unlikely(!tcache_enter(tc)))
				tcache_wait_drain(tc);
			c = tcache_count(tc);
			got = c < n ? c : n;
			memcpy(ids, tc->slots + c - got, got * sizeof(*ids));
			tcache_set_count(tc, c - got);
			tcache_exit(tc);
		}
		if (got < n) {
			k = stack_pop_chain(&pool->stack, pool->next, 1,
					    n - got, &first);
			stack_chain_copy(pool->next, first, k, ids + got);
			got += k;
		}
		if (got == n ||
		    evict_into(pool, rc, tc, n - got,
			       evict_ahead(pool, rc, tc, n - got), ids + got)) {
			/* The evicted ones are held once already. */
			mark_allocated(pool, ids, got);
			return 0;
		}
		if (got)
			stack_push_ids(&pool->stack, pool->next, ids, got);
	}
	k = tcache_drain_alloc(&pool->depot, evict ? 1 : n, n, ids, &free_then);
	pool_note_used(pool, pool->num_blocks - free_then);
	if (k < n &&
	    (!evict || !rc->reclaim(pool->reclaimer_ctx, n - k, n - k, ids + k))) {
		if (k)
			stack_push_ids(&pool->stack, pool->next, ids, k);
		return -ENOSPC;
	}
	mark_allocated(pool, ids, k); /* as above */
	return 0;
}

/*
 * alloc_reclaim_once(), and if it finds too few blocks, again once every
 * parked reference is dropped (their idle blocks become evictable): no
 * false -ENOSPC for blocks only parked references hold.
 */
static __attribute__((noinline)) int
alloc_reclaim(struct kvp_pool *pool, struct tcache *tc, uint32_t n,
	      uint32_t *ids)
{
	int err = alloc_reclaim_once(pool, tc, n, ids);

	if (err == -ENOSPC && reclaimer_of(pool) && pool_unpark_all(pool))
		err = alloc_reclaim_once(pool, tc, n, ids);
	return err;
}

/* Everything but the common case of kvp_pool_alloc; see below. */
static __attribute__((noinline)) int alloc_slow(struct kvp_pool *pool,
						uint32_t n, uint32_t *ids)
{
	struct tcache *tc;
	uint32_t c;
	int err;

	/* The fast path leaves n == 0 to us (it fails its count check). */
	if (unlikely(n == 0))
		return -EINVAL;
	tc = tcache_get(&pool->depot);
	if (unlikely(!tc)) {
		err = alloc_direct(pool, n, ids);
		goto out;
	}
	while (unlikely(!tcache_enter(tc)))
		tcache_wait_drain(tc);
	c = tcache_count(tc);
	if (c >= n) {
		c -= n;
		memcpy(ids, tc->slots + c, n * sizeof(*ids));
		tcache_set_count(tc, c);
		mark_allocated(pool, ids, n);
		err = 0;
	} else {
		err = alloc_refill(pool, tc, c, n, ids);
	}
	tcache_exit(tc);
	if (unlikely(err))
		err = alloc_reclaim(pool, tc, n, ids);
	if (likely(!err))
		tcache_add(&tc->allocs, n);
out:
	if (!err && (pool->flags & KVP_POOL_ZERO) && pool->data)
		zero_blocks(pool, ids, n);
	if (err == -ENOSPC)
		pool_note_nospace(pool, n);
	return err;
}

/*
 * Copies src[0..n) to ids and marks each block held once (0 -> 1, see the
 * top).  Eight per iteration, so the loop's own work is paid per eight
 * blocks; a single block (the commonest call) takes no loop at all.
 */
static inline __attribute__((always_inline)) void
give_sole_all(bstate_t *state, const uint32_t *src, uint32_t n,
	      uint32_t *ids)
{
	const uint32_t *end = src + n;

	if (n == 1) {
		size_t id = *src;

		*ids = (uint32_t)id;
		bstate_give_sole(&state[id]);
		return;
	}
	for (; end - src >= 8; src += 8, ids += 8)
#pragma GCC unroll 8
		for (uint32_t k = 0; k < 8; k++) {
			size_t id = src[k];

			ids[k] = (uint32_t)id;
			bstate_give_sole(&state[id]);
		}
	for (; src < end; src++, ids++) {
		size_t id = *src;

		*ids = (uint32_t)id;
		bstate_give_sole(&state[id]);
	}
}

/*
 * The common case is a leaf: the calling thread's cache for this pool was
 * the last one it used, no drain is in progress, the cache holds n blocks
 * and nothing needs zeroing.  Anything else goes to alloc_slow(), which
 * also refuses n == 0 (it fails the count check here: n - 1 wraps).
 */
KVP_API int kvp_pool_alloc(struct kvp_pool *pool, uint32_t n, uint32_t *ids)
{
	struct tcache *tc;
	bstate_t *state;
	const uint32_t *slots;
	uint32_t c;

	if (unlikely(!pool || !ids))
		return -EINVAL;
	if (unlikely(!tcache_last_is(&pool->depot) ||
		     (pool->flags & KVP_POOL_ZERO)))
		return alloc_slow(pool, n, ids);
	tc = tcache_last.tc;
	if (unlikely(!tcache_enter(tc)))
		return alloc_slow(pool, n, ids);
	c = tcache_count(tc);
	if (unlikely(n - 1 >= c)) { /* c < n, or n == 0 */
		tcache_exit(tc);
		return alloc_slow(pool, n, ids);
	}
	c -= n;
	/* Locals: ids may alias anything, so the compiler would reload the
	 * fields on every iteration. */
	state = pool->state;
	slots = tc->slots + c;
	/* The top n ids, in slot order; one pass copies and marks. */
	give_sole_all(state, slots, n, ids);
	tcache_set_count(tc, c);
	tcache_exit(tc);
	tcache_add(&tc->allocs, n);
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* The one sole-holder step (1 -> 0, see the top) of every free path. */
static inline __attribute__((always_inline)) bool
take_sole(bstate_t *state, size_t id, uint32_t *seen)
{
	return likely(bstate_take_sole(&state[id], seen));
}

/*
 * Undoes drop_sole() on ids[0..n): a block at zero there is one the call
 * took to zero (a caller holding its references keeps the others above
 * zero), so it goes back to one reference.  The sink is discarded.
 */
static __attribute__((noinline)) void undo_sole(struct kvp_pool *pool,
						const uint32_t *ids,
						uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (pool_block_word(pool, ids[i]) == 0)
			bstate_give_sole(&pool->state[ids[i]]);
}

/*
 * Where kvp_pool_free puts the blocks it takes to zero: an array (the
 * cache's slots above its count) or, if out is NULL, a private chain
 * linked through next[] for one push onto the global stack.  Only the
 * call that took a block to zero ever lists it.
 */
struct free_sink {
	uint32_t *out;
	uint32_t first, last, z;
};

static inline void sink_put(struct kvp_pool *pool, struct free_sink *sk,
			    uint32_t id)
{
	if (sk->out) {
		sk->out[sk->z++] = id;
		return;
	}
	if (sk->z++)
		/* Relaxed: the block is ours; the push publishes it. */
		atomic_store_explicit(&pool->next[sk->last], id,
				      memory_order_relaxed);
	else
		sk->first = id;
	sk->last = id;
}

/* Whether block id, repeated k times in a free, lacks the references. */
static bool too_few_refs(struct kvp_pool *pool, uint32_t id, uint32_t k)
{
	return k > 1 && bstate_refs(pool_block_word(pool, id)) < k;
}

#define KVP_FREE_SORT_MAX 1024u /* shared ids sorted on the stack */

/*
 * An id repeated k times needs k references.  The shared ids (still held
 * after the first pass) are checked against their counts, which a
 * legitimate caller's own references keep at least that high whatever
 * other holders do.  Usually no id repeats: a 64-bit filter proves it in
 * one pass.  Otherwise up to KVP_FREE_SORT_MAX shared ids are sorted in a
 * stack buffer; beyond that each id's occurrences are counted in place.
 * No allocation: a free never fails for lack of memory.
 */
static __attribute__((noinline)) int
check_multiplicity(struct kvp_pool *pool, const uint32_t *ids, uint32_t n)
{
	uint32_t buf[KVP_FREE_SORT_MAX], m = 0;
	uint64_t seen = 0;
	bool collide = false;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t bit;

		if (!bstate_held(pool_block_word(pool, ids[i])))
			continue; /* taken to zero by the first pass */
		bit = 1ull << ((ids[i] * 0x9e3779b1u) >> 26);
		collide |= (seen & bit) != 0;
		seen |= bit;
		if (m < KVP_FREE_SORT_MAX)
			buf[m] = ids[i];
		m++;
	}
	if (!collide)
		return 0;
	if (m > KVP_FREE_SORT_MAX) {
		for (uint32_t i = 0; i < n; i++) {
			uint32_t k = 0;

			for (uint32_t j = 0; j < n; j++)
				k += ids[j] == ids[i];
			if (too_few_refs(pool, ids[i], k))
				return -EALREADY;
		}
		return 0;
	}
	qsort(buf, m, sizeof(*buf), cmp_u32);
	for (uint32_t i = 0, j; i < m; i = j) {
		for (j = i + 1; j < m && buf[j] == buf[i]; j++)
			;
		if (too_few_refs(pool, buf[i], j - i))
			return -EALREADY;
	}
	return 0;
}

/*
 * Cached blocks a free took to zero, handed to the evictable list in the
 * order freed, one reclaimer idle() call (prefix.c: one list lock) per
 * batch of the pool's idle_batch (conf.h: 256 by default, the most): a
 * 4,096-token prompt of 16-token blocks in one.
 */
struct idle_batch {
	uint32_t n;
	uint32_t ids[CONF_IDLE_BATCH_LIMIT];
};

static inline void idle_flush(struct kvp_pool *pool, struct idle_batch *b)
{
	/* Only a pool with a reclaimer has cached blocks. */
	if (b->n)
		reclaimer_of(pool)->idle(pool->reclaimer_ctx, b->ids, b->n);
	b->n = 0;
}

/*
 * Drops one reference on block id, whose word was seen as s, by CAS
 * (other holders, or hits on a cached block, may change it meanwhile).  A
 * block taken to zero goes to the sink, or, if cached, to the idle batch.
 * Returns false, changing nothing, if the block was free.
 */
static inline __attribute__((always_inline)) bool
drop_held(struct kvp_pool *pool, uint32_t id, uint32_t s,
	  struct free_sink *sk, struct idle_batch *idle)
{
	uint32_t nw = bstate_drop(&pool->state[id], s);

	if (nw == UINT32_MAX)
		return false;
	if (bstate_held(nw))
		return true;
	if (!bstate_is_cached(nw)) {
		sink_put(pool, sk, id);
		return true;
	}
	idle->ids[idle->n++] = id;
	if (idle->n >= pool->idle_batch)
		idle_flush(pool, idle);
	return true;
}

/*
 * Second pass of kvp_pool_free over blocks that had other holders: drops
 * one reference per occurrence; a block whose count reaches zero goes to
 * the sink.  Blocks the first pass took to zero are skipped.  Cannot fail
 * once check_multiplicity() passed, short of a racing double free (a
 * caller bug).
 */
static __attribute__((noinline)) void
drop_shared(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
	    struct free_sink *sk)
{
	/* Only n is initialised: the ids are written before they are read
	 * (zeroing the whole batch cost a 1 KiB memset per free). */
	struct idle_batch idle;

	idle.n = 0;
	for (uint32_t i = 0; i < n; i++)
		(void)drop_held(pool, ids[i], pool_block_word(pool, ids[i]),
				sk, &idle);
	idle_flush(pool, &idle);
}

/*
 * First pass of kvp_pool_free (see the argument at the top): checks every
 * id, takes each sole-held block (word exactly 1) to zero and puts it in
 * the sink; counts the blocks with other holders in *shared without
 * touching them.  On error, restores the blocks it took (they are the
 * caller's alone) and returns -ERANGE or -EALREADY.
 */
static inline __attribute__((always_inline)) int
drop_sole(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
	  struct free_sink *sk, uint32_t *shared, const bool to_array)
{
	/* Locals: ids may alias anything, so the compiler would reload the
	 * fields (and the sink) on every iteration.  to_array is a constant
	 * at each call site, so the sink's branch folds away. */
	bstate_t *state = pool->state;
	uint32_t num_blocks = pool->num_blocks, i = 0, z = 0, *out = sk->out;
	uint32_t nshared = 0, seen;
	int err = 0;

	/* The common case first: every block held by the caller alone, so
	 * the i-th id is the i-th block freed. */
	if (to_array) {
		for (; i < n; i++) {
			uint32_t id = ids[i];

			if (unlikely(id >= num_blocks ||
				     !take_sole(state, id, &seen)))
				break;
			out[i] = id;
		}
		z = i;
	}
	for (; i < n; i++) {
		uint32_t id = ids[i], s;

		if (unlikely(id >= num_blocks)) {
			err = -ERANGE;
			break;
		}
		if (likely(take_sole(state, id, &s))) {
			if (to_array)
				out[z++] = id;
			else
				sink_put(pool, sk, id);
		} else if (bstate_held(s)) {
			nshared++;
		} else {
			err = -EALREADY;
			break;
		}
	}
	if (unlikely(err)) {
		undo_sole(pool, ids, i);
		return err;
	}
	if (to_array)
		sk->z = z;
	*shared = nshared;
	return 0;
}

/* State words drop_distinct() prefetches before its first CAS. */
#define KVP_DROP_AHEAD 256u

/*
 * kvp_pool_free's drop for a caller that holds one reference on each of
 * its distinct ids (a sequence's table): one pass, as it cannot fail
 * short of a caller bug (-ERANGE, -EALREADY: then every other id is still
 * dropped, so nothing leaks).  Blocks others share, or cached ones (which
 * hits may take references on at any time), are decremented by CAS.
 *
 * The state words are prefetched for writing (kvp_prefetch_w): the first
 * KVP_DROP_AHEAD at once, then 4 ids ahead.  Shared blocks' lines are
 * often in another core's cache, and a sequence's table covers a few
 * lines of them (a 4,096-token prompt's 256 blocks: 16 lines when they
 * were allocated together), whose transfers then overlap instead of
 * following one another (the builtin's "write" prefetch is a read one on
 * x86-64; the ChangeLog of 2026-11-22 has the measurements).
 */
static inline __attribute__((always_inline)) int
drop_distinct(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
	      struct free_sink *sk)
{
	bstate_t *state = pool->state;
	uint32_t num_blocks = pool->num_blocks;
	struct idle_batch idle; /* only n initialised, as above */
	int err = 0;

	idle.n = 0;
	for (uint32_t i = 0; i < n && i < KVP_DROP_AHEAD; i++)
		if (ids[i] < num_blocks)
			kvp_prefetch_w(&state[ids[i]]);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = ids[i], s;

		if (i + 4 < n && ids[i + 4] < num_blocks)
			kvp_prefetch_w(&state[ids[i + 4]]);
		if (unlikely(id >= num_blocks)) {
			err = -ERANGE;
			continue;
		}
		if (likely(take_sole(state, id, &s))) {
			sink_put(pool, sk, id);
		} else if (unlikely(!drop_held(pool, id, s, sk, &idle))) {
			err = -EALREADY;
		}
	}
	idle_flush(pool, &idle);
	return err;
}

/*
 * Both passes: fills the sink with the blocks taken to zero, or returns a
 * negative errno with nothing changed.
 */
static inline __attribute__((always_inline)) int
drop_refs(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
	  struct free_sink *sk, const bool to_array, const bool distinct)
{
	uint32_t shared = 0;
	int r;

	if (distinct) {
		sk->z = 0;
		return drop_distinct(pool, ids, n, sk);
	}
	r = drop_sole(pool, ids, n, sk, &shared, to_array);
	if (likely(r < 0 || shared == 0))
		return r;
	if (shared > 1) {
		r = check_multiplicity(pool, ids, n);
		if (r) {
			undo_sole(pool, ids, n);
			return r;
		}
	}
	drop_shared(pool, ids, n, sk);
	return 0;
}

/*
 * kvp_pool_free of more ids than half a cache, or without a cache: the
 * blocks taken to zero go to the global stack as one chain.
 */
static int free_to_stack(struct kvp_pool *pool, struct tcache *tc,
			 const uint32_t *ids, uint32_t n, bool distinct)
{
	struct free_sink sk = {.out = NULL};
	int r = distinct ? drop_refs(pool, ids, n, &sk, false, true)
			 : drop_refs(pool, ids, n, &sk, false, false);

	/* A distinct drop that failed keeps what it dropped: list it. */
	if (r < 0 && !distinct)
		return r;
	if (sk.z)
		stack_push_chain(&pool->stack, pool->next, sk.first, sk.last,
				 sk.z);
	if (tc)
		tcache_add(&tc->frees, sk.z);
	else
		atomic_fetch_add_explicit(&pool->direct_frees, sk.z,
					  memory_order_relaxed);
	return r;
}

/*
 * Frees up to half a cache through it, in one pass: blocks reaching zero
 * go straight into the cache above its published count, where no drainer
 * looks; on error the pass is undone and the count never moves.  Owner,
 * inside an operation, with c + n <= cap.
 */
static inline __attribute__((always_inline)) int
free_into_cache(struct kvp_pool *pool, struct tcache *tc, uint32_t c,
		const uint32_t *ids, uint32_t n, const bool distinct)
{
	struct free_sink sk = {.out = tc->slots + c};
	int r = drop_refs(pool, ids, n, &sk, true, distinct);

	/* A distinct drop that failed keeps what it dropped: list it. */
	if (unlikely(r < 0 && !distinct)) {
		tcache_exit(tc);
		return r;
	}
	tcache_set_count(tc, c + sk.z);
	tcache_exit(tc);
	tcache_add(&tc->frees, sk.z);
	return r;
}

/* Everything but the common case of kvp_pool_free; see below. */
static __attribute__((noinline)) int free_slow(struct kvp_pool *pool,
					       const uint32_t *ids, uint32_t n,
					       bool distinct)
{
	struct tcache *tc;
	uint32_t c;

	/* The fast paths leave n == 0 to us (it fails their room check). */
	if (unlikely(n == 0))
		return -EINVAL;
	tc = tcache_get(&pool->depot);
	if (!tc || n > tc->cap / 2)
		return free_to_stack(pool, tc, ids, n, distinct);
	while (unlikely(!tcache_enter(tc)))
		tcache_wait_drain(tc);
	c = tcache_count(tc);
	if (c + n > tc->cap) {
		tcache_flush_half(tc);
		c = tcache_count(tc);
	}
	return distinct ? free_into_cache(pool, tc, c, ids, n, true)
			: free_into_cache(pool, tc, c, ids, n, false);
}

/*
 * The common case of a free: the calling thread's last-used cache is this
 * pool's, no drain is in progress and it has room for n more blocks.
 * Returns the cache entered (its count in *c), or NULL (not entered; also
 * for n == 0, which wraps in the room check and is left to free_slow()).
 */
static inline __attribute__((always_inline)) struct tcache *
free_cache_enter(struct kvp_pool *pool, uint32_t n, uint32_t *c)
{
	struct tcache *tc;

	if (unlikely(!tcache_last_is(&pool->depot)))
		return NULL;
	tc = tcache_last.tc;
	if (unlikely(!tcache_enter(tc)))
		return NULL;
	*c = tcache_count(tc);
	if (unlikely(n - 1 >= tc->cap - *c)) { /* c + n > cap, or n == 0 */
		tcache_exit(tc);
		return NULL;
	}
	return tc;
}


/*
 * Takes ids[0..n) to zero in order and lists them in out[0..n), stopping
 * at the first id out of range or not held exactly once; returns how many
 * it took.  Eight per iteration, so the loop's own work is paid per eight
 * blocks; a single block (the commonest call) takes no loop at all.
 */
static inline __attribute__((always_inline)) uint32_t
take_sole_all(bstate_t *state, uint32_t num_blocks,
	      const uint32_t *ids, uint32_t n, uint32_t *out)
{
	const uint32_t *p = ids, *end = ids + n, *end8 = ids + (n & ~7u);
	uint32_t seen; /* unused: a failed take ends the pass */

	if (n == 1) {
		size_t id = *p;

		*out = (uint32_t)id;
		return likely(id < num_blocks && take_sole(state, id, &seen));
	}
	for (; p < end8; p += 8, out += 8)
#pragma GCC unroll 8
		for (uint32_t k = 0; k < 8; k++) {
			size_t id = p[k];

			out[k] = (uint32_t)id;
			if (unlikely(id >= num_blocks ||
				     !take_sole(state, id, &seen)))
				return (uint32_t)(p - ids) + k;
		}
	for (; p < end; p++, out++) {
		size_t id = *p;

		*out = (uint32_t)id;
		if (unlikely(id >= num_blocks || !take_sole(state, id, &seen)))
			break;
	}
	return (uint32_t)(p - ids);
}

/*
 * kvp_pool_free's fast path met a block it cannot take (out of range, not
 * held exactly once): restores the `took` blocks it took to zero (the
 * caller's alone, on no free list), leaves the cache and hands the whole
 * free to the general path, which finds the error or the shared blocks.
 * The blocks restored are those listed in the cache above its count, as
 * the fast path read them, not the caller's array read again.
 */
static __attribute__((noinline, cold)) int
free_fast_undo(struct kvp_pool *pool, struct tcache *tc, const uint32_t *ids,
	       uint32_t n, uint32_t took)
{
	undo_sole(pool, tc->slots + tcache_count(tc), took);
	tcache_exit(tc);
	return free_slow(pool, ids, n, false);
}

/*
 * The common case is a leaf, as for kvp_pool_alloc: the last-used cache,
 * no drain, room for n more blocks, and every block held by the caller
 * alone (word exactly 1), so the i-th id is the i-th block freed, written
 * straight into the cache above its count (where no drainer looks).  Each
 * id is read once: the value range-checked is the value taken and listed.
 * At the first other block the pass is undone and the general path takes
 * over (free_fast_undo()).
 */
KVP_API int kvp_pool_free(struct kvp_pool *pool, const uint32_t *ids,
			  uint32_t n)
{
	struct tcache *tc;
	uint32_t c, took;

	if (unlikely(!pool || !ids))
		return -EINVAL;
	tc = free_cache_enter(pool, n, &c);
	if (unlikely(!tc))
		return free_slow(pool, ids, n, false);
	took = take_sole_all(pool->state, pool->num_blocks, ids, n,
			     tc->slots + c);
	if (unlikely(took < n))
		return free_fast_undo(pool, tc, ids, n, took);
	/* Reloaded (only we write it) rather than kept in a register
	 * across the loop. */
	tcache_set_count(tc, tcache_count(tc) + n);
	tcache_exit(tc);
	tcache_add(&tc->frees, n);
	return 0;
}

/* A distinct free through the calling thread's cache, or the slow path. */
static int free_distinct(struct kvp_pool *pool, const uint32_t *ids,
			 uint32_t n)
{
	struct tcache *tc;
	uint32_t c;

	tc = free_cache_enter(pool, n, &c);
	if (unlikely(!tc))
		return free_slow(pool, ids, n, true);
	return free_into_cache(pool, tc, c, ids, n, true);
}

/*
 * Parked references (doc/architecture.md, "The pool"; tcache.h keeps
 * them).  A sequence's free parks its references on the blocks that were
 * its prefix-cache hits, the head of its chain (the end of ids: a table is
 * released last block first): blocks other requests share, which the
 * thread is likely to hit again.  At most KVP_PARK_MAX, from the head
 * down to the first block it cannot park: uncached, or whose slot holds
 * a block this same free parked.  Blocks nobody hit are never parked, so
 * the order in which they become evictable is the exact one.  Each free
 * first drops what the thread's previous parking free left parked (what
 * the thread's hits did not take back since), so a thread keeps at most
 * one request's hits parked, and a block's release is late by at most one
 * request of its thread: parked longer, a block would stay cached longer
 * than the least-recently-freed order says (a hit-rate loss on the
 * conversation trace).  Within one free the end of a chain becomes idle
 * first and its head last (when its parked references are dropped).
 * Only in pools of KVP_PARK_MIN_BLOCKS
 * or more: parking delays when blocks become evictable, which a small
 * pool would feel, and the reference model (tests/model.c) keeps to
 * exact LRU order in small pools.
 */
#define KVP_PARK_MAX KVP_PARK_SLOTS
#define KVP_PARK_MIN_BLOCKS 1024u

/*
 * Drops (into out) what the thread's previous parking free left parked,
 * then parks the head of ids (see above): returns j, where ids[j..n) are
 * parked and the caller drops ids[0..j) and out[0..*nout) (room for
 * KVP_PARK_MAX).  n may be 0 (only the drop).  Owner, not inside an
 * operation.
 */
static uint32_t park_head(struct kvp_pool *pool, struct tcache *tc,
			  const uint32_t *ids, uint32_t n, uint32_t *out,
			  uint32_t *nout)
{
	uint32_t j = n;

	*nout = 0;
	if (!tcache_enter(tc))
		return n; /* a drain: it drops the parked ones, we ours */
	for (uint32_t k = 0; k < tc->park_nlast; k++) {
		uint32_t i = tc->park_last[k],
			 v = atomic_load_explicit(&tc->park[i],
						  memory_order_relaxed);

		if (!v)
			continue; /* taken back by a hit, or drained */
		out[(*nout)++] = v - 1;
		atomic_store_explicit(&tc->park[i], 0, memory_order_relaxed);
		tcache_add_parked(tc, -1);
	}
	tc->park_nlast = 0;
	while (j > 0 && n - j < KVP_PARK_MAX) {
		uint32_t b = ids[j - 1], i;

		/* Relaxed: we hold b, so CACHED stays as it is, short of a
		 * forced clear (a parked uncached block is freed when its
		 * reference is dropped). */
		if (b >= pool->num_blocks || !pool_block_cached(pool, b))
			break;
		i = tcache_park_slot(b);
		/* Every slot still full is this free's own (see above). */
		if (atomic_load_explicit(&tc->park[i], memory_order_relaxed))
			break;
		atomic_store_explicit(&tc->park[i], b + 1,
				      memory_order_relaxed);
		tcache_add_parked(tc, 1);
		tc->park_last[tc->park_nlast++] = (uint16_t)i;
		j--;
	}
	tcache_exit(tc);
	return j;
}

int pool_free_distinct(struct kvp_pool *pool, const uint32_t *ids, uint32_t n,
		       uint32_t park)
{
	uint32_t displaced[KVP_PARK_MAX], nd = 0, j = n;
	struct tcache *tc;
	int err = 0, e;

	if (unlikely(!pool || !ids || n == 0 || park > n))
		return -EINVAL;
	if (pool->num_blocks >= KVP_PARK_MIN_BLOCKS && reclaimer_of(pool) &&
	    (tc = tcache_get(&pool->depot)) != NULL &&
	    (park || tc->park_nlast))
		j = n - park + park_head(pool, tc, ids + n - park, park,
					 displaced, &nd);
	if (j)
		err = free_distinct(pool, ids, j);
	if (nd && (e = free_distinct(pool, displaced, nd)) != 0 && !err)
		err = e;
	return err;
}

/* The depot's unpark hook: drops parked references (to the global stack
 * and the reclaimer, never through a thread cache). */
static void unpark_refs(struct tcache_depot *d, const uint32_t *ids,
			uint32_t n)
{
	struct kvp_pool *pool =
		(struct kvp_pool *)((char *)d - offsetof(struct kvp_pool, depot));

	(void)free_to_stack(pool, NULL, ids, n, true);
}

uint64_t pool_unpark_all(struct kvp_pool *pool)
{
	uint32_t ids[KVP_PARK_SLOTS], k;
	uint64_t n = 0;

	if (!pool->depot.cap)
		return 0;
	while ((k = tcache_take_parked(&pool->depot, ids, KVP_PARK_SLOTS))) {
		unpark_refs(&pool->depot, ids, k);
		n += k;
	}
	return n;
}

void pool_count_parked(struct kvp_pool *pool, uint32_t *counts)
{
	for (struct tcache *tc = atomic_load_explicit(&pool->depot.tcaches,
						      memory_order_acquire);
	     tc; tc = tc->next)
		for (uint32_t i = 0; i < KVP_PARK_SLOTS; i++) {
			/* Relaxed: quiescent. */
			uint32_t v = atomic_load_explicit(&tc->park[i],
							  memory_order_relaxed);

			if (v && v - 1 < pool->num_blocks)
				counts[v - 1]++;
		}
}

/*
 * Cached blocks held only by parked references: idle in all but name
 * (evictable: a shortage drops the references first).  A block parked by
 * several threads counts once, in the first cache that parks it.
 * Relaxed reads: a statistic, exact at quiescence.
 */
static uint64_t parked_idle(struct kvp_pool *pool)
{
	struct tcache *head = atomic_load_explicit(&pool->depot.tcaches,
						   memory_order_acquire);
	uint64_t n = 0;

	for (struct tcache *tc = head; tc; tc = tc->next)
		for (uint32_t i = 0; i < KVP_PARK_SLOTS; i++) {
			uint32_t v = atomic_load_explicit(&tc->park[i],
							  memory_order_relaxed);
			uint32_t holders = 0, s;
			bool first = true;

			if (!v || v - 1 >= pool->num_blocks)
				continue;
			s = pool_block_word(pool, v - 1);
			if (s == (KVP_ST_CACHED | 1)) {
				n++; /* our parked reference alone */
				continue;
			}
			for (struct tcache *o = head; o; o = o->next)
				if (atomic_load_explicit(&o->park[i],
							 memory_order_relaxed) ==
				    v) {
					first &= holders > 0 || o == tc;
					holders++;
				}
			n += first && bstate_is_cached(s) &&
			     bstate_refs(s) == holders;
		}
	return n;
}

KVP_API int kvp_block_ref(struct kvp_pool *pool, uint32_t id)
{
	if (!pool)
		return -EINVAL;
	if (id >= pool->num_blocks)
		return -ERANGE;
	return bstate_ref(&pool->state[id]);
}

KVP_API int kvp_block_refcount(struct kvp_pool *pool, uint32_t id)
{
	if (!pool)
		return -EINVAL;
	if (id >= pool->num_blocks)
		return -ERANGE;
	return (int)bstate_refs(pool_block_word(pool, id));
}

KVP_API void *kvp_block_data(struct kvp_pool *pool, uint32_t id)
{
	if (!pool || !pool->data || id >= pool->num_blocks)
		return NULL;
	return pool->data + (size_t)id * pool->block_bytes;
}

KVP_API size_t kvp_block_bytes(const struct kvp_pool *pool)
{
	return pool ? pool->block_bytes : 0;
}

KVP_API size_t kvp_pool_row_bytes(const struct kvp_pool *pool)
{
	return pool ? pool->row_bytes : 0;
}

KVP_API uint32_t kvp_pool_block_tokens(const struct kvp_pool *pool)
{
	return pool ? pool->block_tokens : 0;
}

KVP_API int kvp_pool_get_config(const struct kvp_pool *pool,
				struct kvp_pool_config *out,
				struct kvp_layout *layout)
{
	if (!pool || !out || (pool->has_layout && !layout))
		return -EINVAL;
	*out = (struct kvp_pool_config){
		.num_blocks = pool->num_blocks,
		.block_tokens = pool->block_tokens,
		.cache_blocks = pool->depot.cap,
		.device_id = pool->device_id,
		.flags = pool->flags,
	};
	if (pool->has_layout) {
		*layout = pool->layout;
		out->layout = layout;
	}
	return 0;
}

/* The blocks an allocation that failed could have had are the free ones
 * as kvp_pool_stats counts them (idle cached and parked ones included). */
void pool_note_nospace(struct kvp_pool *pool, uint64_t n)
{
	struct kvp_pool_stats st;

	kvp_pool_stats(pool, &st);
	kvp_note_nospace(n, st.free);
}

KVP_API void kvp_pool_stats(struct kvp_pool *pool, struct kvp_pool_stats *st)
{
	const struct pool_reclaimer *rc;
	struct pool_reclaimer_stats rs = {0};
	uint64_t parked, allocs, frees, on_stack, nparked;
	uint32_t threads;

	if (!pool || !st)
		return;
	rc = reclaimer_of(pool);
	if (rc)
		rc->stats(pool->reclaimer_ctx, &rs);
	tcache_sum(&pool->depot, &parked, &allocs, &frees, &nparked,
		   &threads);
	/* Relaxed: statistics. */
	on_stack = atomic_load_explicit(&pool->stack.count,
					memory_order_relaxed);
	memset(st, 0, sizeof(*st));
	st->total = pool->num_blocks;
	st->in_thread_caches = parked;
	st->evictable = rs.evictable + (nparked ? parked_idle(pool) : 0);
	st->cache_evictions = rs.evictions;
	st->free = on_stack + parked + st->evictable;
	if (st->free > st->total)
		st->free = st->total;
	st->used = st->total - st->free;
	pool_note_used(pool, st->used);
	st->peak_used =
		atomic_load_explicit(&pool->peak_used, memory_order_relaxed);
	st->allocs = allocs + rs.revived +
		     atomic_load_explicit(&pool->direct_allocs,
					  memory_order_relaxed);
	st->frees = frees + rs.released +
		    atomic_load_explicit(&pool->direct_frees,
					 memory_order_relaxed);
	st->cache_blocks = pool->depot.cap;
	st->threads = threads;
}

uint64_t pool_used_estimate(struct kvp_pool *pool)
{
	const struct pool_reclaimer *rc = reclaimer_of(pool);
	uint64_t parked, allocs, frees, nparked, free;
	uint32_t threads;

	tcache_sum(&pool->depot, &parked, &allocs, &frees, &nparked,
		   &threads);
	/* Relaxed: an estimate. */
	free = atomic_load_explicit(&pool->stack.count, memory_order_relaxed) +
	       parked + nparked +
	       (rc ? rc->evictable(pool->reclaimer_ctx) : 0);
	return free < pool->num_blocks ? pool->num_blocks - free : 0;
}

/* kvp_pool_check: marks id as seen on a free list; false if it was. */
static bool check_mark(uint8_t *seen, uint32_t id)
{
	bool was = seen[id / 8] & (1u << (id % 8));

	seen[id / 8] |= (uint8_t)(1u << (id % 8));
	return !was;
}

#define check_fail(...)                                                      \
	do {                                                                 \
		fprintf(stderr, "kvp_pool_check: " __VA_ARGS__);             \
		return -EFAULT;                                              \
	} while (0)

/*
 * The checks of kvp_pool_check, each 0 or -EFAULT (the reason printed).
 * Quiescent: relaxed loads see every thread's last writes, ordered by
 * whatever made the pool quiescent (joins, locks).  `seen` marks the
 * blocks found on a free list.
 */
/* The free stack: links in range, no block twice, no cycle, its count. */
static int check_stack(struct kvp_pool *pool, uint8_t *seen,
		       uint64_t *on_stack)
{
	uint64_t counted;
	uint32_t id;

	*on_stack = 0;
	id = stack_top(atomic_load_explicit(&pool->stack.head,
					    memory_order_acquire));
	while (id != KVP_NIL) {
		if (id >= pool->num_blocks)
			check_fail("stack link %u out of range\n", id);
		if (!check_mark(seen, id))
			check_fail("block %u twice on the free lists\n", id);
		if (++*on_stack > pool->num_blocks)
			check_fail("cycle in the free stack\n");
		id = atomic_load_explicit(&pool->next[id],
					  memory_order_relaxed);
	}
	counted = atomic_load_explicit(&pool->stack.count,
				       memory_order_relaxed);
	if (counted != *on_stack)
		check_fail("stack count %llu, but %llu blocks on it\n",
			   (unsigned long long)counted,
			   (unsigned long long)*on_stack);
	return 0;
}

/* The threads' caches: within capacity, idle, ids in range, no block
 * twice; *parked: the blocks they hold. */
static int check_tcaches(struct kvp_pool *pool, uint8_t *seen,
			 uint64_t *parked)
{
	*parked = 0;
	for (struct tcache *tc = atomic_load_explicit(&pool->depot.tcaches,
						      memory_order_acquire);
	     tc; tc = tc->next) {
		uint32_t c = tcache_count(tc);

		if (c > tc->cap)
			check_fail("cache holds %u > capacity %u\n", c,
				   tc->cap);
		if (atomic_load_explicit(&tc->busy, memory_order_relaxed) ||
		    atomic_load_explicit(&tc->drain, memory_order_relaxed))
			check_fail("cache busy or draining at quiescence\n");
		for (uint32_t i = 0; i < c; i++) {
			uint32_t id = tc->slots[i];

			if (id >= pool->num_blocks)
				check_fail("cached id %u out of range\n", id);
			if (!check_mark(seen, id))
				check_fail("block %u twice on the free "
					   "lists\n",
					   id);
		}
		*parked += c;
	}
	return 0;
}

/* Every block: free (state 0) if and only if on a free list. */
static int check_blocks(struct kvp_pool *pool, const uint8_t *seen)
{
	for (uint32_t id = 0; id < pool->num_blocks; id++) {
		uint32_t s = pool_block_word(pool, id);
		bool listed = seen[id / 8] & (1u << (id % 8));

		if (s == 0 && !listed)
			check_fail("free block %u is on no free list (lost)\n",
				   id);
		if (s != 0 && listed)
			check_fail("block %u has %u references (state %#x) "
				   "but is on a free list\n",
				   id, bstate_refs(s), s);
	}
	return 0;
}

KVP_API int kvp_pool_check(struct kvp_pool *pool)
{
	uint64_t on_stack = 0, parked = 0;
	size_t bytes;
	uint8_t *seen;
	int err;

	if (!pool)
		return -EINVAL;
	bytes = pool->num_blocks / 8 + 1;
	seen = kvp_calloc(bytes, 1);
	if (!seen)
		return -ENOMEM;
	err = check_stack(pool, seen, &on_stack);
	if (!err)
		err = check_tcaches(pool, seen, &parked);
	if (!err)
		err = check_blocks(pool, seen);
	if (!err && reclaimer_of(pool))
		err = reclaimer_of(pool)->check(pool->reclaimer_ctx);
	if (!err)
		pool_note_used(pool, pool->num_blocks - on_stack - parked);
	kvp_free(seen, bytes);
	return err;
}
