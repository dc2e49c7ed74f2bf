// SPDX-License-Identifier: MIT
//! `Pool::metrics`: the OpenMetrics (or Prometheus) text of a pool and
//! its managers.
use std::os::raw::c_char;

use crate::error::{check, len32, Error, Result, ENOBUFS};
use crate::{sys, Manager, Pool};

impl Pool {
    /// The pool's and the managers' counters and gauges as OpenMetrics
    /// text (`kvp_metrics_write`), or the Prometheus text format 0.0.4
    /// with `prometheus`.
    pub fn metrics(&self, managers: &[&Manager], prometheus: bool) -> Result<String> {
        let ptrs: Vec<*mut sys::kvp_manager> = managers.iter().map(|m| m.as_ptr()).collect();
        let n = len32(ptrs.len())?;
        let mut cap = 16384usize;
        loop {
            let mut buf = vec![0u8; cap];
            let mut len = 0usize;
            // SAFETY: ptrs holds n live managers; buf has cap bytes.
            let rc = unsafe {
                sys::kvp_metrics_format(
                    self.as_ptr(),
                    ptrs.as_ptr(),
                    n,
                    prometheus as u32,
                    buf.as_mut_ptr() as *mut c_char,
                    cap,
                    &mut len,
                )
            };
            if rc == -ENOBUFS {
                cap = len + 4096; // counters may have grown meanwhile
                continue;
            }
            check(rc)?;
            buf.truncate(len);
            return String::from_utf8(buf).map_err(|_| Error::invalid());
        }
    }
}
