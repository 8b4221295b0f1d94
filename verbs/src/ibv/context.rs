//! The device: listing devices, opening one (`ibv_context`) or wrapping
//! one opened elsewhere, its GIDs, and the registry of its CQs that names
//! them in async events.

use super::teardown::{CloseError, TeardownError, VerbsObject};
use super::*;
use crate::event::CqId;
use std::ffi::CStr;
use std::io;
use std::mem;
use std::ptr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

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

/// How to make a CQ with [`Context::create_cq_with`].
///
/// ```no_run
/// use evd_verbs::ibv::{Context, CqConfig};
/// use evd_verbs::CqId;
/// let ctx = Context::open(None)?;
/// let mine = Box::into_raw(Box::new(7u64)); // the application's own state
/// let mut config = CqConfig::new(256, CqId(1));
/// config.cq_context = mine.cast();
/// let cq = ctx.create_cq_with(&config)?;
/// // SAFETY: a live CQ; libibverbs keeps `cq_context` as given.
/// assert_eq!(unsafe { (*cq.as_ptr()).cq_context }, mine.cast());
/// drop(cq);
/// // SAFETY: from Box::into_raw above, freed once, after the CQ is gone.
/// drop(unsafe { Box::from_raw(mine) });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CqConfig {
    /// The minimum number of entries (the provider may round it up).
    pub depth: i32,
    /// The CQ's name in events and in async CQ errors.
    pub id: CqId,
    /// The completion vector (interrupt) its channel events come from,
    /// `0..num_comp_vectors` of the device; 0 by default.
    pub comp_vector: i32,
    /// The caller's pointer that libibverbs stores in the CQ
    /// (`ibv_cq::cq_context`, returned by `ibv_get_cq_event`). This crate
    /// never reads or frees it; null by default.
    pub cq_context: *mut libc::c_void,
}

impl CqConfig {
    /// `depth` entries named `id`, on completion vector 0, with a null
    /// `cq_context`.
    ///
    /// ```
    /// use evd_verbs::ibv::CqConfig;
    /// let c = CqConfig::new(64, evd_verbs::CqId(3));
    /// assert_eq!((c.depth, c.comp_vector), (64, 0));
    /// assert!(c.cq_context.is_null());
    /// ```
    pub fn new(depth: i32, id: CqId) -> CqConfig {
        CqConfig {
            depth,
            id,
            comp_vector: 0,
            cq_context: ptr::null_mut(),
        }
    }
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
            cqs.swap_remove(i);
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

    /// Allocate a protection domain.
    ///
    /// # Errors
    ///
    /// The errno of `ibv_alloc_pd`, as an [`io::Error`].
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// assert!(std::sync::Arc::ptr_eq(pd.context(), &ctx));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    /// (non-blocking), named `id` in events and in async CQ errors, on
    /// completion vector 0 with a null `cq_context`: shorthand for
    /// [`create_cq_with`](Context::create_cq_with).
    ///
    /// # Errors
    ///
    /// As [`create_cq_with`](Context::create_cq_with).
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let cq = ctx.create_cq(64, evd_verbs::CqId(1))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_cq(self: &Arc<Self>, depth: i32, id: CqId) -> io::Result<IbvCq> {
        self.create_cq_with(&CqConfig::new(depth, id))
    }

    /// A CQ as `config` says, with its own completion channel
    /// (non-blocking). `config.cq_context` is stored in the CQ untouched;
    /// async CQ errors name the CQ by `config.id` through this context's
    /// registry instead.
    ///
    /// # Errors
    ///
    /// The errno of `ibv_create_comp_channel` or `ibv_create_cq` (`EINVAL`
    /// for a depth over the device's maximum), or of making the channel's fd
    /// non-blocking; nothing is left behind.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{Context, CqConfig};
    /// let ctx = Context::open(None)?;
    /// let mut config = CqConfig::new(1024, evd_verbs::CqId(9));
    /// config.comp_vector = 1;
    /// let cq = ctx.create_cq_with(&config)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_cq_with(self: &Arc<Self>, config: &CqConfig) -> io::Result<IbvCq> {
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
        // SAFETY: live context and channel; `cq_context` is only stored.
        let cq = unsafe {
            ffi::ibv_create_cq(
                self.ctx,
                config.depth,
                config.cq_context,
                channel,
                config.comp_vector,
            )
        };
        if cq.is_null() {
            let e = last_err();
            // SAFETY: as above.
            unsafe { ffi::ibv_destroy_comp_channel(channel) };
            return Err(e);
        }
        Ok(IbvCq::wrap(
            self,
            cq,
            channel,
            config.id,
            Ownership::Owned,
            None,
        ))
    }

    /// A completion channel to share among CQs ([`create_cq_on`](Context::create_cq_on)),
    /// its fd non-blocking; served by a [`ChannelFeed`](crate::ChannelFeed).
    /// It is destroyed when the last handle to it goes, which each CQ made
    /// on it holds: after its last CQ.
    ///
    /// # Errors
    ///
    /// The errno of `ibv_create_comp_channel`, or of making its fd
    /// non-blocking.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{Context, CqConfig};
    /// use evd_verbs::CqId;
    /// let ctx = Context::open(None)?;
    /// let channel = ctx.create_channel()?;
    /// let a = ctx.create_cq_on(&channel, &CqConfig::new(64, CqId(0)))?;
    /// let b = ctx.create_cq_on(&channel, &CqConfig::new(64, CqId(1)))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_channel(self: &Arc<Self>) -> io::Result<Arc<CompletionChannel>> {
        // SAFETY: a live context.
        let channel = unsafe { ffi::ibv_create_comp_channel(self.ctx) };
        if channel.is_null() {
            return Err(last_err());
        }
        let channel = CompletionChannel::wrap(channel, Ownership::Owned, Some(self.clone()));
        set_nonblocking(channel.fd())?;
        Ok(Arc::new(channel))
    }

    /// A CQ as `config` says, on the shared `channel` (made on this
    /// context): its events come through the channel, named by the CQ, for
    /// a [`ChannelFeed`](crate::ChannelFeed) to demultiplex. The CQ's own
    /// [`channel_fd`](crate::CompletionQueue::channel_fd) is `None` (a
    /// single-CQ [`Feed`](crate::Feed) cannot sleep on it). The CQ holds
    /// the channel, which outlives it.
    ///
    /// `InvalidInput` if `channel` is on another device context.
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) if `channel` is on
    /// another device context; the errno of `ibv_create_cq`.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{Context, CqConfig};
    /// use evd_verbs::{ChannelFeed, CqId, Driver, FeedMode, VerbsEvent};
    /// let ctx = Context::open(None)?;
    /// let channel = ctx.create_channel()?;
    /// let (poster, _evd) = evd::bounded::<VerbsEvent>(1024)?;
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// for i in 0..4 {
    ///     let cq = ctx.create_cq_on(&channel, &CqConfig::new(256, CqId(i)))?;
    ///     feed.add(cq, CqId(i)).expect("on this channel");
    /// }
    /// let mut driver = Driver::new(Default::default())?;
    /// driver.register_channel(feed, FeedMode::Event)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_cq_on(
        self: &Arc<Self>,
        channel: &Arc<CompletionChannel>,
        config: &CqConfig,
    ) -> io::Result<IbvCq> {
        if channel.context_ptr() != self.ctx {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the completion channel is on another device context",
            ));
        }
        // SAFETY: live context and channel (the Arc keeps it); `cq_context`
        // is only stored.
        let cq = unsafe {
            ffi::ibv_create_cq(
                self.ctx,
                config.depth,
                config.cq_context,
                channel.as_ptr(),
                config.comp_vector,
            )
        };
        if cq.is_null() {
            return Err(last_err());
        }
        Ok(IbvCq::wrap(
            self,
            cq,
            ptr::null_mut(),
            config.id,
            Ownership::Owned,
            Some(channel.clone()),
        ))
    }

    /// This device's async events (CQ errors, QP errors, port and device
    /// events) as an [`AsyncEventSource`](crate::AsyncEventSource). The async fd is made non-blocking.
    /// While they are held, a [`Driver`](crate::Driver) does not serve them
    /// by itself for this device's CQs (see
    /// [`CompletionQueue::device_events`](crate::CompletionQueue::device_events)).
    ///
    /// # Errors
    ///
    /// An [`io::Error`] if the async fd cannot be made non-blocking.
    ///
    /// ```no_run
    /// use evd_verbs::AsyncEventSource;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mut events = ctx.async_events()?;
    /// while let Some(ev) = events.next_event()? {
    ///     println!("{ev:?}");
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
