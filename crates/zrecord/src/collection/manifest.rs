//! A collection's manifest: which shards are published, in order
//! (docs/FORMAT.md, "Collections").
//!
//! Each publish writes a new generation, `manifest-<n>.zc`, holding the
//! whole list, created with [`create_once`] (a temporary file, synced, then
//! hard-linked to its name): a link never replaces a file, so of two
//! writers publishing generation `n + 1` at once exactly one succeeds and
//! the other reads that one and tries `n + 2`. No lock is needed, which is
//! what lets writers on several machines share one file system. The newest
//! generation present is the collection.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use crate::error::{io_error, Error, Result};
use crate::files::os::create_once;

/// The first line of every manifest (docs/FORMAT.md, "Collections").
pub const MANIFEST_MAGIC: &str = "loaderx-collection 1";
/// A manifest's name: this prefix, its generation in decimal, this suffix.
pub const MANIFEST_PREFIX: &str = "manifest-";
/// See [`MANIFEST_PREFIX`].
pub const MANIFEST_SUFFIX: &str = ".zc";
/// The last line's prefix: the CRC32C of every byte before that line.
pub const MANIFEST_CRC_PREFIX: &str = "crc32c ";
/// The longest shard name; names are made of `0-9`, `a-z` and `-`.
pub const MAX_SHARD_NAME: usize = 64;

/// Generations older than the one before the newest are removed by the
/// publisher that made the newest: a reader that listed the directory just
/// before still finds the one it chose, or lists again.
const KEEP_GENERATIONS: u64 = 2;

/// How many times a reader lists the directory again when the generation it
/// chose was removed under it, and a publisher retries after losing races.
const RETRIES: usize = 1000;

pub fn manifest_name(generation: u64) -> String {
    format!("{MANIFEST_PREFIX}{generation}{MANIFEST_SUFFIX}")
}

pub fn valid_shard_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SHARD_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
}

/// The generations present in `dir`, newest first.
fn generations(dir: &Path) -> Result<Vec<u64>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name
            .strip_prefix(MANIFEST_PREFIX)
            .and_then(|rest| rest.strip_suffix(MANIFEST_SUFFIX))
            .and_then(|n| n.parse::<u64>().ok())
        {
            found.push(n);
        }
    }
    found.sort_unstable_by(|a, b| b.cmp(a));
    Ok(found)
}

fn encode(names: &[String]) -> String {
    let mut text = format!("{MANIFEST_MAGIC}\n");
    for name in names {
        text.push_str(name);
        text.push('\n');
    }
    let crc = crc32c::crc32c(text.as_bytes());
    text.push_str(&format!("{MANIFEST_CRC_PREFIX}{crc:08x}\n"));
    text
}

fn decode(path: &Path, text: &str) -> Result<Vec<String>> {
    let bad = |reason: String| Error::NotAStore {
        path: path.to_path_buf(),
        reason: format!("not a collection manifest: {reason}"),
    };
    let body_end = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map(|i| i + 1)
        .ok_or_else(|| bad("too short".into()))?;
    let (body, last) = text.split_at(body_end);
    let want = last
        .trim_end_matches('\n')
        .strip_prefix(MANIFEST_CRC_PREFIX)
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| bad("its last line is not its checksum".into()))?;
    let got = crc32c::crc32c(body.as_bytes());
    if got != want {
        return Err(bad(format!(
            "its checksum is {want:08x} but its bytes' is {got:08x}"
        )));
    }
    let mut lines = body.lines();
    if lines.next() != Some(MANIFEST_MAGIC) {
        return Err(bad(format!("its first line is not {MANIFEST_MAGIC:?}")));
    }
    let names: Vec<String> = lines.map(str::to_owned).collect();
    if let Some(name) = names.iter().find(|n| !valid_shard_name(n)) {
        return Err(bad(format!("{name:?} is not a shard name")));
    }
    let mut sorted: Vec<&String> = names.iter().collect();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(format!("shard {:?} is listed twice", w[0])));
    }
    Ok(names)
}

/// The newest generation (0 when nothing was ever published) and its shard
/// names, in order.
pub fn read(dir: &Path) -> Result<(u64, Vec<String>)> {
    for _ in 0..RETRIES {
        let Some(&newest) = generations(dir)?.first() else {
            return Ok((0, Vec::new()));
        };
        let path = dir.join(manifest_name(newest));
        match fs::read_to_string(&path) {
            Ok(text) => return Ok((newest, decode(&path, &text)?)),
            // Removed by a publisher since the listing: list again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_error(&path)(e)),
        }
    }
    Err(Error::Io {
        path: dir.to_path_buf(),
        source: io::Error::other("the manifest kept changing while it was read"),
    })
}

/// Adds `shards` (those not listed yet) to the end of the list, as one new
/// generation; returns it. A crash at any moment leaves the list as it was
/// or with all of them.
pub fn publish(dir: &Path, shards: &[String]) -> Result<u64> {
    for _ in 0..RETRIES {
        let (generation, mut names) = read(dir)?;
        let listed: std::collections::HashSet<&String> = names.iter().collect();
        let fresh: Vec<String> = shards
            .iter()
            .filter(|s| !listed.contains(s))
            .cloned()
            .collect();
        if fresh.is_empty() {
            return Ok(generation);
        }
        names.extend(fresh);
        let text = encode(&names);
        let next = generation + 1;
        if create_once(dir, &manifest_name(next), |f| f.write_all(text.as_bytes()))? {
            for old in generations(dir)? {
                if old + KEEP_GENERATIONS <= next {
                    // Another publisher may have removed it first.
                    let _ = fs::remove_file(dir.join(manifest_name(old)));
                }
            }
            return Ok(next);
        }
        // Another writer published generation `next` first: add to its list.
    }
    Err(Error::Io {
        path: dir.to_path_buf(),
        source: io::Error::other("lost the race to publish too many times"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_round_trips_and_damage_is_refused() {
        let names: Vec<String> = vec!["a-1".into(), "b".into()];
        let text = encode(&names);
        assert_eq!(
            text,
            format!(
                "loaderx-collection 1\na-1\nb\ncrc32c {:08x}\n",
                crc32c::crc32c(b"loaderx-collection 1\na-1\nb\n")
            )
        );
        let p = Path::new("m");
        assert_eq!(decode(p, &text).unwrap(), names);
        for damaged in [
            text.replacen("a-1", "a-2", 1),
            text.replacen("loaderx", "loaderX", 1),
            text.replacen("\nb\n", "\n", 1),
            String::new(),
            "loaderx-collection 1\n".into(),
        ] {
            assert!(
                matches!(decode(p, &damaged), Err(Error::NotAStore { .. })),
                "{damaged:?}"
            );
        }
        let twice = encode(&["a".into(), "a".into()]);
        assert!(decode(p, &twice).is_err());
        let slash = encode(&["../x".into()]);
        assert!(decode(p, &slash).is_err());
    }
}
