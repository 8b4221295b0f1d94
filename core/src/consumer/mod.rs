//! The one consumer of an EVD: [`Consumer`] and what its arm reports,
//! [`ArmStatus`]. Blocking waits, async receive and the eventfd live in the
//! submodules; every atomic operation they make is one of
//! [`Shared`]'s.

mod cno;
#[cfg(any(target_os = "linux", loom))]
mod eventfd;
mod future;
mod iter;
mod wait;

#[cfg(any(target_os = "linux", loom))]
pub use eventfd::NotifyFd;
pub use future::{Recv, RecvBatch};
pub use iter::{IntoIter, Iter, TryIter};
pub(crate) use wait::block_until;

use crate::cno::engine::Binding;
use crate::engine::Shared;
use crate::error::{ResizeError, TryDequeueError};
use crate::poster::Poster;
use crate::query::Query;
use crate::ring::{Buffer, cap_log2_for};
use crate::state::Arm;
use crate::sync::Arc;
use crate::unwind::Panics;
use std::time::Duration;

/// How long a blocking wait spins, then yields, before it arms and parks, by
/// default: 6 µs.
///
/// Half of it spins (looking at the slots in clock-timed gaps), half yields
/// the CPU between looks, so that posters sharing the CPUs can fill the ring;
/// a few microseconds is short beside the park/unpark round trip it saves
/// (measured at 10-20 µs on 2-CPU virtual machines).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(evd::DEFAULT_SPIN_BUDGET, Duration::from_micros(6));
/// let (_poster, consumer) = evd::bounded::<u8>(4).unwrap();
/// assert_eq!(consumer.spin_budget(), evd::DEFAULT_SPIN_BUDGET);
/// ```
pub const DEFAULT_SPIN_BUDGET: Duration = Duration::from_micros(6);

/// The longest a dequeue that finds nothing right after a run lingers, by
/// default ([`Consumer::set_linger_cap`]): 2 µs.
pub const DEFAULT_LINGER_CAP: Duration = crate::pace::LINGER_MAX;

/// What [`Consumer::arm`] found.
///
/// Exhaustive on purpose: these are the three outcomes of the arm-then-check
/// CAS, and a consumer must know which one lets it sleep. A `_` arm could
/// only guess (sleeping on an unknown status may miss a wakeup; draining on
/// one may spin), so a new status would be a breaking change.
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
///
/// ```compile_fail
/// fn assert_clone<T: Clone>() {}
/// assert_clone::<evd::Consumer<u8>>();
/// ```
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// Unpark-this-thread waker for blocking waits, made on first use.
    pub(crate) thread_waker: Option<(crate::sync::thread::ThreadId, crate::sync::ThreadWaker)>,
    /// How long a blocking wait backs off before it arms and parks.
    pub(crate) spin_budget: Duration,
    /// The `Stream` has yielded `None` (end of stream): `FusedStream`.
    pub(crate) stream_done: bool,
    /// The count of triggers the bound CNO slot will have seen once every
    /// trigger owed by this consumer's enables has landed (the disable
    /// barrier waits for it). Meaningful only while bound.
    pub(crate) cno_fired: u32,
    /// The CNO this EVD is bound to, if any ([`crate::cno`]): read and
    /// written only here, by the consumer. The EVD's shared state holds the
    /// trigger's end of it.
    pub(crate) cno: Option<Binding>,
}

impl<T> Consumer<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>) -> Self {
        Consumer {
            shared,
            thread_waker: None,
            spin_budget: DEFAULT_SPIN_BUDGET,
            stream_done: false,
            cno_fired: 0,
            cno: None,
        }
    }

    /// Dequeue one event.
    ///
    /// A pending overflow report comes first, once; then events, FIFO per
    /// poster; [`TryDequeueError::Closed`] once the EVD is closed and drained.
    /// Right after a run of dequeues, finding nothing ready takes a short
    /// linger (at most [`Consumer::linger_cap`]) before `Empty`: see
    /// [`Consumer::set_linger_cap`]; otherwise `Empty` is returned at once.
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
    /// report comes first, as an error (but right after a report, the ready
    /// events come first: see the crate docs, "Loss reports"); `Err(Closed)`
    /// once closed and drained. `max == 0` looks at nothing and changes
    /// nothing: it returns `Ok(0)` whatever the state, and a pending report
    /// or the end of stream waits for a call with `max > 0`.
    /// ```
    /// use evd::{Lossy, Overflow, TryDequeueError};
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u8).unwrap();
    /// assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    /// drop(poster); // closed
    /// let mut out = Vec::new();
    /// assert_eq!(consumer.dequeue_batch(&mut out, 0), Ok(0)); // reports nothing
    /// assert_eq!(consumer.dequeue_batch(&mut out, 4), Err(TryDequeueError::Overflow(Overflow { lost: 1 })));
    /// assert_eq!(consumer.dequeue_batch(&mut out, 4), Ok(1));
    /// assert_eq!(consumer.dequeue_batch(&mut out, 0), Ok(0)); // even at the end of stream
    /// assert_eq!(consumer.dequeue_batch(&mut out, 4), Err(TryDequeueError::Closed));
    /// ```
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

    /// Hand up to `max` events to `f`, in order, straight out of the ring:
    /// [`Consumer::dequeue_batch`] without the `Vec`. Takes every published
    /// event up to `max` (found by the slots' stamps alone) with one store of
    /// the head for the whole batch, and returns how many `f` got; `Ok(0)`
    /// when nothing is ready. A pending loss report comes first, as an error
    /// (but right after a report, the ready events come first);
    /// `Err(Closed)` once closed and drained. `max == 0` is `Ok(0)` whatever
    /// the state, as for `dequeue_batch`.
    ///
    /// The slots are freed for posters once `f` has had the whole batch (the
    /// one head store comes last), where `dequeue_batch` frees them before
    /// the caller looks at the events: a slow `f` on a full ring holds
    /// posters off for the whole batch, so give it a smaller `max`. It pays
    /// for events big enough that the copy into a `Vec` and out again shows
    /// (it measured faster with 64-byte events); for a `u64` the two are
    /// even.
    ///
    /// If `f` panics, the events it was given are consumed (it owned them)
    /// and the rest stay queued for the next dequeue: none is lost or handed
    /// out twice. `f` runs on the consumer's thread while the consumer is
    /// borrowed, as this EVD's handler (like an upcall's): a post from `f`
    /// that would wait for room in this same EVD (`post_blocking`,
    /// `post_timeout`, `post_async`, a `RoomWaiter`) is refused at once with
    /// `Full` instead of waiting for room that only the end of `f` frees; a
    /// `post_lossy` from `f` into a full ring gives its event up, where a
    /// post after the batch would have found room.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(8).unwrap();
    /// for i in 0..5 { poster.post(i).unwrap(); }
    /// let mut sum = 0;
    /// assert_eq!(consumer.dequeue_with(3, |v| sum += v), Ok(3));
    /// assert_eq!(sum, 0 + 1 + 2);
    /// assert_eq!(consumer.dequeue_with(8, |v| sum += v), Ok(2));
    /// assert_eq!(consumer.dequeue_with(8, |_| unreachable!()), Ok(0));
    ///
    /// // A full ring: waiting for room from `f` is refused, not a deadlock.
    /// poster.post(10).unwrap();
    /// while poster.post(0).is_ok() {}
    /// consumer.dequeue_with(1, |v| {
    ///     assert_eq!(v, 10);
    ///     assert_eq!(poster.post_blocking(11), Err(evd::PostError::Full(11)));
    /// }).unwrap();
    /// ```
    pub fn dequeue_with(&mut self, max: usize, f: impl FnMut(T)) -> Result<usize, TryDequeueError> {
        self.shared.dequeue_with(max, f)
    }

    /// Arm-then-check in one CAS: either the next post notifies this consumer
    /// ([`ArmStatus::Armed`]: safe to sleep), or events are waiting
    /// ([`ArmStatus::Pending`]: keep draining). There is no second poll.
    ///
    /// Arming on an empty ring clears the sticky *notified* bit. A pending
    /// loss report is work too: with only a report pending (the ring empty)
    /// the arm's CAS clears *notified*, then finds the report and takes the
    /// arm back: `Pending`, with *notified* clear and nothing armed. The
    /// dequeue that follows returns the report. (On an EVD enabled on its
    /// CNO a loss is news for the CNO too: the take-back hands it the report
    /// as a timed-out wait would, which uses the enable and sets *notified*.)
    ///
    /// An arm that finds a close begun and not finished (its closer stopped
    /// between its two steps) finishes it: `Armed`, and the close's
    /// notification fires (a wait on it ends at once; the closer, if it is
    /// still running, wakes the consumer last, after the posters it wakes).
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
            Arm::Armed(_) => ArmStatus::Armed,
            Arm::Pending => ArmStatus::Pending,
            Arm::Closed => ArmStatus::Closed,
        }
    }

    /// Withdraw an arm: the next post will not notify the consumer's own
    /// targets (waker, eventfd) for it (a CNO trigger that finds its CNO
    /// dropped still tells them instead). On an EVD enabled on its
    /// [`Cno`](crate::Cno) the enable stays, so the next post still puts
    /// the key in the CNO's ready set; and events that posts queued while
    /// the arm preempted the CNO go to the CNO now, as when a direct wait
    /// gives up.
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

    /// Events accepted and not yet dequeued (including reserved slots whose
    /// posters are still writing them, so a [`Consumer::try_dequeue`] may
    /// still find nothing ready), as [`Query::len`].
    ///
    /// A snapshot (head and state word read as one instant, `len <=
    /// capacity`; see [`Query`] for the rare case they cannot be): posters
    /// may have added more by the time it is returned.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// poster.post(1u8).unwrap();
    /// assert_eq!(consumer.len(), 1);
    /// consumer.try_dequeue().unwrap();
    /// assert_eq!(consumer.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.occupancy().len
    }

    /// How many events the ring holds (a power of two; changed only by
    /// [`Consumer::resize`]).
    ///
    /// ```
    /// let (_poster, mut consumer) = evd::bounded::<u8>(5).unwrap();
    /// assert_eq!(consumer.capacity(), 8);
    /// consumer.resize(16).unwrap();
    /// assert_eq!(consumer.capacity(), 16);
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared.occupancy().capacity
    }

    /// `len() == 0`, from one snapshot (posters may add events right after).
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded(4).unwrap();
    /// assert!(consumer.is_empty());
    /// poster.post(1u8).unwrap();
    /// assert!(!consumer.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.shared.occupancy().len == 0
    }

    /// `len() == capacity()`, from one snapshot.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u8).unwrap();
    /// assert!(consumer.is_full());
    /// consumer.try_dequeue().unwrap();
    /// assert!(!consumer.is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        let o = self.shared.occupancy();
        o.len == o.capacity
    }

    /// True once the EVD is closed: posts are refused, but queued events can
    /// still be dequeued (end of stream comes after them). A snapshot, except
    /// that once `true` it stays `true`.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// poster.post(1u8).unwrap();
    /// drop(poster); // the last poster closes the EVD
    /// assert!(consumer.is_closed());
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// ```
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// How long a blocking wait ([`Consumer::wait`], [`Consumer::dequeue`]
    /// and their timed forms, [`Consumer::iter`]) backs off, looking for
    /// ready events, before it arms and parks (default
    /// [`DEFAULT_SPIN_BUDGET`]). [`Duration::ZERO`] arms at once: the wait's
    /// first look is its arm.
    ///
    /// The back-off looks at the slots, then waits one gap by the clock
    /// without touching any line a poster writes, and looks again: gaps as
    /// long as a linger ([`Consumer::set_linger_cap`]), spun for the first
    /// 3 µs of the back-off (half of the default budget), then a yield of
    /// the CPU between looks, whatever the budget. It reads
    /// the clock at each gap, so the budget is overrun by at most one gap (or
    /// one yield). A wait's deadline ends the back-off too; a deadline
    /// already past skips it. A pending loss report, a close and
    /// `set_unwaitable` end it as well. A budget too large for an
    /// [`Instant`](std::time::Instant) (such as [`Duration::MAX`]) with no
    /// deadline looks until events are ready (or one of those) and never
    /// parks.
    ///
    /// Under loom and shuttle there is no clock: a non-zero budget is one
    /// gap (a yield).
    ///
    /// ```
    /// use std::time::Duration;
    /// let (_poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// consumer.set_spin_budget(Duration::ZERO); // park as soon as nothing is ready
    /// assert_eq!(consumer.spin_budget(), Duration::ZERO);
    /// consumer.set_spin_budget(Duration::from_micros(50)); // a consumer that expects a post soon
    /// ```
    pub fn set_spin_budget(&mut self, budget: Duration) {
        self.spin_budget = budget;
    }

    /// Cap how long a dequeue that finds nothing right after a run of
    /// dequeues lingers before it reports it (default [`DEFAULT_LINGER_CAP`];
    /// [`Duration::ZERO`]: never linger, every empty poll returns at once).
    /// The cap is kept in whole nanoseconds, at most `u64::MAX` of them
    /// (about 584 years): a longer one, [`Duration::MAX`] say, is kept as
    /// that, and [`linger_cap`](Consumer::linger_cap) says so.
    ///
    /// While posters keep the ring busy, a consumer that polls the head slot
    /// as soon as it has drained the ring reads the very cache line a poster
    /// is writing, and every locked instruction of the next post then waits
    /// for that line: on some CPUs this halves the ring's rate. So a dequeue
    /// (`try_dequeue`, `dequeue_batch`, `dequeue_with`, `recv`, an upcall
    /// instance's loop) that finds nothing after at least two dequeues since
    /// its last empty poll waits a short time by the clock, touching no
    /// poster's line, then looks once more: the time the posters took for a
    /// couple of dozen events at their last measured pace, between 200 ns
    /// and this cap (and never over 2 µs, the default: a larger cap is kept
    /// and reported, and changes nothing). A consumer whose events come one at a time (a request
    /// and its reply) never lingers; a run that really ended costs one
    /// linger. The gaps between a blocking wait's looks during its back-off
    /// are as long. Set zero for a consumer that must return at once from
    /// every empty poll (one that polls many EVDs in turn, say).
    ///
    /// ```
    /// use std::time::Duration;
    /// let (poster, mut consumer) = evd::bounded::<u8>(8).unwrap();
    /// assert_eq!(consumer.linger_cap(), evd::DEFAULT_LINGER_CAP);
    /// consumer.set_linger_cap(Duration::ZERO);
    /// poster.post(1).unwrap();
    /// poster.post(2).unwrap();
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// assert_eq!(consumer.try_dequeue(), Ok(2));
    /// // After a run, and no linger: reported at once.
    /// assert_eq!(consumer.try_dequeue(), Err(evd::TryDequeueError::Empty));
    /// ```
    pub fn set_linger_cap(&mut self, cap: Duration) {
        self.shared.set_linger_cap(cap);
    }

    /// The linger cap ([`Consumer::set_linger_cap`]), as kept.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (_poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// consumer.set_linger_cap(Duration::from_micros(5));
    /// assert_eq!(consumer.linger_cap(), Duration::from_micros(5));
    /// consumer.set_linger_cap(Duration::MAX);
    /// assert_eq!(consumer.linger_cap(), Duration::from_nanos(u64::MAX));
    /// ```
    pub fn linger_cap(&self) -> Duration {
        self.shared.linger_cap()
    }

    /// How long a blocking wait backs off before it parks
    /// ([`Consumer::set_spin_budget`]).
    ///
    /// ```
    /// let (_poster, consumer) = evd::bounded::<u8>(4).unwrap();
    /// assert_eq!(consumer.spin_budget(), evd::DEFAULT_SPIN_BUDGET);
    /// ```
    pub fn spin_budget(&self) -> Duration {
        self.spin_budget
    }

    /// A new posting handle. Once every poster was dropped the EVD is
    /// closed for good: a poster made after the last one's drop began finds
    /// it closed (its posts are refused), even while that drop is still
    /// closing it; one made before stays live, and the EVD open with it.
    /// May run a close's wake-ups (a registered waker) on the way.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let p2 = consumer.poster();
    /// drop(poster);
    /// p2.post(5u8).unwrap();
    /// assert_eq!(consumer.try_dequeue(), Ok(5));
    /// ```
    pub fn poster(&self) -> Poster<T> {
        self.shared.add_poster();
        Poster::new(self.shared.clone(), self.shared.fresh_head())
    }

    /// The shared engine (for the consumer's other modules and upcalls).
    /// Under `--cfg shuttle` only: the address of the EVD's state word, the
    /// one the fuzz crate's CAS observer checks. Not part of the API.
    #[cfg(shuttle)]
    #[doc(hidden)]
    pub fn state_word_addr(&self) -> usize {
        self.shared.state_word_addr()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared<T>> {
        &self.shared
    }

    /// Grow or shrink the ring (DAT's `evd_resize`) while posters run: no
    /// event is lost, FIFO is kept. The capacity is rounded up to a power of
    /// two; shrinking below the slots taken (the queued events, and the slots
    /// promised to permits that are out) is refused. Returns the new capacity.
    ///
    /// Posters that try to reserve during the move wait for it (it moves only
    /// the queued events, but a poster preempted between its reservation and
    /// its publish holds it until it runs); outside a resize, posting is
    /// lock-free. [`Poster::post`](crate::Poster::post), `post_lossy`,
    /// `post_batch` and `post_batch_up_to`, a permit's `try_reserve`,
    /// `try_reserve_owned` and `send` back off until it ends. A post that
    /// waits for room (`post_blocking`, `post_timeout`, `post_deadline`,
    /// `post_async`, the `PostSink`, a permit's `reserve`) and a
    /// [`RoomWaiter`](crate::RoomWaiter) wait for it as for a free slot,
    /// asleep in the room queue, which the resize's end (done or refused)
    /// wakes: a timed one hands its event back as `Full` at its deadline, an
    /// async one is `Pending` instead of holding its executor's thread.
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
        let old_cap = s.capacity();
        if old_cap == new_cap as u64 {
            return Ok(new_cap);
        }
        // Allocate before stopping the posters, to keep the window short.
        let fresh = Buffer::try_new(log2).ok_or(ResizeError::AllocFailed { capacity: new_cap })?;
        s.resize(log2, fresh)?;
        crate::trace::event!(
            DEBUG,
            evd = s.id(),
            from = old_cap,
            to = new_cap,
            "EVD resized"
        );
        Ok(new_cap)
    }
}

impl<T> Drop for Consumer<T> {
    fn drop(&mut self) {
        // A bound EVD leaves its CNO first: its key is removed, the slot freed.
        self.unbind_cno();
        // Nobody will ever dequeue again: refuse further posts, and drop the
        // queued events now rather than when the last poster goes (an event
        // holding a poster of this EVD would keep them alive for ever).
        // A panicking waker (woken by the close) must not keep the queued
        // events alive: drop them, then resume the first panic.
        let mut panics = Panics::default();
        panics.run(|| self.shared.close());
        if self.shared.instances() == 0 {
            panics.run(|| self.shared.drop_queued_after_close());
            // A waker a future registered and no notification took (its
            // arm withdrawn, or a wait that found its event at the last
            // look) is this consumer's user code: dropped here, under the
            // guard, not by the poster that frees the EVD last (perhaps
            // while it unwinds, where its panic would abort).
            panics.drop(self.shared.take_waker());
        } else {
            // Dropped from inside its own upcall (the dispatcher being taken
            // apart): an instance still holds the consumer side, this
            // thread's own among those in flight (the `Upcalls` waits them
            // out everywhere else). It stops at its next dequeue; a thread
            // leaving an instance drops the events once none is in flight.
            debug_assert!(crate::frames::in_own_handler(self.shared.id()));
            self.shared.leave_queued_to_instances();
        }
        panics.resume();
    }
}

impl<T> std::fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("state", &self.query())
            .finish()
    }
}
