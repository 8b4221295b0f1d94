//! Protection domains (`ibv_pd`): what memory regions and QPs are made in.

use super::*;
use crate::teardown::{CloseError, TeardownError, VerbsObject};
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;

/// A protection domain.
#[derive(Debug)]
pub struct ProtectionDomain {
    pub(super) ctx: Arc<Context>,
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    pub(super) pd: *mut ffi::ibv_pd,
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
            ..zeroed()
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
            ..zeroed()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE.0
            | ffi::ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | ffi::ibv_qp_attr_mask::IBV_QP_PORT.0
            | ffi::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
        qp.modify(&mut attr, mask)?;
        Ok(qp)
    }
}
