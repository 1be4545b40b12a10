//! Zrecord: a persistent store of byte records, the storage engine of loaderx.
//!
//! A store is a directory holding `meta.zr` (a header and a fixed table of
//! record locations, memory-mapped and used in place) and chunk files
//! `0.zr`, `1.zr`, … of densely packed record bytes. Each record is
//! compressed on its own; reads decode straight into the caller's memory.
//! The byte layout is in `docs/FORMAT.md` at the repository root.
//!
//! The live records are always exactly the indices `0..len`: deletion fills
//! each hole with the last record, so an index is stable only until the next
//! delete.
//!
//! ```
//! use zrecord::{AppendOptions, Codec, Store};
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().join("example.zr"))?;
//! let first = store.append(&[b"hello", b"world!"], &AppendOptions::default())?;
//! let mut dst = [0u8; 6];
//! store.gather(&[first as u64 + 1], &mut dst, 6)?;
//! assert_eq!(&dst, b"world!");
//! # Ok::<(), zrecord::Error>(())
//! ```

#[cfg(not(all(target_endian = "little", target_pointer_width = "64")))]
compile_error!("zrecord maps its files in place and needs a 64-bit little-endian target");

mod collection;
mod error;
mod exec;
mod files;
mod format;
pub mod layout;
mod ops;
mod record_source;
mod store;

pub use collection::{Collection, CollectionWriter, ShardLimits};
pub use error::{Error, Result};
pub use exec::batch_buffer::{BatchBuffer, Recycler};
pub use exec::shard_crew::{gather_alone_on_this_thread, gather_threads};
pub use files::checksum_file::CHECKSUM_FILE_NAME;
pub use files::chunk_file::chunk_file_name;
pub use files::delete_journal::JOURNAL_FILE_NAME;
pub use files::dictionary_file::DICT_FILE_NAME;
pub use files::io_hook::{IoEvent, IoHook};
pub use files::meta_file::META_FILE_NAME;
pub use format::checksums::Checksum;
pub use format::codec::{Codec, CodecTag};
pub use format::header::{
    Header, FORMAT_VERSION, HEADER_LEN, MAGIC, VERSION_1, VERSION_BIG_RECORDS,
};
pub use format::limits::{
    CHUNK_CAPACITY, MAX_CHUNKS, MAX_RECORDS, MAX_RECORD_LEN, V1_MAX_RECORD_LEN,
};
pub use format::record_table::{RecordLoc, ENTRY_LEN, META_FILE_LEN, TABLE_OFFSET};
pub use ops::append::{AppendOptions, DEFAULT_APPEND_WAIT};
pub use ops::compact::CompactReport;
pub use ops::stats::Stats;
pub use ops::verify::{BadRecord, VerifyReport};
pub use record_source::RecordSource;
pub use store::{Checksums, Store, StoreOptions};
