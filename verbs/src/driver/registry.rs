//! Registering feeds with a [`Driver`] and removing them: the slots, their
//! generations, and handing a removed feed back.

use super::control::{self, Command, downcast};
use super::cycle::Phase;
use super::error::Panic;
use super::slot::{Removal, RoomSignal, Slot};
use super::source::Source;
use super::{Activity, Driver, DriverError, FeedId, FeedKey, FeedMode, SpinPolicy};
use crate::event::{CmEvent, VerbsEvent};
use crate::feed::{AsyncFeed, ChannelFeed, CmFeed, Feed};
use crate::source::{AsyncEventSource, CmEventSource, CompletionQueue, SharedChannel};
use crate::trace;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::task::Waker;

impl Driver {
    /// Serve a completion feed. Its CQ must have a completion channel
    /// ([`DriverError::NoChannel`] otherwise).
    ///
    /// If nobody consumes the async events of the CQ's device yet
    /// ([`CompletionQueue::device_events`]), the driver serves them too, into
    /// this feed's EVD: a CQ overrun (which rxe reports only there, without
    /// failing the poll) or a fatal device error reaches the consumer even
    /// with no [`AsyncFeed`] registered. They are served as long as this
    /// feed is and its EVD is open: its removal stops them at once (nothing
    /// of the device reaches its EVD after that), its EVD's close at the
    /// device's next event (which stays in the device), and the driver then
    /// offers them to its own feeds left, the first on a device nobody
    /// listens to taking them into its EVD (not to another driver's feeds
    /// on the device, which took nothing when they were registered: serve
    /// one device's CQs from one driver, or give the device an
    /// [`AsyncFeed`] of your own); a shutdown gives them back to the
    /// device. An event of the device taken but not yet
    /// posted when the removal begins or the EVD closes (the EVD was full)
    /// is dropped with that feed of the driver's. To deliver them
    /// elsewhere, take them first
    /// (`ibv::Context::async_events`,
    /// [`SoftDevice::take_events`](crate::soft::SoftDevice::take_events)).
    ///
    /// The feed posts into an EVD of any event type `T` (see [`Feed`]); the
    /// key names that type, so [`Driver::remove`] hands back a `Feed<C, T>`.
    ///
    /// ```
    /// use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
    /// struct Logged(VerbsEvent);
    /// impl From<VerbsEvent> for Logged {
    ///     fn from(ev: VerbsEvent) -> Self { Logged(ev) }
    /// }
    /// let (poster, _consumer) = evd::bounded::<Logged>(16).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let key = driver.register(Feed::new(SoftCq::new(16).unwrap().0, CqId(0), poster), FeedMode::Event).unwrap();
    /// let _feed: Feed<SoftCq, Logged> = driver.remove(key).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`DriverError::NoChannel`] if the CQ has no completion channel (busy
    /// poll such a feed with [`Feed::progress`] or a
    /// [`Poller`](crate::Poller)); [`DriverError::FdInUse`] if another feed
    /// of this driver waits on its channel's fd (a channel a
    /// [`ChannelFeed`] serves). The feed is dropped.
    pub fn register<C, T>(
        &mut self,
        feed: Feed<C, T>,
        mode: FeedMode,
    ) -> Result<FeedKey<Feed<C, T>>, DriverError>
    where
        C: CompletionQueue + 'static,
        T: From<VerbsEvent> + Send + 'static,
    {
        self.insert(Box::new(feed), mode)
            .map(|id| FeedKey::new(id, self.shared.serial))
    }

    /// Serve the CQs of one shared completion channel as one feed: the
    /// driver waits on the channel's one fd and the feed demultiplexes its
    /// events (see [`ChannelFeed`]). [`FeedMode::Event`] and
    /// [`FeedMode::Adaptive`] both work; [`Driver::remove`] hands the
    /// [`ChannelFeed`] back, every CQ in it. As for [`register`](Self::register),
    /// the device's async events are served too if nobody consumes them.
    ///
    /// ```
    /// use evd_verbs::{ChannelFeed, CqId, Driver, FeedMode, VerbsEvent, WorkCompletion, soft::SoftChannel};
    /// let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    /// let channel = SoftChannel::new().unwrap();
    /// let mut feed = ChannelFeed::new(channel.clone(), poster);
    /// let mut hcas = Vec::new();
    /// for i in 0..4 {
    ///     let (cq, hca) = channel.create_cq(16).unwrap();
    ///     feed.add(cq, CqId(i)).unwrap();
    ///     hcas.push(hca);
    /// }
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let key = driver.register_channel(feed, FeedMode::Event).unwrap();
    /// let running = driver.spawn().unwrap();
    /// for (i, hca) in hcas.iter().enumerate() {
    ///     hca.push(WorkCompletion::new(i as u64)).unwrap();
    /// }
    /// let mut seen = [false; 4];
    /// for _ in 0..4 {
    ///     match consumer.dequeue().unwrap() {
    ///         VerbsEvent::Completion { cq, wc } => {
    ///             assert_eq!(u64::from(cq.0), wc.wr_id);
    ///             seen[cq.0 as usize] = true;
    ///         }
    ///         other => panic!("{other:?}"),
    ///     }
    /// }
    /// assert_eq!(seen, [true; 4]);
    /// let mut stopped = running.shutdown().unwrap();
    /// let feed: ChannelFeed<SoftChannel> = stopped.take(key).unwrap();
    /// assert_eq!(feed.len(), 4);
    /// ```
    ///
    /// # Errors
    /// [`DriverError::FdInUse`] if another feed of this driver waits on the
    /// channel's fd (a second channel feed on a clone of the channel, or a
    /// feed of one of its CQs); the feed is dropped.
    pub fn register_channel<H, T>(
        &mut self,
        feed: ChannelFeed<H, T>,
        mode: FeedMode,
    ) -> Result<FeedKey<ChannelFeed<H, T>>, DriverError>
    where
        H: SharedChannel + 'static,
        H::Cq: 'static,
        T: From<VerbsEvent> + Send + 'static,
    {
        self.insert(Box::new(feed), mode)
            .map(|id| FeedKey::new(id, self.shared.serial))
    }

    /// Serve an async-event feed (always event-driven).
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, Driver, VerbsEvent, soft::SoftDevice};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let (events, _device) = SoftDevice::new().unwrap();
    /// let key = driver.register_async(AsyncFeed::new(events, poster)).unwrap();
    /// let _feed = driver.remove(key).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`DriverError::FdInUse`] if another feed of this driver waits on the
    /// source's fd (the feed is dropped).
    pub fn register_async<S, T>(
        &mut self,
        feed: AsyncFeed<S, T>,
    ) -> Result<FeedKey<AsyncFeed<S, T>>, DriverError>
    where
        S: AsyncEventSource + 'static,
        T: From<VerbsEvent> + Send + 'static,
    {
        self.insert(Box::new(feed), FeedMode::Event)
            .map(|id| FeedKey::new(id, self.shared.serial))
    }

    /// Serve a connection-manager feed (always event-driven): its events
    /// reach the feed's EVD in the channel's order, beside the completions
    /// and async events the same driver delivers.
    ///
    /// ```
    /// use evd_verbs::{CmEvent, CmEventKind, CmFeed, Driver, soft::SoftCm};
    /// let (poster, mut consumer) = evd::bounded::<CmEvent>(16).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let (events, cm) = SoftCm::new().unwrap();
    /// driver.register_cm(CmFeed::new(events, poster)).unwrap();
    /// cm.raise(CmEvent::new(CmEventKind::Established, evd_verbs::CmToken(0)));
    /// while consumer.try_dequeue().is_err() {
    ///     driver.process(None).unwrap();
    /// }
    /// ```
    ///
    /// # Errors
    /// [`DriverError::FdInUse`] if another feed of this driver waits on the
    /// source's fd (the feed is dropped).
    pub fn register_cm<S, T>(
        &mut self,
        feed: CmFeed<S, T>,
    ) -> Result<FeedKey<CmFeed<S, T>>, DriverError>
    where
        S: CmEventSource + 'static,
        T: From<CmEvent> + Send + 'static,
    {
        self.insert(Box::new(feed), FeedMode::Event)
            .map(|id| FeedKey::new(id, self.shared.serial))
    }

    pub(super) fn insert(
        &mut self,
        source: Box<dyn Source>,
        mode: FeedMode,
    ) -> Result<FeedId, DriverError> {
        // The feed's code runs here (its device's events, its drop on a
        // refusal, which the callee's parameter outlives its locals for):
        // a handle call it makes is refused, not left waiting for this
        // thread.
        let shared = self.shared.clone();
        let _driving = shared.driving();
        self.insert_driving(source, mode)
    }

    fn insert_driving(
        &mut self,
        mut source: Box<dyn Source>,
        mode: FeedMode,
    ) -> Result<FeedId, DriverError> {
        let Some(fd) = source.fd() else {
            return Err(DriverError::NoChannel);
        };
        if let Some(feed) = self.feed_on(fd) {
            return Err(DriverError::FdInUse { feed });
        }
        let watched_awake = source.watched_awake();
        // Everything that runs the feed's own code, or could fail, before
        // the nested insert of its device's feed: nothing after it may leave
        // that feed registered alone.
        let policy = match mode {
            FeedMode::Adaptive(c) => Some(SpinPolicy::new(c)),
            FeedMode::Event => None,
        };
        let device_feed = match source.device_feed() {
            // Nobody listens to the CQ's device: deliver its async events
            // (an overrun among them) into this feed's EVD.
            Some(f) => Some(self.insert(f, FeedMode::Event)?),
            None => None,
        };
        let index = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                self.slots.len() - 1
            }
        };
        // 64 bits: no slot is registered into 2^64 times.
        let generation = self.generations[index] + 1;
        self.generations[index] = generation;
        let room = Arc::new(RoomSignal {
            signalled: AtomicBool::new(false),
            shared: self.shared.clone(),
        });
        self.slots[index] = Some(Slot {
            source,
            generation,
            fd,
            watched_awake,
            policy,
            phase: Phase::Arm,
            poll_in_flight: false,
            fd_checked: false,
            poll_spent: false,
            fd_fired: false,
            room_waker: Waker::from(room.clone()),
            room,
            room_ready: false,
            // A feed may come waiting for room already (its owner polled
            // it): its first turn leaves that place or takes it again.
            seated: true,
            removing: None,
            last_failure: None,
            given_up: false,
            device_feed,
        });
        self.busy = true;
        let id = FeedId {
            index: index as u32,
            generation,
        };
        trace::event!(DEBUG, feed = ?id, ?mode, "feed registered");
        // Its first turn arms it: a caller's loop that waits on the fd
        // before its next `process` must be woken for it.
        self.shared.wake();
        Ok(id)
    }

    /// Stop serving a feed and hand it back. Waits for the ring to let go of
    /// its fd, and of the device feed's the driver added for it (dropped
    /// then: its device's events are given back, and no poster of the
    /// feed's EVD is left in the driver; unless the backend refuses that
    /// device feed's cancellation, asked again every turn: then not waited
    /// for). Dropping the feed acknowledges its
    /// CQ events, then destroys the CQ.
    ///
    /// ```
    /// use evd_verbs::{AsyncFeed, Driver, VerbsEvent, soft::{SoftAsyncEvents, SoftDevice}};
    /// let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    /// let mut driver = Driver::new(Default::default()).unwrap();
    /// let key = driver.register_async(AsyncFeed::new(SoftDevice::new().unwrap().0, poster)).unwrap();
    /// let feed: AsyncFeed<SoftAsyncEvents, VerbsEvent> = driver.remove(key).unwrap();
    /// # drop(feed);
    /// ```
    ///
    /// # Errors
    /// [`DriverError::NoSuchFeed`] if the key names no feed of this driver
    /// (removed already, or another driver's key). [`DriverError::Io`] if
    /// the backend failed: refusing the cancellation of the feed's poll (the
    /// feed then stays registered and served, as before the call), or while
    /// this call waited for it to let go of the feed's fd or of its device
    /// feed's (the removal is then under way, the feed perhaps handed back
    /// already: call `remove` again with the key to finish it and get the
    /// feed).
    ///
    /// # Panics
    /// Not because of a handler: waiting for the ring, this call gives the
    /// other feeds their turns, and a panic in one is caught, counted and
    /// reported by the next [`Driver::process`] (see its Panics section).
    pub fn remove<F: 'static>(&mut self, key: FeedKey<F>) -> Result<F, DriverError> {
        // Feeds' code runs here (a device feed let go of, the other feeds'
        // turns): a handle call it makes is refused, not left waiting for
        // this thread.
        let shared = self.shared.clone();
        let _driving = shared.driving();
        let id = key.id();
        if !key.is_of(self.shared.serial) {
            return Err(DriverError::NoSuchFeed);
        }
        // A removal this call began before its wait failed goes on.
        if !self.removing_here(id) && !self.begin_remove(id, Removal::Local)? {
            return Err(DriverError::NoSuchFeed);
        }
        // The device feed it brought, stopped with it: dropped once its own
        // poll ends, which this call (or its retry) waits for too: it holds
        // a poster of the feed's EVD, and its device's events.
        let device_feed = self
            .stopped_device_feeds
            .iter()
            .find(|(parent, _)| *parent == id)
            .map(|&(_, child)| child);
        loop {
            let handed_back = self.removed.iter().position(|(r, _)| *r == id);
            if let Some(i) = handed_back.filter(|_| !self.device_feed_lingers(device_feed)) {
                self.stopped_device_feeds
                    .retain(|(parent, _)| *parent != id);
                self.show_pending_work();
                return Ok(downcast(self.removed.swap_remove(i).1));
            }
            // The cancellation's completion ends this wait; the timeout only
            // bounds it should the kernel be slow to report it. A panic
            // caught meanwhile is kept for the next `process` to report: it
            // must not leave this removal half done. A failed step may
            // have left work no flag shows (a feed's fd poll refused):
            // the fd is made readable, as by a failed `process`.
            if let Err(e) = self.cancellation_step() {
                self.show_work_left_by_a_failure();
                return Err(e);
            }
        }
    }

    /// The device feed `id` (a removed feed's) is still in its slot, waiting
    /// for its poll's end, and not for a cancellation the backend refused
    /// (asked again every turn: not waited for, lest a lasting refusal hold
    /// the removal for ever).
    fn device_feed_lingers(&self, id: Option<FeedId>) -> bool {
        let Some(id) = id else { return false };
        let in_slot = self
            .slots
            .get(id.index as usize)
            .is_some_and(|s| s.as_ref().is_some_and(|s| s.generation == id.generation));
        in_slot && !self.cancels_owed.contains(&id)
    }

    /// The turns of a removal's wait serve every feed, and may leave work
    /// the driver's fd does not show (a feed woken and left to re-arm,
    /// readiness a busy turn collected, a failure or panic to report, a
    /// handle's command): what the caller's `process` would have reported
    /// as busy, or a cancellation still owed. Hand on what is queued, and
    /// make the fd readable for it, so that a loop that waits on the fd
    /// next is woken. A flush the backend refuses leaves its requests
    /// queued for the next step, which reports the failure: the fd is
    /// woken all the same.
    fn show_pending_work(&mut self) {
        let flushed = self.backend.flush().is_ok();
        let pending = !flushed
            || self.busy
            || self.backend.collected()
            || self.shared.commands_pending()
            || self.caught.is_some()
            || self.failed.is_some()
            || !self.cancels_owed.is_empty();
        if pending {
            self.shared.wake();
        }
    }

    /// One step of a wait for cancellations to end ([`Driver::remove`]'s,
    /// a shutdown's).
    #[cfg(not(test))]
    pub(super) fn cancellation_step(&mut self) -> Result<Activity, DriverError> {
        self.step(super::StepWait::Bounded)
    }

    /// One step of a wait for cancellations to end, unless a test has it
    /// fail.
    #[cfg(test)]
    pub(super) fn cancellation_step(&mut self) -> Result<Activity, DriverError> {
        if self.faults.steps > 0 {
            self.faults.steps -= 1;
            return Err(DriverError::Io(std::io::Error::from_raw_os_error(
                libc::EIO,
            )));
        }
        self.step(super::StepWait::Bounded)
    }

    /// The live feed that waits on `fd`, if any.
    fn feed_on(&self, fd: std::os::fd::RawFd) -> Option<FeedId> {
        self.slots.iter().enumerate().find_map(|(index, s)| {
            let s = s.as_ref().filter(|s| s.fd == fd && s.removing.is_none())?;
            Some(FeedId {
                index: index as u32,
                generation: s.generation,
            })
        })
    }

    pub(super) fn slot_mut(&mut self, id: FeedId) -> Option<&mut Slot> {
        self.slots
            .get_mut(id.index as usize)?
            .as_mut()
            .filter(|s| s.generation == id.generation && s.removing.is_none())
    }

    /// A [`Driver::remove`] of `id` is under way (its wait failed): the
    /// feed is still waiting for its poll to end, or already handed back.
    fn removing_here(&self, id: FeedId) -> bool {
        let waiting = self.slots.get(id.index as usize).is_some_and(|s| {
            s.as_ref().is_some_and(|s| {
                s.generation == id.generation && matches!(s.removing, Some(Removal::Local))
            })
        });
        waiting || self.removed.iter().any(|(r, _)| *r == id)
    }

    /// Start removing a feed; `false` if there is no such feed. A feed whose
    /// poll is in the backend waits for its cancellation to end it; if the
    /// backend refuses the cancellation, nothing is begun: the feed stays
    /// served, and the remover gets the error: returned to a remover on
    /// this thread, sent to one on another (whose refusal is no failure of
    /// the driver's caller: a spawned driver serves on, and the other
    /// commands of its batch are applied).
    pub(super) fn begin_remove(&mut self, id: FeedId, who: Removal) -> Result<bool, DriverError> {
        let Some(slot) = self.slot_mut(id) else {
            return Ok(false);
        };
        let device_feed = slot.device_feed;
        let local = matches!(who, Removal::Local);
        if slot.poll_in_flight {
            if let Err(e) = self.cancel_poll(id) {
                return match who {
                    Removal::Local => Err(DriverError::Io(e)),
                    Removal::Reply(reply) => {
                        trace::event!(WARN, feed = ?id, error = %e, "feed removal refused");
                        let _ = reply.send(Err(DriverError::Io(e)));
                        Ok(true)
                    }
                    Removal::Drop => {
                        trace::event!(WARN, feed = ?id, error = %e, "device feed cancel refused");
                        self.cancels_owed.push(id);
                        self.slot_mut(id).expect("checked above").start_removal(who);
                        Ok(true)
                    }
                };
            }
            self.slot_mut(id).expect("checked above").start_removal(who);
        } else {
            let slot = self.slots[id.index as usize].take().expect("checked above");
            self.hand_back(id, slot.source, who);
        }
        if let (true, false, Some(child)) = (local, self.shutting_down, device_feed) {
            self.stopped_device_feeds.push((id, child));
        }
        self.remove_device_feed_of(device_feed);
        Ok(true)
    }

    /// Ask the backend to cancel a feed's poll.
    #[cfg(not(test))]
    pub(super) fn cancel_poll(&mut self, id: FeedId) -> std::io::Result<()> {
        self.backend.cancel(id)
    }

    /// Ask the backend to cancel a feed's poll, unless a test has it refuse.
    #[cfg(test)]
    pub(super) fn cancel_poll(&mut self, id: FeedId) -> std::io::Result<()> {
        if self.faults.cancels > 0 {
            self.faults.cancels -= 1;
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        self.backend.cancel(id)
    }

    pub(super) fn hand_back(&mut self, id: FeedId, mut source: Box<dyn Source>, who: Removal) {
        trace::event!(DEBUG, feed = ?id, "feed removed");
        // Its place in the room queue goes with the driver's waker: kept,
        // it would hold a wake meant for the waiters behind it.
        source.leave_room_queue();
        match who {
            Removal::Local => self.removed.push((id, source.into_any())),
            Removal::Reply(reply) => {
                let _ = reply.send(Ok(source.into_any()));
            }
            Removal::Drop => self.drop_device_feed(id, source.into_any()),
        }
    }
}

impl Driver {
    /// Apply the commands the handles queued; returns whether there were
    /// any.
    pub(super) fn apply_commands(&mut self) -> Result<bool, DriverError> {
        let commands = self.shared.take_commands();
        let any = !commands.is_empty();
        // Once a stop is asked for, the feeds there are now are the ones the
        // shutdown hands back: nothing is added (a feed registered now would
        // be served, then dropped with the driver, under a key that finds
        // nothing in the `Shutdown`), and every feed is already being
        // removed into the `Shutdown` (a removal asked for now finds it
        // there).
        if any && self.shared.stop_requested() {
            // A refused feed's panicking drop must not end the thread that
            // is handing the other feeds back, nor be raised by the
            // shutdown, which would then drop the keyed feeds with it (its
            // registrant is told `Stopped`): counted and traced, as a
            // device feed's drop at the shutdown.
            let caught = control::refuse_all(commands);
            self.stats.handler_panics += caught.count;
            if let Some(_p) = caught.first {
                trace::event!(
                    WARN,
                    payload = _p.message(),
                    panics = caught.count,
                    "the drop of a feed the shutdown refused panicked; swallowed"
                );
            }
            return Ok(true);
        }
        for c in commands {
            match c {
                Command::Register {
                    source,
                    mode,
                    reply,
                } => {
                    // The feed's own code runs here (its CQ's `channel_fd`
                    // and `device_events`), before `insert` changes anything
                    // of the driver's: a panic there is the registrant's
                    // answer, and the driver's thread serves on.
                    let inserted = catch_unwind(AssertUnwindSafe(|| self.insert(source, mode)));
                    let _ = reply.send(inserted.unwrap_or_else(|payload| {
                        self.stats.handler_panics += 1;
                        Err(DriverError::Panicked(Panic::new(payload)))
                    }));
                }
                Command::Remove { id, reply } => {
                    let answer = reply.clone();
                    // A remover on another thread is answered whatever
                    // happens (a refused cancellation included): nothing
                    // here fails the driver or the rest of the batch.
                    if !self.begin_remove(id, Removal::Reply(reply))? {
                        let _ = answer.send(Err(DriverError::NoSuchFeed));
                    }
                }
                Command::WithFeed { id, call } => self.run_feed_call(id, call),
            }
        }
        Ok(any)
    }
}

#[cfg(test)]
mod tests;
