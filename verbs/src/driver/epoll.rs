//! The epoll shell, for kernels or sandboxes that refuse io_uring: the same
//! requests as the ring's (`uring`), carried by one epoll instance. No feed
//! logic lives here.
//!
//! Each fd is registered one-shot (`EPOLLONESHOT`, level-triggered): a
//! readiness report disables it, as a one-shot `POLL_ADD` ends, and the
//! next poll request re-arms it (`EPOLL_CTL_MOD`, or `EPOLL_CTL_ADD` the
//! first time). A level-triggered registration of an fd that is ready
//! already reports at once, as a `POLL_ADD` does. A request takes effect in
//! its `epoll_ctl`, so there is nothing to submit.
//!
//! The driver's own wake fd is the exception: registered level-triggered
//! and not one-shot, as the ring's multishot poll is, its reports leave it
//! armed. So while a wake is not handled (the reap clears the fd) the epoll
//! fd is readable, whatever else was collected and not handled yet: a wake
//! always shows to a caller waiting on the epoll fd.
//!
//! epoll keeps one registration per fd where the ring keeps one request per
//! poll, and two feeds can poll one fd (a device's async event fd, read by
//! the device feed the driver added and by an application's own feed of
//! that device). So the registration names the fd, the requests waiting for
//! it are kept beside it, and a report completes every one of them, as each
//! request's own `POLL_ADD` would have; a cancellation reports its poll
//! ended (`ECANCELED`), as the ring's does, and removes the fd
//! (`EPOLL_CTL_DEL`) only when no other request waits for it.

use super::config::MAX_RING_ENTRIES;
use super::key::FeedId;
use super::readiness::{BusyEnters, Completion, Request, Wait, same_feed};
use rustix::buffer::spare_capacity;
use rustix::event::{Timespec, epoll};
use rustix::io::Errno;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// The epoll instance and the reports read from it, not yet reaped.
pub(crate) struct Epoll {
    epoll: OwnedFd,
    /// Where `epoll_wait` writes; its capacity (the most reports one wait
    /// reads) is kept, so a wait allocates nothing.
    events: Reports,
    /// Reports read (and cancellations made), oldest first, for `reap`.
    ready: Vec<Completion>,
    /// The fd of each feed slot's last poll request, by slot index, for
    /// its cancellation (`-1`: none yet).
    feed_fds: Vec<RawFd>,
    /// The requests waiting for each fd's next report, each at most once:
    /// those asked for since its last report or since it was added. The
    /// fd's registration carries the fd itself as its data.
    waiting: HashMap<RawFd, Vec<Request>>,
    /// When a busy turn calls `epoll_wait`.
    busy_enters: BusyEnters,
    /// The fd of the wake poll ([`Request::WakePoll`]), registered for
    /// good once asked for.
    wake_fd: Option<RawFd>,
}

/// An `epoll_wait` that only collects what is ready.
const NO_WAIT: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// The buffer `epoll_wait` fills.
struct Reports(Vec<epoll::Event>);

// SAFETY: an `epoll::Event`'s data may be a pointer, which is what keeps it
// from being `Send`; here it never is: every registration stores an integer
// (`EventData::new_u64` of a request's user data), so the buffer holds
// plain integers, which any thread may own.
unsafe impl Send for Reports {}

impl Epoll {
    /// An epoll instance reading up to `reports_per_wait` reports a wait
    /// (taken into `1..=MAX_RING_ENTRIES`, as a ring's entries are).
    pub(crate) fn new(reports_per_wait: u32, busy_enter_interval: Duration) -> io::Result<Self> {
        let reports_per_wait = reports_per_wait.clamp(1, MAX_RING_ENTRIES);
        Ok(Epoll {
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            events: Reports(Vec::with_capacity(reports_per_wait as usize)),
            ready: Vec::new(),
            feed_fds: Vec::new(),
            waiting: HashMap::new(),
            busy_enters: BusyEnters::new(busy_enter_interval),
            wake_fd: None,
        })
    }

    /// Ask for one readiness report of `fd` (one-shot; the wake poll's stay
    /// armed) for `r`, beside any other request waiting for the same fd. A
    /// feed's fd that is the wake fd's number (a feed whose source names a
    /// closed fd that the driver's eventfd reuses) is refused (`EINVAL`,
    /// the feed's failure): it would share, and disarm, the wake's
    /// registration.
    pub(crate) fn poll(&mut self, fd: RawFd, r: Request) -> io::Result<()> {
        if matches!(r, Request::FeedPoll(_)) && Some(fd) == self.wake_fd {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        if let Request::FeedPoll(id) = r {
            let i = id.index as usize;
            if self.feed_fds.len() <= i {
                self.feed_fds.resize(i + 1, -1);
            }
            self.feed_fds[i] = fd;
        }
        let data = fd as u64;
        // The wake poll's registration stays armed (see the module doc).
        let oneshot = r != Request::WakePoll;
        if !oneshot {
            self.wake_fd = Some(fd);
        }
        let armed = match self.ctl(libc::EPOLL_CTL_MOD, fd, data, oneshot) {
            // Not registered yet (or a new file under a reused number).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.ctl(libc::EPOLL_CTL_ADD, fd, data, oneshot)
            }
            r => r,
        };
        if armed.is_ok() {
            let waiting = self.waiting.entry(fd).or_default();
            if !waiting.contains(&r) {
                waiting.push(r);
            }
        }
        armed
    }

    /// `epoll_ctl(op, fd)`, level-triggered for reading (one-shot if
    /// `oneshot`), with `data` as the report's user data. The fd is a number here, not a
    /// borrowed fd: a feed's fd comes from its source's safe `fd()` (or
    /// `channel_fd()`), which nothing obliges to name an open file, and the
    /// kernel checks the number (`EBADF`).
    fn ctl(&self, op: libc::c_int, fd: RawFd, data: u64, oneshot: bool) -> io::Result<()> {
        let oneshot = if oneshot { libc::EPOLLONESHOT } else { 0 };
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | oneshot) as u32,
            u64: data,
        };
        // SAFETY: `event` is a valid, writable `epoll_event` for the call;
        // the epoll fd is ours and open; `fd` is only a number to the
        // kernel, any value of which is sound to pass.
        let r = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Cancel a feed's poll request: report the poll ended, as the ring's
    /// cancellation does, and remove its fd unless another request waits
    /// for it.
    pub(crate) fn cancel(&mut self, id: FeedId) -> io::Result<()> {
        let Some(&fd) = self.feed_fds.get(id.index as usize) else {
            return Ok(());
        };
        if fd >= 0 {
            let this = |r: &Request| matches!(r, Request::FeedPoll(f) if same_feed(*f, id));
            let others_wait = self
                .waiting
                .get(&fd)
                .is_some_and(|waiting| waiting.iter().any(|r| !this(r)));
            if others_wait {
                if let Some(waiting) = self.waiting.get_mut(&fd) {
                    waiting.retain(|r| !this(r));
                }
            } else {
                // EBADF: a number that never named an open file was never
                // registered either. Any other refusal leaves the request
                // waiting, as the poll it was.
                match self.ctl(libc::EPOLL_CTL_DEL, fd, 0, true) {
                    Err(e) if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EBADF)) => {
                        return Err(e);
                    }
                    _ => {}
                }
                self.waiting.remove(&fd);
            }
        }
        self.ready.push(Completion {
            request: Request::FeedPoll(id),
            result: -libc::ECANCELED,
            more: false,
            multishot: false,
        });
        Ok(())
    }

    /// Wait as `wait` says and collect the reports. Returns whether a
    /// timed wait ended with nothing to handle (its timeout, or a signal).
    /// While busy (a turn at `now`), `epoll_wait` is called (without
    /// blocking) at most once per `busy_enter_interval`, to collect the
    /// other feeds' readiness.
    pub(crate) fn submit_and_wait(&mut self, wait: Wait, now: Instant) -> io::Result<bool> {
        let timeout = match wait {
            Wait::Busy => {
                if !self.busy_enters.due(now) {
                    return Ok(false);
                }
                Some(NO_WAIT)
            }
            Wait::Check => Some(NO_WAIT),
            // Reports already collected (a cancellation's) need no wait.
            _ if !self.ready.is_empty() => Some(NO_WAIT),
            Wait::For(d) => {
                // The shell asks no longer (epoll_wait takes milliseconds in
                // a C int before Linux 5.11); a unit test may.
                let d = d.min(super::readiness::LONGEST_WAIT);
                Some(Timespec {
                    tv_sec: d.as_secs() as _,
                    tv_nsec: d.subsec_nanos() as _,
                })
            }
            Wait::Forever => None,
        };
        self.events.0.clear();
        match epoll::wait(
            &self.epoll,
            spare_capacity(&mut self.events.0),
            timeout.as_ref(),
        ) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        for ev in self.events.0.drain(..) {
            // Copied out: the event is a packed struct on some targets.
            let (flags, data) = (ev.flags, ev.data);
            let fd = data.u64() as RawFd;
            if Some(fd) == self.wake_fd {
                // Still armed: the wake poll goes on, as a multishot one.
                self.ready.push(Completion {
                    request: Request::WakePoll,
                    result: flags.bits() as i32,
                    more: true,
                    multishot: true,
                });
                continue;
            }
            // One-shot: the report disarmed the fd, so every request
            // waiting for it ends here. None may wait: a registration whose
            // deletion found the number naming another file by then
            // (`ENOENT`, `EBADF`) lasts until its own file is closed.
            let waiting = self.waiting.get_mut(&fd);
            for request in waiting.into_iter().flat_map(|w| w.drain(..)) {
                self.ready.push(Completion {
                    request,
                    result: flags.bits() as i32,
                    more: false,
                    multishot: false,
                });
            }
        }
        Ok(matches!(wait, Wait::For(_)) && self.ready.is_empty())
    }

    /// Reports collected and not reaped yet.
    pub(crate) fn collected(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Nothing to hand to the kernel: each request took effect in its
    /// `epoll_ctl`.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Hand every report collected to `f`, oldest first.
    pub(crate) fn reap(&mut self, mut f: impl FnMut(Completion)) {
        for c in self.ready.drain(..) {
            f(c);
        }
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

/// Whether `fd` can be polled: the error an epoll instance gives when it
/// is added (`EPERM`: a file with no poll method; `EBADF`: no open file),
/// from a throwaway instance; `Ok(true)` if it can. Where the check itself
/// cannot be made (no fd or memory for the instance, at the process's fd
/// limit), `Ok(false)`: the poll goes ahead unchecked, and the next one
/// checks again.
pub(crate) fn check_pollable(fd: RawFd) -> io::Result<bool> {
    let Ok(probe) = epoll::create(epoll::CreateFlags::CLOEXEC) else {
        return Ok(false);
    };
    let mut event = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: as in `Epoll::ctl`: a valid `epoll_event`, our open epoll fd,
    // and `fd` is only a number to the kernel. Closing `probe` removes it.
    let r = unsafe { libc::epoll_ctl(probe.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if super::readiness::refuses_the_fd(&e) {
            return Err(e);
        }
        return Ok(false);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventfd;

    /// One wait that does not block: whether it found nothing to report.
    fn timed_out(ep: &mut Epoll) -> bool {
        ep.submit_and_wait(Wait::For(Duration::ZERO), Instant::now())
            .unwrap()
    }

    #[test]
    fn a_ready_fd_reports_once_until_polled_again() {
        let mut ep = Epoll::new(4, Duration::ZERO).unwrap();
        let fd = eventfd::new().unwrap();
        eventfd::signal(&fd);
        let poll = Request::FeedPoll(FeedId {
            index: 0,
            generation: 0,
        });
        ep.poll(fd.as_raw_fd(), poll).unwrap();
        assert!(!timed_out(&mut ep));
        let mut got = Vec::new();
        ep.reap(|c| got.push(c));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].request, poll);
        assert!(got[0].result > 0 && !got[0].more);
        // One-shot: still readable, but not reported until asked again.
        assert!(timed_out(&mut ep));
        ep.poll(fd.as_raw_fd(), poll).unwrap();
        assert!(!timed_out(&mut ep));
    }

    #[test]
    fn a_feeds_poll_of_the_wake_fds_number_is_refused_as_the_feeds_failure() {
        let mut ep = Epoll::new(4, Duration::ZERO).unwrap();
        let fd = eventfd::new().unwrap();
        ep.poll(fd.as_raw_fd(), Request::WakePoll).unwrap();
        let feed = Request::FeedPoll(FeedId {
            index: 0,
            generation: 0,
        });
        let refused = ep.poll(fd.as_raw_fd(), feed).unwrap_err();
        assert!(crate::driver::readiness::refuses_the_fd(&refused));
    }

    #[test]
    fn the_wake_poll_stays_armed_and_shows_on_the_epoll_fd_while_its_fd_is_readable() {
        let mut ep = Epoll::new(4, Duration::ZERO).unwrap();
        let fd = eventfd::new().unwrap();
        ep.poll(fd.as_raw_fd(), Request::WakePoll).unwrap();
        eventfd::signal(&fd);
        for _ in 0..2 {
            // Collected and not reaped: the epoll fd still shows the wake.
            assert!(!ep.submit_and_wait(Wait::Busy, Instant::now()).unwrap());
            assert!(ep.collected());
            let mut pfd = libc::pollfd {
                fd: ep.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, for the call's duration.
            assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 1);
        }
        let mut got = Vec::new();
        ep.reap(|c| got.push(c));
        assert!(got.iter().all(|c| c.request == Request::WakePoll && c.more));
        // Cleared (as the driver's reap does): no report, still armed.
        eventfd::clear(&fd);
        assert!(timed_out(&mut ep));
        eventfd::signal(&fd);
        assert!(!timed_out(&mut ep));
    }

    #[test]
    fn a_cancelled_poll_ends_with_ecanceled_and_reports_nothing_more() {
        let mut ep = Epoll::new(4, Duration::ZERO).unwrap();
        let fd = eventfd::new().unwrap();
        let id = FeedId {
            index: 2,
            generation: 5,
        };
        ep.poll(fd.as_raw_fd(), Request::FeedPoll(id)).unwrap();
        ep.cancel(id).unwrap();
        eventfd::signal(&fd);
        assert!(!timed_out(&mut ep));
        let mut got = Vec::new();
        ep.reap(|c| got.push(c));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].request, Request::FeedPoll(id));
        assert_eq!(got[0].result, -libc::ECANCELED);
    }

    fn reaped(ep: &mut Epoll) -> Vec<Completion> {
        let mut got = Vec::new();
        ep.reap(|c| got.push(c));
        got
    }

    /// An epoll instance with two feeds' polls of one eventfd.
    fn two_polls_of_one_fd() -> (Epoll, OwnedFd, [FeedId; 2]) {
        let mut ep = Epoll::new(4, Duration::ZERO).unwrap();
        let fd = eventfd::new().unwrap();
        let ids = [0, 1].map(|index| FeedId {
            index,
            generation: 1,
        });
        for id in ids {
            ep.poll(fd.as_raw_fd(), Request::FeedPoll(id)).unwrap();
        }
        (ep, fd, ids)
    }

    #[test]
    fn two_polls_of_one_fd_are_both_reported() {
        let (mut ep, fd, [a, b]) = two_polls_of_one_fd();
        eventfd::signal(&fd);
        assert!(!timed_out(&mut ep));
        let got: Vec<_> = reaped(&mut ep).iter().map(|c| c.request).collect();
        assert_eq!(got, [Request::FeedPoll(a), Request::FeedPoll(b)]);
        // Both one-shot polls ended: nothing more until asked again.
        assert!(timed_out(&mut ep));
    }

    #[test]
    fn cancelling_one_of_two_polls_of_an_fd_keeps_the_other() {
        let (mut ep, fd, [a, b]) = two_polls_of_one_fd();
        ep.cancel(a).unwrap();
        let got = reaped(&mut ep);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].request, got[0].result),
            (Request::FeedPoll(a), -libc::ECANCELED)
        );
        eventfd::signal(&fd);
        assert!(!timed_out(&mut ep));
        let got: Vec<_> = reaped(&mut ep).iter().map(|c| c.request).collect();
        assert_eq!(got, [Request::FeedPoll(b)], "the other poll still waits");
    }

    /// Put a file of `file`'s at `fd`'s number (the number's old file
    /// lives on if another fd holds it, and so does its registration).
    fn renumber(file: &impl AsRawFd, fd: &OwnedFd) {
        // SAFETY: both numbers are open fds of this test; dup2 closes the
        // old file of `fd`'s number, which `fd` still owns (as the new one).
        assert!(unsafe { libc::dup2(file.as_raw_fd(), fd.as_raw_fd()) } >= 0);
    }

    /// An epoll instance with a feed's poll of an eventfd, and a second fd
    /// of that eventfd's file (`kept`), which outlives a `renumber`.
    fn one_poll_of_a_kept_fd() -> (Epoll, OwnedFd, OwnedFd, FeedId) {
        let mut ep = Epoll::new(4, Duration::ZERO).unwrap();
        let fd = eventfd::new().unwrap();
        let kept = fd.try_clone().unwrap();
        let id = FeedId {
            index: 0,
            generation: 1,
        };
        ep.poll(fd.as_raw_fd(), Request::FeedPoll(id)).unwrap();
        (ep, fd, kept, id)
    }

    #[test]
    fn a_cancellation_the_kernel_refuses_leaves_the_poll_waiting() {
        let (mut ep, fd, kept, id) = one_poll_of_a_kept_fd();
        // The number now names a file epoll refuses (`EPERM`); the polled
        // one lives on in `kept`, registered.
        renumber(&std::fs::File::open("/proc/self/exe").unwrap(), &fd);
        assert!(ep.cancel(id).is_err());
        assert!(reaped(&mut ep).is_empty(), "no end reported");
        eventfd::signal(&kept);
        assert!(!timed_out(&mut ep));
        let got: Vec<_> = reaped(&mut ep).iter().map(|c| c.request).collect();
        assert_eq!(got, [Request::FeedPoll(id)], "the poll still waited");
    }

    #[test]
    fn a_report_of_a_registration_that_outlived_its_cancellation_is_ignored() {
        let (mut ep, fd, kept, id) = one_poll_of_a_kept_fd();
        // The number now names another pollable file, never registered:
        // the deletion finds nothing (`ENOENT`), and the old registration
        // lasts as long as `kept`.
        renumber(&eventfd::new().unwrap(), &fd);
        ep.cancel(id).unwrap();
        let got = reaped(&mut ep);
        assert_eq!((got.len(), got[0].result), (1, -libc::ECANCELED));
        eventfd::signal(&kept);
        timed_out(&mut ep);
        assert!(reaped(&mut ep).is_empty());
    }

    #[test]
    fn a_wait_for_a_while_with_nothing_pending_times_out() {
        let mut ep = Epoll::new(4, Duration::ZERO).unwrap();
        assert!(
            ep.submit_and_wait(Wait::For(Duration::from_millis(1)), Instant::now())
                .unwrap()
        );
        assert!(!ep.submit_and_wait(Wait::Busy, Instant::now()).unwrap());
    }
}
