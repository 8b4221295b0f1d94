//! [`CmFeed`]: the connection manager's events into an EVD, beside the
//! completion [`Feed`](crate::Feed) and the [`AsyncFeed`](crate::AsyncFeed).

use super::stream::EventFeed;
use crate::event::{CmEvent, CmEventKind, CmToken};
use crate::feed::Progress;
use crate::source::CmEventSource;
use evd::Poster;
use std::fmt;
use std::task::{Context, Poll};

/// Delivers connection-manager events (`ibv::CmEvents`, or
/// [`SoftCm`](crate::soft::SoftCm)'s) into an EVD of `T`, each as
/// `T::from(`[`CmEvent`]`)`, in the channel's order. Busy-poll it with
/// [`CmFeed::progress`] or register it with a [`Driver`](crate::Driver)
/// ([`Driver::register_cm`](crate::Driver::register_cm)), which waits on
/// the channel's fd with the CQs' channels.
///
/// An event the EVD refuses (full, or closed) is held and offered first
/// next time: connection events are never dropped by the feed.
///
/// ```
/// use evd_verbs::{CmEvent, CmEventKind, CmFeed, CmToken, VerbsEvent, soft::SoftCm};
/// /// The application's event type: completions and connection events
/// /// (boxed: rare, and with its private data inline six times the size of
/// /// a completion, which would size every slot of the EVD).
/// enum AppEvent { Verbs(VerbsEvent), Cm(Box<CmEvent>) }
/// impl From<CmEvent> for AppEvent {
///     fn from(ev: CmEvent) -> Self { AppEvent::Cm(Box::new(ev)) }
/// }
/// let (poster, mut consumer) = evd::bounded::<AppEvent>(8).unwrap();
/// let (events, cm) = SoftCm::new().unwrap();
/// let mut feed = CmFeed::new(events, poster);
/// cm.raise(CmEvent::new(CmEventKind::Established, CmToken(4)));
/// assert_eq!(feed.progress(16).delivered, 1);
/// assert!(matches!(consumer.try_dequeue(), Ok(AppEvent::Cm(e)) if e.id == CmToken(4)));
/// ```
pub struct CmFeed<S: CmEventSource, T = CmEvent> {
    feed: EventFeed<S, T>,
}

impl<S: CmEventSource, T: From<CmEvent> + Send> CmFeed<S, T> {
    /// A feed from `source` into the EVD of `poster`.
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmFeed, soft::SoftCm};
    /// let (poster, _consumer) = evd::bounded::<CmEvent>(8).unwrap();
    /// let (events, _cm) = SoftCm::new().unwrap();
    /// let mut feed = CmFeed::new(events, poster);
    /// assert_eq!(feed.progress(16).delivered, 0);
    /// ```
    pub fn new(source: S, poster: Poster<T>) -> Self {
        CmFeed {
            feed: EventFeed::new(source, poster),
        }
    }

    /// Deliver up to `budget` waiting events.
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmFeed, CmToken, FeedStatus, soft::SoftCm};
    /// let (poster, mut consumer) = evd::bounded::<CmEvent>(2).unwrap();
    /// let (events, cm) = SoftCm::new().unwrap();
    /// let mut feed = CmFeed::new(events, poster);
    /// for id in 0..3 {
    ///     cm.raise(CmEvent::new(CmEventKind::Disconnected, CmToken(id)));
    /// }
    /// assert_eq!(feed.progress(16).status, FeedStatus::Backpressure); // two fit
    /// assert_eq!(consumer.try_dequeue().unwrap().id, CmToken(0));
    /// assert_eq!(feed.progress(16).delivered, 1); // the third, still in the source until now
    /// ```
    ///
    /// # Panics
    ///
    /// As [`AsyncFeed::progress`](crate::AsyncFeed::progress): a panic of
    /// the event type's `From` or of user code a post runs (the EVD's
    /// upcall handler, a waker) comes out of this call, the feed and the
    /// EVD stay usable, and the event whose post panicked is in the EVD (a
    /// full EVD's draining upcall runs before an event is taken, or with
    /// the event left in the feed, so its panic costs none); an event whose
    /// `From` panicked is lost.
    ///
    /// # Source errors
    ///
    /// As [`AsyncFeed::progress`](crate::AsyncFeed::progress): a failed
    /// read of the channel is retried (the call returns
    /// [`FeedStatus::Budget`](crate::FeedStatus::Budget)), and only a second
    /// failure within [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW) of the
    /// last fails the source ([`CmFeed::failure`]; counted by
    /// [`CmFeed::source_errors`]).
    pub fn progress(&mut self, budget: usize) -> Progress {
        let next = |source: &mut S| source.next_event();
        let failed = |errno: i32| {
            crate::trace::event!(ERROR, errno, "the connection manager's events failed");
            let mut ev = CmEvent::new(CmEventKind::SourceFailed, CmToken::NONE);
            ev.status = -errno;
            ev
        };
        self.feed
            .progress(budget, next, T::from, failed, std::time::Instant::now)
    }

    /// Errors its channel's reads returned: each one retried, and the one
    /// that failed it (see [`CmFeed::progress`]).
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmFeed, CmToken, FeedStatus, soft::SoftCm};
    /// let (poster, mut consumer) = evd::bounded::<CmEvent>(8).unwrap();
    /// let (events, cm) = SoftCm::new().unwrap();
    /// let mut feed = CmFeed::new(events, poster);
    /// cm.raise(CmEvent::new(CmEventKind::Established, CmToken(1)));
    /// assert_eq!(feed.progress(16).delivered, 1);
    /// assert_eq!(feed.source_errors(), 0);
    /// ```
    pub fn source_errors(&self) -> u64 {
        self.feed.source_errors()
    }

    /// The errno its source failed with, if it did (its reads failed twice
    /// within [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW); or the errno
    /// its [`Driver`](crate::Driver) gave it up for; EIO for an error of no
    /// errno): the feed then delivers, once the EVD has room, a
    /// [`CmEventKind::SourceFailed`] event as its last (after the events a
    /// source its driver gave up still had; a source whose reads failed is
    /// read no more), and reports
    /// [`FeedStatus::Failed`](crate::FeedStatus::Failed).
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmEventSource, CmFeed, CmToken, FeedStatus};
    /// /// A channel whose read fails.
    /// struct Broken;
    /// impl CmEventSource for Broken {
    ///     fn fd(&self) -> std::os::fd::RawFd { -1 }
    ///     fn next_event(&mut self) -> std::io::Result<Option<CmEvent>> {
    ///         Err(std::io::Error::from_raw_os_error(libc::EIO))
    ///     }
    /// }
    /// let (poster, mut consumer) = evd::bounded::<CmEvent>(8).unwrap();
    /// let mut feed = CmFeed::new(Broken, poster);
    /// assert_eq!(feed.progress(16).status, FeedStatus::Budget); // retried
    /// let p = feed.progress(16);
    /// assert_eq!((p.delivered, p.status), (1, FeedStatus::Failed));
    /// assert_eq!(feed.failure(), Some(libc::EIO));
    /// let last = consumer.try_dequeue().unwrap();
    /// assert_eq!((last.kind, last.id, last.status), (CmEventKind::SourceFailed, CmToken::NONE, -libc::EIO));
    /// ```
    pub fn failure(&self) -> Option<i32> {
        self.feed.failure()
    }

    /// Events lost because the event type's `From` panicked on them: each
    /// event taken from the source whose conversion panicked, and the owed
    /// `SourceFailed` event after its second panic. A connect request lost this way was
    /// acknowledged: its identifier stays parked in the channel
    /// (`ibv::CmChannel::take_all_requests`, feature `ibverbs`, hands it
    /// over).
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmFeed, CmToken, soft::SoftCm};
    /// /// Refuses rejections by panicking.
    /// struct NoRejections;
    /// impl From<CmEvent> for NoRejections {
    ///     fn from(ev: CmEvent) -> Self {
    ///         assert_ne!(ev.kind, CmEventKind::Rejected);
    ///         NoRejections
    ///     }
    /// }
    /// let (poster, _consumer) = evd::bounded::<NoRejections>(8).unwrap();
    /// let (events, cm) = SoftCm::new().unwrap();
    /// let mut feed = CmFeed::new(events, poster);
    /// cm.raise(CmEvent::new(CmEventKind::Rejected, CmToken(1)));
    /// cm.raise(CmEvent::new(CmEventKind::Established, CmToken(2)));
    /// let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    /// assert!(panicked.is_err());
    /// assert_eq!(feed.from_panics(), 1);
    /// assert_eq!(feed.progress(16).delivered, 1);
    /// assert_eq!(feed.from_panics(), 1);
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
    /// use evd_verbs::{CmEvent, CmFeed, soft::SoftCm};
    /// use futures::task::noop_waker;
    /// let (poster, _consumer) = evd::bounded::<CmEvent>(8).unwrap();
    /// let mut feed = CmFeed::new(SoftCm::new().unwrap().0, poster);
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
    /// use evd_verbs::{CmEvent, CmEventSource, CmFeed, soft::SoftCm};
    /// let (poster, _consumer) = evd::bounded::<CmEvent>(8).unwrap();
    /// let feed = CmFeed::new(SoftCm::new().unwrap().0, poster);
    /// assert!(feed.source().fd() >= 0);
    /// ```
    pub fn source(&self) -> &S {
        &self.feed.source
    }

    /// Hand back the source, and the event the EVD refused, if one is held.
    /// An event is taken out of the source only when the EVD has room for
    /// it, so one is held only if its post did not go through: another
    /// poster took that room first, the EVD closed meanwhile, or the
    /// draining upcall that post ran panicked; the events a full EVD had no
    /// room for are still in the source. A
    /// `SourceFailed` event owed and not made yet is not handed back
    /// ([`failure`](Self::failure) says why).
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmEventSource, CmFeed, soft::SoftCm};
    /// let (poster, _consumer) = evd::bounded::<CmEvent>(1).unwrap();
    /// let (events, cm) = SoftCm::new().unwrap();
    /// let mut feed = CmFeed::new(events, poster);
    /// let ev = CmEvent::new(CmEventKind::Established, evd_verbs::CmToken(0));
    /// cm.raise(ev);
    /// cm.raise(ev);
    /// feed.progress(16);
    /// let (mut source, held) = feed.into_parts();
    /// assert_eq!(held, None);
    /// assert_eq!(source.next_event().unwrap(), Some(ev)); // still the CM's
    /// ```
    pub fn into_parts(self) -> (S, Option<T>) {
        self.feed.into_parts()
    }
}

impl<S: CmEventSource + fmt::Debug, T: fmt::Debug> fmt::Debug for CmFeed<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmFeed").field("feed", &self.feed).finish()
    }
}
