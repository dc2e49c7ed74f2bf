# SPDX-License-Identifier: MIT
"""Constants, the dataclasses the package returns, and the helpers that
turn Python values into C arrays and back."""
import dataclasses
import os
import struct
import threading
from collections import namedtuple
from typing import List, Optional

from ._ffi import ffi
from .errors import error, InvalidArgument

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
PREFIX_CACHE, EXACT_LIMITS, EMIT_CACHED_EVENTS = 1, 2, 4
FORK_KEEP_SOURCE = 1  # kvp_seq_fork_n's flag
#: kvp_append_info.last_block when the sequence holds no block.
NO_BLOCK = 0xFFFFFFFF
#: The largest pool (KVP_MAX_BLOCKS), the largest per-thread cache
#: (KVP_MAX_CACHE_BLOCKS), a manager name's bytes (KVP_NAME_MAX - 1) and
#: an event medium's (kvp_manager_set_event_medium).
MAX_BLOCKS, MAX_CACHE_BLOCKS, MAX_NAME, MAX_MEDIUM = 2**31, 4096, 63, 15
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
    """kvp_pool_stats(): exact at quiescence, approximate otherwise.

    allocs counts references going 0 -> 1 (allocations and revived
    prefix-cache hits), frees references going 1 -> 0 (frees and cached
    blocks going idle, which stay cached)."""
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
    root; block_tokens and num_tokens (stored only) as in the C struct;
    seq the manager's event number (0, 1, 2, ...).  A "stored" event of a
    commit given them (Manager.commit's tokens, lora_name, lora_id,
    extra_keys) carries token_ids (the stored blocks' tokens, num_tokens
    of them), lora_name, lora_id and extra_keys, else None, None, None
    and (); priority is the retention the commit gave the blocks (0 by
    default).  medium is the manager's (Manager.set_event_medium), None
    if unset.  reused is True for a "stored" event that reports the
    cached blocks a creation reused (Manager(emit_cached_events=True)):
    hashes from the root, no tokens.
    """
    type: str
    hashes: List[bytes]
    parent: Optional[bytes]
    block_tokens: int
    num_tokens: int
    seq: int = 0
    token_ids: Optional[List[int]] = None
    lora_name: Optional[str] = None
    lora_id: Optional[int] = None
    extra_keys: tuple = ()
    medium: Optional[str] = None
    priority: int = 0
    reused: bool = False


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


# Counts up to this size their buffers from the caller's number; larger
# ones from what the call can return (the pool's blocks, the sequence's
# tokens), so that a huge number is an error from C, not a MemoryError.
_SMALL = 4096


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
