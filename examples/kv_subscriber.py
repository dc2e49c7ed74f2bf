#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A KV-event subscriber, as a KV-aware router would run one against a
kvpool node (or a vLLM one): it subscribes to the PUB endpoint, asks the
replay endpoint for everything from seq 0, decodes vLLM's KVEventBatch
msgpack, checks every BlockStored hash by recomputing vLLM's sha256_cbor
from the event's own token ids and parent, fills any gap in the sequence
numbers by replay, and rebuilds the set of cached blocks.

With --expect-json FILE (the --json output of `kvpool sim --publish`) it
waits for the publisher to finish, makes sure it holds every batch up to
events.last_seq, and says whether its set equals events.cached_blocks_end
(exit 0 if so).  Needs python3-zmq and python3-msgpack; python3-cbor2 for
the hash checks.  `make check` runs it over 127.0.0.1 (tests/
test_events_sim.sh), once with a tiny high-water mark and a slow start so
that the PUB socket drops batches and replay must fill the gap.

  kv_subscriber.py --sub tcp://127.0.0.1:5557 --replay tcp://127.0.0.1:5558 \\
      --hash-seed 0 --expect-json sim.json
"""
import argparse
import hashlib
import json
import os
import sys
import time

try:
    import msgpack
    import zmq
except ImportError as e:
    print("SKIP: %s (python3-zmq and python3-msgpack are needed)" % e)
    sys.exit(77)
try:
    import cbor2
except ImportError:
    cbor2 = None

END_SEQ = -1


def sha256_cbor(obj):
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


class Index:
    """The router's view of one node: which block hashes it caches."""

    def __init__(self, seed):
        self.blocks = set()
        self.none_hash = sha256_cbor(seed) if cbor2 and seed is not None \
            else None
        self.checked = self.stored = self.removed = self.cleared = 0

    def apply(self, payload):
        ts, events, _dp_rank = msgpack.unpackb(payload, raw=False)[:3]
        assert isinstance(ts, float), "ts is not a float64"
        for ev in events:
            tag = ev[0]
            if tag == "BlockStored":
                self.block_stored(ev)
            elif tag == "BlockRemoved":
                for h in ev[1]:
                    if h not in self.blocks:
                        raise AssertionError("BlockRemoved of an unknown "
                                             "block %r" % (h,))
                    self.blocks.discard(h)
                    self.removed += 1
            elif tag == "AllBlocksCleared":
                self.blocks.clear()
                self.cleared += 1
            else:
                raise AssertionError("unknown event %r" % (tag,))

    def block_stored(self, ev):
        hashes, parent, tokens, block_size = ev[1], ev[2], ev[3], ev[4]
        extra = ev[8] if len(ev) > 8 else None
        if self.none_hash is not None and tokens and \
                all(isinstance(h, bytes) for h in hashes):
            prev = parent if parent is not None else self.none_hash
            for i, h in enumerate(hashes):
                keys = extra[i] if extra else None
                want = sha256_cbor((prev, tuple(
                    tokens[i * block_size:(i + 1) * block_size]),
                    tuple(keys) if keys else None))
                if want != h:
                    raise AssertionError("BlockStored hash %d is not "
                                         "sha256_cbor of its tokens" % i)
                self.checked += 1
                prev = h
        for h in hashes:
            if h in self.blocks:
                raise AssertionError("BlockStored of a block already "
                                     "stored")
            self.blocks.add(h)
            self.stored += 1


class Subscriber:
    def __init__(self, args):
        self.ctx = zmq.Context.instance()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.RCVHWM, args.rcvhwm)
        if args.rcvbuf:
            self.sub.setsockopt(zmq.RCVBUF, args.rcvbuf)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, args.topic)
        self.sub.connect(args.sub)
        self.replay_ep = args.replay
        self.index = Index(args.hash_seed)
        self.next = 0          # the next seq to apply
        self.pending = {}      # seq -> payload, received ahead of next
        self.gaps = 0          # replays that filled a hole
        self.live = 0

    def drain(self):
        while self.next in self.pending:
            self.index.apply(self.pending.pop(self.next))
            self.next += 1


def replay_stream(ctx, endpoint, start):
    """Replays with a DEALER, which (unlike REQ) may read every message of
    the answer: [b'', seq, payload] ... [b'', -1, b'']."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    s.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    poller = zmq.Poller()
    poller.register(s, zmq.POLLIN)
    while True:
        if not poller.poll(10000):
            s.close()
            raise AssertionError("replay request timed out")
        frames = s.recv_multipart()
        seq = int.from_bytes(frames[1], "big", signed=True)
        if seq == END_SEQ:
            break
        out.append((seq, frames[2]))
    s.close()
    return out


def run(args):
    sub = Subscriber(args)
    ctx = sub.ctx
    deadline = time.monotonic() + args.timeout
    expect = None

    def fill_from(start):
        nonlocal sub
        got = replay_stream(ctx, args.replay, start)
        for seq, payload in got:
            if seq >= sub.next:
                sub.pending.setdefault(seq, payload)
        if got and got[0][0] > start:
            raise AssertionError("batch %d left the replay ring (oldest "
                                 "kept: %d)" % (start, got[0][0]))
        sub.drain()
        return len(got)

    time.sleep(args.connect_wait)
    if not args.no_initial_replay:
        fill_from(0)
    if args.stall:
        time.sleep(args.stall)   # a slow router: the PUB socket drops
    poller = zmq.Poller()
    poller.register(sub.sub, zmq.POLLIN)
    while time.monotonic() < deadline:
        if poller.poll(50):
            topic, seq_b, payload = sub.sub.recv_multipart()
            seq = int.from_bytes(seq_b, "big")
            sub.live += 1
            if seq >= sub.next:
                sub.pending.setdefault(seq, payload)
            if args.slow:
                time.sleep(args.slow)
        if sub.pending and min(sub.pending) > sub.next:
            sub.gaps += 1            # a hole: batches the PUB dropped
            fill_from(sub.next)
        sub.drain()
        if expect is None and args.expect_json and \
                os.path.exists(args.expect_json):
            with open(args.expect_json) as f:
                text = f.read()
            if text.endswith("\n"):
                expect = json.loads(text)["events"]
        if expect is not None:
            if sub.next <= expect["last_seq"] and not poller.poll(100):
                sub.gaps += 1        # the tail went missing: replay it
                fill_from(sub.next)
            if sub.next > expect["last_seq"]:
                break
        elif not args.expect_json and not sub.pending and \
                time.monotonic() > deadline - args.timeout + args.idle:
            break
    idx = sub.index
    print("subscriber: %d batches (%d live, %d gaps filled by replay), "
          "%d blocks stored, %d removed, %d clears, %d hashes verified; "
          "%d blocks cached" % (sub.next, sub.live, sub.gaps, idx.stored,
                                idx.removed, idx.cleared, idx.checked,
                                len(idx.blocks)))
    if expect is None:
        return 0 if not args.expect_json else fail("no report from the "
                                                   "publisher in time")
    if sub.next <= expect["last_seq"]:
        return fail("only %d of %d batches" % (sub.next,
                                               expect["last_seq"] + 1))
    if len(idx.blocks) != expect["cached_blocks_end"]:
        return fail("rebuilt %d cached blocks, the node has %d" %
                    (len(idx.blocks), expect["cached_blocks_end"]))
    if args.min_gaps and sub.gaps < args.min_gaps:
        return fail("expected a gap for replay to fill, saw %d" % sub.gaps)
    if cbor2 and idx.stored and not idx.checked:
        return fail("no BlockStored hash could be verified")
    print("subscriber: rebuilt set equals cached_blocks_end (%d)" %
          len(idx.blocks))
    return 0


def fail(msg):
    print("subscriber: FAIL: " + msg)
    return 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sub", required=True, help="PUB endpoint")
    ap.add_argument("--replay", required=True, help="ROUTER endpoint")
    ap.add_argument("--topic", default="", help="topic prefix")
    ap.add_argument("--hash-seed", default="0",
                    help="sha256_cbor seed (PYTHONHASHSEED) to verify")
    ap.add_argument("--expect-json", help="kvpool sim --json output file")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--idle", type=float, default=5,
                    help="without --expect-json: stop after this long")
    ap.add_argument("--rcvhwm", type=int, default=1000)
    ap.add_argument("--rcvbuf", type=int, default=0)
    ap.add_argument("--connect-wait", type=float, default=0.2)
    ap.add_argument("--stall", type=float, default=0,
                    help="sleep before reading the live stream")
    ap.add_argument("--slow", type=float, default=0,
                    help="sleep after each live batch")
    ap.add_argument("--no-initial-replay", action="store_true",
                    help="do not ask for seq 0 on: a gap will")
    ap.add_argument("--min-gaps", type=int, default=0,
                    help="fail unless replay filled this many gaps")
    sys.exit(run(ap.parse_args()))


if __name__ == "__main__":
    main()
