//! JPEG decoding through libjpeg-turbo (its TurboJPEG 3 API): a whole image,
//! or only the region of it that a crop needs.
//!
//! A region's decode skips the inverse DCT, upsampling and colour conversion
//! of the columns beside it and of the rows above it (whose compressed data
//! is still read), and stops below it. Its left edge must fall on a column
//! of MCUs (8, 16 or 32 pixels wide), so the region decoded may start left
//! of the one asked for; its edge columns may differ from the whole image's
//! (their chroma is upsampled without their neighbours'), so it reaches a
//! column past the one asked for on each side. Layouts that TurboJPEG cannot
//! name (sampling factors other than its seven) and lossless files decode
//! whole.
//!
//! Either may be decoded scaled down (a draft): the inverse DCT then makes
//! fewer pixels of each block, and the region and the MCU columns are
//! counted in the scaled image's pixels. Files that decode whole decode at
//! full size.
//!
//! Warnings are errors: libjpeg-turbo warns of damaged data that it decodes
//! on regardless (compressed data that stops short is decoded as flat gray),
//! so a warning means pixels that are not the image's.

use std::ffi::{c_int, c_void, CStr};
use std::ptr::NonNull;

use turbojpeg_sys as tj;

use crate::crop::CropBox;
use crate::decode::{cmyk_to, Channels, Scale, Size, Wanted};

/// Scans a progressive file may have: ten or so is usual, and the TurboJPEG
/// documentation suggests a limit for untrusted files, each scan costing a
/// pass over the whole image.
const SCAN_LIMIT: c_int = 500;

/// Width of an MCU in pixels, by TurboJPEG's sampling code (`TJSAMP_*`: 4:4:4,
/// 4:2:2, 4:2:0, gray, 4:4:0, 4:1:1, 4:4:1), as its header declares
/// `tjMCUWidth` (a header-only table, not in the library).
const MCU_WIDTH: [usize; 7] = [8, 16, 16, 8, 8, 32, 8];

/// A JPEG's header, as far as decoding needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub size: Size,
    /// Where a region's left edge may fall: multiples of this; `None` when
    /// only the whole image decodes.
    mcu_width: Option<usize>,
    /// CMYK or YCCK, which decode to CMYK and are converted here.
    cmyk: bool,
}

/// A TurboJPEG decompressor, made on first use and kept: one per thread.
#[derive(Default)]
pub struct JpegDecoder {
    handle: Option<NonNull<c_void>>,
}

// SAFETY: a TurboJPEG handle holds no thread-local state; it is used by one
// thread at a time (every use takes `&mut self`).
unsafe impl Send for JpegDecoder {}

impl Drop for JpegDecoder {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            // SAFETY: a handle tj3Init made, destroyed once.
            unsafe { tj::tj3Destroy(handle.as_ptr()) };
        }
    }
}

impl JpegDecoder {
    fn handle(&mut self) -> Result<*mut c_void, String> {
        if let Some(handle) = self.handle {
            return Ok(handle.as_ptr());
        }
        // SAFETY: tj3Init has no preconditions; it returns null on failure.
        let raw = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as c_int) };
        let handle = NonNull::new(raw).ok_or("libjpeg-turbo could not start")?;
        self.handle = Some(handle);
        for (param, value) in [
            (tj::TJPARAM_TJPARAM_STOPONWARNING, 1),
            (tj::TJPARAM_TJPARAM_SCANLIMIT, SCAN_LIMIT),
        ] {
            // SAFETY: a live handle; both are parameters of a decompressor.
            if unsafe { tj::tj3Set(raw, param as c_int, value) } != 0 {
                return Err(self.error(raw));
            }
        }
        Ok(raw)
    }

    /// The message of the last failed call on `handle`.
    fn error(&self, handle: *mut c_void) -> String {
        // SAFETY: a live handle; the string it returns lives in the handle
        // until its next call, and is copied at once.
        unsafe { CStr::from_ptr(tj::tj3GetErrorStr(handle)) }
            .to_string_lossy()
            .trim()
            .replace('\n', " ")
    }

    /// Reads the header of the JPEG `bytes`.
    pub(crate) fn header(&mut self, bytes: &[u8]) -> Result<Header, String> {
        let handle = self.handle()?;
        // SAFETY: a live handle and a live slice of `bytes.len()` bytes.
        if unsafe { tj::tj3DecompressHeader(handle, bytes.as_ptr(), bytes.len() as _) } != 0 {
            return Err(self.error(handle));
        }
        // SAFETY: a live handle; reading parameters has no other effect.
        let get = |param: tj::TJPARAM| unsafe { tj::tj3Get(handle, param as c_int) };
        let dimension = |param| usize::try_from(get(param)).unwrap_or(0);
        let lossless = get(tj::TJPARAM_TJPARAM_LOSSLESS) != 0;
        let mcu_width = usize::try_from(get(tj::TJPARAM_TJPARAM_SUBSAMP))
            .ok()
            .and_then(|sampling| MCU_WIDTH.get(sampling).copied())
            .filter(|_| !lossless);
        let colorspace = get(tj::TJPARAM_TJPARAM_COLORSPACE);
        Ok(Header {
            size: Size {
                width: dimension(tj::TJPARAM_TJPARAM_JPEGWIDTH),
                height: dimension(tj::TJPARAM_TJPARAM_JPEGHEIGHT),
            },
            mcu_width,
            cmyk: colorspace == tj::TJCS_TJCS_CMYK as c_int
                || colorspace == tj::TJCS_TJCS_YCCK as c_int,
        })
    }

    /// Decodes a region of the JPEG `bytes` (whose `header` was just read)
    /// that holds `wanted`, at its scale, into `pixels` as `channels`;
    /// returns the scale and the region decoded, in the scaled image's
    /// pixels: `wanted` scaled (widened to whole pixels) and a column more
    /// each side, widened to the left to a column of MCUs, or the whole
    /// image at full size where a region cannot be decoded. Within
    /// `wanted` the pixels are those of a whole decode at that scale.
    pub(crate) fn decode(
        &mut self,
        bytes: &[u8],
        header: Header,
        wanted: Wanted,
        channels: Channels,
        pixels: &mut Vec<u8>,
        cmyk: &mut Vec<u8>,
    ) -> Result<(Scale, CropBox), String> {
        let handle = self.handle()?;
        let Size { width, height } = header.size;
        let w = wanted.region;
        // An empty region would read as "to the edge" to TurboJPEG (a width
        // or height of 0), more rows than `into` holds: decoded whole.
        let inside =
            w.width > 0 && w.height > 0 && w.left + w.width <= width && w.top + w.height <= height;
        let (scale, region) = match header.mcu_width {
            Some(mcu) if inside => {
                let s = wanted.scale;
                // The scaled pixels that cover any of the wanted ones.
                let e = s.in_eighths();
                let (left, top) = (w.left * e / 8, w.top * e / 8);
                let (right, bottom) = (s.of(w.left + w.width), s.of(w.top + w.height));
                // A region's edge columns are upsampled from its own chroma
                // alone (where the whole image's use their neighbours'), so
                // one more column is decoded on each side that has one.
                let mcu = s.of(mcu);
                let left = left.saturating_sub(1) / mcu * mcu;
                let right = (right + 1).min(s.of(width));
                let region = CropBox {
                    left,
                    top,
                    width: right - left,
                    height: bottom - top,
                };
                (s, region)
            }
            _ => (Scale::FULL, header.size.whole()),
        };
        let factor = tj::tjscalingfactor {
            num: scale.in_eighths() as c_int,
            denom: 8,
        };
        // SAFETY: a live handle; one of the factors TurboJPEG lists (M/8, in
        // lowest terms).
        if unsafe { tj::tj3SetScalingFactor(handle, reduced(factor)) } != 0 {
            return Err(self.error(handle));
        }
        let whole = region.width == scale.of(width) && region.height == scale.of(height);
        let crop = if whole {
            tj::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            }
        } else {
            let int = |v: usize| c_int::try_from(v).map_err(|_| format!("{v} pixels"));
            tj::tjregion {
                x: int(region.left)?,
                y: int(region.top)?,
                w: int(region.width)?,
                h: int(region.height)?,
            }
        };
        // SAFETY: a live handle whose header was read.
        if unsafe { tj::tj3SetCroppingRegion(handle, crop) } != 0 {
            return Err(self.error(handle));
        }
        let (format, into) = match (header.cmyk, channels) {
            (true, _) => (tj::TJPF_TJPF_CMYK, &mut *cmyk),
            (false, Channels::Gray) => (tj::TJPF_TJPF_GRAY, &mut *pixels),
            (false, Channels::Rgb) => (tj::TJPF_TJPF_RGB, &mut *pixels),
            (false, Channels::Rgba) => (tj::TJPF_TJPF_RGBA, &mut *pixels),
        };
        let pixel_len = if header.cmyk { 4 } else { channels.count() };
        let pitch = region.width * pixel_len;
        into.resize(pitch * region.height, 0);
        // SAFETY: a live handle; `bytes` is a live slice of its length, and
        // `into` holds `region.height` rows of `pitch` bytes, which is what
        // the decoder writes for the region it was given.
        let failed = unsafe {
            tj::tj3Decompress8(
                handle,
                bytes.as_ptr(),
                bytes.len() as _,
                into.as_mut_ptr(),
                c_int::try_from(pitch).map_err(|_| format!("{pitch} bytes a row"))?,
                format as c_int,
            )
        } != 0;
        if failed {
            return Err(self.error(handle));
        }
        if header.cmyk {
            cmyk_to(cmyk, channels, pixels);
        }
        Ok((scale, region))
    }
}

/// `factor` in lowest terms, as TurboJPEG's table of factors holds it.
fn reduced(factor: tj::tjscalingfactor) -> tj::tjscalingfactor {
    let mut gcd = (factor.num, factor.denom);
    while gcd.1 != 0 {
        gcd = (gcd.1, gcd.0 % gcd.1);
    }
    tj::tjscalingfactor {
        num: factor.num / gcd.0,
        denom: factor.denom / gcd.0,
    }
}
