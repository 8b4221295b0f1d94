//! The busy-poll mode's optional dedicated thread.

use crate::driver::{
    DriverError, DropCaught, DropEach, KeptPanic, Panic, drop_each_caught, drop_each_then_raise,
};
use crate::event::VerbsEvent;
use crate::feed::{Feed, FeedStatus};
use crate::source::CompletionQueue;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A thread that busy-polls a set of feeds round-robin, `budget` completions
/// per feed per turn (so one CQ cannot starve the others), until stopped.
/// It never sleeps: it trades a core for the lowest latency.
///
/// Stopping (or dropping) it joins the thread; no post (hence no upcall)
/// from its feeds happens after that returns. The join waits for the feed
/// call under way, which moves up to `budget` completions, each post
/// running the EVD's upcall handler under an upcall policy: do not stop
/// (or drop) a poller while holding a lock such a handler takes.
///
/// It polls CQs only: nobody reads the devices' async events unless the
/// application does (an [`AsyncFeed`](crate::AsyncFeed) of its own, or a
/// [`Driver`](crate::Driver), which serves a registered CQ's device
/// itself). A CQ overrun is reported only there (`CqError`), so without one
/// the completions an overrun lost go unnoticed.
///
/// # Panics in user code
/// The thread runs user code: the upcall handlers of the EVDs its feeds
/// post into, the event type's `From` and `Drop`, the CQs' own code. A
/// panic there is caught around that feed's [`Feed::progress`] call,
/// counted ([`Poller::handler_panics`]) and kept ([`Poller::take_panic`]),
/// and the thread polls on, every feed included (a feed's state is
/// consistent at each point where it runs user code: see
/// [`Driver::process`](crate::Driver::process) for what the feed keeps).
/// [`Poller::stop`] reports a panic nobody took; dropping the poller
/// instead drops that panic (take it first to see it), as dropping a
/// [`RunningDriver`](crate::RunningDriver) does.
///
/// ```
/// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
/// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
/// let (cq, producer) = SoftCq::new(64).unwrap();
/// let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster)], 16).unwrap();
/// producer.push(WorkCompletion::new(5)).unwrap();
/// consumer.wait(1, None).unwrap();
/// assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Completion { wc, .. }) if wc.wr_id == 5));
/// let stopped = poller.stop().unwrap();
/// assert_eq!(stopped.feeds.len(), 1);
/// ```
///
/// The feeds post into EVDs of one event type `T` (see [`Feed`]), of the
/// application's choosing:
///
/// ```
/// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
/// struct Logged(VerbsEvent);
/// impl From<VerbsEvent> for Logged {
///     fn from(ev: VerbsEvent) -> Self { Logged(ev) }
/// }
/// let (poster, mut consumer) = evd::bounded::<Logged>(64).unwrap();
/// let (cq, producer) = SoftCq::new(64).unwrap();
/// let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster)], 16).unwrap();
/// producer.push(WorkCompletion::new(6)).unwrap();
/// consumer.wait(1, None).unwrap();
/// assert!(matches!(consumer.try_dequeue(), Ok(Logged(VerbsEvent::Completion { wc, .. })) if wc.wr_id == 6));
/// let _feeds: Vec<Feed<SoftCq, Logged>> = poller.stop().unwrap().feeds;
/// ```
pub struct Poller<C, T = VerbsEvent>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    shared: Arc<PollerShared>,
    thread: Option<JoinHandle<DropCaught<Stopped<C, T>>>>,
}

/// What a poller's thread shares with its [`Poller`].
#[derive(Default)]
struct PollerShared {
    stop: AtomicBool,
    /// Set before the thread starts, cleared (`Release`) when it ends.
    running: AtomicBool,
    /// Feed calls that panicked. Written by the polling thread only (a
    /// store of its own count: no read-modify-write), and only when one
    /// did, after the panic is kept (or, a later one, dropped): stored
    /// `Release`, loaded `Acquire`, so a reader that saw `n` and then takes
    /// the kept panic takes one of those `n`, never one kept after.
    handler_panics: AtomicU64,
    /// The first caught panic not taken yet.
    panic: KeptPanic,
}

/// Held by the polling thread: clears `running` when the thread ends,
/// however it ends.
struct RunningMark(Arc<PollerShared>);

impl Drop for RunningMark {
    fn drop(&mut self) {
        // Release: what the thread did before it ended (its last count of
        // panics) is visible to a reader whose Acquire load sees `false`.
        self.0.running.store(false, Ordering::Release);
    }
}

/// The feeds are on the polling thread, so only its state shows.
impl<C, T> std::fmt::Debug for Poller<C, T>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("running", &self.is_running())
            .field("stopping", &self.shared.stop.load(Ordering::Relaxed))
            .field("handler_panics", &self.handler_panics())
            .finish()
    }
}

/// What a stopped [`Poller`] hands back.
///
/// ```
/// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, soft::SoftCq};
/// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
/// let poller = Poller::spawn(vec![Feed::new(SoftCq::new(8).unwrap().0, CqId(0), poster)], 16).unwrap();
/// let stopped = poller.stop().unwrap();
/// assert_eq!(stopped.feeds[0].id(), CqId(0));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Stopped<C: CompletionQueue, T = VerbsEvent> {
    /// The feeds, in the order given.
    pub feeds: Vec<Feed<C, T>>,
    /// CPU time the polling thread used.
    pub cpu_time: Duration,
    /// Rounds over all feeds.
    pub rounds: u64,
    /// Feed calls that panicked (caught; see [`Poller`]).
    pub handler_panics: u64,
}

impl<C, T> Poller<C, T>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    /// Start polling `feeds` on a new thread, each call of a feed moving at
    /// most `budget` events (zero is taken as 1, as a
    /// [`DriverConfig::budget`](crate::DriverConfig::budget) is: no budget
    /// would move nothing, for ever).
    ///
    /// ```
    /// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let (cq, hca) = SoftCq::new(8).unwrap();
    /// let other = Feed::new(SoftCq::new(8).unwrap().0, CqId(1), poster.clone());
    /// let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster), other], 0).unwrap();
    /// hca.push(WorkCompletion::new(5)).unwrap();
    /// let ev = consumer.dequeue_timeout(std::time::Duration::from_secs(60));
    /// assert!(matches!(ev, Ok(VerbsEvent::Completion { wc, .. }) if wc.wr_id == 5));
    /// assert_eq!(poller.stop().unwrap().feeds.len(), 2);
    /// ```
    ///
    /// # Errors
    /// The operating system's error if it refused a new thread; `feeds`
    /// are then dropped.
    pub fn spawn(mut feeds: Vec<Feed<C, T>>, budget: usize) -> std::io::Result<Self> {
        let budget = budget.max(1);
        let shared = Arc::new(PollerShared::default());
        // Relaxed: the spawn below orders it before anything the thread does.
        shared.running.store(true, Ordering::Relaxed);
        let mark = RunningMark(shared.clone());
        let thread = std::thread::Builder::new()
            .name("evd-verbs-poller".into())
            .spawn(move || {
                let mark = mark;
                let shared = &*mark.0;
                let mut rounds = 0u64;
                let mut panics = 0u64;
                // Relaxed: the flag carries no data; the join publishes the feeds.
                while !shared.stop.load(Ordering::Relaxed) {
                    let mut idle = true;
                    for f in feeds.iter_mut() {
                        // A stop asked from a feed's upcall ends the round
                        // here: no later feed is served after it.
                        if shared.stop.load(Ordering::Relaxed) {
                            break;
                        }
                        // AssertUnwindSafe: a feed's fields are consistent
                        // at each point where it runs user code (see
                        // `Slot::turn` in the driver), and its next call
                        // goes on from there.
                        match catch_unwind(AssertUnwindSafe(|| f.progress(budget))) {
                            Ok(p) => idle &= p.status != FeedStatus::Budget,
                            Err(payload) => {
                                crate::trace::event!(ERROR, "a feed call panicked (a handler, most likely); caught, the poller polls on");
                                panics += 1;
                                // Wrapped first: a panic not kept is dropped
                                // by `Panic`'s guarded drop.
                                shared.panic.keep(Panic::new(payload));
                                // Counted once kept or dropped: see
                                // `handler_panics`.
                                shared.handler_panics.store(panics, Ordering::Release);
                                idle = false;
                            }
                        }
                    }
                    if idle {
                        std::hint::spin_loop();
                    }
                    rounds += 1;
                }
                DropCaught::new(Stopped {
                    feeds,
                    cpu_time: crate::cpu_time::thread_cpu_time(),
                    rounds,
                    handler_panics: panics,
                })
            })?;
        Ok(Poller {
            shared,
            thread: Some(thread),
        })
    }

    /// Whether the polling thread still runs (until [`Poller::stop`], or
    /// until it died of a panic outside a feed call).
    ///
    /// ```
    /// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let poller = Poller::spawn(vec![Feed::new(SoftCq::new(8).unwrap().0, CqId(0), poster)], 16).unwrap();
    /// assert!(poller.is_running());
    /// # poller.stop().unwrap();
    /// ```
    pub fn is_running(&self) -> bool {
        // Acquire: pairs with the Release store of the thread's end.
        self.shared.running.load(Ordering::Acquire)
    }

    /// Feed calls that panicked so far (caught; the thread polls on).
    ///
    /// ```
    /// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let poller = Poller::spawn(vec![Feed::new(SoftCq::new(8).unwrap().0, CqId(0), poster)], 16).unwrap();
    /// assert_eq!(poller.handler_panics(), 0);
    /// # poller.stop().unwrap();
    /// ```
    pub fn handler_panics(&self) -> u64 {
        self.shared.handler_panics.load(Ordering::Acquire)
    }

    /// The first panic caught in a feed call and not taken yet. Taking it
    /// keeps [`Poller::stop`] from reporting it. A panic is kept (or, with
    /// one already kept, dropped) before [`Poller::handler_panics`] counts
    /// it: a caller that saw `n` and then takes the kept panic takes one of
    /// those `n`.
    ///
    /// ```
    /// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let poller = Poller::spawn(vec![Feed::new(SoftCq::new(8).unwrap().0, CqId(0), poster)], 16).unwrap();
    /// assert!(poller.take_panic().is_none());
    /// # poller.stop().unwrap();
    /// ```
    pub fn take_panic(&self) -> Option<Panic> {
        self.shared.panic.take()
    }

    /// Stop and join the thread; hand back the feeds.
    ///
    /// # Errors
    /// [`DriverError::Panicked`] with the payload if user code the thread
    /// ran panicked (an upcall handler of an EVD its feeds post into, say)
    /// and nobody took that panic ([`Poller::take_panic`]): a panic is
    /// reported, never swallowed, and the feeds are then dropped here
    /// instead of handed back (take the panic first to get them; a panic of
    /// their own code in that drop, a CQ's destroy or a held event's
    /// `Drop`, is swallowed: the first is the one reported). The same if
    /// the thread itself died of a panic; the feeds went with it.
    /// [`DriverError::OnDriverThread`] when called on the poller's own
    /// thread (from such an upcall), where joining would wait for itself:
    /// the poller is asked to stop, and stops when the feed call that ran
    /// that upcall returns (that call runs to its end: up to its `budget`
    /// of completions more are posted, each post running the upcall again;
    /// no other feed is served); its feeds are dropped on its thread, not
    /// handed back (a panic of their code there is swallowed, and so is a
    /// kept panic nobody took).
    ///
    /// # Panics
    /// Never: see Errors.
    ///
    /// ```
    /// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let poller = Poller::spawn(vec![Feed::new(SoftCq::new(8).unwrap().0, CqId(0), poster)], 16).unwrap();
    /// let stopped = poller.stop().unwrap(); // no post from its feeds after this
    /// assert_eq!(stopped.feeds.len(), 1);
    /// ```
    pub fn stop(mut self) -> Result<Stopped<C, T>, DriverError> {
        if self.on_poller_thread() {
            self.shared.stop.store(true, Ordering::Relaxed);
            // Detach: the thread ends on its own once this call returns to it.
            drop(self.thread.take());
            return Err(DriverError::OnDriverThread);
        }
        self.stop_and_join()
            .expect("poller thread handle present until stopped")
            .map_err(DriverError::Panicked)
    }

    /// True if the caller is the poller's own thread.
    fn on_poller_thread(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|t| t.thread().id() == std::thread::current().id())
    }

    fn stop_and_join(&mut self) -> Option<Result<Stopped<C, T>, Panic>> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let t = self.thread.take()?;
        Some(
            t.join()
                .map_err(Panic::new)
                .and_then(|stopped| match self.shared.panic.take() {
                    // Nobody to hand the feeds to: dropped under a catch,
                    // the first panic being the one reported.
                    Some(p) => Err(p),
                    None => Ok(stopped.into_inner()),
                }),
        )
    }
}

impl<C: CompletionQueue, T> DropEach for Stopped<C, T> {
    fn drop_each(mut self) {
        drop_each_caught(std::mem::take(&mut self.feeds));
    }
}

impl<C, T> Drop for Poller<C, T>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    fn drop(&mut self) {
        if self.on_poller_thread() {
            // From an upcall on its own thread: joining would wait for
            // itself. Asked to stop, it ends once the feed call that ran
            // the upcall returns.
            self.shared.stop.store(true, Ordering::Relaxed);
            drop(self.thread.take());
        } else if std::thread::panicking() {
            // Joined all the same (no post after the drop returns), but the
            // feeds handed back run their own code when dropped (acks, the
            // CQ's destroy), and a panic there during this unwinding would
            // abort the process: dropped feed by feed under a catch.
            if let Some(Ok(stopped)) = self.stop_and_join() {
                stopped.drop_each();
            }
        } else if let Some(Ok(mut stopped)) = self.stop_and_join() {
            // A feed's panic on drop reaches this caller; one at a time.
            drop_each_then_raise(std::mem::take(&mut stopped.feeds));
        }
    }
}
