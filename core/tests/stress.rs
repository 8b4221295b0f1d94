//! Exactly-once stress: several posters with sequence numbers, one consumer
//! that switches at random among every way to consume (dequeue, batch, arm +
//! blocking wait with thresholds, async recv and Stream, eventfd + poll,
//! SingleInstance (`Fn` and `FnMut`) and ManyInstances upcalls, and resizes),
//! on a small ring so that overflow, backpressure and wrap-around happen all
//! the time.
//!
//! Checks: every event delivered exactly once; FIFO per poster wherever
//! delivery is serialized; at most one upcall at a time under SingleInstance;
//! posts refused as full and retried are never reported as lost; the EVD's counters add up.
//! A watchdog fails the test (instead of hanging it) if delivery stops making
//! progress: that is how a lost wakeup shows.
//!
//! Size: `EVD_STRESS_EVENTS` events per poster (default 200 000);
//! `EVD_STRESS_SEED` to replay a run.
//!
//! Also here, the room tests too long for Miri: many posters blocked on a
//! tiny ring, posters and a consumer that stops and starts, and the `Sink`
//! through a two-slot ring.

mod common;
use common::{Ledger, Rng, Watchdog, env_u64, eventually, post_retry};
use evd::{ArmStatus, Invoke, Overflow, TryDequeueError, UpcallPolicy, WaitError};
use futures::executor::block_on;
use futures::{SinkExt, StreamExt};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const POSTERS: u64 = 3;
const SEQ_BITS: u32 = 40;

/// Exactly-once and FIFO bookkeeping, shared with upcall handlers.
struct Checker {
    per_poster: u64,
    /// Exactly once: one entry per (poster, sequence number).
    seen: Ledger,
    /// Next expected sequence number per poster (serialized delivery only).
    next: Vec<AtomicU64>,
    /// Highest sequence number seen per poster (ManyInstances phases).
    max_seen: Vec<AtomicU64>,
    delivered: AtomicU64,
    overflow_reported: AtomicU64,
    in_upcall: AtomicUsize,
    upcall_calls: AtomicU64,
}

impl Checker {
    fn new(per_poster: u64) -> Self {
        Checker {
            per_poster,
            seen: Ledger::new(POSTERS * per_poster),
            next: (0..POSTERS).map(|_| AtomicU64::new(0)).collect(),
            max_seen: (0..POSTERS).map(|_| AtomicU64::new(0)).collect(),
            delivered: AtomicU64::new(0),
            overflow_reported: AtomicU64::new(0),
            in_upcall: AtomicUsize::new(0),
            upcall_calls: AtomicU64::new(0),
        }
    }

    /// Record one delivered event; `serialized` checks FIFO per poster.
    fn record(&self, ev: u64, serialized: bool) {
        let (p, seq) = (ev >> SEQ_BITS, ev & ((1 << SEQ_BITS) - 1));
        assert!(
            p < POSTERS && seq < self.per_poster,
            "garbage event {ev:#x}"
        );
        self.seen.record(p * self.per_poster + seq);
        if serialized {
            let expected = self.next[p as usize].load(Relaxed);
            assert_eq!(seq, expected, "poster {p}: FIFO broken");
            self.next[p as usize].store(seq + 1, Relaxed);
        }
        self.max_seen[p as usize].fetch_max(seq + 1, Relaxed);
        self.delivered.fetch_add(1, Release);
    }

    fn record_item(&self, item: Result<u64, Overflow>, serialized: bool) {
        match item {
            Ok(ev) => self.record(ev, serialized),
            Err(o) => {
                self.overflow_reported.fetch_add(o.lost, Relaxed);
            }
        }
    }

    /// One upcall's delivery of `item`: fails with `overlap` if another
    /// upcall runs at the same time where delivery is `serialized`, runs
    /// `inside` (the handler's own work), counts the call and records the item.
    fn upcall(
        &self,
        item: Result<u64, Overflow>,
        serialized: bool,
        overlap: &str,
        inside: impl FnOnce(),
    ) {
        let concurrent = self.in_upcall.fetch_add(1, AcqRel);
        if serialized {
            assert_eq!(concurrent, 0, "{overlap}");
        }
        inside();
        self.upcall_calls.fetch_add(1, Relaxed);
        self.record_item(item, serialized);
        self.in_upcall.fetch_sub(1, AcqRel);
    }

    /// After a phase whose deliveries may overlap, FIFO resumes after the
    /// highest sequence number seen (dequeues were FIFO even if handlers
    /// finished out of order).
    fn resync(&self) {
        for p in 0..POSTERS as usize {
            self.next[p].store(self.max_seen[p].load(Relaxed), Relaxed);
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Dequeue,
    Batch,
    ArmWait,
    Async,
    Stream,
    EventFd,
    Upcall(UpcallPolicy, Invoke),
    /// SingleInstance with an `FnMut` handler that also keeps plain state.
    UpcallMut(Invoke),
    Resize,
}

/// An `FnMut` handler's plain (non-atomic) call count, stored out when the
/// handler is dropped; two unordered calls would be a data race on it
/// (`scripts/tsan` runs this test).
struct PlainCount {
    calls: u64,
    out: Arc<AtomicU64>,
}

impl PlainCount {
    /// Count a call (a method, so that the closure captures the whole
    /// counter and its `Drop`, not a copy of the field).
    fn bump(&mut self) {
        self.calls += 1;
    }
}

impl Drop for PlainCount {
    fn drop(&mut self) {
        self.out.store(self.calls, Release);
    }
}

fn pick(rng: &mut Rng) -> Mode {
    match rng.below(12) {
        0 => Mode::Dequeue,
        1 => Mode::Batch,
        2 => Mode::ArmWait,
        3 => Mode::Async,
        4 => Mode::Stream,
        5 => Mode::EventFd,
        6 => Mode::Upcall(UpcallPolicy::SingleInstance, Invoke::Any),
        7 => Mode::Upcall(UpcallPolicy::SingleInstance, Invoke::New),
        8 => Mode::Upcall(UpcallPolicy::ManyInstances, Invoke::Any),
        9 => Mode::UpcallMut(Invoke::Any),
        10 => Mode::UpcallMut(Invoke::New),
        _ => Mode::Resize,
    }
}

/// Consume up to `budget` events in `mode`; false once the stream ended.
fn run_phase(
    consumer: evd::Consumer<u64>,
    mode: Mode,
    budget: u64,
    rng: &mut Rng,
    ck: &Arc<Checker>,
    posters_done: &AtomicBool,
) -> (evd::Consumer<u64>, bool) {
    let mut consumer = consumer;
    let start = ck.delivered.load(Acquire);
    let done = |ck: &Checker| ck.delivered.load(Acquire) - start >= budget;
    // Upcalls run on the posting threads; this thread only waits for them to
    // deliver the budget, or for the posters to finish (with Invoke::New
    // nothing may start once they stop), then tears them down.
    let teardown_when_served = |upcalls: evd::Upcalls<u64>| {
        while !done(ck) && !posters_done.load(Acquire) {
            std::thread::yield_now();
        }
        let consumer = upcalls.teardown();
        assert_eq!(consumer.query().upcalls_in_flight, 0);
        consumer
    };
    let mut open = true;
    match mode {
        Mode::Dequeue => {
            while !done(ck) && open {
                match consumer.try_dequeue() {
                    Ok(ev) => ck.record(ev, true),
                    Err(TryDequeueError::Overflow(o)) => ck.record_item(Err(o), true),
                    Err(TryDequeueError::Closed) => open = false,
                    Err(TryDequeueError::Empty) => std::hint::spin_loop(),
                }
            }
        }
        Mode::Batch => {
            let mut buf = Vec::with_capacity(64);
            while !done(ck) && open {
                match consumer.dequeue_batch(&mut buf, 1 + rng.below(64) as usize) {
                    Ok(_) => buf.drain(..).for_each(|ev| ck.record(ev, true)),
                    Err(TryDequeueError::Overflow(o)) => ck.record_item(Err(o), true),
                    Err(TryDequeueError::Closed) => open = false,
                    Err(TryDequeueError::Empty) => unreachable!("batch reports empty as Ok(0)"),
                }
            }
        }
        Mode::ArmWait => {
            consumer.set_spin_budget(
                [
                    Duration::ZERO,
                    evd::DEFAULT_SPIN_BUDGET,
                    Duration::from_micros(20),
                ][rng.below(3) as usize],
            );
            while !done(ck) && open {
                match consumer.try_dequeue() {
                    Ok(ev) => ck.record(ev, true),
                    Err(TryDequeueError::Overflow(o)) => ck.record_item(Err(o), true),
                    Err(TryDequeueError::Closed) => open = false,
                    Err(TryDequeueError::Empty) => {
                        let cap = consumer.query().capacity as u64;
                        let threshold = 1 + rng.below(4.min(cap)) as usize;
                        match consumer.wait(threshold, None) {
                            Ok(n) => assert!(n >= threshold),
                            Err(WaitError::Closed { .. }) => {}
                            Err(WaitError::Overflow(o)) => ck.record_item(Err(o), true),
                            Err(e) => panic!("wait: {e}"),
                        }
                    }
                }
            }
        }
        Mode::Async => futures::executor::block_on(async {
            while !done(ck) && open {
                match consumer.recv().await {
                    Ok(ev) => ck.record(ev, true),
                    Err(evd::RecvError::Overflow(o)) => ck.record_item(Err(o), true),
                    Err(evd::RecvError::Closed) => open = false,
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }),
        Mode::Stream => futures::executor::block_on(async {
            while !done(ck) && open {
                match consumer.next().await {
                    Some(item) => ck.record_item(item, true),
                    None => open = false,
                }
            }
        }),
        Mode::EventFd => {
            let fd = consumer.notify_fd().expect("eventfd");
            while !done(ck) && open {
                match consumer.try_dequeue() {
                    Ok(ev) => ck.record(ev, true),
                    Err(TryDequeueError::Overflow(o)) => ck.record_item(Err(o), true),
                    Err(TryDequeueError::Closed) => open = false,
                    Err(TryDequeueError::Empty) => match consumer.arm() {
                        ArmStatus::Armed => {
                            let mut fds = [rustix::event::PollFd::new(
                                &fd,
                                rustix::event::PollFlags::IN,
                            )];
                            rustix::event::poll(&mut fds, None).expect("poll");
                            fd.acknowledge().expect("eventfd read");
                        }
                        ArmStatus::Pending => {}
                        ArmStatus::Closed => open = false,
                    },
                }
            }
        }
        Mode::Upcall(policy, invoke) => {
            let serialized = policy == UpcallPolicy::SingleInstance;
            let h = ck.clone();
            let upcalls = consumer.into_upcalls(policy, invoke, move |item, _more| {
                h.upcall(
                    item,
                    serialized,
                    "two upcalls at once under SingleInstance",
                    || {},
                );
            });
            consumer = teardown_when_served(upcalls);
            if !serialized {
                ck.resync();
            }
        }
        Mode::UpcallMut(invoke) => {
            let h = ck.clone();
            let calls_before = ck.upcall_calls.load(Relaxed);
            let out = Arc::new(AtomicU64::new(u64::MAX));
            let mut plain = PlainCount {
                calls: 0,
                out: out.clone(),
            };
            let upcalls = consumer.into_upcalls_mut(invoke, move |item, _more| {
                h.upcall(item, true, "two FnMut upcalls at once", || plain.bump());
            });
            consumer = teardown_when_served(upcalls);
            assert_eq!(
                out.load(Acquire),
                ck.upcall_calls.load(Relaxed) - calls_before,
                "teardown dropped the FnMut handler, whose plain count saw every call"
            );
        }
        Mode::Resize => {
            let cap = 1usize << (2 + rng.below(7));
            match consumer.resize(cap) {
                Ok(c) => assert_eq!(c, cap),
                Err(evd::ResizeError::TooSmall { queued, capacity }) => assert!(queued > capacity),
                Err(e) => panic!("resize: {e}"),
            }
        }
    }
    (consumer, open)
}

#[test]
fn exactly_once_across_all_consumer_modes() {
    let per_poster = env_u64("EVD_STRESS_EVENTS", 200_000);
    let seed = env_u64("EVD_STRESS_SEED", 0x5eed ^ std::process::id() as u64) | 1;
    println!("EVD_STRESS_SEED={seed} EVD_STRESS_EVENTS={per_poster}");
    let mut rng = Rng(seed);
    let (poster, consumer) = evd::bounded::<u64>(16).unwrap();
    let ck = Arc::new(Checker::new(per_poster));
    let refused = Arc::new(AtomicU64::new(0));
    let posters_done = Arc::new(AtomicBool::new(false));
    let finished_posters = Arc::new(AtomicU64::new(0));

    let producers: Vec<_> = (0..POSTERS)
        .map(|p| {
            let poster = poster.clone();
            let refused = refused.clone();
            let (finished_posters, posters_done) = (finished_posters.clone(), posters_done.clone());
            std::thread::spawn(move || {
                // Poster 0 posts in batches of 1..=8 (post_batch), the others
                // one at a time (post).
                let mut batch = Vec::with_capacity(8);
                let mut seq = 0;
                while seq < per_poster {
                    // Leave the consumer thread some CPU on a 2-core machine,
                    // or upcall phases (which run on these threads) deliver
                    // nearly everything.
                    if seq % 256 == 255 {
                        std::thread::yield_now();
                    }
                    if p == 0 {
                        let n = (1 + seq % 8).min(per_poster - seq);
                        batch.extend((seq..seq + n).map(|q| (p << SEQ_BITS) | q));
                        seq += n;
                        while !batch.is_empty() {
                            match poster.post_batch(&mut batch) {
                                Ok(_) => {}
                                Err(evd::BatchPostError::Full) => {
                                    refused.fetch_add(1, Relaxed);
                                    std::thread::yield_now();
                                }
                                Err(evd::BatchPostError::Closed) => {
                                    panic!("closed under a live poster")
                                }
                            }
                        }
                        continue;
                    }
                    refused.fetch_add(post_retry(&poster, (p << SEQ_BITS) | seq), Relaxed);
                    seq += 1;
                }
                if finished_posters.fetch_add(1, AcqRel) + 1 == POSTERS {
                    posters_done.store(true, Release);
                }
            })
        })
        .collect();
    drop(poster);

    let status = Arc::new(Mutex::new(String::new()));
    let watchdog = {
        let (ck, status) = (ck.clone(), status.clone());
        Watchdog::watching(
            "delivery".to_string(),
            Duration::from_secs(30),
            move || ck.delivered.load(Relaxed),
            move || format!("consumer phase: {}", status.lock().unwrap()),
        )
    };

    let mut consumer = consumer;
    let mut phases = 0u64;
    let mut per_mode: std::collections::BTreeMap<String, u64> = Default::default();
    let mut open = true;
    while open {
        let mode = pick(&mut rng);
        let budget = 1 + rng.below(500);
        *status.lock().unwrap() = format!("{mode:?} budget {budget} query {:?}", consumer.query());
        let before = ck.delivered.load(Acquire);
        let (c, still_open) = run_phase(consumer, mode, budget, &mut rng, &ck, &posters_done);
        *per_mode.entry(format!("{mode:?}")).or_default() += ck.delivered.load(Acquire) - before;
        consumer = c;
        open = still_open;
        phases += 1;
    }
    for t in producers {
        t.join().unwrap();
    }
    drop(watchdog);

    let total = POSTERS * per_poster;
    assert_eq!(ck.delivered.load(Relaxed), total, "events lost");
    assert!(ck.seen.all_seen(), "some event never arrived");
    let q = consumer.query();
    assert_eq!(q.posted, total);
    assert_eq!(q.dequeued, total);
    assert_eq!(q.len, 0);
    assert!(q.closed);
    assert_eq!(q.lost, 0, "a refused post is not a loss");
    assert_eq!(
        ck.overflow_reported.load(Relaxed),
        0,
        "posts refused as full (and retried) are never reported as lost"
    );
    assert_eq!(q.upcalls, ck.upcall_calls.load(Relaxed), "upcall counter");
    println!(
        "{total} events in {phases} phases; {} refused posts; {} notifications; {} upcalls",
        refused.load(Relaxed),
        q.notifications,
        q.upcalls
    );
    println!("events delivered per consumer mode: {per_mode:?}");
}

/// An `FnMut` handler installed while instances started under ManyInstances
/// are still finishing (ManyInstances, then Disabled, then
/// `set_handler_mut`) is never entered by two threads at once: an instance
/// that read ManyInstances before the switch and then finds the `FnMut`
/// handler calls it with the token kept. Rounds of that switch race posters
/// on two threads; every event still arrives exactly once. (A probe of a
/// narrow window, not a proof: the argument is in `instance::run`.)
#[test]
fn an_fnmut_handler_installed_behind_many_instances_is_never_entered_twice() {
    const POSTERS_HERE: u64 = 2;
    const ROUNDS: u64 = 2000;
    let per_poster = env_u64("EVD_STRESS_EVENTS", 200_000).min(100_000);
    let (poster, consumer) = evd::bounded::<u64>(16).unwrap();
    let seen: Arc<Vec<AtomicU8>> = Arc::new(
        (0..POSTERS_HERE * per_poster)
            .map(|_| AtomicU8::new(0))
            .collect(),
    );
    let record = {
        let seen = seen.clone();
        move |item: Result<u64, Overflow>| {
            let ev = item.expect("no lossy posts");
            let i = (ev >> SEQ_BITS) * per_poster + (ev & ((1 << SEQ_BITS) - 1));
            assert_eq!(seen[i as usize].swap(1, Relaxed), 0, "event {ev:#x} twice");
        }
    };
    let inside_mut = Arc::new(AtomicBool::new(false));
    // Calls of FnMut handlers, counted by an atomic and by each handler's
    // plain count (stored out when it is dropped).
    let mut_calls = Arc::new(AtomicU64::new(0));
    let mut plain_counts = Vec::new();
    let shared_handler = {
        let record = record.clone();
        move |item: Result<u64, Overflow>, _: bool| record(item)
    };
    let mut up = consumer.into_upcalls(
        UpcallPolicy::ManyInstances,
        Invoke::Any,
        shared_handler.clone(),
    );
    // Posters stop after `per_poster` events or when the rounds are done,
    // and say how many they posted.
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..POSTERS_HERE)
        .map(|p| {
            let (poster, stop) = (poster.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seq = 0;
                while seq < per_poster && !stop.load(Relaxed) {
                    // Leave the switching thread some CPU on a 2-core machine.
                    if seq % 64 == 63 {
                        std::thread::yield_now();
                    }
                    let mut ev = (p << SEQ_BITS) | seq;
                    while let Err(e) = poster.post(ev) {
                        ev = e.into_inner();
                        std::thread::yield_now();
                    }
                    seq += 1;
                }
                seq
            })
        })
        .collect();
    drop(poster);
    let mut rounds = 0u64;
    while rounds < ROUNDS && !producers.iter().all(|t| t.is_finished()) {
        up.set_policy(UpcallPolicy::Disabled, Invoke::New).unwrap();
        let (record, inside, calls) = (record.clone(), inside_mut.clone(), mut_calls.clone());
        let mut plain = PlainCount {
            calls: 0,
            out: Arc::new(AtomicU64::new(u64::MAX)),
        };
        plain_counts.push(plain.out.clone());
        up.set_handler_mut(move |item, _| {
            assert!(
                !inside.swap(true, Acquire),
                "an FnMut handler entered twice"
            );
            plain.bump();
            calls.fetch_add(1, Relaxed);
            record(item);
            inside.store(false, Release);
        })
        .unwrap();
        assert_eq!(
            up.set_policy(UpcallPolicy::ManyInstances, Invoke::Any),
            Err(evd::PolicyError::FnMutHandler)
        );
        // Waits for the ManyInstances-era instances, then lets SingleInstance
        // upcalls run the FnMut handler for a moment.
        up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
            .unwrap();
        std::thread::yield_now();
        up.set_handler(shared_handler.clone());
        // The FnMut handler is dropped once no upcall runs it: the last
        // instance that loaded it may still be calling it here.
        up.set_policy(UpcallPolicy::ManyInstances, Invoke::Any)
            .unwrap();
        std::thread::yield_now();
        rounds += 1;
    }
    stop.store(true, Relaxed);
    let posted: Vec<u64> = producers.into_iter().map(|t| t.join().unwrap()).collect();
    let mut consumer = up.teardown();
    while let Ok(ev) = consumer.try_dequeue() {
        record(Ok(ev));
    }
    for (p, &n) in posted.iter().enumerate() {
        let mine = &seen[p * per_poster as usize..][..per_poster as usize];
        assert!(
            mine[..n as usize].iter().all(|s| s.load(Relaxed) == 1),
            "poster {p}: some event never arrived"
        );
        assert!(mine[n as usize..].iter().all(|s| s.load(Relaxed) == 0));
    }
    // Every FnMut handler has been dropped (replaced, then no upcall left
    // that loaded it), and their plain counts add up to their calls.
    let plain: u64 = plain_counts.iter().map(|c| c.load(Acquire)).sum();
    assert_eq!(plain, mut_calls.load(Relaxed));
    println!(
        "{rounds} rounds; {posted:?} events posted; {} FnMut calls",
        mut_calls.load(Relaxed)
    );
}

#[test]
fn many_blocked_posters_lose_nothing_and_report_no_overflow() {
    const POSTERS: u64 = 6;
    const EACH: u64 = 3_000;
    let (poster, mut consumer) = evd::bounded::<u64>(4).unwrap();
    let threads: Vec<_> = (0..POSTERS)
        .map(|id| {
            let p = poster.clone();
            std::thread::spawn(move || {
                for seq in 0..EACH {
                    p.post_blocking(id << 32 | seq).unwrap();
                }
            })
        })
        .collect();
    drop(poster);
    let mut next = vec![0u64; POSTERS as usize];
    // Every dequeue, blocking or not, ends in the same end of stream; any
    // Overflow report would fail this unwrap-free match.
    loop {
        match consumer.dequeue() {
            Ok(v) => {
                let (id, seq) = ((v >> 32) as usize, v & 0xffff_ffff);
                assert_eq!(seq, next[id], "FIFO per poster, no loss, no duplicate");
                next[id] += 1;
            }
            Err(evd::DequeueError::Closed) => break,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert!(next.iter().all(|&n| n == EACH));
    let q = consumer.query();
    assert_eq!((q.lost, q.dequeued), (0, POSTERS * EACH));
    assert!(!q.room_wanted);
}

#[test]
fn waiting_posters_and_a_consumer_that_stops_and_starts_lose_no_wakeup() {
    // Many short rounds: a one-slot ring, a poster blocking on every post,
    // a consumer that dequeues with and without blocking. A lost room wakeup
    // leaves the poster asleep with a free slot: the consumer's blocking
    // dequeue then never returns and the watchdog fails the test.
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new(
        "a blocking poster and a stop-start consumer",
        progress.clone(),
    );
    for round in 0..300u32 {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        let t = std::thread::spawn(move || {
            for i in 0..20 {
                poster.post_blocking(i).unwrap();
            }
        });
        for i in 0..20 {
            let v = if (i + round) % 3 == 0 {
                let mut v = None;
                eventually("an event arrives", || {
                    v = consumer.try_dequeue().ok();
                    v.is_some()
                });
                v.unwrap()
            } else {
                consumer.dequeue().unwrap()
            };
            assert_eq!(v, i);
            progress.fetch_add(1, Relaxed);
        }
        t.join().unwrap();
    }
}

#[test]
fn the_sink_sends_everything_in_order_through_a_tiny_ring() {
    let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
    let producers: Vec<_> = (0..2u32)
        .map(|id| {
            let mut sink = poster.clone().into_sink();
            std::thread::spawn(move || {
                block_on(async {
                    for seq in 0..2_000 {
                        sink.send(id << 16 | seq).await.unwrap();
                    }
                    sink.close().await.unwrap();
                    assert!(sink.poster().is_none());
                })
            })
        })
        .collect();
    drop(poster);
    let mut next = [0u32; 2];
    for v in consumer {
        let v = v.expect("no loss");
        let (id, seq) = ((v >> 16) as usize, v & 0xffff);
        assert_eq!(seq, next[id]);
        next[id] += 1;
    }
    for t in producers {
        t.join().unwrap();
    }
    assert_eq!(next, [2_000, 2_000]);
}
