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
