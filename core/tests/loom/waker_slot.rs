#[test]
fn the_waker_slot_passes_from_a_wake_to_the_next_registration() {
    // The consumer's waker slot (`core/src/waker_slot.rs`) handed back and
    // forth: the consumer registers, is woken by the first post's take, and
    // registers again while the poster may still be taking the waker out or
    // posting the second event. Each registration's access to the waker cell
    // must come after the last take's (loom reports a concurrent access
    // otherwise), and no wakeup is lost (a deadlock otherwise).
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            let first = loom::future::block_on(consumer.recv());
            let second = loom::future::block_on(consumer.recv());
            (first, second)
        });
        poster.post(1).unwrap();
        poster.post(2).unwrap();
        assert_eq!(c.join().unwrap(), (Ok(1), Ok(2)));
    });
}

/// A waker that counts its wakes.
struct CountsWakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountsWakes {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn a_dropped_consumer_takes_its_waker_out_once_beside_a_posts_wake() {
    // The consumer's drop takes the registered waker out unwoken
    // (`WakerSlot::take_unwoken`) while a post may take it to wake it: one
    // of the two takes it (loom reports a concurrent access to the cell
    // otherwise), it is woken at most once, and the slot keeps no clone
    // (the waker's only reference left is the test's).
    model(|| {
        use futures_core::Stream;
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let keep = poster.clone();
        let counts = std::sync::Arc::new(CountsWakes(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(counts.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let polled = std::pin::Pin::new(&mut consumer).poll_next(&mut cx);
        assert!(polled.is_pending(), "empty: registered and armed");
        // Before the drop or after it (then refused as closed).
        let p = thread::spawn(move || {
            let _ = poster.post(1);
        });
        drop(consumer);
        p.join().unwrap();
        drop(waker);
        assert!(counts.0.load(std::sync::atomic::Ordering::Relaxed) <= 1);
        assert_eq!(
            std::sync::Arc::strong_count(&counts),
            1,
            "the slot let go of the waker"
        );
        drop(keep);
    });
}
