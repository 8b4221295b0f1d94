//! A connection identifier ([`CmId`]): creating, binding, listening,
//! resolving, naming its device and port, and destroying it; and taking an
//! incoming request's identifier from the [`CmChannel`] that parked it.
//! Connecting it is in `connect.rs`.

use super::{Channel, RawId, bound_of};
#[cfg(doc)]
use crate::event::CmEventKind;
use crate::event::CmToken;
use crate::ibv::teardown::{TeardownError, VerbsObject};
use crate::ibv::*;
use std::fmt;
use std::io;
use std::mem;
use std::net::SocketAddr;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

/// A connection identifier (`rdma_cm_id`, port space TCP: reliable
/// connections), named by the token its events carry.
pub struct CmId {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    pub(super) id: *mut ffi::rdma_cm_id,
    pub(super) token: CmToken,
    /// Keeps the channel alive: it is destroyed after its identifiers.
    pub(super) _channel: Arc<Channel>,
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
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) if `token` is not below
    /// [`CmToken::INCOMING`]; [`AlreadyExists`](io::ErrorKind::AlreadyExists)
    /// if an identifier alive on `channel` has it (its events would be
    /// told from this one's by nothing; the token is free again once that
    /// identifier is closed or dropped, though its events already in an
    /// EVD still carry it); the errno of `rdma_create_id`.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{CmChannel, CmId};
    /// use evd_verbs::CmToken;
    /// let (_events, channel) = CmChannel::new()?;
    /// let id = CmId::new(&channel, CmToken(7))?;
    /// assert!(CmId::new(&channel, CmToken::INCOMING).is_err()); // the channel's own tokens
    /// let again = CmId::new(&channel, CmToken(7)).unwrap_err();
    /// assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
    /// id.close()?;
    /// assert!(CmId::new(&channel, CmToken(7))?.device_name().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(channel: &CmChannel, token: CmToken) -> io::Result<CmId> {
        if token >= CmToken::INCOMING {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "tokens from CmToken::INCOMING up are the channel's",
            ));
        }
        if !channel.inner.claim(token) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "an identifier alive on this channel has this token",
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
        })
        .inspect_err(|_| channel.inner.release(token))?;
        Ok(CmId {
            id,
            token,
            _channel: channel.inner.clone(),
        })
    }

    /// The token its events carry.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{CmChannel, CmId};
    /// use evd_verbs::CmToken;
    /// let (_events, channel) = CmChannel::new()?;
    /// assert_eq!(CmId::new(&channel, CmToken(7))?.token(), CmToken(7));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn token(&self) -> CmToken {
        self.token
    }

    /// The raw identifier.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{CmChannel, CmId};
    /// let (_events, channel) = CmChannel::new()?;
    /// let id = CmId::new(&channel, evd_verbs::CmToken(1))?;
    /// // SAFETY: a live identifier.
    /// let verbs = unsafe { (*id.as_ptr()).verbs }; // null until bound to a device
    /// assert!(verbs.is_null());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::rdma_cm_id {
        self.id
    }

    /// Bind to a local address (a listener's, or a chosen source).
    ///
    /// # Errors
    ///
    /// The errno of `rdma_bind_addr`, as an [`io::Error`] (`EADDRINUSE`,
    /// `EADDRNOTAVAIL`...).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{CmChannel, CmId};
    /// let (_events, channel) = CmChannel::new()?;
    /// let listener = CmId::new(&channel, evd_verbs::CmToken(1))?;
    /// listener.bind("10.0.0.1:7471".parse()?)?; // an address of an RDMA device
    /// assert!(listener.device_name().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        let (mut sa, _) = sockaddr(addr);
        // SAFETY: a live id and a sockaddr valid for the call.
        check(unsafe { ffi::rdma_bind_addr(self.id, ptr::addr_of_mut!(sa).cast()) })?;
        // SAFETY: rdma_bind_addr updated the id on this thread; no event
        // the feed's thread records a binding for (a resolution's, a
        // request's) can be processed meanwhile: binding raises none and
        // comes before any resolution.
        self._channel
            .record_bound(self.token, unsafe { bound_of(self.id) });
        Ok(())
    }

    /// Listen for connect requests ([`CmEventKind::ConnectRequest`]).
    ///
    /// # Errors
    ///
    /// The errno of `rdma_listen`, as an [`io::Error`].
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
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn listen(&self, backlog: i32) -> io::Result<()> {
        // SAFETY: a live id.
        check(unsafe { ffi::rdma_listen(self.id, backlog) })
    }

    /// Resolve `dst` to a device and port ([`CmEventKind::AddrResolved`] or
    /// [`CmEventKind::AddrError`] follows).
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) while an earlier
    /// resolution is in flight (its [`AddrResolved`](CmEventKind::AddrResolved)
    /// or [`AddrError`](CmEventKind::AddrError) event not read from the
    /// channel yet: the resolution ends when its feed reads it, whether or
    /// not the event then reaches the EVD); the
    /// errno of `rdma_resolve_addr`, as an [`io::Error`]. A resolution that
    /// fails later is an [`AddrError`](CmEventKind::AddrError) event instead.
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
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve_addr(&self, dst: SocketAddr, timeout: Duration) -> io::Result<()> {
        let (mut sa, _) = sockaddr(dst);
        let _writes = self._channel.id_writes();
        if !self._channel.begin_resolving(self.token) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an address resolution of this identifier is in flight: \
                 its AddrResolved or AddrError event is not read yet",
            ));
        }
        // SAFETY: a live id and a sockaddr valid for the call (copied).
        check(unsafe {
            ffi::rdma_resolve_addr(
                self.id,
                ptr::null_mut(),
                ptr::addr_of_mut!(sa).cast(),
                millis(timeout),
            )
        })
        .inspect_err(|_| self._channel.end_resolving(self.token))
    }

    /// Resolve the route to the resolved address
    /// ([`CmEventKind::RouteResolved`] or [`CmEventKind::RouteError`]).
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) before the identifier
    /// has a device (see [`device_name`](CmId::device_name)), or while its
    /// address is being resolved: its
    /// [`AddrResolved`](CmEventKind::AddrResolved) event not read from the
    /// channel yet;
    /// the errno of `rdma_resolve_route`, as an [`io::Error`]. A resolution
    /// that fails later is a [`RouteError`](CmEventKind::RouteError) event
    /// instead.
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
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve_route(&self, timeout: Duration) -> io::Result<()> {
        self.on_a_device()?;
        // Serialised with the channel's event processing: librdmacm's
        // processing of a RouteResolved event writes the identifier's route
        // (`ucma_query_route`, on kernels without AF_IB) while this call
        // reads it (`ucma_set_ib_route`), as a second resolution issued
        // before the first's event was read would.
        let _writes = self._channel.id_writes();
        // SAFETY: a live id, with a device (librdmacm reads it unchecked),
        // its fields written by no other thread meanwhile (the lock above).
        check(unsafe { ffi::rdma_resolve_route(self.id, millis(timeout)) })
    }

    /// Refuse a call that librdmacm makes only on an identifier with a
    /// device and no address resolution in flight: it reads the device
    /// unchecked (`rdma_resolve_route`, `rdma_connect`, `rdma_accept`, and
    /// `rdma_disconnect` in older releases) and the addresses
    /// (`rdma_resolve_route`), which the thread that gets the resolution's
    /// event writes. The binding is recorded, and the
    /// resolution marked over, under the channel's locks once librdmacm is
    /// done with the identifier, so finding them here also orders this
    /// call after those writes.
    pub(super) fn on_a_device(&self) -> io::Result<()> {
        if !self._channel.resolving(self.token) && self._channel.bound(self.token).is_some() {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the identifier has no device yet, or its address is being resolved: \
             its AddrResolved event is not read yet",
        ))
    }

    /// The name of the device the identifier is bound to: after `bind` to
    /// a device's address, once its [`CmEventKind::AddrResolved`] event was
    /// delivered, or for a taken request. Open a [`Context`] on it for the
    /// QP and CQs. `None` before.
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
    /// println!("QP {} on {:?}", qp.qp_num(), id.device_name());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn device_name(&self) -> Option<String> {
        self._channel.bound(self.token).map(|b| b.device)
    }

    /// The device port the identifier is bound to (0 before; see
    /// [`device_name`](CmId::device_name)).
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
    /// assert!(id.port_num() >= 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn port_num(&self) -> u8 {
        self._channel.bound(self.token).map_or(0, |b| b.port)
    }

    /// Destroy the identifier now, reporting a failure. Its undelivered
    /// events are discarded by librdmacm.
    ///
    /// # Errors
    ///
    /// A [`TeardownError`] if `rdma_destroy_id` fails (the identifier is
    /// leaked).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{CmChannel, CmId};
    /// let (_events, channel) = CmChannel::new()?;
    /// let id = CmId::new(&channel, evd_verbs::CmToken(1))?;
    /// id.close()?; // dropping it would report a failure to the teardown hook instead
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(mut self) -> Result<(), TeardownError> {
        self.destroy()
    }

    fn destroy(&mut self) -> Result<(), TeardownError> {
        let id = mem::replace(&mut self.id, ptr::null_mut());
        if id.is_null() {
            return Ok(());
        }
        // SAFETY: a live id, nulled above so destroyed once; the channel
        // outlives it (the Arc field drops after this).
        let ret = unsafe { ffi::rdma_destroy_id(id) };
        // After the destroy, which waits for the ack of an event of this id
        // that the feed's thread is copying out (and recording the binding
        // of; a request's id is parked, so can be destroyed, only once its
        // binding is recorded): no binding of it is recorded after this.
        self._channel.forget_bound(self.token);
        self._channel.end_resolving(self.token);
        // An id whose destroy failed still uses the channel (and its token):
        // neither is freed then.
        destroyed(VerbsObject::CmId, "rdma_destroy_id", ret)
            .inspect(|()| {
                if self.token < CmToken::INCOMING {
                    self._channel.release(self.token);
                }
            })
            .inspect_err(|_| keep_forever(&self._channel))
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}

/// Taking a connect request's identifier from the channel that parked it.
impl CmChannel {
    /// Take the identifier of the connect request whose event carried `token`
    /// ([`CmEvent::id`](crate::CmEvent::id)), to accept or reject it. `None` if there is none
    /// (already taken, by this or by [`take_all_requests`](Self::take_all_requests),
    /// or not a request).
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
    /// assert!(channel.take_request(request.id).is_none()); // taken once
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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

    /// Take every request identifier still parked, with its token: the
    /// leftovers of request events that never reached the application (a
    /// panicking `From`, a handler that dropped the event, a closed EVD),
    /// which stay parked, holding a kernel identifier and its device, until
    /// the channel goes. Dropping them rejects them.
    ///
    /// The channel cannot tell those from requests whose events are still
    /// on their way (being posted, or queued in the EVD): it takes those
    /// too, and their events then find nothing to take. Sweep when none
    /// can be on its way (the channel's feed removed, its EVD drained), or
    /// keep the identifiers whose tokens the application has not seen yet.
    ///
    /// ```no_run
    /// # fn next(events: &mut evd_verbs::ibv::CmEvents) -> evd_verbs::CmEvent {
    /// #     use evd_verbs::CmEventSource;
    /// #     loop { if let Some(ev) = events.next_event().unwrap() { return ev; } }
    /// # }
    /// use evd_verbs::ibv::{CmChannel, CmId};
    /// use evd_verbs::CmToken;
    /// let (mut events, channel) = CmChannel::new()?;
    /// let listener = CmId::new(&channel, CmToken(1))?;
    /// listener.bind("0.0.0.0:7471".parse()?)?;
    /// listener.listen(8)?;
    /// let _lost = next(&mut events); // a request event the application never handles
    /// let leftovers = channel.take_all_requests();
    /// assert_eq!(leftovers.len(), 1);
    /// assert_eq!(channel.pending_requests(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_all_requests(&self) -> Vec<(CmToken, CmId)> {
        let parked = mem::take(
            &mut *self
                .inner
                .requests
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let id = |(token, RawId(id))| {
            let id = CmId {
                id,
                token,
                _channel: self.inner.clone(),
            };
            (token, id)
        };
        parked.into_iter().map(id).collect()
    }
}
