//! Property test: random operation sequences against a `Vec<Vec<u8>>` model.
//! Every read must match the model bit for bit.

mod common;

use common::{compressible, noise, opts, read, read_all, small_chunks, Rng};
use proptest::prelude::*;
use zrecord::{Codec, Store};

#[derive(Clone, Debug)]
enum Op {
    AppendFixed {
        n: usize,
        len: usize,
        codec: usize,
        squeeze: bool,
        seed: u64,
    },
    AppendRagged {
        lens: Vec<usize>,
        codec: usize,
        squeeze: bool,
        seed: u64,
    },
    Gather {
        picks: Vec<u64>,
    },
    GatherFixed {
        picks: Vec<u64>,
    },
    Delete {
        picks: Vec<u64>,
    },
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..40usize, 0..700usize, 0..4usize, any::<bool>(), any::<u64>())
            .prop_map(|(n, len, codec, squeeze, seed)| Op::AppendFixed { n, len, codec, squeeze, seed }),
        3 => (prop::collection::vec(0..3000usize, 0..30), 0..4usize, any::<bool>(), any::<u64>())
            .prop_map(|(lens, codec, squeeze, seed)| Op::AppendRagged { lens, codec, squeeze, seed }),
        3 => prop::collection::vec(any::<u64>(), 0..50).prop_map(|picks| Op::Gather { picks }),
        1 => prop::collection::vec(any::<u64>(), 0..50).prop_map(|picks| Op::GatherFixed { picks }),
        2 => prop::collection::vec(any::<u64>(), 0..12).prop_map(|picks| Op::Delete { picks }),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

fn records(rng: &mut Rng, lens: &[usize], squeeze: bool) -> Vec<Vec<u8>> {
    lens.iter()
        .map(|&l| {
            if squeeze {
                compressible(rng, l)
            } else {
                noise(rng, l)
            }
        })
        .collect()
}

fn run(ops: Vec<Op>, capacity: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let options = small_chunks(capacity);
    let mut store = Store::open_with(&path, &options).unwrap();
    let mut model: Vec<Vec<u8>> = Vec::new();
    for op in ops {
        match op {
            Op::AppendFixed {
                n,
                len,
                codec,
                squeeze,
                seed,
            } => {
                let recs = records(&mut Rng(seed | 1), &vec![len; n], squeeze);
                let src = recs.concat();
                let first = store
                    .append_fixed(&src, n, len, &opts(Codec::ALL[codec]))
                    .unwrap();
                assert_eq!(first as usize, model.len());
                model.extend(recs);
            }
            Op::AppendRagged {
                lens,
                codec,
                squeeze,
                seed,
            } => {
                let recs = records(&mut Rng(seed | 1), &lens, squeeze);
                // Lay the records out in reverse with gaps, so offsets matter.
                let mut src = Vec::new();
                let mut offsets = vec![0u64; recs.len()];
                for (i, r) in recs.iter().enumerate().rev() {
                    src.push(0xEE);
                    offsets[i] = src.len() as u64;
                    src.extend_from_slice(r);
                }
                let lens32: Vec<u32> = lens.iter().map(|&l| l as u32).collect();
                let first = store
                    .append_ragged(&src, &offsets, &lens32, &opts(Codec::ALL[codec]))
                    .unwrap();
                assert_eq!(first as usize, model.len());
                model.extend(recs);
            }
            Op::Gather { picks } if !model.is_empty() => {
                let idxs: Vec<u64> = picks.iter().map(|p| p % model.len() as u64).collect();
                let got = read(&store, &idxs);
                for (g, &i) in got.iter().zip(&idxs) {
                    assert_eq!(g, &model[i as usize], "record {i}");
                }
            }
            Op::GatherFixed { picks } if !model.is_empty() => {
                let idxs: Vec<u64> = picks.iter().map(|p| p % model.len() as u64).collect();
                let stride = idxs
                    .iter()
                    .map(|&i| model[i as usize].len())
                    .max()
                    .unwrap_or(0)
                    + 3;
                let mut dst = vec![0xAB; stride * idxs.len()];
                store.gather(&idxs, &mut dst, stride).unwrap();
                for (k, &i) in idxs.iter().enumerate() {
                    let want = &model[i as usize];
                    let slot = &dst[k * stride..(k + 1) * stride];
                    assert_eq!(&slot[..want.len()], &want[..]);
                    assert!(
                        slot[want.len()..].iter().all(|&b| b == 0),
                        "slot padding zeroed"
                    );
                }
            }
            Op::Delete { picks } if !model.is_empty() => {
                let idxs: Vec<u64> = picks.iter().map(|p| p % model.len() as u64).collect();
                store.delete(&idxs).unwrap();
                let mut targets = idxs.clone();
                targets.sort_unstable_by(|a, b| b.cmp(a));
                targets.dedup();
                for t in targets {
                    model.swap_remove(t as usize);
                }
            }
            Op::Compact => {
                let report = store.compact().unwrap();
                assert_eq!(report.after.live_bytes, report.before.live_bytes);
                assert!(report.after.chunk_bytes <= report.before.chunk_bytes);
                // A second run has nothing left to move.
                assert_eq!(store.compact().unwrap().moved, 0);
            }
            Op::Reopen => {
                drop(store);
                store = Store::open_with(&path, &options).unwrap();
            }
            _ => {}
        }
        assert_eq!(store.len(), model.len());
    }
    assert_eq!(read_all(&store), model);
    drop(store);
    assert_eq!(read_all(&Store::open_with(&path, &options).unwrap()), model);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn operations_match_the_model(ops in prop::collection::vec(op(), 1..40), capacity in 3000u64..20_000) {
        run(ops, capacity);
    }
}
