//! What the driver asks of the kernel and what comes back, whichever
//! backend carries it (io_uring's `uring`, the `epoll` fallback): the
//! [`Request`]s (a feed's fd, the wake fd, a cancellation), their
//! [`UserData`] encoding, the [`Completion`]s read back and how long a
//! [`Wait`] may block.

use super::key::FeedId;
use std::time::{Duration, Instant};

/// What a readiness request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// Readiness of a feed's fd.
    FeedPoll(FeedId),
    /// Readiness of the driver's wake eventfd.
    WakePoll,
    /// The cancellation of a feed's poll.
    Cancel(FeedId),
    /// The cancellation of the wake poll (to ask for it again from another
    /// thread: see `Driver::run`).
    CancelWake,
}

/// A request's user data: which request, for which feed, and whether it
/// was submitted multishot. The layout (the multishot bit on top, the kind
/// in the other 7 bits of the top byte, the generation's low 24 bits, the
/// slot's 32) is known only to [`UserData::encode`] and
/// [`UserData::decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UserData {
    pub(crate) kind: u8,
    /// The feed's generation's [`tag`].
    pub(crate) generation: u32,
    pub(crate) index: u32,
    /// A poll asked for as multishot: an `EINVAL` for it is the kernel
    /// refusing multishot, not an error of the request.
    pub(crate) multishot: bool,
}

/// The bits of a feed's generation its requests carry.
const TAG_MASK: u64 = (1 << 24) - 1;

/// The low 24 bits of a feed's generation: all a request's user data has
/// room for. A completion's [`FeedId`] carries only these (the rest zero),
/// so it is matched to its slot by [`same_feed`]. They suffice: a slot is
/// reused only once its feed's poll has completed, so no completion of the
/// feed before it is still to come. Keys compare the whole generation.
pub(crate) fn tag(generation: u64) -> u32 {
    (generation & TAG_MASK) as u32
}

/// Whether a completion's `reported` id names the feed `registered` (the
/// slot's full id).
pub(crate) fn same_feed(reported: FeedId, registered: FeedId) -> bool {
    reported.index == registered.index && tag(reported.generation) == tag(registered.generation)
}

const KIND_FEED: u8 = 1;
const KIND_WAKE: u8 = 2;
const KIND_CANCEL: u8 = 3;
const KIND_CANCEL_WAKE: u8 = 4;

impl UserData {
    pub(crate) fn of(r: Request) -> Self {
        let (kind, id) = match r {
            Request::FeedPoll(id) => (KIND_FEED, id),
            Request::WakePoll => (
                KIND_WAKE,
                FeedId {
                    index: 0,
                    generation: 0,
                },
            ),
            Request::Cancel(id) => (KIND_CANCEL, id),
            Request::CancelWake => (
                KIND_CANCEL_WAKE,
                FeedId {
                    index: 0,
                    generation: 0,
                },
            ),
        };
        UserData {
            kind,
            generation: tag(id.generation),
            index: id.index,
            multishot: false,
        }
    }

    pub(crate) fn request(self) -> Option<Request> {
        let id = FeedId {
            index: self.index,
            generation: u64::from(self.generation),
        };
        match self.kind {
            KIND_FEED => Some(Request::FeedPoll(id)),
            KIND_WAKE => Some(Request::WakePoll),
            KIND_CANCEL => Some(Request::Cancel(id)),
            KIND_CANCEL_WAKE => Some(Request::CancelWake),
            _ => None,
        }
    }

    pub(crate) fn encode(self) -> u64 {
        debug_assert!(self.kind < 0x80);
        (u64::from(self.multishot) << 63)
            | (u64::from(self.kind & 0x7f) << 56)
            | ((u64::from(self.generation) & TAG_MASK) << 32)
            | u64::from(self.index)
    }

    pub(crate) fn decode(v: u64) -> Self {
        UserData {
            multishot: v >> 63 != 0,
            kind: ((v >> 56) as u8) & 0x7f,
            generation: tag(v >> 32),
            index: v as u32,
        }
    }
}

/// One completion read back from the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) request: Request,
    /// The kernel's result: the poll's event mask, or a negated errno.
    pub(crate) result: i32,
    /// A multishot request stays in the kernel (more completions will come).
    pub(crate) more: bool,
    /// The request was submitted multishot.
    pub(crate) multishot: bool,
}

/// When a busy driver enters the kernel to collect the other feeds'
/// readiness: at most `interval` apart, by the clock, whatever its turns
/// cost (a turn that spins on an empty CQ takes a fraction of a
/// microsecond, one that delivers a full budget many microseconds: a count
/// of turns would bound neither the system calls' share nor how late a
/// sleeping feed's readiness is seen).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BusyEnters {
    interval: Duration,
    /// When a busy turn last entered (`None`: none yet).
    last: Option<Instant>,
}

impl BusyEnters {
    pub(crate) fn new(interval: Duration) -> Self {
        BusyEnters {
            interval,
            last: None,
        }
    }

    /// Whether a busy turn at `now` enters the kernel to collect; if it
    /// does, the next is `interval` after `now`.
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        let due = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if due {
            self.last = Some(now);
        }
        due
    }
}

/// How long one [`Driver`](super::Driver) step may wait in the kernel.
#[derive(Clone, Copy)]
pub(super) enum StepWait {
    /// As long as `process`'s caller said.
    Caller(Option<Duration>),
    /// A removal's or a shutdown's wait for the kernel to end a
    /// cancellation: bounded ([`CANCELLATION_WAIT_BOUND`]) should the
    /// kernel be slow to report it, and not counted as a timeout.
    Bounded,
}
pub(super) const CANCELLATION_WAIT_BOUND: Duration = Duration::from_millis(100);

/// The longest wait a backend is asked for, about 24.8 days: `epoll_wait`
/// takes milliseconds in a C int (before Linux 5.11), and io_uring adds the
/// wait to the clock's time, a sum that overflows past 2^63 ns into a
/// deadline already past (a wait that returns at once, and a caller's loop
/// that spins). A longer timeout waits this long, then returns as one.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_millis(i32::MAX as u64);

/// How long a backend's `submit_and_wait` may block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Not at all: some feed is busy.
    Busy,
    /// Not at all, and no feed is busy: the caller asked for no wait. A
    /// backend whose readiness needs a system call to collect (epoll)
    /// collects it now; the ring's completions need none, but those the
    /// kernel held back from a full completion queue do.
    Check,
    /// At most this long (never longer than [`LONGEST_WAIT`]).
    For(Duration),
    /// Until a completion arrives.
    Forever,
}

/// Whether a poll of an fd failed because of that fd (a number that names
/// no open file, a file that cannot be polled), not because of the backend
/// (memory, epoll's watch limit): only the former is the feed's failure.
pub(super) fn refuses_the_fd(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EPERM | libc::EINVAL | libc::ELOOP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_turns_enter_once_per_interval_by_the_clock_however_many_turns() {
        let interval = Duration::from_micros(10);
        let mut enters = BusyEnters::new(interval);
        let t0 = Instant::now();
        assert!(enters.due(t0), "the first busy turn enters");
        // A million turns inside the interval (cheap spinning turns): none.
        for i in 1..=1_000_000u32 {
            assert!(!enters.due(t0 + interval * i / 1_000_001), "turn {i}");
        }
        assert!(enters.due(t0 + interval));
        // One turn longer than the interval (a full budget delivered): the
        // next turn enters.
        let late = t0 + interval * 50;
        assert!(enters.due(late));
        assert!(!enters.due(late + interval / 2));
        // Zero: every busy turn enters.
        let mut always = BusyEnters::new(Duration::ZERO);
        assert!((0..10).all(|_| always.due(t0)));
    }

    #[test]
    fn user_data_round_trips_every_request() {
        let id = FeedId {
            index: u32::MAX,
            generation: TAG_MASK,
        };
        for r in [
            Request::FeedPoll(id),
            Request::WakePoll,
            Request::Cancel(id),
            Request::CancelWake,
        ] {
            for multishot in [false, true] {
                let ud = UserData {
                    multishot,
                    ..UserData::of(r)
                };
                assert_eq!(UserData::decode(ud.encode()), ud);
                assert_eq!(UserData::decode(ud.encode()).request(), Some(r));
            }
        }
        assert_eq!(UserData::decode(0).request(), None);
    }
}
