//! The eventfd the crate signals with: the software CQ's completion channel,
//! the software device's async fd and the driver's wake-up. Through rustix,
//! as in the core, so no `unsafe` is needed for it.

use rustix::event::{EventfdFlags, eventfd};
use rustix::io::Errno;
use std::io;
use std::os::fd::OwnedFd;

/// A non-blocking, close-on-exec eventfd at zero.
pub(crate) fn new() -> io::Result<OwnedFd> {
    Ok(eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?)
}

/// Add one to the counter: the fd becomes readable.
///
/// A counter at its maximum (`EAGAIN`) is still readable, which is all a
/// signal needs, so that outcome is success too.
pub(crate) fn signal(fd: &OwnedFd) {
    match rustix::io::write(fd, &1u64.to_ne_bytes()) {
        Ok(_) | Err(Errno::AGAIN) => {}
        // An eventfd write fails only with EAGAIN (full) or EINVAL (a buffer
        // that is not 8 bytes): neither can happen here.
        Err(e) => debug_assert!(false, "eventfd write failed: {e}"),
    }
}

/// Reset the counter to zero (the fd is no longer readable); returns the
/// count it held. A counter already at zero (`EAGAIN`) holds 0.
pub(crate) fn clear(fd: &OwnedFd) -> u64 {
    let mut buf = [0u8; 8];
    match rustix::io::read(fd, &mut buf) {
        Ok(8) => u64::from_ne_bytes(buf),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn signals_add_up_and_clear_resets() {
        let fd = super::new().unwrap();
        assert_eq!(super::clear(&fd), 0);
        super::signal(&fd);
        super::signal(&fd);
        assert_eq!(super::clear(&fd), 2);
        assert_eq!(super::clear(&fd), 0);
    }
}
