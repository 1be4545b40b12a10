//! Why an image could not become pixels.

use thiserror::Error;

/// An encoded image that cannot be decoded, or a pipeline that cannot be
/// built. The loader adds which record it was.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ImageError {
    /// The record is empty.
    #[error("the image is empty (0 bytes)")]
    Empty,
    /// The bytes start with no magic of a format this crate reads.
    #[error("not a JPEG, PNG or WebP image (first bytes {0:02x?})")]
    UnknownFormat(Vec<u8>),
    /// The header declares more pixels than allowed: a decompression bomb,
    /// or an image far larger than training uses.
    #[error("{width}x{height} is over the limit of {limit} pixels")]
    TooLarge {
        width: usize,
        height: usize,
        limit: usize,
    },
    /// The decoder failed: truncated or damaged data.
    #[error("{format} decode failed: {reason}")]
    Decode {
        format: &'static str,
        reason: String,
    },
    /// A pipeline's parameters make no sense.
    #[error("invalid image pipeline: {0}")]
    InvalidPipeline(String),
}
