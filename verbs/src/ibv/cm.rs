//! The connection manager (librdmacm): connection identifiers on an event
//! channel whose events a [`Driver`](crate::Driver) delivers into an EVD,
//! beside completions, through a [`CmFeed`](crate::CmFeed).
//!
//! ## Who owns what
//! - [`CmChannel::new`] makes the event channel and returns its two halves:
//!   [`CmEvents`], the [`CmEventSource`] a feed reads, and [`CmChannel`], the
//!   handle identifiers are made on. The channel is destroyed after the last
//!   of both halves and of the identifiers on it (each holds it), so no
//!   identifier outlives it, as `rdma_destroy_event_channel` requires.
//! - [`CmId`] owns its `rdma_cm_id`; dropping it destroys it. librdmacm
//!   then discards its undelivered events; an event already copied out
//!   names it only by token, so nothing dangles.
//! - Each event is copied out (kind, tokens, status, the peer's QP number,
//!   private data) and acknowledged at once, by the feed, on the driver's
//!   thread: `rdma_destroy_id` waits for the acks of its id's events, so an
//!   acknowledgement never waits on the consumer. Each event is acked
//!   exactly once; the ordering of the channel is kept.
//! - A [`CmEventKind::ConnectRequest`] brings a new identifier, made by
//!   librdmacm. Before the event is acknowledged it is given a fresh token
//!   (at or above [`CmToken::INCOMING`]) and parked in the channel; the
//!   application takes it with [`CmChannel::take_request`] and accepts or
//!   rejects it. An identifier never taken is destroyed with the channel
//!   (the peer sees a reject or a timeout).
//!
//! ## Queue pairs
//! The QP is the caller's ([`ProtectionDomain::create_rc_qp`], on a
//! [`Context`] opened on the identifier's device: [`CmId::device_name`]),
//! not one made by `rdma_create_qp`: librdmacm never touches it, so its
//! lifetime is independent of the identifier's, and the feeds see its CQs
//! as any others. The transitions librdmacm would make are made here with
//! the attributes `rdma_init_qp_attr` computes: [`CmId::accept`] moves the
//! QP to RTS then accepts (as librdmacm does for its own QPs); the active
//! side calls [`CmId::connect`], and on [`CmEventKind::ConnectResponse`]
//! [`CmId::establish`], which moves the QP to RTS and completes the
//! handshake. A disconnect does not flush the QP: call
//! [`QueuePair::set_error`] to have outstanding work requests complete.

use super::teardown::{TeardownError, VerbsObject};
use super::*;
use crate::event::{CmEvent, CmEventKind, CmToken, PrivateData};
use crate::source::CmEventSource;
use std::ffi::CStr;
use std::fmt;
use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// A token travels in the identifier's `context` pointer: it must fit.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("ibv::cm carries 64-bit tokens in pointers: 64-bit targets only");

impl CmToken {
    /// Tokens at or above this one are given by the channel to identifiers
    /// of incoming requests; [`CmId::new`] refuses them.
    pub const INCOMING: CmToken = CmToken(1 << 63);
}

/// The event channel, shared by its halves and its identifiers.
struct Channel {
    /// Non-null for the whole life of the value; destroyed in `Drop`, after
    /// every identifier (each holds an `Arc` to this).
    raw: *mut ffi::rdma_event_channel,
    next_incoming: AtomicU64,
    /// Identifiers of connect requests, not yet taken by the application.
    requests: Mutex<Vec<(CmToken, RawId)>>,
    /// The device name and port of each identifier bound to a device, read
    /// from the identifier by the thread that librdmacm updated it on (the
    /// feed's, in `copy_out`, before the ack; the caller's, in `bind`), so
    /// that `CmId::device_name` never reads a field librdmacm may be
    /// writing on another thread.
    bound: Mutex<Vec<(CmToken, Bound)>>,
}

/// Where an identifier is bound: its device's name and port.
#[derive(Clone, Debug)]
struct Bound {
    device: String,
    port: u8,
}

/// The device and port `id` is bound to, if it is.
///
/// # Safety
/// `id` is live and librdmacm is not updating it concurrently: the caller
/// runs on the thread that just completed the call (or got the event) that
/// bound it.
unsafe fn bound_of(id: *mut ffi::rdma_cm_id) -> Option<Bound> {
    // SAFETY: the caller's; `verbs` is null or librdmacm's open context,
    // whose device name is a C string it owns.
    unsafe {
        let verbs = (*id).verbs;
        if verbs.is_null() {
            return None;
        }
        let name = CStr::from_ptr(ffi::ibv_get_device_name((*verbs).device));
        Some(Bound {
            device: name.to_string_lossy().into_owned(),
            port: (*id).port_num,
        })
    }
}

impl Channel {
    fn record_bound(&self, token: CmToken, bound: Option<Bound>) {
        let Some(bound) = bound else { return };
        let mut all = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        match all.iter_mut().find(|(t, _)| *t == token) {
            Some((_, b)) => *b = bound,
            None => all.push((token, bound)),
        }
    }

    fn bound(&self, token: CmToken) -> Option<Bound> {
        let all = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        all.iter()
            .find(|(t, _)| *t == token)
            .map(|(_, b)| b.clone())
    }

    fn forget_bound(&self, token: CmToken) {
        let mut all = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|(t, _)| *t != token);
    }
}

/// An `rdma_cm_id` parked in the channel.
struct RawId(*mut ffi::rdma_cm_id);

// SAFETY: librdmacm identifiers may be used from any thread; a parked one is
// used by nobody until it is taken out under the lock.
unsafe impl Send for RawId {}

// SAFETY: librdmacm channels may be used from any thread; the parked ids are
// behind a mutex.
unsafe impl Send for Channel {}
// SAFETY: as above; the raw pointer is only read.
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        let parked = mem::take(self.requests.get_mut().unwrap_or_else(|e| e.into_inner()));
        let mut all_gone = true;
        for (_, RawId(id)) in parked {
            // SAFETY: an id librdmacm made for a request, parked here and
            // never handed out, destroyed once; its event was acked.
            let ret = unsafe { ffi::rdma_destroy_id(id) };
            let result = destroyed(VerbsObject::CmId, "rdma_destroy_id", ret);
            all_gone &= result.is_ok();
            report_failure(result);
        }
        if all_gone {
            // SAFETY: every identifier on the channel is gone: each holds an
            // Arc to this value (one whose destroy failed keeps it forever),
            // and the parked ones were destroyed above.
            unsafe { ffi::rdma_destroy_event_channel(self.raw) };
        }
    }
}

/// A connection-manager event channel: make identifiers on it, take the
/// identifiers of incoming requests. Its events come out of the matching
/// [`CmEvents`].
///
/// ```no_run
/// use evd_verbs::ibv::{CmChannel, CmId};
/// use evd_verbs::CmToken;
/// let (events, channel) = CmChannel::new()?;
/// let listener = CmId::new(&channel, CmToken(1))?;
/// listener.bind("10.0.0.1:7471".parse()?)?;
/// listener.listen(8)?;
/// # drop(events);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct CmChannel {
    inner: Arc<Channel>,
}

impl fmt::Debug for CmChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmChannel")
            .field("raw", &self.inner.raw)
            .finish_non_exhaustive()
    }
}

/// The events of a [`CmChannel`], copied out and acknowledged one by one:
/// the [`CmEventSource`] of real rdma_cm. Register it with a driver through
/// a [`CmFeed`](crate::CmFeed).
pub struct CmEvents {
    inner: Arc<Channel>,
}

impl fmt::Debug for CmEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmEvents")
            .field("fd", &self.fd())
            .finish_non_exhaustive()
    }
}

impl CmChannel {
    /// A new event channel (its fd non-blocking), as its event source and
    /// its handle.
    pub fn new() -> io::Result<(CmEvents, CmChannel)> {
        // SAFETY: no arguments; the channel is owned by `Channel` below.
        let raw = unsafe { ffi::rdma_create_event_channel() };
        if raw.is_null() {
            return Err(last_err());
        }
        let inner = Arc::new(Channel {
            raw,
            next_incoming: AtomicU64::new(CmToken::INCOMING.0),
            requests: Mutex::new(Vec::new()),
            bound: Mutex::new(Vec::new()),
        });
        // SAFETY: a live channel; its fd belongs to it.
        set_nonblocking(unsafe { (*raw).fd })?;
        Ok((
            CmEvents {
                inner: inner.clone(),
            },
            CmChannel { inner },
        ))
    }

    /// The raw channel.
    pub fn as_ptr(&self) -> *mut ffi::rdma_event_channel {
        self.inner.raw
    }

    /// Take the identifier of the connect request whose event carried `token`
    /// ([`CmEvent::id`]), to accept or reject it. `None` if there is none
    /// (already taken, or not a request).
    pub fn take_request(&self, token: CmToken) -> Option<CmId> {
        let mut parked = self
            .inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let at = parked.iter().position(|(t, _)| *t == token)?;
        let (_, RawId(id)) = parked.swap_remove(at);
        Some(CmId {
            id,
            token,
            _channel: self.inner.clone(),
        })
    }

    /// Identifiers of requests waiting to be taken.
    pub fn pending_requests(&self) -> usize {
        self.inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

impl CmEvents {
    /// Copy `ev` out, parking a request's new identifier first.
    ///
    /// # Safety
    /// `ev` is an event got from this channel and not yet acknowledged.
    unsafe fn copy_out(&self, ev: *const ffi::rdma_cm_event) -> CmEvent {
        // SAFETY: (all reads below) an unacked event and the identifiers it
        // names are alive until the ack (rdma_get_cm_event(3)).
        let (raw_kind, id, listen_id, status) =
            unsafe { ((*ev).event, (*ev).id, (*ev).listen_id, (*ev).status) };
        let kind = CmEventKind::from_raw(raw_kind);
        let token_of = |id: *mut ffi::rdma_cm_id| {
            // SAFETY: as above; the context holds a token, never a pointer.
            CmToken(unsafe { (*id).context } as usize as u64)
        };
        let (token, listener) = if kind == CmEventKind::ConnectRequest {
            // Relaxed: a counter; tokens only need to be distinct.
            let token = CmToken(self.inner.next_incoming.fetch_add(1, Ordering::Relaxed));
            // SAFETY: the new id is ours alone until it is parked: nobody
            // else has seen it.
            unsafe { (*id).context = token.0 as usize as *mut libc::c_void };
            self.inner
                .requests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((token, RawId(id)));
            (token, Some(token_of(listen_id)))
        } else {
            (token_of(id), None)
        };
        if matches!(
            kind,
            CmEventKind::ConnectRequest
                | CmEventKind::AddrResolved
                | CmEventKind::RouteResolved
                | CmEventKind::AddrChange
        ) {
            // SAFETY: this thread is the one librdmacm just updated the id
            // on (inside rdma_get_cm_event); the event is not acked yet.
            self.inner.record_bound(token, unsafe { bound_of(id) });
        }
        let (private_data, peer_qp_num) = match kind {
            CmEventKind::ConnectRequest
            | CmEventKind::ConnectResponse
            | CmEventKind::Established
            | CmEventKind::Rejected => {
                // SAFETY: on a connected port space, `param.conn` is the
                // member these kinds fill; the data is copied before the ack.
                let conn = unsafe { &(*ev).param.conn };
                let data = if conn.private_data.is_null() {
                    &[][..]
                } else {
                    // SAFETY: librdmacm's buffer of the stated length.
                    unsafe {
                        std::slice::from_raw_parts(
                            conn.private_data.cast::<u8>(),
                            usize::from(conn.private_data_len),
                        )
                    }
                };
                (PrivateData::new(data).unwrap_or_default(), conn.qp_num)
            }
            _ => (PrivateData::default(), 0),
        };
        CmEvent {
            kind,
            id: token,
            listener,
            status,
            peer_qp_num,
            private_data,
        }
    }
}

impl CmEventSource for CmEvents {
    fn fd(&self) -> RawFd {
        // SAFETY: a live channel.
        unsafe { (*self.inner.raw).fd }
    }

    fn next_event(&mut self) -> io::Result<Option<CmEvent>> {
        let mut ev = ptr::null_mut();
        // SAFETY: a live, non-blocking channel; `ev` is a local out-pointer.
        if unsafe { ffi::rdma_get_cm_event(self.inner.raw, &mut ev) } != 0 {
            let e = last_err();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        // SAFETY: just got, not yet acked.
        let copied = unsafe { self.copy_out(ev) };
        // SAFETY: the event just got, acked once, after everything was
        // copied out of it.
        let acked = unsafe { ffi::rdma_ack_cm_event(ev) };
        // librdmacm refuses an ack only for a null event, which this is
        // not; the event is delivered whatever the ack said (it was copied
        // out, and a request's identifier is parked already).
        debug_assert_eq!(acked, 0, "rdma_ack_cm_event refused an event it gave");
        Ok(Some(copied))
    }
}

/// What a connect or accept offers the peer (`struct rdma_conn_param`).
#[derive(Clone, Copy, Debug)]
pub struct CmConnParams<'a> {
    /// Private data for the peer (at most 56 bytes on a connect, 196 on an
    /// accept, over InfiniBand and RoCE).
    pub private_data: &'a [u8],
    /// RDMA reads and atomics this side accepts in flight.
    pub responder_resources: u8,
    /// RDMA reads and atomics this side issues in flight.
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

/// A connection identifier (`rdma_cm_id`, port space TCP: reliable
/// connections), named by the token its events carry.
pub struct CmId {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    id: *mut ffi::rdma_cm_id,
    token: CmToken,
    /// Keeps the channel alive: it is destroyed after its identifiers.
    _channel: Arc<Channel>,
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("id", &self.id)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

// SAFETY: librdmacm identifiers may be used from any thread.
unsafe impl Send for CmId {}

/// A `sockaddr_in` or `sockaddr_in6` for `addr`, as librdmacm takes it.
fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain integers; all-zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any
            // sockaddr.
            unsafe { ptr::write(ptr::addr_of_mut!(storage).cast(), sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { ptr::write(ptr::addr_of_mut!(storage).cast(), sin6) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn millis(timeout: Duration) -> i32 {
    i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)
}

impl CmId {
    /// A new identifier on `channel`, whose events carry `token` (below
    /// [`CmToken::INCOMING`]).
    pub fn new(channel: &CmChannel, token: CmToken) -> io::Result<CmId> {
        if token >= CmToken::INCOMING {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "tokens from CmToken::INCOMING up are the channel's",
            ));
        }
        let mut id = ptr::null_mut();
        // SAFETY: a live channel; the context is the token, never
        // dereferenced.
        check(unsafe {
            ffi::rdma_create_id(
                channel.inner.raw,
                &mut id,
                token.0 as usize as *mut libc::c_void,
                ffi::rdma_port_space::RDMA_PS_TCP,
            )
        })?;
        Ok(CmId {
            id,
            token,
            _channel: channel.inner.clone(),
        })
    }

    /// The token its events carry.
    pub fn token(&self) -> CmToken {
        self.token
    }

    /// The raw identifier.
    pub fn as_ptr(&self) -> *mut ffi::rdma_cm_id {
        self.id
    }

    /// Bind to a local address (a listener's, or a chosen source).
    pub fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        let (mut sa, _) = sockaddr(addr);
        // SAFETY: a live id and a sockaddr valid for the call.
        check(unsafe { ffi::rdma_bind_addr(self.id, ptr::addr_of_mut!(sa).cast()) })?;
        // SAFETY: rdma_bind_addr updated the id on this thread, and no
        // event for it is pending (binding raises none).
        self._channel
            .record_bound(self.token, unsafe { bound_of(self.id) });
        Ok(())
    }

    /// Listen for connect requests ([`CmEventKind::ConnectRequest`]).
    pub fn listen(&self, backlog: i32) -> io::Result<()> {
        // SAFETY: a live id.
        check(unsafe { ffi::rdma_listen(self.id, backlog) })
    }

    /// Resolve `dst` to a device and port ([`CmEventKind::AddrResolved`] or
    /// [`CmEventKind::AddrError`] follows).
    pub fn resolve_addr(&self, dst: SocketAddr, timeout: Duration) -> io::Result<()> {
        let (mut sa, _) = sockaddr(dst);
        // SAFETY: a live id and a sockaddr valid for the call (copied).
        check(unsafe {
            ffi::rdma_resolve_addr(
                self.id,
                ptr::null_mut(),
                ptr::addr_of_mut!(sa).cast(),
                millis(timeout),
            )
        })
    }

    /// Resolve the route to the resolved address
    /// ([`CmEventKind::RouteResolved`] or [`CmEventKind::RouteError`]).
    pub fn resolve_route(&self, timeout: Duration) -> io::Result<()> {
        // SAFETY: a live id.
        check(unsafe { ffi::rdma_resolve_route(self.id, millis(timeout)) })
    }

    /// The name of the device the identifier is bound to: after `bind` to
    /// a device's address, once its [`CmEventKind::AddrResolved`] event was
    /// delivered, or for a taken request. Open a [`Context`] on it for the
    /// QP and CQs. `None` before.
    pub fn device_name(&self) -> Option<String> {
        self._channel.bound(self.token).map(|b| b.device)
    }

    /// The device port the identifier is bound to (0 before; see
    /// [`device_name`](CmId::device_name)).
    pub fn port_num(&self) -> u8 {
        self._channel.bound(self.token).map_or(0, |b| b.port)
    }

    /// Move `qp` to `state` with the attributes librdmacm computes for
    /// this connection (`rdma_init_qp_attr`).
    fn transition(&self, qp: &QueuePair, state: ffi::ibv_qp_state::Type) -> io::Result<()> {
        let mut attr: ffi::ibv_qp_attr = zeroed();
        attr.qp_state = state;
        let mut mask = 0;
        // SAFETY: a live id and live out-parameters.
        check(unsafe { ffi::rdma_init_qp_attr(self.id, &mut attr, &mut mask) })?;
        qp.modify(&mut attr, mask)
    }

    /// Request a connection for `qp` (after [`CmEventKind::RouteResolved`]).
    /// `qp` is in INIT, on this identifier's device. The peer's answer is
    /// [`CmEventKind::ConnectResponse`] (then call
    /// [`establish`](CmId::establish)), [`CmEventKind::Rejected`] or
    /// [`CmEventKind::Unreachable`].
    pub fn connect(&self, qp: &QueuePair, params: &CmConnParams<'_>) -> io::Result<()> {
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_INIT)?;
        let mut raw = params.raw(qp)?;
        // SAFETY: a live id; the parameters and private data live across
        // the call (librdmacm copies them).
        check(unsafe { ffi::rdma_connect(self.id, &mut raw) })
    }

    /// On [`CmEventKind::ConnectResponse`]: move `qp` to INIT (with the
    /// access the connection grants), RTR and RTS, then
    /// complete the connection (the passive side gets
    /// [`CmEventKind::Established`]).
    pub fn establish(&self, qp: &QueuePair) -> io::Result<()> {
        // INIT again first, as librdmacm does for its own QPs: before the
        // exchange the INIT attributes grant no remote access; now they
        // carry what the connection allows (remote writes, and reads if
        // responder resources were offered).
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_INIT)?;
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_RTR)?;
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_RTS)?;
        // SAFETY: a live id.
        check(unsafe { ffi::rdma_establish(self.id) })
    }

    /// Accept the request this identifier came with, on `qp` (in INIT, on
    /// this identifier's device), which is moved to RTS first: receives can
    /// be posted before, sends after [`CmEventKind::Established`].
    pub fn accept(&self, qp: &QueuePair, params: &CmConnParams<'_>) -> io::Result<()> {
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_INIT)?;
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_RTR)?;
        self.transition(qp, ffi::ibv_qp_state::IBV_QPS_RTS)?;
        let mut raw = params.raw(qp)?;
        // SAFETY: as in `connect`.
        check(unsafe { ffi::rdma_accept(self.id, &mut raw) })
    }

    /// Reject the request this identifier came with; the peer gets
    /// [`CmEventKind::Rejected`] with `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        let len = u8::try_from(private_data.len()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "private data over 255 bytes")
        })?;
        // SAFETY: a live id; the data lives across the call.
        check(unsafe { ffi::rdma_reject(self.id, private_data.as_ptr().cast(), len) })
    }

    /// Disconnect; both sides get [`CmEventKind::Disconnected`].
    pub fn disconnect(&self) -> io::Result<()> {
        // SAFETY: a live id.
        check(unsafe { ffi::rdma_disconnect(self.id) })
    }

    /// Destroy the identifier now, reporting a failure. Its undelivered
    /// events are discarded by librdmacm.
    pub fn close(mut self) -> Result<(), TeardownError> {
        self.destroy()
    }

    fn destroy(&mut self) -> Result<(), TeardownError> {
        let id = mem::replace(&mut self.id, ptr::null_mut());
        if id.is_null() {
            return Ok(());
        }
        self._channel.forget_bound(self.token);
        // SAFETY: a live id, nulled above so destroyed once; the channel
        // outlives it (the Arc field drops after this).
        let ret = unsafe { ffi::rdma_destroy_id(id) };
        // An id whose destroy failed still uses the channel: it is never
        // destroyed then.
        destroyed(VerbsObject::CmId, "rdma_destroy_id", ret)
            .inspect_err(|_| keep_forever(&self._channel))
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}
