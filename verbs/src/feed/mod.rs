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

/// How many times a feed builds the event its failure owes (a CQ's
/// `CqError`, a stream's `SourceFailed`) when the event type's `From`
/// panics on it: once more after a panic, then the event is lost and the
/// feed reports [`FeedStatus::Failed`] without it. A `From` that panics on
/// the same event twice would on every try, and a feed retrying it for
/// ever would keep its driver turning, one panic a turn, never done.
pub(crate) const OWED_EVENT_TRIES: u8 = 2;

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
    /// The budget was used up; more completions may be waiting.
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
    /// For an [`AsyncFeed`] or a
    /// [`CmFeed`]: its source failed, a `SourceFailed` event
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
