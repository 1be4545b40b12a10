//! Readers and writers at once: 8 threads gather while 2 append. Every
//! record is self-describing, so a reader can check any record it sees.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{opts, Rng};
use zrecord::{Codec, Store};

/// Record `seq` of writer `w`: an 8-byte header then bytes derived from it.
fn record(w: u8, seq: u32) -> Vec<u8> {
    let len = 8 + (seq as usize * 37 + w as usize * 101) % 3000;
    let mut r = Vec::with_capacity(len);
    r.extend_from_slice(&[w, 0, 0, 0]);
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend((8..len).map(|i| (i as u32 / 5 + seq * 7 + w as u32) as u8));
    r
}

fn check(bytes: &[u8]) {
    let w = bytes[0];
    let seq = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    assert_eq!(bytes, &record(w, seq)[..], "record {seq} of writer {w}");
}

#[test]
fn eight_readers_and_two_writers_see_only_whole_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Store::open_with(dir.path().join("s.zr"), &common::small_chunks(200_000)).unwrap(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u8)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                for batch in 0..60u32 {
                    let recs: Vec<Vec<u8>> = (0..20).map(|k| record(w, batch * 20 + k)).collect();
                    let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
                    let codec = Codec::ALL[(batch as usize + w as usize) % 4];
                    store.append(&slices, &opts(codec)).unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..8u64)
        .map(|r| {
            let (store, done) = (store.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(r + 1);
                let mut seen = 0u64;
                while !done.load(Ordering::Acquire) || seen == 0 {
                    let len = store.len() as u64;
                    if len == 0 {
                        continue;
                    }
                    let idxs: Vec<u64> = (0..64).map(|_| rng.below(len)).collect();
                    for rec in common::read(&store, &idxs) {
                        check(&rec);
                        seen += 1;
                    }
                }
                seen
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let seen: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(seen > 0);
    assert_eq!(store.len(), 2 * 60 * 20);
    // Each writer's records arrive in its own order, all of them present.
    let mut next = [0u32; 2];
    for rec in common::read_all(&store) {
        check(&rec);
        let seq = u32::from_le_bytes(rec[4..8].try_into().unwrap());
        assert_eq!(seq, next[rec[0] as usize]);
        next[rec[0] as usize] += 1;
    }
}
