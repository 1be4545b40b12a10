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
/// `(length, batch_size, mode, seed, shard, step)`; the only state is the
/// cursor used by [`Sampler::next_batch`] / [`Iterator::next`], which
/// [`Sampler::seek`] can set freely. Resuming training at step `s` is
/// therefore just `seek(s)`.
///
/// # Shards
/// `batch_size` is the *global* batch size. A sampler sharded with
/// [`Sampler::with_shard`]`(index, count)` produces only its part of every
/// global batch: the contiguous block of positions
/// `index * batch_size / count .. (index + 1) * batch_size / count`. The
/// `count` shards of a step are disjoint and together are exactly the
/// unsharded batch of that step, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampler {
    length: u64,
    batch_size: usize,
    mode: Mode,
    seed: u64,
    shard_index: u64,
    shard_count: u64,
    step: u64,
}

impl Sampler {
    /// An unsharded sampler positioned at step 0.
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
            shard_index: 0,
            shard_count: 1,
            step: 0,
        })
    }

    /// This sampler restricted to shard `index` of `count`: each batch is
    /// the `index`-th of `count` equal, contiguous parts of the global
    /// batch. `with_shard(0, 1)` is the unsharded sampler.
    ///
    /// ```
    /// use zsampler::{Mode, Sampler};
    ///
    /// let global = Sampler::new(100, 8, Mode::Shuffle, 3).unwrap();
    /// let parts: Vec<u64> = (0..4)
    ///     .flat_map(|i| global.clone().with_shard(i, 4).unwrap().batch(5))
    ///     .collect();
    /// assert_eq!(parts, global.batch(5));
    /// ```
    pub fn with_shard(self, index: u64, count: u64) -> Result<Sampler, SamplerError> {
        if count == 0 {
            return Err(SamplerError::ZeroShardCount);
        }
        if index >= count {
            return Err(SamplerError::ShardIndexOutOfRange { index, count });
        }
        if self.batch_size as u64 % count != 0 {
            return Err(SamplerError::BatchNotDivisible {
                batch_size: self.batch_size,
                count,
            });
        }
        Ok(Sampler {
            shard_index: index,
            shard_count: count,
            ..self
        })
    }

    /// Size of the index space: every produced index is `< length`.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The global batch size: indices per step over all shards.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Indices per batch of this shard (`batch_size / shard_count`): the
    /// length of every batch this sampler produces.
    pub fn local_batch_size(&self) -> usize {
        self.batch_size / self.shard_count as usize
    }

    /// This sampler's shard, `0..shard_count` (0 when unsharded).
    pub fn shard_index(&self) -> u64 {
        self.shard_index
    }

    /// How many shards split each global batch (1 when unsharded).
    pub fn shard_count(&self) -> u64 {
        self.shard_count
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
        let mut out = vec![0; self.local_batch_size()];
        self.batch_into(step, &mut out);
        out
    }

    /// Writes the batch of `step` into `out`, independent of the cursor.
    ///
    /// # Panics
    /// If `out.len() != local_batch_size()`.
    pub fn batch_into(&self, step: u64, out: &mut [u64]) {
        assert_eq!(
            out.len(),
            self.local_batch_size(),
            "output buffer length must equal the (local) batch size"
        );
        match self.mode {
            Mode::Sequential => self.sequential_into(step, out),
            Mode::Iid => self.iid_into(step, out),
            Mode::Shuffle => self.shuffle_into(step, out),
        }
    }

    /// Position of this shard's first index of `step` within the global
    /// batch.
    fn first_in_batch(&self) -> u64 {
        self.shard_index * self.local_batch_size() as u64
    }

    /// Global position of this shard's first index of `step`, as
    /// (epoch, offset) with
    /// `step * batch_size + first_in_batch == epoch * length + offset`.
    /// Computed in `u128`, which cannot overflow:
    /// `u64::MAX * u64::MAX + u64::MAX < u128::MAX`.
    fn start_of(&self, step: u64) -> (u128, u64) {
        let position =
            u128::from(step) * self.batch_size as u128 + u128::from(self.first_in_batch());
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
        // Keyed by (step, position within the global batch), so every draw
        // has its own coordinates and needs no generator state, and a shard
        // draws exactly its part of the global batch.
        for (position, slot) in (self.first_in_batch()..).zip(out) {
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
    fn shard_arguments_are_checked() {
        let s = Sampler::new(10, 6, Mode::Iid, 0).unwrap();
        assert_eq!(
            s.clone().with_shard(0, 0),
            Err(SamplerError::ZeroShardCount)
        );
        assert_eq!(
            s.clone().with_shard(3, 3).unwrap_err(),
            SamplerError::ShardIndexOutOfRange { index: 3, count: 3 }
        );
        assert_eq!(
            s.clone().with_shard(0, 4).unwrap_err(),
            SamplerError::BatchNotDivisible {
                batch_size: 6,
                count: 4
            }
        );
        let shard = s.with_shard(2, 3).unwrap();
        assert_eq!((shard.batch_size(), shard.local_batch_size()), (6, 2));
        assert_eq!((shard.shard_index(), shard.shard_count()), (2, 3));
        assert_eq!(shard.first_in_batch(), 4);
    }

    #[test]
    #[should_panic(expected = "batch size")]
    fn batch_into_checks_the_buffer_length() {
        let sampler = Sampler::new(10, 4, Mode::Sequential, 0).unwrap();
        sampler.batch_into(0, &mut [0; 3]);
    }
}
