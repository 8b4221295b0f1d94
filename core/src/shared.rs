//! The shared engine of an EVD: every atomic operation on the state word,
//! the loss word, the consumer's head and the slots, with its ordering
//! argued here and only here. The handles ([`Poster`](crate::Poster),
//! [`Consumer`](crate::Consumer), [`Upcalls`](crate::Upcalls)) call these
//! operations; none touches an atomic of its own.
//!
//! # The protocol on one page
//!
//! * **Words.** The state word ([`state`]) holds the tail, the notification
//!   flags, the upcall policy and instance count, and log2 of the capacity.
//!   The loss word ([`state::loss`]) holds close's first step and the count of
//!   events lost by lossy posts. The head is the consumer's own line.
//! * **Post** = reserve (one CAS on the state word: tail+1, and the
//!   notification if ARMED or an upcall may start), write the slot, publish
//!   its stamp (`Release`), then notify. A full ring refuses without writing
//!   anything shared. A lossy post that gives up commits on the loss word,
//!   then does one RMW on the state word to take the notification.
//! * **Dequeue** = the head slot's stamp (`Acquire`); if published, take the
//!   value and store the head (`Release`). If not, the loss word (a
//!   read-mostly line) says whether close has begun; only then is the state
//!   word read, to tell "reserved, not yet written" from "closed and drained".
//!   Reports and events alternate ([`ConsumerLine::last_was_report`]).
//! * **Arm** = one CAS on the state word that either sets ARMED (nothing
//!   queued) or fails/declines because the tail moved (pending). A loss
//!   committed before the arm's CAS is seen after it (both are RMWs on the
//!   state word), so it is reported as pending. An arm that can tell
//!   "pending" without the word says so without loading it: the head slot is
//!   published, or the tail the consumer saw at an earlier load of the word
//!   ([`ConsumerLine::seen_tail`]) is at least the threshold ahead of the
//!   head. Every ticket in [head, seen tail) was reserved and will be
//!   published (the tail only grows, and a reserved ticket is always
//!   written), so the word's own answer would be pending too and would
//!   change nothing; no ordering is needed, as nothing is installed and the
//!   caller's next dequeue reads the stamp with `Acquire`.
//! * **Close** = loss word closed, then CLOSED in the state word; anyone who
//!   sees the first without the second finishes it. Whoever sees CLOSED in the
//!   state word with `Acquire` sees the final loss count.
//! * **Resize** = RESIZING stops reservations, the queued events move, the
//!   buffer pointer is swapped (`Release`), and clearing RESIZING releases it
//!   to the next reservation (`Acquire`).
//! * **Upcalls** = the TOKEN bit stands for the consumer side; taking and
//!   giving it back are CASes on the state word (`AcqRel`), so the head and
//!   slot reads of one holder happen before the next holder's.
//! * **Room** = a poster that waits for a free slot joins the room queue
//!   (setting `room_check` in the consumer's line), runs the heavy barrier
//!   and posts again before sleeping; every head store is followed by the
//!   light barrier and a load of `room_check`, which wakes one waiter per
//!   freed slot when set ([`crate::room`]).

use crate::error::{Overflow, ResizeError, TryDequeueError};
use crate::notify::{CnoLink, CnoTarget, NotifyTargets, Reached};
use crate::pace::Pacer;
use crate::query::{Counters, Query, UpcallPolicy};
use crate::ring::Buffer;
use crate::room::{Joined, Left, Seat, WaitQueue};
use crate::state::{
    self, loss, Arm, Enable, Exit, Invoke, Notify, PolicyBits, Reacquire, Reserve, ReserveBatch,
};
use crate::sync::{
    fence, Arc, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Backoff, Mutex, Ordering,
    RoomBarrier, StateWord,
};
use crate::unwind::Panics;
use crate::upcall::handler::{HandlerSlot, Installed, Loaded};
use crossbeam_utils::CachePadded;
use std::task::Waker;

/// The head epoch is the head divided by 2^40: a poster trusts its cached
/// head only while it is at most one epoch behind, so the distance from it to
/// the tail stays below 3·2^40 + capacity, well inside the 2^44 range in which
/// the word's tail is compared.
pub(crate) const HEAD_EPOCH_SHIFT: u32 = 40;

/// Why [`Shared::reserve`] handed out no ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not one slot is free; nothing was written.
    Full,
    /// Full, and an upcall policy was idle: the caller took the token and
    /// must run an instance (which drains the ring), then retry.
    FullTookToken,
    /// The EVD is closed.
    Closed,
}

/// Attempts [`Shared::query`] makes at reading the head unchanged around its
/// load of the word before it settles for a clamped figure.
const QUERY_ATTEMPTS: usize = 64;

/// The lines the consumer (or the upcall instance holding the token) writes
/// on every dequeue; posters read `head` only when the ring looks full.
struct ConsumerLine {
    /// The consumer's head, a full 64-bit count of dequeued events. Written
    /// only by the consumer (or the token holder), with `Release` after the
    /// value is moved out, so a poster that loads it with `Acquire` may reuse
    /// the slot.
    head: AtomicU64,
    /// The last dequeue returned a loss report: the next one prefers an event,
    /// so reports and events alternate and a flood of losses cannot starve
    /// the consumer of the queued events. Touched only by the consumer side.
    last_was_report: AtomicBool,
    /// The tail, as a full ticket count ([`state::tail_count`]), at the
    /// consumer side's last arm that loaded the word, or its last empty check
    /// on a closed EVD (other loads of the word do not record it: any earlier
    /// tail is still a lower bound). Every ticket from the head up to it was
    /// reserved and will be published, so while the head is below it an arm
    /// is `Pending` without looking at the word ([`state::known_queued`]).
    /// Touched only by the consumer side (the token holder, under upcalls);
    /// written only after a load of the word, which the hot paths do not
    /// make. Anything that moves the head or the tickets other than a dequeue
    /// must move it too (only the tests' `fast_forward` does).
    seen_tail: AtomicU64,
    /// The consumer must look at the room queue after a head store. With the
    /// asymmetric barrier it is `room_waiting` itself (a poster waits); without
    /// it (no `membarrier`) it is always set, and the cold path fences and
    /// reads `room_waiting`, so the hot path is the same load either way.
    /// Here, beside the head, so the check hits the consumer's own line;
    /// written only while a poster waits.
    room_check: AtomicBool,
    /// A poster waits for room: equal to `!room.is_empty()` whenever the room
    /// lock is free (written only under it).
    room_waiting: AtomicBool,
    /// The barrier pair that orders the head store before the `room_check`
    /// load (consumer) against the flag store before the head load (waiting
    /// poster). Immutable after creation.
    room_barrier: RoomBarrier,
    /// When a dequeue that finds nothing lingers ([`crate::pace`]): touched
    /// only on that path.
    pub(crate) pacer: Pacer,
}

/// Fields every post reads and nobody writes in steady state.
struct ReadMostly<T> {
    /// The current ring. Replaced only by a resize, while `RESIZING` holds
    /// every poster off (see [`Shared::resize`]).
    buffer: AtomicPtr<Buffer<T>>,
    /// `head >> HEAD_EPOCH_SHIFT`, stored by the consumer when it changes
    /// (every 2^40 events): bounds how stale a poster's cached head may be.
    head_epoch: AtomicU64,
}

/// What the posters and the consumer share. Each group of fields sits on its
/// own cache line by who writes it: the state word (every post), the
/// consumer's line (every dequeue), the read-mostly line (every post reads,
/// a resize writes), the loss word (close and lossy posts), the notification
/// targets (a waiter registering its waker), the rest.
pub(crate) struct Shared<T> {
    /// The state word: tail, flags, policy, instances, capacity (see [`state`]).
    state: CachePadded<StateWord>,
    /// Written by the consumer side on every dequeue.
    consumer: CachePadded<ConsumerLine>,
    /// Read by every post.
    read_mostly: CachePadded<ReadMostly<T>>,
    /// The loss word ([`state::loss`]): close's first step and the count of
    /// events lost by lossy posts, not yet reported.
    losses: CachePadded<AtomicU64>,
    /// Where notifications go: the registered waker and the optional eventfd.
    targets: CachePadded<NotifyTargets>,
    /// The upcall handler.
    handler: HandlerSlot<T>,
    /// Waits fail with `Unwaitable` while this is set.
    unwaitable: AtomicBool,
    /// Live `Poster` handles; the last one to drop closes the EVD.
    posters: AtomicUsize,
    /// Statistics that are not derived from the word and the head.
    counters: CachePadded<Counters>,
    /// Posters waiting for room, FIFO ([`crate::room`]). Locked only by a
    /// poster that waits and by a consumer that found `room_check` set.
    room: CachePadded<Mutex<WaitQueue>>,
    /// The CNO this EVD is bound to, if any ([`crate::cno`]).
    cno: CnoLink,
}

// SAFETY: the slots hand each `T` from one thread to another exactly once
// (publish/take), so `T: Send` is what is needed; every other field is atomic,
// except the handler slot, whose handlers are `Send + Sync` (shared) or
// `Send` and called only by the token holder (exclusive, see
// `upcall::handler::Exclusive`).
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above; shared access goes through atomics, the slot protocol and
// the token.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub(crate) fn new(log2: u32, buffer: Buffer<T>) -> Self {
        let room_barrier = RoomBarrier::new();
        Shared {
            state: CachePadded::new(StateWord::new(state::initial(log2))),
            consumer: CachePadded::new(ConsumerLine {
                head: AtomicU64::new(0),
                last_was_report: AtomicBool::new(false),
                seen_tail: AtomicU64::new(0),
                room_check: AtomicBool::new(!room_barrier.is_asymmetric()),
                room_waiting: AtomicBool::new(false),
                room_barrier,
                pacer: Pacer::new(0),
            }),
            read_mostly: CachePadded::new(ReadMostly {
                buffer: AtomicPtr::new(Box::into_raw(Box::new(buffer))),
                head_epoch: AtomicU64::new(0),
            }),
            losses: CachePadded::new(AtomicU64::new(0)),
            targets: CachePadded::new(NotifyTargets::new()),
            handler: HandlerSlot::new(),
            unwaitable: AtomicBool::new(false),
            posters: AtomicUsize::new(1),
            counters: CachePadded::new(Counters::default()),
            room: CachePadded::new(Mutex::new(WaitQueue::default())),
            cno: CnoLink::new(),
        }
    }

    /// The address of the state word (what the shuttle CAS observer reports).
    #[cfg(shuttle)]
    pub(crate) fn state_word_addr(&self) -> usize {
        &*self.state as *const StateWord as usize
    }

    /// This EVD's id in the thread's handler frames ([`crate::frames`]): the
    /// address of its shared state, fixed while any handle lives.
    #[inline]
    pub(crate) fn id(&self) -> usize {
        self as *const Self as usize
    }

    /// The consumer's head (only the consumer side calls this for its own
    /// head; posters load it with `Acquire` in their full check).
    #[inline(always)]
    pub(crate) fn head(&self) -> u64 {
        self.consumer.head.load(Ordering::Relaxed)
    }

    /// The current ring, as a raw pointer for [`Buffer::publish`].
    #[inline(always)]
    pub(crate) fn buffer_ptr(&self) -> *const Buffer<T> {
        // Acquire: as in `buffer`.
        self.read_mostly.buffer.load(Ordering::Acquire)
    }

    /// Store the consumer's new head (after the values before it were moved
    /// out), bump the head epoch when it crosses a boundary, and wake posters
    /// waiting for the slots it freed.
    #[inline(always)]
    fn publish_head(&self, old: u64, new: u64) {
        if self.store_head(old, new) {
            self.wake_room(new.wrapping_sub(old));
        }
    }

    /// [`Shared::publish_head`] up to the room check: store the head, bump
    /// the epoch, and return true if the caller must then wake posters
    /// waiting for room (with [`Shared::wake_room`]).
    #[inline(always)]
    fn store_head(&self, old: u64, new: u64) -> bool {
        // Release: the values were moved out before a poster may reuse the
        // slots (it loads the head with Acquire).
        self.consumer.head.store(new, Ordering::Release);
        if new >> HEAD_EPOCH_SHIFT != old >> HEAD_EPOCH_SHIFT {
            self.read_mostly
                .head_epoch
                .store(new >> HEAD_EPOCH_SHIFT, Ordering::Release);
        }
        // The light half of the room barrier: with a waiting poster's heavy
        // half, either its post after joining sees this head, or this load
        // sees its flag. Relaxed: the barrier pair does the ordering, and the
        // queue itself is read under its lock.
        self.consumer.room_barrier.light();
        self.consumer.room_check.load(Ordering::Relaxed)
    }

    /// Wake posters waiting for the `n` slots just freed, then hand `r`
    /// back: the room wake of a one-event dequeue, with the event passed
    /// through the call so that the fast path keeps nothing live across it
    /// and, out of line, saves no registers (BENCHMARKS.md, runs 30-32).
    #[cold]
    #[inline(never)]
    fn wake_room_then<R>(&self, n: u64, r: R) -> R {
        self.wake_room(n);
        r
    }

    // ---- the room signal (posters waiting for a free slot) ----

    /// Run `f` on the room queue under its lock, then bring the flags in
    /// line with it. No user code runs under the lock except a waker's
    /// clone; a panic there leaves the queue consistent, so a poisoned lock
    /// is used as is.
    fn with_room<R>(&self, f: impl FnOnce(&mut WaitQueue) -> R) -> R {
        let mut q = self.room.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut q);
        self.sync_room_wanted(&q);
        r
    }

    /// Keep `room_waiting == !queue.is_empty()` (and `room_check` with it,
    /// under the asymmetric barrier); under the lock. Writes the consumer's
    /// line only when a flag changes.
    fn sync_room_wanted(&self, q: &WaitQueue) {
        let want = !q.is_empty();
        let c = &*self.consumer;
        if c.room_waiting.load(Ordering::Relaxed) != want {
            c.room_waiting.store(want, Ordering::Relaxed);
            if c.room_barrier.is_asymmetric() {
                c.room_check.store(want, Ordering::Relaxed);
            }
        }
    }

    /// Wake up to `n` waiting posters, first come first served (one per freed
    /// slot; `u64::MAX` for all). Each waker is woken after the lock is
    /// released, so a waker that posts again cannot deadlock on it.
    #[cold]
    #[inline(never)]
    fn wake_room(&self, n: u64) {
        if !self.consumer.room_barrier.is_asymmetric() {
            // No membarrier: `room_check` is always set, and this fence is the
            // consumer's half of a symmetric pair (the poster's heavy half is
            // a SeqCst fence too).
            fence(Ordering::SeqCst);
            if !self.consumer.room_waiting.load(Ordering::Relaxed) {
                return;
            }
        }
        for _ in 0..n {
            match self.with_room(WaitQueue::pop) {
                Some(w) => self.wake_poster(w),
                None => return,
            }
        }
    }

    /// Wake one waiting poster, outside the room lock. A panic in the
    /// waker is not re-raised here (see [`crate::room`]): this thread may be
    /// the consumer with a dequeued event in hand.
    fn wake_poster(&self, w: Waker) {
        self.counters.room_wakes.fetch_add(1, Ordering::Relaxed);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake()));
    }

    /// A poster found the ring full and will sleep until `waker` is woken:
    /// join the room queue (first, or back at the front after a wake), and,
    /// if it joined now, run the heavy barrier. The caller must post once
    /// more after this and before it sleeps.
    pub(crate) fn room_join(&self, seat: &mut Seat, waker: &Waker) {
        let (joined, replaced) = self.with_room(|q| q.join(seat, waker));
        drop(replaced);
        if joined == Joined::Now {
            // The heavy half of the room barrier: orders the flag store above
            // before the head load of the caller's next post.
            self.consumer.room_barrier.heavy();
        }
    }

    /// A waiting poster is done: it `posted`, or gave up (deadline, close,
    /// drop). Leave the queue; if it had been woken, pass one wake on to the
    /// next waiter unless it posted and the ring is full now (the rule and
    /// why in [`crate::room`]). The fullness snapshot is taken after the
    /// lock that showed the seat woken, so it sees the head store whose
    /// check woke it.
    pub(crate) fn room_leave(&self, seat: &mut Seat, posted: bool) {
        if !seat.is_taken() {
            return;
        }
        let (passed, removed) = self.with_room(|q| {
            let (left, removed) = q.leave(seat);
            let passed = match left {
                Left::Woken if !posted || !self.looks_full() => q.pop(),
                _ => None,
            };
            (passed, removed)
        });
        drop(removed);
        if let Some(w) = passed {
            self.wake_poster(w);
        }
    }

    /// Every slot is reserved now (a snapshot).
    fn looks_full(&self) -> bool {
        let (w, _, len) = self.word_head_len();
        len == state::capacity(w)
    }

    /// Wake every waiting poster (close, a resize that grew the ring): each
    /// retries and sees the change. A poster that joins after this sees it in
    /// its post after joining (it locked the queue after us).
    fn wake_all_room(&self) {
        let all: Vec<Waker> = self.with_room(|q| q.take_all().collect());
        for w in all {
            self.wake_poster(w);
        }
    }

    /// A poster waits for room now (`Query::room_wanted`).
    pub(crate) fn room_wanted(&self) -> bool {
        self.consumer.room_waiting.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn buffer(&self) -> &Buffer<T> {
        // Acquire: pairs with the `Release` store in `resize`. Posters reach
        // this only after a reservation CAS that already synchronized with the
        // end of any resize; the consumer is the writer. Either way the buffer
        // is live: it is freed only by a resize, which first waits for every
        // reserved ticket to be published, and the consumer side never calls
        // this concurrently with its own resize.
        let p = self.buffer_ptr();
        // SAFETY: never null (set at creation), and see above for liveness.
        unsafe { &*p }
    }

    /// Install the ring a resize built; returns the old one. Caller: the
    /// consumer's resize, while RESIZING holds every poster off.
    fn swap_buffer(&self, fresh: Buffer<T>) -> *mut Buffer<T> {
        // Release: a poster whose reservation reads the word that ends the
        // resize (released after this) sees the new pointer.
        self.read_mostly
            .buffer
            .swap(Box::into_raw(Box::new(fresh)), Ordering::Release)
    }

    /// The ring's capacity, from the read-mostly line (the consumer side
    /// only: a resize is the consumer's own call).
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.buffer().capacity()
    }

    /// Apply the transition `f` to the state word and install its result with
    /// a CAS, retrying on a changed word, until it succeeds or `f` declines.
    #[inline]
    fn transition<R>(&self, success: Ordering, mut f: impl FnMut(u64) -> Result<(u64, R), R>) -> R {
        let mut w = self.state.load(Ordering::Relaxed);
        loop {
            match f(w) {
                Err(r) => return r,
                Ok((new, r)) => {
                    match self
                        .state
                        .compare_exchange_weak(w, new, success, Ordering::Relaxed)
                    {
                        Ok(_) => return r,
                        Err(cur) => w = cur,
                    }
                }
            }
        }
    }

    /// Apply `f` to the loss word until the CAS succeeds or `f` declines;
    /// returns the word installed, or `None`.
    fn transition_losses(
        &self,
        success: Ordering,
        mut f: impl FnMut(u64) -> Option<u64>,
    ) -> Option<u64> {
        let mut l = self.losses.load(Ordering::Relaxed);
        loop {
            let new = f(l)?;
            match self
                .losses
                .compare_exchange_weak(l, new, success, Ordering::Relaxed)
            {
                Ok(_) => return Some(new),
                Err(cur) => l = cur,
            }
        }
    }

    /// Notify an armed consumer: count it, wake its waker, poke its eventfd.
    pub(crate) fn notify_consumer(&self) {
        self.counters.notifications.fetch_add(1, Ordering::Relaxed);
        self.targets.notify();
    }

    /// This thread took `CNO_ARMED` (a post, close or loss): put the EVD's
    /// key in its CNO's ready set. A dropped CNO has nobody waiting on it:
    /// the EVD's own targets are notified instead.
    #[cold]
    pub(crate) fn trigger_cno(&self) {
        // SAFETY: this thread took CNO_ARMED with an Acquire CAS, which the
        // enable's Release CAS (after the link was written) precedes; the
        // consumer rewrites the link only once this trigger reached its slot.
        let Some((target, slot)) = (unsafe { self.cno.current() }) else {
            debug_assert!(false, "CNO_ARMED without a binding");
            return;
        };
        // SAFETY: the link keeps every CNO the EVD was bound to alive for as
        // long as the EVD, and this thread holds the EVD.
        let target = unsafe { &*target };
        if target.trigger(slot) == Reached::CnoGone {
            self.notify_consumer();
        }
    }

    /// Point the trigger at `slot` of the CNO `target`, or at nothing.
    /// Caller: the EVD's consumer, after the disable barrier
    /// (`Consumer::settle`: [`Shared::cno_disarm`], then every owed trigger
    /// reached its slot), or before the first enable.
    pub(crate) fn set_cno_target<C: CnoTarget + 'static>(&self, target: Option<(Arc<C>, u32)>) {
        debug_assert!(!state::has(
            self.state.load(Ordering::Relaxed),
            state::CNO_ARMED
        ));
        // SAFETY: CNO_ARMED is clear and the caller waited for every trigger
        // that took it (`cno_disable`), so no thread reads the link.
        unsafe { self.cno.set(target) }
    }

    /// Enable the EVD on its CNO: the arm-then-check CAS. Returns what it
    /// found and whether a trigger is now owed (the CAS set `CNO_ARMED` and
    /// nothing took it back here).
    pub(crate) fn cno_enable(&self) -> (Arm, bool) {
        let h = self.head();
        // AcqRel, as `arm`: Release publishes the binding to the poster whose
        // Acquire reservation takes CNO_ARMED; Acquire makes a loss visible
        // if its poster's RMW on the word came first.
        let r = self.transition(Ordering::AcqRel, |w| match state::enable_cno(w, h) {
            Enable::Armed(new) => Ok((new, Enable::Armed(new))),
            other => Err(other),
        });
        match r {
            Enable::Armed(w) if self.loss_pending() => {
                // As in `arm`: a loss whose RMW came before our CAS is pending
                // work: take the enable back and report it. If a trigger took
                // the enable first, its key is on the way: that is `Armed`
                // (a key comes exactly when the enable says `Armed`).
                if self.cno_disarm() {
                    (Arm::Pending, false)
                } else {
                    (Arm::Armed(w), true)
                }
            }
            Enable::Armed(w) => (Arm::Armed(w), true),
            Enable::AlreadyArmed => (Arm::Armed(self.state.load(Ordering::Relaxed)), false),
            Enable::Pending => (Arm::Pending, false),
            Enable::Closed => {
                // As in `arm`: the final loss count is visible after the fence.
                fence(Ordering::Acquire);
                if self.loss_pending() {
                    (Arm::Pending, false)
                } else {
                    (Arm::Closed, false)
                }
            }
        }
    }

    /// Clear `CNO_ARMED`; true if this call cleared it (so no trigger will
    /// come for that enable).
    pub(crate) fn cno_disarm(&self) -> bool {
        // Relaxed: clearing the flag publishes nothing; the barrier that
        // follows orders the link's rewrite through the slot's count.
        self.transition(Ordering::Relaxed, |w| match state::disable_cno(w) {
            Some(new) => Ok((new, true)),
            None => Err(false),
        })
    }

    /// Close: posts are refused from now on; an armed consumer is woken.
    ///
    /// Two steps: the loss word first ([`loss::close`]: no loss is committed
    /// after it), then the state word ([`state::close`]: no ticket is handed
    /// out after it). Anyone who finds the first step done and the second not
    /// yet may finish it ([`Shared::finish_close`]), so a closer descheduled
    /// between the two holds nobody up.
    pub(crate) fn close(&self) {
        // AcqRel: Release orders the committed losses before the state word's
        // CLOSED (released by `finish_close`, which follows in this thread).
        self.transition_losses(Ordering::AcqRel, |l| {
            (!loss::is_closed(l)).then_some(loss::close(l))
        });
        self.finish_close();
    }

    /// Close's second step: CLOSED in the state word, and the wake of an
    /// armed consumer. Idempotent. Called only after the loss word is closed.
    fn finish_close(&self) {
        // AcqRel: Release so that whoever sees CLOSED with an Acquire load
        // also sees the loss word closed (and so the final loss count); Acquire
        // to take over an arm's registered waker.
        let (wake, trigger_cno) = self.transition(Ordering::AcqRel, |w| {
            if state::has(w, state::CLOSED) {
                Err((false, false))
            } else {
                let c = state::close(w);
                Ok((c.new, (c.wake, c.trigger_cno)))
            }
        });
        // After CLOSED: a woken waiter's next post is refused as closed. The
        // room wakes come first: they catch their wakers' panics, while the
        // consumer's waker (or the CNO's) may panic out of this call, and
        // must not leave a waiting poster asleep on a closed EVD.
        self.wake_all_room();
        // Both owed notifications are delivered even if the first target's
        // waker panics; the first panic goes on after them.
        let mut panics = Panics::default();
        if trigger_cno {
            panics.run(|| self.trigger_cno());
        }
        if wake {
            panics.run(|| self.notify_consumer());
        }
        panics.resume();
    }

    /// Cap the consumer's linger ([`crate::pace`]).
    pub(crate) fn set_linger_cap(&self, cap: std::time::Duration) {
        self.consumer.pacer.set_cap(cap);
    }

    /// The consumer's linger cap.
    pub(crate) fn linger_cap(&self) -> std::time::Duration {
        self.consumer.pacer.cap()
    }

    /// Wait one gap of a waiter's back-off by the clock, touching no line a
    /// poster writes ([`crate::pace`]).
    pub(crate) fn pace_gap(&self) {
        self.consumer.pacer.gap();
    }

    /// True if a loss report is waiting or close has begun: a waiter's
    /// back-off, which looks only at the slots, must stop looking and decide
    /// (one load of the read-mostly loss line; a hint, the decision reads
    /// the words again).
    #[inline(always)]
    pub(crate) fn report_or_close_begun(&self) -> bool {
        let l = self.losses.load(Ordering::Relaxed);
        loss::pending(l) != 0 || loss::is_closed(l)
    }

    /// True if a loss report is waiting (a load of the read-mostly loss line).
    #[inline(always)]
    pub(crate) fn loss_pending(&self) -> bool {
        loss::pending(self.losses.load(Ordering::Relaxed)) != 0
    }

    /// Take the pending loss report, if any, and remember that the consumer
    /// side was just told (its next dequeue prefers an event).
    #[inline]
    pub(crate) fn take_report(&self) -> Option<Overflow> {
        if !self.loss_pending() {
            return None;
        }
        let mut lost = 0;
        // Relaxed: the count carries no data; what must be ordered with it
        // (the arm, the end of stream) is ordered through the state word.
        self.transition_losses(Ordering::Relaxed, |l| {
            let (new, n) = loss::take(l)?;
            lost = n;
            Some(new)
        })?;
        self.consumer.last_was_report.store(true, Ordering::Relaxed);
        Some(Overflow { lost })
    }

    /// Dequeue one event at the head. Caller: the consumer, or the upcall
    /// instance holding the token.
    ///
    /// Reads the consumer's own line, the read-mostly lines (buffer pointer,
    /// loss word) and the head slot's stamp; the state word only once the loss
    /// word says close has begun and the head slot is empty.
    #[inline(always)]
    pub(crate) fn dequeue_one(&self) -> Result<T, TryDequeueError> {
        let last_was_report = self.consumer.last_was_report.load(Ordering::Relaxed);
        if !last_was_report {
            if let Some(o) = self.take_report() {
                return Err(TryDequeueError::Overflow(o));
            }
        }
        let h = self.head();
        // SAFETY: we are the only consumer and `h` is the head; on `Some` the
        // head moves past it right below, so it is taken once.
        if let Some(v) = unsafe { self.buffer().take_published(h) } {
            return Ok(self.took_one(h, v, last_was_report));
        }
        if self.consumer.pacer.after_run(h) {
            // Right after a run: let the posters get ahead, then look again
            // (`crate::pace`).
            self.consumer.pacer.linger(h);
            // SAFETY: as above.
            if let Some(v) = unsafe { self.buffer().take_published(h) } {
                return Ok(self.took_one(h, v, last_was_report));
            }
        }
        self.nothing_ready(h, last_was_report)
    }

    /// The event at `h` was taken: move the head past it (waking a poster
    /// that waits for room if one does), and an event now follows any report.
    #[inline(always)]
    fn took_one(&self, h: u64, v: T, last_was_report: bool) -> T {
        let wake_room = self.store_head(h, h.wrapping_add(1));
        if last_was_report {
            self.consumer
                .last_was_report
                .store(false, Ordering::Relaxed);
        }
        if wake_room {
            return self.wake_room_then(1, v);
        }
        v
    }

    /// The head slot is unpublished: a loss report if one waits (even right
    /// after a report: there is no event to prefer), else empty or end of
    /// stream.
    #[cold]
    fn nothing_ready<R>(&self, h: u64, last_was_report: bool) -> Result<R, TryDequeueError> {
        if last_was_report {
            self.consumer
                .last_was_report
                .store(false, Ordering::Relaxed);
            if let Some(o) = self.take_report() {
                return Err(TryDequeueError::Overflow(o));
            }
        }
        Err(self.empty_or_end(h))
    }

    /// Empty, or end of stream, for a consumer at `h` whose head slot is
    /// unpublished.
    ///
    /// The loss word is closed before the state word, so while it is open the
    /// EVD is open: "empty" without touching the posters' line. Once it is
    /// closed the state word says whether tickets are still outstanding.
    #[inline]
    fn empty_or_end(&self, h: u64) -> TryDequeueError {
        // Acquire: pairs with close's Release on the loss word.
        if !loss::is_closed(self.losses.load(Ordering::Acquire)) {
            return TryDequeueError::Empty;
        }
        // Acquire: the loss word was closed before this load, so the word read
        // here is at or after every reservation that will ever succeed once
        // CLOSED is in it.
        let mut w = self.state.load(Ordering::Acquire);
        if !state::has(w, state::CLOSED) {
            // The closer is between its two steps: finish for it.
            self.finish_close();
            w = self.state.load(Ordering::Acquire);
        }
        self.saw_word(w, h);
        if state::len(w, h) != 0 {
            // Reserved tickets whose posters are still writing them.
            return TryDequeueError::Empty;
        }
        // Closed and drained. The loss count is final (no loss is committed
        // once the loss word is closed): report what is left, then the end.
        match self.take_report() {
            Some(o) => TryDequeueError::Overflow(o),
            None => TryDequeueError::Closed,
        }
    }

    /// Published events at the head, counting at most `limit` (stamps only).
    pub(crate) fn ready(&self, limit: u64) -> u64 {
        let h = self.head();
        let buf = self.buffer();
        let mut n = 0;
        while n < limit && buf.is_published(h.wrapping_add(n)) {
            n += 1;
        }
        n
    }

    /// The start of a batch dequeue of up to `max` events: a pending loss
    /// report (unless the last dequeue was one) or the end of stream as the
    /// error; `None` when there is nothing to take now (or `max` is 0: then
    /// nothing is looked at or changed); else how many are published at the
    /// head, and whether the last dequeue was a report (for
    /// [`Shared::batch_end`]).
    fn batch_start(&self, max: usize) -> Result<Option<(u64, bool)>, TryDequeueError> {
        if max == 0 {
            return Ok(None);
        }
        let last_was_report = self.consumer.last_was_report.load(Ordering::Relaxed);
        if !last_was_report {
            if let Some(o) = self.take_report() {
                return Err(TryDequeueError::Overflow(o));
            }
        }
        let (h, max64, pacer) = (self.head(), max as u64, &self.consumer.pacer);
        let n = if pacer.take_drained(h) {
            // The last batch took a run and its scan ended on the line a
            // poster is writing: let the posters get ahead before this scan
            // (`crate::pace`).
            pacer.linger(h);
            self.ready(max64)
        } else {
            let n = self.ready(max64);
            if crate::pace::is_short(n, max64) && pacer.after_run(h) {
                // Right after a run the scan ended within a few slots of
                // where it started: the same, before looking again.
                pacer.linger(h);
                self.ready(max64)
            } else {
                n
            }
        };
        pacer.batch_taken(n, max64);
        if n == 0 {
            return match self.nothing_ready::<()>(self.head(), last_was_report) {
                Err(TryDequeueError::Empty) => Ok(None),
                Err(e) => Err(e),
                Ok(()) => unreachable!("nothing_ready returns no event"),
            };
        }
        Ok(Some((n, last_was_report)))
    }

    /// The end of a batch dequeue that moved `n` events out from `head`:
    /// one head store for them all, and an event now follows any report.
    fn batch_end(&self, head: u64, n: u64, last_was_report: bool) {
        self.publish_head(head, head.wrapping_add(n));
        if last_was_report {
            self.consumer
                .last_was_report
                .store(false, Ordering::Relaxed);
        }
    }

    /// Move up to `max` published events at the head into `out`, with one
    /// head store. Caller: the consumer side.
    pub(crate) fn dequeue_batch(
        &self,
        out: &mut Vec<T>,
        max: usize,
    ) -> Result<usize, TryDequeueError> {
        let Some((n, last_was_report)) = self.batch_start(max)? else {
            return Ok(0);
        };
        let n = n as usize;
        // Reserve before taking anything, so no allocation (or its panic)
        // comes between a take and its store into `out`.
        out.reserve(n);
        let h = self.head();
        let buf = self.buffer();
        let len = out.len();
        for (i, dst) in out.spare_capacity_mut()[..n].iter_mut().enumerate() {
            // SAFETY: published (counted above; a published slot stays so until
            // the consumer takes it) and at or past the head.
            dst.write(unsafe { buf.take(h.wrapping_add(i as u64)) });
        }
        // SAFETY: the `n` elements after `len` were written just above (a
        // take cannot panic: it is a read of an initialized value).
        unsafe { out.set_len(len + n) };
        // One head store for the whole batch, after every value moved.
        self.batch_end(h, n as u64, last_was_report);
        Ok(n)
    }

    /// Hand up to `max` published events at the head to `f`, in order, with
    /// one head store. Caller: the consumer side. If `f` panics, the events
    /// it was given are gone (it owned them) and the head still moves past
    /// them; the rest stay queued.
    pub(crate) fn dequeue_with(
        &self,
        max: usize,
        mut f: impl FnMut(T),
    ) -> Result<usize, TryDequeueError> {
        let Some((n, last_was_report)) = self.batch_start(max)? else {
            return Ok(0);
        };
        /// Publishes the head past the events taken so far when dropped: at
        /// the end, or while `f` unwinds.
        struct Taken<'a, T> {
            shared: &'a Shared<T>,
            head: u64,
            count: u64,
            last_was_report: bool,
        }
        impl<T> Drop for Taken<'_, T> {
            fn drop(&mut self) {
                self.shared
                    .batch_end(self.head, self.count, self.last_was_report);
            }
        }
        let mut taken = Taken {
            shared: self,
            head: self.head(),
            count: 0,
            last_was_report,
        };
        let buf = self.buffer();
        // `f` runs as this EVD's consumer inside a handler call, as an upcall
        // handler does: a post from it that would wait for room here is
        // refused at once (the room it waits for is freed after `f`).
        crate::frames::as_handler_of(self.id(), || {
            while taken.count < n {
                // SAFETY: published (counted above; a published slot stays so
                // until the consumer takes it) and at or past the head;
                // counted before `f` runs, so a panic in `f` cannot make it
                // taken twice.
                let v = unsafe { buf.take(taken.head.wrapping_add(taken.count)) };
                taken.count += 1;
                f(v);
            }
        });
        Ok(n as usize)
    }

    /// The arm-then-check CAS for a consumer at its current head. A loss
    /// report waiting to be dequeued counts as pending work.
    #[inline]
    pub(crate) fn arm(&self, threshold: u64) -> Arm {
        let h = self.head();
        if self.known_pending(h, threshold) {
            return Arm::Pending;
        }
        // AcqRel: Release publishes the waker registered before this arm to
        // the poster whose Acquire reservation CAS disarms it; Acquire makes a
        // loss visible if its poster's RMW on the word came first.
        let mut seen = 0;
        let r = self.transition(Ordering::AcqRel, |w| {
            seen = w;
            match state::arm(w, h, threshold) {
                Arm::Armed(new) => Ok((new, Arm::Armed(new))),
                other => Err(other),
            }
        });
        self.saw_word(seen, h);
        match r {
            Arm::Armed(_) if self.loss_pending() => {
                // A loss was committed and its poster's RMW on the word came
                // before our CAS, so it did not see ARMED: the report is
                // pending work.
                self.disarm();
                Arm::Pending
            }
            Arm::Closed => {
                // The word that said "closed and drained" was loaded Relaxed;
                // this fence makes the loss word's final count (closed before
                // the word's CLOSED was released) visible to the load below.
                fence(Ordering::Acquire);
                if self.loss_pending() {
                    Arm::Pending
                } else {
                    Arm::Closed
                }
            }
            other => other,
        }
    }

    /// At least `threshold` events are queued or on their way, known without
    /// loading the state word: the head slot is published (for a threshold
    /// of 1), or the tail seen at the last load of the word is far enough
    /// ahead. Then [`state::arm`] would say `Pending` (a later word's tail
    /// is at or past the seen one) and change nothing, so this is that
    /// outcome without the load. The stamp catches the event that landed
    /// between the consumer's empty dequeue and its arm; the seen tail keeps
    /// a consumer that re-arms while a poster is between its reservation and
    /// its publish from pulling the posters' line on every retry
    /// (BENCHMARKS.md, run 36).
    #[inline]
    fn known_pending(&self, h: u64, threshold: u64) -> bool {
        if threshold == 1 && self.buffer().is_published(h) {
            return true;
        }
        let seen_tail = self.consumer.seen_tail.load(Ordering::Relaxed);
        state::known_queued(seen_tail, h) >= threshold
    }

    /// The consumer side loaded the word `w` at head `h`: remember its tail.
    #[inline]
    fn saw_word(&self, w: u64, h: u64) {
        self.consumer
            .seen_tail
            .store(state::tail_count(w, h), Ordering::Relaxed);
    }

    /// Withdraw an arm (timed-out wait, dropped future). A direct waiter
    /// that preempted the CNO and gives up with events queued hands them to
    /// the CNO ([`state::withdraw`]): this thread then triggers it.
    pub(crate) fn disarm(&self) {
        let h = self.head();
        // AcqRel: Release for nothing; Acquire if this takes CNO_ARMED, as
        // any trigger's CAS (the enable's binding must be visible; it is,
        // the consumer wrote it, but the trigger path is the same).
        let trigger = self.transition(Ordering::AcqRel, |w| match state::withdraw(w, h) {
            Some((new, notify)) => Ok((new, notify == Notify::Cno)),
            None => Err(false),
        });
        if trigger {
            self.trigger_cno();
        }
    }

    /// A lossy post found the ring full and gives its event up: commit the
    /// loss, then take the notification as a post would (the caller performs
    /// it). `None` if close has begun (the event is handed back as closed
    /// instead).
    #[cold]
    pub(crate) fn commit_loss(&self) -> Option<Notify> {
        // Relaxed: the state word RMW below orders the commit for the arm and
        // the upcall exit; close's order is the loss word's own order.
        if self
            .transition_losses(Ordering::Relaxed, loss::commit)
            .is_none()
        {
            // Close has begun; make sure it is finished before the poster is
            // told, so that its next post is refused too.
            self.finish_close();
            return None;
        }
        self.counters.lost.fetch_add(1, Ordering::Relaxed);
        // Always one RMW on the word, even with nobody to notify (then it
        // writes the word back unchanged). AcqRel: its Release makes the loss
        // above visible to whoever's CAS on the word comes later — an arm, an
        // upcall's exit — and they re-check the loss word after their CAS;
        // whoever came earlier is seen here (ARMED, or a free token) and
        // notified.
        Some(self.transition(Ordering::AcqRel, |w| {
            Ok(state::notify_loss(w).unwrap_or((w, Notify::None)))
        }))
    }

    /// A poster's cached head more than one head epoch old: not to be
    /// trusted (see `reserve`); a load of the read-mostly line.
    #[inline(always)]
    fn hint_is_stale(&self, hint: u64) -> bool {
        self.read_mostly
            .head_epoch
            .load(Ordering::Relaxed)
            .wrapping_sub(hint >> HEAD_EPOCH_SHIFT)
            >= 2
    }

    /// One try at the reservation of every plain post: one ticket, nothing
    /// owed ([`state::reserve`]'s first branch), with a cached head no more
    /// than an epoch old, installed by the first CAS. `None` hands the post
    /// to [`Shared::reserve`]'s loop (a stale hint, a full ring, a flag, an
    /// upcall policy or a CAS lost to another poster); nothing was changed.
    ///
    /// Small enough to be inlined into every post, so the common post pays
    /// no call into the loop's slow paths.
    #[inline(always)]
    pub(crate) fn try_reserve_plain(&self, hint_cell: &AtomicU64) -> Option<u64> {
        // Acquire, Relaxed: as in `reserve`.
        let hint = hint_cell.load(Ordering::Acquire);
        let w = self.state.load(Ordering::Relaxed);
        if self.hint_is_stale(hint) {
            return None;
        }
        let state::Plain { new, ticket } = state::reserve_plain(w, hint)?;
        self.state
            // AcqRel on success: as in `reserve`.
            .compare_exchange(w, new, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| ticket)
    }

    /// The reservation loop of `post` and `post_batch`, for a poster whose
    /// cached head is in `hint_cell`: up to `want`
    /// (≥ 1) tickets; returns the first ticket, the count and the owed
    /// notification. A refusal writes nothing shared.
    #[inline(always)]
    pub(crate) fn reserve(
        &self,
        hint_cell: &AtomicU64,
        want: u64,
    ) -> Result<(u64, u64, Notify), Refused> {
        let s = self;
        let mut hint = hint_cell.load(Ordering::Acquire);
        let mut w = s.state.load(Ordering::Relaxed);
        let mut backoff: Option<Backoff> = None;
        // A short batch is settled for only against a freshly loaded head.
        let mut head_is_fresh = false;
        loop {
            // A hint more than one epoch old could be 2^44 tickets behind,
            // where the word's tail wraps and a full ring would look empty:
            // reload it. Checked after every load of `w` (a stall between the
            // check and the load must not outlive it), assuming the epoch
            // load is not 2^40 events stale itself.
            if s.hint_is_stale(hint) {
                hint = s.refresh_hint(hint_cell);
                w = s.state.load(Ordering::Relaxed);
            }
            // One ticket (every `post`) takes the simpler transition; `want`
            // is a constant there, so the branch folds away.
            let verdict = if want == 1 {
                match state::reserve(w, hint) {
                    Reserve::Ticket {
                        new,
                        ticket,
                        notify,
                    } => ReserveBatch::Tickets {
                        new,
                        first: ticket,
                        count: 1,
                        notify,
                    },
                    Reserve::Full => ReserveBatch::Full,
                    Reserve::Closed => ReserveBatch::Closed,
                    Reserve::Resizing => ReserveBatch::Resizing,
                }
            } else {
                state::reserve_batch(w, hint, want)
            };
            match verdict {
                ReserveBatch::Tickets { count, .. } if count < want && !head_is_fresh => {
                    // The room computed from the cached head may be smaller
                    // than the real one: look once more before a short count.
                    head_is_fresh = true;
                    let fresh = s.refresh_hint(hint_cell);
                    if fresh != hint {
                        hint = fresh;
                        w = s.state.load(Ordering::Relaxed);
                    }
                }
                ReserveBatch::Tickets {
                    new,
                    first,
                    count,
                    notify,
                } => {
                    // Acquire on success: see the waker registered before the
                    // consumer's Release arm, and the buffer installed before
                    // a resize's Release end. Release: whoever reads this word
                    // with Acquire (`query`) then sees a head at least `hint`,
                    // the head this reservation was checked against, so it
                    // never pairs the new tail with an older head. (On x86 a
                    // locked CAS orders both ways anyway: no cost.)
                    match s
                        .state
                        .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed)
                    {
                        Ok(_) => return Ok((first, count, notify)),
                        Err(cur) => w = cur,
                    }
                }
                ReserveBatch::Full => {
                    // Load the head before the word: then head <= tail(w), so a
                    // "full" verdict is true at some instant, never an artefact
                    // of a hint newer than the word.
                    let fresh = s.consumer.head.load(Ordering::Acquire);
                    let fresh_w = s.state.load(Ordering::Relaxed);
                    if fresh == hint && fresh_w == w {
                        if let Some(new) = state::start_upcall_on_full(w) {
                            // AcqRel, as any token hand-off: see the last
                            // holder's head; the caller runs the instance.
                            if s.state
                                .compare_exchange(w, new, Ordering::AcqRel, Ordering::Relaxed)
                                .is_ok()
                            {
                                return Err(Refused::FullTookToken);
                            }
                            w = s.state.load(Ordering::Relaxed);
                            continue;
                        }
                        return Err(Refused::Full);
                    }
                    if fresh != hint {
                        hint = fresh;
                        hint_cell.store(fresh, Ordering::Release);
                    }
                    w = fresh_w;
                }
                ReserveBatch::Closed => return Err(Refused::Closed),
                ReserveBatch::Resizing => {
                    backoff.get_or_insert_with(Backoff::new).snooze();
                    w = s.state.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// Load the consumer's head into a poster's hint. The hint is
    /// `Release`/`Acquire` so that a thread using another thread's refresh
    /// still synchronizes with the consumer's head store.
    #[cold]
    fn refresh_hint(&self, hint_cell: &AtomicU64) -> u64 {
        let fresh = self.fresh_head();
        hint_cell.store(fresh, Ordering::Release);
        fresh
    }

    /// The consumer's head as a poster may trust it: a slot below it has
    /// been emptied.
    pub(crate) fn fresh_head(&self) -> u64 {
        // Acquire: pairs with the consumer's Release head store.
        self.consumer.head.load(Ordering::Acquire)
    }

    /// One more live `Poster`.
    pub(crate) fn add_poster(&self) {
        // Relaxed: the new handle is made from a live one (no ordering needed
        // to keep the count above zero).
        self.posters.fetch_add(1, Ordering::Relaxed);
    }

    /// A `Poster` went away; the last one closes the EVD.
    pub(crate) fn release_poster(&self) {
        // AcqRel: the last poster's close must come after every other poster's
        // posts, which their own decrements release.
        if self.posters.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.close();
        }
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

    /// Set or clear "unwaitable"; setting wakes a waiter blocked now.
    pub(crate) fn set_unwaitable(&self, on: bool) {
        // Release before the wake: a waiter woken by it, or registering after
        // it, sees the flag (its register is Acquire on the waker slot).
        self.unwaitable.store(on, Ordering::Release);
        if on {
            self.targets.wake_waker();
        }
    }

    /// True while waits must fail with `Unwaitable`.
    pub(crate) fn is_unwaitable(&self) -> bool {
        // Acquire: pairs with `set_unwaitable`.
        self.unwaitable.load(Ordering::Acquire)
    }

    /// Register the waker the next notification wakes; before the arm CAS
    /// that makes the notification possible.
    pub(crate) fn register_waker(&self, w: &Waker) {
        self.targets.register(w);
    }

    /// Wake the registered waker (a teardown waiting for instances to end).
    pub(crate) fn wake_waker(&self) {
        self.targets.wake_waker();
    }

    /// The EVD's notification eventfd, made on first use.
    #[cfg(all(target_os = "linux", not(loom)))]
    pub(crate) fn eventfd(&self) -> std::io::Result<&std::os::fd::OwnedFd> {
        self.targets.eventfd()
    }

    /// Move the queued events into `fresh` (of `2^log2` slots) and install it,
    /// while RESIZING holds posters off. Caller: the consumer.
    pub(crate) fn resize(&self, log2: u32, fresh: Buffer<T>) -> Result<(), ResizeError> {
        let new_cap = fresh.capacity();
        // Acquire: after this no ticket is handed out; the tickets already
        // handed out are in [head, tail(w)).
        let w = self.transition(Ordering::Acquire, |w| {
            state::begin_resize(w).map(|n| (n, n)).ok_or(w)
        });
        let h = self.head();
        let queued = state::len(w, h);
        if queued > new_cap {
            let old_log2 = state::cap_log2(w);
            // Release: posters resume against the unchanged ring.
            self.transition(Ordering::Release, |w| {
                Ok((state::end_resize(w, old_log2), ()))
            });
            return Err(ResizeError::TooSmall {
                queued: queued as usize,
                capacity: new_cap as usize,
            });
        }
        let old = self.buffer();
        let backoff = Backoff::new();
        for i in 0..queued {
            let t = h.wrapping_add(i);
            // A poster that reserved before RESIZING is still writing: wait.
            while !old.is_published(t) {
                backoff.snooze();
            }
            // SAFETY: published and not taken; we are the consumer; the
            // ticket is republished in the new ring with the same number.
            unsafe { Buffer::publish(&fresh, t, old.take(t)) };
        }
        let old_ptr = self.swap_buffer(fresh);
        // Release: a poster whose reservation reads the cleared flag (or any
        // later word) sees the new buffer pointer.
        self.transition(Ordering::Release, |w| Ok((state::end_resize(w, log2), ())));
        // SAFETY: every reserved ticket was published, so no poster touches the
        // old ring any more, and new reservations use the new one. Its values
        // were all moved out; dropping it frees only the slots.
        drop(unsafe { Box::from_raw(old_ptr) });
        if new_cap > state::capacity(w) {
            // Room appeared without a head store.
            self.wake_all_room();
        }
        Ok(())
    }

    // ---- upcalls: the token holder's operations on the word ----

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

    /// ManyInstances: the holder took one event out and gives the token back
    /// before running its handler.
    pub(crate) fn release_token(&self) {
        // AcqRel: Release hands our head and slot reads to the next token
        // holder.
        self.transition(Ordering::AcqRel, |w| Ok((state::release_token(w), ())));
    }

    /// ManyInstances: after its handler, take the token again (`Ok`) or end
    /// (`Err` with the word installed).
    pub(crate) fn reacquire_token(&self) -> Result<(), u64> {
        // AcqRel: Acquire to see the last holder's head; Release for an exit.
        self.transition(Ordering::AcqRel, |w| match state::reacquire(w) {
            Reacquire::Token(n) => Ok((n, Ok(()))),
            Reacquire::Exit(n) => Ok((n, Err(n))),
        })
    }

    /// The token holder wants to end: `Some(word)` if it ended, `None` if
    /// work is queued (or a reserved slot is still being written).
    pub(crate) fn exit_instance(&self) -> Option<u64> {
        let h = self.head();
        // AcqRel: Release so the next instance (or the torn-down consumer) sees
        // our head; Acquire to read a current word, and with it any loss whose
        // poster's RMW on the word came before this CAS.
        self.transition(Ordering::AcqRel, |w| match state::exit_instance(w, h) {
            Exit::Ended(new) => Ok((new, Some(new))),
            Exit::MoreWork => Err(None),
        })
    }

    /// An instance unwinds out of a panicking handler: give back the token if
    /// it held it, and leave. Returns the word installed.
    pub(crate) fn abandon_instance(&self, held_token: bool) -> u64 {
        // AcqRel: like a normal exit, hands the consumer side to whoever next
        // takes the token.
        self.transition(Ordering::AcqRel, |w| {
            let n = state::abandon_instance(w, held_token);
            Ok((n, n))
        })
    }

    /// Install a policy; true if the caller took the token and must run an
    /// instance now (queued events, or a loss report, under `Invoke::Any`).
    pub(crate) fn set_policy(&self, bits: PolicyBits, invoke: Invoke) -> bool {
        let h = self.head();
        // AcqRel: Release hands the consumer side to instances that start
        // under the new policy; Acquire to see the last instance's head.
        let start = self.transition(Ordering::AcqRel, |w| {
            let r = state::set_policy(w, h, bits, invoke);
            Ok((r.new, r.start_instance))
        });
        // A loss report counts as a queued event for Invoke::Any.
        start || (invoke == Invoke::Any && self.loss_pending() && self.restart_for_loss())
    }

    /// A loss was committed by a poster whose RMW on the word came before an
    /// instance's exit CAS (or a policy change), so it saw a token and started
    /// nothing: take the token (if upcalls are enabled and nobody holds it)
    /// to report it. A poster whose RMW comes later starts an instance itself.
    pub(crate) fn restart_for_loss(&self) -> bool {
        self.transition(Ordering::AcqRel, |w| match state::notify_loss(w) {
            Some((new, Notify::Upcall)) => Ok((new, true)),
            _ => Err(false),
        })
    }

    /// Replace the upcall handler.
    pub(crate) fn set_handler(&self, h: Installed<T>) {
        self.handler.set(h);
    }

    /// Drop the upcall handler (teardown).
    pub(crate) fn clear_handler(&self) {
        self.handler.clear();
    }

    /// The current handler, for one call (or to ask what kind it is).
    #[inline]
    pub(crate) fn load_handler(&self) -> Loaded<T> {
        self.handler.load()
    }

    /// True if an upcall instance holds the token now (a debug check of
    /// [`Shared::call_handler`]'s contract, and for tests).
    pub(crate) fn token_taken(&self) -> bool {
        state::has(self.state.load(Ordering::Relaxed), state::TOKEN)
    }

    /// Call `h` with one item; counts the upcall.
    ///
    /// # Safety
    /// As [`Loaded::call`]: if `h` is exclusive, the caller holds this EVD's
    /// token from before this call until after it returns.
    #[inline]
    pub(crate) unsafe fn call_handler(&self, h: &Loaded<T>, item: Result<T, Overflow>, more: bool) {
        debug_assert!(
            !h.is_exclusive() || self.token_taken(),
            "an FnMut handler called without the token"
        );
        self.counters.upcalls.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is `Loaded::call`'s.
        unsafe { h.call(item, more) };
    }

    /// Count an upcall instance's start as a notification.
    pub(crate) fn count_instance_start(&self) {
        self.counters.notifications.fetch_add(1, Ordering::Relaxed);
    }

    /// The state word, the head and the queue length (`len <= capacity`),
    /// read as one instant: the head is read on both sides of the word and
    /// the read is retried until it did not move (the same loads, with the
    /// same orderings, [`Shared::query`] has always made). Any thread may
    /// call it: it reads the capacity from the word, not the buffer.
    fn word_head_len(&self) -> (u64, u64, u64) {
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
        let len = if consistent {
            len
        } else {
            len.min(state::capacity(w))
        };
        debug_assert!(len <= state::capacity(w), "a consistent snapshot");
        (w, head, len)
    }

    /// `(len, capacity, closed)` from one snapshot of the word and head: the
    /// cheap part of [`Shared::query`] (no counters), for the handles'
    /// `len`/`is_full`/... accessors. Safe from any thread.
    pub(crate) fn occupancy(&self) -> (usize, usize, bool) {
        let (w, _, len) = self.word_head_len();
        (
            len as usize,
            state::capacity(w) as usize,
            state::has(w, state::CLOSED),
        )
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
            room_wakes: self.counters.room_wakes.load(Ordering::Relaxed),
        }
    }

    /// Drop the events queued at `[head, tail)` now, after a close. Waits for
    /// posters still writing reserved slots (no ticket is handed out after
    /// the close). Every event is dropped even if one's destructor panics;
    /// the first panic is resumed afterwards. Caller: the consumer side, with
    /// no upcall instance in flight.
    pub(crate) fn drop_queued_after_close(&self) {
        // Acquire: after the close that precedes this, so the tail is final.
        let w = self.state.load(Ordering::Acquire);
        debug_assert!(state::has(w, state::CLOSED));
        let h = self.head();
        let n = state::len(w, h);
        let buf = self.buffer();
        let backoff = Backoff::new();
        let mut panics = Panics::default();
        for i in 0..n {
            let t = h.wrapping_add(i);
            while !buf.is_published(t) {
                backoff.snooze();
            }
            // SAFETY: published, at or past the head, never taken; the head is
            // moved past it before anything else can run.
            let v = unsafe { buf.take(t) };
            self.publish_head(t, t.wrapping_add(1));
            panics.drop(v);
        }
        panics.resume();
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // No handle is left, so no poster is between reserve and publish: every
        // ticket in [head, tail) holds a value, dropped here exactly once, even
        // if some destructor panics (the first panic is resumed after).
        let w = self.state.load(Ordering::Relaxed);
        let h = self.head();
        let p = self.read_mostly.buffer.load(Ordering::Relaxed);
        // SAFETY: `p` came from `Box::into_raw` and nobody else can reach it now.
        let buf = unsafe { Box::from_raw(p) };
        let mut panics = Panics::default();
        for i in 0..state::len(w, h) {
            let t = h.wrapping_add(i);
            if buf.is_published(t) {
                // SAFETY: published and never taken (it is at or past the head).
                panics.drop(unsafe { buf.take(t) });
            }
        }
        drop(buf);
        panics.resume();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{bounded, PostError};

    /// Put an empty EVD at `head` (as if 64-bit `head` events had passed).
    fn fast_forward<T>(c: &crate::Consumer<T>, head: u64) {
        let s = c.shared();
        set_tail(c, head);
        s.consumer.head.store(head, Ordering::Relaxed);
        // The seen tail is a ticket count: it moves with the head, or an arm
        // would trust a tail from before the jump.
        s.consumer.seen_tail.store(head, Ordering::Relaxed);
        s.read_mostly
            .head_epoch
            .store(head >> HEAD_EPOCH_SHIFT, Ordering::Relaxed);
    }

    /// Move the word's tail as a reservation would, without a slot written:
    /// a poster stopped between its CAS and its publish. (Tests set it back
    /// before the EVD drops: teardown waits for reserved slots.)
    fn set_tail<T>(c: &crate::Consumer<T>, tail: u64) {
        let s = c.shared();
        let w = s.state.load(Ordering::Relaxed);
        s.state.store(
            state::with_tail(w, tail & state::TICKET_MASK),
            Ordering::Relaxed,
        );
    }

    #[test]
    fn an_arm_that_finds_the_head_published_leaves_the_word_alone() {
        let (poster, consumer) = bounded::<u64>(4).unwrap();
        poster.post(1).unwrap();
        let s = consumer.shared();
        let before = s.state.load(Ordering::Relaxed);
        assert_eq!(s.arm(1), Arm::Pending);
        assert_eq!(s.state.load(Ordering::Relaxed), before);
        assert_eq!(
            s.consumer.seen_tail.load(Ordering::Relaxed),
            0,
            "the word was not read"
        );
    }

    #[test]
    fn an_arm_trusts_a_seen_tail_only_while_the_head_is_below_it() {
        let (_poster, mut consumer) = bounded::<u64>(4).unwrap();
        fast_forward(&consumer, u64::MAX - 1); // the head wraps 2^64 below
        let h = consumer.shared().head();
        set_tail(&consumer, h.wrapping_add(2)); // two posters mid-post
        assert_eq!(consumer.shared().arm(1), Arm::Pending, "from the word");
        assert_eq!(
            consumer.shared().consumer.seen_tail.load(Ordering::Relaxed),
            h.wrapping_add(2)
        );
        // A word that no longer shows the tickets (no real word does that:
        // tails only grow) tells the shortcut from the word's own answer.
        set_tail(&consumer, h);
        assert_eq!(consumer.shared().arm(2), Arm::Pending, "from the seen tail");
        assert!(
            matches!(consumer.shared().arm(3), Arm::Armed(_)),
            "only 2 known"
        );
        consumer.disarm();
        // The head reaches and passes the seen tail (across 2^64): nothing is
        // known any more, so the arm reads the word, and the empty ring arms.
        for k in 1..=3u64 {
            fast_forward(&consumer, h.wrapping_add(k));
            consumer
                .shared()
                .consumer
                .seen_tail
                .store(h.wrapping_add(2), Ordering::Relaxed);
            assert_eq!(consumer.shared().head(), h.wrapping_add(k));
            let r = consumer.shared().arm(1);
            if k < 2 {
                assert_eq!(r, Arm::Pending, "head +{k}: one ticket still known");
            } else {
                assert!(matches!(r, Arm::Armed(_)), "head +{k}");
                consumer.disarm();
            }
        }
    }

    #[test]
    fn a_timed_wait_ends_at_its_deadline_while_a_poster_is_mid_post() {
        let (poster, mut consumer) = bounded::<u64>(4).unwrap();
        set_tail(&consumer, 1); // reserved, never published
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let r = consumer.wait(1, Some(std::time::Duration::from_millis(20)));
            tx.send(r).unwrap();
            consumer
        });
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the wait must end at its deadline, not wait for the publish");
        assert_eq!(r, Err(crate::WaitError::Timeout { available: 0 }));
        let consumer = waiter.join().unwrap();
        set_tail(&consumer, 0);
        drop(poster);
    }

    #[test]
    fn an_idle_posters_stale_head_cannot_wrap_the_full_check() {
        // A poster idle while 2^44 tickets pass must not keep a head hint
        // that, compared modulo 2^44, makes a full ring look nearly empty.
        let (idle, mut consumer) = bounded::<u64>(4).unwrap(); // hint 0
        fast_forward(&consumer, 3 * (1 << state::TAIL_BITS) - 2);
        let busy = consumer.poster(); // fresh hint
        for i in 0..4 {
            busy.post(i).unwrap();
        }
        assert_eq!(busy.post(9), Err(PostError::Full(9)));
        assert_eq!(
            idle.post(99),
            Err(PostError::Full(99)),
            "stale hint reloaded"
        );
        for i in 0..4 {
            assert_eq!(consumer.try_dequeue(), Ok(i));
        }
        assert_eq!(consumer.query().len, 0);
    }

    #[test]
    fn head_epoch_follows_the_head_across_a_boundary() {
        let (poster, mut consumer) = bounded::<u64>(4).unwrap();
        fast_forward(&consumer, (1 << HEAD_EPOCH_SHIFT) - 1);
        let p = consumer.poster();
        p.post(1).unwrap();
        p.post(2).unwrap();
        let mut out = Vec::new();
        consumer.dequeue_batch(&mut out, 2).unwrap();
        assert_eq!(
            consumer
                .shared()
                .read_mostly
                .head_epoch
                .load(Ordering::Relaxed),
            1
        );
        drop(poster);
    }
}
