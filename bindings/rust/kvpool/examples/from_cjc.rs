// SPDX-License-Identifier: MIT
//! Coming from cjc-runtime's `PagedKvCache` (seed 001): one sequence of
//! `f64` token rows of width `dim`, in 16-token blocks allocated up front.
//!
//! On kvpool the blocks are a K-only data-owning pool (one vector per
//! token: `KVP_POOL_K_ONLY`, no V half) of one layer and one head of
//! `dim` `f64` values, holding exactly the `ceil(max_tokens / 16)` blocks
//! the seed preallocated; the cache is one sequence of a manager over it.
//! The sequence's block table is reserved for `max_tokens` tokens at
//! construction, so `append` allocates no host memory: the seed's NoGC
//! guarantee, which a test below checks with a counting allocator.
//!
//! The seed's `Tensor` is its crate's; a two-dimensional stand-in with
//! the methods the cache uses is defined here.
//!
//! Run: `cargo run --example from_cjc`; its tests: `cargo test --example
//! from_cjc`.
use std::fmt;

use kvpool::{DType, Layout, Manager, ManagerConfig, Pool, PoolConfig};

/// Tokens stored per block.
const BLOCK_TOKEN_COUNT: usize = 16;
/// The cache's one sequence.
const SEQ: u64 = 0;

/// The seed's error type (the variants its cache returns), plus kvpool's.
#[derive(Debug, PartialEq)]
pub enum RuntimeError {
    ShapeMismatch { expected: usize, got: usize },
    InvalidOperation(String),
    IndexOutOfBounds { index: usize, length: usize },
    Kv(kvpool::Error),
}

impl From<kvpool::Error> for RuntimeError {
    fn from(e: kvpool::Error) -> Self {
        RuntimeError::Kv(e)
    }
}

/// A row-major `f64` matrix: the seed crate's `Tensor`, cut down.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Vec<f64>,
}

impl Tensor {
    pub fn from_vec(data: Vec<f64>, shape: &[usize]) -> Result<Tensor, RuntimeError> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(RuntimeError::ShapeMismatch {
                expected: n,
                got: data.len(),
            });
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            data,
        })
    }
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn to_vec(&self) -> Vec<f64> {
        self.data.clone()
    }
}

/// A block-paged KV cache of one sequence of `dim`-wide `f64` tokens.
#[derive(Debug)]
pub struct PagedKvCache {
    kv: Manager,
    dim: usize,
    max_tokens: usize,
    /// Tokens stored: the sequence's count, kept here so `len` is free.
    current_len: usize,
}

impl PagedKvCache {
    /// A cache for `max_tokens` tokens of dimension `dim`, its blocks and
    /// its block table allocated now.
    pub fn new(max_tokens: usize, dim: usize) -> Self {
        let num_blocks = (max_tokens + BLOCK_TOKEN_COUNT - 1) / BLOCK_TOKEN_COUNT;
        let row = Layout {
            num_layers: 1,
            num_kv_heads: 1,
            head_dim: dim as u32,
            dtype: DType::F64,
        };
        let cfg = PoolConfig::new(num_blocks as u32, BLOCK_TOKEN_COUNT as u32)
            .layout(row)
            .k_only(true)
            .nocache(true);
        let pool = Pool::new(&cfg).expect("PagedKvCache::new: kvpool refused the pool");
        let kv = Manager::new(&pool, &ManagerConfig::default()).expect("a manager");
        kv.create(SEQ, 0).expect("the cache's sequence");
        kv.reserve(SEQ, max_tokens as u32).expect("its block table");
        PagedKvCache {
            kv,
            dim,
            max_tokens,
            current_len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.current_len
    }

    pub fn is_empty(&self) -> bool {
        self.current_len == 0
    }

    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Blocks of the cache (all of them: the pool is the cache's own).
    pub fn num_blocks(&self) -> usize {
        self.kv.pool().num_blocks() as usize
    }

    /// Blocks holding at least one token.
    pub fn blocks_in_use(&self) -> usize {
        self.kv.pool().stats().used as usize
    }

    /// Appends one token row; allocates no host memory.
    pub fn append(&mut self, token: &[f64]) -> Result<(), RuntimeError> {
        if token.len() != self.dim {
            return Err(RuntimeError::ShapeMismatch {
                expected: self.dim,
                got: token.len(),
            });
        }
        if self.current_len >= self.max_tokens {
            return Err(RuntimeError::InvalidOperation(format!(
                "PagedKvCache full: {} / {} tokens",
                self.current_len, self.max_tokens
            )));
        }
        self.kv.append(SEQ, 1)?;
        if let Err(e) = self.kv.write(SEQ, self.current_len as u32, 0, token, &[]) {
            self.kv.truncate(SEQ, self.current_len as u32)?;
            return Err(e.into());
        }
        self.current_len += 1;
        Ok(())
    }

    /// Appends the rows of a `[n, dim]` tensor (all or none).
    pub fn append_tensor(&mut self, t: &Tensor) -> Result<(), RuntimeError> {
        if t.ndim() != 2 || t.shape()[1] != self.dim {
            return Err(RuntimeError::InvalidOperation(format!(
                "PagedKvCache.append_tensor: expected [n, {}], got {:?}",
                self.dim,
                t.shape()
            )));
        }
        let n = t.shape()[0];
        if self.current_len + n > self.max_tokens {
            return Err(RuntimeError::InvalidOperation(format!(
                "PagedKvCache overflow: {} + {} > {}",
                self.current_len, n, self.max_tokens
            )));
        }
        for row in t.data.chunks(self.dim.max(1)).take(n) {
            self.append(row)?;
        }
        Ok(())
    }

    /// All stored tokens as a contiguous `[len, dim]` tensor.
    pub fn as_tensor(&self) -> Tensor {
        let (k, v) = self.kv.gather::<f64>(SEQ, 0).expect("the cache's sequence");
        debug_assert!(v.is_empty(), "a K-only pool gathers no V");
        Tensor::from_vec(k, &[self.current_len, self.dim]).expect("gather's shape")
    }

    /// Empties the cache; its blocks stay the cache's (its own pool) and
    /// the table is reserved again.
    pub fn clear(&mut self) {
        self.kv.truncate(SEQ, 0).expect("the cache's sequence");
        self.kv
            .reserve(SEQ, self.max_tokens as u32)
            .expect("its block table");
        self.current_len = 0;
    }

    /// The token at position `idx`.
    pub fn get_token(&self, idx: usize) -> Result<Vec<f64>, RuntimeError> {
        if idx >= self.current_len {
            return Err(RuntimeError::IndexOutOfBounds {
                index: idx,
                length: self.current_len,
            });
        }
        let mut row = vec![0.0; self.dim];
        self.kv.read(SEQ, idx as u32, 0, &mut row, &mut [])?;
        Ok(row)
    }
}

impl fmt::Display for PagedKvCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PagedKvCache(len={}, max={}, dim={}, blocks={}/{})",
            self.current_len,
            self.max_tokens,
            self.dim,
            self.blocks_in_use(),
            self.num_blocks()
        )
    }
}

fn main() {
    let mut cache = PagedKvCache::new(100, 4);
    for t in 0..20 {
        cache.append(&[t as f64, 0.5, -1.0, 2.0]).unwrap();
    }
    println!("{}", cache);
    println!("token 17: {:?}", cache.get_token(17).unwrap());
    let all = cache.as_tensor();
    println!("as_tensor: shape {:?}", all.shape());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
    use std::cell::Cell;

    /// Counts this thread's heap allocations (the tests run in threads of
    /// their own, so only the test that reads the count is counted).
    struct Counting;

    thread_local! {
        static ALLOCS: Cell<u64> = const { Cell::new(0) };
    }

    // SAFETY: forwards to System; the counter is a const-initialised
    // thread-local, which allocates nothing.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
            System.alloc(l)
        }
        unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
            System.dealloc(p, l)
        }
        unsafe fn alloc_zeroed(&self, l: AllocLayout) -> *mut u8 {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
            System.alloc_zeroed(l)
        }
        unsafe fn realloc(&self, p: *mut u8, l: AllocLayout, size: usize) -> *mut u8 {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
            System.realloc(p, l, size)
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    fn allocs() -> u64 {
        ALLOCS.with(|n| n.get())
    }

    fn row(t: usize, dim: usize) -> Vec<f64> {
        (0..dim).map(|i| (t * 1000 + i) as f64).collect()
    }

    #[test]
    fn preallocates_ceil_blocks() {
        let cache = PagedKvCache::new(33, 8);
        assert_eq!(cache.num_blocks(), 3);
        assert_eq!(cache.blocks_in_use(), 0);
        assert!(cache.is_empty());
        assert_eq!((cache.max_tokens(), cache.dim()), (33, 8));
        assert_eq!(PagedKvCache::new(32, 8).num_blocks(), 2);
        assert_eq!(PagedKvCache::new(0, 8).num_blocks(), 0);
    }

    #[test]
    fn k_only_blocks_hold_one_row_per_token() {
        let cache = PagedKvCache::new(32, 8);
        let pool = cache.kv.pool();
        assert_eq!(pool.block_bytes(), BLOCK_TOKEN_COUNT * 8 * 8);
        assert!(pool.k_only());
    }

    #[test]
    fn append_and_read_across_blocks() {
        let mut cache = PagedKvCache::new(40, 3);
        for t in 0..35 {
            cache.append(&row(t, 3)).unwrap();
        }
        assert_eq!(cache.len(), 35);
        assert_eq!(cache.blocks_in_use(), 3);
        assert_eq!(cache.get_token(0).unwrap(), row(0, 3));
        assert_eq!(cache.get_token(16).unwrap(), row(16, 3));
        assert_eq!(cache.get_token(34).unwrap(), row(34, 3));
        assert_eq!(
            cache.get_token(35),
            Err(RuntimeError::IndexOutOfBounds {
                index: 35,
                length: 35
            })
        );
    }

    #[test]
    fn shape_mismatch_and_full() {
        let mut cache = PagedKvCache::new(17, 2);
        assert_eq!(
            cache.append(&[1.0, 2.0, 3.0]),
            Err(RuntimeError::ShapeMismatch {
                expected: 2,
                got: 3
            })
        );
        for t in 0..17 {
            cache.append(&row(t, 2)).unwrap();
        }
        match cache.append(&row(17, 2)) {
            Err(RuntimeError::InvalidOperation(m)) => {
                assert_eq!(m, "PagedKvCache full: 17 / 17 tokens")
            }
            other => panic!("expected full, got {:?}", other),
        }
        assert_eq!(cache.len(), 17);
    }

    #[test]
    fn append_tensor_and_as_tensor() {
        let mut cache = PagedKvCache::new(64, 2);
        let data: Vec<f64> = (0..40).map(|x| x as f64).collect();
        let t = Tensor::from_vec(data.clone(), &[20, 2]).unwrap();
        cache.append_tensor(&t).unwrap();
        assert_eq!(cache.as_tensor(), t);
        let bad = Tensor::from_vec(vec![0.0; 6], &[2, 3]).unwrap();
        assert!(matches!(
            cache.append_tensor(&bad),
            Err(RuntimeError::InvalidOperation(_))
        ));
        let big = Tensor::from_vec(vec![0.0; 90], &[45, 2]).unwrap();
        assert!(cache.append_tensor(&big).is_err());
        assert_eq!(cache.len(), 20, "an overflowing batch appends nothing");
        let empty = PagedKvCache::new(16, 2).as_tensor();
        assert_eq!(empty.shape(), &[0, 2]);
    }

    #[test]
    fn clear_keeps_the_blocks() {
        let mut cache = PagedKvCache::new(32, 2);
        for t in 0..32 {
            cache.append(&row(t, 2)).unwrap();
        }
        cache.clear();
        assert!(cache.is_empty());
        assert_eq!(cache.blocks_in_use(), 0);
        assert_eq!(cache.num_blocks(), 2);
        for t in 0..32 {
            cache.append(&row(t + 100, 2)).unwrap();
        }
        assert_eq!(cache.get_token(31).unwrap(), row(131, 2));
    }

    #[test]
    fn display() {
        let mut cache = PagedKvCache::new(100, 4);
        for t in 0..20 {
            cache.append(&row(t, 4)).unwrap();
        }
        assert_eq!(
            cache.to_string(),
            "PagedKvCache(len=20, max=100, dim=4, blocks=2/7)"
        );
    }

    /// The seed's NoGC guarantee: append allocates nothing on the heap
    /// (the table was reserved by new).  This counts the Rust side; the
    /// crate's tests/noalloc.rs counts the C side too (malloc
    /// interposed), on the same reserved append path.
    #[test]
    fn append_allocates_nothing() {
        let mut cache = PagedKvCache::new(1024, 8);
        let token = row(7, 8);
        let before = allocs();
        for _ in 0..1024 {
            cache.append(&token).unwrap();
        }
        let after = allocs();
        assert_eq!(cache.len(), 1024);
        assert_eq!(after - before, 0, "append allocated");
        assert_eq!(cache.get_token(1023).unwrap(), token);
    }
}
