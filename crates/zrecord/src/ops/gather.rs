//! The gather loop: reading a batch of records straight into the caller's
//! memory. This is the hot path.
//!
//! A batch is checked whole first (indices, destination bounds, overlaps), so
//! a bad request writes nothing. A big batch is then split into runs of
//! consecutive records that the caller and the shard crew
//! ([`crate::exec::shard_crew`]) share out; each decodes from the chunk mappings
//! directly into its part of the destination, with its own coder scratch.
//! A batch of records of one length (a dataset's samples) is checked in the
//! same runs, by the crew too, and copied only once every run passed
//! ([`gather_slots_in_runs`]).

use std::borrow::Cow;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::exec::cold_reads::ColdReads;
use crate::exec::shard_crew::{participants, run_shards, run_shards_in_two_steps, MAX_SHARDS};
use crate::exec::streaming_copy::RawCopy;
use crate::files::change_watch::{poll, Check, Polled};
use crate::files::checksum_file::ChecksumFile;
use crate::files::chunk_file::{prefetch, ChunkFile};
use crate::files::meta_file::RecordTable;
use crate::format::checksums::Verdict;
use crate::format::codec::{decode, Codec};
use crate::format::limits::{MAX_CHUNKS, V1_MAX_RECORD_LEN};
use crate::format::record_table::RecordLoc;
use crate::ops::verified_records::FirstMarks;
use crate::store::Store;

/// Below this much work per shard a batch is not split further. Work is
/// counted in bytes copied. Handing a shard to a helper of the shard crew
/// that is watching for work takes a few microseconds (the time of copying
/// some 10 KiB); one that has parked is woken but not waited for.
const MIN_SHARD_BYTES: u64 = 48 << 10;

/// Shards per participant: more than one, so that a participant that starts
/// late (a helper waking up) leaves its share to the others.
const SHARDS_PER_PARTICIPANT: usize = 2;

/// The work a record adds to a batch, in copied-byte equivalents: decoding
/// a byte costs what copying this many does. Single-thread gathers of
/// Fashion-MNIST (workload D, `RAYON_NUM_THREADS=1 bench/gather_micro.py D
/// <codec>`) ran at 5.4 GB/s raw, 1.4 LZ4 and 0.23 DEFLATE; zstd's weight
/// sits where the benchmark puts its speed, between LZ4 and DEFLATE.
fn work(loc: &RecordLoc) -> u64 {
    loc.logic_length as u64 * weight(loc)
}

/// What decoding a byte of the record stored at `loc` costs, in copied
/// bytes (see [`work`]).
fn weight(loc: &RecordLoc) -> u64 {
    match Codec::from_tag(loc.codec) {
        Some(Codec::Raw) => 1,
        Some(Codec::Lz4) => 4,
        Some(Codec::Zstd | Codec::ZstdDict) => 12,
        Some(Codec::Flate) | None => 24,
    }
}

/// How many records ahead of the one being decoded a worker prefetches.
const PREFETCH_DISTANCE: usize = 2;

/// Prefetches the stored bytes of the record [`PREFETCH_DISTANCE`] places
/// after position `r` of a run's `ready` bytes ([`Sources::ready`]), so
/// that its cache misses overlap the decoding of the records before it
/// instead of stalling it. (Measured on Fashion-MNIST with LZ4:
/// bench/README.md, "Prefetching".)
fn prefetch_ahead(ready: &[Option<&[u8]>], r: usize) {
    if let Some(Some(ahead)) = ready.get(r + PREFETCH_DISTANCE) {
        prefetch(ahead);
    }
}

/// Runs `block` over consecutive runs of a batch's `items` positions that
/// together cover it, spread over the caller and the shard crew when the
/// batch holds enough `work`. The error is that of the earliest failing run.
fn sharded(
    items: usize,
    work: u64,
    block: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    in_runs(items, (work / MIN_SHARD_BYTES) as usize, block)
}

/// Runs `block` over at most `runs` consecutive runs of `items` positions
/// that together cover them, spread over the caller and the shard crew
/// (at most [`SHARDS_PER_PARTICIPANT`] runs each). The error is that of the
/// earliest failing run.
fn in_runs(
    items: usize,
    runs: usize,
    block: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let Some(runs) = Runs::split(items, runs, MAX_SHARDS) else {
        return block(0..items);
    };
    let first_error = FirstError::default();
    run_shards(runs.count(), &|run| {
        first_error.keep(run, block(runs.range(run)))
    });
    first_error.into_result()
}

/// The error of a batch's earliest failing run, kept while its runs end in
/// any order.
#[derive(Default)]
struct FirstError(Mutex<Option<(usize, Error)>>);

impl FirstError {
    /// Keeps the error of run `run`, if it failed and no earlier run did.
    fn keep(&self, run: usize, result: Result<()>) {
        if let Err(e) = result {
            let mut first = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if first.as_ref().is_none_or(|(earlier, _)| run < *earlier) {
                *first = Some((run, e));
            }
        }
    }

    fn into_result(self) -> Result<()> {
        match self.0.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }
}

/// How a batch of `items` positions is split: into consecutive runs of
/// `per` positions, the last one shorter.
#[derive(Clone, Copy)]
struct Runs {
    items: usize,
    per: usize,
}

impl Runs {
    /// The split of `items` positions into `runs` runs at most (and
    /// `most`), as many as the participants can share; `None` where the
    /// batch is not split: one participant, or one run.
    fn split(items: usize, runs: usize, most: usize) -> Option<Runs> {
        let participants = participants();
        let shards = runs
            .min(SHARDS_PER_PARTICIPANT * participants)
            .min(most)
            .min(items);
        let per = items.div_ceil(shards.max(1));
        (participants > 1 && shards > 1).then_some(Runs { items, per })
    }

    fn count(self) -> usize {
        self.items.div_ceil(self.per)
    }

    /// The positions of run `run`.
    fn range(self, run: usize) -> Range<usize> {
        run * self.per..((run + 1) * self.per).min(self.items)
    }
}

/// The caller's destination, shared by workers that write disjoint ranges.
#[derive(Clone, Copy)]
struct SharedDst {
    ptr: *mut u8,
}

// SAFETY: workers only create slices over ranges proven disjoint before the
// batch starts (see `gather` and `gather_ragged`), while the caller's
// `&mut [u8]` is held, so no two threads ever touch the same byte.
unsafe impl Send for SharedDst {}
// SAFETY: as for `Send`: sharing the pointer shares no byte it points at.
unsafe impl Sync for SharedDst {}

impl SharedDst {
    /// # Safety
    /// `offset..offset + len` lies inside the destination and no other live
    /// slice covers any of it.
    unsafe fn slot<'a>(self, offset: usize, len: usize) -> &'a mut [u8] {
        // SAFETY: upheld by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }
}

/// Where a batch's records come from: record `k` of the batch is record
/// `locals[k]` of store `which[k]` of `stores` (of the first when `which`
/// is `None`).
pub(crate) struct Sources<'a> {
    stores: Stores<'a>,
    which: Option<&'a [u32]>,
    locals: &'a [u64],
    /// Set when a record took its store's own path although the store
    /// could have given its bytes as a view does: the views are older than
    /// the store's marks or chunks (see [`Sources::views_outdated`]).
    outdated: AtomicBool,
}

/// The stores of a batch's [`Sources`].
enum Stores<'a> {
    /// Each store the batch reads, once: the batch checks their files, as
    /// of `polled`, and takes their views itself.
    Listed {
        stores: Vec<&'a Store>,
        polled: Polled,
    },
    /// Views of stores made when their files last passed the checks a
    /// batch makes, with no change to the files seen since: a collection's
    /// open shards (`collection/shard_views.rs`). The batch takes them as
    /// they are.
    Viewed(&'a [StoreView<'a>]),
}

impl<'a> Sources<'a> {
    /// Records `locals` of the stores `stores`, record `k` of store
    /// `which[k]` (of the first when `which` is `None`), each store listed
    /// once; their files are checked as of `polled` (one [`poll`] for a
    /// whole read).
    pub(crate) fn listed(
        stores: Vec<&'a Store>,
        which: Option<&'a [u32]>,
        locals: &'a [u64],
        polled: Polled,
    ) -> Sources<'a> {
        Sources::new(Stores::Listed { stores, polled }, which, locals)
    }

    /// Records `locals` of the stores of `views`, record `k` of the store
    /// of `views[which[k]]` (of the first when `which` is `None`). The
    /// views' files must have passed the checks of [`Store::check_files`]
    /// with no change seen since, and each of `locals` must have been below
    /// its store's length then (see [`Sources::read_entries`]).
    pub(crate) fn viewed(
        views: &'a [StoreView<'a>],
        which: Option<&'a [u32]>,
        locals: &'a [u64],
    ) -> Sources<'a> {
        Sources::new(Stores::Viewed(views), which, locals)
    }

    fn new(stores: Stores<'a>, which: Option<&'a [u32]>, locals: &'a [u64]) -> Sources<'a> {
        Sources {
            stores,
            which,
            locals,
            outdated: AtomicBool::new(false),
        }
    }

    /// Whether a record of a viewed batch took its store's own path where
    /// a view made now would have given its bytes: its views are outdated
    /// (the store checked records or opened its first chunk since).
    pub(crate) fn views_outdated(&self) -> bool {
        self.outdated.load(Ordering::Relaxed)
    }
}

impl Sources<'_> {
    fn store(&self, k: usize) -> &Store {
        match &self.stores {
            Stores::Listed { stores, .. } => stores[self.which(k)],
            Stores::Viewed(views) => views[self.which(k)].store,
        }
    }

    fn which(&self, k: usize) -> usize {
        self.which.map_or(0, |which| which[k] as usize)
    }

    /// Each store's [`StoreView`]: a listed store's, taken now, once for
    /// the batch, after its files were checked ([`Sources::tables`]).
    fn views(&self) -> Cow<'_, [StoreView<'_>]> {
        match &self.stores {
            Stores::Listed { stores, .. } => stores.iter().map(|store| store.view()).collect(),
            Stores::Viewed(views) => Cow::Borrowed(views),
        }
    }

    /// For each position of `range`, whose record is stored at `locs` (one
    /// per position), the stored bytes when a read needs nothing but to
    /// decode them ([`Store::ready_bytes`]), so that the copy loop after it
    /// finds them without going through the record's store. A batch over
    /// many shards reaches each record through a different store, whose
    /// chunk table, mapping and checksum marks are rarely still in the
    /// CPU's caches; so a record in a store's first chunk is found through
    /// that store's entry of `views` (a few cache lines for the whole
    /// batch) instead of the store's own chain of pointers, looked up again
    /// for every record. A record of a viewed batch that the store could
    /// give where its view could not marks the views outdated
    /// ([`Sources::views_outdated`]).
    fn ready<'s>(
        &'s self,
        locs: &[RecordLoc],
        range: Range<usize>,
        views: &[StoreView<'s>],
    ) -> Vec<Option<&'s [u8]>> {
        let viewed = matches!(self.stores, Stores::Viewed(_));
        range
            .zip(locs)
            .map(|(k, loc)| {
                let index = self.locals[k];
                let chunk = views[self.which(k)].chunk.as_ref();
                chunk
                    .filter(|_| loc.chunk_id == 0)
                    .and_then(|chunk| chunk.ready_bytes(index, loc))
                    .unwrap_or_else(|| {
                        let bytes = self.store(k).ready_bytes(index, loc);
                        if viewed && chunk.is_none() && loc.chunk_id == 0 && bytes.is_some() {
                            self.outdated.store(true, Ordering::Relaxed);
                        }
                        bytes
                    })
            })
            .collect()
    }

    /// Decodes the record at position `k`, stored at `loc`, into `slot`:
    /// straight from `ready` (its entry of [`Sources::ready`]) when it
    /// holds the bytes, else by the full path of [`Store::decode_into`].
    fn decode(
        &self,
        k: usize,
        loc: RecordLoc,
        ready: Option<&[u8]>,
        slot: &mut [u8],
        raw_copy: RawCopy,
    ) -> Result<()> {
        let store = self.store(k);
        match ready {
            Some(stored) => store
                .decode_stored(self.locals[k], loc, stored, slot, false, raw_copy)
                .map(drop),
            None => store.decode_into(self.locals[k], loc, slot, raw_copy),
        }
    }

    /// Asks the kernel for the page of the table entry of each record at
    /// `range`, for a batch that reads ahead, before the entries are read:
    /// the table is mapped for random access, so a cold entry is otherwise
    /// read when its fault waits for it, one after another.
    fn will_need_entries(&self, range: Range<usize>) {
        for k in range {
            self.store(k).meta.will_need_entry(self.locals[k] as usize);
        }
    }

    /// Asks the kernel for the stored bytes of the records at `range`,
    /// stored at `locs` (one per position), for a batch that reads ahead.
    fn will_need(&self, locs: &[RecordLoc], range: Range<usize>) {
        for (k, loc) in range.zip(locs) {
            self.store(k).will_need(std::slice::from_ref(loc));
        }
    }

    /// Every record's entry, read from the `opened` tables (their pages
    /// asked for first while `cold` reads ahead), then a check that each
    /// record ends inside its chunk file, made once per chunk with the
    /// record that ends last in it. Returns the entries, in batch order.
    fn locate(&self, cold: &ColdReads, opened: Opened<'_>) -> Result<Vec<RecordLoc>> {
        if cold.reading_ahead() {
            self.will_need_entries(0..self.locals.len());
        }
        let (tables, looks) = opened;
        let locs = self.read_entries(&tables, 0..self.locals.len())?;
        // Where no change was seen, a chunk's known size can only be short
        // of the file (appended to since), never past it, and the decode
        // reads each record below it ([`ChunkFile::read`]): only the chunks
        // of stores whose files must be looked at are checked here.
        if !looks.contains(&true) {
            return Ok(locs);
        }
        // (chunk, end, position) of the record that ends last: per store
        // in the first chunk it reads, and in `others` for further chunks
        // (a store bigger than one chunk file).
        let mut firsts: Vec<Option<(u16, u64, usize)>> = vec![None; looks.len()];
        let mut others: Vec<(usize, (u16, u64, usize))> = Vec::new();
        // An empty record reads no byte, wherever its offset points.
        let looked_at =
            |(k, loc): &(usize, &RecordLoc)| loc.phys_length > 0 && looks[self.which(*k)];
        for (k, loc) in locs.iter().enumerate().filter(looked_at) {
            let (w, end) = (self.which(k), loc.end());
            let last = match &mut firsts[w] {
                None => {
                    firsts[w] = Some((loc.chunk_id, end, k));
                    continue;
                }
                Some(first) if first.0 == loc.chunk_id => first,
                Some(_) => match others
                    .iter_mut()
                    .find(|o| o.0 == w && o.1 .0 == loc.chunk_id)
                {
                    Some(other) => &mut other.1,
                    None => {
                        others.push((w, (loc.chunk_id, end, k)));
                        continue;
                    }
                },
            };
            if end > last.1 {
                *last = (loc.chunk_id, end, k);
            }
        }
        let lasts = firsts.into_iter().enumerate();
        let lasts = lasts
            .filter_map(|(w, first)| Some((w, first?)))
            .chain(others);
        for (_, (_, _, k)) in lasts {
            self.store(k).check_chunk_size(self.locals[k], &locs[k])?;
        }
        Ok(locs)
    }

    /// Checks every listed store's files (once, as of the read's [`poll`]:
    /// see [`Store::check_files`]) and reads each record's entry, failing on an
    /// index past its store's length. Returns the entries, in batch order,
    /// and whether each listed store's chunk files must be looked at.
    fn entries(&self) -> Result<(Vec<RecordLoc>, Vec<bool>)> {
        let (tables, looks) = self.tables()?;
        Ok((self.read_entries(&tables, 0..self.locals.len())?, looks))
    }

    /// What [`Sources::read_entries`] reads from: a listed store's files
    /// are checked first (as of the read's [`poll`]: see
    /// [`Store::check_files`]), and whether each must be looked at is
    /// returned with it.
    fn tables(&self) -> Result<Opened<'_>> {
        let (stores, polled) = match &self.stores {
            Stores::Listed { stores, polled } => (stores, polled),
            Stores::Viewed(views) => return Ok((Tables::Viewed(views), Vec::new())),
        };
        let looks = (stores.iter())
            .map(|store| store.check_files(polled))
            .collect::<Result<Vec<bool>>>()?;
        // Read after every store's files were checked, in a loop of loads
        // alone: over many shards, one cache miss each, which overlap.
        let (lens, tables) = stores
            .iter()
            .map(|store| (store.meta.length(), store.meta.table()))
            .unzip();
        Ok((Tables::Listed { lens, tables }, looks))
    }

    /// The entries of the records at `range`, in batch order, from
    /// `tables`: a listed store's must be below its length, or the read
    /// fails naming the first that is not. A viewed store's are not looked
    /// at: the views were made when their files last passed their checks,
    /// and each store's length was checked then to hold the indices the
    /// batch may ask of it (`collection/shard_views.rs`; only a delete
    /// shortens a store, and a delete waits for the collection's readers,
    /// `collection/readers_lock.rs`).
    fn read_entries(&self, tables: &Tables<'_>, range: Range<usize>) -> Result<Vec<RecordLoc>> {
        let locals = &self.locals[range.clone()];
        let entries = match tables {
            Tables::Listed { lens, tables } => {
                let which = |k: usize| self.which(k);
                let bad = (range.clone()).find(|&k| self.locals[k] >= lens[which(k)] as u64);
                if let Some(k) = bad {
                    return Err(self.store(k).out_of_range(self.locals[k], lens[which(k)]));
                }
                // Checked first, read in a loop of loads alone: the
                // entries' cache misses overlap.
                match self.which {
                    None => locals
                        .iter()
                        .map(|&i| tables[0].entry(i as usize))
                        .collect(),
                    Some(which) => (locals.iter().zip(&which[range]))
                        .map(|(&i, &w)| tables[w as usize].entry(i as usize))
                        .collect(),
                }
            }
            Tables::Viewed(views) => (range.zip(locals))
                .map(|(k, &i)| views[self.which(k)].table.entry(i as usize))
                .collect(),
        };
        Ok(entries)
    }
}

/// The tables of a batch's stores ([`Sources::tables`]), and whether each
/// listed store's chunk files must be looked at.
type Opened<'a> = (Tables<'a>, Vec<bool>);

/// The record tables of a batch's stores, ready for their entries to be
/// read ([`Sources::tables`]).
enum Tables<'a> {
    /// A listed store's table and its length, as read after its files were
    /// checked.
    Listed {
        lens: Vec<u32>,
        tables: Vec<RecordTable<'a>>,
    },
    Viewed(&'a [StoreView<'a>]),
}

/// Gathers a batch's records (`src`), record `k` at `dst[offsets[k]..]`;
/// with `exact`, each must be that many bytes long and the caller places
/// the records in increasing slots, so their destinations are disjoint by
/// construction. The whole batch is checked first, so a bad request writes
/// nothing (two records' destinations overlapping: an error naming `path`);
/// then its records, whichever store holds each, are shared out over the
/// caller and the shard crew in batch order, as one batch that `cold`
/// judges (the store's own, or the collection's for a batch over its
/// shards).
pub(crate) fn gather_records(
    path: &Path,
    src: &Sources<'_>,
    offsets: &[u64],
    dst: &mut [u8],
    exact: Option<u64>,
    cold: &ColdReads,
) -> Result<()> {
    let opened = src.tables()?;
    if let (Some(stride), false) = (exact, opened.1.contains(&true)) {
        if let Some(done) = gather_slots_in_runs(src, &opened.0, offsets, dst, stride, cold) {
            return done;
        }
    }
    let dst_len = dst.len() as u64;
    let (locs, total) = check_opened(path, src, opened, offsets, dst_len, exact, cold)?;
    copy_records(src, &locs, offsets, dst, total, cold)
}

/// [`gather_records`] of records that must each be `stride` bytes (so
/// their slots cannot overlap), split over the shard crew whole: the
/// batch's entries are read and checked run by run, each run by whoever
/// claims it, and the runs are copied once every run passed, in the same
/// hand-off to the crew ([`run_shards_in_two_steps`]). Checked whole by the
/// caller first, the helpers would wait while it reads every entry, most
/// of a small record's cost where they are cache misses (in many shards).
/// `tables` are the batch's, whose chunk files need no look
/// ([`Sources::locate`]). `None` where the batch is not split (one
/// participant, little work), or asks for what only [`check_records`]
/// reports.
fn gather_slots_in_runs(
    src: &Sources<'_>,
    tables: &Tables<'_>,
    offsets: &[u64],
    dst: &mut [u8],
    stride: u64,
    cold: &ColdReads,
) -> Option<Result<()>> {
    let items = src.locals.len();
    // What `Runs::split` would refuse anyway, known before an entry is read.
    if items < 2 || offsets.len() != items || participants() == 1 {
        return None;
    }
    // Every record is `stride` bytes or the batch fails; their codecs are
    // not known before their entries, so the first record's stands for all.
    let first = src.read_entries(tables, 0..1).ok()?[0];
    let work = (items as u64 * stride).saturating_mul(weight(&first));
    let runs = Runs::split(items, (work / MIN_SHARD_BYTES) as usize, MAX_SHARDS / 2)?;
    let dst_len = dst.len() as u64;
    let shared = SharedDst {
        ptr: dst.as_mut_ptr(),
    };
    let raw_copy = RawCopy::for_batch(dst.len());
    let views = src.views();
    let cold_check = cold.before(work);
    let checked: Vec<OnceLock<Result<Vec<RecordLoc>>>> =
        (0..runs.count()).map(|_| OnceLock::new()).collect();
    let check = |run: usize| {
        let range = runs.range(run);
        if cold_check.read_ahead {
            src.will_need_entries(range.clone());
        }
        let passed = src.read_entries(tables, range.clone()).and_then(|locs| {
            (range.clone().zip(&locs)).try_for_each(|(k, loc)| {
                check_destination(src, k, loc, offsets[k], dst_len, Some(stride))
            })?;
            Ok(locs)
        });
        if let (Ok(locs), true) = (&passed, cold_check.read_ahead) {
            src.will_need(locs, range);
        }
        let _ = checked[run].set(passed);
    };
    let copy_error = FirstError::default();
    let copy = |run: usize| {
        // Every run's check has finished; none is copied unless all passed.
        if !checked.iter().all(|c| matches!(c.get(), Some(Ok(_)))) {
            return;
        }
        let Some(Ok(locs)) = checked[run].get() else {
            return;
        };
        // SAFETY: the run's entries passed `check_destination` with
        // `stride` as `exact`: each record fills its own slot of `dst`,
        // which is borrowed mutably for the whole call.
        let copied = unsafe {
            copy_run(
                src,
                locs,
                runs.range(run),
                offsets,
                (shared, raw_copy),
                &views,
            )
        };
        copy_error.keep(run, copied);
    };
    run_shards_in_two_steps(runs.count(), runs.count(), &check, &copy);
    cold.after(cold_check);
    // The earliest failing run's check error, else its copy error.
    if let Some(Err(e)) = checked
        .into_iter()
        .find_map(|c| c.into_inner().filter(Result::is_err))
    {
        return Some(Err(e));
    }
    Some(copy_error.into_result())
}

/// The checks of [`gather_records`], which write nothing: each record's
/// entry, its length against `exact`, its destination within `dst_len`
/// bytes and clear of the others'. Returns the entries and the batch's
/// work.
pub(crate) fn check_records(
    path: &Path,
    src: &Sources<'_>,
    offsets: &[u64],
    dst_len: u64,
    exact: Option<u64>,
    cold: &ColdReads,
) -> Result<(Vec<RecordLoc>, u64)> {
    check_opened(path, src, src.tables()?, offsets, dst_len, exact, cold)
}

/// [`check_records`] of a batch whose tables are `opened`.
fn check_opened(
    path: &Path,
    src: &Sources<'_>,
    opened: Opened<'_>,
    offsets: &[u64],
    dst_len: u64,
    exact: Option<u64>,
    cold: &ColdReads,
) -> Result<(Vec<RecordLoc>, u64)> {
    if src.locals.len() != offsets.len() {
        return Err(Error::InvalidArgument {
            path: path.to_path_buf(),
            reason: format!("{} indices but {} offsets", src.locals.len(), offsets.len()),
        });
    }
    let locs = src.locate(cold, opened)?;
    let mut total = 0u64;
    let mut ordered = true;
    let mut prev_end = 0u64;
    for (k, loc) in locs.iter().enumerate() {
        check_destination(src, k, loc, offsets[k], dst_len, exact)?;
        let logic = loc.logic_length as u64;
        if logic > 0 {
            ordered &= offsets[k] >= prev_end;
            prev_end = offsets[k] + logic;
        }
        total += work(loc);
    }
    // Destinations in increasing order, or placed in slots (`exact`), are
    // disjoint; others must be shown to be.
    if !ordered && exact.is_none() {
        let ranges = locs
            .iter()
            .zip(offsets)
            .zip(src.locals)
            .map(|((loc, &off), &i)| (off, off + loc.logic_length as u64, i));
        check_disjoint(path, ranges.collect())?;
    }
    Ok((locs, total))
}

/// Checks record `k` of `src`, stored at `loc`, against `exact` (the
/// length every record must have, if any) and its destination, `offset`
/// in a destination of `dst_len` bytes.
fn check_destination(
    src: &Sources<'_>,
    k: usize,
    loc: &RecordLoc,
    offset: u64,
    dst_len: u64,
    exact: Option<u64>,
) -> Result<()> {
    let logic = loc.logic_length as u64;
    if exact.is_some_and(|len| len != logic) {
        return Err(src.store(k).invalid(format!(
            "record {} is {logic} bytes, not the {} of a sample",
            src.locals[k],
            exact.unwrap_or(0)
        )));
    }
    let end = offset.checked_add(logic);
    if end.is_none_or(|end| end > dst_len) {
        let needed = end.unwrap_or(u64::MAX);
        return Err(src.store(k).too_small(src.locals[k], needed, dst_len));
    }
    Ok(())
}

/// The copy of [`gather_records`], for the entries `locs` of a batch that
/// [`check_records`] passed.
fn copy_records(
    src: &Sources<'_>,
    locs: &[RecordLoc],
    offsets: &[u64],
    dst: &mut [u8],
    total: u64,
    cold: &ColdReads,
) -> Result<()> {
    let raw_copy = RawCopy::for_batch(dst.len());
    let shared = SharedDst {
        ptr: dst.as_mut_ptr(),
    };
    let views = src.views();
    let block = |range: Range<usize>| -> Result<()> {
        // SAFETY: `check_records` checked these very entries against
        // `offsets` and `dst` (its only caller passing them on), which is
        // borrowed mutably for the whole call.
        unsafe {
            copy_run(
                src,
                &locs[range.clone()],
                range,
                offsets,
                (shared, raw_copy),
                &views,
            )
        }
    };
    let will_need = || src.will_need(locs, 0..locs.len());
    run_batch(cold, locs.len(), total, &will_need, &block)
}

/// Copies the records of `src` at positions `range`, stored at `locs` (one
/// per position), record `k` to `offsets[k]` in the destination.
///
/// # Safety
/// Each record's destination, from `offsets[k]` for its logical length,
/// lies inside the destination of `shared` and overlaps no other record's
/// (as [`check_records`] checks, or [`check_destination`] with `exact`);
/// the destination stays borrowed mutably while this runs.
unsafe fn copy_run(
    src: &Sources<'_>,
    locs: &[RecordLoc],
    range: Range<usize>,
    offsets: &[u64],
    (shared, raw_copy): (SharedDst, RawCopy),
    views: &[StoreView<'_>],
) -> Result<()> {
    let ready = src.ready(locs, range.clone(), views);
    for (r, k) in range.enumerate() {
        prefetch_ahead(&ready, r);
        let loc = locs[r];
        // SAFETY: upheld by the caller.
        let slot = unsafe { shared.slot(offsets[k] as usize, loc.logic_length as usize) };
        src.decode(k, loc, ready[r], slot, raw_copy)?;
    }
    Ok(())
}

/// The logical length of each record of `src`, from the table alone.
pub(crate) fn lengths(src: &Sources<'_>) -> Result<Vec<u32>> {
    Ok(src
        .entries()?
        .0
        .iter()
        .map(|loc| loc.logic_length)
        .collect())
}

/// The byte offset of each of `slots` of `stride` bytes, for
/// [`gather_records`]; one past the end of memory is as out of bounds as
/// any other, so it saturates.
pub(crate) fn slot_offsets(slots: impl Iterator<Item = usize>, stride: usize) -> Vec<u64> {
    slots
        .map(|slot| (slot as u64).saturating_mul(stride as u64))
        .collect()
}

/// Fails when two non-empty destination ranges (`(start, end, index)`)
/// overlap, naming their records and `path`.
pub(crate) fn check_disjoint(path: &Path, mut ranges: Vec<(u64, u64, u64)>) -> Result<()> {
    ranges.retain(|&(start, end, _)| end > start);
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(Error::DestinationOverlap {
                path: path.to_path_buf(),
                first: pair[0].2,
                second: pair[1].2,
            });
        }
    }
    Ok(())
}

/// Runs `block` over a batch of `items` records and `work` (see
/// [`sharded`]), asking for its records ahead first (`will_need`) while
/// `cold` finds the page cache cold, and now and then judging whether it
/// still is.
fn run_batch(
    cold: &ColdReads,
    items: usize,
    work: u64,
    will_need: &dyn Fn(),
    block: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let check = cold.before(work);
    if check.read_ahead {
        will_need();
    }
    let result = sharded(items, work, block);
    cold.after(check);
    result
}

impl Store {
    /// Gathers records `idxs` into `dst`, record `k` at byte `k * stride`.
    /// Bytes of a slot past its record's length are set to zero.
    pub fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        // Checked, then decoded from: the table is not read again (`locate`).
        let src = self.sources(idxs);
        let locs = src.locate(&self.cold, src.tables()?)?;
        let mut total = 0u64;
        for (k, loc) in locs.iter().enumerate() {
            let logic = loc.logic_length as u64;
            let end = (k as u64)
                .checked_mul(stride as u64)
                .and_then(|start| start.checked_add(logic));
            if logic > stride as u64 {
                return Err(self.too_small(idxs[k], logic, stride as u64));
            }
            if end.is_none_or(|end| end > dst.len() as u64) {
                return Err(self.too_small(idxs[k], end.unwrap_or(u64::MAX), dst.len() as u64));
            }
            total += work(loc);
        }
        let shared = SharedDst {
            ptr: dst.as_mut_ptr(),
        };
        let dst_len = dst.len();
        let raw_copy = RawCopy::for_batch(dst_len);
        let views = src.views();
        // A run of records writes their slots, the last one up to the end
        // of `dst`.
        let block = |range: Range<usize>| -> Result<()> {
            let base = range.start * stride;
            let end = (range.end * stride).min(dst_len);
            // SAFETY: runs are disjoint runs of records, so disjoint byte
            // ranges of `dst`, all inside it (checked above); `dst` is
            // borrowed mutably for the whole call.
            let dst = unsafe { shared.slot(base, end - base) };
            let ready = src.ready(&locs[range.clone()], range.clone(), &views);
            for (r, k) in range.enumerate() {
                prefetch_ahead(&ready, r);
                let loc = locs[k];
                let start = r * stride;
                let end = start + loc.logic_length as usize;
                src.decode(k, loc, ready[r], &mut dst[start..end], raw_copy)?;
                // Recycled batch memory holds an earlier batch's bytes: a
                // short record's slot must not show them.
                let slot_end = (start + stride).min(dst.len());
                if end < slot_end {
                    dst[end..slot_end].fill(0);
                }
            }
            Ok(())
        };
        run_batch(
            &self.cold,
            locs.len(),
            total,
            &|| self.will_need(&locs),
            &block,
        )
    }

    /// [`Store::gather`] of records that must each be exactly `stride`
    /// bytes, as the samples of a dataset are: a record of another length
    /// is an [`Error::InvalidArgument`] naming it, before anything is
    /// written, where `gather` would zero-pad it.
    pub fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        let offsets = slot_offsets(0..idxs.len(), stride);
        self.gather_at(idxs, dst, &offsets, Some(stride as u64))
    }

    /// Gathers ragged records: record `k` is written at `dst[offsets[k]..]`,
    /// its logical length long. The ranges may come in any order but must
    /// not overlap.
    pub fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
        self.gather_at(idxs, dst, offsets, None)
    }

    /// [`Store::gather_exact`] into chosen slots of `dst`: record `k` at byte
    /// `slots[k] * stride`, the slots strictly increasing. A batch whose
    /// records come from several stores (a mixture's) is gathered by one
    /// call per store, each filling its own slots.
    pub fn gather_exact_at(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        stride: usize,
        slots: &[usize],
    ) -> Result<()> {
        if !slots.windows(2).all(|w| w[0] < w[1]) {
            return Err(self.invalid("the slots of a gather must increase"));
        }
        let offsets = slot_offsets(slots.iter().copied(), stride);
        self.gather_at(idxs, dst, &offsets, Some(stride as u64))
    }

    /// Record `k` at `dst[offsets[k]..]`; with `exact`, every record must be
    /// that many bytes long.
    fn gather_at(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        offsets: &[u64],
        exact: Option<u64>,
    ) -> Result<()> {
        let src = self.sources(idxs);
        gather_records(self.path(), &src, offsets, dst, exact, &self.cold)
    }

    /// Checks, before a read touches the mappings, that the store's files
    /// were not truncated under it: a mapped page past the end of a file
    /// faults (SIGBUS). `meta.zr` and `checksums.zr` must be their full
    /// size, and the chunk files' known sizes are brought up to date. The
    /// files are looked at (`fstat`) only when a change to them was seen,
    /// as of `polled`, since the last look, or at every read when they are
    /// not watched (`files/change_watch.rs`); then (the result is `true`)
    /// the read's chunks must be looked at too ([`Store::check_chunk_size`]).
    /// A truncation *during* the read is not caught (docs/reliability.md,
    /// "Files changed behind the store").
    pub(crate) fn check_files(&self, polled: &Polled) -> Result<bool> {
        let check = self.changes.to_check(polled);
        if check != Check::Nothing {
            self.meta.check_size()?;
            if let Some(checksums) = &self.checksums {
                checksums.check_size()?;
            }
        }
        if let Check::All(token) = check {
            for chunk in self.chunks.opened() {
                chunk.refresh_size()?;
            }
            self.changes.checked(token);
        }
        Ok(check == Check::Unwatched)
    }

    /// Checks that record `index`, stored at `loc` (not empty), ends inside
    /// its chunk file, looking at the file now (`fstat`): for a store whose
    /// files must be looked at ([`Store::check_files`]). A chunk that does
    /// not open is left to the decode, which reports it.
    fn check_chunk_size(&self, index: u64, loc: &RecordLoc) -> Result<()> {
        let Ok(chunk) = self.chunks.get(loc.chunk_id) else {
            return Ok(());
        };
        match loc.end() <= chunk.refresh_size()? {
            true => Ok(()),
            false => Err(self.past_its_chunk(index, *loc, chunk)),
        }
    }

    /// The error for record `index`, whose bytes at `loc` end past the size
    /// of `chunk` as last looked at.
    fn past_its_chunk(&self, index: u64, loc: RecordLoc, chunk: &ChunkFile) -> Error {
        let reason = format!(
            "its bytes end at {}, but {} is {} bytes: truncated while the store was open, or \
             a damaged entry?",
            loc.end(),
            chunk.path().display(),
            chunk.known_size()
        );
        self.corrupt(index as usize, loc, &reason)
    }

    /// Records `idxs` of this store, as a batch's sources.
    pub(crate) fn sources<'a>(&'a self, idxs: &'a [u64]) -> Sources<'a> {
        Sources::listed(vec![self], None, idxs, poll())
    }

    /// Asks the kernel for the stored bytes of `locs` ahead of reading them
    /// (`exec/cold_reads.rs`).
    fn will_need(&self, locs: &[RecordLoc]) {
        for loc in locs {
            if let Some(chunk) = self.chunks.get_opened(loc.chunk_id) {
                chunk.will_need(loc.offset, loc.phys_length);
            }
        }
    }

    fn too_small(&self, index: u64, needed: u64, available: u64) -> Error {
        Error::BufferTooSmall {
            path: self.path().to_path_buf(),
            index,
            needed,
            available,
        }
    }

    /// Decodes record `index`, stored at `loc`, into `slot` (exactly its
    /// logical length), checking its checksum when gathers verify and this
    /// handle has not checked the record before (`ops/verified_records.rs`).
    pub(crate) fn decode_into(
        &self,
        index: u64,
        loc: RecordLoc,
        slot: &mut [u8],
        raw_copy: RawCopy,
    ) -> Result<()> {
        let checked = self.decode_checked(index, loc, slot, self.unchecked(index), raw_copy)?;
        // Only while the sidecar covers the table: after a program that
        // keeps no checksums wrote it, a damaged frontier may let appends
        // overwrite records, so each read checks again.
        let covered = |c: &ChecksumFile| c.covers(&self.meta.header());
        if checked == Checked::Yes && self.checksums.as_ref().is_some_and(covered) {
            self.verified.insert(index, self.len());
        }
        Ok(())
    }

    /// Decodes as [`Store::decode_into`] does, checking the checksum (if the
    /// store keeps them and its slot describes the record, see
    /// [`crate::format::checksums::judge`]) when `verify` is set. Every way
    /// the entry can disagree with the files is a `CorruptRecord` error,
    /// never a wrong byte.
    pub(crate) fn decode_checked(
        &self,
        index: u64,
        loc: RecordLoc,
        slot: &mut [u8],
        verify: bool,
        raw_copy: RawCopy,
    ) -> Result<Checked> {
        let stored = self.stored_bytes(index, loc)?;
        self.decode_stored(index, loc, stored, slot, verify, raw_copy)
    }

    /// Whether a gather of record `index` checks it against its checksum:
    /// gathers verify and this handle has not checked it before.
    fn unchecked(&self, index: u64) -> bool {
        self.verify_reads && !self.verified.contains(index)
    }

    /// The stored bytes of record `index` at `loc`, when it needs nothing
    /// but a decode: its length within the format's first limit, its chunk
    /// open and known to hold its bytes, and no checksum left to check (see
    /// [`Store::decode_into`]). `None` sends the record down the full path
    /// of [`Store::decode_into`], which opens, looks again and reports.
    fn ready_bytes(&self, index: u64, loc: &RecordLoc) -> Option<&[u8]> {
        if self.unchecked(index) || !only_decoded(loc) {
            return None;
        }
        self.chunks
            .get_opened(loc.chunk_id)?
            .read_known(loc.offset, loc.phys_length)
    }

    /// What a batch reads of this store, taken now: after its files were
    /// checked ([`Store::check_files`]), so that its first chunk is seen as
    /// long as the check found it.
    pub(crate) fn view(&self) -> StoreView<'_> {
        StoreView {
            store: self,
            table: self.meta.table(),
            chunk: self.ready_chunk(),
        }
    }

    /// The store's first chunk as [`Sources::ready`] reads it, when that
    /// chunk is open and either gathers do not check records or some
    /// record was checked (its marks exist).
    fn ready_chunk(&self) -> Option<ReadyChunk<'_>> {
        let marks = match self.verify_reads {
            true => Some(self.verified.first_marks()?),
            false => None,
        };
        Some(ReadyChunk {
            known: self.chunks.get_opened(0)?.known_bytes()?,
            marks,
        })
    }

    /// The stored bytes of record `index` at `loc`; an entry that points
    /// outside the files or past the store's limits is a `CorruptRecord`.
    pub(crate) fn stored_bytes(&self, index: u64, loc: RecordLoc) -> Result<&[u8]> {
        let corrupt = |reason: String| self.corrupt(index as usize, loc, &reason);
        if loc.logic_length as usize > V1_MAX_RECORD_LEN {
            // Past 1 MiB only in a format-2 store (read now: another
            // process may have raised it since this one opened).
            let limit = self.meta.record_limit();
            if loc.logic_length as usize > limit {
                return Err(corrupt(format!(
                    "logical length {} exceeds the {limit} byte limit of a format-{} store",
                    loc.logic_length,
                    self.meta.header().version
                )));
            }
        }
        if loc.chunk_id as usize >= MAX_CHUNKS {
            return Err(corrupt(format!(
                "chunk {} is past the {MAX_CHUNKS} chunk limit",
                loc.chunk_id
            )));
        }
        // A record with no stored bytes needs no chunk file: an append of
        // only empty records creates none.
        let chunk = match loc.phys_length {
            0 => None,
            _ => match self.chunks.get(loc.chunk_id) {
                Ok(chunk) => Some(chunk),
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    return Err(corrupt(format!("chunk file {} is missing", loc.chunk_id)))
                }
                Err(e) => return Err(e),
            },
        };
        match &chunk {
            None => Ok(&[][..]),
            Some(chunk) => chunk
                .read(loc.offset, loc.phys_length)?
                .ok_or_else(|| self.past_its_chunk(index, loc, chunk)),
        }
    }

    /// Decodes `stored`, record `index`'s bytes at `loc`, into `slot`, as
    /// [`Store::decode_checked`] does.
    fn decode_stored(
        &self,
        index: u64,
        loc: RecordLoc,
        stored: &[u8],
        slot: &mut [u8],
        verify: bool,
        raw_copy: RawCopy,
    ) -> Result<Checked> {
        let corrupt = |reason: String| self.corrupt(index as usize, loc, &reason);
        // Decoded first, so that an entry the decoder refuses is reported
        // by what is wrong with it rather than by its checksum slot.
        let dict = match loc.codec == Codec::ZstdDict.tag() {
            true => self.dictionary()?,
            false => None,
        };
        decode(loc.codec, stored, slot, raw_copy, dict).map_err(&corrupt)?;
        if !verify {
            return Ok(Checked::No);
        }
        let expected = match &self.checksums {
            Some(checksums) => match checksums.judge(index, &loc, &self.meta.header()) {
                Verdict::Check(expected) => expected,
                Verdict::Unchecked => return Ok(Checked::No),
                Verdict::Corrupt(reason) => return Err(corrupt(reason)),
            },
            _ => return Ok(Checked::No),
        };
        match expected.data_mismatch(slot) {
            None => Ok(Checked::Yes),
            Some(reason) => Err(corrupt(reason)),
        }
    }
}

/// Whether a record stored at `loc` needs nothing but its stored bytes
/// decoded, once its checksum is no longer to be checked: it has stored
/// bytes, and is within the format's first length limit (past it, the
/// store's own limit is read first: [`Store::stored_bytes`]).
fn only_decoded(loc: &RecordLoc) -> bool {
    loc.phys_length > 0 && loc.logic_length as usize <= V1_MAX_RECORD_LEN
}

/// What a batch reads of a store, taken once rather than looked up through
/// the store for each record: the store, its record table, and its first
/// chunk's [`ReadyChunk`]. A batch over many shards reaches each record
/// through a different store, whose own fields are rarely still in the
/// CPU's caches.
#[derive(Clone, Copy)]
pub(crate) struct StoreView<'a> {
    store: &'a Store,
    table: RecordTable<'a>,
    chunk: Option<ReadyChunk<'a>>,
}

/// What [`Sources::ready`] needs of a store's first chunk (chunk 0, where
/// a store's records are until it outgrows one chunk file), taken once for
/// a batch: the chunk's bytes known to be in its file, and the store's
/// marks of checked records when gathers check records.
#[derive(Clone, Copy)]
struct ReadyChunk<'a> {
    known: &'a [u8],
    marks: Option<FirstMarks<'a>>,
}

impl<'a> ReadyChunk<'a> {
    /// [`Store::ready_bytes`] of record `index`, stored at `loc` in this
    /// chunk; `None` for a record whose mark the marks taken do not hold,
    /// which the store looks up itself.
    fn ready_bytes(&self, index: u64, loc: &RecordLoc) -> Option<Option<&'a [u8]>> {
        let checked = match self.marks {
            Some(marks) => marks.get(index)?,
            None => true,
        };
        Some(match checked && only_decoded(loc) {
            true => self.known.get(loc.offset as usize..loc.end() as usize),
            false => None,
        })
    }
}

/// Whether a decode compared the record with its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    Yes,
    No,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::shard_crew::{gather_alone_on_this_thread, gather_threads};

    /// The runs `sharded` splits a big batch into, and whether each ran on
    /// the calling thread, from a fresh thread that gathers `alone` or not.
    fn runs(alone: bool) -> Vec<(Range<usize>, bool)> {
        std::thread::spawn(move || {
            if alone {
                gather_alone_on_this_thread();
            }
            let caller = std::thread::current().id();
            let seen = Mutex::new(Vec::new());
            sharded(1000, 1 << 30, &|range| {
                let on_caller = std::thread::current().id() == caller;
                seen.lock().unwrap().push((range, on_caller));
                Ok(())
            })
            .unwrap();
            let mut seen = seen.into_inner().unwrap();
            seen.sort_by_key(|(range, _)| range.start);
            seen
        })
        .join()
        .unwrap()
    }

    /// A thread that gathers alone runs even a big batch whole, itself;
    /// any other thread splits it, where there is more than one core.
    #[test]
    fn a_thread_that_gathers_alone_runs_its_batch_whole() {
        assert_eq!(runs(true), vec![(0..1000, true)]);
        if gather_threads() > 1 {
            let split = runs(false);
            assert!(split.len() > 1, "{split:?}");
            assert_eq!(split.first().unwrap().0.start, 0);
            assert_eq!(split.last().unwrap().0.end, 1000);
        }
    }
}
