//! What the fuzz targets share: the byte layout that `open_and_gather` turns
//! into a store directory (and `make_seeds` writes from real stores), and a
//! reader that checks a gather never writes outside a record's slot.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The integration tests' helpers (record generators, whole-store reads),
/// shared rather than copied.
#[path = "../../crates/zrecord/tests/common/mod.rs"]
pub mod common;

use zrecord::layout::entry_offset;
use zrecord::{
    chunk_file_name, Store, CHECKSUM_FILE_NAME, JOURNAL_FILE_NAME, MAX_RECORDS, META_FILE_LEN,
    META_FILE_NAME, V1_MAX_RECORD_LEN,
};

/// Table entries carried by an image; the rest of the table is zeros, as in
/// a fresh sparse `meta.zr`.
pub const IMAGE_ENTRIES: usize = 16;
/// Bytes of `meta.zr` an image carries: the header and the first entries.
pub const META_PREFIX_LEN: usize = entry_offset(IMAGE_ENTRIES);
/// Most chunk files an image carries.
pub const IMAGE_CHUNKS: usize = 3;
/// Chunk capacity the targets open stores with (it only steers appends).
pub const FUZZ_CHUNK_CAPACITY: u64 = 16 << 10;

/// `flags` bits of an image.
pub mod flag {
    /// Low two bits: the number of chunk files, 0 to 3.
    pub const CHUNK_COUNT: u8 = 0b11;
    /// Write the trailing bytes as `delete.journal`.
    pub const JOURNAL: u8 = 1 << 2;
    /// Append the journal's CRC32C, as a writer would, so that the fuzzer
    /// reaches the code behind the checksum test.
    pub const JOURNAL_CRC: u8 = 1 << 3;
    /// After reading, append a record and read again.
    pub const APPEND: u8 = 1 << 4;
    /// After reading, delete record 0 and read again.
    pub const DELETE: u8 = 1 << 5;
    /// After reading, compact and read again.
    pub const COMPACT: u8 = 1 << 6;
    /// Open with checksums: the sidecar is computed from the records at open
    /// (when they all decode) and checked on every gather after that.
    pub const CHECKSUMS: u8 = 1 << 7;
}

/// A store directory as the fuzzer describes it:
///
/// ```text
/// flags: u8
/// meta prefix: META_PREFIX_LEN bytes (fewer if the input ends)
/// per chunk (flags & 3 of them): length u16 LE, then that many bytes
/// journal: every byte left (only with flag::JOURNAL)
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    pub flags: u8,
    pub meta_prefix: Vec<u8>,
    pub chunks: Vec<Vec<u8>>,
    pub journal: Vec<u8>,
}

impl Image {
    pub fn parse(data: &[u8]) -> Image {
        let mut rest = data;
        let mut take = |n: usize| {
            let (head, tail) = rest.split_at(n.min(rest.len()));
            rest = tail;
            head.to_vec()
        };
        let flags = take(1).first().copied().unwrap_or(0);
        let meta_prefix = take(META_PREFIX_LEN);
        let chunks = (0..(flags & flag::CHUNK_COUNT) as usize)
            .map(|_| {
                let len = take(2);
                let len = match len[..] {
                    [a, b] => u16::from_le_bytes([a, b]) as usize,
                    [a] => a as usize,
                    _ => 0,
                };
                take(len)
            })
            .collect();
        let journal = take(usize::MAX);
        Image {
            flags,
            meta_prefix,
            chunks,
            journal,
        }
    }

    /// The bytes `parse` reads back as this image (chunks of at most
    /// 65535 bytes, and no more than `IMAGE_CHUNKS` of them).
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.chunks.len() <= IMAGE_CHUNKS);
        let mut b = vec![(self.flags & !flag::CHUNK_COUNT) | self.chunks.len() as u8];
        let mut prefix = self.meta_prefix.clone();
        prefix.resize(META_PREFIX_LEN, 0);
        b.extend_from_slice(&prefix);
        for c in &self.chunks {
            b.extend_from_slice(&u16::try_from(c.len()).unwrap().to_le_bytes());
            b.extend_from_slice(c);
        }
        b.extend_from_slice(&self.journal);
        b
    }

    /// Writes the store into `dir/s.zr` and returns its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("s.zr");
        fs::create_dir_all(&path).unwrap();
        let meta = fs::File::create(path.join(META_FILE_NAME)).unwrap();
        meta.set_len(META_FILE_LEN as u64).unwrap();
        meta.write_all_at(&self.meta_prefix, 0).unwrap();
        for (id, bytes) in self.chunks.iter().enumerate() {
            fs::write(path.join(chunk_file_name(id as u16)), bytes).unwrap();
        }
        if self.flags & flag::JOURNAL != 0 {
            let mut journal = self.journal.clone();
            if self.flags & flag::JOURNAL_CRC != 0 {
                let crc = crc32c::crc32c(&journal);
                journal.extend_from_slice(&crc.to_le_bytes());
            }
            fs::write(path.join(JOURNAL_FILE_NAME), journal).unwrap();
        }
        path
    }

    /// The image of an existing store: `None` when it does not fit (more
    /// than `IMAGE_CHUNKS` chunks, a chunk over 65535 bytes, or a sidecar).
    pub fn of_store(path: &Path, flags: u8) -> Option<Image> {
        if path.join(CHECKSUM_FILE_NAME).exists() {
            return None;
        }
        let meta = fs::File::open(path.join(META_FILE_NAME)).ok()?;
        let mut meta_prefix = vec![0; META_PREFIX_LEN];
        meta.read_exact_at(&mut meta_prefix, 0).ok()?;
        let mut chunks = Vec::new();
        while let Ok(bytes) = fs::read(path.join(chunk_file_name(chunks.len() as u16))) {
            if chunks.len() == IMAGE_CHUNKS || bytes.len() > u16::MAX as usize {
                return None;
            }
            chunks.push(bytes);
        }
        let journal = fs::read(path.join(JOURNAL_FILE_NAME)).ok();
        let mut flags = flags & !(flag::CHUNK_COUNT | flag::JOURNAL | flag::JOURNAL_CRC);
        flags |= chunks.len() as u8;
        if journal.is_some() {
            flags |= flag::JOURNAL;
        }
        Some(Image {
            flags,
            meta_prefix,
            chunks,
            journal: journal.unwrap_or_default(),
        })
    }
}

/// Records larger than this are gathered into a buffer too small for them
/// (the gather must refuse); smaller ones get exactly their length, so a
/// length just over a format-1 store's record limit reaches the decoder's
/// own check. (A fuzzed version 2 allows lengths up to 1 GiB: those are not
/// given room, so that a run never allocates that much.)
const MAX_PROBE_LEN: u64 = V1_MAX_RECORD_LEN as u64 + 64;
/// The batch gather is skipped when its destination would be larger.
const MAX_BATCH_BYTES: usize = 16 << 20;
/// At most this many indices are read from a store whose length is larger
/// (plus the last one); a fuzzed length can be up to 2^24.
const MAX_READS: u64 = 1024;
const GUARD: usize = 8;
const SENTINEL: u8 = 0xA5;
static SENTINELS: [u8; 4096] = [SENTINEL; 4096];

/// Whether every byte of `b` is still the sentinel (compared with memcmp:
/// byte loops are slow under coverage instrumentation).
fn untouched(b: &[u8]) -> bool {
    b.chunks(SENTINELS.len())
        .all(|c| c == &SENTINELS[..c.len()])
}

/// Gathers every record (the first `MAX_READS` and the last, when there are
/// more), one by one between guard bytes, then in one fixed-stride batch.
/// Panics when a gather writes outside a record's slot, when the batch and
/// the single reads disagree, or when reading past the length is not
/// refused. Errors are fine: returns how many records read `Ok`.
pub fn read_guarded(store: &Store) -> usize {
    let len = store.len() as u64;
    assert!(len as usize <= MAX_RECORDS, "a store longer than the table");
    let mut idxs: Vec<u64> = (0..len.min(MAX_READS)).collect();
    if len > MAX_READS {
        idxs.push(len - 1);
    }
    let lens = store.lengths(&idxs).expect("indices below the length");
    let mut singles = Vec::with_capacity(idxs.len());
    for (&index, &l) in idxs.iter().zip(&lens) {
        let room = if l as u64 <= MAX_PROBE_LEN {
            l as usize
        } else {
            1
        };
        let mut buf = vec![SENTINEL; GUARD + room + GUARD];
        let result = store.gather_ragged(&[index], &mut buf, &[GUARD as u64]);
        let slot = GUARD..GUARD + room.min(l as usize);
        assert!(
            untouched(&buf[..slot.start]) && untouched(&buf[slot.end..]),
            "gather of record {index} ({l} bytes) wrote outside its slot: {result:?}"
        );
        if l as u64 > MAX_PROBE_LEN {
            assert!(result.is_err(), "a {l}-byte record fitted in {room} bytes");
        }
        singles.push(result.ok().map(|()| buf[slot].to_vec()));
    }

    let stride = lens.iter().copied().max().unwrap_or(0) as usize + GUARD;
    if lens.iter().all(|&l| l as u64 <= MAX_PROBE_LEN) && stride * idxs.len() <= MAX_BATCH_BYTES {
        let end = idxs.len() * stride;
        let mut buf = vec![SENTINEL; end + GUARD];
        let result = store.gather(&idxs, &mut buf[..end], stride);
        assert!(
            untouched(&buf[end..]),
            "batch gather wrote past its destination"
        );
        for (k, &l) in lens.iter().enumerate() {
            let slot = &buf[k * stride..(k + 1) * stride];
            if result.is_ok() {
                assert_eq!(
                    singles[k].as_deref(),
                    Some(&slot[..l as usize]),
                    "record {} reads differently alone and in a batch",
                    idxs[k]
                );
                assert!(
                    slot[l as usize..].iter().all(|&b| b == 0),
                    "record {}'s slot tail is not zeroed",
                    idxs[k]
                );
            }
        }
    }
    assert!(store.gather(&[len], &mut [0u8; 16], 16).is_err());
    singles.iter().filter(|s| s.is_some()).count()
}
