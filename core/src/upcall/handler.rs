//! The upcall handler slot: replaceable while instances call it, and the
//! replaced handler dropped deterministically.

use crate::error::Overflow;
use arc_swap::ArcSwapOption;

/// An upcall handler: receives one event (or the overflow report that DAT
/// delivers as `EVD_OVERFLOW`) and whether more events were queued.
pub type Handler<T> = dyn Fn(Result<T, Overflow>, bool) + Send + Sync;

/// The current handler, replaceable while instances run.
///
/// `arc-swap` rather than an epoch scheme: a replaced handler is dropped as
/// soon as the last instance calling it returns (or at once, by the replacing
/// thread, when none is), never deferred to a garbage bag that nothing may
/// flush for the life of a thread. A handler that owns a socket, a file or a
/// buffer releases it deterministically.
pub(crate) struct HandlerSlot<T> {
    current: ArcSwapOption<Box<Handler<T>>>,
}

impl<T> HandlerSlot<T> {
    pub(crate) fn new() -> Self {
        HandlerSlot {
            current: ArcSwapOption::empty(),
        }
    }

    /// Install `h`; the old handler is dropped here unless an instance is
    /// calling it, then by the last such instance when its call returns.
    pub(crate) fn set(&self, h: Box<Handler<T>>) {
        self.current.store(Some(std::sync::Arc::new(h)));
    }

    /// Drop the handler (a teardown: no instance can call it any more; a
    /// call still running keeps its own reference until it returns).
    pub(crate) fn clear(&self) {
        self.current.store(None);
    }

    /// Call the handler, if there is one.
    pub(crate) fn call(&self, item: Result<T, Overflow>, more: bool) {
        // The guard keeps this handler alive for the call; no allocation.
        let guard = self.current.load();
        if let Some(h) = guard.as_ref() {
            h(item, more);
        }
    }
}
