// SPDX-License-Identifier: MIT
//! The shape of the unit tests of the engines kvpool would serve (their
//! own pools: a Vec free list, an Arc<Mutex<BlockAllocator>>, a paged KV
//! cache, a KV-cache manager with prefix reuse), written against kvpool.
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kvpool::{
    hash_blocks, Admit, DType, ErrorKind, EventKind, HashAlgo, HashKeys, Layout, Manager,
    ManagerConfig, Policy, Pool, PoolConfig, Retention, RETAIN_DEFAULT, RETAIN_MAX, RETAIN_PIN,
};

fn id_pool(blocks: u32) -> Pool {
    Pool::new(&PoolConfig::new(blocks, 16).nocache(true)).unwrap()
}

// -- a block pool: allocation and free counts, exhaustion, reuse --------

#[test]
fn alloc_and_free_counts() {
    let pool = id_pool(32);
    let a = pool.alloc(5).unwrap();
    let b = pool.alloc(3).unwrap();
    let st = pool.stats();
    assert_eq!((st.total, st.used, st.free), (32, 8, 24));
    let all: HashSet<u32> = a.iter().chain(b.iter()).copied().collect();
    assert_eq!(all.len(), 8, "no block handed out twice");
    pool.free(&a).unwrap();
    let st = pool.stats();
    assert_eq!((st.used, st.allocs, st.frees), (3, 8, 5));
    pool.free(&b).unwrap();
    assert_eq!(pool.stats().used, 0);
    pool.check().unwrap();
}

#[test]
fn exhaustion_is_an_error_and_changes_nothing() {
    let pool = id_pool(8);
    let ids = pool.alloc(6).unwrap();
    let e = pool.alloc(3).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace);
    assert_eq!(e.errno(), 28);
    assert_eq!(e.message(), "not enough free blocks");
    assert!(e.to_string().contains("not enough free blocks"));
    assert_eq!(pool.stats().used, 6, "a failed alloc takes nothing");
    assert_eq!(pool.alloc(2).unwrap().len(), 2);
    assert_eq!(pool.alloc(1).unwrap_err().kind(), ErrorKind::NoSpace);
    drop(ids);
}

#[test]
fn free_then_realloc_reuses() {
    let pool = id_pool(4);
    let ids = pool.alloc(4).unwrap();
    pool.free(&ids[1..2]).unwrap();
    assert_eq!(pool.alloc(1).unwrap(), vec![ids[1]]);
    pool.free(&ids).unwrap();
    assert_eq!(pool.stats().used, 0);
}

#[test]
fn refcounts_and_double_free() {
    let pool = id_pool(4);
    let ids = pool.alloc(1).unwrap();
    pool.block_ref(ids[0]).unwrap();
    assert_eq!(pool.refcount(ids[0]).unwrap(), 2);
    pool.free(&ids).unwrap();
    pool.free(&ids).unwrap();
    assert_eq!(pool.free(&ids).unwrap_err().kind(), ErrorKind::AlreadyFree);
    assert_eq!(pool.free(&[99]).unwrap_err().kind(), ErrorKind::OutOfRange);
    assert_eq!(
        Pool::new(&PoolConfig::new(4, 0)).err().unwrap().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn utilisation() {
    let pool = id_pool(100);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    assert_eq!(pool.stats().utilisation(), 0.0);
    m.create(1, 16 * 25).unwrap();
    assert!((pool.stats().utilisation() - 0.25).abs() < 1e-9);
    m.create(2, 16 * 50 + 1).unwrap();
    assert!((pool.stats().utilisation() - 0.76).abs() < 1e-9);
    assert_eq!(m.stats().blocks_used, 76);
    m.free(1).unwrap();
    assert!((pool.stats().utilisation() - 0.51).abs() < 1e-9);
}

// -- a shared allocator across threads (kapsl's Arc<Mutex<..>>) ---------

#[test]
fn shared_pool_across_threads() {
    let pool = Arc::new(Pool::new(&PoolConfig::new(16384, 16)).unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (pool, held) = (Arc::clone(&pool), Arc::clone(&held));
            std::thread::spawn(move || {
                for i in 0..2000u32 {
                    let ids = pool.alloc(1 + (i + t) % 7).unwrap();
                    if i % 5 == 0 {
                        held.lock().unwrap().extend(ids);
                    } else {
                        pool.free(&ids).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let held = held.lock().unwrap();
    let unique: HashSet<u32> = held.iter().copied().collect();
    assert_eq!(unique.len(), held.len(), "a block was handed out twice");
    assert_eq!(pool.stats().used as usize, held.len());
    pool.free(&held).unwrap();
    kvpool::thread_flush();
    pool.check().unwrap();
    assert_eq!(pool.stats().used, 0);
}

// -- a paged KV cache: page read and write ------------------------------

fn data_pool(blocks: u32) -> Pool {
    let lay = Layout {
        num_layers: 2,
        num_kv_heads: 2,
        head_dim: 4,
        dtype: DType::F32,
    };
    Pool::new(&PoolConfig::new(blocks, 4).layout(lay)).unwrap()
}

#[test]
fn page_read_write() {
    let pool = data_pool(16);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    assert_eq!(pool.row_bytes(), 2 * 4 * 4);
    m.create(1, 6).unwrap();
    for pos in 0..6u32 {
        let k: Vec<f32> = (0..8).map(|i| (pos * 100 + i) as f32).collect();
        let v: Vec<f32> = k.iter().map(|x| -x).collect();
        m.write(1, pos, 1, &k, &v).unwrap();
    }
    let (mut k, mut v) = (vec![0f32; 8], vec![0f32; 8]);
    m.read(1, 5, 1, &mut k, &mut v).unwrap();
    assert_eq!(k[3], 503.0);
    assert_eq!(v[3], -503.0);
    assert_eq!(
        m.read(1, 6, 1, &mut k, &mut v).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    assert_eq!(
        m.write(1, 0, 2, &k, &v).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        m.write(1, 0, 0, &k[..4], &v[..4]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let wrong: Vec<f64> = vec![0.0; 4];
    assert_eq!(
        m.write(1, 0, 0, &wrong, &wrong).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let (gk, gv) = m.gather::<f32>(1, 1).unwrap();
    assert_eq!(gk.len(), 6 * 8);
    assert_eq!(gk[4 * 8 + 2], 402.0);
    assert_eq!(gv[4 * 8 + 2], -402.0);
    // SAFETY: no other thread appends to sequence 1.
    let (uk, uv) = unsafe { m.gather_unchecked::<f32>(1, 1) }.unwrap();
    assert_eq!((uk, uv), (gk, gv));
    // A fork shares the pages: writes go through copy-on-write.
    m.fork(1, 2).unwrap();
    assert_eq!(
        m.write(2, 5, 1, &k, &v).unwrap_err().kind(),
        ErrorKind::Busy
    );
    let copy = m
        .append(2, 1)
        .unwrap()
        .cow
        .expect("shared partial page is copied");
    assert_eq!(copy.tokens, 2);
    m.read(2, 5, 1, &mut k, &mut v).unwrap();
    assert_eq!(k[3], 503.0, "the copy carries the bytes");
}

#[test]
fn block_data_slices() {
    let pool = data_pool(4);
    let elems = pool.block_bytes() / 4;
    let mut b = pool.alloc_block().unwrap();
    {
        let d = b.data_mut::<f32>().unwrap();
        assert_eq!(d.len(), elems);
        d[0] = 1.5;
        d[elems - 1] = 2.5;
    }
    assert_eq!(b.data::<f32>().unwrap()[elems - 1], 2.5);
    assert_eq!(
        b.data::<u8>().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let shared = b.share().unwrap();
    assert_eq!(pool.refcount(b.id()).unwrap(), 2);
    assert_eq!(b.data_mut::<f32>().unwrap_err().kind(), ErrorKind::Busy);
    assert_eq!(shared.data::<f32>().unwrap()[0], 1.5);
    drop(shared);
    assert!(b.data_mut::<f32>().is_ok());
    drop(b);
    assert_eq!(pool.stats().used, 0);
    let idonly = id_pool(2);
    let blk = idonly.alloc_block().unwrap();
    assert_eq!(
        blk.data::<f32>().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

// -- a KV-cache manager: sequences, forks, exports ----------------------

#[test]
fn fork_n_parallel_samples() {
    let pool = id_pool(64);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 40).unwrap();
    let before = m.info(1).unwrap();
    m.fork_n(1, &[2, 3, 4]).unwrap();
    let b1 = m.blocks(1).unwrap();
    for id in 2..=4 {
        assert_eq!(m.blocks(id).unwrap(), b1);
        assert_eq!(m.info(id).unwrap().num_tokens, 40);
    }
    assert_eq!(m.info(1).unwrap().access_count, before.access_count + 1);
    let before = m.info(1).unwrap();
    m.fork_n_keep_source(1, &[5, 6]).unwrap();
    let after = m.info(1).unwrap();
    assert_eq!(
        (after.last_access, after.access_count),
        (before.last_access, before.access_count)
    );
    // All or nothing, in kvpool.h's order of errors.
    assert_eq!(m.fork_n(1, &[7, 2]).unwrap_err().kind(), ErrorKind::Exists);
    assert_eq!(m.fork_n(1, &[7, 7]).unwrap_err().kind(), ErrorKind::Exists);
    assert_eq!(
        m.fork_n(9, &[7, 8]).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(m.fork_n(9, &[7, 2]).unwrap_err().kind(), ErrorKind::Exists);
    assert_eq!(
        m.fork_n(1, &[]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(m.info(7).unwrap_err().kind(), ErrorKind::NotFound);
    let st = m.stats();
    assert_eq!((st.sequences, st.forks), (6, 5));
    m.check().unwrap();
    for id in 1..=6 {
        m.free(id).unwrap();
    }
    assert_eq!(pool.stats().used, 0);
}

#[test]
fn sequences_fork_cow_exports() {
    let pool = id_pool(64);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 40).unwrap();
    assert_eq!(m.append(1, 1).unwrap().cow, None);
    m.fork(1, 2).unwrap();
    let b1 = m.blocks(1).unwrap();
    assert_eq!(m.blocks(2).unwrap(), b1);
    let c = m.append(2, 1).unwrap().cow.unwrap();
    assert_eq!((c.src, c.tokens), (b1[2], 9));
    assert_eq!(m.info(2).unwrap().num_tokens, 42);
    let (t, stride) = m.block_table(&[1, 2], -1).unwrap();
    assert_eq!(stride, 3);
    assert_eq!(
        &t[..3],
        &b1[..].iter().map(|&x| x as i32).collect::<Vec<_>>()[..]
    );
    assert_eq!(t[5], c.dst as i32);
    let csr = m.csr(&[1, 2]).unwrap();
    assert_eq!(csr.indptr, vec![0, 3, 6]);
    assert_eq!(csr.last_page_len, vec![9, 10]);
    let slots = m.slot_mapping(1, 40, 1).unwrap();
    assert_eq!(slots, vec![b1[2] as i64 * 16 + 8]);
    assert_eq!(m.create(1, 0).unwrap_err().kind(), ErrorKind::Exists);
    assert_eq!(m.append(9, 1).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(m.fork(9, 10).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(
        m.truncate(1, 100).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    let st = m.stats();
    assert_eq!((st.sequences, st.forks, st.cow_copies), (2, 1, 1));
    m.check().unwrap();
}

#[test]
fn admission_and_eviction() {
    let pool = id_pool(10);
    let m = Manager::new(
        &pool,
        &ManagerConfig {
            policy: Policy::Longest,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(m.admit(16).unwrap(), Admit::Ok);
    assert_eq!(m.admit(16 * 11).unwrap(), Admit::Never);
    m.create(1, 16 * 2).unwrap();
    m.create(2, 16 * 6).unwrap();
    assert_eq!(m.admit(16 * 3).unwrap(), Admit::Later);
    assert_eq!(m.create(3, 16 * 3).unwrap_err().kind(), ErrorKind::NoSpace);
    assert_eq!(m.evict().unwrap(), 2);
    m.create(3, 16 * 3).unwrap();
    let (victims, met) = m.evict_until(0.0, 8).unwrap();
    assert!(met);
    assert_eq!(victims.len(), 2);
    assert_eq!(m.evict().unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(m.stats().evictions, 3);
}

#[test]
fn trim_and_rollback() {
    let pool = id_pool(64);
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 100).unwrap();
    m.truncate(1, 50).unwrap();
    assert_eq!(m.info(1).unwrap().num_blocks, 4);
    assert_eq!(m.stream_trim(1, 16, 16).unwrap(), 16);
    m.set_priority(1, 7).unwrap();
    assert_eq!(m.info(1).unwrap().priority, 7);
}

// -- retention: a pinned system prompt outlives the churn -----------------

#[test]
fn retention_pins_system_prompt() {
    let pool = id_pool(6);
    let m = Manager::new(
        &pool,
        &ManagerConfig {
            prefix_cache: true,
            max_pinned: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let keys = HashKeys::default();
    let sys_toks: Vec<u32> = (0..32).collect();
    let other_toks: Vec<u32> = (100..164).collect();
    let sys = hash_blocks(HashAlgo::Sha256, None, &keys, &sys_toks, 16).unwrap();
    let other = hash_blocks(HashAlgo::Sha256, None, &keys, &other_toks, 16).unwrap();
    let pin = Retention {
        priority: RETAIN_PIN,
        duration: 5,
        ..Default::default()
    };
    m.create_cached(1, &sys, 32).unwrap();
    assert_eq!(m.commit_retained(1, &sys, &[pin]).unwrap(), (2, 1));
    assert_eq!(m.retention(&sys[0]).unwrap(), (RETAIN_PIN, 5));
    assert_eq!(m.retention(&sys[1]).unwrap(), (RETAIN_MAX, 5));
    m.free(1).unwrap();
    m.create_cached(2, &other, 64).unwrap();
    assert_eq!(m.commit(2, &other).unwrap(), 4);
    m.free(2).unwrap();
    // Four blocks needed: the default ones go, the retained ones stay.
    m.create(3, 64).unwrap();
    assert!(other.iter().all(|h| m.retention(h).is_err()));
    // The pin is never evicted: one more block is no space.
    assert_eq!(m.create(4, 32).unwrap_err().kind(), ErrorKind::NoSpace);
    assert_eq!(m.tick(5).unwrap(), 5);
    assert_eq!(m.retention(&sys[0]).unwrap(), (RETAIN_DEFAULT, 0));
    assert_eq!(m.stats().prefix_pinned, 0);
    m.create(4, 32).unwrap();
    m.check().unwrap();
}

// -- prefix reuse ---------------------------------------------------------

#[test]
fn prefix_hits_and_events() {
    let pool = id_pool(8);
    let mut m = Manager::new(
        &pool,
        &ManagerConfig {
            prefix_cache: true,
            ..Default::default()
        },
    )
    .unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev2 = Arc::clone(&events);
    m.set_event_callback(Some(Box::new(move |e| {
        ev2.lock()
            .unwrap()
            .push((e.kind, e.hashes.to_vec(), e.parent.copied(), e.num_tokens));
    })))
    .unwrap();
    let prompt: Vec<u32> = (0..50).collect();
    let h = hash_blocks(HashAlgo::Sha256, None, &HashKeys::default(), &prompt, 16).unwrap();
    assert_eq!(h.len(), 3);
    assert_eq!(m.prefix_match(&h).unwrap(), 0);
    assert_eq!(m.create_cached(1, &h, 50).unwrap(), 0);
    assert_eq!(m.commit(1, &h).unwrap(), 3);
    assert_eq!(m.prefix_match(&h).unwrap(), 3, "every block, taken by none");
    assert_eq!(m.prefix_match(&h[1..]).unwrap(), 2);
    assert_eq!(
        m.create_cached(2, &h, 50).unwrap(),
        48,
        "a hit on every full block"
    );
    m.free(1).unwrap();
    m.free(2).unwrap();
    let st = m.stats();
    assert_eq!(
        (st.prefix_queries, st.prefix_hits, st.prefix_cached_blocks),
        (100, 48, 3)
    );
    {
        let ev = events.lock().unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0], (EventKind::Stored, h.clone(), None, 48));
    }
    // A full pool evicts the idle cached blocks, chain end first.
    m.create(3, 16 * 8).unwrap();
    {
        let ev = events.lock().unwrap();
        let removed: Vec<_> = ev
            .iter()
            .filter(|e| e.0 == EventKind::Removed)
            .flat_map(|e| e.1.clone())
            .collect();
        assert_eq!(removed.len(), 3);
        assert_eq!(removed[0], h[2]);
    }
    assert_eq!(
        m.create_cached(4, &h, 50).unwrap_err().kind(),
        ErrorKind::NoSpace
    );
    m.free(3).unwrap();
    assert_eq!(m.create_cached(4, &h, 50).unwrap(), 0, "evicted: no hit");
    m.free(4).unwrap();
    m.prefix_reset().unwrap();
    assert_eq!(events.lock().unwrap().last().unwrap().0, EventKind::Cleared);
    m.set_event_callback(None).unwrap();
}

#[test]
fn every_hash_profile() {
    let toks: Vec<u32> = (0..100).collect();
    for &algo in HashAlgo::ALL {
        if algo == HashAlgo::Xxh3_128 {
            kvpool::set_xxh3_seed(9);
        }
        let none = HashKeys::default();
        let h = hash_blocks(algo, None, &none, &toks, 16).unwrap();
        assert_eq!(h.len(), 6);
        assert_eq!(h, hash_blocks(algo, None, &none, &toks, 16).unwrap());
        let tail = hash_blocks(algo, Some(&h[0]), &none, &toks[16..32], 16).unwrap();
        assert_eq!(tail[0], h[1], "{:?}: chaining", algo);
        let salted = hash_blocks(
            algo,
            None,
            &HashKeys {
                salt: Some(b"t"),
                lora: None,
            },
            &toks,
            16,
        )
        .unwrap();
        assert_ne!(salted[0], h[0]);
        let lora = hash_blocks(
            algo,
            None,
            &HashKeys {
                salt: None,
                lora: Some("ad"),
            },
            &toks,
            16,
        )
        .unwrap();
        assert_ne!(lora[5], h[5]);
    }
    assert_eq!(
        hash_blocks(HashAlgo::Sha256, None, &HashKeys::default(), &toks, 0)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

// -- many threads on one manager ------------------------------------------

#[test]
fn threads_share_a_manager() {
    let pool = Pool::new(&PoolConfig::new(8192, 16)).unwrap();
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    m.create(1, 100).unwrap();
    let forks = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (m, forks) = (&m, &forks);
            s.spawn(move || {
                for i in 0..500u64 {
                    let id = (t + 1) << 32 | i;
                    m.fork(1, id).unwrap();
                    forks.fetch_add(1, Ordering::Relaxed);
                    for _ in 0..20 {
                        m.append(id, 1).unwrap();
                    }
                    if i % 3 != 0 {
                        m.free(id).unwrap();
                    }
                }
                // The thread's caches go back at thread exit, in a TLS
                // destructor that may run after the scope's join has
                // returned: hand them back now, so that the check below
                // runs on a quiescent pool.
                kvpool::thread_flush();
            });
        }
    });
    let st = m.stats();
    assert_eq!(st.forks, forks.load(Ordering::Relaxed));
    assert_eq!(st.sequences, 1 + 4 * 167);
    assert_eq!(
        st.cow_copies, 2000,
        "every fork copied the shared last block once"
    );
    m.check().unwrap();
}

/// The metrics text names the manager and agrees with its stats.
#[test]
fn metrics_text() {
    let pool = Pool::new(&PoolConfig::new(64, 16)).unwrap();
    let m = Manager::new(
        &pool,
        &ManagerConfig {
            prefix_cache: true,
            name: Some("rust \"m\"".to_string()),
            ..Default::default()
        },
    )
    .unwrap();
    let anon = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    assert_eq!(m.name(), "rust \"m\"");
    assert_eq!(anon.name(), anon.id().to_string());
    m.create(1, 40).unwrap();
    m.fork(1, 2).unwrap();
    let om = pool.metrics(&[&m, &anon], false).unwrap();
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE kvpool_sequence_forks counter\n"));
    assert!(om.contains("kvpool_sequence_forks_total{manager=\"rust \\\"m\\\"\"} 1\n"));
    assert!(om.contains(&format!(
        "kvpool_sequences_running{{manager=\"{}\"}} 0\n",
        anon.id()
    )));
    let prom = pool.metrics(&[&m], true).unwrap();
    assert!(prom.contains("# TYPE kvpool_sequence_forks_total counter\n"));
    assert!(!prom.contains("# EOF"));
    assert_eq!(pool.metrics(&[&m, &m], false).unwrap_err().errno(), 22);
    assert!(Manager::new(
        &pool,
        &ManagerConfig {
            name: Some(String::new()),
            ..Default::default()
        }
    )
    .is_err());
}
