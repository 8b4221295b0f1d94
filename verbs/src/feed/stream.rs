//! The engine of the feeds of event streams: sources whose fd is readable
//! while events wait, and that hand out one event at a time, copied out and
//! acknowledged (a device's async events, the connection manager's events).
//! [`AsyncFeed`](crate::AsyncFeed) and [`CmFeed`](crate::CmFeed) are this
//! engine with their source's event type.
//!
//! A read of the source that fails is retried: the call returns `Budget`
//! (call again; the source's events wait in it), and only a second failure
//! within [`FEED_RETRY_WINDOW`] of the last fails the source, as the
//! driver's verbs calls are judged: one `ENOMEM` from `rdma_get_cm_event`
//! in a day does not end a server's connection events. A source the
//! driver gave up is failed by its first error.

#[cfg(doc)]
use crate::feed::FEED_RETRY_WINDOW;
use crate::feed::posting::Posting;
use crate::feed::{FeedStatus, OWED_EVENT_TRIES, Progress, fails_again};
use evd::{BatchPostError, Poster, RoomWaiter};
use std::io;
use std::task::{Context, Poll};
use std::time::Instant;

/// Events from `source` into the EVD of a [`RoomWaiter`]'s poster, in
/// order. An event the EVD refuses (full, or closed) is held, already
/// converted, and offered first next time: nothing is dropped.
#[derive(Debug)]
pub(crate) struct EventFeed<S, T> {
    pub(crate) source: S,
    room: RoomWaiter<T>,
    /// The event in hand, at most one: taken from the source and not yet in
    /// the EVD (refused, or its post cut short by a panic); posted before
    /// anything else is taken. A one-slot `Vec` (allocated once), so that a
    /// post that runs the EVD's draining upcall leaves it here if that
    /// upcall's handler panics ([`evd::Poster::post_batch`] reserves before
    /// it takes the event out).
    held: Vec<T>,
    /// Whether the source still serves, and if not, whether the event that
    /// says so is still owed.
    state: SourceState,
    /// Times the owed event was built (at most [`OWED_EVENT_TRIES`]).
    owed_tries: u8,
    /// An event taken from the source is being converted: still set when
    /// the next call begins, its `From` panicked and the event is lost.
    converting: bool,
    /// Events lost to a panicking `From` (see [`EventFeed::from_panics`]).
    from_panics: u64,
    /// When the source's read last failed (the module docs: a second
    /// failure within the window fails the source).
    last_error: Option<Instant>,
    /// Errors the source's reads returned: each retried one, and the one
    /// that failed it.
    source_errors: u64,
    /// See [`Posting`].
    posting: Posting,
}

/// The life of an [`EventFeed`]'s source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SourceState {
    /// Events are taken from it.
    Live,
    /// Given up (with this errno) by its driver: the events it still has
    /// are taken, then the failure is owed.
    GivenUp(i32),
    /// It failed (this errno): the event that says so is owed, posted
    /// before the feed reports `Failed` (built again if its `From`
    /// panicked, once: [`OWED_EVENT_TRIES`]).
    Owed(i32),
    /// It failed (this errno), and the event that says so was posted (or
    /// is held): nothing more is taken.
    Failed(i32),
}

impl<S, T: Send> EventFeed<S, T> {
    pub(crate) fn new(source: S, poster: Poster<T>) -> Self {
        EventFeed {
            source,
            room: poster.room_waiter(),
            held: Vec::with_capacity(1),
            state: SourceState::Live,
            owed_tries: 0,
            converting: false,
            from_panics: 0,
            last_error: None,
            source_errors: 0,
            posting: Posting::default(),
        }
    }

    /// Deliver up to `budget` events, each taken with `next` and converted
    /// to the EVD's type with `convert` (user code: the type's `From`). Once
    /// the source has failed (`next` returned an error a second time within
    /// the retry window, or the driver gave the feed up and the source had
    /// no more), the event `failed` makes of the errno is posted last, and
    /// the feed reports `Failed` from then on. `clock` is read when `next`
    /// fails, and only then.
    pub(crate) fn progress<E>(
        &mut self,
        budget: usize,
        mut next: impl FnMut(&mut S) -> io::Result<Option<E>>,
        convert: impl Fn(E) -> T,
        failed: impl Fn(i32) -> E,
        mut clock: impl FnMut() -> Instant,
    ) -> Progress {
        let mut delivered = 0;
        if self.converting {
            // The last call's `From` panicked on the event it took.
            self.converting = false;
            self.from_panics += 1;
        }
        self.posting.restart(self.room.poster());
        while delivered < budget {
            if self.held.is_empty() {
                match self.state {
                    SourceState::Failed(_) => return stop(delivered, FeedStatus::Failed),
                    // Its `From` panicked on every try: lost, whether or
                    // not the EVD has room (none is waited for it).
                    SourceState::Owed(errno) if self.owed_tries >= OWED_EVENT_TRIES => {
                        self.from_panics += 1;
                        self.state = SourceState::Failed(errno);
                        continue;
                    }
                    _ => {}
                }
                // An event is taken out of the source (or the failure's
                // made) only with room for it (a full EVD's events stay in
                // the source); a full EVD under an idle upcall policy is
                // drained first, with nothing taken.
                if let Some(status) = self.no_room() {
                    return stop(delivered, status);
                }
                if let SourceState::Owed(errno) = self.state {
                    // Its `From` may panic: still owed then.
                    self.owed_tries += 1;
                    self.held.push(convert(failed(errno)));
                    self.state = SourceState::Failed(errno);
                } else {
                    match next(&mut self.source) {
                        Ok(Some(ev)) => {
                            self.converting = true;
                            let ev = convert(ev);
                            self.converting = false;
                            self.held.push(ev);
                        }
                        Ok(None) => match self.state {
                            SourceState::GivenUp(errno) => {
                                self.state = SourceState::Owed(errno);
                                continue;
                            }
                            _ => return stop(delivered, FeedStatus::Drained),
                        },
                        Err(e) => {
                            // An error of no errno, or of errno 0 (a
                            // source of the caller's own), reads as EIO,
                            // never as 0.
                            let errno = e.raw_os_error().filter(|&e| e > 0).unwrap_or(libc::EIO);
                            self.source_errors += 1;
                            let now = clock();
                            let again = fails_again(self.last_error, now);
                            self.last_error = Some(now);
                            if again || self.state != SourceState::Live {
                                self.state = SourceState::Owed(errno);
                                continue;
                            }
                            crate::trace::event!(
                                WARN,
                                errno,
                                "a stream source's read failed; retried"
                            );
                            return stop(delivered, FeedStatus::Budget);
                        }
                    }
                }
            }
            // Another poster may have taken the room since: a post refused
            // as full runs the draining upcall (user code that may panic)
            // while the event is still in `held`.
            let (room, held) = (&self.room, &mut self.held);
            let posted = self.posting.run(|| room.poster().post_batch(held));
            match posted {
                Ok(_) => delivered += 1,
                Err(BatchPostError::Full) => return stop(delivered, FeedStatus::Backpressure),
                Err(BatchPostError::Closed) => return stop(delivered, FeedStatus::Closed),
            }
        }
        stop(delivered, FeedStatus::Budget)
    }

    /// Its driver gives the feed up (waiting on its fd keeps failing with
    /// `errno`): the events the source still has are delivered, then the
    /// failure.
    pub(crate) fn give_up(&mut self, errno: i32) {
        if self.state == SourceState::Live {
            self.state = SourceState::GivenUp(errno);
        }
    }

    /// Events lost because the event type's `From` panicked on them: an
    /// event taken from the source (a conversion left unfinished), or the
    /// owed failure's event after its last try.
    // Named as `FeedStats::from_panics`: the panics of the type's `From`.
    #[allow(clippy::wrong_self_convention)]
    pub(crate) fn from_panics(&self) -> u64 {
        // The owed event's last try panicked: lost now, though the next
        // call is what moves the state on.
        let owed_lost =
            matches!(self.state, SourceState::Owed(_)) && self.owed_tries >= OWED_EVENT_TRIES;
        self.from_panics + u64::from(self.converting) + u64::from(owed_lost)
    }

    /// Errors the source's reads returned: each retried one, and the one that
    /// failed it.
    pub(crate) fn source_errors(&self) -> u64 {
        self.source_errors
    }

    /// The errno the source failed with (or was given up for), if it did.
    pub(crate) fn failure(&self) -> Option<i32> {
        match self.state {
            SourceState::Live => None,
            SourceState::GivenUp(e) | SourceState::Owed(e) | SourceState::Failed(e) => Some(e),
        }
    }

    /// `None` if the EVD has a free slot (after running the upcall that
    /// drains a full ring under an idle upcall policy, if there is one);
    /// otherwise why not.
    fn no_room(&mut self) -> Option<FeedStatus> {
        loop {
            match self.room.poster().free_slots() {
                None => return Some(FeedStatus::Closed),
                Some(0) if self.start_draining_upcall() => continue,
                Some(0) => return Some(FeedStatus::Backpressure),
                Some(_) => return None,
            }
        }
    }

    /// Run the upcall that drains a full EVD under an idle upcall policy,
    /// marked as a post ([`Posting`]); true if it ran.
    fn start_draining_upcall(&mut self) -> bool {
        let room = &self.room;
        self.posting.run(|| room.poster().start_draining_upcall())
    }

    /// Hand back the source and the event in hand, if any.
    pub(crate) fn into_parts(mut self) -> (S, Option<T>) {
        (self.source, self.held.pop())
    }

    /// Wait for room in a full EVD.
    pub(crate) fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.posting.poll_room(&mut self.room, cx)
    }

    /// Stop waiting for room (see [`Feed::leave_room_queue`](crate::Feed::leave_room_queue)).
    pub(crate) fn leave_room_queue(&mut self) {
        self.room.leave();
    }
}

fn stop(delivered: usize, status: FeedStatus) -> Progress {
    Progress { delivered, status }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::FEED_RETRY_WINDOW;
    use std::collections::VecDeque;
    use std::time::Duration;

    /// A source of scripted reads; `Ok(None)` once the script ends.
    type Script = VecDeque<io::Result<Option<u32>>>;

    fn eio() -> io::Result<Option<u32>> {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }

    /// The failure event `failed` makes of an errno.
    const FAILED: u32 = 1000;

    /// One call with the clock at `at` after `start`.
    fn call(feed: &mut EventFeed<Script, u32>, start: Instant, at: Duration) -> Progress {
        let next = |s: &mut Script| s.pop_front().unwrap_or(Ok(None));
        let failed = |errno: i32| FAILED + errno as u32;
        feed.progress(16, next, |e| e, failed, || start + at)
    }

    fn feed_of(script: Script) -> (EventFeed<Script, u32>, evd::Consumer<u32>) {
        let (poster, consumer) = evd::bounded(8).unwrap();
        (EventFeed::new(script, poster), consumer)
    }

    fn drain(consumer: &mut evd::Consumer<u32>) -> Vec<u32> {
        std::iter::from_fn(|| consumer.try_dequeue().ok()).collect()
    }

    #[test]
    fn a_failed_read_is_retried_and_a_second_within_the_window_fails_the_source() {
        let start = Instant::now();
        let (mut feed, mut consumer) = feed_of([Ok(Some(1)), eio(), eio(), Ok(Some(2))].into());
        let p = call(&mut feed, start, Duration::ZERO);
        assert_eq!((p.delivered, p.status), (1, FeedStatus::Budget));
        assert_eq!((feed.failure(), feed.source_errors()), (None, 1));
        let just_within = FEED_RETRY_WINDOW - Duration::from_nanos(1);
        let p = call(&mut feed, start, just_within);
        assert_eq!((p.delivered, p.status), (1, FeedStatus::Failed));
        assert_eq!((feed.failure(), feed.source_errors()), (Some(libc::EIO), 2));
        let failed = FAILED + libc::EIO as u32;
        assert_eq!(drain(&mut consumer), [1, failed]);
        assert_eq!(
            call(&mut feed, start, just_within).status,
            FeedStatus::Failed
        );
        assert_eq!(feed.source.len(), 1, "nothing read after the failure");
    }

    #[test]
    fn a_failure_a_window_after_the_last_is_retried_again() {
        let start = Instant::now();
        let (mut feed, mut consumer) = feed_of([eio(), Ok(Some(1)), eio(), Ok(Some(2))].into());
        assert_eq!(
            call(&mut feed, start, Duration::ZERO).status,
            FeedStatus::Budget
        );
        let p = call(&mut feed, start, FEED_RETRY_WINDOW);
        assert_eq!((p.delivered, p.status), (1, FeedStatus::Budget));
        let p = call(&mut feed, start, FEED_RETRY_WINDOW);
        assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
        assert_eq!((feed.failure(), feed.source_errors()), (None, 2));
        assert_eq!(drain(&mut consumer), [1, 2]);
    }

    #[test]
    fn a_source_its_driver_gave_up_is_failed_by_its_first_error() {
        let start = Instant::now();
        let (mut feed, mut consumer) = feed_of([Ok(Some(1)), eio()].into());
        feed.give_up(libc::EBADF);
        let p = call(&mut feed, start, Duration::ZERO);
        assert_eq!((p.delivered, p.status), (2, FeedStatus::Failed));
        assert_eq!((feed.failure(), feed.source_errors()), (Some(libc::EIO), 1));
        assert_eq!(drain(&mut consumer), [1, FAILED + libc::EIO as u32]);
    }

    #[test]
    fn the_clock_is_read_only_when_a_read_fails() {
        let (mut feed, _consumer) = feed_of([Ok(Some(1)), Ok(None)].into());
        let next = |s: &mut Script| s.pop_front().unwrap_or(Ok(None));
        let clock = || -> Instant { panic!("the clock was read") };
        let p = feed.progress(16, next, |e| e, |_| FAILED, clock);
        assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
    }
}
