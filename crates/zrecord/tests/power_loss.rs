//! Power-loss simulation. Every file operation of a run of durable appends,
//! deletes and a compaction is recorded through the `IoHook` seam; then, for
//! every prefix of the operations, the files a power loss at that instant
//! could leave are rebuilt — everything synced, plus any subset of what was
//! not, plus a torn write — and opened. Each must be a valid store holding
//! the records from just before or just after the operation in flight, and
//! must take further appends without damage. The store keeps checksums, so
//! every record read back is also checked against its checksum.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{compressible, noise, read_all, Rng};
use rayon::prelude::*;
use zrecord::layout::{checksum_slot_offset, entry_offset, CHECKSUM_FILE_LEN};
use zrecord::{
    chunk_file_name, AppendOptions, Checksums, Codec, IoEvent, IoHook, Store, StoreOptions,
    CHECKSUM_FILE_NAME, META_FILE_LEN, META_FILE_NAME,
};

const META: &str = META_FILE_NAME;
/// Table slots this test's stores use.
const SLOTS_USED: usize = 64;
/// The part of meta.zr this test's stores use: the header and the slots used.
const META_USED: usize = entry_offset(SLOTS_USED);
const SUMS: &str = CHECKSUM_FILE_NAME;
/// The part of checksums.zr used: its header and the slots used.
const SUMS_USED: usize = checksum_slot_offset(SLOTS_USED);
const PAGE: usize = 4096;
const SECTOR: usize = 512;

#[derive(Clone, Debug)]
enum Pending {
    Create(String),
    Write {
        file: String,
        offset: usize,
        bytes: Vec<u8>,
    },
    Truncate {
        file: String,
        len: usize,
    },
    Remove(String),
}

impl Pending {
    fn file(&self) -> &str {
        match self {
            Pending::Create(f) | Pending::Remove(f) => f,
            Pending::Write { file, .. } | Pending::Truncate { file, .. } => file,
        }
    }
}

/// Files as the disk holds them: each file's data (durable independently
/// of its directory entry) and which names the directory holds. `meta.zr`
/// is kept as its used prefix.
#[derive(Clone, Default)]
struct Disk {
    data: BTreeMap<String, Vec<u8>>,
    names: BTreeSet<String>,
}

fn apply(disk: &mut Disk, op: &Pending) {
    match op {
        Pending::Create(f) => {
            disk.names.insert(f.clone());
        }
        Pending::Remove(f) => {
            disk.names.remove(f);
            disk.data.remove(f);
        }
        Pending::Truncate { file, len } => {
            disk.data.entry(file.clone()).or_default().resize(*len, 0);
        }
        Pending::Write {
            file,
            offset,
            bytes,
        } => {
            let d = disk.data.entry(file.clone()).or_default();
            if d.len() < offset + bytes.len() {
                d.resize(offset + bytes.len(), 0);
            }
            d[*offset..offset + bytes.len()].copy_from_slice(bytes);
        }
    }
}

/// The disk as the medium assumptions allow it to be after each operation.
#[derive(Clone, Default)]
struct Medium {
    durable: Disk,
    pending: Vec<Pending>,
}

impl Medium {
    fn settle(&mut self, done: impl Fn(&Pending) -> bool) {
        let (now, later): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|p| done(p));
        for p in &now {
            apply(&mut self.durable, p);
        }
        self.pending = later;
    }

    fn event(&mut self, e: &IoEvent<'_>) {
        let chunk = |c: &u16| chunk_file_name(*c);
        match e {
            IoEvent::ChunkCreate { chunk: c } => self.pending.push(Pending::Create(chunk(c))),
            IoEvent::ChunkWrite {
                chunk: c,
                offset,
                bytes,
            } => {
                self.pending.push(Pending::Write {
                    file: chunk(c),
                    offset: *offset as usize,
                    bytes: bytes.to_vec(),
                });
            }
            IoEvent::ChunkSync { chunk: c } => {
                let file = chunk(c);
                self.settle(|p| {
                    p.file() == file && !matches!(p, Pending::Create(_) | Pending::Remove(_))
                });
            }
            IoEvent::ChunkTruncate { chunk: c, len } => self.pending.push(Pending::Truncate {
                file: chunk(c),
                len: *len as usize,
            }),
            IoEvent::ChunkRemove { chunk: c } => self.pending.push(Pending::Remove(chunk(c))),
            // Blocks for later writes: the file's bytes stay as they are.
            IoEvent::MetaAllocate { .. } | IoEvent::ChecksumAllocate { .. } => {}
            IoEvent::MetaWrite { offset, bytes } => {
                self.mapped_write(META, META_USED, *offset, bytes)
            }
            IoEvent::MetaSync { offset, len } => self.mapped_sync(META, *offset, *len),
            IoEvent::ChecksumWrite { offset, bytes } => {
                self.mapped_write(SUMS, SUMS_USED, *offset, bytes)
            }
            IoEvent::ChecksumSync { offset, len } => self.mapped_sync(SUMS, *offset, *len),
            IoEvent::FileWrite { name, bytes } => {
                self.pending.push(Pending::Create(name.to_string()));
                self.pending.push(Pending::Truncate {
                    file: name.to_string(),
                    len: 0,
                });
                self.pending.push(Pending::Write {
                    file: name.to_string(),
                    offset: 0,
                    bytes: bytes.to_vec(),
                });
            }
            IoEvent::FileSync { name } => self.settle(|p| {
                p.file() == *name && !matches!(p, Pending::Create(_) | Pending::Remove(_))
            }),
            IoEvent::FileRemove { name } => self.pending.push(Pending::Remove(name.to_string())),
            IoEvent::DirSync => {
                self.settle(|p| matches!(p, Pending::Create(_) | Pending::Remove(_)))
            }
            other => panic!("the simulation does not model {other:?}"),
        }
    }

    fn mapped_write(&mut self, file: &str, used: usize, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= used, "test stores stay small");
        self.pending.push(Pending::Write {
            file: file.into(),
            offset,
            bytes: bytes.to_vec(),
        })
    }

    /// `msync` makes the pages it covers durable, whichever writes they hold.
    fn mapped_sync(&mut self, name: &str, offset: usize, len: usize) {
        let (lo, hi) = (offset / PAGE * PAGE, (offset + len).div_ceil(PAGE) * PAGE);
        self.settle(|p| match p {
            Pending::Write {
                file,
                offset,
                bytes,
            } => file == name && *offset < hi && offset + bytes.len() > lo,
            _ => false,
        });
    }

    /// Candidate disks after a power loss now: the durable state plus
    /// several subsets of the pending operations, one with a torn write.
    fn crash_images(&self, rng: &mut Rng) -> Vec<Disk> {
        let with = |keep: &dyn Fn(usize) -> bool| {
            let mut disk = self.durable.clone();
            for (i, p) in self.pending.iter().enumerate() {
                if keep(i) {
                    apply(&mut disk, p);
                }
            }
            disk
        };
        let mut images = vec![with(&|_| false), with(&|_| true)];
        for _ in 0..4 {
            let mask = rng.next_u64();
            images.push(with(&|i| mask >> (i % 64) & 1 == 1));
        }
        // Tear the last pending write larger than a sector at a sector edge.
        if let Some(last) = self
            .pending
            .iter()
            .rposition(|p| matches!(p, Pending::Write { bytes, .. } if bytes.len() > SECTOR))
        {
            let mut disk = with(&|i| i < last);
            if let Pending::Write {
                file,
                offset,
                bytes,
            } = &self.pending[last]
            {
                let cut = (offset + bytes.len() / 2) / SECTOR * SECTOR;
                if cut > *offset {
                    let torn = Pending::Write {
                        file: file.clone(),
                        offset: *offset,
                        bytes: bytes[..cut - offset].to_vec(),
                    };
                    apply(&mut disk, &torn);
                }
            }
            images.push(disk);
        }
        images
    }
}

/// Records every event, with the medium state after each.
struct Recorder {
    medium: Mutex<Medium>,
    snapshots: Mutex<Vec<Medium>>,
}

impl IoHook for Recorder {
    fn before(&self, event: &IoEvent<'_>) -> std::io::Result<()> {
        // The snapshot before the event is the disk if power fails right now.
        let mut medium = self.medium.lock().unwrap();
        self.snapshots.lock().unwrap().push(medium.clone());
        medium.event(event);
        Ok(())
    }
}

fn materialize(disk: &Disk, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for name in &disk.names {
        let bytes = disk.data.get(name).map(Vec::as_slice).unwrap_or_default();
        let f = File::create(dir.join(name)).unwrap();
        if name == META {
            f.set_len(META_FILE_LEN as u64).unwrap();
        }
        if name == SUMS {
            f.set_len(CHECKSUM_FILE_LEN as u64).unwrap();
        }
        f.write_all_at(bytes, 0).unwrap();
    }
}

/// One operation of the run: its first event and the records before and
/// after it.
struct Operation {
    start: usize,
    before: Vec<Vec<u8>>,
    after: Vec<Vec<u8>>,
}

fn batch(rng: &mut Rng, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = 300 + rng.below(900) as usize;
            if i % 2 == 0 {
                compressible(rng, len)
            } else {
                noise(rng, len)
            }
        })
        .collect()
}

/// The step of the run below that compacts.
const COMPACTION: usize = 5;

#[test]
fn every_power_loss_leaves_a_store_from_just_before_or_after_the_operation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let checked = StoreOptions {
        checksums: Checksums::On,
        ..StoreOptions::default()
    };
    drop(Store::open_with(&path, &checked).unwrap());
    let mut base = Disk::default();
    for (name, used) in [(META, META_USED), (SUMS, SUMS_USED)] {
        let bytes = std::fs::read(path.join(name)).unwrap();
        base.data.insert(name.into(), bytes[..used].to_vec());
        base.names.insert(name.into());
    }

    let recorder = Arc::new(Recorder {
        medium: Mutex::new(Medium {
            durable: base,
            pending: Vec::new(),
        }),
        snapshots: Mutex::new(Vec::new()),
    });
    let options = StoreOptions {
        chunk_capacity: 6000,
        checksums: Checksums::On,
        io_hook: Some(recorder.clone()),
        ..StoreOptions::default()
    };
    let mut store = Store::open_with(&path, &options).unwrap();
    let mut rng = Rng(99);
    let mut model: Vec<Vec<u8>> = Vec::new();
    let mut ops: Vec<Operation> = Vec::new();
    let events = |r: &Recorder| r.snapshots.lock().unwrap().len();
    for step in 0..7 {
        let start = events(&recorder);
        let before = model.clone();
        match step {
            3 => {
                store.delete(&[1, 4, 7, 8, 0]).unwrap();
                for t in [8, 7, 4, 1, 0] {
                    model.swap_remove(t);
                }
            }
            COMPACTION => {
                store.compact().unwrap();
            }
            _ => {
                let recs = batch(&mut rng, 6);
                let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
                let codec = Codec::ALL[step % 4];
                store
                    .append(
                        &slices,
                        &AppendOptions {
                            codec,
                            durable: true,
                            ..AppendOptions::default()
                        },
                    )
                    .unwrap();
                model.extend(recs);
            }
        }
        ops.push(Operation {
            start,
            before,
            after: model.clone(),
        });
    }
    drop(store);
    let total = events(&recorder);
    let snapshots = recorder.snapshots.lock().unwrap().clone();

    // Each crash point is checked on its own: spread over the cores.
    let images: usize = snapshots
        .par_iter()
        .enumerate()
        .map(|(k, medium)| {
            let mut images = 0;
            // The operation in flight when power fails before event k.
            let op = ops.iter().rposition(|o| o.start <= k).unwrap();
            let Operation {
                start,
                before,
                after,
            } = &ops[op];
            for (v, disk) in medium
                .crash_images(&mut Rng(k as u64 + 1))
                .iter()
                .enumerate()
            {
                let at = dir.path().join(format!("crash-{k}-{v}"));
                materialize(disk, &at);
                // Opened with the defaults, which check every record the
                // sidecar covers without covering the others anew.
                let store = Store::open(&at).unwrap_or_else(|e| {
                    panic!("event {k}/{total} variant {v}: store does not open: {e}")
                });
                let got = read_all(&store);
                let ok =
                    &got == after || (k > *start && &got == before) || (k == *start && &got == before);
                assert!(ok, "event {k} (operation {op}) variant {v}: {} records, neither before ({}) nor after ({})",
                    got.len(), before.len(), after.len());
                // The sidecar's slots reach the disk with the records they
                // describe: only a compaction's moves in flight go unchecked.
                let unchecked = store.verify().unwrap().unchecked;
                assert!(
                    unchecked == 0 || op == COMPACTION,
                    "event {k} (operation {op}) variant {v}: {unchecked} records unchecked"
                );
                // The store must also take new records without damage.
                store
                    .append(
                        &[b"after the crash"],
                        &AppendOptions {
                            codec: Codec::Raw,
                            durable: false,
                            ..AppendOptions::default()
                        },
                    )
                    .unwrap();
                let mut expect = got.clone();
                expect.push(b"after the crash".to_vec());
                assert_eq!(
                    read_all(&store),
                    expect,
                    "event {k} variant {v}: append after recovery"
                );
                drop(store);
                std::fs::remove_dir_all(&at).unwrap();
                images += 1;
            }
            images
        })
        .sum();
    println!("{total} crash points, {images} simulated disks, all valid");
    assert!(total > 50, "the run produced {total} events");
}
