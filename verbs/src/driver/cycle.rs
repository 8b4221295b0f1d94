//! The per-feed cycle as a pure function: [`next`] maps where a feed is
//! ([`Phase`]) and what the driver just saw ([`Observation`]) to where it
//! goes and what the driver does to it next ([`Action`]). The driver's shell
//! (`driver/mod.rs`) performs the actions on the feed and the ring; every
//! decision is made here, and the tests below walk the whole table.
//!
//! # The cycle
//!
//! ```text
//!            +---- fd fired, no spin ----> Woken --(found: next turn)--+
//!            |                               |  (nothing: at once)     |
//!            |                               v                         v
//!   Sleeping ---- fd fired, spin worth it ---> Polling --(T without a completion)--> Arm
//!      ^                                       |  ^  (found: stay)                    |
//!      +------------- drained ----- Arm/Draining <----------------------------------+
//!                                   |  budget: Draining
//!  any delivering phase -- EVD full --> Blocked -- room signal --> Arm
//!  any delivering phase -- EVD closed or CQ failed --> Done
//! ```
//!
//! - **Woken** (the event cycle's wake): poll what the wake announced and
//!   deliver it *before* re-arming, as a raw verbs loop does: the arm (a
//!   system call on most providers) then runs in the feed's next turn, after
//!   the caller has had the events, instead of between the completion and
//!   its delivery. A poll that uses up the budget polls on next turn, still
//!   unarmed (an arm now would be a system call for a CQ still being read);
//!   one that finds nothing (a spurious wake) arms in the same turn. The arm
//!   is followed by a drain as always, so a completion that lands between
//!   the poll and the arm is not missed.
//! - **Arm and Draining** run [`Action::ArmAndDrain`]: arm the CQ if no arm
//!   is outstanding, then drain within the budget. Drained means armed and
//!   empty: the feed sleeps on its channel fd. A used-up budget leaves it
//!   draining for its next turn (armed, unless an event taken since used
//!   the arm, or the drain came before it: that turn arms then).
//! - **Polling** is the adaptive mode's suspension (NAPI's `irq_suspend`):
//!   after a wake the feed polls without arming while polls find
//!   completions, and arms once `T` has passed without one ([`Limits`],
//!   derived from the arrival process by [`SpinPolicy`](crate::SpinPolicy)),
//!   however many polls that took: the driver's turn rate changes with the
//!   other feeds, so a count of polls is no measure of time. With a zero
//!   window (event mode, or arrivals too sparse to catch) a wake goes to
//!   Woken.
//! - **Blocked**: the EVD refused a post. The feed takes nothing more out of
//!   its CQ and waits for the EVD's room signal, not a timer.
//! - The shell polls the fd while the feed sleeps (a shared channel's feed
//!   awake too, so that it learns which CQs have work; a multishot poll
//!   stays in flight throughout). A fired fd is taken at the feed's next
//!   turn whatever the phase; only in Sleeping does it start the cycle.
//!
//! One turn runs at most one delivering action, plus the arm that ends a
//! spin, or a Woken poll, that found nothing: a turn delivers at most the
//! budget. A shell whose action fails puts the feed back in Arm (see
//! `Slot::turn`), so a retry arms and drains.

use crate::feed::{FeedStatus, Progress};
use std::time::{Duration, Instant};

/// Where a feed is in its cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Must arm, then drain: new, a spin just ended, a wake's events were
    /// delivered, room came back, or an action failed.
    Arm,
    /// Armed and drained: waits for its channel fd.
    Sleeping,
    /// Event cycle: the channel fired; polls (unarmed) until a poll ends
    /// within the budget, then arms.
    Woken,
    /// Budget used up (armed, or not yet: a drain before the arm, an event
    /// taken since): arms if need be and drains on at its next turn.
    Draining,
    /// Adaptive: polling unarmed since a wake.
    Polling {
        /// When a poll last found completions (or the wake).
        last_found: Instant,
        /// Empty polls in a row since then (what the policy is told with a
        /// find; never a limit).
        empty_polls: u32,
        /// What the next poll finds was already waiting: the completions
        /// the wake announced, or more than the last poll's budget. Its find
        /// closes no arrival gap (not a catch).
        backlog: bool,
    },
    /// The EVD was full: waits for its room signal.
    Blocked,
    /// The EVD closed or the CQ failed: nothing more to do.
    Done,
}

impl Phase {
    /// The feed has work for its next turn: the driver must not sleep.
    pub(crate) fn is_busy(self) -> bool {
        matches!(
            self,
            Phase::Arm | Phase::Draining | Phase::Woken | Phase::Polling { .. }
        )
    }
}

/// What the driver saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Observation {
    /// The feed's turn starts: whether its channel fd fired since its last
    /// turn, and whether its room signal came.
    Turn {
        /// The channel fd fired (its events have been taken).
        fd_fired: bool,
        /// The EVD's room signal woke this feed.
        room: bool,
    },
    /// The action just run on the feed returned this.
    Ran(Progress),
}

/// What the driver does to the feed next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing more this turn.
    Idle,
    /// Arm the CQ unless an arm is outstanding, then drain within the budget.
    ArmAndDrain,
    /// Poll within the budget without arming.
    Poll,
    /// Register the feed's waker with the EVD's room signal.
    WaitForRoom,
}

/// When a polling feed gives up and arms: after `idle` without a
/// completion. Zero means: never poll unarmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Time without a completion that ends a spin.
    pub(crate) idle: Duration,
}

impl Limits {
    /// Never poll unarmed: the event-driven cycle.
    pub(crate) const EVENT: Limits = Limits {
        idle: Duration::ZERO,
    };

    pub(crate) fn spin(self) -> bool {
        !self.idle.is_zero()
    }
}

/// The cycle's transition function (the table is the module doc's diagram;
/// the tests cover every row).
pub(crate) fn next(
    phase: Phase,
    seen: Observation,
    now: Instant,
    limits: Limits,
) -> (Phase, Action) {
    match seen {
        Observation::Turn { fd_fired, room } => on_turn(phase, fd_fired, room, now, limits),
        Observation::Ran(p) => after_run(phase, p, now, limits),
    }
}

fn on_turn(
    phase: Phase,
    fd_fired: bool,
    room: bool,
    now: Instant,
    limits: Limits,
) -> (Phase, Action) {
    match phase {
        Phase::Done => (Phase::Done, Action::Idle),
        Phase::Sleeping if !fd_fired => (Phase::Sleeping, Action::Idle),
        Phase::Sleeping if limits.spin() => (
            Phase::Polling {
                last_found: now,
                empty_polls: 0,
                backlog: true,
            },
            Action::Poll,
        ),
        Phase::Sleeping => (Phase::Woken, Action::Poll),
        Phase::Arm | Phase::Draining => (phase, Action::ArmAndDrain),
        Phase::Woken | Phase::Polling { .. } => (phase, Action::Poll),
        Phase::Blocked if room => (Phase::Arm, Action::ArmAndDrain),
        Phase::Blocked => (Phase::Blocked, Action::Idle),
    }
}

fn after_run(phase: Phase, p: Progress, now: Instant, limits: Limits) -> (Phase, Action) {
    match p.status {
        FeedStatus::Closed | FeedStatus::Failed => return (Phase::Done, Action::Idle),
        FeedStatus::Backpressure => return (Phase::Blocked, Action::WaitForRoom),
        FeedStatus::Drained | FeedStatus::Budget => {}
    }
    match phase {
        Phase::Arm | Phase::Draining => match p.status {
            FeedStatus::Drained => (Phase::Sleeping, Action::Idle),
            _ => (Phase::Draining, Action::Idle),
        },
        // More than the budget waits: poll on next turn, still unarmed.
        Phase::Woken if p.status == FeedStatus::Budget => (Phase::Woken, Action::Idle),
        // Delivered: the caller gets the events before this feed's arm.
        Phase::Woken if p.delivered > 0 => (Phase::Arm, Action::Idle),
        // Nothing (a spurious wake): arm now; no delivery used the budget.
        Phase::Woken => (Phase::Arm, Action::ArmAndDrain),
        Phase::Polling { .. } if p.delivered > 0 => (
            Phase::Polling {
                last_found: now,
                empty_polls: 0,
                backlog: p.status == FeedStatus::Budget,
            },
            Action::Idle,
        ),
        Phase::Polling {
            last_found,
            empty_polls,
            ..
        } => {
            let empty_polls = empty_polls.saturating_add(1);
            if now.saturating_duration_since(last_found) >= limits.idle {
                // Nothing was delivered this turn, so arming now keeps the
                // turn within its budget and sends an idle feed to sleep
                // without a wasted turn.
                (Phase::Arm, Action::ArmAndDrain)
            } else {
                (
                    Phase::Polling {
                        last_found,
                        empty_polls,
                        backlog: false,
                    },
                    Action::Idle,
                )
            }
        }
        Phase::Sleeping | Phase::Blocked | Phase::Done => {
            debug_assert!(false, "no action runs in {phase:?}");
            (phase, Action::Idle)
        }
    }
}

/// What a run tells the adaptive policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpinOutcome {
    /// A spinning poll found completions, after this many empty polls.
    Catch {
        /// Empty polls in a row before the find.
        empty_polls: u32,
    },
    /// A spin ended empty: the feed arms.
    Miss,
    /// A spin ended without a find or a miss deciding it (the EVD full or
    /// closed, the CQ failed): neither.
    Abandoned,
    /// Completions found outside a spin: the policy's clock restarts.
    Seen,
    /// Nothing to tell.
    Nothing,
}

/// What a run in phase `ran_in` that returned `p` and led to `led_to`
/// tells the adaptive policy: a spinning poll's find of an arrival is a
/// catch, a spin that ends in an arm is a miss, one that ends otherwise is
/// neither (a find that then met a closed EVD is still a catch: the feed is
/// done, and nothing of its policy is read again), other finds (a backlog:
/// the wake's own completions, or what a poll's budget left) restart the
/// clock.
pub(crate) fn spin_outcome(ran_in: Phase, led_to: Phase, p: Progress) -> SpinOutcome {
    let found = p.delivered > 0 && p.status != FeedStatus::Backpressure;
    match ran_in {
        Phase::Polling { backlog: true, .. } if found => SpinOutcome::Seen,
        Phase::Polling { empty_polls, .. } if found => SpinOutcome::Catch { empty_polls },
        Phase::Polling { .. } if led_to == Phase::Arm => SpinOutcome::Miss,
        Phase::Polling { .. } if matches!(led_to, Phase::Blocked | Phase::Done) => {
            SpinOutcome::Abandoned
        }
        _ if found => SpinOutcome::Seen,
        _ => SpinOutcome::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPIN: Limits = Limits {
        idle: Duration::from_micros(20),
    };

    fn turn(fd_fired: bool, room: bool) -> Observation {
        Observation::Turn { fd_fired, room }
    }

    fn ran(delivered: usize, status: FeedStatus) -> Observation {
        Observation::Ran(Progress { delivered, status })
    }

    /// Spinning since `t`, `empty_polls` empty polls on, with no backlog.
    fn polling(t: Instant, empty_polls: u32) -> Phase {
        Phase::Polling {
            last_found: t,
            empty_polls,
            backlog: false,
        }
    }

    /// Spinning since `t` with completions already waiting.
    fn polling_a_backlog(t: Instant) -> Phase {
        Phase::Polling {
            last_found: t,
            empty_polls: 0,
            backlog: true,
        }
    }

    #[test]
    fn a_sleeping_feed_waits_for_its_fd() {
        let t = Instant::now();
        for l in [Limits::EVENT, SPIN] {
            for room in [false, true] {
                assert_eq!(
                    next(Phase::Sleeping, turn(false, room), t, l),
                    (Phase::Sleeping, Action::Idle)
                );
            }
        }
    }

    #[test]
    fn a_wake_polls_before_it_arms_in_event_mode_and_spins_when_spinning_pays() {
        let t = Instant::now();
        assert_eq!(
            next(Phase::Sleeping, turn(true, false), t, Limits::EVENT),
            (Phase::Woken, Action::Poll)
        );
        assert_eq!(
            next(Phase::Sleeping, turn(true, false), t, SPIN),
            (polling_a_backlog(t), Action::Poll)
        );
    }

    #[test]
    fn a_woken_poll_delivers_before_the_arm_and_an_empty_one_arms_now() {
        let t = Instant::now();
        for l in [Limits::EVENT, SPIN] {
            assert_eq!(
                next(Phase::Woken, ran(3, FeedStatus::Drained), t, l),
                (Phase::Arm, Action::Idle)
            );
            // The budget ran out: poll on, unarmed, next turn.
            assert_eq!(
                next(Phase::Woken, ran(8, FeedStatus::Budget), t, l),
                (Phase::Woken, Action::Idle)
            );
            assert_eq!(
                next(Phase::Woken, turn(false, false), t, l),
                (Phase::Woken, Action::Poll)
            );
            assert_eq!(
                next(Phase::Woken, ran(0, FeedStatus::Drained), t, l),
                (Phase::Arm, Action::ArmAndDrain)
            );
            // Then the next turn arms and drains.
            assert_eq!(
                next(Phase::Arm, turn(false, false), t, l),
                (Phase::Arm, Action::ArmAndDrain)
            );
        }
    }

    #[test]
    fn arm_and_draining_turns_arm_and_drain_whatever_fired() {
        let t = Instant::now();
        for p in [Phase::Arm, Phase::Draining] {
            for fd in [false, true] {
                for room in [false, true] {
                    assert_eq!(next(p, turn(fd, room), t, SPIN), (p, Action::ArmAndDrain));
                }
            }
        }
    }

    #[test]
    fn a_polling_turn_polls() {
        let t = Instant::now();
        let p = polling(t, 2);
        assert_eq!(next(p, turn(true, true), t, SPIN), (p, Action::Poll));
    }

    #[test]
    fn a_blocked_feed_moves_only_on_its_room_signal() {
        let t = Instant::now();
        assert_eq!(
            next(Phase::Blocked, turn(true, false), t, SPIN),
            (Phase::Blocked, Action::Idle)
        );
        assert_eq!(
            next(Phase::Blocked, turn(false, true), t, SPIN),
            (Phase::Arm, Action::ArmAndDrain)
        );
    }

    #[test]
    fn done_is_final() {
        let t = Instant::now();
        for fd in [false, true] {
            for room in [false, true] {
                assert_eq!(
                    next(Phase::Done, turn(fd, room), t, SPIN),
                    (Phase::Done, Action::Idle)
                );
            }
        }
    }

    #[test]
    fn arming_ends_in_sleep_when_drained_and_drains_on_after_the_budget() {
        let t = Instant::now();
        for p in [Phase::Arm, Phase::Draining] {
            for n in [0, 5] {
                assert_eq!(
                    next(p, ran(n, FeedStatus::Drained), t, SPIN),
                    (Phase::Sleeping, Action::Idle)
                );
            }
            assert_eq!(
                next(p, ran(8, FeedStatus::Budget), t, SPIN),
                (Phase::Draining, Action::Idle)
            );
        }
    }

    #[test]
    fn a_full_evd_blocks_and_waits_for_room_a_closed_one_ends_from_any_running_phase() {
        let t = Instant::now();
        for p in [Phase::Arm, Phase::Draining, Phase::Woken, polling(t, 1)] {
            for n in [0, 3] {
                assert_eq!(
                    next(p, ran(n, FeedStatus::Backpressure), t, SPIN),
                    (Phase::Blocked, Action::WaitForRoom)
                );
                for s in [FeedStatus::Closed, FeedStatus::Failed] {
                    assert_eq!(next(p, ran(n, s), t, SPIN), (Phase::Done, Action::Idle));
                }
            }
        }
    }

    #[test]
    fn a_poll_that_finds_completions_restarts_the_spin_and_one_that_used_its_budget_leaves_a_backlog()
     {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_micros(15);
        for from in [polling(t0, 2), polling_a_backlog(t0)] {
            assert_eq!(
                next(from, ran(4, FeedStatus::Drained), t1, SPIN),
                (polling(t1, 0), Action::Idle)
            );
            assert_eq!(
                next(from, ran(8, FeedStatus::Budget), t1, SPIN),
                (polling_a_backlog(t1), Action::Idle)
            );
        }
        // An empty poll: nothing was waiting.
        assert_eq!(
            next(polling_a_backlog(t0), ran(0, FeedStatus::Drained), t1, SPIN),
            (polling(t0, 1), Action::Idle)
        );
    }

    #[test]
    fn a_find_of_a_backlog_is_no_catch() {
        // The wake's own completions, and what a poll's budget left, are
        // found with no arrival gap spun through; a find after a drained
        // poll is an arrival.
        let t = Instant::now();
        let find = |from: Phase, status| {
            let seen = ran(4, status);
            let (led_to, _) = next(from, seen, t, SPIN);
            let Observation::Ran(p) = seen else {
                unreachable!()
            };
            (led_to, spin_outcome(from, led_to, p))
        };
        let (woken, _) = next(Phase::Sleeping, turn(true, false), t, SPIN);
        assert_eq!(woken, polling_a_backlog(t));
        let (rest, outcome) = find(woken, FeedStatus::Budget);
        assert_eq!((rest, outcome), (polling_a_backlog(t), SpinOutcome::Seen));
        let (drained, outcome) = find(rest, FeedStatus::Drained);
        assert_eq!((drained, outcome), (polling(t, 0), SpinOutcome::Seen));
        let (_, outcome) = find(drained, FeedStatus::Drained);
        assert_eq!(outcome, SpinOutcome::Catch { empty_polls: 0 });
    }

    #[test]
    fn empty_polls_are_counted_but_only_the_clock_ends_a_spin() {
        // However fast the turns come (other feeds went to sleep, say), a
        // spin inside its window goes on: a count of polls learned at one
        // turn rate would end it early at another.
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_micros(1);
        let mut phase = polling(t0, 0);
        for n in 1..=1_000_000u32 {
            let (p, a) = next(phase, ran(0, FeedStatus::Drained), t1, SPIN);
            assert_eq!((p, a), (polling(t0, n), Action::Idle));
            phase = p;
        }
        assert_eq!(
            next(phase, ran(0, FeedStatus::Drained), t0 + SPIN.idle, SPIN),
            (Phase::Arm, Action::ArmAndDrain)
        );
    }

    #[test]
    fn an_empty_poll_after_the_idle_limit_arms_at_once() {
        let t0 = Instant::now();
        let late = t0 + SPIN.idle;
        assert_eq!(
            next(polling(t0, 0), ran(0, FeedStatus::Drained), late, SPIN),
            (Phase::Arm, Action::ArmAndDrain)
        );
        let early = t0 + SPIN.idle - Duration::from_nanos(1);
        assert_eq!(
            next(polling(t0, 0), ran(0, FeedStatus::Drained), early, SPIN),
            (polling(t0, 1), Action::Idle)
        );
    }

    #[test]
    fn busy_phases_are_the_ones_with_an_action_for_the_next_turn() {
        let t = Instant::now();
        for (p, busy) in [
            (Phase::Arm, true),
            (Phase::Draining, true),
            (polling(t, 0), true),
            (Phase::Woken, true),
            (Phase::Sleeping, false),
            (Phase::Blocked, false),
            (Phase::Done, false),
        ] {
            assert_eq!(p.is_busy(), busy, "{p:?}");
            let (_, a) = next(p, turn(false, false), t, SPIN);
            assert_eq!(a != Action::Idle, busy, "{p:?}");
        }
    }

    #[test]
    fn a_spin_ends_in_a_catch_a_miss_or_abandoned_and_other_finds_are_seen() {
        let t = Instant::now();
        let progress = |delivered, status| Progress { delivered, status };
        let spin = polling(t, 7);
        // Every run of a spinning feed, through the cycle itself.
        for (seen, outcome) in [
            (
                ran(2, FeedStatus::Drained),
                SpinOutcome::Catch { empty_polls: 7 },
            ),
            (
                ran(8, FeedStatus::Budget),
                SpinOutcome::Catch { empty_polls: 7 },
            ),
            (ran(0, FeedStatus::Drained), SpinOutcome::Nothing),
            (ran(3, FeedStatus::Backpressure), SpinOutcome::Abandoned),
            (ran(0, FeedStatus::Backpressure), SpinOutcome::Abandoned),
            (ran(0, FeedStatus::Closed), SpinOutcome::Abandoned),
            (ran(0, FeedStatus::Failed), SpinOutcome::Abandoned),
            (
                ran(1, FeedStatus::Closed),
                SpinOutcome::Catch { empty_polls: 7 },
            ),
        ] {
            let Observation::Ran(p) = seen else {
                unreachable!()
            };
            // An empty poll inside the window stays in the spin; at its end
            // the same poll is a miss.
            for (now, expect) in [(t, outcome), (t + SPIN.idle, SpinOutcome::Miss)] {
                let (led_to, _) = next(spin, seen, now, SPIN);
                let expect = match (p.delivered, p.status) {
                    (0, FeedStatus::Drained) => expect,
                    _ => outcome,
                };
                assert_eq!(spin_outcome(spin, led_to, p), expect, "{p:?} at {now:?}");
            }
        }
        // Outside a spin: a find restarts the clock, nothing else tells.
        for phase in [Phase::Arm, Phase::Draining, Phase::Woken] {
            let (led_to, _) = next(phase, ran(2, FeedStatus::Drained), t, SPIN);
            assert_eq!(
                spin_outcome(phase, led_to, progress(2, FeedStatus::Drained)),
                SpinOutcome::Seen
            );
            let (led_to, _) = next(phase, ran(0, FeedStatus::Backpressure), t, SPIN);
            assert_eq!(
                spin_outcome(phase, led_to, progress(0, FeedStatus::Backpressure)),
                SpinOutcome::Nothing
            );
        }
    }
}
