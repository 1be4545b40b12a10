//! The 16-byte header at the start of `meta.zr` (docs/FORMAT.md, "Header").

/// `magic`: the first four bytes of every `meta.zr`.
pub const MAGIC: [u8; 4] = *b"ZREC";
/// `version`: the format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u16 = 1;

pub const MAGIC_OFFSET: usize = 0;
pub const VERSION_OFFSET: usize = MAGIC_OFFSET + 4;
pub const TAIL_CHUNK_OFFSET: usize = VERSION_OFFSET + size_of::<u16>();
pub const TAIL_OFFSET_OFFSET: usize = TAIL_CHUNK_OFFSET + size_of::<u16>();
pub const LENGTH_OFFSET: usize = TAIL_OFFSET_OFFSET + size_of::<u32>();
/// Size of the header; the record table starts right after it.
pub const HEADER_LEN: usize = LENGTH_OFFSET + size_of::<u32>();

/// The header as it lies in the mapping. `length` is read and written
/// atomically through [`crate::files::meta_file::MetaFile`], never through this struct.
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

const _: () = assert!(size_of::<Header>() == HEADER_LEN);
const _: () = assert!(std::mem::offset_of!(Header, version) == VERSION_OFFSET);
const _: () = assert!(std::mem::offset_of!(Header, tail_chunk) == TAIL_CHUNK_OFFSET);
const _: () = assert!(std::mem::offset_of!(Header, tail_offset) == TAIL_OFFSET_OFFSET);
const _: () = assert!(std::mem::offset_of!(Header, length) == LENGTH_OFFSET);
