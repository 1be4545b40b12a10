//! The format's size limits (docs/FORMAT.md, "Limits").
//!
//! The three limits are tied together: the store can never run out of chunk
//! space before it runs out of record slots, which is what lets `meta.zr` be
//! sized once, statically, at its maximum.

/// Largest logical (uncompressed) size of one record: 1 MiB
/// (docs/FORMAT.md, "Limits").
pub const MAX_RECORD_LEN: usize = 1 << 20;

/// Most chunk files a store may have: `0.zr ..= 4095.zr` (docs/FORMAT.md,
/// "Limits").
pub const MAX_CHUNKS: usize = 1 << 12;

/// Capacity of one chunk file in bytes (offsets within a chunk are `u32`;
/// docs/FORMAT.md, "Limits").
pub const CHUNK_CAPACITY: u64 = 1 << 32;

/// Most records a store may hold; the record table has exactly this many
/// slots (docs/FORMAT.md, "Limits").
pub const MAX_RECORDS: usize = 1 << 24;

const _: () = assert!(
    MAX_CHUNKS as u64 * CHUNK_CAPACITY / MAX_RECORD_LEN as u64 == MAX_RECORDS as u64,
    "chunk space and record slots must run out together"
);
const _: () = assert!(MAX_CHUNKS - 1 <= u16::MAX as usize, "chunk ids are u16");
const _: () = assert!(MAX_RECORDS <= u32::MAX as usize, "the header length is u32");
const _: () = assert!(
    MAX_RECORD_LEN <= u32::MAX as usize,
    "record lengths are u32"
);
