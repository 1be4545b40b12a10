//! Compaction: reclaiming the bytes that `delete` left behind, in place
//! (docs/FORMAT.md, "Compact").
//!
//! Live records are visited in physical order and packed densely from the
//! start of chunk 0, so a record only ever moves to a lower address and never
//! lands on a record not yet visited. Each table entry is rewritten as soon as
//! its record has landed, so the store is valid at every instant and an
//! interrupted compaction is finished by running it again.
//!
//! A record whose new place overlaps its old one (a short move down) cannot be
//! copied directly: a crash mid-copy would damage the only copy. It is first
//! parked past the write frontier, where no live record lies, and moved down
//! from there.

use crate::error::{Error, Result};
use crate::record_table::RecordLoc;
use crate::stats::Stats;
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
        let _sole = crate::lock::exclusive(self.meta.file(), self.meta.path())?;
        let before = self.stats();
        let header = self.meta.header();
        let mut order: Vec<(u64, usize)> = (0..header.length as usize)
            .map(|i| (self.meta.entry(i).physical_start(), i))
            .collect();
        order.sort_unstable();

        let mut frontier = (header.tail_chunk, header.tail_offset as u64);
        let mut cursor = (0u16, 0u64);
        let mut scratch = Vec::new();
        let mut moved = 0;
        for (start, index) in order {
            let loc = self.meta.entry(index);
            let target = self.place(cursor, loc.phys_length);
            if moved == max_moves {
                return Ok(CompactReport {
                    moved,
                    finished: false,
                    before,
                    after: self.stats(),
                });
            }
            if address(target) >= start {
                // In place already, or packing would move it up: keep it.
                cursor = (loc.chunk_id, loc.end());
                continue;
            }
            self.read_stored(index, loc, &mut scratch)?;
            let mut current = loc;
            if target.0 == loc.chunk_id && target.1 + loc.phys_length as u64 > loc.offset as u64 {
                let park = self.place(frontier, loc.phys_length);
                current = self.write_record(index, loc, park, &scratch)?;
                frontier = (park.0, park.1 + loc.phys_length as u64);
                // The parked copy must lie below the tail, or an append after
                // a crash here would overwrite it.
                self.meta.set_tail(frontier.0, frontier.1 as u32);
            }
            self.write_record(index, current, target, &scratch)?;
            cursor = (target.0, target.1 + loc.phys_length as u64);
            moved += 1;
        }

        self.meta.set_tail(cursor.0, cursor.1 as u32);
        self.remove_chunks_after(cursor.0)?;
        let tail = self.chunks.get_or_create(cursor.0)?;
        if tail.file_len()? > cursor.1 {
            tail.truncate(cursor.1)?;
        }
        Ok(CompactReport {
            moved,
            finished: true,
            before,
            after: self.stats(),
        })
    }

    /// Where a record of `phys` bytes goes when packed after `at`.
    fn place(&self, at: (u16, u64), phys: u32) -> (u16, u64) {
        if at.1 + phys as u64 > self.chunk_limit {
            (at.0 + 1, 0)
        } else {
            at
        }
    }

    fn read_stored(&self, index: usize, loc: RecordLoc, into: &mut Vec<u8>) -> Result<()> {
        let stored = self
            .chunks
            .get(loc.chunk_id)
            .ok()
            .and_then(|chunk| chunk.read(loc.offset, loc.phys_length))
            .ok_or_else(|| Error::CorruptRecord {
                path: self.path().to_path_buf(),
                index: index as u64,
                chunk: loc.chunk_id,
                offset: loc.offset,
                reason: "stored bytes lie outside the chunk files".into(),
            })?;
        into.clear();
        into.extend_from_slice(stored);
        Ok(())
    }

    /// Writes `bytes` at `to`, then points entry `index` there.
    fn write_record(
        &self,
        index: usize,
        loc: RecordLoc,
        to: (u16, u64),
        bytes: &[u8],
    ) -> Result<RecordLoc> {
        if !bytes.is_empty() {
            self.chunks.get_or_create(to.0)?.write_at(to.1, bytes)?;
        }
        let moved = RecordLoc {
            chunk_id: to.0,
            offset: to.1 as u32,
            ..loc
        };
        self.meta.set_entry(index, moved);
        Ok(moved)
    }

    /// Deletes every chunk file numbered above `last`, including strays left
    /// by an append that crashed after creating a chunk.
    fn remove_chunks_after(&mut self, last: u16) -> Result<()> {
        let dir = self.path().to_path_buf();
        let entries = std::fs::read_dir(&dir).map_err(crate::error::io_error(&dir))?;
        for entry in entries {
            let entry = entry.map_err(crate::error::io_error(&dir))?;
            let name = entry.file_name();
            let id = name
                .to_str()
                .and_then(|n| n.strip_suffix(".zr"))
                .and_then(|n| n.parse::<u16>().ok());
            if let Some(id) = id.filter(|&id| id > last) {
                self.chunks.remove(id)?;
            }
        }
        Ok(())
    }
}

fn address((chunk, offset): (u16, u64)) -> u64 {
    ((chunk as u64) << 32) | offset
}
