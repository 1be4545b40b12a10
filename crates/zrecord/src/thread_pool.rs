//! The worker pool for compression and gathering, made safe across `fork()`.
//!
//! A forked child inherits the pool's bookkeeping but none of its threads, so
//! handing it work would wait forever. The pool remembers the process that
//! built it; a child that asks for it gets a fresh pool of its own. The parent's
//! pool is leaked in the child on purpose: its threads do not exist there.

use std::sync::atomic::{AtomicPtr, Ordering};

struct Owned {
    pid: u32,
    pool: rayon::ThreadPool,
}

static POOL: AtomicPtr<Owned> = AtomicPtr::new(std::ptr::null_mut());

/// The pool belonging to the calling process.
pub(crate) fn pool() -> &'static rayon::ThreadPool {
    let pid = std::process::id();
    loop {
        let current = POOL.load(Ordering::Acquire);
        // SAFETY: a published pool is leaked, never freed, so the pointer stays
        // valid for the life of the process.
        if let Some(owned) = unsafe { current.as_ref() } {
            if owned.pid == pid {
                return &owned.pool;
            }
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("zrecord-{i}"))
            .build()
            .expect("the operating system refused to start worker threads");
        let fresh = Box::into_raw(Box::new(Owned { pid, pool }));
        if POOL
            .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread of this process installed one first; use that.
            // SAFETY: `fresh` was never published.
            drop(unsafe { Box::from_raw(fresh) });
        }
    }
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
