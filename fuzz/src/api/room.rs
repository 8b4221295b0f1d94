//! The room queue's model for the `api` target: [`RoomWaiter`]s made,
//! polled, left and dropped, against `core/src/room.rs`'s rules: first come
//! first served by first join, one wake per freed slot, a woken waiter that
//! finds the ring full again rejoins in its place, a woken waiter that
//! leaves passes one wake on, close and a resize's end wake every waiter;
//! and `Query::room_wanted` / `Query::room_waiters` / `Query::room_wakes` with each waiter's own
//! count of wakes. On one thread nobody joins while slots are freed, so the
//! wakes a call owes follow from how many slots it freed, however many head
//! stores it took.

use super::{guarded, TestWaker};
use crate::payload::Payload;
use evd::{BatchPostError, RoomWaiter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// A waiter, the waker it polls with, and the model of its seat.
struct Waiter {
    room: RoomWaiter<Payload>,
    waker: Arc<TestWaker>,
    /// The wakes its waker must have had.
    wakes: u64,
    /// Its seat's id from its first join until it leaves: queued while the
    /// id is in the queue, woken (popped, not rejoined) while it is not.
    seat: Option<u64>,
}

/// Every live waiter, and the model of the queue.
#[derive(Default)]
pub(super) struct Room {
    waiters: Vec<Waiter>,
    /// The seats queued, front first, in ascending id order (the order
    /// they first joined).
    queue: Vec<u64>,
    next_seat: u64,
    /// `Query::room_wakes`: every pop.
    wakes: u64,
}

impl Room {
    /// Waiters alive, each holding a poster handle.
    pub(super) fn len(&self) -> usize {
        self.waiters.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    pub(super) fn add(&mut self, room: RoomWaiter<Payload>) {
        let waker = Arc::new(TestWaker {
            wakes: AtomicU64::new(0),
            panics: false,
        });
        self.waiters.push(Waiter {
            room,
            waker,
            wakes: 0,
            seat: None,
        });
    }

    /// `poll_room` on waiter `i` with its waker; `Err(())` if a handler
    /// it ran panicked.
    pub(super) fn poll(&mut self, i: usize) -> Result<Poll<Result<usize, BatchPostError>>, ()> {
        let w = &mut self.waiters[i];
        let waker = Waker::from(w.waker.clone());
        let room = &mut w.room;
        guarded(move || room.poll_room(&mut Context::from_waker(&waker)))
    }

    /// `leave` on waiter `i`, real and modelled.
    pub(super) fn leave_kept(&mut self, i: usize) {
        self.waiters[i].room.leave();
        self.leave(i);
    }

    /// Take waiter `i` out, its seat left in the model, to be dropped.
    pub(super) fn remove(&mut self, i: usize) -> RoomWaiter<Payload> {
        self.leave(i);
        self.waiters.remove(i).room
    }

    /// Every waiter, for the end of a run.
    pub(super) fn take_all(&mut self) -> Vec<RoomWaiter<Payload>> {
        self.waiters.drain(..).map(|w| w.room).collect()
    }

    /// `n` slots freed: the first `n` queued waiters are woken, each taken
    /// out of the queue.
    pub(super) fn pop(&mut self, n: u64) {
        for _ in 0..n {
            if self.queue.is_empty() {
                return;
            }
            let id = self.queue.remove(0);
            let w = self.waiters.iter_mut().find(|w| w.seat == Some(id));
            w.expect("a queued seat has its waiter").wakes += 1;
            self.wakes += 1;
        }
    }

    /// Close, a resize's end, a stranded full ring: every waiter woken.
    pub(super) fn wake_all(&mut self) {
        self.pop(u64::MAX);
    }

    /// Waiter `i` found the ring full: a new seat at the back, a woken one
    /// back in its place, a queued one stays.
    pub(super) fn join(&mut self, i: usize) {
        match self.waiters[i].seat {
            None => {
                let id = self.next_seat;
                self.next_seat += 1;
                self.waiters[i].seat = Some(id);
                self.queue.push(id);
            }
            Some(id) if self.queue.contains(&id) => {}
            Some(id) => {
                let at = self.queue.partition_point(|&s| s < id);
                self.queue.insert(at, id);
            }
        }
    }

    /// Waiter `i` leaves (it saw room or the close, gave up, or is
    /// dropped): out of the queue, and a woken one passes a wake on.
    pub(super) fn leave(&mut self, i: usize) {
        let Some(id) = self.waiters[i].seat.take() else {
            return;
        };
        match self.queue.iter().position(|&s| s == id) {
            Some(at) => {
                self.queue.remove(at);
            }
            None => self.pop(1),
        }
    }

    pub(super) fn check(&self, q: &evd::Query) {
        assert_eq!(q.room_wanted, !self.queue.is_empty(), "query: room_wanted");
        assert_eq!(q.room_waiters, self.queue.len(), "query: room_waiters");
        assert_eq!(q.room_wakes, self.wakes, "query: room_wakes");
        for (i, w) in self.waiters.iter().enumerate() {
            let got = w.waker.wakes.load(Ordering::Relaxed);
            assert_eq!(got, w.wakes, "room waiter {i}: wakes");
        }
    }
}
