//! Registering memory with a protection domain: the constructors of
//! [`MemoryRegion`] on [`ProtectionDomain`].

use super::Memory;
use crate::ibv::*;
use std::io;
use std::ptr;
use std::sync::Arc;

impl ProtectionDomain {
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
