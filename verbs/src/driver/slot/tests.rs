//! How a turn tells the adaptive policy that a spin ended: a probe whose
//! spin the EVD's backpressure, or a panic, cut short must end (not stay
//! on for every later wake), on a scripted source.

use super::*;
use crate::AdaptiveConfig;
use crate::driver::PROBE_EVERY;
use crate::feed::FeedStatus;
use std::task::Poll;

/// A source whose polls answer `poll` (or panic with it `None`); it arms
/// and drains nothing, and its EVD has no room.
struct Scripted {
    poll: Option<Progress>,
}

impl Source for Scripted {
    fn fd(&self) -> Option<RawFd> {
        None
    }
    fn take_events(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn arm_and_drain(&mut self, _budget: usize) -> io::Result<Progress> {
        Ok(Progress {
            delivered: 0,
            status: FeedStatus::Drained,
        })
    }
    fn poll(&mut self, _budget: usize) -> Progress {
        self.poll
            .expect("the poll panics, as a handler run by a post may")
    }
    fn poll_room(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
    fn leave_room_queue(&mut self) {}
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
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
    let room = Arc::new(RoomSignal {
        signalled: AtomicBool::new(false),
        shared: Shared::new().unwrap(),
    });
    Slot {
        source: Box::new(Scripted { poll }),
        generation: 0,
        fd: -1,
        watched_awake: false,
        policy: Some(policy),
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
    let t0 = Instant::now();
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
