//! The ordered, bounded window of steps between the workers and the consumer.
//!
//! Workers claim steps in increasing order; a step may be claimed only while
//! it lies within `window` steps of the next one the consumer will take, so
//! at most `window` steps are in flight or finished at once. Finished steps
//! wait in a map keyed by step and leave it strictly in step order. A
//! schedule with an end (a finite pass) claims and delivers no step past it.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::batch::Batch;
use crate::error::Result;

pub(crate) struct Schedule {
    state: Mutex<State>,
    /// Signalled when the window moves (a step was taken) or on close.
    space: Condvar,
    /// Signalled when a step finishes or on close.
    ready: Condvar,
    window: u64,
    /// The first step not to run (`None`: endless).
    end: Option<u64>,
}

struct State {
    next_claim: u64,
    next_take: u64,
    done: BTreeMap<u64, Result<Batch>>,
    closed: bool,
}

/// What [`Schedule::take`] found.
pub(crate) enum Taken {
    Step(Result<Batch>),
    Closed,
    TimedOut,
    /// Every step before the end was taken.
    Ended,
}

impl Schedule {
    /// A schedule from step `first` up to `end` (exclusive; `None`:
    /// endless), with `window >= 1`.
    pub(crate) fn new(first: u64, window: u64, end: Option<u64>) -> Schedule {
        Schedule {
            state: Mutex::new(State {
                next_claim: first,
                next_take: first,
                done: BTreeMap::new(),
                closed: false,
            }),
            space: Condvar::new(),
            ready: Condvar::new(),
            window,
            end,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated
        // (every update is a single field or map operation), so poisoning is
        // ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next step for a worker to gather; waits while the window is full.
    /// `None` once the schedule is closed.
    pub(crate) fn claim(&self) -> Option<u64> {
        let mut state = self.lock();
        loop {
            if state.closed || self.end.is_some_and(|end| state.next_claim >= end) {
                return None;
            }
            if state.next_claim - state.next_take < self.window {
                let step = state.next_claim;
                state.next_claim += 1;
                return Some(step);
            }
            state = self.space.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Hands in the result of a claimed step.
    pub(crate) fn finish(&self, step: u64, result: Result<Batch>) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        state.done.insert(step, result);
        if step == state.next_take {
            self.ready.notify_all();
        }
    }

    /// The next step in order, waiting for it at most `timeout` (forever when
    /// `None`).
    pub(crate) fn take(&self, timeout: Option<Duration>) -> Taken {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut state = self.lock();
        loop {
            if state.closed {
                return Taken::Closed;
            }
            let step = state.next_take;
            if self.end.is_some_and(|end| step >= end) {
                return Taken::Ended;
            }
            if let Some(result) = state.done.remove(&step) {
                state.next_take += 1;
                self.space.notify_all();
                return Taken::Step(result);
            }
            state = match deadline {
                None => self.ready.wait(state).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Taken::TimedOut;
                    }
                    self.ready
                        .wait_timeout(state, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    /// Stops the schedule: claims and takes return at once from now on, and
    /// finished steps are dropped.
    pub(crate) fn close(&self) {
        let done = {
            let mut state = self.lock();
            state.closed = true;
            std::mem::take(&mut state.done)
        };
        self.space.notify_all();
        self.ready.notify_all();
        // Freed outside the lock.
        drop(done);
    }

    /// The step the next claim returns.
    #[cfg(test)]
    pub(crate) fn next_claim(&self) -> u64 {
        self.lock().next_claim
    }

    /// Whether the window is full and every step in it finished: the
    /// workers then wait for the consumer, touching nothing.
    #[cfg(test)]
    pub(crate) fn is_full_and_finished(&self) -> bool {
        let state = self.lock();
        let ahead = state.next_claim - state.next_take;
        ahead == self.window && state.done.len() as u64 == self.window
    }

    /// The first step not to run (`None`: endless).
    pub(crate) fn end(&self) -> Option<u64> {
        self.end
    }

    /// The step the next successful take returns.
    pub(crate) fn next_take(&self) -> u64 {
        self.lock().next_take
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(step: u64) -> Result<Batch> {
        Ok(Batch {
            step,
            valid: 1,
            indices: vec![step],
            sources: None,
            buffers: vec![],
            lengths: vec![],
            decoded: vec![],
        })
    }

    fn taken_step(t: Taken) -> u64 {
        match t {
            Taken::Step(Ok(b)) => b.step,
            _ => panic!("expected a step"),
        }
    }

    #[test]
    fn steps_leave_in_order_whatever_order_they_finish_in() {
        let s = Schedule::new(5, 3, None);
        let claimed: Vec<_> = (0..3).map(|_| s.claim().unwrap()).collect();
        assert_eq!(claimed, [5, 6, 7]);
        s.finish(7, batch(7));
        s.finish(6, batch(6));
        assert!(matches!(
            s.take(Some(Duration::from_millis(10))),
            Taken::TimedOut
        ));
        s.finish(5, batch(5));
        for want in 5..8 {
            assert_eq!(taken_step(s.take(None)), want);
        }
    }

    #[test]
    fn the_window_bounds_claims_until_the_consumer_takes() {
        let s = std::sync::Arc::new(Schedule::new(0, 2, None));
        assert_eq!(s.claim(), Some(0));
        assert_eq!(s.claim(), Some(1));
        let s2 = s.clone();
        let waiter = std::thread::spawn(move || s2.claim());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "a third claim must wait");
        s.finish(0, batch(0));
        assert_eq!(taken_step(s.take(None)), 0);
        assert_eq!(waiter.join().unwrap(), Some(2));
    }

    #[test]
    fn close_wakes_waiting_workers_and_consumers() {
        let s = std::sync::Arc::new(Schedule::new(0, 1, None));
        assert_eq!(s.claim(), Some(0));
        let (s1, s2) = (s.clone(), s.clone());
        let worker = std::thread::spawn(move || s1.claim());
        let consumer = std::thread::spawn(move || matches!(s2.take(None), Taken::Closed));
        std::thread::sleep(Duration::from_millis(50));
        s.close();
        assert_eq!(worker.join().unwrap(), None);
        assert!(consumer.join().unwrap());
        assert!(s.is_closed());
    }

    #[test]
    fn a_schedule_with_an_end_claims_and_delivers_up_to_it() {
        let s = Schedule::new(3, 4, Some(5));
        assert_eq!((s.claim(), s.claim(), s.claim()), (Some(3), Some(4), None));
        s.finish(4, batch(4));
        s.finish(3, batch(3));
        assert_eq!(taken_step(s.take(None)), 3);
        assert_eq!(taken_step(s.take(None)), 4);
        assert!(matches!(s.take(None), Taken::Ended));
    }
}
