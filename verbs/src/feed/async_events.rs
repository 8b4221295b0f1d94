//! [`AsyncFeed`]: a device's async events (CQ errors, port and device
//! events) into an EVD, beside the completion [`Feed`](crate::Feed).

use super::stream::EventFeed;
use crate::event::{AsyncElement, AsyncEvent, AsyncEventKind, VerbsEvent};
use crate::feed::Progress;
use crate::source::AsyncEventSource;
use evd::Poster;
use std::task::{Context, Poll};

/// Delivers a device's async events into an EVD of `T`, each as
/// `T::from(`[`VerbsEvent::Async`]`(..))` (`T` is [`VerbsEvent`] unless you
/// choose an event type of your own, as for [`Feed`](crate::Feed)).
/// Busy-poll it with [`AsyncFeed::progress`] or register it with a
/// [`Driver`](crate::Driver).
///
/// An event the EVD refuses (full, or closed) is held, as the `T` it was
/// turned into, and offered first next time: async events are never dropped
/// by the feed.
///
/// ```
/// use evd_verbs::{AsyncFeed, AsyncEvent, AsyncEventKind, AsyncElement, VerbsEvent, soft::SoftDevice};
/// let (poster, mut consumer) = evd::bounded(8).unwrap();
/// let (events, device) = SoftDevice::new().unwrap();
/// let mut feed = AsyncFeed::new(events, poster);
/// device.raise(AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(1)));
/// assert_eq!(feed.progress(16).delivered, 1);
/// assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(e)) if e.kind == AsyncEventKind::PortError));
/// ```
pub struct AsyncFeed<S: AsyncEventSource, T = VerbsEvent> {
    feed: EventFeed<S, T>,
}

impl<S: AsyncEventSource, T: From<VerbsEvent> + Send> AsyncFeed<S, T> {
    /// A feed from `source` into the EVD of `poster`, of whatever event type
    /// `poster`'s EVD has (see [`Feed::new`](crate::Feed::new)).
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, AsyncEvent, AsyncEventKind, AsyncElement, VerbsEvent, soft::SoftDevice};
    /// enum AppEvent { Verbs(VerbsEvent), Tick(u64) }
    /// impl From<VerbsEvent> for AppEvent {
    ///     fn from(ev: VerbsEvent) -> Self { AppEvent::Verbs(ev) }
    /// }
    /// let (poster, mut consumer) = evd::bounded::<AppEvent>(8).unwrap();
    /// let (events, device) = SoftDevice::new().unwrap();
    /// let mut feed = AsyncFeed::new(events, poster);
    /// device.raise(AsyncEvent::new(AsyncEventKind::PortActive, AsyncElement::Port(1)));
    /// feed.progress(16);
    /// assert!(matches!(consumer.try_dequeue(), Ok(AppEvent::Verbs(VerbsEvent::Async(e))) if e.kind == AsyncEventKind::PortActive));
    /// ```
    pub fn new(source: S, poster: Poster<T>) -> Self {
        AsyncFeed {
            feed: EventFeed::new(source, poster),
        }
    }

    /// Deliver up to `budget` waiting async events.
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, AsyncEvent, AsyncEventKind, AsyncElement, FeedStatus, VerbsEvent, soft::SoftDevice};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let (events, device) = SoftDevice::new().unwrap();
    /// let mut feed = AsyncFeed::new(events, poster);
    /// for qp in 0..3 {
    ///     device.raise(AsyncEvent::new(AsyncEventKind::QpFatal, AsyncElement::Qp(qp)));
    /// }
    /// assert_eq!(feed.progress(2).status, FeedStatus::Budget);
    /// assert_eq!(feed.progress(2).delivered, 1);
    /// ```
    ///
    /// # Panics
    ///
    /// Not on its own. The call runs user code: the event type's `From`
    /// and, in each post, the EVD's upcall handler or the waker the post
    /// notifies. A panic there comes out of this call; the feed and the EVD
    /// stay usable, and the next call takes the next event from the device.
    /// The event whose post panicked is in the EVD. A full EVD under an idle
    /// upcall policy is drained by the upcall the feed runs before it takes
    /// an event out of the device; should another poster take the room
    /// between, the post that runs that upcall leaves the event in the feed
    /// ([`evd::Poster::post_batch`]), so a panic there costs no event either
    /// (a plain post would lose it, see [`evd::Poster::post`]). An event
    /// whose `From` panicked is lost: there is no `T` for it.
    ///
    /// # Source errors
    ///
    /// A read of the source that fails is retried: the call returns what it
    /// delivered with [`FeedStatus::Budget`](crate::FeedStatus::Budget)
    /// (call again), and only a second failure within
    /// [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW) of the last fails the
    /// source ([`AsyncFeed::failure`]). [`AsyncFeed::source_errors`] counts
    /// them all.
    pub fn progress(&mut self, budget: usize) -> Progress {
        let next = |source: &mut S| {
            let ev = source.next_event()?;
            if let Some(_ev) = &ev {
                if _ev.kind.is_error() {
                    crate::trace::event!(WARN, kind = ?_ev.kind, element = ?_ev.element, "async device event");
                } else {
                    crate::trace::event!(INFO, kind = ?_ev.kind, element = ?_ev.element, "async device event");
                }
            }
            Ok(ev)
        };
        let convert = |ev| T::from(VerbsEvent::Async(ev));
        let failed = |_errno| {
            crate::trace::event!(ERROR, errno = _errno, "the device's async events failed");
            AsyncEvent::new(AsyncEventKind::SourceFailed, AsyncElement::Device)
        };
        self.feed
            .progress(budget, next, convert, failed, std::time::Instant::now)
    }

    /// The errno its source failed with, if it did (its reads failed twice
    /// within [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW); or the errno
    /// its [`Driver`](crate::Driver) gave it up for; EIO for an error of no
    /// errno): the feed then delivers, once the EVD has room, an
    /// [`AsyncEventKind::SourceFailed`] event as its last (after the events a
    /// source its driver gave up still had; a source whose reads failed is
    /// read no more), and reports
    /// [`FeedStatus::Failed`](crate::FeedStatus::Failed).
    ///
    /// ```
    /// use evd_verbs::{AsyncEventKind, AsyncEventSource, AsyncEvent, AsyncFeed, FeedStatus, VerbsEvent};
    /// /// A source whose read fails.
    /// struct Broken;
    /// impl AsyncEventSource for Broken {
    ///     fn fd(&self) -> std::os::fd::RawFd { -1 }
    ///     fn next_event(&mut self) -> std::io::Result<Option<AsyncEvent>> {
    ///         Err(std::io::Error::from_raw_os_error(libc::EIO))
    ///     }
    /// }
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let mut feed = AsyncFeed::new(Broken, poster);
    /// let p = feed.progress(16);
    /// assert_eq!((p.delivered, p.status), (0, FeedStatus::Budget)); // retried
    /// assert_eq!(feed.failure(), None);
    /// let p = feed.progress(16);
    /// assert_eq!((p.delivered, p.status), (1, FeedStatus::Failed));
    /// assert_eq!(feed.failure(), Some(libc::EIO));
    /// assert_eq!(feed.source_errors(), 2);
    /// assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(e)) if e.kind == AsyncEventKind::SourceFailed));
    /// ```
    pub fn failure(&self) -> Option<i32> {
        self.feed.failure()
    }

    /// Errors its source's reads returned: each one retried, and the one
    /// that failed it (see [`AsyncFeed::progress`]).
    ///
    /// ```
    /// use evd_verbs::{AsyncEvent, AsyncEventSource, AsyncFeed, FeedStatus, VerbsEvent};
    /// /// A source whose first read fails.
    /// struct FailsOnce(bool);
    /// impl AsyncEventSource for FailsOnce {
    ///     fn fd(&self) -> std::os::fd::RawFd { -1 }
    ///     fn next_event(&mut self) -> std::io::Result<Option<AsyncEvent>> {
    ///         if std::mem::replace(&mut self.0, false) {
    ///             return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
    ///         }
    ///         Ok(None)
    ///     }
    /// }
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let mut feed = AsyncFeed::new(FailsOnce(true), poster);
    /// assert_eq!(feed.progress(16).status, FeedStatus::Budget);
    /// assert_eq!(feed.progress(16).status, FeedStatus::Drained);
    /// assert_eq!((feed.source_errors(), feed.failure()), (1, None));
    /// ```
    pub fn source_errors(&self) -> u64 {
        self.feed.source_errors()
    }

    /// Events lost because the event type's `From` panicked on them: each
    /// event taken from the source whose conversion panicked, and the owed
    /// `SourceFailed` event after its second panic. The driver's
    /// [`DriverStats::handler_panics`](crate::DriverStats::handler_panics)
    /// counts every panic of a feed's turn, this only the events they cost.
    ///
    /// ```
    /// use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncFeed, VerbsEvent, soft::SoftDevice};
    /// /// Refuses port errors by panicking.
    /// struct NoPortErrors;
    /// impl From<VerbsEvent> for NoPortErrors {
    ///     fn from(ev: VerbsEvent) -> Self {
    ///         assert!(!matches!(ev, VerbsEvent::Async(a) if a.kind == AsyncEventKind::PortError));
    ///         NoPortErrors
    ///     }
    /// }
    /// let (poster, _consumer) = evd::bounded::<NoPortErrors>(8).unwrap();
    /// let (events, device) = SoftDevice::new().unwrap();
    /// let mut feed = AsyncFeed::new(events, poster);
    /// device.raise(AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(1)));
    /// device.raise(AsyncEvent::new(AsyncEventKind::PortActive, AsyncElement::Port(1)));
    /// let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    /// assert!(panicked.is_err());
    /// assert_eq!(feed.from_panics(), 1);
    /// assert_eq!(feed.progress(16).delivered, 1); // the port that came back
    /// assert_eq!(feed.from_panics(), 1); // the port error
    /// ```
    // Named as `FeedStats::from_panics`: the panics of the type's `From`.
    #[allow(clippy::wrong_self_convention)]
    pub fn from_panics(&self) -> u64 {
        self.feed.from_panics()
    }

    /// Its driver gives it up: the events its source still has are
    /// delivered, then the failure.
    pub(crate) fn give_up(&mut self, errno: i32) {
        self.feed.give_up(errno);
    }

    /// Wait for room in a full EVD (see [`Feed::poll_room`](crate::Feed::poll_room)).
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, VerbsEvent, soft::SoftDevice};
    /// use futures::task::noop_waker;
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let mut feed = AsyncFeed::new(SoftDevice::new().unwrap().0, poster);
    /// let waker = noop_waker();
    /// assert!(feed.poll_room(&mut std::task::Context::from_waker(&waker)).is_ready());
    /// ```
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.feed.poll_room(cx)
    }

    /// Stop waiting for room (see [`Feed::leave_room_queue`](crate::Feed::leave_room_queue)).
    pub fn leave_room_queue(&mut self) {
        self.feed.leave_room_queue();
    }

    /// The source.
    ///
    /// ```
    /// use evd_verbs::{AsyncEventSource, AsyncFeed, VerbsEvent, soft::SoftDevice};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let feed = AsyncFeed::new(SoftDevice::new().unwrap().0, poster);
    /// assert!(feed.source().fd() >= 0);
    /// ```
    pub fn source(&self) -> &S {
        &self.feed.source
    }

    /// Hand back the source, and the event the EVD refused, if one is held
    /// (already converted: the `T` the EVD refused). An event is taken out
    /// of the source only when the EVD has room for it, so one is held only
    /// if its post did not go through: another poster took that room first,
    /// the EVD closed meanwhile, or the draining upcall that post ran
    /// panicked; the events a full EVD had no room for are still in the
    /// source. A `SourceFailed` event owed and not
    /// made yet is not handed back ([`failure`](Self::failure) says why).
    ///
    /// ```
    /// use evd_verbs::{AsyncEventSource, AsyncFeed, AsyncEvent, AsyncEventKind, AsyncElement, FeedStatus, VerbsEvent, soft::SoftDevice};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    /// let (events, device) = SoftDevice::new().unwrap();
    /// let mut feed = AsyncFeed::new(events, poster);
    /// let port_down = AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(1));
    /// device.raise(port_down);
    /// device.raise(port_down);
    /// assert_eq!(feed.progress(16).status, FeedStatus::Backpressure); // one fits
    /// let (mut source, held) = feed.into_parts();
    /// assert_eq!(held, None);
    /// assert_eq!(source.next_event().unwrap(), Some(port_down)); // still the device's
    /// ```
    pub fn into_parts(self) -> (S, Option<T>) {
        self.feed.into_parts()
    }

    /// Hand back the source (dropping a held event; see
    /// [`AsyncFeed::into_parts`]).
    ///
    /// # Panics
    /// When the held event's `Drop` panics: the source is then dropped with
    /// the unwind (the events still in it stay in the device).
    ///
    /// ```
    /// use evd_verbs::{AsyncEventSource, AsyncFeed, VerbsEvent, soft::SoftDevice};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let mut source = AsyncFeed::new(SoftDevice::new().unwrap().0, poster).into_source();
    /// assert!(source.next_event().unwrap().is_none());
    /// ```
    pub fn into_source(self) -> S {
        self.feed.source
    }
}

impl<S: AsyncEventSource + std::fmt::Debug, T: std::fmt::Debug> std::fmt::Debug
    for AsyncFeed<S, T>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncFeed")
            .field("feed", &self.feed)
            .finish()
    }
}
