//! The scatter/gather entries that name a memory region's bytes in work
//! requests ([`Sge`]), and the error of a range outside the region
//! ([`RangeError`]).

use super::super::ffi;
use std::fmt;
use std::io;

/// One scatter/gather entry of a work request (`ibv_sge`): `length` bytes
/// at `addr`, in the registration of local key `lkey`.
///
/// Made safely only from a [`MemoryRegion`](super::MemoryRegion) ([`MemoryRegion::sge`](super::MemoryRegion::sge), range
/// checked), or with the unsafe [`Sge::from_raw`]. It is plain data, so it
/// can be kept and posted from any thread. Keep its region registered
/// while requests posted with it are outstanding: once the region is
/// deregistered its key no longer names that memory, and a request using
/// it fails with a protection error, unless a later registration was given
/// the same key (providers reuse them), whose memory it then names: keep
/// an entry no longer than its region. (An inline send skips the key check
/// and reads the bytes on the CPU, which is why
/// [`SendRequest::with_inline`](crate::ibv::SendRequest::with_inline) is
/// unsafe; for the providers that write receives on the CPU, see the
/// [module docs](crate::ibv).)
///
/// ```no_run
/// let ctx = evd_verbs::ibv::Context::open(None)?;
/// let pd = ctx.alloc_pd()?;
/// let mr = pd.register(4096)?;
/// let sge = mr.sge(128, 64)?;
/// assert_eq!((sge.addr(), sge.length(), sge.lkey()), (mr.addr() + 128, 64, mr.lkey()));
/// assert!(mr.sge(4090, 64).is_err()); // past the end
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sge {
    // Set by `MemoryRegion::sge` (range checked) or `Sge::from_raw` only.
    pub(super) addr: u64,
    pub(super) length: u32,
    pub(super) lkey: u32,
}

impl Sge {
    /// An entry from raw parts, for memory registered elsewhere (or, for an
    /// inline send, not registered at all).
    ///
    /// # Safety
    /// Until every work request posted with it has completed (or its QP is
    /// destroyed), `length` bytes at `addr`:
    /// - lie inside a live registration whose local key is `lkey` (not
    ///   needed for an [inline](crate::ibv::SendRequest::inline) send,
    ///   whose bytes are copied when it is posted and only need to be
    ///   readable then);
    /// - stay allocated and unmoved, readable for sends and RDMA writes,
    ///   and, for receives and RDMA reads (which the device writes), not
    ///   referenced by anything that assumes they do not change.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::Sge;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let mr = pd.register(4096)?;
    /// // SAFETY: inside `mr`, which outlives every request posted with it.
    /// let sge = unsafe { Sge::from_raw(mr.addr() + 16, 32, mr.lkey()) };
    /// assert_eq!(sge, mr.sge(16, 32)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn from_raw(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    /// The address.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// assert_eq!(mr.sge(8, 8)?.addr(), mr.addr() + 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The length in bytes.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// assert_eq!(mr.sge(8, 8)?.length(), 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn length(&self) -> u32 {
        self.length
    }

    /// The local key.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// assert_eq!(mr.sge(0, 8)?.lkey(), mr.lkey());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    pub(in crate::ibv) fn raw(&self) -> ffi::ibv_sge {
        ffi::ibv_sge {
            addr: self.addr,
            length: self.length,
            lkey: self.lkey,
        }
    }
}

/// A range not inside a memory region ([`MemoryRegion::sge`](super::MemoryRegion::sge)), or longer
/// than an SGE can say (`u32::MAX` bytes).
///
/// ```no_run
/// let ctx = evd_verbs::ibv::Context::open(None)?;
/// let mr = ctx.alloc_pd()?.register(64)?;
/// let e = mr.sge(60, 8).unwrap_err();
/// assert_eq!((e.offset, e.len, e.region_len), (60, 8, 64));
/// let io: std::io::Error = e.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RangeError {
    /// The offset asked for.
    pub offset: usize,
    /// The length asked for.
    pub len: usize,
    /// The region's length.
    pub region_len: usize,
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes at offset {} are not inside a memory region of {} bytes",
            self.len, self.offset, self.region_len
        )
    }
}

impl std::error::Error for RangeError {}

impl From<RangeError> for io::Error {
    /// An [`InvalidInput`](io::ErrorKind::InvalidInput) error carrying it.
    fn from(e: RangeError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}
