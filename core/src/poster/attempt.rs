//! One attempt of a post that waits for room ([`Poster::attempt`]), shared
//! by the blocking post (`wait`), [`PostAsync`](super::PostAsync) and
//! [`PostSink`](super::PostSink), and the guard that leaves the room queue
//! if a post inside it unwinds ([`LeaveOnUnwind`], which the
//! [`RoomWaiter`](super::RoomWaiter)'s draining upcall uses too).

use super::Poster;
use crate::engine::Shared;
use crate::error::PostError;
use crate::room::Seat;
use crate::unwind::Held;
use std::task::Waker;

impl<T: Send> Poster<T> {
    /// One attempt of a post that waits for room: post; if the ring is full,
    /// join the room queue with `waker` and post once more (the room
    /// signal's check after its arm). `Wait` hands the event back: sleep
    /// until `waker` is woken, then attempt again. A `Done` has left the
    /// queue already.
    ///
    /// Inside a handler call of this EVD (an upcall, or `dequeue_with`'s
    /// closure) the thread is its consumer, and waiting for room would wait
    /// for itself: a full ring is refused at once.
    ///
    /// A post here may run user code that panics (the consumer's waker, a
    /// handler): the seat is then left on the way out as a poster that gave
    /// up leaves it, passing on a wake it was handed, so that no caller
    /// (a sink polled again after the panic, a future kept alive) holds a
    /// seat that swallows the next wake.
    pub(crate) fn attempt(&self, seat: &mut Seat, event: T, waker: &Waker) -> Attempt<T> {
        let mut seat = LeaveOnUnwind::new(&self.shared, seat);
        let event = match self.post_for_room(event) {
            Err(PostError::Full(ev)) => ev,
            done => return self.done(seat.defuse(), done),
        };
        if crate::frames::in_own_handler(self.shared.id()) {
            return self.done(seat.defuse(), Err(PostError::Full(event)));
        }
        // Joining clones `waker` (user code): see `Held`.
        let event = Held::new(event);
        self.shared.room_join(seat.seat(), waker);
        match self.post_for_room(event.into_inner()) {
            Err(PostError::Full(ev)) => {
                seat.defuse();
                Attempt::Wait(ev)
            }
            done => self.done(seat.defuse(), done),
        }
    }

    /// A waiting post is over: leave the room queue, passing on a wake that
    /// was not used.
    fn done(&self, seat: &mut Seat, r: Result<(), PostError<T>>) -> Attempt<T> {
        self.shared.room_leave(seat, r.is_ok());
        Attempt::Done(r)
    }
}

/// The seat of a [`Poster::attempt`] (or of a room waiter's draining
/// upcall) under way: left, as by a poster that gave up (a wake it was
/// handed is passed on), if a post inside it unwinds. Whether that post
/// queued its event is not known there, and a wake passed on in vain only
/// makes the next waiter try again.
pub(crate) struct LeaveOnUnwind<'a, T> {
    shared: &'a Shared<T>,
    seat: &'a mut Seat,
    armed: bool,
}

impl<'a, T> LeaveOnUnwind<'a, T> {
    /// Guard `seat` of the EVD `shared`.
    pub(crate) fn new(shared: &'a Shared<T>, seat: &'a mut Seat) -> Self {
        LeaveOnUnwind {
            shared,
            seat,
            armed: true,
        }
    }

    /// The seat, still guarded.
    pub(crate) fn seat(&mut self) -> &mut Seat {
        self.seat
    }

    /// The attempt returns normally: the seat, no longer left on drop.
    pub(crate) fn defuse(&mut self) -> &mut Seat {
        self.armed = false;
        self.seat
    }
}

impl<T> Drop for LeaveOnUnwind<'_, T> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.room_leave(self.seat, false);
        }
    }
}

/// The outcome of [`Poster::attempt`].
pub(crate) enum Attempt<T> {
    /// Posted, or refused for good; the seat has left the room queue.
    Done(Result<(), PostError<T>>),
    /// Still full: the seat is queued; sleep until woken.
    Wait(T),
}
