//! Protection domains (`ibv_pd`): what memory regions and QPs are made in.

use super::mr::Memory;
use super::teardown::{CloseError, TeardownError, VerbsObject};
use super::*;
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;

/// A protection domain, from [`Context::alloc_pd`].
///
/// ```no_run
/// let ctx = evd_verbs::ibv::Context::open(None)?;
/// let pd = ctx.alloc_pd()?;
/// let mr = pd.register(4096)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    /// # Errors
    ///
    /// [`CloseError::InUse`] (with this handle) while other handles are
    /// alive; [`CloseError::Failed`] if `ibv_dealloc_pd` fails.
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
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// assert!(std::sync::Arc::ptr_eq(pd.context(), &ctx));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The raw protection domain, for verbs this module does not wrap.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// // SAFETY: a live PD.
    /// assert_eq!(unsafe { (*pd.as_ptr()).context }, ctx.as_ptr());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.pd
    }

    /// Register a zeroed buffer of `len` bytes (at least 1) for local
    /// write and remote read/write access: shorthand for
    /// [`register_with`](ProtectionDomain::register_with).
    ///
    /// # Errors
    ///
    /// As [`register_with`](ProtectionDomain::register_with).
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(4096)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register(self: &Arc<Self>, len: usize) -> io::Result<MemoryRegion> {
        self.register_with(
            len,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
    }

    /// Register a zeroed buffer of `len` bytes (at least 1) that the region
    /// owns, with `access`.
    ///
    /// # Errors
    ///
    /// [`OutOfMemory`](io::ErrorKind::OutOfMemory) if no buffer of `len`
    /// bytes can be allocated; else the errno of `ibv_reg_mr` (`ENOMEM` past
    /// the locked-memory limit).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::AccessFlags;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// // Peers may read it, not write it.
    /// let mr = pd.register_with(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register_with(
        self: &Arc<Self>,
        len: usize,
        access: AccessFlags,
    ) -> io::Result<MemoryRegion> {
        self.register_buffer(zeroed(len)?, access)
    }

    /// Register the caller's buffer with `access`; the region owns it while
    /// registered, and [`MemoryRegion::close`] gives it back (dropping the
    /// region frees it). On failure the buffer is dropped.
    ///
    /// # Errors
    ///
    /// The errno of `ibv_reg_mr` (`ENOMEM` past the locked-memory limit);
    /// the buffer is dropped.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::AccessFlags;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let buf: Box<[u8]> = b"ready-made payload".to_vec().into_boxed_slice();
    /// let mr = pd.register_buffer(buf, AccessFlags::empty())?; // send-only
    /// let mut back = [0u8; 18];
    /// mr.read(0, &mut back)?;
    /// assert_eq!(&back, b"ready-made payload");
    /// let buf = mr.close()?.expect("owned");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register_buffer(
        self: &Arc<Self>,
        buf: Box<[u8]>,
        access: AccessFlags,
    ) -> io::Result<MemoryRegion> {
        // SAFETY: the region holds the buffer and frees (or returns) it only
        // after a successful deregistration (`MemoryRegion::destroy`);
        // moving the Box does not move its heap memory.
        unsafe { MemoryRegion::register(self, Memory::owned(buf), access) }.map_err(|(e, _)| e)
    }

    /// Register `len` bytes of the caller's memory at `ptr` with `access`.
    /// The region does not own or free it; [`MemoryRegion::read`] and
    /// [`write`](MemoryRegion::write) copy out of and into it (and the
    /// unsafe [`as_slice`](MemoryRegion::as_slice) views it).
    ///
    /// # Safety
    /// - `ptr` is valid for reads and writes of `len` bytes and stays
    ///   allocated and unmoved until the region is closed or dropped, and
    ///   for ever if deregistering it fails (a [`TeardownError`], returned
    ///   by `close` or reported to the [teardown hook](crate::teardown)):
    ///   the device may access it until then.
    /// - While the region lives the memory is not used through other
    ///   references that assume it does not change (the device and the
    ///   region write it), as with `slice::from_raw_parts_mut`.
    ///
    /// # Errors
    ///
    /// The errno of `ibv_reg_mr` (`EINVAL` for memory it cannot pin).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::AccessFlags;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let mut pool = vec![0u8; 1 << 20]; // e.g. a pool from another allocator
    /// // SAFETY: `pool` outlives the region (closed below) and is used only
    /// // through it meanwhile.
    /// let mr = unsafe { pd.register_raw(pool.as_mut_ptr(), pool.len(), AccessFlags::LOCAL_WRITE)? };
    /// assert_eq!(mr.addr(), pool.as_ptr() as u64);
    /// assert!(mr.close()?.is_none()); // not owned
    /// drop(pool);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn register_raw(
        self: &Arc<Self>,
        ptr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> io::Result<MemoryRegion> {
        // A null pointer is valid for no bytes, but a region's slice of it
        // would not be.
        if ptr.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "register_raw: a null pointer",
            ));
        }
        // SAFETY: the caller keeps the memory valid and unmoved until the
        // region is deregistered (this function's contract).
        unsafe { MemoryRegion::register(self, Memory::raw(ptr, len), access) }.map_err(|(e, _)| e)
    }

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

/// A zeroed buffer of `len` bytes (at least 1), or `OutOfMemory`: a length
/// no allocation can hold is an error of the call, not a panic or an abort.
fn zeroed(len: usize) -> io::Result<Box<[u8]>> {
    let len = len.max(1);
    let too_big = || {
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("a buffer of {len} bytes"),
        )
    };
    let layout = std::alloc::Layout::array::<u8>(len).map_err(|_| too_big())?;
    // SAFETY: `layout`'s size is `len`, at least 1.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return Err(too_big());
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of
    // `[u8; len]`, and every byte is initialised (zero); the box owns it.
    Ok(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(p, len)) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_buffer_no_allocation_can_hold_is_out_of_memory_not_a_panic() {
        for len in [usize::MAX, isize::MAX as usize] {
            let e = super::zeroed(len).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{len}");
        }
        assert_eq!(&*super::zeroed(0).unwrap(), [0]);
        assert!(super::zeroed(4096).unwrap().iter().all(|&b| b == 0));
    }
}
