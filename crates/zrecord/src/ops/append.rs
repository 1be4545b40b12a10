//! Appending records: the commit protocol (docs/FORMAT.md, "Commit order").
//! Each step is one function of [`Store::commit`]:
//!
//! 1. [`encode_batch`]: encode every record, in parallel, outside any lock.
//! 2. [`Store::assign_positions`]: under the writer lock, give each record
//!    its chunk and offset in batch order, and coalesce the writes of
//!    neighbouring records.
//! 3. [`Store::write_records`]: write the record bytes to the chunk files
//!    (in parallel), then, when durable, fdatasync them.
//! 4. [`Store::write_entries`]: write the table entries (and checksum slots)
//!    past the published length, where readers cannot see them yet, then,
//!    when durable, msync them.
//! 5. [`Store::publish`]: move the tail (when durable, msync it), then
//!    publish the new length with one release store (when durable, msync it).
//!
//! A crash before step 5 leaves the old length, so the store holds exactly the
//! records of earlier commits; the bytes and entries written for this one lie
//! beyond the frontier and the length and are overwritten by the next append.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::files::dictionary_file;
use crate::files::lock::Deadline;
use crate::format::checksums::Checksum;
use crate::format::codec::Codec;
use crate::format::dictionary::Dictionary;
use crate::format::header::Header;
use crate::format::header::VERSION_BIG_RECORDS;
use crate::format::limits::{MAX_CHUNKS, MAX_RECORDS, MAX_RECORD_LEN, V1_MAX_RECORD_LEN};
use crate::format::record_table::RecordLoc;
use crate::ops::encode::{encode_batch, Batch, Shard};
use crate::store::Store;

/// How to append a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendOptions {
    /// Codec to try on each record; records that do not shrink are stored raw.
    pub codec: Codec,
    /// The codec's level (flate 1..=12, zstd's range); `None` for its
    /// default ([`Codec::level`]). Readers need not know it.
    pub level: Option<i32>,
    /// Flush data, table and header to stable storage, in that order, before
    /// returning, so the commit survives power loss (docs/FORMAT.md,
    /// "Durability").
    pub durable: bool,
    /// How long to wait for another handle's (or thread's) append to finish
    /// before giving up with [`Error::Busy`]. Appends queue: each one waits
    /// for the append lock rather than failing at once.
    pub wait: Duration,
}

/// Bytes of records a `zstd-dict` dictionary is trained on, at most.
const TRAINING_BYTES: usize = 16 << 20;

/// How much of each record the dictionary is trained on: a dictionary serves
/// the start of a record, before the record has history of its own to match
/// (zstd's documentation: its gains are mostly in the first few KB), and the
/// trainer's time grows with its samples' bytes. On 624 photographs of 33 kB
/// it took 80 ms against 636 for whole records (zstd's default trainer), for
/// a store 0.1 % larger; 2 KiB, not 1, keeps a 64 MiB batch of 12 KiB
/// records enough samples for the largest dictionary (bench/README.md, "Ray
/// Data").
const TRAINING_PREFIX: usize = 2 << 10;

/// How long an append waits for the append lock by default.
pub const DEFAULT_APPEND_WAIT: Duration = Duration::from_secs(60);

impl Default for AppendOptions {
    fn default() -> Self {
        AppendOptions {
            codec: Codec::Flate,
            level: None,
            durable: false,
            wait: DEFAULT_APPEND_WAIT,
        }
    }
}

/// Memory holding bytes to write: a source of the batch (see
/// [`Batch::source`]) or a shard's buffer of encoded records.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    Source(usize),
    Shard(usize),
}

/// Bytes that go to one contiguous range of a chunk file: the stored bytes of
/// one or more neighbouring records, lying back to back in one origin.
struct Run {
    chunk: u16,
    offset: u64,
    origin: Origin,
    start: usize,
    end: usize,
}

/// Where step 2 put a batch: each record's table entry, the writes that
/// store their bytes, and the new write frontier.
struct Placement {
    locs: Vec<RecordLoc>,
    runs: Vec<Run>,
    frontier: (u16, u64),
}

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

    /// Appends `batch` as one commit; returns the index of its first record.
    fn commit(&self, batch: Batch<'_>, options: &AppendOptions) -> Result<u32> {
        self.may_write("append")?;
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
        let level = options
            .codec
            .level(options.level)
            .map_err(|e| self.invalid(e))?;
        let (codec, dict) = self.codec_for(batch, options.codec)?;
        let shards = encode_batch(batch, codec, level, dict, self.checksums.is_some());

        // Both waits share one deadline: first for the other threads of
        // this handle, then for other handles and processes.
        let deadline = Deadline::after(options.wait);
        let _writer = deadline.wait(|| match self.writer.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        });
        let _writer = match _writer {
            Some(guard) => guard,
            None => {
                return Err(self
                    .lock
                    .waited_too_long(options.wait, "another thread's append"))
            }
        };
        let _appending = self.lock.appending(&deadline)?;
        let header = self.meta.header();
        // Only a sidecar that describes the table so far may say that it
        // also describes it after this commit.
        let covered = self.checksums.as_ref().is_some_and(|c| c.covers(&header));
        let first = header.length;
        if first as usize + n > MAX_RECORDS {
            return Err(self.full(first, n));
        }
        let placement = self.assign_positions(batch, &shards, &header)?;
        self.write_records(batch, &shards, &placement.runs, options.durable)?;
        self.write_entries(first as usize, &placement.locs, &shards, options.durable)?;
        if header.version < VERSION_BIG_RECORDS && batch.longest() > V1_MAX_RECORD_LEN {
            // Format 2 before the record is live (publish flushes the header
            // first), so that no format-1 reader ever meets it; a crash
            // before the publish leaves a format-2 store without one.
            self.meta.set_version(VERSION_BIG_RECORDS)?;
        }
        self.publish(first + n as u32, placement.frontier, options.durable)?;
        if covered {
            self.mark_covered(options.durable)?;
        }
        Ok(first)
    }

    /// The codec `batch` is encoded with, and the dictionary for
    /// `zstd-dict`: the store's, or one trained on this first batch and
    /// written once (docs/FORMAT.md, "The zstd dictionary"). When the batch
    /// is too small to train on, it is encoded with plain zstd; a later
    /// batch trains the dictionary.
    fn codec_for(&self, batch: Batch<'_>, codec: Codec) -> Result<(Codec, Option<&Dictionary>)> {
        if codec != Codec::ZstdDict {
            return Ok((codec, None));
        }
        if let Some(dict) = self.dictionary()? {
            return Ok((codec, Some(dict)));
        }
        // Up to TRAINING_BYTES of records' starts, spread over the batch.
        let n = batch.count();
        let start = |i: usize| {
            let record = batch.get(i);
            &record[..record.len().min(TRAINING_PREFIX)]
        };
        let mean = (0..n).map(|i| start(i).len()).sum::<usize>() / n.max(1);
        let take = (TRAINING_BYTES / mean.max(1)).clamp(1, n.max(1));
        let samples: Vec<&[u8]> = (0..take).map(|k| start(k * n / take)).collect();
        match dictionary_file::train(&samples) {
            Some(trained) => {
                let written = dictionary_file::create(self.path(), &trained)?;
                Ok((codec, Some(self.dictionary.get_or_init(|| written))))
            }
            None => Ok((Codec::Zstd, None)),
        }
    }

    /// Step 2: gives every record, in batch order, the next position at the
    /// frontier of `header` (rolling over to a new chunk when it would not
    /// fit), and gathers the bytes to write into runs, one per stretch of
    /// records that lie back to back both in memory and in a chunk.
    fn assign_positions(
        &self,
        batch: Batch<'_>,
        shards: &[Shard],
        header: &Header,
    ) -> Result<Placement> {
        let (mut chunk, mut offset) = (header.tail_chunk, header.tail_offset as u64);
        let mut locs = Vec::with_capacity(batch.count());
        let mut runs: Vec<Run> = Vec::new();
        for (s, shard) in shards.iter().enumerate() {
            for (k, piece) in shard.pieces.iter().enumerate() {
                let index = shard.first + k;
                if offset + piece.phys as u64 > self.chunk_limit {
                    if chunk as usize + 1 >= MAX_CHUNKS {
                        return Err(self.full(header.length, batch.count()));
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
                    None => {
                        let (source, start) = batch.raw_place(index);
                        (Origin::Source(source), start)
                    }
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
        Ok(Placement {
            locs,
            runs,
            frontier: (chunk, offset),
        })
    }

    /// Step 3: writes the runs to the chunk files, one after another, and
    /// when `durable` syncs every chunk written. One thread: buffered
    /// writes to a file hold its inode's lock on Linux file systems, so
    /// writes from several threads queued (spinning) and gained nothing
    /// (bench/README.md, "Appends write from one thread").
    fn write_records(
        &self,
        batch: Batch<'_>,
        shards: &[Shard],
        runs: &[Run],
        durable: bool,
    ) -> Result<()> {
        for run in runs {
            let bytes = match run.origin {
                Origin::Source(i) => batch.source(i),
                Origin::Shard(s) => &shards[s].buf,
            };
            self.chunks
                .get_or_create(run.chunk)?
                .write_at(run.offset, &bytes[run.start..run.end])?;
        }
        if durable {
            let mut touched: Vec<u16> = runs.iter().map(|r| r.chunk).collect();
            touched.dedup();
            for id in touched {
                self.chunks.get(id)?.sync_data()?;
            }
        }
        Ok(())
    }

    /// Step 4: writes the table entries (and checksum slots) of the records
    /// from slot `first` on, past the published length, and when `durable`
    /// flushes them.
    fn write_entries(
        &self,
        first: usize,
        locs: &[RecordLoc],
        shards: &[Shard],
        durable: bool,
    ) -> Result<()> {
        let crcs = shards.iter().flat_map(|s| s.pieces.iter().map(|p| p.crc));
        for (k, (&loc, crc)) in locs.iter().zip(crcs).enumerate() {
            self.meta.set_entry(first + k, loc)?;
            if let Some(checksums) = &self.checksums {
                checksums.set(first + k, Checksum::new(crc, &loc))?;
            }
        }
        if durable {
            self.meta.flush_entries(first, locs.len())?;
            if let Some(checksums) = &self.checksums {
                checksums.flush(first, locs.len())?;
            }
        }
        Ok(())
    }

    /// Step 5: moves the tail to `frontier`, then makes the records live by
    /// publishing `length`; when `durable`, each is flushed before the next.
    fn publish(&self, length: u32, frontier: (u16, u64), durable: bool) -> Result<()> {
        self.meta.set_tail(frontier.0, frontier.1 as u32)?;
        if durable {
            // The tail must be durable before the length that makes the new
            // records live, or an append after a power loss could overwrite
            // them.
            self.meta.flush_header()?;
        }
        self.meta.publish_length(length)?;
        if durable {
            self.meta.flush_header()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::files::lock::Deadline;
    use crate::{AppendOptions, Codec, Error, Store};

    fn waiting(wait: Duration) -> AppendOptions {
        AppendOptions {
            codec: Codec::Raw,
            durable: false,
            wait,
            ..AppendOptions::default()
        }
    }

    /// An append waits for another handle's append instead of failing, up
    /// to its `wait`; then it fails as busy, naming the store and the wait.
    #[test]
    fn an_append_waits_for_another_handles_append_up_to_its_wait() {
        let dir = tempfile::tempdir().unwrap();
        let first = Store::open(dir.path()).unwrap();
        let second = Store::open(dir.path()).unwrap();
        let held = first
            .lock
            .appending(&Deadline::after(Duration::ZERO))
            .unwrap();
        match second.append(&[b"late"], &waiting(Duration::from_millis(50))) {
            Err(Error::Busy { path, reason }) => {
                assert!(path.ends_with("meta.zr"), "{path:?}");
                assert!(reason.contains("0.050 s"), "{reason}");
            }
            other => panic!("expected Busy after the wait, got {other:?}"),
        }
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                drop(held);
            });
            let first_index = second
                .append(&[b"queued"], &waiting(Duration::from_secs(60)))
                .unwrap();
            assert_eq!(first_index, 0);
        });
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(second.len(), 1);
    }
}
