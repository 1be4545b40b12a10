//! What a step produces, and how a worker produces it.

use std::sync::Arc;

use zsampler::Sampler;

use crate::error::{LoaderError, Result};
use crate::stream::Stream;

/// The gathered records of one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The sampler step this batch belongs to.
    pub step: u64,
    /// The sampler's indices for the step, in batch order.
    pub indices: Vec<u64>,
    /// One buffer per stream, in stream order: record `k` of the batch at
    /// bytes `k * record_len ..`, `indices.len() * record_len` bytes in all.
    pub buffers: Vec<Vec<u8>>,
}

/// What the workers share: the streams to read and the sampler that says
/// what to read. Immutable, so workers need no lock to use it.
pub(crate) struct Work {
    pub(crate) streams: Vec<Stream>,
    pub(crate) sampler: Sampler,
}

impl Work {
    /// Gathers step `step` of every stream into fresh buffers.
    pub(crate) fn gather(self: &Arc<Self>, step: u64) -> Result<Batch> {
        let indices = self.sampler.batch(step);
        let mut buffers = Vec::with_capacity(self.streams.len());
        for (stream_index, stream) in self.streams.iter().enumerate() {
            let len = indices.len() * stream.record_len;
            let mut buffer = zeroed(len).ok_or(LoaderError::OutOfMemory { step, bytes: len })?;
            stream
                .store
                .gather(&indices, &mut buffer, stream.record_len)
                .map_err(|source| LoaderError::Gather {
                    step,
                    stream: stream_index,
                    source,
                })?;
            buffers.push(buffer);
        }
        Ok(Batch {
            step,
            indices,
            buffers,
        })
    }
}

/// A zeroed buffer of `len` bytes, or `None` when the allocator refuses it
/// (where `vec![0; len]` would abort the process). Zeroed memory comes from
/// calloc: fresh pages, no memset.
fn zeroed(len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: `layout` has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of
    // a `[u8; len]`, and all `len` bytes are initialised (zero).
    Some(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn zeroed_buffers_are_zero_and_absurd_ones_are_refused() {
        assert_eq!(super::zeroed(0), Some(vec![]));
        assert_eq!(super::zeroed(5000), Some(vec![0; 5000]));
        assert_eq!(super::zeroed(isize::MAX as usize), None);
    }
}
