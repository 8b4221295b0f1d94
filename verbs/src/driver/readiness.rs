//! What the driver asks of the kernel and what comes back, whichever
//! backend carries it (io_uring's `uring`, the `epoll` fallback): the
//! [`Request`]s (a feed's fd, the wake fd, a cancellation), their
//! [`UserData`] encoding, the [`Completion`]s read back and how long a
//! [`Wait`] may block.

use super::key::{FeedId, MAX_GENERATION};
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
/// in the other 7 bits of the top byte, the generation's 24 bits, the
/// slot's 32) is known only to [`UserData::encode`] and
/// [`UserData::decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UserData {
    pub(crate) kind: u8,
    pub(crate) generation: u32,
    pub(crate) index: u32,
    /// A poll asked for as multishot: an `EINVAL` for it is the kernel
    /// refusing multishot, not an error of the request.
    pub(crate) multishot: bool,
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
        debug_assert!(id.generation <= MAX_GENERATION);
        UserData {
            kind,
            generation: id.generation,
            index: id.index,
            multishot: false,
        }
    }

    pub(crate) fn request(self) -> Option<Request> {
        let id = FeedId {
            index: self.index,
            generation: self.generation,
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
            | (u64::from(self.generation & MAX_GENERATION) << 32)
            | u64::from(self.index)
    }

    pub(crate) fn decode(v: u64) -> Self {
        UserData {
            multishot: v >> 63 != 0,
            kind: ((v >> 56) as u8) & 0x7f,
            generation: ((v >> 32) as u32) & MAX_GENERATION,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_round_trips_every_request() {
        let id = FeedId {
            index: u32::MAX,
            generation: MAX_GENERATION,
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
