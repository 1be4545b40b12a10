//! `meta.zr`: the header and record table, memory-mapped and used in place
//! (docs/FORMAT.md, "meta.zr").
//!
//! Entries below the published length are immutable until an exclusive
//! operation (`delete`, `compact`) runs, so readers access them without a lock;
//! the length itself is an atomic in the mapping, stored with release ordering
//! after the entries it covers.

use std::fs::{self, File};
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

#[cfg(unix)]
use memmap2::Advice;
use memmap2::MmapRaw;

use crate::error::{io_error, Error, Result};
use crate::files::io_hook::{announce, Hook, IoEvent};
use crate::files::os::{check_mapped_size, create_once, map_table_file, open_existing};
use crate::files::table_blocks::TableBlocks;
use crate::format::header::{
    Header, FORMAT_VERSION, HEADER_LEN, LENGTH_OFFSET, MAGIC, TAIL_CHUNK_OFFSET,
    TAIL_OFFSET_OFFSET, VERSION_OFFSET,
};
use crate::format::limits::{MAX_CHUNKS, MAX_RECORDS};
use crate::format::record_table::{entry_offset, RecordLoc, ENTRY_LEN, META_FILE_LEN};

/// File name of the metadata file inside a store directory (docs/FORMAT.md,
/// "A store is a directory").
pub const META_FILE_NAME: &str = "meta.zr";

/// A store's record table in its `meta.zr` mapping, borrowed from the
/// [`MetaFile`].
#[derive(Clone, Copy)]
pub(crate) struct RecordTable<'a> {
    base: *const u8,
    _meta: PhantomData<&'a MetaFile>,
}

// SAFETY: a table is a shared borrow of a `MetaFile`, which is `Sync`, and
// reads only entries, as the `MetaFile` does (a batch's threads share a
// collection's tables: `collection/shard_views.rs`).
unsafe impl Send for RecordTable<'_> {}
// SAFETY: as for `Send`.
unsafe impl Sync for RecordTable<'_> {}

impl RecordTable<'_> {
    /// Table entry `index`, which must be below `MAX_RECORDS`.
    pub fn entry(&self, index: usize) -> RecordLoc {
        assert!(index < MAX_RECORDS);
        // SAFETY: `base` is the start of the META_FILE_LEN mapping of a
        // `MetaFile` borrowed for this table's life; `index < MAX_RECORDS`
        // (checked), so the entry lies inside it; entries are ENTRY_LEN (16)
        // bytes at a 16-byte aligned offset of a page-aligned mapping, so
        // aligned for RecordLoc, and every bit pattern is a valid RecordLoc.
        unsafe { std::ptr::read(self.base.add(entry_offset(index)).cast::<RecordLoc>()) }
    }
}

pub(crate) struct MetaFile {
    path: PathBuf,
    file: File,
    map: MmapRaw,
    /// Whether the file is open and mapped for writing; when it is not,
    /// nothing may write the mapping (the store checks before every write).
    writable: bool,
    /// Blocks allocated for the table's writes (`files/table_blocks.rs`).
    blocks: TableBlocks,
    hook: Hook,
}

impl MetaFile {
    /// Opens `dir/meta.zr`, creating the directory and a fresh file when
    /// `create` is set and the file is missing. It is opened for writing
    /// unless `read_only` is set or the system refuses it (no permission, a
    /// read-only file system): see [`MetaFile::writable`].
    pub fn open(dir: &Path, create: bool, read_only: bool, hook: Hook) -> Result<MetaFile> {
        let path = dir.join(META_FILE_NAME);
        if create && !path.exists() {
            create_meta_file(dir)?;
        }
        let (file, writable) = open_existing(&path, read_only).map_err(io_error(&path))?;
        let size = file.metadata().map_err(io_error(&path))?.len();
        if size != META_FILE_LEN as u64 {
            return Err(Error::NotAStore {
                path,
                reason: format!(
                    "meta.zr is {size} bytes, the format needs exactly {META_FILE_LEN}"
                ),
            });
        }
        let map = map_table_file(&file, &path, writable)?;
        let meta = MetaFile {
            path,
            file,
            map,
            writable,
            blocks: TableBlocks::new(META_FILE_LEN),
            hook,
        };
        meta.validate_header()?;
        Ok(meta)
    }

    fn validate_header(&self) -> Result<()> {
        validate_header(&self.header(), &self.path)
    }

    fn ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// The open `meta.zr`, whose locks coordinate handles.
    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fails unless `meta.zr` is still its full size (one `fstat`): a
    /// mapped page past the end of a file that another program truncated
    /// would fault (SIGBUS) when read. Reads call it before they touch the
    /// mapping; a truncation after the check is not caught
    /// (docs/reliability.md, "Files changed behind the store").
    pub fn check_size(&self) -> Result<()> {
        check_mapped_size(&self.file, &self.path, META_FILE_LEN as u64)
    }

    /// Whether the file is open and mapped for writing.
    pub fn writable(&self) -> bool {
        self.writable
    }

    pub fn hook(&self) -> &Hook {
        &self.hook
    }

    fn announce_write(&self, offset: usize, bytes: &[u8]) -> Result<()> {
        announce(&self.hook, &self.path, IoEvent::MetaWrite { offset, bytes })
    }

    fn announce_sync(&self, offset: usize, len: usize) -> Result<()> {
        announce(&self.hook, &self.path, IoEvent::MetaSync { offset, len })
    }

    /// A snapshot of the header; `length` as of an acquire load.
    pub fn header(&self) -> Header {
        // SAFETY: the mapping is META_FILE_LEN bytes (checked at open) and
        // lives as long as `self`, so the bytes before LENGTH_OFFSET are in
        // bounds; a byte array has no alignment or validity requirement. The
        // length after them is only accessed atomically (`length_atomic`).
        let fixed = unsafe { std::ptr::read_volatile(self.ptr().cast::<[u8; LENGTH_OFFSET]>()) };
        let mut bytes = [0u8; HEADER_LEN];
        bytes[..LENGTH_OFFSET].copy_from_slice(&fixed);
        bytes[LENGTH_OFFSET..].copy_from_slice(&self.length().to_le_bytes());
        Header::from_bytes(&bytes)
    }

    fn length_atomic(&self) -> &AtomicU32 {
        // SAFETY: LENGTH_OFFSET + 4 <= META_FILE_LEN, the mapping's size, and
        // LENGTH_OFFSET is 4-aligned within the page-aligned mapping, which
        // lives as long as `self`; this process accesses the field only
        // through this atomic (`header` reads the bytes before it).
        unsafe { AtomicU32::from_ptr(self.ptr().add(LENGTH_OFFSET).cast()) }
    }

    /// The published number of live records.
    pub fn length(&self) -> u32 {
        self.length_atomic().load(Ordering::Acquire)
    }

    /// Publishes a new length; entries below it must already be written.
    pub fn publish_length(&self, length: u32) -> Result<()> {
        debug_assert!(length as usize <= MAX_RECORDS);
        self.announce_write(LENGTH_OFFSET, &length.to_le_bytes())?;
        self.length_atomic().store(length, Ordering::Release);
        Ok(())
    }

    /// The largest record the store may hold as its header now says (a
    /// writer in another process may have raised it since this one opened).
    pub fn record_limit(&self) -> usize {
        self.header().record_limit()
    }

    /// Sets the format version; only ever raised, by an append of a record
    /// that needs it, before the length that makes the record live. Callers
    /// hold the store's writer lock.
    pub fn set_version(&self, version: u16) -> Result<()> {
        self.announce_write(VERSION_OFFSET, &version.to_le_bytes())?;
        // SAFETY: the field lies inside the header, in bounds of the mapping,
        // and is naturally aligned (VERSION_OFFSET is 2-aligned in a
        // page-aligned mapping); only the holder of the writer lock writes it.
        unsafe { std::ptr::write_volatile(self.ptr().add(VERSION_OFFSET).cast::<u16>(), version) };
        Ok(())
    }

    /// Records the write frontier. Callers hold the store's writer lock.
    pub fn set_tail(&self, chunk: u16, offset: u32) -> Result<()> {
        if self.hook.is_some() {
            let header = Header {
                tail_chunk: chunk,
                tail_offset: offset,
                ..self.header()
            };
            let bytes = header.to_bytes();
            self.announce_write(TAIL_CHUNK_OFFSET, &bytes[TAIL_CHUNK_OFFSET..LENGTH_OFFSET])?;
        }
        // SAFETY: both fields lie inside the header, in bounds of the
        // mapping, and are naturally aligned (TAIL_CHUNK_OFFSET is 2-aligned,
        // TAIL_OFFSET_OFFSET 4-aligned, in a page-aligned mapping); only the
        // holder of the store's writer lock (or of `&mut Store`) writes them.
        unsafe {
            std::ptr::write_volatile(self.ptr().add(TAIL_CHUNK_OFFSET).cast::<u16>(), chunk);
            std::ptr::write_volatile(self.ptr().add(TAIL_OFFSET_OFFSET).cast::<u32>(), offset);
        }
        Ok(())
    }

    /// Table entry `index`, which must be below `MAX_RECORDS`.
    pub fn entry(&self, index: usize) -> RecordLoc {
        self.table().entry(index)
    }

    /// The record table, for reads of many entries: a batch over many
    /// shards takes each shard's once, rather than finding each shard's
    /// mapping again for every record (`ops/gather.rs`).
    pub fn table(&self) -> RecordTable<'_> {
        RecordTable {
            base: self.ptr(),
            _meta: PhantomData,
        }
    }

    /// Asks the kernel to start reading the page of table entry `index`
    /// into the page cache, without waiting: the table is mapped for random
    /// access ([`map_table_file`]), so a cold entry is otherwise read when
    /// its fault waits for it. A hint only; an index past the table is
    /// skipped.
    pub fn will_need_entry(&self, index: usize) {
        #[cfg(unix)]
        if index < MAX_RECORDS {
            let _ = self
                .map
                .advise_range(Advice::WillNeed, entry_offset(index), ENTRY_LEN);
        }
        #[cfg(not(unix))]
        let _ = index;
    }

    /// Writes table entry `index`. Callers guarantee no reader can see the
    /// slot: it is at or past the published length, or they hold `&mut Store`.
    pub fn set_entry(&self, index: usize, loc: RecordLoc) -> Result<()> {
        assert!(index < MAX_RECORDS);
        let offset = entry_offset(index);
        self.blocks
            .ensure(&self.file, &self.path, offset, ENTRY_LEN, |offset, len| {
                announce(
                    &self.hook,
                    &self.path,
                    IoEvent::MetaAllocate { offset, len },
                )
            })?;
        if self.hook.is_some() {
            self.announce_write(offset, &loc.to_bytes())?;
        }
        // SAFETY: in bounds and aligned, as in `entry`; no reader looks at
        // the slot (the caller's promise above), and writers are serialised
        // by the writer lock or `&mut Store`.
        unsafe { std::ptr::write(self.ptr().add(offset).cast::<RecordLoc>(), loc) };
        Ok(())
    }

    /// Flushes the table entries `first..first + count` to the file.
    pub fn flush_entries(&self, first: usize, count: usize) -> Result<()> {
        self.flush_range(entry_offset(first), count * ENTRY_LEN)
    }

    /// Flushes the header to the file.
    pub fn flush_header(&self) -> Result<()> {
        self.flush_range(0, HEADER_LEN)
    }

    fn flush_range(&self, offset: usize, len: usize) -> Result<()> {
        self.announce_sync(offset, len)?;
        self.map
            .flush_range(offset, len)
            .map_err(io_error(&self.path))
    }

    /// Flushes every dirty page of the mapping and the file's metadata.
    pub fn sync(&self) -> Result<()> {
        self.announce_sync(0, META_FILE_LEN)?;
        self.map.flush().map_err(io_error(&self.path))?;
        self.file.sync_all().map_err(io_error(&self.path))
    }
}

/// Creates `meta.zr` atomically (its full sparse size and the header, synced
/// before it appears), so a crash leaves either no meta.zr or a valid empty
/// one; of creators racing on one directory, the first wins and the others
/// open its file.
fn create_meta_file(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    create_once(dir, META_FILE_NAME, |file| {
        file.set_len(META_FILE_LEN as u64)?;
        file.write_all(&Header::empty().to_bytes())
    })
    .map(drop)
}

/// Checks a header read from `path` (a `meta.zr`) against the format's
/// rules (docs/FORMAT.md, "Header"): the magic, a version this build reads,
/// a length and a tail chunk within the limits.
pub(crate) fn validate_header(h: &Header, path: &Path) -> Result<()> {
    let bad = |reason: String| Error::NotAStore {
        path: path.to_path_buf(),
        reason,
    };
    if h.magic != MAGIC {
        return Err(bad(format!("magic is {:?}, expected \"ZREC\"", h.magic)));
    }
    if h.version > FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            found: h.version,
            supported: FORMAT_VERSION,
        });
    }
    if h.version == 0 {
        return Err(bad("format version 0 does not exist".into()));
    }
    if h.length as usize > MAX_RECORDS {
        return Err(bad(format!(
            "header length {} exceeds the table's {MAX_RECORDS} slots",
            h.length
        )));
    }
    if h.tail_chunk as usize >= MAX_CHUNKS {
        return Err(bad(format!(
            "tail chunk {} exceeds the {MAX_CHUNKS} chunk limit",
            h.tail_chunk
        )));
    }
    Ok(())
}
