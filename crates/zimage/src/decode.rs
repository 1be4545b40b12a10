//! Encoded bytes to pixels: JPEG, PNG and WebP, recognised by their magic,
//! into 8-bit gray, RGB or RGBA.

use std::io::Cursor;

use image_webp::WebPDecoder;
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_png::PngDecoder;

use crate::crop::CropBox;
use crate::error::ImageError;
use crate::jpeg::JpegDecoder;

/// The formats read, by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jpeg,
    Png,
    WebP,
}

const JPEG_MAGIC: &[u8] = &[0xFF, 0xD8, 0xFF];
const PNG_MAGIC: &[u8] = &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
/// A WebP file is a RIFF container (`RIFF`, its length, then `WEBP`).
const RIFF_MAGIC: &[u8] = b"RIFF";
const WEBP_MAGIC: &[u8] = b"WEBP";

impl Format {
    /// The format of `bytes`, from its magic.
    pub fn sniff(bytes: &[u8]) -> Result<Format, ImageError> {
        if bytes.is_empty() {
            Err(ImageError::Empty)
        } else if bytes.starts_with(JPEG_MAGIC) {
            Ok(Format::Jpeg)
        } else if bytes.starts_with(PNG_MAGIC) {
            Ok(Format::Png)
        } else if bytes.starts_with(RIFF_MAGIC) && bytes.get(8..12) == Some(WEBP_MAGIC) {
            Ok(Format::WebP)
        } else {
            Err(ImageError::UnknownFormat(
                bytes[..bytes.len().min(8)].to_vec(),
            ))
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "JPEG",
            Format::Png => "PNG",
            Format::WebP => "WebP",
        }
    }
}

/// The channels of the pixels a pipeline produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channels {
    Gray,
    Rgb,
    Rgba,
}

impl Channels {
    /// Bytes per pixel.
    pub fn count(self) -> usize {
        match self {
            Channels::Gray => 1,
            Channels::Rgb => 3,
            Channels::Rgba => 4,
        }
    }
}

/// Pixels decoded into a caller's buffer: `height` rows of `width` pixels
/// of `channels`, row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub width: usize,
    pub height: usize,
}

impl Size {
    /// The box of the whole image.
    pub fn whole(self) -> CropBox {
        CropBox {
            left: 0,
            top: 0,
            width: self.width,
            height: self.height,
        }
    }
}

/// Decodes `bytes` into `pixels` (resized to fit) with the `channels`
/// asked for, refusing images of over `max_pixels` pixels before decoding
/// them. Gray becomes RGB by repeating it; RGB becomes gray by Pillow's
/// `convert('L')` weights (ITU-R 601-2; a colour JPEG gives its luma,
/// which is the same weighting); alpha is dropped, or opaque where it is
/// added.
pub fn decode(
    bytes: &[u8],
    channels: Channels,
    max_pixels: usize,
    pixels: &mut Vec<u8>,
) -> Result<Size, ImageError> {
    decode_region(
        bytes,
        channels,
        max_pixels,
        |size| size.whole().into(),
        pixels,
        &mut Decoders::default(),
    )
    .map(|d| d.size)
}

/// A size a JPEG may be decoded at, smaller than its own: `eighths` / 8 of
/// each side (1 to 8), which libjpeg-turbo's inverse DCT produces directly
/// from fewer of each block's coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    eighths: usize,
}

impl Scale {
    /// The image's own size.
    pub const FULL: Scale = Scale { eighths: 8 };

    /// `eighths` / 8 of each side, for `eighths` from 1 to 8.
    pub fn eighths(eighths: usize) -> Option<Scale> {
        (1..=8).contains(&eighths).then_some(Scale { eighths })
    }

    /// Eighths of each side.
    pub fn in_eighths(self) -> usize {
        self.eighths
    }

    /// `n` pixels of the whole image at this scale, rounded up as
    /// libjpeg-turbo sizes a scaled image.
    pub fn of(self, n: usize) -> usize {
        (n * self.eighths).div_ceil(8)
    }

    /// The factor from the whole image's coordinates to the scaled one's.
    pub fn factor(self) -> f64 {
        self.eighths as f64 / 8.0
    }
}

/// What a caller wants decoded of an image: at least `region` (in the whole
/// image's pixels), at `scale` if the decoder can scale (a JPEG that
/// decodes by regions), else at full size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    pub region: CropBox,
    pub scale: Scale,
}

impl From<CropBox> for Wanted {
    fn from(region: CropBox) -> Wanted {
        Wanted {
            region,
            scale: Scale::FULL,
        }
    }
}

/// Part of an image, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The whole image's size.
    pub size: Size,
    /// The scale the pixels were decoded at.
    pub scale: Scale,
    /// The region the pixels hold, row by row, in the scaled image's
    /// pixels: at least the one asked for, scaled.
    pub region: CropBox,
}

/// The decoders a thread keeps from image to image, and their memory.
#[derive(Default)]
pub struct Decoders {
    jpeg: JpegDecoder,
    /// A CMYK JPEG's pixels before their conversion.
    cmyk: Vec<u8>,
}

/// [`decode`], of at least the region `wanted(size)` of the image (which
/// must lie inside it): a JPEG decodes little more (`jpeg.rs`), at the
/// scale asked for, anything else decodes whole at full size. `wanted` is
/// called once, with the image's size, before any pixel is decoded,
/// whatever the format. The pixels of the wanted region are the same bytes
/// as in a whole decode at the same scale.
pub fn decode_region(
    bytes: &[u8],
    channels: Channels,
    max_pixels: usize,
    wanted: impl FnOnce(Size) -> Wanted,
    pixels: &mut Vec<u8>,
    decoders: &mut Decoders,
) -> Result<Decoded, ImageError> {
    let format = Format::sniff(bytes)?;
    let failed = |reason: String| ImageError::Decode {
        format: format.name(),
        reason,
    };
    let check = |(width, height): (usize, usize)| {
        if width == 0 || height == 0 {
            return Err(failed(format!("{width}x{height} pixels")));
        }
        match width.checked_mul(height) {
            Some(n) if n <= max_pixels => Ok(Size { width, height }),
            _ => Err(ImageError::TooLarge {
                width,
                height,
                limit: max_pixels,
            }),
        }
    };
    let whole = |size: Size| Decoded {
        size,
        scale: Scale::FULL,
        region: size.whole(),
    };
    match format {
        Format::Jpeg => {
            let Decoders { jpeg, cmyk } = decoders;
            let header = jpeg.header(bytes).map_err(failed)?;
            let size = check((header.size.width, header.size.height))?;
            let (scale, region) = jpeg
                .decode(bytes, header, wanted(size), channels, pixels, cmyk)
                .map_err(failed)?;
            Ok(Decoded {
                size,
                scale,
                region,
            })
        }
        Format::Png => {
            let options = DecoderOptions::default()
                .png_set_strip_to_8bit(true)
                .png_set_confirm_crc(true)
                .inflate_set_confirm_adler(true)
                .set_max_width(usize::MAX)
                .set_max_height(usize::MAX);
            let mut decoder = PngDecoder::new_with_options(ZCursor::new(bytes), options);
            decoder
                .decode_headers()
                .map_err(|e| failed(format!("{e:?}")))?;
            let size = check(
                decoder
                    .dimensions()
                    .ok_or_else(|| failed("no size".into()))?,
            )?;
            // Decoded whole, whatever region is wanted.
            wanted(size);
            let space = decoder
                .colorspace()
                .ok_or_else(|| failed("no colour type".into()))?;
            // A PNG bomb inflates to far more than its declared pixels: the
            // inflater stops at what they can fill (at most 8 bytes a pixel,
            // 16-bit RGBA, and a filter byte a row).
            let limit = size.height * (1 + size.width * 8);
            decoder.set_options(options.inflate_set_limit(limit));
            let decoded = decoder.decode_raw().map_err(|e| failed(format!("{e:?}")))?;
            let from = match space {
                ColorSpace::Luma => 1,
                ColorSpace::LumaA => 2,
                ColorSpace::RGB => 3,
                ColorSpace::RGBA => 4,
                other => return Err(failed(format!("colour type {other:?}"))),
            };
            if decoded.len() != size.width * size.height * from {
                return Err(failed(format!(
                    "{} bytes of pixels for {}x{}x{from}",
                    decoded.len(),
                    size.width,
                    size.height
                )));
            }
            convert(&decoded, from, channels, pixels);
            Ok(whole(size))
        }
        Format::WebP => {
            let mut decoder =
                WebPDecoder::new(Cursor::new(bytes)).map_err(|e| failed(e.to_string()))?;
            let (width, height) = decoder.dimensions();
            let size = check((width as usize, height as usize))?;
            wanted(size);
            let from = if decoder.has_alpha() { 4 } else { 3 };
            let mut decoded = vec![0; size.width * size.height * from];
            decoder
                .read_image(&mut decoded)
                .map_err(|e| failed(e.to_string()))?;
            convert(&decoded, from, channels, pixels);
            Ok(whole(size))
        }
    }
}

/// Pixels of `from` channels (1 gray, 2 gray and alpha, 3 RGB, 4 RGBA) as
/// `to`, into `out`.
fn convert(pixels: &[u8], from: usize, to: Channels, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(pixels.len() / from * to.count());
    for p in pixels.chunks_exact(from) {
        let (rgb, alpha) = match from {
            1 => ([p[0]; 3], 255),
            2 => ([p[0]; 3], p[1]),
            3 => ([p[0], p[1], p[2]], 255),
            _ => ([p[0], p[1], p[2]], p[3]),
        };
        match to {
            Channels::Gray if from <= 2 => out.push(p[0]),
            Channels::Gray => out.push(luma(rgb)),
            Channels::Rgb => out.extend_from_slice(&rgb),
            Channels::Rgba => out.extend_from_slice(&[rgb[0], rgb[1], rgb[2], alpha]),
        }
    }
}

/// A CMYK JPEG's pixels, as Adobe's programs store them (inverted: 255 is
/// no ink), as `to`, into `out`: each colour is its ink's value times
/// black's, as Pillow converts them (within a level).
pub(crate) fn cmyk_to(cmyk: &[u8], to: Channels, out: &mut Vec<u8>) {
    let rgb: Vec<u8> = cmyk
        .chunks_exact(4)
        .flat_map(|p| {
            let k = u32::from(p[3]);
            [0, 1, 2].map(|c| ((u32::from(p[c]) * k + 127) / 255) as u8)
        })
        .collect();
    convert(&rgb, 3, to, out);
}

/// Pillow's `L` of an RGB pixel: 0.299 R + 0.587 G + 0.114 B in 16-bit
/// fixed point, rounded.
fn luma([r, g, b]: [u8; 3]) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000) >> 16) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luma_matches_pillows_weights() {
        assert_eq!(luma([255, 255, 255]), 255);
        assert_eq!(luma([0, 0, 0]), 0);
        assert_eq!(luma([255, 0, 0]), 76);
        assert_eq!(luma([0, 255, 0]), 150);
        assert_eq!(luma([0, 0, 255]), 29);
    }

    #[test]
    fn formats_are_told_by_their_magic() {
        assert_eq!(Format::sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Ok(Format::Jpeg));
        assert_eq!(Format::sniff(PNG_MAGIC), Ok(Format::Png));
        assert_eq!(Format::sniff(b"RIFF\0\0\0\0WEBPVP8 "), Ok(Format::WebP));
        assert!(Format::sniff(b"RIFF\0\0\0\0WAVEfmt ").is_err());
        assert_eq!(Format::sniff(&[]), Err(ImageError::Empty));
        assert!(matches!(
            Format::sniff(b"GIF89a"),
            Err(ImageError::UnknownFormat(_))
        ));
    }
}
