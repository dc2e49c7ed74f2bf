//! kvpool: paged KV-cache block management for LLM inference engines.
//!
//! A safe binding of libkvpool's C ABI (`include/kvpool.h`), with no
//! dependency outside std.  [`Pool`] and [`Manager`] are `Send + Sync`:
//! share them across threads by reference (`std::thread::scope`) or in an
//! `Arc`; every method may run concurrently with every other, as in C,
//! except the ones that take `&mut self` (the C library's "nothing else
//! on this manager" calls).  Dropping a handle releases it.  Every fallible
//! call returns `Result<T, kvpool::Error>`, whose [`Error::errno`] is the
//! C call's errno.
//!
//! ```no_run
//! use kvpool::{Manager, ManagerConfig, Pool, PoolConfig};
//! let pool = Pool::new(&PoolConfig::new(1024, 16)).unwrap();
//! let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
//! m.create(1, 100).unwrap();
//! let copy = m.append(1, 1).unwrap(); // Some(copy) after a fork
//! assert!(copy.is_none());
//! ```
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::{self, NonNull};

/// The raw C ABI, for callers that need exactly the C path (the
/// benchmarks compare the safe wrappers against it).
#[allow(non_camel_case_types)]
pub mod sys {
    use std::os::raw::{c_char, c_int, c_void};

    #[repr(C)]
    pub struct kvp_pool {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct kvp_manager {
        _private: [u8; 0],
    }
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct kvp_layout {
        pub num_layers: u32,
        pub num_kv_heads: u32,
        pub head_dim: u32,
        pub dtype: c_int,
    }
    #[repr(C)]
    pub struct kvp_pool_config {
        pub num_blocks: u32,
        pub block_tokens: u32,
        pub cache_blocks: u32,
        pub device_id: i32,
        pub layout: *const kvp_layout,
        pub flags: u32,
    }
    #[repr(C)]
    pub struct kvp_manager_config {
        pub pool: *mut kvp_pool,
        pub policy: c_int,
        pub eviction_threshold: f32,
        pub watermark: f32,
        pub flags: u32,
        pub max_pinned: u32,
        pub name: *const c_char,
    }
    #[repr(C)]
    pub struct kvp_hash_keys {
        pub salt: *const c_void,
        pub salt_len: usize,
        pub lora: *const c_char,
    }
    /// The fields of struct kvp_event this binding reads (the library
    /// passes it by pointer; fields appended later are not read).
    #[repr(C)]
    pub struct kvp_event {
        pub kind: c_int,
        pub hashes: *const super::BlockHash,
        pub nhashes: u32,
        pub parent: *const super::BlockHash,
        pub block_tokens: u32,
        pub num_tokens: u32,
    }
    pub type kvp_event_cb = Option<unsafe extern "C" fn(*const kvp_event, *mut c_void)>;
    use super::{BlockCopy, BlockHash, PoolStats, SeqInfo, Stats};

    extern "C" {
        pub fn kvp_strerror(err: c_int) -> *const c_char;
        pub fn kvp_pool_create(cfg: *const kvp_pool_config, out: *mut *mut kvp_pool) -> c_int;
        pub fn kvp_pool_ref(pool: *mut kvp_pool) -> *mut kvp_pool;
        pub fn kvp_pool_unref(pool: *mut kvp_pool);
        pub fn kvp_pool_alloc(pool: *mut kvp_pool, n: u32, ids: *mut u32) -> c_int;
        pub fn kvp_pool_free(pool: *mut kvp_pool, ids: *const u32, n: u32) -> c_int;
        pub fn kvp_block_ref(pool: *mut kvp_pool, id: u32) -> c_int;
        pub fn kvp_block_refcount(pool: *mut kvp_pool, id: u32) -> c_int;
        pub fn kvp_block_data(pool: *mut kvp_pool, id: u32) -> *mut c_void;
        pub fn kvp_block_bytes(pool: *const kvp_pool) -> usize;
        pub fn kvp_pool_block_tokens(pool: *const kvp_pool) -> u32;
        pub fn kvp_pool_row_bytes(pool: *const kvp_pool) -> usize;
        pub fn kvp_pool_stats(pool: *mut kvp_pool, st: *mut PoolStats);
        pub fn kvp_pool_check(pool: *mut kvp_pool) -> c_int;
        pub fn kvp_thread_flush();

        pub fn kvp_manager_create(
            cfg: *const kvp_manager_config,
            out: *mut *mut kvp_manager,
        ) -> c_int;
        pub fn kvp_manager_destroy(m: *mut kvp_manager);
        pub fn kvp_seq_create(m: *mut kvp_manager, seq: u64, num_tokens: u32) -> c_int;
        pub fn kvp_seq_append(
            m: *mut kvp_manager,
            seq: u64,
            num_tokens: u32,
            cow: *mut BlockCopy,
            cow_cap: u32,
            ncow: *mut u32,
        ) -> c_int;
        pub fn kvp_seq_fork(m: *mut kvp_manager, src: u64, dst: u64) -> c_int;
        pub fn kvp_seq_free(m: *mut kvp_manager, seq: u64) -> c_int;
        pub fn kvp_seq_truncate(m: *mut kvp_manager, seq: u64, num_tokens: u32) -> c_int;
        pub fn kvp_seq_stream_trim(
            m: *mut kvp_manager,
            seq: u64,
            sink_tokens: u32,
            window_tokens: u32,
            evicted_tokens: *mut u32,
        ) -> c_int;
        pub fn kvp_seq_set_priority(m: *mut kvp_manager, seq: u64, priority: i32) -> c_int;
        pub fn kvp_seq_info(m: *mut kvp_manager, seq: u64, info: *mut SeqInfo) -> c_int;
        pub fn kvp_seq_blocks(
            m: *mut kvp_manager,
            seq: u64,
            ids: *mut u32,
            cap: u32,
            n: *mut u32,
        ) -> c_int;
        pub fn kvp_admit(m: *mut kvp_manager, num_tokens: u32) -> c_int;
        pub fn kvp_evict(m: *mut kvp_manager, victim: *mut u64) -> c_int;
        pub fn kvp_evict_until(
            m: *mut kvp_manager,
            target: f32,
            victims: *mut u64,
            cap: u32,
            n: *mut u32,
        ) -> c_int;
        pub fn kvp_manager_stats(m: *mut kvp_manager, st: *mut Stats);
        pub fn kvp_manager_id(m: *const kvp_manager) -> u64;
        pub fn kvp_manager_name(m: *const kvp_manager) -> *const c_char;
        pub fn kvp_metrics_format(
            pool: *mut kvp_pool,
            managers: *const *mut kvp_manager,
            n: u32,
            flags: u32,
            buf: *mut c_char,
            cap: usize,
            len: *mut usize,
        ) -> c_int;
        pub fn kvp_manager_check(m: *mut kvp_manager) -> c_int;
        pub fn kvp_export_block_table(
            m: *mut kvp_manager,
            seqs: *const u64,
            nseq: u32,
            table: *mut i32,
            stride: u32,
            pad: i32,
        ) -> c_int;
        pub fn kvp_export_csr(
            m: *mut kvp_manager,
            seqs: *const u64,
            nseq: u32,
            indptr: *mut i32,
            indices: *mut i32,
            cap: u32,
            last_page_len: *mut i32,
        ) -> c_int;
        pub fn kvp_export_slot_mapping(
            m: *mut kvp_manager,
            seq: u64,
            first_pos: u32,
            n: u32,
            slots: *mut i64,
        ) -> c_int;
        pub fn kvp_hash_blocks(
            algo: c_int,
            parent: *const BlockHash,
            keys: *const kvp_hash_keys,
            tokens: *const u32,
            ntokens: u32,
            block_tokens: u32,
            out: *mut BlockHash,
        ) -> c_int;
        pub fn kvp_hash_set_xxh3_seed(seed: u64) -> c_int;
        pub fn kvp_seq_create_cached(
            m: *mut kvp_manager,
            seq: u64,
            hashes: *const BlockHash,
            nhashes: u32,
            num_tokens: u32,
            cached_tokens: *mut u32,
        ) -> c_int;
        pub fn kvp_seq_commit(
            m: *mut kvp_manager,
            seq: u64,
            hashes: *const BlockHash,
            nhashes: u32,
        ) -> c_int;
        pub fn kvp_seq_commit_retained(
            m: *mut kvp_manager,
            seq: u64,
            hashes: *const BlockHash,
            nhashes: u32,
            ranges: *const super::Retention,
            nranges: u32,
            unpinned: *mut u32,
        ) -> c_int;
        pub fn kvp_manager_tick(m: *mut kvp_manager, steps: u64, now: *mut u64) -> c_int;
        pub fn kvp_prefix_retention(
            m: *mut kvp_manager,
            hash: *const BlockHash,
            priority: *mut u32,
            expires: *mut u64,
        ) -> c_int;
        pub fn kvp_prefix_reset(m: *mut kvp_manager) -> c_int;
        pub fn kvp_manager_set_event_cb(
            m: *mut kvp_manager,
            cb: kvp_event_cb,
            arg: *mut c_void,
        ) -> c_int;
        pub fn kvp_seq_write(
            m: *mut kvp_manager,
            seq: u64,
            pos: u32,
            layer: u32,
            k: *const c_void,
            v: *const c_void,
        ) -> c_int;
        pub fn kvp_seq_read(
            m: *mut kvp_manager,
            seq: u64,
            pos: u32,
            layer: u32,
            k: *mut c_void,
            v: *mut c_void,
        ) -> c_int;
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

/// A failed kvpool call: the negative errno the C function returned.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Error {
    code: i32,
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

const EINVAL: i32 = 22;
const ENOSPC: i32 = 28;

impl Error {
    fn from_rc(rc: c_int) -> Error {
        Error { code: -rc }
    }
    fn invalid() -> Error {
        Error { code: EINVAL }
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
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Error({:?}, errno {}: {})",
            self.kind(),
            self.code,
            self.message()
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kvpool: {} (errno {})", self.message(), self.code)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

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

// ------------------------------------------------------------------ pool

/// Element type of KV data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32 = 0,
    F16 = 1,
    BF16 = 2,
    F64 = 3,
    /// fp8 / int8 as raw bytes.
    U8 = 4,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::F64 => 8,
            DType::U8 => 1,
        }
    }
}

/// KV data shape of a data-owning pool (per block:
/// `[layer][K,V][token][head][dim]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub num_layers: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    pub dtype: DType,
}

/// Pool parameters (`struct kvp_pool_config`).
#[derive(Clone, Debug)]
pub struct PoolConfig {
    pub num_blocks: u32,
    pub block_tokens: u32,
    /// Per-thread cache capacity, 0 = automatic.
    pub cache_blocks: u32,
    pub device_id: i32,
    /// None: an ID-only pool (KV data elsewhere, e.g. on a GPU).
    pub layout: Option<Layout>,
    /// Zero a block's data when it is allocated.
    pub zero: bool,
    /// No per-thread caches.
    pub nocache: bool,
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
        }
    }
    pub fn layout(mut self, layout: Layout) -> PoolConfig {
        self.layout = Some(layout);
        self
    }
}

/// `struct kvp_pool_stats`: exact at quiescence, approximate otherwise.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub total: u64,
    pub free: u64,
    pub used: u64,
    pub in_thread_caches: u64,
    pub peak_used: u64,
    pub allocs: u64,
    pub frees: u64,
    pub cache_blocks: u32,
    pub threads: u32,
    pub evictable: u64,
    pub cache_evictions: u64,
}

impl PoolStats {
    /// used / total.
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
}

// SAFETY: every kvp_pool function is thread-safe except kvp_pool_check,
// which takes &mut self here.
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

impl Clone for Pool {
    fn clone(&self) -> Pool {
        // SAFETY: self holds a reference.
        unsafe { sys::kvp_pool_ref(self.p.as_ptr()) };
        Pool {
            p: self.p,
            dtype: self.dtype,
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: drops the reference this handle holds.
        unsafe { sys::kvp_pool_unref(self.p.as_ptr()) }
    }
}

impl Pool {
    pub fn new(cfg: &PoolConfig) -> Result<Pool> {
        let lay = cfg.layout.map(|l| sys::kvp_layout {
            num_layers: l.num_layers,
            num_kv_heads: l.num_kv_heads,
            head_dim: l.head_dim,
            dtype: l.dtype as c_int,
        });
        let c = sys::kvp_pool_config {
            num_blocks: cfg.num_blocks,
            block_tokens: cfg.block_tokens,
            cache_blocks: cfg.cache_blocks,
            device_id: cfg.device_id,
            layout: lay.as_ref().map_or(ptr::null(), |l| l as *const _),
            flags: (cfg.zero as u32) | ((cfg.nocache as u32) << 1),
        };
        let mut out = ptr::null_mut();
        // SAFETY: c and out are valid for the call.
        check(unsafe { sys::kvp_pool_create(&c, &mut out) })?;
        Ok(Pool {
            p: NonNull::new(out).ok_or_else(Error::invalid)?,
            dtype: cfg.layout.map(|l| l.dtype),
        })
    }

    /// The raw pointer, for calls through [`sys`].
    pub fn as_ptr(&self) -> *mut sys::kvp_pool {
        self.p.as_ptr()
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

impl<'p> Block<'p> {
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
            return Err(Error { code: 16 });
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
    Sha256 = 0,
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
    Lru = 0,
    Lfu = 1,
    Longest = 2,
    Priority = 3,
}

/// Manager parameters (`struct kvp_manager_config`).
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    pub policy: Policy,
    /// 0 = the default 0.9.
    pub eviction_threshold: f32,
    /// 0 = the default 0.01.
    pub watermark: f32,
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
            eviction_threshold: 0.0,
            watermark: 0.0,
            prefix_cache: false,
            max_pinned: 0,
            name: None,
        }
    }
}

/// Retention priorities (kvpool.h): the default, the highest below a
/// pin, and a pin (never evicted; capped per manager).
pub const RETAIN_DEFAULT: u32 = 0;
pub const RETAIN_MAX: u32 = 14;
pub const RETAIN_PIN: u32 = 15;

/// `struct kvp_retention`: tokens [first_token, first_token + num_tokens)
/// (num_tokens 0: to the end) at `priority` for `duration` ticks of the
/// manager's retention clock (0: for ever).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub first_token: u32,
    pub num_tokens: u32,
    pub priority: u32,
    pub duration: u64,
}

/// A copy-on-write copy the engine must perform: the first `tokens`
/// token slots of block src into block dst.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCopy {
    pub src: u32,
    pub dst: u32,
    pub tokens: u32,
}

/// `struct kvp_seq_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqInfo {
    pub num_tokens: u32,
    pub num_blocks: u32,
    pub last_access: u64,
    pub access_count: u64,
    pub priority: i32,
}

/// `struct kvp_stats`: exact at quiescence, approximate otherwise.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub sequences: u64,
    pub tokens: u64,
    pub seq_creates: u64,
    pub seq_frees: u64,
    pub appends: u64,
    pub forks: u64,
    pub evictions: u64,
    pub cow_copies: u64,
    pub blocks_allocated: u64,
    pub blocks_released: u64,
    pub blocks_used: u64,
    pub blocks_total: u64,
    pub bytes_per_block: u64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub prefix_hit_rate: f64,
    pub prefix_cached_blocks: u64,
    pub prefix_commits: u64,
    pub prefix_evictions: u64,
    pub prefix_pinned: u64,
    pub retention_clock: u64,
    /// Full blocks a commit left uncached (another block caches the hash).
    pub prefix_uncached: u64,
    /// Events handed to the manager's event callback.
    pub events: u64,
}

/// kvp_admit's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    Ok,
    Later,
    Never,
}

/// What a prefix-cache event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Stored,
    Removed,
    Cleared,
}

/// A prefix-cache event; its slices live for the callback only.
#[derive(Debug)]
pub struct Event<'a> {
    pub kind: EventKind,
    pub hashes: &'a [BlockHash],
    /// Stored: the hash before hashes[0], None at the root.
    pub parent: Option<&'a BlockHash>,
    pub block_tokens: u32,
    pub num_tokens: u32,
}

/// The FlashInfer paged layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csr {
    pub indptr: Vec<i32>,
    pub indices: Vec<i32>,
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
            flags: cfg.prefix_cache as u32,
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

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

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

    /// Appends token slots; returns the copy-on-write copy to perform.
    #[inline]
    pub fn append(&self, seq: u64, num_tokens: u32) -> Result<Option<BlockCopy>> {
        let mut cow = BlockCopy::default();
        let mut ncow = 0u32;
        // SAFETY: cow has room for cow_cap = 1 copy.
        let rc =
            unsafe { sys::kvp_seq_append(self.as_ptr(), seq, num_tokens, &mut cow, 1, &mut ncow) };
        if rc != 0 {
            return Err(Error::from_rc(rc));
        }
        Ok(if ncow != 0 { Some(cow) } else { None })
    }

    pub fn fork(&self, src: u64, dst: u64) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_fork(self.as_ptr(), src, dst) }).map(|_| ())
    }

    pub fn free(&self, seq: u64) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_free(self.as_ptr(), seq) }).map(|_| ())
    }

    /// Rolls seq back to num_tokens tokens.
    pub fn truncate(&self, seq: u64, num_tokens: u32) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_truncate(self.as_ptr(), seq, num_tokens) }).map(|_| ())
    }

    /// StreamingLLM trim; returns the number of tokens dropped.
    pub fn stream_trim(&self, seq: u64, sink_tokens: u32, window_tokens: u32) -> Result<u32> {
        let mut ev = 0u32;
        // SAFETY: ev is a valid out pointer.
        check(unsafe {
            sys::kvp_seq_stream_trim(self.as_ptr(), seq, sink_tokens, window_tokens, &mut ev)
        })?;
        Ok(ev)
    }

    pub fn set_priority(&self, seq: u64, priority: i32) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_seq_set_priority(self.as_ptr(), seq, priority) }).map(|_| ())
    }

    pub fn info(&self, seq: u64) -> Result<SeqInfo> {
        let mut i = SeqInfo::default();
        // SAFETY: i is a valid struct kvp_seq_info.
        check(unsafe { sys::kvp_seq_info(self.as_ptr(), seq, &mut i) })?;
        Ok(i)
    }

    /// seq's block table.
    pub fn blocks(&self, seq: u64) -> Result<Vec<u32>> {
        let mut ids = vec![0u32; 64];
        loop {
            let mut n = 0u32;
            // SAFETY: ids has cap entries.
            let rc = unsafe {
                sys::kvp_seq_blocks(
                    self.as_ptr(),
                    seq,
                    ids.as_mut_ptr(),
                    len32(ids.len())?,
                    &mut n,
                )
            };
            if rc == -ENOSPC {
                ids.resize((n as usize).max(2 * ids.len()), 0);
                continue;
            }
            check(rc)?;
            ids.truncate(n as usize);
            return Ok(ids);
        }
    }

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

    /// Evicts until utilisation <= target (negative: the manager's
    /// threshold), at most cap sequences; returns (victims, target met).
    pub fn evict_until(&self, target: f32, cap: u32) -> Result<(Vec<u64>, bool)> {
        let mut v = vec![0u64; cap as usize];
        let mut n = 0u32;
        // SAFETY: v has cap entries.
        let rc = check(unsafe {
            sys::kvp_evict_until(self.as_ptr(), target, v.as_mut_ptr(), cap, &mut n)
        })?;
        v.truncate(n as usize);
        Ok((v, rc == 0))
    }

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

    /// InvalidArgument unless k and v are one row of T each.
    fn check_rows<T: Element>(&self, k: usize, v: usize) -> Result<()> {
        let n = self.row_elems::<T>()?;
        if k != n || v != n {
            return Err(Error::invalid());
        }
        Ok(())
    }

    /// (row elements, K and V vectors for seq's tokens now).
    fn gather_bufs<T: Element>(&self, seq: u64) -> Result<(usize, Vec<T>, Vec<T>)> {
        let n = self.row_elems::<T>()?;
        let tokens = self.info(seq)?.num_tokens as usize;
        Ok((
            n,
            vec![T::default(); n * tokens],
            vec![T::default(); n * tokens],
        ))
    }

    /// Writes token pos's K and V rows of one layer (row_bytes each).
    pub fn write<T: Element>(
        &self,
        seq: u64,
        pos: u32,
        layer: u32,
        k: &[T],
        v: &[T],
    ) -> Result<()> {
        self.check_rows::<T>(k.len(), v.len())?;
        // SAFETY: k and v hold one row each.
        check(unsafe {
            sys::kvp_seq_write(
                self.as_ptr(),
                seq,
                pos,
                layer,
                k.as_ptr() as *const c_void,
                v.as_ptr() as *const c_void,
            )
        })
        .map(|_| ())
    }

    /// Reads token pos's K and V rows of one layer into k and v.
    pub fn read<T: Element>(
        &self,
        seq: u64,
        pos: u32,
        layer: u32,
        k: &mut [T],
        v: &mut [T],
    ) -> Result<()> {
        self.check_rows::<T>(k.len(), v.len())?;
        // SAFETY: k and v have room for one row each.
        check(unsafe {
            sys::kvp_seq_read(
                self.as_ptr(),
                seq,
                pos,
                layer,
                k.as_mut_ptr() as *mut c_void,
                v.as_mut_ptr() as *mut c_void,
            )
        })
        .map(|_| ())
    }

    /// One layer of the whole sequence as contiguous K and V
    /// [tokens][heads][dim] vectors, read token by token (safe while
    /// other threads append to seq: it returns the tokens it saw).
    pub fn gather<T: Element>(&self, seq: u64, layer: u32) -> Result<(Vec<T>, Vec<T>)> {
        let (n, mut k, mut v) = self.gather_bufs::<T>(seq)?;
        for (pos, (kr, vr)) in k
            .chunks_mut(n.max(1))
            .zip(v.chunks_mut(n.max(1)))
            .enumerate()
        {
            self.read(seq, pos as u32, layer, kr, vr)?;
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
            v.as_mut_ptr() as *mut c_void,
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
    }
}
