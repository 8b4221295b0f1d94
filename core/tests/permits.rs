//! Permits: `Poster::try_reserve`, `Poster::reserve` (its `Reserving`
//! future) and `Permit::send`. One test per promise: a permit's slot is
//! taken for posts but holds nothing up for the consumer, its send is never
//! refused as full and notifies as a post does, a dropped permit gives the
//! slot back and wakes the next waiter, the reservation future is
//! cancel-safe, and close, resize and upcalls count permits in.
//!
//! The waits are polled by hand with counting wakers (no thread timing);
//! the one threaded test waits on conditions, never on time.

mod common;
use common::{Ledger, counting, poll};
use evd::{
    ArmStatus, BatchPostError, Invoke, OwnedPermit, Permit, PostError, ResizeError,
    TryDequeueError, UpcallPolicy,
};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;

#[test]
fn a_permits_slot_is_taken_for_posts_and_its_send_is_never_refused_as_full() {
    let (poster, mut consumer) = evd::bounded(2).unwrap();
    let permit = poster.try_reserve().unwrap();
    poster.post(1u32).unwrap();
    assert_eq!(
        poster.post(2),
        Err(PostError::Full(2)),
        "the promised slot is not free"
    );
    assert_eq!(poster.free_slots(), Some(0));
    assert!(poster.is_full());
    assert_eq!(poster.try_reserve().unwrap_err(), BatchPostError::Full);
    permit.send(3).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(consumer.try_dequeue(), Ok(3));
}

#[test]
fn an_unsent_permit_holds_nothing_up_for_the_consumer() {
    let (poster, mut consumer) = evd::bounded(4).unwrap();
    let permit = poster.try_reserve().unwrap();
    poster.post(1u32).unwrap();
    // The event posted after the permit is dequeued before the permit is
    // sent, and with it dequeued the ring is empty: the arm sleeps.
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
    assert_eq!(consumer.arm(), ArmStatus::Armed);
    let q = consumer.query();
    assert_eq!((q.len, q.permits), (0, 1));
    permit.send(2).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(2));
}

#[test]
fn a_permits_send_wakes_an_armed_consumer_exactly_once() {
    let (poster, mut consumer) = evd::bounded(4).unwrap();
    let first = poster.try_reserve().unwrap();
    let second = poster.try_reserve().unwrap();
    let (count, waker) = counting();
    let mut recv = consumer.recv();
    assert!(poll(&mut recv, &waker).is_pending());
    first.send(1u32).unwrap();
    second.send(2).unwrap();
    assert_eq!(
        count.wakes(),
        1,
        "the first send took the wake, the second owed none"
    );
    assert_eq!(poll(&mut recv, &waker), Poll::Ready(Ok(1)));
}

#[test]
fn a_dropped_permit_gives_its_slot_back_and_wakes_the_next_waiter() {
    let (poster, _consumer) = evd::bounded::<u32>(1).unwrap();
    let permit = poster.try_reserve().unwrap();
    let (count, waker) = counting();
    let mut waiting = poster.reserve();
    assert!(poll(&mut waiting, &waker).is_pending());
    assert!(poster.query().room_wanted);
    drop(permit);
    assert_eq!(count.wakes(), 1);
    let Poll::Ready(Ok(again)) = poll(&mut waiting, &waker) else {
        panic!("the slot given back goes to the waiter")
    };
    assert!(!poster.query().room_wanted, "it left the room queue");
    drop(again);
    assert_eq!(
        poster.free_slots(),
        Some(1),
        "and that one gave it back again"
    );
}

#[test]
fn a_dropped_permit_wakes_a_waiting_post_too() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    let permit = poster.try_reserve().unwrap();
    let (count, waker) = counting();
    let mut post = poster.post_async(5);
    assert!(poll(&mut post, &waker).is_pending());
    drop(permit);
    assert_eq!(count.wakes(), 1);
    assert_eq!(poll(&mut post, &waker), Poll::Ready(Ok(())));
    assert_eq!(consumer.try_dequeue(), Ok(5));
}

#[test]
fn a_reservation_dropped_after_its_wake_passes_the_wake_on() {
    let (poster, _consumer) = evd::bounded::<u32>(1).unwrap();
    let permit = poster.try_reserve().unwrap();
    let (first_count, first_waker) = counting();
    let (second_count, second_waker) = counting();
    let mut first = poster.reserve();
    let mut second = poster.reserve();
    assert!(poll(&mut first, &first_waker).is_pending());
    assert!(poll(&mut second, &second_waker).is_pending());
    drop(permit);
    assert_eq!(
        (first_count.wakes(), second_count.wakes()),
        (1, 0),
        "first come"
    );
    drop(first); // cancelled: it held no slot, and its wake goes on
    assert_eq!(second_count.wakes(), 1);
    assert!(matches!(
        poll(&mut second, &second_waker),
        Poll::Ready(Ok(_))
    ));
}

#[test]
fn a_reservation_dropped_before_any_wake_takes_nothing() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    let (_, waker) = counting();
    let mut waiting = poster.reserve();
    assert!(poll(&mut waiting, &waker).is_pending());
    drop(waiting);
    let q = poster.query();
    assert_eq!((q.permits, q.room_wanted), (0, false));
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(poster.free_slots(), Some(1));
}

#[test]
fn a_dequeue_that_frees_a_slot_resolves_a_waiting_reservation() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    let (count, waker) = counting();
    let mut waiting = poster.reserve();
    assert!(poll(&mut waiting, &waker).is_pending());
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(count.wakes(), 1);
    let Poll::Ready(Ok(permit)) = poll(&mut waiting, &waker) else {
        panic!("the freed slot is promised to the waiter")
    };
    permit.send(2).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(2));
}

#[test]
fn close_refuses_reservations_wakes_their_waiters_and_hands_a_permits_event_back() {
    let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    let permit = poster.try_reserve().unwrap();
    let (count, waker) = counting();
    let mut waiting = poster.reserve();
    assert!(poll(&mut waiting, &waker).is_pending());
    drop(consumer); // closes the EVD
    assert!(count.wakes() >= 1);
    assert!(matches!(
        poll(&mut waiting, &waker),
        Poll::Ready(Err(BatchPostError::Closed))
    ));
    assert_eq!(permit.send(7), Err(PostError::Closed(7)));
    assert_eq!(poster.query().permits, 0, "the slot was given back");
    assert_eq!(poster.try_reserve().unwrap_err(), BatchPostError::Closed);
}

#[test]
fn a_permits_send_runs_the_upcall_as_a_post_does() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let permit = poster.try_reserve().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        sink.lock().unwrap().push(ev.unwrap())
    });
    permit.send(9).unwrap(); // runs the handler on this thread
    assert_eq!(*seen.lock().unwrap(), [9]);
    drop(upcalls);
}

#[test]
fn a_reservation_on_a_full_ring_under_an_idle_upcall_policy_runs_the_upcall_that_drains_it() {
    let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    // Invoke::New on a full ring: no arrival can start an upcall.
    let upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
        sink.lock().unwrap().push(ev.unwrap())
    });
    let permit = poster.try_reserve().expect("the upcall made room");
    assert_eq!(*seen.lock().unwrap(), [1]);
    permit.send(2).unwrap();
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
    drop(upcalls);
}

/// A reservation woken for a freed slot takes it as a permit, filling the
/// ring, under an upcall policy with events queued and no instance (here
/// enabled with `Invoke::New` while the slot was free): a permit starts no
/// upcall, and the posters still waiting for room would sleep beside a full
/// ring nobody drains. The permit wakes them, and the next one's post
/// starts the draining upcall.
#[test]
fn a_permit_that_fills_a_ring_no_upcall_drains_wakes_the_posters_waiting_for_room() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    let (reserving_woken, reserving_waker) = counting();
    let mut reserving = poster.reserve();
    assert!(poll(&mut reserving, &reserving_waker).is_pending());
    let (posting_woken, posting_waker) = counting();
    let mut posting = poster.post_async(3);
    assert!(poll(&mut posting, &posting_waker).is_pending());
    assert_eq!(consumer.try_dequeue(), Ok(1)); // wakes the reservation
    assert_eq!(reserving_woken.wakes(), 1);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
        sink.lock().unwrap().push(ev.unwrap())
    });
    let Poll::Ready(Ok(permit)) = poll(&mut reserving, &reserving_waker) else {
        panic!("the reservation was woken for a free slot");
    };
    assert_eq!(poster.free_slots(), Some(0), "full, and no upcall runs");
    assert_eq!(posting_woken.wakes(), 1, "the waiting post was woken");
    // Refused as full, it runs the upcall that drains the ring, then posts.
    assert!(matches!(
        poll(&mut posting, &posting_waker),
        Poll::Ready(Ok(()))
    ));
    permit.send(4).unwrap();
    assert_eq!(*seen.lock().unwrap(), [2, 3, 4]);
    drop(upcalls);
}

#[test]
fn waiting_for_a_permit_inside_its_own_upcall_is_refused_at_once() {
    let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    let inner = poster.clone();
    let outcome = Arc::new(Mutex::new(None));
    let out = outcome.clone();
    let upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        if ev != Ok(1) {
            return;
        }
        // Fill the ring again, then ask to wait for room: only this
        // upcall's own dequeues could free it.
        inner.post(2).unwrap();
        let (_, waker) = counting();
        let mut waiting = inner.reserve();
        *out.lock().unwrap() = Some(matches!(
            poll(&mut waiting, &waker),
            Poll::Ready(Err(BatchPostError::Full))
        ));
    });
    poster.post(1).unwrap();
    assert_eq!(*outcome.lock().unwrap(), Some(true));
    drop(upcalls);
}

#[test]
fn a_resize_counts_permits_as_taken_slots() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    let a = poster.try_reserve().unwrap();
    let b = poster.try_reserve().unwrap();
    assert_eq!(
        consumer.resize(2),
        Err(ResizeError::TooSmall {
            queued: 4,
            capacity: 2
        })
    );
    assert_eq!(consumer.resize(8), Ok(8));
    a.send(3).unwrap();
    b.send(4).unwrap();
    let mut out = Vec::new();
    consumer.dequeue_batch(&mut out, 8).unwrap();
    assert_eq!(out, [1, 2, 3, 4]);
}

#[test]
fn at_most_max_out_permits_are_out_at_once() {
    let (poster, _consumer) = evd::bounded::<u32>(1024).unwrap();
    let mut held: Vec<Permit<'_, u32>> = (0..Permit::<u32>::MAX_OUT)
        .map(|_| poster.try_reserve().unwrap())
        .collect();
    assert_eq!(poster.try_reserve().unwrap_err(), BatchPostError::Full);
    poster.post(1).unwrap(); // posts still go in: the ring has room
    held.pop();
    assert!(poster.try_reserve().is_ok());
}

#[test]
fn a_batch_post_counts_promised_slots_out() {
    let (poster, _consumer) = evd::bounded::<u32>(4).unwrap();
    let _permit = poster.try_reserve().unwrap();
    let mut batch = vec![1, 2, 3, 4];
    assert_eq!(poster.post_batch(&mut batch), Ok(3));
    assert_eq!(batch, [4]);
}

#[test]
fn posters_that_reserve_send_and_drop_at_random_deliver_every_sent_event_once() {
    const POSTERS: u64 = 3;
    let per = common::env_u64("EVD_PERMIT_EVENTS", if cfg!(miri) { 20 } else { 2_000 });
    let (poster, mut consumer) = evd::bounded::<u64>(8).unwrap();
    let ledger = Arc::new(Ledger::new(POSTERS * per));
    let handles: Vec<_> = (0..POSTERS)
        .map(|p| {
            let poster = poster.clone();
            std::thread::spawn(move || {
                let mut rng = common::Rng::new(p + 1);
                let mut sent = 0;
                while sent < per {
                    let permit = futures::executor::block_on(poster.reserve()).unwrap();
                    if rng.one_in(4) {
                        drop(permit); // given back: the next waiter gets the slot
                    } else {
                        permit.send(p * per + sent).unwrap();
                        sent += 1;
                    }
                }
            })
        })
        .collect();
    drop(poster);
    let mut got = 0;
    while got < POSTERS * per {
        // Under the stall limit: a permit whose drop kept its slot would
        // strand every poster and this wait (a failure, not a hang).
        match consumer.dequeue_timeout(common::STALL_LIMIT) {
            Ok(ev) => {
                ledger.record(ev);
                got += 1;
            }
            Err(e) => panic!("{e:?} after {got} of {} events", POSTERS * per),
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    assert!(ledger.all_seen());
    assert_eq!(consumer.query().permits, 0);
}

#[test]
fn an_owned_permit_moves_to_another_thread_and_hands_the_poster_back() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    let permit: OwnedPermit<u32> = poster.try_reserve_owned().unwrap();
    let back = std::thread::spawn(move || permit.send(4).unwrap())
        .join()
        .unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(4));
    back.post(5).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(5));
}

#[test]
fn an_owned_permit_keeps_the_evd_open_as_its_poster_does() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    let permit = poster.try_reserve_owned().unwrap(); // the only poster
    assert!(!consumer.is_closed());
    let poster = permit.send(1).unwrap();
    drop(poster); // the last poster: closes
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
}

#[test]
fn an_owned_permit_released_or_dropped_gives_its_slot_back() {
    let (poster, _consumer) = evd::bounded::<u32>(1).unwrap();
    let poster = poster.try_reserve_owned().unwrap().release();
    assert_eq!(poster.free_slots(), Some(1));
    let keep = poster.clone();
    drop(poster.try_reserve_owned().unwrap());
    assert_eq!(keep.query().permits, 0);
    let (full, other) = keep
        .clone()
        .try_reserve_owned()
        .map(|p| (p, keep.clone()))
        .unwrap();
    let (err, handed_back) = other.try_reserve_owned().unwrap_err();
    assert_eq!(err, BatchPostError::Full);
    assert_eq!(handed_back.query().permits, 1);
    drop(full);
}

#[test]
fn a_cancelled_owned_reservation_takes_nothing() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    let (_, waker) = counting();
    let mut waiting = Box::pin(poster.clone().reserve_owned());
    assert!(
        waiting
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
            .is_pending()
    );
    drop(waiting);
    let q = poster.query();
    assert_eq!((q.permits, q.room_wanted), (0, false));
    assert_eq!(consumer.try_dequeue(), Ok(1));
}

#[test]
fn a_post_on_a_ring_full_of_promises_under_an_idle_upcall_policy_is_refused_not_retried() {
    // The upcall that a full ring under an idle policy starts drains queued
    // events; a ring whose room is all promised has none, so the post is
    // refused at once instead of starting upcalls that free nothing.
    let _watchdog = common::Watchdog::new("a post refused as full", Default::default());
    let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    let permit = poster.try_reserve().unwrap();
    let upcalls = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, |_, _| {});
    assert_eq!(poster.post(1), Err(PostError::Full(1)));
    assert_eq!(poster.query().notifications, 0, "no upcall started");
    permit.send(2).unwrap(); // runs the upcall: the event is queued now
    assert_eq!(upcalls.query().upcalls, 1);
}

/// `MAX_OUT` permits taken on `poster`.
fn at_the_limit(poster: &evd::Poster<u32>) -> Vec<Permit<'_, u32>> {
    (0..Permit::<u32>::MAX_OUT)
        .map(|_| poster.try_reserve().unwrap())
        .collect()
}

#[test]
fn a_reservation_at_the_permit_limit_is_woken_by_a_permit_sent_or_dropped() {
    let (poster, _consumer) = evd::bounded::<u32>(1024).unwrap();
    let mut held = at_the_limit(&poster);
    for send in [true, false] {
        let (count, waker) = counting();
        let mut waiting = poster.reserve();
        assert!(poll(&mut waiting, &waker).is_pending());
        assert!(
            !poster.query().room_wanted,
            "it waits for a permit, not a slot"
        );
        let back = held.pop().unwrap();
        if send {
            back.send(0).unwrap();
        } else {
            drop(back);
        }
        assert_eq!(count.wakes(), 1);
        let Poll::Ready(Ok(again)) = poll(&mut waiting, &waker) else {
            panic!("the permit back goes to the waiter")
        };
        held.push(again);
    }
}

/// A waker that records how many wakes `consumer` had when it was woken.
struct SeesTheConsumer {
    consumer: Arc<common::Counting>,
    saw: Mutex<Option<usize>>,
}

impl std::task::Wake for SeesTheConsumer {
    fn wake(self: Arc<Self>) {
        *self.saw.lock().unwrap() = Some(self.consumer.wakes());
    }
}

/// A send at the permit limit notifies the consumer before it wakes the
/// reservations waiting for a permit (user code run on the sending
/// thread, as a CNO's trigger comes first): the consumer is not held up
/// behind their wakers.
#[test]
fn a_send_at_the_permit_limit_wakes_the_consumer_before_the_reservations_waiting() {
    let (poster, mut consumer) = evd::bounded::<u32>(1024).unwrap();
    let mut held = at_the_limit(&poster);
    let (consumer_count, consumer_waker) = counting();
    let mut recv = consumer.recv();
    assert!(poll(&mut recv, &consumer_waker).is_pending(), "armed");
    let sees = Arc::new(SeesTheConsumer {
        consumer: consumer_count.clone(),
        saw: Mutex::new(None),
    });
    let mut waiting = poster.reserve();
    assert!(poll(&mut waiting, &std::task::Waker::from(sees.clone())).is_pending());
    held.pop().unwrap().send(7).unwrap();
    assert_eq!(
        *sees.saw.lock().unwrap(),
        Some(1),
        "woken before the consumer"
    );
    assert_eq!(poll(&mut recv, &consumer_waker), Poll::Ready(Ok(7)));
}

#[test]
fn a_reservation_at_the_permit_limit_passes_a_slots_wake_on_to_a_waiting_post() {
    let (poster, mut consumer) = evd::bounded::<u32>(256).unwrap();
    let mut held = at_the_limit(&poster);
    poster.post(1).unwrap(); // full: 255 promised, 1 queued
    let (reserve_count, reserve_waker) = counting();
    let (post_count, post_waker) = counting();
    let mut reserving = poster.reserve();
    let mut posting = poster.post_async(2);
    assert!(poll(&mut reserving, &reserve_waker).is_pending());
    assert!(poll(&mut posting, &post_waker).is_pending());
    assert_eq!(consumer.try_dequeue(), Ok(1)); // frees a slot: wakes the first
    assert_eq!((reserve_count.wakes(), post_count.wakes()), (1, 0));
    // The reservation cannot use a slot (the limit holds it back): it hands
    // the wake on and waits for a permit back instead.
    assert!(poll(&mut reserving, &reserve_waker).is_pending());
    assert_eq!(post_count.wakes(), 1);
    assert_eq!(poll(&mut posting, &post_waker), Poll::Ready(Ok(())));
    held.pop().unwrap().send(3).unwrap(); // a permit back from the limit
    assert_eq!(reserve_count.wakes(), 2);
    // Below the limit now, but the ring is full again (2 and 3 queued, 254
    // promised): it waits for a slot.
    assert!(poll(&mut reserving, &reserve_waker).is_pending());
    assert!(poster.query().room_wanted);
    assert_eq!(consumer.try_dequeue(), Ok(2));
    assert_eq!(reserve_count.wakes(), 3);
    assert!(matches!(
        poll(&mut reserving, &reserve_waker),
        Poll::Ready(Ok(_))
    ));
}

#[test]
fn close_wakes_a_reservation_waiting_at_the_permit_limit() {
    let (poster, consumer) = evd::bounded::<u32>(512).unwrap();
    let held = at_the_limit(&poster);
    let (count, waker) = counting();
    let mut waiting = poster.reserve();
    assert!(poll(&mut waiting, &waker).is_pending());
    drop(consumer); // closes the EVD
    assert_eq!(count.wakes(), 1);
    assert!(matches!(
        poll(&mut waiting, &waker),
        Poll::Ready(Err(BatchPostError::Closed))
    ));
    drop(held);
}

/// A permit sent while every permit the EVD allows is out wakes the
/// reservations waiting for one, on the sender's thread; when the send
/// starts an upcall instance (it took the token, and the instance is
/// counted), that instance runs after those wakes. A waker that runs its
/// task inline and changes the upcall policy (which waits for the
/// instances in flight) is inside that upcall: refused, instead of waiting
/// for the instance its own thread has yet to run.
#[test]
fn a_permit_wake_run_before_the_upcall_its_send_started_is_inside_that_upcall() {
    use std::sync::mpsc;
    use std::task::{Wake, Waker};
    type Answer = Result<(), evd::PolicyError>;
    struct ChangesPolicy(Mutex<Option<evd::Upcalls<u32>>>, mpsc::Sender<Answer>);
    impl Wake for ChangesPolicy {
        fn wake(self: Arc<Self>) {
            let mut up = self.0.lock().unwrap();
            let r = up
                .as_mut()
                .unwrap()
                .set_policy(evd::UpcallPolicy::SingleInstance, evd::Invoke::New);
            self.1.send(r).unwrap();
        }
    }
    let (poster, consumer) = evd::bounded::<u32>(512).unwrap();
    let handled = Arc::new(Mutex::new(Vec::new()));
    let seen = handled.clone();
    let up = consumer.into_upcalls(
        evd::UpcallPolicy::ManyInstances,
        evd::Invoke::New,
        move |ev, _| seen.lock().unwrap().push(ev.unwrap()),
    );
    let (answers, answered) = mpsc::channel();
    let state = Arc::new(ChangesPolicy(Mutex::new(Some(up)), answers));
    let waker = Waker::from(state.clone());
    if !common::send_a_permit_while_every_permit_is_out(&poster, &waker) {
        // The change waits for the stuck send's instance: leave it.
        std::mem::forget(state);
        panic!("the policy change run by the permit's waker waited for the send's own instance");
    }
    assert_eq!(answered.try_recv(), Ok(Err(evd::PolicyError::FromUpcall)));
    assert_eq!(
        *handled.lock().unwrap(),
        [1],
        "the send's instance delivered it"
    );
    let up = state.0.lock().unwrap().take().unwrap();
    drop(up.teardown());
}
