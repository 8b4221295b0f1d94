use evd_bench::pingpong::*;
use evd_bench::report::System;

#[test]
fn every_system_records_one_sample_per_round_trip() {
    for s in PingPongSystem::ALL {
        let (h, share) = s
            .measure(3_000)
            .unwrap_or_else(|e| panic!("{}: {e}", s.name()));
        assert_eq!(h.len(), 3_000, "{}", s.name());
        assert!(h.min() >= 1);
        assert!(share.is_some_and(|x| (0.0..=1.0).contains(&x)));
    }
}

#[test]
fn rows_compare_with_evd_try_dequeue_and_the_floor() {
    for s in PingPongSystem::ALL {
        assert_eq!(s.baseline(), Some(PingPongSystem::EvdItem));
        assert_eq!(s.floor().is_none(), s.is_floor());
    }
    assert_eq!(PingPongSystem::EvdBatch.consumer(), "busy/batch");
    assert_eq!(PingPongSystem::Floor.name(), "floor: two atomics");
}

#[test]
fn every_pingpong_system_measures_each_round_trip() {
    use evd_bench::pingpong::PingPongSystem;
    for s in PingPongSystem::ALL {
        assert_eq!(s.measure(100).unwrap().0.len(), 100);
    }
}
