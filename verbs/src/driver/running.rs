//! A driver on its own thread ([`RunningDriver`], started by
//! [`Driver::spawn`]: the thread's life, from its first turn to the
//! removal of every feed) and what it ends with ([`Shutdown`]): the feeds
//! handed back, or the thread's error.

use super::control::{DriverHandle, RunningMark, downcast};
use super::error::{
    DriverError, DropCaught, DropEach, Panic, drop_each_caught, drop_each_then_raise,
};
use super::key::{FeedId, FeedKey};
use super::slot::Removal;
use super::{Driver, DriverStats};
use crate::trace;
use std::any::Any;
use std::fmt;
use std::thread::JoinHandle;
use std::time::Duration;

impl Driver {
    /// Run on a new thread until [`RunningDriver::shutdown`]. A panic in a
    /// feed's turn is caught and kept there, and the thread serves on (see
    /// [`RunningDriver`]).
    ///
    /// ```
    /// use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let (cq, hca) = SoftCq::new(16).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// driver.register(Feed::new(cq, CqId(1), poster), FeedMode::Event).unwrap();
    /// let running = driver.spawn().unwrap();
    /// hca.push(WorkCompletion::new(9)).unwrap();
    /// assert!(matches!(consumer.dequeue(), Ok(VerbsEvent::Completion { cq: CqId(1), .. })));
    /// assert_eq!(running.shutdown().unwrap().len(), 1);
    /// ```
    ///
    /// # Errors
    /// [`DriverError::Io`] if the operating system refused a new thread;
    /// the driver and its feeds are then dropped, as a driver its owner
    /// drops (a panic of a feed's drop reaches the caller).
    pub fn spawn(mut self) -> Result<RunningDriver, DriverError> {
        let handle = self.handle();
        let running = RunningMark::new(self.shared.clone());
        let thread = std::thread::Builder::new()
            .name("evd-verbs-driver".into())
            .spawn(move || {
                // Dropped when the thread ends, however it ends.
                let _running = running;
                // Its thread's from here on: what it drops and catches is
                // kept for the handles, not raised.
                self.spawned = true;
                DropCaught::new(self.run())
            })
            .map_err(DriverError::Io)?;
        Ok(RunningDriver {
            handle,
            thread: Some(thread),
        })
    }

    fn run(mut self) -> Result<Shutdown, DriverError> {
        // The whole thread is the driver's: user code it runs outside a
        // turn too (the feeds it drops at a shutdown or a failure) must
        // have a handle's waiting call refused, not wait for this thread.
        let shared = self.shared.clone();
        let _driving = shared.driving();
        trace::event!(
            INFO,
            backend = ?self.backend(),
            feeds = self.slots.iter().flatten().count(),
            "driver thread started"
        );
        // The polls `Driver::new` and a caller's `process` asked for
        // belong (on io_uring) to the thread that asked: this thread's
        // first step ends them and asks again (`polls.rs`).
        // One the caller's own `process` caught and did not report (its
        // step failed after it).
        self.keep_caught_panic();
        let r = self.serve_until_stopped();
        if r.is_err() {
            // Failed: the feeds go with the driver, nobody to hand them to;
            // dropped feed by feed under a catch (their code's panics are
            // not this thread's end, and a second one would abort).
            drop_each_caught(self.slots.drain(..).flatten().map(|s| s.source));
            drop_each_caught(std::mem::take(&mut self.removed));
        }
        match &r {
            Ok(_) => {
                trace::event!(INFO, stats = ?self.stats, "driver thread stopped");
            }
            Err(_e) => {
                trace::event!(ERROR, error = %_e, stats = ?self.stats, "driver thread failed");
            }
        }
        // The last publish, before the thread's `RunningMark` says it ended
        // (and after the last panic is kept, as every publish).
        self.keep_caught_panic();
        self.shared.stats.publish(&self.stats);
        r
    }

    /// Keep the panic a turn caught and no `process` reported (a step that
    /// failed after it, a removal's or shutdown's step), if any: called
    /// before every publish of the counters (`driver/stats.rs`).
    fn keep_caught_panic(&mut self) {
        if let Some(p) = self.caught.take() {
            self.shared.keep_panic(p);
        }
    }

    fn serve_until_stopped(&mut self) -> Result<Shutdown, DriverError> {
        while !self.shared.stop_requested() {
            let r = self.process_unpublished(None);
            let failed = match r {
                Ok(_) => None,
                // Caught in a feed's turn; the driver is intact: keep the
                // panic for `take_panic` (or the shutdown) and serve on.
                Err(DriverError::Panicked(p)) => {
                    self.shared.keep_panic(p);
                    None
                }
                // One feed's verbs call (retried, or the feed given up: its
                // EVD is told by a `CqError` or a `SourceFailed` event);
                // counted in the stats, and the other feeds are served on.
                Err(DriverError::FeedFailed { .. }) => None,
                Err(e) => Some(e),
            };
            // A step that failed may have caught a panic before: every
            // panic counted is kept before the count is published.
            self.keep_caught_panic();
            self.shared.stats.publish(&self.stats);
            if let Some(e) = failed {
                return Err(e);
            }
        }
        let ids: Vec<FeedId> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.as_ref().map(|s| FeedId {
                    index: i as u32,
                    generation: s.generation,
                })
            })
            .collect();
        let device_feeds: Vec<FeedId> = self
            .slots
            .iter()
            .flatten()
            .filter_map(|s| s.device_feed)
            .collect();
        self.shutting_down = true;
        for id in &ids {
            // False for a feed a `DriverHandle::remove` is removing already:
            // its remover gets it when its cancellation ends. Its
            // cancellation refused, the removal is begun all the same, the
            // cancellation owed (as a device feed's).
            if let Err(_e) = self.begin_remove(*id, Removal::Local) {
                trace::event!(WARN, feed = ?id, error = %_e, "cancel refused at shutdown");
                self.cancels_owed.push(*id);
                let slot = self.slot_mut(*id).expect("nothing begun");
                slot.start_removal(Removal::Local);
            }
        }
        self.hand_back_owed();
        // Every removal under way ends here, the handles' too (their feeds
        // go to their removers, the others into the `Shutdown`); no command
        // adds a feed meanwhile (`apply_commands`). A step the backend
        // fails ends the wait: the feeds left are handed back without
        // their polls' end, as those whose cancellation is refused.
        let mut backend_error = None;
        while self.slots.iter().any(Option::is_some) {
            if let Err(e) = self.cancellation_step() {
                trace::event!(WARN, error = %e, "backend failed at shutdown");
                for index in 0..self.slots.len() {
                    self.hand_back_uncancelled(index, None);
                }
                backend_error = Some(e);
            }
        }
        // The device feeds the driver added itself are no feed a key names:
        // dropped here, which gives their devices' events back at once. A
        // panic of their code is counted and swallowed (`drop_device_feed`
        // during a shutdown): kept, it would make the shutdown drop the
        // keyed feeds with it.
        let (added, feeds): (Vec<_>, Vec<_>) = std::mem::take(&mut self.removed)
            .into_iter()
            .partition(|(id, _)| device_feeds.contains(id));
        for (id, feed) in added {
            self.drop_device_feed(id, feed);
        }
        Ok(Shutdown {
            feeds: HandedBack(feeds),
            driver: self.shared.serial,
            cpu_time: crate::cpu_time::thread_cpu_time(),
            stats: self.stats,
            backend_error,
        })
    }
}

impl Driver {
    /// At a shutdown: ask once more for the cancellations owed (refused
    /// when asked for), and hand back now every feed whose cancellation the
    /// backend still refuses.
    fn hand_back_owed(&mut self) {
        self.cancel_owed_polls();
        for id in std::mem::take(&mut self.cancels_owed) {
            self.hand_back_uncancelled(id.index as usize, Some(id.generation));
        }
    }

    /// At a shutdown: hand back the feed in slot `index` (if it is of
    /// `generation`, when given) without waiting for its poll to end. Its
    /// poll needs no cancellation: it ends with the backend, which goes with
    /// the driver when the shutdown is done, and a report of it meanwhile
    /// finds no feed. Waiting for it instead would wait for ever on a
    /// refusal or a failure that lasts.
    fn hand_back_uncancelled(&mut self, index: usize, generation: Option<u64>) {
        let of = |s: &mut super::slot::Slot| generation.is_none_or(|g| s.generation == g);
        if let Some(slot) = self.slots[index].take_if(of) {
            let id = FeedId {
                index: index as u32,
                generation: slot.generation,
            };
            // Every feed's removal has begun (the shutdown's or a handle's).
            let who = slot.removing.unwrap_or(Removal::Local);
            self.hand_back(id, slot.source, who);
        }
    }
}

/// A driver running on its own thread. Dropping it shuts it down, joins
/// it, and drops its feeds (acknowledging their events) on the dropping
/// thread, one at a time: the first panic of their code reaches the caller;
/// dropped on the driver's own thread (from an upcall) or while the
/// dropping thread unwinds from a panic, it asks the driver to stop and
/// does not wait, so a feed's user code may still run after the drop
/// returns (joining there would wait for itself, or could hang an
/// unwinding thread whose lock a handler waits for).
///
/// # Panics in user code
/// The thread runs user code: the upcall handlers of the EVDs its feeds
/// post into, the event types' `From` and `Drop`, a completion queue's own
/// code. A panic there is caught at the end of the feed's turn, counted
/// ([`DriverStats::handler_panics`]) and kept ([`RunningDriver::take_panic`]);
/// the driver serves on, every feed included, the one whose handler
/// panicked too (see [`Driver::process`](super::Driver::process)). No call
/// on this type panics because of it: [`RunningDriver::shutdown`] reports a
/// panic nobody took as [`DriverError::Panicked`]; dropping the driver
/// instead drops that panic (take it first to see it).
///
/// ```
/// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
/// assert!(running.is_running());
/// drop(running); // stops and joins
/// ```
pub struct RunningDriver {
    pub(crate) handle: DriverHandle,
    pub(crate) thread: Option<JoinHandle<DropCaught<Result<Shutdown, DriverError>>>>,
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
    /// when its ring fails; a feed's failure does not end it: see
    /// [`DriverError::FeedFailed`]). See [`DriverHandle::is_running`].
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
    /// removed from the ring first; a feed whose poll the backend refuses
    /// to cancel, or fails to report cancelled, is handed back all the
    /// same, its poll ended by the driver's end).
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
    /// [`DriverError::Panicked`] with the payload if user code the thread
    /// ran panicked and nobody took that panic
    /// ([`take_panic`](Self::take_panic)): a panic is reported, never
    /// swallowed (but for one of the code of a device feed the driver added
    /// that the shutdown itself drops, or of a feed whose registration the
    /// shutdown refuses: counted in [`DriverStats::handler_panics`] and
    /// traced, lest it cost the keyed feeds), and the feeds are then
    /// dropped here instead of handed
    /// back (take the panic first to get them; a panic of their own code in
    /// that drop, a CQ's destroy or a held event's `Drop`, is swallowed:
    /// the first is the one reported). Such a panic comes first: reported
    /// even when the thread also failed or panicked (that failure is
    /// traced, with the `tracing` feature).
    /// Else the thread's error if it failed, [`DriverError::Panicked`] if
    /// it panicked outside a feed's turn. This never panics again.
    /// [`DriverError::OnDriverThread`] when called on the driver's own thread
    /// (from such an upcall), where joining would wait for itself: the
    /// driver is asked to stop, and stops when the feed turn that ran that
    /// upcall ends (what that turn's batch still held is posted, no other
    /// feed is served); its feeds are dropped on its thread, not handed
    /// back (a panic of their code there is swallowed).
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
        let joined = self
            .stop_and_join()
            .expect("thread present until shut down");
        // A panic kept is reported first: returned, not swallowed, however
        // the thread ended (its failure, which came first unless the panic
        // is of a feed dropped at the thread's end, is traced).
        match self.handle.shared.take_panic() {
            Some(p) => {
                if let Err(_e) = &joined {
                    trace::event!(ERROR, error = %_e, "driver thread's own failure, behind the panic reported");
                }
                // The feeds go with nobody to hand them to: dropped here,
                // where their own code (a CQ's destroy, a held event's
                // `Drop`) must not raise a second panic past the first,
                // which is the one reported.
                drop(DropCaught::new(joined));
                Err(DriverError::Panicked(p))
            }
            None => joined,
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
            Ok(r) => r.into_inner(),
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
        } else if let Some(Ok(mut stopped)) = self.stop_and_join() {
            // A feed's panic on drop reaches this caller; one at a time.
            drop_each_then_raise(std::mem::take(&mut stopped.feeds.0));
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

/// A shut-down driver's feeds and the CPU time its thread used. Take each feed
/// back typed with [`Shutdown::take`]; dropping the `Shutdown` drops the rest
/// (acknowledging their CQ events, then destroying their CQs), one at a time: a
/// panic of one's drop is raised to the dropper once all are gone. It holds the
/// feeds registered with keys only: the feeds of devices' async events the
/// driver added itself ([`Driver::register`](crate::Driver::register)) were
/// dropped at the shutdown, giving those events back to their devices.
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
    pub(crate) feeds: HandedBack,
    /// The serial number of the driver that was shut down.
    pub(crate) driver: u64,
    /// CPU time of the driver thread.
    pub cpu_time: Duration,
    /// The driver's counters at the end of its service (a registration
    /// refused as its thread ends, after them, counts in
    /// [`DriverHandle::stats`](crate::DriverHandle::stats) only).
    pub stats: DriverStats,
    /// The backend's error that ended the wait for the feeds' polls to be
    /// cancelled, if one did: the feeds were handed back all the same,
    /// their polls ended by the driver's end.
    pub backend_error: Option<DriverError>,
}

impl DropEach for Shutdown {
    fn drop_each(mut self) {
        drop_each_caught(std::mem::take(&mut self.feeds.0));
    }
}

/// The feeds a [`Shutdown`] holds. Those not taken go one at a time, each
/// under its own catch (a second panic while a first unwinds would abort
/// the process); the first panic of their drops reaches the dropper once
/// every feed is gone (during an unwinding, swallowed). Its own type, not a
/// `Drop` of `Shutdown`, so that the caller can still move the `Shutdown`'s
/// public fields out.
#[derive(Default)]
pub(crate) struct HandedBack(pub(crate) Vec<(FeedId, Box<dyn Any + Send>)>);

impl Drop for HandedBack {
    fn drop(&mut self) {
        let feeds = std::mem::take(&mut self.0);
        if std::thread::panicking() {
            drop_each_caught(feeds);
        } else {
            drop_each_then_raise(feeds);
        }
    }
}

impl Shutdown {
    /// The feed registered under `key`, if it was still registered at the
    /// shutdown (and not taken yet); `None` for another driver's key.
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
        if !key.is_of(self.driver) {
            return None;
        }
        let i = self.feeds.0.iter().position(|(id, _)| *id == key.id())?;
        Some(downcast(self.feeds.0.swap_remove(i).1))
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
        self.feeds.0.len()
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
        self.feeds.0.is_empty()
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
        self.feeds.0.iter().map(|(id, _)| *id)
    }
}

impl fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shutdown")
            .field(
                "feeds",
                &self.feeds.0.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            )
            .field("cpu_time", &self.cpu_time)
            .field("stats", &self.stats)
            .field("backend_error", &self.backend_error)
            .finish()
    }
}
