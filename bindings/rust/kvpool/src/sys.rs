// SPDX-License-Identifier: MIT
//! The raw C ABI, for callers that need exactly the C path (the
//! benchmarks compare the safe wrappers against it).  Each item mirrors
//! its namesake in `include/kvpool.h`, whose comments are the reference.
#![allow(non_camel_case_types)]
use std::os::raw::{c_char, c_int, c_void};

/// `KVP_POOL_ZERO`: zero a block's data when it is allocated.
pub const KVP_POOL_ZERO: u32 = 1 << 0;
/// `KVP_POOL_NOCACHE`: no per-thread caches.
pub const KVP_POOL_NOCACHE: u32 = 1 << 1;
/// `KVP_POOL_K_ONLY`: a data-owning pool keeps K only (no V).
pub const KVP_POOL_K_ONLY: u32 = 1 << 2;
/// `KVP_PREFIX_CACHE`: the manager keeps a hash -> block prefix cache.
pub const KVP_PREFIX_CACHE: u32 = 1 << 0;
/// `KVP_FORK_KEEP_SOURCE`: kvp_seq_fork_n leaves the source's last access
/// and access count as they were.
pub const KVP_FORK_KEEP_SOURCE: u32 = 1 << 0;
/// `KVP_EXACT_LIMITS`: the threshold and watermark are taken as
/// given, 0 included (without it 0 means the default).
pub const KVP_EXACT_LIMITS: u32 = 1 << 1;
/// `KVP_EMIT_CACHED_EVENTS`: a creation's reused cached blocks are
/// reported as one stored event (needs `KVP_PREFIX_CACHE`).
pub const KVP_EMIT_CACHED_EVENTS: u32 = 1 << 2;
/// `KVP_NO_BLOCK`: no block (`kvp_append_info.last_block`).
pub const KVP_NO_BLOCK: u32 = u32::MAX;
/// `KVP_EVICT_PARTIAL`: kvp_evict_until stopped before its target.
pub const KVP_EVICT_PARTIAL: c_int = 1;

/// `struct kvp_pool` (opaque).
#[repr(C)]
pub struct kvp_pool {
    _private: [u8; 0],
}
/// `struct kvp_manager` (opaque).
#[repr(C)]
pub struct kvp_manager {
    _private: [u8; 0],
}
/// `struct kvp_layout`: the KV data shape of a data-owning pool.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_layout {
    /// Layers.
    pub num_layers: u32,
    /// KV heads per layer.
    pub num_kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// `enum kvp_dtype`.
    pub dtype: c_int,
}
/// `struct kvp_pool_config`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvp_pool_config {
    /// Blocks, 0 .. KVP_MAX_BLOCKS (0: an empty pool).
    pub num_blocks: u32,
    /// Tokens per block, >= 1.
    pub block_tokens: u32,
    /// Per-thread cache capacity, 0 = automatic.
    pub cache_blocks: u32,
    /// The device the KV data lives on (-1: host).
    pub device_id: i32,
    /// NULL: an ID-only pool.
    pub layout: *const kvp_layout,
    /// `KVP_POOL_*` flags.
    pub flags: u32,
}
/// `struct kvp_manager_config`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvp_manager_config {
    /// The pool (the manager takes its own reference).
    pub pool: *mut kvp_pool,
    /// `enum kvp_policy`.
    pub policy: c_int,
    /// Utilisation at which eviction is due.
    pub eviction_threshold: f32,
    /// Fraction of the pool kept free at admission.
    pub watermark: f32,
    /// `KVP_PREFIX_CACHE`, `KVP_EXACT_LIMITS`.
    pub flags: u32,
    /// Cached blocks pinned at most (0 = a quarter of the pool).
    pub max_pinned: u32,
    /// The metrics' `manager` label (NULL = the id).
    pub name: *const c_char,
}
/// `struct kvp_hash_keys`: a request's extra hash keys.
#[repr(C)]
pub struct kvp_hash_keys {
    /// Mixed into the root block only.
    pub salt: *const c_void,
    /// Bytes of salt.
    pub salt_len: usize,
    /// LoRA adapter name (NUL-terminated) or NULL.
    pub lora: *const c_char,
}
/// `struct kvp_error_info`: the calling thread's last -ENOSPC or -ENOBUFS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_error_info {
    /// -ENOSPC or -ENOBUFS.
    pub err: c_int,
    /// 1: -ENOBUFS, a caller's buffer was too small; 0: -ENOSPC, blocks.
    pub buffer: u32,
    /// Blocks (or buffer entries) the call needed.
    pub requested: u64,
    /// Blocks it could have had (or the buffer's cap).
    pub available: u64,
}
/// `struct kvp_append_info`: what kvp_seq_append_ex did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvp_append_info {
    /// The block holding the last token (`KVP_NO_BLOCK`: none).
    pub last_block: u32,
    /// The sequence's token count after the append.
    pub num_tokens: u32,
    /// Blocks the append allocated.
    pub new_blocks: u32,
}
/// `struct kvp_event` (the library passes it by pointer: fields it
/// appends later are not read).
#[repr(C)]
pub struct kvp_event {
    /// `enum kvp_event_kind`.
    pub kind: c_int,
    /// The blocks' hashes.
    pub hashes: *const super::BlockHash,
    /// Entries of hashes.
    pub nhashes: u32,
    /// The hash before `hashes[0]` (NULL at the root).
    pub parent: *const super::BlockHash,
    /// Tokens per block.
    pub block_tokens: u32,
    /// Tokens the event covers.
    pub num_tokens: u32,
    /// The manager's event number.
    pub seq: u64,
    /// Stored: the blocks' tokens (num_tokens), or NULL.
    pub token_ids: *const u32,
    /// Stored: the commit's LoRA name, or NULL.
    pub lora_name: *const c_char,
    /// Stored: the commit's LoRA id (-1: none).
    pub lora_id: i64,
    /// Stored: the commit's extra keys, or NULL.
    pub extra_keys: *const *const c_char,
    /// Entries of extra_keys.
    pub nextra_keys: u32,
    /// The manager's medium, or NULL.
    pub medium: *const c_char,
    /// Stored: the retention priority the blocks got.
    pub priority: u32,
    /// Stored: 1 when it reports cached blocks a creation reused.
    pub reused: u32,
}
/// `struct kvp_commit_info`: what a commit tells the event callback.
#[repr(C)]
pub struct kvp_commit_info {
    /// The sequence's tokens from position 0, or NULL.
    pub tokens: *const u32,
    /// Entries of tokens.
    pub ntokens: u32,
    /// LoRA adapter name, or NULL.
    pub lora_name: *const c_char,
    /// LoRA id (-1: none).
    pub lora_id: i64,
    /// Extra keys, or NULL.
    pub extra_keys: *const *const c_char,
    /// Entries of extra_keys.
    pub nextra_keys: u32,
    /// Retention ranges, or NULL.
    pub ranges: *const super::Retention,
    /// Entries of ranges.
    pub nranges: u32,
}
/// `kvp_event_cb`: a manager's prefix-cache event callback.
pub type kvp_event_cb = Option<unsafe extern "C" fn(*const kvp_event, *mut c_void)>;
use super::{BlockCopy, BlockHash, PoolStats, SeqInfo, Stats};

extern "C" {
    /// A static description of a return value.
    pub fn kvp_strerror(err: c_int) -> *const c_char;
    /// The calling thread's last -ENOSPC or -ENOBUFS details.
    pub fn kvp_last_error(out: *mut kvp_error_info) -> c_int;
    /// Creates a pool.
    pub fn kvp_pool_create(cfg: *const kvp_pool_config, out: *mut *mut kvp_pool) -> c_int;
    /// Takes another reference on a pool.
    pub fn kvp_pool_ref(pool: *mut kvp_pool) -> *mut kvp_pool;
    /// Drops a reference (the last destroys the pool).
    pub fn kvp_pool_unref(pool: *mut kvp_pool);
    /// Allocates n blocks, all or nothing.
    pub fn kvp_pool_alloc(pool: *mut kvp_pool, n: u32, ids: *mut u32) -> c_int;
    /// Drops one reference on each of n blocks.
    pub fn kvp_pool_free(pool: *mut kvp_pool, ids: *const u32, n: u32) -> c_int;
    /// Adds a reference to a held block.
    pub fn kvp_block_ref(pool: *mut kvp_pool, id: u32) -> c_int;
    /// A block's holders.
    pub fn kvp_block_refcount(pool: *mut kvp_pool, id: u32) -> c_int;
    /// A block's KV data (NULL for an ID-only pool).
    pub fn kvp_block_data(pool: *mut kvp_pool, id: u32) -> *mut c_void;
    /// Bytes of KV data per block.
    pub fn kvp_block_bytes(pool: *const kvp_pool) -> usize;
    /// Tokens per block.
    pub fn kvp_pool_block_tokens(pool: *const kvp_pool) -> u32;
    /// Bytes of one token's K (or V) row of one layer.
    pub fn kvp_pool_row_bytes(pool: *const kvp_pool) -> usize;
    /// The pool's configuration as in effect.
    pub fn kvp_pool_get_config(
        pool: *const kvp_pool,
        out: *mut kvp_pool_config,
        layout: *mut kvp_layout,
    ) -> c_int;
    /// The pool's counters and gauges.
    pub fn kvp_pool_stats(pool: *mut kvp_pool, st: *mut PoolStats);
    /// Checks the pool's invariants (quiescence).
    pub fn kvp_pool_check(pool: *mut kvp_pool) -> c_int;
    /// Returns this thread's cached blocks to their pools.
    pub fn kvp_thread_flush();

    /// Creates a manager.
    pub fn kvp_manager_create(cfg: *const kvp_manager_config, out: *mut *mut kvp_manager) -> c_int;
    /// Destroys a manager and its sequences.
    pub fn kvp_manager_destroy(m: *mut kvp_manager);
    /// The manager's configuration as in effect.
    pub fn kvp_manager_get_config(m: *const kvp_manager, out: *mut kvp_manager_config) -> c_int;
    /// Changes the eviction policy.
    pub fn kvp_manager_set_policy(m: *mut kvp_manager, policy: c_int) -> c_int;
    /// Lists the manager's sequences.
    pub fn kvp_manager_seqs(m: *mut kvp_manager, ids: *mut u64, cap: u32, n: *mut u32) -> c_int;
    /// Creates a sequence of num_tokens tokens.
    pub fn kvp_seq_create(m: *mut kvp_manager, seq: u64, num_tokens: u32) -> c_int;
    /// Appends token slots, reporting copy-on-write copies.
    pub fn kvp_seq_append(
        m: *mut kvp_manager,
        seq: u64,
        num_tokens: u32,
        cow: *mut BlockCopy,
        cow_cap: u32,
        ncow: *mut u32,
    ) -> c_int;
    /// kvp_seq_append, reporting what it did in *info.
    pub fn kvp_seq_append_ex(
        m: *mut kvp_manager,
        seq: u64,
        num_tokens: u32,
        cow: *mut BlockCopy,
        cow_cap: u32,
        ncow: *mut u32,
        info: *mut kvp_append_info,
    ) -> c_int;
    /// Makes room in a block table for num_tokens tokens.
    pub fn kvp_seq_reserve(m: *mut kvp_manager, seq: u64, num_tokens: u32) -> c_int;
    /// Creates dst sharing src's blocks.
    pub fn kvp_seq_fork(m: *mut kvp_manager, src: u64, dst: u64) -> c_int;
    /// Creates the n sequences dsts[0..n) sharing src's blocks, in one
    /// call (all or nothing).
    pub fn kvp_seq_fork_n(
        m: *mut kvp_manager,
        src: u64,
        dsts: *const u64,
        n: u32,
        flags: u32,
    ) -> c_int;
    /// Frees a sequence.
    pub fn kvp_seq_free(m: *mut kvp_manager, seq: u64) -> c_int;
    /// Rolls a sequence back to num_tokens tokens.
    pub fn kvp_seq_truncate(m: *mut kvp_manager, seq: u64, num_tokens: u32) -> c_int;
    /// StreamingLLM trim: keeps the sink and the window.
    pub fn kvp_seq_stream_trim(
        m: *mut kvp_manager,
        seq: u64,
        sink_tokens: u32,
        window_tokens: u32,
        evicted_tokens: *mut u32,
    ) -> c_int;
    /// Sets a sequence's priority.
    pub fn kvp_seq_set_priority(m: *mut kvp_manager, seq: u64, priority: i32) -> c_int;
    /// A sequence's counts, clock and priority.
    pub fn kvp_seq_info(m: *mut kvp_manager, seq: u64, info: *mut SeqInfo) -> c_int;
    /// Copies a block table.
    pub fn kvp_seq_blocks(
        m: *mut kvp_manager,
        seq: u64,
        ids: *mut u32,
        cap: u32,
        n: *mut u32,
    ) -> c_int;
    /// Whether num_tokens more tokens fit (0 yes, 1 later, 2 never).
    pub fn kvp_admit(m: *mut kvp_manager, num_tokens: u32) -> c_int;
    /// Evicts one sequence by policy.
    pub fn kvp_evict(m: *mut kvp_manager, victim: *mut u64) -> c_int;
    /// Names the sequence kvp_evict would choose, evicting nothing.
    pub fn kvp_evict_peek(m: *mut kvp_manager, victim: *mut u64) -> c_int;
    /// Evicts until utilisation <= target_util.
    pub fn kvp_evict_until(
        m: *mut kvp_manager,
        target: f32,
        victims: *mut u64,
        cap: u32,
        n: *mut u32,
    ) -> c_int;
    /// The manager's statistics.
    pub fn kvp_manager_stats(m: *mut kvp_manager, st: *mut Stats);
    /// The manager's process-unique id.
    pub fn kvp_manager_id(m: *const kvp_manager) -> u64;
    /// The manager's name.
    pub fn kvp_manager_name(m: *const kvp_manager) -> *const c_char;
    /// OpenMetrics (or Prometheus) text of a pool and its managers.
    pub fn kvp_metrics_format(
        pool: *mut kvp_pool,
        managers: *const *mut kvp_manager,
        n: u32,
        flags: u32,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> c_int;
    /// Checks the manager's invariants (quiescence).
    pub fn kvp_manager_check(m: *mut kvp_manager) -> c_int;
    /// Exports block tables as padded int32 rows.
    pub fn kvp_export_block_table(
        m: *mut kvp_manager,
        seqs: *const u64,
        nseq: u32,
        table: *mut i32,
        stride: u32,
        pad: i32,
    ) -> c_int;
    /// Exports block tables in FlashInfer's CSR layout.
    pub fn kvp_export_csr(
        m: *mut kvp_manager,
        seqs: *const u64,
        nseq: u32,
        indptr: *mut i32,
        indices: *mut i32,
        cap: u32,
        last_page_len: *mut i32,
    ) -> c_int;
    /// Exports the slots of n tokens from first_pos.
    pub fn kvp_export_slot_mapping(
        m: *mut kvp_manager,
        seq: u64,
        first_pos: u32,
        n: u32,
        slots: *mut i64,
    ) -> c_int;
    /// Chained hashes of full blocks of tokens.
    pub fn kvp_hash_blocks(
        algo: c_int,
        parent: *const BlockHash,
        keys: *const kvp_hash_keys,
        tokens: *const u32,
        ntokens: u32,
        block_tokens: u32,
        out: *mut BlockHash,
    ) -> c_int;
    /// kvp_hash_blocks into out[0..cap) (-ENOBUFS when short).
    pub fn kvp_hash_blocks_cap(
        algo: c_int,
        parent: *const BlockHash,
        keys: *const kvp_hash_keys,
        tokens: *const u32,
        ntokens: u32,
        block_tokens: u32,
        out: *mut BlockHash,
        cap: u32,
    ) -> c_int;
    /// Seeds XXH3-128 hashes process-wide.
    pub fn kvp_hash_set_xxh3_seed(seed: u64) -> c_int;
    /// Sets the sha256_cbor profile's seed (vLLM's PYTHONHASHSEED).
    pub fn kvp_hash_set_cbor_seed(seed: *const c_char) -> c_int;
    /// vLLM's NONE_HASH for a seed.
    pub fn kvp_hash_cbor_seed_root(seed: *const c_char, out: *mut BlockHash) -> c_int;
    /// One sha256_cbor block with any extra keys.
    pub fn kvp_hash_cbor_block(
        parent: *const BlockHash,
        tokens: *const u32,
        ntokens: u32,
        extra_keys: *const *const c_char,
        nextra_keys: u32,
        out: *mut BlockHash,
    ) -> c_int;
    /// The 64-bit form of a hash (its last 8 bytes, big-endian).
    pub fn kvp_hash_to_u64(h: *const BlockHash) -> u64;
    /// kvp_seq_commit whose STORED events carry info's tokens and keys.
    pub fn kvp_seq_commit_ex(
        m: *mut kvp_manager,
        seq: u64,
        hashes: *const BlockHash,
        nhashes: u32,
        info: *const kvp_commit_info,
    ) -> c_int;
    /// The medium every event of the manager names (NULL clears it).
    pub fn kvp_manager_set_event_medium(m: *mut kvp_manager, medium: *const c_char) -> c_int;
    /// Adds st into acc (counters summed, pool-wide values maxed).
    pub fn kvp_stats_add(acc: *mut Stats, st: *const Stats);
    /// The number of leading hashes cached now (no reference taken).
    pub fn kvp_prefix_match(
        m: *mut kvp_manager,
        hashes: *const BlockHash,
        nhashes: u32,
        cached_blocks: *mut u32,
    ) -> c_int;
    /// Creates a sequence reusing the longest cached prefix.
    pub fn kvp_seq_create_cached(
        m: *mut kvp_manager,
        seq: u64,
        hashes: *const BlockHash,
        nhashes: u32,
        num_tokens: u32,
        cached_tokens: *mut u32,
    ) -> c_int;
    /// Caches a sequence's full blocks under hashes.
    pub fn kvp_seq_commit(
        m: *mut kvp_manager,
        seq: u64,
        hashes: *const BlockHash,
        nhashes: u32,
    ) -> c_int;
    /// kvp_seq_commit with retention ranges.
    pub fn kvp_seq_commit_retained(
        m: *mut kvp_manager,
        seq: u64,
        hashes: *const BlockHash,
        nhashes: u32,
        ranges: *const super::Retention,
        nranges: u32,
        unpinned: *mut u32,
    ) -> c_int;
    /// Advances the retention clock.
    pub fn kvp_manager_tick(m: *mut kvp_manager, steps: u64, now: *mut u64) -> c_int;
    /// A cached block's retention priority and expiry.
    pub fn kvp_prefix_retention(
        m: *mut kvp_manager,
        hash: *const BlockHash,
        priority: *mut u32,
        expires: *mut u64,
    ) -> c_int;
    /// Drops every idle cached block of the manager.
    pub fn kvp_prefix_reset(m: *mut kvp_manager) -> c_int;
    /// Sets (or clears) the prefix-cache event callback.
    pub fn kvp_manager_set_event_cb(
        m: *mut kvp_manager,
        cb: kvp_event_cb,
        arg: *mut c_void,
    ) -> c_int;
    /// Writes one token's K and V rows of one layer (V NULL: K-only).
    pub fn kvp_seq_write(
        m: *mut kvp_manager,
        seq: u64,
        pos: u32,
        layer: u32,
        k: *const c_void,
        v: *const c_void,
    ) -> c_int;
    /// Reads one token's K and V rows of one layer (V NULL: K-only).
    pub fn kvp_seq_read(
        m: *mut kvp_manager,
        seq: u64,
        pos: u32,
        layer: u32,
        k: *mut c_void,
        v: *mut c_void,
    ) -> c_int;
    /// One layer of a sequence as contiguous K and V (V NULL: K-only).
    pub fn kvp_seq_gather(
        m: *mut kvp_manager,
        seq: u64,
        layer: u32,
        k: *mut c_void,
        v: *mut c_void,
    ) -> c_int;
}

#[cfg(test)]
mod tests {
    use crate::sys;
    use crate::{BlockCopy, BlockHash, PoolStats, Retention, SeqInfo, Stats};

    #[test]
    fn struct_sizes_match_c() {
        assert_eq!(std::mem::size_of::<PoolStats>(), 8 * 7 + 4 * 2 + 8 * 2);
        assert_eq!(std::mem::size_of::<Stats>(), 8 * 23);
        assert_eq!(std::mem::size_of::<Retention>(), 24);
        assert_eq!(std::mem::size_of::<sys::kvp_manager_config>(), 40);
        assert_eq!(std::mem::size_of::<SeqInfo>(), 32);
        assert_eq!(std::mem::size_of::<BlockHash>(), 32);
        assert_eq!(std::mem::size_of::<sys::kvp_pool_config>(), 32);
        assert_eq!(std::mem::size_of::<sys::kvp_layout>(), 16);
        assert_eq!(std::mem::size_of::<BlockCopy>(), 12);
    }

    /// The structs this binding mirrors field by field: their sizes and
    /// offsets as in include/kvpool.h on LP64.
    #[test]
    fn new_struct_layouts_match_c() {
        use std::mem::{align_of, size_of};
        let e = sys::kvp_error_info::default();
        let base = &e as *const _ as usize;
        assert_eq!(size_of::<sys::kvp_error_info>(), 24);
        assert_eq!(align_of::<sys::kvp_error_info>(), 8);
        assert_eq!(&e.buffer as *const _ as usize - base, 4);
        assert_eq!(&e.requested as *const _ as usize - base, 8);
        assert_eq!(&e.available as *const _ as usize - base, 16);
        let a = sys::kvp_append_info::default();
        let base = &a as *const _ as usize;
        assert_eq!(size_of::<sys::kvp_append_info>(), 12);
        assert_eq!(&a.num_tokens as *const _ as usize - base, 4);
        assert_eq!(&a.new_blocks as *const _ as usize - base, 8);
    }

    /// struct kvp_event and struct kvp_commit_info on LP64.
    #[test]
    fn event_and_commit_info_layouts_match_c() {
        use std::mem::{size_of, MaybeUninit};
        use std::ptr::addr_of;
        let e = MaybeUninit::<sys::kvp_event>::uninit();
        let p = e.as_ptr();
        let base = p as usize;
        // SAFETY: addr_of! computes field addresses without reading.
        let off = unsafe {
            [
                addr_of!((*p).hashes) as usize,
                addr_of!((*p).parent) as usize,
                addr_of!((*p).num_tokens) as usize,
                addr_of!((*p).seq) as usize,
                addr_of!((*p).token_ids) as usize,
                addr_of!((*p).lora_id) as usize,
                addr_of!((*p).nextra_keys) as usize,
                addr_of!((*p).medium) as usize,
                addr_of!((*p).priority) as usize,
            ]
        };
        let off: Vec<usize> = off.iter().map(|a| a - base).collect();
        assert_eq!(off, [8, 24, 36, 40, 48, 64, 80, 88, 96]);
        assert_eq!(size_of::<sys::kvp_event>(), 104);
        let c = MaybeUninit::<sys::kvp_commit_info>::uninit();
        let p = c.as_ptr();
        let base = p as usize;
        // SAFETY: as above.
        let off = unsafe {
            [
                addr_of!((*p).ntokens) as usize,
                addr_of!((*p).lora_id) as usize,
                addr_of!((*p).nextra_keys) as usize,
                addr_of!((*p).ranges) as usize,
                addr_of!((*p).nranges) as usize,
            ]
        };
        let off: Vec<usize> = off.iter().map(|a| a - base).collect();
        assert_eq!(off, [8, 24, 40, 48, 56]);
        assert_eq!(size_of::<sys::kvp_commit_info>(), 64);
    }
}
