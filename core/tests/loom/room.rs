/// The poster joins the room queue and posts again while the consumer
/// frees the one slot: either the second post sees the new head, or the
/// consumer's flag check sees the waiter. A lost wakeup leaves the poster
/// parked forever: a loom deadlock in `join`.
fn wait_vs_one_freed_slot() {
    let (poster, mut consumer) = full_ring(1);
    let t = post_blocking_on_a_thread(&poster, 2);
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(t.join().unwrap(), Ok(()));
    assert_eq!(consumer.try_dequeue(), Ok(2));
    assert!(!consumer.query().room_wanted);
}

#[test]
fn room_wait_vs_one_freed_slot_no_lost_wakeup() {
    model(wait_vs_one_freed_slot);
}

#[test]
fn room_wait_vs_one_freed_slot_no_lost_wakeup_without_membarrier() {
    model_without_membarrier(wait_vs_one_freed_slot);
}

#[test]
fn dequeue_with_whose_handler_panics_still_frees_the_slot_for_a_waiting_poster() {
    // The handler panics on the one event it is given. The unwind still
    // stores the head past that event, and the store's room check must wake
    // the poster waiting for the slot; a head left behind, or a check
    // skipped on the unwind, parks the poster forever: a loom deadlock.
    quiet_panics_from("handler fails");
    model(|| {
        let (poster, mut consumer) = full_ring(1);
        let t = post_blocking_on_a_thread(&poster, 2);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            consumer.dequeue_with(1, |_| panic!("handler fails"))
        }));
        assert!(r.is_err());
        assert_eq!(t.join().unwrap(), Ok(()));
        assert_eq!(consumer.try_dequeue(), Ok(2));
    });
}

/// A `RoomWaiter` (waiting for room with no event in hand, as a verbs
/// feed does before it polls its CQ) joins the room queue and looks again
/// while the consumer frees the one slot: either its look sees the new
/// head, or the consumer's check sees it queued and wakes it. A lost
/// wakeup leaves `block_on` parked forever: a loom deadlock.
fn room_waiter_vs_one_freed_slot() {
    let (poster, mut consumer) = full_ring(1);
    let mut room = poster.room_waiter();
    let t = thread::spawn(move || {
        loom::future::block_on(std::future::poll_fn(|cx| room.poll_room(cx)))
    });
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(t.join().unwrap(), Ok(1));
    assert!(!consumer.query().room_wanted);
}

/// The first of two posters waiting for the one slot is woken for it and
/// gives up without posting (its future dropped): it passes the wake on,
/// so the poster queued behind it gets in. A wake the leaver swallowed
/// leaves the other parked: a loom deadlock.
#[test]
fn a_woken_waiter_that_gives_up_passes_its_wake_on() {
    model(|| {
        let (poster, mut consumer) = full_ring(1);
        let waker = futures::task::noop_waker();
        let mut first = poster.post_async(2);
        let polled =
            std::pin::Pin::new(&mut first).poll(&mut std::task::Context::from_waker(&waker));
        assert!(polled.is_pending(), "the ring is full");
        let second = post_blocking_on_a_thread(&poster, 3);
        assert_eq!(consumer.try_dequeue(), Ok(1));
        drop(first);
        assert_eq!(second.join().unwrap(), Ok(()));
        assert_eq!(consumer.try_dequeue(), Ok(3));
    });
}

#[test]
fn room_waiter_vs_one_freed_slot_no_lost_wakeup() {
    model(room_waiter_vs_one_freed_slot);
}

#[test]
fn room_waiter_vs_one_freed_slot_no_lost_wakeup_without_membarrier() {
    model_without_membarrier(room_waiter_vs_one_freed_slot);
}

#[test]
fn room_two_waiters_one_slot_at_a_time_both_get_in() {
    // Two posters wait on a one-slot ring; the consumer frees one slot at a
    // time. One wake per freed slot must reach each waiter in turn: a herd
    // that wakes both for one slot must not leave the loser asleep, and
    // neither waits forever. A waiter asleep next to a free slot shows up as
    // a consumer that polls forever (loom's path-length limit). Bound 2: the
    // lost wakeup this guards against (a woken waiter that posted without
    // handing its wake on, see room.rs) needs two preemptions here, and is
    // found in seconds with the hand-on removed.
    model_bounded(2, || {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        poster.post(1).unwrap();
        let waiters: Vec<_> = [2, 3]
            .into_iter()
            .map(|v| {
                let p = poster.clone();
                thread::spawn(move || p.post_blocking(v))
            })
            .collect();
        // The consumer polls (yielding to loom) instead of parking: the race
        // is on the room side, and the consumer's own park/arm states would
        // multiply the model for nothing.
        let mut got = Vec::new();
        while got.len() < 3 {
            match consumer.try_dequeue() {
                Ok(v) => got.push(v),
                Err(_) => thread::yield_now(),
            }
        }
        for t in waiters {
            assert_eq!(t.join().unwrap(), Ok(()));
        }
        got.sort();
        assert_eq!(got, [1, 2, 3]);
    });
}

#[test]
fn room_wait_vs_close_hands_the_event_back() {
    // Close races with a poster joining the room queue: the poster is woken
    // (it joined first) or sees CLOSED in its post after joining (it joined
    // after close's wake-all), and gets its event back either way.
    model(|| {
        let (poster, mut consumer) = full_ring(1);
        let t = post_blocking_on_a_thread(&poster, 2);
        consumer.close();
        assert_eq!(t.join().unwrap(), Err(PostError::Closed(2)));
        assert_eq!(consumer.try_dequeue(), Ok(1));
        assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    });
}

#[test]
fn room_waiter_vs_upcalls_enabled_on_a_full_ring_no_lost_wakeup() {
    // Upcalls are enabled with `Invoke::New` on a full ring: no instance
    // starts, and only the upcall a post starts can drain it. A
    // `RoomWaiter` (which posts nothing) waits on another thread: either its
    // look after joining sees the policy and starts the draining upcall
    // itself, or the enable's check (the room barrier's light half after its
    // CAS; an unwinding instance makes the same one) sees it queued and
    // wakes it. A lost wakeup leaves `block_on` parked forever: a loom
    // deadlock.
    model(|| {
        let (poster, consumer) = full_ring(1);
        let mut room = poster.room_waiter();
        let t = thread::spawn(move || {
            loom::future::block_on(std::future::poll_fn(|cx| room.poll_room(cx)))
        });
        let _up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, |_, _| {});
        assert_eq!(t.join().unwrap(), Ok(1));
    });
}

#[test]
fn post_blocking_woken_while_its_own_post_runs_an_upcall_no_lost_wakeup() {
    // A waiting post's second post (after joining the room queue) may run
    // the upcall that drains a full ring, on the poster's own thread, while
    // the wake it is owed comes (here the enable that leaves the queued
    // event to a post wakes the room queue). The handler is user code that
    // parks and is unparked on this thread (a channel receive, a blocking
    // call elsewhere), which takes the unpark token that wake left; it also
    // disables upcalls and refills the ring, so the post is refused as full
    // again and the poster waits, its seat already woken. Waiting on the
    // token alone, it would sleep beside the slot the consumer frees: a
    // loom deadlock.
    model(|| {
        let (poster, consumer) = full_ring(0);
        let t = post_blocking_on_a_thread(&poster, 1);
        let slot = Arc::new(loom::sync::Mutex::new(None::<evd::Upcalls<u32>>));
        let (s, p) = (slot.clone(), poster.clone());
        let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
            if ev == Ok(0) {
                // Take this thread's unpark token, if it has one.
                thread::current().unpark();
                thread::park();
                if let Some(up) = s.lock().unwrap().as_mut() {
                    up.set_policy(UpcallPolicy::Disabled, Invoke::New).unwrap();
                }
                p.post(2).unwrap();
            }
        });
        *slot.lock().unwrap() = Some(up);
        let up = slot.lock().unwrap().take().expect("stored above");
        let mut consumer = up.teardown();
        // Free the ring: the poster, queued or about to look, gets in.
        while consumer.try_dequeue().is_ok() {}
        assert_eq!(t.join().unwrap(), Ok(()));
    });
}
