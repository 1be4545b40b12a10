//! The one error type of the store. Every variant names the store's path and,
//! where there is one, the record index, chunk and offset it concerns.

use std::io;
use std::path::PathBuf;

/// What went wrong, in a form a caller can match on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system refused a file operation.
    #[error("{path}: I/O error: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The directory holds something that is not a store (bad magic, short
    /// `meta.zr`), or a header that contradicts the format's limits.
    #[error("{path}: not a zrecord store: {reason}")]
    NotAStore { path: PathBuf, reason: String },

    /// There is no store in the directory (no `meta.zr`), and the caller
    /// asked not to create one.
    #[error("{path}: no zrecord store here: the directory has no meta.zr")]
    NotFound { path: PathBuf },

    /// The store was written by a newer format version than this build reads.
    #[error("{path}: format version {found} is newer than the supported version {supported}")]
    UnsupportedVersion {
        path: PathBuf,
        found: u16,
        supported: u16,
    },

    /// A record index at or past the store's length.
    #[error("{path}: record index {index} out of range (store holds {len} records)")]
    IndexOutOfRange { path: PathBuf, index: u64, len: u32 },

    /// A record to append is larger than [`crate::MAX_RECORD_LEN`].
    #[error("{path}: record {position} of the batch is {len} bytes, over the {max} byte limit")]
    RecordTooLarge {
        path: PathBuf,
        position: usize,
        len: usize,
        max: usize,
    },

    /// An append would take the store past [`crate::MAX_RECORDS`] records or
    /// [`crate::MAX_CHUNKS`] chunks.
    #[error("{path}: store is full: {len} records held, {adding} more do not fit")]
    StoreFull {
        path: PathBuf,
        len: u32,
        adding: usize,
    },

    /// The caller's destination cannot hold what was asked for.
    #[error("{path}: destination too small: record {index} needs bytes up to {needed}, buffer has {available}")]
    BufferTooSmall {
        path: PathBuf,
        index: u64,
        needed: u64,
        available: u64,
    },

    /// Two records of one ragged gather would be written over each other.
    #[error("{path}: destination ranges of records {first} and {second} overlap")]
    DestinationOverlap {
        path: PathBuf,
        first: u64,
        second: u64,
    },

    /// A stored record cannot be decoded into exactly its logical bytes: a
    /// table entry pointing outside its chunk, an unknown codec tag, a damaged
    /// compressed stream or a decoded size that disagrees with the table.
    #[error("{path}: record {index} (chunk {chunk}, offset {offset}) is corrupt: {reason}")]
    CorruptRecord {
        path: PathBuf,
        index: u64,
        chunk: u16,
        offset: u32,
        reason: String,
    },

    /// Another handle (in this or another process) holds a lock the request
    /// needs; see docs/FORMAT.md, "Locking".
    #[error("{path}: store is busy: {reason}")]
    Busy { path: PathBuf, reason: String },

    /// Arguments that do not describe a valid request (mismatched lengths,
    /// a source range outside the source buffer, an unknown codec name).
    #[error("{path}: invalid argument: {reason}")]
    InvalidArgument { path: PathBuf, reason: String },

    /// A write (append, delete, compact, creating `checksums.zr`, finishing
    /// an interrupted delete) asked of a store this handle opened read-only:
    /// [`crate::StoreOptions::read_only`], or a `meta.zr` or
    /// `checksums.zr` the process may not write (file permissions, a
    /// read-only file system).
    #[error("{path}: store opened read-only: {reason}")]
    ReadOnly { path: PathBuf, reason: String },

    /// A call that takes a lock or a mutex (append, delete, compact, sync,
    /// stats) on a handle that a forked child inherited: its locks belong
    /// to the open file descriptions it shares with the process that opened
    /// it, and its mutexes may have been copied while held. Reads go on;
    /// docs/reliability.md, "Forks".
    #[error(
        "{path}: this store was opened in process {owner}; open it again in this \
         process ({current}) to {what}"
    )]
    ForkedHandle {
        path: PathBuf,
        owner: u32,
        current: u32,
        what: String,
    },

    /// A shard of a collection holds fewer records than when the collection
    /// was opened: records were deleted from it since, while this handle
    /// did not hold it open (a shard's store is opened at its first read,
    /// and let go past the open-file budget), so its indices no longer mean
    /// what the collection's do. Reading on would give other records, and a
    /// table's streams out of step.
    #[error(
        "{path}: this shard held {expected} records when the collection was opened and \
         holds {found} now (records were deleted from it since); open the collection again"
    )]
    ShardChanged {
        path: PathBuf,
        expected: u64,
        found: u64,
    },

    /// The folder a handle opened no longer lies at its path: moved,
    /// removed, or replaced by another (a rename that swapped in another
    /// version of the data). A file the handle opened there now, a chunk
    /// file at its first read or a shard, could be another store's, read
    /// with this handle's table: docs/reliability.md, "Folders moved or
    /// replaced".
    #[error(
        "{path}: the folder this handle opened is no longer at this path (moved, removed or \
         replaced by another since it was opened); open it again"
    )]
    FolderReplaced { path: PathBuf },
}

/// Shorthand for results of store operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_error(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
