//! How the driver runs: [`DriverConfig`] for the kernel interface (its
//! [`DriverBackend`]) and the turns, [`FeedMode`] for each feed.

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
    /// How the driver waits on the feeds' fds: io_uring, or epoll where
    /// io_uring is refused ([`DriverBackend::Auto`], the default).
    pub backend: DriverBackend,
    /// Submission-queue entries of the ring (completion queue: twice that);
    /// the epoll backend reads up to this many readiness reports per wait.
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
            backend: DriverBackend::Auto,
            ring_entries: 256,
            budget: 256,
            busy_turns_per_enter: 32,
        }
    }
}

/// How a [`Driver`](crate::Driver) waits on its feeds' fds. Both backends
/// run the same per-feed cycle behind the same API; they differ in what the
/// kernel must allow and in what a wait costs.
///
/// ```
/// use evd_verbs::{Driver, DriverBackend, DriverConfig};
/// let driver = Driver::new(DriverConfig { backend: DriverBackend::Epoll, ..Default::default() }).unwrap();
/// assert_eq!(driver.backend(), DriverBackend::Epoll);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriverBackend {
    /// io_uring, unless the kernel refuses to set up a ring (`ENOSYS`:
    /// gVisor, kernels without it; `EPERM`: Docker's default seccomp
    /// profile, `kernel.io_uring_disabled`; `EOPNOTSUPP`): then epoll.
    ///
    /// The environment variable `EVD_DRIVER_BACKEND` overrides the choice:
    /// `epoll` or `io_uring` (read when the driver is created; any other
    /// value, or none, leaves it automatic). It is how a whole test suite is
    /// run on the fallback: `EVD_DRIVER_BACKEND=epoll cargo test`.
    #[default]
    Auto,
    /// One io_uring ring: fd polls (multishot where the kernel has them)
    /// are queued and submitted with the wait, one system call per wait.
    IoUring,
    /// One epoll instance (through `rustix`): each fd is registered
    /// one-shot and re-armed with an `epoll_ctl` when its feed goes back to
    /// sleep, so a sleep costs a system call more than on io_uring. Works
    /// wherever epoll does.
    Epoll,
}
