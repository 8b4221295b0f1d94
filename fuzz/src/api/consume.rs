//! The consumer's calls whose outcome the clock or user code shapes, for the
//! `api` target: `dequeue_with` with a closure that panics part-way, and
//! waits and dequeues with a short non-zero timeout that runs out.
//!
//! A timed wait that would block either gives up in its back-off (its
//! deadline passed before it armed: the arm and the registered waker are
//! as the caller left them) or arms and withdraws at its deadline (nothing
//! armed, its thread's waker registered, *notified* cleared if the ring was
//! empty). Both are legal on a busy machine, so the check accepts either and
//! tells them apart where the difference shows: the arm the caller made, and
//! the test waker a poll left registered (the wait's registration drops it).

use super::{guarded, Api, Registered, Side, MARKER};
use crate::payload::Payload;
use evd::{DequeueError, WaitError};
use std::sync::Arc;
use std::time::Duration;

/// The closure of a `dequeue_with` panics on its event at this index; at or
/// past it, never.
const NEVER_PANICS: u8 = 6;

/// A timeout of 1–64 µs: it runs out within one park, and is not zero (a
/// zero timeout is a poll, which the `Wait` call covers).
fn short_timeout(micros: u8) -> Duration {
    Duration::from_micros(1 + u64::from(micros % 64))
}

impl Api {
    /// `dequeue_with(max % 20)` with a closure that panics on its
    /// `panic_at % 8`-th event (never for 6 and 7): the events handed over
    /// before it, and the one it panicked holding, are consumed; the rest
    /// stay queued; the panic comes out of the call.
    pub(super) fn dequeue_with(&mut self, max: u8, panic_at: u8) {
        let Side::Consumer(c) = &mut self.side else {
            return;
        };
        let max = usize::from(max) % 20;
        let stop = (panic_at % 8 < NEVER_PANICS).then_some(usize::from(panic_at % 8));
        let mut out: Vec<Payload> = Vec::new();
        let mut held = None;
        let r = guarded(|| {
            c.dequeue_with(max, |p| {
                if Some(out.len()) == stop {
                    held = Some(p.id);
                    // `p` is dropped while unwinding: the closure owned it.
                    std::panic::panic_any(MARKER);
                }
                out.push(p);
            })
        });
        if let Ok(r) = r {
            return self.m.batch(max, 0, &out, r);
        }
        let held = held.expect("only the closure panics");
        assert!(out.len() < max, "the closure panicked past `max`");
        assert!(
            self.m.last_was_report || self.m.overflow == 0,
            "the closure was called with a loss report pending"
        );
        for p in &out {
            assert_eq!(Some(p.id), self.m.queue.pop_front(), "dequeue_with order");
        }
        assert_eq!(Some(held), self.m.queue.pop_front(), "the panicked event");
        self.m.dequeued += out.len() as u64 + 1;
        self.m.last_was_report = false;
    }

    /// `wait(threshold, timeout)` with a short non-zero timeout, where the
    /// model says the wait would block (nothing else is checked here: with
    /// a timeout that is not zero, whether a met wait registers its waker
    /// depends on the clock). Unwaitable: refused, or answered as a poll if
    /// the deadline passed before the check.
    pub(super) fn timed_wait(&mut self, threshold: u8, micros: u8) {
        let k = 1 + usize::from(threshold) % self.m.cap;
        let len = self.m.queue.len();
        if !self.would_block(k) {
            return;
        }
        let Side::Consumer(c) = &mut self.side else {
            return;
        };
        let r = c.wait(k, Some(short_timeout(micros)));
        let timeout = Err(WaitError::Timeout { available: len });
        if self.unwaitable {
            assert!(r == Err(WaitError::Unwaitable) || r == timeout, "{r:?}");
            return;
        }
        assert_eq!(r, timeout, "a timed wait that would block");
        self.after_timeout();
    }

    /// `dequeue_timeout` with a short non-zero timeout, where the model says
    /// nothing is ready and the dequeue would block: `Timeout` (or, while
    /// unwaitable, `Unwaitable`), nothing taken.
    pub(super) fn dequeue_timeout(&mut self, micros: u8) {
        if !self.would_block(1) {
            return;
        }
        let Side::Consumer(c) = &mut self.side else {
            return;
        };
        let r = c.dequeue_timeout(short_timeout(micros)).map(|p| p.id);
        // Its first step is a dequeue that finds nothing: the next report
        // no longer follows one.
        self.m.last_was_report = false;
        if self.unwaitable {
            assert!(
                matches!(r, Err(DequeueError::Unwaitable | DequeueError::Timeout)),
                "{r:?}"
            );
            return;
        }
        assert_eq!(r, Err(DequeueError::Timeout), "a dequeue that would block");
        self.after_timeout();
    }

    /// A wait for `k` events would block: fewer queued, no loss report, not
    /// closed.
    fn would_block(&self, k: usize) -> bool {
        self.m.queue.len() < k && self.m.overflow == 0 && !self.m.closed
    }

    /// Apply a timed-out wait: either it never armed (all as it was) or it
    /// armed and withdrew (see the module doc).
    fn after_timeout(&mut self) {
        let q = self.query().expect("a consumer is there");
        let empty = self.m.queue.is_empty();
        if q.armed {
            assert!(self.armed, "a timed-out wait left an arm of its own");
            return assert_eq!(q.notified, self.notified, "a wait that never armed");
        }
        let armed_and_withdrew = if self.registered == Registered::Test {
            // The EVD dropped the test waker iff the wait registered its own.
            let w = self.waker.as_ref().expect("a test waker is registered");
            Arc::strong_count(w) == 1
        } else {
            // Unregistered or a thread waker either way: only *notified*
            // may tell, and only on an empty ring.
            empty && self.notified && !q.notified
        };
        if armed_and_withdrew {
            self.registered = Registered::Thread;
            if empty {
                self.notified = false;
            }
        }
        self.armed = false;
        assert_eq!(q.notified, self.notified, "a timed-out wait's notified");
    }
}
