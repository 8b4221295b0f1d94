//! The engine of the feeds of event streams: sources whose fd is readable
//! while events wait, and that hand out one event at a time, copied out and
//! acknowledged (a device's async events, the connection manager's events).
//! [`AsyncFeed`](crate::AsyncFeed) and [`CmFeed`](crate::CmFeed) are this
//! engine with their source's event type.

use crate::feed::{FeedStatus, Progress};
use evd::{PostError, Poster, RoomWaiter};
use std::io;
use std::task::{Context, Poll};

/// Events from `source` into the EVD of a [`RoomWaiter`]'s poster, in
/// order. An event the EVD refuses (full, or closed) is held, already
/// converted, and offered first next time: nothing is dropped.
#[derive(Debug)]
pub(crate) struct EventFeed<S, T> {
    pub(crate) source: S,
    room: RoomWaiter<T>,
    /// Taken from the source and refused by the EVD; posted before anything
    /// else is taken.
    pub(crate) held: Option<T>,
    /// The source failed: nothing more is taken from it.
    failed: bool,
}

impl<S, T: Send> EventFeed<S, T> {
    pub(crate) fn new(source: S, poster: Poster<T>) -> Self {
        EventFeed {
            source,
            room: poster.room_waiter(),
            held: None,
            failed: false,
        }
    }

    /// Deliver up to `budget` events, each taken with `next` (which converts
    /// it to the EVD's type).
    pub(crate) fn progress(
        &mut self,
        budget: usize,
        mut next: impl FnMut(&mut S) -> io::Result<Option<T>>,
    ) -> Progress {
        let mut delivered = 0;
        while delivered < budget {
            let ev = match self.held.take() {
                Some(ev) => ev,
                None if self.failed => return stop(delivered, FeedStatus::Failed),
                None => {
                    // An event is taken out of the source only with room for
                    // it: a post refused as full would run the EVD's draining
                    // upcall with the event in hand, and lose it if that
                    // upcall's handler panicked. That upcall runs first here,
                    // with nothing taken (as a completion feed does).
                    if let Some(status) = self.no_room() {
                        return stop(delivered, status);
                    }
                    match next(&mut self.source) {
                        Ok(Some(ev)) => ev,
                        Ok(None) => return stop(delivered, FeedStatus::Drained),
                        Err(_) => {
                            self.failed = true;
                            return stop(delivered, FeedStatus::Failed);
                        }
                    }
                }
            };
            match self.room.poster().post(ev) {
                Ok(()) => delivered += 1,
                Err(PostError::Full(ev)) => {
                    self.held = Some(ev);
                    return stop(delivered, FeedStatus::Backpressure);
                }
                Err(PostError::Closed(ev)) => {
                    self.held = Some(ev);
                    return stop(delivered, FeedStatus::Closed);
                }
            }
        }
        stop(delivered, FeedStatus::Budget)
    }

    /// `None` if the EVD has a free slot (after running the upcall that
    /// drains a full ring under an idle upcall policy, if there is one);
    /// otherwise why not.
    fn no_room(&mut self) -> Option<FeedStatus> {
        loop {
            match self.room.poster().free_slots() {
                None => return Some(FeedStatus::Closed),
                Some(0) if self.room.poster().start_draining_upcall() => continue,
                Some(0) => return Some(FeedStatus::Backpressure),
                Some(_) => return None,
            }
        }
    }

    /// Wait for room in a full EVD.
    pub(crate) fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.room.poll_room(cx).map(|_| ())
    }
}

fn stop(delivered: usize, status: FeedStatus) -> Progress {
    Progress { delivered, status }
}
