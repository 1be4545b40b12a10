//! File operations that the operating systems offer differently: positioned
//! reads and writes, and making a directory's entries durable; creating a
//! file whole, once, however many handles race to create it.

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(unix)]
use memmap2::Advice;
use memmap2::{MmapOptions, MmapRaw};

use crate::error::{io_error, Error, Result};

/// Opens the existing file `path` for reading and, unless `read_only` is
/// set or the system refuses it ([`may_not_write`]), for writing. The flag
/// says whether it is open for writing.
pub(crate) fn open_existing(path: &Path, read_only: bool) -> io::Result<(File, bool)> {
    if !read_only {
        match fs::OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => return Ok((file, true)),
            Err(e) if may_not_write(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((File::open(path)?, false))
}

/// Whether `e` says the file may be read but not written: no write
/// permission (EACCES; EPERM under some security modules) or a read-only
/// file system (EROFS).
pub(crate) fn may_not_write(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    )
}

/// Reads exactly `buf.len()` bytes at `offset`, without using (on Unix) or
/// regardless of (on Windows) the file's cursor.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        repeat_until(buf.len(), io::ErrorKind::UnexpectedEof, |done| {
            file.seek_read(&mut buf[done..], offset + done as u64)
        })
    }
}

/// Writes all of `bytes` at `offset` (`pwrite` on Unix), without using (on
/// Unix) or regardless of (on Windows) the file's cursor.
pub(crate) fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        repeat_until(bytes.len(), io::ErrorKind::WriteZero, |done| {
            file.seek_write(&bytes[done..], offset + done as u64)
        })
    }
}

/// Calls `step(done)`, which moves bytes from position `done` on and says
/// how many, until `len` bytes are done; a step that moves none fails with
/// `stalled`.
#[cfg(windows)]
fn repeat_until(
    len: usize,
    stalled: io::ErrorKind,
    mut step: impl FnMut(usize) -> io::Result<usize>,
) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        match step(done) {
            Ok(0) => return Err(stalled.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Makes the creations, renames and deletions in `dir` durable: an `fsync`
/// of the directory on Unix. Windows has no counterpart (`File::open` cannot
/// even open a directory there); it does nothing, and the durability of
/// directory entries rests on the file system's own metadata journal.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error(dir))
    }
    #[cfg(windows)]
    {
        let _ = dir;
        Ok(())
    }
}

/// Creates `dir/name` whole or not at all: `fill` writes a temporary file of
/// this call's own, which is synced and then linked to `name`. A link never
/// replaces an existing file, so when handles (of this process or others)
/// race to create the same file, the first one's stays and every other
/// caller gets `Ok(false)` and opens that one. A rename would replace it,
/// and whatever its creator had written into it since would be lost.
pub(crate) fn create_once(
    dir: &Path,
    name: &str,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<bool> {
    static TEMPORARY: AtomicU64 = AtomicU64::new(0);
    let unique = TEMPORARY.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!("{name}.{}.{unique}.tmp", std::process::id()));
    let path = dir.join(name);
    let linked = File::create(&tmp)
        .and_then(|mut file| {
            fill(&mut file)?;
            file.sync_all()
        })
        .map_err(io_error(&tmp))
        .and_then(|()| match fs::hard_link(&tmp, &path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_error(&path)(e)),
        });
    // The temporary name is this call's alone; whatever happened, it goes.
    let _ = fs::remove_file(&tmp);
    let created = linked?;
    sync_dir(dir)?;
    Ok(created)
}

/// Gives `file` disk blocks for the `len` bytes at `offset`, its size
/// unchanged (`fallocate`), so that stores into a shared mapping there need
/// no block found in the page fault, where a full disk is SIGBUS
/// (`table_blocks.rs`); fails as the file system does (ENOSPC when full).
/// Does nothing where the system or the file system has no such call.
pub(crate) fn allocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Err(io::ErrorKind::InvalidInput.into());
        };
        loop {
            // SAFETY: a system call on a descriptor `file` keeps open; it
            // touches no memory of this process.
            let r = unsafe {
                libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, offset, len)
            };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EOPNOTSUPP | libc::ENOSYS) => return Ok(()),
                _ => return Err(e),
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
        Ok(())
    }
}

/// Fails unless `file`, mapped whole at `path`, is still `len` bytes (one
/// `fstat`): a store file of fixed length that another program truncated.
pub(crate) fn check_mapped_size(file: &File, path: &Path, len: u64) -> Result<()> {
    let size = file.metadata().map_err(io_error(path))?.len();
    if size == len {
        return Ok(());
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    Err(Error::NotAStore {
        path: path.to_path_buf(),
        reason: format!(
            "{name} is {size} bytes now, the format needs exactly {len}: truncated while the \
             store was open?"
        ),
    })
}

/// Maps the whole of `file` (at `path`), a store file of fixed length that
/// is mostly holes (`meta.zr`, `checksums.zr`), for writing when `writable`.
///
/// With random-access advice: the kernel's read-around on a fault reads
/// `read_ahead_kb` of the file around the page (8 MiB on the machine of
/// bench/README.md, "Appends write from one thread"), and in these files
/// that is zero pages, made and cleared one by one, for every store that
/// is created or first read. Without it, writing Ray's photographs spent
/// a third of its time there.
pub(crate) fn map_table_file(file: &File, path: &Path, writable: bool) -> Result<MmapRaw> {
    let map = match writable {
        true => MmapRaw::map_raw(file),
        false => MmapOptions::new().map_raw_read_only(file),
    };
    let map = map.map_err(io_error(path))?;
    // Advice only tunes paging (and is a Unix call).
    #[cfg(unix)]
    map.advise(Advice::Random).map_err(io_error(path))?;
    Ok(map)
}

/// The process's soft limit on open files (`RLIMIT_NOFILE`), where there is
/// one to read.
pub(crate) fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = std::mem::MaybeUninit::<libc::rlimit>::uninit();
        // SAFETY: `limit` is valid for writes of an `rlimit`.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, limit.as_mut_ptr()) } == 0 {
            // SAFETY: getrlimit succeeded, so it filled `limit`.
            let soft = unsafe { limit.assume_init() }.rlim_cur;
            #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every unix
            return Some(soft as u64);
        }
    }
    None
}

/// A sparse file of `len` bytes in `dir`, open for reading and writing, as
/// a store's table files are; for tests.
#[cfg(test)]
pub(crate) fn sparse_file(dir: &Path, len: u64) -> (std::path::PathBuf, File) {
    let path = dir.join("table");
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(len).unwrap();
    (path, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of `map` that are in the page cache (`mincore`).
    #[cfg(target_os = "linux")]
    fn cached_pages(map: &MmapRaw) -> usize {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
        let mut cached = vec![0u8; map.len().div_ceil(page)];
        // SAFETY: the range is the whole live mapping, and `cached` has a
        // byte for each of its pages.
        let rc = unsafe { libc::mincore(map.as_mut_ptr().cast(), map.len(), cached.as_mut_ptr()) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        cached.iter().filter(|&&c| c & 1 != 0).count()
    }

    /// Writing a table file's first page through its mapping brings that
    /// page into the page cache, not a read-around of the holes after it.
    /// Fails without the random-access advice wherever a file system reads
    /// ahead (ext4 here: 2,048 pages, its `read_ahead_kb`).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_table_file_is_mapped_without_read_around() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = sparse_file(dir.path(), 64 << 20);
        let map = map_table_file(&file, &path, true).unwrap();
        // SAFETY: byte 0 of a live, writable mapping of 64 MiB.
        unsafe { map.as_mut_ptr().write(1) };
        let cached = cached_pages(&map);
        assert!(cached <= 16, "{cached} pages cached");
    }
}
