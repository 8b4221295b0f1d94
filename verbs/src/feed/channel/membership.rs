//! Which CQs a [`ChannelFeed`] serves: added, removed, listed.
//!
//! A CQ added is dirty: the next [`ChannelFeed::arm_and_drain`] arms it and
//! drains it. A CQ removed is handed back as its own [`Feed`]; the channel
//! feed forgets it, and the members after it keep their order and their
//! turn (the cursor moves with them).

use super::{AddError, AddRefusal, ChannelFeed, SharedChannel};
use crate::event::{CqId, VerbsEvent};
use crate::feed::Feed;

impl<H: SharedChannel, T: From<VerbsEvent> + Send> ChannelFeed<H, T> {
    /// Serve `cq`, named `id` in its events. A feed a driver serves
    /// changes through [`Driver::with_feed`](crate::Driver::with_feed) or
    /// [`DriverHandle::with_feed`](crate::DriverHandle::with_feed), which
    /// arm and drain a CQ added there in the feed's next turn.
    ///
    /// # Errors
    ///
    /// Hands `cq` back with the reason ([`AddError`]) if it is not on this
    /// feed's channel ([`AddRefusal::NotOnChannel`]) or this feed serves it
    /// already ([`AddRefusal::AlreadyServed`], with the id it is served
    /// under).
    ///
    /// ```
    /// use evd_verbs::channel_feed::AddRefusal;
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::{SoftChannel, SoftCq}};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// assert!(feed.add(channel.create_cq(8).unwrap().0, CqId(0)).is_ok());
    /// let (elsewhere, _hca) = SoftCq::new(8).unwrap(); // its own channel
    /// let refused = feed.add(elsewhere, CqId(1)).unwrap_err();
    /// assert_eq!(refused.reason(), AddRefusal::NotOnChannel);
    /// let _cq = refused.into_cq(); // handed back
    /// ```
    // The error hands the CQ back; a real CQ carries its poll array.
    #[allow(clippy::result_large_err)]
    pub fn add(&mut self, cq: H::Cq, id: CqId) -> Result<(), AddError<H::Cq>> {
        let Some(key) = self.channel.key_of(&cq) else {
            return Err(AddError::new(cq, AddRefusal::NotOnChannel));
        };
        if let Some(&i) = self.by_key.get(&key) {
            let served_as = self.members[i].id();
            return Err(AddError::new(cq, AddRefusal::AlreadyServed { served_as }));
        }
        self.by_key.insert(key, self.members.len());
        self.members
            .push(Feed::new(cq, id, self.room.poster().clone()));
        self.flags.push();
        Ok(())
    }

    /// How many CQs it serves.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// feed.add(channel.create_cq(8).unwrap().0, CqId(0)).unwrap();
    /// feed.add(channel.create_cq(8).unwrap().0, CqId(1)).unwrap();
    /// assert_eq!(feed.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// It serves no CQ.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// assert!(feed.is_empty());
    /// feed.add(channel.create_cq(8).unwrap().0, CqId(0)).unwrap();
    /// assert!(!feed.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The feed of each CQ, in the order they were added.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// feed.add(channel.create_cq(8).unwrap().0, CqId(4)).unwrap();
    /// assert_eq!(feed.feeds().map(|f| f.id()).collect::<Vec<_>>(), [CqId(4)]);
    /// ```
    pub fn feeds(&self) -> impl Iterator<Item = &Feed<H::Cq, T>> + '_ {
        self.members.iter()
    }

    /// Stop serving the CQ named `id` (the first one added under that id)
    /// and hand back its feed, with what it holds: the events its channel
    /// credited to it (acknowledged when it is dropped, before its CQ is
    /// destroyed), any completions a full EVD refused, and its CQ's
    /// completions not yet polled, which its own calls now deliver
    /// ([`Feed::progress`]). The other CQs are served on, in their order.
    /// `None` if no CQ is served under `id`.
    ///
    /// Its CQ may still be armed: until it is destroyed, a completion can
    /// raise an event on the channel, which this feed acknowledges at once
    /// as a CQ it does not serve ([`ChannelFeedStats::unknown_events`](super::ChannelFeedStats::unknown_events)).
    /// A feed that drains where it was removed (in
    /// [`DriverHandle::with_feed`](crate::DriverHandle::with_feed)'s closure,
    /// for a feed a driver serves) and is dropped there leaves nothing for
    /// the channel. The feed handed back is its CQ's, not a channel's: a
    /// driver that serves the channel feed refuses it on its own (its fd
    /// is the channel's: [`DriverError::FdInUse`](crate::DriverError::FdInUse)).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, WorkCompletion, soft::SoftChannel};
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let (a, hca_a) = channel.create_cq(8).unwrap();
    /// let (b, hca_b) = channel.create_cq(8).unwrap();
    /// feed.add(a, CqId(0)).unwrap();
    /// feed.add(b, CqId(1)).unwrap();
    /// hca_a.push(WorkCompletion::new(7)).unwrap();
    /// let mut removed = feed.remove(CqId(0)).unwrap();
    /// assert_eq!(feed.len(), 1);
    /// assert_eq!(removed.progress(16).delivered, 1); // its last completion
    /// drop(removed); // destroys its CQ
    /// assert_eq!(hca_a.stats().unacked_at_destroy, Some(0));
    /// assert!(feed.remove(CqId(0)).is_none());
    /// # drop(hca_b);
    /// ```
    pub fn remove(&mut self, id: CqId) -> Option<Feed<H::Cq, T>> {
        let i = self.members.iter().position(|m| m.id() == id)?;
        let member = self.members.remove(i);
        self.flags.remove(i);
        self.by_key.retain(|_, j| *j != i);
        for j in self.by_key.values_mut() {
            if *j > i {
                *j -= 1;
            }
        }
        // The members after it moved down one place, the one the next pass
        // starts at among them.
        if self.cursor > i {
            self.cursor -= 1;
        }
        if self.cursor >= self.members.len() {
            self.cursor = 0;
        }
        Some(member)
    }
}
