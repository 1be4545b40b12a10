//! What a step produces, and how a worker produces it.

use std::sync::Arc;

use zrecord::{BatchBuffer, Recycler};

use crate::picker::Picker;

use crate::error::{LoaderError, Result};
use crate::stream::{BadImages, Layout, Stream};

/// The gathered records of one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The sampler step this batch belongs to.
    pub step: u64,
    /// The sampler's indices for the step (this shard's part of them), in
    /// batch order; for a mixture, each in its source.
    pub indices: Vec<u64>,
    /// For a mixture, each sample's source (the store of each stream it was
    /// read from); `None` otherwise.
    pub sources: Option<Vec<u32>>,
    /// How many of `indices` lead the batch as samples of the pass: all of
    /// them, except in the padded last step of a finite pass, whose other
    /// indices repeat its last sample
    /// ([`zsampler::Sampler::valid_len`]).
    pub valid: usize,
    /// One buffer per stream, in stream order. A [`Layout::Fixed`]`(len)`
    /// stream has record `k` at bytes `k * len ..`, `indices.len() * len`
    /// bytes in all (a [`Layout::Image`] stream likewise, its pipeline's
    /// sample length a slot); a [`Layout::Ragged`] stream has its records
    /// back to back, record `k` at the sum of the lengths before it.
    pub buffers: Vec<BatchBuffer>,
    /// One entry per stream: `None` for a fixed stream, the byte length of
    /// every record of the batch for a ragged one.
    pub lengths: Vec<Option<Vec<u32>>>,
    /// One entry per stream: for an image stream that blanks bad images
    /// ([`BadImages::Blank`]), whether each slot holds its decoded image;
    /// `None` for every other stream.
    pub decoded: Vec<Option<Vec<bool>>>,
}

/// What the workers share: the streams to read, the sampler or mixture that
/// says what to read, and the recycler of their batch memory. Immutable, so
/// workers need no lock to use it.
pub(crate) struct Work {
    pub(crate) streams: Vec<Stream>,
    pub(crate) picker: Picker,
    /// Memory of fixed-size batches; ragged ones, whose size varies from
    /// step to step, use the shared recycler.
    pub(crate) recycler: Arc<Recycler>,
    /// Per stream, the store that reads each mixture source
    /// ([`Stream::first_sharing`]).
    pub(crate) store_of: Vec<Vec<usize>>,
}

impl Work {
    /// Gathers step `step` of every stream into batch buffers.
    pub(crate) fn gather(self: &Arc<Self>, step: u64) -> Result<Batch> {
        let (indices, sources) = self.picker.pick(step);
        // One seed per index (`sample_seeds` is as long as `pick`'s batch,
        // padding included), made once for all image streams of the step.
        let seeds = std::cell::OnceCell::new();
        let mut buffers = Vec::with_capacity(self.streams.len());
        let mut lengths = Vec::with_capacity(self.streams.len());
        let mut decoded = Vec::with_capacity(self.streams.len());
        for (stream_index, stream) in self.streams.iter().enumerate() {
            let parts = sources
                .as_deref()
                .map(|s| by_store(s, &indices, &self.store_of[stream_index]));
            let gather_error = |source| LoaderError::Gather {
                step,
                stream: stream_index,
                source,
            };
            // A mixture's stores, each with the slots and indices of the
            // sources it reads.
            let mixed = parts.as_ref().map(|parts| {
                stream
                    .stores
                    .iter()
                    .zip(parts)
                    .filter(|(_, (slots, _))| !slots.is_empty())
            });
            match &stream.layout {
                &Layout::Fixed(record_len) => {
                    let len = indices.len() * record_len;
                    let mut buffer = BatchBuffer::new_in(&self.recycler, len)
                        .ok_or(LoaderError::OutOfMemory { step, bytes: len })?;
                    match mixed {
                        None => stream.stores[0]
                            .gather_exact(&indices, &mut buffer, record_len)
                            .map_err(gather_error)?,
                        Some(mixed) => {
                            for (store, (slots, part)) in mixed {
                                store
                                    .gather_exact_at(part, &mut buffer, record_len, slots)
                                    .map_err(gather_error)?;
                            }
                        }
                    }
                    buffers.push(buffer);
                    lengths.push(None);
                    decoded.push(None);
                }
                Layout::Ragged => {
                    let (buffer, record_lengths) =
                        gather_ragged(stream, &indices, mixed, step, gather_error)?;
                    buffers.push(buffer);
                    lengths.push(Some(record_lengths));
                    decoded.push(None);
                }
                Layout::Image(pipeline, bad) => {
                    let (encoded, record_lengths) =
                        gather_ragged(stream, &indices, mixed, step, gather_error)?;
                    let seeds = seeds.get_or_init(|| self.picker.sample_seeds(step));
                    let sample_len = pipeline.sample_len();
                    let len = indices.len() * sample_len;
                    let mut buffer = BatchBuffer::new_in(&self.recycler, len)
                        .ok_or(LoaderError::OutOfMemory { step, bytes: len })?;
                    let mut ok = vec![true; indices.len()];
                    SCRATCH.with_borrow_mut(|scratch| {
                        let mut at = 0usize;
                        let slots = buffer.chunks_exact_mut(sample_len);
                        for (k, (slot, &record_len)) in slots.zip(&record_lengths).enumerate() {
                            let image = &encoded[at..at + record_len as usize];
                            at += record_len as usize;
                            match pipeline.run(image, seeds[k], slot, scratch) {
                                Ok(()) => {}
                                Err(_) if *bad == BadImages::Blank => {
                                    slot.fill(0);
                                    ok[k] = false;
                                }
                                Err(source) => {
                                    return Err(LoaderError::Image {
                                        step,
                                        stream: stream_index,
                                        index: indices[k],
                                        source,
                                    })
                                }
                            }
                        }
                        Ok(())
                    })?;
                    buffers.push(buffer);
                    lengths.push(None);
                    decoded.push((*bad == BadImages::Blank).then_some(ok));
                }
            }
        }
        Ok(Batch {
            step,
            valid: self.picker.valid_len(step).min(indices.len()),
            indices,
            sources,
            buffers,
            lengths,
            decoded,
        })
    }
}

thread_local! {
    /// Each worker's decoding memory for image streams, kept from step to
    /// step.
    static SCRATCH: std::cell::RefCell<zimage::Scratch> = Default::default();
}

/// The records of `indices` back to back (from a mixture's stores, each
/// with its slots, when `mixed`), and each one's length; a store's error
/// becomes `gather_error`'s.
fn gather_ragged<'a>(
    stream: &Stream,
    indices: &[u64],
    mixed: Option<
        impl Iterator<
                Item = (
                    &'a Arc<dyn zrecord::RecordSource>,
                    &'a (Vec<usize>, Vec<u64>),
                ),
            > + Clone,
    >,
    step: u64,
    gather_error: impl Fn(zrecord::Error) -> LoaderError,
) -> Result<(BatchBuffer, Vec<u32>)> {
    let record_lengths = match mixed.clone() {
        None => stream.stores[0].lengths(indices).map_err(&gather_error)?,
        Some(mixed) => {
            let mut all = vec![0u32; indices.len()];
            for (store, (slots, part)) in mixed {
                let found = store.lengths(part).map_err(&gather_error)?;
                for (&slot, len) in slots.iter().zip(found) {
                    all[slot] = len;
                }
            }
            all
        }
    };
    let mut offsets = Vec::with_capacity(record_lengths.len());
    let mut total = 0u64;
    for &len in &record_lengths {
        offsets.push(total);
        total += u64::from(len);
    }
    // At most 2^24 records of at most 1 GiB each: 2^54 bytes, no overflow
    // of the u64 sum (the allocation below refuses what memory cannot hold).
    let bytes = total as usize;
    let mut buffer = BatchBuffer::new(bytes).ok_or(LoaderError::OutOfMemory { step, bytes })?;
    match mixed {
        None => stream.stores[0]
            .gather_ragged(indices, &mut buffer, &offsets)
            .map_err(&gather_error)?,
        Some(mixed) => {
            for (store, (slots, part)) in mixed {
                let at: Vec<u64> = slots.iter().map(|&s| offsets[s]).collect();
                store
                    .gather_ragged(part, &mut buffer, &at)
                    .map_err(&gather_error)?;
            }
        }
    }
    Ok((buffer, record_lengths))
}

/// A mixture's batch split by store: per store of the stream (`store_of`
/// gives each source's), the batch slots its samples fill (increasing) and
/// their indices in it.
fn by_store(sources: &[u32], indices: &[u64], store_of: &[usize]) -> Vec<(Vec<usize>, Vec<u64>)> {
    let mut parts = vec![(Vec::new(), Vec::new()); store_of.len()];
    for (slot, (&source, &index)) in sources.iter().zip(indices).enumerate() {
        let part = &mut parts[store_of[source as usize]];
        part.0.push(slot);
        part.1.push(index);
    }
    parts
}
