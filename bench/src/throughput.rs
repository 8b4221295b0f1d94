//! Throughput: `posters` threads post into one consumer through one bounded
//! queue of the same capacity; the time runs from a start barrier to the
//! consumer's last event, and a checksum proves every event arrived once.
//!
//! Lock-free rows ([`Style::Busy`]) use a busy try-receive consumer (and a
//! poster that retries a full ring); blocking rows ([`Style::Blocking`]) use
//! each system's blocking receive and send. Both retry loops use the same
//! [`BusyWait`] policy for every system.

use crate::payload::{Payload, Tally};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The capacity every queue gets.
pub const CAPACITY: usize = 1024;

/// How a consumer waits for the next event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Style {
    /// Try-receive in a loop (spin, yield every 64 misses); no notification.
    Busy,
    /// The system's blocking receive (sleeps, woken by a post).
    Blocking,
}

impl Style {
    /// `busy` or `blocking`.
    pub fn label(self) -> &'static str {
        match self {
            Style::Busy => "busy",
            Style::Blocking => "blocking",
        }
    }
}

/// A system under test in the throughput benches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Queue {
    /// evd, consumer calls `try_dequeue` in a loop.
    EvdSingle,
    /// evd, consumer calls `dequeue_batch` in a loop.
    EvdBatch,
    /// evd, consumer drains with `dequeue_batch` and sleeps in `wait(1)`.
    EvdWait,
    /// evd, consumer drains with `dequeue_batch`, on empty backs off
    /// (crossbeam-utils `Backoff`: spin, then yield) and sleeps in `wait(1)`
    /// only once the backoff is completed: what crossbeam-channel's `recv`
    /// does inside.
    EvdBackoffWait,
    /// crossbeam-queue `ArrayQueue`, busy `pop`.
    ArrayQueue,
    /// crossbeam-channel `bounded`, blocking `recv`.
    CrossbeamChannel,
    /// `std::sync::mpsc::sync_channel`, blocking `recv`.
    StdSyncChannel,
    /// tokio `mpsc::channel`, `blocking_send` / `blocking_recv`.
    TokioMpsc,
    /// flume `bounded`, blocking `recv`.
    Flume,
    /// kanal `bounded`, blocking `recv`.
    Kanal,
    /// thingbuf `mpsc::blocking::channel`, blocking `recv`.
    Thingbuf,
}

impl Queue {
    /// Every system, evd first.
    pub const ALL: [Queue; 11] = [
        Queue::EvdSingle,
        Queue::EvdBatch,
        Queue::EvdWait,
        Queue::EvdBackoffWait,
        Queue::ArrayQueue,
        Queue::CrossbeamChannel,
        Queue::StdSyncChannel,
        Queue::TokioMpsc,
        Queue::Flume,
        Queue::Kanal,
        Queue::Thingbuf,
    ];

    /// The name used in tables and the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Queue::EvdSingle => "evd try_dequeue",
            Queue::EvdBatch => "evd dequeue_batch",
            Queue::EvdWait => "evd batch+wait",
            Queue::EvdBackoffWait => "evd batch+backoff+wait",
            Queue::ArrayQueue => "crossbeam ArrayQueue",
            Queue::CrossbeamChannel => "crossbeam-channel",
            Queue::StdSyncChannel => "std sync_channel",
            Queue::TokioMpsc => "tokio mpsc",
            Queue::Flume => "flume",
            Queue::Kanal => "kanal",
            Queue::Thingbuf => "thingbuf mpsc",
        }
    }

    /// How its consumer waits.
    pub fn style(self) -> Style {
        match self {
            Queue::EvdSingle | Queue::EvdBatch | Queue::ArrayQueue => Style::Busy,
            _ => Style::Blocking,
        }
    }

    /// True for the evd rows.
    pub fn is_evd(self) -> bool {
        matches!(
            self,
            Queue::EvdSingle | Queue::EvdBatch | Queue::EvdWait | Queue::EvdBackoffWait
        )
    }

    /// The evd row that rows of `style` are compared with.
    pub fn evd_baseline(style: Style) -> Queue {
        match style {
            Style::Busy => Queue::EvdSingle,
            Style::Blocking => Queue::EvdWait,
        }
    }

    /// Move `messages` events of type `P` from `posters` threads to one
    /// consumer; returns the time from the start barrier to the last event.
    /// Fails if an event is lost or duplicated, or a channel breaks.
    ///
    /// ```
    /// use evd_bench::throughput::Queue;
    /// for q in Queue::ALL {
    ///     q.run::<u64>(2, 10_000).unwrap();
    /// }
    /// ```
    pub fn run<P: Payload>(self, posters: usize, messages: u64) -> Result<Duration, String> {
        assert!(posters >= 1);
        match self {
            Queue::EvdSingle | Queue::EvdBatch | Queue::EvdWait | Queue::EvdBackoffWait => {
                let (tx, mut rx) = evd::bounded::<P>(CAPACITY).map_err(|e| e.to_string())?;
                let txs = clones(tx, posters);
                drive(posters, messages, txs, post_evd, |tally| match self {
                    Queue::EvdSingle => consume_evd_single(&mut rx, tally),
                    Queue::EvdBatch => consume_evd_batch(&mut rx, tally),
                    Queue::EvdWait => consume_evd_wait(&mut rx, tally, false),
                    _ => consume_evd_wait(&mut rx, tally, true),
                })
            }
            Queue::ArrayQueue => {
                let q = Arc::new(crossbeam_queue::ArrayQueue::<P>::new(CAPACITY));
                let txs = clones(q.clone(), posters);
                drive(
                    posters,
                    messages,
                    txs,
                    |q: &Arc<crossbeam_queue::ArrayQueue<P>>, mut p| {
                        let mut wait = BusyWait::default();
                        while let Err(back) = q.push(p) {
                            p = back;
                            wait.miss();
                        }
                    },
                    |tally| {
                        let mut wait = BusyWait::default();
                        loop {
                            match q.pop() {
                                Some(p) => {
                                    if tally.take(p.seq()) {
                                        return Ok(());
                                    }
                                    wait.hit();
                                }
                                None => wait.miss(),
                            }
                        }
                    },
                )
            }
            Queue::CrossbeamChannel => {
                let (tx, rx) = crossbeam_channel::bounded::<P>(CAPACITY);
                drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    |tx, p| tx.send(p).expect("receiver alive"),
                    |tally| blocking_loop(tally, || rx.recv().ok()),
                )
            }
            Queue::StdSyncChannel => {
                let (tx, rx) = std::sync::mpsc::sync_channel::<P>(CAPACITY);
                drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    |tx, p| tx.send(p).expect("receiver alive"),
                    |tally| blocking_loop(tally, || rx.recv().ok()),
                )
            }
            Queue::TokioMpsc => {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<P>(CAPACITY);
                drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    |tx, p| tx.blocking_send(p).expect("receiver alive"),
                    |tally| blocking_loop(tally, || rx.blocking_recv()),
                )
            }
            Queue::Flume => {
                let (tx, rx) = flume::bounded::<P>(CAPACITY);
                drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    |tx, p| tx.send(p).expect("receiver alive"),
                    |tally| blocking_loop(tally, || rx.recv().ok()),
                )
            }
            Queue::Kanal => {
                let (tx, rx) = kanal::bounded::<P>(CAPACITY);
                drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    |tx, p| tx.send(p).expect("receiver alive"),
                    |tally| blocking_loop(tally, || rx.recv().ok()),
                )
            }
            Queue::Thingbuf => {
                let (tx, rx) = thingbuf::mpsc::blocking::channel::<P>(CAPACITY);
                drive(
                    posters,
                    messages,
                    clones(tx, posters),
                    |tx, p| tx.send(p).expect("receiver alive"),
                    |tally| blocking_loop(tally, || rx.recv()),
                )
            }
        }
    }
}

/// The retry policy of every busy loop (consumer on empty, poster on full):
/// spin, and yield the CPU every 64 misses in a row so that on a machine with
/// fewer cores than threads the thread we wait for gets to run.
#[derive(Default, Debug)]
pub struct BusyWait {
    misses: u32,
}

impl BusyWait {
    /// The last try failed.
    #[inline(always)]
    pub fn miss(&mut self) {
        self.misses = self.misses.wrapping_add(1);
        if self.misses % 64 == 0 {
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

/// `n` handles: `n - 1` clones and the original.
fn clones<S: Clone>(s: S, n: usize) -> Vec<S> {
    let mut v: Vec<S> = (1..n).map(|_| s.clone()).collect();
    v.push(s);
    v
}

/// Poster `i` of `n` sends the sequence numbers `i, i + n, ...` below
/// `messages`, so the consumer's checksum covers `0..messages` exactly once.
fn drive<P, S, SendFn, ConsumeFn>(
    posters: usize,
    messages: u64,
    senders: Vec<S>,
    send: SendFn,
    consume: ConsumeFn,
) -> Result<Duration, String>
where
    P: Payload,
    S: Send,
    SendFn: Fn(&S, P) + Sync,
    ConsumeFn: FnOnce(&mut Tally) -> Result<(), String>,
{
    let barrier = Barrier::new(posters + 1);
    std::thread::scope(|scope| {
        for (i, tx) in senders.into_iter().enumerate() {
            let (barrier, send) = (&barrier, &send);
            scope.spawn(move || {
                barrier.wait();
                let mut seq = i as u64;
                while seq < messages {
                    send(&tx, P::from_seq(seq));
                    seq += posters as u64;
                }
            });
        }
        let mut tally = Tally::new(messages);
        barrier.wait();
        let start = Instant::now();
        if messages > 0 {
            consume(&mut tally)?;
        }
        let elapsed = start.elapsed();
        tally.verify()?;
        Ok(elapsed)
    })
}

fn post_evd<P: Payload>(tx: &evd::Poster<P>, mut p: P) {
    let mut wait = BusyWait::default();
    loop {
        match tx.post(p) {
            Ok(()) => return,
            Err(evd::PostError::Full(back)) => {
                p = back;
                wait.miss();
            }
            Err(evd::PostError::Closed(_)) => panic!("consumer alive"),
        }
    }
}

fn consume_evd_single<P: Payload>(
    rx: &mut evd::Consumer<P>,
    tally: &mut Tally,
) -> Result<(), String> {
    let mut wait = BusyWait::default();
    loop {
        match rx.try_dequeue() {
            Ok(p) => {
                if tally.take(p.seq()) {
                    return Ok(());
                }
                wait.hit();
            }
            Err(evd::TryDequeueError::Empty) => wait.miss(),
            // A poster found the ring full and retried: not a loss.
            Err(evd::TryDequeueError::Overflow(_)) => {}
            Err(evd::TryDequeueError::Closed) => return Err("evd closed early".into()),
        }
    }
}

fn consume_evd_batch<P: Payload>(
    rx: &mut evd::Consumer<P>,
    tally: &mut Tally,
) -> Result<(), String> {
    let mut buf = Vec::with_capacity(CAPACITY);
    let mut wait = BusyWait::default();
    loop {
        match rx.dequeue_batch(&mut buf, CAPACITY) {
            Ok(0) => wait.miss(),
            Ok(_) => {
                for p in buf.drain(..) {
                    tally.take(p.seq());
                }
                if tally.done() {
                    return Ok(());
                }
                wait.hit();
            }
            Err(evd::TryDequeueError::Overflow(_)) | Err(evd::TryDequeueError::Empty) => {}
            Err(evd::TryDequeueError::Closed) => return Err("evd closed early".into()),
        }
    }
}

fn consume_evd_wait<P: Payload>(
    rx: &mut evd::Consumer<P>,
    tally: &mut Tally,
    back_off_first: bool,
) -> Result<(), String> {
    let mut buf = Vec::with_capacity(CAPACITY);
    let backoff = crossbeam_utils::Backoff::new();
    loop {
        match rx.dequeue_batch(&mut buf, CAPACITY) {
            Ok(0) => {
                if back_off_first && !backoff.is_completed() {
                    backoff.snooze();
                } else {
                    match rx.wait(1, None) {
                        // The posters retry refused posts; the report is all.
                        Ok(_) | Err(evd::WaitError::Overflow(_)) => {}
                        Err(e) => return Err(e.to_string()),
                    }
                    backoff.reset();
                }
            }
            Ok(_) => {
                for p in buf.drain(..) {
                    tally.take(p.seq());
                }
                if tally.done() {
                    return Ok(());
                }
                backoff.reset();
            }
            Err(evd::TryDequeueError::Overflow(_)) | Err(evd::TryDequeueError::Empty) => {}
            Err(evd::TryDequeueError::Closed) => return Err("evd closed early".into()),
        }
    }
}

fn blocking_loop<P: Payload>(
    tally: &mut Tally,
    mut recv: impl FnMut() -> Option<P>,
) -> Result<(), String> {
    loop {
        match recv() {
            Some(p) => {
                if tally.take(p.seq()) {
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
    use crate::payload::Event64;

    #[test]
    fn every_system_delivers_every_event_once_with_each_poster_count() {
        for q in Queue::ALL {
            for posters in [1, 2, 4] {
                q.run::<u64>(posters, 20_000)
                    .unwrap_or_else(|e| panic!("{} {posters}p: {e}", q.name()));
                q.run::<Event64>(posters, 5_000)
                    .unwrap_or_else(|e| panic!("{} {posters}p event64: {e}", q.name()));
            }
        }
    }

    #[test]
    fn busy_rows_are_the_lock_free_ones() {
        let busy: Vec<_> = Queue::ALL
            .into_iter()
            .filter(|q| q.style() == Style::Busy)
            .collect();
        assert_eq!(busy, [Queue::EvdSingle, Queue::EvdBatch, Queue::ArrayQueue]);
        assert!(Queue::evd_baseline(Style::Busy).is_evd());
        assert!(Queue::evd_baseline(Style::Blocking).is_evd());
    }

    #[test]
    fn zero_messages_is_a_valid_run() {
        assert!(Queue::EvdSingle.run::<u64>(1, 0).is_ok());
    }
}
