//! The state a software CQ shares between its consumer handle
//! ([`SoftCq`](super::SoftCq)), its producers
//! ([`SoftCqProducer`](super::SoftCqProducer)) and the
//! [`SoftChannel`](super::SoftChannel) it may raise its events on: the ring
//! and its counters under one lock, the injected faults, and where its
//! channel events go. Each of those types only holds an `Arc` of [`Inner`].

use super::device::{CqSerial, SoftDevice};
use crate::event::{AsyncElement, AsyncEvent, AsyncEventKind, CqId, WcStatus, WorkCompletion};
use crate::eventfd;
use crate::source::PollError;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Why a software completion could not be added.
///
/// ```
/// use evd_verbs::{WorkCompletion, soft::{SoftCq, PushError}};
/// let (cq, hca) = SoftCq::new(1).unwrap();
/// drop(cq);
/// assert_eq!(hca.push(WorkCompletion::default()), Err(PushError::Destroyed));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PushError {
    /// The CQ was full: this completion is lost (and reported as a
    /// `CqError` on the CQ's [`SoftDevice`], if it has one). As on rxe, the
    /// CQ goes on: what it holds is still polled, and a completion that fits
    /// later is added.
    Overrun,
    /// The CQ broke earlier: a poll failed
    /// ([`SoftCqProducer::fail_next_poll`](super::SoftCqProducer::fail_next_poll)).
    Broken,
    /// The CQ was destroyed.
    Destroyed,
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PushError::Overrun => "software CQ overran",
            PushError::Broken => "software CQ is broken",
            PushError::Destroyed => "software CQ was destroyed",
        })
    }
}

impl std::error::Error for PushError {}

pub(super) struct State {
    pub(super) ring: VecDeque<WorkCompletion>,
    pub(super) capacity: usize,
    /// `Some(solicited_only)` while armed.
    pub(super) armed: Option<bool>,
    /// An arm fired and no event has been got since: a sequenced arm
    /// ([`Faults::sequenced_arms`]) would repeat the fired arm's number.
    pub(super) fired_unread: bool,
    /// Arms ignored for repeating a fired arm's sequence number.
    pub(super) ignored_arms: u64,
    /// Channel events raised and not yet got.
    pub(super) channel_events: u64,
    pub(super) events_got: u64,
    pub(super) events_acked: u64,
    pub(super) broken: Option<PollError>,
    pub(super) destroyed: bool,
    pub(super) unacked_at_destroy: Option<u64>,
    pub(super) pushed: u64,
    pub(super) polled: u64,
    pub(super) notifications: u64,
    pub(super) spurious: u64,
    pub(super) overruns: u64,
    pub(super) req_notifies: u64,
    /// Completions to add inside the next `req_notify`, before it arms.
    pub(super) window_injections: Vec<WorkCompletion>,
    /// Run (outside the lock) by the next poll, after it took its completions.
    pub(super) during_next_poll: Option<Box<dyn FnOnce() + Send>>,
}

#[derive(Default)]
pub(super) struct Faults {
    pub(super) spurious_every: AtomicU32,
    pub(super) rearm_window_yields: AtomicU32,
    pub(super) error_every: AtomicU32,
    pub(super) error_counter: AtomicU64,
    pub(super) fail_next_poll: AtomicI32,
    pub(super) fail_next_arm: AtomicI32,
    /// Arms carry a sequence number only getting an event advances.
    pub(super) sequenced_arms: std::sync::atomic::AtomicBool,
}

/// Lock attempts a contended CQ spins through before it sleeps.
const SPINS_BEFORE_SLEEPING: u32 = 1000;

/// Where a software CQ's channel events go.
pub(super) enum Channel {
    /// Its own eventfd (one channel per CQ).
    Own(OwnedFd),
    /// A [`SoftChannel`](super::SoftChannel) shared with other CQs.
    Shared(Arc<ChannelInner>),
}

/// The shared part of a [`SoftChannel`](super::SoftChannel): one eventfd, and the queue of the
/// events raised and not yet got, each naming its CQ.
pub(super) struct ChannelInner {
    /// Events in the order they were raised.
    pub(super) queue: Mutex<VecDeque<Weak<Inner>>>,
    /// Readable while the queue is not empty.
    pub(super) fd: OwnedFd,
    /// Every CQ made on the channel, to find one by its key.
    pub(super) cqs: Mutex<Vec<Weak<Inner>>>,
    pub(super) raised: AtomicU64,
    pub(super) got: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) acked_unknown: AtomicU64,
}

impl ChannelInner {
    pub(super) fn queue(&self, cq: Weak<Inner>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(cq);
        // Relaxed: a counter for tests, read after the fact.
        self.raised.fetch_add(1, Ordering::Relaxed);
        // Every event writes the fd, as for a CQ's own channel.
        eventfd::signal(&self.fd);
    }

    pub(super) fn pop(&self) -> Option<Weak<Inner>> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let cq = q.pop_front();
        if q.is_empty() {
            eventfd::clear(&self.fd);
        }
        cq
    }
}

pub(super) struct Inner {
    pub(super) id: CqId,
    /// What names it to its device.
    pub(super) serial: CqSerial,
    /// This CQ itself, named in the events it queues on a shared channel.
    pub(super) me: Weak<Inner>,
    pub(super) state: Mutex<State>,
    pub(super) channel: Channel,
    pub(super) faults: Faults,
    pub(super) device: Option<SoftDevice>,
}

impl Inner {
    /// What `Debug` shows of either handle: no lock is taken (the state
    /// is in [`SoftCqProducer::stats`](super::SoftCqProducer::stats)).
    pub(super) fn debug(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("id", &self.id)
            .field(
                "channel_fd",
                &match &self.channel {
                    Channel::Own(fd) => fd.as_raw_fd(),
                    Channel::Shared(ch) => ch.fd.as_raw_fd(),
                },
            )
            .field(
                "shared_channel",
                &matches!(self.channel, Channel::Shared(_)),
            )
            .field("on_device", &self.device.is_some())
            .finish_non_exhaustive()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // Spin briefly before sleeping, as rxe's and siw's spinlocks do: the
        // critical sections are a few hundred nanoseconds, and a poller that
        // slept in the futex on every collision with a producer would measure
        // the scheduler, not the feed.
        for _ in 0..SPINS_BEFORE_SLEEPING {
            match self.state.try_lock() {
                Ok(g) => return g,
                // A panicking test thread must not hide the CQ's state from
                // the rest of the test: the state is consistent at every
                // unlock.
                Err(std::sync::TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => std::hint::spin_loop(),
            }
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Raise one channel event. Every event writes the eventfd (as the
    /// kernel wakes the channel's pollers on every event), so an edge-style
    /// waiter such as a multishot poll sees each one.
    pub(super) fn raise_event(&self, st: &mut State) {
        st.channel_events += 1;
        match &self.channel {
            Channel::Own(fd) => eventfd::signal(fd),
            // Lock order: this CQ's state (held by the caller), then the
            // channel's queue; the channel never takes a CQ's lock while
            // holding its own.
            Channel::Shared(ch) => ch.queue(self.me.clone()),
        }
    }

    pub(super) fn add(
        &self,
        st: &mut State,
        mut wc: WorkCompletion,
        solicited: bool,
    ) -> Result<(), PushError> {
        if st.destroyed {
            return Err(PushError::Destroyed);
        }
        if st.broken.is_some() {
            return Err(PushError::Broken);
        }
        // `>=`: a poll whose `during_next_poll` closure panicked put back
        // what it took, ahead of what that closure added meanwhile, and may
        // leave the CQ over its capacity until polls bring it back.
        if st.ring.len() >= st.capacity {
            // As rxe (`rxe_cq_post`): only this completion is lost. The CQ
            // is not broken (what is queued is still polled, and a later
            // completion that fits is added), its channel is not woken and
            // an arm stays pending; the device raises one `CqError` per
            // completion lost.
            st.overruns += 1;
            if let Some(dev) = &self.device {
                dev.raise_for(
                    self.serial,
                    AsyncEvent::new(AsyncEventKind::CqError, AsyncElement::Cq(self.id)),
                );
            }
            return Err(PushError::Overrun);
        }
        // Counted among the completions added only: a lost one is not.
        let every = self.faults.error_every.load(Ordering::Relaxed);
        if every != 0
            && self.faults.error_counter.fetch_add(1, Ordering::Relaxed) % every as u64
                == every as u64 - 1
        {
            wc.status = WcStatus::WR_FLUSH_ERR;
        }
        st.pushed += 1;
        let fires = match st.armed {
            Some(solicited_only) => !solicited_only || solicited || !wc.status.is_success(),
            None => false,
        };
        st.ring.push_back(wc);
        if fires {
            st.armed = None;
            st.fired_unread = true;
            st.notifications += 1;
            self.raise_event(st);
        }
        Ok(())
    }
}
