//! The upcall handler slot: replaceable while instances call it, and the
//! replaced handler dropped deterministically.
//!
//! A handler is either *shared* (`Fn + Send + Sync`: any number of instances
//! may call it at once) or *exclusive* (`FnMut + Send`: called only by the
//! instance holding the token, see [`Loaded::call`]).

use crate::error::Overflow;
use crate::sync::UnsafeCell;
use arc_swap::{ArcSwapOption, Guard};
use std::sync::Arc;

/// An upcall handler: receives one event (or the overflow report that DAT
/// delivers as `EVD_OVERFLOW`) and whether more events were queued.
pub type Handler<T> = dyn Fn(Result<T, Overflow>, bool) + Send + Sync;

/// An `FnMut` upcall handler (SingleInstance only): called by one thread at a
/// time, the one holding the token.
pub(crate) type HandlerMut<T> = dyn FnMut(Result<T, Overflow>, bool) + Send;

/// What the slot holds.
pub(crate) enum Installed<T> {
    /// Callable from several threads at once.
    Shared(Box<Handler<T>>),
    /// Callable only by the token holder.
    Exclusive(Exclusive<T>),
}

impl<T> Installed<T> {
    /// A handler any instance may call, with or without the token.
    pub(crate) fn shared(h: Box<Handler<T>>) -> Self {
        Installed::Shared(h)
    }

    /// A handler only the token holder may call.
    pub(crate) fn exclusive(h: Box<HandlerMut<T>>) -> Self {
        Installed::Exclusive(Exclusive(UnsafeCell::new(h)))
    }
}

/// An `FnMut` handler in a cell: `&mut` access only through
/// [`Loaded::call`], whose caller holds the token.
pub(crate) struct Exclusive<T>(UnsafeCell<Box<HandlerMut<T>>>);

// SAFETY: the cell is only reached through `Loaded::call` (an `unsafe fn`
// whose caller must hold the EVD's TOKEN bit for the whole call) and by its
// own drop (which owns it). The TOKEN bit is mutually exclusive, so at most
// one thread at a time touches the closure, and each taking of the token is
// an `AcqRel` CAS on the state word that reads a value written after the
// previous holder's release (an `AcqRel` RMW), so the previous call happens
// before the next. That is a `Mutex<Box<dyn FnMut + Send>>` whose lock is
// the token: sharing it needs only `Send` of the closure, which the type
// demands. Under loom the cell is loom's, which checks that claim.
unsafe impl<T> Sync for Exclusive<T> {}

/// A handler loaded for one call: keeps it alive until dropped, even if it
/// is replaced meanwhile.
pub(crate) struct Loaded<T>(Guard<Option<Arc<Installed<T>>>>);

impl<T> Loaded<T> {
    /// True if the handler may be called only with the token held.
    #[inline]
    pub(crate) fn is_exclusive(&self) -> bool {
        matches!(self.0.as_deref(), Some(Installed::Exclusive(_)))
    }

    /// Call the handler, if there is one.
    ///
    /// # Safety
    /// If [`Loaded::is_exclusive`], the caller holds the TOKEN bit of the
    /// state word of the EVD whose slot this was loaded from, from before
    /// this call until after it returns (or unwinds).
    #[inline]
    pub(crate) unsafe fn call(&self, item: Result<T, Overflow>, more: bool) {
        match self.0.as_deref() {
            None => {}
            Some(Installed::Shared(h)) => h(item, more),
            Some(Installed::Exclusive(Exclusive(cell))) => cell.with_mut(|h| {
                // SAFETY: the caller holds the token through the call, so no
                // other thread is inside this closure (see the `Sync` impl of
                // `Exclusive`), and this thread is not either: a call on this
                // thread's stack further down would be an instance holding the
                // token, and a thread that holds it starts no instance of the
                // same EVD (every transition that takes the token needs it
                // free). The guard in `self` keeps the closure alive, so the
                // pointer is valid; the `&mut` ends when the call returns.
                let h = unsafe { &mut *h };
                h(item, more)
            }),
        }
    }
}

/// The current handler, replaceable while instances run.
///
/// `arc-swap` rather than an epoch scheme: a replaced handler is dropped as
/// soon as the last instance calling it returns (or at once, by the replacing
/// thread, when none is), never deferred to a garbage bag that nothing may
/// flush for the life of a thread. A handler that owns a socket, a file or a
/// buffer releases it deterministically.
pub(crate) struct HandlerSlot<T> {
    current: ArcSwapOption<Installed<T>>,
}

impl<T> HandlerSlot<T> {
    pub(crate) fn new() -> Self {
        HandlerSlot {
            current: ArcSwapOption::empty(),
        }
    }

    /// Install `h`; the old handler is dropped here unless an instance is
    /// calling it, then by the last such instance when its call returns.
    pub(crate) fn set(&self, h: Installed<T>) {
        self.current.store(Some(Arc::new(h)));
    }

    /// Drop the handler (a teardown: no instance can call it any more; a
    /// call still running keeps its own reference until it returns).
    pub(crate) fn clear(&self) {
        self.current.store(None);
    }

    /// Load the handler for a call; the guard keeps it alive, no allocation.
    #[inline]
    pub(crate) fn load(&self) -> Loaded<T> {
        Loaded(self.current.load())
    }
}
