# SPDX-License-Identifier: MIT
"""kvpool: paged KV-cache block management for LLM inference engines.

Python binding of libkvpool (cffi in ABI mode: no compiler needed).

    import kvpool
    with kvpool.Pool(num_blocks=1024, block_tokens=16) as pool, \\
            kvpool.Manager(pool) as m:
        s = m.create(1, num_tokens=100)
        s.append()                       # one decode step
        table = m.block_table([1])       # NumPy int32 when NumPy is present

Threads: Pool and Manager may be used from any number of Python threads at
once; every C call releases the GIL.  The event callback (see
Manager.set_event_callback) runs in the thread whose call caused the
event, and set_event_callback / set_event_medium are set before other
threads use the manager.  close() may be called from any thread: calls
already running finish first (close() waits for them), calls made after
it raise kvpool.Closed.  Errors raise kvpool.Error subclasses (an OSError with errno and
kvp_strerror's text): NoSpace (with the requested and available blocks),
BufferTooSmall, NotFound, Exists, InvalidArgument (and its Closed, for a
call on a closed Pool or Manager), ...  A bad argument's message names
it and what it may be; a wrong type raises TypeError naming it.

The library is found through $KVPOOL_LIBRARY (a path), then the libdir
`make install` recorded, then the dynamic linker's search path.
"""
from ._ffi import LIBRARY
from ._args import Closed
from ._core import Pool, thread_flush
from ._hash import (BlockHashes, cbor_seed_root, hash_blocks, hash_cbor_block,
                    hash_to_u64, set_cbor_seed, set_xxh3_seed)
from ._manager import Manager, Sequence
from ._types import (ADMIT_LATER, ADMIT_NEVER, ADMIT_OK, DTYPES, HASH_ALGOS,
                     POLICIES, RETAIN_DEFAULT, RETAIN_MAX, RETAIN_PIN,
                     AppendInfo, Copy, Event, Layout, PoolConfig, PoolStats,
                     SeqInfo, Stats)
from .errors import (AlreadyFree, BufferTooSmall, Busy, CheckFailed, Error,
                     Exists, InvalidArgument, NoMemory, NoSpace, NotFound,
                     OutOfRange, Overflow, strerror)

__license__ = "MIT"

__all__ = ["Pool", "Manager", "Sequence", "Layout", "PoolConfig",
           "PoolStats", "Stats", "SeqInfo", "Event", "Copy", "AppendInfo",
           "BlockHashes", "hash_blocks", "hash_cbor_block", "hash_to_u64",
           "cbor_seed_root", "set_cbor_seed",
           "set_xxh3_seed", "thread_flush", "strerror", "DTYPES", "POLICIES",
           "HASH_ALGOS", "RETAIN_DEFAULT", "RETAIN_MAX", "RETAIN_PIN",
           "ADMIT_OK", "ADMIT_LATER", "ADMIT_NEVER", "LIBRARY",
           "Error", "InvalidArgument", "NoSpace", "BufferTooSmall",
           "NoMemory", "NotFound",
           "Exists", "OutOfRange", "AlreadyFree", "Overflow", "Busy",
           "CheckFailed", "Closed"]
