//! The source contracts: exactly the operations the feeds use on what they
//! read from, so that real verbs (`ibv`) and the software providers
//! ([`soft`](crate::soft)) are interchangeable.
//!
//! - [`CompletionQueue`]: a CQ with an optional completion channel of its
//!   own (served by a [`Feed`](crate::Feed));
//! - [`SharedChannel`]: one completion channel for many CQs, whose events
//!   name their CQ ([`ChannelEvent`], [`CqKey`]; served by a
//!   [`ChannelFeed`](crate::ChannelFeed));
//! - [`AsyncEventSource`]: a device's async events (served by an
//!   [`AsyncFeed`](crate::AsyncFeed));
//! - [`CmEventSource`]: the connection manager's events (served by a
//!   [`CmFeed`](crate::CmFeed)).
//!
//! A new provider implements these; a new kind of source gets its contract
//! here and its feed in `feed`.

use crate::event::{AsyncEvent, CmEvent, WorkCompletion};
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
///   (in batches: the ack takes a lock) before the CQ is destroyed, and
///   none more: libibverbs' destroy waits until the acknowledged count
///   equals the got count exactly, and frees the CQ once it does, so an
///   acknowledgement too many is a use of a freed CQ. That is why
///   `ack_events` (and [`SharedChannel::ack_unknown`]) are unsafe to call.
///
/// Implementations: [`SoftCq`](crate::soft::SoftCq), and `IbvCq` (feature
/// `ibverbs`).
///
/// ```
/// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
/// let (mut cq, producer) = SoftCq::new(16).unwrap();
/// producer.push(WorkCompletion::new(1)).unwrap();
/// let mut out = [WorkCompletion::default(); 4];
/// assert_eq!(cq.poll(&mut out), Ok(1));
/// assert_eq!(out[0].wr_id, 1);
/// ```
pub trait CompletionQueue: Send {
    /// Poll up to `out.len()` completions into `out`; returns how many.
    ///
    /// # Errors
    ///
    /// [`PollError`]: the CQ overran or the provider's poll failed; the CQ
    /// is not polled again.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, hca) = SoftCq::new(8).unwrap();
    /// hca.push_batch(&[WorkCompletion::new(1), WorkCompletion::new(2), WorkCompletion::new(3)]);
    /// let mut out = [WorkCompletion::default(); 2];
    /// assert_eq!(cq.poll(&mut out), Ok(2)); // oldest first
    /// assert_eq!((out[0].wr_id, out[1].wr_id), (1, 2));
    /// assert_eq!(cq.poll(&mut out), Ok(1));
    /// ```
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, PollError>;

    /// Arm the CQ: the next completion added (with `solicited_only`: the next
    /// solicited completion) produces one channel event. Whether an error
    /// completion fires a solicited-only arm is the provider's choice (mlx5:
    /// yes; rxe: not for send-queue errors; the software CQ: yes): see
    /// [`Feed::solicited_only`](crate::Feed::solicited_only).
    ///
    /// # Errors
    ///
    /// The provider's error (for real verbs, the errno of
    /// `ibv_req_notify_cq`).
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, WorkCompletion, soft::SoftCq};
    /// let (mut cq, hca) = SoftCq::new(8).unwrap();
    /// hca.push(WorkCompletion::new(1)).unwrap();
    /// cq.req_notify(false).unwrap();
    /// assert!(!cq.get_event().unwrap()); // a completion from before the arm does not fire it
    /// hca.push(WorkCompletion::new(2)).unwrap();
    /// assert!(cq.get_event().unwrap());
    /// // SAFETY: one event of `cq` was got above and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// ```
    fn req_notify(&mut self, solicited_only: bool) -> io::Result<()>;

    /// The completion channel's fd, readable while events are waiting to be
    /// got; `None` if the CQ has no channel (busy-poll only).
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, soft::{SoftChannel, SoftCq}};
    /// let (own, _hca) = SoftCq::new(8).unwrap();
    /// assert!(own.channel_fd().is_some());
    /// let (shared, _hca) = SoftChannel::new().unwrap().create_cq(8).unwrap();
    /// assert!(shared.channel_fd().is_none()); // its events come through the channel
    /// ```
    fn channel_fd(&self) -> Option<RawFd>;

    /// Consume one channel event without blocking: `Ok(true)` if one was got
    /// (it must be acknowledged later), `Ok(false)` if none was waiting.
    ///
    /// # Errors
    ///
    /// The provider's error other than "none waiting" (for real verbs,
    /// `ibv_get_cq_event`'s errno other than `EAGAIN`).
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, soft::SoftCq};
    /// let (mut cq, hca) = SoftCq::new(8).unwrap();
    /// assert!(!cq.get_event().unwrap());
    /// hca.inject_spurious_event();
    /// assert!(cq.get_event().unwrap());
    /// // SAFETY: one event of `cq` was got above and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// ```
    fn get_event(&mut self) -> io::Result<bool>;

    /// Acknowledge `count` events got with [`get_event`](Self::get_event)
    /// (or, for a CQ on a [`SharedChannel`], got from that channel for this
    /// CQ).
    ///
    /// # Safety
    /// At least `count` events of this CQ were got and are not acknowledged
    /// yet (here, or with [`SharedChannel::ack_unknown`]). For real verbs,
    /// an acknowledgement beyond the events got lets a concurrent or later
    /// `ibv_destroy_cq` free the CQ while it is still acknowledged on.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, soft::SoftCq};
    /// let (mut cq, hca) = SoftCq::new(8).unwrap();
    /// hca.inject_spurious_event();
    /// hca.inject_spurious_event();
    /// while cq.get_event().unwrap() {}
    /// // SAFETY: the two events were got above and not acknowledged.
    /// unsafe { cq.ack_events(2) }; // one call for the batch
    /// assert_eq!(hca.stats().events_acked, 2);
    /// ```
    ///
    /// Not callable without vouching for the count:
    ///
    /// ```compile_fail
    /// use evd_verbs::{CompletionQueue, soft::SoftCq};
    /// let (mut cq, _hca) = SoftCq::new(8).unwrap();
    /// cq.ack_events(1);
    /// ```
    unsafe fn ack_events(&mut self, count: u32);

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

/// Why a CQ failed (a poll, or a feed's driver gave it up): it is polled no
/// more from then on.
///
/// ```
/// use evd_verbs::PollError;
/// assert_eq!(PollError::Overrun.to_string(), "completion queue overrun");
/// // A real CQ's failed poll is no errno: mlx5 returns -2 for a CQE it
/// // cannot parse, which is not ENOENT.
/// assert_eq!(
///     PollError::Provider(-2).to_string(),
///     "completion queue poll failed (the provider's poll_cq returned -2)"
/// );
/// assert_eq!(
///     PollError::Failed(libc::EIO).to_string(),
///     "completion queue poll failed (errno 5)"
/// );
/// assert_eq!(
///     PollError::ChannelFailed(libc::EIO).to_string(),
///     "the completion queue's channel failed (errno 5)"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PollError {
    /// The CQ overran: completions were lost by the provider. For sources
    /// of your own whose poll can tell: neither a real CQ's poll (`IbvCq`,
    /// feature `ibverbs`) nor the software CQ's returns it. They report an
    /// overrun as their device's `CqError` async event, and the CQ goes on
    /// being polled.
    Overrun,
    /// The provider's poll failed with this errno (the software providers,
    /// and sources of your own that have one).
    Failed(i32),
    /// A real CQ's poll (`ibv_poll_cq`) returned this negative value.
    /// Verbs gives no errno for a failed poll, and the value is the
    /// provider's own (mlx5 and mlx4 return -2 for a completion they cannot
    /// parse): it is kept as returned, not read as an errno.
    Provider(i32),
    /// Arming the CQ (`req_notify`) failed (the errno): it cannot be slept
    /// on. A [`ChannelFeed`](crate::ChannelFeed) gives such a CQ up at once
    /// (the CQs it shares a channel with go on); a [`Driver`](crate::Driver)
    /// retries a lone [`Feed`](crate::Feed)'s arm once, and gives the feed
    /// up if it fails again within [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW).
    ArmFailed(i32),
    /// The CQ's completion channel failed (the errno): getting its event
    /// (`ibv_get_cq_event`), or the [`Driver`](crate::Driver)'s poll of its
    /// fd. A driver retries once, and gives the feed up if it fails again
    /// within [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW).
    ChannelFailed(i32),
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PollError::Overrun => f.write_str("completion queue overrun"),
            PollError::Failed(e) => write!(f, "completion queue poll failed (errno {e})"),
            PollError::Provider(n) => write!(
                f,
                "completion queue poll failed (the provider's poll_cq returned {n})"
            ),
            PollError::ArmFailed(e) => write!(f, "arming the completion queue failed (errno {e})"),
            PollError::ChannelFailed(e) => {
                write!(f, "the completion queue's channel failed (errno {e})")
            }
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
/// device.raise(AsyncEvent::new(AsyncEventKind::PortActive, AsyncElement::Port(1)));
/// assert_eq!(events.next_event().unwrap().unwrap().kind, AsyncEventKind::PortActive);
/// assert!(events.next_event().unwrap().is_none());
/// ```
pub trait AsyncEventSource: Send {
    /// The fd to wait on.
    ///
    /// ```
    /// use evd_verbs::{AsyncEventSource, soft::SoftDevice};
    /// let (events, _device) = SoftDevice::new().unwrap();
    /// assert!(events.fd() >= 0);
    /// ```
    fn fd(&self) -> RawFd;
    /// One event, or `Ok(None)` if none is waiting.
    ///
    /// # Errors
    ///
    /// The source's error other than "none waiting" (for real verbs,
    /// `ibv_get_async_event`'s errno other than `EAGAIN`).
    ///
    /// ```
    /// use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncEventSource, soft::SoftDevice};
    /// let (mut events, device) = SoftDevice::new().unwrap();
    /// assert!(events.next_event().unwrap().is_none());
    /// device.raise(AsyncEvent::new(AsyncEventKind::DeviceFatal, AsyncElement::Device));
    /// assert_eq!(events.next_event().unwrap().unwrap().kind, AsyncEventKind::DeviceFatal);
    /// ```
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

/// Where connection-manager events come from: an event channel whose fd is
/// readable while events wait (`ibv::CmChannel`, or [`SoftCm`](crate::soft::SoftCm)).
///
/// ```
/// use evd_verbs::{CmEventSource, CmEvent, CmEventKind, soft::SoftCm};
/// let (mut events, cm) = SoftCm::new().unwrap();
/// cm.raise(CmEvent::new(CmEventKind::Established, evd_verbs::CmToken(0)));
/// assert_eq!(events.next_event().unwrap().unwrap().kind, CmEventKind::Established);
/// assert!(events.next_event().unwrap().is_none());
/// ```
pub trait CmEventSource: Send {
    /// The fd, readable while events wait.
    ///
    /// ```
    /// use evd_verbs::{CmEventSource, soft::SoftCm};
    /// let (events, _cm) = SoftCm::new().unwrap();
    /// assert!(events.fd() >= 0);
    /// ```
    fn fd(&self) -> RawFd;
    /// The next event, copied out and acknowledged; `None` if none waits.
    ///
    /// # Errors
    ///
    /// The channel's error other than "none waiting" (for real verbs,
    /// `rdma_get_cm_event`'s errno other than `EAGAIN`).
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmEventSource, CmToken, soft::SoftCm};
    /// let (mut events, cm) = SoftCm::new().unwrap();
    /// assert!(events.next_event().unwrap().is_none());
    /// cm.raise(CmEvent::new(CmEventKind::TimewaitExit, CmToken(1)));
    /// assert_eq!(events.next_event().unwrap().unwrap().kind, CmEventKind::TimewaitExit);
    /// ```
    fn next_event(&mut self) -> io::Result<Option<CmEvent>>;
}

impl<S: CmEventSource + ?Sized> CmEventSource for Box<S> {
    fn fd(&self) -> RawFd {
        (**self).fd()
    }
    fn next_event(&mut self) -> io::Result<Option<CmEvent>> {
        (**self).next_event()
    }
}

/// The name of a CQ on a [`SharedChannel`], as its events carry it (for
/// real verbs, the `ibv_cq` address `ibv_get_cq_event` returns).
///
/// ```
/// let k = evd_verbs::CqKey(0x1000);
/// assert_eq!(k.0, 0x1000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqKey(pub usize);

/// One event got from a [`SharedChannel`]: the CQ it is for. It must be
/// acknowledged once, on that CQ ([`CompletionQueue::ack_events`]) or with
/// [`SharedChannel::ack_unknown`]; it is neither `Clone` nor `Copy`. One
/// dropped unacknowledged stays owed until its CQ is destroyed:
/// `ibv_destroy_cq` waits for every event it reported, so the CQ's destroy
/// acknowledges what its channel got for it and nobody acknowledged (the
/// `ibv` module's `CompletionChannel` counts them for that; a
/// `SharedChannel` of your own must too, or that destroy waits for ever).
/// The [`soft`](crate::soft) provider's CQs do not: a test double, they
/// report the missing acknowledgement instead (`SoftCq::destroy` refuses,
/// its drop panics).
/// One got while its CQ's destroy is under way (a clone of the channel on
/// another thread) is not counted: acknowledge it, or that destroy waits.
///
/// ```
/// use evd_verbs::{SharedChannel, soft::SoftChannel};
/// let mut channel = SoftChannel::new().unwrap();
/// assert!(channel.get_cq_event().unwrap().is_none());
/// ```
///
/// ```compile_fail
/// fn assert_clone<T: Clone>() {}
/// assert_clone::<evd_verbs::ChannelEvent>();
/// ```
///
/// ```compile_fail
/// fn assert_copy<T: Copy>() {}
/// assert_copy::<evd_verbs::ChannelEvent>();
/// ```
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an event dropped unacknowledged stays owed until its CQ's destroy"]
pub struct ChannelEvent {
    cq: CqKey,
    /// The provider's own mark (the `ibv` channel's: which registration of
    /// the CQ counted it, 0 if none did).
    tag: u64,
}

impl ChannelEvent {
    /// An event for the CQ named `cq`.
    ///
    /// # Safety
    /// One channel event of the live CQ `cq` names was just got and is
    /// not acknowledged yet: [`SharedChannel::ack_unknown`] of the result
    /// acknowledges it (for real verbs, with `ibv_ack_cq_events` on that
    /// address).
    ///
    /// ```
    /// use evd_verbs::{ChannelEvent, CqKey};
    /// // SAFETY: never acknowledged; only its key is looked at.
    /// let ev = unsafe { ChannelEvent::new(CqKey(1)) };
    /// assert_eq!(ev.cq(), CqKey(1));
    /// ```
    pub unsafe fn new(cq: CqKey) -> ChannelEvent {
        ChannelEvent { cq, tag: 0 }
    }

    /// As [`ChannelEvent::new`], with the provider's mark.
    ///
    /// # Safety
    /// As [`ChannelEvent::new`].
    #[cfg_attr(not(feature = "ibverbs"), allow(dead_code))]
    pub(crate) unsafe fn tagged(cq: CqKey, tag: u64) -> ChannelEvent {
        ChannelEvent { cq, tag }
    }

    /// The provider's mark ([`ChannelEvent::tagged`]).
    #[cfg_attr(not(feature = "ibverbs"), allow(dead_code))]
    pub(crate) fn tag(&self) -> u64 {
        self.tag
    }

    /// The CQ the event is for.
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, SharedChannel, soft::SoftChannel};
    /// let mut channel = SoftChannel::new().unwrap();
    /// let (mut cq, hca) = channel.create_cq(4).unwrap();
    /// hca.inject_spurious_event();
    /// let ev = channel.get_cq_event().unwrap().unwrap();
    /// assert_eq!(Some(ev.cq()), channel.key_of(&cq));
    /// // SAFETY: one event of `cq` was got above and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// ```
    pub fn cq(&self) -> CqKey {
        self.cq
    }
}

/// A completion channel shared by many CQs: one fd, events that name their
/// CQ. Implemented by `ibv::CompletionChannel` (feature `ibverbs`) and by
/// [`SoftChannel`](crate::soft::SoftChannel).
///
/// The CQs on it get their events only through the channel: their own
/// [`CompletionQueue::get_event`] finds none. Each event got must be
/// acknowledged once: on its CQ with [`CompletionQueue::ack_events`] (in
/// batches) before that CQ is destroyed, or, for a CQ the caller does not
/// hold, with [`ack_unknown`](Self::ack_unknown).
///
/// ```
/// use evd_verbs::{CompletionQueue, SharedChannel, WorkCompletion, soft::SoftChannel};
/// let mut channel = SoftChannel::new().unwrap();
/// let (mut cq, hca) = channel.create_cq(4).unwrap();
/// cq.req_notify(false).unwrap();
/// hca.push(WorkCompletion::default()).unwrap();
/// let ev = channel.get_cq_event().unwrap().expect("an event");
/// assert_eq!(Some(ev.cq()), channel.key_of(&cq));
/// // SAFETY: one event of `cq` was got above and not acknowledged.
/// unsafe { cq.ack_events(1) };
/// assert_eq!(hca.stats().events_acked, 1);
/// ```
pub trait SharedChannel: Send {
    /// The CQs made on it.
    type Cq: CompletionQueue;

    /// The fd, readable while events wait.
    ///
    /// ```
    /// use evd_verbs::{SharedChannel, soft::SoftChannel};
    /// let channel = SoftChannel::new().unwrap();
    /// assert!(channel.fd() >= 0);
    /// ```
    fn fd(&self) -> RawFd;

    /// Take one event without blocking: the CQ it names, or `Ok(None)` if
    /// none waits.
    ///
    /// # Errors
    ///
    /// The channel's error other than "none waiting" (for real verbs,
    /// `ibv_get_cq_event`'s errno other than `EAGAIN`).
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, SharedChannel, WorkCompletion, soft::SoftChannel};
    /// let mut channel = SoftChannel::new().unwrap();
    /// let (mut cq, hca) = channel.create_cq(4).unwrap();
    /// assert!(channel.get_cq_event().unwrap().is_none());
    /// cq.req_notify(false).unwrap();
    /// hca.push(WorkCompletion::new(1)).unwrap();
    /// assert!(channel.get_cq_event().unwrap().is_some());
    /// // SAFETY: one event of `cq` was got above and not acknowledged.
    /// unsafe { cq.ack_events(1) };
    /// ```
    fn get_cq_event(&mut self) -> io::Result<Option<ChannelEvent>>;

    /// The key the events of `cq` carry, or `None` if `cq` is not on this
    /// channel.
    ///
    /// ```
    /// use evd_verbs::{SharedChannel, soft::{SoftChannel, SoftCq}};
    /// let channel = SoftChannel::new().unwrap();
    /// let (a, _) = channel.create_cq(4).unwrap();
    /// let (b, _) = channel.create_cq(4).unwrap();
    /// assert_ne!(channel.key_of(&a), channel.key_of(&b));
    /// let (elsewhere, _) = SoftCq::new(4).unwrap();
    /// assert_eq!(channel.key_of(&elsewhere), None);
    /// ```
    fn key_of(&self, cq: &Self::Cq) -> Option<CqKey>;

    /// Acknowledge an event whose CQ the caller does not hold.
    ///
    /// # Safety
    /// `event` was got from this channel (not another, of this or another
    /// provider: its key is an address this channel's provider acknowledges
    /// on), and its CQ does not acknowledge it too
    /// ([`CompletionQueue::ack_events`]). (A provider whose CQ's destroy
    /// acknowledges what its channel got for it, as the `ibv` module's
    /// does, skips here an event that destroy acknowledged already.)
    ///
    /// ```
    /// use evd_verbs::{CompletionQueue, SharedChannel, soft::SoftChannel};
    /// let mut channel = SoftChannel::new().unwrap();
    /// let (cq, hca) = channel.create_cq(4).unwrap();
    /// hca.inject_spurious_event();
    /// let ev = channel.get_cq_event().unwrap().unwrap();
    /// // SAFETY: got from this channel just above; `cq` never acknowledges it.
    /// unsafe { channel.ack_unknown(ev) }; // as if `cq` were not held here
    /// assert_eq!(channel.stats().acked_unknown, 1);
    /// assert!(cq.destroy().is_ok()); // nothing left unacknowledged
    /// ```
    unsafe fn ack_unknown(&mut self, event: ChannelEvent);
}
