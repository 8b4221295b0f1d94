//! One EVD of the application's own event type, fed by all four sources:
//! two completion queues and a connection manager (on a driver thread), a
//! device's async events, and two threads of the application posting their
//! own events. Software CQs, connection manager and device: no RDMA
//! hardware needed.
//!
//! ```text
//! cargo run -p evd-verbs --example app_events
//! ```

use evd_verbs::soft::{SoftCm, SoftCq, SoftDevice};
use evd_verbs::{
    AsyncElement, AsyncEvent, AsyncEventKind, AsyncFeed, CmEvent, CmEventKind, CmFeed, CmToken,
    CqId, Driver, DriverConfig, Feed, FeedMode, VerbsEvent, WorkCompletion,
};
use std::thread;

/// Everything the application's event loop handles, in one type.
#[derive(Debug)]
enum AppEvent {
    /// A completion or async event, from the feeds.
    Verbs(VerbsEvent),
    /// A connection event, from the connection manager's feed.
    /// Boxed: a connection event (private data inline) is six times a
    /// completion, and connection events are rare; the EVD's slots stay
    /// completion-sized.
    Cm(Box<CmEvent>),
    /// The application's own: the `seq`th tick of thread `thread`.
    Tick { thread: usize, seq: u64 },
}

/// What lets the feeds post into an EVD of `AppEvent`.
impl From<VerbsEvent> for AppEvent {
    fn from(ev: VerbsEvent) -> Self {
        AppEvent::Verbs(ev)
    }
}

/// And the connection manager's feed.
impl From<CmEvent> for AppEvent {
    fn from(ev: CmEvent) -> Self {
        AppEvent::Cm(Box::new(ev))
    }
}

const CQS: usize = 2;
const COMPLETIONS_PER_CQ: u64 = 10_000;
const APP_THREADS: usize = 2;
const TICKS_PER_THREAD: u64 = 10_000;
const ASYNC_EVENTS: u64 = 100;
const CM_EVENTS: u64 = 100;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Smaller than what arrives: every source meets a full EVD and waits.
    let (poster, mut consumer) = evd::bounded::<AppEvent>(256)?;

    let mut driver = Driver::new(DriverConfig::default())?;
    let mut hcas = Vec::new();
    for id in 0..CQS {
        let (cq, hca) = SoftCq::new(COMPLETIONS_PER_CQ as usize)?;
        driver.register(
            Feed::new(cq, CqId(id as u32), poster.clone()),
            FeedMode::Event,
        )?;
        hcas.push(hca);
    }
    let (device_events, device) = SoftDevice::new()?;
    driver.register_async(AsyncFeed::new(device_events, poster.clone()))?;
    let (cm_events, cm) = SoftCm::new()?;
    driver.register_cm(CmFeed::new(cm_events, poster.clone()))?;
    let driver = driver.spawn()?;

    let mut threads = Vec::new();
    // The "hardware": completions and async events come from other threads.
    for hca in hcas {
        threads.push(thread::spawn(move || {
            for wr_id in 0..COMPLETIONS_PER_CQ {
                let wc = WorkCompletion::new(wr_id);
                hca.push(wc).expect("the CQ holds every completion");
            }
        }));
    }
    threads.push(thread::spawn(move || {
        // Connections come and go: each identifier is established, then
        // disconnected.
        for id in 0..CM_EVENTS / 2 {
            for kind in [CmEventKind::Established, CmEventKind::Disconnected] {
                cm.raise(CmEvent::new(kind, CmToken(id)));
            }
        }
    }));
    threads.push(thread::spawn(move || {
        for qp in 0..ASYNC_EVENTS as u32 {
            device.raise(AsyncEvent::new(
                AsyncEventKind::CommEstablished,
                AsyncElement::Qp(qp),
            ));
        }
    }));
    // The application's own events, through clones of the same poster.
    for thread in 0..APP_THREADS {
        let poster = poster.clone();
        threads.push(thread::spawn(move || {
            for seq in 0..TICKS_PER_THREAD {
                // Waits for room while the EVD is full: nothing is dropped.
                poster
                    .post_blocking(AppEvent::Tick { thread, seq })
                    .expect("the consumer outlives the posters");
            }
        }));
    }
    drop(poster);

    // The event loop: one dequeue for every kind of event.
    let mut completions = [0u64; CQS];
    let mut ticks = [0u64; APP_THREADS];
    let mut async_events = 0u64;
    let mut cm_events = 0u64;
    let total = CQS as u64 * COMPLETIONS_PER_CQ
        + APP_THREADS as u64 * TICKS_PER_THREAD
        + ASYNC_EVENTS
        + CM_EVENTS;
    for _ in 0..total {
        match consumer.dequeue()? {
            AppEvent::Verbs(VerbsEvent::Completion { cq, wc }) => {
                let n = &mut completions[cq.0 as usize];
                assert_eq!(wc.wr_id, *n, "each CQ's completions arrive in order");
                *n += 1;
            }
            AppEvent::Verbs(VerbsEvent::Async(ev)) => {
                assert_eq!(ev.element, AsyncElement::Qp(async_events as u32));
                async_events += 1;
            }
            AppEvent::Verbs(other) => panic!("unexpected {other:?}"),
            AppEvent::Cm(ev) => {
                // Established then Disconnected, identifier after identifier.
                assert_eq!(ev.id, CmToken(cm_events / 2), "connection events in order");
                cm_events += 1;
            }
            AppEvent::Tick { thread, seq } => {
                assert_eq!(seq, ticks[thread], "each thread's ticks arrive in order");
                ticks[thread] += 1;
            }
        }
    }

    for t in threads {
        t.join().expect("no thread panicked");
    }
    let stopped = driver.shutdown()?;
    for (cq, n) in completions.iter().enumerate() {
        println!("completions from CQ {cq}: {n}");
    }
    println!("async events: {async_events}");
    println!("connection events: {cm_events}");
    for (thread, n) in ticks.iter().enumerate() {
        println!("ticks from app thread {thread}: {n}");
    }
    println!(
        "{total} events in one EVD, each source in order; the EVD lost {}, the driver was woken for room {} times",
        consumer.query().lost,
        stopped.stats.room_wakes
    );
    Ok(())
}
