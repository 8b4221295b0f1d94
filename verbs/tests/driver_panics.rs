//! A driver (and a poller) that survives its handlers: a panic in user code
//! run on the driver's thread (an upcall handler of an EVD a feed posts
//! into) is caught, counted and kept, the driver serves on (the other feeds
//! and the one whose handler panicked, nothing lost, nothing twice), and it
//! answers `is_running()` and `stats()` while it runs.

mod common;
use common::driver::{WATCHDOG, nothing_after};
use common::hooked_cq::HookedCq;
use common::load::produce_into;
use common::panics::{PROVOKED, Trapped, quiet_provoked_panics};
use common::wc;
use evd::{Invoke, UpcallPolicy};
use evd_verbs::soft::SoftCq;
use evd_verbs::{
    AdaptiveConfig, CqId, Driver, DriverConfig, DriverError, DriverStats, Feed, FeedMode, Poller,
    VerbsEvent,
};
use std::collections::HashSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn wr_id(ev: VerbsEvent) -> u64 {
    match ev {
        VerbsEvent::Completion { wc, .. } => wc.wr_id,
        other => panic!("expected a completion, got {other:?}"),
    }
}

/// An EVD whose SingleInstance handler reports each completion's `wr_id`,
/// then panics if `panics_on(wr_id)`. The handler runs on the thread that
/// posts: the driver's (or the poller's).
fn evd_with_handler(
    capacity: usize,
    panics_on: impl Fn(u64) -> bool + Send + Sync + 'static,
) -> (
    evd::Poster<VerbsEvent>,
    evd::Upcalls<VerbsEvent>,
    mpsc::Receiver<u64>,
) {
    evd_with_raising_handler(capacity, panics_on, || panic!("{}", PROVOKED))
}

/// As [`evd_with_handler`], the handler panicking by `raise`.
fn evd_with_raising_handler(
    capacity: usize,
    panics_on: impl Fn(u64) -> bool + Send + Sync + 'static,
    raise: fn() -> !,
) -> (
    evd::Poster<VerbsEvent>,
    evd::Upcalls<VerbsEvent>,
    mpsc::Receiver<u64>,
) {
    quiet_provoked_panics();
    let (poster, consumer) = evd::bounded::<VerbsEvent>(capacity).unwrap();
    let (seen, rx) = mpsc::channel();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        let id = wr_id(ev.expect("no overflow: the feed never posts lossy"));
        let _ = seen.send(id);
        if panics_on(id) {
            raise();
        }
    });
    (poster, up, rx)
}

/// Receive `n` reports, failing (not hanging) if they stop coming.
fn receive(rx: &mpsc::Receiver<u64>, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(WATCHDOG)
                .unwrap_or_else(|_| panic!("report {i} of {n} never came"))
        })
        .collect()
}

/// Dequeue `n` completions' `wr_id`s, failing (not hanging) if they stop.
fn dequeue(consumer: &mut evd::Consumer<VerbsEvent>, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            wr_id(
                consumer
                    .dequeue_timeout(WATCHDOG)
                    .unwrap_or_else(|e| panic!("event {i} of {n} never came: {e:?}")),
            )
        })
        .collect()
}

/// `ids` hold each of `expected` exactly once.
fn assert_exactly_once(what: &str, ids: &[u64], expected: &HashSet<u64>) {
    let got: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(got.len(), ids.len(), "{what}: an event came twice");
    assert_eq!(&got, expected, "{what}: events missing or foreign");
}

/// Poll `f` until it gives a value, under the watchdog: for reports the
/// driver's thread makes after the event that shows them (its counters are
/// published, its panic kept, at the end of the turn).
fn eventually<R>(what: &str, mut f: impl FnMut() -> Option<R>) -> R {
    let start = Instant::now();
    loop {
        if let Some(r) = f() {
            return r;
        }
        assert!(start.elapsed() < WATCHDOG, "{what} never happened");
        std::thread::yield_now();
    }
}

const PRODUCERS: u64 = 3;
const PER_PRODUCER: u64 = 4_000;
/// The panicking feed's handler panics on every `PANIC_EVERY`th sequence
/// number of each producer.
const PANIC_EVERY: u64 = 97;
fn panics_on(id: u64) -> bool {
    (id & 0xffff_ffff) % PANIC_EVERY == PANIC_EVERY - 1
}

#[test]
fn a_handler_panicking_every_nth_event_leaves_every_feed_delivering_every_event_exactly_once() {
    let per_cq = (PRODUCERS * PER_PRODUCER) as usize;
    let expected: HashSet<u64> = (0..PRODUCERS)
        .flat_map(|p| (0..PER_PRODUCER).map(move |seq| (p << 32) | seq))
        .collect();
    let panics_expected = expected.iter().filter(|&&id| panics_on(id)).count() as u64;

    // Feed 0 posts into an EVD whose handler panics; feeds 1 and 2 (event
    // and adaptive) into EVDs of their own, small enough to push back.
    let (panicking, up, handled) = evd_with_handler(64, panics_on);
    let (p1, mut c1) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (p2, mut c2) = evd::bounded::<VerbsEvent>(64).unwrap();
    let mut driver = Driver::new(DriverConfig::default().with_budget(32)).unwrap();
    let mut hcas = Vec::new();
    for (id, (poster, mode)) in [
        (panicking, FeedMode::Event),
        (p1, FeedMode::Event),
        (p2, FeedMode::Adaptive(AdaptiveConfig::default())),
    ]
    .into_iter()
    .enumerate()
    {
        let (cq, hca) = SoftCq::new(per_cq + 1).unwrap();
        driver
            .register(Feed::new(cq, CqId(id as u32), poster), mode)
            .unwrap();
        hcas.push(hca);
    }
    let running = driver.spawn().unwrap();
    assert!(running.is_running());
    // The two event feeds' CQs armed before the first completion: its push
    // fires a channel, so the driver has at least one fd wake to count.
    eventually("the event feeds armed", || {
        hcas[..2].iter().all(|h| h.stats().armed).then_some(())
    });

    let (ids1, ids2) = std::thread::scope(|s| {
        let one = s.spawn(|| dequeue(&mut c1, per_cq));
        let two = s.spawn(|| dequeue(&mut c2, per_cq));
        produce_into(&hcas, PRODUCERS, PER_PRODUCER, 256);
        (one.join().unwrap(), two.join().unwrap())
    });
    assert_exactly_once("the event feed beside the panics", &ids1, &expected);
    assert_exactly_once("the adaptive feed beside the panics", &ids2, &expected);

    // The panicking feed is served on too: its handler has every event
    // once, also those a panic left queued behind it after the producers'
    // last completion (the feed starts the upcall again itself).
    let ids0 = receive(&handled, per_cq);
    assert_exactly_once("the feed whose handler panics", &ids0, &expected);

    assert!(running.is_running(), "the driver survived its handlers");
    let stats = eventually("every panic was counted", || {
        let s = running.stats();
        (s.handler_panics == panics_expected).then_some(s)
    });
    assert!(stats.turns > 0 && stats.fd_wakes > 0, "{stats:?}");
    // Every panic counted was kept first (the first) or dropped.
    let caught = running.take_panic().expect("a counted panic is kept");
    assert_eq!(caught.message(), Some(PROVOKED));

    let handle = running.handle().clone();
    let stopped = running
        .shutdown()
        .expect("the driver survived, and its one kept panic was taken");
    assert_eq!(stopped.stats.handler_panics, panics_expected);
    assert_eq!(stopped.len(), 3, "every feed is handed back");
    assert!(!handle.is_running());
    assert_eq!(handle.stats().handler_panics, panics_expected);
    // The feeds gone (their posters with them), nothing came twice after
    // the counts were met: not in the EVDs, not to the handler.
    drop(stopped);
    nothing_after(&mut c1, "the event feed's EVD");
    nothing_after(&mut c2, "the adaptive feed's EVD");
    let mut rest = up.teardown();
    assert_eq!(handled.try_recv().ok(), None, "no event handled twice");
    nothing_after(&mut rest, "the handler's EVD");
}

#[test]
fn a_driver_run_by_the_callers_loop_returns_a_handlers_panic_once_and_serves_on() {
    // The handler panics on completion 1 only.
    let (panicking, up, handled) = evd_with_handler(16, |id| id == 1);
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq0, hca0) = SoftCq::new(16).unwrap();
    let (cq1, hca1) = SoftCq::new(16).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register(Feed::new(cq0, CqId(0), panicking), FeedMode::Event)
        .unwrap();
    driver
        .register(Feed::new(cq1, CqId(1), poster), FeedMode::Event)
        .unwrap();
    let handle = driver.handle();
    driver.process(Some(Duration::ZERO)).unwrap(); // arms both CQs

    for id in 1..=3 {
        hca0.push(wc(id)).unwrap();
        hca1.push(wc(id)).unwrap();
    }
    let mut panics = Vec::new();
    let mut delivered = Vec::new();
    let mut seen = Vec::new();
    let start = Instant::now();
    while delivered.len() < 3 || panics.is_empty() {
        assert!(start.elapsed() < WATCHDOG, "the events never came");
        match driver.process(Some(Duration::from_millis(10))) {
            Ok(_) => {}
            Err(DriverError::Panicked(p)) => panics.push(p),
            Err(e) => panic!("{e}"),
        }
        while let Ok(ev) = consumer.try_dequeue() {
            delivered.push(wr_id(ev));
        }
        seen.extend(handled.try_iter());
    }
    assert_eq!(delivered, [1, 2, 3], "the other feed delivered every event");
    assert_eq!(panics.len(), 1, "one panic, returned once");
    assert_eq!(panics[0].message(), Some(PROVOKED));
    assert_eq!(driver.stats().handler_panics, 1);
    assert_eq!(handle.stats(), driver.stats(), "published by every call");

    // The feed whose handler panicked is served on: a later completion's
    // post runs the handler again, which gets what the panic left queued.
    hca0.push(wc(4)).unwrap();
    let start = Instant::now();
    while !seen.contains(&4) {
        assert!(start.elapsed() < WATCHDOG, "completion 4 was never handled");
        driver.process(Some(Duration::from_millis(10))).unwrap();
        seen.extend(handled.try_iter());
    }
    assert_eq!(seen, [1, 2, 3, 4], "every event handled once, in order");
    drop(up.teardown());
}

#[test]
fn is_running_is_true_while_the_driver_runs_and_false_once_it_stopped_with_its_final_stats() {
    let running = Driver::new(DriverConfig::default())
        .unwrap()
        .spawn()
        .unwrap();
    let handle = running.handle().clone();
    assert!(running.is_running());
    assert!(handle.is_running());
    let stopped = running.shutdown().unwrap();
    assert!(!handle.is_running());
    assert_eq!(handle.stats(), stopped.stats, "the last publish is final");

    // A driver run by the caller's own loop has no thread of its own.
    let driver = Driver::new(DriverConfig::default()).unwrap();
    assert!(!driver.handle().is_running());
}

#[test]
fn live_stats_grow_while_the_driver_runs() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    let running = driver.spawn().unwrap();
    let mut last = DriverStats::default();
    let mut grows = |what: &str| {
        let s = eventually(what, || {
            let s = running.stats();
            // Each counter only grows, whenever it is read.
            assert!(s.turns >= last.turns && s.waits >= last.waits);
            assert!(s.fd_wakes >= last.fd_wakes);
            // The turn that delivered the event is counted.
            (s.turns > last.turns).then_some(s)
        });
        last = s;
    };
    for id in 0..3 {
        hca.push(wc(id)).unwrap();
        assert_eq!(dequeue(&mut consumer, 1), [id]);
        grows("a turn counted");
    }
    let stopped = running.shutdown().unwrap();
    assert!(stopped.stats.turns >= last.turns);
}

#[test]
fn shutdown_after_a_taken_handler_panic_succeeds_and_hands_the_feeds_back() {
    let (panicking, up, handled) = evd_with_handler(16, |id| id == 1);
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(0), panicking), FeedMode::Event)
        .unwrap();
    let running = driver.spawn().unwrap();
    hca.push(wc(1)).unwrap();
    assert_eq!(receive(&handled, 1), [1]);
    let p = eventually("the panic was kept", || running.take_panic());
    assert_eq!(p.message(), Some(PROVOKED));
    assert!(running.is_running());
    let mut stopped = running.shutdown().expect("the driver survived its handler");
    assert_eq!(stopped.stats.handler_panics, 1);
    let feed: Feed<SoftCq> = stopped.take(key).expect("handed back");
    assert_eq!(feed.id(), CqId(0));
    drop(up.teardown());
}

#[test]
fn a_poller_serves_on_after_a_handler_panics_and_stops_cleanly_once_the_panic_is_taken() {
    let (panicking, up, handled) = evd_with_handler(16, |id| id == 1);
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq0, hca0) = SoftCq::new(16).unwrap();
    let (cq1, hca1) = SoftCq::new(16).unwrap();
    let poller = Poller::spawn(
        vec![
            Feed::new(cq0, CqId(0), panicking),
            Feed::new(cq1, CqId(1), poster),
        ],
        16,
    )
    .unwrap();
    hca0.push(wc(1)).unwrap();
    assert_eq!(receive(&handled, 1), [1]);
    for id in 2..=4 {
        hca0.push(wc(id)).unwrap();
        hca1.push(wc(id)).unwrap();
    }
    assert_eq!(
        receive(&handled, 3),
        [2, 3, 4],
        "the panicking feed is served on"
    );
    assert_eq!(dequeue(&mut consumer, 3), [2, 3, 4], "so is the other");
    assert!(poller.is_running());
    let p = eventually("the panic was kept", || poller.take_panic());
    assert_eq!(p.message(), Some(PROVOKED));
    assert_eq!(poller.handler_panics(), 1);
    let stopped = poller.stop().expect("the poller survived its handler");
    assert_eq!(stopped.handler_panics, 1);
    assert_eq!(stopped.feeds.len(), 2);
    drop(up.teardown());
}

/// A poller dropped by an unwinding (its owner panicked) still joins its
/// thread before the drop returns: its feeds (and their posters) are gone by
/// then, so the EVD they alone posted into is closed, and nothing posts
/// after.
#[test]
fn a_poller_dropped_by_an_unwinding_joins_its_thread_first() {
    quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, _hca) = SoftCq::new(16).unwrap();
    let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster)], 16).unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _poller = poller;
        panic!("{}", PROVOKED);
    }));
    assert!(unwound.is_err());
    assert_eq!(
        consumer.try_dequeue().err(),
        Some(evd::TryDequeueError::Closed),
        "the poller's thread had ended and dropped its feeds"
    );
}

/// Two handler panics whose payloads panic on drop: the driver keeps the
/// first and drops the second, whose drop's panic must not end its thread;
/// the poller likewise. Each serves on, and the kept payload comes back
/// intact.
#[test]
fn handler_panics_whose_payloads_panic_on_drop_leave_the_driver_and_the_poller_serving() {
    let panics_on = |id| id == 1 || id == 2;
    let (driven, driven_up, driven_handled) =
        evd_with_raising_handler(16, panics_on, Trapped::provoke);
    let (polled, polled_up, polled_handled) =
        evd_with_raising_handler(16, panics_on, Trapped::provoke);
    let (cq0, hca0) = SoftCq::new(16).unwrap();
    let (cq1, hca1) = SoftCq::new(16).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register(Feed::new(cq0, CqId(0), driven), FeedMode::Event)
        .unwrap();
    let running = driver.spawn().unwrap();
    let poller = Poller::spawn(vec![Feed::new(cq1, CqId(1), polled)], 16).unwrap();
    // One at a time: each panic ends its upcall, and the next completion's
    // post starts the next.
    for id in 1..=3 {
        hca0.push(wc(id)).unwrap();
        hca1.push(wc(id)).unwrap();
        assert_eq!(receive(&driven_handled, 1), [id], "the driver served {id}");
        assert_eq!(receive(&polled_handled, 1), [id], "the poller served {id}");
    }
    let handler_panics = |n: u64| {
        eventually("both panics counted", || {
            (running.stats().handler_panics == n && poller.handler_panics() == n).then_some(())
        })
    };
    handler_panics(2);
    assert!(running.is_running(), "the driver's thread survived");
    assert!(poller.is_running(), "the poller's thread survived");
    let kept = running.take_panic().expect("the first panic kept");
    assert!(Trapped::defuse(kept.into_payload()), "the driver's payload");
    let kept = poller.take_panic().expect("the first panic kept");
    assert!(Trapped::defuse(kept.into_payload()), "the poller's payload");
    assert_eq!(running.shutdown().expect("the driver survived").len(), 1);
    assert_eq!(poller.stop().expect("the poller survived").feeds.len(), 1);
    drop((driven_up.teardown(), polled_up.teardown()));
}

/// A CQ whose destroy panics, and its producer.
fn cq_whose_drop_panics() -> (HookedCq, evd_verbs::soft::SoftCqProducer) {
    let (soft, hca) = SoftCq::new(16).unwrap();
    let mut cq = HookedCq::new(soft);
    cq.at_drop = Some(Box::new(|| panic!("{PROVOKED}: the CQ's destroy")));
    (cq, hca)
}

/// A shutdown that reports an untaken panic drops the feeds itself (it
/// hands none back), and never panics: feeds whose CQ's destroy panics
/// then are swallowed, each on its own (a second panic during the first's
/// unwinding would abort the process), and the untaken panic is the one
/// reported.
#[test]
fn shutdown_with_an_untaken_panic_never_panics_even_when_feeds_it_drops_panic() {
    let (panicking, up, handled) = evd_with_handler(16, |id| id == 1);
    let (cq, hca) = cq_whose_drop_panics();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register(Feed::new(cq, CqId(0), panicking.clone()), FeedMode::Event)
        .unwrap();
    let other = Feed::new(cq_whose_drop_panics().0, CqId(1), panicking);
    driver.register(other, FeedMode::Event).unwrap();
    let running = driver.spawn().unwrap();
    hca.push(wc(1)).unwrap();
    assert_eq!(receive(&handled, 1), [1]);
    eventually("the panic was counted", || {
        (running.stats().handler_panics == 1).then_some(())
    });
    let shutdown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| running.shutdown()));
    match shutdown.expect("a shutdown never panics") {
        Err(DriverError::Panicked(p)) => assert_eq!(p.message(), Some(PROVOKED)),
        other => panic!("the untaken panic is reported: {other:?}"),
    }
    drop(up.teardown());
}

/// The same for a poller's `stop`.
#[test]
fn a_pollers_stop_with_an_untaken_panic_never_panics_even_when_feeds_it_drops_panic() {
    let (panicking, up, handled) = evd_with_handler(16, |id| id == 1);
    let (cq, hca) = cq_whose_drop_panics();
    let feeds = vec![
        Feed::new(cq, CqId(0), panicking.clone()),
        Feed::new(cq_whose_drop_panics().0, CqId(1), panicking),
    ];
    let poller = Poller::spawn(feeds, 16).unwrap();
    hca.push(wc(1)).unwrap();
    assert_eq!(receive(&handled, 1), [1]);
    eventually("the panic was counted", || {
        (poller.handler_panics() == 1).then_some(())
    });
    let stop = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poller.stop()));
    match stop.expect("a stop never panics") {
        Err(DriverError::Panicked(p)) => assert_eq!(p.message(), Some(PROVOKED)),
        Err(e) => panic!("the untaken panic is reported: {e}"),
        Ok(_) => panic!("the untaken panic is reported, not Ok"),
    }
    drop(up.teardown());
}

/// A handler that panics on an event of a batch leaves the rest of the
/// batch queued with no upcall running, and a quiet CQ posts nothing that
/// would start one: the feed's next call starts it again. On a poller, then
/// a spawned driver.
#[test]
fn the_rest_of_a_batch_whose_handler_panicked_is_delivered_without_a_later_completion() {
    for poller in [true, false] {
        let (panicking, up, handled) = evd_with_handler(16, |id| id == 1);
        let (cq, hca) = SoftCq::new(16).unwrap();
        hca.push_batch(&[wc(0), wc(1), wc(2)]);
        let feed = Feed::new(cq, CqId(0), panicking);
        let p = if poller {
            let poller = Poller::spawn(vec![feed], 16).unwrap();
            assert_eq!(receive(&handled, 3), [0, 1, 2], "poller");
            let p = eventually("the panic was kept", || poller.take_panic());
            poller.stop().unwrap();
            p
        } else {
            let mut driver = Driver::new(DriverConfig::default()).unwrap();
            driver.register(feed, FeedMode::Event).unwrap();
            let running = driver.spawn().unwrap();
            assert_eq!(receive(&handled, 3), [0, 1, 2], "driver");
            let p = eventually("the panic was kept", || running.take_panic());
            running.shutdown().unwrap();
            p
        };
        assert_eq!(p.message(), Some(PROVOKED));
        drop(up.teardown());
    }
}

/// Feeds whose drops panic and that have no guard of their own (a stream
/// feed runs its source's `Drop` bare) go one at a time with a driver the
/// caller dropped, or with a `Shutdown`: the first panic reaches the caller
/// once all are gone, and no second panic during its unwinding aborts the
/// process (which is what a failure of this test looks like).
#[test]
fn feeds_whose_drops_panic_go_one_at_a_time_with_a_dropped_driver_or_shutdown() {
    use common::panics::EventsThatPanicOnDrop;
    use evd_verbs::AsyncFeed;
    use evd_verbs::soft::SoftDevice;
    quiet_provoked_panics();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let feed = || {
        AsyncFeed::new(
            EventsThatPanicOnDrop(SoftDevice::new().unwrap().0),
            poster.clone(),
        )
    };
    let with_two_feeds = || {
        let mut driver = Driver::new(DriverConfig::default()).unwrap();
        driver.register_async(feed()).unwrap();
        driver.register_async(feed()).unwrap();
        driver
    };
    let driver = with_two_feeds();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(driver)));
    assert!(
        dropped.is_err(),
        "the driver's: the first panic reaches the caller"
    );
    let shutdown = with_two_feeds().spawn().unwrap().shutdown().unwrap();
    assert_eq!(shutdown.len(), 2);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(shutdown)));
    assert!(
        dropped.is_err(),
        "the shutdown's: the first panic reaches the caller"
    );
}

/// Dropping a running driver or a poller drops its feeds on the caller's
/// thread, one at a time: two whose CQ's destroy panics are not a second
/// panic during the first's unwinding (an abort of the process); the first
/// reaches the caller, as a dropped value's panic does.
#[test]
fn a_dropped_driver_or_poller_whose_feeds_panic_on_drop_raises_one_panic() {
    quiet_provoked_panics();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let feeds = || {
        let feed = |id| Feed::new(cq_whose_drop_panics().0, CqId(id), poster.clone());
        vec![feed(0), feed(1)]
    };
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    for feed in feeds() {
        driver.register(feed, FeedMode::Event).unwrap();
    }
    let running = driver.spawn().unwrap();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(running)));
    assert!(
        dropped.is_err(),
        "the driver's feeds: the first panic reaches the caller"
    );
    let poller = Poller::spawn(feeds(), 16).unwrap();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(poller)));
    assert!(
        dropped.is_err(),
        "the poller's feeds: the first panic reaches the caller"
    );
}
