//! The CNO ([`evd::Cno`], DAT's consumer notification object): one waiter
//! for many EVDs, against the two ways to get there without one.
//!
//! **The systems** ([`CnoSystem`]). Each is a waiter over N EVDs of
//! [`EVD_CAPACITY`] `u64` slots, written once against one small interface
//! (take the ready set; drain an EVD with one `dequeue_batch`; re-enable it)
//! so that every loop below is the same code for all three:
//!
//! * **evd Cno**: every EVD bound to one [`evd::Cno`] (key = its index) and
//!   enabled ([`evd::Consumer::enable_cno`]). The waiter takes the ready
//!   keys ([`evd::Cno::wait`], which spins for the default spin budget,
//!   [`evd::DEFAULT_SPIN_BUDGET`], then parks; [`evd::Cno::try_ready`] when
//!   it must not block), drains each EVD and enables it again.
//! * **epoll**: every EVD's own eventfd ([`evd::Consumer::notify_fd`]) in one
//!   level-triggered epoll set (data = its index), every EVD armed
//!   ([`evd::Consumer::arm`]). The waiter calls `epoll_wait` with a zero
//!   timeout for the same spin budget, then blocks in it; for each ready fd
//!   it acknowledges it (one `read`), drains the EVD and arms it again: the
//!   loop `core/examples/epoll.rs` documents.
//! * **scan CNO**: the illumos way, built here ([`ScanFlag`]): every post is
//!   followed by one `swap` that sets a shared flag, and the poster that set
//!   it `unpark`s the waiter if the waiter sleeps; the waiter takes the flag
//!   (spinning for the same budget, then parking), then calls
//!   `dequeue_batch` on every one of the N EVDs to find the ones with work.
//!   No EVD is armed.
//!
//! In every system an EVD whose re-enable finds events (`Pending`; the scan
//! has no re-enable) is served again after the rest of the ready set, not at
//! once, so one busy EVD cannot hold the waiter.
//!
//! **Wake latency** ([`CnoWakeSystem`]): [`WAKE_EVDS`] EVDs bound to a
//! `Cno`; the harness posts to them in turn, each time only once the
//! waiter's thread is asleep (`S` in `/proc/self/task/TID/stat`, as in
//! [`crate::latency`]); the waiter reads the clock as soon as `Cno::wait`
//! returns the key, then dequeues the event, which carries its post time.
//! Beside it, a direct `wait` on one EVD (no CNO) and the raw park/unpark
//! floor, the same measurements as [`crate::latency`]'s.
//!
//! **Trigger cost** ([`CnoSystem::cycle_ns`]): the cost of one cycle "a post
//! to a random enabled EVD makes it ready, the waiter takes it, drains it and
//! re-enables it", at N = [`TRIGGER_EVDS`] bound EVDs, in ns per cycle,
//! measured two ways ([`Variant`]): on one thread (post, then one pass of the
//! waiter that must not block), and across two threads (a ping-pong: the
//! harness posts, then spins until the waiter, on its own thread, has
//! drained and re-enabled the EVD and acknowledged the event; the next post
//! follows at once, so the waiter is still in its spin budget, awake, unless
//! a thread was descheduled). The EVD of cycle `i` is entry `i` of one
//! pseudo-random sequence, the same for every system.
//!
//! **Throughput and fairness** ([`CnoSystem::run_throughput`]): one waiter
//! serving N = [`THROUGHPUT_EVDS`] EVDs fed by [`THROUGHPUT_POSTERS`] poster
//! threads, with the [`crate::throughput`] harness's start barrier, checksum
//! and CPU samples. Two feeds ([`Feed`]): one event per `post`, and batches
//! of [`SATURATION_BATCH`] per `post_batch` (one reservation), meant to
//! outrun the waiter so that every EVD stays busy (saturation). A poster
//! moves to the next EVD after every post *and every refusal*: a full EVD is
//! skipped, not retried, so an EVD the waiter neglects stays full and
//! receives nothing, and the spread of the events served per EVD over the
//! run ([`RunStats::served_max_over_min`]) measures the waiter's fairness
//! (together with the posters' rotation). Refusals per event say how
//! saturated the run was.
//!
//! **Instructions** ([`CnoInsnKind`]): one thread, one EVD bound and
//! enabled: post, `Cno::try_next`, `try_dequeue`, `enable_cno`, against a
//! plain post and `try_dequeue`, counted by callgrind like
//! [`crate::rearm`]'s. Atomic read-modify-writes per trigger are a design
//! figure (two beyond the post's reservation CAS while the waiter is awake:
//! the slot word's CAS and the ready ring's reservation CAS;
//! `core/src/cno/engine.rs`), not measured: nothing counts them outside the
//! fuzz crate's shuttle builds.

use crate::latency::{now_ns, sleeping_consumer_timed, WakeSystem};
use crate::report::{Role, System};
use crate::throughput::{
    clones, current_cpu, drive, harness, BusyWait, RunStats, Sink, CPU_SAMPLE_EVERY,
};
use crossbeam_utils::{Backoff, CachePadded};
use hdrhistogram::Histogram;
use std::cell::Cell;
use std::hint::black_box;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// The bound-EVD counts of the trigger-cost cases.
pub const TRIGGER_EVDS: [usize; 4] = [1, 16, 256, 1024];
/// The bound-EVD counts of the throughput cases.
pub const THROUGHPUT_EVDS: [usize; 2] = [16, 256];
/// Poster threads of the throughput cases.
pub const THROUGHPUT_POSTERS: usize = 2;
/// Slots of every EVD (a power of two: `dequeue_batch` takes at most this).
pub const EVD_CAPACITY: usize = 64;
/// Events per `post_batch` of the saturated throughput feed.
pub const SATURATION_BATCH: usize = 16;
/// EVDs bound to the `Cno` of the wake latency.
pub const WAKE_EVDS: usize = 16;
/// How long every waiter spins (or polls) before it sleeps: evd's default.
pub const SPIN_BUDGET: Duration = evd::DEFAULT_SPIN_BUDGET;
/// The case of the CNO wake latency.
pub const WAKE_CASE: &str = "cno-wake-latency";
/// The case of the instruction counts.
pub const INSNS_CASE: &str = "cno-insns";
/// The metric of the trigger-cost cases.
pub const CYCLE_METRIC: &str = "ns_per_cycle";
/// The metric of the fairness of a throughput case.
pub const FAIRNESS_METRIC: &str = "served_max_over_min";

/// How long a cross-thread harness waits for the waiter.
const STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The event that ends a cross-thread waiter.
const STOP: u64 = u64::MAX;
/// Length of the pseudo-random EVD sequence of the trigger cases.
const SEQUENCE: usize = 4096;

/// A waiter over many EVDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CnoSystem {
    /// evd's `Cno`: bound, enabled EVDs; `wait`, drain, `enable_cno`.
    EvdCno,
    /// epoll over every EVD's eventfd; `epoll_wait`, acknowledge, drain, `arm`.
    Epoll,
    /// A flag and a park; on a wake, `dequeue_batch` on every EVD.
    Scan,
}

/// Every row is compared with the evd `Cno` row.
impl System for CnoSystem {
    fn name(self) -> &'static str {
        match self {
            CnoSystem::EvdCno => "evd Cno (wait, drain, enable_cno)",
            CnoSystem::Epoll => "epoll over the EVDs' eventfds (arm)",
            CnoSystem::Scan => "scan CNO (flag + park, scan every EVD)",
        }
    }

    fn role(self) -> Role {
        if self == CnoSystem::EvdCno {
            Role::Evd
        } else {
            Role::Peer
        }
    }

    fn baseline(self) -> Option<CnoSystem> {
        Some(CnoSystem::EvdCno)
    }
}

impl CnoSystem {
    /// Every system, evd first.
    pub const ALL: [CnoSystem; 3] = [CnoSystem::EvdCno, CnoSystem::Epoll, CnoSystem::Scan];

    /// N EVDs, each with its poster, made ready for this system's waiter.
    fn fixture(self, n: usize) -> Result<(AnyWaiter, PostSide), String> {
        let mut posters = Vec::with_capacity(n);
        let mut evds = Vec::with_capacity(n);
        for _ in 0..n {
            let (p, c) = evd::bounded::<u64>(EVD_CAPACITY).map_err(|e| e.to_string())?;
            posters.push(p);
            evds.push(c);
        }
        let mut side = PostSide {
            posters: Arc::new(posters),
            scan: None,
        };
        let waiter = match self {
            CnoSystem::EvdCno => {
                let cno = evd::Cno::new(n).map_err(|e| e.to_string())?;
                for (k, c) in evds.iter_mut().enumerate() {
                    c.bind_cno(&cno, k as u64).map_err(|e| e.to_string())?;
                    expect_armed(c.enable_cno().map_err(|e| e.to_string())?)?;
                }
                AnyWaiter::Cno(CnoWaiter {
                    cno,
                    evds,
                    keys: Vec::with_capacity(n),
                })
            }
            CnoSystem::Epoll => {
                use rustix::event::epoll;
                // Two descriptors per EVD: its eventfd, and the duplicate
                // `notify_fd` hands out.
                raise_fd_limit(2 * n as u64 + 64);
                let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
                let mut fds = Vec::with_capacity(n);
                for (k, c) in evds.iter_mut().enumerate() {
                    let fd = c.notify_fd().map_err(|e| format!("notify_fd: {e}"))?;
                    epoll::add(
                        &ep,
                        &fd,
                        epoll::EventData::new_u64(k as u64),
                        epoll::EventFlags::IN,
                    )
                    .map_err(|e| e.to_string())?;
                    expect_armed(c.arm())?;
                    fds.push(fd);
                }
                AnyWaiter::Epoll(EpollWaiter {
                    ep,
                    fds,
                    evds,
                    events: EventBuf(Vec::with_capacity(n)),
                })
            }
            CnoSystem::Scan => {
                let flag = Arc::new(ScanFlag::default());
                side.scan = Some(flag.clone());
                AnyWaiter::Scan(ScanWaiter { flag, evds })
            }
        };
        Ok((waiter, side))
    }

    /// Nanoseconds per trigger cycle at `n` bound EVDs, `variant`, over
    /// cycles run for about `run` after a warm-up of a quarter of that.
    /// Fails unless every event came back once.
    pub fn cycle_ns(self, variant: Variant, n: usize, run: Duration) -> Result<f64, String> {
        let (w, side) = self.fixture(n)?;
        let seq = sequence(n);
        match variant {
            Variant::SingleThread => cycles_single(w, &side, &seq, run),
            Variant::CrossThread => cycles_cross(w, &side, &seq, run),
        }
    }

    /// Move `messages` events from [`THROUGHPUT_POSTERS`] posters over `n`
    /// EVDs to one waiter; fails if an event is lost or duplicated, or an EVD
    /// was never served.
    pub fn run_throughput(self, n: usize, messages: u64, feed: Feed) -> Result<RunStats, String> {
        let (mut w, side) = self.fixture(n)?;
        let mut served = vec![0u64; n];
        let consume = |sink: &mut Sink<'_>| {
            let mut server = Server::new(n);
            loop {
                let done = server.pass(&mut w, false, |k, batch| {
                    if batch.is_empty() {
                        sink.empty();
                    }
                    served[k] += batch.len() as u64;
                    let mut done = false;
                    for &v in batch {
                        done = sink.take(v);
                    }
                    done
                })?;
                if done {
                    return Ok(());
                }
            }
        };
        let mut stats = match feed {
            Feed::Events => {
                // Kept until the waiter is done: the last poster of an EVD
                // to go closes it, and the waiter would find it closed.
                let _open = side.clone();
                let cursors: Vec<Cursor> = clones(side, THROUGHPUT_POSTERS)
                    .into_iter()
                    .enumerate()
                    .map(|(p, side)| Cursor {
                        side,
                        next: Cell::new(p * n / THROUGHPUT_POSTERS),
                    })
                    .collect();
                drive(
                    THROUGHPUT_POSTERS,
                    messages,
                    cursors,
                    |c: &Cursor, p: u64| c.post_next(p),
                    consume,
                )?
            }
            Feed::Batches => drive_batches(&side, messages, consume)?,
        };
        stats.served_max_over_min = Some(max_over_min(&served)?);
        Ok(stats)
    }
}

/// How the throughput posters post.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feed {
    /// One event per `post`, through the [`crate::throughput`] harness; a
    /// refused post is retried on the next EVD.
    Events,
    /// Batches of up to [`SATURATION_BATCH`] events per `post_batch` (one
    /// reservation), what does not fit going to the next EVD: the posters
    /// outrun any waiter, so the run is saturated and its events/s are the
    /// waiter's.
    Batches,
}

impl Feed {
    /// Both, one event per post first.
    pub const ALL: [Feed; 2] = [Feed::Events, Feed::Batches];

    /// The case name at `n` EVDs.
    pub fn case(self, n: usize) -> String {
        match self {
            Feed::Events => format!("cno-throughput/{n}"),
            Feed::Batches => format!("cno-throughput-batch/{n}"),
        }
    }
}

/// The saturated feed: each poster posts its sequence numbers in batches of
/// [`SATURATION_BATCH`], one `post_batch` per EVD in turn; what did not fit
/// goes to the next.
fn drive_batches(
    side: &PostSide,
    messages: u64,
    consume: impl FnOnce(&mut Sink<'_>) -> Result<(), String>,
) -> Result<RunStats, String> {
    let posters = THROUGHPUT_POSTERS;
    let n = side.posters.len();
    let poster = |i: usize, (): (), slot: &AtomicU32, abort: &AtomicBool| {
        let mut wait = BusyWait::default();
        let mut buf = Vec::with_capacity(SATURATION_BATCH);
        let (mut seq, mut k) = (i as u64, i * n / posters);
        let (mut refused, mut sent, mut sampled) = (0u64, 0u64, 0u64);
        while seq < messages || !buf.is_empty() {
            while buf.len() < SATURATION_BATCH && seq < messages {
                buf.push(seq);
                seq += posters as u64;
            }
            match side.post_batch(k, &mut buf) {
                Some(c) => {
                    wait.hit();
                    sent += c as u64;
                    if sent - sampled >= CPU_SAMPLE_EVERY {
                        sampled = sent;
                        slot.store(current_cpu(), Ordering::Relaxed);
                    }
                }
                None => {
                    refused += 1;
                    if abort.load(Ordering::Relaxed) {
                        break;
                    }
                    wait.miss();
                }
            }
            k = if k + 1 == n { 0 } else { k + 1 };
        }
        refused
    };
    harness(vec![(); posters], messages, poster, consume)
}

/// How the trigger cycle is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Post and serve on one thread.
    SingleThread,
    /// The harness posts, the waiter serves on its own thread (ping-pong).
    CrossThread,
}

impl Variant {
    /// Both, single thread first.
    pub const ALL: [Variant; 2] = [Variant::SingleThread, Variant::CrossThread];

    /// The case name at `n` bound EVDs.
    pub fn case(self, n: usize) -> String {
        format!("{}{n}", self.prefix())
    }

    fn row(self) -> (&'static str, &'static str, &'static str, usize) {
        match self {
            Variant::SingleThread => ("cno-trigger/", "single-thread", "single-thread", 1),
            Variant::CrossThread => ("cno-trigger-xthread/", "cross-thread", "blocking", 2),
        }
    }

    /// The start of its case names.
    pub fn prefix(self) -> &'static str {
        self.row().0
    }

    /// `single-thread` or `cross-thread`, for the tables.
    pub fn label(self) -> &'static str {
        self.row().1
    }

    /// The record's consumer label.
    pub fn consumer(self) -> &'static str {
        self.row().2
    }

    /// Threads the measurement runs.
    pub fn threads(self) -> usize {
        self.row().3
    }
}

fn expect_armed(s: evd::ArmStatus) -> Result<(), String> {
    match s {
        evd::ArmStatus::Armed => Ok(()),
        other => Err(format!("a fresh EVD's enable said {other:?}")),
    }
}

/// The epoll fixtures need two descriptors per EVD.
fn raise_fd_limit(want: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current.is_some_and(|c| c < want) {
        lim.current = Some(lim.maximum.map_or(want, |max| max.min(want)));
        // On failure the fixture's own error says what ran out.
        let _ = setrlimit(Resource::Nofile, lim);
    }
}

/// `n`-way pseudo-random indices, the same for every system.
fn sequence(n: usize) -> Vec<u32> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..SEQUENCE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as u32
        })
        .collect()
}

/// The most served over the fewest served; `Err` if an EVD got nothing.
pub fn max_over_min(served: &[u64]) -> Result<f64, String> {
    let max = served.iter().copied().max().unwrap_or(0);
    match served.iter().copied().enumerate().min_by_key(|&(_, c)| c) {
        Some((k, 0)) => Err(format!(
            "EVD {k} of {} was never served (the most served got {max})",
            served.len()
        )),
        Some((_, min)) => Ok(max as f64 / min as f64),
        None => Err("no EVD".into()),
    }
}

/// Every EVD's poster, and the scan CNO's flag, set after every post.
#[derive(Clone)]
struct PostSide {
    posters: Arc<Vec<evd::Poster<u64>>>,
    scan: Option<Arc<ScanFlag>>,
}

impl PostSide {
    #[inline]
    fn post(&self, k: usize, v: u64) -> Result<(), u64> {
        match self.posters[k].post(v) {
            Ok(()) => {
                if let Some(f) = &self.scan {
                    f.signal();
                }
                Ok(())
            }
            Err(e) => Err(e.into_inner()),
        }
    }

    /// How many of `buf` went to EVD `k`, or `None` if it was full.
    #[inline]
    fn post_batch(&self, k: usize, buf: &mut Vec<u64>) -> Option<usize> {
        match self.posters[k].post_batch(buf) {
            Ok(c) => {
                if let Some(f) = &self.scan {
                    f.signal();
                }
                Some(c)
            }
            // Closed cannot happen while the fixture lives: refused, as full.
            Err(_) => None,
        }
    }
}

/// A throughput poster: moves to the next EVD after a post or a refusal.
struct Cursor {
    side: PostSide,
    next: Cell<usize>,
}

impl Cursor {
    #[inline]
    fn post_next(&self, v: u64) -> Result<(), u64> {
        let k = self.next.get();
        let n = self.side.posters.len();
        self.next.set(if k + 1 == n { 0 } else { k + 1 });
        self.side.post(k, v)
    }
}

/// The scan CNO's notification: a flag every post sets, and the waiter's
/// thread to unpark when the post that set it finds the waiter asleep.
#[derive(Default)]
pub struct ScanFlag {
    flag: CachePadded<AtomicBool>,
    sleeping: CachePadded<AtomicBool>,
    waiter: OnceLock<Thread>,
}

impl ScanFlag {
    /// After a post: set the flag; wake the waiter if this set it and the
    /// waiter sleeps.
    #[inline]
    pub fn signal(&self) {
        // Every write of the flag is a swap, so the waiter's swap that takes
        // it synchronizes with every signal before (Release here, Acquire
        // there): it sees every post made before them. SeqCst, with the
        // waiter's SeqCst store of `sleeping` and load of the flag: either
        // the waiter sees this set, or this sees it asleep.
        if !self.flag.swap(true, Ordering::SeqCst) && self.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = self.waiter.get() {
                t.unpark();
            }
        }
    }

    /// Take the flag: true if a post set it since the last take.
    #[inline]
    pub fn take(&self) -> bool {
        self.flag.load(Ordering::Relaxed) && self.flag.swap(false, Ordering::SeqCst)
    }

    /// Wait until a post sets the flag, and take it: take it, spin for
    /// [`SPIN_BUDGET`], then park (on the calling thread) until a signal.
    pub fn wait(&self) {
        let start = Instant::now();
        let backoff = Backoff::new();
        loop {
            if self.take() {
                return;
            }
            if start.elapsed() < SPIN_BUDGET {
                backoff.snooze();
                continue;
            }
            self.waiter.get_or_init(std::thread::current);
            self.sleeping.store(true, Ordering::SeqCst);
            if !self.flag.load(Ordering::SeqCst) {
                std::thread::park();
            }
            self.sleeping.store(false, Ordering::Relaxed);
        }
    }
}

/// A waiter of one of the three systems.
enum AnyWaiter {
    Cno(CnoWaiter),
    Epoll(EpollWaiter),
    Scan(ScanWaiter),
}

struct CnoWaiter {
    cno: evd::Cno,
    evds: Vec<evd::Consumer<u64>>,
    keys: Vec<u64>,
}

struct EpollWaiter {
    ep: OwnedFd,
    fds: Vec<evd::NotifyFd>,
    evds: Vec<evd::Consumer<u64>>,
    events: EventBuf,
}

/// `epoll_wait`'s buffer. `epoll::Event` is not `Send` (its data may be a
/// pointer); these carry only the `u64` indices this module registers.
struct EventBuf(Vec<rustix::event::epoll::Event>);

// SAFETY: the buffer holds only events whose data is a `u64` (every
// registration here uses `EventData::new_u64`); no pointer crosses threads.
unsafe impl Send for EventBuf {}

struct ScanWaiter {
    flag: Arc<ScanFlag>,
    evds: Vec<evd::Consumer<u64>>,
}

impl AnyWaiter {
    /// Append the EVDs that may have work to `out`, waiting if `block`.
    fn ready(&mut self, out: &mut Vec<usize>, block: bool) -> Result<(), String> {
        match self {
            AnyWaiter::Cno(w) => {
                w.keys.clear();
                if block {
                    w.cno.wait(&mut w.keys);
                } else {
                    w.cno.try_ready(&mut w.keys);
                }
                out.extend(w.keys.iter().map(|&k| k as usize));
            }
            AnyWaiter::Epoll(w) => {
                use rustix::event::{epoll, Timespec};
                let zero = Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let start = Instant::now();
                loop {
                    w.events.0.clear();
                    let timeout = (!block || start.elapsed() < SPIN_BUDGET).then_some(&zero);
                    match epoll::wait(
                        &w.ep,
                        rustix::buffer::spare_capacity(&mut w.events.0),
                        timeout,
                    ) {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(format!("epoll_wait: {e}")),
                    }
                    for ev in &w.events.0 {
                        let data = ev.data;
                        let k = data.u64() as usize;
                        w.fds[k].acknowledge().map_err(|e| e.to_string())?;
                        out.push(k);
                    }
                    if !w.events.0.is_empty() || !block {
                        break;
                    }
                }
            }
            AnyWaiter::Scan(w) => {
                let woke = if block {
                    w.flag.wait();
                    true
                } else {
                    w.flag.take()
                };
                if woke {
                    out.extend(0..w.evds.len());
                }
            }
        }
        Ok(())
    }

    fn evd(&mut self, k: usize) -> &mut evd::Consumer<u64> {
        match self {
            AnyWaiter::Cno(w) => &mut w.evds[k],
            AnyWaiter::Epoll(w) => &mut w.evds[k],
            AnyWaiter::Scan(w) => &mut w.evds[k],
        }
    }

    #[inline]
    fn drain(&mut self, k: usize, buf: &mut Vec<u64>) -> Result<(), String> {
        match self.evd(k).dequeue_batch(buf, EVD_CAPACITY) {
            Ok(_) | Err(evd::TryDequeueError::Empty) => Ok(()),
            // No post here is lossy: a loss report would be a broken promise.
            Err(evd::TryDequeueError::Overflow(o)) => {
                Err(format!("{o}, but no post here is lossy"))
            }
            Err(evd::TryDequeueError::Closed) => Err("an EVD closed early".into()),
        }
    }

    /// Re-enable EVD `k`: false if events are waiting (serve it again).
    #[inline]
    fn enable(&mut self, k: usize) -> Result<bool, String> {
        let status = match self {
            AnyWaiter::Cno(w) => w.evds[k].enable_cno().map_err(|e| e.to_string())?,
            AnyWaiter::Epoll(w) => w.evds[k].arm(),
            // Every post sets the flag: nothing to re-enable.
            AnyWaiter::Scan(_) => return Ok(true),
        };
        match status {
            evd::ArmStatus::Armed => Ok(true),
            evd::ArmStatus::Pending => Ok(false),
            evd::ArmStatus::Closed => Err("an EVD closed early".into()),
        }
    }
}

struct Server {
    ready: Vec<usize>,
    again: Vec<usize>,
    buf: Vec<u64>,
}

impl Server {
    fn new(n: usize) -> Self {
        Server {
            ready: Vec::with_capacity(n),
            again: Vec::with_capacity(n),
            buf: Vec::with_capacity(EVD_CAPACITY),
        }
    }

    /// One pass: the EVDs to serve again first, then the ready set (waited
    /// for unless `never_block` or some EVD is to be served again); drain
    /// each once, hand its batch to `on` (empty if it had nothing), re-enable
    /// it. Returns true as soon as `on` does.
    #[inline]
    fn pass(
        &mut self,
        w: &mut AnyWaiter,
        never_block: bool,
        mut on: impl FnMut(usize, &[u64]) -> bool,
    ) -> Result<bool, String> {
        std::mem::swap(&mut self.ready, &mut self.again);
        let block = !never_block && self.ready.is_empty();
        w.ready(&mut self.ready, block)?;
        for i in 0..self.ready.len() {
            let k = self.ready[i];
            self.buf.clear();
            w.drain(k, &mut self.buf)?;
            if on(k, &self.buf) {
                self.ready.clear();
                return Ok(true);
            }
            if !w.enable(k)? {
                self.again.push(k);
            }
        }
        self.ready.clear();
        Ok(false)
    }
}

/// Post, then serve (never blocking) until the event is back.
fn cycles_single(
    mut w: AnyWaiter,
    side: &PostSide,
    seq: &[u32],
    run: Duration,
) -> Result<f64, String> {
    let mut server = Server::new(side.posters.len());
    let (mut posted, mut sum, mut served) = (0u64, 0u64, 0u64);
    let t = timed(run, |i| {
        let k = seq[i as usize % seq.len()] as usize;
        side.post(k, black_box(i))
            .map_err(|_| format!("EVD {k} refused a post"))?;
        posted = posted.wrapping_add(i);
        let before = served;
        let mut passes = 0;
        // One pass takes the event; more only if a re-enable found events.
        while served == before || !server.again.is_empty() {
            server.pass(&mut w, true, |_, b| {
                served += b.len() as u64;
                sum = b.iter().fold(sum, |s, &v| s.wrapping_add(v));
                false
            })?;
            passes += 1;
            if passes > 3 {
                return Err(format!("the post to EVD {k} did not make it ready"));
            }
        }
        Ok(())
    })?;
    if (served, sum) != (t.cycles, posted) {
        return Err(format!(
            "served {served} events (checksum {sum}), {} were posted (checksum {posted})",
            t.cycles
        ));
    }
    Ok(t.ns_per_cycle())
}

struct Timed {
    /// Every cycle, the warm-up's included.
    cycles: u64,
    measured: u64,
    elapsed: Duration,
}

impl Timed {
    fn ns_per_cycle(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.measured.max(1) as f64
    }
}

/// Run `cycle(i)` for i = 0, 1, ...: a warm-up of a quarter of `run`, then
/// at least `run` timed.
fn timed(run: Duration, mut cycle: impl FnMut(u64) -> Result<(), String>) -> Result<Timed, String> {
    let mut i = 0u64;
    let warm = Instant::now();
    while warm.elapsed() < run / 4 {
        for _ in 0..64 {
            cycle(i)?;
            i += 1;
        }
    }
    let (first, start) = (i, Instant::now());
    loop {
        for _ in 0..64 {
            cycle(i)?;
            i += 1;
        }
        let elapsed = start.elapsed();
        if elapsed >= run {
            return Ok(Timed {
                cycles: i,
                measured: i - first,
                elapsed,
            });
        }
    }
}

/// The harness posts and spins until the waiter, on its own thread, has
/// served the event.
fn cycles_cross(w: AnyWaiter, side: &PostSide, seq: &[u32], run: Duration) -> Result<f64, String> {
    let n = side.posters.len();
    let acked = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let waiter = {
        let acked = acked.clone();
        let mut w = w;
        std::thread::Builder::new()
            .name("cno-waiter".into())
            .spawn(move || -> Result<(u64, u64), String> {
                let mut server = Server::new(n);
                let (mut got, mut sum, mut stop) = (0u64, 0u64, false);
                loop {
                    server.pass(&mut w, false, |_, b| {
                        for &v in b {
                            if v == STOP {
                                stop = true;
                            } else {
                                got += 1;
                                sum = sum.wrapping_add(v);
                            }
                        }
                        false
                    })?;
                    // Release: the harness posts the next event only once
                    // this pass (drain and re-enable) is behind it.
                    acked.store(got, Ordering::Release);
                    if stop {
                        return Ok((got, sum));
                    }
                }
            })
            .map_err(|e| e.to_string())?
    };
    let mut posted = 0u64;
    let result = timed(run, |i| {
        let k = seq[i as usize % seq.len()] as usize;
        side.post(k, i)
            .map_err(|_| format!("EVD {k} refused a post"))?;
        posted = posted.wrapping_add(i);
        let mut wait = BusyWait::default();
        let since = Instant::now();
        let mut spins = 0u32;
        while acked.load(Ordering::Acquire) <= i {
            wait.miss();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                if waiter.is_finished() {
                    return Err("the waiter ended early".into());
                }
                if since.elapsed() > STALL_TIMEOUT {
                    return Err(format!("event {i} to EVD {k} was not served"));
                }
            }
        }
        Ok(())
    });
    let stopped = side.post(0, STOP).is_ok();
    let t = match result {
        Ok(t) => t,
        Err(e) => {
            // A waiter that stopped serving is let go (it owns only its EVDs).
            if stopped && waiter.is_finished() {
                if let Ok(Err(we)) = waiter.join() {
                    return Err(format!("{e}: {we}"));
                }
            }
            return Err(e);
        }
    };
    if !stopped {
        return Err("the stop event was refused".into());
    }
    let (got, sum) = waiter
        .join()
        .map_err(|_| "the waiter panicked".to_string())??;
    if (got, sum) != (t.cycles, posted) {
        return Err(format!(
            "the waiter served {got} events (checksum {sum}), {} were posted (checksum {posted})",
            t.cycles
        ));
    }
    Ok(t.ns_per_cycle())
}

/// A system of the CNO wake-latency case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CnoWakeSystem {
    /// [`WAKE_EVDS`] EVDs bound to a `Cno`; the waiter sleeps in `Cno::wait`.
    EvdCno,
    /// One EVD, no CNO: `try_dequeue`, then `wait(1, None)` (the
    /// wake-latency row of the same name).
    EvdWait,
    /// The raw park/unpark floor ([`WakeSystem::ParkFloor`]).
    ParkFloor,
}

/// The CNO row is the baseline of itself and the floor; the direct wait is
/// an evd variant shown for what the CNO adds. The evd rows sleep in a futex
/// park, whose floor is the raw park/unpark.
impl System for CnoWakeSystem {
    fn name(self) -> &'static str {
        match self {
            CnoWakeSystem::EvdCno => "evd Cno::wait (park/unpark)",
            CnoWakeSystem::EvdWait => "evd wait (park/unpark), no CNO",
            CnoWakeSystem::ParkFloor => WakeSystem::ParkFloor.name(),
        }
    }

    fn role(self) -> Role {
        if self == CnoWakeSystem::ParkFloor {
            Role::Floor
        } else {
            Role::Evd
        }
    }

    fn baseline(self) -> Option<CnoWakeSystem> {
        (self != CnoWakeSystem::EvdWait).then_some(CnoWakeSystem::EvdCno)
    }

    fn floor(self) -> Option<CnoWakeSystem> {
        (!self.is_floor()).then_some(CnoWakeSystem::ParkFloor)
    }
}

impl CnoWakeSystem {
    /// Every system, the CNO first, the floor last.
    pub const ALL: [CnoWakeSystem; 3] = [
        CnoWakeSystem::EvdCno,
        CnoWakeSystem::EvdWait,
        CnoWakeSystem::ParkFloor,
    ];

    /// Measure `samples` one-way wakes; the histogram is in nanoseconds.
    pub fn measure(self, samples: u64) -> Result<Histogram<u64>, String> {
        match self {
            CnoWakeSystem::EvdCno => measure_cno_wake(samples),
            CnoWakeSystem::EvdWait => WakeSystem::EvdWait.measure(samples),
            CnoWakeSystem::ParkFloor => WakeSystem::ParkFloor.measure(samples),
        }
    }
}

fn measure_cno_wake(samples: u64) -> Result<Histogram<u64>, String> {
    let mut cno = evd::Cno::new(WAKE_EVDS).map_err(|e| e.to_string())?;
    let mut posters = Vec::with_capacity(WAKE_EVDS);
    let mut evds = Vec::with_capacity(WAKE_EVDS);
    for k in 0..WAKE_EVDS {
        let (p, mut c) = evd::bounded::<u64>(EVD_CAPACITY).map_err(|e| e.to_string())?;
        c.bind_cno(&cno, k as u64).map_err(|e| e.to_string())?;
        expect_armed(c.enable_cno().map_err(|e| e.to_string())?)?;
        posters.push(p);
        evds.push(c);
    }
    let next = Cell::new(0usize);
    sleeping_consumer_timed(
        samples,
        move |record| {
            let mut keys = Vec::with_capacity(WAKE_EVDS);
            let mut got = 0;
            while got < samples {
                keys.clear();
                cno.wait(&mut keys);
                // Awake with the key in hand: the end of the sample.
                let woken = now_ns();
                for &k in &keys {
                    let c = &mut evds[k as usize];
                    loop {
                        while let Ok(t) = c.try_dequeue() {
                            record(t, woken);
                            got += 1;
                        }
                        match c.enable_cno().map_err(|e| e.to_string())? {
                            evd::ArmStatus::Armed => break,
                            evd::ArmStatus::Pending => {}
                            // The harness drops the posters after its last
                            // post, which closes the EVDs.
                            evd::ArmStatus::Closed if got == samples => return Ok(()),
                            evd::ArmStatus::Closed => return Err("an EVD closed early".into()),
                        }
                    }
                }
            }
            Ok(())
        },
        move |t| {
            let k = next.get();
            next.set((k + 1) % WAKE_EVDS);
            posters[k].post(t).map_err(|e| e.to_string())
        },
    )
}

/// What the `cno-insns` mode runs, for callgrind to count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CnoInsnKind {
    /// Post to a bound, enabled EVD (the trigger), `Cno::try_next`,
    /// `try_dequeue`, `enable_cno`.
    CnoCycle,
    /// Post and `try_dequeue` on an EVD bound to nothing.
    PlainPair,
    /// Post and `try_dequeue` on an EVD bound to a CNO but not enabled: the
    /// issue's "costs the same as a post to an unbound one".
    BoundPair,
}

impl CnoInsnKind {
    /// Both, the CNO cycle first.
    pub const ALL: [CnoInsnKind; 3] = [
        CnoInsnKind::CnoCycle,
        CnoInsnKind::PlainPair,
        CnoInsnKind::BoundPair,
    ];
}

/// Every count is an evd row; the CNO cycle is the reference, so the plain
/// pair's ratio is plain ÷ cycle.
impl System for CnoInsnKind {
    fn name(self) -> &'static str {
        match self {
            CnoInsnKind::CnoCycle => "evd post+trigger, try_next, try_dequeue, enable_cno",
            CnoInsnKind::PlainPair => "evd post+try_dequeue, no CNO",
            CnoInsnKind::BoundPair => "evd post+try_dequeue, bound to a CNO, not enabled",
        }
    }

    fn role(self) -> Role {
        Role::Evd
    }

    fn baseline(self) -> Option<CnoInsnKind> {
        Some(CnoInsnKind::CnoCycle)
    }
}

impl CnoInsnKind {
    /// The `--kind` value of the `cno-insns` mode.
    pub fn cli_name(self) -> &'static str {
        match self {
            CnoInsnKind::CnoCycle => "cno",
            CnoInsnKind::PlainPair => "plain",
            CnoInsnKind::BoundPair => "bound",
        }
    }

    /// Parse a `--kind` value.
    pub fn from_cli(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.cli_name() == s)
    }

    /// Run `iters` cycles on one thread; fails unless every event and key
    /// came back once.
    pub fn run(self, iters: u64) -> Result<(), String> {
        let (tx, mut rx) = evd::bounded::<u64>(EVD_CAPACITY).map_err(|e| e.to_string())?;
        let (mut sum, mut keys) = (0u64, 0u64);
        match self {
            CnoInsnKind::CnoCycle => {
                let mut cno = evd::Cno::new(1).map_err(|e| e.to_string())?;
                rx.bind_cno(&cno, 1).map_err(|e| e.to_string())?;
                expect_armed(rx.enable_cno().map_err(|e| e.to_string())?)?;
                for i in 0..iters {
                    let _ = tx.post(black_box(i));
                    if let Some(k) = cno.try_next() {
                        keys = keys.wrapping_add(k);
                    }
                    if let Ok(v) = rx.try_dequeue() {
                        sum = sum.wrapping_add(v);
                    }
                    let _ = black_box(rx.enable_cno());
                }
            }
            CnoInsnKind::PlainPair | CnoInsnKind::BoundPair => {
                // Bound or not, the same loop; a bound EVD that is never
                // enabled must never put its key in the ready set.
                let cno = evd::Cno::new(1).map_err(|e| e.to_string())?;
                if self == CnoInsnKind::BoundPair {
                    rx.bind_cno(&cno, 1).map_err(|e| e.to_string())?;
                }
                keys = iters;
                for i in 0..iters {
                    let _ = tx.post(black_box(i));
                    if let Ok(v) = rx.try_dequeue() {
                        sum = sum.wrapping_add(v);
                    }
                }
                drop(cno);
            }
        }
        let want = sum_below(iters);
        if (black_box(sum), keys) != (want, iters) {
            return Err(format!(
                "{}: checksum {sum} and {keys} keys, expected {want} and {iters}",
                self.name()
            ));
        }
        Ok(())
    }
}

/// The sum of `0..n`, wrapping like the loops' (closed form: callgrind
/// counts every instruction of the run).
fn sum_below(n: u64) -> u64 {
    if n.is_multiple_of(2) {
        (n / 2).wrapping_mul(n.wrapping_sub(1))
    } else {
        n.wrapping_mul((n - 1) / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_below_is_the_sum() {
        for n in [0, 1, 2, 3, 10, 101] {
            assert_eq!(sum_below(n), (0..n).sum::<u64>());
        }
    }

    #[test]
    fn sequence_covers_every_evd() {
        for n in [1, 16, 1024] {
            let s = sequence(n);
            assert!(s.iter().all(|&k| (k as usize) < n));
            if n <= 16 {
                for k in 0..n as u32 {
                    assert!(s.contains(&k));
                }
            }
        }
    }
}
