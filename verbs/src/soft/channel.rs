//! [`SoftChannel`]: one software completion channel shared by many
//! [`SoftCq`]s, as one `ibv_comp_channel` is: one eventfd, and each event
//! names its CQ.

use super::cq::SoftCq;
use super::cq_state::{Channel, ChannelInner, Inner};
use super::device::SoftDevice;
use super::producer::SoftCqProducer;
use crate::event::CqId;
use crate::eventfd;
use crate::source::{ChannelEvent, CqKey, SharedChannel};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Counters of a [`SoftChannel`].
///
/// ```
/// let channel = evd_verbs::soft::SoftChannel::new().unwrap();
/// assert_eq!(channel.stats().queued, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
/// [`channel_fd`](crate::CompletionQueue::channel_fd) is `None` and their
/// [`get_event`](crate::CompletionQueue::get_event) finds nothing: their events
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
/// // SAFETY: one event of `b` was got above and not acknowledged.
/// unsafe { b.ack_events(1) };
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
    /// # Errors
    ///
    /// An [`io::Error`] if the eventfd cannot be made (`EMFILE`, `ENFILE`,
    /// `ENOMEM`).
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
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) if `capacity` is 0.
    ///
    /// ```
    /// use evd_verbs::CompletionQueue;
    /// let channel = evd_verbs::soft::SoftChannel::new().unwrap();
    /// let (cq, _hca) = channel.create_cq(8).unwrap();
    /// assert!(cq.channel_fd().is_none()); // the channel's fd serves it
    /// ```
    pub fn create_cq(&self, capacity: usize) -> io::Result<(SoftCq, SoftCqProducer)> {
        self.create(capacity, CqId(u32::MAX), None)
    }

    /// A software CQ of `capacity` completions whose events go to this
    /// channel, belonging to `device`: each completion its overrun loses
    /// raises `CqError` for `id` there, as for
    /// [`SoftCq::with_device`]. A driver that registers a
    /// [`ChannelFeed`](crate::ChannelFeed) feeds the device of the feed's
    /// first CQ into the same EVD (a real channel's CQs are all of its
    /// context's device): give every CQ of a channel the same device, or
    /// none; the overruns of a CQ on another device stay there.
    ///
    /// # Errors
    ///
    /// As [`create_cq`](Self::create_cq).
    ///
    /// ```
    /// use evd_verbs::{AsyncElement, AsyncEventKind, AsyncEventSource, CqId, WorkCompletion};
    /// use evd_verbs::soft::{PushError, SoftChannel, SoftDevice};
    /// let (mut async_events, device) = SoftDevice::new().unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let (_cq, hca) = channel.create_cq_on(1, CqId(3), &device).unwrap();
    /// hca.push(WorkCompletion::new(1)).unwrap();
    /// assert_eq!(hca.push(WorkCompletion::new(2)), Err(PushError::Overrun));
    /// let ev = async_events.next_event().unwrap().unwrap();
    /// assert_eq!((ev.kind, ev.element), (AsyncEventKind::CqError, AsyncElement::Cq(CqId(3))));
    /// ```
    pub fn create_cq_on(
        &self,
        capacity: usize,
        id: CqId,
        device: &SoftDevice,
    ) -> io::Result<(SoftCq, SoftCqProducer)> {
        self.create(capacity, id, Some(device.clone()))
    }

    fn create(
        &self,
        capacity: usize,
        id: CqId,
        device: Option<SoftDevice>,
    ) -> io::Result<(SoftCq, SoftCqProducer)> {
        let (cq, producer) = SoftCq::build(capacity, id, device, Some(self.inner.clone()))?;
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.retain(|w| w.strong_count() > 0);
        cqs.push(Arc::downgrade(&cq.inner));
        Ok((cq, producer))
    }

    /// The counters.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, SharedChannel, WorkCompletion, soft::SoftChannel};
    /// let mut channel = SoftChannel::new().unwrap();
    /// let (mut cq, hca) = channel.create_cq(4).unwrap();
    /// cq.req_notify(false).unwrap();
    /// hca.push(WorkCompletion::new(1)).unwrap();
    /// assert_eq!((channel.stats().raised, channel.stats().queued), (1, 1));
    /// let _event = channel.get_cq_event().unwrap().unwrap();
    /// assert_eq!(channel.stats().got, 1);
    /// // SAFETY: one event of `cq` was got above and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// ```
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

pub(super) fn soft_key(cq: &Weak<Inner>) -> CqKey {
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
            st.fired_unread = false;
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

    unsafe fn ack_unknown(&mut self, event: ChannelEvent) {
        let cq = {
            let cqs = self.inner.cqs.lock().unwrap_or_else(|e| e.into_inner());
            cqs.iter()
                .find(|w| soft_key(w) == event.cq())
                .and_then(Weak::upgrade)
        };
        if let Some(cq) = cq {
            let mut st = cq.lock();
            let (acked, got) = (st.events_acked + 1, st.events_got);
            if acked > got {
                // As `SoftCq::ack_events`: refused, the state untouched.
                drop(st);
                panic!("acknowledged {acked} CQ events but only {got} were got");
            }
            st.events_acked = acked;
            self.inner.acked_unknown.fetch_add(1, Ordering::Relaxed);
        }
    }
}
