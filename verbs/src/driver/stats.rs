//! A driver's counters ([`DriverStats`]) and the block through which the
//! driver's thread shows them, live, to other threads ([`PublishedStats`]).
//!
//! # Publishing without a lock or a read-modify-write
//! The driver's thread is the only writer of its counters: it counts in its
//! own plain [`DriverStats`] and, once per [`Driver::process`](super::Driver::process)
//! call, copies each counter into the shared block with a `Relaxed` store.
//! Readers load each counter `Relaxed`. A single writer needs no
//! read-modify-write, and a `Relaxed` store compiles to a plain store, so
//! the data path pays a few stores per call to a cache line that only a
//! reader of the statistics ever pulls away.
//!
//! What the orderings give a reader:
//! - each counter is monotonic: the stores to one atomic follow the
//!   writer's program order (its modification order), and coherence forbids
//!   a later load to see an earlier store, so successive reads of one
//!   counter never go back;
//! - no snapshot across counters: one counter may come from a later call
//!   than another (no counter guards any other data, so no ordering
//!   between them is paid for);
//! - a panic counted is a panic kept: a spawned driver keeps a turn's
//!   panic (for [`DriverHandle::take_panic`](crate::DriverHandle::take_panic))
//!   before it publishes the count that includes it, and `handler_panics`
//!   is stored `Release` and loaded `Acquire` (the one counter that guards
//!   something: the kept panic), so a reader that saw `n` panics counted
//!   and then takes the kept one takes one of those `n`, never one a later
//!   turn keeps;
//! - final values once the driver is seen stopped: the thread's last
//!   publish is sequenced before its `Release` store of `running = false`
//!   ([`PublishedStats::set_stopped`]); a reader whose `Acquire` load sees
//!   `false` then reads the last values.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A driver's counters: [`Driver::stats`](super::Driver::stats) on the
/// driver's own thread; from any thread, live, [`DriverHandle::stats`](crate::DriverHandle::stats)
/// and [`RunningDriver::stats`](crate::RunningDriver::stats) (as published
/// at the end of the driver's last `process` call: each counter only grows,
/// and two counters may come from different calls).
///
/// ```
/// let mut driver = evd_verbs::Driver::new(Default::default()).unwrap();
/// driver.process(Some(std::time::Duration::from_millis(1))).unwrap();
/// assert_eq!(driver.stats().timeouts, 1);
/// ```
///
/// More counters may come: read the fields, do not build the struct.
///
/// ```compile_fail,E0639
/// let stats = evd_verbs::DriverStats { turns: 1, ..Default::default() };
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverStats {
    /// Turns over the feeds.
    pub turns: u64,
    /// Waits in the kernel that could block (no feed was busy).
    pub waits: u64,
    /// Timed waits that ended with nothing to handle (the caller's timeout,
    /// or a signal). The driver sets no timer of its own.
    pub timeouts: u64,
    /// Channel (or async fd) readiness reports.
    pub fd_wakes: u64,
    /// Room signals received from full EVDs.
    pub room_wakes: u64,
    /// Adaptive feeds: polls of a spin that found completions that arrived
    /// while it spun (wakes saved; the wake's own completions and a backlog
    /// beyond a poll's budget are not counted).
    pub spin_catches: u64,
    /// Adaptive feeds: spins that ended empty and armed.
    pub spin_misses: u64,
    /// Adaptive feeds: wakes served by the event cycle, without a spin.
    pub unspun_wakes: u64,
    /// Feed turns that panicked (an upcall handler of the feed's EVD, an
    /// event type's `From` or `Drop`, a completion queue's own code): each
    /// was caught, and the driver served on (see
    /// [`DriverError::Panicked`](crate::DriverError::Panicked)).
    pub handler_panics: u64,
    /// Failed verbs calls of feeds (see
    /// [`DriverError::FeedFailed`](crate::DriverError::FeedFailed)), each
    /// retried or ending in the feed given up.
    pub feed_failures: u64,
    /// Feeds given up because their verbs calls kept failing.
    pub feeds_given_up: u64,
}

/// The counters of [`DriverStats`] as atomics, written by the driver's
/// thread only, plus whether a spawned driver's thread still runs.
#[derive(Debug, Default)]
pub(crate) struct PublishedStats {
    turns: AtomicU64,
    waits: AtomicU64,
    timeouts: AtomicU64,
    fd_wakes: AtomicU64,
    room_wakes: AtomicU64,
    spin_catches: AtomicU64,
    spin_misses: AtomicU64,
    unspun_wakes: AtomicU64,
    handler_panics: AtomicU64,
    feed_failures: AtomicU64,
    feeds_given_up: AtomicU64,
    /// Set before a spawned driver's thread starts; cleared (`Release`)
    /// when it ends, after its last publish.
    running: AtomicBool,
}

impl PublishedStats {
    /// Copy the driver's counters in. Only the thread running the driver
    /// calls this (the single writer), so a plain store of each is enough.
    pub(crate) fn publish(&self, s: &DriverStats) {
        // Relaxed: see the module notes (single writer, no data guarded).
        self.turns.store(s.turns, Ordering::Relaxed);
        self.waits.store(s.waits, Ordering::Relaxed);
        self.timeouts.store(s.timeouts, Ordering::Relaxed);
        self.fd_wakes.store(s.fd_wakes, Ordering::Relaxed);
        self.room_wakes.store(s.room_wakes, Ordering::Relaxed);
        self.spin_catches.store(s.spin_catches, Ordering::Relaxed);
        self.spin_misses.store(s.spin_misses, Ordering::Relaxed);
        self.unspun_wakes.store(s.unspun_wakes, Ordering::Relaxed);
        // Release: the panics counted are kept first (the module notes).
        self.handler_panics
            .store(s.handler_panics, Ordering::Release);
        self.feed_failures.store(s.feed_failures, Ordering::Relaxed);
        self.feeds_given_up
            .store(s.feeds_given_up, Ordering::Relaxed);
    }

    /// The counters as last published.
    pub(crate) fn load(&self) -> DriverStats {
        DriverStats {
            turns: self.turns.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            fd_wakes: self.fd_wakes.load(Ordering::Relaxed),
            room_wakes: self.room_wakes.load(Ordering::Relaxed),
            spin_catches: self.spin_catches.load(Ordering::Relaxed),
            spin_misses: self.spin_misses.load(Ordering::Relaxed),
            unspun_wakes: self.unspun_wakes.load(Ordering::Relaxed),
            handler_panics: self.handler_panics.load(Ordering::Acquire),
            feed_failures: self.feed_failures.load(Ordering::Relaxed),
            feeds_given_up: self.feeds_given_up.load(Ordering::Relaxed),
        }
    }

    /// A thread is about to run the driver. Relaxed: the spawn that follows
    /// orders it before anything the thread does.
    pub(crate) fn set_running(&self) {
        self.running.store(true, Ordering::Relaxed);
    }

    /// The driver's thread ends. Release: its last publish happens before a
    /// reader's `Acquire` load that sees `false`.
    pub(crate) fn set_stopped(&self) {
        self.running.store(false, Ordering::Release);
    }

    /// Whether a spawned driver's thread still runs.
    pub(crate) fn is_running(&self) -> bool {
        // Acquire: pairs with `set_stopped`, so counters loaded after a
        // `false` are the final ones.
        self.running.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_shows_every_counter_and_stopping_keeps_them() {
        let p = PublishedStats::default();
        assert!(!p.is_running());
        p.set_running();
        assert!(p.is_running());
        let s = DriverStats {
            turns: 1,
            waits: 2,
            timeouts: 3,
            fd_wakes: 4,
            room_wakes: 5,
            spin_catches: 6,
            spin_misses: 7,
            unspun_wakes: 8,
            handler_panics: 9,
            feed_failures: 10,
            feeds_given_up: 11,
        };
        p.publish(&s);
        p.set_stopped();
        assert!(!p.is_running());
        assert_eq!(p.load(), s);
    }
}
