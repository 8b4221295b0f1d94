use evd_bench::cno::*;
use evd_bench::report::System;
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

#[test]
fn every_cno_system_times_both_trigger_variants() {
    use evd_bench::cno::{CnoSystem, Variant};
    use std::time::Duration;
    for s in CnoSystem::ALL {
        for v in Variant::ALL {
            assert!(s.cycle_ns(v, 16, Duration::from_millis(2)).unwrap() > 0.0);
        }
    }
}

#[test]
fn every_cno_system_serves_every_evd_in_both_feeds() {
    use evd_bench::cno::{CnoSystem, Feed};
    for s in CnoSystem::ALL {
        for feed in Feed::ALL {
            let run = s.run_throughput(16, 20_000, feed).unwrap();
            assert_eq!(run.messages, 20_000);
            assert!(run.served_max_over_min.unwrap() >= 1.0);
        }
    }
}

#[test]
fn feed_case_names() {
    use evd_bench::cno::Feed;
    assert_eq!(Feed::Events.case(256), "cno-throughput/256");
    assert_eq!(Feed::Batches.case(16), "cno-throughput-batch/16");
}

#[test]
fn variant_case_names() {
    use evd_bench::cno::Variant;
    assert_eq!(Variant::SingleThread.case(16), "cno-trigger/16");
    assert_eq!(Variant::CrossThread.case(16), "cno-trigger-xthread/16");
}

#[test]
fn max_over_min_refuses_an_evd_never_served() {
    assert_eq!(evd_bench::cno::max_over_min(&[4, 2, 3]), Ok(2.0));
    assert!(evd_bench::cno::max_over_min(&[4, 0]).is_err());
}

#[test]
fn every_cno_wake_system_measures_each_sample() {
    use evd_bench::cno::CnoWakeSystem;
    for s in CnoWakeSystem::ALL {
        assert_eq!(s.measure(20).unwrap().len(), 20);
    }
}

#[test]
fn cno_insn_kinds_parse_from_their_cli_names() {
    use evd_bench::cno::CnoInsnKind;
    assert_eq!(CnoInsnKind::from_cli("cno"), Some(CnoInsnKind::CnoCycle));
    assert_eq!(CnoInsnKind::from_cli("x"), None);
}

#[test]
fn every_cno_insn_kind_returns_every_event() {
    use evd_bench::cno::CnoInsnKind;
    for k in CnoInsnKind::ALL {
        k.run(1000).unwrap();
    }
}
