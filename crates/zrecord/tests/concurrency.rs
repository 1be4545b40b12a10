//! Readers and writers at once: 8 threads gather while 2 append. Every
//! record is self-describing, so a reader can check any record it sees.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use common::{opts, Rng};
use zrecord::{Codec, Error, Store};

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

/// Slot `k` of a gather with `stride` holds record `idxs[k]` of `model`,
/// then zeros.
fn check_slots(model: &[Vec<u8>], idxs: &[u64], batch: &[u8], stride: usize, what: &str) {
    for (k, &i) in idxs.iter().enumerate() {
        let (want, slot) = (&model[i as usize], &batch[k * stride..(k + 1) * stride]);
        assert_eq!(&slot[..want.len()], &want[..], "{what} slot {k}");
        assert!(
            slot[want.len()..].iter().all(|&b| b == 0),
            "{what} slot {k} tail"
        );
    }
}

/// A ragged gather of `idxs` returns exactly those records of `model`.
fn check_ragged(store: &Store, model: &[Vec<u8>], idxs: &[u64], what: &str) {
    for (k, rec) in common::read(store, idxs).iter().enumerate() {
        assert_eq!(rec, &model[idxs[k] as usize], "{what} ragged slot {k}");
    }
}

/// Batches big enough to be split across the cores (several shards of
/// 48 KiB and more), from four threads at once so that some find the shard
/// crew busy: every slot holds its record, zeros after a short one, in both
/// gathers.
#[test]
fn split_batches_from_four_threads_match_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path().join("s.zr"), &common::small_chunks(1 << 22)).unwrap();
    let mut rng = Rng(7);
    let mut model: Vec<Vec<u8>> = Vec::new();
    for codec in Codec::ALL {
        let recs: Vec<Vec<u8>> = (0..60)
            .map(|_| {
                let len = rng.below(24_000) as usize;
                common::compressible(&mut rng, len)
            })
            .collect();
        let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
        store.append(&slices, &opts(codec)).unwrap();
        model.extend(recs);
    }
    let stride = 24_000;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (store, model) = (&store, &model);
            s.spawn(move || {
                let mut rng = Rng(100 + t);
                let mut dst = vec![0xAB; 256 * stride];
                for round in 0..60 {
                    let n = 1 + rng.below(256) as usize;
                    let idxs: Vec<u64> = (0..n).map(|_| rng.below(model.len() as u64)).collect();
                    store.gather(&idxs, &mut dst[..n * stride], stride).unwrap();
                    let what = format!("thread {t} round {round}");
                    check_slots(model, &idxs, &dst, stride, &what);
                    check_ragged(store, model, &idxs, &what);
                }
            });
        }
    });
}

/// Batches big enough to be written with streaming stores (16 MiB and up)
/// hold exactly the records, from two threads at once: records long and
/// short (plain copies below 4 KiB), a destination that starts off any
/// line boundary, zero tails, and ragged gathers as well.
#[test]
fn batches_written_past_the_cache_match_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.zr")).unwrap();
    let mut rng = Rng(11);
    let model: Vec<Vec<u8>> = (0..400)
        .map(|k| {
            let len = if k % 7 == 0 {
                rng.below(4096)
            } else {
                40_000 + rng.below(60_000)
            };
            common::noise(&mut rng, len as usize)
        })
        .collect();
    let slices: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    store.append(&slices, &opts(Codec::Raw)).unwrap();
    let stride = 100_000;
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (store, model) = (&store, &model);
            s.spawn(move || {
                let mut rng = Rng(200 + t);
                let mut dst = vec![0xAB; 256 * stride + 3];
                for round in 0..4 {
                    let idxs: Vec<u64> = (0..256).map(|_| rng.below(model.len() as u64)).collect();
                    let batch = &mut dst[3..];
                    store.gather(&idxs, batch, stride).unwrap();
                    let what = format!("thread {t} round {round}");
                    check_slots(model, &idxs, batch, stride, &what);
                    // Twice the indices: over 16 MiB whatever the lengths.
                    check_ragged(store, model, &[&idxs[..], &idxs[..]].concat(), &what);
                }
            });
        }
    });
}

/// A split batch with two unreadable records reports the earlier of them,
/// as a gather on one thread would.
#[test]
fn a_split_batch_reports_its_first_bad_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let store = Store::open_with(&path, &common::small_chunks(1 << 20)).unwrap();
    let mut rng = Rng(9);
    let recs: Vec<Vec<u8>> = (0..200).map(|_| common::noise(&mut rng, 20_000)).collect();
    let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    store.append(&slices, &opts(Codec::Raw)).unwrap();
    drop(store);
    // 52 records of 20 000 bytes fit a 1 MiB chunk file: record 60 is in
    // chunk 1 and record 180 in chunk 3.
    std::fs::remove_file(path.join("1.zr")).unwrap();
    std::fs::remove_file(path.join("3.zr")).unwrap();
    let store = Store::open(&path).unwrap();
    let mut idxs: Vec<u64> = (0..256).map(|k| k % 50).collect();
    idxs[200] = 60;
    idxs[40] = 180;
    let mut dst = vec![0u8; 256 * 20_000];
    match store.gather(&idxs, &mut dst, 20_000) {
        Err(zrecord::Error::CorruptRecord { index, .. }) => assert_eq!(index, 180),
        other => panic!("expected a CorruptRecord error, got {other:?}"),
    }
}

#[test]
fn handles_racing_to_create_one_store_all_append_to_the_same_one() {
    const HANDLES: u8 = 6;
    const EACH: u32 = 5;
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.zr");
        let start = Arc::new(Barrier::new(HANDLES as usize));
        let creators: Vec<_> = (0..HANDLES)
            .map(|w| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let store = Store::open(&path).unwrap();
                    let recs: Vec<Vec<u8>> = (0..EACH).map(|k| record(w, k)).collect();
                    let refs: Vec<&[u8]> = recs.iter().map(|r| &r[..]).collect();
                    // Appends of other handles may be in progress.
                    while let Err(e) = store.append(&refs, &opts(Codec::Raw)) {
                        assert!(matches!(e, Error::Busy { .. }), "{e}");
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        for c in creators {
            c.join().unwrap();
        }
        let store = Store::open(&path).unwrap();
        let mut seen: Vec<(u8, u32)> = common::read_all(&store)
            .iter()
            .map(|r| {
                check(r);
                (r[0], u32::from_le_bytes(r[4..8].try_into().unwrap()))
            })
            .collect();
        seen.sort();
        let all: Vec<(u8, u32)> = (0..HANDLES)
            .flat_map(|w| (0..EACH).map(move |k| (w, k)))
            .collect();
        assert_eq!(seen, all, "every handle's records, each once");
        let leftovers: Vec<_> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    }
}

/// A process that takes no lock (loaderx 0.5.0 deleting) may rewrite a table
/// entry while a gather runs. Here another descriptor of `meta.zr` flips
/// slot 0 between a 4-byte record and a 64-byte one, both valid, while
/// gathers of slot 0 into 4 bytes run: each must decode with the very entry
/// it checked, so it reads the short record or refuses the long one (or a
/// torn copy of either), and never writes past its 4 bytes: the canary
/// after them stays intact.
#[cfg(unix)]
#[test]
fn a_gather_decodes_from_the_entries_it_checked() {
    use std::os::unix::fs::FileExt;
    use zrecord::layout::{entry_offset, ENTRY_LEN};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let store = Store::open(&path).unwrap();
    store
        .append(&[b"tiny", &[7u8; 64]], &opts(Codec::Raw))
        .unwrap();
    let meta = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join("meta.zr"))
        .unwrap();
    let mut short = [0u8; ENTRY_LEN];
    let mut long = [0u8; ENTRY_LEN];
    meta.read_exact_at(&mut short, entry_offset(0) as u64)
        .unwrap();
    meta.read_exact_at(&mut long, entry_offset(1) as u64)
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for entry in [&long, &short] {
                    meta.write_all_at(entry, entry_offset(0) as u64).unwrap();
                }
            }
        })
    };
    let started = std::time::Instant::now();
    let mut buf = [0xAAu8; 128];
    let mut iterations = 0u32;
    while iterations < 200_000 && started.elapsed() < std::time::Duration::from_secs(3) {
        iterations += 1;
        let ragged = store.gather_ragged(&[0], &mut buf[..4], &[0]);
        let fixed = store.gather(&[0], &mut buf[..4], 4);
        for result in [ragged, fixed] {
            // A copy torn by the rewrite may read other bytes of the chunk
            // or be refused as corrupt; what matters is where it writes.
            match result {
                Ok(()) | Err(Error::BufferTooSmall { .. } | Error::CorruptRecord { .. }) => {}
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert!(
            buf[4..].iter().all(|&b| b == 0xAA),
            "a gather wrote past its destination after {iterations} tries"
        );
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
}
