/// A consumer thread's `wait(1, None)`, with no spin (it parks at once),
/// against `act` on this thread; returns what the wait returned.
fn wait_vs(act: impl FnOnce(&evd::Poster<u32>)) -> Result<usize, WaitError> {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    consumer.set_spin_budget(Duration::ZERO);
    let c = thread::spawn(move || consumer.wait(1, None));
    act(&poster);
    c.join().unwrap()
}

#[test]
fn close_vs_wait() {
    model(|| {
        assert_eq!(
            wait_vs(|poster| poster.close()),
            Err(WaitError::Closed { available: 0 })
        );
    });
}

#[test]
fn last_poster_drop_vs_wait_ends_the_stream() {
    model(|| consumer_vs_last_post(2, &[], 3, drain_to_end));
}

/// The consumer makes a poster while the last one drops: made before the
/// drop's decrement, it keeps the EVD open and its post is queued; made
/// after, it finds the EVD closed for good and its post is refused. Never
/// a post queued and then the EVD closed under the live poster that made it.
#[test]
fn a_poster_made_while_the_last_one_drops_finds_the_evd_open_or_closed_for_good() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let t = thread::spawn(move || drop(poster));
        let p2 = consumer.poster();
        let posted = p2.post(1);
        t.join().unwrap();
        match posted {
            Ok(()) => assert!(
                !consumer.is_closed(),
                "closed under the live poster whose post it queued"
            ),
            Err(e) => assert_eq!(e, PostError::Closed(1)),
        }
        drop(p2);
        assert!(consumer.is_closed(), "the last poster closes");
    });
}

/// Two threads make posters while the last one drops (the consumer is
/// `Sync`): the first may find the count ended and close the EVD itself
/// while the second's increment comes after it. Neither is then ever open
/// to its new handle and closed under it: one made after the end finds the
/// EVD closed, whichever thread's increment saw the end.
#[test]
fn two_posters_made_while_the_last_one_drops_find_the_evd_open_or_closed_for_good() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let consumer = Arc::new(consumer);
        let c = consumer.clone();
        let dropper = thread::spawn(move || drop(poster));
        let maker = thread::spawn(move || c.poster());
        let p3 = consumer.poster();
        let posted = p3.post(3);
        dropper.join().unwrap();
        let p2 = maker.join().unwrap();
        match posted {
            Ok(()) => assert!(
                !consumer.is_closed(),
                "closed under the live poster whose post it queued"
            ),
            Err(e) => assert_eq!(e, PostError::Closed(3)),
        }
        drop((p2, p3));
        assert!(consumer.is_closed(), "the last poster closes");
    });
}

#[test]
fn unwaitable_vs_wait() {
    model(|| {
        assert_eq!(
            wait_vs(|poster| poster.set_unwaitable()),
            Err(WaitError::Unwaitable)
        )
    });
}

#[test]
fn post_then_unwaitable_vs_dequeue_takes_the_event() {
    // The poster's event is published before the EVD is made unwaitable:
    // a blocking dequeue that sees the flag sees the event too, and takes
    // it instead of refusing to wait. (The consumer has its own thread: a
    // late unpark from the poster's wake must not reach this thread's join.)
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || consumer.dequeue());
        poster.post(1).unwrap();
        poster.set_unwaitable();
        assert_eq!(c.join().unwrap(), Ok(1));
    });
}

#[test]
fn loss_vs_arm_no_lost_report() {
    // A lossy post commits its loss after the consumer's last dequeue but
    // before its arm: the arm must see the report as pending work, or the
    // loss must wake the armed consumer.
    model(|| {
        let (poster, mut consumer) = full_ring(0); // the ring is full
        consumer.set_spin_budget(Duration::ZERO); // park at once: the window is before the park
        let c = thread::spawn(move || take_events_and_reports(&mut consumer, 2, drop));
        // Either queued (after the consumer made room) or lost and reported;
        // either way the consumer must hear of it.
        let r = poster.post_lossy(1);
        let (events, reports) = c.join().unwrap();
        // which of the two, as post_lossy said.
        match r {
            Ok(evd::Lossy::Posted) => assert_eq!((events, reports), (2, 0)),
            Ok(evd::Lossy::Lost) => assert_eq!((events, reports), (1, 1)),
            Err(e) => panic!("{e}"),
        }
        drop(poster);
    });
}

#[test]
fn loss_vs_upcall_exit_no_stranded_report() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
        let (upcalls, heard) = counting_upcalls(consumer, UpcallPolicy::SingleInstance, |ev| {
            ev.map(|_| 1).unwrap_or_else(|o| o.lost as usize)
        });
        let p2 = poster.clone();
        let t = thread::spawn(move || {
            let _ = p2.post_lossy(2);
        });
        let _ = poster.post_lossy(1);
        t.join().unwrap();
        // Both posts returned: each event was delivered or reported, except
        // what is still queued for the teardown to hand back.
        assert_eq!(count_after_teardown(upcalls, &heard, drop), 2);
    });
}

#[test]
fn close_vs_consumer_spinning_on_an_empty_ring() {
    // The consumer decides "empty" from the head slot's stamp and the loss
    // word alone; close must still end its stream: it gets the last event,
    // then Closed, and never spins forever.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match consumer.try_dequeue() {
                    Ok(v) => got.push(v),
                    Err(TryDequeueError::Closed) => return got,
                    Err(TryDequeueError::Overflow(o)) => panic!("nothing was lost: {o}"),
                    Err(TryDequeueError::Empty) => thread::yield_now(),
                }
            }
        });
        poster.post(1).unwrap();
        poster.close();
        assert_eq!(c.join().unwrap(), [1], "the last event, then the end");
        drop(poster);
    });
}

#[test]
fn batch_dequeue_vs_close_ends_after_the_last_event() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match consumer.dequeue_batch(&mut got, 2) {
                    Ok(0) => thread::yield_now(),
                    Ok(_) => {}
                    Err(TryDequeueError::Closed) => return got,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
        });
        let mut batch = vec![1, 2];
        assert_eq!(poster.post_batch(&mut batch), Ok(2));
        drop(poster); // the last poster closes
        assert_eq!(c.join().unwrap(), [1, 2]);
    });
}

#[test]
fn loss_vs_close_is_told_before_end_of_stream() {
    // A lossy post commits its loss after the consumer's last dequeue and
    // then closes the EVD: a consumer that stops at Closed must have heard
    // of the loss first.
    model(|| {
        let (poster, mut consumer) = full_ring(0);
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || {
            let (mut events, mut reports) = (0, 0);
            loop {
                match consumer.try_dequeue() {
                    Ok(_) => events += 1,
                    Err(TryDequeueError::Overflow(o)) => reports += o.lost,
                    Err(TryDequeueError::Empty | TryDequeueError::Closed) => match consumer.arm() {
                        ArmStatus::Closed => break,
                        ArmStatus::Pending => {}
                        ArmStatus::Armed => {
                            if let Err(WaitError::Overflow(o)) = consumer.wait(1, None) {
                                reports += o.lost;
                            }
                        }
                    },
                }
            }
            (events, reports)
        });
        let r = poster.post_lossy(1);
        drop(poster); // closes
        let (events, reports) = c.join().unwrap();
        // Told of every loss before end of stream, as the post said.
        match r {
            Ok(evd::Lossy::Posted) => assert_eq!((events, reports), (2, 0)),
            Ok(evd::Lossy::Lost) => assert_eq!((events, reports), (1, 1)),
            Err(e) => panic!("{e}"),
        }
    });
}
