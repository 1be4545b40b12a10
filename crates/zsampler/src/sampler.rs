use crate::error::SamplerError;
use crate::finite_pass::{FinitePass, LastBatch};
use crate::mode::Mode;
use crate::permutation::Permutation;
use crate::random::{div_rem, hash, sample_seeds, uniform_below};

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
///
/// # Finite passes
/// [`Sampler::with_epochs`] ends the sampler after `epochs` epochs: see
/// [`crate::finite_pass`] for how the last, short step is shared out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampler {
    length: u64,
    batch_size: usize,
    mode: Mode,
    seed: u64,
    shard_index: u64,
    shard_count: u64,
    step: u64,
    pass: Option<FinitePass>,
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
            pass: None,
        })
    }

    /// This sampler made finite: `epochs` epochs over `0..length`, every
    /// index once per epoch, in [`Sampler::steps`] steps; `last` says
    /// whether the last step's batch is shorter or padded. Not for
    /// [`Mode::Iid`], which has no epochs.
    ///
    /// ```
    /// use zsampler::{LastBatch, Mode, Sampler};
    ///
    /// let pass = Sampler::new(10, 4, Mode::Sequential, 0)
    ///     .unwrap()
    ///     .with_epochs(1, LastBatch::Partial)
    ///     .unwrap();
    /// assert_eq!(pass.steps(), Some(3));
    /// assert_eq!(pass.batch(2), [8, 9]);
    /// ```
    pub fn with_epochs(self, epochs: u64, last: LastBatch) -> Result<Sampler, SamplerError> {
        if epochs == 0 {
            return Err(SamplerError::ZeroEpochs);
        }
        if self.mode == Mode::Iid {
            return Err(SamplerError::IidHasNoEpochs);
        }
        let pass = FinitePass::new(epochs, self.length, self.batch_size, last)
            .ok_or(SamplerError::TooManySteps { epochs })?;
        Ok(Sampler {
            pass: Some(pass),
            ..self
        })
    }

    /// The epochs of a finite pass; `None` when endless.
    pub fn epochs(&self) -> Option<u64> {
        self.pass.map(|p| p.epochs)
    }

    /// How a finite pass ends; `None` when endless.
    pub fn last_batch(&self) -> Option<LastBatch> {
        self.pass.map(|p| p.last)
    }

    /// The steps of a finite pass (the same for every shard); `None` when
    /// endless.
    pub fn steps(&self) -> Option<u64> {
        self.pass.map(|p| p.steps)
    }

    /// How many of this shard's indices at `step` belong to the pass: the
    /// local batch size, except at the last step of a finite pass (possibly
    /// 0 there) and after it (0).
    pub fn valid_len(&self, step: u64) -> usize {
        self.span(step).1
    }

    /// The length of [`Sampler::batch`]`(step)`: [`Sampler::valid_len`] with
    /// [`LastBatch::Partial`], else the local batch size.
    pub fn batch_len(&self, step: u64) -> usize {
        match self.pass {
            Some(FinitePass {
                last: LastBatch::Partial,
                ..
            }) => self.valid_len(step),
            _ => self.local_batch_size(),
        }
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
    /// After step `u64::MAX` the cursor wraps around to step 0. Past the end
    /// of a finite pass the batch is empty ([`LastBatch::Partial`]) or all
    /// padding.
    pub fn next_batch(&mut self) -> Vec<u64> {
        let batch = self.batch(self.step);
        self.step = self.step.wrapping_add(1);
        batch
    }

    /// The batch of `step`, independent of the cursor: [`Sampler::batch_len`]
    /// indices.
    pub fn batch(&self, step: u64) -> Vec<u64> {
        let mut out = vec![0; self.local_batch_size()];
        self.batch_into(step, &mut out);
        out.truncate(self.batch_len(step));
        out
    }

    /// Writes the batch of `step` into `out`, independent of the cursor; in
    /// a finite pass the slots past [`Sampler::valid_len`] repeat the pass's
    /// last index.
    ///
    /// # Panics
    /// If `out.len() != local_batch_size()`.
    pub fn batch_into(&self, step: u64, out: &mut [u64]) {
        assert_eq!(
            out.len(),
            self.local_batch_size(),
            "output buffer length must equal the (local) batch size"
        );
        let (start, valid) = self.span(step);
        let (batch, padding) = out.split_at_mut(valid);
        match self.mode {
            Mode::Sequential => self.sequential_into(start, batch),
            Mode::Iid => self.iid_into(step, batch),
            Mode::Shuffle => self.shuffle_into(start, batch),
        }
        if let (Some(pass), false) = (self.pass, padding.is_empty()) {
            let last = self.index_at(pass.end - 1);
            padding.fill(last);
        }
    }

    /// One seed per index of [`Sampler::batch`]`(step)`, for the random
    /// draws of whatever transforms that sample: a hash of (seed, step, the
    /// index's position in the global batch). So a sample's seed is the
    /// same whichever shard, worker or resumed run produces it.
    pub fn sample_seeds(&self, step: u64) -> Vec<u64> {
        let (start, _) = self.span(step);
        let first = (start - u128::from(step) * self.batch_size as u128) as u64;
        sample_seeds(self.seed, step, first, self.batch_len(step))
    }

    /// This shard's positions at `step`: the first, and how many.
    fn span(&self, step: u64) -> (u128, usize) {
        let local = self.local_batch_size();
        match self.pass {
            Some(pass) => pass.span(
                step,
                self.batch_size,
                self.shard_index,
                self.shard_count,
                local,
            ),
            None => {
                let first = u128::from(step) * self.batch_size as u128
                    + u128::from(self.shard_index) * local as u128;
                (first, local)
            }
        }
    }

    /// A global position as (epoch, offset) with
    /// `position == epoch * length + offset`. Positions are computed in
    /// `u128`, which cannot overflow:
    /// `u64::MAX * u64::MAX + u64::MAX < u128::MAX`.
    fn epoch_offset(&self, position: u128) -> (u128, u64) {
        let (epoch, offset) = div_rem(position, u128::from(self.length));
        (epoch, offset as u64)
    }

    /// The index at one position of the sampler's position stream (before
    /// any finite pass or shard is applied).
    pub(crate) fn index_at(&self, position: u128) -> u64 {
        let (epoch, offset) = self.epoch_offset(position);
        match self.mode {
            Mode::Sequential => offset,
            Mode::Shuffle => self.epoch_permutation(epoch).apply(offset),
            Mode::Iid => {
                let batch = self.batch_size as u128;
                let (step, slot) = ((position / batch) as u64, (position % batch) as u64);
                uniform_below(self.length, |attempt| {
                    hash(self.seed, &[IID_STREAM, step, slot, attempt])
                })
            }
        }
    }

    /// The indices at positions `start, start + 1, ...` of the position
    /// stream, as many as `out` holds: a batch that starts at `start`.
    pub(crate) fn positions_into(&self, start: u128, out: &mut [u64]) {
        match self.mode {
            Mode::Sequential => self.sequential_into(start, out),
            Mode::Shuffle => self.shuffle_into(start, out),
            Mode::Iid => {
                for (position, slot) in (start..).zip(out) {
                    *slot = self.index_at(position);
                }
            }
        }
    }

    fn sequential_into(&self, start: u128, out: &mut [u64]) {
        let (_, mut index) = self.epoch_offset(start);
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
        let first = self.shard_index * self.local_batch_size() as u64;
        for (position, slot) in (first..).zip(out) {
            *slot = uniform_below(self.length, |attempt| {
                hash(self.seed, &[IID_STREAM, step, position, attempt])
            });
        }
    }

    fn shuffle_into(&self, start: u128, out: &mut [u64]) {
        // A batch may straddle epochs (or span many, when batch_size >
        // length); walk the positions and rebuild the permutation whenever an
        // epoch boundary is crossed.
        let (mut epoch, mut offset) = self.epoch_offset(start);
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
    pub(crate) fn epoch_permutation(&self, epoch: u128) -> Permutation {
        let key = hash(
            self.seed,
            &[SHUFFLE_STREAM, epoch as u64, (epoch >> 64) as u64],
        );
        Permutation::new(self.length, key)
    }
}

/// Endless, or until the end of a finite pass.
impl Iterator for Sampler {
    type Item = Vec<u64>;

    fn next(&mut self) -> Option<Vec<u64>> {
        match self.steps() {
            Some(steps) if self.step >= steps => None,
            _ => Some(self.next_batch()),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self.steps() {
            None => (usize::MAX, None),
            Some(steps) => {
                let left = usize::try_from(steps.saturating_sub(self.step)).ok();
                (left.unwrap_or(usize::MAX), left)
            }
        }
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
    fn huge_positions_split_exactly() {
        let sampler = Sampler::new(7, usize::MAX, Mode::Shuffle, 0).unwrap();
        let position = u128::from(u64::MAX) * usize::MAX as u128;
        assert_eq!(sampler.span(u64::MAX).0, position);
        assert_eq!(
            sampler.epoch_offset(position),
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
        assert_eq!(shard.span(0), (4, 2));
    }

    #[test]
    #[should_panic(expected = "batch size")]
    fn batch_into_checks_the_buffer_length() {
        let sampler = Sampler::new(10, 4, Mode::Sequential, 0).unwrap();
        sampler.batch_into(0, &mut [0; 3]);
    }
}
