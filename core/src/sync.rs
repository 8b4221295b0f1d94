//! The synchronization primitives the core uses, from `std` normally, from
//! `loom` under `--cfg loom` and from `shuttle` under `--cfg shuttle`, so that
//! the loom models and the fuzz crate's `schedule` target exercise the real
//! code.

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize},
    sync::Arc,
    thread,
};
#[cfg(not(any(loom, shuttle)))]
pub(crate) use std::{
    sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize},
    sync::Arc,
    thread,
};
#[cfg(shuttle)]
pub(crate) use {
    observed::StateWord,
    shuttle::{
        sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize},
        thread,
    },
    std::sync::Arc,
};
/// The type of the state word: a plain `AtomicU64`, except under shuttle.
#[cfg(not(shuttle))]
pub(crate) type StateWord = AtomicU64;

pub(crate) use std::sync::atomic::Ordering;

/// `UnsafeCell` with loom's closure API, so the same code compiles both ways.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// A new cell (the upcall handler's; the ring's slots are zeroed memory
    /// except under shuttle).
    pub(crate) fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }

    /// Run `f` with a mutable raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A waker slot: `atomic-waker` normally, loom's model of it under loom.
#[cfg(not(any(loom, shuttle)))]
#[derive(Default, Debug)]
pub(crate) struct WakerSlot(atomic_waker::AtomicWaker);

#[cfg(not(any(loom, shuttle)))]
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
#[cfg(not(any(loom, shuttle)))]
pub(crate) struct Backoff(crossbeam_utils::Backoff);

#[cfg(not(any(loom, shuttle)))]
impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(crossbeam_utils::Backoff::new())
    }
    pub(crate) fn snooze(&self) {
        self.0.snooze()
    }
}

/// Under loom or shuttle a wait must yield so the model lets the other
/// thread progress.
#[cfg(any(loom, shuttle))]
pub(crate) struct Backoff;

#[cfg(any(loom, shuttle))]
impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff
    }
    pub(crate) fn snooze(&self) {
        thread::yield_now()
    }
}

/// A waker slot under shuttle: a shuttle mutex, so that registering and
/// waking are scheduling points the fuzzer interleaves. Like `AtomicWaker`,
/// a wake takes the waker out.
#[cfg(shuttle)]
#[derive(Default, Debug)]
pub(crate) struct WakerSlot(shuttle::sync::Mutex<Option<std::task::Waker>>);

#[cfg(shuttle)]
impl WakerSlot {
    pub(crate) fn register(&self, w: &std::task::Waker) {
        *self.0.lock().unwrap() = Some(w.clone());
    }
    pub(crate) fn wake(&self) {
        let w = self.0.lock().unwrap().take();
        if let Some(w) = w {
            w.wake();
        }
    }
}

/// Under shuttle, the state word is shuttle's `AtomicU64`, and every
/// successful compare-exchange on it is reported to the observer that the
/// fuzz crate registers with [`set_cas_observer`](crate::set_cas_observer),
/// called as `observer(address, old, new)` right after the CAS and before
/// any other thread can run.
#[cfg(shuttle)]
mod observed {
    use std::sync::atomic::Ordering;
    use std::sync::OnceLock;

    static OBSERVER: OnceLock<fn(usize, u64, u64)> = OnceLock::new();

    /// Register the observer; false if one was registered already.
    pub fn set_cas_observer(f: fn(usize, u64, u64)) -> bool {
        OBSERVER.set(f).is_ok()
    }

    #[derive(Default, Debug)]
    pub(crate) struct StateWord(shuttle::sync::atomic::AtomicU64);

    impl StateWord {
        pub(crate) fn new(v: u64) -> Self {
            StateWord(shuttle::sync::atomic::AtomicU64::new(v))
        }
        pub(crate) fn load(&self, o: Ordering) -> u64 {
            self.0.load(o)
        }
        pub(crate) fn compare_exchange_weak(
            &self,
            old: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u64, u64> {
            self.observed(
                old,
                new,
                self.0.compare_exchange_weak(old, new, success, failure),
            )
        }
        pub(crate) fn compare_exchange(
            &self,
            old: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u64, u64> {
            self.observed(
                old,
                new,
                self.0.compare_exchange(old, new, success, failure),
            )
        }
        fn observed(&self, old: u64, new: u64, r: Result<u64, u64>) -> Result<u64, u64> {
            if let (Ok(_), Some(f)) = (r, OBSERVER.get()) {
                f(self as *const Self as usize, old, new);
            }
            r
        }
    }
}
#[cfg(shuttle)]
pub use observed::set_cas_observer;
