//! The room signal: posters that wait for a free slot, and how the consumer
//! wakes them without paying for it while nobody waits.
//!
//! # The protocol
//!
//! A full ring refuses a post ([`PostError::Full`](crate::PostError)). A
//! poster that wants to wait for room instead (`post_blocking`,
//! `post_timeout`, `post_deadline`, `post_async`, the `Sink`) *joins* the
//! room queue, then checks again, then sleeps — the arm-then-check of the
//! consumer's side, turned around:
//!
//! ```text
//! poster (slow path)                      consumer (every head store)
//! ------------------                      ---------------------------
//! lock queue; push waker;                 head.store(new, Release)
//!   WANTED = true; unlock                 light barrier
//! heavy barrier                           if WANTED.load(Relaxed):   (cold)
//! post again (reloads the head)               lock queue; pop one waker per
//! full? sleep until woken                     freed slot; WANTED = !empty
//!                                             unlock; wake them
//! ```
//!
//! `WANTED` ([`RoomFlags`]) lives in the consumer's own cache line, next to
//! the head, so the consumer's check is a load that hits its own cache and a branch that is
//! never taken while no poster waits. The barrier pair
//! ([`RoomBarrier`]) is the store-buffering
//! (Dekker) guarantee: either the poster's second post sees the consumer's new
//! head (and goes in), or the consumer's flag load sees `WANTED` (and wakes a
//! waiter). On Linux the consumer's half is a compiler fence and the poster's
//! half is `membarrier(2)`, a system call paid only by a poster that is about
//! to sleep.
//!
//! Why not a `ROOM_WANTED` bit in the state word: the posters' "is it still
//! full?" depends on the head, which is not in the word, so one CAS could not
//! make the check; and the consumer would have to load the posters' hot line
//! after every head store, the contended load the dequeue path avoids.
//!
//! # The queue and its rules
//!
//! The queue ([`WaitQueue`]) is FIFO, guarded by a mutex taken only by
//! waiting posters and by a consumer that found `WANTED` set: never on the
//! path of a post that succeeds or of a dequeue while nobody waits.
//! `WANTED == !queue.is_empty()` whenever the lock is free.
//!
//! * **One wake per freed slot.** A head store that frees `n` slots wakes at
//!   most `n` waiters (the first `n`): no thundering herd for one slot. A
//!   wake whose waker panics does not count: it is passed on to the next
//!   waiter, at most once per waiter queued when the first one panicked.
//! * **A woken waiter keeps its place.** It is taken out of the queue when it
//!   is woken; if it then finds the ring full again (another poster took the
//!   slot), it rejoins in its place by the order in which seats first joined:
//!   ahead of every seat that joined after it, so the queue stays first come
//!   first served by first arrival, and waiters woken together (a batch
//!   dequeue, a close, a resize) that all rejoin keep their order.
//! * **A wake is never dropped.** A waiter that leaves after being woken
//!   passes one wake on to the next waiter — unless it posted and the ring
//!   is full right after (checked after it found itself woken). A woken
//!   waiter that posted may have used a slot freed *before* its wake (its
//!   post after joining found it, and the consumer popped its stale entry for
//!   the next freed slot): without the hand-on, that next slot would stay
//!   free while the waiter behind it sleeps (loom found exactly this:
//!   `room_two_waiters_one_slot_at_a_time_both_get_in`). A full ring needs
//!   no hand-on: every slot is taken, and the next head store pops a waiter.
//!
//! Why no waiter sleeps forever next to a free slot: a waiter sleeps only
//! after its post following the join found the ring full (or a resize
//! under way, whose end wakes every waiter: below), so more dequeues
//! are to come, or a [`Permit`](crate::Permit) comes back (a release runs
//! this check as a head store does; a send queues an event whose dequeue
//! will); each frees a slot and pops one waiter, and each popped waiter
//! posts and leaves (passing the wake on unless the ring is full again),
//! finds the ring full and rejoins in its place, or gives up and passes its
//! wake on. A free slot therefore always has an awake waiter heading for it,
//! or a head store still to come, as long as anyone waits.
//! * **Close and the end of every resize wake every waiter** (they retry and
//!   see `Closed`, or the ring as resized; a resize that began, done or
//!   refused as too small). A post that waits for room is
//!   refused while a resize holds reservations off and waits for its end
//!   here, as for a freed slot; a growing resize adds slots for those that
//!   found the ring full; one that grows nothing costs those a retry.
//! * **Only waiters for a slot queue here.** A reservation refused because
//!   every permit the EVD allows is out waits for a permit back in a list
//!   of its own ([`crate::waker_list`]), handing on any slot's wake it had
//!   been given: a wake it cannot use must not sit at the front.
//!
//! # Transitions of the queue
//!
//! | operation | who | queue before | queue after | returns |
//! |---|---|---|---|---|
//! | [`WaitQueue::join`] (new seat) | poster | any | seat at the back | `Joined::Now` |
//! | [`WaitQueue::join`] (seat woken) | poster | seat absent | seat back in its place (ahead of every later seat) | `Joined::Now` |
//! | [`WaitQueue::join`] (seat queued) | poster | seat present | same place, new waker | `Joined::Already` |
//! | [`WaitQueue::leave`] (seat queued) | poster | seat present | seat removed | no wake |
//! | [`WaitQueue::leave`] (seat woken) | poster | seat absent | unchanged | `Left::Woken`: the caller may [`WaitQueue::pop`] to pass the wake on |
//! | [`WaitQueue::pop`] | consumer | any | front popped, if any | its waker |
//! | [`WaitQueue::take_all`] | close, a resize's end | any | empty | every waker |
//!
//! The queue is kept in the order seats first joined (their ids ascend from
//! front to back), which is what makes a rejoin's place a binary search.
//!
//! No user code runs under the lock: a joining poster's waker is cloned
//! before it is taken (a clone that panics leaves the queue and the seat as
//! they were), and replaced and removed wakers are handed back to be
//! dropped, and popped ones woken, after it is released. A leaving poster's
//! removed waker (the clone of a seat still queued) is dropped with its
//! panic caught and not re-raised, as a wake's: the leave may come after
//! the event was posted (a panic then would say it was not), or while the
//! caller still holds it (its drop during that unwind could panic too, a
//! second panic, which aborts). A waker
//! whose `wake` panics is counted as woken and its panic is not re-raised on
//! the waking thread (nor one from its payload's drop,
//! [`crate::unwind::caught`]): that thread is the consumer in the middle of a
//! dequeue (the event in hand would be lost) or a poster leaving the queue,
//! and the other waiters still have to be woken. Its wake is passed on to
//! the next waiter, as if its seat had left: its task may never run to use
//! the slot.
//!
//! # Costs
//!
//! While no poster waits: one load of the consumer's own line and a branch
//! per head store (4 instructions per post+dequeue pair under callgrind). Where `membarrier` is unavailable
//! (other systems, Miri, a kernel or seccomp filter that refuses it) the
//! consumer's flag is always set and every head store also takes the cold
//! path's `SeqCst` fence and a second load. Per
//! join: the lock, and `membarrier`, which interrupts every CPU running a
//! thread of this process (the consumer's included) for a barrier: a poster
//! that keeps finding the ring full pays it, and the consumer feels it, once
//! per wait. The registration is made once per process, at the first EVD.
//!
//! A pending `post_async` future or a `PostSink` holding an event keeps its
//! place in the queue: poll it or drop it. One that was woken and is then
//! neither polled nor dropped holds the wake of the slot it was given (as a
//! lock acquisition that is never polled holds the lock's turn), so a waiter
//! behind it waits for the next freed slot.
//!
//! `Joined::Now` tells the poster to run the heavy barrier and post again
//! before it sleeps; `Joined::Already` does not need it (the flag was set,
//! and seen or not by the consumer, by the earlier join's barrier).

use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, RoomBarrier, fence};
use std::collections::VecDeque;
use std::task::Waker;

/// A waiting poster's place in the room queue, kept by the poster between
/// its attempts. `None` until it first joins.
#[derive(Debug, Default)]
pub(crate) struct Seat(Option<u64>);

impl Seat {
    /// True once this seat has joined (and not left) the queue: it is queued,
    /// or it was woken and has not rejoined yet.
    pub(crate) fn is_taken(&self) -> bool {
        self.0.is_some()
    }
}

/// What [`WaitQueue::join`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Joined {
    /// The seat was put in the queue now: run the heavy barrier and post
    /// again before sleeping.
    Now,
    /// The seat was still queued; only its waker was replaced.
    Already,
}

/// Where [`WaitQueue::leave`] found the seat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Left {
    /// It never joined (or left already).
    Absent,
    /// It was still queued: removed; it was never woken.
    Queued,
    /// It had been woken (popped) and not rejoined.
    Woken,
}

/// The FIFO of waiting posters. Pure: the caller holds the lock and keeps
/// the consumer's `WANTED` flag equal to `!is_empty()`.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    /// The id the next new seat gets.
    next_id: u64,
    /// Queued seats, front first, in ascending id order (the order they
    /// first joined). A seat appears at most once.
    waiting: VecDeque<(u64, Waker)>,
}

impl WaitQueue {
    /// No poster is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Seats queued.
    fn len(&self) -> usize {
        self.waiting.len()
    }

    fn position(&self, id: u64) -> Option<usize> {
        self.waiting.binary_search_by_key(&id, |(i, _)| *i).ok()
    }

    /// Put `seat` in the queue with `waker`, a clone the caller made before
    /// locking (see the transition table). Returns the waker it replaced, or
    /// `waker` itself if the queued one already wakes the same task, for the
    /// caller to drop after unlocking (dropping a waker may run user code:
    /// the last reference to a task).
    pub(crate) fn join(&mut self, seat: &mut Seat, waker: Waker) -> (Joined, Option<Waker>) {
        match seat.0 {
            Some(id) => match self.position(id) {
                Some(at) => {
                    let slot = &mut self.waiting[at].1;
                    let unused = if slot.will_wake(&waker) {
                        waker
                    } else {
                        std::mem::replace(slot, waker)
                    };
                    (Joined::Already, Some(unused))
                }
                None => {
                    // Woken, and found the ring full again: back in its place,
                    // ahead of every seat that joined after it.
                    let at = self.waiting.partition_point(|(i, _)| *i < id);
                    self.waiting.insert(at, (id, waker));
                    (Joined::Now, None)
                }
            },
            None => {
                let id = self.next_id;
                self.next_id += 1;
                seat.0 = Some(id);
                self.waiting.push_back((id, waker));
                (Joined::Now, None)
            }
        }
    }

    /// Take `seat` out for good (it posted, or gave up), saying where it
    /// was: a `Woken` seat's wake may have to pass to the next waiter. A
    /// `Queued` seat's waker is returned, for the caller to drop after
    /// unlocking.
    pub(crate) fn leave(&mut self, seat: &mut Seat) -> (Left, Option<Waker>) {
        let Some(id) = seat.0.take() else {
            return (Left::Absent, None);
        };
        match self.position(id) {
            Some(at) => (Left::Queued, self.waiting.remove(at).map(|(_, w)| w)),
            None => (Left::Woken, None),
        }
    }

    /// Take every waiter out (close, a resize's end), front first; wake
    /// them after unlocking.
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = Waker> + use<> {
        std::mem::take(&mut self.waiting)
            .into_iter()
            .map(|(_, w)| w)
    }

    /// Take the first waiter out; the caller wakes it after unlocking.
    pub(crate) fn pop(&mut self) -> Option<Waker> {
        self.waiting.pop_front().map(|(_, w)| w)
    }
}

/// The consumer-line half of the room signal: `WANTED` and the barrier
/// pair, in the consumer's own cache line beside the head, so that the
/// check after every head store hits the consumer's own line.
pub(crate) struct RoomFlags {
    /// The consumer must look at the room queue after a head store. With the
    /// asymmetric barrier it is `waiting` itself (a poster waits); without
    /// it (no `membarrier`) it is always set, and the cold path fences and
    /// reads `waiting`, so the hot path is the same load either way.
    /// Written only while a poster waits.
    check: AtomicBool,
    /// A poster waits for room: equal to `!queue.is_empty()` whenever the
    /// room lock is free (written only under it).
    waiting: AtomicBool,
    /// The barrier pair that orders the head store before the `check` load
    /// (consumer) against the flag store before the head load (waiting
    /// poster). Immutable after creation.
    barrier: RoomBarrier,
}

impl RoomFlags {
    #[inline]
    pub(crate) fn new() -> Self {
        let barrier = RoomBarrier::new();
        RoomFlags {
            check: AtomicBool::new(!barrier.is_asymmetric()),
            waiting: AtomicBool::new(false),
            barrier,
        }
    }

    /// The consumer's check after its head store: true if it must wake
    /// posters waiting for room ([`RoomQueue::wake`]).
    #[inline(always)]
    pub(crate) fn check_after_head_store(&self) -> bool {
        // The light half of the room barrier: with a waiting poster's heavy
        // half, either its post after joining sees this head, or this load
        // sees its flag. Relaxed: the barrier pair does the ordering, and the
        // queue itself is read under its lock.
        self.barrier.light();
        self.check.load(Ordering::Relaxed)
    }

    /// A poster waits for room now (`Query::room_wanted`).
    #[inline]
    pub(crate) fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Keep `waiting == !queue.is_empty()` (and `check` with it, under the
    /// asymmetric barrier); under the lock. Writes the consumer's line only
    /// when a flag changes.
    fn sync(&self, q: &WaitQueue) {
        let want = !q.is_empty();
        if self.waiting.load(Ordering::Relaxed) != want {
            self.waiting.store(want, Ordering::Relaxed);
            if self.barrier.is_asymmetric() {
                self.check.store(want, Ordering::Relaxed);
            }
        }
    }
}

/// The room queue behind its lock, on its own line; every operation keeps
/// the [`RoomFlags`] in line with it. Wakers are woken after the lock is
/// released, each with its panic caught and counted in `woken`.
pub(crate) struct RoomQueue {
    queue: Mutex<WaitQueue>,
    /// The queue's length as of the last release of its lock (written only
    /// under it), for `Query::room_waiters` to read without taking it. A
    /// statistic no ordering rests on: a std atomic even under loom, whose
    /// models would otherwise explore its every store.
    len: std::sync::atomic::AtomicUsize,
}

impl RoomQueue {
    pub(crate) fn new() -> Self {
        RoomQueue {
            queue: Mutex::new(WaitQueue::default()),
            len: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Run `f` on the queue under its lock, then bring the flags in line
    /// with it. No user code runs under the lock, so it is never poisoned
    /// by one; a poisoned lock (an allocation failure) is used as is.
    fn with<R>(&self, flags: &RoomFlags, f: impl FnOnce(&mut WaitQueue) -> R) -> R {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut q);
        flags.sync(&q);
        if self.len.load(Ordering::Relaxed) != q.len() {
            self.len.store(q.len(), Ordering::Relaxed);
        }
        r
    }

    /// Wake up to `n` waiting posters, first come first served (one per
    /// freed slot): the consumer's side after a head store whose check was
    /// set. (Waking every waiter, at a close or a resize's end, is
    /// `take_all`'s.) Each waker is woken after the lock is
    /// released, so a waker that posts again cannot deadlock on it.
    #[cold]
    #[inline(never)]
    pub(crate) fn wake(&self, flags: &RoomFlags, n: u64, woken: &AtomicU64) {
        if n == 0 {
            // A head store that freed nothing (a batch that unwound before
            // taking an event) owes no waiter a wake.
            return;
        }
        if !flags.barrier.is_asymmetric() {
            // No membarrier: `check` is always set, and this fence is the
            // consumer's half of a symmetric pair (the poster's heavy half is
            // a SeqCst fence too).
            fence(Ordering::SeqCst);
            if !flags.waiting.load(Ordering::Relaxed) {
                return;
            }
        }
        let (mut owed, mut passes) = (n, None);
        let mut next = self.with(flags, WaitQueue::pop);
        while let Some(w) = next {
            next = if wake_poster(w, woken) {
                owed -= 1;
                if owed == 0 {
                    return;
                }
                self.with(flags, WaitQueue::pop)
            } else {
                // Not one of the `n`: passed on.
                self.pass_on(flags, &mut passes)
            };
        }
    }

    /// The waiter to pass a wake on to after a `wake` that panicked (see
    /// `wake_poster`), within `passes`: the waiters queued when the first
    /// wake of this call panicked. A waker that joins the queue again from
    /// inside its `wake` (one that polls its future there) before it panics
    /// is at the front again: without the bound, this thread would pop it
    /// for ever.
    fn pass_on(&self, flags: &RoomFlags, passes: &mut Option<usize>) -> Option<Waker> {
        self.with(flags, |q| {
            let left = passes.get_or_insert(q.len());
            *left = left.checked_sub(1)?;
            q.pop()
        })
    }

    /// A poster found the ring full and will sleep until `waker` is woken:
    /// join the queue (first, or back in its place after a wake), and, if it
    /// joined now, run the heavy barrier. The caller must post once more
    /// after this and before it sleeps.
    pub(crate) fn join(&self, flags: &RoomFlags, seat: &mut Seat, waker: &Waker) {
        // User code: cloned before the queue is touched, so a clone that
        // panics leaves the queue and the seat as they were.
        let waker = waker.clone();
        let (joined, unused) = self.with(flags, |q| q.join(seat, waker));
        // A `Now` join hands nothing back, so a panic here comes from an
        // `Already` one, which needs no barrier: the seat stays queued with
        // its new waker.
        drop(unused);
        if joined == Joined::Now {
            // The heavy half of the room barrier: orders the flag store above
            // before the head load of the caller's next post.
            flags.barrier.heavy();
        }
    }

    /// A waiting poster is done: it `posted`, or gave up (deadline, close,
    /// drop). Leave the queue; if it had been woken, pass one wake on to the
    /// next waiter unless it posted and the ring is full now
    /// (`looks_full`, a snapshot taken after the lock that showed the seat
    /// woken, so it sees the head store whose check woke it).
    pub(crate) fn leave(
        &self,
        flags: &RoomFlags,
        seat: &mut Seat,
        posted: bool,
        looks_full: impl FnOnce() -> bool,
        woken: &AtomicU64,
    ) {
        if !seat.is_taken() {
            return;
        }
        let (passed, removed) = self.with(flags, |q| {
            let (left, removed) = q.leave(seat);
            let passed = match left {
                Left::Woken if !posted || !looks_full() => q.pop(),
                _ => None,
            };
            (passed, removed)
        });
        // User code, caught and not re-raised (see the module docs). Only a
        // queued seat hands a waker back, and only a woken one passes a wake
        // on: one leave does one or the other.
        if let Some(w) = removed {
            crate::unwind::caught(move || drop(w));
        }
        let (mut passed, mut passes) = (passed, None);
        while let Some(w) = passed.take() {
            if !wake_poster(w, woken) {
                passed = self.pass_on(flags, &mut passes);
            }
        }
    }

    /// How many seats are queued (`Query::room_waiters`), as of the last
    /// change; Relaxed, a snapshot as `Query`'s counters are.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Wake every waiting poster (close, a resize's end): each retries and
    /// sees the change. A poster that joins after this sees it in
    /// its post after joining (it locked the queue after us).
    pub(crate) fn wake_all(&self, flags: &RoomFlags, woken: &AtomicU64) {
        let all: Vec<Waker> = self.with(flags, |q| q.take_all().collect());
        for w in all {
            wake_poster(w, woken);
        }
    }
}

/// Wake one waiting poster, outside the room lock, and count it. A panic in
/// the waker is not re-raised (see the module docs): this thread may be the
/// consumer with a dequeued event in hand. Returns false if `wake` panicked:
/// its task may never run to use the slot, so the caller passes the wake on
/// to the next waiter (an extra wake costs that waiter a retry; a wake lost
/// would leave it asleep beside the free slot).
fn wake_poster(w: Waker, woken: &AtomicU64) -> bool {
    woken.fetch_add(1, Ordering::Relaxed);
    crate::unwind::caught(|| w.wake())
}

#[cfg(test)]
mod tests;
