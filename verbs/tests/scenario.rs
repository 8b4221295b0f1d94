//! The scenario the EVD exists for (the 2005 kDAPL thread: "upcalls
//! triggered by post_se, CM events and CQs could theoretically occur at the
//! same instant"): one EVD under SingleInstance upcalls, fed at the same
//! time by CQ completions and connection-manager events (posted by the
//! driver's thread), software events from two application threads, and a
//! device's async events.
//!
//! Phase 1, upcalls enabled throughout: never two upcalls at once (an
//! in-flight counter), every event exactly once and in order per source,
//! and an event posted by the handler during an upcall delivered by that
//! same upcall (on the same thread, before the upcall returns to its
//! poster). Phase 2: Teardown while the application threads keep posting:
//! no upcall after it returns, and what the upcalls did not take is in the
//! consumer it hands back, exactly once.

use evd::{Invoke, PostError, Poster};
use evd_verbs::soft::{SoftCm, SoftCq, SoftDevice};
use evd_verbs::{
    AsyncElement, AsyncEvent, AsyncEventKind, AsyncFeed, CmEvent, CmEventKind, CmFeed, CmToken,
    CqId, Driver, DriverConfig, Feed, FeedMode, VerbsEvent, WorkCompletion,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, ThreadId};

const COMPLETIONS: u64 = 3000; // per CQ
const CM_EVENTS: u64 = 300;
const APP_EVENTS: u64 = 3000; // per application thread
const ASYNC_EVENTS: u32 = 50;
const FOLLOW_UP_EVERY: u64 = 100;
/// Room for every event of a phase: nobody is refused, so no poster waits
/// and the handler's own posts always succeed (backpressure has its tests
/// in driver.rs).
const CAPACITY: usize = 16384;

#[derive(Debug)]
enum Event {
    Verbs(VerbsEvent),
    /// Boxed: a connection event (private data inline) is six times a
    /// completion, and connection events are rare; the EVD's slots stay
    /// completion-sized.
    Cm(Box<CmEvent>),
    App {
        thread: u8,
        seq: u64,
    },
    /// Posted by the handler during an upcall, on `thread`.
    FollowUp {
        seq: u64,
        thread: ThreadId,
    },
}

impl From<VerbsEvent> for Event {
    fn from(ev: VerbsEvent) -> Self {
        Event::Verbs(ev)
    }
}

impl From<CmEvent> for Event {
    fn from(ev: CmEvent) -> Self {
        Event::Cm(Box::new(ev))
    }
}

/// What the upcalls saw, and the violations they found.
#[derive(Default)]
struct Log {
    per_cq: HashMap<CqId, Vec<u64>>,
    cm: Vec<u64>,
    app: [Vec<u64>; 2],
    async_ports: Vec<u8>,
    follow_ups_posted: u64,
    follow_ups_delivered: u64,
    delivered: usize,
    violations: Vec<String>,
}

struct Shared {
    log: Mutex<Log>,
    delivered_changed: Condvar,
    in_flight: AtomicUsize,
    torn_down: AtomicBool,
}

fn post_app(poster: &Poster<Event>, thread: u8, seq: u64) {
    match poster.post(Event::App { thread, seq }) {
        Ok(()) => {}
        Err(PostError::Full(_)) => panic!("capacity {CAPACITY} is above every phase's events"),
        Err(PostError::Closed(_)) => panic!("the consumer lives to the end"),
    }
}

/// `by_upcall`: delivered by a handler call on this thread (else taken
/// from the consumer after Teardown).
fn record(log: &mut Log, ev: Event, by_upcall: bool) {
    match ev {
        Event::Verbs(VerbsEvent::Completion { cq, wc }) => {
            log.per_cq.entry(cq).or_default().push(wc.wr_id)
        }
        Event::Verbs(VerbsEvent::Async(a)) => match a.element {
            AsyncElement::Port(p) => log.async_ports.push(p),
            other => log.violations.push(format!("async event on {other:?}")),
        },
        Event::Cm(c) => log.cm.push(c.id.0),
        Event::App { thread, seq } => log.app[usize::from(thread)].push(seq),
        Event::FollowUp { thread, seq } => {
            log.follow_ups_delivered += 1;
            if by_upcall && thread != thread::current().id() {
                log.violations.push(format!(
                    "follow-up {seq} posted during an upcall on {thread:?} delivered on {:?}",
                    thread::current().id()
                ));
            }
        }
    }
    log.delivered += 1;
}

/// The log once `expected` events were delivered. A lost event fails the
/// test instead of hanging it: nothing delivered for 60 s is a failure (a
/// guard against hangs only; on any machine the events come in
/// milliseconds).
fn wait_for(shared: &Shared, expected: usize) -> std::sync::MutexGuard<'_, Log> {
    let mut log = shared.log.lock().unwrap();
    let mut last = (log.delivered, std::time::Instant::now());
    while log.delivered < expected {
        log = shared
            .delivered_changed
            .wait_timeout(log, std::time::Duration::from_secs(1))
            .unwrap()
            .0;
        if log.delivered != last.0 {
            last = (log.delivered, std::time::Instant::now());
        }
        assert!(
            last.1.elapsed() < std::time::Duration::from_secs(60),
            "{} of {expected} events delivered, none for 60 s",
            log.delivered
        );
    }
    log
}

#[test]
fn every_source_at_once_under_single_instance_upcalls() {
    let (poster, consumer) = evd::bounded::<Event>(CAPACITY).unwrap();
    let shared = Arc::new(Shared {
        log: Mutex::new(Log::default()),
        delivered_changed: Condvar::new(),
        in_flight: AtomicUsize::new(0),
        torn_down: AtomicBool::new(false),
    });
    let seen = shared.clone();
    let own_poster = poster.clone();
    let mut follow_up_seq = 0;
    let upcalls = consumer.into_upcalls_mut(Invoke::Any, move |ev, _more| {
        // Relaxed is enough for the counter: it only has to see overlap,
        // and two overlapping calls both increment before either decrements.
        let overlapping = seen.in_flight.fetch_add(1, Ordering::Relaxed) != 0;
        let after_teardown = seen.torn_down.load(Ordering::Acquire);
        let ev = ev.expect("no overflow: nothing is ever refused");
        let follow_up = matches!(ev, Event::App { seq, .. } if seq % FOLLOW_UP_EVERY == 0);
        {
            let mut log = seen.log.lock().unwrap();
            if overlapping {
                log.violations.push("two upcalls at once".into());
            }
            if after_teardown {
                log.violations
                    .push("an upcall after Teardown returned".into());
            }
            record(&mut log, ev, true);
        }
        if follow_up {
            // The instance running this call holds the token: the post
            // starts nothing, and this instance delivers it before it ends.
            follow_up_seq += 1;
            let posted = own_poster
                .post(Event::FollowUp {
                    seq: follow_up_seq,
                    thread: thread::current().id(),
                })
                .is_ok();
            seen.log.lock().unwrap().follow_ups_posted += u64::from(posted);
        }
        seen.in_flight.fetch_sub(1, Ordering::Relaxed);
        seen.delivered_changed.notify_all();
    });

    // The driver's thread posts completions of two CQs, the CM's events and
    // the device's async events.
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let mut hcas = Vec::new();
    for id in 0..2 {
        let (cq, hca) = SoftCq::new(COMPLETIONS as usize).unwrap();
        let mode = if id == 0 {
            FeedMode::Event
        } else {
            FeedMode::Adaptive(Default::default())
        };
        driver
            .register(Feed::new(cq, CqId(id), poster.clone()), mode)
            .unwrap();
        hcas.push(hca);
    }
    let (cm_events, cm) = SoftCm::new().unwrap();
    driver
        .register_cm(CmFeed::new(cm_events, poster.clone()))
        .unwrap();
    let (async_events, device) = SoftDevice::new().unwrap();
    driver
        .register_async(AsyncFeed::new(async_events, poster.clone()))
        .unwrap();
    let driver = driver.spawn().unwrap();

    // Phase 1: everyone at once.
    let go = Arc::new(std::sync::Barrier::new(6));
    let mut threads = Vec::new();
    for (i, hca) in hcas.iter().enumerate() {
        let (hca, go) = (hca.clone(), go.clone());
        threads.push(thread::spawn(move || {
            go.wait();
            for n in 0..COMPLETIONS {
                hca.push(WorkCompletion {
                    wr_id: n,
                    qp_num: i as u32,
                    ..Default::default()
                })
                .unwrap();
            }
        }));
    }
    {
        let (cm, go) = (cm.clone(), go.clone());
        threads.push(thread::spawn(move || {
            go.wait();
            for n in 0..CM_EVENTS {
                cm.raise(CmEvent {
                    kind: CmEventKind::Established,
                    id: CmToken(n),
                    ..Default::default()
                });
                if n < u64::from(ASYNC_EVENTS) {
                    device.raise(AsyncEvent {
                        kind: AsyncEventKind::PortActive,
                        element: AsyncElement::Port(n as u8),
                    });
                }
            }
        }));
    }
    for t in 0..2u8 {
        let (p, go) = (poster.clone(), go.clone());
        threads.push(thread::spawn(move || {
            go.wait();
            for seq in 0..APP_EVENTS {
                post_app(&p, t, seq);
            }
        }));
    }
    go.wait();
    for t in threads {
        t.join().unwrap();
    }
    let follow_ups = 2 * APP_EVENTS.div_ceil(FOLLOW_UP_EVERY);
    let expected = (2 * COMPLETIONS + CM_EVENTS + 2 * APP_EVENTS + follow_ups) as usize
        + ASYNC_EVENTS as usize;
    let log = wait_for(&shared, expected);
    assert_eq!(log.violations, Vec::<String>::new());
    assert_eq!(log.delivered, expected);
    for id in 0..2 {
        assert_eq!(
            log.per_cq[&CqId(id)],
            (0..COMPLETIONS).collect::<Vec<_>>(),
            "CQ {id}"
        );
    }
    assert_eq!(
        log.cm,
        (0..CM_EVENTS).collect::<Vec<_>>(),
        "CM events in order"
    );
    assert_eq!(log.async_ports, (0..ASYNC_EVENTS as u8).collect::<Vec<_>>());
    for t in 0..2 {
        assert_eq!(
            log.app[t],
            (0..APP_EVENTS).collect::<Vec<_>>(),
            "app thread {t}"
        );
    }
    assert_eq!(log.follow_ups_posted, follow_ups);
    assert_eq!(log.follow_ups_delivered, follow_ups);
    drop(log);

    // Phase 2: Teardown while two application threads keep posting.
    let before = shared.log.lock().unwrap().app.clone();
    let go = Arc::new(std::sync::Barrier::new(3));
    let posters: Vec<_> = (0..2u8)
        .map(|t| {
            let (p, go) = (poster.clone(), go.clone());
            thread::spawn(move || {
                go.wait();
                for seq in APP_EVENTS..2 * APP_EVENTS {
                    post_app(&p, t, seq);
                }
            })
        })
        .collect();
    go.wait();
    let mut rest = upcalls.teardown();
    shared.torn_down.store(true, Ordering::Release);
    for p in posters {
        p.join().unwrap();
    }
    let stopped = driver.shutdown().unwrap();
    drop(stopped);
    drop(poster);
    let mut log = shared.log.lock().unwrap();
    assert_eq!(log.violations, Vec::<String>::new());
    while let Ok(ev) = rest.try_dequeue() {
        record(&mut log, ev, false);
    }
    for (t, before) in before.iter().enumerate() {
        let mut all = log.app[t].clone();
        assert!(all.starts_with(before));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), log.app[t].len(), "app thread {t}: a duplicate");
        assert_eq!(
            all,
            (0..2 * APP_EVENTS).collect::<Vec<_>>(),
            "app thread {t}"
        );
        // Upcalls, then the consumer: still in order.
        assert_eq!(log.app[t], all, "app thread {t} order");
    }
    // Every follow-up posted (none after Teardown returned) was delivered
    // once, by its upcall or from the queue.
    assert_eq!(log.follow_ups_delivered, log.follow_ups_posted);
    assert_eq!(log.violations, Vec::<String>::new());
}
