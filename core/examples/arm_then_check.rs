//! Arm-then-check at work: a producer posts bursts; the consumer drains, arms,
//! and sleeps only when the arm says nothing slipped in. It prints how often
//! the arm caught an event that a naive "drain then sleep" would have missed.
//!
//! Run: `cargo run --release -p evd --example arm_then_check`

use evd::{ArmStatus, WaitError};

const EVENTS: u64 = 1_000_000;
const BURST: u64 = 64;

fn main() {
    let (poster, mut consumer) = evd::bounded::<u64>(1024).expect("capacity is valid");
    let producer = std::thread::spawn(move || {
        for burst in 0..EVENTS / BURST {
            for i in 0..BURST {
                let mut v = burst * BURST + i;
                while let Err(e) = poster.post(v) {
                    v = e.into_inner();
                    std::thread::yield_now();
                }
            }
            // Let the consumer catch up and go to sleep now and then.
            if burst % 16 == 0 {
                std::thread::yield_now();
            }
        }
    });

    let (mut next, mut armed, mut pending, mut sleeps) = (0u64, 0u64, 0u64, 0u64);
    loop {
        loop {
            match consumer.try_dequeue() {
                Ok(v) => {
                    assert_eq!(v, next, "FIFO, exactly once");
                    next += 1;
                }
                // Nothing here posts lossily: a loss report would be a
                // broken promise.
                Err(evd::TryDequeueError::Overflow(o)) => panic!("{o}"),
                // Empty, or closed and drained (the arm says which).
                Err(_) => break,
            }
        }
        match consumer.arm() {
            ArmStatus::Armed => {
                armed += 1;
                sleeps += 1;
                // Closed: the next arm says so. Nothing here posts
                // lossily, so an overflow would be a broken promise.
                match consumer.wait(1, None) {
                    Ok(_) | Err(WaitError::Closed { .. }) => {}
                    Err(e) => panic!("wait failed: {e}"),
                }
            }
            ArmStatus::Pending => pending += 1,
            ArmStatus::Closed => break,
        }
    }
    producer.join().expect("producer");
    let q = consumer.query();
    assert_eq!(next, EVENTS);
    println!("delivered {next} events in order, exactly once");
    println!(
        "arms: {armed} armed (slept), {pending} pending: events that landed between the last dequeue and the arm, caught without a second poll"
    );
    println!("sleeps: {sleeps}, notifications fired: {}", q.notifications);
}
