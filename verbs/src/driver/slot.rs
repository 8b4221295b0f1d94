//! One registered feed as the driver holds it: its source, its place in
//! the cycle, its adaptive policy, its fd poll and its room signal; and
//! how one turn runs it.

use super::control::Shared;
use super::cycle::{self, Action, Limits, Observation, Phase, SpinOutcome};
use super::source::Source;
use super::{DriverError, DriverStats, FeedId, Panic, SpinPolicy};
#[cfg(doc)]
use crate::feed::FEED_RETRY_WINDOW;
use crate::feed::{Progress, fails_again};
use crate::source::PollError;
use std::any::Any;
use std::io;
use std::os::fd::RawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Wake, Waker};
use std::time::Instant;

/// A feed's room signal: the waker its EVD's room queue holds.
pub(super) struct RoomSignal {
    pub(super) signalled: AtomicBool,
    pub(super) shared: Arc<Shared>,
}

impl Wake for RoomSignal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // Release pairs with the driver's Acquire swap: the consumer's head
        // store that freed the slot is visible to the feed's next look.
        self.signalled.store(true, Ordering::Release);
        self.shared.wake();
    }
}

/// Who waits for a feed being removed.
pub(super) enum Removal {
    /// [`Driver::remove`](crate::Driver::remove), on this thread.
    Local,
    /// [`DriverHandle::remove`](crate::DriverHandle::remove), on another.
    Reply(mpsc::Sender<Result<Box<dyn Any + Send>, DriverError>>),
    /// Nobody: a device feed whose parent was removed, dropped when its
    /// poll ends (`driver/device.rs`).
    Drop,
}

pub(super) struct Slot {
    pub(super) source: Box<dyn Source>,
    pub(super) generation: u64,
    /// The fd the driver polls, asked of the source once, at insert (its
    /// own code is not run again outside a turn).
    pub(super) fd: RawFd,
    /// Its fd is polled while it is awake too, asked of the source once,
    /// at insert ([`Source::watched_awake`]).
    pub(super) watched_awake: bool,
    /// `None`: event mode.
    pub(super) policy: Option<SpinPolicy>,
    pub(super) phase: Phase,
    /// A poll request for the fd is in the kernel.
    pub(super) poll_in_flight: bool,
    /// The backend has checked that the fd can be polled
    /// ([`Backend::check_pollable`](super::backend::Backend::check_pollable)).
    pub(super) fd_checked: bool,
    /// A failed `get_event` (or a turn that panicked after the fd fired)
    /// left the fd's readiness untaken: a multishot poll in flight reports
    /// only new wake-ups, so it is to be cancelled and the next poll of the
    /// fd asks afresh (as epoll's one-shot poll does).
    pub(super) poll_spent: bool,
    /// The fd fired and its events were not taken yet.
    pub(super) fd_fired: bool,
    pub(super) room: Arc<RoomSignal>,
    pub(super) room_waker: Waker,
    /// The room was there when the feed registered for it.
    pub(super) room_ready: bool,
    /// The feed holds a place in its EVD's room queue (its last
    /// `poll_room` answered `Pending`). Only a Blocked feed may: a place
    /// kept by a feed that polls the room no more would take the wake of a
    /// freed slot and pass it on to nobody, leaving the posters behind it
    /// asleep beside that slot ([`Slot::leave_room_queue_unless_blocked`]).
    pub(super) seated: bool,
    /// Being removed: waiting for the in-flight poll to end.
    pub(super) removing: Option<Removal>,
    /// When a verbs call of the feed last failed ([`Slot::fail`]).
    pub(super) last_failure: Option<Instant>,
    /// Given up: its calls failed twice within [`FEED_RETRY_WINDOW`].
    pub(super) given_up: bool,
    /// The feed of its device's async events its registration brought
    /// (`driver/device.rs`): removed with it.
    pub(super) device_feed: Option<FeedId>,
}

/// Which of a feed's verbs calls failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FailedCall {
    /// `get_cq_event` (the source's `take_events`).
    GetEvent,
    /// `req_notify` (in the source's `arm_and_drain`).
    Arm,
    /// The backend's poll of the feed's fd.
    FdPoll,
}

impl Slot {
    pub(super) fn limits(&self) -> Limits {
        self.policy.map_or(Limits::EVENT, |p| p.limits())
    }

    /// One turn: take a fired fd's events, then run the cycle's actions (at
    /// most one that delivers, plus the arm ending a spin or a wake's poll
    /// that found nothing). Returns how many events it delivered.
    ///
    /// If taking the events or an action fails, the feed goes back to Arm
    /// (unless it is done) and forgets its arms: the failure may have left
    /// its CQ unarmed with the channel's event consumed, or not got (a
    /// `get_event` that failed or panicked: the arm that event reports is
    /// used up, and io_uring's multishot poll reports only the next wake-up
    /// of the fd), so the retry must arm and drain, never sleep. Arming an
    /// armed CQ again is harmless; the events not got are taken at the
    /// fd's next report, which a fresh poll of the fd makes sure of (the
    /// turn's fd poll is cancelled and asked again, `poll_spent`): the new
    /// arm alone would not, where its sequence number only getting an
    /// event advances (mlx4, mlx5, hns: it is ignored). A failed verbs call is
    /// returned as [`DriverError::FeedFailed`] ([`Slot::fail`]: retried, or
    /// the feed given up).
    ///
    /// A panic of user code in the turn (the EVD's upcall handler run by a
    /// post, the event type's `From` or `Drop`, the CQ's own code) is caught
    /// here, counted in `stats`, and returned as [`DriverError::Panicked`]:
    /// a failure like the others, so the feed goes back to Arm (it is not a
    /// verbs failure: it never gives the feed up).
    pub(super) fn turn(
        &mut self,
        id: FeedId,
        now: Instant,
        budget: usize,
        stats: &mut DriverStats,
    ) -> Result<usize, DriverError> {
        // AssertUnwindSafe: what the unwind may leave half-updated is
        // - `self.phase`: written only at the end of `run_cycle`, so it still
        //   holds the phase the turn started in; it is reset to Arm below;
        // - the feed (`self.source`): a feed's fields are consistent at each
        //   point where it runs user code (a post publishes and drains its
        //   batch from `held` before it runs the handler; the events not yet
        //   posted stay in `held`, in order), and Arm re-arms and drains it,
        //   which is right from any state the turn can leave it in;
        // - `stats`: plain counters, each a valid count of what did happen;
        // - the adaptive policy and the room signal: no user code runs
        //   inside their updates, so no unwind leaves one half done.
        let fired = self.fd_fired;
        let r = match catch_unwind(AssertUnwindSafe(|| self.run_cycle(now, budget, stats))) {
            Ok(Ok(n)) => Ok(n),
            Ok(Err((call, error))) => return Err(self.fail(id, call, error, now, stats)),
            Err(payload) => {
                stats.handler_panics += 1;
                // The panic may have come before the channel's event was
                // got: a multishot poll would not report that event again,
                // and an arm whose sequence number only getting it advances
                // (mlx4, mlx5, hns) is ignored until it is got. The fd is
                // polled afresh, as after a failed `get_event`.
                self.poll_spent |= fired;
                let panic = Panic::new(payload);
                crate::trace::event!(
                    ERROR,
                    payload = panic.message(),
                    "a feed's turn panicked (a handler, most likely); caught, the driver serves on"
                );
                Err(DriverError::Panicked(panic))
            }
        };
        if r.is_err() && self.phase != Phase::Done {
            self.restart();
        }
        self.leave_room_queue_unless_blocked();
        r
    }

    /// After a failed or panicked turn: back to Arm, the arms forgotten (see
    /// [`Slot::turn`]), and a spin the turn was in ends undecided (a probe
    /// among them would otherwise stay on, and later wakes spin the longest
    /// window).
    fn restart(&mut self) {
        self.phase = Phase::Arm;
        self.source.forget_arm();
        if let Some(policy) = &mut self.policy {
            policy.spin_abandoned();
        }
    }

    /// Being removed, it waits only for its fd poll to end and takes no
    /// more turns: its place in the room queue goes now, not at the hand
    /// back, or a slot freed meanwhile would wait for that.
    pub(super) fn start_removal(&mut self, who: Removal) {
        self.removing = Some(who);
        self.seated = false;
        self.source.leave_room_queue();
    }

    /// A feed that is not Blocked (its turn failed, or found room another
    /// way than through its place in the queue) gives that place up,
    /// passing on a wake it was given: the queue's promise is one wake per
    /// freed slot, and only a waiter that polls again or leaves hands one
    /// on.
    fn leave_room_queue_unless_blocked(&mut self) {
        if self.seated && self.phase != Phase::Blocked {
            self.seated = false;
            self.source.leave_room_queue();
        }
    }

    /// A verbs call of the feed failed (`call`, with `error`) at `now`:
    /// count it, and retry the feed (back to Arm, its arms forgotten, as
    /// after any failed turn) unless its last failure was within
    /// [`FEED_RETRY_WINDOW`]: then give it up (its CQs drained, then failed
    /// with a `CqError` each; a stream feed's source drained, then a
    /// `SourceFailed` event). Returns the failure as the driver reports it.
    pub(super) fn fail(
        &mut self,
        id: FeedId,
        call: FailedCall,
        error: io::Error,
        now: Instant,
        stats: &mut DriverStats,
    ) -> DriverError {
        stats.feed_failures += 1;
        self.poll_spent |= call == FailedCall::GetEvent;
        let again = fails_again(self.last_failure, now);
        self.last_failure = Some(now);
        // A feed that is done (its EVD closed, or its CQ failed) is served
        // no more already: nothing to retry or give up.
        let live = self.phase != Phase::Done && !self.given_up;
        let given_up = again && live;
        if live {
            self.restart();
            if given_up {
                self.given_up = true;
                stats.feeds_given_up += 1;
                let errno = error.raw_os_error().unwrap_or(0);
                let why = match call {
                    FailedCall::Arm => PollError::ArmFailed(errno),
                    FailedCall::GetEvent | FailedCall::FdPoll => PollError::ChannelFailed(errno),
                };
                if !self.source.give_up(why) {
                    self.phase = Phase::Done;
                }
            }
        }
        self.leave_room_queue_unless_blocked();
        crate::trace::event!(
            ERROR,
            feed = ?id,
            call = ?call,
            error = %error,
            given_up,
            "a feed's verbs call failed; the driver serves on"
        );
        DriverError::FeedFailed {
            feed: id,
            error,
            given_up,
        }
    }

    pub(super) fn run_cycle(
        &mut self,
        now: Instant,
        budget: usize,
        stats: &mut DriverStats,
    ) -> Result<usize, (FailedCall, io::Error)> {
        // An adaptive feed's spin is timed by its own polls: the turn's
        // reading, taken before every feed's turn, is late by the turns of
        // the feeds before this one, so a spin beside a slow feed would end
        // before its window. It reads the clock where a reading is used:
        // at a wake (which may start a spin) and after a run that polled in
        // a spin or found completions (`spin_clock_read_after`). Event-mode
        // feeds keep the turn's reading (they time nothing).
        let adaptive = self.policy.is_some();
        let fd_fired = std::mem::take(&mut self.fd_fired);
        let mut now = match adaptive && fd_fired && self.phase == Phase::Sleeping {
            true => Instant::now(),
            false => now,
        };
        if fd_fired && self.takes_events() {
            self.source
                .take_events()
                .map_err(|e| (FailedCall::GetEvent, e))?;
            if self.phase == Phase::Sleeping {
                if let Some(p) = &mut self.policy {
                    p.woken(now);
                }
            }
        }
        // Acquire: see `RoomSignal::wake_by_ref`. Counted here, where it
        // is taken: once per signal, whatever ends the turn.
        let signalled = self.room.signalled.swap(false, Ordering::Acquire);
        stats.room_wakes += u64::from(signalled);
        let mut room = std::mem::take(&mut self.room_ready);
        if signalled && self.phase == Phase::Blocked {
            // Look again through the room queue, not around it: `Ready`
            // leaves the queue (passing the wake on, so a poster waiting
            // behind this feed is not stranded if the feed posts nothing);
            // `Pending` rejoins at the front.
            let mut cx = Context::from_waker(&self.room_waker);
            let ready = self.source.poll_room(&mut cx).is_ready();
            self.seated = !ready;
            room |= ready;
        }
        let limits = self.limits();
        if fd_fired && self.phase == Phase::Sleeping && self.policy.is_some() && !limits.spin() {
            stats.unspun_wakes += 1;
        }
        let (mut phase, mut action) = cycle::next(
            self.phase,
            Observation::Turn { fd_fired, room },
            now,
            limits,
        );
        let mut delivered = 0;
        loop {
            let progress = match action {
                Action::Idle => break,
                Action::WaitForRoom => {
                    let mut cx = Context::from_waker(&self.room_waker);
                    let ready = self.source.poll_room(&mut cx).is_ready();
                    self.seated = !ready;
                    self.room_ready |= ready;
                    break;
                }
                Action::ArmAndDrain => self
                    .source
                    .arm_and_drain(budget)
                    .map_err(|e| (FailedCall::Arm, e))?,
                Action::Poll => self.source.poll(budget),
            };
            delivered += progress.delivered;
            if adaptive && spin_clock_read_after(phase, progress) {
                now = Instant::now();
            }
            let ran_in = phase;
            (phase, action) = cycle::next(phase, Observation::Ran(progress), now, limits);
            self.observe(ran_in, phase, progress, now, stats);
        }
        self.phase = phase;
        Ok(delivered)
    }

    /// Feed the adaptive policy what a run in phase `ran_in` found, and
    /// where it led ([`cycle::spin_outcome`]).
    pub(super) fn observe(
        &mut self,
        ran_in: Phase,
        led_to: Phase,
        p: Progress,
        now: Instant,
        stats: &mut DriverStats,
    ) {
        let Some(policy) = &mut self.policy else {
            return;
        };
        match cycle::spin_outcome(ran_in, led_to, p) {
            SpinOutcome::Catch { empty_polls } => {
                stats.spin_catches += 1;
                policy.found(now, empty_polls)
            }
            SpinOutcome::Miss => {
                stats.spin_misses += 1;
                policy.expired()
            }
            SpinOutcome::Abandoned => policy.spin_abandoned(),
            SpinOutcome::Seen => policy.seen(now),
            SpinOutcome::Nothing => {}
        }
    }

    /// It takes its channel events, whatever its phase: a feed given up
    /// (the call fails) or done (nothing more to serve) takes none.
    pub(super) fn takes_events(&self) -> bool {
        !self.given_up && self.phase != Phase::Done
    }

    /// Its fd is to be polled now: asleep, or awake and watched then too
    /// ([`Source::watched_awake`]), and taking events.
    pub(super) fn wants_fd_poll(&self) -> bool {
        self.takes_events() && (self.phase == Phase::Sleeping || self.watched_awake)
    }

    pub(super) fn is_busy(&self) -> bool {
        self.phase.is_busy() || self.room_ready
    }
}

/// Whether an adaptive feed's policy or phase reads the time of a run in
/// `ran_in` that returned `p`: a spin's poll (a find restarts its clock, an
/// empty one is judged by it), and any find (a catch, or completions seen
/// outside a spin, restart the policy's clock). Other runs' times are not
/// read: no clock reading is taken for them.
fn spin_clock_read_after(ran_in: Phase, p: Progress) -> bool {
    matches!(ran_in, Phase::Polling { .. }) || p.delivered > 0
}

#[cfg(test)]
mod tests;
