//! Per-record checksums: damage that decodes to plausible bytes is caught on
//! gather and by `verify`, and checksums follow records through delete and
//! compaction.

mod common;

use std::os::unix::fs::FileExt;

use common::{compressible, noise, opts, read_all, Rng};
use zrecord::layout::{entry_offset, ENTRY_LEN};
use zrecord::{chunk_file_name, Codec, Error, RecordLoc, Store, StoreOptions, CHECKSUM_FILE_NAME};

fn checked() -> StoreOptions {
    StoreOptions {
        checksums: true,
        chunk_capacity: 20_000,
        ..StoreOptions::default()
    }
}

fn model(rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..24)
        .map(|i| {
            if i % 3 == 0 {
                noise(rng, 900)
            } else {
                compressible(rng, 2000 + i * 10)
            }
        })
        .collect()
}

fn fill(store: &Store, recs: &[Vec<u8>]) {
    for (k, part) in recs.chunks(6).enumerate() {
        let slices: Vec<&[u8]> = part.iter().map(Vec::as_slice).collect();
        store.append(&slices, &opts(Codec::ALL[k % 4])).unwrap();
    }
}

/// Flips a byte in the middle of record `index`'s stored bytes; returns
/// (chunk, offset) of the record.
fn damage(path: &std::path::Path, index: u64) -> (u16, u32) {
    let meta = std::fs::File::open(path.join("meta.zr")).unwrap();
    let mut e = [0u8; ENTRY_LEN];
    meta.read_exact_at(&mut e, entry_offset(index as usize) as u64)
        .unwrap();
    let RecordLoc {
        offset,
        phys_length: phys,
        chunk_id: chunk,
        ..
    } = RecordLoc::from_bytes(&e);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join(chunk_file_name(chunk)))
        .unwrap();
    let at = offset as u64 + phys as u64 / 2;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x20], at).unwrap();
    (chunk, offset)
}

#[test]
fn damage_is_caught_on_gather_and_reported_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let recs = model(&mut Rng(4));
    fill(&Store::open_with(&path, &checked()).unwrap(), &recs);
    // A raw record (index 0) and a compressed one (index 7).
    let spots = [damage(&path, 0), damage(&path, 7)];

    let store = Store::open_with(&path, &checked()).unwrap();
    for (index, (chunk, offset)) in [0u64, 7].into_iter().zip(spots) {
        let mut dst = vec![0; 3000];
        match store.gather(&[index], &mut dst, 3000) {
            Err(Error::CorruptRecord {
                index: i,
                chunk: c,
                offset: o,
                ..
            }) => {
                assert_eq!((i, c, o), (index, chunk, offset))
            }
            other => panic!("record {index}: expected a checksum error, got {other:?}"),
        }
    }
    let report = store.verify().unwrap();
    assert!(report.checksummed);
    assert_eq!(report.records, 24);
    let bad: Vec<u64> = report.bad.iter().map(|b| b.index).collect();
    assert_eq!(bad, [0, 7]);
    // Without checksum checks the damaged raw record reads back wrong: the
    // checksums are what catches it.
    let unchecked = Store::open(&path).unwrap();
    let mut dst = vec![0; 900];
    unchecked.gather(&[0], &mut dst, 900).unwrap();
    assert_ne!(dst, recs[0]);
}

#[test]
fn checksums_follow_records_through_delete_compact_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let mut recs = model(&mut Rng(8));
    let mut store = Store::open_with(&path, &checked()).unwrap();
    fill(&store, &recs);
    store.delete(&[0, 5, 23, 11]).unwrap();
    for t in [23, 11, 5, 0] {
        recs.swap_remove(t);
    }
    let report = store.compact().unwrap();
    assert!(report.moved > 0);
    drop(store);
    let store = Store::open_with(&path, &checked()).unwrap();
    assert_eq!(read_all(&store), recs, "every gather verified");
    assert!(store.verify().unwrap().bad.is_empty());
}

#[test]
fn enabling_checksums_on_an_existing_store_covers_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let recs = model(&mut Rng(2));
    fill(&Store::open(&path).unwrap(), &recs);
    assert!(!path.join(CHECKSUM_FILE_NAME).exists());
    let store = Store::open_with(&path, &checked()).unwrap();
    assert!(path.join(CHECKSUM_FILE_NAME).exists());
    assert_eq!(read_all(&store), recs);
    drop(store);
    damage(&path, 3);
    let report = Store::open(&path).unwrap().verify().unwrap();
    assert_eq!(report.bad.iter().map(|b| b.index).collect::<Vec<_>>(), [3]);
}

#[test]
fn an_entry_rewritten_behind_the_sidecar_is_not_trusted() {
    // What a writer that does not know the sidecar leaves behind: a table
    // entry whose checksum slot belongs to another record.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let recs = model(&mut Rng(6));
    fill(&Store::open_with(&path, &checked()).unwrap(), &recs);
    let meta = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join("meta.zr"))
        .unwrap();
    // Records 0 (raw, 900 bytes) and 1 (compressed, 2010 bytes) differ in
    // size, so their checksum slots describe different records.
    let mut e = [0u8; ENTRY_LEN];
    meta.read_exact_at(&mut e, entry_offset(1) as u64).unwrap();
    meta.write_all_at(&e, entry_offset(5) as u64).unwrap();
    let store = Store::open_with(&path, &checked()).unwrap();
    let mut dst = vec![0; 3000];
    let err = store.gather(&[5], &mut dst, 3000).unwrap_err();
    assert!(
        err.to_string().contains("describes another record"),
        "{err}"
    );
    store.gather(&[1], &mut dst, 3000).unwrap();
}

#[test]
fn stores_without_the_option_still_verify_by_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.zr")).unwrap();
    fill(&store, &model(&mut Rng(1)));
    let report = store.verify().unwrap();
    assert!(!report.checksummed);
    assert!(report.bad.is_empty());
}
