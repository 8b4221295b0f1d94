//! Single-thread cost of one post and one dequeue: evd's `post` +
//! `try_dequeue` against crossbeam-queue `ArrayQueue`'s `push` + `pop`, on
//! one thread, on a ring of the same capacity that holds at most one event.
//!
//! Both loops have the same shape: post the iteration number (through
//! `black_box`), dequeue it, add it to a sum; the sum is checked once
//! afterwards, so a refused post or an empty dequeue fails the run instead of
//! going unnoticed, and neither loop pays for a check per iteration.

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

    /// The name used in tables and the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            PairSystem::Evd => "evd post+try_dequeue",
            PairSystem::ArrayQueue => "crossbeam ArrayQueue push+pop",
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

    /// Run `iters` post/dequeue pairs of `system`; fails unless every event
    /// came back.
    ///
    /// ```
    /// use evd_bench::pair::{Pair, PairSystem};
    /// let mut p = Pair::new();
    /// for s in PairSystem::ALL {
    ///     p.run(s, 1000).unwrap();
    /// }
    /// ```
    pub fn run(&mut self, system: PairSystem, iters: u64) -> Result<(), String> {
        let mut sum = 0u64;
        match system {
            PairSystem::Evd => {
                let (tx, rx) = (&self.poster, &mut self.consumer);
                for i in 0..iters {
                    let _ = tx.post(black_box(i));
                    if let Ok(v) = rx.try_dequeue() {
                        sum = sum.wrapping_add(v);
                    }
                }
            }
            PairSystem::ArrayQueue => {
                let q = &self.queue;
                for i in 0..iters {
                    let _ = q.push(black_box(i));
                    if let Some(v) = q.pop() {
                        sum = sum.wrapping_add(v);
                    }
                }
            }
        }
        // The sum of 0..iters, wrapping like the loop's.
        let want = if iters.is_multiple_of(2) {
            (iters / 2).wrapping_mul(iters.wrapping_sub(1))
        } else {
            iters.wrapping_mul((iters - 1) / 2)
        };
        if black_box(sum) != want {
            return Err(format!(
                "{}: sum {sum} of dequeued events, expected {want}",
                system.name()
            ));
        }
        Ok(())
    }

    /// Nanoseconds per pair over `iters` pairs.
    pub fn time_ns(&mut self, system: PairSystem, iters: u64) -> Result<f64, String> {
        let start = Instant::now();
        self.run(system, iters)?;
        Ok(start.elapsed().as_nanos() as f64 / iters.max(1) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_systems_return_every_event() {
        let mut p = Pair::new();
        for s in PairSystem::ALL {
            p.run(s, 10_000).unwrap();
            assert!(p.time_ns(s, 10_000).unwrap() > 0.0);
        }
        assert_eq!(p.consumer.query().len, 0);
        assert!(p.queue.is_empty());
    }
}
