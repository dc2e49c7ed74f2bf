//! Does the safe Rust binding add overhead over the C calls?
//!
//! bench_seq's decode workload at one thread, driven two ways in the same
//! process, interleaved, on a fresh pool and manager each time:
//!   c      the C functions called directly (kvpool::sys), as bench_seq
//!          does: kvp_seq_append(m, id, 1, cow, 1, &ncow), and at 2,048
//!          tokens kvp_seq_free + kvp_seq_create of a 100-token prompt;
//!   rust   the same loop through Manager::append / free / create.
//! decode: 1,024 sequences staggered from 100 to 2,048 tokens, one token
//! each in turn (a block every 16th append), an ID-only pool twice the
//! working set.  evict: a full pool of idle cached prefix blocks and 256
//! sequences appending 16 tokens at a time, so that every append
//! allocates by evicting a cached block.
//! Prints the median ns per append of each and rust / c; the target is
//! rust within 5% of c.
//!
//! cargo run --release --example bench_decode -- [--reps N] [--ops N]
use std::time::Instant;

use kvpool::{hash_blocks, sys, HashAlgo, HashKeys, Manager, ManagerConfig, Pool, PoolConfig};

const MAX_TOKENS: u32 = 2048;
const PROMPT: u32 = 100;
const SEQS: u32 = 1024;
const WARMUP: u32 = 4096;

#[derive(Clone, Copy, PartialEq)]
enum Peer {
    C,
    Rust,
}

fn id(j: u32) -> u64 {
    (1u64 << 32) | j as u64
}

fn c_append(m: *mut sys::kvp_manager, seq: u64, n: u32) {
    let mut cow = kvpool::Copy::default();
    let mut ncow = u32::MAX;
    // SAFETY: m is live; cow has room for one copy.
    let rc = unsafe { sys::kvp_seq_append(m, seq, n, &mut cow, 1, &mut ncow) };
    if rc != 0 || ncow != 0 {
        panic!("c: kvp_seq_append({:#x}) = {}, ncow {}", seq, rc, ncow);
    }
}

fn c_recycle(m: *mut sys::kvp_manager, seq: u64) {
    // SAFETY: m is live.
    let (a, b) = unsafe { (sys::kvp_seq_free(m, seq), sys::kvp_seq_create(m, seq, PROMPT)) };
    if a != 0 || b != 0 {
        panic!("c: free/create({:#x}) = {}, {}", seq, a, b);
    }
}

/// One decode run: ns per append over `ops` appends after a warm-up.
fn decode(peer: Peer, ops: u64) -> f64 {
    let pool = Pool::new(&PoolConfig::new(2 * SEQS * (MAX_TOKENS / 16), 16)).unwrap();
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    let raw = m.as_ptr();
    let mut ntok: Vec<u32> = (0..SEQS).map(|j| PROMPT + j * (MAX_TOKENS - PROMPT) / SEQS).collect();
    for j in 0..SEQS {
        m.create(id(j), ntok[j as usize]).unwrap();
    }
    let mut i = 0u32;
    let mut one = |peer: Peer| {
        let seq = id(i);
        match peer {
            Peer::C => c_append(raw, seq, 1),
            Peer::Rust => {
                if m.append(seq, 1).unwrap().is_some() {
                    panic!("rust: unexpected copy");
                }
            }
        }
        let n = &mut ntok[i as usize];
        *n += 1;
        if *n >= MAX_TOKENS {
            match peer {
                Peer::C => c_recycle(raw, seq),
                Peer::Rust => {
                    m.free(seq).unwrap();
                    m.create(seq, PROMPT).unwrap();
                }
            }
            *n = PROMPT;
        }
        i += 1;
        if i == SEQS {
            i = 0;
        }
    };
    for _ in 0..WARMUP {
        one(peer);
    }
    let t0 = Instant::now();
    for _ in 0..ops {
        one(peer);
    }
    let ns = t0.elapsed().as_nanos() as f64 / ops as f64;
    assert_eq!(m.stats().appends, ops + WARMUP as u64);
    for j in 0..SEQS {
        m.free(id(j)).unwrap();
    }
    m.check().unwrap();
    ns
}

/// One evicting run: every append of 16 tokens evicts one cached block.
fn evict(peer: Peer, blocks: u32) -> f64 {
    const S: u32 = 256;
    let per = 64u32;
    let blocks = blocks / per * per;
    let pool = Pool::new(&PoolConfig::new(blocks, 16)).unwrap();
    let m = Manager::new(&pool, &ManagerConfig { prefix_cache: true, ..Default::default() }).unwrap();
    let mut x = 12345u32;
    for j in 0..blocks / per {
        let toks: Vec<u32> = (0..per * 16)
            .map(|_| {
                x = x.wrapping_mul(1103515245).wrapping_add(12345);
                x >> 8
            })
            .collect();
        let h = hash_blocks(HashAlgo::Xxh3_128, None, &HashKeys::default(), &toks, 16).unwrap();
        m.create(1 << 40 | j as u64, per * 16).unwrap();
        m.commit(1 << 40 | j as u64, &h).unwrap();
        m.free(1 << 40 | j as u64).unwrap();
    }
    kvpool::thread_flush();
    assert_eq!(pool.stats().evictable, blocks as u64);
    for j in 0..S {
        m.create(id(j), 0).unwrap();
    }
    let raw = m.as_ptr();
    let ops = blocks - S; // leave slack: the last ones may find parked blocks
    let before = pool.stats().cache_evictions;
    let t0 = Instant::now();
    for k in 0..ops {
        let seq = id(k % S);
        match peer {
            Peer::C => c_append(raw, seq, 16),
            Peer::Rust => {
                m.append(seq, 16).unwrap();
            }
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / ops as f64;
    let evicted = pool.stats().cache_evictions - before;
    assert!(evicted as f64 >= ops as f64 * 0.95, "{} evictions for {} appends", evicted, ops);
    ns
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut reps = 7usize;
    let mut ops = 4_000_000u64;
    let mut k = 1;
    while k < args.len() {
        let val = args.get(k + 1).and_then(|v| v.parse::<u64>().ok());
        match (args[k].as_str(), val) {
            ("--reps", Some(v)) if v > 0 => reps = v as usize,
            ("--ops", Some(v)) if v > 0 => ops = v,
            _ => {
                eprintln!("usage: bench_decode [--reps N] [--ops N]");
                std::process::exit(2);
            }
        }
        k += 2;
    }
    let mut fail = false;
    for (name, run) in [
        ("decode", Box::new(move |p| decode(p, ops)) as Box<dyn Fn(Peer) -> f64>),
        ("evict", Box::new(|p| evict(p, 65536)) as Box<dyn Fn(Peer) -> f64>),
    ] {
        let (mut c, mut r) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            // Interleave, alternating which peer runs first.
            if rep % 2 == 0 {
                c.push(run(Peer::C));
                r.push(run(Peer::Rust));
            } else {
                r.push(run(Peer::Rust));
                c.push(run(Peer::C));
            }
        }
        let (mc, mr) = (median(&mut c), median(&mut r));
        let ratio = mr / mc;
        let ok = ratio <= 1.05;
        fail |= !ok;
        println!(
            "{:<7} c {:7.1} ns/append  rust {:7.1} ns/append  rust/c {:.3}  (median of {})  {}",
            name,
            mc,
            mr,
            ratio,
            reps,
            if ok { "PASS (within 5%)" } else { "FAIL (above 5%)" }
        );
    }
    std::process::exit(if fail { 1 } else { 0 });
}
