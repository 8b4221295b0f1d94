//! The eventfd a consumer asks for ([`crate::Consumer::notify_fd`]), and
//! the once-cell that publishes it to posters: the kernel's on Linux, and
//! under loom a stand-in that gives the protocol what the kernel's gives and
//! no more, so that the models run the same code around it.
//!
//! What the protocol needs of the real pair:
//! * **The cell** (`OnceLock`): set once, by the consumer; a reader that
//!   finds it set (`Acquire`) sees the fd made before it was set
//!   (`Release`). Nothing else is ordered by it: the argument that a post
//!   either reaches a new fd or its maker sees the post's `NOTIFIED` is
//!   made on the state word (`engine/word.rs`, "a new eventfd").
//! * **The counter**: every write adds to it and every read takes all of it
//!   at once, one step each (the kernel does both under the eventfd's
//!   lock); a duplicate (`try_clone`) shares it.
//!
//! Both sides have the same items: `Eventfd`, `EventfdCell` (with
//! `OnceLock`'s `get` and `get_or_init`), `make`, `signal` and
//! `acknowledge`.

#[cfg(not(loom))]
pub(crate) use os::*;

#[cfg(loom)]
pub(crate) use model::*;

#[cfg(not(loom))]
mod os {
    use std::io;

    /// The eventfd itself.
    pub(crate) type Eventfd = std::os::fd::OwnedFd;

    /// Where the consumer publishes it.
    pub(crate) type EventfdCell = std::sync::OnceLock<Eventfd>;

    /// A new eventfd: counter 0, non-blocking, close-on-exec.
    pub(crate) fn make() -> io::Result<Eventfd> {
        use rustix::event::{EventfdFlags, eventfd};
        Ok(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?)
    }

    /// Add 1 to the counter.
    pub(crate) fn signal(fd: &Eventfd) {
        // An eventfd write fails only if the counter would overflow (2^64 - 2
        // unread notifications): it is readable either way.
        let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
    }

    /// Take the counter, leaving 0 (0 if it was 0: the fd is non-blocking).
    pub(crate) fn acknowledge(fd: &Eventfd) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        match rustix::io::read(fd, &mut buf) {
            Ok(_) => Ok(u64::from_ne_bytes(buf)),
            Err(rustix::io::Errno::AGAIN) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(loom)]
mod model {
    use crate::sync::{Arc, AtomicPtr, AtomicU64, Ordering};
    use std::io;
    use std::ptr;

    /// The counter, shared by the duplicates. `SeqCst` read-modify-writes:
    /// the kernel's counter is one value changed under a lock, so each
    /// write and read is one step in one order.
    #[derive(Debug)]
    pub(crate) struct Eventfd(Arc<AtomicU64>);

    impl Eventfd {
        /// A duplicate, sharing the counter (as `dup(2)` shares the file).
        pub(crate) fn try_clone(&self) -> io::Result<Eventfd> {
            Ok(Eventfd(self.0.clone()))
        }
    }

    /// A new eventfd, counter 0.
    pub(crate) fn make() -> io::Result<Eventfd> {
        Ok(Eventfd(Arc::new(AtomicU64::new(0))))
    }

    /// Add 1 to the counter.
    pub(crate) fn signal(fd: &Eventfd) {
        fd.0.fetch_add(1, Ordering::SeqCst);
    }

    /// Take the counter, leaving 0.
    pub(crate) fn acknowledge(fd: &Eventfd) -> io::Result<u64> {
        Ok(fd.0.swap(0, Ordering::SeqCst))
    }

    /// `OnceLock<Eventfd>` as far as the core uses it: null until one
    /// compare-exchange (`AcqRel`) installs a boxed fd, read with `Acquire`
    /// (a `OnceLock`'s completion is a `Release` store and its `get` an
    /// `Acquire` load). Invariant: non-null only as a `Box` installed by
    /// [`EventfdCell::get_or_init`], freed only by the drop. One difference
    /// no caller reaches: `init` runs before the CAS, so a second thread
    /// racing the first install would run its own (`OnceLock` never runs a
    /// loser's); only the consumer, one thread, makes the fd.
    #[derive(Debug)]
    pub(crate) struct EventfdCell(AtomicPtr<Eventfd>);

    impl EventfdCell {
        pub(crate) fn new() -> Self {
            EventfdCell(AtomicPtr::new(ptr::null_mut()))
        }

        /// The fd, if one was installed.
        pub(crate) fn get(&self) -> Option<&Eventfd> {
            let p = self.0.load(Ordering::Acquire);
            // SAFETY: non-null is a box installed by `get_or_init`, whose
            // contents its `Release` published to this `Acquire`; it lives
            // until the drop, which `&self` excludes.
            unsafe { p.as_ref() }
        }

        /// The installed fd, or `init`'s, installed now.
        pub(crate) fn get_or_init(&self, init: impl FnOnce() -> Eventfd) -> &Eventfd {
            if let Some(fd) = self.get() {
                return fd;
            }
            let new = Box::into_raw(Box::new(init()));
            match self
                .0
                .compare_exchange(ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: `new` is installed now; it lives until the drop.
                Ok(_) => unsafe { &*new },
                Err(installed) => {
                    // SAFETY: `new` was never shared: the CAS failed.
                    drop(unsafe { Box::from_raw(new) });
                    // SAFETY: as in `get` (the failed CAS read it `Acquire`).
                    unsafe { &*installed }
                }
            }
        }
    }

    impl Drop for EventfdCell {
        fn drop(&mut self) {
            let p = self.0.with_mut(|p| *p);
            if !p.is_null() {
                // SAFETY: installed by `get_or_init` from `Box::into_raw`;
                // `&mut self` means no reader is left.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}
