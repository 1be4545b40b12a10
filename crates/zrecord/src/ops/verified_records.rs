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

/// One bit per record: for the records the store held at the first check,
/// one bitmap made then (what a read tests, as cheaply as one bitmap
/// allows); for records appended after it, pages of [`PAGE_RECORDS`]
/// records made as checks reach them. (One bitmap for every possible slot,
/// 2 MiB a handle, made a collection of 10,000 small shards read with
/// checksums hold 20 GiB.)
#[derive(Default)]
pub(crate) struct VerifiedRecords {
    first: OnceLock<Box<[AtomicU64]>>,
    /// Boxed, so that a `Store` stays small: inline, they overflowed a debug
    /// build's stack.
    more: OnceLock<Box<[OnceLock<Box<Page>>; PAGES]>>,
}

/// The first bitmap of a [`VerifiedRecords`], borrowed.
#[derive(Clone, Copy)]
pub(crate) struct FirstMarks<'a>(&'a [AtomicU64]);

impl FirstMarks<'_> {
    /// Whether record `index` is marked; `None` for a record past the
    /// bitmap (appended after it was made).
    pub fn get(self, index: u64) -> Option<bool> {
        let (word, bit) = (index as usize / 64, 1 << (index % 64));
        Some(self.0.get(word)?.load(Ordering::Relaxed) & bit != 0)
    }
}

/// Records a page of marks past the first bitmap covers, and its words.
const PAGE_RECORDS: usize = 1 << 16;
const PAGE_WORDS: usize = PAGE_RECORDS / 64;
const PAGES: usize = MAX_RECORDS / PAGE_RECORDS;
type Page = [AtomicU64; PAGE_WORDS];

impl VerifiedRecords {
    /// The first bitmap, once made: a batch takes it once for all its
    /// records of the store (`ops/gather.rs`).
    pub fn first_marks(&self) -> Option<FirstMarks<'_>> {
        self.first.get().map(|first| FirstMarks(first))
    }

    /// Whether record `index` was checked since the last [`forget`](Self::forget).
    pub fn contains(&self, index: u64) -> bool {
        if let Some(marked) = self.first_marks().and_then(|first| first.get(index)) {
            return marked;
        }
        let (word, bit) = (index as usize / 64, 1 << (index % 64));
        self.more
            .get()
            .and_then(|more| more[word / PAGE_WORDS].get())
            .is_some_and(|page| page[word % PAGE_WORDS].load(Ordering::Relaxed) & bit != 0)
    }

    /// Marks record `index`, of a store of `records` records, checked.
    pub fn insert(&self, index: u64, records: usize) {
        let (word, bit) = (index as usize / 64, 1 << (index % 64));
        let first = self.first.get_or_init(|| {
            let words = records.max(index as usize + 1).div_ceil(64);
            (0..words).map(|_| AtomicU64::new(0)).collect()
        });
        let mark = match first.get(word) {
            Some(mark) => mark,
            None => {
                let more = self
                    .more
                    .get_or_init(|| Box::new([const { OnceLock::new() }; PAGES]));
                let page = more[word / PAGE_WORDS]
                    .get_or_init(|| Box::new([const { AtomicU64::new(0) }; PAGE_WORDS]));
                &page[word % PAGE_WORDS]
            }
        };
        mark.fetch_or(bit, Ordering::Relaxed);
    }

    /// Forgets every mark, for when records move (delete, compact).
    pub fn forget(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks of the records held at the first check and of those appended
    /// after it (pages), each set alone, and all forgotten at once.
    #[test]
    fn marks_before_and_after_the_first_bitmap() {
        let mut marks = VerifiedRecords::default();
        assert!(!marks.contains(3));
        marks.insert(3, 100);
        let beyond = [
            100,
            127,
            128,
            PAGE_RECORDS as u64 + 5,
            MAX_RECORDS as u64 - 1,
        ];
        for &i in &beyond {
            marks.insert(i, 100);
        }
        let marked = |i: u64| i == 3 || beyond.contains(&i);
        for i in (0..200).chain([PAGE_RECORDS as u64 + 4, PAGE_RECORDS as u64 + 5]) {
            assert_eq!(marks.contains(i), marked(i), "record {i}");
        }
        assert!(marks.contains(MAX_RECORDS as u64 - 1));
        assert_eq!(
            marks.first.get().map(|f| f.len()),
            Some(2),
            "100 records: two words"
        );
        marks.forget();
        assert!(beyond.iter().chain([&3]).all(|&i| !marks.contains(i)));
    }
}
