//! Chunk files `0.zr`, `1.zr`, …: densely packed record bytes (docs/FORMAT.md,
//! "Chunk files").
//!
//! Writes go through `pwrite`; reads come from a shared read-only mapping of
//! the chunk's full capacity, so a growing file never needs remapping. A read
//! is only ever served below the file size we have observed, because touching
//! a mapped page past the end of the file raises SIGBUS.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

#[cfg(unix)]
use memmap2::Advice;
use memmap2::{Mmap, MmapOptions};

use crate::error::{io_error, Result};
use crate::files::change_watch::{Changes, FileWatch};
use crate::files::io_hook::{announce, Hook, IoEvent};
use crate::files::os::{may_not_write, sync_dir, write_all_at};
use crate::format::limits::{CHUNK_CAPACITY, MAX_CHUNKS};

/// How much of a record `prefetch` asks for: decoders read a record's start
/// one dependent step after another, so its first cache lines are what a
/// miss stalls on; past them the hardware prefetcher follows the stream.
const PREFETCH_LIMIT: usize = 1024;

/// Asks the CPU to start loading the first bytes of `stored` (a record's
/// stored bytes, read from a mapping) into its cache. A hint only: it never
/// faults. On x86-64 only; elsewhere it does nothing.
pub fn prefetch(stored: &[u8]) {
    let head = &stored[..stored.len().min(PREFETCH_LIMIT)];
    #[cfg(target_arch = "x86_64")]
    for line in head.chunks(64) {
        // SAFETY: a prefetch reads nothing architecturally and cannot
        // fault; the address lies inside a live slice anyway.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = head;
}

/// Ending of every chunk file's name, after the chunk number in decimal
/// (docs/FORMAT.md, "Chunk files").
const CHUNK_FILE_SUFFIX: &str = ".zr";

/// The file name of chunk `id` inside a store directory.
pub fn chunk_file_name(id: u16) -> String {
    format!("{id}{CHUNK_FILE_SUFFIX}")
}

/// The chunk a file name in a store directory names, if it names one.
pub(crate) fn chunk_id_of(file_name: &str) -> Option<u16> {
    file_name.strip_suffix(CHUNK_FILE_SUFFIX)?.parse().ok()
}

pub(crate) struct ChunkFile {
    id: u16,
    hook: Hook,
    path: PathBuf,
    file: File,
    map: Mmap,
    /// Bytes known to exist in the file: the size last seen by an `fstat`.
    size: AtomicU64,
    /// Tells the store when the file changes (`files/change_watch.rs`).
    _watch: Option<FileWatch>,
}

impl ChunkFile {
    /// Opens chunk `id` at `path`, creating it when `create` is set; for
    /// reading only when `read_only` is set, or when the file may not be
    /// written and is not to be created (a write then fails as I/O).
    fn open(
        id: u16,
        path: PathBuf,
        create: bool,
        read_only: bool,
        hook: Hook,
        changes: &Arc<Changes>,
    ) -> Result<ChunkFile> {
        let opened = if read_only {
            File::open(&path)
        } else {
            let writing = OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .open(&path);
            match writing {
                Err(e) if !create && may_not_write(&e) => File::open(&path),
                opened => opened,
            }
        };
        let file = opened.map_err(io_error(&path))?;
        // Watched before its size is read: a truncation after it is an event.
        let watch = changes.watch(&file);
        let size = file.metadata().map_err(io_error(&path))?.len();
        // SAFETY: the mapping is read-only and shared; bytes of committed
        // records are never rewritten while readers may see them (only
        // `compact`, which holds `&mut Store`, moves records), and reads stay
        // below the observed file size (see `read`).
        let map = unsafe {
            MmapOptions::new()
                .len(CHUNK_CAPACITY as usize)
                .map(&file)
                .map_err(io_error(&path))?
        };
        // Gathers read scattered records: the default read-around would pull
        // 128 KiB from disk for every cold record. Advice only tunes paging
        // (and is a Unix call: Windows has no per-mapping equivalent).
        #[cfg(unix)]
        map.advise(Advice::Random).map_err(io_error(&path))?;
        Ok(ChunkFile {
            id,
            hook,
            path,
            file,
            map,
            size: AtomicU64::new(size),
            _watch: watch,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored bytes `offset..offset + len`, or `None` when the file is
    /// shorter than that (a corrupt table entry or a truncated file).
    pub fn read(&self, offset: u32, len: u32) -> Option<&[u8]> {
        self.read_known(offset, len).or_else(|| {
            // Another process may have grown the file since we looked.
            self.refresh_size().ok()?;
            self.read_known(offset, len)
        })
    }

    /// [`ChunkFile::read`] within the size last looked at, without looking
    /// again: `None` for bytes past it.
    pub fn read_known(&self, offset: u32, len: u32) -> Option<&[u8]> {
        let end = offset as u64 + len as u64;
        (end <= self.known_size()).then(|| &self.map[offset as usize..end as usize])
    }

    /// Asks the kernel to start reading `offset..offset + len` into the page
    /// cache, without waiting for it. A hint only: skipped for bytes not
    /// known to be in the file, and its failure changes nothing. Nothing
    /// happens outside Unix (where `exec/cold_reads.rs` never asks anyway).
    pub fn will_need(&self, offset: u32, len: u32) {
        #[cfg(unix)]
        if len != 0 && offset as u64 + len as u64 <= self.size.load(Ordering::Relaxed) {
            let _ = self
                .map
                .advise_range(Advice::WillNeed, offset as usize, len as usize);
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }

    fn announce(&self, event: IoEvent<'_>) -> Result<()> {
        announce(&self.hook, &self.path, event)
    }

    pub fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.announce(IoEvent::ChunkWrite {
            chunk: self.id,
            offset,
            bytes,
        })?;
        write_all_at(&self.file, bytes, offset).map_err(io_error(&self.path))?;
        self.size
            .fetch_max(offset + bytes.len() as u64, Ordering::AcqRel);
        Ok(())
    }

    /// The file's size when it was last looked at: reads stay below it.
    pub fn known_size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Looks at the file's size now (one `fstat`) and keeps it as the known
    /// size, smaller than before if another program truncated the file.
    pub fn refresh_size(&self) -> Result<u64> {
        let size = self.file.metadata().map_err(io_error(&self.path))?.len();
        self.size.store(size, Ordering::Release);
        Ok(size)
    }

    /// Shrinks the file to `len` bytes. Only `compact` calls this, holding
    /// exclusive access, after no table entry points past `len`.
    pub fn truncate(&self, len: u64) -> Result<()> {
        self.announce(IoEvent::ChunkTruncate {
            chunk: self.id,
            len,
        })?;
        self.file.set_len(len).map_err(io_error(&self.path))?;
        self.size.store(len, Ordering::Release);
        Ok(())
    }

    /// Makes the written data durable (fdatasync).
    pub fn sync_data(&self) -> Result<()> {
        self.announce(IoEvent::ChunkSync { chunk: self.id })?;
        self.file.sync_data().map_err(io_error(&self.path))
    }
}

/// Chunk slots come in groups of this many, each allocated on first use: a
/// store uses few of its [`MAX_CHUNKS`] chunks, and a slot for every one
/// took 330 KiB per open store (a collection keeps many open).
const SLOT_GROUP: usize = 64;
const _: () = assert!(MAX_CHUNKS % SLOT_GROUP == 0);

/// The slots of [`SLOT_GROUP`] consecutive chunks.
type SlotGroup = Box<[OnceLock<ChunkFile>]>;

/// The chunk files of one store, opened lazily and kept open.
pub(crate) struct ChunkFiles {
    dir: PathBuf,
    hook: Hook,
    /// Chunk `id`'s slot is `slots[id / SLOT_GROUP][id % SLOT_GROUP]`.
    slots: Box<[OnceLock<SlotGroup>]>,
    opening: Mutex<()>,
    /// Open every chunk for reading only (a read-only store).
    read_only: bool,
    /// The store's change count, which each chunk's watch raises.
    changes: Arc<Changes>,
}

impl ChunkFiles {
    pub fn new(dir: &Path, read_only: bool, hook: Hook, changes: Arc<Changes>) -> ChunkFiles {
        ChunkFiles {
            dir: dir.to_path_buf(),
            read_only,
            hook,
            changes,
            slots: (0..MAX_CHUNKS / SLOT_GROUP)
                .map(|_| OnceLock::new())
                .collect(),
            opening: Mutex::new(()),
        }
    }

    pub fn path_of(&self, id: u16) -> PathBuf {
        self.dir.join(chunk_file_name(id))
    }

    /// Chunk `id`, opening the existing file on first use.
    pub fn get(&self, id: u16) -> Result<&ChunkFile> {
        self.get_or_open(id, false)
    }

    /// Chunk `id`, creating the file when it does not exist yet.
    pub fn get_or_create(&self, id: u16) -> Result<&ChunkFile> {
        self.get_or_open(id, true)
    }

    /// Chunk `id`'s slot, its group allocated now if need be; `None` past
    /// the limit.
    fn slot(&self, id: u16) -> Option<&OnceLock<ChunkFile>> {
        let group = self.slots.get(id as usize / SLOT_GROUP)?;
        let group = group.get_or_init(|| (0..SLOT_GROUP).map(|_| OnceLock::new()).collect());
        Some(&group[id as usize % SLOT_GROUP])
    }

    fn get_or_open(&self, id: u16, create: bool) -> Result<&ChunkFile> {
        let Some(slot) = self.slot(id) else {
            // Only a damaged table entry names a chunk past the limit.
            return Err(io_error(self.path_of(id))(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("chunk {id} is past the {MAX_CHUNKS} chunk limit"),
            )));
        };
        if let Some(chunk) = slot.get() {
            return Ok(chunk);
        }
        if !create {
            // A read opens without the mutex: two threads opening the same
            // file at once is harmless (the first to finish is kept), and a
            // forked child, which may have inherited the mutex locked by a
            // thread it does not have, reads on.
            let chunk = ChunkFile::open(
                id,
                self.path_of(id),
                false,
                self.read_only,
                self.hook.clone(),
                &self.changes,
            )?;
            return Ok(slot.get_or_init(|| chunk));
        }
        let _guard = self.opening.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(chunk) = slot.get() {
            return Ok(chunk);
        }
        let path = self.path_of(id);
        let is_new = create && !path.exists();
        if is_new {
            announce(&self.hook, &path, IoEvent::ChunkCreate { chunk: id })?;
        }
        let chunk = ChunkFile::open(
            id,
            path,
            create,
            self.read_only,
            self.hook.clone(),
            &self.changes,
        )?;
        if is_new {
            // A new file's directory entry is durable only once the directory
            // is synced; the records it will hold depend on it.
            announce(&self.hook, &self.dir, IoEvent::DirSync)?;
            sync_dir(&self.dir)?;
        }
        Ok(slot.get_or_init(|| chunk))
    }

    /// Chunk `id` if it is open, without opening it.
    pub fn get_opened(&self, id: u16) -> Option<&ChunkFile> {
        self.slots.get(id as usize / SLOT_GROUP)?.get()?[id as usize % SLOT_GROUP].get()
    }

    /// Every chunk opened so far.
    pub fn opened(&self) -> impl Iterator<Item = &ChunkFile> {
        self.slots
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|group| group.iter().filter_map(OnceLock::get))
    }

    /// Closes chunk `id` and deletes its file (if any).
    pub fn remove(&mut self, id: u16) -> Result<()> {
        let path = self.path_of(id);
        announce(&self.hook, &path, IoEvent::ChunkRemove { chunk: id })?;
        if let Some(group) = self.slots[id as usize / SLOT_GROUP].get_mut() {
            group[id as usize % SLOT_GROUP].take();
        }
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error(path)(e)),
            _ => Ok(()),
        }
    }
}
