//! Reliable-connected queue pairs (`ibv_qp`): creating, reading and
//! destroying one here; its state transitions (connecting) in `state`,
//! posting work requests in `post`.

mod post;
mod state;

pub use post::{MAX_SGES, PostWrError, SendOp, SendRequest};
pub use state::{ConnectParams, Endpoint, Mtu, QpState};

use super::cq::RawCq;
use super::teardown::{TeardownError, VerbsObject};
use super::*;
use std::fmt;
use std::io;
use std::mem;
use std::os::unix::ffi::OsStrExt;
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
// thread domain, which this crate never makes, or when the user sets a
// provider's single-threaded switch in the environment, such as
// `MLX5_SINGLE_THREADED=1`, which declares the process single-threaded to
// it), and reads of fields fixed at creation (`qp_num`, caps, port). Every
// state call takes `&mut self`: ibv_modify_qp and ibv_query_qp write the
// QP's `state` field outside any lock, which posts read (librxe's
// post_recv, libhns' checks), mlx5 modifies an RC QP without its lock, and
// a move to RESET rewinds the queue indices the posts use. Destruction
// takes `self`.
unsafe impl Sync for QueuePair {}

/// Whether `ctx` is open on an mlx5 device (ConnectX, BlueField): one
/// whose kernel driver, as sysfs names it (`<ibdev_path>/device/driver`),
/// is `mlx5_core` (or a flavour of it, such as a sub-function's). Asked of
/// the kernel, not of libmlx5: before rdma-core v22 `mlx5dv_query_device`
/// answered for any device, and its `mlx5dv_create_qp` ran mlx5's code on
/// whatever context it was given.
///
/// Unreadable (the device's sysfs directory cannot be read, as in some
/// sandboxes): the error, and the QP is refused rather than made with an
/// mlx5 default that writes receives with the CPU.
fn is_mlx5(ctx: *mut ffi::ibv_context) -> io::Result<bool> {
    // SAFETY: a live context (the caller's) and its device, whose
    // `ibdev_path` libibverbs fills with a NUL-terminated sysfs path.
    let path = unsafe { std::ffi::CStr::from_ptr((*(*ctx).device).ibdev_path.as_ptr()) };
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    let driver = kernel_driver(path).map_err(|e| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "cannot tell whether {} is an mlx5 device, whose QPs need \
                 scatter-to-CQE off ({e}); MLX5_SCATTER_TO_CQE=0 in the \
                 environment turns it off for every QP",
                path.display()
            ),
        )
    })?;
    Ok(driver.is_some_and(|d| is_mlx5_driver(&d)))
}

/// The kernel driver of the RDMA device at sysfs path `ibdev_path`, if it
/// has a parent device bound to one (a software device such as rxe may
/// have none); the error if `ibdev_path` itself cannot be read.
fn kernel_driver(ibdev_path: &std::path::Path) -> io::Result<Option<std::ffi::OsString>> {
    std::fs::metadata(ibdev_path)?;
    Ok(std::fs::read_link(ibdev_path.join("device/driver"))
        .ok()
        .and_then(|driver| driver.file_name().map(Into::into)))
}

/// `mlx5_core`, or a flavour of it (`mlx5_core.sf`).
fn is_mlx5_driver(driver: &std::ffi::OsStr) -> bool {
    driver.as_bytes().starts_with(b"mlx5_core")
}

/// libmlx5's own switch (`MLX5_SCATTER_TO_CQE=0` in the environment,
/// read at each QP's creation by every rdma-core that has the feature)
/// turns scatter-to-CQE off for every QP: then the plain call is safe.
fn scatter_to_cqe_off_by_env() -> bool {
    std::env::var_os("MLX5_SCATTER_TO_CQE").is_some_and(|v| v == "0")
}

/// `ibv_create_qp` on an mlx5 device, with scatter-to-CQE off; null
/// (with `errno`) where that cannot be asked: `EINVAL` before rdma-core
/// v21, which has no such flag, `EOPNOTSUPP` if `libmlx5.so.1` cannot be
/// loaded. The QP is then refused, not made with the copy on.
///
/// By default libmlx5 asks for it on every RC QP: a receive of up to 32
/// (or 64) bytes, and with `sq_sig_all` an RDMA read of as many, lands in
/// the CQE, and the provider copies it to the work request's buffer with
/// `memcpy` when the CQ is *polled*, on the polling thread, without the
/// key check the HCA makes. A region closed or dropped between the
/// completion and the poll would then be written after it was given back
/// or freed (and a region read while a receive is outstanding would race a
/// plain CPU write): the soundness of posting with a safe [`Sge`] rests on
/// the HCA checking its key before it writes, so here it always does.
///
/// # Safety
/// As `ibv_create_qp`: a live PD of the live context `ctx`, live CQs of it.
unsafe fn create_without_scatter_to_cqe(
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    init: &mut ffi::ibv_qp_init_attr,
) -> *mut ffi::ibv_qp {
    let mut attr: ffi::ibv_qp_init_attr_ex = zeroed();
    attr.send_cq = init.send_cq;
    attr.recv_cq = init.recv_cq;
    attr.cap = init.cap;
    attr.qp_type = init.qp_type;
    attr.sq_sig_all = init.sq_sig_all;
    attr.comp_mask = ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    attr.pd = pd;
    let mut dv: ffi::mlx5dv_qp_init_attr = zeroed();
    dv.comp_mask =
        u64::from(ffi::mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS.0);
    dv.create_flags = ffi::mlx5dv_qp_create_flags::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE.0;
    // SAFETY: the caller's contract; both attribute structs are ours and
    // writable. libmlx5's `ibv_create_qp` is this very call with no mlx5
    // attributes, and writes the granted capabilities back the same way.
    let qp = unsafe { ffi::mlx5dv_create_qp(ctx, &mut attr, &mut dv) };
    init.cap = attr.cap;
    qp
}

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
        let mlx5 = !scatter_to_cqe_off_by_env() && is_mlx5(ctx)?;
        // SAFETY: a live PD of the live context `ctx`, and live CQs (this
        // function's contract).
        let qp = unsafe {
            if mlx5 {
                create_without_scatter_to_cqe(ctx, pd.pd, &mut init)
            } else {
                ffi::ibv_create_qp(pd.pd, &mut init)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::Path;

    /// A sysfs-like tree: `<root>/<dev>/device/driver` linking to a driver
    /// directory named `driver`, or no parent device at all (`None`).
    fn ibdev(root: &Path, dev: &str, driver: Option<&str>) -> std::path::PathBuf {
        let ibdev = root.join(dev);
        std::fs::create_dir_all(&ibdev).unwrap();
        if let Some(driver) = driver {
            let target = root.join("bus/drivers").join(driver);
            std::fs::create_dir_all(&target).unwrap();
            let parent = root.join("devices").join(dev);
            std::fs::create_dir_all(&parent).unwrap();
            symlink(&target, parent.join("driver")).unwrap();
            symlink(&parent, ibdev.join("device")).unwrap();
        }
        ibdev
    }

    #[test]
    fn only_a_device_bound_to_mlx5_core_takes_the_mlx5_path() {
        let root = std::env::temp_dir().join(format!("evd-ibdev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let cases = [
            ("mlx5_0", Some("mlx5_core"), true),
            // Renamed by udev: the driver still says.
            ("rocep1s0f0", Some("mlx5_core"), true),
            ("mlx5_sf", Some("mlx5_core.sf"), true),
            ("mlx4_0", Some("mlx4_core"), false),
            ("hns_0", Some("hns3"), false),
            // A software device with no parent: not mlx5, whatever its name.
            ("rxe0", None, false),
            ("mlx5_fake", None, false),
        ];
        for (dev, driver, mlx5) in cases {
            let path = ibdev(&root, dev, driver);
            let found = kernel_driver(&path).unwrap();
            assert_eq!(found.as_deref(), driver.map(std::ffi::OsStr::new), "{dev}");
            assert_eq!(found.is_some_and(|d| is_mlx5_driver(&d)), mlx5, "{dev}");
        }
        // A device whose sysfs directory cannot be read: no answer (not
        // "no driver", which would say "not mlx5").
        assert!(kernel_driver(&root.join("unreadable")).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
