//! Posts that wait for room: block the posting thread until the consumer
//! frees a slot, the EVD closes, or a deadline passes.

use super::Poster;
use super::attempt::Attempt;
use crate::error::PostError;
use crate::room::Seat;
use crate::sync::{Backoff, ThreadWaker, park, thread};
use std::time::{Duration, Instant};

impl<T: Send> Poster<T> {
    /// Post an event, waiting as long as it takes for room in a full ring.
    ///
    /// Returns `Ok` once the event is queued, or hands it back as
    /// [`PostError::Closed`] if the EVD is (or gets) closed. The waiting
    /// poster backs off briefly, retrying (it spins for 3 µs by the clock,
    /// then yields until 6 µs), then sleeps and is woken by the consumer's
    /// dequeue that frees a slot for it: one waiter per freed slot, first come first
    /// served ([`crate::Query::room_wakes`] counts the wakes). A
    /// [`Consumer::resize`](crate::Consumer::resize) under way is waited
    /// for the same way (it holds every reservation off): asleep in the
    /// room queue, woken by its end. While no poster
    /// waits, the consumer pays one load of its own cache line per dequeue
    /// for this (plus a fence where Linux's `membarrier(2)` is unavailable);
    /// a poster that starts waiting pays a lock and one `membarrier`, which
    /// briefly interrupts every CPU running a thread of this process.
    /// With the cargo feature `tracing`, a wait that sleeps longer than 1 ms
    /// is reported by one event (target `evd::poster::wait`, level INFO)
    /// when it ends; the clock is read only once the poster goes to sleep.
    ///
    /// Called from inside an upcall of this same EVD, or the closure of its
    /// [`Consumer::dequeue_with`](crate::Consumer::dequeue_with) (where the
    /// thread *is* the consumer, so no slot could be freed while it waits) a full ring
    /// is refused with [`PostError::Full`] instead of waited on (after the
    /// short spin and the retries of [`Poster::post`], which under
    /// `ManyInstances` with the token free start an instance that drains
    /// the ring, calling the handler again from inside this call); that is
    /// the only case it is returned. "Inside an upcall" includes a waker run
    /// on the thread of an instance still counted and not running yet or
    /// between handler calls (an instance's hand-back of the token, a permit
    /// send that started one): a wait there would wait for that instance;
    /// and a handler's `Drop` run by the upcalls' owner with upcalls
    /// disabled (a teardown, a `set_handler` then).
    ///
    /// # Panics
    ///
    /// As [`Poster::post`]. A panic while waiting (a waker's) leaves the
    /// room queue: the next freed slot wakes the next waiter.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u32).unwrap();
    /// let p = poster.clone();
    /// let t = std::thread::spawn(move || p.post_blocking(2)); // waits: the ring is full
    /// let mut got = Vec::new();
    /// while got.len() < 2 {
    ///     got.push(consumer.dequeue().unwrap());
    /// }
    /// t.join().unwrap().unwrap();
    /// assert_eq!(got, [1, 2]);
    /// ```
    pub fn post_blocking(&self, event: T) -> Result<(), PostError<T>> {
        self.post_until(event, None)
    }

    /// Post an event, waiting at most `timeout` for room in a full ring.
    ///
    /// As [`Poster::post_blocking`], but the event is handed back as
    /// [`PostError::Full`] if the ring is still full (or a resize still
    /// holds posters off) when the timeout passes.
    /// A zero timeout tries once and returns at once (as [`Poster::post`],
    /// but a resize under way is not waited out: the event is handed back
    /// as `Full`); a timeout too large for an [`Instant`] waits without one.
    ///
    /// # Panics
    ///
    /// As [`Poster::post_blocking`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use evd::PostError;
    /// let (poster, mut consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u32).unwrap();
    /// assert_eq!(poster.post_timeout(2, Duration::ZERO), Err(PostError::Full(2)));
    /// assert_eq!(poster.post_timeout(2, Duration::from_millis(1)), Err(PostError::Full(2)));
    /// assert_eq!(consumer.try_dequeue(), Ok(1));
    /// assert_eq!(poster.post_timeout(2, Duration::from_secs(1)), Ok(()));
    /// ```
    pub fn post_timeout(&self, event: T, timeout: Duration) -> Result<(), PostError<T>> {
        self.post_until(event, Instant::now().checked_add(timeout))
    }

    /// Post an event, waiting until `deadline` at the latest for room in a
    /// full ring.
    ///
    /// As [`Poster::post_timeout`] with a deadline: one that has passed
    /// tries once and returns at once.
    ///
    /// # Panics
    ///
    /// As [`Poster::post_blocking`].
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use evd::PostError;
    /// let (poster, consumer) = evd::bounded(1).unwrap();
    /// poster.post(1u32).unwrap();
    /// let soon = Instant::now() + Duration::from_millis(1);
    /// assert_eq!(poster.post_deadline(2, soon), Err(PostError::Full(2)));
    /// drop(consumer); // closes the EVD
    /// assert_eq!(poster.post_deadline(3, soon), Err(PostError::Closed(3)));
    /// ```
    pub fn post_deadline(&self, event: T, deadline: Instant) -> Result<(), PostError<T>> {
        self.post_until(event, Some(deadline))
    }

    fn post_until(&self, event: T, deadline: Option<Instant>) -> Result<(), PostError<T>> {
        let expired = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
        let mut event = match self.post_for_room(event) {
            Err(PostError::Full(ev)) => ev,
            done => return done,
        };
        if expired(deadline) {
            return Err(PostError::Full(event));
        }
        // Back off (spin, then yield) and retry before sleeping, as the
        // blocking peers do: a consumer that frees a slot every microsecond
        // or so is caught here, without a join (lock, membarrier) and a
        // sleep/wake per event.
        let backoff = Backoff::new();
        while backoff.step() {
            event = match self.post_for_room(event) {
                Err(PostError::Full(ev)) => ev,
                done => return done,
            };
            if expired(deadline) {
                return Err(PostError::Full(event));
            }
        }
        // The slow path that sleeps: only here is the clock read for the
        // `tracing` report of a long wait.
        #[cfg(feature = "tracing")]
        let _clock = LongWaitReport {
            evd: self.shared.id(),
            since: Instant::now(),
        };
        let waker = ThreadWaker::new(thread::current());
        // Left by the attempt that ends the wait, or that unwinds.
        let mut seat = Seat::default();
        loop {
            // A wake before this point is answered by the attempt: a seat
            // woken out of the queue joins it again.
            waker.clear();
            match self.attempt(&mut seat, event, waker.waker()) {
                Attempt::Done(r) => return r,
                Attempt::Wait(ev) => event = ev,
            }
            if expired(deadline) {
                self.shared.room_leave(&mut seat, false);
                return Err(PostError::Full(event));
            }
            // Woken while the attempt ran: its posts may run an upcall on
            // this thread, whose handler may park and be unparked here,
            // taking the unpark token the wake left. The seat is out of the
            // queue then, and parking would wait for a wake already spent.
            if !waker.woken() {
                // Woken by a freed slot, by close, by a resize's end, or
                // spuriously: attempt again.
                park(deadline);
            }
        }
    }
}

/// A blocking post's wait for room that lasts longer than this is reported
/// once, when it ends, by a `tracing` event (cargo feature `tracing`).
#[cfg(feature = "tracing")]
const LONG_ROOM_WAIT: Duration = Duration::from_millis(1);

/// Reports, when dropped (the wait ended), a blocking post's wait for room
/// that lasted longer than [`LONG_ROOM_WAIT`]; not one that a panic ends (a
/// draining upcall's handler): a subscriber that panicked during that
/// unwind would abort the process. A subscriber's panic here is swallowed:
/// the post's result is built by then, and unwinding past it would drop an
/// event the timeout or the close hands back (and abort, were its `Drop`
/// to panic too).
#[cfg(feature = "tracing")]
struct LongWaitReport {
    evd: usize,
    since: Instant,
}

#[cfg(feature = "tracing")]
impl Drop for LongWaitReport {
    fn drop(&mut self) {
        let waited = self.since.elapsed();
        if waited > LONG_ROOM_WAIT && !std::thread::panicking() {
            crate::unwind::caught(|| {
                crate::trace::event!(
                    INFO,
                    evd = self.evd,
                    waited_us = waited.as_micros() as u64,
                    "a post waited long for room"
                )
            });
        }
    }
}
