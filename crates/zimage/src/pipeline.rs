//! The declared pipeline of an image stream: decode, crop, resize, flip and
//! normalise one encoded image into its slot of a batch.

use fast_image_resize::images::{TypedImage, TypedImageRef};
use fast_image_resize::pixels::{U8x4, U8};
use fast_image_resize::{FilterType, PixelTrait, ResizeAlg, ResizeOptions, Resizer};

use crate::crop::{Crop, CropBox, Draws};
use crate::decode::{decode_region, Channels, Decoded, Decoders, Scale, Size, Wanted};
use crate::error::ImageError;

/// The most pixels an image may declare before it is refused undecoded
/// (8192 x 8192): memory for one decoded image stays under 256 MiB.
pub const DEFAULT_MAX_PIXELS: usize = 1 << 26;

/// Per-channel normalisation of the output to `float32`:
/// `(value / 255 - mean) / std`.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalize {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

/// What every image of a stream becomes: `height` x `width` pixels of
/// `channels`, cut by `crop`, mirrored left to right on a fair coin when
/// `flip` is set, as `uint8` or (with `normalize`) `float32`. With `draft`,
/// a JPEG whose box is at least twice the output each way is decoded at
/// 1/2, 1/4 or 1/8 of its size (libjpeg-turbo's scaled inverse DCT, as
/// Pillow's `draft`), the least at which the box keeps the output's pixels.
/// The resize is bilinear: with `antialias`, its filter widens to average
/// every source pixel when shrinking (Pillow's `BILINEAR`); without, each
/// output pixel interpolates its two nearest source pixels each way
/// (`tf.image.resize`'s bilinear, torchvision's `antialias=False`), which
/// aliases when shrinking.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    pub height: usize,
    pub width: usize,
    pub channels: Channels,
    pub crop: Crop,
    pub flip: bool,
    pub normalize: Option<Normalize>,
    pub max_pixels: usize,
    pub draft: bool,
    pub antialias: bool,
}

/// The memory a thread reuses from image to image.
pub struct Scratch {
    decoded: Vec<u8>,
    decoders: Decoders,
    /// RGB output resized as RGBA ([`Pipeline::run`]), before its fourth
    /// channel is dropped.
    wide: Vec<u8>,
    resized: Vec<u8>,
    resizer: Resizer,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            decoded: Vec::new(),
            decoders: Decoders::default(),
            wide: Vec::new(),
            resized: Vec::new(),
            resizer: Resizer::new(),
        }
    }
}

impl Pipeline {
    /// Checks the parameters: a non-empty output, crop fractions in
    /// `(0, 1]`, ratio ranges of positive, ordered bounds, and one finite
    /// mean and positive standard deviation per channel.
    pub fn validate(&self) -> Result<(), ImageError> {
        let bad = |why: String| Err(ImageError::InvalidPipeline(why));
        if self.height == 0 || self.width == 0 {
            return bad(format!("output size {}x{}", self.height, self.width));
        }
        if self.max_pixels == 0 {
            return bad("max_pixels must be at least 1".into());
        }
        let fraction = |f: f64| f > 0.0 && f <= 1.0;
        match self.crop {
            Crop::Resize => {}
            Crop::Center { fraction: f } if !fraction(f) => {
                return bad(format!("centre crop fraction {f} is not in (0, 1]"));
            }
            Crop::Center { .. } => {}
            Crop::RandomResized { scale, ratio } => {
                if !(fraction(scale.0) && fraction(scale.1) && scale.0 <= scale.1) {
                    return bad(format!("scale {scale:?} is not a range within (0, 1]"));
                }
                if !(ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                    return bad(format!("ratio {ratio:?} is not a range of positive ratios"));
                }
            }
        }
        if let Some(n) = &self.normalize {
            let c = self.channels.count();
            if n.mean.len() != c || n.std.len() != c {
                return bad(format!(
                    "normalize needs {c} means and {c} standard deviations"
                ));
            }
            if !n.mean.iter().all(|m| m.is_finite())
                || !n.std.iter().all(|s| s.is_finite() && *s > 0.0)
            {
                return bad("normalize needs finite means and positive deviations".into());
            }
        }
        Ok(())
    }

    /// Values per sample: height x width x channels.
    pub fn values(&self) -> usize {
        self.height * self.width * self.channels.count()
    }

    /// Bytes per sample in a batch: one per value, four when normalised.
    pub fn sample_len(&self) -> usize {
        self.values() * if self.normalize.is_some() { 4 } else { 1 }
    }

    /// The scale a JPEG with the box `place` may be decoded at. Only the
    /// halvings: libjpeg-turbo's other scales (7/8, 3/4, ...) have no SIMD
    /// inverse DCT and made the pipeline slower (bench/README.md, "Image
    /// decoders").
    fn scale(&self, place: CropBox) -> Scale {
        if !self.draft {
            return Scale::FULL;
        }
        let fits =
            |e: usize| place.width * e >= self.width * 8 && place.height * e >= self.height * 8;
        [1, 2, 4]
            .into_iter()
            .find(|&e| fits(e))
            .and_then(Scale::eighths)
            .unwrap_or(Scale::FULL)
    }

    /// The region of a `size` image that the resize of `place` at `scale`
    /// reads: the box and, on each side, its filter's reach at that scale
    /// (the bilinear support of 1, scaled to one output pixel's span when
    /// shrinking with `antialias`, and one pixel more for rounding), in the
    /// whole image's pixels.
    fn resize_reads(&self, place: CropBox, size: Size, scale: Scale) -> CropBox {
        let e = scale.in_eighths();
        let support = |side: usize, out: usize| {
            if self.antialias {
                (side * e).div_ceil(8 * out)
            } else {
                1
            }
        };
        let reach = |side: usize, out: usize| ((support(side, out) + 1) * 8).div_ceil(e);
        let reach_x = reach(place.width, self.width);
        let reach_y = reach(place.height, self.height);
        let left = place.left.saturating_sub(reach_x);
        let top = place.top.saturating_sub(reach_y);
        CropBox {
            left,
            top,
            width: (place.left + place.width + reach_x).min(size.width) - left,
            height: (place.top + place.height + reach_y).min(size.height) - top,
        }
    }

    /// Runs the pipeline on `encoded` with the sample's `seed` (its crop
    /// box and flip), into `out` ([`Pipeline::sample_len`] bytes).
    pub fn run(
        &self,
        encoded: &[u8],
        seed: u64,
        out: &mut [u8],
        scratch: &mut Scratch,
    ) -> Result<(), ImageError> {
        let Scratch {
            decoded,
            decoders,
            wide,
            resized,
            resizer,
        } = scratch;
        let mut draws = Draws::new(seed);
        // The box is placed as soon as the size is known, so that a JPEG
        // decodes little more than what the resize reads.
        let mut placed = None;
        let reads = |size: Size| {
            let place = self.crop.place(
                size.width,
                size.height,
                (self.width, self.height),
                &mut draws,
            );
            placed = Some(place);
            let scale = self.scale(place);
            Wanted {
                region: self.resize_reads(place, size, scale),
                scale,
            }
        };
        // RGB is decoded and resized as RGBA, each channel on its own, and
        // its fourth channel dropped after: fast_image_resize's kernels for
        // four-byte pixels are faster than those for three, by more than
        // the wider decode and resize cost (bench/README.md, "RGB resized
        // as RGBA"); the RGB bytes are the same.
        let work_channels = match self.channels {
            Channels::Rgb => Channels::Rgba,
            other => other,
        };
        let Decoded { region, scale, .. } = decode_region(
            encoded,
            work_channels,
            self.max_pixels,
            reads,
            decoded,
            decoders,
        )?;
        let place = placed.expect("the box is placed before any pixels are decoded");
        let flip = self.flip && draws.coin();
        let values = self.values();
        if self.normalize.is_some() {
            resized.resize(values, 0);
        }
        {
            // Pixels go straight to the slot, or through `resized` when
            // they are normalised into it.
            let pixels: &mut [u8] = match self.normalize {
                None => &mut out[..values],
                Some(_) => &mut resized[..],
            };
            // Channels resampled each on its own, alpha included, as
            // Pillow's bilinear resize does (no premultiplying).
            let f = scale.factor();
            let resize_alg = if self.antialias {
                ResizeAlg::Convolution(FilterType::Bilinear)
            } else {
                ResizeAlg::Interpolation(FilterType::Bilinear)
            };
            let options = ResizeOptions::new()
                .resize_alg(resize_alg)
                .use_alpha(false)
                .crop(
                    place.left as f64 * f - region.left as f64,
                    place.top as f64 * f - region.top as f64,
                    place.width as f64 * f,
                    place.height as f64 * f,
                );
            let source = (region.width as u32, region.height as u32, &decoded[..]);
            let (width, height) = (self.width as u32, self.height as u32);
            match self.channels {
                Channels::Gray => resize::<U8>(resizer, source, (width, height, pixels), &options),
                Channels::Rgb => {
                    wide.resize(self.width * self.height * 4, 0);
                    resize::<U8x4>(resizer, source, (width, height, wide), &options)
                }
                Channels::Rgba => {
                    resize::<U8x4>(resizer, source, (width, height, pixels), &options)
                }
            }
            .map_err(|e| ImageError::Decode {
                format: "resize",
                reason: e,
            })?;
            match self.channels {
                Channels::Rgb => drop_fourth_channel(wide, pixels, self.width, flip),
                _ if flip => mirror(pixels, self.width, self.channels.count()),
                _ => {}
            }
        }
        if let Some(n) = &self.normalize {
            normalize(resized, n, out);
        }
        Ok(())
    }
}

/// Resizes the `(width, height, pixels)` of `source` (cut by the crop of
/// `options`) to those of `target`, for pixels of type `P`. Typed, not
/// `Resizer::resize`, which would build fast_image_resize's convolutions
/// for all thirteen of its pixel types, not the two used (a release build
/// of this crate took 48 s instead of 20).
fn resize<P: PixelTrait>(
    resizer: &mut Resizer,
    (width, height, pixels): (u32, u32, &[u8]),
    target: (u32, u32, &mut [u8]),
    options: &ResizeOptions,
) -> Result<(), String> {
    let source =
        TypedImageRef::<P>::from_buffer(width, height, pixels).map_err(|e| e.to_string())?;
    let mut target =
        TypedImage::<P>::from_buffer(target.0, target.1, target.2).map_err(|e| e.to_string())?;
    resizer
        .resize_typed(&source, &mut target, options)
        .map_err(|e| e.to_string())
}

/// The first three bytes of each four-byte pixel of `rgba` into `rgb`, row
/// by row (`width` pixels a row), each row mirrored left to right with
/// `flip`: the flip costs nothing more here. Four pixels at a time, by one
/// byte shuffle where the CPU has SSSE3 (any x86-64 made since 2008);
/// elsewhere by the compiler's byte moves, which took half as long again.
fn drop_fourth_channel(rgba: &[u8], rgb: &mut [u8], width: usize, flip: bool) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU has SSSE3, checked just above.
        return unsafe { drop_fourth_channel_ssse3(rgba, rgb, width, flip) };
    }
    drop_fourth_channel_portable(rgba, rgb, width, flip);
}

/// [`drop_fourth_channel`] on any CPU.
fn drop_fourth_channel_portable(rgba: &[u8], rgb: &mut [u8], width: usize, flip: bool) {
    keep_three_of_four(rgba, rgb, width, flip, |f, mirrored| match mirrored {
        false => [
            f[0], f[1], f[2], f[4], f[5], f[6], f[8], f[9], f[10], f[12], f[13], f[14],
        ],
        true => [
            f[12], f[13], f[14], f[8], f[9], f[10], f[4], f[5], f[6], f[0], f[1], f[2],
        ],
    });
}

/// [`drop_fourth_channel`] with SSSE3's byte shuffle.
///
/// # Safety
/// The CPU must have SSSE3.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn drop_fourth_channel_ssse3(rgba: &[u8], rgb: &mut [u8], width: usize, flip: bool) {
    use std::arch::x86_64::_mm_storeu_si128;
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_set_epi8, _mm_shuffle_epi8};
    // Bytes 0-11 of the result from these bytes of the source (the last
    // four unused); `_mm_set_epi8` takes them from byte 15 down.
    let keep = _mm_set_epi8(-1, -1, -1, -1, 14, 13, 12, 10, 9, 8, 6, 5, 4, 2, 1, 0);
    let keep_mirrored = _mm_set_epi8(-1, -1, -1, -1, 2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12);
    keep_three_of_four(rgba, rgb, width, flip, |f, mirrored| {
        let mut out = [0u8; 16];
        // SAFETY: `f` and `out` are 16 bytes; unaligned loads and stores.
        unsafe {
            let pixels = _mm_loadu_si128(f.as_ptr().cast::<__m128i>());
            let mask = if mirrored { keep_mirrored } else { keep };
            let kept = _mm_shuffle_epi8(pixels, mask);
            _mm_storeu_si128(out.as_mut_ptr().cast::<__m128i>(), kept);
        }
        out[..12].try_into().expect("12 bytes")
    });
}

/// The loop of [`drop_fourth_channel`], with `keep(four_pixels, mirrored)`
/// the first three bytes of each of four pixels, in reverse order when
/// `mirrored`. Inlined, so that `keep` is compiled with its caller's CPU
/// features.
#[inline(always)]
fn keep_three_of_four(
    rgba: &[u8],
    rgb: &mut [u8],
    width: usize,
    flip: bool,
    keep: impl Fn(&[u8; 16], bool) -> [u8; 12],
) {
    let four = |f: &[u8], t: &mut [u8]| {
        t.copy_from_slice(&keep(f.try_into().expect("16 bytes"), flip));
    };
    for (from, to) in rgba
        .chunks_exact(width * 4)
        .zip(rgb.chunks_exact_mut(width * 3))
    {
        let mut froms = from.chunks_exact(16);
        if flip {
            // Pixel k of the row goes to slot width - 1 - k: the row's
            // first groups of four to its last slots, the few pixels left
            // over at its end to its first slots.
            let mut tos = to.rchunks_exact_mut(12);
            (&mut froms).zip(&mut tos).for_each(|(f, t)| four(f, t));
            let rest = froms.remainder().chunks_exact(4);
            for (f, t) in rest.zip(tos.into_remainder().rchunks_exact_mut(3)) {
                t.copy_from_slice(&f[..3]);
            }
        } else {
            let mut tos = to.chunks_exact_mut(12);
            (&mut froms).zip(&mut tos).for_each(|(f, t)| four(f, t));
            let rest = froms.remainder().chunks_exact(4);
            for (f, t) in rest.zip(tos.into_remainder().chunks_exact_mut(3)) {
                t.copy_from_slice(&f[..3]);
            }
        }
    }
}

/// Mirrors every row of `pixels` left to right.
/// (RGB is mirrored as its fourth channel is dropped: [`drop_fourth_channel`].)
fn mirror(pixels: &mut [u8], width: usize, channels: usize) {
    match channels {
        1 => pixels.chunks_exact_mut(width).for_each(<[u8]>::reverse),
        _ => mirror_pixels::<4>(pixels, width),
    }
}

/// [`mirror`] for pixels of `C` bytes: each row is copied aside and its
/// pixels written back in reverse, whole pixels at a time (a byte-by-byte
/// swap cost several times as much).
fn mirror_pixels<const C: usize>(pixels: &mut [u8], width: usize) {
    let mut row_copy = vec![0u8; width * C];
    for row in pixels.chunks_exact_mut(width * C) {
        row_copy.copy_from_slice(row);
        for (to, from) in row.chunks_exact_mut(C).zip(row_copy.chunks_exact(C).rev()) {
            to.copy_from_slice(from);
        }
    }
}

/// `(value / 255 - mean) / std` of every value, as `float32` into `out`.
// A batch is handed to NumPy as `float32`, which is in the host's order.
#[allow(clippy::host_endian_bytes)]
fn normalize(pixels: &[u8], n: &Normalize, out: &mut [u8]) {
    let channels = n.mean.len();
    for (k, (slot, &v)) in out.chunks_exact_mut(4).zip(pixels).enumerate() {
        let c = k % channels;
        let value = (f32::from(v) / 255.0 - n.mean[c]) / n.std[c];
        slot.copy_from_slice(&value.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_takes_the_least_halving_that_keeps_the_output() {
        let p = Pipeline {
            height: 224,
            width: 200,
            channels: Channels::Rgb,
            crop: Crop::Resize,
            flip: false,
            normalize: None,
            max_pixels: DEFAULT_MAX_PIXELS,
            draft: true,
            antialias: true,
        };
        let scale = |width, height| {
            p.scale(CropBox {
                left: 3,
                top: 5,
                width,
                height,
            })
            .in_eighths()
        };
        assert_eq!(scale(400, 448), 4);
        assert_eq!(scale(399, 448), 8);
        assert_eq!(scale(400, 447), 8);
        assert_eq!(scale(800, 900), 2);
        assert_eq!(scale(1600, 1792), 1);
        assert_eq!(scale(9000, 9000), 1);
        assert_eq!(scale(100, 100), 8);
        let off = Pipeline { draft: false, ..p };
        assert_eq!(
            off.scale(
                Size {
                    width: 9000,
                    height: 9000
                }
                .whole()
            ),
            Scale::FULL
        );
    }

    /// The three bytes of each pixel, pixel by pixel, rows mirrored with
    /// `flip`.
    fn kept(rgba: &[u8], width: usize, flip: bool) -> Vec<u8> {
        rgba.chunks(width * 4)
            .flat_map(|row| {
                let pixels: Vec<&[u8]> = row.chunks(4).collect();
                let order: Vec<&[u8]> = match flip {
                    true => pixels.into_iter().rev().collect(),
                    false => pixels,
                };
                order
                    .into_iter()
                    .flat_map(|p| p[..3].to_vec())
                    .collect::<Vec<u8>>()
            })
            .collect()
    }

    /// Both ways of dropping the fourth channel, at every width's
    /// remainder of four, against a pixel-by-pixel model.
    #[test]
    fn the_fourth_channel_is_dropped_and_rows_mirrored_on_every_cpu() {
        for width in 1..=13 {
            for height in 1..=3 {
                let rgba: Vec<u8> = (0..width * height * 4)
                    .map(|i| (i * 7 % 251) as u8)
                    .collect();
                for flip in [false, true] {
                    let want = kept(&rgba, width, flip);
                    let mut got = vec![0; width * height * 3];
                    drop_fourth_channel(&rgba, &mut got, width, flip);
                    assert_eq!(got, want, "{width}x{height}, flip {flip}");
                    let mut got = vec![0; width * height * 3];
                    drop_fourth_channel_portable(&rgba, &mut got, width, flip);
                    assert_eq!(got, want, "portable, {width}x{height}, flip {flip}");
                }
            }
        }
    }
}
