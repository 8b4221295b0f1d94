//! Backpressure and loss. `post` on a full ring hands the event back: the
//! poster decides, nothing is counted. `post_lossy` gives the event up
//! instead, counts it, and the consumer hears of it as an `Overflow { lost }`
//! report, coalesced, and always before the end of stream.
//!
//! Run: `cargo run --release -p evd --example lossy`

use evd::{Lossy, Overflow, PostError, TryDequeueError};

const EVENTS: u64 = 200_000;

fn main() {
    // Part 1, one thread, step by step.
    let (poster, mut consumer) = evd::bounded::<u64>(4).expect("valid capacity");
    for i in 0..4 {
        poster.post(i).expect("room for four");
    }
    // Full: `post` hands the event back. Not a loss; nothing is reported.
    assert_eq!(poster.post(4), Err(PostError::Full(4)));
    assert_eq!(poster.query().lost, 0);
    // `post_lossy` drops it, counts it, and owes the consumer a report.
    assert_eq!(poster.post_lossy(4), Ok(Lossy::Lost));
    assert_eq!(poster.post_lossy(5), Ok(Lossy::Lost));
    poster.close();
    // The report comes first (one report for both losses), then the queued
    // events, then the end of stream.
    let got: Vec<Result<u64, Overflow>> = consumer.try_iter().collect();
    assert_eq!(got, [Err(Overflow { lost: 2 }), Ok(0), Ok(1), Ok(2), Ok(3)]);
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    println!("lossy: post handed 4 back; post_lossy lost 4 and 5; the consumer got {got:?}");

    // Part 2: a poster that never waits floods a small ring; the consumer
    // blocks in the iterator (`for item in &mut consumer`).
    let (poster, mut consumer) = evd::bounded::<u64>(16).expect("valid capacity");
    let flood = std::thread::spawn(move || {
        let mut lost = 0;
        for i in 0..EVENTS {
            if poster.post_lossy(i).expect("open until we drop it") == Lossy::Lost {
                lost += 1;
            }
            if i % 64 == 0 {
                std::thread::yield_now(); // pacing only: let the consumer in now and then
            }
        }
        lost // dropping `poster` here closes the EVD
    });
    let (mut delivered, mut reported, mut reports) = (0u64, 0u64, 0u64);
    let mut last = None;
    for item in &mut consumer {
        match item {
            Ok(i) => {
                assert!(last < Some(i), "in order, exactly once (gaps are losses)");
                last = Some(i);
                delivered += 1;
            }
            Err(Overflow { lost }) => {
                reported += lost;
                reports += 1;
            }
        }
    }
    let lost = flood.join().expect("flooding thread");
    // The iterator ended at the end of stream, and by then every loss had
    // been reported: nothing went missing unannounced.
    assert_eq!(reported, lost);
    assert_eq!(delivered + reported, EVENTS);
    assert_eq!(consumer.query().lost, lost);
    println!("lossy: flood of {EVENTS}: {delivered} delivered in order, {lost} lost");
    println!("lossy: the {lost} losses came in {reports} reports, all before the end of stream");
}
