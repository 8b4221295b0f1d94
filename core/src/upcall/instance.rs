//! One upcall instance: the consumer side run on a posting thread while it
//! holds the token, through [`Shared`]'s token operations.

use crate::engine::Shared;
use crate::error::{Overflow, TryDequeueError};
use crate::frames;
use crate::state::{self, PolicyBits};
use crate::sync::Backoff;
use crate::unwind::{self, Panics};
use crate::upcall::handler::Loaded;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// Gives an instance's share of the word back if its handler unwinds.
struct InstanceGuard<'a, T> {
    shared: &'a Shared<T>,
    holds_token: bool,
}

impl<T> Drop for InstanceGuard<'_, T> {
    fn drop(&mut self) {
        let new = self.shared.abandon_instance(self.holds_token);
        self.shared.wake_room_if_stranded(new);
        // The handler's panic is unwinding: a panic of the waker woken here,
        // or of a queued event's `Drop`, would abort the process; `left`
        // catches it (and drops it, as the handler's goes on).
        left(self.shared, new);
    }
}

/// After an instance left, installing `new`: if upcalls are disabled and
/// none is left, a teardown may be waiting for exactly this; and the last
/// one out drops what is queued if the consumer was dropped from inside an
/// upcall ([`Shared::after_instance_left`]).
/// Each step runs even if the one before panics (a waker, an event's
/// `Drop`); the first panic is raised afterwards, unless the thread is
/// already unwinding.
fn left<T>(s: &Shared<T>, new: u64) {
    let mut panics = Panics::default();
    if state::policy(new) == PolicyBits::Disabled && state::instances(new) == 0 {
        panics.run(|| s.wake_waker());
    }
    panics.run(|| s.after_instance_left(new));
    panics.resume();
}

/// Run `handler` on one item, then let it go, with this thread's frame
/// linked throughout: if `set_handler` replaced it meanwhile, this is its
/// last reference, and its drop (user code, run while the instance may hold
/// the token) is part of the upcall, so a waiting post from it is refused
/// at once (`frames::in_own_handler`) instead of waiting for room that only
/// this instance could free.
///
/// # Safety
/// If `handler` is exclusive (`FnMut`), the caller holds the token from
/// before this call until after it returns.
unsafe fn deliver<T>(s: &Shared<T>, handler: Loaded<T>, item: Result<T, Overflow>) {
    // Another event is ready behind this one (its stamp says so; the state
    // word is not consulted).
    let more = s.ready(1) > 0;
    frames::as_handler_of(s.id(), move || {
        // AssertUnwindSafe: the handler's panic is raised again below, so
        // nothing it left half-updated is used by this instance.
        // SAFETY: the caller's contract.
        let called = catch_unwind(AssertUnwindSafe(|| unsafe {
            s.call_handler(&handler, item, more)
        }));
        // Dropped here, inside the frame, whether the call returned or not.
        match called {
            Ok(()) => drop(handler),
            Err(panic) => {
                // Dropped before the handler's panic goes on: dropped by the
                // unwind, a last reference whose `Drop` panics too would
                // abort the process. Its panic is the second one: swallowed.
                let _ = unwind::caught(move || drop(handler));
                resume_unwind(panic);
            }
        }
    });
}

/// ManyInstances: give the token back before a handler call. The ring may
/// be full now with the token free while this instance is busy in its
/// handler (for long, or waiting for a poster): posters waiting for room are
/// woken to start the draining instance themselves, as after an instance
/// that unwound ([`Shared::wake_room_if_stranded`]). Their wakers are user
/// code run while this instance is still counted: inside this EVD's frame,
/// so that a teardown or a policy change from one is refused instead of
/// waiting for this instance, stopped under it, and a post or a room waiter
/// from one never waits (only this instance's return might end that wait);
/// marked as a hand-back, where the token is free, so that a room waiter
/// may start the draining instance itself.
fn release_for_handler<T>(s: &Shared<T>) {
    frames::as_token_hand_back_of(s.id(), || {
        let new = s.release_token();
        s.wake_room_if_stranded(new);
    });
}

/// Run one upcall instance. The caller's CAS took the token and counted the
/// instance in the word.
pub(crate) fn run<T>(s: &Shared<T>) {
    s.count_instance_start();
    let mut guard = InstanceGuard {
        shared: s,
        holds_token: true,
    };
    // Paces an exit that finds a slot still being written ([`try_exit`]);
    // renewed whenever the instance takes something out.
    let mut waiting = Backoff::new();
    loop {
        // Holding the token: we are the consumer now.
        let policy = s.policy();
        let item = match policy {
            PolicyBits::Disabled => None,
            // Inside this EVD's frame, as a handler call: the dequeue's head
            // store wakes posters waiting for room (and an end of stream
            // finishes a close, which wakes more), user code run while this
            // instance holds the token, so a waiting post from such a waker
            // is refused at once, and a teardown from it does not wait for
            // this instance (`frames::in_own_handler`, `own_calls`).
            _ => match frames::as_handler_of(s.id(), || s.dequeue_one()) {
                Ok(ev) => Some(Ok(ev)),
                Err(TryDequeueError::Overflow(o)) => Some(Err(o)),
                Err(TryDequeueError::Empty | TryDequeueError::Closed) => None,
            },
        };
        debug_assert!(guard.holds_token, "the loop runs with the token");
        if item.is_some() {
            waiting = Backoff::new();
        }
        match (item, policy) {
            (Some(item), PolicyBits::Many) => {
                // Loaded while we hold the token: an `FnMut` handler seen here
                // is called with the token kept, as under SingleInstance.
                // (`set_policy` refuses ManyInstances while one is installed,
                // and `set_handler_mut` refuses to install one under it, but
                // this instance read the policy before a change to Disabled
                // and the handler swap that may follow it.)
                let handler = s.load_handler();
                if handler.is_exclusive() {
                    // SAFETY: we hold the token (the loop runs with it) and
                    // keep it through the call.
                    unsafe { deliver(s, handler, item) };
                } else {
                    release_for_handler(s);
                    guard.holds_token = false;
                    // SAFETY: a shared handler: no token needed.
                    unsafe { deliver(s, handler, item) };
                    if let Err(new) = s.reacquire_token() {
                        std::mem::forget(guard);
                        // Over the limit: this instance leaves events it
                        // did not drain, as `release_for_handler` may.
                        s.wake_room_if_stranded(new);
                        left(s, new);
                        return;
                    }
                    guard.holds_token = true;
                }
            }
            // SAFETY: SingleInstance: we hold the token (the loop runs with
            // it) and keep it through the call.
            (Some(item), _) => unsafe { deliver(s, s.load_handler(), item) },
            (None, _) => {
                if let Some(new) = try_exit(s, &waiting) {
                    // The exit CAS gave the token and the instance back: the
                    // guard has nothing left to give, and must not give it
                    // twice if the waker woken below panics.
                    std::mem::forget(guard);
                    left(s, new);
                    return;
                }
            }
        }
    }
}

/// The exit CAS: the word it installed once the instance has left it, or
/// `None` if work arrived (or a reserved slot is still being written) and
/// this instance must go on, holding the token.
///
/// `waiting` paces the turns spent on a slot still being written: one
/// back-off for the whole wait, so that it moves from spinning to yielding
/// to napping by the clock (a fresh one per turn would PAUSE once and never yield,
/// loading the state word posters write on every turn while the poster
/// that reserved the slot is preempted).
fn try_exit<T>(s: &Shared<T>, waiting: &Backoff) -> Option<u64> {
    match s.exit_instance() {
        Some(new) => {
            if s.loss_pending() && s.restart_for_loss() {
                return None;
            }
            Some(new)
        }
        None => {
            // A poster holds a reserved slot at the head and is writing it.
            waiting.snooze();
            None
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_models {
    use crate::upcall::handler::Installed;
    use crate::{Invoke, TryDequeueError, UpcallPolicy};
    use loom::sync::{Arc, Mutex};

    struct Sink {
        seen: Vec<u32>,
        out: Arc<Mutex<Vec<u32>>>,
    }

    impl Drop for Sink {
        fn drop(&mut self) {
            *self.out.lock().unwrap() = std::mem::take(&mut self.seen);
        }
    }

    #[test]
    fn an_fnmut_handler_found_under_many_instances_is_never_entered_twice() {
        crate::sync::model(|| {
            let (poster, consumer) = crate::bounded::<u32>(2).unwrap();
            let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, |_, _| {
                unreachable!("replaced before any post")
            });
            let out = Arc::new(Mutex::new(Vec::new()));
            let mut sink = Sink {
                seen: Vec::new(),
                out: out.clone(),
            };
            up.shared()
                .set_handler(Installed::exclusive(Box::new(move |ev, _| {
                    sink.seen.push(ev.unwrap());
                })));
            let p2 = poster.clone();
            let t = loom::thread::spawn(move || p2.post(1).unwrap());
            poster.post(2).unwrap();
            t.join().unwrap();
            let mut consumer = up.teardown();
            let mut got = std::mem::take(&mut *out.lock().unwrap());
            loop {
                match consumer.try_dequeue() {
                    Ok(v) => got.push(v),
                    Err(TryDequeueError::Empty) => break,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            got.sort_unstable();
            assert_eq!(got, [1, 2], "each event exactly once");
        });
    }
}
