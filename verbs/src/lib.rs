//! # evd-verbs — RDMA completions into an EVD
//!
//! Feeds move work completions from verbs completion queues into an
//! [`evd`] event dispatcher, in three modes:
//!
//! - **busy-poll**: [`Feed::progress`] with a budget, called by the
//!   application or by a dedicated [`Poller`] thread;
//! - **event-driven**: the [`Driver`] waits on the CQs' completion channels
//!   through one io_uring ring, and on readiness gets the events, acks them
//!   in batches, re-arms, then drains until empty ([`FeedMode::Event`]).
//!   Where io_uring is refused (Docker's default seccomp profile, gVisor,
//!   `kernel.io_uring_disabled`) the driver waits through epoll instead,
//!   same API, same cycle ([`DriverBackend`]; `EVD_DRIVER_BACKEND=epoll`
//!   forces it);
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
//! The runners survive the user code they run: a panic of an upcall
//! handler (a feed's post runs it), of an event type's `From` or `Drop`, is
//! caught around that feed's turn, counted and reported, and the [`Driver`]
//! or [`Poller`] serves on, every feed included ([`Driver::process`],
//! [`RunningDriver`]); a running driver answers
//! [`is_running`](RunningDriver::is_running) and live
//! [`stats`](RunningDriver::stats).
//!
//! Many CQs can share one completion channel (one fd): a [`ChannelFeed`]
//! serves them all as one feed, demultiplexing the channel's events by CQ
//! ([`channel_feed`], [`SharedChannel`]); CQs join it and leave it while a
//! driver serves it ([`DriverHandle::with_feed`], [`ChannelFeed::remove`]).
//!
//! The CQ is abstracted by [`CompletionQueue`], implemented by the
//! software CQ in [`soft`] (for tests and development without RDMA
//! hardware) and, with the cargo feature `ibverbs`, by real libibverbs CQs
//! in `ibv`; the other sources likewise (see the [module map](#module-map)).
//!
//! Tearing real verbs objects down can fail; [`teardown`] is how such a
//! failure is reported: returned by an explicit `close`, counted and handed
//! to a hook when it happens in a `Drop`.
//!
//! With the cargo feature `tracing` (which turns on evd's), the control
//! plane emits [`tracing`](https://docs.rs/tracing) events, never on the
//! per-completion path: driver created (DEBUG, with its backend), io_uring
//! refused and epoll chosen (INFO), driver thread started and stopped
//! (INFO; ERROR if it failed), feed registered and removed (DEBUG), a CQ
//! failed (its poll failed, or it was given up) or a channel member's arm
//! failed (WARN), a channel event for a CQ the channel feed does not serve
//! (WARN, at the first, second, fourth... of them), an async device event (WARN if
//! [`AsyncEventKind::is_error`], else INFO; a CQ overrun is one, a
//! `CqError`), a caught panic in a feed's turn (ERROR), a destroy failed
//! in `Drop` (WARN). Targets are the modules' paths (`evd_verbs::driver::...`).
//! `examples/metrics_export.rs` exports [`evd::Query`], [`DriverStats`] and
//! [`FeedStats`] periodically as plain counters.
//!
//! ```
//! use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
//! let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
//! let (cq, hca) = SoftCq::new(1024).unwrap();
//! let mut driver = Driver::new(DriverConfig::default()).unwrap();
//! driver.register(Feed::new(cq, CqId(0), poster), FeedMode::Event).unwrap();
//! let driver = driver.spawn().unwrap();
//! for i in 0..100 {
//!     hca.push(WorkCompletion::new(i)).unwrap();
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
//! # Module map
//!
//! The crate reads in the order data flows: what lands in the EVD, what it
//! is read from, who reads it, who runs the readers.
//!
//! | Module | Role | Holds |
//! |---|---|---|
//! | `event` | the events that land in an EVD | [`VerbsEvent`], [`CqId`], [`WorkCompletion`] and its status, opcode and flags, [`AsyncEvent`], [`CmEvent`] |
//! | `source` | the source contracts, one place | [`CompletionQueue`], [`SharedChannel`], [`AsyncEventSource`], [`CmEventSource`] |
//! | [`soft`] | the software providers, one per file | [`SoftCq`](soft::SoftCq), [`SoftChannel`](soft::SoftChannel), [`SoftDevice`](soft::SoftDevice), [`SoftCm`](soft::SoftCm) |
//! | `ibv` (feature `ibverbs`) | the real-verbs providers, one per file, and their [`teardown`] reporting | `Context`, `IbvCq`, `CompletionChannel`, `QueuePair`, `CmChannel`, ... |
//! | `feed` | the feeds: a source into an EVD, within a budget, with backpressure | [`Feed`], [`ChannelFeed`] ([`channel_feed`]), [`AsyncFeed`], [`CmFeed`] |
//! | `driver` | the io_uring (or epoll) runner and its adaptive spin policy | [`Driver`], [`SpinPolicy`], [`RunningDriver`], [`DriverHandle`] |
//! | `poller` | the busy-poll runner's thread | [`Poller`] |
//!
//! Each layer uses only those above it in the table (a provider knows the
//! contracts, not the feeds; a feed knows the contracts, not the
//! providers; the runners know the feeds), except that `ibv` reads
//! [`POLL_BATCH`] to size its poll buffer; unit tests use the software
//! providers wherever they are. Two helpers serve every layer: `eventfd`
//! (the software channels' and the driver's wake-ups) and `cpu_time`
//! (the thread CPU time the runners' threads report). No file of the crate
//! imports from one that imports from it (`scripts/module-circles
//! verbs/src` checks it in CI).
//!
//! Where a change goes:
//! - **a new event kind**: a module in `event`, and a variant of
//!   [`VerbsEvent`] if it shares the completions' EVD;
//! - **a new kind of source**: its contract in `source`, its feed in
//!   `feed` (an event stream reuses `feed::stream`), and its arm of the
//!   driver's `Source` trait in `driver/source.rs`;
//! - **a new provider** of an existing contract: one file in [`soft`]
//!   (software) or in `ibv` (real verbs), implementing the `source` trait;
//! - **the adaptive mode's spin policy**: `driver/adaptive/`; the
//!   per-feed cycle (arm, drain, spin, sleep): `driver/cycle.rs`, a pure
//!   transition table tested whole.
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
//!     hca.push(WorkCompletion::new(wr_id)).unwrap();
//! }
//! device.raise(AsyncEvent::new(AsyncEventKind::PortActive, AsyncElement::Port(1)));
//!
//! let (mut completions, mut async_events, mut ticks) = (0, 0, 0);
//! while completions + async_events + ticks < 100 + 1 + 2 * 50 {
//!     match consumer.dequeue().unwrap() {
//!         AppEvent::Verbs(VerbsEvent::Completion { wc, .. }) => {
//!             assert_eq!(wc.wr_id, completions); // in order
//!             completions += 1;
//!         }
//!         AppEvent::Verbs(VerbsEvent::Async(_)) => async_events += 1,
//!         AppEvent::Verbs(other) => panic!("unexpected {other:?}"), // VerbsEvent may grow
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

mod cpu_time;
mod driver;
mod event;
mod eventfd;
mod feed;
mod poller;
pub mod soft;
mod source;
mod trace;

#[cfg(feature = "ibverbs")]
#[cfg_attr(docsrs, doc(cfg(feature = "ibverbs")))]
pub mod ibv;
/// Without the feature `ibverbs`, `ibv` holds only its teardown reporting,
/// public as [`teardown`].
#[cfg(not(feature = "ibverbs"))]
mod ibv {
    pub mod teardown;
}

pub use feed::channel as channel_feed;
#[doc(inline)]
pub use ibv::teardown;

pub use driver::{
    Activity, AdaptiveConfig, Driver, DriverBackend, DriverConfig, DriverError, DriverHandle,
    DriverStats, FeedId, FeedKey, FeedMode, PROBE_EVERY, PROBE_EVERY_MAX, Panic, RunningDriver,
    Shutdown, SpinPolicy,
};
pub use event::{
    AsyncElement, AsyncEvent, AsyncEventKind, CmEvent, CmEventKind, CmToken, CqId,
    PRIVATE_DATA_MAX, PrivateData, VerbsEvent, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
pub use feed::{
    ACK_BATCH, AsyncFeed, ChannelFeed, ChannelFeedStats, CmFeed, FEED_RETRY_WINDOW, Feed,
    FeedStats, FeedStatus, POLL_BATCH, Progress,
};
pub use poller::{Poller, Stopped};
pub use source::{
    AsyncEventSource, ChannelEvent, CmEventSource, CompletionQueue, CqKey, PollError, SharedChannel,
};
pub use teardown::{
    CloseError, TeardownError, TeardownHook, VerbsObject, clear_teardown_hook, set_teardown_hook,
    teardown_failures,
};
