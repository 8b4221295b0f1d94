//! Memory regions (`ibv_mr`): buffers registered with the device, with the
//! access they allow, and the scatter/gather entries that name them in
//! work requests.

mod access;
mod register;
mod sge;

pub use access::AccessFlags;
pub use sge::{RangeError, Sge};

use super::teardown::{TeardownError, VerbsObject};
use super::*;
use std::fmt;
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// The memory a region covers: `len` bytes at `ptr`, reached only through
/// `ptr` (a buffer the region owns is held as the raw pointer of its `Box`,
/// so that moving the region asserts nothing about memory the device
/// writes).
pub(super) struct Memory {
    ptr: *mut u8,
    len: usize,
    /// `ptr` came from `Box::into_raw` of a `Box<[u8]>` of `len` bytes that
    /// this value frees when dropped (cleared: leaked, or handed back).
    owned: bool,
}

impl Memory {
    /// A buffer the region owns: freed when dropped, or given back by
    /// [`take_buffer`](Memory::take_buffer).
    pub(super) fn owned(buf: Box<[u8]>) -> Memory {
        let len = buf.len();
        let ptr = Box::into_raw(buf).cast::<u8>();
        Memory {
            ptr,
            len,
            owned: true,
        }
    }

    /// The caller's memory (`register_raw`): never freed here.
    pub(super) fn raw(ptr: *mut u8, len: usize) -> Memory {
        Memory {
            ptr,
            len,
            owned: false,
        }
    }

    /// The owned buffer, handed back (`None` for raw memory).
    fn take_buffer(&mut self) -> Option<Box<[u8]>> {
        if !mem::replace(&mut self.owned, false) {
            return None;
        }
        // SAFETY: `owned`: from `Box::into_raw` of `len` bytes, not freed or
        // handed back before (`owned` is now cleared).
        Some(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(self.ptr, self.len)) })
    }

    /// Never free it: the device may still access it.
    fn leak(&mut self) {
        self.owned = false;
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        drop(self.take_buffer());
    }
}

/// A registered buffer: one this region owns (made by
/// [`ProtectionDomain::register`], [`register_with`](ProtectionDomain::register_with)
/// or [`register_buffer`](ProtectionDomain::register_buffer)), or the
/// caller's memory ([`register_raw`](ProtectionDomain::register_raw)).
///
/// ```no_run
/// use evd_verbs::ibv::AccessFlags;
/// let ctx = evd_verbs::ibv::Context::open(None)?;
/// let pd = ctx.alloc_pd()?;
/// let mut mr = pd.register_with(4096, AccessFlags::LOCAL_WRITE)?;
/// mr.write(0, b"hello")?;
/// assert_eq!(mr.access(), AccessFlags::LOCAL_WRITE);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryRegion {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    pub(super) mr: *mut ffi::ibv_mr,
    /// Registered while `mr` is non-null.
    memory: Memory,
    access: AccessFlags,
    pub(super) pd: Arc<ProtectionDomain>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("mr", &self.mr)
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("access", &self.access)
            .field("owned", &self.memory.owned)
            .finish_non_exhaustive()
    }
}

// SAFETY: the MR is used through libibverbs (thread-safe); the memory is
// owned, or the caller's under `register_raw`'s contract (valid and unmoved
// until deregistered, viewed only through this region); the hardware
// writes it only while work requests that the owner posted are
// outstanding.
unsafe impl Send for MemoryRegion {}

impl MemoryRegion {
    /// Register `memory` in `pd`.
    ///
    /// # Safety
    /// The memory stays valid and unmoved until the region is deregistered
    /// (`Owned`: the region holds it; `Raw`: the caller promised it).
    pub(super) unsafe fn register(
        pd: &Arc<ProtectionDomain>,
        memory: Memory,
        access: AccessFlags,
    ) -> Result<MemoryRegion, (io::Error, Memory)> {
        let (addr, len) = (memory.ptr, memory.len);
        // SAFETY: a live PD; the memory is valid and unmoved until the
        // region deregisters it (this function's contract).
        let mr = unsafe { ffi::ibv_reg_mr(pd.pd, addr.cast(), len, access.bits() as i32) };
        if mr.is_null() {
            return Err((last_err(), memory));
        }
        Ok(MemoryRegion {
            mr,
            memory,
            access,
            pd: pd.clone(),
        })
    }

    fn base(&self) -> *mut u8 {
        self.memory.ptr
    }

    /// The registered memory, as a slice: zero-copy, and unsafe, because a
    /// slice promises that its bytes do not change while it lives, and the
    /// device writes this memory (a receive, the local end of an RDMA read
    /// or atomic) and, with remote write or atomic access, so do peers. To
    /// read what the device may be writing, copy it out with
    /// [`read`](MemoryRegion::read).
    ///
    /// # Safety
    ///
    /// While the slice lives, nothing writes the memory: no receive, RDMA
    /// read or atomic work request posted with it is outstanding, and if
    /// the region grants [`REMOTE_WRITE`](AccessFlags::REMOTE_WRITE) or
    /// [`REMOTE_ATOMIC`](AccessFlags::REMOTE_ATOMIC) no peer holding its
    /// rkey writes it.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// // SAFETY: nothing is posted with the region and its rkey was never
    /// // handed out.
    /// assert!(unsafe { mr.as_slice() }.iter().all(|&b| b == 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Not from safe code:
    ///
    /// ```compile_fail,E0133
    /// fn view(mr: &evd_verbs::ibv::MemoryRegion) -> &[u8] {
    ///     mr.as_slice()
    /// }
    /// ```
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the memory is valid for `len` bytes while registered
        // (owned, or `register_raw`'s contract) and viewed only through this
        // region; the caller promises nothing writes it while the slice
        // lives.
        unsafe { std::slice::from_raw_parts(self.base(), self.len()) }
    }

    /// The registered memory, as a mutable slice (zero-copy); see
    /// [`as_slice`](MemoryRegion::as_slice). To write it without that
    /// promise, copy in with [`write`](MemoryRegion::write).
    ///
    /// # Safety
    ///
    /// While the slice lives, nothing else reads or writes the memory: no
    /// work request posted with it is outstanding, and no peer holding its
    /// rkey reads or writes it.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mut mr = ctx.alloc_pd()?.register(64)?;
    /// // SAFETY: nothing is posted with the region and its rkey was never
    /// // handed out.
    /// let bytes = unsafe { mr.as_mut_slice() };
    /// bytes[0] = 1;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only view on
        // the CPU, and the caller promises the device and peers keep off.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len()) }
    }

    /// Copy `out.len()` bytes at `offset` out of the region, whatever the
    /// device or a peer is doing to them: each byte is read once, as an
    /// atomic (relaxed) load, so a loop that polls the region for a peer's
    /// RDMA write sees it land (a slice may be read once and kept in a
    /// register), and a read racing the device is no data race. A byte
    /// written meanwhile may be old or new, each on its own: the bytes are
    /// not ordered with one another.
    ///
    /// # Errors
    ///
    /// A [`RangeError`] if the range is not inside the region.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// let mut seq = [0u8; 8];
    /// mr.read(0, &mut seq)?; // e.g. the sequence number a peer writes
    /// assert!(mr.read(60, &mut seq).is_err()); // past the end
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), RangeError> {
        let at = self.range(offset, out.len())?;
        for (i, o) in out.iter_mut().enumerate() {
            // SAFETY: inside the region (`range`), valid while registered
            // (an `AtomicU8` has the alignment of a `u8`); on the CPU every
            // access of these bytes is atomic but the unsafe slices', whose
            // contract orders them with this one.
            *o = unsafe { AtomicU8::from_ptr(at.add(i)) }.load(Ordering::Relaxed);
        }
        Ok(())
    }

    /// Copy `data` into the region at `offset`, a byte at a time with
    /// atomic (relaxed) stores, as [`read`](MemoryRegion::read). A byte the
    /// device sends while it is written may be old or new.
    ///
    /// # Errors
    ///
    /// A [`RangeError`] if the range is not inside the region.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mut mr = ctx.alloc_pd()?.register(64)?;
    /// mr.write(0, b"hello")?;
    /// let mut back = [0u8; 5];
    /// mr.read(0, &mut back)?;
    /// assert_eq!(&back, b"hello");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), RangeError> {
        let at = self.range(offset, data.len())?;
        for (i, &b) in data.iter().enumerate() {
            // SAFETY: as in `read`; `&mut self` keeps every slice of it away.
            unsafe { AtomicU8::from_ptr(at.add(i)) }.store(b, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The address of `len` bytes at `offset`, if they are inside the
    /// region.
    fn range(&self, offset: usize, len: usize) -> Result<*mut u8, RangeError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(self.base().wrapping_add(offset)),
            _ => Err(RangeError {
                offset,
                len,
                region_len: self.len(),
            }),
        }
    }

    /// The length in bytes.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// assert_eq!(ctx.alloc_pd()?.register(4096)?.len(), 4096);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.memory.len
    }

    /// Whether the region is empty.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// assert!(!ctx.alloc_pd()?.register(64)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address remote peers write to.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// assert_ne!(mr.addr(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn addr(&self) -> u64 {
        self.base() as u64
    }

    /// The local key.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// println!("lkey {:#x}", mr.lkey());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).lkey }
    }

    /// The remote key, which peers name the region by in RDMA reads and
    /// writes.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// println!("rkey {:#x}", mr.rkey());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).rkey }
    }

    /// The access it was registered with.
    ///
    /// ```no_run
    /// use evd_verbs::ibv::AccessFlags;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// assert!(mr.access().contains(AccessFlags::REMOTE_WRITE));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The raw memory region, for verbs this module does not wrap.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(64)?;
    /// // SAFETY: a live MR.
    /// assert_eq!(unsafe { (*mr.as_ptr()).length }, 64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_ptr(&self) -> *mut ffi::ibv_mr {
        self.mr
    }

    /// The protection domain it is registered in.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let mr = pd.register(64)?;
    /// assert!(std::sync::Arc::ptr_eq(mr.pd(), &pd));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The scatter/gather entry for `len` bytes at `offset`, or an error
    /// if that is not inside the region (or `len` exceeds `u32::MAX`).
    ///
    /// # Errors
    ///
    /// A [`RangeError`] if the range is not inside the region or `len`
    /// exceeds `u32::MAX`.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let mr = ctx.alloc_pd()?.register(4096)?;
    /// let (head, body) = (mr.sge(0, 16)?, mr.sge(1024, 512)?);
    /// assert!(mr.sge(4096, 1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge, RangeError> {
        let at = self.range(offset, len)?;
        let length = u32::try_from(len).map_err(|_| RangeError {
            offset,
            len,
            region_len: self.len(),
        })?;
        Ok(Sge {
            addr: at as u64,
            length,
            lkey: self.lkey(),
        })
    }
}

impl MemoryRegion {
    /// Deregister the region now; returns the buffer it owned (`None` for
    /// [`register_raw`](ProtectionDomain::register_raw) memory, which is
    /// the caller's again).
    ///
    /// # Errors
    ///
    /// A [`TeardownError`] if `ibv_dereg_mr` fails (the region and its
    /// memory are leaked: the device may still access them).
    ///
    /// ```no_run
    /// use evd_verbs::ibv::AccessFlags;
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// let mr = pd.register_buffer(vec![7u8; 4096].into_boxed_slice(), AccessFlags::LOCAL_WRITE)?;
    /// let buf = mr.close()?.expect("an owned buffer");
    /// assert_eq!(buf.len(), 4096);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(mut self) -> Result<Option<Box<[u8]>>, TeardownError> {
        self.destroy()?;
        Ok(self.memory.take_buffer())
    }

    fn destroy(&mut self) -> Result<(), TeardownError> {
        let mr = mem::replace(&mut self.mr, ptr::null_mut());
        if mr.is_null() {
            return Ok(());
        }
        // SAFETY: from ibv_reg_mr, and nulled above so deregistered at most
        // once.
        let ret = unsafe { ffi::ibv_dereg_mr(mr) };
        destroyed(VerbsObject::MemoryRegion, "ibv_dereg_mr", ret).inspect_err(|_| {
            // Still registered: the HCA may write the buffer, so it is never
            // freed (raw memory: the caller cannot know, so is told by the
            // error; its contract already keeps it valid until a successful
            // deregistration).
            self.memory.leak();
            keep_forever(&self.pd);
        })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}
