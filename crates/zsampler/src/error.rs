use std::fmt;

/// Why a [`Sampler`](crate::Sampler) could not be constructed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SamplerError {
    /// The index space `0..length` is empty, so there is nothing to sample.
    ZeroLength,
    /// A batch must hold at least one index.
    ZeroBatchSize,
}

impl fmt::Display for SamplerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SamplerError::ZeroLength => f.write_str("sampler length must be at least 1"),
            SamplerError::ZeroBatchSize => f.write_str("sampler batch size must be at least 1"),
        }
    }
}

impl std::error::Error for SamplerError {}
