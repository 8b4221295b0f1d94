use evd_bench::latency::WakeSystem;
use evd_bench::report::System;
use evd_bench::room::*;

#[test]
fn every_system_delivers_every_event_once_in_every_case() {
    for s in RoomSystem::ALL {
        for capacity in CAPACITIES {
            for posters in POSTERS {
                let run = s
                    .run(capacity, posters, 4_000, Work::fixed(20))
                    .unwrap_or_else(|e| panic!("{} cap {capacity} {posters}p: {e}", s.name()));
                assert_eq!(run.full_refusals, None);
                assert_eq!(
                    run.empty_polls.is_some(),
                    s == RoomSystem::EvdBatchWait,
                    "{}",
                    s.name()
                );
            }
        }
    }
}

#[test]
fn evd_room_runs_move_every_event_and_count_room_wakes() {
    // 8 slots, 2 000 events, about 1 µs of work per event. How often the
    // posters sleep is the figure being measured, not a property: a
    // poster's back-off may catch every freed slot (zero wakes is a legal
    // outcome), so only the counting is checked.
    let work = Work::calibrate(1_000.0);
    for s in [RoomSystem::EvdDequeue, RoomSystem::EvdBatchWait] {
        let run = s.run(8, 1, 2_000, work).unwrap();
        assert_eq!(run.messages, 2_000, "{}: {run:?}", s.name());
        let wakes = run.room_wakes.expect("evd rows count room wakes");
        let per_msg = run.room_wakes_per_msg().unwrap();
        assert!((per_msg - wakes as f64 / 2_000.0).abs() < 1e-12);
    }
}

#[test]
fn every_room_wake_system_records_one_sample_per_wake() {
    for s in RoomWakeSystem::ALL {
        let h = s
            .measure(50)
            .unwrap_or_else(|e| panic!("{}: {e}", s.name()));
        assert_eq!(h.len(), 50, "{}", s.name());
        assert!(h.min() >= 1);
    }
}

#[test]
fn rows_compare_with_the_evd_item_row_and_the_park_floor() {
    for s in RoomSystem::ALL {
        match s.baseline() {
            Some(b) => assert_eq!((b, b.style()), (RoomSystem::EvdDequeue, s.style())),
            None => assert_eq!(s, RoomSystem::EvdBatchWait),
        }
    }
    assert_eq!(
        RoomWakeSystem::CrossbeamSend.floor(),
        Some(RoomWakeSystem::ParkFloor)
    );
    assert_eq!(RoomWakeSystem::ParkFloor.floor(), None);
    assert_eq!(
        RoomWakeSystem::ParkFloor.name(),
        WakeSystem::ParkFloor.name()
    );
}

#[test]
fn work_is_calibrated_to_a_positive_count() {
    let w = Work::calibrate(WORK_NS);
    assert!(w.iters >= 1);
    assert!(w.ns_per_event() > 0.0);
}

#[test]
fn work_calibrates_to_at_least_one_iteration() {
    let w = evd_bench::room::Work::calibrate(500.0);
    assert!(w.iters >= 1);
}

#[test]
fn every_room_system_runs_with_fixed_work() {
    use evd_bench::room::{RoomSystem, Work};
    for s in RoomSystem::ALL {
        let run = s.run(64, 2, 5_000, Work::fixed(50)).unwrap();
        assert_eq!(run.messages, 5_000);
        assert_eq!(run.room_wakes.is_some(), s.is_evd());
    }
}

#[test]
fn room_case_names_capacity_and_posters() {
    assert_eq!(evd_bench::room::room_case(64, 2), "room/cap64/2p");
}

#[test]
fn every_room_wake_system_measures_each_sample() {
    use evd_bench::room::RoomWakeSystem;
    for s in RoomWakeSystem::ALL {
        assert_eq!(s.measure(20).unwrap().len(), 20);
    }
}
