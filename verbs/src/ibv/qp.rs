//! Reliable-connected queue pairs (`ibv_qp`): creating one in its
//! protection domain ([`ProtectionDomain::create_rc_qp`]), reading and
//! destroying it here; what it is created with in `caps`, its state
//! transitions (connecting) in `state`, posting work requests in `post`.

mod caps;
mod creation;
mod post;
mod state;

pub use caps::QpCaps;
pub use post::{MAX_SGES, PostWrError, SendOp, SendRequest};
pub use state::{ConnectParams, Endpoint, Mtu, QpState};

use super::cq::RawCq;
use super::teardown::{TeardownError, VerbsObject};
use super::*;
use creation::Creation;
use std::fmt;
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;

/// A reliable-connected queue pair, from
/// [`ProtectionDomain::create_rc_qp`]. Holds its PD and (when made on
/// [`IbvCq`]s) its CQs alive.
///
/// It is `Send` and `Sync`: work requests may be posted from several
/// threads at once. Its state changes (`connect`, `set_error`, `modify`,
/// `reset`, `query_state`, and the `CmId` calls that move it) take
/// `&mut self`: libibverbs writes the QP's state outside any lock, and the
/// providers' posts read it, so no post may run beside them.
///
/// ```no_run
/// use evd_verbs::ibv::{ConnectParams, Context, QpCaps, SendOp};
/// use evd_verbs::CqId;
/// let ctx = Context::open(None)?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(64, CqId(1))?;
/// let mut qp = pd.create_rc_qp(&cq, &cq, &QpCaps::default(), 1)?;
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
// SAFETY: the `&self` methods are the posts (ibv_post_send,
// ibv_post_recv), which the providers serialise per QP with their own locks
// (the lock-free variants exist only for QPs made in a parent domain with a
// thread domain, which this crate never makes, or under a provider's
// single-threaded switch in the environment: `MLX5_SINGLE_THREADED=1`
// makes no QP here on an mlx5 device, `creation::refuse_if_single_threaded`,
// unless the process changes the variable after opening the context),
// and reads of fields fixed at creation (`qp_num`, caps, port). Every
// state call takes `&mut self`: ibv_modify_qp and ibv_query_qp write the
// QP's `state` field outside any lock, which posts read (librxe's
// post_recv, libhns' checks), mlx5 modifies an RC QP without its lock, and
// a move to RESET rewinds the queue indices the posts use. Destruction
// takes `self`.
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
        let ctx = pd.ctx.ctx;
        // SAFETY: a live PD of the live context `ctx`, and live CQs (this
        // function's contract).
        let qp = unsafe {
            match creation::creation_on(ctx, caps)? {
                Creation::WithoutScatterToCqe => {
                    creation::create_without_scatter_to_cqe(ctx, pd.pd, &mut init)
                }
                Creation::Plain => ffi::ibv_create_qp(pd.pd, &mut init),
            }
        };
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
            // The caller's promise covers this QP only: `caps()` hands out
            // no copy that would make another one without it.
            cpu_copied_receives: false,
            ..*caps
        };
        let mut qp = QueuePair {
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

    /// The QP number.
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
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
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
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
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
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
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
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
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// let mr = qp.pd().register(4096)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }
}

impl QueuePair {
    /// Destroy the QP now; its CQs and PD can be closed after. Work
    /// requests still outstanding get no completion (to have them flushed,
    /// [`set_error`](QueuePair::set_error) and drain the CQs first).
    ///
    /// # Errors
    ///
    /// A [`TeardownError`] if `ibv_destroy_qp` fails (the QP is leaked).
    ///
    /// ```no_run
    /// use evd_verbs::CqId;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16, CqId(0))?;
    /// let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1)?;
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

impl ProtectionDomain {
    /// A reliable-connected QP on `send_cq` and `recv_cq` with `caps`, in
    /// the INIT state on `port`; connect it with [`QueuePair::connect`] (or
    /// move it on with [`QueuePair::modify`]). The QP holds both CQs alive.
    ///
    /// The capabilities the provider granted (which may exceed those asked
    /// for) are [`QueuePair::caps`].
    ///
    /// # Errors
    ///
    /// The errno of `ibv_create_qp` (`EINVAL` for capabilities over the
    /// device's) or of the move to INIT (`ibv_modify_qp`); nothing is left
    /// behind. On an mlx5 device the QP is made with scatter-to-CQE off
    /// (see the [module docs](crate::ibv)), which rdma-core older than v21
    /// cannot do (`EINVAL`), nor a host whose `libmlx5.so.1` cannot be
    /// loaded (`EOPNOTSUPP`): there `MLX5_SCATTER_TO_CQE=0` in the
    /// environment turns it off for every QP, and the plain call is made.
    /// [`Unsupported`](io::ErrorKind::Unsupported) on an hns device for a
    /// QP that takes receives (`max_recv_wr` over 0) unless `caps` allow
    /// it ([`QpCaps::allow_cpu_copied_receives`]), and if the device's
    /// sysfs entries cannot be read, so that whether it is mlx5 or hns
    /// cannot be told (then the same switch and that promise let the
    /// plain call be made). `Unsupported` too on an mlx5 device (or one
    /// that cannot be told from one) when `MLX5_SINGLE_THREADED=1` is in
    /// the environment: it turns libmlx5's QP and CQ locks off, and this
    /// crate's QPs and driver use them from more than one thread.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::QpCaps;
    /// use evd_verbs::CqId;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(256, CqId(1))?;
    /// let mut caps = QpCaps::default();
    /// caps.max_send_wr = 128;
    /// caps.max_send_sge = 4;
    /// caps.max_inline_data = 64;
    /// let mut qp = pd.create_rc_qp(&cq, &cq, &caps, 1)?;
    /// assert!(qp.caps().max_inline_data >= 64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_rc_qp(
        self: &Arc<Self>,
        send_cq: &IbvCq,
        recv_cq: &IbvCq,
        caps: &QpCaps,
        port: u8,
    ) -> io::Result<QueuePair> {
        // The kernel names a CQ by its handle in the PD's context: a CQ of
        // another context would be taken for this context's CQ of the same
        // number (or refused), so it is refused here.
        for cq in [send_cq, recv_cq] {
            if cq.raw.ctx.ctx != self.ctx.ctx {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a CQ of another device context than the protection domain's",
                ));
            }
        }
        // SAFETY: the CQs are live and of this PD's context (checked above),
        // and the QP keeps Arcs to both.
        unsafe {
            QueuePair::create(
                self,
                (send_cq.raw.cq, recv_cq.raw.cq),
                [Some(send_cq.raw.clone()), Some(recv_cq.raw.clone())],
                caps,
                port,
            )
        }
    }

    /// [`create_rc_qp`](ProtectionDomain::create_rc_qp) on CQs made
    /// elsewhere (another crate, raw `ffi` calls), given as raw pointers.
    ///
    /// # Safety
    /// `send_cq` and `recv_cq` are live CQs of this PD's device context,
    /// and the caller keeps them alive (not destroyed) until the QP is
    /// closed or dropped.
    ///
    /// # Errors
    ///
    /// As [`create_rc_qp`](ProtectionDomain::create_rc_qp).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{ffi, QpCaps};
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// // SAFETY: a live context; no channel.
    /// let cq = unsafe { ffi::ibv_create_cq(ctx.as_ptr(), 64, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
    /// assert!(!cq.is_null());
    /// // SAFETY: `cq` is live until destroyed below, after the QP.
    /// let mut qp = unsafe { pd.create_rc_qp_raw(cq, cq, &QpCaps::default(), 1)? };
    /// qp.close()?;
    /// // SAFETY: ours, and no QP uses it any more.
    /// assert_eq!(unsafe { ffi::ibv_destroy_cq(cq) }, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn create_rc_qp_raw(
        self: &Arc<Self>,
        send_cq: *mut ffi::ibv_cq,
        recv_cq: *mut ffi::ibv_cq,
        caps: &QpCaps,
        port: u8,
    ) -> io::Result<QueuePair> {
        // SAFETY: the caller keeps the CQs alive while the QP lives.
        unsafe { QueuePair::create(self, (send_cq, recv_cq), [None, None], caps, port) }
    }
}
