//! Behaviour of whole stores: rollover, reopen, delete, compact, files on disk.

mod common;

use common::{
    assert_split_batches_are_checked_whole, compressible, noise, opts, read_all,
    samples_with_two_short, small_chunks, Rng, SAMPLE_LEN,
};
use zrecord::layout::{
    checksum_slot_offset, entry_offset, physical_address, CHECKSUM_COVERED_LEN,
    CHECKSUM_COVERED_OFFSET, CHECKSUM_FILE_LEN, CHECKSUM_HEADER_LEN, CHECKSUM_MAGIC,
    CHECKSUM_MAGIC_OFFSET, CHECKSUM_SLOT_LEN, CHECKSUM_VERSION, CHECKSUM_VERSION_OFFSET,
    ENTRY_CHUNK_ID_OFFSET, ENTRY_CODEC_OFFSET, ENTRY_LEN, ENTRY_LOGIC_LENGTH_OFFSET,
    ENTRY_OFFSET_OFFSET, ENTRY_PHYS_LENGTH_OFFSET, ENTRY_RESERVED_OFFSET, FORMAT_VERSION,
    HEADER_LEN, LENGTH_OFFSET, MAGIC, MAGIC_OFFSET, META_FILE_LEN, SLOT_DATA_CRC_OFFSET,
    SLOT_ENTRY_CRC_OFFSET, TABLE_OFFSET, TAIL_CHUNK_OFFSET, TAIL_OFFSET_OFFSET, VERSION_1,
    VERSION_BIG_RECORDS, VERSION_OFFSET,
};
use zrecord::{chunk_file_name, Codec, Store};

fn store_at(dir: &tempfile::TempDir, capacity: u64) -> Store {
    Store::open_with(dir.path().join("s.zr"), &small_chunks(capacity)).unwrap()
}

fn records(rng: &mut Rng, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                compressible(rng, len)
            } else {
                noise(rng, len)
            }
        })
        .collect()
}

fn append_all(store: &Store, recs: &[Vec<u8>], codec: Codec) -> u32 {
    let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    store.append(&slices, &opts(codec)).unwrap()
}

#[test]
fn records_roll_over_to_new_chunks_and_never_straddle() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, 1000);
    let recs = records(&mut Rng(7), 30, 300);
    append_all(&store, &recs, Codec::Raw);
    // Three 300-byte records fit in 1000 bytes, so 30 records need 10 chunks.
    for id in 0..10 {
        let len = std::fs::metadata(store.path().join(chunk_file_name(id)))
            .unwrap()
            .len();
        assert_eq!(len, 900, "chunk {id}");
    }
    assert!(!store.path().join(chunk_file_name(10)).exists());
    assert_eq!(read_all(&store), recs);
    let stats = store.stats();
    assert_eq!((stats.records, stats.live_bytes), (30, 9000));
    assert_eq!(stats.chunk_bytes, 9 * 1000 + 900);
}

#[test]
fn every_operation_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let options = small_chunks(5000);
    let mut rng = Rng(11);
    let mut model = Vec::new();
    for codec in Codec::ALL {
        let recs = records(&mut rng, 9, 700);
        append_all(&Store::open_with(&path, &options).unwrap(), &recs, codec);
        model.extend(recs);
        assert_eq!(read_all(&Store::open_with(&path, &options).unwrap()), model);
    }
    Store::open_with(&path, &options)
        .unwrap()
        .delete(&[3, 0, 35])
        .unwrap();
    for t in [35, 3, 0] {
        model.swap_remove(t);
    }
    assert_eq!(read_all(&Store::open_with(&path, &options).unwrap()), model);
    Store::open_with(&path, &options)
        .unwrap()
        .compact()
        .unwrap();
    assert_eq!(read_all(&Store::open_with(&path, &options).unwrap()), model);
}

#[test]
fn deleting_everything_leaves_an_empty_store_that_takes_appends() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_at(&dir, 4000);
    let recs = records(&mut Rng(3), 20, 500);
    append_all(&store, &recs, Codec::Flate);
    let all: Vec<u64> = (0..20).rev().chain(0..20).collect();
    store.delete(&all).unwrap();
    assert_eq!(store.len(), 0);
    store.compact().unwrap();
    assert_eq!(store.stats().chunk_bytes, 0);
    assert_eq!(
        std::fs::metadata(store.path().join("0.zr")).unwrap().len(),
        0
    );
    assert!(!store.path().join("1.zr").exists());
    // Deleted indices are reused by the next append.
    assert_eq!(append_all(&store, &recs[..2], Codec::Lz4), 0);
    assert_eq!(read_all(&store), recs[..2]);
}

#[test]
fn delete_moves_the_tail_into_holes() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_at(&dir, 1 << 20);
    let recs: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 10]).collect();
    append_all(&store, &recs, Codec::Raw);
    store.delete(&[1, 1, 4]).unwrap();
    // Holes are filled in descending order: slot 4 takes record 5 from the
    // last slot, then slot 1 takes the new last record, which is 5 again.
    let got: Vec<u8> = read_all(&store).iter().map(|r| r[0]).collect();
    assert_eq!(got, [0, 5, 2, 3]);
    // Re-appending after a delete reuses the freed indices.
    assert_eq!(append_all(&store, &recs[..1], Codec::Raw), 4);
}

#[test]
fn compact_reclaims_space_removes_chunks_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_at(&dir, 3000);
    let recs = records(&mut Rng(5), 40, 400);
    append_all(&store, &recs, Codec::Raw);
    let before = store.stats();
    assert_eq!(before.reclaimable, before.chunk_bytes - 16_000);
    let doomed: Vec<u64> = (0..40).filter(|i| i % 3 != 0).collect();
    store.delete(&doomed).unwrap();
    let mut model = recs.clone();
    for &t in doomed.iter().rev() {
        model.swap_remove(t as usize);
    }
    let report = store.compact().unwrap();
    assert!(report.moved > 0);
    assert_eq!(report.after.live_bytes, 14 * 400);
    // 14 records of 400 bytes, 7 per 3000-byte chunk: exactly two chunks.
    assert_eq!(report.after.chunk_bytes, 3000 + 2800);
    assert!(!store.path().join("2.zr").exists());
    assert_eq!(read_all(&store), model);
    let again = store.compact().unwrap();
    assert_eq!(again.moved, 0);
    assert_eq!(again.after, report.after);
    assert_eq!(read_all(&store), model);
}

#[test]
fn an_interrupted_compaction_leaves_a_valid_store_that_rerunning_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let options = small_chunks(2500);
    let mut store = Store::open_with(&path, &options).unwrap();
    let recs = records(&mut Rng(9), 30, 333);
    append_all(&store, &recs, Codec::Raw);
    store.delete(&[0, 7, 8, 20]).unwrap();
    let model = read_all(&store);
    let before: Vec<u64> = (0..store.len()).map(|i| location(&store, i)).collect();
    // Stop after each single move, reopen, and check everything every time.
    let mut rounds = 0;
    loop {
        let report = store.compact_some(1).unwrap();
        drop(store);
        store = Store::open_with(&path, &options).unwrap();
        assert_eq!(read_all(&store), model, "after round {rounds}");
        for (i, &was) in before.iter().enumerate() {
            assert!(location(&store, i) <= was, "record {i} moved up");
        }
        rounds += 1;
        if report.finished {
            break;
        }
    }
    assert!(
        rounds > 5,
        "the compaction really was split ({rounds} rounds)"
    );
    let full = Store::open_with(dir.path().join("other.zr"), &options).unwrap();
    append_all(&full, &model, Codec::Raw);
    assert_eq!(
        store.stats().chunk_bytes,
        full.stats().chunk_bytes,
        "as dense as a fresh store"
    );
}

/// Physical address of record `i`, read from `meta.zr` the way the format
/// document describes it.
fn location(store: &Store, i: usize) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(store.path().join("meta.zr")).unwrap();
    f.seek(SeekFrom::Start(entry_offset(i) as u64)).unwrap();
    let mut e = [0u8; ENTRY_LEN];
    f.read_exact(&mut e).unwrap();
    let offset = u32_at(&e, ENTRY_OFFSET_OFFSET) as u64;
    let chunk = u16_at(&e, ENTRY_CHUNK_ID_OFFSET);
    physical_address(chunk, offset)
}

/// The live entries of the store's record table, read from `meta.zr`.
fn entries(store: &Store) -> Vec<zrecord::RecordLoc> {
    let meta = std::fs::read(store.path().join("meta.zr")).unwrap();
    (0..store.len())
        .map(|i| {
            let e = &meta[entry_offset(i)..entry_offset(i) + ENTRY_LEN];
            zrecord::RecordLoc::from_bytes(e.try_into().unwrap())
        })
        .collect()
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// The layout constants the other tests read and damage the files with are
/// the numbers of docs/FORMAT.md's tables ("Header", "Record table",
/// "Checksums"): this is the one place that repeats them.
#[test]
fn layout_constants_are_the_documented_numbers() {
    let header = [
        MAGIC_OFFSET,
        VERSION_OFFSET,
        TAIL_CHUNK_OFFSET,
        TAIL_OFFSET_OFFSET,
        LENGTH_OFFSET,
        HEADER_LEN,
    ];
    assert_eq!(header, [0, 4, 6, 8, 12, 16]);
    assert_eq!(
        (MAGIC, VERSION_1, VERSION_BIG_RECORDS, FORMAT_VERSION),
        (*b"ZREC", 1, 2, 2)
    );
    let entry = [
        ENTRY_OFFSET_OFFSET,
        ENTRY_PHYS_LENGTH_OFFSET,
        ENTRY_LOGIC_LENGTH_OFFSET,
        ENTRY_CHUNK_ID_OFFSET,
        ENTRY_CODEC_OFFSET,
        ENTRY_RESERVED_OFFSET,
        ENTRY_LEN,
    ];
    assert_eq!(entry, [0, 4, 8, 12, 14, 15, 16]);
    assert_eq!(TABLE_OFFSET, 16);
    assert_eq!(entry_offset(3), 16 + 16 * 3);
    assert_eq!(META_FILE_LEN, 16 + (1 << 24) * 16);
    assert_eq!(META_FILE_LEN, 268_435_472);
    let checksums = [
        CHECKSUM_MAGIC_OFFSET,
        CHECKSUM_VERSION_OFFSET,
        CHECKSUM_COVERED_OFFSET,
        CHECKSUM_HEADER_LEN,
        SLOT_DATA_CRC_OFFSET,
        SLOT_ENTRY_CRC_OFFSET,
        CHECKSUM_SLOT_LEN,
    ];
    assert_eq!(checksums, [0, 4, 6, 16, 0, 4, 8]);
    assert_eq!((CHECKSUM_MAGIC, CHECKSUM_VERSION), (*b"ZRCK", 2));
    assert_eq!(CHECKSUM_COVERED_LEN, 10);
    assert_eq!(checksum_slot_offset(3), 16 + 8 * 3);
    assert_eq!(CHECKSUM_FILE_LEN, 16 + (1 << 24) * 8);
    assert_eq!(physical_address(2, 5), (2 << 32) | 5);
}

#[test]
fn meta_file_bytes_follow_the_documented_layout() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, 1 << 20);
    let rec = compressible(&mut Rng(1), 4096);
    store.append(&[&rec, b"abc"], &opts(Codec::Flate)).unwrap();
    let meta = std::fs::read(store.path().join("meta.zr")).unwrap();
    assert_eq!(meta.len(), META_FILE_LEN);
    assert_eq!(&meta[MAGIC_OFFSET..VERSION_OFFSET], b"ZREC");
    assert_eq!(u16_at(&meta, VERSION_OFFSET), 1);
    let entry = |i: usize| &meta[entry_offset(i)..entry_offset(i + 1)];
    let (e0, e1) = (entry(0), entry(1));
    assert_eq!(
        u32_at(e0, ENTRY_OFFSET_OFFSET),
        0,
        "first record at offset 0"
    );
    let phys0 = u32_at(e0, ENTRY_PHYS_LENGTH_OFFSET);
    assert!(phys0 < 4096, "compressible record shrank");
    assert_eq!(u32_at(e0, ENTRY_LOGIC_LENGTH_OFFSET), 4096);
    assert_eq!(
        (
            u16_at(e0, ENTRY_CHUNK_ID_OFFSET),
            e0[ENTRY_CODEC_OFFSET],
            e0[ENTRY_RESERVED_OFFSET]
        ),
        (0, 1, 0),
        "chunk 0, flate, reserved 0"
    );
    // "abc" does not shrink: stored raw right after record 0.
    let e1_fields = (
        u32_at(e1, ENTRY_OFFSET_OFFSET),
        u32_at(e1, ENTRY_PHYS_LENGTH_OFFSET),
        u32_at(e1, ENTRY_LOGIC_LENGTH_OFFSET),
    );
    assert_eq!(e1_fields, (phys0, 3, 3));
    assert_eq!(e1[ENTRY_CODEC_OFFSET], 0);
    // Header: tail chunk 0, tail offset past both records, length 2.
    assert_eq!(u16_at(&meta, TAIL_CHUNK_OFFSET), 0);
    assert_eq!(u32_at(&meta, TAIL_OFFSET_OFFSET), phys0 + 3);
    assert_eq!(u32_at(&meta, LENGTH_OFFSET), 2);
    // The stored bytes are a raw DEFLATE stream, decodable by an independent
    // inflater.
    let chunk = std::fs::read(store.path().join("0.zr")).unwrap();
    let mut out = vec![0u8; 4096];
    let n = libdeflater::Decompressor::new()
        .deflate_decompress(&chunk[..phys0 as usize], &mut out)
        .unwrap();
    assert_eq!((n, &out[..]), (4096, &rec[..]));
}

/// A store opened read-only (the option; a store on files this process may
/// not write opens the same way, tested in tests/python/test_read_only.py
/// with privileges dropped) reads as any other, holds the shared use lock,
/// and refuses every write with `ReadOnly`, touching nothing. With a delete
/// journal left behind it refuses to open: the table may be half rewritten.
#[test]
fn a_read_only_store_reads_and_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let mut rng = Rng(7);
    let recs = records(&mut rng, 40, 300);
    let checked = zrecord::StoreOptions {
        checksums: zrecord::Checksums::On,
        ..small_chunks(4096)
    };
    append_all(
        &Store::open_with(&path, &checked).unwrap(),
        &recs,
        Codec::Lz4,
    );
    let read_only = zrecord::StoreOptions {
        read_only: true,
        ..checked.clone()
    };
    let mut store = Store::open_with(&path, &read_only).unwrap();
    assert!(store.read_only());
    assert_eq!(read_all(&store), recs);
    let refused = |e: zrecord::Error, what: &str| {
        let message = e.to_string();
        assert!(matches!(e, zrecord::Error::ReadOnly { .. }), "{message}");
        assert!(message.contains("store opened read-only") && message.contains(what));
    };
    refused(
        store.append(&[b"x"], &opts(Codec::Raw)).unwrap_err(),
        "append",
    );
    refused(store.delete(&[0]).unwrap_err(), "delete");
    refused(store.compact().unwrap_err(), "compact");
    assert_eq!(read_all(&store), recs);

    // A writer may open beside it; a delete waits for the reader to close.
    let mut writer = Store::open_with(&path, &checked).unwrap();
    assert!(!writer.read_only());
    assert!(matches!(
        writer.delete(&[0]),
        Err(zrecord::Error::Busy { .. })
    ));
    drop(store);
    writer.delete(&[0]).unwrap();
    drop(writer);

    // No store is created read-only.
    let missing = Store::open_with(dir.path().join("none"), &read_only);
    assert!(matches!(missing, Err(zrecord::Error::NotFound { .. })));
    assert!(!dir.path().join("none").exists());

    std::fs::write(path.join("delete.journal"), b"left by a crash").unwrap();
    let e = Store::open_with(&path, &read_only).err().unwrap();
    assert!(
        matches!(e, zrecord::Error::ReadOnly { .. }) && e.to_string().contains("delete.journal")
    );
    assert!(path.join("delete.journal").exists(), "left for a writer");
    Store::open_with(&path, &checked).unwrap();
    assert!(!path.join("delete.journal").exists());
}

/// zstd-dict: the first append that has enough records trains the store's
/// dictionary and writes zstd.dict once; a smaller first append is stored
/// as plain zstd; every record reads back, in this handle and in others,
/// including one opened before the dictionary existed; a damaged
/// dictionary is refused when a record needs it.
#[test]
fn zstd_dict_trains_once_and_every_handle_reads_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let store = Store::open(&path).unwrap();
    let early = Store::open(&path).unwrap();
    let mut rng = Rng(5);
    let recs: Vec<Vec<u8>> = (0..2000)
        .map(|i| compressible(&mut rng, 600 + i % 300))
        .collect();
    let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    let dict_path = path.join(zrecord::DICT_FILE_NAME);
    // Too few records to train on: plain zstd, no dictionary yet.
    store.append(&slices[..10], &opts(Codec::ZstdDict)).unwrap();
    assert!(!dict_path.exists());
    store.append(&slices[10..], &opts(Codec::ZstdDict)).unwrap();
    let dict = std::fs::read(&dict_path).unwrap();
    assert_eq!(&dict[..4], b"ZRDC");
    let tags: Vec<u8> = entries(&store).iter().map(|e| e.codec.0).collect();
    assert!(tags[..10]
        .iter()
        .all(|&t| t == Codec::Zstd.tag().0 || t == 0));
    assert!(
        tags[10..]
            .iter()
            .filter(|&&t| t == Codec::ZstdDict.tag().0)
            .count()
            > 1900
    );
    assert_eq!(read_all(&store), recs);
    assert_eq!(read_all(&early), recs);
    // A later append reuses the dictionary: the file never changes.
    store
        .append(&slices[..500], &opts(Codec::ZstdDict))
        .unwrap();
    assert_eq!(std::fs::read(&dict_path).unwrap(), dict);
    drop((store, early));
    assert_eq!(read_all(&Store::open(&path).unwrap())[..2000], recs[..]);
    let mut damaged = dict.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    std::fs::write(&dict_path, &damaged).unwrap();
    // Loaded when a record needs it (another handle may create it after
    // this one opened), and refused then.
    let store = Store::open(&path).unwrap();
    match common::try_read_all(&store) {
        Err(zrecord::Error::NotAStore { reason, .. }) => {
            assert!(reason.contains("damaged"), "{reason}")
        }
        Ok(_) => panic!("a damaged dictionary was read"),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// zstd-dict over records of many KiB (photographs: a shared header, then
/// bytes no codec shrinks): the dictionary is trained on the records'
/// first 2 KiB, so it is a hundredth of those starts, not of the records,
/// and still takes the shared header out of every record.
#[test]
fn zstd_dict_of_large_records_is_trained_on_their_starts() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.zr")).unwrap();
    let mut rng = Rng(9);
    let header = compressible(&mut rng, 700);
    let recs: Vec<Vec<u8>> = (0..300)
        .map(|_| [header.clone(), noise(&mut rng, 16 << 10)].concat())
        .collect();
    let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    store.append(&slices, &opts(Codec::ZstdDict)).unwrap();
    let dict = std::fs::read(dir.path().join("s.zr").join(zrecord::DICT_FILE_NAME)).unwrap();
    assert!(dict.len() <= 16 + 300 * 2048 / 100, "{} bytes", dict.len());
    let stored: usize = entries(&store).iter().map(|e| e.phys_length as usize).sum();
    let noise_bytes = 300 * (16 << 10);
    assert!(stored < noise_bytes + 300 * 50, "{stored} stored bytes");
    assert_eq!(read_all(&store), recs);
}

/// A batch split over the shard crew is checked whole before any run is
/// copied (`gather_slots_in_runs`, `ops/gather.rs`).
#[test]
fn an_exact_batch_with_a_short_record_in_a_late_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, 1 << 20);
    let model = samples_with_two_short(&mut Rng(11));
    append_all(&store, &model, Codec::Raw);
    let gather = |idxs: &[u64], dst: &mut [u8]| store.gather_exact(idxs, dst, SAMPLE_LEN);
    let refused = |err: &zrecord::Error, record: u64| {
        err.to_string()
            .contains(&format!("record {record} is 4000 bytes"))
    };
    assert_split_batches_are_checked_whole(gather, &model, refused);
}

#[test]
fn gather_exact_at_fills_only_its_slots_and_checks_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, 1 << 20);
    let recs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 3]).collect();
    append_all(&store, &recs, Codec::Raw);
    let mut dst = vec![0xee; 5 * 3];
    store
        .gather_exact_at(&[7, 2], &mut dst, 3, &[1, 4])
        .unwrap();
    let mut want = vec![0xee; 15];
    want[3..6].copy_from_slice(&[7; 3]);
    want[12..15].copy_from_slice(&[2; 3]);
    assert_eq!(dst, want, "slots 0, 2 and 3 untouched");
    for slots in [[4, 1], [2, 2]] {
        let err = store
            .gather_exact_at(&[7, 2], &mut dst, 3, &slots)
            .unwrap_err();
        assert!(err.to_string().contains("slots"), "{err}");
    }
    let err = store.gather_exact_at(&[1], &mut dst, 4, &[0]).unwrap_err();
    assert!(err.to_string().contains("not the 4 of a sample"), "{err}");
    assert!(
        store.gather_exact_at(&[1], &mut dst, 3, &[5]).is_err(),
        "past the end"
    );
}
