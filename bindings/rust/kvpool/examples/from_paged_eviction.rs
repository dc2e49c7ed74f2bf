// SPDX-License-Identifier: MIT
//! Coming from the `PagedKvCache` with fork and eviction strategies (seed
//! 003): sequences of tokens in blocks, copy-on-write forks, victims
//! chosen by LRU, LFU, longest-first, priority or StreamingLLM, and
//! `OutOfMemory { requested, available }` errors.
//!
//! On kvpool the cache is an ID-only pool and one manager.  The seed's
//! strategies are kvpool's policies (StreamingLLM chooses as LRU; its
//! window is applied by `apply_streaming_llm`), changed with
//! `Manager::set_policy` even while sequences live; `select_eviction_target`
//! is `Manager::peek_victim`.  What changes for a porter:
//! - `append` returns the copy-on-write copy the engine must perform
//!   (the seed appended into a partly filled block the fork shared);
//! - `apply_streaming_llm` drops whole blocks only: the token count falls
//!   by a multiple of the block size, and the partly filled last block
//!   stays (the seed set the count to `sink + window` exactly);
//! - a fork counts as an access of its source (LRU keeps the source over
//!   sequences untouched since, but takes it before its fresh forks; LFU
//!   takes the fresh forks first);
//! - `get_sequence` and `stats` return copies, as kvpool keeps them.
//!
//! The seed's `types.rs` (BlockId, SeqId, EvictionStrategy, SequenceInfo,
//! CacheStats, PagedKvError) is not in the seed file; they are rebuilt
//! here from their uses.
//!
//! Run: `cargo run --example from_paged_eviction`; its tests: `cargo test
//! --example from_paged_eviction`.
use std::fmt;

use kvpool::{BlockCopy, ErrorKind, Manager, ManagerConfig, Policy, Pool, PoolConfig};

/// A physical block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "block {}", self.0)
    }
}

pub type SeqId = u64;

/// Which sequence `evict` frees.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictionStrategy {
    /// Least recently accessed.
    #[default]
    LRU,
    /// Fewest accesses.
    LFU,
    /// Most tokens.
    LongestFirst,
    /// Lowest priority; new sequences start at `default_priority`.
    Priority { default_priority: i32 },
    /// Victims as LRU; `apply_streaming_llm` keeps the sink and window.
    StreamingLLM {
        sink_tokens: usize,
        window_tokens: usize,
    },
}

impl EvictionStrategy {
    fn policy(&self) -> Policy {
        match self {
            EvictionStrategy::LRU | EvictionStrategy::StreamingLLM { .. } => Policy::Lru,
            EvictionStrategy::LFU => Policy::Lfu,
            EvictionStrategy::LongestFirst => Policy::Longest,
            EvictionStrategy::Priority { .. } => Policy::Priority,
        }
    }
}

impl fmt::Display for EvictionStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvictionStrategy::LRU => write!(f, "LRU"),
            EvictionStrategy::LFU => write!(f, "LFU"),
            EvictionStrategy::LongestFirst => write!(f, "LongestFirst"),
            EvictionStrategy::Priority { default_priority } => {
                write!(f, "Priority(default={})", default_priority)
            }
            EvictionStrategy::StreamingLLM {
                sink_tokens,
                window_tokens,
            } => write!(
                f,
                "StreamingLLM(sink={}, window={})",
                sink_tokens, window_tokens
            ),
        }
    }
}

/// A sequence as the cache sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceInfo {
    pub seq_id: SeqId,
    pub num_tokens: usize,
    pub block_ids: Vec<BlockId>,
    pub last_access: u64,
    pub access_count: u64,
    pub priority: i32,
}

/// The cache's counters (kvpool's, at the time of the call).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub total_allocations: u64,
    pub total_frees: u64,
    pub total_evictions: u64,
    pub total_forks: u64,
    pub peak_blocks_used: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PagedKvError {
    OutOfMemory { requested: usize, available: usize },
    SequenceNotFound(SeqId),
    BlockNotFound(BlockId),
    InvalidOperation(String),
    Kv(kvpool::Error),
}

impl fmt::Display for PagedKvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PagedKvError::OutOfMemory {
                requested,
                available,
            } => write!(
                f,
                "out of memory: {} blocks requested, {} available",
                requested, available
            ),
            PagedKvError::SequenceNotFound(s) => write!(f, "sequence {} not found", s),
            PagedKvError::BlockNotFound(b) => write!(f, "{} not found", b),
            PagedKvError::InvalidOperation(m) => write!(f, "{}", m),
            PagedKvError::Kv(e) => write!(f, "{}", e),
        }
    }
}

impl std::error::Error for PagedKvError {}

pub type PagedKvResult<T> = Result<T, PagedKvError>;

/// kvpool's error as the seed's: no space with its details, an unknown
/// sequence as `seq`'s.
fn seed_error(e: kvpool::Error, seq: SeqId) -> PagedKvError {
    match e.kind() {
        ErrorKind::NoSpace => PagedKvError::OutOfMemory {
            requested: e.requested().unwrap_or(0) as usize,
            available: e.available().unwrap_or(0) as usize,
        },
        ErrorKind::NotFound => PagedKvError::SequenceNotFound(seq),
        _ => PagedKvError::Kv(e),
    }
}

/// A paged KV cache with forks and eviction strategies.
#[derive(Debug)]
pub struct PagedKvCache {
    block_size: usize,
    num_heads: usize,
    head_dim: usize,
    kv: Manager,
    eviction_strategy: EvictionStrategy,
    eviction_threshold: f64,
}

impl PagedKvCache {
    /// A cache of `num_blocks` blocks (0 allowed) of `block_size` tokens.
    pub fn new(num_blocks: usize, block_size: usize, num_heads: usize, head_dim: usize) -> Self {
        // No per-thread caches: the cache has one owner, and its peak
        // is then counted at every allocation, as the seed counts it.
        let cfg = PoolConfig::new(num_blocks as u32, block_size as u32).nocache(true);
        let pool = Pool::new(&cfg).expect("PagedKvCache::new: kvpool refused the pool");
        Self {
            block_size,
            num_heads,
            head_dim,
            kv: Manager::new(&pool, &ManagerConfig::default().eviction_threshold(0.9))
                .expect("a manager"),
            eviction_strategy: EvictionStrategy::default(),
            eviction_threshold: 0.9,
        }
    }

    /// Changes the strategy; the cache may hold sequences.
    pub fn with_eviction_strategy(mut self, strategy: EvictionStrategy) -> Self {
        self.kv
            .set_policy(strategy.policy())
            .expect("a known policy");
        self.eviction_strategy = strategy;
        self
    }

    /// Sets the utilisation at which eviction is due, clamped to [0, 1]
    /// (0 included: due as soon as a block is used).  kvpool fixes a
    /// manager's threshold when it is created, so this is for a cache
    /// that holds no sequence yet.
    pub fn with_eviction_threshold(mut self, threshold: f64) -> Self {
        assert_eq!(
            self.num_sequences(),
            0,
            "with_eviction_threshold on a cache in use"
        );
        self.eviction_threshold = threshold.clamp(0.0, 1.0);
        let cfg = self
            .kv
            .config()
            .eviction_threshold(self.eviction_threshold as f32);
        self.kv = Manager::new(self.kv.pool(), &cfg).expect("a manager");
        self
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn total_blocks(&self) -> usize {
        self.kv.pool().num_blocks() as usize
    }

    pub fn free_block_count(&self) -> usize {
        self.kv.pool().stats().free as usize
    }

    pub fn used_block_count(&self) -> usize {
        self.kv.pool().stats().used as usize
    }

    /// used / total; 0 for a cache of no blocks.
    pub fn utilization(&self) -> f64 {
        self.kv.pool().stats().utilisation()
    }

    /// K and V of one block in f16.
    pub fn block_memory_bytes(&self) -> usize {
        2 * self.block_size * self.num_heads * self.head_dim * 2
    }

    pub fn total_memory_bytes(&self) -> usize {
        self.total_blocks() * self.block_memory_bytes()
    }

    pub fn used_memory_bytes(&self) -> usize {
        self.used_block_count() * self.block_memory_bytes()
    }

    pub fn needs_eviction(&self) -> bool {
        self.utilization() >= self.eviction_threshold
    }

    pub fn num_sequences(&self) -> usize {
        self.kv.stats().sequences as usize
    }

    /// A copy of `seq_id`'s state.
    pub fn get_sequence(&self, seq_id: SeqId) -> Option<SequenceInfo> {
        let i = self.kv.info(seq_id).ok()?;
        let mut ids = Vec::new();
        self.kv.blocks_into(seq_id, &mut ids).ok()?;
        Some(SequenceInfo {
            seq_id,
            num_tokens: i.num_tokens as usize,
            block_ids: ids.into_iter().map(BlockId).collect(),
            last_access: i.last_access,
            access_count: i.access_count,
            priority: i.priority,
        })
    }

    pub fn stats(&self) -> CacheStats {
        let (ps, ms) = (self.kv.pool().stats(), self.kv.stats());
        CacheStats {
            total_allocations: ps.allocs,
            total_frees: ps.frees,
            total_evictions: ms.evictions,
            total_forks: ms.forks,
            peak_blocks_used: ps.peak_used as usize,
        }
    }

    pub fn eviction_strategy(&self) -> &EvictionStrategy {
        &self.eviction_strategy
    }

    /// Creates `seq_id` with `num_tokens` tokens.  An id in use is an
    /// error before the size is looked at.
    pub fn allocate(&mut self, seq_id: SeqId, num_tokens: usize) -> PagedKvResult<()> {
        match self.kv.create(seq_id, num_tokens as u32) {
            Err(e) if e.kind() == ErrorKind::Exists => Err(PagedKvError::InvalidOperation(
                format!("Sequence {} already exists", seq_id),
            )),
            Err(e) => Err(seed_error(e, seq_id)),
            Ok(()) => {
                if let EvictionStrategy::Priority { default_priority } = self.eviction_strategy {
                    self.set_priority(seq_id, default_priority)?;
                }
                Ok(())
            }
        }
    }

    /// Appends `num_new_tokens` tokens; returns the block copy the engine
    /// must perform when the last block was shared with a fork.
    pub fn append(
        &mut self,
        seq_id: SeqId,
        num_new_tokens: usize,
    ) -> PagedKvResult<Option<BlockCopy>> {
        let a = self
            .kv
            .append(seq_id, num_new_tokens as u32)
            .map_err(|e| seed_error(e, seq_id))?;
        Ok(a.cow)
    }

    pub fn free(&mut self, seq_id: SeqId) -> PagedKvResult<()> {
        self.kv.free(seq_id).map_err(|e| seed_error(e, seq_id))
    }

    /// `dst_seq` shares `src_seq`'s blocks (copy-on-write at the next
    /// append into the shared partly filled block).
    pub fn fork(&mut self, src_seq: SeqId, dst_seq: SeqId) -> PagedKvResult<()> {
        match self.kv.fork(src_seq, dst_seq) {
            Err(e) if e.kind() == ErrorKind::Exists => Err(PagedKvError::InvalidOperation(
                format!("Destination sequence {} already exists", dst_seq),
            )),
            r => r.map_err(|e| seed_error(e, src_seq)),
        }
    }

    /// The sequence `evict` would free now, without freeing it.
    pub fn select_eviction_target(&self) -> Option<SeqId> {
        self.kv.peek_victim().expect("peek_victim")
    }

    pub fn evict(&mut self) -> PagedKvResult<SeqId> {
        self.kv.evict().map_err(|e| match e.kind() {
            ErrorKind::NotFound => PagedKvError::InvalidOperation("No sequences to evict".into()),
            _ => PagedKvError::Kv(e),
        })
    }

    /// Evicts until utilisation is at most `target_util`; returns the
    /// victims in order.
    pub fn evict_to_threshold(&mut self, target_util: f64) -> PagedKvResult<Vec<SeqId>> {
        let cap = self.num_sequences() as u32;
        let (victims, _met) = self
            .kv
            .evict_until(target_util.clamp(0.0, 1.0) as f32, cap)
            .map_err(PagedKvError::Kv)?;
        Ok(victims)
    }

    /// Drops the whole blocks between the first `sink_tokens` tokens and
    /// the last `window_tokens`; returns the tokens dropped.
    pub fn apply_streaming_llm(
        &mut self,
        seq_id: SeqId,
        sink_tokens: usize,
        window_tokens: usize,
    ) -> PagedKvResult<usize> {
        self.kv
            .stream_trim(seq_id, sink_tokens as u32, window_tokens as u32)
            .map(|n| n as usize)
            .map_err(|e| seed_error(e, seq_id))
    }

    /// `apply_streaming_llm` with the strategy's sink and window.
    pub fn apply_streaming_strategy(&mut self, seq_id: SeqId) -> PagedKvResult<usize> {
        match self.eviction_strategy {
            EvictionStrategy::StreamingLLM {
                sink_tokens,
                window_tokens,
            } => self.apply_streaming_llm(seq_id, sink_tokens, window_tokens),
            _ => Err(PagedKvError::InvalidOperation(
                "the strategy is not StreamingLLM".into(),
            )),
        }
    }

    /// Sets the priority the Priority strategy reads (lowest goes first).
    pub fn set_priority(&mut self, seq_id: SeqId, priority: i32) -> PagedKvResult<()> {
        self.kv
            .set_priority(seq_id, priority)
            .map_err(|e| seed_error(e, seq_id))
    }

    pub fn sequence_ids(&self) -> Vec<SeqId> {
        self.kv.sequences().expect("sequences")
    }
}

impl fmt::Display for PagedKvCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.stats();
        writeln!(f, "PagedKvCache")?;
        writeln!(
            f,
            "  Strategy: {} (block_size={})",
            self.eviction_strategy, self.block_size
        )?;
        writeln!(
            f,
            "  Blocks: {}/{} ({:.1}% used)",
            self.used_block_count(),
            self.total_blocks(),
            self.utilization() * 100.0
        )?;
        writeln!(
            f,
            "  Memory: {:.2} MB / {:.2} MB",
            self.used_memory_bytes() as f64 / 1_000_000.0,
            self.total_memory_bytes() as f64 / 1_000_000.0
        )?;
        writeln!(f, "  Sequences: {} active", self.num_sequences())?;
        writeln!(
            f,
            "  Stats: allocs={}, frees={}, evictions={}, forks={}",
            st.total_allocations, st.total_frees, st.total_evictions, st.total_forks
        )
    }
}

fn main() {
    let mut cache = PagedKvCache::new(64, 16, 8, 128).with_eviction_strategy(EvictionStrategy::LFU);
    cache.allocate(1, 100).unwrap();
    cache.allocate(2, 40).unwrap();
    cache.append(1, 10).unwrap();
    cache.fork(1, 3).unwrap();
    if let Some(c) = cache.append(3, 1).unwrap() {
        println!(
            "copy-on-write: block {} -> {} ({} tokens)",
            c.src, c.dst, c.tokens
        );
    }
    println!("next victim: {:?}", cache.select_eviction_target());
    let cache = cache.with_eviction_strategy(EvictionStrategy::LongestFirst);
    println!("longest first: {:?}", cache.select_eviction_target());
    print!("{}", cache);
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: usize = 16;

    fn cache(blocks: usize) -> PagedKvCache {
        PagedKvCache::new(blocks, BS, 4, 64)
    }

    /// Sequences 1, 2, 3 of 1, 3 and 2 full blocks, created in that order.
    fn three(c: &mut PagedKvCache) {
        c.allocate(1, BS).unwrap();
        c.allocate(2, 3 * BS).unwrap();
        c.allocate(3, 2 * BS).unwrap();
    }

    #[test]
    fn lru_picks_least_recently_accessed() {
        let mut c = cache(16);
        three(&mut c);
        assert_eq!(c.select_eviction_target(), Some(1));
        c.append(1, 1).unwrap();
        assert_eq!(c.select_eviction_target(), Some(2));
        assert_eq!(c.num_sequences(), 3, "peeking evicts nothing");
        assert_eq!(c.evict(), Ok(2));
        assert_eq!(c.select_eviction_target(), Some(3));
        assert_eq!(c.stats().total_evictions, 1);
    }

    #[test]
    fn lfu_picks_fewest_accesses() {
        let mut c = cache(16).with_eviction_strategy(EvictionStrategy::LFU);
        three(&mut c);
        c.append(1, 0).unwrap();
        c.append(1, 0).unwrap();
        c.append(2, 0).unwrap();
        // Accesses: 1 -> 3, 2 -> 2, 3 -> 1 (the most recent, but fewest).
        assert_eq!(c.select_eviction_target(), Some(3));
        assert_eq!(c.evict(), Ok(3));
        assert_eq!(c.evict(), Ok(2));
    }

    #[test]
    fn longest_first() {
        let mut c = cache(16).with_eviction_strategy(EvictionStrategy::LongestFirst);
        three(&mut c);
        assert_eq!(c.select_eviction_target(), Some(2));
        c.append(3, 2 * BS).unwrap();
        assert_eq!(c.select_eviction_target(), Some(3));
    }

    #[test]
    fn priority_lowest_first() {
        let mut c = cache(16).with_eviction_strategy(EvictionStrategy::Priority {
            default_priority: 5,
        });
        three(&mut c);
        assert_eq!(c.get_sequence(2).unwrap().priority, 5);
        c.set_priority(3, 1).unwrap();
        assert_eq!(c.select_eviction_target(), Some(3));
        c.set_priority(1, -4).unwrap();
        assert_eq!(c.evict(), Ok(1));
    }

    #[test]
    fn streaming_llm_chooses_as_lru_and_trims() {
        let mut c = cache(16).with_eviction_strategy(EvictionStrategy::StreamingLLM {
            sink_tokens: 4,
            window_tokens: 32,
        });
        assert_eq!(
            c.eviction_strategy().to_string(),
            "StreamingLLM(sink=4, window=32)"
        );
        three(&mut c);
        c.append(1, 0).unwrap();
        assert_eq!(c.select_eviction_target(), Some(2));
        // 100 tokens in 7 blocks: block 0 holds the sinks, blocks 4..6 the
        // last 32 tokens; blocks 1..3 (48 tokens) go.
        c.allocate(9, 100).unwrap();
        let before = c.get_sequence(9).unwrap().block_ids;
        assert_eq!(c.apply_streaming_strategy(9), Ok(48));
        let after = c.get_sequence(9).unwrap();
        assert_eq!(after.num_tokens, 52);
        assert_eq!(
            after.block_ids,
            vec![before[0], before[4], before[5], before[6]]
        );
        assert_eq!(
            c.apply_streaming_llm(9, 4, 32),
            Ok(0),
            "nothing left between"
        );
        c.allocate(10, 20).unwrap();
        assert_eq!(c.apply_streaming_llm(10, 0, 0), Ok(16));
        assert_eq!(
            c.get_sequence(10).unwrap().num_tokens,
            4,
            "the partly filled block stays"
        );
        assert_eq!(
            c.apply_streaming_llm(77, 4, 32),
            Err(PagedKvError::SequenceNotFound(77))
        );
    }

    /// The strategy changes on a cache that holds sequences, and the next
    /// choice follows it.
    #[test]
    fn strategy_changes_while_sequences_live() {
        let mut c = cache(16);
        three(&mut c);
        c.append(1, 0).unwrap();
        c.append(1, 0).unwrap();
        c.append(3, 0).unwrap();
        // LRU: 2 (untouched since creation).
        assert_eq!(c.select_eviction_target(), Some(2));
        let mut c = c.with_eviction_strategy(EvictionStrategy::LongestFirst);
        assert_eq!(c.select_eviction_target(), Some(2));
        c.set_priority(1, -1).unwrap();
        let c = c.with_eviction_strategy(EvictionStrategy::Priority {
            default_priority: 0,
        });
        assert_eq!(c.select_eviction_target(), Some(1));
        let mut c = c.with_eviction_strategy(EvictionStrategy::LFU);
        c.append(2, 0).unwrap();
        c.append(2, 0).unwrap();
        // Accesses: 1 -> 3, 2 -> 3, 3 -> 2.
        assert_eq!(c.select_eviction_target(), Some(3));
        assert_eq!(*c.eviction_strategy(), EvictionStrategy::LFU);
        assert_eq!(c.kv.policy(), Policy::Lfu);
        assert_eq!(c.num_sequences(), 3);
    }

    #[test]
    fn fork_counts_as_an_access_of_the_source() {
        let mut c = cache(16);
        three(&mut c);
        assert_eq!(c.select_eviction_target(), Some(1));
        c.fork(1, 4).unwrap();
        assert_eq!(c.select_eviction_target(), Some(2), "1 was just read");
        assert_eq!(c.get_sequence(1).unwrap().access_count, 2);
    }

    #[test]
    fn fork_shares_blocks_and_copies_on_write() {
        let mut c = cache(16);
        c.allocate(1, 40).unwrap();
        let used = c.used_block_count();
        c.fork(1, 2).unwrap();
        assert_eq!(c.used_block_count(), used, "a fork allocates nothing");
        let src = c.get_sequence(1).unwrap();
        assert_eq!(c.get_sequence(2).unwrap().block_ids, src.block_ids);
        assert_eq!(c.get_sequence(2).unwrap().num_tokens, 40);
        let copy = c
            .append(2, 1)
            .unwrap()
            .expect("the shared partial block is copied");
        assert_eq!(copy.src, src.block_ids[2].0);
        assert_eq!(copy.tokens, 8);
        let forked = c.get_sequence(2).unwrap();
        assert_eq!(forked.block_ids[..2], src.block_ids[..2]);
        assert_eq!(forked.block_ids[2], BlockId(copy.dst));
        assert_eq!(c.append(1, 1).unwrap(), None, "1 holds its block alone now");
        assert_eq!(c.used_block_count(), used + 1);
        c.free(1).unwrap();
        assert_eq!(c.used_block_count(), 3, "2 keeps the shared blocks");
        assert_eq!(c.stats().total_forks, 1);
        assert_eq!(
            c.fork(2, 2),
            Err(PagedKvError::InvalidOperation(
                "Destination sequence 2 already exists".into()
            ))
        );
        assert_eq!(c.fork(1, 5), Err(PagedKvError::SequenceNotFound(1)));
    }

    #[test]
    fn out_of_memory_reports_requested_and_available() {
        let mut c = cache(10);
        c.allocate(1, 8 * BS).unwrap();
        assert_eq!(
            c.allocate(2, 3 * BS),
            Err(PagedKvError::OutOfMemory {
                requested: 3,
                available: 2
            })
        );
        assert_eq!(
            c.append(1, 2 * BS + 1),
            Err(PagedKvError::OutOfMemory {
                requested: 3,
                available: 2
            })
        );
        assert_eq!(
            c.get_sequence(1).unwrap().num_tokens,
            8 * BS,
            "nothing changed"
        );
        assert_eq!(
            c.allocate(3, 11 * BS),
            Err(PagedKvError::OutOfMemory {
                requested: 11,
                available: 2
            }),
            "more than the cache holds is out of memory too"
        );
    }

    #[test]
    fn duplicate_id_is_checked_before_size() {
        let mut c = cache(4);
        c.allocate(1, BS).unwrap();
        assert_eq!(
            c.allocate(1, 100 * BS),
            Err(PagedKvError::InvalidOperation(
                "Sequence 1 already exists".into()
            ))
        );
    }

    #[test]
    fn zero_block_cache() {
        let mut c = cache(0);
        assert_eq!(c.total_blocks(), 0);
        assert_eq!(c.utilization(), 0.0);
        assert!(!c.needs_eviction());
        assert_eq!(c.total_memory_bytes(), 0);
        c.allocate(1, 0).unwrap();
        assert_eq!(
            c.allocate(2, 1),
            Err(PagedKvError::OutOfMemory {
                requested: 1,
                available: 0
            })
        );
        assert_eq!(c.select_eviction_target(), Some(1));
        assert_eq!(c.evict(), Ok(1));
        assert_eq!(
            c.evict(),
            Err(PagedKvError::InvalidOperation(
                "No sequences to evict".into()
            ))
        );
        assert_eq!(c.select_eviction_target(), None);
    }

    #[test]
    fn threshold_zero_means_zero() {
        let mut c = cache(10).with_eviction_threshold(0.0);
        assert_eq!(c.kv.eviction_threshold(), 0.0);
        assert!(c.needs_eviction(), "0 >= 0: due even when empty");
        three(&mut c);
        // Down to the manager's own threshold (None): all of them.
        let mut victims = Vec::new();
        assert!(c.kv.evict_until_into(None, 8, &mut victims).unwrap());
        assert_eq!(victims.len(), 3);
        assert_eq!(c.used_block_count(), 0);
        let c = cache(10)
            .with_eviction_strategy(EvictionStrategy::LongestFirst)
            .with_eviction_threshold(1.7);
        assert_eq!(c.kv.eviction_threshold(), 1.0, "clamped as the seed");
        assert_eq!(c.kv.policy(), Policy::Longest, "the strategy stays");
    }

    #[test]
    fn needs_eviction_and_evict_to_threshold() {
        let mut c = cache(10).with_eviction_threshold(0.5);
        c.allocate(1, 2 * BS).unwrap();
        c.allocate(2, 2 * BS).unwrap();
        assert!(!c.needs_eviction());
        c.allocate(3, BS).unwrap();
        assert!(c.needs_eviction(), "5 of 10 blocks: 0.5 >= 0.5");
        c.append(2, 0).unwrap();
        assert_eq!(c.evict_to_threshold(0.25).unwrap(), vec![1, 3]);
        assert!((c.utilization() - 0.2).abs() < 1e-9);
        assert_eq!(c.evict_to_threshold(0.3).unwrap(), Vec::<SeqId>::new());
        assert_eq!(c.evict_to_threshold(0.0).unwrap(), vec![2]);
        assert_eq!(c.stats().total_evictions, 3);
    }

    #[test]
    fn counts_and_memory() {
        let mut c = cache(8);
        assert_eq!(c.block_memory_bytes(), 2 * BS * 4 * 64 * 2);
        c.allocate(1, 3 * BS).unwrap();
        c.allocate(2, 1).unwrap();
        assert_eq!((c.used_block_count(), c.free_block_count()), (4, 4));
        assert_eq!(c.used_memory_bytes(), 4 * c.block_memory_bytes());
        let mut ids = c.sequence_ids();
        ids.sort_unstable();
        assert_eq!(ids, vec![1, 2]);
        c.free(2).unwrap();
        assert_eq!(c.free(2), Err(PagedKvError::SequenceNotFound(2)));
        assert_eq!(c.append(2, 1), Err(PagedKvError::SequenceNotFound(2)));
        let st = c.stats();
        assert_eq!((st.total_allocations, st.total_frees), (4, 1));
        assert_eq!(st.peak_blocks_used, 4);
        let text = c.to_string();
        assert!(text.contains("Blocks: 3/8 (37.5% used)"), "{}", text);
        assert!(text.contains("Sequences: 1 active"), "{}", text);
    }
}
