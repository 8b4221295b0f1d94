//! The single-thread loops of `evd_bench::single`.
use evd_bench::report::Role;
use evd_bench::single::*;

#[test]
fn every_loop_runs_and_returns_every_event() {
    let mut r = Rings::new();
    for l in REARM.iter().chain(&PAIR).chain(&CNO_INSNS) {
        // Each loop checks its ring (armed and empty after a re-arm) or its sum afterwards.
        (l.run)(&mut r, 1000).unwrap_or_else(|e| panic!("{}: {e}", l.row.name));
        assert!(r.time_ns(l, 100).unwrap() > 0.0);
    }
}

#[test]
fn rows_compare_with_the_arm_evd_and_the_cno_cycle() {
    for l in REARM {
        assert_eq!(l.row.baseline, Some("evd arm (one CAS)"));
        assert_eq!(l.row.floor.is_none(), l.row.role == Role::Floor);
    }
    assert!(
        PAIR.iter()
            .all(|l| l.row.baseline == Some("evd post+try_dequeue"))
    );
    assert_eq!(
        PAIR.map(|l| l.case)[1..3],
        ["single-thread/pair", "single-thread/pair-out-of-line"]
    );
    let cycle = CNO_INSNS[0].row.name;
    assert!(
        CNO_INSNS
            .iter()
            .all(|l| l.row.baseline == Some(cycle) && l.case == "cno-insns")
    );
    let kinds: Vec<&str> = REARM.iter().chain(&CNO_INSNS).map(|l| l.kind).collect();
    assert_eq!(
        kinds,
        ["evd", "arm-then-poll", "cas-floor", "cno", "plain", "bound"]
    );
}

#[test]
fn collected_line_is_found_among_others() {
    let log = "==1== Callgrind, a call-graph generating cache profiler\n\
               ==1== Events    : Ir\n==1== Collected : 987\n==1== I   refs:      987\n";
    assert_eq!(parse_collected(log), Some(987));
    assert_eq!(parse_collected("nothing here"), None);
}

#[test]
fn per_iteration_is_the_difference_of_two_counts() {
    assert_eq!(per_iteration(1_000, 3_000, 100), Ok(20.0));
    assert!(per_iteration(3_000, 1_000, 100).is_err());
}
