//! A [`ChannelFeed`] and a full EVD: the wait for room, whose check may run
//! the upcall that drains a full EVD (user code), marked as a post
//! ([`Posting`](crate::feed::posting::Posting)).

use super::{ChannelFeed, SharedChannel};
use crate::event::VerbsEvent;
use std::task::{Context, Poll};

impl<H: SharedChannel, T: From<VerbsEvent> + Send> ChannelFeed<H, T> {
    /// Wait for room in a full EVD (as [`Feed::poll_room`](crate::Feed::poll_room)).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, FeedStatus, VerbsEvent, WorkCompletion, soft::SoftChannel};
    /// use futures::task::noop_waker;
    /// use std::task::Context;
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let (cq, hca) = channel.create_cq(8).unwrap();
    /// feed.add(cq, CqId(0)).unwrap();
    /// hca.push_batch(&[WorkCompletion::default(); 2]);
    /// assert_eq!(feed.progress(16).status, FeedStatus::Backpressure); // one fits
    /// let waker = noop_waker();
    /// let mut cx = Context::from_waker(&waker);
    /// assert!(feed.poll_room(&mut cx).is_pending());
    /// consumer.try_dequeue().unwrap(); // frees the slot
    /// assert!(feed.poll_room(&mut cx).is_ready());
    /// ```
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.posting.poll_room(&mut self.room, cx)
    }

    /// Stop waiting for room (as [`Feed::leave_room_queue`](crate::Feed::leave_room_queue)).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    /// let mut feed = ChannelFeed::new(SoftChannel::new().unwrap(), poster);
    /// feed.leave_room_queue(); // not waiting: nothing to leave
    /// ```
    pub fn leave_room_queue(&mut self) {
        self.room.leave();
    }
}
