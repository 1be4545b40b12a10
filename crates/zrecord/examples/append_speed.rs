//! How fast one append of real files writes a new store, codec by codec:
//! the cost of compressing, and of training a zstd-dict dictionary.
//!
//! `cargo run --release -p zrecord --example append_speed -- DIR [RECORDS]`
//! reads the first RECORDS (default 624: one shard of the Ray benchmark's
//! photographs) of the files under DIR, in name order, and appends them in
//! one batch (durable=False) to a new store with raw, zstd at level -1 and
//! 3, and zstd-dict at level -1 and 3, in turn, for 9 rounds; it prints each
//! codec's median MB/s and the bytes its store holds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use zrecord::{AppendOptions, Codec, Store};

const ROUNDS: usize = 9;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.first().expect("usage: append_speed DIR [RECORDS]");
    let count = args.get(1).map_or(624, |a| a.parse().unwrap());
    let mut paths = files(Path::new(dir));
    paths.sort();
    let data: Vec<Vec<u8>> = paths
        .iter()
        .take(count)
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let records: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let total: usize = records.iter().map(|r| r.len()).sum();
    let codecs = [
        ("raw", Codec::Raw, None),
        ("zstd, level -1", Codec::Zstd, Some(-1)),
        ("zstd-dict, level -1", Codec::ZstdDict, Some(-1)),
        ("zstd", Codec::Zstd, None),
        ("zstd-dict", Codec::ZstdDict, None),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let mut rates = vec![Vec::new(); codecs.len()];
    let mut stored = vec![0u64; codecs.len()];
    for _ in 0..ROUNDS {
        for (k, &(_, codec, level)) in codecs.iter().enumerate() {
            let path = tmp.path().join(k.to_string());
            let _ = std::fs::remove_dir_all(&path);
            let options = AppendOptions {
                codec,
                level,
                durable: false,
                ..AppendOptions::default()
            };
            let t = Instant::now();
            let store = Store::open(&path).unwrap();
            store.append(&records, &options).unwrap();
            rates[k].push(total as f64 / 1e6 / t.elapsed().as_secs_f64());
            stored[k] = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().metadata().unwrap())
                .filter(|m| m.is_file())
                .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
                .sum();
        }
    }
    println!("{} records, {} bytes", records.len(), total);
    for (k, (name, ..)) in codecs.iter().enumerate() {
        rates[k].sort_by(f64::total_cmp);
        println!(
            "{name:>20}: {:>6.0} MB/s (median of {ROUNDS}), {:.4} of the records on disk",
            rates[k][ROUNDS / 2],
            stored[k] as f64 / total as f64
        );
    }
}
