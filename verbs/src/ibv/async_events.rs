//! A device's async events (`ibv_get_async_event`) as an
//! [`AsyncEventSource`], taken from their [`Context`] here
//! ([`Context::async_events`]).

use super::*;
use crate::event::{AsyncElement, AsyncEvent, AsyncEventKind, CqId};
use crate::source::AsyncEventSource;
use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;

/// A device's async events (the context's async fd), from
/// [`Context::async_events`].
///
/// A CQ error names its CQ by the [`CqId`] the CQ was made or wrapped with
/// on this context ([`Context::create_cq_with`], [`IbvCq::from_raw`]),
/// found in the context's registry; the CQ's `cq_context` is not read. A CQ
/// not wrapped on this context (made with raw `ffi` calls and never
/// wrapped, or already dropped) is named `AsyncElement::Cq(CqId(u32::MAX))`.
///
/// ```no_run
/// use evd_verbs::{AsyncEventSource, AsyncElement, CqId};
/// let ctx = evd_verbs::ibv::Context::open(None)?;
/// let mut events = ctx.async_events()?;
/// if let Some(ev) = events.next_event()? {
///     if let AsyncElement::Cq(CqId(u32::MAX)) = ev.element {
///         println!("an error on a CQ this crate does not know: {ev:?}");
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct IbvAsyncEvents {
    pub(super) ctx: Arc<Context>,
}

/// What an async CQ error on a CQ unknown to the context names it.
const UNKNOWN_CQ: CqId = CqId(u32::MAX);

impl IbvAsyncEvents {
    /// The raw context whose async fd this reads, for verbs this module
    /// does not wrap.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let events = ctx.async_events()?;
    /// assert_eq!(events.as_ptr(), ctx.as_ptr());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.ctx.ctx
    }

    /// The context.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let events = ctx.async_events()?;
    /// assert!(std::sync::Arc::ptr_eq(events.context(), &ctx));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
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
        // SAFETY: pointers, an int and an enum whose zero is a valid value
        // (IBV_EVENT_CQ_ERR); libibverbs overwrites it.
        let mut ev: ffi::ibv_async_event = unsafe { mem::zeroed() };
        // SAFETY: a live context with a non-blocking async fd.
        if unsafe { ffi::ibv_get_async_event(self.ctx.ctx, &mut ev) } != 0 {
            let e = last_err();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let kind = AsyncEventKind::from_raw(
            // Read as the C int it is: a value newer than the bindings'
            // enum must not be materialised as that Rust enum.
            // SAFETY: the field is a 4-byte C enum, initialised by the call.
            unsafe { ptr::addr_of!(ev.event_type).cast::<u32>().read() },
        );
        // SAFETY: the union member to read is the one the event type names
        // (ibv_get_async_event(3)).
        let element = unsafe {
            use AsyncEventKind::*;
            match kind {
                // By address: the pointer is not dereferenced.
                CqError => AsyncElement::Cq(self.ctx.cq_id(ev.element.cq).unwrap_or(UNKNOWN_CQ)),
                QpFatal | QpRequestError | QpAccessError | CommEstablished | SqDrained
                | PathMigrated | PathMigrationError | QpLastWqeReached => {
                    AsyncElement::Qp((*ev.element.qp).qp_num)
                }
                SrqError | SrqLimitReached => AsyncElement::Srq,
                WqFatal => AsyncElement::Wq,
                PortActive | PortError | LidChange | PkeyChange | SmChange | ClientReregister
                | GidChange => AsyncElement::Port(ev.element.port_num as u8),
                // (`from_raw` never gives `SourceFailed`: this crate's own.)
                DeviceFatal | SourceFailed | Other(_) => AsyncElement::Device,
            }
        };
        // Copied out: acknowledge at once (ibv_ack_async_event(3)).
        // By raw pointer: a reference to `ev` would assert its `event_type`
        // a valid Rust enum, which a type newer than the bindings is not.
        // SAFETY: the event just got, acked once.
        unsafe { ffi::ibv_ack_async_event(ptr::addr_of_mut!(ev)) };
        Ok(Some(AsyncEvent { kind, element }))
    }
}

impl Context {
    /// This device's async events (CQ errors, QP errors, port and device
    /// events) as an [`AsyncEventSource`]. The
    /// async fd is made non-blocking. They have one taker at a time, as a
    /// soft device's do: two would split the device's events between them,
    /// each seeing some, in no order. While they are held, a
    /// [`Driver`](crate::Driver) does not serve them by itself for this
    /// device's CQs (see
    /// [`CompletionQueue::device_events`](crate::CompletionQueue::device_events));
    /// to deliver them elsewhere than the driver does, take them before
    /// registering those feeds.
    ///
    /// # Errors
    ///
    /// `EBUSY` while they are taken (an earlier taker still holds them, or
    /// a driver serves them for a CQ of this device; a driver lets them go
    /// when that feed of its own ends, which follows the end of its fd poll:
    /// a turn of the driver after the `remove` that started it may have
    /// returned, so a take right then may be refused and succeed a little
    /// later); an [`io::Error`] if the async fd cannot be made
    /// non-blocking.
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
        // through the fd. Taken only if nobody listens: 0 -> 1.
        use std::sync::atomic::Ordering::Relaxed;
        self.listeners
            .compare_exchange(0, 1, Relaxed, Relaxed)
            .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
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
}
