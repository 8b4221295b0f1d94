//! Taking a shared channel's events ([`ChannelFeed::take_events`]): each is
//! credited to the feed of the CQ it names, which becomes dirty; an event
//! for a CQ the channel feed does not hold is acknowledged at once. After a
//! failure, every live CQ's arm is forgotten (retried) or the CQs are given
//! up (the channel keeps failing).

use super::{ChannelFeed, SharedChannel};
use crate::event::VerbsEvent;
use crate::source::PollError;
use std::io;

impl<H: SharedChannel, T: From<VerbsEvent> + Send> ChannelFeed<H, T> {
    /// Get every waiting channel event and credit each to its CQ's feed
    /// (see [`ChannelFeed`] and its module's notes); returns how many were
    /// got.
    ///
    /// # Errors
    ///
    /// The channel's [`get_cq_event`](SharedChannel::get_cq_event) error;
    /// the events got before it are credited.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let (cq, hca) = channel.create_cq(8).unwrap();
    /// feed.add(cq, CqId(0)).unwrap();
    /// hca.inject_spurious_event();
    /// assert_eq!(feed.take_events().unwrap(), 1);
    /// assert_eq!(feed.feeds().next().unwrap().stats().events_got, 1);
    /// ```
    pub fn take_events(&mut self) -> io::Result<usize> {
        let mut got = 0;
        while let Some(event) = self.channel.get_cq_event()? {
            got += 1;
            self.stats.events_got += 1;
            match self.by_key.get(&event.cq()) {
                Some(&i) => {
                    // Dirty first: crediting may acknowledge a batch (the
                    // provider's code), and an ack that panics must not
                    // leave this CQ, whose arm the event used up, unserved.
                    self.flags.set_dirty(i, true); // unless it is done
                    self.members[i].credit_event();
                }
                None => {
                    self.stats.unknown_events += 1;
                    // A usage error (see the module notes), told without a
                    // line per event.
                    #[cfg(feature = "tracing")]
                    if self.stats.unknown_events.is_power_of_two() {
                        crate::trace::event!(
                            WARN,
                            cq = ?event.cq(),
                            unknown_events = self.stats.unknown_events,
                            "channel event for a CQ this channel feed does not serve, acknowledged unread"
                        );
                    }
                    // SAFETY: got from this channel just above, and its CQ
                    // is not one of this feed's, whose acknowledgements are
                    // the only ones made here.
                    unsafe { self.channel.ack_unknown(event) };
                }
            }
        }
        Ok(got)
    }

    /// Treat every live CQ as unarmed and dirty: the next
    /// [`ChannelFeed::arm_and_drain`] arms and drains each (after a failure
    /// that may have left events on the channel not got, whose CQs' arms
    /// they report used up).
    pub(crate) fn forget_arms(&mut self) {
        for i in 0..self.members.len() {
            if !self.flags.is_done(i) {
                self.members[i].forget_arm();
                self.flags.set_dirty(i, true);
            }
        }
    }

    /// Give up every live CQ (the channel failed: `e`): each is drained,
    /// then fails with `e` (see [`Feed::give_up`](crate::Feed::give_up)). False if none is live.
    pub(crate) fn give_up(&mut self, e: PollError) -> bool {
        let mut any = false;
        for i in 0..self.members.len() {
            if !self.flags.is_done(i) {
                self.members[i].give_up(e);
                self.flags.set_dirty(i, true);
                any = true;
            }
        }
        any
    }
}
