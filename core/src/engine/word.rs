//! The state word: every CAS on it, and the release sequence they form.
//!
//! The word ([`state`]) holds the tail, the permits, the notification
//! flags, the upcall policy and instance count, and log2 of the capacity.
//! Each operation below applies one of `state`'s pure transitions with a
//! CAS (or one RMW), so the word's modification order is theirs.
//!
//! # Invariant
//!
//! Only this file writes the word, each write an RMW (a CAS, or the lossy
//! post's one RMW; a new eventfd's CAS writes it back unchanged) applying one
//! of `state`'s transitions: the tail only grows, a ticket is handed out only
//! while the ring has room against a head the consumer has passed and neither
//! `CLOSED` nor `RESIZING` is set, each `ARMED`/`CNO_ARMED` is taken by
//! exactly one operation, `TOKEN` has at most one holder. Other files only
//! load it (the dequeue's end of stream check, [`super::snapshot`]).
//!
//! # The release sequence, argued as a whole
//!
//! Every write of the word is an RMW, so every write continues the release
//! sequence of every earlier `Release` write: an `Acquire` RMW synchronizes
//! with every `Release` RMW before it in the word's order, whoever made the
//! ones in between. The operations and what each must publish or see:
//!
//! * **Reserve** (every post, `AcqRel` on success): `Acquire` sees the waker
//!   registered before the consumer's `Release` arm, the binding written
//!   before a CNO enable, and the buffer installed before a resize's
//!   `Release` end. `Release`: whoever reads the word with `Acquire`
//!   (`query`) then sees a head at least the one the reservation was
//!   checked against. (On x86 a locked CAS orders both ways anyway.)
//!   A full ring refuses without writing anything shared.
//! * **Arm** and **CNO enable** (`AcqRel`): `Release` publishes the waker
//!   (the CNO binding) to the poster whose reservation takes `ARMED`
//!   (`CNO_ARMED`); `Acquire` makes a loss visible if its poster's RMW came
//!   first. A loss committed before the arm's CAS is seen after it (both are
//!   RMWs on the word), so it is reported as pending. **CNO disarm** is
//!   `Relaxed`: clearing the flag publishes nothing; the disable barrier
//!   orders the link's rewrite through the slot's trigger count.
//! * **Close's second step** (`AcqRel`): `Release` so that whoever sees
//!   `CLOSED` with `Acquire` also sees the loss word closed (close's first
//!   step, [`super::loss`]) and so the final loss count; `Acquire` to take
//!   over an arm's registered waker. Anyone who sees the first step without
//!   the second finishes it.
//! * **A lossy post's notification** (`AcqRel`, always one RMW, even one
//!   that writes the word back unchanged): its `Release` makes the loss
//!   committed before it visible to whoever's CAS comes later (an arm, an
//!   upcall's exit), and they re-check the loss word after their CAS;
//!   whoever came earlier is seen here (`ARMED`, or a free token) and
//!   notified.
//! * **A new eventfd** (`AcqRel`, one CAS writing the word back unchanged,
//!   after the fd is published; a store-then-load race with a post's CAS
//!   then load of the fd): a reservation later in the word's order reads
//!   from this RMW's release sequence and sees the fd; one earlier left
//!   `NOTIFIED`, which the RMW sees, and the fd's maker writes it (both, at
//!   worst: a spurious wake). Only the consumer clears `NOTIFIED` outside an
//!   upcall. Loom: `tests/loom/eventfd.rs`.
//! * **Permits**: taken by the reservation loop's CAS against the same tail
//!   as posts; sent by a reservation without the full check; given back
//!   `Relaxed` (it publishes nothing), then a head store's room check.
//! * **Resize**: `RESIZING` (`Acquire`) stops reservations; the queued
//!   events move; the buffer pointer is swapped (`Release`); clearing
//!   `RESIZING` (`Release`) publishes it to the next reservation
//!   (`Acquire`).
//! * **The upcall token** (`TOKEN` stands for the consumer side): taking and
//!   giving it back are `AcqRel` CASes, so the head and slot reads of one
//!   holder happen before the next holder's.

use super::loss::AfterArm;
use super::{Owed, PERMIT, Refused, Shared};
use crate::state::{
    self, Arm, Enable, Exit, Invoke, Notify, PolicyBits, Reacquire, Reserve, ReserveBatch,
};
use crate::sync::{AtomicU64, Backoff, Ordering, fence};
use crate::trace;
use crate::unwind::Panics;

impl<T> Shared<T> {
    /// Apply the transition `f` to the state word and install its result with
    /// a CAS, retrying on a changed word, until it succeeds or `f` declines.
    #[inline]
    pub(super) fn transition<R>(
        &self,
        success: Ordering,
        mut f: impl FnMut(u64) -> Result<(u64, R), R>,
    ) -> R {
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

    /// The reservation loop of `post`, `post_batch` and permits, for a
    /// poster whose cached head is in `hint_cell`: up to `want` (≥ 1)
    /// tickets, or with `want` = [`PERMIT`] one promised slot
    /// ([`state::take_permit`], count 0); returns the first ticket, the
    /// count and the owed notification. A refusal writes only `hint_cell`.
    /// A resize is waited out, or refused if `REFUSE_RESIZE` (a post that
    /// waits for room, asleep in the room queue: see `engine/resize.rs`).
    #[inline(always)]
    pub(crate) fn reserve<const REFUSE_RESIZE: bool>(
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
            // A hint more than one epoch old could be 2^36 tickets behind,
            // where the word's tail wraps and a full ring would look empty:
            // reload it. Checked after every load of `w` (a stall between the
            // check and the load must not outlive it), assuming the epoch
            // load is not 2^32 events stale itself.
            if s.hint_is_stale(hint) {
                hint = s.refresh_hint(hint_cell);
                w = s.state.load(Ordering::Relaxed);
            }
            let Some(verdict) = state::reserve_any(w, hint, want) else {
                return Err(Refused::AtPermitLimit);
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
                    // AcqRel on success: the module doc's "Reserve" argues
                    // both halves (the waker, the buffer; `query`'s head).
                    match s
                        .state
                        .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed)
                    {
                        Ok(_) => {
                            // A permit starts no upcall: one that fills the
                            // ring under an idle policy strands it. (The
                            // hint is at most the head: not full by it, not
                            // full at all.)
                            if want == PERMIT && state::strands_a_full_ring(new, hint) {
                                s.wake_room_if_stranded(new);
                            }
                            return Ok((first, count, notify));
                        }
                        Err(cur) => w = cur,
                    }
                }
                ReserveBatch::Full => {
                    // Word, then head: `(w, hint)` held at the word's load if
                    // both still match (the head only grows). Acquire: the
                    // head a reservation in `w` saw comes before the head
                    // load (or a weakly ordered CPU could see a false full).
                    let fresh_w = s.state.load(Ordering::Acquire);
                    let fresh = s.consumer.head.load(Ordering::Acquire);
                    if fresh == hint && fresh_w == w {
                        if let Some(new) = state::start_upcall_to_drain(w, hint) {
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
                ReserveBatch::Resizing if REFUSE_RESIZE => return Err(Refused::Resizing),
                ReserveBatch::Resizing => {
                    backoff.get_or_insert_with(Backoff::new).snooze();
                    w = s.state.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// Post with a permit ([`state::send_permit`], `AcqRel` as in `reserve`):
    /// its ticket, notification and the word before (for [`Shared::permit_back`]
    /// once the slot is published); `None` if closed (give the permit back).
    pub(crate) fn send_permit(&self) -> Option<(u64, Notify, u64)> {
        let mut backoff: Option<Backoff> = None;
        loop {
            match self.transition(Ordering::AcqRel, |w| match state::send_permit(w) {
                Reserve::Ticket {
                    ticket,
                    notify,
                    new,
                } => Ok((new, Ok((ticket, notify, w)))),
                refused => Err(Err(refused)),
            }) {
                Ok(sent) => return Some(sent),
                Err(Reserve::Resizing) => backoff.get_or_insert_with(Backoff::new).snooze(),
                Err(_) => return None, // closed (a permit is never refused as full)
            }
        }
    }

    /// Give a permit back ([`state::release_permit`]); `Relaxed`: no data.
    pub(crate) fn release_permit(&self) {
        let old = self.transition(Ordering::Relaxed, |w| Ok((state::release_permit(w), w)));
        self.permit_back(old, true);
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
            Arm::Armed(w) => match self.losses.after_arm() {
                AfterArm::Nothing => Arm::Armed(w),
                seen => self.arm_saw_loss_word(seen, w),
            },
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

    /// The CAS of [`Shared::disarm_unless_reserved`]: `None` if reserved,
    /// else whether it took `CNO_ARMED` (the caller owes its trigger, or,
    /// enabling, takes that enable back).
    pub(super) fn withdraw(&self, want: u64) -> Option<bool> {
        let h = self.head();
        // AcqRel: Acquire if this takes CNO_ARMED, as any trigger's CAS (the
        // binding is the consumer's own write, but the path is the same).
        self.transition(Ordering::AcqRel, |w| {
            // A lossy poster commits, then takes ARMED with an AcqRel RMW: if
            // `w` is that RMW's or later, the fence makes the commit visible;
            // if earlier, our CAS fails on it, or the poster triggers the CNO.
            let report = state::has(w, state::CNO_ARMED) && {
                fence(Ordering::Acquire);
                self.loss_pending()
            };
            match state::withdraw_unless_reserved(w, h, want, report) {
                Err(()) => Err(None),
                Ok(Some((new, notify))) => Ok((new, Some(notify == Notify::Cno))),
                Ok(None) => Err(Some(false)),
            }
        })
    }

    /// Enable the EVD on its CNO: the arm-then-check CAS. Returns what it
    /// found and the trigger it owes the slot's count.
    pub(crate) fn cno_enable(&self) -> (Arm, Owed) {
        // Withdraw a stale ARMED (a dropped poll's) that would take the CNO's
        // news. An enable left with news (a direct wait took a post's wake)
        // is taken back, not triggered: this call reports them, and a key
        // would send the CNO's waiter to them too. Relaxed: only we set either.
        let w = self.state.load(Ordering::Relaxed);
        if state::has(w, state::ARMED | state::CNO_ARMED) && self.withdraw(u64::MAX) == Some(true) {
            return (Arm::Pending, Owed::TakenBack);
        }
        let h = self.head();
        // AcqRel, as `arm`: Release publishes the binding to the poster whose
        // Acquire reservation takes CNO_ARMED; Acquire makes a loss visible
        // if its poster's RMW on the word came first.
        let r = self.transition(Ordering::AcqRel, |w| match state::enable_cno(w, h) {
            Enable::Armed(new) => Ok((new, Enable::Armed(new))),
            other => Err(other),
        });
        match r {
            Enable::Armed(w) => match self.losses.after_arm() {
                AfterArm::Nothing => (Arm::Armed(w), Owed::Trigger),
                // As in `arm`: take the enable back and report the loss. If a
                // trigger took the enable first, its key is on the way: that
                // is `Armed` (a key comes exactly when the enable says so).
                AfterArm::Report if self.cno_disarm() => (Arm::Pending, Owed::Nothing),
                AfterArm::Report => (Arm::Armed(w), Owed::Trigger),
                AfterArm::CloseBegun => (Arm::Armed(w), Owed::TriggerByClose),
            },
            Enable::AlreadyArmed => {
                // Counted by the enable that set it. As in `arm`, a close
                // begun behind it is finished here, which delivers that
                // trigger (a panic of its wakers leaves no count short).
                if self.losses.after_arm() == AfterArm::CloseBegun {
                    self.finish_close();
                }
                let w = self.state.load(Ordering::Relaxed);
                (Arm::Armed(w), Owed::Nothing)
            }
            Enable::Pending => (Arm::Pending, Owed::Nothing),
            Enable::Closed => {
                // As in `arm`: the final loss count is visible after the fence.
                fence(Ordering::Acquire);
                if self.loss_pending() {
                    (Arm::Pending, Owed::Nothing)
                } else {
                    (Arm::Closed, Owed::Nothing)
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
    /// Two steps: the loss word first ([`loss::close`](crate::state::loss::close): no loss is committed
    /// after it), then the state word ([`state::close`]: no ticket is handed
    /// out after it). Anyone who finds the first step done and the second not
    /// yet may finish it ([`Shared::finish_close`]), so a closer descheduled
    /// between the two holds nobody up.
    pub(crate) fn close(&self) {
        self.losses.close();
        self.finish_close();
    }

    /// Close's second step: CLOSED in the state word, and the wake of an
    /// armed consumer. Idempotent. Called only after the loss word is closed.
    pub(crate) fn finish_close(&self) {
        // AcqRel: Release so that whoever sees CLOSED with an Acquire load
        // also sees the loss word closed (and so the final loss count); Acquire
        // to take over an arm's registered waker.
        let (closed_here, wake, trigger_cno) = self.transition(Ordering::AcqRel, |w| {
            if state::has(w, state::CLOSED) {
                Err((false, false, false))
            } else {
                let c = state::close(w);
                Ok((c.new, (true, c.wake, c.trigger_cno)))
            }
        });
        // After CLOSED: a woken waiter's next post is refused as closed. The
        // CNO's trigger lands first, before any user code (the closed event's
        // subscriber too): a waker run below may disable the EVD, whose
        // barrier waits for it. Every step runs even if one before it panics
        // (the posters' wakes catch their own); the first goes on after them.
        let mut panics = Panics::default();
        if trigger_cno {
            panics.run(|| self.trigger_cno());
        }
        self.wake_posters_on_close();
        if wake {
            panics.run(|| self.notify_consumer());
        }
        if closed_here {
            panics.run(|| trace::event!(DEBUG, evd = self.id(), "EVD closed"));
        }
        panics.resume();
    }

    /// A lossy post found the ring full and gives its event up: commit the
    /// loss, then take the notification as a post would (the caller performs
    /// it). `None` if close has begun (the event is handed back as closed
    /// instead).
    #[cold]
    pub(crate) fn commit_loss(&self) -> Option<Notify> {
        // Relaxed: the state word RMW below orders the commit for the arm and
        // the upcall exit; close's order is the loss word's own order.
        if !self.losses.commit() {
            // Close has begun; make sure it is finished before the poster is
            // told, so that its next post is refused too.
            self.finish_close();
            return None;
        }
        self.counters.lost.fetch_add(1, Ordering::Relaxed);
        // Always one RMW, AcqRel, even with nobody to notify: the module
        // doc's "lossy post's notification" argues it.
        Some(self.transition(Ordering::AcqRel, |w| {
            Ok(state::notify_loss(w).unwrap_or((w, Notify::None)))
        }))
    }

    /// `NOTIFIED`, read by a CAS that writes the word back unchanged, by the
    /// consumer that has just published a new eventfd: the module doc's "new
    /// eventfd" argues why a post reaches the fd or its maker sees this.
    #[cfg(any(target_os = "linux", loom))]
    #[cold]
    pub(crate) fn notified_seen_by_new_target(&self) -> bool {
        let w = self.transition(Ordering::AcqRel, |w| Ok((w, w)));
        state::has(w, state::NOTIFIED)
    }

    /// Set `RESIZING` ([`state::begin_resize`]); returns the word installed.
    /// `Acquire`: after this no ticket is handed out, and every ticket
    /// handed out before is in `[head, tail(w))`. Caller: the consumer.
    pub(super) fn begin_resize(&self) -> u64 {
        self.transition(Ordering::Acquire, |w| match state::begin_resize(w) {
            Some(n) => Ok((n, n)),
            // Only the consumer resizes, and nothing between its begin and
            // end unwinds: going on would move the ring under posters.
            None => unreachable!("a resize begun while one is under way"),
        })
    }

    /// Clear `RESIZING` with the capacity `2^log2` ([`state::end_resize`]).
    /// `Release`: a poster whose reservation reads the cleared flag (or any
    /// later word) sees the buffer pointer installed before this.
    pub(super) fn end_resize(&self, log2: u32) {
        self.transition(Ordering::Release, |w| Ok((state::end_resize(w, log2), ())));
    }

    /// The consumer's own notification ([`state::note_notification`]): a
    /// trigger it delivers in a CNO move. `Relaxed`: it publishes nothing;
    /// `NOTIFIED` is read back by this consumer's own later RMWs (an arm,
    /// a new eventfd), which see it by the word's order.
    pub(crate) fn note_notification(&self) {
        self.transition(Ordering::Relaxed, |w| Ok((state::note_notification(w), ())));
    }

    // ---- upcalls: the token holder's operations on the word ----

    /// ManyInstances: the holder took one event out and gives the token back
    /// before running its handler. Returns the word installed.
    pub(crate) fn release_token(&self) -> u64 {
        // AcqRel: Release hands our head and slot reads to the next token
        // holder.
        self.transition(Ordering::AcqRel, |w| {
            let n = state::release_token(w);
            Ok((n, n))
        })
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

    /// Install a policy: true if the caller took the token and must run an
    /// instance now (queued events, or a loss report, under `Invoke::Any`;
    /// after a quiesce begun at tail count `since`, events posted since
    /// count as new, [`state::invoke_after_quiesce`]), the instances in
    /// flight and the tail count in the word installed.
    ///
    /// A policy installed on a full ring with no instance to drain it
    /// (`Invoke::New`, or after a quiesce) wakes the posters waiting for
    /// room ([`Shared::wake_room_if_stranded`]).
    pub(crate) fn set_policy(
        &self,
        bits: PolicyBits,
        invoke: Invoke,
        since: Option<u64>,
    ) -> (bool, u64, u64) {
        let h = self.head();
        // AcqRel: Release hands the consumer side to instances that start
        // under the new policy; Acquire to see the last instance's head.
        let (start, new, invoke) = self.transition(Ordering::AcqRel, |w| {
            let invoke = since.map_or(invoke, |t| state::invoke_after_quiesce(w, h, t, invoke));
            let r = state::set_policy(w, h, bits, invoke);
            Ok((r.new, (r.start_instance, r.new, invoke)))
        });
        if !start {
            self.wake_room_if_stranded(new);
        }
        // A loss report counts as a queued event for Invoke::Any; after a
        // quiesce (`since`) as news whatever `invoke`: a lossy post in that
        // window committed its loss with no policy to notify (its RMW does
        // not change the word, so only this load after the CAS sees it).
        let report = invoke == Invoke::Any || since.is_some();
        let start = start || (report && self.loss_pending() && self.restart_for_loss());
        (start, state::instances(new), state::tail_count(new, h))
    }

    /// [`Poster::start_draining_upcall`](crate::Poster::start_draining_upcall):
    /// if an upcall policy is enabled and idle with events queued, take the
    /// token as a post refused as full does
    /// ([`state::start_upcall_to_drain`]); the caller runs the instance. The
    /// head is loaded before the word, as in the reservation's full check;
    /// an instance started on a ring that a dequeue freed meanwhile only
    /// drains it sooner, as any post's instance would.
    pub(crate) fn take_token_to_drain(&self) -> bool {
        let head = self.consumer.head.load(Ordering::Acquire);
        // AcqRel, as any token hand-off: see the last holder's head.
        self.transition(Ordering::AcqRel, |w| {
            match state::start_upcall_to_drain(w, head) {
                Some(new) => Ok((new, true)),
                None => Err(false),
            }
        })
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
}
