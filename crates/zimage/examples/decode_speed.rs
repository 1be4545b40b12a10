//! Images per second on one core: a full decode of every JPEG in a folder,
//! and the training pipeline (decode, random-resized crop to 224 x 224,
//! flip). Run by bench/image_decoders.py:
//!
//!     cargo run --release -p zimage --example decode_speed -- FOLDER [ROUNDS]

use std::time::Instant;

use zimage::{decode, Channels, Crop, Pipeline, Scratch, DEFAULT_MAX_PIXELS};

fn main() {
    let mut args = std::env::args().skip(1);
    let folder = args.next().expect("usage: decode_speed FOLDER [ROUNDS]");
    let rounds: usize = args.next().map_or(3, |r| r.parse().expect("ROUNDS"));
    let mut paths: Vec<_> = std::fs::read_dir(&folder)
        .expect("a folder of JPEGs")
        .map(|entry| entry.expect("a readable folder").path())
        .collect();
    paths.sort();
    let files: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| std::fs::read(p).expect("a file"))
        .collect();
    let pipeline = Pipeline {
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
    };
    let mut pixels = Vec::new();
    let mut out = vec![0u8; pipeline.sample_len()];
    let mut scratch = Scratch::default();
    let per_second = |start: Instant| files.len() as f64 / start.elapsed().as_secs_f64();
    for _ in 0..rounds {
        let start = Instant::now();
        for file in &files {
            decode(file, Channels::Rgb, DEFAULT_MAX_PIXELS, &mut pixels).expect("a JPEG");
        }
        let full = per_second(start);
        let start = Instant::now();
        for (seed, file) in (0u64..).zip(&files) {
            pipeline
                .run(file, seed, &mut out, &mut scratch)
                .expect("a JPEG");
        }
        println!("{full:.1} {:.1}", per_second(start));
    }
}
