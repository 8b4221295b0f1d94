//! [`SoftCm`]: a software connection manager, whose events
//! [`SoftCmEvents`] (a [`CmEventSource`]) hands out.

use super::event_queue::EventQueue;
use crate::event::CmEvent;
use crate::source::CmEventSource;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// A software connection manager: [`SoftCm::raise`] queues an event (an
/// incoming request, an established connection, a disconnect ...) that
/// [`SoftCmEvents`] (a [`CmEventSource`]) hands out, in order, through an
/// eventfd as `ibv::CmChannel` does through its event channel.
///
/// ```
/// use evd_verbs::{CmEvent, CmEventKind, CmToken, CmEventSource, soft::SoftCm};
/// let (mut events, cm) = SoftCm::new().unwrap();
/// cm.raise(CmEvent::new(CmEventKind::Disconnected, CmToken(3)));
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
    ///
    /// # Errors
    ///
    /// An [`io::Error`] if the eventfd cannot be made (`EMFILE`, `ENFILE`,
    /// `ENOMEM`).
    ///
    /// ```
    /// use evd_verbs::CmEventSource;
    /// let (mut events, _cm) = evd_verbs::soft::SoftCm::new().unwrap();
    /// assert!(events.next_event().unwrap().is_none());
    /// ```
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
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmEventSource, CmToken, soft::SoftCm};
    /// let (mut events, cm) = SoftCm::new().unwrap();
    /// cm.raise(CmEvent::new(CmEventKind::Disconnected, CmToken(2)));
    /// assert_eq!(events.next_event().unwrap().unwrap().id, CmToken(2));
    /// ```
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
