//! Connection-manager events (`struct rdma_cm_event`), copied out of
//! librdmacm so that they can wait in an EVD beside completions: the kind,
//! the identifier they concern (by the token its owner gave it), the status
//! and the private data.
//!
//! The types here need no RDMA library: the real source is `ibv::CmChannel`
//! (feature `ibverbs`), and [`SoftCm`](crate::soft::SoftCm) raises them in
//! software for tests.

use std::fmt;

/// The largest private data a connection-manager event carries: its length
/// is a `u8` (an IB CM REP carries 196 bytes, a connect request at most 56
/// through rdma_cm; iWARP's MPA up to 255).
pub const PRIVATE_DATA_MAX: usize = 255;

/// The caller's name for a connection identifier (`rdma_cm_id`), carried by
/// every event about it. An identifier made by a listener for an incoming
/// request gets a fresh token from the channel.
///
/// ```
/// assert!(evd_verbs::CmToken(1) < evd_verbs::CmToken(2));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmToken(pub u64);

impl CmToken {
    /// The token of an event about no identifier
    /// ([`CmEventKind::SourceFailed`]); never an identifier's (the ones a
    /// caller makes are below `ibv::CmToken::INCOMING`, 2^63, and the
    /// requests' count up from there, one count for the process).
    ///
    /// ```
    /// assert_eq!(evd_verbs::CmToken::NONE, evd_verbs::CmToken(u64::MAX));
    /// ```
    pub const NONE: CmToken = CmToken(u64::MAX);
}

/// What happened to a connection identifier (`enum rdma_cm_event_type`).
/// New kinds of librdmacm may get variants of their own: a `match` needs a
/// `_` arm.
///
/// ```
/// use evd_verbs::CmEventKind;
/// assert_eq!(CmEventKind::from_raw(9), CmEventKind::Established);
/// assert_eq!(CmEventKind::from_raw(99), CmEventKind::Other(99));
/// assert!(CmEventKind::Rejected.is_failure());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CmEventKind {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`: resolve the route next.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR`: the address did not resolve.
    AddrError,
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`: connect next.
    RouteResolved,
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`: a listener got a request; the new
    /// identifier is taken from the channel by the event's token.
    ConnectRequest,
    /// `RDMA_CM_EVENT_CONNECT_RESPONSE`: the passive side accepted a
    /// connection whose QP the caller transitions itself; finish it with
    /// `establish`.
    ConnectResponse,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError,
    /// `RDMA_CM_EVENT_UNREACHABLE`: the remote end did not answer.
    Unreachable,
    /// `RDMA_CM_EVENT_REJECTED`: the remote end rejected the request
    /// (`status` holds the reason, private data the rejecter's words).
    Rejected,
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established,
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`: the device is going away; destroy
    /// everything made on it.
    DeviceRemoval,
    /// `RDMA_CM_EVENT_MULTICAST_JOIN`.
    MulticastJoin,
    /// `RDMA_CM_EVENT_MULTICAST_ERROR`.
    MulticastError,
    /// `RDMA_CM_EVENT_ADDR_CHANGE`.
    AddrChange,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`: the QP may be reused.
    TimewaitExit,
    /// Not from librdmacm: the feed's event channel failed for good
    /// (reading an event failed twice within
    /// [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW), or a
    /// [`Driver`](crate::Driver) gave the feed up because waiting on its fd kept failing), so this is the last
    /// event of that feed: no later connection event reaches the EVD
    /// through it. Its `id` is [`CmToken::NONE`], its `status` the negative
    /// errno. [`CmEventKind::to_raw`] gives `u32::MAX` for it, and
    /// [`CmEventKind::from_raw`] this kind for `u32::MAX`.
    SourceFailed,
    /// A kind newer than this crate (from [`CmEventKind::from_raw`], never
    /// `u32::MAX`).
    Other(u32),
}

impl CmEventKind {
    /// From the C enum value.
    ///
    /// ```
    /// use evd_verbs::CmEventKind;
    /// assert_eq!(CmEventKind::from_raw(4), CmEventKind::ConnectRequest);
    /// assert_eq!(CmEventKind::from_raw(1000), CmEventKind::Other(1000));
    /// assert_eq!(CmEventKind::from_raw(u32::MAX), CmEventKind::SourceFailed);
    /// ```
    pub fn from_raw(v: u32) -> Self {
        use CmEventKind::*;
        match v {
            0 => AddrResolved,
            1 => AddrError,
            2 => RouteResolved,
            3 => RouteError,
            4 => ConnectRequest,
            5 => ConnectResponse,
            6 => ConnectError,
            7 => Unreachable,
            8 => Rejected,
            9 => Established,
            10 => Disconnected,
            11 => DeviceRemoval,
            12 => MulticastJoin,
            13 => MulticastError,
            14 => AddrChange,
            15 => TimewaitExit,
            u32::MAX => SourceFailed,
            other => Other(other),
        }
    }

    /// The C enum value.
    ///
    /// ```
    /// use evd_verbs::CmEventKind;
    /// for v in (0..20).chain([u32::MAX - 1, u32::MAX]) {
    ///     assert_eq!(CmEventKind::from_raw(v).to_raw(), v);
    /// }
    /// ```
    pub fn to_raw(self) -> u32 {
        use CmEventKind::*;
        match self {
            AddrResolved => 0,
            AddrError => 1,
            RouteResolved => 2,
            RouteError => 3,
            ConnectRequest => 4,
            ConnectResponse => 5,
            ConnectError => 6,
            Unreachable => 7,
            Rejected => 8,
            Established => 9,
            Disconnected => 10,
            DeviceRemoval => 11,
            MulticastJoin => 12,
            MulticastError => 13,
            AddrChange => 14,
            TimewaitExit => 15,
            SourceFailed => u32::MAX,
            Other(v) => v,
        }
    }

    /// An attempt that ended the connection (or its setup) in failure.
    ///
    /// ```
    /// use evd_verbs::CmEventKind;
    /// assert!(CmEventKind::Unreachable.is_failure());
    /// assert!(!CmEventKind::Established.is_failure());
    /// ```
    pub fn is_failure(self) -> bool {
        use CmEventKind::*;
        matches!(
            self,
            AddrError
                | RouteError
                | ConnectError
                | Unreachable
                | Rejected
                | DeviceRemoval
                | MulticastError
                | SourceFailed
        )
    }
}

/// Private data of a connection-manager message, copied out of the event
/// (at most [`PRIVATE_DATA_MAX`] bytes, inline: no allocation).
///
/// ```
/// use evd_verbs::PrivateData;
/// let p = PrivateData::new(b"hello").unwrap();
/// assert_eq!(p.as_bytes(), b"hello");
/// assert!(PrivateData::new(&[0; 256]).is_none());
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    len: u8,
    bytes: [u8; PRIVATE_DATA_MAX],
}

impl PrivateData {
    /// A copy of `data`, or `None` if it is longer than [`PRIVATE_DATA_MAX`].
    ///
    /// ```
    /// use evd_verbs::{PrivateData, PRIVATE_DATA_MAX};
    /// assert!(PrivateData::new(&[7; PRIVATE_DATA_MAX]).is_some());
    /// assert!(PrivateData::new(&[7; PRIVATE_DATA_MAX + 1]).is_none());
    /// ```
    pub fn new(data: &[u8]) -> Option<Self> {
        if data.len() > PRIVATE_DATA_MAX {
            return None;
        }
        let mut bytes = [0; PRIVATE_DATA_MAX];
        bytes[..data.len()].copy_from_slice(data);
        Some(PrivateData {
            len: data.len() as u8,
            bytes,
        })
    }

    /// The bytes.
    ///
    /// ```
    /// let p = evd_verbs::PrivateData::new(&[1, 2, 3]).unwrap();
    /// assert_eq!(p.as_bytes(), [1, 2, 3]);
    /// ```
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Default for PrivateData {
    fn default() -> Self {
        PrivateData {
            len: 0,
            bytes: [0; PRIVATE_DATA_MAX],
        }
    }
}

impl fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateData({:02x?})", self.as_bytes())
    }
}

/// A connection-manager event, copied out and acknowledged.
///
/// Outside this crate it is built with [`new`](CmEvent::new) and the
/// `with_` setters (a software CM's, a test's), so that it may gain fields.
///
/// ```
/// use evd_verbs::{CmEvent, CmEventKind, CmToken};
/// let ev = CmEvent::new(CmEventKind::Established, CmToken(7));
/// assert_eq!(ev.listener, None);
/// ```
///
/// A struct literal does not compile outside the crate:
///
/// ```compile_fail,E0639
/// use evd_verbs::{CmEvent, CmEventKind, CmToken};
/// let ev = CmEvent { kind: CmEventKind::Established, id: CmToken(7), status: 0, ..Default::default() };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CmEvent {
    /// What happened.
    pub kind: CmEventKind,
    /// The identifier it happened to. For a [`CmEventKind::ConnectRequest`]:
    /// the new identifier, to take from the channel.
    pub id: CmToken,
    /// For a [`CmEventKind::ConnectRequest`]: the listener that got it.
    pub listener: Option<CmToken>,
    /// The event's status: 0, a negative errno, or (for
    /// [`CmEventKind::Rejected`]) the transport's reject reason.
    pub status: i32,
    /// The peer's QP number, on connect requests and responses (0 else).
    pub peer_qp_num: u32,
    /// The private data the peer sent (connect request, accept, reject).
    pub private_data: PrivateData,
}

impl CmEvent {
    /// An event of `kind` for the identifier `id`: no listener, status 0,
    /// no peer QP, no private data.
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmToken};
    /// let ev = CmEvent::new(CmEventKind::Disconnected, CmToken(2));
    /// assert_eq!((ev.kind, ev.id, ev.status), (CmEventKind::Disconnected, CmToken(2), 0));
    /// ```
    #[must_use]
    pub fn new(kind: CmEventKind, id: CmToken) -> Self {
        CmEvent {
            kind,
            id,
            ..CmEvent::default()
        }
    }

    /// With the listener that got a connect request.
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmToken};
    /// let ev = CmEvent::new(CmEventKind::ConnectRequest, CmToken(5)).with_listener(CmToken(1));
    /// assert_eq!(ev.listener, Some(CmToken(1)));
    /// ```
    #[must_use]
    pub fn with_listener(mut self, listener: CmToken) -> Self {
        self.listener = Some(listener);
        self
    }

    /// With `status` (a negative errno, or a reject reason).
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmToken};
    /// let ev = CmEvent::new(CmEventKind::Rejected, CmToken(5)).with_status(28);
    /// assert_eq!(ev.status, 28);
    /// ```
    #[must_use]
    pub fn with_status(mut self, status: i32) -> Self {
        self.status = status;
        self
    }

    /// With the peer's QP number.
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmToken};
    /// let ev = CmEvent::new(CmEventKind::ConnectResponse, CmToken(5)).with_peer_qp_num(0x11);
    /// assert_eq!(ev.peer_qp_num, 0x11);
    /// ```
    #[must_use]
    pub fn with_peer_qp_num(mut self, peer_qp_num: u32) -> Self {
        self.peer_qp_num = peer_qp_num;
        self
    }

    /// With the peer's private data.
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmToken, PrivateData};
    /// let data = PrivateData::new(b"hi").unwrap();
    /// let ev = CmEvent::new(CmEventKind::ConnectRequest, CmToken(5)).with_private_data(data);
    /// assert_eq!(ev.private_data.as_bytes(), b"hi");
    /// ```
    #[must_use]
    pub fn with_private_data(mut self, private_data: PrivateData) -> Self {
        self.private_data = private_data;
        self
    }
}

impl Default for CmEvent {
    fn default() -> Self {
        CmEvent {
            // A kind no librdmacm event has, and not `SourceFailed`'s.
            kind: CmEventKind::Other(u32::MAX - 1),
            id: CmToken::default(),
            listener: None,
            status: 0,
            peer_qp_num: 0,
            private_data: PrivateData::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_and_each_setter_set_their_own_fields() {
        let data = PrivateData::new(b"pd").unwrap();
        let ev = CmEvent::new(CmEventKind::ConnectRequest, CmToken(2))
            .with_listener(CmToken(1))
            .with_status(-3)
            .with_peer_qp_num(4)
            .with_private_data(data);
        assert_eq!(
            ev,
            CmEvent {
                kind: CmEventKind::ConnectRequest,
                id: CmToken(2),
                listener: Some(CmToken(1)),
                status: -3,
                peer_qp_num: 4,
                private_data: data,
            }
        );
    }
}
