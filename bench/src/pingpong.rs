//! Busy ping-pong: the round-trip latency of two threads that never sleep.
//!
//! Two queues of capacity [`CAPACITY`], A→B and B→A, of one system. The
//! timing thread sends a `u64` on A→B and polls B→A until it comes back; the
//! echo thread polls A→B and sends what it got back on B→A. Every poll is
//! the system's non-blocking receive in the crate's one busy loop
//! ([`BusyWait`]: `spin_loop`, and `yield_now` after 64 empty polls in a row,
//! so that a descheduled peer gets a CPU on a loaded machine; neither side
//! ever parks). One sample is one round trip, timed with [`Instant`] on the
//! timing thread around the send and the poll that gets the value back,
//! into an hdrhistogram; the first [`WARMUP`] round trips of every
//! measurement are not recorded. Each queue holds at most one value, so a
//! refused send or a value other than the one sent fails the run.
//!
//! Nothing is pinned: the two threads run where the scheduler puts them, as
//! a user's would. Both read their CPU (`getcpu`) once per
//! [`CPU_SAMPLE_EVERY`] round trips, outside the timed part, and the share
//! of the timing thread's samples that found the echo thread on its own CPU
//! is the run's same-CPU diagnostic: two busy threads on one CPU take
//! turns, and their round trip is a time slice, not a cache-line transfer.
//!
//! The floor ([`PingPongSystem::Floor`]) is two `AtomicU64` counters on
//! separate cache lines, each side spinning on the other's: one line
//! transfer each way, which no queue can beat.

use crate::latency::new_histogram;
use crate::report::{Role, System};
use crate::throughput::{current_cpu, BusyWait, CAPACITY, CPU_SAMPLE_EVERY, NO_CPU};
use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The case of the busy ping-pong.
pub const CASE: &str = "pingpong/u64";
/// Round trips of every measurement before the recorded ones.
pub const WARMUP: u64 = 2_000;
/// The most events one `dequeue_batch` of the batch row takes.
pub const BATCH: usize = 16;
/// How long a side polls for a value before it declares the run broken.
const STALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A system under test in the busy ping-pong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PingPongSystem {
    /// evd: `post`, busy `try_dequeue`.
    EvdItem,
    /// evd: `post`, busy `dequeue_batch(&mut buf, 16)`.
    EvdBatch,
    /// rtrb (the SPSC ring): `push`, busy `pop`.
    Rtrb,
    /// crossbeam-queue `ArrayQueue`: `push`, busy `pop`.
    ArrayQueue,
    /// crossbeam-channel `bounded`: `try_send`, busy `try_recv`.
    CrossbeamChannel,
    /// Floor: two `AtomicU64` on separate cache lines, each side spinning
    /// on the other's.
    Floor,
}

/// Every row is compared with `evd try_dequeue` (each side takes one event
/// per round trip, so a batch holds one event too); the floor is two atomics.
impl System for PingPongSystem {
    fn name(self) -> &'static str {
        use PingPongSystem::*;
        match self {
            EvdItem => "evd try_dequeue",
            EvdBatch => "evd dequeue_batch",
            Rtrb => "rtrb pop",
            ArrayQueue => "crossbeam ArrayQueue",
            CrossbeamChannel => "crossbeam-channel try_recv",
            Floor => "floor: two atomics",
        }
    }

    fn role(self) -> Role {
        match self {
            PingPongSystem::EvdItem | PingPongSystem::EvdBatch => Role::Evd,
            PingPongSystem::Floor => Role::Floor,
            _ => Role::Peer,
        }
    }

    fn baseline(self) -> Option<PingPongSystem> {
        Some(PingPongSystem::EvdItem)
    }

    fn floor(self) -> Option<PingPongSystem> {
        (!self.is_floor()).then_some(PingPongSystem::Floor)
    }
}

impl PingPongSystem {
    /// Every system, evd first, the floor last.
    pub const ALL: [PingPongSystem; 6] = [
        PingPongSystem::EvdItem,
        PingPongSystem::EvdBatch,
        PingPongSystem::Rtrb,
        PingPongSystem::ArrayQueue,
        PingPongSystem::CrossbeamChannel,
        PingPongSystem::Floor,
    ];

    /// How each side receives: `busy/batch` for `dequeue_batch`, else
    /// `busy/item`.
    pub fn consumer(self) -> &'static str {
        if self == PingPongSystem::EvdBatch {
            "busy/batch"
        } else {
            "busy/item"
        }
    }

    /// Measure `samples` round trips (after [`WARMUP`] unrecorded ones): the
    /// histogram in nanoseconds, and the share of CPU samples that found
    /// both threads on one CPU (`None` without a sample).
    pub fn measure(self, samples: u64) -> Result<(Histogram<u64>, Option<f64>), String> {
        let evd = || evd::bounded::<u64>(CAPACITY).expect("capacity 1024 is valid");
        let evd_end = |batch: bool| {
            move |tx, rx| EvdEnd {
                tx,
                rx,
                buf: batch.then(|| Vec::with_capacity(BATCH)),
            }
        };
        match self {
            PingPongSystem::EvdItem => round_trips(samples, ends(evd, evd_end(false))),
            PingPongSystem::EvdBatch => round_trips(samples, ends(evd, evd_end(true))),
            PingPongSystem::Rtrb => round_trips(
                samples,
                ends(
                    || rtrb::RingBuffer::new(CAPACITY),
                    |tx, rx| RtrbEnd { tx, rx },
                ),
            ),
            PingPongSystem::ArrayQueue => round_trips(
                samples,
                ends(
                    || {
                        let q = Arc::new(crossbeam_queue::ArrayQueue::new(CAPACITY));
                        (q.clone(), q)
                    },
                    |tx, rx| ArrayQueueEnd { tx, rx },
                ),
            ),
            PingPongSystem::CrossbeamChannel => round_trips(
                samples,
                ends(
                    || crossbeam_channel::bounded(CAPACITY),
                    |tx, rx| ChannelEnd { tx, rx },
                ),
            ),
            PingPongSystem::Floor => round_trips(
                samples,
                ends(
                    || {
                        let c = Arc::new(CachePadded::new(AtomicU64::new(0)));
                        (c.clone(), c)
                    },
                    |tx, rx| FloorEnd { tx, rx, last: 0 },
                ),
            ),
        }
    }
}

/// One thread's side: the queue it sends on and the one it polls.
trait End: Send + 'static {
    /// Send `v`; the queue holds nothing else, so a refusal is an error.
    fn send(&mut self, v: u64) -> Result<(), String>;
    /// One non-blocking receive: `None` if nothing is there.
    fn poll(&mut self) -> Result<Option<u64>, String>;
}

/// The timing thread's and the echo thread's sides of two queues made by
/// `queue` (A→B and B→A), each side joined by `end` from the sending half
/// of one and the receiving half of the other.
fn ends<S, R, E>(queue: impl Fn() -> (S, R), end: impl Fn(S, R) -> E) -> (E, E) {
    let (ab_tx, ab_rx) = queue();
    let (ba_tx, ba_rx) = queue();
    (end(ab_tx, ba_rx), end(ba_tx, ab_rx))
}

struct EvdEnd {
    tx: evd::Poster<u64>,
    rx: evd::Consumer<u64>,
    /// `Some` for the batch row.
    buf: Option<Vec<u64>>,
}

impl End for EvdEnd {
    #[inline(always)]
    fn send(&mut self, v: u64) -> Result<(), String> {
        self.tx.post(v).map_err(|e| e.to_string())
    }

    #[inline(always)]
    fn poll(&mut self) -> Result<Option<u64>, String> {
        match &mut self.buf {
            None => match self.rx.try_dequeue() {
                Ok(v) => Ok(Some(v)),
                Err(evd::TryDequeueError::Empty) => Ok(None),
                Err(e) => Err(e.to_string()),
            },
            Some(buf) => match self.rx.dequeue_batch(buf, BATCH) {
                Ok(0) | Err(evd::TryDequeueError::Empty) => Ok(None),
                Ok(1) => Ok(buf.pop()),
                Ok(n) => Err(format!("a batch of {n}: the ring held more than one")),
                Err(e) => Err(e.to_string()),
            },
        }
    }
}

struct RtrbEnd {
    tx: rtrb::Producer<u64>,
    rx: rtrb::Consumer<u64>,
}

impl End for RtrbEnd {
    #[inline(always)]
    fn send(&mut self, v: u64) -> Result<(), String> {
        self.tx.push(v).map_err(|e| e.to_string())
    }

    #[inline(always)]
    fn poll(&mut self) -> Result<Option<u64>, String> {
        Ok(self.rx.pop().ok())
    }
}

struct ArrayQueueEnd {
    tx: Arc<crossbeam_queue::ArrayQueue<u64>>,
    rx: Arc<crossbeam_queue::ArrayQueue<u64>>,
}

impl End for ArrayQueueEnd {
    #[inline(always)]
    fn send(&mut self, v: u64) -> Result<(), String> {
        self.tx.push(v).map_err(|_| "ArrayQueue full".to_string())
    }

    #[inline(always)]
    fn poll(&mut self) -> Result<Option<u64>, String> {
        Ok(self.rx.pop())
    }
}

struct ChannelEnd {
    tx: crossbeam_channel::Sender<u64>,
    rx: crossbeam_channel::Receiver<u64>,
}

impl End for ChannelEnd {
    #[inline(always)]
    fn send(&mut self, v: u64) -> Result<(), String> {
        self.tx.try_send(v).map_err(|e| e.to_string())
    }

    #[inline(always)]
    fn poll(&mut self) -> Result<Option<u64>, String> {
        match self.rx.try_recv() {
            Ok(v) => Ok(Some(v)),
            Err(crossbeam_channel::TryRecvError::Empty) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A side of the floor: it stores into its own counter and spins on the
/// other's; the values sent are distinct and never 0, so a change is a
/// value.
struct FloorEnd {
    tx: Arc<CachePadded<AtomicU64>>,
    rx: Arc<CachePadded<AtomicU64>>,
    last: u64,
}

impl End for FloorEnd {
    #[inline(always)]
    fn send(&mut self, v: u64) -> Result<(), String> {
        // Release/Acquire: what a queue's publish and receive give.
        self.tx.store(v, Ordering::Release);
        Ok(())
    }

    #[inline(always)]
    fn poll(&mut self) -> Result<Option<u64>, String> {
        let v = self.rx.load(Ordering::Acquire);
        Ok((v != self.last).then(|| {
            self.last = v;
            v
        }))
    }
}

/// Poll until a value comes; fails after [`STALL_TIMEOUT`] without one.
#[inline(always)]
fn receive<E: End>(end: &mut E) -> Result<u64, String> {
    let mut wait = BusyWait::default();
    let mut spins = 0u32;
    let mut since = None;
    loop {
        if let Some(v) = end.poll()? {
            return Ok(v);
        }
        wait.miss();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024)
            && since.get_or_insert_with(Instant::now).elapsed() > STALL_TIMEOUT
        {
            return Err("no value came back within 5 s".into());
        }
    }
}

/// Run [`WARMUP`] + `samples` round trips between `near` (this thread,
/// which times them) and `far` (an echo thread); record the last `samples`.
fn round_trips<E: End>(
    samples: u64,
    (mut near, mut far): (E, E),
) -> Result<(Histogram<u64>, Option<f64>), String> {
    let trips = WARMUP + samples;
    let far_cpu = Arc::new(AtomicU32::new(NO_CPU));
    let echo = {
        let far_cpu = far_cpu.clone();
        std::thread::Builder::new()
            .name("pingpong-echo".into())
            .spawn(move || -> Result<(), String> {
                for i in 0..trips {
                    let v = receive(&mut far)?;
                    far.send(v)?;
                    if i % CPU_SAMPLE_EVERY == 0 {
                        far_cpu.store(current_cpu(), Ordering::Relaxed);
                    }
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?
    };
    let mut hist = new_histogram();
    let (mut cpu_samples, mut same_cpu) = (0u64, 0u64);
    let mut run = || -> Result<(), String> {
        for i in 0..trips {
            let v = i + 1;
            let start = Instant::now();
            near.send(v)?;
            let back = receive(&mut near)?;
            let ns = start.elapsed().as_nanos() as u64;
            if back != v {
                return Err(format!("sent {v}, got {back} back"));
            }
            if i >= WARMUP {
                hist.saturating_record(ns.max(1));
            }
            if i % CPU_SAMPLE_EVERY == CPU_SAMPLE_EVERY / 2 {
                let theirs = far_cpu.load(Ordering::Relaxed);
                if theirs != NO_CPU {
                    cpu_samples += 1;
                    same_cpu += u64::from(theirs == current_cpu());
                }
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        // An echo thread that failed says why; one still polling gives up
        // on its own after the stall timeout.
        if echo.is_finished() {
            if let Ok(Err(echo_err)) = echo.join() {
                return Err(format!("{e} (echo thread: {echo_err})"));
            }
        }
        return Err(e);
    }
    echo.join()
        .map_err(|_| "the echo thread panicked".to_string())??;
    let share = (cpu_samples > 0).then(|| same_cpu as f64 / cpu_samples as f64);
    Ok((hist, share))
}
