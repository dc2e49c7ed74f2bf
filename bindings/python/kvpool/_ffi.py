# SPDX-License-Identifier: MIT
"""The C ABI of libkvpool, declared for cffi in ABI mode (no compiler).

Only what the Python classes call is declared.  Structs are declared
whole; struct kvp_event's size is not compared (the library passes it by
pointer, so fields it appends later are simply not read).  tests/test_kvpool.py's TestABI compiles every struct
declared here against include/kvpool.h and compares sizes and offsets
(PARTIAL names the structs whose size it does not compare).
"""
import os

import cffi

CDEF = """
const char *kvp_strerror(int err);
struct kvp_error_info {
    int err;
    uint32_t buffer;
    uint64_t requested, available;
};
int kvp_last_error(struct kvp_error_info *out);

struct kvp_layout { uint32_t num_layers, num_kv_heads, head_dim; int dtype; };
struct kvp_pool_config {
    uint32_t num_blocks, block_tokens, cache_blocks;
    int32_t device_id;
    const struct kvp_layout *layout;
    uint32_t flags;
};
struct kvp_pool;
int kvp_pool_create(const struct kvp_pool_config *cfg, struct kvp_pool **out);
struct kvp_pool *kvp_pool_ref(struct kvp_pool *pool);
void kvp_pool_unref(struct kvp_pool *pool);
int kvp_pool_alloc(struct kvp_pool *pool, uint32_t n, uint32_t *ids);
int kvp_pool_free(struct kvp_pool *pool, const uint32_t *ids, uint32_t n);
int kvp_block_ref(struct kvp_pool *pool, uint32_t id);
int kvp_block_refcount(struct kvp_pool *pool, uint32_t id);
void *kvp_block_data(struct kvp_pool *pool, uint32_t id);
size_t kvp_block_bytes(const struct kvp_pool *pool);
uint32_t kvp_pool_block_tokens(const struct kvp_pool *pool);
int kvp_pool_get_config(const struct kvp_pool *pool,
                        struct kvp_pool_config *out,
                        struct kvp_layout *layout);
size_t kvp_pool_row_bytes(const struct kvp_pool *pool);
struct kvp_pool_stats {
    uint64_t total, free, used, in_thread_caches, peak_used, allocs, frees;
    uint32_t cache_blocks, threads;
    uint64_t evictable, cache_evictions;
};
void kvp_pool_stats(struct kvp_pool *pool, struct kvp_pool_stats *st);
int kvp_pool_check(struct kvp_pool *pool);
void kvp_thread_flush(void);

struct kvp_manager_config {
    struct kvp_pool *pool;
    int policy;
    float eviction_threshold, watermark;
    uint32_t flags;
    uint32_t max_pinned;
    const char *name;
};
struct kvp_manager;
int kvp_manager_create(const struct kvp_manager_config *cfg,
                       struct kvp_manager **out);
void kvp_manager_destroy(struct kvp_manager *m);
int kvp_manager_get_config(const struct kvp_manager *m,
                           struct kvp_manager_config *out);
int kvp_manager_set_policy(struct kvp_manager *m, int policy);
int kvp_manager_seqs(struct kvp_manager *m, uint64_t *ids, uint32_t cap,
                     uint32_t *n);
struct kvp_copy { uint32_t src, dst, tokens; };
int kvp_seq_create(struct kvp_manager *m, uint64_t seq, uint32_t num_tokens);
int kvp_seq_append(struct kvp_manager *m, uint64_t seq, uint32_t num_tokens,
                   struct kvp_copy *cow, uint32_t cow_cap, uint32_t *ncow);
struct kvp_append_info { uint32_t last_block, num_tokens, new_blocks; };
int kvp_seq_append_ex(struct kvp_manager *m, uint64_t seq,
                      uint32_t num_tokens, struct kvp_copy *cow,
                      uint32_t cow_cap, uint32_t *ncow,
                      struct kvp_append_info *info);
int kvp_seq_reserve(struct kvp_manager *m, uint64_t seq, uint32_t num_tokens);
int kvp_seq_append_batch(struct kvp_manager *m, const uint64_t *seqs,
                         const uint32_t *num_tokens, uint32_t nseq,
                         struct kvp_copy *cow, uint32_t cow_cap,
                         uint32_t *ncow);
int kvp_seq_fork(struct kvp_manager *m, uint64_t src, uint64_t dst);
int kvp_seq_fork_n(struct kvp_manager *m, uint64_t src, const uint64_t *dsts,
                   uint32_t n, uint32_t flags);
int kvp_seq_free(struct kvp_manager *m, uint64_t seq);
int kvp_seq_truncate(struct kvp_manager *m, uint64_t seq, uint32_t num_tokens);
int kvp_seq_stream_trim(struct kvp_manager *m, uint64_t seq,
                        uint32_t sink_tokens, uint32_t window_tokens,
                        uint32_t *evicted_tokens);
int kvp_seq_set_priority(struct kvp_manager *m, uint64_t seq, int32_t priority);
struct kvp_seq_info {
    uint32_t num_tokens, num_blocks;
    uint64_t last_access, access_count;
    int32_t priority;
};
int kvp_seq_info(struct kvp_manager *m, uint64_t seq, struct kvp_seq_info *info);
int kvp_seq_blocks(struct kvp_manager *m, uint64_t seq, uint32_t *ids,
                   uint32_t cap, uint32_t *n);
int kvp_admit(struct kvp_manager *m, uint32_t num_tokens);
int kvp_evict(struct kvp_manager *m, uint64_t *victim);
int kvp_evict_peek(struct kvp_manager *m, uint64_t *victim);
int kvp_evict_until(struct kvp_manager *m, float target_util,
                    uint64_t *victims, uint32_t cap, uint32_t *n);
struct kvp_stats {
    uint64_t sequences, tokens, seq_creates, seq_frees, appends, forks,
             evictions, cow_copies, blocks_allocated, blocks_released,
             blocks_used, blocks_total, bytes_per_block, prefix_queries,
             prefix_hits;
    double prefix_hit_rate;
    uint64_t prefix_cached_blocks, prefix_commits, prefix_evictions;
    uint64_t prefix_pinned, retention_clock;
    uint64_t prefix_uncached, events;
};
void kvp_manager_stats(struct kvp_manager *m, struct kvp_stats *st);
uint64_t kvp_manager_id(const struct kvp_manager *m);
const char *kvp_manager_name(const struct kvp_manager *m);
int kvp_metrics_format(struct kvp_pool *pool,
                       struct kvp_manager *const *managers, uint32_t n,
                       uint32_t flags, char *buf, size_t cap, size_t *len);
int kvp_manager_check(struct kvp_manager *m);

int kvp_export_block_table(struct kvp_manager *m, const uint64_t *seqs,
                           uint32_t nseq, int32_t *table, uint32_t stride,
                           int32_t pad);
int kvp_export_csr(struct kvp_manager *m, const uint64_t *seqs, uint32_t nseq,
                   int32_t *indptr, int32_t *indices, uint32_t cap,
                   int32_t *last_page_len);
int kvp_export_slot_mapping(struct kvp_manager *m, uint64_t seq,
                            uint32_t first_pos, uint32_t n, int64_t *slots);

struct kvp_hash { uint8_t b[32]; };
struct kvp_hash_keys { const void *salt; size_t salt_len; const char *lora; };
int kvp_hash_blocks(int algo, const struct kvp_hash *parent,
                    const struct kvp_hash_keys *keys, const uint32_t *tokens,
                    uint32_t ntokens, uint32_t block_tokens,
                    struct kvp_hash *out);
int kvp_hash_blocks_cap(int algo, const struct kvp_hash *parent,
                        const struct kvp_hash_keys *keys,
                        const uint32_t *tokens, uint32_t ntokens,
                        uint32_t block_tokens, struct kvp_hash *out,
                        uint32_t cap);
int kvp_hash_set_xxh3_seed(uint64_t seed);
int kvp_hash_set_cbor_seed(const char *seed);
int kvp_hash_cbor_seed_root(const char *seed, struct kvp_hash *out);
int kvp_hash_cbor_block(const struct kvp_hash *parent, const uint32_t *tokens,
                        uint32_t ntokens, const char *const *extra_keys,
                        uint32_t nextra_keys, struct kvp_hash *out);
uint64_t kvp_hash_to_u64(const struct kvp_hash *h);
int kvp_prefix_match(struct kvp_manager *m, const struct kvp_hash *hashes,
                     uint32_t nhashes, uint32_t *cached_blocks);
int kvp_seq_create_cached(struct kvp_manager *m, uint64_t seq,
                          const struct kvp_hash *hashes, uint32_t nhashes,
                          uint32_t num_tokens, uint32_t *cached_tokens);
int kvp_seq_commit(struct kvp_manager *m, uint64_t seq,
                   const struct kvp_hash *hashes, uint32_t nhashes);
struct kvp_retention {
    uint32_t first_token, num_tokens;
    uint32_t priority;
    uint64_t duration;
};
int kvp_seq_commit_retained(struct kvp_manager *m, uint64_t seq,
                            const struct kvp_hash *hashes, uint32_t nhashes,
                            const struct kvp_retention *ranges,
                            uint32_t nranges, uint32_t *unpinned);
int kvp_manager_tick(struct kvp_manager *m, uint64_t steps, uint64_t *now);
int kvp_prefix_retention(struct kvp_manager *m, const struct kvp_hash *hash,
                         uint32_t *priority, uint64_t *expires);
int kvp_prefix_reset(struct kvp_manager *m);

struct kvp_event {
    int type;
    const struct kvp_hash *hashes;
    uint32_t nhashes;
    const struct kvp_hash *parent;
    uint32_t block_tokens;
    uint32_t num_tokens;
    uint64_t seq;
    const uint32_t *token_ids;
    const char *lora_name;
    int64_t lora_id;
    const char *const *extra_keys;
    uint32_t nextra_keys;
    const char *medium;
    uint32_t priority;
    uint32_t reused;
};
typedef void (*kvp_event_cb)(const struct kvp_event *ev, void *arg);
int kvp_manager_set_event_cb(struct kvp_manager *m, kvp_event_cb cb, void *arg);
int kvp_manager_set_event_medium(struct kvp_manager *m, const char *medium);
struct kvp_commit_info {
    const uint32_t *tokens;
    uint32_t ntokens;
    const char *lora_name;
    int64_t lora_id;
    const char *const *extra_keys;
    uint32_t nextra_keys;
    const struct kvp_retention *ranges;
    uint32_t nranges;
};
int kvp_seq_commit_ex(struct kvp_manager *m, uint64_t seq,
                      const struct kvp_hash *hashes, uint32_t nhashes,
                      const struct kvp_commit_info *info);

int kvp_seq_write(struct kvp_manager *m, uint64_t seq, uint32_t pos,
                  uint32_t layer, const void *k, const void *v);
int kvp_seq_read(struct kvp_manager *m, uint64_t seq, uint32_t pos,
                 uint32_t layer, void *k, void *v);
int kvp_seq_gather(struct kvp_manager *m, uint64_t seq, uint32_t layer,
                   void *k_out, void *v_out);
int kvp_seq_gather_cap(struct kvp_manager *m, uint64_t seq, uint32_t layer,
                       void *k_out, void *v_out, uint32_t cap_tokens);
"""

#: Structs declared with only the fields the binding reads (their size is
#: the library's business).
PARTIAL = {"kvp_event"}

ffi = cffi.FFI()
ffi.cdef(CDEF)


def _candidates():
    env = os.environ.get("KVPOOL_LIBRARY")
    if env:
        return [env]
    out = []
    try:
        from . import _paths  # written by `make install`
        out.append(os.path.join(_paths.LIBDIR, "libkvpool.so.0"))
    except ImportError:
        pass
    out += ["libkvpool.so.0", "libkvpool.so"]
    return out


def _load():
    errors = []
    for name in _candidates():
        try:
            return ffi.dlopen(name), name
        except OSError as e:
            errors.append("%s: %s" % (name, e))
    raise ImportError("kvpool: cannot load libkvpool (set KVPOOL_LIBRARY to "
                      "its path): " + "; ".join(errors))


lib, LIBRARY = _load()
