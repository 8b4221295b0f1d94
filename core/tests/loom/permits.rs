#[test]
fn post_vs_permit_for_the_last_slot_exactly_one_gets_it() {
    // A post and a permit race for the one free slot. The permit is taken by
    // a CAS on the same word as the post's reservation, against the same
    // tail: exactly one of them gets the slot. A post that ignored the
    // permits would go in too, and the permit's send would then write into
    // a slot that still holds an event: a failed assertion or a data race.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        let p = poster.clone();
        let t = thread::spawn(move || p.try_reserve().map(|permit| permit.send(2)).is_ok());
        let posted = poster.post(1).is_ok();
        let reserved = t.join().unwrap();
        assert!(posted != reserved, "posted {posted}, reserved {reserved}");
        let got = consumer.try_dequeue();
        assert_eq!(got, Ok(if posted { 1 } else { 2 }));
        assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
    });
}

#[test]
fn permit_send_vs_arm_no_lost_notification() {
    // The consumer drains, arms and parks while a permit taken before it
    // armed is sent: the send's reservation CAS takes ARMED (it is a post)
    // or the arm sees the tail moved. A send that owed no wake would leave
    // the consumer parked: a loom deadlock.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        let permit = poster.try_reserve().unwrap();
        let c = thread::spawn(move || {
            loop {
                if let Ok(v) = consumer.try_dequeue() {
                    return v;
                }
                // The poster lives: no error is possible.
                consumer.wait(1, None).unwrap();
            }
        });
        permit.send(7).unwrap();
        assert_eq!(c.join().unwrap(), 7);
    });
}

/// A poster waits for a permit on a one-slot ring whose slot another
/// permit holds; that permit is dropped unsent. Either the waiter's try
/// after joining the room queue sees the slot given back, or the drop's
/// room check sees the waiter and wakes it. A drop that skipped the check
/// leaves the waiter parked: a loom deadlock.
fn permit_drop_vs_room_waiter() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    let held = poster.try_reserve().unwrap();
    let p = poster.clone();
    let t = thread::spawn(move || {
        let permit = loom::future::block_on(p.reserve()).unwrap();
        permit.send(2).unwrap();
    });
    drop(held);
    t.join().unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(2));
    assert!(!consumer.query().room_wanted);
}

#[test]
fn permit_drop_vs_room_waiter_no_lost_wakeup() {
    model(permit_drop_vs_room_waiter);
}

#[test]
fn permit_drop_vs_room_waiter_no_lost_wakeup_without_membarrier() {
    model_without_membarrier(permit_drop_vs_room_waiter);
}

#[test]
fn permit_back_from_the_limit_vs_limit_waiter_no_lost_wakeup() {
    // Every permit the EVD allows is out; a poster waits for one while one
    // of them is sent. The waiter registers in the permit-limit list, then
    // tries again; the send takes the count below the limit, then locks the
    // list and wakes it. The lock orders the two: the try sees the permit
    // back or the send finds the waker. A send that skipped the list leaves
    // the waiter parked: a loom deadlock.
    model_long_prefix(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(256).unwrap();
        let mut held: Vec<_> = (0..evd::Permit::<u32>::MAX_OUT)
            .map(|_| poster.try_reserve().unwrap())
            .collect();
        let p = poster.clone();
        let t = thread::spawn(move || {
            let permit = loom::future::block_on(p.reserve()).unwrap();
            permit.send(2).unwrap();
        });
        held.pop().unwrap().send(1).unwrap();
        t.join().unwrap();
        assert_eq!(consumer.try_dequeue(), Ok(1));
        assert_eq!(consumer.try_dequeue(), Ok(2));
        drop(held);
    });
}

#[test]
fn close_vs_limit_waiter_no_lost_wakeup() {
    // Every permit is out and a poster waits for one; the EVD closes. Close
    // sets CLOSED, then wakes the permit-limit list; the waiter registers,
    // then tries again (and sees CLOSED). A close that skipped the list
    // leaves the waiter parked: a loom deadlock.
    model_long_prefix(|| {
        let (poster, consumer) = evd::bounded::<u32>(256).unwrap();
        let held: Vec<_> = (0..evd::Permit::<u32>::MAX_OUT)
            .map(|_| poster.try_reserve().unwrap())
            .collect();
        let p = poster.clone();
        let t = thread::spawn(move || loom::future::block_on(p.reserve()).map(drop));
        drop(consumer);
        assert_eq!(t.join().unwrap(), Err(evd::BatchPostError::Closed));
        drop(held);
    });
}

/// [`model`] for a model that takes every permit first: a long prefix of
/// atomic steps on one thread, more branches than loom's default allows,
/// none of them a choice.
fn model_long_prefix<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 50_000;
    b.preemption_bound = b.preemption_bound.or(Some(3));
    b.check(f);
}

#[test]
fn permit_filling_a_ring_no_upcall_drains_vs_waiting_post_no_lost_wakeup() {
    // A reservation (polled here) and a post (on a thread) wait for room on
    // a full ring; the consumer takes one event (its head store wakes the
    // reservation, first in the queue) and turns to upcalls without
    // starting one (`Invoke::New`, one event left queued). If the
    // reservation gets the slot, its permit fills the ring and starts no
    // upcall: the ring is full of an event nobody drains, and only the
    // waiting post, refused as full, would start the upcall. The permit is
    // held until that post is done, so a permit that left it asleep is a
    // loom deadlock.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        poster.post(1).unwrap();
        poster.post(2).unwrap();
        let mut reserving = std::pin::pin!(poster.reserve());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(reserving.as_mut().poll(&mut cx).is_pending());
        let posting = post_blocking_on_a_thread(&poster, 3);
        assert_eq!(consumer.try_dequeue(), Ok(1));
        let delivered = Arc::new(AtomicUsize::new(0));
        let d = delivered.clone();
        let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
            ev.unwrap();
            d.fetch_add(1, Ordering::SeqCst);
        });
        let permit = loom::future::block_on(reserving).unwrap();
        assert_eq!(posting.join().unwrap(), Ok(()));
        permit.send(4).unwrap();
        let mut consumer = up.teardown();
        let mut left = 0;
        while consumer.try_dequeue().is_ok() {
            left += 1;
        }
        assert_eq!(
            delivered.load(Ordering::SeqCst) + left,
            3,
            "2, 3 and 4, once each"
        );
    });
}
