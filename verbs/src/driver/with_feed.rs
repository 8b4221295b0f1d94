//! A registered feed changed in place: [`Driver::with_feed`] on the
//! driver's owner's thread, [`DriverHandle::with_feed`] from any other (a
//! command the spawned driver runs between its feeds' turns, never inside
//! one). A CQ added to a [`ChannelFeed`](crate::ChannelFeed) or removed from
//! it, a feed's counters read where it runs.
//!
//! The driver does not know what the closure changed, so the feed's next
//! turn assumes the worst it can be: a new CQ, unarmed, with completions
//! already waiting. A feed asleep on its fd is woken (put back to arm and
//! drain: [`Slot::changed_in_place`]); a feed awake arms and drains in the
//! turns it is having anyway (a channel feed's new CQ is dirty until then);
//! a blocked one does when room comes; a feed that is done because every
//! CQ failed is served again (its next turn finds out whether a CQ is
//! live now: a channel feed's failed CQs removed, a healthy one added);
//! one whose EVD is closed, or that the driver gave up, stays done. And
//! the driver's fd is made readable, so that a loop which waits on it next
//! gives the feed that turn.
//!
//! What the driver keeps of the feed from its registration stays true only
//! if the closure leaves the feed on the fd it had (its channel, its CQ's:
//! the driver polls that fd) and leaves its room to the driver (a feed
//! waiting for room is the driver's to wake).

use super::control::{Command, FeedCall};
use super::cycle::Phase;
use super::error::Caught;
use super::slot::Slot;
use super::{Driver, DriverError, DriverHandle, FeedId, FeedKey, Panic};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::mpsc;

impl Driver {
    /// Run `f` on the feed registered under `key`, in place, and return
    /// what it returns: add a CQ to a channel feed, remove one, read a
    /// feed's counters. The feed's next turn arms and drains it (a CQ added
    /// here is served without waiting for an event it cannot raise; a feed
    /// done because every CQ failed is served again), and the driver's fd
    /// is made readable so that a loop waiting on it gives the feed that
    /// turn. A feed whose EVD is closed, or that the driver gave up
    /// ([`DriverError::FeedFailed`] with `given_up`), is served no more: a
    /// CQ added to it is never polled.
    ///
    /// `f` must leave the feed on the fd it was registered with (not
    /// replace it with another feed: the driver polls that fd) and leave
    /// its waits for room to the driver (no
    /// [`poll_room`](crate::ChannelFeed::poll_room) or
    /// [`leave_room_queue`](crate::ChannelFeed::leave_room_queue)).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, Driver, FeedMode, VerbsEvent, WorkCompletion, soft::SoftChannel};
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let key = driver
    ///     .register_channel(ChannelFeed::new(channel.clone(), poster), FeedMode::Event)
    ///     .unwrap();
    /// driver.process(Some(std::time::Duration::ZERO)).unwrap(); // asleep on the channel
    /// let (cq, hca) = channel.create_cq(8).unwrap();
    /// hca.push(WorkCompletion::new(5)).unwrap(); // before any arm: no event
    /// driver.with_feed(key, |feed| feed.add(cq, CqId(3))).unwrap().unwrap();
    /// while consumer.try_dequeue().is_err() {
    ///     driver.process(None).unwrap();
    /// }
    /// let feed = driver.with_feed(key, |feed| feed.remove(CqId(3))).unwrap().unwrap();
    /// drop(feed); // its CQ destroyed
    /// ```
    ///
    /// # Errors
    /// [`DriverError::NoSuchFeed`] if the key names no feed of this driver
    /// (removed, or being removed, or another driver's key).
    ///
    /// # Panics
    /// A panic of `f` comes out of this call (or, on a thread already
    /// unwinding, where a second panic would abort the process, is
    /// returned as [`DriverError::Panicked`]); the feed stays
    /// registered, as `f` left it, and its next turn arms and drains it
    /// all the same.
    pub fn with_feed<F: 'static, R>(
        &mut self,
        key: FeedKey<F>,
        f: impl FnOnce(&mut F) -> R,
    ) -> Result<R, DriverError> {
        if !key.is_of(self.shared.serial) {
            return Err(DriverError::NoSuchFeed);
        }
        // The feed's code runs here (a post's upcall, a drop's acks): a
        // handle call it makes is refused, not left waiting for this thread.
        let shared = self.shared.clone();
        let _driving = shared.driving();
        let slot = self.slot_mut(key.id()).ok_or(DriverError::NoSuchFeed)?;
        let ran = catch_unwind(AssertUnwindSafe(|| f(typed(slot.source.as_any_mut()))));
        slot.changed_in_place();
        self.shared.wake();
        match ran {
            Ok(r) => Ok(r),
            // Raised now, a second panic would abort the process.
            Err(p) if std::thread::panicking() => Err(DriverError::Panicked(Panic::new(p))),
            Err(p) => resume_unwind(p),
        }
    }

    /// Apply a [`Command::WithFeed`]: run the call on the feed (it answers
    /// its caller), and let the feed's next turn arm and drain it.
    pub(super) fn run_feed_call(&mut self, id: FeedId, call: FeedCall) {
        // The call catches its closure's panic and answers with it; this
        // catches what is left (the answer's drop, should the caller be
        // gone), so that the driver's thread serves on.
        let mut caught = Caught::default();
        let mut panicked = false;
        match self.slot_mut(id) {
            Some(slot) => {
                caught.run(|| panicked = call(Ok(slot.source.as_any_mut())));
                slot.changed_in_place();
            }
            None => caught.run(|| panicked = call(Err(DriverError::NoSuchFeed))),
        }
        self.stats.handler_panics += caught.count + u64::from(panicked);
    }
}

impl DriverHandle {
    /// Run `f` on the feed registered under `key`, on the driver's thread
    /// between its feeds' turns, and return what it returns (as
    /// [`Driver::with_feed`], whose notes on what is served after and what
    /// `f` must leave as it was hold here too).
    ///
    /// To stop serving one CQ of a shared channel, remove it here
    /// ([`ChannelFeed::remove`](crate::ChannelFeed::remove)). If its feed
    /// drains here (its [`progress`](crate::Feed::progress) reports
    /// `Drained`), drop it here too: its CQ is then destroyed before the
    /// channel feed takes another event, so none of its events comes to the
    /// channel feed unknown. If the EVD is full, return the feed and
    /// drain it where the consumer can make room: do not wait for room
    /// in `f` (a consumer that is waiting for this call would never make
    /// it).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, Driver, FeedMode, FeedStatus, VerbsEvent, WorkCompletion, soft::SoftChannel};
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let running = Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// let handle = running.handle();
    /// let key = handle
    ///     .register_channel(ChannelFeed::new(channel.clone(), poster), FeedMode::Event)
    ///     .unwrap();
    /// let (cq, hca) = channel.create_cq(8).unwrap();
    /// handle.with_feed(key, move |feed| feed.add(cq, CqId(1)).map_err(|e| e.reason())).unwrap().unwrap();
    /// hca.push(WorkCompletion::new(9)).unwrap();
    /// assert!(matches!(consumer.dequeue().unwrap(), VerbsEvent::Completion { cq: CqId(1), .. }));
    /// let left = handle
    ///     .with_feed(key, |feed| {
    ///         let mut removed = feed.remove(CqId(1)).unwrap();
    ///         match removed.progress(usize::MAX).status {
    ///             FeedStatus::Drained => None, // dropped here: its CQ destroyed
    ///             _ => Some(removed),          // the EVD is full: drain it outside
    ///         }
    ///     })
    ///     .unwrap();
    /// assert!(left.is_none());
    /// assert_eq!(hca.stats().unacked_at_destroy, Some(0));
    /// ```
    ///
    /// # Errors
    /// [`DriverError::NoSuchFeed`] if the key names no feed of the driver
    /// (removed, or being removed, or another driver's key);
    /// [`DriverError::OnDriverThread`] on the driver's own thread, inside
    /// its turn (use [`Driver::with_feed`] there; on the thread that calls
    /// [`Driver::process`] this call would wait for itself between its
    /// calls too, as every waiting handle call does); [`DriverError::Stopped`] once the
    /// driver has stopped (`f` is then dropped unrun);
    /// [`DriverError::Panicked`] if `f` panicked (the feed stays registered
    /// as `f` left it, is armed and drained in its next turn, and the driver
    /// serves on; counted in
    /// [`DriverStats::handler_panics`](crate::DriverStats::handler_panics)).
    pub fn with_feed<F, R>(
        &self,
        key: FeedKey<F>,
        f: impl FnOnce(&mut F) -> R + Send + 'static,
    ) -> Result<R, DriverError>
    where
        F: 'static,
        R: Send + 'static,
    {
        if self.shared.on_driver_thread() {
            return Err(DriverError::OnDriverThread);
        }
        if !key.is_of(self.shared.serial) {
            return Err(DriverError::NoSuchFeed);
        }
        let (reply, answer) = mpsc::channel();
        let call: FeedCall = Box::new(move |feed| {
            let answer = feed.and_then(|feed| {
                catch_unwind(AssertUnwindSafe(|| f(typed(feed))))
                    .map_err(|p| DriverError::Panicked(Panic::new(p)))
            });
            let panicked = matches!(answer, Err(DriverError::Panicked(_)));
            let _ = reply.send(answer);
            panicked
        });
        self.shared.send(Command::WithFeed { id: key.id(), call });
        answer.recv().map_err(|_| DriverError::Stopped)?
    }
}

/// The feed under its key's type. The key was made from the feed's own
/// type when it was registered, so the downcast cannot fail.
fn typed<F: 'static>(feed: &mut dyn Any) -> &mut F {
    feed.downcast_mut::<F>()
        .expect("a FeedKey's type is the type of the feed registered under it")
}

impl Slot {
    /// Its feed was changed in place: one asleep on its fd arms and drains
    /// in its next turn (the change may have been a CQ added, unarmed);
    /// one awake does in the turns it has anyway, one blocked when room
    /// comes. One done with its EVD open and not given up (every CQ had
    /// failed) is served again: its next turn says whether a CQ is live now
    /// (done again at once if none is).
    pub(super) fn changed_in_place(&mut self) {
        let revivable = self.phase == Phase::Done && !self.given_up && self.source.evd_open();
        if self.phase == Phase::Sleeping || revivable {
            self.phase = Phase::Arm;
        }
    }
}
