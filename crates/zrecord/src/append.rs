//! Appending records: the commit protocol (docs/FORMAT.md, "Commit order").
//!
//! 1. Encode every record, in parallel, outside any lock.
//! 2. Under the writer lock, assign each record its chunk and offset in order.
//! 3. Write the record bytes to the chunk files (in parallel), then, when
//!    durable, fdatasync them.
//! 4. Write the table entries past the published length (readers cannot see
//!    them yet), then, when durable, msync them.
//! 5. Move the tail (when durable, msync it), then publish the new length
//!    with one release store (when durable, msync it).
//!
//! A crash before step 5 leaves the old length, so the store holds exactly the
//! records of earlier commits; the bytes and entries written for this one lie
//! beyond the frontier and the length and are overwritten by the next append.

use rayon::prelude::*;

use crate::checksum_file::Checksum;
use crate::codec::{encode, encode_bound, Codec, CodecTag};
use crate::error::{Error, Result};
use crate::limits::{MAX_CHUNKS, MAX_RECORDS, MAX_RECORD_LEN};
use crate::record_table::RecordLoc;
use crate::store::Store;
use crate::thread_pool::{pool, shard_count};

/// How to append a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendOptions {
    /// Codec to try on each record; records that do not shrink are stored raw.
    pub codec: Codec,
    /// Flush data, table and header to stable storage, in that order, before
    /// returning, so the commit survives power loss (docs/FORMAT.md,
    /// "Durability").
    pub durable: bool,
}

impl Default for AppendOptions {
    fn default() -> Self {
        AppendOptions {
            codec: Codec::Flate,
            durable: false,
        }
    }
}

/// Where a batch's records come from.
#[derive(Clone, Copy)]
enum Batch<'a> {
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
    fn count(&self) -> usize {
        match *self {
            Batch::Fixed { n, .. } => n,
            Batch::Ragged { offsets, .. } => offsets.len(),
            Batch::Slices(records) => records.len(),
        }
    }

    /// Record `i`; its bounds were checked by `validate`.
    fn get(&self, i: usize) -> &'a [u8] {
        match *self {
            Batch::Fixed { src, len, .. } => &src[i * len..(i + 1) * len],
            Batch::Ragged { src, offsets, lens } => {
                &src[offsets[i] as usize..offsets[i] as usize + lens[i] as usize]
            }
            Batch::Slices(records) => records[i],
        }
    }

    /// Where record `i`'s bytes lie when it is written raw: an origin and
    /// the start within it. Fixed and ragged records share one origin, the
    /// source buffer, so raw neighbours coalesce into one write.
    fn raw_origin(&self, i: usize) -> (Origin, usize) {
        match *self {
            Batch::Fixed { len, .. } => (Origin::Source(0), i * len),
            Batch::Ragged { offsets, .. } => (Origin::Source(0), offsets[i] as usize),
            Batch::Slices(_) => (Origin::Source(i), 0),
        }
    }

    fn source(&self, origin: usize) -> &'a [u8] {
        match *self {
            Batch::Fixed { src, .. } | Batch::Ragged { src, .. } => src,
            Batch::Slices(records) => records[origin],
        }
    }
}

/// Encoded records of one contiguous shard of the batch.
struct Shard {
    first: usize,
    buf: Vec<u8>,
    pieces: Vec<Piece>,
}

struct Piece {
    tag: CodecTag,
    /// CRC32C of the record's logical bytes, when the store keeps checksums.
    crc: u32,
    /// Start of the encoded bytes in the shard's buffer; `None` when the
    /// record is stored raw straight from the caller's memory.
    in_buf: Option<usize>,
    phys: usize,
}

/// Memory holding bytes to write: a source (see `Batch::source`) or a shard
/// buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    Source(usize),
    Shard(usize),
}

struct Run {
    chunk: u16,
    offset: u64,
    origin: Origin,
    start: usize,
    end: usize,
}

/// Records smaller than this are not worth a worker's wake-up on their own.
const MIN_SHARD_BYTES: u64 = 64 << 10;
/// Large writes are split so several workers copy into the page cache at once.
const MAX_WRITE_BYTES: usize = 4 << 20;

impl Store {
    /// Appends `n` records of `record_len` bytes each, laid out back to back
    /// at the start of `src`. Returns the index of the first new record.
    pub fn append_fixed(
        &self,
        src: &[u8],
        n: usize,
        record_len: usize,
        options: &AppendOptions,
    ) -> Result<u32> {
        let needed = n.checked_mul(record_len);
        if needed.is_none_or(|needed| needed > src.len()) {
            return Err(self.invalid(format!(
                "{n} records of {record_len} bytes do not fit in a {}-byte source",
                src.len()
            )));
        }
        if record_len > MAX_RECORD_LEN && n > 0 {
            return Err(self.too_large(0, record_len));
        }
        self.commit(
            Batch::Fixed {
                src,
                n,
                len: record_len,
            },
            options,
        )
    }

    /// Appends ragged records: record `i` is `src[offsets[i]..][..lens[i]]`.
    pub fn append_ragged(
        &self,
        src: &[u8],
        offsets: &[u64],
        lens: &[u32],
        options: &AppendOptions,
    ) -> Result<u32> {
        if offsets.len() != lens.len() {
            return Err(self.invalid(format!(
                "{} offsets but {} lengths",
                offsets.len(),
                lens.len()
            )));
        }
        for (i, (&off, &len)) in offsets.iter().zip(lens).enumerate() {
            if len as usize > MAX_RECORD_LEN {
                return Err(self.too_large(i, len as usize));
            }
            if off
                .checked_add(len as u64)
                .is_none_or(|end| end > src.len() as u64)
            {
                return Err(self.invalid(format!(
                    "record {i} at {off}+{len} lies outside the {}-byte source",
                    src.len()
                )));
            }
        }
        self.commit(Batch::Ragged { src, offsets, lens }, options)
    }

    /// Appends one record per slice.
    pub fn append(&self, records: &[&[u8]], options: &AppendOptions) -> Result<u32> {
        if let Some((i, r)) = records
            .iter()
            .enumerate()
            .find(|(_, r)| r.len() > MAX_RECORD_LEN)
        {
            return Err(self.too_large(i, r.len()));
        }
        self.commit(Batch::Slices(records), options)
    }

    fn too_large(&self, position: usize, len: usize) -> Error {
        Error::RecordTooLarge {
            path: self.path().to_path_buf(),
            position,
            len,
            max: MAX_RECORD_LEN,
        }
    }

    fn full(&self, len: u32, adding: usize) -> Error {
        Error::StoreFull {
            path: self.path().to_path_buf(),
            len,
            adding,
        }
    }

    fn commit(&self, batch: Batch<'_>, options: &AppendOptions) -> Result<u32> {
        let n = batch.count();
        if n > MAX_RECORDS {
            return Err(self.full(self.meta.length(), n));
        }
        if let Some(i) = (0..n).find(|&i| batch.get(i).len() as u64 > self.chunk_limit) {
            return Err(self.invalid(format!(
                "record {i} is larger than the chunk capacity {}",
                self.chunk_limit
            )));
        }
        let shards = encode_batch(batch, options.codec, self.checksums.is_some());
        let origin_bytes = |origin: Origin| -> &[u8] {
            match origin {
                Origin::Source(i) => batch.source(i),
                Origin::Shard(s) => &shards[s].buf,
            }
        };

        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let _appending = crate::lock::appending(self.meta.file(), self.meta.path())?;
        let header = self.meta.header();
        let first = header.length;
        if first as usize + n > MAX_RECORDS {
            return Err(self.full(first, n));
        }

        // Assign positions in batch order and coalesce adjacent writes.
        let (mut chunk, mut offset) = (header.tail_chunk, header.tail_offset as u64);
        let mut locs = Vec::with_capacity(n);
        let mut runs: Vec<Run> = Vec::new();
        for (s, shard) in shards.iter().enumerate() {
            for (k, piece) in shard.pieces.iter().enumerate() {
                let index = shard.first + k;
                if offset + piece.phys as u64 > self.chunk_limit {
                    if chunk as usize + 1 >= MAX_CHUNKS {
                        return Err(self.full(first, n));
                    }
                    chunk += 1;
                    offset = 0;
                }
                let record = batch.get(index);
                locs.push(RecordLoc {
                    offset: offset as u32,
                    phys_length: piece.phys as u32,
                    logic_length: record.len() as u32,
                    chunk_id: chunk,
                    codec: piece.tag,
                    reserved: 0,
                });
                let (origin, start) = match piece.in_buf {
                    Some(start) => (Origin::Shard(s), start),
                    None => batch.raw_origin(index),
                };
                let end = start + piece.phys;
                match runs.last_mut() {
                    Some(run)
                        if run.chunk == chunk
                            && run.offset + (run.end - run.start) as u64 == offset
                            && run.origin == origin
                            && run.end == start =>
                    {
                        run.end = end
                    }
                    _ if piece.phys == 0 => {}
                    _ => runs.push(Run {
                        chunk,
                        offset,
                        origin,
                        start,
                        end,
                    }),
                }
                offset += piece.phys as u64;
            }
        }

        let mut writes = Vec::new();
        for run in &runs {
            let bytes = &origin_bytes(run.origin)[run.start..run.end];
            for (i, part) in bytes.chunks(MAX_WRITE_BYTES).enumerate() {
                writes.push((run.chunk, run.offset + (i * MAX_WRITE_BYTES) as u64, part));
            }
        }
        let write = |&(chunk, offset, bytes): &(u16, u64, &[u8])| {
            self.chunks.get_or_create(chunk)?.write_at(offset, bytes)
        };
        if writes.len() > 1 {
            pool().install(|| writes.par_iter().try_for_each(write))?;
        } else {
            writes.iter().try_for_each(write)?;
        }
        if options.durable {
            let mut touched: Vec<u16> = runs.iter().map(|r| r.chunk).collect();
            touched.dedup();
            for id in touched {
                self.chunks.get(id)?.sync_data()?;
            }
        }

        let crcs = shards.iter().flat_map(|s| s.pieces.iter().map(|p| p.crc));
        for (k, (loc, crc)) in locs.into_iter().zip(crcs).enumerate() {
            self.meta.set_entry(first as usize + k, loc)?;
            if let Some(checksums) = &self.checksums {
                checksums.set(first as usize + k, Checksum::new(crc, &loc))?;
            }
        }
        if options.durable {
            self.meta.flush_entries(first as usize, n)?;
            if let Some(checksums) = &self.checksums {
                checksums.flush(first as usize, n)?;
            }
        }
        self.meta.set_tail(chunk, offset as u32)?;
        if options.durable {
            // The tail must be durable before the length that makes the new
            // records live, or an append after a power loss could overwrite
            // them.
            self.meta.flush_header()?;
        }
        self.meta.publish_length(first + n as u32)?;
        if options.durable {
            self.meta.flush_header()?;
        }
        Ok(first)
    }
}

/// Encodes the batch in contiguous shards, one per worker, with each
/// record's checksum when `checksums` is set.
fn encode_batch(batch: Batch<'_>, codec: Codec, checksums: bool) -> Vec<Shard> {
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
                match encode(codec, record, &mut buf[cursor..room]) {
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
