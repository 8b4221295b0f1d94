//! Measurements of the feed on the software CQ.
//!
//! `cargo run --release -p evd-verbs --example feed_bench -- throughput`
//!   completions per second through a feed (poll, post into the EVD,
//!   dequeue) against a raw poll loop on the same CQ, both draining a
//!   pre-filled CQ on one thread.
//!
//! `cargo run --release -p evd-verbs --example feed_bench -- loads [--rt] [--unpinned]`
//!   busy-poll, event-driven and adaptive feeds under four loads: bursty
//!   (bursts of 256 completions 2 µs apart, 2 ms idle between bursts), short
//!   bursts (64 completions: shorter than a wake-up on the measured machine),
//!   steady within the adaptive spin limit (one completion every 10 µs) and
//!   steady beyond it (one every 200 µs). Each mode reports the CPU time of
//!   its feeding thread per completion and the latency from the completion
//!   entering the CQ to its upcall (mean, median, p99). The figure of merit
//!   is CPU per completion × mean latency (lower is better): busy-poll buys
//!   latency with CPU, event-driven CPU with latency; the product rewards
//!   getting both. `--rt` runs every thread SCHED_FIFO so that other load
//!   does not distort the figures. (`bursty` runs the two bursty loads
//!   alone, `steady` the two steady ones.)
//!
//!   The producer thread stands for an HCA, which never runs on the
//!   consumer's CPU, so it is pinned to CPU 0 and the feeding thread to
//!   CPU 1. `--unpinned` leaves placement to the scheduler: it then often
//!   wakes the feeding thread onto the CPU where the producer spins out its
//!   2 µs gaps, and every mode that sleeps waits for the producer's time
//!   slice (a co-location test, not a model of an HCA).
//!
//!   Each load also gets a `sleep floor` row: the latency no mode that
//!   sleeps while the CQ is idle can beat. In every trial the producer's
//!   thread wakes a thread blocked on an eventfd after the load's idle time,
//!   on the same two CPUs, and records how long the wake took (`W`). A
//!   sleeping mode's first completion of a burst waits `W`, and the
//!   completions that arrive during it wait out the rest of `W`; the floor
//!   is the mean over the measured `W` of that latency, spread over the
//!   burst (the rest of the burst at zero). Busy-poll never sleeps and is
//!   not bound by it.
//!
//!   Each trial runs the three modes back to back and then event mode once
//!   more. The `paired` lines give adaptive ÷ event per trial beside that
//!   second event run ÷ the first (the null: the same mode twice), and count
//!   the trials whose ratio lies outside the null's range: on so noisy a
//!   machine, a difference the null shows too is not one. A last line
//!   counts the trials in which adaptive beat both other modes of the same
//!   trial: on the figure, and on each one's weakness (the mean latency
//!   against event mode, the CPU against busy-poll).

use evd::{Invoke, UpcallPolicy};
use evd_verbs::soft::SoftCq;
use evd_verbs::{
    AdaptiveConfig, CompletionQueue, CqId, Driver, DriverConfig, Feed, FeedMode, POLL_BATCH,
    Poller, VerbsEvent, WorkCompletion,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `rounds` rounds, each `prepare` (not timed), then `step` and a batch
/// dequeue until `chunk` events came out: the time the steps and
/// dequeues took. What is dequeued is read (its `wr_id`s summed), as an
/// application reads it.
fn dequeue_rounds(
    consumer: &mut evd::Consumer<VerbsEvent>,
    rounds: usize,
    chunk: usize,
    mut prepare: impl FnMut(),
    mut step: impl FnMut(),
) -> Duration {
    let mut out = Vec::with_capacity(1024);
    let mut sum = 0u64;
    let mut took = Duration::ZERO;
    for _ in 0..rounds {
        prepare();
        let t = Instant::now();
        let mut got = 0;
        while got < chunk {
            step();
            out.clear();
            got += consumer.dequeue_batch(&mut out, 1024).unwrap();
            for ev in &out {
                if let VerbsEvent::Completion { wc, .. } = ev {
                    sum = sum.wrapping_add(wc.wr_id);
                }
            }
        }
        took += t.elapsed();
    }
    std::hint::black_box(sum);
    took
}

fn throughput() {
    const CHUNK: usize = 65_536;
    const ROUNDS: usize = 60;
    let fill: Vec<WorkCompletion> = (0..CHUNK as u64).map(WorkCompletion::new).collect();
    let mut best_raw = f64::MAX;
    let mut best_feed = f64::MAX;
    let mut best_evd = f64::MAX;
    let mut best_evd_batch = f64::MAX;
    for _trial in 0..3 {
        // Raw poll loop.
        let (mut cq, hca) = SoftCq::new(CHUNK).unwrap();
        let mut batch = [WorkCompletion::default(); POLL_BATCH];
        let mut sum = 0u64;
        let mut raw = Duration::ZERO;
        for _ in 0..ROUNDS {
            hca.push_batch(&fill);
            let t = Instant::now();
            loop {
                let n = cq.poll(&mut batch).unwrap();
                for wc in &batch[..n] {
                    sum = sum.wrapping_add(wc.wr_id);
                }
                if n < POLL_BATCH {
                    break;
                }
            }
            raw += t.elapsed();
        }
        std::hint::black_box(sum);
        // Through the feed and the EVD, consumed by batch dequeue.
        let (cq, hca) = SoftCq::new(CHUNK).unwrap();
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
        let mut feed = Feed::new(cq, CqId(0), poster);
        let fed = dequeue_rounds(
            &mut consumer,
            ROUNDS,
            CHUNK,
            || {
                hca.push_batch(&fill);
            },
            || {
                feed.progress(512);
            },
        );
        // The EVD alone: post the same events and dequeue them in batches,
        // no CQ, to show where the feed's cost goes.
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
        let ev = VerbsEvent::Completion {
            cq: CqId(0),
            wc: fill[1],
        };
        let post_each = || {
            for _ in 0..512 {
                poster.post(ev).unwrap();
            }
        };
        let t = dequeue_rounds(&mut consumer, ROUNDS, CHUNK, || {}, post_each);
        best_evd = best_evd.min(t.as_secs_f64() / (CHUNK * ROUNDS) as f64);
        // The EVD alone again, posting batches of POLL_BATCH as the feed
        // does: the floor under the feed's cost (the feed adds the poll).
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
        let mut pending = Vec::with_capacity(POLL_BATCH);
        let post_batches = || {
            for _ in 0..512 / POLL_BATCH {
                pending.resize(POLL_BATCH, ev);
                poster.post_batch(&mut pending).unwrap();
            }
        };
        let t = dequeue_rounds(&mut consumer, ROUNDS, CHUNK, || {}, post_batches);
        best_evd_batch = best_evd_batch.min(t.as_secs_f64() / (CHUNK * ROUNDS) as f64);
        let n = (CHUNK * ROUNDS) as f64;
        best_raw = best_raw.min(raw.as_secs_f64() / n);
        best_feed = best_feed.min(fed.as_secs_f64() / n);
    }
    println!(
        "software CQ, {} completions per trial, best of 3:",
        CHUNK * ROUNDS
    );
    println!(
        "  raw poll loop : {:6.2} M completions/s ({:.1} ns each)",
        1e-6 / best_raw,
        best_raw * 1e9
    );
    println!(
        "  feed + EVD    : {:6.2} M completions/s ({:.1} ns each)",
        1e-6 / best_feed,
        best_feed * 1e9
    );
    println!(
        "  feed overhead : {:+.1}% time per completion",
        (best_feed / best_raw - 1.0) * 100.0
    );
    println!(
        "  EVD alone (no CQ), post + batch dequeue      : {:.1} ns per event",
        best_evd * 1e9
    );
    println!(
        "  EVD alone (no CQ), post_batch(16) + dequeue  : {:.1} ns per event",
        best_evd_batch * 1e9
    );
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    BusyPoll,
    Event,
    Adaptive,
}

/// An arrival pattern: `burst` completions `gap` apart, then `idle`.
#[derive(Clone, Copy, Debug)]
struct Load {
    name: &'static str,
    burst: usize,
    gap: Duration,
    idle: Duration,
    bursts: usize,
}

const BURSTY: Load = Load {
    name: "bursty 256 x 2 µs, 2 ms idle",
    burst: 256,
    gap: Duration::from_micros(2),
    idle: Duration::from_millis(2),
    bursts: 100,
};
/// Bursts shorter than a wake-up on the measured machine (about 100 µs
/// there): the whole burst is in the CQ by the time the feed wakes, so no
/// spin can catch anything.
const SHORT_BURSTS: Load = Load {
    name: "short bursts 64 x 2 µs, 2 ms idle",
    burst: 64,
    gap: Duration::from_micros(2),
    idle: Duration::from_millis(2),
    bursts: 300,
};
const STEADY_FAST: Load = Load {
    name: "steady, every 10 µs",
    burst: 1,
    gap: Duration::ZERO,
    idle: Duration::from_micros(10),
    bursts: 20_000,
};
const STEADY_SLOW: Load = Load {
    name: "steady, every 200 µs",
    burst: 1,
    gap: Duration::ZERO,
    idle: Duration::from_micros(200),
    bursts: 2_000,
};

/// Wait until `t`: sleep for long waits, spin for short ones (a sleep
/// oversleeps by tens of µs).
fn wait_until(t: Instant) {
    let left = t.saturating_duration_since(Instant::now());
    if left > Duration::from_micros(500) {
        std::thread::sleep(left - Duration::from_micros(100));
    }
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

struct Result {
    /// Adaptive feeds' spin outcomes: catches and misses.
    spins: (u64, u64),
    mean: Duration,
    arms_per_completion: f64,
    cpu_per_completion: Duration,
    median: Duration,
    p99: Duration,
}

fn load_run(mode: Mode, load: Load) -> Result {
    let total = load.bursts * load.burst;
    let (cq, hca) = SoftCq::new(4096).unwrap();
    let (poster, consumer) = evd::bounded::<VerbsEvent>(4096).unwrap();
    let t0 = Instant::now();
    let lat = Arc::new(Mutex::new(Vec::<u64>::with_capacity(total)));
    let sink = lat.clone();
    let upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        if let Ok(VerbsEvent::Completion { wc, .. }) = ev {
            let now = t0.elapsed().as_nanos() as u64;
            sink.lock().unwrap().push(now - wc.wr_id);
        }
    });
    let feed = Feed::new(cq, CqId(0), poster);
    enum Running {
        P(Poller<SoftCq>),
        D(evd_verbs::RunningDriver, evd_verbs::FeedKey<Feed<SoftCq>>),
    }
    // The feeding thread (and the upcalls it runs) gets CPU 1 and the
    // producer, this thread, CPU 0: the producer stands for an HCA, which
    // never shares the consumer's CPU (see the module doc for `--unpinned`).
    let pinned = is_pinned();
    if pinned {
        pin_to(1);
    }
    let running = match mode {
        Mode::BusyPoll => Running::P(Poller::spawn(vec![feed], 256).unwrap()),
        Mode::Event | Mode::Adaptive => {
            let m = if let Mode::Event = mode {
                FeedMode::Event
            } else {
                FeedMode::Adaptive(AdaptiveConfig::default())
            };
            let mut d = Driver::new(DriverConfig::default()).unwrap();
            let key = d.register(feed, m).unwrap();
            Running::D(d.spawn().unwrap(), key)
        }
    };
    if pinned {
        pin_to(0);
    }
    let mut next = Instant::now();
    for _ in 0..load.bursts {
        for i in 0..load.burst {
            if i > 0 {
                next += load.gap;
            }
            wait_until(next);
            hca.push(WorkCompletion::new(t0.elapsed().as_nanos() as u64))
                .unwrap();
        }
        next += load.idle;
    }
    // Every completion once: a lost one fails the run instead of hanging it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = lat.lock().unwrap().len();
        if got >= total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{mode:?}: {got} of {total} completions after 60 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let (cpu, arms, spins) = match running {
        Running::P(p) => {
            let s = p.stop().expect("the poller thread did not panic");
            (s.cpu_time, s.feeds[0].stats().arms, (0, 0))
        }
        Running::D(d, key) => {
            let mut s = d.shutdown().unwrap();
            let f = s.take(key).unwrap();
            if std::env::var_os("FEED_BENCH_DEBUG").is_some() {
                eprintln!("{mode:?} {:?} {:?}", f.stats(), s.stats);
            }
            let spins = (s.stats.spin_catches, s.stats.spin_misses);
            (s.cpu_time, f.stats().arms, spins)
        }
    };
    drop(upcalls.teardown());
    let mut l = lat.lock().unwrap().clone();
    assert_eq!(l.len(), total, "{mode:?}: a completion delivered twice");
    if std::env::var_os("FEED_BENCH_DEBUG").is_some() && load.burst > 1 {
        let tenth = load.burst.div_ceil(10);
        let mut sums = [(0u64, 0u64); 10];
        for (i, &x) in l.iter().enumerate() {
            let s = &mut sums[(i % load.burst) / tenth];
            s.0 += x;
            s.1 += 1;
        }
        let late = l
            .iter()
            .enumerate()
            .filter(|&(i, &x)| i % load.burst >= 32 && x > 20_000)
            .count();
        let means: Vec<String> = sums
            .iter()
            .map(|(s, n)| format!("{:.1}", *s as f64 / (*n).max(1) as f64 / 1e3))
            .collect();
        eprintln!(
            "{mode:?} mean µs by tenth of the burst {} ; beyond 32nd waiting > 20 µs: {late}",
            means.join(" ")
        );
    }
    l.sort_unstable();
    let mean = Duration::from_nanos(l.iter().sum::<u64>() / l.len() as u64);
    Result {
        spins,
        mean,
        arms_per_completion: arms as f64 / total as f64,
        cpu_per_completion: cpu / total as u32,
        median: Duration::from_nanos(l[l.len() / 2]),
        p99: Duration::from_nanos(l[l.len() * 99 / 100]),
    }
}

fn loads(loads: &[Load]) {
    const TRIALS: usize = 7;
    for load in loads {
        println!(
            "{}: {} completions; median of {TRIALS} interleaved trials by the figure (CPU/completion x mean latency)",
            load.name,
            load.bursts * load.burst
        );
        println!(
            "{:<10} {:>11} {:>10} {:>10} {:>10} {:>12} {:>11} {:>13}",
            "mode",
            "CPU/compl",
            "mean lat",
            "p50 lat",
            "p99 lat",
            "figure (ns²)",
            "arms/compl",
            "catches/miss"
        );
        let modes = [Mode::BusyPoll, Mode::Event, Mode::Adaptive];
        let mut results: Vec<Vec<(f64, Result)>> = modes.iter().map(|_| Vec::new()).collect();
        // A second event-mode run in every trial: event ÷ event is what the
        // paired ratios look like when the two modes are the same.
        let mut control: Vec<(f64, Result)> = Vec::new();
        let mut wakes = Vec::new();
        let figure = |r: &Result| r.cpu_per_completion.as_nanos() as f64 * r.mean.as_nanos() as f64;
        for _ in 0..TRIALS {
            for (i, mode) in modes.iter().enumerate() {
                let r = load_run(*mode, *load);
                results[i].push((figure(&r), r));
            }
            let r = load_run(Mode::Event, *load);
            control.push((figure(&r), r));
            wakes.extend(idle_wakes(*load));
        }
        let paired = Paired::of(&results[1], &results[2], &control);
        let against_both = best_of_three(&results);
        let floor = wakes
            .iter()
            .map(|w| burst_mean_after_wake(*load, *w))
            .sum::<Duration>()
            / wakes.len() as u32;
        wakes.sort_unstable();
        let mut floor_ratios = Vec::new();
        let us = |d: Duration| d.as_nanos() as f64 / 1e3;
        for (mode, mut rs) in modes.iter().zip(results) {
            let all: Vec<String> = rs.iter().map(|(f, _)| format!("{f:.2e}")).collect();
            rs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (fom, r) = &rs[TRIALS / 2];
            if !matches!(mode, Mode::BusyPoll) {
                floor_ratios.push(format!(
                    "{mode:?} {:.2}",
                    r.mean.as_secs_f64() / floor.as_secs_f64()
                ));
            }
            println!(
                "{:<10} {:>9.2}µs {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>12.3e} {:>11.3} {:>13}   trials: {}",
                format!("{mode:?}"),
                us(r.cpu_per_completion),
                us(r.mean),
                us(r.median),
                us(r.p99),
                fom,
                r.arms_per_completion,
                match r.spins {
                    (0, 0) => "-".to_string(),
                    (c, m) => format!("{:.1}", c as f64 / m.max(1) as f64),
                },
                all.join(" ")
            );
        }
        println!(
            "{:<10} {:>11} {:>8.1}µs   (wake after {:?} idle: p50 {:.1} µs, mean {:.1} µs, {} wakes)",
            "sleep floor",
            "-",
            us(floor),
            load.idle,
            us(wakes[wakes.len() / 2]),
            us(wakes.iter().sum::<Duration>() / wakes.len() as u32),
            wakes.len()
        );
        println!(
            "mean latency ÷ sleep floor (modes that sleep; a spinning adaptive feed may go below it): {}",
            floor_ratios.join(", ")
        );
        paired.print();
        println!("{against_both}");
        println!();
    }
}

/// Adaptive against event mode trial by trial (the runs of one trial are
/// back to back, so they share the machine's state), beside the same ratios
/// for two event-mode runs of each trial: a difference the null ratios also
/// show is noise.
struct Paired {
    /// Per trial: (adaptive ÷ event, event again ÷ event), for the mean
    /// latency, the CPU per completion and the figure.
    mean: Vec<(f64, f64)>,
    cpu: Vec<(f64, f64)>,
    figure: Vec<(f64, f64)>,
}

impl Paired {
    fn of(event: &[(f64, Result)], adaptive: &[(f64, Result)], control: &[(f64, Result)]) -> Self {
        let ratios = |f: &dyn Fn(&(f64, Result)) -> f64| -> Vec<(f64, f64)> {
            event
                .iter()
                .zip(adaptive)
                .zip(control)
                .map(|((e, a), c)| (f(a) / f(e), f(c) / f(e)))
                .collect()
        };
        Paired {
            mean: ratios(&|(_, r)| r.mean.as_secs_f64()),
            cpu: ratios(&|(_, r)| r.cpu_per_completion.as_secs_f64()),
            figure: ratios(&|(f, _)| *f),
        }
    }

    fn print(&self) {
        println!(
            "paired by trial, adaptive ÷ event (null: a second event run ÷ the first, same trial):"
        );
        for (name, pairs) in [
            ("mean lat", &self.mean),
            ("CPU/compl", &self.cpu),
            ("figure", &self.figure),
        ] {
            let ratio: Vec<f64> = pairs.iter().map(|p| p.0).collect();
            let null: Vec<f64> = pairs.iter().map(|p| p.1).collect();
            let (lo, hi) = null
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let above = ratio.iter().filter(|&&r| r > hi).count();
            let below = ratio.iter().filter(|&&r| r < lo).count();
            println!(
                "  {name:<10} median {:.2} [{}]   null median {:.2}, range {lo:.2}–{hi:.2}   trials above the null range {above}, below {below}",
                median(&ratio),
                ratio
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                median(&null),
            );
        }
    }
}

/// Per trial, whether adaptive beat both other modes of the same trial:
/// on the figure, and each on its own weakness (the mean latency against
/// event mode, the CPU per completion against busy-poll).
fn best_of_three(results: &[Vec<(f64, Result)>]) -> String {
    let [busy, event, adaptive] = results else {
        unreachable!("three modes")
    };
    let trials = adaptive.len();
    let count = |won: &dyn Fn(usize) -> bool| (0..trials).filter(|&i| won(i)).count();
    let figure = count(&|i| adaptive[i].0 < busy[i].0 && adaptive[i].0 < event[i].0);
    let latency = count(&|i| adaptive[i].1.mean < event[i].1.mean);
    let cpu = count(&|i| adaptive[i].1.cpu_per_completion < busy[i].1.cpu_per_completion);
    let both = count(&|i| {
        adaptive[i].1.mean < event[i].1.mean
            && adaptive[i].1.cpu_per_completion < busy[i].1.cpu_per_completion
    });
    format!(
        "adaptive against both, same trial: lowest figure in {figure} of {trials}; mean below event's in {latency}, CPU below busy-poll's in {cpu}, both in {both}"
    )
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The wake latencies behind the load's sleep floor: the thread that runs
/// the load's timing wakes a thread blocked on an eventfd read after each
/// of the load's idle periods (`bursts` of them, at most 300), on the CPUs
/// the load's threads run on.
fn idle_wakes(load: Load) -> Vec<Duration> {
    use rustix::event::{EventfdFlags, eventfd};
    use std::sync::atomic::{AtomicU64, Ordering};
    let efd = Arc::new(eventfd(0, EventfdFlags::CLOEXEC).unwrap());
    // When the last wake was raised, in ns since `t0` (0: taken).
    let raised = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let n = load.bursts.min(300);
    let pinned = is_pinned();
    let sleeper = {
        let (efd, raised) = (efd.clone(), raised.clone());
        std::thread::spawn(move || {
            if pinned {
                pin_to(1);
            }
            let mut buf = [0u8; 8];
            (0..n)
                .map(|_| {
                    rustix::io::read(&*efd, &mut buf).unwrap();
                    let now = t0.elapsed().as_nanos() as u64;
                    // Acquire: pairs with the waker's release, so the stamp
                    // read is the one raised before the write.
                    let at = raised.swap(0, Ordering::Acquire);
                    Duration::from_nanos(now - at)
                })
                .collect::<Vec<_>>()
        })
    };
    if pinned {
        pin_to(0);
    }
    let mut next = Instant::now();
    for _ in 0..n {
        next += load.idle;
        wait_until(next);
        // The sleeper has taken the previous wake (it is blocked again, or
        // about to be): a wake raised before that would not find it asleep.
        while raised.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
        raised.store(t0.elapsed().as_nanos() as u64, Ordering::Release);
        rustix::io::write(&*efd, &1u64.to_ne_bytes()).unwrap();
    }
    sleeper.join().unwrap()
}

/// The mean latency of a burst whose first completion waits `wake` and
/// whose later ones, `gap` apart, wait for what is left of it (the rest of
/// the burst at zero).
fn burst_mean_after_wake(load: Load, wake: Duration) -> Duration {
    let mut sum = Duration::ZERO;
    for k in 0..load.burst as u32 {
        match wake.checked_sub(load.gap * k) {
            Some(left) if !left.is_zero() => sum += left,
            _ => break,
        }
    }
    sum / load.burst as u32
}

fn is_pinned() -> bool {
    !std::env::args().any(|a| a == "--unpinned")
}

/// Run the calling thread on `cpu` only.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET and
    // sched_setaffinity get a live local of the right size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!(
                "sched_setaffinity({cpu}): {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// With `--rt`, run every thread of the benchmark SCHED_FIFO (threads
/// inherit it), so that other load on the machine does not preempt the
/// producer or the feeding thread in the middle of a burst. Each trial
/// stays well under a second, so a spinning busy-poll thread does not hit
/// the kernel's real-time throttling (950 ms per second by default).
fn maybe_realtime() {
    if std::env::args().any(|a| a == "--rt") {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: sets this thread's policy; `param` is a live local.
        let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
        if r != 0 {
            eprintln!("SCHED_FIFO refused ({})", std::io::Error::last_os_error());
        } else {
            println!("(all threads SCHED_FIFO priority 1)");
        }
    }
}

fn main() {
    maybe_realtime();
    match std::env::args().nth(1).as_deref() {
        Some("throughput") => throughput(),
        Some("bursty") => loads(&[BURSTY, SHORT_BURSTS]),
        Some("steady") => loads(&[STEADY_FAST, STEADY_SLOW]),
        Some("loads") => loads(&[BURSTY, SHORT_BURSTS, STEADY_FAST, STEADY_SLOW]),
        _ => {
            throughput();
            loads(&[BURSTY, SHORT_BURSTS, STEADY_FAST, STEADY_SLOW]);
        }
    }
}
