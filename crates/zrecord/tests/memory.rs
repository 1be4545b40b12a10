//! What open handles hold in memory: a collection of many small shards read
//! with checksums holds memory in proportion to its records, not a fixed
//! sum per shard. (Each store's marks of checked records were once one
//! bitmap for every possible slot, 2 MiB a shard.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use common::{opts, Rng};
use zrecord::{Codec, Collection, CollectionWriter, ShardLimits, StoreOptions};

/// Counts the bytes this test binary holds allocated.
struct LiveBytes;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for LiveBytes {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        LIVE.fetch_add(size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: LiveBytes = LiveBytes;

#[test]
fn checked_reads_over_many_shards_hold_memory_in_proportion_to_records() {
    const SHARDS: u64 = 300;
    const PER_SHARD: u32 = 4;
    const LEN: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut rng = Rng(7);
    let records: Vec<Vec<u8>> = (0..SHARDS * u64::from(PER_SHARD))
        .map(|_| common::noise(&mut rng, LEN))
        .collect();
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let limits = ShardLimits {
        max_records: PER_SHARD,
        max_bytes: 1 << 20,
    };
    let mut w = CollectionWriter::new(&path, &StoreOptions::default(), limits).unwrap();
    w.append(&refs, &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    drop(w);

    let c = Collection::open(&path).unwrap();
    assert_eq!(c.shard_names().count() as u64, SHARDS);
    let idxs: Vec<u64> = (0..c.len()).collect();
    let mut dst = vec![0u8; idxs.len() * LEN];
    let before = LIVE.load(Ordering::Relaxed);
    // The first gather checks every record and marks it checked; the second
    // reads through the marks.
    for _ in 0..2 {
        c.gather(&idxs, &mut dst, LEN).unwrap();
        assert!(dst.chunks(LEN).eq(records.iter().map(Vec::as_slice)));
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    // Marks cost 8 KiB a shard here (one page each); 64 KiB leaves room for
    // anything else a shard's first read may keep, far below 2 MiB.
    assert!(
        held < SHARDS as isize * (64 << 10),
        "reading {SHARDS} shards of {PER_SHARD} records kept {held} bytes"
    );
}
