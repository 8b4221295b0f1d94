//! Where a notification goes: the consumer's registered waker (async tasks,
//! and blocking waits through an unpark-this-thread waker) and, if the
//! consumer asked for one, an eventfd for epoll and io_uring loops.
//!
//! Posting into an armed EVD costs one `AtomicWaker::wake` (a read-modify-write
//! and the waker's own wake), plus a `write(2)` on the eventfd only when one
//! was made.

use crate::sync::WakerSlot;
use std::task::Waker;

#[cfg(all(target_os = "linux", not(loom)))]
use std::{os::fd::OwnedFd, sync::OnceLock};

/// The notification targets of one EVD.
pub(crate) struct NotifyTargets {
    waker: WakerSlot,
    #[cfg(all(target_os = "linux", not(loom)))]
    eventfd: OnceLock<OwnedFd>,
}

impl NotifyTargets {
    pub(crate) fn new() -> Self {
        NotifyTargets {
            waker: WakerSlot::default(),
            #[cfg(all(target_os = "linux", not(loom)))]
            eventfd: OnceLock::new(),
        }
    }

    /// Register the waker the next notification wakes. Must come before the
    /// arm CAS that makes the notification possible.
    #[inline]
    pub(crate) fn register(&self, w: &Waker) {
        self.waker.register(w);
    }

    /// Wake only the waker (unwaitable, teardown).
    pub(crate) fn wake_waker(&self) {
        self.waker.wake();
    }

    /// Deliver a notification to every target.
    #[inline]
    pub(crate) fn notify(&self) {
        // The eventfd first: a waker that panics must not swallow it.
        #[cfg(all(target_os = "linux", not(loom)))]
        if let Some(fd) = self.eventfd.get() {
            // An eventfd write fails only if the counter would overflow
            // (2^64 - 2 unread notifications): it is readable either way.
            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        }
        self.waker.wake();
    }

    /// The eventfd, made on first use.
    #[cfg(all(target_os = "linux", not(loom)))]
    pub(crate) fn eventfd(&self) -> std::io::Result<&OwnedFd> {
        if let Some(fd) = self.eventfd.get() {
            return Ok(fd);
        }
        use rustix::event::{eventfd, EventfdFlags};
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        // If two threads race here the loser's fd is closed; only the consumer
        // calls this, so it does not happen in practice.
        Ok(self.eventfd.get_or_init(|| fd))
    }
}
