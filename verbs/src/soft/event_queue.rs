//! The queue behind the software event sources ([`SoftDevice`](super::SoftDevice)'s
//! async events, [`SoftCm`](super::SoftCm)'s events).

use crate::eventfd;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

/// Events raised in software and taken through an fd that is readable
/// while any wait: a device's async events, a connection manager's events.
pub(super) struct EventQueue<E> {
    pub(super) queue: Mutex<VecDeque<E>>,
    pub(super) fd: OwnedFd,
}

impl<E> EventQueue<E> {
    pub(super) fn new() -> io::Result<Self> {
        Ok(EventQueue {
            queue: Mutex::new(VecDeque::new()),
            fd: eventfd::new()?,
        })
    }

    /// Queue `event`. Every event writes the eventfd (as the kernel wakes
    /// an async or CM fd's pollers on every event), so an edge-style waiter
    /// sees each one.
    pub(super) fn raise(&self, event: E) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(event);
        eventfd::signal(&self.fd);
    }

    /// Drop the queued events `keep` refuses (the fd stays readable while
    /// any is left).
    pub(super) fn retain(&self, keep: impl FnMut(&E) -> bool) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.retain(keep);
        if q.is_empty() {
            eventfd::clear(&self.fd);
        }
    }

    pub(super) fn next(&self) -> Option<E> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let ev = q.pop_front();
        if q.is_empty() {
            eventfd::clear(&self.fd);
        }
        ev
    }

    /// What `Debug` shows of a handle: no lock is taken.
    pub(super) fn debug(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("fd", &self.fd.as_raw_fd())
            .finish_non_exhaustive()
    }
}
