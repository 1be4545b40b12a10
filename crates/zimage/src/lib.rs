//! Encoded images (JPEG, PNG, WebP) into fixed-shape samples: the pipeline an
//! image stream of the loader runs on its gather threads.
//!
//! [`Pipeline::run`] decodes one image ([`decode_region`]: of a JPEG, only
//! the region the box needs, and with `draft` at 1/2, 1/4 or 1/8 of its
//! size when the box is large enough), cuts the box its [`Crop`] places
//! (the whole image, a centre box, or a random-resized box drawn from the
//! sample's seed), resizes it to the output with a bilinear
//! filter that averages over every source pixel when shrinking (Pillow's
//! `BILINEAR`), mirrors it on a coin of the same seed, and writes `uint8`
//! pixels, or normalised `float32` values, into the caller's slot. Every
//! random choice is a function of the seed alone ([`Draws`]), so the same
//! sample gives the same pixels whichever thread, worker count or resumed
//! run produces it.
//!
//! The crate knows nothing of stores or batches; errors say what is wrong
//! with the image, and the loader adds which record it was.

mod crop;
mod decode;
mod error;
mod jpeg;
mod pipeline;

pub use crop::{Crop, CropBox, Draws};
pub use decode::{decode, decode_region, Channels, Decoded, Decoders, Format, Scale, Size, Wanted};
pub use error::ImageError;
pub use pipeline::{Normalize, Pipeline, Scratch, DEFAULT_MAX_PIXELS};
