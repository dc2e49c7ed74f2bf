/* SPDX-License-Identifier: MIT */
/*
 * peer_mutex.h - the mutex-wrapped designs kvpool replaces, kept as peers
 * for the benchmarks (bench_pool, bench_seq, `kvpool bench`) and the
 * simulator (`kvpool sim --compare mutex`): one copy, used by all.
 *
 *   struct mp_pool   a block free list: a pthread mutex around an array
 *                    stack of free ids and a per-block refcount array
 *                    (the mutex-wrapped shared allocator).
 *   struct mm_pool   the block state shared by mutex managers: ONE global
 *   struct mm_mgr    mutex (in the pool) around every manager's plain
 *                    open-addressing hash map of seq id -> sequence, the
 *                    free list, the reference counts and, for managers
 *                    with a prefix cache, a hash -> block map per manager
 *                    and one LRU list of evictable cached blocks per pool
 *                    (a mutex-wrapped vLLM-style block manager).
 *
 * Synchronisation: every mm_* and mp_* call takes the one lock of its pool
 * for its whole duration, except that a sequence's host memory is
 * malloc()ed before and free()d after the critical section.  Any call may
 * run concurrently with any other on the same or other managers, except
 * the *_init, *_destroy and *_check functions (the caller guarantees
 * quiescence).
 *
 * Semantics follow the kvp_* counterparts (same arguments, same errors,
 * same statistics in struct kvp_stats), so a driver can run the same
 * workload on both: blocks are allocated never-cached first, then by
 * evicting the least recently freed evictable cached block; a sequence is
 * released last block first; a prefix hit is capped at
 * (num_tokens - 1) / block_tokens blocks; a commit skips blocks already
 * cached and leaves a block uncached if its hash is cached by another.
 *
 * The peer is written to be fair: maps are sized up front (they grow by
 * doubling if they must), the lock shares its cache line with the hot
 * counters, block tables grow by doubling, and the operations are
 * out-of-line calls like a library's.
 */
#ifndef KVP_PEER_MUTEX_H
#define KVP_PEER_MUTEX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvpool.h>

/* ------------------------------------------------------ mutex free list */

struct mp_pool {
	_Alignas(64) pthread_mutex_t lock;
	uint32_t n;	  /* blocks; lock */
	uint32_t top;	  /* free ids in stack[0..top); lock */
	uint32_t *stack;  /* free ids; lock */
	uint32_t *refcnt; /* per-block reference count, 0 = free; lock */
};

/* A pool of n free blocks.  Returns 0, -EINVAL (n == 0), -ENOMEM or the
 * negated pthread_mutex_init error. */
int mp_init(struct mp_pool *mp, uint32_t n);
void mp_destroy(struct mp_pool *mp);

/* Like kvp_pool_alloc: n ids, all or nothing; 0, -EINVAL or -ENOSPC. */
int mp_alloc(struct mp_pool *mp, uint32_t n, uint32_t *ids);

/* Like kvp_pool_free: drops one reference each; 0, -EINVAL, -ERANGE or
 * -EALREADY (then nothing changed). */
int mp_free(struct mp_pool *mp, const uint32_t *ids, uint32_t n);

/* Quiescent: 0 if every block is free and on the stack once, else
 * -EFAULT. */
int mp_check(struct mp_pool *mp);

/* ---------------------------------------------------- mutex managers */

struct mm_seq;
struct mm_mgr;

struct mm_slot {
	uint64_t key;
	struct mm_seq *seq; /* NULL = empty slot */
};

/* Block state shared by the managers of one pool, and their one lock. */
struct mm_pool {
	_Alignas(64) pthread_mutex_t lock;
	uint32_t top;	    /* never-cached free ids in stack[0..top) */
	uint32_t lru_count; /* evictable cached blocks (refcount 0) */
	uint32_t lru_head;  /* least recently freed; MM_NONE = empty */
	uint32_t lru_tail;  /* most recently freed */
	uint64_t used;	    /* referenced blocks */
	uint64_t clock;	    /* logical access clock, all managers */
	uint32_t nblocks;
	uint32_t block_tokens;
	uint64_t peak_used;
	uint64_t cache_evictions; /* cached blocks reclaimed by allocation */
	uint32_t *stack;	  /* never-cached free ids */
	uint32_t *refcnt;	  /* per block, 0 = free or evictable */
	uint32_t *lru_prev, *lru_next; /* evictable cached blocks */
	struct mm_mgr **owner;	       /* manager caching the block, or NULL */
	struct kvp_hash *bhash;	       /* hash of a cached block */
};

#define MM_NONE UINT32_MAX

/* One model's sequences (and prefix cache), under pool->lock. */
struct mm_mgr {
	struct mm_pool *pool;
	enum kvp_policy policy;
	float watermark; /* as kvp_manager_config.watermark, 0 = 0.01 */
	bool prefix;	 /* KVP_PREFIX_CACHE */
	uint64_t mask;	 /* sequence map capacity - 1 (a power of two) */
	uint64_t count;	 /* sequences in the map */
	struct mm_slot *slots;
	uint64_t pmask;	     /* prefix map capacity - 1 */
	uint64_t pcount;     /* cached blocks */
	uint32_t *pslots;    /* block id + 1 of a cached block, 0 = empty */
	struct kvp_stats st; /* counters (sequences, tokens are live) */
};

/* A pool of nblocks blocks of block_tokens tokens.  Returns 0, -EINVAL,
 * -ENOMEM or the negated pthread_mutex_init error. */
int mm_pool_init(struct mm_pool *p, uint32_t nblocks, uint32_t block_tokens);

/* Frees the pool's memory; its managers must be destroyed first. */
void mm_pool_destroy(struct mm_pool *p);

/* Referenced blocks now (takes the lock). */
uint64_t mm_pool_used(struct mm_pool *p);

/*
 * A manager over p with the given policy, watermark (0 = 0.01) and flags
 * (KVP_PREFIX_CACHE or 0); the maps are sized for expected_seqs sequences
 * and expected_cached cached blocks.  Returns 0, -EINVAL or -ENOMEM.
 */
int mm_mgr_init(struct mm_mgr *m, struct mm_pool *p, enum kvp_policy policy,
		float watermark, uint32_t flags, uint64_t expected_seqs,
		uint64_t expected_cached);

/* Frees every sequence (blocks back to the pool) and forgets every cached
 * block of the manager.  Quiescent. */
void mm_mgr_destroy(struct mm_mgr *m);

/* The operations: same contract and error codes as their kvp_*
 * counterparts (kvp_seq_create, kvp_seq_create_cached, kvp_seq_commit,
 * kvp_seq_append, kvp_seq_append_batch, kvp_seq_fork, kvp_seq_free,
 * kvp_evict, kvp_admit, kvp_seq_set_priority, kvp_manager_stats).
 * mm_append_batch takes the lock once for the whole batch: the mutex
 * design's best case for a decode step. */
int mm_create(struct mm_mgr *m, uint64_t id, uint32_t num_tokens);
int mm_create_cached(struct mm_mgr *m, uint64_t id,
		     const struct kvp_hash *hashes, uint32_t nhashes,
		     uint32_t num_tokens, uint32_t *cached_tokens);
int mm_commit(struct mm_mgr *m, uint64_t id, const struct kvp_hash *hashes,
	      uint32_t nhashes);
int mm_append(struct mm_mgr *m, uint64_t id, uint32_t num_tokens,
	      struct kvp_copy *cow, uint32_t cow_cap, uint32_t *ncow);
int mm_append_batch(struct mm_mgr *m, const uint64_t *seqs,
		    const uint32_t *num_tokens, uint32_t nseq,
		    struct kvp_copy *cow, uint32_t cow_cap, uint32_t *ncow);
int mm_fork(struct mm_mgr *m, uint64_t src, uint64_t dst);
/* n children of src under one hold of the lock (kvp_seq_fork_n without
 * its flag), all or nothing; n at most MM_FORK_N_MAX. */
#define MM_FORK_N_MAX 64u
int mm_fork_n(struct mm_mgr *m, uint64_t src, const uint64_t *dsts,
	      uint32_t n);
int mm_free(struct mm_mgr *m, uint64_t id);
int mm_evict(struct mm_mgr *m, uint64_t *victim);
int mm_admit(struct mm_mgr *m, uint32_t num_tokens);
int mm_set_priority(struct mm_mgr *m, uint64_t id, int32_t priority);
void mm_stats(struct mm_mgr *m, struct kvp_stats *st);

/*
 * Quiescent check of a pool and all n of its managers: every block's
 * reference count equals the table entries holding it, free and evictable
 * blocks are listed once, cached blocks are in their owner's map.  Returns
 * 0, or -EFAULT (details on stderr), -ENOMEM.
 */
int mm_check(struct mm_pool *p, struct mm_mgr *const *mgrs, unsigned n);

#endif /* KVP_PEER_MUTEX_H */
