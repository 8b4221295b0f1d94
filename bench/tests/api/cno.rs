use evd_bench::cno::*;
use std::time::Duration;

#[test]
fn every_system_serves_every_cycle_at_every_n() {
    for s in CnoSystem::ALL {
        for v in Variant::ALL {
            for n in TRIGGER_EVDS {
                let ns = s
                    .cycle_ns(v, n, Duration::from_millis(1))
                    .unwrap_or_else(|e| panic!("{} {v:?} {n}: {e}", s.row().name));
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
                    .unwrap_or_else(|e| panic!("{} {n} {feed:?}: {e}", s.row().name));
                assert_eq!(run.messages, 30_000);
                assert!(run.full_refusals.is_some() && run.empty_polls.is_some());
                assert!(run.served_max_over_min.unwrap() >= 1.0);
            }
        }
    }
}

#[test]
fn every_wake_system_records_one_sample_per_wake() {
    for s in CNO_WAKE {
        let (h, share) = (s.measure)(40).unwrap_or_else(|e| panic!("{}: {e}", s.row.name));
        assert_eq!(h.len(), 40, "{}", s.row.name);
        assert!(h.min() >= 1 && share.is_none());
    }
}

#[test]
fn rows_compare_with_the_evd_cno_and_the_park_floor() {
    let evd = CnoSystem::EvdCno.row();
    for s in CnoSystem::ALL {
        assert_eq!(s.row().baseline, Some(evd.name));
    }
    assert_eq!(CNO_WAKE[0].row.baseline, Some(CNO_WAKE[0].row.name));
    assert_eq!(
        CNO_WAKE[1].row.baseline, None,
        "the direct wait is an evd variant"
    );
    assert_eq!(CNO_WAKE[2].row.name, evd_bench::latency::PARK_FLOOR);
    assert!(
        CNO_WAKE[..2]
            .iter()
            .all(|s| s.row.floor == Some(CNO_WAKE[2].row.name))
    );
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
fn feed_and_variant_case_names() {
    assert_eq!(Feed::Events.case(256), "cno-throughput/256");
    assert_eq!(Feed::Batches.case(16), "cno-throughput-batch/16");
    assert_eq!(Variant::SINGLE_THREAD.case(16), "cno-trigger/16");
    assert_eq!(Variant::CROSS_THREAD.case(16), "cno-trigger-xthread/16");
    assert_eq!(
        (
            Variant::CROSS_THREAD.threads,
            Variant::CROSS_THREAD.consumer
        ),
        (2, "blocking")
    );
}

#[test]
fn max_over_min_refuses_an_evd_never_served() {
    assert_eq!(max_over_min(&[4, 2, 3]), Ok(2.0));
    assert!(max_over_min(&[4, 0]).is_err());
}

/// Each system's fixture can be built at the EVD counts its cases run (the check a trigger job's
/// preparation makes, so that a system that cannot run here is dropped, not its case's rounds).
#[test]
fn every_cno_system_checks_out_at_the_trigger_counts() {
    for s in evd_bench::cno::CnoSystem::ALL {
        for n in evd_bench::cno::TRIGGER_EVDS {
            s.check(n).unwrap_or_else(|e| panic!("{s:?} at {n}: {e}"));
        }
    }
}
