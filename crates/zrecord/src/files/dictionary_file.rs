//! `zstd.dict`: the store's zstd dictionary, created once from a sample of
//! the first records appended with codec `zstd-dict` and never changed (its
//! layout: `format/dictionary.rs`, and docs/FORMAT.md, "The zstd
//! dictionary").

use std::io::Write;
use std::path::Path;

use crate::error::{io_error, Error, Result};
use crate::files::os::create_once;
use crate::format::dictionary::{Dictionary, MAX_DICT_LEN};

/// File name of the dictionary inside a store directory.
pub const DICT_FILE_NAME: &str = "zstd.dict";

/// The store's dictionary, if it has one.
pub(crate) fn load(dir: &Path) -> Result<Option<Dictionary>> {
    let path = dir.join(DICT_FILE_NAME);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&path)(e)),
    };
    Dictionary::from_file_bytes(&bytes)
        .map(Some)
        .map_err(|reason| Error::NotAStore { path, reason })
}

/// Creates the dictionary file with `dict`, unless another handle created
/// it first; returns the one in the file, which every record uses.
pub(crate) fn create(dir: &Path, dict: &Dictionary) -> Result<Dictionary> {
    create_once(dir, DICT_FILE_NAME, |file| {
        file.write_all(&dict.to_file_bytes())
    })?;
    load(dir)?
        .ok_or_else(|| io_error(&dir.join(DICT_FILE_NAME))(std::io::ErrorKind::NotFound.into()))
}

/// A dictionary trained on `samples` (records of the first append), or
/// `None` when zstd's trainer cannot make one of them (too few, too small).
pub(crate) fn train(samples: &[&[u8]]) -> Option<Dictionary> {
    let total: usize = samples.iter().map(|s| s.len()).sum();
    // zstd's guidance: samples of about 100 times the dictionary's size.
    let size = (total / 100).min(MAX_DICT_LEN);
    if samples.len() < 64 || size < 1024 {
        return None;
    }
    zstd::dict::from_samples(samples, size)
        .ok()
        .map(Dictionary::new)
}
