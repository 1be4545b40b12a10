//! Deleting records by moving the tail into the holes, so the live records
//! stay exactly `0..len` (docs/FORMAT.md, "Delete").

use crate::error::Result;
use crate::store::Store;

impl Store {
    /// Removes records `idxs` (any order, duplicates allowed). Each hole is
    /// filled with the current last record, so survivors may change index.
    /// Only the table changes; the bytes stay until [`Store::compact`].
    /// Nothing changes when any index is out of range.
    pub fn delete(&mut self, idxs: &[u64]) -> Result<()> {
        let mut len = self.meta.length();
        if let Some(&bad) = idxs.iter().find(|&&i| i >= len as u64) {
            return Err(self.out_of_range(bad, len));
        }
        let mut targets = idxs.to_vec();
        targets.sort_unstable_by(|a, b| b.cmp(a));
        targets.dedup();
        // In descending order every hole lies at or below the current last
        // slot, and no later target names a slot already filled.
        for &target in &targets {
            let last = len - 1;
            if target as u32 != last {
                self.meta
                    .set_entry(target as usize, self.meta.entry(last as usize));
            }
            len = last;
        }
        self.meta.publish_length(len);
        Ok(())
    }
}
