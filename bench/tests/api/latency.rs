use evd_bench::latency::*;
use evd_bench::report::System;

#[test]
fn stat_state_is_read_after_the_last_parenthesis() {
    assert_eq!(parse_stat_state(b"1 (sh) R 0 1"), Some(b'R'));
    assert_eq!(parse_stat_state(b"7 (we(i)rd) name) S 3"), Some(b'S'));
    assert_eq!(parse_stat_state(b"no parenthesis"), None);
    assert_eq!(parse_stat_state(b"1 (x)"), None);
}

#[test]
fn own_thread_is_running_while_it_reads_its_state() {
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    let mut s = ThreadState::open(tid).unwrap();
    assert_eq!(s.state().unwrap(), b'R');
    // Re-reading at offset 0 regenerates the line.
    assert_eq!(s.state().unwrap(), b'R');
}

#[test]
fn every_system_records_one_sample_per_post() {
    for sys in WakeSystem::ALL {
        let h = sys
            .measure(50)
            .unwrap_or_else(|e| panic!("{}: {e}", sys.name()));
        assert_eq!(h.len(), 50, "{}", sys.name());
        assert!(h.min() >= 1);
    }
}

#[test]
fn a_wake_peer_is_compared_with_the_evd_row_that_sleeps_alike() {
    use evd_bench::latency::WakeSystem;
    assert_eq!(WakeSystem::TokioMpsc.baseline(), Some(WakeSystem::EvdAsync));
    assert_eq!(
        WakeSystem::EventfdFloor.baseline(),
        Some(WakeSystem::EvdEventfd)
    );
}

#[test]
fn every_wake_system_measures_each_sample() {
    use evd_bench::latency::WakeSystem;
    let h = WakeSystem::ParkFloor.measure(20).unwrap();
    assert_eq!(h.len(), 20);
}

#[test]
fn the_stat_state_is_read_after_the_command_name() {
    assert_eq!(
        evd_bench::latency::parse_stat_state(b"42 (a) b)) S 1 2"),
        Some(b'S')
    );
    assert_eq!(evd_bench::latency::parse_stat_state(b"42 (x"), None);
}
