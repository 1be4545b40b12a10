//! What open handles hold in memory: a collection of many small shards read
//! with checksums holds memory in proportion to its records, not a fixed
//! sum per shard. (Each store's marks of checked records were once one
//! bitmap for every possible slot, 2 MiB a shard.)

mod common;

use std::sync::atomic::Ordering;

use common::{opts, Rng};
use zrecord::{Codec, Collection, CollectionWriter, ShardLimits, StoreOptions};

#[global_allocator]
static GLOBAL: common::CountingAlloc = common::CountingAlloc;

#[test]
fn checked_reads_over_many_shards_hold_memory_in_proportion_to_records() {
    const SHARDS: u64 = 300;
    const PER_SHARD: u32 = 4;
    const LEN: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut rng = Rng(7);
    let records: Vec<Vec<u8>> = (0..SHARDS * u64::from(PER_SHARD))
        .map(|_| common::noise(&mut rng, LEN))
        .collect();
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let limits = ShardLimits {
        max_records: PER_SHARD,
        max_bytes: 1 << 20,
    };
    let mut w = CollectionWriter::new(&path, &StoreOptions::default(), limits).unwrap();
    w.append(&refs, &opts(Codec::Raw)).unwrap();
    w.publish().unwrap();
    drop(w);

    let c = Collection::open(&path).unwrap();
    assert_eq!(c.shard_names().count() as u64, SHARDS);
    let idxs: Vec<u64> = (0..c.len()).collect();
    let mut dst = vec![0u8; idxs.len() * LEN];
    let before = common::LIVE_BYTES.load(Ordering::Relaxed);
    // The first gather checks every record and marks it checked; the second
    // reads through the marks.
    for _ in 0..2 {
        c.gather(&idxs, &mut dst, LEN).unwrap();
        assert!(dst.chunks(LEN).eq(records.iter().map(Vec::as_slice)));
    }
    let held = common::LIVE_BYTES.load(Ordering::Relaxed) - before;
    // Marks cost 8 KiB a shard here (one page each); 64 KiB leaves room for
    // anything else a shard's first read may keep, far below 2 MiB.
    assert!(
        held < SHARDS as isize * (64 << 10),
        "reading {SHARDS} shards of {PER_SHARD} records kept {held} bytes"
    );
}
