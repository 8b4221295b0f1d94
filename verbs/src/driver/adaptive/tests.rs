//! The spin policy's promises, one test each, on a hand-driven clock: the
//! window and the stall estimate here, the probes in `probes`.

use super::*;

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

#[test]
fn a_steady_caught_stream_sets_t_to_four_gaps() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    let t0 = Instant::now();
    p.woken(t0);
    for i in 1..=40 {
        p.found(t0 + us(5 * i), 50);
    }
    let t = p.spin_window();
    assert!(t > us(19) && t <= us(20), "{t:?}");
    assert_eq!(p.limits(), Limits { idle: t });
}

#[test]
fn the_limits_are_the_window_alone_whatever_the_polls_per_gap() {
    // The same gaps caught after 5 or after 5,000 empty polls each (the
    // driver's turns eight times slower or faster): the same window, and
    // nothing else that could end a spin.
    let window = |empty_polls| {
        let mut p = SpinPolicy::new(AdaptiveConfig::default());
        let t0 = Instant::now();
        p.woken(t0);
        for i in 1..=40 {
            p.found(t0 + us(5 * i), empty_polls);
        }
        p.limits()
    };
    assert_eq!(window(5), window(5_000));
}

#[test]
fn misses_turn_spinning_off_and_catches_turn_it_back_on() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    for _ in 0..3 {
        p.expired();
    }
    assert_eq!(p.limits(), Limits::EVENT);
    let mut t = Instant::now();
    p.woken(t);
    for _ in 0..4 {
        t += us(3);
        p.found(t, 10);
    }
    assert!(!p.spin_window().is_zero());
}

#[test]
fn only_spins_move_the_share_wakes_only_restart_the_clock() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    p.expired(); // a share a wake counted as a catch or a miss would move
    let share = p.catchable;
    assert!(share < 256);
    let mut t = Instant::now();
    for _ in 0..100 {
        t += us(500);
        p.woken(t);
        assert_eq!(p.last_completion, Some(t), "the clock restarts");
    }
    assert_eq!(p.catchable, share);
    assert!(!p.spin_window().is_zero());
}

#[test]
fn the_first_poll_after_a_wake_finding_the_wakes_completions_is_not_a_catch() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    for _ in 0..3 {
        p.expired();
    }
    let share = p.catchable;
    let t = Instant::now();
    p.woken(t);
    p.found(t, 0);
    assert_eq!(p.catchable, share);
    assert_eq!(p.gap, SpinPolicy::new(AdaptiveConfig::default()).gap);
    // The next find is a catch.
    p.found(t + us(2), 0);
    assert!(p.catchable > share);
}

#[test]
fn a_late_find_is_neither_a_catch_nor_a_gap() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    p.expired(); // a share a catch would move
    let t = Instant::now();
    p.woken(t);
    let before = (p.gap, p.catchable);
    p.found(t + us(200), 5);
    assert_eq!((p.gap, p.catchable), before);
}

#[test]
fn bursts_with_one_miss_each_keep_spinning() {
    // 16 completions 2 µs apart, caught, then the spin ends empty: 15
    // catches and one miss per burst.
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    let mut t = Instant::now();
    for _ in 0..10 {
        t += Duration::from_millis(2);
        p.woken(t);
        assert!(!p.spin_window().is_zero(), "after the long gap");
        for _ in 0..15 {
            t += us(2);
            p.found(t, 30);
        }
        p.expired();
    }
    let w = p.spin_window();
    assert!(w >= us(7) && w <= us(9), "{w:?}");
}

/// A policy that caught a 2 µs stream after 20 empty polls a gap, as
/// of `t`: `T` 8 µs.
fn caught_two_microsecond_gaps(t: &mut Instant) -> SpinPolicy {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    p.woken(*t);
    for _ in 0..40 {
        *t += us(2);
        p.found(*t, 20);
    }
    let w = p.spin_window();
    assert!(w >= us(8) && w < Duration::from_nanos(8_100), "{w:?}");
    p
}

#[test]
fn a_miss_the_wake_shows_was_inside_a_burst_widens_t() {
    let mut t = Instant::now();
    let mut p = caught_two_microsecond_gaps(&mut t);
    p.expired();
    t += us(30);
    p.woken(t);
    assert_eq!(p.stall(), Duration::ZERO, "a wake alone closes no gap");
    p.found(t, 0);
    assert_eq!(p.stall(), us(30));
    assert_eq!(p.spin_window(), us(30));
    // Catches of short gaps afterwards do not shrink it; a shorter
    // stall, waited out, does not either.
    for _ in 0..20 {
        t += us(2);
        p.found(t, 20);
    }
    assert_eq!(p.stall(), us(30));
    t += us(12);
    p.found(t, 120);
    assert_eq!(p.stall(), us(30));
}

#[test]
fn the_arms_own_drain_closes_the_missed_gap_too() {
    let mut t = Instant::now();
    let mut p = caught_two_microsecond_gaps(&mut t);
    p.expired();
    t += us(9);
    p.seen(t);
    assert_eq!(p.stall(), us(9));
    assert_eq!(p.spin_window(), us(9));
    // The gap is closed: a later find is not a second sample of it.
    t += us(40);
    p.seen(t);
    assert_eq!(p.stall(), us(9));
}

#[test]
fn misses_at_the_real_end_of_bursts_let_the_stall_estimate_decay() {
    let mut t = Instant::now();
    let mut p = caught_two_microsecond_gaps(&mut t);
    p.expired();
    t += us(40);
    p.woken(t);
    p.found(t, 0);
    assert_eq!(p.stall(), us(40));
    let mut stalls = vec![];
    for _ in 0..12 {
        // A burst of caught 2 µs gaps, a miss, 2 ms of idle.
        for _ in 0..30 {
            t += us(2);
            p.found(t, 20);
        }
        p.expired();
        t += Duration::from_millis(2);
        p.woken(t);
        p.found(t, 0);
        stalls.push(p.stall());
    }
    assert_eq!(stalls[0], us(40), "the burst that had the stall keeps it");
    assert_eq!(stalls[1], us(30), "a burst without one: down by a quarter");
    assert!(stalls.windows(2).all(|w| w[1] <= w[0]), "{stalls:?}");
    assert!(
        p.spin_window() < Duration::from_nanos(8_100),
        "back to the caught window"
    );
}

#[test]
fn gaps_beyond_the_spin_limit_never_raise_the_stall_estimate() {
    let mut t = Instant::now();
    let mut p = caught_two_microsecond_gaps(&mut t);
    for _ in 0..20 {
        p.expired();
        t += us(51);
        p.woken(t);
        p.found(t, 0);
        assert_eq!(p.stall(), Duration::ZERO);
        t += us(2);
        p.found(t, 20);
    }
    // The limit itself is catchable.
    p.expired();
    t += us(50);
    p.woken(t);
    p.found(t, 0);
    assert_eq!(p.stall(), us(50));
}

/// Drive `p` as the driver would through one burst of 2 µs gaps (about
/// ten polls per µs) in which gap `stall_at` lasts `stall` instead, then
/// the burst's end and 2 ms of idle; each gap the spin does not cover is
/// a miss, an arm and a wake 5 µs late. Returns the misses inside the
/// burst.
fn burst(p: &mut SpinPolicy, t: &mut Instant, stall_at: usize, stall: Duration) -> u32 {
    let mut misses = 0;
    for i in 0..30 {
        let gap = if i == stall_at { stall } else { us(2) };
        let polls = (gap.as_nanos() / 100) as u32;
        if gap < p.spin_window() {
            *t += gap;
            p.found(*t, polls);
        } else {
            misses += 1;
            p.expired();
            *t += gap + us(5);
            p.woken(*t);
            p.found(*t, 0);
        }
    }
    p.expired();
    *t += Duration::from_millis(2);
    p.woken(*t);
    p.found(*t, 0);
    misses
}

#[test]
fn one_stall_per_burst_is_missed_once_then_spun_through() {
    let mut t = Instant::now();
    let mut p = caught_two_microsecond_gaps(&mut t);
    let misses: Vec<u32> = (0..12).map(|_| burst(&mut p, &mut t, 10, us(30))).collect();
    assert_eq!(misses[0], 1, "{misses:?}");
    assert!(misses[1..].iter().all(|&m| m == 0), "{misses:?}");
    assert!(p.stall() >= us(30), "{:?}", p.stall());
    // The stalls stop: a quarter off per burst, back to the caught window.
    for _ in 0..12 {
        assert_eq!(burst(&mut p, &mut t, usize::MAX, us(2)), 0);
    }
    assert!(p.stall() < us(2), "{:?}", p.stall());
    assert!(p.spin_window() < Duration::from_nanos(8_100));
}

#[test]
fn the_window_stays_within_its_bounds() {
    let cfg = AdaptiveConfig {
        min_spin: us(2),
        max_spin: us(30),
        initial_spin: us(100),
    };
    let mut p = SpinPolicy::new(cfg);
    assert_eq!(p.spin_window(), us(30));
    let mut t = Instant::now();
    p.woken(t);
    for _ in 0..20 {
        t += us(25);
        p.found(t, 1000);
    }
    assert_eq!(p.spin_window(), us(30));
    for _ in 0..20 {
        p.expired();
    }
    assert_eq!(
        p.spin_window(),
        us(2),
        "min_spin is a floor even when nothing is caught"
    );
}

#[test]
fn a_floor_above_the_ceiling_is_the_window_and_never_panics() {
    let cfg = AdaptiveConfig::default()
        .with_min_spin(us(80))
        .with_max_spin(us(20));
    let mut p = SpinPolicy::new(cfg);
    assert_eq!(p.spin_window(), us(80));
    let mut t = Instant::now();
    for _ in 0..4 {
        burst(&mut p, &mut t, 10, us(200));
    }
    assert_eq!(p.spin_window(), us(80));
}

#[test]
fn caught_gaps_past_a_quarter_of_the_longest_duration_never_panic() {
    // No ceiling, and a caller's clock that made the caught gaps average
    // more than `Duration::MAX / MARGIN`: the window saturates.
    let mut p = SpinPolicy::new(AdaptiveConfig::default().with_max_spin(Duration::MAX));
    p.gap = Duration::MAX / 2;
    assert_eq!(p.spin_window(), Duration::MAX);
    let t = Instant::now();
    p.woken(t);
    p.found(t + us(1), 3);
    assert_eq!(p.spin_window(), Duration::MAX);
}

#[test]
fn a_floor_below_the_shortest_useful_spin_is_still_a_floor() {
    let min = Duration::from_nanos(200);
    let cfg = AdaptiveConfig::default()
        .with_min_spin(min)
        .with_initial_spin(min);
    let mut p = SpinPolicy::new(cfg);
    assert_eq!(p.spin_window(), min, "fresh");
    for _ in 0..4 {
        p.expired();
    }
    assert_eq!(p.spin_window(), min, "after misses");
}

#[test]
fn once_the_wakes_completions_were_seen_the_next_find_is_a_catch() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    for _ in 0..3 {
        p.expired();
    }
    let share = p.catchable;
    let t = Instant::now();
    p.woken(t);
    p.seen(t); // the wake's own completions, found by the first poll
    assert_eq!(p.catchable, share);
    p.found(t + us(2), 0); // an arrival, found by the very next poll
    assert!(p.catchable > share);
}

mod probes;
