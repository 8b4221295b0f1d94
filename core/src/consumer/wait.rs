//! Blocking waits (DAT's `evd_wait`): spin for a budget, then register an
//! unpark-this-thread waker, arm, and park until a post disarms the EVD.

use crate::consumer::Consumer;
use crate::error::WaitError;
use crate::shared::Shared;
use crate::state::Arm;
use crate::sync::{thread, Arc, Backoff};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

/// Wakes a parked thread.
struct Unparker(thread::Thread);

impl Wake for Unparker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// The calling thread's unpark waker, made once per consumer and thread (the
/// only allocation of a wait, and not on the steady-state path).
fn thread_waker<T>(c: &mut Consumer<T>) -> Waker {
    let me = thread::current();
    match &c.thread_waker {
        Some((id, w)) if *id == me.id() => w.clone(),
        _ => {
            let w = Waker::from(std::sync::Arc::new(Unparker(me.clone())));
            c.thread_waker = Some((me.id(), w.clone()));
            w
        }
    }
}

#[cfg(not(loom))]
fn park(deadline: Option<Instant>) {
    match deadline {
        None => thread::park(),
        Some(d) => thread::park_timeout(d.saturating_duration_since(Instant::now())),
    }
}

#[cfg(loom)]
fn park(_deadline: Option<Instant>) {
    // loom has no time: a model's waits are untimed.
    thread::park();
}

/// Park the consumer's thread until `done` holds. `done` is re-checked after
/// registering the waker, so a wake between the two is not lost (the wakers
/// of `done`'s condition wake the registered waker after changing it).
pub(crate) fn block_until<T>(c: &mut Consumer<T>, done: impl Fn(&Shared<T>) -> bool) {
    let waker = thread_waker(c);
    let s: Arc<Shared<T>> = c.shared().clone();
    loop {
        if done(&s) {
            return;
        }
        s.register_waker(&waker);
        if done(&s) {
            return;
        }
        park(None);
    }
}

impl<T> Consumer<T> {
    /// Block until at least `threshold` events are ready to dequeue, like
    /// `dat_evd_wait`; returns how many are ready (≥ `threshold`). Nothing is
    /// dequeued.
    ///
    /// Backs off [`set_spin_budget`](Consumer::set_spin_budget) steps first
    /// (spinning, then yielding), then arms and parks. On timeout nothing is dequeued and the error says how
    /// many events are ready. `threshold` must be in `1..=capacity`. Fails with
    /// [`WaitError::Unwaitable`] while the EVD is unwaitable, and with
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
    pub fn wait(
        &mut self,
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize, WaitError> {
        let s = self.shared().clone();
        let capacity = s.capacity() as usize;
        if threshold == 0 || threshold > capacity {
            return Err(WaitError::InvalidThreshold {
                threshold,
                capacity,
            });
        }
        let k = threshold as u64;
        let deadline = timeout.map(|t| Instant::now() + t);
        // Spin, then yield, before parking: with posters sharing the CPUs a
        // yield lets them fill the ring, and a park costs a futex round trip
        // on both sides (see BENCHMARKS.md).
        if s.is_unwaitable() {
            return Err(WaitError::Unwaitable);
        }
        let backoff = Backoff::new();
        for _ in 0..self.spin_budget {
            if s.ready(k) >= k {
                return Ok(s.ready(u64::MAX) as usize);
            }
            backoff.snooze();
        }
        let waker = thread_waker(self);
        let backoff = Backoff::new();
        loop {
            // Register before checking the flag and before arming: a
            // `set_unwaitable` or a post after this point wakes this waker.
            s.register_waker(&waker);
            if s.is_unwaitable() {
                s.disarm();
                return Err(WaitError::Unwaitable);
            }
            match s.arm(k) {
                Arm::Arm(_) => {
                    if let Some(d) = deadline {
                        if Instant::now() >= d {
                            s.disarm();
                            let available = s.ready(u64::MAX) as usize;
                            return if available >= threshold {
                                Ok(available)
                            } else {
                                Err(WaitError::Timeout { available })
                            };
                        }
                    }
                    park(deadline);
                }
                Arm::Pending => {
                    let ready = s.ready(u64::MAX);
                    // A report ends the wait, except right after a report
                    // while the events are ready: then the events come first,
                    // so a flood of losses cannot keep the consumer waiting.
                    if !(ready >= k && s.last_was_report()) {
                        if let Some(o) = s.take_report() {
                            return Err(WaitError::Overflow(o));
                        }
                    }
                    if ready >= k {
                        return Ok(ready as usize);
                    }
                    if let Some(queued) = s.queued_if_closed() {
                        // Nothing more will be posted: once the reserved
                        // slots are written, fewer than `k` is final.
                        if queued < k && ready == queued {
                            // The loss count is final now that CLOSED was
                            // seen with Acquire: a loss is told before the end.
                            if let Some(o) = s.take_report() {
                                return Err(WaitError::Overflow(o));
                            }
                            return Err(WaitError::Closed {
                                available: ready as usize,
                            });
                        }
                    }
                    // Reserved slots whose posters are still writing them.
                    backoff.snooze();
                }
                Arm::Closed => {
                    return Err(match s.take_report() {
                        Some(o) => WaitError::Overflow(o),
                        None => WaitError::Closed { available: 0 },
                    })
                }
            }
        }
    }
}
