//! The completion channel's events of a [`Feed`]'s CQ: got
//! ([`Feed::on_channel_ready`], or from a channel shared with other CQs by
//! the [`ChannelFeed`](crate::ChannelFeed)), credited (the arm each reports
//! is used up), and acknowledged in batches of [`ACK_BATCH`], every one of
//! them before the CQ is destroyed (the `ibv_get_cq_event` rule; see
//! `teardown`).

use super::Feed;
use crate::event::VerbsEvent;
use crate::source::CompletionQueue;
use std::io;

/// Channel events acknowledged per `ack_events` call: acknowledging takes a
/// mutex in libibverbs, so it is batched (as rdma-io and the kernel do).
pub const ACK_BATCH: u32 = 16;

impl<C: CompletionQueue, T: From<VerbsEvent> + Send> Feed<C, T> {
    /// Get every waiting channel event, acknowledging in batches.
    pub(crate) fn take_events(&mut self) -> io::Result<()> {
        while self.cq.get_event()? {
            self.credit_event();
        }
        Ok(())
    }

    /// Treat the CQ as unarmed: the next [`Feed::arm_and_drain`] arms it
    /// again (after a failure that may have used the arm up without the
    /// channel event that says so being got).
    pub(crate) fn forget_arm(&mut self) {
        self.armed = false;
    }

    /// One channel event for this feed's CQ was got (here, or from a
    /// channel shared with other CQs): the arm it reports is used up (or it
    /// is spurious; re-arming is correct either way), and it is
    /// acknowledged with the next batch.
    pub(crate) fn credit_event(&mut self) {
        self.armed = false;
        self.stats.events_got += 1;
        self.unacked += 1;
        if self.unacked >= ACK_BATCH {
            self.ack_all();
        }
    }
}

// Apart from the posting methods: `Drop` may not ask more of `T` than the
// struct does.
impl<C: CompletionQueue, T> Feed<C, T> {
    /// Acknowledge every event got so far. The count is taken before the
    /// call: an `ack_events` that panics (user code) is taken as having
    /// acknowledged them, and is never asked for them again (asking twice
    /// would acknowledge more events than were got if it had, which
    /// `ibv_destroy_cq` waits on for ever as it does on too few).
    pub(super) fn ack_all(&mut self) {
        let count = std::mem::take(&mut self.unacked);
        if count > 0 {
            self.stats.events_acked += u64::from(count);
            // SAFETY: `count` is the events credited to this feed's CQ (got
            // by `take_events`, or from its shared channel by the channel
            // feed) and not acknowledged since: `unacked` is zero from here
            // on, so no later call acknowledges any of them again.
            unsafe { self.cq.ack_events(count) };
        }
    }
}
