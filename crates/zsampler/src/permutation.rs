//! A keyed pseudo-random bijection of `0..length` in O(1) memory.
//!
//! A balanced Feistel network permutes the smallest domain `2^(2h) >= length`
//! (two halves of `h` bits each); cycle walking then restricts it to
//! `0..length`. Nothing is materialized, so the shuffle of a 2^40-record
//! dataset costs the same memory as that of a 10-record one.

use crate::random::{hash, mix64};

/// Feistel rounds. Luby–Rackoff's four rounds are an asymptotic result; with
/// the tiny halves of small datasets (1–2 bits) each round mixes very little.
/// Measured on N = 3, 5, 10, 16 over 4M keys, the pair distribution
/// `(perm(0), perm(1))` is clearly non-uniform at 8 rounds (chi-square 3.4x
/// its degrees of freedom for N = 16, 100x for N = 5) and indistinguishable
/// from uniform at 12. A round is one `mix64`, so the extra four cost only a
/// few nanoseconds per index.
const ROUNDS: usize = 12;

/// A pseudo-random permutation of `0..length`, fully determined by
/// `(length, key)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    length: u64,
    /// Bits per Feistel half (`1..=32`).
    half_bits: u32,
    half_mask: u64,
    round_keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `0..length` selected by `key`. Distinct keys give
    /// (pseudo-)independent permutations.
    ///
    /// # Panics
    /// If `length == 0`.
    pub fn new(length: u64, key: u64) -> Permutation {
        assert!(length > 0, "permutation length must be at least 1");
        // Bits needed to represent `length - 1`, rounded up to an even
        // count (at least 2) so the two Feistel halves have equal width. The
        // domain is then < 4 * length, so cycle walking takes < 4 tries on
        // average.
        let bits = u64::BITS - (length - 1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let half_mask = u64::MAX >> (u64::BITS - half_bits);
        let mut round_keys = [0; ROUNDS];
        for (round, round_key) in (0u64..).zip(round_keys.iter_mut()) {
            *round_key = hash(key, &[round]);
        }
        Permutation {
            length,
            half_bits,
            half_mask,
            round_keys,
        }
    }

    /// The size of the permuted index space.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The image of `x` under the permutation.
    ///
    /// # Panics
    /// If `x >= length` (a value outside the range might sit on a cycle that
    /// never re-enters it, so cycle walking would not terminate).
    pub fn apply(&self, x: u64) -> u64 {
        assert!(x < self.length, "{x} is outside 0..{}", self.length);
        // Cycle walking: the Feistel network permutes the larger domain, so
        // following the cycle of `x` must come back into `0..length` (at the
        // latest at `x` itself). The first value found there is the image of
        // `x` under the induced permutation of `0..length`.
        let mut y = self.feistel(x);
        while y >= self.length {
            y = self.feistel(y);
        }
        y
    }

    /// One pass of the Feistel network over the full `2^(2h)` domain.
    fn feistel(&self, x: u64) -> u64 {
        let mut left = x >> self.half_bits;
        let mut right = x & self.half_mask;
        for &round_key in &self.round_keys {
            // (L, R) -> (R, L ^ F(R)) is invertible for any round function F,
            // so F only needs to be a good keyed hash, not a bijection.
            let mixed = left ^ (mix64(right ^ round_key) & self.half_mask);
            left = right;
            right = mixed;
        }
        (left << self.half_bits) | right
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_bijection(length: u64, key: u64) {
        let permutation = Permutation::new(length, key);
        let mut seen = vec![false; length as usize];
        for x in 0..length {
            let y = permutation.apply(x);
            assert!(y < length, "length {length}: {x} -> {y}");
            assert!(!seen[y as usize], "length {length}: {y} hit twice");
            seen[y as usize] = true;
        }
    }

    #[test]
    fn is_a_bijection_for_small_and_awkward_lengths() {
        for length in (1..=70).chain([97, 127, 128, 129, 255, 256, 257, 1000, 4099, 65536]) {
            for key in 0..4 {
                assert_bijection(length, key);
            }
        }
    }

    #[test]
    fn domain_is_the_smallest_even_power_of_two() {
        let half_bits = |length| Permutation::new(length, 0).half_bits;
        assert_eq!(half_bits(1), 1);
        assert_eq!(half_bits(4), 1);
        assert_eq!(half_bits(5), 2);
        assert_eq!(half_bits(16), 2);
        assert_eq!(half_bits(17), 3);
        assert_eq!(half_bits(1 << 40), 20);
        assert_eq!(half_bits((1 << 40) + 1), 21);
        assert_eq!(half_bits(u64::MAX), 32);
    }

    #[test]
    fn feistel_is_a_bijection_on_its_full_domain() {
        let permutation = Permutation::new(1 << 10, 7);
        let mut seen = vec![false; 1 << 10];
        for x in 0..1 << 10 {
            let y = permutation.feistel(x) as usize;
            assert!(!seen[y]);
            seen[y] = true;
        }
    }

    #[test]
    fn huge_lengths_stay_in_range_and_injective_on_a_sample() {
        for length in [(1u64 << 40) + 3, (1 << 63) + 1, u64::MAX] {
            let permutation = Permutation::new(length, 42);
            let inputs: Vec<u64> = (0..1000).chain(length - 1000..length).collect();
            let mut outputs: Vec<u64> = inputs.iter().map(|&x| permutation.apply(x)).collect();
            assert!(outputs.iter().all(|&y| y < length));
            outputs.sort_unstable();
            outputs.dedup();
            assert_eq!(outputs.len(), inputs.len());
        }
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn apply_rejects_values_outside_the_range() {
        Permutation::new(10, 0).apply(10);
    }

    #[test]
    fn all_orders_of_three_elements_occur() {
        // With 1-bit halves the Feistel network is at its weakest; check that
        // cycle walking still reaches all 3! orders, each roughly 1/6 of the time.
        let mut counts = std::collections::HashMap::new();
        let keys = 6000;
        for key in 0..keys {
            let permutation = Permutation::new(3, key);
            let order: Vec<u64> = (0..3).map(|x| permutation.apply(x)).collect();
            *counts.entry(order).or_insert(0u64) += 1;
        }
        assert_eq!(counts.len(), 6, "{counts:?}");
        for &count in counts.values() {
            assert!((800..1200).contains(&count), "{counts:?}");
        }
    }
}
