//! The shared engine of an EVD: a composition of owners, each holding its
//! atomics and the argument for their orderings. The handles
//! ([`Poster`](crate::Poster), [`Consumer`](crate::Consumer),
//! [`Upcalls`](crate::Upcalls)) call the engine's operations; none touches
//! an atomic of its own.
//!
//! # The owners
//!
//! | owner | atomics | its line | ordering argued in |
//! |---|---|---|---|
//! | the state word | tail, permits, flags, policy, instances, capacity | every post | [`word`]: every CAS, the release sequence as a whole |
//! | the consumer's line | head, report alternation, seen tail, pacer, the room flags | every dequeue | [`dequeue`]: the dequeue paths |
//! | the read-mostly line | buffer pointer, head epoch | read by every post, written by a resize and every 2^32 events | at each access: the buffer here and in [`resize`] (its swap), the head epoch in [`dequeue`] (store) and [`word`] (load) |
//! | the loss word | close's first step, lost count | close, lossy posts | [`loss`] |
//! | the notification targets | waker, eventfd; the CNO link | a waiter registering | [`crate::notify`] |
//! | the room queue | waiting posters, FIFO, under a lock | waiting posters only | [`crate::room`] |
//! | the close and permit-limit waiters | wakers of `Poster::closed` and of `Poster::reserve` at the limit, under a lock each | registering tasks, close, a permit back at the limit | [`crate::waker_list`] |
//! | snapshots | loads of the word and the head | — | [`snapshot`] |
//!
//! [`waits`] holds the engine's calls into the room queue and the waker
//! lists: the posters' waits, and the wakes a head store, a permit given
//! back, a resize or close owe them.
//!
//! # The protocol on one page
//!
//! * **Post** = reserve (one CAS on the state word: tail+1, and the
//!   notification if ARMED or an upcall may start), write the slot, publish
//!   its stamp (`Release`), then notify. A full ring refuses without writing
//!   anything shared. A lossy post that gives up commits on the loss word,
//!   then does one RMW on the state word to take the notification.
//! * **Dequeue** = the head slot's stamp (`Acquire`); if published, take the
//!   value and store the head (`Release`). If not, the loss word says
//!   whether close has begun; only then is the state word read ([`dequeue`]).
//! * **Arm** = one CAS on the state word that either sets ARMED (nothing
//!   queued) or fails/declines because the tail moved (pending). An arm that
//!   can tell "pending" without the word says so without loading it: the
//!   head slot is published, or the tail the consumer saw at an earlier load
//!   of the word (`ConsumerLine::seen_tail`) is at least the threshold ahead
//!   of the head. Every ticket in [head, seen tail) was reserved and will be
//!   published (the tail only grows, and a reserved ticket is always
//!   written), so the word's own answer would be pending too and would
//!   change nothing; no ordering is needed, as nothing is installed and the
//!   caller's next dequeue reads the stamp with `Acquire`.
//! * **Close** = loss word closed, then CLOSED in the state word; anyone who
//!   sees the first without the second finishes it ([`word`], [`loss`]).
//! * **Resize** = RESIZING stops reservations, the queued events move, the
//!   buffer pointer is swapped (`Release`), and clearing RESIZING releases it
//!   to the next reservation (`Acquire`) ([`resize`]).
//! * **Upcalls** = the TOKEN bit stands for the consumer side; taking and
//!   giving it back are CASes on the state word (`AcqRel`), so the head and
//!   slot reads of one holder happen before the next holder's.
//! * **Room** = a poster that waits for a free slot joins the room queue
//!   (setting the room flag in the consumer's line), runs the heavy barrier
//!   and posts again before sleeping; every head store is followed by the
//!   light barrier and a load of that flag, which wakes one waiter per freed
//!   slot when set ([`crate::room`]).
//! * **Permits** = slots promised in the word's PERMITS by a reservation's
//!   CAS; sending with one is a reservation without the full check; giving
//!   one back frees room as a head store does, room check included.
//! * **CNO** = an enable is the arm's CAS for `CNO_ARMED`; the post that
//!   takes it triggers the bound CNO through the link
//!   ([`crate::notify::CnoTarget`]); the protocol is in [`crate::cno`].

mod consumer_line;
mod dequeue;
mod loss;
mod resize;
mod snapshot;
mod waits;
mod word;

use crate::error::Overflow;
use crate::notify::{CnoLink, CnoTarget, NotifyTargets, Reached};
use crate::query::Counters;
use crate::ring::Buffer;
use crate::room::RoomQueue;
use crate::state::{self, Arm};
use crate::sync::{Arc, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, StateWord};
use crate::unwind::Panics;
use crate::upcall::handler::{HandlerSlot, Installed, Loaded};
use crate::waker_list::WakerList;
use consumer_line::ConsumerLine;
use crossbeam_utils::CachePadded;
use loss::{AfterArm, LossWord};
use std::task::Waker;

/// The live `Poster` count's ended mark: set by the drop of the last
/// handle (the EVD closes), and kept for good; handles the consumer makes
/// after it count on above it, and find the EVD closed.
const POSTERS_ENDED: usize = 1 << (usize::BITS - 1);

/// The poster count after a handle's drop: the last live one (`1`) ends it;
/// otherwise one fewer (the ended mark kept).
const fn poster_released(n: usize) -> usize {
    if n == 1 { POSTERS_ENDED } else { n - 1 }
}

/// An increment that found the count `n` made a handle after the count
/// ended: the EVD is closed (or closing) for it.
const fn poster_count_ended(n: usize) -> bool {
    n & POSTERS_ENDED != 0
}

/// The head epoch is the head divided by 2^32: a poster trusts its cached
/// head only while it is at most one epoch behind, so the distance from it to
/// the tail stays below 3·2^32 + capacity (at most 2^34 with the largest
/// capacity), well inside the 2^36 range in which the word's tail is
/// compared.
pub(crate) const HEAD_EPOCH_SHIFT: u32 = state::TAIL_BITS - 4;

/// The trigger a CNO enable owes (counted by the consumer, whose disable
/// barrier waits for the slot's count to reach its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owed {
    /// None: the enable found work or the end, or took itself back for a
    /// loss report.
    Nothing,
    /// None, and the trigger an earlier enable owed will not come either:
    /// the enable found it left with news and took it back.
    TakenBack,
    /// The one a post, loss or close that takes `CNO_ARMED` will deliver.
    Trigger,
    /// The same, but a close has begun: the caller counts it, then finishes
    /// the close ([`Shared::finish_close`]), which delivers it (a closer
    /// stopped between its steps holds nobody up; a waker it runs may panic).
    TriggerByClose,
}

/// Fields every post reads and nobody writes in steady state.
struct ReadMostly<T> {
    /// The current ring. Replaced only by a resize, while `RESIZING` holds
    /// every poster off (see [`Shared::resize`]).
    buffer: AtomicPtr<Buffer<T>>,
    /// `head >> HEAD_EPOCH_SHIFT`, stored by the consumer when it changes
    /// (every 2^32 events): bounds how stale a poster's cached head may be.
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
    losses: CachePadded<LossWord>,
    /// Where notifications go: the registered waker and the optional eventfd.
    targets: CachePadded<NotifyTargets>,
    /// The upcall handler.
    handler: HandlerSlot<T>,
    /// Waits fail with `Unwaitable` while this is set.
    unwaitable: AtomicBool,
    /// Live `Poster` handles; the last one to drop closes the EVD and
    /// marks the count ended ([`POSTERS_ENDED`], for good).
    posters: AtomicUsize,
    /// Statistics that are not derived from the word and the head.
    counters: CachePadded<Counters>,
    /// Posters waiting for room, FIFO ([`crate::room`]). Locked only by a
    /// poster that waits and by a consumer whose room check was set.
    room: CachePadded<RoomQueue>,
    /// The trigger's end of the CNO this EVD is bound to, if any
    /// ([`crate::notify::CnoLink`]).
    cno: CnoLink,
    /// Tasks awaiting `Poster::closed` ([`crate::Closed`], `poster/closed.rs`).
    /// Locked only by such a task and by close.
    close_waiters: WakerList,
    /// `Poster::reserve` futures refused at the permit limit, woken by the
    /// send or release that takes the count below it.
    limit_waiters: WakerList,
}

// SAFETY: the slots hand each `T` from one thread to another exactly once
// (publish/take), so `T: Send` is what is needed; every other field is atomic,
// except the handler slot, whose handlers are `Send + Sync` (shared) or
// `Send` and called only by the token holder (exclusive, see
// `upcall::handler::Exclusive`), and the CNO link, whose targets are
// `Send + Sync` and which only the consumer writes, while no trigger reads
// it (see `CnoLink`).
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above; shared access goes through atomics, the slot protocol and
// the token.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub(crate) fn new(log2: u32, buffer: Buffer<T>) -> Self {
        Shared {
            state: CachePadded::new(StateWord::new(state::initial(log2))),
            consumer: CachePadded::new(ConsumerLine::new()),
            read_mostly: CachePadded::new(ReadMostly {
                buffer: AtomicPtr::new(Box::into_raw(Box::new(buffer))),
                head_epoch: AtomicU64::new(0),
            }),
            losses: CachePadded::new(LossWord::new()),
            targets: CachePadded::new(NotifyTargets::new()),
            handler: HandlerSlot::new(),
            unwaitable: AtomicBool::new(false),
            posters: AtomicUsize::new(1),
            counters: CachePadded::new(Counters::default()),
            room: CachePadded::new(RoomQueue::new()),
            cno: CnoLink::new(),
            close_waiters: WakerList::new(),
            limit_waiters: WakerList::new(),
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

    /// The current ring, as a raw pointer for [`Buffer::publish`].
    #[inline(always)]
    pub(crate) fn buffer_ptr(&self) -> *const Buffer<T> {
        // Acquire: as in `buffer`.
        self.read_mostly.buffer.load(Ordering::Acquire)
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

    /// The ring's capacity, from the read-mostly line (the consumer side
    /// only: a resize is the consumer's own call).
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.buffer().capacity()
    }

    /// Notify an armed consumer: count it, wake its waker, poke its eventfd.
    pub(crate) fn notify_consumer(&self) {
        self.counters.notifications.fetch_add(1, Ordering::Relaxed);
        self.targets.notify();
    }

    /// Withdraw an arm (timed-out wait, dropped future). A direct waiter that
    /// preempted the CNO and gives up with events queued or a loss report
    /// pending hands them to the CNO ([`state::withdraw`]), triggered here.
    pub(crate) fn disarm(&self) {
        // No count of events is `u64::MAX`: always withdrawn.
        self.disarm_unless_reserved(u64::MAX);
    }

    /// [`Shared::disarm`] for a waiter that takes its events, unless `want`
    /// events are reserved ([`state::withdraw_unless_reserved`], decided by
    /// the same CAS): `false` then, nothing changed (the caller waits for
    /// them to be published and takes them).
    pub(crate) fn disarm_unless_reserved(&self, want: u64) -> bool {
        let r = self.withdraw(want);
        if r == Some(true) {
            self.trigger_cno();
        }
        r.is_some()
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
        let mut panics = Panics::default();
        if target.trigger(slot, &mut panics) == Reached::CnoGone {
            panics.run(|| self.notify_consumer());
        }
        panics.resume();
    }

    /// An arm's CAS installed `w` and the loss word then showed a report
    /// (pending work: the arm is taken back) or close begun (out of line:
    /// the arm's common path stays small).
    #[cold]
    #[inline(never)]
    pub(super) fn arm_saw_loss_word(&self, seen: AfterArm, w: u64) -> Arm {
        if seen == AfterArm::Report {
            // A loss is pending: the consumer has work, and the arm is taken
            // back. (Its poster's RMW on the word may come after our CAS and
            // take this ARMED first: then the caller is notified once more
            // than needed, which an arm allows.)
            self.disarm();
            return Arm::Pending;
        }
        // A closer may be stopped between its two steps: finish close here
        // (it takes this ARMED and notifies it, so the caller's wait ends at
        // once) rather than wait for it.
        self.finish_close();
        Arm::Armed(w)
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

    /// One more live `Poster`. A clone is made from a live handle, so the
    /// count is live; the consumer's `poster()` (from any thread: the
    /// consumer is `Sync`) may find it ended, by a last handle's drop that
    /// closes the EVD (or has closed it). The new handle then finds the EVD
    /// closed at once: this closes it too (a close is idempotent), so it is
    /// never open to the new handle and then closed under it by that drop.
    pub(crate) fn add_poster(&self) {
        // Relaxed: a clone's increment needs no ordering (its source keeps
        // the count live). An increment that finds the count ended reads
        // the last drop's release RMW: the Acquire fence makes that drop's
        // and every earlier poster's posts happen before this close, as for
        // the drop's own close (`release_poster`).
        if poster_count_ended(self.posters.fetch_add(1, Ordering::Relaxed)) {
            crate::sync::fence(Ordering::Acquire);
            self.close();
        }
    }

    /// A `Poster` went away; the last one ends the count and closes the EVD.
    pub(crate) fn release_poster(&self) {
        // AcqRel: the last poster's close must come after every other
        // poster's posts, which their own decrements release. One RMW that
        // takes 1 to ENDED (never through 0): a handle the consumer makes
        // after it finds it ended, whichever thread makes it.
        let before = self
            .posters
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                Some(poster_released(n))
            })
            .unwrap_or_else(|n| n);
        // Only the drop that ended the count closes (a handle made after
        // the end closed the EVD when it was made).
        if before == 1 {
            self.close();
        }
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

    /// The registered waker, taken out unwoken: the consumer is gone (its
    /// drop drops it, under its own panic guard).
    pub(crate) fn take_waker(&self) -> Option<Waker> {
        self.targets.take_waker()
    }

    /// The EVD's notification eventfd, made on first use. The call that makes
    /// it writes it once if a notification already fired (`NOTIFIED`): a
    /// post that took `ARMED` before the eventfd existed wrote only the
    /// waker, and the consumer that armed and then asked for the fd waits on
    /// the fd alone ([`Shared::notified_seen_by_new_target`] argues why no
    /// post falls between the two).
    #[cfg(any(target_os = "linux", loom))]
    pub(crate) fn eventfd(&self) -> std::io::Result<&crate::sync::eventfd::Eventfd> {
        let (fd, made) = self.targets.eventfd()?;
        if made && self.notified_seen_by_new_target() {
            crate::sync::eventfd::signal(fd);
        }
        Ok(fd)
    }

    /// Replace the upcall handler. The old one, if no instance is calling
    /// it, is dropped here. With upcalls disabled that is inside this EVD's
    /// frame: no instance starts then and only the owner (this thread)
    /// could drain the ring, so a waiting post from its `Drop` is refused at
    /// once instead of waiting for this thread (an instance that read the
    /// policy just before it was disabled may still free one slot).
    /// Enabled, an instance or the post itself drains the ring, and such a
    /// post may wait as any other.
    pub(crate) fn set_handler(&self, h: Installed<T>) {
        match self.policy() {
            state::PolicyBits::Disabled => {
                crate::frames::as_handler_of(self.id(), || self.handler.set(h))
            }
            _ => self.handler.set(h),
        }
    }

    /// Drop the upcall handler (a teardown, upcalls disabled), inside this
    /// EVD's frame as [`Shared::set_handler`] drops the old one then.
    pub(crate) fn clear_handler(&self) {
        crate::frames::as_handler_of(self.id(), || self.handler.clear());
    }

    /// The current handler, for one call (or to ask what kind it is).
    #[inline]
    pub(crate) fn load_handler(&self) -> Loaded<T> {
        self.handler.load()
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
mod tests;

/// Why [`Shared::reserve`] handed out no ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not one slot is free; nothing was written.
    Full,
    /// A permit was asked for and `Permit::MAX_OUT` are out; nothing written.
    AtPermitLimit,
    /// Full, and an upcall policy was idle: the caller took the token and
    /// must run an instance (which drains the ring), then retry.
    FullTookToken,
    /// The EVD is closed.
    Closed,
    /// A resize holds reservations off. Only for a reservation that asked
    /// for it (one of a post that waits for room, which then waits in the
    /// room queue: the resize's end wakes it); nothing written.
    Resizing,
}

/// [`Shared::reserve`]'s `want` that asks for a permit instead of tickets.
pub(crate) const PERMIT: u64 = state::WANT_PERMIT;
