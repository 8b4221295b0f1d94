//! The completion-queue contract a feed relies on: exactly the verbs
//! operations it uses, so that real verbs and the software CQ are
//! interchangeable.

use crate::completion::WorkCompletion;
use crate::event::AsyncEvent;
use std::fmt;
use std::io;
use std::os::fd::RawFd;

/// A completion queue with an optional completion channel, seen through the
/// verbs operations a feed needs.
///
/// The contract is libibverbs':
/// - [`poll`](Self::poll) removes up to `out.len()` completions, oldest first.
/// - [`req_notify`](Self::req_notify) is *one shot* and only concerns
///   completions added *after* it: completions already in the CQ do not
///   trigger it. So a consumer must poll again after arming, or a completion
///   that arrived between its last poll and the arm is stranded.
/// - A triggered arm makes the channel fd readable; [`get_event`](Self::get_event)
///   consumes one channel event. Events may be spurious (no new completion).
/// - Every event got must be acknowledged with [`ack_events`](Self::ack_events)
///   (in batches: the ack takes a lock) before the CQ is destroyed.
///
/// Implementations: [`SoftCq`](crate::soft::SoftCq), and `IbvCq` (feature
/// `ibverbs`).
///
/// ```
/// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
/// let (mut cq, producer) = SoftCq::new(16).unwrap();
/// producer.push(WorkCompletion { wr_id: 1, ..Default::default() }).unwrap();
/// let mut out = [WorkCompletion::default(); 4];
/// assert_eq!(cq.poll(&mut out), Ok(1));
/// assert_eq!(out[0].wr_id, 1);
/// ```
pub trait CompletionQueue: Send {
    /// Poll up to `out.len()` completions into `out`; returns how many.
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, PollError>;

    /// Arm the CQ: the next completion added (with `solicited_only`: the next
    /// solicited or error completion) produces one channel event.
    fn req_notify(&mut self, solicited_only: bool) -> io::Result<()>;

    /// The completion channel's fd, readable while events are waiting to be
    /// got; `None` if the CQ has no channel (busy-poll only).
    fn channel_fd(&self) -> Option<RawFd>;

    /// Consume one channel event without blocking: `Ok(true)` if one was got
    /// (it must be acknowledged later), `Ok(false)` if none was waiting.
    fn get_event(&mut self) -> io::Result<bool>;

    /// Acknowledge `count` events got with [`get_event`](Self::get_event).
    fn ack_events(&mut self, count: u32);

    /// The async events of the CQ's device (CQ errors such as an overrun,
    /// port and fatal device events), if nobody consumes them yet: the
    /// caller becomes their consumer. A [`Driver`](crate::Driver) takes them
    /// when it registers the CQ's feed, so that an overrun reaches the EVD
    /// even if the application registered no [`AsyncFeed`](crate::AsyncFeed).
    /// `None` (the default): no device, or its events are taken.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, CqId, soft::{SoftCq, SoftDevice}};
    /// let device = SoftDevice::unheard().unwrap();
    /// let (cq, _hca) = SoftCq::with_device(4, CqId(0), &device).unwrap();
    /// let events = cq.device_events();
    /// assert!(events.is_some());
    /// assert!(cq.device_events().is_none()); // taken, while `events` lives
    /// ```
    fn device_events(&self) -> Option<Box<dyn AsyncEventSource>> {
        None
    }
}

/// A CQ poll failed: the CQ is unusable from now on.
///
/// ```
/// assert_eq!(evd_verbs::PollError::Overrun.to_string(), "completion queue overrun");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollError {
    /// The CQ overran: completions were lost by the provider.
    Overrun,
    /// The provider's poll returned an error (the errno, if it gave one).
    Failed(i32),
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PollError::Overrun => f.write_str("completion queue overrun"),
            PollError::Failed(e) => write!(f, "completion queue poll failed (errno {e})"),
        }
    }
}

impl std::error::Error for PollError {}

/// A source of async events (a device context's async fd, or the software
/// device): readable while events wait; [`next_event`](Self::next_event)
/// takes (and acknowledges) one without blocking.
///
/// ```
/// use evd_verbs::{AsyncEventSource, AsyncEvent, AsyncEventKind, AsyncElement, soft::SoftDevice};
/// let (mut events, device) = SoftDevice::new().unwrap();
/// device.raise(AsyncEvent { kind: AsyncEventKind::PortActive, element: AsyncElement::Port(1) });
/// assert_eq!(events.next_event().unwrap().unwrap().kind, AsyncEventKind::PortActive);
/// assert!(events.next_event().unwrap().is_none());
/// ```
pub trait AsyncEventSource: Send {
    /// The fd to wait on.
    fn fd(&self) -> RawFd;
    /// One event, or `Ok(None)` if none is waiting.
    fn next_event(&mut self) -> io::Result<Option<AsyncEvent>>;
}

impl<S: AsyncEventSource + ?Sized> AsyncEventSource for Box<S> {
    fn fd(&self) -> RawFd {
        (**self).fd()
    }
    fn next_event(&mut self) -> io::Result<Option<AsyncEvent>> {
        (**self).next_event()
    }
}
