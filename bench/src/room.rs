//! Posters that wait for room ([`ROOM`]: a slow consumer doing the same [`Work`] per event behind
//! a small ring, so that posters sleep in their blocking send) and the room-wake latency
//! ([`ROOM_WAKE`]). How both are run: bench/README.md.

use crate::latency::{Latency, PARK_FLOOR, Sampled, asleep, now_ns, park_floor};
use crate::peers::Channel;
use crate::report::{Role::*, Row};
use crate::throughput::{RunStats, Sink};
use crate::throughput::{drive, evd_batch, polling, recv_one, spin, wait_for_one};
use hdrhistogram::Histogram;
use std::hint::black_box;
use std::iter::repeat_n;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The ring capacities of the room throughput cases.
pub const CAPACITIES: [usize; 2] = [64, 1024];

/// The poster counts of the room throughput cases.
pub const POSTERS: [usize; 2] = [1, 2];

/// What the consumer's fixed work per event is calibrated to, in ns.
pub const WORK_NS: f64 = 750.0;

/// What every room poster and consumer does, for the tables and the notes.
pub const ROOM_POLICY: &str = "every poster uses its system's blocking bounded send (evd \
post_blocking, send elsewhere, tokio blocking_send) and sleeps in it while the queue is full; the \
consumer does the same fixed busy work per event in every system";

/// The consumer's fixed work per event: `iters` iterations of a loop whose counter goes through
/// [`black_box`], the same count for every system.
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

    /// The iteration count that takes about `ns` nanoseconds now, timed by the fastest (least
    /// disturbed) of a few runs.
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

/// Move `messages` events from `posters` posters in their blocking send, through a ring of
/// `capacity` slots, to one consumer that does `work` per event.
pub type RoomRun = fn(capacity: usize, posters: usize, messages: u64, work: Work) -> RoomStats;

/// A room run's figures; fails if an event is lost or duplicated, or a channel breaks.
pub type RoomStats = Result<RunStats, String>;

/// A system of the room throughput cases.
#[derive(Clone, Copy, Debug)]
pub struct RoomSystem {
    /// How its records name and compare it.
    pub row: Row,
    /// Its run.
    pub run: RoomRun,
}

const EVD_ROOM: Option<&str> = Some("evd post_blocking+dequeue");

/// The room systems, evd first, named by the blocking send and then the receive; every peer's
/// consumer takes one event per call, like the evd reference row.
#[rustfmt::skip]
pub const ROOM: [RoomSystem; 8] = [
    RoomSystem { row: Row::new("evd post_blocking+dequeue", Evd, "blocking/item", EVD_ROOM, None), run: evd_room::<false> },
    RoomSystem { row: Row::new("evd post_blocking+batch+wait", Evd, "blocking/batch", None, None), run: evd_room::<true> },
    RoomSystem { row: Row::new("crossbeam-channel send+recv", Peer, "blocking/item", EVD_ROOM, None), run: peer::<crossbeam_channel::Receiver<u64>> },
    RoomSystem { row: Row::new("std sync_channel send+recv", Peer, "blocking/item", EVD_ROOM, None), run: peer::<std::sync::mpsc::Receiver<u64>> },
    RoomSystem { row: Row::new("flume send+recv", Peer, "blocking/item", EVD_ROOM, None), run: peer::<flume::Receiver<u64>> },
    RoomSystem { row: Row::new("tokio mpsc blocking_send+blocking_recv", Peer, "blocking/item", EVD_ROOM, None), run: peer::<tokio::sync::mpsc::Receiver<u64>> },
    RoomSystem { row: Row::new("kanal send+recv", Peer, "blocking/item", EVD_ROOM, None), run: peer::<kanal::Receiver<u64>> },
    RoomSystem { row: Row::new("thingbuf mpsc send+recv", Peer, "blocking/item", EVD_ROOM, None), run: peer::<thingbuf::mpsc::blocking::Receiver<u64>> },
];

/// The case name of a room throughput case.
pub fn room_case(capacity: usize, posters: usize) -> String {
    format!("room/cap{capacity}/{posters}p")
}

/// evd: `post_blocking`; the consumer `dequeue`s one event per call, or with `BATCH`
/// `dequeue_batch`es, and when that returns nothing `wait`s.
fn evd_room<const BATCH: bool>(
    capacity: usize,
    posters: usize,
    messages: u64,
    work: Work,
) -> RoomStats {
    let (tx, rx) = evd::bounded::<u64>(capacity).map_err(|e| e.to_string())?;
    // Counts the room wakes once the consumer is gone: it is dropped when `consume` returns, which
    // frees posters blocked in a run that failed.
    let probe = tx.clone();
    let post = |tx: &evd::Poster<u64>, p| tx.post_blocking(p).map_err(evd::PostError::into_inner);
    let mut stats = drive(messages, repeat_n(tx, posters), post, move |sink| {
        let mut rx = rx;
        if BATCH {
            let mut buf = Vec::with_capacity(capacity);
            let poll = |rx: &mut _, s: &mut _| evd_batch(rx, s, &mut buf, capacity, || work.run());
            return polling(&mut rx, sink, poll, |rx, _| wait_for_one(rx));
        }
        let dequeue = |rx: &mut evd::Consumer<u64>, s: &mut Sink<'_>| {
            let p = rx.dequeue().map_err(|e| match e {
                // No post here is lossy: a loss report would be a broken promise.
                evd::DequeueError::Overflow(o) => format!("{o}, but no post here is lossy"),
                e => e.to_string(),
            })?;
            s.take(p);
            work.run();
            Ok(true)
        };
        polling(&mut rx, sink, dequeue, spin)
    })?;
    // A blocking send's waits are not visible; only the batch consumer polls.
    stats.full_refusals = None;
    stats.empty_polls = stats.empty_polls.filter(|_| BATCH);
    stats.room_wakes = Some(probe.query().room_wakes);
    Ok(stats)
}

/// A peer: posters in its blocking send, the consumer in its blocking receive.
fn peer<C: Channel<u64>>(capacity: usize, posters: usize, messages: u64, work: Work) -> RoomStats {
    let (tx, mut rx) = C::bounded(capacity);
    let consume = move |sink: &mut Sink<'_>| {
        polling(&mut rx, sink, |rx, s| recv_one(rx, s, || work.run()), spin)
    };
    let mut stats = drive(messages, repeat_n(tx, posters), C::send, consume)?;
    (stats.full_refusals, stats.empty_polls) = (None, None);
    Ok(stats)
}

const EVD_ROOM_WAKE: &str = "evd post_blocking (park/unpark)";

/// The room-wake-latency systems: every row is compared with evd's, and both sleep in a futex park,
/// whose floor is the raw park/unpark.
#[rustfmt::skip]
pub const ROOM_WAKE: [Latency; 3] = [
    Latency::new(Row::new(EVD_ROOM_WAKE, Evd, "blocking", Some(EVD_ROOM_WAKE), Some(PARK_FLOOR)), 2, evd_room_wake),
    Latency::new(Row::new("crossbeam-channel send", Peer, "blocking", Some(EVD_ROOM_WAKE), Some(PARK_FLOOR)), 2, crossbeam_room_wake),
    Latency::new(Row::new(PARK_FLOOR, Floor, "blocking", Some(EVD_ROOM_WAKE), None), 2, park_floor),
];

/// evd `post_blocking` on a full 1-slot ring; the harness `try_dequeue`s. Fails unless every sample
/// was one room wake.
fn evd_room_wake(samples: u64) -> Sampled {
    let (tx, rx) = evd::bounded::<u64>(1).map_err(|e| e.to_string())?;
    tx.post(0).map_err(|e| e.to_string())?;
    let (hist, rx) = blocked_poster(
        samples,
        rx,
        move |i| tx.post_blocking(i).map_err(|e| e.to_string()),
        |rx| rx.query().room_wanted,
        |rx| rx.try_dequeue().map(drop).map_err(|e| e.to_string()),
    )?;
    let wakes = rx.query().room_wakes;
    if wakes != samples {
        return Err(format!(
            "{wakes} room wakes for {samples} samples: a sample was not one wake"
        ));
    }
    Ok((hist, None))
}

/// crossbeam-channel `bounded(1)`: `send`; the harness `try_recv`s.
fn crossbeam_room_wake(samples: u64) -> Sampled {
    let (tx, rx) = crossbeam_channel::bounded::<u64>(1);
    tx.send(0).map_err(|e| e.to_string())?;
    let (hist, _) = blocked_poster(
        samples,
        rx,
        move |i| tx.send(i).map_err(|e| e.to_string()),
        // Whether the sender is registered is not visible; its sleeping state is checked anyway.
        |_| true,
        |rx| rx.try_recv().map(drop).map_err(|e| e.to_string()),
    )?;
    Ok((hist, None))
}

/// [`asleep`] for a poster thread that calls `post` on a queue full before each call; the harness
/// calls `free` once `waiting` says the poster waits for room (and it sleeps), after taking the
/// time the poster's sample starts from.
fn blocked_poster<R>(
    samples: u64,
    rx: R,
    mut post: impl FnMut(u64) -> Result<(), String> + Send + 'static,
    waiting: impl Fn(&R) -> bool,
    free: impl Fn(&mut R) -> Result<(), String>,
) -> Result<(Histogram<u64>, R), String> {
    let freed_at = Arc::new(AtomicU64::new(0));
    let start = freed_at.clone();
    let thread = move |record: &mut dyn FnMut(u64, u64)| {
        for i in 0..samples {
            post(i)?;
            let now = now_ns();
            // Acquire: pairs with the harness's Release store, made before the receive that let
            // this post in.
            record(start.load(Ordering::Acquire), now);
        }
        Ok(())
    };
    asleep("room-poster", samples, thread, rx, waiting, |rx, _| {
        freed_at.store(now_ns(), Ordering::Release);
        free(rx)
    })
}
