//! Reliable-connected queue pairs (`ibv_qp`): connecting and posting.

use super::cq::RawCq;
use super::*;
use crate::teardown::{TeardownError, VerbsObject};
use std::fmt;
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;

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
    pub(super) qp: *mut ffi::ibv_qp,
    pub(super) send_cq: Arc<RawCq>,
    pub(super) recv_cq: Arc<RawCq>,
    pub(super) pd: Arc<ProtectionDomain>,
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
    pub(super) fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> io::Result<()> {
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
            path_mtu: ffi::ibv_mtu::IBV_MTU_1024,
            dest_qp_num: remote.qp_num,
            rq_psn: remote.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..zeroed()
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
            ..zeroed()
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
            ..zeroed()
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
            ..zeroed()
        };
        match op {
            SendOp::Send => wr.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND,
            SendOp::Write { remote_addr, rkey } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = ffi::rdma_t { remote_addr, rkey };
            }
            SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.wr.rdma = ffi::rdma_t { remote_addr, rkey };
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
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
