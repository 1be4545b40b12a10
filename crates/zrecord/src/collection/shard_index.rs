//! The indirection table of a collection: from a global index to the shard
//! that holds it (docs/FORMAT.md, "Collections"), built at open from each
//! shard's own length.
//!
//! A batch looks up every index it reads, so the lookup must cost next to
//! nothing: a binary search over the shards' first indices took about as
//! long as copying a small record. The index space is cut into buckets of
//! a power of two, a few per shard, each knowing the shard its first index
//! is in; a lookup reads its bucket and steps over the shards that start
//! before the index, most often none.

/// Buckets per shard: enough that few buckets hold a shard's start.
const BUCKETS_PER_SHARD: u64 = 4;

pub(crate) struct ShardIndex {
    /// `starts[s]`: the global index of shard `s`'s first record; the last
    /// element is the collection's length.
    starts: Vec<u64>,
    /// `buckets[b]`: the shard that holds global index `b << shift` (the
    /// last shard for an index past the length).
    buckets: Vec<u32>,
    shift: u32,
}

impl ShardIndex {
    /// The table of shards of these lengths, in order.
    pub(crate) fn new(lengths: impl IntoIterator<Item = u64>) -> ShardIndex {
        let mut starts = vec![0];
        for length in lengths {
            starts.push(starts[starts.len() - 1] + length);
        }
        let shards = starts.len() - 1;
        let len = starts[shards];
        let wanted = (shards as u64 * BUCKETS_PER_SHARD).max(1);
        let mut shift = 0;
        while len >> shift >= wanted {
            shift += 1;
        }
        let mut buckets = Vec::with_capacity((len >> shift) as usize + 1);
        let mut s = 0;
        for b in 0..=(len >> shift) {
            while s + 1 < shards && starts[s + 1] <= b << shift {
                s += 1;
            }
            buckets.push(s as u32);
        }
        ShardIndex {
            starts,
            buckets,
            shift,
        }
    }

    /// The global index of each shard's first record, and the length last.
    pub(crate) fn starts(&self) -> &[u64] {
        &self.starts
    }

    /// The number of records of shard `s`.
    pub(crate) fn shard_len(&self, s: usize) -> u64 {
        self.starts[s + 1] - self.starts[s]
    }

    pub(crate) fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    /// The shard holding `index`, which must be below the length.
    pub(crate) fn shard_of(&self, index: u64) -> usize {
        let mut s = self.buckets[(index >> self.shift) as usize] as usize;
        // Most buckets hold no shard's start and most others one: one step
        // taken without a branch (which a shuffled batch mispredicts often),
        // then a loop that seldom runs (short or empty shards).
        s += (self.starts[s + 1] <= index) as usize;
        while self.starts[s + 1] <= index {
            s += 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every index finds the shard whose range holds it, as a binary
        /// search over the starts finds it, empty shards included.
        #[test]
        fn every_index_finds_its_shard(lengths in prop::collection::vec(
            prop_oneof![Just(0u64), 1u64..5, 1u64..2000], 0..40)) {
            let index = ShardIndex::new(lengths.iter().copied());
            prop_assert_eq!(index.len(), lengths.iter().sum::<u64>());
            for (s, &length) in lengths.iter().enumerate() {
                prop_assert_eq!(index.shard_len(s), length);
            }
            for i in 0..index.len() {
                let s = index.shard_of(i);
                prop_assert!(index.starts()[s] <= i && i < index.starts()[s + 1]);
                prop_assert_eq!(s, index.starts().partition_point(|&x| x <= i) - 1);
            }
        }
    }
}
