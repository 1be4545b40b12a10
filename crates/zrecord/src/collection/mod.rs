//! Sharded collections (docs/FORMAT.md, "Collections"): many stores, the
//! shards, in one folder, read as one index space.
//!
//! The published shards and their order are the manifest's
//! (`manifest.rs`). The indirection from a global index to a shard and an
//! index within it is built at open from each shard's own header `length`,
//! so there is no second copy of a length to go stale; a shard's store is
//! opened the first time a read needs it, so opening a collection of many
//! shards reads one header each. A writer appends to shards of its own,
//! rolling over to a new one at the limits it is given, and publishes them
//! all with one new manifest generation.

pub(crate) mod manifest;
pub(crate) mod readers_lock;
mod shard_index;
mod shard_views;

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use crate::error::{io_error, Error, Result};
use crate::exec::cold_reads::ColdReads;
use crate::files::change_watch::{poll, Polled};
use crate::files::folder::Folder;
use crate::files::meta_file::{validate_header, META_FILE_NAME};
use crate::files::os::{open_files_limit, read_exact_at, sync_dir};
use crate::format::header::{Header, HEADER_LEN};
use crate::format::limits::MAX_RECORDS;
use crate::ops::append::AppendOptions;
use crate::ops::gather::{
    check_disjoint, check_records, gather_records, lengths, slot_offsets, Sources,
};
use crate::store::{Store, StoreOptions};
use readers_lock::ReadersLock;
use shard_index::ShardIndex;
use shard_views::{ShardViews, NO_VIEW};

/// The shard stores a collection holds open.
struct OpenShards {
    /// Shard `s`'s store, while it is open.
    stores: Vec<Option<Arc<Store>>>,
    /// The shards whose stores are open, oldest first.
    order: VecDeque<usize>,
    /// What batches read of the open stores, and when it was taken.
    views: ShardViews,
}

impl OpenShards {
    /// Lets the oldest open store go (a read still using it keeps it until
    /// it ends); the stores the process then holds, or None when none was
    /// open here.
    fn let_go_oldest(&mut self) -> Option<usize> {
        let oldest = self.order.pop_front()?;
        self.stores[oldest] = None;
        self.views.clear();
        Some(OPEN_SHARD_STORES.fetch_sub(1, Ordering::Relaxed) - 1)
    }

    /// Makes the views of the open stores anew, as of `polled`, those of
    /// shards shorter than `index` says left out (`shard_views.rs`).
    fn remake_views(&mut self, polled: &Polled, index: &ShardIndex) {
        let open =
            (self.stores.iter().enumerate()).filter_map(|(s, store)| Some((s, store.as_ref()?)));
        self.views.remake(polled, open, |s| index.shard_len(s));
    }
}

thread_local! {
    /// Per shard, its place among the shards of the read being resolved
    /// plus one (zero: not read by it), all zero between calls: as long as
    /// the most shards of a collection this thread read
    /// ([`Collection::resolve`]).
    static SHARD_PLACES: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Shard stores a collection may always keep open (each holds a few files
/// and mappings), when the budget has room for this many in every live
/// collection; else its share of the budget. Past them, it keeps more only
/// while the process's stores of all collections stay within
/// [`open_shard_budget`]; otherwise it lets its own oldest go (a read still
/// using one keeps it until it ends). Reopening costs a few hundred
/// microseconds, so a shuffled read over more shards than stay open runs at
/// a few thousand records a second.
const MIN_OPEN_SHARDS: usize = 256;

/// Most shard stores the process keeps open: each maps about three files,
/// and Linux allows a process 65,530 mappings by default.
const MAX_OPEN_SHARDS: usize = 8192;

/// Open files counted per open shard store (`meta.zr`, `checksums.zr`, a
/// chunk file or two), and open files left to the rest of the program: a
/// quarter of the limit, at most this many.
const FILES_PER_SHARD: u64 = 4;
const FILES_KEPT_FREE: u64 = 1024;

/// Most shard stores a read opens and holds at once when its shards are not
/// all open: past them, it reads a group of shards at a time. A batch of
/// 256 records may meet 256 shards, and two streams' batches held all at
/// once needed 1,536 open files, where a process is often allowed 1,024.
const GROUP_SHARDS: usize = 16;

/// Shard stores held open by all collections of the process.
static OPEN_SHARD_STORES: AtomicUsize = AtomicUsize::new(0);

/// The open stores of every collection of the process (those dropped since
/// are cleared out as collections open).
static LIVE: Mutex<Vec<Weak<RwLock<OpenShards>>>> = Mutex::new(Vec::new());

/// The collections open.
fn live_collections() -> usize {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.iter().filter(|open| open.strong_count() > 0).count()
}

/// Lets the older half of every collection's open stores go (one at least
/// of each that holds any); false when none holds any.
fn let_go_everywhere() -> bool {
    let live: Vec<_> = LIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut let_go = false;
    for open in live.iter().filter_map(Weak::upgrade) {
        let mut open = open.write().unwrap_or_else(|e| e.into_inner());
        for _ in 0..open.order.len().div_ceil(2) {
            let_go |= open.let_go_oldest().is_some();
        }
    }
    let_go
}

/// How many shard stores the process keeps open: as many as its open-file
/// limit leaves room for (`ulimit -n`), at most [`MAX_OPEN_SHARDS`], and
/// halved each time opening a file runs out of files all the same
/// ([`short_of_files`]). The limit is read, never raised: a library that
/// raised it would hand the program descriptors past 1024, which `select()`
/// cannot take.
fn open_shard_budget() -> usize {
    match BUDGET.load(Ordering::Relaxed) {
        0 => {
            let budget = match open_files_limit() {
                Some(limit) => {
                    let room = limit - (limit / 4).min(FILES_KEPT_FREE);
                    usize::try_from(room / FILES_PER_SHARD)
                        .unwrap_or(MAX_OPEN_SHARDS)
                        .clamp(1, MAX_OPEN_SHARDS)
                }
                // No limit to read (Windows).
                None => MIN_OPEN_SHARDS,
            };
            // A budget halved meanwhile stays halved.
            match BUDGET.compare_exchange(0, budget, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => budget,
                Err(halved) => halved,
            }
        }
        budget => budget,
    }
}

/// The budget, once read (0: not yet).
static BUDGET: AtomicUsize = AtomicUsize::new(0);

/// Whether a collection holding `own` open shard stores (at most `max_own`)
/// lets its oldest go, when the process holds `held` against `budget` and
/// `live` collections are open.
fn must_let_go(own: usize, max_own: usize, held: usize, budget: usize, live: usize) -> bool {
    let kept = MIN_OPEN_SHARDS.min(budget / live.max(1));
    own > max_own || (own > kept && held > budget)
}

/// Runs `f` (which opens files: a store, or the chunk files of the
/// records a read meets) again when it runs out of files, a few times: the
/// program holds more files than the budget counted on, so the budget is
/// halved and every collection lets half its stores go (those a read still
/// uses close when it ends). `f` must be one that may run again.
fn short_of_files<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if out_of_files(&e) && tries < SHORT_OF_FILES_TRIES => {
                tries += 1;
                let budget = open_shard_budget();
                BUDGET.store((budget / 2).max(1), Ordering::Relaxed);
                if !let_go_everywhere() {
                    return Err(e);
                }
            }
            done => return done,
        }
    }
}

/// How many times [`short_of_files`] halves the budget for one call.
const SHORT_OF_FILES_TRIES: u32 = 8;

/// Whether opening a file failed for want of file descriptors.
fn out_of_files(error: &Error) -> bool {
    #[cfg(unix)]
    if let Error::Io { source, .. } = error {
        return matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
    }
    let _ = error;
    false
}

/// A read's indices resolved to shards: the shards it reads, each once, in
/// order of first appearance; per index, which of them holds it (`which`;
/// `None` when the read has one shard) and its index there (`locals`).
/// Flat lists: a batch touches many shards, and a list per shard would cost
/// an allocation per shard.
struct Resolved {
    shards: Vec<usize>,
    which: Option<Vec<u32>>,
    locals: Vec<u64>,
}

impl Resolved {
    /// Which of the read's shards holds its `k`th index.
    fn which(&self, k: usize) -> u32 {
        self.which.as_ref().map_or(0, |which| which[k])
    }
}

/// A read's indices resolved to the views of their shards
/// ([`Collection::resolve_viewed`]): record `k` is record `locals[k]` of
/// the shard of view `which[k]`, or of view `first` when `which` is `None`
/// (a read of one shard, or of none).
#[derive(Default)]
struct ViewedIndices {
    first: u32,
    which: Option<Vec<u32>>,
    locals: Vec<u64>,
}

/// The published shards of a collection as of its opening, read as one
/// sequence of records: global index `g` is record `g - starts[s]` of the
/// shard `s` whose range holds it.
pub struct Collection {
    /// The collection's folder, by its real path: `files/folder.rs`.
    folder: Folder,
    generation: u64,
    /// The published shards' names.
    names: Vec<String>,
    /// Which shard holds which global indices.
    index: ShardIndex,
    options: StoreOptions,
    /// The open shard stores. A gather holds the read lock while it reads
    /// them: one lock for a batch over any number of shards.
    open: Arc<RwLock<OpenShards>>,
    /// How many may be open at most, whatever the budget.
    max_open: usize,
    /// Whether gathers ask for their records ahead: batches over the
    /// shards are judged as wholes, as one store's are.
    pub(crate) cold: ColdReads,
    /// Held shared while the collection is open: no shard's rows are
    /// renumbered under it (`readers_lock.rs`).
    _readers: Option<ReadersLock>,
}

impl Drop for Collection {
    fn drop(&mut self) {
        OPEN_SHARD_STORES.fetch_sub(self.read_open().order.len(), Ordering::Relaxed);
    }
}

/// `length` of the store in `dir`, from its header alone.
fn shard_length(dir: &Path) -> Result<u32> {
    let path = dir.join(META_FILE_NAME);
    let file = fs::File::open(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Error::NotAStore {
            path: dir.to_path_buf(),
            reason: "the collection lists this shard but it has no meta.zr".into(),
        },
        _ => io_error(&path)(e),
    })?;
    let mut bytes = [0u8; HEADER_LEN];
    read_exact_at(&file, &mut bytes, 0).map_err(io_error(&path))?;
    let header = Header::from_bytes(&bytes);
    validate_header(&header, &path)?;
    Ok(header.length)
}

impl Collection {
    /// Opens the collection in `dir` as its newest manifest says, with
    /// `options` for each shard's store (`create` is ignored: a listed shard
    /// must exist).
    pub fn open_with(dir: impl AsRef<Path>, options: &StoreOptions) -> Result<Collection> {
        Collection::open_shards(dir, options, None)
    }

    /// [`Collection::open_with`], reading only the published shards named in
    /// `only` (in the manifest's order; all of them for `None`): the view of
    /// a host that holds a subset of the shards (docs/data.md, "Hosts that
    /// hold a part"). The others are not opened, not even their headers; a
    /// name the manifest does not list is an error.
    pub fn open_shards(
        dir: impl AsRef<Path>,
        options: &StoreOptions,
        only: Option<&[String]>,
    ) -> Result<Collection> {
        let folder = Folder::new(dir.as_ref())?;
        let dir = folder.path().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::NotFound { path: dir });
        }
        // Taken before the lengths are read: a delete that ends before it
        // is in them, and none starts until the collection is closed.
        let readers = ReadersLock::share(&dir)?;
        let (generation, mut names) = manifest::read(&dir)?;
        if let Some(only) = only {
            let listed: std::collections::HashSet<&String> = names.iter().collect();
            if let Some(missing) = only.iter().find(|name| !listed.contains(name)) {
                return Err(Error::InvalidArgument {
                    path: dir,
                    reason: format!("the collection publishes no shard {missing:?}"),
                });
            }
            let only: std::collections::HashSet<&String> = only.iter().collect();
            names.retain(|name| only.contains(name));
        }
        let lengths = names
            .iter()
            .map(|name| Ok(u64::from(shard_length(&dir.join(name))?)))
            .collect::<Result<Vec<u64>>>()?;
        // The manifest and the lengths were read by path: all in the folder
        // that was identified, unless another was renamed into its place.
        folder.check()?;
        let open = Arc::new(RwLock::new(OpenShards {
            stores: vec![None; names.len()],
            order: VecDeque::new(),
            views: ShardViews::new(names.len()),
        }));
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|open| open.strong_count() > 0);
        live.push(Arc::downgrade(&open));
        drop(live);
        Ok(Collection {
            open,
            names,
            folder,
            generation,
            index: ShardIndex::new(lengths),
            options: StoreOptions {
                create: false,
                ..options.clone()
            },
            max_open: MAX_OPEN_SHARDS,
            cold: ColdReads::default(),
            _readers: readers,
        })
    }

    /// The published shards' names, in order, from the newest manifest
    /// alone: no shard is opened.
    pub fn published(dir: impl AsRef<Path>) -> Result<Vec<String>> {
        Ok(manifest::read(dir.as_ref())?.1)
    }

    /// Lists `shards` (those not listed yet) at the end of the collection in
    /// `dir`, as one new manifest generation; returns it. For shards that
    /// writers elsewhere made and made durable ([`CollectionWriter::sync`]):
    /// each must be a folder of `dir` holding a store.
    pub fn publish(dir: impl AsRef<Path>, shards: &[String]) -> Result<u64> {
        let dir = dir.as_ref();
        for name in shards {
            if !manifest::valid_shard_name(name) {
                return Err(Error::InvalidArgument {
                    path: dir.to_path_buf(),
                    reason: format!("{name:?} is not a shard name"),
                });
            }
            shard_length(&dir.join(name))?;
        }
        sync_dir(dir)?;
        manifest::publish(dir, shards)
    }

    /// Removes the shards in `dir` that writers given `prefix` made
    /// ([`CollectionWriter::with_prefix`]: named `{prefix}-...`) and that
    /// the collection does not list; returns their names. For the shards of
    /// a distributed write's tasks that died before the publish (whose
    /// retries wrote their rows again): no reader saw them, and they would
    /// only hold the disk. Every writer of that prefix must be done: a shard
    /// one of them still writes would be removed under it. Tries every such
    /// shard; the error is the first that stopped one.
    pub fn remove_unpublished(dir: impl AsRef<Path>, prefix: &str) -> Result<Vec<String>> {
        let dir = dir.as_ref();
        let published = manifest::read(dir)?.1;
        let start = format!("{prefix}-");
        let mut ours = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_error(dir))? {
            let entry = entry.map_err(io_error(dir))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name.starts_with(&start)
                && manifest::valid_shard_name(&name)
                && !published.contains(&name)
                && entry.path().is_dir()
            {
                ours.push(name);
            }
        }
        remove_shards(dir, &ours)?;
        Ok(ours)
    }

    /// [`Collection::open_with`] with the default store options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Collection> {
        Collection::open_with(dir, &StoreOptions::default())
    }

    pub fn path(&self) -> &Path {
        self.folder.path()
    }

    /// Fails with [`Error::FolderReplaced`] when the collection's folder is
    /// no longer at its path: before its shards are reopened by their paths
    /// to change records this handle chose (a delete shard by shard).
    pub fn check_folder(&self) -> Result<()> {
        self.folder.check()
    }

    /// The manifest generation this handle reads (0: nothing published).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Records in all shards, as of the opening.
    pub fn len(&self) -> u64 {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The published shards' names, in global order.
    pub fn shard_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The global index of each shard's first record, and the length last.
    pub fn starts(&self) -> &[u64] {
        self.index.starts()
    }

    fn read_open(&self) -> RwLockReadGuard<'_, OpenShards> {
        self.open.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_open(&self) -> RwLockWriteGuard<'_, OpenShards> {
        self.open.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Shard `s`'s store, opened now if it is not open.
    pub fn shard(&self, s: usize) -> Result<Arc<Store>> {
        short_of_files(|| self.open_shard(s))
    }

    /// [`Collection::shard`], once: reads try again themselves, as their
    /// chunk files may run out of files too.
    fn open_shard(&self, s: usize) -> Result<Arc<Store>> {
        if let Some(store) = self.read_open().stores[s].clone() {
            return Ok(store);
        }
        let path = self.folder.path().join(&self.names[s]);
        // A shard of another collection renamed into this one's place would
        // be read with this one's index.
        let store = Arc::new(
            self.folder
                .checked(Store::open_with(&path, &self.options))?,
        );
        // Appends since the opening are past the index and harmless; a
        // delete moved records (docs/FORMAT.md, "Collections").
        let expected = self.index.shard_len(s);
        let found = store.len() as u64;
        if found < expected {
            return Err(Error::ShardChanged {
                path,
                expected,
                found,
            });
        }
        let mut open = self.write_open();
        // Another thread opened it meanwhile: use that one.
        if let Some(opened) = open.stores[s].clone() {
            return Ok(opened);
        }
        // In the group before it can be read through a view: its changes
        // from now on reach the views (`shard_views.rs`).
        store.changes.join(open.views.group());
        open.stores[s] = Some(store.clone());
        open.order.push_back(s);
        let mut held = OPEN_SHARD_STORES.fetch_add(1, Ordering::Relaxed) + 1;
        let live = live_collections();
        while must_let_go(
            open.order.len(),
            self.max_open,
            held,
            open_shard_budget(),
            live,
        ) {
            let Some(now) = open.let_go_oldest() else {
                break;
            };
            held = now;
        }
        Ok(store)
    }

    /// The shard holding global index `index`, and the index within it.
    pub fn locate(&self, index: u64) -> Result<(usize, u64)> {
        if index >= self.len() {
            return Err(self.out_of_range(index));
        }
        let s = self.shard_of(index);
        Ok((s, index - self.index.starts()[s]))
    }

    /// The shard holding `index`, which must be below the length.
    fn shard_of(&self, index: u64) -> usize {
        self.index.shard_of(index)
    }

    fn out_of_range(&self, index: u64) -> Error {
        Error::IndexOutOfRange {
            path: self.path().to_path_buf(),
            index,
            len: u32::try_from(self.len()).unwrap_or(u32::MAX),
        }
    }

    /// Each index's shard and index within it, the indices all below the
    /// length, in one pass with the shards' places kept in a scratch list of
    /// the calling thread.
    fn resolve(&self, idxs: &[u64]) -> Resolved {
        if self.names.len() == 1 {
            // The first shard's indices are the collection's.
            return Resolved {
                shards: if idxs.is_empty() { vec![] } else { vec![0] },
                which: None,
                locals: idxs.to_vec(),
            };
        }
        SHARD_PLACES.with_borrow_mut(|places| {
            if places.len() < self.names.len() {
                places.resize(self.names.len(), 0);
            }
            // Each index's shard is written at `shards[read]` and kept (the
            // count moved past it) only when it is new to this read: no
            // branch on it, which a batch over many shards mispredicts often.
            let mut shards = vec![0; idxs.len() + 1];
            let mut read = 0;
            let mut which = vec![0; idxs.len()];
            let mut locals = vec![0; idxs.len()];
            let starts = self.index.starts();
            for ((&index, which), local) in idxs.iter().zip(&mut which).zip(&mut locals) {
                let s = self.index.shard_of(index);
                let place = places[s];
                let new = place == 0;
                shards[read] = s;
                read += new as usize;
                let place = if new { read as u32 } else { place };
                places[s] = place;
                *which = place - 1;
                *local = index - starts[s];
            }
            shards.truncate(read);
            for &s in &shards {
                places[s] = 0;
            }
            // A read of one shard (consecutive indices, mostly) reads it
            // as a store's own read does, with no shard to look up a record.
            Resolved {
                which: (shards.len() > 1).then_some(which),
                shards,
                locals,
            }
        })
    }

    /// The indices `idxs` (all below the length) resolved to the views of
    /// their shards; `None` when a shard of the batch has no view.
    fn resolve_viewed(&self, idxs: &[u64], views: &ShardViews) -> Option<ViewedIndices> {
        let Some(&first) = idxs.first() else {
            return Some(ViewedIndices::default());
        };
        if self.names.len() == 1 {
            // The first shard's indices are the collection's.
            return Some(ViewedIndices {
                first: views.place(0)?,
                which: None,
                locals: idxs.to_vec(),
            });
        }
        let starts = self.index.starts();
        let first = views.place(self.index.shard_of(first))?;
        let mut which = vec![0; idxs.len()];
        let mut locals = vec![0; idxs.len()];
        let (mut one, mut viewed) = (true, true);
        // No way out of the loop, which runs faster without one.
        for ((&index, which), local) in idxs.iter().zip(&mut which).zip(&mut locals) {
            let s = self.index.shard_of(index);
            let place = views.place_or_none(s);
            viewed &= place != NO_VIEW;
            one &= place == first;
            *which = place;
            *local = index - starts[s];
        }
        if !viewed {
            return None;
        }
        Some(ViewedIndices {
            first,
            which: (!one).then_some(which),
            locals,
        })
    }

    /// Runs `read` once on the whole batch `idxs` (all below the length)
    /// through the views of its shards (`shard_views.rs`), remade first
    /// when a change was seen (as of `polled`) since they were made; `None`
    /// when a shard of the batch has none.
    fn read_viewed(
        &self,
        idxs: &[u64],
        polled: &Polled,
        read: &mut impl FnMut(&Sources<'_>, Option<&[usize]>) -> Result<()>,
    ) -> Option<Result<()>> {
        let mut open = self.read_open();
        if !open.views.current(polled)? {
            // Made again only for a batch they could then read: over more
            // shards than stay open, most batches open some, and a remaking
            // looks at every open store.
            let open_stores = &open.stores;
            if !idxs
                .iter()
                .all(|&index| open_stores[self.index.shard_of(index)].is_some())
            {
                return None;
            }
            drop(open);
            self.write_open().remake_views(polled, &self.index);
            open = self.read_open();
            // Changed again meanwhile: this batch checks as a store does.
            if open.views.current(polled) != Some(true) {
                return None;
            }
        }
        let resolved = self.resolve_viewed(idxs, &open.views)?;
        let views = open.views.views();
        let sources = match &resolved.which {
            Some(which) => Sources::viewed(views, Some(which), &resolved.locals),
            // A batch of one shard reads it as one store, its view alone.
            None => {
                let first = resolved.first as usize;
                let view = views.get(first..first + 1).unwrap_or_default();
                Sources::viewed(view, None, &resolved.locals)
            }
        };
        let result = read(&sources, None);
        let outdated = sources.views_outdated();
        drop(open);
        if outdated {
            self.write_open().remake_views(polled, &self.index);
        }
        Some(result)
    }

    /// Runs `read` on the records `idxs`, the shards they are in open while
    /// it runs. Usually all are, and `read` runs once on the whole batch
    /// (`None`), under the read lock that keeps them so. Otherwise it runs
    /// once per group of at most [`GROUP_SHARDS`] of the batch's shards, on
    /// the records those hold (their positions in `idxs`), the group's
    /// stores held by this read alone: a batch may read more shards than
    /// the process can hold open.
    fn read_groups(
        &self,
        idxs: &[u64],
        mut read: impl FnMut(&Sources<'_>, Option<&[usize]>) -> Result<()>,
    ) -> Result<()> {
        // Checked first, so that the loops that resolve have no way out,
        // and nothing to undo: they run faster that way.
        let len = self.len();
        if let Some(&index) = idxs.iter().find(|&&index| index >= len) {
            return Err(self.out_of_range(index));
        }
        // One look at the files' changes for the whole read, whichever way
        // it goes.
        let polled = poll();
        if let Some(result) = self.read_viewed(idxs, &polled, &mut read) {
            return result;
        }
        let resolved = self.resolve(idxs);
        {
            let open = self.read_open();
            let stores: Option<Vec<&Store>> = resolved
                .shards
                .iter()
                .map(|&s| open.stores[s].as_deref())
                .collect();
            if let Some(stores) = stores {
                let which = resolved.which.as_deref();
                let sources = Sources::listed(stores, which, &resolved.locals, polled);
                return read(&sources, None);
            }
        }
        for first in (0..resolved.shards.len()).step_by(GROUP_SHARDS) {
            let group = first..(first + GROUP_SHARDS).min(resolved.shards.len());
            let held = resolved.shards[group.clone()]
                .iter()
                .map(|&s| self.open_shard(s))
                .collect::<Result<Vec<_>>>()?;
            let at: Vec<usize> = (0..idxs.len())
                .filter(|&k| group.contains(&(resolved.which(k) as usize)))
                .collect();
            let which: Vec<u32> = at
                .iter()
                .map(|&k| resolved.which(k) - first as u32)
                .collect();
            let locals: Vec<u64> = at.iter().map(|&k| resolved.locals[k]).collect();
            let stores = held.iter().map(|store| &**store).collect();
            let sources = Sources::listed(stores, Some(&which), &locals, polled);
            read(&sources, Some(&at))?;
        }
        Ok(())
    }

    /// The logical length of each record of `idxs`.
    pub fn lengths(&self, idxs: &[u64]) -> Result<Vec<u32>> {
        short_of_files(|| self.lengths_once(idxs))
    }

    fn lengths_once(&self, idxs: &[u64]) -> Result<Vec<u32>> {
        let mut lens = Vec::new();
        self.read_groups(idxs, |src, at| {
            let got = lengths(src)?;
            match at {
                None => lens = got,
                Some(at) => {
                    lens.resize(idxs.len(), 0);
                    for (&k, len) in at.iter().zip(got) {
                        lens[k] = len;
                    }
                }
            }
            Ok(())
        })?;
        Ok(lens)
    }

    /// Record `k` into `dst[k * stride..]`, the rest of its slot zeroed, as
    /// [`Store::gather`] does; a record longer than `stride` is refused
    /// before anything is written.
    pub fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        let lens = self.lengths(idxs)?;
        let too_small = |index: u64, needed: u64, available: u64| Error::BufferTooSmall {
            path: self.path().to_path_buf(),
            index,
            needed,
            available,
        };
        for (k, (&index, &len)) in idxs.iter().zip(&lens).enumerate() {
            if len as usize > stride {
                return Err(too_small(index, u64::from(len), stride as u64));
            }
            let end = (k as u64 + 1).saturating_mul(stride as u64);
            if end > dst.len() as u64 {
                return Err(too_small(index, end, dst.len() as u64));
            }
        }
        let offsets: Vec<u64> = (0..idxs.len()).map(|k| (k * stride) as u64).collect();
        self.gather_at(idxs, &offsets, dst, None)?;
        for (k, &len) in lens.iter().enumerate() {
            dst[k * stride + len as usize..(k + 1) * stride].fill(0);
        }
        Ok(())
    }

    /// Records that are each exactly `stride` bytes (a dataset's samples),
    /// record `k` into `dst[k * stride..]`.
    pub fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        let offsets = slot_offsets(0..idxs.len(), stride);
        self.gather_at(idxs, &offsets, dst, Some(stride as u64))
    }

    /// As [`Collection::gather_exact`], record `k` into slot `slots[k]`
    /// (increasing): a mixture's part of a batch.
    pub fn gather_exact_at(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        stride: usize,
        slots: &[usize],
    ) -> Result<()> {
        if slots.len() != idxs.len() || !slots.windows(2).all(|w| w[0] < w[1]) {
            return Err(Error::InvalidArgument {
                path: self.path().to_path_buf(),
                reason: "a gather needs one increasing slot per index".into(),
            });
        }
        let offsets = slot_offsets(slots.iter().copied(), stride);
        self.gather_at(idxs, &offsets, dst, Some(stride as u64))
    }

    /// Record `k` into `dst[offsets[k]..]` (see [`gather_records`]): one
    /// pass over the batch, whichever shard holds each record.
    fn gather_at(
        &self,
        idxs: &[u64],
        offsets: &[u64],
        dst: &mut [u8],
        exact: Option<u64>,
    ) -> Result<()> {
        // Run again whole when it runs out of files (`short_of_files`).
        short_of_files(|| {
            let dst_len = dst.len() as u64;
            let mut grouped = Vec::new();
            self.read_groups(idxs, |src, at| match at {
                None => gather_records(self.path(), src, offsets, dst, exact, &self.cold),
                // Read in groups, the batch is first checked whole, group by
                // group, so that a bad request still writes nothing.
                Some(at) => {
                    let sub: Vec<u64> = at.iter().map(|&k| offsets[k]).collect();
                    let (locs, _) =
                        check_records(self.path(), src, &sub, dst_len, exact, &self.cold)?;
                    grouped.extend(at.iter().zip(locs).map(|(&k, loc)| {
                        let end = offsets[k] + u64::from(loc.logic_length);
                        (offsets[k], end, idxs[k])
                    }));
                    Ok(())
                }
            })?;
            if grouped.is_empty() {
                return Ok(()); // read whole, all its shards open
            }
            // Each group's destinations were checked apart; slots (`exact`)
            // cannot overlap, others are checked together.
            if exact.is_none() {
                check_disjoint(self.path(), grouped)?;
            }
            self.read_groups(idxs, |src, at| match at {
                None => gather_records(self.path(), src, offsets, dst, exact, &self.cold),
                Some(at) => {
                    let sub: Vec<u64> = at.iter().map(|&k| offsets[k]).collect();
                    gather_records(self.path(), src, &sub, dst, exact, &self.cold)
                }
            })
        })
    }

    /// Record `k` into `dst[offsets[k]..]`, its length long; the ranges must
    /// not overlap.
    pub fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
        if offsets.len() != idxs.len() {
            return Err(Error::InvalidArgument {
                path: self.path().to_path_buf(),
                reason: format!("{} indices but {} offsets", idxs.len(), offsets.len()),
            });
        }
        self.gather_at(idxs, offsets, dst, None)
    }
}

/// Removes the shard folders `names` of the collection in `dir`, which no
/// manifest lists; tries every one, and the error is the first that stopped
/// one.
fn remove_shards(dir: &Path, names: &[String]) -> Result<()> {
    let mut outcome = Ok(());
    for name in names {
        let path = dir.join(name);
        if let Err(e) = fs::remove_dir_all(&path) {
            outcome = outcome.and(Err(io_error(&path)(e)));
        }
    }
    outcome
}

/// When a writer starts a new shard.
#[derive(Clone, Copy, Debug)]
pub struct ShardLimits {
    /// Records in a shard (at most [`MAX_RECORDS`]).
    pub max_records: u32,
    /// Logical bytes in a shard; a record larger than this gets a shard of
    /// its own.
    pub max_bytes: u64,
}

impl Default for ShardLimits {
    fn default() -> Self {
        ShardLimits {
            max_records: MAX_RECORDS as u32,
            max_bytes: 64 << 30,
        }
    }
}

/// Appends to shards of its own in a collection's folder and publishes
/// them: readers see none of its records before [`CollectionWriter::publish`]
/// and all of them after. Records appended after a publish go to the same
/// newest shard until it is full, and are published by the next publish.
pub struct CollectionWriter {
    /// The collection's folder, by its real path: `files/folder.rs`.
    folder: Folder,
    options: StoreOptions,
    limits: ShardLimits,
    /// The shard appends go to, and its logical bytes.
    current: Option<(String, Store, u64)>,
    /// Shards made by this writer, published or not, in order.
    made: Vec<String>,
    /// With a prefix, shard `n` of this writer is `{prefix}-{n:x}`: writers
    /// of aligned collections (a table's streams) name theirs alike.
    prefix: Option<String>,
    /// Whether shards are synced before they are published.
    durable: bool,
}

static SHARD_COUNTER: AtomicU64 = AtomicU64::new(0);

impl CollectionWriter {
    /// A writer of new shards in `dir` (created when missing), each a store
    /// opened with `options`.
    pub fn new(
        dir: impl AsRef<Path>,
        options: &StoreOptions,
        limits: ShardLimits,
    ) -> Result<CollectionWriter> {
        let mut folder = Folder::new(dir.as_ref())?;
        let dir = folder.path().to_path_buf();
        if limits.max_records == 0 || limits.max_records as usize > MAX_RECORDS {
            return Err(Error::InvalidArgument {
                path: dir,
                reason: format!(
                    "a shard's record limit must be 1 to {MAX_RECORDS}, not {}",
                    limits.max_records
                ),
            });
        }
        fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        folder.identify()?;
        readers_lock::make_file(&dir)?;
        folder.check()?;
        Ok(CollectionWriter {
            folder,
            options: StoreOptions {
                create: true,
                ..options.clone()
            },
            limits,
            current: None,
            made: Vec::new(),
            prefix: None,
            durable: true,
        })
    }

    /// A writer that never syncs: its shards are published (or handed on)
    /// without reaching stable storage first. A crash of the process loses
    /// nothing it published, since the page cache keeps it; a power loss
    /// may leave published shards without some of their bytes.
    pub fn without_sync(mut self) -> CollectionWriter {
        self.durable = false;
        self
    }

    /// Names this writer's shards `{prefix}-0`, `{prefix}-1`, ... (hex)
    /// instead of by time and process: writers given the same prefix, limits
    /// and appends make shards of the same names and lengths. A shard name
    /// taken already is an error, never a retry under another name.
    pub fn with_prefix(mut self, prefix: &str) -> Result<CollectionWriter> {
        // The longest name it can make: a counter of 16 hex digits.
        if !manifest::valid_shard_name(&format!("{prefix}-{:x}", u64::MAX)) {
            return Err(Error::InvalidArgument {
                path: self.folder.path().to_path_buf(),
                reason: format!(
                    "shard prefix {prefix:?} must be digits, lowercase letters and '-', \
                     at most {} of them",
                    manifest::MAX_SHARD_NAME - 17
                ),
            });
        }
        self.prefix = Some(prefix.to_owned());
        Ok(self)
    }

    /// A new shard with a name no other writer makes: the time, this
    /// process and a counter, and `create_dir`, which fails on a name taken.
    fn start_shard(&mut self) -> Result<()> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        loop {
            let name = match &self.prefix {
                Some(prefix) => format!("{prefix}-{:x}", self.made.len()),
                None => {
                    let n = SHARD_COUNTER.fetch_add(1, Ordering::Relaxed);
                    format!("{nanos:x}-{:x}-{n:x}", std::process::id())
                }
            };
            // Not made in another folder renamed into this one's place.
            self.folder.check()?;
            let path = self.folder.path().join(&name);
            match fs::create_dir(&path) {
                Ok(()) => {
                    let store = Store::open_with(&path, &self.options)?;
                    self.made.push(name.clone());
                    self.current = Some((name, store, 0));
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && self.prefix.is_none() => {
                    continue
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(Error::InvalidArgument {
                        path,
                        reason: "the shard exists already: another writer has this prefix".into(),
                    })
                }
                Err(e) => return Err(io_error(&path)(e)),
            }
        }
    }

    /// Appends `records` in order. They go whole into the current shard when
    /// they fit in it, else into a new one; only a call larger than a shard
    /// is split, over new shards. Records appended to a published shard are
    /// visible when the call returns (a store's commit), all at once; those
    /// in new shards at the next publish.
    pub fn append(&mut self, records: &[&[u8]], options: &AppendOptions) -> Result<()> {
        if let Some((_, store, bytes)) = &self.current {
            let adding: u64 = records.iter().map(|r| r.len() as u64).sum();
            if store.len() + records.len() > self.limits.max_records as usize
                || (!store.is_empty() && *bytes + adding > self.limits.max_bytes)
            {
                self.end_shard()?;
            }
        }
        let mut rest = records;
        while !rest.is_empty() {
            if self.current.is_none() {
                self.start_shard()?;
            }
            let (_, store, bytes) = self.current.as_mut().expect("started above");
            // As many records as fit, and at least one in an empty shard.
            let room = self.limits.max_records as usize - store.len();
            let mut take = 0;
            let mut adding = 0u64;
            while take < rest.len().min(room) {
                let len = rest[take].len() as u64;
                if (take > 0 || !store.is_empty()) && *bytes + adding + len > self.limits.max_bytes
                {
                    break;
                }
                adding += len;
                take += 1;
            }
            if take > 0 {
                store.append(&rest[..take], options)?;
                *bytes += adding;
                rest = &rest[take..];
            }
            if take == 0
                || store.len() >= self.limits.max_records as usize
                || *bytes >= self.limits.max_bytes
            {
                self.end_shard()?;
            }
        }
        Ok(())
    }

    /// Syncs the current shard and lets the next append start another:
    /// writers of aligned collections end their shards at the same rows.
    pub fn end_shard(&mut self) -> Result<()> {
        if let Some((_, store, _)) = self.current.take() {
            if self.durable {
                store.sync()?;
            }
        }
        Ok(())
    }

    /// The shards this writer made, in order.
    pub fn shards(&self) -> &[String] {
        &self.made
    }

    /// Makes every shard of this writer durable, then lists those not yet
    /// listed at the end of the collection's manifest, as one new generation;
    /// returns it. A crash at any moment leaves the collection as it was
    /// before or with all of them.
    pub fn publish(&mut self) -> Result<u64> {
        self.sync()?;
        // Published where its shards are, not in another folder renamed
        // into this one's place.
        self.folder.check()?;
        manifest::publish(self.folder.path(), &self.made)
    }

    /// Removes the shards of this writer that the collection does not list,
    /// after a write that failed before its publish (a full disk, a bad
    /// item): no reader saw them, and they would only hold the disk. Its
    /// published shards stay. Not for shards handed to another process to
    /// publish ([`CollectionWriter::sync`]). The writer takes no appends
    /// after it.
    pub fn discard(&mut self) -> Result<()> {
        self.current = None;
        // Removed from this collection, not from another renamed into its
        // place.
        self.folder.check()?;
        let published = manifest::read(self.folder.path())?.1;
        let (kept, unlisted) = self
            .made
            .drain(..)
            .partition(|name| published.contains(name));
        self.made = kept;
        remove_shards(self.folder.path(), &unlisted)
    }

    /// Makes every shard of this writer durable, without publishing them:
    /// another process may publish them later ([`Collection::publish`]).
    pub fn sync(&mut self) -> Result<()> {
        if !self.durable {
            return Ok(());
        }
        // Finished shards were synced when they were finished.
        if let Some((_, store, _)) = &self.current {
            store.sync()?;
        }
        sync_dir(self.folder.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Codec;

    /// Past its bound a collection lets its oldest stores go and reopens
    /// them when a read needs them again, reading the same records.
    #[test]
    fn stores_past_the_bound_are_let_go_and_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let limits = ShardLimits {
            max_records: 1,
            ..ShardLimits::default()
        };
        let mut writer = CollectionWriter::new(&path, &StoreOptions::default(), limits).unwrap();
        let records: Vec<[u8; 4]> = (0..10u32).map(u32::to_le_bytes).collect();
        let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        let options = AppendOptions {
            codec: Codec::Raw,
            ..AppendOptions::default()
        };
        writer.append(&refs, &options).unwrap();
        writer.publish().unwrap();
        let mut c = Collection::open(&path).unwrap();
        assert!((MIN_OPEN_SHARDS..=MAX_OPEN_SHARDS).contains(&open_shard_budget()));
        c.max_open = 3;
        let held = |c: &Collection| c.read_open().stores.iter().flatten().count();
        for order in [
            [9u64, 0, 5, 1, 8, 2, 7, 3, 6, 4],
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        ] {
            for &i in &order {
                let mut dst = [0u8; 4];
                c.gather_exact(&[i], &mut dst, 4).unwrap();
                assert_eq!(dst, records[i as usize]);
                assert!(held(&c) <= 3, "{} stores open", held(&c));
            }
        }
        let mut all = vec![0u8; 40];
        c.gather_exact(&(0..10).collect::<Vec<u64>>(), &mut all, 4)
            .unwrap();
        assert_eq!(all, records.concat());
    }

    /// Every collection may keep its first stores, or its share of the
    /// budget when that is smaller; past them, the process's budget
    /// decides, and a collection's own bound always does.
    #[test]
    fn the_budget_is_shared_but_every_collection_keeps_its_first_stores() {
        let (min, max) = (MIN_OPEN_SHARDS, MAX_OPEN_SHARDS);
        assert!(
            !must_let_go(min, max, 10 * max, 1000, 3),
            "its first stores stay"
        );
        assert!(
            must_let_go(min + 1, max, 1001, 1000, 3),
            "past them, the budget rules"
        );
        assert!(!must_let_go(min + 1, max, 1000, 1000, 3));
        assert!(must_let_go(4, 3, 4, 1000, 1), "its own bound always does");
        // A budget of 96 stores and two collections: each keeps 48 of its
        // own, so that together they stay within it.
        assert!(!must_let_go(48, max, 200, 96, 2));
        assert!(must_let_go(49, max, 200, 96, 2));
    }
}
