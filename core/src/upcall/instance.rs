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
        // The handler's panic is unwinding: a panic of the waker woken here
        // would abort the process, so it is caught (and dropped, as the
        // handler's goes on).
        let mut panics = Panics::default();
        panics.run(|| wake_tearer(self.shared, new));
        panics.resume();
    }
}

/// After an instance ended: if upcalls are disabled and none is left, a
/// teardown may be waiting for exactly this.
fn wake_tearer<T>(s: &Shared<T>, new: u64) {
    if state::policy(new) == PolicyBits::Disabled && state::instances(new) == 0 {
        s.wake_waker();
    }
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
                        wake_tearer(s, new);
                        return;
                    }
                    guard.holds_token = true;
                }
            }
            // SAFETY: SingleInstance: we hold the token (the loop runs with
            // it) and keep it through the call.
            (Some(item), _) => unsafe { deliver(s, s.load_handler(), item) },
            (None, _) => {
                if let Some(new) = try_exit(s) {
                    // The exit CAS gave the token and the instance back: the
                    // guard has nothing left to give, and must not give it
                    // twice if the waker woken below panics.
                    std::mem::forget(guard);
                    wake_tearer(s, new);
                    return;
                }
            }
        }
    }
}

/// The exit CAS: the word it installed once the instance has left it, or
/// `None` if work arrived (or a reserved slot is still being written) and
/// this instance must go on, holding the token.
fn try_exit<T>(s: &Shared<T>) -> Option<u64> {
    match s.exit_instance() {
        Some(new) => {
            if s.loss_pending() && s.restart_for_loss() {
                return None;
            }
            Some(new)
        }
        None => {
            // A poster holds a reserved slot at the head and is writing it.
            Backoff::new().snooze();
            None
        }
    }
}

/// The path the API keeps closed: an instance under ManyInstances that finds
/// an `FnMut` handler (it read the policy before a switch to Disabled and the
/// `set_handler_mut` that followed). The handler is installed here behind the
/// API's back, so that every post runs into it.
#[cfg(all(test, not(loom)))]
mod tests {
    use crate::upcall::handler::Installed;
    use crate::{Invoke, UpcallPolicy};
    use std::time::{Duration, Instant};

    /// An instance that gives the token back for its handler call on a full
    /// ring (filled behind it) wakes the poster waiting for room, which
    /// starts the draining instance itself: left asleep, it would wait for
    /// this instance's next head store, after a handler that may be waiting
    /// for it.
    #[test]
    fn a_token_given_back_on_a_full_ring_wakes_a_poster_waiting_for_room() {
        let (poster, consumer) = crate::bounded::<u32>(2).unwrap();
        poster.post(0).unwrap();
        poster.post(1).unwrap();
        let (seen, handled) = std::sync::mpsc::channel();
        let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::New, move |ev, _| {
            seen.send(ev.unwrap()).unwrap();
        });
        let s = up.consumer().shared().clone();
        // This thread is an instance that holds the token on the full ring.
        assert!(s.take_token_to_drain());
        let p = poster.clone();
        let (done, posted) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(p.post_blocking(2)).unwrap());
        let limit = Duration::from_secs(60);
        let start = Instant::now();
        while !up.query().room_wanted {
            assert!(start.elapsed() < limit, "the poster never waited for room");
            std::thread::yield_now();
        }
        super::release_for_handler(&s);
        let woken = posted.recv_timeout(limit);
        // This thread's instance ends either way (a teardown waits for it).
        s.abandon_instance(false);
        assert_eq!(woken, Ok(Ok(())), "the waiting poster was woken");
        let mut got: Vec<u32> = handled.try_iter().collect();
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2], "its instance drained the ring");
        drop(up.teardown());
    }

    /// A poster waiting for room whose waker runs inline and posts twice
    /// more with `post_blocking`: woken by the instance's head store, on
    /// the instance's own thread, it takes the freed slot, and its second
    /// post is refused at once (it would wait for room that only this
    /// instance, stopped under it, could free).
    #[test]
    fn a_room_waker_run_by_an_instance_s_dequeue_is_inside_the_upcall() {
        struct PostsTwice(crate::Poster<u32>, std::sync::mpsc::Sender<Vec<bool>>);
        impl std::task::Wake for PostsTwice {
            fn wake(self: std::sync::Arc<Self>) {
                let r = [2, 3].map(|v| self.0.post_blocking(v).is_ok());
                self.1.send(r.to_vec()).unwrap();
            }
        }
        let (poster, consumer) = crate::bounded::<u32>(1).unwrap();
        poster.post(0).unwrap(); // full
        let (seen, handled) = std::sync::mpsc::channel();
        let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
            seen.send(ev.unwrap()).unwrap();
        });
        let s = up.consumer().shared().clone();
        let (results, posted) = std::sync::mpsc::channel();
        let waker =
            std::task::Waker::from(std::sync::Arc::new(PostsTwice(poster.clone(), results)));
        let (done, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // This thread is an instance that holds the token on the full
            // ring; a post waiting for room is registered with `waker`.
            assert!(s.take_token_to_drain());
            let mut waiting = std::pin::pin!(poster.post_async(1));
            let mut cx = std::task::Context::from_waker(&waker);
            assert!(waiting.as_mut().poll(&mut cx).is_pending());
            super::run(&s);
            done.send(()).unwrap();
        });
        if ended.recv_timeout(Duration::from_secs(60)).is_err() {
            // A teardown would wait for the stuck instance: leave it.
            std::mem::forget(up);
            panic!("the instance never ended: its waker waits for room on its thread");
        }
        assert_eq!(
            posted.try_recv(),
            Ok(vec![true, false]),
            "one slot, then refused"
        );
        assert_eq!(handled.try_iter().collect::<Vec<_>>(), [0, 2]);
        drop(up.teardown());
    }

    /// A poster waiting for room whose waker runs inline and changes the
    /// upcall policy (which waits out the instances in flight): woken when
    /// an instance gives the token back for its handler call, on that
    /// instance's thread, it is inside the upcall, and the change is refused
    /// (waiting, it would wait for the instance stopped under it).
    #[test]
    fn a_room_waker_run_when_an_instance_gives_the_token_back_is_inside_the_upcall() {
        use std::sync::{Arc, Mutex, mpsc};
        type Answer = Result<(), crate::PolicyError>;
        struct ChangesPolicy(Mutex<Option<crate::Upcalls<u32>>>, mpsc::Sender<Answer>);
        impl std::task::Wake for ChangesPolicy {
            fn wake(self: Arc<Self>) {
                let mut up = self.0.lock().unwrap();
                let r = up
                    .as_mut()
                    .unwrap()
                    .set_policy(UpcallPolicy::SingleInstance, Invoke::New);
                self.1.send(r).unwrap();
            }
        }
        let (poster, consumer) = crate::bounded::<u32>(2).unwrap();
        poster.post(0).unwrap();
        poster.post(1).unwrap(); // full
        let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::New, |_, _| {});
        let s = up.consumer().shared().clone();
        let (answers, answered) = mpsc::channel();
        let state = Arc::new(ChangesPolicy(Mutex::new(Some(up)), answers));
        let waker = std::task::Waker::from(state.clone());
        let (done, ended) = mpsc::channel();
        std::thread::spawn(move || {
            // This thread is an instance that holds the token on the full
            // ring; a post waiting for room is registered with `waker`.
            assert!(s.take_token_to_drain());
            let mut waiting = std::pin::pin!(poster.post_async(2));
            let mut cx = std::task::Context::from_waker(&waker);
            assert!(waiting.as_mut().poll(&mut cx).is_pending());
            super::release_for_handler(&s);
            s.abandon_instance(false);
            done.send(()).unwrap();
        });
        if ended.recv_timeout(Duration::from_secs(60)).is_err() {
            // The change waits for the stuck instance: leave both.
            std::mem::forget(state);
            panic!("a policy change from the room waker waited for the instance it ran in");
        }
        assert_eq!(answered.try_recv(), Ok(Err(crate::PolicyError::FromUpcall)));
        let up = state.0.lock().unwrap().take().unwrap();
        drop(up.teardown());
    }

    /// A room waiter whose waker polls it inline, woken when an instance
    /// gives the token back on a full ring: the thread is not the consumer
    /// then (the token is free), so the waiter starts the draining instance
    /// itself, as it would on any other thread, and finds the room it made.
    #[test]
    fn a_room_waiter_woken_when_an_instance_gives_the_token_back_drains_the_ring() {
        use std::sync::{Arc, Mutex, mpsc};
        use std::task::{Context, Poll, Waker};
        type Answer = Poll<Result<usize, crate::BatchPostError>>;
        struct PollsRoom(Mutex<Option<crate::RoomWaiter<u32>>>, mpsc::Sender<Answer>);
        impl std::task::Wake for PollsRoom {
            fn wake(self: Arc<Self>) {
                let mut room = self.0.lock().unwrap();
                let r = room
                    .as_mut()
                    .unwrap()
                    .poll_room(&mut Context::from_waker(Waker::noop()));
                self.1.send(r).unwrap();
            }
        }
        let (poster, consumer) = crate::bounded::<u32>(2).unwrap();
        poster.post(0).unwrap();
        poster.post(1).unwrap(); // full
        let (seen, handled) = mpsc::channel();
        let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::New, move |ev, _| {
            seen.send(ev.unwrap()).unwrap();
        });
        let s = up.consumer().shared().clone();
        let (answers, answered) = mpsc::channel();
        let state = Arc::new(PollsRoom(Mutex::new(None), answers));
        let waker = Waker::from(state.clone());
        let mut room = poster.room_waiter();
        // This thread is an instance that holds the token on the full ring.
        assert!(s.take_token_to_drain());
        assert!(
            room.poll_room(&mut Context::from_waker(&waker))
                .is_pending()
        );
        *state.0.lock().unwrap() = Some(room);
        super::release_for_handler(&s);
        s.abandon_instance(false);
        assert_eq!(
            answered.try_recv(),
            Ok(Poll::Ready(Ok(2))),
            "drained, not refused"
        );
        assert_eq!(handled.try_iter().collect::<Vec<_>>(), [0, 1]);
        drop(up.teardown());
    }

    /// A room waiter polled from a handler call under ManyInstances (the
    /// token given back for the call) on a full ring answers `Full` at once:
    /// it does not start the draining instance there, which would call the
    /// handler again from inside itself.
    #[test]
    fn a_room_waiter_polled_from_a_handler_call_does_not_re_enter_the_handler() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::{Arc, Mutex};
        use std::task::{Context, Poll, Waker};
        let (poster, consumer) = crate::bounded::<u32>(2).unwrap();
        poster.post(0).unwrap();
        poster.post(1).unwrap(); // full
        let room = Arc::new(Mutex::new(poster.room_waiter()));
        let (depth, deepest) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let (p, d, m, a) = (
            poster.clone(),
            depth.clone(),
            deepest.clone(),
            answers.clone(),
        );
        let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, move |ev, _| {
            m.fetch_max(d.fetch_add(1, SeqCst) + 1, SeqCst);
            if ev == Ok(0) {
                // The slot the dequeue of 0 freed, taken: the ring is full.
                let permit = p.try_reserve().unwrap();
                let mut cx = Context::from_waker(Waker::noop());
                a.lock()
                    .unwrap()
                    .push(room.lock().unwrap().poll_room(&mut cx));
                drop(permit);
            }
            d.fetch_sub(1, SeqCst);
        });
        assert_eq!(
            *answers.lock().unwrap(),
            [Poll::Ready(Err(crate::BatchPostError::Full))]
        );
        assert_eq!(deepest.load(SeqCst), 1, "the handler was not re-entered");
        drop(up.teardown());
    }

    #[test]
    fn an_fnmut_handler_found_under_many_instances_runs_with_the_token_kept() {
        let (poster, consumer) = crate::bounded::<u32>(4).unwrap();
        let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, |_, _| {
            unreachable!("replaced before any post")
        });
        let p = poster.clone();
        let s = up.consumer().shared().clone();
        let mut seen = Vec::new();
        let mut depth = 0;
        up.shared()
            .set_handler(Installed::exclusive(Box::new(move |ev, _| {
                depth += 1;
                assert_eq!(depth, 1, "the FnMut handler nested in itself");
                assert!(s.token_taken(), "called with the token held");
                let v = ev.unwrap();
                seen.push(v);
                if v == 1 {
                    // With the token held this only queues; had it been
                    // handed back, this post would start a second instance
                    // right here, inside this call.
                    p.post(2).unwrap();
                    assert_eq!(seen, [1]);
                }
                if v == 2 {
                    assert_eq!(seen, [1, 2], "delivered after the call that posted it");
                }
                depth -= 1;
            })));
        poster.post(1).unwrap();
        let q = up.query();
        assert_eq!((q.upcalls, q.len, q.upcalls_in_flight), (2, 0, 0));
        drop(up.teardown());
    }

    /// Under ManyInstances a post that finds an instance holding the token
    /// starts none: that instance will come back for its event. A switch to
    /// SingleInstance waits for the instance by way of Disabled, where it
    /// leaves instead; the new policy's instance must take the events it
    /// left, even with `Invoke::New` (they were queued while upcalls were
    /// enabled), or they wait for a post that may never come.
    #[test]
    fn a_switch_from_many_to_single_instance_takes_the_events_the_waited_out_instances_left() {
        let (poster, consumer) = crate::bounded::<u32>(4).unwrap();
        poster.post(1).unwrap();
        let (seen, handled) = std::sync::mpsc::channel();
        let mut up =
            consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::New, move |ev, _| {
                seen.send(ev.unwrap()).unwrap();
            });
        let s = up.consumer().shared().clone();
        // This thread is an instance that holds the token: a post now
        // leaves its event to it. Then it gives the token back, as for a
        // handler call, and stays counted.
        assert!(s.take_token_to_drain());
        poster.post(2).unwrap();
        s.release_token();
        let setter = std::thread::spawn(move || {
            up.set_policy(UpcallPolicy::SingleInstance, Invoke::New)
                .unwrap();
            up
        });
        let limit = Duration::from_secs(60);
        let start = Instant::now();
        while s.policy() != crate::state::PolicyBits::Disabled {
            assert!(start.elapsed() < limit, "the switch never disabled");
            std::thread::yield_now();
        }
        // The handler call returns to a disabled policy: the instance
        // leaves, its events still queued.
        let new = s.abandon_instance(false);
        super::wake_tearer(&s, new);
        let up = setter.join().unwrap();
        assert_eq!(
            handled.try_iter().collect::<Vec<_>>(),
            [1, 2],
            "delivered by the switch"
        );
        drop(up.teardown());
    }
}

/// The loom model of the same path: two posters under ManyInstances with an
/// `FnMut` handler, which mutates a plain `Vec` in loom's `UnsafeCell`. Were
/// the token handed back before the call, the two instances' calls could
/// overlap, and loom would report the cell's concurrent `&mut` access. Run by
/// `scripts/test` (`--cfg loom`, `--lib`).
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
        let mut b = loom::model::Builder::new();
        if b.preemption_bound.is_none() {
            b.preemption_bound = Some(3);
        }
        b.check(|| {
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
