//! What a loader gathers a stream from: one store, or a collection of
//! stores read as one (`collection/`). Both read the same ways.

use std::path::Path;

use crate::collection::Collection;
use crate::error::Result;
use crate::store::Store;

/// Records gathered by index, from many threads at once.
pub trait RecordSource: Send + Sync {
    /// Where the records are: the store's or the collection's folder.
    fn path(&self) -> &Path;
    /// How many records there are to read.
    fn count(&self) -> u64;
    /// The logical length of each record of `idxs`.
    fn lengths(&self, idxs: &[u64]) -> Result<Vec<u32>>;
    /// Record `k` at `dst[k * stride..]`, the rest of its slot zeroed
    /// ([`Store::gather`]).
    fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()>;
    /// Records of exactly `stride` bytes, record `k` at `dst[k * stride..]`
    /// ([`Store::gather_exact`]).
    fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()>;
    /// As `gather_exact`, record `k` at slot `slots[k]` (increasing)
    /// ([`Store::gather_exact_at`]).
    fn gather_exact_at(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        stride: usize,
        slots: &[usize],
    ) -> Result<()>;
    /// Record `k` at `dst[offsets[k]..]` ([`Store::gather_ragged`]).
    fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()>;
}

/// Each method is the type's own method of the same name.
macro_rules! record_source {
    ($type:ty) => {
        impl RecordSource for $type {
            fn path(&self) -> &Path {
                <$type>::path(self)
            }
            fn count(&self) -> u64 {
                <$type>::len(self) as u64
            }
            fn lengths(&self, idxs: &[u64]) -> Result<Vec<u32>> {
                <$type>::lengths(self, idxs)
            }
            fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
                <$type>::gather(self, idxs, dst, stride)
            }
            fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
                <$type>::gather_exact(self, idxs, dst, stride)
            }
            fn gather_exact_at(
                &self,
                idxs: &[u64],
                dst: &mut [u8],
                stride: usize,
                slots: &[usize],
            ) -> Result<()> {
                <$type>::gather_exact_at(self, idxs, dst, stride, slots)
            }
            fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
                <$type>::gather_ragged(self, idxs, dst, offsets)
            }
        }
    };
}

record_source!(Store);
record_source!(Collection);
