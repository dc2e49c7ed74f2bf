# SPDX-License-Identifier: MIT
"""kvpool errors: every failing C call raises a kvpool.Error subclass.

An Error is an OSError: `e.errno` is the (positive) errno the C call
returned negated, `e.strerror` is kvp_strerror()'s text for it.  A
NoSpace and a BufferTooSmall also carry the call's kvp_last_error()
details.
"""
import errno as _errno

from ._ffi import ffi, lib


class Error(OSError):
    """A kvpool call failed; errno and strerror say why."""


class InvalidArgument(Error, ValueError):
    """-EINVAL: a bad argument (or a closed Pool / Manager)."""


class NoSpace(Error):
    """-ENOSPC: not enough free blocks.

    From kvp_last_error(), read in the failing call's thread right after
    it returned: `requested` is the blocks the call needed at once and
    `available` the blocks it could have had (a recent count while other
    threads run).  Both are None when the library recorded no
    details."""

    requested = available = None

    def __str__(self):
        s = OSError.__str__(self)
        if self.requested is None:
            return s
        return "%s (%d requested, %d available)" % (
            s, self.requested, self.available)


class BufferTooSmall(Error):
    """-ENOBUFS: a caller's buffer too small for the answer.

    The package sizes its own buffers, so only a direct call of the C
    library (kvpool._ffi.lib) sees it.  `requested` is the entries the buffer needed and
    `available` its capacity (kvp_last_error()), None when the library
    recorded no details."""

    requested = available = None

    def __str__(self):
        s = OSError.__str__(self)
        if self.requested is None:
            return s
        return "%s (%d entries needed, room for %d)" % (
            s, self.requested, self.available)


class NoMemory(Error, MemoryError):
    """-ENOMEM: out of host memory."""


class NotFound(Error, KeyError):
    """-ENOENT: unknown sequence."""

    __str__ = OSError.__str__  # not KeyError's repr() of the args


class Exists(Error):
    """-EEXIST: sequence id already in use."""


class OutOfRange(Error, IndexError):
    """-ERANGE: block id, token position or count out of range."""


class AlreadyFree(Error):
    """-EALREADY: the block is already free (double free)."""


class Overflow(Error, OverflowError):
    """-EOVERFLOW: a count would overflow."""


class Busy(Error):
    """-EBUSY: resource busy (shared block written, cached block in use)."""


class CheckFailed(Error):
    """-EFAULT: an invariant check failed (details on stderr)."""


_BY_ERRNO = {
    _errno.EINVAL: InvalidArgument,
    _errno.ENOSPC: NoSpace,
    _errno.ENOBUFS: BufferTooSmall,
    _errno.ENOMEM: NoMemory,
    _errno.ENOENT: NotFound,
    _errno.EEXIST: Exists,
    _errno.ERANGE: OutOfRange,
    _errno.EALREADY: AlreadyFree,
    _errno.EOVERFLOW: Overflow,
    _errno.EBUSY: Busy,
    _errno.EFAULT: CheckFailed,
}


def strerror(rc):
    """kvp_strerror() of a C return value (0 or a negative errno)."""
    return ffi.string(lib.kvp_strerror(rc)).decode()


def error(rc, what=None):
    """The exception for C return value rc (< 0).  Call it in the thread
    of the failing call, before any other kvpool call: a NoSpace reads
    that call's details."""
    info = None
    if rc in (-_errno.ENOSPC, -_errno.ENOBUFS):
        info = ffi.new("struct kvp_error_info *")
        if lib.kvp_last_error(info) != 0 or info.err != rc:
            info = None  # no details recorded
    msg = strerror(rc)
    if what:
        msg = "%s: %s" % (what, msg)
    e = _BY_ERRNO.get(-rc, Error)(-rc, msg)
    if info is not None:
        e.requested, e.available = info.requested, info.available
    return e
