//! Storage usage, for deciding when a `compact` is worth it.

use crate::store::Store;

/// What a store occupies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Live records.
    pub records: u64,
    /// Stored bytes of the live records.
    pub live_bytes: u64,
    /// Position of the write frontier as a byte count: every chunk before the
    /// tail chunk counted at the chunk capacity, plus the tail offset.
    pub chunk_bytes: u64,
    /// `chunk_bytes - live_bytes`: an upper bound on what `compact` frees, as
    /// it counts the slack at the end of full chunks too.
    pub reclaimable: u64,
}

impl Store {
    /// Reports storage usage. Waits for appends in flight.
    pub fn stats(&self) -> Stats {
        let _writer = self.writer_lock();
        let header = self.meta.header();
        let live_bytes = (0..header.length as usize)
            .map(|i| self.meta.entry(i).phys_length as u64)
            .sum();
        let chunk_bytes =
            header.tail_chunk as u64 * self.chunk_capacity + header.tail_offset as u64;
        Stats {
            records: header.length as u64,
            live_bytes,
            chunk_bytes,
            reclaimable: chunk_bytes.saturating_sub(live_bytes),
        }
    }
}
