//! The posting handle: [`Poster`], and what a lossy post reports, [`Lossy`];
//! `attempt` (one try of a post that waits for room, shared by the waits),
//! `wait` (posts that block until there is room), `future` ([`PostAsync`]),
//! `closed` ([`Closed`]: waiting for close),
//! `sink` ([`PostSink`]), `room` ([`RoomWaiter`]: waiting for room with no
//! event in hand).

mod attempt;
mod closed;
mod future;
mod permit;
mod room;
mod sink;
mod snapshot;
mod wait;

pub use closed::Closed;
pub use future::PostAsync;
pub use permit::{OwnedPermit, Permit, Reserving};
pub use room::RoomWaiter;
pub use sink::PostSink;

use crate::engine::{Refused, Shared};
use crate::error::{BatchPostError, PostError};
use crate::ring::Buffer;
use crate::state::Notify;
use crate::sync::{Arc, AtomicU64, Ordering};
use crate::unwind::{Held, Panics};

/// A posting handle: cloneable, `Send + Sync`, usable from any thread.
///
/// [`Poster::post`] is lock-free and allocation-free: one CAS on the state word
/// reserves a slot (and takes the notification if the consumer is armed), then
/// the value is written and published.
///
/// `Send + Sync` only for events that are `Send`: a handle that could carry an
/// `Rc` to another thread does not compile.
///
/// ```compile_fail
/// fn assert_send<T: Send>() {}
/// assert_send::<evd::Poster<std::rc::Rc<u8>>>();
/// ```
pub struct Poster<T> {
    shared: Arc<Shared<T>>,
    /// A head the consumer has passed (a lower bound of the real head). Read
    /// instead of the consumer's line on every post; reloaded only when the
    /// ring looks full. `Release`/`Acquire` so that a thread using another
    /// thread's refresh still synchronizes with the consumer's head store.
    head_hint: AtomicU64,
}

impl<T> Poster<T> {
    /// A handle on `shared` whose cached head is `head`; `shared`'s poster
    /// count already includes it.
    pub(crate) fn new(shared: Arc<Shared<T>>, head: u64) -> Self {
        Poster {
            shared,
            head_hint: AtomicU64::new(head),
        }
    }
}

impl<T> Clone for Poster<T> {
    fn clone(&self) -> Self {
        self.shared.add_poster();
        Poster {
            shared: self.shared.clone(),
            head_hint: AtomicU64::new(self.head_hint.load(Ordering::Acquire)),
        }
    }
}

impl<T> Drop for Poster<T> {
    fn drop(&mut self) {
        self.shared.release_poster();
    }
}

impl<T: Send> Poster<T> {
    /// Post an event (DAT's `post_se`, and the path every source uses).
    ///
    /// A full ring hands the event back as [`PostError::Full`]: that is
    /// backpressure, not a loss, so nothing is counted or reported and the
    /// refusal writes none of the EVD's shared lines (at most this handle's
    /// own hint of the head); retry, or give the event up with
    /// [`Poster::post_lossy`]. A closed EVD hands it back as
    /// [`PostError::Closed`]. If the consumer is armed, this post disarms it
    /// and notifies it exactly once; if an upcall policy is enabled and this
    /// post may start an instance (none running under `SingleInstance`, the
    /// token free under `ManyInstances`), this thread runs the upcall before
    /// returning (also when it finds the ring full: the upcall drains it,
    /// then this post goes in, as nothing else could start an upcall).
    ///
    /// # Panics
    ///
    /// Never on its own; user code this call runs may panic, and its panic
    /// then comes out of this call: the upcall handler (when an upcall
    /// policy is enabled), the consumer's or the CNO's waker (when the post
    /// notifies). The event is in the ring by then, the upcall token and
    /// instance count are released, and the EVD stays usable: what is
    /// still queued goes to the next upcall or dequeue. One exception: a
    /// post that finds the ring full and runs the upcall to make room drops
    /// its event if that upcall panics (it was never posted), once, a panic
    /// of the event's `Drop` then swallowed (the handler's goes on).
    ///
    /// ```
    /// use evd::{PostError, TryDequeueError};
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u32).unwrap();
    /// assert_eq!(poster.post(2), Err(PostError::Full(2))); // handed back, not lost
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
    /// consumer.close();
    /// assert_eq!(poster.post(3), Err(PostError::Closed(3)));
    /// ```
    #[inline(always)]
    pub fn post(&self, event: T) -> Result<(), PostError<T>> {
        self.post_with::<false>(event)
    }

    /// [`Poster::post`] for a post that waits for room (blocking, timed,
    /// async, the sink): a resize under way refuses it as
    /// [`PostError::Full`] instead of being waited out, and the post waits
    /// for its end in the room queue, which that end wakes.
    #[inline(always)]
    pub(crate) fn post_for_room(&self, event: T) -> Result<(), PostError<T>> {
        self.post_with::<true>(event)
    }

    /// [`Poster::post`], a resize refused as full if `REFUSE_RESIZE`.
    #[inline(always)]
    fn post_with<const REFUSE_RESIZE: bool>(&self, event: T) -> Result<(), PostError<T>> {
        // The fast path is a leaf: one plain try at the reservation, the
        // publish, return. Everything else is behind one call made only when
        // the try fails, so an out-of-line `post` saves no registers and
        // writes nothing to the stack before its CAS (a store there would
        // have to drain before the locked instruction: measured as a lower
        // post rate). How the event reaches that call depends on its size: an event of up to two words goes in registers, so the
        // whole rest of the post is the call; a larger one would have to be
        // in memory for it, and the compiler then stores it to the stack on
        // every post, before the reservation, and reads it back after the
        // CAS (64-byte events ran at half the rate of a ring that writes
        // them from registers). For those only
        // the reservation is out of line, and the event goes into no call.
        let shared = &*self.shared;
        if let Some(ticket) = shared.try_reserve_plain(&self.head_hint) {
            // SAFETY: the reservation gave us `ticket`, and its full check
            // against a head the consumer has passed means the slot's
            // previous lap has been taken. The buffer pointer is loaded after
            // the reservation, and a resize frees a buffer only once every
            // ticket reserved in it is published, so it is live until the
            // stamp store. (The plain try owes no notification.)
            unsafe { Buffer::publish(shared.buffer_ptr(), ticket, event) };
            return Ok(());
        }
        if size_of::<T>() <= 2 * size_of::<usize>() {
            return self.post_after_plain_try_out_of_line::<REFUSE_RESIZE>(event);
        }
        self.post_after_plain_try::<REFUSE_RESIZE>(event)
    }

    /// [`Poster::post`] but for the notification the reservation took,
    /// returned undelivered: published, and owing that delivery (user code:
    /// a waker, a handler) to the caller, which can then keep its panic
    /// without wrapping the whole post. For the CNO's ready ring, whose
    /// trigger must act on the push whatever its waiter's waker does.
    #[inline(always)]
    pub(crate) fn post_undelivered(&self, event: T) -> Result<Notify, PostError<T>> {
        let shared = &*self.shared;
        if let Some(ticket) = shared.try_reserve_plain(&self.head_hint) {
            // SAFETY: as in `post` (the plain try owes no notification).
            unsafe { Buffer::publish(shared.buffer_ptr(), ticket, event) };
            return Ok(Notify::None);
        }
        self.publish_after_plain_try::<false>(event)
    }

    /// [`Poster::post_after_plain_try`] behind a call, for events small
    /// enough to be passed in registers.
    #[cold]
    #[inline(never)]
    fn post_after_plain_try_out_of_line<const REFUSE_RESIZE: bool>(
        &self,
        event: T,
    ) -> Result<(), PostError<T>> {
        self.post_after_plain_try::<REFUSE_RESIZE>(event)
    }

    /// The rest of a `post` whose plain try did not reserve: the general
    /// reservation, the publish, the notification owed.
    #[inline(always)]
    fn post_after_plain_try<const REFUSE_RESIZE: bool>(
        &self,
        event: T,
    ) -> Result<(), PostError<T>> {
        // The notification this reservation took, after the publish.
        self.publish_after_plain_try::<REFUSE_RESIZE>(event)
            .map(|notify| self.deliver(notify))
    }

    /// The general reservation and the publish of a post whose plain try
    /// did not reserve; the notification the reservation took is returned,
    /// undelivered.
    #[inline(always)]
    fn publish_after_plain_try<const REFUSE_RESIZE: bool>(
        &self,
        event: T,
    ) -> Result<Notify, PostError<T>> {
        // The reservation may run a handler (the upcall that drains a full
        // ring), and the event is dropped if that unwinds: see `Held`.
        let event = Held::new(event);
        match self.reserve_one_slow::<REFUSE_RESIZE>() {
            Ok((ticket, notify)) => {
                let event = event.into_inner();
                // SAFETY: as for the plain try (the ticket and its full
                // check; the buffer loaded after the reservation).
                unsafe { Buffer::publish(self.shared.buffer_ptr(), ticket, event) };
                Ok(notify)
            }
            Err(BatchPostError::Full) => Err(PostError::Full(event.into_inner())),
            Err(BatchPostError::Closed) => Err(PostError::Closed(event.into_inner())),
        }
    }

    /// The reservation of a `post` whose one plain try did not reserve: the
    /// reservation loop with every case (full, closed, resizing, a
    /// notification or an upcall owed, a CAS lost to another poster); a
    /// resize refused as full if `REFUSE_RESIZE`.
    #[inline(never)]
    fn reserve_one_slow<const REFUSE_RESIZE: bool>(&self) -> Result<(u64, Notify), BatchPostError> {
        self.reserve_draining::<REFUSE_RESIZE>(1)
            .map(|(ticket, _count, notify)| (ticket, notify))
            .map_err(refusal)
    }

    /// Post an event, or give it up if the ring is full (DAT's provider
    /// semantics: "queue it or count the loss"). A given-up event is dropped
    /// here, counted, and reported to the consumer as an [`Overflow`](crate::Overflow) before
    /// its end of stream; an armed consumer is woken (or an upcall started)
    /// to hear of it. A closed EVD hands the event back as
    /// [`PostError::Closed`]; this never returns [`PostError::Full`].
    ///
    /// # Panics
    ///
    /// As [`Poster::post`]; also when a given-up event's `Drop` panics,
    /// after the notification the loss took is delivered (the consumer
    /// still hears of the loss); and when it finds a close begun and not yet
    /// done (a closer stopped between its steps), finishes it, and a waker
    /// that close notifies panics: the event, refused as closed, is then
    /// dropped once (a panic of its `Drop` swallowed).
    ///
    /// ```
    /// use evd::{Lossy, Overflow, TryDequeueError};
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// assert_eq!(poster.post_lossy(1u32), Ok(Lossy::Posted));
    /// assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    /// assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Overflow(Overflow { lost: 1 })));
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// ```
    pub fn post_lossy(&self, event: T) -> Result<Lossy, PostError<T>> {
        match self.post(event) {
            Ok(()) => Ok(Lossy::Posted),
            Err(PostError::Closed(ev)) => Err(PostError::Closed(ev)),
            Err(PostError::Full(ev)) => {
                // A close half done is finished here, and its wakers (user
                // code) may panic: the event, not posted, is then dropped
                // once, its own `Drop` panic swallowed.
                let held = Held::new(ev);
                match self.shared.commit_loss() {
                    Some(notify) => {
                        self.deliver_then_drop(notify, held.into_inner());
                        Ok(Lossy::Lost)
                    }
                    None => Err(PostError::Closed(held.into_inner())),
                }
            }
        }
    }

    /// Post events from the front of `events` with one reservation: as many
    /// as the ring has room for, in order (`min(events.len(), free slots)`,
    /// whatever this handle's cached view of the consumer says). Returns how
    /// many were posted; they are drained from `events`, the rest stay there.
    /// A call that can post nothing is refused with [`BatchPostError::Full`]
    /// (backpressure: nothing is counted); an empty `events` has nothing to
    /// post and is `Ok(0)`, full ring or not. The consumer is notified once,
    /// after the whole batch is published.
    ///
    /// # Panics
    ///
    /// As [`Poster::post`], once per batch: the events are all in the ring
    /// before the one notification (or upcall) that may panic. A batch that
    /// finds the ring full and runs the upcall to make room posts nothing
    /// if that upcall panics: every event is still in `events`.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let mut batch = vec![1, 2, 3, 4, 5, 6];
    /// assert_eq!(poster.post_batch(&mut batch), Ok(4));
    /// assert_eq!(batch, [5, 6]);
    /// assert_eq!(poster.post_batch(&mut batch), Err(evd::BatchPostError::Full));
    /// let mut out = Vec::new();
    /// consumer.dequeue_batch(&mut out, 8).unwrap();
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// ```
    pub fn post_batch(&self, events: &mut Vec<T>) -> Result<usize, BatchPostError> {
        self.post_batch_up_to(events, usize::MAX)
    }

    /// [`Poster::post_batch`], posting at most `max` events: `min(max,
    /// events.len(), free slots)` from the front of `events`, in order, with
    /// one reservation. A caller with a budget (a driver that may deliver so
    /// many events per step) posts what it holds without going over it.
    /// `max == 0` (or an empty `events`) posts nothing and returns `Ok(0)`.
    ///
    /// # Panics
    ///
    /// As [`Poster::post_batch`].
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(8).unwrap();
    /// let mut held = vec![1, 2, 3, 4, 5];
    /// assert_eq!(poster.post_batch_up_to(&mut held, 2), Ok(2));
    /// assert_eq!(held, [3, 4, 5]);
    /// assert_eq!(poster.post_batch_up_to(&mut held, 0), Ok(0));
    /// let mut out = Vec::new();
    /// consumer.dequeue_batch(&mut out, 8).unwrap();
    /// assert_eq!(out, [1, 2]);
    /// ```
    pub fn post_batch_up_to(
        &self,
        events: &mut Vec<T>,
        max: usize,
    ) -> Result<usize, BatchPostError> {
        let want = events.len().min(max);
        if want == 0 {
            return Ok(0);
        }
        let (first, count, notify) = self.reserve_tickets(want as u64)?;
        let s = &*self.shared;
        let buf = s.buffer_ptr();
        // `Drain` yields exactly `count` items (count <= len), and cannot
        // panic, so every reserved ticket gets its value.
        for (i, ev) in events.drain(..count as usize).enumerate() {
            // SAFETY: as in `post` (ticket, full check, the buffer loaded
            // after the reservation), for each ticket of the batch.
            unsafe { Buffer::publish(buf, first.wrapping_add(i as u64), ev) };
        }
        self.deliver(notify);
        Ok(count as usize)
    }
}

/// What a refused reservation tells the caller: `Closed`, or no slot
/// (full; at the permit limit; a resize, for a post that waits for room).
fn refusal(refused: Refused) -> BatchPostError {
    match refused {
        Refused::Closed => BatchPostError::Closed,
        _ => BatchPostError::Full,
    }
}

impl<T: Send> Poster<T> {
    /// Reserve up to `want` tickets (or with `want` = `PERMIT`, promise
    /// one slot). A full ring under an idle upcall policy has this thread
    /// run the upcall that drains it (nothing else could start one), then
    /// try again.
    #[inline(always)]
    fn reserve_tickets(&self, want: u64) -> Result<(u64, u64, Notify), BatchPostError> {
        self.reserve_draining::<false>(want).map_err(refusal)
    }

    /// [`Poster::reserve_tickets`] with the refusal as the engine gave it
    /// (`Full`, `Closed`, for a permit `AtPermitLimit`, and if
    /// `REFUSE_RESIZE` a resize under way as `Resizing`).
    #[inline(always)]
    fn reserve_draining<const REFUSE_RESIZE: bool>(
        &self,
        want: u64,
    ) -> Result<(u64, u64, Notify), Refused> {
        loop {
            match self.shared.reserve::<REFUSE_RESIZE>(&self.head_hint, want) {
                Err(Refused::FullTookToken) => self.deliver(Notify::Upcall),
                r => return r,
            }
        }
    }

    /// Events queued under an upcall policy with no instance running (a
    /// handler that panicked left them, or upcalls were enabled with
    /// [`Invoke::New`](crate::Invoke::New)) wait for the upcall the next post
    /// starts; on a full ring, only a post refused as full starts it. Run
    /// that upcall here, on this thread, as such a post does. True if it ran
    /// (a full ring may have room now); false, touching nothing, otherwise
    /// (an instance runs, upcalls are off, or nothing is queued).
    ///
    /// For a poster that looks for room before it posts, and so never makes
    /// the refused post (an RDMA feed that polls its CQ only into free
    /// slots); [`RoomWaiter::poll_room`] does it before it waits.
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// let (poster, consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u8).unwrap(); // full
    /// let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, |_, _| {});
    /// assert_eq!(poster.free_slots(), Some(0)); // Invoke::New started nothing
    /// assert!(poster.start_draining_upcall());
    /// assert_eq!(poster.free_slots(), Some(1));
    /// assert!(!poster.start_draining_upcall()); // nothing queued: nothing to do
    /// # drop(up);
    /// ```
    ///
    /// # Panics
    ///
    /// If the handler panics, as a post that runs it.
    pub fn start_draining_upcall(&self) -> bool {
        let ran = self.shared.take_token_to_drain();
        if ran {
            self.deliver(Notify::Upcall);
        }
        ran
    }

    /// Deliver the notification a loss took, then drop the event given up.
    ///
    /// The notification is a debt: the loss's RMW on the state word took it
    /// (an armed consumer's wake, an upcall's token and instance count, a CNO
    /// trigger), and nothing else will pay it. So it is paid first, and the
    /// event's `Drop` (user code, which may panic) runs after. If the
    /// delivery panics (a handler, a waker), the event is still dropped,
    /// once; the first panic goes on after both.
    #[cold]
    fn deliver_then_drop(&self, notify: Notify, ev: T) {
        let mut panics = Panics::default();
        panics.run(|| self.deliver(notify));
        panics.drop(ev);
        panics.resume();
    }

    /// Perform the notification a reservation (or a loss) took; also for
    /// the one a [`Poster::post_undelivered`] returned.
    #[inline(always)]
    pub(crate) fn deliver(&self, notify: Notify) {
        // One test on the path of every post that owes nothing, instead of a
        // jump through the match's table.
        if notify != Notify::None {
            self.deliver_owed(notify);
        }
    }

    /// The notification owed is a real one: wake, upcall or CNO.
    #[inline(never)]
    fn deliver_owed(&self, notify: Notify) {
        match notify {
            Notify::None => {}
            Notify::Wake => self.shared.notify_consumer(),
            Notify::Upcall => crate::upcall::instance::run(&self.shared),
            Notify::Cno => self.shared.trigger_cno(),
        }
    }
}

impl<T> Poster<T> {
    /// Close the EVD: later posts are refused (the event is handed back); the
    /// consumer dequeues what is queued, then sees end-of-stream.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// poster.post(1u8).unwrap();
    /// poster.close();
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// assert_eq!(consumer.try_dequeue(), Err(evd::TryDequeueError::Closed));
    /// ```
    pub fn close(&self) {
        self.shared.close();
    }

    /// Make blocking waits fail with [`WaitError::Unwaitable`](crate::WaitError)
    /// and wake a waiter that is blocked now. Posts keep queueing.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// poster.set_unwaitable();
    /// assert_eq!(consumer.wait(1, None), Err(evd::WaitError::Unwaitable));
    /// poster.clear_unwaitable();
    /// poster.post(7).unwrap();
    /// assert_eq!(consumer.wait(1, None), Ok(1));
    /// ```
    pub fn set_unwaitable(&self) {
        self.shared.set_unwaitable(true);
    }

    /// Undo [`Poster::set_unwaitable`].
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(4).unwrap();
    /// poster.set_unwaitable();
    /// poster.clear_unwaitable();
    /// assert!(!poster.query().unwaitable);
    /// ```
    pub fn clear_unwaitable(&self) {
        self.shared.set_unwaitable(false);
    }
}

/// What [`Poster::post_lossy`] did with the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a lost event may need accounting"]
pub enum Lossy {
    /// The event was queued.
    Posted,
    /// The ring was full: the event was dropped, counted, and will be
    /// reported to the consumer as an [`Overflow`](crate::Overflow).
    Lost,
}

impl<T> std::fmt::Debug for Poster<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poster")
            .field("state", &self.query())
            .finish()
    }
}
