//! With the `tracing` feature, evd's control-plane points emit events: an
//! EVD's close (once, however many closes), a resize, an upcall policy
//! change, and a blocking post's wait for room longer than 1 ms (once, when
//! it ends). A small hand-written subscriber records them on the test's
//! own thread (no `tracing-subscriber` dependency).
//!
//! Run with `cargo test -p evd --features tracing --test tracing`.

use evd::{Invoke, UpcallPolicy};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Events as (level, target, fields as text); it panics (user code the
/// EVD must survive) on an event whose text contains the needle, if set.
#[derive(Default)]
struct Recorder(Mutex<Vec<(Level, String, String)>>, Option<&'static str>);

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
        let meta = event.metadata();
        // Recorded before a panic on it, so that a test sees it was emitted.
        let panics = self.1.is_some_and(|needle| text.contains(needle));
        self.0
            .lock()
            .unwrap()
            .push((*meta.level(), meta.target().to_owned(), text.clone()));
        if panics {
            panic!("a subscriber panicked on {text}");
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Run `f` with a recorder as this thread's subscriber; its events.
fn recorded(f: impl FnOnce()) -> Vec<(Level, String, String)> {
    let recorder = Arc::new(Recorder::default());
    tracing::subscriber::with_default(recorder.clone(), f);
    recorder.0.lock().unwrap().clone()
}

#[test]
fn a_close_is_reported_once() {
    let events = recorded(|| {
        let (_poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
        consumer.close();
        consumer.close();
        drop(consumer); // closes again: not reported again
    });
    let closes: Vec<_> = events
        .iter()
        .filter(|e| e.2.contains("EVD closed"))
        .collect();
    assert_eq!(closes.len(), 1, "{events:?}");
    assert_eq!(closes[0].0, Level::DEBUG);
    assert!(closes[0].1.starts_with("evd"), "{events:?}");
}

#[test]
fn a_resize_and_a_policy_change_are_reported() {
    let events = recorded(|| {
        let (_poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
        assert_eq!(consumer.resize(16), Ok(16));
        let mut up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, |_, _| {});
        up.set_policy(UpcallPolicy::SingleInstance, Invoke::New)
            .unwrap();
    });
    let resized = events
        .iter()
        .any(|e| e.2.contains("EVD resized") && e.2.contains("from=4") && e.2.contains("to=16"));
    let policy = events
        .iter()
        .any(|e| e.2.contains("upcall policy set") && e.2.contains("SingleInstance"));
    assert!(resized && policy, "{events:?}");
}

#[test]
fn a_long_room_wait_is_reported_once_when_it_ends() {
    let (poster, mut consumer) = evd::bounded::<u8>(1).unwrap();
    poster.post(1).unwrap();
    let consumer = &mut consumer;
    let events = std::thread::scope(|s| {
        // Frees the slot once the post waits for room (seated: past its
        // back-off, its clock read) and the wait has outlasted 1 ms: a
        // duration the test asks for, the order comes from `room_wanted`.
        s.spawn(move || {
            while !consumer.query().room_wanted {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(consumer.try_dequeue(), Ok(1));
        });
        recorded(|| {
            poster.post_blocking(2).unwrap();
            // A post that finds room does not read the clock, nor report.
            let (poster, _consumer) = evd::bounded::<u8>(1).unwrap();
            poster.post_blocking(3).unwrap();
        })
    });
    let waits: Vec<_> = events
        .iter()
        .filter(|e| e.2.contains("waited long for room"))
        .collect();
    assert_eq!(waits.len(), 1, "{events:?}");
    assert_eq!(waits[0].0, Level::INFO);
    let waited_us: u64 = waits[0]
        .2
        .split("waited_us=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("a waited_us field");
    // Measured from the sleep, after the backoff: above the 1 ms bound.
    assert!(waited_us > 1_000, "{events:?}");
}

/// A long wait for room that a panic ends (the draining upcall the post
/// runs, whose handler panics) is not reported: a subscriber that panicked
/// while that panic unwinds would abort the process.
#[test]
fn a_long_room_wait_that_a_handler_panic_ends_is_not_reported() {
    let (poster, consumer) = evd::bounded::<u8>(1).unwrap();
    poster.post(1).unwrap();
    let up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, |_, _| {
        panic!("the handler");
    });
    let events = std::thread::scope(|s| {
        // Once the post waits for room (seated) and the wait has outlasted
        // 1 ms, upcalls are enabled on the full ring: the waiting post is
        // woken and runs the upcall that drains it.
        let enabler = s.spawn(move || {
            let mut up = up;
            while !up.query().room_wanted {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(5));
            up.set_policy(UpcallPolicy::SingleInstance, Invoke::New)
                .unwrap();
            up
        });
        let recorder = Arc::new(Recorder::default());
        let posted = tracing::subscriber::with_default(recorder.clone(), || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poster.post_blocking(2)))
        });
        // Kept until the post is over (dropped, the upcalls would close
        // the EVD under it).
        let _up = enabler.join().unwrap();
        let raised = posted.expect_err("the handler's panic ends the post");
        assert_eq!(raised.downcast_ref::<&str>(), Some(&"the handler"));
        recorder.0.lock().unwrap().clone()
    });
    assert!(
        !events.iter().any(|e| e.2.contains("waited long")),
        "{events:?}"
    );
}

/// A subscriber that panics on the events whose text contains `needle`.
fn panics_on(needle: &'static str) -> Recorder {
    Recorder(Mutex::default(), Some(needle))
}

/// A subscriber (user code) that panics on the closed event runs after the
/// close's CNO trigger, not between taking the enable and triggering: the
/// key reaches the CNO, and the consumer's disable (whose barrier waits for
/// that trigger) returns.
#[test]
fn a_subscriber_panicking_on_the_closed_event_leaves_the_cno_its_key() {
    let mut cno = evd::Cno::new(1).unwrap();
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.bind_cno(&cno, 7).unwrap();
    assert_eq!(consumer.enable_cno().unwrap(), evd::ArmStatus::Armed);
    let closed = tracing::subscriber::with_default(panics_on("EVD closed"), || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(poster)))
    });
    assert!(closed.is_err(), "the subscriber's panic reaches the closer");
    let key = cno.try_next();
    if key != Some(7) {
        // The disable's barrier would wait for ever for the trigger that
        // never came: fail, not hang.
        std::mem::forget(consumer);
        panic!("the close did not trigger the CNO: {key:?}");
    }
    consumer.disable_cno();
    assert_eq!(consumer.try_dequeue(), Err(evd::TryDequeueError::Closed));
}

/// A subscriber that panics on the policy event runs before the switch: the
/// panic leaves no upcall counted in flight holding the token (with no
/// instance to hand it back, no post would start one again and a teardown
/// would wait for ever), and the next switch works.
#[test]
fn a_subscriber_panicking_on_the_policy_event_leaves_no_upcall_in_flight() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handled = seen.clone();
    let mut upcalls = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, move |ev, _| {
        handled.lock().unwrap().push(ev.unwrap());
    });
    poster.post(1).unwrap();
    let switched = tracing::subscriber::with_default(panics_on("upcall policy set"), || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            upcalls.set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
        }))
    });
    assert!(
        switched.is_err(),
        "the subscriber's panic reaches the caller"
    );
    let in_flight = upcalls.query().upcalls_in_flight;
    if in_flight != 0 {
        // Dropping the upcalls would wait for ever for that instance: fail,
        // not hang.
        std::mem::forget(upcalls);
        panic!("{in_flight} upcall counted in flight with none running");
    }
    upcalls
        .set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
        .unwrap();
    poster.post(2).unwrap();
    let _consumer = upcalls.teardown();
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
}

/// A subscriber that panics on the long-wait event, which is emitted as the
/// wait ends: a timed-out post still hands its event back (the report runs
/// after the result is built; its panic is swallowed, not raised through
/// the caller's event).
#[test]
fn a_subscriber_panicking_on_the_long_wait_event_leaves_the_timed_out_post_its_event() {
    let (poster, _consumer) = evd::bounded::<u8>(1).unwrap();
    poster.post(1).unwrap();
    // A post preempted past its timeout inside its short back-off times out
    // before it sleeps, and has no wait to report (legal): repeated until
    // the subscriber was called.
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let recorder = Arc::new(panics_on("waited long for room"));
        let posted = tracing::subscriber::with_default(recorder.clone(), || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // Nobody dequeues: the wait lasts its whole timeout, past
                // the 1 ms after which it is reported.
                poster.post_timeout(2, Duration::from_millis(20))
            }))
        });
        match posted {
            Ok(Err(evd::PostError::Full(2))) => {}
            Ok(other) => panic!("the timed-out post returned {other:?}"),
            Err(_) => panic!("the subscriber's panic came out of the post, with its event"),
        }
        let events = recorder.0.lock().unwrap();
        let reports = events
            .iter()
            .filter(|e| e.2.contains("waited long for room"))
            .count();
        assert!(reports <= 1, "one wait, one report: {events:?}");
        if reports == 1 {
            return;
        }
        assert!(Instant::now() < give_up, "the subscriber was never called");
    }
}
