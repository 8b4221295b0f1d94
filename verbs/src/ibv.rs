//! Real libibverbs (cargo feature `ibverbs`): a device context, protection
//! domains, memory regions, RC queue pairs, and CQs with their own
//! completion channel, implementing [`CompletionQueue`].
//!
//! The `ibverbs` crate (0.9) creates its CQs without a completion channel
//! and keeps its context and CQ pointers private, so a channel-backed CQ
//! cannot be built on its types; and a QP must be created on the same
//! context as its CQs. This module therefore works on `ibverbs-sys` (the
//! bindings the `ibverbs` crate itself is built on) for the whole object
//! chain, and keeps the safe surface small: what the feeds, the tests and
//! the example need. The verbs that `verbs.h` defines `static inline`
//! (`ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send`, `ibv_post_recv`)
//! are called through the context's ops table, as libibverbs' own inline
//! functions do.
//!
//! Thread safety: libibverbs objects may be used from any thread
//! (libibverbs is thread-safe); each wrapper is `Send`, and the shared ones
//! (`Context`, `ProtectionDomain`) are `Sync` behind an `Arc`.
//!
//! Teardown: each object has an explicit `close`, which returns a failed
//! destroy as a [`TeardownError`] and, for the shared objects, refuses
//! while other handles are alive ([`CloseError::InUse`]). Dropping an
//! object runs the same destroy; a failure there is counted and handed to
//! the hook of the [`teardown`] module. An object whose destroy failed is
//! leaked with what it depends on. The order is the reverse of creation:
//! QPs and memory regions, then CQs, then protection domains, then the
//! context.
//!
//! Needs an RDMA device to run (see `verbs/tests/softroce/run.sh`):
//!
//! ```no_run
//! use evd_verbs::ibv::{Context, SendOp};
//! use evd_verbs::{CqId, Driver, DriverConfig, Feed, FeedMode, VerbsEvent};
//! let ctx = Context::open(None)?; // the first device, e.g. rxe0
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64, CqId(1))?; // with its own completion channel
//! let qp = pd.create_rc_qp(&cq, &cq, 16)?;
//! qp.connect(qp.endpoint(0)?, 0)?; // loopback to itself
//! let mr = pd.register(4096)?;
//! let (poster, mut evd) = evd::bounded::<VerbsEvent>(256)?;
//! let mut driver = Driver::new(DriverConfig::default())?;
//! driver.register(Feed::new(cq, CqId(1), poster), FeedMode::Event)?;
//! let driver = driver.spawn()?;
//! qp.post_recv(1, &mr, 0, 64)?;
//! qp.post_send(2, SendOp::Send, &mr, 64, 8, true)?;
//! evd.wait(2, None)?; // the send and the receive completion
//! driver.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::completion::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::cq::{AsyncEventSource, CompletionQueue, PollError};
use crate::event::{AsyncElement, AsyncEvent, AsyncEventKind, CqId};
use crate::feed::POLL_BATCH;
use crate::teardown::{self, CloseError, TeardownError, VerbsObject};
use ibverbs_sys as ffi;
use std::ffi::CStr;
use std::fmt;
use std::io;
use std::mem::{self, MaybeUninit};
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// A verbs call that returns 0 or an errno (directly, or -1 with errno set).
fn check(ret: i32) -> io::Result<()> {
    match ret {
        0 => Ok(()),
        -1 => Err(last_err()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// The outcome of the destroy verb `op` on an `object`, which returned `ret`.
fn destroyed(object: VerbsObject, op: &'static str, ret: i32) -> Result<(), TeardownError> {
    check(ret).map_err(|error| TeardownError { object, op, error })
}

/// The end of a teardown in `Drop`: a failure goes to the counter and hook.
fn report_failure(result: Result<(), TeardownError>) {
    if let Err(e) = result {
        teardown::report(&e);
    }
}

/// Keep what `arc` points to alive for the rest of the process: an object
/// whose destroy failed still exists and still depends on it.
fn keep_forever<T>(arc: &Arc<T>) {
    mem::forget(Arc::clone(arc));
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd owned by libibverbs; only the O_NONBLOCK flag
    // changes, which libibverbs documents as the way to poll its channels.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(last_err());
        }
    }
    Ok(())
}

/// The names of the RDMA devices present.
///
/// On a host without RDMA support this is an error (`ENOSYS`), not an
/// empty list, as libibverbs reports it.
pub fn device_names() -> io::Result<Vec<String>> {
    let mut n = 0;
    // SAFETY: `n` is a live int; the list is freed below.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(last_err());
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` device pointers; the name is a C string
        // owned by the device, copied out before the list is freed.
        let name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(*list.add(i))) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: from ibv_get_device_list, freed once.
    unsafe { ffi::ibv_free_device_list(list) };
    Ok(names)
}

/// An open device (`ibv_context`).
#[derive(Debug)]
pub struct Context {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    ctx: *mut ffi::ibv_context,
    /// Live [`IbvAsyncEvents`]: someone consumes the async events.
    listeners: std::sync::atomic::AtomicUsize,
}

// SAFETY: libibverbs contexts may be used from any thread, concurrently.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Open the device named `name`, or the first device with `None`.
    pub fn open(name: Option<&str>) -> io::Result<Arc<Context>> {
        let mut n = 0;
        // SAFETY: as in `device_names`.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(last_err());
        }
        let mut chosen = ptr::null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: `i < n`; the name is read while the list is alive.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a device of the live list; its name is a C string it owns.
            let dev_name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) };
            if name.is_none_or(|want| dev_name.to_bytes() == want.as_bytes()) {
                chosen = dev;
                break;
            }
        }
        let ctx = if chosen.is_null() {
            ptr::null_mut()
        } else {
            // SAFETY: a device from the live list; the context stays valid
            // after the list is freed (libibverbs keeps the device alive).
            unsafe { ffi::ibv_open_device(chosen) }
        };
        let err = last_err();
        // SAFETY: from ibv_get_device_list, freed once.
        unsafe { ffi::ibv_free_device_list(list) };
        if chosen.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no RDMA device {}", name.unwrap_or("at all")),
            ));
        }
        if ctx.is_null() {
            return Err(err);
        }
        Ok(Arc::new(Context {
            ctx,
            listeners: std::sync::atomic::AtomicUsize::new(0),
        }))
    }

    /// The raw context, for verbs this module does not wrap.
    pub fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.ctx
    }

    /// The GID at `index` of `port` (RoCE: index 0 is the link-local GID).
    pub fn gid(&self, port: u8, index: i32) -> io::Result<[u8; 16]> {
        let mut gid = ffi::ibv_gid::default();
        // SAFETY: a live context and a live out-parameter.
        check(unsafe { ffi::ibv_query_gid(self.ctx, port, index, &mut gid) })?;
        // SAFETY: `raw` is the plain-bytes view of the union.
        Ok(unsafe { gid.raw })
    }

    /// Allocate a protection domain.
    pub fn alloc_pd(self: &Arc<Self>) -> io::Result<Arc<ProtectionDomain>> {
        // SAFETY: a live context.
        let pd = unsafe { ffi::ibv_alloc_pd(self.ctx) };
        if pd.is_null() {
            return Err(last_err());
        }
        Ok(Arc::new(ProtectionDomain {
            ctx: self.clone(),
            pd,
        }))
    }

    /// A CQ of at least `depth` entries with its own completion channel
    /// (non-blocking), named `id` in events and in async CQ errors.
    pub fn create_cq(self: &Arc<Self>, depth: i32, id: CqId) -> io::Result<IbvCq> {
        // SAFETY: a live context.
        let channel = unsafe { ffi::ibv_create_comp_channel(self.ctx) };
        if channel.is_null() {
            return Err(last_err());
        }
        // SAFETY: `channel` is live; its fd belongs to it.
        let fd = unsafe { (*channel).fd };
        if let Err(e) = set_nonblocking(fd) {
            // SAFETY: created above, no CQ uses it.
            unsafe { ffi::ibv_destroy_comp_channel(channel) };
            return Err(e);
        }
        // The CQ's context pointer carries its id, so an async CQ error can
        // name the CQ without a lookup.
        let cq_context = id.0 as usize as *mut libc::c_void;
        // SAFETY: live context and channel.
        let cq = unsafe { ffi::ibv_create_cq(self.ctx, depth, cq_context, channel, 0) };
        if cq.is_null() {
            let e = last_err();
            // SAFETY: as above.
            unsafe { ffi::ibv_destroy_comp_channel(channel) };
            return Err(e);
        }
        Ok(IbvCq {
            raw: Arc::new(RawCq {
                ctx: self.clone(),
                cq,
                channel,
            }),
            // SAFETY: ibv_wc is plain integers; all-zero is a valid value.
            wcs: unsafe { MaybeUninit::zeroed().assume_init() },
            got: 0,
            acked: 0,
        })
    }

    /// This device's async events (CQ errors, QP errors, port and device
    /// events) as an [`AsyncEventSource`]. The async fd is made non-blocking.
    /// While they are held, a [`Driver`](crate::Driver) does not serve them
    /// by itself for this device's CQs (see
    /// [`CompletionQueue::device_events`]).
    pub fn async_events(self: &Arc<Self>) -> io::Result<IbvAsyncEvents> {
        // Relaxed: the count only records who listens; the events come
        // through the fd.
        self.listeners
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.listening()
    }

    /// The events for a listener already counted (whose Drop uncounts it,
    /// also when this fails).
    fn listening(self: &Arc<Self>) -> io::Result<IbvAsyncEvents> {
        let events = IbvAsyncEvents { ctx: self.clone() };
        // SAFETY: a live context.
        set_nonblocking(unsafe { (*self.ctx).async_fd })?;
        Ok(events)
    }

    /// Close the device now, if this is the last handle to it.
    ///
    /// Every object made from the context (protection domains, CQs, async
    /// events, and through them MRs and QPs) holds a handle, so they must
    /// be gone first. While any handle is alive, nothing is closed and the
    /// error [`CloseError::InUse`] hands this one back. (Two threads each
    /// closing one of the last two handles both get `InUse`.)
    ///
    /// ```no_run
    /// use evd_verbs::ibv::Context;
    /// use evd_verbs::CloseError;
    /// let ctx = Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let ctx = match ctx.close() {
    ///     Err(CloseError::InUse { handle, .. }) => handle, // `pd` holds it
    ///     other => panic!("{other:?}"),
    /// };
    /// pd.close()?;
    /// ctx.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(self: Arc<Self>) -> Result<(), CloseError<Arc<Context>>> {
        match Arc::try_unwrap(self) {
            Ok(mut ctx) => ctx.destroy().map_err(CloseError::Failed),
            Err(handle) => Err(CloseError::InUse {
                object: VerbsObject::Context,
                handle,
            }),
        }
    }

    fn destroy(&mut self) -> Result<(), TeardownError> {
        let ctx = mem::replace(&mut self.ctx, ptr::null_mut());
        if ctx.is_null() {
            return Ok(());
        }
        // SAFETY: from ibv_open_device, and nulled above so closed at most
        // once; every object made from it holds an Arc to it (one whose
        // destroy failed, forever), so none is left.
        let ret = unsafe { ffi::ibv_close_device(ctx) };
        destroyed(VerbsObject::Context, "ibv_close_device", ret)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}

/// A protection domain.
#[derive(Debug)]
pub struct ProtectionDomain {
    ctx: Arc<Context>,
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    pd: *mut ffi::ibv_pd,
}

// SAFETY: libibverbs objects may be used from any thread.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain {}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}

impl ProtectionDomain {
    /// Deallocate the domain now, if this is the last handle to it.
    ///
    /// Memory regions and QPs made from it hold a handle, so they must be
    /// gone first. While any handle is alive, nothing is deallocated and
    /// the error [`CloseError::InUse`] hands this one back.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let mr = pd.register(4096)?;
    /// mr.close()?;
    /// pd.close()?;
    /// ctx.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(self: Arc<Self>) -> Result<(), CloseError<Arc<ProtectionDomain>>> {
        match Arc::try_unwrap(self) {
            Ok(mut pd) => pd.destroy().map_err(CloseError::Failed),
            Err(handle) => Err(CloseError::InUse {
                object: VerbsObject::ProtectionDomain,
                handle,
            }),
        }
    }

    fn destroy(&mut self) -> Result<(), TeardownError> {
        let pd = mem::replace(&mut self.pd, ptr::null_mut());
        if pd.is_null() {
            return Ok(());
        }
        // SAFETY: from ibv_alloc_pd, and nulled above so deallocated at most
        // once; MRs and QPs hold an Arc to it (one whose destroy failed,
        // forever), so none is left.
        let ret = unsafe { ffi::ibv_dealloc_pd(pd) };
        destroyed(VerbsObject::ProtectionDomain, "ibv_dealloc_pd", ret).inspect_err(|_| {
            keep_forever(&self.ctx);
        })
    }

    /// The context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Register a zeroed buffer of `len` bytes for local and remote
    /// read/write access.
    pub fn register(self: &Arc<Self>, len: usize) -> io::Result<MemoryRegion> {
        let mut buf = vec![0u8; len.max(1)].into_boxed_slice();
        let access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        // SAFETY: the buffer lives in the MemoryRegion, which frees it only
        // after a successful deregistration (`destroy`).
        let mr =
            unsafe { ffi::ibv_reg_mr(self.pd, buf.as_mut_ptr().cast(), buf.len(), access as i32) };
        if mr.is_null() {
            return Err(last_err());
        }
        Ok(MemoryRegion {
            mr,
            buf,
            pd: self.clone(),
        })
    }

    /// A reliable-connected QP on `send_cq` and `recv_cq`, in the INIT
    /// state; connect it with [`QueuePair::connect`].
    pub fn create_rc_qp(
        self: &Arc<Self>,
        send_cq: &IbvCq,
        recv_cq: &IbvCq,
        max_wr: u32,
    ) -> io::Result<QueuePair> {
        let mut init = ffi::ibv_qp_init_attr {
            send_cq: send_cq.raw.cq,
            recv_cq: recv_cq.raw.cq,
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
            ..Default::default()
        };
        init.cap.max_send_wr = max_wr;
        init.cap.max_recv_wr = max_wr;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: live PD and CQs; the QP keeps Arcs to both CQs.
        let qp = unsafe { ffi::ibv_create_qp(self.pd, &mut init) };
        if qp.is_null() {
            return Err(last_err());
        }
        let qp = QueuePair {
            qp,
            send_cq: send_cq.raw.clone(),
            recv_cq: recv_cq.raw.clone(),
            pd: self.clone(),
        };
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
                | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
                | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0,
            ..Default::default()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE.0
            | ffi::ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | ffi::ibv_qp_attr_mask::IBV_QP_PORT.0
            | ffi::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
        qp.modify(&mut attr, mask)?;
        Ok(qp)
    }
}

/// A registered buffer.
pub struct MemoryRegion {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    mr: *mut ffi::ibv_mr,
    /// Registered while `mr` is non-null.
    buf: Box<[u8]>,
    pd: Arc<ProtectionDomain>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("mr", &self.mr)
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.buf.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish_non_exhaustive()
    }
}

// SAFETY: the MR is used through libibverbs (thread-safe) and the buffer is
// owned; the hardware writes it only while work requests that the owner
// posted are outstanding.
unsafe impl Send for MemoryRegion {}

impl MemoryRegion {
    /// The buffer.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
    /// The buffer, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    /// The address remote peers write to.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).lkey }
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).rkey }
    }
    fn sge(&self, offset: usize, len: usize) -> ffi::ibv_sge {
        assert!(offset + len <= self.buf.len(), "range outside the region");
        ffi::ibv_sge {
            addr: self.addr() + offset as u64,
            length: len as u32,
            lkey: self.lkey(),
        }
    }
}

impl MemoryRegion {
    /// Deregister the region now and free its buffer.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// pd.register(4096)?.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(mut self) -> Result<(), TeardownError> {
        self.destroy()
    }

    fn destroy(&mut self) -> Result<(), TeardownError> {
        let mr = mem::replace(&mut self.mr, ptr::null_mut());
        if mr.is_null() {
            return Ok(());
        }
        // SAFETY: from ibv_reg_mr, and nulled above so deregistered at most
        // once.
        let ret = unsafe { ffi::ibv_dereg_mr(mr) };
        destroyed(VerbsObject::MemoryRegion, "ibv_dereg_mr", ret).inspect_err(|_| {
            // Still registered: the HCA may write the buffer, so it is never
            // freed.
            Box::leak(mem::take(&mut self.buf));
            keep_forever(&self.pd);
        })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}

/// What a remote peer needs to connect to a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// QP number.
    pub qp_num: u32,
    /// GID (RoCE address).
    pub gid: [u8; 16],
    /// First packet sequence number.
    pub psn: u32,
}

/// The operation of a send work request.
#[derive(Clone, Copy, Debug)]
pub enum SendOp {
    /// A send, consuming a receive at the peer.
    Send,
    /// An RDMA write into the peer's memory.
    Write {
        /// Peer address.
        remote_addr: u64,
        /// Peer rkey.
        rkey: u32,
    },
    /// An RDMA write with immediate: also consumes a receive at the peer,
    /// whose completion carries `imm` (host order here).
    WriteWithImm {
        /// Peer address.
        remote_addr: u64,
        /// Peer rkey.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
}

/// A reliable-connected queue pair. Holds its CQs and PD alive.
pub struct QueuePair {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    qp: *mut ffi::ibv_qp,
    send_cq: Arc<RawCq>,
    recv_cq: Arc<RawCq>,
    pd: Arc<ProtectionDomain>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp", &self.qp)
            .field("qp_num", &self.qp_num())
            .field("send_cq", &self.send_cq.cq)
            .field("recv_cq", &self.recv_cq.cq)
            .field("pd", &self.pd.pd)
            .finish()
    }
}

// SAFETY: libibverbs QPs may be used from any thread.
unsafe impl Send for QueuePair {}

impl QueuePair {
    fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> io::Result<()> {
        // SAFETY: a live QP and attribute struct.
        check(unsafe { ffi::ibv_modify_qp(self.qp, attr, mask as i32) })
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: a live QP.
        unsafe { (*self.qp).qp_num }
    }

    /// This QP's endpoint, with the port-1 GID at `gid_index`.
    pub fn endpoint(&self, gid_index: i32) -> io::Result<Endpoint> {
        Ok(Endpoint {
            qp_num: self.qp_num(),
            gid: self.pd.ctx.gid(1, gid_index)?,
            psn: 0,
        })
    }

    /// Move to RTR then RTS, connected to `remote` over RoCE (GRH with
    /// `gid_index`, port 1, 1024-byte MTU).
    pub fn connect(&self, remote: Endpoint, gid_index: u8) -> io::Result<()> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: ffi::IBV_MTU_1024,
            dest_qp_num: remote.qp_num,
            rq_psn: remote.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        attr.ah_attr.is_global = 1;
        attr.ah_attr.port_num = 1;
        attr.ah_attr.grh.dgid = ffi::ibv_gid { raw: remote.gid };
        attr.ah_attr.grh.sgid_index = gid_index;
        attr.ah_attr.grh.hop_limit = 1;
        let m = |f: ffi::ibv_qp_attr_mask| f.0;
        use ffi::ibv_qp_attr_mask as M;
        self.modify(
            &mut attr,
            m(M::IBV_QP_STATE)
                | m(M::IBV_QP_AV)
                | m(M::IBV_QP_PATH_MTU)
                | m(M::IBV_QP_DEST_QPN)
                | m(M::IBV_QP_RQ_PSN)
                | m(M::IBV_QP_MAX_DEST_RD_ATOMIC)
                | m(M::IBV_QP_MIN_RNR_TIMER),
        )?;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            m(M::IBV_QP_STATE)
                | m(M::IBV_QP_TIMEOUT)
                | m(M::IBV_QP_RETRY_CNT)
                | m(M::IBV_QP_RNR_RETRY)
                | m(M::IBV_QP_SQ_PSN)
                | m(M::IBV_QP_MAX_QP_RD_ATOMIC),
        )
    }

    /// Move the QP to the error state: its outstanding and later work
    /// requests complete with `WR_FLUSH_ERR`.
    pub fn set_error(&self) -> io::Result<()> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut attr, ffi::ibv_qp_attr_mask::IBV_QP_STATE.0)
    }

    /// Post a receive of `len` bytes at `offset` of `mr`.
    pub fn post_recv(
        &self,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
    ) -> io::Result<()> {
        let mut sge = mr.sge(offset, len);
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: a live QP; the WR and SGE live across the call (the
        // provider copies them); the buffer is the caller's registered MR,
        // which must outlive the receive (the QP keeps nothing of it).
        check(unsafe {
            let ctx = (*self.qp).context;
            let post = (*ctx).ops.post_recv.expect("provider has post_recv");
            post(self.qp, &mut wr, &mut bad)
        })
    }

    /// Post a signaled send-side work request from `len` bytes at `offset`
    /// of `mr` (`solicited` sets the solicited-event bit).
    pub fn post_send(
        &self,
        wr_id: u64,
        op: SendOp,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        solicited: bool,
    ) -> io::Result<()> {
        let mut sge = mr.sge(offset, len);
        let mut flags = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        if solicited {
            flags |= ffi::ibv_send_flags::IBV_SEND_SOLICITED.0;
        }
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: if len == 0 { 0 } else { 1 },
            send_flags: flags,
            ..Default::default()
        };
        match op {
            SendOp::Send => wr.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND,
            SendOp::Write { remote_addr, rkey } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            }
            SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
                wr.__bindgen_anon_1.imm_data = imm.to_be();
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: as in `post_recv`.
        check(unsafe {
            let ctx = (*self.qp).context;
            let post = (*ctx).ops.post_send.expect("provider has post_send");
            post(self.qp, &mut wr, &mut bad)
        })
    }
}

impl QueuePair {
    /// Destroy the QP now; its CQs and PD can be closed after. Work
    /// requests still outstanding get no completion (to have them flushed,
    /// [`set_error`](QueuePair::set_error) and drain the CQs first).
    ///
    /// ```no_run
    /// use evd_verbs::CqId;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16, CqId(0))?;
    /// let qp = pd.create_rc_qp(&cq, &cq, 8)?;
    /// qp.close()?;
    /// cq.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(mut self) -> Result<(), TeardownError> {
        self.destroy()
    }

    fn destroy(&mut self) -> Result<(), TeardownError> {
        let qp = mem::replace(&mut self.qp, ptr::null_mut());
        if qp.is_null() {
            return Ok(());
        }
        // SAFETY: from ibv_create_qp, and nulled above so destroyed at most
        // once; its CQs and PD are alive (it holds Arcs to them).
        let ret = unsafe { ffi::ibv_destroy_qp(qp) };
        destroyed(VerbsObject::QueuePair, "ibv_destroy_qp", ret).inspect_err(|_| {
            keep_forever(&self.send_cq);
            keep_forever(&self.recv_cq);
            keep_forever(&self.pd);
        })
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}

/// The CQ and channel themselves, shared by the [`IbvCq`] and the QPs that
/// use the CQ, and destroyed after the last of them.
#[derive(Debug)]
struct RawCq {
    ctx: Arc<Context>,
    /// Both non-null until `destroy`, which only `IbvCq::close` and `Drop`
    /// call; `channel` is nulled only after `cq` is destroyed.
    cq: *mut ffi::ibv_cq,
    channel: *mut ffi::ibv_comp_channel,
}

// SAFETY: libibverbs CQs and channels may be used from any thread.
unsafe impl Send for RawCq {}
// SAFETY: as above; the only shared use is destroy, once, in Drop.
unsafe impl Sync for RawCq {}

impl RawCq {
    /// Destroy the CQ, then its channel. A CQ whose destroy failed still
    /// uses its channel, so the channel is then left alone (libibverbs would
    /// refuse it with `EBUSY` anyway) and leaks with it.
    fn destroy(&mut self) -> Result<(), TeardownError> {
        let cq = mem::replace(&mut self.cq, ptr::null_mut());
        if !cq.is_null() {
            // SAFETY: from ibv_create_cq, and nulled above so destroyed at
            // most once; no QP uses it (each holds an Arc to this RawCq),
            // and the IbvCq acknowledged every event it got before letting
            // go, so ibv_destroy_cq does not wait for acks.
            let ret = unsafe { ffi::ibv_destroy_cq(cq) };
            destroyed(VerbsObject::CompletionQueue, "ibv_destroy_cq", ret).inspect_err(|_| {
                self.channel = ptr::null_mut();
                keep_forever(&self.ctx);
            })?;
        }
        let channel = mem::replace(&mut self.channel, ptr::null_mut());
        if channel.is_null() {
            return Ok(());
        }
        // SAFETY: from ibv_create_comp_channel, and nulled above so
        // destroyed at most once; its only CQ was destroyed above.
        let ret = unsafe { ffi::ibv_destroy_comp_channel(channel) };
        destroyed(
            VerbsObject::CompletionChannel,
            "ibv_destroy_comp_channel",
            ret,
        )
        .inspect_err(|_| keep_forever(&self.ctx))
    }
}

impl Drop for RawCq {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}

/// A libibverbs CQ with its own completion channel: the
/// [`CompletionQueue`] of real verbs. Dropping it acknowledges any event
/// still unacknowledged, then destroys the CQ and its channel once no QP
/// uses the CQ ([`close`](IbvCq::close) does it now, or refuses).
pub struct IbvCq {
    raw: Arc<RawCq>,
    wcs: [ffi::ibv_wc; POLL_BATCH],
    got: u64,
    acked: u64,
}

impl fmt::Debug for IbvCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbvCq")
            .field("cq", &self.raw.cq)
            .field("channel", &self.raw.channel)
            .field("events_got", &self.got)
            .field("events_acked", &self.acked)
            .finish_non_exhaustive()
    }
}

impl IbvCq {
    /// The raw CQ, for verbs this module does not wrap.
    pub fn as_ptr(&self) -> *mut ffi::ibv_cq {
        self.raw.cq
    }

    /// Acknowledge every event still unacknowledged, then destroy the CQ,
    /// then its completion channel.
    ///
    /// QPs made on this CQ hold it, so they must be gone first: while one
    /// is alive, nothing is acknowledged or destroyed and the error
    /// [`CloseError::InUse`] hands the CQ back. If destroying the CQ fails,
    /// the channel is not destroyed (the CQ still uses it); the error names
    /// whichever of the two failed.
    ///
    /// ```no_run
    /// use evd_verbs::{CloseError, CqId};
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16, CqId(0))?;
    /// let qp = pd.create_rc_qp(&cq, &cq, 8)?;
    /// let cq = match cq.close() {
    ///     Err(CloseError::InUse { handle, .. }) => handle, // `qp` uses it
    ///     other => panic!("{other:?}"),
    /// };
    /// qp.close()?;
    /// cq.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    // The error is large because it carries the IbvCq itself (its poll
    // array), which is moved by value into and out of feeds anyway.
    #[allow(clippy::result_large_err)]
    pub fn close(mut self) -> Result<(), CloseError<IbvCq>> {
        if Arc::get_mut(&mut self.raw).is_none() {
            return Err(CloseError::InUse {
                object: VerbsObject::CompletionQueue,
                handle: self,
            });
        }
        self.ack_unacked();
        Arc::get_mut(&mut self.raw)
            .expect("RawCq clones are made only from a &IbvCq, which owning self rules out")
            .destroy()
            .map_err(CloseError::Failed)
    }

    /// Acknowledge the events got and not yet acknowledged, as
    /// ibv_destroy_cq waits for.
    fn ack_unacked(&mut self) {
        while self.got > self.acked {
            let n = u32::try_from(self.got - self.acked).unwrap_or(u32::MAX);
            self.ack_events(n);
        }
    }
}

fn convert(wc: &ffi::ibv_wc) -> WorkCompletion {
    let (status, vendor_err) = wc
        .error()
        .unwrap_or((ffi::ibv_wc_status::IBV_WC_SUCCESS, 0));
    WorkCompletion {
        wr_id: wc.wr_id(),
        status: WcStatus(status),
        opcode: WcOpcode(wc.opcode()),
        vendor_err,
        byte_len: wc.len() as u32,
        // On the wire (and in ibv_wc) the immediate is big-endian.
        imm_data: u32::from_be(wc.imm_data),
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        wc_flags: WcFlags(wc.wc_flags.0),
    }
}

impl CompletionQueue for IbvCq {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, PollError> {
        let mut total = 0;
        // The provider fills our array of POLL_BATCH entries per call.
        for chunk in out.chunks_mut(POLL_BATCH) {
            // SAFETY: a live CQ; the provider writes at most `chunk.len()`
            // (<= POLL_BATCH) entries into `wcs`.
            let n = unsafe {
                let cq = self.raw.cq;
                let poll = (*(*cq).context).ops.poll_cq.expect("provider has poll_cq");
                poll(cq, chunk.len() as i32, self.wcs.as_mut_ptr())
            };
            if n < 0 {
                return Err(PollError::Failed(-n));
            }
            let n = n as usize;
            for (o, wc) in chunk.iter_mut().zip(&self.wcs[..n]) {
                *o = convert(wc);
            }
            total += n;
            if n < chunk.len() {
                break;
            }
        }
        Ok(total)
    }

    fn req_notify(&mut self, solicited_only: bool) -> io::Result<()> {
        // SAFETY: a live CQ.
        check(unsafe {
            let cq = self.raw.cq;
            let arm = (*(*cq).context)
                .ops
                .req_notify_cq
                .expect("provider has req_notify_cq");
            arm(cq, solicited_only as i32)
        })
    }

    fn channel_fd(&self) -> Option<RawFd> {
        // SAFETY: a live channel.
        Some(unsafe { (*self.raw.channel).fd })
    }

    fn get_event(&mut self) -> io::Result<bool> {
        let mut cq = ptr::null_mut();
        let mut ctx = ptr::null_mut();
        // SAFETY: a live, non-blocking channel; out-parameters are locals.
        let r = unsafe { ffi::ibv_get_cq_event(self.raw.channel, &mut cq, &mut ctx) };
        if r != 0 {
            let e = last_err();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(false)
            } else {
                Err(e)
            };
        }
        // One channel per CQ: the event is ours.
        debug_assert_eq!(cq, self.raw.cq);
        self.got += 1;
        Ok(true)
    }

    fn ack_events(&mut self, count: u32) {
        // SAFETY: a live CQ; `count` events were got and not yet acked (the
        // feed's accounting), as ibv_ack_cq_events requires.
        unsafe { ffi::ibv_ack_cq_events(self.raw.cq, count) };
        self.acked += u64::from(count);
    }

    fn device_events(&self) -> Option<Box<dyn AsyncEventSource>> {
        use std::sync::atomic::Ordering::Relaxed;
        let ctx = &self.raw.ctx;
        // Take them only if nobody listens: 0 -> 1.
        ctx.listeners
            .compare_exchange(0, 1, Relaxed, Relaxed)
            .ok()?;
        // A failure to make the fd non-blocking drops the listener again.
        let events = ctx.listening().ok()?;
        Some(Box::new(events))
    }
}

impl Drop for IbvCq {
    fn drop(&mut self) {
        // The RawCq, destroyed after the last QP using it lets go, reports
        // its own failures.
        self.ack_unacked();
    }
}

/// A device's async events (the context's async fd).
#[derive(Debug)]
pub struct IbvAsyncEvents {
    ctx: Arc<Context>,
}

impl Drop for IbvAsyncEvents {
    fn drop(&mut self) {
        // One listener fewer: with none left, a later driver may take them.
        self.ctx
            .listeners
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl AsyncEventSource for IbvAsyncEvents {
    fn fd(&self) -> RawFd {
        // SAFETY: a live context.
        unsafe { (*self.ctx.ctx).async_fd }
    }

    fn next_event(&mut self) -> io::Result<Option<AsyncEvent>> {
        let mut ev = ffi::ibv_async_event::default();
        // SAFETY: a live context with a non-blocking async fd.
        if unsafe { ffi::ibv_get_async_event(self.ctx.ctx, &mut ev) } != 0 {
            let e = last_err();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let kind = AsyncEventKind::from_raw(ev.event_type);
        // SAFETY: the union member to read is the one the event type names
        // (ibv_get_async_event(3)).
        let element = unsafe {
            use AsyncEventKind::*;
            match kind {
                CqError => AsyncElement::Cq(CqId((*ev.element.cq).cq_context as usize as u32)),
                QpFatal | QpRequestError | QpAccessError | CommEstablished | SqDrained
                | PathMigrated | PathMigrationError | QpLastWqeReached => {
                    AsyncElement::Qp((*ev.element.qp).qp_num)
                }
                SrqError | SrqLimitReached => AsyncElement::Srq,
                WqFatal => AsyncElement::Wq,
                PortActive | PortError | LidChange | PkeyChange | SmChange | ClientReregister
                | GidChange => AsyncElement::Port(ev.element.port_num as u8),
                DeviceFatal | Other(_) => AsyncElement::Device,
            }
        };
        // Copied out: acknowledge at once (ibv_ack_async_event(3)).
        // SAFETY: the event just got, acked once.
        unsafe { ffi::ibv_ack_async_event(&mut ev) };
        Ok(Some(AsyncEvent { kind, element }))
    }
}
