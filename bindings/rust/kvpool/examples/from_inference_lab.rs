// SPDX-License-Identifier: MIT
//! Coming from inference_lab's `KVCacheManager` (seed 004): blocks for
//! requests, sized from a byte budget, with prefix caching.
//!
//! On kvpool a request is a sequence of a manager with prefix caching,
//! and the prefix cache is kvpool's: blocks are cached under the chained
//! hashes of the prompt's tokens (`hash_blocks`), registered by `commit`
//! and reused by `create_cached`, with the data kept valid while the
//! blocks are cached (the seed's map kept a block id after the block was
//! freed and reused).  What changes for a porter:
//! - a request carries its prompt's token ids (the seed hashed its id and
//!   length in their place; `Request::new` makes tokens from the id, so
//!   two requests of one id share a prompt, as the seed assumed);
//! - `check_prefix_cache` asks `Manager::prefix_match`, which takes
//!   nothing, as the seed's lookup did; `allocate_blocks` then creates the
//!   sequence with `create_cached`, so the hits it counted are the blocks
//!   it reuses (unless an eviction came between: the count is advice);
//! - a hit never covers the prompt's last token: a 16-token prompt in
//!   16-token blocks reuses nothing, a 17-token one reuses 16 tokens;
//! - `free_blocks` takes the request (kvpool keeps its block table).
//!
//! Run: `cargo run --example from_inference_lab`; its tests: `cargo test
//! --example from_inference_lab`.
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use kvpool::{
    hash_blocks, BlockHash, ErrorKind, HashAlgo, HashKeys, Manager, ManagerConfig, Pool, PoolConfig,
};

pub type BlockId = u32;

/// Sequence ids: one per request object, whatever its request_id.
static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

/// A request of the simulator, with its prompt's tokens.
#[derive(Debug, Clone)]
pub struct Request {
    pub request_id: String,
    pub arrival_time: f64,
    pub num_prompt_tokens: u32,
    pub max_output_tokens: u32,
    pub num_computed_tokens: u32,
    pub kv_blocks: Vec<BlockId>,
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    seq: u64,
}

impl Request {
    /// A request whose prompt tokens are derived from its id.
    pub fn new(
        request_id: String,
        _priority: u32,
        arrival_time: f64,
        num_prompt_tokens: u32,
        max_output_tokens: u32,
    ) -> Request {
        let mut h = DefaultHasher::new();
        request_id.hash(&mut h);
        let base = h.finish();
        let prompt = (0..num_prompt_tokens as u64)
            .map(|i| (base.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 40) as u32)
            .collect();
        Request::with_prompt(request_id, arrival_time, prompt, max_output_tokens)
    }

    /// A request with a real prompt.
    pub fn with_prompt(
        request_id: String,
        arrival_time: f64,
        prompt: Vec<u32>,
        max_output_tokens: u32,
    ) -> Request {
        Request {
            request_id,
            arrival_time,
            num_prompt_tokens: prompt.len() as u32,
            max_output_tokens,
            num_computed_tokens: 0,
            kv_blocks: Vec::new(),
            prompt,
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// KV-cache blocks of every request.
#[derive(Debug)]
pub struct KVCacheManager {
    block_size: u32,
    total_blocks: u32,
    enable_prefix_caching: bool,
    kv: Manager,
    table: Vec<u32>,
    pub num_prefix_cache_hits: u64,
    pub num_prefix_cache_misses: u64,
}

impl KVCacheManager {
    /// As many blocks of `block_size` tokens as `kv_cache_capacity`
    /// bytes hold at `kv_cache_bytes_per_token` (0 blocks allowed).
    pub fn new(
        kv_cache_capacity: u64,
        block_size: u32,
        kv_cache_bytes_per_token: u64,
        enable_prefix_caching: bool,
    ) -> Self {
        let bytes_per_block = block_size as u64 * kv_cache_bytes_per_token;
        let total_blocks = (kv_cache_capacity / bytes_per_block) as u32;
        let pool = Pool::new(&PoolConfig::new(total_blocks, block_size))
            .expect("KVCacheManager::new: kvpool refused the pool");
        let cfg = ManagerConfig::default().prefix_cache(enable_prefix_caching);
        Self {
            block_size,
            total_blocks,
            enable_prefix_caching,
            kv: Manager::new(&pool, &cfg).expect("a manager"),
            table: Vec::new(),
            num_prefix_cache_hits: 0,
            num_prefix_cache_misses: 0,
        }
    }

    /// Grows `request`'s sequence to `num_computed_tokens + num_tokens`
    /// tokens; returns the blocks that added (all or none), or None if
    /// too few are free.  A new sequence reuses the cached blocks of its
    /// prompt (the hits `check_prefix_cache` counted).
    pub fn allocate_blocks(&mut self, request: &Request, num_tokens: u32) -> Option<Vec<BlockId>> {
        let total = request.num_computed_tokens + num_tokens;
        let old = match self.kv.info(request.seq) {
            Ok(i) => {
                if total > i.num_tokens {
                    self.kv.append(request.seq, total - i.num_tokens).ok()?;
                }
                i.num_blocks as usize
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if self.enable_prefix_caching {
                    let hashes = self.hash_prompt(&request.prompt);
                    self.kv.create_cached(request.seq, &hashes, total).ok()?;
                } else {
                    self.kv.create(request.seq, total).ok()?;
                }
                0
            }
            Err(e) => panic!("allocate_blocks: {}", e),
        };
        self.kv.blocks_into(request.seq, &mut self.table).ok()?;
        Some(self.table[old..].to_vec())
    }

    /// Frees `request`'s blocks (preemption or completion); those the
    /// prefix cache holds stay cached for later requests.
    pub fn free_blocks(&mut self, request: &Request) {
        let _ = self.kv.free(request.seq);
    }

    /// Free blocks, idle cached ones included (an allocation reclaims
    /// them).
    pub fn num_free_blocks(&self) -> usize {
        self.kv.pool().stats().free as usize
    }

    /// Used blocks / total (0 for no blocks).
    pub fn utilization(&self) -> f64 {
        self.kv.pool().stats().utilisation()
    }

    /// The prompt's tokens the prefix cache holds now (what
    /// `allocate_blocks` will reuse), taking nothing.  On a miss, a
    /// request that has blocks registers its prompt's full blocks for
    /// later requests, as the seed did.
    pub fn check_prefix_cache(&mut self, request: &Request) -> u32 {
        if !self.enable_prefix_caching {
            return 0;
        }
        let hashes = self.hash_prompt(&request.prompt);
        let matched = self.kv.prefix_match(&hashes).expect("prefix_match");
        // The last token is always computed (its logits are needed).
        let cached = matched.min(request.num_prompt_tokens.saturating_sub(1) / self.block_size)
            * self.block_size;
        if cached > 0 {
            self.num_prefix_cache_hits += 1;
        } else {
            self.num_prefix_cache_misses += 1;
            // Cache the prompt for future requests (a request with no
            // sequence yet has nothing to register).
            match self.kv.commit(request.seq, &hashes) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => panic!("check_prefix_cache: commit: {}", e),
            }
        }
        cached
    }

    /// The chained hashes of the prompt's full blocks.
    fn hash_prompt(&self, prompt: &[u32]) -> Vec<BlockHash> {
        hash_blocks(
            HashAlgo::Xxh3_128,
            None,
            &HashKeys::default(),
            prompt,
            self.block_size,
        )
        .expect("hash_blocks")
    }
}

fn main() {
    let mut m = KVCacheManager::new(16 * 100 * 64, 16, 100, true);
    let system: Vec<u32> = (0..48).collect();
    let first = Request::with_prompt("a".into(), 0.0, system.clone(), 32);
    let second = Request::with_prompt("b".into(), 0.1, system, 32);
    m.allocate_blocks(&first, 48).expect("room");
    println!("first: {} tokens cached", m.check_prefix_cache(&first));
    println!("second: {} tokens cached", m.check_prefix_cache(&second));
    m.allocate_blocks(&second, 48).expect("room");
    println!(
        "hits {}, misses {}, {} of {} blocks free, utilization {:.3}",
        m.num_prefix_cache_hits,
        m.num_prefix_cache_misses,
        m.num_free_blocks(),
        m.total_blocks,
        m.utilization()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create_test_request(id: &str, prompt_tokens: u32) -> Request {
        Request::new(id.to_string(), 0, 0.0, prompt_tokens, 50)
    }

    #[test]
    fn kv_cache_manager_creation() {
        // 16000 / (16 * 100) = 10 blocks.
        let manager = KVCacheManager::new(16000, 16, 100, false);
        assert_eq!(manager.block_size, 16);
        assert_eq!(manager.total_blocks, 10);
        assert_eq!(manager.kv.pool().num_blocks(), 10);
        assert_eq!(manager.num_free_blocks(), 10);
        assert_eq!(manager.utilization(), 0.0);
        assert_eq!(KVCacheManager::new(1599, 16, 100, false).total_blocks, 0);
    }

    #[test]
    fn block_allocation() {
        let mut manager = KVCacheManager::new(16000, 16, 100, false);
        let mut request = create_test_request("req-1", 32);
        let blocks = manager.allocate_blocks(&request, 32).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(manager.num_free_blocks(), 8);

        request.kv_blocks.extend(blocks);
        request.num_computed_tokens = 32;

        let more = manager.allocate_blocks(&request, 16).unwrap();
        assert_eq!(more.len(), 1);
        assert!(!request.kv_blocks.contains(&more[0]));
        assert_eq!(manager.num_free_blocks(), 7);
        request.kv_blocks.extend(more);
        request.num_computed_tokens = 48;
        assert_eq!(
            manager.allocate_blocks(&request, 0).unwrap(),
            Vec::<BlockId>::new()
        );
        assert_eq!(manager.kv.blocks(request.seq).unwrap(), request.kv_blocks);
    }

    #[test]
    fn block_allocation_failure() {
        let mut manager = KVCacheManager::new(1600, 16, 100, false);
        assert_eq!(manager.total_blocks, 1);
        let request = create_test_request("req-1", 32);
        assert!(manager.allocate_blocks(&request, 32).is_none());
        assert_eq!(manager.num_free_blocks(), 1, "a failure takes nothing");
    }

    #[test]
    fn block_free() {
        let mut manager = KVCacheManager::new(16000, 16, 100, false);
        let request = create_test_request("req-1", 32);
        manager.allocate_blocks(&request, 32).unwrap();
        assert_eq!(manager.num_free_blocks(), 8);
        manager.free_blocks(&request);
        assert_eq!(manager.num_free_blocks(), 10);
        assert_eq!(manager.utilization(), 0.0);
    }

    #[test]
    fn utilization() {
        let mut manager = KVCacheManager::new(16000, 16, 100, false);
        let request = create_test_request("req-1", 32);
        manager.allocate_blocks(&request, 32).unwrap();
        assert!((manager.utilization() - 0.2).abs() < 1e-10);
        manager.free_blocks(&request);
        assert_eq!(manager.utilization(), 0.0);
    }

    /// The seed's test, with a 33-token prompt: a hit never covers the
    /// last token, so a 16-token prompt would reuse nothing.
    #[test]
    fn prefix_caching() {
        let mut manager = KVCacheManager::new(16000, 16, 100, true);
        let mut request1 = create_test_request("req-1", 33);
        let blocks1 = manager.allocate_blocks(&request1, 33).unwrap();
        request1.kv_blocks.extend(&blocks1);

        // First check: a miss, which caches the prompt's full blocks.
        assert_eq!(manager.check_prefix_cache(&request1), 0);
        assert_eq!(manager.num_prefix_cache_misses, 1);

        // Same prompt: a hit on both full blocks, which takes nothing...
        let request2 = create_test_request("req-1", 33);
        let free = manager.num_free_blocks();
        assert_eq!(manager.check_prefix_cache(&request2), 32);
        assert_eq!(manager.check_prefix_cache(&request2), 32);
        assert_eq!(manager.num_prefix_cache_hits, 2);
        assert_eq!(manager.num_free_blocks(), free);
        // ...until the allocation reuses request1's blocks.
        let blocks2 = manager.allocate_blocks(&request2, 33).unwrap();
        assert_eq!(blocks2[..2], blocks1[..2]);
        assert_ne!(blocks2[2], blocks1[2]);
        assert_eq!(manager.num_free_blocks(), free - 1);

        // Another prompt misses.
        let other = create_test_request("req-2", 33);
        assert_eq!(manager.check_prefix_cache(&other), 0);
        assert_eq!(manager.num_prefix_cache_misses, 2);
    }

    #[test]
    fn last_token_is_always_computed() {
        let mut manager = KVCacheManager::new(16000, 16, 100, true);
        let a = create_test_request("req-1", 16);
        manager.allocate_blocks(&a, 16).unwrap();
        manager.check_prefix_cache(&a);
        let b = create_test_request("req-1", 16);
        assert_eq!(manager.check_prefix_cache(&b), 0);
        let c = create_test_request("req-1", 17);
        assert_eq!(manager.check_prefix_cache(&c), 16);
    }

    /// Freed blocks stay cached until the pool needs them.
    #[test]
    fn cached_blocks_outlive_their_request() {
        let mut manager = KVCacheManager::new(16 * 100 * 4, 16, 100, true);
        let a = create_test_request("sys", 40);
        manager.allocate_blocks(&a, 40).unwrap();
        assert_eq!(manager.check_prefix_cache(&a), 0);
        manager.free_blocks(&a);
        assert_eq!(manager.num_free_blocks(), 4, "cached blocks count as free");
        let b = create_test_request("sys", 40);
        assert_eq!(manager.check_prefix_cache(&b), 32);
        manager.allocate_blocks(&b, 40).unwrap();
        manager.free_blocks(&b);
        // Four blocks for another request: the cached ones are reclaimed.
        let big = create_test_request("big", 64);
        assert_eq!(manager.allocate_blocks(&big, 64).unwrap().len(), 4);
        manager.free_blocks(&big);
        let c = create_test_request("sys", 40);
        assert_eq!(manager.check_prefix_cache(&c), 0, "evicted: a miss");
    }

    #[test]
    fn disabled_prefix_caching() {
        let mut manager = KVCacheManager::new(16000, 16, 100, false);
        let r = create_test_request("req-1", 33);
        manager.allocate_blocks(&r, 33).unwrap();
        assert_eq!(manager.check_prefix_cache(&r), 0);
        assert_eq!(
            (
                manager.num_prefix_cache_hits,
                manager.num_prefix_cache_misses
            ),
            (0, 0)
        );
        assert!(r.kv_blocks.is_empty());
        assert_eq!(manager.kv.stats().prefix_queries, 0);
    }
}
