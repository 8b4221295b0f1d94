//! A [`QueuePair`]'s state transitions: what a peer needs to connect
//! ([`Endpoint`]), the RESET → INIT → RTR → RTS path over RoCE
//! ([`ConnectParams`], [`QueuePair::connect`]), any transition
//! ([`QueuePair::modify`]), the error state, and reading the state back.

use super::QueuePair;
use crate::ibv::*;
use std::io;

/// What a remote peer needs to connect to a QP: its number, GID and first
/// send PSN (from [`QueuePair::endpoint`]), exchanged out of band.
///
/// ```no_run
/// use evd_verbs::ibv::{ConnectParams, Endpoint};
/// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
/// # let pd = ctx.alloc_pd().unwrap();
/// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
/// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
/// # let peer = qp.endpoint(1, 0, 0).unwrap();
/// let me = qp.endpoint(1, 0, 0x1234)?; // send this to the peer
/// let mut params = ConnectParams::default();
/// params.sq_psn = me.psn;
/// qp.connect(peer, &params)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Endpoint {
    /// QP number.
    pub qp_num: u32,
    /// GID (RoCE address).
    pub gid: [u8; 16],
    /// The first packet sequence number the QP sends with (24 bits): the
    /// peer's receive PSN ([`ConnectParams::sq_psn`] on this side).
    pub psn: u32,
}

impl Endpoint {
    /// The endpoint of QP `qp_num` at `gid`, sending from `psn`: what a
    /// peer rebuilds from the three values exchanged out of band.
    ///
    /// ```
    /// use evd_verbs::ibv::Endpoint;
    /// let peer = Endpoint::new(0x11, [0; 16], 0x1234);
    /// assert_eq!((peer.qp_num, peer.psn), (0x11, 0x1234));
    /// ```
    #[must_use]
    pub const fn new(qp_num: u32, gid: [u8; 16], psn: u32) -> Self {
        Endpoint { qp_num, gid, psn }
    }
}

/// A path MTU (`ibv_mtu`).
///
/// ```
/// use evd_verbs::ibv::Mtu;
/// assert_eq!(Mtu::default(), Mtu::B1024);
/// assert_eq!(Mtu::B4096.bytes(), 4096);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mtu {
    /// 256 bytes.
    B256,
    /// 512 bytes.
    B512,
    /// 1024 bytes.
    #[default]
    B1024,
    /// 2048 bytes.
    B2048,
    /// 4096 bytes.
    B4096,
}

impl Mtu {
    /// The MTU in bytes.
    ///
    /// ```
    /// assert_eq!(evd_verbs::ibv::Mtu::B256.bytes(), 256);
    /// ```
    pub fn bytes(self) -> u32 {
        match self {
            Mtu::B256 => 256,
            Mtu::B512 => 512,
            Mtu::B1024 => 1024,
            Mtu::B2048 => 2048,
            Mtu::B4096 => 4096,
        }
    }

    /// The `ibv_mtu` value.
    ///
    /// ```
    /// use evd_verbs::ibv::{ffi, Mtu};
    /// assert_eq!(Mtu::B2048.to_raw(), ffi::ibv_mtu::IBV_MTU_2048);
    /// ```
    pub fn to_raw(self) -> ffi::ibv_mtu::Type {
        use ffi::ibv_mtu::*;
        match self {
            Mtu::B256 => IBV_MTU_256,
            Mtu::B512 => IBV_MTU_512,
            Mtu::B1024 => IBV_MTU_1024,
            Mtu::B2048 => IBV_MTU_2048,
            Mtu::B4096 => IBV_MTU_4096,
        }
    }
}

/// How [`QueuePair::connect`] moves a QP to RTR then RTS, over RoCE (a
/// global route to the peer's GID).
///
/// The default is port 1, GID index 0, 1024-byte MTU, send PSN 0, local
/// ACK timeout 14 (about 67 ms), 7 retries and 7 RNR retries (7: for
/// ever), a minimum RNR timer of 12 (0.64 ms), one outstanding RDMA read
/// or atomic each way, hop limit 1, traffic class 0 and service level 0.
///
/// ```
/// use evd_verbs::ibv::{ConnectParams, Mtu};
/// let mut p = ConnectParams::default();
/// p.mtu = Mtu::B4096;
/// p.gid_index = 1;
/// p.sq_psn = 77;
/// assert_eq!((p.port, p.timeout, p.retry_cnt, p.min_rnr_timer), (1, 14, 7, 12));
/// ```
///
/// It may gain fields: outside this crate it is built from [`Default`] and
/// its fields set, not with a struct literal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectParams {
    /// The local port (the QP's port from
    /// [`create_rc_qp`](ProtectionDomain::create_rc_qp) and the address
    /// vector's).
    pub port: u8,
    /// The local GID index (source GID of the global route).
    pub gid_index: u8,
    /// The path MTU.
    pub mtu: Mtu,
    /// This QP's first send PSN (24 bits): the `psn` of the
    /// [`Endpoint`] given to the peer.
    pub sq_psn: u32,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0: infinite).
    pub timeout: u8,
    /// Transport retries before an error completion (at most 7).
    pub retry_cnt: u8,
    /// Retries after a receiver-not-ready NAK (7: for ever).
    pub rnr_retry: u8,
    /// The RNR NAK timer this side asks senders to wait (an IB encoding,
    /// 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// RDMA reads and atomics this side may have outstanding as initiator.
    pub max_rd_atomic: u8,
    /// RDMA reads and atomics this side accepts outstanding as responder.
    pub max_dest_rd_atomic: u8,
    /// The global route's hop limit.
    pub hop_limit: u8,
    /// The global route's traffic class.
    pub traffic_class: u8,
    /// The service level.
    pub service_level: u8,
}

impl Default for ConnectParams {
    fn default() -> ConnectParams {
        ConnectParams {
            port: 1,
            gid_index: 0,
            mtu: Mtu::B1024,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            hop_limit: 1,
            traffic_class: 0,
            service_level: 0,
        }
    }
}

/// A QP state (`ibv_qp_state`), from [`QueuePair::query_state`].
///
/// ```
/// use evd_verbs::ibv::{ffi, QpState};
/// assert_eq!(QpState::from_raw(ffi::ibv_qp_state::IBV_QPS_RTS), QpState::Rts);
/// assert_eq!(QpState::from_raw(99), QpState::Unknown(99));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    Reset,
    /// `IBV_QPS_INIT`.
    Init,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr,
    /// `IBV_QPS_RTS`: ready to send.
    Rts,
    /// `IBV_QPS_SQD`: send queue drained.
    Sqd,
    /// `IBV_QPS_SQE`: send queue error.
    Sqe,
    /// `IBV_QPS_ERR`.
    Error,
    /// Any other value (including `IBV_QPS_UNKNOWN`).
    Unknown(u32),
}

impl QpState {
    /// The state of an `ibv_qp_state` value.
    ///
    /// ```
    /// use evd_verbs::ibv::{ffi, QpState};
    /// assert_eq!(QpState::from_raw(ffi::ibv_qp_state::IBV_QPS_ERR), QpState::Error);
    /// ```
    pub fn from_raw(state: ffi::ibv_qp_state::Type) -> QpState {
        use ffi::ibv_qp_state::*;
        match state {
            IBV_QPS_RESET => QpState::Reset,
            IBV_QPS_INIT => QpState::Init,
            IBV_QPS_RTR => QpState::Rtr,
            IBV_QPS_RTS => QpState::Rts,
            IBV_QPS_SQD => QpState::Sqd,
            IBV_QPS_SQE => QpState::Sqe,
            IBV_QPS_ERR => QpState::Error,
            other => QpState::Unknown(other),
        }
    }
}

impl QueuePair {
    /// `ibv_modify_qp` with `attr` and `mask` (`ibv_qp_attr_mask` bits):
    /// any transition but one to RESET, such as those `rdma_init_qp_attr`
    /// describes for rdma_cm. The provider and kernel check the attributes.
    ///
    /// A move to RESET rewinds the provider's queue indices outside the
    /// locks its posts take (mlx5, ionic), so a post on another thread
    /// would race it: it needs the QP to itself, [`QueuePair::reset`].
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) for a move to RESET
    /// (`mask` has `IBV_QP_STATE` and `attr.qp_state` is `IBV_QPS_RESET`);
    /// the errno of `ibv_modify_qp`, as an [`io::Error`] (`EINVAL` for
    /// attributes the transition does not take).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{ffi, QpState};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// // SAFETY: all-zero is a valid ibv_qp_attr (integers only).
    /// let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
    /// attr.qp_state = ffi::ibv_qp_state::IBV_QPS_ERR;
    /// qp.modify(&mut attr, ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32)?;
    /// assert_eq!(qp.query_state()?, QpState::Error);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn modify(&mut self, attr: &mut ffi::ibv_qp_attr, mask: i32) -> io::Result<()> {
        let state = ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;
        if mask & state != 0 && attr.qp_state == ffi::ibv_qp_state::IBV_QPS_RESET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a move to RESET needs the QP to itself: QueuePair::reset",
            ));
        }
        // SAFETY: a live QP and attribute struct (plain integers, read by
        // the provider for the bits in `mask`); not a move to RESET (which
        // rewinds queue indices a post reads); `&mut self`: no post, query
        // or other modify of this QP runs meanwhile (libibverbs writes its
        // `state` field after the call, which providers' posts read).
        check(unsafe { ffi::ibv_modify_qp(self.qp, attr, mask) })
    }

    /// Move the QP to RESET (`ibv_modify_qp`): its queues are emptied and
    /// their indices rewound, so nothing may post on it meanwhile, which
    /// `&mut self` ensures. Outstanding work requests get no completion;
    /// move it to ERROR and drain its CQs first to have them flushed.
    ///
    /// # Errors
    ///
    /// The errno of `ibv_modify_qp`, as an [`io::Error`].
    ///
    /// ```no_run
    /// use evd_verbs::ibv::QpState;
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1)?;
    /// qp.reset()?;
    /// assert_eq!(qp.query_state()?, QpState::Reset);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&mut self) -> io::Result<()> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RESET,
            ..zeroed()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;
        // SAFETY: a live QP and attribute struct; `&mut self`: no post on
        // this QP runs meanwhile.
        check(unsafe { ffi::ibv_modify_qp(self.qp, &mut attr, mask) })
    }

    /// The QP's current state (`ibv_query_qp` of `IBV_QP_STATE`).
    ///
    /// # Errors
    ///
    /// The errno of `ibv_query_qp`, as an [`io::Error`].
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{QpCaps, QpState};
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16, evd_verbs::CqId(0))?;
    /// let mut qp = pd.create_rc_qp(&cq, &cq, &QpCaps::default(), 1)?;
    /// assert_eq!(qp.query_state()?, QpState::Init);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn query_state(&mut self) -> io::Result<QpState> {
        let mut attr: ffi::ibv_qp_attr = zeroed();
        let mut init: ffi::ibv_qp_init_attr = zeroed();
        // SAFETY: a live QP and live out-parameters; `&mut self`: no post,
        // modify or other query of this QP runs meanwhile (libibverbs
        // writes its `state` field after the call).
        check(unsafe {
            ffi::ibv_query_qp(
                self.qp,
                &mut attr,
                ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
                &mut init,
            )
        })?;
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// This QP's endpoint for a peer: its number, the GID at `gid_index`
    /// of `port`, and `psn` (the first send PSN this side will connect
    /// with, [`ConnectParams::sq_psn`]; 24 bits, higher ones are dropped).
    ///
    /// # Errors
    ///
    /// The errno of `ibv_query_gid` (a port or GID index the device does
    /// not have).
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// let me = qp.endpoint(1, 0, 0xabcdef)?;
    /// assert_eq!(me.qp_num, qp.qp_num());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn endpoint(&self, port: u8, gid_index: u8, psn: u32) -> io::Result<Endpoint> {
        Ok(Endpoint {
            qp_num: self.qp_num(),
            gid: self.pd.ctx.gid(port, i32::from(gid_index))?,
            psn: psn & 0xff_ffff,
        })
    }

    /// Move to RTR then RTS, connected to `remote` over RoCE (a global
    /// route to its GID) with `params`; `params.sq_psn` should be the `psn`
    /// of the endpoint given to the peer.
    ///
    /// # Errors
    ///
    /// The errno of `ibv_modify_qp` for the move to RTR or to RTS (the QP
    /// stays in the state it reached).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{ConnectParams, Mtu};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// # let peer = qp.endpoint(1, 0, 0).unwrap();
    /// let mut params = ConnectParams::default();
    /// params.mtu = Mtu::B4096;
    /// params.sq_psn = 0x1234;
    /// qp.connect(peer, &params)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connect(&mut self, remote: Endpoint, params: &ConnectParams) -> io::Result<()> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: params.mtu.to_raw(),
            dest_qp_num: remote.qp_num,
            rq_psn: remote.psn & 0xff_ffff,
            max_dest_rd_atomic: params.max_dest_rd_atomic,
            min_rnr_timer: params.min_rnr_timer,
            ..zeroed()
        };
        attr.ah_attr.is_global = 1;
        attr.ah_attr.port_num = params.port;
        attr.ah_attr.sl = params.service_level;
        attr.ah_attr.grh.dgid = ffi::ibv_gid { raw: remote.gid };
        attr.ah_attr.grh.sgid_index = params.gid_index;
        attr.ah_attr.grh.hop_limit = params.hop_limit;
        attr.ah_attr.grh.traffic_class = params.traffic_class;
        let m = |f: ffi::ibv_qp_attr_mask| f.0 as i32;
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
            timeout: params.timeout,
            retry_cnt: params.retry_cnt,
            rnr_retry: params.rnr_retry,
            sq_psn: params.sq_psn & 0xff_ffff,
            max_rd_atomic: params.max_rd_atomic,
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
    ///
    /// # Errors
    ///
    /// The errno of `ibv_modify_qp`, as an [`io::Error`].
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// qp.set_error()?; // then drain its CQs
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_error(&mut self) -> io::Result<()> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_ERR,
            ..zeroed()
        };
        self.modify(&mut attr, ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32)
    }
}
