//! What a step produces, and how a worker produces it.

use std::sync::Arc;

use zrecord::{BatchBuffer, Recycler};
use zsampler::Sampler;

use crate::error::{LoaderError, Result};
use crate::stream::{Layout, Stream};

/// The gathered records of one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The sampler step this batch belongs to.
    pub step: u64,
    /// The sampler's indices for the step (this shard's part of them), in
    /// batch order.
    pub indices: Vec<u64>,
    /// How many of `indices` lead the batch as samples of the pass: all of
    /// them, except in the padded last step of a finite pass, whose other
    /// indices repeat its last sample
    /// ([`zsampler::Sampler::valid_len`]).
    pub valid: usize,
    /// One buffer per stream, in stream order. A [`Layout::Fixed`]`(len)`
    /// stream has record `k` at bytes `k * len ..`, `indices.len() * len`
    /// bytes in all; a [`Layout::Ragged`] stream has its records back to
    /// back, record `k` at the sum of the lengths before it.
    pub buffers: Vec<BatchBuffer>,
    /// One entry per stream: `None` for a fixed stream, the byte length of
    /// every record of the batch for a ragged one.
    pub lengths: Vec<Option<Vec<u32>>>,
}

/// What the workers share: the streams to read, the sampler that says
/// what to read, and the recycler of their batch memory. Immutable, so
/// workers need no lock to use it.
pub(crate) struct Work {
    pub(crate) streams: Vec<Stream>,
    pub(crate) sampler: Sampler,
    /// Memory of fixed-size batches; ragged ones, whose size varies from
    /// step to step, use the shared recycler.
    pub(crate) recycler: Arc<Recycler>,
}

impl Work {
    /// Gathers step `step` of every stream into batch buffers.
    pub(crate) fn gather(self: &Arc<Self>, step: u64) -> Result<Batch> {
        let indices = self.sampler.batch(step);
        let mut buffers = Vec::with_capacity(self.streams.len());
        let mut lengths = Vec::with_capacity(self.streams.len());
        for (stream_index, stream) in self.streams.iter().enumerate() {
            let gather_error = |source| LoaderError::Gather {
                step,
                stream: stream_index,
                source,
            };
            match stream.layout {
                Layout::Fixed(record_len) => {
                    let len = indices.len() * record_len;
                    let mut buffer = BatchBuffer::new_in(&self.recycler, len)
                        .ok_or(LoaderError::OutOfMemory { step, bytes: len })?;
                    stream
                        .store
                        .gather_exact(&indices, &mut buffer, record_len)
                        .map_err(gather_error)?;
                    buffers.push(buffer);
                    lengths.push(None);
                }
                Layout::Ragged => {
                    let record_lengths = stream.store.lengths(&indices).map_err(gather_error)?;
                    let mut offsets = Vec::with_capacity(record_lengths.len());
                    let mut total = 0u64;
                    for &len in &record_lengths {
                        offsets.push(total);
                        total += u64::from(len);
                    }
                    // At most 2^24 records of at most 1 MiB: no overflow.
                    let bytes = total as usize;
                    let mut buffer =
                        BatchBuffer::new(bytes).ok_or(LoaderError::OutOfMemory { step, bytes })?;
                    stream
                        .store
                        .gather_ragged(&indices, &mut buffer, &offsets)
                        .map_err(gather_error)?;
                    buffers.push(buffer);
                    lengths.push(Some(record_lengths));
                }
            }
        }
        Ok(Batch {
            step,
            valid: self.sampler.valid_len(step).min(indices.len()),
            indices,
            buffers,
            lengths,
        })
    }
}
