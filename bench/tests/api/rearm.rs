use evd_bench::rearm::*;
use evd_bench::report::Role;

#[test]
fn cli_names_round_trip() {
    for k in RearmKind::ALL {
        assert_eq!(RearmKind::from_cli(k.cli_name()), Some(k));
    }
    assert_eq!(
        RearmKind::from_cli("arm-then-poll"),
        Some(RearmKind::ArmThenPoll)
    );
    assert_eq!(RearmKind::from_cli("x"), None);
}

#[test]
fn collected_line_is_found_among_others() {
    let log = "==1== Callgrind, a call-graph generating cache profiler\n\
               ==1== Events    : Ir\n==1== Collected : 987\n==1== I   refs:      987\n";
    assert_eq!(parse_collected(log), Some(987));
    assert_eq!(parse_collected("nothing here"), None);
}

#[test]
fn every_rearm_kind_runs_on_an_empty_armed_ring() {
    let mut r = Rearm::new();
    for k in RearmKind::ALL {
        r.run(k, 1000); // asserts the ring is armed and empty afterwards
        assert!(r.time_ns(k, 100) > 0.0);
    }
}

#[test]
fn rows_compare_with_the_arm_and_the_bare_cas() {
    for k in RearmKind::ALL {
        let row = k.row();
        assert_eq!(row.baseline, Some("evd arm (one CAS)"));
        assert_eq!(row.floor.is_none(), row.role == Role::Floor);
    }
}

#[test]
fn per_iteration_is_the_difference_of_two_counts() {
    assert_eq!(per_iteration(1_000, 3_000, 100), Ok(20.0));
    assert!(per_iteration(3_000, 1_000, 100).is_err());
}
