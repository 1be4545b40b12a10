//! Disk blocks for the writes into `meta.zr` and `checksums.zr`.
//!
//! Both files are mostly holes (docs/FORMAT.md, "meta.zr" and
//! "checksums.zr"), written through shared mappings. A store into a hole
//! makes the file system find a block in the page fault; on a full disk (or
//! past a quota) it finds none, and the kernel answers the fault with
//! SIGBUS, which kills the process: a store of small records on a full
//! tmpfs died so before this (its table outgrows its data sixteen to one).
//! So before a write where this handle has not allocated, the blocks are
//! allocated with `fallocate` ([`allocate`]), which fails as a plain error
//! (ENOSPC) that the write returns before anything is written.
//!
//! A handle remembers the span it allocated, and a write past its end
//! extends it by as much again, up to a megabyte, so that appends allocate
//! once per thousands of records while a small store's file keeps few
//! blocks. A write elsewhere allocates its own pages and starts a new
//! span; allocating where the file already has blocks changes nothing.
//! Where the system or the file system cannot allocate (not Linux, a file
//! system without `fallocate`), writes go to the mapping as they would
//! without this, and a full disk there is still a fatal fault.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{io_error, Result};
use crate::files::os::allocate;

/// What is allocated at once: pages.
const PAGE: usize = 4096;

/// The most a span grows by in one allocation.
const MAX_STEP: usize = 1 << 20;

/// The span of a table file this handle allocated last.
pub(crate) struct TableBlocks {
    /// First and past-the-last page, `start << 32 | end`, in one atomic so
    /// that a reader never pairs the start of one span with the end of
    /// another; empty (0) until the first write. Only ever set to a span
    /// already allocated.
    span: AtomicU64,
    /// The file's length, which no allocation goes past.
    file_len: usize,
}

impl TableBlocks {
    pub(crate) fn new(file_len: usize) -> TableBlocks {
        TableBlocks {
            span: AtomicU64::new(0),
            file_len,
        }
    }

    /// Makes sure the `len` bytes at `offset` of `file` have blocks, first
    /// calling `announce` with the bytes it will allocate (the I/O hook).
    pub(crate) fn ensure(
        &self,
        file: &File,
        path: &Path,
        offset: usize,
        len: usize,
        announce: impl FnOnce(usize, usize) -> Result<()>,
    ) -> Result<()> {
        let (lo, hi) = (offset / PAGE, (offset + len).div_ceil(PAGE));
        let span = self.span.load(Ordering::Acquire);
        let (start, end) = ((span >> 32) as usize, (span & u64::from(u32::MAX)) as usize);
        if start <= lo && hi <= end {
            return Ok(());
        }
        let (from, to) = if start < end && start <= lo && lo <= end {
            (end, hi.max(end + (end - start).min(MAX_STEP / PAGE)))
        } else {
            (lo, hi)
        };
        let bytes = (from * PAGE, (to * PAGE).min(self.file_len));
        announce(bytes.0, bytes.1 - bytes.0)?;
        allocate(file, bytes.0 as u64, (bytes.1 - bytes.0) as u64).map_err(io_error(path))?;
        let start = if from == end { start } else { from };
        self.span
            .store(((start as u64) << 32) | to as u64, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_grow_by_as_much_again_up_to_a_step_and_stop_at_the_files_end() {
        let dir = tempfile::tempdir().unwrap();
        let file_len = 4 * MAX_STEP + 16;
        let (path, file) = crate::files::os::sparse_file(dir.path(), file_len as u64);
        let blocks = TableBlocks::new(file_len);
        let mut asked = Vec::new();
        let mut write = |offset: usize, len: usize| {
            blocks
                .ensure(&file, &path, offset, len, |at, n| {
                    asked.push((at, n));
                    Ok(())
                })
                .unwrap()
        };
        write(16, 16);
        write(100, 16); // inside the first page: nothing more
        write(PAGE - 8, 16); // into the second page: one more page
        write(2 * PAGE, 16); // two more
        for offset in (4 * PAGE..3 * MAX_STEP).step_by(16) {
            write(offset, 16);
        }
        write(file_len - 16, 16); // far ahead: a span of its own, to the end
        write(0, 16); // back: allocated again
        let mut expected = vec![(0, PAGE), (PAGE, PAGE), (2 * PAGE, 2 * PAGE)];
        let mut end = 4 * PAGE;
        while end < 3 * MAX_STEP {
            let step = end.min(MAX_STEP);
            expected.push((end, step));
            end += step;
        }
        expected.push((file_len / PAGE * PAGE, 16));
        expected.push((0, PAGE));
        assert_eq!(asked, expected);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::MetadataExt;
            // Where the file system allocates (it may refuse: then nothing).
            let blocks = file.metadata().unwrap().blocks() * 512;
            assert!(
                blocks == 0 || blocks >= 3 * MAX_STEP as u64,
                "{blocks} bytes"
            );
        }
    }
}
