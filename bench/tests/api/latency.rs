use evd_bench::latency::*;

#[test]
fn stat_state_is_read_after_the_last_parenthesis() {
    assert_eq!(parse_stat_state(b"1 (sh) R 0 1"), Some(b'R'));
    assert_eq!(parse_stat_state(b"7 (we(i)rd) name) S 3"), Some(b'S'));
    assert_eq!(parse_stat_state(b"42 (a) b)) S 1 2"), Some(b'S'));
    assert_eq!(parse_stat_state(b"no parenthesis"), None);
    assert_eq!(parse_stat_state(b"1 (x)"), None);
    assert_eq!(parse_stat_state(b"42 (x"), None);
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
    for s in WAKE {
        let (h, share) = (s.measure)(50).unwrap_or_else(|e| panic!("{}: {e}", s.row.name));
        assert_eq!(h.len(), 50, "{}", s.row.name);
        assert!(h.min() >= 1 && share.is_none());
    }
}

#[test]
fn a_wake_peer_is_compared_with_the_evd_row_that_sleeps_alike() {
    let row = |name: &str| WAKE.iter().find(|s| s.row.name == name).unwrap().row;
    let tokio = row("tokio mpsc recv().await");
    assert_eq!(
        tokio.baseline,
        Some("evd recv().await (tokio current-thread)")
    );
    assert_eq!(tokio.floor, Some(PARK_FLOOR));
    assert_eq!(
        row("floor: raw eventfd read").baseline,
        Some("evd eventfd + epoll")
    );
    for s in WAKE {
        let base = row(s.row.baseline.unwrap());
        assert_eq!(base.baseline, Some(base.name));
        if s.row.role != evd_bench::report::Role::Floor {
            assert_eq!(base.consumer, s.row.consumer);
        }
        assert_eq!(s.threads, if s.row.consumer == "inline" { 1 } else { 2 });
    }
}
