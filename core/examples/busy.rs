//! Busy consumption: the consumer polls with `try_iter` and `try_dequeue` and
//! never blocks while events keep coming. Only when the ring has stayed empty
//! for a while does it arm, and it sleeps only if the arm says nothing
//! slipped in since its last poll: the arm is the only way to a sleep.
//!
//! Run: `cargo run --release -p evd --example busy`

use evd::{ArmStatus, Poster, TryDequeueError, WaitError};

const POSTERS: u64 = 2;
const PER_POSTER: u64 = 200_000;
/// Empty polls in a row before the consumer gives up spinning and arms.
const SPINS: u32 = 1_000;

/// Post `ev`, retrying while the ring is full. A full ring hands the event
/// back (`PostError::Full`): that is backpressure, nothing is lost.
fn post(poster: &Poster<u64>, mut ev: u64) {
    while let Err(e) = poster.post(ev) {
        assert!(e.is_full(), "the EVD closed under a poster");
        ev = e.into_inner();
        std::thread::yield_now(); // let the consumer run
    }
}

/// Each event is `poster << 32 | sequence`; `next[p]` is the sequence number
/// expected next from poster `p`, so a lost, repeated or reordered event fails.
fn check(next: &mut [u64], ev: u64) {
    let (p, seq) = ((ev >> 32) as usize, ev & 0xffff_ffff);
    assert_eq!(seq, next[p], "exactly once, FIFO per poster");
    next[p] += 1;
}

fn main() {
    let (poster, mut consumer) = evd::bounded::<u64>(256).expect("valid capacity");
    let threads: Vec<_> = (0..POSTERS)
        .map(|p| {
            let poster = poster.clone(); // Poster is Clone + Send + Sync
            std::thread::spawn(move || (0..PER_POSTER).for_each(|seq| post(&poster, p << 32 | seq)))
        })
        .collect();
    drop(poster); // the last Poster to go closes the EVD: end of stream after the queued events

    let mut next = vec![0; POSTERS as usize];
    let (mut empty_polls, mut pending, mut sleeps) = (0u64, 0u64, 0u64);
    'run: loop {
        // Take what is ready now. `try_iter` ends at the first empty poll.
        // Its items are `Result<u64, Overflow>`: only `post_lossy` loses
        // events, and nobody uses it here, so every item is an event.
        for ev in consumer.try_iter() {
            check(&mut next, ev.expect("no lossy posts, so no loss report"));
        }
        // Spin a while with `try_dequeue` before thinking about sleeping.
        for _ in 0..SPINS {
            match consumer.try_dequeue() {
                Ok(ev) => {
                    check(&mut next, ev);
                    continue 'run;
                }
                Err(TryDequeueError::Empty) => empty_polls += 1,
                Err(TryDequeueError::Closed) => break 'run, // closed and drained
                Err(TryDequeueError::Overflow(o)) => panic!("unexpected loss report: {o}"),
            }
            std::hint::spin_loop();
        }
        // Arm-then-check in one CAS: `Armed` means the next post will wake
        // us, so sleeping cannot miss it; `Pending` means an event landed
        // after the last poll: poll again, no sleep and no second check.
        match consumer.arm() {
            ArmStatus::Armed => {
                sleeps += 1;
                match consumer.wait(1, None) {
                    Ok(_) | Err(WaitError::Closed { .. }) => {}
                    Err(e) => panic!("wait failed: {e}"),
                }
            }
            ArmStatus::Pending => pending += 1,
            ArmStatus::Closed => break,
        }
    }
    threads.into_iter().for_each(|t| t.join().unwrap());

    assert_eq!(next, [PER_POSTER; POSTERS as usize], "every event arrived");
    let total = POSTERS * PER_POSTER;
    println!("busy: {total} events from {POSTERS} posters, exactly once, FIFO per poster");
    println!(
        "busy: {empty_polls} empty polls; arms: {pending} found events pending, {sleeps} slept"
    );
}
