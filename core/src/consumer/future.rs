//! Async consumption: a `Future` for one event and a `Stream` of events.
//!
//! `poll` is dequeue → register the task's waker → arm: if the arm finds
//! events it loops, if it arms the task sleeps until the post that disarms
//! wakes it. Dropping a future loses nothing: events stay in the ring.

use crate::consumer::Consumer;
use crate::error::{Overflow, RecvError, TryDequeueError};
use crate::state::Arm;
use futures_core::future::FusedFuture;
use futures_core::stream::FusedStream;
use futures_core::Stream;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Tries before a poll that keeps finding reserved-but-unwritten slots yields
/// to the executor.
const POLL_RETRIES: u32 = 4;

impl<T> Consumer<T> {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RecvError>> {
        for _ in 0..POLL_RETRIES {
            match self.shared().dequeue_one() {
                Ok(v) => return Poll::Ready(Ok(v)),
                Err(TryDequeueError::Overflow(o)) => {
                    return Poll::Ready(Err(RecvError::Overflow(o)))
                }
                Err(TryDequeueError::Closed) => return Poll::Ready(Err(RecvError::Closed)),
                Err(TryDequeueError::Empty) => {}
            }
            self.shared().register_waker(cx.waker());
            match self.shared().arm(1) {
                Arm::Armed(_) => return Poll::Pending,
                Arm::Closed => return Poll::Ready(Err(RecvError::Closed)),
                Arm::Pending => {}
            }
        }
        // A poster reserved the head slot and is still writing it: back off
        // briefly, then let the executor run others before polling again.
        crate::sync::Backoff::new().snooze();
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Receive one event asynchronously.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let t = std::thread::spawn(move || poster.post(42u32).unwrap());
    /// assert_eq!(futures::executor::block_on(consumer.recv()), Ok(42));
    /// t.join().unwrap();
    /// // The poster is gone: end of stream.
    /// assert_eq!(futures::executor::block_on(consumer.recv()), Err(evd::RecvError::Closed));
    /// ```
    pub fn recv(&mut self) -> Recv<'_, T> {
        Recv {
            consumer: self,
            done: false,
        }
    }
}

/// Future returned by [`Consumer::recv`].
#[must_use = "futures do nothing unless polled"]
pub struct Recv<'a, T> {
    consumer: &'a mut Consumer<T>,
    /// It returned `Ready`: `FusedFuture::is_terminated`.
    done: bool,
}

impl<T> Future for Recv<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let r = self.consumer.poll_event(cx);
        if r.is_ready() {
            self.done = true;
        }
        r
    }
}

/// Terminated once it has returned `Ready` (so `select!` stops polling it).
/// Polled again after that, it receives another event, as a new
/// [`Consumer::recv`] would.
///
/// ```
/// use futures_core::future::FusedFuture;
/// let (poster, mut consumer) = evd::bounded(4).unwrap();
/// poster.post(1u8).unwrap();
/// let mut recv = consumer.recv();
/// assert!(!recv.is_terminated());
/// assert_eq!(futures::executor::block_on(&mut recv), Ok(1));
/// assert!(recv.is_terminated());
/// ```
impl<T> FusedFuture for Recv<'_, T> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

/// A future dropped before it completed (a lost `select!` branch, a timeout)
/// withdraws its arm if the EVD is bound to a CNO: a post it preempted the
/// CNO for would otherwise leave an enabled EVD with work that the CNO never
/// hears of ([`crate::state::withdraw`]). Unbound EVDs pay nothing here.
impl<T> Drop for Recv<'_, T> {
    fn drop(&mut self) {
        if !self.done && self.consumer.cno_key().is_some() {
            self.consumer.shared().disarm();
        }
    }
}

/// Shows whether the future has completed and the EVD's state.
///
/// ```
/// let (_poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
/// let recv = consumer.recv();
/// let shown = format!("{recv:?}");
/// assert!(shown.starts_with("Recv { done: false, state: Query {"), "{shown}");
/// ```
impl<T> std::fmt::Debug for Recv<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recv")
            .field("done", &self.done)
            .field("state", &self.consumer.query())
            .finish()
    }
}

/// The consumer is a stream of events; an overflow report is an `Err` item;
/// the stream ends when the EVD is closed and drained.
///
/// ```
/// use futures::StreamExt;
/// let (poster, consumer) = evd::bounded(4).unwrap();
/// poster.post(1u8).unwrap();
/// poster.post(2).unwrap();
/// drop(poster);
/// let all: Vec<_> = futures::executor::block_on(consumer.collect());
/// assert_eq!(all, [Ok(1), Ok(2)]);
/// ```
impl<T> Stream for Consumer<T> {
    type Item = Result<T, Overflow>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.stream_done {
            return Poll::Ready(None);
        }
        match self.poll_event(cx) {
            Poll::Ready(Ok(v)) => Poll::Ready(Some(Ok(v))),
            Poll::Ready(Err(RecvError::Overflow(o))) => Poll::Ready(Some(Err(o))),
            Poll::Ready(Err(RecvError::Closed)) => {
                self.stream_done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Terminated once the stream has yielded `None` (closed and drained); it
/// yields `None` from then on.
///
/// ```
/// use futures::StreamExt;
/// use futures_core::stream::FusedStream;
/// let (poster, mut consumer) = evd::bounded(4).unwrap();
/// poster.post(1u8).unwrap();
/// drop(poster);
/// assert!(!consumer.is_terminated());
/// assert_eq!(futures::executor::block_on(consumer.next()), Some(Ok(1)));
/// assert_eq!(futures::executor::block_on(consumer.next()), None);
/// assert!(consumer.is_terminated());
/// ```
impl<T> FusedStream for Consumer<T> {
    fn is_terminated(&self) -> bool {
        self.stream_done
    }
}
