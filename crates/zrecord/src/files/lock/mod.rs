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
//! Every attempt is non-blocking; waiting is polling (`Deadline`): an
//! append waits for the append lock up to its `wait` (60 s by default),
//! `delete` and `compact` for the exclusive use lock up to theirs (none by
//! default), then fail with [`crate::Error::Busy`] naming the store and how
//! long they waited. Polling, not a blocking call, because Linux's
//! `F_OFD_SETLKW` and `flock` cannot time out and `LockFileEx` only with
//! overlapped I/O; a few attempts per millisecond cost nothing next to an
//! append.
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
use std::time::{Duration, Instant};

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
        StoreLock::share_unless(
            meta,
            meta_path,
            dir,
            "another handle is deleting or compacting it",
        )
    }

    /// [`StoreLock::share`] of the lock on any file (`meta` at `meta_path`,
    /// in `dir`), `busy` saying why it is refused while held exclusively.
    pub fn share_unless(
        meta: &File,
        meta_path: &Path,
        dir: &Path,
        busy: &str,
    ) -> Result<StoreLock> {
        let lock = StoreLock {
            sys: sys::Locks::new(meta, dir).map_err(|source| Error::Io {
                path: dir.to_path_buf(),
                source,
            })?,
            path: meta_path.to_path_buf(),
        };
        lock.result(lock.sys.handles().share(), busy)?;
        Ok(lock)
    }

    /// Holds the use lock exclusively until the guard is dropped, which
    /// shares it again; fails at once when another handle has the store
    /// open.
    pub fn exclusive(&self) -> Result<ExclusiveUse> {
        self.exclusive_within(&Deadline::after(Duration::ZERO))
    }

    /// As [`StoreLock::exclusive`], waiting until `deadline` for the other
    /// handles to close.
    pub fn exclusive_within(&self, deadline: &Deadline) -> Result<ExclusiveUse> {
        self.exclusive_unless(
            deadline,
            "delete and compact need the store to be open nowhere else",
        )
    }

    /// [`StoreLock::exclusive_within`], `busy` saying why it is refused.
    pub fn exclusive_unless(&self, deadline: &Deadline, busy: &str) -> Result<ExclusiveUse> {
        let handles = self.sys.handles();
        self.taken_by(deadline, || handles.try_exclusive(), busy)?;
        Ok(ExclusiveUse { handles })
    }

    /// Holds the append lock until the guard is dropped, waiting until
    /// `deadline` for another handle's append to end.
    pub fn appending(&self, deadline: &Deadline) -> Result<Appending> {
        let handles = self.sys.handles();
        self.taken_by(
            deadline,
            || handles.try_append(),
            "another handle is appending to it",
        )?;
        Ok(Appending { handles })
    }

    /// Tries `take` until it succeeds or `deadline` passes.
    fn taken_by(
        &self,
        deadline: &Deadline,
        take: impl Fn() -> std::io::Result<bool>,
        busy: &str,
    ) -> Result<()> {
        let mut failed = None;
        let taken = deadline.wait(|| match take() {
            Ok(true) => Some(()),
            Ok(false) => None,
            Err(e) => {
                failed = Some(e);
                Some(())
            }
        });
        if let Some(source) = failed {
            return Err(Error::Io {
                path: self.path.clone(),
                source,
            });
        }
        match taken {
            Some(()) => Ok(()),
            None if deadline.wait.is_zero() => Err(Error::Busy {
                path: self.path.clone(),
                reason: busy.to_string(),
            }),
            None => Err(self.waited_too_long(deadline.wait, busy)),
        }
    }

    /// `Busy` after waiting `wait` in vain for `what`.
    pub fn waited_too_long(&self, wait: Duration, what: &str) -> Error {
        Error::Busy {
            path: self.path.clone(),
            reason: format!(
                "{what}: still busy after waiting {:.3} s",
                wait.as_secs_f64()
            ),
        }
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

/// How long a caller may wait for a lock, from the moment it was made.
pub(crate) struct Deadline {
    wait: Duration,
    until: Option<Instant>,
}

/// The first and the longest pause between two attempts.
const FIRST_PAUSE: Duration = Duration::from_micros(50);
const LONGEST_PAUSE: Duration = Duration::from_millis(5);

impl Deadline {
    /// `wait` from now; a wait too long to represent is no deadline.
    pub fn after(wait: Duration) -> Deadline {
        Deadline {
            wait,
            until: Instant::now().checked_add(wait),
        }
    }

    /// Calls `attempt` until it gives a value or the deadline passes (it is
    /// called at least once), pausing between attempts, each pause twice the
    /// one before up to [`LONGEST_PAUSE`].
    pub fn wait<T>(&self, mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
        let mut pause = FIRST_PAUSE;
        loop {
            if let Some(value) = attempt() {
                return Some(value);
            }
            let now = Instant::now();
            let left = match self.until {
                Some(until) if now >= until => return None,
                Some(until) => until - now,
                None => pause,
            };
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(LONGEST_PAUSE);
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
