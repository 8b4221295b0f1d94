//! The CNO ([`evd::Cno`]): one waiter for many EVDs, against epoll over their eventfds and a
//! scan-every-EVD CNO ([`ScanFlag`]), the three waiters written once against one interface
//! ([`CnoSystem`]): wake latency ([`CNO_WAKE`]), trigger cost, throughput and fairness. How each is
//! run: the CNO section of bench/README.md.

use crate::latency::{Latency, PARK_FLOOR, Sampled, asleep, evd_wait, now_ns, park_floor};
use crate::report::{Role, Row};
use crate::throughput::CPU_SAMPLE_EVERY;
use crate::throughput::{BusyWait, RunStats, Sink, current_cpu, dequeue_failed, harness};
use crossbeam_utils::{Backoff, CachePadded};
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
    /// evd's `Cno`: bound, enabled EVDs; `wait` (spin for [`SPIN_BUDGET`], then park), drain,
    /// `enable_cno`.
    EvdCno,
    /// Every EVD's eventfd in one level-triggered epoll set, every EVD armed: `epoll_wait` (a zero
    /// timeout for [`SPIN_BUDGET`], then blocking), acknowledge, drain, `arm`.
    Epoll,
    /// The illumos way: every post sets a shared flag ([`ScanFlag`]); on a wake, `dequeue_batch` on
    /// every EVD.
    Scan,
}

impl CnoSystem {
    /// Every system, evd first.
    pub const ALL: [CnoSystem; 3] = [CnoSystem::EvdCno, CnoSystem::Epoll, CnoSystem::Scan];

    /// Its row (its consumer label depends on the case): every row is compared with evd's.
    pub fn row(self) -> Row {
        let (name, role) = match self {
            CnoSystem::EvdCno => ("evd Cno (wait, drain, enable_cno)", Role::Evd),
            CnoSystem::Epoll => ("epoll over the EVDs' eventfds (arm)", Role::Peer),
            CnoSystem::Scan => ("scan CNO (flag + park, scan every EVD)", Role::Peer),
        };
        let evd = Some("evd Cno (wait, drain, enable_cno)");
        Row::new(name, role, "blocking/batch", evd, None)
    }

    /// N EVDs, each with its poster, made ready for this system's waiter.
    fn fixture(self, n: usize) -> Result<(Waiter, PostSide), String> {
        let (mut posters, mut evds) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let (p, c) = evd::bounded::<u64>(EVD_CAPACITY).map_err(|e| e.to_string())?;
            posters.push(p);
            evds.push(c);
        }
        let mut scan = None;
        let how = match self {
            CnoSystem::EvdCno => {
                let cno = evd::Cno::new(n).map_err(|e| e.to_string())?;
                for (k, c) in evds.iter_mut().enumerate() {
                    c.bind_cno(&cno, k as u64).map_err(|e| e.to_string())?;
                    expect_armed(c.enable_cno().map_err(|e| e.to_string())?)?;
                }
                How::Cno(cno, Vec::with_capacity(n))
            }
            CnoSystem::Epoll => {
                use rustix::event::epoll;
                // Two descriptors per EVD: its eventfd, and the duplicate `notify_fd` hands out.
                raise_fd_limit(2 * n as u64 + 64);
                let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
                let mut fds = Vec::with_capacity(n);
                for (k, c) in evds.iter_mut().enumerate() {
                    let fd = c.notify_fd().map_err(|e| format!("notify_fd: {e}"))?;
                    let data = epoll::EventData::new_u64(k as u64);
                    epoll::add(&ep, &fd, data, epoll::EventFlags::IN).map_err(|e| e.to_string())?;
                    expect_armed(c.arm())?;
                    fds.push(fd);
                }
                How::Epoll(ep, fds, EventBuf(Vec::with_capacity(n)))
            }
            CnoSystem::Scan => {
                let flag = Arc::new(ScanFlag::default());
                scan = Some(flag.clone());
                How::Scan(flag)
            }
        };
        let (ready, again, buf) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(EVD_CAPACITY),
        );
        let waiter = Waiter {
            evds,
            how,
            ready,
            again,
            buf,
        };
        Ok((waiter, PostSide { posters, scan }))
    }

    /// Whether it can run at `n` bound EVDs here (its fixture is built, then dropped): epoll's
    /// needs two descriptors per EVD.
    pub fn check(self, n: usize) -> Result<(), String> {
        self.fixture(n).map(drop)
    }

    /// Nanoseconds per trigger cycle at `n` bound EVDs, run as `variant` says for about `run` after
    /// a warm-up of a quarter of that. Fails unless every event came back once.
    pub fn cycle_ns(self, variant: Variant, n: usize, run: Duration) -> Result<f64, String> {
        let (w, side) = self.fixture(n)?;
        let seq = sequence(n);
        if variant.threads == 1 {
            one_thread(w, &side, &seq, run)
        } else {
            two_threads(w, &side, &seq, run)
        }
    }

    /// Move `messages` events from [`THROUGHPUT_POSTERS`] posters over `n` EVDs to one waiter;
    /// fails if an event is lost or duplicated, or an EVD was never served.
    pub fn run_throughput(self, n: usize, messages: u64, feed: Feed) -> Result<RunStats, String> {
        let (mut w, side) = self.fixture(n)?;
        let mut served = vec![0u64; n];
        let consume = |sink: &mut Sink<'_>| loop {
            let done = w.pass(false, |k, batch| {
                if batch.is_empty() {
                    sink.empty();
                }
                served[k] += batch.len() as u64;
                // Done once the count is reached, even if more follow (a
                // duplicate): the run then ends, and its check fails.
                let mut done = false;
                for &v in batch {
                    done |= sink.take(v);
                }
                done
            })?;
            if done {
                return Ok(());
            }
        };
        let mut stats = self::feed(&side, feed, messages, consume)?;
        stats.served_max_over_min = Some(max_over_min(&served)?);
        Ok(stats)
    }
}

/// How the throughput posters post; a post refused as full goes to the next EVD, as one that
/// succeeds, so that an EVD the waiter neglects stays full and gets nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feed {
    /// One event per `post`.
    Events,
    /// Batches of up to [`SATURATION_BATCH`] events per `post_batch` (one reservation), what does
    /// not fit going to the next EVD: the posters outrun any waiter (saturation).
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

/// The posters of a throughput run, each going round the EVDs from its own start: poster `i` of
/// `n` posts the sequence numbers `i, i + n, ...` below `messages`, one per `post`, or in batches
/// of [`SATURATION_BATCH`] per `post_batch`; a post refused as full goes to the next EVD too.
fn feed(
    side: &PostSide,
    feed: Feed,
    messages: u64,
    consume: impl FnOnce(&mut Sink<'_>) -> Result<(), String>,
) -> Result<RunStats, String> {
    let (posters, n) = (THROUGHPUT_POSTERS, side.posters.len());
    let poster = |i: usize, (): (), slot: &AtomicU32, abort: &AtomicBool| {
        let mut wait = BusyWait::default();
        let mut buf = Vec::with_capacity(SATURATION_BATCH);
        let (mut seq, mut k) = (i as u64, i * n / posters);
        let (mut refused, mut sent, mut sampled) = (0u64, 0u64, 0u64);
        while seq < messages || !buf.is_empty() {
            let posted = if feed == Feed::Events {
                let posted = side.post(k, seq).is_ok();
                seq += if posted { posters as u64 } else { 0 };
                posted.then_some(1)
            } else {
                while buf.len() < SATURATION_BATCH && seq < messages {
                    buf.push(seq);
                    seq += posters as u64;
                }
                side.post_batch(k, &mut buf)
            };
            if let Some(c) = posted {
                wait.hit();
                sent += c as u64;
                if sent - sampled >= CPU_SAMPLE_EVERY {
                    sampled = sent;
                    slot.store(current_cpu(), Ordering::Relaxed);
                }
            } else {
                refused += 1;
                if abort.load(Ordering::Relaxed) {
                    break;
                }
                wait.miss();
            }
            k = if k + 1 == n { 0 } else { k + 1 };
        }
        refused
    };
    harness(vec![(); posters], messages, poster, consume)
}

/// How the trigger cycle is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// The start of its case names.
    pub prefix: &'static str,
    /// `single-thread` or `cross-thread`, for the tables.
    pub label: &'static str,
    /// The records' consumer label.
    pub consumer: &'static str,
    /// Threads the measurement runs: 2 when the waiter has its own.
    pub threads: usize,
}

impl Variant {
    /// The post, then one pass of the waiter that must not block, on one thread.
    pub const SINGLE_THREAD: Variant = Variant {
        prefix: "cno-trigger/",
        label: "single-thread",
        consumer: "single-thread",
        threads: 1,
    };
    /// The harness posts, then spins until the waiter, on its own thread, has served the event (a
    /// ping-pong: the waiter is still in its spin budget at the next post).
    pub const CROSS_THREAD: Variant = Variant {
        prefix: "cno-trigger-xthread/",
        label: "cross-thread",
        consumer: "blocking",
        threads: 2,
    };
    /// Both, single thread first.
    pub const ALL: [Variant; 2] = [Variant::SINGLE_THREAD, Variant::CROSS_THREAD];

    /// The case name at `n` bound EVDs.
    pub fn case(self, n: usize) -> String {
        format!("{}{n}", self.prefix)
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
    use rustix::process::{Resource, getrlimit, setrlimit};
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
struct PostSide {
    posters: Vec<evd::Poster<u64>>,
    scan: Option<Arc<ScanFlag>>,
}

impl PostSide {
    #[inline]
    fn post(&self, k: usize, v: u64) -> Result<(), u64> {
        self.posters[k].post(v).map_err(|e| e.into_inner())?;
        if let Some(f) = &self.scan {
            f.signal();
        }
        Ok(())
    }

    /// How many of `buf` went to EVD `k`, or `None` if it was full (closed cannot happen while the
    /// fixture lives).
    #[inline]
    fn post_batch(&self, k: usize, buf: &mut Vec<u64>) -> Option<usize> {
        let c = self.posters[k].post_batch(buf).ok()?;
        if let Some(f) = &self.scan {
            f.signal();
        }
        Some(c)
    }
}

/// The scan CNO's notification: a flag every post sets, and the waiter's thread to unpark when the
/// post that set it finds the waiter asleep.
#[derive(Default)]
pub struct ScanFlag {
    flag: CachePadded<AtomicBool>,
    sleeping: CachePadded<AtomicBool>,
    waiter: OnceLock<Thread>,
}

impl ScanFlag {
    /// After a post: set the flag; wake the waiter if this set it and the waiter sleeps.
    #[inline]
    pub fn signal(&self) {
        // Every write of the flag is a swap, so the waiter's swap that takes it synchronizes with
        // every signal before (Release here, Acquire there): it sees every post made before them.
        // SeqCst, with the waiter's SeqCst store of `sleeping` and load of the flag: either the
        // waiter sees this set, or this sees it asleep.
        if !self.flag.swap(true, Ordering::SeqCst)
            && self.sleeping.load(Ordering::SeqCst)
            && let Some(t) = self.waiter.get()
        {
            t.unpark();
        }
    }

    /// Take the flag: true if a post set it since the last take.
    #[inline]
    pub fn take(&self) -> bool {
        self.flag.load(Ordering::Relaxed) && self.flag.swap(false, Ordering::SeqCst)
    }

    /// Wait until a post sets the flag, and take it: spin for [`SPIN_BUDGET`], then park (on the
    /// calling thread) until a signal.
    pub fn wait(&self) {
        let start = Instant::now();
        let backoff = Backoff::new();
        while !self.take() {
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

/// A waiter of one of the three systems, over its EVDs: how it learns which are ready, the EVDs
/// of its pass (`ready`) and those to serve again in the next (`again`), and its drain buffer.
struct Waiter {
    evds: Vec<evd::Consumer<u64>>,
    how: How,
    ready: Vec<usize>,
    again: Vec<usize>,
    buf: Vec<u64>,
}

enum How {
    /// The `Cno`, and its buffer of ready keys.
    Cno(evd::Cno, Vec<u64>),
    /// The epoll set, every EVD's eventfd, and `epoll_wait`'s buffer.
    Epoll(OwnedFd, Vec<evd::NotifyFd>, EventBuf),
    Scan(Arc<ScanFlag>),
}

/// `epoll_wait`'s buffer. `epoll::Event` is not `Send` (its data may be a pointer); these carry
/// only the `u64` indices this module registers.
struct EventBuf(Vec<rustix::event::epoll::Event>);

// SAFETY: the buffer holds only events whose data is a `u64` (every registration here uses
// `EventData::new_u64`); no pointer crosses threads.
unsafe impl Send for EventBuf {}

impl Waiter {
    /// Append the EVDs that may have work to `out`, waiting if `block`.
    fn wait_ready(&mut self, out: &mut Vec<usize>, block: bool) -> Result<(), String> {
        match &mut self.how {
            How::Cno(cno, keys) => {
                keys.clear();
                if block {
                    cno.wait(keys);
                } else {
                    cno.try_ready(keys);
                }
                out.extend(keys.iter().map(|&k| k as usize));
            }
            How::Epoll(ep, fds, events) => {
                use rustix::event::{Timespec, epoll};
                let zero = Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let start = Instant::now();
                loop {
                    events.0.clear();
                    let timeout = (!block || start.elapsed() < SPIN_BUDGET).then_some(&zero);
                    match epoll::wait(&*ep, rustix::buffer::spare_capacity(&mut events.0), timeout)
                    {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(format!("epoll_wait: {e}")),
                    }
                    for ev in &events.0 {
                        let data = ev.data;
                        let k = data.u64() as usize;
                        fds[k].acknowledge().map_err(|e| e.to_string())?;
                        out.push(k);
                    }
                    if !events.0.is_empty() || !block {
                        break;
                    }
                }
            }
            How::Scan(flag) => {
                let woke = if block {
                    flag.wait();
                    true
                } else {
                    flag.take()
                };
                if woke {
                    out.extend(0..self.evds.len());
                }
            }
        }
        Ok(())
    }

    #[inline]
    fn drain(&mut self, k: usize) -> Result<(), String> {
        match self.evds[k].dequeue_batch(&mut self.buf, EVD_CAPACITY) {
            Ok(_) | Err(evd::TryDequeueError::Empty) => Ok(()),
            Err(e) => Err(dequeue_failed(e)),
        }
    }

    /// Re-enable EVD `k`: false if events are waiting (serve it again).
    #[inline]
    fn enable(&mut self, k: usize) -> Result<bool, String> {
        let status = match self.how {
            How::Cno(..) => self.evds[k].enable_cno().map_err(|e| e.to_string())?,
            How::Epoll(..) => self.evds[k].arm(),
            // Every post sets the flag: nothing to re-enable.
            How::Scan(_) => return Ok(true),
        };
        match status {
            evd::ArmStatus::Armed => Ok(true),
            evd::ArmStatus::Pending => Ok(false),
            evd::ArmStatus::Closed => Err("an EVD closed early".into()),
        }
    }
}

impl Waiter {
    /// One pass: the EVDs to serve again first, then the ready set (waited for unless `never_block`
    /// or some EVD is to be served again); drain each once, hand its batch to `on` (empty if it had
    /// nothing), re-enable it. Returns true as soon as `on` does.
    #[inline]
    fn pass(
        &mut self,
        never_block: bool,
        mut on: impl FnMut(usize, &[u64]) -> bool,
    ) -> Result<bool, String> {
        std::mem::swap(&mut self.ready, &mut self.again);
        let block = !never_block && self.ready.is_empty();
        let mut ready = std::mem::take(&mut self.ready);
        self.wait_ready(&mut ready, block)?;
        self.ready = ready;
        for i in 0..self.ready.len() {
            let k = self.ready[i];
            self.buf.clear();
            self.drain(k)?;
            if on(k, &self.buf) {
                self.ready.clear();
                return Ok(true);
            }
            if !self.enable(k)? {
                self.again.push(k);
            }
        }
        self.ready.clear();
        Ok(false)
    }
}

/// Post, then serve (never blocking) until the event is back.
fn one_thread(mut w: Waiter, side: &PostSide, seq: &[u32], run: Duration) -> Result<f64, String> {
    let (mut posted, mut sum, mut served) = (0u64, 0u64, 0u64);
    let t = timed(run, |i| {
        let k = seq[i as usize % seq.len()] as usize;
        side.post(k, black_box(i))
            .map_err(|_| format!("EVD {k} refused a post"))?;
        posted = posted.wrapping_add(i);
        let before = served;
        let mut passes = 0;
        // One pass takes the event; more only if a re-enable found events.
        while served == before || !w.again.is_empty() {
            w.pass(true, |_, b| {
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
    checked(t, (served, sum), posted, "")
}

/// Run `cycle(i)` for i = 0, 1, ...: a warm-up of a quarter of `run`, then at least `run` timed.
/// Returns the cycles run, the warm-up's included, and the ns per timed cycle.
fn timed(
    run: Duration,
    mut cycle: impl FnMut(u64) -> Result<(), String>,
) -> Result<(u64, f64), String> {
    let mut i = 0u64;
    let mut cycles = |i: &mut u64| (0..64).try_for_each(|_| cycle(*i).map(|()| *i += 1));
    let warm = Instant::now();
    while warm.elapsed() < run / 4 {
        cycles(&mut i)?;
    }
    let (first, start) = (i, Instant::now());
    loop {
        cycles(&mut i)?;
        let elapsed = start.elapsed();
        if elapsed >= run {
            return Ok((i, elapsed.as_nanos() as f64 / (i - first).max(1) as f64));
        }
    }
}

/// The ns per cycle of `timed`, if `(served, sum)` are every cycle's event and the checksum
/// `posted`.
fn checked(
    timed: (u64, f64),
    (served, sum): (u64, u64),
    posted: u64,
    who: &str,
) -> Result<f64, String> {
    let (cycles, ns) = timed;
    if (served, sum) != (cycles, posted) {
        return Err(format!(
            "{who}served {served} events (checksum {sum}), {cycles} were posted (checksum {posted})"
        ));
    }
    Ok(ns)
}

/// The harness posts and spins until the waiter, on its own thread, has served the event.
fn two_threads(w: Waiter, side: &PostSide, seq: &[u32], run: Duration) -> Result<f64, String> {
    let acked = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let waiter_acked = acked.clone();
    let mut w = w;
    let waiter = std::thread::Builder::new()
        .name("cno-waiter".into())
        .spawn(move || -> Result<(u64, u64), String> {
            let (mut got, mut sum, mut stop) = (0u64, 0u64, false);
            while !stop {
                w.pass(false, |_, b| {
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
                // Release: the harness posts the next event only once this pass (drain and
                // re-enable) is behind it.
                waiter_acked.store(got, Ordering::Release);
            }
            Ok((got, sum))
        })
        .map_err(|e| e.to_string())?;
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
            if let Some(Ok(Err(we))) = (stopped && waiter.is_finished()).then(|| waiter.join()) {
                return Err(format!("{e}: {we}"));
            }
            return Err(e);
        }
    };
    if !stopped {
        return Err("the stop event was refused".into());
    }
    let served = waiter
        .join()
        .map_err(|_| "the waiter panicked".to_string())??;
    checked(t, served, posted, "the waiter ")
}

const EVD_CNO_WAKE: &str = "evd Cno::wait (park/unpark)";

/// The CNO wake-latency systems: [`WAKE_EVDS`] EVDs bound to a `Cno`, the harness posting to each
/// in turn; beside it, for what the CNO adds, the direct `wait` on one EVD (an evd variant), and
/// the raw park/unpark floor of both.
#[rustfmt::skip]
pub const CNO_WAKE: [Latency; 3] = [
    Latency::new(Row::new(EVD_CNO_WAKE, Role::Evd, "blocking", Some(EVD_CNO_WAKE), Some(PARK_FLOOR)), 2, cno_wake),
    Latency::new(Row::new("evd wait (park/unpark), no CNO", Role::Evd, "blocking", None, Some(PARK_FLOOR)), 2, evd_wait),
    Latency::new(Row::new(PARK_FLOOR, Role::Floor, "blocking", Some(EVD_CNO_WAKE), None), 2, park_floor),
];

/// The waiter reads the clock as soon as `Cno::wait` returns the key, before it dequeues the event,
/// which carries its post time.
fn cno_wake(samples: u64) -> Sampled {
    let (w, side) = CnoSystem::EvdCno.fixture(WAKE_EVDS)?;
    let (mut evds, How::Cno(mut cno, mut keys)) = (w.evds, w.how) else {
        unreachable!("an evd Cno fixture")
    };
    let waiter = move |record: &mut dyn FnMut(u64, u64)| {
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
                        // The harness drops the posters after its last post, which closes the EVDs.
                        evd::ArmStatus::Closed if got == samples => return Ok(()),
                        evd::ArmStatus::Closed => return Err("an EVD closed early".into()),
                    }
                }
            }
        }
        Ok(())
    };
    let post = |side: &mut PostSide, i: u64| {
        let k = i as usize % WAKE_EVDS;
        side.posters[k].post(now_ns()).map_err(|e| e.to_string())
    };
    let (hist, _) = asleep("cno-waiter", samples, waiter, side, |_| true, post)?;
    Ok((hist, None))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sequence_covers_every_evd() {
        for n in [1, 16, 1024] {
            let s = super::sequence(n);
            assert!(s.iter().all(|&k| (k as usize) < n));
            if n <= 16 {
                assert!((0..n as u32).all(|k| s.contains(&k)));
            }
        }
    }
}
