//! Append (plain and durable) and gather throughput for every codec, next
//! to a plain in-memory copy of the same bytes (the physical reference).
//!
//! `cargo bench -p zrecord-bench --bench throughput`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;
use zrecord::{AppendOptions, Codec, Store};

const RECORD: usize = 12 << 10;
const RECORDS: usize = 4096;
const BATCH: usize = 256;

/// Correlated bytes, like sensor or image data: each byte is the previous
/// plus 0..6.
fn dataset() -> Vec<u8> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut b = 0u8;
    (0..RECORD * RECORDS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b = b.wrapping_add((x % 7) as u8);
            b
        })
        .collect()
}

fn batches() -> Vec<Vec<u64>> {
    let mut x = 88172645463325252u64;
    (0..64)
        .map(|_| {
            (0..BATCH)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % RECORDS as u64
                })
                .collect()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let data = dataset();
    let batches = batches();
    let dir = tempfile::tempdir().unwrap();

    let mut append = c.benchmark_group("append");
    append.throughput(Throughput::Bytes((RECORD * BATCH) as u64));
    let src = &data[..RECORD * BATCH];
    append.bench_function("memcpy", |b| {
        let mut sink = vec![0u8; src.len()];
        b.iter(|| sink.copy_from_slice(std::hint::black_box(src)))
    });
    let plain = [Codec::Raw, Codec::Flate, Codec::Lz4, Codec::Zstd].map(|c| (c, false));
    for (codec, durable) in plain
        .into_iter()
        .chain([(Codec::Raw, true), (Codec::Flate, true)])
    {
        let options = AppendOptions {
            codec,
            durable,
            ..AppendOptions::default()
        };
        let name = format!("{}{}", codec.name(), if durable { "-durable" } else { "" });
        append.bench_function(BenchmarkId::from_parameter(&name), |b| {
            // A fresh store per sample keeps the files from growing without bound.
            b.iter_batched(
                || {
                    let path = dir.path().join(format!("append-{name}"));
                    let _ = std::fs::remove_dir_all(&path);
                    Store::open(&path).unwrap()
                },
                |store| store.append_fixed(src, BATCH, RECORD, &options).unwrap(),
                criterion::BatchSize::PerIteration,
            )
        });
    }
    append.finish();

    let mut gather = c.benchmark_group("gather");
    gather.throughput(Throughput::Bytes((RECORD * BATCH) as u64));
    let mut dst = vec![0u8; RECORD * BATCH];
    gather.bench_function("memcpy", |b| {
        let mut i = 0;
        b.iter(|| {
            for (k, &idx) in batches[i % batches.len()].iter().enumerate() {
                let at = idx as usize * RECORD;
                dst[k * RECORD..(k + 1) * RECORD].copy_from_slice(&data[at..at + RECORD]);
            }
            i += 1;
        })
    });
    for codec in [Codec::Raw, Codec::Flate, Codec::Lz4, Codec::Zstd] {
        let store = Store::open(dir.path().join(format!("gather-{}", codec.name()))).unwrap();
        let options = AppendOptions {
            codec,
            durable: false,
            ..AppendOptions::default()
        };
        store
            .append_fixed(&data, RECORDS, RECORD, &options)
            .unwrap();
        gather.bench_function(BenchmarkId::from_parameter(codec.name()), |b| {
            let mut i = 0;
            b.iter(|| {
                store
                    .gather(&batches[i % batches.len()], &mut dst, RECORD)
                    .unwrap();
                i += 1;
            })
        });
    }
    gather.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
