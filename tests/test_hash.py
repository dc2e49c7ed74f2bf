#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks kvp_hash_blocks (SHA-256) against an independent implementation
of the encoding documented in lib/hash.c, with Python's hashlib.

Usage: test_hash.py PATH/TO/libkvpool.so
"""
import ctypes
import hashlib
import struct
import sys

DOMAIN = b"kvpool-block-hash/1"
TAG_ROOT, TAG_PARENT, TAG_SALT, TAG_LORA, TAG_TOKENS = 1, 2, 3, 4, 5


def field(tag, data):
    return bytes([tag]) + struct.pack("<Q", len(data)) + data


def reference(parent, salt, lora, tokens, block_tokens):
    out = []
    prev = parent
    for i in range(len(tokens) // block_tokens):
        block = tokens[i * block_tokens:(i + 1) * block_tokens]
        msg = DOMAIN
        if prev is None:
            msg += field(TAG_ROOT, b"")
            if salt:
                msg += field(TAG_SALT, salt)
        else:
            msg += field(TAG_PARENT, prev)
        if lora:
            msg += field(TAG_LORA, lora.encode())
        msg += field(TAG_TOKENS, struct.pack("<%dI" % len(block), *block))
        prev = hashlib.sha256(msg).digest()
        out.append(prev)
    return out


class Keys(ctypes.Structure):
    _fields_ = [("salt", ctypes.c_char_p), ("salt_len", ctypes.c_size_t),
                ("lora", ctypes.c_char_p)]


def main():
    lib = ctypes.CDLL(sys.argv[1])
    Hash = ctypes.c_uint8 * 32
    lib.kvp_hash_blocks.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32, ctypes.c_uint32,
        ctypes.c_void_p]
    tokens = [(i * 2654435761) & 0xFFFFFFFF for i in range(3 * 16 + 7)]
    arr = (ctypes.c_uint32 * len(tokens))(*tokens)
    cases = [(None, None), (b"tenant-7", None), (None, "sql"),
             (b"a\x00b", "lora/x")]
    for salt, lora in cases:
        keys = Keys(salt, len(salt) if salt else 0,
                    lora.encode() if lora else None)
        out = (Hash * 3)()
        n = lib.kvp_hash_blocks(0, None, ctypes.byref(keys), arr,
                                len(tokens), 16, out)
        assert n == 3, n
        want = reference(None, salt, lora, tokens, 16)
        got = [bytes(h) for h in out]
        assert got == want, (salt, lora, [g.hex() for g in got],
                             [w.hex() for w in want])
        # Continue from block 0's hash: the same as the chain's tail.
        parent = Hash(*want[0])
        tail = (Hash * 2)()
        n = lib.kvp_hash_blocks(0, ctypes.byref(parent), ctypes.byref(keys),
                                ctypes.cast(ctypes.byref(arr, 16 * 4),
                                            ctypes.POINTER(ctypes.c_uint32)),
                                len(tokens) - 16, 16, tail)
        assert n == 2 and [bytes(h) for h in tail] == want[1:], salt
    print("test_hash: %d cases match hashlib's SHA-256 of the encoding"
          % len(cases))


if __name__ == "__main__":
    main()
