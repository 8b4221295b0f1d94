//! With the `tracing` feature, the control-plane points emit events: a
//! driver's creation, thread start and stop, a feed's register and remove,
//! a caught handler panic, a CQ failure, a channel event for a CQ nobody
//! serves, an async device event, and the closure teardown hook. A small hand-written subscriber records them
//! (no `tracing-subscriber` dependency).
//!
//! Run with `cargo test -p evd-verbs --features tracing --test tracing`.

use evd::{Invoke, UpcallPolicy};
use evd_verbs::soft::{SoftChannel, SoftCq, SoftDevice};
use evd_verbs::{
    AsyncElement, AsyncEvent, AsyncEventKind, AsyncFeed, ChannelFeed, CqId, Driver, DriverError,
    Feed, FeedMode, TeardownError, VerbsEvent, VerbsObject, WorkCompletion,
};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// A watchdog, not a sleep: an event that never comes fails the test.
const WATCHDOG: Duration = Duration::from_secs(60);

/// One recorded event: its level, its target, and its fields as text
/// (`message=...` first).
#[derive(Debug, Clone)]
struct Recorded {
    level: Level,
    target: String,
    text: String,
    /// The thread that emitted it.
    thread: std::thread::ThreadId,
}

static RECORDED: Mutex<Vec<Recorded>> = Mutex::new(Vec::new());

/// Records every event; spans are not used by the crates.
struct Recorder;

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut text = String::new();
        event.record(&mut Fields(&mut text));
        RECORDED.lock().unwrap().push(Recorded {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            text,
            thread: std::thread::current().id(),
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Install the recorder process-wide (the driver's events come from its
/// own thread), once; the tests run in parallel, and each looks for events
/// only its own actions can have caused, or (`matching_here`) for those of
/// its own thread.
fn record() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(Recorder).expect("the only subscriber");
    });
}

/// The recorded events whose text contains every one of `parts`.
fn matching(parts: &[&str]) -> Vec<Recorded> {
    RECORDED
        .lock()
        .unwrap()
        .iter()
        .filter(|r| parts.iter().all(|p| r.text.contains(p)))
        .cloned()
        .collect()
}

/// [`matching`], of the events this thread emitted: the tests run in
/// parallel, and another test's driver or feed may emit the same text.
fn matching_here(parts: &[&str]) -> Vec<Recorded> {
    let here = std::thread::current().id();
    let mut found = matching(parts);
    found.retain(|r| r.thread == here);
    found
}

#[test]
fn a_spawned_driver_reports_its_creation_start_and_stop() {
    record();
    let driver = Driver::new(Default::default()).unwrap();
    let backend = format!("{:?}", driver.backend());
    let created = matching_here(&["driver created", &backend]);
    assert!(!created.is_empty(), "{:?}", RECORDED.lock().unwrap());
    assert_eq!(created[0].level, Level::DEBUG);
    assert!(created[0].target.starts_with("evd_verbs::driver"));
    let running = driver.spawn().unwrap();
    running.shutdown().unwrap();
    // The thread's events are in before its join returns.
    let started = matching(&["driver thread started", &backend]);
    let stopped = matching(&["driver thread stopped"]);
    assert!(!started.is_empty() && !stopped.is_empty());
    assert_eq!(
        (started[0].level, stopped[0].level),
        (Level::INFO, Level::INFO)
    );
}

#[test]
fn registering_and_removing_a_feed_is_reported() {
    record();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, _hca) = SoftCq::new(16).unwrap();
    let mut driver = Driver::new(Default::default()).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(41), poster), FeedMode::Event)
        .unwrap();
    let id = format!("{:?}", key.id());
    assert!(!matching_here(&["feed registered", &id]).is_empty());
    driver.remove(key).unwrap();
    assert!(!matching_here(&["feed removed", &id]).is_empty());
}

#[test]
fn a_caught_handler_panic_is_an_error_event() {
    const PROVOKED: &str = "provoked by the tracing test";
    static QUIET: Once = Once::new();
    QUIET.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&PROVOKED) {
                default(info);
            }
        }));
    });
    record();
    let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let _upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, |_, _| {
        std::panic::panic_any(PROVOKED)
    });
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut driver = Driver::new(Default::default()).unwrap();
    driver
        .register(Feed::new(cq, CqId(42), poster), FeedMode::Event)
        .unwrap();
    hca.push(WorkCompletion::new(1)).unwrap();
    let deadline = Instant::now() + WATCHDOG;
    loop {
        match driver.process(Some(Duration::from_millis(10))) {
            Err(DriverError::Panicked(p)) => {
                assert_eq!(p.message(), Some(PROVOKED));
                break;
            }
            Ok(_) => assert!(Instant::now() < deadline, "the handler never ran"),
            Err(e) => panic!("{e}"),
        }
    }
    let caught = matching(&["panicked", PROVOKED]);
    assert!(!caught.is_empty(), "{:?}", RECORDED.lock().unwrap());
    assert_eq!(caught[0].level, Level::ERROR);
}

#[test]
fn a_cq_failure_is_a_warning() {
    record();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    let (cq, hca) = SoftCq::new(4).unwrap();
    let mut feed = Feed::new(cq, CqId(43), poster);
    hca.fail_next_poll(5);
    feed.progress(16);
    let failed = matching(&["CQ failed", "CqId(43)", "errno 5"]);
    assert!(!failed.is_empty(), "{:?}", RECORDED.lock().unwrap());
    assert_eq!(failed[0].level, Level::WARN);
}

/// A channel event for a CQ the channel feed does not serve is a usage
/// error: a warning at the first, second, fourth... such event, not one per
/// event.
#[test]
fn an_unknown_channel_event_is_a_warning_told_at_powers_of_two() {
    record();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    feed.add(channel.create_cq(4).unwrap().0, CqId(0)).unwrap();
    let (_unserved, hca) = channel.create_cq(4).unwrap();
    for _ in 0..3 {
        hca.inject_spurious_event();
        assert_eq!(feed.take_events().unwrap(), 1);
    }
    assert_eq!(feed.stats().unknown_events, 3);
    let told = matching_here(&["does not serve"]);
    let counts: Vec<_> = told
        .iter()
        .map(|r| {
            (
                r.level,
                r.text.contains("unknown_events=1 "),
                r.text.contains("unknown_events=2 "),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [(Level::WARN, true, false), (Level::WARN, false, true)],
        "{told:?}"
    );
}

#[test]
fn async_device_events_are_reported_errors_as_warnings() {
    record();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    let (events, device) = SoftDevice::new().unwrap();
    let mut feed = AsyncFeed::new(events, poster);
    device.raise(AsyncEvent::new(
        AsyncEventKind::PortActive,
        AsyncElement::Port(7),
    ));
    device.raise(AsyncEvent::new(
        AsyncEventKind::CqError,
        AsyncElement::Cq(CqId(44)),
    ));
    feed.progress(16);
    let port = matching(&["async device event", "PortActive", "Port(7)"]);
    let cq = matching(&["async device event", "CqError", "CqId(44)"]);
    assert_eq!(
        (port.len(), cq.len()),
        (1, 1),
        "{:?}",
        RECORDED.lock().unwrap()
    );
    assert_eq!((port[0].level, cq[0].level), (Level::INFO, Level::WARN));
}

#[test]
fn the_teardown_hook_is_a_closure_with_state() {
    // A failed destroy needs real verbs objects; the soft providers have
    // none, so the hook closure is exercised directly (its call from a
    // failing Drop, and that call's WARN event, are unit-tested in
    // `ibv::teardown`).
    let failures = Arc::new(AtomicU64::new(0));
    let counter = failures.clone();
    evd_verbs::set_teardown_hook(move |e| {
        assert_eq!(e.object, VerbsObject::QueuePair);
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let hook = evd_verbs::clear_teardown_hook().expect("installed above");
    hook(&TeardownError::new(
        VerbsObject::QueuePair,
        "ibv_destroy_qp",
        std::io::Error::from_raw_os_error(libc::EBUSY),
    ));
    assert_eq!(failures.load(Ordering::Relaxed), 1);
}
