//! Failures of destroying verbs objects.
//!
//! Destroying a verbs object can fail: `ibv_dealloc_pd` refuses with
//! `EBUSY` while a memory region or QP still uses the domain, a destroy can
//! fail with `EIO` once the device is gone, and so on. A failure matters:
//! the object still exists (the kernel keeps its resources, the HCA may
//! still write a memory region's buffer), so it must not go unseen.
//!
//! The verbs wrappers (in `ibv`, cargo feature `ibverbs`) therefore have two
//! ways down:
//!
//! - an explicit `close`, which returns the failure as a [`TeardownError`]
//!   (or, for the shared objects, refuses with [`CloseError::InUse`] while
//!   other handles are alive);
//! - `Drop`, which cannot return it: every failed destroy in a `Drop` is
//!   counted in [`teardown_failures`] and handed to the hook installed with
//!   [`set_teardown_hook`], if any.
//!
//! There is no default hook: a library does not own the process's stderr,
//! so without a hook a failure is only counted. An application that wants
//! them logged installs one (`|e| eprintln!("{e}")`).
//!
//! An object whose destroy failed is leaked together with what it depends
//! on (a memory region keeps its buffer, a QP its CQs and domain, anything
//! its context): since it still exists, freeing those under it could let
//! the HCA write freed memory or leave the kernel object dangling.

use arc_swap::ArcSwapOption;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The kind of verbs object a destroy failed on.
///
/// ```
/// use evd_verbs::VerbsObject;
/// assert_eq!(VerbsObject::QueuePair.to_string(), "queue pair");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VerbsObject {
    /// A device context (`ibv_close_device`).
    Context,
    /// A protection domain (`ibv_dealloc_pd`).
    ProtectionDomain,
    /// A memory region (`ibv_dereg_mr`).
    MemoryRegion,
    /// A queue pair (`ibv_destroy_qp`).
    QueuePair,
    /// A completion queue (`ibv_destroy_cq`).
    CompletionQueue,
    /// A completion channel (`ibv_destroy_comp_channel`).
    CompletionChannel,
    /// A connection identifier (`rdma_destroy_id`).
    CmId,
}

impl fmt::Display for VerbsObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VerbsObject::Context => "device context",
            VerbsObject::ProtectionDomain => "protection domain",
            VerbsObject::MemoryRegion => "memory region",
            VerbsObject::QueuePair => "queue pair",
            VerbsObject::CompletionQueue => "completion queue",
            VerbsObject::CompletionChannel => "completion channel",
            VerbsObject::CmId => "connection identifier",
        })
    }
}

/// A destroy verb that failed: which object, which call, and the error it
/// returned.
///
/// Its `Display` includes the OS error, so [`source`](std::error::Error::source)
/// is `None` (the error is not printed twice by error reporters).
///
/// ```
/// use evd_verbs::{TeardownError, VerbsObject};
/// let e = TeardownError::new(
///     VerbsObject::ProtectionDomain,
///     "ibv_dealloc_pd",
///     std::io::Error::from_raw_os_error(libc::EBUSY),
/// );
/// assert_eq!(e.error.raw_os_error(), Some(libc::EBUSY));
/// assert!(e.to_string().starts_with("ibv_dealloc_pd failed on a protection domain: "));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct TeardownError {
    /// The object that is still there.
    pub object: VerbsObject,
    /// The verb that failed, e.g. `"ibv_destroy_qp"`.
    pub op: &'static str,
    /// What it returned (an errno).
    pub error: io::Error,
}

impl TeardownError {
    /// `op` failed on `object` with `error` (what a provider of verbs
    /// objects reports, or a test feeds a teardown hook).
    ///
    /// ```
    /// use evd_verbs::{TeardownError, VerbsObject};
    /// let e = TeardownError::new(
    ///     VerbsObject::QueuePair,
    ///     "ibv_destroy_qp",
    ///     std::io::ErrorKind::ResourceBusy.into(),
    /// );
    /// assert_eq!(e.op, "ibv_destroy_qp");
    /// ```
    #[must_use]
    pub fn new(object: VerbsObject, op: &'static str, error: io::Error) -> Self {
        TeardownError { object, op, error }
    }
}

impl fmt::Display for TeardownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed on a {}: {}", self.op, self.object, self.error)
    }
}

impl std::error::Error for TeardownError {}

impl From<TeardownError> for io::Error {
    /// An `io::Error` of the same kind, carrying the `TeardownError`.
    ///
    /// ```
    /// use evd_verbs::{TeardownError, VerbsObject};
    /// let e = TeardownError::new(
    ///     VerbsObject::QueuePair,
    ///     "ibv_destroy_qp",
    ///     std::io::Error::from(std::io::ErrorKind::ResourceBusy),
    /// );
    /// let io: std::io::Error = e.into();
    /// assert_eq!(io.kind(), std::io::ErrorKind::ResourceBusy);
    /// ```
    fn from(e: TeardownError) -> io::Error {
        io::Error::new(e.error.kind(), e)
    }
}

/// Why an explicit `close` of a shared verbs object did not close it.
///
/// `T` is the handle that was to be closed; [`InUse`](CloseError::InUse)
/// hands it back untouched, so the caller can drop what still uses it and
/// try again (or just drop it).
///
/// ```
/// use evd_verbs::{CloseError, VerbsObject};
/// let e: CloseError<&str> = CloseError::InUse { object: VerbsObject::Context, handle: "ctx" };
/// assert_eq!(e.to_string(), "device context still in use: other handles or objects made from it are alive");
/// assert_eq!(e.into_handle(), Some("ctx"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum CloseError<T> {
    /// Other handles to the object, or objects made from it, are alive:
    /// nothing was destroyed.
    InUse {
        /// The object's kind.
        object: VerbsObject,
        /// The handle, back to the caller.
        handle: T,
    },
    /// The destroy verb failed (the object is leaked, see the
    /// [module docs](crate::teardown)).
    Failed(TeardownError),
}

impl<T> CloseError<T> {
    /// The handle [`InUse`](CloseError::InUse) gave back, if that is what
    /// this is.
    ///
    /// ```
    /// use evd_verbs::{CloseError, TeardownError, VerbsObject};
    /// let e: CloseError<()> = CloseError::Failed(TeardownError::new(
    ///     VerbsObject::Context,
    ///     "ibv_close_device",
    ///     std::io::Error::from_raw_os_error(libc::EIO),
    /// ));
    /// assert!(e.into_handle().is_none());
    /// ```
    pub fn into_handle(self) -> Option<T> {
        match self {
            CloseError::InUse { handle, .. } => Some(handle),
            CloseError::Failed(_) => None,
        }
    }
}

impl<T> From<TeardownError> for CloseError<T> {
    /// [`CloseError::Failed`].
    ///
    /// ```
    /// use evd_verbs::{CloseError, TeardownError, VerbsObject};
    /// let e = TeardownError::new(
    ///     VerbsObject::MemoryRegion,
    ///     "ibv_dereg_mr",
    ///     std::io::Error::from_raw_os_error(libc::EINVAL),
    /// );
    /// assert!(matches!(CloseError::<()>::from(e), CloseError::Failed(_)));
    /// ```
    fn from(e: TeardownError) -> Self {
        CloseError::Failed(e)
    }
}

impl<T> fmt::Display for CloseError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseError::InUse { object, .. } => write!(
                f,
                "{object} still in use: other handles or objects made from it are alive"
            ),
            CloseError::Failed(e) => e.fmt(f),
        }
    }
}

impl<T: fmt::Debug> std::error::Error for CloseError<T> {}

/// A teardown hook as [`set_teardown_hook`] keeps it and hands it back: any
/// closure that may be called from any thread, so it can carry a metrics
/// handle or a logger.
///
/// ```
/// use evd_verbs::{TeardownError, TeardownHook, VerbsObject};
/// let hook: TeardownHook = std::sync::Arc::new(|e: &TeardownError| eprintln!("{e}"));
/// hook(&TeardownError::new(VerbsObject::CmId, "rdma_destroy_id", std::io::ErrorKind::Other.into()));
/// ```
pub type TeardownHook = Arc<dyn Fn(&TeardownError) + Send + Sync>;

/// The hook, or none. An `ArcSwapOption` rather than a lock: a `Drop` that
/// reports a failure never blocks on, or is poisoned by, a thread installing
/// a hook (std's alloc-error hook is kept lock-free for the same reason), and
/// a hook replaced while it runs stays alive until that call returns.
static HOOK: ArcSwapOption<TeardownHook> = ArcSwapOption::const_empty();

static FAILURES: AtomicU64 = AtomicU64::new(0);

/// The hook out of its slot's `Arc` (cloned if a report still holds it).
fn unwrap_hook(slot: Arc<TeardownHook>) -> TeardownHook {
    Arc::try_unwrap(slot).unwrap_or_else(|shared| TeardownHook::clone(&shared))
}

/// Install `hook` process-wide, to be called with every destroy failure
/// that happens in a `Drop` of a verbs object (after it is counted in
/// [`teardown_failures`]); returns the hook it replaces.
///
/// The hook runs on the thread that drops the object, possibly while that
/// thread unwinds, and should be quick. A panic of the hook is caught and
/// swallowed (the panic hook has printed it): raised there, it would leave
/// the rest of that `Drop` undone (the objects after it leaked), and abort
/// the process during an unwinding. Failures of an explicit `close` are returned to its
/// caller instead and do not reach the hook.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// // A closure can carry state: here a counter a metrics exporter reads.
/// let failed = Arc::new(AtomicU64::new(0));
/// let counter = failed.clone();
/// let previous = evd_verbs::set_teardown_hook(move |e| {
///     counter.fetch_add(1, Ordering::Relaxed);
///     eprintln!("evd-verbs teardown: {e}");
/// });
/// # assert!(previous.is_none());
/// # evd_verbs::clear_teardown_hook();
/// ```
pub fn set_teardown_hook<F>(hook: F) -> Option<TeardownHook>
where
    F: Fn(&TeardownError) + Send + Sync + 'static,
{
    let hook: TeardownHook = Arc::new(hook);
    HOOK.swap(Some(Arc::new(hook))).map(unwrap_hook)
}

/// Remove the hook: from now on failures in `Drop` are only counted.
/// Returns the hook removed, if any.
///
/// ```
/// evd_verbs::set_teardown_hook(|_| {});
/// assert!(evd_verbs::clear_teardown_hook().is_some());
/// assert!(evd_verbs::clear_teardown_hook().is_none());
/// ```
pub fn clear_teardown_hook() -> Option<TeardownHook> {
    HOOK.swap(None).map(unwrap_hook)
}

/// How many destroys have failed in a `Drop` of a verbs object in this
/// process, hook or not (failures of an explicit `close` are returned, not
/// counted).
///
/// ```
/// // Without RDMA objects nothing can fail.
/// assert_eq!(evd_verbs::teardown_failures(), 0);
/// ```
pub fn teardown_failures() -> u64 {
    // Relaxed: a statistic; a count read on the thread that dropped the
    // object includes that drop's failure.
    FAILURES.load(Ordering::Relaxed)
}

/// A destroy in a `Drop` failed: count it, then hand it to the hook.
#[cfg_attr(not(feature = "ibverbs"), allow(dead_code))]
pub(crate) fn report(err: &TeardownError) {
    FAILURES.fetch_add(1, Ordering::Relaxed);
    crate::trace::event!(
        WARN,
        object = %err.object,
        op = err.op,
        error = %err.error,
        "a verbs object's destroy failed in Drop; the object is leaked"
    );
    // A clone, not a guard: the hook may install another hook.
    if let Some(hook) = HOOK.load_full() {
        // AssertUnwindSafe: the hook gets a shared reference to an error
        // it cannot leave half changed; nothing here is left half done.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(err)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The hook and the counter are process-wide: the tests touching them
    /// take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    static SEEN: Mutex<Vec<(VerbsObject, &'static str, Option<i32>)>> = Mutex::new(Vec::new());

    fn record(e: &TeardownError) {
        SEEN.lock()
            .unwrap()
            .push((e.object, e.op, e.error.raw_os_error()));
    }

    fn busy(object: VerbsObject, op: &'static str) -> TeardownError {
        TeardownError {
            object,
            op,
            error: io::Error::from_raw_os_error(libc::EBUSY),
        }
    }

    /// A hook that panics does not stop the teardown that reports: its
    /// panic came out of `report`, out of a `Drop` (leaving the objects
    /// after it undestroyed), or aborted an unwinding thread.
    #[test]
    fn a_hook_that_panics_is_swallowed_and_the_report_returns() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        clear_teardown_hook();
        set_teardown_hook(|_| panic!("a hook that panics"));
        let before = teardown_failures();
        let r = std::panic::catch_unwind(|| {
            report(&busy(VerbsObject::CmId, "rdma_destroy_id"));
            report(&busy(VerbsObject::CmId, "rdma_destroy_id"));
        });
        clear_teardown_hook();
        assert!(r.is_ok(), "the hook's panic came out of `report`");
        assert_eq!(teardown_failures(), before + 2);
    }

    #[test]
    fn report_counts_without_a_hook() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        clear_teardown_hook();
        let before = teardown_failures();
        report(&busy(VerbsObject::QueuePair, "ibv_destroy_qp"));
        report(&busy(VerbsObject::ProtectionDomain, "ibv_dealloc_pd"));
        assert_eq!(teardown_failures(), before + 2);
    }

    #[test]
    fn report_counts_then_calls_the_hook() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        SEEN.lock().unwrap().clear();
        clear_teardown_hook();
        set_teardown_hook(record);
        let before = teardown_failures();
        report(&busy(VerbsObject::CompletionQueue, "ibv_destroy_cq"));
        assert_eq!(teardown_failures(), before + 1);
        assert_eq!(
            *SEEN.lock().unwrap(),
            [(
                VerbsObject::CompletionQueue,
                "ibv_destroy_cq",
                Some(libc::EBUSY)
            )]
        );
        // Removed: counted, not seen.
        assert!(clear_teardown_hook().is_some());
        report(&busy(VerbsObject::Context, "ibv_close_device"));
        assert_eq!(teardown_failures(), before + 2);
        assert_eq!(SEEN.lock().unwrap().len(), 1);
    }

    #[test]
    fn set_returns_the_hook_it_replaces() {
        static CALLED: Mutex<Vec<&str>> = Mutex::new(Vec::new());
        fn first(_: &TeardownError) {
            CALLED.lock().unwrap().push("first");
        }
        fn second(_: &TeardownError) {
            CALLED.lock().unwrap().push("second");
        }
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let e = busy(VerbsObject::CompletionChannel, "ibv_destroy_comp_channel");
        clear_teardown_hook();
        assert!(set_teardown_hook(first).is_none());
        // Told apart by calling them: function pointers do not compare
        // reliably (identical bodies may be merged).
        set_teardown_hook(second).expect("first is installed")(&e);
        clear_teardown_hook().expect("second is installed")(&e);
        assert_eq!(*CALLED.lock().unwrap(), ["first", "second"]);
    }

    #[test]
    fn a_closure_hook_carries_its_state() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let seen = Arc::new(AtomicU64::new(0));
        let counter = seen.clone();
        clear_teardown_hook();
        set_teardown_hook(move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
        });
        report(&busy(VerbsObject::MemoryRegion, "ibv_dereg_mr"));
        report(&busy(VerbsObject::CmId, "rdma_destroy_id"));
        assert_eq!(seen.load(Ordering::Relaxed), 2);
        // The removed hook is handed back whole, its state with it.
        let removed = clear_teardown_hook().expect("installed above");
        removed(&busy(VerbsObject::Context, "ibv_close_device"));
        assert_eq!(seen.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_hook_may_replace_itself_while_it_runs() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        static CALLS: AtomicU64 = AtomicU64::new(0);
        clear_teardown_hook();
        set_teardown_hook(|_| {
            CALLS.fetch_add(1, Ordering::Relaxed);
            set_teardown_hook(|_| {
                CALLS.fetch_add(10, Ordering::Relaxed);
            });
        });
        report(&busy(VerbsObject::QueuePair, "ibv_destroy_qp"));
        report(&busy(VerbsObject::QueuePair, "ibv_destroy_qp"));
        assert_eq!(CALLS.load(Ordering::Relaxed), 11);
        clear_teardown_hook();
    }

    /// With the `tracing` feature a failure in `Drop` is also a WARN event
    /// naming the verb (recorded on this thread by a minimal subscriber).
    #[cfg(feature = "tracing")]
    #[test]
    fn report_emits_a_warning_event() {
        use tracing::field::{Field, Visit};
        use tracing::span::{Attributes, Id, Record};
        use tracing::{Event, Level, Metadata};

        struct Ops(Mutex<Vec<(Level, String)>>);
        struct Op<'a>(&'a mut String);
        impl Visit for Op<'_> {
            fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
                if field.name() == "op" {
                    *self.0 = format!("{value:?}");
                }
            }
        }
        impl tracing::Subscriber for Ops {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &Attributes<'_>) -> Id {
                Id::from_u64(1)
            }
            fn record(&self, _: &Id, _: &Record<'_>) {}
            fn record_follows_from(&self, _: &Id, _: &Id) {}
            fn event(&self, event: &Event<'_>) {
                let mut op = String::new();
                event.record(&mut Op(&mut op));
                self.0.lock().unwrap().push((*event.metadata().level(), op));
            }
            fn enter(&self, _: &Id) {}
            fn exit(&self, _: &Id) {}
        }

        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let ops = std::sync::Arc::new(Ops(Mutex::new(Vec::new())));
        tracing::subscriber::with_default(ops.clone(), || {
            report(&busy(VerbsObject::ProtectionDomain, "ibv_dealloc_pd"));
        });
        assert_eq!(
            *ops.0.lock().unwrap(),
            [(Level::WARN, "\"ibv_dealloc_pd\"".to_owned())]
        );
    }

    #[test]
    fn display_names_the_call_the_object_and_the_errno() {
        let e = busy(VerbsObject::MemoryRegion, "ibv_dereg_mr");
        let s = e.to_string();
        assert!(
            s.starts_with("ibv_dereg_mr failed on a memory region: "),
            "{s}"
        );
        assert!(s.contains(&format!("os error {}", libc::EBUSY)), "{s}");
        let c: CloseError<()> = e.into();
        assert_eq!(c.to_string(), s);
        let io: io::Error = busy(VerbsObject::QueuePair, "ibv_destroy_qp").into();
        assert_eq!(io.kind(), io::ErrorKind::ResourceBusy);
        assert!(io.to_string().starts_with("ibv_destroy_qp failed"));
    }
}
