//! Blocking waits (DAT's `evd_wait`): back off (spin, then yield) for a
//! budget of time, then register an unpark-this-thread waker, arm, and park
//! until a post disarms the EVD.

use crate::consumer::Consumer;
use crate::engine::Shared;
use crate::error::{DequeueError, TryDequeueError, WaitError};
use crate::state::{self, Arm};
use crate::sync::{Arc, Backoff, ThreadWaker, park, thread};
use std::time::{Duration, Instant};

/// The calling thread's unpark waker, made once per consumer and thread (the
/// only allocation of a wait, and not on the steady-state path).
fn thread_waker<T>(c: &mut Consumer<T>) -> ThreadWaker {
    let me = thread::current();
    match &c.thread_waker {
        Some((id, w)) if *id == me.id() => w.clone(),
        _ => {
            let w = ThreadWaker::new(me.clone());
            c.thread_waker = Some((me.id(), w.clone()));
            w
        }
    }
}

/// The back-off phase of a wait: look for `want` ready events for `budget`
/// (or until `deadline`); `Some(ready)` if they were found; `None` when the
/// wait must arm (the budget is over, or a report or close has begun).
///
/// Between two looks it waits one gap by the clock, reading no line a poster
/// writes (the consumer's half of [`crate::pace`]: each look at the head
/// slot would pull the line a poster is writing): the pacer's gap while the
/// back-off is younger than [`crate::sync::SPIN_PHASE`], a yield after. The
/// gap follows the posters' last measured pace, so it is the same share of
/// their work on any CPU; no step is counted in spins or PAUSE instructions.
///
/// A non-zero budget looks once before anything else (ready events end the
/// wait at once, even past its deadline); a deadline already past then skips
/// the back-off (a zero timeout is a poll).
fn back_off<T>(
    s: &Shared<T>,
    want: u64,
    budget: Duration,
    deadline: Option<Instant>,
) -> Option<u64> {
    if budget.is_zero() {
        return None;
    }
    if s.ready(want) >= want {
        return Some(s.ready(u64::MAX));
    }
    let end = clock::start(budget, deadline)?;
    loop {
        // A report, the end of stream or `set_unwaitable` ends the wait as
        // well: the arm path decides which (a budget too large for an
        // `Instant` would otherwise spin past them forever).
        if s.report_or_close_begun() || s.is_unwaitable() {
            return None;
        }
        if clock::spinning(&end) {
            s.pace_gap();
        } else {
            thread::yield_now();
        }
        if s.ready(want) >= want {
            return Some(s.ready(u64::MAX));
        }
        if clock::over(&end) {
            return None;
        }
    }
}

/// The back-off's clock.
#[cfg(not(any(loom, shuttle)))]
mod clock {
    // How long a wait's back-off spins, by the clock, before it yields the
    // CPU between its looks instead: with posters sharing the CPUs a yield
    // lets them fill the ring. The spinning half of the default budget, as in
    // every back-off (`crate::sync::Backoff`).
    use crate::sync::SPIN_PHASE;
    use std::time::{Duration, Instant};

    /// When the back-off started, and when it ends (`None`: never, a budget
    /// too large for an `Instant`, and no deadline).
    pub(super) struct End {
        start: Instant,
        end: Option<Instant>,
    }

    /// Start the back-off now; `None` if the deadline has passed already.
    pub(super) fn start(budget: Duration, deadline: Option<Instant>) -> Option<End> {
        let now = Instant::now();
        let end = match (now.checked_add(budget), deadline) {
            (Some(e), Some(d)) => Some(e.min(d)),
            (e, None) => e,
            (None, d) => d,
        };
        match end {
            Some(e) if now >= e => None,
            _ => Some(End { start: now, end }),
        }
    }

    /// Still in the spinning phase ([`SPIN_PHASE`]).
    pub(super) fn spinning(end: &End) -> bool {
        end.start.elapsed() < SPIN_PHASE
    }

    pub(super) fn over(end: &End) -> bool {
        end.end.is_some_and(|e| Instant::now() >= e)
    }
}

/// loom and shuttle have no time, and a model's runs must not depend on the
/// wall clock: the budget is over after its first gap (a yield), unless it
/// never ends on the real clock either (too large for an `Instant`, and no
/// deadline): then it ends only as that one does, by what the looks find. A
/// deadline, which the models use only as "now" (a zero timeout), is still
/// checked at the start, so a poll does not back off.
#[cfg(any(loom, shuttle))]
mod clock {
    use std::time::{Duration, Instant};

    /// `never`: the budget never ends.
    pub(super) struct End {
        never: bool,
    }

    pub(super) fn start(budget: Duration, deadline: Option<Instant>) -> Option<End> {
        let now = Instant::now();
        match deadline {
            Some(d) if now >= d => None,
            Some(_) => Some(End { never: false }),
            None => Some(End {
                never: now.checked_add(budget).is_none(),
            }),
        }
    }

    pub(super) fn spinning(_end: &End) -> bool {
        true
    }

    pub(super) fn over(end: &End) -> bool {
        !end.never
    }
}

/// What a wait that does not block finds: `Some` if it ends now. Met
/// (`ready >= want`) is `Ok`, and leaves a pending report to the next
/// dequeue; otherwise a pending report ends the wait; otherwise a closed EVD
/// whose reserved slots are all written ends it with fewer than `want`.
/// `None`: the wait would block (or a reserved slot is still being written).
fn look<T>(s: &Shared<T>, want: u64) -> Option<Result<usize, WaitError>> {
    let ready = s.ready(u64::MAX);
    if ready >= want {
        return Some(Ok(ready as usize));
    }
    if let Some(o) = s.take_report() {
        return Some(Err(WaitError::Overflow(o)));
    }
    let queued = s.queued_if_closed()?;
    // Nothing more will be posted: once the reserved slots are written,
    // fewer than `want` is final.
    if queued < want && ready == queued {
        // The loss count is final now that CLOSED was seen with Acquire: a
        // loss is told before the end.
        if let Some(o) = s.take_report() {
            return Some(Err(WaitError::Overflow(o)));
        }
        return Some(Err(WaitError::Closed {
            available: ready as usize,
        }));
    }
    None
}

/// The deadline has passed: `Timeout` with the events ready now, or `Ok` if
/// they meet the threshold after all (a post may have landed since the last
/// look: a timeout never says `available >= threshold`).
fn timed_out<T>(s: &Shared<T>, want: u64) -> Result<usize, WaitError> {
    let available = s.ready(u64::MAX);
    if available >= want {
        Ok(available as usize)
    } else {
        Err(WaitError::Timeout {
            available: available as usize,
        })
    }
}

/// A wait that armed is over at its deadline: [`timed_out`], and unless the
/// events met the threshold after all (the caller takes them), withdraw
/// what it armed. Whether the last arm held or found a post still writing
/// its slot, an earlier round's arm may have been taken by a post: on an
/// EVD enabled on its CNO, that post preempted the CNO for this wait, and
/// the withdrawal hands its event to the CNO ([`crate::state::withdraw`]).
/// The look comes first so that a wait that returns the events does not
/// also hand them to the CNO. (A post between the look and the withdrawal
/// goes to the CNO, and the timeout's count is a snapshot, as always.)
fn give_up<T>(s: &Shared<T>, want: u64) -> Result<usize, WaitError> {
    let r = timed_out(s, want);
    if r.is_err() {
        s.disarm();
    }
    r
}

/// Who waits: a [`Consumer::wait`] reports, a [`Consumer::dequeue`] takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Waiter {
    /// Reports how many events are ready; fails while the EVD is
    /// unwaitable, whatever is ready (DAT: waits on an unwaitable EVD fail).
    Reports,
    /// Takes the events once the wait ends: refused as unwaitable only
    /// when it would have to block.
    Takes,
}

/// The EVD was made unwaitable while the wait was armed: `Unwaitable`,
/// withdrawing the arm (a post the wait was armed for took the arm and, on
/// an EVD enabled on its CNO, left the CNO's enable for the next post, as a
/// direct waiter preempts the CNO; withdrawn, the events go to the CNO).
/// A waiter that takes the events returns them instead if they meet its
/// threshold: it takes them, so the withdrawal must not hand them to the
/// CNO too, as [`give_up`] does not; and if they are reserved but a poster
/// is still writing them, `None`: the caller waits for the publish, as for
/// a pending arm, instead of handing them over and then taking them.
fn unwaitable<T>(s: &Shared<T>, want: u64, waiter: Waiter) -> Option<Result<usize, WaitError>> {
    if waiter == Waiter::Takes {
        let available = s.ready(u64::MAX);
        if available >= want {
            return Some(Ok(available as usize));
        }
        // The check and the withdrawal in one CAS: a post between the two
        // would be told to this waiter and handed to the CNO too.
        if !s.disarm_unless_reserved(want) {
            return None;
        }
        return Some(Err(WaitError::Unwaitable));
    }
    s.disarm();
    Some(Err(WaitError::Unwaitable))
}

/// Park the consumer's thread until `done` holds. `done` is re-checked after
/// registering the waker, so a wake between the two is not lost (the wakers
/// of `done`'s condition wake the registered waker after changing it); a
/// wake that came while the registration ran user code (the replaced
/// waker's drop, which may park and take the token) sends the loop round
/// instead of parking ([`ThreadWaker`]).
pub(crate) fn block_until<T>(c: &mut Consumer<T>, done: impl Fn(&Shared<T>) -> bool) {
    let waker = thread_waker(c);
    let s: Arc<Shared<T>> = c.shared().clone();
    let mut rounds = Rounds::new();
    loop {
        if done(&s) {
            return;
        }
        waker.clear();
        s.register_waker(waker.waker());
        if done(&s) {
            return;
        }
        rounds.end(&waker, None, 0);
    }
}

/// How a round of a blocking wait ends, once it has registered its waker
/// and armed: it parks until woken, unless it was woken already, and then
/// goes round again at once, as a post that lands between the arm and the
/// park wants. But a notifier stopped between taking the waker slot and
/// letting it go makes the slot answer every registration with a wake
/// ([`crate::waker_slot`]): rounds that re-register and re-arm on the
/// posters' line as fast as they can, until that notifier runs again. A
/// woken round that armed the same tail as the last woken round (no post in
/// between: the wake came from the slot) backs off by the clock first, a
/// PAUSE, then spins, then yields, and once that is used up naps
/// ([`crate::sync::nap`], cut at the deadline): a yield does not let a
/// notifier of lower real-time priority run. A wait that arms nothing
/// (`block_until`) takes every second woken round in a row for such a one.
struct Rounds {
    backoff: Backoff,
    /// The tail the last round armed, if it was woken before parking.
    woken_on: Option<u64>,
}

impl Rounds {
    fn new() -> Self {
        Rounds {
            backoff: Backoff::new(),
            woken_on: None,
        }
    }

    /// End a round that armed `armed` (0 for a wait that arms nothing).
    fn end(&mut self, waker: &ThreadWaker, deadline: Option<Instant>, armed: u64) {
        if !waker.woken() {
            self.woken_on = None;
            park(deadline);
        } else if self.woken_on.replace(state::tail(armed)) != Some(state::tail(armed)) {
            // Posted since the last round: a fresh back-off for a later
            // stall. (Only the tail: a permit taken and given back changes
            // the word, and no wake comes of it.)
            self.backoff = Backoff::new();
        } else {
            self.backoff.snooze_until(deadline);
        }
    }
}

impl<T> Consumer<T> {
    /// Block until at least `threshold` events are ready to dequeue, like
    /// `dat_evd_wait`; returns how many are ready (≥ `threshold`). Nothing is
    /// dequeued.
    ///
    /// Backs off for the [`spin_budget`](Consumer::set_spin_budget) first
    /// (spinning, then yielding), then arms and parks (behind a poster
    /// preempted in the middle of writing a slot it needs, it naps in 20 µs
    /// steps, which an unpark does not end). On timeout nothing is
    /// dequeued and the error says how many events are ready. `threshold` must be in `1..=capacity`. Fails with
    /// [`WaitError::Unwaitable`] while the EVD is unwaitable (whatever is
    /// ready: DAT's waits on an unwaitable EVD fail; a poll, with a zero or
    /// expired timeout, answers as any poll does), and with
    /// [`WaitError::Closed`] once it is closed with fewer than `threshold`
    /// events left (a pending loss report comes before that end). A pending
    /// loss report ends a wait that would otherwise block, as
    /// [`WaitError::Overflow`] (reported once, as a dequeue would); a wait
    /// that finds its `threshold` met returns `Ok` and leaves the report to
    /// the next dequeue.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (poster, mut consumer) = evd::bounded(8).unwrap();
    /// let p = poster.clone();
    /// let t = std::thread::spawn(move || { for i in 0..3 { p.post(i).unwrap(); } });
    /// assert_eq!(consumer.wait(3, None), Ok(3));
    /// t.join().unwrap();
    /// assert_eq!(consumer.wait(4, Some(Duration::from_millis(1))), Err(evd::WaitError::Timeout { available: 3 }));
    /// assert_eq!(consumer.wait(0, None), Err(evd::WaitError::InvalidThreshold { threshold: 0, capacity: 8 }));
    /// drop(poster); // the last poster closes the EVD
    /// assert_eq!(consumer.wait(4, None), Err(evd::WaitError::Closed { available: 3 }));
    /// ```
    ///
    /// A zero (or already expired) timeout checks once and returns at once,
    /// without the back-off and without arming: an arm made with
    /// [`Consumer::arm`] stays in place (and the *notified* bit as it was). A
    /// timeout too large for an [`Instant`] waits without one. A wait that
    /// arms and then gives up (its deadline passes, or the EVD becomes
    /// unwaitable) withdraws the arm, one made with [`Consumer::arm`] before
    /// it included: arm again before sleeping on a
    /// [`NotifyFd`](crate::NotifyFd).
    ///
    /// ```
    /// use std::time::Duration;
    /// let (poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// assert_eq!(consumer.arm(), evd::ArmStatus::Armed);
    /// let poll = consumer.wait(1, Some(Duration::ZERO));
    /// assert_eq!(poll, Err(evd::WaitError::Timeout { available: 0 }));
    /// assert!(consumer.query().armed, "a poll leaves the arm in place");
    /// poster.post(1).unwrap(); // and this post notifies it
    /// assert!(consumer.query().notified);
    /// ```
    pub fn wait(
        &mut self,
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize, WaitError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        self.wait_until(threshold, deadline)
    }

    /// [`Consumer::wait`] with a deadline instead of a timeout: block until at
    /// least `threshold` events are ready or `deadline` passes. A deadline in
    /// the past checks once and returns at once, without the back-off.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (poster, mut consumer) = evd::bounded(8).unwrap();
    /// assert_eq!(consumer.wait_deadline(1, Instant::now()), Err(evd::WaitError::Timeout { available: 0 }));
    /// poster.post(1u8).unwrap();
    /// assert_eq!(consumer.wait_deadline(1, Instant::now() + Duration::from_secs(5)), Ok(1));
    /// ```
    pub fn wait_deadline(
        &mut self,
        threshold: usize,
        deadline: Instant,
    ) -> Result<usize, WaitError> {
        self.wait_until(threshold, Some(deadline))
    }

    /// The wait behind [`Consumer::wait`] and [`Consumer::wait_deadline`].
    pub(crate) fn wait_until(
        &mut self,
        threshold: usize,
        deadline: Option<Instant>,
    ) -> Result<usize, WaitError> {
        self.wait_as(Waiter::Reports, threshold, deadline)
    }

    /// The wait of `waiter`, until `deadline`.
    fn wait_as(
        &mut self,
        waiter: Waiter,
        threshold: usize,
        deadline: Option<Instant>,
    ) -> Result<usize, WaitError> {
        let s = self.shared().clone();
        let capacity = s.capacity() as usize;
        if threshold == 0 || threshold > capacity {
            return Err(WaitError::InvalidThreshold {
                threshold,
                capacity,
            });
        }
        let want = threshold as u64;
        // Spin, then yield, before parking: with posters sharing the CPUs a
        // yield lets them fill the ring, and a park costs a futex round trip
        // on both sides, longer than the whole spin.
        if deadline.is_some_and(|d| Instant::now() >= d) {
            // A poll: it looks once and leaves the arm alone, so an arm the
            // caller made with `arm()` (and its registered waker) stays. It
            // never blocks, so an unwaitable EVD answers it as any other.
            return look(&s, want).unwrap_or_else(|| timed_out(&s, want));
        }
        if s.is_unwaitable() {
            return Err(WaitError::Unwaitable);
        }
        if let Some(ready) = back_off(&s, want, self.spin_budget, deadline) {
            return Ok(ready as usize);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return look(&s, want).unwrap_or_else(|| timed_out(&s, want));
        }
        let waker = thread_waker(self);
        let backoff = Backoff::new();
        let mut rounds = Rounds::new();
        loop {
            // Register before checking the flag and before arming: a
            // `set_unwaitable` or a post after this point wakes this waker.
            waker.clear();
            s.register_waker(waker.waker());
            if s.is_unwaitable() {
                if let Some(end) = unwaitable(&s, want, waiter) {
                    return end;
                }
                // Reserved slots whose posters are still writing them: as
                // in `Arm::Pending` below.
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return give_up(&s, want);
                }
                backoff.snooze_until(deadline);
                continue;
            }
            match s.arm(want) {
                Arm::Armed(armed) => {
                    if let Some(d) = deadline {
                        if Instant::now() >= d {
                            return give_up(&s, want);
                        }
                    }
                    // A wake that came while the registration ran user code
                    // (the replaced waker's drop, which may park and take
                    // the token) may have taken the waker out of the slot:
                    // round again, to register it anew ([`ThreadWaker`]).
                    rounds.end(&waker, deadline, armed);
                }
                Arm::Pending => {
                    if let Some(end) = look(&s, want) {
                        return end;
                    }
                    // Reserved slots whose posters are still writing them: a
                    // poster stopped there must not keep a timed wait past
                    // its deadline.
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return give_up(&s, want);
                    }
                    backoff.snooze_until(deadline);
                }
                Arm::Closed => {
                    return Err(match s.take_report() {
                        Some(o) => WaitError::Overflow(o),
                        None => WaitError::Closed { available: 0 },
                    });
                }
            }
        }
    }

    /// Dequeue one event, blocking until one is posted or the stream ends.
    ///
    /// [`Consumer::try_dequeue`], then (if nothing was ready)
    /// [`Consumer::wait`] for one event and again: the wait arms with one
    /// CAS that fails if anything was posted since the failed dequeue, so no
    /// post in between is missed. Like `try_dequeue`, a pending loss report
    /// comes first, once, as [`DequeueError::Overflow`];
    /// [`DequeueError::Closed`] once the EVD is closed and drained;
    /// [`DequeueError::Unwaitable`] if it would block while the EVD is
    /// unwaitable.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let t = std::thread::spawn(move || poster.post(42u32).unwrap());
    /// assert_eq!(consumer.dequeue(), Ok(42));
    /// t.join().unwrap(); // the last poster is gone: end of stream
    /// assert_eq!(consumer.dequeue(), Err(evd::DequeueError::Closed));
    /// ```
    pub fn dequeue(&mut self) -> Result<T, DequeueError> {
        self.dequeue_until(None)
    }

    /// [`Consumer::dequeue`], giving up with [`DequeueError::Timeout`] after
    /// `timeout`. A zero timeout is a [`Consumer::try_dequeue`] that reports
    /// "nothing ready" as `Timeout`: no back-off and no arm (an arm made with
    /// [`Consumer::arm`] stays in place), only that dequeue's own linger
    /// right after a run ([`Consumer::set_linger_cap`]). A timeout too large
    /// for an [`Instant`] waits without one.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// assert_eq!(consumer.dequeue_timeout(Duration::ZERO), Err(evd::DequeueError::Timeout));
    /// poster.post('x').unwrap();
    /// assert_eq!(consumer.dequeue_timeout(Duration::from_secs(5)), Ok('x'));
    /// ```
    pub fn dequeue_timeout(&mut self, timeout: Duration) -> Result<T, DequeueError> {
        self.dequeue_until(Instant::now().checked_add(timeout))
    }

    /// [`Consumer::dequeue`], giving up with [`DequeueError::Timeout`] once
    /// `deadline` passes. A deadline in the past makes one
    /// [`Consumer::try_dequeue`] (its linger after a run included) and no
    /// back-off, and returns an event if one is ready.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// poster.post(1u8).unwrap();
    /// assert_eq!(consumer.dequeue_deadline(Instant::now()), Ok(1));
    /// let soon = Instant::now() + Duration::from_millis(1);
    /// assert_eq!(consumer.dequeue_deadline(soon), Err(evd::DequeueError::Timeout));
    /// ```
    pub fn dequeue_deadline(&mut self, deadline: Instant) -> Result<T, DequeueError> {
        self.dequeue_until(Some(deadline))
    }

    fn dequeue_until(&mut self, deadline: Option<Instant>) -> Result<T, DequeueError> {
        loop {
            match self.try_dequeue() {
                Ok(v) => return Ok(v),
                Err(TryDequeueError::Overflow(o)) => return Err(DequeueError::Overflow(o)),
                Err(TryDequeueError::Closed) => return Err(DequeueError::Closed),
                Err(TryDequeueError::Empty) => {}
            }
            // Nothing was ready at the dequeue; the wait's arm CAS fails if
            // anything was posted since, so no post is missed in between.
            match self.wait_as(Waiter::Takes, 1, deadline) {
                // An event is ready, or the EVD is closed (the next dequeue
                // takes what is left, then reports the end).
                Ok(_) | Err(WaitError::Closed { .. }) => {}
                Err(WaitError::Timeout { .. }) => return Err(DequeueError::Timeout),
                // An event published before the flag was set is taken, not
                // refused: the look that found nothing may have come before
                // it (the flag's Release store follows the publish).
                Err(WaitError::Unwaitable) => {
                    return match self.try_dequeue() {
                        Ok(v) => Ok(v),
                        Err(TryDequeueError::Overflow(o)) => Err(DequeueError::Overflow(o)),
                        Err(TryDequeueError::Closed) => Err(DequeueError::Closed),
                        Err(TryDequeueError::Empty) => Err(DequeueError::Unwaitable),
                    };
                }
                Err(WaitError::Overflow(o)) => return Err(DequeueError::Overflow(o)),
                // A threshold of 1 is in 1..=capacity for every capacity.
                Err(WaitError::InvalidThreshold { .. }) => {
                    unreachable!("a threshold of 1 is always valid")
                }
            }
        }
    }
}
