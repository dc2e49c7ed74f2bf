// SPDX-License-Identifier: MIT
//! What a port of the engines kvpool started from needs (issue 29): empty
//! pools, K-only pools, exact limits, the configuration getters, the
//! policy setter and victim peek, the sequence list, reserved tables,
//! appends that say what they did, buffers reused, and no-space errors
//! that say how much was requested and available.
use kvpool::{
    Admit, BlockCopy, DType, ErrorKind, Layout, Manager, ManagerConfig, OwnedBlock, Policy, Pool,
    PoolConfig,
};

fn id_pool(blocks: u32, block_tokens: u32) -> Pool {
    Pool::new(&PoolConfig::new(blocks, block_tokens).nocache(true)).unwrap()
}

const LAYOUT: Layout = Layout {
    num_layers: 2,
    num_kv_heads: 2,
    head_dim: 4,
    dtype: DType::F32,
};

// -- pools ------------------------------------------------------------------

/// A struct that keeps both its pool and its blocks, indexed by id: the
/// shape of oxillama's page pool, with no borrow of the pool and no
/// unsafe code.
#[test]
fn owned_blocks_live_beside_their_pool() {
    struct Pages {
        pool: Pool,
        pages: Vec<Option<OwnedBlock>>,
    }
    let pool = Pool::new(&PoolConfig::new(4, 4).layout(LAYOUT).nocache(true)).unwrap();
    let mut p = Pages {
        pages: (0..4).map(|_| None).collect(),
        pool,
    };
    let b = p.pool.alloc_owned().unwrap();
    let id = b.id() as usize;
    p.pages[id] = Some(b);
    p.pages[id].as_mut().unwrap().data_mut::<f32>().unwrap()[5] = 2.5;
    assert_eq!(p.pages[id].as_ref().unwrap().data::<f32>().unwrap()[5], 2.5);
    assert_eq!(p.pool.stats().used, 1);
    // Shared, it cannot be written; dropped, its block goes back.
    let twin = p.pages[id].as_ref().unwrap().share().unwrap();
    assert_eq!(p.pool.refcount(id as u32).unwrap(), 2);
    assert_eq!(
        p.pages[id]
            .as_mut()
            .unwrap()
            .data_mut::<f32>()
            .unwrap_err()
            .kind(),
        ErrorKind::Busy
    );
    drop(twin);
    p.pages[id] = None;
    assert_eq!(p.pool.stats().used, 0);
    // It keeps its pool alive: the pool handle may go first.
    let b = p.pool.alloc_owned().unwrap();
    drop(p);
    assert_eq!(b.pool().stats().used, 1);
    assert_eq!(
        b.data::<u16>().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    drop(b);
}

#[test]
fn empty_pool() {
    let pool = Pool::new(&PoolConfig::new(0, 16)).unwrap();
    assert_eq!(pool.num_blocks(), 0);
    assert_eq!(pool.stats().utilisation(), 0.0);
    let e = pool.alloc(1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace);
    assert_eq!((e.requested(), e.available()), (Some(1), Some(0)));
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 0).unwrap();
    assert_eq!(m.info(1).unwrap().num_blocks, 0);
    assert_eq!(m.create(2, 1).unwrap_err().kind(), ErrorKind::NoSpace);
    assert_eq!(m.append(1, 1).unwrap_err().kind(), ErrorKind::NoSpace);
    assert_eq!(m.blocks(1).unwrap(), Vec::<u32>::new());
    m.check().unwrap();
}

#[test]
fn pool_config_round_trip() {
    let cfg = PoolConfig::new(64, 4)
        .layout(LAYOUT)
        .k_only(true)
        .zero(true)
        .nocache(true)
        .device_id(3);
    let pool = Pool::new(&cfg).unwrap();
    // With no thread caches the capacity in effect is 0.
    assert_eq!(pool.config(), cfg.clone().cache_blocks(0));
    assert_eq!(pool.num_blocks(), 64);
    assert_eq!(pool.device_id(), 3);
    assert_eq!(pool.layout(), Some(LAYOUT));
    assert!(pool.k_only());
    let idonly = Pool::new(&PoolConfig::new(8, 16)).unwrap();
    let c = idonly.config();
    assert_eq!(
        (c.layout, c.device_id, c.k_only, c.zero),
        (None, -1, false, false)
    );
    assert_eq!(idonly.layout(), None);
    assert_eq!(idonly.block_tokens(), 16);
}

#[test]
fn k_only_pool() {
    let kv = Pool::new(&PoolConfig::new(8, 4).layout(LAYOUT)).unwrap();
    let pool = Pool::new(&PoolConfig::new(8, 4).layout(LAYOUT).k_only(true)).unwrap();
    assert_eq!(2 * pool.block_bytes(), kv.block_bytes(), "half the bytes");
    assert_eq!(pool.row_bytes(), kv.row_bytes());
    assert_eq!(
        Pool::new(&PoolConfig::new(8, 4).k_only(true))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument,
        "K-only needs a layout"
    );
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 6).unwrap();
    for pos in 0..6u32 {
        let k: Vec<f32> = (0..8).map(|i| (pos * 100 + i) as f32).collect();
        m.write(1, pos, 1, &k, &[]).unwrap();
    }
    let mut k = vec![0f32; 8];
    m.read(1, 5, 1, &mut k, &mut []).unwrap();
    assert_eq!(k[3], 503.0);
    let mut v = vec![0f32; 8];
    assert_eq!(
        m.read(1, 5, 1, &mut k, &mut v).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "a K-only pool has no V"
    );
    assert_eq!(
        m.write(1, 5, 1, &k, &v).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let (gk, gv) = m.gather::<f32>(1, 1).unwrap();
    assert_eq!((gk.len(), gv.len()), (6 * 8, 0));
    assert_eq!(gk[4 * 8 + 2], 402.0);
    // SAFETY: no other thread appends to sequence 1.
    let (uk, uv) = unsafe { m.gather_unchecked::<f32>(1, 1) }.unwrap();
    assert_eq!((uk, uv), (gk, gv));
    // A K+V pool still needs V.
    let mk = Manager::new(&kv, &ManagerConfig::default()).unwrap();
    mk.create(1, 1).unwrap();
    assert_eq!(
        mk.write(1, 0, 0, &k, &[]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

// -- errors -----------------------------------------------------------------

#[test]
fn buffer_too_small_is_its_own_error() {
    let pool = id_pool(64, 16);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(7, 16 * 7).unwrap();
    let mut ids = [0u32; 4];
    let mut n = 0u32;
    // SAFETY: ids has room for 4 entries; m lives.
    let rc = unsafe { kvpool::sys::kvp_seq_blocks(m.as_ptr(), 7, ids.as_mut_ptr(), 4, &mut n) };
    let e = kvpool::Error::from_rc(rc);
    assert_eq!(e.kind(), ErrorKind::BufferTooSmall);
    assert_eq!(e.errno(), 105);
    assert!(e.is_buffer_too_small());
    assert_eq!((e.requested(), e.available()), (Some(7), Some(4)));
    assert_eq!(e.message(), "the caller's buffer is too small");
    assert_eq!(
        e.to_string(),
        "kvpool: the caller's buffer is too small: 7 entries needed, room for 4 (errno 105)"
    );
    // The crate's own calls size their buffers.
    assert_eq!(m.blocks(7).unwrap().len(), 7);
}

#[test]
fn no_space_says_how_much() {
    let pool = id_pool(8, 16);
    let held = pool.alloc(6).unwrap();
    let e = pool.alloc(3).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace);
    assert_eq!(e.requested(), Some(3));
    assert_eq!(e.available(), Some(2));
    assert!(!e.is_buffer_too_small());
    assert_eq!(
        e.to_string(),
        "kvpool: not enough free blocks: requested 3, available 2 (errno 28)"
    );
    let copy = e; // Error is Copy and Eq
    assert_eq!(copy, e);
    assert!(format!("{:?}", e).contains("requested 3, available 2"));
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    let e = m.create(1, 16 * 9).unwrap_err();
    assert_eq!((e.requested(), e.available()), (Some(9), Some(2)));
    // Other errors carry no details.
    let e = m.free(99).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!((e.requested(), e.available()), (None, None));
    assert_eq!(e.to_string(), format!("kvpool: {} (errno 2)", e.message()));
    pool.free(&held).unwrap();
}

#[test]
fn duplicate_id_is_exists_whatever_its_size() {
    let pool = id_pool(8, 16);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 16).unwrap();
    assert_eq!(
        m.create(1, 16 * 1000).unwrap_err().kind(),
        ErrorKind::Exists
    );
}

// -- managers ---------------------------------------------------------------

#[test]
fn manager_config_exact_limits() {
    let pool = id_pool(10, 16);
    let d = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    assert_eq!((d.eviction_threshold(), d.watermark()), (0.9, 0.01));
    assert_eq!(d.policy(), Policy::Lru);
    let cfg = ManagerConfig::new()
        .policy(Policy::Lfu)
        .eviction_threshold(0.0)
        .watermark(0.0)
        .name("zero");
    let m = Manager::new(&pool, &cfg).unwrap();
    assert_eq!((m.eviction_threshold(), m.watermark()), (0.0, 0.0));
    assert_eq!(m.config(), cfg);
    // Watermark 0 keeps no block free: the whole pool is admissible.
    assert_eq!(m.admit(16 * 10).unwrap(), Admit::Ok);
    // Threshold 0: evicting down to it evicts every sequence.
    m.create(1, 16).unwrap();
    m.create(2, 16).unwrap();
    let mut v = Vec::new();
    assert!(m.evict_until_into(None, 8, &mut v).unwrap());
    v.sort_unstable();
    assert_eq!(v, vec![1, 2]);
    let p = Manager::new(&pool, &ManagerConfig::new().prefix_cache(true)).unwrap();
    let c = p.config();
    assert!(c.prefix_cache);
    assert!(c.max_pinned > 0, "the default cap in use");
    assert_eq!(d.config().max_pinned, 0, "none without a prefix cache");
}

#[test]
fn set_policy_and_peek_victim() {
    let pool = id_pool(64, 16);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    assert_eq!(m.peek_victim().unwrap(), None);
    m.create(1, 16 * 4).unwrap(); // the longest
    m.create(2, 16).unwrap(); // the least recently used, once 1 appends
    m.create(3, 16 * 2).unwrap();
    m.append(1, 1).unwrap();
    m.set_priority(3, -5).unwrap();
    assert_eq!(m.peek_victim().unwrap(), Some(2));
    assert_eq!(m.stats().sequences, 3, "peeking evicts nothing");
    m.set_policy(Policy::Longest).unwrap();
    assert_eq!(m.policy(), Policy::Longest);
    assert_eq!(m.peek_victim().unwrap(), Some(1));
    m.set_policy(Policy::Priority).unwrap();
    assert_eq!(m.peek_victim().unwrap(), Some(3));
    assert_eq!(m.evict().unwrap(), 3, "evict takes the peeked victim");
    m.set_policy(Policy::Lru).unwrap();
    assert_eq!(m.evict().unwrap(), 2);
}

#[test]
fn fork_counts_as_an_access_of_its_source() {
    let pool = id_pool(64, 16);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 20).unwrap();
    m.create(2, 20).unwrap();
    let before = m.info(1).unwrap();
    m.fork(1, 3).unwrap();
    let after = m.info(1).unwrap();
    assert_eq!(after.access_count, before.access_count + 1);
    assert!(after.last_access > before.last_access);
    // LRU: 2, untouched since its creation, is now the oldest.
    assert_eq!(m.peek_victim().unwrap(), Some(2));
    // LFU: the fresh fork (one access) goes before its source (two).
    m.set_policy(Policy::Lfu).unwrap();
    m.free(2).unwrap();
    assert_eq!(m.peek_victim().unwrap(), Some(3));
}

#[test]
fn sequences_list() {
    let pool = id_pool(64, 16);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    assert_eq!(m.sequences().unwrap(), Vec::<u64>::new());
    for s in 0..100u64 {
        m.create(s << 20, 0).unwrap();
    }
    let mut all = m.sequences().unwrap();
    all.sort_unstable();
    assert_eq!(all, (0..100u64).map(|s| s << 20).collect::<Vec<_>>());
    // Reused without reallocating when it has the room.
    let mut ids = Vec::with_capacity(200);
    ids.push(7);
    let p = ids.as_ptr();
    m.sequences_into(&mut ids).unwrap();
    assert_eq!((ids.len(), ids.capacity(), ids.as_ptr()), (100, 200, p));
    // Grown when it has not.
    let mut small = Vec::with_capacity(1);
    m.sequences_into(&mut small).unwrap();
    assert_eq!(small.len(), 100);
    m.free(0).unwrap();
    m.sequences_into(&mut ids).unwrap();
    assert_eq!(ids.len(), 99);
    assert!(!ids.contains(&0));
}

// -- sequences --------------------------------------------------------------

#[test]
fn append_says_what_it_did() {
    let pool = id_pool(64, 4);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 0).unwrap();
    m.reserve(1, 64).unwrap();
    m.reserve(1, 8).unwrap(); // below: a no-op
    let a = m.append(1, 1).unwrap();
    let b0 = m.blocks(1).unwrap()[0];
    assert_eq!(
        a,
        kvpool::Appended {
            last_block: Some(b0),
            num_tokens: 1,
            new_blocks: 1,
            cow: None
        }
    );
    for n in 2..=4 {
        let a = m.append(1, 1).unwrap();
        assert_eq!((a.last_block, a.num_tokens, a.new_blocks), (Some(b0), n, 0));
    }
    let a = m.append(1, 1).unwrap();
    let b1 = m.blocks(1).unwrap()[1];
    assert_eq!((a.last_block, a.num_tokens, a.new_blocks), (Some(b1), 5, 1));
    assert_eq!(
        a.last_slot(4),
        Some(m.slot_mapping(1, 4, 1).unwrap()[0] as u64)
    );
    let a = m.append(1, 8).unwrap();
    assert_eq!((a.num_tokens, a.new_blocks), (13, 2));
    assert_eq!(
        a.last_slot(4),
        Some(m.slot_mapping(1, 12, 1).unwrap()[0] as u64)
    );
    // A fork's append copies the shared last block (1 token of 4): the
    // copy's destination is the new last block, and it counts as
    // allocated.
    m.fork(1, 2).unwrap();
    let a = m.append(2, 1).unwrap();
    let c: BlockCopy = a.cow.expect("the shared partial block is copied");
    assert_eq!((c.src, c.tokens), (m.blocks(1).unwrap()[3], 1));
    assert_eq!(a.last_block, Some(c.dst));
    assert_eq!(a.new_blocks, 1);
    assert_eq!(m.reserve(9, 8).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(m.reserve(1, 4 * 65).unwrap_err().kind(), ErrorKind::NoSpace);
    m.check().unwrap();
}

#[test]
fn blocks_into_reuses_the_buffer() {
    let pool = id_pool(64, 16);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 16 * 20 + 1).unwrap();
    let b = m.blocks(1).unwrap();
    assert_eq!(b.len(), 21);
    assert_eq!(b.capacity(), 21, "one allocation of the right size");
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(&[1, 2, 3]);
    let p = v.as_ptr();
    m.blocks_into(1, &mut v).unwrap();
    assert_eq!(v, b);
    assert_eq!((v.capacity(), v.as_ptr()), (64, p));
    let mut small = Vec::new();
    m.blocks_into(1, &mut small).unwrap();
    assert_eq!(small, b);
    assert_eq!(
        m.blocks_into(9, &mut small).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn evict_until_grows_with_its_victims() {
    let pool = id_pool(40, 16);
    let m = Manager::new(
        &pool,
        &ManagerConfig::new().eviction_threshold(0.5).watermark(0.0),
    )
    .unwrap();
    for s in 1..=4 {
        m.create(s, 16 * 8).unwrap(); // 32 blocks in all: 0.8
    }
    let mut v = Vec::new();
    // None: down to the manager's threshold (LRU: the oldest first).
    assert!(m.evict_until_into(None, 8, &mut v).unwrap());
    assert_eq!(v, vec![1, 2]);
    // A cap stops it short.
    assert!(!m.evict_until_into(Some(0.0), 1, &mut v).unwrap());
    assert_eq!(v, vec![3]);
    assert_eq!(
        m.evict_until_into(Some(-1.0), 1, &mut v)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    // The old form: a negative target is the threshold; the Vec holds the
    // victims, not the cap.
    let (victims, met) = m.evict_until(0.0, 1_000_000).unwrap();
    assert!(met);
    assert_eq!(victims, vec![4]);
    assert!(victims.capacity() < 1000);
    for s in 1..=20 {
        m.create(s, 16).unwrap(); // 0.5
    }
    let (victims, met) = m.evict_until(0.0, 1_000_000).unwrap();
    assert!(met);
    assert_eq!(victims.len(), 20, "gone past the first chunk");
    m.create(1, 16).unwrap();
    let (victims, met) = m.evict_until(-1.0, 4).unwrap();
    assert!(met, "1 of 40 is below the threshold: nothing to do");
    assert!(victims.is_empty());
}

// -- Debug --------------------------------------------------------------------

#[test]
fn handles_are_debug() {
    #[derive(Debug)]
    struct Engine<'p> {
        pool: &'p Pool,
        m: Manager,
        held: kvpool::Block<'p>,
    }
    let pool = id_pool(16, 16);
    let e = Engine {
        pool: &pool,
        m: Manager::new(&pool, &ManagerConfig::new().name("eng")).unwrap(),
        held: pool.alloc_block().unwrap(),
    };
    let s = format!("{:?}", e);
    assert!(
        s.contains("Pool { num_blocks: 16, block_tokens: 16,"),
        "{}",
        s
    );
    assert!(s.contains("free: 15"), "{}", s);
    assert!(s.contains("name: \"eng\", policy: Lru,"), "{}", s);
    assert!(
        s.contains(&format!("Block {{ id: {}, .. }}", e.held.id())),
        "{}",
        s
    );
    let _ = (e.pool, &e.m);
}
