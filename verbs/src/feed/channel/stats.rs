//! A channel feed's own counters.

/// A [`ChannelFeed`](super::ChannelFeed)'s own counters (each CQ's are in
/// its [`Feed`](crate::Feed)'s [`stats`](crate::Feed::stats)).
///
/// ```
/// use evd_verbs::{ChannelFeed, VerbsEvent, soft::SoftChannel};
/// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
/// let feed = ChannelFeed::new(SoftChannel::new().unwrap(), poster);
/// assert_eq!(feed.stats().events_got, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelFeedStats {
    /// Channel events got, for every CQ.
    pub events_got: u64,
    /// Events for CQs this feed does not hold, acknowledged at once.
    pub unknown_events: u64,
    /// CQs that failed (and are not polled any more).
    pub failed_cqs: u64,
}
