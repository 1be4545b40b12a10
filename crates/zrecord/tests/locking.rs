//! Locks between handles and processes: many readers, exclusive delete and
//! compact, and a killed holder never blocks the next one.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::opts;
use zrecord::{Codec, Error, Store};

const HOLDER_ENV: &str = "ZRECORD_TEST_HOLD_STORE";

/// Taken by every test that opens a store. A child spawned by one test
/// inherits, until its exec, the descriptions of the stores another test
/// has open, and with them their locks: that test would then see its store
/// open elsewhere, which is true for those microseconds.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Not a test of its own: the child process of the kill test. It opens the
/// store the environment names, commits a record and waits to be killed.
#[test]
#[ignore = "run as a child process by a_killed_process_never_blocks_the_store"]
fn hold_store_open_when_asked() {
    let Ok(path) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let store = Store::open(&path).unwrap();
    store
        .append(&[b"from the child"], &opts(Codec::Raw))
        .unwrap();
    println!("holding");
    std::thread::sleep(Duration::from_secs(60));
    drop(store);
}

fn filled(path: &std::path::Path) -> Store {
    let store = Store::open(path).unwrap();
    store
        .append(&[b"a", b"b", b"c"], &opts(Codec::Raw))
        .unwrap();
    store
}

#[test]
fn delete_and_compact_need_the_only_handle() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let mut first = filled(&path);
    let second = Store::open(&path).unwrap();
    for result in [first.delete(&[0]).err(), first.compact().err()] {
        match result {
            Some(Error::Busy { path: p, .. }) => assert!(p.ends_with("meta.zr")),
            other => panic!("expected Busy, got {other:?}"),
        }
    }
    assert_eq!(first.len(), 3, "the refused delete changed nothing");
    // Readers and appends from both handles still work.
    second.append(&[b"d"], &opts(Codec::Raw)).unwrap();
    assert_eq!(first.lengths(&[3]).unwrap(), [1]);
    drop(second);
    first.delete(&[0]).unwrap();
    first.compact().unwrap();
    // The exclusive lock is given back: a new handle opens again.
    assert_eq!(Store::open(&path).unwrap().len(), 3);
}

#[test]
fn a_killed_process_never_blocks_the_store() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let mut store = filled(&path);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hold_store_open_when_asked",
            "--ignored",
            "--nocapture",
        ])
        .env(HOLDER_ENV, &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the child holds the store open and has appended.
    let start = Instant::now();
    while store.len() < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "child never appended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(store.delete(&[0]), Err(Error::Busy { .. })));
    child.kill().unwrap();
    child.wait().unwrap();
    store.delete(&[0]).unwrap();
    assert_eq!(store.len(), 3);
    let recs = common::read_all(&store);
    assert!(
        recs.iter().any(|r| r == b"from the child"),
        "the child's commit survived its death"
    );
}
