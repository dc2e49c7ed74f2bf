# SPDX-License-Identifier: MIT
"""Manager and Sequence: the sequences of one model over a Pool."""
import errno as _errno
import threading

from . import _args
from ._args import live
from ._core import Pool
from ._ffi import ffi, lib
from ._hash import _hashes
from ._types import (_EVENT_TYPES, _POLICY_NAMES, AppendInfo, Copy, Event,
                     EMIT_CACHED_EVENTS, EXACT_LIMITS, FORK_KEEP_SOURCE,
                     MAX_MEDIUM, MAX_NAME, NO_BLOCK,
                     PREFIX_CACHE, RETAIN_PIN, SeqInfo, Stats, _check, _f32,
                     _fill, _out, _policy, _result, _scratch, _SMALL, _tls,
                     _u32, _u64, np)
from .errors import error, InvalidArgument, NotFound

_SEQ = {"seq": "u64"}
_SEQ_N = {"seq": "u64", "num_tokens": "u32"}


class Manager(_args.Handle):
    """Sequences of one model over a Pool (kvp_manager).

    Every method may be called from any number of Python threads at once
    (the GIL is released during each C call); calls on one sequence are
    serialised by the library, different sequences never contend.
    set_event_callback() and set_event_medium() are set before other
    threads use the manager.  close() marks it closed (later calls raise
    kvpool.Closed, "Manager is closed"), waits for the calls other
    threads have in flight to return, then frees every sequence and the
    manager.

    eviction_threshold (utilisation at which eviction is due, in [0, 1])
    and watermark (fraction of the pool kept free at admission, in
    [0, 1)) are taken as given, 0 included (KVP_EXACT_LIMITS).  The
    policy ("lru", "lfu", "longest", "priority") may be changed at any
    time: set_policy() or `manager.policy = "lfu"`.
    emit_cached_events=True (needs prefix_cache=True;
    KVP_EMIT_CACHED_EVENTS) also reports the cached blocks a create_cached reuses to the event
    callback, as one "stored" event with reused True (vLLM's
    emit_cached_block_events).
    """

    _m = ffi.NULL
    _cb = None
    _lost = 0
    _lost_lock = threading.Lock()
    _kind = "Manager"

    @property
    def events_lost(self):
        """Events whose callback raised (each such event is lost)."""
        with self._lost_lock:
            return self._lost

    def __init__(self, pool, policy="lru", eviction_threshold=0.9,
                 watermark=0.01, prefix_cache=False, max_pinned=0,
                 name=None, emit_cached_events=False):
        _args.Handle.__init__(self)
        w = "Manager"
        _args.instance(w, "pool", pool, Pool)
        cfg = ffi.new("struct kvp_manager_config *")
        cfg.policy = _policy(policy)
        cfg.eviction_threshold = _args.real(w, "eviction_threshold",
                                            eviction_threshold, 0, 1)
        cfg.watermark = _args.real(w, "watermark", watermark, 0, 1,
                                   hi_open=True)
        cfg.flags = (PREFIX_CACHE if prefix_cache else 0) | EXACT_LIMITS
        if emit_cached_events:
            if not prefix_cache:
                raise InvalidArgument(22, "Manager: emit_cached_events "
                                      "needs prefix_cache=True")
            cfg.flags |= EMIT_CACHED_EVENTS
        cfg.max_pinned = _args.integer(w, "max_pinned", max_pinned)
        if name is not None:
            cname = ffi.new("char[]", _args.label(w, "name", name, MAX_NAME))
            cfg.name = cname
        out = ffi.new("struct kvp_manager **")
        pool._busy.append(None)  # no close() of the pool under the call
        try:
            if pool._closing:
                raise pool._closed()
            nb = pool.num_blocks
            if max_pinned > nb:
                raise InvalidArgument(22, "Manager: max_pinned must be in "
                                      "[0, %d] (the pool's blocks), got %d"
                                      % (nb, max_pinned))
            cfg.pool = pool._p
            _check(lib.kvp_manager_create(cfg, out), "Manager")
            self._row_bytes = lib.kvp_pool_row_bytes(pool._p)
            self.block_tokens = lib.kvp_pool_block_tokens(pool._p)
        finally:
            pool._busy.pop()
        self._m = out[0]
        self.pool = pool
        self._k_only = pool._k_only
        self._cb = None

    def close(self):
        """Frees every sequence and the manager, once the calls other
        threads have in flight on it returned; later calls raise
        Closed."""
        if self._begin_close():
            m, self._m = self._m, ffi.NULL
            if m != ffi.NULL:
                lib.kvp_manager_destroy(m)
            self._cb = None

    __del__ = close

    @property
    def closed(self):
        """True once close() was called."""
        return self._closing

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- configuration -------------------------------------------------
    @live("config")
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

    @live()
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

    @live()
    def set_event_medium(self, medium):
        """Names where the manager's blocks live ("GPU", "CPU", ...; at
        most 15 bytes) in every event it reports (Event.medium and the
        published events' medium); None clears it.  Set it before other
        threads use the manager."""
        b = _args.text("set_event_medium", "medium", medium)
        if b is not None and (len(b) > MAX_MEDIUM or b"\0" in b):
            raise InvalidArgument(22, "set_event_medium: medium must be at "
                                  "most %d bytes without NUL, got %r"
                                  % (MAX_MEDIUM, medium))
        _check(lib.kvp_manager_set_event_medium(
            self._m, ffi.NULL if b is None else ffi.new("char[]", b)),
            "set_event_medium")

    # -- sequences ------------------------------------------------------
    @live()
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

    @live(**_SEQ_N)
    def create(self, seq, num_tokens=0):
        """Creates sequence seq of num_tokens tokens; returns its handle."""
        _check(lib.kvp_seq_create(self._m, seq, num_tokens), "create")
        return Sequence(self, seq)

    @live(hashes="hashes")
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

    @live(seq="u64", hashes="hashes", num_tokens="u32")
    def create_cached(self, seq, hashes, num_tokens):
        """Creates seq reusing the longest cached prefix of hashes (from
        hash_blocks); the handle's cached_tokens says how many tokens
        were served from the cache."""
        c, n = _hashes(hashes)
        cached = ffi.new("uint32_t *")
        _check(lib.kvp_seq_create_cached(self._m, seq, c, n, num_tokens,
                                         cached), "create_cached")
        return Sequence(self, seq, cached[0])

    @live(seq="u64", hashes="hashes", tokens="u32s?", lora_name="str?",
          lora_id="i64?")
    def commit(self, seq, hashes, tokens=None, lora_name=None, lora_id=None,
               extra_keys=None, ranges=None):
        """Registers seq's full blocks under hashes; returns how many
        blocks were newly cached.

        The keywords make it kvp_seq_commit_ex: the "stored" events the
        commit causes carry tokens (the sequence's tokens from position
        0, at least as many as the committed blocks cover: Event.token_ids
        gets the stored blocks'), lora_name, lora_id and extra_keys (a
        sequence of str), as vLLM's BlockStored does; ranges retains
        blocks as commit_retained does (its refused pins are not
        reported)."""
        c, n = _hashes(hashes)
        if tokens is None and lora_name is None and lora_id is None and \
                extra_keys is None and ranges is None:
            return _check(lib.kvp_seq_commit(self._m, seq, c, n), "commit")
        info = ffi.new("struct kvp_commit_info *")
        keep = []
        if tokens is not None:
            t, nt, k = _u32(tokens)
            info.tokens, info.ntokens = t, nt
            keep.append((t, k))
        if lora_name is not None:
            b = _args.text("commit", "lora_name", lora_name)
            if b"\0" in b:
                raise InvalidArgument(22, "commit: lora_name must not "
                                      "contain NUL")
            keep.append(ffi.new("char[]", b))
            info.lora_name = keep[-1]
        info.lora_id = -1 if lora_id is None else lora_id
        if extra_keys is not None:
            info.extra_keys, info.nextra_keys = _strings(
                "commit", "extra_keys", extra_keys, keep)
        if ranges is not None:
            rg, nr = _ranges("commit", ranges)
            info.ranges, info.nranges = rg, nr
            keep.append(rg)
        return _check(lib.kvp_seq_commit_ex(self._m, seq, c, n, info),
                      "commit")

    @live(seq="u64", hashes="hashes")
    def commit_retained(self, seq, hashes, ranges):
        """commit() with retention: ranges is a list of (first_token,
        num_tokens, priority[, duration]) (num_tokens 0: to the end;
        priority 0..RETAIN_PIN; duration in ticks of the retention clock,
        0 or absent: for ever).  Returns (blocks newly cached, pins
        refused by the manager's cap)."""
        c, n = _hashes(hashes)
        rg, nr = _ranges("commit_retained", ranges)
        unpinned = ffi.new("uint32_t *")
        added = _check(lib.kvp_seq_commit_retained(
            self._m, seq, c, n, rg, nr, unpinned), "commit_retained")
        return added, unpinned[0]

    @live(steps="u64")
    def tick(self, steps=1):
        """Advances the retention clock by steps; returns the new time."""
        now = ffi.new("uint64_t *")
        _check(lib.kvp_manager_tick(self._m, steps, now), "tick")
        return now[0]

    @live(block_hash="hash")
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

    # append and append_ex keep the calls in flight themselves (no
    # decorator frame on the decode path).
    def append(self, seq, num_tokens=1):
        """Appends token slots; returns the Copy the engine must perform
        (copy-on-write of a shared last block) or None."""
        try:
            cow, ncow, _info = _tls.s
        except AttributeError:
            cow, ncow, _info = _scratch()
        busy = self._busy
        busy.append(None)
        try:
            if self._closing:
                raise self._closed()
            rc = lib.kvp_seq_append(self._m, seq, num_tokens, cow, 1, ncow)
        except (TypeError, OverflowError) as e:
            _args.diagnose("append", _SEQ_N,
                           {"seq": seq, "num_tokens": num_tokens}, e)
        finally:
            busy.pop()
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
        busy = self._busy
        busy.append(None)
        try:
            if self._closing:
                raise self._closed()
            rc = lib.kvp_seq_append_ex(self._m, seq, num_tokens, cow, 1,
                                       ncow, info)
        except (TypeError, OverflowError) as e:
            _args.diagnose("append_ex", _SEQ_N,
                           {"seq": seq, "num_tokens": num_tokens}, e)
        finally:
            busy.pop()
        if rc:
            raise error(rc, "append_ex")
        c = cow[0]
        return AppendInfo(
            None if info.last_block == NO_BLOCK else info.last_block,
            info.num_tokens, info.new_blocks,
            Copy(c.src, c.dst, c.tokens) if ncow[0] else None)

    @live(**_SEQ_N)
    def reserve(self, seq, num_tokens):
        """Makes room in seq's block table for num_tokens tokens in all,
        so that appends up to that count allocate no host memory (they
        still take blocks from the pool).  Lasts until seq is freed or
        its table shrinks; a fork does not inherit it."""
        _check(lib.kvp_seq_reserve(self._m, seq, num_tokens), "reserve")

    @live(seqs="u64s", num_tokens="u32s?")
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

    @live(src="u64", dst="u64")
    def fork(self, src, dst):
        """Creates dst sharing all of src's blocks; returns its handle."""
        _check(lib.kvp_seq_fork(self._m, src, dst), "fork")
        return Sequence(self, dst)

    @live(src="u64")
    def fork_n(self, src, dsts, keep_source=False):
        """Creates the sequences dsts (a list or a 1-D NumPy array of ids),
        each sharing all of src's blocks, in one call: parallel sampling
        or beam search.  All or nothing: on an error none of them exists.
        keep_source leaves src's last access and access count as they
        were (KVP_FORK_KEEP_SOURCE).  Returns their handles, in order."""
        c, n, keep = _u64(dsts)
        flags = FORK_KEEP_SOURCE if keep_source else 0
        _check(lib.kvp_seq_fork_n(self._m, src, c, n, flags), "fork_n")
        return [Sequence(self, int(d)) for d in (keep if keep is not None
                                                 else dsts)]

    @live(**_SEQ)
    def free(self, seq):
        _check(lib.kvp_seq_free(self._m, seq), "free")

    @live(**_SEQ_N)
    def truncate(self, seq, num_tokens):
        """Rolls seq back to num_tokens tokens."""
        _check(lib.kvp_seq_truncate(self._m, seq, num_tokens), "truncate")

    @live(seq="u64", sink_tokens="u32", window_tokens="u32")
    def stream_trim(self, seq, sink_tokens, window_tokens):
        """StreamingLLM trim; returns the number of tokens dropped."""
        ev = ffi.new("uint32_t *")
        _check(lib.kvp_seq_stream_trim(self._m, seq, sink_tokens,
                                       window_tokens, ev), "stream_trim")
        return ev[0]

    @live(seq="u64", priority="i32")
    def set_priority(self, seq, priority):
        _check(lib.kvp_seq_set_priority(self._m, seq, priority),
               "set_priority")

    @live(**_SEQ)
    def info(self, seq):
        i = ffi.new("struct kvp_seq_info *")
        _check(lib.kvp_seq_info(self._m, seq, i), "info")
        return _fill(SeqInfo, i)

    def sequence(self, seq):
        """A handle on an existing sequence (no check that it exists)."""
        return Sequence(self, seq)

    @live(**_SEQ)
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
    @live(num_tokens="u32")
    def admit(self, num_tokens):
        """ADMIT_OK, ADMIT_LATER or ADMIT_NEVER for a new request."""
        return _check(lib.kvp_admit(self._m, num_tokens), "admit")

    @live()
    def evict(self):
        """Evicts one sequence by policy; returns its id (NotFound if no
        sequence is left)."""
        v = ffi.new("uint64_t *")
        _check(lib.kvp_evict(self._m, v), "evict")
        return v[0]

    @live()
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

    @live(target_util="float", cap="u32")
    def evict_until(self, target_util=-1.0, cap=4096):
        """Evicts until utilisation <= target_util (negative: the
        manager's threshold; at most 1), at most cap sequences; returns
        (victims, target_met)."""
        _args.real("evict_until", "target_util", target_util, float("-inf"),
                   1)
        # A buffer of _SMALL victims at most, not of cap: the C call is
        # repeated while it fills the buffer and cap allows more.
        v = ffi.new("uint64_t[]", max(min(cap, _SMALL), 1))
        n = ffi.new("uint32_t *")
        victims = []
        while True:
            c = min(cap - len(victims), _SMALL)
            rc = _check(lib.kvp_evict_until(self._m, target_util, v, c, n),
                        "evict_until")
            victims += list(v[0:n[0]])
            if rc == 0 or n[0] < c or c == 0:
                return victims, rc == 0

    @live()
    def stats(self):
        st = ffi.new("struct kvp_stats *")
        lib.kvp_manager_stats(self._m, st)
        return _fill(Stats, st)

    @property
    @live("id")
    def id(self):
        """The manager's process-unique id."""
        return lib.kvp_manager_id(self._m)

    @property
    @live("name")
    def name(self):
        """The manager's name: the `manager` label of its metrics."""
        return ffi.string(lib.kvp_manager_name(self._m)).decode("utf-8")

    @live()
    def check(self):
        """Checks the pool's and its managers' invariants (quiescence)."""
        _check(lib.kvp_manager_check(self._m), "manager check")

    @live()
    def prefix_reset(self):
        _check(lib.kvp_prefix_reset(self._m), "prefix_reset")

    @live()
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
        if not callable(fn):
            raise TypeError("set_event_callback: fn must be callable or "
                            "None, not %s" % type(fn).__name__)

        def trampoline(ev, _arg):
            try:
                fn(_event(ev))
            except BaseException:
                with self._lost_lock:
                    self._lost += 1
                raise  # printed by cffi, as before

        cb = ffi.callback("void(const struct kvp_event *, void *)",
                          trampoline)
        _check(lib.kvp_manager_set_event_cb(self._m, cb, ffi.NULL))
        self._cb = cb  # the C side holds it: keep it alive

    # -- kernel-facing exports -----------------------------------------
    @live(seqs="u64s", pad="i32")
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

    @live(seqs="u64s")
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

    @live(seq="u64", first_pos="u32", n="u32?")
    def slot_mapping(self, seq, first_pos=0, n=None):
        """Slots (block * block_tokens + offset) of tokens first_pos ..
        first_pos + n - 1 (n None: to the end): NumPy int64, or a list."""
        if n is None:
            n = max(self.info(seq).num_tokens - first_pos, 0)
        elif n > _SMALL and n > self.info(seq).num_tokens - first_pos:
            # Past the sequence's end: OutOfRange, as C says, without a
            # buffer of the caller's n.
            raise error(-_errno.ERANGE, "slot_mapping")
        arr, p = _out("int64_t", n)
        _check(lib.kvp_export_slot_mapping(self._m, seq, first_pos, n, p),
               "slot_mapping")
        return _result(arr, n)

    # -- KV data (data-owning pools) -----------------------------------
    @live(seq="u64", pos="u32", layer="u32", k="buffer", v="buffer?")
    def write(self, seq, pos, layer, k, v=None):
        """Writes token pos's K and V rows (bytes-like, row_bytes each);
        v is None for a K-only pool, and only for one."""
        rb = self._row_bytes
        _args.buffer("write", "k", k)
        _args.buffer("write", "v", v, none_ok=True)
        kb = ffi.from_buffer(k)
        vb = ffi.NULL if v is None else ffi.from_buffer(v)
        if len(kb) < rb or (v is not None and len(vb) < rb):
            raise InvalidArgument(22, "write: k and v must hold a row of %d "
                                  "bytes each" % rb)
        if v is None and not self._k_only:
            raise InvalidArgument(22, "write: this pool stores V: pass v")
        if v is not None and self._k_only:
            raise InvalidArgument(22, "write: a K-only pool takes v=None")
        _check(lib.kvp_seq_write(self._m, seq, pos, layer, kb, vb), "write")

    @live(seq="u64", pos="u32", layer="u32")
    def read(self, seq, pos, layer):
        """Token pos's K and V rows for one layer: (bytearray, bytearray),
        or (bytearray, None) for a K-only pool."""
        rb = self._row_bytes
        k = bytearray(rb)
        v = None if self._k_only else bytearray(rb)
        _check(lib.kvp_seq_read(self._m, seq, pos, layer, ffi.from_buffer(k),
                                ffi.NULL if v is None else ffi.from_buffer(v)),
               "read")
        return k, v

    @live(seq="u64", layer="u32")
    def gather(self, seq, layer):
        """One layer of the whole sequence as contiguous K and V
        [tokens][heads][dim] bytearrays (V None for a K-only pool)."""
        rb = self._row_bytes
        if not rb:
            return bytearray(), None if self._k_only else bytearray()
        while True:
            # Sized from the length now; the C call checks it under the
            # sequence's lock, as another thread may append meanwhile.
            n = self.info(seq).num_tokens
            k = bytearray(rb * n)
            v = None if self._k_only else bytearray(rb * n)
            got = lib.kvp_seq_gather_cap(
                self._m, seq, layer, ffi.from_buffer(k),
                ffi.NULL if v is None else ffi.from_buffer(v), n)
            if got != -_errno.ENOBUFS:
                break
        _check(min(got, 0), "gather")
        del k[rb * got:]
        if v is not None:
            del v[rb * got:]
        return k, v


def _event(ev):
    """The Event of a struct kvp_event (its arrays live for the callback
    only: everything is copied)."""
    hs = [bytes(ffi.buffer(ev.hashes[i].b, 32))
          for i in range(ev.nhashes)] if ev.hashes != ffi.NULL else []
    parent = None
    if ev.parent != ffi.NULL:
        parent = bytes(ffi.buffer(ev.parent.b, 32))
    stored = ev.type == 0
    toks = None
    if stored and ev.token_ids != ffi.NULL:
        toks = list(ffi.unpack(ev.token_ids, ev.num_tokens))
    lora = None
    if stored and ev.lora_name != ffi.NULL:
        lora = ffi.string(ev.lora_name).decode("utf-8", "replace")
    extra = ()
    if stored and ev.extra_keys != ffi.NULL:
        extra = tuple(ffi.string(ev.extra_keys[i]).decode("utf-8", "replace")
                      for i in range(ev.nextra_keys))
    medium = None
    if ev.medium != ffi.NULL:
        medium = ffi.string(ev.medium).decode("utf-8", "replace")
    return Event(_EVENT_TYPES.get(ev.type, str(ev.type)), hs, parent,
                 ev.block_tokens, ev.num_tokens, ev.seq, toks, lora,
                 ev.lora_id if stored and ev.lora_id >= 0 else None, extra,
                 medium, ev.priority, bool(ev.reused))


def _strings(where, name, values, keep):
    """A const char *[] of values (str each), kept alive in keep; and its
    length."""
    if isinstance(values, (str, bytes)):
        raise TypeError("%s: %s must be a sequence of str, not %s"
                        % (where, name, type(values).__name__))
    cs = []
    for i, v in enumerate(values):
        b = _args.text(where, "%s[%d]" % (name, i), v, none_ok=False)
        if b"\0" in b:
            raise InvalidArgument(22, "%s: %s[%d] must not contain NUL"
                                  % (where, name, i))
        cs.append(ffi.new("char[]", b))
    keep.extend(cs)
    if not cs:
        return ffi.NULL, 0
    arr = ffi.new("const char *[]", cs)
    keep.append(arr)
    return arr, len(cs)


def _ranges(where, ranges):
    """A struct kvp_retention[] of (first_token, num_tokens, priority[,
    duration]) tuples, each checked; and its length."""
    if isinstance(ranges, (str, bytes)) or not hasattr(ranges, "__iter__"):
        raise TypeError("%s: ranges must be a sequence of (first_token, "
                        "num_tokens, priority[, duration]), not %s"
                        % (where, type(ranges).__name__))
    ranges = list(ranges)
    rg = ffi.new("struct kvp_retention[]", max(len(ranges), 1))
    for i, r in enumerate(ranges):
        if isinstance(r, (str, bytes)) or not hasattr(r, "__len__") or \
                len(r) not in (3, 4):
            raise TypeError("%s: ranges[%d] must be (first_token, "
                            "num_tokens, priority[, duration]), got %r"
                            % (where, i, r))
        nm = "ranges[%d]" % i
        rg[i].first_token = _args.integer(where, nm + ".first_token", r[0])
        rg[i].num_tokens = _args.integer(where, nm + ".num_tokens", r[1])
        prio = _args.integer(where, nm + ".priority", r[2])
        if prio > RETAIN_PIN:
            raise InvalidArgument(22, "%s: %s.priority must be in [0, %d], "
                                  "got %d" % (where, nm, RETAIN_PIN, prio))
        rg[i].priority = prio
        rg[i].duration = _args.integer(where, nm + ".duration",
                                       r[3] if len(r) > 3 else 0, "u64")
    return rg, len(ranges)


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
        except (NotFound, _args.Closed):
            pass  # already freed or evicted, or the manager closed

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

    def fork_n(self, dsts, keep_source=False):
        return self.manager.fork_n(self.id, dsts, keep_source)

    def free(self):
        self.manager.free(self.id)

    def truncate(self, num_tokens):
        self.manager.truncate(self.id, num_tokens)

    def commit(self, hashes, **kw):
        return self.manager.commit(self.id, hashes, **kw)

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
