use evd_bench::payload::Event64;
use evd_bench::report::Role;
use evd_bench::throughput::*;

#[test]
fn every_system_delivers_every_event_once_with_each_poster_count() {
    for q in Queue::ALL {
        let name = q.row().name;
        for posters in [1, 2, 4] {
            let run = q
                .run::<u64>(posters, 20_000)
                .unwrap_or_else(|e| panic!("{name} {posters}p: {e}"));
            // Non-blocking posters never wait for room: no room wake.
            let want = (q.row().role == Role::Evd).then_some(0);
            assert_eq!(run.room_wakes, want, "{name} {posters}p");
            q.run::<Event64>(posters, 5_000)
                .unwrap_or_else(|e| panic!("{name} {posters}p event64: {e}"));
        }
    }
}

#[test]
fn rows_compare_with_the_evd_reference_row_of_their_style() {
    let row = |name| {
        let all = Queue::ALL.into_iter().chain(Queue::FLOORS);
        all.map(Queue::row).find(|r| r.name == name).unwrap()
    };
    for q in Queue::ALL.into_iter().chain(Queue::FLOORS) {
        let r = q.row();
        match r.baseline {
            Some(b) => {
                let base = row(b);
                assert_eq!((base.role, base.baseline), (Role::Evd, Some(b)));
                assert_eq!(base.consumer, r.consumer, "{}", r.name);
            }
            None => assert!(
                matches!(
                    q,
                    Queue::EvdArmWait | Queue::EvdWith | Queue::EvdReserve | Queue::EvdNoLinger
                ),
                "{}",
                r.name
            ),
        }
        assert_eq!(r.role == Role::Floor, Queue::FLOORS.contains(&q));
    }
    let batch: Vec<_> = Queue::ALL
        .into_iter()
        .filter(|q| q.row().consumer == "blocking/batch")
        .collect();
    let want = [
        Queue::EvdWait,
        Queue::EvdArmWait,
        Queue::CrossbeamTryIter,
        Queue::StdTryIter,
        Queue::TokioRecvMany,
    ];
    assert_eq!(batch, want);
}

#[test]
fn the_floors_move_every_event_and_the_no_rmw_ring_takes_one_poster() {
    for q in Queue::FLOORS {
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
    assert!(Queue::ALL.iter().all(|q| q.max_posters().is_none()));
}

#[test]
fn diagnostics_are_counted() {
    let run = Queue::EvdSingle.run::<u64>(1, 50_000).unwrap();
    assert!(run.empty_polls.is_some());
    assert!(run.cpu_samples > 0, "{run:?}");
    assert!(run.same_cpu <= run.cpu_samples);
    let share = run.diagnostics().same_cpu_share.unwrap();
    assert!((0.0..=1.0).contains(&share));
    let d = run.diagnostics();
    assert_eq!(d.same_cpu_share, Some(share));
    assert_eq!(d.room_wakes_per_msg, Some(0.0));
    let run = Queue::TokioRecvMany.run::<u64>(1, 5_000).unwrap();
    assert_eq!(run.empty_polls, None);
    assert_eq!(run.diagnostics().empty_polls_per_msg, None);
    assert_eq!(run.room_wakes, None);
    assert!(run.full_refusals.is_some());
}

#[test]
fn zero_messages_is_a_valid_run() {
    assert!(Queue::EvdSingle.run::<u64>(1, 0).is_ok());
}

#[test]
fn only_a_consumer_that_polls_counts_empty_polls() {
    let blocked = [
        Queue::CrossbeamChannel,
        Queue::StdSyncChannel,
        Queue::TokioMpsc,
        Queue::Flume,
        Queue::Kanal,
        Queue::Thingbuf,
        Queue::TokioRecvMany,
    ];
    for q in Queue::ALL.into_iter().chain(Queue::FLOORS) {
        let posters = q.max_posters().unwrap_or(2);
        let run = q.run::<u64>(posters, 10_000).unwrap();
        assert_eq!(run.messages, 10_000);
        assert_eq!(
            run.empty_polls.is_none(),
            blocked.contains(&q),
            "{}",
            q.row().name
        );
    }
}
