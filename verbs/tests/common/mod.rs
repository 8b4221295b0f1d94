//! Helpers the verbs test crates share: `ensure!` (a failed check as an
//! `Err`, for the scenarios the guest runs without a test harness), a
//! seeded xorshift, credits that bound the completions outstanding, and a
//! watchdog that turns a hang into a failure.
//!
//! The watchdog is the only clock here: it fails a test in which nothing
//! happened for a long while, and no assertion depends on timing.

// Each test crate uses a part of this module.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The outcome of a check that reports instead of panicking.
pub type Res = Result<(), String>;

/// `return Err(format!(...))` unless the condition holds.
macro_rules! ensure {
    ($c:expr, $($fmt:tt)+) => {
        if !$c {
            return Err(format!($($fmt)+));
        }
    };
}
pub(crate) use ensure;

/// An error as the `String` the checks return.
pub fn e2s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A small xorshift: a reproducible stream from its seed.
pub struct Xorshift(u64);

impl Xorshift {
    /// The stream of `seed` (any value but zero).
    pub fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift never leaves zero");
        Xorshift(seed)
    }

    /// The stream of producer `p`: a different one for each.
    pub fn for_producer(p: u64) -> Self {
        Self::new(0x9e37_79b9_7f4a_7c15u64 ^ (p + 1).wrapping_mul(0x1234_5678_9abc))
    }

    pub fn next(&mut self) -> u64 {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// At most `limit` completions outstanding (produced, not yet consumed),
/// as an application sizes its CQ: producers take a credit per
/// completion, the consumer gives them back.
pub struct Credits {
    outstanding: AtomicU64,
    limit: u64,
}

impl Credits {
    pub fn new(limit: u64) -> Self {
        Credits {
            outstanding: AtomicU64::new(0),
            limit,
        }
    }

    /// Take a credit, yielding (not sleeping) while none is free; `false`
    /// if `abort` is set meanwhile.
    pub fn take(&self, abort: Option<&AtomicBool>) -> bool {
        loop {
            let o = self.outstanding.load(Ordering::Acquire);
            if o < self.limit
                && self
                    .outstanding
                    .compare_exchange(o, o + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return true;
            }
            if abort.is_some_and(|a| a.load(Ordering::Relaxed)) {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// Count `n` completions produced outside the limit.
    pub fn add(&self, n: u64) {
        self.outstanding.fetch_add(n, Ordering::AcqRel);
    }

    /// `n` completions consumed.
    pub fn give_back(&self, n: u64) {
        self.outstanding.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Fails a wait in which nothing happened for `limit`: a stranded
/// completion or a hang becomes a failure instead of a stuck test.
pub struct Watchdog {
    last: Instant,
    limit: Duration,
}

impl Watchdog {
    pub fn new(limit: Duration) -> Self {
        Watchdog {
            last: Instant::now(),
            limit,
        }
    }

    /// Something happened: the wait starts again.
    pub fn progress(&mut self) {
        self.last = Instant::now();
    }

    /// Whether nothing happened for the limit.
    pub fn expired(&self) -> bool {
        self.last.elapsed() > self.limit
    }
}
