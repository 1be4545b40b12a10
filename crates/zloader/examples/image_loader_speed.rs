//! Images per second of the image pipeline on the JPEGs under a folder (an
//! image folder, or any tree of `.jpg` files): on one core a full decode,
//! the training pipeline (decode, random-resized crop to 224 x 224, flip),
//! and the same with `draft` (scaled decodes), then through the loader
//! (every file stored raw as one record, batches of 256 decoded on the
//! workers). Run by bench/image_decoders.py; prints the four rates on one
//! line per round.
//!
//!     cargo run --release -p zloader --example image_loader_speed -- FOLDER [WORKERS] [SECONDS] [ROUNDS]

use std::sync::Arc;
use std::time::{Duration, Instant};

use zimage::{decode, Channels, Crop, Pipeline, Scratch, DEFAULT_MAX_PIXELS};
use zloader::{BadImages, Layout, Loader, LoaderOptions, Stream};
use zrecord::{AppendOptions, Codec, Store};
use zsampler::{Mode, Sampler};

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: image_loader_speed FOLDER [WORKERS] [SECONDS] [ROUNDS]";
    let folder = args.next().expect(usage);
    let workers: usize = args.next().map_or(2, |w| w.parse().expect(usage));
    let seconds: f64 = args.next().map_or(4.0, |s| s.parse().expect(usage));
    let rounds: usize = args.next().map_or(3, |r| r.parse().expect(usage));
    let mut paths = Vec::new();
    jpegs_under(std::path::Path::new(&folder), &mut paths);
    paths.sort();
    let files: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| std::fs::read(p).expect("a file"))
        .collect();
    let pipeline = Arc::new(Pipeline {
        height: 224,
        width: 224,
        channels: Channels::Rgb,
        crop: Crop::RandomResized {
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        },
        flip: true,
        normalize: None,
        max_pixels: DEFAULT_MAX_PIXELS,
        draft: false,
        antialias: true,
    });
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = Arc::new(Store::open(dir.path().join("images.zr")).expect("a new store"));
    let slices: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
    let raw = AppendOptions {
        codec: Codec::Raw,
        durable: false,
        ..AppendOptions::default()
    };
    store.append(&slices, &raw).expect("the images stored");
    let per_second = |n: usize, start: Instant| n as f64 / start.elapsed().as_secs_f64();
    for _ in 0..rounds {
        let mut pixels = Vec::new();
        let start = Instant::now();
        for file in &files {
            decode(file, Channels::Rgb, DEFAULT_MAX_PIXELS, &mut pixels).expect("an image");
        }
        let full = per_second(files.len(), start);
        let (mut out, mut scratch) = (vec![0u8; pipeline.sample_len()], Scratch::default());
        let mut one_core = |p: &Pipeline| {
            let start = Instant::now();
            for (seed, file) in (0u64..).zip(&files) {
                p.run(file, seed, &mut out, &mut scratch).expect("an image");
            }
            per_second(files.len(), start)
        };
        let plain = one_core(&pipeline);
        let drafted = one_core(&Pipeline {
            draft: true,
            ..(*pipeline).clone()
        });
        let stream = Stream::mixed(
            vec![store.clone()],
            Layout::Image(pipeline.clone(), BadImages::Fail),
        );
        let sampler = Sampler::new(files.len() as u64, 256, Mode::Shuffle, 1).expect("a sampler");
        let options = LoaderOptions {
            num_workers: workers,
            prefetch: 4,
            ..LoaderOptions::default()
        };
        let loader = Loader::new(vec![stream], sampler, options).expect("a loader");
        loader.next().expect("a first batch");
        let (start, mut images) = (Instant::now(), 0);
        while start.elapsed() < Duration::from_secs_f64(seconds) {
            images += loader.next().expect("a batch").indices.len();
        }
        let loaded = per_second(images, start);
        println!("{full:.1} {plain:.1} {drafted:.1} {loaded:.1}");
    }
}

/// Every `.jpg` file under `folder`, into `paths`.
fn jpegs_under(folder: &std::path::Path, paths: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(folder).expect("a readable folder") {
        let path = entry.expect("a readable folder").path();
        if path.is_dir() {
            jpegs_under(&path, paths);
        } else if path.extension().is_some_and(|e| e == "jpg") {
            paths.push(path);
        }
    }
}
