//! Pacing: keeping the consumer off the posters' cache lines while the ring
//! runs, and the posters' stores on lines they already own.
//!
//! # Why
//!
//! A post is one locked instruction (the reservation CAS) and a few plain
//! stores (the slot's value and stamp). A locked instruction is a full
//! barrier: it waits until the store buffer has drained, so each CAS waits
//! for the previous post's slot stores to reach the cache. Those stores miss
//! whenever the consumer has just read that slot's line, which is what a
//! consumer faster than its posters does: it runs the ring near-empty and
//! polls the very line the posters are writing. Every poll then moves the
//! line to the consumer and every store moves it back, and the next CAS waits
//! for that. On CPUs whose locked instructions are cheap (AMD EPYC, about
//! 3 ns uncontended) this hides behind the CAS; on those where they cost
//! 10–11 ns and drain the store buffer strictly (Intel Xeon), it halves the
//! rate of the ring, below that of a queue (crossbeam's `ArrayQueue`) whose
//! slower consumer never catches up with its posters.
//!
//! # What
//!
//! Two halves, each cheap where it is not needed:
//!
//! * **The poster asks for its lines early.** After its reservation, a post
//!   issues a write prefetch ([`prefetch_for_write`]) for the slot
//!   [`PREFETCH_AHEAD`] tickets ahead of its own, so that by the time a later
//!   post writes that slot the line is already owned by a poster, and the
//!   stores that the next CAS waits for hit. One instruction, no shared
//!   write; a hint, so it cannot be wrong, only useless.
//! * **The consumer lets the posters get ahead after a run.** A dequeue that
//!   finds the head slot unpublished right after a run of at least
//!   [`RUN`] dequeues ([`Pacer::after_run`]) does not report "empty" at
//!   once: it waits ([`Pacer::linger`]) for the linger time by the clock,
//!   reading no line any poster writes, then looks once more. While the ring
//!   runs, that look finds a batch of events published in lines their
//!   posters finished with, and the next empty poll is many events later;
//!   the empty polls per event fall from about 0.2 to near 0. A batch
//!   dequeue that takes a run and whose scan stops at an unpublished slot
//!   has drained the ring and read the line a poster is writing, just as an
//!   empty poll does: the next batch lingers before it scans
//!   ([`Pacer::batch_taken`], [`Pacer::take_drained`]); otherwise a batch
//!   consumer would chase the posters in small batches, each ending on
//!   their line, and never see an empty poll. A consumer that cannot keep
//!   up takes full batches, or the whole ring (a batch is judged against at
//!   most the ring's capacity), and never lingers this way. A batch whose scan
//!   stops within [`SHORT_BATCH`] slots of the head after a run lingers
//!   like an empty poll. A consumer whose traffic comes one event at a time
//!   (a ping-pong, a request and its reply) never has a run, so it never
//!   lingers, and its busy polling keeps its latency at the floor. A run
//!   that really ended costs one linger, once: the next empty poll is not
//!   after a run.
//! * **A waiter looks in gaps.** A blocking wait's back-off waits one gap
//!   ([`Pacer::gap`], as long as a linger) between two looks at the slots.
//!
//! The linger time is measured in the posters' own pace, not in spin counts
//! or PAUSE instructions (whose cost differs tenfold between CPUs): a linger
//! starts when the consumer has just drained the ring, so the events it
//! dequeues from one linger's start to the next are those the posters
//! posted meanwhile, and their quotient by the clock is the posters' pace.
//! The linger is [`LINGER_EVENTS`] events at that pace, held between
//! [`LINGER_MIN`] and [`LINGER_MAX`]: long enough for the posters to fill a
//! few lines, short enough that a run that really ended costs little.
//! [`Consumer::set_linger_cap`](crate::Consumer::set_linger_cap) caps it
//! (zero turns lingering off). A linger or a gap reads the clock once to
//! start and once per spin pass until it is over; a post and a dequeue that
//! finds an event read it never.
//!
//! # Correctness
//!
//! Nothing here is part of the protocol. The prefetch writes nothing and is
//! issued only where CPUID reports it ([`has_prefetch_for_write`]). The
//! linger reads only the consumer's own line and the clock, and is followed
//! by the same stamp check a dequeue makes anyway; skipping it (as loom and
//! shuttle do: they have no clock) changes only when "empty" is reported, and
//! "empty" was always a snapshot.

// loom and shuttle have no clock: the pace is neither measured nor used there.
#![cfg_attr(any(loom, shuttle), allow(dead_code))]

// std's atomics even under loom and shuttle: the pacer is no part of the
// protocol (it orders nothing and is read only by the thread that writes it),
// and the models need not explore its loads and stores.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A dequeue that finds nothing after at least this many dequeues since the
/// last such find lingers. Two, so that a strict ping-pong (one event, then
/// nothing) never lingers.
pub(crate) const RUN: u64 = 2;

/// A batch dequeue whose scan stops (at an unpublished slot) within this
/// many slots of the head reads the line a poster is writing, as an empty
/// poll does: after a run it lingers too. A cache line of `u64` slots.
pub(crate) const SHORT_BATCH: u64 = 4;

/// A batch scan found `n` of at most `max` events ready: it stopped short,
/// at a slot a poster has not yet published, a few slots from the head.
#[inline(always)]
pub(crate) fn is_short(n: u64, max: u64) -> bool {
    n < max && n < SHORT_BATCH
}

/// The linger lasts this many events at the pace of the last run.
pub(crate) const LINGER_EVENTS: u64 = 24;

/// The shortest linger: below this the clock's own cost (two reads, tens of
/// nanoseconds) is a large part of it.
pub(crate) const LINGER_MIN: Duration = Duration::from_nanos(200);

/// The longest linger, and the default cap: a busy-polling consumer whose
/// run really ended loses at most this once per run.
pub(crate) const LINGER_MAX: Duration = Duration::from_micros(2);

/// How many tickets ahead of its own a post prefetches. A count of posts,
/// not of bytes: the prefetch must be issued early enough for the line to
/// arrive before the post that writes it, and that is a matter of time
/// (eight posts are a few hundred nanoseconds, a cross-core line transfer is
/// one or two hundred), whatever the slot's size. Nearer (one slot ahead)
/// the line comes too late; much farther (16-32 `u64` posts) it reaches
/// into lines the posters will not write for a while and helps less.
pub(crate) const PREFETCH_AHEAD: u64 = 8;

/// The consumer side's pacing state, in the consumer's own line. Touched only
/// by the consumer side (the token holder, under upcalls), and only when a
/// dequeue finds nothing.
pub(crate) struct Pacer {
    /// The head at the last dequeue that found nothing (lingered or not).
    quiet_head: AtomicU64,
    /// The linger cap in nanoseconds (`Consumer::set_linger`); 0: never.
    cap_ns: AtomicU64,
    /// The pace of the last run: nanoseconds per event, as a fixed-point
    /// value (<< 8), 0 until a run has been timed.
    pace: AtomicU64,
    /// When the last linger started (nanoseconds since the pacer's epoch),
    /// and the head then: the ring was drained at that moment, so the events
    /// dequeued between it and the next linger's start are those the posters
    /// posted in that time, and their quotient is the posters' pace. 0: no
    /// run to time (a quiet poll came between).
    run_start_ns: AtomicU64,
    run_start_head: AtomicU64,
    drained: std::sync::atomic::AtomicBool,
    #[cfg(not(any(loom, shuttle)))]
    epoch: std::time::Instant,
}

impl Pacer {
    pub(crate) fn new(head: u64) -> Self {
        Pacer {
            quiet_head: AtomicU64::new(head),
            cap_ns: AtomicU64::new(LINGER_MAX.as_nanos() as u64),
            pace: AtomicU64::new(0),
            run_start_ns: AtomicU64::new(0),
            run_start_head: AtomicU64::new(head),
            drained: std::sync::atomic::AtomicBool::new(false),
            #[cfg(not(any(loom, shuttle)))]
            epoch: std::time::Instant::now(),
        }
    }

    /// A batch dequeue took `n` of at most `max` events. If it took a run
    /// and its scan stopped at an unpublished slot (it drained the ring, and
    /// read the line a poster is writing), the next batch lingers before it
    /// scans ([`Pacer::take_drained`]). A consumer that cannot keep up takes
    /// full batches and never lingers this way; one that keeps up lingers
    /// once per batch, while its posters fill the next.
    #[inline]
    pub(crate) fn batch_taken(&self, n: u64, max: u64) {
        if n < max && n >= RUN && self.cap_ns.load(Ordering::Relaxed) != 0 {
            self.drained.store(true, Ordering::Relaxed);
        }
    }

    /// True (once) if the last batch drained the ring after a run: linger
    /// now. The head `h` is then the last quiet point.
    #[inline]
    pub(crate) fn take_drained(&self, h: u64) -> bool {
        if !self.drained.load(Ordering::Relaxed) {
            return false;
        }
        self.drained.store(false, Ordering::Relaxed);
        self.quiet_head.store(h, Ordering::Relaxed);
        true
    }

    /// True if a linger started and no quiet poll came after it.
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn has_lingered(&self) -> bool {
        self.run_start_ns.load(Ordering::Relaxed) != 0
    }

    /// Cap the linger at `cap` (zero: never linger).
    pub(crate) fn set_cap(&self, cap: Duration) {
        let ns = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        self.cap_ns.store(ns, Ordering::Relaxed);
    }

    /// The linger cap.
    pub(crate) fn cap(&self) -> Duration {
        Duration::from_nanos(self.cap_ns.load(Ordering::Relaxed))
    }

    /// A dequeue at head `h` found nothing: true if it came right after a
    /// run and should [`linger`](Pacer::linger), then look once more. Either
    /// way `h` is now the last quiet head.
    #[inline]
    pub(crate) fn after_run(&self, h: u64) -> bool {
        // Relaxed: the consumer side's own field (the upcall token's
        // hand-offs order it between holders).
        // A load and a store, not a swap: only this thread writes the field,
        // so it needs no locked instruction.
        let last = self.quiet_head.load(Ordering::Relaxed);
        self.quiet_head.store(h, Ordering::Relaxed);
        let run = h.wrapping_sub(last) >= RUN && self.cap_ns.load(Ordering::Relaxed) != 0;
        if !run && self.run_start_ns.load(Ordering::Relaxed) != 0 {
            // A quiet poll between two lingers: the next run starts later
            // than the last linger's end, so it is not timed.
            self.run_start_ns.store(0, Ordering::Relaxed);
        }
        run
    }

    /// Wait for the linger time by the clock, reading nothing any poster
    /// writes. Called only after [`Pacer::after_run`] said so.
    #[cold]
    #[inline(never)]
    pub(crate) fn linger(&self, h: u64) {
        #[cfg(not(any(loom, shuttle)))]
        {
            let now = self.now_ns();
            self.learn_pace(now, h);
            self.run_start_ns.store(now, Ordering::Relaxed);
            self.run_start_head.store(h, Ordering::Relaxed);
            self.spin_until(now.saturating_add(self.linger_ns()));
        }
        #[cfg(any(loom, shuttle))]
        {
            // No clock: the linger is a yield, so that a model explores the
            // look after it with posts in between.
            let _ = h;
            crate::sync::thread::yield_now();
        }
    }

    /// One gap between two looks of a waiter's back-off: as long as a
    /// linger, by the clock, reading nothing any poster writes.
    #[cold]
    pub(crate) fn gap(&self) {
        #[cfg(not(any(loom, shuttle)))]
        {
            self.spin_until(self.now_ns().saturating_add(self.linger_ns().max(1)));
        }
        #[cfg(any(loom, shuttle))]
        crate::sync::thread::yield_now();
    }

    /// The run that ends at head `h` and time `now`: from the end of the
    /// last linger, if that was its start (no quiet poll in between moved it).
    #[cfg(not(any(loom, shuttle)))]
    fn learn_pace(&self, now: u64, h: u64) {
        let start = self.run_start_ns.load(Ordering::Relaxed);
        let events = h.wrapping_sub(self.run_start_head.load(Ordering::Relaxed));
        if start == 0 || events < RUN || now <= start {
            return;
        }
        // Fixed point, saturating: a run that took longer than the longest
        // linger is only ever used clamped to it.
        let pace = (now - start).saturating_mul(256) / events;
        self.pace.store(pace, Ordering::Relaxed);
    }

    /// The linger: [`LINGER_EVENTS`] at the last run's pace, within
    /// [`LINGER_MIN`]..=[`LINGER_MAX`] and under the cap.
    #[cfg(not(any(loom, shuttle)))]
    fn linger_ns(&self) -> u64 {
        let pace = self.pace.load(Ordering::Relaxed);
        let want = if pace == 0 {
            LINGER_MIN.as_nanos() as u64
        } else {
            pace.saturating_mul(LINGER_EVENTS) >> 8
        };
        let want = want.clamp(LINGER_MIN.as_nanos() as u64, LINGER_MAX.as_nanos() as u64);
        want.min(self.cap_ns.load(Ordering::Relaxed))
    }

    /// Spin until the clock reads `until` (nanoseconds since the epoch).
    #[cfg(not(any(loom, shuttle)))]
    fn spin_until(&self, until: u64) {
        while self.now_ns() < until {
            std::hint::spin_loop();
        }
    }

    #[cfg(not(any(loom, shuttle)))]
    fn now_ns(&self) -> u64 {
        // Nanoseconds since the epoch; never 0 after the first (the epoch
        // itself is read before any linger).
        self.epoch.elapsed().as_nanos() as u64 | 1
    }
}

/// True if this CPU has a write prefetch that [`prefetch_for_write`] may
/// issue: on x86-64, CPUID's PREFETCHW flag (leaf 0x8000_0001, ECX bit 8;
/// AMD since long ago, Intel since Broadwell). Intel's manual does not say
/// what a CPU without the flag does with the instruction, so it is only
/// issued where the flag is set. Read once per process.
pub(crate) fn has_prefetch_for_write() -> bool {
    #[cfg(all(target_arch = "x86_64", not(any(loom, shuttle, miri))))]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            use std::arch::x86_64::__cpuid;
            // CPUID is on every x86-64 CPU; the extended leaf is read only
            // if the CPU reports it.
            #[allow(unused_unsafe)]
            // SAFETY: CPUID exists on every x86-64 CPU and has no effect.
            let max_extended = unsafe { __cpuid(0x8000_0000) }.eax;
            #[allow(unused_unsafe)]
            // SAFETY: as above; the leaf is within the reported range.
            let ecx = (max_extended >= 0x8000_0001).then(|| unsafe { __cpuid(0x8000_0001) }.ecx);
            ecx.is_some_and(|ecx| ecx & (1 << 8) != 0)
        })
    }
    #[cfg(not(all(target_arch = "x86_64", not(any(loom, shuttle, miri)))))]
    false
}

/// Ask for the cache line at `p` in a state this core can write, without
/// waiting for it. A hint: no fault, no effect on what any thread reads.
/// Only where [`has_prefetch_for_write`] says so.
#[inline(always)]
pub(crate) fn prefetch_for_write<U>(p: *const U) {
    #[cfg(all(target_arch = "x86_64", not(any(loom, shuttle, miri))))]
    // SAFETY: `prefetchw` only hints the cache: it never faults, whatever
    // the address, and writes no register or memory. The caller issues it
    // only where CPUID reports it (`has_prefetch_for_write`).
    unsafe {
        std::arch::asm!(
            "prefetchw [{p}]",
            p = in(reg) p,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(any(loom, shuttle, miri)))))]
    let _ = p;
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;

    #[test]
    fn only_a_dequeue_after_a_run_lingers() {
        let p = Pacer::new(0);
        assert!(!p.after_run(0), "nothing dequeued yet");
        assert!(!p.after_run(1), "one event is no run");
        assert!(p.after_run(3), "two dequeues since the last quiet poll");
        assert!(!p.after_run(3), "the next poll is not after a run");
    }

    #[test]
    fn a_zero_cap_never_lingers() {
        let p = Pacer::new(0);
        p.set_cap(Duration::ZERO);
        assert!(!p.after_run(100));
        assert_eq!(p.cap(), Duration::ZERO);
    }

    #[test]
    fn the_linger_follows_the_last_runs_pace_within_its_bounds() {
        let p = Pacer::new(0);
        assert_eq!(
            p.linger_ns(),
            LINGER_MIN.as_nanos() as u64,
            "untimed: the minimum"
        );
        // A run of 100 events in 2 µs: 20 ns each.
        p.run_start_ns.store(1_000, Ordering::Relaxed);
        p.run_start_head.store(0, Ordering::Relaxed);
        p.learn_pace(3_000, 100);
        assert_eq!(p.linger_ns(), 20 * LINGER_EVENTS);
        // A slow run: held at the maximum.
        p.learn_pace(1_000_000, 100);
        assert_eq!(p.linger_ns(), LINGER_MAX.as_nanos() as u64);
        // Under a lower cap.
        p.set_cap(Duration::from_nanos(300));
        assert_eq!(p.linger_ns(), 300);
    }

    #[test]
    fn a_run_timed_after_a_long_idle_saturates_at_the_longest_linger() {
        let p = Pacer::new(0);
        p.run_start_ns.store(1, Ordering::Relaxed);
        p.learn_pace(u64::MAX / 2, 2);
        assert_eq!(p.linger_ns(), LINGER_MAX.as_nanos() as u64);
    }

    #[test]
    fn a_linger_waits_by_the_clock() {
        let p = Pacer::new(0);
        let start = std::time::Instant::now();
        p.linger(10);
        assert!(start.elapsed() >= LINGER_MIN, "it waited its minimum");
    }
}
