//! Soak: move many events (default 10^8) through two posters while the
//! consumer switches at random among its modes, and check exactly-once.
//!
//! `cargo run --release -p evd --example soak -- [EVENTS] [SEED]`
//! (or `scripts/soak`). The default run takes minutes and is not part of CI;
//! `scripts/test` runs 10^6 events.
//!
//! Each event is `poster << 48 | sequence`. Every delivery sets the event's
//! bit in a shared bitmap and fails if it was already set (a duplicate); the
//! dequeue modes also check FIFO per poster. At the end every bit must be
//! set (nothing lost), and no loss may be reported: every post the ring
//! refused was retried. Modes: try_dequeue, dequeue_batch, arm + blocking wait,
//! async recv, eventfd + poll(2), SingleInstance and ManyInstances upcalls
//! (INVOC_ANY and INVOC_NEW), and resizes between phases.

use evd::{
    ArmStatus, Consumer, Invoke, Overflow, PostError, TryDequeueError, UpcallPolicy, WaitError,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Ledger as Seen, Rng};

const POSTERS: u64 = 2;

/// Exactly-once ledger shared with upcall handlers: every event's bit (the
/// tests' [`Seen`]), and the counts of deliveries and of reported losses.
struct Ledger {
    seen: Seen,
    per: u64,
    delivered: AtomicU64,
    reported: AtomicU64,
}

impl Ledger {
    fn new(per: u64) -> Self {
        Ledger {
            seen: Seen::new(per * POSTERS),
            per,
            delivered: AtomicU64::new(0),
            reported: AtomicU64::new(0),
        }
    }
    fn record(&self, ev: u64) {
        let p = ev >> 48;
        let seq = ev & ((1 << 48) - 1);
        assert!(p < POSTERS && seq < self.per, "invented event {ev:#x}");
        self.seen.record(p * self.per + seq);
        self.delivered.fetch_add(1, Relaxed);
    }
    fn overflow(&self, o: Overflow) {
        self.reported.fetch_add(o.lost, Relaxed);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Dequeue,
    Batch,
    Wait,
    Async,
    EventFd,
    Upcall(UpcallPolicy, bool),
}

fn pick(rng: &mut Rng) -> Mode {
    match rng.below(9) {
        0 => Mode::Dequeue,
        1 => Mode::Batch,
        2 => Mode::Wait,
        3 => Mode::Async,
        4 => Mode::EventFd,
        5 => Mode::Upcall(UpcallPolicy::SingleInstance, true),
        6 => Mode::Upcall(UpcallPolicy::SingleInstance, false),
        7 => Mode::Upcall(UpcallPolicy::ManyInstances, true),
        _ => Mode::Upcall(UpcallPolicy::ManyInstances, false),
    }
}

/// Per-poster FIFO check for the dequeue modes.
struct Fifo([Option<u64>; POSTERS as usize]);

impl Fifo {
    fn check(&mut self, ev: u64) {
        let p = (ev >> 48) as usize;
        assert!(self.0[p] < Some(ev), "poster {p} out of order");
        self.0[p] = Some(ev);
    }
}

/// Consume `quota` events (or until end of stream) in one mode. Returns the
/// consumer and whether the stream ended.
fn phase(
    mut c: Consumer<u64>,
    mode: Mode,
    quota: u64,
    ledger: &Arc<Ledger>,
    fifo: &mut Fifo,
) -> (Consumer<u64>, bool) {
    let goal = ledger.delivered.load(Relaxed) + quota;
    let take = |ev: u64, fifo: &mut Fifo| {
        fifo.check(ev);
        ledger.record(ev);
    };
    let mut buf = Vec::with_capacity(256);
    let fd = (mode == Mode::EventFd).then(|| c.notify_fd().expect("eventfd"));
    while ledger.delivered.load(Relaxed) < goal {
        match mode {
            Mode::Dequeue | Mode::Wait | Mode::EventFd => match c.try_dequeue() {
                Ok(ev) => take(ev, fifo),
                Err(TryDequeueError::Overflow(o)) => ledger.overflow(o),
                Err(TryDequeueError::Closed) => return (c, true),
                Err(TryDequeueError::Empty) => match mode {
                    // Untimed: a lost wake-up hangs, and the watchdog reports it.
                    Mode::Wait => match c.wait(1, None) {
                        Ok(_) | Err(WaitError::Closed { .. }) => {}
                        Err(WaitError::Overflow(o)) => ledger.overflow(o),
                        Err(e) => panic!("wait: {e}"),
                    },
                    Mode::EventFd => {
                        if c.arm() == ArmStatus::Armed {
                            let fd = fd.as_ref().expect("eventfd");
                            let mut p =
                                [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                            // Untimed too: every notification of an armed
                            // EVD writes the fd, and so does its close.
                            rustix::event::poll(&mut p, None).expect("poll");
                            fd.acknowledge().expect("acknowledge");
                        }
                    }
                    _ => std::hint::spin_loop(),
                },
            },
            Mode::Batch => match c.dequeue_batch(&mut buf, 256) {
                Ok(_) => buf.drain(..).for_each(|ev| take(ev, fifo)),
                Err(TryDequeueError::Overflow(o)) => ledger.overflow(o),
                Err(TryDequeueError::Closed) => return (c, true),
                Err(TryDequeueError::Empty) => unreachable!("batch reports empty as Ok(0)"),
            },
            Mode::Async => match futures::executor::block_on(c.recv()) {
                Ok(ev) => take(ev, fifo),
                Err(evd::RecvError::Overflow(o)) => ledger.overflow(o),
                Err(evd::RecvError::Closed) => return (c, true),
                Err(e) => panic!("recv: {e}"),
            },
            Mode::Upcall(policy, any) => {
                let l = ledger.clone();
                let invoke = if any { Invoke::Any } else { Invoke::New };
                let up = c.into_upcalls(policy, invoke, move |ev, _more| match ev {
                    Ok(ev) => l.record(ev),
                    Err(o) => l.overflow(o),
                });
                // The posters deliver; this thread only watches the count,
                // until the EVD closes: then no post comes any more, and
                // under `Invoke::New` only a post starts an upcall, so what
                // is still queued is the next phase's to take.
                while ledger.delivered.load(Relaxed) < goal && !up.query().closed {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let mut c = up.teardown();
                // Upcalls deliver in dequeue order, handlers in any order:
                // FIFO restarts from what the ring holds now.
                *fifo = Fifo([None; POSTERS as usize]);
                let q = c.query();
                let done = q.len == 0 && q.closed;
                c.set_spin_budget(evd::DEFAULT_SPIN_BUDGET);
                return (c, done);
            }
        }
    }
    (c, false)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let events: u64 = args
        .next()
        .map_or(100_000_000, |a| a.parse().expect("EVENTS"));
    let seed: u64 = args.next().map_or(0x5eed ^ std::process::id() as u64, |a| {
        a.parse().expect("SEED")
    }) | 1;
    let per = events / POSTERS;
    println!(
        "soak: {} events, {POSTERS} posters, seed {seed}",
        per * POSTERS
    );
    let ledger = Arc::new(Ledger::new(per));
    let (poster, mut consumer) = evd::bounded::<u64>(1024).unwrap();
    let refused = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let posters: Vec<_> = (0..POSTERS)
        .map(|p| {
            let poster = poster.clone();
            let refused = refused.clone();
            std::thread::spawn(move || {
                for seq in 0..per {
                    let mut ev = (p << 48) | seq;
                    loop {
                        match poster.post(ev) {
                            Ok(()) => break,
                            Err(PostError::Full(back)) => {
                                refused.fetch_add(1, Relaxed);
                                ev = back;
                                std::thread::yield_now();
                            }
                            Err(PostError::Closed(_)) => panic!("closed under a poster"),
                        }
                    }
                }
            })
        })
        .collect();
    drop(poster);
    // Watchdog: no delivery for 30 s is a hang (a lost wake-up).
    {
        let ledger = ledger.clone();
        std::thread::spawn(move || {
            let mut last = ledger.delivered.load(Relaxed);
            loop {
                std::thread::sleep(Duration::from_secs(30));
                let now = ledger.delivered.load(Relaxed);
                if now == last {
                    // A panic here would end only this thread: exit instead.
                    eprintln!("soak: no progress for 30 s at {now} events: a lost wake-up?");
                    std::process::exit(1);
                }
                last = now;
            }
        });
    }
    // xorshift64* from the seed itself (odd, so never zero).
    let mut rng = Rng(seed);
    let mut fifo = Fifo([None; POSTERS as usize]);
    let mut per_mode: Vec<(Mode, u64)> = Vec::new();
    let mut phases = 0u64;
    let mut last_report = Instant::now();
    loop {
        let mode = pick(&mut rng);
        // Phases of 1..=2^20 events, so modes switch often and also run long.
        let scale = 1 + rng.below(20);
        let quota = 1 + rng.below(1 << scale);
        let before = ledger.delivered.load(Relaxed);
        let (c, ended) = phase(consumer, mode, quota, &ledger, &mut fifo);
        consumer = c;
        let n = ledger.delivered.load(Relaxed) - before;
        match per_mode.iter_mut().find(|(m, _)| *m == mode) {
            Some((_, total)) => *total += n,
            None => per_mode.push((mode, n)),
        }
        phases += 1;
        if rng.below(16) == 0 {
            let cap = 1usize << (4 + rng.below(9));
            let _ = consumer.resize(cap);
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            let d = ledger.delivered.load(Relaxed);
            println!(
                "  {d} events ({:.1}%), {:.1} s",
                100.0 * d as f64 / (per * POSTERS) as f64,
                start.elapsed().as_secs_f64()
            );
        }
        if ended {
            break;
        }
    }
    for p in posters {
        p.join().unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let delivered = ledger.delivered.load(Relaxed);
    assert_eq!(delivered, per * POSTERS, "events lost");
    assert!(ledger.seen.all_seen(), "events lost");
    assert_eq!(
        ledger.reported.load(Relaxed),
        0,
        "a loss was reported although every refused post was retried"
    );
    let q = consumer.query();
    println!(
        "soak OK: {delivered} events exactly once in {elapsed:.1} s ({:.2} M events/s), {phases} phases, \
         {} refused posts (retried, none reported as lost), {} notifications, {} upcalls",
        delivered as f64 / elapsed / 1e6,
        refused.load(Relaxed),
        q.notifications,
        q.upcalls
    );
    for (mode, n) in per_mode {
        println!("  {mode:?}: {n}");
    }
}
