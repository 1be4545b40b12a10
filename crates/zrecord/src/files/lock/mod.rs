//! Locking between handles and processes (docs/FORMAT.md, "Locking").
//!
//! Every open store holds two locks that belong to its handle (one open of
//! the store), not to its thread or process, so two handles in one process
//! exclude each other as two processes do, and the operating system drops
//! them when the holder exits or is killed: a killed process never blocks
//! the next open. No lock file is written.
//!
//! - the *use* lock: every open store holds it shared; `delete` and
//!   `compact` upgrade it to exclusive for their duration, so they run only
//!   when no other handle has the store open.
//! - the *append* lock: held exclusive for the duration of each append, so
//!   at most one handle appends at a time.
//!
//! Every attempt is non-blocking: a conflict is reported at once, as
//! [`crate::Error::Busy`], rather than waited out.
//!
//! How each system provides such locks:
//!
//! - Linux (`ofd.rs`): open-file-description byte-range locks
//!   (`F_OFD_SETLK`) on bytes 0 (use) and 1 (append) of `meta.zr`, the
//!   layout FORMAT.md documents. A forked child shares its parent's.
//! - other Unix, macOS among them (`flock.rs`): their `fcntl` byte-range
//!   locks belong to the process (two handles of one process would not
//!   exclude each other, and closing either would drop both), so `flock`,
//!   which also belongs to the open file description, is used instead. It
//!   locks whole files, so the use lock is on `meta.zr` and the append lock
//!   on the store directory, opened once per handle. A forked child shares
//!   its parent's, as on Linux. These locks do not exclude, and are not
//!   seen by, the byte-range locks of a Linux handle on a shared network
//!   file system; stores are not shared across hosts anyway (FORMAT.md,
//!   "Assumptions about the medium").
//! - Windows (`windows.rs`): `LockFileEx` byte ranges, which belong to the
//!   file handle, on three bytes just past the end of `meta.zr` (Windows
//!   locks are mandatory, so the bytes locked are ones no reader ever
//!   reads). Windows cannot convert a shared lock to an exclusive one, so
//!   the upgrade releases it and tries the exclusive lock while holding a
//!   third, *gate* byte that every upgrader must take first: no other
//!   handle can take the use lock exclusively in between, so a failed
//!   upgrade always gets its shared lock back.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

#[cfg(all(unix, not(target_os = "linux")))]
#[path = "flock.rs"]
mod sys;
#[cfg(target_os = "linux")]
#[path = "ofd.rs"]
mod sys;
#[cfg(windows)]
#[path = "windows.rs"]
mod sys;

/// The locks of one open store. It holds what the system needs beyond the
/// store's open `meta.zr` (which the store owns and keeps open longer).
pub(crate) struct StoreLock {
    sys: sys::Locks,
    /// `meta.zr`, the path errors name.
    path: PathBuf,
}

impl StoreLock {
    /// Takes the shared use lock of the store in `dir`, whose open `meta.zr`
    /// is `meta`, at `meta_path`. The store must keep `meta` open for as
    /// long as the returned lock and its guards exist.
    pub fn share(meta: &File, meta_path: &Path, dir: &Path) -> Result<StoreLock> {
        let lock = StoreLock {
            sys: sys::Locks::new(meta, dir).map_err(|source| Error::Io {
                path: dir.to_path_buf(),
                source,
            })?,
            path: meta_path.to_path_buf(),
        };
        lock.result(
            lock.sys.handles().share(),
            "another handle is deleting or compacting it",
        )?;
        Ok(lock)
    }

    /// Holds the use lock exclusively until the guard is dropped, which
    /// shares it again.
    pub fn exclusive(&self) -> Result<ExclusiveUse> {
        let handles = self.sys.handles();
        self.result(
            handles.try_exclusive(),
            "delete and compact need the store to be open nowhere else",
        )?;
        Ok(ExclusiveUse { handles })
    }

    /// Holds the append lock until the guard is dropped.
    pub fn appending(&self) -> Result<Appending> {
        let handles = self.sys.handles();
        self.result(handles.try_append(), "another handle is appending to it")?;
        Ok(Appending { handles })
    }

    /// `Busy` when the lock was taken elsewhere, `Io` when the system failed.
    fn result(&self, taken: std::io::Result<bool>, busy: &str) -> Result<()> {
        match taken {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::Busy {
                path: self.path.clone(),
                reason: busy.to_string(),
            }),
            Err(source) => Err(Error::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

/// The use lock held exclusively; dropping it shares the lock again. It
/// keeps bare handles, not a borrow, so the store stays usable as `&mut`
/// meanwhile; the store owns the files and outlives its guards.
pub(crate) struct ExclusiveUse {
    handles: sys::Handles,
}

impl Drop for ExclusiveUse {
    fn drop(&mut self) {
        self.handles.downgrade();
    }
}

/// The append lock, held until dropped; bare handles, as above.
pub(crate) struct Appending {
    handles: sys::Handles,
}

impl Drop for Appending {
    fn drop(&mut self) {
        self.handles.end_append();
    }
}

/// The `flock` implementation, built on Linux too so that its tests run
/// there (Linux's `flock` drops a shared lock on a refused upgrade, which
/// exercises the path that takes it back).
#[cfg(all(test, target_os = "linux"))]
#[path = "flock.rs"]
mod flock_on_linux;

#[cfg(test)]
mod tests {
    use std::fs::{File, OpenOptions};

    /// Two handles of one process (two opens of `meta.zr`) exclude each
    /// other as two processes do: shared use by both, an upgrade only when
    /// alone, an open refused while another handle holds the store
    /// exclusively, and one append at a time.
    macro_rules! handles_of_one_process_exclude_each_other {
        ($name:ident, $sys:path) => {
            #[test]
            fn $name() {
                use $sys as sys;
                let dir = tempfile::tempdir().unwrap();
                let open = || -> File {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(dir.path().join("meta.zr"))
                        .unwrap()
                };
                let (a, b, c) = (open(), open(), open());
                let la = sys::Locks::new(&a, dir.path()).unwrap();
                let lb = sys::Locks::new(&b, dir.path()).unwrap();
                let (ha, hb) = (la.handles(), lb.handles());
                assert!(ha.share().unwrap() && hb.share().unwrap());
                assert!(!ha.try_exclusive().unwrap(), "b has the store open");
                assert!(!hb.try_exclusive().unwrap(), "a still has it open");
                assert!(ha.try_append().unwrap());
                assert!(!hb.try_append().unwrap(), "one append at a time");
                ha.end_append();
                assert!(hb.try_append().unwrap());
                hb.end_append();

                drop((lb, b));
                assert!(ha.try_exclusive().unwrap(), "a is alone now");
                let lc = sys::Locks::new(&c, dir.path()).unwrap();
                let hc = lc.handles();
                assert!(!hc.share().unwrap(), "a holds it exclusively");
                ha.downgrade();
                assert!(hc.share().unwrap());
                assert!(!hc.try_exclusive().unwrap(), "a shares it again");
            }
        };
    }

    handles_of_one_process_exclude_each_other!(system_locks, super::sys);
    #[cfg(target_os = "linux")]
    handles_of_one_process_exclude_each_other!(flock_locks, super::flock_on_linux);
}
