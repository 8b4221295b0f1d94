//! A device's CQs: how one is configured ([`CqConfig`]) and created, with
//! its own completion channel or on a shared one, and the channels
//! themselves.

use super::Context;
use crate::event::CqId;
use crate::ibv::*;
use std::io;
use std::ptr;
use std::sync::Arc;

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

impl Context {
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
}
