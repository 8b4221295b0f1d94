//! The driver's own poll (the wake fd's) and the thread the polls belong
//! to. io_uring runs a poll's completion work on the thread that submitted
//! it, interrupting that thread to do so (`Backend::cancel_wake`): a
//! driver created on one thread and then driven from another (spawned, or
//! moved by the caller's own loop, or stepped from whichever worker an
//! async runtime picks) must end its polls and ask again from the thread
//! that steps it, or each wake and channel event would run on, and wait
//! for, the thread it was created on. epoll has no such tie.

use super::Driver;
use super::error::DriverError;
use super::readiness::Request;
use std::os::fd::AsRawFd;
use std::thread;

impl Driver {
    /// The wake fd's poll is in the kernel (asked for again once it ended).
    pub(super) fn keep_wake_poll(&mut self) -> Result<(), DriverError> {
        if !self.wake_poll_in_flight {
            self.backend
                .poll(self.shared.wake.as_raw_fd(), Request::WakePoll)?;
            self.wake_poll_in_flight = true;
        }
        Ok(())
    }

    /// A step the backend failed may have left work (readiness reaped, a
    /// feed's poll not asked, requests not submitted) that the driver's fd
    /// does not show: have the wake poll in the kernel, if the backend
    /// lets it, and make the fd readable, so that a loop that waits on it
    /// calls `process` again.
    pub(super) fn show_work_left_by_a_failure(&mut self) {
        let _ = self.keep_wake_poll();
        let _ = self.backend.flush();
        self.shared.wake();
    }

    /// Called at the start of every step: if the polls in flight were
    /// asked for by another thread (on io_uring), end the wake poll (the
    /// step that reaps its end asks for it again, from this thread) and
    /// mark each feed's poll spent (its next turn cancels it and asks
    /// again). A cancellation the backend refuses leaves the driver working,
    /// its wakes still routed through the other thread.
    pub(super) fn own_the_polls(&mut self) {
        if !self.backend.polls_belong_to_their_submitter() {
            return;
        }
        let here = thread::current().id();
        if self.polls_thread == here {
            return;
        }
        self.polls_thread = here;
        if self.wake_poll_in_flight {
            let _ = self.backend.cancel_wake();
        }
        for slot in self.slots.iter_mut().flatten() {
            slot.poll_spent |= slot.poll_in_flight;
        }
    }
}
