//! The pipeline against independent models: images written by other
//! encoders (`png`, `jpeg-encoder`) decode to their pixels (PNG exactly,
//! JPEG within its loss), outputs follow the crop, flip and normalisation
//! asked for, and every bad image is an error, never pixels.

use zimage::{
    Channels, Crop, CropBox, Decoders, ImageError, Normalize, Pipeline, Scale, Scratch, Wanted,
    DEFAULT_MAX_PIXELS,
};

fn png_of(
    width: u32,
    height: u32,
    color: png::ColorType,
    depth: png::BitDepth,
    data: &[u8],
    palette: Option<&[u8]>,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(color);
    encoder.set_depth(depth);
    if let Some(palette) = palette {
        encoder.set_palette(palette.to_vec());
    }
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(data).unwrap();
    writer.finish().unwrap();
    bytes
}

/// An 8-bit RGB PNG of `rgb`.
fn rgb_png(width: usize, height: usize, rgb: &[u8]) -> Vec<u8> {
    png_of(
        width as u32,
        height as u32,
        png::ColorType::Rgb,
        png::BitDepth::Eight,
        rgb,
        None,
    )
}

fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut draws = zimage::Draws::new(seed);
    (0..n).map(|_| draws.next_u64() as u8).collect()
}

fn pipeline(height: usize, width: usize, channels: Channels) -> Pipeline {
    Pipeline {
        height,
        width,
        channels,
        crop: Crop::Resize,
        flip: false,
        normalize: None,
        max_pixels: DEFAULT_MAX_PIXELS,
        draft: false,
        antialias: true,
    }
}

fn run(p: &Pipeline, bytes: &[u8], seed: u64) -> Result<Vec<u8>, ImageError> {
    p.validate()?;
    let mut out = vec![0u8; p.sample_len()];
    p.run(bytes, seed, &mut out, &mut Scratch::default())?;
    Ok(out)
}

fn luma(p: &[u8]) -> u8 {
    ((u32::from(p[0]) * 19595 + u32::from(p[1]) * 38470 + u32::from(p[2]) * 7471 + 0x8000) >> 16)
        as u8
}

#[test]
fn png_pixels_come_back_exactly_in_every_channel_layout() {
    let (w, h) = (37, 23);
    let rgb = noise(w * h * 3, 1);
    let bytes = rgb_png(w, h, &rgb);
    assert_eq!(run(&pipeline(h, w, Channels::Rgb), &bytes, 0).unwrap(), rgb);
    let gray: Vec<u8> = rgb.chunks(3).map(luma).collect();
    assert_eq!(
        run(&pipeline(h, w, Channels::Gray), &bytes, 0).unwrap(),
        gray
    );
    let rgba: Vec<u8> = rgb
        .chunks(3)
        .flat_map(|p| [p[0], p[1], p[2], 255])
        .collect();
    assert_eq!(
        run(&pipeline(h, w, Channels::Rgba), &bytes, 0).unwrap(),
        rgba
    );

    let ga = noise(w * h * 2, 2);
    let bytes = png_of(
        w as u32,
        h as u32,
        png::ColorType::GrayscaleAlpha,
        png::BitDepth::Eight,
        &ga,
        None,
    );
    let want: Vec<u8> = ga
        .chunks(2)
        .flat_map(|p| [p[0], p[0], p[0], p[1]])
        .collect();
    assert_eq!(
        run(&pipeline(h, w, Channels::Rgba), &bytes, 0).unwrap(),
        want
    );
    let want: Vec<u8> = ga.chunks(2).map(|p| p[0]).collect();
    assert_eq!(
        run(&pipeline(h, w, Channels::Gray), &bytes, 0).unwrap(),
        want
    );
}

#[test]
fn palette_and_16_bit_pngs_decode_as_pillow_reads_them() {
    let (w, h) = (16, 9);
    let palette = noise(3 * 256, 3);
    let index = noise(w * h, 4);
    let bytes = png_of(
        w as u32,
        h as u32,
        png::ColorType::Indexed,
        png::BitDepth::Eight,
        &index,
        Some(&palette),
    );
    let want: Vec<u8> = index
        .iter()
        .flat_map(|&i| palette[3 * i as usize..3 * i as usize + 3].to_vec())
        .collect();
    assert_eq!(
        run(&pipeline(h, w, Channels::Rgb), &bytes, 0).unwrap(),
        want
    );
    // 16 bits a sample: Pillow keeps the high byte of each.
    let wide = noise(w * h * 3 * 2, 5);
    let bytes = png_of(
        w as u32,
        h as u32,
        png::ColorType::Rgb,
        png::BitDepth::Sixteen,
        &wide,
        None,
    );
    let want: Vec<u8> = wide.chunks(2).map(|s| s[0]).collect();
    assert_eq!(
        run(&pipeline(h, w, Channels::Rgb), &bytes, 0).unwrap(),
        want
    );
}

#[test]
fn jpegs_decode_within_their_loss() {
    let (w, h) = (64u16, 48u16);
    // A smooth picture: JPEG keeps it within a few levels.
    let rgb: Vec<u8> = (0..h as usize)
        .flat_map(|y| {
            (0..w as usize).flat_map(move |x| [(x * 4) as u8, (y * 5) as u8, ((x + y) * 2) as u8])
        })
        .collect();
    let mut bytes = Vec::new();
    jpeg_encoder::Encoder::new(&mut bytes, 95)
        .encode(&rgb, w, h, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    let got = run(&pipeline(h as usize, w as usize, Channels::Rgb), &bytes, 0).unwrap();
    let mse = got
        .iter()
        .zip(&rgb)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum::<f64>()
        / rgb.len() as f64;
    let psnr = 10.0 * (255.0f64 * 255.0 / mse).log10();
    assert!(psnr > 35.0, "PSNR {psnr:.1} dB");
    let gray = run(&pipeline(h as usize, w as usize, Channels::Gray), &bytes, 0).unwrap();
    assert_eq!(gray.len(), w as usize * h as usize);
    // A stream cut inside its compressed data is an error, not an image
    // filled in. (Only the end marker missing still holds every pixel.)
    for cut in [bytes.len() / 2, bytes.len() * 3 / 4, 20] {
        let err = run(
            &pipeline(h as usize, w as usize, Channels::Rgb),
            &bytes[..cut],
            0,
        );
        assert!(
            matches!(err, Err(ImageError::Decode { format: "JPEG", .. })),
            "cut at {cut}: {:?}",
            err.map(|pixels| pixels.len())
        );
    }
}

/// A JPEG of noise smoothed over 4 x 4 pixels (so that chroma upsampling
/// has something to interpolate) with the given layout.
fn jpeg_of(
    (w, h): (u16, u16),
    color: jpeg_encoder::ColorType,
    sampling: jpeg_encoder::SamplingFactor,
    restart: u16,
    progressive: bool,
) -> Vec<u8> {
    let channels = if color == jpeg_encoder::ColorType::Luma {
        1
    } else {
        3
    };
    let coarse = noise(
        usize::from(w) * usize::from(h) * channels,
        u64::from(w) * 31 + u64::from(h),
    );
    let pixels: Vec<u8> = (0..usize::from(h))
        .flat_map(|y| (0..usize::from(w) * channels).map(move |x| (y, x)))
        .map(|(y, x)| {
            let (px, c) = (x / channels, x % channels);
            coarse[((y / 4) * usize::from(w) + px / 4) * channels + c]
        })
        .collect();
    let mut bytes = Vec::new();
    let mut encoder = jpeg_encoder::Encoder::new(&mut bytes, 90);
    encoder.set_sampling_factor(sampling);
    encoder.set_restart_interval(restart);
    encoder.set_progressive(progressive);
    encoder.encode(&pixels, w, h, color).unwrap();
    bytes
}

/// torchvision's `RandomResizedCrop` (scale (0.08, 1), ratio (3/4, 4/3))
/// to `h` x `w`, and a flip.
fn training_crops(h: usize, w: usize) -> Pipeline {
    Pipeline {
        crop: Crop::RandomResized {
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        },
        flip: true,
        ..pipeline(h, w, Channels::Rgb)
    }
}

/// `file` decoded whole and stored as a PNG, which decodes to exactly
/// those pixels, whole: the reference for pipelines that decode a region.
fn decoded_whole(file: &[u8]) -> Result<Vec<u8>, ImageError> {
    let mut rgb = Vec::new();
    let size = zimage::decode(file, Channels::Rgb, DEFAULT_MAX_PIXELS, &mut rgb)?;
    Ok(rgb_png(size.width, size.height, &rgb))
}

/// The box of `width` x `height` pixels from column `left`, row `top`.
fn rect(left: usize, top: usize, width: usize, height: usize) -> CropBox {
    CropBox {
        left,
        top,
        width,
        height,
    }
}

/// Regions of a `w` x `h` image: every edge, and a spread of others.
fn regions(w: usize, h: usize) -> Vec<CropBox> {
    let mut draws = zimage::Draws::new(7);
    let mut out = vec![
        rect(0, 0, w, h),
        rect(w - 1, h - 1, 1, 1),
        rect(0, h - 1, w, 1),
        rect(w - 1, 0, 1, h),
    ];
    for _ in 0..150 {
        let (left, top) = (draws.below(w), draws.below(h));
        let width = 1 + draws.below(w - left);
        let height = 1 + draws.below(h - top);
        out.push(rect(left, top, width, height));
    }
    out
}

#[test]
fn a_jpeg_region_is_the_same_pixels_as_in_the_whole_image_at_every_scale() {
    use jpeg_encoder::{ColorType, SamplingFactor as F};
    let size = (61, 75);
    // (file, whether TurboJPEG names its layout and so decodes a region)
    let mut files = Vec::new();
    for sampling in [F::F_1_1, F::F_2_1, F::F_1_2, F::F_2_2] {
        for restart in [0, 3] {
            files.push((
                jpeg_of(size, ColorType::Rgb, sampling, restart, false),
                true,
            ));
        }
    }
    files.push((jpeg_of(size, ColorType::Rgb, F::F_4_1, 0, false), true));
    files.push((jpeg_of(size, ColorType::Rgb, F::F_2_4, 0, false), false));
    files.push((jpeg_of(size, ColorType::Luma, F::F_1_1, 0, false), true));
    files.push((jpeg_of(size, ColorType::Rgb, F::F_2_2, 0, true), true));
    files.push((jpeg_of(size, ColorType::Rgb, F::F_2_1, 2, true), true));
    let (mut whole, mut part) = (Vec::new(), Vec::new());
    let mut decoders = Decoders::default();
    let scales = [8, 4, 2, 1].map(|e| Scale::eighths(e).unwrap());
    for (i, (file, croppable)) in files.iter().enumerate() {
        for (channels, scale) in [Channels::Rgb, Channels::Gray, Channels::Rgba]
            .into_iter()
            .flat_map(|c| scales.map(|s| (c, s)))
        {
            // The whole image at this scale.
            let all = zimage::decode_region(
                file,
                channels,
                DEFAULT_MAX_PIXELS,
                |s| Wanted {
                    region: s.whole(),
                    scale,
                },
                &mut whole,
                &mut decoders,
            )
            .unwrap();
            let size = all.size;
            let scale = if *croppable { scale } else { Scale::FULL };
            assert_eq!(all.scale, scale);
            let width = all.region.width;
            assert_eq!(
                (width, all.region.height),
                (scale.of(size.width), scale.of(size.height))
            );
            let c = channels.count();
            for region in regions(size.width, size.height) {
                let d = zimage::decode_region(
                    file,
                    channels,
                    DEFAULT_MAX_PIXELS,
                    |s| {
                        assert_eq!(s, size);
                        Wanted { region, scale }
                    },
                    &mut part,
                    &mut decoders,
                )
                .unwrap();
                let got = d.region;
                assert_eq!((d.size, d.scale), (size, scale));
                // The scaled pixels that cover any of the region's.
                let e = scale.in_eighths();
                let (left, top) = (region.left * e / 8, region.top * e / 8);
                let wanted = rect(
                    left,
                    top,
                    scale.of(region.left + region.width) - left,
                    scale.of(region.top + region.height) - top,
                );
                if *croppable {
                    // Only a column each side and those to the MCU's edge
                    // are added.
                    assert_eq!((got.top, got.height), (wanted.top, wanted.height));
                    assert!(got.left <= wanted.left && wanted.left - got.left <= 32);
                    let (end, wanted_end) = (got.left + got.width, wanted.left + wanted.width);
                    assert!(end >= wanted_end && end - wanted_end <= 1);
                } else {
                    assert_eq!(got, size.whole());
                }
                assert_eq!(part.len(), got.width * got.height * c);
                let skip = (wanted.left - got.left) * c;
                for row in 0..wanted.height {
                    let from = ((wanted.top + row) * width + wanted.left) * c;
                    assert!(
                        part[(wanted.top - got.top + row) * got.width * c + skip..]
                            [..wanted.width * c]
                            == whole[from..from + wanted.width * c],
                        "file {i}, {channels:?}, {scale:?}, {region:?}: row {row} differs"
                    );
                }
            }
        }
    }
}

#[test]
fn empty_or_outside_regions_decode_the_whole_jpeg() {
    let file = jpeg_of(
        (40, 30),
        jpeg_encoder::ColorType::Rgb,
        jpeg_encoder::SamplingFactor::F_2_2,
        0,
        false,
    );
    let (mut part, mut decoders) = (Vec::new(), Decoders::default());
    let odd = [
        rect(8, 4, 10, 0),
        rect(8, 4, 0, 10),
        rect(0, 0, 0, 0),
        rect(35, 4, 10, 10),
        rect(8, 25, 10, 10),
    ];
    for wanted in odd {
        let d = zimage::decode_region(
            &file,
            Channels::Rgb,
            DEFAULT_MAX_PIXELS,
            |_| wanted.into(),
            &mut part,
            &mut decoders,
        )
        .unwrap();
        assert_eq!(d.region, d.size.whole(), "{wanted:?}");
        assert_eq!(part.len(), 40 * 30 * 3);
    }
}

#[test]
fn random_crops_of_jpegs_are_the_same_pixels_as_from_whole_decodes() {
    // The same pipeline over a file, and over its whole decode as a PNG.
    use jpeg_encoder::SamplingFactor as F;
    for sampling in [F::F_2_2, F::F_2_1, F::F_1_1] {
        let file = jpeg_of((97, 131), jpeg_encoder::ColorType::Rgb, sampling, 0, false);
        let whole = decoded_whole(&file).unwrap();
        for (h, w) in [(24, 24), (50, 40), (131, 97)] {
            for antialias in [true, false] {
                let p = Pipeline {
                    antialias,
                    ..training_crops(h, w)
                };
                for seed in 0..50 {
                    assert_eq!(
                        run(&p, &file, seed),
                        run(&p, &whole, seed),
                        "{sampling:?}, {h}x{w}, antialias {antialias}, seed {seed}"
                    );
                }
            }
        }
    }
}

/// Offset of the height in a jpeg-encoder file's SOF0 header.
fn sof_height_at(file: &[u8]) -> usize {
    file.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap() + 5
}

#[test]
fn a_jpeg_whose_data_stops_short_is_an_error_where_a_region_reaches_past_it() {
    // Files cut short, with and without their end marker put back (and
    // bytes after it), and one whose frame declares twice the rows its scan
    // codes: decoded whole, each is an error, not rows made up; a region
    // above where the data stops decodes as in the complete file.
    use jpeg_encoder::{ColorType, SamplingFactor as F};
    let (w, h) = (48, 64);
    let layouts = [
        (ColorType::Rgb, F::F_1_1),
        (ColorType::Rgb, F::F_2_1),
        (ColorType::Rgb, F::F_1_2),
        (ColorType::Rgb, F::F_2_2),
        (ColorType::Luma, F::F_1_1),
    ];
    let (mut whole, mut part) = (Vec::new(), Vec::new());
    let mut decoders = Decoders::default();
    let rgb = Channels::Rgb;
    // A file cut at three places, each with nothing after the cut, its end
    // marker, or its end marker and more bytes.
    let cut_files = |file: &[u8]| {
        let cuts = [file.len() / 3, file.len() * 2 / 3, file.len() - 3];
        let tails: [&[u8]; 3] = [&[], &[0xFF, 0xD9], &[0xFF, 0xD9, 0, 1, 2]];
        cuts.into_iter()
            .flat_map(|cut| tails.map(|tail| [&file[..cut], tail].concat()))
            .collect::<Vec<_>>()
    };
    for (color, sampling) in layouts {
        for restart in [0, 3] {
            let file = jpeg_of((w, h), color, sampling, restart, false);
            let mut bad = cut_files(&file);
            let mut taller = file.clone();
            let at = sof_height_at(&taller);
            taller[at..at + 2].copy_from_slice(&(2 * h).to_be_bytes());
            bad.push(taller.clone());
            for bad in &bad {
                let err = zimage::decode(bad, rgb, DEFAULT_MAX_PIXELS, &mut whole);
                assert!(
                    matches!(err, Err(ImageError::Decode { format: "JPEG", .. })),
                    "{color:?} {sampling:?} restart {restart}: {:?}",
                    err.map(|_| ())
                );
            }
            zimage::decode(&file, rgb, DEFAULT_MAX_PIXELS, &mut whole).unwrap();
            let (rows, row) = (40, usize::from(w) * 3);
            let top = |height| move |_| rect(0, 0, usize::from(w), height).into();
            let d = zimage::decode_region(
                &taller,
                rgb,
                DEFAULT_MAX_PIXELS,
                top(rows),
                &mut part,
                &mut decoders,
            );
            assert_eq!(d.unwrap().region.height, rows);
            assert!(part == whole[..rows * row]);
            let d = zimage::decode_region(
                &taller,
                rgb,
                DEFAULT_MAX_PIXELS,
                top(100),
                &mut part,
                &mut decoders,
            );
            assert!(matches!(d, Err(ImageError::Decode { .. })), "{d:?}");
        }
    }
    // Progressive files, whose every scan covers the whole image: an error
    // whatever the region.
    for sampling in [F::F_2_2, F::F_2_1] {
        let file = jpeg_of((w, h), ColorType::Rgb, sampling, 0, true);
        for (k, bad) in cut_files(&file).iter().enumerate() {
            let err = zimage::decode(bad, rgb, DEFAULT_MAX_PIXELS, &mut whole);
            assert!(
                matches!(err, Err(ImageError::Decode { format: "JPEG", .. })),
                "progressive {sampling:?}, cut file {k}: {:?}",
                err.map(|_| ())
            );
            // Whatever the region: every scan covers it.
            let first_rows = |_| rect(0, 0, 8, 8).into();
            let d = zimage::decode_region(
                bad,
                rgb,
                DEFAULT_MAX_PIXELS,
                first_rows,
                &mut part,
                &mut decoders,
            );
            assert!(matches!(d, Err(ImageError::Decode { .. })), "{d:?}");
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    /// Damaged JPEGs (bytes changed, the frame's size changed, cut short
    /// with or without an end marker put back) through random crops give
    /// pixels or an error, never a panic; and when both the file and its
    /// whole decode give pixels, they are the same.
    #[test]
    fn damaged_jpegs_give_pixels_or_errors_and_regions_change_neither(
        changes in proptest::collection::vec((0usize..4096, proptest::prelude::any::<u8>()), 0..4),
        height in proptest::option::of(0u16..200),
        width in proptest::option::of(0u16..200),
        cut in proptest::option::of(0usize..4096),
        end_marker in proptest::prelude::any::<bool>(),
        seed in proptest::prelude::any::<u64>(),
    ) {
        let mut file = jpeg_of(
            (40, 56),
            jpeg_encoder::ColorType::Rgb,
            jpeg_encoder::SamplingFactor::F_2_2,
            0,
            false,
        );
        let at = sof_height_at(&file);
        for (offset, byte) in changes {
            let i = offset % file.len();
            file[i] = byte;
        }
        if let Some(h) = height {
            file[at..at + 2].copy_from_slice(&h.to_be_bytes());
        }
        if let Some(w) = width {
            file[at + 2..at + 4].copy_from_slice(&w.to_be_bytes());
        }
        if let Some(cut) = cut {
            file.truncate(cut % file.len());
            if end_marker {
                file.extend_from_slice(&[0xFF, 0xD9]);
            }
        }
        let p = training_crops(16, 16);
        let cropped = run(&p, &file, seed);
        if let (Ok(cropped), Ok(whole)) = (&cropped, decoded_whole(&file)) {
            proptest::prop_assert_eq!(cropped, &run(&p, &whole, seed).unwrap());
        }
    }
}

#[test]
fn bad_images_are_errors_naming_what_is_wrong() {
    let rgb = noise(8 * 8 * 3, 6);
    let good = png_of(8, 8, png::ColorType::Rgb, png::BitDepth::Eight, &rgb, None);
    let p = pipeline(8, 8, Channels::Rgb);
    assert_eq!(run(&p, &[], 0), Err(ImageError::Empty));
    assert!(matches!(
        run(&p, b"GIF89a....", 0),
        Err(ImageError::UnknownFormat(_))
    ));
    for cut in [good.len() / 2, good.len() - 13, 12] {
        assert!(
            matches!(run(&p, &good[..cut], 0), Err(ImageError::Decode { .. })),
            "cut {cut}"
        );
    }
    // A flipped bit inside the compressed pixels breaks the chunk's CRC.
    let mut damaged = good.clone();
    let at = damaged.len() - 20;
    damaged[at] ^= 0x10;
    assert!(matches!(
        run(&p, &damaged, 0),
        Err(ImageError::Decode { .. })
    ));
    // A bomb: a small file whose header claims 100,000 x 100,000 pixels.
    let mut bomb = png_of(
        1,
        1,
        png::ColorType::Rgb,
        png::BitDepth::Eight,
        &[0, 0, 0],
        None,
    );
    bomb[16..20].copy_from_slice(&100_000u32.to_be_bytes());
    bomb[20..24].copy_from_slice(&100_000u32.to_be_bytes());
    let crc = crc32(&bomb[12..29]);
    bomb[29..33].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        run(&p, &bomb, 0),
        Err(ImageError::TooLarge { width: 100_000, .. })
    ));
}

/// CRC-32 of a PNG chunk (type and data), to forge a consistent header.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Each row of `pixels` (`width` pixels of `channels` bytes) mirrored left
/// to right.
fn mirrored_rows(pixels: &[u8], width: usize, channels: usize) -> Vec<u8> {
    pixels
        .chunks(width * channels)
        .flat_map(|row| {
            row.chunks(channels)
                .rev()
                .flatten()
                .copied()
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_flip_mirrors_the_image_on_a_coin_of_the_seed() {
    let (w, h) = (10, 4);
    for (color, channels, c) in [
        (png::ColorType::Grayscale, Channels::Gray, 1),
        (png::ColorType::Rgb, Channels::Rgb, 3),
        (png::ColorType::Rgba, Channels::Rgba, 4),
    ] {
        let pixels = noise(w * h * c, 7);
        let bytes = png_of(
            w as u32,
            h as u32,
            color,
            png::BitDepth::Eight,
            &pixels,
            None,
        );
        let mirrored = mirrored_rows(&pixels, w, c);
        let p = Pipeline {
            flip: true,
            ..pipeline(h, w, channels)
        };
        let outs: Vec<Vec<u8>> = (0..64).map(|seed| run(&p, &bytes, seed).unwrap()).collect();
        assert!(
            outs.iter().all(|o| *o == pixels || *o == mirrored),
            "{c} channels"
        );
        let flipped = outs.iter().filter(|o| **o == mirrored).count();
        assert!((16..=48).contains(&flipped), "{flipped} of 64 flipped");
        assert_eq!(run(&p, &bytes, 9).unwrap(), outs[9], "the seed decides");
    }
}

#[test]
// The pipeline writes float32 in the host's order, as NumPy reads it.
#[allow(clippy::host_endian_bytes)]
fn crops_cut_their_box_and_normalising_writes_float32() {
    let (w, h) = (40, 30);
    let rgb = noise(w * h * 3, 8);
    let bytes = rgb_png(w, h, &rgb);
    // A centre box of the output's size and aspect is cut without resampling.
    let p = Pipeline {
        crop: Crop::Center { fraction: 0.5 },
        ..pipeline(15, 15, Channels::Rgb)
    };
    let got = run(&p, &bytes, 0).unwrap();
    let (left, top) = ((w - 15) / 2, (h - 15) / 2);
    let want: Vec<u8> = (top..top + 15)
        .flat_map(|y| rgb[(y * w + left) * 3..(y * w + left + 15) * 3].to_vec())
        .collect();
    assert_eq!(got, want);
    // Random-resized crops differ from seed to seed and repeat for a seed.
    let p = Pipeline {
        crop: Crop::RandomResized {
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        },
        ..pipeline(16, 16, Channels::Rgb)
    };
    assert_ne!(run(&p, &bytes, 1).unwrap(), run(&p, &bytes, 2).unwrap());
    assert_eq!(run(&p, &bytes, 1).unwrap(), run(&p, &bytes, 1).unwrap());
    // Normalised: (v / 255 - mean) / std per channel, float32.
    let mean = vec![0.485, 0.456, 0.406];
    let std = vec![0.229, 0.224, 0.225];
    let p = Pipeline {
        normalize: Some(Normalize {
            mean: mean.clone(),
            std: std.clone(),
        }),
        ..pipeline(h, w, Channels::Rgb)
    };
    assert_eq!(p.sample_len(), w * h * 3 * 4);
    let got = run(&p, &bytes, 0).unwrap();
    for (k, (value, &v)) in got.chunks(4).zip(&rgb).enumerate() {
        let value = f32::from_ne_bytes(value.try_into().unwrap());
        let want = (f32::from(v) / 255.0 - mean[k % 3]) / std[k % 3];
        assert_eq!(value, want);
    }
}

/// Bilinear interpolation without antialiasing (half-pixel centres, as
/// `tf.image.resize` and torchvision's `antialias=False`), in floating
/// point: an output pixel's centre is mapped into the source, the source
/// pixels whose centres lie within one pixel of it are weighted by their
/// distance, and the weights of pixels past the edge are dropped and the
/// rest rescaled to a sum of 1 (which clamps to the edge).
fn interpolated(
    pixels: &[u8],
    (w, h): (usize, usize),
    channels: usize,
    (out_w, out_h): (usize, usize),
) -> Vec<u8> {
    let taps = |o: usize, size: usize, out: usize| -> Vec<(usize, f64)> {
        let centre = (o as f64 + 0.5) * size as f64 / out as f64;
        let mut taps: Vec<(usize, f64)> = (0..size)
            .map(|x| (x, 1.0 - (x as f64 + 0.5 - centre).abs()))
            .filter(|&(_, weight)| weight > 0.0)
            .collect();
        let sum: f64 = taps.iter().map(|t| t.1).sum();
        taps.iter_mut().for_each(|t| t.1 /= sum);
        taps
    };
    let mut out = Vec::with_capacity(out_w * out_h * channels);
    for y in 0..out_h {
        let rows = taps(y, h, out_h);
        for x in 0..out_w {
            let columns = taps(x, w, out_w);
            for c in 0..channels {
                let mut value = 0.0;
                for &(sy, wy) in &rows {
                    for &(sx, wx) in &columns {
                        value += wy * wx * f64::from(pixels[(sy * w + sx) * channels + c]);
                    }
                }
                out.push(value.round().clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}

#[test]
fn without_antialias_a_resize_interpolates_within_a_level() {
    let (w, h) = (97, 61);
    let rgb = noise(w * h * 3, 9);
    let bytes = rgb_png(w, h, &rgb);
    let gray: Vec<u8> = rgb.chunks(3).map(luma).collect();
    let rgba: Vec<u8> = rgb
        .chunks(3)
        .flat_map(|p| [p[0], p[1], p[2], 255])
        .collect();
    // Shrinking (by 2.4 and 2), enlarging, and both at once.
    for (out_w, out_h) in [(40, 30), (150, 100), (64, 90)] {
        for (channels, pixels) in [
            (Channels::Gray, &gray),
            (Channels::Rgb, &rgb),
            (Channels::Rgba, &rgba),
        ] {
            let n = channels.count();
            let want = interpolated(pixels, (w, h), n, (out_w, out_h));
            let p = Pipeline {
                antialias: false,
                ..pipeline(out_h, out_w, channels)
            };
            let got = run(&p, &bytes, 0).unwrap();
            let off = |a: &[u8]| a.iter().zip(&want).map(|(&a, &b)| a.abs_diff(b)).max();
            assert!(off(&got) <= Some(1), "{out_w}x{out_h}, {n} channels");
            // With antialiasing (the default), a shrink averages more pixels.
            if out_w < w && out_h < h {
                let smoothed = run(&pipeline(out_h, out_w, channels), &bytes, 0).unwrap();
                assert!(off(&smoothed) > Some(16), "{out_w}x{out_h}, {n} channels");
            }
        }
    }
}

/// `pixels` (RGB, `w` x `h`) resized to `out_w` x `out_h` by
/// fast_image_resize's three-channel kernels, bilinear with or without
/// antialiasing.
fn resized_as_rgb(
    pixels: &[u8],
    (w, h): (usize, usize),
    (out_w, out_h): (usize, usize),
    antialias: bool,
) -> Vec<u8> {
    use fast_image_resize::images::{TypedImage, TypedImageRef};
    use fast_image_resize::pixels::U8x3;
    use fast_image_resize::{FilterType, ResizeAlg, ResizeOptions, Resizer};
    let source = TypedImageRef::<U8x3>::from_buffer(w as u32, h as u32, pixels).unwrap();
    let mut out = vec![0u8; out_w * out_h * 3];
    let mut target = TypedImage::<U8x3>::from_buffer(out_w as u32, out_h as u32, &mut out).unwrap();
    let alg = match antialias {
        true => ResizeAlg::Convolution(FilterType::Bilinear),
        false => ResizeAlg::Interpolation(FilterType::Bilinear),
    };
    let options = ResizeOptions::new().resize_alg(alg).use_alpha(false);
    Resizer::new()
        .resize_typed(&source, &mut target, &options)
        .unwrap();
    out
}

/// RGB is resized as RGBA and its fourth channel dropped (`Pipeline::run`):
/// the same bytes as the three-channel resize, at widths that are and are
/// not a multiple of the four pixels the channel is dropped from at a time,
/// flipped or not, from a PNG and from a JPEG.
#[test]
fn rgb_is_the_same_bytes_as_a_three_channel_resize() {
    let (w, h) = (97, 61);
    let png = rgb_png(w, h, &noise(w * h * 3, 10));
    let jpeg = jpeg_of(
        (w as u16, h as u16),
        jpeg_encoder::ColorType::Rgb,
        jpeg_encoder::SamplingFactor::F_2_2,
        0,
        false,
    );
    for bytes in [&png, &jpeg] {
        let mut decoded = Vec::new();
        zimage::decode(bytes, Channels::Rgb, DEFAULT_MAX_PIXELS, &mut decoded).unwrap();
        for (out_w, out_h) in [(40, 30), (15, 9), (150, 100), (1, 7), (97, 61)] {
            for antialias in [true, false] {
                let want = resized_as_rgb(&decoded, (w, h), (out_w, out_h), antialias);
                let mirrored = mirrored_rows(&want, out_w, 3);
                let p = Pipeline {
                    antialias,
                    flip: true,
                    ..pipeline(out_h, out_w, Channels::Rgb)
                };
                let outs: Vec<Vec<u8>> =
                    (0..16).map(|seed| run(&p, bytes, seed).unwrap()).collect();
                let case = format!("{out_w}x{out_h}, antialias {antialias}");
                assert!(outs.contains(&want), "{case}: never as resized");
                assert!(outs.contains(&mirrored), "{case}: never mirrored");
                assert!(outs.iter().all(|o| *o == want || *o == mirrored), "{case}");
            }
        }
    }
}

#[test]
fn bad_pipelines_are_refused() {
    let good = pipeline(8, 8, Channels::Rgb);
    let bad = [
        Pipeline {
            height: 0,
            ..good.clone()
        },
        Pipeline {
            crop: Crop::Center { fraction: 0.0 },
            ..good.clone()
        },
        Pipeline {
            crop: Crop::RandomResized {
                scale: (0.5, 0.1),
                ratio: (1.0, 1.0),
            },
            ..good.clone()
        },
        Pipeline {
            crop: Crop::RandomResized {
                scale: (0.1, 1.0),
                ratio: (0.0, 1.0),
            },
            ..good.clone()
        },
        Pipeline {
            normalize: Some(Normalize {
                mean: vec![0.5],
                std: vec![0.5],
            }),
            ..good.clone()
        },
        Pipeline {
            normalize: Some(Normalize {
                mean: vec![0.5; 3],
                std: vec![0.0; 3],
            }),
            ..good.clone()
        },
    ];
    for p in bad {
        assert!(
            matches!(p.validate(), Err(ImageError::InvalidPipeline(_))),
            "{p:?}"
        );
    }
    assert!(good.validate().is_ok());
}
