#[test]
fn every_pair_loop_returns_every_event() {
    use evd_bench::pair::{Pair, PAIRS};
    let mut p = Pair::new();
    for l in PAIRS {
        assert!(p.time_ns(l, 10_000).unwrap() > 0.0);
        assert_eq!(l.row.baseline, Some("evd post+try_dequeue"));
    }
}
