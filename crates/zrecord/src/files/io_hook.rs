//! A seam for crash and fault testing: every write and flush the store makes
//! to its files is announced to an optional hook first.
//!
//! A hook that records the events can replay any prefix of them, dropping or
//! tearing what was not yet flushed, to build the files a power loss at that
//! instant could leave (`tests/power_loss.rs`). A hook that returns an error
//! makes that operation fail as if the disk had refused it (fault injection).
//! Without a hook the cost is one branch per operation.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};

/// One operation on a store's files, announced before it happens.
#[derive(Debug)]
#[non_exhaustive]
pub enum IoEvent<'a> {
    /// Creation of the empty chunk file `chunk`.
    ChunkCreate { chunk: u16 },
    /// `pwrite` of `bytes` at `offset` of chunk file `chunk`.
    ChunkWrite {
        chunk: u16,
        offset: u64,
        bytes: &'a [u8],
    },
    /// `fdatasync` of chunk file `chunk`.
    ChunkSync { chunk: u16 },
    /// `ftruncate` of chunk file `chunk` to `len` bytes.
    ChunkTruncate { chunk: u16, len: u64 },
    /// Deletion of chunk file `chunk`.
    ChunkRemove { chunk: u16 },
    /// `fallocate` of `len` bytes of `meta.zr` from `offset`, before stores
    /// into the mapping there (`files/table_blocks.rs`); the bytes stay.
    MetaAllocate { offset: usize, len: usize },
    /// A store into the mapping of `meta.zr`.
    MetaWrite { offset: usize, bytes: &'a [u8] },
    /// `msync` of `len` bytes of `meta.zr` from `offset`.
    MetaSync { offset: usize, len: usize },
    /// `fallocate` of `len` bytes of `checksums.zr` from `offset`, as
    /// [`IoEvent::MetaAllocate`].
    ChecksumAllocate { offset: usize, len: usize },
    /// A store into the mapping of `checksums.zr`.
    ChecksumWrite { offset: usize, bytes: &'a [u8] },
    /// `msync` of `len` bytes of `checksums.zr` from `offset`.
    ChecksumSync { offset: usize, len: usize },
    /// Creation (or replacement) of the small file `name` with `bytes`.
    FileWrite { name: &'a str, bytes: &'a [u8] },
    /// `fsync` of the small file `name`.
    FileSync { name: &'a str },
    /// Deletion of the small file `name`.
    FileRemove { name: &'a str },
    /// `fsync` of the store directory, making creations and deletions durable.
    DirSync,
}

/// Receives every [`IoEvent`] of a store, before the operation.
pub trait IoHook: Send + Sync {
    /// Returning an error makes the operation fail with it, untouched.
    fn before(&self, event: &IoEvent<'_>) -> std::io::Result<()>;
}

pub(crate) type Hook = Option<Arc<dyn IoHook>>;

pub(crate) fn announce(hook: &Hook, path: &Path, event: IoEvent<'_>) -> Result<()> {
    match hook {
        None => Ok(()),
        Some(hook) => hook.before(&event).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}
