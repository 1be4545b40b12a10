//! Behaviour of the public `Sampler` API: examples, purity, seeking, seeds,
//! and extreme step values.

use zsampler::{Mode, Sampler, SamplerError};

const MODES: [Mode; 3] = [Mode::Sequential, Mode::Iid, Mode::Shuffle];

#[test]
fn sequential_is_a_sliding_window_that_wraps() {
    let mut sampler = Sampler::new(10, 4, Mode::Sequential, 0).unwrap();
    let batches: Vec<Vec<u64>> = (&mut sampler).take(6).collect();
    assert_eq!(
        batches,
        [
            [0, 1, 2, 3],
            [4, 5, 6, 7],
            [8, 9, 0, 1],
            [2, 3, 4, 5],
            [6, 7, 8, 9],
            [0, 1, 2, 3],
        ]
    );
    assert_eq!(sampler.step(), 6);
}

#[test]
fn sequential_batch_larger_than_length_wraps_repeatedly() {
    let sampler = Sampler::new(3, 7, Mode::Sequential, 0).unwrap();
    assert_eq!(sampler.batch(0), [0, 1, 2, 0, 1, 2, 0]);
    assert_eq!(sampler.batch(1), [1, 2, 0, 1, 2, 0, 1]);
    let single = Sampler::new(1, 3, Mode::Sequential, 0).unwrap();
    assert_eq!(single.batch(u64::MAX), [0, 0, 0]);
}

#[test]
fn sequential_ignores_the_seed() {
    let a = Sampler::new(10, 4, Mode::Sequential, 1).unwrap();
    let b = Sampler::new(10, 4, Mode::Sequential, 2).unwrap();
    for step in 0..20 {
        assert_eq!(a.batch(step), b.batch(step));
    }
}

#[test]
fn sequential_huge_steps_use_exact_arithmetic() {
    let length = 1_000_003u64;
    let batch_size = 1000usize;
    let sampler = Sampler::new(length, batch_size, Mode::Sequential, 0).unwrap();
    let step = u64::MAX;
    let start = (u128::from(step) * batch_size as u128 % u128::from(length)) as u64;
    let expected: Vec<u64> = (0..batch_size as u64)
        .map(|k| (start + k) % length)
        .collect();
    assert_eq!(sampler.batch(step), expected);
}

#[test]
fn batch_equals_what_next_batch_produced() {
    for mode in MODES {
        for (length, batch_size) in [(1, 1), (10, 4), (97, 13), (5, 12), (1000, 64)] {
            let mut sampler = Sampler::new(length, batch_size, mode, 7).unwrap();
            let produced: Vec<Vec<u64>> = (0..50).map(|_| sampler.next_batch()).collect();
            let fresh = Sampler::new(length, batch_size, mode, 7).unwrap();
            for (step, batch) in (0u64..).zip(&produced) {
                assert_eq!(&fresh.batch(step), batch, "{mode:?} {length} {batch_size}");
                let mut out = vec![u64::MAX; batch_size];
                fresh.batch_into(step, &mut out);
                assert_eq!(&out, batch);
            }
            // Out of order and repeated calls agree as well.
            for step in (0..50u64).rev() {
                assert_eq!(&fresh.batch(step), &produced[step as usize]);
            }
        }
    }
}

#[test]
fn seek_resumes_exactly() {
    for mode in MODES {
        let mut reference = Sampler::new(1234, 100, mode, 99).unwrap();
        let expected: Vec<Vec<u64>> = reference.by_ref().take(40).collect();

        let mut resumed = Sampler::new(1234, 100, mode, 99).unwrap();
        resumed.seek(25);
        assert_eq!(resumed.step(), 25);
        let tail: Vec<Vec<u64>> = resumed.by_ref().take(15).collect();
        assert_eq!(tail, expected[25..]);
        assert_eq!(resumed.step(), 40);

        // Seeking backwards replays history.
        resumed.seek(3);
        assert_eq!(resumed.next_batch(), expected[3]);
    }
}

#[test]
fn same_seed_same_order_different_seed_different_order() {
    for mode in [Mode::Iid, Mode::Shuffle] {
        let a = Sampler::new(1000, 32, mode, 1).unwrap();
        let a_again = Sampler::new(1000, 32, mode, 1).unwrap();
        let b = Sampler::new(1000, 32, mode, 2).unwrap();
        let collect = |s: &Sampler| (0..10).flat_map(|step| s.batch(step)).collect::<Vec<_>>();
        assert_eq!(collect(&a), collect(&a_again), "{mode:?}");
        assert_ne!(collect(&a), collect(&b), "{mode:?}");
    }
}

#[test]
fn shuffle_epochs_use_different_orders() {
    // Batch size == length, so each step is exactly one epoch.
    let sampler = Sampler::new(100, 100, Mode::Shuffle, 5).unwrap();
    let epochs: Vec<Vec<u64>> = (0..5).map(|step| sampler.batch(step)).collect();
    for i in 0..epochs.len() {
        for j in i + 1..epochs.len() {
            assert_ne!(epochs[i], epochs[j]);
        }
    }
    assert_ne!(epochs[0], (0..100).collect::<Vec<u64>>(), "not shuffled");
}

#[test]
fn iid_and_shuffle_streams_differ() {
    let iid = Sampler::new(1000, 64, Mode::Iid, 3).unwrap();
    let shuffle = Sampler::new(1000, 64, Mode::Shuffle, 3).unwrap();
    assert_ne!(iid.batch(0), shuffle.batch(0));
}

#[test]
fn huge_steps_and_sizes_do_not_overflow_or_panic() {
    for mode in MODES {
        for length in [1, 2, 3, 1 << 40, (1 << 40) + 7, u64::MAX] {
            for batch_size in [1, 3, 17] {
                let mut sampler = Sampler::new(length, batch_size, mode, u64::MAX).unwrap();
                for step in [u64::MAX, u64::MAX - 1, 1 << 63, 0] {
                    let batch = sampler.batch(step);
                    assert_eq!(batch.len(), batch_size);
                    assert!(batch.iter().all(|&i| i < length), "{mode:?} {length}");
                }
                // The cursor wraps instead of overflowing.
                sampler.seek(u64::MAX);
                let last = sampler.next_batch();
                assert_eq!(last, sampler.batch(u64::MAX));
                assert_eq!(sampler.step(), 0);
            }
        }
    }
}

#[test]
fn shuffle_stays_a_permutation_at_huge_epochs() {
    // Step u64::MAX with a small length lands in an epoch number beyond u64.
    let length = 7u64;
    let batch_size = 1 << 20;
    let sampler = Sampler::new(length, batch_size, Mode::Shuffle, 11).unwrap();
    let step = u64::MAX;
    let start = u128::from(step) * batch_size as u128;
    assert!(start / u128::from(length) > u128::from(u64::MAX));
    let batch = sampler.batch(step);
    // Skip to the first full epoch in the batch and check it.
    let skip = ((u128::from(length) - start % u128::from(length)) % u128::from(length)) as usize;
    let mut epoch = batch[skip..skip + length as usize].to_vec();
    epoch.sort_unstable();
    assert_eq!(epoch, (0..length).collect::<Vec<_>>());
}

#[test]
fn accessors_and_errors() {
    let sampler = Sampler::new(10, 4, Mode::Iid, 123).unwrap();
    assert_eq!(sampler.length(), 10);
    assert_eq!(sampler.batch_size(), 4);
    assert_eq!(sampler.mode(), Mode::Iid);
    assert_eq!(sampler.seed(), 123);
    assert_eq!(sampler.step(), 0);

    let err = Sampler::new(0, 4, Mode::Iid, 0).unwrap_err();
    assert_eq!(err, SamplerError::ZeroLength);
    assert!(!err.to_string().is_empty());
    let err: Box<dyn std::error::Error> = Box::new(SamplerError::ZeroBatchSize);
    assert!(err.to_string().contains("batch size"));
}

#[test]
fn iterator_is_endless() {
    let sampler = Sampler::new(3, 2, Mode::Shuffle, 0).unwrap();
    assert_eq!(sampler.size_hint(), (usize::MAX, None));
    assert_eq!(sampler.skip(1000).take(5).count(), 5);
}

#[test]
fn shards_partition_every_global_batch_in_order() {
    for mode in MODES {
        for (length, batch_size) in [(1, 4), (10, 4), (97, 12), (5, 12), (1000, 64)] {
            let global = Sampler::new(length, batch_size, mode, 11).unwrap();
            for count in [1u64, 2, 4] {
                let shards: Vec<Sampler> = (0..count)
                    .map(|i| global.clone().with_shard(i, count).unwrap())
                    .collect();
                for step in (0..30).chain([u64::MAX - 1, u64::MAX]) {
                    let joined: Vec<u64> = shards.iter().flat_map(|s| s.batch(step)).collect();
                    assert_eq!(
                        joined,
                        global.batch(step),
                        "{mode:?} {length} {count} {step}"
                    );
                    for s in &shards {
                        assert_eq!(s.batch(step).len(), batch_size / count as usize);
                    }
                }
            }
        }
    }
}

#[test]
fn a_sharded_sampler_seeks_and_iterates_like_any_other() {
    let mut shard = Sampler::new(1000, 8, Mode::Shuffle, 5)
        .unwrap()
        .with_shard(1, 2)
        .unwrap();
    let first: Vec<Vec<u64>> = (&mut shard).take(5).collect();
    shard.seek(3);
    assert_eq!(shard.next_batch(), first[3]);
    assert_eq!(shard.step(), 4);
}

#[test]
fn shard_errors_are_reported() {
    let s = Sampler::new(10, 6, Mode::Iid, 0).unwrap();
    assert_eq!(
        s.clone().with_shard(0, 4),
        Err(SamplerError::BatchNotDivisible {
            batch_size: 6,
            count: 4
        })
    );
    assert!(s.clone().with_shard(2, 2).is_err());
    assert!(s.with_shard(0, 0).is_err());
}
