// SPDX-License-Identifier: MIT
//! Block hashes: `BlockHash`, the `HashAlgo` profiles, a request's
//! `HashKeys`, `hash_blocks` and the process-wide XXH3 seed.
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
}

impl HashAlgo {
    /// Every profile, for code that must cover them all.
    pub const ALL: &'static [HashAlgo] = &[HashAlgo::Sha256, HashAlgo::Xxh3_128];
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
        return Err(Error::invalid());
    }
    let n = len32(tokens.len())?;
    let mut out = vec![BlockHash::default(); (n / block_tokens) as usize];
    let lora = match keys.lora {
        Some(s) => Some(CString::new(s).map_err(|_| Error::invalid())?),
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
