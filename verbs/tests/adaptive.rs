//! The adaptive spin policy follows the arrival pattern: its window `T`
//! comes from the gaps it sees, within the configured bounds.

use evd_verbs::{AdaptiveConfig, PROBE_EVERY_MAX, SpinPolicy};
use std::time::{Duration, Instant};

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

#[test]
fn bursts_keep_the_window_above_the_intra_burst_gap() {
    let cfg = AdaptiveConfig::default();
    let mut p = SpinPolicy::new(cfg);
    let mut t = Instant::now();
    for _burst in 0..100 {
        // Woken after a long idle gap; the burst's 63 completions are
        // caught, then the spin past its end finds nothing: one miss in 64.
        t += Duration::from_millis(2);
        p.woken(t);
        for _ in 0..63 {
            t += us(3);
            // Every completion of the burst arrives within the window.
            assert!(
                p.spin_window() >= us(3),
                "window {:?} shorter than the gap",
                p.spin_window()
            );
            p.found(t, 30);
        }
        p.expired();
    }
    assert!(p.spin_window() <= cfg.max_spin);
}

/// What the driver does with a wake: spin if the policy says so; with
/// arrivals `gap` apart and `gap` beyond the limit, every spin ends empty.
fn wake_then_spin_in_vain(p: &mut SpinPolicy, t: Instant) -> bool {
    p.woken(t);
    let spun = !p.spin_window().is_zero();
    if spun {
        p.expired();
    }
    spun
}

#[test]
fn sparse_arrivals_fall_back_to_the_event_cycle() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    let mut t = Instant::now();
    for _ in 0..40 {
        t += Duration::from_millis(1);
        wake_then_spin_in_vain(&mut p, t);
    }
    assert_eq!(p.spin_window(), Duration::ZERO);
}

#[test]
fn round_trips_beyond_the_limit_stop_the_spin_and_probes_back_off() {
    // A ping-pong whose round trip (80 µs) exceeds max_spin (50 µs): every
    // spin expires, so the policy stops spinning after a few, and its probes
    // come ever more rarely (8, 16, 32, ... longest spins apart, up to 256).
    let cfg = AdaptiveConfig::default();
    let mut p = SpinPolicy::new(cfg);
    let start = Instant::now();
    let mut t = start;
    let mut spun = 0;
    for _ in 0..20_000 {
        t += us(80);
        if wake_then_spin_in_vain(&mut p, t) {
            spun += 1;
        }
    }
    // 3 spins before the share drops, then probes 8, 16, 32, 64 and 128
    // longest spins apart, then one per 256: spinning in vain takes at most
    // one part in 256 of the time, once backed off, and no less (the
    // backing off stops at 256: the policy keeps probing). The run is long
    // enough for the 256s to outnumber the rest: an uncapped doubling would
    // probe a dozen times.
    let backed_off = (t - start).as_nanos() / (cfg.max_spin * PROBE_EVERY_MAX).as_nanos();
    let backed_off = backed_off as u32;
    assert!(
        backed_off <= spun && spun <= 3 + 5 + backed_off + 1,
        "spun after {spun} of 20 000 wakes, {backed_off} periods of 256 longest spins"
    );
}

#[test]
fn the_window_stays_within_the_configured_bounds() {
    let cfg = AdaptiveConfig::default()
        .with_min_spin(us(1))
        .with_max_spin(us(30))
        .with_initial_spin(us(1));
    let mut p = SpinPolicy::new(cfg);
    let t = Instant::now();
    p.woken(t);
    for i in 1..=30 {
        p.found(t + us(25 * i), 100_000); // 100 µs wanted, capped at 30
    }
    assert_eq!(p.spin_window(), us(30));
    // A fresh policy on 100 ns gaps (400 ns wanted) is raised to the floor.
    let mut p = SpinPolicy::new(cfg);
    p.woken(t);
    for i in 1..=30 {
        p.found(t + Duration::from_nanos(100 * i), 0);
    }
    assert_eq!(p.spin_window(), us(1));
}
