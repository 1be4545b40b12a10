//! Windows: `LockFileEx` byte ranges, which belong to the file handle, on
//! three bytes just past the end of `meta.zr`: use, append and gate. Locks
//! on Windows are mandatory (a locked byte cannot be read through another
//! handle), so the bytes locked are ones no reader ever reads; `meta.zr`
//! never grows.
//!
//! Windows cannot convert a shared lock into an exclusive one, and an
//! exclusive request overlapping the handle's own shared lock fails. So an
//! upgrade takes the gate byte first (exclusive, or the store is busy), then
//! releases its shared use lock and tries the exclusive one; on failure it
//! takes the shared lock back, which cannot conflict: an exclusive holder of
//! the use byte holds the gate until it downgrades.

use std::fs::File;
use std::io;
use std::os::windows::io::AsRawHandle;
use std::path::Path;

use windows_sys::Win32::Foundation::{ERROR_LOCK_VIOLATION, HANDLE};
use windows_sys::Win32::Storage::FileSystem::{
    LockFileEx, UnlockFileEx, LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY,
};
use windows_sys::Win32::System::IO::OVERLAPPED;

use crate::format::record_table::META_FILE_LEN;

/// Byte whose lock says "this store is in use".
const USE_BYTE: u64 = META_FILE_LEN as u64;
/// Byte whose lock says "an append is in progress".
const APPEND_BYTE: u64 = USE_BYTE + 1;
/// Byte an upgrade of the use lock holds, and keeps while it holds the use
/// lock exclusively.
const GATE_BYTE: u64 = APPEND_BYTE + 1;

/// Nothing beyond `meta.zr` itself.
pub(super) struct Locks {
    meta: Handles,
}

/// The handle of `meta.zr`, kept as an integer so the store stays `Send`
/// and `Sync` (a handle is an opaque value, not memory).
#[derive(Clone, Copy)]
pub(super) struct Handles {
    meta: usize,
}

impl Locks {
    pub fn new(meta: &File, _dir: &Path) -> io::Result<Locks> {
        Ok(Locks {
            meta: Handles {
                meta: meta.as_raw_handle() as usize,
            },
        })
    }

    pub fn handles(&self) -> Handles {
        self.meta
    }
}

impl Handles {
    pub fn share(self) -> io::Result<bool> {
        self.lock(USE_BYTE, false)
    }

    pub fn try_exclusive(self) -> io::Result<bool> {
        if !self.lock(GATE_BYTE, true)? {
            return Ok(false);
        }
        self.unlock(USE_BYTE);
        let taken = self.lock(USE_BYTE, true);
        if !matches!(taken, Ok(true)) {
            // Cannot conflict: only a holder of the gate, which is this
            // handle now, ever holds the use byte exclusively.
            let _ = self.lock(USE_BYTE, false);
            self.unlock(GATE_BYTE);
        }
        taken
    }

    pub fn downgrade(self) {
        self.unlock(USE_BYTE);
        let _ = self.lock(USE_BYTE, false);
        self.unlock(GATE_BYTE);
    }

    pub fn try_append(self) -> io::Result<bool> {
        self.lock(APPEND_BYTE, true)
    }

    pub fn end_append(self) {
        self.unlock(APPEND_BYTE);
    }

    /// Locks the one byte at `byte` without waiting; `Ok(false)` when
    /// another handle holds a conflicting lock.
    fn lock(self, byte: u64, exclusive: bool) -> io::Result<bool> {
        let mut flags = LOCKFILE_FAIL_IMMEDIATELY;
        if exclusive {
            flags |= LOCKFILE_EXCLUSIVE_LOCK;
        }
        let mut at = overlapped_at(byte);
        // SAFETY: `meta` is the handle of the store's open `meta.zr`, which
        // the store keeps open while its locks and guards exist; `at` is a
        // live OVERLAPPED that only gives the offset (the handle is not
        // opened for overlapped I/O, so the call completes before returning).
        let ok = unsafe { LockFileEx(self.meta as HANDLE, flags, 0, 1, 0, &mut at) };
        if ok != 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(code) if code == ERROR_LOCK_VIOLATION as i32 => Ok(false),
            _ => Err(err),
        }
    }

    fn unlock(self, byte: u64) {
        let mut at = overlapped_at(byte);
        // SAFETY: as in `lock`.
        unsafe { UnlockFileEx(self.meta as HANDLE, 0, 1, 0, &mut at) };
    }
}

/// An OVERLAPPED that only says where a lock range starts.
fn overlapped_at(byte: u64) -> OVERLAPPED {
    let mut at = OVERLAPPED::default();
    at.Anonymous.Anonymous.Offset = byte as u32;
    at.Anonymous.Anonymous.OffsetHigh = (byte >> 32) as u32;
    at
}
