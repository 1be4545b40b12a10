//! Sharded collections (docs/FORMAT.md, "Collections"): one index space over
//! many stores, against a model (the records in append order); nothing is
//! visible before a writer publishes and everything after; concurrent
//! publishers lose nothing; a damaged manifest or a missing shard is an
//! error naming it; more than 2^24 records in all; and writers killed at
//! random moments leave, for each writer, a prefix of what it wrote that
//! holds everything it had reported published.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    assert_split_batches_are_checked_whole, noise, opts, samples_with_two_short, Rng, SAMPLE_LEN,
};
use zrecord::layout::{manifest_name, LENGTH_OFFSET};
use zrecord::{
    Checksums, Codec, Collection, CollectionWriter, Error, ShardLimits, Store, StoreOptions,
    MAX_RECORDS, META_FILE_NAME,
};

fn limits(max_records: u32, max_bytes: u64) -> ShardLimits {
    ShardLimits {
        max_records,
        max_bytes,
    }
}

fn writer(dir: &Path, limits: ShardLimits) -> CollectionWriter {
    CollectionWriter::new(dir, &StoreOptions::default(), limits).unwrap()
}

/// Every record of the collection, through one ragged gather over all shards.
fn read_all(c: &Collection) -> Vec<Vec<u8>> {
    let idxs: Vec<u64> = (0..c.len()).collect();
    let lens = c.lengths(&idxs).unwrap();
    let mut offsets = Vec::new();
    let mut total = 0u64;
    for &l in &lens {
        offsets.push(total);
        total += u64::from(l);
    }
    let mut dst = vec![0u8; total as usize];
    c.gather_ragged(&idxs, &mut dst, &offsets).unwrap();
    offsets
        .iter()
        .zip(&lens)
        .map(|(&o, &l)| dst[o as usize..(o + u64::from(l)) as usize].to_vec())
        .collect()
}

#[test]
fn records_are_read_as_one_sequence_once_published() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut rng = Rng(1);
    let model: Vec<Vec<u8>> = (0..23)
        .map(|i| noise(&mut rng, 10 + (i * 37) % 300))
        .collect();
    let refs: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    let mut w = writer(&path, limits(5, 1 << 20));
    w.append(&refs[..9], &opts(Codec::Zstd)).unwrap();
    w.append(&refs[9..], &opts(Codec::Raw)).unwrap();
    assert_eq!(w.shards().len(), 5);
    // Written, not published: the collection is empty.
    let before = Collection::open(&path).unwrap();
    assert_eq!((before.len(), before.generation()), (0, 0));
    assert_eq!(w.publish().unwrap(), 1);
    let c = Collection::open(&path).unwrap();
    assert_eq!(c.len(), 23);
    // The first call filled a shard and began a second; the second call did
    // not fit beside it, so it went to new shards.
    assert_eq!(c.starts(), &[0, 5, 9, 14, 19, 23]);
    assert_eq!(c.shard_names().collect::<Vec<_>>(), w.shards());
    assert_eq!(read_all(&c), model);
    assert_eq!(c.locate(12).unwrap(), (2, 3));
    assert!(matches!(
        c.locate(23),
        Err(Error::IndexOutOfRange { index: 23, .. })
    ));
    // A batch that fails on an index past the end, after indices in three
    // shards, leaves the next batch's shards right (each read marks the
    // shards it meets, and must clear them whichever way it ends).
    let stride = 310;
    let mut dst = vec![0xAA; 4 * stride];
    assert!(matches!(
        c.gather(&[12, 0, 20, 23], &mut dst, stride),
        Err(Error::IndexOutOfRange { index: 23, .. })
    ));
    assert_eq!(dst, vec![0xAA; 4 * stride], "a failed batch writes nothing");
    let idxs = [20u64, 0, 12, 5, 13, 0];
    let mut dst = vec![0xAA; idxs.len() * stride];
    c.gather(&idxs, &mut dst, stride).unwrap();
    for (slot, &i) in dst.chunks(stride).zip(&idxs) {
        let record = &model[i as usize];
        assert_eq!(&slot[..record.len()], record.as_slice(), "record {i}");
        assert!(slot[record.len()..].iter().all(|&b| b == 0), "record {i}");
    }
    // Publishing again with nothing new writes no generation.
    assert_eq!(w.publish().unwrap(), 1);
}

/// A read of no indices reads nothing, from a collection of many shards, of
/// one, or of none (a writer that never published).
#[test]
fn a_read_of_no_indices_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<[u8; 4]> = (0..6u32).map(u32::to_le_bytes).collect();
    let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
    for (name, per_shard, publish) in [("many", 2, true), ("one", 8, true), ("none", 2, false)] {
        let path = dir.path().join(name);
        let mut w = writer(&path, limits(per_shard, u64::MAX));
        w.append(&refs, &opts(Codec::Raw)).unwrap();
        if publish {
            w.publish().unwrap();
        }
        let c = Collection::open(&path).unwrap();
        assert!(c.lengths(&[]).unwrap().is_empty(), "{name}");
        c.gather_exact(&[], &mut [], 4).unwrap();
        c.gather(&[], &mut [], 4).unwrap();
        c.gather_ragged(&[], &mut [], &[]).unwrap();
    }
}

#[test]
fn a_failed_write_discards_its_unpublished_shards_and_keeps_the_published() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let model: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i; 1 + usize::from(i)]).collect();
    let refs: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    let mut w = writer(&path, limits(4, 1 << 20));
    w.append(&refs[..6], &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    // Two more records go to the published second shard (visible at once),
    // four to a new shard that the failed write leaves unpublished.
    w.append(&refs[6..8], &opts(Codec::Raw)).unwrap();
    w.append(&refs[8..], &opts(Codec::Raw)).unwrap();
    let made = w.shards().to_vec();
    assert_eq!(made.len(), 3);
    // Another writer's unpublished shard is not this one's to remove.
    let mut other = writer(&path, limits(4, 1 << 20));
    other.append(&refs[..1], &opts(Codec::Raw)).unwrap();
    w.discard().unwrap();
    assert_eq!(w.shards(), &made[..2]);
    for name in &made[2..] {
        assert!(!path.join(name).exists(), "{name} was not removed");
    }
    assert!(path.join(&other.shards()[0]).exists());
    let c = Collection::open(&path).unwrap();
    assert_eq!(c.shard_names().collect::<Vec<_>>(), &made[..2]);
    assert_eq!(read_all(&c), model[..8]);
}

/// A distributed write's tasks name their shards after the write (each
/// attempt its own prefix under it); once the write is published, what its
/// dead attempts left is removed by that name, and nothing else.
#[test]
fn the_unpublished_shards_of_a_writes_dead_attempts_are_removed_by_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let records: Vec<[u8; 3]> = (0..9u8).map(|i| [i; 3]).collect();
    let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
    let attempt = |prefix: &str, publish: bool| {
        let mut w = writer(&path, limits(2, u64::MAX))
            .with_prefix(prefix)
            .unwrap();
        w.append(&refs, &opts(Codec::Raw)).unwrap();
        w.sync().unwrap();
        if publish {
            Collection::publish(&path, w.shards()).unwrap();
        }
        w.shards().to_vec()
    };
    let published = attempt("a1-1", true);
    let dead = [attempt("a1-2", false), attempt("a1-3", false)].concat();
    // Another write's, and a write whose name merely begins alike.
    let kept = [attempt("b2-1", false), attempt("a10-1", false)].concat();
    let mut removed = Collection::remove_unpublished(&path, "a1").unwrap();
    removed.sort();
    assert_eq!(removed, dead);
    for name in &dead {
        assert!(!path.join(name).exists(), "{name}");
    }
    for name in published.iter().chain(&kept) {
        assert!(path.join(name).is_dir(), "{name}");
    }
    let c = Collection::open(&path).unwrap();
    assert_eq!(
        read_all(&c),
        refs.iter().map(|r| r.to_vec()).collect::<Vec<_>>()
    );
    assert!(Collection::remove_unpublished(&path, "a1")
        .unwrap()
        .is_empty());
}

#[test]
fn writers_with_one_prefix_make_aligned_shards_that_another_handle_publishes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let mut rng = Rng(7);
    let model: Vec<Vec<u8>> = (0..17).map(|i| noise(&mut rng, 1 + i * 13)).collect();
    let refs: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    let mut shards = Vec::new();
    for path in [&a, &b] {
        let mut w = writer(path, limits(4, u64::MAX)).with_prefix("w7").unwrap();
        w.append(&refs[..6], &opts(Codec::Zstd)).unwrap();
        w.append(&refs[6..], &opts(Codec::Raw)).unwrap();
        w.sync().unwrap();
        shards.push(w.shards().to_vec());
        // Synced, not published: nobody reads them yet.
        assert_eq!(Collection::open(path).unwrap().len(), 0);
    }
    assert_eq!(shards[0], ["w7-0", "w7-1", "w7-2", "w7-3", "w7-4"]);
    assert_eq!(shards[0], shards[1]);
    for path in [&a, &b] {
        assert_eq!(Collection::publish(path, &shards[0]).unwrap(), 1);
        let c = Collection::open(path).unwrap();
        assert_eq!(c.starts(), &[0, 4, 6, 10, 14, 17]);
        assert_eq!(read_all(&c), model);
        // Publishing them again adds nothing.
        assert_eq!(Collection::publish(path, &shards[0]).unwrap(), 1);
    }
    // A second writer with the prefix may not take the names.
    let mut again = writer(&a, limits(4, u64::MAX)).with_prefix("w7").unwrap();
    let err = again.append(&refs[..1], &opts(Codec::Raw)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { path, .. } if path.ends_with("w7-0")),
        "{err}"
    );
    assert!(
        CollectionWriter::new(&a, &StoreOptions::default(), limits(4, 9))
            .unwrap()
            .with_prefix("Not/a name")
            .is_err()
    );
    // Only folders holding a store are published.
    for bad in ["w7-9", "../a", "manifest-1.zc"] {
        let err = Collection::publish(&a, &[bad.to_string()]).unwrap_err();
        assert!(
            matches!(err, Error::NotAStore { .. } | Error::InvalidArgument { .. }),
            "{bad}: {err}"
        );
    }
    assert_eq!(Collection::open(&a).unwrap().generation(), 1);
}

#[test]
fn more_shards_than_stay_open_are_read_and_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut w = writer(&path, limits(1, 1 << 20));
    let model: Vec<Vec<u8>> = (0..300u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let refs: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    w.append(&refs, &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    let c = Collection::open(&path).unwrap();
    assert_eq!(read_all(&c), model);
    // The first shards were let go to stay under the bound; they reopen.
    assert_eq!(read_all(&c), model);
}

#[test]
fn a_host_opens_only_its_shards_and_needs_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut w = writer(&path, limits(2, 1 << 20));
    w.append(&[b"a0", b"a1", b"b0", b"b1", b"c0"], &opts(Codec::Raw))
        .unwrap();
    w.publish().unwrap();
    let names = Collection::published(&path).unwrap();
    assert_eq!(names, w.shards());
    // This host holds the first and last shards; the middle one is gone.
    fs::remove_dir_all(path.join(&names[1])).unwrap();
    let mine = [names[2].clone(), names[0].clone()];
    let c = Collection::open_shards(&path, &StoreOptions::default(), Some(&mine)).unwrap();
    assert_eq!(
        read_all(&c),
        [b"a0".to_vec(), b"a1".to_vec(), b"c0".to_vec()]
    );
    assert!(matches!(
        Collection::open(&path),
        Err(Error::NotAStore { .. })
    ));
    let unknown = ["nope".to_string()];
    assert!(matches!(
        Collection::open_shards(&path, &StoreOptions::default(), Some(&unknown)),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn a_byte_limit_rolls_over_and_a_big_record_gets_a_shard_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut w = writer(&path, limits(1000, 100));
    let sizes = [40usize, 40, 40, 500, 10, 10];
    let model: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![n as u8; n]).collect();
    let refs: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    w.append(&refs, &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    let c = Collection::open(&path).unwrap();
    assert_eq!(c.starts(), &[0, 2, 3, 4, 6]);
    assert_eq!(read_all(&c), model);
}

/// 40 random records of `len` bytes (from `seed`), published at `path` in
/// shards of `per_shard`, and the collection opened.
fn published(
    path: &Path,
    seed: u64,
    len: usize,
    per_shard: u32,
    codec: Codec,
) -> (Vec<Vec<u8>>, Collection) {
    let mut rng = Rng(seed);
    let model: Vec<Vec<u8>> = (0..40).map(|_| noise(&mut rng, len)).collect();
    let refs: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    let mut w = writer(path, limits(per_shard, 1 << 20));
    w.append(&refs, &opts(codec)).unwrap();
    w.publish().unwrap();
    (model, Collection::open(path).unwrap())
}

/// `gather_exact` of `idxs` returns the model's records, in order.
fn assert_gathers_exactly(c: &Collection, model: &[Vec<u8>], idxs: &[u64]) {
    let len = model[0].len();
    let mut dst = vec![0u8; idxs.len() * len];
    c.gather_exact(idxs, &mut dst, len).unwrap();
    let want: Vec<u8> = idxs
        .iter()
        .flat_map(|&i| model[i as usize].clone())
        .collect();
    assert_eq!(dst, want);
}

#[test]
fn fixed_gathers_across_shards_match_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (model, c) = published(&dir.path().join("c"), 2, 64, 7, Codec::Lz4);
    let idxs = [39u64, 0, 13, 14, 6, 7, 13, 21];
    assert_gathers_exactly(&c, &model, &idxs);
    // A read of one shard, past the first (read as that shard's store
    // reads), and reads of a collection of one shard.
    assert_gathers_exactly(&c, &model, &[20, 14, 15, 20]);
    let (one_model, one) = published(&dir.path().join("one"), 3, 64, 40, Codec::Raw);
    assert_eq!(one.shard_names().count(), 1);
    assert_gathers_exactly(&one, &one_model, &[39, 0, 5, 5]);
    let err = one.gather_exact(&[3, 40], &mut [0; 128], 64).unwrap_err();
    assert!(
        matches!(err, Error::IndexOutOfRange { index: 40, .. }),
        "{err}"
    );
    // Padded slots, and lengths, in the read's order whatever the shards'.
    let mut padded = vec![7u8; idxs.len() * 80];
    c.gather(&idxs, &mut padded, 80).unwrap();
    for (k, &i) in idxs.iter().enumerate() {
        assert_eq!(&padded[k * 80..k * 80 + 64], &model[i as usize][..]);
        assert!(padded[k * 80 + 64..(k + 1) * 80].iter().all(|&b| b == 0));
    }
    assert_eq!(c.lengths(&idxs).unwrap(), vec![64; idxs.len()]);
    // Two records of different shards written over each other are refused.
    let mut dst = vec![0u8; 128];
    let err = c.gather_ragged(&[0, 39], &mut dst, &[0, 10]).unwrap_err();
    assert!(matches!(err, Error::DestinationOverlap { .. }), "{err}");
}

#[test]
fn concurrent_publishers_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    std::thread::scope(|s| {
        for t in 0..6u8 {
            let path = &path;
            s.spawn(move || {
                let mut w = writer(path, limits(3, 1 << 20));
                for round in 0..4u8 {
                    let records: Vec<Vec<u8>> = (0..4u8).map(|i| vec![t, round, i]).collect();
                    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
                    w.append(&refs, &opts(Codec::Raw)).unwrap();
                    w.publish().unwrap();
                }
            });
        }
    });
    let c = Collection::open(&path).unwrap();
    let mut got = read_all(&c);
    // Each writer's records are in its order; all of them are there.
    for t in 0..6u8 {
        let mine: Vec<&Vec<u8>> = got.iter().filter(|r| r[0] == t).collect();
        let want: Vec<Vec<u8>> = (0..4u8)
            .flat_map(|round| (0..4u8).map(move |i| vec![t, round, i]))
            .collect();
        assert_eq!(mine, want.iter().collect::<Vec<_>>());
    }
    got.sort();
    assert_eq!(got.len(), 6 * 16);
    // Old generations are removed as new ones come.
    let manifests = fs::read_dir(&path)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("manifest-")
        })
        .count();
    assert!(manifests <= 2, "{manifests} manifests left");
}

#[test]
fn a_damaged_manifest_or_a_missing_shard_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut w = writer(&path, limits(2, 1 << 20));
    w.append(&[b"a", b"b", b"c"], &opts(Codec::Raw)).unwrap();
    let generation = w.publish().unwrap();
    let manifest = path.join(manifest_name(generation));
    let good = fs::read_to_string(&manifest).unwrap();
    fs::write(&manifest, good.replacen('\n', "\nx", 2)).unwrap();
    match Collection::open(&path) {
        Err(Error::NotAStore { path: p, reason }) => {
            assert_eq!(p, manifest);
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("{:?}", other.err()),
    }
    fs::write(&manifest, &good).unwrap();
    fs::remove_dir_all(path.join(&w.shards()[1])).unwrap();
    match Collection::open(&path) {
        Err(Error::NotAStore { path: p, reason }) => {
            assert_eq!(p, path.join(&w.shards()[1]));
            assert!(reason.contains("no meta.zr"), "{reason}");
        }
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn a_collection_holds_more_than_2_24_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    // Without a checksum sidecar, which would (rightly) call the length
    // written below damage.
    let unchecked = StoreOptions {
        checksums: Checksums::Off,
        ..StoreOptions::default()
    };
    let mut w =
        CollectionWriter::new(&path, &unchecked, limits(MAX_RECORDS as u32, 1 << 30)).unwrap();
    w.append(&[b""], &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    let full = path.join(&w.shards()[0]);
    drop(w);
    // A full shard in an instant: the table's unwritten slots read as empty
    // raw records, so its length alone makes it hold 2^24 of them.
    fs::OpenOptions::new()
        .write(true)
        .open(full.join(META_FILE_NAME))
        .unwrap()
        .write_all_at(&(MAX_RECORDS as u32).to_le_bytes(), LENGTH_OFFSET as u64)
        .unwrap();
    assert_eq!(Store::open(&full).unwrap().len(), MAX_RECORDS);
    let mut w = writer(&path, limits(4, 1 << 20));
    w.append(&[b"one", b"two", b"three"], &opts(Codec::Zstd))
        .unwrap();
    w.append(&[b"four", b"five"], &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    let c = Collection::open(&path).unwrap();
    let big = MAX_RECORDS as u64;
    assert_eq!(c.len(), big + 5);
    assert_eq!(c.starts(), &[0, big, big + 3, big + 5]);
    let idxs = [big + 4, 7, big, big + 2];
    let lens = c.lengths(&idxs).unwrap();
    assert_eq!(lens, [4, 0, 3, 5]);
    let mut dst = vec![0u8; 12];
    c.gather_ragged(&idxs, &mut dst, &[0, 4, 4, 7]).unwrap();
    assert_eq!(&dst, b"fiveonethree");
}

// -- writers killed at random moments ----------------------------------------

const CHILD_ENV: &str = "ZRECORD_COLLECTION_KILL_CHILD";
const ROUNDS_ENV: &str = "ZRECORD_COLLECTION_KILL_ROUNDS";
const WRITERS: u8 = 2;

/// Batch `b` of writer `w`: 3 records that say whose and which they are.
fn batch(w: u8, b: u32) -> Vec<Vec<u8>> {
    (0..3u8)
        .map(|i| {
            let mut r = vec![w, i];
            r.extend_from_slice(&b.to_le_bytes());
            r.extend(std::iter::repeat_n(w ^ i, (b as usize * 7) % 200));
            r
        })
        .collect()
}

/// The child: writer `w` appends batches and publishes after each, printing
/// `published <b>` once the publish returned.
#[test]
fn collection_kill_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (path, w) = spec.rsplit_once(',').unwrap();
    let w: u8 = w.parse().unwrap();
    let mut writer = writer(Path::new(path), limits(5, 1 << 20));
    for b in 0..400u32 {
        let records = batch(w, b);
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        writer.append(&refs, &opts(Codec::Zstd)).unwrap();
        writer.publish().unwrap();
        println!("published {b}");
    }
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn writers_killed_at_random_moments_leave_a_prefix_of_each() {
    let rounds: u64 = std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(12);
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(5);
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let mut children: Vec<_> = (0..WRITERS)
            .map(|w| {
                Command::new(&exe)
                    .args(["--exact", "collection_kill_child", "--nocapture"])
                    .env(CHILD_ENV, format!("{},{w}", path.display()))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20 + rng.below(400)));
        let mut reported = Vec::new();
        for child in &mut children {
            child.kill().unwrap();
            child.wait().unwrap();
            let out = BufReader::new(child.stdout.take().unwrap());
            let last = out
                .lines()
                .map_while(|l| l.ok())
                .filter_map(|l| l.strip_prefix("published ")?.parse::<u32>().ok())
                .last();
            reported.push(last);
        }
        let c = match Collection::open(&path) {
            Ok(c) => c,
            Err(Error::NotFound { .. }) => continue, // killed before it made the folder
            Err(e) => panic!("round {round}: {e}"),
        };
        let got = read_all(&c);
        for w in 0..WRITERS {
            let mine: Vec<Vec<u8>> = got.iter().filter(|r| r[0] == w).cloned().collect();
            assert_eq!(
                mine.len() % 3,
                0,
                "round {round}: writer {w} left part of a batch"
            );
            let batches = (mine.len() / 3) as u32;
            let want: Vec<Vec<u8>> = (0..batches).flat_map(|b| batch(w, b)).collect();
            assert_eq!(mine, want, "round {round}: writer {w}");
            if let Some(last) = reported[w as usize] {
                assert!(
                    batches > last,
                    "round {round}: writer {w} reported batch {last} published, {batches} are there"
                );
            }
        }
    }
}

/// Batches read on two threads, through the views the collection keeps of
/// its shards, stay exact while another handle appends to the shards: each
/// append is a change to their files, after which the views are made again
/// (while the other thread may be reading), and the appended records lie
/// past the collection's index.
#[test]
fn threads_read_exactly_while_other_handles_append_to_the_shards() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let (model, c) = published(&path, 9, 64, 4, Codec::Raw);
    let names: Vec<String> = c.shard_names().map(str::to_owned).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let appender = scope.spawn(|| {
            let shards: Vec<Store> = (names.iter().step_by(3))
                .map(|name| Store::open(path.join(name)).unwrap())
                .collect();
            let mut appended = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let shard = &shards[appended % shards.len()];
                shard.append(&[&[0xEE; 64][..]], &opts(Codec::Raw)).unwrap();
                appended += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            appended
        });
        let readers: Vec<_> = (0..2u64)
            .map(|t| {
                let (c, model) = (&c, &model);
                scope.spawn(move || {
                    let mut rng = Rng(t + 1);
                    for _ in 0..400 {
                        let idxs: Vec<u64> = (0..12).map(|_| rng.below(40)).collect();
                        assert_gathers_exactly(c, model, &idxs);
                        assert_eq!(c.lengths(&idxs).unwrap(), vec![64; 12]);
                    }
                })
            })
            .collect();
        for reader in readers {
            reader.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(appender.join().unwrap() > 0);
    });
    assert_eq!(read_all(&c), model);
}

/// A batch over many shards is checked on several threads (the crew takes
/// part once a batch spans enough stores); the error is still the one a
/// check in batch order meets first, and the destination is untouched.
#[test]
fn a_bad_shard_among_many_fails_the_batch_first_in_order_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let (model, c) = published(&path, 5, 32, 2, Codec::Raw);
    let names: Vec<String> = c.shard_names().map(str::to_owned).collect();
    assert_eq!(names.len(), 20);
    // A batch touching every shard, shard 15 before shard 12.
    let mut idxs: Vec<u64> = vec![30, 24];
    idxs.extend((0..40).filter(|i| ![30, 24].contains(i)));
    assert_gathers_exactly(&c, &model, &idxs);
    // Both shards' chunk files lose their records' bytes.
    for s in [12, 15] {
        let chunk = path.join(&names[s]).join(zrecord::chunk_file_name(0));
        fs::OpenOptions::new()
            .write(true)
            .open(chunk)
            .unwrap()
            .set_len(16)
            .unwrap();
    }
    let mut dst = vec![7u8; idxs.len() * 32];
    let err = c.gather_exact(&idxs, &mut dst, 32).unwrap_err();
    match &err {
        Error::CorruptRecord { path: at, .. } => assert!(at.ends_with(&names[15]), "{err}"),
        other => panic!("{other}"),
    }
    assert!(dst.iter().all(|&b| b == 7), "a refused batch wrote bytes");
}

/// A batch over many shards split over the shard crew is checked whole,
/// shard by shard, before any run is copied, through the shards' views
/// (the second round) as through their stores (the first).
#[test]
fn an_exact_batch_with_a_short_record_in_a_late_shard_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let model = samples_with_two_short(&mut Rng(12));
    let refs: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    let mut w = writer(&path, limits(8, 1 << 20));
    w.append(&refs, &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    let c = Collection::open(&path).unwrap();
    let names: Vec<String> = c.shard_names().map(str::to_owned).collect();
    let gather = |idxs: &[u64], dst: &mut [u8]| c.gather_exact(idxs, dst, SAMPLE_LEN);
    // Record 40 is record 0 of shard 5, record 60 is record 4 of shard 7.
    let refused = |err: &Error, record: u64| {
        let (shard, local) = (record / 8, record % 8);
        matches!(err, Error::InvalidArgument { path, reason }
            if path.ends_with(&names[shard as usize])
                && reason.contains(&format!("record {local} is 4000 bytes")))
    };
    for _ in 0..2 {
        assert_split_batches_are_checked_whole(gather, &model, refused);
    }
}

/// Records 0..12 as 8-byte numbers, published in `path` as three shards of
/// four; the shards' names.
fn three_shards(path: &Path) -> (Vec<[u8; 8]>, Vec<String>) {
    let records: Vec<[u8; 8]> = (0..12u64).map(u64::to_le_bytes).collect();
    let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
    let mut w = writer(path, limits(4, 1 << 20));
    w.append(&refs, &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    (records, w.shards().to_vec())
}

/// A delete from a shard renumbers its rows: it waits for (or is refused
/// by) every reader of the collection, even one that has not opened the
/// shard's store.
#[test]
fn a_delete_from_a_shard_waits_for_the_collections_readers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let (records, names) = three_shards(&path);

    // The reader has opened no shard's store: only the collection's lock
    // keeps a delete from renumbering shard 1's rows (and appends from
    // filling it back to the count the reader knows).
    let reader = Collection::open(&path).unwrap();
    let mut shard = Store::open(path.join(&names[1])).unwrap();
    for wait in [Duration::ZERO, Duration::from_millis(50)] {
        let err = shard.delete_within(&[0], wait).unwrap_err();
        assert!(
            matches!(&err, Error::Busy { path, reason } if path.ends_with("collection.lock")
                && reason.contains("readers of the collection have it open")),
            "{err}"
        );
    }
    shard.append(&[b"appended"], &opts(Codec::Raw)).unwrap();
    let mut dst = [0u8; 8];
    for g in 0..12u64 {
        reader.gather_exact(&[g], &mut dst, 8).unwrap();
        assert_eq!(dst, records[g as usize]);
    }
    // A delete given a wait waits for the readers to close.
    let deleting = std::thread::spawn(move || {
        shard.delete_within(&[0], Duration::from_secs(30)).unwrap();
        shard
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!deleting.is_finished(), "the delete ran under a reader");
    drop(reader);
    let shard = deleting.join().unwrap();
    assert_eq!(shard.len(), 4);
    drop(shard);
    let reader = Collection::open(&path).unwrap();
    reader.gather_exact(&[4], &mut dst, 8).unwrap();
    assert_eq!(&dst, b"appended", "the last record filled the hole");
}

/// Opening a collection while a delete from one of its shards holds the
/// readers lock (byte 0 of `collection.lock`, exclusively: FORMAT.md,
/// "Collections") fails as busy, as opening a store does while it is
/// deleted from; it opens once the delete is over.
#[cfg(target_os = "linux")]
#[test]
fn a_collection_does_not_open_while_a_delete_holds_its_readers_lock() {
    use std::os::fd::AsRawFd;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    three_shards(&path);
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join("collection.lock"))
        .unwrap();
    // SAFETY: all zeros is a valid `flock`; the fields that matter are set.
    let mut held: libc::flock = unsafe { std::mem::zeroed() };
    held.l_type = libc::F_WRLCK as _;
    held.l_whence = libc::SEEK_SET as _;
    held.l_len = 1;
    // SAFETY: `lock` is open for the call, which only reads `held`.
    let rc = unsafe { libc::fcntl(lock.as_raw_fd(), libc::F_OFD_SETLK, &mut held) };
    assert_eq!(rc, 0);
    let Err(err) = Collection::open(&path) else {
        panic!("a collection opened under a delete");
    };
    assert!(
        matches!(&err, Error::Busy { reason, .. } if reason.contains("deleting from one of its shards")),
        "{err}"
    );
    drop(lock);
    assert_eq!(Collection::open(&path).unwrap().len(), 12);
}

/// A shard that lost records while the collection held its store open (a
/// program that takes no locks lowered its length) is checked again once a
/// change to its files is seen, found shorter than the collection counted,
/// and a read past its new length is an error, as in a shard's own reads.
#[test]
fn a_shard_that_lost_records_while_open_is_an_error_once_its_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let (records, names) = three_shards(&path);
    let c = Collection::open(&path).unwrap();
    let all: Vec<u64> = (0..12).collect();
    let mut dst = [0u8; 12 * 8];
    // The second read goes through the views of the shards.
    for _ in 0..2 {
        c.gather_exact(&all, &mut dst, 8).unwrap();
    }
    // Shard 1's length goes from 4 to 3, written to its `meta.zr`.
    fs::OpenOptions::new()
        .write(true)
        .open(path.join(&names[1]).join(META_FILE_NAME))
        .unwrap()
        .write_all_at(&3u32.to_le_bytes(), LENGTH_OFFSET as u64)
        .unwrap();
    let mut one = [0u8; 8];
    let err = c.gather_exact(&[7], &mut one, 8).unwrap_err();
    assert!(
        matches!(&err, Error::IndexOutOfRange { path, index: 3, len: 3 } if path.ends_with(&names[1])),
        "{err}"
    );
    c.gather_exact(&[8], &mut one, 8).unwrap();
    assert_eq!(one, records[8]);
}

/// A shard that lost records since the collection was opened (a program
/// that takes no locks deleted them while this handle did not hold the
/// shard open) is an error naming it when a read first needs it, never other records under
/// the old indices; one that gained records reads as before.
#[test]
fn a_shard_that_lost_records_since_the_opening_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let (records, names) = three_shards(&path);

    let c = Collection::open(&path).unwrap();
    let mut dst = [0u8; 8];
    c.gather_exact(&[0], &mut dst, 8).unwrap();
    // Shard 1 loses its first record (its last moves into the hole);
    // shard 2 gains one. The delete is one that no lock stops, as a program
    // that knows nothing of collections (loaderx 0.5.0, which takes no
    // locks) would make: the readers lock's file is gone.
    std::fs::remove_file(path.join("collection.lock")).unwrap();
    let mut shard = Store::open(path.join(&names[1])).unwrap();
    shard.delete(&[0]).unwrap();
    drop(shard);
    let shard = Store::open(path.join(&names[2])).unwrap();
    shard.append(&[b"appended"], &opts(Codec::Raw)).unwrap();
    drop(shard);

    let err = c.gather_exact(&[4], &mut dst, 8).unwrap_err();
    assert!(
        matches!(&err, Error::ShardChanged { path, expected: 4, found: 3 } if path.ends_with(&names[1])),
        "{err}"
    );
    assert!(c.lengths(&[5]).is_err());
    c.gather_exact(&[9], &mut dst, 8).unwrap();
    assert_eq!(dst, records[9]);
    assert_eq!(c.len(), 12, "a handle keeps the index of its opening");
    // Open again, the collection reads the shards as they are.
    let c = Collection::open(&path).unwrap();
    assert_eq!(c.len(), 12);
    c.gather_exact(&[4], &mut dst, 8).unwrap();
    assert_eq!(dst, records[7]);
}
