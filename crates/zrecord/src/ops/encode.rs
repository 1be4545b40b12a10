//! Encoding a batch of records for an append: each record compressed on its
//! own with the chosen codec (or kept raw when that does not make it
//! smaller), with its CRC32C when the store keeps checksums. This is step 1
//! of the commit protocol (`ops/append.rs`) and runs before any lock is
//! taken, spread over the worker pool in contiguous shards.

use rayon::prelude::*;

use crate::exec::thread_pool::{pool, shard_count};
use crate::format::codec::{encode, encode_bound, Codec, CodecTag};
use crate::format::dictionary::Dictionary;

/// Records smaller than this are not worth a worker's wake-up on their own.
const MIN_SHARD_BYTES: u64 = 64 << 10;

/// Where a batch's records come from.
#[derive(Clone, Copy)]
pub(crate) enum Batch<'a> {
    Fixed {
        src: &'a [u8],
        n: usize,
        len: usize,
    },
    Ragged {
        src: &'a [u8],
        offsets: &'a [u64],
        lens: &'a [u32],
    },
    Slices(&'a [&'a [u8]]),
}

impl<'a> Batch<'a> {
    pub(crate) fn count(&self) -> usize {
        match *self {
            Batch::Fixed { n, .. } => n,
            Batch::Ragged { offsets, .. } => offsets.len(),
            Batch::Slices(records) => records.len(),
        }
    }

    /// The length of the batch's longest record (0 for none).
    pub(crate) fn longest(&self) -> usize {
        match *self {
            Batch::Fixed { n, len, .. } => len * usize::from(n > 0),
            Batch::Ragged { lens, .. } => lens.iter().max().map_or(0, |&l| l as usize),
            Batch::Slices(records) => records.iter().map(|r| r.len()).max().unwrap_or(0),
        }
    }

    /// Record `i`; its bounds were checked when the batch was accepted.
    pub(crate) fn get(&self, i: usize) -> &'a [u8] {
        match *self {
            Batch::Fixed { src, len, .. } => &src[i * len..(i + 1) * len],
            Batch::Ragged { src, offsets, lens } => {
                &src[offsets[i] as usize..offsets[i] as usize + lens[i] as usize]
            }
            Batch::Slices(records) => records[i],
        }
    }

    /// Where record `i`'s bytes lie in the caller's memory: a source (see
    /// [`Batch::source`]) and the start within it. Fixed and ragged records
    /// share one source, the caller's buffer, so raw neighbours can be
    /// written with one write.
    pub(crate) fn raw_place(&self, i: usize) -> (usize, usize) {
        match *self {
            Batch::Fixed { len, .. } => (0, i * len),
            Batch::Ragged { offsets, .. } => (0, offsets[i] as usize),
            Batch::Slices(_) => (i, 0),
        }
    }

    /// Source `source` of [`Batch::raw_place`].
    pub(crate) fn source(&self, source: usize) -> &'a [u8] {
        match *self {
            Batch::Fixed { src, .. } | Batch::Ragged { src, .. } => src,
            Batch::Slices(records) => records[source],
        }
    }
}

/// Encoded records of one contiguous shard of the batch.
pub(crate) struct Shard {
    /// Batch position of the shard's first record.
    pub(crate) first: usize,
    /// The encoded bytes of the shard's records that shrank, back to back.
    pub(crate) buf: Vec<u8>,
    /// One per record of the shard, in batch order.
    pub(crate) pieces: Vec<Piece>,
}

/// How one record is stored.
pub(crate) struct Piece {
    pub(crate) tag: CodecTag,
    /// CRC32C of the record's logical bytes, when the store keeps checksums.
    pub(crate) crc: u32,
    /// Start of the encoded bytes in the shard's buffer; `None` when the
    /// record is stored raw straight from the caller's memory.
    pub(crate) in_buf: Option<usize>,
    /// Stored size.
    pub(crate) phys: usize,
}

/// Encodes the batch in contiguous shards, one per worker, with `codec` at
/// `level` (checked by [`Codec::level`]; `zstd-dict` with the store's
/// `dict`) and each record's checksum when `checksums` is set.
pub(crate) fn encode_batch(
    batch: Batch<'_>,
    codec: Codec,
    level: i32,
    dict: Option<&Dictionary>,
    checksums: bool,
) -> Vec<Shard> {
    let n = batch.count();
    let crc = |record: &[u8]| if checksums { crc32c::crc32c(record) } else { 0 };
    let bytes: u64 = (0..n).map(|i| batch.get(i).len() as u64).sum();
    if codec == Codec::Raw && !checksums || n == 0 {
        let pieces = (0..n)
            .map(|i| Piece {
                tag: Codec::Raw.tag(),
                crc: 0,
                in_buf: None,
                phys: batch.get(i).len(),
            })
            .collect();
        return vec![Shard {
            first: 0,
            buf: Vec::new(),
            pieces,
        }];
    }
    let shards = shard_count(n, bytes, MIN_SHARD_BYTES);
    let per = n.div_ceil(shards);
    let encode_shard = |s: usize| {
        let range = s * per..((s + 1) * per).min(n);
        if codec == Codec::Raw {
            let pieces = range
                .clone()
                .map(|i| Piece {
                    tag: Codec::Raw.tag(),
                    crc: crc(batch.get(i)),
                    in_buf: None,
                    phys: batch.get(i).len(),
                })
                .collect();
            return Shard {
                first: range.start,
                buf: Vec::new(),
                pieces,
            };
        }
        let total: usize = range.clone().map(|i| batch.get(i).len()).sum();
        let largest = range.clone().map(|i| batch.get(i).len()).max().unwrap_or(0);
        // Every stored encoding is smaller than its record, so the cursor never
        // passes the records' total; the slack is the encoder's working room.
        let mut buf = vec![0u8; total + encode_bound(largest) - largest];
        let mut cursor = 0;
        let pieces = range
            .clone()
            .map(|i| {
                let record = batch.get(i);
                let room = cursor + encode_bound(record.len());
                match encode(codec, level, dict, record, &mut buf[cursor..room]) {
                    Some(phys) => {
                        cursor += phys;
                        Piece {
                            tag: codec.tag(),
                            crc: crc(record),
                            in_buf: Some(cursor - phys),
                            phys,
                        }
                    }
                    None => Piece {
                        tag: Codec::Raw.tag(),
                        crc: crc(record),
                        in_buf: None,
                        phys: record.len(),
                    },
                }
            })
            .collect();
        buf.truncate(cursor);
        Shard {
            first: range.start,
            buf,
            pieces,
        }
    };
    if shards == 1 {
        vec![encode_shard(0)]
    } else {
        pool().install(|| (0..shards).into_par_iter().map(encode_shard).collect())
    }
}
