//! A complete sequential JPEG as zune-jpeg is given it: in a copy of the
//! file, a lower height, so that only the rows a crop box needs are decoded,
//! and a tail in place of the end marker, so that a scan that stops short is
//! an error.
//!
//! **The rows a crop needs.** A sequential (baseline or extended) JPEG codes
//! its image top to bottom, one row of MCUs after another, and a decoder
//! stops at the height its frame header declares. zune-jpeg has no cropped
//! decode, so a copy of the file declaring a lower height makes it skip every
//! row below the box. A random-resized crop of a 500 x 375 photograph needs
//! 87 % of its rows on average, and the pipeline runs 9 % faster
//! (bench/README.md, "Image decoders"). The rows asked for are the same bytes
//! a whole decode gives: a row's chroma is upsampled from the chroma rows
//! around it, and the decoder replicates its last one at a bottom edge, so
//! the height declared is one row more than asked, which brings in the row
//! of MCUs holding the chroma below the last row asked. `tests/pipeline.rs`
//! compares the two decodes at every height, in every layout taken here.
//!
//! **A scan that stops short.** Given an end marker before the last row of
//! MCUs, zune-jpeg decodes the missing rows from zero bits, even in strict
//! mode: a file cut short and given its end marker back would become an
//! image with made-up rows. Without the marker, and with [`TAIL`] zero bytes
//! instead, such a scan runs out of bytes, which strict decoding reports.
//!
//! Only complete files take this path (ending with the EOI marker, which
//! entropy-coded data cannot contain), so a file cut short is an error
//! whatever box is drawn from it. Progressive JPEGs (which code the whole
//! image in every scan), files with bytes after their end marker and
//! unusual layouts decode whole, from their own bytes.

/// Zero bytes in place of the end marker: more than the decoder reads
/// ahead of the bits it decodes (4 bytes), so that a complete scan never
/// runs out of bytes, while one that stops short by more than these does.
const TAIL: usize = 8;

/// A sequential JPEG's frame, as its SOF0 or SOF1 header declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    /// Offset of the 16-bit big-endian height in the file.
    height_at: usize,
    pub width: usize,
    pub height: usize,
    /// Whether the end marker may give way to [`TAIL`]: zune-jpeg reads
    /// past a complete scan's data when a component is sampled more
    /// finely vertically than horizontally (4:4:0), which the tail would
    /// make an error.
    pub tail: bool,
}

/// Start of image, end of image and start of scan (ITU T.81, table B.1).
const SOI: u8 = 0xD8;
const EOI: u8 = 0xD9;
const SOS: u8 = 0xDA;
/// Frame headers of sequential Huffman-coded JPEGs: baseline, extended.
const SOF_SEQUENTIAL: [u8; 2] = [0xC0, 0xC1];
/// The other SOFn (progressive, lossless, arithmetic-coded): 0xC0-0xCF
/// less DHT (0xC4), JPG (0xC8) and DAC (0xCC).
fn other_frame(marker: u8) -> bool {
    (0xC2..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker)
}

impl Frame {
    /// The frame of a complete sequential JPEG, or `None` when the file
    /// is anything else (progressive, without EOI at its end, malformed:
    /// the full decode then says what is wrong).
    pub(crate) fn of(bytes: &[u8]) -> Option<Frame> {
        if bytes.get(..2) != Some(&[0xFF, SOI]) || !bytes.ends_with(&[0xFF, EOI]) {
            return None;
        }
        let mut at = 2;
        loop {
            // A marker: 0xFF (any number of them, fill bytes), its code,
            // then a segment whose 16-bit length counts itself.
            while bytes.get(at) == Some(&0xFF) && bytes.get(at + 1) == Some(&0xFF) {
                at += 1;
            }
            if *bytes.get(at)? != 0xFF {
                return None;
            }
            let marker = *bytes.get(at + 1)?;
            let length = usize::from(u16::from_be_bytes([
                *bytes.get(at + 2)?,
                *bytes.get(at + 3)?,
            ]));
            if SOF_SEQUENTIAL.contains(&marker) {
                // After the length: precision, height, width, component
                // count, then (id, sampling factors H<<4|V, table) each.
                let head = bytes.get(at + 4..at + 10)?;
                let height = usize::from(u16::from_be_bytes([head[1], head[2]]));
                let width = usize::from(u16::from_be_bytes([head[3], head[4]]));
                let components = bytes.get(at + 10..at + 10 + 3 * usize::from(head[5]))?;
                // zune-jpeg decodes the top rows of the usual layouts (4:4:4,
                // 4:2:2, 4:4:0, 4:2:0) as the whole image's, but not of all
                // (4:1:1 differs): the others are decoded whole. Height 0
                // defers it to a DNL marker after the first scan.
                let usual = |factor: u8| (1..=2).contains(&factor);
                let factors = || components.chunks_exact(3).map(|c| (c[1] >> 4, c[1] & 0x0F));
                let sampled_usually = factors().all(|(h, v)| usual(h) && usual(v));
                return (height > 0 && sampled_usually).then_some(Frame {
                    height_at: at + 5,
                    width,
                    height,
                    tail: factors().all(|(h, v)| v <= h),
                });
            }
            if other_frame(marker) || marker == SOS || marker == EOI || length < 2 {
                return None;
            }
            at += 2 + length;
        }
    }

    /// The height to declare so that rows `0..rows` decode as in the
    /// whole image, `None` when that is the whole image.
    pub(crate) fn lowered(&self, rows: usize) -> Option<usize> {
        let kept = rows.saturating_add(1);
        (kept < self.height).then_some(kept)
    }

    /// `bytes` into `copy` with `height` declared, and its end marker
    /// replaced by [`TAIL`] zero bytes where the layout allows.
    pub(crate) fn copy_with_height(&self, bytes: &[u8], height: usize, copy: &mut Vec<u8>) {
        copy.clear();
        if self.tail {
            copy.extend_from_slice(&bytes[..bytes.len() - 2]);
            copy.extend_from_slice(&[0; TAIL]);
        } else {
            copy.extend_from_slice(bytes);
        }
        let declared = u16::try_from(height).expect("at most the frame's 16-bit height");
        copy[self.height_at..self.height_at + 2].copy_from_slice(&declared.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SOI, an APP0 segment, a SOF with the given code, size and
    /// sampling factors, then EOI.
    fn file(sof: u8, height: u16, sampling: &[u8]) -> Vec<u8> {
        let mut b = vec![0xFF, SOI, 0xFF, 0xE0, 0, 4, b'x', b'y'];
        let length = 8 + 3 * sampling.len() as u16;
        b.extend_from_slice(&[0xFF, sof]);
        b.extend_from_slice(&length.to_be_bytes());
        b.push(8);
        b.extend_from_slice(&height.to_be_bytes());
        b.extend_from_slice(&64u16.to_be_bytes());
        b.push(sampling.len() as u8);
        for (id, s) in sampling.iter().enumerate() {
            b.extend_from_slice(&[id as u8 + 1, *s, 0]);
        }
        b.extend_from_slice(&[0xFF, 0xFF, EOI]);
        b
    }

    #[test]
    fn the_frame_of_a_sequential_jpeg_is_found_past_other_segments() {
        let b = file(0xC0, 375, &[0x22, 0x11, 0x11]);
        let frame = Frame::of(&b).unwrap();
        assert_eq!((frame.width, frame.height), (64, 375));
        assert_eq!(
            &b[frame.height_at..frame.height_at + 2],
            &375u16.to_be_bytes()
        );
        assert_eq!(Frame::of(&file(0xC1, 9, &[0x11])).unwrap().height, 9);
        // One row more than asked, and never the whole image.
        assert_eq!(frame.lowered(100), Some(101));
        assert_eq!(frame.lowered(373), Some(374));
        assert_eq!(frame.lowered(374), None);
        assert_eq!(frame.lowered(usize::MAX), None);
        assert!(frame.tail);
        assert!(!Frame::of(&file(0xC0, 9, &[0x12, 0x11, 0x11])).unwrap().tail);
        let mut copy = Vec::new();
        frame.copy_with_height(&b, 101, &mut copy);
        assert_eq!(copy.len(), b.len() - 2 + TAIL);
        assert_eq!(
            &copy[frame.height_at..frame.height_at + 2],
            &101u16.to_be_bytes()
        );
        assert!(copy.ends_with(&[0; TAIL]));
        copy.truncate(b.len() - 2);
        copy.extend_from_slice(&[0xFF, EOI]);
        assert_eq!(Frame::of(&copy).unwrap().height, 101);
    }

    #[test]
    fn other_files_are_left_to_the_full_decode() {
        assert_eq!(Frame::of(&file(0xC2, 375, &[0x22, 0x11, 0x11])), None);
        assert_eq!(Frame::of(&file(0xC0, 0, &[0x11])), None);
        let truncated = file(0xC0, 375, &[0x11]);
        assert_eq!(Frame::of(&truncated[..truncated.len() - 1]), None);
        // Every cut of a file, and nonsense, give None, never a panic.
        let b = file(0xC0, 375, &[0x22, 0x11, 0x11]);
        for end in 0..b.len() {
            let mut cut = b[..end].to_vec();
            cut.extend_from_slice(&[0xFF, EOI]);
            let _ = Frame::of(&cut);
        }
        assert_eq!(Frame::of(&[0xFF, SOI, 0xFF, EOI]), None);
    }
}
