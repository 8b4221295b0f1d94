use evd_bench::compare::{Plan, compare};
use std::time::Duration;

#[test]
fn quick_plan_is_smaller_than_full_and_within_20_s() {
    let (q, f) = (Plan::quick(), Plan::full());
    assert!(q.budget <= Duration::from_secs(20) && f.budget <= Duration::from_secs(70));
    for p in [&q, &f] {
        let seconds: f64 = p.sections.iter().map(|s| s.seconds).sum();
        assert!(seconds < p.budget.as_secs_f64());
    }
    let size = |p: &Plan| {
        p.sections
            .iter()
            .map(|s| s.rounds as u64 * s.size)
            .sum::<u64>()
    };
    assert!(size(&q) < size(&f));
}

/// A small plan, every round of which fits its section's time: every section's records come in
/// job order (case by case, system by system, whatever order the rotated rounds ran them in), and
/// every record of a case holds the same rounds.
#[test]
fn compare_keeps_job_order_and_the_same_rounds_in_every_case() {
    let mut plan = Plan::quick();
    plan.callgrind = false;
    for (i, s) in plan.sections.iter_mut().enumerate() {
        s.rounds = 2;
        s.seconds = 30.0;
        // Latencies: samples per round; the rest: events or iterations.
        s.size = s
            .size
            .min(if [2, 3, 6, 7].contains(&i) { 50 } else { 5_000 });
        s.run = s.run.min(Duration::from_millis(2));
    }
    plan.budget = Duration::from_secs(600);
    let report = compare(&plan, "test", None, false);
    let mut cases: Vec<&str> = Vec::new();
    for r in &report.records {
        if cases.last() != Some(&r.case.as_str()) {
            assert!(!cases.contains(&r.case.as_str()), "{} comes back", r.case);
            cases.push(&r.case);
        }
        let first = report.records.iter().find(|x| x.case == r.case).unwrap();
        assert_eq!(
            r.rounds.len(),
            first.rounds.len(),
            "{} {}",
            r.case,
            r.system
        );
    }
    let at = |case: &str| cases.iter().position(|c| *c == case).unwrap();
    assert!(at("throughput/u64/1p") < at("throughput/event64/4p"));
    assert!(at("room/cap64/1p") < at("wake-latency") && at("rearm") < at("pingpong/u64"));
    let systems: Vec<&str> = report.records[..4]
        .iter()
        .map(|r| r.system.as_str())
        .collect();
    assert_eq!(
        systems,
        [
            "evd try_dequeue",
            "crossbeam ArrayQueue",
            "evd try_dequeue, no linger",
            "evd try_reserve+send"
        ]
    );
    let cut = |n: &String| n.contains("time budget") || n.contains("failed");
    assert!(!report.notes.iter().any(cut), "{:?}", report.notes);
}
