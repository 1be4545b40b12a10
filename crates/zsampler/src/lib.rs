//! Index generation for an endless, step-based data loader.
//!
//! A [`Sampler`] produces, for every training step, a batch of `batch_size`
//! record indices from the index space `0..length`. There are three
//! [`Mode`]s:
//!
//! - [`Mode::Sequential`]: a sliding window over the circular index space;
//!   step `s` holds `(s * batch_size + k) mod length` for `k in 0..batch_size`.
//! - [`Mode::Iid`]: every position independently uniform over `0..length`,
//!   with replacement.
//! - [`Mode::Shuffle`]: without replacement. The stream of positions
//!   `p = s * batch_size + k` is cut into epochs of `length` positions and
//!   epoch `e` visits every index exactly once, in the order of a keyed
//!   pseudo-random [`Permutation`] derived from `(seed, e)`. Batches cross
//!   epoch boundaries seamlessly.
//!
//! # Finite passes
//!
//! [`Sampler::with_epochs`] makes a sampler that ends after a number of
//! epochs (Sequential or Shuffle), every index once per epoch; its last
//! batch is short or padded ([`LastBatch`]), and every shard runs the same
//! number of steps ([`finite_pass`]).
//!
//! # Mixtures
//!
//! A [`Mixture`] deals each step's positions to several sources by weight
//! (exactly, or drawn), each source keeping its own order and epochs
//! ([`mixture`]).
//!
//! # Packing
//!
//! [`pack`] places a window of variable-length samples into rows of a fixed
//! length, first-fit or best-fit ([`packing`]).
//!
//! # Shards
//!
//! [`Sampler::with_shard`]`(index, count)` keeps only the `index`-th of
//! `count` equal, contiguous parts of every global batch, so `count`
//! processes of a multi-host job see every index of a global step exactly
//! once between them (the global batch size must be divisible by `count`).
//!
//! # The pure-function property
//!
//! A batch depends only on `(length, batch_size, mode, seed, shard, step)`: no state
//! carries over from earlier steps. Randomness is counter-based (a hash of the
//! coordinates of each draw) and the shuffle is a bijection evaluated on
//! demand in O(1) memory, never a materialized, progressively consumed
//! array. So any step can be produced directly, in any order, on any worker,
//! and resuming a run exactly is just [`Sampler::seek`] to the saved step.
//!
//! ```
//! use zsampler::{Mode, Sampler};
//!
//! let mut sampler = Sampler::new(10, 4, Mode::Sequential, 0).unwrap();
//! assert_eq!(sampler.next_batch(), [0, 1, 2, 3]);
//! assert_eq!(sampler.next_batch(), [4, 5, 6, 7]);
//! assert_eq!(sampler.next_batch(), [8, 9, 0, 1]);
//!
//! let shuffled = Sampler::new(1_000_000, 256, Mode::Shuffle, 42).unwrap();
//! assert_eq!(shuffled.batch(123_456), shuffled.batch(123_456));
//! ```

mod error;
pub mod finite_pass;
pub mod mixture;
mod mode;
pub mod packing;
mod permutation;
mod random;
mod sampler;

pub use error::SamplerError;
pub use finite_pass::LastBatch;
pub use mixture::{Mixture, MixtureBatch, MixtureSource, Proportions};
pub use mode::Mode;
pub use packing::{pack, LongSamples, PackMethod, Packed, Piece};
pub use permutation::Permutation;
pub use random::counter_word;
pub use sampler::Sampler;
