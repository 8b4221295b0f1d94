//! The device: listing devices, opening one (`ibv_context`) or wrapping
//! one opened elsewhere, its GIDs, protection domains and async events, and
//! the registry of its CQs that names them in async events (creating CQs
//! and channels: `cqs.rs`).

use super::teardown::{CloseError, TeardownError, VerbsObject};
use super::*;
use crate::event::CqId;
use std::ffi::CStr;
use std::io;
use std::mem;
use std::ptr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

mod cqs;

pub use cqs::CqConfig;

/// The names of the RDMA devices present.
///
/// On a host without RDMA support this is an error (`ENOSYS`), not an
/// empty list, as libibverbs reports it.
///
/// # Errors
///
/// The errno of `ibv_get_device_list` (`ENOSYS` without RDMA support).
///
/// ```no_run
/// for name in evd_verbs::ibv::device_names()? {
///     println!("{name}");
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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

/// Who destroys a verbs object wrapped from a raw pointer: this crate
/// ([`Owned`](Ownership::Owned)) or whoever made it
/// ([`Borrowed`](Ownership::Borrowed)).
///
/// ```no_run
/// use evd_verbs::ibv::{ffi, Context, Ownership};
/// // A context opened elsewhere: here with raw calls; librdmacm's
/// // `(*cm_id).verbs` is another.
/// // SAFETY: the list is live; its first device is opened, the list freed.
/// let raw = unsafe {
///     let mut n = 0;
///     let list = ffi::ibv_get_device_list(&mut n);
///     let ctx = ffi::ibv_open_device(*list);
///     ffi::ibv_free_device_list(list);
///     ctx
/// };
/// // SAFETY: its opener keeps the device open until the wrapper is gone.
/// let ctx = unsafe { Context::from_raw(raw, Ownership::Borrowed) };
/// assert_eq!(ctx.ownership(), Ownership::Borrowed);
/// drop(ctx); // the device stays open
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// The wrapper destroys the object (on `close` or drop), as if it had
    /// made it.
    Owned,
    /// The wrapper never destroys the object: its maker does, after the
    /// wrapper (and everything made from it) is gone.
    Borrowed,
}

/// A device context (`ibv_context`): opened here with [`open`](Context::open),
/// or wrapped with [`from_raw`](Context::from_raw).
#[derive(Debug)]
pub struct Context {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    pub(super) ctx: *mut ffi::ibv_context,
    /// Whether `destroy` closes the device.
    ownership: Ownership,
    /// Live [`IbvAsyncEvents`]: someone consumes the async events.
    pub(super) listeners: AtomicUsize,
    /// The CQs wrapped on this context (made by `create_cq_with` or
    /// wrapped by `IbvCq::from_raw`) by address, with their ids: how an
    /// async CQ error names its CQ, leaving `cq_context` to the caller.
    /// Not a hot path: locked on CQ creation, destruction and async CQ
    /// errors only.
    cqs: Mutex<Vec<(usize, CqId)>>,
}

// SAFETY: libibverbs contexts may be used from any thread, concurrently.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Open the device named `name`, or the first device with `None`.
    ///
    /// # Errors
    ///
    /// [`NotFound`](io::ErrorKind::NotFound) if no device (or none named
    /// `name`) is present; the errno of `ibv_get_device_list` or
    /// `ibv_open_device`.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{device_names, Context};
    /// let first = Context::open(None)?;
    /// let named = Context::open(Some(&device_names()?[0]))?;
    /// # drop((first, named));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
        Ok(Arc::new(Context::wrap(ctx, Ownership::Owned)))
    }

    fn wrap(ctx: *mut ffi::ibv_context, ownership: Ownership) -> Context {
        Context {
            ctx,
            ownership,
            listeners: AtomicUsize::new(0),
            cqs: Mutex::new(Vec::new()),
        }
    }

    /// Wrap a device context opened elsewhere.
    ///
    /// With [`Ownership::Owned`] the last handle closes the device
    /// (`ibv_close_device`, on [`close`](Context::close) or drop) as for
    /// [`open`](Context::open); with [`Ownership::Borrowed`] it is never
    /// closed here: for instance the context librdmacm opened
    /// (`rdma_cm_id::verbs`), which librdmacm closes itself.
    ///
    /// # Safety
    /// - `ctx` is a live context returned by `ibv_open_device` (or by a
    ///   library that opened it that way, such as librdmacm).
    /// - `Owned`: nobody else closes it; from now on it belongs to the
    ///   returned handle.
    /// - `Borrowed`: its owner keeps it open until the returned handle and
    ///   every object made from it (protection domains, CQs, async events,
    ///   and through them MRs and QPs) are gone.
    /// - It is wrapped once at a time: two wrappers would both consume its
    ///   async events and keep separate CQ registries.
    ///
    /// A borrowed context's async events stay its owner's: a
    /// [`Driver`](crate::Driver) serving its CQs does not take them by
    /// itself (as it does for an owned context nobody listens to); call
    /// [`async_events`](Context::async_events) to serve them.
    ///
    /// # Panics
    /// If `ctx` is null.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{ffi, Context, Ownership};
    /// let mut n = 0;
    /// // SAFETY: `n` is a live int; the list is freed below.
    /// let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    /// assert!(!list.is_null() && n > 0);
    /// // SAFETY: the first device of a live list.
    /// let raw = unsafe { ffi::ibv_open_device(*list) };
    /// // SAFETY: from ibv_get_device_list, freed once.
    /// unsafe { ffi::ibv_free_device_list(list) };
    /// assert!(!raw.is_null());
    /// // SAFETY: just opened, handed over: the wrapper closes it.
    /// let ctx = unsafe { Context::from_raw(raw, Ownership::Owned) };
    /// assert_eq!(ctx.as_ptr(), raw);
    /// ctx.close()?; // ibv_close_device
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn from_raw(ctx: *mut ffi::ibv_context, ownership: Ownership) -> Arc<Context> {
        assert!(!ctx.is_null(), "Context::from_raw of a null context");
        Arc::new(Context::wrap(ctx, ownership))
    }

    /// The raw context, for verbs this module does not wrap.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{ffi, Context};
    /// let ctx = Context::open(None)?;
    /// // SAFETY: a live context; the name is a C string it owns.
    /// let name = unsafe { std::ffi::CStr::from_ptr(ffi::ibv_get_device_name((*ctx.as_ptr()).device)) };
    /// println!("{name:?}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.ctx
    }

    /// Whether this handle closes the device ([`Ownership::Owned`]: made
    /// by [`open`](Context::open) or handed over to
    /// [`from_raw`](Context::from_raw)) or not.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{Context, Ownership};
    /// assert_eq!(Context::open(None)?.ownership(), Ownership::Owned);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    fn cqs(&self) -> MutexGuard<'_, Vec<(usize, CqId)>> {
        // A panic while holding it cannot leave the Vec inconsistent.
        self.cqs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Name the CQ at `cq` `id` in async events.
    pub(super) fn register_cq(&self, cq: *mut ffi::ibv_cq, id: CqId) {
        self.cqs().push((cq as usize, id));
    }

    /// Forget the CQ at `cq` named `id` (one registration of it).
    pub(super) fn unregister_cq(&self, cq: *mut ffi::ibv_cq, id: CqId) {
        let mut cqs = self.cqs();
        if let Some(i) = cqs.iter().rposition(|&e| e == (cq as usize, id)) {
            // In order: `cq_id` takes the latest wrapping as the last one.
            cqs.remove(i);
        }
    }

    /// The id of the CQ at `cq`, if it is wrapped on this context (the
    /// latest wrapping, if several).
    pub(super) fn cq_id(&self, cq: *mut ffi::ibv_cq) -> Option<CqId> {
        let cqs = self.cqs();
        cqs.iter()
            .rev()
            .find(|&&(p, _)| p == cq as usize)
            .map(|&(_, id)| id)
    }

    /// The GID at `index` of `port` (RoCE: index 0 is the link-local GID).
    ///
    /// # Errors
    ///
    /// The errno of `ibv_query_gid`, as an [`io::Error`] (`EINVAL` for a port or
    /// index the device does not have).
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let gid = ctx.gid(1, 0)?;
    /// println!("{gid:02x?}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn gid(&self, port: u8, index: i32) -> io::Result<[u8; 16]> {
        let mut gid: ffi::ibv_gid = zeroed();
        // SAFETY: a live context and a live out-parameter.
        check(unsafe { ffi::ibv_query_gid(self.ctx, port, index, &mut gid) })?;
        // SAFETY: `raw` is the plain-bytes view of the union.
        Ok(unsafe { gid.raw })
    }

    /// Close the device now, if this is the last handle to it (a
    /// [`Borrowed`](Ownership::Borrowed) context is let go without closing
    /// it).
    ///
    /// Every object made from the context (protection domains, CQs, async
    /// events, and through them MRs and QPs) holds a handle, so they must
    /// be gone first. While any handle is alive, nothing is closed and the
    /// error [`CloseError::InUse`] hands this one back. (Two threads each
    /// closing one of the last two handles both get `InUse`.)
    ///
    /// # Errors
    ///
    /// [`CloseError::InUse`] (with this handle) while other handles are
    /// alive; [`CloseError::Failed`] if `ibv_close_device` fails.
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
        if ctx.is_null() || self.ownership == Ownership::Borrowed {
            return Ok(());
        }
        // SAFETY: from ibv_open_device (here, or handed over to `from_raw`
        // as Owned), and nulled above so closed at most
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
