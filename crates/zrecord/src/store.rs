//! The store: opening a directory, and the small read-only queries.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::error::{io_error, Error, Result};
use crate::exec::cold_reads::ColdReads;
use crate::exec::streaming_copy::RawCopy;
use crate::files::change_watch::{Changes, FileWatch};
use crate::files::checksum_file::ChecksumFile;
use crate::files::chunk_file::ChunkFiles;
use crate::files::folder::Folder;
use crate::files::io_hook::IoHook;
use crate::files::lock::StoreLock;
use crate::files::meta_file::MetaFile;
use crate::format::checksums::Checksum;
use crate::format::dictionary::Dictionary;
use crate::format::header::Header;
use crate::format::limits::CHUNK_CAPACITY;
use crate::format::record_table::{physical_address, RecordLoc};
use crate::ops::gather::Checked;
use crate::ops::verified_records::VerifiedRecords;

/// How to open a store.
#[derive(Clone)]
pub struct StoreOptions {
    /// Create the directory and an empty store when `meta.zr` is missing.
    pub create: bool,
    /// Bytes a chunk file may hold before appends roll over to the next one.
    /// The format allows up to [`CHUNK_CAPACITY`]; smaller values exist so
    /// tests can exercise rollover without writing gigabytes. It only steers
    /// where new records go: any store opens with any value.
    pub chunk_capacity: u64,
    /// Whether to keep and check per-record CRC32C checksums in
    /// `checksums.zr`; see [`Checksums`]. A store that has the file keeps it
    /// current whatever this says.
    pub checksums: Checksums,
    /// Open for reading only: every write (append, delete, compact,
    /// creating `checksums.zr`) fails with [`Error::ReadOnly`], and a
    /// missing store is not created. Without it a store whose `meta.zr` or
    /// `checksums.zr` this process may not write (file permissions, a
    /// read-only file system) is opened read-only too; [`Store::read_only`]
    /// says which it is.
    pub read_only: bool,
    /// Observer of every file operation, for crash and fault testing; see
    /// [`IoHook`].
    pub io_hook: Option<Arc<dyn IoHook>>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            create: true,
            chunk_capacity: CHUNK_CAPACITY,
            checksums: Checksums::Auto,
            read_only: false,
            io_hook: None,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("create", &self.create)
            .field("chunk_capacity", &self.chunk_capacity)
            .field("checksums", &self.checksums)
            .field("read_only", &self.read_only)
            .field("io_hook", &self.io_hook.is_some())
            .finish()
    }
}

/// Whether a handle keeps and checks per-record checksums (docs/FORMAT.md,
/// "Checksums").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksums {
    /// The default. A store this handle creates gets `checksums.zr`, and
    /// gathers check every record of a store that has the file (the first
    /// time this handle reads it; see [`Store::gather`]). A store without
    /// one, as loaderx 0.5.0 writes them, is read unchecked and left so.
    #[default]
    Auto,
    /// As `Auto`, and a store without the file gets one, with checksums of
    /// the records already there (which are thereby trusted as they are).
    On,
    /// Reads are not checked and no file is created.
    Off,
}

/// A record store on disk.
///
/// `gather`, `lengths`, `append` and `stats` take `&self` and may run from
/// many threads at once: readers take no lock, appends serialise among
/// themselves. `delete` and `compact` rewrite entries a reader could be
/// looking at, so they take `&mut self`.
pub struct Store {
    pub(crate) meta: MetaFile,
    pub(crate) chunks: ChunkFiles,
    pub(crate) checksums: Option<ChecksumFile>,
    /// Whether gathers check records against their checksums.
    pub(crate) verify_reads: bool,
    /// Records whose checksum a gather of this handle has already checked.
    pub(crate) verified: VerifiedRecords,
    /// The store's zstd dictionary, once loaded (`files/dictionary_file.rs`).
    pub(crate) dictionary: OnceLock<Dictionary>,
    /// Serialises appends from the moment they pick positions until their
    /// length is published.
    pub(crate) writer: Mutex<()>,
    /// Capacity new records are packed into, from [`StoreOptions`].
    pub(crate) chunk_capacity: u64,
    /// Largest end offset a record may have within a chunk.
    pub(crate) chunk_limit: u64,
    /// Whether gathers ask for their records ahead (the page cache is cold).
    pub(crate) cold: ColdReads,
    /// Changes to the mapped files since a read last checked their sizes,
    /// and the watches on `meta.zr` and `checksums.zr` that count them (the
    /// chunks' are the chunks'): `files/change_watch.rs`.
    pub(crate) changes: Arc<Changes>,
    watches: Vec<FileWatch>,
    /// The locks this handle holds on the store; see `files/lock`.
    pub(crate) lock: StoreLock,
    /// Why this handle may not write, when it may not.
    read_only: Option<&'static str>,
    /// The process that opened the store. A forked child inherits the
    /// handle with the parent's open file descriptions, so the parent's
    /// locks, and its mutexes as they were at the fork, perhaps held by a
    /// thread the child does not have: the child may read, never write
    /// (docs/reliability.md, "Forks").
    owner: u32,
    /// The store's folder, by its real path: [`Folder`].
    folder: Folder,
}

impl Store {
    /// Opens the store in `dir`, creating it when missing.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(dir, &StoreOptions::default())
    }

    /// Opens the store in `dir` with explicit options. The handle keeps the
    /// folder's real path as of now: it stays with that folder if the
    /// process changes directory or a link in `dir` is pointed elsewhere,
    /// and fails with [`Error::FolderReplaced`] rather than open a file of
    /// another folder renamed into its place.
    pub fn open_with(dir: impl AsRef<Path>, options: &StoreOptions) -> Result<Store> {
        let mut folder = Folder::new(dir.as_ref())?;
        let dir = folder.path().to_path_buf();
        if options.chunk_capacity == 0 || options.chunk_capacity > CHUNK_CAPACITY {
            return Err(Error::InvalidArgument {
                path: dir,
                reason: format!(
                    "chunk capacity {} is outside 1..={CHUNK_CAPACITY}",
                    options.chunk_capacity
                ),
            });
        }
        let create = options.create && !options.read_only;
        let meta_path = dir.join(crate::files::meta_file::META_FILE_NAME);
        if !create && !meta_path.exists() {
            return Err(Error::NotFound { path: dir });
        }
        let hook = &options.io_hook;
        if create && options.checksums != Checksums::Off && !meta_path.exists() {
            // The sidecar comes first: a handle that opens the new store
            // finds it and keeps it current from the first append on.
            fs::create_dir_all(&dir).map_err(io_error(&dir))?;
            drop(ChecksumFile::create(
                &dir,
                hook.clone(),
                &[],
                &Header::empty(),
            )?);
        }
        let changes = Changes::new();
        let meta = MetaFile::open(&dir, create, options.read_only, hook.clone())?;
        // A store created just now (its folder did not exist before).
        folder.identify()?;
        // Shared locks need no write access (an OFD read lock or a flock on
        // a descriptor opened for reading), so a read-only handle holds the
        // use lock as any other and a delete waits for it to close.
        let lock = StoreLock::share(meta.file(), meta.path(), &dir)?;
        let read_only = !meta.writable() || options.read_only;
        let checksums = ChecksumFile::open(&dir, read_only, hook.clone())?;
        let read_only = if options.read_only {
            Some("it was asked for (read_only)")
        } else if !meta.writable() {
            Some("this process may not write meta.zr")
        } else if checksums.as_ref().is_some_and(|c| !c.writable()) {
            Some("this process may not write checksums.zr")
        } else {
            None
        };
        // Finishing an interrupted delete rewrites the table: only when
        // nobody else has the store open (else they finish it). The
        // exclusive lock is tried only when there is a journal: held even
        // briefly, it makes other handles' opens fail as busy.
        if crate::files::delete_journal::journal_path(&dir).exists() {
            if let Some(why) = read_only {
                // The table may be half rewritten (a record in two slots,
                // another in none): reading it would give wrong records.
                return Err(Error::ReadOnly {
                    path: dir,
                    reason: format!(
                        "{why}, and a delete was interrupted (delete.journal): open \
                         the store once with write access to finish it before reading"
                    ),
                });
            }
            if let Ok(_sole) = lock.exclusive() {
                crate::files::delete_journal::recover(&dir, &meta, checksums.as_ref())?;
            }
        }
        let mut watches: Vec<FileWatch> = changes.watch(meta.file()).into_iter().collect();
        watches.extend(checksums.as_ref().and_then(|c| changes.watch(c.file())));
        let mut store = Store {
            chunks: ChunkFiles::new(&folder, read_only.is_some(), hook.clone(), changes.clone()),
            verify_reads: options.checksums != Checksums::Off,
            verified: VerifiedRecords::default(),
            dictionary: OnceLock::new(),
            checksums,
            meta,
            writer: Mutex::new(()),
            chunk_capacity: options.chunk_capacity,
            // The tail offset is a u32, so a record may end at 2^32 - 1 at most.
            chunk_limit: options.chunk_capacity.min(u32::MAX as u64),
            cold: ColdReads::default(),
            changes,
            watches,
            lock,
            read_only,
            owner: std::process::id(),
            folder,
        };
        let covered = |c: &ChecksumFile| c.covers(&store.meta.header());
        if options.checksums == Checksums::On && !store.checksums.as_ref().is_some_and(covered) {
            store.cover_records(options.io_hook.clone())?;
        }
        // Its files were opened by path: all of them in the folder that was
        // identified, unless another was renamed into its place meanwhile.
        store.folder.check()?;
        Ok(store)
    }

    /// Makes `checksums.zr` cover every record: creates it for a store that
    /// has none, or fills in the slots of records that a program keeping no
    /// checksums wrote or moved. Records whose slots describe them are
    /// checked against them; the others are checksummed as they are (and
    /// thereby trusted), once their entries are shown to be sound: each
    /// decodes and lies below the frontier, past which appends write.
    fn cover_records(&mut self, hook: crate::files::io_hook::Hook) -> Result<()> {
        self.may_write("cover the records with checksums (checksums.zr)")?;
        let _sole = self.lock.exclusive()?;
        let header = self.meta.header();
        let frontier = physical_address(header.tail_chunk, header.tail_offset as u64);
        let mut scratch = Vec::new();
        let mut fresh = Vec::new();
        for i in 0..header.length as usize {
            let loc = self.meta.entry(i);
            scratch.resize((loc.logic_length as usize).min(header.record_limit()), 0);
            if physical_address(loc.chunk_id, loc.end()) > frontier {
                let reason = format!(
                    "it ends past the frontier (chunk {} offset {}), where the next append \
                     would overwrite it: the entry or the header is damaged",
                    header.tail_chunk, header.tail_offset
                );
                return Err(self.corrupt(i, loc, &reason));
            }
            let checked =
                self.decode_checked(i as u64, loc, &mut scratch, true, RawCopy::Cached)?;
            if checked == Checked::No {
                fresh.push((i, Checksum::new(crc32c::crc32c(&scratch), &loc)));
            }
        }
        match &self.checksums {
            None => {
                let slots: Vec<Checksum> = fresh.into_iter().map(|(_, slot)| slot).collect();
                let created = ChecksumFile::create(self.path(), hook, &slots, &header)?;
                self.watches.extend(self.changes.watch(created.file()));
                self.checksums = Some(created);
            }
            Some(checksums) => {
                for (i, slot) in fresh {
                    checksums.set(i, slot)?;
                }
                checksums.sync()?;
                checksums.set_covered(Some(&header))?;
                checksums.flush_header()?;
            }
        }
        Ok(())
    }

    /// Records in `checksums.zr` that its slots describe the table as it is
    /// now (docs/FORMAT.md, "Checksums"); flushed when `durable`. Callers
    /// have written every slot the table's entries need.
    pub(crate) fn mark_covered(&self, durable: bool) -> Result<()> {
        let Some(checksums) = &self.checksums else {
            return Ok(());
        };
        checksums.set_covered(Some(&self.meta.header()))?;
        if durable {
            checksums.flush_header()?;
        }
        Ok(())
    }

    /// The store's zstd dictionary, if it has one: loaded the first time it
    /// is asked for, since another handle may create it after this one
    /// opened (it never changes once there).
    pub(crate) fn dictionary(&self) -> Result<Option<&Dictionary>> {
        if let Some(dict) = self.dictionary.get() {
            return Ok(Some(dict));
        }
        let loaded = crate::files::dictionary_file::load(self.path());
        let loaded = self.folder.checked(loaded)?;
        Ok(loaded.map(|d| self.dictionary.get_or_init(|| d)))
    }

    /// The error for record `index`, stored at `loc`, that is damaged.
    pub(crate) fn corrupt(&self, index: usize, loc: RecordLoc, reason: &str) -> Error {
        Error::CorruptRecord {
            path: self.path().to_path_buf(),
            index: index as u64,
            chunk: loc.chunk_id,
            offset: loc.offset,
            reason: reason.into(),
        }
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        self.folder.path()
    }

    /// Fails with [`Error::FolderReplaced`] when the store's folder is no
    /// longer at its path: before a call that writes or deletes files in it
    /// by their paths (a delete, a compaction), or that reopens it by its
    /// path to change records this handle chose.
    pub fn check_folder(&self) -> Result<()> {
        self.folder.check()
    }

    /// Whether this handle only reads: opened with
    /// [`StoreOptions::read_only`], or on files this process may not write.
    pub fn read_only(&self) -> bool {
        self.read_only.is_some()
    }

    /// Refuses `what`, a write, in a forked child of the process that
    /// opened the store, and on a read-only handle, naming the store and
    /// why. Every write calls this before it touches a lock, a mutex or a
    /// file.
    pub(crate) fn may_write(&self, what: &str) -> Result<()> {
        self.same_process(what)?;
        match self.read_only {
            None => Ok(()),
            Some(why) => Err(Error::ReadOnly {
                path: self.path().to_path_buf(),
                reason: format!("cannot {what}: {why}"),
            }),
        }
    }

    /// Refuses `what` in a process other than the one that opened the
    /// store (a forked child): [`Error::ForkedHandle`]. One `getpid` call.
    pub fn same_process(&self, what: &str) -> Result<()> {
        let current = std::process::id();
        if current == self.owner {
            return Ok(());
        }
        Err(Error::ForkedHandle {
            path: self.path().to_path_buf(),
            owner: self.owner,
            current,
            what: what.to_string(),
        })
    }

    /// The writer mutex, held; `None` in a forked child, which may have
    /// inherited it locked by a thread it does not have, and needs it not:
    /// the child never appends through this handle, and the parent's
    /// appends are another process's, which the mutex never guarded.
    pub(crate) fn writer_lock(&self) -> Option<MutexGuard<'_, ()>> {
        self.same_process("take the writer mutex").ok()?;
        Some(self.writer.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Number of live records; they are exactly the indices `0..len()`.
    pub fn len(&self) -> usize {
        self.meta.length() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The store's format version as its header says now: 1, or 2 once it
    /// holds a record over [`crate::V1_MAX_RECORD_LEN`] (docs/FORMAT.md,
    /// "Versions").
    pub fn version(&self) -> u16 {
        self.meta.header().version
    }

    /// Copies of the table entries of `idxs`, checked against `len`, for a
    /// read. A read checks and then uses these copies only, never the table
    /// again: a process that takes no lock (loaderx 0.5.0) may rewrite the
    /// table meanwhile, and an entry read twice could then pass the checks
    /// with one length and be decoded with another.
    pub(crate) fn out_of_range(&self, index: u64, len: u32) -> Error {
        Error::IndexOutOfRange {
            path: self.path().to_path_buf(),
            index,
            len,
        }
    }

    pub(crate) fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            path: self.path().to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Logical (decoded) sizes of the records `idxs`.
    pub fn lengths(&self, idxs: &[u64]) -> Result<Vec<u32>> {
        crate::ops::gather::lengths(&self.sources(idxs))
    }

    /// Flushes every chunk file and `meta.zr` to stable storage.
    pub fn sync(&self) -> Result<()> {
        let _writer = self.writer_lock();
        for chunk in self.chunks.opened() {
            chunk.sync_data()?;
        }
        if let Some(checksums) = &self.checksums {
            checksums.sync()?;
        }
        self.meta.sync()
    }
}
