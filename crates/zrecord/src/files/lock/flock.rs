//! Unix other than Linux (macOS, the BSDs): `flock`, which belongs to the
//! open file description as Linux's OFD locks do, but locks whole files: the
//! use lock is on `meta.zr`, the append lock on the store directory, which
//! each handle opens once for it.
//!
//! Converting a shared `flock` to an exclusive one is documented as
//! release-then-acquire. With `LOCK_NB`, BSD kernels (macOS's included)
//! check for a conflict before releasing anything, so a refused upgrade
//! keeps the shared lock; should a system drop it instead, it is taken
//! again at once (it cannot conflict with anything but an exclusive holder,
//! which then reports the store busy to whoever opens it).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

/// The store directory, opened for its append lock.
pub(super) struct Locks {
    meta: RawFd,
    dir: File,
}

/// The descriptors holding the use lock (`meta.zr`) and the append lock
/// (the directory).
#[derive(Clone, Copy)]
pub(super) struct Handles {
    meta: RawFd,
    dir: RawFd,
}

impl Locks {
    pub fn new(meta: &File, dir: &Path) -> io::Result<Locks> {
        Ok(Locks {
            meta: meta.as_raw_fd(),
            dir: File::open(dir)?,
        })
    }

    pub fn handles(&self) -> Handles {
        Handles {
            meta: self.meta,
            dir: self.dir.as_raw_fd(),
        }
    }
}

impl Handles {
    pub fn share(self) -> io::Result<bool> {
        try_flock(self.meta, libc::LOCK_SH)
    }

    pub fn try_exclusive(self) -> io::Result<bool> {
        let taken = try_flock(self.meta, libc::LOCK_EX)?;
        if !taken {
            // Keep (or take back) the shared lock the handle holds.
            let _ = try_flock(self.meta, libc::LOCK_SH);
        }
        Ok(taken)
    }

    pub fn downgrade(self) {
        // Cannot conflict: this description holds the file exclusively.
        let _ = try_flock(self.meta, libc::LOCK_SH);
    }

    pub fn try_append(self) -> io::Result<bool> {
        try_flock(self.dir, libc::LOCK_EX)
    }

    pub fn end_append(self) {
        let _ = try_flock(self.dir, libc::LOCK_UN);
    }
}

/// `flock(fd, operation | LOCK_NB)`; `Ok(false)` when another description
/// holds a conflicting lock.
fn try_flock(fd: RawFd, operation: libc::c_int) -> io::Result<bool> {
    // SAFETY: `fd` is an open descriptor (the store's `meta.zr`, or the
    // directory `Locks` holds), kept open while the locks and guards exist;
    // `flock` takes no pointers.
    let rc = unsafe { libc::flock(fd, operation | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(err),
    }
}
