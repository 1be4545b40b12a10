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

/// One bit per table slot, in pages of [`PAGE_RECORDS`] slots allocated on
/// the first check of a record they cover: a handle holds 4 KiB of page
/// pointers and 8 KiB a page its checks have touched. (One bitmap for every
/// possible slot, 2 MiB a handle, made a collection of 10,000 small shards
/// read with checksums hold 20 GiB.) The page pointers are boxed so that a
/// `Store` stays small: held inline they overflowed a debug build's stack.
pub(crate) struct VerifiedRecords {
    pages: Box<[OnceLock<Box<Page>>; PAGES]>,
}

/// Records a page of marks covers.
const PAGE_RECORDS: usize = 1 << 16;
const PAGES: usize = MAX_RECORDS / PAGE_RECORDS;
type Page = [AtomicU64; PAGE_RECORDS / 64];

impl Default for VerifiedRecords {
    fn default() -> Self {
        Self {
            pages: Box::new([const { OnceLock::new() }; PAGES]),
        }
    }
}

impl VerifiedRecords {
    /// Whether record `index` was checked since the last [`forget`](Self::forget).
    pub fn contains(&self, index: u64) -> bool {
        let (page, word, bit) = place(index);
        self.pages[page]
            .get()
            .is_some_and(|p| p[word].load(Ordering::Relaxed) & bit != 0)
    }

    /// Marks record `index` checked.
    pub fn insert(&self, index: u64) {
        let (page, word, bit) = place(index);
        let page = self.pages[page]
            .get_or_init(|| Box::new([const { AtomicU64::new(0) }; PAGE_RECORDS / 64]));
        page[word].fetch_or(bit, Ordering::Relaxed);
    }

    /// Forgets every mark, for when records move (delete, compact).
    pub fn forget(&mut self) {
        *self = Self::default();
    }
}

/// Record `index`'s page, word within the page, and bit within the word.
fn place(index: u64) -> (usize, usize, u64) {
    let index = index as usize;
    (
        index / PAGE_RECORDS,
        index % PAGE_RECORDS / 64,
        1 << (index % 64),
    )
}
