//! A [`Feed`] whose CQ fails: a failed poll, or a CQ its driver gives up
//! (its verbs calls keep failing). The feed polls it no more; the
//! `CqError` it owes is held behind the events held before it, so the
//! consumer gets every completion first; from then on the feed reports
//! [`FeedStatus::Failed`](crate::FeedStatus::Failed).

use super::Feed;
use crate::event::{AsyncElement, AsyncEvent, AsyncEventKind, VerbsEvent};
use crate::feed::OWED_EVENT_TRIES;
use crate::source::{CompletionQueue, PollError};

impl<C: CompletionQueue, T: From<VerbsEvent> + Send> Feed<C, T> {
    /// The CQ failed (`e`): hold its `CqError` behind what is held, and
    /// poll it no more; the next post of the held events delivers it and the
    /// feed reports [`FeedStatus::Failed`](crate::FeedStatus::Failed) from then on.
    pub(crate) fn fail_with(&mut self, e: PollError) {
        crate::trace::event!(WARN, cq = ?self.id, error = %e, "CQ failed; its feed stops and delivers a CqError");
        self.failed = true;
        self.failure = Some(e);
        self.error_owed = true;
        self.hold_owed_error();
    }

    /// Give the CQ up (its driver's verbs calls on it keep failing: `e`
    /// says which): it is armed no more, and the next calls drain it; once
    /// drained, it fails with `e` as a failed poll does (its `CqError` after
    /// every completion it held, then [`FeedStatus::Failed`](crate::FeedStatus::Failed)).
    pub(crate) fn give_up(&mut self, e: PollError) {
        if !self.failed {
            self.doomed = Some(e);
        }
    }

    /// An arm's failure its call could not report (the drain before the arm
    /// delivered, or a channel feed's member still draining): the next
    /// `arm_and_drain`'s error, before anything else.
    pub(crate) fn keep_arm_error(&mut self, e: std::io::Error) {
        self.arm_error = Some(e);
    }

    /// The arm's failure kept for this call; dropped if the feed has
    /// failed, been given up or closed since (it reports that instead).
    pub(super) fn take_arm_error(&mut self) -> Option<std::io::Error> {
        let live = !self.failed && !self.closed && self.doomed.is_none();
        self.arm_error.take().filter(|_| live)
    }

    /// Build and hold the `CqError` a failure owes. If the event type's
    /// `From` panics, it stays owed: the next call builds it again (the CQ
    /// is not polled again either way), once ([`OWED_EVENT_TRIES`]); after
    /// a second panic it is lost (counted in `from_panics`).
    pub(super) fn hold_owed_error(&mut self) {
        if !self.error_owed {
            return;
        }
        if self.error_tries >= OWED_EVENT_TRIES {
            self.error_owed = false;
            self.stats.from_panics += 1;
            crate::trace::event!(ERROR, cq = ?self.id, "the event type's `From` panicked on the failed CQ's CqError twice: lost");
            return;
        }
        self.error_tries += 1;
        let error = T::from(VerbsEvent::Async(AsyncEvent::new(
            AsyncEventKind::CqError,
            AsyncElement::Cq(self.id),
        )));
        self.held.push(error);
        self.error_owed = false;
    }
}
