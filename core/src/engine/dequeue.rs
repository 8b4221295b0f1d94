//! The dequeue paths: every operation on the consumer's line
//! ([`ConsumerLine`](super::consumer_line::ConsumerLine): the head, the
//! report/event alternation, the seen tail, the pacer), made only by the
//! consumer side (the consumer, or the upcall instance holding the token).
//!
//! # Invariant
//!
//! The head is a full 64-bit count of dequeued events. Every ticket below it
//! was taken exactly once; every ticket in [head, tail) was reserved and is
//! published or being written. Only the consumer side moves it, and only
//! after the values below the new head were moved out.
//!
//! # Orderings
//!
//! * **Dequeue** = the head slot's stamp (`Acquire`, in [`crate::ring`]);
//!   if published, take the value and store the head (`Release`), so a
//!   poster that loads the head with `Acquire` (its full check) may reuse
//!   the slot. If not, the loss word (a read-mostly line) says whether close
//!   has begun; only then is the state word read, to tell "reserved, not yet
//!   written" from "closed and drained".
//! * **Reports and events alternate** (`ConsumerLine::last_was_report`):
//!   after a report the next dequeue prefers an event, so a flood of losses
//!   cannot starve the consumer.
//! * **Every head store is followed by the room check**
//!   ([`RoomFlags`](crate::room::RoomFlags)): the light half of the room
//!   barrier and one load of the consumer's own line; the cold path wakes
//!   one waiting poster per freed slot ([`crate::room`]).
//! * **The head epoch** (`head >> HEAD_EPOCH_SHIFT`, on the read-mostly line)
//!   is stored with `Release` when it changes, bounding how stale a poster's
//!   cached head may be (see `Shared::reserve`).

use super::{HEAD_EPOCH_SHIFT, Shared};
use crate::error::{Overflow, TryDequeueError};
use crate::state;
use crate::sync::{AtomicU64, Backoff, Ordering};
use crate::unwind::Panics;

impl<T> Shared<T> {
    /// The consumer's head (only the consumer side calls this for its own
    /// head; posters load it with `Acquire` in their full check).
    #[inline(always)]
    pub(crate) fn head(&self) -> u64 {
        self.consumer.head.load(Ordering::Relaxed)
    }

    /// The consumer's head as a poster may trust it: a slot below it has
    /// been emptied.
    pub(crate) fn fresh_head(&self) -> u64 {
        // Acquire: pairs with the consumer's Release head store.
        self.consumer.head.load(Ordering::Acquire)
    }

    /// A poster's cached head more than one head epoch old: not to be
    /// trusted (see `reserve`); a load of the read-mostly line.
    #[inline(always)]
    pub(super) fn hint_is_stale(&self, hint: u64) -> bool {
        self.read_mostly
            .head_epoch
            .load(Ordering::Relaxed)
            .wrapping_sub(hint >> HEAD_EPOCH_SHIFT)
            >= 2
    }

    /// Load the consumer's head into a poster's hint. The hint is
    /// `Release`/`Acquire` so that a thread using another thread's refresh
    /// still synchronizes with the consumer's head store.
    #[cold]
    pub(super) fn refresh_hint(&self, hint_cell: &AtomicU64) -> u64 {
        let fresh = self.fresh_head();
        hint_cell.store(fresh, Ordering::Release);
        fresh
    }

    /// At least `threshold` events are queued or on their way, known without
    /// loading the state word: the head slot is published (for a threshold
    /// of 1), or the tail seen at the last load of the word is far enough
    /// ahead. Then [`state::arm`] would say `Pending` (a later word's tail
    /// is at or past the seen one) and change nothing, so this is that
    /// outcome without the load. The stamp catches the event that landed
    /// between the consumer's empty dequeue and its arm; the seen tail keeps
    /// a consumer that re-arms while a poster is between its reservation and
    /// its publish from pulling the posters' line on every retry (a
    /// contended load per retry, measured as a slower drain under two
    /// posters).
    #[inline]
    pub(super) fn known_pending(&self, h: u64, threshold: u64) -> bool {
        if threshold == 1 && self.buffer().is_published(h) {
            return true;
        }
        let seen_tail = self.consumer.seen_tail.load(Ordering::Relaxed);
        state::known_queued(seen_tail, h) >= threshold
    }

    /// Store the consumer's new head (after the values before it were moved
    /// out), bump the head epoch when it crosses a boundary, and wake posters
    /// waiting for the slots it freed.
    #[inline(always)]
    pub(super) fn publish_head(&self, old: u64, new: u64) {
        if self.store_head(old, new) {
            self.wake_room(new.wrapping_sub(old));
        }
    }

    /// [`Shared::publish_head`] up to the room check: store the head, bump
    /// the epoch, and return true if the caller must then wake posters
    /// waiting for room (with [`Shared::wake_room`]).
    #[inline(always)]
    pub(super) fn store_head(&self, old: u64, new: u64) -> bool {
        // Release: the values were moved out before a poster may reuse the
        // slots (it loads the head with Acquire).
        self.consumer.head.store(new, Ordering::Release);
        if new >> HEAD_EPOCH_SHIFT != old >> HEAD_EPOCH_SHIFT {
            self.read_mostly
                .head_epoch
                .store(new >> HEAD_EPOCH_SHIFT, Ordering::Release);
        }
        self.consumer.room.check_after_head_store()
    }

    /// Wake posters waiting for the `n` slots just freed, then hand `r`
    /// back: the room wake of a one-event dequeue, with the event passed
    /// through the call so that the fast path keeps nothing live across it
    /// and, out of line, saves no registers: a
    /// register saved on the fast path is a stack store that the next
    /// dequeue's loads wait behind (measured as a lower dequeue rate).
    #[cold]
    #[inline(never)]
    pub(super) fn wake_room_then<R>(&self, n: u64, r: R) -> R {
        self.wake_room(n);
        r
    }

    /// True if a loss report is waiting or close has begun: a waiter's
    /// back-off, which looks only at the slots, must stop looking and decide
    /// (one load of the read-mostly loss line; a hint, the decision reads
    /// the words again).
    #[inline(always)]
    pub(crate) fn report_or_close_begun(&self) -> bool {
        self.losses.report_or_close_begun()
    }

    /// True if a loss report is waiting (a load of the read-mostly loss line).
    #[inline(always)]
    pub(crate) fn loss_pending(&self) -> bool {
        self.losses.pending()
    }

    /// Take the pending loss report, if any, and remember that the consumer
    /// side was just told (its next dequeue prefers an event).
    #[inline]
    pub(crate) fn take_report(&self) -> Option<Overflow> {
        if !self.loss_pending() {
            return None;
        }
        let lost = self.losses.take()?;
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
    pub(super) fn took_one(&self, h: u64, v: T, last_was_report: bool) -> T {
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
    pub(super) fn nothing_ready<R>(
        &self,
        h: u64,
        last_was_report: bool,
    ) -> Result<R, TryDequeueError> {
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
    pub(super) fn empty_or_end(&self, h: u64) -> TryDequeueError {
        // Acquire: pairs with close's Release on the loss word.
        if !self.losses.close_begun() {
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
        self.buffer().published_run(self.head(), limit)
    }

    /// The start of a batch dequeue of up to `max` events: a pending loss
    /// report (unless the last dequeue was one) or the end of stream as the
    /// error; `None` when there is nothing to take now (or `max` is 0: then
    /// nothing is looked at or changed); else how many are published at the
    /// head, and whether the last dequeue was a report (for
    /// [`Shared::batch_end`]).
    pub(super) fn batch_start(&self, max: usize) -> Result<Option<(u64, bool)>, TryDequeueError> {
        if max == 0 {
            return Ok(None);
        }
        let last_was_report = self.consumer.last_was_report.load(Ordering::Relaxed);
        if !last_was_report {
            if let Some(o) = self.take_report() {
                return Err(TryDequeueError::Overflow(o));
            }
        }
        // A batch takes at most a whole ring: judged against more, a full
        // ring would look like a scan that stopped at a slot being written.
        let max64 = (max as u64).min(self.capacity());
        let (h, pacer) = (self.head(), &self.consumer.pacer);
        // The last batch took a run and its scan ended on the line a poster
        // is writing: let the posters get ahead before this scan
        // (`crate::pace`).
        let mut lingered = pacer.take_drained(h);
        if lingered {
            pacer.linger(h);
        }
        // One scan site, so that the compiled code holds one copy of the scan
        // loop: the batch paths' speed was measured to depend on where each
        // copy of it landed.
        let n = loop {
            let n = self.ready(max64);
            if lingered || !(crate::pace::is_short(n, max64) && pacer.after_run(h)) {
                break n;
            }
            // Right after a run the scan ended within a few slots of where it
            // started: the same, before looking again.
            pacer.linger(h);
            lingered = true;
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
    pub(super) fn batch_end(&self, head: u64, n: u64, last_was_report: bool) {
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

    /// The consumer side loaded the word `w` at head `h`: remember its tail.
    #[inline]
    pub(super) fn saw_word(&self, w: u64, h: u64) {
        self.consumer
            .seen_tail
            .store(state::tail_count(w, h), Ordering::Relaxed);
    }

    /// The consumer is being dropped from inside one of its own upcalls,
    /// instances in flight: the events still queued are left to them, to be
    /// dropped once none is in flight ([`Shared::after_instance_left`]). Caller: `Consumer`'s drop,
    /// after the close, while this thread's instance is still counted (and
    /// upcalls are disabled for good: the `Upcalls` is being dropped).
    pub(crate) fn leave_queued_to_instances(&self) {
        // Release: an instance that reads it with Acquire then sees the
        // disable, this thread's counted instance and the close, all before
        // it in this thread.
        self.consumer.queue_left.store(true, Ordering::Release);
    }

    /// An upcall instance has left, installing `new`. If none is in flight
    /// now and the consumer was dropped from inside an upcall, nobody can be
    /// the consumer side again (the EVD is closed, upcalls disabled, the
    /// `Upcalls` gone, so no instance starts): drop the events still queued,
    /// as the consumer's drop would have, once. The first panic of their
    /// `Drop`s is resumed ([`Shared::drop_queued_after_close`]).
    ///
    /// `new` alone does not say that: an instance that left with none in
    /// flight may get here after a later instance started, and the consumer
    /// was dropped in that one's upcall. So the word is read again after
    /// the mark, and of the leavers that find none in flight there, one
    /// takes the events.
    #[inline]
    pub(crate) fn after_instance_left(&self, new: u64) {
        // The last leaver's own word has none in flight (the count only
        // falls once upcalls are disabled): a leaver whose word has some
        // leaves the events to a later one, whatever the mark says.
        if state::instances(new) != 0 {
            return;
        }
        // Acquire: pairs with the mark's Release, so the load of the word
        // in `take_the_left_queue` is at or after the disable and the
        // marking thread's counted instance. The last leaver sees the mark:
        // it was stored before the marking thread's instance left with an
        // RMW on the word (AcqRel), whose release sequence the last
        // leaver's own RMW (AcqRel) reads.
        if self.consumer.queue_left.load(Ordering::Acquire) {
            self.take_the_left_queue();
        }
    }

    /// [`Shared::after_instance_left`] once the mark is seen: out of line,
    /// as only a consumer dropped inside its own upcall comes here.
    #[cold]
    #[inline(never)]
    fn take_the_left_queue(&self) {
        // Acquire: none in flight in a word at or after the disable means
        // none will ever be, and every instance's head stores happened
        // before its leaving RMW, which this load then reads from (or
        // after). Some in flight: the last of them drops the events.
        if state::instances(self.state.load(Ordering::Acquire)) != 0 {
            return;
        }
        // Relaxed: only picks one taker among the leavers that got here;
        // each is ordered after every instance by the loads above.
        if !self.consumer.queue_taken.swap(true, Ordering::Relaxed) {
            self.drop_queued_after_close();
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
