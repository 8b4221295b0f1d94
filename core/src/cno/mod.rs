//! The CNO (consumer notification object): one waiter for many EVDs.
//!
//! A [`Cno`] keeps a **ready set**: the keys of the EVDs bound to it that
//! got work (a post, a close or a loss) since they were enabled, in the
//! order they became ready. Its waiter takes keys, drains each EVD, and
//! re-enables it; there is no extra poll anywhere, and neither a wait nor a
//! notification looks at the EVDs that have no work (no scan). A key says
//! that work came, not that it is still there: an EVD whose consumer
//! dequeued on its own meanwhile may have nothing left to drain.
//!
//! ```
//! use evd::{ArmStatus, Cno};
//! let mut cno = Cno::new(16).unwrap();
//! let (poster, mut consumer) = evd::bounded::<u32>(8).unwrap();
//! consumer.bind_cno(&cno, 7).unwrap();
//! assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
//! poster.post(1).unwrap(); // puts key 7 in the ready set, once
//! poster.post(2).unwrap();
//! let mut keys = Vec::new();
//! cno.wait(&mut keys);
//! assert_eq!(keys, [7]);
//! // Drain, then re-enable: `Pending` means more came meanwhile.
//! while consumer.try_dequeue().is_ok() {}
//! assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
//! ```
//!
//! # How it works
//!
//! * **Enable is the EVD's own arm.** [`Consumer::enable_cno`] is one CAS on
//!   the EVD's state word that sets `CNO_ARMED` if the EVD is empty, or
//!   reports `Pending` (work now) or `Closed` (end of stream). The post whose
//!   reservation finds `CNO_ARMED` clears it in that same CAS, so exactly one
//!   post, close or loss per enable triggers the CNO.
//! * **The trigger** marks the binding's slot word ([`slot`]) PENDING and,
//!   unless the slot's index is in the ready ring already, pushes it there:
//!   two RMWs (the slot CAS and the ring's reservation CAS), plus the ring's
//!   wake when the CNO's waiter sleeps. A post to an EVD that is not enabled
//!   costs what a post to an unbound EVD costs: the word has no `CNO_ARMED`.
//! * **The ready ring** is an EVD of slot indices with room for every slot;
//!   each slot is in it at most once, so it never overflows, and keys are
//!   served in the order their triggers entered it. The CNO's waiter is that
//!   EVD's consumer: its waits, timeouts, future and eventfd. Like any evd
//!   ring it is FIFO: a trigger preempted between its reservation and its
//!   publish holds back the keys behind it until it runs.
//! * **A direct waiter preempts the CNO** (DAT): a post that finds both
//!   `ARMED` and `CNO_ARMED` wakes the direct waiter and leaves the enable for
//!   the next post; an enable while that post's event is still queued
//!   answers `Pending` and takes the enable back (no key for news the
//!   direct waiter had). A direct wait that gives up (a timeout, a dropped
//!   [`Recv`](crate::Recv), [`Consumer::disarm`]) with events queued on an
//!   enabled EVD hands them to the CNO: the enabled EVD with work is not
//!   missed.
//! * **Disable is a barrier.** [`Consumer::disable_cno`] clears `CNO_ARMED`;
//!   if a trigger took it first, it waits until that trigger reached the
//!   slot (each slot counts its triggers), then removes the pending key. Once
//!   it returns, no trigger of a post that started before adds the key.
//! * **Moving needs no re-check.** [`Consumer::modify_cno`] disables (the
//!   barrier), removes a pending key from the old CNO, binds to the new one,
//!   and gives it the pending key and the enable: a notification reaches
//!   exactly one of the two CNOs (the old one only if its waiter took the key
//!   before the move removed it). From a dropped CNO the pending key moves
//!   too; if the trigger that left it found the CNO gone and told the EVD's
//!   own waiter, that is one wake more.
//! * **Slots.** A CNO made for `n` EVDs has `2n` slots. An unbound slot whose
//!   index is still in the ring is bound again only after the waiter popped
//!   that stale index, so a new binding never waits behind a push of the
//!   previous binding's poster. When no free slot is left (every spare one
//!   waits for the waiter's pop), a bind takes a releasing slot back and its
//!   key rides that stale entry (so it waits for that entry: behind a push
//!   of the previous binding's poster that was preempted, until that poster
//!   runs): a bind is refused only when `n` EVDs are bound.
//!   A disable whose removed key's index is still queued moves the binding
//!   to a fresh slot for the same reason: the next enable's key joins the
//!   ring at its tail instead of reviving the old entry ahead of others.
//! * **Lifetimes.** Closing an enabled EVD triggers its key once: its
//!   consumer drains it and sees the end of stream. Dropping or unbinding an
//!   EVD removes its key. Dropping the `Cno` discards the keys in its ready
//!   set (an EVD moved to another CNO then takes its key along) and closes
//!   it: a later trigger notifies the EVD's own waiter
//!   instead, and [`Consumer::enable_cno`] reports
//!   [`CnoError::CnoDropped`]; the events stay in their EVDs (a direct arm
//!   reports them `Pending`). An EVD keeps every CNO it was bound to
//!   allocated until the EVD is dropped (a trigger may still be pushing
//!   into one after a move).
//! * **`Pending` from an enable** counts reserved events, as the arm does:
//!   right after a poster reserved and before it published, a drain finds
//!   nothing and the enable says `Pending` again until the poster is done.
//!
//! | race | outcome | loom model |
//! |---|---|---|
//! | post vs enable, two EVDs on one CNO | each key once per enable, none lost | `cno_post_vs_enable_two_evds` |
//! | modify_cno vs post | the key reaches exactly one CNO | `cno_modify_vs_post_exactly_one_cno` |
//! | disable vs post | after disable no key; the event is still dequeued | `cno_disable_vs_post_is_a_barrier` |
//! | direct wait vs CNO | the direct waiter is woken; the key comes with the next post | `cno_direct_wait_preempts` |
//! | CNO wait vs close | the key is delivered once; the drain ends the stream | `cno_wait_vs_close` |
//! | CNO wait vs unbind | the key is delivered or removed, never dangling | `cno_wait_vs_unbind` |
//! | the pop of a released slot's stale index vs a bind that reclaims it | the new key once; no slot freed while bound or queued | `a_bind_that_reclaims_a_slot_vs_the_pop_of_its_stale_index` (a unit model in `cno/engine.rs`) |
//! | modify_cno vs drop of the new CNO | the EVD is told, and notes it, exactly when the key reached no CNO | `cno_modify_vs_drop_of_the_new_cno_notifies_the_evd` |
//! | blocking dequeue vs post and unwaitable | told once: the direct wake or the key | `cno_dequeue_vs_post_and_unwaitable_notifies_once` |
//! | direct wait gives up | the queued events go to the CNO | `cno_direct_wait_that_gives_up_hands_the_event_to_the_cno` |
//! | the eventfd | written once per idle → ready | a test in `tests/cno.rs` |

pub(crate) mod engine;
#[doc(hidden)]
pub mod slot;

use crate::consumer::{ArmStatus, Consumer};
#[cfg(doc)]
use crate::error::CnoError;
use crate::error::{CreateError, TryDequeueError};
use crate::sync::Arc;
use engine::CnoCore;
use futures_core::{FusedStream, Stream};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A CNO: one waiter for many EVDs (see the [module docs](crate::cno)).
///
/// `Send` and `Sync`: waiting takes `&mut self`, so one thread (or task)
/// waits on it while others may bind EVDs through `&Cno` or a
/// [`CnoHandle`]. EVDs of any event type are bound to it, each with a `u64`
/// key that [`Cno::wait`] hands back.
pub struct Cno {
    handle: CnoHandle,
    ready: Consumer<u32>,
}

/// A handle to bind EVDs to a [`Cno`] from any thread: `Clone + Send + Sync`.
#[derive(Clone)]
pub struct CnoHandle {
    pub(crate) core: Arc<CnoCore>,
}

impl AsRef<CnoHandle> for Cno {
    fn as_ref(&self) -> &CnoHandle {
        &self.handle
    }
}

impl AsRef<CnoHandle> for CnoHandle {
    fn as_ref(&self) -> &CnoHandle {
        self
    }
}

impl Cno {
    /// A CNO that holds up to `max_evds` bound EVDs.
    ///
    /// # Errors
    /// [`CreateError::ZeroCapacity`] for 0; [`CreateError::CapacityTooLarge`]
    /// when its ready ring (two slots per EVD, each named by a `u32`) would
    /// have more than `u32::MAX` slots: from 2^31 EVDs on;
    /// [`CreateError::AllocFailed`] when that ring or the slot table (a
    /// cache line per slot) cannot be allocated. Every list the CNO keeps is
    /// allocated here in full, so binding and unbinding never allocate in
    /// it (an EVD allocates a small entry at its first binding to a CNO,
    /// which keeps that CNO alive as long as the EVD).
    ///
    /// ```
    /// let cno = evd::Cno::new(1024).unwrap();
    /// assert_eq!(cno.capacity(), 1024);
    /// assert_eq!(evd::Cno::new(0).err(), Some(evd::CreateError::ZeroCapacity));
    /// assert!(matches!(evd::Cno::new(usize::MAX), Err(evd::CreateError::CapacityTooLarge { .. })));
    /// ```
    pub fn new(max_evds: usize) -> Result<Cno, CreateError> {
        if max_evds == 0 {
            return Err(CreateError::ZeroCapacity);
        }
        let slots = CnoCore::slots_for(max_evds).ok_or(CreateError::CapacityTooLarge {
            requested: max_evds,
        })?;
        let (poster, ready) = crate::bounded::<u32>(slots)?;
        Ok(Cno {
            handle: CnoHandle {
                core: Arc::new(CnoCore::new(max_evds, poster)?),
            },
            ready,
        })
    }

    /// A handle for binding EVDs from other threads.
    ///
    /// ```
    /// let cno = evd::Cno::new(4).unwrap();
    /// let h = cno.handle();
    /// let (_p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// std::thread::spawn(move || c.bind_cno(&h, 1).unwrap()).join().unwrap();
    /// ```
    pub fn handle(&self) -> CnoHandle {
        self.handle.clone()
    }

    /// The most EVDs it holds.
    pub fn capacity(&self) -> usize {
        self.handle.capacity()
    }

    /// EVDs bound now.
    ///
    /// ```
    /// let cno = evd::Cno::new(4).unwrap();
    /// let (_p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// c.bind_cno(&cno, 9).unwrap();
    /// assert_eq!(cno.bound(), 1);
    /// drop(c);
    /// assert_eq!(cno.bound(), 0);
    /// ```
    pub fn bound(&self) -> usize {
        self.handle.bound()
    }

    /// The next ready key, if any, without waiting for a trigger (right
    /// after a run of keys, the look that finds none may linger:
    /// [`Cno::set_linger_cap`]).
    ///
    /// ```
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// let (p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// c.bind_cno(&cno, 3).unwrap();
    /// assert_eq!(cno.try_next(), None);
    /// c.enable_cno().unwrap();
    /// p.post(0).unwrap();
    /// assert_eq!(cno.try_next(), Some(3));
    /// assert_eq!(cno.try_next(), None);
    /// ```
    pub fn try_next(&mut self) -> Option<u64> {
        loop {
            match self.ready.try_dequeue() {
                Ok(slot) => {
                    if let Some(key) = self.handle.core.take(slot) {
                        return Some(key);
                    }
                    // A stale entry (its key was removed): look further.
                }
                // No lossy posts feed the ring and it closes only when the
                // `Cno` drops: empty is the only other outcome.
                Err(TryDequeueError::Empty)
                | Err(TryDequeueError::Overflow(_))
                | Err(TryDequeueError::Closed) => return None,
            }
        }
    }

    /// Append every key ready now to `out`; returns how many. Waits for no
    /// trigger (its last look may linger: [`Cno::set_linger_cap`]).
    ///
    /// ```
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// let mut out = Vec::new();
    /// assert_eq!(cno.try_ready(&mut out), 0);
    /// ```
    pub fn try_ready(&mut self, out: &mut Vec<u64>) -> usize {
        let before = out.len();
        while let Some(k) = self.try_next() {
            out.push(k);
        }
        out.len() - before
    }

    /// Block until at least one key is ready, then append every key ready
    /// now to `out`; returns how many (at least one).
    ///
    /// ```
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// let (p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// c.bind_cno(&cno, 5).unwrap();
    /// c.enable_cno().unwrap();
    /// std::thread::spawn(move || p.post(1).unwrap());
    /// let mut keys = Vec::new();
    /// assert_eq!(cno.wait(&mut keys), 1);
    /// assert_eq!(keys, [5]);
    /// ```
    pub fn wait(&mut self, out: &mut Vec<u64>) -> usize {
        self.wait_until(out, None)
    }

    /// [`Cno::wait`] for at most `timeout`; 0 if it passed with no key ready.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// assert_eq!(cno.wait_timeout(&mut Vec::new(), Duration::from_millis(1)), 0);
    /// ```
    pub fn wait_timeout(&mut self, out: &mut Vec<u64>, timeout: Duration) -> usize {
        self.wait_until(out, Instant::now().checked_add(timeout))
    }

    /// [`Cno::wait`] until `deadline`; 0 if it passed with no key ready.
    ///
    /// ```
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// assert_eq!(cno.wait_deadline(&mut Vec::new(), std::time::Instant::now()), 0);
    /// ```
    pub fn wait_deadline(&mut self, out: &mut Vec<u64>, deadline: Instant) -> usize {
        self.wait_until(out, Some(deadline))
    }

    fn wait_until(&mut self, out: &mut Vec<u64>, deadline: Option<Instant>) -> usize {
        loop {
            let n = self.try_ready(out);
            if n > 0 {
                return n;
            }
            // The ring is never closed while the `Cno` lives and carries no
            // loss reports: a wait ends with entries ready or at the deadline.
            match self.ready.wait_until(1, deadline) {
                Ok(_) => {}
                Err(_) => return self.try_ready(out),
            }
        }
    }

    /// A future of the next ready set: resolves once at least one key is
    /// ready, having appended every key ready then to `out`, to how many.
    ///
    /// ```
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// let (p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// c.bind_cno(&cno, 8).unwrap();
    /// c.enable_cno().unwrap();
    /// p.post(1).unwrap();
    /// let mut keys = Vec::new();
    /// assert_eq!(futures::executor::block_on(cno.ready_set(&mut keys)), 1);
    /// assert_eq!(keys, [8]);
    /// ```
    pub fn ready_set<'a>(&'a mut self, out: &'a mut Vec<u64>) -> ReadySet<'a> {
        ReadySet { cno: self, out }
    }

    /// Arm the CNO itself for its eventfd ([`Cno::notify_fd`]): `Armed` if
    /// nothing is ready (the next key writes the fd once), `Pending` if keys
    /// (or entries whose keys were removed) are queued: take them first.
    /// A wait on the CNO ([`Cno::wait`] and its timed forms, the futures)
    /// takes that arm over; a blocking one that ends without a key
    /// withdraws it, and a future dropped while it waits leaves it (its
    /// task's waker is woken once more, at most): arm again before sleeping
    /// on the fd.
    ///
    /// ```
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// assert_eq!(cno.arm(), evd::ArmStatus::Armed);
    /// ```
    pub fn arm(&mut self) -> ArmStatus {
        self.ready.arm()
    }

    /// The CNO's eventfd (DAT 2.0's fd CNO), for epoll, io_uring or tokio's
    /// `AsyncFd`: written once on each idle → ready transition after
    /// [`Cno::arm`]. The loop: wait for the fd, acknowledge it, take the
    /// keys ([`Cno::try_ready`]), serve them, arm; on `Pending` take again.
    ///
    /// ```
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// let fd = cno.notify_fd().unwrap();
    /// let (p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// c.bind_cno(&cno, 2).unwrap();
    /// c.enable_cno().unwrap();
    /// assert_eq!(cno.arm(), evd::ArmStatus::Armed);
    /// p.post(1).unwrap();
    /// assert_eq!(fd.acknowledge().unwrap(), 1);
    /// assert_eq!(cno.try_next(), Some(2));
    /// ```
    #[cfg(any(target_os = "linux", loom))]
    #[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
    pub fn notify_fd(&mut self) -> std::io::Result<crate::NotifyFd> {
        self.ready.notify_fd()
    }

    /// Set how long a blocking [`Cno::wait`] spins before it parks (as
    /// [`Consumer::set_spin_budget`]).
    pub fn set_spin_budget(&mut self, budget: Duration) {
        self.ready.set_spin_budget(budget);
    }

    /// Cap the linger of a look for ready keys that finds none right after
    /// a run of them (as [`Consumer::set_linger_cap`]; default
    /// [`DEFAULT_LINGER_CAP`](crate::DEFAULT_LINGER_CAP)): [`try_next`](Cno::try_next)
    /// and [`try_ready`](Cno::try_ready) wait for no trigger, but the last
    /// look of such a run waits up to this long for the triggers to get
    /// ahead. The gaps between a blocking wait's looks during its back-off
    /// are as long. Set zero for a loop that polls the CNO beside other
    /// sources and must return at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// assert_eq!(cno.linger_cap(), evd::DEFAULT_LINGER_CAP);
    /// cno.set_linger_cap(Duration::ZERO);
    /// assert_eq!(cno.linger_cap(), Duration::ZERO);
    /// ```
    pub fn set_linger_cap(&mut self, cap: Duration) {
        self.ready.set_linger_cap(cap);
    }

    /// The linger cap ([`Cno::set_linger_cap`]), as kept.
    pub fn linger_cap(&self) -> Duration {
        self.ready.linger_cap()
    }
}

/// Keys as they become ready; never ends (a CNO outlives its EVDs).
///
/// ```
/// use futures::StreamExt;
/// let mut cno = evd::Cno::new(4).unwrap();
/// let (p, mut c) = evd::bounded::<u8>(4).unwrap();
/// c.bind_cno(&cno, 4).unwrap();
/// c.enable_cno().unwrap();
/// p.post(1).unwrap();
/// assert_eq!(futures::executor::block_on(cno.next()), Some(4));
/// ```
impl Stream for Cno {
    type Item = u64;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u64>> {
        let this = &mut *self;
        loop {
            match Pin::new(&mut this.ready).poll_next(cx) {
                Poll::Ready(Some(Ok(slot))) => {
                    if let Some(key) = this.handle.core.take(slot) {
                        return Poll::Ready(Some(key));
                    }
                }
                // Neither a report nor the end comes while the `Cno` lives.
                Poll::Ready(Some(Err(_))) | Poll::Ready(None) | Poll::Pending => {
                    return Poll::Pending;
                }
            }
        }
    }
}

impl FusedStream for Cno {
    fn is_terminated(&self) -> bool {
        false
    }
}

/// The future of [`Cno::ready_set`].
#[must_use = "futures do nothing unless polled"]
pub struct ReadySet<'a> {
    cno: &'a mut Cno,
    out: &'a mut Vec<u64>,
}

impl Future for ReadySet<'_> {
    type Output = usize;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        let this = &mut *self;
        match Pin::new(&mut *this.cno).poll_next(cx) {
            Poll::Ready(Some(first)) => {
                this.out.push(first);
                Poll::Ready(1 + this.cno.try_ready(this.out))
            }
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

impl fmt::Debug for ReadySet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadySet").finish_non_exhaustive()
    }
}

impl CnoHandle {
    /// The most EVDs the CNO holds.
    pub fn capacity(&self) -> usize {
        self.core.capacity()
    }

    /// EVDs bound now.
    pub fn bound(&self) -> usize {
        self.core.bound()
    }

    /// True once the [`Cno`] was dropped.
    ///
    /// ```
    /// let cno = evd::Cno::new(4).unwrap();
    /// let h = cno.handle();
    /// assert!(!h.is_dropped());
    /// drop(cno);
    /// assert!(h.is_dropped());
    /// ```
    pub fn is_dropped(&self) -> bool {
        self.core.is_gone()
    }
}

impl Drop for Cno {
    fn drop(&mut self) {
        // Before the ring closes (when `ready` drops right after): a trigger
        // that finds its index queued, or the ring closed, notifies the EVD's
        // own waiter instead.
        self.handle.core.mark_gone();
    }
}

impl fmt::Debug for Cno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cno")
            .field("capacity", &self.capacity())
            .field("bound", &self.bound())
            .field("queued", &self.ready.len())
            .finish()
    }
}

impl fmt::Debug for CnoHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CnoHandle")
            .field("capacity", &self.capacity())
            .field("bound", &self.bound())
            .finish()
    }
}
