//! File operations that the operating systems offer differently: positioned
//! reads and writes, and making a directory's entries durable.

use std::fs::File;
use std::io;
use std::path::Path;

#[cfg(unix)]
use crate::error::io_error;
use crate::error::Result;

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
