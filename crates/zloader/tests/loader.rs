//! The loader against a direct gather of the sampler's indices.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zloader::{Layout, Loader, LoaderError, LoaderOptions, Stream};
use zrecord::{AppendOptions, Codec, Store};
use zsampler::{Mode, Sampler};

const N: usize = 1000;

/// A store of `N` records of `len` bytes; record `i` is a function of `i`
/// and `salt`.
fn store(dir: &std::path::Path, name: &str, len: usize, salt: u8) -> Arc<Store> {
    let store = Store::open(dir.join(name)).unwrap();
    let bytes: Vec<u8> = (0..N * len)
        .map(|b| ((b / len) as u8).wrapping_mul(31) ^ (b % len) as u8 ^ salt)
        .collect();
    let options = AppendOptions {
        codec: Codec::Flate,
        durable: false,
        ..AppendOptions::default()
    };
    store.append_fixed(&bytes, N, len, &options).unwrap();
    Arc::new(store)
}

fn streams(dir: &std::path::Path) -> Vec<Stream> {
    vec![
        Stream::new(store(dir, "data.zr", 48, 0), 48),
        Stream::new(store(dir, "label.zr", 8, 0x5a), 8),
    ]
}

fn options(num_workers: usize, prefetch: usize) -> LoaderOptions {
    LoaderOptions {
        num_workers,
        prefetch,
        ..LoaderOptions::default()
    }
}

#[test]
fn batches_come_in_sampler_order_for_any_worker_count() {
    let dir = tempfile::tempdir().unwrap();
    let streams = streams(dir.path());
    let sampler = Sampler::new(N as u64, 64, Mode::Shuffle, 7).unwrap();
    let mut runs = Vec::new();
    for workers in [1, 4] {
        let loader = Loader::new(streams.clone(), sampler.clone(), options(workers, 3)).unwrap();
        let batches: Vec<_> = (0..40).map(|_| loader.next().unwrap()).collect();
        loader.close();
        runs.push(batches);
    }
    assert_eq!(runs[0], runs[1]);
    for (step, batch) in runs[0].iter().enumerate() {
        assert_eq!(batch.step, step as u64);
        assert_eq!(batch.indices, sampler.batch(step as u64));
        for (stream, buffer) in streams.iter().zip(&batch.buffers) {
            let Layout::Fixed(record_len) = stream.layout else {
                unreachable!()
            };
            let mut direct = vec![0; batch.indices.len() * record_len];
            stream.stores[0]
                .gather_exact(&batch.indices, &mut direct, record_len)
                .unwrap();
            assert_eq!(buffer, &direct);
        }
        assert_eq!(batch.lengths, [None, None]);
    }
}

#[test]
fn starts_at_the_samplers_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut sampler = Sampler::new(N as u64, 10, Mode::Iid, 1).unwrap();
    sampler.seek(123);
    let loader = Loader::new(streams(dir.path()), sampler.clone(), options(2, 2)).unwrap();
    assert_eq!(loader.next_step(), 123);
    let batch = loader.next().unwrap();
    assert_eq!(batch.step, 123);
    assert_eq!(batch.indices, sampler.batch(123));
    std::thread::sleep(Duration::from_millis(20)); // the workers run ahead
    assert_eq!(loader.next_step(), 124);
}

#[test]
fn close_is_prompt_with_a_full_window_and_wakes_a_waiting_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let sampler = Sampler::new(N as u64, 32, Mode::Iid, 3).unwrap();
    let loader = Arc::new(Loader::new(streams(dir.path()), sampler, options(4, 2)).unwrap());
    loader.next().unwrap();
    std::thread::sleep(Duration::from_millis(50)); // let the window fill
    let started = Instant::now();
    loader.close();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(loader.is_closed());
    assert!(matches!(loader.next(), Err(LoaderError::Closed)));
    assert!(matches!(
        loader.next_timeout(Duration::from_millis(1)),
        Err(LoaderError::Closed)
    ));
    loader.close(); // idempotent
}

#[test]
fn dropping_a_loader_releases_its_stores() {
    let dir = tempfile::tempdir().unwrap();
    let streams = streams(dir.path());
    let sampler = Sampler::new(N as u64, 16, Mode::Sequential, 0).unwrap();
    let loader = Loader::new(streams.clone(), sampler, options(3, 2)).unwrap();
    loader.next().unwrap();
    drop(loader);
    // Only the test's own handles are left: the workers are gone.
    for s in &streams {
        assert_eq!(Arc::strong_count(&s.stores[0]), 1);
    }
}

#[test]
fn a_gather_error_reaches_the_consumer_at_its_step() {
    let dir = tempfile::tempdir().unwrap();
    // Records of 48 bytes are not samples of a 40-byte stream.
    let streams = vec![Stream::new(store(dir.path(), "x.zr", 48, 0), 40)];
    let sampler = Sampler::new(N as u64, 4, Mode::Sequential, 0).unwrap();
    let loader = Loader::new(streams, sampler, options(2, 2)).unwrap();
    match loader.next() {
        Err(LoaderError::Gather {
            step: 0,
            stream: 0,
            source: zrecord::Error::InvalidArgument { .. },
        }) => {}
        other => panic!("expected a gather error, got {other:?}"),
    }
    // The failed step counts as delivered; the next one is step 1.
    assert_eq!(loader.next_step(), 1);
    assert!(matches!(
        loader.next(),
        Err(LoaderError::Gather { step: 1, .. })
    ));
}

#[test]
fn bad_configurations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sampler = Sampler::new(N as u64, 4, Mode::Sequential, 0).unwrap();
    let s = streams(dir.path());
    for (streams, opts) in [
        (vec![], options(1, 1)),
        (s.clone(), options(0, 1)),
        (s.clone(), options(1, 0)),
    ] {
        assert!(matches!(
            Loader::new(streams, sampler.clone(), opts),
            Err(LoaderError::InvalidArgument(_))
        ));
    }
    let long = Sampler::new(N as u64 + 1, 4, Mode::Sequential, 0).unwrap();
    assert!(matches!(
        Loader::new(s, long, options(1, 1)),
        Err(LoaderError::StreamTooShort {
            stream: 0,
            len,
            ..
        }) if len == N as u64
    ));
}

/// A store of `N` records; record `i` is `i % 17` bytes, each `i as u8`.
fn ragged_store(dir: &std::path::Path) -> Arc<Store> {
    let store = Store::open(dir.join("ragged.zr")).unwrap();
    let lens: Vec<u32> = (0..N as u32).map(|i| i % 17).collect();
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        offsets.push(bytes.len() as u64);
        bytes.extend(std::iter::repeat_n(i as u8, len as usize));
    }
    store
        .append_ragged(&bytes, &offsets, &lens, &AppendOptions::default())
        .unwrap();
    Arc::new(store)
}

#[test]
fn ragged_streams_come_packed_with_their_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let streams = vec![
        Stream::new(store(dir.path(), "data.zr", 48, 0), 48),
        Stream::ragged(ragged_store(dir.path())),
    ];
    let sampler = Sampler::new(N as u64, 32, Mode::Shuffle, 9).unwrap();
    let loader = Loader::new(streams, sampler, options(2, 2)).unwrap();
    for _ in 0..10 {
        let batch = loader.next().unwrap();
        assert_eq!(batch.lengths[0], None);
        let lengths = batch.lengths[1].as_ref().unwrap();
        let mut expected = Vec::new();
        for (&i, &len) in batch.indices.iter().zip(lengths) {
            assert_eq!(len as u64, i % 17);
            expected.extend(std::iter::repeat_n(i as u8, len as usize));
        }
        assert_eq!(batch.buffers[1], expected);
    }
}

#[test]
fn shards_of_a_step_together_are_the_unsharded_batch() {
    let dir = tempfile::tempdir().unwrap();
    let streams = streams(dir.path());
    let global = Sampler::new(N as u64, 24, Mode::Iid, 4).unwrap();
    let whole = Loader::new(streams.clone(), global.clone(), options(2, 2)).unwrap();
    let parts: Vec<Loader> = (0..3)
        .map(|i| {
            let shard = global.clone().with_shard(i, 3).unwrap();
            Loader::new(streams.clone(), shard, options(1, 2)).unwrap()
        })
        .collect();
    for _ in 0..5 {
        let batch = whole.next().unwrap();
        let shards: Vec<_> = parts.iter().map(|l| l.next().unwrap()).collect();
        let indices: Vec<u64> = shards.iter().flat_map(|b| b.indices.clone()).collect();
        assert_eq!(indices, batch.indices);
        for stream in 0..2 {
            let bytes: Vec<u8> = shards
                .iter()
                .flat_map(|b| b.buffers[stream].to_vec())
                .collect();
            assert_eq!(batch.buffers[stream], bytes);
        }
    }
}

#[test]
fn records_shorter_than_a_streams_samples_are_refused_not_padded() {
    let dir = tempfile::tempdir().unwrap();
    let streams = vec![Stream::new(store(dir.path(), "x.zr", 32, 0), 40)];
    let sampler = Sampler::new(N as u64, 4, Mode::Sequential, 0).unwrap();
    let loader = Loader::new(streams, sampler, options(1, 1)).unwrap();
    match loader.next() {
        Err(LoaderError::Gather {
            source: zrecord::Error::InvalidArgument { reason, .. },
            ..
        }) => assert!(reason.contains("record 0 is 32 bytes"), "{reason}"),
        other => panic!("expected the short record refused, got {other:?}"),
    }
}
