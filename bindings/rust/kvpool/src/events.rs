// SPDX-License-Identifier: MIT
//! Prefix-cache events: `EventKind`, `Event`, and a manager's event
//! callback, which the C library calls through a trampoline.
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::ptr;

use crate::error::{check, Error, Result};
use crate::{sys, BlockHash, Manager};

/// What a prefix-cache event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Blocks were cached.
    Stored,
    /// Cached blocks were evicted.
    Removed,
    /// The cache was reset.
    Cleared,
}

/// A prefix-cache event; its slices live for the callback only.
#[derive(Debug)]
pub struct Event<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The blocks' hashes (empty for Cleared).
    pub hashes: &'a [BlockHash],
    /// Stored: the hash before `hashes[0]`, None at the root.
    pub parent: Option<&'a BlockHash>,
    /// Tokens per block.
    pub block_tokens: u32,
    /// Tokens the event covers.
    pub num_tokens: u32,
    /// The manager's event number: 0, 1, 2, ... in delivery order.
    pub seq: u64,
    /// Stored by [`Manager::commit_ex`] with tokens: the stored blocks'
    /// tokens (`num_tokens` of them).
    pub token_ids: Option<&'a [u32]>,
    /// Stored by a commit that named one: the LoRA adapter.
    pub lora_name: Option<&'a str>,
    /// Stored by a commit that gave one: the LoRA id.
    pub lora_id: Option<i64>,
    /// The manager's medium ([`Manager::set_event_medium`]), if set.
    pub medium: Option<&'a str>,
    /// Stored: the retention priority the commit gave the blocks.
    pub priority: u32,
    /// Stored: the event reports cached blocks a creation reused
    /// ([`ManagerConfig::emit_cached_events`](crate::ManagerConfig)):
    /// hashes from the root, no tokens.
    pub reused: bool,
    extra: &'a [*const c_char],
}

impl<'a> Event<'a> {
    /// Stored: the extra keys the commit gave (vLLM's extra_keys), in
    /// order; none for other events.
    pub fn extra_keys(&self) -> impl Iterator<Item = &'a str> + 'a {
        let keys: &'a [*const c_char] = self.extra;
        // SAFETY: the C library's NUL-terminated strings, alive for the
        // callback, as 'a is.
        keys.iter()
            .map(|&k| unsafe { CStr::from_ptr(k) }.to_str().unwrap_or(""))
    }
}

/// A C string of the event as a &str (None for NULL or bad UTF-8).
unsafe fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        CStr::from_ptr(p).to_str().ok()
    }
}

pub(crate) type EventFn = dyn Fn(&Event<'_>) + Send + Sync;

unsafe extern "C" fn event_trampoline(ev: *const sys::kvp_event, arg: *mut c_void) {
    let f = &*(arg as *const Box<EventFn>);
    let e = &*ev;
    let hashes: &[BlockHash] = if e.hashes.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(e.hashes, e.nhashes as usize)
    };
    let stored = e.kind == 0;
    let event = Event {
        kind: match e.kind {
            0 => EventKind::Stored,
            1 => EventKind::Removed,
            _ => EventKind::Cleared,
        },
        hashes,
        parent: e.parent.as_ref(),
        block_tokens: e.block_tokens,
        num_tokens: e.num_tokens,
        seq: e.seq,
        token_ids: if stored && !e.token_ids.is_null() {
            Some(std::slice::from_raw_parts(e.token_ids, e.num_tokens as usize))
        } else {
            None
        },
        lora_name: if stored { opt_str(e.lora_name) } else { None },
        lora_id: if stored && e.lora_id >= 0 {
            Some(e.lora_id)
        } else {
            None
        },
        medium: opt_str(e.medium),
        priority: e.priority,
        reused: e.reused != 0,
        extra: if stored && !e.extra_keys.is_null() {
            std::slice::from_raw_parts(e.extra_keys, e.nextra_keys as usize)
        } else {
            &[]
        },
    };
    // Unwinding into C is undefined: a panicking callback aborts.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&event))).is_err() {
        eprintln!("kvpool: the event callback panicked");
        std::process::abort();
    }
}

impl Manager {
    /// Calls f for every prefix-cache event (None: stop).  f runs in the
    /// thread whose call caused the event (a commit's, any allocation's
    /// on the pool that evicts, a reset's), so concurrently from several
    /// threads; it must not call kvpool on the pool.  A panic in f aborts.
    pub fn set_event_callback(&mut self, f: Option<Box<EventFn>>) -> Result<()> {
        match f {
            None => {
                // SAFETY: &mut self: nobody else uses the manager.
                check(unsafe {
                    sys::kvp_manager_set_event_cb(self.as_ptr(), None, ptr::null_mut())
                })?;
                self.cb = None;
            }
            Some(f) => {
                let b: Box<Box<EventFn>> = Box::new(f);
                let arg = &*b as *const Box<EventFn> as *mut c_void;
                // SAFETY: arg points into a box kept alive in self.cb
                // until it is replaced, after the C side stops using it.
                check(unsafe {
                    sys::kvp_manager_set_event_cb(self.as_ptr(), Some(event_trampoline), arg)
                })?;
                self.cb = Some(b);
            }
        }
        Ok(())
    }

    /// Names where the manager's blocks live ("GPU", "CPU", ...; at most
    /// 15 bytes) in every event it reports; None clears it.  Takes
    /// `&mut self`: set it before other threads use the manager.
    pub fn set_event_medium(&mut self, medium: Option<&str>) -> Result<()> {
        let c = match medium {
            Some(m) if m.len() > 15 || m.contains('\0') => {
                return Err(Error::invalid_arg(
                    "set_event_medium: medium must be at most 15 bytes without NUL",
                ))
            }
            Some(m) => Some(CString::new(m).map_err(|_| Error::invalid())?),
            None => None,
        };
        // SAFETY: &mut self; the string is copied by the call.
        check(unsafe {
            sys::kvp_manager_set_event_medium(
                self.as_ptr(),
                c.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            )
        })
        .map(|_| ())
    }
}
