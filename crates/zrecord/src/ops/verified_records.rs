//! Which records a handle has already checked against their checksums.
//!
//! Checking a CRC32C costs about as much as copying the record again: a
//! pass that checks every record ran at 0.57-0.75x the speed of an
//! unchecked one on raw records (`bench/README.md`, "Checksums by
//! default"). A record's bytes cannot change under an open handle except
//! through this store's own delete and compact, which forget every mark, or
//! through another program writing the files (docs/FORMAT.md, "Assumptions
//! about the medium"); so a record checked once is trusted for the rest of
//! the handle's life, and later gathers of it cost one bit test. Marks are
//! only set while the sidecar covers the table (`ops/gather.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::format::limits::MAX_RECORDS;

/// One bit per table slot, allocated on the first check: 2 MiB per handle
/// that checks, nothing for one that never does.
#[derive(Default)]
pub(crate) struct VerifiedRecords {
    bits: OnceLock<Box<[AtomicU64]>>,
}

impl VerifiedRecords {
    fn words(&self) -> &[AtomicU64] {
        self.bits
            .get_or_init(|| (0..MAX_RECORDS / 64).map(|_| AtomicU64::new(0)).collect())
    }

    /// Whether record `index` was checked since the last [`forget`](Self::forget).
    pub fn contains(&self, index: u64) -> bool {
        let word = &self.words()[index as usize / 64];
        word.load(Ordering::Relaxed) & (1 << (index % 64)) != 0
    }

    /// Marks record `index` checked.
    pub fn insert(&self, index: u64) {
        self.words()[index as usize / 64].fetch_or(1 << (index % 64), Ordering::Relaxed);
    }

    /// Forgets every mark, for when records move (delete, compact).
    pub fn forget(&mut self) {
        self.bits = OnceLock::new();
    }
}
