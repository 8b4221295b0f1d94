//! Export an EVD's and a driver's counters periodically, as plain counters.
//!
//! `cargo run --release -p evd-verbs --example metrics_export`
//!
//! What a metrics exporter can read, and when:
//!
//! - [`evd::Query`], live, from any handle: `Poster::query`,
//!   `Consumer::query` or `Upcalls::query` (a snapshot; the counters only
//!   grow). The exporter here holds a poster clone, which is `Send + Sync`.
//! - [`evd_verbs::DriverStats`], live, from `DriverHandle::stats` (or
//!   `RunningDriver::stats`): what the driver thread published at the end
//!   of its last cycle, at no cost to it (no lock, no read-modify-write).
//! - [`evd_verbs::FeedStats`] belong to the feed, which the driver owns
//!   while it is registered: read live through `DriverHandle::with_feed`
//!   (a command the driver runs between its turns: a lock and a wake per
//!   read, nothing at an exporter's period), and finally from the feed
//!   handed back by `remove` (or taken from the driver's `Shutdown`).
//!
//! An exporter thread wakes every `PERIOD` (a timer: the wait on its stop
//! channel times out) and prints one line of `name=value` counters; a
//! metrics crate's `counter!(..).absolute(v)` / `gauge!(..).set(v)` would
//! go where the line is printed. A producer plays the HCA on a software
//! CQ; the EVD's upcall handler takes the completions on the driver
//! thread. The example checks what it printed and exits 0.

use evd::{Invoke, Query, UpcallPolicy};
use evd_verbs::soft::SoftCq;
use evd_verbs::{
    CqId, Driver, DriverHandle, DriverStats, Feed, FeedKey, FeedMode, FeedStats, VerbsEvent,
    WorkCompletion,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// How often the exporter reads and prints the counters.
const PERIOD: Duration = Duration::from_millis(5);
/// Completions the producer pushes.
const COMPLETIONS: u64 = 20_000;
/// The software CQ's depth; the producer keeps fewer outstanding.
const CQ_DEPTH: usize = 1024;
/// A watchdog, not a sleep: a completion that never comes fails the run.
const WATCHDOG: Duration = Duration::from_secs(30);

/// One line of counters, as an exporter would hand them to its backend.
fn export(q: &Query, d: &DriverStats) -> String {
    format!(
        "evd.posted={} evd.dequeued={} evd.len={} evd.capacity={} evd.lost={} evd.upcalls={} \
         evd.room_wakes={} driver.turns={} driver.waits={} driver.fd_wakes={} \
         driver.room_wakes={} driver.handler_panics={}",
        q.posted,
        q.dequeued,
        q.len,
        q.capacity,
        q.lost,
        q.upcalls,
        q.room_wakes,
        d.turns,
        d.waits,
        d.fd_wakes,
        d.room_wakes,
        d.handler_panics,
    )
}

/// The feed's counters.
fn export_feed(f: &FeedStats) -> String {
    format!(
        "feed.polled={} feed.delivered={} feed.polls={} feed.arms={} feed.events_got={} \
         feed.events_acked={} feed.backpressure={}",
        f.polled, f.delivered, f.polls, f.arms, f.events_got, f.events_acked, f.backpressure,
    )
}

/// Every `PERIOD` until told to stop (and once more then): read the live
/// counters, print them. Returns the snapshots it took.
fn exporter(
    evd: evd::Poster<VerbsEvent>,
    driver: DriverHandle,
    feed: FeedKey<Feed<SoftCq>>,
    stop: mpsc::Receiver<()>,
) -> Vec<(Query, DriverStats, FeedStats)> {
    let mut taken = Vec::new();
    loop {
        let stopping = !matches!(
            stop.recv_timeout(PERIOD),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        let (q, d) = (evd.query(), driver.stats());
        let f = driver.with_feed(feed, |f| f.stats()).unwrap();
        println!("{} {}", export(&q, &d), export_feed(&f));
        taken.push((q, d, f));
        if stopping {
            return taken;
        }
    }
}

fn main() {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(CQ_DEPTH).unwrap();
    let handled = Arc::new(AtomicU64::new(0));
    let (done_tx, done) = mpsc::channel();
    let count = handled.clone();
    let upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        ev.expect("no overflow: the feed never posts lossy");
        if count.fetch_add(1, Ordering::Relaxed) + 1 == COMPLETIONS {
            let _ = done_tx.send(());
        }
    });

    let running = Driver::new(Default::default()).unwrap().spawn().unwrap();
    let (cq, hca) = SoftCq::new(CQ_DEPTH).unwrap();
    let key = running
        .handle()
        .register(Feed::new(cq, CqId(1), poster.clone()), FeedMode::Event)
        .unwrap();

    let (stop_tx, stop) = mpsc::channel();
    let (evd, driver) = (poster.clone(), running.handle().clone());
    let exporter = std::thread::spawn(move || exporter(evd, driver, key, stop));

    // The HCA: at most CQ_DEPTH / 2 completions outstanding, so the CQ never
    // overruns however the threads are scheduled.
    for wr_id in 0..COMPLETIONS {
        while wr_id - handled.load(Ordering::Relaxed) >= (CQ_DEPTH / 2) as u64 {
            std::thread::yield_now();
        }
        hca.push(WorkCompletion::new(wr_id)).unwrap();
    }
    done.recv_timeout(WATCHDOG)
        .expect("every completion reaches the handler");

    stop_tx.send(()).unwrap();
    let taken = exporter.join().unwrap();
    let feed: Feed<SoftCq> = running.handle().remove(key).unwrap();
    let feed_stats = feed.stats();
    println!("{}", export_feed(&feed_stats));
    let shutdown = running.shutdown().unwrap();

    // The last snapshot was taken after every completion was handled: it
    // shows them all, live, before the feed was removed.
    let (last_q, last_d, last_f) = taken.last().expect("at least the final export");
    assert_eq!(last_q.posted, COMPLETIONS);
    assert_eq!(last_q.dequeued, COMPLETIONS);
    assert_eq!(last_q.upcalls, COMPLETIONS);
    assert_eq!(last_f.delivered, COMPLETIONS);
    assert!(last_d.turns > 0, "{last_d:?}");
    // Counters only grow, from one export to the next.
    for w in taken.windows(2) {
        assert!(w[0].0.posted <= w[1].0.posted && w[0].1.turns <= w[1].1.turns);
        assert!(w[0].2.delivered <= w[1].2.delivered);
    }
    // The driver's final counters include what the live ones showed.
    assert!(shutdown.stats.turns >= last_d.turns);
    assert_eq!(shutdown.stats.handler_panics, 0);
    // The feed's, read at removal, count every completion once, as the
    // last live read did.
    assert_eq!(
        (feed_stats.polled, feed_stats.delivered),
        (COMPLETIONS, COMPLETIONS)
    );
    assert_eq!(upcalls.query().posted, COMPLETIONS);
    println!(
        "metrics_export: {} exports, {} completions",
        taken.len(),
        COMPLETIONS
    );
}
