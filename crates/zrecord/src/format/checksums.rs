//! The layout of `checksums.zr`, the optional sidecar of per-record CRC32C
//! checksums (docs/FORMAT.md, "Checksums"): a 16-byte header of its own, then
//! one 8-byte slot per table slot. Offsets are chained from one another.
//!
//! Slot `i` holds the CRC32C of record `i`'s logical bytes and a CRC32C of
//! the entry fields that describe the stored record (its two lengths and its
//! codec, not its position, which compaction changes). The second tells a
//! slot that belongs to another record — left by a writer that does not keep
//! the sidecar, or by damage — from damaged data, so the report can say so.

use crate::format::limits::MAX_RECORDS;
use crate::format::record_table::{
    RecordLoc, ENTRY_CHUNK_ID_OFFSET, ENTRY_CODEC_OFFSET, ENTRY_PHYS_LENGTH_OFFSET,
};

/// `magic` of `checksums.zr` (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_MAGIC: [u8; 4] = *b"ZRCK";
/// `version` of `checksums.zr` (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_VERSION: u16 = 1;

/// Offset of the sidecar's magic (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_MAGIC_OFFSET: usize = 0;
/// Offset of the sidecar's version, a `u16` (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_VERSION_OFFSET: usize = CHECKSUM_MAGIC_OFFSET + CHECKSUM_MAGIC.len();
/// Offset of the sidecar header's reserved bytes, written as zero and
/// ignored on read (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_RESERVED_OFFSET: usize = CHECKSUM_VERSION_OFFSET + size_of::<u16>();
/// Size of the sidecar's header: the slots start right after it
/// (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_HEADER_LEN: usize = CHECKSUM_RESERVED_OFFSET + CHECKSUM_RESERVED_LEN;
/// Reserved bytes of the sidecar header (docs/FORMAT.md, "Checksums").
const CHECKSUM_RESERVED_LEN: usize = 10;

/// Offset of the data CRC, a `u32`, within a slot (docs/FORMAT.md, "Checksums").
pub const SLOT_DATA_CRC_OFFSET: usize = 0;
/// Offset of the entry CRC, a `u32`, within a slot (docs/FORMAT.md, "Checksums").
pub const SLOT_ENTRY_CRC_OFFSET: usize = SLOT_DATA_CRC_OFFSET + size_of::<u32>();
/// Size of one checksum slot (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_SLOT_LEN: usize = SLOT_ENTRY_CRC_OFFSET + size_of::<u32>();

/// Size of the whole `checksums.zr`: the header and a slot per table slot
/// (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_FILE_LEN: usize = CHECKSUM_HEADER_LEN + MAX_RECORDS * CHECKSUM_SLOT_LEN;

/// Byte offset of record `index`'s slot within `checksums.zr`.
pub const fn checksum_slot_offset(index: usize) -> usize {
    CHECKSUM_HEADER_LEN + index * CHECKSUM_SLOT_LEN
}

/// The header a writer puts at the start of `checksums.zr`.
pub(crate) fn checksum_header() -> [u8; CHECKSUM_HEADER_LEN] {
    let mut b = [0u8; CHECKSUM_HEADER_LEN];
    b[CHECKSUM_MAGIC_OFFSET..CHECKSUM_VERSION_OFFSET].copy_from_slice(&CHECKSUM_MAGIC);
    b[CHECKSUM_VERSION_OFFSET..CHECKSUM_RESERVED_OFFSET]
        .copy_from_slice(&CHECKSUM_VERSION.to_le_bytes());
    b
}

/// Whether `header` has the sidecar's magic and a version this build reads;
/// the reserved bytes are ignored.
pub(crate) fn checksum_header_is_valid(header: &[u8; CHECKSUM_HEADER_LEN]) -> bool {
    let ours = checksum_header();
    header[..CHECKSUM_RESERVED_OFFSET] == ours[..CHECKSUM_RESERVED_OFFSET]
}

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

    /// The slot's 8 bytes as they lie in `checksums.zr`.
    pub fn to_bytes(self) -> [u8; CHECKSUM_SLOT_LEN] {
        let mut b = [0u8; CHECKSUM_SLOT_LEN];
        b[SLOT_DATA_CRC_OFFSET..SLOT_ENTRY_CRC_OFFSET].copy_from_slice(&self.data.to_le_bytes());
        b[SLOT_ENTRY_CRC_OFFSET..CHECKSUM_SLOT_LEN].copy_from_slice(&self.entry.to_le_bytes());
        b
    }

    /// Reads a slot from its 8 bytes.
    pub fn from_bytes(b: &[u8; CHECKSUM_SLOT_LEN]) -> Checksum {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Checksum {
            data: u32_at(SLOT_DATA_CRC_OFFSET),
            entry: u32_at(SLOT_ENTRY_CRC_OFFSET),
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

/// CRC32C over the entry fields a record keeps wherever it is stored: its
/// two lengths, then its codec tag.
fn entry_crc(loc: &RecordLoc) -> u32 {
    let b = loc.to_bytes();
    let crc = crc32c::crc32c(&b[ENTRY_PHYS_LENGTH_OFFSET..ENTRY_CHUNK_ID_OFFSET]);
    crc32c::crc32c_append(crc, &[b[ENTRY_CODEC_OFFSET]])
}

const _: () = assert!(CHECKSUM_HEADER_LEN == 16 && CHECKSUM_SLOT_LEN == 8);
