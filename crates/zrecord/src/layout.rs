//! Every byte offset and size of the on-disk structures, for tools and tests
//! that read or damage store files directly. Each is defined once, in the
//! `format` module that its docs/FORMAT.md section describes, and chained
//! from the one before it.

pub use crate::collection::manifest::{
    manifest_name, MANIFEST_CRC_PREFIX, MANIFEST_MAGIC, MANIFEST_PREFIX, MANIFEST_SUFFIX,
    MAX_SHARD_NAME,
};
pub use crate::format::checksums::{
    checksum_slot_offset, CHECKSUM_COVERED_LEN, CHECKSUM_COVERED_OFFSET, CHECKSUM_FILE_LEN,
    CHECKSUM_HEADER_LEN, CHECKSUM_MAGIC, CHECKSUM_MAGIC_OFFSET, CHECKSUM_SLOT_LEN,
    CHECKSUM_VERSION, CHECKSUM_VERSION_OFFSET, SLOT_DATA_CRC_OFFSET, SLOT_ENTRY_CRC_OFFSET,
};
pub use crate::format::header::{
    FORMAT_VERSION, HEADER_LEN, LENGTH_OFFSET, MAGIC, MAGIC_OFFSET, TAIL_CHUNK_OFFSET,
    TAIL_OFFSET_OFFSET, VERSION_1, VERSION_BIG_RECORDS, VERSION_OFFSET,
};
pub use crate::format::record_table::{
    entry_offset, physical_address, ENTRY_CHUNK_ID_OFFSET, ENTRY_CODEC_OFFSET, ENTRY_LEN,
    ENTRY_LOGIC_LENGTH_OFFSET, ENTRY_OFFSET_OFFSET, ENTRY_PHYS_LENGTH_OFFSET,
    ENTRY_RESERVED_OFFSET, META_FILE_LEN, TABLE_OFFSET,
};
