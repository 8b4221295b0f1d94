//! The registry's unit tests: keys across a slot's generations, and
//! removals whose cancellation or wait the backend refuses (the test
//! faults `Faults`).

use super::super::cycle::Phase;
use super::super::readiness::tag;
use super::super::slot::Removal;
use crate::soft::SoftCq;
use crate::{
    CqId, Driver, DriverBackend, DriverConfig, DriverError, Feed, FeedMode, VerbsEvent,
    WorkCompletion,
};
use std::time::{Duration, Instant};

/// A removed feed's key names no later feed of its slot, however many
/// registrations later: the ring's requests carry 24 bits of the
/// generation, the keys all of it. The later feed's poll completions,
/// which carry those 24 bits only, still find it.
#[test]
fn a_removed_feeds_key_names_no_later_feed_of_its_slot() {
    for backend in [DriverBackend::IoUring, DriverBackend::Epoll] {
        later_feed_of_the_slot(backend);
    }
}

fn later_feed_of_the_slot(backend: DriverBackend) {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let mut driver = Driver::new(DriverConfig::default().with_backend(backend)).unwrap();
    let (cq, _hca) = SoftCq::new(4).unwrap();
    let old = driver
        .register(Feed::new(cq, CqId(0), poster.clone()), FeedMode::Event)
        .unwrap();
    driver.remove(old).unwrap();
    // As if the slot had been registered into 2^24 - 1 times since.
    driver.generations[old.id().index as usize] += (1 << 24) - 1;
    let (cq, hca) = SoftCq::new(4).unwrap();
    let new = driver
        .register(Feed::new(cq, CqId(1), poster), FeedMode::Event)
        .unwrap();
    assert_eq!(new.id().index, old.id().index, "the same slot");
    assert_eq!(tag(new.id().generation), tag(old.id().generation));
    assert!(matches!(driver.remove(old), Err(DriverError::NoSuchFeed)));

    driver.process(Some(Duration::ZERO)).unwrap(); // arms the CQ
    hca.push(WorkCompletion::new(7)).unwrap();
    let start = Instant::now();
    let ev = loop {
        driver.process(Some(Duration::from_millis(10))).unwrap();
        if let Ok(ev) = consumer.try_dequeue() {
            break ev;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{backend:?}: never delivered"
        );
    };
    assert!(matches!(ev, VerbsEvent::Completion { cq: CqId(1), .. }));
    assert_eq!(driver.remove(new).unwrap().id(), CqId(1));
}

/// A driver serving one event-mode feed whose poll is in the backend
/// (armed and asleep); its key and its CQ's producer.
fn asleep_with_one_feed() -> (
    Driver,
    crate::FeedKey<Feed<SoftCq>>,
    crate::soft::SoftCqProducer,
    evd::Consumer<VerbsEvent>,
) {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let (cq, hca) = SoftCq::new(4).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    driver.process(Some(Duration::ZERO)).unwrap(); // arms, polls the fd
    assert!(
        driver.slots[key.id().index as usize]
            .as_ref()
            .unwrap()
            .poll_in_flight
    );
    (driver, key, hca, consumer)
}

/// The driver serves the feed: a completion pushed now is delivered.
fn still_served(
    driver: &mut Driver,
    hca: &crate::soft::SoftCqProducer,
    consumer: &mut evd::Consumer<VerbsEvent>,
    wr_id: u64,
) {
    hca.push(WorkCompletion::new(wr_id)).unwrap();
    let start = Instant::now();
    loop {
        let _ = driver.process(Some(Duration::from_millis(10)));
        if let Ok(VerbsEvent::Completion { wc, .. }) = consumer.try_dequeue() {
            assert_eq!(wc.wr_id, wr_id);
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "completion {wr_id} never delivered"
        );
    }
}

/// A removal whose cancellation the backend refuses begins nothing: the
/// caller gets the error, the feed stays registered and served, and a
/// later removal takes it.
#[test]
fn a_removal_whose_cancellation_is_refused_leaves_the_feed_served() {
    let (mut driver, key, hca, mut consumer) = asleep_with_one_feed();
    driver.faults.cancels = 1;
    assert!(matches!(driver.remove(key), Err(DriverError::Io(_))));
    still_served(&mut driver, &hca, &mut consumer, 1);
    driver.process(Some(Duration::ZERO)).unwrap(); // asleep again
    assert_eq!(driver.remove(key).unwrap().id(), CqId(0));
}

/// The same through a handle: its remover is answered with the error, the
/// driver serves on (its caller is not failed by another thread's removal),
/// and so does the feed.
#[test]
fn a_handles_removal_whose_cancellation_is_refused_is_answered() {
    let (mut driver, key, hca, mut consumer) = asleep_with_one_feed();
    driver.faults.cancels = 1;
    let handle = driver.handle();
    let remover = std::thread::spawn(move || handle.remove(key).map(|_| ()));
    let start = Instant::now();
    while !remover.is_finished() {
        driver.process(Some(Duration::from_millis(10))).unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the remover was never answered"
        );
    }
    assert!(matches!(remover.join().unwrap(), Err(DriverError::Io(_))));
    still_served(&mut driver, &hca, &mut consumer, 2);
    driver.process(Some(Duration::ZERO)).unwrap();
    assert_eq!(driver.remove(key).unwrap().id(), CqId(0));
}

/// A refused removal is one command's answer: the commands that came
/// with it in the same batch are applied and answered as well.
#[test]
fn a_refused_removal_leaves_the_rest_of_its_batch_applied() {
    let (mut driver, key, _hca, _consumer) = asleep_with_one_feed();
    driver.faults.cancels = 1;
    let handle = driver.handle();
    let h = handle.clone();
    let remover = std::thread::spawn(move || h.remove(key).map(|_| ()));
    let (poster, _other) = evd::bounded::<VerbsEvent>(8).unwrap();
    let h = handle.clone();
    let registrant = std::thread::spawn(move || {
        let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(1), poster);
        h.register(feed, FeedMode::Event)
    });
    // Both commands queued before the driver takes any.
    let start = Instant::now();
    while !format!("{handle:?}").contains("queued_commands: 2") {
        assert!(!remover.is_finished() && !registrant.is_finished());
        assert!(start.elapsed() < Duration::from_secs(60), "never queued");
        std::thread::yield_now();
    }
    driver.process(Some(Duration::ZERO)).unwrap();
    assert!(matches!(remover.join().unwrap(), Err(DriverError::Io(_))));
    let added = registrant.join().unwrap().expect("registered");
    assert_eq!(driver.remove(added).unwrap().id(), CqId(1));
    assert_eq!(driver.remove(key).unwrap().id(), CqId(0));
}

/// On a spawned driver a refused removal answers its remover and ends
/// nothing else: the thread serves on, and its shutdown hands the feed back.
#[test]
fn a_spawned_driver_serves_on_after_a_refused_removal() {
    let (mut driver, key, hca, mut consumer) = asleep_with_one_feed();
    driver.faults.cancels = 1;
    let running = driver.spawn().unwrap();
    assert!(matches!(
        running.handle().remove(key),
        Err(DriverError::Io(_))
    ));
    assert!(running.handle().is_running());
    hca.push(WorkCompletion::new(3)).unwrap();
    consumer
        .wait(1, Some(Duration::from_secs(60)))
        .expect("delivered");
    let ev = consumer.try_dequeue();
    assert!(
        matches!(ev, Ok(VerbsEvent::Completion { wc, .. }) if wc.wr_id == 3),
        "still served: {ev:?}"
    );
    let mut shutdown = running.shutdown().expect("a clean shutdown");
    assert_eq!(shutdown.take(key).map(|f| f.id()), Some(CqId(0)));
}

/// A shutdown whose cancellations the backend refuses hands the feed back
/// (its poll ends with the backend, which goes with the driver).
#[test]
fn a_shutdown_whose_cancellations_are_refused_hands_the_feeds_back() {
    let (mut driver, key, _hca, _consumer) = asleep_with_one_feed();
    driver.faults.cancels = u32::MAX;
    let running = driver.spawn().unwrap();
    let mut shutdown = running.shutdown().expect("a clean shutdown");
    assert!(shutdown.backend_error.is_none(), "a refusal is no failure");
    assert_eq!(shutdown.take(key).map(|f| f.id()), Some(CqId(0)));
}

/// A shutdown whose wait for the cancellations fails (the backend, after
/// they were asked) hands the feed back too. The spawned thread's first
/// step makes the polls its own (`polls.rs`): a stop that comes while the
/// feed's poll is between its cancellation and its new request finds none
/// in flight and waits for nothing (legal, and the feed is handed back);
/// the test repeats until the shutdown had a wait to fail.
#[test]
fn a_shutdown_whose_wait_fails_hands_the_feeds_back() {
    for attempt in 0.. {
        let (mut driver, key, _hca, _consumer) = asleep_with_one_feed();
        driver.faults.steps = 1;
        let running = driver.spawn().unwrap();
        let mut shutdown = running.shutdown().expect("a clean shutdown");
        assert_eq!(shutdown.take(key).map(|f| f.id()), Some(CqId(0)));
        match shutdown.backend_error {
            Some(DriverError::Io(_)) => return,
            None => assert!(attempt < 10_000, "no shutdown ever had a wait"),
            Some(other) => panic!("{other}"),
        }
    }
}

/// A removal whose wait fails (the backend, after the cancellation was
/// asked) is under way: `remove` again with the key finishes it.
#[test]
fn a_removal_whose_wait_failed_is_finished_by_the_next() {
    let (mut driver, key, _hca, _consumer) = asleep_with_one_feed();
    let index = key.id().index as usize;
    // Cancellation asked, then the wait fails (the same test switch).
    assert!(driver.begin_remove(key.id(), Removal::Local).unwrap());
    driver.faults.steps = 1;
    assert!(matches!(driver.remove(key), Err(DriverError::Io(_))));
    assert!(
        driver.slots[index]
            .as_ref()
            .is_none_or(|s| s.removing.is_some())
    );
    assert_eq!(driver.remove(key).unwrap().id(), CqId(0));
    assert!(matches!(driver.remove(key), Err(DriverError::NoSuchFeed)));
}

/// Counts its wakes.
#[derive(Default)]
struct Woken(std::sync::atomic::AtomicUsize);
impl std::task::Wake for Woken {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A poster's room waiter polled once on `poster`'s full EVD: its wake
/// count, and the waiter (kept, it keeps its place).
fn waiting_for_room(
    poster: &evd::Poster<VerbsEvent>,
) -> (std::sync::Arc<Woken>, evd::RoomWaiter<VerbsEvent>) {
    let woken = std::sync::Arc::new(Woken::default());
    let waker = std::task::Waker::from(woken.clone());
    let mut room = poster.room_waiter();
    let polled = room.poll_room(&mut std::task::Context::from_waker(&waker));
    assert!(polled.is_pending(), "the EVD is full");
    (woken, room)
}

fn port_active() -> VerbsEvent {
    use crate::{AsyncElement, AsyncEvent, AsyncEventKind};
    VerbsEvent::Async(AsyncEvent::new(
        AsyncEventKind::PortActive,
        AsyncElement::Port(1),
    ))
}

/// A feed waiting for room, being removed (its fd poll still in the
/// backend: io_uring's multishot poll stays there while the feed waits),
/// takes no more turns: it gives its place in the room queue up at once,
/// so that a slot freed before its poll ends goes to the poster behind it.
#[test]
fn a_feed_being_removed_gives_its_place_in_the_room_queue_up_at_once() {
    use super::super::cycle::Phase;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    let mut driver =
        Driver::new(DriverConfig::default().with_backend(DriverBackend::IoUring)).unwrap();
    let (cq, hca) = SoftCq::new(4).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(0), poster.clone()), FeedMode::Event)
        .unwrap();
    driver.process(Some(Duration::ZERO)).unwrap(); // asleep, its fd polled
    poster.post(port_active()).unwrap(); // full
    hca.inject_spurious_event(); // wakes the feed: it finds the EVD full
    let index = key.id().index as usize;
    let start = Instant::now();
    while driver.slots[index].as_ref().unwrap().phase != Phase::Blocked {
        assert!(start.elapsed() < Duration::from_secs(60), "never blocked");
        driver.process(Some(Duration::from_millis(10))).unwrap();
    }
    assert!(driver.slots[index].as_ref().unwrap().poll_in_flight);
    let (behind, _room) = waiting_for_room(&poster);
    assert!(driver.begin_remove(key.id(), Removal::Local).unwrap());
    assert!(consumer.try_dequeue().is_ok()); // frees the slot
    assert_eq!(
        behind.0.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the freed slot went to the feed being removed"
    );
    assert_eq!(driver.remove(key).unwrap().id(), CqId(0));
}

/// A feed registered while it waits for room (its owner polled it) gives
/// that place up on its first turn if it does not wait there again: kept,
/// the place would take a freed slot's wake for its owner's old waker.
#[test]
fn a_feed_registered_while_it_waits_for_room_does_not_keep_that_place() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    poster.post(port_active()).unwrap(); // full
    let (cq, _hca) = SoftCq::new(4).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster.clone());
    let owner = std::sync::Arc::new(Woken::default());
    let owner_waker = std::task::Waker::from(owner.clone());
    let polled = feed.poll_room(&mut std::task::Context::from_waker(&owner_waker));
    assert!(polled.is_pending(), "the feed waits first in line");
    let (behind, _room) = waiting_for_room(&poster);
    assert!(consumer.try_dequeue().is_ok()); // wakes the feed's owner
    assert_eq!(owner.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver.register(feed, FeedMode::Event).unwrap();
    driver.process(Some(Duration::ZERO)).unwrap(); // nothing to post: asleep
    assert_eq!(
        behind.0.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the wake the feed was given went on to the poster behind it"
    );
    drop(driver.remove(key).unwrap());
}

/// A spawned driver whose thread fails (the backend refuses a feed's fd
/// poll) after it caught a handler's panic nobody took: the shutdown
/// reports that panic (the first failure).
#[test]
fn a_shutdown_reports_a_panic_caught_before_the_thread_failed() {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let upcalls = consumer.into_upcalls(
        evd::UpcallPolicy::SingleInstance,
        evd::Invoke::Any,
        |_, _| panic!("provoked by the test"),
    );
    // Epoll: its one-shot poll is asked again at each sleep.
    let config = DriverConfig::default().with_backend(DriverBackend::Epoll);
    let mut driver = Driver::new(config).unwrap();
    let (cq, hca) = SoftCq::new(4).unwrap();
    driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    driver.process(Some(Duration::ZERO)).unwrap(); // arms, polls the fd
    // The feed's next sleep (after the turn whose upcall panics) fails the
    // thread.
    driver.faults.fd_polls = Some(0);
    let running = driver.spawn().unwrap();
    hca.push(WorkCompletion::new(1)).unwrap();
    let start = Instant::now();
    while running.is_running() {
        assert!(start.elapsed() < Duration::from_secs(60), "never failed");
        std::thread::yield_now();
    }
    assert_eq!(running.stats().handler_panics, 1);
    match running.shutdown() {
        Err(DriverError::Panicked(p)) => assert_eq!(p.message(), Some("provoked by the test")),
        other => panic!("{other:?}"),
    }
    drop(upcalls);
}

/// A feed of a driver's: its key, its CQ's producer, its EVD's consumer.
type Served = (
    crate::FeedKey<Feed<SoftCq>>,
    crate::soft::SoftCqProducer,
    evd::Consumer<VerbsEvent>,
);

/// A driver made with `config` serving two event-mode feeds (CQs 0 and
/// 1), both armed and asleep.
fn two_feeds_asleep(config: DriverConfig) -> (Driver, Vec<Served>) {
    let mut driver = Driver::new(config).unwrap();
    let mut feeds = Vec::new();
    for id in 0..2 {
        let (poster, consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
        let (cq, hca) = SoftCq::new(4).unwrap();
        let key = driver
            .register(Feed::new(cq, CqId(id), poster), FeedMode::Event)
            .unwrap();
        feeds.push((key, hca, consumer));
    }
    driver.process(Some(Duration::ZERO)).unwrap(); // both armed, asleep
    (driver, feeds)
}

/// The driver's fd is readable now.
fn fd_readable(driver: &Driver) -> bool {
    let mut fd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(driver),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the call only.
    unsafe { libc::poll(&mut fd, 1, 0) == 1 }
}

/// The backend refusing one feed's fd poll (out of memory, as epoll's
/// watch limit would) fails the call only once every feed had its turn,
/// and leaves the driver's fd readable: the feed after it in the turn still
/// gets the completion whose readiness the call reaped.
#[test]
fn a_backend_refusing_one_feeds_poll_fails_the_call_after_every_feeds_turn() {
    let config = DriverConfig::default().with_backend(DriverBackend::Epoll);
    let (mut driver, mut feeds) = two_feeds_asleep(config);
    driver.faults.fd_polls = Some(0);
    // The first feed's wake is spurious: its turn ends asleep, asking for
    // its poll (refused); the second's has a completion.
    feeds[0].1.inject_spurious_event();
    feeds[1].1.push(WorkCompletion::new(7)).unwrap();
    // The refused feed's turn first: the call's first turn (before its
    // wait collects the reports) moves the cursor on by one.
    driver.cursor = feeds[0].0.id().index as usize + 1;
    let r = driver.process(Some(Duration::ZERO));
    assert!(matches!(r, Err(DriverError::Io(_))), "{r:?}");
    assert!(
        matches!(feeds[1].2.try_dequeue(), Ok(VerbsEvent::Completion { wc, .. }) if wc.wr_id == 7),
        "the feed after the refusal was not served"
    );
    assert!(fd_readable(&driver), "the fd is quiet");
    driver.faults.fd_polls = None;
    driver.process(Some(Duration::ZERO)).unwrap(); // asks again
}

/// A removal whose wait the backend fails while serving another feed (its
/// fd poll refused, as epoll's watch limit would) leaves the driver's fd
/// readable, as a failed `process` does: that feed sleeps with no poll in
/// the kernel, and a loop that waits on the fd must call `process` again
/// for it to be asked afresh.
#[test]
fn a_removal_whose_wait_the_backend_fails_leaves_the_drivers_fd_readable() {
    let config = DriverConfig::default()
        .with_backend(DriverBackend::Epoll)
        .with_budget(1);
    let (mut driver, mut feeds) = two_feeds_asleep(config);
    // The first feed takes its one completion with its whole budget: it
    // drains on (busy) at its next turn, the removal's, and goes to sleep
    // there, asking for its poll: refused.
    feeds[0].1.push(WorkCompletion::new(1)).unwrap();
    let start = Instant::now();
    while feeds[0].2.try_dequeue().is_err() {
        driver.process(Some(Duration::from_millis(10))).unwrap();
        assert!(start.elapsed() < Duration::from_secs(60), "never delivered");
    }
    let index = feeds[0].0.id().index as usize;
    assert!(driver.slots[index].as_ref().unwrap().is_busy());
    driver.faults.fd_polls = Some(0);
    let removed = driver.remove(feeds[1].0);
    assert!(matches!(removed, Err(DriverError::Io(_))), "{removed:?}");
    let slot = driver.slots[index].as_ref().unwrap();
    assert!(slot.phase == Phase::Sleeping && !slot.poll_in_flight);
    assert!(fd_readable(&driver), "the fd is quiet");
    driver.faults.fd_polls = None;
    assert_eq!(driver.remove(feeds[1].0).unwrap().id(), CqId(1));
    let (_, hca, mut consumer) = feeds.swap_remove(0);
    still_served(&mut driver, &hca, &mut consumer, 9);
}

mod device_feeds;
