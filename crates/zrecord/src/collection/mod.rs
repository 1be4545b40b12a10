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

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::error::{io_error, Error, Result};
use crate::files::meta_file::{validate_header, META_FILE_NAME};
use crate::files::os::{open_files_limit, read_exact_at, sync_dir};
use crate::format::header::{Header, HEADER_LEN};
use crate::format::limits::MAX_RECORDS;
use crate::ops::append::AppendOptions;
use crate::ops::gather::{gather_parts, Part};
use crate::store::{Store, StoreOptions};

/// One published shard: its name, and its store while it is open.
struct Shard {
    name: String,
    store: Mutex<Option<Arc<Store>>>,
}

thread_local! {
    /// Per shard, a count used by [`Collection::split`], all zero between
    /// calls: as long as the most shards of a collection this thread read.
    static SHARD_COUNTS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Shard stores a collection may always keep open (each holds a few files
/// and mappings). Past them, it keeps more only while the process's stores
/// of all collections stay within [`open_shard_budget`]; otherwise it lets
/// its own oldest go (a read still using one keeps it until it ends).
/// Reopening costs a few hundred microseconds, so a shuffled read over more
/// shards than stay open runs at a few thousand records a second.
const MIN_OPEN_SHARDS: usize = 256;

/// Most shard stores the process keeps open: each maps about three files,
/// and Linux allows a process 65,530 mappings by default.
const MAX_OPEN_SHARDS: usize = 8192;

/// Open files counted per open shard store (`meta.zr`, `checksums.zr`, a
/// chunk file or two), and open files left to the rest of the program.
const FILES_PER_SHARD: u64 = 4;
const FILES_KEPT_FREE: u64 = 1024;

/// Shard stores held open by all collections of the process.
static OPEN_SHARD_STORES: AtomicUsize = AtomicUsize::new(0);

/// How many shard stores the process keeps open: as many as its open-file
/// limit leaves room for (`ulimit -n`), within the bounds above. The limit
/// is read, never raised: a library that raised it would hand the program
/// descriptors past 1024, which `select()` cannot take.
fn open_shard_budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let room = open_files_limit().map_or(0, |limit| {
            limit.saturating_sub(FILES_KEPT_FREE) / FILES_PER_SHARD
        });
        usize::try_from(room)
            .unwrap_or(MAX_OPEN_SHARDS)
            .clamp(MIN_OPEN_SHARDS, MAX_OPEN_SHARDS)
    })
}

/// Whether a collection holding `own` open shard stores (at most `max_own`)
/// lets its oldest go, when the process holds `held` against `budget`.
fn must_let_go(own: usize, max_own: usize, held: usize, budget: usize) -> bool {
    own > max_own || (own > MIN_OPEN_SHARDS && held > budget)
}

/// A read's indices grouped by the shard that holds each, in three flat
/// lists (a batch touches many shards; a list per shard would cost an
/// allocation per shard per batch). Group `g` is shard `shards[g]`, its indices within the shard are
/// `locals[bounds[g]..bounds[g + 1]]`, and their positions in the read are
/// the same range of `positions` (increasing within a group).
struct Split {
    shards: Vec<usize>,
    bounds: Vec<usize>,
    locals: Vec<u64>,
    positions: Vec<usize>,
}

impl Split {
    /// Each group: its shard and the range of `locals` and `positions`.
    fn groups(&self) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> + '_ {
        self.shards
            .iter()
            .zip(self.bounds.windows(2))
            .map(|(&s, b)| (s, b[0]..b[1]))
    }
}

/// The published shards of a collection as of its opening, read as one
/// sequence of records: global index `g` is record `g - starts[s]` of the
/// shard `s` whose range holds it.
pub struct Collection {
    dir: PathBuf,
    generation: u64,
    shards: Vec<Shard>,
    /// `starts[s]`: the global index of shard `s`'s first record; the last
    /// element is the collection's length.
    starts: Vec<u64>,
    options: StoreOptions,
    /// The shards whose stores are open, oldest first.
    open: Mutex<VecDeque<usize>>,
    /// How many of them may be open at most, whatever the budget.
    max_open: usize,
}

impl Drop for Collection {
    fn drop(&mut self) {
        OPEN_SHARD_STORES.fetch_sub(lock(&self.open).len(), Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::NotFound { path: dir });
        }
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
        let mut starts = Vec::with_capacity(names.len() + 1);
        let mut total = 0u64;
        for name in &names {
            starts.push(total);
            total += u64::from(shard_length(&dir.join(name))?);
        }
        starts.push(total);
        Ok(Collection {
            shards: names
                .into_iter()
                .map(|name| Shard {
                    name,
                    store: Mutex::new(None),
                })
                .collect(),
            dir,
            generation,
            starts,
            options: StoreOptions {
                create: false,
                ..options.clone()
            },
            open: Mutex::new(VecDeque::new()),
            max_open: MAX_OPEN_SHARDS,
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

    /// [`Collection::open_with`] with the default store options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Collection> {
        Collection::open_with(dir, &StoreOptions::default())
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The manifest generation this handle reads (0: nothing published).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Records in all shards, as of the opening.
    pub fn len(&self) -> u64 {
        self.starts[self.shards.len()]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The published shards' names, in global order.
    pub fn shard_names(&self) -> impl Iterator<Item = &str> {
        self.shards.iter().map(|s| s.name.as_str())
    }

    /// The global index of each shard's first record, and the length last.
    pub fn starts(&self) -> &[u64] {
        &self.starts
    }

    /// Shard `s`'s store, opened now if it is not open.
    pub fn shard(&self, s: usize) -> Result<Arc<Store>> {
        let slot = &self.shards[s].store;
        if let Some(store) = lock(slot).clone() {
            return Ok(store);
        }
        let store = Arc::new(Store::open_with(
            self.dir.join(&self.shards[s].name),
            &self.options,
        )?);
        {
            let mut slot = lock(slot);
            // Another thread opened it meanwhile: use that one.
            if let Some(opened) = slot.clone() {
                return Ok(opened);
            }
            *slot = Some(store.clone());
        }
        let mut open = lock(&self.open);
        open.push_back(s);
        let mut held = OPEN_SHARD_STORES.fetch_add(1, Ordering::Relaxed) + 1;
        while must_let_go(open.len(), self.max_open, held, open_shard_budget()) {
            let Some(oldest) = open.pop_front() else {
                break;
            };
            lock(&self.shards[oldest].store).take();
            held = OPEN_SHARD_STORES.fetch_sub(1, Ordering::Relaxed) - 1;
        }
        Ok(store)
    }

    /// The shard holding global index `index`, and the index within it.
    pub fn locate(&self, index: u64) -> Result<(usize, u64)> {
        if index >= self.len() {
            return Err(self.out_of_range(index));
        }
        let s = self.shard_of(index);
        Ok((s, index - self.starts[s]))
    }

    /// The shard holding `index`, which must be below the length.
    fn shard_of(&self, index: u64) -> usize {
        self.starts.partition_point(|&start| start <= index) - 1
    }

    fn out_of_range(&self, index: u64) -> Error {
        Error::IndexOutOfRange {
            path: self.dir.clone(),
            index,
            len: u32::try_from(self.len()).unwrap_or(u32::MAX),
        }
    }

    /// `idxs` grouped by shard, the shards in the order they first appear:
    /// a counting sort, with a count per shard kept in a scratch list of
    /// the calling thread (a batch's indices are split in a few nanoseconds
    /// each, where sorting them cost more than gathering small records).
    fn split(&self, idxs: &[u64]) -> Result<Split> {
        if let Some(&bad) = idxs.iter().find(|&&i| i >= self.len()) {
            return Err(self.out_of_range(bad));
        }
        SHARD_COUNTS.with_borrow_mut(|counts| {
            if counts.len() < self.shards.len() {
                counts.resize(self.shards.len(), 0);
            }
            // Each index's shard, the shards in order of appearance and how
            // many indices each holds.
            let mut shards = Vec::new();
            let of: Vec<usize> = idxs
                .iter()
                .map(|&index| {
                    let s = self.shard_of(index);
                    if counts[s] == 0 {
                        shards.push(s);
                    }
                    counts[s] += 1;
                    s
                })
                .collect();
            // Group bounds; each shard's count becomes where its next index goes.
            let mut bounds = Vec::with_capacity(shards.len() + 1);
            bounds.push(0);
            for &s in &shards {
                let start = bounds[bounds.len() - 1];
                bounds.push(start + counts[s]);
                counts[s] = start;
            }
            let mut locals = vec![0u64; idxs.len()];
            let mut positions = vec![0usize; idxs.len()];
            for (k, (&index, &s)) in idxs.iter().zip(&of).enumerate() {
                let slot = counts[s];
                locals[slot] = index - self.starts[s];
                positions[slot] = k;
                counts[s] += 1;
            }
            for &s in &shards {
                counts[s] = 0;
            }
            Ok(Split {
                shards,
                bounds,
                locals,
                positions,
            })
        })
    }

    /// The logical length of each record of `idxs`.
    pub fn lengths(&self, idxs: &[u64]) -> Result<Vec<u32>> {
        let mut lens = vec![0u32; idxs.len()];
        let split = self.split(idxs)?;
        for (s, range) in split.groups() {
            let shard_lens = self.shard(s)?.lengths(&split.locals[range.clone()])?;
            for (len, &k) in shard_lens.into_iter().zip(&split.positions[range]) {
                lens[k] = len;
            }
        }
        Ok(lens)
    }

    /// Record `k` into `dst[k * stride..]`, the rest of its slot zeroed, as
    /// [`Store::gather`] does; a record longer than `stride` is refused
    /// before anything is written.
    pub fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        let lens = self.lengths(idxs)?;
        let too_small = |index: u64, needed: u64, available: u64| Error::BufferTooSmall {
            path: self.dir.clone(),
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
        self.gather_split(idxs, dst, |k| (k * stride) as u64, None)?;
        for (k, &len) in lens.iter().enumerate() {
            dst[k * stride + len as usize..(k + 1) * stride].fill(0);
        }
        Ok(())
    }

    /// Records that are each exactly `stride` bytes (a dataset's samples),
    /// record `k` into `dst[k * stride..]`.
    pub fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        let slots: Vec<usize> = (0..idxs.len()).collect();
        self.gather_exact_at(idxs, dst, stride, &slots)
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
                path: self.dir.clone(),
                reason: "a gather needs one increasing slot per index".into(),
            });
        }
        let at = |k: usize| (slots[k] as u64).saturating_mul(stride as u64);
        self.gather_split(idxs, dst, at, Some(stride as u64))
    }

    /// One pass over the records of every shard `idxs` reads, record `k`
    /// into `dst[at(k)..]` (see [`gather_parts`]).
    fn gather_split(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        at: impl Fn(usize) -> u64,
        exact: Option<u64>,
    ) -> Result<()> {
        let split = self.split(idxs)?;
        let offsets: Vec<u64> = split.positions.iter().map(|&k| at(k)).collect();
        let stores = split
            .shards
            .iter()
            .map(|&s| self.shard(s))
            .collect::<Result<Vec<_>>>()?;
        let parts: Vec<Part<'_>> = split
            .groups()
            .zip(&stores)
            .map(|((_, range), store)| {
                Part::new(store, &split.locals[range.clone()], &offsets[range])
            })
            .collect();
        gather_parts(&self.dir, &parts, dst, exact)
    }

    /// Record `k` into `dst[offsets[k]..]`, its length long; the ranges must
    /// not overlap.
    pub fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
        if offsets.len() != idxs.len() {
            return Err(Error::InvalidArgument {
                path: self.dir.clone(),
                reason: format!("{} indices but {} offsets", idxs.len(), offsets.len()),
            });
        }
        self.gather_split(idxs, dst, |k| offsets[k], None)
    }
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
    dir: PathBuf,
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
        let dir = dir.as_ref().to_path_buf();
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
        Ok(CollectionWriter {
            dir,
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
                path: self.dir,
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
            let path = self.dir.join(&name);
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
        manifest::publish(&self.dir, &self.made)
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
        sync_dir(&self.dir)
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
        let held = |c: &Collection| c.shards.iter().filter(|s| lock(&s.store).is_some()).count();
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

    /// Every collection may keep its first stores; past them, the process's
    /// budget decides, and a collection's own bound always does.
    #[test]
    fn the_budget_is_shared_but_every_collection_keeps_its_first_stores() {
        let (min, max) = (MIN_OPEN_SHARDS, MAX_OPEN_SHARDS);
        assert!(
            !must_let_go(min, max, 10 * max, 1000),
            "its first stores stay"
        );
        assert!(
            must_let_go(min + 1, max, 1001, 1000),
            "past them, the budget rules"
        );
        assert!(!must_let_go(min + 1, max, 1000, 1000));
        assert!(must_let_go(4, 3, 4, 1000), "its own bound always does");
    }
}
