//! A driver's or a poller's thread whose user code panics (an upcall handler
//! of an EVD its feeds post into): stopping it returns the panic as an error
//! and never panics again; a shutdown called on the driver's own thread is
//! refused instead of joining itself.

use evd::{Invoke, UpcallPolicy};
use evd_verbs::soft::SoftCq;
use evd_verbs::{
    CqId, Driver, DriverConfig, DriverError, Feed, FeedMode, Poller, RunningDriver, VerbsEvent,
    WorkCompletion,
};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A watchdog, not a sleep: a report that never comes fails the test instead
/// of hanging it (generous, for a busy machine).
const WATCHDOG: Duration = Duration::from_secs(60);

fn wc(wr_id: u64) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        ..Default::default()
    }
}

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

#[test]
fn a_driver_whose_handler_panicked_shuts_down_with_the_panic_not_a_second_one() {
    let (poster, _up, ran) = panicking_evd("a driver's handler failed");
    let (cq, hca) = SoftCq::new(64).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    let running = driver.spawn().unwrap();
    hca.push(wc(1)).unwrap();
    ran.recv_timeout(WATCHDOG)
        .expect("the handler ran on the driver thread");
    match running.shutdown() {
        Err(DriverError::Panicked(p)) => {
            assert_eq!(p.message(), Some("a driver's handler failed"))
        }
        other => panic!("expected the handler's panic, got {other:?}"),
    }
}

#[test]
fn a_dropped_driver_whose_handler_panicked_does_not_panic_again() {
    let (poster, _up, ran) = panicking_evd("a dropped driver's handler failed");
    let (cq, hca) = SoftCq::new(64).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    let running = driver.spawn().unwrap();
    hca.push(wc(1)).unwrap();
    ran.recv_timeout(WATCHDOG)
        .expect("the handler ran on the driver thread");
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
    let (cq, hca) = SoftCq::new(64).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    *slot.lock().unwrap() = Some(driver.spawn().unwrap());
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

#[test]
fn a_poller_whose_handler_panicked_stops_with_the_panic_not_a_second_one() {
    let (poster, _up, ran) = panicking_evd("a poller's handler failed");
    let (cq, hca) = SoftCq::new(64).unwrap();
    let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster)], 16).unwrap();
    hca.push(wc(1)).unwrap();
    ran.recv_timeout(WATCHDOG)
        .expect("the handler ran on the poller thread");
    match poller.stop() {
        Err(p) => assert_eq!(p.message(), Some("a poller's handler failed")),
        Ok(_) => panic!("expected the handler's panic"),
    }
}
