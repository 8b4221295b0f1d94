//! [`PostSink`]: a [`Poster`] as a `futures` [`Sink`].

use super::Poster;
use super::attempt::Attempt;
use crate::error::PostError;
use crate::room::Seat;
use crate::unwind::Panics;
use futures_sink::Sink;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A [`Poster`] as a [`Sink`], for `futures`' `SinkExt::send`, `send_all`
/// and `forward`, with a buffer of one event: the wait for room (without
/// blocking, as [`Poster::post_async`] waits) is the held event's.
///
/// The sink holds at most one event of its own: `start_send` posts at once
/// when the ring has room (and no resize is under way), and otherwise keeps the event until a later
/// `poll_ready`, `poll_flush` or `poll_close` posts it. So `poll_ready` is
/// `Ready` whenever the sink holds no event, full ring or not (it reserves
/// nothing: the room a snapshot would show could be taken by another poster
/// anyway), and waits for room only while it holds one; `poll_flush` waits
/// until the held event is in the ring, so `SinkExt::send` (ready, start,
/// flush) returns once its event is posted. Every error hands the event back
/// ([`PostError::Closed`]; [`PostError::Full`] only from `start_send`
/// called while an event is still held, i.e. without `poll_ready`, or
/// inside an upcall of this same EVD or the closure of its `dequeue_with`).
/// Closing the sink flushes it and drops its `Poster` handle (the EVD closes
/// when its last poster is dropped, as always); dropping an unflushed sink
/// drops the event it holds. A poll that panics leaves the room queue and
/// holds no event after it; the sink stays usable. The event is in the
/// ring if the panic came from its post's notification (the consumer's
/// waker, or the upcall handler that post started), and dropped otherwise
/// (the task's waker, when the room queue clones it or drops the clone it
/// replaces, or the handler of the upcall a full ring had this poll run).
///
/// ```
/// use futures::{executor::block_on, SinkExt};
/// let (poster, mut consumer) = evd::bounded(2).unwrap();
/// let mut sink = poster.into_sink();
/// let t = std::thread::spawn(move || {
///     block_on(async {
///         for i in 0..5u32 {
///             sink.send(i).await.unwrap(); // waits for room when the ring is full
///         }
///         sink.close().await.unwrap(); // drops the last poster: end of stream
///     })
/// });
/// let got: Vec<u32> = consumer.iter().collect::<Result<_, _>>().unwrap(); // ends at close
/// t.join().unwrap();
/// assert_eq!(got, [0, 1, 2, 3, 4]);
/// ```
pub struct PostSink<T> {
    /// `None` once closed.
    poster: Option<Poster<T>>,
    /// The event `start_send` could not post yet.
    held: Option<T>,
    seat: Seat,
}

// The held event is moved by value and never pinned.
impl<T> Unpin for PostSink<T> {}

impl<T: Send> Poster<T> {
    /// This handle as a [`Sink`] ([`PostSink`]).
    ///
    /// ```
    /// use futures::{executor::block_on, SinkExt};
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let mut sink = poster.into_sink();
    /// block_on(sink.send(7u8)).unwrap();
    /// assert_eq!(consumer.try_dequeue(), Ok(7));
    /// ```
    pub fn into_sink(self) -> PostSink<T> {
        PostSink::new(self)
    }
}

impl<T: Send> PostSink<T> {
    /// A sink posting through `poster`.
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(4).unwrap();
    /// let sink = evd::PostSink::new(poster);
    /// assert!(sink.poster().is_some());
    /// ```
    pub fn new(poster: Poster<T>) -> Self {
        PostSink {
            poster: Some(poster),
            held: None,
            seat: Seat::default(),
        }
    }

    /// The poster, until the sink is closed.
    ///
    /// ```
    /// use futures::{executor::block_on, SinkExt};
    /// let (poster, _consumer) = evd::bounded::<u8>(4).unwrap();
    /// let mut sink = poster.into_sink();
    /// assert_eq!(sink.poster().unwrap().capacity(), 4);
    /// block_on(sink.close()).unwrap();
    /// assert!(sink.poster().is_none());
    /// ```
    pub fn poster(&self) -> Option<&Poster<T>> {
        self.poster.as_ref()
    }

    /// Take back the event this sink holds (one `start_send` could not post
    /// yet), leaving the room queue: for a caller that gives up on a pending
    /// `send` (a timeout around it, say) and will not poll the sink again
    /// soon. A held event is otherwise posted by the next poll, so a caller
    /// that resends it after giving up would post it twice.
    ///
    /// ```
    /// use futures::Sink;
    /// use std::pin::Pin;
    /// let (poster, _consumer) = evd::bounded(1).unwrap();
    /// poster.post(0u32).unwrap(); // full
    /// let mut sink = poster.into_sink();
    /// Pin::new(&mut sink).start_send(1).unwrap(); // held: no room
    /// assert_eq!(sink.take_held(), Some(1));
    /// assert_eq!(sink.take_held(), None);
    /// ```
    pub fn take_held(&mut self) -> Option<T> {
        if let Some(p) = &self.poster {
            p.shared.room_leave(&mut self.seat, false);
        }
        self.held.take()
    }

    /// Post the held event, waiting for room.
    fn poll_post_held(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), PostError<T>>> {
        let Some(event) = self.held.take() else {
            return Poll::Ready(Ok(()));
        };
        let Some(poster) = &self.poster else {
            return Poll::Ready(Err(PostError::Closed(event)));
        };
        match poster.attempt(&mut self.seat, event, cx.waker()) {
            Attempt::Done(r) => Poll::Ready(r),
            Attempt::Wait(ev) => {
                self.held = Some(ev);
                Poll::Pending
            }
        }
    }
}

impl<T: Send> Sink<T> for PostSink<T> {
    type Error = PostError<T>;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().poll_post_held(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: T) -> Result<(), Self::Error> {
        let this = self.get_mut();
        if this.held.is_some() {
            return Err(PostError::Full(item));
        }
        let Some(poster) = &this.poster else {
            return Err(PostError::Closed(item));
        };
        match poster.post_for_room(item) {
            Ok(()) => Ok(()),
            Err(PostError::Full(item)) => {
                this.held = Some(item);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().poll_post_held(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let this = self.get_mut();
        let flushed = std::task::ready!(this.poll_post_held(cx));
        if let Some(p) = this.poster.take() {
            p.shared.room_leave(&mut this.seat, false);
        }
        Poll::Ready(flushed)
    }
}

impl<T> Drop for PostSink<T> {
    fn drop(&mut self) {
        if let Some(p) = &self.poster {
            p.shared.room_leave(&mut self.seat, false);
        }
        // The held event, then the handle (the last one closes the EVD and
        // runs the consumer's wakers): each is user code that may panic, and
        // a second panic while the first unwinds would abort the process.
        // The first goes on after both.
        let mut panics = Panics::default();
        panics.drop(self.held.take());
        panics.drop(self.poster.take());
        panics.resume();
    }
}

impl<T> std::fmt::Debug for PostSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostSink")
            .field("closed", &self.poster.is_none())
            .field("holding", &self.held.is_some())
            .finish()
    }
}
