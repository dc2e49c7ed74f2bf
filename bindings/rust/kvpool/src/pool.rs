// SPDX-License-Identifier: MIT
//! The pool: its parameters (`DType`, `Layout`, `PoolConfig`), its
//! counters (`PoolStats`), the `Pool` handle and its block calls, RAII
//! `Block`s whose data is viewed as `Element`s, and `thread_flush`.
use std::fmt;
use std::os::raw::c_int;
use std::ptr::{self, NonNull};

use crate::error::{check, len32, Error, Result, EBUSY};
use crate::sys;

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
    /// kvp_pool_create's rules, each refusal naming the field (a layout
    /// whose block size overflows is left to the C library).
    fn check(&self) -> Result<()> {
        if self.num_blocks > 1 << 31 {
            return Err(Error::invalid_arg(
                "Pool: num_blocks must be in [0, 2^31]",
            ));
        }
        if self.block_tokens == 0 {
            return Err(Error::invalid_arg("Pool: block_tokens must be at least 1"));
        }
        if self.cache_blocks > 4096 || self.cache_blocks > self.num_blocks {
            return Err(Error::invalid_arg(
                "Pool: cache_blocks must be at most 4096 and at most num_blocks",
            ));
        }
        match self.layout {
            None if self.k_only => Err(Error::invalid_arg(
                "Pool: k_only needs a layout (an ID-only pool has no data)",
            )),
            Some(l) if l.num_layers == 0 || l.num_kv_heads == 0 || l.head_dim == 0 => {
                Err(Error::invalid_arg(
                    "Pool: layout's num_layers, num_kv_heads and head_dim must be at least 1",
                ))
            }
            _ => Ok(()),
        }
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
    /// References going 0 -> 1: allocated blocks and revived
    /// prefix-cache hits.
    pub allocs: u64,
    /// References going 1 -> 0: frees and cached blocks going idle.
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
    pub(crate) dtype: Option<DType>,
    pub(crate) k_only: bool,
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
    /// An invalid field is an [`ErrorKind::InvalidArgument`] whose
    /// [`Error::detail`] names it and its range.
    ///
    /// [`ErrorKind::InvalidArgument`]: crate::ErrorKind::InvalidArgument
    pub fn new(cfg: &PoolConfig) -> Result<Pool> {
        cfg.check()?;
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

    /// The pool's counters and gauges (`kvp_pool_stats`).
    pub fn stats(&self) -> PoolStats {
        let mut st = PoolStats::default();
        // SAFETY: st is a valid struct kvp_pool_stats.
        unsafe { sys::kvp_pool_stats(self.as_ptr(), &mut st) };
        st
    }

    /// Checks the pool's invariants.  The caller guarantees that no other
    /// thread uses the pool during the call: that includes threads whose
    /// closures returned but whose thread-local destructors (which hand
    /// their caches back) have not run, as after a `std::thread::scope`;
    /// call [`thread_flush`] at the end of such workers.
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
        // SAFETY: this Block holds a reference on the block.
        unsafe { self.pool.held_data(self.id) }
    }

    /// The block's data, writable: Busy while the block is shared.
    pub fn data_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        // SAFETY: held, and &mut self makes this the handle's only
        // borrow.
        unsafe { self.pool.held_data_mut(self.id) }
    }
}

impl Pool {
    /// The data of block id as T.
    ///
    /// # Safety
    /// The caller holds a reference on id for as long as the slice
    /// lives (its data is not reused meanwhile); the pool outlives it,
    /// and the arena is aligned for every dtype.
    unsafe fn held_data<T: Element>(&self, id: u32) -> Result<&[T]> {
        let n = self.elems::<T>()?;
        Ok(std::slice::from_raw_parts(
            sys::kvp_block_data(self.as_ptr(), id) as *const T,
            n,
        ))
    }

    /// The data of block id, writable: Busy while another holder shares
    /// it.
    ///
    /// # Safety
    /// As [`held_data`](Pool::held_data), and the caller's handle is
    /// borrowed mutably for as long as the slice lives, so that the only
    /// holder has the only view.
    #[allow(clippy::mut_from_ref)]
    unsafe fn held_data_mut<T: Element>(&self, id: u32) -> Result<&mut [T]> {
        let n = self.elems::<T>()?;
        if self.refcount(id)? != 1 {
            return Err(Error::from_errno(EBUSY));
        }
        Ok(std::slice::from_raw_parts_mut(
            sys::kvp_block_data(self.as_ptr(), id) as *mut T,
            n,
        ))
    }

    /// Allocates one block as an [`OwnedBlock`]: a [`Block`] that holds
    /// its own reference on the pool instead of borrowing it, so that a
    /// struct can keep both the pool and its blocks (a page table indexed
    /// by block id, say).
    pub fn alloc_owned(&self) -> Result<OwnedBlock> {
        let mut id = [0u32];
        self.alloc_into(&mut id)?;
        Ok(OwnedBlock {
            pool: self.clone(),
            id: id[0],
        })
    }
}

/// One held reference on a block, as [`Block`], that also holds a
/// reference on its pool ([`Pool::alloc_owned`]): no lifetime ties it to
/// a borrow of the pool.  Its data is borrowed through it, `data_mut()`
/// only while nobody else holds the block.  The block's reference, then
/// the pool's, are dropped with it.
pub struct OwnedBlock {
    pool: Pool,
    id: u32,
}

impl fmt::Debug for OwnedBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedBlock")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl OwnedBlock {
    /// The block's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The pool the block belongs to.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Another reference on the same block (kvp_block_ref).
    pub fn share(&self) -> Result<OwnedBlock> {
        self.pool.block_ref(self.id)?;
        Ok(OwnedBlock {
            pool: self.pool.clone(),
            id: self.id,
        })
    }

    /// The block's data, as [`Block::data`].
    pub fn data<T: Element>(&self) -> Result<&[T]> {
        // SAFETY: this OwnedBlock holds a reference on the block and on
        // the pool.
        unsafe { self.pool.held_data(self.id) }
    }

    /// The block's data, writable, as [`Block::data_mut`].
    pub fn data_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        // SAFETY: held, and &mut self makes this the handle's only
        // borrow.
        unsafe { self.pool.held_data_mut(self.id) }
    }
}

impl Drop for OwnedBlock {
    fn drop(&mut self) {
        // A held reference: the free cannot fail.
        let _ = self.pool.free(&[self.id]);
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
