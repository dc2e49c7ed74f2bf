# SPDX-License-Identifier: MIT
"""Pool: a thin wrapper over libkvpool's kvp_pool (Manager and Sequence
are in _manager.py), and thread_flush."""
import errno as _errno

from . import _args
from ._args import live
from ._ffi import ffi, lib
from ._types import (_DTYPE_NAMES, DTYPES, Layout, MAX_BLOCKS,
                     MAX_CACHE_BLOCKS, METRICS_NO_EOF, METRICS_PROMETHEUS,
                     POOL_K_ONLY, POOL_NOCACHE, POOL_ZERO, PoolConfig,
                     PoolStats, _SMALL, _check, _fill, _u32)
from .errors import error, InvalidArgument


def thread_flush():
    """Returns the calling thread's cached blocks (and parked references)
    to their pools.  A worker thread calls it last: Thread.join() returns
    before the thread's C-level exit, where the library would otherwise
    do it, so a check() or a stats() right after join() may run while
    that exit is still returning blocks."""
    lib.kvp_thread_flush()


class Pool(_args.Handle):
    """A pool of blocks (kvp_pool).  Thread-safe; close() (or the end of
    a with block, or garbage collection) drops this object's reference.

    num_blocks may be 0: an empty pool (a device with no KV memory),
    where every allocation of a block or more raises NoSpace and
    sequences of 0 tokens work.  layout: None for an ID-only pool, or a
    Layout for a pool that owns the KV data (then block_data(),
    Manager.write() and friends work); k_only=True (with a layout) keeps
    K alone, half the bytes: the data calls take and give V as None.

    After close(), every method raises kvpool.Closed ("Pool is closed");
    close() waits for the calls other threads have in flight."""

    _p = ffi.NULL
    _k_only = False
    _kind = "Pool"

    def __init__(self, num_blocks, block_tokens=16, cache_blocks=0,
                 device_id=-1, layout=None, zero=False, nocache=False,
                 k_only=False):
        _args.Handle.__init__(self)
        cfg = ffi.new("struct kvp_pool_config *")
        cfg.num_blocks, cfg.block_tokens = _pool_args(
            num_blocks, block_tokens, cache_blocks, layout, k_only)
        cfg.cache_blocks = cache_blocks
        cfg.device_id = _args.integer("Pool", "device_id", device_id, "i32")
        cfg.flags = (POOL_ZERO if zero else 0) | \
            (POOL_NOCACHE if nocache else 0) | (POOL_K_ONLY if k_only else 0)
        if layout is not None:
            lay = ffi.new("struct kvp_layout *")
            lay.num_layers, lay.num_kv_heads = layout.num_layers, \
                layout.num_kv_heads
            lay.head_dim = layout.head_dim
            lay.dtype = DTYPES[layout.dtype]
            cfg.layout = lay
        out = ffi.new("struct kvp_pool **")
        rc = lib.kvp_pool_create(cfg, out)
        if rc == -_errno.EINVAL and layout is not None:
            raise InvalidArgument(22, "Pool: layout: a block of %d tokens "
                                  "of this layout is too large to address"
                                  % block_tokens)
        _check(rc, "Pool")
        self._p = out[0]
        self._k_only = bool(k_only)  # the data calls' V; never changes

    def close(self):
        """Drops this object's pool reference (managers keep their own),
        once the calls other threads have in flight on it returned; later
        calls raise Closed."""
        if self._begin_close():
            p, self._p = self._p, ffi.NULL
            if p != ffi.NULL:
                lib.kvp_pool_unref(p)

    __del__ = close

    @property
    def closed(self):
        """True once close() was called."""
        return self._closing

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    @live()
    def block_tokens(self):
        return lib.kvp_pool_block_tokens(self._p)

    @property
    @live()
    def block_bytes(self):
        """Bytes of KV data per block (0 for an ID-only pool)."""
        return lib.kvp_block_bytes(self._p)

    @property
    @live()
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
    @live()
    def row_bytes(self):
        """Bytes of one token's K (or V) row for one layer."""
        return lib.kvp_pool_row_bytes(self._p)

    @live(n="u32")
    def alloc(self, n):
        """Allocates n blocks (all or nothing; NoSpace) and returns their
        ids, each with one reference."""
        # A buffer for what can be returned, not for n: more than the
        # pool's blocks fails with NoSpace in C, writing no id.
        size = n if n <= _SMALL else min(n, self.num_blocks)
        ids = ffi.new("uint32_t[]", max(size, 1))
        _check(lib.kvp_pool_alloc(self._p, n, ids), "alloc")
        return list(ids[0:n])

    @live(ids="u32s")
    def free(self, ids):
        """Drops one reference on each id (all or nothing)."""
        c, n, _keep = _u32(ids)
        _check(lib.kvp_pool_free(self._p, c, n), "free")

    @live(block="u32")
    def ref(self, block):
        """Adds one reference to a block the caller holds."""
        _check(lib.kvp_block_ref(self._p, block), "ref")

    @live(block="u32")
    def refcount(self, block):
        """The block's holders (0 = free): block-table chunks that forks
        share count once, plus each table's last block and each raw
        reference (kvp_block_refcount)."""
        return _check(lib.kvp_block_refcount(self._p, block), "refcount")

    @live(block="u32")
    def block_data(self, block):
        """A writable memoryview of a block's KV data.  Valid while the
        pool lives and the caller holds a reference on the block."""
        n = lib.kvp_block_bytes(self._p)
        if n == 0:
            raise InvalidArgument(22, "block_data: an ID-only pool has no "
                                  "block data")
        p = lib.kvp_block_data(self._p, block)
        if p == ffi.NULL:
            raise error(-_errno.ERANGE, "block_data")
        return memoryview(ffi.buffer(p, n))

    @live()
    def stats(self):
        st = ffi.new("struct kvp_pool_stats *")
        lib.kvp_pool_stats(self._p, st)
        return _fill(PoolStats, st)

    @live()
    def check(self):
        """Checks the pool's invariants (quiescence required)."""
        _check(lib.kvp_pool_check(self._p), "pool check")

    @live()
    def metrics(self, managers=(), prometheus=False, eof=True):
        """The pool's and the managers' counters and gauges as OpenMetrics
        text (kvp_metrics_write), or the Prometheus text format 0.0.4 with
        prometheus=True; eof=False leaves out the closing "# EOF"."""
        from . import _manager
        mgrs = list(managers)
        for m in mgrs:
            if not isinstance(m, _manager.Manager):
                raise TypeError("metrics: managers must hold kvpool.Manager "
                                "objects, not %s" % type(m).__name__)
        held = []
        try:
            arr = ffi.new("struct kvp_manager *[]", max(len(mgrs), 1))
            for i, m in enumerate(mgrs):
                m._busy.append(None)  # no close() under the call
                held.append(m)
                if m._closing:
                    raise m._closed()
                arr[i] = m._m
            return self._metrics_text(arr, len(mgrs), prometheus, eof)
        finally:
            for m in held:
                m._busy.pop()

    def _metrics_text(self, arr, n_mgrs, prometheus, eof):
        flags = (METRICS_PROMETHEUS if prometheus else 0) | \
            (0 if eof else METRICS_NO_EOF)
        n = ffi.new("size_t *")
        cap = 16384
        while True:
            buf = ffi.new("char[]", cap)
            rc = lib.kvp_metrics_format(self._p, arr, n_mgrs, flags, buf,
                                        cap, n)
            if rc != -_errno.ENOBUFS:
                _check(rc, "metrics")
                return ffi.string(buf, n[0]).decode("utf-8")
            cap = n[0] + 4096  # counters may have grown meanwhile


def _pool_args(num_blocks, block_tokens, cache_blocks, layout, k_only):
    """Pool()'s checks of its sizes and layout, each naming its argument
    and range (kvp_pool_create's rules); the two sizes."""
    w = "Pool"
    _args.integer(w, "num_blocks", num_blocks)
    _args.integer(w, "block_tokens", block_tokens)
    _args.integer(w, "cache_blocks", cache_blocks)
    if num_blocks > MAX_BLOCKS:
        raise InvalidArgument(22, "Pool: num_blocks must be in [0, %d], got "
                              "%d" % (MAX_BLOCKS, num_blocks))
    if block_tokens < 1:
        raise InvalidArgument(22, "Pool: block_tokens must be at least 1, "
                              "got %d" % block_tokens)
    if cache_blocks > min(MAX_CACHE_BLOCKS, num_blocks):
        raise InvalidArgument(22, "Pool: cache_blocks must be in [0, %d] "
                              "(at most %d and at most num_blocks), got %d"
                              % (min(MAX_CACHE_BLOCKS, num_blocks),
                                 MAX_CACHE_BLOCKS, cache_blocks))
    _args.instance(w, "layout", layout, Layout, none_ok=True)
    if k_only and layout is None:
        raise InvalidArgument(22, "Pool: k_only=True needs a layout (an "
                              "ID-only pool has no data)")
    if layout is not None:
        for f in ("num_layers", "num_kv_heads", "head_dim"):
            v = _args.integer(w, "layout." + f, getattr(layout, f))
            if v < 1:
                raise InvalidArgument(22, "Pool: layout.%s must be at least "
                                      "1, got %d" % (f, v))
        if not isinstance(layout.dtype, str) or layout.dtype not in DTYPES:
            raise InvalidArgument(22, "Pool: layout.dtype must be one of %s,"
                                  " got %r" % (", ".join(DTYPES),
                                               layout.dtype))
    return num_blocks, block_tokens
