//! Collections under a low limit on open files: a process allowed few files
//! (`ulimit -n`; 1,024 is a common default) reads collections of more
//! shards than it can hold open, two at once as a table's streams are read,
//! and gets every record right, never "too many open files". Each shard
//! store holds three or four files open while it is open. And a store that
//! runs out of files while it compacts says so, not that it is corrupt.
//!
//! Its own test binary: the limit is the whole process's, and its tests
//! take turns (`FILES`).

#![cfg(unix)]

mod common;

use std::path::Path;
use std::sync::Mutex;

use common::{noise, opts, Rng};
use zrecord::{Codec, Collection, CollectionWriter, Error, ShardLimits, Store, StoreOptions};

/// Held by each test: they change and use up the process's open files.
static FILES: Mutex<()> = Mutex::new(());

const SHARDS: usize = 300;
const PER_SHARD: u32 = 3;
const LEN: usize = 40;
/// Below what two collections' shards need open at once (2 × 300 × 3).
const FILE_LIMIT: u64 = 512;
/// Files left to the collections when the program takes the rest: fewer
/// than the budget's 96 stores need, more than two reads' groups of 16.
const FILES_LEFT: u64 = 150;

fn write(dir: &Path, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    let records: Vec<Vec<u8>> = (0..SHARDS * PER_SHARD as usize)
        .map(|_| noise(&mut rng, LEN))
        .collect();
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let limits = ShardLimits {
        max_records: PER_SHARD,
        max_bytes: 1 << 20,
    };
    let mut w = CollectionWriter::new(dir, &StoreOptions::default(), limits).unwrap();
    w.append(&refs, &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    records
}

/// Sets the soft limit on open files to `to` (at most the hard limit), and
/// returns the limit it had.
fn set_file_limit(to: libc::rlim_t) -> libc::rlim_t {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is valid for reads and writes of an `rlimit`.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        let had = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max.min(to);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        had
    }
}

/// Descriptors this process has open.
fn open_files() -> u64 {
    std::fs::read_dir("/dev/fd").unwrap().count() as u64
}

/// Reads both collections at once, each from a thread of its own, random
/// batches and whole passes, against their models.
fn read_both(paths: &[std::path::PathBuf], models: &[Vec<Vec<u8>>]) {
    std::thread::scope(|scope| {
        for (path, model) in paths.iter().zip(models) {
            scope.spawn(move || {
                let c = Collection::open(path).unwrap();
                let mut rng = Rng(path.as_os_str().len() as u64);
                let mut dst = vec![0u8; 256 * LEN];
                for round in 0..12 {
                    // Random batches meet most shards; every fourth reads
                    // the whole collection in order.
                    let idxs: Vec<u64> = if round % 4 == 3 {
                        (0..c.len()).collect()
                    } else {
                        (0..256).map(|_| rng.below(c.len())).collect()
                    };
                    dst.resize(idxs.len() * LEN, 0);
                    c.gather_exact(&idxs, &mut dst, LEN).unwrap();
                    for (k, &i) in idxs.iter().enumerate() {
                        assert_eq!(&dst[k * LEN..(k + 1) * LEN], &model[i as usize][..]);
                    }
                    let lens = c.lengths(&idxs).unwrap();
                    assert!(lens.iter().all(|&l| l as usize == LEN));
                }
            });
        }
    });
}

#[test]
fn collections_of_more_shards_than_files_allowed_read_right() {
    let _turn = FILES.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let paths = [dir.path().join("a"), dir.path().join("b")];
    let models: Vec<Vec<Vec<u8>>> = paths
        .iter()
        .zip([1, 2])
        .map(|(p, seed)| write(p, seed))
        .collect();
    let had = set_file_limit(FILE_LIMIT);
    read_both(&paths, &models);
    // The program takes most of the files the budget counted on: opening a
    // shard runs out of files, and the collections let stores go instead.
    let taken: Vec<std::fs::File> = (open_files()..FILE_LIMIT - FILES_LEFT)
        .map(|_| std::fs::File::open("/dev/null").unwrap())
        .collect();
    read_both(&paths, &models);
    drop(taken);

    // Read in groups of shards, a bad request still writes nothing: a
    // wrong sample length, or destinations that overlap across groups.
    let c = Collection::open(&paths[0]).unwrap();
    let all: Vec<u64> = (0..c.len()).collect();
    let mut dst = vec![0xA5u8; all.len() * (LEN + 1)];
    let err = c.gather_exact(&all, &mut dst, LEN + 1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(dst.iter().all(|&b| b == 0xA5), "a refused gather wrote");
    // The first and the last record share a destination; the rest do not.
    let mut offsets: Vec<u64> = (0..all.len() as u64).map(|k| k * LEN as u64).collect();
    offsets[all.len() - 1] = 0;
    let err = c.gather_ragged(&all, &mut dst, &offsets).unwrap_err();
    let last = all.len() as u64 - 1;
    assert!(
        matches!(err, Error::DestinationOverlap { first: 0, second, .. } if second == last),
        "{err}"
    );
    assert!(dst.iter().all(|&b| b == 0xA5), "a refused gather wrote");
    set_file_limit(had);
}

#[test]
fn a_compaction_short_of_files_is_an_io_error_and_the_store_stays_whole() {
    let _turn = FILES.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        chunk_capacity: 64 << 10,
        ..StoreOptions::default()
    };
    let mut rng = Rng(7);
    let mut model: Vec<Vec<u8>> = (0..320).map(|_| noise(&mut rng, 4096)).collect();
    {
        let mut store = Store::open_with(dir.path(), &options).unwrap();
        let refs: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
        store.append(&refs, &opts(Codec::Raw)).unwrap();
        // Holes in the first chunk: compacting moves the records of every
        // chunk after it, opening each.
        let gone = [0, 3, 5];
        store.delete(&gone).unwrap();
        for &i in gone.iter().rev() {
            // A delete fills each hole with the last record (FORMAT.md).
            let last = model.pop().unwrap();
            if (i as usize) < model.len() {
                model[i as usize] = last;
            }
        }
    }
    // A new handle, which has opened no chunk file yet, with a few files
    // left to it: fewer than its 20 chunks.
    let mut store = Store::open_with(dir.path(), &options).unwrap();
    let had = set_file_limit(open_files() + 8);
    let err = store.compact().unwrap_err();
    set_file_limit(had);
    match &err {
        Error::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(libc::EMFILE), "{err}"),
        other => panic!("running out of files is not {other}"),
    }
    // Nothing was lost, and the compaction finishes with files to spare.
    let read = |store: &Store| {
        let idxs: Vec<u64> = (0..model.len() as u64).collect();
        let mut dst = vec![0u8; model.len() * 4096];
        store.gather_exact(&idxs, &mut dst, 4096).unwrap();
        dst
    };
    assert_eq!(read(&store), model.concat());
    store.compact().unwrap();
    assert_eq!(read(&store), model.concat());
}
