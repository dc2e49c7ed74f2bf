# SPDX-License-Identifier: MIT
"""Inputs that cannot buy memory, and names that are UTF-8 or refused.

Each case failed before its fix: under a 3 GiB address-space limit,
Pool(64).alloc(2**30) and alloc(2**32 - 1), slot_mapping(seq, 0,
2**32 - 1) and evict_until(cap=2**32 - 1) raised MemoryError (the binding
built an n-entry buffer first); Manager(pool, name="a\\0b") became "a".
The limited calls run in a child process (RLIMIT_AS applies to a whole
process); under a sanitizer, whose shadow memory needs terabytes of
address space, that part is skipped with the reason.
"""
import os
import resource
import subprocess
import sys
import unittest

import kvpool

LIMIT = 3 << 30
HUGE = [2**30, 2**32 - 1]


def child():
    """The limited calls; prints one line per call, exits 1 at the first
    wrong answer."""
    with kvpool.Pool(64) as pool, kvpool.Manager(pool) as m:
        for n in HUGE:
            try:
                pool.alloc(n)
                sys.exit("alloc(%d) succeeded" % n)
            except kvpool.NoSpace:
                print("alloc(%d): NoSpace" % n)
        m.create(1, 20)
        try:
            m.slot_mapping(1, 0, 2**32 - 1)
            sys.exit("slot_mapping(1, 0, 2**32 - 1) succeeded")
        except kvpool.OutOfRange:
            print("slot_mapping(1, 0, 2**32 - 1): OutOfRange")
        for i in range(2, 10):
            m.create(i, 16)
        victims, met = m.evict_until(0.0, cap=2**32 - 1)
        if sorted(victims) != list(range(1, 10)) or not met:
            sys.exit("evict_until(0.0, cap=2**32 - 1): %r, %r"
                     % (victims, met))
        print("evict_until(0.0, cap=2**32 - 1): 9 victims, target met")
        m.create(20, 16)
        m.create(21, 16)
        victims, met = m.evict_until(0.0, cap=1)
        if len(victims) != 1 or met:
            sys.exit("evict_until(0.0, cap=1): %r, %r" % (victims, met))


def limit():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


class TestHugeCounts(unittest.TestCase):
    def test_under_3_gib(self):
        if "san" in os.environ.get("LD_PRELOAD", ""):
            why = ("a sanitizer's shadow memory needs more than the 3 GiB "
                   "address space this test allows")
            print("skip: test_limits huge counts: " + why)
            self.skipTest(why)
        out = subprocess.run([sys.executable, __file__, "child"],
                             preexec_fn=limit, capture_output=True,
                             text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertEqual(len(out.stdout.splitlines()), 4, out.stdout)


class TestNames(unittest.TestCase):
    def test_refused(self):
        with kvpool.Pool(8) as pool:
            for bad in ["a\0b", "\0", "a\ud800b", ""]:
                with self.assertRaises(kvpool.InvalidArgument, msg=repr(bad)):
                    kvpool.Manager(pool, name=bad)

    def test_utf8_round_trip(self):
        with kvpool.Pool(8) as pool:
            for good in ["caf\u00e9", "\u20ac", "\U0001f600", "\U0010ffff"]:
                with kvpool.Manager(pool, name=good) as m:
                    self.assertEqual(m.name, good)
                    self.assertIn('manager="%s"' % good,
                                  pool.metrics([m]))


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        child()
    else:
        unittest.main()
