//! A completion channel shared by many CQs: the [`SharedChannel`](crate::SharedChannel) of real
//! verbs, which a [`ChannelFeed`](crate::ChannelFeed) serves.

mod shared;

use super::teardown::VerbsObject;
use super::*;
use std::collections::HashMap;
use std::fmt;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::{Mutex, MutexGuard};

/// An `ibv_comp_channel` for many CQs: one fd, and `ibv_get_cq_event`
/// names the CQ of each event. Made by [`Context::create_channel`] (CQs on
/// it by [`Context::create_cq_on`]) or wrapped with
/// [`CompletionChannel::from_raw`]; shared as `Arc<CompletionChannel>`,
/// which is the [`SharedChannel`](crate::SharedChannel) a [`ChannelFeed`](crate::ChannelFeed)
/// takes. Each CQ made on it holds it, so it is destroyed (if
/// [`Owned`](Ownership::Owned)) after the last of them and the last handle.
///
/// ```no_run
/// use evd_verbs::ibv::{Context, CqConfig};
/// use evd_verbs::{CqId, SharedChannel};
/// let ctx = Context::open(None)?;
/// let channel = ctx.create_channel()?;
/// let cq = ctx.create_cq_on(&channel, &CqConfig::new(64, CqId(0)))?;
/// assert!(channel.key_of(&cq).is_some());
/// println!("one fd for every CQ: {}", channel.fd());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CompletionChannel {
    /// Non-null until dropped.
    channel: *mut ffi::ibv_comp_channel,
    ownership: Ownership,
    /// The context it was made on (or, wrapped, was given with), kept
    /// open while the channel lives: its destroy reads the context.
    _ctx: Option<Arc<Context>>,
    /// Getting an event, arming a CQ of this channel and acknowledging its
    /// events, and what each CQ made here has got and not acknowledged.
    ///
    /// `ibv_get_cq_event` runs the provider's per-CQ event hook (libmlx5,
    /// libmlx4 and libhns bump the CQ's arm sequence number with no lock),
    /// and `ibv_req_notify_cq` reads that number: both run under this
    /// lock, whichever handle (any clone, on any thread) gets the event
    /// and whichever thread arms the CQ ([`CompletionChannel::arming`]).
    /// The counts let a CQ's destroy acknowledge what was got for it and
    /// never acknowledged (an event dropped, or held by a feed that went),
    /// which `ibv_destroy_cq` would otherwise wait for for ever; every
    /// acknowledgement of a counted event is made under the lock, with its
    /// count, so that none is made twice, or after the destroy that made
    /// it ([`CompletionChannel::release_cq`]).
    events: Mutex<Counts>,
}

// SAFETY: libibverbs channels may be used from any thread; what the
// provider keeps per CQ and touches when an event is got (the arm sequence
// number) is only touched under `events`, with the CQ's arm.
unsafe impl Send for CompletionChannel {}
// SAFETY: as above; the wrapper's other fields are not mutated after
// creation.
unsafe impl Sync for CompletionChannel {}

/// What the CQs made on a channel have got and not acknowledged.
#[derive(Default)]
struct Counts {
    /// The tag of the last registration (0: none; every CQ's is new).
    last_tag: u64,
    /// By the CQ's address, while it lives.
    cqs: HashMap<usize, Registered>,
}

/// One CQ made on the channel.
struct Registered {
    /// Marks the events counted for this CQ (not for an earlier one at the
    /// same address).
    tag: u64,
    unacked: u64,
}

impl CompletionChannel {
    pub(super) fn wrap(
        channel: *mut ffi::ibv_comp_channel,
        ownership: Ownership,
        ctx: Option<Arc<Context>>,
    ) -> CompletionChannel {
        CompletionChannel {
            channel,
            ownership,
            _ctx: ctx,
            events: Mutex::new(Counts::default()),
        }
    }

    /// The lock of getting events, arming and acknowledging (see
    /// `events`); poisoning is ignored (a count changes only with the call
    /// it counts, under the lock).
    fn events(&self) -> MutexGuard<'_, Counts> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Held while a CQ of this channel is armed (`ibv_req_notify_cq`): see
    /// `events`.
    pub(super) fn arming(&self) -> impl Drop + '_ {
        self.events()
    }

    /// Count the events of `cq`, made on this channel (at its creation).
    pub(super) fn register_cq(&self, cq: *mut ffi::ibv_cq) {
        let mut counts = self.events();
        counts.last_tag += 1;
        let tag = counts.last_tag;
        counts
            .cqs
            .insert(cq as usize, Registered { tag, unacked: 0 });
    }

    /// Acknowledge `count` events of `cq`, made on this channel.
    ///
    /// # Safety
    /// `cq` is live, registered, and has `count` events got through this
    /// channel and not acknowledged.
    pub(super) unsafe fn ack(&self, cq: *mut ffi::ibv_cq, count: u32) {
        let mut counts = self.events();
        // Never more than counted: an acknowledgement beyond the events
        // reported makes the destroy wait for ever (a caller that routed
        // an event of an earlier CQ at this address to this one, which
        // the contract forbids and the key cannot show).
        let n = counts
            .cqs
            .get_mut(&(cq as usize))
            .map_or(u64::from(count), |r| {
                let n = r.unacked.min(u64::from(count));
                r.unacked -= n;
                n
            });
        if n > 0 {
            // SAFETY: this function's contract; `n` <= `count`.
            unsafe { ffi::ibv_ack_cq_events(cq, n as u32) };
        }
    }

    /// The events of `cq` got and not acknowledged (0 for a CQ not made
    /// here).
    pub(super) fn unacked(&self, cq: *mut ffi::ibv_cq) -> u64 {
        self.events()
            .cqs
            .get(&(cq as usize))
            .map_or(0, |r| r.unacked)
    }

    /// Stop counting the events of `cq`, about to be destroyed, and
    /// acknowledge those got and not acknowledged: an event got for it
    /// before and acknowledged after (`ack_unknown`) finds it gone, and is
    /// not acknowledged twice.
    ///
    /// # Safety
    /// `cq` is live; every event counted for it is not acknowledged yet.
    pub(super) unsafe fn release_cq(&self, cq: *mut ffi::ibv_cq) {
        let mut counts = self.events();
        let Some(r) = counts.cqs.remove(&(cq as usize)) else {
            return;
        };
        let mut unacked = r.unacked;
        while unacked > 0 {
            let n = u32::try_from(unacked).unwrap_or(u32::MAX);
            // SAFETY: this function's contract: `n` of its events were
            // got through the channel and not acknowledged.
            unsafe { ffi::ibv_ack_cq_events(cq, n) };
            unacked -= u64::from(n);
        }
    }

    /// Wrap a completion channel made elsewhere (`ibv_create_comp_channel`
    /// by another crate, or raw [`ffi`] calls), to make CQs on it
    /// ([`Context::create_cq_on`]) and serve them with a
    /// [`ChannelFeed`](crate::ChannelFeed). Its fd is made non-blocking.
    ///
    /// With [`Ownership::Owned`] the last handle destroys it; with
    /// [`Ownership::Borrowed`] it is never destroyed here.
    ///
    /// The wrapper holds `ctx`, the channel's device context, so that the
    /// device stays open until the channel is destroyed, whatever is
    /// dropped first.
    ///
    /// # Safety
    /// - `channel` is a live completion channel of `ctx`.
    /// - Nobody else gets events from it while the wrapper lives (they
    ///   would be taken from the feed).
    /// - `Owned`: nobody else destroys it. `Borrowed`: its owner destroys
    ///   it only after the wrapper and every CQ made on it are gone.
    ///
    /// # Panics
    /// If `channel` is null, or not of `ctx`.
    ///
    /// # Errors
    ///
    /// An [`io::Error`] if the channel's fd cannot be made non-blocking
    /// (`fcntl`): nothing is wrapped then, and the channel is still the
    /// caller's to destroy, whatever `ownership` said.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{ffi, CompletionChannel, Context, Ownership};
    /// let ctx = Context::open(None)?;
    /// // SAFETY: a live context.
    /// let raw = unsafe { ffi::ibv_create_comp_channel(ctx.as_ptr()) };
    /// assert!(!raw.is_null());
    /// // SAFETY: just made on `ctx`; handed over.
    /// let channel = unsafe { CompletionChannel::from_raw(&ctx, raw, Ownership::Owned)? };
    /// assert_eq!(channel.as_ptr(), raw);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn from_raw(
        ctx: &Arc<Context>,
        channel: *mut ffi::ibv_comp_channel,
        ownership: Ownership,
    ) -> io::Result<Arc<CompletionChannel>> {
        assert!(
            !channel.is_null(),
            "CompletionChannel::from_raw of a null channel"
        );
        // SAFETY: a live channel (the caller's contract).
        let of = unsafe { (*channel).context };
        assert_eq!(
            of, ctx.ctx,
            "CompletionChannel::from_raw: a channel of another context"
        );
        // Before the wrapper: on an error the channel is still the caller's
        // (an `Owned` wrapper dropped here would destroy it).
        // SAFETY: a live channel; its fd field is set at creation.
        set_nonblocking(unsafe { (*channel).fd })?;
        let channel = CompletionChannel::wrap(channel, ownership, Some(ctx.clone()));
        Ok(Arc::new(channel))
    }

    /// The raw channel, for verbs this module does not wrap.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let channel = ctx.create_channel()?;
    /// // SAFETY: a live channel.
    /// println!("fd {}", unsafe { (*channel.as_ptr()).fd });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::ibv_comp_channel {
        self.channel
    }

    /// The channel's fd (non-blocking), readable while events wait.
    ///
    /// ```no_run
    /// let channel = evd_verbs::ibv::Context::open(None)?.create_channel()?;
    /// assert!(channel.fd() >= 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fd(&self) -> RawFd {
        // SAFETY: a live channel; its fd field is set at creation.
        unsafe { (*self.channel).fd }
    }

    /// Whether the last handle destroys the channel.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{Context, Ownership};
    /// let channel = Context::open(None)?.create_channel()?;
    /// assert_eq!(channel.ownership(), Ownership::Owned); // made here: destroyed here
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    pub(super) fn context_ptr(&self) -> *mut ffi::ibv_context {
        // SAFETY: a live channel; its context field is set at creation.
        unsafe { (*self.channel).context }
    }
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("channel", &self.channel)
            .field("ownership", &self.ownership)
            .finish_non_exhaustive()
    }
}

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        let channel = std::mem::replace(&mut self.channel, ptr::null_mut());
        if channel.is_null() || self.ownership == Ownership::Borrowed {
            return;
        }
        // SAFETY: from ibv_create_comp_channel (here, or handed over to
        // `from_raw` as Owned), nulled above so destroyed once; every CQ made
        // on it here holds an Arc to it, so none is left.
        let ret = unsafe { ffi::ibv_destroy_comp_channel(channel) };
        // Refused (a CQ made on it elsewhere still lives): the channel
        // still exists, and that CQ's destroy reads its context.
        let result = destroyed(
            VerbsObject::CompletionChannel,
            "ibv_destroy_comp_channel",
            ret,
        );
        if let (Err(_), Some(ctx)) = (&result, &self._ctx) {
            keep_forever(ctx);
        }
        report_failure(result);
    }
}
