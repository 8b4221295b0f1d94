//! [`SoftCq`]: a software completion queue, the consumer side,
//! implementing [`CompletionQueue`]; its state, shared with its producer
//! ([`SoftCqProducer`]), is `Inner`.
//!
//! The CQ is guarded by one mutex, as software providers (rxe, siw) guard
//! theirs with a spinlock; it is a development and test double, not a fast
//! path.

use super::cq_state::{Channel, ChannelInner, Faults, Inner, State};
use super::device::{CqSerial, SoftDevice};
use super::producer::SoftCqProducer;
use crate::event::{CqId, WorkCompletion};
use crate::eventfd;
use crate::source::{AsyncEventSource, CompletionQueue, PollError};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A software completion queue: the consumer side, implementing
/// [`CompletionQueue`]. Dropping it destroys the CQ.
///
/// ```
/// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
/// let (mut cq, hca) = SoftCq::new(8).unwrap();
/// assert!(cq.channel_fd().is_some()); // an eventfd
/// hca.push(WorkCompletion::default()).unwrap();
/// assert_eq!(cq.poll(&mut [WorkCompletion::default(); 4]), Ok(1));
/// ```
pub struct SoftCq {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for SoftCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.debug("SoftCq", f)
    }
}

impl SoftCq {
    /// A software CQ holding up to `capacity` completions, not attached to a
    /// device.
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) if `capacity` is 0;
    /// [`OutOfMemory`](io::ErrorKind::OutOfMemory) if its ring of
    /// `capacity` completions cannot be allocated; an [`io::Error`] if the
    /// CQ's channel eventfd cannot be made.
    ///
    /// ```
    /// let (cq, producer) = evd_verbs::soft::SoftCq::new(8).unwrap();
    /// assert_eq!(producer.stats().len, 0);
    /// let too_big = evd_verbs::soft::SoftCq::new(usize::MAX).err().unwrap();
    /// assert_eq!(too_big.kind(), std::io::ErrorKind::OutOfMemory);
    /// # drop(cq);
    /// ```
    pub fn new(capacity: usize) -> io::Result<(SoftCq, SoftCqProducer)> {
        Self::build(capacity, CqId(u32::MAX), None, None)
    }

    /// A software CQ belonging to `device`: each completion its overrun
    /// loses raises `CqError` for `id` there, as rxe's async fd does. The
    /// overrun does not fail the CQ
    /// (see [`PushError::Overrun`](super::PushError::Overrun)).
    ///
    /// # Errors
    ///
    /// As [`new`](SoftCq::new).
    ///
    /// ```
    /// use evd_verbs::{soft::{SoftCq, SoftDevice, PushError}, CqId, WorkCompletion};
    /// use evd_verbs::{AsyncElement, AsyncEventKind, AsyncEventSource, CompletionQueue};
    /// let (mut async_events, device) = SoftDevice::new().unwrap();
    /// let (mut cq, producer) = SoftCq::with_device(1, CqId(5), &device).unwrap();
    /// producer.push(WorkCompletion::new(1)).unwrap();
    /// assert_eq!(producer.push(WorkCompletion::new(2)), Err(PushError::Overrun));
    /// let ev = async_events.next_event().unwrap().unwrap();
    /// assert_eq!((ev.kind, ev.element), (AsyncEventKind::CqError, AsyncElement::Cq(CqId(5))));
    /// // Only the completion that did not fit is lost: the CQ goes on.
    /// let mut out = [WorkCompletion::default(); 2];
    /// assert_eq!(cq.poll(&mut out), Ok(1));
    /// assert_eq!(out[0].wr_id, 1);
    /// producer.push(WorkCompletion::new(3)).unwrap();
    /// ```
    pub fn with_device(
        capacity: usize,
        id: CqId,
        device: &SoftDevice,
    ) -> io::Result<(SoftCq, SoftCqProducer)> {
        Self::build(capacity, id, Some(device.clone()), None)
    }

    pub(super) fn build(
        capacity: usize,
        id: CqId,
        device: Option<SoftDevice>,
        shared: Option<Arc<ChannelInner>>,
    ) -> io::Result<(SoftCq, SoftCqProducer)> {
        if capacity == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "CQ capacity must be at least 1",
            ));
        }
        // Allocated in full now, as a provider allocates its CQ's ring: a
        // capacity no allocation can hold is refused, not a panic or abort.
        let mut ring = VecDeque::new();
        ring.try_reserve_exact(capacity).map_err(|e| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("a CQ of {capacity} completions: {e}"),
            )
        })?;
        let channel = match shared {
            Some(ch) => Channel::Shared(ch),
            None => Channel::Own(eventfd::new()?),
        };
        // Relaxed: a counter whose values only need to differ.
        static SERIALS: AtomicU64 = AtomicU64::new(0);
        let serial = CqSerial(SERIALS.fetch_add(1, Ordering::Relaxed));
        let inner = Arc::new_cyclic(|me| Inner {
            id,
            serial,
            me: me.clone(),
            state: Mutex::new(State {
                ring,
                capacity,
                armed: None,
                fired_unread: false,
                ignored_arms: 0,
                channel_events: 0,
                events_got: 0,
                events_acked: 0,
                broken: None,
                destroyed: false,
                unacked_at_destroy: None,
                pushed: 0,
                polled: 0,
                notifications: 0,
                spurious: 0,
                overruns: 0,
                req_notifies: 0,
                window_injections: Vec::new(),
                during_next_poll: None,
            }),
            channel,
            faults: Faults::default(),
            device,
        });
        Ok((
            SoftCq {
                inner: inner.clone(),
            },
            SoftCqProducer { inner },
        ))
    }

    /// Destroy the CQ, refusing (and handing it back) while channel events
    /// got are not all acknowledged, as `ibv_destroy_cq` requires.
    ///
    /// # Errors
    ///
    /// Hands the CQ back (`Err(cq)`) while channel events got from it are
    /// not all acknowledged.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// producer.inject_spurious_event();
    /// assert!(cq.get_event().unwrap());
    /// let mut cq = cq.destroy().unwrap_err();
    /// // SAFETY: one event of `cq` was got above and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// assert!(cq.destroy().is_ok());
    /// assert_eq!(producer.stats().unacked_at_destroy, Some(0));
    /// ```
    pub fn destroy(self) -> Result<(), SoftCq> {
        {
            // One critical section decides and destroys: a shared channel's
            // `get_cq_event` on another thread takes this lock too, and
            // gets no event of a destroyed CQ.
            let mut st = self.inner.lock();
            if st.events_got != st.events_acked {
                drop(st);
                return Err(self);
            }
            st.destroyed = true;
            st.unacked_at_destroy = Some(0);
        }
        drop(self);
        Ok(())
    }

    /// The producer handle of this CQ.
    ///
    /// ```
    /// use evd_verbs::{WorkCompletion, soft::SoftCq};
    /// let (cq, _hca) = SoftCq::new(4).unwrap();
    /// cq.producer().push(WorkCompletion::new(1)).unwrap();
    /// assert_eq!(cq.producer().stats().len, 1);
    /// ```
    pub fn producer(&self) -> SoftCqProducer {
        SoftCqProducer {
            inner: self.inner.clone(),
        }
    }
}

/// Dropping a CQ with channel events got and not acknowledged panics
/// (unless the thread is already unwinding: then it is only recorded, in
/// [`SoftCqStats::unacked_at_destroy`](super::SoftCqStats::unacked_at_destroy)),
/// where `ibv_destroy_cq` would wait for the acknowledgements for ever: a
/// missing ack is a bug of the caller, and the double says so at once.
impl Drop for SoftCq {
    fn drop(&mut self) {
        let (during, unacked) = {
            let mut st = self.inner.lock();
            st.destroyed = true;
            let unacked = st.events_got - st.events_acked;
            st.unacked_at_destroy.get_or_insert(unacked);
            // A closure no poll will run: it may hold a producer handle (a
            // cycle that would keep this state and its eventfd alive), and
            // its drop is user code, run with the lock free.
            (st.during_next_poll.take(), unacked)
        };
        drop(during);
        // No overrun raises an event now (a push finds it destroyed).
        if let Some(device) = &self.inner.device {
            device.forget_events_of(self.inner.serial);
        }
        if unacked != 0 && !std::thread::panicking() {
            panic!(
                "SoftCq destroyed with {unacked} channel events not acknowledged \
                 (ibv_destroy_cq would wait for them for ever)"
            );
        }
    }
}

impl CompletionQueue for SoftCq {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, PollError> {
        let injected = self.inner.faults.fail_next_poll.swap(0, Ordering::Relaxed);
        let mut st = self.inner.lock();
        if injected != 0 {
            st.broken = Some(PollError::Failed(injected));
        }
        // Run after the lock is released, whether the poll fails or not.
        let during = st.during_next_poll.take();
        let result = match st.broken {
            Some(e) => Err(e),
            None => {
                let n = out.len().min(st.ring.len());
                for (slot, wc) in out.iter_mut().zip(st.ring.drain(..n)) {
                    *slot = wc;
                }
                st.polled += n as u64;
                Ok(n)
            }
        };
        drop(st);
        if let Some(f) = during {
            // AssertUnwindSafe: a panic puts back what this poll took (at
            // the front, where it was: only a poll takes completions out),
            // then goes on; nothing else is left half done.
            if let Err(panic) = catch_unwind(AssertUnwindSafe(f)) {
                if let Ok(n) = result {
                    let mut st = self.inner.lock();
                    for wc in out[..n].iter().rev() {
                        st.ring.push_front(*wc);
                    }
                    st.polled -= n as u64;
                }
                resume_unwind(panic);
            }
        }
        result
    }

    fn req_notify(&mut self, solicited_only: bool) -> io::Result<()> {
        let injected = self.inner.faults.fail_next_arm.swap(0, Ordering::Relaxed);
        if injected != 0 {
            return Err(io::Error::from_raw_os_error(injected));
        }
        // Widen the window between the caller's last poll and the arm, where
        // producers may add completions that this arm will not report.
        for _ in 0..self
            .inner
            .faults
            .rearm_window_yields
            .load(Ordering::Relaxed)
        {
            std::thread::yield_now();
        }
        let mut st = self.inner.lock();
        for wc in std::mem::take(&mut st.window_injections) {
            // Added before this arm: raises nothing, exactly the race
            // (unless an earlier arm is still pending, which it fires).
            let _ = self.inner.add(&mut st, wc, false);
        }
        st.req_notifies += 1;
        if st.fired_unread && self.inner.faults.sequenced_arms.load(Ordering::Relaxed) {
            // The number of the arm that fired: the HCA ignores it.
            st.ignored_arms += 1;
            return Ok(());
        }
        // An arm for the next completion stays one until it fires: a
        // solicited-only request does not narrow it (IBA C11-31, C11-32;
        // rdmavt, rxe).
        st.armed = match st.armed {
            Some(false) => Some(false),
            _ => Some(solicited_only),
        };
        let every = self.inner.faults.spurious_every.load(Ordering::Relaxed);
        if every != 0 && st.req_notifies % every as u64 == 0 {
            st.spurious += 1;
            self.inner.raise_event(&mut st);
        }
        Ok(())
    }

    fn channel_fd(&self) -> Option<RawFd> {
        match &self.inner.channel {
            Channel::Own(fd) => Some(fd.as_raw_fd()),
            // Its events are the shared channel's, taken by a ChannelFeed.
            Channel::Shared(_) => None,
        }
    }

    fn get_event(&mut self) -> io::Result<bool> {
        let Channel::Own(fd) = &self.inner.channel else {
            // Taken through the shared channel.
            return Ok(false);
        };
        let mut st = self.inner.lock();
        if st.channel_events == 0 {
            return Ok(false);
        }
        st.channel_events -= 1;
        st.events_got += 1;
        st.fired_unread = false;
        if st.channel_events == 0 {
            eventfd::clear(fd);
        }
        Ok(true)
    }

    unsafe fn ack_events(&mut self, count: u32) {
        let mut st = self.inner.lock();
        let acked = st.events_acked + u64::from(count);
        let got = st.events_got;
        if acked <= got {
            st.events_acked = acked;
            return;
        }
        // Refused, the state untouched and the lock released first.
        drop(st);
        panic!("acknowledged {acked} CQ events but only {got} were got");
    }

    fn device_events(&self) -> Option<Box<dyn AsyncEventSource>> {
        let events = self.inner.device.as_ref()?.take_events()?;
        Some(Box::new(events))
    }
}
