//! The busy-poll mode's optional dedicated thread.

use crate::driver::Panic;
use crate::event::VerbsEvent;
use crate::feed::{Feed, FeedStatus};
use crate::source::CompletionQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A thread that busy-polls a set of feeds round-robin, `budget` completions
/// per feed per turn (so one CQ cannot starve the others), until stopped.
/// It never sleeps: it trades a core for the lowest latency.
///
/// Stopping (or dropping) it joins the thread; no post (hence no upcall)
/// from its feeds happens after that returns.
///
/// ```
/// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
/// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
/// let (cq, producer) = SoftCq::new(64).unwrap();
/// let poller = Poller::spawn(vec![Feed::new(cq, CqId(0), poster)], 16).unwrap();
/// producer.push(WorkCompletion { wr_id: 5, ..Default::default() }).unwrap();
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
/// producer.push(WorkCompletion { wr_id: 6, ..Default::default() }).unwrap();
/// consumer.wait(1, None).unwrap();
/// assert!(matches!(consumer.try_dequeue(), Ok(Logged(VerbsEvent::Completion { wc, .. })) if wc.wr_id == 6));
/// let _feeds: Vec<Feed<SoftCq, Logged>> = poller.stop().unwrap().feeds;
/// ```
pub struct Poller<C, T = VerbsEvent>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Stopped<C, T>>>,
}

/// The feeds are on the polling thread, so only its state shows.
impl<C, T> std::fmt::Debug for Poller<C, T>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("stopping", &self.stop.load(Ordering::Relaxed))
            .field("thread", &self.thread)
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
pub struct Stopped<C: CompletionQueue, T = VerbsEvent> {
    /// The feeds, in the order given.
    pub feeds: Vec<Feed<C, T>>,
    /// CPU time the polling thread used.
    pub cpu_time: Duration,
    /// Rounds over all feeds.
    pub rounds: u64,
}

impl<C, T> Poller<C, T>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    /// Start polling `feeds` on a new thread.
    ///
    /// ```
    /// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let feeds = (0..2).map(|i| Feed::new(SoftCq::new(8).unwrap().0, CqId(i), poster.clone())).collect();
    /// let poller = Poller::spawn(feeds, 16).unwrap();
    /// assert_eq!(poller.stop().unwrap().feeds.len(), 2);
    /// ```
    pub fn spawn(mut feeds: Vec<Feed<C, T>>, budget: usize) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("evd-verbs-poller".into())
            .spawn(move || {
                let mut rounds = 0u64;
                // Relaxed: the flag carries no data; the join publishes the feeds.
                while !flag.load(Ordering::Relaxed) {
                    let mut idle = true;
                    for f in feeds.iter_mut() {
                        if f.progress(budget).status == FeedStatus::Budget {
                            idle = false;
                        }
                    }
                    if idle {
                        std::hint::spin_loop();
                    }
                    rounds += 1;
                }
                Stopped {
                    feeds,
                    cpu_time: crate::cpu_time::thread_cpu_time(),
                    rounds,
                }
            })?;
        Ok(Poller {
            stop,
            thread: Some(thread),
        })
    }

    /// Stop and join the thread; hand back the feeds.
    ///
    /// # Errors
    /// [`Panic`] with the payload if the thread panicked (user code it ran
    /// panicked: an upcall handler of an EVD its feeds post into, say); the
    /// feeds went with the thread. This never panics again.
    ///
    /// ```
    /// use evd_verbs::{Feed, Poller, CqId, VerbsEvent, soft::SoftCq};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    /// let poller = Poller::spawn(vec![Feed::new(SoftCq::new(8).unwrap().0, CqId(0), poster)], 16).unwrap();
    /// let stopped = poller.stop().unwrap(); // no post from its feeds after this
    /// assert_eq!(stopped.feeds.len(), 1);
    /// ```
    pub fn stop(mut self) -> Result<Stopped<C, T>, Panic> {
        self.stop_and_join()
            .expect("poller thread handle present until stopped")
    }

    fn stop_and_join(&mut self) -> Option<Result<Stopped<C, T>, Panic>> {
        self.stop.store(true, Ordering::Relaxed);
        let t = self.thread.take()?;
        Some(t.join().map_err(Panic::new))
    }
}

impl<C, T> Drop for Poller<C, T>
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    fn drop(&mut self) {
        if !std::thread::panicking() {
            drop(self.stop_and_join());
        } else {
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}
