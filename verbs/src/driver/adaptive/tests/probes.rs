//! The probes' promises: while spinning does not pay, a probe now and then
//! (spaced by the clock, backed off while they fail), so that a load that
//! turns catchable is noticed.

use super::*;

#[test]
fn while_spinning_does_not_pay_a_wake_probes_once_probe_every_longest_spins_passed() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    for _ in 0..4 {
        p.expired();
    }
    let max_spin = us(50);
    let interval = max_spin * PROBE_EVERY;
    let t0 = Instant::now();
    // However many wakes come before the interval is up: none probes.
    for i in 0..10_000u32 {
        p.woken(t0 + interval * i / 10_000);
        assert_eq!(p.limits(), Limits::EVENT, "wake {i}");
    }
    p.woken(t0 + interval);
    assert_eq!(p.limits(), Limits { idle: max_spin });
    p.expired();
    assert_eq!(p.limits(), Limits::EVENT);
    // That probe caught nothing: the next comes twice as late, counted
    // from the first wake after it.
    let t1 = t0 + interval + us(1);
    for i in 0..10_000u32 {
        p.woken(t1 + interval * 2 * i / 10_000);
        assert_eq!(p.limits(), Limits::EVENT, "wake {i} after the probe");
    }
    p.woken(t1 + interval * 2);
    assert_eq!(p.limits(), Limits { idle: max_spin });
}

#[test]
fn a_probe_cut_short_ends_undecided_and_the_next_waits_its_interval() {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    for _ in 0..4 {
        p.expired();
    }
    let interval = us(50) * PROBE_EVERY;
    let t0 = Instant::now();
    p.woken(t0);
    p.woken(t0 + interval);
    assert!(!p.spin_window().is_zero(), "probing");
    // The EVD filled up in the probe's spin: no miss, no catch.
    p.spin_abandoned();
    assert_eq!(p.limits(), Limits::EVENT, "the probe is over");
    let t1 = t0 + interval + us(1);
    p.woken(t1);
    p.woken(t1 + interval - us(1));
    assert_eq!(p.limits(), Limits::EVENT, "the same interval, not doubled");
    p.woken(t1 + interval);
    assert_eq!(p.limits(), Limits { idle: us(50) });
}

#[test]
fn abandoning_a_spin_that_is_no_probe_changes_nothing() {
    let mut t = Instant::now();
    let mut p = caught_two_microsecond_gaps(&mut t);
    let before = p.limits();
    p.spin_abandoned();
    assert_eq!(p.limits(), before);
}

/// A default policy after a wake and a burst of 40 completions 100 ns
/// apart, each caught after `empty_polls` empty polls, then a spin that
/// ended empty: its window is learned below the shortest useful spin
/// (zero), with catches still common. The policy and the clock's time.
fn after_a_burst_100_ns_apart(empty_polls: u32) -> (SpinPolicy, Instant) {
    let mut p = SpinPolicy::new(AdaptiveConfig::default());
    let mut t = Instant::now();
    p.woken(t);
    for _ in 0..40 {
        t += Duration::from_nanos(100);
        p.found(t, empty_polls);
    }
    p.expired();
    assert!(p.spin_window().is_zero());
    (p, t)
}

#[test]
fn a_window_learned_too_short_to_start_still_probes_and_spins_again() {
    // Catches 100 ns apart drive the window under the shortest useful
    // spin while nearly every outcome is a catch: the feed runs the event
    // cycle, and its probes let a load that became catchable at a longer
    // gap turn spinning back on.
    let (mut p, mut t) = after_a_burst_100_ns_apart(0);
    let mut probed = false;
    for _ in 0..PROBE_EVERY_MAX {
        t += us(5);
        p.woken(t);
        if !p.spin_window().is_zero() {
            probed = true;
            // The probe catches the next completions 5 µs apart, then its
            // spin ends.
            for _ in 0..4 {
                t += us(5);
                p.found(t, 50);
            }
            p.expired();
            break;
        }
    }
    assert!(probed, "never probed");
    assert!(p.probing.is_none(), "the probe ended");
    // Spins again after the probe, outside any probe.
    assert!(p.spin_window() >= MIN_USEFUL_SPIN, "{:?}", p.spin_window());
    t += us(5);
    p.woken(t);
    assert!(p.probing.is_none() && p.spin_window() >= MIN_USEFUL_SPIN);
}

#[test]
fn an_initial_window_of_zero_probes_and_learns_to_spin() {
    let cfg = AdaptiveConfig::default().with_initial_spin(Duration::ZERO);
    let mut p = SpinPolicy::new(cfg);
    assert!(p.spin_window().is_zero());
    let mut t = Instant::now();
    p.woken(t);
    t += cfg.max_spin * PROBE_EVERY;
    p.woken(t);
    assert_eq!(
        p.spin_window(),
        cfg.max_spin,
        "the wake PROBE_EVERY longest spins later probes"
    );
    for _ in 0..8 {
        t += us(5);
        p.found(t, 50);
    }
    p.expired();
    assert!(p.spin_window() >= us(5), "{:?}", p.spin_window());
}

#[test]
fn probes_that_leave_the_window_too_short_back_off() {
    // Bursts of completions 100 ns apart, far apart from each other: each
    // probe catches the burst's gaps, but they call for a window too short
    // to start, so spinning stays off and the probes must back off as
    // probes that catch nothing do.
    let (mut p, mut t) = after_a_burst_100_ns_apart(1);
    let start = t;
    let wakes = 8 * PROBE_EVERY_MAX;
    let mut probes = 0;
    for _ in 0..wakes {
        t += Duration::from_millis(1);
        p.woken(t);
        p.found(t, 0); // the wake's own completions
        if p.spin_window().is_zero() {
            for _ in 0..40 {
                t += Duration::from_nanos(100);
                p.seen(t); // the event cycle drains the burst
            }
        } else {
            probes += 1;
            for _ in 0..40 {
                t += Duration::from_nanos(100);
                p.found(t, 1); // the probe catches the burst's gaps
            }
            p.expired(); // then spins out its window for nothing
            assert!(p.spin_window().is_zero(), "the probe changed nothing");
        }
    }
    // Backed off to one probe per PROBE_EVERY_MAX longest spins, after
    // the intervals that double up to it (8, 16, ..., 128 spins: five),
    // and no further: the probes go on at that rate (each waits for the
    // first wake after its period, and wakes are 1 ms apart here, so the
    // rate is a little under one per period; an uncapped doubling would
    // probe about a dozen times in all).
    let elapsed = t - start;
    let longest = AdaptiveConfig::default().max_spin * PROBE_EVERY_MAX;
    let backed_off = (elapsed.as_nanos() / longest.as_nanos()) as u32;
    assert!(
        backed_off <= 2 * probes && probes <= backed_off + 5,
        "{probes} probes in {elapsed:?} ({wakes} wakes)"
    );
}

#[test]
fn probes_that_catch_a_little_under_a_floor_back_off_and_keep_to_their_share() {
    // With a floor, the window stays open while spinning does not pay; a
    // probe that catches two 49 µs gaps and then spins its window out
    // leaves the share of catches under half: it must back off as one that
    // catches nothing, and pay for its length.
    let cfg = AdaptiveConfig::default().with_min_spin(us(2));
    let mut p = SpinPolicy::new(cfg);
    for _ in 0..4 {
        p.expired();
    }
    let start = Instant::now();
    let mut t = start;
    let mut probes = 0u32;
    let mut probing = Duration::ZERO;
    while t - start < Duration::from_millis(500) {
        t += us(100);
        p.woken(t);
        p.found(t, 0); // the wake's own completions
        if p.spin_window() == cfg.max_spin {
            probes += 1;
            p.found(t + us(49), 5);
            p.found(t + us(98), 5);
            p.expired();
            probing += us(148);
            t += us(148);
            assert!(p.catchable < CATCH_FLOOR, "spinning still does not pay");
        } else {
            p.expired(); // the floor's short spin finds nothing
        }
    }
    let elapsed = t - start;
    assert!(
        probing * PROBE_EVERY <= elapsed,
        "{probing:?} of {elapsed:?} spent probing"
    );
    // Backed off: after the intervals that double up to the largest (five),
    // one probe per PROBE_EVERY_MAX probe lengths, and no fewer (an
    // uncapped doubling would probe about nine times here).
    let backed_off = (elapsed.as_nanos() / (us(148) * PROBE_EVERY_MAX).as_nanos()) as u32;
    assert!(
        backed_off <= probes && probes <= backed_off + 5 + 1,
        "{probes} probes in {elapsed:?}"
    );
}

#[test]
fn a_longest_spin_of_zero_never_probes() {
    let cfg = AdaptiveConfig::default().with_max_spin(Duration::ZERO);
    let mut p = SpinPolicy::new(cfg);
    let t = Instant::now();
    for i in 0..100u32 {
        p.woken(t + us(100) * i);
        assert_eq!(p.limits(), Limits::EVENT);
        assert_eq!(p.probing, None, "wake {i}");
    }
}

/// A probe that turns spinning back on was the load's spin, however long
/// it caught for: when spinning stops paying again, the next probe is
/// [`PROBE_EVERY`] longest spins away, not that many times the probe's
/// whole catch (a minute's stream would have spaced probes by minutes).
#[test]
fn a_probe_that_turns_spinning_back_on_leaves_the_next_probes_at_their_first_spacing() {
    probe_catching_a_minute_then_ended_by(SpinPolicy::expired);
}

/// The same when the probe's spin is cut short (the EVD filled behind the
/// stream, the turn failed): its catches turned spinning back on, so its
/// length is no probe's cost either.
#[test]
fn a_probe_cut_short_after_turning_spinning_back_on_leaves_the_first_spacing() {
    probe_catching_a_minute_then_ended_by(SpinPolicy::spin_abandoned);
}

/// A probe (spinning off before it) that catches a stream 10 µs apart for
/// a minute, its spin then ended by `end`; then the load turns sparse until
/// spinning stops paying: the probe after that comes [`PROBE_EVERY`]
/// longest spins after the interval starts.
fn probe_catching_a_minute_then_ended_by(end: fn(&mut SpinPolicy)) {
    let cfg = AdaptiveConfig::default();
    let mut p = SpinPolicy::new(cfg);
    for _ in 0..4 {
        p.expired();
    }
    let mut t = Instant::now();
    p.woken(t);
    t += cfg.max_spin * PROBE_EVERY;
    p.woken(t);
    assert!(p.probing.is_some(), "a probe");
    let stream_end = t + Duration::from_secs(60);
    while t < stream_end {
        t += us(10);
        p.found(t, 5);
    }
    end(&mut p);
    assert!(p.pays(), "the probe turned spinning back on");
    while p.pays() {
        t += us(200);
        p.woken(t);
        p.found(t, 0);
        p.expired();
    }
    t += us(200);
    p.woken(t); // the interval starts
    t += cfg.max_spin * PROBE_EVERY;
    p.woken(t);
    assert!(
        p.probing.is_some(),
        "no probe {PROBE_EVERY} longest spins on"
    );
}

/// Spinning that turns paying and stops again between two wakes (under a
/// floor, whose spins catch) leaves no stale probe time: the first wake
/// after the stop starts a new interval instead of probing at once.
#[test]
fn a_stop_after_spinning_paid_again_waits_a_whole_interval_to_probe() {
    let cfg = AdaptiveConfig::default().with_min_spin(us(2));
    let mut p = SpinPolicy::new(cfg);
    for _ in 0..4 {
        p.expired();
    }
    assert!(!p.pays());
    let t0 = Instant::now();
    p.woken(t0); // the interval starts: a probe at t0 + PROBE_EVERY × max_spin
    // The floor's spin catches twice (spinning pays), then misses (it
    // stops paying), all before the next wake.
    p.found(t0 + us(1), 5);
    p.found(t0 + us(2), 5);
    assert!(p.pays());
    p.expired();
    assert!(!p.pays());
    // The next wake comes after the old interval's end: it starts a new
    // one, and spins the floor's window, not the probe's.
    let t1 = t0 + cfg.max_spin * PROBE_EVERY * 2;
    p.woken(t1);
    assert!(p.probing.is_none(), "probed at the old interval's end");
    assert_eq!(p.spin_window(), cfg.min_spin);
    p.woken(t1 + cfg.max_spin * PROBE_EVERY);
    assert!(p.probing.is_some());
}
