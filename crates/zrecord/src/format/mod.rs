//! The on-disk format (docs/FORMAT.md): the header and record table of
//! `meta.zr`, the layout of the checksum sidecar, the size limits and the
//! codec tags. Every byte offset the store reads or writes is a constant
//! defined once here, chained from the one before it.

pub(crate) mod checksums;
pub(crate) mod codec;
pub(crate) mod dictionary;
pub(crate) mod header;
pub(crate) mod limits;
pub(crate) mod record_table;
