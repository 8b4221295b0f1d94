//! The control plane: what other threads share with a driver (its command
//! queue and wake fd) and the [`DriverHandle`] that uses it; the driver on
//! its own thread is in `running.rs`.
//!
//! A command is queued under a mutex, a flag is raised and the wake eventfd
//! written; the driver looks at the queue only when the flag is up, so the
//! data path never takes the lock. Calls that wait for the driver's answer
//! (`register`, `remove`) refuse to run on the driver's own thread (from an
//! upcall of an EVD its feeds post into): they would wait for themselves.

use super::error::{Caught, DriverError, KeptPanic, Panic};
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
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

/// A [`DriverHandle::with_feed`] call as the driver's thread runs it
/// (`driver/with_feed.rs`): given the feed (or why there is none), it
/// answers the caller; true if the caller's closure panicked (counted as
/// user code the driver ran).
pub(crate) type FeedCall = Box<dyn FnOnce(Result<&mut dyn Any, DriverError>) -> bool + Send>;

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
    /// Run a caller's closure on a feed ([`DriverHandle::with_feed`]).
    WithFeed { id: FeedId, call: FeedCall },
}

/// Answer every command `Stopped`, even if dropping a refused feed (its own
/// code: acks, its CQ's destroy) panics; the panics are returned for the
/// caller to count and report.
pub(crate) fn refuse_all(commands: impl IntoIterator<Item = Command>) -> Caught {
    let mut caught = Caught::default();
    for c in commands {
        caught.run(|| c.refuse());
    }
    caught
}

impl Command {
    /// Answer `Stopped` (a feed to register is dropped with the command).
    fn refuse(self) {
        match self {
            Command::Register { reply, .. } => {
                let _ = reply.send(Err(DriverError::Stopped));
            }
            Command::Remove { reply, .. } => {
                let _ = reply.send(Err(DriverError::Stopped));
            }
            Command::WithFeed { call, .. } => {
                call(Err(DriverError::Stopped));
            }
        }
    }
}

/// The commands queued for the driver, and whether it is gone (a command
/// sent then is refused at once: nobody would ever answer it).
#[derive(Default)]
struct Queue {
    commands: VecDeque<Command>,
    closed: bool,
}

/// What a driver shares with its handles.
pub(crate) struct Shared {
    commands: Mutex<Queue>,
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
    /// has taken yet.
    panic: KeptPanic,
    /// The mark of the thread inside this driver's `process` (0: none).
    /// Each driver keeps its own, so a call on a driver's handle from
    /// anywhere inside that driver's turn is seen, however many drivers
    /// the turn's upcalls run in turn on the same thread. Relaxed: only a
    /// thread's own stores can hold its mark, and it reads them in program
    /// order; another thread may read a stale mark, never its own (a mark
    /// is cleared before its thread ends).
    driven_by: AtomicUsize,
    /// The driver's serial number, which its keys carry.
    pub(crate) serial: u64,
}

thread_local! {
    /// This thread's mark: its address names the thread while it lives.
    static THREAD_MARK: u8 = const { 0 };
}

/// The calling thread's mark (never 0).
fn this_thread() -> usize {
    THREAD_MARK.with(|m| std::ptr::from_ref(m) as usize)
}

impl Shared {
    pub(crate) fn new() -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(Shared {
            commands: Mutex::new(Queue::default()),
            pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            wake: eventfd::new()?,
            stats: PublishedStats::default(),
            panic: KeptPanic::default(),
            driven_by: AtomicUsize::new(0),
            serial: super::key::driver_serial(),
        }))
    }

    /// Keep `p` unless an earlier panic is still waiting to be taken (the
    /// first one is the likelier cause; every one is counted in
    /// [`DriverStats::handler_panics`]).
    pub(crate) fn keep_panic(&self, p: Panic) {
        self.panic.keep(p);
    }

    pub(super) fn take_panic(&self) -> Option<Panic> {
        self.panic.take()
    }

    pub(crate) fn wake(&self) {
        eventfd::signal(&self.wake);
    }

    pub(super) fn send(&self, c: Command) {
        let mut q = self.commands.lock().unwrap_or_else(|e| e.into_inner());
        if q.closed {
            drop(q);
            // The driver is gone: answer here (the feed is dropped here).
            return c.refuse();
        }
        q.commands.push_back(c);
        drop(q);
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
        q.commands.drain(..).collect()
    }

    /// The driver is gone (dropped, its thread ended however it ended):
    /// refuse what is queued and, from now on, every command at once.
    /// Dropping a refused feed runs its own code (its CQ's destroy): every
    /// command is refused even if such drops panic, and their panics are
    /// returned for the caller to count and report.
    pub(crate) fn close_commands(&self) -> Caught {
        let queued = {
            let mut q = self.commands.lock().unwrap_or_else(|e| e.into_inner());
            q.closed = true;
            std::mem::take(&mut q.commands)
        };
        // Outside the lock.
        refuse_all(queued)
    }

    /// Commands queued that no turn has taken yet (for `Debug`).
    fn queued_commands(&self) -> usize {
        let q = self.commands.lock().unwrap_or_else(|e| e.into_inner());
        q.commands.len()
    }

    /// Commands are queued that no turn has taken yet. The wake a command
    /// writes may have been cleared by the turn that was applying the
    /// commands before it (its reap clears the wake fd), so a step that ends
    /// with this set must not wait on the fd, nor tell its caller to.
    pub(super) fn commands_pending(&self) -> bool {
        // Acquire, as `take_commands`' swap; the command's own wake was
        // written after its Release store, and the clear that swallowed it
        // read it before this load.
        self.pending.load(Ordering::Acquire)
    }

    pub(crate) fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub(super) fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
    }

    /// Mark this thread as running `self`'s driver until the guard drops.
    pub(crate) fn driving(&self) -> DrivingGuard<'_> {
        let previous = self.driven_by.load(Ordering::Relaxed);
        self.driven_by.store(this_thread(), Ordering::Relaxed);
        DrivingGuard {
            shared: self,
            previous,
        }
    }

    pub(super) fn on_driver_thread(&self) -> bool {
        self.driven_by.load(Ordering::Relaxed) == this_thread()
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

/// Restores the driver's previous mark (none, unless a `process` of the
/// driver runs inside its own turn, which `&mut` forbids).
pub(crate) struct DrivingGuard<'a> {
    shared: &'a Shared,
    previous: usize,
}

impl Drop for DrivingGuard<'_> {
    fn drop(&mut self) {
        self.shared
            .driven_by
            .store(self.previous, Ordering::Relaxed);
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
    /// [`DriverError::NoChannel`] if the CQ has no completion channel,
    /// [`DriverError::FdInUse`] if another feed of the driver waits on its
    /// fd (the feed is dropped). [`DriverError::OnDriverThread`] on the driver's own
    /// thread (from an upcall of an EVD its feeds post into), where waiting
    /// for the answer would wait for itself; [`DriverError::Stopped`] once
    /// the driver has stopped (or is stopping); [`DriverError::Panicked`] if
    /// the feed's own code (its CQ's `channel_fd` or `device_events`)
    /// panicked while the driver registered it, which the driver counts in
    /// [`DriverStats::handler_panics`](crate::DriverStats::handler_panics)
    /// and serves on. In each the feed is dropped.
    pub fn register<C, T>(
        &self,
        feed: Feed<C, T>,
        mode: FeedMode,
    ) -> Result<FeedKey<Feed<C, T>>, DriverError>
    where
        C: CompletionQueue + 'static,
        T: From<VerbsEvent> + Send + 'static,
    {
        self.register_source(Box::new(feed), mode)
            .map(|id| FeedKey::new(id, self.shared.serial))
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
    /// [`DriverError::FdInUse`] if another feed of the driver waits on its
    /// fd (the feed is dropped); [`DriverError::OnDriverThread`] on the
    /// driver's own thread, [`DriverError::Stopped`] once the driver has
    /// stopped (or is stopping), [`DriverError::Panicked`] if the feed's own code panicked
    /// while the driver registered it (see [`DriverHandle::register`]); the
    /// feed is dropped.
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
        self.register_source(Box::new(feed), mode)
            .map(|id| FeedKey::new(id, self.shared.serial))
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
    /// [`DriverError::FdInUse`] if another feed of the driver waits on its
    /// fd (the feed is dropped); [`DriverError::OnDriverThread`] on the
    /// driver's own thread, [`DriverError::Stopped`] once the driver has
    /// stopped (or is stopping), [`DriverError::Panicked`] if the feed's own code panicked
    /// while the driver registered it (see [`DriverHandle::register`]); the
    /// feed is dropped.
    pub fn register_async<S, T>(
        &self,
        feed: AsyncFeed<S, T>,
    ) -> Result<FeedKey<AsyncFeed<S, T>>, DriverError>
    where
        S: AsyncEventSource + 'static,
        T: From<VerbsEvent> + Send + 'static,
    {
        self.register_source(Box::new(feed), FeedMode::Event)
            .map(|id| FeedKey::new(id, self.shared.serial))
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
    /// [`DriverError::FdInUse`] if another feed of the driver waits on its
    /// fd (the feed is dropped); [`DriverError::OnDriverThread`] on the
    /// driver's own thread, [`DriverError::Stopped`] once the driver has
    /// stopped (or is stopping), [`DriverError::Panicked`] if the feed's own code panicked
    /// while the driver registered it (see [`DriverHandle::register`]); the
    /// feed is dropped.
    pub fn register_cm<S, T>(
        &self,
        feed: CmFeed<S, T>,
    ) -> Result<FeedKey<CmFeed<S, T>>, DriverError>
    where
        S: CmEventSource + 'static,
        T: From<CmEvent> + Send + 'static,
    {
        self.register_source(Box::new(feed), FeedMode::Event)
            .map(|id| FeedKey::new(id, self.shared.serial))
    }

    /// Whether the driver runs on a thread of its own: spawned
    /// ([`Driver::spawn`](super::Driver::spawn)) and its thread not ended
    /// (shut down, or its ring failed). `false` for a driver run by the caller's own
    /// loop. Once it reads `false` after the driver was spawned, its
    /// [`stats`](Self::stats) are final (a driver run from the caller's
    /// loop counts on while this reads `false`).
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
    /// [`RunningDriver::shutdown`](super::RunningDriver::shutdown) from
    /// reporting it. Every panic is counted in
    /// [`DriverStats::handler_panics`]; only the first not taken is kept.
    /// A panic is kept before the count that includes it is published: once
    /// [`DriverHandle::stats`] shows `n` panics, every one of them has been
    /// kept or dropped, so a caller that takes the kept panic then takes
    /// one of those `n`, and a shutdown reports none of them afterwards.
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
    /// no upcall from it can follow. A device feed the driver added for it
    /// is stopped at once (no post from it either) but dropped at its poll's
    /// end, a turn later (or, if the backend refuses its cancellation, once
    /// a later turn's retry is taken, or at the shutdown): until then it
    /// holds a poster of the feed's EVD, and its device's events
    /// ([`Driver::remove`](super::Driver::remove) waits for that too, but
    /// for a refused cancellation).
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
    /// [`DriverError::NoSuchFeed`] if it was removed already (or the key is
    /// another driver's); [`DriverError::OnDriverThread`] on the driver's
    /// own thread, where
    /// waiting for the feed would wait for itself;
    /// [`DriverError::Stopped`] once the driver has stopped (its feeds are in
    /// the [`Shutdown`](super::Shutdown); dropped on its thread if that
    /// thread failed, this one's too if its removal was under way);
    /// [`DriverError::Io`] if the
    /// driver's backend refused to cancel the feed's poll (the feed stays
    /// registered and served, and the driver serves on).
    pub fn remove<F: 'static>(&self, key: FeedKey<F>) -> Result<F, DriverError> {
        if self.shared.on_driver_thread() {
            return Err(DriverError::OnDriverThread);
        }
        if !key.is_of(self.shared.serial) {
            return Err(DriverError::NoSuchFeed);
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
        let queued = self.shared.queued_commands();
        f.debug_struct("DriverHandle")
            .field("running", &self.is_running())
            .field("stopping", &self.shared.stop_requested())
            .field("queued_commands", &queued)
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
