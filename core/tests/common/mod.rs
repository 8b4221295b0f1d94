//! What the integration tests share: a seeded RNG and the environment knobs
//! that size a run, a watchdog that turns a hang into a failure, ledgers for
//! exactly-once accounting, and the small drain and post helpers.
//!
//! Each test binary (and the soak example) includes this module and uses only
//! part of it, hence `dead_code` is allowed here and nowhere else.
#![allow(dead_code)]

use evd::{
    ArmStatus, Cno, CnoHandle, Consumer, Lossy, Overflow, PostError, Poster, TryDequeueError,
    WaitError,
};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ---- the environment and the RNG ------------------------------------------

/// The number in the environment variable `name`, or `default` if it is
/// unset or not a number.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One step of splitmix64: spreads any seed (zero included) over 64 bits.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xorshift64*: reproducible choices from a seed without a rand dependency.
/// Its state must never be zero: seed it with an odd number or with
/// [`Rng::new`].
pub struct Rng(pub u64);

impl Rng {
    /// Seeded through splitmix64, so any seed gives a nonzero state.
    pub fn new(seed: u64) -> Self {
        let mut s = seed;
        Rng(splitmix64(&mut s) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// In `0..n` (the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

// ---- hangs become failures ------------------------------------------------

/// How long a threaded test may make no progress before a [`Watchdog`]
/// calls it a hang (a lost wakeup, or a barrier that never ends). Not a
/// timing assertion: any machine, however busy, progresses long before.
pub const STALL_LIMIT: Duration = Duration::from_secs(60);

/// Fails the process (a hung test would hang the harness) if its progress
/// count stays put for its stall limit, printing what it watches and the
/// status the test gives; stops when dropped.
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watches a counter the test bumps as it progresses, for [`STALL_LIMIT`].
    pub fn new(what: &'static str, progress: Arc<AtomicU64>) -> Self {
        Self::watching(
            what.to_string(),
            STALL_LIMIT,
            move || progress.load(Relaxed),
            String::new,
        )
    }

    /// Watches `progress()`; on a stall prints `what` and `status()`.
    pub fn watching(
        what: String,
        limit: Duration,
        progress: impl Fn() -> u64 + Send + 'static,
        status: impl Fn() -> String + Send + 'static,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut last = (progress(), Instant::now());
            while !s.load(Acquire) {
                std::thread::park_timeout(Duration::from_millis(200));
                let now = progress();
                if now != last.0 {
                    last = (now, Instant::now());
                } else if last.1.elapsed() > limit {
                    // Straight to the process's stderr: the harness captures
                    // eprintln!, and its capture dies with exit().
                    use std::io::Write;
                    let _ = writeln!(
                        std::io::stderr(),
                        "watchdog: {what}: no progress for {limit:?} at {now}; {}",
                        status()
                    );
                    std::process::exit(101);
                }
            }
        });
        Watchdog {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Wait (yielding) until `cond` holds, or fail after a minute: a lost
/// wakeup becomes a failure, not a hang. Not a timing assertion: any
/// machine, however busy, meets the condition long before.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < give_up, "never happened: {what}");
        std::thread::yield_now();
    }
}

// ---- ledgers --------------------------------------------------------------

/// Exactly-once accounting of events numbered `0..len`: each may be
/// recorded once; [`Ledger::all_seen`] says whether every one was.
pub struct Ledger {
    bits: Vec<AtomicU64>,
    len: u64,
}

impl Ledger {
    pub fn new(len: u64) -> Self {
        Ledger {
            bits: (0..len.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            len,
        }
    }

    /// Records event `i`; fails the test if it is out of range or was
    /// recorded before.
    pub fn record(&self, i: u64) {
        assert!(i < self.len, "invented event {i} (of {})", self.len);
        let bit = 1 << (i % 64);
        let old = self.bits[(i / 64) as usize].fetch_or(bit, Relaxed);
        assert_eq!(old & bit, 0, "event {i} delivered twice");
    }

    /// Whether every event `0..len` was recorded.
    pub fn all_seen(&self) -> bool {
        (0..self.len).all(|i| self.bits[(i / 64) as usize].load(Relaxed) & (1 << (i % 64)) != 0)
    }
}

/// Counts its drops; panics in `drop` if asked to.
pub struct Tracked {
    drops: Arc<AtomicUsize>,
    panic_on_drop: bool,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.panic_on_drop {
            panic!("a panicking destructor");
        }
    }
}

pub fn tracked(drops: &Arc<AtomicUsize>, panic_on_drop: bool) -> Tracked {
    Tracked {
        drops: drops.clone(),
        panic_on_drop,
    }
}

/// What an `FnMut` handler kept in plain (non-atomic) state, sent out when
/// the handler is dropped (by a teardown or a replacement).
pub struct Tally {
    /// Every event, in the order the handler saw it.
    pub seen: Vec<u32>,
    /// Handler calls that had `more` set.
    pub with_more: usize,
    out: std::sync::mpsc::Sender<(Vec<u32>, usize)>,
}

impl Drop for Tally {
    fn drop(&mut self) {
        let _ = self
            .out
            .send((std::mem::take(&mut self.seen), self.with_more));
    }
}

pub fn tally() -> (Tally, std::sync::mpsc::Receiver<(Vec<u32>, usize)>) {
    let (out, tallied) = std::sync::mpsc::channel();
    let t = Tally {
        seen: Vec::new(),
        with_more: 0,
        out,
    };
    (t, tallied)
}

/// A vector shared between a test and the handlers it installs.
pub type SharedVec<T> = Arc<Mutex<Vec<T>>>;

/// An empty vector shared with a handler: two handles to it, one to move
/// into the handler and one to look at.
pub fn shared_vec<T>() -> (SharedVec<T>, SharedVec<T>) {
    let v = Arc::new(Mutex::new(Vec::new()));
    (v.clone(), v)
}

// ---- draining and posting -------------------------------------------------

pub fn pair<T: Send>(capacity: usize) -> (Poster<T>, Consumer<T>) {
    evd::bounded(capacity).expect("valid capacity")
}

/// Two CNOs of 4 places: one an EVD is bound to, one it moves to.
pub fn two_cnos() -> [Cno; 2] {
    [Cno::new(4).unwrap(), Cno::new(4).unwrap()]
}

/// A new EVD of 4 slots bound to `cno` with `key`.
pub fn bound<T: Send>(cno: &impl AsRef<CnoHandle>, key: u64) -> (Poster<T>, Consumer<T>) {
    let (p, mut c) = pair(4);
    c.bind_cno(cno, key).unwrap();
    (p, c)
}

/// A new EVD of 4 slots bound to `cno` with `key` and enabled (it is empty,
/// so the enable arms).
pub fn enabled<T: Send>(cno: &impl AsRef<CnoHandle>, key: u64) -> (Poster<T>, Consumer<T>) {
    enabled_with_capacity(cno, key, 4)
}

/// [`enabled`], with `capacity` slots.
pub fn enabled_with_capacity<T: Send>(
    cno: &impl AsRef<CnoHandle>,
    key: u64,
    capacity: usize,
) -> (Poster<T>, Consumer<T>) {
    let (p, mut c) = pair(capacity);
    c.bind_cno(cno, key).unwrap();
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    (p, c)
}

/// Everything queued now, and whether the drain ended at the end of stream.
pub fn drain<T>(c: &mut Consumer<T>) -> (Vec<T>, bool) {
    let mut got = Vec::new();
    loop {
        match c.try_dequeue() {
            Ok(v) => got.push(v),
            Err(TryDequeueError::Empty) => return (got, false),
            Err(TryDequeueError::Closed) => return (got, true),
            Err(TryDequeueError::Overflow(o)) => panic!("unexpected loss report {o:?}"),
        }
    }
}

/// Drains what is queued now, checking that it continues the sequence
/// `*next, *next + 1, ...` and publishing the count to `progress`; returns
/// whether the drain reached the end of stream.
pub fn drain_in_order<T: Into<u64>>(
    c: &mut Consumer<T>,
    next: &mut u64,
    progress: &AtomicU64,
) -> bool {
    let (got, closed) = drain(c);
    for ev in got {
        assert_eq!(ev.into(), *next, "exactly once, in order");
        *next += 1;
    }
    progress.store(*next, Relaxed);
    closed
}

/// The keys ready now.
pub fn ready_keys(cno: &mut Cno) -> Vec<u64> {
    let mut keys = Vec::new();
    let n = cno.try_ready(&mut keys);
    assert_eq!(n, keys.len(), "try_ready returns how many it appended");
    keys
}

/// A thread that posts `0..n` in order ([`post_retry`]), then drops
/// `poster` (closing the EVD if it was the last).
pub fn post_0_to(poster: Poster<u32>, n: u32) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for i in 0..n {
            post_retry(&poster, i);
        }
    })
}

/// `posters` threads, poster `id` posting `id * per + i` for each `i` in
/// `0..per` in order ([`post_retry`]), each after waiting at `start` if
/// given.
pub fn spawn_posters(
    poster: &Poster<u32>,
    posters: u32,
    per: u32,
    start: Option<&Arc<Barrier>>,
) -> Vec<JoinHandle<()>> {
    (0..posters)
        .map(|id| {
            let (p, start) = (poster.clone(), start.cloned());
            std::thread::spawn(move || {
                if let Some(b) = start {
                    b.wait();
                }
                for i in 0..per {
                    post_retry(&p, id * per + i);
                }
            })
        })
        .collect()
}

/// `posters` threads, poster `p` posting `p << 32 | i` for each `i` in
/// `0..per` in order ([`post_retry`]): the high half of an event names its
/// poster, the low half counts.
pub fn spawn_tagged_posters(poster: &Poster<u64>, posters: u64, per: u64) -> Vec<JoinHandle<()>> {
    (0..posters)
        .map(|p| {
            let poster = poster.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    post_retry(&poster, (p << 32) | i);
                }
            })
        })
        .collect()
}

/// Checks that `ev`, from [`spawn_tagged_posters`], is the next event of its
/// poster (`next` holds each poster's count so far), and counts it.
#[track_caller]
pub fn next_of_its_poster(next: &mut [u64], ev: u64) {
    let p = (ev >> 32) as usize;
    assert_eq!(
        ev & 0xffff_ffff,
        next[p],
        "exactly once, in order per poster"
    );
    next[p] += 1;
}

/// An empty EVD of `capacity` slots, armed.
pub fn armed_empty(capacity: usize) -> (Poster<u32>, Consumer<u32>) {
    let (poster, mut consumer) = pair(capacity);
    assert_eq!(consumer.arm(), ArmStatus::Armed);
    (poster, consumer)
}

/// A ring of as many slots as `events`, full of them.
pub fn full_ring(events: &[u32]) -> (Poster<u32>, Consumer<u32>) {
    let (poster, consumer) = pair(events.len());
    for &ev in events {
        poster.post(ev).unwrap();
    }
    (poster, consumer)
}

/// A thread that posts `ev` with `post_blocking` (waiting for room).
pub fn post_blocking_on_a_thread(
    poster: &Poster<u32>,
    ev: u32,
) -> JoinHandle<Result<(), PostError<u32>>> {
    let p = poster.clone();
    std::thread::spawn(move || p.post_blocking(ev))
}

/// A lossy post of `ev` that finds the ring full: lost.
#[track_caller]
pub fn lose<T: Send + std::fmt::Debug + PartialEq>(poster: &Poster<T>, ev: T) {
    assert_eq!(poster.post_lossy(ev), Ok(Lossy::Lost));
}

/// On a full ring whose oldest event is `oldest`: a lossy post is lost and
/// reported, then a second one is lost, and the next dequeue is `oldest`,
/// not the second report: reports and events alternate, so a report is left
/// pending behind the events. `ctx` goes into the failure messages.
#[track_caller]
pub fn lose_twice_around_a_report<T: Send + std::fmt::Debug + PartialEq>(
    poster: &Poster<T>,
    consumer: &mut Consumer<T>,
    [first_lost, second_lost]: [T; 2],
    oldest: T,
    ctx: &str,
) {
    assert_eq!(poster.post_lossy(first_lost), Ok(Lossy::Lost), "{ctx}");
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 })),
        "{ctx}"
    );
    assert_eq!(poster.post_lossy(second_lost), Ok(Lossy::Lost), "{ctx}");
    assert_eq!(
        consumer.try_dequeue(),
        Ok(oldest),
        "right after a report, an event: {ctx}"
    );
}

/// The next dequeue is the report of `lost` events lost.
#[track_caller]
pub fn assert_report<T: std::fmt::Debug + PartialEq>(consumer: &mut Consumer<T>, lost: u64) {
    assert_report_in(consumer, lost, "");
}

/// [`assert_report`], with `ctx` in the failure message.
#[track_caller]
pub fn assert_report_in<T: std::fmt::Debug + PartialEq>(
    consumer: &mut Consumer<T>,
    lost: u64,
    ctx: &str,
) {
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost })),
        "{ctx}"
    );
}

/// A wait on a closed and drained EVD ends at once, saying so.
#[track_caller]
pub fn assert_wait_ends<T: Send>(consumer: &mut Consumer<T>) {
    assert_eq!(
        consumer.wait(1, None),
        Err(WaitError::Closed { available: 0 })
    );
}

/// Post, yielding while the ring is full; returns how many times the ring
/// refused it as full.
pub fn post_retry<T: Send>(p: &Poster<T>, mut ev: T) -> u64 {
    let mut refused = 0;
    while let Err(e) = p.post(ev) {
        assert!(!e.is_closed(), "closed under a live poster");
        ev = e.into_inner();
        refused += 1;
        std::thread::yield_now();
    }
    refused
}

// ---- futures polled by hand --------------------------------------------------

/// A waker that counts how often it was woken.
#[derive(Default)]
pub struct Counting(AtomicUsize);

impl std::task::Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

impl Counting {
    /// Wakes so far.
    pub fn wakes(&self) -> usize {
        self.0.load(SeqCst)
    }
}

/// A counting waker and the count behind it.
pub fn counting() -> (Arc<Counting>, std::task::Waker) {
    let c = Arc::new(Counting::default());
    (c.clone(), std::task::Waker::from(c))
}

/// Poll `f` once with `w`.
pub fn poll<F: std::future::Future + Unpin>(
    f: &mut F,
    w: &std::task::Waker,
) -> std::task::Poll<F::Output> {
    std::pin::Pin::new(f).poll(&mut std::task::Context::from_waker(w))
}

/// Poll the pinned `f` once with `w`.
pub fn poll_once<F: std::future::Future>(
    f: std::pin::Pin<&mut F>,
    w: &std::task::Waker,
) -> std::task::Poll<F::Output> {
    f.poll(&mut std::task::Context::from_waker(w))
}

/// A waker whose wake panics.
pub struct Panicking;

impl std::task::Wake for Panicking {
    fn wake(self: Arc<Self>) {
        panic!("a waker that panics");
    }
}

/// Every permit the EVD of `poster` allows taken (owned), a reservation
/// waiting for one polled with `waker`, then the last permit sent from
/// another thread (its send wakes that reservation): true once the send
/// returned, false if it has not within a minute (a deadlock: the
/// sender's thread, the permits and the reservation are then left as they
/// are, as the hung test leaves them).
pub fn send_a_permit_while_every_permit_is_out(
    poster: &Poster<u32>,
    waker: &std::task::Waker,
) -> bool {
    let mut permits: Vec<_> = (0..evd::Permit::<u32>::MAX_OUT)
        .map(|_| poster.clone().try_reserve_owned().ok().unwrap())
        .collect();
    let mut reserving = Box::pin(poster.reserve());
    let mut cx = std::task::Context::from_waker(waker);
    assert!(
        std::future::Future::poll(reserving.as_mut(), &mut cx).is_pending(),
        "every permit is out"
    );
    let last = permits.pop().unwrap();
    let (done, sent) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(last.send(1).is_ok()).unwrap());
    match sent.recv_timeout(Duration::from_secs(60)) {
        Ok(ok) => {
            assert!(ok, "the permit's send");
            true
        }
        Err(_) => {
            std::mem::forget(permits);
            std::mem::forget(reserving);
            false
        }
    }
}
