//! kvpool: paged KV-cache block management for LLM inference engines.
//!
//! A safe binding of libkvpool's C ABI (`include/kvpool.h`), with no
//! dependency outside std.  [`Pool`] and [`Manager`] are `Send + Sync`:
//! share them across threads by reference (`std::thread::scope`) or in an
//! `Arc`; every method may run concurrently with every other, as in C,
//! except the ones that take `&mut self` (the C library's "nothing else
//! on this manager" calls).  Dropping a handle releases it.  Every fallible
//! call returns `Result<T, kvpool::Error>`, whose [`Error::errno`] is the
//! C call's errno and which, for a no-space error, says how much was
//! requested and how much was available ([`Error::requested`],
//! [`Error::available`]).
//!
//! The decode path allocates nothing: [`Manager::append`] returns an
//! [`Appended`] by value, and on a sequence reserved with
//! [`Manager::reserve`] the C library allocates no host memory either;
//! [`Manager::blocks_into`], [`Manager::sequences_into`] and
//! [`Manager::evict_until_into`] reuse the caller's `Vec`.
//!
//! ```no_run
//! use kvpool::{Manager, ManagerConfig, Pool, PoolConfig};
//! let pool = Pool::new(&PoolConfig::new(1024, 16)).unwrap();
//! let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
//! m.create(1, 100).unwrap();
//! m.reserve(1, 4096).unwrap(); // appends up to 4,096 tokens: no malloc
//! let a = m.append(1, 1).unwrap();
//! assert_eq!(a.num_tokens, 101);
//! assert!(a.cow.is_none()); // Some(copy) after a fork
//! ```
#![deny(missing_docs)]
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::{self, NonNull};

/// The raw C ABI, for callers that need exactly the C path (the
/// benchmarks compare the safe wrappers against it).  Each item mirrors
/// its namesake in `include/kvpool.h`, whose comments are the reference.
#[allow(non_camel_case_types)]
pub mod sys {
    use std::os::raw::{c_char, c_int, c_void};

    /// `KVP_POOL_ZERO`: zero a block's data when it is allocated.
    pub const KVP_POOL_ZERO: u32 = 1 << 0;
    /// `KVP_POOL_NOCACHE`: no per-thread caches.
    pub const KVP_POOL_NOCACHE: u32 = 1 << 1;
    /// `KVP_POOL_K_ONLY`: a data-owning pool keeps K only (no V).
    pub const KVP_POOL_K_ONLY: u32 = 1 << 2;
    /// `KVP_PREFIX_CACHE`: the manager keeps a hash -> block prefix cache.
    pub const KVP_PREFIX_CACHE: u32 = 1 << 0;
    /// `KVP_EXACT_LIMITS`: the threshold and watermark are taken as
    /// given, 0 included (without it 0 means the default).
    pub const KVP_EXACT_LIMITS: u32 = 1 << 1;
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
    /// `struct kvp_error_info`: the calling thread's last -ENOSPC.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct kvp_error_info {
        /// -ENOSPC.
        pub err: c_int,
        /// 1: a caller's buffer was too small; 0: not enough blocks.
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
    /// The fields of struct kvp_event this binding reads (the library
    /// passes it by pointer; fields appended later are not read).
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
    }
    /// `kvp_event_cb`: a manager's prefix-cache event callback.
    pub type kvp_event_cb = Option<unsafe extern "C" fn(*const kvp_event, *mut c_void)>;
    use super::{BlockCopy, BlockHash, PoolStats, SeqInfo, Stats};

    extern "C" {
        /// A static description of a return value.
        pub fn kvp_strerror(err: c_int) -> *const c_char;
        /// The calling thread's last -ENOSPC details.
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
        pub fn kvp_manager_create(
            cfg: *const kvp_manager_config,
            out: *mut *mut kvp_manager,
        ) -> c_int;
        /// Destroys a manager and its sequences.
        pub fn kvp_manager_destroy(m: *mut kvp_manager);
        /// The manager's configuration as in effect.
        pub fn kvp_manager_get_config(m: *const kvp_manager, out: *mut kvp_manager_config)
            -> c_int;
        /// Changes the eviction policy.
        pub fn kvp_manager_set_policy(m: *mut kvp_manager, policy: c_int) -> c_int;
        /// Lists the manager's sequences.
        pub fn kvp_manager_seqs(m: *mut kvp_manager, ids: *mut u64, cap: u32, n: *mut u32)
            -> c_int;
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
        /// Seeds XXH3-128 hashes process-wide.
        pub fn kvp_hash_set_xxh3_seed(seed: u64) -> c_int;
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
}

// ------------------------------------------------------------------ errors

/// A failed kvpool call: the negative errno the C function returned and,
/// for a no-space error (`ENOSPC`), the details the C library recorded
/// (`kvp_last_error`): how many blocks (or buffer entries) the call
/// needed and how many it could have had.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Error {
    code: i32,
    space: Option<Space>,
}

/// kvp_last_error's record of an ENOSPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Space {
    buffer: bool,
    requested: u64,
    available: u64,
}

/// What an [`Error`] means (from its errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// EINVAL: a bad argument.
    InvalidArgument,
    /// ENOSPC: not enough free blocks (or an output buffer too small).
    NoSpace,
    /// ENOMEM: out of host memory.
    NoMemory,
    /// ENOENT: unknown sequence.
    NotFound,
    /// EEXIST: sequence id in use.
    Exists,
    /// ERANGE: block id, position or count out of range.
    OutOfRange,
    /// EALREADY: block already free.
    AlreadyFree,
    /// EOVERFLOW: a count would overflow.
    Overflow,
    /// EBUSY: a shared block written, a cached block in use.
    Busy,
    /// EFAULT: an invariant check failed.
    CheckFailed,
    /// Any other errno.
    Other,
}

const ENOENT: i32 = 2;
const EBUSY: i32 = 16;
const EINVAL: i32 = 22;
const ENOSPC: i32 = 28;

impl Error {
    /// The error of a C call that just returned rc (< 0), on this thread:
    /// an ENOSPC picks up kvp_last_error's details, which the call has
    /// just recorded.
    #[cold]
    fn from_rc(rc: c_int) -> Error {
        let mut space = None;
        if rc == -ENOSPC {
            let mut info = sys::kvp_error_info::default();
            // SAFETY: info is a valid out pointer.
            if unsafe { sys::kvp_last_error(&mut info) } == 0 && info.err == rc {
                space = Some(Space {
                    buffer: info.buffer != 0,
                    requested: info.requested,
                    available: info.available,
                });
            }
        }
        Error { code: -rc, space }
    }
    fn from_errno(code: i32) -> Error {
        Error { code, space: None }
    }
    fn invalid() -> Error {
        Error::from_errno(EINVAL)
    }
    /// The errno (positive).
    pub fn errno(&self) -> i32 {
        self.code
    }
    /// kvp_strerror()'s text.
    pub fn message(&self) -> &'static str {
        // SAFETY: kvp_strerror returns a static, NUL-terminated string.
        unsafe { CStr::from_ptr(sys::kvp_strerror(-self.code)) }
            .to_str()
            .unwrap_or("?")
    }
    /// The errno's meaning.
    pub fn kind(&self) -> ErrorKind {
        match self.code {
            22 => ErrorKind::InvalidArgument,
            28 => ErrorKind::NoSpace,
            12 => ErrorKind::NoMemory,
            2 => ErrorKind::NotFound,
            17 => ErrorKind::Exists,
            34 => ErrorKind::OutOfRange,
            114 => ErrorKind::AlreadyFree,
            75 => ErrorKind::Overflow,
            16 => ErrorKind::Busy,
            14 => ErrorKind::CheckFailed,
            _ => ErrorKind::Other,
        }
    }
    /// For a no-space error: the blocks the call needed at once (or, if
    /// [`is_buffer_too_small`](Error::is_buffer_too_small), the buffer
    /// entries it needed).  None for other errors.
    pub fn requested(&self) -> Option<u64> {
        self.space.map(|s| s.requested)
    }
    /// For a no-space error: the blocks the call could have had when it
    /// gave up (free, parked in thread caches, evictable cached blocks; a
    /// recent count while other threads run), or the buffer's capacity.
    /// None for other errors.
    pub fn available(&self) -> Option<u64> {
        self.space.map(|s| s.available)
    }
    /// True for a no-space error about a caller's buffer being too small
    /// rather than about blocks; false for other errors.
    pub fn is_buffer_too_small(&self) -> bool {
        self.space.map_or(false, |s| s.buffer)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Error({:?}, errno {}: {}",
            self.kind(),
            self.code,
            self.message()
        )?;
        if let Some(s) = self.space {
            write!(
                f,
                ", {} requested {}, available {}",
                if s.buffer { "buffer" } else { "blocks" },
                s.requested,
                s.available
            )?;
        }
        write!(f, ")")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.space {
            Some(s) if s.buffer => write!(
                f,
                "kvpool: buffer too small: {} entries needed, room for {} (errno {})",
                s.requested, s.available, self.code
            ),
            Some(s) => write!(
                f,
                "kvpool: {}: requested {}, available {} (errno {})",
                self.message(),
                s.requested,
                s.available,
                self.code
            ),
            None => write!(f, "kvpool: {} (errno {})", self.message(), self.code),
        }
    }
}

impl std::error::Error for Error {}

/// `Result<T, kvpool::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

#[inline]
fn check(rc: c_int) -> Result<c_int> {
    if rc < 0 {
        Err(Error::from_rc(rc))
    } else {
        Ok(rc)
    }
}

fn len32(n: usize) -> Result<u32> {
    if n > u32::MAX as usize {
        Err(Error::invalid())
    } else {
        Ok(n as u32)
    }
}

/// Capacity for a list that had `n` entries a moment ago and may grow:
/// an eighth more.
fn with_slack(n: u32) -> usize {
    let n = n as usize;
    n + n / 8 + 1
}

// ------------------------------------------------------------------ pool

/// Element type of KV data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// 32-bit float.
    F32 = 0,
    /// IEEE half.
    F16 = 1,
    /// bfloat16.
    BF16 = 2,
    /// 64-bit float.
    F64 = 3,
    /// fp8 / int8 as raw bytes.
    U8 = 4,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::F64 => 8,
            DType::U8 => 1,
        }
    }

    fn from_raw(d: c_int) -> Option<DType> {
        Some(match d {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::BF16,
            3 => DType::F64,
            4 => DType::U8,
            _ => return None,
        })
    }
}

/// KV data shape of a data-owning pool (per block:
/// `[layer][K,V][token][head][dim]`, or `[layer][token][head][dim]` in a
/// K-only pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Layers.
    pub num_layers: u32,
    /// KV heads per layer.
    pub num_kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Element type.
    pub dtype: DType,
}

/// Pool parameters (`struct kvp_pool_config`), built by chaining:
///
/// ```
/// # use kvpool::{DType, Layout, PoolConfig};
/// let lay = Layout { num_layers: 2, num_kv_heads: 4, head_dim: 64, dtype: DType::F16 };
/// let cfg = PoolConfig::new(1024, 16).layout(lay).k_only(true).nocache(true).device_id(0);
/// assert_eq!((cfg.num_blocks, cfg.k_only, cfg.device_id), (1024, true, 0));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    /// Blocks; 0 is an empty pool (every allocation of a block fails
    /// with NoSpace; sequences of 0 tokens work).
    pub num_blocks: u32,
    /// Tokens per block, >= 1.
    pub block_tokens: u32,
    /// Per-thread cache capacity, 0 = automatic.
    pub cache_blocks: u32,
    /// The device the KV data lives on (-1, the default: host).
    pub device_id: i32,
    /// None: an ID-only pool (KV data elsewhere, e.g. on a GPU).
    pub layout: Option<Layout>,
    /// Zero a block's data when it is allocated.
    pub zero: bool,
    /// No per-thread caches.
    pub nocache: bool,
    /// Keep K only, no V (a single-vector cache: half the bytes); needs
    /// a layout.
    pub k_only: bool,
}

impl PoolConfig {
    /// An ID-only pool of num_blocks blocks of block_tokens tokens.
    pub fn new(num_blocks: u32, block_tokens: u32) -> PoolConfig {
        PoolConfig {
            num_blocks,
            block_tokens,
            cache_blocks: 0,
            device_id: -1,
            layout: None,
            zero: false,
            nocache: false,
            k_only: false,
        }
    }
    /// Makes it a data-owning pool of this shape.
    pub fn layout(mut self, layout: Layout) -> PoolConfig {
        self.layout = Some(layout);
        self
    }
    /// No per-thread caches (every call goes to the shared stack).
    pub fn nocache(mut self, nocache: bool) -> PoolConfig {
        self.nocache = nocache;
        self
    }
    /// Zero a block's data when it is allocated.
    pub fn zero(mut self, zero: bool) -> PoolConfig {
        self.zero = zero;
        self
    }
    /// Keep K only (needs a layout): the data calls then take and give
    /// an empty V.
    pub fn k_only(mut self, k_only: bool) -> PoolConfig {
        self.k_only = k_only;
        self
    }
    /// The device id the pool reports.
    pub fn device_id(mut self, device_id: i32) -> PoolConfig {
        self.device_id = device_id;
        self
    }
    /// Per-thread cache capacity in blocks (0 = automatic).
    pub fn cache_blocks(mut self, cache_blocks: u32) -> PoolConfig {
        self.cache_blocks = cache_blocks;
        self
    }
}

/// `struct kvp_pool_stats`: exact at quiescence, approximate otherwise.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// num_blocks.
    pub total: u64,
    /// Free blocks, parked ones included.
    pub free: u64,
    /// total - free.
    pub used: u64,
    /// Free blocks parked in thread caches.
    pub in_thread_caches: u64,
    /// Highest `used` seen.
    pub peak_used: u64,
    /// Blocks handed out since creation.
    pub allocs: u64,
    /// Blocks returned (refcount reached 0).
    pub frees: u64,
    /// Per-thread cache capacity in effect.
    pub cache_blocks: u32,
    /// Thread caches attached to the pool.
    pub threads: u32,
    /// Cached blocks nobody references (counted in `free`).
    pub evictable: u64,
    /// Cached blocks reclaimed by allocations.
    pub cache_evictions: u64,
}

impl PoolStats {
    /// used / total (0 for an empty pool).
    pub fn utilisation(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.used as f64 / self.total as f64
        }
    }
}

/// A pool of blocks.  Cloning takes another reference on the same pool
/// (`kvp_pool_ref`); dropping the last reference destroys it.
pub struct Pool {
    p: NonNull<sys::kvp_pool>,
    dtype: Option<DType>,
    k_only: bool,
}

// SAFETY: every kvp_pool function is thread-safe except kvp_pool_check,
// whose quiescence precondition is documented on Pool::check.
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

impl Clone for Pool {
    fn clone(&self) -> Pool {
        // SAFETY: self holds a reference.
        unsafe { sys::kvp_pool_ref(self.p.as_ptr()) };
        Pool {
            p: self.p,
            dtype: self.dtype,
            k_only: self.k_only,
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: drops the reference this handle holds.
        unsafe { sys::kvp_pool_unref(self.p.as_ptr()) }
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.config();
        let st = self.stats();
        f.debug_struct("Pool")
            .field("num_blocks", &c.num_blocks)
            .field("block_tokens", &c.block_tokens)
            .field("device_id", &c.device_id)
            .field("layout", &c.layout)
            .field("k_only", &c.k_only)
            .field("free", &st.free)
            .field("used", &st.used)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// Creates a pool (`kvp_pool_create`); 0 blocks is an empty pool.
    pub fn new(cfg: &PoolConfig) -> Result<Pool> {
        let lay = cfg.layout.map(|l| sys::kvp_layout {
            num_layers: l.num_layers,
            num_kv_heads: l.num_kv_heads,
            head_dim: l.head_dim,
            dtype: l.dtype as c_int,
        });
        let mut flags = 0;
        if cfg.zero {
            flags |= sys::KVP_POOL_ZERO;
        }
        if cfg.nocache {
            flags |= sys::KVP_POOL_NOCACHE;
        }
        if cfg.k_only {
            flags |= sys::KVP_POOL_K_ONLY;
        }
        let c = sys::kvp_pool_config {
            num_blocks: cfg.num_blocks,
            block_tokens: cfg.block_tokens,
            cache_blocks: cfg.cache_blocks,
            device_id: cfg.device_id,
            layout: lay.as_ref().map_or(ptr::null(), |l| l as *const _),
            flags,
        };
        let mut out = ptr::null_mut();
        // SAFETY: c and out are valid for the call.
        check(unsafe { sys::kvp_pool_create(&c, &mut out) })?;
        Ok(Pool {
            p: NonNull::new(out).ok_or_else(Error::invalid)?,
            dtype: cfg.layout.map(|l| l.dtype),
            k_only: cfg.k_only,
        })
    }

    /// The raw pointer, for calls through [`sys`].
    pub fn as_ptr(&self) -> *mut sys::kvp_pool {
        self.p.as_ptr()
    }

    /// The configuration in effect (`kvp_pool_get_config`): cache_blocks
    /// is the per-thread capacity chosen (0 for none).
    pub fn config(&self) -> PoolConfig {
        let mut c = sys::kvp_pool_config {
            num_blocks: 0,
            block_tokens: 0,
            cache_blocks: 0,
            device_id: -1,
            layout: ptr::null(),
            flags: 0,
        };
        let mut lay = sys::kvp_layout::default();
        // SAFETY: c and lay are valid out pointers.  The only errors are
        // NULL arguments, which these are not.
        let rc = unsafe { sys::kvp_pool_get_config(self.as_ptr(), &mut c, &mut lay) };
        debug_assert_eq!(rc, 0);
        let layout = if c.layout.is_null() {
            None
        } else {
            DType::from_raw(lay.dtype).map(|dtype| Layout {
                num_layers: lay.num_layers,
                num_kv_heads: lay.num_kv_heads,
                head_dim: lay.head_dim,
                dtype,
            })
        };
        PoolConfig {
            num_blocks: c.num_blocks,
            block_tokens: c.block_tokens,
            cache_blocks: c.cache_blocks,
            device_id: c.device_id,
            layout,
            zero: c.flags & sys::KVP_POOL_ZERO != 0,
            nocache: c.flags & sys::KVP_POOL_NOCACHE != 0,
            k_only: c.flags & sys::KVP_POOL_K_ONLY != 0,
        }
    }

    /// Blocks in the pool (0 for an empty pool).
    pub fn num_blocks(&self) -> u32 {
        self.config().num_blocks
    }

    /// The device id given at creation (-1: host).
    pub fn device_id(&self) -> i32 {
        self.config().device_id
    }

    /// The KV data shape; None for an ID-only pool.
    pub fn layout(&self) -> Option<Layout> {
        self.config().layout
    }

    /// True for a K-only pool (its data calls take and give an empty V).
    pub fn k_only(&self) -> bool {
        self.k_only
    }

    /// Allocates n blocks (all or nothing), each with one reference.
    pub fn alloc(&self, n: u32) -> Result<Vec<u32>> {
        let mut ids = vec![0u32; n as usize];
        self.alloc_into(&mut ids)?;
        Ok(ids)
    }

    /// Allocates ids.len() blocks into ids.
    pub fn alloc_into(&self, ids: &mut [u32]) -> Result<()> {
        let n = len32(ids.len())?;
        // SAFETY: ids has n slots.
        check(unsafe { sys::kvp_pool_alloc(self.as_ptr(), n, ids.as_mut_ptr()) }).map(|_| ())
    }

    /// Drops one reference on each id (all or nothing).
    pub fn free(&self, ids: &[u32]) -> Result<()> {
        let n = len32(ids.len())?;
        // SAFETY: ids has n entries.
        check(unsafe { sys::kvp_pool_free(self.as_ptr(), ids.as_ptr(), n) }).map(|_| ())
    }

    /// Adds a reference to a block the caller holds.
    pub fn block_ref(&self, id: u32) -> Result<()> {
        // SAFETY: plain call on a live pool.
        check(unsafe { sys::kvp_block_ref(self.as_ptr(), id) }).map(|_| ())
    }

    /// The block's holders (0 = free): a block-table chunk that forks
    /// share counts once, plus each table's last block and each raw
    /// reference (`kvp_block_refcount`).
    pub fn refcount(&self, id: u32) -> Result<u32> {
        // SAFETY: plain call on a live pool.
        check(unsafe { sys::kvp_block_refcount(self.as_ptr(), id) }).map(|n| n as u32)
    }

    /// Allocates one block as an RAII [`Block`] (its reference is dropped
    /// with it), whose data the caller can borrow.
    pub fn alloc_block(&self) -> Result<Block<'_>> {
        let mut id = [0u32];
        self.alloc_into(&mut id)?;
        Ok(Block {
            pool: self,
            id: id[0],
        })
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> u32 {
        // SAFETY: plain call on a live pool.
        unsafe { sys::kvp_pool_block_tokens(self.as_ptr()) }
    }

    /// Bytes of KV data per block (0 for an ID-only pool).
    pub fn block_bytes(&self) -> usize {
        // SAFETY: plain call on a live pool.
        unsafe { sys::kvp_block_bytes(self.as_ptr()) }
    }

    /// Bytes of one token's K (or V) row for one layer.
    pub fn row_bytes(&self) -> usize {
        // SAFETY: plain call on a live pool.
        unsafe { sys::kvp_pool_row_bytes(self.as_ptr()) }
    }

    /// The pool's and the managers' counters and gauges as OpenMetrics
    /// text (`kvp_metrics_write`), or the Prometheus text format 0.0.4
    /// with `prometheus`.
    pub fn metrics(&self, managers: &[&Manager], prometheus: bool) -> Result<String> {
        let ptrs: Vec<*mut sys::kvp_manager> = managers.iter().map(|m| m.as_ptr()).collect();
        let n = len32(ptrs.len())?;
        let mut cap = 16384usize;
        loop {
            let mut buf = vec![0u8; cap];
            let mut len = 0usize;
            // SAFETY: ptrs holds n live managers; buf has cap bytes.
            let rc = unsafe {
                sys::kvp_metrics_format(
                    self.as_ptr(),
                    ptrs.as_ptr(),
                    n,
                    prometheus as u32,
                    buf.as_mut_ptr() as *mut c_char,
                    cap,
                    &mut len,
                )
            };
            if rc == -ENOSPC {
                cap = len + 4096; // counters may have grown meanwhile
                continue;
            }
            check(rc)?;
            buf.truncate(len);
            return String::from_utf8(buf).map_err(|_| Error::invalid());
        }
    }

    /// The pool's counters and gauges (`kvp_pool_stats`).
    pub fn stats(&self) -> PoolStats {
        let mut st = PoolStats::default();
        // SAFETY: st is a valid struct kvp_pool_stats.
        unsafe { sys::kvp_pool_stats(self.as_ptr(), &mut st) };
        st
    }

    /// Checks the pool's invariants.  The caller guarantees that no other
    /// thread uses the pool during the call.
    pub fn check(&self) -> Result<()> {
        // SAFETY: plain call; quiescence is the caller's (documented).
        check(unsafe { sys::kvp_pool_check(self.as_ptr()) }).map(|_| ())
    }

    fn elems<T: Element>(&self) -> Result<usize> {
        match self.dtype {
            Some(d) if d.size() == std::mem::size_of::<T>() => Ok(self.block_bytes() / d.size()),
            _ => Err(Error::invalid()),
        }
    }
}

/// Element types a data-owning pool's bytes can be viewed as: plain
/// numbers with no invalid bit patterns.
pub trait Element: Copy + Default + 'static + private::Sealed {}
impl Element for f32 {}
impl Element for f64 {}
impl Element for u8 {}
impl Element for u16 {}
impl Element for i8 {}
mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for u8 {}
    impl Sealed for u16 {}
    impl Sealed for i8 {}
}

/// One held reference on a block of a pool, released on drop.  Its KV
/// data is borrowed through it: `data()` for as long as the Block is
/// borrowed, `data_mut()` only while nobody else holds the block.
pub struct Block<'p> {
    pool: &'p Pool,
    id: u32,
}

impl fmt::Debug for Block<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Block")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<'p> Block<'p> {
    /// The block's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Another reference on the same block (kvp_block_ref).
    pub fn share(&self) -> Result<Block<'p>> {
        self.pool.block_ref(self.id)?;
        Ok(Block {
            pool: self.pool,
            id: self.id,
        })
    }

    /// The block's data as elements of the pool's dtype (T of its size;
    /// InvalidArgument for an ID-only pool or another element size).
    pub fn data<T: Element>(&self) -> Result<&[T]> {
        let n = self.pool.elems::<T>()?;
        // SAFETY: the block is held (its data is not reused while this
        // Block lives) and the pool outlives 'p; the arena is aligned
        // for every dtype; writers need &mut of the only holder.
        Ok(unsafe {
            std::slice::from_raw_parts(
                sys::kvp_block_data(self.pool.as_ptr(), self.id) as *const T,
                n,
            )
        })
    }

    /// The block's data, writable: Busy while the block is shared.
    pub fn data_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        let n = self.pool.elems::<T>()?;
        if self.pool.refcount(self.id)? != 1 {
            return Err(Error::from_errno(EBUSY));
        }
        // SAFETY: as data(), and this Block is the block's only holder.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(
                sys::kvp_block_data(self.pool.as_ptr(), self.id) as *mut T,
                n,
            )
        })
    }
}

impl Drop for Block<'_> {
    fn drop(&mut self) {
        // A held reference: the free cannot fail.
        let _ = self.pool.free(&[self.id]);
    }
}

/// Returns this thread's cached blocks (of every pool) to the pools.
pub fn thread_flush() {
    // SAFETY: no arguments.
    unsafe { sys::kvp_thread_flush() }
}

// ------------------------------------------------------------------ hashes

/// A block hash (SHA-256 fills 32 bytes, XXH3-128 the first 16).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct BlockHash(pub [u8; 32]);

/// Hash profiles (`enum kvp_hash_algo`): a new C profile is one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashAlgo {
    /// SHA-256 (32 bytes).
    Sha256 = 0,
    /// XXH3-128 (the first 16 bytes), seeded by [`set_xxh3_seed`].
    Xxh3_128 = 1,
}

impl HashAlgo {
    /// Every profile, for code that must cover them all.
    pub const ALL: &'static [HashAlgo] = &[HashAlgo::Sha256, HashAlgo::Xxh3_128];
}

/// Extra keys of a request.
#[derive(Clone, Copy, Debug, Default)]
pub struct HashKeys<'a> {
    /// Mixed into the root block only (tenant isolation).
    pub salt: Option<&'a [u8]>,
    /// LoRA adapter name, mixed into every block.
    pub lora: Option<&'a str>,
}

/// Chained hashes of the tokens.len() / block_tokens full blocks (parent
/// None: from the root).  A pure function.
pub fn hash_blocks(
    algo: HashAlgo,
    parent: Option<&BlockHash>,
    keys: &HashKeys<'_>,
    tokens: &[u32],
    block_tokens: u32,
) -> Result<Vec<BlockHash>> {
    if block_tokens == 0 {
        return Err(Error::invalid());
    }
    let n = len32(tokens.len())?;
    let mut out = vec![BlockHash::default(); (n / block_tokens) as usize];
    let lora = match keys.lora {
        Some(s) => Some(CString::new(s).map_err(|_| Error::invalid())?),
        None => None,
    };
    let k = sys::kvp_hash_keys {
        salt: keys
            .salt
            .map_or(ptr::null(), |s| s.as_ptr() as *const c_void),
        salt_len: keys.salt.map_or(0, |s| s.len()),
        lora: lora
            .as_ref()
            .map_or(ptr::null(), |s| s.as_ptr() as *const c_char),
    };
    // SAFETY: out has room for every full block; k's pointers live.
    let got = check(unsafe {
        sys::kvp_hash_blocks(
            algo as c_int,
            parent.map_or(ptr::null(), |p| p as *const _),
            &k,
            tokens.as_ptr(),
            n,
            block_tokens,
            out.as_mut_ptr(),
        )
    })?;
    out.truncate(got as usize);
    Ok(out)
}

/// Seeds XXH3-128 hashes process-wide (so several processes agree).
pub fn set_xxh3_seed(seed: u64) {
    // SAFETY: plain call.
    unsafe { sys::kvp_hash_set_xxh3_seed(seed) };
}

// ------------------------------------------------------------------ manager

/// Eviction policy of [`Manager::evict`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Least recently accessed first.
    Lru = 0,
    /// Fewest accesses first (ties: LRU).
    Lfu = 1,
    /// Most tokens first (ties: LRU).
    Longest = 2,
    /// Lowest priority value first (ties: LRU).
    Priority = 3,
}

impl Policy {
    fn from_raw(p: c_int) -> Option<Policy> {
        Some(match p {
            0 => Policy::Lru,
            1 => Policy::Lfu,
            2 => Policy::Longest,
            3 => Policy::Priority,
            _ => return None,
        })
    }
}

/// Manager parameters (`struct kvp_manager_config`), as fields or by
/// chaining from `ManagerConfig::new()` (the same as `default()`):
///
/// ```
/// # use kvpool::{ManagerConfig, Policy};
/// let cfg = ManagerConfig::new().policy(Policy::Lfu).eviction_threshold(0.0).name("m0");
/// assert_eq!(cfg.eviction_threshold, 0.0); // eviction is due at once
/// ```
///
/// The threshold and the watermark are taken exactly as given, 0
/// included (the binding passes `KVP_EXACT_LIMITS`).
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerConfig {
    /// Eviction policy (changeable later: [`Manager::set_policy`]).
    pub policy: Policy,
    /// Utilisation (used / total blocks) at which eviction is due, in
    /// [0, 1]; default 0.9.  0 makes it due as soon as a block is used.
    pub eviction_threshold: f32,
    /// Fraction of the pool kept free at admission, in [0, 1); default
    /// 0.01.  0 keeps no block free.
    pub watermark: f32,
    /// Keep a hash -> block prefix cache.
    pub prefix_cache: bool,
    /// Blocks pinned (RETAIN_PIN) at most; 0 = a quarter of the pool.
    pub max_pinned: u32,
    /// The `manager` label of its metrics; None = its id.
    pub name: Option<String>,
}

impl Default for ManagerConfig {
    fn default() -> ManagerConfig {
        ManagerConfig {
            policy: Policy::Lru,
            eviction_threshold: 0.9,
            watermark: 0.01,
            prefix_cache: false,
            max_pinned: 0,
            name: None,
        }
    }
}

impl ManagerConfig {
    /// The defaults: LRU, threshold 0.9, watermark 0.01, no prefix
    /// cache, no name.
    pub fn new() -> ManagerConfig {
        ManagerConfig::default()
    }
    /// The eviction policy.
    pub fn policy(mut self, policy: Policy) -> ManagerConfig {
        self.policy = policy;
        self
    }
    /// The utilisation at which eviction is due, exactly (0 included).
    pub fn eviction_threshold(mut self, threshold: f32) -> ManagerConfig {
        self.eviction_threshold = threshold;
        self
    }
    /// The fraction kept free at admission, exactly (0 included).
    pub fn watermark(mut self, watermark: f32) -> ManagerConfig {
        self.watermark = watermark;
        self
    }
    /// Keep a prefix cache.
    pub fn prefix_cache(mut self, on: bool) -> ManagerConfig {
        self.prefix_cache = on;
        self
    }
    /// Blocks pinned at most (0 = a quarter of the pool).
    pub fn max_pinned(mut self, max_pinned: u32) -> ManagerConfig {
        self.max_pinned = max_pinned;
        self
    }
    /// The `manager` label of its metrics.
    pub fn name(mut self, name: &str) -> ManagerConfig {
        self.name = Some(name.to_string());
        self
    }
}

/// Retention priorities (kvpool.h): the default, the highest below a
/// pin, and a pin (never evicted; capped per manager).
pub const RETAIN_DEFAULT: u32 = 0;
/// The highest retention priority below a pin.
pub const RETAIN_MAX: u32 = 14;
/// Pinned: never evicted while pinned (capped per manager).
pub const RETAIN_PIN: u32 = 15;

/// `struct kvp_retention`: tokens [first_token, first_token + num_tokens)
/// (num_tokens 0: to the end) at `priority` for `duration` ticks of the
/// manager's retention clock (0: for ever).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// First token of the range.
    pub first_token: u32,
    /// Tokens in the range (0: to the end).
    pub num_tokens: u32,
    /// RETAIN_DEFAULT ..= RETAIN_PIN.
    pub priority: u32,
    /// Retention-clock ticks (0: no expiry).
    pub duration: u64,
}

/// A copy-on-write copy the engine must perform: the first `tokens`
/// token slots of block src into block dst.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCopy {
    /// The shared block to copy from.
    pub src: u32,
    /// The sequence's new block to copy into.
    pub dst: u32,
    /// Token slots to copy (from slot 0).
    pub tokens: u32,
}

/// What [`Manager::append`] did (`struct kvp_append_info`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Appended {
    /// The block holding the sequence's last token after the append
    /// (None if it holds no token): the last token's slot is
    /// `last_block * block_tokens + (num_tokens - 1) % block_tokens`
    /// ([`Appended::last_slot`]).
    pub last_block: Option<u32>,
    /// The sequence's token count after the append.
    pub num_tokens: u32,
    /// Blocks the append allocated: new table entries, plus a
    /// copy-on-write's destination.
    pub new_blocks: u32,
    /// The copy-on-write copy the engine must perform before writing
    /// (a shared, partly filled last block was replaced).
    pub cow: Option<BlockCopy>,
}

impl Appended {
    /// The last token's slot (block * block_tokens + offset), as
    /// [`Manager::slot_mapping`] numbers it; None without a block.
    pub fn last_slot(&self, block_tokens: u32) -> Option<u64> {
        let bt = block_tokens.max(1) as u64;
        self.last_block
            .map(|b| b as u64 * bt + (self.num_tokens.max(1) as u64 - 1) % bt)
    }
}

/// `struct kvp_seq_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqInfo {
    /// Tokens.
    pub num_tokens: u32,
    /// Block-table entries.
    pub num_blocks: u32,
    /// Logical clock at the last access (create, append, fork, trim).
    pub last_access: u64,
    /// Creates, appends and forks as the source.
    pub access_count: u64,
    /// The priority (Policy::Priority evicts the lowest first).
    pub priority: i32,
}

/// `struct kvp_stats`: exact at quiescence, approximate otherwise.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// Live sequences.
    pub sequences: u64,
    /// Tokens in live sequences.
    pub tokens: u64,
    /// Sequences created.
    pub seq_creates: u64,
    /// Sequences freed (evictions included).
    pub seq_frees: u64,
    /// Successful appends.
    pub appends: u64,
    /// Successful forks.
    pub forks: u64,
    /// Sequences evicted.
    pub evictions: u64,
    /// Copy-on-write copies reported.
    pub cow_copies: u64,
    /// Blocks this manager took from the pool.
    pub blocks_allocated: u64,
    /// Block-table entries this manager let go of.
    pub blocks_released: u64,
    /// Pool-wide used blocks (all managers).
    pub blocks_used: u64,
    /// Pool size.
    pub blocks_total: u64,
    /// KV bytes per block (0 for an ID-only pool).
    pub bytes_per_block: u64,
    /// Tokens asked for by create_cached.
    pub prefix_queries: u64,
    /// Of which served from cached blocks.
    pub prefix_hits: u64,
    /// hits / queries (0 with no queries).
    pub prefix_hit_rate: f64,
    /// Blocks this manager caches now.
    pub prefix_cached_blocks: u64,
    /// Blocks registered by commit.
    pub prefix_commits: u64,
    /// Its cached blocks evicted by the pool.
    pub prefix_evictions: u64,
    /// Its cached blocks pinned now.
    pub prefix_pinned: u64,
    /// Its retention clock (tick).
    pub retention_clock: u64,
    /// Full blocks a commit left uncached (another block caches the hash).
    pub prefix_uncached: u64,
    /// Events handed to the manager's event callback.
    pub events: u64,
}

/// kvp_admit's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// It fits now.
    Ok,
    /// It fits once sequences finish or are evicted.
    Later,
    /// It can never fit in this pool.
    Never,
}

/// What a prefix-cache event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Blocks were cached.
    Stored,
    /// Cached blocks were evicted.
    Removed,
    /// The cache was reset.
    Cleared,
}

/// A prefix-cache event; its slices live for the callback only.
#[derive(Debug)]
pub struct Event<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The blocks' hashes (empty for Cleared).
    pub hashes: &'a [BlockHash],
    /// Stored: the hash before `hashes[0]`, None at the root.
    pub parent: Option<&'a BlockHash>,
    /// Tokens per block.
    pub block_tokens: u32,
    /// Tokens the event covers.
    pub num_tokens: u32,
}

/// The FlashInfer paged layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csr {
    /// Sequence i's pages are `indices[indptr[i]..indptr[i + 1]]`.
    pub indptr: Vec<i32>,
    /// Block ids, sequence after sequence.
    pub indices: Vec<i32>,
    /// Tokens in each sequence's last page.
    pub last_page_len: Vec<i32>,
}

type EventFn = dyn Fn(&Event<'_>) + Send + Sync;

/// Sequences of one model over a pool.  Every `&self` method may run
/// concurrently with every other from any thread (calls on one sequence
/// are serialised by the library; different sequences never contend).
pub struct Manager {
    m: NonNull<sys::kvp_manager>,
    pool: Pool,
    cb: Option<Box<Box<EventFn>>>,
}

// SAFETY: the kvp_seq_*, kvp_admit, kvp_evict*, kvp_export_* and stats
// functions are thread-safe (include/kvpool.h's synchronisation table);
// set_event_callback takes &mut self and destroy happens in drop; the
// callback is Send + Sync.
unsafe impl Send for Manager {}
unsafe impl Sync for Manager {}

impl Drop for Manager {
    fn drop(&mut self) {
        // SAFETY: nobody else can use it (drop has it exclusively).
        unsafe { sys::kvp_manager_destroy(self.m.as_ptr()) }
    }
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.config();
        f.debug_struct("Manager")
            .field("id", &self.id())
            .field("name", &self.name())
            .field("policy", &c.policy)
            .field("eviction_threshold", &c.eviction_threshold)
            .field("watermark", &c.watermark)
            .field("prefix_cache", &c.prefix_cache)
            .field("sequences", &self.stats().sequences)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

unsafe extern "C" fn event_trampoline(ev: *const sys::kvp_event, arg: *mut c_void) {
    let f = &*(arg as *const Box<EventFn>);
    let e = &*ev;
    let hashes: &[BlockHash] = if e.hashes.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(e.hashes, e.nhashes as usize)
    };
    let event = Event {
        kind: match e.kind {
            0 => EventKind::Stored,
            1 => EventKind::Removed,
            _ => EventKind::Cleared,
        },
        hashes,
        parent: e.parent.as_ref(),
        block_tokens: e.block_tokens,
        num_tokens: e.num_tokens,
    };
    // Unwinding into C is undefined: a panicking callback aborts.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&event))).is_err() {
        eprintln!("kvpool: the event callback panicked");
        std::process::abort();
    }
}

impl Manager {
    /// Creates a manager over pool (it takes its own pool reference).
    /// The threshold and watermark are taken exactly (`KVP_EXACT_LIMITS`).
    pub fn new(pool: &Pool, cfg: &ManagerConfig) -> Result<Manager> {
        let name = match &cfg.name {
            Some(n) => Some(CString::new(n.as_str()).map_err(|_| Error::invalid())?),
            None => None,
        };
        let c = sys::kvp_manager_config {
            pool: pool.as_ptr(),
            policy: cfg.policy as c_int,
            eviction_threshold: cfg.eviction_threshold,
            watermark: cfg.watermark,
            flags: if cfg.prefix_cache {
                sys::KVP_PREFIX_CACHE | sys::KVP_EXACT_LIMITS
            } else {
                sys::KVP_EXACT_LIMITS
            },
            max_pinned: cfg.max_pinned,
            name: name.as_ref().map_or(ptr::null(), |n| n.as_ptr()),
        };
        let mut out = ptr::null_mut();
        // SAFETY: c and out are valid for the call.
        check(unsafe { sys::kvp_manager_create(&c, &mut out) })?;
        Ok(Manager {
            m: NonNull::new(out).ok_or_else(Error::invalid)?,
            pool: pool.clone(),
            cb: None,
        })
    }

    /// The raw pointer, for calls through [`sys`].
    pub fn as_ptr(&self) -> *mut sys::kvp_manager {
        self.m.as_ptr()
    }

    /// The manager's pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The configuration in effect (`kvp_manager_get_config`): the
    /// current policy, the threshold and watermark in use, max_pinned in
    /// use (0 without a prefix cache) and the name.
    pub fn config(&self) -> ManagerConfig {
        let mut c = sys::kvp_manager_config {
            pool: ptr::null_mut(),
            policy: 0,
            eviction_threshold: 0.0,
            watermark: 0.0,
            flags: 0,
            max_pinned: 0,
            name: ptr::null(),
        };
        // SAFETY: c is a valid out pointer; the only errors are NULL
        // arguments.  The name points into the manager, copied at once.
        let rc = unsafe { sys::kvp_manager_get_config(self.as_ptr(), &mut c) };
        debug_assert_eq!(rc, 0);
        let name = if c.name.is_null() {
            None
        } else {
            // SAFETY: a NUL-terminated string that lives with the manager.
            Some(
                unsafe { CStr::from_ptr(c.name) }
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        ManagerConfig {
            policy: Policy::from_raw(c.policy).unwrap_or(Policy::Lru),
            eviction_threshold: c.eviction_threshold,
            watermark: c.watermark,
            prefix_cache: c.flags & sys::KVP_PREFIX_CACHE != 0,
            max_pinned: c.max_pinned,
            name,
        }
    }

    /// The current eviction policy.
    pub fn policy(&self) -> Policy {
        self.config().policy
    }

    /// The utilisation at which eviction is due (what
    /// `evict_until_into(None, ..)` evicts down to).
    pub fn eviction_threshold(&self) -> f32 {
        self.config().eviction_threshold
    }

    /// The fraction of the pool admission keeps free.
    pub fn watermark(&self) -> f32 {
        self.config().watermark
    }

    /// Changes the eviction policy of a manager that may hold sequences
    /// and be in use by other threads: choices that start after the call
    /// use the new policy (`kvp_manager_set_policy`).
    pub fn set_policy(&self, policy: Policy) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_manager_set_policy(self.as_ptr(), policy as c_int) }).map(|_| ())
    }

    /// The sequence [`evict`](Manager::evict) would choose now, evicting
    /// nothing (None: no sequence).  Advice only: another thread's
    /// append, fork or free may change the choice before the next call.
    pub fn peek_victim(&self) -> Result<Option<u64>> {
        let mut v = 0u64;
        // SAFETY: v is a valid out pointer.
        let rc = unsafe { sys::kvp_evict_peek(self.as_ptr(), &mut v) };
        if rc == -ENOENT {
            return Ok(None);
        }
        check(rc)?;
        Ok(Some(v))
    }

    /// The manager's sequence ids, in no particular order (a sequence
    /// created or freed meanwhile may or may not be listed).
    pub fn sequences(&self) -> Result<Vec<u64>> {
        let mut ids = Vec::new();
        self.sequences_into(&mut ids)?;
        Ok(ids)
    }

    /// [`sequences`](Manager::sequences) into ids, replacing its
    /// contents; allocates nothing when ids has the capacity.
    pub fn sequences_into(&self, ids: &mut Vec<u64>) -> Result<()> {
        ids.clear();
        loop {
            let cap = len32(ids.capacity())?;
            let mut n = 0u32;
            // SAFETY: ids has room for cap entries; the call writes *n
            // of them on success.
            let rc = unsafe { sys::kvp_manager_seqs(self.as_ptr(), ids.as_mut_ptr(), cap, &mut n) };
            if rc == -ENOSPC {
                // More sequences meanwhile: room for a few more.
                ids.reserve(with_slack(n).max(cap as usize + 1));
                continue;
            }
            check(rc)?;
            // SAFETY: the first n <= cap entries are written.
            unsafe { ids.set_len(n as usize) };
            return Ok(());
        }
    }

    /// Makes room in seq's block table for num_tokens tokens in all, so
    /// that appends up to that count allocate no host memory (they still
    /// take their blocks from the pool).  The room lasts until seq is
    /// freed or its table shrinks (truncate, stream_trim); a fork does
    /// not inherit it.  A count at or below seq's is a no-op.
    pub fn reserve(&self, seq: u64, num_tokens: u32) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_reserve(self.as_ptr(), seq, num_tokens) }).map(|_| ())
    }

    /// Creates seq holding num_tokens tokens (0 allowed).  Exists is
    /// checked first, whatever num_tokens; NoSpace says how many blocks
    /// were requested and available.
    pub fn create(&self, seq: u64, num_tokens: u32) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_create(self.as_ptr(), seq, num_tokens) }).map(|_| ())
    }

    /// Creates seq reusing the longest cached prefix of hashes; returns
    /// the number of tokens served from the cache.
    pub fn create_cached(&self, seq: u64, hashes: &[BlockHash], num_tokens: u32) -> Result<u32> {
        let mut cached = 0u32;
        // SAFETY: hashes has nhashes entries.
        check(unsafe {
            sys::kvp_seq_create_cached(
                self.as_ptr(),
                seq,
                hashes.as_ptr(),
                len32(hashes.len())?,
                num_tokens,
                &mut cached,
            )
        })?;
        Ok(cached)
    }

    /// Registers seq's full blocks under hashes; returns how many blocks
    /// were newly cached.
    pub fn commit(&self, seq: u64, hashes: &[BlockHash]) -> Result<u32> {
        // SAFETY: hashes has nhashes entries.
        check(unsafe {
            sys::kvp_seq_commit(self.as_ptr(), seq, hashes.as_ptr(), len32(hashes.len())?)
        })
        .map(|n| n as u32)
    }

    /// commit with retention ranges; returns (blocks newly cached, pins
    /// the manager's cap refused).
    pub fn commit_retained(
        &self,
        seq: u64,
        hashes: &[BlockHash],
        ranges: &[Retention],
    ) -> Result<(u32, u32)> {
        let mut unpinned = 0u32;
        // SAFETY: hashes and ranges have the lengths passed.
        let n = check(unsafe {
            sys::kvp_seq_commit_retained(
                self.as_ptr(),
                seq,
                hashes.as_ptr(),
                len32(hashes.len())?,
                ranges.as_ptr(),
                len32(ranges.len())?,
                &mut unpinned,
            )
        })?;
        Ok((n as u32, unpinned))
    }

    /// Advances the retention clock by steps; returns the new time.
    pub fn tick(&self, steps: u64) -> Result<u64> {
        let mut now = 0u64;
        // SAFETY: now is valid for the call.
        check(unsafe { sys::kvp_manager_tick(self.as_ptr(), steps, &mut now) })?;
        Ok(now)
    }

    /// (priority, expiry; 0: none) of the block cached under hash.
    pub fn retention(&self, hash: &BlockHash) -> Result<(u32, u64)> {
        let (mut prio, mut exp) = (0u32, 0u64);
        // SAFETY: the pointers are valid for the call.
        check(unsafe { sys::kvp_prefix_retention(self.as_ptr(), hash, &mut prio, &mut exp) })?;
        Ok((prio, exp))
    }

    /// Appends num_tokens token slots to seq: which block took the last
    /// token, the token count, the blocks allocated and the
    /// copy-on-write copy to perform (`kvp_seq_append_ex`).  Allocates
    /// nothing on the Rust side; on a [`reserve`](Manager::reserve)d
    /// sequence the C library allocates no host memory either.
    #[inline]
    pub fn append(&self, seq: u64, num_tokens: u32) -> Result<Appended> {
        let mut cow = BlockCopy::default();
        let mut ncow = 0u32;
        let mut info = sys::kvp_append_info::default();
        // SAFETY: cow has room for cow_cap = 1 copy; info is valid.
        let rc = unsafe {
            sys::kvp_seq_append_ex(
                self.as_ptr(),
                seq,
                num_tokens,
                &mut cow,
                1,
                &mut ncow,
                &mut info,
            )
        };
        if rc != 0 {
            return Err(Error::from_rc(rc));
        }
        Ok(Appended {
            last_block: if info.last_block == sys::KVP_NO_BLOCK {
                None
            } else {
                Some(info.last_block)
            },
            num_tokens: info.num_tokens,
            new_blocks: info.new_blocks,
            cow: if ncow != 0 { Some(cow) } else { None },
        })
    }

    /// Creates sequence dst sharing all of src's blocks.  A fork counts
    /// as an access of src (its access count grows and its last access
    /// moves to now, just before dst's own): LRU keeps src over sequences
    /// untouched since but takes it before its fresh forks, and LFU takes
    /// the fresh forks first.
    pub fn fork(&self, src: u64, dst: u64) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_fork(self.as_ptr(), src, dst) }).map(|_| ())
    }

    /// Frees seq (its blocks go back to the pool, or to the prefix
    /// cache).
    pub fn free(&self, seq: u64) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_free(self.as_ptr(), seq) }).map(|_| ())
    }

    /// Rolls seq back to num_tokens tokens.
    pub fn truncate(&self, seq: u64, num_tokens: u32) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_truncate(self.as_ptr(), seq, num_tokens) }).map(|_| ())
    }

    /// StreamingLLM trim: keeps the first sink_tokens tokens and the last
    /// window_tokens, dropping whole blocks between them (so a few more
    /// tokens than sink + window may stay); returns the tokens dropped.
    pub fn stream_trim(&self, seq: u64, sink_tokens: u32, window_tokens: u32) -> Result<u32> {
        let mut ev = 0u32;
        // SAFETY: ev is a valid out pointer.
        check(unsafe {
            sys::kvp_seq_stream_trim(self.as_ptr(), seq, sink_tokens, window_tokens, &mut ev)
        })?;
        Ok(ev)
    }

    /// Sets seq's priority (Policy::Priority evicts the lowest first).
    pub fn set_priority(&self, seq: u64, priority: i32) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_set_priority(self.as_ptr(), seq, priority) }).map(|_| ())
    }

    /// seq's token and block counts, access clock and priority.
    pub fn info(&self, seq: u64) -> Result<SeqInfo> {
        let mut i = SeqInfo::default();
        // SAFETY: i is a valid struct kvp_seq_info.
        check(unsafe { sys::kvp_seq_info(self.as_ptr(), seq, &mut i) })?;
        Ok(i)
    }

    /// seq's block table, in one allocation of its size (more only if
    /// another thread grows seq meanwhile).
    pub fn blocks(&self, seq: u64) -> Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(self.info(seq)?.num_blocks as usize);
        self.blocks_into(seq, &mut ids)?;
        Ok(ids)
    }

    /// seq's block table into ids, replacing its contents; allocates
    /// nothing when ids has the capacity.
    pub fn blocks_into(&self, seq: u64, ids: &mut Vec<u32>) -> Result<()> {
        ids.clear();
        loop {
            let cap = len32(ids.capacity())?;
            let mut n = 0u32;
            // SAFETY: ids has room for cap entries; the call writes *n of
            // them on success.
            let rc =
                unsafe { sys::kvp_seq_blocks(self.as_ptr(), seq, ids.as_mut_ptr(), cap, &mut n) };
            if rc == -ENOSPC {
                // The count needed (more if seq grew meanwhile).
                ids.reserve((n as usize).max(cap as usize + 1));
                continue;
            }
            check(rc)?;
            // SAFETY: the first n <= cap entries are written.
            unsafe { ids.set_len(n as usize) };
            return Ok(());
        }
    }

    /// Whether num_tokens more tokens fit: now, later (once sequences
    /// finish or are evicted) or never.  Advice only.
    pub fn admit(&self, num_tokens: u32) -> Result<Admit> {
        // SAFETY: plain call on a live manager.
        Ok(
            match check(unsafe { sys::kvp_admit(self.as_ptr(), num_tokens) })? {
                0 => Admit::Ok,
                1 => Admit::Later,
                _ => Admit::Never,
            },
        )
    }

    /// Evicts one sequence by policy and returns its id.
    pub fn evict(&self) -> Result<u64> {
        let mut v = 0u64;
        // SAFETY: v is a valid out pointer.
        check(unsafe { sys::kvp_evict(self.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Evicts until utilisation <= target, at most cap sequences; a
    /// negative target means the manager's threshold (as `None` in
    /// [`evict_until_into`](Manager::evict_until_into)).  Returns
    /// (victims, target met).  The Vec grows with the victims rather
    /// than holding cap entries up front.
    pub fn evict_until(&self, target: f32, cap: u32) -> Result<(Vec<u64>, bool)> {
        let mut v = Vec::new();
        let target = if target < 0.0 { None } else { Some(target) };
        let met = self.evict_until_into(target, cap, &mut v)?;
        Ok((v, met))
    }

    /// Evicts by policy until utilisation <= target (None: the manager's
    /// [`eviction_threshold`](Manager::eviction_threshold)), at most cap
    /// sequences, the victims into out (its contents replaced; nothing
    /// allocated while it has room).  Returns whether the target was met
    /// (false: cap reached or no sequence left); the victims reported
    /// are evicted either way.
    pub fn evict_until_into(
        &self,
        target: Option<f32>,
        cap: u32,
        out: &mut Vec<u64>,
    ) -> Result<bool> {
        let target = match target {
            Some(t) if t < 0.0 => return Err(Error::invalid()),
            Some(t) => t,
            None => -1.0,
        };
        out.clear();
        loop {
            let left = cap as usize - out.len();
            if out.capacity() == out.len() && left > 0 {
                out.reserve(left.min(out.len().max(8)));
            }
            let room = (out.capacity() - out.len()).min(left) as u32;
            let mut n = 0u32;
            // SAFETY: out has room for `room` more entries past its
            // length; the call writes *n <= room of them.
            let rc = check(unsafe {
                sys::kvp_evict_until(
                    self.as_ptr(),
                    target,
                    out.as_mut_ptr().add(out.len()),
                    room,
                    &mut n,
                )
            })?;
            // SAFETY: n more entries are written.
            unsafe { out.set_len(out.len() + n as usize) };
            if rc == 0 {
                return Ok(true);
            }
            // Partial: victims[] full (go on while cap allows) or no
            // sequence left.
            if n < room || out.len() >= cap as usize {
                return Ok(false);
            }
        }
    }

    /// The manager's statistics (`kvp_manager_stats`).
    pub fn stats(&self) -> Stats {
        let mut st = Stats::default();
        // SAFETY: st is a valid struct kvp_stats.
        unsafe { sys::kvp_manager_stats(self.as_ptr(), &mut st) };
        st
    }

    /// The manager's process-unique id.
    pub fn id(&self) -> u64 {
        // SAFETY: plain call on a live manager.
        unsafe { sys::kvp_manager_id(self.as_ptr()) }
    }

    /// The manager's name: the `manager` label of its metrics.
    pub fn name(&self) -> String {
        // SAFETY: the name is a NUL-terminated string that lives as long
        // as the manager.
        unsafe { CStr::from_ptr(sys::kvp_manager_name(self.as_ptr())) }
            .to_string_lossy()
            .into_owned()
    }

    /// Checks the invariants of the pool and its managers (the caller
    /// guarantees quiescence).
    pub fn check(&self) -> Result<()> {
        // SAFETY: plain call; quiescence is the caller's (documented).
        check(unsafe { sys::kvp_manager_check(self.as_ptr()) }).map(|_| ())
    }

    /// Drops every idle cached block of the manager's prefix cache.
    pub fn prefix_reset(&self) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_prefix_reset(self.as_ptr()) }).map(|_| ())
    }

    /// Calls f for every prefix-cache event (None: stop).  f runs in the
    /// thread whose call caused the event (a commit's, any allocation's
    /// on the pool that evicts, a reset's), so concurrently from several
    /// threads; it must not call kvpool on the pool.  A panic in f aborts.
    pub fn set_event_callback(&mut self, f: Option<Box<EventFn>>) -> Result<()> {
        match f {
            None => {
                // SAFETY: &mut self: nobody else uses the manager.
                check(unsafe {
                    sys::kvp_manager_set_event_cb(self.as_ptr(), None, ptr::null_mut())
                })?;
                self.cb = None;
            }
            Some(f) => {
                let b: Box<Box<EventFn>> = Box::new(f);
                let arg = &*b as *const Box<EventFn> as *mut c_void;
                // SAFETY: arg points into a box kept alive in self.cb
                // until it is replaced, after the C side stops using it.
                check(unsafe {
                    sys::kvp_manager_set_event_cb(self.as_ptr(), Some(event_trampoline), arg)
                })?;
                self.cb = Some(b);
            }
        }
        Ok(())
    }

    /// FlashAttention / vLLM block table: (rows of `stride` ids padded
    /// with pad, stride).
    pub fn block_table(&self, seqs: &[u64], pad: i32) -> Result<(Vec<i32>, usize)> {
        let n = len32(seqs.len())?;
        loop {
            // SAFETY: a NULL table asks for the stride.
            let stride = check(unsafe {
                sys::kvp_export_block_table(
                    self.as_ptr(),
                    seqs.as_ptr(),
                    n,
                    ptr::null_mut(),
                    0,
                    pad,
                )
            })? as usize;
            let mut t = vec![0i32; stride * seqs.len()];
            // SAFETY: t has n rows of stride entries.
            let rc = unsafe {
                sys::kvp_export_block_table(
                    self.as_ptr(),
                    seqs.as_ptr(),
                    n,
                    t.as_mut_ptr(),
                    stride as u32,
                    pad,
                )
            };
            if rc == -ENOSPC {
                continue; // a sequence grew meanwhile
            }
            check(rc)?;
            return Ok((t, stride));
        }
    }

    /// FlashInfer paged layout.
    pub fn csr(&self, seqs: &[u64]) -> Result<Csr> {
        let n = len32(seqs.len())?;
        loop {
            // SAFETY: NULL indices ask for the count.
            let need = check(unsafe {
                sys::kvp_export_csr(
                    self.as_ptr(),
                    seqs.as_ptr(),
                    n,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    0,
                    ptr::null_mut(),
                )
            })? as usize;
            let mut c = Csr {
                indptr: vec![0; seqs.len() + 1],
                indices: vec![0; need],
                last_page_len: vec![0; seqs.len()],
            };
            // SAFETY: the arrays have the sizes the call needs.
            let rc = unsafe {
                sys::kvp_export_csr(
                    self.as_ptr(),
                    seqs.as_ptr(),
                    n,
                    c.indptr.as_mut_ptr(),
                    c.indices.as_mut_ptr(),
                    need as u32,
                    c.last_page_len.as_mut_ptr(),
                )
            };
            if rc == -ENOSPC {
                continue;
            }
            check(rc)?;
            return Ok(c);
        }
    }

    /// Slots (block * block_tokens + offset) of tokens first_pos ..
    /// first_pos + n - 1.
    pub fn slot_mapping(&self, seq: u64, first_pos: u32, n: u32) -> Result<Vec<i64>> {
        let mut s = vec![0i64; n as usize];
        // SAFETY: s has n entries.
        check(unsafe {
            sys::kvp_export_slot_mapping(self.as_ptr(), seq, first_pos, n, s.as_mut_ptr())
        })?;
        Ok(s)
    }

    fn row_elems<T: Element>(&self) -> Result<usize> {
        match self.pool.dtype {
            Some(d) if d.size() == std::mem::size_of::<T>() => Ok(self.pool.row_bytes() / d.size()),
            _ => Err(Error::invalid()),
        }
    }

    /// InvalidArgument unless k is one row of T and v one row too, or
    /// empty in a K-only pool.
    fn check_rows<T: Element>(&self, k: usize, v: usize) -> Result<()> {
        let n = self.row_elems::<T>()?;
        let v_want = if self.pool.k_only { 0 } else { n };
        if k != n || v != v_want {
            return Err(Error::invalid());
        }
        Ok(())
    }

    /// (row elements, K and V vectors for seq's tokens now; V empty in a
    /// K-only pool).
    fn gather_bufs<T: Element>(&self, seq: u64) -> Result<(usize, Vec<T>, Vec<T>)> {
        let n = self.row_elems::<T>()?;
        let tokens = self.info(seq)?.num_tokens as usize;
        let v = if self.pool.k_only {
            Vec::new()
        } else {
            vec![T::default(); n * tokens]
        };
        Ok((n, vec![T::default(); n * tokens], v))
    }

    /// V's pointer for the C data calls: NULL in a K-only pool.
    fn v_ptr<T>(&self, v: *const T) -> *const c_void {
        if self.pool.k_only {
            ptr::null()
        } else {
            v as *const c_void
        }
    }

    /// Writes token pos's K and V rows of one layer (row_bytes each).  In
    /// a K-only pool ([`PoolConfig::k_only`]) v must be empty.
    pub fn write<T: Element>(
        &self,
        seq: u64,
        pos: u32,
        layer: u32,
        k: &[T],
        v: &[T],
    ) -> Result<()> {
        self.check_rows::<T>(k.len(), v.len())?;
        // SAFETY: k holds one row, v one row or (K-only) is passed NULL.
        check(unsafe {
            sys::kvp_seq_write(
                self.as_ptr(),
                seq,
                pos,
                layer,
                k.as_ptr() as *const c_void,
                self.v_ptr(v.as_ptr()),
            )
        })
        .map(|_| ())
    }

    /// Reads token pos's K and V rows of one layer into k and v.  In a
    /// K-only pool v must be empty.
    pub fn read<T: Element>(
        &self,
        seq: u64,
        pos: u32,
        layer: u32,
        k: &mut [T],
        v: &mut [T],
    ) -> Result<()> {
        self.check_rows::<T>(k.len(), v.len())?;
        // SAFETY: k has room for one row, v for one or (K-only) is
        // passed NULL.
        check(unsafe {
            sys::kvp_seq_read(
                self.as_ptr(),
                seq,
                pos,
                layer,
                k.as_mut_ptr() as *mut c_void,
                self.v_ptr(v.as_ptr()) as *mut c_void,
            )
        })
        .map(|_| ())
    }

    /// One layer of the whole sequence as contiguous K and V
    /// `[tokens][heads][dim]` vectors, read token by token (safe while
    /// other threads append to seq: it returns the tokens it saw).  V is
    /// empty in a K-only pool.
    pub fn gather<T: Element>(&self, seq: u64, layer: u32) -> Result<(Vec<T>, Vec<T>)> {
        let (n, mut k, mut v) = self.gather_bufs::<T>(seq)?;
        let rows = k.chunks_mut(n.max(1));
        if self.pool.k_only {
            for (pos, kr) in rows.enumerate() {
                self.read(seq, pos as u32, layer, kr, &mut [])?;
            }
        } else {
            for (pos, (kr, vr)) in rows.zip(v.chunks_mut(n.max(1))).enumerate() {
                self.read(seq, pos as u32, layer, kr, vr)?;
            }
        }
        Ok((k, v))
    }

    /// As gather, in one C call (kvp_seq_gather).
    ///
    /// # Safety
    /// No other thread may append to seq during the call: the C function
    /// writes every token the sequence holds when it runs, into vectors
    /// sized from its token count just before.
    pub unsafe fn gather_unchecked<T: Element>(
        &self,
        seq: u64,
        layer: u32,
    ) -> Result<(Vec<T>, Vec<T>)> {
        let (_, mut k, mut v) = self.gather_bufs::<T>(seq)?;
        check(sys::kvp_seq_gather(
            self.as_ptr(),
            seq,
            layer,
            k.as_mut_ptr() as *mut c_void,
            self.v_ptr(v.as_mut_ptr()) as *mut c_void,
        ))?;
        Ok((k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync::<Pool>();
        assert_send_sync::<Manager>();
    }

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
}
