/*
 * kvpool.h - paged KV-cache block management for LLM inference engines.
 *
 * The whole public API.  Every function returning int returns 0 (or a
 * documented non-negative value) on success and a negative errno on failure;
 * kvp_strerror() names it.  A call that fails changes nothing.
 *
 * Synchronisation table (pool):
 *
 *   operation              may run concurrently with        caller must ensure
 *   ---------------------  -------------------------------  ------------------
 *   kvp_pool_alloc/free    everything on the same pool       pool ref held
 *   kvp_block_ref          everything                        caller holds a ref
 *                                                            on that block
 *   kvp_pool_stats         everything (approximate while     pool ref held
 *                          other threads run)
 *   kvp_pool_check         nothing on the same pool          quiescence
 *   kvp_pool_ref           everything                        a ref held
 *   kvp_pool_unref         everything; the last unref        nobody uses the
 *                          destroys the pool                 pool afterwards
 *   kvp_thread_flush       everything                        -
 *
 * Threads need no registration: a thread's cache for a pool is created on
 * its first allocation from that pool and returned to the pool when the
 * thread exits (or calls kvp_thread_flush()).
 */
#ifndef KVPOOL_H
#define KVPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVP_BUILDING_LIBRARY)
#define KVP_API __attribute__((visibility("default")))
#else
#define KVP_API
#endif

#define KVP_VERSION_MAJOR 0
#define KVP_VERSION_MINOR 1
#define KVP_VERSION_PATCH 0

/* The largest pool: block ids are uint32_t in [0, KVP_MAX_BLOCKS). */
#define KVP_MAX_BLOCKS (1u << 31)
/* The largest per-thread cache capacity (blocks). */
#define KVP_MAX_CACHE_BLOCKS 4096u
/* The largest number of references one block can hold. */
#define KVP_MAX_REFS ((1u << 24) - 1)

/*
 * Returns a static, human-readable description of a kvpool return value
 * (0 or a negative errno).  Never NULL.  Thread-safe.
 */
KVP_API const char *kvp_strerror(int err);

/* Element types of KV data (fp8/int8 are stored as raw bytes). */
enum kvp_dtype {
	KVP_F32 = 0,
	KVP_F16 = 1,
	KVP_BF16 = 2,
	KVP_F64 = 3,
	KVP_U8 = 4,
};

/* Shape of the KV data a data-owning pool keeps per block. */
struct kvp_layout {
	uint32_t num_layers, num_kv_heads, head_dim;
	enum kvp_dtype dtype;
};

/* kvp_pool_config.flags */
#define KVP_POOL_ZERO (1u << 0)    /* zero a block's data when allocated */
#define KVP_POOL_NOCACHE (1u << 1) /* no per-thread caches: every call
				      goes to the global lock-free stack */

struct kvp_pool_config {
	uint32_t num_blocks;   /* 1 .. KVP_MAX_BLOCKS */
	uint32_t block_tokens; /* tokens per block, >= 1 */
	/*
	 * Per-thread cache capacity in blocks; 0 = automatic: min(128,
	 * num_blocks / (8 * online CPUs)), rounded down to even, and no cache
	 * when that is below 2, so caches never strand a large share of a
	 * small pool.  At most KVP_MAX_CACHE_BLOCKS and at most num_blocks.
	 * Refills and flushes move half a cache, so an explicit odd value
	 * is rounded down to even, and 1 means no cache (as does the flag
	 * KVP_POOL_NOCACHE); kvp_pool_stats() reports the value in effect.
	 */
	uint32_t cache_blocks;
	int32_t device_id;		/* informational; -1 = host */
	const struct kvp_layout *layout; /* NULL = ID-only pool */
	uint32_t flags;			/* KVP_POOL_* */
};

struct kvp_pool;

/*
 * Creates a pool of cfg->num_blocks free blocks and stores it in *out with
 * one reference.  Errors: -EINVAL (NULL argument, num_blocks 0 or above
 * KVP_MAX_BLOCKS, block_tokens 0, cache_blocks too large, unknown flag,
 * invalid layout or a data size that overflows), -ENOMEM.
 */
KVP_API int kvp_pool_create(const struct kvp_pool_config *cfg,
			    struct kvp_pool **out);

/* Takes one more reference on the pool and returns it (NULL stays NULL). */
KVP_API struct kvp_pool *kvp_pool_ref(struct kvp_pool *pool);

/*
 * Drops one reference; the last one destroys the pool, including blocks
 * parked in other threads' caches (those threads notice nothing: their
 * stale caches are never used again, even by a new pool at the same
 * address).  NULL is ignored.  Full barrier.
 */
KVP_API void kvp_pool_unref(struct kvp_pool *pool);

/*
 * Allocates n blocks, each with one reference, and writes their ids to
 * ids[0..n).  All or nothing: on failure no block is taken and ids is left
 * untouched.  -ENOSPC only if at some moment during the call fewer than n
 * blocks were free in the whole pool, counting blocks parked in every
 * thread's cache (the slow path drains them).  Errors: -EINVAL (NULL pool
 * or ids, n == 0), -ENOSPC.  Acquire: the data of a returned block written
 * before it was freed is visible.  Lock-free except when the pool is
 * nearly exhausted and other threads' caches must be drained.
 */
KVP_API int kvp_pool_alloc(struct kvp_pool *pool, uint32_t n, uint32_t *ids);

/*
 * Drops one reference on each of ids[0..n) (an id may appear more than once
 * to drop several); a block whose count reaches 0 is free.  All or nothing:
 * errors -EINVAL (NULL pool or ids, n == 0), -ERANGE (an id is not below
 * num_blocks), -EALREADY (a block is already free, or appears more times
 * than it has references); on error no count changes.  Release: the
 * caller's writes to a freed block's data happen before its next
 * allocation.  A double free that races another free of the same block is
 * a caller bug that is detected only when it does not race.
 */
KVP_API int kvp_pool_free(struct kvp_pool *pool, const uint32_t *ids,
			  uint32_t n);

/*
 * Adds one reference to a block the caller holds a reference on.  Errors:
 * -EINVAL (NULL pool), -ERANGE (id out of range), -EALREADY (the block is
 * free), -EOVERFLOW (the block already has KVP_MAX_REFS references).
 */
KVP_API int kvp_block_ref(struct kvp_pool *pool, uint32_t id);

/*
 * Returns the number of references a block holds (0 = free) or -EINVAL /
 * -ERANGE.  A snapshot: exact only while nobody else changes the block.
 */
KVP_API int kvp_block_refcount(struct kvp_pool *pool, uint32_t id);

/*
 * Returns the address of a block's KV data, or NULL for an ID-only pool,
 * a NULL pool or an id out of range.
 */
KVP_API void *kvp_block_data(struct kvp_pool *pool, uint32_t id);

/* Bytes of KV data per block (0 for an ID-only pool or a NULL pool). */
KVP_API size_t kvp_block_bytes(const struct kvp_pool *pool);

/* Tokens per block (0 for a NULL pool). */
KVP_API uint32_t kvp_pool_block_tokens(const struct kvp_pool *pool);

struct kvp_pool_stats {
	uint64_t total;		   /* num_blocks */
	uint64_t free;		   /* free blocks, parked ones included */
	uint64_t used;		   /* total - free */
	uint64_t in_thread_caches; /* free blocks parked in thread caches */
	uint64_t peak_used;	   /* highest `used` seen; see below */
	uint64_t allocs;	   /* blocks handed out since creation */
	uint64_t frees;		   /* blocks returned (refcount reached 0) */
	uint32_t cache_blocks;	   /* per-thread cache capacity in effect */
	uint32_t threads;	   /* thread caches attached to the pool */
};

/*
 * Fills *st.  Exact when no other thread runs on the pool; approximate
 * (each field a recent value, not one snapshot) otherwise.  peak_used is
 * the highest `used` observed by kvp_pool_stats, kvp_pool_check and the
 * slow paths that drain caches, and (for KVP_POOL_NOCACHE pools) by every
 * allocation: a lower bound of the true peak for pools with caches, since
 * counting used blocks exactly would put a shared counter on the fast path.
 * NULL arguments are ignored.
 */
KVP_API void kvp_pool_stats(struct kvp_pool *pool, struct kvp_pool_stats *st);

/*
 * Checks the pool's invariants; the caller guarantees no other thread uses
 * the pool during the call.  Every block is either referenced (count > 0
 * and in no free list) or free (count 0 and in exactly one of the global
 * stack or one thread cache); the stack count and cache counts agree.
 * Returns 0 if sound, -EINVAL for a NULL pool, -EFAULT if an invariant is
 * broken (details on stderr), -ENOMEM.
 */
KVP_API int kvp_pool_check(struct kvp_pool *pool);

/*
 * Returns every block parked in the calling thread's caches (of every
 * pool) to the pools' global stacks.  Threads call it before sleeping for
 * a long time; thread exit does it automatically.
 */
KVP_API void kvp_thread_flush(void);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_H */
