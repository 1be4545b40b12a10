//! The delete journal: what makes a delete all-or-nothing across a crash
//! (docs/FORMAT.md, "Delete" and "delete.journal").
//!
//! A swap-last delete rewrites several table slots and then the length; a
//! crash in between would leave a survivor in two slots. So the complete set
//! of slot rewrites is first written to `delete.journal` and synced, then
//! applied, then the journal is removed. Opening a store with a journal
//! present re-applies it; applying twice is harmless because the journal
//! holds the new entries themselves, not instructions to copy slots.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{io_error, Error, Result};
use crate::files::checksum_file::ChecksumFile;
use crate::files::io_hook::{announce, Hook, IoEvent};
use crate::files::meta_file::MetaFile;
use crate::files::os::sync_dir;
use crate::format::checksums::{Checksum, CHECKSUM_SLOT_LEN};
use crate::format::header::Header;
use crate::format::limits::MAX_RECORDS;
use crate::format::record_table::{RecordLoc, ENTRY_LEN};

/// File name of the delete journal inside a store directory (docs/FORMAT.md,
/// "A store is a directory").
pub const JOURNAL_FILE_NAME: &str = "delete.journal";

// The journal's layout (docs/FORMAT.md, "delete.journal"), each offset
// chained from the one before it.
/// `magic`: the ASCII bytes `ZRDJ`.
const JOURNAL_MAGIC: [u8; 4] = *b"ZRDJ";
/// `version`.
const JOURNAL_VERSION: u16 = 1;
/// `magic`, at the start.
const MAGIC_OFFSET: usize = 0;
/// `version`, a `u16`.
const VERSION_OFFSET: usize = MAGIC_OFFSET + JOURNAL_MAGIC.len();
/// Two reserved bytes, written as zero.
const RESERVED_OFFSET: usize = VERSION_OFFSET + size_of::<u16>();
/// `old length`, a `u32`.
const OLD_LENGTH_OFFSET: usize = RESERVED_OFFSET + size_of::<u16>();
/// `new length`, a `u32`.
const NEW_LENGTH_OFFSET: usize = OLD_LENGTH_OFFSET + size_of::<u32>();
/// `count` of rewrites, a `u32`.
const COUNT_OFFSET: usize = NEW_LENGTH_OFFSET + size_of::<u32>();
/// The rewrites, `count` of them, `MOVE_LEN` bytes each.
const MOVES_OFFSET: usize = COUNT_OFFSET + size_of::<u32>();
/// Within a rewrite: the slot it rewrites, a `u32`.
const MOVE_SLOT_OFFSET: usize = 0;
/// Within a rewrite: the table entry the slot receives.
const MOVE_ENTRY_OFFSET: usize = MOVE_SLOT_OFFSET + size_of::<u32>();
/// Within a rewrite: the checksum slot the record's slot receives.
const MOVE_CHECKSUM_OFFSET: usize = MOVE_ENTRY_OFFSET + ENTRY_LEN;
/// Size of one rewrite.
const MOVE_LEN: usize = MOVE_CHECKSUM_OFFSET + CHECKSUM_SLOT_LEN;
/// The journal ends with the CRC32C of every byte before it.
const CRC_LEN: usize = size_of::<u32>();

const _: () = assert!(MOVES_OFFSET == 20 && MOVE_LEN == 28);

/// A delete, fully resolved: the length before and after, and every slot
/// below the new length that receives a new entry.
pub(crate) struct DeletePlan {
    pub old_length: u32,
    pub new_length: u32,
    pub moves: Vec<(u32, RecordLoc, Checksum)>,
}

impl DeletePlan {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; MOVES_OFFSET + self.moves.len() * MOVE_LEN];
        b[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&JOURNAL_MAGIC);
        b[VERSION_OFFSET..RESERVED_OFFSET].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
        b[OLD_LENGTH_OFFSET..NEW_LENGTH_OFFSET].copy_from_slice(&self.old_length.to_le_bytes());
        b[NEW_LENGTH_OFFSET..COUNT_OFFSET].copy_from_slice(&self.new_length.to_le_bytes());
        b[COUNT_OFFSET..MOVES_OFFSET].copy_from_slice(&(self.moves.len() as u32).to_le_bytes());
        for ((slot, loc, checksum), m) in self
            .moves
            .iter()
            .zip(b[MOVES_OFFSET..].chunks_exact_mut(MOVE_LEN))
        {
            m[MOVE_SLOT_OFFSET..MOVE_ENTRY_OFFSET].copy_from_slice(&slot.to_le_bytes());
            m[MOVE_ENTRY_OFFSET..MOVE_CHECKSUM_OFFSET].copy_from_slice(&loc.to_bytes());
            m[MOVE_CHECKSUM_OFFSET..MOVE_LEN].copy_from_slice(&checksum.to_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` for anything but a complete journal with a matching checksum:
    /// a torn journal was never applied, since applying waits for its sync.
    fn decode(b: &[u8]) -> Option<DeletePlan> {
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let body = b.len().checked_sub(CRC_LEN)?;
        if b.get(MAGIC_OFFSET..VERSION_OFFSET)? != JOURNAL_MAGIC
            || crc32c::crc32c(&b[..body]) != u32_at(body)?
        {
            return None;
        }
        if u16::from_le_bytes(b[VERSION_OFFSET..RESERVED_OFFSET].try_into().ok()?)
            != JOURNAL_VERSION
        {
            return None;
        }
        let count = u32_at(COUNT_OFFSET)? as usize;
        if MOVES_OFFSET + count.checked_mul(MOVE_LEN)? != body {
            return None;
        }
        let moves = b[MOVES_OFFSET..body]
            .chunks_exact(MOVE_LEN)
            .map(|m| {
                let slot =
                    u32::from_le_bytes(m[MOVE_SLOT_OFFSET..MOVE_ENTRY_OFFSET].try_into().ok()?);
                let loc = RecordLoc::from_bytes(
                    m[MOVE_ENTRY_OFFSET..MOVE_CHECKSUM_OFFSET].try_into().ok()?,
                );
                let checksum =
                    Checksum::from_bytes(m[MOVE_CHECKSUM_OFFSET..MOVE_LEN].try_into().ok()?);
                Some((slot, loc, checksum))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(DeletePlan {
            old_length: u32_at(OLD_LENGTH_OFFSET)?,
            new_length: u32_at(NEW_LENGTH_OFFSET)?,
            moves,
        })
    }
}

pub(crate) fn journal_path(dir: &Path) -> PathBuf {
    dir.join(JOURNAL_FILE_NAME)
}

/// Writes and syncs the journal for `plan`. After this returns, the delete
/// happens even if the process dies before `apply` finishes.
pub(crate) fn write(dir: &Path, hook: &Hook, plan: &DeletePlan) -> Result<()> {
    let path = journal_path(dir);
    let bytes = plan.encode();
    let name = JOURNAL_FILE_NAME;
    announce(
        hook,
        &path,
        IoEvent::FileWrite {
            name,
            bytes: &bytes,
        },
    )?;
    let mut file = File::create(&path).map_err(io_error(&path))?;
    file.write_all(&bytes).map_err(io_error(&path))?;
    announce(hook, &path, IoEvent::FileSync { name })?;
    file.sync_all().map_err(io_error(&path))?;
    announce_and_sync_dir(dir, hook)
}

/// Applies `plan` to the table, makes it durable, and removes the journal.
pub(crate) fn apply(
    dir: &Path,
    meta: &MetaFile,
    checksums: Option<&ChecksumFile>,
    plan: &DeletePlan,
) -> Result<()> {
    // A delete does not move the frontier; the sidecar covers the table if
    // it did before the delete, or (when finishing an interrupted one)
    // after it.
    let at_length = |length| Header {
        length,
        ..meta.header()
    };
    let covered = checksums.is_some_and(|c| {
        c.covers(&at_length(plan.old_length)) || c.covers(&at_length(plan.new_length))
    });
    for &(slot, loc, checksum) in &plan.moves {
        meta.set_entry(slot as usize, loc)?;
        if let Some(checksums) = checksums {
            checksums.set(slot as usize, checksum)?;
        }
    }
    meta.publish_length(plan.new_length)?;
    if let Some(checksums) = checksums {
        // Emptied slots describe no record: a record that a program keeping
        // no checksums later appends at the same place, with the same
        // lengths, must not be judged by one of them.
        for slot in plan.new_length..plan.old_length {
            checksums.set(slot as usize, Checksum::default())?;
        }
        if covered {
            checksums.set_covered(Some(&meta.header()))?;
        }
        checksums.sync()?;
    }
    meta.sync()?;
    remove(dir, meta.hook())
}

fn remove(dir: &Path, hook: &Hook) -> Result<()> {
    let path = journal_path(dir);
    let name = JOURNAL_FILE_NAME;
    announce(hook, &path, IoEvent::FileRemove { name })?;
    fs::remove_file(&path).map_err(io_error(&path))?;
    announce_and_sync_dir(dir, hook)
}

/// Finishes a delete that a crash interrupted, if there is one.
pub(crate) fn recover(dir: &Path, meta: &MetaFile, checksums: Option<&ChecksumFile>) -> Result<()> {
    let path = journal_path(dir);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(&path)(e)),
    };
    let Some(plan) = DeletePlan::decode(&bytes) else {
        // Torn while being written: the delete never started.
        return remove(dir, meta.hook());
    };
    let refuse = |reason: String| {
        Err(Error::NotAStore {
            path: path.clone(),
            reason,
        })
    };
    let length = meta.length();
    if length != plan.old_length && length != plan.new_length {
        return refuse(format!(
            "delete journal is for a store of {} records, the header says {length}",
            plan.old_length
        ));
    }
    // A checksum only proves the journal is whole; a delete also never grows
    // the store and only rewrites slots below its new length.
    if plan.new_length > plan.old_length || plan.old_length as usize > MAX_RECORDS {
        return refuse(format!(
            "delete journal takes the store from {} to {} records",
            plan.old_length, plan.new_length
        ));
    }
    if let Some(&(slot, ..)) = plan.moves.iter().find(|m| m.0 >= plan.new_length) {
        return refuse(format!(
            "delete journal rewrites slot {slot}, past the new length {}",
            plan.new_length
        ));
    }
    apply(dir, meta, checksums, &plan)
}

fn announce_and_sync_dir(dir: &Path, hook: &Hook) -> Result<()> {
    announce(hook, dir, IoEvent::DirSync)?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::codec::CodecTag;

    fn plan() -> DeletePlan {
        let loc = |i: u32| RecordLoc {
            offset: i * 10,
            phys_length: i,
            logic_length: i + 1,
            chunk_id: i as u16,
            codec: CodecTag(1),
            reserved: 0,
        };
        DeletePlan {
            old_length: 10,
            new_length: 7,
            moves: vec![
                (2, loc(9), Checksum { data: 7, entry: 9 }),
                (5, loc(8), Checksum::default()),
            ],
        }
    }

    #[test]
    fn journal_round_trips() {
        let back = DeletePlan::decode(&plan().encode()).unwrap();
        assert_eq!((back.old_length, back.new_length), (10, 7));
        assert_eq!(back.moves, plan().moves);
    }

    #[test]
    fn every_torn_or_damaged_journal_is_rejected() {
        let bytes = plan().encode();
        for cut in 0..bytes.len() {
            assert!(DeletePlan::decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 1;
            assert!(DeletePlan::decode(&b).is_none(), "flip at {i}");
        }
    }
}
