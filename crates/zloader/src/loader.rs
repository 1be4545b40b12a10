//! The loader: worker threads over a schedule, and their shutdown.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use zrecord::{BatchBuffer, Recycler};
use zsampler::{Mixture, Sampler};

use crate::batch::{Batch, Work};
use crate::error::{LoaderError, Result};
use crate::picker::Picker;
use crate::schedule::{Schedule, Taken};
use crate::stream::{Layout, Stream};

/// How many threads gather and how far ahead they may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderOptions {
    /// Worker threads, each gathering whole steps (at least 1). At most
    /// [`zrecord::gather_threads`] (the cores) are started: more only take
    /// turns on the cores, and each turn costs.
    pub num_workers: usize,
    /// Finished steps that may wait for the consumer (at least 1), beyond
    /// the step each worker is gathering: the workers run at most
    /// `prefetch + workers` steps ahead of the consumer, so a worker that
    /// finishes early never waits for a slower one. This bounds the
    /// loader's memory to that many batches.
    pub prefetch: usize,
    /// Whether big batch buffers of fixed-size and image streams are
    /// shared memory that other processes can map
    /// ([`zrecord::BatchBuffer::shared_fd`]): for batches handed to worker
    /// processes without a copy.
    pub shared_memory: bool,
    /// Batches the caller keeps alive besides the two with its consumer (a
    /// transform stage's steps in flight). The recycler keeps room for
    /// them too: without it, each came back to a full list, was freed, and
    /// a later batch needed fresh memory (with transform processes, a new
    /// shared buffer every hundred or so batches).
    pub held: usize,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            num_workers: 4,
            prefetch: 4,
            shared_memory: false,
            held: 0,
        }
    }
}

/// An ordered stream of gathered batches: endless, or the steps of the
/// sampler's finite pass ([`Sampler::with_epochs`]).
///
/// Starts at the sampler's current step ([`Sampler::step`]) and delivers
/// steps one by one, in order, from [`Loader::next`]; after the last step
/// of a pass, `next` fails with [`LoaderError::PassEnded`]. Dropping the loader
/// closes it, which stops and joins its threads.
///
/// # Fork
/// A loader belongs to the process that created it. In a forked child its
/// threads do not exist: `next` fails with [`LoaderError::ForeignProcess`]
/// and `close` and drop do nothing (they neither lock nor join), so a child
/// can drop an inherited loader safely and create a new one.
pub struct Loader {
    schedule: Arc<Schedule>,
    recycler: Arc<Recycler>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    owner: u32,
}

impl Loader {
    /// Starts `options.num_workers` threads (at most one per core)
    /// gathering `streams` at the sampler's steps, from its current step on.
    pub fn new(streams: Vec<Stream>, sampler: Sampler, options: LoaderOptions) -> Result<Loader> {
        let first = sampler.step();
        Loader::start(streams, sampler.into(), first, options)
    }

    /// [`Loader::new`] over a mixture, from step `first`: every stream
    /// holds one store per source, in the mixture's source order, and the
    /// batches say each sample's source ([`Batch::sources`]).
    pub fn mixed(
        streams: Vec<Stream>,
        mixture: Mixture,
        first: u64,
        options: LoaderOptions,
    ) -> Result<Loader> {
        Loader::start(streams, mixture.into(), first, options)
    }

    fn start(
        streams: Vec<Stream>,
        picker: Picker,
        first: u64,
        options: LoaderOptions,
    ) -> Result<Loader> {
        if streams.is_empty() {
            return Err(LoaderError::InvalidArgument(
                "a loader needs at least one stream".into(),
            ));
        }
        if options.num_workers == 0 {
            return Err(LoaderError::InvalidArgument(
                "num_workers must be at least 1".into(),
            ));
        }
        if options.prefetch == 0 {
            return Err(LoaderError::InvalidArgument(
                "prefetch must be at least 1".into(),
            ));
        }
        let lengths = picker.lengths();
        for (stream, s) in streams.iter().enumerate() {
            if s.stores.len() != lengths.len() {
                return Err(LoaderError::InvalidArgument(format!(
                    "stream {stream} has {} stores for {} sources",
                    s.stores.len(),
                    lengths.len()
                )));
            }
            for (store, &length) in s.stores.iter().zip(&lengths) {
                if store.count() < length {
                    return Err(LoaderError::StreamTooShort {
                        stream,
                        len: store.count(),
                        length,
                    });
                }
            }
            let sample_len = match &s.layout {
                Layout::Fixed(record_len) => Some(*record_len),
                Layout::Image(pipeline, _) => {
                    pipeline.validate().map_err(|e| {
                        LoaderError::InvalidArgument(format!("stream {stream}: {e}"))
                    })?;
                    Some(pipeline.sample_len())
                }
                Layout::Ragged => None,
            };
            if let Some(record_len) = sample_len {
                let bytes = record_len.checked_mul(picker.local_batch_size());
                if bytes.is_none_or(|b| b > isize::MAX as usize) {
                    return Err(LoaderError::InvalidArgument(format!(
                        "stream {stream}: a batch of {} records of {record_len} bytes is too large",
                        picker.local_batch_size(),
                    )));
                }
            }
        }
        // More workers than cores is slower: with four workers on two cores,
        // `bench/loader_micro.py A raw 4x4 2x4` gathered at about 0.8× the
        // speed of two workers, because the same copies took more CPU time
        // on threads taking turns on a core (bench/README.md, "Workers and
        // cores").
        let cores = zrecord::gather_threads();
        let workers = options.num_workers.min(cores);
        // Workers that fill the cores gather alone; fewer leave cores over
        // for the shard crew to split their batches across.
        let alone = workers >= cores;
        let ahead = options.prefetch.saturating_add(workers);
        let recycler = recycler_for(
            &streams,
            picker.local_batch_size(),
            ahead.saturating_add(options.held),
            options.shared_memory,
        );
        let schedule = Arc::new(Schedule::new(first, ahead as u64, picker.steps()));
        let work = Arc::new(Work {
            store_of: streams.iter().map(Stream::first_sharing).collect(),
            streams,
            picker,
            recycler: recycler.clone(),
        });
        let loader = Loader {
            schedule,
            recycler,
            workers: Mutex::new(Vec::with_capacity(workers)),
            owner: std::process::id(),
        };
        for i in 0..workers {
            let (schedule, work) = (loader.schedule.clone(), work.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("zloader-{i}"))
                .spawn(move || worker(&schedule, &work, alone));
            match spawned {
                Ok(handle) => loader.lock_workers().push(handle),
                // Dropping `loader` stops the workers already started.
                Err(e) => return Err(LoaderError::Spawn(e)),
            }
        }
        Ok(loader)
    }

    fn lock_workers(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_process(&self) -> Result<()> {
        let current = std::process::id();
        if current != self.owner {
            return Err(LoaderError::ForeignProcess {
                owner: self.owner,
                current,
            });
        }
        Ok(())
    }

    /// The next batch, in step order; waits for it.
    pub fn next(&self) -> Result<Batch> {
        self.check_process()?;
        match self.schedule.take(None) {
            Taken::Step(result) => result,
            Taken::Closed => Err(LoaderError::Closed),
            Taken::Ended => Err(self.ended()),
            Taken::TimedOut => unreachable!("a wait without a deadline does not time out"),
        }
    }

    /// The next batch, in step order, or `None` when it is not ready within
    /// `timeout`. Lets a caller wake up regularly (to check for signals)
    /// without losing its place.
    pub fn next_timeout(&self, timeout: Duration) -> Result<Option<Batch>> {
        self.check_process()?;
        match self.schedule.take(Some(timeout)) {
            Taken::Step(result) => result.map(Some),
            Taken::Closed => Err(LoaderError::Closed),
            Taken::Ended => Err(self.ended()),
            Taken::TimedOut => Ok(None),
        }
    }

    fn ended(&self) -> LoaderError {
        LoaderError::PassEnded {
            steps: self.schedule.end().unwrap_or(u64::MAX),
        }
    }

    /// Stops the workers and waits for them; finished batches are dropped,
    /// and so is the memory kept for recycling (batches still held by the
    /// caller are freed when they are dropped). Returns once every worker
    /// has exited, which takes at most the time of the gathers in flight.
    /// Idempotent; a no-op in a forked child.
    pub fn close(&self) {
        if self.check_process().is_err() {
            return;
        }
        self.schedule.close();
        let workers = std::mem::take(&mut *self.lock_workers());
        for handle in workers {
            // A worker catches its own panics, so join only fails if the
            // catch itself failed; there is nothing left to clean up then.
            let _ = handle.join();
        }
        self.recycler.close();
    }

    /// The step of the batch (or error) that the next [`Loader::next`]
    /// returns: a step whose gather failed counts as delivered once its
    /// error has been returned. This is the consumer's position, not the
    /// workers', which run up to `prefetch + workers` steps ahead (see
    /// [`LoaderOptions::prefetch`]).
    pub fn next_step(&self) -> u64 {
        self.schedule.next_take()
    }

    /// Whether [`Loader::close`] has run.
    pub fn is_closed(&self) -> bool {
        self.check_process().is_err() || self.schedule.is_closed()
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        if self.check_process().is_err() {
            // The parent's threads do not exist here and its locks may have
            // been copied mid-use: touch nothing, join nothing.
            let workers = std::mem::take(self.workers.get_mut().unwrap_or_else(|e| e.into_inner()));
            std::mem::forget(workers);
            std::mem::forget(self.recycler.clone());
            return;
        }
        self.close();
    }
}

/// The recycler of a loader's fixed-size batches: it keeps as many of each
/// stream's batches as can be alive at once (the `ahead` steps in flight,
/// finished or held by the caller, and two with the consumer: the bound of
/// the loader's memory), so that after the first few steps no batch needs
/// fresh memory.
fn recycler_for(streams: &[Stream], batch: usize, ahead: usize, shared: bool) -> Arc<Recycler> {
    let alive = ahead.saturating_add(2);
    let bytes = streams
        .iter()
        .filter_map(|s| match &s.layout {
            Layout::Fixed(record_len) => BatchBuffer::capacity_for(record_len * batch),
            Layout::Image(pipeline, _) => BatchBuffer::capacity_for(pipeline.sample_len() * batch),
            Layout::Ragged => None,
        })
        .fold(0usize, usize::saturating_add);
    let (per_class, max_bytes) = (
        alive.saturating_mul(streams.len()),
        alive.saturating_mul(bytes),
    );
    match shared {
        true => Recycler::new_shared(per_class, max_bytes),
        false => Recycler::new(per_class, max_bytes),
    }
}

fn worker(schedule: &Schedule, work: &Arc<Work>, alone: bool) {
    if alone {
        zrecord::gather_alone_on_this_thread();
    }
    while let Some(step) = schedule.claim() {
        let result = catch_unwind(AssertUnwindSafe(|| work.gather(step)))
            .unwrap_or(Err(LoaderError::WorkerPanicked { step }));
        schedule.finish(step, result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use zrecord::{AppendOptions, RecordSource, Store};
    use zsampler::{LastBatch, MixtureSource, Mode, Proportions};

    /// Whether `done` holds within 10 s, looked at every millisecond: the
    /// loader's workers reach a state in their own time.
    fn within_10_s(mut done: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    fn store_of(dir: &std::path::Path, n: usize, len: usize) -> Arc<Store> {
        let store = Store::open(dir.join("data.zr")).unwrap();
        let records: Vec<u8> = (0..n * len).map(|b| (b % 251) as u8).collect();
        store
            .append_fixed(&records, n, len, &AppendOptions::default())
            .unwrap();
        Arc::new(store)
    }

    /// Asking for more workers than cores starts one per core; the workers
    /// then run `prefetch` steps ahead beyond the ones they gather, and no
    /// further.
    #[test]
    fn workers_are_at_most_the_cores_and_run_prefetch_steps_beyond_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_of(dir.path(), 100, 64);
        let cores = zrecord::gather_threads();
        let options = LoaderOptions {
            num_workers: cores + 3,
            prefetch: 3,
            ..LoaderOptions::default()
        };
        let sampler = Sampler::new(100, 10, Mode::Iid, 7).unwrap();
        let loader = Loader::new(vec![Stream::new(store, 64)], sampler, options).unwrap();
        assert_eq!(loader.lock_workers().len(), cores);

        drop(loader.next().unwrap());
        let ahead = (options.prefetch + cores) as u64;
        let claimed_ahead = || loader.schedule.next_claim() - loader.next_step();
        within_10_s(|| claimed_ahead() >= ahead);
        assert_eq!(claimed_ahead(), ahead, "the window fills");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(claimed_ahead(), ahead, "and holds");
    }

    /// A loader's batches go back to its own recycler, which keeps no more
    /// than the loader can have alive, and closing the loader gives that
    /// memory back, including batches the caller drops later.
    #[test]
    fn a_loader_recycles_its_batches_and_frees_them_when_closed() {
        let dir = tempfile::tempdir().unwrap();
        let (n, len, batch) = (1000, 1024, 100);
        let store = store_of(dir.path(), n, len);
        let sampler = Sampler::new(n as u64, batch, Mode::Iid, 7).unwrap();
        // One worker, one step of prefetch: two steps ahead of the test the
        // worker waits, so of the batches the test drops while it holds
        // some, at most one misses the try_locked list (the worker taking
        // a buffer at that moment) and the others stay idle.
        let options = LoaderOptions {
            num_workers: 1,
            prefetch: 1,
            ..LoaderOptions::default()
        };
        let loader = Loader::new(vec![Stream::new(store, len)], sampler, options).unwrap();
        let capacity = BatchBuffer::capacity_for(len * batch).unwrap();
        let alive = options.prefetch + options.num_workers + 2;

        for _ in 0..50 {
            drop(loader.next().unwrap());
        }
        let mut held: Vec<Batch> = (0..4).map(|_| loader.next().unwrap()).collect();
        let kept = held.pop().unwrap();
        drop(held);
        let idle = loader.recycler.idle_bytes();
        assert!(idle >= capacity, "dropped batches wait to be reused");
        assert!(idle <= alive * capacity, "{idle} bytes idle");

        loader.close();
        assert_eq!(
            loader.recycler.idle_bytes(),
            0,
            "closing frees the idle batches"
        );
        drop(kept);
        assert_eq!(
            loader.recycler.idle_bytes(),
            0,
            "and those dropped after it"
        );
    }

    /// Batches a caller holds beyond its two (`held`: a transform stage's
    /// steps in flight) find room in the recycler when they come back,
    /// instead of being freed for later batches to need fresh memory.
    #[test]
    fn batches_the_caller_holds_are_recycled_too() {
        let dir = tempfile::tempdir().unwrap();
        let (n, len, batch) = (1000, 1024, 100);
        let store = store_of(dir.path(), n, len);
        let capacity = BatchBuffer::capacity_for(len * batch).unwrap();
        for held in [0, 6] {
            let sampler = Sampler::new(n as u64, batch, Mode::Iid, 7).unwrap();
            // As above: one worker, one step of prefetch.
            let options = LoaderOptions {
                num_workers: 1,
                prefetch: 1,
                held,
                ..LoaderOptions::default()
            };
            let loader =
                Loader::new(vec![Stream::new(store.clone(), len)], sampler, options).unwrap();
            let alive = options.prefetch + options.num_workers + 2;
            // The caller holds `alive + 6` batches, then drops all but one.
            let mut holding: Vec<Batch> = (0..alive + 6).map(|_| loader.next().unwrap()).collect();
            let kept = holding.pop().unwrap();
            // Dropped once the worker waits with its window full: until
            // then it takes memory for the steps it gathers.
            assert!(
                within_10_s(|| loader.schedule.is_full_and_finished()),
                "the window fills"
            );
            drop(holding);
            let idle = loader.recycler.idle_bytes() / capacity;
            if held == 0 {
                assert!(idle <= alive, "{idle} batches idle with nothing held");
            } else {
                // All that were dropped.
                assert_eq!(idle, alive + 6 - 1, "batches idle, {held} held");
            }
            drop(kept);
            loader.close();
        }
    }

    /// A finite pass delivers its steps, the last one short or padded, and
    /// then ends, for a loader started at step 0 or in the middle.
    #[test]
    fn a_finite_pass_ends_after_its_last_step() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_of(dir.path(), 10, 8);
        for (last, first, lens) in [
            (LastBatch::Partial, 0, vec![(4, 4), (4, 4), (2, 2)]),
            (LastBatch::Pad, 1, vec![(4, 4), (4, 2)]),
        ] {
            let mut sampler = Sampler::new(10, 4, Mode::Sequential, 0)
                .unwrap()
                .with_epochs(1, last)
                .unwrap();
            sampler.seek(first);
            let loader = Loader::new(
                vec![Stream::new(store.clone(), 8)],
                sampler,
                LoaderOptions::default(),
            )
            .unwrap();
            let got: Vec<_> = lens
                .iter()
                .map(|_| {
                    let batch = loader.next().unwrap();
                    (batch.indices.len(), batch.valid)
                })
                .collect();
            assert_eq!(got, lens);
            assert!(matches!(
                loader.next(),
                Err(LoaderError::PassEnded { steps: 3 })
            ));
            assert_eq!(loader.next_step(), 3);
        }
    }

    fn shuffled(lengths: &[u64]) -> Vec<MixtureSource> {
        lengths
            .iter()
            .map(|&length| MixtureSource {
                length,
                mode: Mode::Shuffle,
            })
            .collect()
    }

    /// Sources that share a store (one handle) are gathered together, and
    /// every slot still holds its own sample's record.
    #[test]
    fn sources_sharing_a_store_read_their_own_samples() {
        let dir = tempfile::tempdir().unwrap();
        let store = |name: &str, tag: u8, n: usize| {
            let store = Store::open(dir.path().join(name)).unwrap();
            let records: Vec<u8> = (0..n).flat_map(|i| [tag, i as u8]).collect();
            store
                .append_fixed(&records, n, 2, &AppendOptions::default())
                .unwrap();
            Arc::new(store)
        };
        let (shared, own) = (store("shared.zr", 7, 40), store("own.zr", 9, 5));
        let stores: Vec<Arc<dyn RecordSource>> = vec![shared.clone(), own, shared];
        let stream = Stream::mixed(stores, Layout::Fixed(2));
        assert_eq!(stream.first_sharing(), [0, 1, 0]);
        let sources = shuffled(&[40, 5, 30]);
        let mixture =
            zsampler::Mixture::new(&sources, &[0.4, 0.2, 0.4], 20, 1, Proportions::Exact).unwrap();
        let loader =
            Loader::mixed(vec![stream], mixture.clone(), 0, LoaderOptions::default()).unwrap();
        for step in 0..10 {
            let batch = loader.next().unwrap();
            let want = mixture.batch(step);
            for (k, (&j, &i)) in want.sources.iter().zip(&want.indices).enumerate() {
                let tag = if j == 1 { 9 } else { 7 };
                assert_eq!(batch.buffers[0][2 * k..2 * k + 2], [tag, i as u8]);
            }
        }
    }

    /// A mixture's batch holds, in every slot, the record of that sample's
    /// index in that sample's source, for fixed and ragged streams.
    #[test]
    fn a_mixture_reads_each_sample_from_its_own_source() {
        let dir = tempfile::tempdir().unwrap();
        let mut fixed: Vec<Arc<dyn RecordSource>> = Vec::new();
        let mut ragged: Vec<Arc<dyn RecordSource>> = Vec::new();
        for (j, n) in [(0u8, 7usize), (1, 50), (2, 3)] {
            let store = Store::open(dir.path().join(format!("fixed{j}.zr"))).unwrap();
            let records: Vec<u8> = (0..n).flat_map(|i| [j, i as u8]).collect();
            store
                .append_fixed(&records, n, 2, &AppendOptions::default())
                .unwrap();
            fixed.push(Arc::new(store));
            let store = Store::open(dir.path().join(format!("ragged{j}.zr"))).unwrap();
            let items: Vec<Vec<u8>> = (0..n).map(|i| vec![j; i % 4]).collect();
            let slices: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
            store.append(&slices, &AppendOptions::default()).unwrap();
            ragged.push(Arc::new(store));
        }
        let sources = shuffled(&[7, 50, 3]);
        let mixture =
            zsampler::Mixture::new(&sources, &[0.5, 0.3, 0.2], 16, 5, Proportions::Drawn).unwrap();
        let streams = vec![
            Stream::mixed(fixed, Layout::Fixed(2)),
            Stream::mixed(ragged, Layout::Ragged),
        ];
        let loader = Loader::mixed(streams, mixture.clone(), 3, LoaderOptions::default()).unwrap();
        for step in 3..20 {
            let batch = loader.next().unwrap();
            let want = mixture.batch(step);
            assert_eq!(batch.sources.as_deref(), Some(&want.sources[..]));
            assert_eq!(batch.indices, want.indices);
            let lengths = batch.lengths[1].as_ref().unwrap();
            let mut at = 0;
            for (k, (&j, &i)) in want.sources.iter().zip(&want.indices).enumerate() {
                assert_eq!(batch.buffers[0][2 * k..2 * k + 2], [j as u8, i as u8]);
                let len = lengths[k] as usize;
                assert_eq!(len, i as usize % 4);
                assert!(batch.buffers[1][at..at + len].iter().all(|&b| b == j as u8));
                at += len;
            }
        }
    }
}
