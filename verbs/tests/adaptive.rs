//! The adaptive spin policy follows the arrival pattern: its window `T` and
//! empty-poll limit `K` come from the gaps it sees, within the configured
//! bounds.

use evd_verbs::{AdaptiveConfig, SpinPolicy};
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
        // Woken after a long idle gap: not catchable, but one in 64.
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
            assert!(p.empty_poll_limit() >= 8);
            p.found(t, 30);
        }
    }
    assert!(p.spin_window() <= cfg.max_spin);
}

#[test]
fn sparse_arrivals_fall_back_to_the_event_cycle() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    let mut t = Instant::now();
    for _ in 0..40 {
        t += Duration::from_millis(1);
        p.woken(t);
    }
    assert_eq!(p.spin_window(), Duration::ZERO);
    assert_eq!(p.empty_poll_limit(), 0);
}

#[test]
fn round_trips_beyond_the_limit_stop_the_spin_within_a_few_wakes() {
    // A ping-pong whose round trip (80 µs) exceeds max_spin (50 µs): every
    // spin would expire, so the policy must stop spinning after a few.
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    let mut t = Instant::now();
    p.woken(t);
    let mut spun = 0;
    for _ in 0..20 {
        if !p.spin_window().is_zero() {
            spun += 1;
        }
        t += us(80);
        p.woken(t);
    }
    assert!(spun <= 3, "spun after {spun} of 20 wakes");
}

#[test]
fn the_window_and_the_poll_limit_stay_within_their_bounds() {
    let cfg = AdaptiveConfig {
        min_spin: us(1),
        max_spin: us(30),
        initial_spin: us(1),
        max_empty_polls: 500,
    };
    let mut p = SpinPolicy::new(cfg);
    let t = Instant::now();
    p.woken(t);
    for i in 1..=30 {
        p.found(t + us(25 * i), 100_000); // 100 µs wanted, capped at 30
    }
    assert_eq!(p.spin_window(), us(30));
    assert_eq!(p.empty_poll_limit(), 500);
}
