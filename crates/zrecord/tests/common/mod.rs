//! Shared helpers of the integration tests: record generators and a reader
//! that gathers whole records back for comparison with a model.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use zrecord::{AppendOptions, Codec, Error, Store, StoreOptions};

/// The system allocator, counting the bytes held (`LIVE_BYTES`) and the
/// largest single request (`LARGEST_ALLOC`); a test binary that measures
/// memory installs it: `#[global_allocator] static GLOBAL: CountingAlloc =
/// CountingAlloc;`.
pub struct CountingAlloc;

pub static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
pub static LARGEST_ALLOC: AtomicUsize = AtomicUsize::new(0);

fn counted(grown: isize, request: usize) {
    LIVE_BYTES.fetch_add(grown, Ordering::Relaxed);
    LARGEST_ALLOC.fetch_max(request, Ordering::Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted(layout.size() as isize, layout.size());
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted(layout.size() as isize, layout.size());
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        counted(-(layout.size() as isize), 0);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        counted(size as isize - layout.size() as isize, size);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, size) }
    }
}

/// Damage sweeps over every byte of a record take every byte in release
/// builds and every `BYTE_STEP`-th in debug ones: CI runs both, and the
/// unoptimised codecs made the full debug sweeps take over two minutes.
pub const BYTE_STEP: usize = if cfg!(debug_assertions) { 5 } else { 1 };

/// A deterministic xorshift generator, so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Bytes that compress well: each byte is the previous plus 0..3.
pub fn compressible(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut b = rng.next_u64() as u8;
    (0..len)
        .map(|_| {
            b = b.wrapping_add((rng.next_u64() % 3) as u8);
            b
        })
        .collect()
}

/// Bytes no codec can shrink.
pub fn noise(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

pub fn opts(codec: Codec) -> AppendOptions {
    AppendOptions {
        codec,
        durable: false,
        ..AppendOptions::default()
    }
}

pub fn small_chunks(capacity: u64) -> StoreOptions {
    StoreOptions {
        chunk_capacity: capacity,
        ..StoreOptions::default()
    }
}

/// Every record of the store, read through `gather_ragged` in one batch.
pub fn read_all(store: &Store) -> Vec<Vec<u8>> {
    try_read_all(store).unwrap_or_else(|e| panic!("reading the store back failed: {e}"))
}

/// Every record of the store, or the error of the gather.
pub fn try_read_all(store: &Store) -> Result<Vec<Vec<u8>>, Error> {
    let idxs: Vec<u64> = (0..store.len() as u64).collect();
    try_read(store, &idxs)
}

/// Records `idxs`, read in one ragged gather, packed back to back.
pub fn read(store: &Store, idxs: &[u64]) -> Vec<Vec<u8>> {
    try_read(store, idxs).unwrap()
}

/// Records `idxs`, or the error of the first call that failed.
pub fn try_read(store: &Store, idxs: &[u64]) -> Result<Vec<Vec<u8>>, Error> {
    let lens = store.lengths(idxs)?;
    let mut offsets = Vec::with_capacity(lens.len());
    let mut total = 0u64;
    for &l in &lens {
        offsets.push(total);
        total += l as u64;
    }
    let mut dst = vec![0u8; total as usize];
    store.gather_ragged(idxs, &mut dst, &offsets)?;
    Ok(offsets
        .iter()
        .zip(&lens)
        .map(|(&o, &l)| dst[o as usize..o as usize + l as usize].to_vec())
        .collect())
}

/// Bytes of each record of [`samples_with_two_short`].
pub const SAMPLE_LEN: usize = 4096;

/// Records of an exact gather big enough to be split over the shard crew
/// in runs (`ops/gather.rs`, 64 of [`SAMPLE_LEN`] bytes), but for the two
/// short ones at 40 and 60, in the batch's third and last runs.
pub fn samples_with_two_short(rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..64)
        .map(|i| noise(rng, if i == 40 || i == 60 { 4000 } else { SAMPLE_LEN }))
        .collect()
}

/// An exact `gather` (records `idxs` into slots of [`SAMPLE_LEN`] bytes) of
/// the `model` of [`samples_with_two_short`] refuses a batch of every record
/// for record 40, and one without it for record 60 (`refused(error,
/// record)` tells), writing nothing: every run is checked before any is
/// copied, and the error is the first in batch order. A batch without
/// either reads exactly.
pub fn assert_split_batches_are_checked_whole(
    gather: impl Fn(&[u64], &mut [u8]) -> Result<(), Error>,
    model: &[Vec<u8>],
    refused: impl Fn(&Error, u64) -> bool,
) {
    let all: Vec<u64> = (0..64).collect();
    let without_40: Vec<u64> = (0..64).filter(|&i| i != 40).collect();
    for (idxs, short) in [(&all, 40), (&without_40, 60)] {
        let mut dst = vec![7u8; idxs.len() * SAMPLE_LEN];
        let err = gather(idxs, &mut dst).unwrap_err();
        assert!(refused(&err, short), "{err}");
        assert!(dst.iter().all(|&b| b == 7), "a refused batch wrote bytes");
    }
    let good: Vec<u64> = (0..64).filter(|&i| i != 40 && i != 60).rev().collect();
    let mut dst = vec![7u8; good.len() * SAMPLE_LEN];
    gather(&good, &mut dst).unwrap();
    for (slot, &i) in dst.chunks(SAMPLE_LEN).zip(&good) {
        assert!(slot == model[i as usize], "record {i}");
    }
}
