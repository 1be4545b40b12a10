//! Locking between processes (docs/FORMAT.md, "Locking").
//!
//! Two byte-range locks on `meta.zr`, taken with open-file-description locks
//! (`F_OFD_SETLK`): they belong to one open of the file, so two handles in one
//! process exclude each other like two processes do, a forked child shares its
//! parent's, and the kernel drops them when the holder dies — a killed process
//! never blocks the next open.
//!
//! - byte 0, the *use* lock: every open store holds it shared; `delete` and
//!   `compact` upgrade it to exclusive for their duration, so they run only
//!   when no other handle has the store open.
//! - byte 1, the *append* lock: held exclusive for the duration of each
//!   append, so at most one handle appends at a time.
//!
//! Every attempt is non-blocking: a conflict is reported at once, as
//! [`crate::Error::Busy`], rather than waited out.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use crate::error::{Error, Result};

/// Byte of `meta.zr` whose lock says "this store is in use".
const USE_BYTE: i64 = 0;
/// Byte of `meta.zr` whose lock says "an append is in progress".
const APPEND_BYTE: i64 = 1;

#[derive(Clone, Copy)]
enum Kind {
    Shared,
    Exclusive,
    Unlock,
}

fn set(fd: RawFd, byte: i64, kind: Kind) -> std::io::Result<bool> {
    // SAFETY: an all-zero flock is a valid value to fill in.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = match kind {
        Kind::Shared => libc::F_RDLCK,
        Kind::Exclusive => libc::F_WRLCK,
        Kind::Unlock => libc::F_UNLCK,
    } as _;
    lock.l_whence = libc::SEEK_SET as _;
    lock.l_start = byte as _;
    lock.l_len = 1;
    // SAFETY: a valid descriptor and a pointer to a live, initialised flock.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut lock) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

fn busy(path: &Path, what: &str) -> Error {
    Error::Busy {
        path: path.to_path_buf(),
        reason: what.to_string(),
    }
}

fn try_set(file: &File, path: &Path, byte: i64, kind: Kind, what: &str) -> Result<()> {
    match set(file.as_raw_fd(), byte, kind) {
        Ok(true) => Ok(()),
        Ok(false) => Err(busy(path, what)),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Takes the shared use lock when a store is opened.
pub(crate) fn share(file: &File, path: &Path) -> Result<()> {
    try_set(
        file,
        path,
        USE_BYTE,
        Kind::Shared,
        "another handle is deleting or compacting it",
    )
}

/// Holds the use lock exclusively until dropped, then shares it again. It
/// keeps the bare descriptor, not a borrow, so the store stays usable as
/// `&mut` meanwhile; the store owns the file and outlives its guards.
pub(crate) struct ExclusiveUse {
    fd: RawFd,
}

pub(crate) fn exclusive(file: &File, path: &Path) -> Result<ExclusiveUse> {
    try_set(
        file,
        path,
        USE_BYTE,
        Kind::Exclusive,
        "delete and compact need the store to be open nowhere else",
    )?;
    Ok(ExclusiveUse {
        fd: file.as_raw_fd(),
    })
}

impl Drop for ExclusiveUse {
    fn drop(&mut self) {
        // Downgrading cannot conflict: we hold the byte exclusively.
        let _ = set(self.fd, USE_BYTE, Kind::Shared);
    }
}

/// Holds the append lock until dropped; a bare descriptor, as above.
pub(crate) struct Appending {
    fd: RawFd,
}

pub(crate) fn appending(file: &File, path: &Path) -> Result<Appending> {
    try_set(
        file,
        path,
        APPEND_BYTE,
        Kind::Exclusive,
        "another handle is appending to it",
    )?;
    Ok(Appending {
        fd: file.as_raw_fd(),
    })
}

impl Drop for Appending {
    fn drop(&mut self) {
        let _ = set(self.fd, APPEND_BYTE, Kind::Unlock);
    }
}
