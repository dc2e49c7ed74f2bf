// SPDX-License-Identifier: MIT
//! Errors: `Error` (a C call's negative errno and, for -ENOSPC and
//! -ENOBUFS, the details kvp_last_error recorded), `ErrorKind`, `Result`, and the
//! checks that turn C return values and slice lengths into them.
use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;

use crate::sys;

/// A failed kvpool call: the negative errno the C function returned and,
/// for a no-space error (`ENOSPC`) or a buffer too small (`ENOBUFS`), the
/// details the C library recorded (`kvp_last_error`): how many blocks (or
/// buffer entries) the call needed and how many it could have had.  An
/// invalid argument the crate caught before the C call also says which
/// ([`Error::detail`]: "Manager: eviction_threshold must be in [0, 1]").
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Error {
    code: i32,
    space: Option<Space>,
    detail: Option<&'static str>,
}

/// kvp_last_error's record of an ENOSPC or an ENOBUFS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Space {
    buffer: bool,
    requested: u64,
    available: u64,
}

/// What an [`Error`] means (from its errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// EINVAL: a bad argument.
    InvalidArgument,
    /// ENOSPC: not enough free blocks.
    NoSpace,
    /// ENOBUFS: a caller's output buffer too small (the crate sizes its
    /// own buffers, so only `sys` calls see it).
    BufferTooSmall,
    /// ENOMEM: out of host memory.
    NoMemory,
    /// ENOENT: unknown sequence.
    NotFound,
    /// EEXIST: sequence id in use.
    Exists,
    /// ERANGE: block id, position or count out of range.
    OutOfRange,
    /// EALREADY: block already free.
    AlreadyFree,
    /// EOVERFLOW: a count would overflow.
    Overflow,
    /// EBUSY: a shared block written, a cached block in use.
    Busy,
    /// EFAULT: an invariant check failed.
    CheckFailed,
    /// Any other errno.
    Other,
}

pub(crate) const ENOENT: i32 = 2;
pub(crate) const EBUSY: i32 = 16;
const EINVAL: i32 = 22;
pub(crate) const ENOSPC: i32 = 28;
pub(crate) const ENOBUFS: i32 = 105;

impl Error {
    /// The error of a C call (one of [`sys`](crate::sys)) that just
    /// returned rc (< 0) on this thread: an ENOSPC or an ENOBUFS picks up
    /// kvp_last_error's details, which the call has just recorded, so
    /// make no other kvpool call in between.
    #[cold]
    pub fn from_rc(rc: c_int) -> Error {
        let mut space = None;
        if rc == -ENOSPC || rc == -ENOBUFS {
            let mut info = sys::kvp_error_info::default();
            // SAFETY: info is a valid out pointer.
            if unsafe { sys::kvp_last_error(&mut info) } == 0 && info.err == rc {
                space = Some(Space {
                    buffer: info.buffer != 0,
                    requested: info.requested,
                    available: info.available,
                });
            }
        }
        Error {
            code: -rc,
            space,
            detail: None,
        }
    }
    pub(crate) fn from_errno(code: i32) -> Error {
        Error {
            code,
            space: None,
            detail: None,
        }
    }
    pub(crate) fn invalid() -> Error {
        Error::from_errno(EINVAL)
    }
    /// An invalid argument, named with its allowed values ("Pool:
    /// block_tokens must be at least 1").
    pub(crate) fn invalid_arg(detail: &'static str) -> Error {
        Error {
            code: EINVAL,
            space: None,
            detail: Some(detail),
        }
    }
    /// For an invalid argument the crate caught: which argument and what
    /// it may be ("Manager: watermark must be in [0, 1)").  None
    /// otherwise.
    pub fn detail(&self) -> Option<&'static str> {
        self.detail
    }
    /// The errno (positive).
    pub fn errno(&self) -> i32 {
        self.code
    }
    /// kvp_strerror()'s text.
    pub fn message(&self) -> &'static str {
        // SAFETY: kvp_strerror returns a static, NUL-terminated string.
        unsafe { CStr::from_ptr(sys::kvp_strerror(-self.code)) }
            .to_str()
            .unwrap_or("?")
    }
    /// The errno's meaning.
    pub fn kind(&self) -> ErrorKind {
        match self.code {
            22 => ErrorKind::InvalidArgument,
            28 => ErrorKind::NoSpace,
            105 => ErrorKind::BufferTooSmall,
            12 => ErrorKind::NoMemory,
            2 => ErrorKind::NotFound,
            17 => ErrorKind::Exists,
            34 => ErrorKind::OutOfRange,
            114 => ErrorKind::AlreadyFree,
            75 => ErrorKind::Overflow,
            16 => ErrorKind::Busy,
            14 => ErrorKind::CheckFailed,
            _ => ErrorKind::Other,
        }
    }
    /// For a no-space error: the blocks the call needed at once; for a
    /// buffer too small, the entries it needed.  None for other errors.
    pub fn requested(&self) -> Option<u64> {
        self.space.map(|s| s.requested)
    }
    /// For a no-space error: the blocks the call could have had when it
    /// gave up (free, parked in thread caches, evictable cached blocks; a
    /// recent count while other threads run); for a buffer too small, the
    /// buffer's capacity.  None for other errors.
    pub fn available(&self) -> Option<u64> {
        self.space.map(|s| s.available)
    }
    /// True for a caller's buffer too small (ENOBUFS,
    /// [`ErrorKind::BufferTooSmall`]); false for other errors.
    pub fn is_buffer_too_small(&self) -> bool {
        self.code == ENOBUFS
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Error({:?}, errno {}: {}",
            self.kind(),
            self.code,
            self.message()
        )?;
        if let Some(s) = self.space {
            write!(
                f,
                ", {} requested {}, available {}",
                if s.buffer { "buffer" } else { "blocks" },
                s.requested,
                s.available
            )?;
        }
        if let Some(d) = self.detail {
            write!(f, ": {}", d)?;
        }
        write!(f, ")")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.space {
            Some(s) if s.buffer => write!(
                f,
                "kvpool: {}: {} entries needed, room for {} (errno {})",
                self.message(),
                s.requested,
                s.available,
                self.code
            ),
            Some(s) => write!(
                f,
                "kvpool: {}: requested {}, available {} (errno {})",
                self.message(),
                s.requested,
                s.available,
                self.code
            ),
            None => match self.detail {
                Some(d) => write!(f, "kvpool: {}: {} (errno {})", self.message(), d, self.code),
                None => write!(f, "kvpool: {} (errno {})", self.message(), self.code),
            },
        }
    }
}

impl std::error::Error for Error {}

/// `Result<T, kvpool::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

#[inline]
pub(crate) fn check(rc: c_int) -> Result<c_int> {
    if rc < 0 {
        Err(Error::from_rc(rc))
    } else {
        Ok(rc)
    }
}

pub(crate) fn len32(n: usize) -> Result<u32> {
    if n > u32::MAX as usize {
        Err(Error::invalid())
    } else {
        Ok(n as u32)
    }
}
