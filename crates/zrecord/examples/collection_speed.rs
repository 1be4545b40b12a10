//! How long opening a collection of many shards takes, and a gather over
//! many shards against the same records in one store and in a collection
//! of one shard, in one run.
//!
//! `cargo run --release -p zrecord --example collection_speed -- [SHARDS]
//! [RECORDS_PER_SHARD] [RECORD_BYTES] [DIR]` (defaults 10000, 64, 784, a
//! temporary folder). Writes the collection (one writer, shards of
//! RECORDS_PER_SHARD records, published once) and the single store, then
//! prints the median of 5 opens and, up to 256 shards, the medians of 61
//! rounds of shuffled batches of 256, gathered with `gather_exact` as a
//! loader does (each round reads every record once from the store, then
//! from a collection of the same records in one shard, then from the
//! collection of SHARDS shards), and the medians of the rounds' ratios: the
//! collection's to the store's, and to the one shard's (what sharding
//! costs beyond being a collection).

use std::time::Instant;

use zrecord::{
    AppendOptions, Codec, Collection, CollectionWriter, ShardLimits, Store, StoreOptions,
};

/// Rounds of the gather comparison, each a pass over every record by each.
/// A pass over 64,000 small records takes some 10 ms, short enough for a
/// spell of the machine to tilt a round: with 15 rounds, the median of a
/// run's ratios moved by up to a tenth between runs of one build.
const ROUNDS: usize = 61;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().unwrap());
    let (shards, per_shard, record) = (arg(0, 10_000), arg(1, 64), arg(2, 784));
    let tmp = tempfile::tempdir().unwrap();
    let root = args.get(3).map_or(tmp.path().to_path_buf(), Into::into);
    let n = shards * per_shard;
    let data: Vec<u8> = (0..n * record).map(|i| (i * 31 % 251) as u8).collect();
    let records: Vec<&[u8]> = data.chunks(record).collect();
    let options = AppendOptions {
        codec: Codec::Raw,
        durable: false,
        ..AppendOptions::default()
    };

    let started = Instant::now();
    let limits = ShardLimits {
        max_records: per_shard as u32,
        ..ShardLimits::default()
    };
    let path = root.join("collection");
    let mut writer = CollectionWriter::new(&path, &StoreOptions::default(), limits).unwrap();
    for batch in records.chunks(per_shard) {
        writer.append(batch, &options).unwrap();
    }
    writer.publish().unwrap();
    drop(writer);
    let single = Store::open(root.join("single")).unwrap();
    single.append(&records, &options).unwrap();
    println!(
        "wrote {shards} shards of {per_shard} records of {record} bytes, and one store of \
         {n}, in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let opens: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let c = Collection::open(&path).unwrap();
            assert_eq!(c.len(), n as u64);
            t.elapsed().as_secs_f64()
        })
        .collect();
    println!("open: median {:.3} s over 5 opens", median(opens));
    if shards > 256 {
        // A collection keeps at least 256 shard stores open, more where the
        // open-file limit allows; shuffled batches over more shards than stay
        // open reopen stores all the time, which is not what this measures.
        println!("gather: not measured over more than 256 shards");
        return;
    }

    // One shuffled order, the same for both.
    let mut order: Vec<u64> = (0..n as u64).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let one_shard = root.join("one-shard");
    let limits = ShardLimits {
        max_records: n as u32,
        ..ShardLimits::default()
    };
    let mut writer = CollectionWriter::new(&one_shard, &StoreOptions::default(), limits).unwrap();
    writer.append(&records, &options).unwrap();
    writer.publish().unwrap();
    drop(writer);
    let one_shard = Collection::open(&one_shard).unwrap();
    let collection = Collection::open(&path).unwrap();
    let batch = 256;
    let mut dst = vec![0u8; batch * record];
    // One pass over every record, in records per second.
    let mut pass = |gather: &dyn Fn(&[u64], &mut [u8])| {
        let t = Instant::now();
        for idxs in order.chunks(batch) {
            gather(idxs, &mut dst[..idxs.len() * record]);
        }
        n as f64 / t.elapsed().as_secs_f64()
    };
    let one = |idxs: &[u64], dst: &mut [u8]| single.gather_exact(idxs, dst, record).unwrap();
    let shard = |idxs: &[u64], dst: &mut [u8]| one_shard.gather_exact(idxs, dst, record).unwrap();
    let many = |idxs: &[u64], dst: &mut [u8]| collection.gather_exact(idxs, dst, record).unwrap();
    pass(&one);
    pass(&shard);
    pass(&many);
    // Rounds go through the three in turn, so that a slow spell of the
    // machine falls on all; a ratio is the median of the rounds' ratios.
    let (mut ones, mut shard_rates, mut manys) = (Vec::new(), Vec::new(), Vec::new());
    let (mut to_store, mut shard_to_store, mut to_shard) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (a, b, c) = (pass(&one), pass(&shard), pass(&many));
        ones.push(a);
        shard_rates.push(b);
        manys.push(c);
        shard_to_store.push(b / a);
        to_store.push(c / a);
        to_shard.push(c / b);
    }
    println!("gather, one store:  {:>12.0} records/s", median(ones));
    println!(
        "gather, one shard:  {:>12.0} records/s ({:.2}x the store)",
        median(shard_rates),
        median(shard_to_store)
    );
    println!(
        "gather, {shards} shards: {:>12.0} records/s ({:.2}x the store, {:.2}x one shard)",
        median(manys),
        median(to_store),
        median(to_shard)
    );
}
