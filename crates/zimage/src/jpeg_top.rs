//! Decoding only the top rows of a sequential JPEG, those a crop box needs.
//!
//! A sequential (baseline or extended) JPEG codes its image top to bottom,
//! one row of MCUs after another, and a decoder stops at the height its
//! frame header declares. zune-jpeg has no cropped decode, so a copy of the
//! file with a lower height in its frame header makes it skip every row
//! below the box: for a random-resized crop, a sixth of the decode on
//! average (bench/README.md, "Image decoders").
//!
//! The pixels asked for are the same bytes a full decode gives: chroma rows
//! are upsampled from their neighbours, which a lowered bottom edge
//! replaces by its own last row, so one MCU row more than asked is kept.
//! `tests/pipeline.rs` compares the two decodes over random boxes.
//!
//! Only complete files take this path (ending with the EOI marker, which
//! entropy-coded data cannot contain), so a truncated file is still an
//! error whatever box is drawn from it. Progressive JPEGs code the whole
//! image in every scan and are decoded whole.

/// A sequential JPEG's frame, as its SOF0 or SOF1 header declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    /// Offset of the 16-bit big-endian height in the file.
    height_at: usize,
    pub width: usize,
    pub height: usize,
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
                let sampled_usually = components
                    .chunks_exact(3)
                    .all(|c| usual(c[1] >> 4) && usual(c[1] & 0x0F));
                return (height > 0 && sampled_usually).then_some(Frame {
                    height_at: at + 5,
                    width,
                    height,
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

    /// `bytes` into `copy` with `height` declared.
    pub(crate) fn copy_with_height(&self, bytes: &[u8], height: usize, copy: &mut Vec<u8>) {
        copy.clear();
        copy.extend_from_slice(bytes);
        let declared = u16::try_from(height).expect("lowered from a 16-bit height");
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
        let mut copy = Vec::new();
        frame.copy_with_height(&b, 101, &mut copy);
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
