//! Backpressure: how a [`Feed`] meets a full EVD.
//!
//! A feed never takes more completions out of its CQ than the EVD has room
//! for: before every poll it reads the EVD's free space (one load of the
//! state word and the head) and polls at most that many, so completions wait
//! in the CQ, not in the feed. Feeds served by one thread (a [`Driver`] or a
//! [`Poller`](crate::Poller)) run one after the other and post right after
//! they poll, so however many of them share an EVD, none over-commits it.
//! Each polled batch is posted with one [`Poster::post_batch`] (one
//! reservation CAS and one notification per batch, not per completion).
//! Only something outside the feed's thread of posts can take the room
//! between a feed's reading and its post (a poster on another thread, the
//! event type's `From` posting into the same EVD, the consumer shrinking it
//! with a resize); the completions that no longer fit are then held in the
//! feed (at most one batch, counted in [`FeedStats::held`](crate::FeedStats::held)) and
//! posted first, in order, next time. Nothing is lost and the EVD reports
//! nothing: a refusal is not a loss.
//!
//! A full EVD stops the feed with [`FeedStatus::Backpressure`]. The feed then
//! waits for the EVD's room signal ([`Feed::poll_room`], the consumer's
//! dequeue that frees a slot wakes it): the [`Driver`] does so with no timer.
//!
//! The backlog then grows in the CQ, so size the CQ for it: a CQ that
//! overruns loses what did not fit, and how it goes on depends on the
//! provider. rxe (and the soft CQ) lose only those completions and keep the
//! CQ; mlx4 and mlx5 put the CQ in error (on mlx5 unless it was made with
//! `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`) and it completes nothing more. Either
//! way the device reports it (`CqError` among its async events, which an
//! [`AsyncFeed`](crate::AsyncFeed) or the driver's device feed delivers);
//! the feed itself, which only reads its CQ, does not see it.
//!
//! [`Driver`]: crate::Driver
//! [`Poster::post_batch`]: evd::Poster::post_batch

use super::Feed;
use crate::event::VerbsEvent;
use crate::feed::{FeedStatus, Progress};
use crate::source::CompletionQueue;
use evd::BatchPostError;
use std::task::{Context, Poll};

impl<C: CompletionQueue, T: From<VerbsEvent> + Send> Feed<C, T> {
    /// Free space in the EVD, or 0 (and `closed` set) if it is closed.
    #[inline]
    pub(super) fn free_space(&mut self) -> usize {
        match self.room.poster().free_slots() {
            Some(free) => free,
            None => {
                self.closed = true;
                0
            }
        }
    }

    /// Post the held events, in order, with one reservation: as many as fit,
    /// but no more than what is left of `budget` after `delivered`; the rest
    /// stay held, and the error says which bound stopped them. A refusal
    /// counts the completions never offered before in
    /// [`FeedStats::held`](crate::FeedStats::held).
    #[inline]
    pub(super) fn post_held(
        &mut self,
        delivered: &mut usize,
        budget: usize,
    ) -> Result<(), FeedStatus> {
        if self.held.is_empty() {
            // Also after a post that took them and then unwound (its
            // notification's user code).
            self.unoffered = 0;
            return Ok(());
        }
        let limit = budget.saturating_sub(*delivered);
        let room = &self.room;
        let held = &mut self.held;
        let posted = self
            .posting
            .run(|| room.poster().post_batch_up_to(held, limit));
        match posted {
            Ok(n) => {
                *delivered += n;
                // Those posted left from the front; the unoffered are at
                // the back.
                self.unoffered = self.unoffered.min(self.held.len());
                if self.held.is_empty() {
                    Ok(())
                } else if n == limit {
                    // The budget, not the EVD, stopped them: nothing was
                    // refused.
                    Err(FeedStatus::Budget)
                } else {
                    self.count_held();
                    Err(FeedStatus::Backpressure)
                }
            }
            Err(BatchPostError::Full) => {
                self.count_held();
                Err(FeedStatus::Backpressure)
            }
            Err(BatchPostError::Closed) => {
                self.closed = true;
                Err(FeedStatus::Closed)
            }
        }
    }

    /// The end of a call: count what it delivered, and a stop at a full EVD.
    #[inline]
    pub(super) fn stop(&mut self, delivered: usize, status: FeedStatus) -> Progress {
        self.stats.delivered += delivered as u64;
        if status == FeedStatus::Backpressure {
            self.stats.backpressure += 1;
        }
        Progress { delivered, status }
    }

    /// Run the upcall that drains a full EVD under an idle upcall policy
    /// (nothing else could start one), marked as a post ([`Posting`](crate::feed::posting::Posting)); true
    /// if it ran.
    pub(super) fn start_draining_upcall(&mut self) -> bool {
        let room = &self.room;
        self.posting.run(|| room.poster().start_draining_upcall())
    }

    /// Another poster took the room this feed read: the completions held
    /// that were never offered before are refused now.
    #[cold]
    fn count_held(&mut self) {
        self.stats.held += self.unoffered.min(self.held.len()) as u64;
        self.unoffered = 0;
    }

    /// Wait for room in a full EVD: `Ready` once the EVD has a free slot
    /// (or is closed: the next call reports it), `Pending` with `cx`'s waker
    /// registered with the EVD's room signal otherwise; the consumer's
    /// dequeue that frees a slot wakes it.
    ///
    /// ```
    /// use evd_verbs::{Feed, FeedStatus, CqId, WorkCompletion, VerbsEvent, soft::SoftCq};
    /// use futures::task::noop_waker;
    /// use std::task::Context;
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    /// let (cq, hca) = SoftCq::new(8).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// hca.push_batch(&[WorkCompletion::default(); 2]);
    /// assert_eq!(feed.progress(16).status, FeedStatus::Backpressure); // one fits
    /// let waker = noop_waker();
    /// let mut cx = Context::from_waker(&waker);
    /// assert!(feed.poll_room(&mut cx).is_pending());
    /// consumer.try_dequeue().unwrap(); // frees the slot, wakes the waker
    /// assert!(feed.poll_room(&mut cx).is_ready());
    /// assert_eq!(feed.progress(16).delivered, 1);
    /// assert_eq!(feed.stats().held, 0); // nothing was polled without room
    /// ```
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.posting.poll_room(&mut self.room, cx)
    }

    /// Stop waiting for room: leave the EVD's room queue, passing a wake
    /// the feed was given on to the next waiter
    /// ([`RoomWaiter::leave`](evd::RoomWaiter::leave)); the next
    /// [`poll_room`](Feed::poll_room) joins again. Whoever stops calling
    /// `poll_room` on a feed that returned `Pending` and keeps the feed
    /// calls this, or the feeds and posters queued behind it wait for a
    /// slot freed for them. Dropping the feed leaves the queue too; a
    /// [`Driver`](crate::Driver) that hands a feed back does this first.
    ///
    /// ```
    /// use evd_verbs::{CqId, Feed, FeedStatus, VerbsEvent, WorkCompletion, soft::SoftCq};
    /// use futures::task::noop_waker;
    /// use std::task::Context;
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    /// let (cq, hca) = SoftCq::new(8).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// hca.push_batch(&[WorkCompletion::default(); 2]);
    /// assert_eq!(feed.progress(16).status, FeedStatus::Backpressure);
    /// let waker = noop_waker();
    /// assert!(feed.poll_room(&mut Context::from_waker(&waker)).is_pending());
    /// assert!(consumer.query().room_wanted);
    /// feed.leave_room_queue(); // served no more for now, but kept
    /// assert!(!consumer.query().room_wanted);
    /// ```
    pub fn leave_room_queue(&mut self) {
        self.room.leave();
    }
}
