//! Posting work requests on a [`QueuePair`]: receives and sends (send,
//! send with immediate, RDMA write and read) on up to [`MAX_SGES`]
//! scatter/gather entries, without allocating.

use super::QueuePair;
use crate::ibv::*;
use std::fmt;
use std::io;
use std::ptr;

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
#[non_exhaustive]
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
/// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
/// # let mr = pd.register(8192).unwrap();
/// let sges = [mr.sge(0, 16)?, mr.sge(512, 100)?]; // a header and a body
/// qp.post_send_wr(&SendRequest::new(1, SendOp::Send, &sges).with_signaled(false))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SendRequest<'a> {
    /// The id its completion carries.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The local memory: gathered for sends and writes, scattered into for
    /// reads ([`SendRequest::sges`]). Copied to the provider when posted;
    /// the memory itself must stay registered until the request completes
    /// (unless inline). Private, so that the entries an inline request's
    /// caller vouched for ([`SendRequest::with_inline`]) cannot be swapped
    /// afterwards.
    sges: &'a [Sge],
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
    /// `IBV_SEND_INLINE` ([`SendRequest::inline`],
    /// [`SendRequest::with_inline`]): private, because the provider reads
    /// the bytes on the CPU with no key check, so only a caller who vouches
    /// that they are allocated may set it.
    inline: bool,
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
    /// assert!(wr.signaled && !wr.inline());
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

impl SendRequest<'_> {
    /// With `IBV_SEND_SIGNALED` on or off ([`signaled`](Self::signaled)).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let mr = ctx.alloc_pd().unwrap().register(64).unwrap();
    /// let sges = [mr.sge(0, 8)?];
    /// let wr = SendRequest::new(1, SendOp::Send, &sges).with_signaled(false);
    /// assert!(!wr.signaled);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_signaled(mut self, signaled: bool) -> Self {
        self.signaled = signaled;
        self
    }

    /// With `IBV_SEND_SOLICITED` on or off ([`solicited`](Self::solicited)).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let mr = ctx.alloc_pd().unwrap().register(64).unwrap();
    /// let sges = [mr.sge(0, 8)?];
    /// let wr = SendRequest::new(1, SendOp::SendWithImm { imm: 1 }, &sges).with_solicited(true);
    /// assert!(wr.solicited);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_solicited(mut self, solicited: bool) -> Self {
        self.solicited = solicited;
        self
    }

    /// With `IBV_SEND_FENCE` on or off ([`fence`](Self::fence)).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let mr = ctx.alloc_pd().unwrap().register(64).unwrap();
    /// let sges = [mr.sge(0, 8)?];
    /// let wr = SendRequest::new(1, SendOp::Send, &sges).with_fence(true);
    /// assert!(wr.fence);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_fence(mut self, fence: bool) -> Self {
        self.fence = fence;
        self
    }

    /// `IBV_SEND_INLINE`: the provider copies the bytes into the request
    /// when it is posted, so the memory may be reused as soon as
    /// [`post_send_wr`](QueuePair::post_send_wr) returns, and its key is
    /// not checked. At most [`QpCaps::max_inline_data`] bytes in all
    /// (else [`PostWrError::InlineTooLong`]); sends and writes only.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let mr = ctx.alloc_pd().unwrap().register(64).unwrap();
    /// let sges = [mr.sge(0, 8)?];
    /// assert!(!SendRequest::new(1, SendOp::Send, &sges).inline());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn inline(&self) -> bool {
        self.inline
    }

    /// The entries it was made with.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let mr = ctx.alloc_pd().unwrap().register(64).unwrap();
    /// let sges = [mr.sge(0, 8)?];
    /// assert_eq!(SendRequest::new(1, SendOp::Send, &sges).sges(), &sges);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sges(&self) -> &[Sge] {
        self.sges
    }

    /// With `IBV_SEND_INLINE` on or off ([`inline`](Self::inline)).
    ///
    /// # Safety
    /// With `inline`, the provider reads every entry's bytes on the CPU
    /// when the request is posted, without the key check that makes a stale
    /// entry (its region deregistered or freed) fail with a protection
    /// error otherwise: every entry's `length` bytes at its address must be
    /// allocated and readable whenever a request built from this one is
    /// posted (an [`Sge`] of a live [`MemoryRegion`],
    /// or memory the caller keeps for that long).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let mr = ctx.alloc_pd().unwrap().register(64).unwrap();
    /// let sges = [mr.sge(0, 8)?];
    /// // SAFETY: `mr` outlives every post of this request.
    /// let wr = unsafe { SendRequest::new(1, SendOp::Send, &sges).with_inline(true) };
    /// assert!(wr.inline());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub unsafe fn with_inline(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
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

impl QueuePair {
    /// Post a receive of `len` bytes at `offset` of `mr` (one SGE):
    /// shorthand for [`post_recv_sges`](QueuePair::post_recv_sges). A range
    /// outside `mr` is an [`InvalidInput`](io::ErrorKind::InvalidInput)
    /// error carrying a [`RangeError`].
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) carrying a
    /// [`RangeError`] for a range outside `mr`; otherwise as
    /// [`post_recv_sges`](QueuePair::post_recv_sges), converted.
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
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
    /// # Errors
    ///
    /// [`PostWrError::TooManySges`] over [`MAX_SGES`];
    /// [`PostWrError::Verbs`] with the errno of `ibv_post_recv` (`ENOMEM`:
    /// the receive queue is full).
    ///
    /// ```no_run
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
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
        // contract), and the device writes it only after checking its key,
        // so a region deregistered earlier only fails the request (QPs on
        // mlx5 are made without scatter-to-CQE, whose poll-time copy skips
        // that check; on hns, whose inline receives are copied so, a QP
        // takes receives only on `QpCaps::allow_cpu_copied_receives`'
        // promise that the region outlives that poll).
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
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) carrying a
    /// [`RangeError`] for a range outside `mr`; otherwise as
    /// [`post_send_wr`](QueuePair::post_send_wr), converted.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::SendOp;
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// # let mut mr = pd.register(8192).unwrap();
    /// mr.write(0, b"hello")?;
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
    /// # Errors
    ///
    /// [`PostWrError::TooManySges`] over [`MAX_SGES`];
    /// [`PostWrError::InlineTooLong`] for an inline request over the QP's
    /// [`max_inline_data`](QpCaps::max_inline_data); [`PostWrError::Verbs`]
    /// with the errno of `ibv_post_send` (`ENOMEM`: the send queue is full).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::{SendOp, SendRequest};
    /// # let ctx = evd_verbs::ibv::Context::open(None).unwrap();
    /// # let pd = ctx.alloc_pd().unwrap();
    /// # let cq = ctx.create_cq(16, evd_verbs::CqId(0)).unwrap();
    /// # let mut qp = pd.create_rc_qp(&cq, &cq, &Default::default(), 1).unwrap();
    /// # let mr = pd.register(8192).unwrap();
    /// let sges = [mr.sge(0, 32)?];
    /// // Three unsignaled sends, then a signaled one: one completion.
    /// for i in 0..3 {
    ///     qp.post_send_wr(&SendRequest::new(i, SendOp::Send, &sges).with_signaled(false))?;
    /// }
    /// qp.post_send_wr(&SendRequest::new(3, SendOp::Send, &sges))?;
    /// // A small message copied at post time. SAFETY: `mr` is live.
    /// let inline = unsafe { SendRequest::new(4, SendOp::Send, &sges).with_inline(true) };
    /// qp.post_send_wr(&inline)?;
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
