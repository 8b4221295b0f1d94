//! Upcalls: no consumer thread at all. The consumer is handed to an upcall
//! dispatcher, and a post that finds no upcall running runs the handler on
//! its own thread until the ring is empty. Under `SingleInstance` at most one
//! handler call runs at any moment, whichever thread it is on.
//!
//! Run: `cargo run --release -p evd --example upcalls`

use evd::{Invoke, Overflow, TryDequeueError, UpcallPolicy};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const POSTERS: usize = 3;
const PER_POSTER: u64 = 100_000;

/// What the handler checks and counts. It runs on the posting threads, so
/// it is shared (`Arc`) and `Sync`.
#[derive(Default)]
struct Seen {
    next: Mutex<[u64; POSTERS]>, // next sequence number expected per poster
    running: AtomicBool,         // a handler call is under way
    with_more: AtomicU64,        // calls told another event was ready behind theirs
}

fn main() {
    let (poster, consumer) = evd::bounded::<u64>(256).expect("valid capacity");
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    // The handler gets each event (or a loss report, `Err(Overflow)`: only
    // `post_lossy` loses events) and whether more events are ready behind
    // it. `Invoke::Any`: events already queued would start an upcall at once
    // (`Invoke::New` would leave them for the next post).
    let upcalls = consumer.into_upcalls(
        UpcallPolicy::SingleInstance,
        Invoke::Any,
        move |ev: Result<u64, Overflow>, more: bool| {
            assert!(
                !s.running.swap(true, Ordering::AcqRel),
                "two upcalls at once"
            );
            let ev = ev.expect("no lossy posts, so no loss report");
            let (p, seq) = ((ev >> 32) as usize, ev & 0xffff_ffff);
            let mut next = s.next.lock().expect("not poisoned");
            assert_eq!(seq, next[p], "exactly once, FIFO per poster");
            next[p] += 1;
            s.with_more.fetch_add(u64::from(more), Ordering::Relaxed);
            s.running.store(false, Ordering::Release);
        },
    );

    let threads: Vec<_> = (0..POSTERS as u64)
        .map(|p| {
            let poster = poster.clone();
            std::thread::spawn(move || {
                for seq in 0..PER_POSTER {
                    // `poster << 32 | sequence`. A post that starts an upcall
                    // runs the handler here, for its own event and any posted
                    // meanwhile by any thread, and returns once the ring is empty.
                    let mut ev = p << 32 | seq;
                    while let Err(e) = poster.post(ev) {
                        assert!(e.is_full(), "the EVD closed under a poster");
                        ev = e.into_inner(); // another thread's upcall is draining: retry
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    drop(poster);
    // Every handler call ran inside one of these threads' posts, so once
    // they are joined every event has been handled.
    threads.into_iter().for_each(|t| t.join().unwrap());

    // Teardown: disable upcalls, wait until none runs, drop the handler, and
    // get the consumer back. The posters are gone, so the EVD is closed and,
    // every event having been handled, drained.
    let q = upcalls.query();
    let mut consumer = upcalls.teardown();
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));

    let total = POSTERS as u64 * PER_POSTER;
    assert_eq!(*seen.next.lock().unwrap(), [PER_POSTER; POSTERS]); // every event arrived
    assert_eq!(q.upcalls, total, "one handler call per event");
    println!(
        "upcalls: {total} events from {POSTERS} threads, handled exactly once, FIFO per poster"
    );
    let more = seen.with_more.load(Ordering::Relaxed);
    println!(
        "upcalls: {} upcalls started; {more} handler calls had more behind them",
        q.notifications
    );
}
