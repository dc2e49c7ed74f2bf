# SPDX-License-Identifier: MIT
"""Pool, Manager, Sequence, block hashes: thin wrappers over libkvpool."""
import dataclasses
import errno as _errno
import os
import struct
import threading
from collections import namedtuple
from typing import List, Optional

from ._ffi import ffi, lib
from .errors import error, InvalidArgument, NotFound

if os.environ.get("KVPOOL_NO_NUMPY"):
    np = None
else:
    try:
        import numpy as np
    except ImportError:
        np = None

#: Element types of KV data (kvp_dtype).
DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "f64": 3, "u8": 4}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
#: Eviction policies (kvp_policy).
POLICIES = {"lru": 0, "lfu": 1, "longest": 2, "priority": 3}
_POLICY_NAMES = {v: k for k, v in POLICIES.items()}
#: Retention priorities (kvpool.h): the default, the highest below a
#: pin, a pin (never evicted; capped per manager).
RETAIN_DEFAULT, RETAIN_MAX, RETAIN_PIN = 0, 14, 15
#: Hash profiles (kvp_hash_algo): a new profile of the C library is one
#: line here.
HASH_ALGOS = {
    "sha256": 0,
    "xxh3_128": 1,
    "sha256_cbor": 2,
}
#: kvp_admit() results.
ADMIT_OK, ADMIT_LATER, ADMIT_NEVER = 0, 1, 2
_EVENT_TYPES = {0: "stored", 1: "removed", 2: "cleared"}
POOL_ZERO, POOL_NOCACHE, POOL_K_ONLY = 1, 2, 4
PREFIX_CACHE, EXACT_LIMITS = 1, 2
#: kvp_append_info.last_block when the sequence holds no block.
NO_BLOCK = 0xFFFFFFFF
METRICS_PROMETHEUS, METRICS_NO_EOF = 1, 2

#: A copy-on-write copy the engine must perform: the first `tokens` token
#: slots of block src into block dst.
Copy = namedtuple("Copy", "src dst tokens")


@dataclasses.dataclass(frozen=True)
class Layout:
    """KV data shape of a data-owning pool."""
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "f32"


@dataclasses.dataclass(frozen=True)
class PoolConfig:
    """A pool's configuration as in effect (kvp_pool_get_config): the
    arguments of Pool(), cache_blocks resolved (0: no thread caches), so
    Pool(**vars(pool.config)) makes a pool like it."""
    num_blocks: int
    block_tokens: int
    cache_blocks: int
    device_id: int
    layout: Optional[Layout]
    zero: bool
    nocache: bool
    k_only: bool


@dataclasses.dataclass(frozen=True)
class AppendInfo:
    """What Manager.append_ex() did (struct kvp_append_info).

    last_block holds the sequence's last token (None if it holds none),
    num_tokens is the sequence's count after the append, new_blocks the
    blocks it allocated (a copy-on-write's destination included), cow
    the Copy the engine must perform, or None."""
    last_block: Optional[int]
    num_tokens: int
    new_blocks: int
    cow: Optional[Copy]


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """kvp_pool_stats(): exact at quiescence, approximate otherwise."""
    total: int
    free: int
    used: int
    in_thread_caches: int
    peak_used: int
    allocs: int
    frees: int
    cache_blocks: int
    threads: int
    evictable: int
    cache_evictions: int


@dataclasses.dataclass(frozen=True)
class Stats:
    """kvp_manager_stats(): exact at quiescence, approximate otherwise."""
    sequences: int
    tokens: int
    seq_creates: int
    seq_frees: int
    appends: int
    forks: int
    evictions: int
    cow_copies: int
    blocks_allocated: int
    blocks_released: int
    blocks_used: int
    blocks_total: int
    bytes_per_block: int
    prefix_queries: int
    prefix_hits: int
    prefix_hit_rate: float
    prefix_cached_blocks: int
    prefix_commits: int
    prefix_evictions: int
    prefix_pinned: int
    retention_clock: int
    prefix_uncached: int
    events: int


@dataclasses.dataclass(frozen=True)
class SeqInfo:
    """kvp_seq_info()."""
    num_tokens: int
    num_blocks: int
    last_access: int
    access_count: int
    priority: int


@dataclasses.dataclass(frozen=True)
class Event:
    """A prefix-cache event (struct kvp_event).

    type is "stored", "removed" or "cleared"; hashes the blocks' 32-byte
    hashes; parent (stored only) the hash before hashes[0], None at the
    root; block_tokens and num_tokens (stored only) as in the C struct.
    """
    type: str
    hashes: List[bytes]
    parent: Optional[bytes]
    block_tokens: int
    num_tokens: int


def _fill(cls, c):
    return cls(*[getattr(c, f.name) for f in dataclasses.fields(cls)])


def _check(rc, what=None):
    if rc < 0:
        raise error(rc, what)
    return rc


def _f32(x):
    """The shortest decimal that reads back as the same C float (0.9, not
    0.8999999761581421)."""
    for digits in range(6, 10):
        y = float("%.*g" % (digits, x))
        if struct.pack("f", y) == struct.pack("f", x):
            return y
    return x


def _policy(name):
    try:
        return POLICIES[name]
    except (KeyError, TypeError):
        raise InvalidArgument(22, "unknown policy %r (known: %s)"
                              % (name, ", ".join(POLICIES))) from None


_tls = threading.local()


def _scratch():
    """This thread's append buffers (a copy, its count, an append
    info)."""
    try:
        return _tls.s
    except AttributeError:
        _tls.s = (ffi.new("struct kvp_copy[1]"), ffi.new("uint32_t *"),
                  ffi.new("struct kvp_append_info *"))
        return _tls.s


def _np_unsigned(values, dtype):
    """A 1-D NumPy array as dtype (no copy when it already is), or the
    errors a list gets: OverflowError for a value out of dtype's range
    (a cast would wrap 2**32 + k to k), TypeError for a non-integer one,
    ValueError for an array of other than one dimension."""
    if values.ndim != 1:
        raise ValueError("expected a 1-D array, got %d dimensions"
                         % values.ndim)
    if values.dtype == dtype:
        return np.ascontiguousarray(values)
    if values.dtype.kind not in "iub" and values.size:
        raise TypeError("expected integers, got an array of %s"
                        % values.dtype)
    if values.size and values.dtype.kind != "b":
        lo, hi = int(values.min()), int(values.max())
        if lo < 0 or hi > int(np.iinfo(dtype).max):
            raise OverflowError("%d does not fit in %s"
                                % (lo if lo < 0 else hi, np.dtype(dtype)))
    return np.ascontiguousarray(values, dtype=dtype)


def _u32(values):
    """A uint32_t[] for a list or a 1-D NumPy array (no copy for
    uint32)."""
    if np is not None and isinstance(values, np.ndarray):
        values = _np_unsigned(values, np.uint32)
        return ffi.from_buffer("uint32_t[]", values), len(values), values
    if not isinstance(values, (list, tuple)):
        values = list(values)
    return ffi.new("uint32_t[]", values), len(values), None


def _u64(values):
    """A uint64_t[] for a list or a 1-D NumPy array (no copy for
    uint64)."""
    if np is not None and isinstance(values, np.ndarray):
        values = _np_unsigned(values, np.uint64)
        return ffi.from_buffer("uint64_t[]", values), len(values), values
    values = list(values)
    return ffi.new("uint64_t[]", values), len(values), None


def _out(kind, n):
    """An output array of n int32/int64 elements and its C pointer."""
    if np is not None:
        arr = np.zeros(n, dtype=np.int32 if kind == "int32_t" else np.int64)
        return arr, ffi.from_buffer(kind + "[]", arr)
    buf = ffi.new(kind + "[]", max(n, 1))
    return buf, buf


def _result(arr, n):
    if np is not None:
        return arr[:n]
    return list(arr[0:n])


class BlockHashes:
    """Chained block hashes (kvp_hash_blocks): a sequence of 32-byte
    bytes objects, kept in C layout so that a Manager takes them without
    a copy.  XXH3-128 fills the first 16 bytes of each."""

    __slots__ = ("_c", "_n")

    def __init__(self, hashes=()):
        if isinstance(hashes, BlockHashes):
            self._c, self._n = hashes._c, hashes._n
            return
        hashes = list(hashes)
        self._n = len(hashes)
        self._c = ffi.new("struct kvp_hash[]", max(self._n, 1))
        for i, h in enumerate(hashes):
            if len(h) != 32:
                raise ValueError("a block hash is 32 bytes")
            ffi.memmove(self._c[i].b, h, 32)

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return BlockHashes([self[j] for j in range(*i.indices(self._n))])
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("block hash index out of range")
        return bytes(ffi.buffer(self._c[i].b, 32))

    def __iter__(self):
        return (self[i] for i in range(self._n))

    def __eq__(self, other):
        return list(self) == list(other)

    def __repr__(self):
        return "BlockHashes(%d)" % self._n


def _hashes(h):
    if not isinstance(h, BlockHashes):
        h = BlockHashes(h)
    return h._c, h._n


def hash_blocks(tokens, block_tokens, algo="sha256", parent=None, salt=None,
                lora=None):
    """Chained hashes of the len(tokens) // block_tokens full blocks.

    algo is a key of HASH_ALGOS; parent (32 bytes) continues a chain (None:
    the root, where salt, bytes, is mixed in); lora names an adapter mixed
    into every block.  A pure function, safe from any thread."""
    try:
        a = HASH_ALGOS[algo]
    except KeyError:
        raise InvalidArgument(22, "unknown hash algorithm %r (known: %s)"
                              % (algo, ", ".join(HASH_ALGOS))) from None
    toks, n, _keep = _u32(tokens)
    nblocks = n // block_tokens if block_tokens > 0 else 0
    out = BlockHashes()
    out._c = ffi.new("struct kvp_hash[]", max(nblocks, 1))
    par = ffi.NULL
    if parent is not None:
        par = BlockHashes([parent])._c
    keys = ffi.NULL
    if salt is not None or lora is not None:
        keys = ffi.new("struct kvp_hash_keys *")
        salt_c = ffi.from_buffer(salt) if salt else ffi.NULL
        lora_c = ffi.new("char[]", lora.encode()) if lora else ffi.NULL
        keys.salt, keys.salt_len, keys.lora = salt_c, len(salt or b""), \
            lora_c
    out._n = _check(lib.kvp_hash_blocks_cap(a, par, keys, toks, n,
                                            block_tokens, out._c,
                                            max(nblocks, 1)), "hash_blocks")
    return out


def set_xxh3_seed(seed):
    """Seeds XXH3-128 hashes process-wide (so processes agree)."""
    _check(lib.kvp_hash_set_xxh3_seed(seed))


def thread_flush():
    """Returns the calling thread's cached blocks (and parked references)
    to their pools.  A worker thread calls it last: Thread.join() returns
    before the thread's C-level exit, where the library would otherwise
    do it, so a check() or a stats() right after join() may run while
    that exit is still returning blocks."""
    lib.kvp_thread_flush()


class Pool:
    """A pool of blocks (kvp_pool).  Thread-safe; close() (or the end of
    a with block, or garbage collection) drops this object's reference.

    num_blocks may be 0: an empty pool (a device with no KV memory),
    where every allocation of a block or more raises NoSpace and
    sequences of 0 tokens work.  layout: None for an ID-only pool, or a
    Layout for a pool that owns the KV data (then block_data(),
    Manager.write() and friends work); k_only=True (with a layout) keeps
    K alone, half the bytes: the data calls take and give V as None."""

    _p = ffi.NULL
    _k_only = False

    def __init__(self, num_blocks, block_tokens=16, cache_blocks=0,
                 device_id=-1, layout=None, zero=False, nocache=False,
                 k_only=False):
        cfg = ffi.new("struct kvp_pool_config *")
        cfg.num_blocks, cfg.block_tokens = num_blocks, block_tokens
        cfg.cache_blocks, cfg.device_id = cache_blocks, device_id
        cfg.flags = (POOL_ZERO if zero else 0) | \
            (POOL_NOCACHE if nocache else 0) | (POOL_K_ONLY if k_only else 0)
        if layout is not None:
            lay = ffi.new("struct kvp_layout *")
            lay.num_layers, lay.num_kv_heads = layout.num_layers, \
                layout.num_kv_heads
            lay.head_dim = layout.head_dim
            try:
                lay.dtype = DTYPES[layout.dtype]
            except KeyError:
                raise InvalidArgument(22, "unknown dtype %r" % (layout.dtype,)
                                      ) from None
            cfg.layout = lay
        out = ffi.new("struct kvp_pool **")
        _check(lib.kvp_pool_create(cfg, out), "Pool")
        self._p = out[0]
        self._k_only = bool(k_only)  # the data calls' V; never changes

    def close(self):
        """Drops this object's pool reference (managers keep their own)."""
        p, self._p = self._p, ffi.NULL
        if p != ffi.NULL:
            lib.kvp_pool_unref(p)

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def block_tokens(self):
        return lib.kvp_pool_block_tokens(self._p)

    @property
    def block_bytes(self):
        """Bytes of KV data per block (0 for an ID-only pool)."""
        return lib.kvp_block_bytes(self._p)

    @property
    def config(self):
        """The configuration in effect (kvp_pool_get_config): a
        PoolConfig."""
        cfg = ffi.new("struct kvp_pool_config *")
        lay = ffi.new("struct kvp_layout *")
        _check(lib.kvp_pool_get_config(self._p, cfg, lay), "config")
        layout = None
        if cfg.layout != ffi.NULL:
            layout = Layout(lay.num_layers, lay.num_kv_heads, lay.head_dim,
                            _DTYPE_NAMES.get(lay.dtype, lay.dtype))
        return PoolConfig(cfg.num_blocks, cfg.block_tokens, cfg.cache_blocks,
                          cfg.device_id, layout, bool(cfg.flags & POOL_ZERO),
                          bool(cfg.flags & POOL_NOCACHE),
                          bool(cfg.flags & POOL_K_ONLY))

    @property
    def num_blocks(self):
        return self.config.num_blocks

    @property
    def device_id(self):
        return self.config.device_id

    @property
    def layout(self):
        """The Layout of a data-owning pool, None for an ID-only one."""
        return self.config.layout

    @property
    def k_only(self):
        """True for a pool that stores K alone (k_only=True)."""
        return self.config.k_only

    @property
    def row_bytes(self):
        """Bytes of one token's K (or V) row for one layer."""
        return lib.kvp_pool_row_bytes(self._p)

    def alloc(self, n):
        """Allocates n blocks (all or nothing; NoSpace) and returns their
        ids, each with one reference."""
        ids = ffi.new("uint32_t[]", max(n, 1))
        _check(lib.kvp_pool_alloc(self._p, n, ids), "alloc")
        return list(ids[0:n])

    def free(self, ids):
        """Drops one reference on each id (all or nothing)."""
        c, n, _keep = _u32(ids)
        _check(lib.kvp_pool_free(self._p, c, n), "free")

    def ref(self, block):
        """Adds one reference to a block the caller holds."""
        _check(lib.kvp_block_ref(self._p, block), "ref")

    def refcount(self, block):
        """The block's holders (0 = free): block-table chunks that forks
        share count once, plus each table's last block and each raw
        reference (kvp_block_refcount)."""
        return _check(lib.kvp_block_refcount(self._p, block), "refcount")

    def block_data(self, block):
        """A writable memoryview of a block's KV data.  Valid while the
        pool lives and the caller holds a reference on the block."""
        n = self.block_bytes
        if n == 0:
            raise InvalidArgument(22, "an ID-only pool has no block data")
        p = lib.kvp_block_data(self._p, block)
        if p == ffi.NULL:
            raise error(-_errno.ERANGE, "block_data")
        return memoryview(ffi.buffer(p, n))

    def stats(self):
        st = ffi.new("struct kvp_pool_stats *")
        lib.kvp_pool_stats(self._p, st)
        return _fill(PoolStats, st)

    def check(self):
        """Checks the pool's invariants (quiescence required)."""
        _check(lib.kvp_pool_check(self._p), "pool check")

    def metrics(self, managers=(), prometheus=False, eof=True):
        """The pool's and the managers' counters and gauges as OpenMetrics
        text (kvp_metrics_write), or the Prometheus text format 0.0.4 with
        prometheus=True; eof=False leaves out the closing "# EOF"."""
        mgrs = list(managers)
        arr = ffi.new("struct kvp_manager *[]", max(len(mgrs), 1))
        for i, m in enumerate(mgrs):
            if not isinstance(m, Manager):
                raise InvalidArgument(22, "metrics: %r is not a Manager"
                                      % (m,))
            arr[i] = m._m
        flags = (METRICS_PROMETHEUS if prometheus else 0) | \
            (0 if eof else METRICS_NO_EOF)
        n = ffi.new("size_t *")
        cap = 16384
        while True:
            buf = ffi.new("char[]", cap)
            rc = lib.kvp_metrics_format(self._p, arr, len(mgrs), flags, buf,
                                        cap, n)
            if rc != -_errno.ENOBUFS:
                _check(rc, "metrics")
                return ffi.string(buf, n[0]).decode("utf-8")
            cap = n[0] + 4096  # counters may have grown meanwhile


class Manager:
    """Sequences of one model over a Pool (kvp_manager).

    Every method may be called from any number of Python threads at once
    (the GIL is released during each C call); calls on one sequence are
    serialised by the library, different sequences never contend.  Only
    close() and set_event_callback() need that no other thread uses the
    manager.

    eviction_threshold (utilisation at which eviction is due, in [0, 1])
    and watermark (fraction of the pool kept free at admission, in
    [0, 1)) are taken as given, 0 included (KVP_EXACT_LIMITS).  The
    policy ("lru", "lfu", "longest", "priority") may be changed at any
    time: set_policy() or `manager.policy = "lfu"`.
    """

    _m = ffi.NULL
    _cb = None
    _lost = 0
    _lost_lock = threading.Lock()

    @property
    def events_lost(self):
        """Events whose callback raised (each such event is lost)."""
        with self._lost_lock:
            return self._lost

    def __init__(self, pool, policy="lru", eviction_threshold=0.9,
                 watermark=0.01, prefix_cache=False, max_pinned=0,
                 name=None):
        cfg = ffi.new("struct kvp_manager_config *")
        cfg.pool = pool._p
        cfg.policy = _policy(policy)
        cfg.eviction_threshold, cfg.watermark = eviction_threshold, watermark
        cfg.flags = (PREFIX_CACHE if prefix_cache else 0) | EXACT_LIMITS
        cfg.max_pinned = max_pinned
        if name is not None:
            if not isinstance(name, str):
                raise InvalidArgument(22, "name must be a str")
            cname = ffi.new("char[]", name.encode("utf-8"))
            cfg.name = cname
        out = ffi.new("struct kvp_manager **")
        _check(lib.kvp_manager_create(cfg, out), "Manager")
        self._m = out[0]
        self.pool = pool
        self._cb = None
        self.block_tokens = pool.block_tokens

    def close(self):
        """Frees every sequence and the manager; no other thread may use
        it during or after the call."""
        m, self._m = self._m, ffi.NULL
        if m != ffi.NULL:
            lib.kvp_manager_destroy(m)
        self._cb = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- configuration -------------------------------------------------
    def _config(self):
        cfg = ffi.new("struct kvp_manager_config *")
        _check(lib.kvp_manager_get_config(self._m, cfg), "config")
        return cfg

    @property
    def policy(self):
        """The eviction policy's name; assigning one calls set_policy()."""
        p = self._config().policy
        return _POLICY_NAMES.get(p, p)

    @policy.setter
    def policy(self, name):
        self.set_policy(name)

    def set_policy(self, policy):
        """Changes the policy by which evict(), evict_until() and
        peek_victim() choose, while sequences live and other threads run:
        choices that start after the call use it."""
        _check(lib.kvp_manager_set_policy(self._m, _policy(policy)),
               "set_policy")

    @property
    def eviction_threshold(self):
        """Utilisation at which eviction is due (evict_until's default
        target)."""
        return _f32(self._config().eviction_threshold)

    @property
    def watermark(self):
        """Fraction of the pool admit() keeps free."""
        return _f32(self._config().watermark)

    # -- sequences ------------------------------------------------------
    def sequences(self):
        """The ids of the manager's sequences, in no particular order (one
        created or freed meanwhile may or may not be listed)."""
        cap = 64
        n = ffi.new("uint32_t *")
        while True:
            ids = ffi.new("uint64_t[]", cap)
            rc = lib.kvp_manager_seqs(self._m, ids, cap, n)
            if rc != -_errno.ENOBUFS:
                _check(rc, "sequences")
                return list(ids[0:n[0]])
            cap = max(n[0] + 16, 2 * cap)  # more may come meanwhile

    def create(self, seq, num_tokens=0):
        """Creates sequence seq of num_tokens tokens; returns its handle."""
        _check(lib.kvp_seq_create(self._m, seq, num_tokens), "create")
        return Sequence(self, seq)

    def prefix_match(self, hashes):
        """How many of hashes (from hash_blocks), from the first, are
        cached now: the hit create_cached would take (before its cap on
        the last token), for sizing a request before admitting it.  Takes
        nothing and changes no statistic; advice, as another thread may
        evict or commit the moment after."""
        c, n = _hashes(hashes)
        cached = ffi.new("uint32_t *")
        _check(lib.kvp_prefix_match(self._m, c, n, cached), "prefix_match")
        return cached[0]

    def create_cached(self, seq, hashes, num_tokens):
        """Creates seq reusing the longest cached prefix of hashes (from
        hash_blocks); the handle's cached_tokens says how many tokens
        were served from the cache."""
        c, n = _hashes(hashes)
        cached = ffi.new("uint32_t *")
        _check(lib.kvp_seq_create_cached(self._m, seq, c, n, num_tokens,
                                         cached), "create_cached")
        return Sequence(self, seq, cached[0])

    def commit(self, seq, hashes):
        """Registers seq's full blocks under hashes; returns how many
        blocks were newly cached."""
        c, n = _hashes(hashes)
        return _check(lib.kvp_seq_commit(self._m, seq, c, n), "commit")

    def commit_retained(self, seq, hashes, ranges):
        """commit() with retention: ranges is a list of (first_token,
        num_tokens, priority[, duration]) (num_tokens 0: to the end;
        priority 0..RETAIN_PIN; duration in ticks of the retention clock,
        0 or absent: for ever).  Returns (blocks newly cached, pins
        refused by the manager's cap)."""
        c, n = _hashes(hashes)
        rg = ffi.new("struct kvp_retention[]", max(len(ranges), 1))
        for i, r in enumerate(ranges):
            rg[i].first_token, rg[i].num_tokens, rg[i].priority = r[:3]
            rg[i].duration = r[3] if len(r) > 3 else 0
        unpinned = ffi.new("uint32_t *")
        added = _check(lib.kvp_seq_commit_retained(
            self._m, seq, c, n, rg, len(ranges), unpinned),
            "commit_retained")
        return added, unpinned[0]

    def tick(self, steps=1):
        """Advances the retention clock by steps; returns the new time."""
        now = ffi.new("uint64_t *")
        _check(lib.kvp_manager_tick(self._m, steps, now), "tick")
        return now[0]

    def retention(self, block_hash):
        """(priority, expiry) of the block cached under block_hash (one
        element of a Hashes); NotFound if none."""
        c, n = _hashes([bytes(block_hash)])
        prio = ffi.new("uint32_t *")
        exp = ffi.new("uint64_t *")
        rc = lib.kvp_prefix_retention(self._m, c, prio, exp)
        if rc == -_errno.ENOENT:  # kvp_strerror's text names a sequence
            raise NotFound(_errno.ENOENT,
                           "retention: no block cached under this hash")
        _check(rc, "retention")
        return prio[0], exp[0]

    def append(self, seq, num_tokens=1):
        """Appends token slots; returns the Copy the engine must perform
        (copy-on-write of a shared last block) or None."""
        try:
            cow, ncow, _info = _tls.s
        except AttributeError:
            cow, ncow, _info = _scratch()
        rc = lib.kvp_seq_append(self._m, seq, num_tokens, cow, 1, ncow)
        if rc:
            raise error(rc, "append")
        if ncow[0]:
            c = cow[0]
            return Copy(c.src, c.dst, c.tokens)
        return None

    def append_ex(self, seq, num_tokens=1):
        """append(), reporting what it did: an AppendInfo (the block that
        holds the last token, the count, the blocks allocated and the
        Copy to perform or None)."""
        try:
            cow, ncow, info = _tls.s
        except AttributeError:
            cow, ncow, info = _scratch()
        rc = lib.kvp_seq_append_ex(self._m, seq, num_tokens, cow, 1, ncow,
                                   info)
        if rc:
            raise error(rc, "append_ex")
        c = cow[0]
        return AppendInfo(
            None if info.last_block == NO_BLOCK else info.last_block,
            info.num_tokens, info.new_blocks,
            Copy(c.src, c.dst, c.tokens) if ncow[0] else None)

    def reserve(self, seq, num_tokens):
        """Makes room in seq's block table for num_tokens tokens in all,
        so that appends up to that count allocate no host memory (they
        still take blocks from the pool).  Lasts until seq is freed or
        its table shrinks; a fork does not inherit it."""
        _check(lib.kvp_seq_reserve(self._m, seq, num_tokens), "reserve")

    def append_many(self, seqs, num_tokens=None):
        """Appends to every sequence of seqs in one C call
        (kvp_seq_append_batch): num_tokens None is one token each, else a
        list of counts.  Returns the list of copies to perform (at most
        one per sequence).  If an append fails, the exception's `done`
        attribute says how many sequences (seqs[:done]) were appended."""
        s, n, _k1 = _u64(seqs)
        toks = ffi.NULL
        if num_tokens is not None:
            toks, nt, _k2 = _u32(num_tokens)
            if nt != n:
                raise InvalidArgument(22, "append_many: %d counts for %d "
                                      "sequences" % (nt, n))
        cow = ffi.new("struct kvp_copy[]", max(n, 1))
        ncow = ffi.new("uint32_t *")
        done = 0
        copies = []
        while True:
            rc = lib.kvp_seq_append_batch(self._m, s + done,
                                          toks + done if num_tokens is not None
                                          else ffi.NULL,
                                          n - done, cow, n, ncow)
            copies += [Copy(cow[i].src, cow[i].dst, cow[i].tokens)
                       for i in range(ncow[0])]
            if rc < 0:
                e = error(rc, "append_many")
                e.done, e.copies = done, copies
                raise e
            done += rc
            if done >= n:
                return copies

    def fork(self, src, dst):
        """Creates dst sharing all of src's blocks; returns its handle."""
        _check(lib.kvp_seq_fork(self._m, src, dst), "fork")
        return Sequence(self, dst)

    def free(self, seq):
        _check(lib.kvp_seq_free(self._m, seq), "free")

    def truncate(self, seq, num_tokens):
        """Rolls seq back to num_tokens tokens."""
        _check(lib.kvp_seq_truncate(self._m, seq, num_tokens), "truncate")

    def stream_trim(self, seq, sink_tokens, window_tokens):
        """StreamingLLM trim; returns the number of tokens dropped."""
        ev = ffi.new("uint32_t *")
        _check(lib.kvp_seq_stream_trim(self._m, seq, sink_tokens,
                                       window_tokens, ev), "stream_trim")
        return ev[0]

    def set_priority(self, seq, priority):
        _check(lib.kvp_seq_set_priority(self._m, seq, priority),
               "set_priority")

    def info(self, seq):
        i = ffi.new("struct kvp_seq_info *")
        _check(lib.kvp_seq_info(self._m, seq, i), "info")
        return _fill(SeqInfo, i)

    def sequence(self, seq):
        """A handle on an existing sequence (no check that it exists)."""
        return Sequence(self, seq)

    def blocks(self, seq):
        """seq's block ids (NumPy int32 array, or a list)."""
        cap = 64
        n = ffi.new("uint32_t *")
        while True:
            arr, p = _out("int32_t", cap)
            rc = lib.kvp_seq_blocks(self._m, seq,
                                    ffi.cast("uint32_t *", p), cap, n)
            if rc != -_errno.ENOBUFS:
                _check(rc, "blocks")
                return _result(arr, n[0])
            cap = max(n[0], 2 * cap)

    # -- scheduling -----------------------------------------------------
    def admit(self, num_tokens):
        """ADMIT_OK, ADMIT_LATER or ADMIT_NEVER for a new request."""
        return _check(lib.kvp_admit(self._m, num_tokens), "admit")

    def evict(self):
        """Evicts one sequence by policy; returns its id (NotFound if no
        sequence is left)."""
        v = ffi.new("uint64_t *")
        _check(lib.kvp_evict(self._m, v), "evict")
        return v[0]

    def peek_victim(self):
        """The sequence evict() would choose now, without evicting it; None
        if there is none.  Advice: another thread may change the choice
        before the next call."""
        v = ffi.new("uint64_t *")
        rc = lib.kvp_evict_peek(self._m, v)
        if rc == -_errno.ENOENT:
            return None
        _check(rc, "peek_victim")
        return v[0]

    def evict_until(self, target_util=-1.0, cap=4096):
        """Evicts until utilisation <= target_util (negative: the
        manager's threshold); returns (victims, target_met)."""
        v = ffi.new("uint64_t[]", max(cap, 1))
        n = ffi.new("uint32_t *")
        rc = _check(lib.kvp_evict_until(self._m, target_util, v, cap, n),
                    "evict_until")
        return list(v[0:n[0]]), rc == 0

    def stats(self):
        st = ffi.new("struct kvp_stats *")
        lib.kvp_manager_stats(self._m, st)
        return _fill(Stats, st)

    @property
    def id(self):
        """The manager's process-unique id."""
        return lib.kvp_manager_id(self._m)

    @property
    def name(self):
        """The manager's name: the `manager` label of its metrics."""
        return ffi.string(lib.kvp_manager_name(self._m)).decode("utf-8")

    def check(self):
        """Checks the pool's and its managers' invariants (quiescence)."""
        _check(lib.kvp_manager_check(self._m), "manager check")

    def prefix_reset(self):
        _check(lib.kvp_prefix_reset(self._m), "prefix_reset")

    def set_event_callback(self, fn):
        """Calls fn(Event) for every prefix-cache event (None: stop).

        fn runs synchronously IN THE THREAD WHOSE CALL CAUSED THE EVENT,
        holding the GIL: "stored" from commit(), "removed" from any
        allocation on the pool (any manager's, any thread's, including
        threads that are not Python's), "cleared" from prefix_reset().
        So it runs concurrently from several threads, but for one hash in
        the order the events happened.  It must not call kvpool on the
        pool (it runs inside the library's call).  An exception it raises
        is printed (sys.unraisablehook) and its event is lost: counted in
        events_lost.  Set it before other threads use the manager."""
        if fn is None:
            _check(lib.kvp_manager_set_event_cb(self._m, ffi.NULL, ffi.NULL))
            self._cb = None
            return

        def trampoline(ev, _arg):
            hs = [bytes(ffi.buffer(ev.hashes[i].b, 32))
                  for i in range(ev.nhashes)] if ev.hashes != ffi.NULL else []
            parent = None
            if ev.parent != ffi.NULL:
                parent = bytes(ffi.buffer(ev.parent.b, 32))
            try:
                fn(Event(_EVENT_TYPES.get(ev.type, str(ev.type)), hs,
                         parent, ev.block_tokens, ev.num_tokens))
            except BaseException:
                with self._lost_lock:
                    self._lost += 1
                raise  # printed by cffi, as before

        cb = ffi.callback("void(const struct kvp_event *, void *)",
                          trampoline)
        _check(lib.kvp_manager_set_event_cb(self._m, cb, ffi.NULL))
        self._cb = cb  # the C side holds it: keep it alive

    # -- kernel-facing exports -----------------------------------------
    def block_table(self, seqs, pad=-1):
        """[len(seqs)][longest] int32 block table (FlashAttention, vLLM),
        rows padded with pad: a 2-D NumPy array, or a list of lists."""
        s, n, _k = _u64(seqs)
        while True:
            stride = _check(lib.kvp_export_block_table(self._m, s, n,
                                                       ffi.NULL, 0, pad),
                            "block_table")
            arr, p = _out("int32_t", n * stride)
            rc = lib.kvp_export_block_table(self._m, s, n, p, stride, pad)
            if rc == -_errno.ENOBUFS:
                continue  # a sequence grew meanwhile
            _check(rc, "block_table")
            if np is not None:
                return arr.reshape(n, stride)
            return [list(p[i * stride:(i + 1) * stride]) for i in range(n)]

    def csr(self, seqs):
        """FlashInfer paged layout: (indptr, indices, last_page_len)."""
        s, n, _k = _u64(seqs)
        while True:
            need = _check(lib.kvp_export_csr(self._m, s, n, ffi.NULL,
                                             ffi.NULL, 0, ffi.NULL), "csr")
            indptr, pp = _out("int32_t", n + 1)
            indices, pi = _out("int32_t", need)
            last, pl = _out("int32_t", n)
            rc = lib.kvp_export_csr(self._m, s, n, pp, pi, need, pl)
            if rc == -_errno.ENOBUFS:
                continue
            _check(rc, "csr")
            return (_result(indptr, n + 1), _result(indices, need),
                    _result(last, n))

    def slot_mapping(self, seq, first_pos=0, n=None):
        """Slots (block * block_tokens + offset) of tokens first_pos ..
        first_pos + n - 1 (n None: to the end): NumPy int64, or a list."""
        if n is None:
            n = max(self.info(seq).num_tokens - first_pos, 0)
        arr, p = _out("int64_t", n)
        _check(lib.kvp_export_slot_mapping(self._m, seq, first_pos, n, p),
               "slot_mapping")
        return _result(arr, n)

    # -- KV data (data-owning pools) -----------------------------------
    def write(self, seq, pos, layer, k, v=None):
        """Writes token pos's K and V rows (bytes-like, row_bytes each);
        v is None for a K-only pool, and only for one."""
        rb = self.pool.row_bytes
        kb = ffi.from_buffer(k)
        vb = ffi.NULL if v is None else ffi.from_buffer(v)
        if len(kb) < rb or (v is not None and len(vb) < rb):
            raise InvalidArgument(22, "write: rows are %d bytes" % rb)
        if v is None and not self.pool._k_only:
            raise InvalidArgument(22, "write: this pool stores V: pass v")
        if v is not None and self.pool._k_only:
            raise InvalidArgument(22, "write: a K-only pool takes v=None")
        _check(lib.kvp_seq_write(self._m, seq, pos, layer, kb, vb), "write")

    def read(self, seq, pos, layer):
        """Token pos's K and V rows for one layer: (bytearray, bytearray),
        or (bytearray, None) for a K-only pool."""
        rb = self.pool.row_bytes
        k = bytearray(rb)
        v = None if self.pool._k_only else bytearray(rb)
        _check(lib.kvp_seq_read(self._m, seq, pos, layer, ffi.from_buffer(k),
                                ffi.NULL if v is None else ffi.from_buffer(v)),
               "read")
        return k, v

    def gather(self, seq, layer):
        """One layer of the whole sequence as contiguous K and V
        [tokens][heads][dim] bytearrays (V None for a K-only pool)."""
        rb = self.pool.row_bytes
        n = self.info(seq).num_tokens
        k = bytearray(rb * n)
        v = None if self.pool._k_only else bytearray(rb * n)
        if rb and n:
            _check(lib.kvp_seq_gather(
                self._m, seq, layer, ffi.from_buffer(k),
                ffi.NULL if v is None else ffi.from_buffer(v)), "gather")
        return k, v


class Sequence:
    """A handle on one sequence of a Manager.  As a context manager it
    frees the sequence at the end (if it still exists)."""

    __slots__ = ("manager", "id", "cached_tokens")

    def __init__(self, manager, seq, cached_tokens=0):
        self.manager, self.id, self.cached_tokens = manager, seq, \
            cached_tokens

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.manager.free(self.id)
        except NotFound:
            pass  # already freed or evicted

    def __repr__(self):
        return "Sequence(%d)" % self.id

    def append(self, num_tokens=1):
        return self.manager.append(self.id, num_tokens)

    def append_ex(self, num_tokens=1):
        return self.manager.append_ex(self.id, num_tokens)

    def reserve(self, num_tokens):
        self.manager.reserve(self.id, num_tokens)

    def fork(self, dst):
        return self.manager.fork(self.id, dst)

    def free(self):
        self.manager.free(self.id)

    def truncate(self, num_tokens):
        self.manager.truncate(self.id, num_tokens)

    def commit(self, hashes):
        return self.manager.commit(self.id, hashes)

    def set_priority(self, priority):
        self.manager.set_priority(self.id, priority)

    def info(self):
        return self.manager.info(self.id)

    def blocks(self):
        return self.manager.blocks(self.id)

    def slot_mapping(self, first_pos=0, n=None):
        return self.manager.slot_mapping(self.id, first_pos, n)

    def write(self, pos, layer, k, v=None):
        self.manager.write(self.id, pos, layer, k, v)

    def read(self, pos, layer):
        return self.manager.read(self.id, pos, layer)

    def gather(self, layer):
        return self.manager.gather(self.id, layer)

    @property
    def num_tokens(self):
        return self.info().num_tokens

