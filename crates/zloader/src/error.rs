//! The one error type of the loader.

use std::io;

/// Why a loader could not start, or could not deliver a step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoaderError {
    /// The options or streams do not describe a loader that can run.
    #[error("invalid loader argument: {0}")]
    InvalidArgument(String),

    /// A stream's store holds fewer records than the sampler draws from.
    #[error("stream {stream} holds {len} records, fewer than the sampler's length {length}")]
    StreamTooShort {
        stream: usize,
        len: u64,
        length: u64,
    },

    /// The store refused a gather of a step.
    #[error("step {step}, stream {stream}: {source}")]
    Gather {
        step: u64,
        stream: usize,
        #[source]
        source: zrecord::Error,
    },

    /// An image of an image stream could not be decoded.
    #[error("step {step}, stream {stream}: record {index}: {source}")]
    Image {
        step: u64,
        stream: usize,
        index: u64,
        #[source]
        source: zimage::ImageError,
    },

    /// The allocator refused a batch buffer.
    #[error("step {step}: could not allocate a {bytes}-byte batch buffer")]
    OutOfMemory { step: u64, bytes: usize },

    /// A worker panicked while gathering a step.
    #[error("a loader worker panicked while gathering step {step}")]
    WorkerPanicked { step: u64 },

    /// The loader was closed; it delivers nothing more.
    #[error("the loader is closed")]
    Closed,

    /// The sampler's finite pass is over: every one of its `steps` steps
    /// was delivered.
    #[error("the pass is over: all {steps} steps were delivered")]
    PassEnded { steps: u64 },

    /// The loader was created in another process and this one is a forked
    /// child of it: its worker threads do not exist here.
    #[error("the loader was created in process {owner}, not in this process ({current}); create a new loader after fork()")]
    ForeignProcess { owner: u32, current: u32 },

    /// The operating system refused to start a worker thread.
    #[error("could not start a loader worker thread: {0}")]
    Spawn(#[source] io::Error),
}

/// Shorthand for results of loader operations.
pub type Result<T, E = LoaderError> = std::result::Result<T, E>;
