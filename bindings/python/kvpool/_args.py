# SPDX-License-Identifier: MIT
"""Arguments and handles: errors that name what went wrong.

A bad argument raises an exception whose message names the call, the
argument and what it may be: TypeError for a wrong type, OverflowError
for an integer the C type cannot hold, InvalidArgument for a value out of
its documented range.  A closed Pool or Manager raises Closed.

Two ways in.  Checks that run before the C call, where a call is rare
(Pool(), Manager(), hash_blocks()): the functions below named after a
kind.  Diagnoses that run only after cffi refused an argument (the
TypeError, OverflowError or AttributeError it raises names no argument):
`live` wraps a method, and on such an error checks the arguments the
method declared, in order, and raises for the first bad one (or lets the
original error go if every declared argument is fine).

`live` also keeps a handle's calls in flight: a method counts itself in
before it reads the C pointer and out when the C call returned, and
close() waits for the count to drop to zero before it destroys, so a
close() in one thread never frees a manager under another thread's call
(which then either finished or raises Closed).
"""
import functools
import inspect
import numbers
import threading
import time

from .errors import InvalidArgument

_INT = {
    "u32": (0, 2**32 - 1),
    "u64": (0, 2**64 - 1),
    "i32": (-2**31, 2**31 - 1),
    "i64": (-2**63, 2**63 - 1),
}


class Closed(InvalidArgument):
    """A call on a closed Pool or Manager ("Manager is closed")."""


def _tname(v):
    return type(v).__name__


def integer(where, name, v, kind="u32"):
    """v if it is an int that C type `kind` holds: TypeError or
    OverflowError naming `name` otherwise."""
    if not isinstance(v, numbers.Integral):
        raise TypeError("%s: %s must be an int, not %s"
                        % (where, name, _tname(v)))
    lo, hi = _INT[kind]
    if not lo <= v <= hi:
        raise OverflowError("%s: %s=%d does not fit in [%d, %d]"
                            % (where, name, v, lo, hi))
    return v


def real(where, name, v, lo, hi, hi_open=False):
    """v if it is a number in [lo, hi] ([lo, hi) with hi_open)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError("%s: %s must be a number, not %s"
                        % (where, name, _tname(v)))
    ok = lo <= v < hi if hi_open else lo <= v <= hi
    if not ok:  # NaN included
        raise InvalidArgument(22, "%s: %s must be in [%g, %g%s, got %r"
                              % (where, name, lo, hi, ")" if hi_open else "]",
                                 v))
    return v


def text(where, name, v, none_ok=True):
    """v's UTF-8 bytes (None for None when none_ok): TypeError for a
    non-str, bytes included."""
    if v is None and none_ok:
        return None
    if not isinstance(v, str):
        raise TypeError("%s: %s must be a str%s, not %s"
                        % (where, name, " or None" if none_ok else "",
                           _tname(v)))
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        raise InvalidArgument(22, "%s: %s is not valid Unicode (a lone "
                              "surrogate), got %r" % (where, name, v)
                              ) from None


def label(where, name, v, maxlen):
    """A name the C library takes: 1 to maxlen bytes of UTF-8 without
    control characters (C0, DEL, C1)."""
    b = text(where, name, v, none_ok=False)
    if not 1 <= len(b) <= maxlen or any(c < 0x20 or c == 0x7f for c in b) \
            or any(0x80 <= ord(c) <= 0x9f for c in v):
        raise InvalidArgument(22, "%s: %s must be 1 to %d bytes of UTF-8 "
                              "without control characters, got %r"
                              % (where, name, maxlen, v))
    return b


def buffer(where, name, v, none_ok=False):
    """A bytes-like object (bytes, bytearray, memoryview, array, NumPy
    array): TypeError for a str or anything without the buffer
    protocol."""
    if v is None and none_ok:
        return v
    try:
        memoryview(v)
    except TypeError:
        raise TypeError("%s: %s must be bytes-like%s, not %s"
                        % (where, name, " or None" if none_ok else "",
                           _tname(v))) from None
    return v


def instance(where, name, v, cls, none_ok=False):
    """v if it is a cls (or None with none_ok)."""
    if (v is None and none_ok) or isinstance(v, cls):
        return v
    raise TypeError("%s: %s must be a kvpool.%s%s, not %s"
                    % (where, name, cls.__name__,
                       " or None" if none_ok else "", _tname(v)))


def _ints(where, name, v, kind):
    """An iterable of ints (or a 1-D integer NumPy array)."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise TypeError("%s: %s must be a sequence of ints, not %s"
                        % (where, name, _tname(v)))
    if hasattr(v, "dtype") and hasattr(v, "ndim"):  # a NumPy array
        if v.ndim != 1:
            raise ValueError("%s: %s must be 1-D, got %d dimensions"
                             % (where, name, v.ndim))
        if v.size and v.dtype.kind not in "iub":
            raise TypeError("%s: %s must hold integers, not %s"
                            % (where, name, v.dtype))
        if v.size and v.dtype.kind != "b":
            lo, hi = _INT[kind]
            for x in (int(v.min()), int(v.max())):
                if not lo <= x <= hi:
                    raise OverflowError("%s: %s holds %d, which does not "
                                        "fit in [%d, %d]"
                                        % (where, name, x, lo, hi))
        return
    for i, x in enumerate(v):
        integer(where, "%s[%d]" % (name, i), x, kind)


def _hash(where, name, v):
    try:
        n = len(memoryview(v))
    except TypeError:
        raise TypeError("%s: %s must be a 32-byte bytes-like hash, not %s"
                        % (where, name, _tname(v))) from None
    if n != 32:
        raise InvalidArgument(22, "%s: %s must be 32 bytes, got %d"
                              % (where, name, n))


def _hashes(where, name, v):
    from ._hash import BlockHashes
    if isinstance(v, BlockHashes):
        return
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise TypeError("%s: %s must be BlockHashes or a sequence of "
                        "32-byte hashes, not %s" % (where, name, _tname(v)))
    for i, h in enumerate(v):
        _hash(where, "%s[%d]" % (name, i), h)


#: Declared kinds of `live` arguments and their checks.
KINDS = {
    "u32": lambda w, n, v: integer(w, n, v, "u32"),
    "u64": lambda w, n, v: integer(w, n, v, "u64"),
    "i32": lambda w, n, v: integer(w, n, v, "i32"),
    "i64": lambda w, n, v: integer(w, n, v, "i64"),
    "u32?": lambda w, n, v: v is None or integer(w, n, v, "u32"),
    "i64?": lambda w, n, v: v is None or integer(w, n, v, "i64"),
    "float": lambda w, n, v: real(w, n, v, float("-inf"), float("inf")),
    "str?": lambda w, n, v: text(w, n, v),
    "buffer": lambda w, n, v: buffer(w, n, v),
    "buffer?": lambda w, n, v: buffer(w, n, v, none_ok=True),
    "u32s": lambda w, n, v: _ints(w, n, v, "u32"),
    "u32s?": lambda w, n, v: v is None or _ints(w, n, v, "u32"),
    "u64s": lambda w, n, v: _ints(w, n, v, "u64"),
    "hash": _hash,
    "hashes": _hashes,
}


def diagnose(where, spec, bound, exc):
    """Raises the error for the first argument of bound (a dict) that
    its kind in spec refuses, else exc itself."""
    for name, kind in spec.items():
        if name in bound:
            KINDS[kind](where, name, bound[name])
    raise exc


def live(_what=None, **spec):
    """Decorates a Pool or Manager method: refuses a closed handle,
    counts the call in flight (close() waits for it), and names a bad
    argument (spec: argument name -> kind of KINDS) when cffi refuses
    one."""
    def wrap(fn):
        where = _what or fn.__name__
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def call(self, *args, **kw):
            busy = self._busy
            busy.append(None)
            try:
                if self._closing:
                    raise self._closed()
                return fn(self, *args, **kw)
            except (TypeError, OverflowError, AttributeError) as e:
                try:
                    bound = sig.bind(self, *args, **kw).arguments
                except TypeError:
                    raise e from None  # the call's own arity error
                diagnose(where, spec, bound, e)
            finally:
                busy.pop()
        return call
    return wrap


class Handle:
    """What Pool and Manager share: their calls in flight and closing.

    _busy holds one entry per call in flight (list append and pop are
    atomic under the GIL); _closing is set first by close(), which then
    waits until _busy is empty.  A method appends before it reads
    _closing, so either close() sees it and waits, or it sees _closing
    and raises Closed: the C pointer is never destroyed under a call."""

    _closing = False
    _kind = "handle"
    _close_lock = threading.Lock()

    def __init__(self):
        self._busy = []

    def _closed(self):
        return Closed(22, "%s is closed" % self._kind)

    def _begin_close(self):
        """Marks the handle closed and waits for the calls in flight;
        True if this call is the one that must destroy it."""
        with self._close_lock:
            if self._closing or not hasattr(self, "_busy"):
                return False
            self._closing = True
        delay = 1e-5
        while self._busy:
            time.sleep(delay)  # releases the GIL to the calls in flight
            delay = min(2 * delay, 1e-3)
        return True
