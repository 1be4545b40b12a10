//! Shuffle mode samples without replacement: every epoch of `length`
//! consecutive positions is a permutation of `0..length`, whatever the batch
//! size, seed, or epoch.

use proptest::prelude::*;
use zsampler::{Mode, Permutation, Sampler};

/// Checks that the first `epochs` epochs of the shuffle stream each contain
/// every index exactly once, reading them through batches of `batch_size`
/// (so batches straddle epoch boundaries when it does not divide `length`).
fn assert_epochs_are_permutations(length: u64, batch_size: usize, seed: u64, epochs: u64) {
    let mut sampler = Sampler::new(length, batch_size, Mode::Shuffle, seed).unwrap();
    let total = (length * epochs) as usize;
    let mut stream = Vec::with_capacity(total + batch_size);
    while stream.len() < total {
        stream.extend(sampler.next_batch());
    }
    for (epoch, chunk) in stream[..total].chunks(length as usize).enumerate() {
        let mut seen = vec![false; length as usize];
        for &index in chunk {
            assert!(index < length, "index {index} >= length {length}");
            assert!(
                !seen[index as usize],
                "length {length}, batch {batch_size}, seed {seed}: \
                 index {index} repeated in epoch {epoch}"
            );
            seen[index as usize] = true;
        }
    }
}

#[test]
fn every_index_once_per_epoch() {
    for length in [1, 2, 3, 5, 7, 97, 128, 1000, 4099] {
        for batch_size in [1, 3, 7, 64, 1000] {
            for seed in [0, 1, 0xDEAD_BEEF] {
                assert_epochs_are_permutations(length, batch_size, seed, 3);
            }
        }
    }
}

#[test]
fn every_index_once_per_epoch_power_of_two() {
    for seed in [0, 42] {
        assert_epochs_are_permutations(65536, 1000, seed, 2);
        assert_epochs_are_permutations(65536, 4096, seed, 2);
    }
}

#[test]
fn permutation_is_a_bijection_on_a_large_prime() {
    let length = 1_000_003;
    let permutation = Permutation::new(length, 9);
    assert_eq!(permutation.length(), length);
    let mut seen = vec![false; length as usize];
    for x in 0..length {
        let y = permutation.apply(x) as usize;
        assert!(!seen[y]);
        seen[y] = true;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_index_once_per_epoch_random_lengths(
        length in 1u64..5000,
        batch_size in 1usize..300,
        seed in any::<u64>(),
    ) {
        assert_epochs_are_permutations(length, batch_size, seed, 3);
    }

    #[test]
    fn any_epoch_is_a_permutation(
        length in 1u64..2000,
        seed in any::<u64>(),
        start_step in any::<u64>(),
    ) {
        // Batch size == length: each step is exactly one epoch, even at
        // arbitrary (huge) step numbers.
        let sampler = Sampler::new(length, length as usize, Mode::Shuffle, seed).unwrap();
        let mut batch = sampler.batch(start_step);
        batch.sort_unstable();
        prop_assert_eq!(batch, (0..length).collect::<Vec<_>>());
    }
}
