//! The 16-byte header at the start of `meta.zr` (docs/FORMAT.md, "Header").
//! Each field's offset is chained from the one before it.

use crate::format::limits::{MAX_RECORD_LEN, V1_MAX_RECORD_LEN};

/// `magic`: the first four bytes of every `meta.zr` (docs/FORMAT.md, "Header").
pub const MAGIC: [u8; 4] = *b"ZREC";
/// `version` of a store whose records are all at most
/// [`V1_MAX_RECORD_LEN`]: what loaderx 0.5.0 reads, and what a new store is
/// (docs/FORMAT.md, "Header" and "Versions").
pub const VERSION_1: u16 = 1;
/// `version` of a store that holds (or held) a record over
/// [`V1_MAX_RECORD_LEN`], which format-1 readers refuse (docs/FORMAT.md,
/// "Versions").
pub const VERSION_BIG_RECORDS: u16 = 2;
/// The newest format version this build reads.
pub const FORMAT_VERSION: u16 = VERSION_BIG_RECORDS;

/// Offset of `magic` (docs/FORMAT.md, "Header").
pub const MAGIC_OFFSET: usize = 0;
/// Offset of `version`, a `u16` (docs/FORMAT.md, "Header").
pub const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
/// Offset of `tail_chunk`, a `u16` (docs/FORMAT.md, "Header").
pub const TAIL_CHUNK_OFFSET: usize = VERSION_OFFSET + size_of::<u16>();
/// Offset of `tail_offset`, a `u32` (docs/FORMAT.md, "Header").
pub const TAIL_OFFSET_OFFSET: usize = TAIL_CHUNK_OFFSET + size_of::<u16>();
/// Offset of `length`, a `u32` (docs/FORMAT.md, "Header").
pub const LENGTH_OFFSET: usize = TAIL_OFFSET_OFFSET + size_of::<u32>();
/// Size of the header; the record table starts right after it
/// (docs/FORMAT.md, "Header").
pub const HEADER_LEN: usize = LENGTH_OFFSET + size_of::<u32>();

/// The header's fields. In the mapping, `length` is read and written
/// atomically through `MetaFile`, never through this struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub magic: [u8; 4],
    pub version: u16,
    /// Chunk holding the write frontier; chunks `0..=tail_chunk` exist.
    pub tail_chunk: u16,
    /// Next free byte of the tail chunk.
    pub tail_offset: u32,
    /// Number of live records; the table's entries `0..length` are live.
    pub length: u32,
}

impl Header {
    /// The header of a new, empty store.
    pub fn empty() -> Header {
        Header {
            magic: MAGIC,
            version: VERSION_1,
            tail_chunk: 0,
            tail_offset: 0,
            length: 0,
        }
    }

    /// The largest record a store of this header's version may hold.
    pub fn record_limit(&self) -> usize {
        if self.version >= VERSION_BIG_RECORDS {
            MAX_RECORD_LEN
        } else {
            V1_MAX_RECORD_LEN
        }
    }

    /// The header's 16 bytes as they lie in `meta.zr`.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&self.magic);
        b[VERSION_OFFSET..TAIL_CHUNK_OFFSET].copy_from_slice(&self.version.to_le_bytes());
        b[TAIL_CHUNK_OFFSET..TAIL_OFFSET_OFFSET].copy_from_slice(&self.tail_chunk.to_le_bytes());
        b[TAIL_OFFSET_OFFSET..LENGTH_OFFSET].copy_from_slice(&self.tail_offset.to_le_bytes());
        b[LENGTH_OFFSET..HEADER_LEN].copy_from_slice(&self.length.to_le_bytes());
        b
    }

    /// Reads a header from its 16 bytes; says nothing about its validity.
    pub fn from_bytes(b: &[u8; HEADER_LEN]) -> Header {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Header {
            magic: [
                b[MAGIC_OFFSET],
                b[MAGIC_OFFSET + 1],
                b[MAGIC_OFFSET + 2],
                b[MAGIC_OFFSET + 3],
            ],
            version: u16_at(VERSION_OFFSET),
            tail_chunk: u16_at(TAIL_CHUNK_OFFSET),
            tail_offset: u32_at(TAIL_OFFSET_OFFSET),
            length: u32_at(LENGTH_OFFSET),
        }
    }
}

const _: () = assert!(size_of::<Header>() == HEADER_LEN);
const _: () = assert!(std::mem::offset_of!(Header, magic) == MAGIC_OFFSET);
const _: () = assert!(std::mem::offset_of!(Header, version) == VERSION_OFFSET);
const _: () = assert!(std::mem::offset_of!(Header, tail_chunk) == TAIL_CHUNK_OFFSET);
const _: () = assert!(std::mem::offset_of!(Header, tail_offset) == TAIL_OFFSET_OFFSET);
const _: () = assert!(std::mem::offset_of!(Header, length) == LENGTH_OFFSET);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes_round_trip_at_the_documented_offsets() {
        let h = Header {
            magic: MAGIC,
            version: 0x0102,
            tail_chunk: 0x0304,
            tail_offset: 0x0506_0708,
            length: 0x090a_0b0c,
        };
        let b = h.to_bytes();
        assert_eq!(
            b,
            [
                b'Z', b'R', b'E', b'C', 0x02, 0x01, 0x04, 0x03, 0x08, 0x07, 0x06, 0x05, 0x0c, 0x0b,
                0x0a, 0x09
            ]
        );
        assert_eq!(Header::from_bytes(&b), h);
    }
}
