//! Throughput: `posters` threads post into one consumer through one bounded
//! queue of the same capacity; the time runs from a start barrier to the
//! consumer's last event, and a checksum proves every event arrived once.
//!
//! **Posters: one policy for every system.** Every poster uses its system's
//! *non-blocking* bounded send; when the send is refused because the queue is
//! full, the poster takes the value back and retries after [`BusyWait::miss`]
//! (`std::hint::spin_loop()`, and `std::thread::yield_now()` on every 64th
//! refusal in a row). The loop is written once, in `drive`, for all systems.
//! No poster ever sleeps waiting for room here, so the evd rows are also the
//! *no-waiter* case of evd's room signal (their [`RunStats::room_wakes`] is
//! 0); posters that do sleep in their system's blocking send are measured in
//! [`crate::room`].
//!
//! **Consumers: like against like.** Each row is labelled with its consumer
//! [`Style`]: busy or blocking, one item per call or a batch per call. A peer
//! row is compared with the evd row of the same style ([`Queue::baseline`]).
//!
//! **Diagnostics per run** ([`RunStats`]): how often the consumer's
//! non-blocking receive found nothing (where the consumer has one), how often
//! a poster's send was refused as full, how many room wakes evd sent (evd
//! rows), and how often poster and consumer were seen on the same CPU
//! (`getcpu` sampled every [`CPU_SAMPLE_EVERY`] events in every thread). A
//! round that runs slow or fast for a reason shows it there.

use crate::payload::{Payload, Tally};
use crate::peers::Channel;
use crate::report::{Role, System};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The capacity every queue gets.
pub const CAPACITY: usize = 1024;

/// Every thread of a run reads its CPU once per this many events it moves
/// (one `getcpu` system call: well under 1 ns per event, the same for every
/// system).
pub const CPU_SAMPLE_EVERY: u64 = 1024;

/// What every poster of every system does, for the tables and the report.
pub const POSTER_POLICY: &str = "every system's poster uses its non-blocking bounded send \
(evd post, ArrayQueue push, try_send elsewhere); when it is refused as full the poster takes the \
value back and retries it after std::hint::spin_loop(), calling std::thread::yield_now() \
instead on every 64th refusal in a row";

/// A CPU slot whose poster has not started or has finished.
pub(crate) const NO_CPU: u32 = u32::MAX;

/// The CPU the calling thread runs on.
#[inline]
pub fn current_cpu() -> u32 {
    rustix::thread::sched_getcpu() as u32
}

/// How a consumer waits, and how much it takes per call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Style {
    /// A non-blocking receive of one item in a loop; no notification.
    BusyItem,
    /// A non-blocking batch receive in a loop; no notification.
    BusyBatch,
    /// One item per call; sleeps when empty, woken by a post.
    BlockingItem,
    /// A batch per call; sleeps when empty, woken by a post.
    BlockingBatch,
}

impl Style {
    /// Every style, in table order.
    pub const ALL: [Style; 4] = [
        Style::BusyItem,
        Style::BusyBatch,
        Style::BlockingItem,
        Style::BlockingBatch,
    ];

    /// `busy/item`, `busy/batch`, `blocking/item` or `blocking/batch`.
    pub fn label(self) -> &'static str {
        match self {
            Style::BusyItem => "busy/item",
            Style::BusyBatch => "busy/batch",
            Style::BlockingItem => "blocking/item",
            Style::BlockingBatch => "blocking/batch",
        }
    }
}

/// What a row of the throughput table is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An evd row.
    Evd,
    /// A peer whose consumer makes non-blocking receive calls, whose empty
    /// results are counted.
    PolledPeer,
    /// A peer whose consumer only calls a blocking receive (its own polling
    /// inside is not visible).
    BlockedPeer,
    /// A floor row ([`Queue::FLOORS`]).
    Floor,
}

/// A system under test in the throughput benches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Queue {
    /// evd, `try_dequeue` in a loop.
    EvdSingle,
    /// crossbeam-queue `ArrayQueue`, `pop` in a loop.
    ArrayQueue,
    /// evd, `dequeue_batch` in a loop.
    EvdBatch,
    /// evd, `try_dequeue`; when empty `wait(1, None)` (which backs off on the
    /// slot stamps, then arms and parks).
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
    /// evd, `dequeue_batch`; when it returns nothing `wait(1, None)`, which
    /// backs off on the slot stamps (spin, then yield, for the spin budget),
    /// then arms and parks: what a peer's blocking `recv` does inside.
    EvdWait,
    /// evd, `dequeue_batch`; when it returns nothing `arm()` at once, and if
    /// armed `wait(1, None)`: a CAS on the posters' state word at every empty
    /// batch, and a wake owed by the next post. An evd variant, compared with
    /// no peer.
    EvdArmWait,
    /// crossbeam-channel, drain with `try_iter` (at most [`CAPACITY`]), and
    /// when that yields nothing block in `recv`.
    CrossbeamTryIter,
    /// tokio `mpsc::channel`, `blocking_recv_many` (at most [`CAPACITY`]).
    TokioRecvMany,
    /// evd, `dequeue_with` in a loop (the batch handed to a closure, no
    /// `Vec`). An evd variant of the busy/batch style, compared with no peer:
    /// set it beside `evd dequeue_batch`.
    EvdWith,
    /// Floor: [`crate::stamp_ring`] without an RMW, one poster only.
    FloorStampRing,
    /// Floor: [`crate::stamp_ring`] whose posters reserve with one CAS on a
    /// shared tail (run at 1 and 2 posters).
    FloorStampRingCas,
    /// Floor: [`crate::stamp_ring`] whose posters reserve with one
    /// fetch-and-add on a shared tail, waiting for room after it.
    FloorStampRingFaa,
}

/// Each row is compared with the evd row of its style (itself for that
/// row), but an evd variant that is no style's reference.
impl System for Queue {
    fn name(self) -> &'static str {
        self.row().0
    }

    fn role(self) -> Role {
        match self.row().2 {
            Kind::Evd => Role::Evd,
            Kind::Floor => Role::Floor,
            Kind::PolledPeer | Kind::BlockedPeer => Role::Peer,
        }
    }

    fn baseline(self) -> Option<Queue> {
        let evd = Queue::evd_of(self.style());
        (!self.is_evd() || self == evd).then_some(evd)
    }
}

impl Queue {
    /// The floor rows ([`crate::stamp_ring`]), not in [`Queue::ALL`].
    pub const FLOORS: [Queue; 3] = [
        Queue::FloorStampRing,
        Queue::FloorStampRingCas,
        Queue::FloorStampRingFaa,
    ];

    /// Every system, grouped by consumer style, evd first in each group.
    pub const ALL: [Queue; 15] = [
        Queue::EvdSingle,
        Queue::ArrayQueue,
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
        Queue::TokioRecvMany,
    ];

    fn row(self) -> (&'static str, Style, Kind) {
        use {Kind::*, Style::*};
        match self {
            Queue::EvdSingle => ("evd try_dequeue", BusyItem, Evd),
            Queue::ArrayQueue => ("crossbeam ArrayQueue", BusyItem, PolledPeer),
            Queue::EvdBatch => ("evd dequeue_batch", BusyBatch, Evd),
            Queue::EvdItemWait => ("evd try_dequeue+wait", BlockingItem, Evd),
            Queue::CrossbeamChannel => ("crossbeam-channel recv", BlockingItem, BlockedPeer),
            Queue::StdSyncChannel => ("std sync_channel recv", BlockingItem, BlockedPeer),
            Queue::TokioMpsc => ("tokio mpsc blocking_recv", BlockingItem, BlockedPeer),
            Queue::Flume => ("flume recv", BlockingItem, BlockedPeer),
            Queue::Kanal => ("kanal recv", BlockingItem, BlockedPeer),
            Queue::Thingbuf => ("thingbuf mpsc recv", BlockingItem, BlockedPeer),
            Queue::EvdWait => ("evd batch+wait", BlockingBatch, Evd),
            Queue::EvdArmWait => ("evd batch+arm+wait", BlockingBatch, Evd),
            Queue::CrossbeamTryIter => {
                ("crossbeam-channel try_iter+recv", BlockingBatch, PolledPeer)
            }
            Queue::TokioRecvMany => ("tokio mpsc blocking_recv_many", BlockingBatch, BlockedPeer),
            Queue::EvdWith => ("evd dequeue_with", BusyBatch, Evd),
            Queue::FloorStampRing => ("floor: 1-poster stamp ring, no RMW", BusyItem, Floor),
            Queue::FloorStampRingCas => ("floor: stamp ring + 1 CAS per post", BusyItem, Floor),
            Queue::FloorStampRingFaa => {
                ("floor: stamp ring + 1 fetch_add per post", BusyItem, Floor)
            }
        }
    }

    /// How its consumer waits and how much it takes per call.
    pub fn style(self) -> Style {
        self.row().1
    }

    /// The most posters it runs with (`None`: any number). The CAS floor
    /// could take any number; above 2 posters the case is oversubscribed
    /// and has no target, so it is not run there.
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

    /// The evd row a style's peers are compared with.
    pub fn evd_of(style: Style) -> Queue {
        match style {
            Style::BusyItem => Queue::EvdSingle,
            Style::BusyBatch => Queue::EvdBatch,
            Style::BlockingItem => Queue::EvdItemWait,
            Style::BlockingBatch => Queue::EvdWait,
        }
    }

    /// False for consumers that only call a blocking receive.
    pub fn counts_empty_polls(self) -> bool {
        self.row().2 != Kind::BlockedPeer
    }

    /// Move `messages` events of type `P` from `posters` threads to one
    /// consumer. Fails if an event is lost or duplicated, or a channel breaks.
    pub fn run<P: Payload>(self, posters: usize, messages: u64) -> Result<RunStats, String> {
        assert!(posters >= 1);
        if let Some(most) = self.max_posters().filter(|&most| posters > most) {
            return Err(format!(
                "{}: {posters} posters, at most {most}",
                self.name()
            ));
        }
        let mut stats = match self {
            Queue::EvdSingle
            | Queue::EvdBatch
            | Queue::EvdWith
            | Queue::EvdItemWait
            | Queue::EvdWait
            | Queue::EvdArmWait => {
                let (tx, mut rx) = evd::bounded::<P>(CAPACITY).map_err(|e| e.to_string())?;
                let stats = drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    |tx: &evd::Poster<P>, p| match tx.post(p) {
                        Ok(()) => Ok(()),
                        Err(evd::PostError::Full(back)) => Err(back),
                        Err(evd::PostError::Closed(_)) => panic!("consumer alive"),
                    },
                    |sink| match self {
                        Queue::EvdSingle => consume_evd_item(&mut rx, sink, false),
                        Queue::EvdItemWait => consume_evd_item(&mut rx, sink, true),
                        Queue::EvdBatch => consume_evd_batch(&mut rx, sink, BatchMode::Busy),
                        Queue::EvdWith => consume_evd_with(&mut rx, sink),
                        Queue::EvdWait => consume_evd_batch(&mut rx, sink, BatchMode::Wait),
                        _ => consume_evd_batch(&mut rx, sink, BatchMode::ArmWait),
                    },
                );
                stats.map(|s| RunStats {
                    room_wakes: Some(rx.query().room_wakes),
                    ..s
                })
            }
            Queue::FloorStampRing | Queue::FloorStampRingCas | Queue::FloorStampRingFaa => {
                use crate::stamp_ring::{stamp_ring, Reserve};
                let reserve = match self {
                    Queue::FloorStampRing => Reserve::Own,
                    Queue::FloorStampRingCas => Reserve::CasTail,
                    _ => Reserve::FaaTail,
                };
                let (tx, mut rx) = stamp_ring::<P>(CAPACITY, reserve);
                let mut senders: Vec<_> = (1..posters)
                    .map(|_| tx.another().expect("CasTail rings take many posters"))
                    .collect();
                senders.insert(0, tx);
                drive(
                    posters,
                    messages,
                    senders,
                    |tx, p| tx.try_send(p),
                    |sink| busy_loop(sink, || rx.try_recv()),
                )
            }
            Queue::ArrayQueue => {
                let q = Arc::new(crossbeam_queue::ArrayQueue::<P>::new(CAPACITY));
                drive(
                    posters,
                    messages,
                    clones(q.clone(), posters),
                    |q: &Arc<crossbeam_queue::ArrayQueue<P>>, p| q.push(p),
                    |sink| busy_loop(sink, || q.pop()),
                )
            }
            Queue::CrossbeamChannel => peer::<crossbeam_channel::Receiver<P>, P>(posters, messages),
            Queue::StdSyncChannel => peer::<std::sync::mpsc::Receiver<P>, P>(posters, messages),
            Queue::TokioMpsc => peer::<tokio::sync::mpsc::Receiver<P>, P>(posters, messages),
            Queue::Flume => peer::<flume::Receiver<P>, P>(posters, messages),
            Queue::Kanal => peer::<kanal::Receiver<P>, P>(posters, messages),
            Queue::Thingbuf => peer::<thingbuf::mpsc::blocking::Receiver<P>, P>(posters, messages),
            Queue::CrossbeamTryIter => {
                type Rx<P> = crossbeam_channel::Receiver<P>;
                let (tx, rx) = Rx::<P>::bounded(CAPACITY);
                drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    Rx::try_send,
                    |sink| loop {
                        let mut got = false;
                        for p in rx.try_iter().take(CAPACITY) {
                            got = true;
                            if sink.take(p.seq()) {
                                return Ok(());
                            }
                        }
                        if !got {
                            sink.empty();
                            match rx.recv() {
                                Ok(p) => {
                                    if sink.take(p.seq()) {
                                        return Ok(());
                                    }
                                }
                                Err(_) => return Err("channel closed early".into()),
                            }
                        }
                    },
                )
            }
            Queue::TokioRecvMany => {
                type Rx<P> = tokio::sync::mpsc::Receiver<P>;
                let (tx, mut rx) = Rx::<P>::bounded(CAPACITY);
                drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    Rx::try_send,
                    |sink| {
                        let mut buf = Vec::with_capacity(CAPACITY);
                        loop {
                            if rx.blocking_recv_many(&mut buf, CAPACITY) == 0 {
                                return Err("channel closed early".into());
                            }
                            for p in buf.drain(..) {
                                sink.take(p.seq());
                            }
                            if sink.done() {
                                return Ok(());
                            }
                        }
                    },
                )
            }
        }?;
        if !self.counts_empty_polls() {
            stats.empty_polls = None;
        }
        Ok(stats)
    }
}

fn peer<C: Channel<P>, P: Payload>(posters: usize, messages: u64) -> Result<RunStats, String> {
    let (tx, mut rx) = C::bounded(CAPACITY);
    drive(
        posters,
        messages,
        clones(tx, posters),
        C::try_send,
        |sink| blocking_loop(sink, || rx.recv(), || {}),
    )
}

/// What one throughput run measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunStats {
    /// From the start barrier to the consumer's last event.
    pub elapsed: Duration,
    /// Events moved.
    pub messages: u64,
    /// Consumer calls that returned no event; `None` if the consumer only
    /// calls a blocking receive.
    pub empty_polls: Option<u64>,
    /// Posts refused as full, summed over the posters; `None` where the
    /// posters use a blocking send ([`crate::room`]).
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

    /// Empty polls per event moved.
    pub fn empty_polls_per_msg(&self) -> Option<f64> {
        self.empty_polls
            .map(|e| e as f64 / self.messages.max(1) as f64)
    }

    /// Refused posts per event moved.
    pub fn full_refusals_per_msg(&self) -> Option<f64> {
        self.full_refusals
            .map(|r| r as f64 / self.messages.max(1) as f64)
    }

    /// Room wakes per event moved (evd only).
    pub fn room_wakes_per_msg(&self) -> Option<f64> {
        self.room_wakes
            .map(|w| w as f64 / self.messages.max(1) as f64)
    }

    /// Share of CPU samples where a poster ran on the consumer's CPU.
    pub fn same_cpu_share(&self) -> Option<f64> {
        (self.cpu_samples > 0).then(|| self.same_cpu as f64 / self.cpu_samples as f64)
    }
}

/// The retry policy of every busy loop (a poster refused as full, a busy
/// consumer that found nothing): spin, and yield the CPU every 64 misses in a
/// row so that on a machine with fewer cores than threads the thread we wait
/// for gets to run.
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

impl<'a> Sink<'a> {
    /// Expect `messages` events; `poster_cpus`: each poster's latest CPU.
    pub(crate) fn new(messages: u64, poster_cpus: &'a [AtomicU32]) -> Self {
        Sink {
            tally: Tally::new(messages),
            empty_polls: 0,
            poster_cpus,
            cpu_samples: 0,
            same_cpu: 0,
        }
    }

    /// Count one event; true once all expected events have arrived.
    #[inline(always)]
    pub fn take(&mut self, seq: u64) -> bool {
        let done = self.tally.take(seq);
        if self.tally.count().is_multiple_of(CPU_SAMPLE_EVERY) {
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

    /// Check the checksum; the run's figures.
    pub(crate) fn finish(
        self,
        elapsed: Duration,
        messages: u64,
        refusals: u64,
    ) -> Result<RunStats, String> {
        self.tally.verify()?;
        Ok(RunStats {
            elapsed,
            messages,
            empty_polls: Some(self.empty_polls),
            full_refusals: Some(refusals),
            room_wakes: None,
            cpu_samples: self.cpu_samples,
            same_cpu: self.same_cpu,
            served_max_over_min: None,
        })
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

/// `n` handles: `n - 1` clones and the original.
pub(crate) fn clones<S: Clone>(s: S, n: usize) -> Vec<S> {
    let mut v: Vec<S> = (1..n).map(|_| s.clone()).collect();
    v.push(s);
    v
}

/// Poster `i` of `n` sends the sequence numbers `i, i + n, ...` below
/// `messages`, so the consumer's checksum covers `0..messages` exactly once.
///
/// `try_send` hands a value refused as full back; the poster counts it,
/// calls [`BusyWait::miss`] and retries it. [`crate::room`] passes a
/// blocking send, which hands a value back only once the queue is closed.
pub(crate) fn drive<P, S, SendFn, ConsumeFn>(
    posters: usize,
    messages: u64,
    senders: Vec<S>,
    try_send: SendFn,
    consume: ConsumeFn,
) -> Result<RunStats, String>
where
    P: Payload,
    S: Send,
    SendFn: Fn(&S, P) -> Result<(), P> + Sync,
    ConsumeFn: FnOnce(&mut Sink<'_>) -> Result<(), String>,
{
    let poster = |i: usize, tx: S, slot: &AtomicU32, abort: &AtomicBool| {
        let mut wait = BusyWait::default();
        let (mut refused, mut sent) = (0u64, 0u64);
        let mut seq = i as u64;
        'posting: while seq < messages {
            let mut p = P::from_seq(seq);
            while let Err(back) = try_send(&tx, p) {
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

/// One thread per element of `posters` runs `post(i, element, its CPU slot,
/// abort)`, returning its refusals; all start at one barrier with `consume`
/// (timed, on this thread). Fails if `consume` fails or an event is missing
/// or doubled.
pub(crate) fn harness<S, PostFn, ConsumeFn>(
    posters: Vec<S>,
    messages: u64,
    post: PostFn,
    consume: ConsumeFn,
) -> Result<RunStats, String>
where
    S: Send,
    PostFn: Fn(usize, S, &AtomicU32, &AtomicBool) -> u64 + Sync,
    ConsumeFn: FnOnce(&mut Sink<'_>) -> Result<(), String>,
{
    let barrier = Barrier::new(posters.len() + 1);
    let cpus: Vec<AtomicU32> = posters.iter().map(|_| AtomicU32::new(NO_CPU)).collect();
    let refusals = AtomicU64::new(0);
    // Set when the consumer fails, so that posters refused by a queue nobody
    // drains any more give up instead of retrying forever.
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
        let mut sink = Sink::new(messages, &cpus);
        barrier.wait();
        let start = Instant::now();
        if messages > 0 {
            if let Err(e) = consume(&mut sink) {
                abort.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok::<_, String>((start.elapsed(), sink))
    })?;
    sink.finish(elapsed, messages, refusals.load(Ordering::Relaxed))
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

/// No post here is lossy and the posters outlive the consumer: any dequeue
/// error but `Empty` fails the run.
pub(crate) fn dequeue_failed(e: evd::TryDequeueError) -> String {
    match e {
        evd::TryDequeueError::Overflow(o) => format!("{o}, but no post here is lossy"),
        evd::TryDequeueError::Closed => "evd closed early".into(),
        e => e.to_string(),
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

fn consume_evd_item<P: Payload>(
    rx: &mut evd::Consumer<P>,
    sink: &mut Sink<'_>,
    blocking: bool,
) -> Result<(), String> {
    let mut wait = BusyWait::default();
    loop {
        match rx.try_dequeue() {
            Ok(p) => {
                if sink.take(p.seq()) {
                    return Ok(());
                }
                wait.hit();
            }
            Err(evd::TryDequeueError::Empty) => {
                sink.empty();
                if blocking {
                    wait_for_one(rx)?;
                } else {
                    wait.miss();
                }
            }
            Err(e) => return Err(dequeue_failed(e)),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum BatchMode {
    Busy,
    Wait,
    ArmWait,
}

fn consume_evd_batch<P: Payload>(
    rx: &mut evd::Consumer<P>,
    sink: &mut Sink<'_>,
    mode: BatchMode,
) -> Result<(), String> {
    let mut buf = Vec::with_capacity(CAPACITY);
    let mut wait = BusyWait::default();
    loop {
        match rx.dequeue_batch(&mut buf, CAPACITY) {
            Ok(0) | Err(evd::TryDequeueError::Empty) => {
                sink.empty();
                match mode {
                    BatchMode::Busy => wait.miss(),
                    BatchMode::Wait => wait_for_one(rx)?,
                    BatchMode::ArmWait => arm_then_wait(rx)?,
                }
            }
            Ok(_) => {
                for p in buf.drain(..) {
                    sink.take(p.seq());
                }
                if sink.done() {
                    return Ok(());
                }
                wait.hit();
            }
            Err(e) => return Err(dequeue_failed(e)),
        }
    }
}

fn consume_evd_with<P: Payload>(
    rx: &mut evd::Consumer<P>,
    sink: &mut Sink<'_>,
) -> Result<(), String> {
    let mut wait = BusyWait::default();
    loop {
        match rx.dequeue_with(CAPACITY, |p| {
            sink.take(p.seq());
        }) {
            Ok(0) | Err(evd::TryDequeueError::Empty) => {
                sink.empty();
                wait.miss();
            }
            Ok(_) => {
                if sink.done() {
                    return Ok(());
                }
                wait.hit();
            }
            Err(e) => return Err(dequeue_failed(e)),
        }
    }
}

fn busy_loop<P: Payload>(
    sink: &mut Sink<'_>,
    mut recv: impl FnMut() -> Option<P>,
) -> Result<(), String> {
    let mut wait = BusyWait::default();
    loop {
        match recv() {
            Some(p) => {
                if sink.take(p.seq()) {
                    return Ok(());
                }
                wait.hit();
            }
            None => {
                sink.empty();
                wait.miss();
            }
        }
    }
}

/// A consumer of one item per blocking receive; `work` runs after each event
/// is counted ([`crate::room`]'s fixed work, nothing here).
pub(crate) fn blocking_loop<P: Payload>(
    sink: &mut Sink<'_>,
    mut recv: impl FnMut() -> Option<P>,
    work: impl Fn(),
) -> Result<(), String> {
    loop {
        match recv() {
            Some(p) => {
                let done = sink.take(p.seq());
                work();
                if done {
                    return Ok(());
                }
            }
            None => return Err("channel closed early".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_ring_is_counted_and_retried() {
        // One poster, far more events than the capacity, a consumer that
        // starts late: some posts must be refused and retried.
        let (tx, mut rx) = evd::bounded::<u64>(CAPACITY).unwrap();
        let run = drive(
            1,
            (CAPACITY * 4) as u64,
            vec![tx],
            |tx: &evd::Poster<u64>, p| tx.post(p).map_err(evd::PostError::into_inner),
            |sink| {
                std::thread::sleep(Duration::from_millis(20));
                consume_evd_item(&mut rx, sink, false)
            },
        )
        .unwrap();
        assert!(run.full_refusals > Some(0));
    }
}
