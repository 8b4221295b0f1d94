//! Stress: completions produced concurrently with the feed's arm/drain
//! cycles, in all three modes, on a software CQ whose re-arm window is
//! widened and which raises spurious events and error completions. Checks
//! exactly-once, in-order delivery per producer, and that no completion is
//! left in the CQ while the feed sleeps: a stranded completion would never
//! be delivered, and the watchdog then fails the test instead of hanging.

use evd::TryDequeueError;
use evd_verbs::soft::{SoftCq, SoftCqProducer};
use evd_verbs::{
    AdaptiveConfig, CqId, Driver, DriverConfig, Feed, FeedMode, Poller, VerbsEvent, WcStatus,
    WorkCompletion,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    outstanding: &Arc<AtomicU64>,
    abort: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..PRODUCERS)
        .map(|p| {
            let hca = hca.clone();
            let outstanding = outstanding.clone();
            let abort = abort.clone();
            std::thread::spawn(move || {
                for seq in 0..PER_PRODUCER {
                    loop {
                        let o = outstanding.load(Ordering::Acquire);
                        if o < CQ_DEPTH
                            && outstanding
                                .compare_exchange(o, o + 1, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok()
                        {
                            break;
                        }
                        if abort.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::yield_now();
                    }
                    hca.push(WorkCompletion {
                        wr_id: (p << 32) | seq,
                        ..Default::default()
                    })
                    .expect("the CQ never overruns: producers respect its depth");
                    if seq % 4096 == 0 {
                        // Load shaping, not synchronization: an idle gap lets
                        // the feed drain, arm and sleep.
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            })
        })
        .collect()
}

fn consume_all(
    consumer: &mut evd::Consumer<VerbsEvent>,
    outstanding: &AtomicU64,
    hca: &SoftCqProducer,
    abort: &AtomicBool,
) -> (u64, u64) {
    let total = PRODUCERS * PER_PRODUCER;
    let mut next = vec![0u64; PRODUCERS as usize];
    let mut received = 0u64;
    let mut errors = 0u64;
    let mut batch = Vec::with_capacity(EVD_CAPACITY);
    let mut last_progress = Instant::now();
    while received < total {
        batch.clear();
        match consumer.dequeue_batch(&mut batch, EVD_CAPACITY) {
            Ok(0) => {
                if last_progress.elapsed() > WATCHDOG {
                    abort.store(true, Ordering::Relaxed);
                    panic!(
                        "watchdog: nothing delivered for {WATCHDOG:?}; received {received}/{total}; \
                         CQ {:?}; stranded: {}",
                        hca.stats(),
                        hca.is_stranded()
                    );
                }
                let _ = consumer.wait(1, Some(Duration::from_millis(100)));
            }
            Ok(_) => {
                last_progress = Instant::now();
                for ev in &batch {
                    let VerbsEvent::Completion { cq, wc } = ev else {
                        panic!("unexpected {ev:?}");
                    };
                    assert_eq!(*cq, CqId(1));
                    let p = (wc.wr_id >> 32) as usize;
                    let seq = wc.wr_id & 0xffff_ffff;
                    assert_eq!(seq, next[p], "producer {p}: lost, duplicated or reordered");
                    next[p] += 1;
                    if !wc.status.is_success() {
                        assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR);
                        errors += 1;
                    }
                }
                received += batch.len() as u64;
                outstanding.fetch_sub(batch.len() as u64, Ordering::AcqRel);
            }
            // The feed's held-and-retried post was refused once: not a loss.
            Err(TryDequeueError::Overflow(_)) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    (received, errors)
}

fn stress(mode: Mode) {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(EVD_CAPACITY).unwrap();
    let (cq, hca) = SoftCq::new(CQ_DEPTH as usize).unwrap();
    hca.set_rearm_window(2);
    hca.set_spurious_every(7);
    hca.set_error_every(13);
    let feed = Feed::new(cq, CqId(1), poster);
    let outstanding = Arc::new(AtomicU64::new(0));
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
    let producers = spawn_producers(&hca, &outstanding, &abort);
    let (received, errors) = consume_all(&mut consumer, &outstanding, &hca, &abort);
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
            // No timer: the driver woke only for channels, commands and room.
            assert_eq!(s.stats.timeouts, 0);
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
