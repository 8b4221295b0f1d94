//! The control plane: what other threads share with a driver (its command
//! queue and wake fd), the [`DriverHandle`] that uses it, the
//! [`RunningDriver`] on its own thread, and the [`Shutdown`] it ends with.
//!
//! A command is queued under a mutex, a flag is raised and the wake eventfd
//! written; the driver looks at the queue only when the flag is up, so the
//! data path never takes the lock. Calls that wait for the driver's answer
//! (`register`, `remove`) refuse to run on the driver's own thread (from an
//! upcall of an EVD its feeds post into): they would wait for themselves.

use super::error::{DriverError, Panic};
use super::key::{FeedId, FeedKey};
use super::source::Source;
use super::stats::PublishedStats;
use super::{DriverStats, FeedMode};
use crate::event::CmEvent;
use crate::event::VerbsEvent;
use crate::eventfd;
use crate::feed::Feed;
use crate::feed::{AsyncFeed, ChannelFeed, CmFeed};
use crate::source::{AsyncEventSource, CmEventSource, CompletionQueue, SharedChannel};
use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A command for the driver, from a [`DriverHandle`].
pub(crate) enum Command {
    Register {
        source: Box<dyn Source>,
        mode: FeedMode,
        reply: mpsc::Sender<Result<FeedId, DriverError>>,
    },
    Remove {
        id: FeedId,
        reply: mpsc::Sender<Result<Box<dyn Any + Send>, DriverError>>,
    },
}

/// What a driver shares with its handles.
pub(crate) struct Shared {
    commands: Mutex<VecDeque<Command>>,
    /// Raised with every command (and by `stop`), so the driver looks at the
    /// queue only when there is something in it.
    pending: AtomicBool,
    stop: AtomicBool,
    /// Written to wake the driver from its ring wait (commands, stop, and the
    /// EVDs' room signals).
    pub(crate) wake: OwnedFd,
    /// The driver's counters as its thread last published them, and whether
    /// a spawned driver's thread runs.
    pub(crate) stats: PublishedStats,
    /// The first panic a spawned driver caught in a feed's turn that nobody
    /// has taken yet. Locked only when a turn panicked and when it is taken:
    /// never on the data path.
    panic: Mutex<Option<Panic>>,
}

thread_local! {
    /// The driver this thread is running `process` for, if any.
    static DRIVING: Cell<*const Shared> = const { Cell::new(std::ptr::null()) };
}

impl Shared {
    pub(crate) fn new() -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(Shared {
            commands: Mutex::new(VecDeque::new()),
            pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            wake: eventfd::new()?,
            stats: PublishedStats::default(),
            panic: Mutex::new(None),
        }))
    }

    /// Keep `p` unless an earlier panic is still waiting to be taken (the
    /// first one is the likelier cause; every one is counted in
    /// [`DriverStats::handler_panics`]).
    pub(crate) fn keep_panic(&self, p: Panic) {
        let mut kept = self.panic.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_none() {
            *kept = Some(p);
        }
    }

    fn take_panic(&self) -> Option<Panic> {
        self.panic.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub(crate) fn wake(&self) {
        eventfd::signal(&self.wake);
    }

    fn send(&self, c: Command) {
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(c);
        // Release: the command queued above is visible to the driver's
        // Acquire swap in `take_commands` (the mutex orders it too).
        self.pending.store(true, Ordering::Release);
        self.wake();
    }

    /// The commands queued since the last call (none unless flagged).
    pub(crate) fn take_commands(&self) -> Vec<Command> {
        if !self.pending.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        let mut q = self.commands.lock().unwrap_or_else(|e| e.into_inner());
        q.drain(..).collect()
    }

    pub(crate) fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
    }

    /// Mark this thread as running `self`'s driver until the guard drops.
    pub(crate) fn driving(self: &Arc<Self>) -> DrivingGuard {
        let previous = DRIVING.with(|d| d.replace(Arc::as_ptr(self)));
        DrivingGuard { previous }
    }

    fn on_driver_thread(self: &Arc<Self>) -> bool {
        DRIVING.with(|d| d.get() == Arc::as_ptr(self))
    }
}

/// Held by a spawned driver's thread: marks the driver running until the
/// thread ends, however it ends (returning, failing, unwinding).
pub(crate) struct RunningMark(Arc<Shared>);

impl RunningMark {
    /// Mark `shared`'s driver running, before its thread is spawned.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        shared.stats.set_running();
        RunningMark(shared)
    }
}

impl Drop for RunningMark {
    fn drop(&mut self) {
        self.0.stats.set_stopped();
    }
}

/// Restores the thread's previous driver mark (drivers may nest: a driver
/// run from an upcall of another driver's feed).
pub(crate) struct DrivingGuard {
    previous: *const Shared,
}

impl Drop for DrivingGuard {
    fn drop(&mut self) {
        DRIVING.with(|d| d.set(self.previous));
    }
}

/// A handle to a driver, usable from any thread: register and remove feeds.
///
/// ```
/// use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, soft::SoftCq};
/// let (poster, _consumer) = evd::bounded(16).unwrap();
/// let running = Driver::new(DriverConfig::default()).unwrap().spawn().unwrap();
/// let handle = running.handle().clone();
/// let (cq, hca) = SoftCq::new(16).unwrap();
/// let key = handle.register(Feed::new(cq, CqId(1), poster), FeedMode::Event).unwrap();
/// let feed: Feed<SoftCq> = handle.remove(key).unwrap();
/// drop(feed); // acks its CQ events, then destroys the CQ
/// assert_eq!(hca.stats().unacked_at_destroy, Some(0));
/// running.shutdown().unwrap();
/// ```
#[derive(Clone)]
pub struct DriverHandle {
    pub(crate) shared: Arc<Shared>,
}

impl DriverHandle {
    /// Register a completion feed with the running driver.
    ///
    /// As [`Driver::register`](super::Driver::register): the feed may post
    /// into an EVD of the application's event type.
    ///
    /// ```
    /// use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
    /// enum AppEvent { Verbs(VerbsEvent), Tick(u64) }
    /// impl From<VerbsEvent> for AppEvent {
    ///     fn from(ev: VerbsEvent) -> Self { AppEvent::Verbs(ev) }
    /// }
    /// let (poster, _consumer) = evd::bounded::<AppEvent>(16).unwrap();
    /// let running = Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// let key = running.handle().register(Feed::new(SoftCq::new(16).unwrap().0, CqId(0), poster.clone()), FeedMode::Event).unwrap();
    /// poster.post(AppEvent::Tick(0)).unwrap(); // beside the feed's completions
    /// let _feed: Feed<SoftCq, AppEvent> = running.handle().remove(key).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`DriverError::NoChannel`] if the CQ has no completion channel (the
    /// feed is dropped). [`DriverError::OnDriverThread`] on the driver's own
    /// thread (from an upcall of an EVD its feeds post into), where waiting
    /// for the answer would wait for itself; [`DriverError::Stopped`] once
    /// the driver has stopped. In both the feed is dropped.
    pub fn register<C, T>(
        &self,
        feed: Feed<C, T>,
        mode: FeedMode,
    ) -> Result<FeedKey<Feed<C, T>>, DriverError>
    where
        C: CompletionQueue + 'static,
        T: From<VerbsEvent> + Send + 'static,
    {
        self.register_source(Box::new(feed), mode).map(FeedKey::new)
    }

    /// Register the feed of a shared completion channel with the running
    /// driver (see [`Driver::register_channel`](super::Driver::register_channel)).
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, Driver, FeedMode, VerbsEvent, soft::SoftChannel};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// feed.add(channel.create_cq(8).unwrap().0, CqId(0)).unwrap();
    /// let running = Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// let key = running.handle().register_channel(feed, FeedMode::Event).unwrap();
    /// let feed: ChannelFeed<SoftChannel> = running.handle().remove(key).unwrap();
    /// assert_eq!(feed.len(), 1);
    /// ```
    ///
    /// # Errors
    /// [`DriverError::OnDriverThread`] on the driver's own thread,
    /// [`DriverError::Stopped`] once the driver has stopped; the feed is
    /// dropped.
    pub fn register_channel<H, T>(
        &self,
        feed: ChannelFeed<H, T>,
        mode: FeedMode,
    ) -> Result<FeedKey<ChannelFeed<H, T>>, DriverError>
    where
        H: SharedChannel + 'static,
        H::Cq: 'static,
        T: From<VerbsEvent> + Send + 'static,
    {
        self.register_source(Box::new(feed), mode).map(FeedKey::new)
    }

    /// Register an async-event feed with the running driver.
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, Driver, VerbsEvent, soft::SoftDevice};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let running = Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// let (events, _device) = SoftDevice::new().unwrap();
    /// let key = running.handle().register_async(AsyncFeed::new(events, poster)).unwrap();
    /// let _feed = running.handle().remove(key).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`DriverError::OnDriverThread`] on the driver's own thread,
    /// [`DriverError::Stopped`] once the driver has stopped; the feed is
    /// dropped.
    pub fn register_async<S, T>(
        &self,
        feed: AsyncFeed<S, T>,
    ) -> Result<FeedKey<AsyncFeed<S, T>>, DriverError>
    where
        S: AsyncEventSource + 'static,
        T: From<VerbsEvent> + Send + 'static,
    {
        self.register_source(Box::new(feed), FeedMode::Event)
            .map(FeedKey::new)
    }

    /// Register a connection-manager feed (see [`Driver::register_cm`](crate::Driver::register_cm)).
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmFeed, Driver, soft::SoftCm};
    /// let (poster, _consumer) = evd::bounded::<CmEvent>(16).unwrap();
    /// let running = Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// let (events, _cm) = SoftCm::new().unwrap();
    /// let key = running.handle().register_cm(CmFeed::new(events, poster)).unwrap();
    /// let _feed = running.handle().remove(key).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`DriverError::OnDriverThread`] on the driver's own thread,
    /// [`DriverError::Stopped`] once the driver has stopped; the feed is
    /// dropped.
    pub fn register_cm<S, T>(
        &self,
        feed: CmFeed<S, T>,
    ) -> Result<FeedKey<CmFeed<S, T>>, DriverError>
    where
        S: CmEventSource + 'static,
        T: From<CmEvent> + Send + 'static,
    {
        self.register_source(Box::new(feed), FeedMode::Event)
            .map(FeedKey::new)
    }

    /// Whether the driver runs on a thread of its own: spawned
    /// ([`Driver::spawn`](super::Driver::spawn)) and its thread not ended
    /// (shut down, or failed). `false` for a driver run by the caller's own
    /// loop. Once it reads `false`, [`stats`](Self::stats) are final.
    ///
    /// ```
    /// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// let handle = running.handle().clone();
    /// assert!(handle.is_running());
    /// running.shutdown().unwrap();
    /// assert!(!handle.is_running());
    /// ```
    pub fn is_running(&self) -> bool {
        self.shared.stats.is_running()
    }

    /// The driver's counters, live: as the thread running the driver
    /// published them at the end of its last
    /// [`Driver::process`](super::Driver::process) call. Each counter only
    /// grows; two counters may come from different calls. Costs the driver
    /// no lock and no read-modify-write: its thread stores its own counters
    /// (`Relaxed`, as their only writer), the reader loads them.
    ///
    /// ```
    /// let mut driver = evd_verbs::Driver::new(Default::default()).unwrap();
    /// let handle = driver.handle();
    /// driver.process(Some(std::time::Duration::ZERO)).unwrap();
    /// assert_eq!(handle.stats(), driver.stats());
    /// ```
    pub fn stats(&self) -> DriverStats {
        self.shared.stats.load()
    }

    /// The first panic a spawned driver caught in a feed's turn since the
    /// last call (an upcall handler of the feed's EVD, say), if any. The
    /// driver served on; taking the panic here also keeps
    /// [`RunningDriver::shutdown`] from reporting it. Every panic is counted
    /// in [`DriverStats::handler_panics`]; only the first not taken is kept.
    ///
    /// ```
    /// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// assert!(running.handle().take_panic().is_none());
    /// # running.shutdown().unwrap();
    /// ```
    pub fn take_panic(&self) -> Option<Panic> {
        self.shared.take_panic()
    }

    fn register_source(
        &self,
        source: Box<dyn Source>,
        mode: FeedMode,
    ) -> Result<FeedId, DriverError> {
        if self.shared.on_driver_thread() {
            return Err(DriverError::OnDriverThread);
        }
        let (reply, answer) = mpsc::channel();
        self.shared.send(Command::Register {
            source,
            mode,
            reply,
        });
        answer.recv().map_err(|_| DriverError::Stopped)?
    }

    /// Remove a feed from the running driver and hand it back. When this
    /// returns, the driver will never touch the feed again, so no post and
    /// no upcall from it can follow.
    ///
    /// ```
    /// use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let running = Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// let key = running.handle().register(Feed::new(SoftCq::new(16).unwrap().0, CqId(5), poster), FeedMode::Event).unwrap();
    /// let feed: Feed<SoftCq> = running.handle().remove(key).unwrap(); // Feed<SoftCq, VerbsEvent>
    /// assert_eq!(feed.id(), CqId(5));
    /// ```
    ///
    /// # Errors
    /// [`DriverError::NoSuchFeed`] if it was removed already;
    /// [`DriverError::OnDriverThread`] on the driver's own thread, where
    /// waiting for the feed would wait for itself;
    /// [`DriverError::Stopped`] once the driver has stopped (its feeds are in
    /// the [`Shutdown`]).
    pub fn remove<F: 'static>(&self, key: FeedKey<F>) -> Result<F, DriverError> {
        if self.shared.on_driver_thread() {
            return Err(DriverError::OnDriverThread);
        }
        let (reply, answer) = mpsc::channel();
        self.shared.send(Command::Remove {
            id: key.id(),
            reply,
        });
        let feed = answer.recv().map_err(|_| DriverError::Stopped)??;
        Ok(downcast(feed))
    }
}

impl fmt::Debug for DriverHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DriverHandle")
            .field("running", &self.is_running())
            .field("stopping", &self.shared.stop_requested())
            .finish()
    }
}

/// A feed handed back under its key's type. The key was made from the
/// feed's own type when it was registered, so the downcast cannot fail.
pub(crate) fn downcast<F: 'static>(feed: Box<dyn Any + Send>) -> F {
    *feed
        .downcast::<F>()
        .expect("a FeedKey's type is the type of the feed registered under it")
}

/// A driver running on its own thread. Dropping it shuts it down (and drops
/// its feeds, acknowledging their events, on that thread) and joins it.
///
/// # Panics in user code
/// The thread runs user code: the upcall handlers of the EVDs its feeds
/// post into, the event types' `From` and `Drop`, a completion queue's own
/// code. A panic there is caught at the end of the feed's turn, counted
/// ([`DriverStats::handler_panics`]) and kept ([`RunningDriver::take_panic`]);
/// the driver serves on, every feed included, the one whose handler
/// panicked too (see [`Driver::process`](super::Driver::process)). No call
/// on this type panics because of it: [`RunningDriver::shutdown`] reports a
/// panic nobody took as [`DriverError::Panicked`].
///
/// ```
/// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
/// assert!(running.is_running());
/// drop(running); // stops and joins
/// ```
pub struct RunningDriver {
    pub(crate) handle: DriverHandle,
    pub(crate) thread: Option<JoinHandle<Result<Shutdown, DriverError>>>,
}

impl RunningDriver {
    /// A handle to the running driver; clone it for other threads.
    ///
    /// ```
    /// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// let handle = running.handle().clone();
    /// std::thread::spawn(move || assert!(handle.is_running())).join().unwrap();
    /// running.shutdown().unwrap();
    /// ```
    pub fn handle(&self) -> &DriverHandle {
        &self.handle
    }

    /// Whether the driver's thread still runs (it ends on a shutdown, or
    /// when the driver fails). See [`DriverHandle::is_running`].
    ///
    /// ```
    /// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// assert!(running.is_running());
    /// # running.shutdown().unwrap();
    /// ```
    pub fn is_running(&self) -> bool {
        self.handle.is_running()
    }

    /// The driver's counters, live (see [`DriverHandle::stats`]).
    ///
    /// ```
    /// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// assert_eq!(running.stats().handler_panics, 0);
    /// # running.shutdown().unwrap();
    /// ```
    pub fn stats(&self) -> DriverStats {
        self.handle.stats()
    }

    /// The first panic caught in a feed's turn and not taken yet (see
    /// [`DriverHandle::take_panic`]).
    ///
    /// ```
    /// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
    /// assert!(running.take_panic().is_none());
    /// # running.shutdown().unwrap();
    /// ```
    pub fn take_panic(&self) -> Option<Panic> {
        self.handle.take_panic()
    }

    /// Stop the driver, join its thread, and hand back its feeds (each
    /// removed from the ring first).
    ///
    /// ```
    /// use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let key = driver.register(Feed::new(SoftCq::new(16).unwrap().0, CqId(4), poster), FeedMode::Event).unwrap();
    /// let running = driver.spawn().unwrap();
    /// let mut stopped = running.shutdown().unwrap();
    /// assert_eq!(stopped.stats.handler_panics, 0);
    /// let feed: Feed<SoftCq> = stopped.take(key).unwrap();
    /// assert_eq!(feed.id(), CqId(4));
    /// ```
    ///
    /// # Errors
    /// The thread's error if it failed. [`DriverError::Panicked`] with the
    /// payload if user code the thread ran panicked and nobody took that
    /// panic ([`take_panic`](Self::take_panic)): a panic is reported, never
    /// swallowed, and the feeds are then dropped here instead of handed
    /// back (take the panic first to get them). The same if the thread
    /// itself panicked outside a feed's turn. This never panics again.
    /// [`DriverError::OnDriverThread`] when called on the driver's own thread
    /// (from such an upcall), where joining would wait for itself: the
    /// driver is asked to stop, and stops once that upcall returns; its feeds
    /// are dropped on its thread, not handed back.
    ///
    /// # Panics
    /// Never: see Errors.
    pub fn shutdown(mut self) -> Result<Shutdown, DriverError> {
        if self.on_driver_thread() {
            self.handle.shared.request_stop();
            // Detach: the thread ends on its own once this call returns to it.
            drop(self.thread.take());
            return Err(DriverError::OnDriverThread);
        }
        let stopped = self
            .stop_and_join()
            .expect("thread present until shut down")?;
        match self.handle.shared.take_panic() {
            Some(p) => Err(DriverError::Panicked(p)),
            None => Ok(stopped),
        }
    }

    /// True if the caller is the driver's own thread.
    fn on_driver_thread(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|t| t.thread().id() == std::thread::current().id())
    }

    fn stop_and_join(&mut self) -> Option<Result<Shutdown, DriverError>> {
        self.handle.shared.request_stop();
        let t = self.thread.take()?;
        Some(match t.join() {
            Ok(r) => r,
            Err(p) => Err(DriverError::Panicked(Panic::new(p))),
        })
    }
}

impl Drop for RunningDriver {
    fn drop(&mut self) {
        if std::thread::panicking() || self.on_driver_thread() {
            // Unwinding, or on the driver's own thread (joining would wait
            // for itself): ask it to stop and let it end on its own.
            self.handle.shared.request_stop();
        } else {
            drop(self.stop_and_join());
        }
    }
}

impl fmt::Debug for RunningDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunningDriver")
            .field("running", &self.is_running())
            .finish()
    }
}

/// A shut-down driver's feeds and the CPU time its thread used. Take each
/// feed back typed with [`Shutdown::take`]; dropping the `Shutdown` drops the
/// rest (acknowledging their CQ events, then destroying their CQs).
///
/// ```
/// use evd_verbs::{Driver, Feed, FeedMode, CqId, soft::SoftCq};
/// let (poster, _consumer) = evd::bounded(4).unwrap();
/// let mut driver = Driver::new(Default::default()).unwrap();
/// let key = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(2), poster), FeedMode::Event).unwrap();
/// let mut s = driver.spawn().unwrap().shutdown().unwrap();
/// assert_eq!(s.len(), 1);
/// let feed: Feed<SoftCq> = s.take(key).unwrap();
/// assert_eq!(feed.id(), CqId(2));
/// assert!(s.is_empty());
/// ```
pub struct Shutdown {
    pub(crate) feeds: Vec<(FeedId, Box<dyn Any + Send>)>,
    /// CPU time of the driver thread.
    pub cpu_time: Duration,
    /// The driver's counters at the end.
    pub stats: DriverStats,
}

impl Shutdown {
    /// The feed registered under `key`, if it was still registered at the
    /// shutdown (and not taken yet).
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, Driver, VerbsEvent, soft::{SoftAsyncEvents, SoftDevice}};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let key = driver.register_async(AsyncFeed::new(SoftDevice::new().unwrap().0, poster)).unwrap();
    /// let mut stopped = driver.spawn().unwrap().shutdown().unwrap();
    /// let _feed: AsyncFeed<SoftAsyncEvents> = stopped.take(key).unwrap();
    /// assert!(stopped.take(key).is_none()); // taken
    /// ```
    pub fn take<F: 'static>(&mut self, key: FeedKey<F>) -> Option<F> {
        let i = self.feeds.iter().position(|(id, _)| *id == key.id())?;
        Some(downcast(self.feeds.swap_remove(i).1))
    }

    /// Feeds not taken yet.
    ///
    /// ```
    /// use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// for i in 0..3 {
    ///     driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(i), poster.clone()), FeedMode::Event).unwrap();
    /// }
    /// assert_eq!(driver.spawn().unwrap().shutdown().unwrap().len(), 3);
    /// ```
    pub fn len(&self) -> usize {
        self.feeds.len()
    }

    /// Every feed was taken (or none was registered).
    ///
    /// ```
    /// use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let key = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster), FeedMode::Event).unwrap();
    /// let mut stopped = driver.spawn().unwrap().shutdown().unwrap();
    /// assert!(!stopped.is_empty());
    /// let _feed: Feed<SoftCq> = stopped.take(key).unwrap();
    /// assert!(stopped.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.feeds.is_empty()
    }

    /// The names of the feeds not taken yet.
    ///
    /// ```
    /// use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let a = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster.clone()), FeedMode::Event).unwrap();
    /// let b = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(1), poster), FeedMode::Event).unwrap();
    /// let mut stopped = driver.spawn().unwrap().shutdown().unwrap();
    /// let _feed: Feed<SoftCq> = stopped.take(a).unwrap();
    /// assert_eq!(stopped.ids().collect::<Vec<_>>(), [b.id()]);
    /// ```
    pub fn ids(&self) -> impl Iterator<Item = FeedId> + '_ {
        self.feeds.iter().map(|(id, _)| *id)
    }
}

impl fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shutdown")
            .field(
                "feeds",
                &self.feeds.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            )
            .field("cpu_time", &self.cpu_time)
            .field("stats", &self.stats)
            .finish()
    }
}
