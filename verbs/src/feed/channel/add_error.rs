//! Why [`ChannelFeed::add`](super::ChannelFeed::add) handed a CQ back.

use crate::event::CqId;
use std::fmt;

/// Why [`ChannelFeed::add`](super::ChannelFeed::add) refused a CQ.
///
/// ```
/// use evd_verbs::channel_feed::AddRefusal;
/// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::{SoftChannel, SoftCq}};
/// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
/// let channel = SoftChannel::new().unwrap();
/// let mut feed = ChannelFeed::new(channel.clone(), poster);
/// let (elsewhere, _hca) = SoftCq::new(8).unwrap(); // its own channel
/// let refused = feed.add(elsewhere, CqId(1)).unwrap_err();
/// assert_eq!(refused.reason(), AddRefusal::NotOnChannel);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddRefusal {
    /// The CQ's events do not come on this feed's channel: it was made with
    /// a channel of its own, with none, or on another channel; or the
    /// channel cannot tell it is one of its own (an `ibv::IbvCq` wrapped
    /// with `from_raw` names no shared channel, whatever channel the raw CQ
    /// was made on).
    NotOnChannel,
    /// This feed serves the CQ already, under the id `served_as`.
    AlreadyServed {
        /// The id its events carry.
        served_as: CqId,
    },
}

/// A CQ that [`ChannelFeed::add`](super::ChannelFeed::add) refused, handed
/// back with the [reason](AddRefusal). Its `Debug` shows the reason only
/// (the CQ need not be `Debug`).
pub struct AddError<C> {
    cq: C,
    reason: AddRefusal,
}

impl<C> AddError<C> {
    pub(super) fn new(cq: C, reason: AddRefusal) -> Self {
        AddError { cq, reason }
    }

    /// Why the CQ was refused.
    pub fn reason(&self) -> AddRefusal {
        self.reason
    }

    /// The CQ, as it was given.
    pub fn into_cq(self) -> C {
        self.cq
    }
}

impl<C> fmt::Debug for AddError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AddError")
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

impl<C> fmt::Display for AddError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            AddRefusal::NotOnChannel => f.write_str("the CQ is not on the channel feed's channel"),
            AddRefusal::AlreadyServed { served_as } => {
                write!(
                    f,
                    "the channel feed serves this CQ already, as {served_as:?}"
                )
            }
        }
    }
}

impl<C> std::error::Error for AddError<C> {}
