# SPDX-License-Identifier: MIT
"""Unit tests of the Python binding (make check runs them with and without
NumPy: KVPOOL_NO_NUMPY=1 forces lists)."""
import errno
import gc
import threading
import unittest

import kvpool
from kvpool import _types as _core

NUMPY = _core.np is not None


def as_list(x):
    return [int(v) for v in x]


class TestPool(unittest.TestCase):
    def test_alloc_free_counts(self):
        with kvpool.Pool(num_blocks=64, block_tokens=16) as pool:
            ids = pool.alloc(10)
            self.assertEqual(len(set(ids)), 10)
            st = pool.stats()
            self.assertIsInstance(st, kvpool.PoolStats)
            self.assertEqual((st.total, st.used, st.free), (64, 10, 54))
            pool.ref(ids[0])
            self.assertEqual(pool.refcount(ids[0]), 2)
            pool.free(ids)
            self.assertEqual(pool.refcount(ids[0]), 1)
            pool.free(ids[:1])
            st = pool.stats()
            self.assertEqual((st.used, st.allocs, st.frees), (0, 10, 10))
            pool.check()

    def test_exhaustion_then_realloc(self):
        with kvpool.Pool(num_blocks=8, block_tokens=16, nocache=True) as p:
            ids = p.alloc(8)
            with self.assertRaises(kvpool.NoSpace) as cm:
                p.alloc(1)
            e = cm.exception
            self.assertIsInstance(e, kvpool.Error)
            self.assertEqual(e.errno, errno.ENOSPC)
            self.assertIn(kvpool.strerror(-errno.ENOSPC), e.strerror)
            self.assertEqual(kvpool.strerror(-errno.ENOSPC),
                             "not enough free blocks")
            p.free(ids[3:4])
            self.assertEqual(p.alloc(1), ids[3:4])
            p.free(ids)

    def test_errors_change_nothing(self):
        with kvpool.Pool(num_blocks=8) as p:
            ids = p.alloc(2)
            with self.assertRaises(kvpool.OutOfRange):
                p.free([ids[0], 99])
            self.assertEqual(p.refcount(ids[0]), 1)
            p.free(ids)
            with self.assertRaises(kvpool.AlreadyFree) as cm:
                p.free(ids[:1])
            self.assertEqual(cm.exception.errno, errno.EALREADY)
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.Pool(num_blocks=2**31 + 1)  # above KVP_MAX_BLOCKS
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.Pool(num_blocks=8, layout=kvpool.Layout(1, 1, 1, "f7"))

    def test_closed_pool(self):
        p = kvpool.Pool(num_blocks=8)
        p.close()
        p.close()
        with self.assertRaises(kvpool.InvalidArgument):
            p.alloc(1)

    def test_block_data(self):
        lay = kvpool.Layout(num_layers=2, num_kv_heads=2, head_dim=4)
        with kvpool.Pool(num_blocks=4, block_tokens=4, layout=lay) as p:
            self.assertEqual(p.block_bytes, 2 * 2 * 4 * 2 * 4 * 4)
            (b,) = p.alloc(1)
            d = p.block_data(b)
            d[0:4] = b"abcd"
            self.assertEqual(bytes(p.block_data(b)[0:4]), b"abcd")
            p.free([b])
        with kvpool.Pool(num_blocks=4) as p:
            with self.assertRaises(kvpool.InvalidArgument):
                p.block_data(0)


class TestManager(unittest.TestCase):
    def setUp(self):
        self.pool = kvpool.Pool(num_blocks=64, block_tokens=16)
        self.m = kvpool.Manager(self.pool)

    def tearDown(self):
        self.m.close()
        self.pool.close()

    def test_create_append_fork_cow(self):
        m = self.m
        s = m.create(1, 20)
        self.assertIsNone(s.append())
        self.assertEqual(s.info().num_tokens, 21)
        self.assertEqual(len(s.blocks()), 2)
        f = s.fork(2)
        self.assertEqual(as_list(f.blocks()), as_list(s.blocks()))
        cp = f.append()
        self.assertIsInstance(cp, kvpool.Copy)
        self.assertEqual(cp.src, as_list(s.blocks())[1])
        self.assertEqual(cp.tokens, 5)
        self.assertEqual(as_list(f.blocks())[1], cp.dst)
        st = m.stats()
        self.assertIsInstance(st, kvpool.Stats)
        self.assertEqual((st.sequences, st.forks, st.cow_copies), (2, 1, 1))
        m.check()
        s.free()
        f.free()
        self.assertEqual(self.pool.stats().used, 0)

    def test_fork_n(self):
        m = self.m
        s = m.create(1, 20)
        before = s.info()
        kids = m.fork_n(1, [2, 3, 4])
        self.assertEqual([k.id for k in kids], [2, 3, 4])
        for k in kids:
            self.assertEqual(as_list(k.blocks()), as_list(s.blocks()))
            self.assertEqual(k.info().num_tokens, 20)
        self.assertEqual(s.info().access_count, before.access_count + 1)
        self.assertEqual(m.stats().forks, 3)
        # keep_source: the source's access stays; a Sequence forks too.
        before = s.info()
        more = s.fork_n([5, 6], keep_source=True)
        self.assertEqual([k.id for k in more], [5, 6])
        after = s.info()
        self.assertEqual((after.last_access, after.access_count),
                         (before.last_access, before.access_count))
        # All or nothing: a taken id fails the call, no child is made.
        with self.assertRaises(kvpool.Exists):
            m.fork_n(1, [7, 8, 2])
        with self.assertRaises(kvpool.Exists):
            m.fork_n(1, [7, 7])
        with self.assertRaises(kvpool.NotFound):
            m.fork_n(99, [7, 8])
        with self.assertRaises(kvpool.InvalidArgument):
            m.fork_n(1, [])
        for gone in (7, 8):
            with self.assertRaises(kvpool.NotFound):
                m.info(gone)
        self.assertEqual(m.stats().sequences, 6)
        if NUMPY:
            import numpy as np
            arr = m.fork_n(1, np.array([9, 10], dtype=np.uint64))
            self.assertEqual([k.id for k in arr], [9, 10])
            more += arr
        m.check()
        for k in kids + more:
            k.free()
        s.free()
        self.assertEqual(self.pool.stats().used, 0)

    def test_errors(self):
        m = self.m
        with self.assertRaises(kvpool.NotFound) as cm:
            m.append(7)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertIn("unknown sequence", str(cm.exception))
        m.create(7)
        with self.assertRaises(kvpool.Exists):
            m.create(7)
        with self.assertRaises(kvpool.NoSpace):
            m.create(8, 65 * 16)
        with self.assertRaises(kvpool.OutOfRange):
            m.truncate(7, 5)
        self.assertEqual(m.stats().sequences, 1)
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.Manager(self.pool, policy="fifo")

    def test_context_managers(self):
        with self.m.create(3, 40) as s:
            self.assertEqual(self.pool.stats().used, 3)
        self.assertEqual(self.pool.stats().used, 0)
        with self.m.create(4, 10) as s:
            s.free()  # freeing inside the block is fine
        with kvpool.Pool(16) as p:
            m = kvpool.Manager(p)
            with m:
                m.create(1, 32)
            with self.assertRaises(kvpool.InvalidArgument):
                m.create(2)
        del m
        gc.collect()

    def test_exports(self):
        m = self.m
        m.create(1, 40)
        m.create(2, 5)
        b1, b2 = as_list(m.blocks(1)), as_list(m.blocks(2))
        t = m.block_table([1, 2], pad=-1)
        if NUMPY:
            self.assertEqual(str(t.dtype), "int32")
            self.assertEqual(t.shape, (2, 3))
            t = t.tolist()
        self.assertEqual(t, [b1, b2 + [-1, -1]])
        indptr, indices, last = m.csr([1, 2])
        if NUMPY:
            self.assertEqual(str(indices.dtype), "int32")
        self.assertEqual(as_list(indptr), [0, 3, 4])
        self.assertEqual(as_list(indices), b1 + b2)
        self.assertEqual(as_list(last), [8, 5])
        sm = m.slot_mapping(1, 30)
        if NUMPY:
            self.assertEqual(str(sm.dtype), "int64")
        self.assertEqual(as_list(sm), [b1[1] * 16 + 14, b1[1] * 16 + 15] +
                         [b1[2] * 16 + i for i in range(8)])
        with self.assertRaises(kvpool.NotFound):
            m.block_table([1, 9])
        with self.assertRaises(kvpool.OutOfRange):
            m.slot_mapping(2, 0, 6)

    def test_append_many(self):
        m = self.m
        m.create(1, 16)
        m.create(2, 3)
        m.fork(2, 3)
        copies = m.append_many([1, 2, 3])
        self.assertEqual(len(copies), 1)
        self.assertEqual([m.info(i).num_tokens for i in (1, 2, 3)],
                         [17, 4, 4])
        m.append_many([1, 2], num_tokens=[15, 12])
        self.assertEqual(m.info(1).num_tokens, 32)
        self.assertEqual(m.info(2).num_tokens, 16)
        self.assertEqual(m.append_many([]), [])
        # An unknown sequence in the middle: the ones before it changed.
        with self.assertRaises(kvpool.NotFound) as cm:
            m.append_many([1, 2, 99, 3])
        self.assertEqual(cm.exception.done, 2)
        self.assertEqual([m.info(i).num_tokens for i in (1, 2, 3)],
                         [33, 17, 4])
        with self.assertRaises(kvpool.InvalidArgument):
            m.append_many([1, 2], num_tokens=[1])
        self.assertEqual(m.stats().appends, 7)
        m.check()

    def test_append_batch_c(self):
        # kvp_seq_append_batch itself, through the raw ABI.
        from kvpool._ffi import ffi, lib
        m = self.m
        m.create(1, 3)
        m.create(2, 3)
        seqs = ffi.new("uint64_t[]", [1, 2, 9, 1])
        cow = ffi.new("struct kvp_copy[]", 4)
        ncow = ffi.new("uint32_t *")
        before = m.stats()
        self.assertEqual(lib.kvp_seq_append_batch(ffi.NULL, seqs, ffi.NULL,
                                                  2, cow, 4, ncow),
                         -errno.EINVAL)
        self.assertEqual(lib.kvp_seq_append_batch(m._m, ffi.NULL, ffi.NULL,
                                                  2, cow, 4, ncow),
                         -errno.EINVAL)
        self.assertEqual(lib.kvp_seq_append_batch(m._m, seqs, ffi.NULL, 2,
                                                  ffi.NULL, 4, ncow),
                         -errno.EINVAL)
        self.assertEqual(lib.kvp_seq_append_batch(m._m, seqs + 2, ffi.NULL,
                                                  2, cow, 4, ncow),
                         -errno.ENOENT)
        self.assertEqual(m.stats(), before)
        self.assertEqual(lib.kvp_seq_append_batch(m._m, seqs, ffi.NULL, 0,
                                                  cow, 4, ncow), 0)
        self.assertEqual(lib.kvp_seq_append_batch(m._m, seqs, ffi.NULL, 4,
                                                  cow, 4, ncow), 2)
        self.assertEqual((m.info(1).num_tokens, m.info(2).num_tokens), (4, 4))
        # A copy needed with cow full: the second fork's append fails.
        m.fork(1, 3)
        m.fork(2, 4)
        seqs = ffi.new("uint64_t[]", [3, 4])
        self.assertEqual(lib.kvp_seq_append_batch(m._m, seqs, ffi.NULL, 2,
                                                  cow, 1, ncow), 1)
        self.assertEqual(ncow[0], 1)
        self.assertEqual(cow[0].tokens, 4)
        self.assertEqual(lib.kvp_seq_append_batch(m._m, seqs + 1, ffi.NULL,
                                                  1, cow, 0, ncow),
                         -errno.ENOBUFS)
        self.assertEqual(m.info(4).num_tokens, 4)
        m.check()

    def test_admit_evict(self):
        m = kvpool.Manager(self.pool, policy="longest")
        self.assertEqual(m.admit(16), kvpool.ADMIT_OK)
        self.assertEqual(m.admit(65 * 16), kvpool.ADMIT_NEVER)
        m.create(1, 16)
        m.create(2, 48)
        self.assertEqual(m.evict(), 2)
        victims, met = m.evict_until(0.0)
        self.assertEqual((victims, met), ([1], True))
        with self.assertRaises(kvpool.NotFound):
            m.evict()
        m.close()

    def test_trim_priority(self):
        m = self.m
        s = m.create(1, 100)
        self.assertEqual(m.stream_trim(1, 16, 16), 64)
        self.assertEqual(s.num_tokens, 36)
        s.set_priority(5)
        self.assertEqual(s.info().priority, 5)

    def test_gather_while_appending(self):
        # The arrays are sized from the length read before the C call;
        # another thread's appends meanwhile must not overflow them.
        lay = kvpool.Layout(num_layers=1, num_kv_heads=1, head_dim=64,
                            dtype="u8")
        with kvpool.Pool(4096, block_tokens=4, layout=lay) as p, \
                kvpool.Manager(p) as m:
            m.create(1, 1)
            stop = threading.Event()

            def grow():
                while not stop.is_set() and m.info(1).num_tokens < 16000:
                    m.append(1, 4)

            t = threading.Thread(target=grow)
            t.start()
            lens = []
            try:
                for _ in range(300):
                    k, v = m.gather(1, 0)
                    self.assertEqual(len(k), len(v))
                    self.assertEqual(len(k) % 64, 0)
                    lens.append(len(k) // 64)
            finally:
                stop.set()
                t.join()
            self.assertEqual(lens, sorted(lens))
            self.assertLessEqual(lens[-1], m.info(1).num_tokens)

    def test_kv_data(self):
        lay = kvpool.Layout(num_layers=2, num_kv_heads=1, head_dim=2,
                            dtype="u8")
        with kvpool.Pool(8, block_tokens=2, layout=lay) as p, \
                kvpool.Manager(p) as m:
            self.assertEqual(p.row_bytes, 2)
            s = m.create(1, 3)
            for pos in range(3):
                s.write(pos, 1, bytes([pos, 1]), bytes([pos, 2]))
            self.assertEqual(s.read(2, 1), (bytearray([2, 1]),
                                            bytearray([2, 2])))
            k, v = s.gather(1)
            self.assertEqual(bytes(k), bytes([0, 1, 1, 1, 2, 1]))
            s.fork(2)
            with self.assertRaises(kvpool.Busy):
                s.write(0, 0, b"xx", b"yy")
            with self.assertRaises(kvpool.InvalidArgument):
                s.write(0, 5, b"xx", b"yy")


class TestHash(unittest.TestCase):
    def test_every_profile(self):
        toks = list(range(100))
        for name in kvpool.HASH_ALGOS:
            if name.startswith("xxh3"):
                kvpool.set_xxh3_seed(42)
            h = kvpool.hash_blocks(toks, 16, algo=name)
            self.assertEqual(len(h), 6, name)
            self.assertTrue(all(len(x) == 32 for x in h))
            self.assertEqual(len(set(h)), 6, name)
            self.assertEqual(h, kvpool.hash_blocks(toks, 16, algo=name))
            # Chaining: [a, b] from the root = [b] after a's hash.
            tail = kvpool.hash_blocks(toks[16:32], 16, algo=name,
                                      parent=h[0])
            self.assertEqual(tail[0], h[1], name)
            salted = kvpool.hash_blocks(toks, 16, algo=name, salt=b"t1")
            self.assertNotEqual(salted[0], h[0], name)
            lora = kvpool.hash_blocks(toks, 16, algo=name, lora="a")
            self.assertNotEqual(lora[0], h[0], name)
        xx = kvpool.hash_blocks(toks, 16, algo="xxh3_128")
        self.assertEqual(xx[0][16:], bytes(16))
        self.assertNotEqual(kvpool.hash_blocks(toks, 16)[0][16:], bytes(16))
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.hash_blocks(toks, 16, algo="md5")
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.hash_blocks(toks, 0)
        self.assertEqual(len(kvpool.hash_blocks(toks[:15], 16)), 0)

    def test_numpy_tokens(self):
        if not NUMPY:
            self.skipTest("NumPy not importable")
        import numpy as np
        toks = list(range(64))
        self.assertEqual(kvpool.hash_blocks(np.arange(64, dtype=np.int64),
                                            16),
                         kvpool.hash_blocks(toks, 16))


class TestRetention(unittest.TestCase):
    def test_order_pins_clock(self):
        pool = kvpool.Pool(num_blocks=6, block_tokens=4, nocache=True)
        m = kvpool.Manager(pool, prefix_cache=True, max_pinned=1)
        sysp = kvpool.hash_blocks(list(range(8)), 4)        # 2 blocks
        other = kvpool.hash_blocks(list(range(100, 116)), 4)  # 4 blocks
        s = m.create_cached(1, sysp, 8)
        # block 0 pinned, block 1 past the cap: RETAIN_MAX; for 5 ticks
        self.assertEqual(m.commit_retained(
            1, sysp, [(0, 0, kvpool.RETAIN_PIN, 5)]), (2, 1))
        self.assertEqual(m.retention(sysp[0]), (kvpool.RETAIN_PIN, 5))
        self.assertEqual(m.retention(sysp[1]), (kvpool.RETAIN_MAX, 5))
        s.free()
        o = m.create_cached(2, other, 16)
        self.assertEqual(m.commit(2, other), 4)
        o.free()
        self.assertEqual(m.stats().prefix_pinned, 1)
        # 4 blocks needed: the default ones go, the retained stay
        e = m.create(3, 16)
        for h in other:
            with self.assertRaises(kvpool.NotFound):
                m.retention(h)
        # a pinned block is never evicted: one more is no space
        with self.assertRaises(kvpool.NoSpace):
            m.create(4, 8)
        self.assertEqual(m.tick(5), 5)
        self.assertEqual(m.retention(sysp[0]), (kvpool.RETAIN_DEFAULT, 0))
        self.assertEqual(m.stats().prefix_pinned, 0)
        self.assertEqual(m.stats().retention_clock, 5)
        f = m.create(4, 8)
        f.free()
        e.free()
        with self.assertRaises(kvpool.InvalidArgument):
            m.commit_retained(9, sysp, [(0, 0, 16)])
        m.check()
        m.close()
        pool.close()


class TestPrefix(unittest.TestCase):
    def test_hits_events(self):
        pool = kvpool.Pool(num_blocks=8, block_tokens=4, nocache=True)
        m = kvpool.Manager(pool, prefix_cache=True)
        events = []
        me = threading.get_ident()
        m.set_event_callback(lambda ev: events.append(
            (ev, threading.get_ident())))
        toks = list(range(17))
        h = kvpool.hash_blocks(toks, 4)
        s = m.create_cached(1, h, 17)
        self.assertEqual(s.cached_tokens, 0)
        self.assertEqual(s.commit(h), 4)
        self.assertEqual(len(events), 1)
        ev, tid = events[0]
        self.assertEqual(tid, me)
        self.assertIsInstance(ev, kvpool.Event)
        self.assertEqual((ev.type, ev.hashes, ev.parent, ev.block_tokens,
                          ev.num_tokens), ("stored", list(h), None, 4, 16))
        s.free()
        # The match takes nothing: no statistic moves, and the create
        # after it gets what it said.
        self.assertEqual(m.prefix_match(h), 4)
        self.assertEqual(m.prefix_match(h[2:]), 2)
        self.assertEqual(m.prefix_match([]), 0)
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.Manager(pool).prefix_match(h)
        s2 = m.create_cached(2, h, 17)
        self.assertEqual(s2.cached_tokens, 16)
        st = m.stats()
        self.assertEqual((st.prefix_queries, st.prefix_hits), (34, 16))
        self.assertAlmostEqual(st.prefix_hit_rate, 16 / 34)
        with self.assertRaises(kvpool.Busy):
            m.prefix_reset()
        s2.free()
        # Filling the pool evicts the idle cached blocks: REMOVED events.
        events.clear()
        m.create(3, 8 * 4)
        removed = [h for e, _ in events if e.type == "removed"
                   for h in e.hashes]
        self.assertEqual(sorted(removed), sorted(h))
        m.free(3)
        m.set_event_callback(None)
        m.close()
        pool.close()

    def test_emit_cached_events(self):
        with kvpool.Pool(16, block_tokens=4) as pool, \
                kvpool.Manager(pool, prefix_cache=True,
                               emit_cached_events=True) as m:
            got = []
            m.set_event_callback(got.append)
            h = kvpool.hash_blocks(range(13), 4)
            with m.create_cached(1, h, 13) as s:
                s.commit(h)
            self.assertEqual([(e.type, e.reused) for e in got],
                             [("stored", False)])
            with m.create_cached(2, h, 13) as s:
                self.assertEqual(s.cached_tokens, 12)
            self.assertEqual(len(got), 2)
            self.assertEqual((got[1].type, got[1].hashes, got[1].parent,
                              got[1].reused), ("stored", list(h), None, True))
            with self.assertRaisesRegex(kvpool.InvalidArgument,
                                        "emit_cached_events needs "
                                        "prefix_cache"):
                kvpool.Manager(pool, emit_cached_events=True)
        # Off by default: a hit reports nothing.
        with kvpool.Pool(16, block_tokens=4) as pool, \
                kvpool.Manager(pool, prefix_cache=True) as m:
            got = []
            m.set_event_callback(got.append)
            h = kvpool.hash_blocks(range(13), 4)
            with m.create_cached(1, h, 13) as s:
                s.commit(h)
            with m.create_cached(2, h, 13) as s:
                self.assertEqual(s.cached_tokens, 12)
            self.assertEqual(len(got), 1)

    def test_reset_event(self):
        with kvpool.Pool(16, block_tokens=4) as pool, \
                kvpool.Manager(pool, prefix_cache=True) as m:
            got = []
            m.set_event_callback(got.append)
            h = kvpool.hash_blocks(range(8), 4)
            with m.create(1, 8) as s:
                s.commit(h)
            m.prefix_reset()
            self.assertEqual([e.type for e in got], ["stored", "cleared"])
            self.assertEqual(got[1].hashes, [])

    def test_not_prefix_manager(self):
        with kvpool.Pool(16) as pool, kvpool.Manager(pool) as m:
            with self.assertRaises(kvpool.InvalidArgument):
                m.create_cached(1, kvpool.hash_blocks(range(32), 16), 32)


class TestInputChecks(unittest.TestCase):
    """Values a cast would silently change, shapes len() misreads, and
    messages that name the wrong thing (each failed before its fix)."""

    @unittest.skipUnless(NUMPY, "NumPy not importable")
    def test_numpy_out_of_range(self):
        import numpy as np
        big = np.array([2**32 + 5] * 16, dtype=np.int64)
        with self.assertRaises(OverflowError):
            kvpool.hash_blocks(big, 16)
        with self.assertRaises(OverflowError):
            kvpool.hash_blocks(np.array([-1] * 16, dtype=np.int64), 16)
        # the same values as a list raise too
        with self.assertRaises(OverflowError):
            kvpool.hash_blocks([2**32 + 5] * 16, 16)
        with kvpool.Pool(16) as pool, kvpool.Manager(pool) as m:
            with self.assertRaises(OverflowError):
                m.block_table(np.array([-1], dtype=np.int64))
        self.assertEqual(
            kvpool.hash_blocks(np.arange(32, dtype=np.int64), 16),
            kvpool.hash_blocks(list(range(32)), 16))

    @unittest.skipUnless(NUMPY, "NumPy not importable")
    def test_numpy_2d(self):
        import numpy as np
        with kvpool.Pool(16) as pool, kvpool.Manager(pool) as m:
            m.create(10, 4)
            m.create(11, 4)
            with self.assertRaises(ValueError):
                m.block_table(np.array([[10, 11]]))
            self.assertEqual(m.block_table(np.array([10, 11])).shape[0], 2)

    def test_sha256_cbor_profile(self):
        self.assertIn("sha256_cbor", kvpool.HASH_ALGOS)

    def test_retention_unknown_hash(self):
        with kvpool.Pool(16, block_tokens=4) as pool, \
                kvpool.Manager(pool, prefix_cache=True) as m:
            with self.assertRaises(kvpool.NotFound) as cm:
                m.retention(b"\x01" * 32)
            self.assertNotIn("sequence", str(cm.exception))
            self.assertIn("hash", str(cm.exception))

    def test_raising_callback_counted(self):
        import sys
        with kvpool.Pool(16, block_tokens=4) as pool, \
                kvpool.Manager(pool, prefix_cache=True) as m:
            def boom(ev):
                raise RuntimeError("callback failed")
            m.set_event_callback(boom)
            old = sys.unraisablehook
            sys.unraisablehook = lambda u: None  # keep the log quiet
            try:
                with m.create(1, 8) as s:
                    s.commit(kvpool.hash_blocks(range(8), 4))
                m.prefix_reset()
            finally:
                sys.unraisablehook = old
                m.set_event_callback(None)
            self.assertEqual(m.events_lost, 2)


def no_space(test, fn, *args):
    """fn(*args)'s NoSpace (the test fails if it raises none)."""
    with test.assertRaises(kvpool.NoSpace) as cm:
        fn(*args)
    return cm.exception


class TestErrorDetails(unittest.TestCase):
    """NoSpace carries kvp_last_error(): requested and available."""

    def test_blocks(self):
        with kvpool.Pool(num_blocks=8, block_tokens=16, nocache=True) as p:
            ids = p.alloc(8)
            e = no_space(self, p.alloc, 3)
            self.assertEqual((e.requested, e.available), (3, 0))
            self.assertIn("3 requested, 0 available", str(e))
            p.free(ids[:2])
            e = no_space(self, p.alloc, 3)
            self.assertEqual((e.requested, e.available), (3, 2))
            self.assertIn("3 requested, 2 available", str(e))
            p.free(ids[2:])
            with kvpool.Manager(p) as m:
                # more than the pool has, and an append that needs a block
                e = no_space(self, m.create, 1, 9 * 16)
                self.assertEqual((e.requested, e.available), (9, 8))
                m.create(2, 8 * 16)
                e = no_space(self, m.append, 2)
                self.assertEqual((e.requested, e.available), (1, 0))
                e = no_space(self, m.append_ex, 2)
                self.assertEqual((e.requested, e.available), (1, 0))
                e = no_space(self, m.append_many, [2])
                self.assertEqual((e.requested, e.available, e.done),
                                 (1, 0, 0))

    def test_buffer(self):
        from kvpool._ffi import ffi, lib
        with kvpool.Pool(64) as pool, kvpool.Manager(pool) as m:
            for i in (1, 2, 3):
                m.create(i)
            ids = ffi.new("uint64_t[]", 2)
            n = ffi.new("uint32_t *")
            rc = lib.kvp_manager_seqs(m._m, ids, 2, n)
            self.assertEqual((rc, n[0]), (-errno.ENOBUFS, 3))
            e = kvpool.errors.error(rc, "sequences")
            self.assertIsInstance(e, kvpool.BufferTooSmall)
            self.assertNotIsInstance(e, kvpool.NoSpace)
            self.assertEqual((e.errno, e.requested, e.available),
                             (errno.ENOBUFS, 3, 2))
            self.assertEqual(str(e), "[Errno %d] sequences: the caller's "
                             "buffer is too small (3 entries needed, room "
                             "for 2)" % errno.ENOBUFS)
            # The package's own calls size their buffers.
            self.assertEqual(sorted(m.sequences()), [1, 2, 3])
            # A block table of stride 4 for a 7-block sequence in a pool
            # with 56 free blocks (issue 41).
            m.create(7, 7 * 16)
            self.assertEqual(pool.stats().free, 57)
            s7 = ffi.new("uint64_t[]", [7])
            table = ffi.new("int32_t[]", 4)
            rc = lib.kvp_export_block_table(m._m, s7, 1, table, 4, -1)
            e = kvpool.errors.error(rc, "block_table")
            self.assertIsInstance(e, kvpool.BufferTooSmall)
            self.assertEqual((e.requested, e.available), (7, 4))
            self.assertEqual(len(m.block_table([7])[0]), 7)

    def test_per_thread(self):
        from kvpool._ffi import ffi, lib
        got = {}

        def other(pool):
            # A thread with no -ENOSPC yet has no details ...
            got["fresh"] = kvpool.errors.error(-errno.ENOSPC)
            # ... and its own failure does not touch the main thread's.
            try:
                pool.alloc(5)
            except kvpool.NoSpace as e:
                got["other"] = e
        with kvpool.Pool(num_blocks=4, nocache=True) as p:
            held = p.alloc(4)
            no_space(self, p.alloc, 2)
            t = threading.Thread(target=other, args=(p,))
            t.start()
            t.join()
            self.assertIsNone(got["fresh"].requested)
            self.assertEqual(str(got["fresh"]),
                             "[Errno 28] not enough free blocks")
            self.assertEqual(got["other"].requested, 5)
            info = ffi.new("struct kvp_error_info *")
            self.assertEqual(lib.kvp_last_error(info), 0)
            self.assertEqual((info.err, info.requested, info.available),
                             (-errno.ENOSPC, 2, 0))
            self.assertEqual(lib.kvp_last_error(ffi.NULL), -errno.EINVAL)
            p.free(held)

    def test_threads_read_their_own(self):
        # 4 threads fail at once on a full pool, each asking its own
        # count: a record shared between threads would mix them up.
        wrong = []
        with kvpool.Pool(num_blocks=4, nocache=True) as p:
            held = p.alloc(4)
            barrier = threading.Barrier(4)

            def fail(k):
                barrier.wait()
                for _ in range(2000):
                    try:
                        p.alloc(k)
                    except kvpool.NoSpace as e:
                        if (e.requested, e.available) != (k, 0):
                            wrong.append((k, e.requested, e.available))
                kvpool.thread_flush()
            ts = [threading.Thread(target=fail, args=(k,))
                  for k in (1, 2, 3, 5)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            p.free(held)
        self.assertEqual(wrong, [])


class TestEmptyPool(unittest.TestCase):
    def test_empty(self):
        with kvpool.Pool(num_blocks=0) as p:
            self.assertEqual(p.num_blocks, 0)
            self.assertEqual((p.stats().total, p.stats().free), (0, 0))
            e = no_space(self, p.alloc, 1)
            self.assertEqual((e.requested, e.available), (1, 0))
            with kvpool.Manager(p) as m:
                s = m.create(1)               # 0 tokens: no block
                self.assertEqual(m.sequences(), [1])
                self.assertEqual(as_list(s.blocks()), [])
                e = no_space(self, s.append)
                self.assertEqual((e.requested, e.available), (1, 0))
                e = no_space(self, m.create, 2, 1)
                self.assertEqual((e.requested, e.available), (1, 0))
                self.assertEqual(m.admit(1), kvpool.ADMIT_NEVER)
                self.assertEqual(m.admit(0), kvpool.ADMIT_OK)
                m.check()
            p.check()


class TestPoolConfig(unittest.TestCase):
    def test_properties(self):
        lay = kvpool.Layout(num_layers=2, num_kv_heads=1, head_dim=4,
                            dtype="f16")
        with kvpool.Pool(8, block_tokens=4, device_id=3, layout=lay,
                         zero=True, nocache=True) as p:
            want = kvpool.PoolConfig(num_blocks=8, block_tokens=4,
                                     cache_blocks=0, device_id=3,
                                     layout=lay, zero=True, nocache=True,
                                     k_only=False)
            self.assertEqual(p.config, want)
            self.assertEqual((p.num_blocks, p.device_id, p.layout, p.k_only),
                             (8, 3, lay, False))
            with kvpool.Pool(**vars(p.config)) as twin:
                self.assertEqual(twin.config, want)
        with kvpool.Pool(64, cache_blocks=8) as p:
            c = p.config
            self.assertEqual((c.num_blocks, c.block_tokens, c.cache_blocks,
                              c.device_id, c.layout, c.zero, c.nocache),
                             (64, 16, 8, -1, None, False, False))
            self.assertIsNone(p.layout)
        p = kvpool.Pool(4)
        p.close()
        with self.assertRaises(kvpool.InvalidArgument):
            p.config


class TestKOnly(unittest.TestCase):
    LAY = kvpool.Layout(num_layers=2, num_kv_heads=1, head_dim=2, dtype="u8")

    def test_roundtrip(self):
        with kvpool.Pool(8, block_tokens=2, layout=self.LAY) as kv:
            kv_bytes = kv.block_bytes
        with kvpool.Pool(8, block_tokens=2, layout=self.LAY,
                         k_only=True) as p, kvpool.Manager(p) as m:
            self.assertTrue(p.k_only)
            self.assertTrue(p.config.k_only)
            self.assertEqual(p.block_bytes * 2, kv_bytes)
            self.assertEqual(p.row_bytes, 2)
            s = m.create(1, 3)
            for pos in range(3):
                s.write(pos, 1, bytes([pos, 7]))
                s.write(pos, 0, bytes([9, pos]))
            self.assertEqual(s.read(2, 1), (bytearray([2, 7]), None))
            self.assertEqual(s.read(1, 0), (bytearray([9, 1]), None))
            k, v = s.gather(1)
            self.assertIsNone(v)
            self.assertEqual(bytes(k), bytes([0, 7, 1, 7, 2, 7]))
            k, v = s.gather(0)
            self.assertEqual(bytes(k), bytes([9, 0, 9, 1, 9, 2]))
            # [layer][token][head][dim]: layer 1 starts a block's 2nd half
            b0 = as_list(s.blocks())[0]
            self.assertEqual(bytes(p.block_data(b0)), bytes([9, 0, 9, 1,
                                                             0, 7, 1, 7]))
            with self.assertRaises(kvpool.InvalidArgument):
                s.write(0, 0, b"xx", b"yy")
            with self.assertRaises(kvpool.OutOfRange):
                s.read(3, 0)

    def test_v_contract(self):
        from kvpool._ffi import ffi, lib
        row = ffi.new("uint8_t[]", 2)
        with kvpool.Pool(8, block_tokens=2, layout=self.LAY,
                         k_only=True) as p, kvpool.Manager(p) as m:
            m.create(1, 1)
            self.assertEqual(lib.kvp_seq_write(m._m, 1, 0, 0, row, row),
                             -errno.EINVAL)
            self.assertEqual(lib.kvp_seq_read(m._m, 1, 0, 0, row, row),
                             -errno.EINVAL)
            self.assertEqual(lib.kvp_seq_write(m._m, 1, 0, 0, row, ffi.NULL),
                             0)
        with kvpool.Pool(8, block_tokens=2, layout=self.LAY) as p, \
                kvpool.Manager(p) as m:
            s = m.create(1, 1)
            self.assertEqual(lib.kvp_seq_write(m._m, 1, 0, 0, row, ffi.NULL),
                             -errno.EINVAL)
            with self.assertRaises(kvpool.InvalidArgument):
                s.write(0, 0, b"xx")
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.Pool(8, k_only=True)  # K-only needs a layout


class TestManagerIssue29(unittest.TestCase):
    def test_limits(self):
        with kvpool.Pool(200, block_tokens=16) as pool:
            with kvpool.Manager(pool) as m:
                self.assertEqual((m.eviction_threshold, m.watermark),
                                 (0.9, 0.01))
                # 0.01 of 200 blocks kept free
                self.assertEqual(m.admit(199 * 16), kvpool.ADMIT_NEVER)
                m.create(1, 16)
                self.assertEqual(m.evict_until(), ([], True))
            with kvpool.Manager(pool, eviction_threshold=0.0,
                                watermark=0.0) as m:
                self.assertEqual((m.eviction_threshold, m.watermark),
                                 (0.0, 0.0))
                self.assertEqual(m.admit(200 * 16), kvpool.ADMIT_OK)
                m.create(1, 16)
                m.create(2, 1)
                # threshold 0: due while a single block is used
                victims, met = m.evict_until()
                self.assertEqual((sorted(victims), met), ([1, 2], True))
            with kvpool.Manager(pool, eviction_threshold=0.5,
                                watermark=0.25) as m:
                self.assertEqual((m.eviction_threshold, m.watermark),
                                 (0.5, 0.25))
            for bad in (dict(eviction_threshold=1.5),
                        dict(eviction_threshold=-0.1),
                        dict(watermark=1.0)):
                with self.assertRaises(kvpool.InvalidArgument):
                    kvpool.Manager(pool, **bad)

    def test_policy_peek(self):
        with kvpool.Pool(64, block_tokens=16) as pool, \
                kvpool.Manager(pool) as m:
            self.assertIsNone(m.peek_victim())
            m.create(1, 48)           # longest, accessed most, latest
            m.create(2, 16)
            m.set_priority(2, 10)     # 1 has the lower priority
            for _ in range(3):
                m.append(1)
            self.assertGreater(m.info(1).last_access, m.info(2).last_access)
            self.assertGreater(m.info(1).access_count,
                               m.info(2).access_count)
            want = {"lru": 2, "lfu": 2, "longest": 1, "priority": 1}
            for policy in ("longest", "lru", "priority", "lfu"):
                m.policy = policy
                self.assertEqual(m.policy, policy)
                self.assertEqual(m.peek_victim(), want[policy], policy)
            m.set_policy("longest")
            self.assertEqual(m.policy, "longest")
            self.assertEqual(m.peek_victim(), 1)
            self.assertEqual(sorted(m.sequences()), [1, 2])  # not evicted
            with self.assertRaises(kvpool.InvalidArgument):
                m.policy = "fifo"
            self.assertEqual(m.policy, "longest")
            self.assertEqual(m.evict(), 1)
            self.assertEqual(m.peek_victim(), 2)
            m.free(2)
            self.assertIsNone(m.peek_victim())

    def test_sequences(self):
        with kvpool.Pool(64) as pool, kvpool.Manager(pool) as m:
            self.assertEqual(m.sequences(), [])
            ids = [1, 2, 2**40 + 3] + list(range(1000, 1100))
            for i in ids:
                m.create(i)
            m.create(5, 40)
            m.fork(5, 6)
            m.free(2)
            m.free(5)
            got = m.sequences()
            self.assertEqual(len(got), len(set(got)))
            want = sorted(set(ids) - {2} | {6})
            self.assertEqual(sorted(got), want)
            self.assertEqual(m.stats().sequences, len(want))

    def test_reserve(self):
        with kvpool.Pool(64, block_tokens=16) as pool, \
                kvpool.Manager(pool) as m:
            s = m.create(1, 5)
            s.reserve(1000)
            # room in the table, no blocks taken
            self.assertEqual(pool.stats().used, 1)
            self.assertEqual(s.info().num_tokens, 5)
            m.reserve(1, 3)           # below the count: a no-op
            for _ in range(995):
                s.append()
            self.assertEqual(s.info().num_tokens, 1000)
            self.assertEqual(len(s.blocks()), 63)
            m.append(1, 8)
            self.assertEqual(s.info().num_tokens, 1008)
            with self.assertRaises(kvpool.NotFound):
                m.reserve(9, 16)
            m.create(2)
            e = no_space(self, m.reserve, 2, 65 * 16)   # more than the pool
            self.assertEqual(e.requested, 65)
            self.assertEqual(m.info(2).num_tokens, 0)
            m.reserve(2, 64 * 16)     # the whole pool: room, no blocks
            self.assertEqual(pool.stats().used, 63)
            m.check()

    def test_append_ex(self):
        with kvpool.Pool(64, block_tokens=16) as pool, \
                kvpool.Manager(pool) as m:
            s = m.create(1, 15)
            a = s.append_ex()
            self.assertIsInstance(a, kvpool.AppendInfo)
            self.assertEqual(a, kvpool.AppendInfo(as_list(s.blocks())[-1],
                                                  16, 0, None))
            a = m.append_ex(1)
            blocks = as_list(s.blocks())
            self.assertEqual((a.last_block, a.num_tokens, a.new_blocks,
                              a.cow), (blocks[-1], 17, 1, None))
            self.assertEqual(as_list(s.slot_mapping(16)),
                             [a.last_block * 16 + 0])
            a = m.append_ex(1, 40)    # 57 tokens: 4 blocks
            self.assertEqual((a.num_tokens, a.new_blocks), (57, 2))
            self.assertEqual(a.last_block, as_list(s.blocks())[-1])
            # a fork's append copies the shared last block
            f = s.fork(2)
            a = f.append_ex()
            self.assertIsInstance(a.cow, kvpool.Copy)
            self.assertEqual((a.cow.src, a.cow.tokens),
                             (as_list(s.blocks())[-1], 9))
            self.assertEqual((a.last_block, a.new_blocks, a.num_tokens),
                             (a.cow.dst, 1, 58))
            self.assertEqual(as_list(f.blocks())[-1], a.last_block)
            # the plain append still returns a Copy or None
            self.assertIsNone(s.append())
            m.create(3)
            a = m.append_ex(3, 0)
            self.assertEqual((a.last_block, a.num_tokens, a.new_blocks),
                             (None, 0, 0))
            with self.assertRaises(kvpool.NotFound):
                m.append_ex(9)
            m.check()


class TestABI(unittest.TestCase):
    """Every struct _ffi.py declares has C's size, field offsets and
    field sizes, and the constants the package copies have C's values: a
    program compiled against include/kvpool.h prints them (skips without
    a compiler)."""

    CONSTANTS = {
        "KVP_POOL_ZERO": _core.POOL_ZERO,
        "KVP_POOL_NOCACHE": _core.POOL_NOCACHE,
        "KVP_POOL_K_ONLY": _core.POOL_K_ONLY,
        "KVP_PREFIX_CACHE": _core.PREFIX_CACHE,
        "KVP_EXACT_LIMITS": _core.EXACT_LIMITS,
        "KVP_NO_BLOCK": _core.NO_BLOCK,
        "KVP_EVICT_LRU": kvpool.POLICIES["lru"],
        "KVP_EVICT_LFU": kvpool.POLICIES["lfu"],
        "KVP_EVICT_LONGEST": kvpool.POLICIES["longest"],
        "KVP_EVICT_PRIORITY": kvpool.POLICIES["priority"],
        "KVP_F32": kvpool.DTYPES["f32"],
        "KVP_F16": kvpool.DTYPES["f16"],
        "KVP_BF16": kvpool.DTYPES["bf16"],
        "KVP_F64": kvpool.DTYPES["f64"],
        "KVP_U8": kvpool.DTYPES["u8"],
    }

    def test_structs_and_constants(self):
        import os
        import shlex
        import shutil
        import subprocess
        import tempfile
        from kvpool._ffi import PARTIAL, ffi
        cc = shlex.split(os.environ.get("CC") or "cc")
        if not shutil.which(cc[0]):
            self.skipTest("no C compiler (%s)" % cc[0])
        inc = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           os.pardir, os.pardir, os.pardir, "include")
        want = {}
        lines = ["#include <stddef.h>", "#include <stdio.h>",
                 "#include <kvpool.h>", "int main(void)", "{"]
        for name in ffi.list_types()[1]:
            fields = ffi.typeof("struct " + name).fields
            if fields is None:
                continue  # opaque
            if name not in PARTIAL:
                want["sizeof %s" % name] = ffi.sizeof("struct " + name)
                lines.append('printf("sizeof %s %%zu\\n", sizeof(struct %s));'
                             % (name, name))
            for f, ft in fields:
                want["offsetof %s.%s" % (name, f)] = ft.offset
                want["sizeof %s.%s" % (name, f)] = ffi.sizeof(ft.type)
                lines.append('printf("offsetof %s.%s %%zu\\n", '
                             'offsetof(struct %s, %s));' % (name, f, name, f))
                lines.append('printf("sizeof %s.%s %%zu\\n", '
                             'sizeof(((struct %s *)0)->%s));'
                             % (name, f, name, f))
        for c, v in self.CONSTANTS.items():
            want["const " + c] = v
            lines.append('printf("const %s %%llu\\n", (unsigned long long)%s);'
                         % (c, c))
        lines += ["return 0;", "}"]
        self.assertIn("sizeof kvp_append_info", want)
        self.assertIn("sizeof kvp_error_info", want)
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "abi.c"), os.path.join(d, "abi")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            # No sanitizer flags: only sizes and offsets are run.
            subprocess.run(cc + ["-I", inc, "-o", exe, src], check=True,
                           env=dict(os.environ, LD_PRELOAD=""))
            out = subprocess.run([exe], check=True, stdout=subprocess.PIPE,
                                 universal_newlines=True,
                                 env=dict(os.environ, LD_PRELOAD="")).stdout
        got = {}
        for line in out.splitlines():
            key, val = line.rsplit(" ", 1)
            got[key] = int(val)
        self.assertEqual(sorted(got), sorted(want))
        self.assertEqual(["%s: C %d, Python %d" % (k, got[k], want[k])
                          for k in sorted(want) if got[k] != want[k]], [])


if __name__ == "__main__":
    unittest.main()
