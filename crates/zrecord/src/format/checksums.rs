//! The layout of `checksums.zr`, the optional sidecar of per-record CRC32C
//! checksums (docs/FORMAT.md, "Checksums"): a 16-byte header of its own, then
//! one 8-byte slot per table slot. Offsets are chained from one another.
//!
//! The header ends with the table state the slots describe: a copy of the
//! frontier and length of `meta.zr`'s header, written by every operation
//! that keeps the sidecar. A program that does not keep it (loaderx 0.5.0)
//! moves the frontier or the length without updating the copy, which tells
//! readers that the slots no longer describe the table.
//!
//! Slot `i` holds the CRC32C of record `i`'s logical bytes and a CRC32C of
//! its table entry. The second tells a slot that belongs to another record
//! (left by a writer that does not keep the sidecar, or by damage) from
//! damaged data; [`judge`] decides which of the two it is.

use crate::format::header::{Header, HEADER_LEN, TAIL_CHUNK_OFFSET};
use crate::format::limits::MAX_RECORDS;
use crate::format::record_table::{RecordLoc, ENTRY_RESERVED_OFFSET};

/// `magic` of `checksums.zr` (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_MAGIC: [u8; 4] = *b"ZRCK";
/// `version` of `checksums.zr` (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_VERSION: u16 = 2;

/// Offset of the sidecar's magic (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_MAGIC_OFFSET: usize = 0;
/// Offset of the sidecar's version, a `u16` (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_VERSION_OFFSET: usize = CHECKSUM_MAGIC_OFFSET + CHECKSUM_MAGIC.len();
/// Offset of `covered`: bytes `TAIL_CHUNK_OFFSET..HEADER_LEN` of the
/// `meta.zr` header (frontier and length) that the slots describe
/// (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_COVERED_OFFSET: usize = CHECKSUM_VERSION_OFFSET + size_of::<u16>();
/// Size of `covered` (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_COVERED_LEN: usize = HEADER_LEN - TAIL_CHUNK_OFFSET;
/// Size of the sidecar's header: the slots start right after it
/// (docs/FORMAT.md, "Checksums").
pub const CHECKSUM_HEADER_LEN: usize = CHECKSUM_COVERED_OFFSET + CHECKSUM_COVERED_LEN;

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

/// The header a writer puts at the start of `checksums.zr` whose slots
/// describe the table of a store whose `meta.zr` header is `covered`.
pub(crate) fn checksum_header(covered: &Header) -> [u8; CHECKSUM_HEADER_LEN] {
    let mut b = [0u8; CHECKSUM_HEADER_LEN];
    b[CHECKSUM_MAGIC_OFFSET..CHECKSUM_VERSION_OFFSET].copy_from_slice(&CHECKSUM_MAGIC);
    b[CHECKSUM_VERSION_OFFSET..CHECKSUM_COVERED_OFFSET]
        .copy_from_slice(&CHECKSUM_VERSION.to_le_bytes());
    b[CHECKSUM_COVERED_OFFSET..].copy_from_slice(&covered_bytes(covered));
    b
}

/// The `covered` field for a table in the state `header` describes.
pub(crate) fn covered_bytes(header: &Header) -> [u8; CHECKSUM_COVERED_LEN] {
    let mut b = [0u8; CHECKSUM_COVERED_LEN];
    b.copy_from_slice(&header.to_bytes()[TAIL_CHUNK_OFFSET..]);
    b
}

/// Whether `header` has the sidecar's magic and a version this build reads:
/// this one, or version 1, whose slots and `covered` field (zero there)
/// never match an entry of a store with records, so its records read
/// unchecked until the sidecar is rebuilt.
pub(crate) fn checksum_header_is_valid(header: &[u8; CHECKSUM_HEADER_LEN]) -> bool {
    let version = u16::from_le_bytes([
        header[CHECKSUM_VERSION_OFFSET],
        header[CHECKSUM_VERSION_OFFSET + 1],
    ]);
    header[CHECKSUM_MAGIC_OFFSET..CHECKSUM_VERSION_OFFSET] == CHECKSUM_MAGIC
        && (1..=CHECKSUM_VERSION).contains(&version)
}

/// What `covered` says when an operation that moves records is under way,
/// or was interrupted: no table state (its length is past the limit).
pub(crate) const COVERS_NOTHING: [u8; CHECKSUM_COVERED_LEN] = [0xff; CHECKSUM_COVERED_LEN];

/// The checksum slot of one record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checksum {
    /// CRC32C of the record's logical (decoded) bytes.
    pub data: u32,
    /// CRC32C of the record's table entry (all but its reserved byte).
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

    /// Whether this slot was written for the record `loc` describes.
    pub fn describes(&self, loc: &RecordLoc) -> bool {
        self.entry == entry_crc(loc)
    }

    /// The same record's slot once it is stored at `moved` (compaction).
    pub fn moved_to(self, moved: &RecordLoc) -> Checksum {
        Checksum::new(self.data, moved)
    }

    /// Why `logical`, the decoded record, does not match, if it does not.
    pub fn data_mismatch(&self, logical: &[u8]) -> Option<String> {
        let actual = crc32c::crc32c(logical);
        (actual != self.data).then(|| {
            format!(
                "CRC32C of the decoded bytes is {actual:#010x}, the checksum says {:#010x}",
                self.data
            )
        })
    }
}

/// What a reader does with record `index`'s checksum slot (docs/FORMAT.md,
/// "Checksums", "Reading").
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The slot describes the record: check the decoded bytes against it.
    Check(Checksum),
    /// The record was written or moved by a program that keeps no
    /// checksums: read it unchecked.
    Unchecked,
    /// The entry or the slot is damaged.
    Corrupt(String),
}

/// Judges record `index`, whose entry is `loc`, by its slot, the sidecar's
/// `covered` field and the table's current `header`.
pub(crate) fn judge(
    index: u64,
    loc: &RecordLoc,
    slot: Checksum,
    covered: &[u8; CHECKSUM_COVERED_LEN],
    header: &Header,
) -> Verdict {
    if slot.describes(loc) {
        return Verdict::Check(slot);
    }
    if *covered == covered_bytes(header) {
        // No one else wrote the table since the slots were: the entry or
        // the slot changed by damage.
        return Verdict::Corrupt(
            "its table entry does not match its checksum slot (the entry or the slot is \
             damaged)"
                .into(),
        );
    }
    let mut b = [0u8; HEADER_LEN];
    b[TAIL_CHUNK_OFFSET..].copy_from_slice(covered);
    let then = Header::from_bytes(&b);
    // Records past the covered length come from another program's appends,
    // which move the frontier; with the frontier where it was, the length
    // itself is damaged and those records are not records.
    let frontier_unmoved =
        (then.tail_chunk, then.tail_offset) == (header.tail_chunk, header.tail_offset);
    if then.length as usize <= MAX_RECORDS && index >= then.length as u64 && frontier_unmoved {
        Verdict::Corrupt(format!(
            "it lies past the {} records the checksums cover, and nothing was appended \
             since (the frontier is still chunk {} offset {}): the length is damaged",
            then.length, header.tail_chunk, header.tail_offset
        ))
    } else {
        Verdict::Unchecked
    }
}

/// CRC32C over a record's table entry but its reserved byte: it changes
/// when the record moves (a delete or a compaction by a program that keeps
/// no checksums), so a slot never vouches for another record.
fn entry_crc(loc: &RecordLoc) -> u32 {
    crc32c::crc32c(&loc.to_bytes()[..ENTRY_RESERVED_OFFSET])
}

const _: () = assert!(CHECKSUM_HEADER_LEN == 16 && CHECKSUM_SLOT_LEN == 8);
