//! A handle keeps the folder it opened: when the process changes its
//! current directory afterwards (as `os.chdir` in a training script, or
//! Hydra's run folders, do), or a link it was opened through is pointed at
//! another folder (`current -> v2` swapped in for `current -> v1`), the
//! chunk files, shards and writers' stores it opens later are still its
//! own, not those of a store that happens to lie at the same path now.
//! When its folder is renamed away and another renamed into its place, it
//! fails rather than open the other folder's files.
//!
//! The current directory belongs to the whole process: only one test here
//! changes it, and the others use absolute paths alone.

mod common;

use std::env;
use std::fs;
use std::path::Path;

use common::{opts, small_chunks};
use zrecord::{Checksums, Codec, Collection, CollectionWriter, ShardLimits, Store, StoreOptions};

/// `n` records of 4 KiB, every byte `fill`.
fn records(n: usize, fill: u8) -> Vec<Vec<u8>> {
    vec![vec![fill; 4096]; n]
}

fn append(store: &Store, records: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    store.append(&refs, &opts(Codec::Raw)).unwrap();
}

/// The first byte of every record of `idxs`, read through `gather`.
fn first_bytes(idxs: &[u64], gather: impl Fn(&[u64], &mut [u8])) -> Vec<u8> {
    let mut dst = vec![0; idxs.len() * 4096];
    gather(idxs, &mut dst);
    dst.chunks(4096).map(|r| r[0]).collect()
}

/// The same relative path under `root/a` (records of 1) and `root/b`
/// (records of 2).
fn twin(root: &Path, name: &str, make: impl Fn(&Path, u8)) {
    make(&root.join("a").join(name), 1);
    make(&root.join("b").join(name), 2);
}

/// Under `root/a` (records of 1) and `root/b` (records of 2), with
/// `options`: a store of 40 records ("store") and a collection of four
/// shards of 10 named alike in both ("collection").
fn twins(root: &Path, options: &StoreOptions) {
    twin(root, "store", |dir, fill| {
        append(&Store::open_with(dir, options).unwrap(), &records(40, fill));
    });
    twin(root, "collection", |dir, fill| {
        let limits = ShardLimits {
            max_records: 10,
            ..ShardLimits::default()
        };
        let mut writer = CollectionWriter::new(dir, options, limits)
            .unwrap()
            .with_prefix("s")
            .unwrap();
        let refs = records(40, fill);
        let refs: Vec<&[u8]> = refs.iter().map(Vec::as_slice).collect();
        writer.append(&refs, &opts(Codec::Raw)).unwrap();
        writer.publish().unwrap();
    });
}

#[test]
fn handles_opened_by_a_relative_path_keep_their_folder_when_the_directory_changes() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    // Chunks of 64 KiB hold 16 records: a read past the first 16 opens a
    // chunk file the handle has not opened yet.
    let options = small_chunks(64 << 10);
    twins(root.path(), &options);

    env::set_current_dir(&a).unwrap();
    let store = Store::open_with("store", &options).unwrap();
    let collection = Collection::open("collection").unwrap();
    let limits = ShardLimits::default();
    let mut writer = CollectionWriter::new("collection", &StoreOptions::default(), limits).unwrap();
    env::set_current_dir(&b).unwrap();

    let all: Vec<u64> = (0..40).collect();
    let read = first_bytes(&all, |i, dst| store.gather(i, dst, 4096).unwrap());
    assert_eq!(read, vec![1; 40], "the store read another folder's chunks");
    let read = first_bytes(&all, |i, dst| collection.gather(i, dst, 4096).unwrap());
    assert_eq!(
        read,
        vec![1; 40],
        "the collection read another folder's shards"
    );
    // The writer's new shard goes into the folder it was made for.
    writer.append(&[&[1; 4096]], &opts(Codec::Raw)).unwrap();
    writer.publish().unwrap();
    env::set_current_dir(root.path()).unwrap();
    assert_eq!(Collection::open(a.join("collection")).unwrap().len(), 41);
    assert_eq!(Collection::open(b.join("collection")).unwrap().len(), 40);
}

#[test]
fn handles_opened_through_a_link_keep_its_target_when_the_link_is_pointed_elsewhere() {
    let root = tempfile::tempdir().unwrap();
    let options = small_chunks(64 << 10);
    twins(root.path(), &options);
    let link = root.path().join("current");
    let point = |folder: &str| {
        // As a deployment swaps versions: a new link renamed over the old.
        let new = root.path().join("current.new");
        std::os::unix::fs::symlink(root.path().join(folder).join("store"), &new).unwrap();
        fs::rename(&new, &link).unwrap();
    };
    point("a");
    let store = Store::open_with(&link, &options).unwrap();
    point("b");
    let all: Vec<u64> = (0..40).collect();
    let read = first_bytes(&all, |i, dst| store.gather(i, dst, 4096).unwrap());
    assert_eq!(read, vec![1; 40], "the store read the link's new target");
}

/// Whether `result` is the error of a handle whose folder was renamed away.
fn replaced<T: std::fmt::Debug>(result: zrecord::Result<T>) -> bool {
    matches!(result, Err(zrecord::Error::FolderReplaced { .. }))
}

#[test]
fn handles_fail_rather_than_read_another_folder_renamed_into_their_place() {
    let root = tempfile::tempdir().unwrap();
    // Without checksums, which would report the other folder's records as
    // damaged, and with shards named alike: nothing but the check keeps
    // the handles from reading the other folder's records as their own.
    let options = StoreOptions {
        checksums: Checksums::Off,
        ..small_chunks(64 << 10)
    };
    twins(root.path(), &options);
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let store = Store::open_with(a.join("store"), &options).unwrap();
    let first: Vec<u64> = (0..16).collect();
    let read = first_bytes(&first, |i, dst| store.gather(i, dst, 4096).unwrap());
    assert_eq!(read, vec![1; 16]);
    let collection = Collection::open_with(a.join("collection"), &options).unwrap();
    let limits = ShardLimits::default();
    let mut writer = CollectionWriter::new(a.join("collection"), &options, limits).unwrap();

    // As a deployment swaps in a new version: the old folders renamed
    // away, the new ones renamed into their place.
    fs::rename(&a, root.path().join("old")).unwrap();
    fs::rename(&b, &a).unwrap();

    // The chunk the store opened before is still its own.
    let read = first_bytes(&first, |i, dst| store.gather(i, dst, 4096).unwrap());
    assert_eq!(read, vec![1; 16]);
    let all: Vec<u64> = (0..40).collect();
    let mut dst = vec![0; 40 * 4096];
    assert!(
        replaced(store.gather(&all, &mut dst, 4096)),
        "the store opened a chunk file of the folder renamed into its place"
    );
    assert!(
        replaced(collection.gather(&all, &mut dst, 4096)),
        "the collection opened shards of the folder renamed into its place"
    );
    assert!(
        replaced(writer.append(&[&[1; 4096]], &opts(Codec::Raw))),
        "the writer made a shard in the folder renamed into its place"
    );
    assert_eq!(Collection::open(a.join("collection")).unwrap().len(), 40);

    // Moved away, with nothing in its place: the same error, not a missing
    // chunk file.
    let store = Store::open_with(a.join("store"), &options).unwrap();
    fs::rename(&a, root.path().join("gone")).unwrap();
    assert!(replaced(store.gather(&all, &mut dst, 4096)));
}
