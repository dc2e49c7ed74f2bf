#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A toy continuous-batching scheduler over kvpool, with prefix reuse.

Requests share a few system prompts.  Each step the scheduler admits
waiting requests while the pool has room (reusing cached prompt blocks),
"prefills" them (registers their prompt blocks in the prefix cache),
appends one decode token to every running sequence in one batched call,
builds the block table an attention kernel would take, and retires the
finished requests.  When the pool runs out of blocks it preempts the
longest-running request and queues it again.

Run with PYTHONPATH=bindings/python (or an installed kvpool).
"""
import collections
import random

import kvpool

BLOCK = 16
MAX_BATCH = 32


def make_requests(n, rng):
    systems = [[rng.randrange(32000) for _ in range(BLOCK * k)]
               for k in (4, 8, 12)]
    reqs = []
    for rid in range(1, n + 1):
        prompt = rng.choice(systems) + [rng.randrange(32000)
                                        for _ in range(rng.randrange(1, 40))]
        reqs.append((rid, prompt, rng.randrange(8, 64)))
    return reqs


def main():
    rng = random.Random(1)
    waiting = collections.deque(make_requests(200, rng))
    running = {}  # id -> [prompt, tokens left to generate]
    steps = generated = preempted = 0
    with kvpool.Pool(num_blocks=96, block_tokens=BLOCK) as pool, \
            kvpool.Manager(pool, policy="longest", prefix_cache=True) as m:
        while waiting or running:
            # Admission: reuse cached prefix blocks, allocate the rest.
            while waiting and len(running) < MAX_BATCH:
                rid, prompt, out = waiting[0]
                if m.admit(len(prompt)) != kvpool.ADMIT_OK:
                    break
                hashes = kvpool.hash_blocks(prompt, BLOCK)
                try:
                    seq = m.create_cached(rid, hashes, len(prompt))
                except kvpool.NoSpace:
                    break
                waiting.popleft()
                seq.commit(hashes)  # prefill done: share these blocks
                running[rid] = [prompt, out]
            # Decode: one token for every running request, one C call.
            ids = list(running)
            try:
                m.append_many(ids)
            except kvpool.NoSpace as e:
                # Preempt the longest sequence; it will be recomputed.
                victim = m.evict()
                ids = [i for i in ids[:e.done] if i != victim]
                prompt, out = running.pop(victim)
                waiting.appendleft((victim, prompt, out))
                preempted += 1
            m.block_table(ids)  # what the attention kernel would take
            steps += 1
            for rid in ids:
                if rid not in running:
                    continue
                generated += 1
                running[rid][1] -= 1
                if running[rid][1] == 0:
                    m.free(rid)
                    del running[rid]
        st = m.stats()
        m.check()
    print("scheduler: %d steps, %d tokens generated, %d preemptions, "
          "prefix hit rate %.2f" % (steps, generated, preempted,
                                    st.prefix_hit_rate))
    assert st.prefix_hit_rate > 0.3, st


if __name__ == "__main__":
    main()
