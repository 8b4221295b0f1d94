//! [`Posting`]: the mark a feed keeps while a post of its own runs user
//! code, so that its next call can take up what a panic there left.

use evd::{Poster, RoomWaiter};
use std::task::{Context, Poll};

/// A feed's post (or room check, which may run the upcall that drains a
/// full EVD) is under way. Still marked at the feed's next call, it
/// unwound: the EVD's upcall handler (or a waker) panicked, maybe leaving
/// events queued that no upcall delivers until a post, which a quiet source
/// never makes. That call starts the upcall first ([`Posting::restart`]),
/// as a `Feed` converts first what a panicking `From` left.
#[derive(Debug, Default)]
pub(crate) struct Posting(bool);

impl Posting {
    /// Run `post` (which may run user code) marked.
    #[inline]
    pub(crate) fn run<R>(&mut self, post: impl FnOnce() -> R) -> R {
        self.0 = true;
        let r = post();
        self.0 = false;
        r
    }

    /// If the last post unwound, start the upcall it left (the EVD of
    /// `poster`), marked: should it unwind too, the next call tries again
    /// (each run takes at least the event it panicked on, so the tries end).
    #[inline]
    pub(crate) fn restart<T: Send>(&mut self, poster: &Poster<T>) {
        if self.0 {
            self.run(|| poster.start_draining_upcall());
        }
    }

    /// A feed's wait for room in its EVD: a restart the last call owes
    /// first (the mark is the room check's after this); then the room
    /// check, which may run the draining upcall (user code): as a post.
    pub(crate) fn poll_room<T: Send>(
        &mut self,
        room: &mut RoomWaiter<T>,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        self.restart(room.poster());
        self.run(|| room.poll_room(cx)).map(|_| ())
    }
}
