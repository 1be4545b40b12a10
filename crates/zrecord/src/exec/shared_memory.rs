//! Batch memory that other processes can map: a nameless shared memory
//! file, mapped here. A loader whose batches go to worker processes takes
//! its batch buffers from such files, so a worker maps the batch where the
//! gather wrote it instead of receiving a copy; the file's descriptor is
//! what travels (`BatchBuffer::shared_fd`).
//!
//! On Linux the file is a `memfd`: it has no name anywhere, so nothing is
//! left behind whatever happens to the processes. Other Unix systems get a
//! temporary file that is unlinked as soon as it is open. Elsewhere there
//! is no shared batch memory, and buffers come from the heap.

use std::fs::File;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The source of [`SharedMemory::id`]s.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A shared memory file of a fixed length and this process's mapping of
/// all of it; both go when it is dropped.
pub(crate) struct SharedMemory {
    map: memmap2::MmapMut,
    // Read for its descriptor; where descriptors are not shared (Windows)
    // no SharedMemory is ever made (`nameless_file` gives None).
    #[cfg_attr(not(unix), allow(dead_code))]
    file: File,
    /// A number no other shared memory file of this process has had: what
    /// a worker process knows the file by, without an `fstat` each batch.
    id: u64,
}

impl SharedMemory {
    /// A new file of `len` bytes, zeroed, mapped; `None` when the system
    /// refuses (no memory, no descriptors, no shared memory here).
    pub(crate) fn new(len: usize) -> Option<SharedMemory> {
        let file = nameless_file()?;
        file.set_len(len as u64).ok()?;
        // SAFETY: the file was just made and only this process has it; it
        // is never truncated while mapped (its length is fixed from here).
        // Another process that maps it may write its bytes, which the
        // buffer's owner allows as it allows writes through the buffer.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.ok()?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Some(SharedMemory { map, file, id })
    }

    /// The start of the mapping (page aligned).
    pub(crate) fn ptr(&mut self) -> NonNull<u8> {
        NonNull::new(self.map.as_mut_ptr()).expect("a mapping is never at address 0")
    }

    /// The file's descriptor, for another process to map.
    #[cfg(unix)]
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }

    /// This file's number, unique in this process for its whole life.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

#[cfg(target_os = "linux")]
fn nameless_file() -> Option<File> {
    use std::os::fd::FromRawFd;
    // SAFETY: a C string literal and flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c"loaderx-batch".as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: a descriptor memfd_create just returned, owned by no one else.
    (fd >= 0).then(|| unsafe { File::from_raw_fd(fd) })
}

#[cfg(all(unix, not(target_os = "linux")))]
fn nameless_file() -> Option<File> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "loaderx-batch-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .ok()?;
    std::fs::remove_file(&path).ok()?;
    Some(file)
}

#[cfg(not(unix))]
fn nameless_file() -> Option<File> {
    None
}
