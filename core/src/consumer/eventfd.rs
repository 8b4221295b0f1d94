//! An eventfd notifier for epoll and io_uring loops.
//!
//! Once [`Consumer::notify_fd`] has been called, every notification (a post
//! that disarms the EVD, a close of an armed EVD) also adds 1 to an eventfd.
//! The loop is: drain, [`Consumer::arm`]; on `Pending` drain again, on
//! `Armed` wait for the fd to be readable, [`NotifyFd::acknowledge`], and
//! round again. Start with the drain and the arm, not the wait: an event
//! posted while nothing was armed wrote no fd. An fd made after an arm
//! that a post already answered starts readable.

use crate::consumer::Consumer;
use crate::sync::eventfd::{self, Eventfd};
use std::io;
#[cfg(not(loom))]
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

/// A handle on the EVD's notification eventfd (a duplicate of it, so it can
/// live apart from the consumer, for example inside a reactor).
#[derive(Debug)]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
pub struct NotifyFd {
    fd: Eventfd,
}

impl NotifyFd {
    /// Reset the eventfd's counter; returns how many notifications it held
    /// (0 if none: notifications may be coalesced, and a wake can be spurious).
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let fd = consumer.notify_fd().unwrap();
    /// assert_eq!(fd.acknowledge().unwrap(), 0);
    /// consumer.arm();
    /// poster.post(1u8).unwrap();
    /// assert_eq!(fd.acknowledge().unwrap(), 1);
    /// ```
    pub fn acknowledge(&self) -> io::Result<u64> {
        eventfd::acknowledge(&self.fd)
    }
}

#[cfg(not(loom))]
impl AsFd for NotifyFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(not(loom))]
impl AsRawFd for NotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl<T> Consumer<T> {
    /// The EVD's notification eventfd (made on first call; non-blocking,
    /// close-on-exec). From then on every notification of the consumer's
    /// own targets also writes it (an answered [`arm`](Consumer::arm), a
    /// close of an armed EVD; not a CNO trigger, which wakes the CNO, but
    /// for one that finds the CNO dropped). The
    /// call that makes it writes it once if a notification fired before
    /// (an [`arm`](Consumer::arm) that a post has answered, a close of an
    /// armed EVD, or a trigger of the EVD's CNO enable, and no arm or CNO
    /// enable has found the ring empty since:
    /// [`Query::notified`](crate::Query::notified)), so an fd asked
    /// for after arming is readable for the post that answered the arm (and
    /// one asked for after a CNO's key was served may be readable once with
    /// nothing left to do).
    ///
    /// ```
    /// use std::os::fd::AsRawFd;
    /// let (_poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    /// let fd = consumer.notify_fd().unwrap();
    /// assert!(fd.as_raw_fd() >= 0);
    /// ```
    #[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
    pub fn notify_fd(&mut self) -> io::Result<NotifyFd> {
        let fd = self.shared().eventfd()?;
        Ok(NotifyFd {
            fd: fd.try_clone()?,
        })
    }
}
