use evd_bench::rearm::*;

#[test]
fn cli_names_round_trip() {
    for k in RearmKind::ALL {
        assert_eq!(RearmKind::from_cli(k.cli_name()), Some(k));
    }
}

#[test]
fn collected_line_is_found_among_others() {
    let log = "==1== Callgrind, a call-graph generating cache profiler\n\
               ==1== Events    : Ir\n==1== Collected : 987\n==1== I   refs:      987\n";
    assert_eq!(parse_collected(log), Some(987));
    assert_eq!(parse_collected("nothing here"), None);
}

#[test]
fn rearm_kinds_parse_from_their_cli_names() {
    use evd_bench::rearm::RearmKind;
    assert_eq!(
        RearmKind::from_cli("arm-then-poll"),
        Some(RearmKind::ArmThenPoll)
    );
    assert_eq!(RearmKind::from_cli("x"), None);
}

#[test]
fn every_rearm_kind_runs() {
    use evd_bench::rearm::{Rearm, RearmKind};
    let mut r = Rearm::new();
    r.run(RearmKind::ArmThenPoll, 1000);
}

#[test]
fn per_iteration_is_the_difference_of_two_counts() {
    assert_eq!(evd_bench::rearm::per_iteration(1_000, 3_000, 100), Ok(20.0));
    assert!(evd_bench::rearm::per_iteration(3_000, 1_000, 100).is_err());
}

#[test]
fn callgrind_collected_count_is_parsed() {
    let log = "==12== Events    : Ir\n==12== Collected : 123456\n==12==\n";
    assert_eq!(evd_bench::rearm::parse_collected(log), Some(123456));
}
