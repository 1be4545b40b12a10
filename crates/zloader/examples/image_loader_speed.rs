//! Images per second through the loader: every JPEG of a folder stored raw
//! as one record, gathered in batches of 256, each decoded, cropped to
//! 224 x 224 at random and flipped on the workers, for a few seconds.
//!
//!     cargo run --release -p zloader --example image_loader_speed -- FOLDER [WORKERS] [SECONDS]

use std::sync::Arc;
use std::time::{Duration, Instant};

use zimage::{Channels, Crop, Pipeline, DEFAULT_MAX_PIXELS};
use zloader::{Layout, Loader, LoaderOptions, Stream};
use zrecord::{AppendOptions, Codec, Store};
use zsampler::{Mode, Sampler};

fn main() {
    let mut args = std::env::args().skip(1);
    let folder = args
        .next()
        .expect("usage: image_loader_speed FOLDER [WORKERS] [SECONDS]");
    let workers: usize = args.next().map_or(2, |w| w.parse().expect("WORKERS"));
    let seconds: f64 = args.next().map_or(5.0, |s| s.parse().expect("SECONDS"));
    let mut paths: Vec<_> = std::fs::read_dir(&folder)
        .expect("a folder of images")
        .map(|entry| entry.expect("a readable folder").path())
        .collect();
    paths.sort();
    let files: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| std::fs::read(p).expect("a file"))
        .collect();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = Store::open(dir.path().join("images.zr")).expect("a new store");
    let slices: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
    let raw = AppendOptions {
        codec: Codec::Raw,
        durable: false,
        ..AppendOptions::default()
    };
    store.append(&slices, &raw).expect("the images stored");
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
    });
    let stream = Stream::mixed(vec![Arc::new(store)], Layout::Image(pipeline));
    let sampler = Sampler::new(files.len() as u64, 256, Mode::Shuffle, 1).expect("a sampler");
    let options = LoaderOptions {
        num_workers: workers,
        prefetch: 4,
    };
    let loader = Loader::new(vec![stream], sampler, options).expect("a loader");
    loader.next().expect("a first batch");
    let start = Instant::now();
    let mut images = 0usize;
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        images += loader.next().expect("a batch").indices.len();
    }
    println!("{:.1}", images as f64 / start.elapsed().as_secs_f64());
}
