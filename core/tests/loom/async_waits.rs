#[test]
fn closed_future_vs_close_no_lost_wakeup() {
    // A task registers its waker and re-checks CLOSED while the consumer
    // closes: it is woken, or its re-check sees CLOSED. A lost wakeup leaves
    // `block_on` parked forever: a loom deadlock.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let waiter = poster.clone();
        let c = thread::spawn(move || loom::future::block_on(waiter.closed()));
        consumer.close();
        c.join().unwrap();
        drop(poster);
    });
}

#[test]
fn recv_batch_vs_post_no_lost_wakeup() {
    // The batch's arm-then-check against a post: the post lands before the
    // batch's dequeue, between its dequeue and its arm, or after the arm
    // (and wakes it).
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            let mut buf = Vec::new();
            let n = loom::future::block_on(consumer.recv_batch(&mut buf, 2));
            (n, buf)
        });
        poster.post(9).unwrap();
        assert_eq!(c.join().unwrap(), (Ok(1), vec![9]));
    });
}
