//! Helpers the verbs test crates share, one concept per module:
//! `driver` (a driver serving a feed, and waiting for what it delivers),
//! `hooked_cq` (a software CQ whose calls a test takes over), `panics` (the provoked
//! ones kept quiet), `load`
//! (producers under credits, a seeded RNG, a batch drain under a watchdog), and here the checks that report instead of panicking
//! (`ensure!`, for the scenarios the guest runs without a test harness).
//!
//! The watchdogs are the only clocks here: they fail a test in which
//! nothing happened for a long while, and no assertion depends on timing.

// Each test crate uses a part of this module.
#![allow(dead_code, unused_macros)]

pub mod driver;
pub mod hooked_cq;
pub mod load;
pub mod panics;

use evd_verbs::WorkCompletion;

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
#[allow(unused_imports)]
pub(crate) use ensure;

/// An error as the `String` the checks return.
pub fn e2s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A successful completion of work request `wr_id`.
pub fn wc(wr_id: u64) -> WorkCompletion {
    WorkCompletion::new(wr_id)
}
