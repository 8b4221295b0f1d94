//! What the driver asks of the kernel and what comes back, whichever
//! backend carries it (io_uring's `uring`, the `epoll` fallback): the
//! [`Request`]s (a feed's fd, the wake fd, a cancellation), their
//! [`UserData`] encoding, the [`Completion`]s read back and how long a
//! [`Wait`] may block.

use super::key::FeedId;
use std::time::Duration;

/// What a readiness request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// Readiness of a feed's fd.
    FeedPoll(FeedId),
    /// Readiness of the driver's wake eventfd.
    WakePoll,
    /// The cancellation of a feed's poll.
    Cancel(FeedId),
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

/// How long a backend's `submit_and_wait` may block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Not at all: some feed is busy.
    Busy,
    /// Not at all, and no feed is busy: the caller asked for no wait. A
    /// backend whose readiness needs a system call to collect (epoll)
    /// collects it now; the ring's completions need none.
    Check,
    /// At most this long.
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
    fn user_data_round_trips_every_request() {
        let id = FeedId {
            index: u32::MAX,
            generation: TAG_MASK,
        };
        for r in [
            Request::FeedPoll(id),
            Request::WakePoll,
            Request::Cancel(id),
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
