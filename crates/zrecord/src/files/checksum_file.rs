//! `checksums.zr`: the optional sidecar of per-record CRC32C checksums,
//! mapped and written in place (its layout: `format/checksums.rs`, and
//! docs/FORMAT.md, "Checksums"). loaderx 0.5.0 ignores the file, so format
//! v1 stays readable there.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{io_error, Error, Result};
use crate::files::io_hook::{announce, Hook, IoEvent};
use crate::files::os::{create_once, open_existing, read_exact_at};
use crate::format::checksums::{
    checksum_header, checksum_header_is_valid, checksum_slot_offset, Checksum, CHECKSUM_FILE_LEN,
    CHECKSUM_HEADER_LEN, CHECKSUM_SLOT_LEN,
};
use crate::format::limits::MAX_RECORDS;

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
        let map = if writable {
            MmapRaw::map_raw(&file)
        } else {
            MmapOptions::new().map_raw_read_only(&file)
        };
        let map = map.map_err(io_error(&path))?;
        Ok(Some(ChecksumFile {
            path,
            file,
            map,
            writable,
            hook,
        }))
    }

    /// Creates the sidecar atomically with the given slots for the records
    /// already in the store; when another handle created it first, opens
    /// that one, which holds the same slots and any written since.
    pub fn create(dir: &Path, hook: Hook, existing: &[Checksum]) -> Result<ChecksumFile> {
        create_once(dir, CHECKSUM_FILE_NAME, |file| {
            file.set_len(CHECKSUM_FILE_LEN as u64)?;
            file.write_all(&checksum_header())?;
            let slots: Vec<u8> = existing.iter().flat_map(|c| c.to_bytes()).collect();
            file.write_all(&slots)
        })?;
        Ok(ChecksumFile::open(dir, false, hook)?.expect("just created"))
    }

    /// Whether the file is open and mapped for writing.
    pub fn writable(&self) -> bool {
        self.writable
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
        let (offset, len) = (checksum_slot_offset(first), count * CHECKSUM_SLOT_LEN);
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
        self.flush(0, MAX_RECORDS)?;
        self.file.sync_all().map_err(io_error(&self.path))
    }
}
