//! What the driver needs from a feed, whatever its CQ or source type.

use crate::event::CmEvent;
use crate::event::VerbsEvent;
use crate::feed::{AsyncFeed, ChannelFeed, CmFeed};
use crate::feed::{Feed, Progress};
use crate::source::{AsyncEventSource, CmEventSource, CompletionQueue, PollError, SharedChannel};
use std::any::Any;
use std::io;
use std::os::fd::RawFd;
use std::task::{Context, Poll};

/// A feed as the driver runs it (the actions of [`super::cycle::Action`]).
pub(crate) trait Source: Send {
    /// The fd the driver waits on.
    fn fd(&self) -> Option<RawFd>;
    /// Take every channel event waiting (the arm they report is used up).
    fn take_events(&mut self) -> io::Result<()>;
    /// The driver polls the fd while the feed is awake too (draining,
    /// spinning, blocked on a full EVD), not only asleep: a shared channel's
    /// feed learns there which of its quiet CQs have work, and its
    /// `take_events` takes the readiness. False (polled only asleep) for a
    /// feed that would learn nothing new (one CQ's feed is serving its only
    /// CQ already), or whose fd stays readable while its events wait for
    /// room (a stream feed: polled while blocked, it would be reported
    /// again at once, for ever).
    fn watched_awake(&self) -> bool {
        false
    }
    /// Arm unless armed, then drain within `budget`.
    fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress>;
    /// Drain within `budget` without arming.
    fn poll(&mut self, budget: usize) -> Progress;
    /// Wait for room in the EVD.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// Leave the EVD's room queue: the feed is handed back, and whoever
    /// keeps it may never wait for room with it again.
    fn leave_room_queue(&mut self);
    /// A turn failed: its CQs' arms may be used up without the events that
    /// say so got; the next `arm_and_drain` must arm every one again.
    fn forget_arm(&mut self) {}
    /// The driver gives the feed up (its verbs calls keep failing: `e`):
    /// its CQs are armed no more, drained, then each delivers a `CqError`
    /// (a stream feed: its source is drained, then it delivers a
    /// `SourceFailed` event), and the feed reports
    /// [`FeedStatus::Failed`](crate::FeedStatus). False if the feed cannot
    /// say so in its EVD: the driver then stops serving it at once.
    fn give_up(&mut self, _e: PollError) -> bool {
        false
    }
    /// Its EVD is still open (a feed whose consumer is gone is offered no
    /// device's events).
    fn evd_open(&self) -> bool {
        true
    }
    /// The feed itself, to hand back typed.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    /// The feed itself, to change in place typed
    /// ([`Driver::with_feed`](crate::Driver::with_feed)).
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// A feed of the device's async events into this feed's EVD, if nobody
    /// consumes them yet. The feed builds it because only the feed knows its
    /// EVD's event type.
    fn device_feed(&mut self) -> Option<Box<dyn Source>> {
        None
    }
}

impl<C, T> Source for Feed<C, T>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    fn fd(&self) -> Option<RawFd> {
        self.channel_fd()
    }
    fn take_events(&mut self) -> io::Result<()> {
        Feed::take_events(self)
    }
    fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress> {
        Feed::arm_and_drain(self, budget)
    }
    fn poll(&mut self, budget: usize) -> Progress {
        Feed::progress(self, budget)
    }
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        Feed::poll_room(self, cx)
    }
    fn leave_room_queue(&mut self) {
        Feed::leave_room_queue(self)
    }
    fn forget_arm(&mut self) {
        Feed::forget_arm(self)
    }
    fn give_up(&mut self, e: PollError) -> bool {
        Feed::give_up(self, e);
        true
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn evd_open(&self) -> bool {
        !self.poster().is_closed()
    }
    fn device_feed(&mut self) -> Option<Box<dyn Source>> {
        let events = self.cq().device_events()?;
        let feed: AsyncFeed<Box<dyn AsyncEventSource>, T> =
            AsyncFeed::new(events, self.poster().clone());
        Some(Box::new(feed))
    }
}

impl<H, T> Source for ChannelFeed<H, T>
where
    H: SharedChannel + 'static,
    H::Cq: 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    fn fd(&self) -> Option<RawFd> {
        Some(self.channel().fd())
    }
    fn take_events(&mut self) -> io::Result<()> {
        ChannelFeed::take_events(self).map(|_| ())
    }
    fn watched_awake(&self) -> bool {
        true
    }
    fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress> {
        ChannelFeed::arm_and_drain(self, budget)
    }
    fn poll(&mut self, budget: usize) -> Progress {
        ChannelFeed::progress_dirty(self, budget)
    }
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        ChannelFeed::poll_room(self, cx)
    }
    fn leave_room_queue(&mut self) {
        ChannelFeed::leave_room_queue(self)
    }
    fn forget_arm(&mut self) {
        ChannelFeed::forget_arms(self)
    }
    fn give_up(&mut self, e: PollError) -> bool {
        ChannelFeed::give_up(self, e)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn evd_open(&self) -> bool {
        !self.poster().is_closed()
    }
    fn device_feed(&mut self) -> Option<Box<dyn Source>> {
        // The CQs of one channel are on one device.
        let events = self.feeds().next()?.cq().device_events()?;
        let feed: AsyncFeed<Box<dyn AsyncEventSource>, T> =
            AsyncFeed::new(events, self.poster().clone());
        Some(Box::new(feed))
    }
}

impl<S, T> Source for AsyncFeed<S, T>
where
    S: AsyncEventSource + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    fn fd(&self) -> Option<RawFd> {
        Some(self.source().fd())
    }
    fn take_events(&mut self) -> io::Result<()> {
        // The async fd is readable while events wait: nothing to take.
        Ok(())
    }
    fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress> {
        // Nor to arm.
        Ok(AsyncFeed::progress(self, budget))
    }
    fn poll(&mut self, budget: usize) -> Progress {
        AsyncFeed::progress(self, budget)
    }
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        AsyncFeed::poll_room(self, cx)
    }
    fn leave_room_queue(&mut self) {
        AsyncFeed::leave_room_queue(self)
    }
    fn give_up(&mut self, e: PollError) -> bool {
        AsyncFeed::give_up(self, errno_of(e));
        true
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl<S, T> Source for CmFeed<S, T>
where
    S: CmEventSource + 'static,
    T: From<CmEvent> + Send + 'static,
{
    fn fd(&self) -> Option<RawFd> {
        Some(self.source().fd())
    }
    fn take_events(&mut self) -> io::Result<()> {
        // The channel's fd is readable while events wait: nothing to take.
        Ok(())
    }
    fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress> {
        // Nor to arm.
        Ok(CmFeed::progress(self, budget))
    }
    fn poll(&mut self, budget: usize) -> Progress {
        CmFeed::progress(self, budget)
    }
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        CmFeed::poll_room(self, cx)
    }
    fn leave_room_queue(&mut self) {
        CmFeed::leave_room_queue(self)
    }
    fn give_up(&mut self, e: PollError) -> bool {
        CmFeed::give_up(self, errno_of(e));
        true
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The errno a stream feed given up for `e` reports (its
/// [`AsyncFeed::failure`], its `SourceFailed` event's status): never 0.
fn errno_of(e: PollError) -> i32 {
    match e {
        PollError::ChannelFailed(errno)
        | PollError::ArmFailed(errno)
        | PollError::Failed(errno)
            if errno > 0 =>
        {
            errno
        }
        PollError::Overrun => libc::EOVERFLOW,
        _ => libc::EIO,
    }
}
