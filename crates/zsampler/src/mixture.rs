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
//! [`Proportions::Drawn`] first moves each position within its window of
//! [`DRAW_WINDOW`] positions by a keyed permutation of the window: every
//! window holds the exact counts, but a batch takes a random draw of them.

use crate::error::SamplerError;
use crate::mode::Mode;
use crate::permutation::Permutation;
use crate::random::{div_rem, hash, sample_seeds};
use crate::sampler::Sampler;

/// Positions per window of [`Proportions::Drawn`]: a power of two, far
/// above any batch, so a batch's counts are a draw from the window's.
pub const DRAW_WINDOW: u64 = 1 << 20;

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
    /// The tree's placements of positions `0..W` (`W` the weights' total,
    /// when small): (source, positions it got before). Position `p` is
    /// then `period[p % W]` plus `p / W` whole periods, each of which gives
    /// source `j` exactly `weights[j]` positions.
    period: Vec<(u32, u32)>,
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
        let first = u128::from(step) * self.batch_size as u128
            + u128::from(self.shard_index) * local as u128;
        let mut out = MixtureBatch {
            sources: Vec::with_capacity(local),
            indices: Vec::with_capacity(local),
        };
        let mut cache = OrderCache::new(self.orders.len());
        let mut window = None;
        // A step lies in one phase; positions count from its start.
        let (k, phase) = self.phase(step);
        let split = &phase.split;
        let first = first - phase.start;
        // Exact proportions with a period table: the place in the period
        // steps along with the position.
        let stepped = self.proportions == Proportions::Exact && !split.period.is_empty();
        let (mut periods, mut at) = match stepped {
            true => div_rem(first, split.period.len() as u128),
            false => (0, 0),
        };
        for position in first..first + local as u128 {
            let (source, n) = if stepped {
                let placed = split.tabulated(periods, at as usize);
                at += 1;
                if at == split.period.len() as u128 {
                    (periods, at) = (periods + 1, 0);
                }
                placed
            } else {
                split.place(self.drawn(k, position, &mut window))
            };
            let n = phase.base[source] + n;
            out.sources.push(source as u32);
            out.indices
                .push(cache.index(source, &self.orders[source], n));
        }
        out
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
        let counts = phase.split.counts(positions - phase.start);
        phase.base.iter().zip(counts).map(|(a, b)| a + b).collect()
    }

    /// The place `position` (counted from phase `k`'s start) takes in the
    /// phase's tree: itself, or for drawn proportions its place in its
    /// window's permutation; a phase's last window ends with the phase.
    /// (`last`: the window and permutation of the position before.)
    fn drawn(&self, k: usize, position: u128, last: &mut Option<(u128, Permutation)>) -> u128 {
        if self.proportions == Proportions::Exact {
            return position;
        }
        let window = position / u128::from(DRAW_WINDOW);
        let offset = (position % u128::from(DRAW_WINDOW)) as u64;
        let permutation = match last {
            Some((w, permutation)) if *w == window => permutation,
            _ => {
                let from = window * u128::from(DRAW_WINDOW);
                let len = match self.phases.get(k + 1) {
                    Some(next) => (next.start - self.phases[k].start - from)
                        .min(u128::from(DRAW_WINDOW)) as u64,
                    None => DRAW_WINDOW,
                };
                let mut words = vec![DRAW_STREAM, window as u64, (window >> 64) as u64];
                if k > 0 {
                    words.push(k as u64);
                }
                let key = hash(self.seed, &words);
                &mut last.insert((window, Permutation::new(len, key))).1
            }
        };
        window * u128::from(DRAW_WINDOW) + u128::from(permutation.apply(offset))
    }
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
                .map(|p| {
                    let (source, before) = split.descend(p);
                    (source as u32, before as u32)
                })
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

    /// The source of tree position `position` and the positions that
    /// source got before it.
    fn place(&self, position: u128) -> (usize, u128) {
        if self.period.is_empty() {
            return self.descend(position);
        }
        let (periods, at) = div_rem(position, self.period.len() as u128);
        self.tabulated(periods, at as usize)
    }

    /// [`Split::place`] of the position `at` places into the period after
    /// `periods` whole periods, from the table.
    fn tabulated(&self, periods: u128, at: usize) -> (usize, u128) {
        let (source, before) = self.period[at];
        let source = source as usize;
        (
            source,
            periods * u128::from(self.weights[source]) + u128::from(before),
        )
    }

    /// [`Split::place`] by walking down the tree.
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

/// The last shuffle permutation each source used: consecutive positions of
/// a source mostly fall in one epoch, whose permutation is then built once
/// per batch rather than once per sample.
struct OrderCache {
    last: Vec<Option<Walk>>,
}

/// Where a source's last position fell: the next position, its epoch and
/// offset, and (shuffled) the epoch's permutation.
struct Walk {
    next: u128,
    epoch: u128,
    offset: u64,
    permutation: Option<Permutation>,
}

impl OrderCache {
    fn new(sources: usize) -> OrderCache {
        OrderCache {
            last: (0..sources).map(|_| None).collect(),
        }
    }

    /// Position `n` of source `j`, whose order is `order`. A source's
    /// positions in a batch mostly follow each other: the next one steps
    /// the last one's offset instead of dividing again.
    fn index(&mut self, j: usize, order: &Sampler, n: u128) -> u64 {
        if order.mode() == Mode::Iid {
            return order.index_at(n);
        }
        let length = order.length();
        let walk = match &mut self.last[j] {
            Some(walk) if walk.next == n => {
                walk.offset += 1;
                if walk.offset == length {
                    walk.offset = 0;
                    walk.epoch += 1;
                    walk.permutation = walk
                        .permutation
                        .as_ref()
                        .map(|_| order.epoch_permutation(walk.epoch));
                }
                walk
            }
            entry => {
                let (epoch, offset) = div_rem(n, u128::from(length));
                let permutation = match entry {
                    Some(Walk {
                        epoch: e,
                        permutation,
                        ..
                    }) if *e == epoch => permutation.take(),
                    _ => None,
                }
                .or_else(|| {
                    (order.mode() == Mode::Shuffle).then(|| order.epoch_permutation(epoch))
                });
                entry.insert(Walk {
                    next: n,
                    epoch,
                    offset: offset as u64,
                    permutation,
                })
            }
        };
        walk.next = n + 1;
        match &walk.permutation {
            Some(permutation) => permutation.apply(walk.offset),
            None => walk.offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(split.place(p), split.descend(p), "position {p}");
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
