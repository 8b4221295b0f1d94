//! Posters that wait for room: a slow consumer behind a small ring.
//!
//! A full ring hands a plain `post` its event back (`PostError::Full`):
//! backpressure, never a loss. Posters that would rather wait use
//! `post_blocking` (or `post_timeout` / `post_deadline`), `post_async().await`,
//! or the `Sink` from `into_sink()`: they sleep in a FIFO room queue and the
//! consumer's dequeue that frees a slot wakes one of them. Nothing is lost,
//! nothing is counted as an overflow, and no poster spins.
//!
//! Run: `cargo run --release -p evd --example room`

use futures::{SinkExt, executor::block_on};
use std::time::Duration;

const BLOCKING_POSTERS: u64 = 3;
const EACH: u64 = 2_000;

fn main() {
    // 8 slots for 4 posters: they spend most of their time waiting for room.
    let (poster, mut consumer) = evd::bounded::<u64>(8).unwrap();

    // Three threads post with `post_blocking`: each call returns once its
    // event is queued (or hands it back if the EVD closes).
    let mut threads: Vec<_> = (0..BLOCKING_POSTERS)
        .map(|id| {
            let p = poster.clone();
            std::thread::spawn(move || {
                for seq in 0..EACH {
                    p.post_blocking(id << 32 | seq)
                        .expect("the consumer is alive");
                }
            })
        })
        .collect();

    // One async task posts through the Sink: `send` waits for room without
    // blocking its executor thread, and `close` drops its poster handle.
    let mut sink = poster.clone().into_sink();
    threads.push(std::thread::spawn(move || {
        block_on(async {
            for seq in 0..EACH {
                sink.send(BLOCKING_POSTERS << 32 | seq).await.unwrap();
            }
            sink.close().await.unwrap();
        })
    }));

    // `post_timeout` gives up with the event handed back if no room comes in
    // time: here the ring is full of the others' events, so it may well be
    // refused; either outcome is fine, and neither loses anything.
    let spare = poster.clone();
    threads.push(std::thread::spawn(move || {
        match spare.post_timeout(u64::MAX, Duration::from_micros(50)) {
            Ok(()) => println!("the timed post found room"),
            Err(e) => println!("the timed post gave up and got {:#x} back", e.into_inner()),
        }
    }));
    drop(poster); // the consumer sees end of stream once every poster is gone

    // A deliberately slow consumer: a little work per event.
    let mut next = vec![0u64; BLOCKING_POSTERS as usize + 1];
    let mut extra = 0;
    for ev in consumer.iter() {
        let v = ev.expect("waiting posters never cause an overflow report");
        if v == u64::MAX {
            extra += 1;
            continue;
        }
        let (id, seq) = ((v >> 32) as usize, v & 0xffff_ffff);
        assert_eq!(seq, next[id], "FIFO per poster, nothing lost or doubled");
        next[id] += 1;
        for i in 0..200 {
            std::hint::black_box(i);
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert!(next.iter().all(|&n| n == EACH));
    let q = consumer.query();
    assert_eq!(q.lost, 0);
    println!(
        "{} events from {} posters through {} slots; {} room wakes, {} lost",
        q.dequeued - extra,
        BLOCKING_POSTERS + 1,
        q.capacity,
        q.room_wakes,
        q.lost
    );
}
