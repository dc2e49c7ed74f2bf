#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Prefix hit rate of a JSON-lines (Mooncake) trace, computed without kvpool.

`kvpool sim --trace FILE --blocks 0` must report the same rate: this script
is the independent check (tests/test_sim.sh compares the two).

The rule: requests are served in timestamp order (stable).  Request i goes
to model i % MODELS; each model has its own cache.  A request's prompt of
L tokens has L // B full pool blocks (B = --block-tokens).  Its cached
tokens are B times the longest prefix of those blocks that requests before
it (of the same model) have committed, capped at (L - 1) // B blocks (the
last token is always computed).  Then all its full blocks are committed.

Block identity: pool block k covers tokens [k*B, (k+1)*B); it holds the
same tokens in two prompts iff both have the same hash ids for every hash
block up to the one holding its last token (hash block j = that token //
U, U = hash_block_tokens, 512 by default), i.e. the same path in a trie of
hash ids, and the same k.  The trie node of depth j stores the highest
block k committed among the blocks ending in hash block j; those blocks
form a contiguous range fixed by j, so "k committed" is "k <= that
maximum".

Prints the hit rate with 6 decimals, then prompt tokens and hit tokens.
"""
import argparse
import json
import sys


def load(path):
    reqs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            r = json.loads(line)
            reqs.append((float(r["timestamp"]), len(reqs), r))
    reqs.sort(key=lambda t: (t[0], t[1]))
    return [r for _, _, r in reqs]


def hit_rate(reqs, block_tokens, models):
    B = block_tokens
    trie = {}  # (parent node, hash id) -> node
    committed = [dict() for _ in range(models)]  # node -> highest block k
    queries = hits = 0
    for i, r in enumerate(reqs):
        U = r.get("hash_block_tokens", 512)
        L = r["input_length"]
        ids = r["hash_ids"]
        done = committed[i % models]
        full = L // B
        limit = min((L - 1) // B, full)
        # Walk the prompt's hash blocks: node of depth j = ids[0..j].
        node, hit, walking = None, 0, True
        for j, h in enumerate(ids):
            key = (node, h)
            if key not in trie:
                trie[key] = len(trie)
            node = trie[key]
            # Pool blocks whose last token lies in hash block j.
            k_lo = -(-(j * U + 1) // B) - 1
            k_hi = ((j + 1) * U) // B - 1
            if walking and k_lo <= k_hi and k_lo < limit:
                top = min(k_hi, limit - 1)
                best = done.get(node, -1)
                if best >= top:
                    hit = top + 1
                else:
                    if best >= k_lo:
                        hit = best + 1
                    walking = False
            # Commit this request's full blocks ending here.
            if k_lo <= k_hi and k_lo < full:
                top = min(k_hi, full - 1)
                if done.get(node, -1) < top:
                    done[node] = top
        queries += L
        hits += hit * B
    return queries, hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--block-tokens", type=int, default=16)
    ap.add_argument("--models", type=int, default=1)
    a = ap.parse_args()
    queries, hits = hit_rate(load(a.trace), a.block_tokens, a.models)
    print("%.6f %d %d" % (hits / queries if queries else 0.0, queries, hits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
