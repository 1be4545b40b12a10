//! Finite passes: `epochs` times over the index space, every index once per
//! epoch, then the end.
//!
//! A pass covers the positions `0..epochs * length` of the sampler's
//! position stream (the same positions an endless sampler walks), cut into
//! global batches of `batch_size` positions. Every step but the last is a
//! whole batch, split into equal shards as usual. The last step holds the
//! `r` positions left over (`1..=batch_size`), split as evenly as the shard
//! count allows: shard `i` of `m` gets `r / m` of them, one more when
//! `i < r % m`, in order, so the shards' parts still concatenate to the
//! global batch and every shard runs the same number of steps.

/// What the last, short batch of a finite pass looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LastBatch {
    /// Only the positions that belong to the pass: the batch is shorter.
    Partial,
    /// Full length: the positions past the pass repeat its last index, and
    /// [`Sampler::valid_len`](crate::Sampler::valid_len) says how many lead
    /// the batch.
    Pad,
}

/// A pass of `epochs` epochs over `length` indices in batches of
/// `batch_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FinitePass {
    pub(crate) epochs: u64,
    /// Positions in the pass: `epochs * length`.
    pub(crate) end: u128,
    /// Steps in the pass: `ceil(end / batch_size)`.
    pub(crate) steps: u64,
    pub(crate) last: LastBatch,
}

impl FinitePass {
    /// The pass, or `None` when its step count does not fit in a `u64`.
    pub(crate) fn new(
        epochs: u64,
        length: u64,
        batch_size: usize,
        last: LastBatch,
    ) -> Option<FinitePass> {
        let end = u128::from(epochs) * u128::from(length);
        let steps = u64::try_from(end.div_ceil(batch_size as u128)).ok()?;
        Some(FinitePass {
            epochs,
            end,
            steps,
            last,
        })
    }

    /// Shard `index` of `count`'s positions at `step`: the first position and
    /// how many belong to the pass. `local` is `batch_size / count`.
    pub(crate) fn span(
        &self,
        step: u64,
        batch_size: usize,
        index: u64,
        count: u64,
        local: usize,
    ) -> (u128, usize) {
        let first = u128::from(step) * batch_size as u128;
        if first >= self.end {
            // Past the end: where the shard's positions would start.
            return (first + u128::from(index) * local as u128, 0);
        }
        let left = self.end - first;
        if left >= batch_size as u128 {
            return (first + u128::from(index) * local as u128, local);
        }
        // The last step: `left` positions, shared out evenly.
        let (each, extra) = (left / u128::from(count), left % u128::from(count));
        let index = u128::from(index);
        let start = first + index * each + index.min(extra);
        let len = each + u128::from(index < extra);
        (start, len as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_step_is_shared_out_evenly_and_in_order() {
        // 2 epochs of 7 in batches of 4: 14 positions, steps 0..4, the last
        // holding positions 12 and 13.
        let pass = FinitePass::new(2, 7, 4, LastBatch::Partial).unwrap();
        assert_eq!(pass.steps, 4);
        assert_eq!(pass.span(2, 4, 1, 2, 2), (10, 2));
        let shares: Vec<_> = (0..4).map(|i| pass.span(3, 4, i, 4, 1)).collect();
        assert_eq!(shares, [(12, 1), (13, 1), (14, 0), (14, 0)]);
        assert_eq!(pass.span(4, 4, 1, 2, 2), (18, 0), "past the end: nothing");
    }

    #[test]
    fn a_pass_too_long_for_u64_steps_is_refused() {
        assert!(FinitePass::new(u64::MAX, u64::MAX, 1, LastBatch::Pad).is_none());
        let pass = FinitePass::new(u64::MAX, 2, 2, LastBatch::Pad).unwrap();
        assert_eq!(pass.steps, u64::MAX);
    }
}
