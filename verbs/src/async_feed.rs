//! [`AsyncFeed`]: a device's async events (CQ errors, port and device
//! events) into an EVD, beside the completion [`Feed`](crate::Feed).

use crate::cq::AsyncEventSource;
use crate::event::{AsyncEvent, VerbsEvent};
use crate::feed::{FeedStatus, Progress};
use evd::{PostError, Poster, RoomWaiter};
use std::task::{Context, Poll};

/// Delivers a device's async events into an EVD as [`VerbsEvent::Async`].
/// Busy-poll it with [`AsyncFeed::progress`] or register it with a
/// [`Driver`](crate::Driver).
///
/// An event the EVD refuses (full, or closed) is held and offered first
/// next time: async events are never dropped by the feed.
///
/// ```
/// use evd_verbs::{AsyncFeed, AsyncEvent, AsyncEventKind, AsyncElement, VerbsEvent, soft::SoftDevice};
/// let (poster, mut consumer) = evd::bounded(8).unwrap();
/// let (events, device) = SoftDevice::new().unwrap();
/// let mut feed = AsyncFeed::new(events, poster);
/// device.raise(AsyncEvent { kind: AsyncEventKind::PortError, element: AsyncElement::Port(1) });
/// assert_eq!(feed.progress(16).delivered, 1);
/// assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(e)) if e.kind == AsyncEventKind::PortError));
/// ```
pub struct AsyncFeed<S: AsyncEventSource> {
    source: S,
    room: RoomWaiter<VerbsEvent>,
    held: Option<AsyncEvent>,
    failed: bool,
}

impl<S: AsyncEventSource> AsyncFeed<S> {
    /// A feed from `source` into the EVD of `poster`.
    pub fn new(source: S, poster: Poster<VerbsEvent>) -> Self {
        AsyncFeed {
            source,
            room: poster.room_waiter(),
            held: None,
            failed: false,
        }
    }

    /// Deliver up to `budget` waiting async events.
    pub fn progress(&mut self, budget: usize) -> Progress {
        let mut delivered = 0;
        while delivered < budget {
            let ev = match self.held.take() {
                Some(ev) => ev,
                None if self.failed => return stop(delivered, FeedStatus::Failed),
                None => match self.source.next_event() {
                    Ok(Some(ev)) => ev,
                    Ok(None) => return stop(delivered, FeedStatus::Drained),
                    Err(_) => {
                        self.failed = true;
                        return stop(delivered, FeedStatus::Failed);
                    }
                },
            };
            match self.room.poster().post(VerbsEvent::Async(ev)) {
                Ok(()) => delivered += 1,
                Err(PostError::Full(_)) => {
                    self.held = Some(ev);
                    return stop(delivered, FeedStatus::Backpressure);
                }
                Err(PostError::Closed(_)) => {
                    self.held = Some(ev);
                    return stop(delivered, FeedStatus::Closed);
                }
            }
        }
        stop(delivered, FeedStatus::Budget)
    }

    /// Wait for room in a full EVD (see [`Feed::poll_room`](crate::Feed::poll_room)).
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, soft::SoftDevice};
    /// use futures::task::noop_waker;
    /// let (poster, _consumer) = evd::bounded(8).unwrap();
    /// let mut feed = AsyncFeed::new(SoftDevice::new().unwrap().0, poster);
    /// let waker = noop_waker();
    /// assert!(feed.poll_room(&mut std::task::Context::from_waker(&waker)).is_ready());
    /// ```
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.room.poll_room(cx).map(|_| ())
    }

    /// The source.
    ///
    /// ```
    /// use evd_verbs::{AsyncEventSource, AsyncFeed, soft::SoftDevice};
    /// let (poster, _consumer) = evd::bounded(8).unwrap();
    /// let feed = AsyncFeed::new(SoftDevice::new().unwrap().0, poster);
    /// assert!(feed.source().fd() >= 0);
    /// ```
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Hand back the source, and the event the EVD refused, if one is held.
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, soft::SoftDevice};
    /// let (poster, _consumer) = evd::bounded(8).unwrap();
    /// let (source, held) = AsyncFeed::new(SoftDevice::new().unwrap().0, poster).into_parts();
    /// assert!(held.is_none());
    /// # drop(source);
    /// ```
    pub fn into_parts(self) -> (S, Option<AsyncEvent>) {
        (self.source, self.held)
    }

    /// Hand back the source (dropping a held event; see
    /// [`AsyncFeed::into_parts`]).
    pub fn into_source(self) -> S {
        self.source
    }
}

fn stop(delivered: usize, status: FeedStatus) -> Progress {
    Progress { delivered, status }
}

impl<S: AsyncEventSource + std::fmt::Debug> std::fmt::Debug for AsyncFeed<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncFeed")
            .field("source", &self.source)
            .field("held", &self.held)
            .field("failed", &self.failed)
            .finish()
    }
}
