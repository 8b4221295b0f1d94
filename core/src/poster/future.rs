//! [`PostAsync`]: a post that waits for room without blocking a thread.

use super::Poster;
use super::attempt::Attempt;
use crate::error::PostError;
use crate::room::Seat;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The future of [`Poster::post_async`]: resolves once the event is queued,
/// or to the refusal that hands it back.
///
/// Dropping it before it resolves drops the event and leaves the room queue;
/// a wake it had been given passes to the next waiting poster.
#[must_use = "futures do nothing unless polled"]
pub struct PostAsync<'a, T> {
    poster: &'a Poster<T>,
    /// The event, until it is posted or handed back.
    event: Option<T>,
    seat: Seat,
}

// The event is moved in and out by value and never pinned.
impl<T> Unpin for PostAsync<'_, T> {}

impl<T: Send> Poster<T> {
    /// Post an event, waiting without blocking for room in a full ring: the
    /// async form of [`Poster::post_blocking`].
    ///
    /// The future resolves to `Ok(())` once the event is queued, or to
    /// [`PostError::Closed`] with the event if the EVD is (or gets) closed;
    /// [`PostError::Full`] only inside an upcall of this same EVD (or the
    /// closure of its `dequeue_with`; see [`Poster::post_blocking`] for what
    /// counts as inside), where waiting would wait for itself. A full ring registers the task's waker
    /// in the room queue; the consumer's dequeue that frees a slot wakes it.
    /// A resize under way does the same (its end wakes it): the poll never
    /// spins on the executor's thread waiting for the resize.
    ///
    /// # Panics
    ///
    /// Polling the future can panic as [`Poster::post`] does (it posts from
    /// inside `poll`), and with the task's waker's panic when the room queue
    /// clones it or drops the clone it replaces; the future is then over
    /// (`is_terminated`), and its event is in the ring if the panic came
    /// from the post's notification (the consumer's waker, the upcall the
    /// post started), dropped otherwise (the task's waker, or the upcall a
    /// full ring had this poll run: the event was never posted). Dropped
    /// after it, the future leaves the room queue as any dropped
    /// `PostAsync` does.
    ///
    /// ```
    /// use futures::executor::block_on;
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// block_on(poster.post_async(1u32)).unwrap(); // room: resolves at once
    /// let p = poster.clone();
    /// let t = std::thread::spawn(move || block_on(p.post_async(2)));
    /// assert_eq!(consumer.dequeue(), Ok(1));
    /// assert_eq!(consumer.dequeue(), Ok(2));
    /// t.join().unwrap().unwrap();
    /// ```
    pub fn post_async(&self, event: T) -> PostAsync<'_, T> {
        PostAsync {
            poster: self,
            event: Some(event),
            seat: Seat::default(),
        }
    }
}

impl<T: Send> Future for PostAsync<'_, T> {
    type Output = Result<(), PostError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let event = this
            .event
            .take()
            .expect("PostAsync polled after it resolved");
        match this.poster.attempt(&mut this.seat, event, cx.waker()) {
            Attempt::Done(r) => Poll::Ready(r),
            Attempt::Wait(ev) => {
                this.event = Some(ev);
                Poll::Pending
            }
        }
    }
}

impl<T: Send> futures_core::FusedFuture for PostAsync<'_, T> {
    fn is_terminated(&self) -> bool {
        self.event.is_none()
    }
}

impl<T> Drop for PostAsync<'_, T> {
    fn drop(&mut self) {
        self.poster.shared.room_leave(&mut self.seat, false);
    }
}

impl<T> std::fmt::Debug for PostAsync<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostAsync")
            .field("resolved", &self.event.is_none())
            .field("waiting", &self.seat.is_taken())
            .finish()
    }
}
