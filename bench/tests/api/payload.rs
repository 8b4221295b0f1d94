use evd_bench::payload::*;

#[test]
fn tally_detects_a_duplicate_in_place_of_a_missing_event() {
    let mut t = Tally::new(4);
    for s in [0, 1, 1, 3] {
        t.take(s);
    }
    assert!(t.verify().is_err());
}

#[test]
fn tally_detects_a_missing_event() {
    let mut t = Tally::new(4);
    for s in [0, 1, 2] {
        t.take(s);
    }
    assert!(!t.done());
    assert!(t.verify().is_err());
}

#[test]
fn tally_accepts_any_order() {
    for n in [1u64, 2, 5, 1000] {
        let mut t = Tally::new(n);
        for s in (0..n).rev() {
            t.take(s);
        }
        assert!(t.verify().is_ok(), "n = {n}");
    }
}

#[test]
fn event64_carries_its_sequence_number() {
    use evd_bench::payload::{Event64, Payload};
    assert_eq!(std::mem::size_of::<Event64>(), 64);
    assert_eq!(Event64::from_seq(7).seq(), 7);
}

#[test]
fn tally_checks_every_event_arrived_once() {
    use evd_bench::payload::Tally;
    let mut t = Tally::new(3);
    assert!(!t.take(2));
    assert!(!t.take(0));
    assert!(t.take(1));
    assert!(t.verify().is_ok());
}
