//! Posters that wait for room: `post_blocking`, `post_timeout`,
//! `post_deadline`, `post_async` and the `Sink`. One test per promise.
//!
//! The deterministic tests poll futures by hand with counting wakers, so the
//! room queue's rules (one wake per freed slot, FIFO, a woken waiter that
//! loses the race goes first next time, a dropped waiter passes its wake on)
//! are checked without any thread timing. The threaded tests here are short
//! enough for Miri (`scripts/miri` runs this file); they wait on conditions,
//! never on time. The long threaded ones are in `stress.rs`.

mod common;
use common::{Counting, counting, eventually, full_ring, post_blocking_on_a_thread, shared_vec};
use evd::{Invoke, PostAsync, PostError, Poster, UpcallPolicy};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};
use std::time::{Duration, Instant};

#[test]
fn dequeue_with_frees_room_for_a_waiting_poster() {
    // As `a_blocked_poster_is_woken_by_the_dequeue_that_frees_a_slot`, with
    // `dequeue_with`'s head store: repeated until its wake was the way in.
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let (poster, mut consumer) = full_ring(&[0]);
        let waiter = post_blocking_on_a_thread(&poster, 1);
        eventually("the poster waits for room", || consumer.query().room_wanted);
        let mut got = Vec::new();
        assert_eq!(consumer.dequeue_with(1, |v| got.push(v)), Ok(1));
        assert_eq!(waiter.join().unwrap(), Ok(()));
        assert_eq!(consumer.dequeue_with(1, |v| got.push(v)), Ok(1));
        assert_eq!(got, [0, 1]);
        let wakes = consumer.query().room_wakes;
        assert!(wakes <= 1, "one freed slot, one wake at most: {wakes}");
        if wakes == 1 {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "never woken: always in by its own post"
        );
    }
}

/// A `post_async` of `ev` polled once with a counting waker, and found
/// waiting for room: its count, its waker and the future.
fn waiting(poster: &Poster<u32>, ev: u32) -> (Arc<Counting>, Waker, PostAsync<'_, u32>) {
    let (count, waker) = counting();
    let mut fut = poster.post_async(ev);
    assert!(poll(&mut fut, &waker).is_pending());
    (count, waker, fut)
}
/// A waker whose `wake` panics (a broken executor's).
struct Panicking;
impl Wake for Panicking {
    fn wake(self: Arc<Self>) {
        panic!("a broken executor's waker");
    }
}
fn poll<F: Future + Unpin>(f: &mut F, w: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(w))
}

#[test]
fn a_blocked_poster_is_woken_by_the_dequeue_that_frees_a_slot() {
    // A queued poster whose post after joining comes after the dequeue gets
    // in by that post, and no wake is owed (legal): the scenario repeats
    // until the wake was the way in. A wake that never comes hangs it.
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let (poster, mut consumer) = full_ring(&[1]);
        let t = post_blocking_on_a_thread(&poster, 2);
        eventually("the poster waits for room", || consumer.query().room_wanted);
        assert_eq!(consumer.try_dequeue(), Ok(1));
        assert_eq!(consumer.dequeue(), Ok(2));
        assert_eq!(t.join().unwrap(), Ok(()));
        let q = consumer.query();
        assert!(!q.room_wanted);
        assert_eq!(q.lost, 0);
        assert!(q.room_wakes <= 1, "one freed slot, one wake at most: {q:?}");
        if q.room_wakes == 1 {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "never woken: always in by its own post"
        );
    }
}

#[test]
fn one_wake_per_freed_slot_first_come_first_served_and_a_hand_on_while_room_is_left() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    for i in 0..4 {
        poster.post(i).unwrap();
    }
    let waiters: Vec<_> = (0..4).map(|_| counting()).collect();
    let mut futs: Vec<_> = (0..4).map(|i| poster.post_async(10 + i)).collect();
    for (f, (_, w)) in futs.iter_mut().zip(&waiters) {
        assert!(poll(f, w).is_pending());
    }
    let woken = || waiters.iter().map(|(c, _)| c.wakes()).collect::<Vec<_>>();
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!(
        woken(),
        [1, 0, 0, 0],
        "one slot, one wake, the first waiter"
    );
    let mut out = Vec::new();
    consumer.dequeue_batch(&mut out, 2).unwrap();
    assert_eq!(woken(), [1, 1, 1, 0], "two slots, the next two waiters");
    // The first woken waiter posts and the ring still has room (2 of 4):
    // it hands a wake on (it cannot know whether its wake was for the slot
    // it used), so the last waiter tries too.
    assert_eq!(poll(&mut futs[0], &waiters[0].1), Poll::Ready(Ok(())));
    assert_eq!(woken(), [1, 1, 1, 1]);
    assert_eq!(poll(&mut futs[1], &waiters[1].1), Poll::Ready(Ok(())));
    // The third fills the ring: no hand-on from a full ring.
    assert_eq!(poll(&mut futs[2], &waiters[2].1), Poll::Ready(Ok(())));
    assert_eq!(woken(), [1, 1, 1, 1]);
    assert!(poll(&mut futs[3], &waiters[3].1).is_pending(), "full again");
    assert_eq!(consumer.try_dequeue(), Ok(3));
    assert_eq!(woken(), [1, 1, 1, 2]);
    assert_eq!(poll(&mut futs[3], &waiters[3].1), Poll::Ready(Ok(())));
    drop(futs);
    let got: Vec<u32> = consumer.try_iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(got, [10, 11, 12, 13]);
    assert_eq!(
        consumer.query().room_wakes,
        5,
        "four freed slots, one hand-on"
    );
}

#[test]
fn a_woken_poster_that_loses_the_slot_is_woken_first_next_time() {
    let (poster, mut consumer) = full_ring(&[0]);
    let (a, wa, mut fa) = waiting(&poster, 1);
    let (b, wb, mut fb) = waiting(&poster, 2);
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!((a.wakes(), b.wakes()), (1, 0));
    // A poster that does not wait takes the slot first.
    poster.post(9).unwrap();
    assert!(
        poll(&mut fa, &wa).is_pending(),
        "a lost the race: full again"
    );
    assert_eq!(consumer.try_dequeue(), Ok(9));
    assert_eq!((a.wakes(), b.wakes()), (2, 0), "a is first in line again");
    assert_eq!(poll(&mut fa, &wa), Poll::Ready(Ok(())));
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(b.wakes(), 1);
    assert_eq!(poll(&mut fb, &wb), Poll::Ready(Ok(())));
    assert_eq!(consumer.try_dequeue(), Ok(2));
}

#[test]
fn a_waiter_dropped_after_its_wake_passes_the_wake_on() {
    let (poster, mut consumer) = full_ring(&[0]);
    let (a, _wa, fa) = waiting(&poster, 1);
    let (b, wb, mut fb) = waiting(&poster, 2);
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!((a.wakes(), b.wakes()), (1, 0));
    drop(fa); // woken, never used the slot
    assert_eq!(b.wakes(), 1, "the slot's wake reached the next waiter");
    assert_eq!(poll(&mut fb, &wb), Poll::Ready(Ok(())));
    assert_eq!(consumer.try_dequeue(), Ok(2));
    assert!(!consumer.query().room_wanted);
}

#[test]
fn a_waiter_dropped_before_any_wake_wakes_nobody_and_leaves_the_queue() {
    let (poster, mut consumer) = full_ring(&[0]);
    let (a, _wa, fa) = waiting(&poster, 1);
    assert!(consumer.query().room_wanted);
    drop(fa);
    assert!(!consumer.query().room_wanted);
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!(a.wakes(), 0);
    assert_eq!(consumer.query().room_wakes, 0);
}

#[test]
fn room_waiters_counts_the_queued_posters_and_a_woken_one_only_once_it_rejoins() {
    let (poster, mut consumer) = full_ring(&[0]);
    let (a, wa, mut fa) = waiting(&poster, 1);
    let (_b, _wb, fb) = waiting(&poster, 2);
    assert_eq!(consumer.query().room_waiters, 2);
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!(a.wakes(), 1);
    assert_eq!(
        consumer.query().room_waiters,
        1,
        "the woken one left the queue"
    );
    // Another post takes the freed slot first: the woken one finds the
    // ring full again and rejoins.
    assert_eq!(poster.post(3), Ok(()));
    assert!(poll(&mut fa, &wa).is_pending());
    assert_eq!(consumer.query().room_waiters, 2);
    drop(fb);
    assert_eq!(consumer.query().room_waiters, 1);
    drop(fa);
    let q = consumer.query();
    assert_eq!((q.room_waiters, q.room_wanted), (0, false));
}

#[test]
fn close_wakes_every_waiting_poster_and_hands_each_its_event_back() {
    let (poster, mut consumer) = full_ring(&[0]);
    let threads: Vec<_> = (1..=4)
        .map(|i| {
            let p = poster.clone();
            std::thread::spawn(move || p.post_blocking(i))
        })
        .collect();
    // Every blocking poster is in the queue before the close: its wake, not
    // a late first look at the closed ring, is what ends its wait.
    eventually("the blocking posters queue for room", || {
        consumer.query().room_waiters == 4
    });
    let waiters: Vec<_> = (0..3).map(|_| counting()).collect();
    let mut futs: Vec<_> = (0..3).map(|i| poster.post_async(10 + i)).collect();
    for (f, (_, w)) in futs.iter_mut().zip(&waiters) {
        assert!(poll(f, w).is_pending());
    }
    assert_eq!(consumer.query().room_waiters, 7);
    assert_eq!(consumer.query().room_wakes, 0);
    consumer.close();
    // At least one wake per waiting poster: a blocking poster that a
    // spurious return from `park` sent round again may rejoin after the
    // close took the queue, and be handed a wake another one passes on.
    assert!(
        consumer.query().room_wakes >= 7,
        "one wake per waiting poster"
    );
    for (i, t) in threads.into_iter().enumerate() {
        assert_eq!(t.join().unwrap(), Err(PostError::Closed(i as u32 + 1)));
    }
    for (i, (f, (c, w))) in futs.iter_mut().zip(&waiters).enumerate() {
        assert_eq!(c.wakes(), 1);
        assert_eq!(
            poll(f, w),
            Poll::Ready(Err(PostError::Closed(10 + i as u32)))
        );
    }
    assert_eq!(consumer.query().room_waiters, 0, "every waiter left");
    assert_eq!(consumer.try_dequeue(), Ok(0));
}

#[test]
fn a_resize_that_adds_room_wakes_the_waiting_posters() {
    let (poster, mut consumer) = full_ring(&[0]);
    let (a, wa, mut fa) = waiting(&poster, 1);
    consumer.resize(4).unwrap();
    assert_eq!(a.wakes(), 1);
    assert_eq!(poll(&mut fa, &wa), Poll::Ready(Ok(())));
    let got: Vec<u32> = consumer.try_iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(got, [0, 1]);
}

#[test]
fn the_end_of_a_resize_that_adds_no_room_wakes_the_waiting_posters_too() {
    // A post that waits for room may have been refused by the resize
    // itself, and waits for its end: a shrink (done or refused as too
    // small) wakes every waiter as a growing one does; a waiter that finds
    // the ring still full rejoins in its place.
    let (poster, mut consumer) = full_ring(&[0, 1]);
    let (a, wa, mut fa) = waiting(&poster, 2);
    let (b, wb, mut fb) = waiting(&poster, 3);
    let refused = consumer.resize(1);
    assert!(
        matches!(refused, Err(evd::ResizeError::TooSmall { .. })),
        "{refused:?}"
    );
    assert_eq!((a.wakes(), b.wakes()), (1, 1));
    assert_eq!(consumer.query().room_wakes, 2);
    assert_eq!(poll(&mut fa, &wa), Poll::Pending, "still full: rejoined");
    assert_eq!(poll(&mut fb, &wb), Poll::Pending);
    assert_eq!(consumer.query().room_waiters, 2);
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(
        (a.wakes(), b.wakes()),
        (2, 2),
        "a freed slot each, in order"
    );
    assert_eq!(consumer.resize(1), Ok(1), "an empty ring shrinks");
    assert_eq!((a.wakes(), b.wakes()), (2, 2), "nobody waits: nobody woken");
    assert_eq!(poll(&mut fa, &wa), Poll::Ready(Ok(())));
    assert_eq!(poll(&mut fb, &wb), Poll::Pending, "the one slot is taken");
    assert_eq!(consumer.try_dequeue(), Ok(2));
    assert_eq!(poll(&mut fb, &wb), Poll::Ready(Ok(())));
    assert_eq!(consumer.try_dequeue(), Ok(3));
}

#[test]
fn a_zero_or_past_timeout_tries_once_and_never_joins_the_queue() {
    let (poster, consumer) = full_ring(&[0]);
    assert_eq!(
        poster.post_timeout(1, Duration::ZERO),
        Err(PostError::Full(1))
    );
    let past = Instant::now();
    assert_eq!(poster.post_deadline(2, past), Err(PostError::Full(2)));
    let q = consumer.query();
    assert!(!q.room_wanted);
    assert_eq!(q.room_wakes, 0);
    // A timeout so large no Instant can hold it waits without one: here it
    // finds room at once.
    drop(consumer);
    assert_eq!(
        poster.post_timeout(3, Duration::MAX),
        Err(PostError::Closed(3))
    );
}

#[test]
fn a_timed_out_poster_leaves_the_queue() {
    let (poster, consumer) = full_ring(&[0]);
    assert_eq!(
        poster.post_timeout(1, Duration::from_millis(2)),
        Err(PostError::Full(1))
    );
    assert!(!consumer.query().room_wanted);
}

#[test]
fn waiting_inside_its_own_upcall_is_refused_at_once_instead_of_deadlocking() {
    let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    let inner = poster.clone();
    let (seen, s) = shared_vec();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        if let Ok(0) = ev {
            inner.post(100).unwrap(); // fills the one slot
            let r = inner.post_blocking(101);
            s.lock()
                .unwrap()
                .push(r.map_err(|e| (e.is_full(), e.into_inner())));
        }
    });
    poster.post(0).unwrap();
    assert_eq!(*seen.lock().unwrap(), [Err((true, 101))]);
    drop(up.teardown());
}

#[test]
fn the_sink_hands_its_held_event_back_when_the_evd_closes() {
    use futures::Sink;
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    let mut sink = poster.into_sink();
    let (c, w) = counting();
    let mut cx = Context::from_waker(&w);
    assert_eq!(Pin::new(&mut sink).poll_ready(&mut cx), Poll::Ready(Ok(())));
    Pin::new(&mut sink).start_send(1).unwrap();
    assert_eq!(Pin::new(&mut sink).poll_ready(&mut cx), Poll::Ready(Ok(())));
    Pin::new(&mut sink).start_send(2).unwrap(); // full: held by the sink
    assert_eq!(
        Pin::new(&mut sink).start_send(3),
        Err(PostError::Full(3)),
        "a second event without poll_ready is handed back"
    );
    assert!(Pin::new(&mut sink).poll_flush(&mut cx).is_pending());
    consumer.close();
    assert_eq!(c.wakes(), 1);
    assert_eq!(
        Pin::new(&mut sink).poll_flush(&mut cx),
        Poll::Ready(Err(PostError::Closed(2)))
    );
    assert_eq!(consumer.try_dequeue(), Ok(1));
}

#[test]
fn post_async_resolves_once_and_is_fused() {
    use futures::future::FusedFuture;
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    let (_c, w) = counting();
    let mut f = poster.post_async(5);
    assert!(!f.is_terminated());
    assert_eq!(poll(&mut f, &w), Poll::Ready(Ok(())));
    assert!(f.is_terminated());
    assert_eq!(consumer.try_dequeue(), Ok(5));
}

#[test]
fn a_waker_that_panics_neither_costs_the_consumer_its_event_nor_the_others_their_wake() {
    let (poster, mut consumer) = full_ring(&[0, 1]);
    let bad = Waker::from(Arc::new(Panicking));
    let (good, good_waker) = counting();
    let mut f_bad = poster.post_async(10);
    let mut f_good = poster.post_async(11);
    assert!(poll(&mut f_bad, &bad).is_pending());
    assert!(poll(&mut f_good, &good_waker).is_pending());
    let mut out = Vec::new();
    // Two slots freed by one head store: the first waker panics, the second
    // is still woken, and the consumer gets both events.
    assert_eq!(consumer.dequeue_batch(&mut out, 2), Ok(2));
    assert_eq!(out, [0, 1]);
    assert_eq!(good.wakes(), 1);
    assert_eq!(consumer.query().room_wakes, 2);
    assert_eq!(poll(&mut f_good, &good_waker), Poll::Ready(Ok(())));
    assert_eq!(poll(&mut f_bad, &good_waker), Poll::Ready(Ok(())));
}

/// One slot freed, and the first waiter's waker panics when woken: its
/// task may never run to use the slot, so the wake goes on to the next
/// waiter instead of leaving it asleep beside the free slot until the
/// broken one is polled or dropped.
#[test]
fn a_waker_that_panics_passes_the_freed_slots_wake_on() {
    let (poster, mut consumer) = full_ring(&[0]);
    let bad = Waker::from(Arc::new(Panicking));
    let mut f_bad = poster.post_async(10);
    assert!(poll(&mut f_bad, &bad).is_pending());
    let (good, good_waker, mut f_good) = waiting(&poster, 11);
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!(good.wakes(), 1, "the wake was passed on");
    assert_eq!(consumer.query().room_wakes, 2);
    assert_eq!(poll(&mut f_good, &good_waker), Poll::Ready(Ok(())));
    assert_eq!(consumer.try_dequeue(), Ok(11));
    assert_eq!(poll(&mut f_bad, &good_waker), Poll::Ready(Ok(())));
    assert_eq!(consumer.try_dequeue(), Ok(10));
}

/// A woken waiter gives up (its future dropped) and passes its wake on; the
/// next waiter's waker panics: the wake goes on to the one after it.
#[test]
fn a_wake_passed_on_to_a_waker_that_panics_goes_on_to_the_next() {
    let (poster, mut consumer) = full_ring(&[0]);
    let (first, _first_waker, f_first) = waiting(&poster, 10);
    let bad = Waker::from(Arc::new(Panicking));
    let mut f_bad = poster.post_async(11);
    assert!(poll(&mut f_bad, &bad).is_pending());
    let (last, last_waker, mut f_last) = waiting(&poster, 12);
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!((first.wakes(), last.wakes()), (1, 0));
    drop(f_first);
    assert_eq!(last.wakes(), 1, "passed on past the panicking waker");
    assert_eq!(poll(&mut f_last, &last_waker), Poll::Ready(Ok(())));
    assert_eq!(consumer.try_dequeue(), Ok(12));
    drop(f_bad);
}

/// A waker that, woken, takes the freed slot with a post of its own, polls
/// its waiting future (the ring is full again: it waits at the front of
/// the queue once more), then panics. Its wake is passed on, but not for
/// ever: the consumer's dequeue, in whose head store this happens, returns.
#[test]
fn a_waker_that_waits_again_then_panics_does_not_keep_the_consumer_passing_its_wake() {
    type Reserve =
        Pin<Box<dyn Future<Output = Result<evd::OwnedPermit<u32>, evd::BatchPostError>> + Send>>;
    struct Rejoining {
        poster: Poster<u32>,
        future: std::sync::Mutex<Option<Reserve>>,
        wakes: AtomicUsize,
    }
    impl Wake for Rejoining {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
            let _ = self.poster.post(99);
            let waker = Waker::from(Arc::clone(self));
            if let Some(f) = self.future.lock().unwrap().as_mut() {
                let _ = f.as_mut().poll(&mut Context::from_waker(&waker));
            }
            panic!("a broken executor's waker");
        }
    }
    let (poster, mut consumer) = full_ring(&[0]);
    let rejoining = Arc::new(Rejoining {
        poster: poster.clone(),
        future: std::sync::Mutex::new(Some(Box::pin(poster.clone().reserve_owned()))),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(Arc::clone(&rejoining));
    let pending = rejoining
        .future
        .lock()
        .unwrap()
        .as_mut()
        .map(|f| poll(f, &waker));
    assert!(matches!(pending, Some(Poll::Pending)));
    let (done, dequeued) = std::sync::mpsc::channel();
    let dequeuer = std::thread::spawn(move || {
        done.send(consumer.try_dequeue()).unwrap();
        consumer
    });
    let Ok(first) = dequeued.recv_timeout(Duration::from_secs(60)) else {
        // The consumer keeps passing the wake to the same waiter.
        std::mem::forget((dequeuer, rejoining));
        panic!("the dequeue never returned");
    };
    assert_eq!(first, Ok(0));
    let mut consumer = dequeuer.join().unwrap();
    assert!(rejoining.wakes.load(Ordering::SeqCst) >= 1);
    assert_eq!(consumer.try_dequeue(), Ok(99), "its own post took the slot");
    // Leaving the queue drops its waker: no cycle is left behind.
    drop(rejoining.future.lock().unwrap().take());
}

/// A full ring under an upcall policy with no instance running (upcalls
/// enabled with `Invoke::New` on a full ring) is drained only by an upcall
/// that a post starts: a room waiter, which posts nothing while it waits,
/// starts it itself (on its own thread, as a refused post does) and finds
/// room.
#[test]
fn a_room_waiter_starts_the_upcall_that_drains_a_full_ring_no_instance_serves() {
    let (poster, consumer) = full_ring(&[1, 2]);
    let (handled, seen) = shared_vec();
    let _up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
        handled.lock().unwrap().push(ev.unwrap());
    });
    assert_eq!(poster.free_slots(), Some(0), "full, and no upcall runs");
    let (woken, waker) = counting();
    let mut room = poster.room_waiter();
    let polled = room.poll_room(&mut Context::from_waker(&waker));
    assert!(matches!(polled, Poll::Ready(Ok(2))), "{polled:?}");
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
    assert_eq!(woken.wakes(), 0);
}

/// A room waiter waits while an upcall instance runs; the handler panics and
/// the instance ends with the ring full: the waiter is woken, and its next
/// poll starts the upcall that drains the ring.
#[test]
fn a_room_waiter_is_woken_when_an_unwinding_upcall_leaves_the_ring_full() {
    let (poster, consumer) = common::pair::<u32>(2);
    let (handled, seen) = shared_vec();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let _up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        let ev = ev.unwrap();
        handled.lock().unwrap().push(ev);
        if ev == 1 {
            entered_tx.send(()).unwrap();
            release_rx.lock().unwrap().recv().unwrap();
            panic!("the handler fails on 1");
        }
    });
    let first = poster.clone();
    let instance = std::thread::spawn(move || first.post(1));
    entered.recv().unwrap();
    // The instance holds event 1 in its handler; 2 and 3 fill the ring.
    poster.post(2).unwrap();
    poster.post(3).unwrap();
    let (woken, waker) = counting();
    let mut room = poster.room_waiter();
    let mut cx = Context::from_waker(&waker);
    assert!(
        room.poll_room(&mut cx).is_pending(),
        "full, an instance runs"
    );
    release.send(()).unwrap();
    assert!(
        instance.join().is_err(),
        "the handler's panic reaches its poster"
    );
    assert_eq!(woken.wakes(), 1, "the unwinding instance woke the waiter");
    let polled = room.poll_room(&mut cx);
    assert!(matches!(polled, Poll::Ready(Ok(2))), "{polled:?}");
    assert_eq!(*seen.lock().unwrap(), [1, 2, 3]);
}

/// A room waiter already waiting on a full ring when upcalls are enabled
/// without starting an instance (`Invoke::New`): only an upcall can drain
/// the ring now, and only a post starts one, so the enable wakes the waiter,
/// whose next poll starts it.
#[test]
fn a_room_waiter_waiting_when_upcalls_are_enabled_without_an_instance_is_woken() {
    let (poster, consumer) = full_ring(&[1, 2]);
    let (woken, waker) = counting();
    let mut room = poster.room_waiter();
    let mut cx = Context::from_waker(&waker);
    assert!(
        room.poll_room(&mut cx).is_pending(),
        "full, a plain consumer"
    );
    let (handled, seen) = shared_vec();
    let _up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
        handled.lock().unwrap().push(ev.unwrap());
    });
    assert_eq!(woken.wakes(), 1, "the enable woke the waiter");
    assert!(matches!(room.poll_room(&mut cx), Poll::Ready(Ok(2))));
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
}

/// Under `ManyInstances` an instance takes one event out (its head store
/// wakes one waiting poster for the slot it freed) and gives the token back
/// for its handler call with events still queued: the ring has room, so the
/// next post starts the instance that drains them, and the posters still
/// waiting have nothing to do yet. The hand-back wakes none of them (it
/// woke them all, after every event, each going back to a lock and a
/// barrier to find the ring full again).
#[test]
fn a_token_given_back_on_a_ring_with_room_wakes_no_waiting_poster() {
    let (poster, consumer) = full_ring(&[0, 1]);
    let (first, mut first_post) = (counting(), poster.post_async(10));
    let (second, mut second_post) = (counting(), poster.post_async(11));
    assert!(poll(&mut first_post, &first.1).is_pending());
    assert!(poll(&mut second_post, &second.1).is_pending());
    let (handled, seen) = shared_vec();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let upcalls = std::thread::spawn(move || {
        // The enable runs the first instance here: it takes 0 out and gives
        // the token back with 1 queued, then calls the handler.
        consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, move |ev, _| {
            let ev = ev.unwrap();
            handled.lock().unwrap().push(ev);
            if ev == 0 {
                entered_tx.send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
            }
        })
    });
    entered.recv().unwrap();
    assert_eq!(first.0.wakes(), 1, "the freed slot's wake");
    assert_eq!(
        second.0.wakes(),
        0,
        "woken by a hand-back on a ring with room"
    );
    // The first poster's post starts the instance that drains 1, whose head
    // store wakes the second.
    assert!(matches!(
        poll(&mut first_post, &first.1),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(second.0.wakes(), 1, "the slot freed for it");
    assert!(matches!(
        poll(&mut second_post, &second.1),
        Poll::Ready(Ok(()))
    ));
    release.send(()).unwrap();
    let upcalls = upcalls.join().unwrap();
    drop(upcalls.teardown());
    let mut got = seen.lock().unwrap().clone();
    got.sort_unstable();
    assert_eq!(got, [0, 1, 10, 11]);
}

/// A waker whose `clone` panics (the room queue's join clones it); its
/// other calls do nothing.
fn waker_whose_clone_panics() -> Waker {
    fn clone(_: *const ()) -> RawWaker {
        panic!("the waker's clone");
    }
    fn nothing(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, nothing, nothing, nothing);
    // SAFETY: no function of the vtable reads the data pointer, so a null
    // one keeps RawWaker's contract.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// A post that waits for room joins the room queue with its task's waker
/// (cloning it: user code) while it holds its event. When that clone
/// panics, the event is dropped on the way up; should its `Drop` panic too,
/// that is a second panic during an unwind, which would abort the process.
/// It is swallowed; the waker's panic reaches the poll, the event is
/// dropped once, and the EVD goes on.
#[test]
fn a_waiting_post_whose_waker_clone_panics_drops_its_event_once_even_when_that_drop_panics() {
    struct Ev(Arc<AtomicUsize>);
    impl Drop for Ev {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("the event's drop");
        }
    }
    let (poster, mut consumer) = evd::bounded::<Option<Ev>>(1).unwrap();
    poster.post(None).unwrap(); // full
    let drops = Arc::new(AtomicUsize::new(0));
    let mut post = poster.post_async(Some(Ev(drops.clone())));
    let waker = waker_whose_clone_panics();
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Pin::new(&mut post).poll(&mut Context::from_waker(&waker))
    }));
    let message = polled.err().and_then(|p| p.downcast_ref::<&str>().copied());
    assert_eq!(
        message,
        Some("the waker's clone"),
        "the first panic goes on"
    );
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the event dropped once");
    drop(post);
    assert!(matches!(consumer.try_dequeue(), Ok(None)));
    poster.post(None).unwrap();
    assert!(matches!(consumer.try_dequeue(), Ok(None)));
}

/// A waker whose drop panics while `armed` is set (the room queue keeps a
/// clone of a waiting post's waker and drops it when it is replaced or the
/// post leaves); its other calls do nothing.
fn waker_whose_drop_panics(armed: &'static std::sync::atomic::AtomicBool) -> Waker {
    fn clone(p: *const ()) -> RawWaker {
        RawWaker::new(p, &VTABLE)
    }
    fn nothing(_: *const ()) {}
    fn drop(p: *const ()) {
        // SAFETY: every data pointer of this vtable is an `&'static
        // AtomicBool` (below, and copied by `clone`).
        let armed = unsafe { &*p.cast::<std::sync::atomic::AtomicBool>() };
        if armed.load(Ordering::SeqCst) {
            panic!("the waker's drop");
        }
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, nothing, nothing, drop);
    let data: *const std::sync::atomic::AtomicBool = armed;
    // SAFETY: the data pointer is valid for ever and the vtable's functions
    // only read it (see `drop`), keeping RawWaker's contract.
    unsafe { Waker::from_raw(RawWaker::new(data.cast(), &VTABLE)) }
}

/// Two wakers whose drops panic while their switches are on: a task's
/// first waker and the one it polls with next. The switches are statics of
/// the calling test (the wakers' data lives for ever, which Miri would
/// otherwise count as a leak; each test has its own, as tests run in
/// parallel).
struct DropPanickingWakers {
    switches: &'static [std::sync::atomic::AtomicBool; 2],
    first: Waker,
    next: Waker,
}

impl DropPanickingWakers {
    fn new(switches: &'static [std::sync::atomic::AtomicBool; 2]) -> Self {
        DropPanickingWakers {
            switches,
            first: waker_whose_drop_panics(&switches[0]),
            next: waker_whose_drop_panics(&switches[1]),
        }
    }

    /// Run `f` with both wakers' drops panicking; the message of the panic
    /// that came out of it, if one did.
    fn panicking<R>(&self, f: impl FnOnce() -> R) -> Option<&'static str> {
        self.switches
            .iter()
            .for_each(|s| s.store(true, Ordering::SeqCst));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        self.switches
            .iter()
            .for_each(|s| s.store(false, Ordering::SeqCst));
        r.err().and_then(|p| p.downcast_ref::<&str>().copied())
    }
}

/// Polled again with another task's waker, a waiting post replaces the
/// queued clone of the old one and drops it. When that drop panics, the
/// post leaves the room queue on the way out and drops its new waker's
/// clone: should that panic too, it is a second panic during an unwind,
/// which would abort the process. It is dropped; the first panic reaches
/// the poll, the post is out of the queue, and the EVD goes on.
#[test]
fn a_waiting_post_whose_wakers_panic_when_dropped_leaves_the_queue_without_aborting() {
    use std::sync::atomic::AtomicBool;
    static SWITCHES: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
    let w = DropPanickingWakers::new(&SWITCHES);
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap(); // full
    let mut post = poster.post_async(2);
    assert!(poll(&mut post, &w.first).is_pending());
    assert!(consumer.query().room_wanted);
    let message = w.panicking(|| poll(&mut post, &w.next));
    assert_eq!(message, Some("the waker's drop"), "the first panic goes on");
    assert!(!consumer.query().room_wanted, "the post left the queue");
    drop(post);
    assert_eq!(consumer.try_dequeue(), Ok(1));
    poster.post(3).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(3));
}

/// Polled again with another task's waker, a room waiter replaces the
/// queued clone of the old one and drops it. When that drop panics, the
/// waiter leaves the room queue on the way out, as a waiting post does (and
/// a second panic, its new waker's clone's drop, does not abort): kept after
/// the panic, it holds no seat that would swallow the next wake, and polled
/// again it joins anew and is woken.
#[test]
fn a_room_waiter_whose_replaced_waker_panics_when_dropped_leaves_the_queue() {
    use std::sync::atomic::AtomicBool;
    static SWITCHES: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
    let w = DropPanickingWakers::new(&SWITCHES);
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap(); // full
    let mut room = poster.room_waiter();
    assert!(
        room.poll_room(&mut Context::from_waker(&w.first))
            .is_pending()
    );
    assert_eq!(consumer.query().room_waiters, 1);
    let message = w.panicking(|| room.poll_room(&mut Context::from_waker(&w.next)));
    assert_eq!(message, Some("the waker's drop"), "the first panic goes on");
    let q = consumer.query();
    assert_eq!(
        (q.room_wanted, q.room_waiters),
        (false, 0),
        "the waiter left the queue"
    );
    let (wakes, waker) = counting();
    assert!(
        room.poll_room(&mut Context::from_waker(&waker))
            .is_pending()
    );
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(wakes.wakes(), 1, "woken for the slot freed");
    assert_eq!(
        room.poll_room(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(1))
    );
}

/// Dropping a waiting post leaves the room queue and drops the queued
/// clone of its waker, then its event. A panic of that clone's drop is not
/// re-raised there: the event's drop would run during its unwind, and
/// should that panic too, the process would abort.
#[test]
fn dropping_a_waiting_post_whose_waker_and_event_panic_when_dropped_does_not_abort() {
    use std::sync::atomic::AtomicBool;
    struct Ev;
    impl Drop for Ev {
        fn drop(&mut self) {
            panic!("the event's drop");
        }
    }
    static ARMED: AtomicBool = AtomicBool::new(false);
    let armed = &ARMED;
    let waker = waker_whose_drop_panics(armed);
    let (poster, mut consumer) = evd::bounded::<Option<Ev>>(1).unwrap();
    poster.post(None).unwrap(); // full
    let mut post = poster.post_async(Some(Ev));
    assert!(poll(&mut post, &waker).is_pending());
    armed.store(true, Ordering::SeqCst);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(post)));
    armed.store(false, Ordering::SeqCst);
    let message = dropped
        .err()
        .and_then(|p| p.downcast_ref::<&str>().copied());
    assert_eq!(message, Some("the event's drop"));
    assert!(!consumer.query().room_wanted, "the post left the queue");
    assert!(matches!(consumer.try_dequeue(), Ok(None)));
}

/// A waiting post polled before its wake finds the slot another's wake
/// freed, posts, and leaves the queue, dropping the queued clone of its
/// waker. A panic of that drop is not re-raised: the event is in the ring,
/// and a panicking poll would say it was dropped.
#[test]
fn a_post_that_goes_in_while_its_seat_is_queued_resolves_though_its_wakers_drop_panics() {
    use std::sync::atomic::AtomicBool;
    static ARMED: AtomicBool = AtomicBool::new(false);
    let armed = &ARMED;
    let waker = waker_whose_drop_panics(armed);
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap(); // full
    let (mut first, mut second) = (poster.post_async(10), poster.post_async(20));
    assert!(poll(&mut first, &waker).is_pending());
    assert!(poll(&mut second, &waker).is_pending());
    armed.store(true, Ordering::SeqCst);
    assert_eq!(consumer.try_dequeue(), Ok(1)); // wakes `first`
    let polled =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll(&mut second, &waker)));
    armed.store(false, Ordering::SeqCst);
    assert!(matches!(polled, Ok(Poll::Ready(Ok(())))), "{polled:?}");
    assert_eq!(consumer.try_dequeue(), Ok(20));
    assert!(matches!(poll(&mut first, &waker), Poll::Ready(Ok(()))));
    assert_eq!(consumer.try_dequeue(), Ok(10));
}

/// A reservation waiting for room, polled again with a waker whose clone
/// panics (the room queue's join clones it): the panic reaches the poll,
/// and the future leaves the queue, as its docs say, so that kept alive
/// and never polled again it does not hold its seat, taking the next freed
/// slot's wake from the posters behind it.
#[test]
fn a_reservation_whose_waker_clone_panics_leaves_the_room_queue() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap(); // full
    let (_, good) = counting();
    let mut reserving = Box::pin(poster.reserve());
    assert!(poll(&mut reserving, &good).is_pending());
    assert!(consumer.query().room_wanted, "queued");
    let bad = waker_whose_clone_panics();
    let polled =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll(&mut reserving, &bad)));
    let message = polled.err().and_then(|p| p.downcast_ref::<&str>().copied());
    assert_eq!(
        message,
        Some("the waker's clone"),
        "the panic reaches the poll"
    );
    assert!(
        !consumer.query().room_wanted,
        "the reservation left the queue"
    );
    drop(reserving);
    assert_eq!(consumer.try_dequeue(), Ok(1));
    poster.post(2).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(2));
}
