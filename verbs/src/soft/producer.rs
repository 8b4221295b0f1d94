//! [`SoftCqProducer`]: the producer side of a [`SoftCq`](super::SoftCq)
//! ("the HCA"): adds completions, injects faults and reads the CQ's
//! counters.

use super::cq_state::{Inner, PushError};
use crate::event::WorkCompletion;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The producer side of a [`SoftCq`](super::SoftCq) ("the HCA"): adds
/// completions and injects faults. Cloneable, usable from any thread.
#[derive(Clone)]
pub struct SoftCqProducer {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for SoftCqProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.debug("SoftCqProducer", f)
    }
}

/// Counters and state of a software CQ.
///
/// ```
/// use evd_verbs::{WorkCompletion, soft::SoftCq};
/// let (_cq, hca) = SoftCq::new(4).unwrap();
/// hca.push(WorkCompletion::default()).unwrap();
/// let s = hca.stats();
/// assert_eq!((s.len, s.pushed, s.armed), (1, 1, false));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SoftCqStats {
    /// Completions queued now.
    pub len: usize,
    /// Armed now.
    pub armed: bool,
    /// Channel events raised and not yet got.
    pub channel_events: u64,
    /// Completions accepted.
    pub pushed: u64,
    /// Completions polled out.
    pub polled: u64,
    /// Events raised by an armed CQ on a completion.
    pub notifications: u64,
    /// Spurious events injected.
    pub spurious: u64,
    /// Overruns.
    pub overruns: u64,
    /// `req_notify` calls, but those an injected failure refused
    /// ([`SoftCqProducer::fail_next_arm`]).
    pub req_notifies: u64,
    /// `req_notify` calls ignored as sequenced arms that repeated a fired
    /// arm's number ([`SoftCqProducer::set_sequenced_arms`]).
    pub ignored_arms: u64,
    /// Channel events got.
    pub events_got: u64,
    /// Channel events acknowledged.
    pub events_acked: u64,
    /// The CQ was destroyed.
    pub destroyed: bool,
    /// Events got but not acknowledged when the CQ was destroyed (libibverbs'
    /// `ibv_destroy_cq` would have blocked on them): nonzero only for a CQ
    /// dropped by an unwind (a drop otherwise panics on it).
    pub unacked_at_destroy: Option<u64>,
}

impl SoftCqProducer {
    /// Add a completion (not solicited). An armed CQ raises one channel event.
    ///
    /// # Errors
    ///
    /// [`PushError::Overrun`] if the CQ was full (this completion is lost,
    /// and raises `CqError` on the CQ's device; the CQ goes on),
    /// [`PushError::Broken`] if a poll failed earlier
    /// ([`fail_next_poll`](Self::fail_next_poll)),
    /// [`PushError::Destroyed`] if it was destroyed.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// cq.req_notify(false).unwrap();
    /// producer.push(WorkCompletion::default()).unwrap();
    /// assert!(cq.get_event().unwrap());
    /// // SAFETY: one event of `cq` was got above and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// ```
    pub fn push(&self, wc: WorkCompletion) -> Result<(), PushError> {
        let mut st = self.inner.lock();
        self.inner.add(&mut st, wc, false)
    }

    /// Add a solicited completion: also wakes a CQ armed for solicited only.
    ///
    /// # Errors
    ///
    /// As [`push`](Self::push).
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// cq.req_notify(true).unwrap();
    /// producer.push(WorkCompletion::default()).unwrap();
    /// assert!(!cq.get_event().unwrap());
    /// producer.push_solicited(WorkCompletion::default()).unwrap();
    /// assert!(cq.get_event().unwrap());
    /// // SAFETY: one event of `cq` was got above and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// ```
    pub fn push_solicited(&self, wc: WorkCompletion) -> Result<(), PushError> {
        let mut st = self.inner.lock();
        self.inner.add(&mut st, wc, true)
    }

    /// Add completions under one lock; returns how many were added before an
    /// error stopped it (the first that did not fit is lost to the overrun,
    /// the ones after it are not tried).
    ///
    /// ```
    /// use evd_verbs::{WorkCompletion, soft::SoftCq};
    /// let (_cq, producer) = SoftCq::new(4).unwrap();
    /// assert_eq!(producer.push_batch(&[WorkCompletion::default(); 3]), 3);
    /// ```
    pub fn push_batch(&self, wcs: &[WorkCompletion]) -> usize {
        let mut st = self.inner.lock();
        wcs.iter()
            .take_while(|wc| self.inner.add(&mut st, **wc, false).is_ok())
            .count()
    }

    /// Raise a channel event with no completion behind it.
    ///
    /// ```
    /// let (_cq, producer) = evd_verbs::soft::SoftCq::new(4).unwrap();
    /// producer.inject_spurious_event();
    /// assert_eq!(producer.stats().channel_events, 1);
    /// ```
    pub fn inject_spurious_event(&self) {
        let mut st = self.inner.lock();
        st.spurious += 1;
        self.inner.raise_event(&mut st);
    }

    /// Every `n`-th `req_notify` counted in [`SoftCqStats::req_notifies`]
    /// also raises a spurious event (0: never), unless it is ignored as a
    /// sequenced arm ([`set_sequenced_arms`](Self::set_sequenced_arms)).
    ///
    /// ```
    /// let (_cq, producer) = evd_verbs::soft::SoftCq::new(4).unwrap();
    /// producer.set_spurious_every(3);
    /// ```
    pub fn set_spurious_every(&self, n: u32) {
        self.inner.faults.spurious_every.store(n, Ordering::Relaxed);
    }

    /// Arm as the providers whose arms carry a sequence number that only
    /// getting an event advances (libmlx4, libmlx5 and libhns bump it in
    /// `ibv_get_cq_event`): after an arm fired, a `req_notify` made before
    /// any event was got repeats the fired arm's number, and is ignored
    /// (the strictest reading of how the HCA takes a stale number). A
    /// consumer that re-arms after a failed or panicked `get_event` must
    /// then get the event still waiting in its channel to be woken again.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// producer.set_sequenced_arms(true);
    /// cq.req_notify(false).unwrap();
    /// producer.push(WorkCompletion::new(1)).unwrap(); // the arm fires
    /// cq.req_notify(false).unwrap(); // before the event was got: ignored
    /// assert!(!producer.stats().armed);
    /// assert!(cq.get_event().unwrap());
    /// cq.req_notify(false).unwrap();
    /// assert!(producer.stats().armed);
    /// // SAFETY: one event got and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// ```
    pub fn set_sequenced_arms(&self, on: bool) {
        self.inner
            .faults
            .sequenced_arms
            .store(on, Ordering::Relaxed);
    }

    /// `req_notify` yields the CPU this many times before arming, widening
    /// the window in which a completion is not reported (0: no delay).
    ///
    /// ```
    /// let (_cq, producer) = evd_verbs::soft::SoftCq::new(4).unwrap();
    /// producer.set_rearm_window(2);
    /// ```
    pub fn set_rearm_window(&self, yields: u32) {
        self.inner
            .faults
            .rearm_window_yields
            .store(yields, Ordering::Relaxed);
    }

    /// The next `req_notify` adds `wc` just before it arms: the completion
    /// lands in the window and raises no event (unless the CQ is still
    /// armed by an earlier `req_notify` that has not fired: that arm fires).
    /// A consumer that does not poll after arming strands it.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// producer.complete_in_next_rearm_window(WorkCompletion::new(9));
    /// cq.req_notify(false).unwrap();
    /// assert!(!cq.get_event().unwrap()); // no event: only polling finds it
    /// assert_eq!(producer.stats().len, 1);
    /// ```
    pub fn complete_in_next_rearm_window(&self, wc: WorkCompletion) {
        self.inner.lock().window_injections.push(wc);
    }

    /// Run `f` inside the next poll, after it has taken its completions and
    /// before it returns: what another thread does between a consumer's
    /// look at its EVD's room and its post (posting into the same EVD, say).
    /// An `f` that panics takes the poll with it: the completions it took
    /// are put back first, ahead of any `f` added meanwhile (the CQ may
    /// then hold more than its capacity: every completion pushed overruns
    /// until polls bring it below). A CQ already dropped polls no more: `f` is
    /// dropped at once.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// let ran = Arc::new(AtomicBool::new(false));
    /// let r = ran.clone();
    /// producer.during_next_poll(move || r.store(true, Ordering::Relaxed));
    /// cq.poll(&mut [WorkCompletion::default(); 1]).unwrap();
    /// assert!(ran.load(Ordering::Relaxed));
    /// ```
    pub fn during_next_poll(&self, f: impl FnOnce() + Send + 'static) {
        // The closure it replaces (or `f`, for a dropped CQ: kept, it
        // could hold this handle in a cycle) is dropped with the lock free
        // (its drop may take it).
        let unrun: Option<Box<dyn FnOnce() + Send>> = {
            let mut st = self.inner.lock();
            if st.destroyed {
                Some(Box::new(f))
            } else {
                st.during_next_poll.replace(Box::new(f))
            }
        };
        drop(unrun);
    }

    /// Every `n`-th completion added gets status `WR_FLUSH_ERR` (0: never);
    /// one lost to an overrun is not counted.
    ///
    /// ```
    /// let (_cq, producer) = evd_verbs::soft::SoftCq::new(4).unwrap();
    /// producer.set_error_every(10);
    /// ```
    pub fn set_error_every(&self, n: u32) {
        self.inner.faults.error_every.store(n, Ordering::Relaxed);
    }

    /// The next poll fails with `errno`, and the CQ stays broken: every
    /// later poll fails the same way (what it holds is never delivered) and
    /// every later push returns [`PushError::Broken`]. (An overrun does not
    /// break the CQ: this is the way to test a CQ that fails.)
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, PollError, WorkCompletion, soft::{PushError, SoftCq}};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// producer.fail_next_poll(libc::EIO);
    /// assert_eq!(cq.poll(&mut [WorkCompletion::default(); 1]), Err(PollError::Failed(libc::EIO)));
    /// assert_eq!(cq.poll(&mut [WorkCompletion::default(); 1]), Err(PollError::Failed(libc::EIO)));
    /// assert_eq!(producer.push(WorkCompletion::default()), Err(PushError::Broken));
    /// ```
    pub fn fail_next_poll(&self, errno: i32) {
        self.inner
            .faults
            .fail_next_poll
            .store(errno, Ordering::Relaxed);
    }

    /// The next `req_notify` fails with `errno` and leaves the CQ unarmed;
    /// the one after works again.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// producer.fail_next_arm(libc::EIO);
    /// assert_eq!(cq.req_notify(false).unwrap_err().raw_os_error(), Some(libc::EIO));
    /// assert!(!producer.stats().armed);
    /// assert!(cq.req_notify(false).is_ok());
    /// ```
    pub fn fail_next_arm(&self, errno: i32) {
        self.inner
            .faults
            .fail_next_arm
            .store(errno, Ordering::Relaxed);
    }

    /// A snapshot of the CQ's state and counters.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, hca) = SoftCq::new(4).unwrap();
    /// hca.push(WorkCompletion::new(1)).unwrap();
    /// cq.poll(&mut [WorkCompletion::default(); 4]).unwrap();
    /// let s = hca.stats();
    /// assert_eq!((s.len, s.pushed, s.polled), (0, 1, 1));
    /// ```
    pub fn stats(&self) -> SoftCqStats {
        let st = self.inner.lock();
        SoftCqStats {
            len: st.ring.len(),
            armed: st.armed.is_some(),
            channel_events: st.channel_events,
            pushed: st.pushed,
            polled: st.polled,
            notifications: st.notifications,
            spurious: st.spurious,
            overruns: st.overruns,
            req_notifies: st.req_notifies,
            ignored_arms: st.ignored_arms,
            events_got: st.events_got,
            events_acked: st.events_acked,
            destroyed: st.destroyed,
            unacked_at_destroy: st.unacked_at_destroy,
        }
    }

    /// True if a completion is stranded: queued while no channel event is
    /// waiting for it (armed or not: an arm fires only for a completion
    /// that comes after it), so nothing wakes a consumer that sleeps on the
    /// channel until another completion comes. A destroyed or broken CQ
    /// strands nothing.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// producer.push(WorkCompletion::default()).unwrap();
    /// assert!(producer.is_stranded()); // queued, not armed: sleeping now would strand it
    /// cq.req_notify(false).unwrap();
    /// assert!(producer.is_stranded()); // arming alone does not help: it is already queued
    /// ```
    pub fn is_stranded(&self) -> bool {
        let st = self.inner.lock();
        !st.ring.is_empty() && st.channel_events == 0 && !st.destroyed && st.broken.is_none()
    }
}
