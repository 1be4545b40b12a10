//! What the codecs and the memory can do on their own, without a store: the
//! ceilings the benchmark's shortfalls are measured against (the notes of
//! the targets in docs/benchmarks.md; bench/README.md, "Measured limits").
//!
//! For each `.npy` given (C-order, records along axis 0), up to 256 MiB of
//! its records are held in memory and copied in a random order, as a gather
//! does, on one core and then on two. All of them are also DEFLATE-encoded
//! at libdeflate level 6 (what zrecord writes), packed as a chunk file packs
//! them, and decoded in the same random order, on one core and on two: a
//! gather's work without the store.
//! The first 16 MiB are LZ4-decoded on one core, and DEFLATE-encoded at
//! levels 6 and 1 (libdeflate's fastest), in order, on one core and two. Then
//! batches of 256 random records are read from the file itself on one core
//! in three ways: from a mapping whose pages stay mapped (as a gather
//! reads), from a mapping whose pages are dropped after every batch (a
//! reader that holds no file pages between batches), and with one `pread`
//! per record. Speeds are logical bytes per second, each the median of 3
//! passes of at least 0.3 s. Prints one JSON object per file.
//!
//!     cargo run --release -p zrecord --example codec_limits -- bench/out/data/full/A.npy

use std::os::unix::fs::FileExt;
use std::time::Instant;

use libdeflater::{CompressionLvl, Compressor, Decompressor};
use rayon::prelude::*;

/// Where the records of a C-order `.npy` file start, their length and count:
/// its header says the shape.
fn layout(bytes: &[u8], path: &str) -> (usize, usize, usize) {
    assert_eq!(&bytes[..6], b"\x93NUMPY", "{path} is not a .npy file");
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[start..start + header_len]).unwrap();
    let shape = &header[header.find("'shape': (").unwrap() + 10..];
    let shape = &shape[..shape.find(')').unwrap()];
    let dims: Vec<usize> = shape
        .split(',')
        .filter_map(|d| d.trim().parse().ok())
        .collect();
    let descr = &header[header.find("'descr': '").unwrap() + 10..];
    let itemsize: usize = descr[2..descr.find('\'').unwrap()].parse().unwrap();
    let record_len = dims[1..].iter().product::<usize>() * itemsize;
    (start + header_len, record_len, dims[0])
}

/// Up to 256 MiB of the records of `.npy` file `bytes`.
fn records(bytes: &[u8], path: &str) -> Vec<Vec<u8>> {
    let (start, record_len, count) = layout(bytes, path);
    let n = count.min((256 << 20) / record_len.max(1)).max(1);
    bytes[start..]
        .chunks(record_len)
        .take(n)
        .map(<[u8]>::to_vec)
        .collect()
}

/// Speeds of reading batches of 256 random records of the `.npy` file at
/// `path` into one batch buffer: from a mapping kept, from a mapping whose
/// pages are dropped after each batch, and with a `pread` per record.
fn file_reads(path: &str, bytes: &[u8]) -> (f64, f64, f64) {
    let (start, record_len, count) = layout(bytes, path);
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a read-only mapping of a file nothing writes while we run.
    let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    // At least 64 MiB a pass, so that small records are not read from cache.
    let batch_count = ((64 << 20) / (256 * record_len)).max(64);
    let batches: Vec<Vec<usize>> = (0..batch_count)
        .map(|_| {
            (0..256)
                .map(|_| start + (xorshift(&mut state) % count as u64) as usize * record_len)
                .collect()
        })
        .collect();
    let bytes_per_pass = batch_count * 256 * record_len;
    let mut dst = vec![0u8; 256 * record_len];
    let mut mapped_pass = |drop_pages: bool| {
        for batch in &batches {
            for (k, &at) in batch.iter().enumerate() {
                dst[k * record_len..(k + 1) * record_len]
                    .copy_from_slice(&map[at..at + record_len]);
            }
            std::hint::black_box(&dst);
            if drop_pages {
                // SAFETY: the mapping is of a file, read-only: dropping its
                // pages only makes the next access fault them in again.
                unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) }.unwrap();
            }
        }
    };
    mapped_pass(false); // map every page the batches touch
    let kept = speed(bytes_per_pass, || mapped_pass(false));
    let dropped = speed(bytes_per_pass, || mapped_pass(true));
    let pread = speed(bytes_per_pass, || {
        for batch in &batches {
            for (k, &at) in batch.iter().enumerate() {
                let slot = &mut dst[k * record_len..(k + 1) * record_len];
                file.read_exact_at(slot, at as u64).unwrap();
            }
            std::hint::black_box(&dst);
        }
    });
    (kept, dropped, pread)
}

/// The next number of a xorshift generator: fixed pseudo-random orders, the
/// same each run.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs `work` over the two halves of `items`, each on a thread of its own.
fn on_two_cores<T: Sync>(items: &[T], work: impl Fn(&[T]) + Sync) {
    std::thread::scope(|s| {
        for half in items.chunks(items.len().div_ceil(2)) {
            s.spawn(|| work(half));
        }
    })
}

/// Median bytes per second of `pass` (which processes `bytes` bytes).
fn speed(bytes: usize, mut pass: impl FnMut()) -> f64 {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let (start, mut rounds) = (Instant::now(), 0u32);
        while rounds == 0 || start.elapsed().as_secs_f64() < 0.3 {
            pass();
            rounds += 1;
        }
        runs.push(bytes as f64 * rounds as f64 / start.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    runs[1]
}

fn main() {
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let all = records(&bytes, &path);
        let record_len = all[0].len();
        let mb = |x: f64| (x / 1e6).round();

        // A fixed pseudo-random visiting order (xorshift), the same each run.
        let mut order: Vec<usize> = (0..all.len()).collect();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for i in (1..order.len()).rev() {
            order.swap(i, (xorshift(&mut state) % (i as u64 + 1)) as usize);
        }
        let all_bytes = all.len() * record_len;
        let copy_part = |part: &[usize]| {
            let mut dst = vec![0u8; record_len];
            for &i in part {
                dst.copy_from_slice(&all[i]);
                std::hint::black_box(&dst);
            }
        };
        let copy1 = speed(all_bytes, || copy_part(&order));
        let copy2 = speed(all_bytes, || on_two_cores(&order, copy_part));

        // Every record held, DEFLATE-encoded and packed one after the other
        // as a flate store's chunk holds them, then decoded in the copy's
        // random order: what a flate gather must do.
        let encoded: Vec<Vec<u8>> = all
            .par_iter()
            .map_init(
                || Compressor::new(CompressionLvl::new(6).unwrap()),
                |c, r| {
                    let mut out = vec![0u8; c.deflate_compress_bound(r.len())];
                    let n = c.deflate_compress(r, &mut out).unwrap();
                    out.truncate(n);
                    out
                },
            )
            .collect();
        let mut packed = Vec::with_capacity(encoded.iter().map(Vec::len).sum());
        let spans: Vec<std::ops::Range<usize>> = encoded
            .iter()
            .map(|e| {
                packed.extend_from_slice(e);
                packed.len() - e.len()..packed.len()
            })
            .collect();
        drop(encoded);
        let decode_part = |part: &[usize]| {
            let (mut d, mut dst) = (Decompressor::new(), vec![0u8; record_len]);
            for &i in part {
                d.deflate_decompress(&packed[spans[i].clone()], &mut dst)
                    .unwrap();
                std::hint::black_box(&dst);
            }
        };
        let flate_dec1 = speed(all_bytes, || decode_part(&order));
        let flate_dec2 = speed(all_bytes, || on_two_cores(&order, decode_part));
        // A record that does not shrink is stored raw.
        let stored: usize = spans.iter().map(|s| s.len().min(record_len)).sum();
        drop(packed);

        let recs = &all[..all.len().min((16 << 20) / record_len.max(1)).max(1)];
        let total: usize = recs.iter().map(Vec::len).sum();
        let mut dst = vec![0u8; record_len];
        let lz4: Vec<Vec<u8>> = recs.iter().map(|r| lz4_flex::block::compress(r)).collect();
        let lz4_dec = speed(total, || {
            for e in &lz4 {
                lz4_flex::block::decompress_into(e, &mut dst).unwrap();
                std::hint::black_box(&dst);
            }
        });

        let encode_part = |level: i32, part: &[Vec<u8>]| {
            let mut c = Compressor::new(CompressionLvl::new(level).unwrap());
            let mut out = vec![0u8; c.deflate_compress_bound(record_len)];
            for r in part {
                std::hint::black_box(c.deflate_compress(r, &mut out).unwrap());
            }
        };
        let encode = |level: i32| {
            (
                speed(total, || encode_part(level, recs)),
                speed(total, || {
                    on_two_cores(recs, |part| encode_part(level, part))
                }),
            )
        };
        let (enc6, enc6_2) = encode(6);
        let (enc1, enc1_2) = encode(1);
        let (mapped_kept, mapped_dropped, pread) = file_reads(&path, &bytes);
        drop(bytes);
        println!(
            "{{\"file\": {path:?}, \"records\": {}, \"record_bytes\": {record_len}, \
             \"copy_1core_mb_s\": {}, \"copy_2cores_mb_s\": {}, \"lz4_decode_mb_s\": {}, \
             \"flate_decode_mb_s\": {}, \"flate_decode_2cores_mb_s\": {}, \
             \"flate6_encode_mb_s\": {}, \"flate6_encode_2cores_mb_s\": {}, \
             \"flate1_encode_mb_s\": {}, \"flate1_encode_2cores_mb_s\": {}, \
             \"flate6_ratio\": {:.4}, \"mapped_kept_mb_s\": {}, \"mapped_dropped_mb_s\": {}, \
             \"pread_mb_s\": {}}}",
            all.len(),
            mb(copy1),
            mb(copy2),
            mb(lz4_dec),
            mb(flate_dec1),
            mb(flate_dec2),
            mb(enc6),
            mb(enc6_2),
            mb(enc1),
            mb(enc1_2),
            stored as f64 / all_bytes as f64,
            mb(mapped_kept),
            mb(mapped_dropped),
            mb(pread)
        );
    }
}
