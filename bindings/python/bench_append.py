#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Per-call cost of the Python binding's append against the C call.

Peers, measured interleaved in the same run (medians of --reps):
  binding   Manager.append(seq): the Python method (one C call each)
  cffi      lib.kvp_seq_append(...) called directly through cffi
  batch     Manager.append_many(seqs): ONE C call appending to all S
            sequences (kvp_seq_append_batch); per sequence this is the C
            append's own cost plus a share of one Python call, so it is
            the C baseline here.
Regimes:
  decode    an ID-only pool with room: S sequences each get 1 token per
            pass (a block every 16th), as bench_seq's decode (sequences
            that reach 2048 tokens are freed and created again).
  evict     a full pool: every block holds an idle cached prefix block, and
            each append adds 16 tokens, so every append allocates a block
            by evicting one (the steady state of a serving engine).
Prints ns per append for each, and binding - batch (the binding's
overhead per call over the C append).

Usage: bench_append.py [--reps N] [--seqs S]
"""
import argparse
import random
import statistics
import time

import kvpool
from kvpool._ffi import ffi, lib

MAX_TOKENS = 2048
PROMPT = 100


def decode_setup(S):
    pool = kvpool.Pool(num_blocks=S * (MAX_TOKENS // 16 + 2),
                       block_tokens=16)
    m = kvpool.Manager(pool)
    ntok = []
    for j in range(S):
        n = PROMPT + j * (MAX_TOKENS - PROMPT) // S
        m.create(j + 1, n)
        ntok.append(n)
    return pool, m, ntok


def recycle(m, ntok, add):
    for j, n in enumerate(ntok):
        n += add
        if n >= MAX_TOKENS:
            m.free(j + 1)
            m.create(j + 1, PROMPT)
            n = PROMPT
        ntok[j] = n


def pass_binding(m, ids, tokens):
    ap = m.append
    t0 = time.perf_counter_ns()
    for i in ids:
        ap(i, tokens)
    return time.perf_counter_ns() - t0


def pass_cffi(m, ids, tokens):
    cow = ffi.new("struct kvp_copy[1]")
    ncow = ffi.new("uint32_t *")
    ap, mm = lib.kvp_seq_append, m._m
    t0 = time.perf_counter_ns()
    for i in ids:
        if ap(mm, i, tokens, cow, 1, ncow):
            raise RuntimeError("append failed")
    return time.perf_counter_ns() - t0


def pass_batch(m, ids, tokens):
    counts = None if tokens == 1 else [tokens] * len(ids)
    t0 = time.perf_counter_ns()
    m.append_many(ids, counts)
    return time.perf_counter_ns() - t0


PEERS = {"binding": pass_binding, "cffi": pass_cffi, "batch": pass_batch}


def bench_decode(S, reps, passes):
    res = {p: [] for p in PEERS}
    pool, m, ntok = decode_setup(S)
    ids = list(range(1, S + 1))
    for _ in range(reps):
        for name, fn in PEERS.items():
            ns = 0
            for _ in range(passes):
                ns += fn(m, ids, 1)
                recycle(m, ntok, 1)
            res[name].append(ns / (passes * S))
    m.check()
    m.close()
    pool.close()
    return res


def evict_setup(S, passes, rng):
    blocks = S * passes
    pool = kvpool.Pool(num_blocks=blocks, block_tokens=16)
    m = kvpool.Manager(pool, prefix_cache=True)
    per = 64
    for j in range(blocks // per):
        toks = [rng.randrange(32000) for _ in range(per * 16)]
        h = kvpool.hash_blocks(toks, 16)
        with m.create(10**9 + j, per * 16) as s:
            s.commit(h)
    kvpool.thread_flush()
    st = pool.stats()
    assert st.evictable == blocks, st
    for j in range(S):
        m.create(j + 1, 0)
    return pool, m


def bench_evict(S, reps, passes):
    rng = random.Random(3)
    res = {p: [] for p in PEERS}
    ids = list(range(1, S + 1))
    for _ in range(reps):
        for name, fn in PEERS.items():
            pool, m = evict_setup(S, passes, rng)
            before = pool.stats().cache_evictions
            ns = sum(fn(m, ids, 16) for _ in range(passes))
            ev = pool.stats().cache_evictions - before
            assert ev >= S * passes * 0.9, (ev, S * passes)
            res[name].append(ns / (passes * S))
            m.close()
            pool.close()
    return res


def report(title, res):
    med = {k: statistics.median(v) for k, v in res.items()}
    print("%s (ns per append, median of %d):" % (title, len(res["batch"])))
    for k, v in med.items():
        print("  %-8s %8.1f   x%.2f of batch" % (k, v, v / med["batch"]))
    print("  binding overhead over the C append: %.1f ns per call"
          % (med["binding"] - med["batch"]))
    return med


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--seqs", type=int, default=1024)
    a = ap.parse_args()
    report("decode, %d sequences" % a.seqs, bench_decode(a.seqs, a.reps, 20))
    report("evict (full pool of idle cached blocks), %d sequences" % a.seqs,
           bench_evict(a.seqs, a.reps, 4))


if __name__ == "__main__":
    main()
