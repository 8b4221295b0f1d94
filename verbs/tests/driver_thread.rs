//! User code on a driver's or a poller's thread (an upcall handler of an
//! EVD its feeds post into). One that panics: stopping the thread returns
//! the panic as an error and never panics again. One that calls back into
//! the driver: a shutdown, a removal or a registration from the driver's
//! own thread is refused instead of waiting for itself.

mod common;

use common::driver::{WATCHDOG, driver_serving, remove_within};
use common::wc;
use evd::{Invoke, UpcallPolicy};
use evd_verbs::soft::{SoftCq, SoftCqProducer};
use evd_verbs::{
    CqId, Driver, DriverConfig, DriverError, Feed, FeedMode, Poller, RunningDriver, VerbsEvent,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An EVD whose SingleInstance handler reports that it ran, then panics with
/// `message`. Returns its poster and the channel the report comes on.
fn panicking_evd(
    message: &'static str,
) -> (
    evd::Poster<VerbsEvent>,
    evd::Upcalls<VerbsEvent>,
    mpsc::Receiver<()>,
) {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (ran, rx) = mpsc::channel();
    let ran = Mutex::new(ran);
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
        let _ = ran.lock().unwrap().send(());
        panic!("{}", message);
    });
    (poster, up, rx)
}

/// A running driver with one soft CQ's feed into `poster`'s EVD (event
/// mode), and the CQ's producer side.
fn spawn_driver(poster: evd::Poster<VerbsEvent>) -> (RunningDriver, SoftCqProducer) {
    let (cq, hca) = SoftCq::new(64).unwrap();
    let (driver, _) = driver_serving(Feed::new(cq, CqId(0), poster), FeedMode::Event);
    (driver.spawn().unwrap(), hca)
}

/// A running driver whose thread has run a handler that panicked with
/// `message` (the handler reported that it ran before panicking), and the
/// dispatcher (kept alive so that its EVD stays open).
fn driver_whose_handler_panicked(
    message: &'static str,
) -> (RunningDriver, evd::Upcalls<VerbsEvent>) {
    let (poster, up, ran) = panicking_evd(message);
    let (running, hca) = spawn_driver(poster);
    hca.push(wc(1)).unwrap();
    ran.recv_timeout(WATCHDOG)
        .expect("the handler ran on the driver thread");
    (running, up)
}

#[test]
fn a_driver_whose_handler_panicked_shuts_down_with_the_panic_not_a_second_one() {
    let (running, _up) = driver_whose_handler_panicked("a driver's handler failed");
    match running.shutdown() {
        Err(DriverError::Panicked(p)) => {
            assert_eq!(p.message(), Some("a driver's handler failed"))
        }
        other => panic!("expected the handler's panic, got {other:?}"),
    }
}

#[test]
fn a_dropped_driver_whose_handler_panicked_does_not_panic_again() {
    let (running, _up) = driver_whose_handler_panicked("a dropped driver's handler failed");
    drop(running); // joins; the panic is not resumed here
}

#[test]
fn shutdown_from_an_upcall_on_the_driver_thread_is_refused_not_a_deadlock() {
    let slot: Arc<Mutex<Option<RunningDriver>>> = Arc::default();
    let (said, answer) = mpsc::channel();
    let (poster, consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let s = slot.clone();
    let said = Mutex::new(said);
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
        if let Some(running) = s.lock().unwrap().take() {
            let _ = said.lock().unwrap().send(running.shutdown().err());
        }
    });
    let (running, hca) = spawn_driver(poster);
    *slot.lock().unwrap() = Some(running);
    hca.push(wc(1)).unwrap();
    let got = answer
        .recv_timeout(WATCHDOG)
        .expect("the handler called shutdown");
    assert!(
        matches!(got, Some(DriverError::OnDriverThread)),
        "expected OnDriverThread, got {got:?}"
    );
    drop(up.teardown());
}

/// A poller whose thread has run a handler that panicked with `message`,
/// and the dispatcher (kept alive so that its EVD stays open).
fn poller_whose_handler_panicked(
    message: &'static str,
) -> (Poller<SoftCq>, evd::Upcalls<VerbsEvent>) {
    let (poster, up, ran) = panicking_evd(message);
    let (cq, hca) = SoftCq::new(64).unwrap();
    let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster)], 16).unwrap();
    hca.push(wc(1)).unwrap();
    ran.recv_timeout(WATCHDOG)
        .expect("the handler ran on the poller thread");
    (poller, up)
}

#[test]
fn a_poller_whose_handler_panicked_stops_with_the_panic_not_a_second_one() {
    let (poller, _up) = poller_whose_handler_panicked("a poller's handler failed");
    match poller.stop() {
        Err(DriverError::Panicked(p)) => {
            assert_eq!(p.message(), Some("a poller's handler failed"))
        }
        Err(e) => panic!("expected the handler's panic, got {e}"),
        Ok(_) => panic!("expected the handler's panic"),
    }
}

#[test]
fn a_dropped_poller_whose_handler_panicked_does_not_panic_again() {
    let (poller, _up) = poller_whose_handler_panicked("a dropped poller's handler failed");
    drop(poller); // joins; the panic nobody took is dropped, not resumed here
}

#[test]
fn handle_calls_from_an_upcall_on_the_driver_thread_are_refused_not_deadlocked() {
    use std::sync::{Arc, Mutex, OnceLock, mpsc};
    let (poster, consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let handle = driver.handle();
    let (cq, hca) = SoftCq::new(64).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(0), poster.clone()), FeedMode::Event)
        .unwrap();
    let running = driver.spawn().unwrap();
    let key_cell = Arc::new(OnceLock::new());
    key_cell.set(key).unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let spare = Mutex::new(Some(SoftCq::new(4).unwrap().0));
    let upcalls = consumer.into_upcalls(
        evd::UpcallPolicy::SingleInstance,
        evd::Invoke::Any,
        move |ev, _| {
            if ev.is_err() {
                return;
            }
            // This runs on the driver's thread (the feed's post ran it).
            let removed = handle.remove(*key_cell.get().unwrap());
            let registered =
                spare.lock().unwrap().take().map(|cq| {
                    handle.register(Feed::new(cq, CqId(1), poster.clone()), FeedMode::Event)
                });
            tx.lock()
                .unwrap()
                .send((removed.err(), registered.and_then(Result::err)))
                .unwrap();
        },
    );
    hca.push(wc(1)).unwrap();
    let (removed, registered) = rx.recv_timeout(Duration::from_secs(30)).expect("no upcall");
    assert!(
        matches!(removed, Some(DriverError::OnDriverThread)),
        "{removed:?}"
    );
    assert!(
        matches!(registered, Some(DriverError::OnDriverThread)),
        "{registered:?}"
    );
    // From another thread the same calls work.
    let feed: Feed<SoftCq> = remove_within(running.handle(), key).unwrap();
    drop(feed);
    drop(upcalls.teardown());
    running.shutdown().unwrap();
}

/// Drivers nest: an upcall of a spawned driver A's feed runs a driver B of
/// its own, and an upcall of B's feed (still on A's thread, inside A's
/// turn) calls A's handle. Refused as on A's thread, not queued for the
/// thread that is waiting for the answer.
#[test]
fn a_handle_call_from_a_nested_drivers_upcall_is_refused_not_deadlocked() {
    let mut b = Driver::new(DriverConfig::default()).unwrap();
    let (cq_b, hca_b) = SoftCq::new(16).unwrap();
    let (poster_b, consumer_b) = evd::bounded::<VerbsEvent>(16).unwrap();
    b.register(Feed::new(cq_b, CqId(2), poster_b), FeedMode::Event)
        .unwrap();
    let mut a = Driver::new(DriverConfig::default()).unwrap();
    let handle_a = a.handle();
    let (cq_a, hca_a) = SoftCq::new(16).unwrap();
    let (poster_a, consumer_a) = evd::bounded::<VerbsEvent>(16).unwrap();
    a.register(Feed::new(cq_a, CqId(1), poster_a), FeedMode::Event)
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let spare = Mutex::new(Some(SoftCq::new(4).unwrap().0));
    let (spare_poster, _spare_consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    let answered = Arc::new(AtomicBool::new(false));
    let answered_b = Arc::clone(&answered);
    let upcalls_b =
        consumer_b.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
            let Some(cq) = ev.ok().and(spare.lock().unwrap().take()) else {
                return;
            };
            let feed = Feed::new(cq, CqId(9), spare_poster.clone());
            let refused = handle_a.register(feed, FeedMode::Event).err();
            answered_b.store(true, Ordering::Relaxed);
            tx.lock().unwrap().send(refused).unwrap();
        });
    let b = Mutex::new(Some(b));
    let upcalls_a =
        consumer_a.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
            let Some(mut b) = ev.ok().and(b.lock().unwrap().take()) else {
                return;
            };
            hca_b.push(wc(1)).unwrap();
            while !answered.load(Ordering::Relaxed) {
                b.process(Some(Duration::from_millis(100))).unwrap();
            }
        });
    let running = a.spawn().unwrap();
    hca_a.push(wc(1)).unwrap();
    let Ok(refused) = rx.recv_timeout(WATCHDOG) else {
        // A's thread waits for itself: joining it, or tearing down the
        // dispatcher whose handler it is in, would hang the test.
        std::mem::forget((running, upcalls_a, upcalls_b));
        panic!("B's upcall never got an answer: the call waits for its own thread");
    };
    assert!(
        matches!(refused, Some(DriverError::OnDriverThread)),
        "{refused:?}"
    );
    running.shutdown().unwrap();
    drop((upcalls_a.teardown(), upcalls_b.teardown()));
}

/// A poller stopped, or dropped, from an upcall on its own thread: `stop`
/// is refused and the drop does not wait, and the poller ends once the
/// upcall returns, without joining itself.
#[test]
fn a_poller_stopped_or_dropped_from_its_own_upcall_does_not_join_itself() {
    for stop in [true, false] {
        let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (cq, hca) = SoftCq::new(16).unwrap();
        let slot: Arc<Mutex<Option<Poller<SoftCq>>>> = Arc::default();
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let in_handler = Arc::clone(&slot);
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
                let Some(poller) = ev.ok().and(in_handler.lock().unwrap().take()) else {
                    return;
                };
                let on_its_thread = std::thread::current().name() == Some("evd-verbs-poller");
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if stop {
                        poller.stop().err()
                    } else {
                        drop(poller);
                        None
                    }
                }));
                tx.lock()
                    .unwrap()
                    .send((on_its_thread, outcome.is_ok(), outcome.ok().flatten()))
                    .unwrap();
            });
        let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster)], 16).unwrap();
        *slot.lock().unwrap() = Some(poller);
        hca.push(wc(1)).unwrap();
        let (on_its_thread, returned, error) = rx.recv_timeout(WATCHDOG).expect("the upcall ran");
        assert!(
            on_its_thread,
            "stop {stop}: the upcall ran on the poller's thread"
        );
        assert!(returned, "stop {stop}: the call panicked");
        if stop {
            assert!(
                matches!(error, Some(DriverError::OnDriverThread)),
                "{error:?}"
            );
        }
        // The poller ends once the upcall returns: its thread drops its
        // feed, and the CQ with it.
        let start = std::time::Instant::now();
        while !hca.stats().destroyed {
            assert!(
                start.elapsed() < WATCHDOG,
                "stop {stop}: the poller never ended"
            );
            std::thread::yield_now();
        }
        drop(upcalls.teardown());
    }
}
