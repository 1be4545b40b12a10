//! Writes seed inputs for `open_and_gather` from real stores, so the fuzzer
//! starts from valid headers, entries, compressed streams and journals
//! instead of having to find them:
//!
//!     cargo run --release --bin make_seeds -- corpus/open_and_gather

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use zrecord::{AppendOptions, Checksums, Codec, IoEvent, IoHook, Store, StoreOptions};
use zrecord_fuzz::{flag, Image};

/// Refuses the removal of the delete journal, so a delete leaves it behind.
struct KeepJournal(AtomicBool);

impl IoHook for KeepJournal {
    fn before(&self, event: &IoEvent<'_>) -> io::Result<()> {
        match event {
            IoEvent::FileRemove { .. } if self.0.load(Ordering::Relaxed) => {
                Err(io::Error::other("keep the journal"))
            }
            _ => Ok(()),
        }
    }
}

/// Stores written per codec: plain, after a delete, with a kept delete
/// journal, with checksums.
const VARIANTS: u8 = 4;

fn records(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            let len = [0, 1, 40, 300, 1200, 3000][i % 6];
            let mut b = (x >> 7) as u8;
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 3 == 2 {
                        x as u8
                    } else {
                        b = b.wrapping_add((x % 3) as u8);
                        b
                    }
                })
                .collect()
        })
        .collect()
}

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "corpus/open_and_gather".into());
    std::fs::create_dir_all(&out).unwrap();
    for (s, codec) in Codec::ALL.into_iter().enumerate() {
        for variant in 0..VARIANTS {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.zr");
            let hook = Arc::new(KeepJournal(AtomicBool::new(false)));
            let options = StoreOptions {
                chunk_capacity: 6000,
                // An image carries no sidecar: with flag::CHECKSUMS the
                // target builds one from the records at open.
                checksums: Checksums::Off,
                io_hook: Some(hook.clone()),
                ..StoreOptions::default()
            };
            let mut store = Store::open_with(&path, &options).unwrap();
            let recs = records(s as u64 * 31 + variant as u64, 10);
            let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
            let append = AppendOptions {
                codec,
                durable: false,
                ..AppendOptions::default()
            };
            store.append(&slices, &append).unwrap();
            let flags = match variant {
                0 => 0,
                1 => {
                    store.delete(&[1, 4]).unwrap();
                    flag::COMPACT | flag::APPEND
                }
                2 => {
                    // The journal stays: the delete fails at its last step.
                    hook.0.store(true, Ordering::Relaxed);
                    assert!(store.delete(&[0, 7, 9]).is_err());
                    flag::DELETE
                }
                _ => flag::CHECKSUMS | flag::APPEND,
            };
            drop(store);
            // Every seed must fit: a seed left out silently once left the
            // fuzzer with none at all.
            let image = Image::of_store(&path, flags)
                .unwrap_or_else(|| panic!("{codec:?}/{variant}: does not fit an image"));
            let bytes = image.encode();
            assert_eq!(Image::parse(&bytes).chunks, image.chunks);
            let name = format!("{out}/seed-{}-{variant}", codec.name());
            std::fs::write(name, bytes).unwrap();
        }
    }
    println!(
        "wrote {} seeds to {out}",
        Codec::ALL.len() * VARIANTS as usize
    );
}
