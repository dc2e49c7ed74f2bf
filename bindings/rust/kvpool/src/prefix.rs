// SPDX-License-Identifier: MIT
//! The prefix cache's sequence calls: create from cached blocks,
//! commit (with `Retention` ranges at the `RETAIN_*` priorities), the
//! retention clock, reset.
use std::ffi::CString;
use std::os::raw::c_char;
use std::ptr;

use crate::error::{check, len32, Error, Result};
use crate::{sys, BlockHash, Manager};

/// Retention priorities (kvpool.h): the default, the highest below a
/// pin, and a pin (never evicted; capped per manager).
pub const RETAIN_DEFAULT: u32 = 0;
/// The highest retention priority below a pin.
pub const RETAIN_MAX: u32 = 14;
/// Pinned: never evicted while pinned (capped per manager).
pub const RETAIN_PIN: u32 = 15;

/// `struct kvp_retention`: tokens [first_token, first_token + num_tokens)
/// (num_tokens 0: to the end) at `priority` for `duration` ticks of the
/// manager's retention clock (0: for ever).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// First token of the range.
    pub first_token: u32,
    /// Tokens in the range (0: to the end).
    pub num_tokens: u32,
    /// RETAIN_DEFAULT ..= RETAIN_PIN.
    pub priority: u32,
    /// Retention-clock ticks (0: no expiry).
    pub duration: u64,
}

/// What a commit tells the events it causes ([`Manager::commit_ex`]):
/// the stored blocks' tokens, the LoRA adapter and extra keys, as vLLM's
/// BlockStored carries them, and retention ranges.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommitInfo<'a> {
    /// The sequence's tokens from position 0, at least as many as the
    /// committed blocks cover (the events get the stored blocks').
    pub tokens: Option<&'a [u32]>,
    /// The LoRA adapter's name.
    pub lora_name: Option<&'a str>,
    /// The LoRA adapter's id.
    pub lora_id: Option<i64>,
    /// Extra keys hashed into every block (vLLM's extra_keys).
    pub extra_keys: &'a [&'a str],
    /// Retention, as [`Manager::commit_retained`] (refused pins are not
    /// reported).
    pub ranges: &'a [Retention],
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid_arg("commit_ex: strings must not contain NUL"))
}

impl Manager {
    /// How many of hashes, from the first, are cached now: the hit
    /// [`create_cached`](Manager::create_cached) would take (before its
    /// cap on the last token), for sizing a request before admitting it.
    /// Takes nothing and changes no statistic; advice, as another
    /// thread's eviction or commit may change it the moment after.
    pub fn prefix_match(&self, hashes: &[BlockHash]) -> Result<u32> {
        let mut cached = 0u32;
        // SAFETY: hashes has nhashes entries; cached is a valid out
        // pointer.
        check(unsafe {
            sys::kvp_prefix_match(
                self.as_ptr(),
                hashes.as_ptr(),
                len32(hashes.len())?,
                &mut cached,
            )
        })?;
        Ok(cached)
    }

    /// Creates seq reusing the longest cached prefix of hashes; returns
    /// the number of tokens served from the cache.
    pub fn create_cached(&self, seq: u64, hashes: &[BlockHash], num_tokens: u32) -> Result<u32> {
        let mut cached = 0u32;
        // SAFETY: hashes has nhashes entries.
        check(unsafe {
            sys::kvp_seq_create_cached(
                self.as_ptr(),
                seq,
                hashes.as_ptr(),
                len32(hashes.len())?,
                num_tokens,
                &mut cached,
            )
        })?;
        Ok(cached)
    }

    /// Registers seq's full blocks under hashes; returns how many blocks
    /// were newly cached.
    pub fn commit(&self, seq: u64, hashes: &[BlockHash]) -> Result<u32> {
        // SAFETY: hashes has nhashes entries.
        check(unsafe {
            sys::kvp_seq_commit(self.as_ptr(), seq, hashes.as_ptr(), len32(hashes.len())?)
        })
        .map(|n| n as u32)
    }

    /// commit with retention ranges; returns (blocks newly cached, pins
    /// the manager's cap refused).
    pub fn commit_retained(
        &self,
        seq: u64,
        hashes: &[BlockHash],
        ranges: &[Retention],
    ) -> Result<(u32, u32)> {
        let mut unpinned = 0u32;
        // SAFETY: hashes and ranges have the lengths passed.
        let n = check(unsafe {
            sys::kvp_seq_commit_retained(
                self.as_ptr(),
                seq,
                hashes.as_ptr(),
                len32(hashes.len())?,
                ranges.as_ptr(),
                len32(ranges.len())?,
                &mut unpinned,
            )
        })?;
        Ok((n as u32, unpinned))
    }

    /// [`commit`](Manager::commit) whose "stored" events carry info's
    /// tokens, LoRA name and id and extra keys (`kvp_seq_commit_ex`);
    /// returns how many blocks were newly cached.
    pub fn commit_ex(&self, seq: u64, hashes: &[BlockHash], info: &CommitInfo<'_>) -> Result<u32> {
        let lora = match info.lora_name {
            Some(l) => Some(c_string(l)?),
            None => None,
        };
        let keys = info
            .extra_keys
            .iter()
            .map(|k| c_string(k))
            .collect::<Result<Vec<CString>>>()?;
        let key_ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
        let tokens = info.tokens.unwrap_or(&[]);
        let c = sys::kvp_commit_info {
            tokens: info.tokens.map_or(ptr::null(), |t| t.as_ptr()),
            ntokens: len32(tokens.len())?,
            lora_name: lora.as_ref().map_or(ptr::null(), |l| l.as_ptr()),
            lora_id: info.lora_id.unwrap_or(-1),
            extra_keys: if key_ptrs.is_empty() {
                ptr::null()
            } else {
                key_ptrs.as_ptr()
            },
            nextra_keys: len32(key_ptrs.len())?,
            ranges: info.ranges.as_ptr(),
            nranges: len32(info.ranges.len())?,
        };
        // SAFETY: every pointer in c lives until the call returns.
        check(unsafe {
            sys::kvp_seq_commit_ex(self.as_ptr(), seq, hashes.as_ptr(), len32(hashes.len())?, &c)
        })
        .map(|n| n as u32)
    }

    /// Advances the retention clock by steps; returns the new time.
    pub fn tick(&self, steps: u64) -> Result<u64> {
        let mut now = 0u64;
        // SAFETY: now is valid for the call.
        check(unsafe { sys::kvp_manager_tick(self.as_ptr(), steps, &mut now) })?;
        Ok(now)
    }

    /// (priority, expiry; 0: none) of the block cached under hash.
    pub fn retention(&self, hash: &BlockHash) -> Result<(u32, u64)> {
        let (mut prio, mut exp) = (0u32, 0u64);
        // SAFETY: the pointers are valid for the call.
        check(unsafe { sys::kvp_prefix_retention(self.as_ptr(), hash, &mut prio, &mut exp) })?;
        Ok((prio, exp))
    }

    /// Drops every idle cached block of the manager's prefix cache.
    pub fn prefix_reset(&self) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_prefix_reset(self.as_ptr()) }).map(|_| ())
    }
}
