//! Faults a unit test plants in a driver's backend (test builds only).

/// Faults a unit test plants in a driver: the backend refuses `cancels`
/// more cancellations, `steps` more steps of a wait for cancellations to
/// end fail, and it takes `fd_polls` more polls of feeds' fds (if set),
/// then refuses every one as out of memory (as epoll's watch limit would).
#[derive(Default)]
pub(crate) struct Faults {
    pub(super) cancels: u32,
    pub(super) steps: u32,
    pub(super) fd_polls: Option<u32>,
}

impl Faults {
    pub(super) fn fd_poll(&mut self) -> std::io::Result<()> {
        match &mut self.fd_polls {
            Some(0) => Err(std::io::Error::from_raw_os_error(libc::ENOMEM)),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}
