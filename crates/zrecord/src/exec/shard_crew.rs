//! The shard crew: helper threads that split one gather across the cores
//! with a hand-off measured in microseconds.
//!
//! A batch takes a few hundred microseconds to copy. Handing half of it to
//! a sleeping rayon pool and blocking until it is done cost about 100 µs per
//! batch (two futex wake-ups; `bench/gather_micro.py` under `perf`,
//! bench/README.md, "Sharding"), so a second core bought little. The crew
//! differs in three ways:
//!
//! - the caller works too: participants claim shards from one atomic counter,
//!   so a helper that is slow to wake only means the caller claims more;
//! - a helper that has just finished keeps watching for the next batch for
//!   [`SPIN`] before it parks, which covers the gap between back-to-back
//!   batches of a training loop;
//! - one batch at a time: a caller that finds the crew busy (another thread
//!   splitting its batch) runs its shards itself, as the loader's workers do
//!   when they already keep every core busy.
//!
//! Like [`crate::exec::thread_pool`], the crew is a
//! [`ProcessLocal`](crate::exec::process_local::ProcessLocal): it belongs to
//! the process that started it, and a forked child starts its own.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::exec::process_local::ProcessLocal;
use crate::exec::thread_pool::workers;

/// How long an idle helper keeps looking for work before it parks. Longer
/// than the gap between two batches of a loop that gathers and hands the
/// batch on; short enough that an idle process gives its cores back at once.
const SPIN: Duration = Duration::from_micros(200);

/// Most shards one batch is split into. The claim word holds the shard
/// count in 16 bits, so the bound must stay below 2^16; 64 gives two shards
/// (`SHARDS_PER_PARTICIPANT` in `ops/gather.rs`) to each of 32 participants,
/// while every shard is claimed with a compare-exchange on one shared cache
/// line, so splitting a batch much finer costs more in claims than it gains.
pub(crate) const MAX_SHARDS: usize = 64;

/// `spin_loop` hints an idle helper makes before it starts yielding its
/// core. A hint pauses for a few to about 150 cycles depending on the CPU,
/// so 128 of them last from well under a microsecond to about six: enough to
/// catch a batch published right after the last one without a system call.
/// The rest of the [`SPIN`] window is spent in `yield_now`, so that a helper
/// sharing its core with runnable threads lets them go first. Chosen by this
/// reasoning, not tuned; what the measurements depend on is [`SPIN`]
/// (bench/README.md, "Sharding").
const HELPER_SPINS: u32 = 128;

/// `spin_loop` hints a participant makes, waiting for shards that others
/// claimed (a caller for its batch's last shards, any participant for the
/// first step of [`run_shards_in_two_steps`]), before it yields: roughly 1
/// to 50 µs depending on the CPU, about the time of one shard's least work
/// (48 KiB of copy-equivalent work, `MIN_SHARD_BYTES` in `ops/gather.rs`,
/// some 5 µs at 10 GB/s). A participant that takes longer has likely lost
/// its core, and yielding gives the core back to it. Chosen by this
/// reasoning, not tuned.
const WAIT_SPINS: u32 = 1024;

/// One batch being split: what each shard runs, and what went wrong.
struct Task<'a> {
    run: &'a (dyn Fn(usize) + Sync),
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Task<'_> {
    fn run_shard(&self, shard: usize) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (self.run)(shard))) {
            self.panic
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(payload);
        }
    }
}

/// The claim word: batch generation (32 bits) | next shard (16) | shards (16).
fn pack(generation: u32, next: usize, shards: usize) -> u64 {
    (generation as u64) << 32 | (next as u64) << 16 | shards as u64
}

fn unpack(word: u64) -> (usize, usize) {
    ((word >> 16 & 0xffff) as usize, (word & 0xffff) as usize)
}

struct Helper {
    thread: OnceLock<Thread>,
    parked: AtomicBool,
}

struct Crew {
    /// Set while one caller's batch owns the crew.
    busy: AtomicBool,
    claim: AtomicU64,
    /// Shards of the current batch that have finished.
    done: AtomicU32,
    task: AtomicPtr<Task<'static>>,
    helpers: Vec<Helper>,
}

static CREW: ProcessLocal<Crew> = ProcessLocal::new();

/// The crew of the calling process, `helpers` threads besides the caller.
fn crew(helpers: usize) -> &'static Crew {
    CREW.get(
        || Crew {
            busy: AtomicBool::new(false),
            claim: AtomicU64::new(0),
            done: AtomicU32::new(0),
            task: AtomicPtr::new(std::ptr::null_mut()),
            helpers: (0..helpers)
                .map(|_| Helper {
                    thread: OnceLock::new(),
                    parked: AtomicBool::new(false),
                })
                .collect(),
        },
        |crew| {
            for i in 0..helpers {
                // A helper that cannot start never claims a shard; the
                // callers run its share.
                let _ = std::thread::Builder::new()
                    .name(format!("zrecord-shard-{i}"))
                    .spawn(move || crew.help(i));
            }
        },
    )
}

impl Crew {
    /// Claims and runs a shard of the current batch, if one is left to
    /// claim; returns false when none is.
    fn work(&self) -> bool {
        let word = self.claim.load(Ordering::Acquire);
        let (next, shards) = unpack(word);
        if next >= shards {
            return false;
        }
        if self
            .claim
            .compare_exchange_weak(word, word + (1 << 16), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return true; // lost the race; look again at once
        }
        // SAFETY: the claim succeeded for this batch, whose caller does not
        // return (and so keeps the task alive) until `done` counts this
        // shard, and publishes the task before the claim word.
        let task = unsafe { &*self.task.load(Ordering::Acquire) };
        task.run_shard(next);
        self.done.fetch_add(1, Ordering::Release);
        true
    }

    fn help(&self, index: usize) {
        let me = &self.helpers[index];
        // Before it can park, so that whoever sees it parked can wake it.
        let _ = me.thread.set(std::thread::current());
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.work() {
                idle_since = Instant::now();
                spins = 0;
                continue;
            }
            spins += 1;
            if spins < HELPER_SPINS {
                std::hint::spin_loop();
            } else if idle_since.elapsed() < SPIN {
                // Let any other runnable thread of this core go first.
                std::thread::yield_now();
            } else {
                me.parked.store(true, Ordering::SeqCst);
                // A batch published before `parked` was visible found no
                // one to wake: look once more before sleeping.
                let (next, shards) = unpack(self.claim.load(Ordering::SeqCst));
                if next >= shards {
                    std::thread::park();
                }
                me.parked.store(false, Ordering::SeqCst);
                idle_since = Instant::now();
                spins = 0;
            }
        }
    }
}

thread_local! {
    /// Set by [`gather_alone_on_this_thread`].
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

/// Makes every later gather of the calling thread run on this thread only,
/// never handing shards to the crew. For threads that are already as many
/// as the cores, such as a loader's workers: a crew helper beside them is
/// one thread more than the cores, and spinning for work it steals the
/// time of a worker.
pub fn gather_alone_on_this_thread() {
    ALONE.with(|alone| alone.set(true));
}

/// Threads that work on one batch: the caller and one helper for each other
/// worker of [`crate::exec::thread_pool`] (so `RAYON_NUM_THREADS` sizes both), or
/// the caller alone after [`gather_alone_on_this_thread`].
pub(crate) fn participants() -> usize {
    if ALONE.with(Cell::get) {
        1
    } else {
        gather_threads()
    }
}

/// How many threads one gather can use at most: the cores, or
/// `RAYON_NUM_THREADS` where it is set.
pub fn gather_threads() -> usize {
    workers()
}

/// Runs `run(0..shards)`, spread over the caller and the crew; returns when
/// every shard has finished. Every shard runs even if one panics; the first
/// panic is re-raised here once all are done.
pub(crate) fn run_shards(shards: usize, run: &(dyn Fn(usize) + Sync)) {
    let shards = shards.min(MAX_SHARDS);
    let task = Task {
        run,
        panic: Mutex::new(None),
    };
    let helpers = participants() - 1;
    match (helpers > 0 && shards > 1).then(|| crew(helpers)) {
        Some(crew) if crew.take() => {
            crew.split(&task, shards);
            crew.busy.store(false, Ordering::Release);
        }
        // One shard, no helpers, or another thread's batch has the crew.
        _ => (0..shards).for_each(|shard| task.run_shard(shard)),
    }
    if let Some(payload) = task.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
        resume_unwind(payload);
    }
}

impl Crew {
    /// Makes the crew this caller's for one batch, if no one else has it.
    fn take(&self) -> bool {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Publishes `task`, works on it with the helpers, and returns once all
    /// its shards are done and no helper can touch it any more.
    fn split(&self, task: &Task, shards: usize) {
        self.done.store(0, Ordering::Relaxed);
        self.task
            .store(task as *const Task as *mut Task<'static>, Ordering::Relaxed);
        let generation = (self.claim.load(Ordering::Relaxed) >> 32) as u32;
        self.claim.store(
            pack(generation.wrapping_add(1), 0, shards),
            Ordering::SeqCst,
        );
        for helper in &self.helpers {
            if helper.parked.swap(false, Ordering::SeqCst) {
                if let Some(thread) = helper.thread.get() {
                    thread.unpark();
                }
            }
        }
        while self.work() {}
        // What is left are shards that helpers claimed and are running now.
        wait_for(&self.done, shards as u32);
        self.task.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
}

/// Waits until `count` reaches `target`: a count of shards that others
/// claimed and are running now.
fn wait_for(count: &AtomicU32, target: u32) {
    let mut spins = 0u32;
    while count.load(Ordering::Acquire) < target {
        spins += 1;
        if spins < WAIT_SPINS {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Runs `first(0..firsts)`, then `then(0..thens)`, as one batch of
/// [`run_shards`]: no `then` shard starts before every `first` shard has
/// finished (or panicked). Shards are claimed in order, so whoever claims a
/// `then` shard finds every `first` shard claimed and waits only for those
/// still running: two steps for the price of one hand-off to the crew.
/// `firsts + thens` must not exceed [`MAX_SHARDS`].
pub(crate) fn run_shards_in_two_steps(
    firsts: usize,
    thens: usize,
    first: &(dyn Fn(usize) + Sync),
    then: &(dyn Fn(usize) + Sync),
) {
    assert!(
        firsts + thens <= MAX_SHARDS,
        "too many shards for one batch"
    );
    /// Counts a first shard as finished however it ends, so that a panic
    /// in one leaves no participant waiting for it.
    struct Finished<'a>(&'a AtomicU32);
    impl Drop for Finished<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Release);
        }
    }
    let finished = AtomicU32::new(0);
    run_shards(firsts + thens, &|shard| {
        if shard < firsts {
            let _finished = Finished(&finished);
            first(shard);
        } else {
            wait_for(&finished, firsts as u32);
            then(shard - firsts);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Runs `round(caller, round)` for `rounds` rounds on each of `callers`
    /// threads at once, so that some find the crew busy with another's.
    fn from_callers(callers: usize, rounds: usize, round: impl Fn(usize, usize) + Sync) {
        std::thread::scope(|s| {
            for caller in 0..callers {
                let round = &round;
                s.spawn(move || (0..rounds).for_each(|r| round(caller, r)));
            }
        });
    }

    /// Every shard runs exactly once per call, and the call returns only
    /// after all of them have, whether the caller got the crew or found it
    /// busy with another thread's batch.
    #[test]
    fn every_shard_runs_once_before_the_call_returns() {
        from_callers(4, 2000, |caller, round| {
            let shards = 1 + (caller + round) % 9;
            let runs: Vec<AtomicUsize> = (0..shards).map(|_| AtomicUsize::new(0)).collect();
            run_shards(shards, &|k| {
                if round % 7 == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
                runs[k].fetch_add(1, Ordering::Relaxed);
            });
            for (k, n) in runs.iter().enumerate() {
                let at = format!("caller {caller} round {round} shard {k}");
                assert_eq!(n.load(Ordering::Relaxed), 1, "{at}");
            }
        });
    }

    /// A batch that arrives after the helpers parked still completes.
    #[test]
    fn parked_helpers_are_woken_or_worked_around() {
        for _ in 0..20 {
            std::thread::sleep(SPIN * 3);
            let runs = AtomicUsize::new(0);
            run_shards(8, &|_| {
                runs.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(runs.load(Ordering::Relaxed), 8);
        }
    }

    /// A panicking shard reaches the caller, but only after the other shards
    /// (which may borrow the caller's stack) have finished.
    #[test]
    fn a_panic_in_a_shard_is_raised_after_all_shards_finish() {
        let finished = AtomicUsize::new(0);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            run_shards(6, &|k| {
                if k == 1 {
                    panic!("shard one fails");
                }
                std::thread::sleep(Duration::from_millis(2));
                finished.fetch_add(1, Ordering::SeqCst);
            })
        }));
        let payload = caught.expect_err("the panic must reach the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"shard one fails"));
        assert_eq!(finished.load(Ordering::SeqCst), 5);
        // And the crew is free for the next batch.
        let runs = AtomicUsize::new(0);
        run_shards(4, &|_| {
            runs.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 4);
    }

    /// No second-step shard starts before every first-step shard has
    /// finished, slow or panicking, from callers that get the crew or find
    /// it busy; the panic reaches the caller after every shard ran.
    #[test]
    fn the_second_step_waits_for_every_shard_of_the_first() {
        from_callers(3, 300, |caller, round| {
            let firsts = 1 + (caller + round) % 5;
            let finished = AtomicUsize::new(0);
            let early = AtomicUsize::new(0);
            let fails = round % 10 == 3;
            let first = |k: usize| {
                if k + 1 == firsts {
                    std::thread::sleep(Duration::from_micros(200));
                }
                finished.fetch_add(1, Ordering::SeqCst);
                if fails && k == 0 {
                    panic!("a first shard fails");
                }
            };
            let then = |_| {
                if finished.load(Ordering::SeqCst) < firsts {
                    early.fetch_add(1, Ordering::SeqCst);
                }
            };
            let caught = catch_unwind(AssertUnwindSafe(|| {
                run_shards_in_two_steps(firsts, 3, &first, &then)
            }));
            let at = format!("caller {caller} round {round}");
            assert_eq!(caught.is_err(), fails, "{at}");
            assert_eq!(early.load(Ordering::SeqCst), 0, "{at}");
        });
    }
}
