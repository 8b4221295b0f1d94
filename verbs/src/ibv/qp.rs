//! Reliable-connected queue pairs (`ibv_qp`): connecting and posting.

use super::cq::RawCq;
use super::teardown::{TeardownError, VerbsObject};
use super::*;
use std::fmt;
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;

/// The most SGEs one work request posted by this crate may have
/// ([`QueuePair::post_send_wr`], [`QueuePair::post_recv_sges`]): they are
/// passed to the provider from a stack array of this size. More is
/// [`PostWrError::TooManySges`]. (The QP's own limit is
/// [`QpCaps::max_send_sge`] / [`QpCaps::max_recv_sge`].)
///
/// ```
/// assert_eq!(evd_verbs::ibv::MAX_SGES, 16);
/// ```
pub const MAX_SGES: usize = 16;

/// What a remote peer needs to connect to a QP: its number, GID and first
/// send PSN (from [`QueuePair::endpoint`]), exchanged out of band.
///
/// ```no_run
/// use evd_verbs::ibv::{ConnectParams, Endpoint};
/// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
/// # let pd = ctx.alloc_pd().unwrap();
/// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
/// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
/// # let peer = qp.endpoint(1, 0, 0).unwrap();
/// let me = qp.endpoint(1, 0, 0x1234)?; // send this to the peer
/// qp.connect(peer, &ConnectParams { sq_psn: me.psn, ..ConnectParams::default() })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// QP number.
    pub qp_num: u32,
    /// GID (RoCE address).
    pub gid: [u8; 16],
    /// The first packet sequence number the QP sends with (24 bits): the
    /// peer's receive PSN ([`ConnectParams::sq_psn`] on this side).
    pub psn: u32,
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
/// let p = ConnectParams { mtu: Mtu::B4096, gid_index: 1, sq_psn: 77, ..ConnectParams::default() };
/// assert_eq!((p.port, p.timeout, p.retry_cnt, p.min_rnr_timer), (1, 14, 7, 12));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// The operation of a send-side work request.
///
/// ```no_run
/// use evd_verbs::ibv::SendOp;
/// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
/// # let pd = ctx.alloc_pd().unwrap();
/// # let peer_mr = pd.register(4096).unwrap();
/// // The peer sends its region's address and rkey out of band.
/// let read = SendOp::Read { remote_addr: peer_mr.addr(), rkey: peer_mr.rkey() };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// A send, consuming a receive at the peer.
    Send,
    /// A send with immediate data: the peer's receive completion carries
    /// `imm` (host order here).
    SendWithImm {
        /// Immediate data.
        imm: u32,
    },
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
    /// An RDMA read of the peer's memory into the request's SGEs (which
    /// the local region must allow with `LOCAL_WRITE`).
    Read {
        /// Peer address.
        remote_addr: u64,
        /// Peer rkey.
        rkey: u32,
    },
}

/// A send-side work request for [`QueuePair::post_send_wr`]: an
/// operation on up to [`MAX_SGES`] scatter/gather entries, with its flags.
///
/// [`new`](SendRequest::new) makes a signaled request without other flags.
///
/// ```no_run
/// use evd_verbs::ibv::{SendOp, SendRequest};
/// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
/// # let pd = ctx.alloc_pd().unwrap();
/// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
/// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
/// # let mr = pd.register(8192).unwrap();
/// let sges = [mr.sge(0, 16)?, mr.sge(512, 100)?]; // a header and a body
/// qp.post_send_wr(&SendRequest { signaled: false, ..SendRequest::new(1, SendOp::Send, &sges) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SendRequest<'a> {
    /// The id its completion carries.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The local memory: gathered for sends and writes, scattered into for
    /// reads. Copied to the provider when posted; the memory itself must
    /// stay registered until the request completes (unless `inline`).
    pub sges: &'a [Sge],
    /// `IBV_SEND_SIGNALED`: a successful request produces a completion.
    /// Unsignaled ones complete silently (an error still completes), unless
    /// the QP was made with [`QpCaps::sq_sig_all`]. An unsignaled request's
    /// send-queue slot is freed only when a later signaled one completes.
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`: the peer's receive completion is solicited
    /// (wakes a CQ armed for solicited completions only). Sends and
    /// writes with immediate.
    pub solicited: bool,
    /// `IBV_SEND_FENCE`: start only after earlier RDMA reads and atomics on
    /// this QP have completed.
    pub fence: bool,
    /// `IBV_SEND_INLINE`: the provider copies the bytes into the request
    /// when it is posted, so the memory may be reused as soon as
    /// [`post_send_wr`](QueuePair::post_send_wr) returns, and its key is
    /// not checked. At most [`QpCaps::max_inline_data`] bytes in all
    /// (else [`PostWrError::InlineTooLong`]); sends and writes only.
    pub inline: bool,
}

impl<'a> SendRequest<'a> {
    /// A signaled request `wr_id` doing `op` on `sges`, not solicited,
    /// fenced or inline.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let mr = pd.register(8192).unwrap();
    /// let sges = [mr.sge(0, 8)?];
    /// let wr = SendRequest::new(7, SendOp::SendWithImm { imm: 42 }, &sges);
    /// assert!(wr.signaled && !wr.inline);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(wr_id: u64, op: SendOp, sges: &'a [Sge]) -> SendRequest<'a> {
        SendRequest {
            wr_id,
            op,
            sges,
            signaled: true,
            solicited: false,
            fence: false,
            inline: false,
        }
    }
}

/// Why a work request was not posted.
///
/// ```
/// use evd_verbs::ibv::PostWrError;
/// let e = PostWrError::TooManySges { given: 20, max: 16 };
/// assert_eq!(e.to_string(), "a work request with 20 SGEs (at most 16)");
/// let io: std::io::Error = e.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum PostWrError {
    /// More SGEs than [`MAX_SGES`].
    TooManySges {
        /// SGEs given.
        given: usize,
        /// The maximum.
        max: usize,
    },
    /// An inline request longer than the QP's
    /// [`max_inline_data`](QpCaps::max_inline_data).
    InlineTooLong {
        /// Bytes given.
        len: u64,
        /// The QP's maximum.
        max: u32,
    },
    /// The provider refused the request (e.g. `ENOMEM`: the queue is full;
    /// `EINVAL`: more SGEs than the QP takes, or an operation it does not
    /// support inline).
    Verbs(io::Error),
}

impl fmt::Display for PostWrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostWrError::TooManySges { given, max } => {
                write!(f, "a work request with {given} SGEs (at most {max})")
            }
            PostWrError::InlineTooLong { len, max } => {
                write!(f, "{len} bytes inline (the QP takes at most {max})")
            }
            PostWrError::Verbs(e) => write!(f, "posting a work request failed: {e}"),
        }
    }
}

impl std::error::Error for PostWrError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PostWrError::Verbs(e) => Some(e),
            _ => None,
        }
    }
}

impl From<PostWrError> for io::Error {
    /// The provider's error as it is; the others as
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) errors carrying them.
    fn from(e: PostWrError) -> io::Error {
        match e {
            PostWrError::Verbs(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidInput, other),
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

/// A reliable-connected queue pair, from
/// [`ProtectionDomain::create_rc_qp`]. Holds its PD and (when made on
/// [`IbvCq`]s) its CQs alive.
///
/// It is `Send` and `Sync`: work requests may be posted from several
/// threads at once.
///
/// ```no_run
/// use evd_verbs::ibv::{ConnectParams, Context, QpCaps, SendOp};
/// use evd_verbs::CqId;
/// let ctx = Context::open(None)?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(64, CqId(1))?;
/// let qp = pd.create_rc_qp(&cq, &cq, &QpCaps::default(), 1)?;
/// qp.connect(qp.endpoint(1, 0, 0)?, &ConnectParams::default())?; // loopback
/// let mr = pd.register(4096)?;
/// qp.post_recv(1, &mr, 0, 64)?;
/// qp.post_send(2, SendOp::Send, &mr, 64, 8, false)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct QueuePair {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    pub(super) qp: *mut ffi::ibv_qp,
    /// What the provider granted.
    caps: QpCaps,
    /// The port it was moved to INIT on.
    port: u8,
    /// The send and receive CQs, kept alive; `None` for raw CQs, which the
    /// caller keeps alive.
    _cqs: [Option<Arc<RawCq>>; 2],
    pub(super) pd: Arc<ProtectionDomain>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: a live QP (Debug cannot run during destroy).
        let (send_cq, recv_cq) = unsafe { ((*self.qp).send_cq, (*self.qp).recv_cq) };
        f.debug_struct("QueuePair")
            .field("qp", &self.qp)
            .field("qp_num", &self.qp_num())
            .field("send_cq", &send_cq)
            .field("recv_cq", &recv_cq)
            .field("pd", &self.pd.pd)
            .field("caps", &self.caps)
            .finish()
    }
}

// SAFETY: libibverbs QPs may be used from any thread.
unsafe impl Send for QueuePair {}
// SAFETY: every `&self` method is a libibverbs call that is thread-safe on
// the same QP: libibverbs is documented thread-safe, and the providers
// serialise ibv_post_send, ibv_post_recv and ibv_modify_qp per QP with
// their own locks (the lock-free variants exist only for QPs made in a
// parent domain with a thread domain, which this crate never makes; a QP
// is always created here, on a plain PD). The other reads (`qp_num`,
// caps, port) are of fields fixed at creation. Destruction takes `self`.
unsafe impl Sync for QueuePair {}

impl QueuePair {
    /// Create the QP and move it to INIT on `port`.
    ///
    /// # Safety
    /// `cqs` are live CQs of the PD's context, kept alive (by `guards`, or
    /// by the caller) until the QP is destroyed.
    pub(super) unsafe fn create(
        pd: &Arc<ProtectionDomain>,
        cqs: (*mut ffi::ibv_cq, *mut ffi::ibv_cq),
        guards: [Option<Arc<RawCq>>; 2],
        caps: &QpCaps,
        port: u8,
    ) -> io::Result<QueuePair> {
        let mut init = ffi::ibv_qp_init_attr {
            send_cq: cqs.0,
            recv_cq: cqs.1,
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: caps.sq_sig_all as i32,
            ..zeroed()
        };
        init.cap = ffi::ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: caps.max_inline_data,
        };
        // SAFETY: a live PD and live CQs (this function's contract).
        let qp = unsafe { ffi::ibv_create_qp(pd.pd, &mut init) };
        if qp.is_null() {
            return Err(last_err());
        }
        // ibv_create_qp(3): the granted capabilities come back in `cap`.
        let granted = QpCaps {
            max_send_wr: init.cap.max_send_wr,
            max_recv_wr: init.cap.max_recv_wr,
            max_send_sge: init.cap.max_send_sge,
            max_recv_sge: init.cap.max_recv_sge,
            max_inline_data: init.cap.max_inline_data,
            ..*caps
        };
        let qp = QueuePair {
            qp,
            caps: granted,
            port,
            _cqs: guards,
            pd: pd.clone(),
        };
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: caps.access.bits(),
            ..zeroed()
        };
        use ffi::ibv_qp_attr_mask as M;
        let mask = M::IBV_QP_STATE.0
            | M::IBV_QP_PKEY_INDEX.0
            | M::IBV_QP_PORT.0
            | M::IBV_QP_ACCESS_FLAGS.0;
        qp.modify(&mut attr, mask as i32)?;
        Ok(qp)
    }

    /// `ibv_modify_qp` with `attr` and `mask` (`ibv_qp_attr_mask` bits):
    /// any transition, such as those `rdma_init_qp_attr` describes for
    /// rdma_cm. The provider and kernel check the attributes.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{ffi, QpState};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// // SAFETY: all-zero is a valid ibv_qp_attr (integers only).
    /// let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
    /// attr.qp_state = ffi::ibv_qp_state::IBV_QPS_ERR;
    /// qp.modify(&mut attr, ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32)?;
    /// assert_eq!(qp.query_state()?, QpState::Error);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: i32) -> io::Result<()> {
        // SAFETY: a live QP and attribute struct (plain integers, read by
        // the provider for the bits in `mask`).
        check(unsafe { ffi::ibv_modify_qp(self.qp, attr, mask) })
    }

    /// The QP's current state (`ibv_query_qp` of `IBV_QP_STATE`).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{QpCaps, QpState};
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16, evd_verbs::CqId(0))?;
    /// let qp = pd.create_rc_qp(&cq, &cq, &QpCaps::default(), 1)?;
    /// assert_eq!(qp.query_state()?, QpState::Init);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn query_state(&self) -> io::Result<QpState> {
        let mut attr: ffi::ibv_qp_attr = zeroed();
        let mut init: ffi::ibv_qp_init_attr = zeroed();
        // SAFETY: a live QP and live out-parameters.
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

    /// The QP number.
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// println!("QP {:#x}", qp.qp_num());
    /// ```
    pub fn qp_num(&self) -> u32 {
        // SAFETY: a live QP.
        unsafe { (*self.qp).qp_num }
    }

    /// The raw QP, for verbs this module does not wrap.
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// // SAFETY: a live QP.
    /// assert_eq!(unsafe { (*qp.as_ptr()).qp_num }, qp.qp_num());
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::ibv_qp {
        self.qp
    }

    /// The capabilities the provider granted (at least those asked for),
    /// with the `sq_sig_all` and `access` asked for.
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// println!("{} bytes inline", qp.caps().max_inline_data);
    /// ```
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The port the QP was made on.
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// assert_eq!(qp.port(), 1);
    /// ```
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The protection domain.
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// let mr = qp.pd().register(4096)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// This QP's endpoint for a peer: its number, the GID at `gid_index`
    /// of `port`, and `psn` (the first send PSN this side will connect
    /// with, [`ConnectParams::sq_psn`]; 24 bits, higher ones are dropped).
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
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
    /// ```no_run
    /// use evd_verbs::ibv::{ConnectParams, Mtu};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// # let peer = qp.endpoint(1, 0, 0).unwrap();
    /// qp.connect(peer, &ConnectParams { mtu: Mtu::B4096, sq_psn: 0x1234, ..Default::default() })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connect(&self, remote: Endpoint, params: &ConnectParams) -> io::Result<()> {
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
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// qp.set_error()?; // then drain its CQs
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_error(&self) -> io::Result<()> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_ERR,
            ..zeroed()
        };
        self.modify(&mut attr, ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32)
    }

    /// Post a receive of `len` bytes at `offset` of `mr` (one SGE):
    /// shorthand for [`post_recv_sges`](QueuePair::post_recv_sges). A range
    /// outside `mr` is an [`InvalidInput`](io::ErrorKind::InvalidInput)
    /// error carrying a [`RangeError`].
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// # let mr = pd.register(8192).unwrap();
    /// for i in 0..8 {
    ///     qp.post_recv(i, &mr, i as usize * 256, 256)?;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn post_recv(
        &self,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
    ) -> io::Result<()> {
        let sge = mr.sge(offset, len)?;
        Ok(self.post_recv_sges(wr_id, &[sge])?)
    }

    /// Post a receive scattering into `sges` in order (at most
    /// [`MAX_SGES`], and the QP's [`max_recv_sge`](QpCaps::max_recv_sge)).
    /// The memory must stay registered until the receive completes.
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// # let mr = pd.register(8192).unwrap();
    /// // A header into one place, the payload into another.
    /// qp.post_recv_sges(1, &[mr.sge(0, 16)?, mr.sge(4096, 1024)?])?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn post_recv_sges(&self, wr_id: u64, sges: &[Sge]) -> Result<(), PostWrError> {
        let (mut list, n) = sge_list(sges)?;
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: list.as_mut_ptr(),
            num_sge: n as i32,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: a live QP; the WR and SGE list live across the call (the
        // provider copies them); the SGEs name registered memory (`Sge`'s
        // contract), which the caller keeps registered until the receive
        // completes (a region deregistered earlier only fails it).
        let ret = unsafe {
            let ctx = (*self.qp).context;
            let post = (*ctx).ops.post_recv.expect("provider has post_recv");
            post(self.qp, &mut wr, &mut bad)
        };
        check(ret).map_err(PostWrError::Verbs)
    }

    /// Post a signaled send-side work request on `len` bytes at `offset`
    /// of `mr` (no SGE if `len` is 0; `solicited` sets the solicited-event
    /// bit): shorthand for [`post_send_wr`](QueuePair::post_send_wr). A
    /// range outside `mr` is an [`InvalidInput`](io::ErrorKind::InvalidInput)
    /// error carrying a [`RangeError`].
    ///
    /// ```no_run
    /// use evd_verbs::ibv::SendOp;
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// # let mut mr = pd.register(8192).unwrap();
    /// mr.as_mut_slice()[..5].copy_from_slice(b"hello");
    /// qp.post_send(1, SendOp::Send, &mr, 0, 5, false)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn post_send(
        &self,
        wr_id: u64,
        op: SendOp,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        solicited: bool,
    ) -> io::Result<()> {
        let sge = [mr.sge(offset, len)?];
        let sges: &[Sge] = if len == 0 { &[] } else { &sge };
        Ok(self.post_send_wr(&SendRequest {
            solicited,
            ..SendRequest::new(wr_id, op, sges)
        })?)
    }

    /// Post a send-side work request: any [`SendOp`], up to [`MAX_SGES`]
    /// SGEs (and the QP's [`max_send_sge`](QpCaps::max_send_sge)),
    /// signaled or not, solicited, fenced, inline.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// # let mr = pd.register(8192).unwrap();
    /// let sges = [mr.sge(0, 32)?];
    /// // Three unsignaled sends, then a signaled one: one completion.
    /// for i in 0..3 {
    ///     qp.post_send_wr(&SendRequest { signaled: false, ..SendRequest::new(i, SendOp::Send, &sges) })?;
    /// }
    /// qp.post_send_wr(&SendRequest::new(3, SendOp::Send, &sges))?;
    /// // A small message copied at post time.
    /// qp.post_send_wr(&SendRequest { inline: true, ..SendRequest::new(4, SendOp::Send, &sges) })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn post_send_wr(&self, request: &SendRequest<'_>) -> Result<(), PostWrError> {
        let (mut list, n) = sge_list(request.sges)?;
        use ffi::ibv_send_flags as F;
        let mut flags = 0;
        if request.signaled {
            flags |= F::IBV_SEND_SIGNALED.0;
        }
        if request.solicited {
            flags |= F::IBV_SEND_SOLICITED.0;
        }
        if request.fence {
            flags |= F::IBV_SEND_FENCE.0;
        }
        if request.inline {
            let len: u64 = request.sges.iter().map(|s| u64::from(s.length())).sum();
            if len > u64::from(self.caps.max_inline_data) {
                return Err(PostWrError::InlineTooLong {
                    len,
                    max: self.caps.max_inline_data,
                });
            }
            flags |= F::IBV_SEND_INLINE.0;
        }
        let mut wr = ffi::ibv_send_wr {
            wr_id: request.wr_id,
            next: ptr::null_mut(),
            sg_list: list.as_mut_ptr(),
            num_sge: n as i32,
            send_flags: flags,
            ..zeroed()
        };
        use ffi::ibv_wr_opcode as O;
        match request.op {
            SendOp::Send => wr.opcode = O::IBV_WR_SEND,
            SendOp::SendWithImm { imm } => {
                wr.opcode = O::IBV_WR_SEND_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            SendOp::Write { remote_addr, rkey } => {
                wr.opcode = O::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = ffi::rdma_t { remote_addr, rkey };
            }
            SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                wr.opcode = O::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.wr.rdma = ffi::rdma_t { remote_addr, rkey };
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            SendOp::Read { remote_addr, rkey } => {
                wr.opcode = O::IBV_WR_RDMA_READ;
                wr.wr.rdma = ffi::rdma_t { remote_addr, rkey };
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: as in `post_recv_sges` (an inline request's bytes are
        // read during the call only).
        let ret = unsafe {
            let ctx = (*self.qp).context;
            let post = (*ctx).ops.post_send.expect("provider has post_send");
            post(self.qp, &mut wr, &mut bad)
        };
        check(ret).map_err(PostWrError::Verbs)
    }
}

/// `sges` as the provider's array, on the stack.
fn sge_list(sges: &[Sge]) -> Result<([ffi::ibv_sge; MAX_SGES], usize), PostWrError> {
    if sges.len() > MAX_SGES {
        return Err(PostWrError::TooManySges {
            given: sges.len(),
            max: MAX_SGES,
        });
    }
    let mut list = [ffi::ibv_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; MAX_SGES];
    for (raw, sge) in list.iter_mut().zip(sges) {
        *raw = sge.raw();
    }
    Ok((list, sges.len()))
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
    /// let qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1)?;
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
        // once; its CQs (held here, or kept alive by the caller of
        // `create_rc_qp_raw`) and PD are alive.
        let ret = unsafe { ffi::ibv_destroy_qp(qp) };
        destroyed(VerbsObject::QueuePair, "ibv_destroy_qp", ret).inspect_err(|_| {
            for cq in self._cqs.iter().flatten() {
                keep_forever(cq);
            }
            keep_forever(&self.pd);
        })
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}
