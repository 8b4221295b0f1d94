//! Completion queues with their completion channel: the
//! [`CompletionQueue`](crate::CompletionQueue) of real verbs.

use super::*;
use crate::completion::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::cq::{AsyncEventSource, CompletionQueue, PollError};
use crate::feed::POLL_BATCH;
use crate::teardown::{CloseError, TeardownError, VerbsObject};
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
    pub(super) ctx: Arc<Context>,
    /// Both non-null until `destroy`, which only `IbvCq::close` and `Drop`
    /// call; `channel` is nulled only after `cq` is destroyed.
    pub(super) cq: *mut ffi::ibv_cq,
    pub(super) channel: *mut ffi::ibv_comp_channel,
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
    pub(super) raw: Arc<RawCq>,
    pub(super) wcs: [ffi::ibv_wc; POLL_BATCH],
    pub(super) got: u64,
    pub(super) acked: u64,
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
    WorkCompletion {
        wr_id: wc.wr_id,
        status: WcStatus(wc.status),
        opcode: WcOpcode(wc.opcode),
        vendor_err: wc.vendor_err,
        byte_len: wc.byte_len,
        // On the wire (and in ibv_wc) the immediate is big-endian. The union
        // is plain integers either way, so reading it is always defined.
        // SAFETY: both members are u32.
        imm_data: u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }),
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        wc_flags: WcFlags(wc.wc_flags),
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
