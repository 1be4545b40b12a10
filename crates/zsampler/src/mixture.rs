//! Weighted mixtures of several sources, each drawn in its own order.
//!
//! The positions `p = step * batch_size + k` of a mixture are dealt to its
//! sources by a balanced binary tree over the sources: a node that has seen
//! `t` positions before this one, with weight `l` on its left and `r` on its
//! right, has sent `floor(t * l / (l + r))` of them left; the position goes
//! left when that count grows with it, right otherwise. Descending the tree
//! gives the source `j` of a position *and* how many positions source `j`
//! got before it, `n`, in O(log sources) exact integer steps. Source `j`
//! then serves `n` as its own sampler would serve position `n` (its mode,
//! its seed, its epochs), so a small source repeats while a big one is
//! still in its first epoch, and every index is a pure function of
//! `(seed, step, position, shard)`.
//!
//! Every node rounds its split down, so a source's running count stays
//! within the tree's depth, `ceil(log2(sources))`, of its weighted share of
//! the positions, forever: [`Proportions::Exact`] batches hold their
//! weighted counts (two sources: rounded down or up) without drift.
//!
//! [`Proportions::Drawn`] keeps those counts per window of [`DRAW_WINDOW`]
//! positions and arranges each window at random: a binary tree halves the
//! window down to leaves of [`DRAW_LEAF`] positions, every node deals its
//! sources' counts to its halves by a keyed hypergeometric draw (what a
//! uniform arrangement of the window would put there), and every leaf
//! shuffles its own. A batch walks only the nodes over its positions, so
//! it costs O(log window + batch), and every window holds the exact counts.
//!
//! Either way a source's positions within a batch are consecutive positions
//! of that source, so each source serves its part of a batch as one run of
//! its sampler (`Sampler::positions_into`), at the cost of a plain batch.

use crate::error::SamplerError;
use crate::mode::Mode;
use crate::random::{counter_word, div_rem, hash, sample_seeds, uniform_below};
use crate::sampler::Sampler;

/// Positions per window of [`Proportions::Drawn`]: a power of two, far
/// above any batch, so a batch's counts are a draw from the window's.
pub const DRAW_WINDOW: u64 = 1 << 20;

/// The most positions a leaf of a drawn window's tree holds: a node this
/// small shuffles its positions' sources instead of halving again.
pub const DRAW_LEAF: u64 = 64;

/// How many times a window of [`DRAW_WINDOW`] positions halves before its
/// nodes are leaves: `log2(DRAW_WINDOW / DRAW_LEAF)`, plus one for the
/// rounding up of odd halves in a shorter last window.
const DRAW_DEPTH: usize = (DRAW_WINDOW / DRAW_LEAF).ilog2() as usize + 1;

/// The largest weight total whose placements are tabulated
/// ([`Mixture`]'s `period`): 64 Ki entries, 512 KiB.
const PERIOD_TABLE_MAX: u64 = 1 << 16;

/// Domain-separation tags of the mixture's random streams.
const SOURCE_SEED_STREAM: u64 = 0x6d69_7873_0000_0004;
const DRAW_STREAM: u64 = 0x6472_6177_0000_0005;

/// The largest total of the integer weights: exact integer splits need
/// integer weights, and `2^32` keeps `t * weight` within `u128` for every
/// position a `u64` step can reach.
const WEIGHT_TOTAL: f64 = (1u64 << 32) as f64;

/// How a mixture's batches hold its sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proportions {
    /// Every batch holds each source's weighted count, rounded, and the
    /// running counts never drift from the weights.
    Exact,
    /// Each batch's counts are drawn (a batch is a random draw from a window
    /// of [`DRAW_WINDOW`] positions that holds the exact counts).
    Drawn,
}

/// One source of a mixture: how many indices it has and its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixtureSource {
    pub length: u64,
    pub mode: Mode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Child {
    Source(usize),
    Node(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    left_weight: u128,
    weight: u128,
    left: Child,
    right: Child,
}

/// How positions are dealt to the sources under one set of weights: the
/// tree of integer splits, and its placements tabulated when its period is
/// short.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Split {
    weights: Vec<u64>,
    nodes: Vec<Node>,
    root: Child,
    /// The tree's sources of positions `0..W` (`W` the weights' total,
    /// when small): position `p`'s is `period[p % W]`, since every `W`
    /// positions give source `j` exactly `weights[j]` of them.
    period: Vec<u32>,
}

/// The weights from one step on: the positions before it, and how many
/// each source got (the counts its positions continue from).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Phase {
    first_step: u64,
    start: u128,
    base: Vec<u128>,
    split: Split,
}

/// A weighted mixture of sources, sharded like a [`Sampler`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mixture {
    /// One unsharded sampler per source, batch size 1: position `n` of
    /// source `j` is `orders[j]`'s index at position `n`.
    orders: Vec<Sampler>,
    /// The weights' phases, by first step; the first starts at step 0.
    phases: Vec<Phase>,
    proportions: Proportions,
    batch_size: usize,
    seed: u64,
    shard_index: u64,
    shard_count: u64,
}

/// What a mixture's step holds: per sample, its source and its index in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MixtureBatch {
    pub sources: Vec<u32>,
    pub indices: Vec<u64>,
}

impl Mixture {
    /// The mixture of `sources` by `weights` (positive, finite; only their
    /// ratios matter), `batch_size` positions per step, unsharded. Weights
    /// with up to six decimals (0.7, 0.25, 70) are split exactly in their
    /// ratios; others to within 2^-32 of them.
    pub fn new(
        sources: &[MixtureSource],
        weights: &[f64],
        batch_size: usize,
        seed: u64,
        proportions: Proportions,
    ) -> Result<Mixture, SamplerError> {
        if sources.is_empty() || sources.len() != weights.len() {
            return Err(SamplerError::BadMixture {
                why: "needs one weight per source, and at least one source",
            });
        }
        if sources.len() > u32::MAX as usize {
            return Err(SamplerError::BadMixture {
                why: "has more sources than a u32 numbers",
            });
        }
        if batch_size > u32::MAX as usize {
            return Err(SamplerError::BadMixture {
                why: "batch size is over 2^32 - 1",
            });
        }
        let split = Split::new(weights)?;
        let orders = sources
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let seed = hash(seed, &[SOURCE_SEED_STREAM, j as u64]);
                Sampler::new(s.length, 1, s.mode, seed)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Mixture {
            phases: vec![Phase {
                first_step: 0,
                start: 0,
                base: vec![0; orders.len()],
                split,
            }],
            orders,
            proportions,
            batch_size,
            seed,
            shard_index: 0,
            shard_count: 1,
        })
    }

    /// This mixture with weights that change: from each `(step, weights)`
    /// of `changes` on (steps increasing, the first above 0) batches follow
    /// those weights. Each source's positions continue where they were, so
    /// it keeps its order and epochs across a change, and every step is
    /// still computed directly (in O(changes) for the phase's start).
    pub fn with_schedule(mut self, changes: &[(u64, Vec<f64>)]) -> Result<Mixture, SamplerError> {
        self.phases.truncate(1);
        for (step, weights) in changes {
            let last = self.phases.last().expect("the first phase");
            if *step <= last.first_step {
                return Err(SamplerError::BadMixture {
                    why: "schedule steps must increase, from above 0",
                });
            }
            if weights.len() != self.orders.len() {
                return Err(SamplerError::BadMixture {
                    why: "needs one weight per source in every change",
                });
            }
            let start = u128::from(*step) * self.batch_size as u128;
            let before = last.split.counts(start - last.start);
            let base = last.base.iter().zip(before).map(|(a, b)| a + b).collect();
            let split = Split::new(weights)?;
            self.phases.push(Phase {
                first_step: *step,
                start,
                base,
                split,
            });
        }
        Ok(self)
    }

    /// This mixture restricted to shard `index` of `count`, as
    /// [`Sampler::with_shard`].
    pub fn with_shard(self, index: u64, count: u64) -> Result<Mixture, SamplerError> {
        // The sampler's checks, on a stand-in of this batch size.
        Sampler::new(1, self.batch_size, Mode::Sequential, 0)?.with_shard(index, count)?;
        Ok(Mixture {
            shard_index: index,
            shard_count: count,
            ..self
        })
    }

    /// The global batch size.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Samples per batch of this shard.
    pub fn local_batch_size(&self) -> usize {
        self.batch_size / self.shard_count as usize
    }

    /// This mixture's shard as (index, count).
    pub fn shard(&self) -> (u64, u64) {
        (self.shard_index, self.shard_count)
    }

    /// The number of sources.
    pub fn sources(&self) -> usize {
        self.orders.len()
    }

    /// Each source's length.
    pub fn lengths(&self) -> Vec<u64> {
        self.orders.iter().map(Sampler::length).collect()
    }

    /// Each source's mode.
    pub fn modes(&self) -> Vec<Mode> {
        self.orders.iter().map(Sampler::mode).collect()
    }

    /// The weights as used from step 0: integers in the ratios of those
    /// given ([`Mixture::new`]).
    pub fn weights(&self) -> &[u64] {
        &self.phases[0].split.weights
    }

    /// The weight changes as used: (step, integer weights) for each.
    pub fn schedule(&self) -> Vec<(u64, Vec<u64>)> {
        self.phases[1..]
            .iter()
            .map(|phase| (phase.first_step, phase.split.weights.clone()))
            .collect()
    }

    /// The phase that holds `step`.
    fn phase(&self, step: u64) -> (usize, &Phase) {
        let k = self.phases.partition_point(|p| p.first_step <= step) - 1;
        (k, &self.phases[k])
    }

    /// How batches hold the sources.
    pub fn proportions(&self) -> Proportions {
        self.proportions
    }

    /// The seed; each source draws its order from a seed derived from it.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// This shard's part of `step`: each sample's source and its index in
    /// that source.
    pub fn batch(&self, step: u64) -> MixtureBatch {
        let local = self.local_batch_size();
        // A step lies in one phase; positions count from its start.
        let (k, phase) = self.phase(step);
        let first = u128::from(step) * self.batch_size as u128
            + u128::from(self.shard_index) * local as u128
            - phase.start;
        let mut sources = Vec::with_capacity(local);
        let before = match self.proportions {
            Proportions::Exact => phase.split.sources_into(first, local, &mut sources),
            Proportions::Drawn => self.draw(k, first, local, Some(&mut sources)),
        };
        // Each source's samples in the batch are its next positions: one
        // run of its sampler each, dealt back to the slots in order.
        let mut taken = vec![0usize; self.orders.len()];
        for &source in &sources {
            taken[source as usize] += 1;
        }
        let runs: Vec<Vec<u64>> = taken
            .iter()
            .enumerate()
            .map(|(j, &count)| {
                let mut run = vec![0; count];
                if count > 0 {
                    self.orders[j].positions_into(phase.base[j] + before[j], &mut run);
                }
                run
            })
            .collect();
        let mut next = vec![0usize; self.orders.len()];
        let indices = sources
            .iter()
            .map(|&source| {
                let j = source as usize;
                next[j] += 1;
                runs[j][next[j] - 1]
            })
            .collect();
        MixtureBatch { sources, indices }
    }

    /// One seed per sample of [`Mixture::batch`]`(step)`, as
    /// [`Sampler::sample_seeds`].
    pub fn sample_seeds(&self, step: u64) -> Vec<u64> {
        let first = self.shard_index * self.local_batch_size() as u64;
        sample_seeds(self.seed, step, first, self.local_batch_size())
    }

    /// How many of the first `positions` positions go to each source.
    pub fn counts(&self, positions: u128) -> Vec<u128> {
        let k = self.phases.partition_point(|p| p.start <= positions) - 1;
        let phase = &self.phases[k];
        let within = positions - phase.start;
        let counts = match self.proportions {
            Proportions::Exact => phase.split.counts(within),
            Proportions::Drawn => self.draw(k, within, 0, None),
        };
        phase.base.iter().zip(counts).map(|(a, b)| a + b).collect()
    }

    /// Deals positions `first..first + count` of phase `k` (counted from
    /// its start) under drawn proportions: pushes each one's source to
    /// `out`, when given, and returns how many positions each source got
    /// in the phase before `first`.
    fn draw(
        &self,
        k: usize,
        first: u128,
        count: usize,
        mut out: Option<&mut Vec<u32>>,
    ) -> Vec<u128> {
        let split = &self.phases[k].split;
        // A phase's last window ends with the phase.
        let phase_end = self
            .phases
            .get(k + 1)
            .map_or(u128::MAX, |next| next.start - self.phases[k].start);
        let end = first + count as u128;
        let sources = split.weights.len();
        let mut held = vec![0u64; sources];
        let mut scratch = vec![0u64; 2 * sources * DRAW_DEPTH];
        let mut before = None;
        let mut window = first / u128::from(DRAW_WINDOW);
        loop {
            let from = window * u128::from(DRAW_WINDOW);
            let to = (from + u128::from(DRAW_WINDOW)).min(phase_end);
            let at_start = split.counts(from);
            for ((held, at_end), at_start) in held.iter_mut().zip(split.counts(to)).zip(&at_start) {
                // At most a window's positions.
                *held = (at_end - at_start) as u64;
            }
            let mut words = vec![DRAW_STREAM, window as u64, (window >> 64) as u64];
            if k > 0 {
                words.push(k as u64);
            }
            let mut walk = Walk {
                key: hash(self.seed, &words),
                range: ((first.max(from) - from) as u64, (end.min(to) - from) as u64),
                tally: before.is_none().then_some(at_start),
                out: out.as_deref_mut(),
            };
            walk.node(0, (to - from) as u64, &held, &mut scratch);
            before = before.or(walk.tally);
            if to >= end {
                return before.expect("the first window tallies");
            }
            window += 1;
        }
    }
}

/// A walk down a drawn window's tree ([`Mixture::draw`]) over the window's
/// positions `range`.
struct Walk<'a> {
    key: u64,
    range: (u64, u64),
    /// The counts of the positions before the range, when wanted.
    tally: Option<Vec<u128>>,
    /// Where the sources of the range's positions go, when wanted.
    out: Option<&'a mut Vec<u32>>,
}

impl Walk<'_> {
    /// Visits the node of window positions `a..b`, which holds `counts` of
    /// each source; `scratch` (two counts per level below) holds its
    /// children's.
    fn node(&mut self, a: u64, b: u64, counts: &[u64], scratch: &mut [u64]) {
        let (lo, hi) = self.range;
        if b <= lo {
            if let Some(tally) = &mut self.tally {
                for (t, &c) in tally.iter_mut().zip(counts) {
                    *t += u128::from(c);
                }
            }
            return;
        }
        // Past the range; a node holding the empty range's start (a count
        // of positions before it) is still visited.
        if a >= hi && a >= lo {
            return;
        }
        let key = hash(self.key, &[a, b]);
        if b - a <= DRAW_LEAF {
            return self.leaf(a, b, key, counts);
        }
        // The halves of a uniform arrangement hold hypergeometric counts:
        // drawn source by source, each given those before it.
        let sources = counts.len();
        let (left, rest) = scratch.split_at_mut(sources);
        let (right, deeper) = rest.split_at_mut(sources);
        let (mut total, mut slots) = (b - a, (b - a) / 2);
        for (j, &count) in counts.iter().enumerate() {
            let taken = match j + 1 == sources {
                true => slots,
                false => hypergeometric(total, count, slots, counter_word(key, j as u64)),
            };
            (left[j], right[j]) = (taken, count - taken);
            total -= count;
            slots -= taken;
        }
        let mid = a + (b - a) / 2;
        self.node(a, mid, left, deeper);
        self.node(mid, b, right, deeper);
    }

    /// A leaf: its sources (`counts` of each) shuffled by `key`.
    fn leaf(&mut self, a: u64, b: u64, key: u64, counts: &[u64]) {
        let mut arranged = [0u32; DRAW_LEAF as usize];
        let mut at = 0;
        for (j, &count) in counts.iter().enumerate() {
            arranged[at..at + count as usize].fill(j as u32);
            at += count as usize;
        }
        let arranged = &mut arranged[..at];
        // Fisher–Yates, draw `i` keyed by its place in the leaf's stream.
        for i in (1..arranged.len()).rev() {
            let draw = |attempt| counter_word(key, ((i as u64) << 32) | attempt);
            arranged.swap(i, uniform_below(i as u64 + 1, draw) as usize);
        }
        let (lo, hi) = self.range;
        for (position, &source) in (a..b).zip(arranged.iter()) {
            if position < lo {
                if let Some(tally) = &mut self.tally {
                    tally[source as usize] += 1;
                }
            } else if position < hi {
                if let Some(out) = &mut self.out {
                    out.push(source);
                }
            }
        }
    }
}

/// A draw of how many of `marked` among `total` items a uniform choice of
/// `chosen` of them holds (hypergeometric), from the random word `word`:
/// its normal approximation (the deviate a sum of four uniforms), rounded
/// and kept to the possible counts. The mean and spread are those of the
/// true draw, and a node's counts add up exactly whatever is drawn; only
/// `f64` arithmetic and `sqrt` are used, which IEEE 754 makes the same on
/// every machine.
fn hypergeometric(total: u64, marked: u64, chosen: u64, word: u64) -> u64 {
    let low = chosen.saturating_sub(total - marked);
    let high = marked.min(chosen);
    if low == high {
        return low;
    }
    let (n, k, m) = (total as f64, marked as f64, chosen as f64);
    let mean = m * k / n;
    let variance = mean * (1.0 - k / n) * (n - m) / (n - 1.0);
    // Four uniforms of 16 bits, centred: sum - 2 has variance 1/3.
    let sum: f64 = (0..4)
        .map(|i| (((word >> (16 * i)) & 0xffff) as f64 + 0.5) / 65536.0)
        .sum();
    let deviate = (sum - 2.0) * 3f64.sqrt();
    (mean + deviate * variance.sqrt())
        .round()
        .clamp(low as f64, high as f64) as u64
}

impl Split {
    /// The split of positions by `weights` (positive, finite; only their
    /// ratios matter).
    fn new(weights: &[f64]) -> Result<Split, SamplerError> {
        let sum: f64 = weights.iter().sum();
        if weights.iter().any(|w| !w.is_finite() || *w <= 0.0) || !sum.is_finite() {
            return Err(SamplerError::BadMixture {
                why: "weights must be positive and finite",
            });
        }
        let weights = integer_weights(weights, sum);
        let mut nodes = Vec::new();
        let root = build(&weights, 0, weights.len(), &mut nodes);
        let mut split = Split {
            weights,
            nodes,
            root,
            period: Vec::new(),
        };
        let total: u64 = split.weights.iter().sum();
        if total <= PERIOD_TABLE_MAX {
            split.period = (0..u128::from(total))
                .map(|p| split.descend(p).0 as u32)
                .collect();
        }
        Ok(split)
    }

    /// How many of the first `positions` positions go to each source.
    fn counts(&self, positions: u128) -> Vec<u128> {
        let mut counts = vec![0; self.weights.len()];
        let mut stack = vec![(self.root, positions)];
        while let Some((child, t)) = stack.pop() {
            match child {
                Child::Source(j) => counts[j] = t,
                Child::Node(i) => {
                    let node = &self.nodes[i];
                    let left = t * node.left_weight / node.weight;
                    stack.push((node.left, left));
                    stack.push((node.right, t - left));
                }
            }
        }
        counts
    }

    /// Pushes the sources of positions `first..first + count` to `out`,
    /// and returns how many positions each source got before `first`.
    fn sources_into(&self, first: u128, count: usize, out: &mut Vec<u32>) -> Vec<u128> {
        if self.period.is_empty() {
            out.extend((first..first + count as u128).map(|p| self.descend(p).0 as u32));
        } else {
            // The place in the period steps along with the position.
            let period = self.period.len();
            let mut at = (first % period as u128) as usize;
            for _ in 0..count {
                out.push(self.period[at]);
                at += 1;
                if at == period {
                    at = 0;
                }
            }
        }
        self.counts(first)
    }

    /// The source of tree position `position` and the positions that
    /// source got before it, by walking down the tree.
    fn descend(&self, position: u128) -> (usize, u128) {
        let (mut child, mut t) = (self.root, position);
        loop {
            match child {
                Child::Source(j) => return (j, t),
                Child::Node(i) => {
                    let node = &self.nodes[i];
                    // before = floor(t * l / w); the position goes left when
                    // floor((t + 1) * l / w) is one more, that is when the
                    // remainder plus l reaches w (l < w).
                    let (before, rest) = div_rem(t * node.left_weight, node.weight);
                    (child, t) = if rest + node.left_weight >= node.weight {
                        (node.left, before)
                    } else {
                        (node.right, t - before)
                    };
                }
            }
        }
    }
}

/// Integer weights in the ratios of `weights` (positive, summing to `sum`):
/// the weights themselves scaled by the least power of ten (up to 10^6)
/// that makes them all whole, so 0.7 and 0.3 split exactly 7:3, else
/// weights scaled to a total of 2^32, each at least 1 (a tiny weight still
/// gets its tiny share).
fn integer_weights(weights: &[f64], sum: f64) -> Vec<u64> {
    for digits in 0..=6 {
        let scale = 10f64.powi(digits);
        let whole = weights.iter().all(|w| {
            let scaled = w * scale;
            (scaled - scaled.round()).abs() <= 1e-9 * scaled.max(1.0)
        });
        if whole && sum * scale <= WEIGHT_TOTAL {
            let scaled: Vec<u64> = weights.iter().map(|w| (w * scale).round() as u64).collect();
            let divisor = scaled.iter().copied().fold(0, gcd);
            return scaled.iter().map(|w| w / divisor).collect();
        }
    }
    weights
        .iter()
        .map(|w| ((w / sum * WEIGHT_TOTAL).round() as u64).max(1))
        .collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The subtree of sources `from..to`, balanced by source count.
fn build(weights: &[u64], from: usize, to: usize, nodes: &mut Vec<Node>) -> Child {
    if to - from == 1 {
        return Child::Source(from);
    }
    let mid = from + (to - from) / 2;
    let sum = |range: std::ops::Range<usize>| weights[range].iter().map(|&w| u128::from(w)).sum();
    let left = build(weights, from, mid, nodes);
    let right = build(weights, mid, to, nodes);
    nodes.push(Node {
        left_weight: sum(from..mid),
        weight: sum(from..to),
        left,
        right,
    });
    Child::Node(nodes.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::counter_word;

    /// The drawn splits have the mean and variance of the hypergeometric
    /// draws they stand for, and stay within the possible counts.
    #[test]
    fn hypergeometric_draws_have_the_true_mean_and_spread() {
        let cases = [
            (128, 12, 64),
            (128, 1, 64),
            (127, 100, 63),
            (1 << 20, 700_000, 1 << 19),
        ];
        for (total, marked, chosen) in cases {
            let draws: Vec<f64> = (0..40_000)
                .map(|n| hypergeometric(total, marked, chosen, counter_word(17, n)) as f64)
                .collect();
            let (n, k, m) = (total as f64, marked as f64, chosen as f64);
            let mean = m * k / n;
            let variance = mean * (1.0 - k / n) * (n - m) / (n - 1.0);
            let got_mean = draws.iter().sum::<f64>() / draws.len() as f64;
            let got_variance =
                draws.iter().map(|d| (d - got_mean).powi(2)).sum::<f64>() / draws.len() as f64;
            let low = chosen.saturating_sub(total - marked) as f64;
            let high = marked.min(chosen) as f64;
            assert!(draws.iter().all(|&d| (low..=high).contains(&d)));
            // The mean's standard error is sqrt(variance / 40000), under
            // 0.005 sd of a draw; rounding adds up to 1/12 to the variance.
            assert!(
                (got_mean - mean).abs() < 0.03 * variance.sqrt().max(1.0),
                "{total} {marked} {chosen}: mean {got_mean}, not {mean}"
            );
            assert!(
                (got_variance - variance).abs() < 0.1 * variance + 1.0 / 12.0,
                "{total} {marked} {chosen}: variance {got_variance}, not {variance}"
            );
        }
    }

    #[test]
    fn the_period_table_places_as_the_tree_does() {
        let sources = [MixtureSource {
            length: 10,
            mode: Mode::Sequential,
        }; 5];
        let mix = Mixture::new(
            &sources,
            &[0.35, 0.25, 0.2, 0.15, 0.05],
            8,
            0,
            Proportions::Exact,
        )
        .unwrap();
        assert_eq!(mix.weights(), [7, 5, 4, 3, 1]);
        let split = &mix.phases[0].split;
        assert_eq!(split.period.len(), 20);
        let far = [u128::from(u64::MAX) - 3, 1 << 100];
        for p in (0..200).chain(far) {
            let mut out = Vec::new();
            split.sources_into(p, 1, &mut out);
            assert_eq!(out[0] as usize, split.descend(p).0, "position {p}");
        }
        let fine = Mixture::new(
            &sources[..2],
            &[1.0, 3.0f64.sqrt()],
            8,
            0,
            Proportions::Exact,
        )
        .unwrap();
        assert!(
            fine.phases[0].split.period.is_empty(),
            "weights of 2^32 in all: no table"
        );
    }
}
