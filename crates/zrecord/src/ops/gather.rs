//! The gather loop: reading a batch of records straight into the caller's
//! memory. This is the hot path.
//!
//! A batch is checked whole first (indices, destination bounds, overlaps), so
//! a bad request writes nothing. A big batch is then split into runs of
//! consecutive records that the caller and the shard crew
//! ([`crate::exec::shard_crew`]) share out; each decodes from the chunk mappings
//! directly into its part of the destination, with its own coder scratch.

use std::ops::Range;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::exec::shard_crew::{participants, run_shards, MAX_SHARDS};
use crate::exec::streaming_copy::RawCopy;
use crate::files::checksum_file::ChecksumFile;
use crate::format::checksums::Verdict;
use crate::format::codec::{decode, Codec};
use crate::format::limits::{MAX_CHUNKS, V1_MAX_RECORD_LEN};
use crate::format::record_table::RecordLoc;
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
    let weight = match Codec::from_tag(loc.codec) {
        Some(Codec::Raw) => 1,
        Some(Codec::Lz4) => 4,
        Some(Codec::Zstd | Codec::ZstdDict) => 12,
        Some(Codec::Flate) | None => 24,
    };
    loc.logic_length as u64 * weight
}

/// How many records ahead of the one being decoded a worker prefetches.
const PREFETCH_DISTANCE: usize = 2;

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
    let participants = participants();
    if participants == 1 {
        return block(0..items);
    }
    let shards = runs
        .min(SHARDS_PER_PARTICIPANT * participants)
        .min(MAX_SHARDS)
        .min(items);
    if shards <= 1 {
        return block(0..items);
    }
    let per = items.div_ceil(shards);
    let first_error: Mutex<Option<(usize, Error)>> = Mutex::new(None);
    run_shards(items.div_ceil(per), &|shard| {
        if let Err(e) = block(shard * per..((shard + 1) * per).min(items)) {
            let mut first = first_error.lock().unwrap_or_else(|e| e.into_inner());
            if first.as_ref().is_none_or(|(earlier, _)| shard < *earlier) {
                *first = Some((shard, e));
            }
        }
    });
    match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
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

/// One store's records of a batch: their indices, and where each goes in
/// the destination. A batch of several parts (a collection's shards) is
/// gathered in one pass over all of its records.
pub(crate) struct Part<'a> {
    pub(crate) store: &'a Store,
    pub(crate) idxs: &'a [u64],
    pub(crate) offsets: &'a [u64],
}

impl<'a> Part<'a> {
    pub(crate) fn new(store: &'a Store, idxs: &'a [u64], offsets: &'a [u64]) -> Part<'a> {
        Part {
            store,
            idxs,
            offsets,
        }
    }
}

/// Gathers every part's records, record `k` of a part at
/// `dst[offsets[k]..]`; with `exact`, each must be that many bytes long and
/// the caller places the records in increasing slots, so their destinations
/// are disjoint by construction. The whole batch is checked first, so a bad
/// request writes nothing (two records' destinations overlapping: an error
/// naming `path`); then its records, whichever store holds each, are shared
/// out over the caller and the shard crew as one batch.
pub(crate) fn gather_parts(
    path: &Path,
    parts: &[Part<'_>],
    dst: &mut [u8],
    exact: Option<u64>,
) -> Result<()> {
    let mut checked = Vec::with_capacity(parts.len());
    let mut total = 0u64;
    let mut ordered = true;
    for (locs, work, in_order) in check_parts(parts, dst.len() as u64, exact)? {
        total += work;
        ordered &= in_order;
        checked.push((locs, work));
    }
    // One part's destinations are known disjoint when they come in order;
    // several parts' ranges interleave, unless placed in slots (`exact`).
    if (parts.len() == 1 && !ordered) || (parts.len() > 1 && exact.is_none()) {
        let ranges = parts.iter().zip(&checked).flat_map(|(part, (locs, _))| {
            part.idxs
                .iter()
                .zip(locs)
                .zip(part.offsets)
                .map(|((&i, loc), &off)| (off, off + loc.logic_length as u64, i))
        });
        check_disjoint(path, ranges.collect())?;
    }
    // Part `p` holds batch positions `firsts[p]..firsts[p + 1]`.
    let mut firsts = Vec::with_capacity(parts.len() + 1);
    firsts.push(0);
    for (locs, _) in &checked {
        firsts.push(firsts[firsts.len() - 1] + locs.len());
    }
    let items = firsts[parts.len()];
    let raw_copy = RawCopy::for_batch(dst.len());
    let shared = SharedDst {
        ptr: dst.as_mut_ptr(),
    };
    let block = |range: Range<usize>| -> Result<()> {
        let mut p = firsts.partition_point(|&first| first <= range.start) - 1;
        for i in range {
            while i >= firsts[p + 1] {
                p += 1;
            }
            let (part, locs, k) = (&parts[p], &checked[p].0, i - firsts[p]);
            part.store.prefetch_ahead(locs, k);
            let loc = locs[k];
            // SAFETY: the range lies inside `dst` and overlaps no other
            // record's range (both checked above for this very `loc`), and
            // `dst` is borrowed mutably for the whole call.
            let slot = unsafe { shared.slot(part.offsets[k] as usize, loc.logic_length as usize) };
            part.store.decode_into(part.idxs[k], loc, slot, raw_copy)?;
        }
        Ok(())
    };
    let stores: Vec<(&Store, &[RecordLoc], u64)> = parts
        .iter()
        .zip(&checked)
        .map(|(part, (locs, work))| (part.store, locs.as_slice(), *work))
        .collect();
    run_parts(&stores, items, total, &block)
}

/// A part's entries, its work, and whether its destinations increase
/// ([`Store::check_part`]).
type CheckedPart = (Vec<RecordLoc>, u64, bool);

/// Batches spanning at least this many stores check them on the shard crew:
/// each check costs a microsecond or so (two `fstat`s and the entries), and
/// a batch over a collection's shards has dozens.
const PARALLEL_CHECK_PARTS: usize = 8;

/// [`Store::check_part`] of every part, in order; spread over the caller and
/// the shard crew when there are many (the crew is idle until the copying
/// starts). The error is that of the first failing part, as a check in
/// order would meet it: runs are consecutive and each stops at its first.
fn check_parts(parts: &[Part<'_>], dst_len: u64, exact: Option<u64>) -> Result<Vec<CheckedPart>> {
    let checked: Vec<OnceLock<CheckedPart>> = parts.iter().map(|_| OnceLock::new()).collect();
    let runs = if parts.len() < PARALLEL_CHECK_PARTS {
        1
    } else {
        parts.len()
    };
    in_runs(parts.len(), runs, &|range| {
        for p in range {
            let part = &parts[p];
            let result = part
                .store
                .check_part(part.idxs, part.offsets, dst_len, exact)?;
            let _ = checked[p].set(result);
        }
        Ok(())
    })?;
    Ok(checked
        .into_iter()
        .map(|part| part.into_inner().expect("in_runs ran every part"))
        .collect())
}

/// Fails when two non-empty destination ranges (`(start, end, index)`)
/// overlap, naming their records and `path`.
fn check_disjoint(path: &Path, mut ranges: Vec<(u64, u64, u64)>) -> Result<()> {
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
/// [`sharded`]), from `stores` (each with its records and their work),
/// asking for each store's records ahead first while it is cold, and now
/// and then judging whether it still is.
fn run_parts(
    stores: &[(&Store, &[RecordLoc], u64)],
    items: usize,
    work: u64,
    block: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let checks: Vec<_> = stores
        .iter()
        .map(|&(store, locs, work)| {
            let check = store.cold.before(work);
            if check.read_ahead {
                for loc in locs {
                    if let Some(chunk) = store.chunks.get_opened(loc.chunk_id) {
                        chunk.will_need(loc.offset, loc.phys_length);
                    }
                }
            }
            check
        })
        .collect();
    let result = sharded(items, work, block);
    for (&(store, _, _), check) in stores.iter().zip(checks) {
        store.cold.after(check);
    }
    result
}

impl Store {
    /// Gathers records `idxs` into `dst`, record `k` at byte `k * stride`.
    /// Bytes of a slot past its record's length are set to zero.
    pub fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        self.gather_slots(idxs, dst, stride, false)
    }

    /// [`Store::gather`] of records that must each be exactly `stride`
    /// bytes, as the samples of a dataset are: a record of another length
    /// is an [`Error::InvalidArgument`] naming it, before anything is
    /// written, where `gather` would zero-pad it. The check costs nothing
    /// beyond the entries `gather` reads anyway.
    pub fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        self.gather_slots(idxs, dst, stride, true)
    }

    fn gather_slots(&self, idxs: &[u64], dst: &mut [u8], stride: usize, exact: bool) -> Result<()> {
        self.meta.check_size()?;
        let len = self.meta.length();
        // Checked, then decoded from: the table is not read again (`locate`).
        let locs = self.locate(idxs, len)?;
        self.check_chunk_sizes(idxs, &locs)?;
        let mut total = 0u64;
        for (k, loc) in locs.iter().enumerate() {
            let logic = loc.logic_length as u64;
            let end = (k as u64)
                .checked_mul(stride as u64)
                .and_then(|start| start.checked_add(logic));
            if exact && logic != stride as u64 {
                return Err(self.invalid(format!(
                    "record {} is {logic} bytes, not the {stride} of a sample",
                    idxs[k]
                )));
            }
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
        // Shard `k` writes the slots of its records, the last one up to the
        // end of `dst`.
        let block = |idxs: &[u64], locs: &[RecordLoc], first: usize| -> Result<()> {
            let base = first * stride;
            let end = ((first + idxs.len()) * stride).min(dst_len);
            // SAFETY: shards cover disjoint runs of records, so disjoint
            // byte ranges of `dst`, all inside it (checked above); `dst` is
            // borrowed mutably for the whole call.
            let dst = unsafe { shared.slot(base, end - base) };
            for (k, (&index, &loc)) in idxs.iter().zip(locs).enumerate() {
                self.prefetch_ahead(locs, k);
                let start = k * stride;
                let end = start + loc.logic_length as usize;
                self.decode_into(index, loc, &mut dst[start..end], raw_copy)?;
                // Recycled batch memory holds an earlier batch's bytes: a
                // short record's slot must not show them.
                let slot_end = (start + stride).min(dst.len());
                if end < slot_end {
                    dst[end..slot_end].fill(0);
                }
            }
            Ok(())
        };
        self.run_batch(&locs, total, &|range| {
            block(&idxs[range.clone()], &locs[range.clone()], range.start)
        })
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
        let offsets: Vec<u64> = slots
            .iter()
            .map(|&slot| (slot as u64).saturating_mul(stride as u64))
            .collect();
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
        gather_parts(self.path(), &[Part::new(self, idxs, offsets)], dst, exact)
    }

    /// Checks one part of a batch against the store and `dst_len`: its
    /// entries (read once: the table is not read again, so the lengths that
    /// were proven to fit are the lengths written), their chunk files, and
    /// that each record fits where it goes. Returns the entries, the work,
    /// and whether the destinations come in increasing order.
    fn check_part(
        &self,
        idxs: &[u64],
        offsets: &[u64],
        dst_len: u64,
        exact: Option<u64>,
    ) -> Result<CheckedPart> {
        if idxs.len() != offsets.len() {
            return Err(self.invalid(format!(
                "{} indices but {} offsets",
                idxs.len(),
                offsets.len()
            )));
        }
        self.meta.check_size()?;
        let locs = self.locate(idxs, self.meta.length())?;
        self.check_chunk_sizes(idxs, &locs)?;
        let mut total = 0u64;
        let mut ordered = true;
        let mut prev_end = 0u64;
        for (k, loc) in locs.iter().enumerate() {
            let logic = loc.logic_length as u64;
            if exact.is_some_and(|len| len != logic) {
                return Err(self.invalid(format!(
                    "record {} is {logic} bytes, not the {} of a sample",
                    idxs[k],
                    exact.unwrap_or(0)
                )));
            }
            let end = offsets[k].checked_add(logic);
            if end.is_none_or(|end| end > dst_len) {
                return Err(self.too_small(idxs[k], end.unwrap_or(u64::MAX), dst_len));
            }
            if logic > 0 {
                ordered &= offsets[k] >= prev_end;
                prev_end = offsets[k] + logic;
            }
            total += work(loc);
        }
        Ok((locs, total, ordered))
    }

    /// Checks, with one `fstat` per distinct chunk, that every chunk file
    /// the batch `locs` reads still holds its records' bytes: a file that
    /// another program truncated while the store was open would otherwise
    /// fault (SIGBUS) on the first mapped page past its new end. A
    /// truncation *during* the gather is not caught (docs/reliability.md,
    /// "Files changed behind the store"). A chunk that does not open is
    /// left to the decode, which reports it as before.
    fn check_chunk_sizes(&self, idxs: &[u64], locs: &[RecordLoc]) -> Result<()> {
        // (chunk, position of the record that ends last in it, its end)
        let mut last: Vec<(u16, usize, u64)> = Vec::new();
        // An empty record reads no byte, wherever its offset points.
        for (k, loc) in locs.iter().enumerate().filter(|(_, l)| l.phys_length > 0) {
            let end = loc.offset as u64 + loc.phys_length as u64;
            match last.iter_mut().find(|l| l.0 == loc.chunk_id) {
                Some(l) if end > l.2 => *l = (loc.chunk_id, k, end),
                Some(_) => {}
                None => last.push((loc.chunk_id, k, end)),
            }
        }
        for (chunk_id, k, end) in last {
            let Ok(chunk) = self.chunks.get(chunk_id) else {
                continue;
            };
            let size = chunk.file_len()?;
            if end > size {
                return Err(Error::CorruptRecord {
                    path: self.path().to_path_buf(),
                    index: idxs[k],
                    chunk: chunk_id,
                    offset: locs[k].offset,
                    reason: format!(
                        "its bytes end at {end}, but {} is {size} bytes: truncated while \
                         the store was open?",
                        chunk.path().display()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Runs the shards of a batch of `work` (see [`run_parts`]).
    fn run_batch(
        &self,
        locs: &[RecordLoc],
        work: u64,
        block: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
    ) -> Result<()> {
        run_parts(&[(self, locs, work)], locs.len(), work, block)
    }

    /// Prefetches the stored bytes of the record `PREFETCH_DISTANCE` places
    /// after position `k` of a block's `locs`, so that its cache misses
    /// overlap the decoding of the records before it instead of stalling it.
    /// (Measured on Fashion-MNIST with LZ4: bench/README.md, "Prefetching".)
    fn prefetch_ahead(&self, locs: &[RecordLoc], k: usize) {
        if let Some(loc) = locs.get(k + PREFETCH_DISTANCE) {
            if let Some(chunk) = self.chunks.get_opened(loc.chunk_id) {
                chunk.prefetch(loc.offset, loc.phys_length);
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
        let verify = self.verify_reads && !self.verified.contains(index);
        let checked = self.decode_checked(index, loc, slot, verify, raw_copy)?;
        // Only while the sidecar covers the table: after a program that
        // keeps no checksums wrote it, a damaged frontier may let appends
        // overwrite records, so each read checks again.
        let covered = |c: &ChecksumFile| c.covers(&self.meta.header());
        if checked == Checked::Yes && self.checksums.as_ref().is_some_and(covered) {
            self.verified.insert(index);
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
        let stored = match &chunk {
            None => &[][..],
            Some(chunk) => chunk.read(loc.offset, loc.phys_length).ok_or_else(|| {
                corrupt(format!(
                    "{} stored bytes run past the end of {}",
                    loc.phys_length,
                    chunk.path().display()
                ))
            })?,
        };
        // Decoded first, so that an entry the decoder refuses is reported
        // by what is wrong with it rather than by its checksum slot.
        let dict = match loc.codec == Codec::ZstdDict.tag() {
            true => self.dictionary()?,
            false => None,
        };
        decode(loc.codec, stored, slot, raw_copy, dict).map_err(&corrupt)?;
        let expected = match &self.checksums {
            Some(checksums) if verify => match checksums.judge(index, &loc, &self.meta.header()) {
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
