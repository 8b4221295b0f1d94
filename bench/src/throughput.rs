//! Throughput ([`Queue`]): posters into one consumer through one bounded queue of [`CAPACITY`]
//! slots, timed from a start barrier to the last event, with a checksum and the run's diagnostics
//! ([`RunStats`]); every poster retries a refused send the same way ([`POSTER_POLICY`]). How the
//! rows are run and compared: bench/README.md.

use crate::payload::{Payload, Tally};
use crate::peers::{Channel, TryIter};
use crate::report::{Diagnostics, Role, Row};
use std::iter::repeat_n;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The capacity every queue gets.
pub const CAPACITY: usize = 1024;

/// Every thread of a run reads its CPU (`getcpu`) once per this many events it moves.
pub const CPU_SAMPLE_EVERY: u64 = 1024;

/// What every poster of every system does, for the tables and the report.
pub const POSTER_POLICY: &str = "every system's poster uses its non-blocking bounded send \
(evd post, ArrayQueue push, try_send elsewhere); when it is refused as full the poster takes the \
value back and retries it after std::hint::spin_loop(), calling std::thread::yield_now() \
instead on every 64th refusal in a row";

/// A CPU slot whose thread has not started or has finished.
pub(crate) const NO_CPU: u32 = u32::MAX;

/// The CPU the calling thread runs on.
#[inline]
pub(crate) fn current_cpu() -> u32 {
    rustix::thread::sched_getcpu() as u32
}

/// A system under test in the throughput cases ([`Queue::row`] names each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Queue {
    /// evd, `try_dequeue` in a loop.
    EvdSingle,
    /// evd, `try_dequeue` in a loop; every poster takes a permit (`try_reserve`) and sends with
    /// it: the cost of the permit path, beside [`Queue::EvdSingle`] whose posters take none.
    EvdReserve,
    /// crossbeam-queue `ArrayQueue`, `pop` in a loop.
    ArrayQueue,
    /// evd, `try_dequeue` in a loop with its linger off (`set_linger_cap(0)`): the pacing's share of
    /// [`Queue::EvdSingle`]'s rate, the consumer polled as `ArrayQueue`'s is.
    EvdNoLinger,
    /// evd, `dequeue_batch` in a loop.
    EvdBatch,
    /// evd, `try_dequeue`; when empty `wait(1, None)` (back off on the slots, arm, park).
    EvdItemWait,
    /// crossbeam-channel `bounded`, blocking `recv`.
    CrossbeamChannel,
    /// `std::sync::mpsc::sync_channel`, blocking `recv`.
    StdSyncChannel,
    /// tokio `mpsc::channel`, `blocking_recv`.
    TokioMpsc,
    /// flume `bounded`, blocking `recv`.
    Flume,
    /// kanal `bounded`, blocking `recv`.
    Kanal,
    /// thingbuf `mpsc::blocking::channel`, blocking `recv`.
    Thingbuf,
    /// evd, `dequeue_batch`; when it returns nothing `wait(1, None)`.
    EvdWait,
    /// evd, `dequeue_batch`; when it returns nothing `arm()`, and if armed `wait(1, None)`.
    EvdArmWait,
    /// crossbeam-channel, drain with `try_iter`, and when that yields nothing block in `recv`.
    CrossbeamTryIter,
    /// `std::sync::mpsc::sync_channel`, drained the same way.
    StdTryIter,
    /// tokio `mpsc::channel`, `blocking_recv_many`.
    TokioRecvMany,
    /// evd, `dequeue_with` in a loop (the batch handed to a closure, no `Vec`).
    EvdWith,
    /// Floor: a [`crate::stamp_ring`] without an RMW, one poster only.
    FloorStampRing,
    /// Floor: a [`crate::stamp_ring`] whose posters reserve with one CAS on a shared tail.
    FloorStampRingCas,
    /// Floor: a [`crate::stamp_ring`] whose posters reserve with one fetch-and-add.
    FloorStampRingFaa,
}

const BUSY_ITEM: &str = "busy/item";
const BUSY_BATCH: &str = "busy/batch";
const BLOCKING_ITEM: &str = "blocking/item";
const BLOCKING_BATCH: &str = "blocking/batch";

impl Queue {
    /// Every system, grouped by consumer style, evd first in each group.
    pub const ALL: [Queue; 18] = [
        Queue::EvdSingle,
        Queue::ArrayQueue,
        Queue::EvdNoLinger,
        Queue::EvdReserve,
        Queue::EvdBatch,
        Queue::EvdWith,
        Queue::EvdItemWait,
        Queue::CrossbeamChannel,
        Queue::StdSyncChannel,
        Queue::TokioMpsc,
        Queue::Flume,
        Queue::Kanal,
        Queue::Thingbuf,
        Queue::EvdWait,
        Queue::EvdArmWait,
        Queue::CrossbeamTryIter,
        Queue::StdTryIter,
        Queue::TokioRecvMany,
    ];

    /// The floor rows ([`crate::stamp_ring`]), not in [`Queue::ALL`].
    pub const FLOORS: [Queue; 3] = [
        Queue::FloorStampRing,
        Queue::FloorStampRingCas,
        Queue::FloorStampRingFaa,
    ];

    /// Its row: its consumer style, and the evd row of that style as its baseline (none for an evd
    /// variant).
    #[rustfmt::skip]
    pub fn row(self) -> Row {
        use {Queue::*, Role::*};
        let (name, consumer, role, baseline) = match self {
            EvdSingle => ("evd try_dequeue", BUSY_ITEM, Evd, Some("evd try_dequeue")),
            ArrayQueue => ("crossbeam ArrayQueue", BUSY_ITEM, Peer, Some("evd try_dequeue")),
            EvdNoLinger => ("evd try_dequeue, no linger", BUSY_ITEM, Evd, None),
            EvdReserve => ("evd try_reserve+send", BUSY_ITEM, Evd, None),
            EvdBatch => ("evd dequeue_batch", BUSY_BATCH, Evd, Some("evd dequeue_batch")),
            EvdWith => ("evd dequeue_with", BUSY_BATCH, Evd, None),
            EvdItemWait => ("evd try_dequeue+wait", BLOCKING_ITEM, Evd, Some("evd try_dequeue+wait")),
            CrossbeamChannel => ("crossbeam-channel recv", BLOCKING_ITEM, Peer, Some("evd try_dequeue+wait")),
            StdSyncChannel => ("std sync_channel recv", BLOCKING_ITEM, Peer, Some("evd try_dequeue+wait")),
            TokioMpsc => ("tokio mpsc blocking_recv", BLOCKING_ITEM, Peer, Some("evd try_dequeue+wait")),
            Flume => ("flume recv", BLOCKING_ITEM, Peer, Some("evd try_dequeue+wait")),
            Kanal => ("kanal recv", BLOCKING_ITEM, Peer, Some("evd try_dequeue+wait")),
            Thingbuf => ("thingbuf mpsc recv", BLOCKING_ITEM, Peer, Some("evd try_dequeue+wait")),
            EvdWait => ("evd batch+wait", BLOCKING_BATCH, Evd, Some("evd batch+wait")),
            EvdArmWait => ("evd batch+arm+wait", BLOCKING_BATCH, Evd, None),
            CrossbeamTryIter => ("crossbeam-channel try_iter+recv", BLOCKING_BATCH, Peer, Some("evd batch+wait")),
            StdTryIter => ("std sync_channel try_iter+recv", BLOCKING_BATCH, Peer, Some("evd batch+wait")),
            TokioRecvMany => ("tokio mpsc blocking_recv_many", BLOCKING_BATCH, Peer, Some("evd batch+wait")),
            FloorStampRing => ("floor: 1-poster stamp ring, no RMW", BUSY_ITEM, Floor, Some("evd try_dequeue")),
            FloorStampRingCas => ("floor: stamp ring + 1 CAS per post", BUSY_ITEM, Floor, Some("evd try_dequeue")),
            FloorStampRingFaa => ("floor: stamp ring + 1 fetch_add per post", BUSY_ITEM, Floor, Some("evd try_dequeue")),
        };
        Row::new(name, role, consumer, baseline, None)
    }

    /// The most posters it runs with (`None`: any number). Above 2 posters the case is
    /// oversubscribed and has no target, so the RMW floors are not run there.
    pub fn max_posters(self) -> Option<usize> {
        match self {
            Queue::FloorStampRing => Some(1),
            Queue::FloorStampRingCas | Queue::FloorStampRingFaa => Some(2),
            _ => None,
        }
    }

    /// Whether it runs in the `posters`-poster cases ([`Queue::max_posters`]).
    pub fn runs_with(self, posters: usize) -> bool {
        self.max_posters().is_none_or(|most| posters <= most)
    }

    /// Move `messages` events of type `P` from `posters` threads to one consumer. Fails if an event
    /// is lost or duplicated, or a channel breaks.
    pub fn run<P: Payload>(self, posters: usize, messages: u64) -> Result<RunStats, String> {
        use Queue::*;
        assert!(posters >= 1);
        if let Some(most) = self.max_posters().filter(|&most| posters > most) {
            return Err(format!(
                "{}: {posters} posters, at most {most}",
                self.row().name
            ));
        }
        let stats = match self {
            EvdSingle | EvdNoLinger | EvdReserve | EvdBatch | EvdWith | EvdItemWait | EvdWait
            | EvdArmWait => {
                let (tx, mut rx) = evd::bounded::<P>(CAPACITY).map_err(|e| e.to_string())?;
                if self == EvdNoLinger {
                    rx.set_linger_cap(Duration::ZERO);
                }
                let post = |tx: &evd::Poster<P>, p| tx.post(p).map_err(evd::PostError::into_inner);
                let reserve_and_send = |tx: &evd::Poster<P>, p| match tx.try_reserve() {
                    Ok(permit) => permit.send(p).map_err(evd::PostError::into_inner),
                    Err(_) => Err(p),
                };
                let consume = |sink: &mut Sink<'_>| {
                    let (rx, mut buf) = (&mut rx, Vec::with_capacity(CAPACITY));
                    let batch = |rx: &mut _, s: &mut _| evd_batch(rx, s, &mut buf, CAPACITY, || {});
                    match self {
                        EvdSingle | EvdNoLinger | EvdReserve => polling(rx, sink, evd_item, spin),
                        EvdItemWait => polling(rx, sink, evd_item, |rx, _| wait_for_one(rx)),
                        EvdBatch => polling(rx, sink, batch, spin),
                        EvdWait => polling(rx, sink, batch, |rx, _| wait_for_one(rx)),
                        EvdArmWait => polling(rx, sink, batch, |rx, _| arm_then_wait(rx)),
                        _ => polling(rx, sink, evd_with, spin),
                    }
                };
                // Each poster loop is its own instance of `drive`: the plain post's is the same
                // code whether or not the permit row exists.
                let mut stats = match self {
                    EvdReserve => {
                        drive(messages, repeat_n(tx, posters), reserve_and_send, consume)?
                    }
                    _ => drive(messages, repeat_n(tx, posters), post, consume)?,
                };
                stats.room_wakes = Some(rx.query().room_wakes);
                stats
            }
            FloorStampRing | FloorStampRingCas | FloorStampRingFaa => {
                use crate::stamp_ring::{Reserve, stamp_ring};
                let reserve = match self {
                    FloorStampRing => Reserve::Own,
                    FloorStampRingCas => Reserve::CasTail,
                    _ => Reserve::FaaTail,
                };
                let (tx, mut rx) = stamp_ring::<P>(CAPACITY, reserve);
                let mut senders: Vec<_> = (1..posters).filter_map(|_| tx.another()).collect();
                senders.insert(0, tx);
                let consume = |sink: &mut Sink<'_>| {
                    polling(&mut rx, sink, |rx, s| Ok(took(s, rx.try_recv())), spin)
                };
                drive(messages, senders, |tx, p| tx.try_send(p), consume)?
            }
            ArrayQueue => {
                let q = Arc::new(crossbeam_queue::ArrayQueue::<P>::new(CAPACITY));
                let push = |q: &Arc<crossbeam_queue::ArrayQueue<P>>, p| q.push(p);
                let consume = |sink: &mut Sink<'_>| {
                    polling(&mut &*q, sink, |q, s| Ok(took(s, q.pop())), spin)
                };
                drive(messages, repeat_n(q.clone(), posters), push, consume)?
            }
            CrossbeamChannel => peer::<crossbeam_channel::Receiver<P>, P>(posters, messages)?,
            StdSyncChannel => peer::<std::sync::mpsc::Receiver<P>, P>(posters, messages)?,
            TokioMpsc => peer::<tokio::sync::mpsc::Receiver<P>, P>(posters, messages)?,
            Flume => peer::<flume::Receiver<P>, P>(posters, messages)?,
            Kanal => peer::<kanal::Receiver<P>, P>(posters, messages)?,
            Thingbuf => peer::<thingbuf::mpsc::blocking::Receiver<P>, P>(posters, messages)?,
            CrossbeamTryIter => {
                try_iter_peer::<crossbeam_channel::Receiver<P>, P>(posters, messages)?
            }
            StdTryIter => try_iter_peer::<std::sync::mpsc::Receiver<P>, P>(posters, messages)?,
            TokioRecvMany => {
                type Rx<P> = tokio::sync::mpsc::Receiver<P>;
                let (tx, mut rx) = Rx::<P>::bounded(CAPACITY);
                let mut buf = Vec::with_capacity(CAPACITY);
                let recv_many = |rx: &mut Rx<P>, s: &mut Sink<'_>| {
                    if rx.blocking_recv_many(&mut buf, CAPACITY) == 0 {
                        return Err("channel closed early".to_string());
                    }
                    buf.drain(..).for_each(|p| _ = s.take(p.seq()));
                    Ok(true)
                };
                let consume = |sink: &mut Sink<'_>| polling(&mut rx, sink, recv_many, spin);
                let stats = drive(messages, repeat_n(tx, posters), Rx::try_send, consume)?;
                only_blocking_receives(stats)
            }
        };
        Ok(stats)
    }
}

/// A peer whose consumer takes one event per blocking receive.
fn peer<C: Channel<P>, P: Payload>(posters: usize, messages: u64) -> Result<RunStats, String> {
    let (tx, mut rx) = C::bounded(CAPACITY);
    let consume =
        |sink: &mut Sink<'_>| polling(&mut rx, sink, |rx, s| recv_one(rx, s, || {}), spin);
    let stats = drive(messages, repeat_n(tx, posters), C::try_send, consume)?;
    Ok(only_blocking_receives(stats))
}

/// A peer whose consumer drains what is there with `try_iter`, and when that yields nothing blocks
/// in `recv`: its empty polls are the drains that found nothing.
fn try_iter_peer<C: TryIter<P>, P: Payload>(
    posters: usize,
    messages: u64,
) -> Result<RunStats, String> {
    let (tx, mut rx) = C::bounded(CAPACITY);
    let drain = |rx: &mut C, s: &mut Sink<'_>| {
        if rx.take_ready(CAPACITY, |p| _ = s.take(p.seq())) == 0 {
            s.empty();
            let p = rx.recv().ok_or("channel closed early")?;
            s.take(p.seq());
        }
        // Either way an event came: no back-off after a receive that blocked for it.
        Ok(true)
    };
    let consume = |sink: &mut Sink<'_>| polling(&mut rx, sink, drain, spin);
    drive(messages, repeat_n(tx, posters), C::try_send, consume)
}

/// The stats of a consumer that only calls a blocking receive: its empty polls are not countable.
fn only_blocking_receives(stats: RunStats) -> RunStats {
    RunStats {
        empty_polls: None,
        ..stats
    }
}

/// What one throughput run measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunStats {
    /// From the start barrier to the consumer's last event.
    pub elapsed: Duration,
    /// Events moved.
    pub messages: u64,
    /// Consumer calls that returned no event; `None` if the consumer only calls a blocking receive.
    pub empty_polls: Option<u64>,
    /// Posts refused as full, summed over the posters; `None` for blocking sends.
    pub full_refusals: Option<u64>,
    /// evd only: [`evd::Query::room_wakes`] during the run.
    pub room_wakes: Option<u64>,
    /// Consumer CPU samples compared with a running poster's latest sample.
    pub cpu_samples: u64,
    /// Of those, how many found the poster on the consumer's CPU.
    pub same_cpu: u64,
    /// [`crate::cno`] throughput only: most over fewest events served per EVD.
    pub served_max_over_min: Option<f64>,
}

impl RunStats {
    /// Events per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The run's diagnostics, per event moved (the CPU share: of the CPU samples).
    pub fn diagnostics(&self) -> Diagnostics {
        let per_msg = |n: Option<u64>| n.map(|n| n as f64 / self.messages.max(1) as f64);
        let samples = self.cpu_samples;
        Diagnostics {
            empty_polls_per_msg: per_msg(self.empty_polls),
            full_refusals_per_msg: per_msg(self.full_refusals),
            room_wakes_per_msg: per_msg(self.room_wakes),
            same_cpu_share: (samples > 0).then(|| self.same_cpu as f64 / samples as f64),
        }
    }
}

/// The retry policy of every busy loop (a poster refused as full, a busy consumer that found
/// nothing): spin, and yield the CPU every 64 misses in a row so that on a machine with fewer cores
/// than threads the thread we wait for gets to run.
#[derive(Default, Debug)]
pub struct BusyWait {
    misses: u32,
}

impl BusyWait {
    /// The last try failed.
    #[inline(always)]
    pub fn miss(&mut self) {
        self.misses = self.misses.wrapping_add(1);
        if self.misses.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// The last try succeeded.
    #[inline(always)]
    pub fn hit(&mut self) {
        self.misses = 0;
    }
}

/// The consumer's side of a run: checksum, empty polls, CPU samples.
pub struct Sink<'a> {
    tally: Tally,
    empty_polls: u64,
    poster_cpus: &'a [AtomicU32],
    cpu_samples: u64,
    same_cpu: u64,
}

impl Sink<'_> {
    /// Count one event; true once all expected events have arrived.
    #[inline(always)]
    pub fn take(&mut self, seq: u64) -> bool {
        let done = self.tally.take(seq);
        if self.tally.count.is_multiple_of(CPU_SAMPLE_EVERY) {
            self.sample_cpu();
        }
        done
    }

    /// True once all expected events have arrived.
    #[inline(always)]
    pub fn done(&self) -> bool {
        self.tally.done()
    }

    /// The consumer's receive call returned no event.
    #[inline(always)]
    pub fn empty(&mut self) {
        self.empty_polls += 1;
    }

    #[cold]
    #[inline(never)]
    fn sample_cpu(&mut self) {
        let me = current_cpu();
        for slot in self.poster_cpus {
            let theirs = slot.load(Ordering::Relaxed);
            if theirs != NO_CPU {
                self.cpu_samples += 1;
                self.same_cpu += u64::from(theirs == me);
            }
        }
    }
}

/// One thread per sender (`std::iter::repeat_n` makes them from a handle); poster `i` of `n` sends the sequence numbers `i, i + n, ...` below `messages`, so the consumer's
/// checksum covers `0..messages` exactly once. `send` hands a value refused as full back; the
/// poster counts it, calls [`BusyWait::miss`] and retries it ([`crate::room`] passes a blocking
/// send, which hands a value back only once the queue is closed).
pub(crate) fn drive<P: Payload, S: Send>(
    messages: u64,
    senders: impl IntoIterator<Item = S>,
    send: impl Fn(&S, P) -> Result<(), P> + Sync,
    consume: impl FnOnce(&mut Sink<'_>) -> Result<(), String>,
) -> Result<RunStats, String> {
    let senders: Vec<S> = senders.into_iter().collect();
    let posters = senders.len();
    let poster = |i: usize, tx: S, slot: &AtomicU32, abort: &AtomicBool| {
        let mut wait = BusyWait::default();
        let (mut refused, mut sent) = (0u64, 0u64);
        let mut seq = i as u64;
        'posting: while seq < messages {
            let mut p = P::from_seq(seq);
            while let Err(back) = send(&tx, p) {
                p = back;
                refused += 1;
                if abort.load(Ordering::Relaxed) {
                    break 'posting;
                }
                wait.miss();
            }
            wait.hit();
            sent += 1;
            if sent % CPU_SAMPLE_EVERY == 0 {
                slot.store(current_cpu(), Ordering::Relaxed);
            }
            seq += posters as u64;
        }
        drop(tx);
        refused
    };
    harness(senders, messages, poster, consume)
}

/// One thread per element of `posters` runs `post(i, element, its CPU slot, abort)`, returning its
/// refusals; all start at one barrier with `consume` (timed, on this thread). Fails if `consume`
/// fails or an event is missing or doubled.
pub(crate) fn harness<S: Send>(
    posters: Vec<S>,
    messages: u64,
    post: impl Fn(usize, S, &AtomicU32, &AtomicBool) -> u64 + Sync,
    consume: impl FnOnce(&mut Sink<'_>) -> Result<(), String>,
) -> Result<RunStats, String> {
    let barrier = Barrier::new(posters.len() + 1);
    let cpus: Vec<AtomicU32> = posters.iter().map(|_| AtomicU32::new(NO_CPU)).collect();
    let refusals = AtomicU64::new(0);
    // Set when the consumer fails, so that posters refused by a queue nobody drains any more give
    // up instead of retrying forever.
    let abort = AtomicBool::new(false);
    let (elapsed, sink) = std::thread::scope(|scope| {
        for (i, (tx, slot)) in posters.into_iter().zip(&cpus).enumerate() {
            let (barrier, post, refusals, abort) = (&barrier, &post, &refusals, &abort);
            scope.spawn(move || {
                barrier.wait();
                slot.store(current_cpu(), Ordering::Relaxed);
                let refused = post(i, tx, slot, abort);
                slot.store(NO_CPU, Ordering::Relaxed);
                refusals.fetch_add(refused, Ordering::Relaxed);
            });
        }
        let mut sink = Sink {
            tally: Tally::new(messages),
            empty_polls: 0,
            poster_cpus: &cpus,
            cpu_samples: 0,
            same_cpu: 0,
        };
        barrier.wait();
        let start = Instant::now();
        if messages > 0
            && let Err(e) = consume(&mut sink)
        {
            abort.store(true, Ordering::Relaxed);
            return Err(e);
        }
        Ok::<_, String>((start.elapsed(), sink))
    })?;
    sink.tally.verify()?;
    Ok(RunStats {
        elapsed,
        messages,
        empty_polls: Some(sink.empty_polls),
        full_refusals: Some(refusals.load(Ordering::Relaxed)),
        cpu_samples: sink.cpu_samples,
        same_cpu: sink.same_cpu,
        ..RunStats::default()
    })
}

/// The loop of every consumer: `poll` hands what it got to the sink and says whether it got
/// anything; after a poll that got nothing the sink counts an empty poll and `idle` runs (a spin, a
/// wait).
#[inline(always)]
pub(crate) fn polling<'s, R>(
    rx: &mut R,
    sink: &mut Sink<'s>,
    mut poll: impl FnMut(&mut R, &mut Sink<'s>) -> Result<bool, String>,
    mut idle: impl FnMut(&mut R, &mut BusyWait) -> Result<(), String>,
) -> Result<(), String> {
    let mut wait = BusyWait::default();
    while !sink.done() {
        if poll(rx, sink)? {
            wait.hit();
        } else {
            sink.empty();
            idle(rx, &mut wait)?;
        }
    }
    Ok(())
}

/// The idle step of a busy consumer.
#[inline(always)]
pub(crate) fn spin<R>(_: &mut R, wait: &mut BusyWait) -> Result<(), String> {
    wait.miss();
    Ok(())
}

/// Count the event, if there is one.
#[inline(always)]
fn took<P: Payload>(sink: &mut Sink<'_>, p: Option<P>) -> bool {
    p.map(|p| sink.take(p.seq())).is_some()
}

/// One blocking receive of a peer, then `work` ([`crate::room`]'s fixed work per event).
#[inline(always)]
pub(crate) fn recv_one<C: Channel<P>, P: Payload>(
    rx: &mut C,
    sink: &mut Sink<'_>,
    work: impl Fn(),
) -> Result<bool, String> {
    let p = rx.recv().ok_or("channel closed early")?;
    sink.take(p.seq());
    work();
    Ok(true)
}

#[inline(always)]
fn evd_item<P: Payload>(rx: &mut evd::Consumer<P>, sink: &mut Sink<'_>) -> Result<bool, String> {
    match rx.try_dequeue() {
        Ok(p) => Ok(took(sink, Some(p))),
        Err(evd::TryDequeueError::Empty) => Ok(false),
        Err(e) => Err(dequeue_failed(e)),
    }
}

/// One `dequeue_batch` of at most `max` events, `work` after each.
#[inline(always)]
pub(crate) fn evd_batch<P: Payload>(
    rx: &mut evd::Consumer<P>,
    sink: &mut Sink<'_>,
    buf: &mut Vec<P>,
    max: usize,
    work: impl Fn(),
) -> Result<bool, String> {
    match rx.dequeue_batch(buf, max) {
        Ok(0) | Err(evd::TryDequeueError::Empty) => Ok(false),
        Ok(_) => {
            for p in buf.drain(..) {
                sink.take(p.seq());
                work();
            }
            Ok(true)
        }
        Err(e) => Err(dequeue_failed(e)),
    }
}

#[inline(always)]
fn evd_with<P: Payload>(rx: &mut evd::Consumer<P>, sink: &mut Sink<'_>) -> Result<bool, String> {
    match rx.dequeue_with(CAPACITY, |p| _ = sink.take(p.seq())) {
        Ok(0) | Err(evd::TryDequeueError::Empty) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) => Err(dequeue_failed(e)),
    }
}

/// When empty: `wait(1)` (back off, arm, sleep: the README's loop).
pub(crate) fn wait_for_one<P: Payload>(rx: &mut evd::Consumer<P>) -> Result<(), String> {
    match rx.wait(1, None) {
        Ok(_) => Ok(()),
        // No post here is lossy: a loss report would be a broken promise.
        Err(evd::WaitError::Overflow(o)) => Err(format!("{o}, but no post here is lossy")),
        Err(evd::WaitError::Closed { .. }) => Err("evd closed early".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// When empty: `arm()`, and `wait(1)` if armed (a CAS per empty poll).
fn arm_then_wait<P: Payload>(rx: &mut evd::Consumer<P>) -> Result<(), String> {
    match rx.arm() {
        evd::ArmStatus::Armed => wait_for_one(rx),
        evd::ArmStatus::Pending => Ok(()),
        evd::ArmStatus::Closed => Err("evd closed early".into()),
    }
}

/// No post here is lossy and the posters outlive the consumer: any dequeue error but `Empty` fails
/// the run.
pub(crate) fn dequeue_failed(e: evd::TryDequeueError) -> String {
    match e {
        evd::TryDequeueError::Overflow(o) => format!("{o}, but no post here is lossy"),
        evd::TryDequeueError::Closed => "evd closed early".into(),
        e => e.to_string(),
    }
}
