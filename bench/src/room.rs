//! Posters that wait for room: a slow consumer behind a small ring, so that
//! the ring is full most of the time and posters really sleep in their
//! system's *blocking* bounded send.
//!
//! **Throughput** ([`RoomSystem::run`]): 1 or 2 posters, capacity 64 or
//! 1024, `u64` events. Every poster uses its system's blocking bounded send
//! (evd `post_blocking`, `send` elsewhere, tokio `blocking_send`); the
//! consumer does the same fixed [`Work`] per event in every system (a busy
//! loop of `black_box` iterations calibrated once per run to about
//! [`WORK_NS`]), so the posters outrun it and wait. The harness is the
//! throughput one (the same start barrier, checksum and CPU samples, written
//! once in `drive`); the posters' waits inside a blocking send are not
//! visible, so no refusal is counted, and the evd rows report the room wakes
//! evd sent ([`evd::Query::room_wakes`]) per event.
//!
//! **Room-wake latency** ([`RoomWakeSystem::measure`]): a 1-slot queue kept
//! full, one poster asleep in its blocking send; the harness thread, as the
//! consumer, takes a timestamp (the [`crate::latency`] clock) right before the
//! non-blocking receive that frees the slot, and the poster takes one right
//! after its send returns. As in [`crate::latency`], the harness frees the
//! slot only once the poster thread's state in `/proc/self/task/TID/stat` is
//! `S` (and, for evd, it has joined the room queue), and the evd run checks
//! that every sample was one room wake. The raw park/unpark floor is the same
//! measurement as [`crate::latency`]'s: one thread stores a value and unparks
//! the other.

use crate::latency::{new_histogram, now_ns, ThreadState, WakeSystem};
use crate::payload::Payload;
use crate::peers::Channel;
use crate::report::{Role, System};
use crate::throughput::{blocking_loop, clones, dequeue_failed, drive, RunStats, Sink, Style};
use hdrhistogram::Histogram;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The ring capacities of the room throughput cases.
pub const CAPACITIES: [usize; 2] = [64, 1024];

/// The poster counts of the room throughput cases.
pub const POSTERS: [usize; 2] = [1, 2];

/// What the consumer's fixed work per event is calibrated to, in ns.
pub const WORK_NS: f64 = 750.0;

/// How long the harness waits for a poster to fall asleep.
const SLEEP_TIMEOUT: Duration = Duration::from_secs(5);

/// What every room poster and consumer does, for the tables and the notes.
pub const ROOM_POLICY: &str = "every poster uses its system's blocking bounded send (evd \
post_blocking, send elsewhere, tokio blocking_send) and sleeps in it while the queue is full; the \
consumer does the same fixed busy work per event in every system";

/// The consumer's fixed work per event: `iters` iterations of a loop whose
/// counter goes through [`black_box`], the same count for every system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    /// Loop iterations per event.
    pub iters: u64,
}

impl Work {
    /// Exactly `iters` iterations per event.
    pub fn fixed(iters: u64) -> Self {
        Work { iters }
    }

    /// The iteration count that takes about `ns` nanoseconds now, timed by
    /// the fastest (least disturbed) of a few runs.
    pub fn calibrate(ns: f64) -> Self {
        const PROBE: u64 = 200_000;
        let best = (0..5)
            .map(|_| {
                let t = Instant::now();
                Work::fixed(PROBE).run();
                t.elapsed().as_nanos() as f64
            })
            .fold(f64::INFINITY, f64::min);
        let per_iter = (best / PROBE as f64).max(1e-3);
        Work::fixed(((ns / per_iter).round() as u64).max(1))
    }

    /// Nanoseconds one event's work takes now.
    pub fn ns_per_event(self) -> f64 {
        (0..10)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..100 {
                    self.run();
                }
                t.elapsed().as_nanos() as f64 / 100.0
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Do one event's work.
    #[inline(always)]
    pub fn run(self) {
        for i in 0..self.iters {
            black_box(i);
        }
    }
}

/// A system under test in the room throughput cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoomSystem {
    /// evd: `post_blocking`; the consumer `dequeue`s one event per call.
    EvdDequeue,
    /// evd: `post_blocking`; the consumer `dequeue_batch`es (at most the
    /// capacity), and when that returns nothing `arm()` and `wait(1, None)`.
    EvdBatchWait,
    /// crossbeam-channel `bounded`: `send` / `recv`.
    CrossbeamChannel,
    /// `std::sync::mpsc::sync_channel`: `send` / `recv`.
    StdSyncChannel,
    /// flume `bounded`: `send` / `recv`.
    Flume,
    /// tokio `mpsc::channel`: `blocking_send` / `blocking_recv`.
    TokioMpsc,
    /// kanal `bounded`: `send` / `recv`.
    Kanal,
    /// thingbuf `mpsc::blocking::channel`: `send` / `recv`.
    Thingbuf,
}

/// Named by the blocking send, then the consumer's receive; compared with
/// `evd post_blocking+dequeue` (every peer's consumer takes one event per
/// call) but for the batch variant, an evd row compared with nothing.
impl System for RoomSystem {
    fn name(self) -> &'static str {
        match self {
            RoomSystem::EvdDequeue => "evd post_blocking+dequeue",
            RoomSystem::EvdBatchWait => "evd post_blocking+batch+wait",
            RoomSystem::CrossbeamChannel => "crossbeam-channel send+recv",
            RoomSystem::StdSyncChannel => "std sync_channel send+recv",
            RoomSystem::Flume => "flume send+recv",
            RoomSystem::TokioMpsc => "tokio mpsc blocking_send+blocking_recv",
            RoomSystem::Kanal => "kanal send+recv",
            RoomSystem::Thingbuf => "thingbuf mpsc send+recv",
        }
    }

    fn role(self) -> Role {
        match self {
            RoomSystem::EvdDequeue | RoomSystem::EvdBatchWait => Role::Evd,
            _ => Role::Peer,
        }
    }

    fn baseline(self) -> Option<RoomSystem> {
        (self != RoomSystem::EvdBatchWait).then_some(RoomSystem::EvdDequeue)
    }
}

impl RoomSystem {
    /// Every system, evd first.
    pub const ALL: [RoomSystem; 8] = [
        RoomSystem::EvdDequeue,
        RoomSystem::EvdBatchWait,
        RoomSystem::CrossbeamChannel,
        RoomSystem::StdSyncChannel,
        RoomSystem::Flume,
        RoomSystem::TokioMpsc,
        RoomSystem::Kanal,
        RoomSystem::Thingbuf,
    ];

    /// How its consumer waits and how much it takes per call.
    pub fn style(self) -> Style {
        match self {
            RoomSystem::EvdBatchWait => Style::BlockingBatch,
            _ => Style::BlockingItem,
        }
    }

    /// Move `messages` events from `posters` threads in their blocking send
    /// to one consumer that does `work` per event. Fails if an event is lost
    /// or duplicated, or a channel breaks.
    pub fn run(
        self,
        capacity: usize,
        posters: usize,
        messages: u64,
        work: Work,
    ) -> Result<RunStats, String> {
        assert!(posters >= 1 && capacity >= 1);
        let mut stats = match self {
            RoomSystem::EvdDequeue | RoomSystem::EvdBatchWait => {
                let (tx, rx) = evd::bounded::<u64>(capacity).map_err(|e| e.to_string())?;
                // Counts the room wakes once the consumer is gone (it is
                // dropped when `consume` returns; see `drive`).
                let probe = tx.clone();
                let batch = self == RoomSystem::EvdBatchWait;
                let stats = drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    |tx: &evd::Poster<u64>, p| tx.post_blocking(p).map_err(|e| e.into_inner()),
                    move |sink| {
                        let mut rx = rx;
                        if batch {
                            consume_evd_batch(&mut rx, sink, capacity, work)
                        } else {
                            consume_evd_dequeue(&mut rx, sink, work)
                        }
                    },
                )?;
                RunStats {
                    room_wakes: Some(probe.query().room_wakes),
                    ..stats
                }
            }
            RoomSystem::CrossbeamChannel => {
                peer::<crossbeam_channel::Receiver<u64>>(capacity, posters, messages, work)?
            }
            RoomSystem::StdSyncChannel => {
                peer::<std::sync::mpsc::Receiver<u64>>(capacity, posters, messages, work)?
            }
            RoomSystem::Flume => peer::<flume::Receiver<u64>>(capacity, posters, messages, work)?,
            RoomSystem::TokioMpsc => {
                peer::<tokio::sync::mpsc::Receiver<u64>>(capacity, posters, messages, work)?
            }
            RoomSystem::Kanal => peer::<kanal::Receiver<u64>>(capacity, posters, messages, work)?,
            RoomSystem::Thingbuf => {
                peer::<thingbuf::mpsc::blocking::Receiver<u64>>(capacity, posters, messages, work)?
            }
        };
        // A blocking send's waits are not visible; `drive` counted only
        // sends refused as closed, which fail the run anyway.
        stats.full_refusals = None;
        if self != RoomSystem::EvdBatchWait {
            // Only the batch consumer makes non-blocking receive calls.
            stats.empty_polls = None;
        }
        Ok(stats)
    }
}

/// The case name of a room throughput case.
pub fn room_case(capacity: usize, posters: usize) -> String {
    format!("room/cap{capacity}/{posters}p")
}

fn consume_evd_dequeue(
    rx: &mut evd::Consumer<u64>,
    sink: &mut Sink<'_>,
    work: Work,
) -> Result<(), String> {
    loop {
        match rx.dequeue() {
            Ok(p) => {
                let done = sink.take(p.seq());
                work.run();
                if done {
                    return Ok(());
                }
            }
            // No post here is lossy: a loss report would be a broken promise.
            Err(evd::DequeueError::Overflow(o)) => {
                return Err(format!("{o}, but no post here is lossy"))
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn consume_evd_batch(
    rx: &mut evd::Consumer<u64>,
    sink: &mut Sink<'_>,
    capacity: usize,
    work: Work,
) -> Result<(), String> {
    let mut buf = Vec::with_capacity(capacity);
    loop {
        match rx.dequeue_batch(&mut buf, capacity) {
            Ok(0) | Err(evd::TryDequeueError::Empty) => {
                sink.empty();
                crate::throughput::wait_for_one(rx)?;
            }
            Ok(_) => {
                for p in buf.drain(..) {
                    sink.take(p.seq());
                    work.run();
                }
                if sink.done() {
                    return Ok(());
                }
            }
            Err(e) => return Err(dequeue_failed(e)),
        }
    }
}

/// A peer: posters in its blocking send, the consumer in its blocking
/// receive; the consumer is dropped when `drive`'s `consume` returns.
fn peer<C: Channel<u64>>(
    capacity: usize,
    posters: usize,
    messages: u64,
    work: Work,
) -> Result<RunStats, String> {
    let (tx, rx) = C::bounded(capacity);
    drive(
        posters,
        messages,
        clones(tx, posters),
        C::send,
        move |sink| {
            let mut rx = rx;
            blocking_loop(sink, || rx.recv(), || work.run())
        },
    )
}

/// A system under test in the room-wake latency case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoomWakeSystem {
    /// evd `post_blocking` on a full 1-slot ring; the harness `try_dequeue`s.
    EvdPostBlocking,
    /// crossbeam-channel `bounded(1)`: `send`; the harness `try_recv`s.
    CrossbeamSend,
    /// Floor: an atomic slot plus `thread::park` / `Thread::unpark` (the
    /// same measurement as the wake-latency floor).
    ParkFloor,
}

/// Every row is compared with the evd row; both systems sleep in a futex
/// park, whose floor is the raw park/unpark.
impl System for RoomWakeSystem {
    fn name(self) -> &'static str {
        match self {
            RoomWakeSystem::EvdPostBlocking => "evd post_blocking (park/unpark)",
            RoomWakeSystem::CrossbeamSend => "crossbeam-channel send",
            RoomWakeSystem::ParkFloor => WakeSystem::ParkFloor.name(),
        }
    }

    fn role(self) -> Role {
        match self {
            RoomWakeSystem::EvdPostBlocking => Role::Evd,
            RoomWakeSystem::CrossbeamSend => Role::Peer,
            RoomWakeSystem::ParkFloor => Role::Floor,
        }
    }

    fn baseline(self) -> Option<RoomWakeSystem> {
        Some(RoomWakeSystem::EvdPostBlocking)
    }

    fn floor(self) -> Option<RoomWakeSystem> {
        (!self.is_floor()).then_some(RoomWakeSystem::ParkFloor)
    }
}

impl RoomWakeSystem {
    /// Every system, evd first, the floor last.
    pub const ALL: [RoomWakeSystem; 3] = [
        RoomWakeSystem::EvdPostBlocking,
        RoomWakeSystem::CrossbeamSend,
        RoomWakeSystem::ParkFloor,
    ];

    /// Measure `samples` one-way room wakes, in nanoseconds.
    pub fn measure(self, samples: u64) -> Result<Histogram<u64>, String> {
        match self {
            RoomWakeSystem::EvdPostBlocking => {
                let (tx, rx) = evd::bounded::<u64>(1).map_err(|e| e.to_string())?;
                tx.post(0).map_err(|e| e.to_string())?;
                let (hist, rx) = blocked_poster(
                    samples,
                    rx,
                    move |i| tx.post_blocking(i).map_err(|e| e.to_string()),
                    |rx| rx.try_dequeue().map(drop).map_err(|e| e.to_string()),
                    |rx| rx.query().room_wanted,
                )?;
                let wakes = rx.query().room_wakes;
                if wakes != samples {
                    return Err(format!(
                        "{wakes} room wakes for {samples} samples: a sample was not one wake"
                    ));
                }
                Ok(hist)
            }
            RoomWakeSystem::CrossbeamSend => {
                let (tx, rx) = crossbeam_channel::bounded::<u64>(1);
                tx.send(0).map_err(|e| e.to_string())?;
                let (hist, _rx) = blocked_poster(
                    samples,
                    rx,
                    move |i| tx.send(i).map_err(|e| e.to_string()),
                    |rx| rx.try_recv().map(drop).map_err(|e| e.to_string()),
                    // Whether the sender is registered is not visible; its
                    // sleeping state is checked anyway.
                    |_| true,
                )?;
                Ok(hist)
            }
            RoomWakeSystem::ParkFloor => WakeSystem::ParkFloor.measure(samples),
        }
    }
}

/// Run `post` `samples` times on a new thread, on a queue full before each
/// call; the harness calls `free` once the poster has recorded the previous
/// sample, `waiting` says it waits for room, and it is asleep. On failure
/// the receiving side is dropped, which closes the queue and frees the
/// poster.
fn blocked_poster<R, P>(
    samples: u64,
    mut rx: R,
    mut post: P,
    free: impl Fn(&mut R) -> Result<(), String>,
    waiting: impl Fn(&R) -> bool,
) -> Result<(Histogram<u64>, R), String>
where
    P: FnMut(u64) -> Result<(), String> + Send + 'static,
{
    let freed_at = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let poster = {
        let (freed_at, received) = (freed_at.clone(), received.clone());
        std::thread::Builder::new()
            .name("room-poster".into())
            .spawn(move || {
                let _ = tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get());
                let mut hist = new_histogram();
                for i in 0..samples {
                    post(i)?;
                    let now = now_ns();
                    // Acquire: pairs with the harness's Release store, made
                    // before the receive that let this post in.
                    let t = freed_at.load(Ordering::Acquire);
                    hist.saturating_record(now.saturating_sub(t).max(1));
                    // Release: the harness sees the count only after the
                    // record, so it never frees a slot for a busy poster.
                    received.fetch_add(1, Ordering::Release);
                }
                Ok::<_, String>(hist)
            })
            .map_err(|e| e.to_string())?
    };
    let tid = tid_rx.recv().map_err(|e| e.to_string())?;
    let mut state = ThreadState::open(tid).map_err(|e| e.to_string())?;
    let mut failure = None;
    'samples: for i in 0..samples {
        let since = Instant::now();
        loop {
            if received.load(Ordering::Acquire) == i
                && waiting(&rx)
                && state.state().ok() == Some(b'S')
            {
                break;
            }
            if poster.is_finished() {
                // Its own error, if it has one, says more (below).
                failure = Some("poster ended early".to_string());
                break 'samples;
            }
            if since.elapsed() > SLEEP_TIMEOUT {
                failure = Some(format!("poster did not fall asleep after sample {i}"));
                break 'samples;
            }
            std::hint::spin_loop();
        }
        freed_at.store(now_ns(), Ordering::Release);
        if let Err(e) = free(&mut rx) {
            failure = Some(e);
            break;
        }
    }
    if let Some(f) = failure {
        // Closes the queue: a sleeping poster's send fails and its thread
        // ends. One that ended already is joined for its own error; one
        // that does not end is let go (it owns only its sending side).
        drop(rx);
        if poster.is_finished() {
            if let Ok(Err(e)) = poster.join() {
                return Err(format!("{f}: {e}"));
            }
        }
        return Err(f);
    }
    let hist = poster.join().map_err(|_| "poster panicked".to_string())??;
    Ok((hist, rx))
}
