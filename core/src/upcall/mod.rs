//! Upcalls: the consumer side run inline on the posting thread, as a CQ event
//! handler runs in the kernel, under DAT's upcall policies.
//!
//! # Model
//!
//! [`Consumer::into_upcalls`] hands the consumer to an [`Upcalls`]
//! dispatcher. From then on the *token* bit of the state word stands for the
//! consumer: whoever holds it may dequeue. A post that finds the token free,
//! under an enabled policy and below the policy's instance limit, takes the
//! token in its reservation CAS ([`state::reserve`](crate::state::reserve)) and, after publishing its
//! own event, runs an *instance* on its own thread:
//!
//! * **SingleInstance**: the instance keeps the token while it runs the
//!   handler, event after event, until a dequeue finds nothing and the exit
//!   CAS ([`state::exit_instance`](crate::state::exit_instance)) confirms the ring is empty. A post that
//!   lands meanwhile sees the token and starts nothing; the exit CAS fails
//!   because the tail moved, so the running instance delivers it. At most one
//!   handler runs at any moment; no event is stranded.
//! * **ManyInstances**: the instance takes one event out, gives the token back
//!   ([`state::release_token`](crate::state::release_token)), runs the handler, then takes the token again
//!   or ends ([`state::reacquire`](crate::state::reacquire)). Posts that find the token free meanwhile
//!   start further instances, so handlers overlap while dequeues stay
//!   serialized. A post that finds the token held (the short window between
//!   an instance's dequeue and its hand-back) starts none: no thread is
//!   free to run a second handler there, so its event waits for that
//!   instance's next round, after its handler returns, or for the next post
//!   (its `more` was true if the event was published by the time the
//!   instance looked, after its hand-back; a post whose reservation found
//!   the token held and which published only after that look leaves `more`
//!   false, and the instance's next round finds the event all the same).
//!
//! Each handler call receives one event (or a loss report) and `more`:
//! whether another event was ready (published) behind it just before the
//! call (under ManyInstances, after the token was handed back): a hint,
//! never a promise that nothing more is coming.
//!
//! Policy changes are CASes on the same word, so they are race-free against
//! posts and running instances. Disabling stops instances at their next
//! look at the policy, which comes before each dequeue: an instance that
//! looked just before the change dequeues and delivers one more event after
//! `set_policy` returned. The rest stays queued. [`UpcallPolicy::Teardown`] disables and
//! then waits for the instance count in the word to reach zero: once it
//! returns, no upcall runs. A panicking handler gives the token back on unwind
//! ([`state::abandon_instance`](crate::state::abandon_instance)); the EVD stays usable and queued events go to
//! the next instance.
//!
//! The handler can be replaced while posters run: it lives behind an
//! `arc-swap` pointer, and the old one is dropped as soon as no instance is
//! calling it.
//!
//! A handler is `Fn + Send + Sync` ([`Consumer::into_upcalls`],
//! [`Upcalls::set_handler`]), or `FnMut + Send` under SingleInstance
//! ([`Consumer::into_upcalls_mut`], [`Upcalls::set_handler_mut`]): then only
//! the instance holding the token calls it, and keeps the token through the
//! call, so no two calls overlap and each one happens after the last (the
//! token's hand-offs are `AcqRel` CASes on the word). No lock is taken for
//! it. [`Upcalls::set_policy`] refuses ManyInstances while an `FnMut`
//! handler is installed, and `set_handler_mut` refuses to install one under
//! it ([`PolicyError::FnMutHandler`]); an instance that read ManyInstances
//! before a switch away from it, and then finds an `FnMut` handler, calls it
//! with the token kept, as under SingleInstance.

pub(crate) mod handler;
pub(crate) mod instance;

pub use handler::Handler;
use handler::Installed;

use crate::consumer::Consumer;
use crate::engine::Shared;
use crate::error::{Overflow, PolicyError};
use crate::frames;
use crate::poster::Poster;
use crate::query::{Query, UpcallPolicy};
use crate::state::{Invoke, PolicyBits};
use crate::unwind::Panics;

/// The consumer of an EVD in upcall mode: events are delivered to a handler
/// run on the posting threads. Owns the [`Consumer`]; [`Upcalls::teardown`]
/// gives it back. Dropped instead, it disables upcalls and waits until no
/// handler runs (from inside its own handler it only disables them, and an
/// instance of another thread that read the policy before may still take
/// one event out and find no handler: that event is dropped as the queued
/// ones are), drops the handler, then drops the consumer as any consumer
/// is dropped: the EVD closes and the events still queued are dropped.
/// From inside its own handler they are dropped once no upcall is in
/// flight, by a thread leaving one, not necessarily the one whose handler
/// dropped it; a panic of their `Drop` comes out of that thread's call (a
/// post, a reservation, a room wait), unless that thread is unwinding from
/// its own handler's panic, which goes on.
pub struct Upcalls<T> {
    consumer: Option<Consumer<T>>,
}

impl<T: Send> Consumer<T> {
    /// Hand the consumer to an upcall dispatcher with `policy` and `handler`.
    ///
    /// With [`Invoke::Any`] events already queued start an upcall at once, on
    /// this thread; with [`Invoke::New`] they wait for the next post.
    ///
    /// A handler that panics in that first upcall unwinds out of this call,
    /// which then has no dispatcher to return: it is dropped on the way, as
    /// a dropped consumer is (the EVD closes, each event still queued is
    /// dropped once, posts are refused as closed). To keep the dispatcher
    /// through such a panic, start with [`Invoke::New`] and enable the
    /// queued events' upcall with [`Upcalls::set_policy`]`(policy,
    /// Invoke::Any)`: its panic leaves the dispatcher with the caller, its
    /// token given back. A waker an async wait of this consumer left
    /// registered (a dropped [`Consumer::recv`] future's) is dropped here,
    /// unwoken (no wait is left to wake; a post that took the consumer's
    /// arm just before may still be waking it); a panic of its `Drop`
    /// unwinds out of this call the same way, with the dispatcher.
    ///
    /// [`UpcallPolicy::Teardown`] is taken as [`UpcallPolicy::Disabled`]: no
    /// upcall has run yet, so the dispatcher starts in the state a teardown
    /// leaves (`query().policy == Disabled`, nothing in flight):
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// let (poster, consumer) = evd::bounded(4).unwrap();
    /// let up = consumer.into_upcalls(UpcallPolicy::Teardown, Invoke::Any, |_: Result<u8, _>, _| {
    ///     unreachable!("disabled")
    /// });
    /// assert_eq!(up.query().policy, UpcallPolicy::Disabled);
    /// poster.post(1).unwrap(); // queued, not delivered
    /// assert_eq!(up.teardown().try_dequeue(), Ok(1));
    /// ```
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
        // A waker an async wait left registered belongs to no wait any
        // more: dropped here, not woken later by an instance's exit (on a
        // poster's thread) or dropped by a policy switch's wait. Its drop
        // is user code: should it panic, the panic goes on once the
        // dispatcher is whole, whose drop on the unwind drops the handler
        // and the consumer under its guard.
        let mut panics = Panics::default();
        panics.drop(self.shared().take_waker());
        // Unbound first: a disarm with the CNO still enabled and events
        // queued would trigger it (a key, and its waker run, for an EVD
        // that upcalls now serve); `unbind_cno` takes the enable back.
        self.unbind_cno();
        self.disarm();
        self.shared()
            .set_handler(Installed::shared(Box::new(handler)));
        let mut upcalls = Upcalls {
            consumer: Some(self),
        };
        panics.resume();
        // Not inside an upcall of this EVD (we held its consumer), and the
        // handler is shared, so this cannot fail.
        let _ = upcalls.set_policy(policy, invoke);
        upcalls
    }

    /// Hand the consumer to an upcall dispatcher under
    /// [`UpcallPolicy::SingleInstance`] with an `FnMut` handler: one that
    /// keeps its own state without atomics or a lock, since under
    /// SingleInstance no two calls ever overlap.
    ///
    /// The handler stays exclusive for as long as it is installed:
    /// [`Upcalls::set_policy`] refuses [`UpcallPolicy::ManyInstances`] with
    /// [`PolicyError::FnMutHandler`] until an `Fn` handler replaces it
    /// ([`Upcalls::set_handler`]). Disabling and re-enabling SingleInstance
    /// are allowed. `invoke` is as for [`Consumer::into_upcalls`], and so is
    /// a waker an async wait left registered (dropped here).
    ///
    /// ```
    /// use evd::Invoke;
    /// let (poster, consumer) = evd::bounded(8).unwrap();
    /// let mut total = 0u64; // plain state, moved into the handler
    /// let (report, sum) = std::sync::mpsc::channel();
    /// let upcalls = consumer.into_upcalls_mut(Invoke::Any, move |ev, more| {
    ///     total += ev.unwrap();
    ///     if !more {
    ///         report.send(total).unwrap();
    ///     }
    /// });
    /// poster.post(1).unwrap(); // runs the handler on this thread
    /// poster.post(2).unwrap();
    /// assert_eq!(sum.try_iter().last(), Some(3));
    /// drop(upcalls);
    /// ```
    pub fn into_upcalls_mut<F>(mut self, invoke: Invoke, handler: F) -> Upcalls<T>
    where
        F: FnMut(Result<T, Overflow>, bool) + Send + 'static,
    {
        let mut panics = Panics::default(); // as in `into_upcalls`
        panics.drop(self.shared().take_waker());
        self.unbind_cno(); // first, as in `into_upcalls`
        self.disarm();
        self.shared()
            .set_handler(Installed::exclusive(Box::new(handler)));
        let mut upcalls = Upcalls {
            consumer: Some(self),
        };
        panics.resume();
        // Not inside an upcall of this EVD (we held its consumer), and the
        // policy is not ManyInstances, so this cannot fail.
        let _ = upcalls.set_policy(UpcallPolicy::SingleInstance, invoke);
        upcalls
    }
}

impl<T: Send> Upcalls<T> {
    fn consumer(&self) -> &Consumer<T> {
        self.consumer.as_ref().expect("present until teardown")
    }

    fn shared(&self) -> &Shared<T> {
        self.consumer().shared()
    }

    /// Change the upcall policy; race-free against posts and running upcalls.
    ///
    /// * `Disabled`: no upcall starts; a running one stops before its next
    ///   dequeue (one that read the policy just before this call delivers
    ///   the event it is dequeuing, possibly after this returns; `Teardown`
    ///   waits for it); the rest stays queued.
    /// * `SingleInstance` / `ManyInstances`: enable; with [`Invoke::Any`] and
    ///   events queued, an upcall runs at once on this thread. Switching to
    ///   `SingleInstance` while instances started under `ManyInstances` still
    ///   run (directly or by way of `Disabled`) first waits for them, so at
    ///   most one runs from the moment this returns; from `ManyInstances`
    ///   with instances in flight, the events they leave queued are then
    ///   delivered as with `Invoke::Any` whatever `invoke` says (a post that
    ///   found one of them holding the token left its event to it), and so
    ///   is an event posted while the switch waited (upcalls were the
    ///   caller's enabled ones all along); a loss report pending when the
    ///   switch ends is delivered too, by an instance that then delivers
    ///   whatever is queued, as with `Invoke::Any`. By way
    ///   of `Disabled` the disable was the caller's own: what the instances
    ///   left is queued as anything posted while disabled, and `invoke`
    ///   decides (with `Invoke::New`, the next post delivers it).
    /// * `Teardown`: disable, and return after every running upcall has
    ///   returned. Refused from inside one of this EVD's upcalls
    ///   ([`PolicyError::FromUpcall`]): it would wait for itself.
    ///
    /// From inside one of this EVD's own upcalls only *other* instances are
    /// waited for: a SingleInstance handler may disable the policy and enable
    /// it again (DAT's `dat_evd_modify_upcall` from the upcall, then drain),
    /// and its own instance goes on delivering. Every instance on this
    /// thread's stack counts as its own (a `ManyInstances` handler that posts
    /// into its own EVD may run a nested one): those outer calls return in
    /// turn, on this thread, after the switch. A switch to `SingleInstance`
    /// from `ManyInstances` (where a post may start another instance at any
    /// moment), or from `Disabled` while other instances are in flight, has
    /// to wait for them, and is refused from inside an upcall with
    /// [`PolicyError::FromUpcall`]; the policy is then left as it was
    /// (disable first, then enable `SingleInstance`, to switch from there).
    ///
    /// `ManyInstances` is refused with [`PolicyError::FnMutHandler`] while the
    /// handler is an `FnMut` one ([`Consumer::into_upcalls_mut`],
    /// [`Upcalls::set_handler_mut`]); the policy is then left as it was.
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
        // The handler is changed only through `&self`, so it cannot change
        // between this check and the policy CAS below (`&mut self`). An
        // instance that still finds an FnMut handler under ManyInstances
        // calls it with the token kept (see `instance::run`), so this check
        // is the API's promise, not what soundness rests on.
        if policy == UpcallPolicy::ManyInstances && s.load_handler().is_exclusive() {
            return Err(PolicyError::FnMutHandler);
        }
        // SingleInstance waits out instances started under ManyInstances.
        // Under ManyInstances any post may start one between this read and
        // the policy CAS, so that case always waits; under Disabled none can
        // start, so the count read here cannot go stale.
        // Instances in flight on this thread's own stack (a call from inside
        // a handler) are the caller's: they are not waited for.
        let (current, in_flight) = s.policy_and_instances();
        let others = in_flight.saturating_sub(frames::own_calls(s.id()));
        let needs_quiesce = policy == UpcallPolicy::Teardown
            || (policy == UpcallPolicy::SingleInstance
                && (current == PolicyBits::Many || (current != PolicyBits::Single && others > 0)));
        let (mut waited_out, mut since) = (0, None);
        if needs_quiesce {
            let tail;
            (waited_out, tail) = self.quiesce()?;
            // Out of ManyInstances the caller had upcalls enabled all
            // along: an event posted while this switch held them disabled
            // is a new arrival (`state::invoke_after_quiesce`).
            since = (current == PolicyBits::Many).then_some(tail);
            if policy == UpcallPolicy::Teardown {
                crate::trace::event!(
                    DEBUG,
                    evd = self.shared().id(),
                    ?policy,
                    "upcall policy set"
                );
                return Ok(());
            }
        }
        // Events queued under ManyInstances while instances ran were
        // theirs to drain (a post that found one holding the token started
        // none): the wait above went through Disabled, where they left
        // them, so the new instance takes them whatever `invoke` says, as a
        // switch without that wait keeps its running instance draining
        // them. With none in flight when upcalls were disabled, nobody
        // owed them anything: `invoke` decides.
        let invoke = match current == PolicyBits::Many && waited_out > 0 {
            true => Invoke::Any,
            false => invoke,
        };
        let s = self.shared();
        // Before the switch: a subscriber that panics must not leave the
        // token it takes held, with no instance to hand it back.
        crate::trace::event!(DEBUG, evd = s.id(), ?policy, ?invoke, "upcall policy set");
        let (starts, _, _) = s.set_policy(policy.bits(), invoke, since);
        if starts {
            instance::run(s);
        }
        Ok(())
    }

    /// Disable upcalls and wait until none is in flight; returns how many
    /// were in flight when upcalls were disabled, and the tail count then.
    fn quiesce(&mut self) -> Result<(u64, u64), PolicyError> {
        let consumer = self.consumer.as_mut().expect("present until teardown");
        if frames::in_own_handler(consumer.shared().id()) {
            return Err(PolicyError::FromUpcall);
        }
        Ok(disable_and_wait(consumer))
    }

    /// Replace the handler while posters run. Upcalls already running finish
    /// with the old one; the old one is dropped once none can be using it:
    /// by the last instance calling it, inside that upcall, or here. Here
    /// with upcalls disabled it is inside the upcall too (only this thread
    /// could free a slot then): a waiting post from its `Drop` is refused at
    /// once on a full ring, as from a handler call.
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
        self.shared()
            .set_handler(Installed::shared(Box::new(handler)));
    }

    /// Replace the handler with an `FnMut` one, as
    /// [`Consumer::into_upcalls_mut`] installs: it is called by one thread at
    /// a time, and [`UpcallPolicy::ManyInstances`] is refused while it is
    /// installed. Upcalls already running finish with the old handler; the
    /// old one is dropped once none can be using it.
    ///
    /// Refused with [`PolicyError::FnMutHandler`] under ManyInstances (the
    /// handler is then dropped and the current one stays). Allowed under
    /// SingleInstance and while upcalls are disabled, from inside an upcall
    /// too.
    ///
    /// ```
    /// use evd::{Invoke, PolicyError, UpcallPolicy};
    /// let (poster, consumer) = evd::bounded(4).unwrap();
    /// let mut up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, |_: Result<u8, _>, _| {});
    /// assert_eq!(up.set_handler_mut(|_, _| {}), Err(PolicyError::FnMutHandler));
    ///
    /// up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any).unwrap();
    /// let mut calls = 0;
    /// up.set_handler_mut(move |ev, _| {
    ///     calls += 1;
    ///     assert_eq!((ev, calls), (Ok(9), 1));
    /// })
    /// .unwrap();
    /// poster.post(9).unwrap();
    /// ```
    pub fn set_handler_mut<F>(&self, handler: F) -> Result<(), PolicyError>
    where
        F: FnMut(Result<T, Overflow>, bool) + Send + 'static,
    {
        let s = self.shared();
        // The policy is changed only through `&mut self`, so it cannot become
        // ManyInstances between this check and the store.
        if s.policy() == PolicyBits::Many {
            return Err(PolicyError::FnMutHandler);
        }
        s.set_handler(Installed::exclusive(Box::new(handler)));
        Ok(())
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
    /// itself forever). The dispatcher it consumed is then dropped on the
    /// way out, as a dropped one is: the EVD closes (posts are refused as
    /// closed) and each event still queued is dropped once, by the last
    /// instance to leave. [`Upcalls::try_teardown`] hands it back instead.
    ///
    /// ```
    /// use evd::{Invoke, UpcallPolicy};
    /// let (poster, consumer) = evd::bounded(4).unwrap();
    /// let up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, |_, _| {});
    /// poster.post(3u8).unwrap();
    /// let mut consumer = up.teardown();
    /// assert_eq!(consumer.try_dequeue(), Ok(3));
    /// ```
    pub fn teardown(self) -> Consumer<T> {
        match self.try_teardown() {
            Ok(consumer) => consumer,
            Err((e, _upcalls)) => panic!("Upcalls::teardown: {e}"),
        }
    }

    /// [`Upcalls::teardown`], refused instead of panicking where it would
    /// wait for itself: from inside one of this EVD's own upcalls it hands
    /// the dispatcher back with [`PolicyError::FromUpcall`], untouched
    /// (upcalls still enabled as they were, nothing closed).
    ///
    /// ```
    /// use evd::{Invoke, PolicyError, UpcallPolicy};
    /// use std::sync::{Arc, Mutex};
    /// let (poster, consumer) = evd::bounded(4).unwrap();
    /// let slot: Arc<Mutex<Option<evd::Upcalls<u8>>>> = Arc::default();
    /// let inside = slot.clone();
    /// let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
    ///     let up = inside.lock().unwrap().take().unwrap();
    ///     let (e, up) = up.try_teardown().unwrap_err();
    ///     assert_eq!(e, PolicyError::FromUpcall);
    ///     *inside.lock().unwrap() = Some(up); // kept, still serving
    /// });
    /// *slot.lock().unwrap() = Some(up);
    /// poster.post(1).unwrap(); // its upcall tries, and is refused
    /// poster.post(2).unwrap();
    /// let up = slot.lock().unwrap().take().unwrap();
    /// assert_eq!(up.query().upcalls, 2);
    /// let mut consumer = up.try_teardown().unwrap();
    /// assert!(consumer.try_dequeue().is_err());
    /// ```
    ///
    /// # Errors
    /// `(PolicyError::FromUpcall, self)` from inside one of this EVD's own
    /// upcalls.
    pub fn try_teardown(mut self) -> Result<Consumer<T>, (PolicyError, Upcalls<T>)> {
        if let Err(e) = self.quiesce() {
            return Err((e, self));
        }
        let consumer = self.consumer.take().expect("present until teardown");
        // No instance can call the handler now: drop it (and whatever it
        // owns, a Poster of this EVD included, which would keep it open).
        consumer.shared().clear_handler();
        Ok(consumer)
    }
}

impl<T> Drop for Upcalls<T> {
    fn drop(&mut self) {
        let Some(consumer) = self.consumer.as_mut() else {
            return;
        };
        let mut panics = Panics::default();
        if frames::in_own_handler(consumer.shared().id()) {
            // Dropped from inside its own upcall: that upcall is the one in
            // flight, and it stops at its next dequeue; waiting would hang.
            let _ = consumer
                .shared()
                .set_policy(PolicyBits::Disabled, Invoke::New, None);
        } else {
            // The wait puts this thread's waker in the consumer's slot and
            // drops the one it replaces (`into_upcalls` took a task's out,
            // so only a waker of this crate's waits): should that drop
            // panic, the wait is finished all the same, as the consumer
            // must not be dropped with instances in flight, and the panic
            // is raised after the handler is dropped.
            panics.run(|| {
                let _ = disable_and_wait(consumer);
            });
            crate::consumer::block_until(consumer, |s| s.instances() == 0);
        }
        // No instance can call the handler now (the one running from here
        // keeps it alive until it returns): drop it, and whatever it owns (a
        // Poster of this EVD included, which would keep it open). User code:
        // dropped by an unwind (a handler's panic out of `into_upcalls`), a
        // panic of its `Drop` would abort the process, so it is kept and
        // raised only if this thread is not unwinding already.
        panics.run(|| consumer.shared().clear_handler());
        panics.resume();
    }
}

/// Disable upcalls, then block until no instance is in flight (a
/// teardown's barrier); returns how many were in flight when upcalls were
/// disabled, and the tail count then. Not from inside one of the EVD's own
/// upcalls.
fn disable_and_wait<T>(consumer: &mut Consumer<T>) -> (u64, u64) {
    let (disabled, in_flight, tail) =
        consumer
            .shared()
            .set_policy(PolicyBits::Disabled, Invoke::New, None);
    debug_assert!(!disabled, "disabling never starts an instance");
    crate::consumer::block_until(consumer, |s| s.instances() == 0);
    (in_flight, tail)
}

/// Shows the EVD's state (policy, upcalls in flight, counters) as
/// [`Upcalls::query`] does.
///
/// ```
/// use evd::{Invoke, UpcallPolicy};
/// let (_poster, consumer) = evd::bounded::<u8>(4).unwrap();
/// let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, |_, _| {});
/// let shown = format!("{up:?}");
/// assert!(shown.starts_with("Upcalls { state: Query {"), "{shown}");
/// assert!(shown.contains("policy: SingleInstance"), "{shown}");
/// ```
impl<T> std::fmt::Debug for Upcalls<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Upcalls");
        match &self.consumer {
            Some(c) => d.field("state", &c.query()),
            None => d.field("state", &"torn down"),
        };
        d.finish()
    }
}
