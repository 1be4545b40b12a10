//! Image streams: encoded records decoded into fixed slots on the workers,
//! each sample's crop and flip a function of its seed (so any worker count
//! and any resume give the same pixels), and a bad image an error naming
//! its record at its step, or a blank slot marked in the batch.

use std::sync::Arc;

use zimage::{Channels, Crop, Pipeline, DEFAULT_MAX_PIXELS};
use zloader::{BadImages, Layout, Loader, LoaderError, LoaderOptions, Stream};
use zrecord::{AppendOptions, Codec, Store};
use zsampler::{Mode, Sampler};

const W: usize = 12;
const H: usize = 10;

fn pixels(i: usize) -> Vec<u8> {
    (0..W * H * 3).map(|b| (b * 7 + i * 31) as u8).collect()
}

fn png(rgb: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, W as u32, H as u32);
    encoder.set_color(png::ColorType::Rgb);
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(rgb).unwrap();
    writer.finish().unwrap();
    bytes
}

/// A store of `n` PNGs, record `bad` (if any) not an image.
fn images(dir: &std::path::Path, n: usize, bad: Option<usize>) -> Arc<Store> {
    let store = Store::open(dir.join("images.zr")).unwrap();
    let records: Vec<Vec<u8>> = (0..n)
        .map(|i| match bad {
            Some(b) if b == i => b"not an image".to_vec(),
            _ => png(&pixels(i)),
        })
        .collect();
    let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let options = AppendOptions {
        codec: Codec::Raw,
        ..AppendOptions::default()
    };
    store.append(&slices, &options).unwrap();
    Arc::new(store)
}

fn pipeline(crop: Crop, flip: bool) -> Arc<Pipeline> {
    Arc::new(Pipeline {
        height: H,
        width: W,
        channels: Channels::Rgb,
        crop,
        flip,
        normalize: None,
        max_pixels: DEFAULT_MAX_PIXELS,
        draft: false,
        antialias: true,
    })
}

fn options(num_workers: usize) -> LoaderOptions {
    LoaderOptions {
        num_workers,
        prefetch: 2,
        ..LoaderOptions::default()
    }
}

#[test]
fn each_slot_holds_its_records_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let store = images(dir.path(), 20, None);
    let stream = Stream::mixed(
        vec![store],
        Layout::Image(pipeline(Crop::Resize, false), BadImages::Fail),
    );
    let sampler = Sampler::new(20, 8, Mode::Shuffle, 3).unwrap();
    let loader = Loader::new(vec![stream], sampler, options(2)).unwrap();
    for _ in 0..6 {
        let batch = loader.next().unwrap();
        assert_eq!(batch.buffers[0].len(), 8 * W * H * 3);
        assert!(batch.lengths[0].is_none());
        for (k, &i) in batch.indices.iter().enumerate() {
            let slot = &batch.buffers[0][k * W * H * 3..(k + 1) * W * H * 3];
            assert_eq!(slot, &pixels(i as usize)[..], "slot {k}, record {i}");
        }
    }
}

#[test]
fn random_crops_and_flips_do_not_depend_on_workers_or_resume() {
    let dir = tempfile::tempdir().unwrap();
    let store = images(dir.path(), 30, None);
    let augment = pipeline(
        Crop::RandomResized {
            scale: (0.2, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        },
        true,
    );
    let run = |workers: usize, first: u64| -> Vec<Vec<u8>> {
        let stream = Stream::mixed(
            vec![store.clone()],
            Layout::Image(augment.clone(), BadImages::Fail),
        );
        let mut sampler = Sampler::new(30, 6, Mode::Shuffle, 9).unwrap();
        sampler.seek(first);
        let loader = Loader::new(vec![stream], sampler, options(workers)).unwrap();
        (first..12)
            .map(|_| loader.next().unwrap().buffers[0].to_vec())
            .collect()
    };
    let one = run(1, 0);
    assert_eq!(run(2, 0), one, "two workers");
    assert_eq!(run(2, 7), one[7..], "resumed at step 7");
    // The augmentation does change the pixels.
    let plain = {
        let stream = Stream::mixed(
            vec![store.clone()],
            Layout::Image(pipeline(Crop::Resize, false), BadImages::Fail),
        );
        let sampler = Sampler::new(30, 6, Mode::Shuffle, 9).unwrap();
        let loader = Loader::new(vec![stream], sampler, options(1)).unwrap();
        loader.next().unwrap().buffers[0].to_vec()
    };
    assert_ne!(plain, one[0]);
}

/// A sequential loader of batches of 4 over 12 PNGs, record 5 not an
/// image, which `bad` handles.
fn with_a_bad_image(dir: &std::path::Path, bad: BadImages) -> Loader {
    let store = images(dir, 12, Some(5));
    let layout = Layout::Image(pipeline(Crop::Resize, false), bad);
    let sampler = Sampler::new(12, 4, Mode::Sequential, 0).unwrap();
    Loader::new(
        vec![Stream::mixed(vec![store], layout)],
        sampler,
        options(2),
    )
    .unwrap()
}

#[test]
fn a_bad_image_fails_its_step_naming_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let loader = with_a_bad_image(dir.path(), BadImages::Fail);
    assert!(loader.next().is_ok());
    match loader.next() {
        Err(LoaderError::Image {
            step: 1, index: 5, ..
        }) => {}
        other => panic!("step 1 holds record 5: {:?}", other.map(|b| b.indices)),
    }
    assert!(loader.next().is_ok(), "the next step is delivered");
}

#[test]
fn a_bad_image_is_blanked_and_marked_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let loader = with_a_bad_image(dir.path(), BadImages::Blank);
    let slot = W * H * 3;
    for step in 0..3 {
        let batch = loader.next().unwrap();
        let decoded = batch.decoded[0]
            .as_ref()
            .expect("a blanking stream marks its slots");
        for (k, &index) in batch.indices.iter().enumerate() {
            let pixels_of_slot = &batch.buffers[0][k * slot..(k + 1) * slot];
            if index == 5 {
                assert!(!decoded[k], "step {step}: record 5 is marked");
                assert!(pixels_of_slot.iter().all(|&b| b == 0), "and blank");
            } else {
                assert!(decoded[k]);
                assert_eq!(pixels_of_slot, pixels(index as usize).as_slice());
            }
        }
    }
}

#[test]
fn a_bad_pipeline_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = images(dir.path(), 4, None);
    let bad = Arc::new(Pipeline {
        width: 0,
        ..(*pipeline(Crop::Resize, false)).clone()
    });
    let stream = Stream::mixed(vec![store], Layout::Image(bad, BadImages::Fail));
    let sampler = Sampler::new(4, 2, Mode::Sequential, 0).unwrap();
    assert!(matches!(
        Loader::new(vec![stream], sampler, options(1)),
        Err(LoaderError::InvalidArgument(_))
    ));
}
