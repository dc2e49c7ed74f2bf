// SPDX-License-Identifier: MIT
//! Block tables exported for attention kernels: padded rows
//! (FlashAttention, vLLM), FlashInfer's `Csr`, slot mappings.
use std::ptr;

use crate::error::{check, len32, Result, ENOBUFS};
use crate::{sys, Manager};

/// The FlashInfer paged layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csr {
    /// Sequence i's pages are `indices[indptr[i]..indptr[i + 1]]`.
    pub indptr: Vec<i32>,
    /// Block ids, sequence after sequence.
    pub indices: Vec<i32>,
    /// Tokens in each sequence's last page.
    pub last_page_len: Vec<i32>,
}

impl Manager {
    /// FlashAttention / vLLM block table: (rows of `stride` ids padded
    /// with pad, stride).
    pub fn block_table(&self, seqs: &[u64], pad: i32) -> Result<(Vec<i32>, usize)> {
        let n = len32(seqs.len())?;
        loop {
            // SAFETY: a NULL table asks for the stride.
            let stride = check(unsafe {
                sys::kvp_export_block_table(
                    self.as_ptr(),
                    seqs.as_ptr(),
                    n,
                    ptr::null_mut(),
                    0,
                    pad,
                )
            })? as usize;
            let mut t = vec![0i32; stride * seqs.len()];
            // SAFETY: t has n rows of stride entries.
            let rc = unsafe {
                sys::kvp_export_block_table(
                    self.as_ptr(),
                    seqs.as_ptr(),
                    n,
                    t.as_mut_ptr(),
                    stride as u32,
                    pad,
                )
            };
            if rc == -ENOBUFS {
                continue; // a sequence grew meanwhile
            }
            check(rc)?;
            return Ok((t, stride));
        }
    }

    /// FlashInfer paged layout.
    pub fn csr(&self, seqs: &[u64]) -> Result<Csr> {
        let n = len32(seqs.len())?;
        loop {
            // SAFETY: NULL indices ask for the count.
            let need = check(unsafe {
                sys::kvp_export_csr(
                    self.as_ptr(),
                    seqs.as_ptr(),
                    n,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    0,
                    ptr::null_mut(),
                )
            })? as usize;
            let mut c = Csr {
                indptr: vec![0; seqs.len() + 1],
                indices: vec![0; need],
                last_page_len: vec![0; seqs.len()],
            };
            // SAFETY: the arrays have the sizes the call needs.
            let rc = unsafe {
                sys::kvp_export_csr(
                    self.as_ptr(),
                    seqs.as_ptr(),
                    n,
                    c.indptr.as_mut_ptr(),
                    c.indices.as_mut_ptr(),
                    need as u32,
                    c.last_page_len.as_mut_ptr(),
                )
            };
            if rc == -ENOBUFS {
                continue;
            }
            check(rc)?;
            return Ok(c);
        }
    }

    /// Slots (block * block_tokens + offset) of tokens first_pos ..
    /// first_pos + n - 1.
    pub fn slot_mapping(&self, seq: u64, first_pos: u32, n: u32) -> Result<Vec<i64>> {
        let mut s = vec![0i64; n as usize];
        // SAFETY: s has n entries.
        check(unsafe {
            sys::kvp_export_slot_mapping(self.as_ptr(), seq, first_pos, n, s.as_mut_ptr())
        })?;
        Ok(s)
    }
}
