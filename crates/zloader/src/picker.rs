//! What picks a step's indices: a sampler, or a mixture of sources.

use zsampler::{Mixture, Sampler};

/// The index generator a loader walks.
#[derive(Debug, Clone)]
pub enum Picker {
    /// One index space, read from one store per stream.
    Sampler(Sampler),
    /// Several sources, source `j` read from store `j` of every stream.
    Mixture(Mixture),
}

impl Picker {
    /// This shard's indices at `step`, and for a mixture each one's source.
    pub(crate) fn pick(&self, step: u64) -> (Vec<u64>, Option<Vec<u32>>) {
        match self {
            Picker::Sampler(sampler) => (sampler.batch(step), None),
            Picker::Mixture(mixture) => {
                let batch = mixture.batch(step);
                (batch.indices, Some(batch.sources))
            }
        }
    }

    /// Samples per batch of this shard (the most a step holds).
    pub(crate) fn local_batch_size(&self) -> usize {
        match self {
            Picker::Sampler(sampler) => sampler.local_batch_size(),
            Picker::Mixture(mixture) => mixture.local_batch_size(),
        }
    }

    /// How many of `step`'s indices are samples of the run (all but in the
    /// last step of a finite pass).
    pub(crate) fn valid_len(&self, step: u64) -> usize {
        match self {
            Picker::Sampler(sampler) => sampler.valid_len(step),
            Picker::Mixture(mixture) => mixture.local_batch_size(),
        }
    }

    /// One seed per index of `step` (a hash of the seed, the step and the
    /// index's position in the global batch).
    pub(crate) fn sample_seeds(&self, step: u64) -> Vec<u64> {
        match self {
            Picker::Sampler(sampler) => sampler.sample_seeds(step),
            Picker::Mixture(mixture) => mixture.sample_seeds(step),
        }
    }

    /// The steps of a finite pass; `None` when endless.
    pub(crate) fn steps(&self) -> Option<u64> {
        match self {
            Picker::Sampler(sampler) => sampler.steps(),
            Picker::Mixture(_) => None,
        }
    }

    /// The records each stream's store `j` must hold at least.
    pub(crate) fn lengths(&self) -> Vec<u64> {
        match self {
            Picker::Sampler(sampler) => vec![sampler.length()],
            Picker::Mixture(mixture) => mixture.lengths(),
        }
    }
}

impl From<Sampler> for Picker {
    fn from(sampler: Sampler) -> Picker {
        Picker::Sampler(sampler)
    }
}

impl From<Mixture> for Picker {
    fn from(mixture: Mixture) -> Picker {
        Picker::Mixture(mixture)
    }
}
