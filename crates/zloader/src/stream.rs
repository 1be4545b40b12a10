//! A stream: one store read in lockstep with the others of a loader.

use std::sync::Arc;

use zrecord::RecordSource;

/// How the records of a stream are laid out in a gathered buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// Records of exactly this many bytes, record `k` of a batch at byte
    /// `k * stride`; a record of another length is an error
    /// ([`zrecord::Store::gather_exact`]), never read zero-padded.
    Fixed(usize),
    /// Records of any length, packed back to back in batch order; the batch
    /// also carries every record's length ([`crate::Batch::lengths`]).
    Ragged,
    /// Encoded images (JPEG, PNG, WebP), each run through the pipeline on the
    /// worker's thread into a fixed slot: sample `k` at byte
    /// `k * pipeline.sample_len()`. Its random crop and flip come from the
    /// sample's seed ([`zsampler::Sampler::sample_seeds`]), so they do not
    /// depend on the worker or the run. What an image that cannot be
    /// decoded does is the second field's choice.
    Image(Arc<zimage::Pipeline>, BadImages),
}

/// What an image stream does with a record that is not a decodable image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadImages {
    /// Its step fails ([`crate::LoaderError::Image`], naming the record).
    Fail,
    /// Its slot is left blank (every byte zero) and the batch marks it
    /// ([`crate::Batch::decoded`]), so that one bad file among millions
    /// does not stop a training run.
    Blank,
}

/// A store gathered at every step of a loader (or, for a mixture, one
/// store per source). All streams of a loader are indexed by the same
/// sampler indices, so record `i` of every stream belongs to sample `i`
/// (the data and its label).
#[derive(Clone)]
pub struct Stream {
    /// The store (or collection), or a mixture's in source order; shared,
    /// so a loader keeps them open (and free of `delete` and `compact`,
    /// which need them exclusively) for as long as it runs.
    pub stores: Vec<Arc<dyn RecordSource>>,
    /// How its records are laid out in a batch buffer.
    pub layout: Layout,
}

impl Stream {
    /// A stream of fixed-size records of `record_len` bytes.
    pub fn new(store: Arc<dyn RecordSource>, record_len: usize) -> Stream {
        Stream::mixed(vec![store], Layout::Fixed(record_len))
    }

    /// A stream of variable-length records.
    pub fn ragged(store: Arc<dyn RecordSource>) -> Stream {
        Stream::mixed(vec![store], Layout::Ragged)
    }

    /// A stream of a mixture: source `j`'s records in `stores[j]`.
    pub fn mixed(stores: Vec<Arc<dyn RecordSource>>, layout: Layout) -> Stream {
        Stream { stores, layout }
    }

    /// For each source, the first source whose store is the same handle:
    /// sources that share a store are gathered by one call, which pays the
    /// store's per-call checks once.
    pub(crate) fn first_sharing(&self) -> Vec<usize> {
        (0..self.stores.len())
            .map(|j| {
                (0..j)
                    .find(|&i| Arc::ptr_eq(&self.stores[i], &self.stores[j]))
                    .unwrap_or(j)
            })
            .collect()
    }
}
