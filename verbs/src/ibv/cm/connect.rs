//! Connecting a [`CmId`]: what a connect or accept offers the peer
//! ([`CmConnParams`]), and the calls that move the caller's QP with the
//! attributes librdmacm computes (connect, establish, accept), reject and
//! disconnect.

#[cfg(doc)]
use super::CmChannel;
use super::CmId;
#[cfg(doc)]
use crate::event::CmEventKind;
use crate::event::CmToken;
use crate::ibv::*;
use std::io;

/// What a connect or accept offers the peer (`struct rdma_conn_param`).
///
/// The default offers no private data, one RDMA read or atomic in flight
/// each way, and 7 retries of each kind. It may gain fields: outside this
/// crate it is built from [`Default`] and its fields set.
///
/// ```
/// use evd_verbs::ibv::CmConnParams;
/// let mut params = CmConnParams::default();
/// params.private_data = b"hello";
/// assert_eq!((params.initiator_depth, params.retry_count), (1, 7));
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CmConnParams<'a> {
    /// Private data for the peer (at most 56 bytes on a connect, 196 on an
    /// accept, over InfiniBand and RoCE).
    pub private_data: &'a [u8],
    /// RDMA reads and atomics this side accepts in flight. On an accept
    /// the QP is given this many (`max_dest_rd_atomic`), as librdmacm does
    /// for the QPs it owns; `u8::MAX` leaves it what the request asked.
    pub responder_resources: u8,
    /// RDMA reads and atomics this side issues in flight. On an accept the
    /// QP is held to this many (`max_rd_atomic`); `u8::MAX` leaves it what
    /// the request offered.
    pub initiator_depth: u8,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// Receiver-not-ready retries (0..=7; 7 is infinite).
    pub rnr_retry_count: u8,
}

impl Default for CmConnParams<'_> {
    fn default() -> Self {
        CmConnParams {
            private_data: &[],
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

impl CmConnParams<'_> {
    fn raw(&self, qp: &QueuePair) -> io::Result<ffi::rdma_conn_param> {
        let len = u8::try_from(self.private_data.len()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "private data over 255 bytes")
        })?;
        Ok(ffi::rdma_conn_param {
            private_data: self.private_data.as_ptr().cast(),
            private_data_len: len,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num: qp.qp_num(),
        })
    }
}

/// After a refused `rdma_accept`, or an establish that failed past RTR: move
/// `qp` to ERROR, as librdmacm does for the QPs it owns, rather than leave
/// it ready to receive (or send) from a peer the connection never reached.
/// Its receives are flushed with error completions; a new connection needs
/// it reset ([`QueuePair::reset`]). A refusal of this move is not
/// reported: the step's own error is.
fn to_error(qp: &mut QueuePair) {
    let mut attr: ffi::ibv_qp_attr = zeroed();
    attr.qp_state = ffi::ibv_qp_state::IBV_QPS_ERR;
    let _ = qp.modify(&mut attr, ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32);
}

impl CmId {
    /// Move `qp` to `state` with the attributes librdmacm computes for
    /// this connection (`rdma_init_qp_attr`).
    fn transition(&self, qp: &mut QueuePair, state: ffi::ibv_qp_state::Type) -> io::Result<()> {
        self.transition_with(qp, state, |_| {})
    }

    /// [`transition`](CmId::transition), with `adjust` applied to the
    /// computed attributes first.
    fn transition_with(
        &self,
        qp: &mut QueuePair,
        state: ffi::ibv_qp_state::Type,
        adjust: impl FnOnce(&mut ffi::ibv_qp_attr),
    ) -> io::Result<()> {
        let mut attr: ffi::ibv_qp_attr = zeroed();
        attr.qp_state = state;
        let mut mask = 0;
        // SAFETY: a live id and live out-parameters.
        check(unsafe { ffi::rdma_init_qp_attr(self.id, &mut attr, &mut mask) })?;
        adjust(&mut attr);
        qp.modify(&mut attr, mask)
    }

    /// Request a connection for `qp` (after [`CmEventKind::RouteResolved`]).
    /// `qp` is in INIT, on this identifier's device. The peer's answer is
    /// [`CmEventKind::ConnectResponse`] (then call
    /// [`establish`](CmId::establish)), [`CmEventKind::Rejected`] or
    /// [`CmEventKind::Unreachable`]. This needs a librdmacm that has
    /// `rdma_establish` (rdma-core releases from 2019 on): an older one
    /// answers a connect of an identifier without a QP of its own itself,
    /// reporting [`CmEventKind::Established`] with `qp` still in INIT.
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) before the identifier
    /// has a device or while its address is being resolved (its
    /// [`CmEventKind::AddrResolved`] not read from the channel yet: nothing
    /// is done then) or if `params.private_data` is over 255 bytes;
    /// the errno of moving `qp` to INIT (`rdma_init_qp_attr`,
    /// `ibv_modify_qp`) or of `rdma_connect`.
    ///
    /// ```no_run
    /// # fn next(events: &mut evd_verbs::ibv::CmEvents) -> evd_verbs::CmEvent {
    /// #     use evd_verbs::CmEventSource;
    /// #     loop { if let Some(ev) = events.next_event().unwrap() { return ev; } }
    /// # }
    /// use evd_verbs::ibv::{CmChannel, CmConnParams, CmId, Context};
    /// use evd_verbs::{CmEventKind, CmToken, CqId};
    /// use std::time::Duration;
    /// let (mut events, channel) = CmChannel::new()?;
    /// let id = CmId::new(&channel, CmToken(1))?;
    /// id.resolve_addr("10.0.0.2:7471".parse()?, Duration::from_secs(2))?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::AddrResolved);
    /// id.resolve_route(Duration::from_secs(2))?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::RouteResolved);
    /// let ctx = Context::open(id.device_name().as_deref())?;
    /// let cq = ctx.create_cq(16, CqId(0))?;
    /// let mut qp = ctx.alloc_pd()?.create_rc_qp(&cq, &cq, &Default::default(), id.port_num())?;
    /// let mut params = CmConnParams::default();
    /// params.private_data = b"hello";
    /// id.connect(&mut qp, &params)?;
    /// match next(&mut events).kind {
    ///     CmEventKind::ConnectResponse => id.establish(&mut qp)?,
    ///     other => panic!("not connected: {other:?}"),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connect(&self, qp: &mut QueuePair, params: &CmConnParams<'_>) -> io::Result<()> {
        self.on_a_device()?;
        // Checked before the QP is touched.
        let mut raw = params.raw(qp)?;
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_INIT)?;
        // SAFETY: a live id; the parameters and private data live across
        // the call (librdmacm copies them).
        check(unsafe { ffi::rdma_connect(self.id, &mut raw) })
    }

    /// On [`CmEventKind::ConnectResponse`]: move `qp` to INIT (with the
    /// access the connection grants), RTR and RTS, then
    /// complete the connection (the passive side gets
    /// [`CmEventKind::Established`]).
    ///
    /// # Errors
    ///
    /// The errno of the QP's state query (`ibv_query_qp`), of a QP
    /// transition (`rdma_init_qp_attr`, `ibv_modify_qp`) or of
    /// `rdma_establish`; [`InvalidInput`](io::ErrorKind::InvalidInput), the
    /// QP untouched, if it is not in INIT (an established QP, a second
    /// call). A failure after the QP reached RTR moves it to ERROR (a
    /// refusal of that move is not reported), as librdmacm does for its own
    /// QPs on a connect response it cannot complete; one before leaves it
    /// in INIT, as an establish called before the response does.
    ///
    /// ```no_run
    /// # fn next(events: &mut evd_verbs::ibv::CmEvents) -> evd_verbs::CmEvent {
    /// #     use evd_verbs::CmEventSource;
    /// #     loop { if let Some(ev) = events.next_event().unwrap() { return ev; } }
    /// # }
    /// use evd_verbs::ibv::{CmChannel, CmConnParams, CmId, Context};
    /// use evd_verbs::{CmEventKind, CmToken, CqId};
    /// use std::time::Duration;
    /// let (mut events, channel) = CmChannel::new()?;
    /// let id = CmId::new(&channel, CmToken(1))?;
    /// id.resolve_addr("10.0.0.2:7471".parse()?, Duration::from_secs(2))?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::AddrResolved);
    /// id.resolve_route(Duration::from_secs(2))?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::RouteResolved);
    /// let ctx = Context::open(id.device_name().as_deref())?;
    /// let cq = ctx.create_cq(16, CqId(0))?;
    /// let mut qp = ctx.alloc_pd()?.create_rc_qp(&cq, &cq, &Default::default(), id.port_num())?;
    /// id.connect(&mut qp, &CmConnParams::default())?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::ConnectResponse);
    /// id.establish(&mut qp)?; // the QP is in RTS: post sends
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn establish(&self, qp: &mut QueuePair) -> io::Result<()> {
        // INIT again first, as librdmacm does for its own QPs: before the
        // exchange the INIT attributes grant no remote access; now they
        // carry what the connection allows (remote writes, and reads if
        // responder resources were offered).
        // Only a QP the connect left in INIT: another (an established one,
        // a second call) is refused untouched.
        if qp.query_state()? != QpState::Init {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "establish on a QP that is not in INIT",
            ));
        }
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_INIT)?;
        // Failed in RTR (or before the response came: RTR fails), the QP is
        // back in INIT, harmless; failed later, it could receive (or send)
        // for a connection never made: ERROR, as librdmacm's handling of
        // the connect response leaves its own QPs.
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_RTR)?;
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_RTS)
            .inspect_err(|_| to_error(qp))?;
        // SAFETY: a live id.
        check(unsafe { ffi::rdma_establish(self.id) }).inspect_err(|_| to_error(qp))
    }

    /// Accept the request this identifier came with, on `qp` (in INIT, on
    /// this identifier's device), which is moved to RTS first, holding to
    /// the read and atomic depths of `params` that the reply offers:
    /// receives can be posted before, sends after
    /// [`CmEventKind::Established`].
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) on an identifier that
    /// is not a connect request's ([`CmChannel::take_request`]) or if
    /// `params.private_data` is over 255 bytes, the QP untouched; the errno of a QP transition
    /// (`rdma_init_qp_attr`, `ibv_modify_qp`) or of `rdma_accept` (`EINVAL`
    /// for private data over the transport's limit, 196 bytes over
    /// InfiniBand and RoCE). A refused `rdma_accept` moves the QP (in RTS by
    /// then) to ERROR, as librdmacm does for its own QPs (its receives
    /// flushed; reset it before another connection); a failed transition
    /// leaves it where it stopped, as librdmacm does.
    ///
    /// ```no_run
    /// # fn next(events: &mut evd_verbs::ibv::CmEvents) -> evd_verbs::CmEvent {
    /// #     use evd_verbs::CmEventSource;
    /// #     loop { if let Some(ev) = events.next_event().unwrap() { return ev; } }
    /// # }
    /// use evd_verbs::ibv::{CmChannel, CmConnParams, CmId, Context};
    /// use evd_verbs::{CmEventKind, CmToken, CqId};
    /// let (mut events, channel) = CmChannel::new()?;
    /// let listener = CmId::new(&channel, CmToken(1))?;
    /// listener.bind("0.0.0.0:7471".parse()?)?;
    /// listener.listen(8)?;
    /// let request = next(&mut events);
    /// assert_eq!(request.kind, CmEventKind::ConnectRequest);
    /// let id = channel.take_request(request.id).expect("the request's identifier");
    /// let ctx = Context::open(id.device_name().as_deref())?;
    /// let cq = ctx.create_cq(16, CqId(0))?;
    /// let mut qp = ctx.alloc_pd()?.create_rc_qp(&cq, &cq, &Default::default(), id.port_num())?;
    /// qp.post_recv(1, &qp.pd().register(64)?, 0, 64)?; // receives before the accept
    /// id.accept(&mut qp, &CmConnParams::default())?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::Established);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn accept(&self, qp: &mut QueuePair, params: &CmConnParams<'_>) -> io::Result<()> {
        // Checked before the QP is touched. Only a request's identifier
        // has a request to accept (another's INIT attributes would strip
        // the QP's remote access before the kernel refused), and it always
        // has a device (librdmacm reads it unchecked).
        if self.token < CmToken::INCOMING {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a connect request's identifier (CmChannel::take_request)",
            ));
        }
        self.on_a_device()?;
        let mut raw = params.raw(qp)?;
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_INIT)?;
        // The reply tells the peer `params`' read and atomic depths; the
        // QP must hold to the same (the request's, which the kernel
        // computes here, may be more: then this side would issue reads the
        // peer has no resources for, and the peer fail the connection).
        // As librdmacm's `rdma_accept` for the QPs it owns.
        self.transition_with(qp, ffi::ibv_qp_state::IBV_QPS_RTR, |attr| {
            if params.responder_resources != u8::MAX {
                attr.max_dest_rd_atomic = params.responder_resources;
            }
        })?;
        self.transition_with(qp, ffi::ibv_qp_state::IBV_QPS_RTS, |attr| {
            if params.initiator_depth != u8::MAX {
                attr.max_rd_atomic = params.initiator_depth;
            }
        })?;
        // SAFETY: as in `connect`. Refused, the QP (in RTS) goes to ERROR,
        // as librdmacm's `rdma_accept` leaves its own QPs.
        check(unsafe { ffi::rdma_accept(self.id, &mut raw) }).inspect_err(|_| to_error(qp))
    }

    /// Reject the request this identifier came with; the peer gets
    /// [`CmEventKind::Rejected`] with `private_data`.
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) if `private_data` is
    /// over 255 bytes; the errno of `rdma_reject`.
    ///
    /// ```no_run
    /// # fn next(events: &mut evd_verbs::ibv::CmEvents) -> evd_verbs::CmEvent {
    /// #     use evd_verbs::CmEventSource;
    /// #     loop { if let Some(ev) = events.next_event().unwrap() { return ev; } }
    /// # }
    /// use evd_verbs::ibv::{CmChannel, CmConnParams, CmId, Context};
    /// use evd_verbs::{CmEventKind, CmToken, CqId};
    /// let (mut events, channel) = CmChannel::new()?;
    /// let listener = CmId::new(&channel, CmToken(1))?;
    /// listener.bind("0.0.0.0:7471".parse()?)?;
    /// listener.listen(8)?;
    /// let request = next(&mut events);
    /// assert_eq!(request.kind, CmEventKind::ConnectRequest);
    /// let id = channel.take_request(request.id).expect("the request's identifier");
    /// assert!(request.private_data.as_bytes().starts_with(b"v1"), "unknown client");
    /// id.reject(b"busy")?; // the client gets Rejected with these bytes
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        let len = u8::try_from(private_data.len()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "private data over 255 bytes")
        })?;
        // SAFETY: a live id; the data lives across the call.
        check(unsafe { ffi::rdma_reject(self.id, private_data.as_ptr().cast(), len) })
    }

    /// Disconnect; both sides get [`CmEventKind::Disconnected`].
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) before the identifier
    /// has a device or while its address is being resolved (its
    /// [`CmEventKind::AddrResolved`] not read from the channel yet); the
    /// errno of `rdma_disconnect`, as an [`io::Error`].
    ///
    /// ```no_run
    /// # fn next(events: &mut evd_verbs::ibv::CmEvents) -> evd_verbs::CmEvent {
    /// #     use evd_verbs::CmEventSource;
    /// #     loop { if let Some(ev) = events.next_event().unwrap() { return ev; } }
    /// # }
    /// use evd_verbs::ibv::{CmChannel, CmConnParams, CmId, Context};
    /// use evd_verbs::{CmEventKind, CmToken, CqId};
    /// use std::time::Duration;
    /// let (mut events, channel) = CmChannel::new()?;
    /// let id = CmId::new(&channel, CmToken(1))?;
    /// id.resolve_addr("10.0.0.2:7471".parse()?, Duration::from_secs(2))?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::AddrResolved);
    /// id.resolve_route(Duration::from_secs(2))?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::RouteResolved);
    /// let ctx = Context::open(id.device_name().as_deref())?;
    /// let cq = ctx.create_cq(16, CqId(0))?;
    /// let mut qp = ctx.alloc_pd()?.create_rc_qp(&cq, &cq, &Default::default(), id.port_num())?;
    /// id.connect(&mut qp, &CmConnParams::default())?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::ConnectResponse);
    /// id.establish(&mut qp)?;
    /// id.disconnect()?;
    /// assert_eq!(next(&mut events).kind, CmEventKind::Disconnected);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn disconnect(&self) -> io::Result<()> {
        // librdmacm reads the device the resolution's event sets (older
        // releases without checking that there is one).
        self.on_a_device()?;
        // SAFETY: a live id.
        check(unsafe { ffi::rdma_disconnect(self.id) })
    }
}
