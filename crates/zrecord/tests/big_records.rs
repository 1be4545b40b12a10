//! Records over 1 MiB (docs/FORMAT.md, "Limits" and "Versions"): a store
//! becomes format 2 with its first such record and not before, reads them
//! bit-exact with every codec, also through a handle opened while it was
//! format 1; a record over 1 GiB is refused; a store whose chunks run out
//! says "store full" and changes nothing; an append that fails after
//! raising the version leaves the records as they were.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use common::{compressible, noise, opts, read_all, Rng};
use zrecord::layout::{TAIL_CHUNK_OFFSET, TAIL_OFFSET_OFFSET, VERSION_OFFSET};
use zrecord::{
    Codec, Error, IoEvent, IoHook, Store, StoreOptions, MAX_CHUNKS, MAX_RECORD_LEN, META_FILE_NAME,
    V1_MAX_RECORD_LEN, VERSION_1, VERSION_BIG_RECORDS,
};

fn version_on_disk(store: &std::path::Path) -> u16 {
    let bytes = std::fs::read(store.join(META_FILE_NAME)).unwrap();
    u16::from_le_bytes([bytes[VERSION_OFFSET], bytes[VERSION_OFFSET + 1]])
}

#[test]
fn a_store_becomes_format_2_with_its_first_record_over_1_mib() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::open(&path).unwrap();
    let mut rng = Rng(7);
    // Exactly 1 MiB is still a format-1 record.
    let mut want = vec![noise(&mut rng, V1_MAX_RECORD_LEN), b"small".to_vec()];
    store
        .append(&[&want[0], &want[1]], &opts(Codec::Raw))
        .unwrap();
    assert_eq!(store.version(), VERSION_1);
    assert_eq!(version_on_disk(&path), VERSION_1);
    for codec in [Codec::Raw, Codec::Flate, Codec::Lz4, Codec::Zstd] {
        let big = compressible(&mut rng, 3 * V1_MAX_RECORD_LEN + 17);
        store.append(&[&big], &opts(codec)).unwrap();
        want.push(big);
    }
    assert_eq!(store.version(), VERSION_BIG_RECORDS);
    assert_eq!(version_on_disk(&path), VERSION_BIG_RECORDS);
    assert_eq!(read_all(&store), want);
    drop(store);
    let reopened = Store::open(&path).unwrap();
    assert_eq!(read_all(&reopened), want);
    assert!(reopened.verify().unwrap().bad.is_empty());
}

#[test]
fn fixed_and_ragged_appends_of_big_records_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let mut rng = Rng(8);
    let len = 2 * V1_MAX_RECORD_LEN + 5;
    let src = compressible(&mut rng, 3 * len);
    store
        .append_fixed(&src, 3, len, &opts(Codec::Zstd))
        .unwrap();
    let lens = [len as u32, 3, (V1_MAX_RECORD_LEN + 1) as u32];
    store
        .append_ragged(&src, &[0, 7, len as u64], &lens, &opts(Codec::Flate))
        .unwrap();
    let mut want: Vec<Vec<u8>> = src.chunks(len).map(<[u8]>::to_vec).collect();
    want.push(src[..len].to_vec());
    want.push(src[7..10].to_vec());
    want.push(src[len..len + V1_MAX_RECORD_LEN + 1].to_vec());
    assert_eq!(read_all(&store), want);
    // A fixed-stride batch of big records, as a loader gathers them.
    let mut dst = vec![0u8; 3 * len];
    store.gather(&[2, 0, 1], &mut dst, len).unwrap();
    assert_eq!(dst, [&want[2][..], &want[0], &want[1]].concat());
}

#[test]
fn a_reader_opened_at_format_1_reads_a_big_record_appended_since() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let writer = Store::open(&path).unwrap();
    writer.append(&[b"first"], &opts(Codec::Raw)).unwrap();
    let reader = Store::open(&path).unwrap();
    assert_eq!(reader.version(), VERSION_1);
    let big = compressible(&mut Rng(9), 5 * V1_MAX_RECORD_LEN);
    writer.append(&[&big], &opts(Codec::Lz4)).unwrap();
    assert_eq!(read_all(&reader), vec![b"first".to_vec(), big]);
}

#[test]
fn a_record_over_1_gib_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::open(&path).unwrap();
    store.append(&[b"kept"], &opts(Codec::Raw)).unwrap();
    // calloc'd: the pages are never touched, the length is refused first.
    let huge = vec![0u8; MAX_RECORD_LEN + 1];
    let err = store.append(&[&huge], &opts(Codec::Raw)).unwrap_err();
    assert!(
        matches!(err, Error::RecordTooLarge { len, max, .. }
            if len == MAX_RECORD_LEN + 1 && max == MAX_RECORD_LEN),
        "{err}"
    );
    assert_eq!(read_all(&store), vec![b"kept".to_vec()]);
    assert_eq!(version_on_disk(&path), VERSION_1);
}

#[test]
fn a_store_whose_chunks_run_out_is_full_and_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::open(&path).unwrap();
    store.append(&[b"kept"], &opts(Codec::Raw)).unwrap();
    drop(store);
    // The frontier 1.5 MiB before the end of the last chunk, as 16 TiB of
    // big records would leave it (its file sparse: only the header says so).
    let last = (MAX_CHUNKS - 1) as u16;
    let offset = (u32::MAX - (3 << 19)) + 1;
    let meta = OpenOptions::new()
        .write(true)
        .open(path.join(META_FILE_NAME))
        .unwrap();
    meta.write_all_at(&last.to_le_bytes(), TAIL_CHUNK_OFFSET as u64)
        .unwrap();
    meta.write_all_at(&offset.to_le_bytes(), TAIL_OFFSET_OFFSET as u64)
        .unwrap();
    let store = Store::open(&path).unwrap();
    let before = std::fs::read(path.join(META_FILE_NAME)).unwrap();
    let big = noise(&mut Rng(10), 2 * V1_MAX_RECORD_LEN);
    let err = store.append(&[&big], &opts(Codec::Raw)).unwrap_err();
    assert!(matches!(err, Error::StoreFull { .. }), "{err}");
    assert!(std::fs::read(path.join(META_FILE_NAME)).unwrap() == before);
    assert_eq!(version_on_disk(&path), VERSION_1);
    assert_eq!(read_all(&store), vec![b"kept".to_vec()]);
}

/// Fails the publish of the length (the commit point).
struct FailPublish;

impl IoHook for FailPublish {
    fn before(&self, event: &IoEvent<'_>) -> std::io::Result<()> {
        match event {
            IoEvent::MetaWrite { offset, .. } if *offset == zrecord::layout::LENGTH_OFFSET => {
                Err(std::io::Error::other("killed before the publish"))
            }
            _ => Ok(()),
        }
    }
}

#[test]
fn an_append_cut_short_after_raising_the_version_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    Store::open(&path)
        .unwrap()
        .append(&[b"kept"], &opts(Codec::Raw))
        .unwrap();
    let failing = Store::open_with(
        &path,
        &StoreOptions {
            io_hook: Some(Arc::new(FailPublish)),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let big = noise(&mut Rng(11), 2 * V1_MAX_RECORD_LEN);
    assert!(failing.append(&[&big], &opts(Codec::Raw)).is_err());
    drop(failing);
    // Format 2 without a big record: refused by format-1 readers, read whole
    // here, and the next append goes where the lost one went.
    assert_eq!(version_on_disk(&path), VERSION_BIG_RECORDS);
    let store = Store::open(&path).unwrap();
    assert_eq!(read_all(&store), vec![b"kept".to_vec()]);
    store.append(&[&big], &opts(Codec::Raw)).unwrap();
    assert_eq!(read_all(&store), vec![b"kept".to_vec(), big]);
}
