//! Single-thread cost of one post and one dequeue: evd's `post` + `try_dequeue` against
//! crossbeam-queue `ArrayQueue`'s `push` + `pop`, on rings of the same capacity that hold at most
//! one event. Both loops post the iteration number (through `black_box`), dequeue it and add it to
//! a sum, checked once afterwards, so neither pays for a check per iteration.

use crate::payload::sum_below;
use crate::report::{Role, Row};
use std::hint::black_box;
use std::time::Instant;

/// A system of the single-thread pair cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PairSystem {
    /// evd: `Poster::post`, then `Consumer::try_dequeue`.
    Evd,
    /// crossbeam-queue `ArrayQueue`: `push`, then `pop`.
    ArrayQueue,
}

impl PairSystem {
    /// Both systems, evd first.
    pub const ALL: [PairSystem; 2] = [PairSystem::Evd, PairSystem::ArrayQueue];

    /// Its row: `ArrayQueue` is compared with evd.
    pub fn row(self) -> Row {
        let (name, role) = match self {
            PairSystem::Evd => ("evd post+try_dequeue", Role::Evd),
            PairSystem::ArrayQueue => ("crossbeam ArrayQueue push+pop", Role::Peer),
        };
        Row::new(
            name,
            role,
            "single-thread",
            Some("evd post+try_dequeue"),
            None,
        )
    }
}

/// How the loop reaches each system's operations. As compiled, the compiler inlines evd's `post`
/// and `try_dequeue` into the loop and calls `ArrayQueue::push` and `pop` out of line; behind a
/// non-inlined function each operation of both pays one call: the cost of the code, not of the
/// inliner's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PairCalls {
    /// The loop calls the systems' methods; the compiler inlines what it chooses.
    AsCompiled,
    /// Each post and each dequeue is a call to an `#[inline(never)]` function.
    OutOfLine,
}

impl PairCalls {
    /// Both, as compiled first.
    pub const ALL: [PairCalls; 2] = [PairCalls::AsCompiled, PairCalls::OutOfLine];

    /// The case name.
    pub fn case(self) -> &'static str {
        match self {
            PairCalls::AsCompiled => "single-thread/pair",
            PairCalls::OutOfLine => "single-thread/pair-out-of-line",
        }
    }
}

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

    /// Run `iters` post/dequeue pairs of `system`, reached as `calls` says; fails unless every
    /// event came back.
    pub fn run(&mut self, system: PairSystem, calls: PairCalls, iters: u64) -> Result<(), String> {
        let (tx, rx, q) = (&self.poster, &mut self.consumer, &self.queue);
        let sum = match (system, calls) {
            (PairSystem::Evd, PairCalls::AsCompiled) => {
                pairs(iters, |v| _ = tx.post(v), || rx.try_dequeue().ok())
            }
            (PairSystem::Evd, PairCalls::OutOfLine) => {
                pairs(iters, |v| evd_post(tx, v), || evd_dequeue(rx))
            }
            (PairSystem::ArrayQueue, PairCalls::AsCompiled) => {
                pairs(iters, |v| _ = q.push(v), || q.pop())
            }
            (PairSystem::ArrayQueue, PairCalls::OutOfLine) => {
                pairs(iters, |v| array_queue_push(q, v), || array_queue_pop(q))
            }
        };
        let want = sum_below(iters);
        if black_box(sum) != want {
            let (name, case) = (system.row().name, calls.case());
            return Err(format!(
                "{name} ({case}): sum {sum} of dequeued events, expected {want}"
            ));
        }
        Ok(())
    }

    /// Nanoseconds per pair over `iters` pairs.
    pub fn time_ns(
        &mut self,
        system: PairSystem,
        calls: PairCalls,
        iters: u64,
    ) -> Result<f64, String> {
        let start = Instant::now();
        self.run(system, calls, iters)?;
        Ok(start.elapsed().as_nanos() as f64 / iters.max(1) as f64)
    }
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
