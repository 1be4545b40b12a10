//! What the memory layout of a collection costs a shuffled gather, without
//! any of zrecord's code: the same records copied through one record table
//! and one data file, mapped as a store maps them (roughly), against the
//! tables and data files of SHARDS shards. Each table entry is read from its mapping,
//! then the record it points at is copied, as a gather does. The ratio is
//! the floor that `collection_speed`'s ratio for the same layout can reach
//! (bench/README.md, "Sharded collections").
//!
//! `cargo run --release -p zrecord --example mapping_layout -- [SHARDS]
//! [RECORDS_PER_SHARD] [RECORD_BYTES] [PREFETCH] [DATA_WINDOW]` (defaults
//! 100, 640, 784, 0, 0). Prints the median of 21 rounds' ratios
//! (SHARDS mappings / one), each round a pass over every record through
//! each, in one shuffled order. With PREFETCH > 0 the copy loop prefetches
//! the first KiB of the record that many places ahead, as the gather does
//! (`ops/gather.rs`, x86-64 only); DATA_WINDOW is how long each data file's
//! mapping is, at least the file: a store maps a chunk file about as long as
//! it is (`files/chunk_file.rs`), which puts the shards' data side by side
//! in the address space; 4294967296 (4 GiB) is how stores mapped every
//! chunk file before.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use memmap2::{Mmap, MmapOptions};

/// A store maps its table file whole (`files/meta_file.rs`): 2^24 entries
/// of 16 bytes.
const TABLE_WINDOW: usize = 16 << 24;

/// `bytes` written to `path`, mapped `window` bytes long, or as far as
/// the last page of `bytes` if that is longer.
fn mapped(path: &Path, bytes: &[u8], window: usize) -> Mmap {
    File::create(path).unwrap().write_all(bytes).unwrap();
    let file = File::open(path).unwrap();
    let len = window.max(bytes.len().next_multiple_of(4096));
    // SAFETY: the file is this example's own, never written again while
    // mapped, and only its first `bytes.len()` bytes are read.
    unsafe { MmapOptions::new().len(len).map(&file).unwrap() }
}

/// Asks for the first KiB of `record` to be loaded into the cache, as
/// `files/chunk_file.rs`'s `prefetch` does for the gather.
fn prefetch(record: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in record[..record.len().min(1024)].chunks(64) {
        // SAFETY: a prefetch reads nothing architecturally and cannot fault.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = record;
}

/// A table of `n` entries, each record's offset in its data file.
fn table(n: usize, record: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let mut entry = [0u8; 16];
            entry[..8].copy_from_slice(&((i * record) as u64).to_le_bytes());
            entry
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().unwrap());
    let (shards, per_shard, record) = (arg(0, 100), arg(1, 640), arg(2, 784));
    let (ahead, data_window) = (arg(3, 0), arg(4, 0));
    let n = shards * per_shard;
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..n * record).map(|i| (i * 31 % 251) as u8).collect();
    let one = [(
        mapped(&dir.path().join("t"), &table(n, record), TABLE_WINDOW),
        mapped(&dir.path().join("d"), &data, data_window),
    )];
    let shard_table = table(per_shard, record);
    let many: Vec<(Mmap, Mmap)> = data
        .chunks(per_shard * record)
        .enumerate()
        .map(|(s, bytes)| {
            let path = |kind: &str| dir.path().join(format!("{kind}{s}"));
            let table = mapped(&path("t"), &shard_table, TABLE_WINDOW);
            (table, mapped(&path("d"), bytes, data_window))
        })
        .collect();

    let mut order: Vec<usize> = (0..n).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let mut dst = vec![0u8; 256 * record];
    // One pass over every record in batches of 256, in records per second:
    // each batch's entries read first, then its records copied.
    let mut pass = |files: &[(Mmap, Mmap)]| {
        let per = n / files.len();
        let started = Instant::now();
        for batch in order.chunks(256) {
            let places: Vec<(usize, usize)> = batch
                .iter()
                .map(|&i| {
                    let (s, local) = (i / per, i % per);
                    let entry = &files[s].0[local * 16..local * 16 + 8];
                    (s, u64::from_le_bytes(entry.try_into().unwrap()) as usize)
                })
                .collect();
            let bytes = |&(s, offset): &(usize, usize)| &files[s].1[offset..offset + record];
            for (k, (slot, place)) in dst.chunks_exact_mut(record).zip(&places).enumerate() {
                if let Some(next) = places.get(k + ahead).filter(|_| ahead > 0) {
                    prefetch(bytes(next));
                }
                slot.copy_from_slice(bytes(place));
            }
            std::hint::black_box(&dst);
        }
        n as f64 / started.elapsed().as_secs_f64()
    };
    pass(&one);
    pass(&many);
    let mut ratios: Vec<f64> = (0..21).map(|_| pass(&many) / pass(&one)).collect();
    ratios.sort_by(f64::total_cmp);
    println!(
        "{shards} shards of {per_shard} records of {record} bytes, prefetch {ahead}, data \
         window {data_window}: {:.2}x one mapping's rate (median of 21 rounds)",
        ratios[10]
    );
}
