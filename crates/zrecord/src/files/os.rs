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
        let (mut buf, mut offset) = (buf, offset);
        while !buf.is_empty() {
            match file.seek_read(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
        let (mut bytes, mut offset) = (bytes, offset);
        while !bytes.is_empty() {
            match file.seek_write(bytes, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    bytes = &bytes[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Makes the creations, renames and deletions in `dir` durable: an `fsync`
/// of the directory on Unix. Windows offers no such call (a directory cannot
/// be opened as a file there, and NTFS journals its metadata), so there it
/// does nothing.
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
