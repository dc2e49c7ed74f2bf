# SPDX-License-Identifier: MIT
"""The package as a newcomer meets it (issue 41): closed handles raise one
clear error, bad arguments name themselves, the C API an engine needs is
reachable (event fields, commit with token ids, the sha256_cbor seed),
and every public kvp_ function has a Python counterpart or is listed
here as C-only with a reason."""
import os
import re
import threading
import time
import unittest

import kvpool
from kvpool._ffi import CDEF, lib

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                      os.pardir, os.pardir, "include", "kvpool.h")


class TestClosed(unittest.TestCase):
    """Every call on a closed handle raises Closed, "X is closed" (a
    closed Pool's stats() were zeros, other calls "create: invalid
    argument")."""

    def assertClosed(self, what, fn, *args, **kw):
        with self.assertRaises(kvpool.Closed, msg=repr(fn)) as cm:
            fn(*args, **kw)
        self.assertIn("%s is closed" % what, str(cm.exception))
        self.assertIsInstance(cm.exception, kvpool.InvalidArgument)

    def test_pool(self):
        p = kvpool.Pool(8)
        p.close()
        p.close()  # twice is fine
        self.assertTrue(p.closed)
        for fn, args in [(p.stats, ()), (p.alloc, (1,)), (p.free, ([0],)),
                         (p.ref, (0,)), (p.refcount, (0,)),
                         (p.block_data, (0,)), (p.check, ()),
                         (p.metrics, ())]:
            self.assertClosed("Pool", fn, *args)
        for prop in ("config", "num_blocks", "block_tokens", "block_bytes",
                     "row_bytes", "layout", "k_only", "device_id"):
            self.assertClosed("Pool", getattr, p, prop)
        self.assertClosed("Pool", kvpool.Manager, p)

    def test_manager(self):
        h = kvpool.hash_blocks(list(range(32)), 16)
        with kvpool.Pool(64) as p:
            m = kvpool.Manager(p, prefix_cache=True)
            m.create(1, 10)
            m.close()
            self.assertTrue(m.closed)
            calls = [(m.stats, ()), (m.create, (2,)), (m.append, (1,)),
                     (m.append_ex, (1,)), (m.append_many, ([1],)),
                     (m.reserve, (1, 10)), (m.fork, (1, 2)), (m.free, (1,)),
                     (m.truncate, (1, 0)), (m.stream_trim, (1, 0, 0)),
                     (m.set_priority, (1, 1)), (m.info, (1,)),
                     (m.blocks, (1,)), (m.sequences, ()), (m.admit, (1,)),
                     (m.evict, ()), (m.peek_victim, ()),
                     (m.evict_until, ()), (m.check, ()),
                     (m.prefix_reset, ()), (m.prefix_match, (h,)),
                     (m.create_cached, (3, h, 32)), (m.commit, (1, h)),
                     (m.commit_retained, (1, h, [(0, 0, 1)])),
                     (m.tick, ()), (m.retention, (h[0],)),
                     (m.set_policy, ("lfu",)),
                     (m.set_event_callback, (None,)),
                     (m.set_event_medium, ("GPU",)),
                     (m.block_table, ([1],)), (m.csr, ([1],)),
                     (m.slot_mapping, (1,)), (m.read, (1, 0, 0)),
                     (m.write, (1, 0, 0, b"")), (m.gather, (1, 0)),
                     (p.metrics, ([m],))]
            for fn, args in calls:
                self.assertClosed("Manager", fn, *args)
            for prop in ("policy", "eviction_threshold", "watermark", "id",
                         "name"):
                self.assertClosed("Manager", getattr, m, prop)
            # A sequence handle's with block ends quietly.
            with m.sequence(1):
                pass
            self.assertEqual(p.stats().used, 0)

    def test_close_waits_for_calls_in_flight(self):
        # A commit whose STORED callback blocks is a call in flight:
        # close() from another thread must wait for it (the call then
        # returns normally), and the calls after it raise Closed.  It
        # made the call fail with "unknown sequence" (a use after free).
        pool = kvpool.Pool(64)
        m = kvpool.Manager(pool, prefix_cache=True)
        h = kvpool.hash_blocks(list(range(32)), 16)
        m.create(1, 32)
        inside, release = threading.Event(), threading.Event()

        def cb(ev):
            inside.set()
            release.wait(10)
        m.set_event_callback(cb)
        result = {}

        def committer():
            try:
                result["commit"] = m.commit(1, h)
            except Exception as e:  # noqa: BLE001 - checked below
                result["commit"] = e
        t = threading.Thread(target=committer)
        t.start()
        self.assertTrue(inside.wait(10))
        closer = threading.Thread(target=m.close)
        closer.start()
        time.sleep(0.1)
        self.assertTrue(closer.is_alive(), "close() did not wait")
        with self.assertRaises(kvpool.Closed):
            m.info(1)  # a new call after close() began
        release.set()
        t.join(10)
        closer.join(10)
        self.assertFalse(closer.is_alive())
        self.assertEqual(result["commit"], 2)
        self.assertEqual(pool.stats().used, 0)  # close() freed seq 1
        pool.close()

    def test_closed_pool_manager_keeps_working(self):
        # The manager holds its own pool reference: closing the Pool
        # object leaves it whole, data calls included.
        lay = kvpool.Layout(1, 1, 4)
        p = kvpool.Pool(8, block_tokens=4, layout=lay)
        m = kvpool.Manager(p)
        p.close()
        m.create(1, 4)
        m.write(1, 0, 0, bytes(16), bytes(16))
        self.assertEqual(m.read(1, 0, 0), (bytearray(16), bytearray(16)))
        m.close()


class TestArguments(unittest.TestCase):
    """A bad argument's message names it and its range; a wrong type is a
    TypeError naming the parameter, not cffi's internals."""

    def setUp(self):
        self.pool = kvpool.Pool(64)
        self.m = kvpool.Manager(self.pool)

    def tearDown(self):
        self.m.close()
        self.pool.close()

    def raises(self, exc, words, fn, *args, **kw):
        with self.assertRaises(exc) as cm:
            fn(*args, **kw)
        for w in words:
            self.assertIn(w, str(cm.exception))
        return cm.exception

    def test_manager_values(self):
        p = self.pool
        self.raises(kvpool.InvalidArgument,
                    ["Manager", "eviction_threshold", "[0, 1]", "2.0"],
                    kvpool.Manager, p, eviction_threshold=2.0)
        self.raises(kvpool.InvalidArgument, ["watermark", "[0, 1)", "-1"],
                    kvpool.Manager, p, watermark=-1)
        self.raises(kvpool.InvalidArgument, ["watermark", "[0, 1)"],
                    kvpool.Manager, p, watermark=1.0)
        self.raises(kvpool.InvalidArgument, ["eviction_threshold"],
                    kvpool.Manager, p, eviction_threshold=float("nan"))
        for bad in ("a\nb", "", "x" * 64, "a\0b"):
            self.raises(kvpool.InvalidArgument,
                        ["name", "1 to 63 bytes", "control characters"],
                        kvpool.Manager, p, name=bad)
        self.raises(kvpool.InvalidArgument, ["max_pinned", "[0, 64]"],
                    kvpool.Manager, p, max_pinned=65)
        self.raises(kvpool.InvalidArgument, ["policy", "lru"],
                    kvpool.Manager, p, policy="fifo")

    def test_pool_values(self):
        self.raises(kvpool.InvalidArgument, ["block_tokens", "at least 1"],
                    kvpool.Pool, 8, block_tokens=0)
        self.raises(kvpool.InvalidArgument, ["num_blocks", "2147483648"],
                    kvpool.Pool, 2**31 + 1)
        self.raises(kvpool.InvalidArgument, ["cache_blocks", "[0, 8]"],
                    kvpool.Pool, 8, cache_blocks=9)
        self.raises(kvpool.InvalidArgument, ["k_only", "layout"],
                    kvpool.Pool, 8, k_only=True)
        self.raises(kvpool.InvalidArgument, ["layout.dtype", "f32"],
                    kvpool.Pool, 8, layout=kvpool.Layout(1, 1, 1, "f7"))
        self.raises(kvpool.InvalidArgument, ["layout.head_dim"],
                    kvpool.Pool, 8, layout=kvpool.Layout(1, 1, 0))

    def test_types(self):
        m = self.m
        self.raises(TypeError, ["Manager", "pool", "kvpool.Pool", "str"],
                    kvpool.Manager, "pool")
        self.raises(TypeError, ["name", "str", "bytes"],
                    kvpool.Manager, self.pool, name=b"x")
        self.raises(TypeError, ["eviction_threshold", "number", "str"],
                    kvpool.Manager, self.pool, eviction_threshold="0.5")
        self.raises(TypeError, ["hash_blocks", "salt", "bytes-like", "str"],
                    kvpool.hash_blocks, list(range(16)), 16, salt="abc")
        self.raises(TypeError, ["hash_blocks", "lora", "str", "bytes"],
                    kvpool.hash_blocks, list(range(16)), 16, lora=b"x")
        self.raises(TypeError, ["hash_blocks", "tokens[1]", "int", "str"],
                    kvpool.hash_blocks, [1, "x"], 16)
        self.raises(TypeError, ["Pool", "num_blocks", "int", "str"],
                    kvpool.Pool, "8")
        self.raises(TypeError, ["create", "seq", "int", "str"],
                    m.create, "1")
        self.raises(OverflowError, ["create", "seq=-1", "18446744073709551615"],
                    m.create, -1)
        m.create(1)
        self.raises(TypeError, ["append", "num_tokens", "int", "str"],
                    m.append, 1, "x")
        self.raises(OverflowError, ["append_ex", "num_tokens=4294967296"],
                    m.append_ex, 1, 2**32)
        self.raises(TypeError, ["fork", "dst", "int", "float"],
                    m.fork, 1, 2.5)
        self.raises(TypeError, ["block_table", "seqs", "str"],
                    m.block_table, "12")
        self.raises(TypeError, ["commit", "hashes", "32-byte"],
                    m.commit, 1, [1, 2])
        self.raises(TypeError, ["retention", "block_hash", "NoneType"],
                    m.retention, None)
        self.raises(TypeError, ["set_event_callback", "callable"],
                    m.set_event_callback, 5)
        self.raises(TypeError, ["commit_retained", "ranges[0]"],
                    m.commit_retained, 1, [], ["x"])

    def test_data_types(self):
        lay = kvpool.Layout(1, 1, 4)
        with kvpool.Pool(8, block_tokens=4, layout=lay) as p, \
                kvpool.Manager(p) as m:
            m.create(1, 4)
            self.raises(TypeError, ["write", "k", "bytes-like", "str"],
                        m.write, 1, 0, 0, "k" * 16, bytes(16))
            self.raises(TypeError, ["write", "v", "bytes-like", "int"],
                        m.write, 1, 0, 0, bytes(16), 5)


class TestEngineAPI(unittest.TestCase):
    """What vLLM's prefix-caching scenarios need (issue 41): events with
    token ids and LoRA, a commit that gives them, the event medium, the
    sha256_cbor seed."""

    def test_commit_with_tokens_and_lora(self):
        events = []
        prompt = list(range(100, 148))
        h = kvpool.hash_blocks(prompt, 16, lora="ada")
        with kvpool.Pool(64) as p, \
                kvpool.Manager(p, prefix_cache=True) as m:
            m.set_event_medium("GPU")
            m.set_event_callback(events.append)
            m.create(1, 48)
            self.assertEqual(m.commit(1, h, tokens=prompt, lora_name="ada",
                                      lora_id=7, extra_keys=["mm:1"]), 3)
            m.create(2, 32)
            h2 = kvpool.hash_blocks(list(range(32)), 16)
            self.assertEqual(m.commit(2, h2), 2)
        ev = events[0]
        self.assertEqual((ev.type, ev.hashes, ev.parent), ("stored",
                                                            list(h), None))
        self.assertEqual(ev.token_ids, prompt)
        self.assertEqual((ev.lora_name, ev.lora_id, ev.extra_keys),
                         ("ada", 7, ("mm:1",)))
        self.assertEqual((ev.medium, ev.priority, ev.seq), ("GPU", 0, 0))
        ev = events[1]
        self.assertEqual((ev.token_ids, ev.lora_name, ev.lora_id,
                          ev.extra_keys, ev.seq), (None, None, None, (), 1))
        with kvpool.Pool(64) as p, \
                kvpool.Manager(p, prefix_cache=True) as m:
            m.create(1, 48)
            with self.assertRaises(kvpool.InvalidArgument):
                m.commit(1, h, tokens=prompt[:20])  # fewer than the blocks
            self.assertEqual(m.stats().prefix_cached_blocks, 0)
            self.assertEqual(m.commit(1, h, ranges=[(0, 0, 9)]), 3)
            self.assertEqual(m.retention(h[0]), (9, 0))
            self.raises_medium(m)

    def raises_medium(self, m):
        with self.assertRaises(kvpool.InvalidArgument) as cm:
            m.set_event_medium("x" * 16)
        self.assertIn("at most 15 bytes", str(cm.exception))
        m.set_event_medium(None)

    def test_cbor_seed(self):
        tokens = list(range(32))
        root = kvpool.cbor_seed_root("0")
        self.assertEqual(len(root), 32)
        kvpool.set_cbor_seed("0")
        h = kvpool.hash_blocks(tokens, 16, algo="sha256_cbor")
        self.assertEqual(h[0], kvpool.hash_cbor_block(root, tokens[:16]))
        self.assertEqual(h[1], kvpool.hash_cbor_block(h[0], tokens[16:]))
        kvpool.set_cbor_seed("1")
        self.assertNotEqual(
            kvpool.hash_blocks(tokens, 16, algo="sha256_cbor")[0], h[0])
        kvpool.set_cbor_seed("0")
        self.assertEqual(kvpool.hash_blocks(tokens, 16, algo="sha256_cbor"),
                         h)
        self.assertEqual(kvpool.hash_to_u64(h[0]),
                         int.from_bytes(h[0], "big") & (2**64 - 1))
        with self.assertRaises(TypeError):
            kvpool.set_cbor_seed(0)


#: C functions of kvpool.h and the Python that reaches them, or "C-only:"
#: and why not.
COVERAGE = {
    "kvp_strerror": "strerror",
    "kvp_last_error": "NoSpace.requested",
    "kvp_conf_write": "C-only: it writes to a C FILE *; `kvpool conf` "
                      "prints the same",
    "kvp_pool_create": "Pool",
    "kvp_pool_ref": "C-only: a Pool object holds one reference, and each "
                    "Manager takes its own",
    "kvp_pool_unref": "Pool.close",
    "kvp_pool_alloc": "Pool.alloc",
    "kvp_pool_free": "Pool.free",
    "kvp_block_ref": "Pool.ref",
    "kvp_block_refcount": "Pool.refcount",
    "kvp_block_data": "Pool.block_data",
    "kvp_block_bytes": "Pool.block_bytes",
    "kvp_pool_block_tokens": "Pool.block_tokens",
    "kvp_pool_get_config": "Pool.config",
    "kvp_pool_stats": "Pool.stats",
    "kvp_pool_check": "Pool.check",
    "kvp_pool_row_bytes": "Pool.row_bytes",
    "kvp_thread_flush": "thread_flush",
    "kvp_manager_create": "Manager",
    "kvp_manager_destroy": "Manager.close",
    "kvp_manager_get_config": "Manager.policy",
    "kvp_manager_set_policy": "Manager.set_policy",
    "kvp_manager_seqs": "Manager.sequences",
    "kvp_seq_create": "Manager.create",
    "kvp_seq_append": "Manager.append",
    "kvp_seq_append_ex": "Manager.append_ex",
    "kvp_seq_reserve": "Manager.reserve",
    "kvp_seq_append_batch": "Manager.append_many",
    "kvp_seq_fork": "Manager.fork",
    "kvp_seq_fork_n": "Manager.fork_n",
    "kvp_seq_free": "Manager.free",
    "kvp_seq_truncate": "Manager.truncate",
    "kvp_seq_stream_trim": "Manager.stream_trim",
    "kvp_seq_set_priority": "Manager.set_priority",
    "kvp_seq_info": "Manager.info",
    "kvp_seq_blocks": "Manager.blocks",
    "kvp_admit": "Manager.admit",
    "kvp_evict": "Manager.evict",
    "kvp_evict_peek": "Manager.peek_victim",
    "kvp_evict_until": "Manager.evict_until",
    "kvp_manager_stats": "Manager.stats",
    "kvp_stats_add": "C-only: Stats are dataclasses; a caller adds their "
                     "fields in Python",
    "kvp_manager_dump": "C-only: it writes to a C FILE *; Manager.stats() "
                        "and Pool.metrics() give the same numbers",
    "kvp_manager_id": "Manager.id",
    "kvp_manager_name": "Manager.name",
    "kvp_manager_check": "Manager.check",
    "kvp_export_block_table": "Manager.block_table",
    "kvp_export_csr": "Manager.csr",
    "kvp_export_slot_mapping": "Manager.slot_mapping",
    "kvp_hash_blocks": "C-only: the form without a capacity; hash_blocks "
                       "calls kvp_hash_blocks_cap",
    "kvp_hash_blocks_cap": "hash_blocks",
    "kvp_hash_set_xxh3_seed": "set_xxh3_seed",
    "kvp_hash_set_cbor_seed": "set_cbor_seed",
    "kvp_hash_cbor_seed_root": "cbor_seed_root",
    "kvp_hash_cbor_block": "hash_cbor_block",
    "kvp_hash_to_u64": "hash_to_u64",
    "kvp_seq_create_cached": "Manager.create_cached",
    "kvp_prefix_match": "Manager.prefix_match",
    "kvp_seq_commit": "Manager.commit",
    "kvp_seq_commit_ex": "Manager.commit",
    "kvp_seq_commit_retained": "Manager.commit_retained",
    "kvp_manager_tick": "Manager.tick",
    "kvp_prefix_retention": "Manager.retention",
    "kvp_prefix_reset": "Manager.prefix_reset",
    "kvp_manager_set_event_medium": "Manager.set_event_medium",
    "kvp_manager_set_event_cb": "Manager.set_event_callback",
    "kvp_seq_write": "Manager.write",
    "kvp_seq_read": "Manager.read",
    "kvp_seq_gather": "Manager.gather",
    "kvp_seq_gather_cap": "Manager.gather",
    "kvp_metrics_write": "C-only: it writes to a C FILE *; Pool.metrics() "
                         "returns the same text (kvp_metrics_format)",
    "kvp_metrics_format": "Pool.metrics",
}


class TestCoverage(unittest.TestCase):
    def test_every_c_function_is_reached(self):
        with open(HEADER) as f:
            header = f.read()
        api = re.findall(r"KVP_API\s+(?:const\s+)?(?:struct\s+)?\w+\s*\**\s*"
                         r"(kvp_\w+)\s*\(", header)
        self.assertGreater(len(api), 60)
        self.assertEqual(sorted(set(api) - set(COVERAGE)), [],
                         "public functions without a Python counterpart or "
                         "a C-only reason")
        self.assertEqual(sorted(set(COVERAGE) - set(api)), [],
                         "listed functions that kvpool.h no longer has")
        declared = set(re.findall(r"(kvp_\w+)\s*\(", CDEF))
        for c, py in sorted(COVERAGE.items()):
            if py.startswith("C-only: "):
                self.assertGreater(len(py), 20, c)
                continue
            obj = kvpool
            for part in py.split("."):
                self.assertTrue(hasattr(obj, part), "%s: kvpool.%s" % (c, py))
                obj = getattr(obj, part)
            self.assertIn(c, declared, "%s: not declared in _ffi.py" % c)
            getattr(lib, c)  # and the library has it


if __name__ == "__main__":
    unittest.main()
