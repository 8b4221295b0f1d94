#[test]
fn resize_vs_post() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            if let Ok(v) = consumer.try_dequeue() {
                got.push(v);
            }
            consumer.resize(4).unwrap();
            got.extend(drain_to_end(&mut consumer));
            got
        });
        poster.post(1).unwrap();
        // The second post may find the 1-slot ring full before the resize.
        let mut second = 2;
        loop {
            match poster.post(second) {
                Ok(()) => break,
                Err(e) => {
                    second = e.into_inner();
                    thread::yield_now();
                }
            }
        }
        drop(poster);
        let got = c.join().unwrap();
        assert_eq!(got, [1, 2], "no loss, no duplicate, FIFO");
    });
}

#[test]
fn resize_vs_post_batch() {
    // One reservation of a batch holds two tickets, both written through
    // the buffer pointer the post loaded once: a resize that begins
    // meanwhile waits for both before it moves the ring and frees the old
    // buffer.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            consumer.resize(4).unwrap();
            drain_to_end(&mut consumer)
        });
        let mut batch = vec![1, 2];
        assert_eq!(poster.post_batch(&mut batch), Ok(2));
        drop(poster);
        assert_eq!(c.join().unwrap(), [1, 2], "no loss, no duplicate, FIFO");
    });
}

#[test]
fn a_waiting_post_refused_by_a_resize_is_woken_when_it_ends() {
    // A post that waits for room meets a resize that shrinks the empty
    // ring (and so frees no slot): refused while RESIZING holds posters off,
    // it waits in the room queue, and the resize's end must wake it (the
    // ring has room). An end without its room check parks the poster for
    // ever: a loom deadlock.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let t = post_blocking_on_a_thread(&poster, 1);
        assert_eq!(consumer.resize(1), Ok(1));
        assert_eq!(t.join().unwrap(), Ok(()));
        assert_eq!(consumer.try_dequeue(), Ok(1));
    });
}

#[test]
fn a_waiting_post_refused_by_a_refused_resize_is_woken_when_it_ends() {
    // As above, for a shrink refused as too small: it held posters off all
    // the same, and its end must wake the one it refused.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
        for ev in 1..=3 {
            poster.post(ev).unwrap();
        }
        let t = post_blocking_on_a_thread(&poster, 4);
        let r = consumer.resize(2);
        assert!(matches!(r, Err(evd::ResizeError::TooSmall { .. })), "{r:?}");
        assert_eq!(t.join().unwrap(), Ok(()));
        let got: Vec<u32> = (0..4).map(|_| consumer.try_dequeue().unwrap()).collect();
        assert_eq!(got, [1, 2, 3, 4]);
    });
}

#[test]
fn a_permit_reservation_refused_by_a_resize_is_woken_when_it_ends() {
    // The async permit reservation's own loop: refused by the resize, it
    // waits in the room queue as for a slot, and the end must wake it.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let p = poster.clone();
        let t = thread::spawn(move || loom::future::block_on(p.reserve()).map(|pm| pm.send(1)));
        assert_eq!(consumer.resize(1), Ok(1));
        assert_eq!(t.join().unwrap(), Ok(Ok(())));
        assert_eq!(consumer.try_dequeue(), Ok(1));
    });
}

/// Set by an execution of the model below in which the timed post was
/// refused during the resize.
static TIMED_POST_REFUSED_BY_A_RESIZE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

#[test]
fn a_timed_post_that_meets_a_resize_returns_at_its_deadline() {
    // A post whose deadline has passed, meeting a resize, hands its event
    // back as full instead of waiting the resize out (which a poster
    // preempted between its reservation and its publish holds for as long
    // as it stays off its CPU). The ring has room throughout, so a refusal
    // can only be the resize's: some execution must show one, and none may
    // lose or duplicate the event.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let p = poster.clone();
        let t = thread::spawn(move || p.post_timeout(1, Duration::ZERO));
        assert_eq!(consumer.resize(1), Ok(1));
        match t.join().unwrap() {
            Ok(()) => assert_eq!(consumer.try_dequeue(), Ok(1)),
            Err(PostError::Full(1)) => {
                TIMED_POST_REFUSED_BY_A_RESIZE.store(true, std::sync::atomic::Ordering::Relaxed);
                assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
            }
            other => panic!("post_timeout: {other:?}"),
        }
    });
    assert!(
        TIMED_POST_REFUSED_BY_A_RESIZE.load(std::sync::atomic::Ordering::Relaxed),
        "no execution had the resize refuse the timed post"
    );
}

/// Set by an execution of the model below in which the room waiter was
/// pending (refused by the resize: the ring had room throughout).
static ROOM_WAITER_REFUSED_BY_A_RESIZE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

#[test]
fn a_room_waiter_that_meets_a_resize_waits_for_its_end() {
    // A room waiter reports no room while a resize holds posters off (a
    // post would wait for it) and waits in the room queue: some execution
    // must show it pending, and the resize's end must wake it (an end that
    // does not parks it for ever: a loom deadlock).
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let mut room = poster.room_waiter();
        let t = thread::spawn(move || {
            let mut polls = 0;
            let free = loom::future::block_on(std::future::poll_fn(|cx| {
                polls += 1;
                room.poll_room(cx)
            }));
            (free, polls)
        });
        assert_eq!(consumer.resize(1), Ok(1));
        let (free, polls) = t.join().unwrap();
        assert!(matches!(free, Ok(1 | 2)), "{free:?}");
        if polls > 1 {
            ROOM_WAITER_REFUSED_BY_A_RESIZE.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(
        ROOM_WAITER_REFUSED_BY_A_RESIZE.load(std::sync::atomic::Ordering::Relaxed),
        "no execution had the resize hold the room waiter off"
    );
}
