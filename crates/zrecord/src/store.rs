//! The store: opening a directory, and the small read-only queries.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::chunk_file::ChunkFiles;
use crate::error::{Error, Result};
use crate::io_hook::IoHook;
use crate::limits::CHUNK_CAPACITY;
use crate::meta_file::MetaFile;
use crate::record_table::RecordLoc;

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
    /// Observer of every file operation, for crash and fault testing; see
    /// [`IoHook`].
    pub io_hook: Option<Arc<dyn IoHook>>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            create: true,
            chunk_capacity: CHUNK_CAPACITY,
            io_hook: None,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("create", &self.create)
            .field("chunk_capacity", &self.chunk_capacity)
            .field("io_hook", &self.io_hook.is_some())
            .finish()
    }
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
    /// Serialises appends from the moment they pick positions until their
    /// length is published.
    pub(crate) writer: Mutex<()>,
    /// Capacity new records are packed into, from [`StoreOptions`].
    pub(crate) chunk_capacity: u64,
    /// Largest end offset a record may have within a chunk.
    pub(crate) chunk_limit: u64,
    dir: PathBuf,
}

impl Store {
    /// Opens the store in `dir`, creating it when missing.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(dir, &StoreOptions::default())
    }

    /// Opens the store in `dir` with explicit options.
    pub fn open_with(dir: impl AsRef<Path>, options: &StoreOptions) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        if options.chunk_capacity == 0 || options.chunk_capacity > CHUNK_CAPACITY {
            return Err(Error::InvalidArgument {
                path: dir,
                reason: format!(
                    "chunk capacity {} is outside 1..={CHUNK_CAPACITY}",
                    options.chunk_capacity
                ),
            });
        }
        if !options.create && !dir.join(crate::meta_file::META_FILE_NAME).exists() {
            return Err(Error::NotAStore {
                reason: "no meta.zr in the directory".into(),
                path: dir,
            });
        }
        let meta = MetaFile::open(&dir, options.create, options.io_hook.clone())?;
        crate::lock::share(meta.file(), meta.path())?;
        {
            // Finishing an interrupted delete rewrites the table: only when
            // nobody else has the store open (else they finish it).
            if let Ok(_sole) = crate::lock::exclusive(meta.file(), meta.path()) {
                crate::delete_journal::recover(&dir, &meta)?;
            }
        }
        Ok(Store {
            chunks: ChunkFiles::new(&dir, options.io_hook.clone()),
            meta,
            writer: Mutex::new(()),
            // The tail offset is a u32, so a record may end at 2^32 - 1 at most.
            chunk_capacity: options.chunk_capacity,
            chunk_limit: options.chunk_capacity.min(u32::MAX as u64),
            dir,
        })
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Number of live records; they are exactly the indices `0..len()`.
    pub fn len(&self) -> usize {
        self.meta.length() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Table entries of `idxs`, checked against `len`, for a read.
    pub(crate) fn locate<'a>(
        &'a self,
        idxs: &'a [u64],
        len: u32,
    ) -> Result<impl Iterator<Item = RecordLoc> + 'a> {
        if let Some(&bad) = idxs.iter().find(|&&i| i >= len as u64) {
            return Err(self.out_of_range(bad, len));
        }
        Ok(idxs.iter().map(|&i| self.meta.entry(i as usize)))
    }

    pub(crate) fn out_of_range(&self, index: u64, len: u32) -> Error {
        Error::IndexOutOfRange {
            path: self.dir.clone(),
            index,
            len,
        }
    }

    pub(crate) fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            path: self.dir.clone(),
            reason: reason.into(),
        }
    }

    /// Logical (decoded) sizes of the records `idxs`.
    pub fn lengths(&self, idxs: &[u64]) -> Result<Vec<u32>> {
        let len = self.meta.length();
        Ok(self
            .locate(idxs, len)?
            .map(|loc| loc.logic_length)
            .collect())
    }

    /// Flushes every chunk file and `meta.zr` to stable storage.
    pub fn sync(&self) -> Result<()> {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        for chunk in self.chunks.opened() {
            chunk.sync_data()?;
        }
        self.meta.sync()
    }
}
