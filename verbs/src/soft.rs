//! A software completion queue honouring the verbs contract of
//! [`CompletionQueue`], with an eventfd as its completion channel and knobs
//! for fault injection. Tests use it; so can users without RDMA hardware.
//!
//! It reproduces what makes real CQs hard to consume:
//! - `req_notify` is one shot and ignores completions already queued, so a
//!   completion that lands between the consumer's last poll and its re-arm
//!   raises no event (the [`SoftCqProducer::set_rearm_window`] and
//!   [`SoftCqProducer::complete_in_next_rearm_window`] knobs widen or hit
//!   that window);
//! - channel events can be spurious ([`SoftCqProducer::inject_spurious_event`],
//!   [`SoftCqProducer::set_spurious_every`]);
//! - completions can carry errors ([`SoftCqProducer::set_error_every`]);
//! - the CQ can overrun (push past its capacity), which loses the completion,
//!   breaks the CQ (polls fail with [`PollError::Overrun`]), signals the
//!   channel so a sleeping consumer finds out, and raises `CqError` on the
//!   [`SoftDevice`] it belongs to;
//! - polls can fail ([`SoftCqProducer::fail_next_poll`]), and so can an
//!   arm ([`SoftCqProducer::fail_next_arm`]);
//! - destroying it with events got but not acknowledged is recorded
//!   ([`SoftCqStats::unacked_at_destroy`]) where libibverbs would block.
//!
//! A [`SoftChannel`] is one channel shared by many such CQs, as one
//! `ibv_comp_channel` is: one eventfd, and each event names its CQ.
//!
//! The CQ is guarded by one mutex, as software providers (rxe, siw) guard
//! theirs with a spinlock; it is a development and test double, not a fast
//! path.

use crate::channel_feed::{ChannelEvent, CqKey, SharedChannel};
use crate::cm_event::{CmEvent, CmEventSource};
use crate::completion::{WcStatus, WorkCompletion};
use crate::cq::{AsyncEventSource, CompletionQueue, PollError};
use crate::event::{AsyncElement, AsyncEvent, AsyncEventKind, CqId};
use crate::eventfd;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

struct State {
    ring: VecDeque<WorkCompletion>,
    capacity: usize,
    /// `Some(solicited_only)` while armed.
    armed: Option<bool>,
    /// Channel events raised and not yet got.
    channel_events: u64,
    events_got: u64,
    events_acked: u64,
    broken: Option<PollError>,
    destroyed: bool,
    unacked_at_destroy: Option<u64>,
    pushed: u64,
    polled: u64,
    notifications: u64,
    spurious: u64,
    overruns: u64,
    req_notifies: u64,
    /// Completions to add inside the next `req_notify`, before it arms.
    window_injections: Vec<WorkCompletion>,
    /// Run (outside the lock) by the next poll, after it took its completions.
    during_next_poll: Option<Box<dyn FnOnce() + Send>>,
}

#[derive(Default)]
struct Faults {
    spurious_every: AtomicU32,
    rearm_window_yields: AtomicU32,
    error_every: AtomicU32,
    error_counter: AtomicU64,
    fail_next_poll: AtomicI32,
    fail_next_arm: AtomicI32,
}

/// Lock attempts a contended CQ spins through before it sleeps.
const SPINS_BEFORE_SLEEPING: u32 = 1000;

/// Where a software CQ's channel events go.
enum Channel {
    /// Its own eventfd (one channel per CQ).
    Own(OwnedFd),
    /// A [`SoftChannel`] shared with other CQs.
    Shared(Arc<ChannelInner>),
}

struct Inner {
    id: CqId,
    /// This CQ itself, named in the events it queues on a shared channel.
    me: Weak<Inner>,
    state: Mutex<State>,
    channel: Channel,
    faults: Faults,
    device: Option<SoftDevice>,
}

impl Inner {
    /// What `Debug` shows of either handle: no lock is taken (the state
    /// is in [`SoftCqProducer::stats`]).
    fn debug(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

    fn lock(&self) -> MutexGuard<'_, State> {
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
    fn raise_event(&self, st: &mut State) {
        st.channel_events += 1;
        match &self.channel {
            Channel::Own(fd) => eventfd::signal(fd),
            // Lock order: this CQ's state (held by the caller), then the
            // channel's queue; the channel never takes a CQ's lock while
            // holding its own.
            Channel::Shared(ch) => ch.queue(self.me.clone()),
        }
    }

    fn add(
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
                dev.raise(AsyncEvent {
                    kind: AsyncEventKind::CqError,
                    element: AsyncElement::Cq(self.id),
                });
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

/// Why a software completion could not be added.
///
/// ```
/// use evd_verbs::{WorkCompletion, soft::{SoftCq, PushError}};
/// let (cq, hca) = SoftCq::new(1).unwrap();
/// drop(cq);
/// assert_eq!(hca.push(WorkCompletion::default()), Err(PushError::Destroyed));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// The CQ was full: it overran, the completion is lost and the CQ is broken.
    Overrun,
    /// The CQ broke earlier (overrun or injected failure).
    Broken,
    /// The CQ was destroyed.
    Destroyed,
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PushError::Overrun => "software CQ overran",
            PushError::Broken => "software CQ is broken",
            PushError::Destroyed => "software CQ was destroyed",
        })
    }
}

impl std::error::Error for PushError {}

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
    /// `req_notify` calls.
    pub req_notifies: u64,
    /// Channel events got.
    pub events_got: u64,
    /// Channel events acknowledged.
    pub events_acked: u64,
    /// The CQ was destroyed.
    pub destroyed: bool,
    /// Events got but not acknowledged when the CQ was destroyed (libibverbs'
    /// `ibv_destroy_cq` would have blocked on them).
    pub unacked_at_destroy: Option<u64>,
}

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
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SoftCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.debug("SoftCq", f)
    }
}

/// The producer side of a [`SoftCq`] ("the HCA"): adds completions and
/// injects faults. Cloneable, usable from any thread.
#[derive(Clone)]
pub struct SoftCqProducer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SoftCqProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.debug("SoftCqProducer", f)
    }
}

impl SoftCq {
    /// A software CQ holding up to `capacity` completions, not attached to a
    /// device.
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

    fn build(
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

impl SoftCqProducer {
    /// Add a completion (not solicited). An armed CQ raises one channel event.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// cq.req_notify(false).unwrap();
    /// producer.push(WorkCompletion::default()).unwrap();
    /// assert!(cq.get_event().unwrap());
    /// cq.ack_events(1);
    /// ```
    pub fn push(&self, wc: WorkCompletion) -> Result<(), PushError> {
        let mut st = self.inner.lock();
        self.inner.add(&mut st, wc, false)
    }

    /// Add a solicited completion: also wakes a CQ armed for solicited only.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// cq.req_notify(true).unwrap();
    /// producer.push(WorkCompletion::default()).unwrap();
    /// assert!(!cq.get_event().unwrap());
    /// producer.push_solicited(WorkCompletion::default()).unwrap();
    /// assert!(cq.get_event().unwrap());
    /// cq.ack_events(1);
    /// ```
    pub fn push_solicited(&self, wc: WorkCompletion) -> Result<(), PushError> {
        let mut st = self.inner.lock();
        self.inner.add(&mut st, wc, true)
    }

    /// Add completions under one lock; returns how many were added before an
    /// error stopped it.
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

    /// Every `n`-th `req_notify` also raises a spurious event (0: never).
    ///
    /// ```
    /// let (_cq, producer) = evd_verbs::soft::SoftCq::new(4).unwrap();
    /// producer.set_spurious_every(3);
    /// ```
    pub fn set_spurious_every(&self, n: u32) {
        self.inner.faults.spurious_every.store(n, Ordering::Relaxed);
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
    /// lands in the window and raises no event. A consumer that does not poll
    /// after arming strands it.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// producer.complete_in_next_rearm_window(WorkCompletion { wr_id: 9, ..Default::default() });
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
        self.inner.lock().during_next_poll = Some(Box::new(f));
    }

    /// Every `n`-th completion added gets status `WR_FLUSH_ERR` (0: never).
    ///
    /// ```
    /// let (_cq, producer) = evd_verbs::soft::SoftCq::new(4).unwrap();
    /// producer.set_error_every(10);
    /// ```
    pub fn set_error_every(&self, n: u32) {
        self.inner.faults.error_every.store(n, Ordering::Relaxed);
    }

    /// The next poll fails with `errno`, and the CQ stays broken.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, PollError, WorkCompletion, soft::SoftCq};
    /// let (mut cq, producer) = SoftCq::new(4).unwrap();
    /// producer.fail_next_poll(libc::EIO);
    /// assert_eq!(cq.poll(&mut [WorkCompletion::default(); 1]), Err(PollError::Failed(libc::EIO)));
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
            events_got: st.events_got,
            events_acked: st.events_acked,
            destroyed: st.destroyed,
            unacked_at_destroy: st.unacked_at_destroy,
        }
    }

    /// True if a completion is stranded: queued while the CQ is neither
    /// armed nor holding an undelivered channel event, so nothing will ever
    /// wake a consumer that sleeps on the channel.
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

/// Events raised in software and taken through an fd that is readable
/// while any wait: a device's async events, a connection manager's events.
struct EventQueue<E> {
    queue: Mutex<VecDeque<E>>,
    fd: OwnedFd,
}

impl<E> EventQueue<E> {
    fn new() -> io::Result<Self> {
        Ok(EventQueue {
            queue: Mutex::new(VecDeque::new()),
            fd: eventfd::new()?,
        })
    }

    fn raise(&self, event: E) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(event);
        if q.len() == 1 {
            eventfd::signal(&self.fd);
        }
    }

    fn next(&self) -> Option<E> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let ev = q.pop_front();
        if q.is_empty() {
            eventfd::clear(&self.fd);
        }
        ev
    }

    /// What `Debug` shows of a handle: no lock is taken.
    fn debug(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("fd", &self.fd.as_raw_fd())
            .finish_non_exhaustive()
    }
}

struct DeviceInner {
    events: EventQueue<AsyncEvent>,
    /// A [`SoftAsyncEvents`] was handed out.
    heard: AtomicBool,
}

impl DeviceInner {
    fn debug(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.events.debug(name, f)
    }
}

/// A software device's async-event side: [`SoftDevice::raise`] queues an
/// event, [`SoftAsyncEvents`] (an [`AsyncEventSource`]) takes it.
#[derive(Clone)]
pub struct SoftDevice {
    inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for SoftDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.debug("SoftDevice", f)
    }
}

/// The consumer side of a [`SoftDevice`]'s async events.
///
/// ```
/// use evd_verbs::AsyncEventSource;
/// let (mut events, _device) = evd_verbs::soft::SoftDevice::new().unwrap();
/// assert!(events.next_event().unwrap().is_none());
/// ```
pub struct SoftAsyncEvents {
    inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for SoftAsyncEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.debug("SoftAsyncEvents", f)
    }
}

impl SoftDevice {
    /// A software device and the source of its async events.
    ///
    /// ```
    /// let (events, device) = evd_verbs::soft::SoftDevice::new().unwrap();
    /// # drop((events, device));
    /// ```
    pub fn new() -> io::Result<(SoftAsyncEvents, SoftDevice)> {
        let device = SoftDevice::unheard()?;
        let events = device
            .take_events()
            .expect("a new device's events are untaken");
        Ok((events, device))
    }

    /// A software device whose async events nobody takes yet (as a real
    /// device's, until someone reads its async fd): the first
    /// [`SoftDevice::take_events`], or a [`Driver`](crate::Driver) that
    /// registers a feed of one of its CQs, takes them.
    ///
    /// ```
    /// let device = evd_verbs::soft::SoftDevice::unheard().unwrap();
    /// let events = device.take_events();
    /// assert!(events.is_some());
    /// assert!(device.take_events().is_none()); // while `events` lives
    /// ```
    pub fn unheard() -> io::Result<SoftDevice> {
        Ok(SoftDevice {
            inner: Arc::new(DeviceInner {
                events: EventQueue::new()?,
                heard: AtomicBool::new(false),
            }),
        })
    }

    /// The device's async events, unless they are taken (and not dropped
    /// since).
    ///
    /// ```
    /// let (events, device) = evd_verbs::soft::SoftDevice::new().unwrap();
    /// assert!(device.take_events().is_none());
    /// drop(events);
    /// assert!(device.take_events().is_some());
    /// ```
    pub fn take_events(&self) -> Option<SoftAsyncEvents> {
        // Relaxed: the flag only decides who takes the events; the queue
        // behind them has its own lock.
        if self.inner.heard.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(SoftAsyncEvents {
            inner: self.inner.clone(),
        })
    }

    /// Raise an async event (a port going down, a fatal device error ...).
    ///
    /// ```
    /// use evd_verbs::{AsyncEvent, AsyncEventKind, AsyncElement};
    /// let (_events, device) = evd_verbs::soft::SoftDevice::new().unwrap();
    /// device.raise(AsyncEvent { kind: AsyncEventKind::PortError, element: AsyncElement::Port(1) });
    /// ```
    pub fn raise(&self, event: AsyncEvent) {
        self.inner.events.raise(event);
    }
}

impl Drop for SoftAsyncEvents {
    fn drop(&mut self) {
        // Nobody listens any more: the events can be taken again.
        self.inner.heard.store(false, Ordering::Relaxed);
    }
}

impl AsyncEventSource for SoftAsyncEvents {
    fn fd(&self) -> RawFd {
        self.inner.events.fd.as_raw_fd()
    }

    fn next_event(&mut self) -> io::Result<Option<AsyncEvent>> {
        Ok(self.inner.events.next())
    }
}

/// A software connection manager: [`SoftCm::raise`] queues an event (an
/// incoming request, an established connection, a disconnect ...) that
/// [`SoftCmEvents`] (a [`CmEventSource`]) hands out, in order, through an
/// eventfd as `ibv::CmChannel` does through its event channel.
///
/// ```
/// use evd_verbs::{CmEvent, CmEventKind, CmToken, CmEventSource, soft::SoftCm};
/// let (mut events, cm) = SoftCm::new().unwrap();
/// cm.raise(CmEvent { kind: CmEventKind::Disconnected, id: CmToken(3), ..Default::default() });
/// let ev = events.next_event().unwrap().unwrap();
/// assert_eq!((ev.kind, ev.id), (CmEventKind::Disconnected, CmToken(3)));
/// ```
#[derive(Clone)]
pub struct SoftCm {
    inner: Arc<EventQueue<CmEvent>>,
}

impl std::fmt::Debug for SoftCm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.debug("SoftCm", f)
    }
}

/// The consumer side of a [`SoftCm`].
pub struct SoftCmEvents {
    inner: Arc<EventQueue<CmEvent>>,
}

impl std::fmt::Debug for SoftCmEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.debug("SoftCmEvents", f)
    }
}

impl SoftCm {
    /// A software connection manager and the source of its events.
    pub fn new() -> io::Result<(SoftCmEvents, SoftCm)> {
        let inner = Arc::new(EventQueue::new()?);
        Ok((
            SoftCmEvents {
                inner: inner.clone(),
            },
            SoftCm { inner },
        ))
    }

    /// Queue an event; the source's fd becomes readable.
    pub fn raise(&self, event: CmEvent) {
        self.inner.raise(event);
    }
}

impl CmEventSource for SoftCmEvents {
    fn fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }

    fn next_event(&mut self) -> io::Result<Option<CmEvent>> {
        Ok(self.inner.next())
    }
}

/// The shared part of a [`SoftChannel`]: one eventfd, and the queue of the
/// events raised and not yet got, each naming its CQ.
struct ChannelInner {
    /// Events in the order they were raised.
    queue: Mutex<VecDeque<Weak<Inner>>>,
    /// Readable while the queue is not empty.
    fd: OwnedFd,
    /// Every CQ made on the channel, to find one by its key.
    cqs: Mutex<Vec<Weak<Inner>>>,
    raised: AtomicU64,
    got: AtomicU64,
    dropped: AtomicU64,
    acked_unknown: AtomicU64,
}

impl ChannelInner {
    fn queue(&self, cq: Weak<Inner>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(cq);
        // Relaxed: a counter for tests, read after the fact.
        self.raised.fetch_add(1, Ordering::Relaxed);
        // Every event writes the fd, as for a CQ's own channel.
        eventfd::signal(&self.fd);
    }

    fn pop(&self) -> Option<Weak<Inner>> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let cq = q.pop_front();
        if q.is_empty() {
            eventfd::clear(&self.fd);
        }
        cq
    }
}

/// Counters of a [`SoftChannel`].
///
/// ```
/// let channel = evd_verbs::soft::SoftChannel::new().unwrap();
/// assert_eq!(channel.stats().queued, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftChannelStats {
    /// Events waiting to be got now.
    pub queued: usize,
    /// Events raised by the channel's CQs.
    pub raised: u64,
    /// Events got ([`SharedChannel::get_cq_event`]).
    pub got: u64,
    /// Events dropped because their CQ was destroyed before they were got
    /// (as the kernel drops a destroyed CQ's pending events).
    pub dropped: u64,
    /// Events acknowledged through [`SharedChannel::ack_unknown`].
    pub acked_unknown: u64,
}

/// A software completion channel shared by many [`SoftCq`]s, as one
/// `ibv_comp_channel` is shared by many CQs: one eventfd, and each event
/// names the CQ it is for ([`SharedChannel::get_cq_event`]), so its
/// consumer must demultiplex (a [`ChannelFeed`](crate::ChannelFeed) does).
///
/// The CQs made on it ([`SoftChannel::create_cq`]) keep the verbs contract
/// and the fault knobs of [`SoftCqProducer`]; their own
/// [`channel_fd`](CompletionQueue::channel_fd) is `None` and their
/// [`get_event`](CompletionQueue::get_event) finds nothing: their events
/// are the channel's. Cloning the handle shares the channel.
///
/// ```
/// use evd_verbs::{CompletionQueue, SharedChannel, WorkCompletion, soft::SoftChannel};
/// let mut channel = SoftChannel::new().unwrap();
/// let (mut a, _hca_a) = channel.create_cq(16).unwrap();
/// let (mut b, hca_b) = channel.create_cq(16).unwrap();
/// a.req_notify(false).unwrap();
/// b.req_notify(false).unwrap();
/// hca_b.push(WorkCompletion::default()).unwrap();
/// let ev = channel.get_cq_event().unwrap().unwrap();
/// assert_eq!(Some(ev.cq()), channel.key_of(&b)); // the event is b's
/// assert!(channel.get_cq_event().unwrap().is_none());
/// b.ack_events(1);
/// ```
#[derive(Clone)]
pub struct SoftChannel {
    inner: Arc<ChannelInner>,
}

impl std::fmt::Debug for SoftChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftChannel")
            .field("fd", &self.inner.fd.as_raw_fd())
            .finish_non_exhaustive()
    }
}

impl SoftChannel {
    /// A new channel with no CQ on it.
    ///
    /// ```
    /// let channel = evd_verbs::soft::SoftChannel::new().unwrap();
    /// # drop(channel);
    /// ```
    pub fn new() -> io::Result<SoftChannel> {
        Ok(SoftChannel {
            inner: Arc::new(ChannelInner {
                queue: Mutex::new(VecDeque::new()),
                fd: eventfd::new()?,
                cqs: Mutex::new(Vec::new()),
                raised: AtomicU64::new(0),
                got: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                acked_unknown: AtomicU64::new(0),
            }),
        })
    }

    /// A software CQ of `capacity` completions whose events go to this
    /// channel.
    ///
    /// ```
    /// use evd_verbs::CompletionQueue;
    /// let channel = evd_verbs::soft::SoftChannel::new().unwrap();
    /// let (cq, _hca) = channel.create_cq(8).unwrap();
    /// assert!(cq.channel_fd().is_none()); // the channel's fd serves it
    /// ```
    pub fn create_cq(&self, capacity: usize) -> io::Result<(SoftCq, SoftCqProducer)> {
        let (cq, producer) =
            SoftCq::build(capacity, CqId(u32::MAX), None, Some(self.inner.clone()))?;
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.retain(|w| w.strong_count() > 0);
        cqs.push(Arc::downgrade(&cq.inner));
        Ok((cq, producer))
    }

    /// The counters.
    pub fn stats(&self) -> SoftChannelStats {
        let queued = self
            .inner
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        // Relaxed: counters, read after the fact.
        SoftChannelStats {
            queued,
            raised: self.inner.raised.load(Ordering::Relaxed),
            got: self.inner.got.load(Ordering::Relaxed),
            dropped: self.inner.dropped.load(Ordering::Relaxed),
            acked_unknown: self.inner.acked_unknown.load(Ordering::Relaxed),
        }
    }
}

fn soft_key(cq: &Weak<Inner>) -> CqKey {
    CqKey(cq.as_ptr() as usize)
}

impl SharedChannel for SoftChannel {
    type Cq = SoftCq;

    fn fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }

    fn get_cq_event(&mut self) -> io::Result<Option<ChannelEvent>> {
        // The queue's lock is let go before a CQ's is taken (see
        // `Inner::raise_event`).
        while let Some(weak) = self.inner.pop() {
            let key = soft_key(&weak);
            let Some(cq) = weak.upgrade() else {
                self.inner.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let mut st = cq.lock();
            if st.destroyed {
                self.inner.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            st.channel_events -= 1;
            st.events_got += 1;
            drop(st);
            self.inner.got.fetch_add(1, Ordering::Relaxed);
            // SAFETY: one event of the live CQ `key` names was just got
            // (counted in its `events_got`) and is not acknowledged.
            return Ok(Some(unsafe { ChannelEvent::new(key) }));
        }
        Ok(None)
    }

    fn key_of(&self, cq: &SoftCq) -> Option<CqKey> {
        match &cq.inner.channel {
            Channel::Shared(ch) if Arc::ptr_eq(ch, &self.inner) => Some(soft_key(&cq.inner.me)),
            _ => None,
        }
    }

    fn ack_unknown(&mut self, event: ChannelEvent) {
        let cq = {
            let cqs = self.inner.cqs.lock().unwrap_or_else(|e| e.into_inner());
            cqs.iter()
                .find(|w| soft_key(w) == event.cq())
                .and_then(Weak::upgrade)
        };
        if let Some(cq) = cq {
            let mut st = cq.lock();
            st.events_acked += 1;
            self.inner.acked_unknown.fetch_add(1, Ordering::Relaxed);
        }
    }
}
