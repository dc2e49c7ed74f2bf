/* SPDX-License-Identifier: MIT */
/*
 * pool_create.c - a block pool's making and unmaking: the configuration's
 * checks, the layout's sizes, the thread caches' capacity, the arena's
 * one mmap, kvp_pool_create, kvp_pool_ref and kvp_pool_unref, the
 * reclaimer's registration (pool_set_reclaimer), and the reads of what
 * was configured (kvp_pool_get_config, kvp_block_data, the sizes).
 * Floor 4 of lib/ (doc/architecture.md, "Layers"): over pool.c (the
 * depot's unpark hook), tcache.c, stack.h, conf.c and alloc.c.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc.h"
#include "conf.h"
#include "pool.h"
#include "pool_int.h"
#include "tcache.h"

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
			      pool_unpark_refs)) {
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
