//! [`RoomWaiter`]: wait for room without an event in hand, for posters that
//! must know there is room *before* they produce what they post (a feed that
//! takes completions out of a CQ only when the EVD can queue them).

use super::Poster;
use super::attempt::LeaveOnUnwind;
use crate::error::BatchPostError;
use crate::room::Seat;
use std::task::{Context, Poll};

/// A place in the EVD's room queue, owned: [`RoomWaiter::poll_room`]
/// resolves once the ring has a free slot, and registers the task's waker
/// with the consumer's dequeues while it has none. Made by
/// [`Poster::room_waiter`]; it holds a [`Poster`] of its own, which
/// [`RoomWaiter::poster`] lends out for the post that follows.
///
/// It follows the room queue's rules (see `post_blocking`): one wake per
/// freed slot, first come first served, and a waiter that is woken and then
/// finds room leaves the queue passing one wake on to the next waiter (the
/// room it saw may be taken by another poster before it posts; the next
/// waiter then finds the ring full and rejoins in its place). A waiter that
/// returned `Ready` has left the queue: if its post then finds the ring
/// full, its next `poll_room` joins at the back. Dropping it leaves the
/// queue the same way.
///
/// ```
/// use futures::task::noop_waker;
/// use std::task::{Context, Poll};
/// let (poster, mut consumer) = evd::bounded(2).unwrap();
/// let mut room = poster.room_waiter();
/// let waker = noop_waker();
/// let mut cx = Context::from_waker(&waker);
/// assert_eq!(room.poll_room(&mut cx), Poll::Ready(Ok(2)));
/// room.poster().post(1u8).unwrap();
/// room.poster().post(2).unwrap();
/// assert!(room.poll_room(&mut cx).is_pending()); // full: waits for a dequeue
/// assert_eq!(consumer.try_dequeue(), Ok(1)); // wakes the waiter
/// assert_eq!(room.poll_room(&mut cx), Poll::Ready(Ok(1)));
/// ```
pub struct RoomWaiter<T> {
    poster: Poster<T>,
    seat: Seat,
}

impl<T: Send> Poster<T> {
    /// A [`RoomWaiter`] for this EVD (with a clone of this handle).
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(4).unwrap();
    /// let room = poster.room_waiter();
    /// assert_eq!(room.poster().capacity(), 4);
    /// ```
    pub fn room_waiter(&self) -> RoomWaiter<T> {
        RoomWaiter {
            poster: self.clone(),
            seat: Seat::default(),
        }
    }
}

impl<T: Send> RoomWaiter<T> {
    /// The handle to post with.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let room = poster.room_waiter();
    /// room.poster().post(3u8).unwrap();
    /// assert_eq!(consumer.try_dequeue(), Ok(3));
    /// ```
    pub fn poster(&self) -> &Poster<T> {
        &self.poster
    }

    /// `Ready(Ok(free))` with the number of free slots seen (at least one;
    /// other posters may take them before this caller posts), after leaving
    /// the room queue; `Pending` with `cx`'s waker registered if the ring is
    /// full (a dequeue that frees a slot wakes it) or a
    /// [`Consumer::resize`](crate::Consumer::resize) holds posters off (its
    /// end wakes it: a post now would wait for the resize). `Ready(Err(Closed))` once
    /// the EVD is closed; `Ready(Err(Full))` at once if called inside an
    /// upcall of this same EVD (a handler call, a waker an instance or a
    /// permit's send runs for it, or the closure of its `dequeue_with`),
    /// where waiting would wait for itself; except where the innermost such
    /// frame is a waker run while an instance gives the token back for its
    /// handler call on a full ring: there it starts the draining instance
    /// (as below) before it answers. (A post from a handler under
    /// `ManyInstances` may start one too, as `post` documents: a handler
    /// call holding a lock it needs again must not poll from there.)
    ///
    /// Under an upcall policy with no instance running (a handler that
    /// panicked left the ring full, or upcalls were enabled with
    /// [`Invoke::New`](crate::Invoke::New) on a full ring), only an upcall
    /// can free a slot, and only a post starts one: this call starts it, as
    /// a refused post does, and the handler runs on the calling thread
    /// (its panic comes out of this call).
    ///
    /// A panic of `cx`'s waker's clone, or of the drop of the waker it
    /// replaces in the room queue, comes out of this call with the waiter
    /// out of the queue (a wake it was handed passed on); polled again, it
    /// joins anew.
    ///
    /// A full ring costs the first `Pending` a lock and one `membarrier`
    /// (the heavy half of the room barrier); a ring with room costs a load of
    /// the state word and the head.
    ///
    /// ```
    /// use futures::task::noop_waker;
    /// use std::task::{Context, Poll};
    /// let (poster, consumer) = evd::bounded::<u8>(1).unwrap();
    /// let mut room = poster.room_waiter();
    /// drop(consumer); // closes the EVD
    /// let waker = noop_waker();
    /// let mut cx = Context::from_waker(&waker);
    /// assert_eq!(room.poll_room(&mut cx), Poll::Ready(Err(evd::BatchPostError::Closed)));
    /// ```
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<Result<usize, BatchPostError>> {
        let id = self.poster.shared.id();
        if crate::frames::in_own_handler(id) {
            // Never waits here. Only a token hand-back drains: a handler
            // call would be re-entered by the instance (`frames`).
            let now = match crate::frames::in_token_hand_back(id) {
                true => self.room_now(),
                false => self.room_seen(),
            };
            // (A seat `room_now` left already is not left twice.)
            self.poster.shared.room_leave(&mut self.seat, false);
            return Poll::Ready(now.unwrap_or(Err(BatchPostError::Full)));
        }
        if let Some(r) = self.room_now() {
            return Poll::Ready(r);
        }
        // Join, then look again: the look after the join's heavy barrier
        // reloads the head, so either it sees the slot a concurrent dequeue
        // freed, or that dequeue's check sees this waiter and wakes it (the
        // room barrier's store-buffering pair, as for a waiting post).
        // Joining clones the waker and drops the one it replaces (user
        // code): should either panic, the seat is left on the way out, as a
        // waiting post's is, so that a waiter kept after the panic holds no
        // seat that swallows the next wake.
        {
            let mut seat = LeaveOnUnwind::new(&self.poster.shared, &mut self.seat);
            self.poster.shared.room_join(seat.seat(), cx.waker());
            seat.defuse();
        }
        match self.room_now() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    /// Room or closure now, leaving the queue (with the wake hand-on) if so;
    /// `None` if the ring is full.
    ///
    /// A full ring under an idle upcall policy (a handler that panicked left
    /// it full, or upcalls were enabled with `Invoke::New` on a full ring)
    /// is drained only by an upcall a post starts, and this waiter posts
    /// nothing while it waits: it starts that upcall here, as a refused post
    /// does, and looks again. (The caller has checked that this is not one of
    /// the EVD's own handler calls.) If the handler panics, the waiter
    /// leaves the room queue on the way out, as a post that gave up.
    fn room_now(&mut self) -> Option<Result<usize, BatchPostError>> {
        let r = loop {
            if let Some(r) = self.room_seen() {
                break r;
            }
            let mut seat = LeaveOnUnwind::new(&self.poster.shared, &mut self.seat);
            let drained = self.poster.start_draining_upcall();
            seat.defuse();
            if !drained {
                return None;
            }
        };
        self.poster.shared.room_leave(&mut self.seat, false);
        Some(r)
    }

    /// Stop waiting: leave the room queue, passing a wake this waiter was
    /// given on to the next waiter, as dropping it does; the next
    /// [`poll_room`](RoomWaiter::poll_room) joins again. The queue gives one
    /// wake per freed slot, first come first served, and only a waiter that
    /// polls again (or leaves) passes its wake on: whoever stops polling a
    /// waiter and keeps it must call this, or the waiters behind it wait
    /// for a slot that was freed for them.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    /// use std::task::{Context, Wake, Waker};
    /// struct Woken(AtomicBool);
    /// impl Wake for Woken {
    ///     fn wake(self: Arc<Self>) { self.0.store(true, SeqCst) }
    /// }
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u8).unwrap();
    /// let (mut first, mut second) = (poster.room_waiter(), poster.room_waiter());
    /// let [a, b] = [(); 2].map(|_| Arc::new(Woken(AtomicBool::new(false))));
    /// let poll = |w: &mut evd::RoomWaiter<u8>, flag: &Arc<Woken>| {
    ///     w.poll_room(&mut Context::from_waker(&Waker::from(flag.clone())))
    /// };
    /// assert!(poll(&mut first, &a).is_pending());
    /// assert!(poll(&mut second, &b).is_pending());
    /// assert_eq!(consumer.try_dequeue(), Ok(1)); // one slot: wakes `first` only
    /// assert!(a.0.load(SeqCst) && !b.0.load(SeqCst));
    /// first.leave(); // kept, no longer waiting: its wake goes on to `second`
    /// assert!(b.0.load(SeqCst));
    /// ```
    pub fn leave(&mut self) {
        self.poster.shared.room_leave(&mut self.seat, false);
    }

    /// The free slots seen now (at least one), the closure, or `None` if
    /// the ring is full or a resize holds reservations off (its end wakes
    /// the room queue).
    fn room_seen(&self) -> Option<Result<usize, BatchPostError>> {
        let o = self.poster.shared.occupancy();
        match o.free() {
            _ if o.closed => Some(Err(BatchPostError::Closed)),
            0 => None,
            _ if o.resizing => None,
            free => Some(Ok(free)),
        }
    }
}

impl<T> Drop for RoomWaiter<T> {
    fn drop(&mut self) {
        self.poster.shared.room_leave(&mut self.seat, false);
    }
}

impl<T> std::fmt::Debug for RoomWaiter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomWaiter")
            .field("waiting", &self.seat.is_taken())
            .finish()
    }
}
