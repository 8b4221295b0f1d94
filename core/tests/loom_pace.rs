//! loom models of the consumer's pacing (`core/src/pace.rs`): the linger of
//! a dequeue that finds nothing after a run, and the gaps of a wait's
//! back-off. Under loom each is a yield (no clock), followed by the same
//! look a dequeue makes anyway; these models check that the look after it,
//! with posts and a close landing around it, loses no event and no wakeup.
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p evd --release --features __loom --test loom_pace`
#![cfg(loom)]

use evd::{TryDequeueError, WaitError};
use loom::thread;
use std::time::Duration;

/// Explore every interleaving with at most `LOOM_MAX_PREEMPTIONS` (default
/// 3) preemptions, as `tests/loom.rs` does.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Take events until end of stream with busy `try_dequeue`, waiting (with
/// `budget` of back-off) whenever nothing is ready.
fn drain_to_end(consumer: &mut evd::Consumer<u32>, budget: Duration) -> Vec<u32> {
    consumer.set_spin_budget(budget);
    let mut got = Vec::new();
    loop {
        match consumer.try_dequeue() {
            Ok(v) => got.push(v),
            Err(TryDequeueError::Closed) => return got,
            Err(TryDequeueError::Empty) => match consumer.wait(1, None) {
                Ok(_) | Err(WaitError::Closed { .. }) => {}
                Err(e) => panic!("unexpected {e}"),
            },
            Err(e) => panic!("unexpected {e}"),
        }
    }
}

#[test]
fn a_dequeue_that_lingers_after_a_run_loses_no_event_and_no_wakeup() {
    // Two events make a run; the dequeue after them lingers, looks again,
    // then the wait arms and parks. The third post lands anywhere in that.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
        poster.post(0).unwrap();
        poster.post(1).unwrap();
        let c = thread::spawn(move || drain_to_end(&mut consumer, Duration::ZERO));
        poster.post(2).unwrap();
        drop(poster);
        assert_eq!(c.join().unwrap(), [0, 1, 2]);
    });
}

#[test]
fn a_batch_that_lingers_after_a_run_loses_no_event_and_no_wakeup() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
        poster.post(0).unwrap();
        poster.post(1).unwrap();
        let c = thread::spawn(move || {
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
        });
        poster.post(2).unwrap();
        drop(poster);
        assert_eq!(c.join().unwrap(), [0, 1, 2]);
    });
}

#[test]
fn a_wait_that_backs_off_in_gaps_loses_no_event_and_no_wakeup() {
    // The default budget: the wait looks, waits a gap, looks, then arms and
    // parks; the post lands anywhere in that.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || drain_to_end(&mut consumer, evd::DEFAULT_SPIN_BUDGET));
        poster.post(7).unwrap();
        drop(poster);
        assert_eq!(c.join().unwrap(), [7]);
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
