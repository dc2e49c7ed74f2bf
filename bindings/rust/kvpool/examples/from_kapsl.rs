// SPDX-License-Identifier: MIT
//! Coming from kapsl-llm's `BlockAllocator` and `BlockManager` (seed
//! 002): a block free list shared by several engines through
//! `Arc<Mutex<BlockAllocator>>`, and per-engine block tables.
//!
//! On kvpool the allocator is a pool, which is lock-free and
//! thread-safe as it is: `SharedBlockAllocator` is an `Arc` with no
//! `Mutex`, every allocator method takes `&self`, and the owned and
//! shared modes are the same type.  A `BlockManager` is a kvpool manager
//! over that pool (one per engine, as kvpool has one per model); its
//! block tables are the manager's sequences, and a sequence's new block
//! is the one `append` reports.
//!
//! Run: `cargo run --example from_kapsl`; its tests: `cargo test
//! --example from_kapsl`.
use std::sync::Arc;

use kvpool::{ErrorKind, Manager, ManagerConfig, Pool, PoolConfig};

/// A physical block of KV-cache memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysicalTokenBlock {
    pub block_number: usize,
    pub block_size: usize,
    pub device_id: usize,
}

/// Allocates the physical blocks of one device.  Every method may run
/// from any thread at once: share it in an `Arc`, with no lock.
#[derive(Debug)]
pub struct BlockAllocator {
    pool: Pool,
}

impl BlockAllocator {
    /// `total_blocks` blocks (0 allowed: a device with no KV memory) of
    /// `block_size` tokens.
    pub fn new(total_blocks: usize, block_size: usize, device_id: usize) -> Self {
        let cfg =
            PoolConfig::new(total_blocks as u32, block_size as u32).device_id(device_id as i32);
        Self {
            pool: Pool::new(&cfg).expect("BlockAllocator::new: kvpool refused the pool"),
        }
    }

    pub fn allocate(&self) -> Option<PhysicalTokenBlock> {
        let mut id = [0u32];
        self.pool.alloc_into(&mut id).ok()?;
        Some(self.block(id[0]))
    }

    /// Frees a block of this device; a block of another device is
    /// ignored, as in the seed.
    pub fn free(&self, block: PhysicalTokenBlock) {
        if block.device_id == self.device_id() {
            self.pool
                .free(&[block.block_number as u32])
                .expect("BlockAllocator::free: a block not held");
        }
    }

    pub fn get_num_free_blocks(&self) -> usize {
        self.pool.stats().free as usize
    }

    pub fn get_num_total_blocks(&self) -> usize {
        self.pool.num_blocks() as usize
    }

    fn device_id(&self) -> usize {
        self.pool.device_id() as usize
    }

    fn block(&self, id: u32) -> PhysicalTokenBlock {
        PhysicalTokenBlock {
            block_number: id as usize,
            block_size: self.pool.block_tokens() as usize,
            device_id: self.device_id(),
        }
    }
}

/// An allocator shared by several engines: blocks freed by one are at
/// once available to the others.  No `Mutex`.
pub type SharedBlockAllocator = Arc<BlockAllocator>;

pub fn new_shared_allocator(
    total_blocks: usize,
    block_size: usize,
    device_id: usize,
) -> SharedBlockAllocator {
    Arc::new(BlockAllocator::new(total_blocks, block_size, device_id))
}

/// The free-block count (no lock is held, before or after).
pub fn shared_allocator_free_blocks(allocator: &SharedBlockAllocator) -> usize {
    allocator.get_num_free_blocks()
}

pub fn shared_allocator_total_blocks(allocator: &SharedBlockAllocator) -> usize {
    allocator.get_num_total_blocks()
}

/// A sequence's logical blocks in order.
#[derive(Debug, Clone)]
pub struct BlockTable {
    logical_to_physical: Vec<PhysicalTokenBlock>,
    #[allow(dead_code)]
    block_size: usize,
}

impl BlockTable {
    pub fn new(block_size: usize) -> Self {
        Self {
            logical_to_physical: Vec::new(),
            block_size,
        }
    }

    pub fn append(&mut self, block: PhysicalTokenBlock) {
        self.logical_to_physical.push(block);
    }

    pub fn get_physical_blocks(&self) -> &[PhysicalTokenBlock] {
        &self.logical_to_physical
    }

    pub fn len(&self) -> usize {
        self.logical_to_physical.len()
    }

    pub fn is_empty(&self) -> bool {
        self.logical_to_physical.is_empty()
    }
}

/// One engine's sequences and their blocks, over a private or a shared
/// allocator.
#[derive(Debug)]
pub struct BlockManager {
    allocator: SharedBlockAllocator,
    kv: Manager,
    block_size: usize,
}

impl BlockManager {
    /// A manager with a private allocator.
    pub fn new(total_blocks: usize, block_size: usize, device_id: usize) -> Self {
        Self::new_shared(
            new_shared_allocator(total_blocks, block_size, device_id),
            block_size,
        )
    }

    /// A manager drawing from a shared allocator (the allocator's block
    /// size is the one used; `block_size` must match it).
    pub fn new_shared(allocator: SharedBlockAllocator, block_size: usize) -> Self {
        assert_eq!(allocator.pool.block_tokens() as usize, block_size);
        let kv = Manager::new(&allocator.pool, &ManagerConfig::default()).expect("a manager");
        Self {
            allocator,
            kv,
            block_size,
        }
    }

    /// Appends one block to `sequence_id`'s table (creating the
    /// sequence), or None when no block is free.
    pub fn allocate(&mut self, sequence_id: u64) -> Option<PhysicalTokenBlock> {
        let created = match self.kv.create(sequence_id, 0) {
            Ok(()) => true,
            Err(e) if e.kind() == ErrorKind::Exists => false,
            Err(e) => panic!("BlockManager::allocate: {}", e),
        };
        // Whole blocks only: appending block_size tokens takes one block.
        match self.kv.append(sequence_id, self.block_size as u32) {
            Ok(a) => Some(self.allocator.block(a.last_block?)),
            Err(_) => {
                if created {
                    let _ = self.kv.free(sequence_id);
                }
                None
            }
        }
    }

    pub fn free(&mut self, sequence_id: u64) {
        let _ = self.kv.free(sequence_id);
    }

    /// Frees `sequence_id`'s blocks; returns how many it held (0 for an
    /// unknown sequence).
    pub fn free_returning_count(&mut self, sequence_id: u64) -> usize {
        let n = self.blocks_for_sequence(sequence_id);
        match self.kv.free(sequence_id) {
            Ok(()) => n,
            Err(_) => 0,
        }
    }

    /// A copy of `sequence_id`'s table (kvpool keeps the table itself).
    pub fn get_block_table(&self, sequence_id: u64) -> Option<BlockTable> {
        let mut ids = Vec::new();
        self.kv.blocks_into(sequence_id, &mut ids).ok()?;
        let mut t = BlockTable::new(self.block_size);
        for id in ids {
            t.append(self.allocator.block(id));
        }
        Some(t)
    }

    pub fn can_allocate(&self, num_blocks: usize) -> bool {
        self.allocator.get_num_free_blocks() >= num_blocks
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn blocks_for_sequence(&self, sequence_id: u64) -> usize {
        self.kv
            .info(sequence_id)
            .map_or(0, |i| i.num_blocks as usize)
    }

    pub fn free_blocks(&self) -> usize {
        self.allocator.get_num_free_blocks()
    }

    pub fn total_blocks(&self) -> usize {
        self.allocator.get_num_total_blocks()
    }
}

fn main() {
    // Two models share one device's blocks, from four threads, unlocked.
    let shared = new_shared_allocator(1024, 16, 0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let shared = Arc::clone(&shared);
            s.spawn(move || {
                let mut engine = BlockManager::new_shared(shared, 16);
                for seq in 0..8 {
                    for _ in 0..4 {
                        engine.allocate(t * 100 + seq).expect("a block");
                    }
                }
                println!(
                    "engine {}: {} blocks for sequence {}",
                    t,
                    engine.blocks_for_sequence(t * 100),
                    t * 100
                );
                drop(engine);
                kvpool::thread_flush(); // before the count below, not at exit
            });
        }
    });
    println!(
        "after the engines: {} of {} blocks free",
        shared_allocator_free_blocks(&shared),
        shared_allocator_total_blocks(&shared)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn allocator_counts_and_exhaustion() {
        let a = BlockAllocator::new(4, 16, 2);
        assert_eq!((a.get_num_free_blocks(), a.get_num_total_blocks()), (4, 4));
        let b: Vec<_> = (0..4).map(|_| a.allocate().unwrap()).collect();
        assert!(a.allocate().is_none());
        assert_eq!(a.get_num_free_blocks(), 0);
        let ids: HashSet<usize> = b.iter().map(|x| x.block_number).collect();
        assert_eq!(ids.len(), 4);
        assert!(b.iter().all(|x| x.block_size == 16 && x.device_id == 2));
        a.free(b[1]);
        assert_eq!(a.allocate(), Some(b[1]), "the block freed last comes back");
    }

    #[test]
    fn free_of_another_device_is_ignored() {
        let a = BlockAllocator::new(2, 16, 0);
        let mut blk = a.allocate().unwrap();
        blk.device_id = 1;
        a.free(blk);
        assert_eq!(a.get_num_free_blocks(), 1);
        blk.device_id = 0;
        a.free(blk);
        assert_eq!(a.get_num_free_blocks(), 2);
    }

    #[test]
    fn empty_device() {
        let a = new_shared_allocator(0, 16, 0);
        assert_eq!(shared_allocator_total_blocks(&a), 0);
        assert!(a.allocate().is_none());
        let mut m = BlockManager::new_shared(a, 16);
        assert!(m.allocate(1).is_none());
        assert!(m.can_allocate(0));
        assert!(!m.can_allocate(1));
    }

    #[test]
    fn manager_tables() {
        let mut m = BlockManager::new(8, 16, 0);
        assert_eq!(m.block_size(), 16);
        let b0 = m.allocate(7).unwrap();
        let b1 = m.allocate(7).unwrap();
        let c0 = m.allocate(9).unwrap();
        assert_ne!(b0, b1);
        let t = m.get_block_table(7).unwrap();
        assert_eq!(t.get_physical_blocks(), &[b0, b1]);
        assert_eq!(m.get_block_table(9).unwrap().get_physical_blocks(), &[c0]);
        assert!(m.get_block_table(8).is_none());
        assert_eq!(m.blocks_for_sequence(7), 2);
        assert_eq!(m.blocks_for_sequence(8), 0);
        assert_eq!(m.free_blocks(), 5);
        assert!(m.can_allocate(5) && !m.can_allocate(6));
        assert_eq!(m.free_returning_count(7), 2);
        assert_eq!(m.free_returning_count(7), 0);
        assert_eq!(m.free_blocks(), 7);
        m.free(9);
        m.free(9);
        assert_eq!(m.free_blocks(), 8);
        assert_eq!(m.total_blocks(), 8);
    }

    #[test]
    fn manager_exhaustion() {
        let mut m = BlockManager::new(3, 16, 0);
        for _ in 0..3 {
            m.allocate(1).unwrap();
        }
        assert!(m.allocate(1).is_none());
        assert!(m.allocate(2).is_none());
        assert_eq!(
            m.blocks_for_sequence(1),
            3,
            "a failed allocate changes nothing"
        );
    }

    #[test]
    fn engines_share_the_pool() {
        let shared = new_shared_allocator(4, 16, 0);
        let mut a = BlockManager::new_shared(Arc::clone(&shared), 16);
        let mut b = BlockManager::new_shared(Arc::clone(&shared), 16);
        for _ in 0..4 {
            a.allocate(1).unwrap();
        }
        assert!(b.allocate(1).is_none(), "a holds every block");
        assert_eq!(shared_allocator_free_blocks(&shared), 0);
        a.free(1);
        for _ in 0..4 {
            b.allocate(1).expect("a's blocks are b's now");
        }
        assert_eq!(b.free_blocks(), 0);
    }

    /// Blocks one thread frees are another thread's at once, though the
    /// freeing thread (still running) parks them in its cache.
    #[test]
    fn freed_blocks_cross_threads() {
        let shared = new_shared_allocator(64, 16, 0);
        let (freed_tx, freed_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let s2 = Arc::clone(&shared);
            s.spawn(move || {
                let mut a = BlockManager::new_shared(s2, 16);
                for _ in 0..64 {
                    a.allocate(1).unwrap();
                }
                a.free(1);
                freed_tx.send(()).unwrap();
                done_rx.recv().unwrap();
            });
            freed_rx.recv().unwrap();
            let mut b = BlockManager::new_shared(Arc::clone(&shared), 16);
            for _ in 0..64 {
                b.allocate(2).expect("a block the other thread freed");
            }
            assert!(b.allocate(2).is_none());
            done_tx.send(()).unwrap();
        });
    }

    /// Four threads, one allocator, no lock: no block is handed out twice
    /// and every block comes back.
    #[test]
    fn four_threads_no_mutex() {
        let shared = new_shared_allocator(4096, 16, 0);
        let engines: Vec<(BlockManager, Vec<PhysicalTokenBlock>)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4u64)
                .map(|t| {
                    let shared = Arc::clone(&shared);
                    s.spawn(move || {
                        let mut engine = BlockManager::new_shared(Arc::clone(&shared), 16);
                        let mut kept = Vec::new();
                        for i in 0..2000u64 {
                            let seq = (t << 32) | i;
                            let n = 1 + (i % 3) as usize;
                            for _ in 0..n {
                                engine.allocate(seq).expect("a block");
                            }
                            match i % 4 {
                                0 => kept.extend(
                                    engine.get_block_table(seq).unwrap().get_physical_blocks(),
                                ),
                                1 => {
                                    let b = shared.allocate().expect("a raw block");
                                    shared.free(b);
                                    engine.free(seq);
                                }
                                _ => assert_eq!(engine.free_returning_count(seq), n),
                            }
                        }
                        // Hand this thread's cached blocks back now: the
                        // thread-exit hook would, but may still run after
                        // the join, while the counts below are read.
                        kvpool::thread_flush();
                        (engine, kept)
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let all: Vec<_> = engines.iter().flat_map(|e| e.1.iter()).collect();
        let unique: HashSet<usize> = all.iter().map(|b| b.block_number).collect();
        assert_eq!(unique.len(), all.len(), "a block was handed out twice");
        let per_thread: usize = (0..2000).step_by(4).map(|i| 1 + i % 3).sum();
        assert_eq!(all.len(), 4 * per_thread);
        assert_eq!(shared.get_num_free_blocks(), 4096 - all.len());
        drop(engines);
        assert_eq!(shared.get_num_free_blocks(), 4096);
    }
}
