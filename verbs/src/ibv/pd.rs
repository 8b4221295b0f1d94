//! Protection domains (`ibv_pd`): what memory regions and QPs are made in;
//! allocated from a [`Context`] here ([`Context::alloc_pd`]). Each object
//! made in a domain has its constructor beside its own type (registering
//! memory in `mr`, creating QPs in `qp`), so this file names neither: the
//! module graph runs context, then domain, then what is made in it.

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
}

impl Context {
    /// Allocate a protection domain.
    ///
    /// # Errors
    ///
    /// The errno of `ibv_alloc_pd`, as an [`io::Error`].
    ///
    /// ```no_run
    /// let ctx = evd_verbs::ibv::Context::open(None)?;
    /// let pd = ctx.alloc_pd()?;
    /// assert!(std::sync::Arc::ptr_eq(pd.context(), &ctx));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn alloc_pd(self: &Arc<Self>) -> io::Result<Arc<ProtectionDomain>> {
        // SAFETY: a live context.
        let pd = unsafe { ffi::ibv_alloc_pd(self.ctx) };
        if pd.is_null() {
            return Err(last_err());
        }
        Ok(Arc::new(ProtectionDomain {
            ctx: self.clone(),
            pd,
        }))
    }
}
