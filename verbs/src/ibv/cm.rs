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
//!   (at or above [`CmToken::INCOMING`], distinct from every other request's
//!   in the process, whatever its channel) and parked in the channel; the
//!   application takes it with [`CmChannel::take_request`] and accepts or
//!   rejects it. An identifier whose event never reached the application
//!   (lost to a panicking `From`, dropped by a handler, or left in a closed
//!   EVD) stays parked, holding its kernel identifier and its device; the
//!   kernel's later events for it (a `Rejected` when the peer gives up, a
//!   `DeviceRemoval`) still come, under that token, which the application
//!   never saw in a request: a long-running server takes such leftovers
//!   with [`CmChannel::take_all_requests`]. What is still parked is
//!   destroyed with the channel (the peer gets a reject).
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

mod connect;
mod id;

pub use connect::CmConnParams;
pub use id::CmId;

use super::teardown::VerbsObject;
use super::*;
use crate::event::{CmEvent, CmEventKind, CmToken, PrivateData};
use crate::source::CmEventSource;
use std::ffi::CStr;
use std::fmt;
use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

// A token travels in the identifier's `context` pointer: it must fit.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("ibv::cm carries 64-bit tokens in pointers: 64-bit targets only");

impl CmToken {
    /// Tokens at or above this one are given by the channel to identifiers
    /// of incoming requests; [`CmId::new`] refuses them.
    pub const INCOMING: CmToken = CmToken(1 << 63);
}

/// The next token of an incoming request's identifier: one counter for the
/// process, so that requests on two channels feeding one EVD are told apart.
static NEXT_INCOMING: AtomicU64 = AtomicU64::new(CmToken::INCOMING.0);

/// The event channel, shared by its halves and its identifiers.
struct Channel {
    /// Non-null for the whole life of the value; destroyed in `Drop`, after
    /// every identifier (each holds an `Arc` to this).
    raw: *mut ffi::rdma_event_channel,
    /// Identifiers of connect requests, not yet taken by the application.
    requests: Mutex<Vec<(CmToken, RawId)>>,
    /// The device name and port of each identifier bound to a device, read
    /// from the identifier by the thread that librdmacm updated it on (the
    /// feed's, in `copy_out`, before the ack; the caller's, in `bind`), so
    /// that `CmId::device_name` never reads a field librdmacm may be
    /// writing on another thread.
    bound: Mutex<Vec<(CmToken, Bound)>>,
    /// Identifiers whose address resolution is in flight: librdmacm writes
    /// the identifier (its device, its addresses) on the thread that gets
    /// its `AddrResolved` or `AddrError` event, so no call that reads them
    /// may run meanwhile (`CmId::on_a_device`), and no second resolution
    /// may start (only the call that set the mark, or its event, ends it).
    resolving: Mutex<Vec<CmToken>>,
    /// Held around the librdmacm calls that write or read an identifier's
    /// fields in user space on different threads: getting an event (which
    /// processes it into its identifier, in `CmEvents::next_event`),
    /// `rdma_resolve_addr` (which copies the destination into the
    /// identifier after the kernel call, when the kernel may have resolved
    /// it already) and `rdma_resolve_route` (which reads the route a
    /// RouteResolved event's processing writes, on kernels without AF_IB).
    /// Taken before any other lock of the channel, and held over no user
    /// code and no blocking call.
    id_writes: Mutex<()>,
    /// The callers' tokens of the identifiers alive on this channel: a
    /// token names one identifier's events, so [`CmId::new`] refuses one in
    /// use. Freed once its identifier is destroyed (never, if that failed).
    claimed: Mutex<Vec<CmToken>>,
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

    /// Mark `token`'s address resolution in flight (before the call that
    /// starts it, so its event cannot come first); false if one is already.
    fn begin_resolving(&self, token: CmToken) -> bool {
        let mut all = self.resolving.lock().unwrap_or_else(|e| e.into_inner());
        let first = !all.contains(&token);
        if first {
            all.push(token);
        }
        first
    }

    /// Serialise a librdmacm call that writes an identifier with the
    /// channel's event processing ([`Channel::id_writes`]).
    fn id_writes(&self) -> MutexGuard<'_, ()> {
        self.id_writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `token`'s address resolution ended: its event was got (and
    /// librdmacm's writes to the identifier done), the call failed, or the
    /// identifier was destroyed.
    fn end_resolving(&self, token: CmToken) {
        let mut all = self.resolving.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|t| *t != token);
    }

    fn resolving(&self, token: CmToken) -> bool {
        let all = self.resolving.lock().unwrap_or_else(|e| e.into_inner());
        all.contains(&token)
    }

    /// Claim a caller's token for a new identifier; false if one alive has
    /// it.
    fn claim(&self, token: CmToken) -> bool {
        let mut all = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        if all.contains(&token) {
            return false;
        }
        all.push(token);
        true
    }

    fn release(&self, token: CmToken) {
        let mut all = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|t| *t != token);
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
    ///
    /// # Errors
    ///
    /// The errno of `rdma_create_event_channel`, or of making its fd
    /// non-blocking.
    ///
    /// ```no_run
    /// use evd_verbs::CmEventSource;
    /// let (mut events, _channel) = evd_verbs::ibv::CmChannel::new()?;
    /// assert!(events.next_event()?.is_none()); // non-blocking
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new() -> io::Result<(CmEvents, CmChannel)> {
        // SAFETY: no arguments; the channel is owned by `Channel` below.
        let raw = unsafe { ffi::rdma_create_event_channel() };
        if raw.is_null() {
            return Err(last_err());
        }
        let inner = Arc::new(Channel {
            raw,
            requests: Mutex::new(Vec::new()),
            bound: Mutex::new(Vec::new()),
            resolving: Mutex::new(Vec::new()),
            id_writes: Mutex::new(()),
            claimed: Mutex::new(Vec::new()),
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
    ///
    /// ```no_run
    /// let (_events, channel) = evd_verbs::ibv::CmChannel::new()?;
    /// // SAFETY: a live channel.
    /// println!("fd {}", unsafe { (*channel.as_ptr()).fd });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::rdma_event_channel {
        self.inner.raw
    }

    /// Identifiers of requests waiting to be taken.
    ///
    /// ```no_run
    /// # fn next(events: &mut evd_verbs::ibv::CmEvents) -> evd_verbs::CmEvent {
    /// #     use evd_verbs::CmEventSource;
    /// #     loop { if let Some(ev) = events.next_event().unwrap() { return ev; } }
    /// # }
    /// use evd_verbs::ibv::{CmChannel, CmId};
    /// use evd_verbs::{CmEventKind, CmToken};
    /// let (mut events, channel) = CmChannel::new()?;
    /// let listener = CmId::new(&channel, CmToken(1))?;
    /// listener.bind("0.0.0.0:7471".parse()?)?;
    /// listener.listen(8)?;
    /// let request = next(&mut events);
    /// assert_eq!(channel.pending_requests(), 1);
    /// drop(channel.take_request(request.id)); // dropping it destroys it: the peer gets a reject
    /// assert_eq!(channel.pending_requests(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
        let request = kind == CmEventKind::ConnectRequest;
        let (token, listener) = if request {
            // Relaxed: a counter; tokens only need to be distinct.
            let token = CmToken(NEXT_INCOMING.fetch_add(1, Ordering::Relaxed));
            // SAFETY: the new id is ours alone until it is parked: nobody
            // else has seen it.
            unsafe { (*id).context = token.0 as usize as *mut libc::c_void };
            (token, Some(token_of(listen_id)))
        } else {
            (token_of(id), None)
        };
        // The kinds librdmacm updates the identifier's device for (not
        // AddrChange: it changes nothing in user space, and may come while
        // `bind` is still reading what it bound).
        if matches!(
            kind,
            CmEventKind::ConnectRequest | CmEventKind::AddrResolved | CmEventKind::RouteResolved
        ) {
            // SAFETY: this thread is the one librdmacm just updated the id
            // on (inside rdma_get_cm_event); the event is not acked yet, and
            // a request's id is not parked yet.
            self.inner.record_bound(token, unsafe { bound_of(id) });
        }
        // A resolution ends with one of the first two; a device removed
        // under it sends neither.
        if matches!(
            kind,
            CmEventKind::AddrResolved | CmEventKind::AddrError | CmEventKind::DeviceRemoval
        ) {
            // After the binding is recorded: a call that finds the
            // resolution over finds the binding too.
            self.inner.end_resolving(token);
        }
        if request {
            // Last use of the new id here: once parked, another thread may
            // take and destroy it at once (its destroy does not wait for
            // this event's ack, which librdmacm counts against the
            // listener).
            self.inner
                .requests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((token, RawId(id)));
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
        let _writes = self.inner.id_writes();
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
