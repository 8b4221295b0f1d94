//! Ping-pong latency on one RC pair: the same responder (a raw event loop
//! on its own thread) answers every ping; the initiator waits for each pong
//! six ways, in interleaved rounds, so that every way sees the same guest,
//! the same moment and the same noise:
//!
//! - `raw`: the verbs event loop with no EVD (`req_notify`, `poll`, `poll(2)`
//!   on the channel fd, `get_cq_event`, ack), the floor;
//! - `in-loop`: a [`Driver`] in event mode run by the initiator's own thread
//!   (`process(None)`), the pong dequeued from the EVD;
//! - `own-thread`: the same driver spawned, the initiator blocked in the
//!   EVD's `wait`: one thread hop per pong;
//! - `adaptive`: the in-loop driver in adaptive mode;
//! - `in-loop (epoll)`: the in-loop driver on the epoll backend (what
//!   `DriverBackend::Auto` falls back to where io_uring is refused);
//! - `busy`: `Feed::progress` polled in a loop, no arming at all.
//!
//! - `in-loop again`: `in-loop` a second time in every round, the null for
//!   the paired lines: what a per-round ratio looks like when the two ways
//!   are the same.
//!
//! The table gives p50 and p99 of the round trips of every round together,
//! and each against `raw`, and the initiator's CPU time per round trip
//! (its thread's, plus the driver thread's for `own-thread`; the responder,
//! the same for every way, is not counted): the median over rounds. The
//! paired lines divide adaptive's, own-thread's and epoll's per-round p50 by
//! in-loop's of the same round, beside in-loop again ÷ in-loop, and count
//! the rounds outside the null's range.

use crate::common::{Res, e2s, ensure};
use crate::cpu_time::thread_cpu_time;
use crate::{GID_INDEX, pair};
use evd::TryDequeueError;
use evd_verbs::ibv::{IbvCq, MemoryRegion, ProtectionDomain, QueuePair, SendOp};
use evd_verbs::{
    AdaptiveConfig, CompletionQueue, CqId, Driver, DriverBackend, DriverConfig, Feed, FeedMode,
    VerbsEvent, WcOpcode, WorkCompletion,
};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const ROUNDS: usize = 21;
const PER_ROUND: usize = 200;
const MSG: usize = 8;
/// Receives the initiator keeps posted.
const RECVS: u64 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Raw,
    InLoop,
    OwnThread,
    Adaptive,
    Busy,
    InLoopEpoll,
    InLoopAgain,
}

const WAYS: [Way; 7] = [
    Way::Raw,
    Way::InLoop,
    Way::OwnThread,
    Way::Adaptive,
    Way::Busy,
    Way::InLoopEpoll,
    Way::InLoopAgain,
];

fn name(w: Way) -> &'static str {
    match w {
        Way::Raw => "raw event loop",
        Way::InLoop => "in-loop driver (event)",
        Way::OwnThread => "own-thread driver (event)",
        Way::Adaptive => "in-loop driver (adaptive)",
        Way::Busy => "busy poll (feed)",
        Way::InLoopEpoll => "in-loop driver (event, epoll)",
        Way::InLoopAgain => "in-loop again (the null)",
    }
}

fn is_recv(wc: &WorkCompletion) -> bool {
    wc.opcode == WcOpcode::RECV
}

/// Wait on `fd` for readability, at most `ms` milliseconds.
pub(crate) fn wait_fd(fd: RawFd, ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, ms) == 1 }
}

/// The raw verbs event loop: deliver every completion to `on_wc` until it
/// returns false or `stop` is set. `unacked` carries events got across calls.
fn raw_loop(
    cq: &mut IbvCq,
    unacked: &mut u32,
    stop: &AtomicBool,
    mut on_wc: impl FnMut(&WorkCompletion) -> bool,
) -> Result<(), String> {
    let mut wcs = [WorkCompletion::default(); 16];
    loop {
        let n = cq.poll(&mut wcs).map_err(e2s)?;
        for wc in &wcs[..n] {
            ensure!(wc.status.is_success(), "{wc:?}");
            if !on_wc(wc) {
                return Ok(());
            }
        }
        if n > 0 {
            continue;
        }
        cq.req_notify(false).map_err(e2s)?;
        // The verbs race: poll once more after arming.
        let n = cq.poll(&mut wcs).map_err(e2s)?;
        let mut go_on = true;
        for wc in &wcs[..n] {
            ensure!(wc.status.is_success(), "{wc:?}");
            go_on &= on_wc(wc);
        }
        if !go_on {
            return Ok(());
        }
        if n > 0 {
            continue;
        }
        let fd = cq.channel_fd().expect("a channel");
        while !wait_fd(fd, 100) {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
        while cq.get_event().map_err(e2s)? {
            *unacked += 1;
        }
        if *unacked >= 16 {
            // SAFETY: `unacked` counts the events got above and not yet
            // acknowledged.
            unsafe { cq.ack_events(*unacked) };
            *unacked = 0;
        }
    }
}

/// The responder: answer every receive with a send, until stopped.
fn respond(
    mut cq: IbvCq,
    qp: &QueuePair,
    mr: &MemoryRegion,
    stop: &AtomicBool,
) -> Result<IbvCq, String> {
    for i in 0..RECVS {
        qp.post_recv(i, mr, (i as usize) * 64, 64).map_err(e2s)?;
    }
    let mut unacked = 0;
    let mut failure = None;
    raw_loop(&mut cq, &mut unacked, stop, |wc| {
        if is_recv(wc) {
            let r = qp
                .post_recv(wc.wr_id, mr, (wc.wr_id as usize) * 64, 64)
                .and_then(|()| qp.post_send(1000, SendOp::Send, mr, 4096, MSG, false));
            if let Err(e) = r {
                failure = Some(e.to_string());
                return false;
            }
        }
        !stop.load(Ordering::Relaxed)
    })?;
    if unacked > 0 {
        // SAFETY: as in `raw_loop`: got and not yet acknowledged.
        unsafe { cq.ack_events(unacked) };
    }
    failure.map_or(Ok(cq), Err)
}

/// The initiator's CQ, in whatever form the current way needs it.
struct Initiator<'a> {
    qp: &'a QueuePair,
    mr: &'a MemoryRegion,
    cq: Option<IbvCq>,
    unacked: u32,
    next_recv: u64,
}

impl Initiator<'_> {
    fn ping(&mut self) -> Result<Instant, String> {
        let slot = self.next_recv % RECVS;
        self.next_recv += 1;
        self.qp
            .post_recv(slot, self.mr, (slot as usize) * 64, 64)
            .map_err(e2s)?;
        let t = Instant::now();
        self.qp
            .post_send(2000, SendOp::Send, self.mr, 4096, MSG, false)
            .map_err(e2s)?;
        Ok(t)
    }

    /// `PER_ROUND` round trips through `evd`, calling `when_empty` whenever
    /// the pong is not there yet (drive the ring, wait, or poll); appends
    /// each round trip in ns. A pong that takes 10 s fails the round.
    fn pongs(
        &mut self,
        evd: &mut evd::Consumer<VerbsEvent>,
        out: &mut Vec<u64>,
        mut when_empty: impl FnMut(&mut evd::Consumer<VerbsEvent>) -> Res,
    ) -> Res {
        for _ in 0..PER_ROUND {
            let t = self.ping()?;
            let deadline = t + Duration::from_secs(10);
            loop {
                match evd.try_dequeue() {
                    Ok(VerbsEvent::Completion { wc, .. }) if is_recv(&wc) => break,
                    Ok(_) => {}
                    Err(TryDequeueError::Empty) => {
                        when_empty(evd)?;
                        ensure!(Instant::now() < deadline, "no pong in 10 s");
                    }
                    Err(e) => return Err(format!("{e:?}")),
                }
            }
            out.push(t.elapsed().as_nanos() as u64);
        }
        Ok(())
    }

    /// One round of `PER_ROUND` round trips the `way` way; appends each in
    /// ns and returns the CPU time the round trips took (see the module doc).
    fn round(&mut self, way: Way, out: &mut Vec<u64>) -> Result<Duration, String> {
        let never = AtomicBool::new(false);
        match way {
            Way::Raw => {
                let mut cq = self.cq.take().expect("cq");
                let mut r = Ok(());
                let cpu = thread_cpu_time();
                for _ in 0..PER_ROUND {
                    let t = self.ping()?;
                    let mut got = false;
                    r = raw_loop(&mut cq, &mut self.unacked, &never, |wc| {
                        got = is_recv(wc);
                        !got
                    });
                    if r.is_err() {
                        break;
                    }
                    out.push(t.elapsed().as_nanos() as u64);
                }
                let cpu = thread_cpu_time() - cpu;
                if self.unacked > 0 {
                    // SAFETY: as in `raw_loop`: got and not yet acknowledged.
                    unsafe { cq.ack_events(self.unacked) };
                    self.unacked = 0;
                }
                self.cq = Some(cq);
                r.map(|()| cpu)
            }
            Way::InLoop | Way::InLoopAgain | Way::Adaptive | Way::InLoopEpoll => {
                let mode = if way == Way::Adaptive {
                    FeedMode::Adaptive(AdaptiveConfig::default())
                } else {
                    FeedMode::Event
                };
                let (poster, mut evd) = evd::bounded::<VerbsEvent>(64).map_err(e2s)?;
                let (config, backend) = if way == Way::InLoopEpoll {
                    let b = DriverBackend::Epoll;
                    (DriverConfig::default().with_backend(b), b)
                } else {
                    let b = DriverBackend::IoUring;
                    (DriverConfig::default().with_backend(b), b)
                };
                let mut driver = Driver::new(config).map_err(e2s)?;
                ensure!(
                    driver.backend() == backend,
                    "{way:?} runs on {:?}",
                    driver.backend()
                );
                let feed = Feed::new(self.cq.take().expect("cq"), CqId(1), poster);
                let key = driver.register(feed, mode).map_err(e2s)?;
                let cpu = thread_cpu_time();
                let r = self.pongs(&mut evd, out, |_| {
                    driver.process(None).map(drop).map_err(e2s)
                });
                let cpu = thread_cpu_time() - cpu;
                let feed = driver.remove(key).map_err(e2s)?;
                let (cq, undelivered) = feed.into_parts();
                ensure!(undelivered.is_empty(), "undelivered {undelivered:?}");
                self.cq = Some(cq);
                r.map(|()| cpu)
            }
            Way::OwnThread => {
                let (poster, mut evd) = evd::bounded::<VerbsEvent>(64).map_err(e2s)?;
                let mut driver = Driver::new(DriverConfig::default()).map_err(e2s)?;
                let feed = Feed::new(self.cq.take().expect("cq"), CqId(1), poster);
                let key = driver.register(feed, FeedMode::Event).map_err(e2s)?;
                let running = driver.spawn().map_err(e2s)?;
                let cpu = thread_cpu_time();
                let r = self.pongs(&mut evd, out, |evd| {
                    evd.wait(1, Some(Duration::from_secs(10)))
                        .map(drop)
                        .map_err(|e| format!("wait: {e:?}"))
                });
                let cpu = thread_cpu_time() - cpu;
                let mut s = running.shutdown().map_err(e2s)?;
                // The driver thread's whole life: the round, and its start
                // and stop, which are a small part of 200 round trips.
                let cpu = cpu + s.cpu_time;
                let (cq, undelivered) = s.take(key).expect("registered").into_parts();
                ensure!(undelivered.is_empty(), "undelivered {undelivered:?}");
                self.cq = Some(cq);
                r.map(|()| cpu)
            }
            Way::Busy => {
                let (poster, mut evd) = evd::bounded::<VerbsEvent>(64).map_err(e2s)?;
                let mut feed = Feed::new(self.cq.take().expect("cq"), CqId(1), poster);
                let cpu = thread_cpu_time();
                let r = self.pongs(&mut evd, out, |_| {
                    feed.progress(64);
                    Ok(())
                });
                let cpu = thread_cpu_time() - cpu;
                let (cq, undelivered) = feed.into_parts();
                ensure!(undelivered.is_empty(), "undelivered {undelivered:?}");
                self.cq = Some(cq);
                r.map(|()| cpu)
            }
        }
    }
}

fn percentile(sorted: &[u64], p: usize) -> u64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// The latency table (see the module doc). Fails only if a round fails; the
/// figures are reported, not asserted.
pub(crate) fn pingpong_latency(pd: &Arc<ProtectionDomain>) -> Res {
    let _ = GID_INDEX;
    let (p, cq_a, cq_b) = pair(pd, 64, (21, 22))?;
    let crate::Pair { a, b, mr_a, mr_b } = p;
    let stop = AtomicBool::new(false);
    let stop = &stop;
    let mut samples: Vec<Vec<u64>> = WAYS.iter().map(|_| Vec::new()).collect();
    let mut round_p50: Vec<Vec<u64>> = WAYS.iter().map(|_| Vec::new()).collect();
    // Per round, CPU ns per round trip.
    let mut round_cpu: Vec<Vec<u64>> = WAYS.iter().map(|_| Vec::new()).collect();
    let result = std::thread::scope(|s| {
        // MRs are Send, not Sync: the responder's move to its thread.
        let responder = s.spawn(move || {
            let r = respond(cq_b, &b, &mr_b, stop);
            (r, b, mr_b)
        });
        let mut me = Initiator {
            qp: &a,
            mr: &mr_a,
            cq: Some(cq_a),
            unacked: 0,
            next_recv: 0,
        };
        let mut r = Ok(());
        'rounds: for round in 0..ROUNDS {
            // Rotate the order each round, so no way always runs first.
            for k in 0..WAYS.len() {
                let i = (round + k) % WAYS.len();
                let mut one = Vec::with_capacity(PER_ROUND);
                match me.round(WAYS[i], &mut one) {
                    Ok(cpu) => round_cpu[i].push(cpu.as_nanos() as u64 / PER_ROUND as u64),
                    Err(e) => {
                        r = Err(format!("{}: {e}", name(WAYS[i])));
                        break 'rounds;
                    }
                }
                one.sort_unstable();
                round_p50[i].push(percentile(&one, 50));
                samples[i].extend(one);
            }
        }
        stop.store(true, Ordering::Relaxed);
        let (cq_b, b, mr_b) = responder.join().expect("responder panicked");
        (r, me.cq.take(), cq_b, b, mr_b)
    });
    let (r, cq_a, cq_b, b, mr_b) = result;
    r?;
    let cq_b = cq_b.map_err(|e| format!("responder: {e}"))?;
    // QPs before the CQs they use.
    drop((a, b, mr_a, mr_b));
    drop((cq_a, cq_b));
    let us = |ns: u64| ns as f64 / 1e3;
    let mut raw = (0, 0);
    println!(
        "ping-pong latency, {MSG}-byte sends, {ROUNDS} interleaved rounds of {PER_ROUND} round trips per way"
    );
    println!(
        "  {:<27} {:>9} {:>9} {:>8} {:>8} {:>10} {:>8}   per-round p50 (µs)",
        "way", "p50 µs", "p99 µs", "p50/raw", "p99/raw", "CPU/rt µs", "CPU/raw"
    );
    let cpu_median = |i: usize| {
        let mut v = round_cpu[i].clone();
        v.sort_unstable();
        percentile(&v, 50)
    };
    let raw_cpu = cpu_median(0);
    for (i, w) in WAYS.iter().enumerate() {
        let mut all = std::mem::take(&mut samples[i]);
        all.sort_unstable();
        let (p50, p99) = (percentile(&all, 50), percentile(&all, 99));
        if *w == Way::Raw {
            raw = (p50, p99);
        }
        let rounds: Vec<String> = round_p50[i]
            .iter()
            .map(|&v| format!("{:.1}", us(v)))
            .collect();
        println!(
            "  {:<27} {:>9.1} {:>9.1} {:>8.2} {:>8.2} {:>10.1} {:>8.2}   {}",
            name(*w),
            us(p50),
            us(p99),
            p50 as f64 / raw.0 as f64,
            p99 as f64 / raw.1 as f64,
            us(cpu_median(i)),
            cpu_median(i) as f64 / raw_cpu as f64,
            rounds.join(" ")
        );
    }
    let index = |w: Way| WAYS.iter().position(|&x| x == w).expect("a way");
    let (event, again) = (index(Way::InLoop), index(Way::InLoopAgain));
    println!(
        "  paired by round, ÷ in-loop (event) of the same round (null: in-loop again ÷ in-loop):"
    );
    for (w, figure, per_round) in [
        (Way::Adaptive, "p50", &round_p50),
        (Way::Adaptive, "CPU", &round_cpu),
        (Way::OwnThread, "p50", &round_p50),
        (Way::OwnThread, "CPU", &round_cpu),
        (Way::InLoopEpoll, "p50", &round_p50),
        (Way::InLoopEpoll, "CPU", &round_cpu),
    ] {
        let ratio = |i: usize| -> Vec<f64> {
            per_round[i]
                .iter()
                .zip(&per_round[event])
                .map(|(&x, &e)| x as f64 / e as f64)
                .collect()
        };
        let (mut ours, mut null) = (ratio(index(w)), ratio(again));
        let (lo, hi) = null
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let above = ours.iter().filter(|&&x| x > hi).count();
        let below = ours.iter().filter(|&&x| x < lo).count();
        ours.sort_by(f64::total_cmp);
        null.sort_by(f64::total_cmp);
        println!(
            "    {:<27} {figure}: median {:.2}, null median {:.2} (range {lo:.2}–{hi:.2}); rounds above the null range {above}, below {below}, of {}",
            name(w),
            ours[ours.len() / 2],
            null[null.len() / 2],
            ours.len()
        );
    }
    Ok(())
}
