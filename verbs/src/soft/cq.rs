//! [`SoftCq`]: a software completion queue, the consumer side,
//! implementing [`CompletionQueue`]; its state, shared with its producer
//! ([`SoftCqProducer`]), is `Inner`.
//!
//! The CQ is guarded by one mutex, as software providers (rxe, siw) guard
//! theirs with a spinlock; it is a development and test double, not a fast
//! path.

use super::channel::ChannelInner;
use super::device::SoftDevice;
use super::producer::{PushError, SoftCqProducer};
use crate::event::{AsyncElement, AsyncEvent, AsyncEventKind, CqId, WcStatus, WorkCompletion};
use crate::eventfd;
use crate::source::{AsyncEventSource, CompletionQueue, PollError};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

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
    /// an [`io::Error`] if the CQ's channel eventfd cannot be made.
    ///
    /// ```
    /// let (cq, producer) = evd_verbs::soft::SoftCq::new(8).unwrap();
    /// assert_eq!(producer.stats().len, 0);
    /// # drop(cq);
    /// ```
    pub fn new(capacity: usize) -> io::Result<(SoftCq, SoftCqProducer)> {
        Self::build(capacity, CqId(u32::MAX), None, None)
    }

    /// A software CQ belonging to `device`: its overrun raises
    /// `CqError` for `id` there, as a real device's async fd does.
    ///
    /// # Errors
    ///
    /// As [`new`](SoftCq::new).
    ///
    /// ```
    /// use evd_verbs::{soft::{SoftCq, SoftDevice, PushError}, CqId, WorkCompletion, AsyncEventSource};
    /// let (mut async_events, device) = SoftDevice::new().unwrap();
    /// let (_cq, producer) = SoftCq::with_device(1, CqId(5), &device).unwrap();
    /// producer.push(WorkCompletion::default()).unwrap();
    /// assert_eq!(producer.push(WorkCompletion::default()), Err(PushError::Overrun));
    /// let ev = async_events.next_event().unwrap().unwrap();
    /// assert_eq!(ev.element, evd_verbs::AsyncElement::Cq(CqId(5)));
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
        let channel = match shared {
            Some(ch) => Channel::Shared(ch),
            None => Channel::Own(eventfd::new()?),
        };
        let inner = Arc::new_cyclic(|me| Inner {
            id,
            me: me.clone(),
            state: Mutex::new(State {
                ring: VecDeque::with_capacity(capacity),
                capacity,
                armed: None,
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
    /// cq.ack_events(1);
    /// assert!(cq.destroy().is_ok());
    /// assert_eq!(producer.stats().unacked_at_destroy, Some(0));
    /// ```
    pub fn destroy(self) -> Result<(), SoftCq> {
        let unacked = {
            let st = self.inner.lock();
            st.events_got - st.events_acked
        };
        if unacked == 0 {
            drop(self);
            Ok(())
        } else {
            Err(self)
        }
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

impl Drop for SoftCq {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        st.destroyed = true;
        st.unacked_at_destroy = Some(st.events_got - st.events_acked);
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
            f();
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
            // Added while not armed: raises nothing, exactly the race.
            let _ = self.inner.add(&mut st, wc, false);
        }
        st.req_notifies += 1;
        st.armed = Some(solicited_only);
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
        if st.channel_events == 0 {
            eventfd::clear(fd);
        }
        Ok(true)
    }

    fn ack_events(&mut self, count: u32) {
        let mut st = self.inner.lock();
        st.events_acked += u64::from(count);
        assert!(
            st.events_acked <= st.events_got,
            "acknowledged {} CQ events but only {} were got",
            st.events_acked,
            st.events_got
        );
    }

    fn device_events(&self) -> Option<Box<dyn AsyncEventSource>> {
        let events = self.inner.device.as_ref()?.take_events()?;
        Some(Box::new(events))
    }
}

pub(super) struct State {
    pub(super) ring: VecDeque<WorkCompletion>,
    pub(super) capacity: usize,
    /// `Some(solicited_only)` while armed.
    pub(super) armed: Option<bool>,
    /// Channel events raised and not yet got.
    pub(super) channel_events: u64,
    pub(super) events_got: u64,
    pub(super) events_acked: u64,
    pub(super) broken: Option<PollError>,
    pub(super) destroyed: bool,
    pub(super) unacked_at_destroy: Option<u64>,
    pub(super) pushed: u64,
    pub(super) polled: u64,
    pub(super) notifications: u64,
    pub(super) spurious: u64,
    pub(super) overruns: u64,
    pub(super) req_notifies: u64,
    /// Completions to add inside the next `req_notify`, before it arms.
    pub(super) window_injections: Vec<WorkCompletion>,
    /// Run (outside the lock) by the next poll, after it took its completions.
    pub(super) during_next_poll: Option<Box<dyn FnOnce() + Send>>,
}

#[derive(Default)]
pub(super) struct Faults {
    pub(super) spurious_every: AtomicU32,
    pub(super) rearm_window_yields: AtomicU32,
    pub(super) error_every: AtomicU32,
    pub(super) error_counter: AtomicU64,
    pub(super) fail_next_poll: AtomicI32,
    pub(super) fail_next_arm: AtomicI32,
}

/// Lock attempts a contended CQ spins through before it sleeps.
const SPINS_BEFORE_SLEEPING: u32 = 1000;

/// Where a software CQ's channel events go.
pub(super) enum Channel {
    /// Its own eventfd (one channel per CQ).
    Own(OwnedFd),
    /// A [`SoftChannel`] shared with other CQs.
    Shared(Arc<ChannelInner>),
}

pub(super) struct Inner {
    pub(super) id: CqId,
    /// This CQ itself, named in the events it queues on a shared channel.
    pub(super) me: Weak<Inner>,
    pub(super) state: Mutex<State>,
    pub(super) channel: Channel,
    pub(super) faults: Faults,
    pub(super) device: Option<SoftDevice>,
}

impl Inner {
    /// What `Debug` shows of either handle: no lock is taken (the state
    /// is in [`SoftCqProducer::stats`]).
    pub(super) fn debug(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("id", &self.id)
            .field(
                "channel_fd",
                &match &self.channel {
                    Channel::Own(fd) => fd.as_raw_fd(),
                    Channel::Shared(ch) => ch.fd.as_raw_fd(),
                },
            )
            .field(
                "shared_channel",
                &matches!(self.channel, Channel::Shared(_)),
            )
            .field("on_device", &self.device.is_some())
            .finish_non_exhaustive()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // Spin briefly before sleeping, as rxe's and siw's spinlocks do: the
        // critical sections are a few hundred nanoseconds, and a poller that
        // slept in the futex on every collision with a producer would measure
        // the scheduler, not the feed.
        for _ in 0..SPINS_BEFORE_SLEEPING {
            match self.state.try_lock() {
                Ok(g) => return g,
                // A panicking test thread must not hide the CQ's state from
                // the rest of the test: the state is consistent at every
                // unlock.
                Err(std::sync::TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => std::hint::spin_loop(),
            }
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Raise one channel event. Every event writes the eventfd (as the
    /// kernel wakes the channel's pollers on every event), so an edge-style
    /// waiter such as a multishot poll sees each one.
    pub(super) fn raise_event(&self, st: &mut State) {
        st.channel_events += 1;
        match &self.channel {
            Channel::Own(fd) => eventfd::signal(fd),
            // Lock order: this CQ's state (held by the caller), then the
            // channel's queue; the channel never takes a CQ's lock while
            // holding its own.
            Channel::Shared(ch) => ch.queue(self.me.clone()),
        }
    }

    pub(super) fn add(
        &self,
        st: &mut State,
        mut wc: WorkCompletion,
        solicited: bool,
    ) -> Result<(), PushError> {
        if st.destroyed {
            return Err(PushError::Destroyed);
        }
        if st.broken.is_some() {
            return Err(PushError::Broken);
        }
        let every = self.faults.error_every.load(Ordering::Relaxed);
        if every != 0
            && self.faults.error_counter.fetch_add(1, Ordering::Relaxed) % every as u64
                == every as u64 - 1
        {
            wc.status = WcStatus::WR_FLUSH_ERR;
        }
        if st.ring.len() == st.capacity {
            st.overruns += 1;
            st.broken = Some(PollError::Overrun);
            // Wake a sleeping consumer so that its next poll reports the
            // overrun, whether or not the CQ was armed.
            self.raise_event(st);
            if let Some(dev) = &self.device {
                dev.raise(AsyncEvent::new(
                    AsyncEventKind::CqError,
                    AsyncElement::Cq(self.id),
                ));
            }
            return Err(PushError::Overrun);
        }
        st.pushed += 1;
        let fires = match st.armed {
            Some(solicited_only) => !solicited_only || solicited || !wc.status.is_success(),
            None => false,
        };
        st.ring.push_back(wc);
        if fires {
            st.armed = None;
            st.notifications += 1;
            self.raise_event(st);
        }
        Ok(())
    }
}
