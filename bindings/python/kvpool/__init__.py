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
event.  Errors raise kvpool.Error subclasses (an OSError with errno and
kvp_strerror's text): NoSpace (with the requested and available blocks),
BufferTooSmall, NotFound, Exists, InvalidArgument, ...

The library is found through $KVPOOL_LIBRARY (a path), then the libdir
`make install` recorded, then the dynamic linker's search path.
"""
from ._ffi import LIBRARY
from ._core import (ADMIT_LATER, ADMIT_NEVER, ADMIT_OK, DTYPES, HASH_ALGOS,
                    POLICIES, RETAIN_DEFAULT, RETAIN_MAX, RETAIN_PIN,
                    AppendInfo, BlockHashes, Copy, Event, Layout, Manager,
                    Pool, PoolConfig, PoolStats, SeqInfo, Sequence, Stats,
                    hash_blocks, set_xxh3_seed, thread_flush)
from .errors import (AlreadyFree, BufferTooSmall, Busy, CheckFailed, Error,
                     Exists, InvalidArgument, NoMemory, NoSpace, NotFound,
                     OutOfRange, Overflow, strerror)

__license__ = "MIT"

__all__ = ["Pool", "Manager", "Sequence", "Layout", "PoolConfig",
           "PoolStats", "Stats", "SeqInfo", "Event", "Copy", "AppendInfo",
           "BlockHashes", "hash_blocks",
           "set_xxh3_seed", "thread_flush", "strerror", "DTYPES", "POLICIES",
           "HASH_ALGOS", "RETAIN_DEFAULT", "RETAIN_MAX", "RETAIN_PIN",
           "ADMIT_OK", "ADMIT_LATER", "ADMIT_NEVER", "LIBRARY",
           "Error", "InvalidArgument", "NoSpace", "BufferTooSmall",
           "NoMemory", "NotFound",
           "Exists", "OutOfRange", "AlreadyFree", "Overflow", "Busy",
           "CheckFailed"]
