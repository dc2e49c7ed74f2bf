/* SPDX-License-Identifier: MIT */
/*
 * model.h - a reference model of kvpool's public semantics, for tests only
 * (tests/fuzz_api.c, tests/check_faults.c).
 *
 * Small, single-threaded and obviously correct: arrays and linear scans,
 * no caches, no atomics.  It predicts every return code and everything a
 * single thread can observe deterministically: reference counts and the
 * free count, each sequence's tokens, block table, access count, priority
 * and the order of its access clock, copies reported by appends, victims
 * of eviction, admission, exports, the KV rows of data-owning pools (where
 * kvpool.h fixes them), and the counters of kvp_pool_stats and
 * kvp_manager_stats that are exact at quiescence.
 *
 * Block ids.  Which free block an allocation returns is the library's
 * choice, so the model adopts the library's: the model_* call of an
 * operation that allocates takes the ids the library reported (its block
 * table after the call, or the ids kvp_pool_alloc wrote) and checks that
 * they were a legal choice (in range, free, distinct).  Every other id is
 * then fixed by the semantics, and block tables, copies, exports and slot
 * mappings compare exactly.  An illegal choice is recorded with
 * model_fail() and reported by model_error().
 *
 * Calling convention.  model_X(...) mirrors kvp_X(...) and returns the
 * return value kvpool.h promises; it changes the model only if that is a
 * success.  `chosen` arguments are the library's ids after a successful
 * call: NULL when the library failed (then the model changes nothing; the
 * caller reports the mismatch).  NULL pointers the header lists as
 * -EINVAL are passed as flags (`null_*`), and a NULL manager as mm NULL.
 */
#ifndef KVP_TEST_MODEL_H
#define KVP_TEST_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"

#define MODEL_MAX_MGRS 4
#define MODEL_MAX_ROW 64 /* bytes of one row the model keeps */

struct model_mgr;

/* An event as the model expects it, one per hash (STORED and REMOVED
 * events of the library are split into their hashes; how the library
 * batches them is its own choice). */
struct model_event {
	const struct model_mgr *mgr;
	enum kvp_event_type type;
	struct kvp_hash hash;	/* STORED, REMOVED */
	bool has_parent;	/* STORED: not at the root */
	struct kvp_hash parent; /* STORED: the block before's hash */
};

#define MODEL_MAX_EVENTS 256
#define MODEL_MAX_HITS 4096 /* hit blocks of one cached create */

struct model_pool {
	uint32_t num_blocks, block_tokens;
	uint32_t flags; /* KVP_POOL_* */
	uint32_t *refs; /* references per block, 0 = free */
	uint64_t free;
	uint64_t allocs, frees; /* kvp_pool_stats counters */
	/* KV data of a data-owning pool: rows [block][layer][K,V][token],
	 * row_bytes each, with a `known` flag per row (a block allocated
	 * without KVP_POOL_ZERO holds bytes the header does not fix). */
	bool has_data;
	uint32_t num_layers;
	size_t row_bytes, block_bytes;
	uint8_t *data, *known;
	/* Prefix caching: cached[b] with owner[b]'s map holding hash[b];
	 * a cached block with no reference is evictable, and the one with
	 * the smallest freed_at (least recently freed) goes first. */
	bool *cached;
	const struct model_mgr **owner;
	struct kvp_hash *hash;
	uint64_t *freed_at;
	/* Retention of cached block b: prio[b] until expires[b] (0: never)
	 * on its owner's clock, then the default (kvpool.h).  Evictions
	 * take the lowest priority first, least recently freed first within
	 * it, never a pin. */
	uint8_t *prio;
	uint64_t *expires;
	uint64_t release_tick;
	uint64_t cache_evictions;
	struct model_event events[MODEL_MAX_EVENTS];
	uint32_t nevents; /* since the caller last cleared them */
	/* The process-wide access clock, as far as these managers see it. */
	uint64_t clock;
	struct model_mgr *mgrs[MODEL_MAX_MGRS];
	char err[512]; /* first illegal choice of the library, or "" */
};

struct model_seq {
	uint64_t id;
	uint32_t tokens, nblocks, cap;
	uint32_t *blocks;
	uint64_t last_access, access_count;
	int32_t priority;
	uint32_t committed; /* blocks [0, committed) were offered to commit */
	bool trimmed;	    /* stream-trimmed: commit refuses it */
};

struct model_mgr {
	struct model_pool *pool;
	enum kvp_policy policy;
	float eviction_threshold, watermark; /* defaults applied */
	uint32_t flags;
	struct model_seq *seqs; /* live sequences, in creation order */
	uint32_t nseqs, cap;
	uint64_t clock;		     /* retention clock */
	uint32_t pinned, max_pinned; /* blocks whose word pins them; cap */
	struct kvp_stats st; /* the counters the model keeps */
};

/* --- pools --- */

/* The return value of kvp_pool_create(cfg, out) (0: valid). */
int model_pool_config_rc(const struct kvp_pool_config *cfg, bool null_out);
/* A model of a pool created from a valid cfg; NULL only if out of memory. */
struct model_pool *model_pool_new(const struct kvp_pool_config *cfg);
void model_pool_delete(struct model_pool *mp);
int model_pool_alloc(struct model_pool *mp, bool null_pool, bool null_ids,
		     uint32_t n, const uint32_t *chosen);
int model_pool_free(struct model_pool *mp, bool null_pool, bool null_ids,
		    const uint32_t *ids, uint32_t n, int *alt_rc);
int model_block_ref(struct model_pool *mp, uint32_t id);
int model_block_refcount(const struct model_pool *mp, uint32_t id);
void model_pool_stats(const struct model_pool *mp, struct kvp_pool_stats *st);
/* Blocks held by no sequence of any manager (raw kvp_pool_alloc). */
uint64_t model_pool_raw_refs(const struct model_pool *mp);

/* --- managers --- */

int model_manager_config_rc(const struct kvp_manager_config *cfg,
			    bool null_out);
/* A manager of mp from a valid cfg (registered with mp). */
struct model_mgr *model_mgr_new(struct model_pool *mp,
				const struct kvp_manager_config *cfg);
/* kvp_manager_destroy: frees every sequence (in an order kvpool.h leaves
 * open). */
void model_mgr_delete(struct model_mgr *mm);
void model_manager_stats(const struct model_mgr *mm, struct kvp_stats *st);
int model_manager_check(const struct model_mgr *mm);

/* --- sequences --- */

const struct model_seq *model_seq_find(const struct model_mgr *mm,
				       uint64_t id);
int model_seq_create(struct model_mgr *mm, uint64_t id, uint32_t tokens,
		     const uint32_t *chosen);
/* *cow_out receives the copy a successful append reports (if *ncow_out
 * is 1); *ncow_out is set where kvpool.h fixes it: on success, and to 1
 * with -ENOBUFS when a copy is needed and cow_cap is 0; else left alone. */
int model_seq_append(struct model_mgr *mm, uint64_t id, uint32_t n,
		     bool null_cow, uint32_t cow_cap, const uint32_t *chosen,
		     struct kvp_copy *cow_out, uint32_t *ncow_out);
int model_seq_fork(struct model_mgr *mm, uint64_t src, uint64_t dst);
int model_seq_fork_n(struct model_mgr *mm, uint64_t src,
		     const uint64_t *dsts, uint32_t n, uint32_t flags);
int model_seq_free(struct model_mgr *mm, uint64_t id);
int model_seq_truncate(struct model_mgr *mm, uint64_t id, uint32_t tokens);
int model_seq_stream_trim(struct model_mgr *mm, uint64_t id, uint32_t sink,
			  uint32_t window, uint32_t *evicted);
int model_seq_set_priority(struct model_mgr *mm, uint64_t id, int32_t prio);
int model_seq_info(const struct model_mgr *mm, uint64_t id, bool null_info,
		   struct kvp_seq_info *info);
int model_seq_blocks(const struct model_mgr *mm, uint64_t id, bool null_ids,
		     uint32_t cap, bool null_n, uint32_t *ids, uint32_t *n);

/* --- prefix cache --- */

/* *cached_out: tokens served from the cache, on success. */
/* kvp_prefix_match: the leading hashes cached now. */
int model_prefix_match(const struct model_mgr *mm,
		       const struct kvp_hash *hashes, uint32_t nhashes,
		       bool null_hashes, bool null_out, uint32_t *cached);
int model_seq_create_cached(struct model_mgr *mm, uint64_t id,
			    const struct kvp_hash *hashes, uint32_t nhashes,
			    bool null_hashes, uint32_t tokens,
			    const uint32_t *chosen, uint32_t *cached_out);
int model_seq_commit(struct model_mgr *mm, uint64_t id,
		     const struct kvp_hash *hashes, uint32_t nhashes,
		     bool null_hashes);
int model_prefix_reset(struct model_mgr *mm);
/* kvp_seq_commit_retained; *unpinned_out set on success (and to 0 before
 * the checks, as the library does, when not NULL). */
int model_seq_commit_retained(struct model_mgr *mm, uint64_t id,
			      const struct kvp_hash *hashes, uint32_t nhashes,
			      bool null_hashes,
			      const struct kvp_retention *ranges,
			      uint32_t nranges, bool null_ranges,
			      uint32_t *unpinned_out);
int model_manager_tick(struct model_mgr *mm, uint64_t steps, uint64_t *now);
int model_prefix_retention(const struct model_mgr *mm, const struct kvp_hash *h,
			   uint32_t *prio, uint64_t *expires);
/* kvp_manager_create's check of max_pinned against the pool's size
 * (model_manager_config_rc cannot see the pool): 0 or -EINVAL. */
int model_manager_pins_rc(const struct kvp_manager_config *cfg,
			  uint32_t pool_blocks);
/* Evictable blocks (cached, no reference). */
uint64_t model_evictable(const struct model_pool *mp);

/*
 * The approximate eviction order (doc/architecture.md, "Idle rings"): an
 * allocation may evict blocks ahead of its need into its thread's cache.
 * Accepts, after a call, one more eviction the library reported (a
 * REMOVED event of manager mm for hash h) if it is the next block in
 * eviction order (the least recently freed evictable one of the lowest
 * priority, never a pin): the block loses its hash and stays free
 * (never-cached now), the model's own REMOVED event is recorded.
 * Returns false (recorded) otherwise.
 */
bool model_evicted_ahead(struct model_pool *mp, const struct model_mgr *mm,
			 const struct kvp_hash *h);

/* --- admission, eviction --- */

int model_admit(const struct model_mgr *mm, uint32_t tokens);
int model_evict(struct model_mgr *mm, uint64_t *victim);
/* kvp_evict_peek: the victim kvp_evict would take, kept. */
int model_evict_peek(const struct model_mgr *mm, bool null_victim,
		     uint64_t *victim);
/* kvp_manager_set_policy (policy as an int: out-of-range values too). */
int model_set_policy(struct model_mgr *mm, int policy);
/* kvp_manager_seqs: the ids in the model's order (creation order). */
int model_seqs(const struct model_mgr *mm, bool null_ids, uint32_t cap,
	       bool null_n, uint64_t *ids, uint32_t *n);
/* kvp_seq_reserve: a reservation changes nothing the model sees. */
int model_seq_reserve(const struct model_mgr *mm, uint64_t id,
		      uint32_t tokens);
int model_evict_until(struct model_mgr *mm, float target, bool null_victims,
		      uint32_t cap, bool null_n, uint64_t *victims,
		      uint32_t *n);

/* --- exports (expected outputs are written on success only) --- */

int model_export_block_table(const struct model_mgr *mm, const uint64_t *seqs,
			     uint32_t nseq, bool null_seqs, bool null_table,
			     int32_t *table, uint32_t stride, int32_t pad);
int model_export_csr(const struct model_mgr *mm, const uint64_t *seqs,
		     uint32_t nseq, bool null_seqs, bool null_indptr,
		     bool null_indices, bool null_lpl, int32_t *indptr,
		     int32_t *indices, uint32_t cap, int32_t *lpl);
int model_export_slot_mapping(const struct model_mgr *mm, uint64_t id,
			      uint32_t first, uint32_t n, bool null_slots,
			      int64_t *slots);

/* --- KV data --- */

int model_seq_write(struct model_mgr *mm, uint64_t id, uint32_t pos,
		    uint32_t layer, const void *k, const void *v);
/* Expected rows in k, v; known[0] / known[1]: whether the header fixes
 * the K / V row's bytes. */
int model_seq_read(const struct model_mgr *mm, uint64_t id, uint32_t pos,
		   uint32_t layer, bool null_buf, void *k, void *v,
		   bool known[2]);
/* Expected gather; known_rows[i]: token i's K and V rows are fixed. */
int model_seq_gather(const struct model_mgr *mm, uint64_t id, uint32_t layer,
		     bool null_buf, void *k, void *v, bool *known_rows);

/* --- diagnostics --- */

void model_fail(struct model_pool *mp, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The first illegal choice recorded, or NULL. */
const char *model_error(const struct model_pool *mp);

#endif /* KVP_TEST_MODEL_H */
