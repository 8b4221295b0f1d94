//! Device async events (`struct ibv_async_event`): what happened, and to
//! which object.

use super::CqId;

/// An asynchronous event (`struct ibv_async_event`): a CQ error or overrun,
/// a QP or SRQ error, a port or device change.
///
/// ```
/// use evd_verbs::{AsyncEvent, AsyncEventKind, AsyncElement, CqId};
/// let ev = AsyncEvent::new(AsyncEventKind::CqError, AsyncElement::Cq(CqId(3)));
/// assert!(ev.kind.is_error());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AsyncEvent {
    /// What happened.
    pub kind: AsyncEventKind,
    /// What it happened to.
    pub element: AsyncElement,
}

impl AsyncEvent {
    /// An event of `kind` about `element`.
    ///
    /// ```
    /// use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind};
    /// let ev = AsyncEvent::new(AsyncEventKind::PortActive, AsyncElement::Port(1));
    /// assert_eq!(ev.element, AsyncElement::Port(1));
    /// ```
    #[must_use]
    pub const fn new(kind: AsyncEventKind, element: AsyncElement) -> Self {
        AsyncEvent { kind, element }
    }
}

/// The kind of an async event (`enum ibv_event_type`). New kinds of
/// libibverbs may get variants of their own: a `match` needs a `_` arm.
///
/// ```
/// assert_eq!(evd_verbs::AsyncEventKind::from_raw(9), evd_verbs::AsyncEventKind::PortActive);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncEventKind {
    /// `IBV_EVENT_CQ_ERR`: the CQ lost completions, typically to an
    /// overrun. What becomes of the CQ is the provider's: rxe (and the
    /// software CQ) raise one per completion lost and the CQ goes on, its
    /// polls delivering what it holds. Also posted by a feed whose CQ poll
    /// fails.
    CqError,
    /// `IBV_EVENT_QP_FATAL`.
    QpFatal,
    /// `IBV_EVENT_QP_REQ_ERR`.
    QpRequestError,
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    QpAccessError,
    /// `IBV_EVENT_COMM_EST`.
    CommEstablished,
    /// `IBV_EVENT_SQ_DRAINED`.
    SqDrained,
    /// `IBV_EVENT_PATH_MIG`.
    PathMigrated,
    /// `IBV_EVENT_PATH_MIG_ERR`.
    PathMigrationError,
    /// `IBV_EVENT_DEVICE_FATAL`.
    DeviceFatal,
    /// `IBV_EVENT_PORT_ACTIVE`.
    PortActive,
    /// `IBV_EVENT_PORT_ERR`.
    PortError,
    /// `IBV_EVENT_LID_CHANGE`.
    LidChange,
    /// `IBV_EVENT_PKEY_CHANGE`.
    PkeyChange,
    /// `IBV_EVENT_SM_CHANGE`.
    SmChange,
    /// `IBV_EVENT_SRQ_ERR`.
    SrqError,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    SrqLimitReached,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`.
    QpLastWqeReached,
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    ClientReregister,
    /// `IBV_EVENT_GID_CHANGE`.
    GidChange,
    /// `IBV_EVENT_WQ_FATAL`.
    WqFatal,
    /// Not from libibverbs: the feed's source of async events failed for
    /// good (reading an event failed twice within
    /// [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW), or a
    /// [`Driver`](crate::Driver) gave the feed up because waiting on its fd kept failing), so this is the
    /// last event of that feed: no later async event of the device reaches
    /// the EVD through it. Element [`AsyncElement::Device`]; the errno is
    /// the feed's [`AsyncFeed::failure`](crate::AsyncFeed::failure).
    SourceFailed,
    /// A value this crate does not know.
    Other(u32),
}

impl AsyncEventKind {
    /// Map an `ibv_event_type` number.
    ///
    /// ```
    /// use evd_verbs::AsyncEventKind;
    /// assert_eq!(AsyncEventKind::from_raw(0), AsyncEventKind::CqError);
    /// assert_eq!(AsyncEventKind::from_raw(99), AsyncEventKind::Other(99));
    /// ```
    pub fn from_raw(v: u32) -> Self {
        use AsyncEventKind::*;
        const KINDS: [AsyncEventKind; 20] = [
            CqError,
            QpFatal,
            QpRequestError,
            QpAccessError,
            CommEstablished,
            SqDrained,
            PathMigrated,
            PathMigrationError,
            DeviceFatal,
            PortActive,
            PortError,
            LidChange,
            PkeyChange,
            SmChange,
            SrqError,
            SrqLimitReached,
            QpLastWqeReached,
            ClientReregister,
            GidChange,
            WqFatal,
        ];
        KINDS.get(v as usize).copied().unwrap_or(Other(v))
    }

    /// True for the kinds that report a failure (as opposed to a state
    /// change such as `PortActive` or `CommEstablished`).
    ///
    /// ```
    /// use evd_verbs::AsyncEventKind;
    /// assert!(AsyncEventKind::DeviceFatal.is_error());
    /// assert!(!AsyncEventKind::PortActive.is_error());
    /// ```
    pub fn is_error(self) -> bool {
        use AsyncEventKind::*;
        matches!(
            self,
            CqError
                | QpFatal
                | QpRequestError
                | QpAccessError
                | PathMigrationError
                | DeviceFatal
                | PortError
                | SrqError
                | WqFatal
                | SourceFailed
        )
    }
}

/// The object an async event is about (more kinds of object may come: a
/// `match` needs a `_` arm).
///
/// ```
/// use evd_verbs::{AsyncElement, CqId};
/// assert_ne!(AsyncElement::Cq(CqId(1)), AsyncElement::Qp(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncElement {
    /// A CQ, by its id: the one its feed was given, or for real verbs the
    /// one it was made or wrapped with on its context (`ibv::IbvCq`);
    /// `CqId(u32::MAX)` if the CQ is not known.
    Cq(CqId),
    /// A QP, by number.
    Qp(u32),
    /// A shared receive queue.
    Srq,
    /// A port, by number.
    Port(u8),
    /// The whole device.
    Device,
    /// A work queue.
    Wq,
}
