//! The adaptive mode's spin policy: after a wake, keep polling while polls
//! find completions; arm after `T` without a completion, with `T` derived
//! from the arrival process the feed observes, and bounded by
//! [`AdaptiveConfig`]. The spin is bounded by the clock alone, never by a
//! count of polls: a poll's cost changes with the other feeds' turns (a
//! driver whose other feeds go to sleep turns several times faster), so a
//! count learned at one turn rate would end spins early at another.
//!
//! The anchor is NAPI's IRQ suspension (Karsten & Damato, 2024): while polls
//! keep finding work, interrupts stay off; once a poll finds nothing for the
//! suspend timeout, interrupts come back. Here the "interrupt" is the CQ's
//! arm and its channel wake, and the timeout follows the traffic instead of
//! being a fixed knob:
//!
//! - Only a spin sees true arrival gaps: a completion it finds closes a gap
//!   since the previous one, and is a *catch* (a wake saved); a spin that
//!   ends empty is a *miss*. Completions found after a wake say nothing
//!   about gaps (the wake's own latency is in them), so they only restart
//!   the clock.
//! - The policy keeps moving averages (weight 1/4, as net DIM and TCP's RTT
//!   estimator smooth their samples) of the caught gaps and of the share of
//!   spins' outcomes that were catches.
//! - `T` is four times the average caught gap (jitter and a preempted
//!   producer must not end a spin in the middle of a burst), clamped.
//! - Caught gaps are censored: a gap longer than `T` ends the spin, so it is
//!   never caught and never moves the average, and a producer that stalls
//!   now and then inside a burst sends the feed to sleep (and its next
//!   completions through a wake) each time. So a miss is not the end of the
//!   story: the next find after it (the arm's own drain, or the first poll
//!   after the wake) closes the missed gap. If that gap is within
//!   [`AdaptiveConfig::max_spin`], a longer spin would have caught it: the
//!   gap (an upper bound: a wake's latency may be in it) becomes the *stall*
//!   estimate at once if it is longer, and so does a caught gap longer than
//!   the caught gaps' window (one the estimate let the spin wait out). A
//!   miss whose gap turns out longer than any spin (the real end of a burst)
//!   lets the estimate decay by a quarter, unless the burst it ends had such
//!   a long gap: a load with one stall per burst keeps it covered, and one
//!   whose stalls stop loses it a quarter per burst. `T` is at least the
//!   stall estimate; a load whose gaps all exceed the spin limit never
//!   raises it.
//! - If fewer than half the outcomes are catches, spinning mostly burns its
//!   window and sleeps anyway: `T = 0` and the feed runs the event-driven
//!   cycle (unless [`AdaptiveConfig::min_spin`] sets a floor), except that
//!   the feed probes with the longest spin now and then, so that a load that
//!   turns catchable is noticed. The probes are spaced by the clock, not by
//!   a count of wakes: the first wake after spinning stopped paying (or
//!   after a probe) starts an interval of [`PROBE_EVERY`] times the last
//!   probe's length (the longest spin before any, or after a probe that
//!   turned spinning back on: its spin was the load's), and the first wake
//!   after it probes; each probe that does not turn spinning back on doubles the
//!   factor, up to [`PROBE_EVERY_MAX`]. So one feed's probes take at most
//!   one part in `PROBE_EVERY` of the time (one in `PROBE_EVERY_MAX` once
//!   backed off), however often its channel wakes it, and a probe that
//!   catches a little and spins on pays for its length. A load whose gaps
//!   all exceed the spin limit therefore costs what event mode costs plus
//!   that share; a bursty load spins through each burst and sleeps between
//!   bursts (one miss per burst); a steady stream faster than the limit is
//!   never slept through.
//! - A spin that ends otherwise (the EVD full, the EVD closed, the feed's
//!   turn failed or panicked) is neither a catch nor a miss; a probe in it
//!   ends undecided, and the next probe waits its interval again (unless
//!   its catches turned spinning back on: then as a probe whose spin ends).

use super::cycle::Limits;
use std::time::{Duration, Instant};

/// Bounds of the adaptive spin. Start from [`Default`] and change what you
/// need with the `with_…` setters; more bounds may come, so a struct
/// literal is refused outside this crate.
///
/// ```
/// use evd_verbs::AdaptiveConfig;
/// use std::time::Duration;
/// let cfg = AdaptiveConfig::default();
/// assert!(cfg.min_spin <= cfg.initial_spin && cfg.initial_spin <= cfg.max_spin);
/// let short = cfg.with_max_spin(Duration::from_micros(20));
/// assert_eq!(short.max_spin, Duration::from_micros(20));
/// ```
///
/// ```compile_fail,E0639
/// let cfg = evd_verbs::AdaptiveConfig { min_spin: std::time::Duration::ZERO, ..Default::default() };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdaptiveConfig {
    /// The spin window never goes below this (zero lets the feed fall back
    /// to the event-driven cycle when arrivals are too sparse to catch).
    pub min_spin: Duration,
    /// The spin window never goes above this, and gaps longer than this are
    /// not caught by spinning. Set it around the cost of a sleep/wake cycle
    /// and above. Below [`min_spin`](Self::min_spin), it is taken as
    /// `min_spin`.
    pub max_spin: Duration,
    /// The window a new feed starts with, before it has seen any gap
    /// (one under 500 ns, too short to be worth starting, is zero unless
    /// [`min_spin`](Self::min_spin) sets a floor).
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

impl AdaptiveConfig {
    /// With [`min_spin`](Self::min_spin) set.
    ///
    /// ```
    /// use std::time::Duration;
    /// let cfg = evd_verbs::AdaptiveConfig::default().with_min_spin(Duration::from_micros(2));
    /// assert_eq!(cfg.min_spin, Duration::from_micros(2));
    /// ```
    #[must_use]
    pub const fn with_min_spin(mut self, min_spin: Duration) -> Self {
        self.min_spin = min_spin;
        self
    }

    /// With [`max_spin`](Self::max_spin) set.
    ///
    /// ```
    /// use std::time::Duration;
    /// let cfg = evd_verbs::AdaptiveConfig::default().with_max_spin(Duration::from_micros(20));
    /// assert_eq!(cfg.max_spin, Duration::from_micros(20));
    /// ```
    #[must_use]
    pub const fn with_max_spin(mut self, max_spin: Duration) -> Self {
        self.max_spin = max_spin;
        self
    }

    /// With [`initial_spin`](Self::initial_spin) set.
    ///
    /// ```
    /// use std::time::Duration;
    /// let cfg = evd_verbs::AdaptiveConfig::default().with_initial_spin(Duration::ZERO);
    /// assert!(cfg.initial_spin.is_zero());
    /// ```
    #[must_use]
    pub const fn with_initial_spin(mut self, initial_spin: Duration) -> Self {
        self.initial_spin = initial_spin;
        self
    }
}

/// How many times the average gap a spin covers.
const MARGIN: u32 = 4;

/// Weight of a new sample in the moving averages: `1 / 2^SMOOTHING`.
const SMOOTHING: u32 = 2;

/// The catchable share, in 1/256ths, below which spinning does not pay.
const CATCH_FLOOR: u32 = 128;

/// A spin window shorter than this is not worth starting.
const MIN_USEFUL_SPIN: Duration = Duration::from_nanos(500);

/// While spinning does not pay, a probe (a spin of the longest window,
/// [`AdaptiveConfig::max_spin`]) comes at the first wake once this many
/// times the last probe's length (the longest spin before any probe, and
/// after a probe that turned spinning back on) has
/// passed since the first wake after spinning stopped paying or after the
/// last probe; each probe that does not turn spinning back on doubles the
/// factor, up to [`PROBE_EVERY_MAX`]. So a feed's probes take at most one
/// part in this many of the time.
pub const PROBE_EVERY: u32 = 8;

/// The largest factor between a probe's length and the interval before the
/// next.
pub const PROBE_EVERY_MAX: u32 = 256;

/// The per-feed adaptive state.
///
/// ```
/// use evd_verbs::{AdaptiveConfig, SpinPolicy, PROBE_EVERY};
/// use std::time::{Duration, Instant};
/// let mut p = SpinPolicy::new(AdaptiveConfig::default());
/// let t0 = Instant::now();
/// p.woken(t0);
/// for i in 1..=8 {
///     // a spin catches completions 2 µs apart, each after some empty polls
///     p.found(t0 + Duration::from_micros(2 * i), 20);
/// }
/// assert!(p.spin_window() >= Duration::from_micros(8)); // four gaps' worth
/// assert!(p.spin_window() < Duration::from_micros(12));
/// // Then the traffic turns sparse: every spin ends empty.
/// for _ in 0..4 {
///     p.expired();
/// }
/// assert_eq!(p.spin_window(), Duration::ZERO); // event-driven
/// let t1 = t0 + Duration::from_millis(1);
/// p.woken(t1); // the probes' clock starts
/// let max_spin = Duration::from_micros(50);
/// p.woken(t1 + max_spin * PROBE_EVERY); // PROBE_EVERY longest spins later: a probe
/// assert_eq!(p.spin_window(), max_spin);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SpinPolicy {
    cfg: AdaptiveConfig,
    /// Moving average of the catchable gaps.
    gap: Duration,
    /// Moving average of the share of spin outcomes that were catches, in
    /// 1/256ths.
    catchable: u32,
    last_completion: Option<Instant>,
    /// While spinning does not pay: the first wake at or after this instant
    /// probes (`None`: the next wake sets it, `probe_every` times
    /// `probe_length` on).
    probe_at: Option<Instant>,
    /// The interval between probes now, in probe lengths.
    probe_every: u32,
    /// How long the last probe that left spinning off spun (the longest
    /// spin before any, and after a probe that turned spinning back on).
    probe_length: Duration,
    /// The current spin is a probe, started then; whether it has caught
    /// anything.
    probing: Option<Instant>,
    probe_caught: bool,
    /// No poll has found anything since the last wake: the next find is the
    /// wake's own completions, not a catch.
    after_wake: bool,
    /// The longest recent gap that ended a spin and that the next find
    /// showed a longer spin would have caught (zero: none).
    stall: Duration,
    /// A spin ended empty and no find has closed its gap yet: when the last
    /// completion before it was seen.
    missed_since: Option<Instant>,
    /// A gap longer than the caught window and within the spin limit
    /// (caught, or missed and closed) was seen since the last real end of a
    /// burst: the stall estimate is in use and does not decay there.
    stall_seen: bool,
}

impl SpinPolicy {
    /// A policy that has seen nothing yet: window `initial_spin`, within
    /// the bounds (zero if it is under 500 ns, the shortest spin worth
    /// starting, and `min_spin` is zero).
    ///
    /// ```
    /// let p = evd_verbs::SpinPolicy::new(Default::default());
    /// assert_eq!(p.spin_window(), std::time::Duration::from_micros(10));
    /// ```
    pub fn new(cfg: AdaptiveConfig) -> Self {
        // A floor above the ceiling: the floor wins (no window is both).
        let cfg = AdaptiveConfig {
            max_spin: cfg.max_spin.max(cfg.min_spin),
            ..cfg
        };
        SpinPolicy {
            gap: cfg.initial_spin.clamp(cfg.min_spin, cfg.max_spin) / MARGIN,
            cfg,
            catchable: 256,
            last_completion: None,
            probe_at: None,
            probe_every: PROBE_EVERY,
            probe_length: cfg.max_spin,
            probing: None,
            probe_caught: false,
            after_wake: false,
            stall: Duration::ZERO,
            missed_since: None,
            stall_seen: false,
        }
    }

    /// `T`: how long a spin may go without a completion (zero: do not spin).
    ///
    /// ```
    /// let p = evd_verbs::SpinPolicy::new(
    ///     evd_verbs::AdaptiveConfig::default().with_initial_spin(std::time::Duration::ZERO),
    /// );
    /// assert!(p.spin_window().is_zero());
    /// ```
    pub fn spin_window(&self) -> Duration {
        if self.probing.is_some() {
            return self.cfg.max_spin;
        }
        if self.catchable < CATCH_FLOOR {
            return self.cfg.min_spin;
        }
        let t = self
            .caught_window()
            .max(self.stall)
            .clamp(self.cfg.min_spin, self.cfg.max_spin);
        // Too short to be worth starting, unless the configured floor asks
        // for it.
        if t < MIN_USEFUL_SPIN && self.cfg.min_spin.is_zero() {
            Duration::ZERO
        } else {
            t
        }
    }

    /// The window the caught gaps alone call for.
    fn caught_window(&self) -> Duration {
        // Saturating: under a ceiling of `Duration::MAX` the caught gaps
        // are bounded by nothing but the clock a caller drives.
        self.gap.saturating_mul(MARGIN)
    }

    /// The stall estimate (zero: no miss has shown a catchable gap lately).
    ///
    /// ```
    /// use evd_verbs::SpinPolicy;
    /// use std::time::{Duration, Instant};
    /// let mut p = SpinPolicy::new(Default::default());
    /// let t0 = Instant::now();
    /// p.woken(t0);
    /// p.found(t0 + Duration::from_micros(2), 20);
    /// p.expired(); // the producer stalled: the spin gave up
    /// p.woken(t0 + Duration::from_micros(30));
    /// p.found(t0 + Duration::from_micros(30), 0); // ... but the burst went on
    /// assert_eq!(p.stall(), Duration::from_micros(28));
    /// assert!(p.spin_window() >= p.stall());
    /// ```
    pub fn stall(&self) -> Duration {
        self.stall
    }

    /// A find at `now` closes the gap a miss left open, if one is.
    fn close_missed_gap(&mut self, now: Instant) {
        let Some(since) = self.missed_since.take() else {
            return;
        };
        let gap = now.saturating_duration_since(since);
        if gap <= self.cfg.max_spin {
            self.saw_stall(gap);
        } else {
            // The real end of a burst.
            if !std::mem::take(&mut self.stall_seen) {
                self.stall -= self.stall / 4;
            }
        }
    }

    /// A gap of `gap`, within the spin limit and longer than the caught
    /// window, was missed or waited out.
    fn saw_stall(&mut self, gap: Duration) {
        self.stall = self.stall.max(gap);
        self.stall_seen = true;
    }

    /// The limits the cycle applies.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            idle: self.spin_window(),
        }
    }

    /// A spinning poll found completions at `now`, after `empty_polls` empty
    /// polls in a row: a catch (only whether `empty_polls` is zero matters:
    /// a find by the first poll after a wake is the wake's own).
    ///
    /// ```
    /// use evd_verbs::{AdaptiveConfig, SpinPolicy};
    /// use std::time::{Duration, Instant};
    /// let mut p = SpinPolicy::new(AdaptiveConfig::default());
    /// let t0 = Instant::now();
    /// p.woken(t0);
    /// for i in 1..=16 {
    ///     // completions 1 µs apart, each caught after 10 empty polls
    ///     p.found(t0 + Duration::from_micros(i), 10);
    /// }
    /// // The window follows the short gaps down from its initial 10 µs.
    /// assert!(p.spin_window() < Duration::from_micros(10));
    /// assert!(p.spin_window() > Duration::ZERO);
    /// ```
    pub fn found(&mut self, now: Instant, empty_polls: u32) {
        self.close_missed_gap(now);
        // A probe lasts until its spin ends: its catches are what may turn
        // spinning back on.
        let gap = self
            .last_completion
            .map(|l| now.saturating_duration_since(l));
        self.last_completion = Some(now);
        if std::mem::take(&mut self.after_wake) && empty_polls == 0 {
            // The first poll after a wake found what woke it: no gap was
            // spun through, so this is neither a catch nor a gap sample.
            return;
        }
        let Some(gap) = gap else {
            return;
        };
        if gap > self.cfg.max_spin {
            // Found, but later than any spin would have waited.
            return;
        }
        self.catchable = smooth_u32(self.catchable, 256);
        self.probe_caught |= self.probing.is_some();
        // A probe's catches are judged when it ends (`expired`): whether
        // they left a window to spin with.
        if self.catchable >= CATCH_FLOOR && self.probing.is_none() {
            // Spinning pays again: a later stop starts a new interval at
            // its first wake, not the one this stop left.
            self.probe_every = PROBE_EVERY;
            self.probe_at = None;
        }
        if gap > self.caught_window() {
            self.saw_stall(gap);
        }
        self.gap = if gap >= self.gap {
            self.gap + (gap - self.gap) / (1 << SMOOTHING)
        } else {
            self.gap - (self.gap - gap) / (1 << SMOOTHING)
        };
    }

    /// A spin ended with nothing found: a miss (and the end of a probe).
    ///
    /// ```
    /// use evd_verbs::{AdaptiveConfig, SpinPolicy};
    /// use std::time::Duration;
    /// let mut p = SpinPolicy::new(AdaptiveConfig::default());
    /// for _ in 0..4 {
    ///     p.expired(); // spin after spin finds nothing
    /// }
    /// assert_eq!(p.spin_window(), Duration::ZERO); // the event-driven cycle
    /// ```
    pub fn expired(&mut self) {
        self.missed_since = self.last_completion;
        let probe = self.probing.take();
        self.catchable = smooth_u32(self.catchable, 0);
        if let Some(started) = probe {
            // A probe that caught nothing, or whose catches still leave
            // spinning off (too few, or gaps too short to be worth a spin),
            // backs the probes off and counts its length; one that turned
            // spinning back on resets them: its spin was the load's, not a
            // probe's cost (a minute's stream caught by it would otherwise
            // space the next probes by minutes), so the next probes are
            // spaced from the longest spin, as before any.
            (self.probe_every, self.probe_length) = if self.probe_caught && self.pays() {
                (PROBE_EVERY, self.cfg.max_spin)
            } else {
                (
                    (self.probe_every * 2).min(PROBE_EVERY_MAX),
                    self.probe_spun(started),
                )
            };
        }
        self.probe_caught = false;
    }

    /// Spinning pays: most spins catch, and the window they call for is
    /// worth starting (read outside a probe: a probe's window is the
    /// longest).
    fn pays(&self) -> bool {
        self.catchable >= CATCH_FLOOR && !self.spin_window().is_zero()
    }

    /// How long a probe started at `started` spun: it ends the longest
    /// window after its last find (or its wake).
    fn probe_spun(&self, started: Instant) -> Duration {
        let found = self
            .last_completion
            .map_or(Duration::ZERO, |l| l.saturating_duration_since(started));
        found.saturating_add(self.cfg.max_spin)
    }

    /// The feed was woken by its channel at `now`: the clock restarts, the
    /// averages stay. While spinning does not pay (or the window is zero),
    /// the first wake starts the probes' interval ([`PROBE_EVERY`] times the
    /// last probe's length, or the longest spin before any probe and after
    /// one that turned spinning back on; doubling after
    /// each probe that does not turn spinning back on, up to
    /// [`PROBE_EVERY_MAX`]), and the first wake once it has passed makes its
    /// spin a probe. With a longest spin of zero nothing probes.
    ///
    /// ```
    /// use evd_verbs::{AdaptiveConfig, SpinPolicy, PROBE_EVERY};
    /// use std::time::{Duration, Instant};
    /// let cfg = AdaptiveConfig::default();
    /// let mut p = SpinPolicy::new(cfg);
    /// for _ in 0..4 {
    ///     p.expired();
    /// }
    /// assert_eq!(p.spin_window(), Duration::ZERO);
    /// let t0 = Instant::now();
    /// for i in 0..PROBE_EVERY {
    ///     p.woken(t0 + cfg.max_spin * i); // however many wakes come sooner
    ///     assert_eq!(p.spin_window(), Duration::ZERO);
    /// }
    /// p.woken(t0 + cfg.max_spin * PROBE_EVERY);
    /// assert_eq!(p.spin_window(), cfg.max_spin); // this wake's spin probes
    /// ```
    pub fn woken(&mut self, now: Instant) {
        self.last_completion = Some(now);
        self.after_wake = true;
        // Probes come while spinning does not pay, and while the window is
        // zero for any reason (a window learned below the shortest useful
        // spin, or an initial window of zero): a policy that never spins
        // would otherwise never see a gap again, and never spin again.
        if self.probing.is_some() || self.cfg.max_spin.is_zero() {
            return;
        }
        if self.pays() {
            self.probe_at = None;
            return;
        }
        match self.probe_at {
            Some(at) if now >= at => {
                self.probe_at = None;
                self.probing = Some(now);
            }
            Some(_) => {}
            // An interval past what an `Instant` holds (an absurd
            // `max_spin`) never comes: no probe.
            None => {
                let interval = self.probe_length.saturating_mul(self.probe_every);
                self.probe_at = now.checked_add(interval);
            }
        }
    }

    /// The spin the feed was in (or was woken into) ended without a find
    /// or a miss deciding it: the EVD was full or closed, or the feed's
    /// turn failed or panicked. A probe in it ends undecided: the factor
    /// stays, the probe's length counts as if it had spun its window out
    /// after its last find (an upper bound), and the next probe waits its
    /// interval again; unless its catches turned spinning back on, which
    /// resets the probes as when such a probe's spin expires.
    pub(crate) fn spin_abandoned(&mut self) {
        if let Some(started) = self.probing.take() {
            if self.probe_caught && self.pays() {
                (self.probe_every, self.probe_length) = (PROBE_EVERY, self.cfg.max_spin);
            } else {
                self.probe_length = self.probe_spun(started);
            }
            self.probe_caught = false;
            self.probe_at = None;
        }
    }

    /// Completions that were already waiting were seen at `now` (the wake's
    /// own, a backlog beyond a poll's budget, a drain's): no catch; the
    /// clock restarts, and what the wake announced has been found.
    pub(crate) fn seen(&mut self, now: Instant) {
        self.close_missed_gap(now);
        self.last_completion = Some(now);
        self.after_wake = false;
    }
}

fn smooth_u32(avg: u32, sample: u32) -> u32 {
    let (avg, sample) = (i64::from(avg), i64::from(sample));
    (avg + (sample - avg) / (1 << SMOOTHING)) as u32
}

#[cfg(test)]
mod tests;
