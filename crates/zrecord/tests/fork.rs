//! A handle inherited by a forked child: it reads, and refuses every write
//! at once, never sharing its parent's locks and never waiting on a mutex
//! that a parent thread held at the fork; an inherited collection checks
//! its shards' files at every read, as the parent's watches tell the child
//! nothing. One test in a binary of its own, so that no other test's
//! threads are running when it forks.

#![cfg(unix)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{opts, read_all};
use zrecord::{Codec, Collection, CollectionWriter, Error, ShardLimits, Store, StoreOptions};

/// Runs `child` in a forked child, which exits 0 when it returns true; the
/// child is killed by SIGALRM if it takes more than 20 s (a hang).
fn in_forked_child(child: impl FnOnce() -> bool) -> libc::c_int {
    // SAFETY: fork has no memory-safety preconditions; the child only runs
    // `child` and then `_exit`, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: alarm and _exit are async-signal-safe and take no pointers.
        unsafe { libc::alarm(20) };
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
        // SAFETY: as above.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer for the call's duration.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

fn forked(result: zrecord::Result<impl std::fmt::Debug>, what: &str) -> bool {
    match result {
        Err(Error::ForkedHandle { what: w, .. }) => w == what,
        other => {
            eprintln!("{what} in the child: {other:?}");
            false
        }
    }
}

#[test]
fn a_forked_child_reads_its_inherited_handle_and_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let mut owned = Store::open(&path).unwrap();
    owned
        .append(&[b"one", b"two", b"three"], &opts(Codec::Flate))
        .unwrap();
    owned.delete(&[1]).unwrap();
    // A parent thread appends through `shared` without pause, so the fork
    // finds its writer mutex and the append lock held at some instant.
    let shared = Arc::new(Store::open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let appender = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                shared.append(&[b"parent"], &opts(Codec::Raw)).unwrap();
                n += 1;
            }
            n
        })
    };
    // A collection of three shards of four 32-byte records, read twice, so
    // that the parent reads it through its shards' views.
    let collection_path = dir.path().join("c");
    let limits = ShardLimits {
        max_records: 4,
        ..ShardLimits::default()
    };
    let mut writer =
        CollectionWriter::new(&collection_path, &StoreOptions::default(), limits).unwrap();
    let records: Vec<[u8; 32]> = (0..12u8).map(|i| [i; 32]).collect();
    let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
    writer.append(&refs, &opts(Codec::Raw)).unwrap();
    writer.publish().unwrap();
    let second_shard = collection_path.join(&writer.shards()[1]);
    let collection = Collection::open(&collection_path).unwrap();
    let all: Vec<u64> = (0..12).collect();
    let mut dst = vec![0u8; 12 * 32];
    for _ in 0..2 {
        collection.gather_exact(&all, &mut dst, 32).unwrap();
    }
    assert_eq!(dst, records.concat());
    std::thread::sleep(Duration::from_millis(50));
    let status = in_forked_child(|| {
        let read = read_all(&owned)[..2] == [b"one".to_vec(), b"three".to_vec()];
        let wrote_nothing = read
            && forked(shared.append(&[b"child"], &opts(Codec::Raw)), "append")
            && forked(owned.append(&[b"child"], &opts(Codec::Raw)), "append")
            && forked(owned.delete(&[0]), "delete")
            && forked(owned.compact(), "compact");
        // The second shard's chunk loses its records' bytes: the child's
        // read of them fails, as no watch of the child's tells it.
        let chunk = second_shard.join(zrecord::chunk_file_name(0));
        std::fs::OpenOptions::new()
            .write(true)
            .open(chunk)
            .and_then(|f| f.set_len(16))
            .unwrap();
        let mut dst = [0u8; 32];
        let refused = match collection.gather_exact(&[4], &mut dst, 32) {
            Err(Error::CorruptRecord { .. }) => true,
            other => {
                eprintln!("a truncated shard read in the child: {other:?}, {dst:?}");
                false
            }
        };
        wrote_nothing && refused
    });
    stop.store(true, Ordering::Relaxed);
    let appended = appender.join().unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed or hung (wait status {status:#x})"
    );
    // The parent's handles still write; the child wrote nothing.
    owned.append(&[b"last"], &opts(Codec::Raw)).unwrap();
    let all = read_all(&owned);
    assert_eq!(all.len() as u64, 3 + appended);
    assert!(all[2..all.len() - 1].iter().all(|r| r == b"parent"));
    assert!(all.iter().all(|r| r != b"child"));
}
