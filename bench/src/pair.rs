//! Single-thread cost of one post and one dequeue: evd's `post` + `try_dequeue` against
//! crossbeam-queue `ArrayQueue`'s `push` + `pop`, on rings of the same capacity that hold at most
//! one event. Each loop posts the iteration number (through `black_box`), dequeues it and adds it
//! to a sum checked once afterwards, so no loop pays for a check per iteration. As compiled, the
//! compiler inlines evd's calls and not `ArrayQueue`'s; out of line, every operation of both is a
//! call to a non-inlined function: the cost of the code, not of the inliner's choice.

use crate::payload::sum_below;
use crate::report::{Role::*, Row};
use std::hint::black_box;
use std::time::Instant;

/// The case of the loops as compiled.
pub const CASE: &str = "single-thread/pair";
/// The case of the loops whose every operation is a call.
pub const OUT_OF_LINE: &str = "single-thread/pair-out-of-line";

/// One loop of a pair case.
#[derive(Clone, Copy, Debug)]
pub struct PairLoop {
    /// Its case.
    pub case: &'static str,
    /// How its records name and compare it.
    pub row: Row,
    /// Run this many pairs; the sum of the events dequeued.
    pub run: fn(&mut Pair, u64) -> u64,
}

const EVD: &str = "evd post+try_dequeue";
const ARRAY_QUEUE: &str = "crossbeam ArrayQueue push+pop";

/// Every loop, as compiled first, evd first; `ArrayQueue` is compared with evd.
#[rustfmt::skip]
pub const PAIRS: [PairLoop; 4] = [
    PairLoop { case: CASE, row: Row::new(EVD, Evd, "single-thread", Some(EVD), None), run: evd },
    PairLoop { case: CASE, row: Row::new(ARRAY_QUEUE, Peer, "single-thread", Some(EVD), None), run: array_queue },
    PairLoop { case: OUT_OF_LINE, row: Row::new(EVD, Evd, "single-thread", Some(EVD), None), run: evd_calls },
    PairLoop { case: OUT_OF_LINE, row: Row::new(ARRAY_QUEUE, Peer, "single-thread", Some(EVD), None), run: array_queue_calls },
];

/// An evd ring and an `ArrayQueue`, both of capacity 1024, reused across runs.
pub struct Pair {
    poster: evd::Poster<u64>,
    consumer: evd::Consumer<u64>,
    queue: crossbeam_queue::ArrayQueue<u64>,
}

impl Default for Pair {
    fn default() -> Self {
        Self::new()
    }
}

impl Pair {
    /// Fresh, empty queues.
    pub fn new() -> Self {
        let (poster, consumer) = evd::bounded(1024).expect("capacity 1024 is valid");
        let queue = crossbeam_queue::ArrayQueue::new(1024);
        Pair {
            poster,
            consumer,
            queue,
        }
    }

    /// Nanoseconds per pair over `iters` pairs of `l`; fails unless every event came back.
    pub fn time_ns(&mut self, l: PairLoop, iters: u64) -> Result<f64, String> {
        let start = Instant::now();
        let sum = black_box((l.run)(self, iters));
        let ns = start.elapsed().as_nanos() as f64 / iters.max(1) as f64;
        let want = sum_below(iters);
        if sum != want {
            let (name, case) = (l.row.name, l.case);
            return Err(format!(
                "{name} ({case}): sum {sum} of dequeued events, expected {want}"
            ));
        }
        Ok(ns)
    }
}

fn evd(p: &mut Pair, iters: u64) -> u64 {
    let (tx, rx) = (&p.poster, &mut p.consumer);
    pairs(iters, |v| _ = tx.post(v), || rx.try_dequeue().ok())
}

fn array_queue(p: &mut Pair, iters: u64) -> u64 {
    let q = &p.queue;
    pairs(iters, |v| _ = q.push(v), || q.pop())
}

fn evd_calls(p: &mut Pair, iters: u64) -> u64 {
    let (tx, rx) = (&p.poster, &mut p.consumer);
    pairs(iters, |v| evd_post(tx, v), || evd_dequeue(rx))
}

fn array_queue_calls(p: &mut Pair, iters: u64) -> u64 {
    let q = &p.queue;
    pairs(iters, |v| array_queue_push(q, v), || array_queue_pop(q))
}

/// The one loop shape of every pair run.
#[inline(always)]
fn pairs(iters: u64, mut post: impl FnMut(u64), mut dequeue: impl FnMut() -> Option<u64>) -> u64 {
    let mut sum = 0u64;
    for i in 0..iters {
        post(black_box(i));
        if let Some(v) = dequeue() {
            sum = sum.wrapping_add(v);
        }
    }
    sum
}

#[inline(never)]
fn evd_post(tx: &evd::Poster<u64>, v: u64) {
    let _ = tx.post(v);
}

#[inline(never)]
fn evd_dequeue(rx: &mut evd::Consumer<u64>) -> Option<u64> {
    rx.try_dequeue().ok()
}

#[inline(never)]
fn array_queue_push(q: &crossbeam_queue::ArrayQueue<u64>, v: u64) {
    let _ = q.push(v);
}

#[inline(never)]
fn array_queue_pop(q: &crossbeam_queue::ArrayQueue<u64>) -> Option<u64> {
    q.pop()
}
