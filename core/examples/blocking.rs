//! Blocking consumption: `dequeue`, `dequeue_timeout` and the blocking
//! iterator. The thread parks while the ring is empty, a post wakes it, and
//! the iteration ends by itself once the EVD is closed and drained.
//!
//! Run: `cargo run --release -p evd --example blocking`

use evd::{DequeueError, Poster};
use std::time::Duration;

const POSTERS: u64 = 2;
const PER_POSTER: u64 = 100_000;

/// Post `ev`, retrying while the ring is full (the event is handed back).
fn post(poster: &Poster<u64>, mut ev: u64) {
    while let Err(e) = poster.post(ev) {
        assert!(e.is_full(), "the EVD closed under a poster");
        ev = e.into_inner();
        std::thread::yield_now();
    }
}

/// Events are `poster << 32 | sequence`; `next[p]` is poster `p`'s next.
fn check(next: &mut [u64], ev: u64) {
    let (p, seq) = ((ev >> 32) as usize, ev & 0xffff_ffff);
    assert_eq!(seq, next[p], "exactly once, FIFO per poster");
    next[p] += 1;
}

fn main() {
    let (poster, mut consumer) = evd::bounded::<u64>(64).expect("valid capacity");
    // Park as soon as nothing is ready. (By default a blocking call spins and
    // yields a little first, which often finds the next event without a park.)
    consumer.set_spin_budget(Duration::ZERO);

    // Nothing is posted yet: a timed dequeue gives up after its timeout.
    let empty = consumer.dequeue_timeout(Duration::from_millis(5));
    assert_eq!(empty, Err(DequeueError::Timeout));

    let threads: Vec<_> = (0..POSTERS)
        .map(|p| {
            let poster = poster.clone();
            std::thread::spawn(move || (0..PER_POSTER).for_each(|seq| post(&poster, p << 32 | seq)))
        })
        .collect();
    // The EVD closes when the last Poster is dropped (or on `close()`), so
    // the consumer's loop below ends once the posters are done.
    drop(poster);

    let mut next = vec![0; POSTERS as usize];
    // `dequeue` blocks until an event is posted (or the stream ends).
    let first = consumer.dequeue().expect("the posters post");
    check(&mut next, first);

    // The blocking iterator: every item is a `dequeue`. It yields
    // `Result<u64, Overflow>` (a loss report is an `Err` item; only
    // `post_lossy` loses events) and ends at the end of stream. `for ev in
    // &mut consumer` is the same; `for ev in consumer` consumes the consumer.
    let mut items = 1;
    for ev in consumer.iter() {
        check(&mut next, ev.expect("no lossy posts, so no loss report"));
        items += 1;
    }
    threads.into_iter().for_each(|t| t.join().unwrap());

    // The end of stream is final: every blocking form reports it at once.
    assert_eq!(consumer.dequeue(), Err(DequeueError::Closed));
    assert_eq!(
        consumer.dequeue_timeout(Duration::from_secs(5)),
        Err(DequeueError::Closed)
    );
    assert_eq!(next, [PER_POSTER; POSTERS as usize], "every event arrived");
    assert_eq!(items, POSTERS * PER_POSTER);

    let q = consumer.query();
    println!("blocking: {items} events from {POSTERS} posters, exactly once, FIFO per poster");
    // A notification is a post that found the consumer armed (parked, or
    // about to park) and woke it.
    println!(
        "blocking: {} notifications, then the end of stream (closed: {}, queued: {})",
        q.notifications, q.closed, q.len
    );
}
