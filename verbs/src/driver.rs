//! The io_uring driver: one ring waits on the completion channels of many
//! feeds (one fd each, `POLL_ADD`, multishot where the kernel has it) and
//! runs their event-driven or adaptive cycle. It runs on its own thread
//! ([`Driver::spawn`]) or inside the user's loop ([`Driver::process`], with
//! the ring's fd to wait on).
//!
//! # Backpressure retry
//! A feed that stops on a full EVD is not re-armed (its completions wait in
//! the CQ). The EVD has no "room again" signal, so the driver retries it on
//! a timer: first after [`DriverConfig::retry_min`], doubling up to
//! [`DriverConfig::retry_max`] while the EVD stays full, back to the minimum
//! once it moves. The wait is the ring's own timed wait, so a blocked feed
//! costs one wake-up per retry, never a spin. A consumer that has just made
//! room can cut the wait short with [`DriverHandle::kick`].

use crate::adaptive::{AdaptiveConfig, SpinPolicy};
use crate::cq::{AsyncEventSource, CompletionQueue};
use crate::event::{AsyncEvent, VerbsEvent};
use crate::feed::{Feed, FeedStatus, Progress};
use crate::soft::{clear_eventfd, new_eventfd, signal_eventfd};
use evd::{PostError, Poster};
use io_uring::{cqueue, opcode, types, IoUring};
use std::any::Any;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the driver runs a feed.
///
/// ```
/// use evd_verbs::{AdaptiveConfig, FeedMode};
/// use std::time::Duration;
/// let mode = FeedMode::Adaptive(AdaptiveConfig { max_spin: Duration::from_micros(20), ..Default::default() });
/// assert_ne!(mode, FeedMode::Event);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedMode {
    /// Sleep on the channel; on readiness get and ack the events, re-arm,
    /// drain until empty, sleep again.
    Event,
    /// Spin while completions keep arriving, then arm and sleep; the spin
    /// budget follows the arrival rate (see [`SpinPolicy`]).
    Adaptive(AdaptiveConfig),
}

/// Driver settings.
///
/// ```
/// let cfg = evd_verbs::DriverConfig { budget: 64, ..Default::default() };
/// let driver = evd_verbs::Driver::new(cfg).unwrap();
/// # drop(driver);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct DriverConfig {
    /// Submission-queue entries of the ring (completion queue: twice that).
    pub ring_entries: u32,
    /// Completions one feed may deliver per turn before the driver moves on
    /// to the others (the kernel's irq_poll budget is 256).
    pub budget: usize,
    /// First retry delay of a feed stopped by a full EVD.
    pub retry_min: Duration,
    /// Longest retry delay of a feed stopped by a full EVD.
    pub retry_max: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            ring_entries: 256,
            budget: 256,
            retry_min: Duration::from_micros(20),
            retry_max: Duration::from_millis(1),
        }
    }
}

/// A feed's key in a driver: names it for [`Driver::remove`] and
/// [`DriverHandle::remove`]. Keys of removed feeds are never reused.
///
/// ```
/// # use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, soft::SoftCq};
/// # let (poster, _c) = evd::bounded(4).unwrap();
/// let mut driver = Driver::new(DriverConfig::default()).unwrap();
/// let key = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster), FeedMode::Event).unwrap();
/// driver.remove(key).unwrap();
/// assert!(driver.remove(key).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FeedKey {
    index: u32,
    generation: u32,
}

/// What the driver needs from a feed, whatever its CQ or source type.
trait Source: Send {
    fn fd(&self) -> Option<RawFd>;
    fn take_events(&mut self) -> io::Result<()>;
    fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress>;
    fn progress(&mut self, budget: usize) -> Progress;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<C: CompletionQueue + 'static> Source for Feed<C> {
    fn fd(&self) -> Option<RawFd> {
        self.channel_fd()
    }
    fn take_events(&mut self) -> io::Result<()> {
        Feed::take_events(self)
    }
    fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress> {
        Feed::arm_and_drain(self, budget)
    }
    fn progress(&mut self, budget: usize) -> Progress {
        Feed::progress(self, budget)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// Delivers a device's async events (CQ errors, port and device events)
/// into an EVD as [`VerbsEvent::Async`]. Busy-poll it with
/// [`AsyncFeed::progress`] or register it with a [`Driver`].
///
/// ```
/// use evd_verbs::{AsyncFeed, AsyncEvent, AsyncEventKind, AsyncElement, VerbsEvent, soft::SoftDevice};
/// let (poster, mut consumer) = evd::bounded(8).unwrap();
/// let (events, device) = SoftDevice::new().unwrap();
/// let mut feed = AsyncFeed::new(events, poster);
/// device.raise(AsyncEvent { kind: AsyncEventKind::PortError, element: AsyncElement::Port(1) });
/// assert_eq!(feed.progress(16).delivered, 1);
/// assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(e)) if e.kind == AsyncEventKind::PortError));
/// ```
pub struct AsyncFeed<S: AsyncEventSource> {
    source: S,
    poster: Poster<VerbsEvent>,
    held: Option<AsyncEvent>,
    failed: bool,
}

impl<S: AsyncEventSource> AsyncFeed<S> {
    /// A feed from `source` into the EVD of `poster`.
    pub fn new(source: S, poster: Poster<VerbsEvent>) -> Self {
        AsyncFeed {
            source,
            poster,
            held: None,
            failed: false,
        }
    }

    /// Deliver up to `budget` waiting async events.
    pub fn progress(&mut self, budget: usize) -> Progress {
        let mut delivered = 0;
        while delivered < budget {
            let ev = match self.held.take() {
                Some(ev) => ev,
                None if self.failed => return stop(delivered, FeedStatus::Failed),
                None => match self.source.next_event() {
                    Ok(Some(ev)) => ev,
                    Ok(None) => return stop(delivered, FeedStatus::Drained),
                    Err(_) => {
                        self.failed = true;
                        return stop(delivered, FeedStatus::Failed);
                    }
                },
            };
            match self.poster.post(VerbsEvent::Async(ev)) {
                Ok(()) => delivered += 1,
                Err(PostError::Full(_)) => {
                    self.held = Some(ev);
                    return stop(delivered, FeedStatus::Backpressure);
                }
                Err(PostError::Closed(_)) => {
                    self.held = Some(ev);
                    return stop(delivered, FeedStatus::Closed);
                }
            }
        }
        stop(delivered, FeedStatus::Budget)
    }

    /// Hand back the source.
    pub fn into_source(self) -> S {
        self.source
    }
}

fn stop(delivered: usize, status: FeedStatus) -> Progress {
    Progress { delivered, status }
}

impl<S: AsyncEventSource + 'static> Source for AsyncFeed<S> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.source.fd())
    }
    fn take_events(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn arm_and_drain(&mut self, budget: usize) -> io::Result<Progress> {
        // The async fd needs no arming: it is readable while events wait.
        Ok(AsyncFeed::progress(self, budget))
    }
    fn progress(&mut self, budget: usize) -> Progress {
        AsyncFeed::progress(self, budget)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// Where a feed is in its cycle.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Needs an arm-and-drain (new, or after a spin expired).
    Arm,
    /// Armed and drained: waits for its channel fd.
    Sleeping,
    /// The channel fd fired: get the events, then drain or spin.
    Woken,
    /// Budget used up with the CQ armed: keep draining next turn.
    Draining,
    /// Adaptive: polling without arming until `until`.
    Spinning { until: Instant },
    /// The EVD was full: retry at `at`.
    Blocked { at: Instant, delay: Duration },
    /// The EVD closed or the CQ failed: nothing more to do.
    Done,
}

struct Slot {
    source: Box<dyn Source>,
    generation: u32,
    mode: FeedMode,
    phase: Phase,
    policy: SpinPolicy,
    /// A poll request for the fd is in the kernel.
    poll_in_flight: bool,
    /// The fd fired and its events were not taken yet.
    fd_ready: bool,
    /// Being removed: waiting for the in-flight poll to end.
    removing: Option<mpsc::Sender<Box<dyn Any + Send>>>,
}

enum Command {
    Register {
        source: Box<dyn Source>,
        mode: FeedMode,
        reply: mpsc::Sender<io::Result<FeedKey>>,
    },
    Remove {
        key: FeedKey,
        reply: mpsc::Sender<Box<dyn Any + Send>>,
    },
}

struct Shared {
    commands: Mutex<VecDeque<Command>>,
    /// Set with every command and kick, so the driver looks at the queue
    /// only when there is something in it.
    pending: AtomicBool,
    kick: AtomicBool,
    stop: AtomicBool,
    wake: OwnedFd,
}

impl Shared {
    fn wake(&self) {
        signal_eventfd(&self.wake);
    }
}

/// A handle to a driver, usable from any thread: register and remove feeds,
/// kick blocked feeds.
///
/// ```
/// use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, soft::SoftCq};
/// let (poster, _consumer) = evd::bounded(16).unwrap();
/// let running = Driver::new(DriverConfig::default()).unwrap().spawn().unwrap();
/// let handle = running.handle().clone();
/// let (cq, hca) = SoftCq::new(16).unwrap();
/// let key = handle.register(Feed::new(cq, CqId(1), poster), FeedMode::Event).unwrap();
/// handle.kick();
/// let feed = handle.remove(key).unwrap().downcast::<Feed<SoftCq>>().unwrap();
/// drop(feed); // acks its CQ events, then destroys the CQ
/// assert_eq!(hca.stats().unacked_at_destroy, Some(0));
/// running.shutdown().unwrap();
/// ```
#[derive(Clone)]
pub struct DriverHandle {
    shared: Arc<Shared>,
}

/// While busy, enter the kernel once per this many turns.
const BUSY_TURNS_PER_ENTER: u32 = 32;

const KIND_FEED: u64 = 1;
const KIND_WAKE: u64 = 2;
const KIND_CANCEL: u64 = 3;

fn user_data(kind: u64, key: FeedKey) -> u64 {
    (kind << 56) | (u64::from(key.generation & 0x00ff_ffff) << 32) | u64::from(key.index)
}

fn decode(ud: u64) -> (u64, u32, u32) {
    (ud >> 56, ((ud >> 32) & 0x00ff_ffff) as u32, ud as u32)
}

/// What one [`Driver::process`] call left behind.
///
/// ```
/// let mut driver = evd_verbs::Driver::new(Default::default()).unwrap();
/// let a = driver.process(Some(std::time::Duration::ZERO)).unwrap();
/// assert_eq!(a.next_deadline, None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    /// Some feed has work now (draining, spinning, woken): call `process`
    /// again without waiting.
    pub busy: bool,
    /// The earliest backpressure retry: call `process` again by then.
    pub next_deadline: Option<Instant>,
}

/// One io_uring ring serving many feeds: it waits on every feed's channel fd
/// (`POLL_ADD`, multishot where the kernel has it) and runs the event-driven
/// or adaptive cycle of the feeds that are ready, `budget` completions each
/// per turn. Run it on its own thread ([`Driver::spawn`]) or from your loop
/// ([`Driver::process`], waiting on [`Driver::as_raw_fd`]).
///
/// A feed stopped by a full EVD is not re-armed (its completions wait in the
/// CQ) and is retried on a timer: after [`DriverConfig::retry_min`], doubling
/// up to [`DriverConfig::retry_max`] while the EVD stays full; the wait is the
/// ring's own timed wait, never a spin. [`DriverHandle::kick`] retries at once.
///
/// ```
/// use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
/// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
/// let (cq, producer) = SoftCq::new(64).unwrap();
/// let mut driver = Driver::new(DriverConfig::default()).unwrap();
/// driver.register(Feed::new(cq, CqId(7), poster), FeedMode::Event).unwrap();
/// let running = driver.spawn().unwrap();
/// producer.push(WorkCompletion { wr_id: 1, ..Default::default() }).unwrap();
/// consumer.wait(1, None).unwrap();
/// assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Completion { cq: CqId(7), .. })));
/// let stopped = running.shutdown().unwrap();
/// assert_eq!(stopped.feeds.len(), 1);
/// assert_eq!(producer.stats().unacked_at_destroy, None); // CQ handed back, not destroyed
/// ```
pub struct Driver {
    ring: IoUring,
    cfg: DriverConfig,
    slots: Vec<Option<Slot>>,
    generations: Vec<u32>,
    shared: Arc<Shared>,
    wake_poll_in_flight: bool,
    multishot: bool,
    /// Round-robin start, so no feed is always served first.
    cursor: usize,
    busy: bool,
    /// Turns taken without waiting (see `submit_and_wait`).
    busy_turns: u32,
    /// Poll requests to submit (kept to reuse its allocation).
    pending_polls: Vec<(RawFd, FeedKey)>,
}

impl Driver {
    /// A driver with its own ring.
    pub fn new(cfg: DriverConfig) -> io::Result<Self> {
        let ring = IoUring::builder()
            .setup_cqsize(cfg.ring_entries * 2)
            .build(cfg.ring_entries)?;
        Ok(Driver {
            ring,
            cfg,
            slots: Vec::new(),
            generations: Vec::new(),
            shared: Arc::new(Shared {
                commands: Mutex::new(VecDeque::new()),
                pending: AtomicBool::new(false),
                kick: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                wake: new_eventfd()?,
            }),
            wake_poll_in_flight: false,
            multishot: true,
            cursor: 0,
            busy: false,
            busy_turns: 0,
            pending_polls: Vec::new(),
        })
    }

    /// A handle for other threads.
    pub fn handle(&self) -> DriverHandle {
        DriverHandle {
            shared: self.shared.clone(),
        }
    }

    /// Serve a completion feed. Its CQ must have a completion channel.
    pub fn register<C: CompletionQueue + 'static>(
        &mut self,
        feed: Feed<C>,
        mode: FeedMode,
    ) -> io::Result<FeedKey> {
        self.insert(Box::new(feed), mode)
    }

    /// Serve an async-event feed (always event-driven).
    pub fn register_async<S: AsyncEventSource + 'static>(
        &mut self,
        feed: AsyncFeed<S>,
    ) -> io::Result<FeedKey> {
        self.insert(Box::new(feed), FeedMode::Event)
    }

    fn insert(&mut self, source: Box<dyn Source>, mode: FeedMode) -> io::Result<FeedKey> {
        if source.fd().is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the driver needs a CQ with a completion channel",
            ));
        }
        let index = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                self.slots.len() - 1
            }
        };
        self.generations[index] = self.generations[index].wrapping_add(1) & 0x00ff_ffff;
        let generation = self.generations[index];
        let policy = SpinPolicy::new(match mode {
            FeedMode::Adaptive(c) => c,
            FeedMode::Event => AdaptiveConfig::default(),
        });
        self.slots[index] = Some(Slot {
            source,
            generation,
            mode,
            phase: Phase::Arm,
            policy,
            poll_in_flight: false,
            fd_ready: false,
            removing: None,
        });
        self.busy = true;
        Ok(FeedKey {
            index: index as u32,
            generation,
        })
    }

    /// Stop serving a feed and hand it back (downcast it to the `Feed<C>` or
    /// `AsyncFeed<S>` registered). Waits for the ring to let go of its fd.
    /// Dropping the result acknowledges its CQ events, then destroys the CQ.
    pub fn remove(&mut self, key: FeedKey) -> io::Result<Box<dyn Any + Send>> {
        let (tx, rx) = mpsc::channel();
        if !self.begin_remove(key, tx)? {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such feed"));
        }
        loop {
            if let Ok(f) = rx.try_recv() {
                return Ok(f);
            }
            self.process(Some(Duration::from_millis(100)))?;
        }
    }

    fn slot_mut(&mut self, key: FeedKey) -> Option<&mut Slot> {
        self.slots
            .get_mut(key.index as usize)?
            .as_mut()
            .filter(|s| s.generation == key.generation)
    }

    fn begin_remove(
        &mut self,
        key: FeedKey,
        reply: mpsc::Sender<Box<dyn Any + Send>>,
    ) -> io::Result<bool> {
        let Some(slot) = self.slot_mut(key) else {
            return Ok(false);
        };
        if slot.poll_in_flight {
            slot.removing = Some(reply);
            let cancel = opcode::AsyncCancel::new(user_data(KIND_FEED, key))
                .build()
                .user_data(user_data(KIND_CANCEL, key));
            self.push_sqe(&cancel)?;
        } else {
            let slot = self.slots[key.index as usize]
                .take()
                .expect("checked above");
            let _ = reply.send(slot.source.into_any());
        }
        Ok(true)
    }

    /// The ring's fd: readable when [`Driver::process`] has completions to
    /// handle. Wait on it (epoll, poll) in your own loop, unless the last
    /// `process` reported [`Activity::busy`] or a deadline.
    pub fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// One turn: apply commands, handle ring completions, run every feed
    /// that has work, submit poll requests, and wait up to `timeout` (`None`:
    /// until something happens) if no feed has work now.
    ///
    /// Driving the ring from your own loop:
    ///
    /// ```
    /// use evd_verbs::{Driver, DriverConfig, Feed, FeedMode, CqId, WorkCompletion, soft::SoftCq};
    /// use std::time::Duration;
    /// let (poster, mut consumer) = evd::bounded(16).unwrap();
    /// let (cq, hca) = SoftCq::new(16).unwrap();
    /// let mut driver = Driver::new(DriverConfig::default()).unwrap();
    /// driver.register(Feed::new(cq, CqId(0), poster), FeedMode::Event).unwrap();
    /// driver.process(Some(Duration::ZERO)).unwrap(); // arms the CQ, queues the channel poll
    /// hca.push(WorkCompletion::default()).unwrap();
    /// // Your loop would wait on `driver.as_raw_fd()` (epoll, poll) here.
    /// while consumer.query().len == 0 {
    ///     driver.process(Some(Duration::from_millis(10))).unwrap();
    /// }
    /// assert!(consumer.try_dequeue().is_ok());
    /// ```
    pub fn process(&mut self, timeout: Option<Duration>) -> io::Result<Activity> {
        self.apply_commands()?;
        self.reap()?;
        self.run_feeds()?;
        let activity = self.activity();
        let wait = if activity.busy {
            Some(Duration::ZERO)
        } else {
            let until_deadline = activity
                .next_deadline
                .map(|d| d.saturating_duration_since(Instant::now()));
            match (timeout, until_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
        self.submit_and_wait(wait)?;
        self.apply_commands()?;
        self.reap()?;
        self.run_feeds()?;
        Ok(self.activity())
    }

    fn activity(&self) -> Activity {
        let mut next_deadline: Option<Instant> = None;
        for slot in self.slots.iter().flatten() {
            if let Phase::Blocked { at, .. } = slot.phase {
                next_deadline = Some(next_deadline.map_or(at, |d| d.min(at)));
            }
        }
        Activity {
            busy: self.busy,
            next_deadline,
        }
    }

    fn apply_commands(&mut self) -> io::Result<()> {
        // Acquire pairs with the Release in `DriverHandle::send`: the command
        // queued before the flag was set is visible (the mutex also orders it).
        if !self.shared.pending.swap(false, Ordering::Acquire) {
            return Ok(());
        }
        if self.shared.kick.swap(false, Ordering::Relaxed) {
            let now = Instant::now();
            for slot in self.slots.iter_mut().flatten() {
                if let Phase::Blocked { delay, .. } = slot.phase {
                    slot.phase = Phase::Blocked { at: now, delay };
                }
            }
        }
        let commands: Vec<Command> = {
            let mut q = self
                .shared
                .commands
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            q.drain(..).collect()
        };
        for c in commands {
            match c {
                Command::Register {
                    source,
                    mode,
                    reply,
                } => {
                    let _ = reply.send(self.insert(source, mode));
                }
                Command::Remove { key, reply } => {
                    // A reply channel dropped unanswered tells the caller the
                    // key was unknown.
                    self.begin_remove(key, reply)?;
                }
            }
        }
        Ok(())
    }

    fn push_sqe(&mut self, sqe: &io_uring::squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the entries reference no user memory (poll and cancel
            // requests carry only an fd and a user_data value).
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            // Submission queue full: hand what is queued to the kernel.
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EINTR)) => {
                    // Completion queue full: make room by handling completions.
                    self.reap()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn poll_sqe(&self, fd: RawFd, ud: u64) -> io_uring::squeue::Entry {
        opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(self.multishot)
            .build()
            .user_data(ud)
    }

    fn submit_and_wait(&mut self, wait: Option<Duration>) -> io::Result<()> {
        if !self.wake_poll_in_flight {
            let sqe = self.poll_sqe(
                self.shared.wake.as_raw_fd(),
                user_data(
                    KIND_WAKE,
                    FeedKey {
                        index: 0,
                        generation: 0,
                    },
                ),
            );
            self.push_sqe(&sqe)?;
            self.wake_poll_in_flight = true;
        }
        let r = match wait {
            Some(d) if d.is_zero() => {
                // While feeds are busy (draining, spinning) the loop comes
                // here back to back. Enter the kernel only to submit, or
                // every few turns to collect other feeds' readiness: an enter
                // per turn would cost a spinning feed a syscall per poll.
                self.busy_turns += 1;
                if self.ring.submission().is_empty() && self.busy_turns % BUSY_TURNS_PER_ENTER != 0
                {
                    return Ok(());
                }
                self.ring.submit()
            }
            Some(d) => {
                let ts = types::Timespec::new()
                    .sec(d.as_secs())
                    .nsec(d.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            None => self.ring.submit_and_wait(1),
        };
        match r {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn reap(&mut self) -> io::Result<()> {
        let Driver {
            ring,
            slots,
            shared,
            wake_poll_in_flight,
            multishot,
            busy,
            ..
        } = self;
        for cqe in ring.completion() {
            let (ud, res) = (cqe.user_data(), cqe.result());
            let more = cqueue::more(cqe.flags());
            let (kind, generation, index) = decode(ud);
            match kind {
                KIND_WAKE => {
                    if !more {
                        *wake_poll_in_flight = false;
                    }
                    if res == -libc::EINVAL && *multishot {
                        *multishot = false;
                    }
                    clear_eventfd(&shared.wake);
                    *busy = true;
                }
                KIND_FEED => {
                    let Some(Some(slot)) = slots.get_mut(index as usize) else {
                        continue;
                    };
                    if slot.generation != generation {
                        continue;
                    }
                    if !more {
                        slot.poll_in_flight = false;
                    }
                    if let Some(reply) = slot.removing.take() {
                        if slot.poll_in_flight {
                            slot.removing = Some(reply);
                        } else {
                            let slot = slots[index as usize].take().expect("present");
                            let _ = reply.send(slot.source.into_any());
                        }
                        continue;
                    }
                    if res == -libc::EINVAL && *multishot {
                        // A kernel without multishot poll (before 5.13).
                        *multishot = false;
                        continue;
                    }
                    if res < 0 && res != -libc::ECANCELED {
                        return Err(io::Error::from_raw_os_error(-res));
                    }
                    if res >= 0 {
                        slot.fd_ready = true;
                        if slot.phase == Phase::Sleeping {
                            slot.phase = Phase::Woken;
                        }
                        *busy = true;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn run_feeds(&mut self) -> io::Result<()> {
        let n = self.slots.len();
        let mut busy = false;
        let now = Instant::now();
        let budget = self.cfg.budget;
        let mut polls = std::mem::take(&mut self.pending_polls);
        for k in 0..n {
            let index = (self.cursor + k) % n;
            let Some(slot) = self.slots[index].as_mut() else {
                continue;
            };
            if slot.removing.is_some() {
                continue;
            }
            step(slot, now, budget, &self.cfg)?;
            match slot.phase {
                Phase::Sleeping => {
                    if !slot.poll_in_flight {
                        slot.poll_in_flight = true;
                        let key = FeedKey {
                            index: index as u32,
                            generation: slot.generation,
                        };
                        polls.push((slot.source.fd().expect("checked at insert"), key));
                    }
                }
                Phase::Blocked { .. } | Phase::Done => {}
                _ => busy = true,
            }
        }
        for (fd, key) in polls.drain(..) {
            let sqe = self.poll_sqe(fd, user_data(KIND_FEED, key));
            self.push_sqe(&sqe)?;
        }
        self.pending_polls = polls;
        self.cursor = self.cursor.wrapping_add(1);
        self.busy = busy;
        Ok(())
    }

    /// Run on a new thread until [`RunningDriver::shutdown`].
    pub fn spawn(self) -> io::Result<RunningDriver> {
        let handle = self.handle();
        let thread = std::thread::Builder::new()
            .name("evd-verbs-driver".into())
            .spawn(move || self.run())?;
        Ok(RunningDriver {
            handle,
            thread: Some(thread),
        })
    }

    fn run(mut self) -> io::Result<Shutdown> {
        while !self.shared.stop.load(Ordering::Acquire) {
            self.process(None)?;
        }
        let keys: Vec<FeedKey> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.as_ref().map(|s| FeedKey {
                    index: i as u32,
                    generation: s.generation,
                })
            })
            .collect();
        let mut feeds = Vec::with_capacity(keys.len());
        for key in keys {
            feeds.push((key, self.remove(key)?));
        }
        Ok(Shutdown {
            feeds,
            cpu_time: crate::thread_cpu_time(),
        })
    }
}

/// One step of a feed's cycle.
fn step(slot: &mut Slot, now: Instant, budget: usize, cfg: &DriverConfig) -> io::Result<()> {
    let adaptive = matches!(slot.mode, FeedMode::Adaptive(_));
    let src = &mut slot.source;
    if slot.fd_ready && slot.phase != Phase::Woken && slot.phase != Phase::Sleeping {
        // The fd fired while the feed was not sleeping: take the events now,
        // so the channel is empty again and its next event wakes the poll.
        slot.fd_ready = false;
        src.take_events()?;
    }
    slot.phase = match slot.phase {
        Phase::Sleeping | Phase::Done => return Ok(()),
        Phase::Blocked { at, .. } if at > now => return Ok(()),
        Phase::Blocked { delay, .. } => {
            let p = src.arm_and_drain(budget)?;
            after_arm(p, now, delay, cfg)
        }
        Phase::Arm | Phase::Draining => {
            let p = src.arm_and_drain(budget)?;
            if adaptive && p.delivered > 0 && p.status != FeedStatus::Backpressure {
                slot.policy.found(now);
                if slot.policy.should_spin() {
                    // Completions came in while arming: keep polling.
                    Phase::Spinning {
                        until: now + slot.policy.spin(),
                    }
                } else {
                    after_arm(p, now, cfg.retry_min, cfg)
                }
            } else {
                after_arm(p, now, cfg.retry_min, cfg)
            }
        }
        Phase::Woken => {
            slot.fd_ready = false;
            src.take_events()?;
            if adaptive {
                slot.policy.woken(now);
                if slot.policy.should_spin() {
                    let p = src.progress(budget);
                    match p.status {
                        FeedStatus::Backpressure | FeedStatus::Closed | FeedStatus::Failed => {
                            after_arm(p, now, cfg.retry_min, cfg)
                        }
                        _ => Phase::Spinning {
                            until: now + slot.policy.spin(),
                        },
                    }
                } else {
                    let p = src.arm_and_drain(budget)?;
                    after_arm(p, now, cfg.retry_min, cfg)
                }
            } else {
                let p = src.arm_and_drain(budget)?;
                after_arm(p, now, cfg.retry_min, cfg)
            }
        }
        Phase::Spinning { until } => {
            let p = src.progress(budget);
            match p.status {
                FeedStatus::Backpressure | FeedStatus::Closed | FeedStatus::Failed => {
                    after_arm(p, now, cfg.retry_min, cfg)
                }
                _ if p.delivered > 0 => {
                    slot.policy.found(now);
                    Phase::Spinning {
                        until: now + slot.policy.spin(),
                    }
                }
                _ if now < until => Phase::Spinning { until },
                _ => {
                    slot.policy.expired();
                    Phase::Arm
                }
            }
        }
    };
    Ok(())
}

/// The phase after an arm-and-drain (or a refused spin) returned `p`.
fn after_arm(p: Progress, now: Instant, delay: Duration, cfg: &DriverConfig) -> Phase {
    match p.status {
        FeedStatus::Drained => Phase::Sleeping,
        FeedStatus::Budget => Phase::Draining,
        FeedStatus::Backpressure => {
            // Retry sooner again once the EVD has moved; back off while not.
            let delay = if p.delivered > 0 {
                cfg.retry_min
            } else {
                (delay * 2).min(cfg.retry_max).max(cfg.retry_min)
            };
            Phase::Blocked {
                at: now + delay,
                delay,
            }
        }
        FeedStatus::Closed | FeedStatus::Failed => Phase::Done,
    }
}

impl DriverHandle {
    fn send(&self, c: Command) {
        self.shared
            .commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(c);
        self.shared.pending.store(true, Ordering::Release);
        self.shared.wake();
    }

    /// Register a completion feed with the running driver.
    pub fn register<C: CompletionQueue + 'static>(
        &self,
        feed: Feed<C>,
        mode: FeedMode,
    ) -> io::Result<FeedKey> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Register {
            source: Box::new(feed),
            mode,
            reply: tx,
        });
        rx.recv()
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "driver stopped"))?
    }

    /// Register an async-event feed with the running driver.
    pub fn register_async<S: AsyncEventSource + 'static>(
        &self,
        feed: AsyncFeed<S>,
    ) -> io::Result<FeedKey> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Register {
            source: Box::new(feed),
            mode: FeedMode::Event,
            reply: tx,
        });
        rx.recv()
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "driver stopped"))?
    }

    /// Remove a feed from the running driver and hand it back (see
    /// [`Driver::remove`]). When this returns, the driver will never touch
    /// the feed again, so no post and no upcall from it can follow.
    pub fn remove(&self, key: FeedKey) -> io::Result<Box<dyn Any + Send>> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Remove { key, reply: tx });
        rx.recv()
            .map_err(|_| io::Error::new(io::ErrorKind::NotFound, "no such feed, or driver stopped"))
    }

    /// Retry feeds blocked on a full EVD now (call after draining the EVD).
    pub fn kick(&self) {
        self.shared.kick.store(true, Ordering::Relaxed);
        self.shared.pending.store(true, Ordering::Release);
        self.shared.wake();
    }
}

/// A driver running on its own thread. Dropping it shuts it down (and drops
/// its feeds, acknowledging their events, on that thread) and joins it.
///
/// ```
/// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
/// drop(running); // stops and joins
/// ```
pub struct RunningDriver {
    handle: DriverHandle,
    thread: Option<JoinHandle<io::Result<Shutdown>>>,
}

/// A shut-down driver's feeds and the CPU time its thread used.
///
/// ```
/// let running = evd_verbs::Driver::new(Default::default()).unwrap().spawn().unwrap();
/// let s = running.shutdown().unwrap();
/// assert!(s.feeds.is_empty());
/// ```
pub struct Shutdown {
    /// The feeds that were registered, with their keys.
    pub feeds: Vec<(FeedKey, Box<dyn Any + Send>)>,
    /// CPU time of the driver thread.
    pub cpu_time: Duration,
}

impl RunningDriver {
    /// A handle to the running driver.
    pub fn handle(&self) -> &DriverHandle {
        &self.handle
    }

    /// Stop the driver, join its thread, and hand back its feeds (each
    /// removed from the ring first). Returns the thread's error if it failed.
    pub fn shutdown(mut self) -> io::Result<Shutdown> {
        self.stop_and_join()
            .expect("thread present until shut down")
    }

    fn stop_and_join(&mut self) -> Option<io::Result<Shutdown>> {
        self.handle.shared.stop.store(true, Ordering::Release);
        self.handle.shared.wake();
        let t = self.thread.take()?;
        Some(match t.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        })
    }
}

impl Drop for RunningDriver {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.handle.shared.stop.store(true, Ordering::Release);
            self.handle.shared.wake();
        } else {
            drop(self.stop_and_join());
        }
    }
}
