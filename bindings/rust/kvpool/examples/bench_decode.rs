// SPDX-License-Identifier: MIT
//! Does the safe Rust binding add overhead over the C calls?
//!
//! bench_seq's decode workload at one thread, driven two ways in the same
//! process, interleaved, on a fresh pool and manager each time:
//!   c      the C functions called directly (kvpool::sys), as bench_seq
//!          does: kvp_seq_append(m, id, 1, cow, 1, &ncow), and at 2,048
//!          tokens kvp_seq_free + kvp_seq_create of a 100-token prompt;
//!   rust   the same loop through Manager::append (kvp_seq_append_ex,
//!          which also reports the block) / free / create.
//! decode: 1,024 sequences staggered from 100 to 2,048 tokens, one token
//! each in turn (a block every 16th append), an ID-only pool twice the
//! working set.  evict: a full pool of idle cached prefix blocks and 256
//! sequences appending 16 tokens at a time, so that every append
//! allocates by evicting a cached block.
//! The two peers run in alternating adjacent chunks on the same state
//! (a machine shared with builds drifts by 2x between runs; a pair does
//! not): prints the median ns per append of each and the median of the
//! pairs' rust / c ratios; the target is rust within 5% of c.
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
    let mut cow = kvpool::BlockCopy::default();
    let mut ncow = u32::MAX;
    // SAFETY: m is live; cow has room for one copy.
    let rc = unsafe { sys::kvp_seq_append(m, seq, n, &mut cow, 1, &mut ncow) };
    if rc != 0 || ncow != 0 {
        panic!("c: kvp_seq_append({:#x}) = {}, ncow {}", seq, rc, ncow);
    }
}

fn c_recycle(m: *mut sys::kvp_manager, seq: u64) {
    // SAFETY: m is live.
    let (a, b) = unsafe {
        (
            sys::kvp_seq_free(m, seq),
            sys::kvp_seq_create(m, seq, PROMPT),
        )
    };
    if a != 0 || b != 0 {
        panic!("c: free/create({:#x}) = {}, {}", seq, a, b);
    }
}

/// Times `pairs` adjacent pairs of chunks (c then rust, or rust then c,
/// alternating) through `op`, which runs n appends as one peer; returns
/// the ns per append of each chunk, c's and rust's.
fn pairs(npairs: usize, chunk: u64, mut op: impl FnMut(Peer, u64)) -> (Vec<f64>, Vec<f64>) {
    let (mut c, mut r) = (Vec::new(), Vec::new());
    for p in 0..npairs {
        let order = if p % 2 == 0 {
            [Peer::C, Peer::Rust]
        } else {
            [Peer::Rust, Peer::C]
        };
        for peer in order {
            let t0 = Instant::now();
            op(peer, chunk);
            let ns = t0.elapsed().as_nanos() as f64 / chunk as f64;
            if peer == Peer::C {
                c.push(ns)
            } else {
                r.push(ns)
            }
        }
    }
    (c, r)
}

/// bench_seq's decode: `npairs` pairs of `chunk` appends each.
fn decode(npairs: usize, chunk: u64) -> (Vec<f64>, Vec<f64>) {
    let pool = Pool::new(&PoolConfig::new(2 * SEQS * (MAX_TOKENS / 16), 16)).unwrap();
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    let raw = m.as_ptr();
    let mut ntok: Vec<u32> = (0..SEQS)
        .map(|j| PROMPT + j * (MAX_TOKENS - PROMPT) / SEQS)
        .collect();
    for j in 0..SEQS {
        m.create(id(j), ntok[j as usize]).unwrap();
    }
    let mut i = 0u32;
    let mut total = 0u64;
    let mut run = |peer: Peer, n: u64| {
        for _ in 0..n {
            let seq = id(i);
            match peer {
                Peer::C => c_append(raw, seq, 1),
                Peer::Rust => {
                    if m.append(seq, 1).unwrap().cow.is_some() {
                        panic!("rust: unexpected copy");
                    }
                }
            }
            let t = &mut ntok[i as usize];
            *t += 1;
            if *t >= MAX_TOKENS {
                match peer {
                    Peer::C => c_recycle(raw, seq),
                    Peer::Rust => {
                        m.free(seq).unwrap();
                        m.create(seq, PROMPT).unwrap();
                    }
                }
                *t = PROMPT;
            }
            i += 1;
            if i == SEQS {
                i = 0;
            }
        }
        total += n;
    };
    run(Peer::C, WARMUP as u64);
    let res = pairs(npairs, chunk, &mut run);
    assert_eq!(m.stats().appends, total);
    for j in 0..SEQS {
        m.free(id(j)).unwrap();
    }
    m.check().unwrap();
    res
}

/// A full pool of idle cached blocks: every append of 16 tokens evicts
/// one.  Pairs of `chunk` appends until the cached blocks run out.
fn evict(blocks: u32, chunk: u64) -> (Vec<f64>, Vec<f64>) {
    const S: u32 = 256;
    let per = 64u32;
    let blocks = blocks / per * per;
    let pool = Pool::new(&PoolConfig::new(blocks, 16)).unwrap();
    let m = Manager::new(
        &pool,
        &ManagerConfig {
            prefix_cache: true,
            ..Default::default()
        },
    )
    .unwrap();
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
    let before = pool.stats().cache_evictions;
    let mut k = 0u32;
    // Leave slack: the last appends may find blocks parked ahead.
    let npairs = ((blocks - 2 * S) as u64 / (2 * chunk)) as usize;
    let res = pairs(npairs, chunk, |peer, n| {
        for _ in 0..n {
            let seq = id(k % S);
            k += 1;
            match peer {
                Peer::C => c_append(raw, seq, 16),
                Peer::Rust => {
                    m.append(seq, 16).unwrap();
                }
            }
        }
    });
    let evicted = pool.stats().cache_evictions - before;
    assert!(
        evicted as f64 >= k as f64 * 0.95,
        "{} evictions for {} appends",
        evicted,
        k
    );
    res
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
    for name in ["decode", "evict"] {
        let (mut c, mut r, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let (cs, rs) = if name == "decode" {
                decode(20, ops / 20)
            } else {
                evict(65536, 1024)
            };
            ratios.extend(cs.iter().zip(&rs).map(|(a, b)| b / a));
            c.extend(cs);
            r.extend(rs);
        }
        if std::env::var_os("BENCH_VERBOSE").is_some() {
            println!("{}: c {:?}\n{}: rust {:?}", name, c, name, r);
        }
        let n = ratios.len();
        let (mc, mr, ratio) = (median(&mut c), median(&mut r), median(&mut ratios));
        let ok = ratio <= 1.05;
        fail |= !ok;
        println!(
            "{:<7} c {:6.1} ns/append  rust {:6.1} ns/append  rust/c {:.3} (median of {} adjacent pairs)  {}",
            name,
            mc,
            mr,
            ratio,
            n,
            if ok { "PASS (within 5%)" } else { "FAIL (above 5%)" }
        );
    }
    std::process::exit(if fail { 1 } else { 0 });
}
