#[test]
fn every_pair_system_returns_every_event_with_both_call_kinds() {
    use evd_bench::pair::{Pair, PairCalls, PairSystem};
    let mut p = Pair::new();
    for s in PairSystem::ALL {
        for c in PairCalls::ALL {
            p.run(s, c, 10_000).unwrap();
            assert!(p.time_ns(s, c, 10_000).unwrap() > 0.0);
        }
        assert_eq!(s.row().baseline, Some("evd post+try_dequeue"));
    }
}
