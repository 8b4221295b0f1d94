//! Work completions: what a CQ poll returns, in a provider-neutral layout.

use std::fmt;

/// A work completion's status (`enum ibv_wc_status`): success, or why the
/// work request failed. Kept as the raw verbs number so that converting a
/// polled `ibv_wc` costs nothing and unknown provider values survive.
///
/// ```
/// assert_eq!(format!("{:?}", evd_verbs::WcStatus::WR_FLUSH_ERR), "WcStatus(5: Work Request Flushed Error)");
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// `IBV_WC_SUCCESS`.
    pub const SUCCESS: Self = Self(0);
    /// `IBV_WC_LOC_LEN_ERR`: local length error.
    pub const LOC_LEN_ERR: Self = Self(1);
    /// `IBV_WC_LOC_QP_OP_ERR`: local QP operation error.
    pub const LOC_QP_OP_ERR: Self = Self(2);
    /// `IBV_WC_LOC_PROT_ERR`: local protection error.
    pub const LOC_PROT_ERR: Self = Self(4);
    /// `IBV_WC_WR_FLUSH_ERR`: the QP went to the error state; the request was flushed.
    pub const WR_FLUSH_ERR: Self = Self(5);
    /// `IBV_WC_LOC_ACCESS_ERR`: local access error.
    pub const LOC_ACCESS_ERR: Self = Self(8);
    /// `IBV_WC_REM_INV_REQ_ERR`: the remote side found the request invalid.
    pub const REM_INV_REQ_ERR: Self = Self(9);
    /// `IBV_WC_REM_ACCESS_ERR`: remote access error (bad rkey or rights).
    pub const REM_ACCESS_ERR: Self = Self(10);
    /// `IBV_WC_REM_OP_ERR`: remote operation error.
    pub const REM_OP_ERR: Self = Self(11);
    /// `IBV_WC_RETRY_EXC_ERR`: transport retry count exceeded.
    pub const RETRY_EXC_ERR: Self = Self(12);
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver-not-ready retry count exceeded.
    pub const RNR_RETRY_EXC_ERR: Self = Self(13);
    /// `IBV_WC_FATAL_ERR`.
    pub const FATAL_ERR: Self = Self(19);
    /// `IBV_WC_GENERAL_ERR`.
    pub const GENERAL_ERR: Self = Self(21);

    /// True for `IBV_WC_SUCCESS`.
    ///
    /// ```
    /// use evd_verbs::WcStatus;
    /// assert!(WcStatus::SUCCESS.is_success());
    /// assert!(!WcStatus::WR_FLUSH_ERR.is_success());
    /// ```
    pub fn is_success(self) -> bool {
        self == Self::SUCCESS
    }

    /// The verbs name, as `ibv_wc_status_str` would give it.
    ///
    /// ```
    /// assert_eq!(evd_verbs::WcStatus(12).name(), "transport retry counter exceeded");
    /// ```
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 24] = [
            "success",
            "local length error",
            "local QP operation error",
            "local EE context operation error",
            "local protection error",
            "Work Request Flushed Error",
            "memory management operation error",
            "bad response error",
            "local access error",
            "remote invalid request error",
            "remote access error",
            "remote operation error",
            "transport retry counter exceeded",
            "RNR retry counter exceeded",
            "local RDD violation error",
            "remote invalid RD request",
            "aborted error",
            "invalid EE context number",
            "invalid EE context state",
            "fatal error",
            "response timeout error",
            "general error",
            "TM error",
            "TM software rendezvous",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("unknown")
    }
}

impl fmt::Debug for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WcStatus({}: {})", self.0, self.name())
    }
}

/// What kind of work a completion is for (`enum ibv_wc_opcode`).
///
/// Only meaningful on a successful completion: verbs leaves it undefined on
/// an error completion.
///
/// ```
/// assert_eq!(format!("{:?}", evd_verbs::WcOpcode(129)), "RECV_RDMA_WITH_IMM");
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcOpcode(pub u32);

impl WcOpcode {
    /// `IBV_WC_SEND`.
    pub const SEND: Self = Self(0);
    /// `IBV_WC_RDMA_WRITE`.
    pub const RDMA_WRITE: Self = Self(1);
    /// `IBV_WC_RDMA_READ`.
    pub const RDMA_READ: Self = Self(2);
    /// `IBV_WC_COMP_SWAP`.
    pub const COMP_SWAP: Self = Self(3);
    /// `IBV_WC_FETCH_ADD`.
    pub const FETCH_ADD: Self = Self(4);
    /// `IBV_WC_RECV`: a receive consumed by an incoming send.
    pub const RECV: Self = Self(128);
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: a receive consumed by an RDMA write with immediate.
    pub const RECV_RDMA_WITH_IMM: Self = Self(129);

    /// True for the receive-side opcodes (`IBV_WC_RECV` and above).
    ///
    /// ```
    /// assert!(evd_verbs::WcOpcode::RECV.is_recv());
    /// assert!(!evd_verbs::WcOpcode::SEND.is_recv());
    /// ```
    pub fn is_recv(self) -> bool {
        self.0 & 128 != 0
    }
}

impl fmt::Debug for WcOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            Self::SEND => "SEND",
            Self::RDMA_WRITE => "RDMA_WRITE",
            Self::RDMA_READ => "RDMA_READ",
            Self::COMP_SWAP => "COMP_SWAP",
            Self::FETCH_ADD => "FETCH_ADD",
            Self::RECV => "RECV",
            Self::RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
            _ => return write!(f, "WcOpcode({})", self.0),
        };
        f.write_str(name)
    }
}

/// A completion's flags (`enum ibv_wc_flags`).
///
/// ```
/// assert!(evd_verbs::WcFlags(2).contains(evd_verbs::WcFlags::WITH_IMM));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// `IBV_WC_GRH`: a global routing header is in the first 40 bytes of the buffer.
    pub const GRH: Self = Self(1);
    /// `IBV_WC_WITH_IMM`: `imm_data` is valid.
    pub const WITH_IMM: Self = Self(2);
    /// `IBV_WC_IP_CSUM_OK`.
    pub const IP_CSUM_OK: Self = Self(4);
    /// `IBV_WC_WITH_INV`: `imm_data` holds an invalidated rkey.
    pub const WITH_INV: Self = Self(8);

    /// True if every flag of `other` is set.
    ///
    /// ```
    /// use evd_verbs::WcFlags;
    /// assert!(WcFlags(3).contains(WcFlags::WITH_IMM));
    /// assert!(!WcFlags::GRH.contains(WcFlags::WITH_IMM));
    /// ```
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

/// One work completion, as polled from a CQ (the fields of `struct ibv_wc`
/// an application acts on).
///
/// An error completion is a completion like any other: feeds deliver it.
/// Only its `wr_id`, `status`, `vendor_err` and `qp_num` mean anything
/// (`ibv_poll_cq(3)`); polled from libibverbs (`ibv::work_completion`, with
/// the `ibverbs` feature) the other fields are zero, never a value an
/// earlier completion left in the provider's entry.
///
/// Outside this crate it is built with [`new`](WorkCompletion::new) and
/// the `with_` setters (a software provider's, a test's): it may gain
/// fields (a CQ-ex timestamp, say) without breaking those callers.
///
/// ```
/// use evd_verbs::{WorkCompletion, WcStatus, WcOpcode};
/// let wc = WorkCompletion::new(7).with_opcode(WcOpcode::RECV).with_byte_len(64);
/// assert!(wc.status.is_success());
/// assert_eq!((wc.wr_id, wc.byte_len), (7, 64));
/// ```
///
/// A struct literal does not compile outside the crate:
///
/// ```compile_fail,E0639
/// let wc = evd_verbs::WorkCompletion { wr_id: 7, byte_len: 64, ..Default::default() };
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct WorkCompletion {
    /// The caller's id from the work request.
    pub wr_id: u64,
    /// Success, or why the request failed.
    pub status: WcStatus,
    /// The operation (valid on success only: zero, [`WcOpcode::SEND`], on an
    /// error completion polled from libibverbs).
    pub opcode: WcOpcode,
    /// Provider-specific error detail for an error completion (zero on a
    /// successful one polled from libibverbs).
    pub vendor_err: u32,
    /// Bytes transferred (receives, RDMA reads, atomics; polled from
    /// libibverbs, zero on other completions).
    pub byte_len: u32,
    /// A receive's immediate data in host byte order (valid with
    /// [`WcFlags::WITH_IMM`]), or the invalidated rkey (with
    /// [`WcFlags::WITH_INV`]); polled from libibverbs, zero without either
    /// and on a send's completion.
    pub imm_data: u32,
    /// The local QP the request was posted on.
    pub qp_num: u32,
    /// The remote QP (UD receives; polled from libibverbs, zero on a
    /// completion that is not a receive).
    pub src_qp: u32,
    /// Completion flags.
    pub wc_flags: WcFlags,
}

impl WorkCompletion {
    /// A successful completion of work request `wr_id`, every other field
    /// zero ([`WcOpcode::SEND`], no flags): what [`Default`] gives, with
    /// the id.
    ///
    /// ```
    /// use evd_verbs::{WcStatus, WorkCompletion};
    /// let wc = WorkCompletion::new(3);
    /// assert_eq!((wc.wr_id, wc.status, wc.byte_len), (3, WcStatus::SUCCESS, 0));
    /// ```
    #[must_use]
    pub const fn new(wr_id: u64) -> Self {
        WorkCompletion {
            wr_id,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::SEND,
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: WcFlags(0),
        }
    }

    /// With `status` (an error completion unless [`WcStatus::SUCCESS`]).
    ///
    /// ```
    /// use evd_verbs::{WcStatus, WorkCompletion};
    /// let wc = WorkCompletion::new(1).with_status(WcStatus::WR_FLUSH_ERR);
    /// assert!(!wc.status.is_success());
    /// ```
    #[must_use]
    pub const fn with_status(mut self, status: WcStatus) -> Self {
        self.status = status;
        self
    }

    /// With `opcode`.
    ///
    /// ```
    /// use evd_verbs::{WcOpcode, WorkCompletion};
    /// assert_eq!(WorkCompletion::new(1).with_opcode(WcOpcode::RECV).opcode, WcOpcode::RECV);
    /// ```
    #[must_use]
    pub const fn with_opcode(mut self, opcode: WcOpcode) -> Self {
        self.opcode = opcode;
        self
    }

    /// With the provider's error detail `vendor_err`.
    ///
    /// ```
    /// assert_eq!(evd_verbs::WorkCompletion::new(1).with_vendor_err(0x81).vendor_err, 0x81);
    /// ```
    #[must_use]
    pub const fn with_vendor_err(mut self, vendor_err: u32) -> Self {
        self.vendor_err = vendor_err;
        self
    }

    /// With `byte_len` bytes transferred.
    ///
    /// ```
    /// assert_eq!(evd_verbs::WorkCompletion::new(1).with_byte_len(64).byte_len, 64);
    /// ```
    #[must_use]
    pub const fn with_byte_len(mut self, byte_len: u32) -> Self {
        self.byte_len = byte_len;
        self
    }

    /// With immediate data `imm_data` (host order); the flags are left as
    /// they are: add [`WcFlags::WITH_IMM`] with [`with_flags`](Self::with_flags).
    ///
    /// ```
    /// use evd_verbs::{WcFlags, WorkCompletion};
    /// let wc = WorkCompletion::new(1).with_imm_data(42).with_flags(WcFlags::WITH_IMM);
    /// assert!(wc.wc_flags.contains(WcFlags::WITH_IMM));
    /// assert_eq!(wc.imm_data, 42);
    /// ```
    #[must_use]
    pub const fn with_imm_data(mut self, imm_data: u32) -> Self {
        self.imm_data = imm_data;
        self
    }

    /// With the local QP number `qp_num`.
    ///
    /// ```
    /// assert_eq!(evd_verbs::WorkCompletion::new(1).with_qp_num(17).qp_num, 17);
    /// ```
    #[must_use]
    pub const fn with_qp_num(mut self, qp_num: u32) -> Self {
        self.qp_num = qp_num;
        self
    }

    /// With the remote QP number `src_qp`.
    ///
    /// ```
    /// assert_eq!(evd_verbs::WorkCompletion::new(1).with_src_qp(18).src_qp, 18);
    /// ```
    #[must_use]
    pub const fn with_src_qp(mut self, src_qp: u32) -> Self {
        self.src_qp = src_qp;
        self
    }

    /// With the flags `wc_flags` (replacing any set before).
    ///
    /// ```
    /// use evd_verbs::{WcFlags, WorkCompletion};
    /// assert_eq!(WorkCompletion::new(1).with_flags(WcFlags::GRH).wc_flags, WcFlags::GRH);
    /// ```
    #[must_use]
    pub const fn with_flags(mut self, wc_flags: WcFlags) -> Self {
        self.wc_flags = wc_flags;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_is_the_default_with_the_id_and_each_setter_sets_its_own_field() {
        assert_eq!(
            WorkCompletion::new(9),
            WorkCompletion {
                wr_id: 9,
                ..WorkCompletion::default()
            }
        );
        let wc = WorkCompletion::new(1)
            .with_status(WcStatus::REM_ACCESS_ERR)
            .with_opcode(WcOpcode::RECV_RDMA_WITH_IMM)
            .with_vendor_err(2)
            .with_byte_len(3)
            .with_imm_data(4)
            .with_qp_num(5)
            .with_src_qp(6)
            .with_flags(WcFlags::WITH_IMM);
        assert_eq!(
            wc,
            WorkCompletion {
                wr_id: 1,
                status: WcStatus::REM_ACCESS_ERR,
                opcode: WcOpcode::RECV_RDMA_WITH_IMM,
                vendor_err: 2,
                byte_len: 3,
                imm_data: 4,
                qp_num: 5,
                src_qp: 6,
                wc_flags: WcFlags::WITH_IMM,
            }
        );
    }
}
