//! Counter-based randomness: every random value is a hash of its coordinates
//! (seed, step, position, …) instead of the next output of a stateful
//! generator. That is what lets any batch be computed directly, in any order.

/// The 64-bit golden-ratio constant used by SplitMix64 as its stream increment.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 finalizer: a bijection on `u64` with full avalanche (every
/// input bit flips each output bit with probability ~1/2).
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `n` of the stream keyed by `key`: SplitMix64's output, so one
/// `mix64` a word, for the many draws of one keyed thing (a leaf's shuffle,
/// a sample's crop).
pub fn counter_word(key: u64, n: u64) -> u64 {
    mix64(key.wrapping_add(n.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// Keyed hash of a fixed-length tuple of words.
///
/// Each word is absorbed through a full `mix64`, so for a fixed prefix the
/// map from the next word to the state is a bijection (no two distinct
/// coordinates collide early), and every input bit reaches every output bit.
/// Adding `GOLDEN` before each absorption keeps all-zero inputs away from the
/// fixed point `mix64(0) == 0`.
pub(crate) fn hash(key: u64, words: &[u64]) -> u64 {
    let mut state = mix64(key.wrapping_add(GOLDEN));
    for &word in words {
        state = mix64(state.wrapping_add(GOLDEN) ^ word);
    }
    state
}

/// `(a / b, a % b)`, in 64 bits where both fit: a 128-bit division is a
/// library call, several times slower.
pub(crate) fn div_rem(a: u128, b: u128) -> (u128, u128) {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) => (u128::from(a / b), u128::from(a % b)),
        _ => (a / b, a % b),
    }
}

/// The stream of per-sample seeds.
const SAMPLE_SEED_STREAM: u64 = 0x7365_6564_0000_0003;

/// The seeds of `count` samples of `step` from position `first` of the
/// global batch on: a hash of (seed, step, position), so a sample's seed
/// does not depend on the shard, worker or run that produces it.
pub(crate) fn sample_seeds(seed: u64, step: u64, first: u64, count: usize) -> Vec<u64> {
    (first..)
        .take(count)
        .map(|position| hash(seed, &[SAMPLE_SEED_STREAM, step, position]))
        .collect()
}

/// An unbiased draw from `0..n` (`n > 0`), using Lemire's multiply-shift
/// reduction with rejection.
///
/// `draw(attempt)` must return a uniform `u64` for each `attempt = 0, 1, …`.
/// Passing the attempt number (instead of advancing a generator) keeps the
/// result a pure function of the caller's coordinates even when a value is
/// rejected. Rejection happens with probability `(2^64 mod n) / 2^64 < n / 2^64`,
/// i.e. essentially never for dataset-sized `n`.
pub(crate) fn uniform_below(n: u64, mut draw: impl FnMut(u64) -> u64) -> u64 {
    debug_assert!(n > 0);
    let mut attempt = 0;
    let mut product = u128::from(draw(attempt)) * u128::from(n);
    // The low half tells where in its bucket the draw fell; buckets are
    // `2^64 / n` wide except that `2^64 mod n` of them get one extra value.
    // Rejecting low halves below `2^64 mod n` evens them out.
    if (product as u64) < n {
        let threshold = n.wrapping_neg() % n; // == 2^64 mod n
        while (product as u64) < threshold {
            attempt += 1;
            product = u128::from(draw(attempt)) * u128::from(n);
        }
    }
    (product >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix64_matches_splitmix64_reference() {
        // First output of the reference SplitMix64 seeded with 0 is
        // mix64(0 + GOLDEN) = 0xE220A8397B1DCDAF.
        assert_eq!(mix64(GOLDEN), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn hash_depends_on_every_input() {
        let base = hash(1, &[2, 3, 4]);
        assert_ne!(base, hash(0, &[2, 3, 4]));
        assert_ne!(base, hash(1, &[0, 3, 4]));
        assert_ne!(base, hash(1, &[2, 0, 4]));
        assert_ne!(base, hash(1, &[2, 3, 0]));
        assert_ne!(base, hash(1, &[3, 2, 4]), "order must matter");
        assert_eq!(base, hash(1, &[2, 3, 4]));
    }

    #[test]
    fn uniform_below_stays_in_range() {
        for n in [1, 2, 3, 7, 1000, u64::MAX / 3, u64::MAX] {
            for i in 0..1000 {
                assert!(uniform_below(n, |a| hash(i, &[a])) < n);
            }
        }
    }

    #[test]
    fn uniform_below_rejects_the_overrepresented_values() {
        // For n = 3, 2^64 mod 3 = 1, so exactly the draw 0 (low half 0 < 1)
        // must be rejected and the next attempt used instead.
        let mut attempts = Vec::new();
        let value = uniform_below(3, |a| {
            attempts.push(a);
            if a == 0 {
                0
            } else {
                u64::MAX
            }
        });
        assert_eq!(attempts, [0, 1]);
        assert_eq!(value, 2);

        // A draw whose low half is small but not below the threshold is kept.
        let mut calls = 0;
        assert_eq!(
            uniform_below(3, |_| {
                calls += 1;
                u64::MAX / 3 + 1
            }),
            1
        );
        assert_eq!(calls, 1);

        // n = 2^63 + 1 rejects almost half of all draws; with a hashed source
        // it must still terminate and stay in range.
        let n = (1u64 << 63) + 1;
        for i in 0..100 {
            assert!(uniform_below(n, |a| hash(i, &[a])) < n);
        }
    }

    #[test]
    fn uniform_below_power_of_two_is_top_bits() {
        // For n = 2^k the reduction is exactly the top k bits: no rejection.
        assert_eq!(uniform_below(16, |_| 0xF000_0000_0000_0000), 15);
        assert_eq!(uniform_below(16, |_| 0x0FFF_FFFF_FFFF_FFFF), 0);
    }
}
