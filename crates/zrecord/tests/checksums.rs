//! Per-record checksums: damage that decodes to plausible bytes is caught on
//! gather and by `verify`, and checksums follow records through delete and
//! compaction.

mod common;

use std::os::unix::fs::FileExt;

use common::{compressible, noise, opts, read_all, Rng};
use zrecord::layout::{entry_offset, ENTRY_LEN, LENGTH_OFFSET};
use zrecord::{
    chunk_file_name, Checksums, Codec, Error, RecordLoc, Store, StoreOptions, CHECKSUM_FILE_NAME,
};

fn checked() -> StoreOptions {
    StoreOptions {
        checksums: Checksums::On,
        chunk_capacity: 20_000,
        ..StoreOptions::default()
    }
}

fn unchecked() -> StoreOptions {
    StoreOptions {
        checksums: Checksums::Off,
        ..checked()
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

/// Points record `index`'s table entry `by` bytes further into its chunk,
/// as damage to the entry would.
fn shift_entry(path: &std::path::Path, index: usize, by: u32) {
    let meta = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join("meta.zr"))
        .unwrap();
    let mut e = [0u8; ENTRY_LEN];
    meta.read_exact_at(&mut e, entry_offset(index) as u64)
        .unwrap();
    let mut loc = RecordLoc::from_bytes(&e);
    loc.offset += by;
    meta.write_all_at(&loc.to_bytes(), entry_offset(index) as u64)
        .unwrap();
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
    let unchecked = Store::open_with(&path, &unchecked()).unwrap();
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
    fill(&Store::open_with(&path, &unchecked()).unwrap(), &recs);
    assert!(!path.join(CHECKSUM_FILE_NAME).exists());
    // The default leaves a store without checksums (0.5.0's) as it is.
    drop(Store::open(&path).unwrap());
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
    // The frontier and length still match what the sidecar covers, so no
    // other program wrote the table: an entry that its slot does not
    // describe is damaged.
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
        err.to_string().contains("does not match its checksum slot"),
        "{err}"
    );
    store.gather(&[1], &mut dst, 3000).unwrap();
}

#[test]
fn stores_without_the_option_still_verify_by_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path().join("s.zr"), &unchecked()).unwrap();
    fill(&store, &model(&mut Rng(1)));
    let report = store.verify().unwrap();
    assert!(!report.checksummed);
    assert!(report.bad.is_empty());
}

#[test]
fn a_store_made_with_the_defaults_catches_damage_to_raw_records_and_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let recs = model(&mut Rng(11));
    fill(&Store::open(&path).unwrap(), &recs);
    assert!(path.join(CHECKSUM_FILE_NAME).exists());
    // Payload: record 0 is raw (noise), so a flipped byte decodes fine.
    let (chunk, offset) = damage(&path, 0);
    // Entry: record 3 (raw, 900 bytes) pointed 16 bytes further into its
    // chunk still decodes to 900 plausible bytes.
    shift_entry(&path, 3, 16);
    let store = Store::open(&path).unwrap();
    let mut dst = vec![0; 900];
    match store.gather(&[0], &mut dst, 900) {
        Err(Error::CorruptRecord {
            index: 0,
            chunk: c,
            offset: o,
            ..
        }) => assert_eq!((c, o), (chunk, offset)),
        other => panic!("expected a checksum error, got {other:?}"),
    }
    assert!(matches!(
        store.gather(&[3], &mut dst, 900),
        Err(Error::CorruptRecord { index: 3, .. })
    ));
    assert_eq!(read_all_but(&store, &[0, 3]), without(&recs, &[0, 3]));
}

#[test]
fn a_handle_checks_each_record_once_until_records_move() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let recs = model(&mut Rng(12));
    let mut store = Store::open(&path).unwrap();
    fill(&store, &recs);
    let mut dst = vec![0; 900];
    store.gather(&[0], &mut dst, 900).unwrap();
    // Damage behind the handle's back, after it checked record 0: it is
    // trusted from then on (ops/verified_records.rs), where a new handle
    // checks it again.
    damage(&path, 0);
    store.gather(&[0], &mut dst, 900).unwrap();
    let fresh = Store::open(&path).unwrap();
    assert!(fresh.gather(&[0], &mut dst, 900).is_err());
    drop(fresh);
    // A delete moves records, so every record is checked again.
    store.delete(&[23]).unwrap();
    assert!(store.gather(&[0], &mut dst, 900).is_err());
}

/// A handle's first check makes its marks for the records the store held
/// then (`ops/verified_records.rs`). A record not checked yet is checked on
/// its first read, in a batch with records already checked (a gather takes
/// the marks once for the batch: `ops/gather.rs`), whether the marks cover
/// it or it was appended past them.
#[test]
fn a_record_is_checked_on_its_first_read_beside_checked_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let recs = equal_records(80, 500);
    // One chunk file: a batch's marks serve the first chunk's records.
    let options = StoreOptions {
        checksums: Checksums::On,
        ..StoreOptions::default()
    };
    let store = Store::open_with(&path, &options).unwrap();
    append_raw(&store, &recs[..8]);
    let mut dst = vec![0; 1000];
    store.gather(&[0, 1], &mut dst, 500).unwrap();
    damage(&path, 5);
    assert!(matches!(
        store.gather(&[1, 5], &mut dst, 500),
        Err(Error::CorruptRecord { index: 5, .. })
    ));
    // Past the 64 records the first marks cover.
    append_raw(&store, &recs[8..]);
    damage(&path, 70);
    assert!(matches!(
        store.gather(&[1, 70], &mut dst, 500),
        Err(Error::CorruptRecord { index: 70, .. })
    ));
    store.gather(&[1, 69], &mut dst, 500).unwrap();
    assert_eq!(dst, [&recs[1][..], &recs[69][..]].concat());
}

/// Runs `write` on the store at `path` as a program that keeps no
/// checksums would (loaderx 0.5.0 ignores `checksums.zr`): with the
/// sidecar out of its sight.
fn as_a_program_without_checksums(path: &std::path::Path, write: impl FnOnce(&mut Store)) {
    let (sidecar, hidden) = (path.join(CHECKSUM_FILE_NAME), path.with_extension("hidden"));
    std::fs::rename(&sidecar, &hidden).unwrap();
    write(&mut Store::open_with(path, &unchecked()).unwrap());
    std::fs::rename(&hidden, &sidecar).unwrap();
}

fn equal_records(n: usize, len: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(21);
    (0..n).map(|_| noise(&mut rng, len)).collect()
}

fn append_raw(store: &Store, recs: &[Vec<u8>]) {
    let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    store.append(&slices, &opts(Codec::Raw)).unwrap();
}

/// Records a program that keeps no checksums appended, moved into a hole
/// by its delete, or moved by its compaction read back as they are, where a
/// reader that trusted every slot would call them damaged; the records it
/// left alone are still checked.
#[test]
fn records_another_program_wrote_or_moved_read_unchecked_the_others_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    // Equal sizes, so a moved record's slot differs only in position.
    let mut recs = equal_records(12, 500);
    append_raw(&Store::open(&path).unwrap(), &recs[..8]);
    as_a_program_without_checksums(&path, |store| {
        append_raw(store, &recs[8..]);
        store.delete(&[2]).unwrap();
        store.compact().unwrap();
    });
    recs.swap_remove(2);
    let store = Store::open(&path).unwrap();
    assert_eq!(read_all(&store), recs);
    let report = store.verify().unwrap();
    assert!(report.checksummed && report.bad.is_empty());
    // Record 11 moved to index 2, records 3.. moved down by compaction,
    // records 8.. were appended: only 0 and 1 are where the slots say.
    assert_eq!(report.unchecked, 9);
    drop(store);
    damage(&path, 1);
    let store = Store::open(&path).unwrap();
    assert!(matches!(
        store.gather(&[1], &mut [0; 500], 500),
        Err(Error::CorruptRecord { index: 1, .. })
    ));
    drop(store);

    // Opening with `Checksums::On` covers them again (as they are now);
    // damage to one of them is then caught, and so is a rewritten entry.
    damage(&path, 1);
    drop(Store::open_with(&path, &checked()).unwrap());
    let store = Store::open(&path).unwrap();
    assert_eq!(store.verify().unwrap().unchecked, 0);
    drop(store);
    damage(&path, 9);
    assert_eq!(bad_records(&path), [9]);
}

/// Our appends after another program's keep checking what they write, and
/// a length grown by damage rather than by an append is caught: the
/// frontier has not moved since the sidecar last covered the table.
#[test]
fn after_another_programs_append_new_records_are_checked_and_phantoms_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let recs = equal_records(9, 300);
    append_raw(&Store::open(&path).unwrap(), &recs[..3]);
    as_a_program_without_checksums(&path, |store| append_raw(store, &recs[3..6]));
    let store = Store::open(&path).unwrap();
    append_raw(&store, &recs[6..]);
    assert_eq!(read_all(&store), recs);
    assert_eq!(store.verify().unwrap().unchecked, 3);
    drop(store);
    damage(&path, 7);
    assert_eq!(bad_records(&path), [7]);

    // A store whose length grows without its frontier moving.
    let path = dir.path().join("t.zr");
    append_raw(&Store::open(&path).unwrap(), &recs[..3]);
    let meta = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("meta.zr"))
        .unwrap();
    meta.write_all_at(&12u32.to_le_bytes(), LENGTH_OFFSET as u64)
        .unwrap();
    let store = Store::open(&path).unwrap();
    for phantom in 9..12 {
        match store.gather(&[phantom], &mut [], 0) {
            Err(Error::CorruptRecord { index, reason, .. }) => {
                assert_eq!(index, phantom);
                assert!(reason.contains("past the 3 records"), "{reason}");
            }
            other => panic!("phantom record {phantom}: {other:?}"),
        }
    }
}

/// A compaction by this implementation keeps the sidecar covering the table,
/// so a damaged entry afterwards is still an error rather than a record
/// read unchecked.
#[test]
fn our_compaction_keeps_the_table_covered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let recs = equal_records(10, 400);
    let mut store = Store::open(&path).unwrap();
    append_raw(&store, &recs);
    store.delete(&[0, 4]).unwrap();
    assert_eq!(store.compact().unwrap().moved, 8);
    assert_eq!(store.verify().unwrap().unchecked, 0);
    drop(store);
    shift_entry(&path, 5, 400);
    let store = Store::open(&path).unwrap();
    assert!(matches!(
        store.gather(&[5], &mut [0; 400], 400),
        Err(Error::CorruptRecord { index: 5, .. })
    ));
}

/// The records `verify` reports bad in the store at `path`, by index.
fn bad_records(path: &std::path::Path) -> Vec<u64> {
    let report = Store::open(path).unwrap().verify().unwrap();
    report.bad.iter().map(|b| b.index).collect()
}

/// Every record but those of `skip`, read one by one.
fn read_all_but(store: &Store, skip: &[u64]) -> Vec<Vec<u8>> {
    (0..store.len() as u64)
        .filter(|i| !skip.contains(i))
        .map(|i| common::read(store, &[i]).remove(0))
        .collect()
}

fn without(recs: &[Vec<u8>], skip: &[u64]) -> Vec<Vec<u8>> {
    let keep = |(i, _): &(usize, &Vec<u8>)| !skip.contains(&(*i as u64));
    recs.iter()
        .enumerate()
        .filter(keep)
        .map(|(_, r)| r.clone())
        .collect()
}
