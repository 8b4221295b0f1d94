/// Take exactly `n` events, blocking (drain, arm, park) whenever the ring is
/// empty; the EVD must stay open meanwhile.
fn take_exactly(consumer: &mut evd::Consumer<u32>, n: usize) -> Vec<u32> {
    consumer.set_spin_budget(Duration::ZERO);
    let mut got = Vec::new();
    while got.len() < n {
        match consumer.try_dequeue() {
            Ok(v) => got.push(v),
            Err(TryDequeueError::Empty) => match consumer.wait(1, None) {
                Ok(_) => {}
                Err(e) => panic!("unexpected {e}"),
            },
            Err(e) => panic!("unexpected {e}"),
        }
    }
    got
}

/// Two posters, one event each (1 from this thread, 2 from another), while
/// `take` runs on the consumer's thread and returns what it took; asserts
/// each event came exactly once, and hands back the consumer and a poster
/// (still alive, so the EVD is open).
fn two_posters_each_post_once(
    take: impl FnOnce(&mut evd::Consumer<u32>) -> Vec<u32> + Send + 'static,
) -> (evd::Consumer<u32>, evd::Poster<u32>) {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    let p2 = poster.clone();
    let c = thread::spawn(move || {
        let got = take(&mut consumer);
        (got, consumer)
    });
    let t = thread::spawn(move || p2.post(2).unwrap());
    poster.post(1).unwrap();
    t.join().unwrap();
    let (mut got, consumer) = c.join().unwrap();
    got.sort_unstable();
    assert_eq!(got, [1, 2], "each event exactly once");
    (consumer, poster)
}

#[test]
fn post_vs_arm_no_lost_notification() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || {
            // drain → arm → park, exactly the consumer loop the crate removes
            // the second poll from.
            loop {
                if let Ok(v) = consumer.try_dequeue() {
                    return v;
                }
                // The poster lives: no error is possible.
                consumer.wait(1, None).unwrap();
            }
        });
        poster.post(7).unwrap();
        assert_eq!(c.join().unwrap(), 7);
    });
}

#[test]
fn arm_reports_an_event_posted_after_the_last_dequeue() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            let before = consumer.try_dequeue();
            let status = consumer.arm();
            let after = consumer.try_dequeue();
            (before, status, after, consumer)
        });
        poster.post(1).unwrap();
        let (before, status, after, consumer) = c.join().unwrap();
        let q = consumer.query();
        match status {
            // Armed means the ring was empty when the arm CAS ran: either the
            // event had already been dequeued, or the post came after the arm
            // and took the notification.
            ArmStatus::Armed => assert!(
                (before.is_ok() && q.notifications == 0)
                    || (before.is_err() && q.notifications == 1),
                "{before:?} {q:?}"
            ),
            // Pending means the event is there to take.
            ArmStatus::Pending => assert!(
                before.is_err() && (after == Ok(1) || q.len == 1),
                "{before:?} {after:?} {q:?}"
            ),
            ArmStatus::Closed => panic!("not closed"),
        }
    });
}

#[test]
fn two_posters_vs_arm() {
    model(|| {
        // The consumer waits for both events while both posters are alive:
        // close's wake cannot stand in for a notification a post owed, so a
        // lost one is a deadlock here, not a late end of stream.
        let (mut consumer, poster) = two_posters_each_post_once(|c| take_exactly(c, 2));
        drop(poster);
        assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    });
}

#[test]
fn explicit_arm_loop_vs_two_posters_then_arms_on_the_drained_ring() {
    // The DAT loop: drain, arm, and wait only when the arm says `Armed`. An
    // arm that knows of reserved events from an earlier look at the word
    // says `Pending` without looking again; it must never claim more than
    // were reserved (once both events are taken the arm must arm), and a
    // `Pending` for events still being written must not hide an arm the
    // posts then owe a notification (a lost one deadlocks the model).
    model(|| {
        let (mut consumer, poster) = two_posters_each_post_once(|consumer| {
            consumer.set_spin_budget(Duration::ZERO);
            let mut got = Vec::new();
            while got.len() < 2 {
                match consumer.dequeue_batch(&mut got, 2) {
                    Ok(0) => match consumer.arm() {
                        ArmStatus::Armed => {
                            consumer.wait(1, None).unwrap();
                        }
                        ArmStatus::Pending => thread::yield_now(),
                        ArmStatus::Closed => panic!("both posters are alive"),
                    },
                    Ok(_) => {}
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            got
        });
        assert_eq!(
            consumer.arm(),
            ArmStatus::Armed,
            "drained: nothing is pending"
        );
        drop(poster);
    });
}

#[test]
fn waker_registration_vs_post() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || loom::future::block_on(consumer.recv()));
        poster.post(9).unwrap();
        assert_eq!(c.join().unwrap(), Ok(9));
    });
}

#[test]
fn refused_post_vs_arm_reports_nothing() {
    // A post refused as full is backpressure: a consumer draining and arming
    // around it never sees an overflow report.
    model(|| {
        let (poster, mut consumer) = full_ring(0);
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match consumer.try_dequeue() {
                    Ok(v) => got.push(v),
                    Err(TryDequeueError::Overflow(o)) => panic!("false overflow report {o}"),
                    Err(TryDequeueError::Closed) => return got,
                    Err(TryDequeueError::Empty) => match consumer.arm() {
                        ArmStatus::Armed => {
                            if let Err(WaitError::Overflow(o)) = consumer.wait(1, None) {
                                panic!("false overflow report {o}");
                            }
                        }
                        ArmStatus::Pending => {}
                        ArmStatus::Closed => return got,
                    },
                }
            }
        });
        let queued = match poster.post(1) {
            Ok(()) => vec![0, 1],
            Err(PostError::Full(1)) => vec![0],
            Err(e) => panic!("unexpected {e}"),
        };
        drop(poster);
        assert_eq!(c.join().unwrap(), queued);
    });
}

#[test]
fn query_vs_dequeue_is_a_consistent_snapshot() {
    // An observer's query races the consumer's head store and a post whose
    // reservation needed that head: head and word must belong to one instant
    // (a stale head with a newer tail would report more than the capacity).
    model(|| {
        let (poster, mut consumer) = full_ring(1);
        let observer = poster.clone();
        let o = thread::spawn(move || {
            let q = observer.query();
            assert!(q.len <= q.capacity, "{q:?}");
            assert_eq!(q.posted, q.dequeued + q.len as u64, "{q:?}");
        });
        let c = thread::spawn(move || drain_to_end(&mut consumer));
        let second = poster.post(2).is_ok();
        drop(poster);
        o.join().unwrap();
        let got = c.join().unwrap();
        assert_eq!(got, if second { vec![1, 2] } else { vec![1] });
    });
}

#[test]
fn batch_post_vs_arm() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || drain_to_end(&mut consumer));
        let mut batch = vec![1, 2];
        assert_eq!(poster.post_batch(&mut batch), Ok(2));
        drop(poster);
        assert_eq!(c.join().unwrap(), [1, 2], "exactly once, FIFO");
    });
}

/// A task's waker whose drop takes this thread's unpark token, if it has
/// one, as user code that parks there does (a channel, a blocking call).
struct ParksOnDrop;

impl std::task::Wake for ParksOnDrop {
    fn wake(self: std::sync::Arc<Self>) {}
}

impl Drop for ParksOnDrop {
    fn drop(&mut self) {
        thread::current().unpark();
        thread::park();
    }
}

#[test]
fn wait_woken_while_its_registration_drops_a_parking_waker_no_lost_wakeup() {
    // An async wait left its task's waker registered, and the EVD armed,
    // when its future was dropped. A blocking `wait(2)` then registers the
    // thread's waker, and the replaced task waker's drop runs on this
    // thread: it parks, taking the token of a wake that came meanwhile (the
    // first post, which took the new waker out of the slot). The arm for
    // two finds one event and arms with the slot empty; waiting on the
    // token alone, the consumer would sleep through the second post: a
    // loom deadlock.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
        let task = std::task::Waker::from(std::sync::Arc::new(ParksOnDrop));
        {
            let mut recv = consumer.recv();
            let mut cx = std::task::Context::from_waker(&task);
            let polled = std::future::Future::poll(std::pin::Pin::new(&mut recv), &mut cx);
            assert!(polled.is_pending(), "nothing posted yet");
        }
        drop(task); // the registered clone is now the last
        let c = thread::spawn(move || consumer.wait(2, None));
        poster.post(1).unwrap();
        poster.post(2).unwrap();
        assert_eq!(c.join().unwrap(), Ok(2));
    });
}
