//! Untrusted store files: arbitrary bytes become the header and first table
//! entries of a sparse `meta.zr`, up to three chunk files and optionally a
//! `delete.journal` (see `zrecord_fuzz::Image`). Opening may fail and any
//! record may be refused, but nothing may panic, and no gather may write
//! outside a record's slot of the destination. Depending on the flags the
//! store then takes an append, a delete or a compaction, and is read again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zrecord::layout::{HEADER_LEN, LENGTH_OFFSET};
use zrecord::{AppendOptions, Checksums, Codec, Store, StoreOptions};
use zrecord_fuzz::{flag, read_guarded, Image, FUZZ_CHUNK_CAPACITY};

/// Creating the sidecar, compacting and verifying visit every record: for a
/// fuzzed length of up to 2^24 that is slow (seconds under the sanitizers),
/// not wrong, so they are only tried on stores no longer than this.
const MAX_WHOLE_STORE_LENGTH: u32 = 4096;

/// The record count the image's header claims.
fn claimed_length(image: &Image) -> u32 {
    image
        .meta_prefix
        .get(LENGTH_OFFSET..HEADER_LEN)
        .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()))
}

/// Whether the image is opened with checksums.
fn with_checksums(image: &Image) -> bool {
    image.flags & flag::CHECKSUMS != 0 && claimed_length(image) <= MAX_WHOLE_STORE_LENGTH
}

fuzz_target!(|data: &[u8]| {
    let image = Image::parse(data);
    let dir = tempfile::tempdir().unwrap();
    let path = image.write(dir.path());
    let options = StoreOptions {
        create: false,
        chunk_capacity: FUZZ_CHUNK_CAPACITY,
        checksums: if with_checksums(&image) {
            Checksums::On
        } else {
            Checksums::Off
        },
        ..StoreOptions::default()
    };
    let Ok(mut store) = Store::open_with(&path, &options) else {
        return;
    };
    read_guarded(&store);
    let _ = store.stats();
    if image.flags & flag::APPEND != 0 {
        let codec = Codec::ALL[image.journal.len() % 4];
        let record = vec![image.flags; 700];
        let options = AppendOptions {
            codec,
            durable: false,
            ..AppendOptions::default()
        };
        let _ = store.append(&[&record, b"x"], &options);
        read_guarded(&store);
    }
    if image.flags & flag::DELETE != 0 && !store.is_empty() {
        let _ = store.delete(&[0]);
        read_guarded(&store);
    }
    if image.flags & flag::COMPACT != 0 && store.len() <= MAX_WHOLE_STORE_LENGTH as usize {
        let _ = store.compact();
        read_guarded(&store);
        let _ = store.verify();
    }
    drop(store);
    // Whatever happened, the files still open (or are refused) cleanly.
    if let Ok(store) = Store::open_with(&path, &options) {
        read_guarded(&store);
    }
});
