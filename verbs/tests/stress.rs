//! Stress: completions produced concurrently with the feed's arm/drain
//! cycles, in all three modes, on a software CQ whose re-arm window is
//! widened and which raises spurious events and error completions. Checks
//! exactly-once, in-order delivery per producer, and that no completion is
//! left in the CQ while the feed sleeps: a stranded completion would never
//! be delivered, and the watchdog then fails the test instead of hanging.

mod common;

use common::load::{Credits, Overflow, drain_completions};
use evd::TryDequeueError;
use evd_verbs::soft::{SoftCq, SoftCqProducer};
use evd_verbs::{
    AdaptiveConfig, CqId, Driver, DriverConfig, Feed, FeedMode, Poller, VerbsEvent, WcStatus,
    WorkCompletion,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const PRODUCERS: u64 = 2;
const PER_PRODUCER: u64 = 100_000;
const CQ_DEPTH: u64 = 256;
const EVD_CAPACITY: usize = 64;
/// No delivery for this long means a completion is stranded (or a hang).
const WATCHDOG: Duration = Duration::from_secs(30);

enum Mode {
    BusyPoll,
    Driver(FeedMode),
}

/// Producers ("the HCA"): at most `CQ_DEPTH` completions outstanding, as an
/// application sizes its CQ; idle gaps now and then so the feed goes to sleep.
fn spawn_producers(
    hca: &SoftCqProducer,
    credits: &Arc<Credits>,
    abort: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    common::load::spawn_producers(PRODUCERS, PER_PRODUCER, credits, Some(abort), |p| {
        let hca = hca.clone();
        move |seq| {
            hca.push(WorkCompletion::new((p << 32) | seq))
                .expect("the CQ never overruns: producers respect its depth");
            if seq % 4096 == 0 {
                // Load shaping, not synchronization: an idle gap lets
                // the feed drain, arm and sleep.
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    })
}

fn consume_all(
    consumer: &mut evd::Consumer<VerbsEvent>,
    credits: &Credits,
    hca: &SoftCqProducer,
    abort: &AtomicBool,
) -> (u64, u64) {
    let total = PRODUCERS * PER_PRODUCER;
    let mut next = vec![0u64; PRODUCERS as usize];
    let mut received = 0u64;
    let mut errors = 0u64;
    let record = |cq: CqId, wc: &WorkCompletion| {
        assert_eq!(cq, CqId(1));
        let p = (wc.wr_id >> 32) as usize;
        let seq = wc.wr_id & 0xffff_ffff;
        assert_eq!(seq, next[p], "producer {p}: lost, duplicated or reordered");
        next[p] += 1;
        received += 1;
        if !wc.status.is_success() {
            assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR);
            errors += 1;
        }
    };
    let stalled = |got| {
        abort.store(true, Ordering::Relaxed);
        format!(
            "nothing delivered for {WATCHDOG:?}; received {got}/{total}; CQ {:?}; stranded: {}",
            hca.stats(),
            hca.is_stranded()
        )
    };
    // An overflow report is tolerated: the feed's held-and-retried post
    // was refused once, not a loss.
    drain_completions(
        consumer,
        total,
        credits,
        WATCHDOG,
        Overflow::Tolerated,
        record,
        stalled,
    );
    (received, errors)
}

fn stress(mode: Mode) {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(EVD_CAPACITY).unwrap();
    let (cq, hca) = SoftCq::new(CQ_DEPTH as usize).unwrap();
    hca.set_rearm_window(2);
    hca.set_spurious_every(7);
    hca.set_error_every(13);
    let feed = Feed::new(cq, CqId(1), poster);
    let credits = Arc::new(Credits::new(CQ_DEPTH));
    let abort = Arc::new(AtomicBool::new(false));

    enum Running {
        Poller(Poller<SoftCq>),
        Driver(evd_verbs::RunningDriver, evd_verbs::FeedKey<Feed<SoftCq>>),
    }
    let running = match mode {
        Mode::BusyPoll => Running::Poller(Poller::spawn(vec![feed], 64).unwrap()),
        Mode::Driver(m) => {
            let mut driver = Driver::new(DriverConfig::default()).unwrap();
            let key = driver.register(feed, m).unwrap();
            Running::Driver(driver.spawn().unwrap(), key)
        }
    };
    let producers = spawn_producers(&hca, &credits, &abort);
    let (received, errors) = consume_all(&mut consumer, &credits, &hca, &abort);
    for p in producers {
        p.join().unwrap();
    }
    assert_eq!(received, PRODUCERS * PER_PRODUCER);
    assert_eq!(errors, PRODUCERS * PER_PRODUCER / 13);

    // Teardown: every event got is acked before the CQ is destroyed.
    let feeds: Vec<Feed<SoftCq>> = match running {
        Running::Poller(p) => p.stop().expect("the poller thread did not panic").feeds,
        Running::Driver(d, key) => {
            let mut s = d.shutdown().unwrap();
            let feed = s.take(key).unwrap();
            assert!(s.is_empty());
            vec![feed]
        }
    };
    assert_eq!(feeds.len(), 1);
    drop(feeds);
    let s = hca.stats();
    assert_eq!(s.len, 0, "completions left in the CQ");
    assert_eq!(s.unacked_at_destroy, Some(0));
    assert_eq!(s.events_got, s.events_acked);
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    eprintln!("{s:?}");
}

#[test]
fn stress_busy_poll() {
    stress(Mode::BusyPoll);
}

#[test]
fn stress_event_driven() {
    stress(Mode::Driver(FeedMode::Event));
}

#[test]
fn stress_adaptive() {
    stress(Mode::Driver(FeedMode::Adaptive(AdaptiveConfig::default())));
}
