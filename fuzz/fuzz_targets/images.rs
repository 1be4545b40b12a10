//! Encoded images, damaged or not, through the image pipeline.
//!
//! The input is a 16-byte header of parameters (channels, crop, output
//! size, flip, draft, normalisation, antialiasing, a region and a scale, a
//! seed) and then the file's bytes. What must hold, whatever the bytes:
//! - the pipeline gives pixels or an error, never a panic or a crash, and
//!   the same outcome and bytes from fresh memory as from memory an earlier
//!   image left behind;
//! - a region decoded at a scale holds its region's pixels (the buffer's
//!   length is the region's), lies inside the scaled image and covers the
//!   region asked for when that lies inside the image; and where the whole
//!   image decodes at the same scale too, the region's pixels are the
//!   whole decode's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zimage::{
    decode_region, Channels, Crop, CropBox, Decoders, Normalize, Pipeline, Scale, Scratch, Wanted,
};

/// Parameter bytes before the file.
const HEADER: usize = 16;
/// Images of more pixels are refused undecoded: the fuzzer's memory limit.
const MAX_PIXELS: usize = 1 << 22;

fuzz_target!(|input: &[u8]| {
    let Some((p, file)) = input.split_first_chunk::<HEADER>() else {
        return;
    };
    let channels = [Channels::Gray, Channels::Rgb, Channels::Rgba][usize::from(p[0] % 3)];
    let crop = match p[1] % 3 {
        0 => Crop::Resize,
        1 => Crop::Center { fraction: 0.875 },
        _ => Crop::RandomResized {
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        },
    };
    let normalize = (p[4] & 4 != 0).then(|| Normalize {
        mean: vec![0.5; channels.count()],
        std: vec![0.25; channels.count()],
    });
    let pipeline = Pipeline {
        height: usize::from(p[2] % 64) + 1,
        width: usize::from(p[3] % 64) + 1,
        channels,
        crop,
        flip: p[4] & 1 != 0,
        normalize,
        max_pixels: MAX_PIXELS,
        draft: p[4] & 2 != 0,
        antialias: p[4] & 8 == 0,
    };
    let seed = u64::from_le_bytes([p[10], p[11], p[12], p[13], p[14], p[15], 0, 0]);

    // The image after another crop of it, and from fresh memory.
    let mut used = Scratch::default();
    let mut out = vec![0u8; pipeline.sample_len()];
    let _ = pipeline.run(file, seed ^ 1, &mut out, &mut used);
    let after = pipeline.run(file, seed, &mut out, &mut used);
    let mut fresh_out = vec![0u8; pipeline.sample_len()];
    let fresh = pipeline.run(file, seed, &mut fresh_out, &mut Scratch::default());
    assert_eq!(after.is_ok(), fresh.is_ok(), "{after:?} against {fresh:?}");
    if after.is_ok() {
        assert!(out == fresh_out, "the pixels depend on the memory reused");
    }

    let scale = Scale::eighths([8, 4, 2, 1][usize::from(p[5] % 4)]).unwrap();
    let asked = CropBox {
        left: usize::from(p[6]),
        top: usize::from(p[7]),
        width: usize::from(p[8]),
        height: usize::from(p[9]),
    };
    let (mut part, mut decoders) = (Vec::new(), Decoders::default());
    let mut size = None;
    let Ok(d) = decode_region(
        file,
        channels,
        MAX_PIXELS,
        |s| {
            size = Some(s);
            Wanted {
                region: asked,
                scale,
            }
        },
        &mut part,
        &mut decoders,
    ) else {
        return;
    };
    let c = channels.count();
    let r = d.region;
    assert_eq!(Some(d.size), size);
    assert_eq!(part.len(), r.width * r.height * c, "{d:?}");
    let (width, height) = (d.scale.of(d.size.width), d.scale.of(d.size.height));
    assert!(
        r.left + r.width <= width && r.top + r.height <= height,
        "{d:?}"
    );
    let inside = asked.width > 0
        && asked.height > 0
        && asked.left + asked.width <= d.size.width
        && asked.top + asked.height <= d.size.height;
    let e = d.scale.in_eighths();
    let want = CropBox {
        left: asked.left * e / 8,
        top: asked.top * e / 8,
        width: d.scale.of(asked.left + asked.width) - asked.left * e / 8,
        height: d.scale.of(asked.top + asked.height) - asked.top * e / 8,
    };
    if inside {
        assert!(
            r.left <= want.left
                && r.top <= want.top
                && want.left + want.width <= r.left + r.width
                && want.top + want.height <= r.top + r.height,
            "{d:?} does not cover {want:?}"
        );
    }
    // The whole image at the same scale, where it decodes.
    let mut whole = Vec::new();
    let Ok(all) = decode_region(
        file,
        channels,
        MAX_PIXELS,
        |s| Wanted {
            region: s.whole(),
            scale: d.scale,
        },
        &mut whole,
        &mut decoders,
    ) else {
        return;
    };
    if !inside || all.scale != d.scale {
        return;
    }
    for row in 0..want.height {
        let from = ((want.top + row) * width + want.left) * c;
        let at = ((want.top - r.top + row) * r.width + want.left - r.left) * c;
        assert!(
            part[at..at + want.width * c] == whole[from..from + want.width * c],
            "{d:?}: row {row} of {want:?} differs from the whole decode"
        );
    }
});
