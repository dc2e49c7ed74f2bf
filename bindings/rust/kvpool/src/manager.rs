// SPDX-License-Identifier: MIT
//! The manager and its sequences: `Policy` and `ManagerConfig`, the
//! `Manager` handle, and the sequence calls (create, reserve, append and
//! its `Appended` / `BlockCopy`, fork, free, truncate, trim, priority,
//! `SeqInfo`, block tables) with the manager's `Stats`.
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::c_int;
use std::ptr::{self, NonNull};

use crate::error::{check, len32, Error, Result, ENOBUFS};
use crate::events::EventFn;
use crate::{sys, Pool};

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
    /// Report the cached blocks a [`Manager::create_cached`] reuses to
    /// the event callback, as one stored event with
    /// [`Event::reused`](crate::Event::reused) set
    /// (`KVP_EMIT_CACHED_EVENTS`, vLLM's emit_cached_block_events);
    /// needs `prefix_cache`.  Default off.
    pub emit_cached_events: bool,
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
            emit_cached_events: false,
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
    /// Report reused cached blocks as stored events (needs a prefix
    /// cache).
    pub fn emit_cached_events(mut self, on: bool) -> ManagerConfig {
        self.emit_cached_events = on;
        self
    }
    /// kvp_manager_create's rules, each refusal naming the field.
    fn check(&self, pool_blocks: u32) -> Result<()> {
        let t = self.eviction_threshold;
        if !(0.0..=1.0).contains(&t) {
            return Err(Error::invalid_arg(
                "Manager: eviction_threshold must be in [0, 1]",
            ));
        }
        let w = self.watermark;
        if !(0.0..1.0).contains(&w) {
            return Err(Error::invalid_arg("Manager: watermark must be in [0, 1)"));
        }
        if self.emit_cached_events && !self.prefix_cache {
            return Err(Error::invalid_arg(
                "Manager: emit_cached_events needs prefix_cache",
            ));
        }
        if self.max_pinned > pool_blocks {
            return Err(Error::invalid_arg(
                "Manager: max_pinned must be at most the pool's blocks",
            ));
        }
        if let Some(n) = &self.name {
            if n.is_empty() || n.len() > 63 || n.bytes().any(|c| c < 0x20 || c == 0x7f) {
                return Err(Error::invalid_arg(
                    "Manager: name must be 1 to 63 bytes without control characters",
                ));
            }
        }
        Ok(())
    }
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

impl Stats {
    /// Adds st into self, to total several managers (`kvp_stats_add`):
    /// counters and per-manager gauges are summed; the pool-wide values
    /// (blocks_used, blocks_total, bytes_per_block) and retention_clock
    /// take the larger, and the hit rate is recomputed.
    pub fn add(&mut self, st: &Stats) {
        // SAFETY: two valid struct kvp_stats.
        unsafe { sys::kvp_stats_add(self, st) }
    }
}

/// Sequences of one model over a pool.  Every `&self` method may run
/// concurrently with every other from any thread (calls on one sequence
/// are serialised by the library; different sequences never contend).
pub struct Manager {
    m: NonNull<sys::kvp_manager>,
    pub(crate) pool: Pool,
    pub(crate) cb: Option<Box<Box<EventFn>>>,
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

impl Manager {
    /// Creates a manager over pool (it takes its own pool reference).
    /// The threshold and watermark are taken exactly (`KVP_EXACT_LIMITS`).
    /// An invalid field is an [`ErrorKind::InvalidArgument`] whose
    /// [`Error::detail`] names it and its range.
    ///
    /// [`ErrorKind::InvalidArgument`]: crate::ErrorKind::InvalidArgument
    pub fn new(pool: &Pool, cfg: &ManagerConfig) -> Result<Manager> {
        cfg.check(pool.num_blocks())?;
        let name = match &cfg.name {
            Some(n) => Some(CString::new(n.as_str()).map_err(|_| Error::invalid())?),
            None => None,
        };
        let c = sys::kvp_manager_config {
            pool: pool.as_ptr(),
            policy: cfg.policy as c_int,
            eviction_threshold: cfg.eviction_threshold,
            watermark: cfg.watermark,
            flags: sys::KVP_EXACT_LIMITS
                | if cfg.prefix_cache {
                    sys::KVP_PREFIX_CACHE
                } else {
                    0
                }
                | if cfg.emit_cached_events {
                    sys::KVP_EMIT_CACHED_EVENTS
                } else {
                    0
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
        let c = self.raw_config();
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
            emit_cached_events: c.flags & sys::KVP_EMIT_CACHED_EVENTS != 0,
        }
    }

    /// `kvp_manager_get_config`, as C gives it (its name points into
    /// the manager): no allocation.
    fn raw_config(&self) -> sys::kvp_manager_config {
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
        // arguments.
        let rc = unsafe { sys::kvp_manager_get_config(self.as_ptr(), &mut c) };
        debug_assert_eq!(rc, 0);
        c
    }

    /// The current eviction policy.
    pub fn policy(&self) -> Policy {
        Policy::from_raw(self.raw_config().policy).unwrap_or(Policy::Lru)
    }

    /// The utilisation at which eviction is due (what
    /// `evict_until_into(None, ..)` evicts down to).
    pub fn eviction_threshold(&self) -> f32 {
        self.raw_config().eviction_threshold
    }

    /// The fraction of the pool admission keeps free.
    pub fn watermark(&self) -> f32 {
        self.raw_config().watermark
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
            if rc == -ENOBUFS {
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

    /// Creates the sequences dsts, each sharing all of src's blocks as
    /// [`Manager::fork`] would, in one call: n > 1 sampling or beam search
    /// (one lookup and one lock of src, its references taken together).
    /// src's access moves once.  All or nothing: on an error none of dsts
    /// exists.  Errors, the first that applies: InvalidArgument (dsts
    /// empty or longer than the library's limit), then for each dst in
    /// order Exists (in use, src included, or a repeat) or NoMemory, then
    /// NotFound (src), then NoMemory, then Overflow.
    pub fn fork_n(&self, src: u64, dsts: &[u64]) -> Result<()> {
        self.fork_n_flags(src, dsts, 0)
    }

    /// [`Manager::fork_n`] that leaves src's last access and access count
    /// as they were (`KVP_FORK_KEEP_SOURCE`): forking a prompt for
    /// sampling does not count as an access of it for LRU and LFU.
    pub fn fork_n_keep_source(&self, src: u64, dsts: &[u64]) -> Result<()> {
        self.fork_n_flags(src, dsts, sys::KVP_FORK_KEEP_SOURCE)
    }

    fn fork_n_flags(&self, src: u64, dsts: &[u64], flags: u32) -> Result<()> {
        // More ids than a u32 counts: the library's limit is far below.
        let n = u32::try_from(dsts.len()).unwrap_or(u32::MAX);
        // SAFETY: dsts is valid for n reads (or n is past the limit, and
        // the call fails before reading).
        check(unsafe { sys::kvp_seq_fork_n(self.as_ptr(), src, dsts.as_ptr(), n, flags) })
            .map(|_| ())
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
            if rc == -ENOBUFS {
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
    /// guarantees quiescence).  A thread hands its block caches back when
    /// it exits, in a thread-local destructor, and the end of a
    /// `std::thread::scope` does not wait for those: workers call
    /// [`thread_flush`](crate::thread_flush) before they return if a
    /// check follows.
    pub fn check(&self) -> Result<()> {
        // SAFETY: plain call; quiescence is the caller's (documented).
        check(unsafe { sys::kvp_manager_check(self.as_ptr()) }).map(|_| ())
    }
}

/// Capacity for a list that had `n` entries a moment ago and may grow:
/// an eighth more.
fn with_slack(n: u32) -> usize {
    let n = n as usize;
    n + n / 8 + 1
}
