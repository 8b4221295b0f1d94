//! The io_uring shell: poll requests on the feeds' fds and the wake fd,
//! their cancellation, the waits, and the completions read back as typed
//! [`Completion`]s. No feed logic lives here.

use super::config::MAX_RING_ENTRIES;
use super::key::FeedId;
use super::readiness::{BusyEnters, Completion, Request, UserData, Wait};
use io_uring::{IoUring, cqueue, opcode, squeue, types};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

/// The ring and what it knows about the kernel.
pub(crate) struct Ring {
    ring: IoUring,
    /// Multishot `POLL_ADD` (Linux 5.13); cleared when the kernel refuses it.
    multishot: bool,
    /// When a busy turn enters with nothing to submit.
    busy_enters: BusyEnters,
    /// Completions taken out of a full completion queue to let a submit
    /// through, not yet reaped.
    set_aside: Vec<Completion>,
}

fn completion(cqe: &cqueue::Entry) -> Option<Completion> {
    let data = UserData::decode(cqe.user_data());
    let request = data.request();
    debug_assert!(request.is_some(), "a completion with unknown user data");
    Some(Completion {
        request: request?,
        result: cqe.result(),
        more: cqueue::more(cqe.flags()),
        multishot: data.multishot,
    })
}

/// What the ring needs of the kernel beyond a ring: a completion queue
/// that never drops a completion when full (`IORING_FEAT_NODROP`, Linux
/// 5.5: a poll's dropped completion would leave its feed asleep for ever)
/// and timed waits (`IORING_FEAT_EXT_ARG`, 5.11: every wait with a timeout
/// fails without it). `None` if the kernel has both, else what it lacks.
fn lacks(nodrop: bool, ext_arg: bool) -> Option<&'static str> {
    match (nodrop, ext_arg) {
        (true, true) => None,
        (false, _) => Some("IORING_FEAT_NODROP (Linux 5.5)"),
        (true, false) => Some("IORING_FEAT_EXT_ARG (Linux 5.11)"),
    }
}

/// The kernel's io_uring lacks what the ring needs: `EOPNOTSUPP`, which
/// [`DriverBackend::Auto`](crate::DriverBackend::Auto) takes as a refusal
/// of io_uring and answers with epoll.
fn too_old(ring: &IoUring) -> Option<io::Error> {
    let p = ring.params();
    lacks(p.is_feature_nodrop(), p.is_feature_ext_arg()).map(|_missing| {
        crate::trace::event!(
            INFO,
            missing = _missing,
            "the kernel's io_uring is too old for the driver"
        );
        io::Error::from_raw_os_error(libc::EOPNOTSUPP)
    })
}

impl Ring {
    /// A ring of `entries` submission-queue entries, taken into
    /// `1..=MAX_RING_ENTRIES` (the kernel refuses others), and a
    /// completion queue of twice that.
    pub(crate) fn new(entries: u32, busy_enter_interval: Duration) -> io::Result<Self> {
        let entries = entries.clamp(1, MAX_RING_ENTRIES);
        let ring = match IoUring::builder().setup_cqsize(entries * 2).build(entries) {
            Ok(ring) => ring,
            // Before Linux 5.5 the kernel knows no `IORING_SETUP_CQSIZE`
            // and refuses the setup as invalid: a plain ring tells whether
            // the kernel is too old or the request was at fault.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return Err(IoUring::new(2).ok().and_then(|r| too_old(&r)).unwrap_or(e));
            }
            Err(e) => return Err(e),
        };
        if let Some(e) = too_old(&ring) {
            return Err(e);
        }
        Ok(Ring {
            ring,
            multishot: true,
            busy_enters: BusyEnters::new(busy_enter_interval),
            set_aside: Vec::new(),
        })
    }

    /// Ask for readiness of `fd` (multishot where the kernel has it).
    pub(crate) fn poll(&mut self, fd: RawFd, r: Request) -> io::Result<()> {
        let data = UserData {
            multishot: self.multishot,
            ..UserData::of(r)
        };
        let sqe = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(self.multishot)
            .build()
            .user_data(data.encode());
        self.push(&sqe)
    }

    /// Cancel a feed's poll request. A cancel names its target by user
    /// data, which says whether the poll was asked multishot; the feed's
    /// poll may have been asked either way (the ring stops asking multishot
    /// when the kernel refuses it), so both are cancelled, and the one that
    /// names no request completes with `ENOENT`, which nobody reads.
    pub(crate) fn cancel(&mut self, id: FeedId) -> io::Result<()> {
        for multishot in [true, false] {
            let target = UserData {
                multishot,
                ..UserData::of(Request::FeedPoll(id))
            };
            let sqe = opcode::AsyncCancel::new(target.encode())
                .build()
                .user_data(UserData::of(Request::Cancel(id)).encode());
            self.push(&sqe)?;
        }
        Ok(())
    }

    /// Cancel the wake poll (both ways it may have been asked): its end
    /// (`ECANCELED`) lets the thread that reaps it ask again.
    pub(crate) fn cancel_wake(&mut self) -> io::Result<()> {
        for multishot in [true, false] {
            let target = UserData {
                multishot,
                ..UserData::of(Request::WakePoll)
            };
            let sqe = opcode::AsyncCancel::new(target.encode())
                .build()
                .user_data(UserData::of(Request::CancelWake).encode());
            self.push(&sqe)?;
        }
        Ok(())
    }

    /// A poll completed: true if it was submitted multishot and the kernel
    /// refused that (`EINVAL`, before Linux 5.13). The ring asks one-shot
    /// from then on, and the caller asks again. Decided per request, so
    /// every multishot poll already in flight when the first refusal comes
    /// back is recognised as refused too, not taken for an error.
    pub(crate) fn refused_multishot(&mut self, c: &Completion) -> bool {
        if c.result == -libc::EINVAL && c.multishot {
            self.multishot = false;
            return true;
        }
        false
    }

    fn push(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the entries reference no user memory (poll and cancel
            // requests carry only an fd and a user-data value).
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            // Submission queue full: hand what is queued to the kernel.
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // Completion queue full: move its completions aside (the
                // next `reap` hands them out first) and submit again.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => self.set_aside(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Submit what is queued and wait as `wait` says. Returns whether a
    /// timed wait ended with no completion to handle (its timeout, or a
    /// signal): the kernel reports a timeout only when the same enter
    /// submitted nothing, so the completion queue is what tells. While busy
    /// (a turn at `now`), the kernel is entered only to submit, to collect
    /// completions it held back from a full completion queue, or at most
    /// once per `busy_enter_interval` to collect the other feeds' readiness:
    /// an enter per turn would cost a spinning feed a system call per poll.
    pub(crate) fn submit_and_wait(&mut self, wait: Wait, now: Instant) -> io::Result<bool> {
        let r = match wait {
            Wait::Busy | Wait::Check => {
                // Completions the kernel held back from a full completion
                // queue (`IORING_SQ_CQ_OVERFLOW`, NODROP) reach the ring
                // only through an enter that collects, which `submit` asks
                // for while the flag is set; the ring's fd shows them
                // readable meanwhile. One load of a line the kernel writes
                // only when the flags change.
                let held_back = self.ring.submission().cq_overflow();
                if !held_back && !self.busy_enters.due(now) && self.ring.submission().is_empty() {
                    return Ok(false);
                }
                self.ring.submit()
            }
            // Completions set aside after a full completion queue are not
            // in the ring, where the kernel counts what a wait waits for:
            // they are handed out first, without waiting.
            Wait::For(_) | Wait::Forever if !self.set_aside.is_empty() => self.ring.submit(),
            Wait::For(d) => {
                let ts = types::Timespec::new()
                    .sec(d.as_secs())
                    .nsec(d.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            Wait::Forever => self.ring.submit_and_wait(1),
        };
        match r {
            Ok(_) => {}
            // ETIME: the timeout; EINTR: a signal; EBUSY: the completion
            // queue is full (the caller reaps it next).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) => {}
            Err(e) => return Err(e),
        }
        let nothing = self.set_aside.is_empty() && self.ring.completion().is_empty();
        Ok(matches!(wait, Wait::For(_)) && nothing)
    }

    /// Hand what is queued to the kernel, without waiting; nothing to do if
    /// nothing is queued.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if self.ring.submission().is_empty() {
            return Ok(());
        }
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => self.set_aside(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Hand every completion the ring holds to `f`, oldest first.
    pub(crate) fn reap(&mut self, mut f: impl FnMut(Completion)) {
        for c in self.set_aside.drain(..) {
            f(c);
        }
        for cqe in self.ring.completion() {
            if let Some(c) = completion(&cqe) {
                f(c);
            }
        }
    }

    /// Completions were set aside and not handed out yet: the ring's fd
    /// does not show them.
    pub(crate) fn set_aside_pending(&self) -> bool {
        !self.set_aside.is_empty()
    }

    /// Empty the completion queue into `set_aside`.
    #[cold]
    fn set_aside(&mut self) {
        let Ring {
            ring, set_aside, ..
        } = self;
        set_aside.extend(ring.completion().filter_map(|cqe| completion(&cqe)));
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}

impl AsFd for Ring {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the ring's fd is open for as long as the ring, which the
        // borrow keeps alive.
        unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_multishot_poll_in_flight_is_a_refusal_once_the_kernel_refuses() {
        // Two polls asked multishot, both refused: the second is a refusal
        // too, though the first already turned multishot off. A one-shot
        // poll's EINVAL is an error of its own.
        let mut ring = Ring::new(4, Duration::ZERO).unwrap();
        let refused = |request| Completion {
            request,
            result: -libc::EINVAL,
            more: false,
            multishot: true,
        };
        assert!(ring.refused_multishot(&refused(Request::WakePoll)));
        let id = FeedId {
            index: 3,
            generation: 1,
        };
        assert!(ring.refused_multishot(&refused(Request::FeedPoll(id))));
        assert!(!ring.multishot);
        let one_shot = Completion {
            multishot: false,
            ..refused(Request::FeedPoll(id))
        };
        assert!(!ring.refused_multishot(&one_shot));
        let ready = Completion {
            result: libc::POLLIN as i32,
            ..refused(Request::FeedPoll(id))
        };
        assert!(!ring.refused_multishot(&ready));
    }

    #[test]
    fn a_kernel_without_nodrop_or_timed_waits_is_too_old() {
        assert_eq!(lacks(true, true), None);
        assert!(lacks(false, true).is_some_and(|m| m.contains("NODROP")));
        assert!(lacks(true, false).is_some_and(|m| m.contains("EXT_ARG")));
        assert!(lacks(false, false).is_some());
        // This kernel has both (the tests need Linux 5.11 or later).
        assert!(too_old(&Ring::new(4, Duration::ZERO).unwrap().ring).is_none());
    }

    #[test]
    fn a_wait_with_completions_set_aside_does_not_block() {
        // A completion set aside (as after a full completion queue) is not
        // in the ring, where a wait would look: the wait returns at once,
        // the completion is reported collected, then handed out.
        let mut ring = Ring::new(4, Duration::ZERO).unwrap();
        ring.set_aside.push(Completion {
            request: Request::WakePoll,
            result: libc::POLLIN as i32,
            more: false,
            multishot: false,
        });
        assert!(ring.set_aside_pending());
        // On a thread, under a watchdog: a wait that blocks fails the test
        // instead of hanging it.
        let (done, waited) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let forever = ring.submit_and_wait(Wait::Forever, Instant::now()).unwrap();
            let long = ring.submit_and_wait(Wait::For(Duration::from_secs(3600)), Instant::now());
            let _ = done.send(());
            (ring, forever, long.unwrap())
        });
        let watchdog = Duration::from_secs(60);
        waited
            .recv_timeout(watchdog)
            .expect("a wait blocked with a completion set aside");
        let (mut ring, forever, long) = waiter.join().unwrap();
        assert!(!forever && !long, "neither wait timed out with nothing");
        let mut got = Vec::new();
        ring.reap(|c| got.push(c.request));
        assert_eq!(got, [Request::WakePoll]);
        assert!(!ring.set_aside_pending());
    }

    #[test]
    fn a_check_collects_what_a_full_completion_queue_held_back() {
        // A completion queue of two entries; four polls complete at once:
        // two wait in the kernel (its overflow list) until an enter collects
        // them. A check that is not due for a busy enter must enter anyway,
        // or they stay there, the ring's fd readable, and a caller's loop
        // spins on it.
        let mut ring = Ring::new(1, Duration::from_secs(3600)).unwrap();
        let fds: Vec<_> = (0..4).map(|_| crate::eventfd::new().unwrap()).collect();
        for (index, fd) in fds.iter().enumerate() {
            let id = FeedId {
                index: index as u32,
                generation: 1,
            };
            ring.poll(fd.as_raw_fd(), Request::FeedPoll(id)).unwrap();
        }
        let start = Instant::now();
        ring.submit_and_wait(Wait::Check, start).unwrap(); // the first check enters
        fds.iter().for_each(crate::eventfd::signal);
        let mut got = Vec::new();
        // Every check at the same instant: none is due for a busy enter.
        for _ in 0..3 {
            ring.submit_and_wait(Wait::Check, start).unwrap();
            ring.reap(|c| got.push(c.request));
        }
        got.sort_unstable_by_key(|r| format!("{r:?}"));
        got.dedup();
        assert_eq!(got.len(), 4, "every feed's poll completed: {got:?}");
    }

    #[test]
    fn a_wait_for_a_while_with_nothing_pending_times_out() {
        let mut ring = Ring::new(4, Duration::ZERO).unwrap();
        assert!(
            ring.submit_and_wait(Wait::For(Duration::from_millis(1)), Instant::now())
                .unwrap()
        );
        assert!(!ring.submit_and_wait(Wait::Busy, Instant::now()).unwrap());
    }
}
