//! Async consumption: a `Future` for one event ([`Recv`]), one for a batch
//! ([`RecvBatch`]) and a `Stream` of events.
//!
//! `poll` is dequeue → register the task's waker → arm: if the arm finds
//! events it loops, if it arms the task sleeps until the post that disarms
//! wakes it. Dropping a future loses nothing: events stay in the ring.

use crate::consumer::Consumer;
use crate::error::{Overflow, RecvError, TryDequeueError};
use crate::state::Arm;
use crate::unwind::Panics;
use futures_core::Stream;
use futures_core::future::FusedFuture;
use futures_core::stream::FusedStream;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Tries before a poll that keeps finding reserved-but-unwritten slots yields
/// to the executor.
const POLL_RETRIES: u32 = 4;

impl<T> Consumer<T> {
    /// Dequeue with `take` (`None`: nothing ready) → register the task's
    /// waker → arm, until `take` gives an answer or the arm holds.
    fn poll_until<R>(
        &mut self,
        cx: &mut Context<'_>,
        mut take: impl FnMut(&mut Self) -> Option<Result<R, RecvError>>,
    ) -> Poll<Result<R, RecvError>> {
        for _ in 0..POLL_RETRIES {
            if let Some(r) = take(self) {
                return Poll::Ready(r);
            }
            self.shared().register_waker(cx.waker());
            match self.shared().arm(1) {
                Arm::Armed(_) => return Poll::Pending,
                Arm::Closed => return Poll::Ready(Err(RecvError::Closed)),
                Arm::Pending => {}
            }
        }
        // A poster reserved the head slot and is still writing it (or a
        // notifier stopped in the waker slot): one PAUSE, then the task
        // wakes itself and lets the executor run others before it polls
        // again. No nap here, which would block the executor's thread: a
        // task on a real-time thread that outranks the stalled one polls
        // until the scheduler runs that one (the blocking waits nap).
        crate::sync::Backoff::new().snooze();
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RecvError>> {
        self.poll_until(cx, |c| match c.shared().dequeue_one() {
            Ok(v) => Some(Ok(v)),
            Err(e) => recv_error(e).map(Err),
        })
    }

    /// One poll of [`RecvBatch`]: `dequeue_batch` in place of the dequeue.
    fn poll_batch(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut Vec<T>,
        max: usize,
    ) -> Poll<Result<usize, RecvError>> {
        if max == 0 {
            return Poll::Ready(Ok(0));
        }
        self.poll_until(cx, |c| match c.dequeue_batch(buf, max) {
            Ok(0) => None,
            Ok(n) => Some(Ok(n)),
            Err(e) => recv_error(e).map(Err),
        })
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
            polled: Polled::Never,
        }
    }
}

/// A dequeue's refusal as `recv` reports it; `None` for `Empty` (arm and
/// wait).
fn recv_error(e: TryDequeueError) -> Option<RecvError> {
    match e {
        TryDequeueError::Overflow(o) => Some(RecvError::Overflow(o)),
        TryDequeueError::Closed => Some(RecvError::Closed),
        TryDequeueError::Empty => None,
    }
}

/// What a future's last poll returned: whether it may have armed (its drop
/// then withdraws the arm) and whether it is terminated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Polled {
    /// Not polled yet: it armed nothing (an arm the caller made stays).
    Never,
    /// `Pending`: it may be armed.
    Pending,
    /// `Ready` (`FusedFuture::is_terminated`): a post, a report or the end
    /// took any arm it made.
    Ready,
}

impl Polled {
    fn after<R>(r: &Poll<R>) -> Self {
        if r.is_ready() {
            Polled::Ready
        } else {
            Polled::Pending
        }
    }
}

/// Future returned by [`Consumer::recv`].
#[must_use = "futures do nothing unless polled"]
pub struct Recv<'a, T> {
    consumer: &'a mut Consumer<T>,
    polled: Polled,
}

impl<T> Future for Recv<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let r = self.consumer.poll_event(cx);
        self.polled = Polled::after(&r);
        r
    }
}

/// Terminated once it has returned `Ready` (so `select!` stops polling it).
/// Polled again after that, it receives another event, as a new
/// [`Consumer::recv`] would, and is not terminated while it waits for it.
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
        self.polled == Polled::Ready
    }
}

/// A future dropped while it waits (a lost `select!` branch, a timeout; also
/// one polled again after it completed) withdraws its arm if the EVD is
/// bound to a CNO: a post it preempted the CNO for would otherwise leave an
/// enabled EVD with work that the CNO never hears of
/// ([`crate::state::withdraw`]). Unbound EVDs pay nothing here. A future
/// never polled armed nothing, and leaves an arm made with
/// [`Consumer::arm`] in place; one that waited withdraws the one arm bit,
/// whoever set it (re-arm after it for an fd wait).
impl<T> Drop for Recv<'_, T> {
    fn drop(&mut self) {
        withdraw_on_drop(self.consumer, self.polled);
    }
}

/// A dropped wait's withdrawal, if its last poll left it waiting on an EVD
/// bound to a CNO. It may trigger the CNO, whose waiter's waker is user code
/// that may panic: the panic goes on, unless the drop is part of an
/// unwinding already (a second panic would abort the process).
fn withdraw_on_drop<T>(consumer: &Consumer<T>, polled: Polled) {
    if polled != Polled::Pending || consumer.cno_key().is_none() {
        return;
    }
    let mut panics = Panics::default();
    panics.run(|| consumer.shared().disarm());
    panics.resume();
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
            .field("done", &(self.polled == Polled::Ready))
            .field("state", &self.consumer.query())
            .finish()
    }
}

impl<T> Consumer<T> {
    /// Receive a batch of events asynchronously: the async form of
    /// [`Consumer::dequeue_batch`].
    ///
    /// Resolves to `Ok(n)` once `n` events (at least 1, at most `max`) are
    /// appended to `buf`, in order, with one store of the head for the
    /// batch; it waits (armed, as [`Consumer::recv`]) while none is ready.
    /// A pending loss report resolves it to [`RecvError::Overflow`] and the
    /// end of stream to [`RecvError::Closed`], exactly as `recv` reports
    /// them (a report comes first, but right after a report the ready
    /// events do: see the crate docs, "Loss reports"). `max == 0` resolves
    /// to `Ok(0)` at once and looks at nothing, as `dequeue_batch` does: a
    /// pending report or the end of stream waits for a call with `max > 0`.
    ///
    /// Dropping the future loses nothing: events stay in the ring until a
    /// poll takes them, and a poll that takes them resolves.
    ///
    /// ```
    /// use futures::executor::block_on;
    /// let (poster, mut consumer) = evd::bounded(8).unwrap();
    /// let t = std::thread::spawn(move || for i in 0..5u32 { poster.post(i).unwrap() });
    /// let mut buf = Vec::new();
    /// while buf.len() < 5 {
    ///     let n = block_on(consumer.recv_batch(&mut buf, 3)).unwrap();
    ///     assert!((1..=3).contains(&n));
    /// }
    /// assert_eq!(buf, [0, 1, 2, 3, 4]);
    /// t.join().unwrap(); // the poster is gone: end of stream
    /// assert_eq!(block_on(consumer.recv_batch(&mut buf, 3)), Err(evd::RecvError::Closed));
    /// ```
    pub fn recv_batch<'a>(&'a mut self, buf: &'a mut Vec<T>, max: usize) -> RecvBatch<'a, T> {
        RecvBatch {
            consumer: self,
            buf,
            max,
            polled: Polled::Never,
        }
    }
}

/// Future returned by [`Consumer::recv_batch`].
#[must_use = "futures do nothing unless polled"]
pub struct RecvBatch<'a, T> {
    consumer: &'a mut Consumer<T>,
    buf: &'a mut Vec<T>,
    max: usize,
    polled: Polled,
}

impl<T> Future for RecvBatch<'_, T> {
    type Output = Result<usize, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let r = this.consumer.poll_batch(cx, this.buf, this.max);
        this.polled = Polled::after(&r);
        r
    }
}

/// Terminated once it has returned `Ready`; polled again after that, it
/// receives another batch, as a new [`Consumer::recv_batch`] would, and is
/// not terminated while it waits for it.
impl<T> FusedFuture for RecvBatch<'_, T> {
    fn is_terminated(&self) -> bool {
        self.polled == Polled::Ready
    }
}

/// As [`Recv`]'s drop: a future dropped while it waits withdraws its arm if
/// the EVD is bound to a CNO; one never polled leaves the arms alone.
impl<T> Drop for RecvBatch<'_, T> {
    fn drop(&mut self) {
        withdraw_on_drop(self.consumer, self.polled);
    }
}

/// Shows whether the future has completed, its `max`, and the EVD's state.
impl<T> std::fmt::Debug for RecvBatch<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("done", &(self.polled == Polled::Ready))
            .field("max", &self.max)
            .field("state", &self.consumer.query())
            .finish()
    }
}

/// The consumer is a stream of events; an overflow report is an `Err` item;
/// the stream ends when the EVD is closed and drained.
///
/// A pending `poll_next` arms the EVD as [`Consumer::recv`] does, but a
/// stream cannot tell when the `next()` future polling it is dropped (a lost
/// `select!` branch, a timeout), so it cannot withdraw that arm as a dropped
/// `Recv` does. On an EVD enabled on a [`Cno`](crate::Cno) the arm preempts
/// the CNO: after abandoning a pending `next()` there, call
/// [`Consumer::disarm`] (or [`Consumer::enable_cno`], which withdraws it
/// too) before waiting on the CNO, or the next post wakes the abandoned task
/// and not the CNO. An unbound EVD needs nothing: the next wait replaces the
/// waker.
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
