//! Checking a whole store: every live record decoded, and compared with its
//! checksum when the store keeps them.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::exec::streaming_copy::RawCopy;
use crate::exec::thread_pool::{pool, workers};
use crate::ops::gather::Checked;
use crate::store::Store;

/// A record that did not decode to its checksummed bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRecord {
    pub index: u64,
    pub chunk: u16,
    pub offset: u32,
    pub reason: String,
}

/// The outcome of [`Store::verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// Live records checked.
    pub records: u64,
    /// Whether the store keeps checksums (`checksums.zr`).
    pub checksummed: bool,
    /// Records read without a checksum check though the store keeps them:
    /// a program that keeps none (loaderx 0.5.0) wrote or moved them
    /// (docs/FORMAT.md, "Checksums"). Opening the store with
    /// [`crate::Checksums::On`] covers them again.
    pub unchecked: u64,
    /// Every record that failed, in index order.
    pub bad: Vec<BadRecord>,
}

impl Store {
    /// Decodes every live record and, if the store keeps checksums, checks
    /// each against its checksum. Damage is reported in the result, one entry
    /// per bad record; only a failure to read the files is an error.
    pub fn verify(&self) -> Result<VerifyReport> {
        let len = self.meta.length() as u64;
        let limit = self.meta.record_limit();
        let per = len.div_ceil(workers() as u64).max(1);
        let shards: Vec<(u64, u64)> = (0..len)
            .step_by(per as usize)
            .map(|start| (start, (start + per).min(len)))
            .collect();
        let check = |&(start, end): &(u64, u64)| -> Result<(Vec<BadRecord>, u64)> {
            let mut scratch = Vec::new();
            let mut bad = Vec::new();
            let mut unchecked = 0;
            for index in start..end {
                let loc = self.meta.entry(index as usize);
                scratch.resize((loc.logic_length as usize).min(limit), 0);
                match self.decode_checked(index, loc, &mut scratch, true, RawCopy::Cached) {
                    Ok(Checked::Yes) => {}
                    Ok(Checked::No) => unchecked += 1,
                    Err(Error::CorruptRecord {
                        index,
                        chunk,
                        offset,
                        reason,
                        ..
                    }) => bad.push(BadRecord {
                        index,
                        chunk,
                        offset,
                        reason,
                    }),
                    Err(e) => return Err(e),
                }
            }
            Ok((bad, unchecked))
        };
        let found: Vec<(Vec<BadRecord>, u64)> =
            pool().install(|| shards.par_iter().map(check).collect::<Result<_>>())?;
        let checksummed = self.checksums.is_some();
        Ok(VerifyReport {
            records: len,
            checksummed,
            unchecked: match checksummed {
                true => found.iter().map(|(_, n)| n).sum(),
                false => 0,
            },
            bad: found.into_iter().flat_map(|(bad, _)| bad).collect(),
        })
    }
}
