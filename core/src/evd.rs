//! The shared EVD and its two kinds of handle: [`Poster`] and [`Consumer`].

use crate::error::{
    BatchPostError, CreateError, Overflow, PostError, ResizeError, TryDequeueError,
};
use crate::notify::NotifyTargets;
use crate::query::{Counters, Query, UpcallPolicy};
use crate::ring::Buffer;
use crate::state::{self, loss, Arm, Notify, ReserveBatch};
use crate::sync::{fence, Arc, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Backoff, Ordering};
use crate::upcall::HandlerSlot;
use crossbeam_utils::CachePadded;

/// Back-off steps a blocking wait takes before it parks, by default: about
/// 130 spins and 3 yields.
pub const DEFAULT_SPIN_BUDGET: u32 = 10;

/// The largest capacity an EVD can have (2^32 events).
pub const MAX_CAPACITY: usize = 1 << state::MAX_CAP_LOG2;

/// The head epoch is the head divided by 2^40: a poster trusts its cached
/// head only while it is at most one epoch behind, so the distance from it to
/// the tail stays below 3·2^40 + capacity, well inside the 2^45 range in which
/// the word's tail is compared.
pub(crate) const HEAD_EPOCH_SHIFT: u32 = 40;

/// Attempts [`Shared::query`] makes at reading the head unchanged around its
/// load of the word before it settles for a clamped figure.
const QUERY_ATTEMPTS: usize = 64;

/// The lines the consumer (or the upcall instance holding the token) writes
/// on every dequeue; posters read `head` only when the ring looks full.
pub(crate) struct ConsumerLine {
    /// The consumer's head, a full 64-bit count of dequeued events. Written
    /// only by the consumer (or the token holder), with `Release` after the
    /// value is moved out, so a poster that loads it with `Acquire` may reuse
    /// the slot.
    pub(crate) head: AtomicU64,
    /// The last dequeue returned a loss report: the next one prefers an event,
    /// so reports and events alternate and a flood of losses cannot starve
    /// the consumer of the queued events. Touched only by the consumer side.
    last_was_report: AtomicBool,
}

/// Fields every post reads and nobody writes in steady state.
pub(crate) struct ReadMostly<T> {
    /// The current ring. Replaced only by a resize, while `RESIZING` holds
    /// every poster off (see [`Consumer::resize`]).
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
    pub(crate) state: CachePadded<AtomicU64>,
    /// Written by the consumer side on every dequeue.
    pub(crate) consumer: CachePadded<ConsumerLine>,
    /// Read by every post.
    read_mostly: CachePadded<ReadMostly<T>>,
    /// The loss word ([`state::loss`]): close's first step and the count of
    /// events lost by lossy posts, not yet reported.
    losses: CachePadded<AtomicU64>,
    /// Where notifications go: the registered waker and the optional eventfd.
    pub(crate) targets: CachePadded<NotifyTargets>,
    /// The upcall handler.
    pub(crate) handler: HandlerSlot<T>,
    /// Waits fail with `Unwaitable` while this is set.
    pub(crate) unwaitable: AtomicBool,
    /// Live `Poster` handles; the last one to drop closes the EVD.
    pub(crate) posters: AtomicUsize,
    /// Statistics that are not derived from the word and the head.
    pub(crate) counters: CachePadded<Counters>,
}

// SAFETY: the slots hand each `T` from one thread to another exactly once
// (publish/take), so `T: Send` is what is needed; every other field is atomic.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above; shared access goes through atomics and the slot protocol.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn new(log2: u32, buffer: Buffer<T>) -> Self {
        Shared {
            state: CachePadded::new(AtomicU64::new(state::initial(log2))),
            consumer: CachePadded::new(ConsumerLine {
                head: AtomicU64::new(0),
                last_was_report: AtomicBool::new(false),
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
        }
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
    /// out), and bump the head epoch when it crosses a boundary.
    #[inline(always)]
    pub(crate) fn publish_head(&self, old: u64, new: u64) {
        // Release: the values were moved out before a poster may reuse the
        // slots (it loads the head with Acquire).
        self.consumer.head.store(new, Ordering::Release);
        if new >> HEAD_EPOCH_SHIFT != old >> HEAD_EPOCH_SHIFT {
            self.read_mostly
                .head_epoch
                .store(new >> HEAD_EPOCH_SHIFT, Ordering::Release);
        }
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
    pub(crate) fn swap_buffer(&self, fresh: Buffer<T>) -> *mut Buffer<T> {
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

    /// Apply `f` to the word until the CAS succeeds or `f` declines.
    #[inline]
    pub(crate) fn update<R>(
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

    /// Apply `f` to the loss word until the CAS succeeds or `f` declines;
    /// returns the word installed, or `None`.
    fn update_losses(
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

    /// Perform the notification a reservation (or a lossy post) took.
    #[inline(always)]
    pub(crate) fn deliver_notification(&self, notify: Notify) {
        match notify {
            Notify::None => {}
            Notify::Wake => self.notify_consumer(),
            Notify::Upcall => crate::upcall::run_instance(self),
        }
    }

    /// Notify an armed consumer: count it, wake its waker, poke its eventfd.
    pub(crate) fn notify_consumer(&self) {
        self.counters.notifications.fetch_add(1, Ordering::Relaxed);
        self.targets.notify();
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
        self.update_losses(Ordering::AcqRel, |l| {
            (!loss::is_closed(l)).then_some(loss::close(l))
        });
        self.finish_close();
    }

    /// Close's second step: CLOSED in the state word, and the wake of an
    /// armed consumer. Idempotent. Called only after the loss word is closed.
    pub(crate) fn finish_close(&self) {
        // AcqRel: Release so that whoever sees CLOSED with an Acquire load
        // also sees the loss word closed (and so the final loss count); Acquire
        // to take over an arm's registered waker.
        let wake = self.update(Ordering::AcqRel, |w| {
            if state::has(w, state::CLOSED) {
                Err(false)
            } else {
                Ok(state::close(w))
            }
        });
        if wake {
            self.notify_consumer();
        }
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
        self.update_losses(Ordering::Relaxed, |l| {
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
        let buf = self.buffer();
        if buf.is_published(h) {
            // SAFETY: we are the only consumer, `h` is the head, and it is
            // published; the head moves past it right after, so it is taken once.
            let v = unsafe { buf.take(h) };
            self.publish_head(h, h.wrapping_add(1));
            if last_was_report {
                self.consumer
                    .last_was_report
                    .store(false, Ordering::Relaxed);
            }
            return Ok(v);
        }
        self.nothing_ready(h, last_was_report)
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

    /// Move up to `max` published events at the head into `out`, with one
    /// head store. Caller: the consumer side.
    pub(crate) fn dequeue_batch(
        &self,
        out: &mut Vec<T>,
        max: usize,
    ) -> Result<usize, TryDequeueError> {
        let last_was_report = self.consumer.last_was_report.load(Ordering::Relaxed);
        if !last_was_report {
            if let Some(o) = self.take_report() {
                return Err(TryDequeueError::Overflow(o));
            }
        }
        let n = self.ready(max as u64) as usize;
        if n == 0 {
            return match self.nothing_ready::<()>(self.head(), last_was_report) {
                Err(TryDequeueError::Empty) => Ok(0),
                Err(e) => Err(e),
                Ok(()) => unreachable!("nothing_ready returns no event"),
            };
        }
        // Reserve before taking anything, so no allocation (or its panic)
        // comes between a take and its push.
        out.reserve(n);
        let h = self.head();
        let buf = self.buffer();
        for i in 0..n as u64 {
            // SAFETY: published (counted above; a published slot stays so until
            // the consumer takes it) and at or past the head; `out` has room.
            out.push(unsafe { buf.take(h.wrapping_add(i)) });
        }
        // One head store for the whole batch, after every value moved.
        self.publish_head(h, h.wrapping_add(n as u64));
        if last_was_report {
            self.consumer
                .last_was_report
                .store(false, Ordering::Relaxed);
        }
        Ok(n)
    }

    /// The arm-then-check CAS for a consumer at its current head. A loss
    /// report waiting to be dequeued counts as pending work.
    #[inline]
    pub(crate) fn arm(&self, threshold: u64) -> Arm {
        let h = self.head();
        // AcqRel: Release publishes the waker registered before this arm to
        // the poster whose Acquire reservation CAS disarms it; Acquire makes a
        // loss visible if its poster's RMW on the word came first.
        let r = self.update(Ordering::AcqRel, |w| match state::arm(w, h, threshold) {
            Arm::Arm(new) => Ok((new, Arm::Arm(new))),
            other => Err(other),
        });
        match r {
            Arm::Arm(_) if self.loss_pending() => {
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

    /// Withdraw an arm (timed-out wait, dropped future).
    pub(crate) fn disarm(&self) {
        self.update(Ordering::Relaxed, |w| {
            if state::has(w, state::ARMED) {
                Ok((state::disarm(w), ()))
            } else {
                Err(())
            }
        })
    }

    /// A lossy post found the ring full and gives its event up: commit the
    /// loss, then take the notification as a post would. False if close has
    /// begun (the event is handed back as closed instead).
    #[cold]
    pub(crate) fn commit_loss(&self) -> bool {
        // Relaxed: the state word RMW below orders the commit for the arm and
        // the upcall exit; close's order is the loss word's own order.
        if self
            .update_losses(Ordering::Relaxed, loss::commit)
            .is_none()
        {
            // Close has begun; make sure it is finished before the poster is
            // told, so that its next post is refused too.
            self.finish_close();
            return false;
        }
        self.counters.lost.fetch_add(1, Ordering::Relaxed);
        // Always one RMW on the word, even with nobody to notify (then it
        // writes the word back unchanged). AcqRel: its Release makes the loss
        // above visible to whoever's CAS on the word comes later — an arm, an
        // upcall's exit — and they re-check the loss word after their CAS;
        // whoever came earlier is seen here (ARMED, or a free token) and
        // notified.
        let notify = self.update(Ordering::AcqRel, |w| {
            Ok(state::notify_loss(w).unwrap_or((w, Notify::None)))
        });
        self.deliver_notification(notify);
        true
    }

    /// A snapshot whose head and word belong to one instant: the head is read
    /// before and after the word, and the pair is used only if it did not
    /// move (the head moves only forward, so then it was that value when the
    /// word was read). A consumer busy enough to move it every time gets a
    /// head read before the word: `len` is then at most the distance to a
    /// head older than the true one, clamped to the capacity.
    pub(crate) fn query(&self) -> Query {
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
        let mut first_panic = None;
        for i in 0..n {
            let t = h.wrapping_add(i);
            while !buf.is_published(t) {
                backoff.snooze();
            }
            // SAFETY: published, at or past the head, never taken; the head is
            // moved past it before anything else can run.
            let v = unsafe { buf.take(t) };
            self.publish_head(t, t.wrapping_add(1));
            drop_catching(v, &mut first_panic);
        }
        if let Some(p) = first_panic {
            std::panic::resume_unwind(p);
        }
    }
}

/// Drop `v`; if its destructor panics, keep the first panic for later.
fn drop_catching<T>(v: T, first_panic: &mut Option<Box<dyn std::any::Any + Send>>) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(v)));
    if let Err(p) = r {
        first_panic.get_or_insert(p);
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
        let mut first_panic = None;
        for i in 0..state::len(w, h) {
            let t = h.wrapping_add(i);
            if buf.is_published(t) {
                // SAFETY: published and never taken (it is at or past the head).
                drop_catching(unsafe { buf.take(t) }, &mut first_panic);
            }
        }
        drop(buf);
        if let Some(p) = first_panic {
            std::panic::resume_unwind(p);
        }
    }
}

/// Round a requested capacity up to the ring's power of two.
pub(crate) fn cap_log2_for(capacity: usize) -> Option<u32> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return None;
    }
    Some(capacity.next_power_of_two().trailing_zeros())
}

/// Create an EVD holding at least `capacity` events, split into its posting
/// handle and its consumer.
///
/// The capacity is rounded up to a power of two (as DAT's `evd_min_qlen` is a
/// minimum); [`Consumer::query`] reports the real one.
///
/// ```
/// let (poster, mut consumer) = evd::bounded::<&str>(8).unwrap();
/// poster.post("hello").unwrap();
/// assert_eq!(consumer.try_dequeue(), Ok("hello"));
///
/// assert_eq!(evd::bounded::<u8>(0).unwrap_err(), evd::CreateError::ZeroCapacity);
/// ```
pub fn bounded<T: Send>(capacity: usize) -> Result<(Poster<T>, Consumer<T>), CreateError> {
    if capacity == 0 {
        return Err(CreateError::ZeroCapacity);
    }
    let log2 = cap_log2_for(capacity).ok_or(CreateError::CapacityTooLarge {
        requested: capacity,
    })?;
    let buffer = Buffer::try_new(log2).ok_or(CreateError::AllocFailed {
        capacity: 1 << log2,
    })?;
    let shared = Arc::new(Shared::new(log2, buffer));
    let poster = Poster {
        shared: shared.clone(),
        head_hint: AtomicU64::new(0),
    };
    Ok((poster, Consumer::new(shared)))
}

/// A posting handle: cloneable, `Send + Sync`, usable from any thread.
///
/// [`Poster::post`] is lock-free and allocation-free: one CAS on the state word
/// reserves a slot (and takes the notification if the consumer is armed), then
/// the value is written and published.
pub struct Poster<T> {
    shared: Arc<Shared<T>>,
    /// A head the consumer has passed (a lower bound of the real head). Read
    /// instead of the consumer's line on every post; reloaded only when the
    /// ring looks full. `Release`/`Acquire` so that a thread using another
    /// thread's refresh still synchronizes with the consumer's head store.
    head_hint: AtomicU64,
}

impl<T> Clone for Poster<T> {
    fn clone(&self) -> Self {
        self.shared.posters.fetch_add(1, Ordering::Relaxed);
        Poster {
            shared: self.shared.clone(),
            head_hint: AtomicU64::new(self.head_hint.load(Ordering::Acquire)),
        }
    }
}

impl<T> Drop for Poster<T> {
    fn drop(&mut self) {
        // AcqRel: the last poster's close must come after every other poster's
        // posts, which their own decrements release.
        if self.shared.posters.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.close();
        }
    }
}

impl<T: Send> Poster<T> {
    /// Post an event (DAT's `post_se`, and the path every source uses).
    ///
    /// A full ring hands the event back as [`PostError::Full`]: that is
    /// backpressure, not a loss, so nothing is counted or reported and the
    /// refusal costs no write to shared memory; retry, or give the event up
    /// with [`Poster::post_lossy`]. A closed EVD hands it back as
    /// [`PostError::Closed`]. If the consumer is armed, this post disarms it
    /// and notifies it exactly once; if an upcall policy is enabled and no
    /// upcall is running, this thread runs the upcall before returning.
    ///
    /// ```
    /// use evd::{PostError, TryDequeueError};
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u32).unwrap();
    /// assert_eq!(poster.post(2), Err(PostError::Full(2))); // handed back, not lost
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
    /// consumer.close();
    /// assert_eq!(poster.post(3), Err(PostError::Closed(3)));
    /// ```
    #[inline]
    pub fn post(&self, event: T) -> Result<(), PostError<T>> {
        match self.reserve(1) {
            Ok((ticket, _, notify)) => {
                let s = &*self.shared;
                // SAFETY: the reservation gave us `ticket`, and its full check
                // against a head the consumer has passed means the slot's
                // previous lap has been taken.
                unsafe { Buffer::publish(s.buffer_ptr(), ticket, event) };
                s.deliver_notification(notify);
                Ok(())
            }
            Err(BatchPostError::Full) => Err(PostError::Full(event)),
            Err(BatchPostError::Closed) => Err(PostError::Closed(event)),
        }
    }

    /// Post an event, or give it up if the ring is full (DAT's provider
    /// semantics: "queue it or count the loss"). A given-up event is dropped
    /// here, counted, and reported to the consumer as an [`Overflow`] before
    /// its end of stream; an armed consumer is woken (or an upcall started)
    /// to hear of it. A closed EVD hands the event back as
    /// [`PostError::Closed`]; this never returns [`PostError::Full`].
    ///
    /// ```
    /// use evd::{Lossy, Overflow, TryDequeueError};
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// assert_eq!(poster.post_lossy(1u32), Ok(Lossy::Posted));
    /// assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    /// assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Overflow(Overflow { lost: 1 })));
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// ```
    pub fn post_lossy(&self, event: T) -> Result<Lossy, PostError<T>> {
        match self.post(event) {
            Ok(()) => Ok(Lossy::Posted),
            Err(PostError::Closed(ev)) => Err(PostError::Closed(ev)),
            Err(PostError::Full(ev)) => {
                if self.shared.commit_loss() {
                    drop(ev);
                    Ok(Lossy::Lost)
                } else {
                    Err(PostError::Closed(ev))
                }
            }
        }
    }

    /// Post events from the front of `events` with one reservation: as many
    /// as the ring has room for, in order (`min(events.len(), free slots)`,
    /// whatever this handle's cached view of the consumer says). Returns how
    /// many were posted; they are drained from `events`, the rest stay there.
    /// A call that can post nothing is refused with [`BatchPostError::Full`]
    /// (backpressure: nothing is counted). The consumer is notified once,
    /// after the whole batch is published.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let mut batch = vec![1, 2, 3, 4, 5, 6];
    /// assert_eq!(poster.post_batch(&mut batch), Ok(4));
    /// assert_eq!(batch, [5, 6]);
    /// assert_eq!(poster.post_batch(&mut batch), Err(evd::BatchPostError::Full));
    /// let mut out = Vec::new();
    /// consumer.dequeue_batch(&mut out, 8).unwrap();
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// ```
    pub fn post_batch(&self, events: &mut Vec<T>) -> Result<usize, BatchPostError> {
        if events.is_empty() {
            return Ok(0);
        }
        let (first, count, notify) = self.reserve(events.len() as u64)?;
        let s = &*self.shared;
        let buf = s.buffer_ptr();
        // `Drain` yields exactly `count` items (count <= len), and cannot
        // panic, so every reserved ticket gets its value.
        for (i, ev) in events.drain(..count as usize).enumerate() {
            // SAFETY: as in `post`, for each ticket of the batch.
            unsafe { Buffer::publish(buf, first.wrapping_add(i as u64), ev) };
        }
        s.deliver_notification(notify);
        Ok(count as usize)
    }

    /// The reservation loop shared by `post` and `post_batch`: up to `want`
    /// (≥ 1) tickets; returns the first ticket, the count and the owed
    /// notification. A refusal writes nothing shared.
    #[inline(always)]
    fn reserve(&self, want: u64) -> Result<(u64, u64, Notify), BatchPostError> {
        let s = &*self.shared;
        let mut hint = self.head_hint.load(Ordering::Acquire);
        let mut w = s.state.load(Ordering::Relaxed);
        let mut backoff: Option<Backoff> = None;
        // A short batch is settled for only against a freshly loaded head.
        let mut head_is_fresh = false;
        loop {
            // A hint more than one epoch old could be 2^45 tickets behind,
            // where the word's tail wraps and a full ring would look empty:
            // reload it. Checked after every load of `w` (a stall between the
            // check and the load must not outlive it), assuming the epoch
            // load is not 2^40 events stale itself.
            if s.read_mostly
                .head_epoch
                .load(Ordering::Relaxed)
                .wrapping_sub(hint >> HEAD_EPOCH_SHIFT)
                >= 2
            {
                hint = self.refresh_hint();
                w = s.state.load(Ordering::Relaxed);
            }
            match state::reserve_batch(w, hint, want) {
                ReserveBatch::Tickets { count, .. } if count < want && !head_is_fresh => {
                    // The room computed from the cached head may be smaller
                    // than the real one: look once more before a short count.
                    head_is_fresh = true;
                    let fresh = self.refresh_hint();
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
                        return Err(BatchPostError::Full);
                    }
                    if fresh != hint {
                        hint = fresh;
                        self.head_hint.store(fresh, Ordering::Release);
                    }
                    w = fresh_w;
                }
                ReserveBatch::Closed => return Err(BatchPostError::Closed),
                ReserveBatch::Resizing => {
                    backoff.get_or_insert_with(Backoff::new).snooze();
                    w = s.state.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// Load the consumer's head into this handle's hint.
    #[cold]
    fn refresh_hint(&self) -> u64 {
        // Acquire: a slot below this head has been emptied by the consumer.
        let fresh = self.shared.consumer.head.load(Ordering::Acquire);
        self.head_hint.store(fresh, Ordering::Release);
        fresh
    }
}

impl<T> Poster<T> {
    /// Close the EVD: later posts are refused (the event is handed back); the
    /// consumer dequeues what is queued, then sees end-of-stream.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// poster.post(1u8).unwrap();
    /// poster.close();
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// assert_eq!(consumer.try_dequeue(), Err(evd::TryDequeueError::Closed));
    /// ```
    pub fn close(&self) {
        self.shared.close();
    }

    /// Make blocking waits fail with [`WaitError::Unwaitable`](crate::WaitError)
    /// and wake a waiter that is blocked now. Posts keep queueing.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// poster.set_unwaitable();
    /// assert_eq!(consumer.wait(1, None), Err(evd::WaitError::Unwaitable));
    /// poster.clear_unwaitable();
    /// poster.post(7).unwrap();
    /// assert_eq!(consumer.wait(1, None), Ok(1));
    /// ```
    pub fn set_unwaitable(&self) {
        // Release before the wake: a waiter woken by it, or registering after
        // it, sees the flag (its register is Acquire on the waker slot).
        self.shared.unwaitable.store(true, Ordering::Release);
        self.shared.targets.wake_waker();
    }

    /// Undo [`Poster::set_unwaitable`].
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(4).unwrap();
    /// poster.set_unwaitable();
    /// poster.clear_unwaitable();
    /// assert!(!poster.query().unwaitable);
    /// ```
    pub fn clear_unwaitable(&self) {
        self.shared.unwaitable.store(false, Ordering::Release);
    }

    /// A snapshot of the EVD's state and counters.
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(3).unwrap();
    /// poster.post(1).unwrap();
    /// let q = poster.query();
    /// assert_eq!((q.capacity, q.len, q.posted), (4, 1, 1));
    /// ```
    pub fn query(&self) -> Query {
        self.shared.query()
    }

    /// True once the EVD is closed.
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded::<u8>(1).unwrap();
    /// drop(consumer);
    /// assert!(poster.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        state::has(self.shared.state.load(Ordering::Acquire), state::CLOSED)
    }
}

/// What [`Poster::post_lossy`] did with the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a lost event may need accounting"]
pub enum Lossy {
    /// The event was queued.
    Posted,
    /// The ring was full: the event was dropped, counted, and will be
    /// reported to the consumer as an [`Overflow`].
    Lost,
}

/// What [`Consumer::arm`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "sleep only on `Armed`; `Pending` means events are waiting"]
pub enum ArmStatus {
    /// Armed: the next post notifies (waker, thread, eventfd). Safe to sleep.
    Armed,
    /// Events are waiting: keep draining; do not sleep.
    Pending,
    /// Closed and drained: end of stream.
    Closed,
}

/// The one consumer of an EVD: `Send`, not `Clone`.
///
/// It dequeues (one at a time or in batches), arms, waits (blocking, async, or
/// through an eventfd), resizes, and can hand itself to an upcall dispatcher
/// with [`Consumer::into_upcalls`](crate::Consumer::into_upcalls).
pub struct Consumer<T> {
    pub(crate) shared: Arc<Shared<T>>,
    /// Unpark-this-thread waker for blocking waits, made on first use.
    pub(crate) thread_waker: Option<(crate::sync::thread::ThreadId, std::task::Waker)>,
    /// Back-off steps before a blocking wait parks.
    pub(crate) spin_budget: u32,
}

impl<T> Consumer<T> {
    fn new(shared: Arc<Shared<T>>) -> Self {
        Consumer {
            shared,
            thread_waker: None,
            spin_budget: DEFAULT_SPIN_BUDGET,
        }
    }

    /// Dequeue one event.
    ///
    /// A pending overflow report comes first, once; then events, FIFO per
    /// poster; [`TryDequeueError::Closed`] once the EVD is closed and drained.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// assert_eq!(consumer.try_dequeue(), Err(evd::TryDequeueError::Empty));
    /// poster.post('a').unwrap();
    /// assert_eq!(consumer.try_dequeue(), Ok('a'));
    /// ```
    #[inline]
    pub fn try_dequeue(&mut self) -> Result<T, TryDequeueError> {
        self.shared.dequeue_one()
    }

    /// Dequeue up to `max` events into `out` (appended), returning how many.
    ///
    /// Takes every published event up to `max`, found by the slots' stamps
    /// alone, with one store of the head for the whole batch. `out` is
    /// reserved once for them, so a buffer with enough capacity is never
    /// reallocated. Returns `Ok(0)` when nothing is ready; a pending loss
    /// report comes first, as an error (never twice in a row while events
    /// are ready); `Err(Closed)` once closed and drained.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(8).unwrap();
    /// for i in 0..5 { poster.post(i).unwrap(); }
    /// let mut buf = Vec::with_capacity(8);
    /// assert_eq!(consumer.dequeue_batch(&mut buf, 3), Ok(3));
    /// assert_eq!(consumer.dequeue_batch(&mut buf, 8), Ok(2));
    /// assert_eq!(buf, [0, 1, 2, 3, 4]);
    /// ```
    pub fn dequeue_batch(
        &mut self,
        out: &mut Vec<T>,
        max: usize,
    ) -> Result<usize, TryDequeueError> {
        self.shared.dequeue_batch(out, max)
    }

    /// Arm-then-check in one CAS: either the next post notifies this consumer
    /// ([`ArmStatus::Armed`]: safe to sleep), or events are waiting
    /// ([`ArmStatus::Pending`]: keep draining). There is no second poll.
    ///
    /// Arming on an empty ring clears the sticky *notified* bit.
    ///
    /// ```
    /// use evd::ArmStatus;
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// assert_eq!(consumer.arm(), ArmStatus::Armed);
    /// poster.post(1).unwrap(); // disarms, notifies once
    /// assert!(consumer.query().notified);
    /// assert_eq!(consumer.arm(), ArmStatus::Pending);
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// assert_eq!(consumer.arm(), ArmStatus::Armed);
    /// assert!(!consumer.query().notified);
    /// ```
    #[inline]
    pub fn arm(&mut self) -> ArmStatus {
        match self.shared.arm(1) {
            Arm::Arm(_) => ArmStatus::Armed,
            Arm::Pending => ArmStatus::Pending,
            Arm::Closed => ArmStatus::Closed,
        }
    }

    /// Withdraw an arm: the next post will not notify.
    ///
    /// ```
    /// let (_poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// consumer.arm();
    /// consumer.disarm();
    /// assert!(!consumer.query().armed);
    /// ```
    pub fn disarm(&mut self) {
        self.shared.disarm();
    }

    /// Close the EVD; the consumer can still drain it.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// consumer.close();
    /// assert!(poster.post(1).is_err());
    /// ```
    pub fn close(&mut self) {
        self.shared.close();
    }

    /// A snapshot of the EVD's state and counters.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// poster.post(1u8).unwrap();
    /// consumer.try_dequeue().unwrap();
    /// let q = consumer.query();
    /// assert_eq!((q.posted, q.dequeued, q.len), (1, 1, 0));
    /// ```
    pub fn query(&self) -> Query {
        self.shared.query()
    }

    /// Back-off steps a blocking [`Consumer::wait`] takes before it parks
    /// (default [`DEFAULT_SPIN_BUDGET`]); 0 parks at once. Each step doubles
    /// its spinning up to 64 spins, and steps past the seventh yield the CPU
    /// (crossbeam's `Backoff::snooze`).
    ///
    /// ```
    /// let (_poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// consumer.set_spin_budget(0); // park as soon as nothing is ready
    /// ```
    pub fn set_spin_budget(&mut self, spins: u32) {
        self.spin_budget = spins;
    }

    /// A new posting handle (for example after every poster was dropped and
    /// the EVD was closed, a new poster still finds it closed).
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let p2 = consumer.poster();
    /// drop(poster);
    /// p2.post(5u8).unwrap();
    /// assert_eq!(consumer.try_dequeue(), Ok(5));
    /// ```
    pub fn poster(&self) -> Poster<T> {
        self.shared.posters.fetch_add(1, Ordering::Relaxed);
        Poster {
            shared: self.shared.clone(),
            head_hint: AtomicU64::new(self.shared.consumer.head.load(Ordering::Acquire)),
        }
    }

    /// Grow or shrink the ring (DAT's `evd_resize`) while posters run: no
    /// event is lost, FIFO is kept. The capacity is rounded up to a power of
    /// two; shrinking below the number of queued events is refused. Returns
    /// the new capacity.
    ///
    /// Posters that try to reserve during the move wait for it (it moves only
    /// the queued events); outside a resize, posting is lock-free.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(2).unwrap();
    /// poster.post(1).unwrap();
    /// poster.post(2).unwrap();
    /// assert_eq!(consumer.resize(8), Ok(8));
    /// poster.post(3).unwrap();
    /// assert_eq!(consumer.resize(1), Err(evd::ResizeError::TooSmall { queued: 3, capacity: 1 }));
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// ```
    pub fn resize(&mut self, capacity: usize) -> Result<usize, ResizeError> {
        if capacity == 0 {
            return Err(ResizeError::ZeroCapacity);
        }
        let log2 = cap_log2_for(capacity).ok_or(ResizeError::CapacityTooLarge {
            requested: capacity,
        })?;
        let new_cap = 1usize << log2;
        let s = &*self.shared;
        if s.capacity() == new_cap as u64 {
            return Ok(new_cap);
        }
        // Allocate before stopping the posters, to keep the window short.
        let fresh = Buffer::try_new(log2).ok_or(ResizeError::AllocFailed { capacity: new_cap })?;
        // Acquire: after this no ticket is handed out; the tickets already
        // handed out are in [head, tail(w)).
        let w = s.update(Ordering::Acquire, |w| {
            state::begin_resize(w).map(|n| (n, n)).ok_or(w)
        });
        let h = s.head();
        let queued = state::len(w, h);
        let old_log2 = state::cap_log2(w);
        if queued > new_cap as u64 {
            // Release: posters resume against the unchanged ring.
            s.update(Ordering::Release, |w| {
                Ok((state::end_resize(w, old_log2), ()))
            });
            return Err(ResizeError::TooSmall {
                queued: queued as usize,
                capacity: new_cap,
            });
        }
        let old = s.buffer();
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
        let old_ptr = s.swap_buffer(fresh);
        // Release: a poster whose reservation reads the cleared flag (or any
        // later word) sees the new buffer pointer.
        s.update(Ordering::Release, |w| Ok((state::end_resize(w, log2), ())));
        // SAFETY: every reserved ticket was published, so no poster touches the
        // old ring any more, and new reservations use the new one. Its values
        // were all moved out; dropping it frees only the slots.
        drop(unsafe { Box::from_raw(old_ptr) });
        Ok(new_cap)
    }
}

impl<T> Drop for Consumer<T> {
    fn drop(&mut self) {
        // Nobody will ever dequeue again: refuse further posts, and drop the
        // queued events now rather than when the last poster goes. Dropped
        // from inside its own upcall (the dispatcher being taken apart), the
        // running instance still holds the consumer side; it stops at its
        // next dequeue and the events go with the shared state.
        // A panicking waker (woken by the close) must not keep the queued
        // events alive: drop them, then resume its panic.
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.shared.close()));
        if state::instances(self.shared.state.load(Ordering::Acquire)) == 0 {
            self.shared.drop_queued_after_close();
        }
        if let Err(p) = closed {
            std::panic::resume_unwind(p);
        }
    }
}

impl<T> std::fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("state", &self.query())
            .finish()
    }
}

impl<T> std::fmt::Debug for Poster<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poster")
            .field("state", &self.query())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Put an empty EVD at `head` (as if 64-bit `head` events had passed).
    fn fast_forward<T>(c: &Consumer<T>, head: u64) {
        let s = &*c.shared;
        let w = s.state.load(Ordering::Relaxed);
        s.state.store(
            state::with_tail(w, head & state::TICKET_MASK),
            Ordering::Relaxed,
        );
        s.consumer.head.store(head, Ordering::Relaxed);
        s.read_mostly
            .head_epoch
            .store(head >> HEAD_EPOCH_SHIFT, Ordering::Relaxed);
    }

    #[test]
    fn an_idle_posters_stale_head_cannot_wrap_the_full_check() {
        // A poster idle while 2^45 tickets pass must not keep a head hint
        // that, compared modulo 2^45, makes a full ring look nearly empty.
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
                .shared
                .read_mostly
                .head_epoch
                .load(Ordering::Relaxed),
            1
        );
        drop(poster);
    }
}
