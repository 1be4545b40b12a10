//! Finite passes and per-sample seeds, against a model: every index once
//! per epoch over all shards, the same steps on every shard, the shards'
//! parts concatenating to the unsharded batch, and seeds that do not depend
//! on the shard count.

use proptest::prelude::*;
use zsampler::{LastBatch, Mode, Sampler, SamplerError};

fn pass(length: u64, batch: usize, mode: Mode, epochs: u64, last: LastBatch) -> Sampler {
    Sampler::new(length, batch, mode, 7)
        .unwrap()
        .with_epochs(epochs, last)
        .unwrap()
}

/// Every valid index of every step of every shard, step by step.
fn shards_of(global: &Sampler, count: u64) -> Vec<Vec<Vec<u64>>> {
    let steps = global.steps().unwrap();
    (0..count)
        .map(|i| {
            let shard = global.clone().with_shard(i, count).unwrap();
            assert_eq!(
                shard.steps(),
                Some(steps),
                "every shard runs the same steps"
            );
            (0..steps)
                .map(|step| {
                    let batch = shard.batch(step);
                    batch[..shard.valid_len(step)].to_vec()
                })
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_pass_covers_every_index_once_per_epoch_on_any_shard_count(
        length in 1u64..60,
        per_shard in 1usize..9,
        count in prop::sample::select(vec![1u64, 2, 3, 5, 7, 8]),
        epochs in 1u64..4,
        shuffle in any::<bool>(),
        pad in any::<bool>(),
    ) {
        let batch = per_shard * count as usize;
        let mode = if shuffle { Mode::Shuffle } else { Mode::Sequential };
        let last = if pad { LastBatch::Pad } else { LastBatch::Partial };
        let global = pass(length, batch, mode, epochs, last);
        let steps = global.steps().unwrap();
        prop_assert_eq!(steps, (epochs * length).div_ceil(batch as u64));

        let shards = shards_of(&global, count);
        let mut seen = vec![0u64; length as usize];
        for step in 0..steps as usize {
            let joined: Vec<u64> = shards.iter().flat_map(|s| s[step].clone()).collect();
            let whole = global.batch(step as u64);
            prop_assert_eq!(&joined[..], &whole[..global.valid_len(step as u64)]);
            for index in joined {
                seen[index as usize] += 1;
            }
        }
        prop_assert!(seen.iter().all(|&n| n == epochs), "{:?}", seen);

        // The epochs walk the same order as the endless sampler's.
        let endless = Sampler::new(length, batch, mode, 7).unwrap();
        for step in 0..steps.saturating_sub(1) {
            prop_assert_eq!(global.batch(step), endless.batch(step));
        }
    }

    #[test]
    fn seeds_follow_the_sample_not_the_shard(
        length in 1u64..40,
        per_shard in 1usize..6,
        count in prop::sample::select(vec![1u64, 2, 3, 4]),
        step in 0u64..12,
        finite in any::<bool>(),
    ) {
        let batch = per_shard * count as usize;
        let mut global = Sampler::new(length, batch, Mode::Shuffle, 3).unwrap();
        if finite {
            global = global.with_epochs(1, LastBatch::Partial).unwrap();
        }
        let joined: Vec<u64> = (0..count)
            .flat_map(|i| global.clone().with_shard(i, count).unwrap().sample_seeds(step))
            .collect();
        prop_assert_eq!(joined, global.sample_seeds(step));
        prop_assert_eq!(global.sample_seeds(step).len(), global.batch(step).len());
    }
}

#[test]
fn the_last_batch_is_short_or_padded_with_the_last_index() {
    let short = pass(10, 4, Mode::Sequential, 1, LastBatch::Partial);
    assert_eq!(short.batch(2), [8, 9]);
    let padded = pass(10, 4, Mode::Sequential, 1, LastBatch::Pad);
    assert_eq!(padded.batch(2), [8, 9, 9, 9]);
    assert_eq!((padded.valid_len(2), padded.batch_len(2)), (2, 4));
    // Sharded in two: each shard gets one of the two.
    let second = padded.clone().with_shard(1, 2).unwrap();
    assert_eq!((second.batch(2), second.valid_len(2)), (vec![9, 9], 1));
    // With four shards the last two get nothing but padding.
    let fourth = short.clone().with_shard(3, 4).unwrap();
    assert_eq!((fourth.batch(2), fourth.valid_len(2)), (vec![], 0));
}

#[test]
fn iterating_a_pass_ends() {
    let mut sampler = pass(10, 4, Mode::Shuffle, 2, LastBatch::Partial);
    assert_eq!(sampler.size_hint(), (5, Some(5)));
    let batches: Vec<_> = (&mut sampler).collect();
    assert_eq!(batches.len(), 5);
    let mut all: Vec<u64> = batches.concat();
    all.sort_unstable();
    let twice: Vec<u64> = (0..10).flat_map(|i| [i, i]).collect();
    assert_eq!(all, twice);
    assert_eq!(sampler.next(), None);
}

#[test]
fn a_pass_is_refused_without_epochs_or_for_iid() {
    let sampler = Sampler::new(10, 4, Mode::Iid, 0).unwrap();
    assert_eq!(
        sampler.with_epochs(1, LastBatch::Pad),
        Err(SamplerError::IidHasNoEpochs)
    );
    let sampler = Sampler::new(10, 4, Mode::Shuffle, 0).unwrap();
    assert_eq!(
        sampler.clone().with_epochs(0, LastBatch::Pad),
        Err(SamplerError::ZeroEpochs)
    );
    assert_eq!(
        Sampler::new(u64::MAX, 1, Mode::Shuffle, 0)
            .unwrap()
            .with_epochs(3, LastBatch::Pad),
        Err(SamplerError::TooManySteps { epochs: 3 })
    );
}
