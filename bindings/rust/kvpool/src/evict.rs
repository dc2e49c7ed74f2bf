// SPDX-License-Identifier: MIT
//! Admission and eviction: `Admit`, the policy switch, and the calls
//! that name or evict victims by policy.
use std::os::raw::c_int;

use crate::error::{check, Error, Result, ENOENT};
use crate::{sys, Manager, Policy};

/// kvp_admit's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// It fits now.
    Ok,
    /// It fits once sequences finish or are evicted.
    Later,
    /// It can never fit in this pool.
    Never,
}

impl Manager {
    /// Changes the eviction policy of a manager that may hold sequences
    /// and be in use by other threads: choices that start after the call
    /// use the new policy (`kvp_manager_set_policy`).
    pub fn set_policy(&self, policy: Policy) -> Result<()> {
        // SAFETY: plain call on a live manager.
        check(unsafe { sys::kvp_manager_set_policy(self.as_ptr(), policy as c_int) }).map(|_| ())
    }

    /// The sequence [`evict`](Manager::evict) would choose now, evicting
    /// nothing (None: no sequence).  Advice only: another thread's
    /// append, fork or free may change the choice before the next call.
    pub fn peek_victim(&self) -> Result<Option<u64>> {
        let mut v = 0u64;
        // SAFETY: v is a valid out pointer.
        let rc = unsafe { sys::kvp_evict_peek(self.as_ptr(), &mut v) };
        if rc == -ENOENT {
            return Ok(None);
        }
        check(rc)?;
        Ok(Some(v))
    }

    /// Whether num_tokens more tokens fit: now, later (once sequences
    /// finish or are evicted) or never.  Advice only.
    pub fn admit(&self, num_tokens: u32) -> Result<Admit> {
        // SAFETY: plain call on a live manager.
        Ok(
            match check(unsafe { sys::kvp_admit(self.as_ptr(), num_tokens) })? {
                0 => Admit::Ok,
                1 => Admit::Later,
                _ => Admit::Never,
            },
        )
    }

    /// Evicts one sequence by policy and returns its id.
    pub fn evict(&self) -> Result<u64> {
        let mut v = 0u64;
        // SAFETY: v is a valid out pointer.
        check(unsafe { sys::kvp_evict(self.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Evicts until utilisation <= target, at most cap sequences; a
    /// negative target means the manager's threshold (as `None` in
    /// [`evict_until_into`](Manager::evict_until_into)).  Returns
    /// (victims, target met).  The Vec grows with the victims rather
    /// than holding cap entries up front.
    pub fn evict_until(&self, target: f32, cap: u32) -> Result<(Vec<u64>, bool)> {
        let mut v = Vec::new();
        let target = if target < 0.0 { None } else { Some(target) };
        let met = self.evict_until_into(target, cap, &mut v)?;
        Ok((v, met))
    }

    /// Evicts by policy until utilisation <= target (None: the manager's
    /// [`eviction_threshold`](Manager::eviction_threshold)), at most cap
    /// sequences, the victims into out (its contents replaced; nothing
    /// allocated while it has room).  Returns whether the target was met
    /// (false: cap reached or no sequence left); the victims reported
    /// are evicted either way.
    pub fn evict_until_into(
        &self,
        target: Option<f32>,
        cap: u32,
        out: &mut Vec<u64>,
    ) -> Result<bool> {
        let target = match target {
            Some(t) if t < 0.0 => {
                return Err(Error::invalid_arg(
                    "evict_until_into: target must be in [0, 1] (None: the threshold)",
                ))
            }
            Some(t) => t,
            None => -1.0,
        };
        out.clear();
        loop {
            let left = cap as usize - out.len();
            if out.capacity() == out.len() && left > 0 {
                out.reserve(left.min(out.len().max(8)));
            }
            let room = (out.capacity() - out.len()).min(left) as u32;
            let mut n = 0u32;
            // SAFETY: out has room for `room` more entries past its
            // length; the call writes *n <= room of them.
            let rc = check(unsafe {
                sys::kvp_evict_until(
                    self.as_ptr(),
                    target,
                    out.as_mut_ptr().add(out.len()),
                    room,
                    &mut n,
                )
            })?;
            // SAFETY: n more entries are written.
            unsafe { out.set_len(out.len() + n as usize) };
            if rc == 0 {
                return Ok(true);
            }
            // Partial: victims[] full (go on while cap allows) or no
            // sequence left.
            if n < room || out.len() >= cap as usize {
                return Ok(false);
            }
        }
    }
}
