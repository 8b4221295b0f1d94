//! A driver or a poller stopped from its own thread (by an upcall handler
//! of an EVD its feeds post into) cannot be joined there: it is detached,
//! ends once the upcall returns, and drops its feeds on its own thread.
//! Their code may panic then (a CQ's destroy, a held event's `Drop`): that
//! panic is swallowed, as everywhere these threads run user code, never an
//! abort of the process (which std does when a thread's result panics on
//! drop with nobody joining it).
//!
//! Each test waits for its thread to be gone from `/proc/self/task`: the
//! only driver thread and the only poller thread of this binary.

mod common;
use common::driver::WATCHDOG;
use common::hooked_cq::HookedCq;
use common::panics::{PROVOKED, quiet_provoked_panics};
use common::wc;
use evd::{Invoke, UpcallPolicy};
use evd_verbs::soft::{SoftCq, SoftCqProducer};
use evd_verbs::{CqId, Driver, DriverConfig, DriverError, Feed, FeedMode, Poller, VerbsEvent};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// True while a thread of this process has `name` (as `/proc` shows it:
/// its first 15 bytes).
fn thread_alive(name: &str) -> bool {
    let name = &name.as_bytes()[..name.len().min(15)];
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    tasks
        .flatten()
        .any(|t| std::fs::read(t.path().join("comm")).is_ok_and(|c| c.trim_ascii_end() == name))
}

/// Wait, under the watchdog, until no thread has `name`.
fn until_gone(name: &str) {
    let start = Instant::now();
    while thread_alive(name) {
        assert!(start.elapsed() < WATCHDOG, "{name} never ended");
        std::thread::yield_now();
    }
}

/// A soft CQ whose destroy panics (after saying so on the receiver), its
/// producer, and that receiver.
fn cq_whose_drop_panics() -> (HookedCq, SoftCqProducer, Receiver<()>) {
    let (soft, hca) = SoftCq::new(16).unwrap();
    let mut cq = HookedCq::new(soft);
    let (tx, dropped) = mpsc::channel();
    cq.at_drop = Some(Box::new(move || {
        let _ = tx.send(());
        panic!("{PROVOKED}: the CQ's destroy");
    }));
    (cq, hca, dropped)
}

/// The value in `slot`, once the test's thread has put it there (an upcall
/// may run before it has), under the watchdog.
fn taken_when_there<R>(slot: &Mutex<Option<R>>) -> R {
    let start = Instant::now();
    loop {
        if let Some(r) = slot.lock().unwrap().take() {
            return r;
        }
        assert!(start.elapsed() < WATCHDOG, "the slot was never filled");
        std::thread::yield_now();
    }
}

/// An EVD whose handler runs `stop` on the value in the slot (once), and
/// says on the receiver whether it answered `OnDriverThread`.
fn evd_stopping<R: Send + 'static>(
    slot: &Arc<Mutex<Option<R>>>,
    stop: fn(R) -> Result<(), DriverError>,
) -> (
    evd::Poster<VerbsEvent>,
    evd::Upcalls<VerbsEvent>,
    Receiver<bool>,
) {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (tx, answered) = mpsc::channel();
    let slot = slot.clone();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
        if let Some(r) = slot.lock().unwrap().take() {
            let _ = tx.send(matches!(stop(r), Err(DriverError::OnDriverThread)));
        }
    });
    (poster, up, answered)
}

#[test]
fn a_poller_stopped_from_its_own_thread_ends_there_when_a_feed_panics_on_drop() {
    quiet_provoked_panics();
    let slot = Arc::new(Mutex::new(None));
    let (poster, up, answered) = evd_stopping(&slot, |p: Poller<HookedCq>| p.stop().map(drop));
    let (cq, hca, dropped) = cq_whose_drop_panics();
    let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster)], 16).unwrap();
    *slot.lock().unwrap() = Some(poller);
    hca.push(wc(1)).unwrap();
    assert!(answered.recv_timeout(WATCHDOG).unwrap(), "OnDriverThread");
    dropped.recv_timeout(WATCHDOG).unwrap();
    until_gone("evd-verbs-poller");
    drop(up.teardown());
}

#[test]
fn a_driver_shut_down_from_its_own_thread_ends_there_when_a_feed_panics_on_drop() {
    quiet_provoked_panics();
    let slot = Arc::new(Mutex::new(None));
    let shutdown = |r: evd_verbs::RunningDriver| r.shutdown().map(drop);
    let (poster, up, answered) = evd_stopping(&slot, shutdown);
    let (cq, hca, dropped) = cq_whose_drop_panics();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    *slot.lock().unwrap() = Some(driver.spawn().unwrap());
    hca.push(wc(1)).unwrap();
    assert!(answered.recv_timeout(WATCHDOG).unwrap(), "OnDriverThread");
    dropped.recv_timeout(WATCHDOG).unwrap();
    until_gone("evd-verbs-driver");
    drop(up.teardown());
}

#[test]
fn a_poller_stopped_from_a_feeds_upcall_serves_no_later_feed() {
    // Feeds A then B, each with a completion before the first round; A's
    // handler stops the poller (waiting until it has it): B, after A in
    // that round, is not served.
    let slot: Arc<Mutex<Option<Poller<SoftCq>>>> = Arc::new(Mutex::new(None));
    let (a_poster, a_consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (tx, answered) = mpsc::channel();
    let handler_slot = slot.clone();
    let up = a_consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
        let poller = taken_when_there(&handler_slot);
        let _ = tx.send(matches!(poller.stop(), Err(DriverError::OnDriverThread)));
    });
    let (b_poster, mut b_consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (a_cq, a_hca) = SoftCq::new(16).unwrap();
    let (b_cq, b_hca) = SoftCq::new(16).unwrap();
    a_hca.push(wc(1)).unwrap();
    b_hca.push(wc(2)).unwrap();
    let feeds = vec![
        Feed::new(a_cq, CqId(0), a_poster),
        Feed::new(b_cq, CqId(1), b_poster),
    ];
    *slot.lock().unwrap() = Some(Poller::spawn(feeds, 16).unwrap());
    assert!(answered.recv_timeout(WATCHDOG).unwrap(), "OnDriverThread");
    until_gone("evd-verbs-poller");
    // The feeds were dropped with the poller: B's EVD is closed, empty.
    assert_eq!(b_consumer.try_dequeue(), Err(evd::TryDequeueError::Closed));
    drop(up.teardown());
}

#[test]
fn a_driver_shut_down_from_a_feeds_upcall_serves_no_later_feed() {
    // Two feeds, each with a completion before the first turn, each into
    // an EVD whose handler says it ran; the first handler to run shuts the
    // driver down (waiting until it has it). Whichever feed the turn
    // serves first, the other is not served after the shutdown was asked.
    let slot: Arc<Mutex<Option<evd_verbs::RunningDriver>>> = Arc::new(Mutex::new(None));
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (handled, events) = mpsc::channel();
    let (asked, answered) = mpsc::channel();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let mut upcalls = Vec::new();
    let mut producers = Vec::new();
    for id in 0..2u32 {
        let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (slot, first) = (slot.clone(), first.clone());
        let (handled, asked) = (handled.clone(), asked.clone());
        let handler = move |ev: Result<VerbsEvent, evd::Overflow>, _: bool| {
            if ev.is_err() {
                return;
            }
            let _ = handled.send(id);
            if !first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let running = taken_when_there(&slot);
            let refused = running.shutdown();
            let _ = asked.send(matches!(refused, Err(DriverError::OnDriverThread)));
        };
        upcalls.push(consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, handler));
        let (cq, hca) = SoftCq::new(16).unwrap();
        hca.push(wc(u64::from(id))).unwrap();
        producers.push(hca);
        let feed = Feed::new(cq, CqId(id), poster);
        driver.register(feed, FeedMode::Event).unwrap();
    }
    *slot.lock().unwrap() = Some(driver.spawn().unwrap());
    assert!(answered.recv_timeout(WATCHDOG).unwrap(), "OnDriverThread");
    until_gone("evd-verbs-driver");
    // Every handler call came from the driver's thread, which is gone.
    let served: Vec<u32> = events.try_iter().collect();
    assert_eq!(served.len(), 1, "feeds served: {served:?}");
    for up in upcalls {
        drop(up.teardown());
    }
}
