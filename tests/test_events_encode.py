#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""libkvpool-events' encoder: random event batches encoded by
kvp_pub_encode (tests/events_encode_driver) and decoded by python3-msgpack
must be vLLM's KVEventBatch arrays, field for field (the layout llm-d's
vllm_adapter.go and Dynamo decode).

Usage: test_events_encode.py PATH/TO/events_encode_driver [BATCHES]
"""
import random
import subprocess
import sys

try:
    import msgpack
except ImportError:
    print("SKIP: python3-msgpack is not installed")
    sys.exit(77)

INT_HASHES = 1


def hx(s):
    return "-" if s is None else "x" + s.encode().hex()


def rand_text(rng, n=None):
    n = rng.randrange(0, 40) if n is None else n
    return "".join(rng.choice("abcXYZ09-_/é漢") for _ in range(n))


def rand_hash(rng):
    return bytes(rng.randrange(256) for _ in range(32))


def h_out(h, flags):
    return int.from_bytes(h, "big") & (2**64 - 1) if flags & INT_HASHES else h


def make_batch(rng):
    flags = rng.choice([0, INT_HASHES])
    dp = rng.choice([0, 1, 7, -1])
    ts = rng.uniform(0, 2e9)
    medium = rng.choice([None, "CPU", "GPU"])
    default_medium = medium or "GPU"
    words, expect = [], []
    n = rng.randrange(0, 12)
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:
            nh = rng.randrange(0, 20)
            hs = [rand_hash(rng) for _ in range(nh)]
            parent = rand_hash(rng) if rng.random() < 0.7 else None
            bt = rng.choice([1, 16, 32])
            toks = [rng.choice([0, 127, 128, 255, 256, 65535, 65536,
                                2**32 - 1, rng.randrange(2**32)])
                    for _ in range(nh * bt if rng.random() < 0.9 else
                                   rng.randrange(0, 5))]
            lora_id = rng.choice([-1, -1, 0, 3, 2**40])
            lora = rng.choice([None, None, "sql-lora", rand_text(rng)])
            ev_medium = rng.choice([None, "CPU", "DISK"])
            keys = [rand_text(rng) for _ in range(rng.choice([0, 0, 1, 3]))]
            words += ["S", str(nh)] + [h.hex() for h in hs]
            words += [parent.hex() if parent else "-", str(len(toks))]
            words += [str(t) for t in toks]
            words += [str(bt), str(lora_id), hx(lora), hx(ev_medium),
                      str(len(keys))] + [hx(k) for k in keys]
            ev = ["BlockStored", [h_out(h, flags) for h in hs],
                  h_out(parent, flags) if parent else None, toks, bt,
                  lora_id if lora_id >= 0 else None,
                  ev_medium or default_medium, lora]
            if keys:
                ev.append([keys for _ in hs])
            expect.append(ev)
        elif kind < 0.9:
            nh = rng.randrange(0, 20)
            hs = [rand_hash(rng) for _ in range(nh)]
            ev_medium = rng.choice([None, "CPU"])
            words += ["R", str(nh)] + [h.hex() for h in hs] + [hx(ev_medium)]
            expect.append(["BlockRemoved", [h_out(h, flags) for h in hs],
                           ev_medium or default_medium])
        else:
            words += ["C"]
            expect.append(["AllBlocksCleared"])
    head = ["B", str(flags), str(dp), repr(ts), str(n), hx(medium)]
    return " ".join(head + words), [ts, expect, dp]


def main():
    driver = sys.argv[1]
    nbatches = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    rng = random.Random(16)
    reqs, expects = zip(*(make_batch(rng) for _ in range(nbatches)))
    res = subprocess.run([driver], input="\n".join(reqs) + "\n",
                         capture_output=True, text=True, check=False)
    lines = res.stdout.split("\n")
    bad = 0
    for i, exp in enumerate(expects):
        got = msgpack.unpackb(bytes.fromhex(lines[i]), raw=False) \
            if i < len(lines) and lines[i] not in ("", "ERR") else None
        # Equality is strict: a bin hash decodes as bytes (never str), ts
        # as a float, ints as ints.
        if got != exp or (got and not isinstance(got[0], float)):
            bad += 1
            if bad <= 3:
                print("MISMATCH batch %d:\n  got:    %.300r\n  expect: %.300r"
                      % (i, got, exp))
    if res.returncode != 0:
        print("driver exited with %d: %s" % (res.returncode,
                                             res.stderr[-2000:]))
        bad += 1
    print("events encoder: %d batches round-tripped, %d mismatched" %
          (len(expects), bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
