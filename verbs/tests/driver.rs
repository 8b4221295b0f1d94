//! The io_uring driver: many CQs and EVDs on one ring, the user's own loop,
//! backpressure woken by the EVD's room signal, and removal while running.
//! (The device's async events it serves: `async_events.rs`.)

mod common;

use common::driver::{
    BACKENDS, WATCHDOG, driver_serving, nothing_after, port_active, remove_within, running_driver,
    take, take_counting_overflow, telling_waker,
};
use common::hooked_cq::HookedCq;
use common::panics::{PROVOKED, quiet_provoked_panics};
use common::wc;
use evd_verbs::soft::SoftCq;
use evd_verbs::{CqId, Driver, DriverConfig, DriverError, Feed, FeedMode, VerbsEvent};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn one_ring_serves_many_cqs_and_evds() {
    let (p1, mut c1) = evd::bounded::<VerbsEvent>(256).unwrap();
    let (p2, mut c2) = evd::bounded::<VerbsEvent>(256).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let mut hcas = Vec::new();
    for id in 0..4u32 {
        let (cq, hca) = SoftCq::new(256).unwrap();
        let poster = if id % 2 == 0 { p1.clone() } else { p2.clone() };
        let mode = if id < 2 {
            FeedMode::Event
        } else {
            FeedMode::Adaptive(Default::default())
        };
        driver
            .register(Feed::new(cq, CqId(id), poster), mode)
            .unwrap();
        hcas.push(hca);
    }
    drop((p1, p2));
    let running = driver.spawn().unwrap();
    for round in 0..50u64 {
        for hca in &hcas {
            hca.push(wc(round)).unwrap();
        }
    }
    let mut per_cq: HashMap<CqId, Vec<u64>> = HashMap::new();
    for ev in take(&mut c1, 100).into_iter().chain(take(&mut c2, 100)) {
        let VerbsEvent::Completion { cq, wc } = ev else {
            panic!("{ev:?}")
        };
        per_cq.entry(cq).or_default().push(wc.wr_id);
    }
    for id in 0..4 {
        assert_eq!(per_cq[&CqId(id)], (0..50).collect::<Vec<_>>(), "CQ {id}");
    }
    let stopped = running.shutdown().unwrap();
    assert_eq!(stopped.len(), 4);
    drop(stopped);
    nothing_after(&mut c1, "EVD 1");
    nothing_after(&mut c2, "EVD 2");
    for hca in &hcas {
        let s = hca.stats();
        assert_eq!(s.unacked_at_destroy, Some(0));
        assert_eq!(s.len, 0);
    }
}

/// Wait (yielding, under the watchdog) until a poster of `consumer`'s EVD
/// waits for room.
fn until_room_wanted(consumer: &evd::Consumer<VerbsEvent>, what: &str) {
    let start = std::time::Instant::now();
    while !consumer.query().room_wanted {
        assert!(start.elapsed() < WATCHDOG, "{what}");
        std::thread::yield_now();
    }
}

/// Process until a timed wait finds nothing to do: every feed has taken
/// what its fd showed and is waiting (for its fd, or for room).
fn settle(driver: &mut Driver) {
    let start = std::time::Instant::now();
    loop {
        assert!(start.elapsed() < WATCHDOG, "the driver never settled");
        let timeouts = driver.stats().timeouts;
        let activity = driver.process(Some(Duration::from_millis(20))).unwrap();
        if !activity.busy && driver.stats().timeouts > timeouts {
            return;
        }
    }
}

/// A feed waiting for room holds a place in the EVD's room queue; the
/// driver that hands it back takes it out of the queue, so the slot a
/// dequeue frees next goes to the feed behind it, even while the removed
/// feed's owner keeps it.
#[test]
fn a_removed_feed_that_waited_for_room_does_not_hold_up_the_feed_behind_it() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
        let (cq_a, hca) = SoftCq::new(16).unwrap();
        let (cq_b, hcb) = SoftCq::new(16).unwrap();
        let config = DriverConfig::default().with_backend(backend);
        let mut driver = Driver::new(config).unwrap();
        let a = Feed::new(cq_a, CqId(0), poster.clone());
        let a = driver.register(a, FeedMode::Event).unwrap();
        let b = Feed::new(cq_b, CqId(1), poster);
        driver.register(b, FeedMode::Event).unwrap();
        settle(&mut driver);
        hca.push(wc(1)).unwrap(); // fills the EVD
        settle(&mut driver);
        hca.push(wc(2)).unwrap(); // A waits for room, first in the queue
        settle(&mut driver);
        hcb.push(wc(10)).unwrap(); // B waits behind A
        settle(&mut driver);
        let kept: Feed<SoftCq> = driver.remove(a).unwrap();
        assert!(
            matches!(consumer.try_dequeue(), Ok(VerbsEvent::Completion { cq: CqId(0), wc }) if wc.wr_id == 1)
        );
        settle(&mut driver);
        let got = consumer.try_dequeue();
        assert!(
            matches!(got, Ok(VerbsEvent::Completion { cq: CqId(1), wc }) if wc.wr_id == 10),
            "{backend:?}: the slot freed went to the removed feed, B's completion stayed in its CQ: {got:?}"
        );
        drop(kept);
    }
}

#[test]
fn removal_while_running_hands_the_feed_back_and_acks_on_drop() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (cq, hca) = SoftCq::new(64).unwrap();
    let driver = running_driver();
    let key = driver
        .handle()
        .register(Feed::new(cq, CqId(2), poster), FeedMode::Event)
        .unwrap();
    hca.push(wc(1)).unwrap();
    take(&mut consumer, 1);
    hca.inject_spurious_event();
    let feed: Feed<SoftCq> = remove_within(driver.handle(), key).unwrap();
    // The feed (its CQ with it) is the caller's now: dropping it acks the
    // event got, then destroys the CQ.
    drop(feed);
    let s = hca.stats();
    assert!(s.destroyed);
    assert_eq!(s.unacked_at_destroy, Some(0));
    assert!(matches!(
        remove_within(driver.handle(), key),
        Err(DriverError::NoSuchFeed)
    ));
    driver.shutdown().unwrap();
}

#[test]
fn user_loop_drives_the_ring_through_process() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (cq, hca) = SoftCq::new(64).unwrap();
    let (mut driver, _) = driver_serving(Feed::new(cq, CqId(0), poster), FeedMode::Event);
    // First turn arms the CQ and puts the channel poll in the ring.
    let a = driver.process(Some(Duration::ZERO)).unwrap();
    assert!(!a.busy);
    assert!(hca.stats().armed);
    hca.push(wc(5)).unwrap();
    // The ring fd becomes readable: wait on it as the user's loop would.
    let mut pfd = libc::pollfd {
        fd: driver.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, 10 s timeout (a watchdog, not a sleep).
    let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
    assert_eq!(n, 1, "ring fd never became readable");
    let mut turns = 0;
    while consumer.query().len == 0 {
        driver.process(Some(Duration::from_millis(100))).unwrap();
        turns += 1;
        assert!(turns < 100, "completion not delivered");
    }
    assert!(
        matches!(consumer.try_dequeue(), Ok(VerbsEvent::Completion { wc, .. }) if wc.wr_id == 5)
    );
}

#[test]
fn full_evd_blocks_the_feed_until_room_and_loses_nothing() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    let (cq, hca) = SoftCq::new(1024).unwrap();
    let (driver, _) = driver_serving(Feed::new(cq, CqId(0), poster), FeedMode::Event);
    let running = driver.spawn().unwrap();
    for i in 0..500 {
        hca.push(wc(i)).unwrap();
    }
    // Drain only once the feed waits for room (see the sixteen-feed test).
    until_room_wanted(&consumer, "the feed never waited for room");
    let mut got = Vec::new();
    while got.len() < 500 {
        let evs = take(&mut consumer, 1);
        for ev in evs {
            let VerbsEvent::Completion { wc, .. } = ev else {
                panic!()
            };
            got.push(wc.wr_id);
        }
    }
    assert_eq!(got, (0..500).collect::<Vec<_>>());
    assert_eq!(consumer.query().lost, 0);
    let s = running.shutdown().unwrap();
    // Woken by the consumer's dequeues (a spawned driver waits with no
    // timeout at all, so its `timeouts` says nothing).
    assert!(s.stats.room_wakes > 0, "{:?}", s.stats);
}

#[test]
fn sixteen_feeds_into_one_small_evd_never_over_commit_and_wake_only_on_room() {
    // 16 CQs of 1000 completions each, all queued before the driver starts,
    // into one 64-slot EVD: the EVD is full most of the time. No feed may
    // take a completion out of its CQ that the EVD has no room for (nothing
    // held), nothing is lost or reported lost, every CQ's completions arrive
    // in order, and blocked feeds are woken by the consumer's dequeues, never
    // by a timer.
    const FEEDS: u32 = 16;
    const PER_CQ: u64 = 1000;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let mut hcas = Vec::new();
    let mut keys = Vec::new();
    for id in 0..FEEDS {
        let (cq, hca) = SoftCq::new(1024).unwrap();
        for i in 0..PER_CQ {
            hca.push(wc(i)).unwrap();
        }
        keys.push(
            driver
                .register(Feed::new(cq, CqId(id), poster.clone()), FeedMode::Event)
                .unwrap(),
        );
        hcas.push(hca);
    }
    drop(poster);
    let running = driver.spawn().unwrap();
    // Drain only once a feed waits for room: the EVD has filled, so the
    // room signal is certain to be used (a consumer draining from the start
    // may keep up with the driver and never let it fill).
    until_room_wanted(&consumer, "no feed ever waited for room");
    let mut next = vec![0u64; FEEDS as usize];
    let mut overflow_reports = 0;
    for ev in take_counting_overflow(
        &mut consumer,
        (FEEDS as u64 * PER_CQ) as usize,
        &mut overflow_reports,
    ) {
        let VerbsEvent::Completion { cq, wc } = ev else {
            panic!("{ev:?}")
        };
        let n = &mut next[cq.0 as usize];
        assert_eq!(wc.wr_id, *n, "CQ {} out of order", cq.0);
        *n += 1;
    }
    assert_eq!(next, vec![PER_CQ; FEEDS as usize]);
    assert_eq!(overflow_reports, 0);
    assert_eq!(consumer.query().lost, 0);
    let mut s = running.shutdown().unwrap();
    for key in keys {
        let feed = s.take(key).unwrap();
        assert_eq!(feed.stats().held, 0, "feed {:?} over-committed", feed.id());
        assert_eq!(feed.stats().polled, PER_CQ);
    }
    nothing_after(&mut consumer, "the small EVD");
    assert!(
        s.stats.room_wakes > 0,
        "the EVD never filled: {:?}",
        s.stats
    );
}

#[test]
fn a_blocked_feed_woken_for_room_passes_the_wake_on_when_it_posts_nothing() {
    // A full one-slot EVD; the feed (its CQ empty) blocks and joins the room
    // queue first, another poster's RoomWaiter joins behind it. The dequeue
    // wakes the feed, which has nothing to post: it must pass the wake on,
    // or the other waiter sleeps forever next to the free slot.
    use std::task::{Context, Poll};
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    poster.post(port_active()).unwrap();
    let (cq, _hca) = SoftCq::new(16).unwrap();
    let (driver, _) = driver_serving(Feed::new(cq, CqId(0), poster.clone()), FeedMode::Event);
    let running = driver.spawn().unwrap();
    // The feed's first turn finds the EVD full and joins the queue.
    until_room_wanted(&consumer, "the feed never waited for room");
    let (waker, rx) = telling_waker();
    let mut other = poster.room_waiter();
    assert!(
        other
            .poll_room(&mut Context::from_waker(&waker))
            .is_pending()
    );
    assert!(consumer.try_dequeue().is_ok()); // wakes the feed, first in line
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the wake was not passed on to the waiter behind the feed");
    assert!(matches!(
        other.poll_room(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(1))
    ));
    running.shutdown().unwrap();
}

// --- commands racing a shutdown --------------------------------------------

type Hooked = Feed<HookedCq>;

/// A feed whose registration runs `hook` on the driver's thread (inside the
/// turn that applies the command): the tests' way to act at a known point of
/// a turn.
fn hooked_feed(id: u32, hook: impl FnOnce() + Send + 'static) -> Hooked {
    let (poster, _) = evd::bounded::<VerbsEvent>(16).unwrap();
    let cq = HookedCq::new(SoftCq::new(16).unwrap().0);
    *cq.at_registration.lock().unwrap() = Some(Box::new(hook));
    Feed::new(cq, CqId(id), poster)
}

/// A feed whose registration holds the driver inside that turn: it says so
/// on the first channel and waits until the second lets it go. The tests
/// queue commands and ask for the stop at known points this way.
fn held_feed(id: u32) -> (Hooked, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (reached_tx, reached) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let feed = hooked_feed(id, move || {
        reached_tx.send(()).unwrap();
        go_rx
            .recv_timeout(WATCHDOG)
            .expect("the test never let the driver go");
    });
    (feed, reached, go)
}

/// Run `f` on a new thread; its result comes on the channel.
fn on_a_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> mpsc::Receiver<R> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// Wait (yielding, under the watchdog) until the handle's `Debug` shows `what`.
fn until_handle_shows(handle: &evd_verbs::DriverHandle, what: &str) {
    let start = std::time::Instant::now();
    while !format!("{handle:?}").contains(what) {
        assert!(start.elapsed() < WATCHDOG, "the handle never showed {what}");
        std::thread::yield_now();
    }
}

/// A spawned driver on `backend` serving feed A (an EVD nobody reads),
/// held inside the turn that registers a held feed (H1): what the
/// command-race tests start from.
struct Held {
    key_a: evd_verbs::FeedKey<Feed<SoftCq>>,
    running: evd_verbs::RunningDriver,
    handle: evd_verbs::DriverHandle,
    /// H1's registration's answer, once the driver is let go.
    key1: mpsc::Receiver<Result<evd_verbs::FeedKey<Hooked>, DriverError>>,
    /// Lets the driver go.
    go1: mpsc::Sender<()>,
    /// A's EVD's consumer: kept, so that A's EVD stays open.
    _consumer: evd::Consumer<VerbsEvent>,
}

fn spawned_and_held(backend: evd_verbs::DriverBackend) -> Held {
    let mut driver = Driver::new(DriverConfig::default().with_backend(backend)).unwrap();
    let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let feed = Feed::new(SoftCq::new(16).unwrap().0, CqId(0), poster);
    let key_a = driver.register(feed, FeedMode::Event).unwrap();
    let running = driver.spawn().unwrap();
    let handle = running.handle().clone();
    let (h1, reached1, go1) = held_feed(1);
    let h = handle.clone();
    let key1 = on_a_thread(move || h.register(h1, FeedMode::Event));
    reached1.recv_timeout(WATCHDOG).unwrap();
    Held {
        key_a,
        running,
        handle,
        key1,
        go1,
        _consumer: consumer,
    }
}

/// A `DriverHandle::remove` whose feed's poll is being cancelled when the stop
/// is seen: the shutdown waits for that removal too, and ends; the remover
/// gets its feed, and every other feed is in the `Shutdown`. (On io_uring the
/// cancellation's completion comes in a later turn than the removal.)
#[test]
fn a_shutdown_while_a_handle_removes_a_feed_ends_and_hands_every_feed_back_once() {
    for backend in BACKENDS {
        let Held {
            key_a,
            running,
            handle,
            key1,
            go1,
            _consumer,
        } = spawned_and_held(backend);
        // Held in a turn: the removal of A, then a second held registration,
        // queued in that order, are applied together by the next turn.
        let h = handle.clone();
        let removed_a = on_a_thread(move || h.remove(key_a));
        until_handle_shows(&handle, "queued_commands: 1");
        let (h2, reached2, go2) = held_feed(2);
        let h = handle.clone();
        let key2 = on_a_thread(move || h.register(h2, FeedMode::Event));
        until_handle_shows(&handle, "queued_commands: 2");
        go1.send(()).unwrap();
        // A's removal is under way; the stop is asked for within that turn.
        reached2.recv_timeout(WATCHDOG).unwrap();
        let stopped = on_a_thread(move || running.shutdown());
        until_handle_shows(&handle, "stopping: true");
        go2.send(()).unwrap();
        let mut stopped = stopped
            .recv_timeout(WATCHDOG)
            .unwrap_or_else(|_| panic!("{backend:?}: the shutdown never ended"))
            .unwrap();
        let removed_a = removed_a.recv_timeout(WATCHDOG).unwrap();
        assert_eq!(removed_a.map(|f| f.id()).ok(), Some(CqId(0)), "{backend:?}");
        for key in [key1, key2] {
            let key = key.recv_timeout(WATCHDOG).unwrap().unwrap();
            assert!(stopped.take(key).is_some(), "{backend:?}: handed back");
        }
        assert_eq!(stopped.len(), 0, "{backend:?}: and nothing else");
    }
}

/// Registrations the shutdown refuses (queued when the stop is seen) whose
/// feeds' drops panic: each panic counted and traced, none raised (raised,
/// it would fail the shutdown with `Panicked` and drop every keyed feed with
/// it, for the code of a feed no key names and whose registrant is told
/// `Stopped`).
#[test]
fn refused_feeds_whose_drops_panic_at_the_shutdown_are_each_counted_and_cost_no_keyed_feed() {
    quiet_provoked_panics();
    for backend in BACKENDS {
        let held = spawned_and_held(backend);
        let handle = held.handle.clone();
        let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let register = |id| {
            let mut cq = HookedCq::new(SoftCq::new(16).unwrap().0);
            cq.at_drop = Some(Box::new(|| panic!("{PROVOKED}")));
            let (h, poster) = (handle.clone(), poster.clone());
            on_a_thread(move || h.register(Feed::new(cq, CqId(id), poster), FeedMode::Event))
        };
        let registered = register(9);
        until_handle_shows(&handle, "queued_commands: 1");
        let registered_too = register(10);
        until_handle_shows(&handle, "queued_commands: 2");
        let running = held.running;
        let stopped = on_a_thread(move || running.shutdown());
        until_handle_shows(&handle, "stopping: true");
        held.go1.send(()).unwrap();
        let mut stopped = match stopped.recv_timeout(WATCHDOG).unwrap() {
            Ok(s) => s,
            Err(e) => panic!("{backend:?}: the shutdown failed: {e}"),
        };
        for registered in [registered, registered_too] {
            let refused = registered.recv_timeout(WATCHDOG).unwrap();
            assert!(
                matches!(refused, Err(DriverError::Stopped)),
                "{backend:?}: {:?}",
                refused.map(|_| ())
            );
        }
        // Each counted by the shutdown's turn that refused it, or by the
        // thread's end if no turn took the commands first (after
        // `stopped.stats`).
        assert_eq!(
            handle.stats().handler_panics,
            2,
            "{backend:?}: each counted"
        );
        assert!(
            stopped.take(held.key_a).is_some(),
            "{backend:?}: A handed back"
        );
        let key1 = held.key1.recv_timeout(WATCHDOG).unwrap().unwrap();
        assert!(stopped.take(key1).is_some(), "{backend:?}: H1 handed back");
    }
}

/// A registration or a removal still queued when the stop is seen is refused
/// with `Stopped`: the registered feed is not served and then dropped under a
/// key the `Shutdown` does not know, and the feed a removal asked for is in
/// the `Shutdown`.
#[test]
fn commands_queued_when_the_stop_is_seen_are_refused_and_every_feed_is_handed_back() {
    for backend in BACKENDS {
        let Held {
            key_a,
            running,
            handle,
            key1,
            go1,
            _consumer,
        } = spawned_and_held(backend);
        let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (cq, hca) = SoftCq::new(16).unwrap();
        let h = handle.clone();
        let registered =
            on_a_thread(move || h.register(Feed::new(cq, CqId(9), poster), FeedMode::Event));
        until_handle_shows(&handle, "queued_commands: 1");
        let h = handle.clone();
        let removed_a = on_a_thread(move || h.remove(key_a));
        until_handle_shows(&handle, "queued_commands: 2");
        let stopped = on_a_thread(move || running.shutdown());
        until_handle_shows(&handle, "stopping: true");
        go1.send(()).unwrap();
        let mut stopped = stopped.recv_timeout(WATCHDOG).unwrap().unwrap();
        match registered.recv_timeout(WATCHDOG).unwrap() {
            Err(DriverError::Stopped) => assert!(hca.stats().destroyed, "{backend:?}: dropped"),
            Ok(_) => {
                panic!("{backend:?}: a registration queued when the stop was seen was applied")
            }
            Err(e) => panic!("{backend:?}: {e}"),
        }
        match removed_a.recv_timeout(WATCHDOG).unwrap() {
            Err(DriverError::Stopped) => {
                assert!(
                    stopped.take(key_a).is_some(),
                    "{backend:?}: A is in the Shutdown"
                )
            }
            other => panic!("{backend:?}: the removal said {:?}", other.map(|f| f.id())),
        }
        let key1 = key1.recv_timeout(WATCHDOG).unwrap().unwrap();
        assert!(stopped.take(key1).is_some(), "{backend:?}");
        assert_eq!(stopped.len(), 0, "{backend:?}: and nothing else");
    }
}

/// A command queued by another thread while the caller's loop applies the
/// commands before it: the loop's `process` says busy (the wake the command
/// wrote may have been cleared by that turn), or the driver's fd is readable;
/// a loop that waits on the fd whenever `process` is not busy, as the docs
/// say, applies the command. (The answers reach the registering threads, and
/// this one, through other threads: the loop also goes round while nothing
/// is queued.)
#[test]
fn a_command_queued_while_the_callers_loop_applies_commands_is_not_slept_on() {
    for backend in BACKENDS {
        let mut driver = Driver::new(DriverConfig::default().with_backend(backend)).unwrap();
        let handle = driver.handle();
        driver.process(Some(Duration::ZERO)).unwrap();
        let (second_tx, second) = mpsc::channel();
        let h = handle.clone();
        let first = hooked_feed(1, move || {
            let queued = h.clone();
            let answer =
                on_a_thread(move || queued.register(hooked_feed(2, || {}), FeedMode::Event));
            until_handle_shows(&h, "queued_commands: 1");
            second_tx.send(answer).unwrap();
        });
        let h = handle.clone();
        let first = on_a_thread(move || h.register(first, FeedMode::Event));
        let (mut answered, mut second_answer) = (0, None);
        let start = std::time::Instant::now();
        while answered < 2 {
            assert!(
                start.elapsed() < WATCHDOG,
                "{backend:?}: a registration was never applied"
            );
            let activity = driver.process(Some(Duration::ZERO)).unwrap();
            std::thread::yield_now();
            if let Ok(key) = first.try_recv() {
                assert!(key.is_ok(), "{backend:?}");
                answered += 1;
            }
            if let Ok(rx) = second.try_recv() {
                second_answer = Some(rx);
            }
            if let Some(Ok(key)) = second_answer.as_ref().map(|rx| rx.try_recv()) {
                assert!(key.is_ok(), "{backend:?}");
                answered += 1;
            }
            let queued = !format!("{handle:?}").contains("queued_commands: 0");
            if !activity.busy && queued {
                let mut fd = libc::pollfd {
                    fd: driver.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the call.
                let ready = unsafe { libc::poll(&mut fd, 1, WATCHDOG.as_millis() as i32) };
                assert_eq!(
                    ready, 1,
                    "{backend:?}: not busy, and the driver's fd stayed silent"
                );
            }
        }
    }
}

/// The feed's own code that the driver's thread runs while it registers the
/// feed (its CQ's `device_events`) panics: the registrant gets the panic, the
/// driver counts it and serves on, its other feeds included.
#[test]
fn a_cq_that_panics_while_the_driver_registers_it_is_refused_and_the_driver_serves_on() {
    quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let (driver, _) = driver_serving(Feed::new(cq, CqId(0), poster), FeedMode::Event);
    let running = driver.spawn().unwrap();
    let panicking = hooked_feed(1, || panic!("{PROVOKED}"));
    match running.handle().register(panicking, FeedMode::Event) {
        Err(DriverError::Panicked(p)) => assert_eq!(p.message(), Some(PROVOKED)),
        other => panic!("the registration said {:?}", other.map(|_| ())),
    }
    assert!(running.is_running(), "the driver's thread serves on");
    hca.push(wc(7)).unwrap();
    assert!(
        matches!(take(&mut consumer, 1)[..], [VerbsEvent::Completion { wc, .. }] if wc.wr_id == 7)
    );
    let stopped = running.shutdown().unwrap();
    assert_eq!(stopped.stats.handler_panics, 1);
    assert_eq!(stopped.len(), 1, "the other feed is handed back");
}

/// A handle outlives its driver: a command sent once the driver is gone
/// (shut down, or a caller's driver dropped) is answered `Stopped` at once
/// instead of waiting for an answer nobody will give.
#[test]
fn a_command_sent_after_the_driver_is_gone_is_refused_not_left_waiting() {
    for gone in ["shut down", "dropped"] {
        let driver = Driver::new(DriverConfig::default()).unwrap();
        let handle = driver.handle();
        match gone {
            "shut down" => drop(driver.spawn().unwrap().shutdown().unwrap()),
            _ => drop(driver),
        }
        let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (cq, hca) = SoftCq::new(16).unwrap();
        let h = handle.clone();
        let registered =
            on_a_thread(move || h.register(Feed::new(cq, CqId(0), poster), FeedMode::Event));
        let answer = registered
            .recv_timeout(WATCHDOG)
            .unwrap_or_else(|_| panic!("{gone}: no answer"));
        assert!(matches!(answer, Err(DriverError::Stopped)), "{gone}");
        assert!(
            hca.stats().destroyed,
            "{gone}: the refused feed was dropped"
        );
    }
}

/// A caller's driver dropped with a registration queued whose feed's drop
/// panics: the registrant is answered `Stopped`, and the panic reaches the
/// caller that dropped the driver (it is theirs), not swallowed.
#[test]
fn a_refused_feed_whose_drop_panics_reaches_the_caller_that_dropped_its_driver() {
    quiet_provoked_panics();
    let driver = Driver::new(DriverConfig::default()).unwrap();
    let handle = driver.handle();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    // Its provider's destroy fails loudly.
    let mut cq = HookedCq::new(SoftCq::new(16).unwrap().0);
    cq.at_drop = Some(Box::new(|| panic!("{PROVOKED}")));
    let feed = Feed::new(cq, CqId(0), poster);
    let h = handle.clone();
    let registered = on_a_thread(move || h.register(feed, FeedMode::Event));
    until_handle_shows(&handle, "queued_commands: 1");
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(driver)));
    assert!(dropped.is_err(), "the feed's panic reaches the caller");
    let answer = registered.recv_timeout(WATCHDOG).unwrap();
    assert!(matches!(answer, Err(DriverError::Stopped)));
}

/// A key names its feed in the driver that made it only. Every driver's
/// first feed sits in slot 0, generation 1: another driver's key must
/// remove nothing there, whatever its feed type.
#[test]
fn a_key_of_another_driver_removes_nothing_there() {
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let mut a = Driver::new(DriverConfig::default()).unwrap();
    let key_a = a
        .register(
            Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster.clone()),
            FeedMode::Event,
        )
        .unwrap();
    let hooked = HookedCq::new(SoftCq::new(4).unwrap().0);
    let hooked_a = a
        .register(Feed::new(hooked, CqId(2), poster.clone()), FeedMode::Event)
        .unwrap();
    let mut b = Driver::new(DriverConfig::default()).unwrap();
    let key_b = b
        .register(
            Feed::new(SoftCq::new(4).unwrap().0, CqId(1), poster.clone()),
            FeedMode::Event,
        )
        .unwrap();
    b.register(
        Feed::new(SoftCq::new(4).unwrap().0, CqId(3), poster),
        FeedMode::Event,
    )
    .unwrap();
    assert_eq!(key_a.id(), key_b.id(), "alike names in the two drivers");
    assert!(matches!(b.remove(key_a), Err(DriverError::NoSuchFeed)));
    assert!(matches!(b.remove(hooked_a), Err(DriverError::NoSuchFeed)));
    let running_b = b.spawn().unwrap();
    let handle_b = running_b.handle().clone();
    assert!(matches!(
        handle_b.remove(key_a),
        Err(DriverError::NoSuchFeed)
    ));
    assert!(matches!(
        handle_b.remove(hooked_a),
        Err(DriverError::NoSuchFeed)
    ));
    let mut stopped = running_b.shutdown().unwrap();
    assert!(stopped.take(key_a).is_none());
    assert!(stopped.take(hooked_a).is_none());
    assert_eq!(stopped.len(), 2, "both of B's feeds handed back");
    assert_eq!(stopped.take(key_b).unwrap().id(), CqId(1));
    assert_eq!(a.remove(key_a).unwrap().id(), CqId(0));
    assert_eq!(a.remove(hooked_a).unwrap().id(), CqId(2));
}

// --- handle calls from user code the driver runs outside a turn -------------

/// A device's async events whose drop runs `at_drop` (user code the driver
/// runs when it lets go of the device feed it added).
struct EventsDroppedWith {
    events: evd_verbs::soft::SoftAsyncEvents,
    at_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl evd_verbs::AsyncEventSource for EventsDroppedWith {
    fn fd(&self) -> std::os::fd::RawFd {
        self.events.fd()
    }
    fn next_event(&mut self) -> std::io::Result<Option<evd_verbs::AsyncEvent>> {
        self.events.next_event()
    }
}

impl Drop for EventsDroppedWith {
    fn drop(&mut self) {
        if let Some(f) = self.at_drop.take() {
            f();
        }
    }
}

/// A feed whose CQ's device events (the device feed the driver adds for
/// it) call `handle` to register a feed when dropped, and send the answer.
/// The feed's consumer is returned to be held: dropped, it closes the EVD,
/// and the driver lets go of the device feed at its first turn (before the
/// caller has set `handle`).
fn feed_whose_device_feed_calls_the_handle_when_dropped(
    handle: std::sync::Arc<std::sync::Mutex<Option<evd_verbs::DriverHandle>>>,
) -> (
    Hooked,
    evd::Consumer<VerbsEvent>,
    mpsc::Receiver<Result<(), DriverError>>,
) {
    let (answer, answered) = mpsc::channel();
    let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let cq = HookedCq::new(SoftCq::new(16).unwrap().0);
    let mut once = Some((handle, answer));
    *cq.device_events.lock().unwrap() = Some(Box::new(move || {
        let (handle, answer) = once.take()?;
        let (events, _device) = evd_verbs::soft::SoftDevice::new().unwrap();
        let at_drop = move || {
            let handle = handle.lock().unwrap().clone().expect("set before");
            let (poster, _) = evd::bounded::<VerbsEvent>(16).unwrap();
            let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(99), poster);
            let r = handle.register(feed, FeedMode::Event).map(drop);
            let _ = answer.send(r);
        };
        Some(Box::new(EventsDroppedWith {
            events,
            at_drop: Some(Box::new(at_drop)),
        }))
    }));
    (Feed::new(cq, CqId(0), poster), consumer, answered)
}

/// The handle call user code made on the driver's thread answered (within
/// the watchdog) with `OnDriverThread`.
fn assert_refused_on_the_driver_thread(answered: &mpsc::Receiver<Result<(), DriverError>>) {
    let r = answered
        .recv_timeout(WATCHDOG)
        .expect("the handle call on the driver's thread never returned");
    assert!(matches!(r, Err(DriverError::OnDriverThread)), "{r:?}");
}

/// A spawned driver's thread runs user code after its last turn too (the
/// device feeds it added are dropped there at a shutdown): a handle call
/// from it is refused as on the driver's thread, and the shutdown ends.
#[test]
fn a_handle_call_from_a_device_feed_dropped_at_shutdown_is_refused_not_hung() {
    let handle = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (feed, _consumer, answered) =
        feed_whose_device_feed_calls_the_handle_when_dropped(handle.clone());
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver.register(feed, FeedMode::Event).unwrap();
    let running = driver.spawn().unwrap();
    *handle.lock().unwrap() = Some(running.handle().clone());
    let (done, shut) = mpsc::channel();
    std::thread::spawn(move || done.send(running.shutdown().map(drop)));
    assert_refused_on_the_driver_thread(&answered);
    shut.recv_timeout(WATCHDOG).unwrap().unwrap();
}

/// The same on a driver run from the caller's loop: `Driver::remove` lets
/// go of the removed feed's device feed on the caller's thread, whose
/// handle call is refused.
#[test]
fn a_handle_call_from_a_device_feed_dropped_by_remove_is_refused_not_hung() {
    let handle = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (feed, _consumer, answered) =
        feed_whose_device_feed_calls_the_handle_when_dropped(handle.clone());
    let (done, removed) = mpsc::channel();
    std::thread::spawn(move || {
        let mut driver = Driver::new(DriverConfig::default()).unwrap();
        *handle.lock().unwrap() = Some(driver.handle());
        let key = driver.register(feed, FeedMode::Event).unwrap();
        done.send(driver.remove(key).map(drop)).unwrap();
    });
    assert_refused_on_the_driver_thread(&answered);
    removed.recv_timeout(WATCHDOG).unwrap().unwrap();
}

/// A feed the driver refuses (its CQ has no completion channel) is
/// dropped inside the driver's call: a handle call from that drop is
/// refused too, not left waiting for the caller's thread.
#[test]
fn a_handle_call_from_a_refused_feeds_drop_is_refused_not_hung() {
    let (answer, answered) = mpsc::channel();
    let (done, refused) = mpsc::channel();
    std::thread::spawn(move || {
        let mut driver = Driver::new(DriverConfig::default()).unwrap();
        let handle = driver.handle();
        let mut cq = HookedCq::new(SoftCq::new(4).unwrap().0);
        cq.channel_less = true;
        cq.at_drop = Some(Box::new(move || {
            let (poster, _) = evd::bounded::<VerbsEvent>(16).unwrap();
            let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(99), poster);
            let _ = answer.send(handle.register(feed, FeedMode::Event).map(drop));
        }));
        let (poster, _) = evd::bounded::<VerbsEvent>(16).unwrap();
        let r = driver.register(Feed::new(cq, CqId(0), poster), FeedMode::Event);
        done.send(r.map(drop)).unwrap();
    });
    assert_refused_on_the_driver_thread(&answered);
    let r = refused.recv_timeout(WATCHDOG).unwrap();
    assert!(matches!(r, Err(DriverError::NoChannel)), "{r:?}");
}
