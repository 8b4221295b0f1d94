//! How the driver runs: [`DriverConfig`] for the kernel interface (its
//! [`DriverBackend`]) and the turns, [`FeedMode`] for each feed.

use super::adaptive::AdaptiveConfig;
use std::time::Duration;

/// How the driver runs a feed. More modes may come: a `match` on it needs
/// a wildcard arm.
///
/// ```
/// use evd_verbs::{AdaptiveConfig, FeedMode};
/// use std::time::Duration;
/// let mode = FeedMode::Adaptive(AdaptiveConfig::default().with_max_spin(Duration::from_micros(20)));
/// assert_ne!(mode, FeedMode::Event);
/// ```
///
/// ```compile_fail,E0004
/// use evd_verbs::FeedMode;
/// fn name(mode: FeedMode) -> &'static str {
///     match mode {
///         FeedMode::Event => "event",
///         FeedMode::Adaptive(_) => "adaptive",
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeedMode {
    /// Sleep on the channel; on a wake, get and ack the events, poll and
    /// deliver what is there, then (next turn) re-arm, drain until empty,
    /// sleep again.
    Event,
    /// After a wake, keep polling (unarmed) while polls find completions;
    /// arm after `T` without a completion, derived from the arrival process
    /// (see [`SpinPolicy`](crate::SpinPolicy)).
    Adaptive(AdaptiveConfig),
}

/// The most submission-queue entries the kernel gives a ring
/// (`IORING_MAX_ENTRIES`), and the most reports an epoll wait reads:
/// [`DriverConfig::ring_entries`] is taken into `1..=MAX_RING_ENTRIES`.
pub(crate) const MAX_RING_ENTRIES: u32 = 32_768;

/// Driver settings. Start from [`Default`] and change what you need with
/// the `with_…` setters (or assign the public fields of a mutable value);
/// more settings may come, so a struct literal is refused outside this
/// crate.
///
/// ```
/// use evd_verbs::{Driver, DriverBackend, DriverConfig};
/// let cfg = DriverConfig::default().with_budget(64).with_backend(DriverBackend::Epoll);
/// let driver = Driver::new(cfg).unwrap();
/// assert_eq!(driver.backend(), DriverBackend::Epoll);
/// let mut cfg = DriverConfig::default();
/// cfg.ring_entries = 512;
/// # drop(Driver::new(cfg).unwrap());
/// ```
///
/// ```compile_fail,E0639
/// let cfg = evd_verbs::DriverConfig { budget: 64, ..Default::default() };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverConfig {
    /// How the driver waits on the feeds' fds: io_uring, or epoll where
    /// io_uring is refused ([`DriverBackend::Auto`], the default).
    pub backend: DriverBackend,
    /// Submission-queue entries of the ring (completion queue: twice that),
    /// taken into `1..=32768`, the kernel's limit; the epoll backend reads
    /// up to this many readiness reports per wait (at least one).
    pub ring_entries: u32,
    /// Events one feed may deliver per turn before the driver moves on to
    /// the others (the kernel's irq_poll budget is 256). Zero is taken as 1.
    pub budget: usize,
    /// While some feed is busy (draining, spinning), enter the kernel at
    /// most this long apart, by the clock, to collect the other feeds'
    /// readiness (a turn that has requests to submit always enters). It
    /// bounds how late a sleeping feed's readiness is seen while another
    /// is busy (a turn longer than this: the next turn), how late a quiet
    /// CQ's readiness is seen while another CQ of the same shared channel
    /// keeps the channel feed busy (its unarmed polls take only the CQs
    /// the channel's events named), and the share of a spinning driver's
    /// time spent in those system calls. Zero:
    /// every busy turn enters. The default, 10 µs, is about two wake-ups
    /// through io_uring, and a non-blocking enter (`epoll_wait` or
    /// `io_uring_enter` with nothing to do) costs a fraction of a
    /// microsecond: a few per cent of a spinning driver's time.
    pub busy_enter_interval: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            backend: DriverBackend::Auto,
            ring_entries: 256,
            budget: 256,
            busy_enter_interval: Duration::from_micros(10),
        }
    }
}

impl DriverConfig {
    /// With [`backend`](Self::backend) set.
    ///
    /// ```
    /// use evd_verbs::{DriverBackend, DriverConfig};
    /// let cfg = DriverConfig::default().with_backend(DriverBackend::IoUring);
    /// assert_eq!(cfg.backend, DriverBackend::IoUring);
    /// ```
    #[must_use]
    pub const fn with_backend(mut self, backend: DriverBackend) -> Self {
        self.backend = backend;
        self
    }

    /// With [`ring_entries`](Self::ring_entries) set.
    ///
    /// ```
    /// let cfg = evd_verbs::DriverConfig::default().with_ring_entries(1024);
    /// assert_eq!(cfg.ring_entries, 1024);
    /// ```
    #[must_use]
    pub const fn with_ring_entries(mut self, ring_entries: u32) -> Self {
        self.ring_entries = ring_entries;
        self
    }

    /// With [`budget`](Self::budget) set.
    ///
    /// ```
    /// let cfg = evd_verbs::DriverConfig::default().with_budget(64);
    /// assert_eq!(cfg.budget, 64);
    /// ```
    #[must_use]
    pub const fn with_budget(mut self, budget: usize) -> Self {
        self.budget = budget;
        self
    }

    /// With [`busy_enter_interval`](Self::busy_enter_interval) set.
    ///
    /// ```
    /// use std::time::Duration;
    /// let cfg = evd_verbs::DriverConfig::default().with_busy_enter_interval(Duration::ZERO);
    /// assert!(cfg.busy_enter_interval.is_zero());
    /// ```
    #[must_use]
    pub const fn with_busy_enter_interval(mut self, interval: Duration) -> Self {
        self.busy_enter_interval = interval;
        self
    }
}

/// How a [`Driver`](crate::Driver) waits on its feeds' fds. Both backends
/// run the same per-feed cycle behind the same API; they differ in what the
/// kernel must allow and in what a wait costs.
///
/// ```
/// use evd_verbs::{Driver, DriverBackend, DriverConfig};
/// let driver = Driver::new(DriverConfig::default().with_backend(DriverBackend::Epoll)).unwrap();
/// assert_eq!(driver.backend(), DriverBackend::Epoll);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriverBackend {
    /// io_uring, unless the kernel refuses to set up a ring (`ENOSYS`:
    /// gVisor, kernels without it; `EPERM`: Docker's default seccomp
    /// profile, `kernel.io_uring_disabled`; `EOPNOTSUPP`, also for a kernel
    /// older than Linux 5.11, whose io_uring has no timed waits): then
    /// epoll.
    ///
    /// The environment variable `EVD_DRIVER_BACKEND` overrides the choice:
    /// `epoll` or `io_uring` (read when the driver is created; any other
    /// value, or none, leaves it automatic). It is how a whole test suite is
    /// run on the fallback: `EVD_DRIVER_BACKEND=epoll cargo test`.
    #[default]
    Auto,
    /// One io_uring ring: fd polls (multishot where the kernel has them)
    /// are queued and submitted with the wait, one system call per wait.
    /// Needs Linux 5.11 or later ([`Driver::new`](crate::Driver::new)
    /// fails with `EOPNOTSUPP` on an older kernel).
    IoUring,
    /// One epoll instance (through `rustix`): each fd is registered
    /// one-shot and re-armed with an `epoll_ctl` when its feed goes back to
    /// sleep, so a sleep costs a system call more than on io_uring. Works
    /// wherever epoll does.
    Epoll,
}
