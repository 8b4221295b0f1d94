use evd_bench::cno::*;
use std::time::Duration;

#[test]
fn every_system_serves_every_cycle_at_every_n() {
    for s in CnoSystem::ALL {
        for v in Variant::ALL {
            for n in TRIGGER_EVDS {
                let ns = s
                    .cycle_ns(v, n, Duration::from_millis(1))
                    .unwrap_or_else(|e| panic!("{} {v:?} {n}: {e}", s.name()));
                assert!(ns > 0.0);
            }
        }
    }
}

#[test]
fn throughput_runs_move_every_event_and_serve_every_evd() {
    for s in CnoSystem::ALL {
        for n in THROUGHPUT_EVDS {
            for feed in Feed::ALL {
                let run = s
                    .run_throughput(n, 30_000, feed)
                    .unwrap_or_else(|e| panic!("{} {n} {feed:?}: {e}", s.name()));
                assert_eq!(run.messages, 30_000);
                assert!(run.full_refusals.is_some() && run.empty_polls.is_some());
                assert!(run.served_max_over_min.unwrap() >= 1.0);
            }
        }
    }
}

#[test]
fn every_wake_system_records_one_sample_per_wake() {
    for s in CnoWakeSystem::ALL {
        let h = s
            .measure(40)
            .unwrap_or_else(|e| panic!("{}: {e}", s.name()));
        assert_eq!(h.len(), 40, "{}", s.name());
        assert!(h.min() >= 1);
    }
}

#[test]
fn scan_flag_is_taken_once_per_signal_burst() {
    let f = ScanFlag::default();
    assert!(!f.take());
    f.signal();
    f.signal();
    assert!(f.take());
    assert!(!f.take());
    f.signal();
    f.wait(); // set: returns at once
}

#[test]
fn insn_kinds_round_trip_and_run() {
    for k in CnoInsnKind::ALL {
        assert_eq!(CnoInsnKind::from_cli(k.cli_name()), Some(k));
        k.run(500).unwrap();
    }
}
