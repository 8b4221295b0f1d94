//! The engine's side of the posters' waits: the room signal's calls (join,
//! leave, and the wakes after a head store, a permit given back, a resize
//! or close; the protocol is in [`crate::room`]) and the waker lists
//! (close, the permit limit; [`crate::waker_list`]). Each owner keeps its
//! own ordering argument; these are the calls that reach it.

use super::Shared;
use crate::room::Seat;
use crate::state;
use crate::waker_list::WakerList;
use std::task::Waker;

impl<T> Shared<T> {
    // ---- the room signal (posters waiting for a free slot, [`crate::room`]) ----

    /// Wake posters waiting for the `n` slots a head store just freed (the
    /// call out of line is [`RoomQueue::wake`](crate::room::RoomQueue::wake)).
    #[inline(always)]
    pub(super) fn wake_room(&self, n: u64) {
        let woken = &self.counters.room_wakes;
        self.room.wake(&self.consumer.room, n, woken);
    }

    /// A poster found the ring full and will sleep until `waker` is woken:
    /// join the room queue
    /// ([`RoomQueue::join`](crate::room::RoomQueue::join)). The caller must
    /// post once more after this and before it sleeps.
    pub(crate) fn room_join(&self, seat: &mut Seat, waker: &Waker) {
        self.room.join(&self.consumer.room, seat, waker);
    }

    /// A waiting poster is done: it `posted`, or gave up
    /// ([`RoomQueue::leave`](crate::room::RoomQueue::leave)).
    pub(crate) fn room_leave(&self, seat: &mut Seat, posted: bool) {
        let woken = &self.counters.room_wakes;
        self.room.leave(
            &self.consumer.room,
            seat,
            posted,
            || self.looks_full(),
            woken,
        );
    }

    /// Wake every waiting poster (close, a resize's end).
    pub(super) fn wake_all_room(&self) {
        self.room
            .wake_all(&self.consumer.room, &self.counters.room_wakes);
    }

    /// After an RMW that installed `word` and may leave queued events to an
    /// upcall nobody started (an instance that unwound out of a panicking
    /// handler or gave the token back for a handler call, a policy enabled
    /// without an instance, a permit that took the last slot): on a full
    /// ring only a post refused as full starts it, so posters waiting for
    /// room are woken to do that themselves (a waiting post posts again, a
    /// [`RoomWaiter`](crate::RoomWaiter) drains). Nothing when `word` does
    /// not strand a full ring ([`state::strands_a_full_ring`]): an instance
    /// runs and its head stores wake them, or the ring has room, each freed
    /// slot already announced to a waiter whose post will start the
    /// instance (or whose permit, filling the ring, calls this). (Waking
    /// them all there would send every waiter back to a lock and a barrier
    /// after each event a `ManyInstances` handler takes.)
    /// A head loaded after the RMW can only be newer: a dequeue since, whose
    /// own head store made the room check. The light barrier orders the
    /// caller's RMW before the flag load, as after a head store: either a
    /// waiter's look after joining sees the new word, or this sees the
    /// waiter ([`crate::room`]). No waker's panic is raised.
    pub(crate) fn wake_room_if_stranded(&self, word: u64) {
        if !state::strands_a_full_ring(word, self.head()) {
            return;
        }
        if self.consumer.room.check_after_head_store() {
            self.wake_all_room();
        }
    }

    /// Close's wakes of posters, after CLOSED is set: every poster waiting
    /// for room, every reservation waiting for a permit back, then every
    /// task awaiting `Poster::closed`. None raises a waker's panic.
    pub(super) fn wake_posters_on_close(&self) {
        self.wake_all_room();
        self.limit_waiters.wake_all();
        self.close_waiters.wake_all();
    }

    /// A permit came back, sent or (`freed`) given back, the word before
    /// being `old`: a slot given back gets the room check of a head store
    /// that frees one (its light barrier orders the RMW before the flag
    /// load, [`crate::room`]); a permit back from the limit wakes every
    /// reservation waiting for one (their lock orders it, [`crate::waker_list`]).
    pub(crate) fn permit_back(&self, old: u64, freed: bool) {
        if freed && self.consumer.room.check_after_head_store() {
            self.wake_room(1);
        }
        if state::permits(old) == state::MAX_PERMITS {
            self.limit_waiters.wake_all();
        }
    }

    // ---- the waker lists ([`crate::waker_list`]) ----

    /// Tasks awaiting close: register, then re-check [`Shared::is_closed`].
    pub(crate) fn close_waiters(&self) -> &WakerList {
        &self.close_waiters
    }

    /// Tasks waiting for a permit back at the limit: register, then try
    /// again.
    pub(crate) fn limit_waiters(&self) -> &WakerList {
        &self.limit_waiters
    }

    /// A poster waits for room now (`Query::room_wanted`).
    pub(crate) fn room_wanted(&self) -> bool {
        self.consumer.room.waiting()
    }

    /// How many posters are in the room queue now (`Query::room_waiters`).
    pub(crate) fn room_waiters(&self) -> usize {
        self.room.len()
    }
}
