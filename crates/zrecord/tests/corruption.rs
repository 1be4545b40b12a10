//! Corruption sweep: damage a small store byte by byte and check that the
//! engine never returns wrong bytes where it can notice the damage, never
//! writes outside a record's slot of the destination, and never panics.
//!
//! The fixture holds records of every codec spread over several chunks; it is
//! built twice, without and with the `checksums.zr` sidecar (docs/FORMAT.md,
//! "Checksums"). Each case damages one thing (a header byte, a table-entry
//! byte, a file's length, a byte of a compressed payload, a byte of the
//! sidecar), opens the store, and gathers every record one by one into a
//! buffer guarded on both sides, then all at once, then runs `verify`. A
//! read is
//! - *equal*: `Ok` with the original bytes;
//! - *refused*: a typed error (`CorruptRecord`, `BufferTooSmall`, ...);
//! - *wrong*: `Ok` with bytes that differ from the original record;
//! - *phantom*: `Ok` at an index past the original record count (the header's
//!   length grew; the slots past the true length are zeros, which read as
//!   empty raw records).
//!
//! Without checksums some damage cannot be noticed: an entry of a raw record
//! pointing at other bytes of the same length, a compressed stream damaged
//! into another stream of the same decoded size, a grown length, a frontier
//! moved back (a later append then overwrites live records). Those counts are
//! printed, not asserted (see `payload_damage_detected` and
//! `entry_relocation_detected`); with checksums every one of them must be
//! zero. Everything else must give zero wrong reads either way. Run with
//! `--nocapture` to see the counts.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use common::{compressible, noise, opts, Rng, BYTE_STEP};
use zrecord::layout::{
    checksum_slot_offset, entry_offset, CHECKSUM_COVERED_OFFSET, CHECKSUM_FILE_LEN,
    CHECKSUM_HEADER_LEN, CHECKSUM_SLOT_LEN, ENTRY_CHUNK_ID_OFFSET, ENTRY_CODEC_OFFSET,
    ENTRY_LOGIC_LENGTH_OFFSET, ENTRY_PHYS_LENGTH_OFFSET, LENGTH_OFFSET, TAIL_CHUNK_OFFSET,
    TAIL_OFFSET_OFFSET, VERSION_OFFSET,
};
use zrecord::{
    chunk_file_name, Checksums, Codec, Error, RecordLoc, Store, StoreOptions, CHECKSUM_FILE_NAME,
    ENTRY_LEN, HEADER_LEN, MAX_RECORDS, META_FILE_LEN, META_FILE_NAME, TABLE_OFFSET,
    V1_MAX_RECORD_LEN,
};

/// Tracks the largest single allocation, for
/// `creating_checksums_for_a_corrupt_store_allocates_no_more_than_a_record`.
#[global_allocator]
static GLOBAL: common::CountingAlloc = common::CountingAlloc;

/// Small chunks, so the fixture spans several chunk files.
const CAPACITY: u64 = 4096;
/// Bytes on each side of a record's slot that a gather must leave alone.
const GUARD: usize = 16;
const SENTINEL: u8 = 0xA5;
/// Indices past the original count that are read when the length grew.
const PHANTOM_PROBE: u64 = 64;
/// Larger logical lengths are gathered into a buffer too small for them.
const MAX_PROBE_LEN: u64 = 4 * V1_MAX_RECORD_LEN as u64;
/// Table entries (and checksum slots) whose every byte is damaged.
const ENTRIES_SWEPT: usize = 4;
/// The patterns each damaged byte is xor-ed with.
const PATTERNS: [u8; 4] = [0x01, 0x10, 0x80, 0xFF];
const PAYLOAD_PATTERNS: [u8; 2] = [0x01, 0xFF];

/// Whether a damaged stored stream of `codec` is always refused rather than
/// decoded into other bytes of the right length. None of v1's stream formats
/// carries a checksum as this implementation writes it (raw DEFLATE, an LZ4
/// block, a zstd frame without its optional checksum); the per-record
/// checksums of `checksums.zr` catch it for every codec.
fn payload_damage_detected(_codec: Codec, checksums: bool) -> bool {
    checksums
}

/// Whether an entry of a record stored raw that is damaged so it points at
/// other bytes of the same length (its `offset` or `chunk_id`) is refused:
/// only the data checksum ties an entry to its bytes.
fn entry_relocation_detected(checksums: bool) -> bool {
    checksums
}

struct Fixture {
    dir: tempfile::TempDir,
    checksums: bool,
    originals: Vec<Vec<u8>>,
    locs: Vec<RecordLoc>,
    /// The header and the live table entries.
    meta_prefix: Vec<u8>,
    /// The sidecar's header and live slots, when the store keeps checksums.
    checksum_prefix: Vec<u8>,
    /// Chunk file contents, by chunk id.
    chunks: Vec<Vec<u8>>,
}

/// The codecs of the fixture's records: one record each per call, too few
/// for zstd-dict to train a dictionary on (its records and its dictionary
/// file are tested in tests/store.rs).
const FIXTURE_CODECS: [Codec; 4] = [Codec::Raw, Codec::Flate, Codec::Lz4, Codec::Zstd];

impl Fixture {
    /// Five records per codec, appended one per call with the codecs
    /// interleaved, so the first entries use every codec: compressible,
    /// larger compressible, incompressible (stored raw whatever the codec),
    /// empty, and constant.
    fn new(checksums: bool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.zr");
        let store = Store::open_with(&path, &options(checksums, true)).unwrap();
        let mut rng = Rng(0xC0FFEE);
        let mut originals = Vec::new();
        for kind in 0..5 {
            for codec in FIXTURE_CODECS {
                let record = match kind {
                    0 => compressible(&mut rng, 700),
                    1 => compressible(&mut rng, 1500),
                    2 => noise(&mut rng, 300),
                    3 => Vec::new(),
                    _ => vec![kind as u8; 2000],
                };
                store.append(&[&record], &opts(codec)).unwrap();
                originals.push(record);
            }
        }
        let tail_chunk = store.stats().chunk_bytes / CAPACITY;
        drop(store);

        let read_prefix = |name: &str, len: usize| {
            let mut b = vec![0; len];
            fs::File::open(path.join(name))
                .unwrap()
                .read_exact_at(&mut b, 0)
                .unwrap();
            b
        };
        let n = originals.len();
        let meta_prefix = read_prefix(META_FILE_NAME, entry_offset(n));
        let checksum_prefix = if checksums {
            read_prefix(CHECKSUM_FILE_NAME, checksum_slot_offset(n))
        } else {
            assert!(!path.join(CHECKSUM_FILE_NAME).exists());
            Vec::new()
        };
        let locs: Vec<RecordLoc> = meta_prefix[TABLE_OFFSET..]
            .chunks_exact(ENTRY_LEN)
            .map(|b| RecordLoc::from_bytes(b.try_into().unwrap()))
            .collect();
        let chunks: Vec<Vec<u8>> = (0..=tail_chunk as u16)
            .map(|id| fs::read(path.join(chunk_file_name(id))).unwrap())
            .collect();
        assert!(chunks.len() >= 4, "the fixture spans several chunks");
        for (i, codec) in FIXTURE_CODECS.into_iter().enumerate() {
            assert_eq!(locs[i].codec, codec.tag(), "entry {i} is {codec:?}");
        }
        Fixture {
            dir,
            checksums,
            originals,
            locs,
            meta_prefix,
            checksum_prefix,
            chunks,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("s.zr")
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    fn chunk(&self, id: usize) -> PathBuf {
        self.file(&chunk_file_name(id as u16))
    }

    /// Puts every file back as it was, and removes files a case created.
    /// `dirty` lists record slots past the live ones that a case wrote.
    fn restore(&self, dirty: &[u64]) {
        // Slots first: a dirty slot may be a live one, which the prefix then
        // puts back.
        let put_back = |name: &str, len: u64, prefix: &[u8], slot_len: usize, first: usize| {
            let f = OpenOptions::new()
                .write(true)
                .open(self.file(name))
                .unwrap();
            f.set_len(len).unwrap();
            for &slot in dirty {
                let at = first as u64 + slot * slot_len as u64;
                if at + slot_len as u64 <= len {
                    f.write_all_at(&vec![0; slot_len], at).unwrap();
                }
            }
            f.write_all_at(prefix, 0).unwrap();
        };
        put_back(
            META_FILE_NAME,
            META_FILE_LEN as u64,
            &self.meta_prefix,
            ENTRY_LEN,
            TABLE_OFFSET,
        );
        if self.checksums {
            put_back(
                CHECKSUM_FILE_NAME,
                CHECKSUM_FILE_LEN as u64,
                &self.checksum_prefix,
                CHECKSUM_SLOT_LEN,
                CHECKSUM_HEADER_LEN,
            );
        }
        for (id, bytes) in self.chunks.iter().enumerate() {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(self.chunk(id))
                .unwrap();
            f.set_len(bytes.len() as u64).unwrap();
            f.write_all_at(bytes, 0).unwrap();
        }
        let mut known: Vec<String> = (0..self.chunks.len())
            .map(|id| chunk_file_name(id as u16))
            .chain([META_FILE_NAME.to_string()])
            .collect();
        if self.checksums {
            known.push(CHECKSUM_FILE_NAME.into());
        }
        for entry in fs::read_dir(self.path()).unwrap() {
            let entry = entry.unwrap();
            if !known
                .iter()
                .any(|k| *k == entry.file_name().to_string_lossy())
            {
                fs::remove_file(entry.path()).unwrap();
            }
        }
    }
}

fn options(checksums: bool, create: bool) -> StoreOptions {
    StoreOptions {
        create,
        checksums: if checksums {
            Checksums::On
        } else {
            Checksums::Off
        },
        ..common::small_chunks(CAPACITY)
    }
}

fn xor_byte(path: &Path, offset: u64, pattern: u8) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ pattern], offset).unwrap();
}

fn truncate(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn variant(e: &Error) -> &'static str {
    match e {
        Error::Io { .. } => "Io",
        Error::NotAStore { .. } => "NotAStore",
        Error::UnsupportedVersion { .. } => "UnsupportedVersion",
        Error::IndexOutOfRange { .. } => "IndexOutOfRange",
        Error::RecordTooLarge { .. } => "RecordTooLarge",
        Error::StoreFull { .. } => "StoreFull",
        Error::BufferTooSmall { .. } => "BufferTooSmall",
        Error::DestinationOverlap { .. } => "DestinationOverlap",
        Error::CorruptRecord { .. } => "CorruptRecord",
        Error::Busy { .. } => "Busy",
        Error::InvalidArgument { .. } => "InvalidArgument",
        _ => "other",
    }
}

/// Counts of one category of damage.
#[derive(Default)]
struct Tally {
    cases: u64,
    refused_open: BTreeMap<&'static str, u64>,
    reads_equal: u64,
    refused_reads: BTreeMap<&'static str, u64>,
    /// `Ok` reads whose bytes differ from the original record.
    wrong: u64,
    /// `Ok` reads past the original record count.
    phantom: u64,
    /// Original records no longer below the length (the length shrank).
    lost: u64,
    /// Reads of records other than the damaged one that did not give the
    /// original bytes (payload cases, where the damage is in one record).
    others_affected: u64,
    /// Records that `verify` and the gathers judged differently.
    verify_disagrees: u64,
    /// Gathers that changed a byte outside the record's slot.
    overruns: u64,
    panics: u64,
    /// Original records that read `Ok` with wrong bytes after one more
    /// append, though they did not before: a damaged frontier lets the
    /// append overwrite live bytes, or fill a truncated chunk's hole so that
    /// records past the cut read as zeros.
    damaged_by_append: u64,
    /// The first few cases with something to report.
    examples: Vec<String>,
}

impl Tally {
    fn note(&mut self, case: &str, what: &str) {
        if self.examples.len() < 6 {
            self.examples.push(format!("{case}: {what}"));
        }
    }

    /// No panic, no write outside a slot, `verify` agreeing with gather.
    fn assert_safe(&self, name: &str) {
        assert_eq!(self.panics, 0, "{name}: panics: {:#?}", self.examples);
        assert_eq!(self.overruns, 0, "{name}: overruns: {:#?}", self.examples);
        assert_eq!(
            self.verify_disagrees, 0,
            "{name}: verify disagrees with gather: {:#?}",
            self.examples
        );
    }

    fn assert_no_wrong_reads(&self, name: &str) {
        self.assert_safe(name);
        assert_eq!(self.wrong, 0, "{name}: wrong reads: {:#?}", self.examples);
    }

    /// All detected with checksums, no wrong read without.
    fn assert_detected_as_far_as(&self, checksums: bool, name: &str) {
        if checksums {
            self.assert_all_detected(name);
        } else {
            self.assert_no_wrong_reads(name);
        }
    }

    /// With checksums nothing undetectable is left: no wrong read, no
    /// phantom, and no damage a later append turns into wrong bytes.
    fn assert_all_detected(&self, name: &str) {
        self.assert_no_wrong_reads(name);
        assert_eq!(self.phantom, 0, "{name}: phantoms: {:#?}", self.examples);
        assert_eq!(
            self.damaged_by_append, 0,
            "{name}: damaged by append: {:#?}",
            self.examples
        );
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cases: open refused {:?}; reads equal {}, refused {:?}, WRONG {}, phantom {}, \
             lost {}; other records affected {}; verify disagrees {}; overruns {}, \
             panics {}; originals damaged by a later append {}",
            self.cases,
            self.refused_open,
            self.reads_equal,
            self.refused_reads,
            self.wrong,
            self.phantom,
            self.lost,
            self.others_affected,
            self.verify_disagrees,
            self.overruns,
            self.panics,
            self.damaged_by_append
        )
    }
}

/// Gathers record `index` alone, between guards. `None`: refused.
fn read_one(store: &Store, index: u64, tally: &mut Tally, case: &str) -> Option<Vec<u8>> {
    let len = store.lengths(&[index]).unwrap()[0] as u64;
    let room = if len <= MAX_PROBE_LEN {
        len as usize
    } else {
        16
    };
    let mut buf = vec![SENTINEL; GUARD + room + GUARD];
    let result = store.gather_ragged(&[index], &mut buf, &[GUARD as u64]);
    let slot = GUARD..GUARD + room.min(len as usize);
    if buf[..slot.start]
        .iter()
        .chain(&buf[slot.end..])
        .any(|&b| b != SENTINEL)
    {
        tally.overruns += 1;
        tally.note(
            case,
            &format!("record {index}: bytes outside the slot changed"),
        );
    }
    match result {
        Ok(()) => Some(buf[slot].to_vec()),
        Err(e) => {
            *tally.refused_reads.entry(variant(&e)).or_default() += 1;
            None
        }
    }
}

/// Opens the damaged store and reads every record; `probe_append` then
/// appends one record and reads the originals again. When the damage is in
/// record `focus` alone, only that record's reads are counted as reads, and
/// any other record not read exactly counts as affected. Returns the record
/// slots past the live ones that the case wrote.
fn check(
    fx: &Fixture,
    case: &str,
    focus: Option<u64>,
    probe_append: bool,
    tally: &mut Tally,
) -> Vec<u64> {
    tally.cases += 1;
    let mut dirty = Vec::new();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let store = match Store::open_with(fx.path(), &options(fx.checksums, false)) {
            Ok(store) => store,
            Err(e) => {
                *tally.refused_open.entry(variant(&e)).or_default() += 1;
                return;
            }
        };
        let n = fx.originals.len() as u64;
        let len = store.len() as u64;
        tally.lost += n.saturating_sub(len);
        let mut idxs: Vec<u64> = (0..len.min(n + PHANTOM_PROBE)).collect();
        if len > n + PHANTOM_PROBE {
            idxs.push(len - 1);
        }
        let mut singles = Vec::new();
        for &i in &idxs {
            let got = read_one(&store, i, tally, case);
            let original = fx.originals.get(i as usize).map(Vec::as_slice);
            if focus.is_some_and(|f| f != i) {
                if got.as_deref() != original {
                    tally.others_affected += 1;
                    tally.note(case, &format!("undamaged record {i} not read exactly"));
                }
            } else {
                match (got.as_deref(), original) {
                    (Some(_), None) => tally.phantom += 1,
                    (Some(bytes), Some(original)) if bytes == original => tally.reads_equal += 1,
                    (Some(_), Some(_)) => {
                        tally.wrong += 1;
                        tally.note(case, &format!("record {i} read Ok with wrong bytes"));
                    }
                    (None, _) => {}
                }
            }
            singles.push(got);
        }
        check_batch(&store, &idxs, &singles, tally, case);
        if len <= n + PHANTOM_PROBE {
            check_verify(&store, &singles, tally, case);
        }

        if probe_append && len < MAX_RECORDS as u64 {
            dirty.push(len);
            if store.append(&[&[7u8; 900]], &opts(Codec::Raw)).is_ok() {
                for i in 0..len.min(n) {
                    let original = Some(&fx.originals[i as usize][..]);
                    let was_wrong = singles[i as usize]
                        .as_deref()
                        .is_some_and(|b| Some(b) != original);
                    // Counted apart, so the read counts are of the damage alone.
                    let mut again = Tally::default();
                    let now = read_one(&store, i, &mut again, case);
                    tally.overruns += again.overruns;
                    tally.examples.extend(again.examples);
                    if now.is_some() && now.as_deref() != original && !was_wrong {
                        tally.damaged_by_append += 1;
                        tally.note(case, &format!("record {i} read wrong after an append"));
                    }
                }
            }
        }
    }));
    if let Err(panic) = outcome {
        tally.panics += 1;
        let msg = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        tally.note(case, &format!("panic: {msg}"));
    }
    dirty
}

/// Gathers `idxs` in one fixed-stride batch: it must not write outside the
/// destination, and an `Ok` batch must agree with the single reads and
/// leave zeros after each record in its slot.
fn check_batch(
    store: &Store,
    idxs: &[u64],
    singles: &[Option<Vec<u8>>],
    tally: &mut Tally,
    case: &str,
) {
    let lens = store.lengths(idxs).unwrap();
    if lens.iter().any(|&l| l as u64 > MAX_PROBE_LEN) {
        return;
    }
    let stride = lens.iter().copied().max().unwrap_or(0) as usize + GUARD;
    let end = GUARD + idxs.len() * stride;
    let mut buf = vec![SENTINEL; end + GUARD];
    let result = store.gather(idxs, &mut buf[GUARD..end], stride);
    if buf[..GUARD]
        .iter()
        .chain(&buf[end..])
        .any(|&b| b != SENTINEL)
    {
        tally.overruns += 1;
        tally.note(case, "batch gather wrote outside its destination");
    }
    if result.is_ok() {
        for (k, single) in singles.iter().enumerate() {
            let slot = GUARD + k * stride;
            let (record, tail) = buf[slot..slot + stride].split_at(lens[k] as usize);
            if single.as_deref() != Some(record) || tail.iter().any(|&b| b != 0) {
                tally.wrong += 1;
                tally.note(
                    case,
                    &format!("batch gather read {} Ok unlike its single read", idxs[k]),
                );
            }
        }
    }
}

/// `verify` reports exactly the records (all of `0..len`, here) whose single
/// gather was refused.
fn check_verify(store: &Store, singles: &[Option<Vec<u8>>], tally: &mut Tally, case: &str) {
    match store.verify() {
        Ok(report) => {
            let bad: Vec<u64> = report.bad.iter().map(|b| b.index).collect();
            let refused: Vec<u64> = (0..singles.len() as u64)
                .filter(|&i| singles[i as usize].is_none())
                .collect();
            if bad != refused || report.checksummed != store_has_checksums(store) {
                tally.verify_disagrees += 1;
                tally.note(
                    case,
                    &format!("verify reports {bad:?}, gathers refused {refused:?}"),
                );
            }
        }
        Err(e) => {
            tally.verify_disagrees += 1;
            tally.note(case, &format!("verify failed: {e}"));
        }
    }
}

fn store_has_checksums(store: &Store) -> bool {
    store.path().join(CHECKSUM_FILE_NAME).exists()
}

/// One damage case: `damage` changes the files, the store is checked, and
/// everything is put back.
fn case(
    fx: &Fixture,
    name: &str,
    focus: Option<u64>,
    probe_append: bool,
    tally: &mut Tally,
    damage: impl FnOnce(),
) {
    damage();
    let dirty = check(fx, name, focus, probe_append, tally);
    fx.restore(&dirty);
}

/// One case per byte of `file` in `offsets` and per pattern of [`PATTERNS`].
fn xor_sweep(
    fx: &Fixture,
    file: &Path,
    offsets: std::ops::Range<u64>,
    probe_append: bool,
    tally: &mut Tally,
) {
    let label = file.file_name().unwrap().to_string_lossy();
    for offset in offsets {
        for pattern in PATTERNS {
            let name = format!("{label} byte {offset} ^ {pattern:#04x}");
            case(fx, &name, None, probe_append, tally, || {
                xor_byte(file, offset, pattern)
            });
        }
    }
}

/// One case per distinct length in `cuts` that `file` is truncated to.
fn cut_sweep(fx: &Fixture, file: &Path, mut cuts: Vec<u64>, probe_append: bool, tally: &mut Tally) {
    let label = file.file_name().unwrap().to_string_lossy();
    cuts.sort_unstable();
    cuts.dedup();
    for cut in cuts {
        let name = format!("{label} cut at {cut}");
        case(fx, &name, None, probe_append, tally, || truncate(file, cut));
    }
}

fn report(name: &str, fx: &Fixture, tally: &Tally) {
    let mode = if fx.checksums {
        "checksums"
    } else {
        "no checksums"
    };
    println!("[{mode:>12}] {name:<30} {tally}");
    for e in &tally.examples {
        println!("{:17}e.g. {e}", "");
    }
}

#[test]
fn the_undamaged_fixture_reads_back_exactly() {
    for checksums in [false, true] {
        let fx = Fixture::new(checksums);
        let mut tally = Tally::default();
        check(&fx, "undamaged", None, false, &mut tally);
        assert_eq!(tally.reads_equal, fx.originals.len() as u64, "{tally}");
        tally.assert_all_detected("undamaged");
        // Restoring leaves the store exactly as built.
        fx.restore(&[]);
        check(&fx, "restored", None, false, &mut tally);
        assert_eq!(tally.reads_equal, 2 * fx.originals.len() as u64, "{tally}");
    }
}

#[test]
fn header_damage_is_refused_or_harmless() {
    for checksums in [false, true] {
        let fx = Fixture::new(checksums);
        let meta = fx.file(META_FILE_NAME);
        let mut tally = Tally::default();
        xor_sweep(&fx, &meta, 0..HEADER_LEN as u64, true, &mut tally);
        report(&format!("header ({HEADER_LEN} bytes)"), &fx, &tally);
        // A grown length shows zeroed slots as empty records (phantoms) and a
        // shrunk one hides records; neither gives wrong bytes for a record.
        tally.assert_detected_as_far_as(checksums, "header");
    }
}

#[test]
fn table_entry_damage_is_refused_or_harmless() {
    for checksums in [false, true] {
        let fx = Fixture::new(checksums);
        let meta = fx.file(META_FILE_NAME);
        let mut strict = Tally::default();
        let mut relocated_raw = Tally::default();
        for entry in 0..ENTRIES_SWEPT {
            let stored_raw = fx.locs[entry].codec == Codec::Raw.tag();
            for byte in 0..ENTRY_LEN {
                // offset and chunk_id say where the bytes are; damage
                // there moves a raw record onto others.
                let locating = byte < ENTRY_PHYS_LENGTH_OFFSET
                    || (ENTRY_CHUNK_ID_OFFSET..ENTRY_CODEC_OFFSET).contains(&byte);
                let tally = if stored_raw && locating && !entry_relocation_detected(checksums) {
                    &mut relocated_raw
                } else {
                    &mut strict
                };
                for pattern in PATTERNS {
                    let at = (entry_offset(entry) + byte) as u64;
                    let name = format!("entry {entry} byte {byte} ^ {pattern:#04x}");
                    case(&fx, &name, None, false, tally, || {
                        xor_byte(&meta, at, pattern)
                    });
                }
            }
        }
        report("table entries 0..4", &fx, &strict);
        if relocated_raw.cases > 0 {
            report("  raw entries' offset/chunk", &fx, &relocated_raw);
        }
        strict.assert_all_detected("table");
        relocated_raw.assert_safe("table, raw offset/chunk_id");
    }
}

#[test]
fn truncated_files_are_refused_never_misread() {
    for checksums in [false, true] {
        let fx = Fixture::new(checksums);
        let n = fx.originals.len();
        let mut meta_tally = Tally::default();
        let meta = fx.file(META_FILE_NAME);
        let mut cuts: Vec<u64> = vec![0, 1, META_FILE_LEN as u64 / 2, META_FILE_LEN as u64 - 1];
        cuts.extend((0..=n).map(|i| entry_offset(i) as u64));
        cuts.extend(
            [
                HEADER_LEN - 1,
                VERSION_OFFSET,
                TAIL_CHUNK_OFFSET,
                TAIL_OFFSET_OFFSET,
                LENGTH_OFFSET,
            ]
            .map(|cut| cut as u64),
        );
        cut_sweep(&fx, &meta, cuts, true, &mut meta_tally);
        report("truncated meta.zr", &fx, &meta_tally);
        assert_eq!(
            meta_tally.refused_open.get("NotAStore").copied(),
            Some(meta_tally.cases),
            "a meta.zr of any other size is not a store"
        );

        let mut chunk_tally = Tally::default();
        for id in 0..fx.chunks.len() {
            let len = fx.chunks[id].len() as u64;
            let mut cuts = vec![0, 1, len / 2, len.saturating_sub(1)];
            for loc in fx.locs.iter().filter(|l| l.chunk_id as usize == id) {
                cuts.extend([loc.offset as u64, loc.end(), loc.end().saturating_sub(1)]);
            }
            cuts.retain(|&c| c < len);
            let path = fx.chunk(id);
            cut_sweep(&fx, &path, cuts, true, &mut chunk_tally);
            let name = format!("chunk {id} removed");
            case(&fx, &name, None, true, &mut chunk_tally, || {
                fs::remove_file(&path).unwrap()
            });
        }
        report("truncated or removed chunks", &fx, &chunk_tally);
        meta_tally.assert_all_detected("truncated meta.zr");
        chunk_tally.assert_detected_as_far_as(checksums, "truncated chunks");
    }
}

// Two tests, not a loop over `checksums`: each sweeps thousands of damaged
// bytes, and the test harness runs them side by side.
#[test]
fn damaged_payloads_are_refused_or_counted() {
    damaged_payloads(false);
}

#[test]
fn damaged_payloads_with_checksums_are_refused() {
    damaged_payloads(true);
}

/// Flips bytes of every compressed record's payload, one at a time.
fn damaged_payloads(checksums: bool) {
    let fx = Fixture::new(checksums);
    let mut by_codec: BTreeMap<&'static str, Tally> = BTreeMap::new();
    for (i, loc) in fx.locs.iter().enumerate() {
        let Some(codec) = Codec::from_tag(loc.codec).filter(|&c| c != Codec::Raw) else {
            continue;
        };
        let path = fx.chunk(loc.chunk_id as usize);
        let tally = by_codec.entry(codec.name()).or_default();
        for at in (loc.offset as u64..loc.end()).step_by(BYTE_STEP) {
            for pattern in PAYLOAD_PATTERNS {
                let name = format!("record {i} ({codec:?}) byte {at} ^ {pattern:#04x}");
                case(&fx, &name, Some(i as u64), false, tally, || {
                    xor_byte(&path, at, pattern)
                });
            }
        }
    }
    for (name, tally) in &by_codec {
        report(&format!("payload bytes, {name}"), &fx, tally);
    }
    assert_eq!(
        by_codec.len(),
        3,
        "every compressing codec stored something"
    );
    for (name, tally) in &by_codec {
        let codec = Codec::from_name(name).unwrap();
        // Damage to one record's bytes never changes how another reads.
        assert_eq!(tally.others_affected, 0, "{name}: {:#?}", tally.examples);
        if payload_damage_detected(codec, checksums) {
            tally.assert_all_detected(name);
        } else {
            tally.assert_safe(name);
        }
    }
}

#[test]
fn damaged_checksum_sidecar_is_refused_never_misread() {
    let fx = Fixture::new(true);
    let sidecar = fx.file(CHECKSUM_FILE_NAME);
    let mut bytes_tally = Tally::default();
    let swept = checksum_slot_offset(ENTRIES_SWEPT);
    xor_sweep(&fx, &sidecar, 0..swept as u64, false, &mut bytes_tally);
    report("checksums.zr header, slots 0..4", &fx, &bytes_tally);
    bytes_tally.assert_all_detected("checksums.zr bytes");
    assert_eq!(
        bytes_tally.refused_open.values().sum::<u64>(),
        (CHECKSUM_COVERED_OFFSET * PATTERNS.len()) as u64,
        "damage to the magic or version is refused at open, the reserved bytes are ignored"
    );

    let mut cut_tally = Tally::default();
    let n = fx.originals.len();
    let file_len = CHECKSUM_FILE_LEN as u64;
    let mut cuts = vec![0, 1, file_len / 2, file_len - 1];
    cuts.extend((0..=n).map(|i| checksum_slot_offset(i) as u64));
    cut_sweep(&fx, &sidecar, cuts, false, &mut cut_tally);
    report("truncated checksums.zr", &fx, &cut_tally);
    cut_tally.assert_all_detected("truncated checksums.zr");
    assert_eq!(
        cut_tally.refused_open.get("NotAStore").copied(),
        Some(cut_tally.cases)
    );
}

// Regressions for engine bugs the fuzzers found (fuzz/README.md).

/// fuzz/operations: an append of only empty records to a fresh store writes
/// no bytes, so `0.zr` is never created, and gathering the records fails
/// with "chunk file 0 is missing" (a compaction creates the file and heals
/// it).
#[test]
fn empty_records_in_a_store_without_chunk_files_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.zr")).unwrap();
    store.append(&[b"", b""], &opts(Codec::Flate)).unwrap();
    let result = store.gather(&[0, 1], &mut [], 0);
    assert!(result.is_ok(), "{result:?}");
    assert!(store.verify().unwrap().bad.is_empty());
}

/// A `delete.journal` with `count` rewrites to `slots` (each receiving a
/// zero entry and checksum slot) and a valid CRC32C, laid out as in
/// docs/FORMAT.md, "delete.journal".
fn journal(old_length: u32, new_length: u32, slots: &[u32]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"ZRDJ");
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&old_length.to_le_bytes());
    b.extend_from_slice(&new_length.to_le_bytes());
    b.extend_from_slice(&(slots.len() as u32).to_le_bytes());
    for slot in slots {
        b.extend_from_slice(&slot.to_le_bytes());
        b.extend_from_slice(&[0; ENTRY_LEN + CHECKSUM_SLOT_LEN]);
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// A journal whose checksum matches is applied without further checks: one
/// that raises the length (a delete never does) exposes zeroed slots as
/// records, one that raises it past the table's 2^24 slots makes the first
/// read panic and leaves a `meta.zr` no later open accepts, and one naming a
/// slot past the table panics in every open. Such a journal must be refused
/// (or ignored), never applied.
#[test]
fn a_journal_that_does_not_describe_a_delete_is_refused() {
    let cases: [(u32, &[u32]); 3] = [(100, &[]), (1 << 30, &[]), (1, &[1 << 24])];
    for (new_length, slots) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.zr");
        let store = Store::open(&path).unwrap();
        store.append(&[b"abc", b"def"], &opts(Codec::Raw)).unwrap();
        drop(store);
        fs::write(
            path.join(zrecord::JOURNAL_FILE_NAME),
            journal(2, new_length, slots),
        )
        .unwrap();
        let what = format!("journal 2 -> {new_length} records, rewriting {slots:?}");
        for attempt in ["open", "second open"] {
            let outcome = catch_unwind(|| match Store::open(&path) {
                Ok(store) => {
                    let n = store.len() as u64;
                    let reads: Vec<bool> = (0..n)
                        .map(|i| store.gather(&[i], &mut [0; 3], 3).is_ok())
                        .collect();
                    Ok((n, reads))
                }
                Err(e) => Err(variant(&e)),
            });
            match outcome {
                Err(_) => panic!("{what}: {attempt} panicked"),
                Ok(Ok((n, _))) => assert!(n <= 2, "{what}: {attempt} shows {n} records"),
                Ok(Err(e)) => assert_eq!(e, "NotAStore", "{what}: {attempt}"),
            }
        }
    }
}

/// fuzz/open_and_gather: opening with `Checksums::On` a store that has no
/// sidecar yet sizes its scratch buffer by each entry's `logic_length`
/// before the 1 MiB check, so one damaged entry makes the open allocate and
/// zero up to 4 GiB (here 256 MiB) before failing with `CorruptRecord`.
#[test]
fn creating_checksums_for_a_corrupt_store_allocates_no_more_than_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.zr");
    let store = Store::open_with(&path, &options(false, true)).unwrap();
    store.append(&[b"abc"], &opts(Codec::Raw)).unwrap();
    drop(store);
    let logic_length_at = (entry_offset(0) + ENTRY_LOGIC_LENGTH_OFFSET) as u64;
    OpenOptions::new()
        .write(true)
        .open(path.join(META_FILE_NAME))
        .unwrap()
        .write_all_at(&(256u32 << 20).to_le_bytes(), logic_length_at)
        .unwrap();
    let before = common::LARGEST_ALLOC.load(std::sync::atomic::Ordering::Relaxed);
    let result = Store::open_with(&path, &options(true, false));
    let peak = common::LARGEST_ALLOC.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        matches!(result, Err(Error::CorruptRecord { .. })),
        "{:?}",
        result.err()
    );
    // Other tests of this binary allocate a few MiB at most.
    assert!(
        peak <= before.max(64 << 20),
        "opening allocated {} MiB at once",
        peak >> 20
    );
}
