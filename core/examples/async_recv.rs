//! Async consumption on a tokio current-thread runtime: `recv().await` for
//! single events, then the consumer as a `Stream`. One poster is a plain
//! thread (its posts wake the runtime through the task's waker), the other a
//! task on the same runtime (it yields on a full ring so the consumer runs).
//!
//! Run: `cargo run --release -p evd --example async_recv`

use evd::RecvError;
use futures::StreamExt; // `next()` on any Stream; evd's Consumer is one

const PER_POSTER: u64 = 100_000;

/// Events are `poster << 32 | sequence`; `next[p]` is poster `p`'s next.
fn check(next: &mut [u64; 2], ev: u64) {
    let (p, seq) = ((ev >> 32) as usize, ev & 0xffff_ffff);
    assert_eq!(seq, next[p], "exactly once, FIFO per poster");
    next[p] += 1;
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (poster, mut consumer) = evd::bounded::<u64>(64).expect("valid capacity");

        // Poster 0: a thread. On a full ring it yields its CPU and retries.
        let p0 = poster.clone();
        let thread = std::thread::spawn(move || {
            for seq in 0..PER_POSTER {
                let mut ev = seq;
                while let Err(e) = p0.post(ev) {
                    assert!(e.is_full(), "the EVD closed under a poster");
                    ev = e.into_inner();
                    std::thread::yield_now();
                }
            }
        });
        // Poster 1: a task on this runtime's only thread. On a full ring it
        // must yield to the executor, or the consumer could never drain it.
        let task = tokio::spawn(async move {
            for seq in 0..PER_POSTER {
                let mut ev = 1 << 32 | seq;
                while let Err(e) = poster.post(ev) {
                    assert!(e.is_full(), "the EVD closed under a poster");
                    ev = e.into_inner();
                    tokio::task::yield_now().await;
                }
            }
            // `poster` is dropped here; with p0 gone too, the EVD closes.
        });

        let mut next = [0u64; 2];
        // `recv()` is a future for one event: it dequeues, or registers the
        // task's waker and arms (one CAS: arm-then-check), and sleeps until
        // the post that finds it armed wakes the task. Dropping it loses nothing.
        for _ in 0..1000 {
            let ev = consumer
                .recv()
                .await
                .expect("an event, not a loss or the end");
            check(&mut next, ev);
        }
        // The Stream yields `Result<u64, Overflow>` (a loss report is an
        // `Err` item; only `post_lossy` loses events) and ends with `None`
        // once the EVD is closed and drained.
        let mut streamed = 0u64;
        while let Some(ev) = consumer.next().await {
            check(&mut next, ev.expect("no lossy posts, so no loss report"));
            streamed += 1;
        }
        task.await.expect("posting task");
        thread.join().expect("poster thread");

        // After the end of stream, `recv()` reports it too.
        assert_eq!(consumer.recv().await, Err(RecvError::Closed));
        assert_eq!(next, [PER_POSTER; 2], "every event arrived");
        let wakes = consumer.query().notifications;
        println!("async_recv: 1000 events by recv().await, {streamed} by the Stream, then the end");
        println!(
            "async_recv: from a thread and a task, exactly once, FIFO per poster; {wakes} wakes"
        );
    });
}
