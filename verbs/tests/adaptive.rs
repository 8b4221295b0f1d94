//! The adaptive spin policy follows the arrival pattern.

use evd_verbs::{AdaptiveConfig, SpinPolicy};
use std::time::{Duration, Instant};

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

#[test]
fn bursts_keep_the_spin_above_the_intra_burst_gap() {
    let cfg = AdaptiveConfig::default();
    let mut p = SpinPolicy::new(cfg);
    let mut t = Instant::now();
    for _burst in 0..100 {
        // Woken after a long idle gap: no raise from that gap.
        t += Duration::from_millis(2);
        p.woken(t);
        for _ in 0..63 {
            t += us(3);
            // Every completion of the burst arrives within the spin.
            assert!(
                p.spin() >= us(3),
                "spin {:?} shorter than the gap",
                p.spin()
            );
            p.found(t);
        }
        p.expired();
    }
    assert!(p.should_spin());
    assert!(p.spin() <= cfg.max_spin);
}

#[test]
fn sparse_arrivals_decay_to_pure_event_mode() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    let mut t = Instant::now();
    for _ in 0..40 {
        t += Duration::from_millis(1);
        p.woken(t);
        // Nothing more arrives while spinning.
        p.expired();
    }
    assert!(!p.should_spin(), "still spinning {:?}", p.spin());
}

#[test]
fn a_short_sleep_raises_the_spin_and_max_bounds_it() {
    let cfg = AdaptiveConfig {
        min_spin: us(1),
        max_spin: us(30),
        initial_spin: us(1),
    };
    let mut p = SpinPolicy::new(cfg);
    let t = Instant::now();
    p.woken(t);
    p.woken(t + us(5)); // slept, but only 5 µs: spinning 20 µs would have caught it
    assert_eq!(p.spin(), us(20));
    p.found(t + us(25)); // a 20 µs gap: 80 µs wanted, capped at 30
    assert_eq!(p.spin(), us(30));
    p.found(t + us(1025)); // a 1 ms gap is slept through, not covered
    assert_eq!(p.spin(), us(30));
    for _ in 0..100 {
        p.expired();
    }
    assert_eq!(p.spin(), us(1));
}
