//! The driver's fd: what a caller's own loop waits on between its calls
//! of [`Driver::process`].

use super::Driver;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

impl AsRawFd for Driver {
    /// The ring's fd (the epoll instance's, on that backend): readable when
    /// [`Driver::process`] has work: completions, or what a `register`, a
    /// `remove` or a `process` that returned an error left (a feed to arm or
    /// left busy, readiness collected, a failure to report). Wait on it
    /// (epoll, poll, tokio's `AsyncFd`) unless the last `process` said busy.
    fn as_raw_fd(&self) -> RawFd {
        self.backend.as_raw_fd()
    }
}

impl AsFd for Driver {
    /// As [`AsRawFd::as_raw_fd`].
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.backend.as_fd()
    }
}
