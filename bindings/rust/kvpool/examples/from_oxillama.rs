// SPDX-License-Identifier: MIT
//! Coming from oxillama-runtime's `KvCachePool` (seed 000): a free list
//! of fixed-size `f32` pages, handed out by index.
//!
//! On kvpool the pages are the blocks of a K-only data-owning pool of one
//! layer, one head and one token per block, so a block is exactly
//! `page_size` `f32` values.  The free list becomes kvpool's lock-free
//! stack; `alloc` and `free` keep their signatures.  An allocated page is
//! an `OwnedBlock` kept in a table indexed by its id: it holds its own
//! reference on the pool, so the struct keeps both the pool and its pages
//! with no borrow between them and no unsafe code.  What changes:
//! - `free` of a page that is already free panics (the seed pushed the
//!   index twice and later handed the page out twice);
//! - `page` and `page_mut` of a free page panic (the seed returned
//!   whatever the page last held);
//! - `alloc` reuses the page freed last, as the seed did.
//!
//! Run: `cargo run --example from_oxillama`; its tests: `cargo test
//! --example from_oxillama`.
use kvpool::{DType, Layout, OwnedBlock, Pool, PoolConfig};

/// A pool of KV-cache pages: fixed-size slabs of `f32` data.
#[derive(Debug)]
pub struct KvCachePool {
    pool: Pool,
    /// The allocated pages, by index (block id).
    pages: Vec<Option<OwnedBlock>>,
    page_size: usize,
}

impl KvCachePool {
    /// A pool of `initial_pages` pages of `page_size` `f32` elements each
    /// (`initial_pages` may be 0), all free and zeroed.
    pub fn new(page_size: usize, initial_pages: usize) -> Self {
        let page = Layout {
            num_layers: 1,
            num_kv_heads: 1,
            head_dim: page_size as u32,
            dtype: DType::F32,
        };
        let cfg = PoolConfig::new(initial_pages as u32, 1)
            .layout(page)
            .k_only(true);
        let pool = Pool::new(&cfg).expect("KvCachePool::new: kvpool refused the pool");
        Self {
            pages: (0..initial_pages).map(|_| None).collect(),
            pool,
            page_size,
        }
    }

    /// A free page's index, or None when the pool is exhausted.
    pub fn alloc(&mut self) -> Option<usize> {
        let page = self.pool.alloc_owned().ok()?;
        let idx = page.id() as usize;
        self.pages[idx] = Some(page);
        Some(idx)
    }

    /// Returns page `page_idx` to the pool.  Its data is not zeroed.
    ///
    /// # Panics
    /// If `page_idx` is out of range or already free.
    pub fn free(&mut self, page_idx: usize) {
        // Dropping the OwnedBlock frees the block.
        if self.slot(page_idx).take().is_none() {
            panic!("KvCachePool::free({}): page already free", page_idx);
        }
    }

    /// Page `page_idx`'s data.
    ///
    /// # Panics
    /// If `page_idx` is out of range or free.
    pub fn page(&self, page_idx: usize) -> &[f32] {
        self.check_range(page_idx);
        match &self.pages[page_idx] {
            Some(page) => page.data().expect("a K-only f32 pool"),
            None => panic!("KvCachePool::page({}): page is free", page_idx),
        }
    }

    /// Page `page_idx`'s data, writable.
    ///
    /// # Panics
    /// If `page_idx` is out of range or free.
    pub fn page_mut(&mut self, page_idx: usize) -> &mut [f32] {
        match self.slot(page_idx) {
            Some(page) => page.data_mut().expect("a page held once"),
            None => panic!("KvCachePool::page_mut({}): page is free", page_idx),
        }
    }

    fn check_range(&self, page_idx: usize) {
        assert!(
            page_idx < self.total_pages(),
            "KvCachePool: page_idx {} out of range (total {})",
            page_idx,
            self.total_pages()
        );
    }

    fn slot(&mut self, page_idx: usize) -> &mut Option<OwnedBlock> {
        self.check_range(page_idx);
        &mut self.pages[page_idx]
    }

    /// Pages in the pool, free or not.
    pub fn total_pages(&self) -> usize {
        self.pool.num_blocks() as usize
    }

    /// Pages ready for `alloc`.
    pub fn free_pages(&self) -> usize {
        self.pool.stats().free as usize
    }

    /// Pages allocated and not yet freed.
    pub fn used_pages(&self) -> usize {
        self.pool.stats().used as usize
    }

    /// `f32` elements per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }
}

fn main() {
    let mut pool = KvCachePool::new(64, 4);
    let a = pool.alloc().expect("a free page");
    pool.page_mut(a)[0] = 1.5;
    println!(
        "page {} of {}: [0] = {}, {} used, {} free, {} bytes a page",
        a,
        pool.total_pages(),
        pool.page(a)[0],
        pool.used_pages(),
        pool.free_pages(),
        pool.page_size() * 4
    );
    pool.free(a);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_and_free() {
        let mut pool = KvCachePool::new(64, 4);
        assert_eq!(pool.total_pages(), 4);
        assert_eq!(pool.free_pages(), 4);
        assert_eq!(pool.used_pages(), 0);

        let idx0 = pool.alloc().expect("should allocate");
        assert_eq!(pool.used_pages(), 1);
        assert_eq!(pool.free_pages(), 3);

        let idx1 = pool.alloc().expect("should allocate");
        assert_ne!(idx0, idx1);
        assert!(idx0 < 4 && idx1 < 4);

        pool.free(idx0);
        assert_eq!(pool.used_pages(), 1);
        assert_eq!(pool.free_pages(), 3);
    }

    #[test]
    fn pool_exhaustion_returns_none() {
        let mut pool = KvCachePool::new(16, 2);
        let _a = pool.alloc().expect("first alloc");
        let _b = pool.alloc().expect("second alloc");
        assert!(pool.alloc().is_none());
        assert_eq!(pool.used_pages(), 2, "a failed alloc takes nothing");
    }

    #[test]
    fn free_then_realloc_reuses_the_page() {
        let mut pool = KvCachePool::new(8, 4);
        let a = pool.alloc().expect("alloc");
        let _b = pool.alloc().expect("alloc");
        pool.free(a);
        assert_eq!(pool.alloc(), Some(a), "the page freed last comes back");
    }

    #[test]
    fn page_read_write() {
        let mut pool = KvCachePool::new(4, 2);
        let idx = pool.alloc().expect("alloc");
        let other = pool.alloc().expect("alloc");
        assert_eq!(pool.page(idx), &[0.0; 4], "pages start zeroed");
        {
            let page = pool.page_mut(idx);
            page[0] = 1.0;
            page[1] = 2.5;
            page[3] = -7.0;
        }
        assert_eq!(pool.page(idx), &[1.0, 2.5, 0.0, -7.0]);
        assert_eq!(pool.page(other), &[0.0; 4], "pages do not overlap");
    }

    #[test]
    fn freed_data_is_not_zeroed() {
        let mut pool = KvCachePool::new(4, 1);
        let idx = pool.alloc().unwrap();
        pool.page_mut(idx)[2] = 9.0;
        pool.free(idx);
        let again = pool.alloc().unwrap();
        assert_eq!(pool.page(again)[2], 9.0);
    }

    #[test]
    fn page_size_accessor_and_empty_pool() {
        let mut pool = KvCachePool::new(128, 0);
        assert_eq!(pool.page_size(), 128);
        assert_eq!(pool.total_pages(), 0);
        assert_eq!(pool.free_pages(), 0);
        assert!(pool.alloc().is_none());
    }

    #[test]
    fn a_page_is_exactly_page_size_floats() {
        let pool = KvCachePool::new(100, 3);
        assert_eq!(pool.pool.block_bytes(), 100 * 4, "K only: no V half");
        assert!(pool.pool.k_only());
    }

    #[test]
    #[should_panic(expected = "already free")]
    fn double_free_is_caught() {
        let mut pool = KvCachePool::new(8, 2);
        let idx = pool.alloc().unwrap();
        pool.free(idx);
        pool.free(idx);
    }

    #[test]
    #[should_panic(expected = "page is free")]
    fn a_free_page_has_no_data() {
        let mut pool = KvCachePool::new(8, 2);
        let idx = pool.alloc().unwrap();
        pool.free(idx);
        let _ = pool.page(idx);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn page_out_of_range_panics() {
        let pool = KvCachePool::new(8, 2);
        let _ = pool.page(2);
    }
}
