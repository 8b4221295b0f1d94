//! Upcalls: the consumer side run inline on the posting thread, as a CQ event
//! handler runs in the kernel, under DAT's upcall policies.
//!
//! # Model
//!
//! [`Consumer::into_upcalls`] hands the consumer to an [`Upcalls`]
//! dispatcher. From then on the *token* bit of the state word stands for the
//! consumer: whoever holds it may dequeue. A post that finds the token free,
//! under an enabled policy and below the policy's instance limit, takes the
//! token in its reservation CAS ([`state::reserve`]) and, after publishing its
//! own event, runs an *instance* on its own thread:
//!
//! * **SingleInstance**: the instance keeps the token while it runs the
//!   handler, event after event, until a dequeue finds nothing and the exit
//!   CAS ([`state::exit_instance`]) confirms the ring is empty. A post that
//!   lands meanwhile sees the token and starts nothing; the exit CAS fails
//!   because the tail moved, so the running instance delivers it. At most one
//!   handler runs at any moment; no event is stranded.
//! * **ManyInstances**: the instance takes one event out, gives the token back
//!   ([`state::release_token`]), runs the handler, then takes the token again
//!   or ends ([`state::reacquire`]). Posts that find the token free meanwhile
//!   start further instances, so handlers overlap while dequeues stay
//!   serialized.
//!
//! Each handler call receives one event (or an overflow report) and
//! `more_events`: whether more were queued when it was dequeued.
//!
//! Policy changes are CASes on the same word, so they are race-free against
//! posts and running instances. Disabling stops instances at their next
//! dequeue and leaves the rest queued. [`UpcallPolicy::Teardown`] disables and
//! then waits for the instance count in the word to reach zero: once it
//! returns, no upcall runs. A panicking handler gives the token back on unwind
//! ([`state::abandon_instance`]); the EVD stays usable and queued events go to
//! the next instance.
//!
//! The handler can be replaced while posters run: it lives behind an
//! `arc-swap` pointer, and the old one is dropped as soon as no instance is
//! calling it.

use crate::error::{Overflow, PolicyError, TryDequeueError};
use crate::evd::{Consumer, Poster, Shared};
use crate::query::{Query, UpcallPolicy};
use crate::state::{self, Exit, Invoke, PolicyBits, Reacquire};
use crate::sync::{Backoff, Ordering};
use arc_swap::ArcSwapOption;

/// An upcall handler: receives one event (or the overflow report that DAT
/// delivers as `EVD_OVERFLOW`) and whether more events were queued.
pub type Handler<T> = dyn Fn(Result<T, Overflow>, bool) + Send + Sync;

/// The current handler, replaceable while instances run.
///
/// `arc-swap` rather than an epoch scheme: a replaced handler is dropped as
/// soon as the last instance calling it returns (or at once, by the replacing
/// thread, when none is), never deferred to a garbage bag that nothing may
/// flush for the life of a thread. A handler that owns a socket, a file or a
/// buffer releases it deterministically.
pub(crate) struct HandlerSlot<T> {
    current: ArcSwapOption<Box<Handler<T>>>,
}

impl<T> HandlerSlot<T> {
    pub(crate) fn new() -> Self {
        HandlerSlot {
            current: ArcSwapOption::empty(),
        }
    }

    /// Install `h`; the old handler is dropped here unless an instance is
    /// calling it, then by the last such instance when its call returns.
    pub(crate) fn set(&self, h: Box<Handler<T>>) {
        self.current.store(Some(std::sync::Arc::new(h)));
    }

    /// Call the handler, if there is one.
    fn call(&self, item: Result<T, Overflow>, more: bool) {
        // The guard keeps this handler alive for the call; no allocation.
        let guard = self.current.load();
        if let Some(h) = guard.as_ref() {
            h(item, more);
        }
    }
}

#[cfg(loom)]
loom::thread_local! {
    static CURRENT_EVD: std::cell::Cell<usize> = std::cell::Cell::new(0);
}
#[cfg(not(loom))]
std::thread_local! {
    static CURRENT_EVD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn evd_id<T>(s: &Shared<T>) -> usize {
    s as *const Shared<T> as usize
}

/// True if this thread is inside one of `s`'s upcalls.
fn in_own_upcall<T>(s: &Shared<T>) -> bool {
    CURRENT_EVD.with(|c| c.get() == evd_id(s))
}

/// Marks this thread as inside `s`'s handler; restores the mark on drop
/// (including on unwind), so nested EVDs' upcalls are told apart.
struct CurrentMark(usize);

impl CurrentMark {
    fn enter<T>(s: &Shared<T>) -> Self {
        CurrentMark(CURRENT_EVD.with(|c| c.replace(evd_id(s))))
    }
}

impl Drop for CurrentMark {
    fn drop(&mut self) {
        CURRENT_EVD.with(|c| c.set(self.0));
    }
}

/// Gives an instance's share of the word back if its handler unwinds.
struct InstanceGuard<'a, T> {
    shared: &'a Shared<T>,
    holds_token: bool,
}

impl<T> Drop for InstanceGuard<'_, T> {
    fn drop(&mut self) {
        let held = self.holds_token;
        // AcqRel: like a normal exit, hands the consumer side to whoever next
        // takes the token.
        let new = self.shared.update(Ordering::AcqRel, |w| {
            let n = state::abandon_instance(w, held);
            Ok((n, n))
        });
        wake_tearer(self.shared, new);
    }
}

/// After an instance ended: if upcalls are disabled and none is left, a
/// teardown may be waiting for exactly this.
fn wake_tearer<T>(s: &Shared<T>, new: u64) {
    if state::policy(new) == PolicyBits::Disabled && state::instances(new) == 0 {
        s.targets.wake_waker();
    }
}

fn deliver<T>(s: &Shared<T>, item: Result<T, Overflow>) {
    // Another event is ready behind this one (its stamp says so; the state
    // word is not consulted).
    let more = s.ready(1) > 0;
    s.counters.upcalls.fetch_add(1, Ordering::Relaxed);
    let _mark = CurrentMark::enter(s);
    s.handler.call(item, more);
}

/// Run one upcall instance. The caller's CAS took the token and counted the
/// instance in the word.
pub(crate) fn run_instance<T>(s: &Shared<T>) {
    s.counters.notifications.fetch_add(1, Ordering::Relaxed);
    let mut guard = InstanceGuard {
        shared: s,
        holds_token: true,
    };
    loop {
        // Holding the token: we are the consumer now.
        let policy = state::policy(s.state.load(Ordering::Acquire));
        let item = match policy {
            PolicyBits::Disabled => None,
            _ => match s.dequeue_one() {
                Ok(ev) => Some(Ok(ev)),
                Err(TryDequeueError::Overflow(o)) => Some(Err(o)),
                Err(TryDequeueError::Empty | TryDequeueError::Closed) => None,
            },
        };
        match (item, policy) {
            (Some(item), PolicyBits::Many) => {
                // AcqRel: Release hands our head and slot reads to the next
                // token holder.
                s.update(Ordering::AcqRel, |w| Ok((state::release_token(w), ())));
                guard.holds_token = false;
                deliver(s, item);
                let (took, new) = s.update(Ordering::AcqRel, |w| match state::reacquire(w) {
                    Reacquire::Token(n) => Ok((n, (true, n))),
                    Reacquire::Exit(n) => Ok((n, (false, n))),
                });
                if !took {
                    std::mem::forget(guard);
                    wake_tearer(s, new);
                    return;
                }
                guard.holds_token = true;
            }
            (Some(item), _) => deliver(s, item),
            (None, _) => {
                if try_exit(s) {
                    std::mem::forget(guard);
                    return;
                }
            }
        }
    }
}

/// The exit CAS; false if work arrived (or a reserved slot is still being
/// written) and this instance must go on.
fn try_exit<T>(s: &Shared<T>) -> bool {
    let h = s.head();
    // AcqRel: Release so the next instance (or the torn-down consumer) sees
    // our head; Acquire to read a current word, and with it any overflow
    // count whose poster's RMW on the word came before this CAS.
    let ended = s.update(Ordering::AcqRel, |w| match state::exit_instance(w, h) {
        Exit::Exit(new) => Ok((new, Some(new))),
        Exit::MoreWork => Err(None),
    });
    match ended {
        Some(new) => {
            if s.loss_pending() && restart_for_loss(s) {
                return false;
            }
            wake_tearer(s, new);
            true
        }
        None => {
            // A poster holds a reserved slot at the head and is writing it.
            Backoff::new().snooze();
            false
        }
    }
}

/// A loss was committed by a poster whose RMW on the word came before our
/// exit CAS, so it saw our token and started nothing: take the token back
/// (if upcalls are still enabled and nobody else took it) to report it.
/// A poster whose RMW comes after our exit starts an instance itself.
fn restart_for_loss<T>(s: &Shared<T>) -> bool {
    s.update(Ordering::AcqRel, |w| match state::notify_loss(w) {
        Some((new, state::Notify::Upcall)) => Ok((new, true)),
        _ => Err(false),
    })
}

/// The consumer of an EVD in upcall mode: events are delivered to a handler
/// run on the posting threads. Owns the [`Consumer`]; [`Upcalls::teardown`]
/// gives it back.
pub struct Upcalls<T> {
    consumer: Option<Consumer<T>>,
}

impl<T: Send> Consumer<T> {
    /// Hand the consumer to an upcall dispatcher with `policy` and `handler`.
    ///
    /// With [`Invoke::Any`] events already queued start an upcall at once, on
    /// this thread; with [`Invoke::New`] they wait for the next post.
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// use std::sync::{Arc, Mutex};
    /// let (poster, consumer) = evd::bounded(8).unwrap();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = seen.clone();
    /// let upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _more| {
    ///     sink.lock().unwrap().push(ev.unwrap());
    /// });
    /// poster.post(1).unwrap(); // runs the handler on this thread
    /// poster.post(2).unwrap();
    /// let mut consumer = upcalls.teardown();
    /// assert_eq!(*seen.lock().unwrap(), [1, 2]);
    /// assert_eq!(consumer.try_dequeue(), Err(evd::TryDequeueError::Empty));
    /// ```
    pub fn into_upcalls<F>(mut self, policy: UpcallPolicy, invoke: Invoke, handler: F) -> Upcalls<T>
    where
        F: Fn(Result<T, Overflow>, bool) + Send + Sync + 'static,
    {
        self.disarm();
        self.shared.handler.set(Box::new(handler));
        let mut upcalls = Upcalls {
            consumer: Some(self),
        };
        // Not inside an upcall of this EVD (we held its consumer), so this
        // cannot fail.
        let _ = upcalls.set_policy(policy, invoke);
        upcalls
    }
}

impl<T: Send> Upcalls<T> {
    fn consumer(&self) -> &Consumer<T> {
        self.consumer.as_ref().expect("present until teardown")
    }

    fn shared(&self) -> &Shared<T> {
        &self.consumer().shared
    }

    /// Change the upcall policy; race-free against posts and running upcalls.
    ///
    /// * `Disabled`: no upcall starts; a running one stops after its current
    ///   event; the rest stays queued.
    /// * `SingleInstance` / `ManyInstances`: enable; with [`Invoke::Any`] and
    ///   events queued, an upcall runs at once on this thread. Switching to
    ///   `SingleInstance` while instances started under `ManyInstances` still
    ///   run (directly or by way of `Disabled`) first waits for them, so at
    ///   most one runs from the moment this returns.
    /// * `Teardown`: disable, and return after every running upcall has
    ///   returned. Refused from inside one of this EVD's upcalls.
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let (poster, consumer) = evd::bounded(8).unwrap();
    /// let calls = Arc::new(AtomicUsize::new(0));
    /// let c = calls.clone();
    /// let mut up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, move |_: Result<u8, _>, _| {
    ///     c.fetch_add(1, Ordering::Relaxed);
    /// });
    /// poster.post(1).unwrap();
    /// assert_eq!(calls.load(Ordering::Relaxed), 0);
    /// up.set_policy(UpcallPolicy::SingleInstance, Invoke::New).unwrap(); // queued event waits
    /// assert_eq!(calls.load(Ordering::Relaxed), 0);
    /// poster.post(2).unwrap(); // the new arrival delivers both
    /// assert_eq!(calls.load(Ordering::Relaxed), 2);
    /// up.set_policy(UpcallPolicy::Teardown, Invoke::Any).unwrap();
    /// ```
    pub fn set_policy(&mut self, policy: UpcallPolicy, invoke: Invoke) -> Result<(), PolicyError> {
        let s = self.shared();
        let w = s.state.load(Ordering::Acquire);
        // SingleInstance waits out instances started under ManyInstances.
        // Under ManyInstances any post may start one between this load and
        // the policy CAS, so that case always waits; under Disabled none can
        // start, so the count read here cannot go stale (found by the
        // state_machine fuzz target).
        let current = state::policy(w);
        let needs_quiesce = policy == UpcallPolicy::Teardown
            || (policy == UpcallPolicy::SingleInstance
                && (current == PolicyBits::Many
                    || (current != PolicyBits::Single && state::instances(w) > 0)));
        if needs_quiesce {
            self.quiesce()?;
            if policy == UpcallPolicy::Teardown {
                return Ok(());
            }
        }
        let s = self.shared();
        let bits = policy.bits();
        let h = s.head();
        // AcqRel: Release hands the consumer side to instances that start
        // under the new policy; Acquire to see the last instance's head.
        let start = s.update(Ordering::AcqRel, |w| {
            let r = state::set_policy(w, h, bits, invoke);
            Ok((r.new, r.start_instance))
        });
        // A loss report counts as a queued event for Invoke::Any.
        let start = start || (invoke == Invoke::Any && s.loss_pending() && restart_for_loss(s));
        if start {
            run_instance(s);
        }
        Ok(())
    }

    /// Disable upcalls and wait until none is in flight.
    fn quiesce(&mut self) -> Result<(), PolicyError> {
        let s = &*self
            .consumer
            .as_ref()
            .expect("present until teardown")
            .shared;
        if in_own_upcall(s) {
            return Err(PolicyError::FromUpcall);
        }
        s.update(Ordering::AcqRel, |w| {
            let r = state::set_policy(w, 0, PolicyBits::Disabled, Invoke::New);
            Ok((r.new, ()))
        });
        let consumer = self.consumer.as_mut().expect("present until teardown");
        crate::wait::block_until(consumer, |s| {
            // Acquire: see the head and slot reads of the last instance.
            state::instances(s.state.load(Ordering::Acquire)) == 0
        });
        Ok(())
    }

    /// Replace the handler while posters run. Upcalls already running finish
    /// with the old one; the old one is dropped once none can be using it.
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// let (poster, consumer) = evd::bounded(4).unwrap();
    /// let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, |_: Result<u8, _>, _| {});
    /// up.set_handler(|ev, _| assert_eq!(ev, Ok(9)));
    /// poster.post(9).unwrap();
    /// ```
    pub fn set_handler<F>(&self, handler: F)
    where
        F: Fn(Result<T, Overflow>, bool) + Send + Sync + 'static,
    {
        self.shared().handler.set(Box::new(handler));
    }

    /// A snapshot of the EVD.
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// let (_poster, consumer) = evd::bounded::<u8>(4).unwrap();
    /// let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, |_, _| {});
    /// assert_eq!(up.query().policy, UpcallPolicy::ManyInstances);
    /// ```
    pub fn query(&self) -> Query {
        self.shared().query()
    }

    /// A new posting handle.
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// let (_poster, consumer) = evd::bounded::<u8>(4).unwrap();
    /// let up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, |_, _| {});
    /// up.poster().post(1).unwrap();
    /// assert_eq!(up.query().len, 1);
    /// ```
    pub fn poster(&self) -> Poster<T> {
        self.consumer().poster()
    }

    /// Tear down (as [`UpcallPolicy::Teardown`]) and get the consumer back;
    /// events still queued can then be dequeued.
    ///
    /// # Panics
    /// If called from inside one of this EVD's own upcalls (it would wait for
    /// itself forever).
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// let (poster, consumer) = evd::bounded(4).unwrap();
    /// let up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, |_, _| {});
    /// poster.post(3u8).unwrap();
    /// let mut consumer = up.teardown();
    /// assert_eq!(consumer.try_dequeue(), Ok(3));
    /// ```
    pub fn teardown(mut self) -> Consumer<T> {
        self.quiesce()
            .expect("Upcalls::teardown called from inside its own upcall");
        self.consumer.take().expect("present until teardown")
    }
}

impl<T> Drop for Upcalls<T> {
    fn drop(&mut self) {
        let Some(consumer) = self.consumer.as_mut() else {
            return;
        };
        let s = &*consumer.shared;
        s.update(Ordering::AcqRel, |w| {
            let r = state::set_policy(w, 0, PolicyBits::Disabled, Invoke::New);
            Ok((r.new, ()))
        });
        // Dropped from inside its own upcall: that upcall is the one in
        // flight, and it will stop at its next dequeue; waiting would hang.
        if !in_own_upcall(s) {
            crate::wait::block_until(consumer, |s| {
                state::instances(s.state.load(Ordering::Acquire)) == 0
            });
        }
    }
}

impl<T> std::fmt::Debug for Upcalls<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upcalls").finish_non_exhaustive()
    }
}
