//! Chi-square uniformity tests for the random modes.
//!
//! Seeds are fixed, so every test is deterministic. The critical values are
//! generous (upper 1e-6 tail), so a good generator passes with a wide margin,
//! yet each check is paired with a negative control: a visibly biased
//! sequence that must FAIL the very same check, proving that the check can
//! fail at all.

use zsampler::{Mode, Sampler};

/// Pearson's statistic `sum (observed - expected)^2 / expected` for cells
/// that all have the same expected count.
fn chi_square(counts: &[u64], expected: f64) -> f64 {
    counts
        .iter()
        .map(|&observed| {
            let diff = observed as f64 - expected;
            diff * diff / expected
        })
        .sum()
}

/// Upper 1e-6 quantile of the chi-square distribution with `df` degrees of
/// freedom, via the Wilson–Hilferty approximation (accurate to ~1% here).
fn critical_value(df: usize) -> f64 {
    const Z: f64 = 4.753; // standard normal upper 1e-6 quantile
    let df = df as f64;
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + Z * a.sqrt()).powi(3)
}

/// Whether `counts` (all cells expected equally often) look uniform.
fn looks_uniform(counts: &[u64], df: usize) -> bool {
    let total: u64 = counts.iter().sum();
    let statistic = chi_square(counts, total as f64 / counts.len() as f64);
    statistic < critical_value(df)
}

/// The first `count` indices of a sampler's stream.
fn stream(length: u64, batch_size: usize, mode: Mode, seed: u64, count: usize) -> Vec<u64> {
    let sampler = Sampler::new(length, batch_size, mode, seed).unwrap();
    sampler.flatten().take(count).collect()
}

/// Frequency of each index in `0..buckets`.
fn frequencies(values: &[u64], buckets: u64) -> Vec<u64> {
    let mut counts = vec![0; buckets as usize];
    for &value in values {
        counts[value as usize] += 1;
    }
    counts
}

/// Frequency of each ordered pair `(values[2i], values[2i + 1])` over
/// `buckets x buckets` cells. Non-overlapping pairs keep the cells
/// independent, as the plain chi-square test assumes.
fn pair_frequencies(values: &[u64], buckets: u64) -> Vec<u64> {
    let mut counts = vec![0; (buckets * buckets) as usize];
    for pair in values.chunks_exact(2) {
        counts[(pair[0] * buckets + pair[1]) as usize] += 1;
    }
    counts
}

/// For a stream of whole shuffle epochs: how often each value lands at
/// each offset within the epoch (`length x length` cells).
///
/// Every epoch adds a permutation matrix, so rows and columns have fixed sums
/// and the cells are negatively correlated: for uniform permutations Pearson's
/// statistic of this table is asymptotically `n / (n - 1)` times a chi-square
/// with `(n - 1)^2` degrees of freedom. [`offset_value_table_looks_uniform`] undoes
/// the factor.
fn offset_value_table(values: &[u64], length: u64) -> Vec<u64> {
    let mut counts = vec![0; (length * length) as usize];
    for epoch in values.chunks_exact(length as usize) {
        for (offset, &value) in (0u64..).zip(epoch) {
            counts[(offset * length + value) as usize] += 1;
        }
    }
    counts
}

/// Whether an [`offset_value_table`] looks like one of uniform permutations.
fn offset_value_table_looks_uniform(values: &[u64], length: u64) -> bool {
    let table = offset_value_table(values, length);
    let n = length as f64;
    let epochs = (values.len() / length as usize) as f64;
    let statistic = chi_square(&table, epochs / n) * (n - 1.0) / n;
    statistic < critical_value((length as usize - 1).pow(2))
}

/// For a stream of whole shuffle epochs: how often each ordered pair of
/// distinct values occupies neighbouring offsets `(2i, 2i + 1)`, taking one
/// pair per epoch (cycling through `i`) so that the pairs are independent.
/// A uniform permutation makes all `length * (length - 1)` pairs equally
/// likely; the impossible pairs `(v, v)` are left out.
fn shuffle_pair_frequencies(values: &[u64], length: u64) -> Vec<u64> {
    let slots = (length / 2) as usize;
    let mut counts = vec![0; (length * length) as usize];
    for (epoch, values) in values.chunks_exact(length as usize).enumerate() {
        let offset = 2 * (epoch % slots);
        counts[(values[offset] * length + values[offset + 1]) as usize] += 1;
    }
    (0..length * length)
        .filter(|cell| cell / length != cell % length)
        .map(|cell| counts[cell as usize])
        .collect()
}

#[test]
fn iid_index_frequencies_are_uniform() {
    // 16 is a power of two (the reduction is just the top bits); 10 and 7
    // are not, so they check that the multiply-shift buckets are even.
    for (length, seed) in [(16, 1), (10, 2), (7, 3)] {
        let draws = stream(length, 64, Mode::Iid, seed, 160_000);
        let counts = frequencies(&draws, length);
        assert!(
            looks_uniform(&counts, length as usize - 1),
            "length {length}: {counts:?}"
        );
    }
}

#[test]
fn iid_consecutive_pairs_are_uniform() {
    let draws = stream(16, 64, Mode::Iid, 4, 102_400);
    let counts = pair_frequencies(&draws, 16);
    assert!(looks_uniform(&counts, 16 * 16 - 1), "{counts:?}");
}

#[test]
fn shuffle_offset_value_table_is_uniform() {
    // Each epoch is a permutation, so plain index frequencies are trivially
    // flat; what must be uniform is *where* each index lands. Length 10 also
    // exercises cycle walking (domain 16). A batch size of 7 makes batches
    // straddle epoch boundaries.
    for (length, seed) in [(16u64, 5), (10, 6)] {
        let epochs = 4000;
        let draws = stream(length, 7, Mode::Shuffle, seed, epochs * length as usize);
        assert!(
            offset_value_table_looks_uniform(&draws, length),
            "length {length}: {:?}",
            offset_value_table(&draws, length)
        );
    }
}

#[test]
fn shuffle_consecutive_pairs_are_uniform() {
    // One pair per epoch: 48_000 epochs give 200 expected per cell.
    let length = 16;
    let draws = stream(length, 7, Mode::Shuffle, 7, 48_000 * length as usize);
    let counts = shuffle_pair_frequencies(&draws, length);
    assert_eq!(counts.len(), 240);
    assert!(looks_uniform(&counts, 240 - 1), "{counts:?}");
}

#[test]
fn shuffle_pairs_are_uniform_for_tiny_lengths() {
    // Length 5 runs the Feistel network on 2-bit halves (domain 16, cycle
    // walking), where too few rounds leave a measurable bias: with 8 rounds
    // this exact check fails (statistic ~141 against a critical value of
    // ~64); with 12 it passes comfortably (~30 for 19 degrees of freedom).
    let length = 5;
    let draws = stream(length, 3, Mode::Shuffle, 8, 200_000 * length as usize);
    let counts = shuffle_pair_frequencies(&draws, length);
    assert_eq!(counts.len(), 20);
    assert!(looks_uniform(&counts, 20 - 1), "{counts:?}");
}

// ---- negative controls: the same checks must reject biased sequences ----

#[test]
fn frequency_check_rejects_a_biased_sequence() {
    // `i % 15` never produces 15 and over-represents everything else.
    let biased: Vec<u64> = (0..160_000).map(|i| i % 15).collect();
    assert!(!looks_uniform(&frequencies(&biased, 16), 15));

    // A naive reduction of uniform 4-bit values to 0..10 by `% 10`: the
    // values 0..=5 come up twice as often as 6..=9.
    let draws = stream(16, 64, Mode::Iid, 1, 160_000);
    let naive: Vec<u64> = draws.iter().map(|&x| x % 10).collect();
    assert!(!looks_uniform(&frequencies(&naive, 10), 9));
}

#[test]
fn pair_check_rejects_a_sequence_with_uniform_marginals() {
    // A counter has perfectly flat frequencies but fully predictable pairs:
    // only the pair check can see it.
    let counter: Vec<u64> = (0..102_400).map(|i| i % 16).collect();
    assert!(looks_uniform(&frequencies(&counter, 16), 15));
    assert!(!looks_uniform(&pair_frequencies(&counter, 16), 16 * 16 - 1));
}

#[test]
fn shuffle_checks_reject_non_shuffling_orders() {
    let length = 16u64;
    let epochs = 48_000u64;

    // The identity order every epoch fails both checks.
    let identity: Vec<u64> = (0..epochs * length).map(|p| p % length).collect();
    assert!(!offset_value_table_looks_uniform(&identity, length));
    assert!(!looks_uniform(
        &shuffle_pair_frequencies(&identity, length),
        239
    ));

    // Rotating by the epoch number spreads every index evenly over all
    // offsets (a perfectly flat table), but neighbours stay neighbours: only
    // the pair check catches it.
    let rotated: Vec<u64> = (0..epochs * length)
        .map(|p| (p % length + p / length) % length)
        .collect();
    assert!(offset_value_table_looks_uniform(&rotated, length));
    assert!(!looks_uniform(
        &shuffle_pair_frequencies(&rotated, length),
        239
    ));
}

#[test]
fn critical_values_match_tables() {
    // Reference upper 1e-6 quantiles (to ~1%): df 15 -> 57.4, df 255 -> 377.
    assert!((critical_value(15) - 57.4).abs() < 1.0);
    assert!((critical_value(255) - 377.2).abs() < 2.0);
}
