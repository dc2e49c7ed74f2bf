#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks KVP_HASH_SHA256_CBOR against vLLM's sha256_cbor computed
independently here with cbor2 (canonical=True) and hashlib, on random
blocks, chains, seeds, LoRA names, salts and extra keys.

Usage: test_cbor_hash.py PATH/TO/cbor_hash_driver [CASES]
Exit 0 when every case agrees, 1 on any divergence, 77 without cbor2.
"""
import hashlib
import random
import subprocess
import sys

try:
    import cbor2
except ImportError:
    print("SKIP: python3-cbor2 is not installed")
    sys.exit(77)


def sha256_cbor(obj):
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def none_hash(seed):
    # vLLM init_none_hash: hash_fn(PYTHONHASHSEED) for sha256_cbor
    return sha256_cbor(seed)


def hash_block_tokens(parent, tokens, extra):
    # vLLM hash_block_tokens: hash_fn((parent, tuple(tokens), extra_keys))
    return sha256_cbor((parent, tuple(tokens), extra))


def to_u64(h):
    # vLLM maybe_convert_block_hash with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
    return int.from_bytes(h, byteorder="big") & ((1 << 64) - 1)


EDGES = [0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1]
ALPHABET = "abcXYZ019 _-/@é漢🙂"


def rand_token(rng):
    r = rng.random()
    if r < 0.2:
        return rng.choice(EDGES)
    if r < 0.6:
        return rng.randrange(0, 152064)  # a vocabulary's range
    return rng.randrange(0, 2**32)


def rand_text(rng):
    n = rng.choice([0, 1, 5, 22, 23, 24, 30, 255, 256, rng.randrange(0, 80)])
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def hx(s):
    return "-" if s is None else "x" + s.encode().hex()


def main():
    driver = sys.argv[1]
    ncases = int(sys.argv[2]) if len(sys.argv) > 2 else 12000
    rng = random.Random(20261125)
    reqs, expect = [], []
    for _ in range(ncases):
        kind = rng.random()
        if kind < 0.05:
            seed = rand_text(rng) if rng.random() < 0.8 else str(
                rng.randrange(0, 2**32))
            reqs.append("R %s" % hx(seed))
            expect.append(none_hash(seed).hex())
        elif kind < 0.75:
            parent = bytes(rng.randrange(256) for _ in range(32))
            n = rng.choice([0, 1, 16, 23, 24, 32, rng.randrange(0, 300)])
            toks = [rand_token(rng) for _ in range(n)]
            keys = [rand_text(rng) for _ in range(rng.choice([0, 0, 1, 2, 3]))]
            extra = tuple(keys) if keys else None
            h = hash_block_tokens(parent, toks, extra)
            reqs.append("B %s %d %s %d %s" % (
                parent.hex(), n, " ".join(map(str, toks)), len(keys),
                " ".join(hx(k) for k in keys)))
            expect.append("%s %d" % (h.hex(), to_u64(h)))
        else:
            seed = rng.choice(["0", "42", "", rand_text(rng)])
            bt = rng.choice([1, 2, 16, 16, 32, rng.randrange(1, 40)])
            lora = rng.choice([None, None, "", "sql-lora", rand_text(rng)])
            salt = rng.choice([None, None, "tenant-a", rand_text(rng)])
            if salt == "":
                salt = None
            n = rng.randrange(0, bt * 6 + 1)
            toks = [rand_token(rng) for _ in range(n)]
            parent, out = none_hash(seed), []
            for i in range(n // bt):
                extra = []
                if lora:
                    extra.append(lora)
                if i == 0 and salt:
                    extra.append(salt)
                parent = hash_block_tokens(parent, toks[i * bt:(i + 1) * bt],
                                           tuple(extra) if extra else None)
                out.append(parent.hex())
            reqs.append("C %s %d %s %s %d %s" % (
                hx(seed), bt, hx(lora) if lora else "-", hx(salt), n,
                " ".join(map(str, toks))))
            expect.append(" ".join(out))
    res = subprocess.run([driver], input="\n".join(reqs) + "\n",
                         capture_output=True, text=True, check=False)
    got = res.stdout.split("\n")
    bad = 0
    for i, (req, exp) in enumerate(zip(reqs, expect)):
        g = got[i] if i < len(got) else "<missing>"
        if g != exp:
            bad += 1
            if bad <= 5:
                print("DIVERGENCE case %d: %s\n  C:  %s\n  py: %s" %
                      (i, req[:200], g[:200], exp[:200]))
    if res.returncode != 0:
        print("driver exited with %d: %s" % (res.returncode, res.stderr))
        bad += 1
    print("cbor hash: %d cases, %d divergent" % (len(reqs), bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
