//! The driver's kernel interface, chosen once per driver: the io_uring ring
//! (`uring`) or the epoll fallback (`epoll`), behind the requests and
//! completions of `readiness`. The shell (`driver/mod.rs`) and the pure
//! cycle are the same on both.

use super::config::{DriverBackend, DriverConfig};
use super::epoll::Epoll;
use super::key::FeedId;
use super::readiness::{Completion, Request, Wait};
use super::uring::Ring;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Instant;

/// The environment variable that overrides [`DriverBackend::Auto`].
pub(crate) const BACKEND_ENV: &str = "EVD_DRIVER_BACKEND";

/// One driver's kernel interface.
// One per driver, so the ring's size costs nothing; boxing it would add an
// indirection to every turn.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    Uring(Ring),
    Epoll(Epoll),
}

/// The choice `Auto` makes when the environment names a backend.
fn from_env() -> Option<DriverBackend> {
    match std::env::var(BACKEND_ENV).ok()?.as_str() {
        "epoll" => Some(DriverBackend::Epoll),
        "io_uring" => Some(DriverBackend::IoUring),
        _ => None,
    }
}

/// io_uring setup failed because the kernel (or a sandbox) refuses it,
/// not because of this request: fall back to epoll.
fn io_uring_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EOPNOTSUPP)
    )
}

impl Backend {
    pub(crate) fn open(cfg: &DriverConfig) -> io::Result<Self> {
        let uring = || Ring::new(cfg.ring_entries, cfg.busy_enter_interval).map(Backend::Uring);
        let epoll = || Epoll::new(cfg.ring_entries, cfg.busy_enter_interval).map(Backend::Epoll);
        let choice = match cfg.backend {
            DriverBackend::Auto => from_env().unwrap_or(DriverBackend::Auto),
            other => other,
        };
        match choice {
            DriverBackend::IoUring => uring(),
            DriverBackend::Epoll => epoll(),
            _ => match uring() {
                Err(e) if io_uring_refused(&e) => {
                    crate::trace::event!(INFO, error = %e, "io_uring refused; the driver falls back to epoll");
                    epoll()
                }
                r => r,
            },
        }
    }

    /// Which backend this is.
    pub(crate) fn kind(&self) -> DriverBackend {
        match self {
            Backend::Uring(_) => DriverBackend::IoUring,
            Backend::Epoll(_) => DriverBackend::Epoll,
        }
    }

    /// Ask for readiness of `fd`.
    pub(crate) fn poll(&mut self, fd: RawFd, r: Request) -> io::Result<()> {
        match self {
            Backend::Uring(b) => b.poll(fd, r),
            Backend::Epoll(b) => b.poll(fd, r),
        }
    }

    /// Whether `fd` can be polled at all, asked before a feed's polls until
    /// it is answered (`Ok(true)`): an error that
    /// [`refuses_the_fd`](super::readiness::refuses_the_fd) if not,
    /// `Ok(false)` if it could not be asked this time. epoll says so itself when the fd is added (`EPERM`). io_uring
    /// does not: a poll of a file without a poll method (a regular file,
    /// `/dev/null`) completes at once as ready, every time, and its feed
    /// would turn without end; a throwaway epoll instance asks instead.
    pub(crate) fn check_pollable(&mut self, fd: RawFd) -> io::Result<bool> {
        match self {
            Backend::Uring(_) => super::epoll::check_pollable(fd),
            Backend::Epoll(_) => Ok(true),
        }
    }

    /// Cancel a feed's poll request; its poll then completes (`ECANCELED`
    /// unless it completed first).
    pub(crate) fn cancel(&mut self, id: FeedId) -> io::Result<()> {
        match self {
            Backend::Uring(b) => b.cancel(id),
            Backend::Epoll(b) => b.cancel(id),
        }
    }

    /// Ask the kernel to end the wake poll, so that the thread that reaps
    /// its end asks for it again. io_uring runs a poll's completion work on
    /// the thread that submitted it (interrupting that thread to do so): a
    /// driver created on one thread and spawned onto another must own its
    /// wake poll there. epoll has no such tie: nothing to do.
    pub(crate) fn cancel_wake(&mut self) -> io::Result<()> {
        match self {
            Backend::Uring(b) => b.cancel_wake(),
            Backend::Epoll(_) => Ok(()),
        }
    }

    /// Whether a poll's completion work runs on the thread that asked for
    /// it (io_uring's, see [`Backend::cancel_wake`]): a driver spawned onto
    /// another thread must ask for its polls again there.
    pub(crate) fn polls_belong_to_their_submitter(&self) -> bool {
        matches!(self, Backend::Uring(_))
    }

    /// A poll completed: true if it was asked multishot and the kernel
    /// refused that (the caller asks again). Never on epoll, which has no
    /// multishot poll.
    pub(crate) fn refused_multishot(&mut self, c: &Completion) -> bool {
        match self {
            Backend::Uring(b) => b.refused_multishot(c),
            Backend::Epoll(_) => false,
        }
    }

    /// Submit what is queued and wait as `wait` says (a busy turn's at
    /// `now`); whether a timed wait ended with nothing to handle.
    pub(crate) fn submit_and_wait(&mut self, wait: Wait, now: Instant) -> io::Result<bool> {
        match self {
            Backend::Uring(b) => b.submit_and_wait(wait, now),
            Backend::Epoll(b) => b.submit_and_wait(wait, now),
        }
    }

    /// Completions collected by a wait and not handled yet, which the
    /// backend's fd no longer shows (epoll's: their reports were read; the
    /// ring's that were set aside when its completion queue was full). The
    /// ring's others stay in its completion queue, where its fd shows them.
    pub(crate) fn collected(&self) -> bool {
        match self {
            Backend::Uring(b) => b.set_aside_pending(),
            Backend::Epoll(b) => b.collected(),
        }
    }

    /// Hand what is queued to the kernel, without waiting.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        match self {
            Backend::Uring(b) => b.flush(),
            Backend::Epoll(b) => b.flush(),
        }
    }

    /// Hand every completion to `f`, oldest first.
    pub(crate) fn reap(&mut self, f: impl FnMut(Completion)) {
        match self {
            Backend::Uring(b) => b.reap(f),
            Backend::Epoll(b) => b.reap(f),
        }
    }
}

impl AsRawFd for Backend {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Backend::Uring(b) => b.as_raw_fd(),
            Backend::Epoll(b) => b.as_raw_fd(),
        }
    }
}

impl AsFd for Backend {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Backend::Uring(b) => b.as_fd(),
            Backend::Epoll(b) => b.as_fd(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_of_io_uring_falls_back() {
        for errno in [libc::ENOSYS, libc::EPERM, libc::EOPNOTSUPP] {
            assert!(io_uring_refused(&io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::ENOMEM, libc::EINVAL, libc::EMFILE] {
            assert!(!io_uring_refused(&io::Error::from_raw_os_error(errno)));
        }
    }

    #[test]
    fn an_explicit_backend_is_the_one_opened() {
        for kind in [DriverBackend::IoUring, DriverBackend::Epoll] {
            let cfg = DriverConfig {
                backend: kind,
                ..Default::default()
            };
            assert_eq!(Backend::open(&cfg).unwrap().kind(), kind);
        }
    }
}
