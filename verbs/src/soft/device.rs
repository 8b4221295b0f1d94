//! [`SoftDevice`]: a software device's async events, taken through
//! [`SoftAsyncEvents`] (an [`AsyncEventSource`]).

use super::event_queue::EventQueue;
use crate::event::AsyncEvent;
use crate::source::AsyncEventSource;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

struct DeviceInner {
    events: EventQueue<Raised>,
    /// A [`SoftAsyncEvents`] was handed out.
    heard: AtomicBool,
}

/// A queued async event, and the CQ that raised it (its [`CqSerial`]), if
/// one did.
struct Raised {
    event: AsyncEvent,
    by: Option<CqSerial>,
}

/// What names a software CQ to its device: unique in the process, never
/// reused (a `CqId` is the application's name and may be).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CqSerial(pub(super) u64);

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
    /// # Errors
    ///
    /// An [`io::Error`] if the eventfd cannot be made (`EMFILE`, `ENFILE`,
    /// `ENOMEM`).
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
    /// # Errors
    ///
    /// An [`io::Error`] if the eventfd cannot be made (`EMFILE`, `ENFILE`,
    /// `ENOMEM`).
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
    /// device.raise(AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(1)));
    /// ```
    pub fn raise(&self, event: AsyncEvent) {
        self.inner.events.raise(Raised { event, by: None });
    }

    /// Raise an async event of the CQ `by` (its overrun).
    pub(super) fn raise_for(&self, by: CqSerial, event: AsyncEvent) {
        let by = Some(by);
        self.inner.events.raise(Raised { event, by });
    }

    /// Drop the events the CQ `by` raised that nobody has taken: it is
    /// destroyed (the kernel drops a destroyed CQ's unread async events,
    /// `ib_uverbs_release_ucq`).
    pub(super) fn forget_events_of(&self, by: CqSerial) {
        self.inner.events.retain(|r| r.by != Some(by));
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
        Ok(self.inner.events.next().map(|r| r.event))
    }
}
