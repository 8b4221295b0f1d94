//! What a QP is created with: [`QpCaps`].

use crate::ibv::*;

/// What a QP is created with (`ibv_qp_cap`, `sq_sig_all`) and the access
/// it allows peers, for [`ProtectionDomain::create_rc_qp`].
///
/// The default is 16 send and 16 receive work requests, 1 SGE each way,
/// no inline data, only requests asking for it signaled, and local write
/// plus remote read and write access.
///
/// ```
/// use evd_verbs::ibv::{AccessFlags, QpCaps};
/// let mut caps = QpCaps::default();
/// caps.max_send_wr = 1024;
/// caps.max_inline_data = 128;
/// assert_eq!((caps.max_recv_wr, caps.max_send_sge, caps.sq_sig_all), (16, 1, false));
/// assert!(caps.access.contains(AccessFlags::REMOTE_WRITE));
/// ```
///
/// It may gain fields: outside this crate it is built from [`Default`] and
/// its fields set, not with a struct literal.
///
/// ```compile_fail,E0639
/// let caps = evd_verbs::ibv::QpCaps { max_send_wr: 1024, ..Default::default() };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QpCaps {
    /// Outstanding send-side work requests.
    pub max_send_wr: u32,
    /// Outstanding receives.
    pub max_recv_wr: u32,
    /// SGEs per send-side work request (at most [`MAX_SGES`] are posted
    /// by this crate).
    pub max_send_sge: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
    /// Bytes a send-side request may carry inline.
    pub max_inline_data: u32,
    /// Every send-side request completes (`sq_sig_all`), signaled or not.
    pub sq_sig_all: bool,
    /// What peers may do to this side's memory through the QP
    /// (`IBV_QP_ACCESS_FLAGS`, set on the move to INIT; each memory region
    /// must allow it too).
    pub access: AccessFlags,
    /// The caller's promise of [`QpCaps::allow_cpu_copied_receives`].
    pub(crate) cpu_copied_receives: bool,
}

impl QpCaps {
    /// These capabilities, allowing a QP that takes receives to be made on
    /// a device whose provider writes inline receives into their memory
    /// with the CPU when the CQ is polled, with no key check: hns
    /// (HiSilicon), where no creation flag turns that off (mlx5's like copy
    /// is turned off at creation instead). Without it such a QP is refused
    /// there ([`Unsupported`](std::io::ErrorKind::Unsupported)), and so it
    /// is on a device whose kernel driver cannot be read; elsewhere it
    /// changes nothing.
    ///
    /// ```
    /// use evd_verbs::ibv::QpCaps;
    /// // SAFETY: every region a receive names outlives its completion's poll.
    /// let caps = unsafe { QpCaps::default().allow_cpu_copied_receives() };
    /// assert_ne!(caps, QpCaps::default());
    /// ```
    ///
    /// # Safety
    /// For every QP made with these capabilities (or a copy of them): each
    /// memory region a receive posted on it names stays alive (not closed,
    /// not dropped) until that receive's completion has been polled, or the
    /// QP destroyed: the copy may come at any poll of the receive CQ until
    /// then, on the polling thread. And no thread reads or writes the bytes
    /// that receive names through the region (`MemoryRegion::read`,
    /// `write`, or a slice) meanwhile: that copy is a plain CPU write, and
    /// an access racing it would be a data race, not the race with the
    /// device those methods allow. ([`QueuePair::caps`] does not carry the
    /// promise on.)
    pub unsafe fn allow_cpu_copied_receives(mut self) -> QpCaps {
        self.cpu_copied_receives = true;
        self
    }
}

impl Default for QpCaps {
    fn default() -> QpCaps {
        QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
            sq_sig_all: false,
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            cpu_copied_receives: false,
        }
    }
}
