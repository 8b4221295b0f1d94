//! The adaptive mode's spin policy: spin while completions keep arriving,
//! then arm and sleep, with a spin budget that follows the arrival rate.
//!
//! Like NAPI (poll while there is work, re-enable interrupts when a poll
//! comes back short) and the kernel's DIM (step moderation up or down by
//! whether the last step paid off), the budget moves on what each spin
//! achieved:
//! - a spin that found a completion after a gap `g` raises the budget to at
//!   least `4g` (the next gaps of that size, and jitter up to four times
//!   it, are caught without sleeping);
//! - a wake-up that came only `g` after the previous completion also raises
//!   it to `4g` (a spin that long would have avoided the sleep);
//! - a spin that expired empty lowers it by a quarter (waiting was wasted).
//!
//! So under bursts whose completions are closer together than
//! [`AdaptiveConfig::max_spin`] the feed stays awake for the whole burst
//! and sleeps between bursts, paying one expired spin per burst; under
//! sparse traffic the budget decays to zero and the feed behaves as the
//! pure event-driven one; under a steady stream it never stops polling.

use std::time::{Duration, Instant};

/// Bounds of the adaptive spin budget.
///
/// ```
/// let cfg = evd_verbs::AdaptiveConfig::default();
/// assert!(cfg.min_spin <= cfg.initial_spin && cfg.initial_spin <= cfg.max_spin);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveConfig {
    /// The budget never goes below this (zero lets it fall back to the pure
    /// event-driven mode).
    pub min_spin: Duration,
    /// The budget never goes above this: gaps longer than this are slept
    /// through. Set it around the cost of a sleep/wake cycle and above.
    pub max_spin: Duration,
    /// The budget a new feed starts with.
    pub initial_spin: Duration,
}

impl Default for AdaptiveConfig {
    /// 0 to 50 µs, starting at 10 µs (a wake through io_uring costs about
    /// 5 µs on the machines measured, plus the re-arm and channel syscalls).
    fn default() -> Self {
        AdaptiveConfig {
            min_spin: Duration::ZERO,
            max_spin: Duration::from_micros(50),
            initial_spin: Duration::from_micros(10),
        }
    }
}

/// How many times the observed gap a spin covers: arrival jitter (and a
/// preempted producer) must not end a spin in the middle of a burst.
const GAP_MARGIN: u32 = 4;

/// Spins shorter than this are not worth starting.
const MIN_USEFUL_SPIN: Duration = Duration::from_nanos(500);

/// The per-feed adaptive state.
///
/// ```
/// use evd_verbs::{AdaptiveConfig, SpinPolicy};
/// use std::time::{Duration, Instant};
/// let mut p = SpinPolicy::new(AdaptiveConfig::default());
/// let t0 = Instant::now();
/// p.found(t0);
/// p.found(t0 + Duration::from_micros(10)); // a 10 µs gap caught by spinning
/// assert_eq!(p.spin(), Duration::from_micros(40));
/// p.expired();
/// assert_eq!(p.spin(), Duration::from_micros(30));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SpinPolicy {
    cfg: AdaptiveConfig,
    spin: Duration,
    last_completion: Option<Instant>,
}

impl SpinPolicy {
    /// A policy at its initial budget.
    pub fn new(cfg: AdaptiveConfig) -> Self {
        SpinPolicy {
            spin: cfg.initial_spin.clamp(cfg.min_spin, cfg.max_spin),
            cfg,
            last_completion: None,
        }
    }

    /// The current spin budget.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// Whether to spin at all before arming.
    pub fn should_spin(&self) -> bool {
        self.spin >= MIN_USEFUL_SPIN
    }

    fn raise_to_cover(&mut self, gap: Duration) {
        if gap <= self.cfg.max_spin {
            self.spin = self
                .spin
                .max(gap * GAP_MARGIN)
                .clamp(self.cfg.min_spin, self.cfg.max_spin);
        }
    }

    /// Completions were found while spinning, at `now`.
    pub fn found(&mut self, now: Instant) {
        if let Some(last) = self.last_completion {
            self.raise_to_cover(now.saturating_duration_since(last));
        }
        self.last_completion = Some(now);
    }

    /// The feed was woken from sleep by completions, at `now`.
    pub fn woken(&mut self, now: Instant) {
        self.found(now);
    }

    /// A spin ran out with nothing found.
    pub fn expired(&mut self) {
        self.spin = (self.spin * 3 / 4).max(self.cfg.min_spin);
    }
}
