//! What a shared channel's quiet CQs cost the one that is busy.
//!
//! `cargo run --release -p evd-verbs --example channel_bench [-- ROUNDS]`
//!
//! One busy CQ and `N` quiet ones (armed, never completing) on one software
//! channel, served by one `ChannelFeed` on a spawned driver, event-driven
//! or adaptive, into one EVD. The main thread plays ping-pong with the
//! driver: it completes one work request on the busy CQ, takes it out of
//! the EVD (a blocking dequeue), and again, `ROUNDS` times (default
//! 20 000): every completion is a wake, or a find of the adaptive spin.
//! For `N` = 0, 16, 128 and 1024 it reports per completion: the driver
//! thread's CPU time and the CQ polls the channel feed made (every
//! member's `FeedStats::polls`), both read on the driver's thread through
//! `DriverHandle::with_feed` before and after the ping-pongs, and the
//! round trip (completion to dequeue, mean). Three trials, the values of `N` interleaved within each; the
//! median of each figure. The software CQ's poll is cheaper than a
//! provider's (no doorbell record, no cache miss on a CQE), so the CPU
//! column understates what quiet CQs cost on a real device; the polls
//! column does not depend on the provider.
//!
//! Then the other side of that trade: a quiet CQ's first completion while
//! the busy one keeps the feed awake (the consumer thread answers each of
//! the busy CQ's completions with the next, so an adaptive feed spins all
//! along). The main thread completes one work request on a fresh quiet CQ
//! (of 200, each used once, so each is clean and armed) every millisecond,
//! stamped with the time it was completed; the consumer takes the time it
//! arrived. Reported per mode: the median and the 90th percentile of the
//! 200, per trial.
//!
//! The example checks that every completion arrived once, in order.

use evd_verbs::soft::{SoftChannel, SoftCqProducer};
use evd_verbs::{
    AdaptiveConfig, ChannelFeed, CqId, Driver, DriverConfig, FeedMode, VerbsEvent, WorkCompletion,
};
use std::time::{Duration, Instant};

const QUIET: [usize; 4] = [0, 16, 128, 1024];
const TRIALS: usize = 3;

/// Per completion: driver CPU, CQ polls, round trip.
#[derive(Clone, Copy, Default)]
struct Figures {
    cpu: Duration,
    polls: f64,
    round_trip: Duration,
}

/// One busy CQ (`CqId(0)`) and quiet ones (`CqId(1)`...) on one software
/// channel, in one channel feed on a spawned driver, into one EVD.
struct Served {
    consumer: evd::Consumer<VerbsEvent>,
    busy: SoftCqProducer,
    quiet: Vec<SoftCqProducer>,
    running: evd_verbs::RunningDriver,
    key: evd_verbs::FeedKey<ChannelFeed<SoftChannel>>,
}

fn served(mode: FeedMode, quiet: usize) -> Served {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let (cq, busy) = channel.create_cq(64).unwrap();
    feed.add(cq, CqId(0)).unwrap();
    let quiet = (1..=quiet as u32)
        .map(|i| {
            let (cq, hca) = channel.create_cq(4).unwrap();
            feed.add(cq, CqId(i)).unwrap();
            hca
        })
        .collect();
    let running = Driver::new(DriverConfig::default())
        .unwrap()
        .spawn()
        .unwrap();
    let key = running.handle().register_channel(feed, mode).unwrap();
    Served {
        consumer,
        busy,
        quiet,
        running,
        key,
    }
}

fn run(mode: FeedMode, quiet: usize, rounds: u64) -> Figures {
    let Served {
        mut consumer,
        busy: hca,
        quiet: quiet_hcas,
        running,
        key,
    } = served(mode, quiet);
    // Every CQ armed, the driver asleep (event mode) before the clock starts.
    hca.push(WorkCompletion::new(u64::MAX)).unwrap();
    consumer.dequeue().unwrap();
    let (cpu_before, polls_before) = cpu_and_polls(&running, key);
    let start = Instant::now();
    for wr_id in 0..rounds {
        hca.push(WorkCompletion::new(wr_id)).unwrap();
        match consumer.dequeue().unwrap() {
            VerbsEvent::Completion { cq: CqId(0), wc } => assert_eq!(wc.wr_id, wr_id),
            other => panic!("unexpected {other:?}"),
        }
    }
    let took = start.elapsed();
    let (cpu_after, polls_after) = cpu_and_polls(&running, key);
    running.shutdown().unwrap();
    drop(quiet_hcas);
    Figures {
        cpu: (cpu_after - cpu_before) / rounds as u32,
        polls: (polls_after - polls_before) as f64 / rounds as f64,
        round_trip: took / rounds as u32,
    }
}

/// The driver thread's CPU time so far, and every member's CQ polls: read
/// on the driver's thread, between its turns.
fn cpu_and_polls(
    running: &evd_verbs::RunningDriver,
    key: evd_verbs::FeedKey<ChannelFeed<SoftChannel>>,
) -> (Duration, u64) {
    running
        .handle()
        .with_feed(key, |feed| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes one timespec into a live local.
            let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            assert_eq!(r, 0, "the thread's CPU clock");
            let cpu = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
            (cpu, feed.feeds().map(|f| f.stats().polls).sum())
        })
        .unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds = std::env::args()
        .nth(1)
        .map_or(20_000, |a| a.parse::<u64>().unwrap());
    for (name, mode) in [
        ("event", FeedMode::Event),
        ("adaptive", FeedMode::Adaptive(AdaptiveConfig::default())),
    ] {
        let mut runs = vec![Vec::new(); QUIET.len()];
        for _ in 0..TRIALS {
            for (i, &quiet) in QUIET.iter().enumerate() {
                runs[i].push(run(mode, quiet, rounds));
            }
        }
        println!("{name} mode, {rounds} ping-pongs, median of {TRIALS} trials:");
        println!("  quiet CQs   driver CPU/completion   CQ polls/completion   round trip");
        for (i, &quiet) in QUIET.iter().enumerate() {
            let r = &runs[i];
            let cpu = median(r.iter().map(|f| f.cpu.as_secs_f64() * 1e9).collect());
            let polls = median(r.iter().map(|f| f.polls).collect());
            let rt = median(r.iter().map(|f| f.round_trip.as_secs_f64() * 1e9).collect());
            println!("  {quiet:>9}   {cpu:>15.0} ns   {polls:>19.1}   {rt:>8.0} ns");
        }
    }
    for (name, mode) in [
        ("event", FeedMode::Event),
        ("adaptive", FeedMode::Adaptive(AdaptiveConfig::default())),
    ] {
        print!("{name} mode, a quiet CQ's first completion while another is busy, median / p90:");
        for _ in 0..TRIALS {
            let (p50, p90) = joining(mode);
            print!("  {:.1} / {:.1} us", p50 * 1e6, p90 * 1e6);
        }
        println!();
    }
    println!("channel_bench: every completion once, in order");
}

/// Quiet CQs completed one at a time while a busy one ping-pongs with the
/// consumer: the quiet completions' latencies (completed → dequeued), the
/// median and the 90th percentile, in seconds.
fn joining(mode: FeedMode) -> (f64, f64) {
    const JOINING: usize = 200;
    let Served {
        mut consumer,
        busy: busy_hca,
        quiet,
        running,
        key,
    } = served(mode, JOINING);
    let start = Instant::now();
    let consumer_thread = std::thread::spawn(move || {
        let mut latencies = Vec::new();
        let mut next_busy = 1;
        busy_hca.push(WorkCompletion::new(0)).unwrap();
        while latencies.len() < JOINING {
            match consumer.dequeue().unwrap() {
                VerbsEvent::Completion { cq: CqId(0), wc } => {
                    assert_eq!(wc.wr_id, next_busy - 1, "the busy CQ in order");
                    busy_hca.push(WorkCompletion::new(next_busy)).unwrap();
                    next_busy += 1;
                }
                VerbsEvent::Completion { wc, .. } => {
                    let now = start.elapsed().as_nanos() as u64;
                    latencies.push((now - wc.wr_id) as f64 * 1e-9);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        latencies
    });
    for hca in &quiet {
        // The pace of the injections, a millisecond apart (the consumer
        // waits on the EVD, not on this).
        std::thread::sleep(Duration::from_millis(1));
        let stamp = start.elapsed().as_nanos() as u64;
        hca.push(WorkCompletion::new(stamp)).unwrap();
    }
    let mut latencies = consumer_thread.join().unwrap();
    let mut stopped = running.shutdown().unwrap();
    drop(stopped.take(key));
    drop(quiet);
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.9))
}
