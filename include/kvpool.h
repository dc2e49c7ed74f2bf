/* SPDX-License-Identifier: MIT */
/*
 * kvpool.h - paged KV-cache block management for LLM inference engines.
 *
 * The whole public API.  Every function returning int returns 0 (or a
 * documented non-negative value) on success and a negative errno on failure;
 * kvp_strerror() names it.  A call that fails changes nothing.  The
 * errnos: -EINVAL a bad argument, -ENOSPC not enough free blocks,
 * -ENOBUFS the caller's buffer is too small (kvp_last_error says how
 * large it must be), -ENOMEM host memory, -ENOENT an unknown sequence,
 * -EEXIST a sequence id in use, -ERANGE a block id, position or count out
 * of range, -EALREADY a block already free, -EOVERFLOW a count that would
 * overflow, -EBUSY a shared or cached block in use, -EFAULT a failed
 * invariant check, -EIO a write error or no randomness.
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

/*
 * Details of the calling thread's last -ENOSPC or -ENOBUFS, for callers
 * that report more than the errno (a scheduler deciding how much to
 * preempt, a caller growing its buffer, a binding's error type).  Every
 * public call that returns one of the two records them, per thread, just
 * before it returns; no other call touches the record, so read it right
 * after the failing call.  Two kinds:
 *  - -ENOSPC, not enough blocks (kvp_pool_alloc, kvp_seq_create,
 *    kvp_seq_append and _ex and _batch, kvp_seq_reserve,
 *    kvp_seq_create_cached): `requested` is the blocks the call needed
 *    at once, `available` the blocks it could have had when it gave up
 *    (free, parked in thread caches, and idle cached blocks it could
 *    evict): a recent count, not a snapshot, while other threads run;
 *  - -ENOBUFS, a caller's buffer too small (kvp_seq_blocks,
 *    kvp_manager_seqs, kvp_export_block_table, kvp_export_csr,
 *    kvp_metrics_format, kvp_hash_blocks_cap, kvp_seq_gather_cap (in
 *    tokens), a copy-on-write with no
 *    room in cow[]): `requested` is the entries needed (bytes for
 *    kvp_metrics_format, its NUL included), `available` the buffer's
 *    capacity.
 */
struct kvp_error_info {
	int err;	    /* -ENOSPC or -ENOBUFS */
	uint32_t buffer;    /* 1: -ENOBUFS, a buffer; 0: -ENOSPC, blocks */
	uint64_t requested; /* blocks (or entries) the call needed */
	uint64_t available; /* blocks it could have had (or the cap) */
};

/*
 * Copies the calling thread's last -ENOSPC or -ENOBUFS details into
 * *out.  Returns 0, -ENOENT if no call of this thread returned either
 * yet, -EINVAL for a NULL out.  Thread-safe (each thread has its own
 * record).
 */
KVP_API int kvp_last_error(struct kvp_error_info *out);

/*
 * Runtime tuning, as jemalloc's MALLOC_CONF: a string of `key:value`
 * pairs separated by commas (kvpool(3) lists the keys, their ranges and
 * defaults).  It is read once, when the first pool is created (or the
 * first kvp_conf_write() runs): the built-in defaults, then kvp_conf,
 * then the environment variable KVP_CONF, later pairs overriding
 * earlier ones.  A pair that cannot be applied is reported in one line
 * on stderr, beginning "<kvpool>: ", and ignored (abort_conf:true makes
 * that fatal: the process aborts); confirm_conf:true reports each value
 * applied.
 *
 * An application sets its own string by defining this variable, e.g.
 * `const char *kvp_conf = "auto_cache_max:64";`: the library's
 * definition is weak, and the application's wins.
 */
KVP_API extern const char *kvp_conf;

/*
 * Writes the configuration in effect to f, one `key:value` line per key
 * in kvpool(3)'s order (the lines joined by commas are a valid KVP_CONF).
 * Reads the configuration first if no pool did yet.  Errors: -EINVAL
 * (NULL f), -EIO (f reports a write error).  Thread-safe.
 */
KVP_API int kvp_conf_write(FILE *f);

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
/* A data-owning pool keeps one vector per token and layer (K only; a
 * single-vector cache such as an MLA latent or a plain activation
 * cache): a block is [layer][token][head][dim], half the bytes, and the
 * data calls take and give V as NULL. */
#define KVP_POOL_K_ONLY (1u << 2)

struct kvp_pool_config {
	/* 0 .. KVP_MAX_BLOCKS.  0 is an empty pool (a device with no KV
	 * memory): every allocation of one block or more fails with
	 * -ENOSPC, sequences of 0 tokens work. */
	uint32_t num_blocks;
	uint32_t block_tokens; /* tokens per block, >= 1 */
	/*
	 * Per-thread cache capacity in blocks; 0 = automatic:
	 * min(auto_cache_max, num_blocks / (8 * online CPUs)), rounded down
	 * to even (auto_cache_max is a kvp_conf key, 128 by default), and no
	 * cache when that is below 2, so caches never strand a large share
	 * of a small pool.  At most KVP_MAX_CACHE_BLOCKS and at most
	 * num_blocks.
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
 * one reference.  Errors: -EINVAL (NULL argument, num_blocks above
 * KVP_MAX_BLOCKS, block_tokens 0, cache_blocks too large, unknown flag,
 * KVP_POOL_K_ONLY without a layout, invalid layout or a data size that
 * overflows), -ENOMEM.
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
 * The references count holders, not sequences: a sequence's block table
 * is a list of chunks of block ids that forks share, so a block in a
 * chunk that two forks share has one reference (the chunk's), and the
 * last block of each table, its tail, has one of its own.  References
 * taken with kvp_pool_alloc and kvp_block_ref count one each.
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

/*
 * The pool's configuration as in effect: num_blocks, block_tokens,
 * cache_blocks (the per-thread capacity chosen, 0 for none), device_id,
 * flags, and the layout, copied into *layout with out->layout pointing
 * to it (NULL for an ID-only pool; layout may then be NULL).  Errors:
 * -EINVAL (NULL pool or out, or NULL layout for a data-owning pool).
 */
KVP_API int kvp_pool_get_config(const struct kvp_pool *pool,
				struct kvp_pool_config *out,
				struct kvp_layout *layout);

struct kvp_pool_stats {
	uint64_t total;		   /* num_blocks */
	uint64_t free;		   /* free blocks, parked ones included */
	uint64_t used;		   /* total - free */
	uint64_t in_thread_caches; /* free blocks parked in thread caches */
	uint64_t peak_used;	   /* highest `used` seen; see below */
	/* References going 0 -> 1 since creation: blocks handed out by
	 * allocations, and cached blocks revived by prefix-cache hits. */
	uint64_t allocs;
	/* References going 1 -> 0: frees, and cached blocks going idle
	 * (they stay cached), so a hit and its release count in both. */
	uint64_t frees;
	uint32_t cache_blocks;	   /* per-thread cache capacity in effect */
	uint32_t threads;	   /* thread caches attached to the pool */
	/* Cached blocks nobody references (prefix caching), or only
	 * references threads parked (see kvp_thread_flush): counted in
	 * `free`, as allocation reclaims them, and shown apart here. */
	uint64_t evictable;
	uint64_t cache_evictions;  /* cached blocks reclaimed by allocations */
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
 * pool) to the pools' global stacks, and drops the references it parked
 * on cached blocks (a sequence's free parks those on the blocks it got as
 * prefix-cache hits, in pools of 1,024 blocks or more, so that the
 * thread's next hit on them needs no atomic operation; allocations short of blocks, resets
 * and manager destruction drop every thread's parked references
 * themselves).  It also hands back the sequence structs the thread keeps
 * for reuse, and asks their managers to return every wholly free slab of
 * them, and the allocator's free pages, to the system: after a burst of
 * sequences is freed, resident memory comes back two RCU grace periods
 * (a few milliseconds) after the call, off the caller's thread.  Threads
 * call it before sleeping for a long time, or after a burst; thread exit
 * does the first part automatically.
 */
KVP_API void kvp_thread_flush(void);

/* ------------------------------------------------------------------ */
/* Sequences                                                           */
/* ------------------------------------------------------------------ */

/*
 * A manager keeps the sequences of one model: seq_id (uint64) -> sequence
 * (token count, block table, access clock, priority) in an RCU lock-free
 * hash map.  Several managers may share one pool.
 *
 * Synchronisation table (manager):
 *
 *   operation                     may run concurrently with    note
 *   ----------------------------  ---------------------------  -----------
 *   kvp_seq_*, kvp_admit,         everything on any manager    calls on one
 *   kvp_evict*, kvp_export_*,     of any pool                  sequence are
 *   kvp_manager_stats/dump                                     serialised by
 *                                                              its own lock;
 *                                                              different
 *                                                              sequences
 *                                                              never contend
 *   kvp_seq_create_cached,        everything on any manager    hits take no
 *   kvp_seq_commit,               of any pool                  lock; releases
 *   kvp_prefix_reset                                           to zero,
 *                                                              evictions and
 *                                                              resets take the
 *                                                              pool's
 *                                                              evictable-list
 *                                                              lock briefly;
 *                                                              commits,
 *                                                              resets and
 *                                                              evictions of a
 *                                                              manager's
 *                                                              blocks take
 *                                                              its table's
 *                                                              store lock
 *   kvp_manager_set_event_cb      nothing on this manager      set before use
 *   kvp_manager_check             nothing on the pool          quiescence
 *   kvp_manager_destroy           nothing on this manager      -
 *
 * kvp_seq_fork (and kvp_seq_fork_n) racing kvp_seq_free of its source
 * either forks all of it or fails with -ENOENT.  No block is freed while a sequence holds it, none is
 * leaked.  Threads need no registration: a thread is registered with RCU on
 * first use and unregistered when it exits.
 */

enum kvp_policy {
	KVP_EVICT_LRU = 0,     /* least recently accessed first */
	KVP_EVICT_LFU = 1,     /* fewest accesses first (ties: LRU) */
	KVP_EVICT_LONGEST = 2, /* most tokens first (ties: LRU) */
	KVP_EVICT_PRIORITY = 3 /* lowest priority value first (ties: LRU) */
};

struct kvp_manager_config {
	struct kvp_pool *pool; /* the manager takes its own reference */
	enum kvp_policy policy;
	/* Utilisation (used / total blocks) at which eviction is due, in
	 * [0, 1]; 0 = the default 0.9 unless flags has KVP_EXACT_LIMITS.
	 * kvp_evict_until() with a negative target uses it. */
	float eviction_threshold;
	/* Fraction of the pool kept free at admission, in [0, 1); 0 = the
	 * default 0.01 unless flags has KVP_EXACT_LIMITS. */
	float watermark;
	uint32_t flags; /* KVP_PREFIX_CACHE, KVP_EXACT_LIMITS */
	/* Retention: at most this many of the manager's cached blocks are
	 * pinned (KVP_RETAIN_PIN) at once; 0 = the default, a quarter of
	 * the pool's blocks.  At most the pool's size. */
	uint32_t max_pinned;
	/* The manager's name: the `manager` label of its metrics
	 * (kvp_metrics_write).  1 to KVP_NAME_MAX - 1 bytes of UTF-8 with
	 * no control characters (C0, DEL, C1), copied; NULL = its id in
	 * decimal (kvp_manager_id).  Checked strictly: an overlong form, a
	 * surrogate (U+D800 to U+DFFF), a code point above U+10FFFF or a
	 * truncated sequence is -EINVAL. */
	const char *name;
};

/* Bytes of a manager's name, its terminating NUL included. */
#define KVP_NAME_MAX 64

/* Manager flags. */
#define KVP_PREFIX_CACHE (1u << 0) /* hash -> block prefix cache */
/* eviction_threshold and watermark are taken as given, 0 included: a
 * threshold of 0 makes eviction due as soon as one block is used, a
 * watermark of 0 keeps no block free at admission.  Without the flag a
 * 0 in either field means its default, as it always has. */
#define KVP_EXACT_LIMITS (1u << 1)
/* With KVP_PREFIX_CACHE (else -EINVAL): a kvp_seq_create_cached that
 * reuses cached blocks reports them to the event callback as one STORED
 * event (ev->reused 1), as vLLM's emit_cached_block_events does, so that
 * a router that missed their first STORED learns of them.  Off by
 * default: a router fed every commit needs none of these events. */
#define KVP_EMIT_CACHED_EVENTS (1u << 2)

struct kvp_manager;

/*
 * Creates a manager over cfg->pool (taking a pool reference).  Errors:
 * -EINVAL (NULL argument, NULL pool, unknown policy or flag, threshold or
 * watermark out of range or NaN), -ENOMEM.
 */
KVP_API int kvp_manager_create(const struct kvp_manager_config *cfg,
			       struct kvp_manager **out);

/*
 * Frees every sequence of the manager (their blocks return to the pool),
 * waits for deferred reclamation and drops the pool reference.  No other
 * thread may use the manager during or after the call.  NULL is ignored.
 */
KVP_API void kvp_manager_destroy(struct kvp_manager *m);

/*
 * The manager's configuration as in effect: its pool (no reference is
 * taken), its current policy, the threshold and watermark in use
 * (defaults resolved), its flags, max_pinned in use (0 without prefix
 * caching) and its name (pointing into the manager: valid while it
 * lives).  Errors: -EINVAL (NULL argument).  Thread-safe.
 */
KVP_API int kvp_manager_get_config(const struct kvp_manager *m,
				   struct kvp_manager_config *out);

/*
 * Changes the policy by which kvp_evict, kvp_evict_until and
 * kvp_evict_peek choose victims, on a manager that may hold sequences and
 * be in use by other threads: choices that start after the call use the
 * new policy.  Errors: -EINVAL (NULL manager, unknown policy; nothing
 * changes).
 */
KVP_API int kvp_manager_set_policy(struct kvp_manager *m,
				   enum kvp_policy policy);

/*
 * Lists the manager's sequences: their ids to ids[0..*n), in no
 * particular order.  A sequence alive throughout the call is listed
 * once; one created or freed during it may or may not be.  If cap is too
 * small, returns -ENOBUFS with the count seen in *n (call again with a
 * larger buffer: the count may have grown meanwhile).  Errors: -EINVAL
 * (NULL m or n, ids NULL with cap > 0), -ENOBUFS.
 */
KVP_API int kvp_manager_seqs(struct kvp_manager *m, uint64_t *ids,
			     uint32_t cap, uint32_t *n);

/* A copy the engine must perform: block src's first `tokens` token slots
 * into block dst (copy-on-write of a shared, partially filled block). */
struct kvp_copy {
	uint32_t src, dst, tokens;
};

/*
 * Creates sequence `seq` holding num_tokens tokens (0 allowed), allocating
 * ceil(num_tokens / block_tokens) blocks.  Errors: -EINVAL (NULL manager),
 * -EEXIST (id in use: checked first, whatever num_tokens), -ENOSPC (not
 * enough free blocks, also when num_tokens needs more blocks than the
 * pool has), -ENOMEM.
 */
KVP_API int kvp_seq_create(struct kvp_manager *m, uint64_t seq,
			   uint32_t num_tokens);

/*
 * Appends num_tokens token slots (0 only touches the access clock).  Blocks
 * are allocated as the last one fills.  If the last block is partially
 * filled and shared with another sequence (refcount > 1), it is replaced by
 * a fresh block and the copy is reported in cow[0] (*ncow = 1; with a
 * data-owning pool the bytes are already copied).  The engine must apply
 * reported copies before the source block can be reused, i.e. before any
 * block freed after this call is written (a GPU engine queues the copy
 * ahead of the step's kernels).  Errors: -EINVAL (NULL manager, cow NULL
 * with cow_cap > 0, token count overflow), -ENOENT, -ENOSPC (not enough
 * free blocks), -ENOBUFS (a copy is needed and cow_cap is 0: *ncow then
 * says 1), -ENOMEM.  On error nothing is allocated and nothing changes.
 * ncow may be NULL.
 */
KVP_API int kvp_seq_append(struct kvp_manager *m, uint64_t seq,
			   uint32_t num_tokens, struct kvp_copy *cow,
			   uint32_t cow_cap, uint32_t *ncow);

/* What an append did (kvp_seq_append_ex). */
struct kvp_append_info {
	/* The block holding the sequence's last token after the append
	 * (KVP_NO_BLOCK if it holds none): the new token's slot is
	 * last_block * block_tokens + (num_tokens - 1) % block_tokens. */
	uint32_t last_block;
	uint32_t num_tokens; /* the sequence's token count after it */
	/* Blocks it allocated: new table entries, plus a copy-on-write's
	 * destination. */
	uint32_t new_blocks;
};

#define KVP_NO_BLOCK UINT32_MAX

/*
 * kvp_seq_append, reporting in *info (not NULL) which block took the last
 * token and how many blocks were allocated.  Errors as kvp_seq_append,
 * and -EINVAL for a NULL info; on error *info is unchanged.
 */
KVP_API int kvp_seq_append_ex(struct kvp_manager *m, uint64_t seq,
			      uint32_t num_tokens, struct kvp_copy *cow,
			      uint32_t cow_cap, uint32_t *ncow,
			      struct kvp_append_info *info);

/*
 * Makes room in the block table of `seq` for num_tokens tokens in all,
 * so that appends up to that count allocate no host memory (they still
 * take their blocks from the pool, as any append does).  A count at or
 * below the sequence's own is a no-op.  The room is the sequence's, used
 * by whichever thread appends; it lasts until the sequence is freed or
 * its table shrinks (kvp_seq_truncate or kvp_seq_stream_trim freeing a
 * block), and a fork does not inherit it.  If a fork shares the
 * sequence's last partly filled run of its table, the run is copied now
 * rather than at the next append.  Errors: -EINVAL (NULL manager),
 * -ENOENT, -ENOSPC (more blocks than the pool has; nothing changes),
 * -ENOMEM (nothing changes).
 */
KVP_API int kvp_seq_reserve(struct kvp_manager *m, uint64_t seq,
			    uint32_t num_tokens);

/*
 * Appends num_tokens[i] token slots (one each if num_tokens is NULL) to
 * seqs[i], for i in order, each as kvp_seq_append does: for bindings whose
 * per-call cost exceeds the append's (one Python call appends to a whole
 * batch).  The copies of all appends go to cow[0..*ncow) in order (at most
 * one per sequence; an append needing a copy when cow is full fails with
 * -ENOBUFS).  Returns the number of sequences appended, nseq when all were.
 * It stops at the first append that fails: if that is seqs[0], it returns
 * that append's negative errno and nothing changed; otherwise it returns
 * how many were appended (seqs[0..ret) changed, the rest did not: call
 * again from seqs[ret] to learn the error).  Errors: -EINVAL (NULL m, seqs
 * NULL with nseq > 0, cow NULL with cow_cap > 0, nseq above INT32_MAX) and
 * kvp_seq_append's.  ncow may be NULL.
 * Buffers: nseq bounds the reads of seqs (all of seqs[0..nseq) may be
 * read, ahead of the appends, even when one fails) and of num_tokens
 * when it is not NULL (read up to the failing append); cow_cap bounds the
 * writes to cow (cow[0..cow_cap) at most, whatever nseq).
 */
KVP_API int kvp_seq_append_batch(struct kvp_manager *m, const uint64_t *seqs,
				 const uint32_t *num_tokens, uint32_t nseq,
				 struct kvp_copy *cow, uint32_t cow_cap,
				 uint32_t *ncow);

/*
 * Creates sequence dst sharing all of src's blocks (one more reference on
 * each) and its token count; priority is inherited, access counters start
 * afresh.  A fork counts as an access of src: src's access_count grows
 * and its last_access moves to now (just before dst's own), so LRU keeps
 * src over sequences untouched since, yet takes it before its fresh
 * forks, and LFU takes the fresh forks (fewer accesses) first.
 * Errors: -EINVAL, -ENOENT (src unknown, or freed concurrently),
 * -EEXIST (dst in use, including dst == src), -EOVERFLOW (a block would
 * exceed KVP_MAX_REFS), -ENOMEM.
 */
KVP_API int kvp_seq_fork(struct kvp_manager *m, uint64_t src, uint64_t dst);

/* kvp_seq_fork_n flags: the source's last access and access count stay as
 * they were (a fork that is not an access of the source, as a scheduler
 * that forks a prompt for sampling may want for LRU and LFU). */
#define KVP_FORK_KEEP_SOURCE (1u << 0)

/*
 * Creates the n sequences dsts[0..n), each as kvp_seq_fork(m, src,
 * dsts[i]) would, in one call: one lookup and one lock of src, its
 * references taken n at a time.  Unless flags has KVP_FORK_KEEP_SOURCE,
 * src's access moves once, as for one kvp_seq_fork.  All or nothing: on
 * any error no dsts[i] exists and nothing changed.  Errors, the first that
 * applies wins: -EINVAL (NULL m or dsts, n == 0, n above KVP_FORK_N_MAX,
 * an unknown flag); then, for dsts[0], dsts[1], ... in order, -EEXIST (the
 * id is in use, src included, or repeats an earlier dsts[j]) or -ENOMEM
 * (host memory for its struct); then -ENOENT (src unknown, or freed
 * concurrently); then -ENOMEM (host memory for the children's tables);
 * then -EOVERFLOW (a block would exceed KVP_MAX_REFS).
 */
#define KVP_FORK_N_MAX 65536u
KVP_API int kvp_seq_fork_n(struct kvp_manager *m, uint64_t src,
			   const uint64_t *dsts, uint32_t n, uint32_t flags);

/*
 * Removes a sequence and drops its blocks' references, last block first.
 * Errors: -EINVAL, -ENOENT.
 */
KVP_API int kvp_seq_free(struct kvp_manager *m, uint64_t seq);

/*
 * Rolls a sequence back to num_tokens tokens (<= its current count),
 * freeing the blocks no longer needed, last first.  Errors: -EINVAL,
 * -ENOENT, -ERANGE (num_tokens above the current count), -ENOMEM (host
 * memory for a private copy of a block-table chunk that a fork shares;
 * nothing changed).
 */
KVP_API int kvp_seq_truncate(struct kvp_manager *m, uint64_t seq,
			     uint32_t num_tokens);

/*
 * StreamingLLM trim: keeps the blocks holding the first sink_tokens tokens
 * (the attention sinks) and the blocks holding the last window_tokens
 * tokens, and frees the whole blocks between.  The sequence's token count
 * drops by the tokens freed, reported in *evicted_tokens (may be NULL;
 * always a multiple of block_tokens).  The partially filled last block is
 * always kept (window_tokens 0 keeps it too).  Errors: -EINVAL, -ENOENT,
 * -ENOMEM (host memory for a private copy of the table, needed only
 * while a fork shares it; nothing changed).
 */
KVP_API int kvp_seq_stream_trim(struct kvp_manager *m, uint64_t seq,
				uint32_t sink_tokens, uint32_t window_tokens,
				uint32_t *evicted_tokens);

/* Sets the priority used by KVP_EVICT_PRIORITY.  Errors: -EINVAL, -ENOENT. */
KVP_API int kvp_seq_set_priority(struct kvp_manager *m, uint64_t seq,
				 int32_t priority);

struct kvp_seq_info {
	uint32_t num_tokens, num_blocks;
	/* Logical clock at the last access (create, append, fork, trim):
	 * process-wide, strictly increasing within a thread, ordered across
	 * threads to within 1024 ticks. */
	uint64_t last_access;
	uint64_t access_count; /* create/append/fork-as-source count */
	int32_t priority;
};

/* Errors: -EINVAL (NULL argument), -ENOENT. */
KVP_API int kvp_seq_info(struct kvp_manager *m, uint64_t seq,
			 struct kvp_seq_info *info);

/*
 * Copies the block table to ids[0..*n).  If cap is too small, returns
 * -ENOBUFS with the needed count in *n.  Errors: -EINVAL (NULL m or n, ids
 * NULL with cap > 0), -ENOENT, -ENOBUFS.
 */
KVP_API int kvp_seq_blocks(struct kvp_manager *m, uint64_t seq, uint32_t *ids,
			   uint32_t cap, uint32_t *n);

/* kvp_admit results (vLLM's block manager, with watermark blocks =
 * watermark * total rounded down; 0.01f of 100 blocks is 1 block): */
#define KVP_ADMIT_OK 0    /* free - required >= watermark blocks */
#define KVP_ADMIT_LATER 1 /* not now; would fit an emptier pool */
#define KVP_ADMIT_NEVER 2 /* total - required < watermark blocks */

/*
 * Whether a new request of num_tokens tokens fits now: KVP_ADMIT_OK,
 * KVP_ADMIT_LATER or KVP_ADMIT_NEVER; -EINVAL for a NULL manager.  Advice
 * only: it reserves nothing.
 */
KVP_API int kvp_admit(struct kvp_manager *m, uint32_t num_tokens);

/*
 * Evicts (frees) one sequence chosen by the manager's policy and reports
 * its id in *victim (may be NULL).  Concurrent evictors never free the same
 * victim twice.  Errors: -EINVAL, -ENOENT (no sequence left).
 */
KVP_API int kvp_evict(struct kvp_manager *m, uint64_t *victim);

/*
 * Names the sequence kvp_evict would choose now, in *victim, without
 * evicting it: for schedulers that decide before they act.  Advice only,
 * as kvp_admit: another thread's append, fork or free may change the
 * choice before the next call.  Errors: -EINVAL (NULL argument), -ENOENT
 * (no sequence).
 */
KVP_API int kvp_evict_peek(struct kvp_manager *m, uint64_t *victim);

#define KVP_EVICT_PARTIAL 1

/*
 * Evicts sequences by policy until the pool's utilisation is at most
 * target_util (negative: the manager's eviction_threshold), reporting the
 * victims in victims[0..*n).  Returns 0 when the target is met, or
 * KVP_EVICT_PARTIAL when it stopped first because victims[] was full or
 * no sequence was left (the sequences reported are evicted either way).
 * Errors: -EINVAL (NULL m or n, victims NULL with cap > 0, target above 1
 * or NaN).
 */
KVP_API int kvp_evict_until(struct kvp_manager *m, float target_util,
			    uint64_t *victims, uint32_t cap, uint32_t *n);

struct kvp_stats {
	uint64_t sequences;	  /* live sequences */
	uint64_t tokens;	  /* tokens in live sequences */
	uint64_t seq_creates;	  /* kvp_seq_create successes */
	uint64_t seq_frees;	  /* sequences freed (incl. evictions) */
	uint64_t appends;	  /* kvp_seq_append successes */
	uint64_t forks;		  /* kvp_seq_fork successes, and kvp_seq_fork_n's
				     children */
	uint64_t evictions;	  /* sequences evicted */
	uint64_t cow_copies;	  /* copy-on-write copies reported */
	uint64_t blocks_allocated; /* blocks this manager took from the pool */
	/* Block-table entries this manager let go of (frees, rollbacks,
	 * trims, copy-on-write); forks add entries without allocating, so
	 * at quiescence released = allocated + the entries forks copied.
	 * (A block shared by forks is freed by the last of them.) */
	uint64_t blocks_released;
	uint64_t blocks_used;	  /* pool-wide used blocks (all managers) */
	uint64_t blocks_total;	  /* pool size */
	uint64_t bytes_per_block; /* 0 for an ID-only pool */
	/* Prefix cache (KVP_PREFIX_CACHE managers; 0 otherwise). */
	uint64_t prefix_queries;   /* tokens asked for by kvp_seq_create_cached */
	uint64_t prefix_hits;	   /* of which served from cached blocks */
	double prefix_hit_rate;	   /* hits / queries (0 with no queries) */
	uint64_t prefix_cached_blocks; /* blocks this manager caches now */
	uint64_t prefix_commits;   /* blocks registered by kvp_seq_commit */
	uint64_t prefix_evictions; /* its cached blocks evicted by the pool */
	uint64_t prefix_pinned;	   /* its cached blocks pinned now */
	uint64_t retention_clock;  /* its retention clock (kvp_manager_tick) */
	/* Full blocks kvp_seq_commit left uncached because another block
	 * already caches their hash (the commit still succeeds). */
	uint64_t prefix_uncached;
	/* Events handed to the manager's event callback (0 without one). */
	uint64_t events;
};

/*
 * Fills *st (exact at quiescence, approximate while threads run).  NULL
 * arguments are ignored.
 */
KVP_API void kvp_manager_stats(struct kvp_manager *m, struct kvp_stats *st);

/*
 * Adds *st into *acc, to total several managers' statistics (call it once
 * per kvp_manager_stats, on an *acc that starts zeroed).  Counters and
 * per-manager gauges are summed: sequences, tokens, seq_creates,
 * seq_frees, appends, forks, evictions, cow_copies, blocks_allocated,
 * blocks_released, prefix_queries, prefix_hits, prefix_cached_blocks,
 * prefix_commits, prefix_evictions, prefix_pinned.  The pool-wide values
 * blocks_used, blocks_total and bytes_per_block take the larger of the
 * two, since managers may share a pool and each reports the same pool
 * (managers of different pools: add their kvp_pool_stats instead), and so
 * does retention_clock (each manager has its own clock; a sum of clocks
 * counts nothing, the larger is the most advanced one).  prefix_hit_rate
 * is recomputed from the summed hits and queries (0 with no queries).
 * NULL arguments are ignored.  Reads and writes only the caller's two
 * structs: no lock, no barrier.
 */
KVP_API void kvp_stats_add(struct kvp_stats *acc, const struct kvp_stats *st);

/*
 * Writes a human-readable summary (blocks used / total and percent,
 * memory, sequences, allocations, frees, evictions, forks, copies) to f.
 * Errors: -EINVAL (NULL argument), -EIO (write error).
 */
KVP_API int kvp_manager_dump(struct kvp_manager *m, FILE *f);

/* The manager's process-unique id (0 for NULL): no two managers of a
 * process share one, even after a destroy. */
KVP_API uint64_t kvp_manager_id(const struct kvp_manager *m);

/* The manager's name (kvp_manager_config.name, or its id in decimal); it
 * lives as long as the manager.  NULL for NULL. */
KVP_API const char *kvp_manager_name(const struct kvp_manager *m);

/*
 * Checks, at quiescence, the pool (kvp_pool_check) and every manager of
 * the pool: each sequence's table matches its token count, each shared
 * chunk of a table is counted by exactly the tables that hold it, and each
 * block's reference count equals its holders across all managers of the
 * pool (see kvp_block_refcount; references taken directly with
 * kvp_pool_alloc/kvp_block_ref outside managers count as errors).
 * Returns 0 if sound, -EFAULT (details on stderr), -EINVAL, -ENOMEM.
 */
KVP_API int kvp_manager_check(struct kvp_manager *m);

/* ------------------------------------------------------------------ */
/* Kernel-facing exports                                               */
/* ------------------------------------------------------------------ */

/*
 * FlashAttention / vLLM block table: row i (stride entries) holds the
 * block ids of seqs[i] followed by `pad`.  With table NULL, returns the
 * stride needed (the longest table among seqs) instead.  Errors: -EINVAL
 * (NULL m, seqs NULL with nseq > 0), -ENOENT (an unknown sequence),
 * -ENOBUFS (a sequence has more than stride blocks).  On error the table's
 * contents are unspecified.
 * Buffers: nseq bounds the reads of seqs (seqs[0..nseq)); with table not
 * NULL, nseq x stride bounds the writes (table[0..nseq * stride): every
 * row is written in full, padded), so table must hold nseq * stride
 * entries.  With table NULL nothing is written.
 */
KVP_API int kvp_export_block_table(struct kvp_manager *m, const uint64_t *seqs,
				   uint32_t nseq, int32_t *table,
				   uint32_t stride, int32_t pad);

/*
 * FlashInfer paged layout: indptr[0..nseq] (indptr[0] = 0), the block ids
 * of all sequences in indices[0..indptr[nseq]), and last_page_len[i] in
 * [1, block_tokens] (0 for a sequence with no tokens).  With indices NULL,
 * returns the number of indices needed instead.  Errors: -EINVAL (NULL m,
 * seqs NULL with nseq > 0, or indices given without indptr, or without
 * last_page_len when nseq > 0), -ENOENT, -ENOBUFS (more than cap indices),
 * -EOVERFLOW (more than INT32_MAX).
 * Buffers: nseq bounds the reads of seqs (seqs[0..nseq)) and the writes
 * of indptr (indptr[0..nseq], nseq + 1 entries) and last_page_len
 * (last_page_len[0..nseq)); cap bounds the writes of indices
 * (indices[0..cap) at most).  With indices NULL nothing is written.
 */
KVP_API int kvp_export_csr(struct kvp_manager *m, const uint64_t *seqs,
			   uint32_t nseq, int32_t *indptr, int32_t *indices,
			   uint32_t cap, int32_t *last_page_len);

/*
 * Slot mapping of tokens first_pos .. first_pos + n - 1 of a sequence:
 * slots[i] = block * block_tokens + offset.  Errors: -EINVAL (NULL m, slots
 * NULL with n > 0), -ENOENT, -ERANGE (a position at or past the sequence's
 * token count).
 * Buffers: n bounds the writes (slots[0..n), all of them on success, none
 * on -ERANGE); a caller sizes slots from n, and n from the sequence's
 * tokens (kvp_seq_info), not from a count it was given.
 */
KVP_API int kvp_export_slot_mapping(struct kvp_manager *m, uint64_t seq,
				    uint32_t first_pos, uint32_t n,
				    int64_t *slots);

/* ------------------------------------------------------------------ */
/* Block hashes (prefix caching)                                       */
/* ------------------------------------------------------------------ */

/* A block hash: SHA-256 fills all 32 bytes, XXH3-128 the first 16. */
struct kvp_hash {
	uint8_t b[32];
};

enum kvp_hash_algo {
	KVP_HASH_SHA256 = 0,   /* default: collision resistant */
	KVP_HASH_XXH3_128 = 1, /* fast; keyed per process (or seeded) */
	/* vLLM's sha256_cbor, bit for bit (kvp_hash_set_cbor_seed): a
	 * kvpool node and a vLLM node agree on a prompt's block hashes. */
	KVP_HASH_SHA256_CBOR = 2,
};

/* Extra keys of a request. */
struct kvp_hash_keys {
	const void *salt; /* per-request or per-tenant salt, mixed into the
			     root block only; salt_len 0 = none */
	size_t salt_len;
	const char *lora; /* LoRA adapter name, mixed into every block;
			     NULL or "" = none */
};

/*
 * Hashes the ntokens / block_tokens full blocks of tokens (a partial last
 * block is not hashed): out[i] = H(out[i-1] or parent, or the root with
 * the salt when parent is NULL; the LoRA name; the tokens of block i).
 * Every field is tagged and length-prefixed, so different keys never
 * produce the same input; tokens are encoded little-endian, so hashes do
 * not depend on the host.  Hashing [a, b] from the root equals hashing
 * [b] with parent = the hash of [a].  out must hold ntokens /
 * block_tokens hashes: kvp_hash_blocks_cap takes its capacity and checks
 * it.  A pure function: thread-safe.
 * Returns the number of blocks hashed, or -EINVAL (unknown algorithm,
 * block_tokens 0, tokens NULL with ntokens > 0, out NULL with a block to
 * hash, salt NULL with salt_len > 0, more than INT32_MAX blocks), -EIO
 * (XXH3 without a seed, and no randomness for its secret when it was
 * first needed: the secret is drawn once per process).
 */
KVP_API int kvp_hash_blocks(enum kvp_hash_algo algo,
			    const struct kvp_hash *parent,
			    const struct kvp_hash_keys *keys,
			    const uint32_t *tokens, uint32_t ntokens,
			    uint32_t block_tokens, struct kvp_hash *out);

/*
 * kvp_hash_blocks into out[0..cap): the same hashes, or -ENOBUFS when
 * the ntokens / block_tokens blocks do not fit in cap (kvp_last_error
 * then says how many are needed; nothing is written).  Prefer it: a
 * prompt longer than the caller planned cannot overrun out.  Errors:
 * those of kvp_hash_blocks, -EINVAL for out NULL with cap > 0, and
 * -ENOBUFS.  A pure function apart from kvp_last_error's record:
 * thread-safe.
 */
KVP_API int kvp_hash_blocks_cap(enum kvp_hash_algo algo,
				const struct kvp_hash *parent,
				const struct kvp_hash_keys *keys,
				const uint32_t *tokens, uint32_t ntokens,
				uint32_t block_tokens, struct kvp_hash *out,
				uint32_t cap);

/*
 * Makes XXH3-128 block hashes use `seed` instead of the per-process random
 * secret, so that several processes (a cluster behind one router) agree.
 * Process-wide; call it before hashing starts.  Returns 0.
 */
KVP_API int kvp_hash_set_xxh3_seed(uint64_t seed);

/*
 * KVP_HASH_SHA256_CBOR reproduces vLLM's prefix-cache hashes (vLLM >= 0.10
 * with prefix_caching_hash_algo=sha256_cbor):
 *
 *   block hash = SHA-256(canonical CBOR of [parent hash (byte string),
 *                token ids (array of unsigned ints), extra keys (array of
 *                text strings) or null])
 *
 * with parent = NONE_HASH for the first block.  kvp_hash_blocks() passes
 * as extra keys of each block vLLM's: the LoRA name (keys->lora), then,
 * in the root block only, keys->salt as vLLM's cache_salt (its bytes are
 * taken as the UTF-8 text of the salt); none gives null.
 *
 * NONE_HASH = SHA-256(canonical CBOR of the seed string): vLLM's value
 * under PYTHONHASHSEED=seed.  kvp_hash_set_cbor_seed() sets it for the
 * process (call it before hashing; every node of a cluster, vLLM ones
 * included, uses the same seed); without it, kvp_hash_blocks() draws 32
 * random bytes once per process, as vLLM does without PYTHONHASHSEED
 * (-EIO if no randomness is available).  Errors: -EINVAL (NULL seed).
 */
KVP_API int kvp_hash_set_cbor_seed(const char *seed);

/* NONE_HASH for a seed, without setting it: *out = SHA-256(CBOR(seed)).
 * Errors: -EINVAL (NULL argument).  Pure; thread-safe. */
KVP_API int kvp_hash_cbor_seed_root(const char *seed, struct kvp_hash *out);

/*
 * One KVP_HASH_SHA256_CBOR block with any extra keys (vLLM's LoRA name,
 * multimodal hashes, cache salt, in vLLM's order): *out = SHA-256(CBOR
 * [parent, tokens[0..ntokens), [extra_keys...] or null when nextra_keys
 * is 0]).  Errors: -EINVAL (NULL parent or out, tokens NULL with ntokens
 * > 0, extra_keys NULL with nextra_keys > 0, a NULL key, more than 64
 * keys).  Pure; thread-safe.
 */
KVP_API int kvp_hash_cbor_block(const struct kvp_hash *parent,
				const uint32_t *tokens, uint32_t ntokens,
				const char *const *extra_keys,
				uint32_t nextra_keys, struct kvp_hash *out);

/*
 * The 64-bit form of a hash that vLLM puts in its KV events when
 * VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES is set, and that llm-d and Dynamo
 * index by: int.from_bytes(hash, "big") & (2**64 - 1), i.e. the last 8
 * bytes (b[24..31]) read big-endian.  0 for NULL.
 */
KVP_API uint64_t kvp_hash_to_u64(const struct kvp_hash *h);

/* ------------------------------------------------------------------ */
/* Prefix cache (managers created with KVP_PREFIX_CACHE)               */
/* ------------------------------------------------------------------ */

/*
 * A manager with KVP_PREFIX_CACHE maps block hashes to blocks.  Only full
 * blocks are cached.  A cached block whose last reference is dropped stays
 * cached and reusable ("evictable"); the pool counts it as free.  When an
 * allocation finds no never-cached free block on the global free list or
 * in the calling thread's cache, it evicts the least recently freed
 * evictable blocks (of any manager of the pool), which removes their
 * hashes from their managers.  A sequence's blocks are released last block
 * first, so a chain's end is evicted before its head.  Never-cached blocks
 * parked in other threads' caches (at most cache_blocks per thread) are
 * taken only when nothing is evictable.  In pools of 1,024 blocks or more
 * the order is approximate: a small allocation that must evict may evict
 * up to half a thread cache ahead into the thread's cache, and references
 * a free parked on the blocks its sequence hit (kvp_thread_flush) keep
 * those blocks out of the evictable order until they are dropped.
 *
 * Hits are lock-free (a probe of the manager's hash table inside an RCU
 * read-side section and one atomic transition per block); a revival
 * racing an eviction of the same block is decided by one compare-and-swap
 * on the block's state word.  Commits, evictions and resets of one
 * manager serialise on its table's store lock.
 *
 * Memory: the first such manager of a pool adds 69 bytes per pool block
 * (a cached block's hash, owner and retention in one 64-byte line, its
 * eviction-list link and list number); each such manager has a table of
 * 32 bytes per pool block, allocated and written by kvp_manager_create
 * (-ENOMEM if it cannot be), which never grows.
 */

/*
 * Creates sequence seq of num_tokens tokens, reusing the longest cached
 * prefix of hashes[0..nhashes) (hashes[i]: block i's chained hash, from
 * kvp_hash_blocks): it takes a reference on each hit block (reviving
 * evictable ones) and allocates the rest.  At most (num_tokens - 1) /
 * block_tokens blocks are hits, so the last token is always computed.
 * *cached_tokens (if not NULL) receives the tokens served from the cache
 * (hit blocks x block_tokens); the engine computes the rest.  A request
 * never evicts its own hits.  Errors: -EINVAL (NULL m, hashes NULL with
 * nhashes > 0, manager without KVP_PREFIX_CACHE), -EEXIST, -ENOSPC, -ENOMEM;
 * on error no reference count has moved and no block changed its place
 * in the eviction order.
 */
KVP_API int kvp_seq_create_cached(struct kvp_manager *m, uint64_t seq,
				  const struct kvp_hash *hashes,
				  uint32_t nhashes, uint32_t num_tokens,
				  uint32_t *cached_tokens);

/*
 * How many of hashes[0..nhashes) are cached by m now, counting from the
 * first and stopping at the first miss, in *cached_blocks: the hit that
 * kvp_seq_create_cached would take (before its cap on the last token),
 * for a scheduler that sizes a request before it admits it.  Takes no
 * reference, changes no statistic and no block's place in the eviction
 * order.  Advice, as kvp_admit: another thread's eviction or commit may
 * change the answer the moment after.  Lock-free.  Errors: -EINVAL (NULL
 * m or cached_blocks, hashes NULL with nhashes > 0, manager without
 * KVP_PREFIX_CACHE).
 * Buffers: nhashes bounds the reads of hashes (hashes[0..nhashes) at
 * most: the walk stops at the first miss); *cached_blocks is the only
 * write.
 */
KVP_API int kvp_prefix_match(struct kvp_manager *m,
			     const struct kvp_hash *hashes, uint32_t nhashes,
			     uint32_t *cached_blocks);

/*
 * Registers the sequence's full blocks under hashes[0..nhashes) (block
 * i under hashes[i]; hashes beyond the sequence's full blocks are
 * ignored, so a caller may pass the whole prompt's hashes early).  Blocks
 * already registered (hits, earlier commits) are skipped.  A hash another
 * block already caches leaves this block uncached (no merge).  Returns the
 * number of blocks newly cached (>= 0), or -EINVAL (NULL m, hashes NULL
 * with nhashes > 0, manager without KVP_PREFIX_CACHE, a stream-trimmed
 * sequence: its blocks no longer follow the hash chain), -ENOENT, -ENOMEM
 * (then the blocks registered before the failure stay registered, and the
 * call can be repeated).
 */
KVP_API int kvp_seq_commit(struct kvp_manager *m, uint64_t seq,
			   const struct kvp_hash *hashes, uint32_t nhashes);

/*
 * Retention (TensorRT-LLM's KvCacheRetentionConfig).  A
 * cached block has a retention priority from KVP_RETAIN_DEFAULT (0) to
 * KVP_RETAIN_PIN (15).  When an allocation must evict, it takes idle
 * cached blocks of the lowest priority first, least recently freed first
 * within a priority (as without retention); so a block is evicted only
 * when no idle block of a lower priority is left.  Pinned blocks
 * (KVP_RETAIN_PIN) are never evicted while pinned: an allocation that
 * would need them fails with -ENOSPC (they still count as evictable in
 * kvp_pool_stats), and they leave the cache only when their pin expires
 * or by kvp_prefix_reset.  A manager pins at most
 * kvp_manager_config.max_pinned blocks.
 *
 * A priority may last `duration` ticks of the manager's retention clock,
 * a logical clock the caller advances (kvp_manager_tick, e.g. once per
 * scheduler step; it starts at 0); then the block falls back to the
 * default priority, and joins the default priority's eviction order as
 * if just released.
 */
#define KVP_RETAIN_DEFAULT 0u
#define KVP_RETAIN_MAX 14u /* the highest priority below a pin */
#define KVP_RETAIN_PIN 15u /* pinned: capped per manager */

/*
 * Tokens [first_token, first_token + num_tokens) of a sequence (num_tokens
 * 0: to the end) at `priority` for `duration` ticks (0: until evicted or
 * reset).  A block takes the priority of the ranges that cover all of its
 * tokens, the highest if several do (and of those the longest duration);
 * blocks no range covers take the default.
 */
struct kvp_retention {
	uint32_t first_token, num_tokens;
	uint32_t priority; /* KVP_RETAIN_DEFAULT .. KVP_RETAIN_PIN */
	uint64_t duration; /* retention-clock ticks; 0 = no expiry */
};

/*
 * kvp_seq_commit with retention: the blocks it registers take their
 * priority from ranges[0..nranges) (none: the default), and blocks of the
 * sequence already cached by this manager (its prefix-cache hits, blocks
 * a fork sibling committed) are raised to it if it is higher than theirs
 * now, or get the later expiry if it is the same; a commit never lowers
 * a priority.  A block that would be pinned past the manager's cap gets
 * KVP_RETAIN_MAX instead and is counted in *unpinned (if not NULL; set
 * to 0 first).  Returns the blocks newly registered (as kvp_seq_commit),
 * or -EINVAL (as kvp_seq_commit, or ranges NULL with nranges > 0, a
 * priority above KVP_RETAIN_PIN), -ENOENT, -ENOMEM.
 */
KVP_API int kvp_seq_commit_retained(struct kvp_manager *m, uint64_t seq,
				    const struct kvp_hash *hashes,
				    uint32_t nhashes,
				    const struct kvp_retention *ranges,
				    uint32_t nranges, uint32_t *unpinned);

/*
 * Advances the manager's retention clock by `steps` ticks (0 allowed) and
 * returns idle blocks whose retention expired to the default priority;
 * the new time in *now if not NULL.  Errors: -EINVAL (NULL m, no prefix
 * cache), -ERANGE (the clock would pass 2^56 - 1; nothing changed).
 */
KVP_API int kvp_manager_tick(struct kvp_manager *m, uint64_t steps,
			     uint64_t *now);

/*
 * The retention of the block the manager caches under *hash: its priority
 * now and when it expires (0: never, or the default priority).  A
 * snapshot: the block may be evicted or raised right after.  Errors:
 * -EINVAL (NULL argument, no prefix cache), -ENOENT (not cached).
 */
KVP_API int kvp_prefix_retention(struct kvp_manager *m,
				 const struct kvp_hash *hash,
				 uint32_t *priority, uint64_t *expires);

/*
 * Forgets every cached block of the manager (vLLM's reset_prefix_cache,
 * e.g. after a weight update): the blocks go back to the free list.
 * Emits KVP_EVENT_CLEARED.  Errors: -EINVAL (NULL m, no prefix cache),
 * -EBUSY (a cached block is referenced by a sequence, or an allocation on
 * another thread is evicting one right now: nothing changed).
 */
KVP_API int kvp_prefix_reset(struct kvp_manager *m);

enum kvp_event_type {
	KVP_EVENT_STORED = 0,  /* blocks registered by kvp_seq_commit */
	KVP_EVENT_REMOVED = 1, /* a cached block was evicted */
	KVP_EVENT_CLEARED = 2  /* kvp_prefix_reset forgot everything */
};

struct kvp_event {
	enum kvp_event_type type;
	const struct kvp_hash *hashes; /* STORED, REMOVED; NULL for CLEARED */
	uint32_t nhashes;
	/* STORED: the hash of the block before hashes[0], NULL at the root. */
	const struct kvp_hash *parent;
	uint32_t block_tokens; /* STORED: tokens per block */
	uint32_t num_tokens;   /* STORED: tokens stored, nhashes x block_tokens */
	/* Fields below were added after the ones above (keep the order). */
	/* The manager's event number: 0, 1, 2, ... per manager, one per
	 * callback call (an event is one batch of hashes), in the order the
	 * callback is called (see kvp_manager_set_event_cb). */
	uint64_t seq;
	/* STORED: the tokens of the stored blocks, num_tokens of them, when
	 * the commit gave them (kvp_seq_commit_ex); else NULL. */
	const uint32_t *token_ids;
	/* STORED: the commit's LoRA adapter name and id (NULL / -1: none). */
	const char *lora_name;
	int64_t lora_id;
	/* STORED: extra keys hashed into every block of the event (vLLM's
	 * extra_keys; the LoRA name is one where the hash profile says so),
	 * nextra_keys strings; NULL / 0 when none. */
	const char *const *extra_keys;
	uint32_t nextra_keys;
	/* Where the blocks live ("GPU", "CPU", ...): the manager's medium
	 * (kvp_manager_set_event_medium), NULL if unset. */
	const char *medium;
	/* STORED: the retention priority the commit gave the blocks (one
	 * event per run of one priority; KVP_RETAIN_DEFAULT without
	 * retention); 0 for other events and for a reuse's STORED. */
	uint32_t priority;
	/* STORED: 1 when the event reports cached blocks that a
	 * kvp_seq_create_cached reused (KVP_EMIT_CACHED_EVENTS): hashes are
	 * the hit's, from the root (parent NULL), no tokens, LoRA or extra
	 * keys; 0 for a commit's STORED and for other events. */
	uint32_t reused;
};

typedef void (*kvp_event_cb)(const struct kvp_event *ev, void *arg);

/* What a commit tells the event callback about its blocks. */
struct kvp_commit_info {
	/* The sequence's tokens from position 0 (at least as many as the
	 * committed blocks cover), or NULL. */
	const uint32_t *tokens;
	uint32_t ntokens;
	const char *lora_name;	      /* NULL = none */
	int64_t lora_id;	      /* -1 = none */
	const char *const *extra_keys; /* NULL = none */
	uint32_t nextra_keys;
	/* Retention of the blocks committed (as kvp_seq_commit_retained,
	 * whose pins the cap refused are not reported here); NULL / 0: the
	 * default priority. */
	const struct kvp_retention *ranges;
	uint32_t nranges;
};

/*
 * kvp_seq_commit, and the STORED events it causes carry info's tokens
 * (those of the blocks stored), LoRA name and id and extra keys (all for
 * the duration of the callback); info's retention ranges apply as in
 * kvp_seq_commit_retained.  info NULL is kvp_seq_commit.  Errors: those
 * of kvp_seq_commit, and -EINVAL (info->tokens NULL with ntokens > 0,
 * extra_keys NULL with nextra_keys > 0, ranges NULL with nranges > 0, a
 * priority above KVP_RETAIN_PIN, tokens given but fewer than the blocks
 * to commit cover: nothing is committed).
 */
KVP_API int kvp_seq_commit_ex(struct kvp_manager *m, uint64_t seq,
			      const struct kvp_hash *hashes, uint32_t nhashes,
			      const struct kvp_commit_info *info);

/*
 * The medium every event of the manager names ("GPU", "CPU", "DISK"; at
 * most 15 bytes, copied); NULL clears it.  Set it before other threads
 * use the manager.  Errors: -EINVAL (NULL m, too long).
 */
KVP_API int kvp_manager_set_event_medium(struct kvp_manager *m,
					 const char *medium);

/*
 * Sets (cb NULL: clears) the manager's event callback.  It is called
 * synchronously by the thread whose call caused the event: STORED from
 * kvp_seq_commit (and from kvp_seq_create_cached's hits with
 * KVP_EMIT_CACHED_EVENTS: a block already stored, reported again while
 * the new sequence holds it, so never after its REMOVED), REMOVED from
 * any allocation on the pool (any manager's),
 * CLEARED from kvp_prefix_reset; so concurrently from several threads, but
 * for one hash always in the order the events happened (a block is stored
 * before it can be evicted, and a hash is stored again only after its
 * removal was reported; a reset waits for no eviction but fails with
 * -EBUSY while one of its blocks is being evicted, so no REMOVED follows
 * a CLEARED for a block stored before it).  Every event of a manager is
 * delivered under the manager's event lock, so the calls of one manager
 * never overlap and ev->seq numbers them in delivery order: per hash,
 * STORED has a lower seq than the REMOVED that follows it, and CLEARED a
 * higher seq than every event before it.  The event's arrays live for
 * the call only.
 * The callback must not call kvpool functions on the pool.  Set it before
 * other threads use the manager.  Errors: -EINVAL (NULL m).
 */
KVP_API int kvp_manager_set_event_cb(struct kvp_manager *m, kvp_event_cb cb,
				     void *arg);

/* ------------------------------------------------------------------ */
/* KV data (data-owning pools)                                         */
/* ------------------------------------------------------------------ */

/*
 * A data-owning pool (created with a layout) stores each block as
 * [layer][K,V][token][head][dim] elements of the layout's dtype
 * ([layer][token][head][dim] with KVP_POOL_K_ONLY).  One token's K (or
 * V) for one layer is a row of num_kv_heads * head_dim elements.  A
 * K_ONLY pool has no V: its data calls take V (v, v_out) as NULL, and a
 * non-NULL V is -EINVAL; any other pool needs both.
 *
 * Writes go only to blocks the sequence holds alone: writing into a block
 * shared with a fork would change the fork's data too, so it fails with
 * -EBUSY (append first: copy-on-write gives the sequence its own copy of
 * a shared last block).  Reads and gathers of one sequence are consistent
 * with its writes (the sequence's lock orders them); the caller orders
 * them with its own kernels.  A data-owning pool of 0 blocks is
 * data-owning all the same: its sequences hold no token, so every
 * position is out of range (-ERANGE), never -EINVAL.
 */

/*
 * Writes the K and V rows of token `pos` of a sequence for one layer.
 * Errors: -EINVAL (NULL argument, ID-only pool, layer out of range),
 * -ENOENT, -ERANGE (pos at or past the sequence's token count), -EBUSY
 * (the block is shared).
 */
KVP_API int kvp_seq_write(struct kvp_manager *m, uint64_t seq, uint32_t pos,
			  uint32_t layer, const void *k, const void *v);

/* Reads them back; errors as kvp_seq_write, without -EBUSY. */
KVP_API int kvp_seq_read(struct kvp_manager *m, uint64_t seq, uint32_t pos,
			 uint32_t layer, void *k, void *v);

/*
 * Copies one layer of a whole sequence into contiguous
 * [num_tokens][num_kv_heads][head_dim] arrays k_out and v_out (the
 * caller sizes them from kvp_seq_info).  Errors: -EINVAL (NULL argument,
 * ID-only pool, layer out of range), -ENOENT.
 */
KVP_API int kvp_seq_gather(struct kvp_manager *m, uint64_t seq, uint32_t layer,
			   void *k_out, void *v_out);

/*
 * kvp_seq_gather into arrays of cap_tokens rows each, checked under the
 * sequence's lock (another thread may append between a caller's
 * kvp_seq_info and the copy).  Returns the tokens copied (the sequence's
 * length then), or -ENOBUFS when they exceed cap_tokens or INT_MAX
 * (nothing is written; kvp_last_error has the tokens needed and the
 * capacity), or the errors of kvp_seq_gather.
 */
KVP_API int kvp_seq_gather_cap(struct kvp_manager *m, uint64_t seq,
			       uint32_t layer, void *k_out, void *v_out,
			       uint32_t cap_tokens);

/* Bytes of one token's K (or V) row for one layer (0 for an ID-only or
 * NULL pool). */
KVP_API size_t kvp_pool_row_bytes(const struct kvp_pool *pool);

/* ------------------------------------------------------------------ */
/* Metrics                                                             */
/* ------------------------------------------------------------------ */

/* kvp_metrics_write flags. */
#define KVP_METRICS_PROMETHEUS (1u << 0) /* Prometheus text 0.0.4 */
#define KVP_METRICS_NO_EOF (1u << 1)	 /* leave out the closing "# EOF" */

/*
 * Renders the counters and gauges of pool and of managers[0..n) as
 * OpenMetrics 1.0 text (or, with KVP_METRICS_PROMETHEUS, the Prometheus
 * text format 0.0.4), the way a Prometheus scrape reads them.  Every
 * family has HELP and TYPE lines; pool families have no label, manager
 * families a `manager` label (kvp_manager_name).  The OpenMetrics text
 * ends with "# EOF" unless KVP_METRICS_NO_EOF asks to append more
 * families first (libkvpool-events' kvp_pub_metrics_write).  Families,
 * names and meanings are listed in kvpool(3).  Counters never decrease;
 * gauges are recent values (exact at quiescence, when the pool's block
 * states sum to its size).  Reading takes no lock that a block or
 * sequence operation takes.  Errors: -EINVAL (NULL pool or f, NULL
 * managers with n > 0, a NULL manager, a manager of another pool, one
 * given twice or two with one name, an unknown flag), -ENOMEM, -EIO
 * (write error).
 */
KVP_API int kvp_metrics_write(struct kvp_pool *pool,
			      struct kvp_manager *const *managers, uint32_t n,
			      uint32_t flags, FILE *f);

/*
 * As kvp_metrics_write, into buf[0..cap): the text's length in *len and a
 * NUL after it.  Errors: as kvp_metrics_write without -EIO, NULL len or
 * (with cap > 0) buf; -ENOBUFS when cap <= the length, *len then saying
 * the length (a later call may need more: counters grow).
 */
KVP_API int kvp_metrics_format(struct kvp_pool *pool,
			       struct kvp_manager *const *managers,
			       uint32_t n, uint32_t flags, char *buf,
			       size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_H */
