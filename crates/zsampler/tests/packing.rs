//! Packing against a naive model of first-fit and best-fit (a scan of every
//! row), and the invariants: no token lost or duplicated, pieces inside
//! their rows and apart, segments numbered in order.

use proptest::prelude::*;
use zsampler::{pack, LongSamples, PackMethod, Piece};

/// The rows a naive packer chooses, piece by piece: (row, offset).
fn naive(
    lengths: &[u32],
    row_length: u32,
    method: PackMethod,
    long: LongSamples,
) -> Vec<(u32, u32)> {
    let mut fill: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for &len in lengths {
        if len > row_length && long == LongSamples::Drop {
            continue;
        }
        let mut left = len;
        while left > 0 {
            let piece = left.min(row_length);
            let fits = (0..fill.len()).filter(|&r| row_length - fill[r] >= piece);
            let row = match method {
                PackMethod::FirstFit => fits.min(),
                PackMethod::BestFit => fits.min_by_key(|&r| (row_length - fill[r], r)),
            };
            let row = row.unwrap_or_else(|| {
                fill.push(0);
                fill.len() - 1
            });
            out.push((row as u32, fill[row]));
            fill[row] += piece;
            left -= piece;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn packing_matches_the_naive_model_and_keeps_every_token(
        lengths in prop::collection::vec(0u32..60, 0..200),
        row_length in 1u32..50,
        best in any::<bool>(),
        drop in any::<bool>(),
    ) {
        let method = if best { PackMethod::BestFit } else { PackMethod::FirstFit };
        let long = if drop { LongSamples::Drop } else { LongSamples::Split };
        let packed = pack(&lengths, row_length, method, long);
        let placed: Vec<(u32, u32)> = packed.pieces.iter().map(|p| (p.row, p.offset)).collect();
        prop_assert_eq!(placed, naive(&lengths, row_length, method, long));

        // Every token of every kept sample exactly once, in order.
        let mut next = vec![0u32; lengths.len()];
        for p in &packed.pieces {
            prop_assert_eq!(p.start, next[p.sample as usize]);
            next[p.sample as usize] += p.len;
        }
        for (s, &len) in lengths.iter().enumerate() {
            let kept = if packed.dropped.contains(&(s as u32)) { 0 } else { len };
            prop_assert_eq!(next[s], kept);
            prop_assert_eq!(packed.dropped.contains(&(s as u32)), drop && len > row_length);
        }
        // Rows: pieces back to back from offset 0, within the row, segments 1, 2, ...
        let mut rows: Vec<Vec<&Piece>> = vec![Vec::new(); packed.rows as usize];
        for p in &packed.pieces {
            rows[p.row as usize].push(p);
        }
        for row in &rows {
            prop_assert!(!row.is_empty(), "no empty row");
            let mut at = 0;
            for (k, p) in row.iter().enumerate() {
                prop_assert_eq!((p.offset, p.segment), (at, k as u32 + 1));
                at += p.len;
            }
            prop_assert!(at <= row_length);
        }
    }
}
