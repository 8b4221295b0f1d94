//! Single-thread cost of one post and one dequeue: evd's `post` +
//! `try_dequeue` against crossbeam-queue `ArrayQueue`'s `push` + `pop`, on
//! one thread, on a ring of the same capacity that holds at most one event.
//!
//! Both loops have the same shape: post the iteration number (through
//! `black_box`), dequeue it, add it to a sum; the sum is checked once
//! afterwards, so a refused post or an empty dequeue fails the run instead of
//! going unnoticed, and neither loop pays for a check per iteration.

use crate::report::{Role, System};
use std::hint::black_box;
use std::time::Instant;

/// A system under test in the single-thread pair case.
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
}

/// `ArrayQueue` is compared with evd.
impl System for PairSystem {
    fn name(self) -> &'static str {
        match self {
            PairSystem::Evd => "evd post+try_dequeue",
            PairSystem::ArrayQueue => "crossbeam ArrayQueue push+pop",
        }
    }

    fn role(self) -> Role {
        if self == PairSystem::Evd {
            Role::Evd
        } else {
            Role::Peer
        }
    }

    fn baseline(self) -> Option<PairSystem> {
        Some(PairSystem::Evd)
    }
}

/// How the loop reaches each system's operations.
///
/// The compiler inlines evd's `post` and `try_dequeue` into this loop and
/// does not inline `ArrayQueue::push` and `pop` (crossbeam's `push_or_else`
/// is too large for the inliner at a call site in a crate that uses it in
/// many places), so the loop as compiled also measures that difference. Each
/// system's operations behind a non-inlined function of this crate pay one
/// call per operation each: the cost of the code, not of the inliner's
/// choice. A crate that calls `ArrayQueue` from one place only gets it
/// inlined there, and then the two loops run about even on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PairCalls {
    /// The loop calls the systems' methods; the compiler inlines what it
    /// chooses.
    AsCompiled,
    /// Each post and each dequeue is a call to an `#[inline(never)]`
    /// function that makes it.
    OutOfLine,
}

impl PairCalls {
    /// Both styles, as compiled first.
    pub const ALL: [PairCalls; 2] = [PairCalls::AsCompiled, PairCalls::OutOfLine];

    /// The case name in tables and the JSON report.
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
        Pair {
            poster,
            consumer,
            queue: crossbeam_queue::ArrayQueue::new(1024),
        }
    }

    /// Run `iters` post/dequeue pairs of `system`, its operations reached
    /// as `calls` says; fails unless every event came back.
    pub fn run(&mut self, system: PairSystem, calls: PairCalls, iters: u64) -> Result<(), String> {
        let (tx, rx, q) = (&self.poster, &mut self.consumer, &self.queue);
        let sum = match (system, calls) {
            (PairSystem::Evd, PairCalls::AsCompiled) => pairs(
                iters,
                |v| {
                    let _ = tx.post(v);
                },
                || rx.try_dequeue().ok(),
            ),
            (PairSystem::Evd, PairCalls::OutOfLine) => {
                pairs(iters, |v| evd_post(tx, v), || evd_dequeue(rx))
            }
            (PairSystem::ArrayQueue, PairCalls::AsCompiled) => pairs(
                iters,
                |v| {
                    let _ = q.push(v);
                },
                || q.pop(),
            ),
            (PairSystem::ArrayQueue, PairCalls::OutOfLine) => {
                pairs(iters, |v| array_queue_push(q, v), || array_queue_pop(q))
            }
        };
        // The sum of 0..iters, wrapping like the loop's.
        let want = if iters.is_multiple_of(2) {
            (iters / 2).wrapping_mul(iters.wrapping_sub(1))
        } else {
            iters.wrapping_mul((iters - 1) / 2)
        };
        if black_box(sum) != want {
            return Err(format!(
                "{} ({}): sum {sum} of dequeued events, expected {want}",
                system.name(),
                calls.case()
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

/// The one loop shape of every pair run: post the iteration number (through
/// `black_box`), dequeue, add what came out to the sum.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_systems_return_every_event() {
        let mut p = Pair::new();
        for s in PairSystem::ALL {
            for c in PairCalls::ALL {
                p.run(s, c, 10_000).unwrap();
                assert!(p.time_ns(s, c, 10_000).unwrap() > 0.0);
            }
        }
        assert_eq!(p.consumer.query().len, 0);
        assert!(p.queue.is_empty());
    }
}
