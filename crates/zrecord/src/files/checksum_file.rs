//! `checksums.zr`: the optional sidecar of per-record CRC32C checksums,
//! mapped and written in place (its layout: `format/checksums.rs`, and
//! docs/FORMAT.md, "Checksums"). loaderx 0.5.0 ignores the file, so format
//! v1 stays readable there.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use memmap2::MmapRaw;

use crate::error::{io_error, Error, Result};
use crate::files::io_hook::{announce, Hook, IoEvent};
use crate::files::os::{
    check_mapped_size, create_once, map_table_file, open_existing, read_exact_at,
};
use crate::files::table_blocks::TableBlocks;
use crate::format::checksums::{
    checksum_header, checksum_header_is_valid, checksum_slot_offset, covered_bytes, judge,
    Checksum, Verdict, CHECKSUM_COVERED_LEN, CHECKSUM_COVERED_OFFSET, CHECKSUM_FILE_LEN,
    CHECKSUM_HEADER_LEN, CHECKSUM_SLOT_LEN, CHECKSUM_VERSION_OFFSET, COVERS_NOTHING,
};
use crate::format::header::Header;
use crate::format::limits::MAX_RECORDS;
use crate::format::record_table::RecordLoc;

/// File name of the checksum sidecar inside a store directory
/// (docs/FORMAT.md, "A store is a directory").
pub const CHECKSUM_FILE_NAME: &str = "checksums.zr";

pub(crate) struct ChecksumFile {
    path: PathBuf,
    file: File,
    map: MmapRaw,
    /// Whether the file is open and mapped for writing; when it is not,
    /// nothing may call `set` (the store checks before every write).
    writable: bool,
    /// Blocks allocated for the slots' writes (`files/table_blocks.rs`).
    blocks: TableBlocks,
    hook: Hook,
}

impl ChecksumFile {
    /// Opens the sidecar of the store in `dir`, if it has one: for writing
    /// unless `read_only` is set or the system refuses it.
    pub fn open(dir: &Path, read_only: bool, hook: Hook) -> Result<Option<ChecksumFile>> {
        let path = dir.join(CHECKSUM_FILE_NAME);
        let (file, writable) = match open_existing(&path, read_only) {
            Ok(opened) => opened,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path)(e)),
        };
        let size = file.metadata().map_err(io_error(&path))?.len();
        let mut header = [0u8; CHECKSUM_HEADER_LEN];
        if size != CHECKSUM_FILE_LEN as u64 || read_exact_at(&file, &mut header, 0).is_err() {
            return Err(Error::NotAStore {
                path,
                reason: format!(
                    "checksums.zr is {size} bytes, the format needs {CHECKSUM_FILE_LEN}"
                ),
            });
        }
        if !checksum_header_is_valid(&header) {
            return Err(Error::NotAStore {
                path,
                reason: "checksums.zr has a bad magic or an unknown version".into(),
            });
        }
        let map = map_table_file(&file, &path, writable)?;
        Ok(Some(ChecksumFile {
            path,
            file,
            map,
            writable,
            blocks: TableBlocks::new(CHECKSUM_FILE_LEN),
            hook,
        }))
    }

    /// Creates the sidecar atomically with the given slots for the records
    /// of a store whose header is `covered`; when another handle created it
    /// first, opens that one, which holds the same slots and any written
    /// since.
    pub fn create(
        dir: &Path,
        hook: Hook,
        existing: &[Checksum],
        covered: &Header,
    ) -> Result<ChecksumFile> {
        create_once(dir, CHECKSUM_FILE_NAME, |file| {
            file.set_len(CHECKSUM_FILE_LEN as u64)?;
            file.write_all(&checksum_header(covered))?;
            let slots: Vec<u8> = existing.iter().flat_map(|c| c.to_bytes()).collect();
            file.write_all(&slots)
        })?;
        Ok(ChecksumFile::open(dir, false, hook)?.expect("just created"))
    }

    /// Whether the file is open and mapped for writing.
    pub fn writable(&self) -> bool {
        self.writable
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Fails unless the file is still its full size (one `fstat`), as
    /// [`crate::files::meta_file::MetaFile::check_size`] does for `meta.zr`.
    pub fn check_size(&self) -> Result<()> {
        check_mapped_size(&self.file, &self.path, CHECKSUM_FILE_LEN as u64)
    }

    /// The `covered` field: the table state the slots describe.
    fn covered(&self) -> [u8; CHECKSUM_COVERED_LEN] {
        // SAFETY: the header lies inside the mapping (CHECKSUM_FILE_LEN
        // bytes, checked at open), which lives as long as `self`; a byte
        // array has no alignment or validity requirement. The read is
        // volatile because other processes write the field.
        unsafe {
            std::ptr::read_volatile(
                self.map
                    .as_ptr()
                    .add(CHECKSUM_COVERED_OFFSET)
                    .cast::<[u8; CHECKSUM_COVERED_LEN]>(),
            )
        }
    }

    /// Whether the slots describe the table whose header is `header`: no
    /// program that keeps no checksums wrote it since (docs/FORMAT.md,
    /// "Checksums").
    pub fn covers(&self, header: &Header) -> bool {
        self.covered() == covered_bytes(header)
    }

    /// How to read record `index`, stored at `loc`, of a table whose header
    /// is `header` ([`judge`]).
    pub fn judge(&self, index: u64, loc: &RecordLoc, header: &Header) -> Verdict {
        judge(
            index,
            loc,
            self.get(index as usize),
            &self.covered(),
            header,
        )
    }

    /// Records that the slots describe the table whose header is `header`,
    /// or with `None` that they may not (an operation that moves records
    /// is under way); writes this build's version with it, since the slots
    /// now follow its rules.
    pub fn set_covered(&self, header: Option<&Header>) -> Result<()> {
        let covered = header.map_or(COVERS_NOTHING, covered_bytes);
        let mut bytes = [0u8; CHECKSUM_HEADER_LEN - CHECKSUM_VERSION_OFFSET];
        bytes.copy_from_slice(&checksum_header(&Header::empty())[CHECKSUM_VERSION_OFFSET..]);
        bytes[CHECKSUM_COVERED_OFFSET - CHECKSUM_VERSION_OFFSET..].copy_from_slice(&covered);
        announce(
            &self.hook,
            &self.path,
            IoEvent::ChecksumWrite {
                offset: CHECKSUM_VERSION_OFFSET,
                bytes: &bytes,
            },
        )?;
        // SAFETY: the header lies inside the mapping, as in `covered`; the
        // caller holds the store's writer lock or has it alone, so no one
        // else of ours writes the field.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_mut_ptr().add(CHECKSUM_VERSION_OFFSET),
                bytes.len(),
            )
        };
        Ok(())
    }

    /// Flushes the header (the `covered` field) to stable storage.
    pub fn flush_header(&self) -> Result<()> {
        self.flush_bytes(0, CHECKSUM_HEADER_LEN)
    }

    pub fn get(&self, index: usize) -> Checksum {
        assert!(index < MAX_RECORDS);
        let mut b = [0u8; CHECKSUM_SLOT_LEN];
        // SAFETY: the mapping is CHECKSUM_FILE_LEN bytes (checked at open)
        // and lives as long as `self`; slot `index < MAX_RECORDS` (checked)
        // lies inside it, and `b` is a separate local array.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(checksum_slot_offset(index)),
                b.as_mut_ptr(),
                CHECKSUM_SLOT_LEN,
            )
        };
        Checksum::from_bytes(&b)
    }

    /// Writes slot `index`; callers own the slot as they own its table entry.
    pub fn set(&self, index: usize, checksum: Checksum) -> Result<()> {
        assert!(index < MAX_RECORDS);
        let offset = checksum_slot_offset(index);
        let bytes = checksum.to_bytes();
        self.blocks.ensure(
            &self.file,
            &self.path,
            offset,
            bytes.len(),
            |offset, len| {
                announce(
                    &self.hook,
                    &self.path,
                    IoEvent::ChecksumAllocate { offset, len },
                )
            },
        )?;
        announce(
            &self.hook,
            &self.path,
            IoEvent::ChecksumWrite {
                offset,
                bytes: &bytes,
            },
        )?;
        // SAFETY: the slot lies inside the mapping, as in `get`; slots are
        // plain bytes, and no one else writes this one: the caller owns it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_mut_ptr().add(offset),
                CHECKSUM_SLOT_LEN,
            )
        };
        Ok(())
    }

    pub fn flush(&self, first: usize, count: usize) -> Result<()> {
        self.flush_bytes(checksum_slot_offset(first), count * CHECKSUM_SLOT_LEN)
    }

    fn flush_bytes(&self, offset: usize, len: usize) -> Result<()> {
        announce(
            &self.hook,
            &self.path,
            IoEvent::ChecksumSync { offset, len },
        )?;
        self.map
            .flush_range(offset, len)
            .map_err(io_error(&self.path))
    }

    pub fn sync(&self) -> Result<()> {
        self.flush_bytes(0, CHECKSUM_FILE_LEN)?;
        self.file.sync_all().map_err(io_error(&self.path))
    }
}
