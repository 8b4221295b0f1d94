//! One completion channel shared by many CQs, served as one feed.
//!
//! Applications with many CQs usually give them one completion channel
//! (`ibv_comp_channel`): one fd to wait on, whatever the number of CQs.
//! `ibv_get_cq_event` then says *which* CQ each event is for, and the
//! consumer demultiplexes. [`SharedChannel`] is that channel as a feed sees
//! it (implemented by `ibv::CompletionChannel` and by
//! [`SoftChannel`](crate::soft::SoftChannel)); [`ChannelFeed`] serves it.
//!
//! # Design
//! A [`ChannelFeed`] holds one [`Feed`] per CQ, all posting into one EVD,
//! and is *one* driver source: one fd, one cycle ([`Driver::register_channel`](crate::Driver::register_channel)).
//! Every per-CQ property is the [`Feed`]'s own (arming, the poll after the
//! arm, batched acks, budgets, reading the EVD's free space before every
//! poll, holding what another poster's post refused); the channel feed only
//! decides *which* feeds run:
//!
//! - **Taking events** ([`ChannelFeed::take_events`]): every waiting event
//!   is got, until the channel has none, and credited to the feed of the CQ
//!   it names: that feed's arm is used up, the event joins its next ack
//!   batch (per CQ, [`ACK_BATCH`](crate::ACK_BATCH)), and the feed is marked
//!   *dirty*. An event for a CQ the channel feed does not hold (a CQ made
//!   on the channel by someone else, or added nowhere; or one
//!   [removed](ChannelFeed::remove) and not yet destroyed, its arm still
//!   out) is acknowledged at
//!   once through [`SharedChannel::ack_unknown`], so its owner's destroy
//!   does not wait for it, and counted in [`ChannelFeedStats::unknown_events`].
//!   Its completions are not this feed's, and its owner never sees that
//!   event: **a channel served by a `ChannelFeed` must be served by it
//!   alone** (every CQ on it added to it); an unknown event is a usage
//!   error, counted so that it shows (in the stats, which a registered
//!   feed's owner reads once the driver hands the feed back; and with the
//!   `tracing` feature at once, at WARN: the first, second, fourth...).
//! - **Arming and draining** ([`ChannelFeed::arm_and_drain`]): each dirty
//!   feed, round robin, runs [`Feed::arm_and_drain`], which re-arms it only
//!   if its arm was used up and polls after arming. A feed leaves the dirty
//!   set only when that returns `Drained` (armed and empty). So the channel
//!   feed reports `Drained`, safe to sleep on the fd, exactly when every
//!   live CQ is armed and was found empty after its arm.
//!
//! # Invariants
//! - *No lost wakeup.* A CQ that is not dirty is armed and was empty after
//!   its arm, so its next completion raises an event on the shared fd; the
//!   driver's next turn takes every event, whichever CQ it names, before it
//!   runs the feeds. Events are taken only there, never while one CQ is
//!   being served, so none is consumed on a CQ's behalf and forgotten. The
//!   driver polls the fd while the channel feed drains or waits for room
//!   too, not only while it sleeps: a quiet CQ's event that comes while a
//!   busy one holds the feed makes the quiet CQ dirty at the driver's next
//!   collection of readiness (at most its `busy_enter_interval` apart
//!   while it is busy), and it is served in its turn, not after the busy
//!   CQ's whole backlog.
//! - *No over-commit.* The feeds run one after the other on the driver's
//!   thread and each reads the EVD's free space before every poll; a full
//!   EVD stops the whole pass (`Backpressure`): the feeds not reached stay
//!   dirty and run when the room signal comes.
//! - *Fair shares.* One call delivers at most its budget over all the CQs;
//!   the next call starts after the CQ that used it up or found the EVD
//!   full, so one busy CQ does not starve the others, of the budget or of
//!   the slots a slow consumer frees (a starved CQ would overrun).
//! - *Acks.* Every event got is acknowledged exactly once: by its CQ's feed
//!   (in batches, and the rest when the feed is dropped or handed back,
//!   before the CQ is destroyed), or at once if its CQ is unknown.
//! - *FIFO per CQ*: each CQ is polled by its own feed only.
//! - A CQ whose poll fails delivers its `CqError` (held, with
//!   `Backpressure`, until the EVD has room) and is not polled again;
//!   a CQ whose arm fails does the same (its `CqError` first; then it is
//!   served no more, though it stays a member, listed and counted, and its
//!   channel events are still acknowledged; both counted in
//!   [`ChannelFeedStats::failed_cqs`]); the
//!   others go on. The channel feed reports `Failed`
//!   only when every CQ has failed, `Closed` when the EVD is closed. An
//!   overrun is reported by the device (`CqError`, see [`Feed`]'s notes on
//!   backpressure), and the channel feed goes on polling the CQ.
//!
//! Taking the events (and forgetting arms or giving CQs up after a
//! failure) is `events`; adding and removing CQs, `membership` (a feed a
//! driver serves changes in its driver's hands:
//! [`Driver::with_feed`](crate::Driver::with_feed)).
//!
//! The driver's cycle needs no new observation: to it the channel feed is
//! one feed whose fd is the channel's. Its unarmed polls (the event cycle's
//! poll after a wake, and [`FeedMode::Adaptive`](crate::FeedMode::Adaptive)'s
//! spin) poll the dirty CQs, the ones the channel's events named (a clean
//! CQ is armed and empty: its next completion raises an event, which the
//! driver takes at its next collection of readiness), and the arm that
//! follows arms them. A wake costs the CQs it names, not every CQ on the
//! channel.

mod add_error;
mod events;
mod flags;
mod membership;
mod room;
mod stats;

pub use crate::source::{ChannelEvent, CqKey, SharedChannel};
pub use add_error::{AddError, AddRefusal};
pub use stats::ChannelFeedStats;

use crate::event::VerbsEvent;
use crate::feed::posting::Posting;
use crate::feed::{Feed, FeedStatus, Progress};
use crate::source::PollError;
use evd::{Poster, RoomWaiter};
use flags::{MemberFlags, Pass, Which};
use std::collections::HashMap;
use std::fmt;
use std::io;

/// Moves completions from every CQ on one [`SharedChannel`] into one EVD:
/// one driver source, one fd (see the [module notes](self) for the design
/// and its invariants).
///
/// ```
/// use evd_verbs::{ChannelFeed, CqId, FeedStatus, VerbsEvent, WorkCompletion, soft::SoftChannel};
/// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
/// let channel = SoftChannel::new().unwrap();
/// let mut feed = ChannelFeed::new(channel.clone(), poster);
/// let mut hcas = Vec::new();
/// for i in 0..3 {
///     let (cq, hca) = channel.create_cq(16).unwrap();
///     feed.add(cq, CqId(i)).unwrap();
///     hcas.push(hca);
/// }
/// // Arms all three: safe to sleep on the channel's fd.
/// assert_eq!(feed.arm_and_drain(64).unwrap().status, FeedStatus::Drained);
/// hcas[2].push(WorkCompletion::new(7)).unwrap();
/// let p = feed.on_channel_ready(64).unwrap(); // the fd was readable
/// assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
/// assert!(matches!(
///     consumer.try_dequeue(),
///     Ok(VerbsEvent::Completion { cq: CqId(2), wc }) if wc.wr_id == 7
/// ));
/// ```
pub struct ChannelFeed<H: SharedChannel, T = VerbsEvent> {
    /// Declared before `channel`: dropped first, so every CQ (acked by its
    /// feed) is gone before the handle to the channel is let go.
    members: Vec<Feed<H::Cq, T>>,
    /// Bit `i` of each set is `members[i]`'s: dirty, done.
    flags: MemberFlags,
    by_key: HashMap<CqKey, usize>,
    channel: H,
    room: RoomWaiter<T>,
    /// Its room check's mark (see [`Posting`]); its CQs' posts are marked
    /// in their [`Feed`]s.
    posting: Posting,
    /// Where the next pass starts.
    cursor: usize,
    stats: ChannelFeedStats,
}

impl<H: SharedChannel, T: From<VerbsEvent> + Send> ChannelFeed<H, T> {
    /// A feed of `channel`'s CQs (none yet: [`add`](Self::add) them) into
    /// the EVD of `poster`.
    ///
    /// The feed must be the channel's only taker of events: one taken
    /// elsewhere (another `ChannelFeed` on a clone of the same channel, or
    /// a [`get_cq_event`](SharedChannel::get_cq_event) on one) is one this
    /// feed's CQ never hears of (its arm used up, its completions wait
    /// until something else wakes the feed), and one this feed takes for a
    /// CQ it does not hold it acknowledges at once as unknown. A driver
    /// refuses a second feed on the channel's fd
    /// ([`DriverError::FdInUse`](crate::DriverError::FdInUse)).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let feed = ChannelFeed::new(SoftChannel::new().unwrap(), poster);
    /// assert!(feed.is_empty());
    /// ```
    pub fn new(channel: H, poster: Poster<T>) -> Self {
        ChannelFeed {
            members: Vec::new(),
            flags: MemberFlags::default(),
            by_key: HashMap::new(),
            channel,
            room: poster.room_waiter(),
            posting: Posting::default(),
            cursor: 0,
            stats: ChannelFeedStats::default(),
        }
    }

    /// The channel.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// use evd_verbs::SharedChannel;
    /// assert_eq!(feed.channel().fd(), channel.fd()); // the same channel
    /// # feed.add(channel.create_cq(8).unwrap().0, CqId(0)).unwrap();
    /// ```
    pub fn channel(&self) -> &H {
        &self.channel
    }

    /// The counters.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let (cq, hca) = channel.create_cq(8).unwrap();
    /// feed.add(cq, CqId(0)).unwrap();
    /// hca.inject_spurious_event();
    /// feed.take_events().unwrap();
    /// assert_eq!(feed.stats().events_got, 1);
    /// ```
    pub fn stats(&self) -> ChannelFeedStats {
        self.stats
    }

    /// The poster of the EVD it delivers into.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let feed = ChannelFeed::new(SoftChannel::new().unwrap(), poster);
    /// assert_eq!(feed.poster().capacity(), 16);
    /// ```
    pub fn poster(&self) -> &Poster<T> {
        self.room.poster()
    }

    /// Event-driven step: run [`Feed::arm_and_drain`] on each CQ that needs
    /// it (its arm used up, or not drained yet), round robin, within
    /// `budget` for them all. [`FeedStatus::Drained`] means every live CQ
    /// is armed and empty: safe to sleep on the channel's fd.
    ///
    /// # Errors
    ///
    /// None: a CQ whose [`req_notify`](crate::CompletionQueue::req_notify) fails is
    /// drained, then reported as a `CqError` async event
    /// ([`PollError::ArmFailed`]) and not served again, as a CQ whose poll
    /// fails is; the CQs it shares the channel with go on.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, FeedStatus, VerbsEvent, WorkCompletion, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let (cq, hca) = channel.create_cq(64).unwrap();
    /// feed.add(cq, CqId(0)).unwrap();
    /// hca.push_batch(&[WorkCompletion::default(); 20]);
    /// assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Budget);
    /// let p = feed.arm_and_drain(16).unwrap();
    /// assert_eq!((p.delivered, p.status), (4, FeedStatus::Drained));
    /// ```
    ///
    /// # Panics
    ///
    /// Not on its own; a panic of user code in a post (the EVD's upcall
    /// handler, the event type's `From`) comes out of this call, leaving
    /// the CQ it was serving as [`Feed::arm_and_drain`] says and still to
    /// be drained: the next call serves it again (after the others, so that
    /// a CQ whose every serving panics does not hold them up), and the feed
    /// and the EVD stay usable. Call again before sleeping on the channel's
    /// fd.
    pub fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress> {
        self.posting.restart(self.room.poster());
        let n = self.members.len();
        let start = self.cursor;
        let mut delivered = 0;
        let mut pass = Pass::new(start);
        while let Some(i) = pass.next(&self.flags, Which::Dirty) {
            if delivered >= budget {
                self.cursor = i;
                return Ok(Progress {
                    delivered,
                    status: FeedStatus::Budget,
                });
            }
            // A call into this CQ's feed that unwinds (user code in a post)
            // leaves the next pass starting after it: a CQ whose every
            // serving panics must not keep the ones behind it unserved.
            self.cursor = (i + 1) % n;
            let m = &mut self.members[i];
            let p = match m.arm_and_drain(budget - delivered) {
                Ok(p) => p,
                Err(e) => {
                    // This CQ's arm failed (`req_notify`): it cannot be
                    // slept on. What it holds is polled first (no arm
                    // needed; cut short, the failure waits for the next
                    // call); drained, it fails as a CQ whose poll fails
                    // does: its `CqError` tells the consumer, then it
                    // is served no more (still a member), and the others go on.
                    let drained = m.progress(budget - delivered);
                    if drained.status != FeedStatus::Drained {
                        m.keep_arm_error(e);
                        drained
                    } else {
                        let errno = e.raw_os_error().unwrap_or(0);
                        m.fail_with(PollError::ArmFailed(errno));
                        let left = budget - delivered - drained.delivered;
                        let p = if left == 0 {
                            // Its error is held: posted by the next call.
                            Progress {
                                delivered: 0,
                                status: FeedStatus::Budget,
                            }
                        } else {
                            m.progress(left)
                        };
                        Progress {
                            delivered: drained.delivered + p.delivered,
                            status: p.status,
                        }
                    }
                }
            };
            delivered += p.delivered;
            match p.status {
                FeedStatus::Drained => self.flags.set_dirty(i, false),
                FeedStatus::Budget => {
                    // Still dirty; the others come first next time.
                    self.cursor = (i + 1) % n;
                    return Ok(Progress {
                        delivered,
                        status: FeedStatus::Budget,
                    });
                }
                FeedStatus::Backpressure | FeedStatus::Closed => {
                    // Still dirty: run again once there is room, after the
                    // others (starting here again would hand this CQ every
                    // slot the consumer frees, and the others overrun).
                    self.cursor = (i + 1) % n;
                    return Ok(Progress {
                        delivered,
                        status: p.status,
                    });
                }
                FeedStatus::Failed => self.fail(i),
            }
        }
        self.cursor = if n == 0 { 0 } else { (start + 1) % n };
        let all_failed = self.flags.all_failed();
        Ok(Progress {
            delivered,
            status: if all_failed {
                FeedStatus::Failed
            } else {
                FeedStatus::Drained
            },
        })
    }

    /// Event-driven wake-up, when the channel's fd is readable:
    /// [`take_events`](Self::take_events), then
    /// [`arm_and_drain`](Self::arm_and_drain).
    ///
    /// # Errors
    ///
    /// As [`take_events`](Self::take_events), then as
    /// [`arm_and_drain`](Self::arm_and_drain).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, FeedStatus, VerbsEvent, WorkCompletion, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let (cq, hca) = channel.create_cq(8).unwrap();
    /// feed.add(cq, CqId(0)).unwrap();
    /// assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Drained); // armed
    /// hca.push(WorkCompletion::new(1)).unwrap(); // the armed CQ raises an event
    /// let p = feed.on_channel_ready(16).unwrap();
    /// assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
    /// ```
    ///
    /// # Panics
    ///
    /// As [`arm_and_drain`](Self::arm_and_drain); the channel events got
    /// before it are credited.
    pub fn on_channel_ready(&mut self, budget: usize) -> io::Result<Progress> {
        self.take_events()?;
        self.arm_and_drain(budget)
    }

    /// Busy-poll every live CQ without arming, round robin, within `budget`
    /// for them all ([`Feed::progress`] on each). `Drained`: every CQ was
    /// found empty (not necessarily armed).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, FeedStatus, VerbsEvent, WorkCompletion, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let (a, hca_a) = channel.create_cq(8).unwrap();
    /// let (b, hca_b) = channel.create_cq(8).unwrap();
    /// feed.add(a, CqId(0)).unwrap();
    /// feed.add(b, CqId(1)).unwrap();
    /// hca_a.push(WorkCompletion::default()).unwrap();
    /// hca_b.push(WorkCompletion::default()).unwrap();
    /// assert_eq!(feed.progress(16).delivered, 2);
    /// ```
    ///
    /// # Panics
    ///
    /// Not on its own; a panic of user code in a post comes out of this
    /// call, leaving the CQ it was serving as [`Feed::progress`] says: the
    /// feed and the EVD stay usable, and the next call goes on.
    pub fn progress(&mut self, budget: usize) -> Progress {
        self.poll_members(budget, false)
    }

    /// [`ChannelFeed::progress`] on the dirty CQs only: the driver's
    /// unarmed polls (after a wake, and the adaptive spin). A clean CQ is
    /// armed and was found empty after its arm, so its next completion
    /// raises an event, which the driver takes at its next collection of
    /// readiness (it polls the channel's fd while the feed is awake too;
    /// busy, it collects at most `busy_enter_interval` apart): polling it
    /// finds nothing that is not announced. So a wake costs the CQs it
    /// names, not every CQ on the channel, and a quiet CQ's first
    /// completion while another keeps the feed busy waits for that
    /// collection instead of the next poll.
    pub(crate) fn progress_dirty(&mut self, budget: usize) -> Progress {
        self.poll_members(budget, true)
    }

    fn poll_members(&mut self, budget: usize, dirty_only: bool) -> Progress {
        self.posting.restart(self.room.poster());
        let n = self.members.len();
        let start = self.cursor;
        let mut delivered = 0;
        let which = if dirty_only {
            Which::Dirty
        } else {
            Which::Live
        };
        let mut pass = Pass::new(start);
        while let Some(i) = pass.next(&self.flags, which) {
            if delivered >= budget {
                self.cursor = i;
                return Progress {
                    delivered,
                    status: FeedStatus::Budget,
                };
            }
            // As in `arm_and_drain`: an unwinding call leaves the next pass
            // starting after this CQ.
            self.cursor = (i + 1) % n;
            // Dirty while it runs: a call that unwinds leaves it so, and
            // the next `arm_and_drain` serves it (and restarts its upcall).
            // One that stops before it drained stays dirty too: what it
            // holds (a failed CQ's `CqError`) may have no channel event to
            // come for it.
            let was_dirty = self.flags.is_dirty(i);
            self.flags.set_dirty(i, true);
            let p = self.members[i].progress(budget - delivered);
            self.flags
                .set_dirty(i, was_dirty || p.status != FeedStatus::Drained);
            delivered += p.delivered;
            match p.status {
                FeedStatus::Drained => {}
                FeedStatus::Budget => {
                    self.cursor = (i + 1) % n;
                    return Progress {
                        delivered,
                        status: FeedStatus::Budget,
                    };
                }
                FeedStatus::Backpressure | FeedStatus::Closed => {
                    // Its completions wait in the CQ; the arm, if it was
                    // used up, is still to be made: it stays dirty. The
                    // next pass starts after it, as after a budget.
                    self.cursor = (i + 1) % n;
                    return Progress {
                        delivered,
                        status: p.status,
                    };
                }
                FeedStatus::Failed => self.fail(i),
            }
        }
        self.cursor = if n == 0 { 0 } else { (start + 1) % n };
        let all_failed = self.flags.all_failed();
        Progress {
            delivered,
            status: if all_failed {
                FeedStatus::Failed
            } else {
                FeedStatus::Drained
            },
        }
    }

    fn fail(&mut self, i: usize) {
        if self.flags.fail(i) {
            self.stats.failed_cqs += 1;
        }
    }

    /// Tear down: hand back the feed of each CQ, in the order they were
    /// added, and the channel. Each feed acknowledges the events credited to
    /// it when it is dropped or taken apart ([`Feed::into_parts`]).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let (cq, hca) = channel.create_cq(8).unwrap();
    /// feed.add(cq, CqId(0)).unwrap();
    /// hca.inject_spurious_event();
    /// feed.take_events().unwrap();
    /// let (feeds, _channel) = feed.into_parts();
    /// drop(feeds); // acks, then destroys the CQ
    /// assert_eq!(hca.stats().unacked_at_destroy, Some(0));
    /// ```
    pub fn into_parts(self) -> (Vec<Feed<H::Cq, T>>, H) {
        let feeds = self.members;
        // The feeds first: a tuple drops in order, so dropping what this
        // returns destroys the CQs before the channel they are on.
        (feeds, self.channel)
    }
}

impl<H: SharedChannel + fmt::Debug, T> fmt::Debug for ChannelFeed<H, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelFeed")
            .field("channel", &self.channel)
            .field("cqs", &self.members.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}
