//! `checksums.zr`: the optional sidecar of per-record CRC32C checksums
//! (docs/FORMAT.md, "Checksums"). loaderx 0.5.0 ignores the file, so format
//! v1 stays readable there.
//!
//! Slot `i` holds the CRC32C of record `i`'s logical bytes and a CRC32C of
//! the entry fields that describe the stored record (its two lengths and its
//! codec, not its position, which compaction changes). The second tells a
//! slot that belongs to another record — left by a writer that does not keep
//! the sidecar, or by damage — from damaged data, so the report can say so.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::MmapRaw;

use crate::error::{io_error, Error, Result};
use crate::files::io_hook::{announce, Hook, IoEvent};
use crate::format::limits::MAX_RECORDS;
use crate::format::record_table::{
    RecordLoc, ENTRY_CHUNK_ID_OFFSET, ENTRY_CODEC_OFFSET, ENTRY_PHYS_LENGTH_OFFSET,
};

pub const CHECKSUM_FILE_NAME: &str = "checksums.zr";
const MAGIC: [u8; 4] = *b"ZRCK";
const VERSION: u16 = 1;
const HEADER_LEN: usize = 16;
const DATA_CRC_OFFSET: usize = 0;
const ENTRY_CRC_OFFSET: usize = DATA_CRC_OFFSET + 4;
const SLOT_LEN: usize = ENTRY_CRC_OFFSET + 4;
const FILE_LEN: usize = HEADER_LEN + MAX_RECORDS * SLOT_LEN;

/// The checksum slot of one record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checksum {
    /// CRC32C of the record's logical (decoded) bytes.
    pub data: u32,
    /// CRC32C of the entry's `phys_length`, `logic_length` and codec tag.
    pub entry: u32,
}

impl Checksum {
    pub fn new(data: u32, loc: &RecordLoc) -> Checksum {
        Checksum {
            data,
            entry: entry_crc(loc),
        }
    }

    pub fn to_bytes(self) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        b[DATA_CRC_OFFSET..][..4].copy_from_slice(&self.data.to_le_bytes());
        b[ENTRY_CRC_OFFSET..][..4].copy_from_slice(&self.entry.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8; SLOT_LEN]) -> Checksum {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        Checksum {
            data: u32_at(DATA_CRC_OFFSET),
            entry: u32_at(ENTRY_CRC_OFFSET),
        }
    }

    /// Why `logical` (decoded from `loc`) does not match, if it does not.
    pub fn mismatch(&self, loc: &RecordLoc, logical: &[u8]) -> Option<String> {
        if self.entry != entry_crc(loc) {
            return Some(
                "its checksum slot describes another record (the entry or the slot is \
                 damaged, or a program that keeps no checksums wrote the record)"
                    .into(),
            );
        }
        let actual = crc32c::crc32c(logical);
        (actual != self.data).then(|| {
            format!(
                "CRC32C of the decoded bytes is {actual:#010x}, the checksum says {:#010x}",
                self.data
            )
        })
    }
}

/// CRC32C over the entry fields a record keeps wherever it is stored.
fn entry_crc(loc: &RecordLoc) -> u32 {
    let b = loc.to_bytes();
    let crc = crc32c::crc32c(&b[ENTRY_PHYS_LENGTH_OFFSET..ENTRY_CHUNK_ID_OFFSET]);
    crc32c::crc32c_append(crc, &[b[ENTRY_CODEC_OFFSET]])
}

pub const CHECKSUM_SLOT_LEN: usize = SLOT_LEN;

pub(crate) struct ChecksumFile {
    path: PathBuf,
    file: File,
    map: MmapRaw,
    hook: Hook,
}

impl ChecksumFile {
    /// Opens the sidecar of the store in `dir`, if it has one.
    pub fn open(dir: &Path, hook: Hook) -> Result<Option<ChecksumFile>> {
        let path = dir.join(CHECKSUM_FILE_NAME);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path)(e)),
        };
        let size = file.metadata().map_err(io_error(&path))?.len();
        let mut header = [0u8; HEADER_LEN];
        if size != FILE_LEN as u64 || file.read_exact_at(&mut header, 0).is_err() {
            return Err(Error::NotAStore {
                path,
                reason: format!("checksums.zr is {size} bytes, the format needs {FILE_LEN}"),
            });
        }
        if header[..4] != MAGIC || u16::from_le_bytes([header[4], header[5]]) != VERSION {
            return Err(Error::NotAStore {
                path,
                reason: "checksums.zr has a bad magic or an unknown version".into(),
            });
        }
        let map = MmapRaw::map_raw(&file).map_err(io_error(&path))?;
        Ok(Some(ChecksumFile {
            path,
            file,
            map,
            hook,
        }))
    }

    /// Creates the sidecar atomically with the given slots for the records
    /// already in the store.
    pub fn create(dir: &Path, hook: Hook, existing: &[Checksum]) -> Result<ChecksumFile> {
        let tmp = dir.join("checksums.zr.tmp");
        let mut file = File::create(&tmp).map_err(io_error(&tmp))?;
        file.set_len(FILE_LEN as u64).map_err(io_error(&tmp))?;
        let mut header = [0u8; HEADER_LEN];
        header[..4].copy_from_slice(&MAGIC);
        header[4..6].copy_from_slice(&VERSION.to_le_bytes());
        file.write_all(&header).map_err(io_error(&tmp))?;
        let slots: Vec<u8> = existing.iter().flat_map(|c| c.to_bytes()).collect();
        file.write_all(&slots).map_err(io_error(&tmp))?;
        file.sync_all().map_err(io_error(&tmp))?;
        let path = dir.join(CHECKSUM_FILE_NAME);
        fs::rename(&tmp, &path).map_err(io_error(&path))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error(dir))?;
        Ok(ChecksumFile::open(dir, hook)?.expect("just created"))
    }

    pub fn get(&self, index: usize) -> Checksum {
        assert!(index < MAX_RECORDS);
        let mut b = [0u8; SLOT_LEN];
        // SAFETY: the slot is in bounds of the FILE_LEN mapping (checked).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(HEADER_LEN + index * SLOT_LEN),
                b.as_mut_ptr(),
                SLOT_LEN,
            )
        };
        Checksum::from_bytes(&b)
    }

    /// Writes slot `index`; callers own the slot as they own its table entry.
    pub fn set(&self, index: usize, checksum: Checksum) -> Result<()> {
        assert!(index < MAX_RECORDS);
        let offset = HEADER_LEN + index * SLOT_LEN;
        let bytes = checksum.to_bytes();
        announce(
            &self.hook,
            &self.path,
            IoEvent::ChecksumWrite {
                offset,
                bytes: &bytes,
            },
        )?;
        // SAFETY: in bounds (checked); slots are plain bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_mut_ptr().add(offset),
                SLOT_LEN,
            )
        };
        Ok(())
    }

    pub fn flush(&self, first: usize, count: usize) -> Result<()> {
        let (offset, len) = (HEADER_LEN + first * SLOT_LEN, count * SLOT_LEN);
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
