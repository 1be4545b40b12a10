//! Chunk files `0.zr`, `1.zr`, …: densely packed record bytes (docs/FORMAT.md,
//! "Chunk files").
//!
//! Writes go through `pwrite`; reads come from shared read-only mappings of
//! the file. A read is only ever served below the file size we have
//! observed, because touching a mapped page past the end of the file raises
//! SIGBUS.
//!
//! A chunk is mapped in windows as long as the file, rounded up to a power of
//! two: the size seen at open, and a window twice as long (or more) each
//! time the file grows past the largest. Reads go through the largest;
//! smaller ones stay mapped until the chunk closes, as slices read from
//! them may still be in use. Mapping every chunk at its full capacity (4
//! GiB) would never need a second window, but spreads a collection's shards
//! 4 GiB apart in the address space, and a shuffled gather over them then
//! pays for the page walks: over 100 shards it ran at 0.69× one store, with
//! windows at 0.73× (bench/README.md, "Sharded collections").

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

#[cfg(unix)]
use memmap2::Advice;
use memmap2::{Mmap, MmapOptions};

use crate::error::{io_error, Result};
use crate::files::change_watch::{Changes, FileWatch};
use crate::files::folder::Folder;
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

/// The shortest window a chunk is mapped in; window class `k` is this many
/// bytes times `2^k`, up to [`CHUNK_CAPACITY`].
const MIN_WINDOW: u64 = 64 << 10;

/// Window classes, from [`MIN_WINDOW`] to [`CHUNK_CAPACITY`].
const WINDOW_CLASSES: usize = (CHUNK_CAPACITY / MIN_WINDOW).ilog2() as usize + 1;

/// The class of the shortest window that holds `size` bytes (those past
/// [`CHUNK_CAPACITY`] are never read: no record ends there).
fn window_class(size: u64) -> usize {
    let windows = size.min(CHUNK_CAPACITY).div_ceil(MIN_WINDOW).max(1);
    windows.next_power_of_two().ilog2() as usize
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
    /// The windows made so far, by class: see the module's documentation.
    windows: [OnceLock<Mmap>; WINDOW_CLASSES],
    /// The class of the largest window, made before it is named here.
    largest: AtomicUsize,
    /// Bytes known to exist in the file: the size last seen by an `fstat`,
    /// never past the largest window that holds it (raised after it).
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
        let chunk = ChunkFile {
            id,
            hook,
            path,
            file,
            windows: std::array::from_fn(|_| OnceLock::new()),
            largest: AtomicUsize::new(0),
            size: AtomicU64::new(0),
            _watch: watch,
        };
        chunk.map_window(window_class(size))?;
        chunk.size.store(size, Ordering::Release);
        Ok(chunk)
    }

    /// Makes the window of class `class` unless there is one that long or
    /// longer, and reads go through it from now on.
    fn map_window(&self, class: usize) -> Result<()> {
        let largest = self.largest.load(Ordering::Acquire);
        if largest >= class && self.windows[largest].get().is_some() {
            return Ok(());
        }
        // SAFETY: the mapping is read-only and shared; bytes of committed
        // records are never rewritten while readers may see them (only
        // `compact`, which holds `&mut Store`, moves records), and reads stay
        // below the observed file size (see `read`).
        let map = unsafe {
            MmapOptions::new()
                .len((MIN_WINDOW << class) as usize)
                .map(&self.file)
                .map_err(io_error(&self.path))?
        };
        // Gathers read scattered records: the default read-around would pull
        // 128 KiB from disk for every cold record. Advice only tunes paging
        // (and is a Unix call: Windows has no per-mapping equivalent).
        #[cfg(unix)]
        map.advise(Advice::Random).map_err(io_error(&self.path))?;
        // Made without a lock (as chunks are opened: a forked child may
        // have inherited one locked); of two threads making the same
        // window, the first to finish is kept.
        self.windows[class].get_or_init(|| map);
        self.largest.fetch_max(class, Ordering::AcqRel);
        Ok(())
    }

    /// The largest window.
    fn window(&self) -> &Mmap {
        let class = self.largest.load(Ordering::Acquire);
        self.windows[class]
            .get()
            .expect("a window is made before its class is the largest")
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored bytes `offset..offset + len`, or `None` when the file is
    /// shorter than that (a corrupt table entry or a truncated file). An
    /// error when the file cannot be looked at or mapped further (out of
    /// memory or mappings): that says nothing about the store.
    pub fn read(&self, offset: u32, len: u32) -> Result<Option<&[u8]>> {
        if let Some(bytes) = self.read_known(offset, len) {
            return Ok(Some(bytes));
        }
        // Another process may have grown the file since we looked.
        self.refresh_size()?;
        Ok(self.read_known(offset, len))
    }

    /// [`ChunkFile::read`] within the size last looked at, without looking
    /// again: `None` for bytes past it.
    pub fn read_known(&self, offset: u32, len: u32) -> Option<&[u8]> {
        let end = offset as u64 + len as u64;
        if end > self.known_size() {
            return None;
        }
        // The known size is raised only once a window holds it; bytes past
        // the capacity are in none (`None`: no record ends there).
        self.window().get(offset as usize..end as usize)
    }

    /// The bytes known to be in the file (`None` past the capacity, which
    /// no window holds): [`ChunkFile::read_known`] of any range is this
    /// slice's range, taken once.
    pub fn known_bytes(&self) -> Option<&[u8]> {
        self.window().get(..self.known_size() as usize)
    }

    /// Asks the kernel to start reading `offset..offset + len` into the page
    /// cache, without waiting for it. A hint only: skipped for bytes not
    /// known to be in the file, and its failure changes nothing. Nothing
    /// happens outside Unix (where `exec/cold_reads.rs` never asks anyway).
    pub fn will_need(&self, offset: u32, len: u32) {
        #[cfg(unix)]
        if len != 0 && offset as u64 + len as u64 <= self.size.load(Ordering::Relaxed) {
            let _ = self
                .window()
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
        let end = offset + bytes.len() as u64;
        self.map_window(window_class(end))?;
        self.size.fetch_max(end, Ordering::AcqRel);
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
        self.map_window(window_class(size))?;
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
    /// The store's folder; each chunk file opened in it is checked to be
    /// its own (`files/folder.rs`).
    folder: Folder,
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
    pub fn new(folder: &Folder, read_only: bool, hook: Hook, changes: Arc<Changes>) -> ChunkFiles {
        ChunkFiles {
            folder: folder.clone(),
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
        self.folder.path().join(chunk_file_name(id))
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
            let chunk = self.folder.checked(ChunkFile::open(
                id,
                self.path_of(id),
                false,
                self.read_only,
                self.hook.clone(),
                &self.changes,
            ))?;
            return Ok(slot.get_or_init(|| chunk));
        }
        let _guard = self.opening.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(chunk) = slot.get() {
            return Ok(chunk);
        }
        // Not made in another folder renamed into this one's place.
        self.folder.check()?;
        let path = self.path_of(id);
        let is_new = create && !path.exists();
        if is_new {
            announce(&self.hook, &path, IoEvent::ChunkCreate { chunk: id })?;
        }
        let chunk = self.folder.checked(ChunkFile::open(
            id,
            path,
            create,
            self.read_only,
            self.hook.clone(),
            &self.changes,
        ))?;
        if is_new {
            // A new file's directory entry is durable only once the directory
            // is synced; the records it will hold depend on it.
            announce(&self.hook, self.folder.path(), IoEvent::DirSync)?;
            sync_dir(self.folder.path())?;
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
        // Not another folder's file, renamed into this one's place.
        self.folder.check()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_class_is_the_shortest_window_that_holds_the_size() {
        assert_eq!(window_class(0), 0);
        assert_eq!(window_class(MIN_WINDOW), 0);
        assert_eq!(window_class(MIN_WINDOW + 1), 1);
        assert_eq!(window_class(4 * MIN_WINDOW), 2);
        assert_eq!(window_class(4 * MIN_WINDOW + 1), 3);
        assert_eq!(window_class(CHUNK_CAPACITY), WINDOW_CLASSES - 1);
        assert_eq!(window_class(u64::MAX), WINDOW_CLASSES - 1);
        assert_eq!(MIN_WINDOW << (WINDOW_CLASSES - 1), CHUNK_CAPACITY);
    }

    fn open(path: &Path, create: bool) -> ChunkFile {
        ChunkFile::open(
            0,
            path.to_path_buf(),
            create,
            !create,
            None,
            &Changes::new(),
        )
        .unwrap()
    }

    /// Bytes `at..at + len` of a pattern that differs from one window to
    /// the next.
    fn pattern(at: u64, len: usize) -> Vec<u8> {
        (at..at + len as u64).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_growing_chunk_is_read_through_longer_windows_and_earlier_reads_stay_valid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(chunk_file_name(0));
        let writer = open(&path, true);
        let first = pattern(0, 1000);
        writer.write_at(0, &first).unwrap();
        // Opened while the file is small: one window of the least class.
        let reader = open(&path, false);
        assert_eq!(reader.largest.load(Ordering::Relaxed), 0);
        let early = reader.read(0, 1000).unwrap().unwrap();
        // Grown past several windows by another handle, and by this one.
        let far = 5 * MIN_WINDOW + 17;
        writer.write_at(far, &pattern(far, 3000)).unwrap();
        assert_eq!(
            writer.largest.load(Ordering::Relaxed),
            window_class(far + 3000)
        );
        assert_eq!(
            reader.read_known(far as u32, 3000),
            None,
            "past the known size"
        );
        assert_eq!(
            reader.read(far as u32, 3000).unwrap().unwrap(),
            pattern(far, 3000)
        );
        assert_eq!(reader.largest.load(Ordering::Relaxed), 3);
        // The slice read through the first window still reads its bytes,
        // and the same bytes come through the new one.
        assert_eq!(early, first);
        assert_eq!(reader.read(0, 1000).unwrap().unwrap(), first);
        assert_eq!(writer.read(0, 1000).unwrap().unwrap(), first);
    }

    #[test]
    fn bytes_past_the_capacity_are_in_no_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(chunk_file_name(0));
        let chunk = open(&path, true);
        // A sparse file longer than a chunk may be (a damaged store).
        chunk.file.set_len(CHUNK_CAPACITY + 8192).unwrap();
        chunk.refresh_size().unwrap();
        assert_eq!(chunk.largest.load(Ordering::Relaxed), WINDOW_CLASSES - 1);
        assert_eq!(
            chunk
                .read((CHUNK_CAPACITY - 10) as u32, 10)
                .unwrap()
                .unwrap(),
            [0; 10]
        );
        assert_eq!(chunk.read(u32::MAX, 4096).unwrap(), None);
    }
}
