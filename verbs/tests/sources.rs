//! One EVD of the application's own event type, fed at once by completion
//! feeds on a driver thread, a device's async feed, and application threads
//! posting their own events: exactly once and in order per source, nothing
//! dropped, whoever fills the EVD.

use evd::{PostError, Poster, RoomWaiter, TryDequeueError};
use evd_verbs::soft::{SoftCq, SoftDevice};
use evd_verbs::{
    AsyncElement, AsyncEvent, AsyncEventKind, AsyncFeed, CqId, Driver, DriverConfig, Feed,
    FeedMode, VerbsEvent, WorkCompletion,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;

/// What the application's EVD carries: the verbs events, and its own.
#[derive(Debug)]
enum AppEvent {
    Verbs(VerbsEvent),
    /// The `seq`th event of application thread `thread`.
    Tick {
        thread: usize,
        seq: u64,
    },
}

impl From<VerbsEvent> for AppEvent {
    fn from(ev: VerbsEvent) -> Self {
        AppEvent::Verbs(ev)
    }
}

const CQS: usize = 2;
const PER_CQ: u64 = 20_000;
const APP_THREADS: usize = 2;
const PER_APP_THREAD: u64 = 20_000;
const ASYNC_EVENTS: u32 = 500;
/// Small against what is posted, so every source meets a full EVD.
const EVD_CAPACITY: usize = 64;
/// A hang guard, not a timing assertion: this long with no event at all,
/// while events are still due, means one was lost.
const WATCHDOG: Duration = Duration::from_secs(120);

/// Unparks the application thread waiting for room.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Post `ev`, waiting for room whenever the EVD is full; never drops it.
/// `on_refusal` runs each time the EVD turns it away, before the wait.
fn post_waiting_for_room(
    room: &mut RoomWaiter<AppEvent>,
    cx: &mut Context<'_>,
    mut ev: AppEvent,
    mut on_refusal: impl FnMut(),
) {
    loop {
        match room.poster().post(ev) {
            Ok(()) => return,
            Err(PostError::Full(back)) => {
                ev = back;
                on_refusal();
                // `Ready` also leaves the room queue, so this thread keeps no
                // wake that a blocked feed behind it needs.
                while room.poll_room(cx).is_pending() {
                    thread::park();
                }
            }
            Err(PostError::Closed(_)) => panic!("the EVD closed under a live consumer"),
        }
    }
}

/// An application thread: `PER_APP_THREAD` ticks in order. It counts itself
/// in `refused` the first time the EVD turns it away; returns how many times
/// it was turned away.
fn spawn_app_thread(
    thread: usize,
    poster: Poster<AppEvent>,
    refused: Arc<AtomicU32>,
) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut room = poster.room_waiter();
        drop(poster);
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut refusals = 0u64;
        for seq in 0..PER_APP_THREAD {
            let tick = AppEvent::Tick { thread, seq };
            post_waiting_for_room(&mut room, &mut cx, tick, || {
                if refusals == 0 {
                    refused.fetch_add(1, Ordering::Release);
                }
                refusals += 1;
            });
        }
        refusals
    })
}

/// Per source, the next event expected; every arrival must be exactly that.
#[derive(Debug, Default)]
struct Expected {
    per_cq: [u64; CQS],
    per_app_thread: [u64; APP_THREADS],
    async_events: u32,
}

impl Expected {
    fn seen(&mut self, ev: AppEvent) {
        match ev {
            AppEvent::Verbs(VerbsEvent::Completion { cq, wc }) => {
                let next = &mut self.per_cq[cq.0 as usize];
                assert_eq!(wc.wr_id, *next, "CQ {}: duplicate, lost or reordered", cq.0);
                *next += 1;
            }
            AppEvent::Verbs(VerbsEvent::Async(a)) => {
                assert_eq!(
                    a,
                    port_event(self.async_events),
                    "async event duplicate, lost or reordered"
                );
                self.async_events += 1;
            }
            AppEvent::Verbs(other) => panic!("unexpected {other:?}"),
            AppEvent::Tick { thread, seq } => {
                let next = &mut self.per_app_thread[thread];
                assert_eq!(
                    seq, *next,
                    "app thread {thread}: duplicate, lost or reordered"
                );
                *next += 1;
            }
        }
    }

    fn complete(&self) -> bool {
        self.per_cq == [PER_CQ; CQS]
            && self.per_app_thread == [PER_APP_THREAD; APP_THREADS]
            && self.async_events == ASYNC_EVENTS
    }
}

/// The `n`th async event the device raises (told apart by the QP number).
fn port_event(n: u32) -> AsyncEvent {
    AsyncEvent::new(AsyncEventKind::CommEstablished, AsyncElement::Qp(n))
}

#[test]
fn completions_async_events_and_app_events_share_one_evd_exactly_once_in_order() {
    let (poster, mut consumer) = evd::bounded::<AppEvent>(EVD_CAPACITY).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let mut hcas = Vec::new();
    let mut cq_keys = Vec::new();
    for id in 0..CQS {
        // Deep enough for every completion: the producers never overrun it.
        let (cq, hca) = SoftCq::new(PER_CQ as usize).unwrap();
        let mode = if id == 0 {
            FeedMode::Event
        } else {
            FeedMode::Adaptive(Default::default())
        };
        let feed = Feed::new(cq, CqId(id as u32), poster.clone());
        cq_keys.push(driver.register(feed, mode).unwrap());
        hcas.push(hca);
    }
    let (events, device) = SoftDevice::new().unwrap();
    let async_key = driver
        .register_async(AsyncFeed::new(events, poster.clone()))
        .unwrap();
    let running = driver.spawn().unwrap();

    let cq_producers: Vec<_> = hcas
        .iter()
        .map(|hca| {
            let hca = hca.clone();
            thread::spawn(move || {
                for wr_id in 0..PER_CQ {
                    hca.push(WorkCompletion::new(wr_id)).unwrap();
                }
            })
        })
        .collect();
    let raiser = thread::spawn(move || {
        for n in 0..ASYNC_EVENTS {
            device.raise(port_event(n));
        }
    });
    let refused = Arc::new(AtomicU32::new(0));
    let app_threads: Vec<_> = (0..APP_THREADS)
        .map(|t| spawn_app_thread(t, poster.clone(), refused.clone()))
        .collect();
    drop(poster);

    // Drain only once both application threads were turned away by a full
    // EVD, so their wait for room is certain to be used: each has far more
    // to post than the EVD holds, so neither can finish before this drains.
    while refused.load(Ordering::Acquire) < APP_THREADS as u32 {
        thread::yield_now();
    }

    let mut expected = Expected::default();
    let mut batch = Vec::with_capacity(EVD_CAPACITY);
    let mut idle = Duration::ZERO;
    while !expected.complete() {
        // One batch per look, as a real consumer would take them.
        match consumer.dequeue_batch(&mut batch, EVD_CAPACITY) {
            Ok(0) => {
                let step = Duration::from_secs(1);
                if consumer.wait(1, Some(step)).is_err() {
                    idle += step;
                    assert!(
                        idle < WATCHDOG,
                        "watchdog: no event for {idle:?}, at {expected:?}"
                    );
                }
            }
            Ok(_) => {
                idle = Duration::ZERO;
                for ev in batch.drain(..) {
                    expected.seen(ev);
                }
            }
            Err(e) => panic!("{e:?} at {expected:?}"),
        }
    }

    for t in cq_producers {
        t.join().unwrap();
    }
    raiser.join().unwrap();
    let refusals: u64 = app_threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(refusals >= APP_THREADS as u64);
    let q = consumer.query();
    assert_eq!(q.lost, 0);
    assert!(q.room_wakes > 0, "{q:?}");

    let mut stopped = running.shutdown().unwrap();
    // Blocked feeds are woken by the consumer's dequeues (`room_wakes`
    // above; a spawned driver waits with no timeout at all).
    for key in cq_keys {
        let feed: Feed<SoftCq, AppEvent> = stopped.take(key).unwrap();
        assert_eq!(feed.stats().polled, PER_CQ, "{:?}", feed.id());
        let (cq, undelivered) = feed.into_parts();
        assert!(undelivered.is_empty());
        drop(cq);
    }
    let async_feed: AsyncFeed<_, AppEvent> = stopped.take(async_key).unwrap();
    let (_events, held) = async_feed.into_parts();
    assert!(held.is_none());
    assert!(stopped.is_empty());
    for hca in &hcas {
        let s = hca.stats();
        assert_eq!(s.len, 0);
        assert_eq!(s.unacked_at_destroy, Some(0));
    }
    // Every poster is gone and nothing is left: no event came twice.
    assert!(matches!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Closed)
    ));
}
