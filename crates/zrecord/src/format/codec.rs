//! Per-record codecs (docs/FORMAT.md, "Codec tags"). Each record is encoded
//! and decoded on its own; a record that does not shrink is stored raw.

use std::cell::RefCell;

use crate::exec::streaming_copy::RawCopy;
use crate::format::dictionary::Dictionary;

/// The codec tag byte of a table entry. A plain byte rather than an enum,
/// because the table is read in place and may hold any value.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CodecTag(pub u8);

/// The codecs this build writes and reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// Stored verbatim (tag 0).
    Raw,
    /// A raw DEFLATE stream, RFC 1951, no zlib or gzip framing (tag 1).
    Flate,
    /// An LZ4 block, no frame (tag 2). loaderx 0.5.0 cannot read it.
    Lz4,
    /// A zstd frame (tag 3). loaderx 0.5.0 cannot read it.
    Zstd,
    /// A zstd frame compressed with the store's dictionary, `zstd.dict`
    /// (tag 4). loaderx 0.5.0 cannot read it.
    ZstdDict,
}

/// libdeflate's level: its default, a good ratio at several hundred MB/s.
pub const FLATE_LEVEL: i32 = 6;
/// The flate levels libdeflate offers that compress (0 only copies).
const FLATE_LEVELS: std::ops::RangeInclusive<i32> = 1..=12;
/// zstd's own default. Level 1 skips entropy coding of literals, so on
/// match-poor data (sensor readings, smooth images) it stores nothing smaller
/// than raw; level 3 still writes at several hundred MB/s per core.
pub const ZSTD_LEVEL: i32 = 3;

impl Codec {
    pub const ALL: [Codec; 5] = [
        Codec::Raw,
        Codec::Flate,
        Codec::Lz4,
        Codec::Zstd,
        Codec::ZstdDict,
    ];

    /// The tag byte stored in table entries (docs/FORMAT.md, "Codec tags").
    pub fn tag(self) -> CodecTag {
        CodecTag(match self {
            Codec::Raw => 0,
            Codec::Flate => 1,
            Codec::Lz4 => 2,
            Codec::Zstd => 3,
            Codec::ZstdDict => 4,
        })
    }

    pub fn from_tag(tag: CodecTag) -> Option<Codec> {
        Codec::ALL.into_iter().find(|c| c.tag() == tag)
    }

    /// The name used by the Python API and `schema.json`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Flate => "flate",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
            Codec::ZstdDict => "zstd-dict",
        }
    }

    pub fn from_name(name: &str) -> Option<Codec> {
        Codec::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The level records are encoded at: `level` when given, else the
    /// codec's default (0 for the codecs that have no levels). Fails, with
    /// a reason, for a level the codec does not have.
    pub fn level(self, level: Option<i32>) -> Result<i32, String> {
        let range = match self {
            Codec::Flate => FLATE_LEVELS,
            Codec::Zstd | Codec::ZstdDict => zstd::compression_level_range(),
            Codec::Raw | Codec::Lz4 => {
                return match level {
                    None => Ok(0),
                    Some(_) => Err(format!("codec {} has no levels", self.name())),
                }
            }
        };
        let default = if self == Codec::Flate {
            FLATE_LEVEL
        } else {
            ZSTD_LEVEL
        };
        match level {
            None => Ok(default),
            Some(l) if range.contains(&l) => Ok(l),
            Some(l) => Err(format!(
                "level {l} is outside {}..={} for codec {}",
                range.start(),
                range.end(),
                self.name()
            )),
        }
    }
}

/// Per-thread coder state, built once per thread: libdeflate's compressor
/// alone is several hundred KiB, far too much to build per record.
#[derive(Default)]
struct Scratch {
    /// The compressors, with the level each was built for.
    deflate_enc: Option<(i32, libdeflater::Compressor)>,
    deflate_dec: Option<libdeflater::Decompressor>,
    zstd_enc: Option<(i32, zstd::bulk::Compressor<'static>)>,
    zstd_dec: Option<zstd::bulk::Decompressor<'static>>,
    /// The zstd-dict coders, with the CRC of the dictionary each holds
    /// (and the encoder's level): a thread may serve several stores.
    zstd_dict_enc: Option<(u32, i32, zstd::bulk::Compressor<'static>)>,
    zstd_dict_dec: Option<(u32, zstd::bulk::Decompressor<'static>)>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Room `encode` needs in its output for a record of `len` bytes: the record
/// itself plus LZ4's worst case, as lz4_flex checks for it before starting.
pub(crate) fn encode_bound(len: usize) -> usize {
    lz4_flex::block::get_maximum_output_size(len).max(len)
}

/// Encodes `record` with `codec` at `level` (checked by [`Codec::level`])
/// into `out`, which holds at least `encode_bound(record.len())` bytes;
/// `zstd-dict` needs the store's `dict`. Returns the encoded size, or
/// `None` when the record did not shrink (or the codec is `Raw`): the
/// caller then stores it raw.
pub(crate) fn encode(
    codec: Codec,
    level: i32,
    dict: Option<&Dictionary>,
    record: &[u8],
    out: &mut [u8],
) -> Option<usize> {
    // Only a strictly smaller encoding is worth storing.
    let limit = record.len().checked_sub(1)?;
    SCRATCH
        .with_borrow_mut(|s| match codec {
            Codec::Raw => None,
            Codec::Flate => {
                let enc = match &mut s.deflate_enc {
                    Some((l, enc)) if *l == level => enc,
                    slot => {
                        let lvl = libdeflater::CompressionLvl::new(level).ok()?;
                        &mut slot.insert((level, libdeflater::Compressor::new(lvl))).1
                    }
                };
                enc.deflate_compress(record, &mut out[..limit]).ok()
            }
            Codec::Lz4 => lz4_flex::block::compress_into(record, out).ok(),
            Codec::Zstd => {
                let enc = match &mut s.zstd_enc {
                    Some((l, enc)) if *l == level => enc,
                    slot => {
                        &mut slot
                            .insert((level, zstd::bulk::Compressor::new(level).ok()?))
                            .1
                    }
                };
                enc.compress_to_buffer(record, &mut out[..limit]).ok()
            }
            Codec::ZstdDict => {
                let dict = dict?;
                let enc = match &mut s.zstd_dict_enc {
                    Some((crc, l, enc)) if *crc == dict.crc && *l == level => enc,
                    slot => {
                        let enc =
                            zstd::bulk::Compressor::with_dictionary(level, &dict.bytes).ok()?;
                        &mut slot.insert((dict.crc, level, enc)).2
                    }
                };
                enc.compress_to_buffer(record, &mut out[..limit]).ok()
            }
        })
        .filter(|&n| n < record.len())
}

/// Decodes a stored record into `dst`, whose length is the record's logical
/// length, copying raw records with `raw_copy`; a `zstd-dict` record needs
/// the store's `dict`. Fails, with a reason, unless exactly `dst.len()`
/// bytes come out.
pub(crate) fn decode(
    tag: CodecTag,
    stored: &[u8],
    dst: &mut [u8],
    raw_copy: RawCopy,
    dict: Option<&Dictionary>,
) -> Result<(), String> {
    // Raw records are the common case of the hot path: no coder state.
    if tag == Codec::Raw.tag() && stored.len() == dst.len() {
        raw_copy.copy(dst, stored);
        return Ok(());
    }
    let codec = Codec::from_tag(tag).ok_or_else(|| format!("unknown codec tag {}", tag.0))?;
    let produced = SCRATCH.with_borrow_mut(|s| match codec {
        // Same lengths took the fast path above.
        Codec::Raw => Err(format!(
            "raw record stores {} bytes for a logical length of {}",
            stored.len(),
            dst.len()
        )),
        Codec::Flate => s
            .deflate_dec
            .get_or_insert_with(libdeflater::Decompressor::new)
            .deflate_decompress(stored, dst)
            .map_err(|e| format!("DEFLATE stream: {e}")),
        Codec::Lz4 => {
            lz4_flex::block::decompress_into(stored, dst).map_err(|e| format!("LZ4 block: {e}"))
        }
        Codec::Zstd => {
            let dec = match &mut s.zstd_dec {
                Some(dec) => dec,
                slot => slot.insert(
                    zstd::bulk::Decompressor::new().map_err(|e| format!("zstd context: {e}"))?,
                ),
            };
            dec.decompress_to_buffer(stored, dst)
                .map_err(|e| format!("zstd frame: {e}"))
        }
        Codec::ZstdDict => {
            let dict = dict.ok_or("a zstd-dict record, but the store has no zstd.dict")?;
            let dec = match &mut s.zstd_dict_dec {
                Some((crc, dec)) if *crc == dict.crc => dec,
                slot => {
                    let dec = zstd::bulk::Decompressor::with_dictionary(&dict.bytes)
                        .map_err(|e| format!("zstd dictionary: {e}"))?;
                    &mut slot.insert((dict.crc, dec)).1
                }
            };
            dec.decompress_to_buffer(stored, dst)
                .map_err(|e| format!("zstd frame with the store's dictionary: {e}"))
        }
    })?;
    if produced != dst.len() {
        return Err(format!(
            "decoded {produced} bytes for a logical length of {}",
            dst.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compressible(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i / 7) as u8).collect()
    }

    /// Every level a codec has writes a stream the one decoder reads, and
    /// a thread's cached encoder follows the level it is asked for.
    #[test]
    fn every_level_round_trips_and_levels_a_codec_lacks_are_refused() {
        let record = compressible(10_000);
        for (codec, levels) in [
            (Codec::Flate, vec![1, 6, 12, 1]),
            (Codec::Zstd, vec![-5, 1, 19, 3]),
        ] {
            let mut sizes = Vec::new();
            for level in levels {
                assert_eq!(codec.level(Some(level)), Ok(level));
                let mut out = vec![0; encode_bound(record.len())];
                let n = encode(codec, level, None, &record, &mut out).unwrap();
                let mut back = vec![0; record.len()];
                decode(codec.tag(), &out[..n], &mut back, RawCopy::Cached, None).unwrap();
                assert_eq!(back, record, "{codec:?} level {level}");
                sizes.push(n);
            }
            assert!(sizes[2] <= sizes[1], "{codec:?}: {sizes:?}");
        }
        assert_eq!(Codec::Zstd.level(None), Ok(ZSTD_LEVEL));
        assert_eq!(Codec::Flate.level(None), Ok(FLATE_LEVEL));
        assert!(Codec::Flate.level(Some(13)).is_err());
        assert!(Codec::Zstd.level(Some(23)).is_err());
        assert!(Codec::Lz4.level(Some(1)).is_err());
        assert_eq!(Codec::Raw.level(None), Ok(0));
    }

    #[test]
    fn every_codec_round_trips_and_shrinks_compressible_data() {
        let record = compressible(10_000);
        for codec in [Codec::Flate, Codec::Lz4, Codec::Zstd] {
            let mut out = vec![0; encode_bound(record.len())];
            let n = encode(codec, codec.level(None).unwrap(), None, &record, &mut out)
                .unwrap_or_else(|| panic!("{codec:?} did not shrink"));
            assert!(n < record.len());
            let mut back = vec![0; record.len()];
            decode(codec.tag(), &out[..n], &mut back, RawCopy::Cached, None).unwrap();
            assert_eq!(back, record, "{codec:?}");
        }
    }

    #[test]
    fn incompressible_and_empty_records_are_left_raw() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for codec in Codec::ALL {
            let mut out = vec![0; encode_bound(noise.len())];
            assert_eq!(
                encode(codec, codec.level(None).unwrap(), None, &noise, &mut out),
                None,
                "{codec:?}"
            );
            assert_eq!(
                encode(codec, codec.level(None).unwrap(), None, &[], &mut out),
                None
            );
        }
    }

    #[test]
    fn decode_rejects_wrong_sizes_and_unknown_tags() {
        let record = compressible(1000);
        let mut out = vec![0; encode_bound(record.len())];
        let n = encode(Codec::Flate, FLATE_LEVEL, None, &record, &mut out).unwrap();
        let fails = |tag, stored: &[u8], len| {
            decode(tag, stored, &mut vec![0; len], RawCopy::Cached, None).is_err()
        };
        // A destination one byte short or long of the logical length fails.
        assert!(fails(Codec::Flate.tag(), &out[..n], 999));
        assert!(fails(Codec::Flate.tag(), &out[..n], 1001));
        assert!(fails(CodecTag(9), &out[..n], 1000));
        assert!(fails(Codec::Raw.tag(), &record[..10], 11));
    }

    #[test]
    fn tags_and_names_are_the_documented_ones() {
        let pairs: Vec<_> = Codec::ALL.iter().map(|c| (c.tag().0, c.name())).collect();
        assert_eq!(
            pairs,
            [
                (0, "raw"),
                (1, "flate"),
                (2, "lz4"),
                (3, "zstd"),
                (4, "zstd-dict")
            ]
        );
        for c in Codec::ALL {
            assert_eq!(Codec::from_name(c.name()), Some(c));
            assert_eq!(Codec::from_tag(c.tag()), Some(c));
        }
    }
}
