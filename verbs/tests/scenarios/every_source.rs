//! The scenario the EVD exists for (the 2005 kDAPL thread: "upcalls
//! triggered by post_se, CM events and CQs could theoretically occur at the
//! same instant"): one EVD under SingleInstance upcalls, fed at the same
//! time by completions of two CQs and connection-manager events (posted by
//! the driver's thread), software events from two application threads, and
//! a device's async events.
//!
//! Phase 1, upcalls enabled throughout: never two upcalls at once (an
//! in-flight counter), every event exactly once and in order per source,
//! and an event posted by the handler during an upcall delivered by that
//! same upcall (on the same thread, before the upcall returns to its
//! poster). Phase 2: Teardown while the application threads keep posting:
//! no upcall after it returns, and what the upcalls did not take is in the
//! consumer it hands back, exactly once.

use crate::common::load::Watchdog;
use crate::common::{Res, e2s, ensure};
use evd::{Invoke, PostError, Poster};
use evd_verbs::{
    AsyncEvent, AsyncEventSource, AsyncFeed, CmEvent, CmEventSource, CmFeed, CqId, Driver,
    DriverConfig, DriverHandle, VerbsEvent,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Barrier, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::Duration;

/// Room for every event of a phase: nobody is refused, so no poster waits
/// and the handler's own posts always succeed (backpressure has its tests
/// in driver.rs).
pub const CAPACITY: usize = 16384;
const APP_THREADS: usize = 2;
/// Nothing delivered for this long fails the scenario (a guard against
/// hangs only; the events come in milliseconds).
const WATCHDOG: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub enum Event {
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

/// What the upcalls (and, after Teardown, the consumer) delivered, and the
/// violations found on the way.
#[derive(Default)]
pub struct Log {
    /// Per CQ, the `wr_id`s in the order they came.
    pub per_cq: HashMap<CqId, Vec<u64>>,
    pub cm: Vec<CmEvent>,
    pub async_events: Vec<AsyncEvent>,
    pub app: [Vec<u64>; APP_THREADS],
    pub follow_ups_posted: u64,
    pub follow_ups_delivered: u64,
    pub delivered: usize,
    pub violations: Vec<String>,
}

impl Log {
    /// The completions of `cq` delivered so far.
    pub fn completions(&self, cq: CqId) -> usize {
        self.per_cq.get(&cq).map_or(0, Vec::len)
    }

    /// `by_upcall`: delivered by a handler call on this thread (else taken
    /// from the consumer after Teardown).
    fn record(&mut self, ev: Event, by_upcall: bool) {
        match ev {
            Event::Verbs(VerbsEvent::Completion { cq, wc }) => {
                if !wc.status.is_success() {
                    self.violations.push(format!("{cq:?}: {wc:?}"));
                }
                if !by_upcall {
                    self.violations
                        .push("a completion after all were seen".into());
                }
                self.per_cq.entry(cq).or_default().push(wc.wr_id);
            }
            Event::Verbs(VerbsEvent::Async(a)) => self.async_events.push(a),
            Event::Verbs(other) => self.violations.push(format!("unexpected {other:?}")),
            Event::Cm(c) => self.cm.push(*c),
            Event::App { thread, seq } => self.app[usize::from(thread)].push(seq),
            Event::FollowUp { thread, seq } => {
                self.follow_ups_delivered += 1;
                if by_upcall && thread != thread::current().id() {
                    self.violations.push(format!(
                        "follow-up {seq} posted during an upcall on {thread:?} delivered on {:?}",
                        thread::current().id()
                    ));
                }
            }
        }
        self.delivered += 1;
    }
}

/// The log, and what the handler shares with the scenario.
#[derive(Default)]
pub struct Shared {
    log: Mutex<Log>,
    delivered_changed: Condvar,
    in_flight: AtomicUsize,
    torn_down: AtomicBool,
}

impl Shared {
    pub fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap()
    }

    /// The log once `done` holds of it; fails when nothing is delivered
    /// for `WATCHDOG` before.
    pub fn wait_until(
        &self,
        what: &str,
        done: impl Fn(&Log) -> bool,
    ) -> Result<MutexGuard<'_, Log>, String> {
        let mut log = self.log();
        let mut watchdog = Watchdog::new(WATCHDOG);
        let mut delivered = log.delivered;
        while !done(&log) {
            log = self
                .delivered_changed
                .wait_timeout(log, Duration::from_secs(1))
                .unwrap()
                .0;
            if log.delivered != delivered {
                delivered = log.delivered;
                watchdog.progress();
            }
            ensure!(
                !watchdog.expired(),
                "{what}: {delivered} events delivered, none for {WATCHDOG:?}"
            );
        }
        Ok(log)
    }
}

/// What the devices' traffic works with.
pub struct Traffic<'a> {
    /// Every thread of phase 1 starts here: the application threads, the
    /// devices' `THREADS` and the one calling `traffic`.
    pub go: &'a Arc<Barrier>,
    pub handle: &'a DriverHandle,
    pub poster: &'a Poster<Event>,
    /// The CM events, as the upcalls deliver them.
    pub cm: &'a Receiver<CmEvent>,
    pub shared: &'a Shared,
}

/// What the application threads post.
#[derive(Clone, Copy)]
pub struct Apps {
    /// Events each application thread posts in a phase.
    pub events: u64,
    /// An application event whose sequence number is a multiple of this
    /// has the handler post a follow-up.
    pub follow_up_every: u64,
}

impl Apps {
    /// The follow-ups of a phase.
    pub fn follow_ups(&self) -> u64 {
        APP_THREADS as u64 * self.events.div_ceil(self.follow_up_every)
    }
}

/// The devices that feed the scenario: two CQs, a connection manager and
/// a device's async events.
pub trait Devices {
    /// Threads `traffic` starts that wait at `go`.
    const THREADS: usize;

    /// The connection manager's events.
    type Cm: CmEventSource + 'static;
    /// The device's async events.
    type Async: AsyncEventSource + 'static;

    /// The event sources the driver serves from its start.
    fn sources(&mut self) -> Result<(Self::Cm, Self::Async), String>;

    /// Register the CQs the driver serves from its start, if any.
    fn register(&mut self, driver: &mut Driver, poster: &Poster<Event>) -> Res;

    /// Phase 1's device events: completions on both CQs, CM and async
    /// events. Returns once they are all made.
    fn traffic(&mut self, t: Traffic<'_>) -> Res;

    /// Whether every device event of phase 1 is in the log.
    fn delivered(&self, log: &Log) -> bool;

    /// The checks on phase 1's device events.
    fn check(&self, log: &Log) -> Res;

    /// Before the driver stops.
    fn finish(&mut self) -> Res;
}

fn post(poster: &Poster<Event>, ev: Event) -> Res {
    match poster.post(ev) {
        Ok(()) => Ok(()),
        Err(PostError::Full(_)) => {
            Err(format!("capacity {CAPACITY} is above every phase's events"))
        }
        Err(PostError::Closed(_)) => Err("the consumer lives to the end".into()),
    }
}

fn spawn_apps(
    poster: &Poster<Event>,
    go: &Arc<Barrier>,
    seqs: std::ops::Range<u64>,
) -> Vec<JoinHandle<Res>> {
    (0..APP_THREADS as u8)
        .map(|thread| {
            let (p, go, seqs) = (poster.clone(), go.clone(), seqs.clone());
            thread::spawn(move || -> Res {
                go.wait();
                for seq in seqs {
                    post(&p, Event::App { thread, seq })?;
                }
                Ok(())
            })
        })
        .collect()
}

fn join(threads: Vec<JoinHandle<Res>>) -> Res {
    for t in threads {
        t.join().map_err(|_| "a thread panicked")??;
    }
    Ok(())
}

pub fn every_source_at_once<D: Devices>(mut devices: D, apps: Apps) -> Res {
    let (poster, consumer) = evd::bounded::<Event>(CAPACITY).map_err(e2s)?;
    let shared = Arc::new(Shared::default());
    let (cm_tx, cm_rx) = mpsc::channel::<CmEvent>();
    let seen = shared.clone();
    let own_poster = poster.clone();
    let mut follow_up_seq = 0;
    let upcalls = consumer.into_upcalls_mut(Invoke::Any, move |ev, _more| {
        // Relaxed is enough for the counter: it only has to see overlap,
        // and two overlapping calls both increment before either decrements.
        let overlapping = seen.in_flight.fetch_add(1, Ordering::Relaxed) != 0;
        let after_teardown = seen.torn_down.load(Ordering::Acquire);
        let follow_up = matches!(ev, Ok(Event::App { seq, .. }) if seq % apps.follow_up_every == 0);
        if let Ok(Event::Cm(c)) = &ev {
            // The devices' traffic drives a connection from these.
            let _ = cm_tx.send(**c);
        }
        {
            let mut log = seen.log();
            if overlapping {
                log.violations.push("two upcalls at once".into());
            }
            if after_teardown {
                log.violations
                    .push("an upcall after Teardown returned".into());
            }
            match ev {
                Ok(ev) => log.record(ev, true),
                Err(o) => log
                    .violations
                    .push(format!("overflow {o:?}: nothing is refused")),
            }
        }
        if follow_up {
            // The instance running this call holds the token: the post
            // starts nothing, and this instance delivers it before it ends.
            follow_up_seq += 1;
            let posted = own_poster.post(Event::FollowUp {
                seq: follow_up_seq,
                thread: thread::current().id(),
            });
            let mut log = seen.log();
            match posted {
                Ok(()) => log.follow_ups_posted += 1,
                Err(_) => log.violations.push("follow-up refused".into()),
            }
        }
        seen.in_flight.fetch_sub(1, Ordering::Relaxed);
        seen.delivered_changed.notify_all();
    });

    let mut driver = Driver::new(DriverConfig::default()).map_err(e2s)?;
    let (cm_events, async_events) = devices.sources()?;
    driver
        .register_cm(CmFeed::new(cm_events, poster.clone()))
        .map_err(e2s)?;
    driver
        .register_async(AsyncFeed::new(async_events, poster.clone()))
        .map_err(e2s)?;
    devices.register(&mut driver, &poster)?;
    let driver = driver.spawn().map_err(e2s)?;

    // Phase 1: everyone at once.
    let go = Arc::new(Barrier::new(APP_THREADS + D::THREADS + 1));
    let app_threads = spawn_apps(&poster, &go, 0..apps.events);
    devices.traffic(Traffic {
        go: &go,
        handle: driver.handle(),
        poster: &poster,
        cm: &cm_rx,
        shared: &shared,
    })?;
    join(app_threads)?;
    let follow_ups = apps.follow_ups();
    let log = shared.wait_until("phase 1", |log| {
        log.app.iter().all(|a| a.len() as u64 >= apps.events)
            && log.follow_ups_delivered >= follow_ups
            && devices.delivered(log)
    })?;
    ensure!(
        log.violations.is_empty(),
        "violations: {:?}",
        log.violations
    );
    for (t, app) in log.app.iter().enumerate() {
        ensure!(
            *app == (0..apps.events).collect::<Vec<_>>(),
            "app thread {t}: {} events, not 0..{} in order",
            app.len(),
            apps.events
        );
    }
    ensure!(
        log.follow_ups_posted == follow_ups && log.follow_ups_delivered == follow_ups,
        "{} follow-ups posted, {} delivered, of {follow_ups}",
        log.follow_ups_posted,
        log.follow_ups_delivered
    );
    devices.check(&log)?;
    let before = log.app.clone();
    drop(log);

    // Phase 2: Teardown while the application threads keep posting.
    let go = Arc::new(Barrier::new(APP_THREADS + 1));
    let app_threads = spawn_apps(&poster, &go, apps.events..2 * apps.events);
    go.wait();
    let mut rest = upcalls.teardown();
    shared.torn_down.store(true, Ordering::Release);
    join(app_threads)?;
    devices.finish()?;
    drop(driver.shutdown().map_err(e2s)?);
    drop(poster);
    let mut log = shared.log();
    ensure!(
        log.violations.is_empty(),
        "violations: {:?}",
        log.violations
    );
    while let Ok(ev) = rest.try_dequeue() {
        log.record(ev, false);
    }
    for (t, before) in before.iter().enumerate() {
        let mut all = log.app[t].clone();
        ensure!(all.starts_with(before), "app thread {t}: phase 1 rewritten");
        all.sort_unstable();
        all.dedup();
        ensure!(all.len() == log.app[t].len(), "app thread {t}: a duplicate");
        ensure!(
            all == (0..2 * apps.events).collect::<Vec<_>>(),
            "app thread {t}: {} events, not 0..{}",
            all.len(),
            2 * apps.events
        );
        // Upcalls, then the consumer: still in order.
        ensure!(log.app[t] == all, "app thread {t}: out of order");
    }
    // Every follow-up posted (none after Teardown returned) was delivered
    // once, by its upcall or from the queue.
    ensure!(
        log.follow_ups_delivered == log.follow_ups_posted,
        "{} follow-ups delivered of {} posted",
        log.follow_ups_delivered,
        log.follow_ups_posted
    );
    ensure!(
        log.violations.is_empty(),
        "violations: {:?}",
        log.violations
    );
    drop(log);
    drop(devices);
    Ok(())
}
