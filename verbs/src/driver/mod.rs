//! The driver: one io_uring ring (or, where io_uring is refused, one epoll
//! instance) waits on the completion channels of many feeds and runs each
//! feed's cycle. It runs inside the application's own
//! loop ([`Driver::process`], waiting on the driver's fd) or on a thread of
//! its own ([`Driver::spawn`]).
//!
//! The parts, one concept each:
//! - [`cycle`]: the per-feed cycle as a pure function `next(phase,
//!   observation) -> (phase, action)`, with its whole table tested;
//! - `adaptive`: the adaptive mode's spin policy ([`SpinPolicy`]), which
//!   gives the cycle its spin limits from the arrival process;
//! - `readiness`: the requests (fd polls, cancellations), completions and
//!   waits, whichever backend carries them; `uring`: the io_uring shell;
//!   `epoll`: the epoll shell; `backend`: the one a driver uses
//!   ([`DriverBackend`]: io_uring, epoll where io_uring is refused);
//! - `control`: commands from other threads, [`DriverHandle`];
//!   `running`: the driver on its own thread ([`Driver::spawn`],
//!   [`RunningDriver`], [`Shutdown`]);
//! - `source`: what the driver asks of a feed; `key`: [`FeedKey`] and
//!   [`FeedId`]; `config` and `error`;
//! - `slot`: one registered feed and how a turn runs it (a panic of user
//!   code in the turn is caught there); `registry`: registering and
//!   removing feeds; `device`: the device feeds a registration brings,
//!   removed with the feed that brought them; `completions`: what the
//!   backend reported, handled;
//! - `stats`: [`DriverStats`] and their live publication to other threads;
//!   `polls`: the wake fd's poll, and the thread the polls belong to;
//! - `with_feed`: a registered feed changed in place
//!   ([`Driver::with_feed`], [`DriverHandle::with_feed`]).
//!
//! This file is the shell around them: each turn it applies the commands,
//! reaps the backend's completions, gives every feed with work its turn
//! (the slot performs the cycle's actions) and keeps each sleeping feed's
//! fd poll in the backend (a shared channel's feed's while it is awake
//! too).
//!
//! # No timers
//! A feed stopped by a full EVD takes nothing more out of its CQ and
//! registers with the EVD's room signal ([`evd::RoomWaiter`]); the
//! consumer's dequeue that frees a slot wakes the driver through its wake
//! eventfd. So the driver sleeps in the kernel until a channel fires, a
//! command comes, or room appears; it never wakes on a timer of its own
//! ([`DriverStats::timeouts`] counts only the caller's timeouts), but
//! while a removal or a shutdown waits for the kernel to end a poll's
//! cancellation (those waits are bounded, and not counted).
//!
//! # A feed that fails
//! A feed's verbs call that fails (`req_notify`, `get_cq_event`, a poll
//! refused for its fd: `EBADF`, `EPERM`...) is its failure, not the driver's
//! ([`DriverError::FeedFailed`]): the other feeds get their turns, and a
//! spawned driver serves on. The slot retries the feed once (its next turn
//! arms and drains, as after any failed turn) and gives it up on a failure
//! within [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW) of its last: the feed is armed no more, its
//! CQs are drained, each then delivers a `CqError`, and it gets no turn
//! after that (a [`ChannelFeed`](crate::ChannelFeed)'s member CQ whose arm
//! fails is given up at once, the others go on: see there; a stream
//! feed judges its source's reads by the same window itself). Only the
//! backend's own failure (its ring; no memory; epoll's watch limit) ends a
//! call ([`DriverError::Io`]).

mod adaptive;
mod backend;
mod completions;
mod config;
mod control;
mod cycle;
mod device;
mod epoll;
mod error;
#[cfg(test)]
mod faults;
mod fd;
mod key;
mod polls;
mod readiness;
mod registry;
mod running;
mod slot;
mod source;
mod stats;
mod uring;
mod with_feed;

pub use adaptive::{AdaptiveConfig, PROBE_EVERY, PROBE_EVERY_MAX, SpinPolicy};
pub use config::{DriverBackend, DriverConfig, FeedMode};
pub use control::DriverHandle;
pub use error::{DriverError, Panic};
pub(crate) use error::{DropCaught, DropEach, KeptPanic, drop_each_caught, drop_each_then_raise};
pub use key::{FeedId, FeedKey};
pub use running::{RunningDriver, Shutdown};
pub use stats::DriverStats;

use crate::trace;
use backend::Backend;
use control::Shared;
use cycle::Phase;
#[cfg(test)]
use faults::Faults;
use readiness::{CANCELLATION_WAIT_BOUND, Completion, Request, StepWait, Wait};
use slot::{FailedCall, Slot};
use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one [`Driver::process`] call left behind.
///
/// ```
/// let mut driver = evd_verbs::Driver::new(Default::default()).unwrap();
/// let a = driver.process(Some(std::time::Duration::ZERO)).unwrap();
/// assert!(!a.busy);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Activity {
    /// Some feed has work now (draining, spinning, just unblocked), or a
    /// handle's command is queued: call `process` again without waiting on
    /// the driver's fd.
    pub busy: bool,
}

/// One io_uring ring serving many feeds: it waits on every feed's channel
/// fd (`POLL_ADD`, multishot where the kernel has it) and runs the event or
/// adaptive cycle of the feeds that are ready, `budget` events each per turn.
/// Where the kernel or a sandbox refuses io_uring (seccomp, gVisor,
/// `kernel.io_uring_disabled`), one epoll instance does the waiting instead,
/// behind the same API ([`DriverBackend`]).
/// Run it on its own thread ([`Driver::spawn`]) or from your loop
/// ([`Driver::process`], waiting on the driver's fd: [`AsFd`](std::os::fd::AsFd), [`AsRawFd`](std::os::fd::AsRawFd)).
///
/// ```
/// use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
/// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
/// let (cq, producer) = SoftCq::new(64).unwrap();
/// let mut driver = Driver::new(DriverConfig::default()).unwrap();
/// let key = driver.register(Feed::new(cq, CqId(7), poster), FeedMode::Event).unwrap();
/// let running = driver.spawn().unwrap();
/// producer.push(WorkCompletion::new(1)).unwrap();
/// consumer.wait(1, None).unwrap();
/// assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Completion { cq: CqId(7), .. })));
/// let mut stopped = running.shutdown().unwrap();
/// let _feed: Feed<SoftCq> = stopped.take(key).unwrap();
/// assert_eq!(producer.stats().unacked_at_destroy, None); // CQ handed back, not destroyed
/// ```
pub struct Driver {
    /// The kernel interface: an io_uring ring, or epoll.
    backend: Backend,
    cfg: DriverConfig,
    slots: Vec<Option<Slot>>,
    generations: Vec<u64>,
    shared: Arc<Shared>,
    wake_poll_in_flight: bool,
    /// The thread that asked for the polls in flight (`polls.rs`).
    polls_thread: std::thread::ThreadId,
    /// Round-robin start, so no feed is always served first.
    cursor: usize,
    /// Some feed has work for the next turn.
    busy: bool,
    /// When the last turn's feeds ran: the clock of the busy wait after it.
    turn_at: Instant,
    /// Feeds removed by [`Driver::remove`], not collected yet.
    removed: Vec<(FeedId, Box<dyn Any + Send>)>,
    /// (removed feed, the device feed its removal stopped): that call,
    /// or its retry, returns once the device feed is dropped.
    stopped_device_feeds: Vec<(FeedId, FeedId)>,
    /// Scratch for [`Driver::reap`]: empty between turns, its capacity kept,
    /// so a turn allocates nothing once it has seen the ring's largest batch.
    reaped: Vec<Completion>,
    stats: DriverStats,
    /// The first panic caught in a feed's turn that [`Driver::process`] has
    /// not reported yet.
    caught: Option<Panic>,
    /// The first failed verbs call of a feed ([`DriverError::FeedFailed`])
    /// that [`Driver::process`] has not reported yet.
    failed: Option<DriverError>,
    /// Run by its own thread ([`Driver::spawn`]).
    spawned: bool,
    /// Removing every feed into the `Shutdown` (`device.rs`).
    shutting_down: bool,
    /// Device feeds being removed whose cancellation the backend refused:
    /// asked again every turn (`device.rs`).
    cancels_owed: Vec<FeedId>,
    /// Feeds whose turn just made them done (their EVD closed, or their
    /// source failed), for the device feeds among them (`device.rs`).
    newly_done: Vec<FeedId>,
    /// Faults a unit test plants ([`Faults`]).
    #[cfg(test)]
    faults: Faults,
}

impl Driver {
    /// A driver with its own ring, or its own epoll instance where io_uring
    /// is refused or asked not to be used ([`DriverConfig::backend`]).
    ///
    /// ```
    /// use evd_verbs::{Driver, DriverConfig};
    /// let driver = Driver::new(DriverConfig::default().with_budget(64)).unwrap();
    /// assert_eq!(driver.stats().turns, 0);
    /// ```
    ///
    /// # Errors
    /// [`DriverError::Io`] if the backend or the wake fd could not be set
    /// up (io_uring refused while [`DriverBackend::IoUring`] was asked
    /// for, say).
    pub fn new(cfg: DriverConfig) -> Result<Self, DriverError> {
        let cfg = DriverConfig {
            budget: cfg.budget.max(1),
            ..cfg
        };
        let backend = Backend::open(&cfg)?;
        trace::event!(DEBUG, backend = ?backend.kind(), "driver created");
        let mut driver = Driver {
            backend,
            cfg,
            slots: Vec::new(),
            generations: Vec::new(),
            shared: Shared::new()?,
            wake_poll_in_flight: false,
            polls_thread: std::thread::current().id(),
            cursor: 0,
            busy: false,
            turn_at: Instant::now(),
            removed: Vec::new(),
            stopped_device_feeds: Vec::new(),
            reaped: Vec::new(),
            stats: DriverStats::default(),
            caught: None,
            failed: None,
            spawned: false,
            shutting_down: false,
            cancels_owed: Vec::new(),
            newly_done: Vec::new(),
            #[cfg(test)]
            faults: Default::default(),
        };
        // Polled from the start: a wake before the first `process` shows.
        driver.keep_wake_poll()?;
        driver.backend.flush()?;
        Ok(driver)
    }

    /// A handle for other threads. Its calls that wait for the driver
    /// (`register`, `remove`) are answered by the driver's next `process`
    /// (spawned: by its thread). Made from user code the driver runs (an
    /// upcall, a feed's code or drop, in any of its calls or on its
    /// thread) they are refused with [`DriverError::OnDriverThread`]; but
    /// a driver run from the caller's loop cannot tell that loop's thread
    /// from another between its calls: made there, such a call waits for a
    /// `process` that thread will never make.
    ///
    /// ```
    /// let driver = evd_verbs::Driver::new(Default::default()).unwrap();
    /// let _handle = driver.handle();
    /// ```
    pub fn handle(&self) -> DriverHandle {
        DriverHandle {
            shared: self.shared.clone(),
        }
    }

    /// The backend this driver waits with: [`DriverBackend::IoUring`] or
    /// [`DriverBackend::Epoll`] (never `Auto`: the choice made).
    ///
    /// ```
    /// use evd_verbs::{Driver, DriverBackend};
    /// let driver = Driver::new(Default::default()).unwrap();
    /// assert_ne!(driver.backend(), DriverBackend::Auto);
    /// ```
    pub fn backend(&self) -> DriverBackend {
        self.backend.kind()
    }

    /// The counters, as this driver's own [`process`](Self::process) calls
    /// left them (other threads read them through
    /// [`DriverHandle::stats`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut driver = evd_verbs::Driver::new(Default::default()).unwrap();
    /// driver.process(Some(Duration::ZERO)).unwrap();
    /// let stats = driver.stats();
    /// assert!(stats.turns >= 1);
    /// assert_eq!(stats.handler_panics, 0);
    /// ```
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// One call: apply commands, handle the ring's completions and give every
    /// feed that has work its turn. If that found nothing to do and no feed
    /// is busy, wait up to `timeout` (`None`: until something happens) and
    /// handle what the wait brought, within the same call.
    ///
    /// Driving the ring from your own loop:
    ///
    /// ```
    /// use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, WorkCompletion, VerbsEvent, soft::SoftCq};
    /// use std::time::Duration;
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let (cq, hca) = SoftCq::new(16).unwrap();
    /// let mut driver = Driver::new(DriverConfig::default()).unwrap();
    /// driver.register(Feed::new(cq, CqId(0), poster), FeedMode::Event).unwrap();
    /// driver.process(Some(Duration::ZERO)).unwrap(); // arms the CQ, queues the channel poll
    /// hca.push(WorkCompletion::default()).unwrap();
    /// // Your loop would wait on the driver's fd (epoll, poll) here.
    /// while consumer.query().len == 0 {
    ///     driver.process(None).unwrap(); // sleeps until the channel fires
    /// }
    /// assert!(consumer.try_dequeue().is_ok());
    /// ```
    ///
    /// # Errors
    /// [`DriverError::Io`] if the ring failed (a refused request for a
    /// feed's fd fails the call once every feed had its turn; a completion
    /// the ring reports as failed, not for its fd, fails it before the
    /// feeds' turns; either way nothing is lost, the driver's fd is left
    /// readable, and the next call asks again). [`DriverError::Panicked`] if
    /// user code panicked in a feed's turn (see Panics), else
    /// [`DriverError::FeedFailed`] if a feed's verbs call failed (retried,
    /// or the feed given up: see there): either way the call still
    /// completed, every other feed had its turn, and the driver is intact;
    /// the first such failure of the call is returned, the others are
    /// counted ([`DriverStats::handler_panics`],
    /// [`DriverStats::feed_failures`]). Call `process` again: where the
    /// failure left a feed with work, the driver's fd is readable, as the
    /// [`Activity`] this error stands in for would have said.
    ///
    /// # Panics
    /// Not because of a handler. A feed's turn runs user code: the upcall
    /// handler of its EVD (a post runs it), its event type's `From` and
    /// `Drop`, a completion queue's own code. A panic there is caught at the
    /// end of that feed's turn and counted ([`DriverStats::handler_panics`]);
    /// the other feeds get their turns, and the call ends as usual, then
    /// returns the first panic it caught as [`DriverError::Panicked`] (the
    /// others are counted only). Call `process` again to serve on: every
    /// feed is still served, the one whose turn panicked too. Its next turn
    /// arms and drains it (as after a failed verbs call). Nothing it took
    /// from its CQ is lost: the events of the post that ran the handler are
    /// in the EVD (the handler had the one it panicked on; the core's
    /// upcalls give the rest to the next instance, and the EVD stays
    /// usable), and events not posted yet stay held by the feed; but a
    /// completion whose `From` panicked is lost (there is no event for it;
    /// [`FeedStats::from_panics`](crate::FeedStats::from_panics)). One
    /// limit: the feed's own counters miss the batch whose post panicked.
    pub fn process(&mut self, timeout: Option<Duration>) -> Result<Activity, DriverError> {
        let r = self.process_unpublished(timeout);
        self.shared.stats.publish(&self.stats);
        r
    }

    /// [`Driver::process`] but the counters' publication, left to the
    /// caller (a spawned driver keeps a panic first: `driver/stats.rs`).
    fn process_unpublished(&mut self, timeout: Option<Duration>) -> Result<Activity, DriverError> {
        let activity = match self.step(StepWait::Caller(timeout)) {
            Ok(activity) => activity,
            Err(e) => {
                self.show_work_left_by_a_failure();
                return Err(e);
            }
        };
        let failed = self.failed.take();
        let reported = match (self.caught.take(), failed) {
            (Some(p), _) => DriverError::Panicked(p),
            (None, Some(e)) => e,
            (None, None) => return Ok(activity),
        };
        if activity.busy {
            // The error stands in for the `Activity` that would have said
            // so: a caller that waits on the driver's fd next must wake for
            // the feed the failure left with work (in Arm, its CQ unarmed:
            // no channel event will come for it).
            self.shared.wake();
        }
        Err(reported)
    }

    /// [`Driver::process`] without reporting a caught panic or a feed's
    /// failure (they stay in `caught` and `failed` for the next `process`)
    /// or publishing the counters: the loops of a removal and of a
    /// shutdown, which must not stop half-way. Only the caller's timeout
    /// ([`StepWait::Caller`]) counts in [`DriverStats::timeouts`].
    fn step(&mut self, timeout: StepWait) -> Result<Activity, DriverError> {
        let (timeout, callers) = match timeout {
            StepWait::Caller(t) => (t, true),
            StepWait::Bounded => (Some(CANCELLATION_WAIT_BOUND), false),
        };
        let shared = self.shared.clone();
        let _driving = shared.driving();
        self.own_the_polls();
        self.keep_wake_poll()?;
        let handled = self.turn()?;
        let wait = match timeout {
            // What was ready has been handled: report back instead of waiting,
            // so the caller sees those events before this call sleeps.
            _ if handled || self.busy || self.shared.commands_pending() => Wait::Busy,
            Some(d) if d.is_zero() => Wait::Check,
            Some(d) => Wait::For(d.min(readiness::LONGEST_WAIT)),
            None => Wait::Forever,
        };
        let blocks = matches!(wait, Wait::For(_) | Wait::Forever);
        if blocks {
            self.stats.waits += 1;
        }
        if self.backend.submit_and_wait(wait, self.turn_at)? && callers {
            self.stats.timeouts += 1;
        }
        if blocks || (wait == Wait::Check && self.backend.collected()) {
            self.turn()?;
        }
        // The caller may now wait on the ring's fd: the wake poll (which the
        // last turn may have seen end) and the fd polls that turn asked for
        // must be in the kernel before it does.
        self.keep_wake_poll()?;
        self.backend.flush()?;
        // Readiness a busy wait collected (epoll's, every few busy turns)
        // no longer shows on the driver's fd: the next call must handle it
        // without waiting on the fd first.
        Ok(Activity {
            busy: self.busy || self.backend.collected() || self.shared.commands_pending(),
        })
    }

    /// Commands, completions, feeds, poll requests. Returns whether there
    /// was anything to handle (a command, a ring completion, or a feed that
    /// delivered).
    fn turn(&mut self) -> Result<bool, DriverError> {
        if !self.cancels_owed.is_empty() {
            self.cancel_owed_polls();
        }
        let commands = self.apply_commands()?;
        let completions = self.reap()?;
        let delivered = self.run_feeds()?;
        if !self.newly_done.is_empty() {
            self.release_closed_device_feeds();
        }
        Ok(commands || completions || delivered)
    }

    /// Give every feed its turn; returns whether any delivered.
    fn run_feeds(&mut self) -> Result<bool, DriverError> {
        self.stats.turns += 1;
        let n = self.slots.len();
        let now = Instant::now();
        self.turn_at = now;
        let budget = self.cfg.budget;
        let mut busy = false;
        let mut delivered = false;
        let mut backend_failed = None;
        for k in 0..n {
            // A stop asked from a feed's upcall (a spawned driver's
            // shutdown) serves no later feed.
            if self.shared.stop_requested() {
                break;
            }
            let index = (self.cursor + k) % n;
            let Some(slot) = self.slots[index].as_mut() else {
                continue;
            };
            if slot.removing.is_some() {
                continue;
            }
            let id = FeedId {
                index: index as u32,
                generation: slot.generation,
            };
            let was_done = slot.phase == Phase::Done;
            match slot.turn(id, now, budget, &mut self.stats) {
                Ok(n) => delivered |= n > 0,
                // Caught in the feed's turn (which counted it): the feed is
                // back in Arm, and the other feeds get their turns.
                Err(DriverError::Panicked(p)) => {
                    delivered = true;
                    if self.caught.is_none() {
                        self.caught = Some(p);
                    }
                }
                // The feed's own verbs call (the slot counted it and chose
                // between a retry and giving it up): the other feeds get
                // their turns.
                Err(e) => {
                    delivered = true;
                    self.failed.get_or_insert(e);
                }
            }
            if slot.poll_spent {
                // Its end (`ECANCELED`) clears `poll_in_flight`; the feed's
                // next poll of its fd (when it sleeps, or at once for a
                // feed watched awake) asks for readiness afresh, and a
                // channel that stays readable is reported again. Cleared
                // once the cancel is in: a refused one (the backend's
                // failure, reported once every feed had its turn) is asked
                // again by the next turn.
                let cancel = match slot.poll_in_flight {
                    true => self.backend.cancel(id),
                    false => Ok(()),
                };
                match cancel {
                    Ok(()) => slot.poll_spent = false,
                    Err(error) => {
                        backend_failed.get_or_insert(error);
                    }
                }
            }
            // Asleep, and for a shared channel's feed awake too: draining
            // or blocked on a full EVD by a busy CQ, it learns which of its
            // quiet CQs have completions and serves them in its turn order,
            // not after the busy CQ's whole backlog.
            if slot.wants_fd_poll() && !slot.poll_in_flight {
                let checked = match slot.fd_checked {
                    true => Ok(true),
                    false => self.backend.check_pollable(slot.fd),
                };
                slot.fd_checked = matches!(checked, Ok(true));
                let asked = checked.and_then(|_| {
                    #[cfg(test)]
                    self.faults.fd_poll()?;
                    self.backend.poll(slot.fd, Request::FeedPoll(id))
                });
                match asked {
                    // Set once the request is in: a refused one leaves no
                    // poll for a removal's cancellation to wait for.
                    Ok(()) => slot.poll_in_flight = true,
                    // Refused for this fd (epoll_ctl's EPERM, EBADF): the
                    // feed's failure, as a failed poll is.
                    Err(error) if readiness::refuses_the_fd(&error) => {
                        let failed = slot.fail(id, FailedCall::FdPoll, error, now, &mut self.stats);
                        self.failed.get_or_insert(failed);
                    }
                    // The backend's own (out of memory, epoll's watch
                    // limit, the ring's queue): not the feed's doing. The
                    // call fails, but only once every feed had its turn
                    // (one the failure stopped would keep readiness it
                    // reaped unserved, and the next turn start at the same
                    // feed, failing first again); this one asks again.
                    Err(error) => {
                        backend_failed.get_or_insert(error);
                    }
                }
            }
            if !was_done && slot.phase == Phase::Done {
                self.newly_done.push(id);
            }
            busy |= slot.is_busy();
        }
        self.cursor = self.cursor.wrapping_add(1);
        self.busy = busy;
        match backend_failed {
            Some(error) => Err(DriverError::Io(error)),
            None => Ok(delivered),
        }
    }
}

/// A driver that goes (dropped by its owner, or at the end of its thread,
/// however that ends) refuses every command queued or sent after it with
/// [`DriverError::Stopped`]: a handle's caller never waits for an answer
/// nobody will give. The feeds it still holds (registered, or removed and
/// not collected) go with it one at a time, each under its own catch: their
/// drops run their own code (acks, a CQ's destroy, a held event's `Drop`),
/// and a second panic while a first unwinds would abort the process.
impl Drop for Driver {
    fn drop(&mut self) {
        let mut caught = self.shared.close_commands();
        caught.drop_each(self.slots.drain(..).flatten().map(|s| s.source));
        caught.drop_each(std::mem::take(&mut self.removed));
        if self.spawned {
            // At the end of the driver's thread: kept for `take_panic`, but
            // at a shutdown counted only (as in `apply_commands`).
            if caught.count == 0 {
                return;
            }
            self.stats.handler_panics += caught.count;
            match caught.first.take() {
                Some(panic) if !self.shared.stop_requested() => self.shared.keep_panic(panic),
                _ => {}
            }
            self.shared.stats.publish(&self.stats);
        } else if !std::thread::panicking() {
            // The caller's own driver: the first panic is theirs, raised
            // here (not during an unwinding, which would abort the process).
            caught.raise();
        }
    }
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("backend", &self.backend())
            .field("cfg", &self.cfg)
            .field("feeds", &self.slots.iter().flatten().count())
            .field("busy", &self.busy)
            .field("stats", &self.stats)
            .finish()
    }
}
