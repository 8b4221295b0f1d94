#[test]
fn a_dequeue_that_lingers_after_a_run_loses_no_event_and_no_wakeup() {
    // Two events make a run; the dequeue after them lingers, looks again,
    // then the wait arms and parks. The third post lands anywhere in that.
    model(|| {
        consumer_vs_last_post(4, &[0, 1], 2, |consumer| {
            drain_until_closed(consumer, Duration::ZERO)
        })
    });
}

#[test]
fn a_batch_that_lingers_after_a_run_loses_no_event_and_no_wakeup() {
    model(|| {
        consumer_vs_last_post(4, &[0, 1], 2, |consumer| {
            consumer.set_spin_budget(Duration::ZERO);
            let mut got = Vec::new();
            loop {
                match consumer.dequeue_batch(&mut got, 4) {
                    Ok(0) => match consumer.wait(1, None) {
                        Ok(_) | Err(WaitError::Closed { .. }) => {}
                        Err(e) => panic!("unexpected {e}"),
                    },
                    Ok(_) => {}
                    Err(TryDequeueError::Closed) => return got,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
        })
    });
}

#[test]
fn a_wait_that_backs_off_in_gaps_loses_no_event_and_no_wakeup() {
    // The default budget: the wait looks, waits a gap, looks, then arms and
    // parks; the post lands anywhere in that.
    model(|| {
        consumer_vs_last_post(2, &[], 7, |consumer| {
            drain_until_closed(consumer, evd::DEFAULT_SPIN_BUDGET)
        })
    });
}

#[test]
fn a_wait_in_its_back_off_ends_at_close() {
    // A back-off that never ends (Duration::MAX) must still see the close.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            consumer.set_spin_budget(Duration::MAX);
            consumer.wait(1, None)
        });
        drop(poster);
        assert_eq!(c.join().unwrap(), Err(WaitError::Closed { available: 0 }));
    });
}

#[test]
fn a_wait_in_its_back_off_ends_when_made_unwaitable() {
    // A back-off that never ends must still see `set_unwaitable`, made
    // before its first look or anywhere in its spin.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            consumer.set_spin_budget(Duration::MAX);
            consumer.wait(1, None)
        });
        poster.set_unwaitable();
        assert_eq!(c.join().unwrap(), Err(WaitError::Unwaitable));
    });
}
