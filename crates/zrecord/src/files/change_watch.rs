//! Which stores' files may have changed behind them, known without a system
//! call per file per read.
//!
//! A store reads its files through mappings, and a mapped page past the end
//! of a file that another program truncated raises SIGBUS; so before a read
//! touches a mapping, the file's size is checked (docs/reliability.md,
//! "Files changed behind the store"). Checking with an `fstat` of each file
//! at every gather costs a system call per file, and a batch over a
//! collection reads dozens of shards' files. Instead, on Linux, the process
//! keeps one inotify instance with a watch on each file a store maps, made
//! through the open descriptor (`/proc/self/fd/N`, so on the very file the
//! store has open, whatever its name now and whatever other names it has);
//! a truncation or any other write shows as an event. A gather first reads
//! the pending events ([`poll`]), once for the whole batch, and checks the
//! sizes of a store's files only when an event came for one of them since
//! its last check passed ([`Changes::to_check`]).
//!
//! A file gets no watch, and its store checks sizes at every read as
//! before, where a watch could not tell: on another system than Linux, on a
//! file system shared over a network (another machine's truncation sends
//! no event here: only the local file systems below are trusted), when the
//! watch limit is reached, and in a forked child for the stores it inherited
//! (the child has its own instance; the parent's watches are not its own).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What a read must check of a store's files, after [`poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nothing changed since a check of every mapped file passed.
    Nothing,
    /// Something changed: check every mapped file, then report the check
    /// with [`Changes::checked`] and this token.
    All(u64),
    /// The files are not (all) watched: check those this read maps.
    Unwatched,
}

/// The change count of one store, shared by the watches of its files.
pub(crate) struct Changes {
    /// The process's watcher these watches belong to (0: none).
    watcher: u64,
    /// Events seen for the store's files, plus one for the opening.
    seen: AtomicU64,
    /// `seen` as of the start of the last check that passed.
    checked: AtomicU64,
    /// Some file of the store has no watch.
    unwatched: AtomicBool,
    /// The groups the store is in, told of its changes after it.
    groups: Mutex<Vec<Arc<ChangeGroup>>>,
}

/// The change count of a group of stores (a collection's open shards),
/// raised after any of theirs is: a read of many of them learns from this
/// one count that none changed since they were all checked, instead of
/// asking each ([`Changes::to_check`]).
pub(crate) struct ChangeGroup {
    /// The process's watcher when the group was made (0: none).
    watcher: u64,
    /// Changes seen in the group's stores, joins and lost watches included.
    seen: AtomicU64,
}

/// What [`poll`] found: which watcher's events are read.
#[derive(Clone, Copy)]
pub(crate) struct Polled {
    watcher: u64,
}

impl Changes {
    /// The count of a store about to open its files, as changed: its first
    /// read checks every file, once all are watched.
    pub(crate) fn new() -> Arc<Changes> {
        Arc::new(Changes {
            watcher: imp::watcher_id(),
            seen: AtomicU64::new(1),
            checked: AtomicU64::new(0),
            unwatched: AtomicBool::new(false),
            groups: Mutex::new(Vec::new()),
        })
    }

    /// Puts the store in `group`, counting the joining as a change of the
    /// group. A change the store saw before it joined is left to the
    /// store's own count, which a check of its files reads.
    pub(crate) fn join(&self, group: &Arc<ChangeGroup>) {
        self.groups().push(group.clone());
        group.changed();
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, Vec<Arc<ChangeGroup>>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the store's groups of a change, after the store's own count
    /// took it: a reader that sees the group's count raised and then checks
    /// the store sees the store's raised too.
    #[cfg(target_os = "linux")]
    fn tell_groups(&self) {
        for group in self.groups().iter() {
            group.changed();
        }
    }

    /// Watches the open `file` for changes, or marks the store unwatched
    /// when it cannot. The watch lasts as long as the returned value.
    pub(crate) fn watch(self: &Arc<Self>, file: &std::fs::File) -> Option<FileWatch> {
        let watch = imp::watch(self, file);
        if watch.is_none() {
            self.unwatched.store(true, Ordering::Release);
        }
        watch
    }

    /// What a read after `polled` must check.
    pub(crate) fn to_check(&self, polled: &Polled) -> Check {
        if self.watcher == 0
            || self.watcher != polled.watcher
            || self.unwatched.load(Ordering::Acquire)
        {
            return Check::Unwatched;
        }
        let seen = self.seen.load(Ordering::Acquire);
        match self.checked.load(Ordering::Acquire) >= seen {
            true => Check::Nothing,
            false => Check::All(seen),
        }
    }

    /// A check of every file, begun when [`Changes::to_check`] gave
    /// `All(token)`, passed. (Events that came during it raised `seen`
    /// past the token, so the next read checks again.)
    pub(crate) fn checked(&self, token: u64) {
        self.checked.fetch_max(token, Ordering::AcqRel);
    }

    #[cfg(target_os = "linux")]
    fn changed(&self) {
        self.seen.fetch_add(1, Ordering::AcqRel);
        self.tell_groups();
    }

    #[cfg(target_os = "linux")]
    fn lost_watch(&self) {
        self.unwatched.store(true, Ordering::Release);
        self.tell_groups();
    }
}

impl ChangeGroup {
    pub(crate) fn new() -> Arc<ChangeGroup> {
        Arc::new(ChangeGroup {
            watcher: imp::watcher_id(),
            seen: AtomicU64::new(0),
        })
    }

    /// The group's count as of `polled`, or `None` when its stores' changes
    /// reach it from no watcher this process reads: without one, or in a
    /// forked child, where the watcher is another (see the module's notes).
    pub(crate) fn count(&self, polled: &Polled) -> Option<u64> {
        (self.watcher != 0 && self.watcher == polled.watcher)
            .then(|| self.seen.load(Ordering::Acquire))
    }

    fn changed(&self) {
        self.seen.fetch_add(1, Ordering::AcqRel);
    }
}

/// Reads the events pending for the process's watches, so that the stores
/// whose files changed before this call check them. Call once before a read
/// of any number of stores, then ask each [`Changes::to_check`].
pub(crate) fn poll() -> Polled {
    Polled {
        watcher: imp::poll(),
    }
}

pub(crate) use imp::FileWatch;

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashMap;
    use std::fs::File;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, MutexGuard};

    use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

    use super::Changes;
    use crate::exec::process_local::ProcessLocal;

    /// File systems whose changes all pass through this kernel, as
    /// `statfs` names them (linux/magic.h): ext2-4, XFS, Btrfs, tmpfs,
    /// ramfs, F2FS, overlayfs (containers' roots), ZFS, bcachefs. On any
    /// other (NFS, SMB, FUSE, Ceph, 9p, ...) another machine may truncate
    /// a file without an event here.
    const LOCAL_FILE_SYSTEMS: [i64; 9] = [
        0xEF53,
        0x5846_5342,
        0x9123_683E,
        0x0102_1994,
        0x8584_58f6,
        0xF2F5_2010,
        0x794c_7630,
        0x2fc1_2fc1,
        0xca45_1a4e,
    ];

    /// The process's inotify instance and, per watch, the stores it tells.
    pub(super) struct Watcher {
        id: u64,
        state: Mutex<Option<State>>,
    }

    struct State {
        inotify: Inotify,
        stores: HashMap<WatchDescriptor, Vec<Arc<Changes>>>,
        buffer: Vec<u8>,
    }

    static WATCHER: ProcessLocal<Watcher> = ProcessLocal::new();
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);

    fn watcher() -> &'static Watcher {
        WATCHER.get(
            || Watcher {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                // No instance (the per-user limit reached): nothing is watched.
                state: Mutex::new(Inotify::init().ok().map(|inotify| State {
                    inotify,
                    stores: HashMap::new(),
                    buffer: vec![0; 16 << 10],
                })),
            },
            |_| {},
        )
    }

    impl Watcher {
        fn state(&self) -> MutexGuard<'_, Option<State>> {
            self.state.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    pub(super) fn watcher_id() -> u64 {
        watcher().id
    }

    /// One file's watch, for one store; removed when dropped.
    pub(crate) struct FileWatch {
        watcher: u64,
        wd: WatchDescriptor,
        changes: Arc<Changes>,
    }

    impl Drop for FileWatch {
        fn drop(&mut self) {
            let watcher = watcher();
            // A forked child's copy of a parent's watch: the instance is
            // the parent's (shared with it), so the child leaves it alone.
            if watcher.id != self.watcher {
                return;
            }
            let mut state = watcher.state();
            let Some(state) = state.as_mut() else {
                return;
            };
            let Some(stores) = state.stores.get_mut(&self.wd) else {
                return;
            };
            if let Some(k) = stores.iter().position(|c| Arc::ptr_eq(c, &self.changes)) {
                stores.swap_remove(k);
            }
            if stores.is_empty() {
                state.stores.remove(&self.wd);
                // Fails only when the file is gone and the watch with it.
                let _ = state.inotify.watches().remove(self.wd.clone());
            }
        }
    }

    fn is_local(file: &File) -> bool {
        let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: the descriptor is open for the life of `file`, and `fs`
        // is valid for writes of a `statfs`.
        if unsafe { libc::fstatfs(file.as_raw_fd(), fs.as_mut_ptr()) } != 0 {
            return false;
        }
        // SAFETY: fstatfs succeeded, so it filled `fs`.
        let fs = unsafe { fs.assume_init() };
        #[allow(clippy::unnecessary_cast)] // f_type's type differs by libc
        let kind = fs.f_type as i64;
        LOCAL_FILE_SYSTEMS.contains(&kind)
    }

    pub(super) fn watch(changes: &Arc<Changes>, file: &File) -> Option<FileWatch> {
        let watcher = watcher();
        if changes.watcher != watcher.id || !is_local(file) {
            return None;
        }
        let mut state = watcher.state();
        let state = state.as_mut()?;
        let through = format!("/proc/self/fd/{}", file.as_raw_fd());
        let wd = state
            .inotify
            .watches()
            .add(through, WatchMask::MODIFY)
            .ok()?;
        state
            .stores
            .entry(wd.clone())
            .or_default()
            .push(changes.clone());
        Some(FileWatch {
            watcher: watcher.id,
            wd,
            changes: changes.clone(),
        })
    }

    pub(super) fn poll() -> u64 {
        let watcher = watcher();
        let mut state = watcher.state();
        let Some(state) = state.as_mut() else {
            return watcher.id;
        };
        loop {
            let events = match state.inotify.read_events(&mut state.buffer) {
                Ok(events) => events,
                // WouldBlock: none pending. Any other error: the events
                // cannot be read, so nothing can be trusted unchanged.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return watcher.id,
                Err(_) => {
                    lose_all(&mut state.stores);
                    return watcher.id;
                }
            };
            let mut any = false;
            let mut ended = Vec::new();
            for event in events {
                any = true;
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    // Events were dropped: any store may have changed.
                    for changes in state.stores.values().flatten() {
                        changes.changed();
                    }
                    continue;
                }
                let Some(stores) = state.stores.get(&event.wd) else {
                    continue;
                };
                for changes in stores {
                    changes.changed();
                    if event.mask.contains(EventMask::IGNORED) {
                        // The watch is gone (the file deleted, its file
                        // system unmounted): no more events will come.
                        changes.lost_watch();
                    }
                }
                if event.mask.contains(EventMask::IGNORED) {
                    ended.push(event.wd.clone());
                }
            }
            for wd in ended {
                state.stores.remove(&wd);
            }
            if !any {
                return watcher.id;
            }
        }
    }

    fn lose_all(stores: &mut HashMap<WatchDescriptor, Vec<Arc<Changes>>>) {
        for changes in stores.values().flatten() {
            changes.lost_watch();
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::sync::Arc;

    use super::Changes;

    /// No watch is ever made here.
    pub(crate) enum FileWatch {}

    pub(super) fn watcher_id() -> u64 {
        0
    }

    pub(super) fn watch(_: &Arc<Changes>, _: &std::fs::File) -> Option<FileWatch> {
        None
    }

    pub(super) fn poll() -> u64 {
        0
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::fs::{File, OpenOptions};
    use std::io::Write;

    fn file_with(path: &std::path::Path, bytes: &[u8]) -> File {
        File::create(path).unwrap().write_all(bytes).unwrap();
        File::open(path).unwrap()
    }

    /// A store's count starts changed; a passed check makes it clean; a
    /// truncation, a write, or a truncation through another name of the
    /// file (a hard link in another folder) makes it changed again.
    #[test]
    fn changes_to_a_watched_file_are_seen_through_any_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("other")).unwrap();
        let path = dir.path().join("0.zr");
        let file = file_with(&path, &[7; 4096]);
        let link = dir.path().join("other").join("link.zr");
        std::fs::hard_link(&path, &link).unwrap();
        let changes = Changes::new();
        let watch = changes.watch(&file);
        assert!(watch.is_some(), "a file in a temporary folder is watched");
        let check = |expect_change: bool| match changes.to_check(&poll()) {
            Check::All(token) => {
                assert!(expect_change, "a change seen where none was made");
                changes.checked(token);
            }
            Check::Nothing => assert!(!expect_change, "a change missed"),
            Check::Unwatched => panic!("the file lost its watch"),
        };
        check(true);
        check(false);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100)
            .unwrap();
        check(true);
        check(false);
        OpenOptions::new()
            .write(true)
            .open(&link)
            .unwrap()
            .set_len(10)
            .unwrap();
        check(true);
        OpenOptions::new()
            .append(true)
            .open(&link)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        check(true);
        check(false);
        drop(watch);
        // Its watch gone, a change to the file reaches nobody, and the
        // events read for it go nowhere.
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        let _ = poll();
    }

    /// Two stores watching one file (two handles on one store) both see
    /// its change, and one dropping its watch leaves the other's.
    #[test]
    fn one_file_watched_by_two_stores() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.zr");
        let (a, b) = (file_with(&path, &[1; 64]), File::open(&path).unwrap());
        let (first, second) = (Changes::new(), Changes::new());
        let watch_a = first.watch(&a).unwrap();
        let _watch_b = second.watch(&b).unwrap();
        for changes in [&first, &second] {
            let Check::All(token) = changes.to_check(&poll()) else {
                panic!("a new count is changed");
            };
            changes.checked(token);
        }
        drop(watch_a);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1)
            .unwrap();
        assert!(matches!(second.to_check(&poll()), Check::All(_)));
    }

    /// A file on a file system that is not known to be local gets no
    /// watch, and its store checks at every read.
    #[test]
    fn files_elsewhere_are_unwatched() {
        let proc_file = File::open("/proc/self/status").unwrap();
        let changes = Changes::new();
        assert!(changes.watch(&proc_file).is_none());
        assert_eq!(changes.to_check(&poll()), Check::Unwatched);
    }
}
