//! Execution machinery, independent of the format: the worker pool and the
//! shard crew that spread work over the cores (both per process, so a forked
//! child starts its own), read-ahead for cold batches, copies that bypass the
//! cache, and recycled batch memory (shared with other processes when asked).

pub(crate) mod batch_buffer;
pub(crate) mod cold_reads;
pub(crate) mod process_local;
pub(crate) mod shard_crew;
pub(crate) mod shared_memory;
pub(crate) mod streaming_copy;
pub(crate) mod thread_pool;
