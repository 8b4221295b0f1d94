#[test]
fn every_pair_system_runs_both_call_kinds() {
    use evd_bench::pair::{Pair, PairCalls, PairSystem};
    let mut p = Pair::new();
    for s in PairSystem::ALL {
        for c in PairCalls::ALL {
            p.run(s, c, 1000).unwrap();
        }
    }
}
