//! The device: listing devices, opening one (`ibv_context`), its GIDs.

use super::cq::RawCq;
use super::*;
use crate::event::CqId;
use crate::feed::POLL_BATCH;
use crate::teardown::{CloseError, TeardownError, VerbsObject};
use std::ffi::CStr;
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;

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
    pub(super) ctx: *mut ffi::ibv_context,
    /// Live [`IbvAsyncEvents`]: someone consumes the async events.
    pub(super) listeners: std::sync::atomic::AtomicUsize,
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
        let mut gid: ffi::ibv_gid = zeroed();
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
            wcs: [zeroed(); POLL_BATCH],
            got: 0,
            acked: 0,
        })
    }

    /// This device's async events (CQ errors, QP errors, port and device
    /// events) as an [`AsyncEventSource`](crate::AsyncEventSource). The async fd is made non-blocking.
    /// While they are held, a [`Driver`](crate::Driver) does not serve them
    /// by itself for this device's CQs (see
    /// [`CompletionQueue::device_events`](crate::CompletionQueue::device_events)).
    pub fn async_events(self: &Arc<Self>) -> io::Result<IbvAsyncEvents> {
        // Relaxed: the count only records who listens; the events come
        // through the fd.
        self.listeners
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.listening()
    }

    /// The events for a listener already counted (whose Drop uncounts it,
    /// also when this fails).
    pub(super) fn listening(self: &Arc<Self>) -> io::Result<IbvAsyncEvents> {
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
