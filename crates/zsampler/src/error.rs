use std::fmt;

/// Why a [`Sampler`](crate::Sampler) could not be constructed or sharded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SamplerError {
    /// The index space `0..length` is empty, so there is nothing to sample.
    ZeroLength,
    /// A batch must hold at least one index.
    ZeroBatchSize,
    /// A sharded sampler needs at least one shard.
    ZeroShardCount,
    /// The shard index must be below the shard count.
    ShardIndexOutOfRange { index: u64, count: u64 },
    /// Every shard gets the same part of a global batch, so the global batch
    /// size must be a multiple of the shard count.
    BatchNotDivisible { batch_size: usize, count: u64 },
    /// A finite pass needs at least one epoch.
    ZeroEpochs,
    /// Iid draws with replacement: it has no epochs to pass over.
    IidHasNoEpochs,
    /// The pass has more than `u64::MAX` steps.
    TooManySteps { epochs: u64 },
    /// The sources or weights of a mixture do not describe one.
    BadMixture { why: &'static str },
}

impl fmt::Display for SamplerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SamplerError::ZeroLength => f.write_str("sampler length must be at least 1"),
            SamplerError::ZeroBatchSize => f.write_str("sampler batch size must be at least 1"),
            SamplerError::ZeroShardCount => f.write_str("shard count must be at least 1"),
            SamplerError::ShardIndexOutOfRange { index, count } => {
                write!(
                    f,
                    "shard index {index} is out of range for {count} shards (0..{count})"
                )
            }
            SamplerError::BatchNotDivisible { batch_size, count } => write!(
                f,
                "the global batch size {batch_size} is not divisible by the shard count {count}: \
                 every shard takes batch_size / count indices of each step"
            ),
            SamplerError::ZeroEpochs => f.write_str("a finite pass needs at least 1 epoch"),
            SamplerError::IidHasNoEpochs => f.write_str(
                "the IID mode draws with replacement and has no epochs: a finite pass \
                 needs SEQUENTIAL or SHUFFLE",
            ),
            SamplerError::TooManySteps { epochs } => {
                write!(f, "{epochs} epochs take more than 2**64 - 1 steps")
            }
            SamplerError::BadMixture { why } => write!(f, "a mixture {why}"),
        }
    }
}

impl std::error::Error for SamplerError {}
