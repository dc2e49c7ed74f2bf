// SPDX-License-Identifier: MIT
//! Block hashes: `BlockHash`, the `HashAlgo` profiles, a request's
//! `HashKeys`, `hash_blocks`, the process-wide XXH3 seed and vLLM's
//! sha256_cbor seed and blocks.
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

use crate::error::{check, len32, Error, Result};
use crate::sys;

/// A block hash (SHA-256 fills 32 bytes, XXH3-128 the first 16).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct BlockHash(pub [u8; 32]);

/// Hash profiles (`enum kvp_hash_algo`): a new C profile is one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashAlgo {
    /// SHA-256 (32 bytes).
    Sha256 = 0,
    /// XXH3-128 (the first 16 bytes), seeded by [`set_xxh3_seed`].
    Xxh3_128 = 1,
    /// vLLM's sha256_cbor, bit for bit (its root from [`set_cbor_seed`]).
    Sha256Cbor = 2,
}

impl HashAlgo {
    /// Every profile, for code that must cover them all.
    pub const ALL: &'static [HashAlgo] =
        &[HashAlgo::Sha256, HashAlgo::Xxh3_128, HashAlgo::Sha256Cbor];
}

impl BlockHash {
    /// The 64-bit form vLLM's KV events carry with
    /// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES and routers index by: the last
    /// 8 bytes, big-endian (`kvp_hash_to_u64`).
    pub fn to_u64(&self) -> u64 {
        // SAFETY: self is a valid hash.
        unsafe { sys::kvp_hash_to_u64(self) }
    }
}

/// Extra keys of a request.
#[derive(Clone, Copy, Debug, Default)]
pub struct HashKeys<'a> {
    /// Mixed into the root block only (tenant isolation).
    pub salt: Option<&'a [u8]>,
    /// LoRA adapter name, mixed into every block.
    pub lora: Option<&'a str>,
}

/// Chained hashes of the tokens.len() / block_tokens full blocks (parent
/// None: from the root).  A pure function.
pub fn hash_blocks(
    algo: HashAlgo,
    parent: Option<&BlockHash>,
    keys: &HashKeys<'_>,
    tokens: &[u32],
    block_tokens: u32,
) -> Result<Vec<BlockHash>> {
    if block_tokens == 0 {
        return Err(Error::invalid_arg("hash_blocks: block_tokens must be at least 1"));
    }
    let n = len32(tokens.len())?;
    let mut out = vec![BlockHash::default(); (n / block_tokens) as usize];
    let lora = match keys.lora {
        Some(s) => Some(
            CString::new(s)
                .map_err(|_| Error::invalid_arg("hash_blocks: lora must not contain NUL"))?,
        ),
        None => None,
    };
    let k = sys::kvp_hash_keys {
        salt: keys
            .salt
            .map_or(ptr::null(), |s| s.as_ptr() as *const c_void),
        salt_len: keys.salt.map_or(0, |s| s.len()),
        lora: lora
            .as_ref()
            .map_or(ptr::null(), |s| s.as_ptr() as *const c_char),
    };
    // SAFETY: out has room for out.len() hashes; k's pointers live.
    let got = check(unsafe {
        sys::kvp_hash_blocks_cap(
            algo as c_int,
            parent.map_or(ptr::null(), |p| p as *const _),
            &k,
            tokens.as_ptr(),
            n,
            block_tokens,
            out.as_mut_ptr(),
            len32(out.len())?,
        )
    })?;
    out.truncate(got as usize);
    Ok(out)
}

/// Seeds XXH3-128 hashes process-wide (so several processes agree).
pub fn set_xxh3_seed(seed: u64) {
    // SAFETY: plain call.
    unsafe { sys::kvp_hash_set_xxh3_seed(seed) };
}

fn seed_string(what: &'static str, seed: &str) -> Result<CString> {
    CString::new(seed).map_err(|_| Error::invalid_arg(what))
}

/// Sets the sha256_cbor profile's seed for the process, as vLLM's
/// PYTHONHASHSEED does (`kvp_hash_set_cbor_seed`), so that this node
/// and vLLM nodes agree on every block hash.  Call it before hashing.
pub fn set_cbor_seed(seed: &str) -> Result<()> {
    let c = seed_string("set_cbor_seed: seed must not contain NUL", seed)?;
    // SAFETY: a NUL-terminated string, copied by the call.
    check(unsafe { sys::kvp_hash_set_cbor_seed(c.as_ptr()) }).map(|_| ())
}

/// vLLM's NONE_HASH for a seed, without setting it.
pub fn cbor_seed_root(seed: &str) -> Result<BlockHash> {
    let c = seed_string("cbor_seed_root: seed must not contain NUL", seed)?;
    let mut out = BlockHash::default();
    // SAFETY: valid pointers for the call.
    check(unsafe { sys::kvp_hash_cbor_seed_root(c.as_ptr(), &mut out) })?;
    Ok(out)
}

/// One sha256_cbor block hash with any extra keys, in vLLM's order (its
/// LoRA name, multimodal hashes, cache salt; at most 64).
pub fn hash_cbor_block(parent: &BlockHash, tokens: &[u32], extra_keys: &[&str]) -> Result<BlockHash> {
    let keys = extra_keys
        .iter()
        .map(|k| seed_string("hash_cbor_block: extra keys must not contain NUL", k))
        .collect::<Result<Vec<CString>>>()?;
    let ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
    let mut out = BlockHash::default();
    // SAFETY: tokens and ptrs have the lengths passed; the strings live.
    check(unsafe {
        sys::kvp_hash_cbor_block(
            parent,
            tokens.as_ptr(),
            len32(tokens.len())?,
            if ptrs.is_empty() { ptr::null() } else { ptrs.as_ptr() },
            len32(ptrs.len())?,
            &mut out,
        )
    })?;
    Ok(out)
}
