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

mod append;
mod checksum_file;
mod chunk_file;
mod codec;
mod cold_reads;
mod compact;
mod delete;
mod delete_journal;
mod error;
mod gather;
mod header;
mod io_hook;
mod limits;
mod lock;
mod meta_file;
mod record_table;
mod shard_crew;
mod stats;
mod store;
mod streaming_copy;
mod thread_pool;
mod verify;

pub use append::AppendOptions;
pub use checksum_file::{Checksum, CHECKSUM_FILE_NAME};
pub use chunk_file::chunk_file_name;
pub use codec::{Codec, CodecTag};
pub use compact::CompactReport;
pub use delete_journal::JOURNAL_FILE_NAME;
pub use error::{Error, Result};
pub use header::{Header, FORMAT_VERSION, HEADER_LEN, MAGIC};
pub use io_hook::{IoEvent, IoHook};
pub use limits::{CHUNK_CAPACITY, MAX_CHUNKS, MAX_RECORDS, MAX_RECORD_LEN};
pub use meta_file::META_FILE_NAME;
pub use record_table::{RecordLoc, ENTRY_LEN, META_FILE_LEN, TABLE_OFFSET};
pub use shard_crew::{gather_alone_on_this_thread, gather_threads};
pub use stats::Stats;
pub use store::{Store, StoreOptions};
pub use verify::{BadRecord, VerifyReport};
