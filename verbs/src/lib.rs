//! # evd-verbs — RDMA completions into an EVD
//!
//! Feeds move work completions from verbs completion queues into an
//! [`evd`] event dispatcher, in three modes:
//!
//! - **busy-poll**: [`Feed::progress`] with a budget, called by the
//!   application or by a dedicated [`Poller`] thread;
//! - **event-driven**: the [`Driver`] waits on the CQs' completion channels
//!   through one io_uring ring, and on readiness gets the events, acks them
//!   in batches, re-arms, then drains until empty ([`FeedMode::Event`]);
//! - **adaptive**: the driver keeps polling while completions keep coming,
//!   then arms and sleeps, with a spin budget that follows the arrival rate
//!   ([`FeedMode::Adaptive`], [`SpinPolicy`]).
//!
//! Every completion becomes a [`VerbsEvent::Completion`] (error completions
//! included); CQ failures and device async events become
//! [`VerbsEvent::Async`]. The EVD's event type is yours: a feed posts
//! `T::from` of each [`VerbsEvent`] into an EVD of any
//! `T: From<VerbsEvent>` (see [Your own event type](#your-own-event-type));
//! [`VerbsEvent`] itself is the ready-made choice. A full EVD stops the feed
//! (backpressure: the completions wait in the CQ); nothing is dropped.
//!
//! Many CQs can share one completion channel (one fd): a [`ChannelFeed`]
//! serves them all as one feed, demultiplexing the channel's events by CQ
//! ([`channel_feed`], [`SharedChannel`]).
//!
//! The CQ is abstracted by [`CompletionQueue`], implemented by the
//! software CQ in [`soft`] (for tests and development without RDMA
//! hardware) and, with the cargo feature `ibverbs`, by real libibverbs CQs
//! in `ibv`.
//!
//! Tearing real verbs objects down can fail; [`teardown`] is how such a
//! failure is reported: returned by an explicit `close`, counted and handed
//! to a hook when it happens in a `Drop`.
//!
//! ```
//! use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
//! let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
//! let (cq, hca) = SoftCq::new(1024).unwrap();
//! let mut driver = Driver::new(DriverConfig::default()).unwrap();
//! driver.register(Feed::new(cq, CqId(0), poster), FeedMode::Event).unwrap();
//! let driver = driver.spawn().unwrap();
//! for i in 0..100 {
//!     hca.push(WorkCompletion { wr_id: i, ..Default::default() }).unwrap();
//! }
//! let mut seen = 0;
//! while seen < 100 {
//!     match consumer.try_dequeue() {
//!         Ok(VerbsEvent::Completion { wc, .. }) => { assert_eq!(wc.wr_id, seen); seen += 1; }
//!         Ok(other) => panic!("unexpected {other:?}"),
//!         Err(_) => { consumer.wait(1, None).unwrap(); }
//!     }
//! }
//! driver.shutdown().unwrap();
//! ```
//!
//! # Your own event type
//!
//! An application usually has events of its own besides the verbs ones.
//! With an enum that wraps [`VerbsEvent`] and a `From<VerbsEvent>` for it,
//! one EVD carries them all, so one loop (one wait, one upcall handler)
//! handles every kind: [`Feed`] and [`AsyncFeed`] convert each event as they
//! post it (no allocation, no extra copy), and the application's threads
//! post their own variants through clones of the same [`evd::Poster`].
//!
//! ```
//! use evd_verbs::soft::{SoftCq, SoftDevice};
//! use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncFeed, CqId, Driver, Feed, FeedMode, VerbsEvent, WorkCompletion};
//!
//! #[derive(Debug)]
//! enum AppEvent {
//!     Verbs(VerbsEvent),
//!     Tick(u64),
//! }
//! impl From<VerbsEvent> for AppEvent {
//!     fn from(ev: VerbsEvent) -> Self {
//!         AppEvent::Verbs(ev)
//!     }
//! }
//!
//! let (poster, mut consumer) = evd::bounded::<AppEvent>(64).unwrap();
//! let mut driver = Driver::new(Default::default()).unwrap();
//! let (cq, hca) = SoftCq::new(128).unwrap();
//! driver.register(Feed::new(cq, CqId(0), poster.clone()), FeedMode::Event).unwrap();
//! let (events, device) = SoftDevice::new().unwrap();
//! driver.register_async(AsyncFeed::new(events, poster.clone())).unwrap();
//! let driver = driver.spawn().unwrap();
//!
//! let app_threads: Vec<_> = (0..2)
//!     .map(|t| {
//!         let poster = poster.clone();
//!         std::thread::spawn(move || {
//!             for i in 0..50 {
//!                 // Waits for room while the EVD is full: nothing is dropped.
//!                 poster.post_blocking(AppEvent::Tick(t * 1000 + i)).unwrap();
//!             }
//!         })
//!     })
//!     .collect();
//! drop(poster);
//! for wr_id in 0..100 {
//!     hca.push(WorkCompletion { wr_id, ..Default::default() }).unwrap();
//! }
//! device.raise(AsyncEvent { kind: AsyncEventKind::PortActive, element: AsyncElement::Port(1) });
//!
//! let (mut completions, mut async_events, mut ticks) = (0, 0, 0);
//! while completions + async_events + ticks < 100 + 1 + 2 * 50 {
//!     match consumer.dequeue().unwrap() {
//!         AppEvent::Verbs(VerbsEvent::Completion { wc, .. }) => {
//!             assert_eq!(wc.wr_id, completions); // in order
//!             completions += 1;
//!         }
//!         AppEvent::Verbs(VerbsEvent::Async(_)) => async_events += 1,
//!         AppEvent::Tick(_) => ticks += 1,
//!     }
//! }
//! for t in app_threads {
//!     t.join().unwrap();
//! }
//! driver.shutdown().unwrap();
//! assert_eq!((completions, async_events, ticks), (100, 1, 100));
//! ```
//!
//! `examples/app_events.rs` is the same as a program.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]
#![warn(unsafe_op_in_unsafe_fn)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "evd-verbs supports Linux only: RDMA verbs, io_uring, eventfd and epoll are Linux interfaces"
);

mod adaptive;
mod async_feed;
pub mod channel_feed;
mod cm_event;
mod cm_feed;
mod completion;
mod cq;
mod driver;
mod event;
mod event_feed;
mod eventfd;
mod feed;
#[cfg(feature = "ibverbs")]
#[cfg_attr(docsrs, doc(cfg(feature = "ibverbs")))]
pub mod ibv;
mod poller;
pub mod soft;
pub mod teardown;

pub use adaptive::{AdaptiveConfig, SpinPolicy, PROBE_EVERY, PROBE_EVERY_MAX};
pub use async_feed::AsyncFeed;
pub use channel_feed::{ChannelEvent, ChannelFeed, ChannelFeedStats, CqKey, SharedChannel};
pub use cm_event::{CmEvent, CmEventKind, CmEventSource, CmToken, PrivateData, PRIVATE_DATA_MAX};
pub use cm_feed::CmFeed;
pub use completion::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use cq::{AsyncEventSource, CompletionQueue, PollError};
pub use driver::{
    Activity, Driver, DriverConfig, DriverError, DriverHandle, DriverStats, FeedId, FeedKey,
    FeedMode, Panic, RunningDriver, Shutdown,
};
pub use event::{AsyncElement, AsyncEvent, AsyncEventKind, CqId, VerbsEvent};
pub use feed::{Feed, FeedStats, FeedStatus, Progress, ACK_BATCH, POLL_BATCH};
pub use poller::{Poller, Stopped};
pub use teardown::{
    clear_teardown_hook, set_teardown_hook, teardown_failures, CloseError, TeardownError,
    VerbsObject,
};

/// CPU time used by the calling thread so far.
///
/// ```
/// let t = evd_verbs::thread_cpu_time();
/// assert!(evd_verbs::thread_cpu_time() >= t);
/// ```
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a live local.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
