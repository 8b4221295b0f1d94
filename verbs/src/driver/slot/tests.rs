//! How a turn tells the adaptive policy that a spin ended: a probe whose
//! spin the EVD's backpressure, or a panic, cut short must end (not stay
//! on for every later wake), on a scripted source.

use super::*;
use crate::AdaptiveConfig;
use crate::driver::PROBE_EVERY;
use crate::feed::FeedStatus;
use std::task::Poll;
use std::time::Duration;

/// A source whose polls answer `first_polls` in order, then `poll` (or
/// panic with it `None`); whose first `take_events_fails` channel reads
/// fail; it arms and drains nothing, and its EVD has no room.
struct Scripted {
    first_polls: std::collections::VecDeque<Progress>,
    poll: Option<Progress>,
    take_events_fails: u32,
}

impl Scripted {
    fn answering(poll: Option<Progress>) -> Scripted {
        Scripted {
            first_polls: Default::default(),
            poll,
            take_events_fails: 0,
        }
    }
}

impl Source for Scripted {
    fn fd(&self) -> Option<RawFd> {
        None
    }
    fn take_events(&mut self) -> io::Result<()> {
        if self.take_events_fails > 0 {
            self.take_events_fails -= 1;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
    fn arm_and_drain(&mut self, _budget: usize) -> io::Result<Progress> {
        Ok(Progress {
            delivered: 0,
            status: FeedStatus::Drained,
        })
    }
    fn poll(&mut self, _budget: usize) -> Progress {
        match self.first_polls.pop_front() {
            Some(p) => p,
            None => self
                .poll
                .expect("the poll panics, as a handler run by a post may"),
        }
    }
    fn poll_room(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
    fn leave_room_queue(&mut self) {}
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A sleeping adaptive slot whose policy no longer spins (its spins
/// missed), its probes' interval started at `t0`: a wake at
/// [`probe_due`] probes.
fn sleeping_slot_with_spinning_off(poll: Option<Progress>, t0: Instant) -> Slot {
    let mut policy = SpinPolicy::new(AdaptiveConfig::default());
    for _ in 0..4 {
        policy.expired();
    }
    policy.woken(t0);
    assert_eq!(policy.limits(), Limits::EVENT);
    sleeping_slot(Scripted::answering(poll), Some(policy))
}

/// A sleeping slot serving `source` with `policy` (`None`: event mode).
fn sleeping_slot(source: Scripted, policy: Option<SpinPolicy>) -> Slot {
    let room = Arc::new(RoomSignal {
        signalled: AtomicBool::new(false),
        shared: Shared::new().unwrap(),
    });
    Slot {
        source: Box::new(source),
        generation: 0,
        fd: -1,
        watched_awake: false,
        policy,
        phase: Phase::Sleeping,
        poll_in_flight: false,
        fd_checked: true,
        poll_spent: false,
        fd_fired: false,
        room_waker: Waker::from(room.clone()),
        room,
        room_ready: false,
        seated: false,
        removing: None,
        last_failure: None,
        given_up: false,
        device_feed: None,
    }
}

fn probe_due(t0: Instant) -> Instant {
    t0 + AdaptiveConfig::default().max_spin * PROBE_EVERY
}

const ID: FeedId = FeedId {
    index: 0,
    generation: 0,
};

/// The slot's fd fired: its turn at `now`.
fn woken_turn(slot: &mut Slot, now: Instant) -> Result<usize, DriverError> {
    slot.fd_fired = true;
    slot.turn(ID, now, 16, &mut DriverStats::default())
}

#[test]
fn a_probe_whose_spin_meets_a_full_evd_ends() {
    probe_cut_short_by(Some(Progress {
        delivered: 0,
        status: FeedStatus::Backpressure,
    }));
}

#[test]
fn a_probe_whose_turn_panics_ends() {
    probe_cut_short_by(None);
}

fn probe_cut_short_by(poll: Option<Progress>) {
    // An adaptive turn reads the clock itself: the probe is due by now.
    let interval = probe_due(Instant::now()) - Instant::now();
    let t0 = Instant::now().checked_sub(interval).unwrap();
    let mut slot = sleeping_slot_with_spinning_off(poll, t0);
    let t1 = probe_due(t0);
    let turned = catch_unwind(AssertUnwindSafe(|| woken_turn(&mut slot, t1)));
    match poll {
        Some(_) => {
            assert!(matches!(turned, Ok(Ok(0))));
            assert_eq!(
                slot.phase,
                Phase::Blocked,
                "the probe's poll met a full EVD"
            );
        }
        None => {
            assert!(matches!(turned, Ok(Err(DriverError::Panicked(_)))));
            assert_eq!(
                slot.phase,
                Phase::Arm,
                "the panicked turn restarts the feed"
            );
        }
    }
    assert_eq!(
        slot.limits(),
        Limits::EVENT,
        "the probe ended: later wakes do not spin the longest window"
    );
}

/// An adaptive feed's spin is timed by its own polls, not by when the
/// driver's turn began: beside feeds whose turns take longer than its
/// window (here the turn's reading is 20 s stale the first time, fresh the
/// next), a spin whose last poll found completions a moment ago goes on.
#[test]
fn a_spin_is_timed_by_its_polls_not_by_the_turns_start() {
    let window = Duration::from_secs(10);
    let cfg = AdaptiveConfig::default()
        .with_max_spin(window)
        .with_initial_spin(window);
    let found = Progress {
        delivered: 1,
        status: FeedStatus::Drained,
    };
    let empty = Progress {
        delivered: 0,
        status: FeedStatus::Drained,
    };
    let source = Scripted {
        first_polls: [found].into(),
        ..Scripted::answering(Some(empty))
    };
    let mut slot = sleeping_slot(source, Some(SpinPolicy::new(cfg)));
    let mut stats = DriverStats::default();
    // Last in a round whose other feeds took 20 s: the wake's poll finds.
    let stale = Instant::now().checked_sub(2 * window).unwrap();
    slot.fd_fired = true;
    assert_eq!(slot.turn(ID, stale, 16, &mut stats).unwrap(), 1);
    assert!(
        matches!(slot.phase, Phase::Polling { .. }),
        "{:?}",
        slot.phase
    );
    // First in the next round: the poll finds nothing, a moment after the
    // find.
    assert_eq!(slot.turn(ID, Instant::now(), 16, &mut stats).unwrap(), 0);
    assert!(
        matches!(slot.phase, Phase::Polling { .. }),
        "the spin ended: {:?}",
        slot.phase
    );
    assert_eq!(stats.spin_misses, 0);
}

/// A room signal is counted once, however its turn ends: one whose turn
/// failed reading the channel (before the signal was taken) is counted
/// by the turn that takes it, not by both.
#[test]
fn a_room_signal_is_counted_once_when_its_turn_fails() {
    let source = Scripted {
        take_events_fails: 1,
        ..Scripted::answering(Some(Progress {
            delivered: 0,
            status: FeedStatus::Drained,
        }))
    };
    let mut slot = sleeping_slot(source, None);
    slot.phase = Phase::Blocked;
    let mut stats = DriverStats::default();
    slot.room.signalled.store(true, Ordering::Relaxed);
    slot.fd_fired = true;
    let failed = slot.turn(ID, Instant::now(), 16, &mut stats);
    assert!(
        matches!(failed, Err(DriverError::FeedFailed { .. })),
        "{failed:?}"
    );
    slot.turn(ID, Instant::now(), 16, &mut stats).unwrap();
    assert!(!slot.room.signalled.load(Ordering::Relaxed));
    assert_eq!(stats.room_wakes, 1);
}
