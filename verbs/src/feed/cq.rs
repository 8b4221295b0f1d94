//! A feed moves completions from one CQ into an EVD: polling in batches
//! within a budget, re-arming the CQ the verbs way, acknowledging channel
//! events in batches, and applying backpressure when the EVD is full.
//!
//! The mode (busy-poll, event-driven, adaptive) is decided by who calls it:
//! [`Feed::progress`] alone is busy-polling (caller-driven, or the
//! [`Poller`](crate::Poller) thread); the channel's events taken and
//! [`Feed::arm_and_drain`] are the event-driven cycle, which the
//! [`Driver`] runs for event and adaptive feeds (on either backend).
//!
//! Backpressure (a full EVD) is in `backpressure`: the feed never polls
//! more than the EVD has room for, and holds what another poster took the
//! room of. The channel's events (got, credited, acknowledged in batches)
//! are in `channel_events`; a CQ that fails, in `failure`.
//!
//! [`Driver`]: crate::Driver

mod backpressure;
mod channel_events;
mod failure;
mod teardown;

pub use channel_events::ACK_BATCH;

use crate::event::{CqId, VerbsEvent, WorkCompletion};
use crate::feed::posting::Posting;
use crate::feed::{FeedStatus, Progress};
use crate::source::{CompletionQueue, PollError};
use evd::{Poster, RoomWaiter};
use std::io;
use std::mem::ManuallyDrop;

/// Completions polled per `poll` call (the kernel's `ib_poll_batch` is 16).
pub const POLL_BATCH: usize = 16;

/// A feed's counters.
///
/// ```
/// # use evd_verbs::{Feed, CqId, VerbsEvent, soft::SoftCq};
/// # let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
/// let mut feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster);
/// feed.arm_and_drain(16).unwrap();
/// assert_eq!(feed.stats().arms, 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FeedStats {
    /// Completions polled from the CQ.
    pub polled: u64,
    /// Events posted into the EVD (completions and async events).
    pub delivered: u64,
    /// `poll` calls.
    pub polls: u64,
    /// `req_notify` calls that succeeded (arms made; a failed one is the
    /// feed's error, not counted).
    pub arms: u64,
    /// Completions found by drains that directly follow an arm. After a
    /// wake-up this is the normal path; the ones among them that arrived
    /// between the previous poll and the arm are those a consumer that
    /// sleeps right after arming would have stranded.
    pub found_after_arm: u64,
    /// Channel events got.
    pub events_got: u64,
    /// Channel events acknowledged.
    pub events_acked: u64,
    /// Times the feed stopped because the EVD was full.
    pub backpressure: u64,
    /// Completions polled that the EVD then refused, because something took
    /// the room the feed had read (a poster on another thread, the event
    /// type's `From` posting into the same EVD, a resize that shrank it):
    /// held in the feed and posted first next time; each counted once,
    /// however often refused. Zero while the feed's posts are the EVD's
    /// only ones and it does not shrink.
    pub held: u64,
    /// Completions lost because the event type's `From` panicked on them
    /// (counted by the call after the panic); the completions polled with
    /// them are delivered. A failed CQ's `CqError` whose `From` panicked
    /// twice counts here too.
    pub from_panics: u64,
}

/// Moves completions from a [`CompletionQueue`] into an EVD of `T`.
///
/// Each completion (and a CQ failure) is built as a [`VerbsEvent`] and
/// turned into a `T` with `T::from` as it is posted: the EVD's event type is
/// the application's. `T` is [`VerbsEvent`] unless you choose otherwise;
/// with an enum of your own (one variant wrapping [`VerbsEvent`]), one EVD
/// carries completions, async events and your software events alike. The
/// conversion writes into the feed's batch buffer, allocated once: no
/// allocation and no extra copy per event.
///
/// Dropping a feed acknowledges every channel event it got, then drops
/// (destroys) the CQ; [`Feed::into_parts`] does the same but hands back the
/// CQ and any completion it polled but could not post.
///
/// A feed reads its CQ only: an overrun of it is reported by the device's
/// async events (`CqError`), which an [`AsyncFeed`](crate::AsyncFeed) or a
/// [`Driver`](crate::Driver) (for the CQs registered with it) reads.
///
/// ```
/// use evd_verbs::{Feed, FeedStatus, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
/// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
/// let (cq, producer) = SoftCq::new(64).unwrap();
/// let mut feed = Feed::new(cq, CqId(1), poster);
/// for i in 0..3 {
///     producer.push(WorkCompletion::new(i)).unwrap();
/// }
/// let p = feed.progress(16);
/// assert_eq!((p.delivered, p.status), (3, FeedStatus::Drained));
/// assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Completion { wc, .. }) if wc.wr_id == 0));
/// ```
pub struct Feed<C: CompletionQueue, T = VerbsEvent> {
    /// Dropped by the feed's `Drop`, after its events are acknowledged.
    cq: ManuallyDrop<C>,
    id: CqId,
    /// Posts through its poster; waits for room with it when the EVD is full.
    room: RoomWaiter<T>,
    /// Where the CQ is polled into.
    batch: [WorkCompletion; POLL_BATCH],
    /// The completions of `batch` polled and not converted yet (empty
    /// between calls unless a `From` panicked).
    unconverted: std::ops::Range<usize>,
    /// A `From` is running: still set at the next call, it panicked.
    converting: bool,
    /// See [`Posting`].
    posting: Posting,
    /// Events polled (or a CQ failure raised) but not yet posted, in order.
    /// Empty between calls unless the EVD refused them. Allocated once with
    /// room for a whole batch, and only ever holds one batch (or the one
    /// `CqError`), so it never reallocates.
    held: Vec<T>,
    /// How many of `held`'s events, at its back, are completions converted
    /// and never offered to the EVD: a refusal counts these in
    /// [`FeedStats::held`], each completion once however often it is
    /// refused (at most `held.len()`: a post that unwinds may have taken
    /// some).
    unoffered: usize,
    unacked: u32,
    /// A `req_notify` is outstanding: no channel event was got since.
    armed: bool,
    /// An arm's failure after its call's drain delivered: the next call's.
    arm_error: Option<io::Error>,
    solicited_only: bool,
    failed: bool,
    failure: Option<PollError>,
    /// Given up by its driver ([`Feed::give_up`]): armed no more, and
    /// failed with this once its CQ is drained.
    doomed: Option<PollError>,
    /// Failed, and its `CqError` not built yet (the event type's `From`
    /// panicked on it): built first thing by the next call.
    error_owed: bool,
    /// Times the `CqError` was built (at most [`OWED_EVENT_TRIES`](super::OWED_EVENT_TRIES)).
    error_tries: u8,
    closed: bool,
    stats: FeedStats,
}

impl<C: CompletionQueue, T: From<VerbsEvent> + Send> Feed<C, T> {
    /// A feed from `cq` (named `id` in its events) into the EVD of `poster`.
    /// Arming requests notification of every completion.
    ///
    /// The EVD's type decides what the feed posts: `T::from` of each
    /// [`VerbsEvent`]. Nothing else names `T` here, so an EVD made with
    /// `evd::bounded(n)` whose events are never looked at needs its type
    /// spelled out (`evd::bounded::<VerbsEvent>(n)`).
    ///
    /// ```
    /// use evd_verbs::{Feed, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
    /// #[derive(Debug)]
    /// enum AppEvent { Verbs(VerbsEvent), Tick(u64) }
    /// impl From<VerbsEvent> for AppEvent {
    ///     fn from(ev: VerbsEvent) -> Self { AppEvent::Verbs(ev) }
    /// }
    /// let (poster, mut consumer) = evd::bounded::<AppEvent>(16).unwrap();
    /// let (cq, hca) = SoftCq::new(16).unwrap();
    /// let mut feed = Feed::new(cq, CqId(4), poster.clone());
    /// hca.push(WorkCompletion::new(9)).unwrap();
    /// feed.progress(16);
    /// poster.post(AppEvent::Tick(1)).unwrap();
    /// assert!(matches!(
    ///     consumer.try_dequeue(),
    ///     Ok(AppEvent::Verbs(VerbsEvent::Completion { cq: CqId(4), wc })) if wc.wr_id == 9
    /// ));
    /// assert!(matches!(consumer.try_dequeue(), Ok(AppEvent::Tick(1))));
    /// ```
    pub fn new(cq: C, id: CqId, poster: Poster<T>) -> Self {
        Feed {
            cq: ManuallyDrop::new(cq),
            id,
            room: poster.room_waiter(),
            batch: [WorkCompletion::default(); POLL_BATCH],
            unconverted: 0..0,
            converting: false,
            posting: Posting::default(),
            held: Vec::with_capacity(POLL_BATCH),
            unoffered: 0,
            unacked: 0,
            armed: false,
            arm_error: None,
            solicited_only: false,
            failed: false,
            failure: None,
            doomed: None,
            error_owed: false,
            error_tries: 0,
            closed: false,
            stats: FeedStats::default(),
        }
    }

    /// Arm for solicited completions only (`ibv_req_notify_cq` with
    /// `solicited_only`): the event-driven feed then sleeps through
    /// unsolicited completions, which wait in the CQ until the next wake.
    ///
    /// Whether an error completion wakes such an arm is the provider's
    /// choice: mlx5 wakes it on every error completion; rxe only on a
    /// solicited one, and its send-queue errors and flushes are not (its
    /// receive flushes are). So a feed that must see errors promptly should
    /// not arm solicited-only. (The software CQ wakes it on every error
    /// completion, as mlx5 does.)
    ///
    /// ```
    /// # use evd_verbs::{Feed, CqId, VerbsEvent, soft::SoftCq};
    /// # let (poster, _c) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster).solicited_only(true);
    /// ```
    pub fn solicited_only(mut self, yes: bool) -> Self {
        self.solicited_only = yes;
        self
    }

    /// The id this feed's events carry.
    ///
    /// ```
    /// use evd_verbs::{Feed, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(3), poster);
    /// assert_eq!(feed.id(), CqId(3));
    /// ```
    pub fn id(&self) -> CqId {
        self.id
    }

    /// The CQ.
    ///
    /// ```
    /// use evd_verbs::{Feed, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(3), poster);
    /// use evd_verbs::CompletionQueue;
    /// assert!(feed.cq().channel_fd().is_some());
    /// ```
    pub fn cq(&self) -> &C {
        &self.cq
    }

    /// The poster of the EVD this feed delivers into.
    ///
    /// ```
    /// # use evd_verbs::{Feed, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster);
    /// assert_eq!(feed.poster().capacity(), 4);
    /// ```
    pub fn poster(&self) -> &Poster<T> {
        self.room.poster()
    }

    /// The counters.
    ///
    /// ```
    /// use evd_verbs::{Feed, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let (cq, hca) = SoftCq::new(4).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// hca.push(WorkCompletion::new(1)).unwrap();
    /// feed.progress(16);
    /// let s = feed.stats();
    /// assert_eq!((s.polled, s.delivered), (1, 1));
    /// ```
    pub fn stats(&self) -> FeedStats {
        // A conversion a panic left unfinished has lost its completion,
        // though the next call has not counted it yet.
        let unfinished = u64::from(self.converting);
        FeedStats {
            from_panics: self.stats.from_panics + unfinished,
            ..self.stats
        }
    }

    /// Why the CQ failed, once it has: set when the failure is found, before
    /// its `CqError` async event is posted (held while the EVD is full, and
    /// lost if the event type's `From` panics on it twice: see
    /// [`FeedStats::from_panics`]); the feed reports [`FeedStatus::Failed`]
    /// once the event is posted (or lost).
    ///
    /// ```
    /// use evd_verbs::{Feed, CqId, PollError, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let (cq, hca) = SoftCq::new(4).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// hca.fail_next_poll(5);
    /// feed.progress(16);
    /// assert_eq!(feed.failure(), Some(PollError::Failed(5)));
    /// ```
    pub fn failure(&self) -> Option<PollError> {
        self.failure
    }

    /// The completion channel's fd, if the CQ has one.
    ///
    /// ```
    /// use evd_verbs::{Feed, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(3), poster);
    /// assert_eq!(feed.channel_fd(), evd_verbs::CompletionQueue::channel_fd(feed.cq()));
    /// ```
    pub fn channel_fd(&self) -> Option<std::os::fd::RawFd> {
        self.cq.channel_fd()
    }

    /// Busy-poll: move up to `budget` completions into the EVD, polling in
    /// batches of [`POLL_BATCH`], never more than the EVD has room for.
    ///
    /// A budget keeps one CQ from starving others served by the same thread.
    ///
    /// ```
    /// use evd_verbs::{Feed, FeedStatus, CqId, WorkCompletion, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    /// let (cq, hca) = SoftCq::new(64).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// hca.push_batch(&[WorkCompletion::default(); 40]);
    /// assert_eq!(feed.progress(32).status, FeedStatus::Budget);
    /// assert_eq!(feed.progress(32).delivered, 8);
    /// ```
    ///
    /// # Panics
    ///
    /// Not on its own. The call runs user code: the event type's `From`,
    /// and, in each post, the EVD's upcall handler (under an upcall policy)
    /// or the waker the post notifies. A panic there comes out of this call,
    /// and the feed and the EVD stay usable: the next call goes on where the
    /// panic left off. The batch whose post ran the handler is in the EVD
    /// (the handler had the event it panicked on; the next call first
    /// starts the upcall again for the rest, which no post of a quiet CQ
    /// would start), and the completions polled and not posted
    /// yet stay held in the feed and are posted first, in order. A
    /// completion whose `From` panicked is lost (there is no `T` for it;
    /// counted in [`FeedStats::from_panics`]); the rest of its poll is
    /// converted and posted by the next call. One limit: the
    /// [`stats`](Self::stats) miss the batch whose post panicked. A [`Driver`](crate::Driver) or a [`Poller`](crate::Poller)
    /// catches such a panic and serves on; a caller of its own catches it
    /// (`std::panic::catch_unwind`) and calls again:
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// use evd_verbs::{Feed, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
    /// use std::panic::{catch_unwind, AssertUnwindSafe};
    /// use std::sync::mpsc;
    /// let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let (seen, handled) = mpsc::channel();
    /// let _upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
    ///     let Ok(VerbsEvent::Completion { wc, .. }) = ev else { return };
    ///     seen.send(wc.wr_id).unwrap();
    ///     assert_ne!(wc.wr_id, 1, "this handler fails on completion 1");
    /// });
    /// let (cq, hca) = SoftCq::new(16).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// hca.push_batch(&[WorkCompletion::new(0), WorkCompletion::new(1), WorkCompletion::new(2)]);
    /// assert!(catch_unwind(AssertUnwindSafe(|| feed.progress(16))).is_err());
    /// assert_eq!(feed.progress(16).delivered, 0); // its restarted upcall gets 2
    /// assert_eq!(handled.try_iter().collect::<Vec<_>>(), [0, 1, 2]);
    /// ```
    pub fn progress(&mut self, budget: usize) -> Progress {
        let mut delivered = 0;
        self.posting.restart(self.room.poster());
        self.convert_polled();
        self.hold_owed_error();
        if let Err(status) = self.post_held(&mut delivered, budget) {
            return self.stop(delivered, status);
        }
        if self.failed {
            return self.stop(delivered, FeedStatus::Failed);
        }
        while delivered < budget {
            // Read the EVD's free space before every poll: completions are
            // taken out of the CQ only when there is room for them.
            let room = self.free_space();
            if room == 0 {
                // A ring that only an idle upcall policy's next instance can
                // drain: a post refused as full would start it, and this
                // feed posts only into free slots, so it starts it itself.
                if !self.closed && self.start_draining_upcall() {
                    continue;
                }
                let status = if self.closed {
                    FeedStatus::Closed
                } else {
                    FeedStatus::Backpressure
                };
                return self.stop(delivered, status);
            }
            let want = POLL_BATCH.min(budget - delivered).min(room);
            self.stats.polls += 1;
            let n = match self.cq.poll(&mut self.batch[..want]) {
                Ok(n) => n,
                Err(e) => {
                    // Nothing is held here (the post above succeeded), so
                    // the error comes after every completion polled before.
                    self.fail_with(e);
                    // Refused (another thread's poster took the room): the
                    // error stays held and the status says why, so the
                    // caller waits for room and the next call delivers it,
                    // then reports `Failed`.
                    if let Err(status) = self.post_held(&mut delivered, budget) {
                        return self.stop(delivered, status);
                    }
                    return self.stop(delivered, FeedStatus::Failed);
                }
            };
            self.stats.polled += n as u64;
            // `held` is empty here (the post above succeeded) and n <=
            // POLL_BATCH, its capacity: no allocation. Converting here, not
            // in a pass of its own, builds each `T` once, in its final place.
            self.unconverted = 0..n;
            self.convert_polled();
            if let Err(status) = self.post_held(&mut delivered, budget) {
                return self.stop(delivered, status);
            }
            if n < want {
                let Some(e) = self.doomed else {
                    return self.stop(delivered, FeedStatus::Drained);
                };
                // Given up, and every completion it held is delivered: its
                // `CqError` comes after them.
                self.fail_with(e);
                if let Err(status) = self.post_held(&mut delivered, budget) {
                    return self.stop(delivered, status);
                }
                return self.stop(delivered, FeedStatus::Failed);
            }
        }
        self.stop(delivered, FeedStatus::Budget)
    }

    /// Event-driven step: arm the CQ if no arm is outstanding, then drain.
    /// The drain after the arm is what catches completions that landed
    /// between the last poll and the arm (the CQ's own race, which the EVD's
    /// CAS does not remove). [`FeedStatus::Drained`] means: armed and empty,
    /// safe to sleep on the channel fd.
    ///
    /// # Errors
    ///
    /// The CQ's [`req_notify`](CompletionQueue::req_notify) error (the feed
    /// stays unarmed). A failed poll is not an error here: it ends the call
    /// with [`FeedStatus::Failed`] and a `CqError` async event. An arm that
    /// fails after this call's drain before it (the EVD was full) delivered
    /// events returns those with [`FeedStatus::Budget`] (unarmed: call
    /// again), and its error is the next call's, before anything else.
    ///
    /// ```
    /// use evd_verbs::{Feed, FeedStatus, CqId, WorkCompletion, VerbsEvent, soft::SoftCq};
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let (cq, producer) = SoftCq::new(16).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// // A completion lands after the last poll, just before the arm:
    /// producer.complete_in_next_rearm_window(WorkCompletion::new(42));
    /// let p = feed.arm_and_drain(64).unwrap();
    /// assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
    /// assert!(!producer.is_stranded());
    /// ```
    ///
    /// One call delivers at most `budget` events, however it gets there (a
    /// drain before the arm, when the EVD was full, counts against it).
    ///
    /// # Panics
    ///
    /// Not on its own; a panic of user code in a post comes out of this
    /// call, as for [`progress`](Self::progress), and leaves the feed and
    /// the EVD as `progress` does. The arm made before the drain stays, but
    /// the drain was cut short: completions may wait in the CQ that no
    /// channel event will announce, so call `arm_and_drain` again (it drains
    /// without arming twice) before sleeping on the channel fd, as the
    /// [`Driver`](crate::Driver)'s next turn of the feed does.
    pub fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress> {
        if let Some(e) = self.take_arm_error() {
            return Err(e);
        }
        let mut delivered = 0;
        loop {
            let mut arming = false;
            if !self.armed && !self.failed && !self.closed && self.doomed.is_none() {
                // Arming while completions are held (EVD full) is pointless:
                // the feed will not poll until there is room anyway.
                if !self.held.is_empty() || self.free_space() == 0 {
                    let mut p = self.progress(budget - delivered);
                    p.delivered += delivered;
                    if p.status != FeedStatus::Drained {
                        return Ok(p);
                    }
                    // The consumer made room meanwhile and the CQ is empty,
                    // but it was never armed: "Drained" would send the feed to
                    // sleep on a channel that cannot fire. Arm, then drain.
                    delivered = p.delivered;
                    continue;
                }
                if let Err(e) = self.cq.req_notify(self.solicited_only) {
                    if delivered == 0 {
                        return Err(e);
                    }
                    // The next call's error (`Budget`: before any sleep).
                    self.keep_arm_error(e);
                    return Ok(Progress {
                        delivered,
                        status: FeedStatus::Budget,
                    });
                }
                self.armed = true;
                self.stats.arms += 1;
                arming = true;
            }
            let polled = self.stats.polled;
            let mut p = self.progress(budget - delivered);
            if arming {
                // Completions the drain found, delivered or held (not the
                // events it posted: a `CqError` is no completion).
                self.stats.found_after_arm += self.stats.polled - polled;
            }
            p.delivered += delivered;
            return Ok(p);
        }
    }

    /// Event-driven wake-up, when the channel fd is readable: get every
    /// waiting channel event, acknowledge them in batches of [`ACK_BATCH`],
    /// re-arm, then drain (see [`Feed::arm_and_drain`]). Spurious events are
    /// harmless: they cost one empty poll.
    ///
    /// # Errors
    ///
    /// The CQ's [`get_event`](CompletionQueue::get_event) error, or as
    /// [`arm_and_drain`](Self::arm_and_drain).
    ///
    /// ```
    /// use evd_verbs::{Feed, FeedStatus, CqId, WorkCompletion, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let (cq, producer) = SoftCq::new(16).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// assert_eq!(feed.arm_and_drain(64).unwrap().status, FeedStatus::Drained);
    /// producer.push(WorkCompletion::default()).unwrap(); // raises a channel event
    /// producer.inject_spurious_event();
    /// let p = feed.on_channel_ready(64).unwrap();
    /// assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
    /// assert_eq!(feed.stats().events_got, 2); // the real one and the spurious one
    /// ```
    ///
    /// # Panics
    ///
    /// As [`arm_and_drain`](Self::arm_and_drain): the channel events got
    /// before the panic are credited (acknowledged with the next batch), and
    /// the next `arm_and_drain` re-arms and drains.
    pub fn on_channel_ready(&mut self, budget: usize) -> io::Result<Progress> {
        self.take_events()?;
        self.arm_and_drain(budget)
    }

    /// Convert the polled completions not converted yet into `held`, in
    /// order. Each leaves `unconverted` before its `From` runs: a `From` that
    /// panics loses only the completion it panicked on (there is no `T` for
    /// it, and converting it again would panic again), and the next call
    /// counts it ([`FeedStats::from_panics`]) and converts the rest.
    fn convert_polled(&mut self) {
        if self.converting {
            self.converting = false;
            self.stats.from_panics += 1;
        }
        let cq = self.id;
        for i in self.unconverted.by_ref() {
            let wc = self.batch[i];
            self.converting = true;
            let ev = T::from(VerbsEvent::Completion { cq, wc });
            self.converting = false;
            self.held.push(ev);
            self.unoffered += 1;
        }
    }
}

impl<C: CompletionQueue + std::fmt::Debug, T> std::fmt::Debug for Feed<C, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("id", &self.id)
            .field("cq", &self.cq)
            .field("stats", &self.stats)
            .finish()
    }
}

#[cfg(test)]
mod tests;
