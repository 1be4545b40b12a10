//! The worker pool for compression and gathering, made safe across `fork()`.
//!
//! A forked child inherits the pool's bookkeeping but none of its threads, so
//! handing it work would wait forever: the pool is a [`ProcessLocal`], and a
//! child that asks for it gets a fresh pool of its own.

use crate::exec::process_local::ProcessLocal;

static POOL: ProcessLocal<rayon::ThreadPool> = ProcessLocal::new();

/// The pool belonging to the calling process.
pub(crate) fn pool() -> &'static rayon::ThreadPool {
    POOL.get(
        || {
            rayon::ThreadPoolBuilder::new()
                .thread_name(|i| format!("zrecord-{i}"))
                .build()
                .expect("the operating system refused to start worker threads")
        },
        |_| {},
    )
}

/// Number of workers a batch can be spread over.
pub(crate) fn workers() -> usize {
    pool().current_num_threads()
}

/// How many contiguous shards to split `bytes` of work into: one per worker,
/// but none smaller than `min_shard_bytes`, since waking a worker costs more
/// than copying a few KiB.
pub(crate) fn shard_count(items: usize, bytes: u64, min_shard_bytes: u64) -> usize {
    let by_size = (bytes / min_shard_bytes.max(1)).max(1) as usize;
    workers().min(by_size).min(items).max(1)
}
