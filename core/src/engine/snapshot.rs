//! Snapshots of the word and the head for any thread: [`Query`], the
//! handles' `len`/`is_full`/... accessors, and the plain loads of the word
//! that decide (closed, policy, instances). Loads only: nothing here writes.
//!
//! A snapshot's head and word belong to one instant: the head is read before
//! and after the word (each `Acquire`, so the counters and flags read after
//! are at least as new), and the pair is used only if the head did not move.

use super::Shared;
use crate::query::{Query, UpcallPolicy};
use crate::state::{self, PolicyBits};
use crate::sync::Ordering;

/// Attempts [`Shared::query`] makes at reading the head unchanged around its
/// load of the word before it settles for a clamped figure.
const QUERY_ATTEMPTS: usize = 64;

/// One snapshot of how full the ring is ([`Shared::occupancy`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Occupancy {
    /// Events queued (`len + permits <= capacity`).
    pub(crate) len: usize,
    pub(crate) capacity: usize,
    /// Slots promised to permits.
    pub(crate) permits: usize,
    pub(crate) closed: bool,
    /// A resize holds reservations off.
    pub(crate) resizing: bool,
}

impl Occupancy {
    /// Slots neither queued nor promised to a permit.
    pub(crate) fn free(&self) -> usize {
        self.capacity - self.len - self.permits
    }
}

impl<T> Shared<T> {
    /// The state word, the head and the queue length (`len <= capacity`),
    /// read as one instant: the head is read on both sides of the word and
    /// the read is retried until it did not move (the same loads, with the
    /// same orderings, [`Shared::query`] has always made). Any thread may
    /// call it: it reads the capacity from the word, not the buffer.
    pub(super) fn word_head_len(&self) -> (u64, u64, u64) {
        let mut attempt = 0;
        let (w, head, consistent) = loop {
            // Acquire on each: the counters and flags read after are at least
            // as new as the head and word.
            let before = self.consumer.head.load(Ordering::Acquire);
            let w = self.state.load(Ordering::Acquire);
            let after = self.consumer.head.load(Ordering::Acquire);
            attempt += 1;
            if before == after || attempt == QUERY_ATTEMPTS {
                break (w, before, before == after);
            }
        };
        let len = state::len(w, head);
        // Permits out are promised slots: a consistent snapshot has
        // `len + permits <= capacity`, and a clamped one is kept to it.
        let room_for_events = state::capacity(w) - state::permits(w);
        let len = if consistent {
            len
        } else {
            len.min(room_for_events)
        };
        debug_assert!(len <= room_for_events, "a consistent snapshot");
        (w, head, len)
    }

    /// The occupancy from one snapshot of the word and head: the cheap part
    /// of [`Shared::query`] (no counters), for the handles'
    /// `len`/`is_full`/... accessors. Safe from any thread.
    pub(crate) fn occupancy(&self) -> Occupancy {
        let (w, _, len) = self.word_head_len();
        Occupancy {
            len: len as usize,
            capacity: state::capacity(w) as usize,
            permits: state::permits(w) as usize,
            closed: state::has(w, state::CLOSED),
            resizing: state::has(w, state::RESIZING),
        }
    }

    /// A snapshot whose head and word belong to one instant: the head is read
    /// before and after the word, and the pair is used only if it did not
    /// move (the head moves only forward, so then it was that value when the
    /// word was read). A consumer busy enough to move it every time gets a
    /// head read before the word: `len` is then at most the distance to a
    /// head older than the true one, clamped to the capacity.
    pub(crate) fn query(&self) -> Query {
        let (w, head, len) = self.word_head_len();
        Query {
            capacity: state::capacity(w) as usize,
            len: len as usize,
            policy: UpcallPolicy::from_bits(state::policy(w)),
            armed: state::has(w, state::ARMED),
            notified: state::has(w, state::NOTIFIED),
            in_upcall: state::instances(w) > 0,
            upcalls_in_flight: state::instances(w) as usize,
            closed: state::has(w, state::CLOSED),
            unwaitable: self.unwaitable.load(Ordering::Relaxed),
            posted: head.wrapping_add(len),
            dequeued: head,
            lost: self.counters.lost.load(Ordering::Relaxed),
            notifications: self.counters.notifications.load(Ordering::Relaxed),
            upcalls: self.counters.upcalls.load(Ordering::Relaxed),
            room_wanted: self.room_wanted(),
            room_waiters: self.room_waiters(),
            room_wakes: self.counters.room_wakes.load(Ordering::Relaxed),
            permits: state::permits(w) as usize,
        }
    }

    /// Every slot is reserved or promised to a permit now (a snapshot).
    pub(super) fn looks_full(&self) -> bool {
        let (w, _, len) = self.word_head_len();
        len + state::permits(w) == state::capacity(w)
    }

    /// True once the EVD is closed (the state word's CLOSED).
    pub(crate) fn is_closed(&self) -> bool {
        state::has(self.state.load(Ordering::Acquire), state::CLOSED)
    }

    /// The queued (reserved) events if the EVD is closed, else `None`: a
    /// waiter decides there is nothing more to wait for.
    pub(crate) fn queued_if_closed(&self) -> Option<u64> {
        // Acquire: the tail read with CLOSED is final.
        let w = self.state.load(Ordering::Acquire);
        state::has(w, state::CLOSED).then(|| state::len(w, self.head()))
    }

    /// The upcall policy now.
    pub(crate) fn policy(&self) -> PolicyBits {
        // Acquire: a token holder that sees the policy disabled stops; the
        // disabling CAS released nothing it needs, but Acquire keeps the
        // reasoning local.
        state::policy(self.state.load(Ordering::Acquire))
    }

    /// The policy and the instances in flight, from one read of the word.
    pub(crate) fn policy_and_instances(&self) -> (PolicyBits, u64) {
        // Acquire: as in `instances`.
        let w = self.state.load(Ordering::Acquire);
        (state::policy(w), state::instances(w))
    }

    /// Upcall instances in flight now.
    pub(crate) fn instances(&self) -> u64 {
        // Acquire: see the head and slot reads of the last instance to end.
        state::instances(self.state.load(Ordering::Acquire))
    }

    /// True if an upcall instance holds the token now (a debug check of
    /// [`Shared::call_handler`]'s contract, and for tests).
    pub(crate) fn token_taken(&self) -> bool {
        state::has(self.state.load(Ordering::Relaxed), state::TOKEN)
    }
}
