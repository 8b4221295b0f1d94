//! The feeds: each moves what one source yields into an EVD, within a
//! budget, stopping at a full EVD without losing anything.
//!
//! - [`cq`]: [`Feed`], one [`CompletionQueue`](crate::CompletionQueue)
//!   (polling, arming, batched acks, backpressure);
//! - [`channel`]: [`ChannelFeed`], many CQs on one
//!   [`SharedChannel`](crate::SharedChannel), one [`Feed`] per CQ
//!   (public as [`channel_feed`](crate::channel_feed));
//! - [`stream`]: the engine shared by the feeds of event streams, whose
//!   source hands out one event at a time: [`async_events`] ([`AsyncFeed`],
//!   a device's async events) and [`cm`] ([`CmFeed`], the connection
//!   manager's events).
//!
//! Every feed answers a call with a [`Progress`]; the runners (the
//! [`Driver`](crate::Driver), the [`Poller`](crate::Poller), or the
//! application's own loop) decide when to call. A new feed goes here, with
//! a `driver::source::Source` impl so the driver can run it.

mod async_events;
pub mod channel;
mod cm;
mod cq;
mod posting;
mod stream;

pub use async_events::AsyncFeed;
pub use channel::{ChannelFeed, ChannelFeedStats};
pub use cm::CmFeed;
pub use cq::{ACK_BATCH, Feed, FeedStats, POLL_BATCH};
use std::time::{Duration, Instant};

/// How many times a feed builds the event its failure owes (a CQ's
/// `CqError`, a stream's `SourceFailed`) when the event type's `From`
/// panics on it: once more after a panic, then the event is lost and the
/// feed reports [`FeedStatus::Failed`] without it. A `From` that panics on
/// the same event twice would on every try, and a feed retrying it for
/// ever would keep its driver turning, one panic a turn, never done.
pub(crate) const OWED_EVENT_TRIES: u8 = 2;

/// A failure counts as transient if the last one of the same feed was
/// longer ago than this; a second failure within it is taken as lasting.
/// Two kinds of failure are judged by it: a [`Driver`](crate::Driver)'s
/// verbs call for a feed (`get_cq_event`, an arm, the fd's poll), which
/// gives the feed up, and a stream feed's source read (an [`AsyncFeed`]'s
/// or a [`CmFeed`]'s `next_event`, however the feed is run), which fails
/// the source. A retry is one more call of the failing call, at once, and
/// where the call cannot take what its fd reports (a channel event
/// `get_cq_event` cannot get), epoll's level-triggered poll reports the fd
/// again at once: retried without end, such a feed would keep its runner
/// turning on one CPU. A second is far longer than any transient
/// condition of a verbs call (an `ENOMEM`, a signal) and far shorter than
/// a consumer's patience.
///
/// ```
/// assert_eq!(evd_verbs::FEED_RETRY_WINDOW, std::time::Duration::from_secs(1));
/// ```
pub const FEED_RETRY_WINDOW: Duration = Duration::from_secs(1);

/// Whether a failure at `now` is a second one within [`FEED_RETRY_WINDOW`]
/// of the last (at `last`, if any): then it is taken as lasting.
pub(crate) fn fails_again(last: Option<Instant>, now: Instant) -> bool {
    last.is_some_and(|t| now.saturating_duration_since(t) < FEED_RETRY_WINDOW)
}

/// Why a feed stopped moving completions.
///
/// ```
/// use evd_verbs::{Feed, FeedStatus, CqId, VerbsEvent, soft::SoftCq};
/// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
/// let mut feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster);
/// assert_eq!(feed.progress(16).status, FeedStatus::Drained);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeedStatus {
    /// The CQ is empty. After [`Feed::arm_and_drain`] this also means the CQ
    /// is armed: it is safe to sleep on the channel fd.
    Drained,
    /// The budget was used up; more completions may be waiting. For an
    /// [`AsyncFeed`] or a [`CmFeed`] also: its source's read failed, and is
    /// retried by the next call ([`FEED_RETRY_WINDOW`]).
    Budget,
    /// The EVD is full: completions wait in the CQ until there is room.
    Backpressure,
    /// The EVD is closed: nothing more will be delivered.
    Closed,
    /// The CQ failed (its poll failed, or its arm or channel did and it was
    /// given up); a `CqError` async event was delivered (or lost: the event
    /// type's `From` panicked on it twice, [`FeedStats::from_panics`]) and
    /// the CQ is not polled again; until it is delivered, the feed reports
    /// why not (`Backpressure`, `Budget`, `Closed`). An overrun is no such
    /// failure: a real CQ (and the software one) reports it only through
    /// its device's async events (a `CqError` through an [`AsyncFeed`], or
    /// the [`Driver`](crate::Driver)'s device feed), and its feed goes on
    /// polling it.
    /// For an [`AsyncFeed`] or a [`CmFeed`]: its source failed (twice
    /// within [`FEED_RETRY_WINDOW`], or its driver gave it up), a
    /// `SourceFailed` event
    /// was delivered (or lost, as a `CqError` is), and nothing more is read
    /// from it.
    Failed,
}

/// What one call delivered and why it stopped.
///
/// ```
/// # use evd_verbs::{Feed, FeedStatus, CqId, Progress, VerbsEvent, soft::SoftCq};
/// # let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
/// # let mut feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster);
/// let p: Progress = feed.progress(16);
/// assert_eq!((p.delivered, p.status), (0, FeedStatus::Drained));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Events posted into the EVD by this call.
    pub delivered: usize,
    /// Why it stopped.
    pub status: FeedStatus,
}
