//! A collection's readers lock (docs/FORMAT.md, "Collections"): every open
//! [`Collection`](super::Collection) holds it shared, and a delete from one
//! of the collection's shards holds it exclusively.
//!
//! A reader fixes each shard's numbering when it opens, but holds open (and
//! so locks) only the shards' stores it has read from, up to its open-file
//! budget; a delete moves a shard's last rows into its holes. Without this
//! lock a delete from a shard the reader had not opened, followed by appends
//! back to the old count, would have the reader read other rows under its
//! numbers. With it, a delete from a shard waits for (or is refused by) the
//! collection's readers, as a delete from a store is by the store's other
//! handles. The locks are the stores' own kind (`files/lock`), on the file
//! `collection.lock`, which holds nothing.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::Path;

use crate::error::{io_error, Error, Result};
use crate::files::lock::{Deadline, ExclusiveUse, StoreLock};

/// The file in a collection's folder whose lock readers hold.
const READERS_LOCK_FILE: &str = "collection.lock";

/// Why a delete from a shard is refused while readers hold the lock.
const READERS_OPEN: &str = "a delete from one of its shards renumbers that shard's rows, and \
                            readers of the collection have it open";

/// Why a reader's open is refused while a delete holds the lock.
const DELETING: &str = "another handle is deleting from one of its shards";

pub(crate) struct ReadersLock {
    /// Held by a delete; dropped (the lock shared again) before the file
    /// closes.
    _exclusive: Option<ExclusiveUse>,
    _lock: StoreLock,
    _file: File,
}

/// Makes the (empty) lock file of the collection in `dir` unless it is
/// there: writers make it with the folder, for deletes to find.
pub(crate) fn make_file(dir: &Path) -> Result<()> {
    let path = dir.join(READERS_LOCK_FILE);
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .map_err(io_error(&path))?;
    Ok(())
}

impl ReadersLock {
    /// A reader's lock of the collection in `dir`, held shared (made when
    /// missing); `None` when there is no lock file and none can be made: a
    /// collection this process may not write, which no handle of it
    /// deletes from. Busy while a delete holds it.
    pub(crate) fn share(dir: &Path) -> Result<Option<ReadersLock>> {
        let path = dir.join(READERS_LOCK_FILE);
        let writable = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path);
        let file = match writable {
            Ok(file) => file,
            Err(_) => match File::open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io_error(&path)(e)),
            },
        };
        let lock = StoreLock::share_unless(&file, &path, dir, DELETING)?;
        Ok(Some(ReadersLock {
            _exclusive: None,
            _lock: lock,
            _file: file,
        }))
    }

    /// For a delete from the store in `shard`: when it is a shard of a
    /// collection (the folder it is in has the lock file), that collection's
    /// lock held exclusively, waiting until `deadline` for the collection's
    /// readers (and another delete) to end; `None` for a store of its own.
    pub(crate) fn for_delete(shard: &Path, deadline: &Deadline) -> Result<Option<ReadersLock>> {
        // A store keeps its real path, but one its own open created keeps
        // the path as given, made absolute (`..` and links in it kept), whose
        // parent need not be the folder it lies in.
        let shard = shard.canonicalize().map_err(io_error(shard))?;
        let Some(dir) = shard.parent() else {
            return Ok(None);
        };
        let path = dir.join(READERS_LOCK_FILE);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path)(e)),
        };
        let mut refusal = None;
        let taken = deadline.wait(
            || match StoreLock::share_unless(&file, &path, dir, DELETING) {
                Err(busy @ Error::Busy { .. }) => {
                    refusal = Some(busy);
                    None
                }
                taken => Some(taken),
            },
        );
        let lock = match (taken, refusal) {
            (Some(taken), _) => taken?,
            (None, refusal) => return Err(refusal.expect("tried at least once")),
        };
        let exclusive = lock.exclusive_unless(deadline, READERS_OPEN)?;
        Ok(Some(ReadersLock {
            _exclusive: Some(exclusive),
            _lock: lock,
            _file: file,
        }))
    }
}
