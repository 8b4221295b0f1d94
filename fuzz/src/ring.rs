//! The `ring` target: arbitrary post / dequeue / batch / resize / close /
//! drop sequences on the real ring (one thread), against a `VecDeque` model,
//! with payloads that count their drops.
//!
//! Every result is predicted exactly by the model (which event, which error,
//! which overflow count, the query counters), and at the end, once every
//! handle is dropped, every payload must have been dropped exactly once:
//! handed back, dequeued, or dropped with the ring.

use crate::payload::{DropLog, Payload};
use arbitrary::{Arbitrary, Unstructured};
use evd::{Consumer, PostError, Poster, ResizeError, TryDequeueError};
use std::collections::VecDeque;

/// One operation.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum RingOp {
    Post {
        poster: u8,
    },
    TryDequeue,
    Batch {
        max: u8,
        prealloc: u8,
    },
    Resize {
        cap: u8,
    },
    ClosePoster {
        poster: u8,
    },
    CloseConsumer,
    ClonePoster {
        poster: u8,
    },
    NewPoster,
    DropPoster {
        poster: u8,
    },
    DropConsumer,
    Query,
    PostLossy {
        poster: u8,
    },
    /// `dequeue_with`, checked as a batch into an empty `Vec`.
    With {
        max: u8,
    },
}

/// One fuzz input: the creation capacity, then operations until the input
/// runs out.
#[derive(Debug, Clone)]
pub struct Input {
    pub cap: u8,
    pub ops: Vec<RingOp>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Input {
            cap: u.arbitrary()?,
            ops: u.arbitrary_iter()?.collect::<arbitrary::Result<_>>()?,
        })
    }

    fn arbitrary_take_rest(mut u: Unstructured<'a>) -> arbitrary::Result<Self> {
        let cap = u.arbitrary()?;
        let mut ops = Vec::new();
        while !u.is_empty() {
            ops.push(RingOp::arbitrary(&mut u)?);
        }
        Ok(Input { cap, ops })
    }
}

/// Capacity argument: 0, far too large, room for more permits than may be
/// out at once ([`evd::Permit::MAX_OUT`]), or a small size.
pub fn capacity_arg(b: u8) -> usize {
    match b {
        0 => 0,
        255 => evd::MAX_CAPACITY + 1,
        254 => usize::MAX,
        253 => evd::Permit::<()>::MAX_OUT + 45,
        b => (b % 40) as usize,
    }
}

/// The sequential model of the data path.
#[derive(Debug)]
pub struct Model {
    pub queue: VecDeque<u64>,
    pub cap: usize,
    pub closed: bool,
    /// Losses not yet reported.
    pub overflow: u64,
    /// The last dequeue returned a loss report (the next prefers an event).
    pub last_was_report: bool,
    pub posted: u64,
    pub dequeued: u64,
    pub lost: u64,
    /// Slots promised to permits not yet sent or given back: taken, as queued
    /// events are, by every full check and by a resize.
    pub permits: usize,
}

impl Model {
    pub fn new(cap: usize) -> Model {
        Model {
            queue: VecDeque::new(),
            cap,
            closed: false,
            overflow: 0,
            last_was_report: false,
            posted: 0,
            dequeued: 0,
            lost: 0,
            permits: 0,
        }
    }

    /// Every slot is queued or promised.
    pub fn is_full(&self) -> bool {
        self.queue.len() + self.permits >= self.cap
    }

    /// Slots neither queued nor promised to a permit.
    pub fn free(&self) -> usize {
        self.cap.saturating_sub(self.queue.len() + self.permits)
    }

    /// Check a post's result and apply it.
    pub fn post(&mut self, id: u64, r: Result<(), PostError<Payload>>) {
        match r {
            Ok(()) => {
                assert!(!self.closed, "post accepted after close");
                assert!(!self.is_full(), "post accepted into a full ring");
                self.queue.push_back(id);
                self.posted += 1;
            }
            Err(PostError::Closed(p)) => {
                assert!(self.closed, "post refused as closed on an open EVD");
                assert_eq!(p.id, id, "a refused post hands back another event");
            }
            Err(PostError::Full(p)) => {
                assert!(!self.closed, "closed EVD reported full");
                assert!(self.is_full(), "post refused as full below capacity");
                assert_eq!(p.id, id, "a refused post hands back another event");
                // Backpressure, not a loss: nothing is counted.
            }
        }
    }

    /// Check a lossy post's result and apply it.
    pub fn post_lossy(&mut self, id: u64, r: Result<evd::Lossy, PostError<Payload>>) {
        match r {
            Ok(evd::Lossy::Posted) => self.post(id, Ok(())),
            Ok(evd::Lossy::Lost) => {
                assert!(!self.closed, "loss committed after close");
                assert!(self.is_full(), "event lost below capacity");
                self.overflow += 1;
                self.lost += 1;
            }
            Err(PostError::Full(_)) => panic!("a lossy post is never refused as full"),
            Err(e @ PostError::Closed(_)) => self.post(id, Err(e)),
        }
    }

    /// Take the pending report (the model of `take_report`).
    fn report(&mut self) -> Option<TryDequeueError> {
        if self.overflow == 0 {
            return None;
        }
        self.last_was_report = true;
        let lost = std::mem::take(&mut self.overflow);
        Some(TryDequeueError::Overflow(evd::Overflow { lost }))
    }

    /// What a dequeue that finds no event owes: a report, even right after
    /// one (there is no event to prefer), then the end or "empty".
    fn nothing_ready(&mut self) -> Result<(), TryDequeueError> {
        self.last_was_report = false;
        if let Some(r) = self.report() {
            return Err(r);
        }
        if self.closed && self.queue.is_empty() {
            Err(TryDequeueError::Closed)
        } else {
            Err(TryDequeueError::Empty)
        }
    }

    /// Check a single dequeue: reports and events alternate while both are
    /// there.
    pub fn try_dequeue(&mut self, r: Result<Payload, TryDequeueError>) {
        let r = r.map(|p| p.id);
        if !self.last_was_report {
            if let Some(report) = self.report() {
                return assert_eq!(r, Err(report));
            }
        }
        match self.queue.pop_front() {
            Some(id) => {
                assert_eq!(r, Ok(id));
                self.dequeued += 1;
                self.last_was_report = false;
            }
            None => assert_eq!(r.map(|_| ()), self.nothing_ready()),
        }
    }

    /// Check a batch dequeue of at most `max` appended after `before` items.
    pub fn batch(
        &mut self,
        max: usize,
        before: usize,
        out: &[Payload],
        r: Result<usize, TryDequeueError>,
    ) {
        if max == 0 {
            // Nothing asked for: nothing taken, no report, no state changed.
            assert_eq!(r, Ok(0));
            return assert_eq!(out.len(), before);
        }
        if !self.last_was_report {
            if let Some(report) = self.report() {
                assert_eq!(out.len(), before);
                return assert_eq!(r, Err(report));
            }
        }
        let n = self.queue.len().min(max);
        if n == 0 {
            let want = match self.nothing_ready() {
                Err(TryDequeueError::Empty) => Ok(0),
                Err(e) => Err(e),
                Ok(()) => unreachable!(),
            };
            assert_eq!(r, want);
            assert_eq!(out.len(), before);
            return;
        }
        assert_eq!(r, Ok(n));
        assert_eq!(out.len(), before + n);
        for p in &out[before..] {
            assert_eq!(Some(p.id), self.queue.pop_front(), "batch out of order");
        }
        self.dequeued += n as u64;
        self.last_was_report = false;
    }

    /// Check a resize.
    pub fn resize(&mut self, requested: usize, r: Result<usize, ResizeError>) {
        if requested == 0 {
            assert_eq!(r, Err(ResizeError::ZeroCapacity));
        } else if requested > evd::MAX_CAPACITY {
            assert_eq!(r, Err(ResizeError::CapacityTooLarge { requested }));
        } else {
            let cap = requested.next_power_of_two();
            // The new ring must hold the promised slots too.
            let promised = self.queue.len() + self.permits;
            if promised > cap && cap != self.cap {
                assert_eq!(
                    r,
                    Err(ResizeError::TooSmall {
                        queued: promised,
                        capacity: cap
                    })
                );
            } else {
                assert_eq!(r, Ok(cap));
                self.cap = cap;
            }
        }
    }

    pub fn check_query(&self, q: &evd::Query) {
        assert_eq!(q.capacity, self.cap, "query: capacity");
        assert_eq!(q.len, self.queue.len(), "query: len");
        assert_eq!(q.closed, self.closed, "query: closed");
        assert_eq!(q.posted, self.posted, "query: posted");
        assert_eq!(q.dequeued, self.dequeued, "query: dequeued");
        assert_eq!(q.lost, self.lost, "query: lost");
        assert_eq!(q.permits, self.permits, "query: permits");
    }
}

/// Run one input; panics on any divergence, leak or double drop.
pub fn run(input: &Input) {
    let log = DropLog::new();
    let requested = capacity_arg(input.cap);
    let created = evd::bounded::<Payload>(requested);
    let (poster, consumer) = match (requested, created) {
        (0, r) => return assert_eq!(r.err(), Some(evd::CreateError::ZeroCapacity)),
        (n, r) if n > evd::MAX_CAPACITY => {
            return assert_eq!(
                r.err(),
                Some(evd::CreateError::CapacityTooLarge { requested: n })
            )
        }
        (_, r) => r.expect("a small EVD is created"),
    };
    let mut model = Model::new(requested.next_power_of_two());
    let mut posters: Vec<Poster<Payload>> = vec![poster];
    let mut consumer: Option<Consumer<Payload>> = Some(consumer);
    for op in &input.ops {
        apply(op, &log, &mut model, &mut posters, &mut consumer);
    }
    if let Some(c) = &consumer {
        model.check_query(&c.query());
    }
    drop(consumer);
    drop(posters);
    log.assert_all_dropped_once();
}

fn pick(n: usize, b: u8) -> Option<usize> {
    (n > 0).then(|| b as usize % n)
}

fn apply(
    op: &RingOp,
    log: &std::sync::Arc<DropLog>,
    model: &mut Model,
    posters: &mut Vec<Poster<Payload>>,
    consumer: &mut Option<Consumer<Payload>>,
) {
    match *op {
        RingOp::Post { poster } => {
            if let Some(i) = pick(posters.len(), poster) {
                let p = log.make();
                let id = p.id;
                model.post(id, posters[i].post(p));
            }
        }
        RingOp::TryDequeue => {
            if let Some(c) = consumer {
                model.try_dequeue(c.try_dequeue());
            }
        }
        RingOp::Batch { max, prealloc } => {
            if let Some(c) = consumer {
                let mut out = Vec::with_capacity(prealloc as usize % 8);
                // Something already in `out` must stay in front.
                if prealloc & 0x80 != 0 {
                    out.push(log.make());
                }
                let before = out.len();
                let max = max as usize % 20;
                let r = c.dequeue_batch(&mut out, max);
                model.batch(max, before, &out, r);
            }
        }
        RingOp::With { max } => {
            if let Some(c) = consumer {
                let mut out = Vec::new();
                let max = max as usize % 20;
                let r = c.dequeue_with(max, |p| out.push(p));
                model.batch(max, 0, &out, r);
            }
        }
        RingOp::Resize { cap } => {
            if let Some(c) = consumer {
                let requested = capacity_arg(cap);
                model.resize(requested, c.resize(requested));
            }
        }
        RingOp::ClosePoster { poster } => {
            if let Some(i) = pick(posters.len(), poster) {
                posters[i].close();
                model.closed = true;
                assert!(posters[i].is_closed());
            }
        }
        RingOp::CloseConsumer => {
            if let Some(c) = consumer {
                c.close();
                model.closed = true;
            }
        }
        RingOp::ClonePoster { poster } => {
            if let Some(i) = pick(posters.len(), poster) {
                let p = posters[i].clone();
                posters.push(p);
            }
        }
        RingOp::NewPoster => {
            if let Some(c) = consumer {
                posters.push(c.poster());
            }
        }
        RingOp::DropPoster { poster } => {
            if let Some(i) = pick(posters.len(), poster) {
                posters.swap_remove(i);
                if posters.is_empty() {
                    // The last poster closes the EVD.
                    model.closed = true;
                }
            }
        }
        RingOp::DropConsumer => {
            if consumer.take().is_some() {
                model.closed = true;
                // Its queued events are dropped at once.
                model.dequeued += model.queue.len() as u64;
                model.queue.clear();
                for p in posters.iter() {
                    assert!(p.is_closed(), "dropping the consumer closes the EVD");
                }
            }
        }
        RingOp::PostLossy { poster } => {
            if let Some(i) = pick(posters.len(), poster) {
                let p = log.make();
                let id = p.id;
                model.post_lossy(id, posters[i].post_lossy(p));
            }
        }
        RingOp::Query => {
            if let Some(c) = consumer {
                model.check_query(&c.query());
            } else if let Some(p) = posters.first() {
                assert!(p.query().closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_corpus_replays() {
        let n = crate::replay::<Input>("ring", run);
        assert!(n > 0, "no seed corpus for ring");
    }

    #[test]
    fn random_sequences() {
        let mut rng = crate::Rng(0x0123_4567_89ab_cdef);
        for _ in 0..300 {
            let bytes = rng.bytes(600);
            let input = Input::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap();
            run(&input);
        }
    }
}
