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
