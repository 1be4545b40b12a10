//! Linux: open-file-description byte-range locks (`F_OFD_SETLK`) on bytes 0
//! (use) and 1 (append) of `meta.zr`, as docs/FORMAT.md, "Locking", lays
//! them out. Converting a held lock between shared and exclusive is atomic,
//! and a conversion that fails leaves the lock as it was.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

/// Byte of `meta.zr` whose lock says "this store is in use".
const USE_BYTE: i64 = 0;
/// Byte of `meta.zr` whose lock says "an append is in progress".
const APPEND_BYTE: i64 = 1;

/// Nothing beyond `meta.zr` itself.
pub(super) struct Locks {
    meta: RawFd,
}

/// The descriptor of `meta.zr`, whose open file description holds the locks.
#[derive(Clone, Copy)]
pub(super) struct Handles {
    meta: RawFd,
}

impl Locks {
    pub fn new(meta: &File, _dir: &Path) -> io::Result<Locks> {
        Ok(Locks {
            meta: meta.as_raw_fd(),
        })
    }

    pub fn handles(&self) -> Handles {
        Handles { meta: self.meta }
    }
}

impl Handles {
    pub fn share(self) -> io::Result<bool> {
        set(self.meta, USE_BYTE, libc::F_RDLCK)
    }

    pub fn try_exclusive(self) -> io::Result<bool> {
        set(self.meta, USE_BYTE, libc::F_WRLCK)
    }

    pub fn downgrade(self) {
        // Cannot conflict: this description holds the byte exclusively.
        let _ = set(self.meta, USE_BYTE, libc::F_RDLCK);
    }

    pub fn try_append(self) -> io::Result<bool> {
        set(self.meta, APPEND_BYTE, libc::F_WRLCK)
    }

    pub fn end_append(self) {
        let _ = set(self.meta, APPEND_BYTE, libc::F_UNLCK);
    }
}

/// Sets the lock on `byte` to `kind` (`F_RDLCK`, `F_WRLCK` or `F_UNLCK`)
/// without waiting; `Ok(false)` when another description holds a
/// conflicting lock.
fn set(fd: RawFd, byte: i64, kind: libc::c_int) -> io::Result<bool> {
    // SAFETY: `flock` is a plain C struct of integers, for which all zeros
    // is a valid value; the fields that matter are set below.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as _;
    lock.l_whence = libc::SEEK_SET as _;
    lock.l_start = byte as _;
    lock.l_len = 1;
    // SAFETY: `fd` is the descriptor of the store's open `meta.zr`, which
    // the store keeps open while its locks and guards exist, and `lock` is
    // a live, initialised `flock` that the call only reads.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut lock) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}
