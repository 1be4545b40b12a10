use crate::error::SamplerError;
use crate::mode::Mode;
use crate::permutation::Permutation;
use crate::random::{hash, uniform_below};

/// Domain-separation tags, so that the Iid and Shuffle streams of one seed
/// are unrelated to each other.
const IID_STREAM: u64 = 0x6969_6400_0000_0001;
const SHUFFLE_STREAM: u64 = 0x7368_7566_0000_0002;

/// Endless, step-based index generator over the index space `0..length`.
///
/// The batch of a step is a pure function of
/// `(length, batch_size, mode, seed, step)`; the only state is the cursor
/// used by [`Sampler::next_batch`] / [`Iterator::next`], which [`Sampler::seek`]
/// can set freely. Resuming training at step `s` is therefore just `seek(s)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampler {
    length: u64,
    batch_size: usize,
    mode: Mode,
    seed: u64,
    step: u64,
}

impl Sampler {
    /// A sampler positioned at step 0.
    pub fn new(
        length: u64,
        batch_size: usize,
        mode: Mode,
        seed: u64,
    ) -> Result<Sampler, SamplerError> {
        if length == 0 {
            return Err(SamplerError::ZeroLength);
        }
        if batch_size == 0 {
            return Err(SamplerError::ZeroBatchSize);
        }
        Ok(Sampler {
            length,
            batch_size,
            mode,
            seed,
            step: 0,
        })
    }

    /// Size of the index space: every produced index is `< length`.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Number of indices per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The sampling mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The seed (ignored by [`Mode::Sequential`]).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The step that the next call to [`Sampler::next_batch`] will produce.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Moves the cursor so that the next batch produced is that of `step`.
    pub fn seek(&mut self, step: u64) {
        self.step = step;
    }

    /// The batch of the current step; then advances to the next step.
    ///
    /// Endless: after step `u64::MAX` the cursor wraps around to step 0.
    pub fn next_batch(&mut self) -> Vec<u64> {
        let batch = self.batch(self.step);
        self.step = self.step.wrapping_add(1);
        batch
    }

    /// The batch of `step`, independent of the cursor.
    pub fn batch(&self, step: u64) -> Vec<u64> {
        let mut out = vec![0; self.batch_size];
        self.batch_into(step, &mut out);
        out
    }

    /// Writes the batch of `step` into `out`, independent of the cursor.
    ///
    /// # Panics
    /// If `out.len() != batch_size`.
    pub fn batch_into(&self, step: u64, out: &mut [u64]) {
        assert_eq!(
            out.len(),
            self.batch_size,
            "output buffer length must equal the batch size"
        );
        match self.mode {
            Mode::Sequential => self.sequential_into(step, out),
            Mode::Iid => self.iid_into(step, out),
            Mode::Shuffle => self.shuffle_into(step, out),
        }
    }

    /// Global position of the first index of `step`, as (epoch, offset)
    /// with `step * batch_size == epoch * length + offset`. Computed in
    /// `u128`, which cannot overflow: `u64::MAX * u64::MAX < u128::MAX`.
    fn start_of(&self, step: u64) -> (u128, u64) {
        let position = u128::from(step) * self.batch_size as u128;
        let length = u128::from(self.length);
        (position / length, (position % length) as u64)
    }

    fn sequential_into(&self, step: u64, out: &mut [u64]) {
        let (_, mut index) = self.start_of(step);
        for slot in out {
            *slot = index;
            index += 1;
            if index == self.length {
                index = 0;
            }
        }
    }

    fn iid_into(&self, step: u64, out: &mut [u64]) {
        // Keyed by (step, position within the batch), so every draw has its
        // own coordinates and needs no generator state.
        for (position, slot) in (0u64..).zip(out) {
            *slot = uniform_below(self.length, |attempt| {
                hash(self.seed, &[IID_STREAM, step, position, attempt])
            });
        }
    }

    fn shuffle_into(&self, step: u64, out: &mut [u64]) {
        // A batch may straddle epochs (or span many, when batch_size >
        // length); walk the positions and rebuild the permutation whenever an
        // epoch boundary is crossed.
        let (mut epoch, mut offset) = self.start_of(step);
        let mut permutation = self.epoch_permutation(epoch);
        for slot in out {
            *slot = permutation.apply(offset);
            offset += 1;
            if offset == self.length {
                offset = 0;
                epoch += 1;
                permutation = self.epoch_permutation(epoch);
            }
        }
    }

    /// The permutation used for epoch `epoch`: a fresh, independent order
    /// each epoch, derived only from (seed, epoch).
    fn epoch_permutation(&self, epoch: u128) -> Permutation {
        let key = hash(
            self.seed,
            &[SHUFFLE_STREAM, epoch as u64, (epoch >> 64) as u64],
        );
        Permutation::new(self.length, key)
    }
}

/// Endless: `next()` never returns `None`.
impl Iterator for Sampler {
    type Item = Vec<u64>;

    fn next(&mut self) -> Option<Vec<u64>> {
        Some(self.next_batch())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX, None)
    }
}

impl std::iter::FusedIterator for Sampler {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_configurations() {
        assert_eq!(
            Sampler::new(0, 4, Mode::Shuffle, 0),
            Err(SamplerError::ZeroLength)
        );
        assert_eq!(
            Sampler::new(10, 0, Mode::Iid, 0),
            Err(SamplerError::ZeroBatchSize)
        );
    }

    #[test]
    fn start_of_splits_huge_positions_exactly() {
        let sampler = Sampler::new(7, usize::MAX, Mode::Shuffle, 0).unwrap();
        let position = u128::from(u64::MAX) * usize::MAX as u128;
        assert_eq!(
            sampler.start_of(u64::MAX),
            (position / 7, (position % 7) as u64)
        );
    }

    #[test]
    #[should_panic(expected = "batch size")]
    fn batch_into_checks_the_buffer_length() {
        let sampler = Sampler::new(10, 4, Mode::Sequential, 0).unwrap();
        sampler.batch_into(0, &mut [0; 3]);
    }
}
