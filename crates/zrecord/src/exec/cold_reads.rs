//! Reading ahead for batches whose records are not in the page cache.
//!
//! Chunk files are mapped with random-access advice, so a fault on a
//! record that is not cached reads just its page, and the thread waits for
//! it: cold gathers of the benchmark's workloads A–C ran at about 100 MB/s,
//! one 4 KiB read at a time per core. (The default read-around, 128 KiB per
//! fault, was no cure: numpy's mapping of workload B, 1.6 GB, read 6 MB/s
//! cold.) Asking the kernel for every record of the batch up front
//! (`MADV_WILLNEED` on each record's bytes) puts all their reads in flight
//! at once (bench/README.md, "Cold batches", has the command that measures
//! all three). That costs a system call per record, about as much as
//! copying a warm batch, so a store only does it for a while after a batch
//! of its had to wait for the disk: the calling thread's count of major page
//! faults went up by [`COLD_FAULTS`] or more during it.
//!
//! The thread's fault count is read only on Linux (`RUSAGE_THREAD`);
//! elsewhere no batch is judged cold, so gathers never read ahead.

use std::sync::atomic::{AtomicU32, Ordering};

/// Batches too small to be worth two system calls are not judged.
const MIN_JUDGED_WORK: u64 = 128 << 10;

/// One batch in this many is judged while the store is taken to be warm:
/// a cold store is found a few batches late, and a warm one pays the fault
/// count only now and then.
const JUDGE_EVERY: u32 = 4;

/// Major faults in one batch that make it cold: a cold batch takes one per
/// page it reads (hundreds); a warm one may still take a stray few (code
/// paged in, a fault retried under contention), which must not cost the
/// next batches a system call per record.
const COLD_FAULTS: u64 = 8;

/// Batches read ahead after one was found cold. The batch after them goes
/// without, and is judged, which tells whether the store is still cold.
const READ_AHEAD_BATCHES: u32 = 32;

/// Whether a store's gathers read ahead now.
#[derive(Debug, Default)]
pub(crate) struct ColdReads {
    batches_left: AtomicU32,
    batches_seen: AtomicU32,
}

/// What one batch does about the page cache, decided before it runs.
pub(crate) struct ColdCheck {
    /// Ask for the batch's records before reading them.
    pub(crate) read_ahead: bool,
    /// The thread's major faults before the batch, when it is judged.
    faults_before: Option<u64>,
}

impl ColdReads {
    /// Decides for a batch of `work` (copied-byte equivalents).
    pub(crate) fn before(&self, work: u64) -> ColdCheck {
        // Counts down the read-ahead batches, then the one judged after them.
        let left = self
            .batches_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .unwrap_or(0);
        let judged = work >= MIN_JUDGED_WORK
            && (left == 1
                || (left == 0
                    && self.batches_seen.fetch_add(1, Ordering::Relaxed) % JUDGE_EVERY == 0));
        ColdCheck {
            read_ahead: left > 1,
            faults_before: if judged { major_faults() } else { None },
        }
    }

    /// Whether the next batch will read ahead ([`ColdReads::before`]
    /// decides it the same way), asked before its entries are read.
    pub(crate) fn reading_ahead(&self) -> bool {
        self.batches_left.load(Ordering::Relaxed) > 1
    }

    /// Judges the batch `check` was made for, now that it has run.
    pub(crate) fn after(&self, check: ColdCheck) {
        if let (Some(before), Some(now)) = (check.faults_before, major_faults()) {
            if now.saturating_sub(before) >= COLD_FAULTS {
                self.cold_seen();
            }
        }
    }

    fn cold_seen(&self) {
        self.batches_left
            .store(READ_AHEAD_BATCHES + 1, Ordering::Relaxed);
    }
}

/// Major page faults of the calling thread so far (Linux); `None` where
/// they cannot be counted, which leaves read-ahead off.
fn major_faults() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `usage` is valid for writes of a `rusage`.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) } == 0 {
            // SAFETY: getrusage succeeded, so it filled `usage`.
            return Some(unsafe { usage.assume_init() }.ru_majflt as u64);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cold_batch_makes_the_next_ones_read_ahead() {
        let cold = ColdReads::default();
        let judged = (0..JUDGE_EVERY)
            .filter(|_| cold.before(1 << 20).faults_before.is_some())
            .count();
        #[cfg(target_os = "linux")]
        assert_eq!(judged, 1, "one batch in JUDGE_EVERY is judged");
        assert!(cold.before(MIN_JUDGED_WORK - 1).faults_before.is_none());
        assert!(!cold.before(1 << 20).read_ahead, "a warm store does not");
        cold.cold_seen();
        for _ in 0..READ_AHEAD_BATCHES {
            let check = cold.before(1 << 20);
            assert!(check.read_ahead && check.faults_before.is_none());
        }
        let probe = cold.before(1 << 20);
        assert!(!probe.read_ahead, "then one goes without");
        #[cfg(target_os = "linux")]
        assert!(probe.faults_before.is_some(), "and is judged");
        cold.after(probe);
        assert!(
            !cold.before(1 << 20).read_ahead,
            "no major fault: warm again"
        );
    }

    /// Reading a page of a file that is not cached counts as a major fault:
    /// the signal the store goes by.
    #[cfg(target_os = "linux")]
    #[test]
    fn reading_an_uncached_page_is_a_major_fault() {
        use std::os::unix::io::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: a valid descriptor; dropping a file's cached pages is
        // only a hint.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        // SAFETY: the file is not changed while mapped.
        let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
        let cold = !any_resident(&map);
        let before = major_faults().unwrap();
        let sum: u64 = (0..map.len()).step_by(4096).map(|i| map[i] as u64).sum();
        assert_eq!(sum, 7 * 256);
        // Where the pages could not be dropped (tmpfs keeps every page in
        // memory) there is no fault to see, and nothing to read ahead.
        if cold {
            assert!(major_faults().unwrap() > before, "no major fault counted");
        }
    }

    /// Whether any page of `map` is in memory.
    #[cfg(target_os = "linux")]
    fn any_resident(map: &[u8]) -> bool {
        let mut pages = vec![0u8; map.len().div_ceil(4096)];
        // SAFETY: `map` is a page-aligned mapping of `map.len()` bytes and
        // `pages` holds a byte per page of it.
        let rc = unsafe { libc::mincore(map.as_ptr() as *mut _, map.len(), pages.as_mut_ptr()) };
        rc != 0 || pages.iter().any(|&p| p & 1 != 0)
    }

    /// Drops the page cache's copies of the files under `dir`.
    #[cfg(target_os = "linux")]
    fn drop_cached(dir: &std::path::Path) {
        use std::os::unix::io::AsRawFd;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                drop_cached(&path);
                continue;
            }
            let file = std::fs::File::open(path).unwrap();
            file.sync_all().unwrap();
            // SAFETY: a valid descriptor; dropping cached pages is a hint.
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }

    /// `n` records of `len` bytes, each differing from the others, and at
    /// every 4 KiB page.
    #[cfg(target_os = "linux")]
    fn records(n: usize, len: usize) -> Vec<u8> {
        (0..n * len)
            .map(|b| (b / len) as u8 ^ (b / 4096).wrapping_mul(97) as u8 ^ b as u8)
            .collect()
    }

    /// Reads batches of 64 of `n` records of `len` bytes from `bytes`'s
    /// copy with dropped pages (`gather`), checking each: the reads are
    /// found cold within a few batches (`cold` says the reader reads ahead
    /// by then), unless the pages could not be dropped.
    #[cfg(target_os = "linux")]
    fn read_cold(
        bytes: &[u8],
        (n, len): (usize, usize),
        gather: impl Fn(&[u64], &mut [u8]),
        cold: &ColdReads,
    ) {
        let mut batch = vec![0u8; 64 * len];
        let before = major_faults().unwrap();
        let mut faulted = false;
        for round in 0..3 * JUDGE_EVERY as u64 {
            let idxs: Vec<u64> = (0..64).map(|k| (k * 37 + round * 11) % n as u64).collect();
            gather(&idxs, &mut batch);
            for (k, &i) in idxs.iter().enumerate() {
                let want = &bytes[i as usize * len..(i as usize + 1) * len];
                assert!(
                    batch[k * len..(k + 1) * len] == *want,
                    "round {round} record {i}"
                );
            }
            // Where the pages could not be dropped, nothing is cold.
            faulted |= round == 0 && major_faults().unwrap() > before;
            if round == JUDGE_EVERY as u64 && faulted {
                let left = cold.batches_left.load(Ordering::Relaxed);
                assert!(left > 0, "a cold batch was judged by now");
            }
        }
    }

    /// A store whose pages were dropped is found cold within a few
    /// batches, reads ahead from then on, and returns exactly its records.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_cold_store_reads_ahead_and_returns_its_records() {
        use crate::{AppendOptions, Store};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.zr");
        let (n, len) = (400usize, 16 << 10);
        let bytes = records(n, len);
        let store = Store::open(&path).unwrap();
        let durable = AppendOptions {
            codec: crate::Codec::Raw,
            durable: true,
            ..AppendOptions::default()
        };
        store.append_fixed(&bytes, n, len, &durable).unwrap();
        drop(store);
        drop_cached(&path);
        let store = Store::open(&path).unwrap();
        let gather = |idxs: &[u64], dst: &mut [u8]| store.gather(idxs, dst, len).unwrap();
        read_cold(&bytes, (n, len), gather, &store.cold);
    }

    /// So is a collection whose batches read a record or two from each of
    /// many shards: its batches are judged whole, not shard by shard (where
    /// each shard's part is too small to be judged at all).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_cold_collection_reads_ahead_and_returns_its_records() {
        use crate::{AppendOptions, Collection, CollectionWriter, ShardLimits, StoreOptions};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let (n, len) = (400usize, 16 << 10);
        let bytes = records(n, len);
        let limits = ShardLimits {
            max_records: 10,
            ..ShardLimits::default()
        };
        let mut writer = CollectionWriter::new(&path, &StoreOptions::default(), limits).unwrap();
        let refs: Vec<&[u8]> = bytes.chunks(len).collect();
        let options = AppendOptions {
            codec: crate::Codec::Raw,
            ..AppendOptions::default()
        };
        writer.append(&refs, &options).unwrap();
        writer.publish().unwrap();
        drop(writer);
        drop_cached(&path);
        let collection = Collection::open(&path).unwrap();
        let gather = |idxs: &[u64], dst: &mut [u8]| collection.gather(idxs, dst, len).unwrap();
        read_cold(&bytes, (n, len), gather, &collection.cold);
    }
}
