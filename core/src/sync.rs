//! The synchronization primitives the core uses, from `std` normally and from
//! `loom` under `--cfg loom`, so that the loom models exercise the real code.

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize},
    sync::Arc,
    thread,
};
#[cfg(not(loom))]
pub(crate) use std::{
    sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize},
    sync::Arc,
    thread,
};

pub(crate) use std::sync::atomic::Ordering;

/// `UnsafeCell` with loom's closure API, so the same code compiles both ways.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// Run `f` with a mutable raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A waker slot: `atomic-waker` normally, loom's model of it under loom.
#[cfg(not(loom))]
#[derive(Default, Debug)]
pub(crate) struct WakerSlot(atomic_waker::AtomicWaker);

#[cfg(not(loom))]
impl WakerSlot {
    pub(crate) fn register(&self, w: &std::task::Waker) {
        self.0.register(w)
    }
    pub(crate) fn wake(&self) {
        self.0.wake()
    }
}

/// A waker slot: `atomic-waker` normally, loom's model of it under loom.
#[cfg(loom)]
#[derive(Default, Debug)]
pub(crate) struct WakerSlot(loom::future::AtomicWaker);

#[cfg(loom)]
impl WakerSlot {
    pub(crate) fn register(&self, w: &std::task::Waker) {
        self.0.register_by_ref(w)
    }
    pub(crate) fn wake(&self) {
        self.0.wake()
    }
}

/// Spin-then-yield backoff for the short waits the protocol has (a reserved
/// slot whose poster has not published yet; a resize in progress).
#[cfg(not(loom))]
pub(crate) struct Backoff(crossbeam_utils::Backoff);

#[cfg(not(loom))]
impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(crossbeam_utils::Backoff::new())
    }
    pub(crate) fn snooze(&self) {
        self.0.snooze()
    }
}

/// Under loom a wait must yield so the model lets the other thread progress.
#[cfg(loom)]
pub(crate) struct Backoff;

#[cfg(loom)]
impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff
    }
    pub(crate) fn snooze(&self) {
        loom::thread::yield_now()
    }
}
