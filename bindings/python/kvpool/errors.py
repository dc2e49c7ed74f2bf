"""kvpool errors: every failing C call raises a kvpool.Error subclass.

An Error is an OSError: `e.errno` is the (positive) errno the C call
returned negated, `e.strerror` is kvp_strerror()'s text for it.
"""
import errno as _errno

from ._ffi import ffi, lib


class Error(OSError):
    """A kvpool call failed; errno and strerror say why."""


class InvalidArgument(Error, ValueError):
    """-EINVAL: a bad argument (or a closed Pool / Manager)."""


class NoSpace(Error):
    """-ENOSPC: not enough free blocks (or a buffer too small)."""


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
    """The exception for C return value rc (< 0)."""
    msg = strerror(rc)
    if what:
        msg = "%s: %s" % (what, msg)
    return _BY_ERRNO.get(-rc, Error)(-rc, msg)
