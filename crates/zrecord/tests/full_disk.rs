//! A full disk fails an append with the system's error, and changes
//! nothing: `meta.zr` and `checksums.zr` are written through shared
//! mappings, where a store into a hole with no block left to give it kills
//! the process (SIGBUS), so their blocks are allocated before each such
//! write (`files/table_blocks.rs`). The Python suite fills a real tmpfs
//! (`tests/python/test_reliability.py`); here the I/O hook says when.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{opts, read_all};
use zrecord::{Codec, Error, IoEvent, IoHook, Store, StoreOptions};

fn open_with(path: &std::path::Path, hook: Arc<dyn IoHook>) -> Store {
    let options = StoreOptions {
        io_hook: Some(hook),
        ..StoreOptions::default()
    };
    Store::open_with(path, &options).unwrap()
}

/// Records which spans of each table file were allocated, and fails every
/// write into a mapping outside them, as the kernel would on a full disk.
#[derive(Default)]
struct Mapped {
    /// `(checksums, offset, len)` of each allocation.
    allocated: Mutex<Vec<(bool, usize, usize)>>,
}

impl IoHook for Mapped {
    fn before(&self, event: &IoEvent<'_>) -> std::io::Result<()> {
        let mut allocated = self.allocated.lock().unwrap();
        let (sums, offset, len) = match event {
            IoEvent::MetaAllocate { offset, len } => {
                allocated.push((false, *offset, *len));
                return Ok(());
            }
            IoEvent::ChecksumAllocate { offset, len } => {
                allocated.push((true, *offset, *len));
                return Ok(());
            }
            IoEvent::MetaWrite { offset, bytes } => (false, *offset, bytes.len()),
            IoEvent::ChecksumWrite { offset, bytes } => (true, *offset, bytes.len()),
            _ => return Ok(()),
        };
        // The first page was written whole when the file was made.
        let covered = offset + len <= 4096
            || allocated
                .iter()
                .any(|&(s, at, n)| s == sums && at <= offset && offset + len <= at + n);
        match covered {
            true => Ok(()),
            false => Err(std::io::Error::other(format!(
                "a store at {offset} of {} with no block allocated",
                if sums { "checksums.zr" } else { "meta.zr" }
            ))),
        }
    }
}

#[test]
fn table_writes_go_only_where_blocks_were_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(Mapped::default());
    let store = open_with(&dir.path().join("s"), hook.clone());
    // 100,000 one-byte records: tables of 1.6 MB and 800 kB, data of 100 kB.
    let records: Vec<[u8; 1]> = (0..100_000u32).map(|i| [(i % 251) as u8]).collect();
    let slices: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
    for batch in slices.chunks(1000) {
        store.append(batch, &opts(Codec::Raw)).unwrap();
    }
    assert_eq!(
        read_all(&store),
        records.iter().map(|r| r.to_vec()).collect::<Vec<_>>()
    );
    // Allocated in spans that grow, not once per append.
    let allocations = hook.allocated.lock().unwrap().len();
    assert!((2..=40).contains(&allocations), "{allocations} allocations");
}

/// Fails the allocations of one table file with ENOSPC while armed.
struct Full {
    checksums: bool,
    armed: AtomicBool,
}

impl IoHook for Full {
    fn before(&self, event: &IoEvent<'_>) -> std::io::Result<()> {
        let hit = match event {
            IoEvent::MetaAllocate { .. } => !self.checksums,
            IoEvent::ChecksumAllocate { .. } => self.checksums,
            _ => false,
        };
        match hit && self.armed.load(Ordering::Relaxed) {
            true => Err(std::io::ErrorKind::StorageFull.into()),
            false => Ok(()),
        }
    }
}

#[test]
fn a_full_disk_fails_the_append_with_its_error_and_changes_nothing() {
    for checksums in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let full = Arc::new(Full {
            checksums,
            armed: AtomicBool::new(false),
        });
        let store = open_with(&dir.path().join("s"), full.clone());
        let record = |i: usize| vec![(i % 251) as u8; 1 + i % 7];
        let mut model: Vec<Vec<u8>> = (0..300).map(record).collect();
        let slices: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
        store.append(&slices, &opts(Codec::Raw)).unwrap();

        full.armed.store(true, Ordering::Relaxed);
        let more: Vec<Vec<u8>> = (300..5000).map(record).collect();
        let slices: Vec<&[u8]> = more.iter().map(Vec::as_slice).collect();
        let err = store.append(&slices, &opts(Codec::Raw)).unwrap_err();
        let file = if checksums { "checksums.zr" } else { "meta.zr" };
        match &err {
            Error::Io { path, source } => {
                assert!(path.ends_with(file), "{err}");
                assert_eq!(source.kind(), std::io::ErrorKind::StorageFull, "{err}");
            }
            _ => panic!("expected the file system's error, got {err}"),
        }
        assert_eq!(read_all(&store), model, "{file}");

        // Space again: the append goes where the failed one would have.
        full.armed.store(false, Ordering::Relaxed);
        store.append(&slices, &opts(Codec::Raw)).unwrap();
        model.extend(more);
        drop(store);
        let store = Store::open(dir.path().join("s")).unwrap();
        assert_eq!(read_all(&store), model, "{file}");
        assert!(store.verify().unwrap().bad.is_empty(), "{file}");
    }
}
