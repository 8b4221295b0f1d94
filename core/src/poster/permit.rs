//! Permits: a slot promised before the event exists. [`Poster::try_reserve`]
//! and [`Poster::reserve`] (the [`Reserving`] future) hand out a [`Permit`]
//! that borrows the poster, [`Poster::try_reserve_owned`] and
//! [`Poster::reserve_owned`] an [`OwnedPermit`] that holds it (for a task
//! spawned with the promise). Sending posts into the promised slot, which
//! no other post can take; a permit dropped unsent gives the slot back and
//! wakes the next poster waiting for room.
//!
//! The promise is a count in the state word (`PERMITS`, see
//! [`crate::state`]), taken by the same CAS, against the same tail, as a
//! post's reservation: a post and a permit can never both take the last
//! slot. A word with permits out is never a plain reservation, so while
//! nobody holds a permit a post runs exactly the instructions it ran before
//! permits existed.

use super::Poster;
use super::attempt::LeaveOnUnwind;
use crate::engine::{PERMIT, Refused};
use crate::error::{BatchPostError, PostError};
use crate::ring::Buffer;
use crate::room::Seat;
use crate::state::Notify;
use crate::unwind::Panics;
use crate::waker_list::Ticket;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A free slot promised to one event: [`Permit::send`] posts into it and is
/// never refused as full. Made by [`Poster::try_reserve`] and
/// [`Poster::reserve`].
///
/// While it lives, the slot counts as taken: posts see one slot less
/// ([`Poster::free_slots`], [`Query::permits`](crate::Query::permits)),
/// but the consumer sees nothing queued, so it is never held up by a
/// permit (events posted after it are dequeued before it is sent). Dropping
/// it unsent gives the slot back and wakes one poster waiting for room. At
/// most [`Permit::MAX_OUT`] permits are out at once per EVD: another
/// [`Poster::reserve`] waits until one is sent or dropped
/// ([`Poster::try_reserve`] is refused as full).
///
/// `Send` and `Sync` as [`Poster`] is: only for events that are `Send`.
///
/// ```compile_fail
/// fn assert_send<T: Send>() {}
/// assert_send::<evd::Permit<'static, std::rc::Rc<u8>>>();
/// ```
#[must_use = "a permit holds a slot until it is sent or dropped"]
pub struct Permit<'a, T> {
    poster: &'a Poster<T>,
}

impl<T> Permit<'_, T> {
    /// Most permits out at once on one EVD (a field of the state word).
    pub const MAX_OUT: usize = crate::state::MAX_PERMITS as usize;
}

impl<T: Send> Poster<T> {
    /// Promise a slot now, or refuse: [`BatchPostError::Full`] if every slot
    /// is queued or promised (or [`Permit::MAX_OUT`] permits are out),
    /// [`BatchPostError::Closed`] if the EVD is closed. A refusal writes
    /// nothing shared. A full ring under an idle upcall policy has this
    /// thread run the upcall that drains it, as [`Poster::post`] does.
    ///
    /// A permit starts no upcall. One that takes the last free slot of a
    /// ring holding events under an idle upcall policy (no instance runs;
    /// only a post refused as full starts one) wakes the posters waiting for
    /// room so that one of them does: their wakers run on this thread, in
    /// this call (a panic of theirs is swallowed). From a handler under
    /// `ManyInstances`, a waker that polls its post inline may so start an
    /// instance that calls the handler again, as a post from there may.
    ///
    /// # Panics
    ///
    /// As [`Poster::post`] when it runs that upcall: its handler's panic
    /// comes out of this call (no permit was taken).
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// let permit = poster.try_reserve().unwrap();
    /// assert_eq!(poster.post(1u32), Err(evd::PostError::Full(1))); // the slot is promised
    /// permit.send(2).unwrap();
    /// assert_eq!(consumer.try_dequeue(), Ok(2));
    /// ```
    pub fn try_reserve(&self) -> Result<Permit<'_, T>, BatchPostError> {
        self.reserve_tickets(PERMIT)?;
        Ok(Permit { poster: self })
    }

    /// Wait, without blocking a thread, for a free slot and promise it: the
    /// future resolves to a [`Permit`] once one is free, or to
    /// [`BatchPostError::Closed`] if the EVD is (or gets) closed;
    /// [`BatchPostError::Full`] only inside an upcall of this same EVD (or
    /// the closure of its `dequeue_with`; see [`Poster::post_blocking`] for
    /// what counts as inside), where waiting would wait for itself.
    ///
    /// Cancel-safe: dropping the future before it resolves takes nothing
    /// (no event is in hand, no slot was promised) and leaves the room
    /// queue, passing a wake it was given on to the next waiting poster.
    /// It waits in the room queue as [`Poster::post_async`] does (first come
    /// first served, one wake per freed slot); while [`Permit::MAX_OUT`]
    /// permits are out it waits instead for one of them to be sent or
    /// dropped (or for close), outside the room queue.
    ///
    /// # Panics
    ///
    /// Polling it can panic as [`Poster::try_reserve`] does, and with the
    /// task's waker's panic when the room queue clones it or drops the clone
    /// it replaces (no event is in hand, and the future leaves the queue),
    /// or when the permit-limit waiters' list does (nothing is lost there:
    /// that list's waiters are all woken together).
    ///
    /// ```
    /// use futures::executor::block_on;
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u32).unwrap();
    /// let p = poster.clone();
    /// let t = std::thread::spawn(move || {
    ///     block_on(async {
    ///         let permit = p.reserve().await.unwrap(); // waits for the dequeue below
    ///         permit.send(2).unwrap();
    ///     })
    /// });
    /// assert_eq!(consumer.dequeue(), Ok(1));
    /// assert_eq!(consumer.dequeue(), Ok(2));
    /// t.join().unwrap();
    /// ```
    pub fn reserve(&self) -> Reserving<'_, T> {
        Reserving {
            poster: self,
            seat: Seat::default(),
            ticket: Ticket::default(),
            resolved: false,
        }
    }
}

impl<'a, T: Send> Permit<'a, T> {
    /// Post `event` into the promised slot: never refused as full. An armed
    /// consumer is woken, or an upcall run, as by [`Poster::post`]. A closed
    /// EVD hands the event back as [`PostError::Closed`] (and the slot is
    /// given back); that is the only error.
    ///
    /// # Panics
    ///
    /// As [`Poster::post`]: user code this call runs (the upcall handler, a
    /// waker) may panic out of it, after the event is in the ring.
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded(2).unwrap();
    /// let permit = poster.try_reserve().unwrap();
    /// drop(consumer); // closes the EVD
    /// assert_eq!(permit.send(7u8), Err(evd::PostError::Closed(7)));
    /// ```
    pub fn send(self, event: T) -> Result<(), PostError<T>> {
        // The promise is used (or given back) by the send, never by `drop`.
        ManuallyDrop::new(self).poster.send_promised(event)
    }

    /// The handle the permit was taken from.
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(4).unwrap();
    /// let permit = poster.try_reserve().unwrap();
    /// assert_eq!(permit.poster().query().permits, 1);
    /// ```
    pub fn poster(&self) -> &'a Poster<T> {
        self.poster
    }
}

impl<T: Send> Poster<T> {
    /// [`Poster::try_reserve`] for a permit that holds this handle instead
    /// of borrowing it, to be moved into another task or thread; a refusal
    /// hands the handle back with the error.
    ///
    /// # Panics
    ///
    /// As [`Poster::try_reserve`].
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(2).unwrap();
    /// let permit = poster.clone().try_reserve_owned().unwrap();
    /// std::thread::spawn(move || permit.send(5u32).unwrap()).join().unwrap();
    /// assert_eq!(consumer.try_dequeue(), Ok(5));
    /// # drop(poster);
    /// ```
    pub fn try_reserve_owned(self) -> Result<OwnedPermit<T>, (BatchPostError, Poster<T>)> {
        match self.reserve_tickets(PERMIT) {
            Ok(_) => Ok(OwnedPermit {
                poster: ManuallyDrop::new(self),
            }),
            Err(e) => Err((e, self)),
        }
    }

    /// [`Poster::reserve`] for a permit that holds this handle instead of
    /// borrowing it. Cancel-safe as [`Poster::reserve`]: dropped before it
    /// resolves, it takes nothing (and drops the handle). A refusal drops
    /// the handle.
    ///
    /// # Panics
    ///
    /// As [`Poster::reserve`].
    ///
    /// ```
    /// use futures::executor::block_on;
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// let permit = block_on(poster.clone().reserve_owned()).unwrap();
    /// let poster_back = permit.send(3u32).unwrap(); // the handle comes back
    /// assert_eq!(consumer.try_dequeue(), Ok(3));
    /// # drop((poster, poster_back));
    /// ```
    pub async fn reserve_owned(self) -> Result<OwnedPermit<T>, BatchPostError> {
        // No await point between the permit and the owned one: cancelling
        // the future can drop the reservation (taking nothing) but never a
        // permit.
        let permit = self.reserve().await?;
        std::mem::forget(permit);
        Ok(OwnedPermit {
            poster: ManuallyDrop::new(self),
        })
    }

    /// Post into a slot promised to a permit of this handle's EVD
    /// ([`Permit::send`]); the promise is used, or given back if closed.
    fn send_promised(&self, event: T) -> Result<(), PostError<T>> {
        match self.shared.send_permit() {
            Some((ticket, notify, old)) => {
                // SAFETY: the ticket comes from the send's CAS, which moved
                // the promised slot into the tail: the permit was taken with
                // a full check against a head the consumer has passed, and
                // no reservation since could take the slot it holds, so the
                // slot's previous lap has been taken. The buffer pointer is
                // loaded after that CAS, as in `post`.
                unsafe { Buffer::publish(self.shared.buffer_ptr(), ticket, event) };
                // After the publish: the wakers run without holding the
                // consumer up on an unpublished slot. The wakes of the
                // reservations waiting for a permit are user code run on this
                // thread, while the notification is still owed:
                // - the consumer's notification (its waker, its fd, a CNO
                //   trigger) comes first, as a close's does: the consumer is
                //   not held up behind their wakers, and a waker may disable
                //   the EVD on its CNO, whose barrier waits for the triggers
                //   owed, this one included; a panic of the notification's
                //   own waker comes after the permit's wakes, which it would
                //   otherwise skip for good;
                // - an upcall instance comes after them (the reservations do
                //   not wait for it), but it already holds the token and is
                //   counted: they run inside this EVD's frame, as its
                //   handler's wakes do, so a teardown or a wait for room from
                //   one is refused instead of waiting for it.
                match notify {
                    Notify::None => self.shared.permit_back(old, false),
                    Notify::Upcall => {
                        let id = self.shared.id();
                        crate::frames::as_handler_of(id, || self.shared.permit_back(old, false));
                        self.deliver(notify);
                    }
                    Notify::Wake | Notify::Cno => {
                        let mut panics = Panics::default();
                        panics.run(|| self.deliver(notify));
                        self.shared.permit_back(old, false);
                        panics.resume();
                    }
                }
                Ok(())
            }
            None => {
                self.shared.release_permit();
                Err(PostError::Closed(event))
            }
        }
    }
}

/// A free slot promised to one event, holding the [`Poster`] it was taken
/// with: a [`Permit`] that can move into another task or thread. Made by
/// [`Poster::try_reserve_owned`] and [`Poster::reserve_owned`]; while it
/// lives its handle keeps the EVD open as any poster does.
///
/// ```compile_fail
/// fn assert_send<T: Send>() {}
/// assert_send::<evd::OwnedPermit<std::rc::Rc<u8>>>();
/// ```
#[must_use = "a permit holds a slot until it is sent or dropped"]
pub struct OwnedPermit<T> {
    /// Taken out exactly once: by `send`, `release` or `drop`.
    poster: ManuallyDrop<Poster<T>>,
}

impl<T: Send> OwnedPermit<T> {
    /// Post `event` into the promised slot, as [`Permit::send`], and hand
    /// the poster back. A closed EVD hands the event back as
    /// [`PostError::Closed`] (the slot is given back, the handle dropped).
    ///
    /// # Panics
    ///
    /// As [`Permit::send`]; the handle is dropped on the way out.
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded(1).unwrap();
    /// let permit = poster.try_reserve_owned().unwrap();
    /// drop(consumer); // closes the EVD
    /// assert_eq!(permit.send(1u8).unwrap_err(), evd::PostError::Closed(1));
    /// ```
    pub fn send(self, event: T) -> Result<Poster<T>, PostError<T>> {
        let poster = self.into_poster();
        poster.send_promised(event)?;
        Ok(poster)
    }
}

impl<T> OwnedPermit<T> {
    /// Give the slot back unsent (waking one poster waiting for room) and
    /// hand the poster back.
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(1).unwrap();
    /// let poster = poster.try_reserve_owned().unwrap().release();
    /// assert_eq!(poster.free_slots(), Some(1));
    /// ```
    pub fn release(self) -> Poster<T> {
        let poster = self.into_poster();
        poster.shared.release_permit();
        poster
    }

    /// The handle the permit holds.
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(4).unwrap();
    /// let permit = poster.try_reserve_owned().unwrap();
    /// assert_eq!(permit.poster().query().permits, 1);
    /// ```
    pub fn poster(&self) -> &Poster<T> {
        &self.poster
    }

    /// The poster, out of a permit whose promise the caller now uses or
    /// gives back (its `Drop` does not run).
    fn into_poster(self) -> Poster<T> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used again and its `Drop` never runs, so
        // the poster is taken out exactly once.
        unsafe { ManuallyDrop::take(&mut this.poster) }
    }
}

impl<T> Drop for OwnedPermit<T> {
    /// Give the slot back unsent, wake one poster waiting for room, and drop
    /// the handle.
    fn drop(&mut self) {
        self.poster.shared.release_permit();
        // SAFETY: `drop` runs once, and `send`/`release` skip it.
        unsafe { ManuallyDrop::drop(&mut self.poster) };
    }
}

impl<T> std::fmt::Debug for OwnedPermit<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("evd", &self.poster.shared.id())
            .finish()
    }
}

impl<T> Drop for Permit<'_, T> {
    /// Give the slot back unsent, and wake one poster waiting for room.
    fn drop(&mut self) {
        self.poster.shared.release_permit();
    }
}

impl<T> std::fmt::Debug for Permit<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("evd", &self.poster.shared.id())
            .finish()
    }
}

/// The future of [`Poster::reserve`]: resolves to a [`Permit`] once a slot
/// is free, or to the refusal.
///
/// Dropping it before it resolves leaves the room queue; a wake it had been
/// given passes to the next waiting poster. Nothing else is lost: it holds
/// no event and no slot until it resolves.
#[must_use = "futures do nothing unless polled"]
pub struct Reserving<'a, T> {
    poster: &'a Poster<T>,
    /// Its place in the room queue, while it waits for a free slot.
    seat: Seat,
    /// Its place among the permit-limit waiters, while it waits for a
    /// permit back.
    ticket: Ticket,
    resolved: bool,
}

impl<'a, T: Send> Future for Reserving<'a, T> {
    type Output = Result<Permit<'a, T>, BatchPostError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        assert!(!this.resolved, "Reserving polled after it resolved");
        let shared = &*this.poster.shared;
        // Each refusal registers the waker where the change it waits for is
        // announced (a full ring and a resize under way: the room queue),
        // then tries again; a second refusal of the same kind sleeps. Either the try after registering sees the change, or the
        // change's side finds the waker (the room barrier's pair for a
        // slot, the list's lock for a permit back).
        let mut registered_for = None;
        // A poll that unwinds (the task's waker panics as the room queue
        // clones it or drops the clone it replaces; a draining upcall's
        // handler panics) leaves the room queue: a future kept alive and
        // never polled again must not hold the front seat, taking the wake
        // of the next freed slot from the poster behind it.
        let mut seat = LeaveOnUnwind::new(shared, &mut this.seat);
        let r = loop {
            let refused = match this.poster.reserve_draining::<true>(PERMIT) {
                Ok(_) => {
                    break Ok(Permit {
                        poster: this.poster,
                    });
                }
                Err(Refused::Closed) => break Err(BatchPostError::Closed),
                Err(refused) => refused,
            };
            let for_a_slot = refused != Refused::AtPermitLimit;
            if for_a_slot && crate::frames::in_own_handler(shared.id()) {
                // Inside its own upcall the thread is the consumer: no slot
                // could be freed while it waits.
                break Err(BatchPostError::Full);
            }
            if registered_for == Some(for_a_slot) {
                seat.defuse();
                return Poll::Pending;
            }
            registered_for = Some(for_a_slot);
            if for_a_slot {
                shared.room_join(seat.seat(), cx.waker());
            } else {
                // Waiting for a permit back, not for a slot: a slot's wake
                // this seat was given is passed on to the next waiter.
                shared.room_leave(seat.seat(), false);
                shared
                    .limit_waiters()
                    .register(&mut this.ticket, cx.waker());
            }
        };
        // A permit took a slot as a post does: the room queue's hand-on
        // rule for a waiter that posted applies.
        shared.room_leave(seat.defuse(), r.is_ok());
        shared.limit_waiters().leave(&mut this.ticket);
        this.resolved = true;
        Poll::Ready(r)
    }
}

impl<T: Send> futures_core::FusedFuture for Reserving<'_, T> {
    fn is_terminated(&self) -> bool {
        self.resolved
    }
}

impl<T> Drop for Reserving<'_, T> {
    fn drop(&mut self) {
        self.poster.shared.room_leave(&mut self.seat, false);
        self.poster.shared.limit_waiters().leave(&mut self.ticket);
    }
}

impl<T> std::fmt::Debug for Reserving<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserving")
            .field("resolved", &self.resolved)
            .field("waiting_for_a_slot", &self.seat.is_taken())
            .field("waiting_for_a_permit_back", &self.ticket.is_taken())
            .finish()
    }
}
