//! The consumer's line: the fields the consumer side writes on every
//! dequeue, on one cache line of their own. What each holds is stated at the
//! field; the operations and their orderings are in [`super::dequeue`].

use crate::pace::Pacer;
use crate::room::RoomFlags;
use crate::sync::{AtomicBool, AtomicU64};

/// The lines the consumer (or the upcall instance holding the token) writes
/// on every dequeue; posters read `head` only when the ring looks full.
pub(super) struct ConsumerLine {
    /// The consumer's head, a full 64-bit count of dequeued events. Written
    /// only by the consumer (or the token holder), with `Release` after the
    /// value is moved out, so a poster that loads it with `Acquire` may reuse
    /// the slot.
    pub(super) head: AtomicU64,
    /// The last dequeue returned a loss report: the next one prefers an event,
    /// so reports and events alternate and a flood of losses cannot starve
    /// the consumer of the queued events. Touched only by the consumer side.
    pub(super) last_was_report: AtomicBool,
    /// The tail, as a full ticket count ([`tail_count`](crate::state::tail_count)), at the
    /// consumer side's last arm that loaded the word, or its last empty check
    /// on a closed EVD (other loads of the word do not record it: any earlier
    /// tail is still a lower bound). Every ticket from the head up to it was
    /// reserved and will be published, so while the head is below it an arm
    /// is `Pending` without looking at the word ([`known_queued`](crate::state::known_queued)).
    /// Touched only by the consumer side (the token holder, under upcalls);
    /// written only after a load of the word, which the hot paths do not
    /// make. Anything that moves the head or the tickets other than a dequeue
    /// must move it too (only the tests' `fast_forward` does).
    pub(super) seen_tail: AtomicU64,
    /// The consumer-line half of the room signal ([`crate::room`]): the
    /// flag the check after every head store loads, beside the head so that
    /// it hits the consumer's own line; written only while a poster waits.
    pub(super) room: RoomFlags,
    /// When a dequeue that finds nothing lingers ([`crate::pace`]): touched
    /// only on that path.
    pub(crate) pacer: Pacer,
    /// The consumer was dropped from inside its own upcall with instances
    /// in flight (its own among them): the events still queued are left to
    /// the instances. A leaving instance that finds none in flight once it
    /// sees this (the last one always does; an earlier one may, late) takes
    /// them (`queue_taken`) and drops them (`Shared::after_instance_left`).
    /// Set once, by that drop.
    pub(super) queue_left: AtomicBool,
    /// A leaving instance took the queue `queue_left` left: one taker.
    pub(super) queue_taken: AtomicBool,
}

impl ConsumerLine {
    pub(super) fn new() -> Self {
        ConsumerLine {
            head: AtomicU64::new(0),
            last_was_report: AtomicBool::new(false),
            seen_tail: AtomicU64::new(0),
            room: RoomFlags::new(),
            pacer: Pacer::new(0),
            queue_left: AtomicBool::new(false),
            queue_taken: AtomicBool::new(false),
        }
    }
}
