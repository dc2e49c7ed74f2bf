// SPDX-License-Identifier: MIT
//! Prefix-cache events: `EventKind`, `Event`, and a manager's event
//! callback, which the C library calls through a trampoline.
use std::os::raw::c_void;
use std::ptr;

use crate::error::{check, Result};
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
}
