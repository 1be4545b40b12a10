//! The format's size limits (docs/FORMAT.md, "Limits").
//!
//! In a format-1 store the limits are tied together: it can never run out
//! of chunk space before it runs out of record slots, which is what lets
//! `meta.zr` be sized once, statically, at its maximum. A store with bigger
//! records (format 2) can, and then says "store full".

/// Largest logical (uncompressed) size of a record of a format-1 store, the
/// records loaderx 0.5.0 reads: 1 MiB (docs/FORMAT.md, "Limits").
pub const V1_MAX_RECORD_LEN: usize = 1 << 20;

/// Largest logical size of any record: 1 GiB. A store that holds a record
/// over [`V1_MAX_RECORD_LEN`] is format 2 (docs/FORMAT.md, "Limits" and
/// "Versions").
pub const MAX_RECORD_LEN: usize = 1 << 30;

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
    MAX_CHUNKS as u64 * CHUNK_CAPACITY / V1_MAX_RECORD_LEN as u64 == MAX_RECORDS as u64,
    "a format-1 store's chunk space and record slots must run out together"
);
const _: () = assert!(
    (MAX_RECORD_LEN as u64) < CHUNK_CAPACITY,
    "a record never straddles two chunks, so the largest fits in one"
);
const _: () = assert!(MAX_CHUNKS - 1 <= u16::MAX as usize, "chunk ids are u16");
const _: () = assert!(MAX_RECORDS <= u32::MAX as usize, "the header length is u32");
const _: () = assert!(
    MAX_RECORD_LEN <= u32::MAX as usize,
    "record lengths are u32"
);
