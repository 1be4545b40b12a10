//! Operation sequences against a `Vec<Vec<u8>>` model, with injected I/O
//! failures.
//!
//! The input decodes (through `arbitrary`) into a chunk capacity and a list
//! of operations: appends (slices, fixed, ragged; any codec; durable or
//! not), gathers, deletes, compactions, reopens. An operation may carry a
//! fault: the store's `IoHook` then fails the N-th file operation it
//! announces. After a failed operation the store is dropped and reopened
//! without faults, and must hold the model from either before or after the
//! operation: an append all or nothing, a delete all or nothing, a
//! compaction never changing the content. The state found becomes the
//! model, and the sequence goes on. Without a fault every operation must
//! succeed (or fail with the error its arguments call for) and match the
//! model exactly.
#![no_main]

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zrecord::{AppendOptions, Checksums, Codec, Error, IoEvent, IoHook, Store, StoreOptions};
use zrecord_fuzz::common::read_all;

/// Fails the event whose number (from 0, counted since it was armed) is
/// `fail_at`; `u64::MAX` means never.
struct FailAt {
    seen: AtomicU64,
    fail_at: AtomicU64,
    fired: AtomicU64,
}

impl FailAt {
    fn arm(&self, at: Option<u16>) {
        self.seen.store(0, Ordering::SeqCst);
        self.fired.store(0, Ordering::SeqCst);
        self.fail_at
            .store(at.map_or(u64::MAX, u64::from), Ordering::SeqCst);
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst) > 0
    }
}

impl IoHook for FailAt {
    fn before(&self, _event: &IoEvent<'_>) -> io::Result<()> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst);
        if n == self.fail_at.load(Ordering::SeqCst) {
            self.fired.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::other("injected fault"));
        }
        Ok(())
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Content {
    Compressible,
    Noise,
    Constant,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Shape {
    Slices,
    Fixed,
    Ragged,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Append {
        shape: Shape,
        n: u8,
        len: u16,
        content: Content,
        seed: u16,
        codec: u8,
        durable: bool,
        fault: Option<u16>,
    },
    Gather {
        picks: Vec<u16>,
        ragged: bool,
    },
    Delete {
        picks: Vec<u16>,
        fault: Option<u16>,
    },
    Compact {
        fault: Option<u16>,
    },
    CompactSome {
        max: u8,
        fault: Option<u16>,
    },
    Reopen,
}

#[derive(Arbitrary, Debug)]
struct Input {
    capacity: u8,
    checksums: bool,
    ops: Vec<Op>,
}

const MAX_OPS: usize = 48;

fn record(content: Content, seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut b = next() as u8;
    (0..len)
        .map(|_| match content {
            Content::Compressible => {
                b = b.wrapping_add((next() % 3) as u8);
                b
            }
            Content::Noise => next() as u8,
            Content::Constant => b,
        })
        .collect()
}

struct Run {
    dir: tempfile::TempDir,
    options: StoreOptions,
    hook: Arc<FailAt>,
    model: Vec<Vec<u8>>,
}

impl Run {
    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("s.zr")
    }

    fn open(&self) -> Store {
        self.hook.arm(None);
        Store::open_with(self.path(), &self.options)
            .unwrap_or_else(|e| panic!("reopening without faults failed: {e}"))
    }
}

fn check_stats(store: &Store, model: &[Vec<u8>]) {
    let stats = store.stats();
    assert_eq!(stats.records, model.len() as u64);
    assert!(stats.live_bytes <= stats.chunk_bytes, "{stats:?}");
}

/// Where a failed (or refused) operation may leave the store.
enum Outcome {
    /// Nothing changed.
    Unchanged,
    /// Either nothing changed or the operation happened whole.
    BeforeOrAfter(Vec<Vec<u8>>),
}

fn apply_delete(model: &[Vec<u8>], targets: &[u64]) -> Vec<Vec<u8>> {
    let mut after = model.to_vec();
    let mut t = targets.to_vec();
    t.sort_unstable_by(|a, b| b.cmp(a));
    t.dedup();
    for i in t {
        after.swap_remove(i as usize);
    }
    after
}

fn expected_error(e: &Error, what: &str) {
    match e {
        Error::InvalidArgument { .. } | Error::IndexOutOfRange { .. } | Error::StoreFull { .. } => {
        }
        other => panic!("{what} failed without an injected fault: {other}"),
    }
}

fn run(input: Input) {
    let capacity = 512 + input.capacity as u64 * 64;
    let hook = Arc::new(FailAt {
        seen: AtomicU64::new(0),
        fail_at: AtomicU64::new(u64::MAX),
        fired: AtomicU64::new(0),
    });
    let mut run = Run {
        dir: tempfile::tempdir().unwrap(),
        options: StoreOptions {
            chunk_capacity: capacity,
            checksums: if input.checksums {
                Checksums::On
            } else {
                Checksums::Off
            },
            io_hook: Some(hook.clone()),
            ..StoreOptions::default()
        },
        hook,
        model: Vec::new(),
    };
    let mut store = run.open();
    for op in input.ops.into_iter().take(MAX_OPS) {
        let (result, after): (zrecord::Result<()>, Outcome) = match op {
            Op::Append {
                shape,
                n,
                len,
                content,
                seed,
                codec,
                durable,
                fault,
            } => {
                let n = n as usize % 17;
                let len = len as usize % 2500;
                let recs: Vec<Vec<u8>> = (0..n)
                    .map(|i| {
                        let l = match shape {
                            Shape::Fixed => len,
                            _ => (len + i * 397) % 2500,
                        };
                        record(content, seed as u64 * 64 + i as u64, l)
                    })
                    .collect();
                let options = AppendOptions {
                    codec: Codec::ALL[codec as usize % 4],
                    durable,
                    ..AppendOptions::default()
                };
                run.hook.arm(fault);
                let result = match shape {
                    Shape::Slices => {
                        let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
                        store.append(&slices, &options)
                    }
                    Shape::Fixed => store.append_fixed(&recs.concat(), n, len, &options),
                    Shape::Ragged => {
                        let mut src = Vec::new();
                        let mut offsets = vec![0; n];
                        for (i, r) in recs.iter().enumerate().rev() {
                            src.push(0xEE);
                            offsets[i] = src.len() as u64;
                            src.extend_from_slice(r);
                        }
                        let lens: Vec<u32> = recs.iter().map(|r| r.len() as u32).collect();
                        store.append_ragged(&src, &offsets, &lens, &options)
                    }
                };
                let mut after = run.model.clone();
                after.extend(recs);
                match result {
                    Ok(first) => {
                        assert_eq!(first as usize, run.model.len());
                        (Ok(()), Outcome::BeforeOrAfter(after))
                    }
                    Err(e) => (Err(e), Outcome::BeforeOrAfter(after)),
                }
            }
            Op::Gather { picks, ragged } => {
                let len = run.model.len() as u64;
                // One pick in eight is out of range and must be refused.
                let idxs: Vec<u64> = picks
                    .iter()
                    .map(|&p| p as u64 % (len + len / 8 + 1))
                    .collect();
                let lens: Vec<usize> = idxs
                    .iter()
                    .map(|&i| run.model.get(i as usize).map_or(0, Vec::len))
                    .collect();
                let result = if ragged {
                    let mut offsets = Vec::new();
                    let mut total = 0u64;
                    for &l in &lens {
                        offsets.push(total);
                        total += l as u64 + 1;
                    }
                    let mut dst = vec![0x5A; total as usize];
                    let r = store.gather_ragged(&idxs, &mut dst, &offsets);
                    if r.is_ok() {
                        for (k, &i) in idxs.iter().enumerate() {
                            let at = offsets[k] as usize;
                            assert_eq!(dst[at..at + lens[k]], run.model[i as usize][..]);
                            assert_eq!(dst[at + lens[k]], 0x5A, "gather wrote past a record");
                        }
                    }
                    r
                } else {
                    let stride = lens.iter().copied().max().unwrap_or(0) + 1;
                    let mut dst = vec![0x5A; idxs.len() * stride];
                    let r = store.gather(&idxs, &mut dst, stride);
                    if r.is_ok() {
                        for (k, &i) in idxs.iter().enumerate() {
                            let slot = &dst[k * stride..(k + 1) * stride];
                            assert_eq!(slot[..lens[k]], run.model[i as usize][..]);
                            assert!(slot[lens[k]..].iter().all(|&b| b == 0));
                        }
                    }
                    r
                };
                if idxs.iter().any(|&i| i >= len) {
                    assert!(
                        matches!(result, Err(Error::IndexOutOfRange { .. })),
                        "{result:?}"
                    );
                } else {
                    result.unwrap_or_else(|e| panic!("gather failed: {e}"));
                }
                continue;
            }
            Op::Delete { picks, fault } => {
                let len = run.model.len() as u64;
                let idxs: Vec<u64> = picks
                    .iter()
                    .take(32)
                    .map(|&p| p as u64 % (len + len / 8 + 1))
                    .collect();
                run.hook.arm(fault);
                let result = store.delete(&idxs);
                if idxs.iter().any(|&i| i >= len) {
                    assert!(
                        matches!(result, Err(Error::IndexOutOfRange { .. })),
                        "{result:?}"
                    );
                    (result, Outcome::Unchanged)
                } else {
                    let after = apply_delete(&run.model, &idxs);
                    (result, Outcome::BeforeOrAfter(after))
                }
            }
            Op::Compact { fault } => {
                run.hook.arm(fault);
                let result = store.compact().map(|r| assert!(r.finished));
                (result, Outcome::Unchanged)
            }
            Op::CompactSome { max, fault } => {
                run.hook.arm(fault);
                let result = store.compact_some(max as u64 % 8).map(|_| ());
                (result, Outcome::Unchanged)
            }
            Op::Reopen => {
                drop(store);
                store = run.open();
                (Ok(()), Outcome::Unchanged)
            }
        };
        let fired = run.hook.fired();
        run.hook.arm(None);
        match (result, fired) {
            (Ok(()), _) => {
                if let Outcome::BeforeOrAfter(after) = after {
                    run.model = after;
                }
                assert!(
                    read_all(&store) == run.model,
                    "store differs from the model"
                );
            }
            (Err(e), false) => {
                expected_error(&e, "an operation");
                assert!(
                    read_all(&store) == run.model,
                    "a refused operation changed the store"
                );
            }
            (Err(_), true) => {
                // The injected fault: reopen without faults and see which
                // state survived.
                drop(store);
                store = run.open();
                let found = read_all(&store);
                match after {
                    Outcome::BeforeOrAfter(after) if found == after => run.model = after,
                    _ => assert!(
                        found == run.model,
                        "after a failed operation the store holds {} records, neither the \
                         {} before nor the state after",
                        found.len(),
                        run.model.len()
                    ),
                }
                if run.options.checksums == Checksums::On {
                    let report = store.verify().unwrap();
                    assert!(report.bad.is_empty(), "{:?}", report.bad);
                }
            }
        }
        check_stats(&store, &run.model);
    }
    drop(store);
    let store = run.open();
    assert!(read_all(&store) == run.model);
    if run.options.checksums == Checksums::On {
        assert!(store.verify().unwrap().bad.is_empty());
    }
}

fuzz_target!(|input: Input| {
    run(input);
});
