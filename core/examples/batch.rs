//! Batch consumption: posters hand over whole vectors with `post_batch`; the
//! consumer takes up to 64 events per `dequeue_batch` call and blocks in
//! `wait` when nothing is ready.
//!
//! Run: `cargo run --release -p evd --example batch`

use evd::{BatchPostError, Poster, TryDequeueError, WaitError};
use std::time::Duration;

const POSTERS: u64 = 2;
const PER_POSTER: u64 = 200_000;
const CHUNK: u64 = 32;

/// Post every event of `batch`, in order. `post_batch` posts as many as the
/// ring has room for (one reservation, one notification for all of them)
/// and leaves the rest in the vector; `Full` means not one slot was free.
fn post_all(poster: &Poster<u64>, mut batch: Vec<u64>) {
    while !batch.is_empty() {
        match poster.post_batch(&mut batch) {
            Ok(_posted) => {} // drained from the front of `batch`
            Err(BatchPostError::Full) => std::thread::yield_now(), // backpressure, not a loss
            Err(BatchPostError::Closed) => panic!("the EVD closed under a poster"),
        }
    }
}

fn main() {
    let (poster, mut consumer) = evd::bounded::<u64>(256).expect("valid capacity");
    let threads: Vec<_> = (0..POSTERS)
        .map(|p| {
            let poster = poster.clone();
            std::thread::spawn(move || {
                for start in (0..PER_POSTER).step_by(CHUNK as usize) {
                    let end = (start + CHUNK).min(PER_POSTER);
                    // Each event is `poster << 32 | sequence`.
                    post_all(&poster, (start..end).map(|seq| p << 32 | seq).collect());
                }
            })
        })
        .collect();
    drop(poster); // the last Poster to go closes the EVD

    let mut next = [0u64; POSTERS as usize]; // next sequence number expected per poster
    let mut buf = Vec::with_capacity(64); // reused: dequeue_batch appends to it
    let (mut batches, mut largest) = (0u64, 0usize);
    loop {
        match consumer.dequeue_batch(&mut buf, 64) {
            Ok(0) => {
                // Nothing ready: block until at least 16 events are, or 1 ms
                // passes (the timeout only bounds how long a short batch may
                // wait; correctness never depends on it). `wait` dequeues
                // nothing; it arms with one CAS that fails if anything was
                // posted since our empty `dequeue_batch`, so no post is missed.
                match consumer.wait(16, Some(Duration::from_millis(1))) {
                    Ok(_) | Err(WaitError::Timeout { .. } | WaitError::Closed { .. }) => {}
                    Err(e) => panic!("wait failed: {e}"),
                }
            }
            Ok(n) => {
                batches += 1;
                largest = largest.max(n);
                for ev in buf.drain(..) {
                    let (p, seq) = ((ev >> 32) as usize, ev & 0xffff_ffff);
                    assert_eq!(seq, next[p], "exactly once, FIFO per poster");
                    next[p] += 1;
                }
            }
            Err(TryDequeueError::Closed) => break, // closed and drained: end of stream
            Err(e) => panic!("unexpected: {e}"),   // a loss report needs post_lossy
        }
    }
    threads.into_iter().for_each(|t| t.join().unwrap());

    let total = POSTERS * PER_POSTER;
    assert_eq!(next, [PER_POSTER; POSTERS as usize], "every event arrived");
    println!("batch: {total} events from {POSTERS} posters, exactly once, FIFO per poster");
    println!(
        "batch: {batches} batches, {:.1} events per batch on average, largest {largest}",
        total as f64 / batches as f64
    );
}
