//! `Consumer::recv_batch`: the async batch receive, its order and `max`, its
//! reports (as `recv` gives them), its wake, and a threaded poster under
//! `block_on` and under tokio.

use crate::common::{counting, poll_once};
use evd::{Lossy, Overflow, RecvError};
use futures::executor::block_on;
use std::pin::pin;
use std::task::Poll;

#[test]
fn recv_batch_gets_events_in_order_and_respects_max() {
    let (poster, mut consumer) = evd::bounded::<u32>(8).unwrap();
    for i in 0..7 {
        poster.post(i).unwrap();
    }
    let mut buf = vec![100];
    assert_eq!(block_on(consumer.recv_batch(&mut buf, 3)), Ok(3));
    assert_eq!(buf, [100, 0, 1, 2], "appended");
    assert_eq!(block_on(consumer.recv_batch(&mut buf, 3)), Ok(3));
    assert_eq!(block_on(consumer.recv_batch(&mut buf, 3)), Ok(1));
    assert_eq!(buf, [100, 0, 1, 2, 3, 4, 5, 6]);
}

#[test]
fn recv_batch_with_max_zero_resolves_at_once_and_reports_nothing() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    let mut buf = Vec::new();
    assert_eq!(
        block_on(consumer.recv_batch(&mut buf, 0)),
        Ok(0),
        "open, empty"
    );
    poster.post(1).unwrap();
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    drop(poster);
    assert_eq!(
        block_on(consumer.recv_batch(&mut buf, 0)),
        Ok(0),
        "a report waits"
    );
    assert_eq!(
        block_on(consumer.recv_batch(&mut buf, 4)),
        Err(RecvError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(block_on(consumer.recv_batch(&mut buf, 0)), Ok(0));
    assert_eq!(block_on(consumer.recv_batch(&mut buf, 4)), Ok(1));
    assert_eq!(
        block_on(consumer.recv_batch(&mut buf, 0)),
        Ok(0),
        "end of stream waits"
    );
    assert_eq!(buf, [1]);
}

#[test]
fn recv_batch_reports_overflow_then_events_then_closed() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
    assert_eq!(poster.post_lossy(4), Ok(Lossy::Lost));
    poster.close();
    let mut buf = Vec::new();
    assert_eq!(
        block_on(consumer.recv_batch(&mut buf, 8)),
        Err(RecvError::Overflow(Overflow { lost: 2 }))
    );
    assert_eq!(block_on(consumer.recv_batch(&mut buf, 8)), Ok(2));
    assert_eq!(buf, [1, 2]);
    assert_eq!(
        block_on(consumer.recv_batch(&mut buf, 8)),
        Err(RecvError::Closed)
    );
}

#[test]
fn recv_batch_reports_as_recv_does() {
    // The same ring, the same losses: recv and recv_batch report alike.
    let run = |batch: bool| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        poster.post(1).unwrap();
        poster.post(2).unwrap();
        assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
        drop(poster);
        let mut seen = Vec::new();
        loop {
            let r = if batch {
                let mut buf = Vec::new();
                block_on(consumer.recv_batch(&mut buf, 1)).map(|_| buf[0])
            } else {
                block_on(consumer.recv())
            };
            let end = r == Err(RecvError::Closed);
            seen.push(r);
            if end {
                return seen;
            }
        }
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn recv_batch_is_pending_on_an_empty_ring_and_woken_by_a_post() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let (counting, waker) = counting();
    let mut buf = Vec::new();
    {
        let mut batch = pin!(consumer.recv_batch(&mut buf, 4));
        assert_eq!(poll_once(batch.as_mut(), &waker), Poll::Pending);
        poster.post(7).unwrap();
        assert_eq!(counting.wakes(), 1);
        assert_eq!(poll_once(batch.as_mut(), &waker), Poll::Ready(Ok(1)));
    }
    assert_eq!(buf, [7]);
}

const THREADED_EVENTS: u32 = 20_000;

/// A ring of 64 and a thread that posts `0..THREADED_EVENTS` to it with
/// `post_async`, then drops its poster.
fn threaded_poster() -> (evd::Consumer<u32>, std::thread::JoinHandle<()>) {
    let (poster, consumer) = evd::bounded::<u32>(64).unwrap();
    let producer = std::thread::spawn(move || {
        for i in 0..THREADED_EVENTS {
            block_on(poster.post_async(i)).unwrap();
        }
    });
    (consumer, producer)
}

#[test]
fn recv_batch_with_a_threaded_poster_under_block_on() {
    let (mut consumer, producer) = threaded_poster();
    let mut all = Vec::new();
    let mut buf = Vec::with_capacity(16);
    loop {
        match block_on(consumer.recv_batch(&mut buf, 16)) {
            Ok(n) => {
                assert!((1..=16).contains(&n));
                all.append(&mut buf);
            }
            Err(RecvError::Closed) => break,
            Err(e) => panic!("nothing is lost: {e:?}"),
        }
    }
    producer.join().unwrap();
    assert_eq!(all, (0..THREADED_EVENTS).collect::<Vec<_>>());
}

#[test]
fn recv_batch_with_a_threaded_poster_under_tokio() {
    let (mut consumer, producer) = threaded_poster();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let all = rt.block_on(async {
        let mut all = Vec::new();
        let mut buf = Vec::with_capacity(16);
        loop {
            match consumer.recv_batch(&mut buf, 16).await {
                Ok(n) => {
                    assert!((1..=16).contains(&n));
                    all.append(&mut buf);
                }
                Err(RecvError::Closed) => return all,
                Err(e) => panic!("nothing is lost: {e:?}"),
            }
        }
    });
    producer.join().unwrap();
    assert_eq!(all, (0..THREADED_EVENTS).collect::<Vec<_>>());
}
