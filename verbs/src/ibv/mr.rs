//! Memory regions (`ibv_mr`): buffers registered with the device.

use super::*;
use crate::teardown::{TeardownError, VerbsObject};
use std::fmt;
use std::mem;
use std::ptr;
use std::sync::Arc;

/// A registered buffer.
pub struct MemoryRegion {
    /// Non-null until `destroy`, which only `close` and `Drop` call.
    pub(super) mr: *mut ffi::ibv_mr,
    /// Registered while `mr` is non-null.
    pub(super) buf: Box<[u8]>,
    pub(super) pd: Arc<ProtectionDomain>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("mr", &self.mr)
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.buf.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish_non_exhaustive()
    }
}

// SAFETY: the MR is used through libibverbs (thread-safe) and the buffer is
// owned; the hardware writes it only while work requests that the owner
// posted are outstanding.
unsafe impl Send for MemoryRegion {}

impl MemoryRegion {
    /// The buffer.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
    /// The buffer, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    /// The address remote peers write to.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).lkey }
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).rkey }
    }
    pub(super) fn sge(&self, offset: usize, len: usize) -> ffi::ibv_sge {
        assert!(offset + len <= self.buf.len(), "range outside the region");
        ffi::ibv_sge {
            addr: self.addr() + offset as u64,
            length: len as u32,
            lkey: self.lkey(),
        }
    }
}

impl MemoryRegion {
    /// Deregister the region now and free its buffer.
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// pd.register(4096)?.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(mut self) -> Result<(), TeardownError> {
        self.destroy()
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
            // freed.
            Box::leak(mem::take(&mut self.buf));
            keep_forever(&self.pd);
        })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        report_failure(self.destroy());
    }
}
