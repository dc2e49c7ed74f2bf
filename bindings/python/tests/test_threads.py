# SPDX-License-Identifier: MIT
"""Four Python threads drive one prefix-caching manager at once: create
(plain and cached), append (one by one and batched), fork (of their own
sequences and of shared ones another thread frees and re-creates), commit
and free.  At the end the counters must add up to the calls that
succeeded, nothing may be left in use, and kvp_manager_check must pass.

Usage: test_threads.py [ITERATIONS]
"""
import random
import sys
import threading

import kvpool

THREADS = 4
SHARED = 8  # shared sequences: ids 1..SHARED, forked by all, freed by one


def worker(tid, m, iters, prompts, counts, errors, barrier, shared_live):
    rng = random.Random(tid)
    base = (tid + 1) << 32
    live = []
    nxt = 0
    c = dict(creates=0, forks=0, frees=0, appends=0, cow=0, shared_miss=0)
    barrier.wait()
    try:
        for _ in range(iters):
            op = rng.random()
            if len(live) > 24:
                op = 0.95  # keep the pool's use bounded: free one
            if op < 0.25 or not live:
                sid = base + nxt
                nxt += 1
                try:
                    if rng.random() < 0.5:
                        h = prompts[rng.randrange(len(prompts))]
                        s = m.create_cached(sid, h, len(h) * 16 + 3)
                        s.commit(h)
                    else:
                        m.create(sid, rng.randrange(1, 100))
                    c["creates"] += 1
                    live.append(sid)
                except kvpool.NoSpace:
                    pass
            elif op < 0.55:
                sid = live[rng.randrange(len(live))]
                try:
                    if m.append(sid, rng.randrange(1, 20)) is not None:
                        c["cow"] += 1
                    c["appends"] += 1
                except kvpool.NoSpace:
                    pass
            elif op < 0.65:
                try:
                    copies = m.append_many(live)
                    c["appends"] += len(live)
                    c["cow"] += len(copies)
                except kvpool.NoSpace as e:
                    c["appends"] += e.done
                    c["cow"] += len(e.copies)
            elif op < 0.8:
                shared = rng.random() < 0.5
                src = (rng.randrange(1, SHARED + 1) if shared
                       else live[rng.randrange(len(live))])
                dst = base + nxt
                nxt += 1
                try:
                    m.fork(src, dst)
                    c["forks"] += 1
                    live.append(dst)
                except kvpool.NotFound:
                    # fork racing the free of a shared source: all or
                    # nothing, never a half fork
                    if not shared:
                        raise
                    c["shared_miss"] += 1
            elif tid == 0 and op < 0.9:
                # thread 0 frees and re-creates the shared sequences
                sid = rng.randrange(1, SHARED + 1)
                if sid in shared_live:
                    m.free(sid)
                    shared_live.discard(sid)
                    c["frees"] += 1
                try:
                    m.create(sid, 40)
                    shared_live.add(sid)
                    c["creates"] += 1
                except kvpool.NoSpace:
                    pass
            else:
                sid = live.pop(rng.randrange(len(live)))
                m.free(sid)
                c["frees"] += 1
        for sid in live:
            m.free(sid)
            c["frees"] += 1
        counts[tid] = c
    except BaseException as e:  # reported by the main thread
        errors.append((tid, e))
    finally:
        # Thread.join() returns before the thread's C-level exit (where
        # the library returns its cached blocks and parked references):
        # hand them back now, so that the checks after join() run on a
        # quiescent pool.
        kvpool.thread_flush()


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    pool = kvpool.Pool(num_blocks=1024, block_tokens=16)
    m = kvpool.Manager(pool, prefix_cache=True)
    stored = [0]
    removed = [0]
    lock = threading.Lock()
    callers = set()

    def on_event(ev):
        with lock:
            callers.add(threading.get_ident())
            if ev.type == "stored":
                stored[0] += len(ev.hashes)
            elif ev.type == "removed":
                removed[0] += len(ev.hashes)

    m.set_event_callback(on_event)
    rng = random.Random(7)
    prompts = [kvpool.hash_blocks([rng.randrange(32000) for _ in range(256)],
                                  16) for _ in range(64)]
    for sid in range(1, SHARED + 1):
        m.create(sid, 40)
    shared_live = set(range(1, SHARED + 1))  # thread 0's only
    counts = [None] * THREADS
    errors = []
    barrier = threading.Barrier(THREADS)
    threads = [threading.Thread(target=worker,
                                args=(t, m, iters, prompts, counts, errors,
                                      barrier, shared_live))
               for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("thread %d failed: %r" % errors[0])
    tot = {k: sum(c[k] for c in counts) for k in counts[0]}
    for sid in shared_live:
        m.free(sid)
    st = m.stats()
    creates = tot["creates"] + SHARED
    frees = tot["frees"] + len(shared_live)
    assert st.seq_creates == creates, (st.seq_creates, creates)
    assert st.forks == tot["forks"], (st.forks, tot)
    assert st.seq_frees == frees == creates + tot["forks"], (st, tot)
    assert st.appends == tot["appends"], (st.appends, tot)
    assert st.cow_copies == tot["cow"], (st.cow_copies, tot)
    assert st.sequences == 0 and st.tokens == 0, st
    assert st.prefix_commits == stored[0], (st.prefix_commits, stored)
    assert st.prefix_evictions == removed[0], (st.prefix_evictions, removed)
    m.check()
    ps = pool.stats()
    assert ps.used == 0, ps
    assert ps.total == ps.free, ps
    pool.check()
    assert tot["forks"] > 0 and tot["shared_miss"] >= 0 and stored[0] > 0
    m.set_event_callback(None)
    m.close()
    pool.close()
    print("threads: %d threads x %d ops: %d creates, %d forks (%d raced a "
          "free), %d appends, %d copies, %d blocks cached, %d evicted, "
          "events from %d threads; invariants hold"
          % (THREADS, iters, creates, tot["forks"], tot["shared_miss"],
             tot["appends"], tot["cow"], stored[0], removed[0],
             len(callers)))


if __name__ == "__main__":
    main()
