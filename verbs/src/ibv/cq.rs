//! Completion queues with their completion channel: the
//! [`CompletionQueue`] of real verbs, made here or
//! wrapped from raw pointers.

mod poll;
#[cfg(test)]
mod tests;

use super::teardown::{CloseError, TeardownError, VerbsObject};
use super::*;
use crate::event::{CqId, WorkCompletion};
use crate::feed::POLL_BATCH;
use crate::source::{AsyncEventSource, CompletionQueue, PollError};
use poll::poll_in_chunks;
pub use poll::work_completion;
use std::fmt;
use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;

/// The CQ and channel themselves, shared by the [`IbvCq`] and the QPs that
/// use the CQ, and destroyed after the last of them.
#[derive(Debug)]
pub(super) struct RawCq {
    /// The shared channel it was made on (`channel` is then null): held so
    /// that the channel is destroyed after its last CQ (this field drops
    /// after `Drop::drop` destroyed the CQ). Declared before the context, so
    /// that it drops first: a channel's destroy reads its context (the
    /// channel holds it too; this order does not rely on that).
    pub(super) shared: Option<Arc<super::CompletionChannel>>,
    pub(super) ctx: Arc<Context>,
    /// Non-null until `destroy`, which only `IbvCq::close` and `Drop` call.
    pub(super) cq: *mut ffi::ibv_cq,
    /// Null for a wrapped CQ without a channel; otherwise non-null until
    /// `destroy`, nulled only after `cq` is destroyed.
    pub(super) channel: *mut ffi::ibv_comp_channel,
    /// Its name in the context's registry.
    id: CqId,
    /// Whether `destroy` destroys the CQ and channel.
    ownership: Ownership,
}

// SAFETY: libibverbs CQs and channels may be used from any thread.
unsafe impl Send for RawCq {}
// SAFETY: as above; the only shared use is destroy, once, in Drop.
unsafe impl Sync for RawCq {}

impl RawCq {
    /// Take the CQ out of the context's registry, then (if owned) destroy
    /// the CQ, then its channel. A CQ whose destroy failed still uses its
    /// channel, its own or a shared one, so the channel is then left alone
    /// (libibverbs would refuse it with `EBUSY` anyway) and leaks with it;
    /// the CQ, still alive, is registered again.
    fn destroy(&mut self) -> Result<(), TeardownError> {
        let cq = mem::replace(&mut self.cq, ptr::null_mut());
        if !cq.is_null() {
            if let Some(shared) = &self.shared {
                // Got through the shared channel and never acknowledged (an
                // event dropped, or held by a feed that went): the destroy
                // would wait for them.
                // SAFETY: a live CQ, made on that channel; what it counts
                // for the CQ is not acknowledged (every acknowledgement of
                // it counts down, under the same lock).
                unsafe { shared.release_cq(cq) };
            }
            self.ctx.unregister_cq(cq, self.id);
            if self.ownership == Ownership::Borrowed {
                // Its maker destroys both.
                self.channel = ptr::null_mut();
                return Ok(());
            }
            // SAFETY: from ibv_create_cq (here, or handed over to `from_raw`
            // as Owned), and nulled above so destroyed at most once; no QP
            // uses it (each holds an Arc to this RawCq), and every event got
            // for it was acknowledged (the IbvCq's own channel's before it
            // let go, a shared channel's counted ones above). A shared
            // channel's event got after that (by a clone, racing this
            // destroy) is its getter's to acknowledge: the destroy waits
            // for that ack.
            let ret = unsafe { ffi::ibv_destroy_cq(cq) };
            destroyed(VerbsObject::CompletionQueue, "ibv_destroy_cq", ret).inspect_err(|_| {
                self.ctx.register_cq(cq, self.id);
                self.channel = ptr::null_mut();
                keep_forever(&self.ctx);
                if let Some(shared) = &self.shared {
                    // It uses the shared channel too: never destroyed now.
                    keep_forever(shared);
                }
            })?;
        }
        let channel = mem::replace(&mut self.channel, ptr::null_mut());
        if channel.is_null() {
            return Ok(());
        }
        // SAFETY: from ibv_create_comp_channel (here, or handed over to
        // `from_raw` as Owned), and nulled above so destroyed at most once;
        // its only CQ was destroyed above.
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

/// A libibverbs CQ, with its own completion channel or on a shared one:
/// the [`CompletionQueue`] of real verbs. Dropping it acknowledges any event of
/// its channel still unacknowledged, then destroys the CQ and its channel
/// once no QP uses the CQ ([`close`](IbvCq::close) does it now, or
/// refuses); a CQ wrapped as [`Borrowed`](Ownership::Borrowed) is
/// acknowledged but not destroyed. A CQ on a [`CompletionChannel`] shared
/// with others has no channel of its own: its events are taken and
/// acknowledged through the shared channel
/// ([`ChannelEvent`](crate::ChannelEvent)); one taken and never
/// acknowledged is acknowledged by its destroy (the channel counts them).
///
/// Made by [`Context::create_cq`] / [`Context::create_cq_with`], or
/// wrapped with [`IbvCq::from_raw`].
///
/// ```no_run
/// use evd_verbs::{CompletionQueue, CqId, WorkCompletion};
/// let ctx = evd_verbs::ibv::Context::open(None)?;
/// let mut cq = ctx.create_cq(16, CqId(0))?;
/// let mut out = [WorkCompletion::default(); 16];
/// assert_eq!(cq.poll(&mut out)?, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct IbvCq {
    pub(super) raw: Arc<RawCq>,
    /// The provider's scratch entries, all zero between polls.
    pub(super) wcs: [ffi::ibv_wc; POLL_BATCH],
    pub(super) got: u64,
    pub(super) acked: u64,
    /// A provider's poll failure behind completions the same call took out
    /// and returned: reported by the next call.
    failed: Option<i32>,
}

impl fmt::Debug for IbvCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IbvCq")
            .field("cq", &self.raw.cq)
            .field("channel", &self.raw.channel)
            .field("id", &self.raw.id)
            .field("ownership", &self.raw.ownership)
            .field("events_got", &self.events_got())
            .field("events_acked", &self.acked)
            .finish_non_exhaustive()
    }
}

impl IbvCq {
    /// Wrap a CQ on `ctx` (registered under `id` at once).
    pub(super) fn wrap(
        ctx: &Arc<Context>,
        cq: *mut ffi::ibv_cq,
        channel: *mut ffi::ibv_comp_channel,
        id: CqId,
        ownership: Ownership,
        shared: Option<Arc<super::CompletionChannel>>,
    ) -> IbvCq {
        ctx.register_cq(cq, id);
        if let Some(channel) = &shared {
            channel.register_cq(cq);
        }
        IbvCq {
            raw: Arc::new(RawCq {
                ctx: ctx.clone(),
                cq,
                channel,
                id,
                shared,
                ownership,
            }),
            wcs: [zeroed(); POLL_BATCH],
            got: 0,
            acked: 0,
            failed: None,
        }
    }

    /// Wrap a CQ made elsewhere (by another crate, or with raw `ffi`
    /// calls), with the completion channel it was created with, so that a
    /// [`Feed`](crate::Feed) can serve it. It is named `id` in events and,
    /// through `ctx`'s registry, in async CQ errors; its `cq_context` is
    /// left alone. The channel's fd is made non-blocking.
    ///
    /// `channel` may be null: the CQ is then polled only (busy-poll feeds;
    /// [`channel_fd`](CompletionQueue::channel_fd) is `None`), whether or
    /// not it has a channel that someone else serves.
    ///
    /// With [`Ownership::Owned`], dropping or [closing](IbvCq::close) the
    /// wrapper destroys the CQ, then the channel (if non-null), as for a
    /// CQ made here. With [`Ownership::Borrowed`] neither is ever destroyed
    /// here; the events this wrapper got from the channel are still all
    /// acknowledged before it lets go, so the owner's `ibv_destroy_cq`
    /// does not wait for them.
    ///
    /// # Safety
    /// - `cq` is a live CQ created on `ctx`'s device context (`ctx.as_ptr()`).
    /// - `channel` is null, or the completion channel `cq` was created with,
    ///   used by no other CQ and read by nobody else while the wrapper
    ///   lives: every event on it is taken as this CQ's.
    /// - `Owned`: nobody else destroys them; from now on they belong to the
    ///   returned wrapper.
    /// - `Borrowed`: the owner destroys them only after the wrapper and
    ///   every QP made on it are gone, and acknowledges the events it got
    ///   itself, if any.
    /// - While the wrapper lives, nobody else polls `cq` or arms it with
    ///   `ibv_req_notify_cq` in a way the wrapper's user does not expect
    ///   (a feed's completions would go elsewhere).
    ///
    /// # Panics
    /// If `cq` is null, was not created on `ctx` (`(*cq).context`), or
    /// `channel` is neither null nor `(*cq).channel`.
    ///
    /// # Errors
    ///
    /// An [`io::Error`] if the channel's fd cannot be made non-blocking
    /// (nothing is wrapped then).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{ffi, Context, IbvCq, Ownership};
    /// use evd_verbs::{CqId, Feed, VerbsEvent};
    /// let ctx = Context::open(None)?;
    /// // SAFETY: a live context.
    /// let channel = unsafe { ffi::ibv_create_comp_channel(ctx.as_ptr()) };
    /// // SAFETY: a live context and channel.
    /// let raw = unsafe { ffi::ibv_create_cq(ctx.as_ptr(), 64, std::ptr::null_mut(), channel, 0) };
    /// assert!(!channel.is_null() && !raw.is_null());
    /// // SAFETY: `raw` was made on `ctx` with `channel`, which only it
    /// // uses; both are destroyed below, after the wrapper is gone.
    /// let cq = unsafe { IbvCq::from_raw(&ctx, raw, channel, CqId(5), Ownership::Borrowed)? };
    /// let (poster, _evd) = evd::bounded::<VerbsEvent>(64)?;
    /// let feed = Feed::new(cq, CqId(5), poster);
    /// drop(feed); // acks its events, destroys nothing
    /// // SAFETY: ours, no wrapper or QP uses them any more.
    /// assert_eq!(unsafe { ffi::ibv_destroy_cq(raw) }, 0);
    /// // SAFETY: as above; its CQ is gone.
    /// assert_eq!(unsafe { ffi::ibv_destroy_comp_channel(channel) }, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn from_raw(
        ctx: &Arc<Context>,
        cq: *mut ffi::ibv_cq,
        channel: *mut ffi::ibv_comp_channel,
        id: CqId,
        ownership: Ownership,
    ) -> io::Result<IbvCq> {
        assert!(!cq.is_null(), "IbvCq::from_raw of a null CQ");
        // SAFETY: the caller promises a live CQ.
        let (cq_ctx, cq_channel) = unsafe { ((*cq).context, (*cq).channel) };
        assert_eq!(cq_ctx, ctx.ctx, "IbvCq::from_raw: the CQ is not on `ctx`");
        if !channel.is_null() {
            assert_eq!(
                channel, cq_channel,
                "IbvCq::from_raw: `channel` is not the CQ's channel"
            );
            // SAFETY: the caller promises a live channel; its fd belongs to
            // it.
            set_nonblocking(unsafe { (*channel).fd })?;
        }
        Ok(IbvCq::wrap(ctx, cq, channel, id, ownership, None))
    }

    /// The raw CQ, for verbs this module does not wrap.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let cq = ctx.create_cq(16, evd_verbs::CqId(0))?;
    /// // SAFETY: a live CQ.
    /// println!("{} entries", unsafe { (*cq.as_ptr()).cqe });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::ibv_cq {
        self.raw.cq
    }

    /// The raw completion channel (null for a CQ wrapped without one).
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let cq = ctx.create_cq(16, evd_verbs::CqId(0))?;
    /// // SAFETY: a live channel.
    /// println!("fd {}", unsafe { (*cq.channel_ptr()).fd });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn channel_ptr(&self) -> *mut ffi::ibv_comp_channel {
        self.raw.channel
    }

    /// The id the CQ was made or wrapped with, which async CQ errors name.
    ///
    /// ```no_run
    /// use evd_verbs::CqId;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// assert_eq!(ctx.create_cq(16, CqId(4))?.id(), CqId(4));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn id(&self) -> CqId {
        self.raw.id
    }

    /// Whether dropping the wrapper destroys the CQ and its channel.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::Ownership;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let cq = ctx.create_cq(16, evd_verbs::CqId(0))?;
    /// assert_eq!(cq.ownership(), Ownership::Owned);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ownership(&self) -> Ownership {
        self.raw.ownership
    }

    /// The context the CQ is on.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let cq = ctx.create_cq(16, evd_verbs::CqId(0))?;
    /// assert!(std::sync::Arc::ptr_eq(cq.context(), &ctx));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn context(&self) -> &Arc<Context> {
        &self.raw.ctx
    }

    /// Acknowledge every event still unacknowledged, then destroy the CQ,
    /// then its completion channel (a [`Borrowed`](Ownership::Borrowed)
    /// CQ is only acknowledged and let go).
    ///
    /// QPs made on this CQ hold it, so they must be gone first: while one
    /// is alive, nothing is acknowledged or destroyed and the error
    /// [`CloseError::InUse`] hands the CQ back. If destroying the CQ fails,
    /// the channel is not destroyed (the CQ still uses it); the error names
    /// whichever of the two failed.
    ///
    /// # Errors
    ///
    /// [`CloseError::InUse`] (with the CQ) while a QP made on it is alive;
    /// [`CloseError::Failed`] if `ibv_destroy_cq` or
    /// `ibv_destroy_comp_channel` fails.
    ///
    /// ```no_run
    /// use evd_verbs::{CloseError, CqId};
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16, CqId(0))?;
    /// let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1)?;
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

    /// Its events got: on a shared channel, those acknowledged and those
    /// the channel counts unacknowledged.
    fn events_got(&self) -> u64 {
        match &self.raw.shared {
            Some(channel) => self.acked + channel.unacked(self.raw.cq),
            None => self.got,
        }
    }

    /// Acknowledge the events its own channel got and not yet
    /// acknowledged, as ibv_destroy_cq waits for (a shared channel's are
    /// the channel's to count: `RawCq::destroy`).
    fn ack_unacked(&mut self) {
        while self.got > self.acked {
            let n = u32::try_from(self.got - self.acked).unwrap_or(u32::MAX);
            // SAFETY: `n` events were got by this CQ's `get_event` and not
            // acknowledged (`got - acked`, both counted here).
            unsafe { self.ack_events(n) };
        }
    }
}

impl CompletionQueue for IbvCq {
    /// Polls the provider [`POLL_BATCH`] entries at a time. A provider
    /// failure after completions this call already took out of the CQ
    /// returns those (they are gone from the CQ) and is reported by the
    /// next call.
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, PollError> {
        if let Some(n) = self.failed.take() {
            return Err(PollError::Provider(n));
        }
        let (raw, wcs) = (&self.raw, &mut self.wcs);
        let (total, failed) = poll_in_chunks(out, |chunk| {
            // SAFETY: a live CQ; the provider writes at most `chunk.len()`
            // (<= POLL_BATCH) entries into `wcs`.
            let n = unsafe {
                let cq = raw.cq;
                let poll = (*(*cq).context).ops.poll_cq.expect("provider has poll_cq");
                poll(cq, chunk.len() as i32, wcs.as_mut_ptr())
            };
            // Each entry written is zeroed once converted: a provider
            // writes only the fields its completion defines (libmlx5 leaves
            // a send's `byte_len` and `src_qp` alone), which must not show
            // a value an earlier completion left in the same entry.
            let Ok(n) = usize::try_from(n) else {
                // A negative value has no errno: the provider's own code
                // (ibv_poll_cq(3)). libmlx5 returns it after entries it
                // did write, which are lost with the failure.
                wcs[..chunk.len()].fill(zeroed());
                return Err(n);
            };
            for (o, wc) in chunk.iter_mut().zip(&mut wcs[..n]) {
                *o = work_completion(wc);
                *wc = zeroed();
            }
            Ok(n)
        });
        match failed {
            Some(n) if total == 0 => Err(PollError::Provider(n)),
            _ => {
                self.failed = failed;
                Ok(total)
            }
        }
    }

    fn req_notify(&mut self, solicited_only: bool) -> io::Result<()> {
        // On a shared channel, not beside another thread's `get_cq_event`
        // (see `CompletionChannel`'s `events`).
        let _arming = self.raw.shared.as_ref().map(|c| c.arming());
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
        if self.raw.channel.is_null() {
            return None;
        }
        // SAFETY: a live channel.
        Some(unsafe { (*self.raw.channel).fd })
    }

    fn get_event(&mut self) -> io::Result<bool> {
        if self.raw.channel.is_null() {
            return Ok(false);
        }
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

    unsafe fn ack_events(&mut self, count: u32) {
        match &self.raw.shared {
            // SAFETY: a live CQ, made on this channel (the IbvCq holds its
            // registration); `count` events were got and not yet acked (this
            // method's contract). Under the channel's lock, with its count.
            Some(channel) => unsafe { channel.ack(self.raw.cq, count) },
            // SAFETY: a live CQ; `count` events were got and not yet acked
            // (this method's contract), as ibv_ack_cq_events requires.
            None => unsafe { ffi::ibv_ack_cq_events(self.raw.cq, count) },
        }
        self.acked += u64::from(count);
    }

    fn device_events(&self) -> Option<Box<dyn AsyncEventSource>> {
        use std::sync::atomic::Ordering::Relaxed;
        let ctx = &self.raw.ctx;
        // A borrowed context's async fd is its owner's, who may read it:
        // not taken unasked (the owner counts no listener here).
        if ctx.ownership() == Ownership::Borrowed {
            return None;
        }
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
