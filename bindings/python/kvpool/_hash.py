# SPDX-License-Identifier: MIT
"""Block hashes: BlockHashes, hash_blocks and the process-wide profiles'
seeds (XXH3's, vLLM's sha256_cbor NONE_HASH)."""
from . import _args
from ._ffi import ffi, lib
from ._types import HASH_ALGOS, _check, _u32
from .errors import InvalidArgument


class BlockHashes:
    """Chained block hashes (kvp_hash_blocks): a sequence of 32-byte
    bytes objects, kept in C layout so that a Manager takes them without
    a copy.  XXH3-128 fills the first 16 bytes of each."""

    __slots__ = ("_c", "_n")

    def __init__(self, hashes=()):
        if isinstance(hashes, BlockHashes):
            self._c, self._n = hashes._c, hashes._n
            return
        _args.KINDS["hashes"]("BlockHashes", "hashes", hashes)
        hashes = list(hashes)
        self._n = len(hashes)
        self._c = ffi.new("struct kvp_hash[]", max(self._n, 1))
        for i, h in enumerate(hashes):
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


def _algo(where, algo):
    if not isinstance(algo, str) or algo not in HASH_ALGOS:
        raise InvalidArgument(22, "%s: algo must be one of %s, got %r"
                              % (where, ", ".join(HASH_ALGOS), algo))
    return HASH_ALGOS[algo]


def hash_blocks(tokens, block_tokens, algo="sha256", parent=None, salt=None,
                lora=None):
    """Chained hashes of the len(tokens) // block_tokens full blocks.

    algo is a key of HASH_ALGOS; parent (32 bytes) continues a chain (None:
    the root, where salt, bytes, is mixed in); lora names an adapter mixed
    into every block.  A pure function, safe from any thread."""
    w = "hash_blocks"
    a = _algo(w, algo)
    _args.integer(w, "block_tokens", block_tokens)
    if block_tokens < 1:
        raise InvalidArgument(22, "hash_blocks: block_tokens must be at "
                              "least 1, got %d" % block_tokens)
    if parent is not None:
        _args.KINDS["hash"](w, "parent", parent)
    _args.buffer(w, "salt", salt, none_ok=True)
    lora_b = _args.text(w, "lora", lora)
    try:
        toks, n, _keep = _u32(tokens)
    except (TypeError, OverflowError, ValueError) as e:
        _args.diagnose(w, {"tokens": "u32s"}, {"tokens": tokens}, e)
    nblocks = n // block_tokens
    out = BlockHashes()
    out._c = ffi.new("struct kvp_hash[]", max(nblocks, 1))
    par = ffi.NULL
    if parent is not None:
        par = BlockHashes([parent])._c
    keys = ffi.NULL
    if salt is not None or lora is not None:
        keys = ffi.new("struct kvp_hash_keys *")
        salt_c = ffi.from_buffer(salt) if salt else ffi.NULL
        lora_c = ffi.new("char[]", lora_b) if lora else ffi.NULL
        keys.salt, keys.salt_len, keys.lora = salt_c, \
            len(memoryview(salt).cast("B")) if salt else 0, lora_c
    out._n = _check(lib.kvp_hash_blocks_cap(a, par, keys, toks, n,
                                            block_tokens, out._c,
                                            max(nblocks, 1)), w)
    return out


def set_xxh3_seed(seed):
    """Seeds XXH3-128 hashes process-wide (so processes agree)."""
    _check(lib.kvp_hash_set_xxh3_seed(
        _args.integer("set_xxh3_seed", "seed", seed, "u64")))


def set_cbor_seed(seed):
    """Sets the seed of the "sha256_cbor" profile for the process, as
    vLLM's PYTHONHASHSEED does (kvp_hash_set_cbor_seed): its first
    block's parent becomes vLLM's NONE_HASH for that seed, so that a
    kvpool node and vLLM nodes started with PYTHONHASHSEED=seed agree on
    every block hash.  seed is a str (vLLM hashes the string); call it
    before hashing starts.  Without it the root is 32 random bytes drawn
    once per process, as vLLM's without PYTHONHASHSEED."""
    b = _args.text("set_cbor_seed", "seed", seed, none_ok=False)
    if b"\0" in b:
        raise InvalidArgument(22, "set_cbor_seed: seed must not contain NUL")
    _check(lib.kvp_hash_set_cbor_seed(b), "set_cbor_seed")


def cbor_seed_root(seed):
    """vLLM's NONE_HASH for a seed (32 bytes), without setting it
    (kvp_hash_cbor_seed_root)."""
    b = _args.text("cbor_seed_root", "seed", seed, none_ok=False)
    if b"\0" in b:
        raise InvalidArgument(22, "cbor_seed_root: seed must not contain "
                              "NUL")
    out = ffi.new("struct kvp_hash *")
    _check(lib.kvp_hash_cbor_seed_root(b, out), "cbor_seed_root")
    return bytes(ffi.buffer(out.b, 32))


def hash_cbor_block(parent, tokens, extra_keys=()):
    """One "sha256_cbor" block hash with any extra keys, in vLLM's order
    (its LoRA name, multimodal hashes, cache salt): SHA-256 of the
    canonical CBOR of [parent, tokens, extra_keys or null]
    (kvp_hash_cbor_block).  parent is 32 bytes, extra_keys a sequence of
    str (at most 64)."""
    w = "hash_cbor_block"
    _args.KINDS["hash"](w, "parent", parent)
    try:
        toks, n, _keep = _u32(tokens)
    except (TypeError, OverflowError, ValueError) as e:
        _args.diagnose(w, {"tokens": "u32s"}, {"tokens": tokens}, e)
    keys = [_args.text(w, "extra_keys[%d]" % i, k, none_ok=False)
            for i, k in enumerate(extra_keys)]
    if len(keys) > 64 or any(b"\0" in k for k in keys):
        raise InvalidArgument(22, "hash_cbor_block: extra_keys must be at "
                              "most 64 strings without NUL")
    kc = [ffi.new("char[]", k) for k in keys]
    arr = ffi.new("const char *[]", kc) if kc else ffi.NULL
    out = ffi.new("struct kvp_hash *")
    _check(lib.kvp_hash_cbor_block(BlockHashes([parent])._c, toks, n, arr,
                                   len(kc), out), w)
    return bytes(ffi.buffer(out.b, 32))


def hash_to_u64(h):
    """The 64-bit form of a block hash that vLLM's KV events carry with
    VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES and routers index by: its last 8
    bytes, big-endian (kvp_hash_to_u64)."""
    _args.KINDS["hash"]("hash_to_u64", "h", h)
    return lib.kvp_hash_to_u64(BlockHashes([h])._c)
