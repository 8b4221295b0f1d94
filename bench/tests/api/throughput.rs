use evd_bench::payload::Event64;
use evd_bench::report::System;
use evd_bench::throughput::*;

#[test]
fn every_system_delivers_every_event_once_with_each_poster_count() {
    for q in Queue::ALL {
        for posters in [1, 2, 4] {
            let run = q
                .run::<u64>(posters, 20_000)
                .unwrap_or_else(|e| panic!("{} {posters}p: {e}", q.name()));
            // Non-blocking posters never wait for room: no room wake.
            let want = q.is_evd().then_some(0);
            assert_eq!(run.room_wakes, want, "{} {posters}p", q.name());
            q.run::<Event64>(posters, 5_000)
                .unwrap_or_else(|e| panic!("{} {posters}p event64: {e}", q.name()));
        }
    }
}

#[test]
fn every_style_has_an_evd_reference_and_rows_compare_within_their_style() {
    for style in Style::ALL {
        let evd = Queue::evd_of(style);
        assert!(evd.is_evd());
        assert_eq!(evd.style(), style);
        assert_eq!(evd.baseline(), Some(evd));
    }
    for q in Queue::ALL {
        match q.baseline() {
            Some(b) => assert_eq!(b.style(), q.style(), "{}", q.name()),
            None => assert!(
                matches!(q, Queue::EvdArmWait | Queue::EvdWith),
                "{} has no baseline",
                q.name()
            ),
        }
    }
}

#[test]
fn the_floors_move_every_event_and_the_no_rmw_ring_takes_one_poster() {
    for q in Queue::FLOORS {
        assert!(q.is_floor() && !q.is_evd());
        assert_eq!(q.baseline(), Some(Queue::EvdSingle));
        let run = q.run::<Event64>(1, 20_000).unwrap();
        assert_eq!(run.messages, 20_000);
    }
    assert_eq!(Queue::FloorStampRing.max_posters(), Some(1));
    assert!(Queue::FloorStampRing.run::<u64>(2, 1_000).is_err());
    for q in [Queue::FloorStampRingCas, Queue::FloorStampRingFaa] {
        assert_eq!(q.max_posters(), Some(2));
        let run = q.run::<u64>(2, 30_000).unwrap();
        assert_eq!(run.messages, 30_000);
    }
    assert!(Queue::ALL
        .iter()
        .all(|q| !q.is_floor() && q.max_posters().is_none()));
}

#[test]
fn the_batch_rows_are_the_batch_receivers() {
    let batch: Vec<_> = Queue::ALL
        .into_iter()
        .filter(|q| q.style() == Style::BlockingBatch)
        .collect();
    assert_eq!(
        batch,
        [
            Queue::EvdWait,
            Queue::EvdArmWait,
            Queue::CrossbeamTryIter,
            Queue::TokioRecvMany
        ]
    );
}

#[test]
fn diagnostics_are_counted() {
    let run = Queue::EvdSingle.run::<u64>(1, 50_000).unwrap();
    assert!(run.empty_polls.is_some());
    assert!(run.cpu_samples > 0, "{run:?}");
    assert!(run.same_cpu <= run.cpu_samples);
    let share = run.same_cpu_share().unwrap();
    assert!((0.0..=1.0).contains(&share));
    let run = Queue::TokioRecvMany.run::<u64>(1, 5_000).unwrap();
    assert_eq!(run.empty_polls, None);
    assert_eq!(run.empty_polls_per_msg(), None);
    assert_eq!(run.room_wakes, None);
    assert!(run.full_refusals.is_some());
}

#[test]
fn zero_messages_is_a_valid_run() {
    assert!(Queue::EvdSingle.run::<u64>(1, 0).is_ok());
}

#[test]
fn every_queue_moves_every_event_with_its_posters() {
    use evd_bench::throughput::Queue;
    for q in Queue::ALL.into_iter().chain(Queue::FLOORS) {
        let posters = q.max_posters().unwrap_or(2);
        let run = q.run::<u64>(posters, 10_000).unwrap();
        assert_eq!(run.messages, 10_000);
        assert_eq!(run.empty_polls.is_some(), q.counts_empty_polls());
    }
}
