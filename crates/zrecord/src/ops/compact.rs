//! Compaction: reclaiming the bytes that `delete` left behind, in place
//! (docs/FORMAT.md, "Compact").
//!
//! Live records are visited in physical order and packed densely from the
//! start of chunk 0, so a record only ever moves to a lower address and never
//! lands on a record not yet visited. Records are moved in groups, each in
//! two synced phases: first every record of the group is copied past the write
//! frontier, where no live record lies, and its entry pointed at the copy;
//! then the copies are written to their packed places and the entries pointed
//! there. At every instant each entry points at an intact, durable copy, so an
//! interrupted compaction (even by power loss) leaves a valid store, and
//! running `compact` again finishes it.

use std::time::Duration;

use crate::error::Result;
use crate::files::chunk_file::chunk_id_of;
use crate::files::lock::Deadline;
use crate::format::checksums::Checksum;
use crate::format::record_table::{physical_address, RecordLoc};
use crate::ops::stats::Stats;
use crate::store::Store;

/// What a compaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactReport {
    /// Records written to a new position.
    pub moved: u64,
    /// Whether every record is packed; false when a move budget ran out.
    pub finished: bool,
    /// Usage before and after.
    pub before: Stats,
    pub after: Stats,
}

/// Bytes moved per group: the extra disk space compaction needs, and the
/// amount of work between two rounds of syncs.
const GROUP_BYTES: u64 = 64 << 20;

/// A position in the store: (chunk, offset).
type Pos = (u16, u64);

struct Move {
    index: usize,
    loc: RecordLoc,
    target: Pos,
    /// The record's checksum slot, when it describes the record: it is
    /// rewritten for each new position. A slot that does not (the record
    /// was written by a program that keeps no checksums) is left alone.
    checksum: Option<Checksum>,
}

impl Store {
    /// Packs the live records densely and deletes chunk files past the new
    /// frontier. Records already in place are not touched.
    pub fn compact(&mut self) -> Result<CompactReport> {
        self.compact_some(u64::MAX)
    }

    /// Like [`Store::compact`], but stops after moving `max_moves` records,
    /// leaving a valid store that a later call continues, so a large
    /// compaction can be spread over several maintenance windows.
    pub fn compact_some(&mut self, max_moves: u64) -> Result<CompactReport> {
        self.compact_within(max_moves, Duration::ZERO)
    }

    /// [`Store::compact_some`], waiting up to `wait` for the other handles
    /// of the store to close (the others fail at once while any is open).
    pub fn compact_within(&mut self, max_moves: u64, wait: Duration) -> Result<CompactReport> {
        self.may_write("compact")?;
        let _sole = self.lock.exclusive_within(&Deadline::after(wait))?;
        // It opens, creates and removes chunk files by path: not in another
        // folder renamed into this one's place.
        self.check_folder()?;
        // Records get new copies, which have not been checked.
        self.verified.forget();
        // Entries and slots change in turns from here on: until the end,
        // the sidecar claims to describe no table state.
        if let Some(checksums) = &self.checksums {
            checksums.set_covered(None)?;
            checksums.flush_header()?;
        }
        let before = self.stats();
        let header = self.meta.header();
        // By start, then length: an empty record shares its start with the
        // record appended after it and must come first.
        let mut order: Vec<(u64, u32, usize)> = (0..header.length as usize)
            .map(|i| {
                let loc = self.meta.entry(i);
                (loc.physical_start(), loc.phys_length, i)
            })
            .collect();
        order.sort_unstable();

        let frontier = (header.tail_chunk, header.tail_offset as u64);
        let group_limit = GROUP_BYTES.min(self.chunk_capacity);
        let mut cursor: Pos = (0, 0);
        let mut prev_end = 0u64;
        let mut group = Vec::new();
        let mut group_bytes = 0;
        let mut moved = 0;
        let mut finished = true;
        for (start, _, index) in order {
            let loc = self.meta.entry(index);
            if start < prev_end {
                return Err(self.corrupt(index, loc, "its bytes overlap another record's"));
            }
            prev_end = start + loc.phys_length as u64;
            let target = self.place(cursor, loc.phys_length);
            if physical_address(target.0, target.1) >= start {
                // In place already, or packing would move it up: keep it.
                cursor = (loc.chunk_id, loc.end());
                continue;
            }
            if moved == max_moves {
                finished = false;
                break;
            }
            let checksum = self.checksums.as_ref().map(|c| c.get(index));
            let checksum = checksum.filter(|c| c.describes(&loc));
            group.push(Move {
                index,
                loc,
                target,
                checksum,
            });
            group_bytes += loc.phys_length as u64;
            cursor = (target.0, target.1 + loc.phys_length as u64);
            moved += 1;
            if group_bytes >= group_limit {
                self.move_group(&group, frontier)?;
                group.clear();
                group_bytes = 0;
            }
        }
        self.move_group(&group, frontier)?;

        if finished {
            // The new frontier is durable before anything past it goes away.
            self.meta.set_tail(cursor.0, cursor.1 as u32)?;
            self.meta.flush_header()?;
            self.remove_chunks_after(cursor.0)?;
            let tail = self.chunks.get_or_create(cursor.0)?;
            if tail.refresh_size()? > cursor.1 {
                tail.truncate(cursor.1)?;
            }
        }
        self.mark_covered_if_described()?;
        Ok(CompactReport {
            moved,
            finished,
            before,
            after: self.stats(),
        })
    }

    /// Moves one group: park every record past `frontier`, then write each
    /// to its target, syncing data before the entries that point at it.
    fn move_group(&self, group: &[Move], frontier: Pos) -> Result<()> {
        if group.is_empty() {
            return Ok(());
        }
        let mut scratch = Vec::new();
        let mut park = frontier;
        let mut parked = Vec::with_capacity(group.len());
        let mut written = Vec::new();
        for m in group {
            let at = self.place(park, m.loc.phys_length);
            self.copy(m.index, m.loc, at, &mut scratch, &mut written)?;
            parked.push(RecordLoc {
                chunk_id: at.0,
                offset: at.1 as u32,
                ..m.loc
            });
            park = (at.0, at.1 + m.loc.phys_length as u64);
        }
        // The tail covers the parked copies before any entry points at them,
        // so an append after a crash cannot overwrite them.
        let tail = self.meta.header();
        if physical_address(park.0, park.1)
            > physical_address(tail.tail_chunk, tail.tail_offset as u64)
        {
            self.meta.set_tail(park.0, park.1 as u32)?;
            self.meta.flush_header()?;
        }
        self.sync_chunks(&mut written)?;
        for (m, &at) in group.iter().zip(&parked) {
            self.point_at(m, at)?;
        }
        self.sync_table()?;

        for (m, &from) in group.iter().zip(&parked) {
            self.copy(m.index, from, m.target, &mut scratch, &mut written)?;
        }
        self.sync_chunks(&mut written)?;
        for m in group {
            let placed = RecordLoc {
                chunk_id: m.target.0,
                offset: m.target.1 as u32,
                ..m.loc
            };
            self.point_at(m, placed)?;
        }
        self.sync_table()
    }

    /// Points the entry of `m`'s record, and its checksum slot when it has
    /// one, at the copy stored at `at`.
    fn point_at(&self, m: &Move, at: RecordLoc) -> Result<()> {
        self.meta.set_entry(m.index, at)?;
        match (&self.checksums, m.checksum) {
            (Some(checksums), Some(checksum)) => checksums.set(m.index, checksum.moved_to(&at)),
            _ => Ok(()),
        }
    }

    fn sync_table(&self) -> Result<()> {
        if let Some(checksums) = &self.checksums {
            checksums.sync()?;
        }
        self.meta.sync()
    }

    /// Ends a compaction: when every live record's slot describes it, the
    /// sidecar covers the table again.
    fn mark_covered_if_described(&self) -> Result<()> {
        let Some(checksums) = &self.checksums else {
            return Ok(());
        };
        let described = (0..self.meta.length() as usize)
            .all(|i| checksums.get(i).describes(&self.meta.entry(i)));
        if described {
            self.mark_covered(true)?;
        }
        Ok(())
    }

    /// Copies record `index`'s stored bytes from `from` to `to`.
    fn copy(
        &self,
        index: usize,
        from: RecordLoc,
        to: Pos,
        scratch: &mut Vec<u8>,
        written: &mut Vec<u16>,
    ) -> Result<()> {
        if from.phys_length == 0 {
            return Ok(());
        }
        // A missing or short chunk file is a damaged store; one that cannot
        // be opened or looked at (out of files) is an I/O error.
        let stored = self.stored_bytes(index as u64, from)?;
        // Through a buffer: source and target may share a page of one file.
        scratch.clear();
        scratch.extend_from_slice(stored);
        self.chunks.get_or_create(to.0)?.write_at(to.1, scratch)?;
        written.push(to.0);
        Ok(())
    }

    fn sync_chunks(&self, written: &mut Vec<u16>) -> Result<()> {
        written.sort_unstable();
        written.dedup();
        for &id in written.iter() {
            self.chunks.get(id)?.sync_data()?;
        }
        written.clear();
        Ok(())
    }

    /// Where a record of `phys` bytes goes when packed after `at`.
    fn place(&self, at: Pos, phys: u32) -> Pos {
        if at.1 + phys as u64 > self.chunk_limit {
            (at.0 + 1, 0)
        } else {
            at
        }
    }

    /// Deletes every chunk file numbered above `last`, including strays left
    /// by an append that crashed after creating a chunk.
    fn remove_chunks_after(&mut self, last: u16) -> Result<()> {
        let dir = self.path().to_path_buf();
        let entries = std::fs::read_dir(&dir).map_err(crate::error::io_error(&dir))?;
        for entry in entries {
            let entry = entry.map_err(crate::error::io_error(&dir))?;
            let name = entry.file_name();
            let id = name.to_str().and_then(chunk_id_of);
            if let Some(id) = id.filter(|&id| id > last) {
                self.chunks.remove(id)?;
            }
        }
        Ok(())
    }
}
