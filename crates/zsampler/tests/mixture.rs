//! Mixtures against their definition: counts that follow the weights (exact
//! without drift, drawn with the spread of a random draw: chi-square),
//! every source in its own order and epochs, shards that concatenate to the
//! global batch, and any step computed directly.

use proptest::prelude::*;
use zsampler::{Mixture, MixtureSource, Mode, Proportions, SamplerError};

fn sources(lengths: &[u64], mode: Mode) -> Vec<MixtureSource> {
    lengths
        .iter()
        .map(|&length| MixtureSource { length, mode })
        .collect()
}

fn per_source(batch: &zsampler::MixtureBatch, k: usize) -> Vec<usize> {
    let mut counts = vec![0; k];
    for &s in &batch.sources {
        counts[s as usize] += 1;
    }
    counts
}

/// `ceil(log2(k))`: the depth of the tree, the bound of every source's drift.
fn depth(k: usize) -> f64 {
    (k as f64).log2().ceil()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn exact_counts_follow_the_weights_without_drift(
        weights in prop::collection::vec(0.01f64..10.0, 1..9),
        batch in 1usize..300,
        steps in 1u64..40,
    ) {
        let k = weights.len();
        let total: f64 = weights.iter().sum();
        let mix = Mixture::new(&sources(&vec![1000; k], Mode::Sequential), &weights, batch, 1,
                               Proportions::Exact).unwrap();
        let mut running = vec![0usize; k];
        for step in 0..steps {
            let counts = per_source(&mix.batch(step), k);
            for j in 0..k {
                running[j] += counts[j];
                let share = weights[j] / total;
                let want = (step + 1) as f64 * batch as f64 * share;
                prop_assert!((running[j] as f64 - want).abs() <= depth(k) + 1e-6,
                             "source {} has {} after step {}, its share is {}", j, running[j],
                             step, want);
                let per_batch = batch as f64 * share;
                prop_assert!((counts[j] as f64 - per_batch).abs() <= 2.0 * depth(k) + 1e-6);
            }
            if k == 2 {
                let share = batch as f64 * weights[0] / total;
                prop_assert!(counts[0] == share.floor() as usize || counts[0] == share.ceil() as usize);
            }
        }
        let positions = u128::from(steps) * batch as u128;
        let counted: Vec<usize> = mix.counts(positions).iter().map(|&c| c as usize).collect();
        prop_assert_eq!(counted, running);
    }

    #[test]
    fn each_source_walks_its_own_order_and_epochs(
        lengths in prop::collection::vec(1u64..50, 1..5),
        weights_seed in any::<u64>(),
        batch in 1usize..40,
        drawn in any::<bool>(),
    ) {
        let k = lengths.len();
        let weights: Vec<f64> = (0..k).map(|j| 1.0 + ((weights_seed >> (8 * j)) & 7) as f64).collect();
        let proportions = if drawn { Proportions::Drawn } else { Proportions::Exact };
        // Sequential sources: source j's indices are 0, 1, ..., length-1,
        // 0, 1, ...: its own order, its own epochs (drawn proportions move
        // a source's samples between slots, never its order).
        let mix = Mixture::new(&sources(&lengths, Mode::Sequential), &weights, batch, 9,
                               proportions).unwrap();
        let mut seen: Vec<Vec<u64>> = vec![Vec::new(); k];
        for step in 0..30 {
            let b = mix.batch(step);
            for (&s, &i) in b.sources.iter().zip(&b.indices) {
                prop_assert!(i < lengths[s as usize]);
                seen[s as usize].push(i);
            }
        }
        for j in 0..k {
            let own: Vec<u64> = (0..seen[j].len() as u64).map(|n| n % lengths[j]).collect();
            prop_assert_eq!(&seen[j], &own);
        }
        // Shuffled sources: every epoch of a source is all of its indices.
        let mix = Mixture::new(&sources(&lengths, Mode::Shuffle), &weights, batch, 9,
                               Proportions::Exact).unwrap();
        let mut seen: Vec<Vec<u64>> = vec![Vec::new(); k];
        for step in 0..30 {
            let b = mix.batch(step);
            for (&s, &i) in b.sources.iter().zip(&b.indices) {
                seen[s as usize].push(i);
            }
        }
        for j in 0..k {
            for epoch in seen[j].chunks_exact(lengths[j] as usize) {
                let mut e = epoch.to_vec();
                e.sort_unstable();
                prop_assert_eq!(e, (0..lengths[j]).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn shards_concatenate_to_the_global_batch(
        per_shard in 1usize..9,
        count in prop::sample::select(vec![1u64, 2, 3, 4, 7]),
        step in 0u64..1000,
        drawn in any::<bool>(),
    ) {
        let batch = per_shard * count as usize;
        let proportions = if drawn { Proportions::Drawn } else { Proportions::Exact };
        let mix = Mixture::new(&sources(&[13, 400, 5], Mode::Shuffle), &[0.5, 0.3, 0.2], batch,
                               4, proportions).unwrap();
        let whole = mix.batch(step);
        let (mut sources, mut indices) = (Vec::new(), Vec::new());
        for i in 0..count {
            let part = mix.clone().with_shard(i, count).unwrap().batch(step);
            prop_assert_eq!(part.sources.len(), per_shard);
            sources.extend(part.sources);
            indices.extend(part.indices);
        }
        prop_assert_eq!(sources, whole.sources);
        prop_assert_eq!(indices, whole.indices);
    }

    #[test]
    fn counts_are_the_sources_of_the_positions_before(
        weights in prop::collection::vec(0.05f64..5.0, 1..6),
        batch in 1usize..3000,
        // Steps around the first drawn window's end, where a batch straddles
        // two windows, and anywhere.
        near in any::<bool>(),
        far in 0u64..1 << 40,
        drawn in any::<bool>(),
    ) {
        let proportions = if drawn { Proportions::Drawn } else { Proportions::Exact };
        let k = weights.len();
        let mix = Mixture::new(&sources(&vec![100; k], Mode::Shuffle), &weights, batch, 6,
                               proportions).unwrap();
        let window = zsampler::mixture::DRAW_WINDOW;
        let step = if near { window / batch as u64 } else { far };
        let position = u128::from(step) * batch as u128;
        let before = mix.counts(position);
        let after = mix.counts(position + batch as u128);
        let got = per_source(&mix.batch(step), k);
        for j in 0..k {
            prop_assert_eq!(after[j] - before[j], got[j] as u128, "source {}", j);
        }
        // A position inside the batch counts its part of it.
        let b = mix.batch(step);
        let inside = batch / 2;
        let mut part = before.clone();
        for &s in &b.sources[..inside] {
            part[s as usize] += 1;
        }
        prop_assert_eq!(mix.counts(position + inside as u128), part);
    }
}

#[test]
fn drawn_batches_vary_like_a_random_draw_but_windows_hold_the_exact_counts() {
    // A batch the size of a leaf of the window's tree, and one that is not.
    for batch in [64, 48] {
        drawn_batches_vary_like_a_random_draw(batch);
    }
    let weights = [0.7, 0.2, 0.1];
    // A whole window holds the exact counts.
    let window = zsampler::mixture::DRAW_WINDOW as usize;
    let exact = Mixture::new(
        &sources(&[1000, 1000, 1000], Mode::Shuffle),
        &weights,
        window,
        3,
        Proportions::Exact,
    )
    .unwrap();
    let drawn_window = Mixture::new(
        &sources(&[1000, 1000, 1000], Mode::Shuffle),
        &weights,
        window,
        3,
        Proportions::Drawn,
    )
    .unwrap();
    assert_eq!(
        per_source(&drawn_window.batch(5), 3),
        per_source(&exact.batch(5), 3)
    );
}

/// Chi-square of drawn batches of `batch` samples against the weights.
fn drawn_batches_vary_like_a_random_draw(batch: usize) {
    let weights = [0.7, 0.2, 0.1];
    let mix = Mixture::new(
        &sources(&[1000, 1000, 1000], Mode::Shuffle),
        &weights,
        batch,
        3,
        Proportions::Drawn,
    )
    .unwrap();
    // Chi-square of each batch's counts against the weights, summed over
    // 2000 batches: a sum of 2000 chi-square(2) variables if the batches are
    // random draws (mean 4000, sd about 89); exact batches would give about
    // 0 (their counts differ from the expected by less than 1 each).
    let mut chi2 = 0.0;
    let mut totals = [0usize; 3];
    let steps = 2000;
    for step in 0..steps {
        let counts = per_source(&mix.batch(step), 3);
        for j in 0..3 {
            let expected = batch as f64 * weights[j];
            chi2 += (counts[j] as f64 - expected).powi(2) / expected;
            totals[j] += counts[j];
        }
    }
    // A draw without replacement from a window is a little tighter than a
    // multinomial one (by (window - batch) / (window - 1), about 1).
    assert!(
        (3500.0..4500.0).contains(&chi2),
        "chi-square {chi2} over {steps} batches of 2 degrees of freedom"
    );
    // Over all positions so far the proportions hold (chi-square, 2
    // degrees of freedom, p = 0.001: 13.8).
    let n = (steps * batch as u64) as f64;
    let overall: f64 = (0..3)
        .map(|j| (totals[j] as f64 - n * weights[j]).powi(2) / (n * weights[j]))
        .sum();
    assert!(overall < 13.8, "overall chi-square {overall}");
}

/// Under drawn proportions every position holds a source with that
/// source's weight as its chance, at a leaf's start or end and anywhere.
#[test]
fn a_drawn_position_holds_each_source_by_its_weight() {
    let seeds = 4000;
    for position in [0u64, 63, 64, 1000, 524_287, 524_288] {
        let mut first = 0;
        for seed in 0..seeds {
            let mix = Mixture::new(
                &sources(&[10, 10], Mode::Shuffle),
                &[0.7, 0.3],
                1,
                seed,
                Proportions::Drawn,
            )
            .unwrap();
            first += usize::from(mix.batch(position).sources[0] == 0);
        }
        // Binomial(4000, 0.7): sd 29; 4.4 sd either way.
        assert!(
            (2670..=2930).contains(&first),
            "position {position}: source 0 in {first} of {seeds} runs"
        );
    }
}

#[test]
fn exact_batches_of_two_sources_are_rounded_shares() {
    let mix = Mixture::new(
        &sources(&[10, 10], Mode::Sequential),
        &[0.7, 0.3],
        10,
        0,
        Proportions::Exact,
    )
    .unwrap();
    for step in 0..50 {
        assert_eq!(per_source(&mix.batch(step), 2), [7, 3]);
    }
    assert_eq!(mix.counts(1000), [700, 300]);
    assert_eq!(mix.weights(), [7, 3]);
}

#[test]
fn any_step_is_computed_directly() {
    let mix = Mixture::new(
        &sources(&[1 << 20, 999, 3], Mode::Shuffle),
        &[5.0, 3.0, 2.0],
        256,
        11,
        Proportions::Drawn,
    )
    .unwrap();
    let far = 1_000_000_000_000u64;
    assert_eq!(mix.batch(far), mix.clone().batch(far));
    let counts = mix.counts(u128::from(far) * 256);
    let total: u128 = counts.iter().sum();
    assert_eq!(total, u128::from(far) * 256);
    assert_eq!(mix.batch(u64::MAX).indices.len(), 256);
}

#[test]
fn bad_mixtures_are_refused() {
    let two = sources(&[5, 5], Mode::Iid);
    for (srcs, weights) in [
        (&two[..], &[1.0][..]),
        (&[][..], &[][..]),
        (&two[..], &[1.0, 0.0][..]),
        (&two[..], &[1.0, -1.0][..]),
        (&two[..], &[1.0, f64::NAN][..]),
        (&two[..], &[f64::INFINITY, 1.0][..]),
    ] {
        assert!(matches!(
            Mixture::new(srcs, weights, 4, 0, Proportions::Exact),
            Err(SamplerError::BadMixture { .. })
        ));
    }
    assert_eq!(
        Mixture::new(
            &sources(&[0, 5], Mode::Iid),
            &[1.0, 1.0],
            4,
            0,
            Proportions::Exact
        ),
        Err(SamplerError::ZeroLength)
    );
    let mix = Mixture::new(&two, &[1.0, 1.0], 6, 0, Proportions::Exact).unwrap();
    assert!(matches!(
        mix.with_shard(0, 4),
        Err(SamplerError::BatchNotDivisible { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn a_schedule_changes_the_weights_and_each_source_continues(
        first in 1u64..20,
        gap in 1u64..20,
        batch in 1usize..40,
        drawn in any::<bool>(),
    ) {
        let proportions = if drawn { Proportions::Drawn } else { Proportions::Exact };
        let schedule = vec![(first, vec![1.0, 3.0]), (first + gap, vec![9.0, 1.0])];
        let mix = Mixture::new(&sources(&[13, 1000], Mode::Sequential), &[1.0, 1.0], batch, 2,
                               proportions)
            .unwrap()
            .with_schedule(&schedule)
            .unwrap();
        prop_assert_eq!(mix.schedule(), vec![(first, vec![1, 3]), (first + gap, vec![9, 1])]);
        let steps = first + gap + 10;
        let batches: Vec<_> = (0..steps).map(|s| mix.batch(s)).collect();
        // Each source's indices run on across the changes: its own order.
        let mut seen = [Vec::new(), Vec::new()];
        for b in &batches {
            for (&s, &i) in b.sources.iter().zip(&b.indices) {
                seen[s as usize].push(i);
            }
        }
        for (j, length) in [13u64, 1000].into_iter().enumerate() {
            let own: Vec<u64> = (0..seen[j].len() as u64).map(|n| n % length).collect();
            prop_assert_eq!(&seen[j], &own);
        }
        // Every phase holds its weights' exact counts over its positions.
        let phases = [(0, first, [1u64, 1]), (first, first + gap, [1, 3])];
        for (from, to, weights) in phases {
            let mut counts = [0u64; 2];
            for b in &batches[from as usize..to as usize] {
                for &s in &b.sources {
                    counts[s as usize] += 1;
                }
            }
            let positions = (to - from) * batch as u64;
            let share = positions as f64 * weights[0] as f64 / (weights[0] + weights[1]) as f64;
            prop_assert!((counts[0] as f64 - share).abs() <= 1.0, "{:?} in {}..{}", counts, from, to);
        }
        let total: u128 = mix.counts(u128::from(steps) * batch as u128).iter().sum();
        prop_assert_eq!(total, u128::from(steps) * batch as u128);
    }
}

#[test]
fn a_schedule_must_increase_and_match_the_sources() {
    let mix = Mixture::new(
        &sources(&[5, 5], Mode::Shuffle),
        &[1.0, 1.0],
        4,
        0,
        Proportions::Exact,
    )
    .unwrap();
    for bad in [
        vec![(0, vec![1.0, 2.0])],
        vec![(5, vec![1.0, 2.0]), (5, vec![2.0, 1.0])],
        vec![(5, vec![1.0])],
        vec![(5, vec![1.0, 0.0])],
    ] {
        assert!(matches!(
            mix.clone().with_schedule(&bad),
            Err(SamplerError::BadMixture { .. })
        ));
    }
}
