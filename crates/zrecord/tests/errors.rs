//! Every refused request and every damaged store gives the typed error that
//! names it, and a refused request changes nothing. So does a full disk:
//! `meta.zr` and `checksums.zr` are written through shared mappings, where a
//! store into a hole with no block left to give it kills the process
//! (SIGBUS), so their blocks are allocated before each such write
//! (`files/table_blocks.rs`). The Python suite fills a real tmpfs
//! (`tests/python/test_reliability.py`); here the I/O hook says when.

mod common;

use common::{compressible, opts, read_all, Rng, BYTE_STEP};
use rayon::prelude::*;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use zrecord::layout::{
    entry_offset, ENTRY_CHUNK_ID_OFFSET, ENTRY_CODEC_OFFSET, ENTRY_LOGIC_LENGTH_OFFSET,
    ENTRY_OFFSET_OFFSET, LENGTH_OFFSET, MAGIC, MAGIC_OFFSET, VERSION_OFFSET,
};
use zrecord::{Codec, Error, IoEvent, IoHook, Store, StoreOptions, MAX_RECORD_LEN};

fn filled(dir: &tempfile::TempDir) -> Store {
    let store = Store::open(dir.path().join("s.zr")).unwrap();
    let mut rng = Rng(21);
    let recs: Vec<Vec<u8>> = (0..4).map(|_| compressible(&mut rng, 1000)).collect();
    let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    store.append(&slices, &opts(Codec::Flate)).unwrap();
    store
}

fn patch(path: &std::path::Path, offset: usize, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset as u64).unwrap();
}

#[test]
fn opening_what_is_not_a_store_is_refused_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    drop(filled(&dir));
    let meta = path.join("meta.zr");

    patch(&meta, MAGIC_OFFSET, b"NOPE");
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, Error::NotAStore { .. }), "{err}");
    assert!(err.to_string().contains("meta.zr"), "{err}");
    patch(&meta, MAGIC_OFFSET, &MAGIC);

    patch(&meta, VERSION_OFFSET, &3u16.to_le_bytes());
    let err = Store::open(&path).err().unwrap();
    assert!(
        matches!(
            err,
            Error::UnsupportedVersion {
                found: 3,
                supported: 2,
                ..
            }
        ),
        "{err}"
    );
    patch(&meta, VERSION_OFFSET, &1u16.to_le_bytes());

    patch(&meta, LENGTH_OFFSET, &(1u32 << 25).to_le_bytes());
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, Error::NotAStore { .. }), "{err}");
    patch(&meta, LENGTH_OFFSET, &4u32.to_le_bytes());

    let f = OpenOptions::new().write(true).open(&meta).unwrap();
    f.set_len(4096).unwrap();
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, Error::NotAStore { .. }), "{err}");

    let missing = dir.path().join("nothing-here");
    let options = StoreOptions {
        create: false,
        ..StoreOptions::default()
    };
    assert!(matches!(
        Store::open_with(&missing, &options),
        Err(Error::NotFound { .. })
    ));
    assert!(!missing.exists(), "create: false creates nothing");
}

#[test]
fn bad_reads_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = filled(&dir);
    let mut dst = vec![0x5A; 4000];

    let err = store.gather(&[0, 4], &mut dst, 1000).unwrap_err();
    assert!(
        matches!(
            err,
            Error::IndexOutOfRange {
                index: 4,
                len: 4,
                ..
            }
        ),
        "{err}"
    );
    let err = store.gather(&[0, 1], &mut dst, 999).unwrap_err();
    assert!(
        matches!(err, Error::BufferTooSmall { index: 0, .. }),
        "{err}"
    );
    let err = store.gather(&[0, 1, 2, 3, 0], &mut dst, 1000).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BufferTooSmall {
                index: 0,
                needed: 5000,
                available: 4000,
                ..
            }
        ),
        "{err}"
    );
    let err = store
        .gather_ragged(&[0, 1], &mut dst, &[0, 999])
        .unwrap_err();
    assert!(matches!(err, Error::DestinationOverlap { .. }), "{err}");
    let err = store
        .gather_ragged(&[2, 1, 0], &mut dst, &[2000, 0, 1500])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::DestinationOverlap {
                first: 0,
                second: 2,
                ..
            }
        ),
        "{err}"
    );
    let err = store.gather_ragged(&[0], &mut dst, &[3001]).unwrap_err();
    assert!(matches!(err, Error::BufferTooSmall { .. }), "{err}");
    let err = store
        .gather_ragged(&[0], &mut dst, &[u64::MAX])
        .unwrap_err();
    assert!(matches!(err, Error::BufferTooSmall { .. }), "{err}");
    let err = store.gather_ragged(&[0, 1], &mut dst, &[0]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = store.lengths(&[9]).unwrap_err();
    assert!(
        matches!(err, Error::IndexOutOfRange { index: 9, .. }),
        "{err}"
    );
    assert!(dst.iter().all(|&b| b == 0x5A), "nothing was written");
    // Out-of-order but disjoint ranges are fine.
    store
        .gather_ragged(&[2, 1, 0], &mut dst, &[2000, 0, 1000])
        .unwrap();
}

#[test]
fn bad_appends_and_deletes_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = filled(&dir);
    let before = read_all(&store);
    let big = vec![0u8; MAX_RECORD_LEN + 1];
    let err = store.append(&[b"ok", &big], &opts(Codec::Raw)).unwrap_err();
    assert!(
        matches!(err, Error::RecordTooLarge { position: 1, .. }),
        "{err}"
    );
    let err = store
        .append_fixed(&big, 1, MAX_RECORD_LEN + 1, &opts(Codec::Raw))
        .unwrap_err();
    assert!(matches!(err, Error::RecordTooLarge { .. }), "{err}");
    let err = store
        .append_fixed(&[0; 10], 3, 4, &opts(Codec::Raw))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = store
        .append_ragged(&[0; 10], &[0, 8], &[4, 4], &opts(Codec::Raw))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = store
        .append_ragged(&[0; 10], &[0], &[4, 4], &opts(Codec::Raw))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = store.delete(&[0, 1, 4]).unwrap_err();
    assert!(
        matches!(err, Error::IndexOutOfRange { index: 4, .. }),
        "{err}"
    );
    assert_eq!(read_all(&store), before);
    assert_eq!(store.stats().records, 4);
}

#[test]
fn damaged_records_are_reported_with_index_chunk_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    drop(filled(&dir));
    let meta = path.join("meta.zr");
    let entry = |i: usize| entry_offset(i);
    let expect_corrupt = |index: u64| {
        let store = Store::open(&path).unwrap();
        let mut dst = vec![0; 1000];
        let err = store.gather(&[index], &mut dst, 1000).unwrap_err();
        match &err {
            Error::CorruptRecord { index: i, .. } => assert_eq!(*i, index),
            other => panic!("expected a corrupt record, got {other}"),
        }
        assert!(
            err.to_string().contains(&format!("record {index}")),
            "{err}"
        );
        err
    };

    // An unknown codec tag.
    patch(&meta, entry(1) + ENTRY_CODEC_OFFSET, &[9]);
    assert!(expect_corrupt(1).to_string().contains("codec tag 9"));
    patch(&meta, entry(1) + ENTRY_CODEC_OFFSET, &[1]);

    // An offset past the end of the chunk file.
    patch(
        &meta,
        entry(2) + ENTRY_OFFSET_OFFSET,
        &4_000_000u32.to_le_bytes(),
    );
    let err = expect_corrupt(2);
    assert!(matches!(
        err,
        Error::CorruptRecord {
            offset: 4_000_000,
            chunk: 0,
            ..
        }
    ));

    // A chunk that does not exist.
    patch(&meta, entry(3) + ENTRY_CHUNK_ID_OFFSET, &7u16.to_le_bytes());
    assert!(expect_corrupt(3).to_string().contains("missing"));

    // A logical length that disagrees with the stream, and one over the limit.
    patch(
        &meta,
        entry(0) + ENTRY_LOGIC_LENGTH_OFFSET,
        &999u32.to_le_bytes(),
    );
    let store = Store::open(&path).unwrap();
    let mut dst = vec![0; 1000];
    assert!(matches!(
        store.gather(&[0], &mut dst, 1000),
        Err(Error::CorruptRecord { .. })
    ));
    drop(store);
    patch(
        &meta,
        entry(0) + ENTRY_LOGIC_LENGTH_OFFSET,
        &(2u32 << 20).to_le_bytes(),
    );
    let store = Store::open(&path).unwrap();
    let mut dst = vec![0; 2 << 20];
    assert!(matches!(
        store.gather(&[0], &mut dst, 2 << 20),
        Err(Error::CorruptRecord { .. })
    ));
}

#[test]
fn corrupt_compressed_payloads_fail_cleanly_and_stay_inside_the_destination() {
    // Without checksums (a later feature) a flipped byte can still decode to
    // other bytes of the right length; what must hold is that decoding never
    // panics, never writes outside the destination, and that every error
    // is a CorruptRecord naming the record.
    let mut rng = Rng(5);
    let rec = compressible(&mut rng, 3000);
    // A store per codec, each damaged on its own: spread over the cores.
    [Codec::Flate, Codec::Lz4, Codec::Zstd]
        .into_par_iter()
        .for_each(|codec| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.zr");
            let store = Store::open(&path).unwrap();
            store.append(&[&rec], &opts(codec)).unwrap();
            let phys = store.stats().live_bytes;
            assert!(phys < 3000, "{codec:?} compressed");
            drop(store);
            let chunk = path.join("0.zr");
            let pristine = std::fs::read(&chunk).unwrap();
            let (mut errors, mut clean) = (0, 0);
            for pos in (0..phys).step_by(BYTE_STEP) {
                let mut damaged = pristine.clone();
                damaged[pos as usize] ^= 0x55;
                std::fs::write(&chunk, &damaged).unwrap();
                let store = Store::open(&path).unwrap();
                let stride = 3100;
                // Two slots, then a guard the gather must never touch.
                let mut dst = vec![0xC3u8; stride * 2 + 64];
                let result = store.gather(&[0, 0], &mut dst[..stride * 2], stride);
                match result {
                    Ok(()) => {
                        clean += 1;
                        let tails = [&dst[3000..stride], &dst[stride + 3000..stride * 2]];
                        assert!(
                            tails.iter().all(|t| t.iter().all(|&b| b == 0)),
                            "{codec:?}: slot tails are zeroed"
                        );
                    }
                    Err(Error::CorruptRecord {
                        index: 0,
                        chunk: 0,
                        offset: 0,
                        ..
                    }) => errors += 1,
                    Err(other) => panic!("{codec:?} byte {pos}: unexpected {other}"),
                }
                assert!(
                    dst[stride * 2..].iter().all(|&b| b == 0xC3),
                    "{codec:?} wrote past the destination"
                );
            }
            assert!(
                errors > 0,
                "{codec:?}: some damage must be detected ({clean} clean)"
            );
        });
}

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
