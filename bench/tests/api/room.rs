use evd_bench::report::Role;
use evd_bench::room::*;

#[test]
fn every_system_delivers_every_event_once_in_every_case() {
    for s in ROOM {
        for capacity in CAPACITIES {
            for posters in POSTERS {
                let run = (s.run)(capacity, posters, 4_000, Work::fixed(20))
                    .unwrap_or_else(|e| panic!("{} cap {capacity} {posters}p: {e}", s.row.name));
                assert_eq!(run.messages, 4_000);
                assert_eq!(run.full_refusals, None);
                let batch = s.row.consumer == "blocking/batch";
                assert_eq!(run.empty_polls.is_some(), batch, "{}", s.row.name);
                assert_eq!(run.room_wakes.is_some(), s.row.role == Role::Evd);
            }
        }
    }
}

#[test]
fn evd_room_runs_move_every_event_and_count_room_wakes() {
    // 8 slots, 2 000 events, about 1 µs of work per event. How often the posters sleep is the
    // figure being measured, not a property: a poster's back-off may catch every freed slot (zero
    // wakes is a legal outcome), so only the counting is checked.
    let work = Work::calibrate(1_000.0);
    for s in &ROOM[..2] {
        let run = (s.run)(8, 1, 2_000, work).unwrap();
        assert_eq!(run.messages, 2_000, "{}: {run:?}", s.row.name);
        let wakes = run.room_wakes.expect("evd rows count room wakes");
        let per_msg = run.diagnostics().room_wakes_per_msg.unwrap();
        assert!((per_msg - wakes as f64 / 2_000.0).abs() < 1e-12);
    }
}

#[test]
fn every_room_wake_system_records_one_sample_per_wake() {
    for s in ROOM_WAKE {
        let (h, _) = (s.measure)(50).unwrap_or_else(|e| panic!("{}: {e}", s.row.name));
        assert_eq!(h.len(), 50, "{}", s.row.name);
        assert!(h.min() >= 1);
    }
}

#[test]
fn rows_compare_with_the_evd_item_row_and_the_park_floor() {
    for s in ROOM {
        match s.row.baseline {
            Some(b) => assert_eq!((b, s.row.consumer), (ROOM[0].row.name, "blocking/item")),
            None => assert_eq!(s.row.name, "evd post_blocking+batch+wait"),
        }
    }
    assert_eq!(ROOM_WAKE[1].row.floor, Some(evd_bench::latency::PARK_FLOOR));
    assert_eq!(ROOM_WAKE[2].row.floor, None);
    assert_eq!(ROOM_WAKE[2].row.name, evd_bench::latency::PARK_FLOOR);
}

#[test]
fn work_is_calibrated_to_a_positive_count() {
    let w = Work::calibrate(WORK_NS);
    assert!(w.iters >= 1);
    assert!(w.ns_per_event() > 0.0);
    assert!(Work::calibrate(500.0).iters >= 1);
}

#[test]
fn room_case_names_capacity_and_posters() {
    assert_eq!(room_case(64, 2), "room/cap64/2p");
}
