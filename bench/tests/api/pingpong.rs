use evd_bench::pingpong::*;
use evd_bench::report::Role;

#[test]
fn every_system_records_one_sample_per_round_trip() {
    for s in PINGPONG {
        for samples in [100, 3_000] {
            let (h, share) = (s.measure)(samples).unwrap_or_else(|e| panic!("{}: {e}", s.row.name));
            assert_eq!(h.len(), samples, "{}", s.row.name);
            assert!(h.min() >= 1);
            assert!(share.is_some_and(|x| (0.0..=1.0).contains(&x)));
        }
    }
}

#[test]
fn rows_compare_with_evd_try_dequeue_and_the_floor() {
    for s in PINGPONG {
        assert_eq!(s.row.baseline, Some("evd try_dequeue"));
        assert_eq!(s.row.floor.is_none(), s.row.role == Role::Floor);
    }
    assert_eq!(PINGPONG[1].row.consumer, "busy/batch");
    assert_eq!(PINGPONG[5].row.name, "floor: two atomics");
}
