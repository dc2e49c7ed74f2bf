// SPDX-License-Identifier: MIT
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
//! Threads: every `&self` method of [`Pool`] and [`Manager`] may run
//! from any number of threads at once, as the C calls do (calls on one
//! sequence are serialised by the library; different sequences never
//! contend).  What the C library asks to be set before other threads use
//! a manager takes `&mut self` ([`Manager::set_event_callback`],
//! [`Manager::set_event_medium`]), so the borrow checker enforces it.  A
//! handle cannot be closed under a call in flight: dropping it needs it
//! unborrowed, so a `std::thread::scope` or the last `Arc` holder drops
//! it only after every thread using it has returned.  An invalid
//! argument the crate catches names itself ([`Error::detail`]).
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

pub mod sys;

mod data;
mod error;
mod events;
mod evict;
mod export;
mod hash;
mod manager;
mod metrics;
mod pool;
mod prefix;

pub use crate::error::{Error, ErrorKind, Result};
pub use crate::events::{Event, EventKind};
pub use crate::evict::Admit;
pub use crate::export::Csr;
pub use crate::hash::{
    cbor_seed_root, hash_blocks, hash_cbor_block, set_cbor_seed, set_xxh3_seed, BlockHash,
    HashAlgo, HashKeys,
};
pub use crate::manager::{Appended, BlockCopy, Manager, ManagerConfig, Policy, SeqInfo, Stats};
pub use crate::pool::{
    thread_flush, Block, DType, Element, Layout, OwnedBlock, Pool, PoolConfig, PoolStats,
};
pub use crate::prefix::{CommitInfo, Retention, RETAIN_DEFAULT, RETAIN_MAX, RETAIN_PIN};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync::<Pool>();
        assert_send_sync::<Manager>();
        assert_send_sync::<OwnedBlock>();
    }
}
