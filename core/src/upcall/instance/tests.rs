//! The instance's unit tests: paths a test through the handles cannot reach
//! exactly. This thread plays an instance that holds the token
//! (`take_token_to_drain`) or gives it back for a handler call
//! (`release_for_handler`) at the point a race needs; and the path the API
//! keeps closed, an instance under ManyInstances that finds an `FnMut`
//! handler (it read the policy before a switch to Disabled and the
//! `set_handler_mut` that followed), installed behind the API's back.

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
    let waker = std::task::Waker::from(std::sync::Arc::new(PostsTwice(poster.clone(), results)));
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
    let mut up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::New, move |ev, _| {
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
    super::left(&s, new);
    let up = setter.join().unwrap();
    assert_eq!(
        handled.try_iter().collect::<Vec<_>>(),
        [1, 2],
        "delivered by the switch"
    );
    drop(up.teardown());
}

/// A handler replaced while upcalls are enabled, dropped by the
/// replacing thread (no instance is calling it), is not part of the
/// upcall there: an instance can free a slot, so a waiting post from its
/// `Drop` waits and gets in (refused at once, it would be lost).
#[test]
fn a_handler_replaced_while_enabled_may_wait_for_room_from_its_drop() {
    use std::sync::{Arc, Mutex};
    struct PostsOnDrop(crate::Poster<u32>, Arc<Mutex<Option<bool>>>);
    impl Drop for PostsOnDrop {
        fn drop(&mut self) {
            *self.1.lock().unwrap() = Some(self.0.post_blocking(99).is_ok());
        }
    }
    let (poster, consumer) = crate::bounded::<u32>(2).unwrap();
    poster.post(1).unwrap();
    poster.post(2).unwrap(); // full
    let got = Arc::new(Mutex::new(None));
    let on_drop = PostsOnDrop(poster.clone(), got.clone());
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |_, _| {
        let _kept = &on_drop;
    });
    let s = up.consumer().shared().clone();
    // This thread is an instance that holds the token on the full ring.
    assert!(s.take_token_to_drain());
    let (seen, handled) = std::sync::mpsc::channel();
    let replacer = std::thread::spawn(move || {
        up.set_handler(move |ev, _| seen.send(ev.unwrap()).unwrap());
        up
    });
    let limit = Duration::from_secs(60);
    let start = Instant::now();
    while !s.room_wanted() && !replacer.is_finished() {
        assert!(start.elapsed() < limit, "the drop's post never waited");
        std::thread::yield_now();
    }
    // The instance goes on: its dequeues free the slot the post waits
    // for, and the new handler gets every event.
    super::run(&s);
    let up = replacer.join().unwrap();
    assert_eq!(*got.lock().unwrap(), Some(true), "the drop's post got in");
    let mut delivered: Vec<u32> = handled.try_iter().collect();
    poster.post(3).unwrap(); // and delivers what is left
    delivered.extend(handled.try_iter());
    delivered.sort_unstable();
    assert_eq!(delivered, [1, 2, 3, 99]);
    drop(up.teardown());
}

/// An event that counts its drops.
struct CountsDrops(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for CountsDrops {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// An instance that left with none in flight may come to look at the
/// queue's mark only later, after a later instance started and the consumer
/// was dropped in that one's upcall: it must not drop the queue while that
/// instance is in flight (under ManyInstances it may be taking an event
/// out). The last one out drops it, once.
#[test]
fn an_early_leaver_leaves_the_queue_to_an_instance_still_in_flight() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let drops = std::sync::Arc::new(AtomicUsize::new(0));
    let (poster, consumer) = crate::bounded::<CountsDrops>(2).unwrap();
    poster.post(CountsDrops(drops.clone())).unwrap();
    poster.post(CountsDrops(drops.clone())).unwrap();
    let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::New, |_, _| {});
    let s = up.consumer().shared().clone();
    // The early leaver: an instance that left with none in flight, stopped
    // before it looked at the mark.
    assert!(s.take_token_to_drain());
    let early = s.abandon_instance(true);
    assert_eq!(crate::state::instances(early), 0);
    // A later instance, in flight; the consumer dropped in its upcall.
    assert!(s.take_token_to_drain());
    s.set_policy(crate::state::PolicyBits::Disabled, Invoke::New, None);
    s.close();
    s.leave_queued_to_instances();
    s.after_instance_left(early);
    let under_an_instance = drops.load(SeqCst);
    // The instance in flight leaves (before any assertion: a teardown on
    // the way out of a failed one would wait for it).
    let last = s.abandon_instance(true);
    assert_eq!(under_an_instance, 0, "dropped under an instance in flight");
    s.after_instance_left(last);
    assert_eq!(drops.load(SeqCst), 2, "the last one out dropped the queue");
    s.after_instance_left(last);
    drop(up);
    drop(poster);
    assert_eq!(drops.load(SeqCst), 2, "each dropped once");
}

/// A task's waker whose `Drop` panics, flagging that it ran.
struct FlagsThenPanicsOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl std::task::Wake for FlagsThenPanicsOnDrop {
    fn wake(self: std::sync::Arc<Self>) {}
}

impl Drop for FlagsThenPanicsOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        panic!("the replaced waker's drop");
    }
}

/// `Upcalls` dropped (not from a handler) while an instance is in flight
/// waits for it, putting its thread's waker in the consumer's slot: a waker
/// found there is dropped, and panics. (`into_upcalls` takes a task's
/// waker out, so none is there through the API: this test puts one there,
/// the wait's robustness being what it checks.) The wait is finished all the same (the consumer is not dropped
/// with an instance in flight and no frame of it on the dropping thread,
/// where nobody would be sure to drop the queue); the panic reaches the
/// drop's caller, the consumer and its queue are dropped, nothing aborts.
/// This thread plays the instance. (Without the finished wait, the drop
/// aborts only if it reaches the consumer before this thread's leave.)
#[test]
fn upcalls_dropped_while_an_instance_runs_hands_on_the_panic_of_the_waker_it_replaces() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let (poster, consumer) = crate::bounded::<u32>(4).unwrap();
    let replaced = std::sync::Arc::new(AtomicBool::new(false));
    let mut up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::New, |_, _| {});
    {
        let waker =
            std::task::Waker::from(std::sync::Arc::new(FlagsThenPanicsOnDrop(replaced.clone())));
        up.consumer().shared().register_waker(&waker);
    } // the slot keeps the only clone
    poster.post(1).unwrap(); // queued: upcalls are disabled
    up.set_policy(UpcallPolicy::SingleInstance, Invoke::New)
        .unwrap();
    let s = up.consumer().shared().clone();
    // This thread is an instance in flight.
    assert!(s.take_token_to_drain());
    let dropper = std::thread::spawn(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(up)))
            .err()
            .and_then(|p| p.downcast_ref::<&str>().copied())
    });
    let limit = Duration::from_secs(60);
    let start = Instant::now();
    while !replaced.load(SeqCst) {
        assert!(start.elapsed() < limit, "the drop never replaced the waker");
        std::thread::yield_now();
    }
    // The instance leaves; the drop's wait ends.
    let new = s.abandon_instance(true);
    super::left(&s, new);
    assert_eq!(
        dropper.join().unwrap(),
        Some("the replaced waker's drop"),
        "the panic reaches the drop's caller"
    );
    assert!(poster.is_closed(), "the consumer was dropped");
    assert_eq!(s.query().len, 0, "its queue dropped");
}
