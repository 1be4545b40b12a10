//! The record table: 2^24 entries of 16 bytes after the header of `meta.zr`
//! (docs/FORMAT.md, "Record table"). Entry `i` says where record `i` lives.

use crate::format::codec::CodecTag;
use crate::format::header::HEADER_LEN;
use crate::format::limits::MAX_RECORDS;

/// Offset of `offset`, a `u32`, within an entry (docs/FORMAT.md, "Record table").
pub const ENTRY_OFFSET_OFFSET: usize = 0;
/// Offset of `phys_length`, a `u32` (docs/FORMAT.md, "Record table").
pub const ENTRY_PHYS_LENGTH_OFFSET: usize = ENTRY_OFFSET_OFFSET + size_of::<u32>();
/// Offset of `logic_length`, a `u32` (docs/FORMAT.md, "Record table").
pub const ENTRY_LOGIC_LENGTH_OFFSET: usize = ENTRY_PHYS_LENGTH_OFFSET + size_of::<u32>();
/// Offset of `chunk_id`, a `u16` (docs/FORMAT.md, "Record table").
pub const ENTRY_CHUNK_ID_OFFSET: usize = ENTRY_LOGIC_LENGTH_OFFSET + size_of::<u32>();
/// Offset of the codec tag byte (docs/FORMAT.md, "Record table").
pub const ENTRY_CODEC_OFFSET: usize = ENTRY_CHUNK_ID_OFFSET + size_of::<u16>();
/// Offset of the reserved byte (docs/FORMAT.md, "Record table").
pub const ENTRY_RESERVED_OFFSET: usize = ENTRY_CODEC_OFFSET + size_of::<u8>();
/// Size of one table entry (docs/FORMAT.md, "Record table").
pub const ENTRY_LEN: usize = ENTRY_RESERVED_OFFSET + size_of::<u8>();

/// Byte offset of the table within `meta.zr`: right after the header
/// (docs/FORMAT.md, "Record table").
pub const TABLE_OFFSET: usize = HEADER_LEN;
/// Size of the whole `meta.zr` file: the header and every table slot
/// (docs/FORMAT.md, "meta.zr").
pub const META_FILE_LEN: usize = TABLE_OFFSET + MAX_RECORDS * ENTRY_LEN;

/// Byte offset of table entry `index` within `meta.zr`.
pub const fn entry_offset(index: usize) -> usize {
    TABLE_OFFSET + index * ENTRY_LEN
}

/// A physical position in the store, (chunk, offset within it), packed so
/// that comparing two addresses compares positions: the order compaction
/// packs records in (docs/FORMAT.md, "Compact").
pub const fn physical_address(chunk: u16, offset: u64) -> u64 {
    ((chunk as u64) << 32) | offset
}

/// One table entry exactly as it lies in the mapping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordLoc {
    /// Position of the stored bytes within the chunk.
    pub offset: u32,
    /// Stored (possibly compressed) size.
    pub phys_length: u32,
    /// Original size, what a gather writes.
    pub logic_length: u32,
    /// Chunk file holding the record.
    pub chunk_id: u16,
    /// Codec tag; see [`CodecTag`].
    pub codec: CodecTag,
    /// Written as zero, ignored on read.
    pub reserved: u8,
}

impl RecordLoc {
    /// Physical address of the record's first byte: (chunk, offset) packed so
    /// that comparing two addresses compares physical positions.
    pub fn physical_start(&self) -> u64 {
        physical_address(self.chunk_id, self.offset as u64)
    }

    /// The entry's 16 bytes as they lie in `meta.zr`.
    pub fn to_bytes(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[ENTRY_OFFSET_OFFSET..ENTRY_PHYS_LENGTH_OFFSET]
            .copy_from_slice(&self.offset.to_le_bytes());
        b[ENTRY_PHYS_LENGTH_OFFSET..ENTRY_LOGIC_LENGTH_OFFSET]
            .copy_from_slice(&self.phys_length.to_le_bytes());
        b[ENTRY_LOGIC_LENGTH_OFFSET..ENTRY_CHUNK_ID_OFFSET]
            .copy_from_slice(&self.logic_length.to_le_bytes());
        b[ENTRY_CHUNK_ID_OFFSET..ENTRY_CODEC_OFFSET].copy_from_slice(&self.chunk_id.to_le_bytes());
        b[ENTRY_CODEC_OFFSET] = self.codec.0;
        b[ENTRY_RESERVED_OFFSET] = self.reserved;
        b
    }

    /// Reads an entry from its 16 bytes.
    pub fn from_bytes(b: &[u8; ENTRY_LEN]) -> RecordLoc {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        RecordLoc {
            offset: u32_at(ENTRY_OFFSET_OFFSET),
            phys_length: u32_at(ENTRY_PHYS_LENGTH_OFFSET),
            logic_length: u32_at(ENTRY_LOGIC_LENGTH_OFFSET),
            chunk_id: u16::from_le_bytes([b[ENTRY_CHUNK_ID_OFFSET], b[ENTRY_CHUNK_ID_OFFSET + 1]]),
            codec: CodecTag(b[ENTRY_CODEC_OFFSET]),
            reserved: b[ENTRY_RESERVED_OFFSET],
        }
    }

    /// One past the last stored byte, within the chunk.
    pub fn end(&self) -> u64 {
        self.offset as u64 + self.phys_length as u64
    }
}

const _: () = assert!(size_of::<RecordLoc>() == ENTRY_LEN && ENTRY_LEN == 16);
const _: () = assert!(std::mem::offset_of!(RecordLoc, offset) == ENTRY_OFFSET_OFFSET);
const _: () = assert!(align_of::<RecordLoc>() <= HEADER_LEN);
const _: () = assert!(std::mem::offset_of!(RecordLoc, phys_length) == ENTRY_PHYS_LENGTH_OFFSET);
const _: () = assert!(std::mem::offset_of!(RecordLoc, logic_length) == ENTRY_LOGIC_LENGTH_OFFSET);
const _: () = assert!(std::mem::offset_of!(RecordLoc, chunk_id) == ENTRY_CHUNK_ID_OFFSET);
const _: () = assert!(std::mem::offset_of!(RecordLoc, codec) == ENTRY_CODEC_OFFSET);
const _: () = assert!(std::mem::offset_of!(RecordLoc, reserved) == ENTRY_RESERVED_OFFSET);
