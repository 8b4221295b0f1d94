//! How the driver runs: [`DriverConfig`] for the ring and the turns,
//! [`FeedMode`] for each feed.

use super::adaptive::AdaptiveConfig;

/// How the driver runs a feed.
///
/// ```
/// use evd_verbs::{AdaptiveConfig, FeedMode};
/// use std::time::Duration;
/// let mode = FeedMode::Adaptive(AdaptiveConfig { max_spin: Duration::from_micros(20), ..Default::default() });
/// assert_ne!(mode, FeedMode::Event);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedMode {
    /// Sleep on the channel; on a wake, get and ack the events, poll and
    /// deliver what is there, then (next turn) re-arm, drain until empty,
    /// sleep again.
    Event,
    /// After a wake, keep polling (unarmed) while polls find completions;
    /// arm after `K` empty polls or `T` without a completion, both derived
    /// from the arrival process (see [`SpinPolicy`](crate::SpinPolicy)).
    Adaptive(AdaptiveConfig),
}

/// Driver settings.
///
/// ```
/// let cfg = evd_verbs::DriverConfig { budget: 64, ..Default::default() };
/// let driver = evd_verbs::Driver::new(cfg).unwrap();
/// # drop(driver);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverConfig {
    /// Submission-queue entries of the ring (completion queue: twice that).
    pub ring_entries: u32,
    /// Events one feed may deliver per turn before the driver moves on to
    /// the others (the kernel's irq_poll budget is 256). Zero is taken as 1.
    pub budget: usize,
    /// While some feed is busy (draining, spinning), enter the kernel once
    /// per this many turns to collect the other feeds' readiness; a turn
    /// that has requests to submit always enters.
    pub busy_turns_per_enter: u32,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            ring_entries: 256,
            budget: 256,
            busy_turns_per_enter: 32,
        }
    }
}
