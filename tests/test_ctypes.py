#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Loads libkvpool.so through ctypes and drives a pool through it.

Usage: test_ctypes.py PATH/TO/libkvpool.so
Fails (non-zero exit) if dlopen fails or the calls misbehave.
"""
import ctypes
import sys


class PoolConfig(ctypes.Structure):
    _fields_ = [("num_blocks", ctypes.c_uint32),
                ("block_tokens", ctypes.c_uint32),
                ("cache_blocks", ctypes.c_uint32),
                ("device_id", ctypes.c_int32),
                ("layout", ctypes.c_void_p),
                ("flags", ctypes.c_uint32)]


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.kvp_strerror.restype = ctypes.c_char_p
    lib.kvp_pool_create.argtypes = [ctypes.POINTER(PoolConfig),
                                    ctypes.POINTER(ctypes.c_void_p)]
    lib.kvp_pool_alloc.argtypes = [ctypes.c_void_p, ctypes.c_uint32,
                                   ctypes.POINTER(ctypes.c_uint32)]
    lib.kvp_pool_free.argtypes = [ctypes.c_void_p,
                                  ctypes.POINTER(ctypes.c_uint32),
                                  ctypes.c_uint32]
    lib.kvp_pool_check.argtypes = [ctypes.c_void_p]
    lib.kvp_pool_unref.argtypes = [ctypes.c_void_p]

    cfg = PoolConfig(num_blocks=64, block_tokens=16, device_id=-1)
    pool = ctypes.c_void_p()
    rc = lib.kvp_pool_create(ctypes.byref(cfg), ctypes.byref(pool))
    assert rc == 0, lib.kvp_strerror(rc)
    ids = (ctypes.c_uint32 * 64)()
    assert lib.kvp_pool_alloc(pool, 64, ids) == 0
    assert sorted(ids) == list(range(64)), list(ids)
    one = (ctypes.c_uint32 * 1)()
    rc = lib.kvp_pool_alloc(pool, 1, one)
    assert lib.kvp_strerror(rc) == b"not enough free blocks", rc
    assert lib.kvp_pool_free(pool, ids, 64) == 0
    assert lib.kvp_pool_check(pool) == 0
    lib.kvp_pool_unref(pool)
    print("ctypes: loaded %s, 64 blocks allocated and freed" % sys.argv[1])


if __name__ == "__main__":
    main()
