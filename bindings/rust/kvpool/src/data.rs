// SPDX-License-Identifier: MIT
//! K/V data of a data-owning pool through its sequences: one token's
//! rows written and read, one layer gathered.
use std::os::raw::c_void;
use std::ptr;

use crate::error::{check, Error, Result};
use crate::{sys, Element, Manager};
// For write's doc link.
#[cfg(doc)]
use crate::PoolConfig;

impl Manager {
    fn row_elems<T: Element>(&self) -> Result<usize> {
        match self.pool.dtype {
            Some(d) if d.size() == std::mem::size_of::<T>() => Ok(self.pool.row_bytes() / d.size()),
            Some(_) => Err(Error::invalid_arg(
                "the element type's size must be the pool's dtype's",
            )),
            None => Err(Error::invalid_arg("an ID-only pool has no KV data")),
        }
    }

    /// InvalidArgument unless k is one row of T and v one row too, or
    /// empty in a K-only pool.
    fn check_rows<T: Element>(&self, k: usize, v: usize) -> Result<()> {
        let n = self.row_elems::<T>()?;
        let v_want = if self.pool.k_only { 0 } else { n };
        if k != n {
            return Err(Error::invalid_arg("k must hold one row of the layout"));
        }
        if v != v_want {
            return Err(Error::invalid_arg(if self.pool.k_only {
                "v must be empty in a K-only pool"
            } else {
                "v must hold one row of the layout"
            }));
        }
        Ok(())
    }

    /// (row elements, K and V vectors for seq's tokens now; V empty in a
    /// K-only pool).
    fn gather_bufs<T: Element>(&self, seq: u64) -> Result<(usize, Vec<T>, Vec<T>)> {
        let n = self.row_elems::<T>()?;
        let tokens = self.info(seq)?.num_tokens as usize;
        let v = if self.pool.k_only {
            Vec::new()
        } else {
            vec![T::default(); n * tokens]
        };
        Ok((n, vec![T::default(); n * tokens], v))
    }

    /// V's pointer for the C data calls: NULL in a K-only pool.
    fn v_ptr<T>(&self, v: *const T) -> *const c_void {
        if self.pool.k_only {
            ptr::null()
        } else {
            v as *const c_void
        }
    }

    /// Writes token pos's K and V rows of one layer (row_bytes each).  In
    /// a K-only pool ([`PoolConfig::k_only`]) v must be empty.
    pub fn write<T: Element>(
        &self,
        seq: u64,
        pos: u32,
        layer: u32,
        k: &[T],
        v: &[T],
    ) -> Result<()> {
        self.check_rows::<T>(k.len(), v.len())?;
        // SAFETY: k holds one row, v one row or (K-only) is passed NULL.
        check(unsafe {
            sys::kvp_seq_write(
                self.as_ptr(),
                seq,
                pos,
                layer,
                k.as_ptr() as *const c_void,
                self.v_ptr(v.as_ptr()),
            )
        })
        .map(|_| ())
    }

    /// Reads token pos's K and V rows of one layer into k and v.  In a
    /// K-only pool v must be empty.
    pub fn read<T: Element>(
        &self,
        seq: u64,
        pos: u32,
        layer: u32,
        k: &mut [T],
        v: &mut [T],
    ) -> Result<()> {
        self.check_rows::<T>(k.len(), v.len())?;
        // SAFETY: k has room for one row, v for one or (K-only) is
        // passed NULL.
        check(unsafe {
            sys::kvp_seq_read(
                self.as_ptr(),
                seq,
                pos,
                layer,
                k.as_mut_ptr() as *mut c_void,
                self.v_ptr(v.as_ptr()) as *mut c_void,
            )
        })
        .map(|_| ())
    }

    /// One layer of the whole sequence as contiguous K and V
    /// `[tokens][heads][dim]` vectors, read token by token (safe while
    /// other threads append to seq: it returns the tokens it saw).  V is
    /// empty in a K-only pool.
    pub fn gather<T: Element>(&self, seq: u64, layer: u32) -> Result<(Vec<T>, Vec<T>)> {
        let (n, mut k, mut v) = self.gather_bufs::<T>(seq)?;
        let rows = k.chunks_mut(n.max(1));
        if self.pool.k_only {
            for (pos, kr) in rows.enumerate() {
                self.read(seq, pos as u32, layer, kr, &mut [])?;
            }
        } else {
            for (pos, (kr, vr)) in rows.zip(v.chunks_mut(n.max(1))).enumerate() {
                self.read(seq, pos as u32, layer, kr, vr)?;
            }
        }
        Ok((k, v))
    }

    /// As gather, in one C call (kvp_seq_gather).
    ///
    /// # Safety
    /// No other thread may append to seq during the call: the C function
    /// writes every token the sequence holds when it runs, into vectors
    /// sized from its token count just before.
    pub unsafe fn gather_unchecked<T: Element>(
        &self,
        seq: u64,
        layer: u32,
    ) -> Result<(Vec<T>, Vec<T>)> {
        let (_, mut k, mut v) = self.gather_bufs::<T>(seq)?;
        check(sys::kvp_seq_gather(
            self.as_ptr(),
            seq,
            layer,
            k.as_mut_ptr() as *mut c_void,
            self.v_ptr(v.as_mut_ptr()) as *mut c_void,
        ))?;
        Ok((k, v))
    }
}
