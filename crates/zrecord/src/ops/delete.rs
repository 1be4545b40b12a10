//! Deleting records by moving the tail into the holes, so the live records
//! stay exactly `0..len` (docs/FORMAT.md, "Delete").

use std::collections::HashMap;
use std::time::Duration;

use crate::collection::readers_lock::ReadersLock;
use crate::error::Result;
use crate::files::delete_journal::{self, DeletePlan};
use crate::files::lock::Deadline;
use crate::store::Store;

impl Store {
    /// Removes records `idxs` (any order, duplicates allowed). Each hole is
    /// filled with the current last record, so survivors may change index.
    /// Only the table changes; the bytes stay until [`Store::compact`].
    /// Nothing changes when any index is out of range. The delete is atomic:
    /// after a crash the store holds either all the targets or none of them.
    ///
    /// The store is locked before its length is read: a plan made earlier
    /// would miss what another handle appended in between, and cut it off.
    ///
    /// Fails with [`crate::Error::Busy`] at once while another handle has
    /// the store open; [`Store::delete_within`] waits for them to close.
    pub fn delete(&mut self, idxs: &[u64]) -> Result<()> {
        self.delete_within(idxs, Duration::ZERO)
    }

    /// [`Store::delete`], waiting up to `wait` for the other handles of the
    /// store to close.
    pub fn delete_within(&mut self, idxs: &[u64], wait: Duration) -> Result<()> {
        self.may_write("delete")?;
        if idxs.is_empty() {
            return Ok(());
        }
        let deadline = Deadline::after(wait);
        // A shard's rows are renumbered only while no reader of its
        // collection has the collection open.
        let _no_readers = ReadersLock::for_delete(self.path(), &deadline)?;
        let _sole = self.lock.exclusive_within(&deadline)?;
        // Its journal is written by path: not into another folder renamed
        // into this one's place.
        self.check_folder()?;
        // Records move into the holes: what was checked at an index is gone.
        self.verified.forget();
        let plan = self.plan_delete(idxs)?;
        if plan.old_length == plan.new_length {
            return Ok(());
        }
        delete_journal::write(self.path(), self.meta.hook(), &plan)?;
        delete_journal::apply(self.path(), &self.meta, self.checksums.as_ref(), &plan)
    }

    /// Resolves a delete into the slot rewrites and the new length.
    fn plan_delete(&self, idxs: &[u64]) -> Result<DeletePlan> {
        let old_length = self.meta.length();
        if let Some(&bad) = idxs.iter().find(|&&i| i >= old_length as u64) {
            return Err(self.out_of_range(bad, old_length));
        }
        let mut targets = idxs.to_vec();
        targets.sort_unstable_by(|a, b| b.cmp(a));
        targets.dedup();
        // In descending order every hole lies at or below the current last
        // slot. A slot filled earlier may become the last one again, so the
        // entries are resolved against the rewrites planned so far.
        let mut rewritten = HashMap::new();
        let mut len = old_length;
        for &target in &targets {
            let last = len - 1;
            if target as u32 != last {
                let moving = rewritten.get(&last).copied().unwrap_or_else(|| {
                    let checksum = self.checksums.as_ref().map(|c| c.get(last as usize));
                    (self.meta.entry(last as usize), checksum.unwrap_or_default())
                });
                rewritten.insert(target as u32, moving);
            }
            len = last;
        }
        let mut moves: Vec<_> = rewritten
            .into_iter()
            .filter(|&(slot, _)| slot < len)
            .map(|(slot, (loc, checksum))| (slot, loc, checksum))
            .collect();
        moves.sort_unstable_by_key(|&(slot, ..)| slot);
        Ok(DeletePlan {
            old_length,
            new_length: len,
            moves,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{AppendOptions, Codec, Store};

    fn contents(store: &Store) -> Vec<u8> {
        let idxs: Vec<u64> = (0..store.len() as u64).collect();
        let mut dst = vec![0; idxs.len()];
        store.gather(&idxs, &mut dst, 1).unwrap();
        dst
    }

    /// The delete holds the store alone before it reads anything of it, so
    /// no other handle can append between its plan and its lock: with
    /// another handle open it is refused as busy, whatever its indices,
    /// rather than judged against a length that may be stale by the time
    /// it runs.
    #[test]
    fn a_delete_locks_the_store_before_it_reads_the_length() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let raw = AppendOptions {
            codec: Codec::Raw,
            durable: false,
            ..AppendOptions::default()
        };
        store.append_fixed(b"abc", 3, 1, &raw).unwrap();
        let other = Store::open(dir.path()).unwrap();
        for idxs in [&[0u64][..], &[7], &[0, 1, 2]] {
            match store.delete(idxs) {
                Err(crate::Error::Busy { .. }) => {}
                other => panic!("delete({idxs:?}) with another handle open: {other:?}"),
            }
        }
        drop(other);
        assert!(matches!(
            store.delete(&[7]),
            Err(crate::Error::IndexOutOfRange { .. })
        ));
        store.delete(&[0]).unwrap();
        assert_eq!(contents(&store), b"cb");
    }

    #[test]
    fn a_delete_interrupted_at_any_step_is_finished_on_open() {
        let targets = [9u64, 0, 3, 8, 4];
        let dir = tempfile::tempdir().unwrap();
        let fill = |store: &Store| {
            let raw = AppendOptions {
                codec: Codec::Raw,
                durable: false,
                ..AppendOptions::default()
            };
            store.append_fixed(b"abcdefghij", 10, 1, &raw).unwrap();
        };
        let reference = {
            let mut s = Store::open(dir.path().join("ref")).unwrap();
            fill(&s);
            s.delete(&targets).unwrap();
            contents(&s)
        };
        let plan_len = {
            let s = Store::open(dir.path().join("ref")).unwrap();
            s.plan_delete(&[0]).unwrap().moves.len()
        };
        assert_eq!(plan_len, 1);
        // Crash after the journal is synced and `applied` rewrites are done,
        // before the length is published.
        for applied in 0..=3 {
            let path = dir.path().join(format!("crash-{applied}"));
            let store = Store::open(&path).unwrap();
            fill(&store);
            let plan = store.plan_delete(&targets).unwrap();
            assert_eq!(plan.new_length, 5);
            crate::files::delete_journal::write(&path, &None, &plan).unwrap();
            for &(slot, loc, _) in plan.moves.iter().take(applied) {
                store.meta.set_entry(slot as usize, loc).unwrap();
            }
            drop(store);
            let reopened = Store::open(&path).unwrap();
            assert_eq!(
                contents(&reopened),
                reference,
                "crash after {applied} rewrites"
            );
            assert!(!path
                .join(crate::files::delete_journal::JOURNAL_FILE_NAME)
                .exists());
        }
    }
}
