//! The async waits: `Poster::closed` and `Consumer::recv_batch`.

use evd::{Lossy, Overflow, RecvError};
use futures::executor::block_on;
use futures::task::noop_waker;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// A waker that counts its wakes.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Counting {
    fn wakes(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A waker whose wake panics.
struct Panicking;

impl Wake for Panicking {
    fn wake(self: Arc<Self>) {
        panic!("a waker that panics");
    }
}

fn poll_once<F: Future>(f: std::pin::Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(waker))
}

#[test]
fn closed_resolves_when_the_consumer_closes() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || block_on(poster.closed()));
    consumer.close();
    t.join().unwrap();
}

#[test]
fn closed_resolves_when_the_consumer_is_dropped() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || block_on(poster.closed()));
    drop(consumer);
    t.join().unwrap();
}

#[test]
fn closed_resolves_at_once_on_a_closed_evd() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.close();
    let mut closed = pin!(poster.closed());
    assert_eq!(poll_once(closed.as_mut(), &noop_waker()), Poll::Ready(()));
}

#[test]
fn closed_is_pending_while_the_evd_is_open_and_woken_by_close() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let counting = Arc::new(Counting::default());
    let waker = Waker::from(counting.clone());
    let mut closed = pin!(poster.closed());
    assert_eq!(poll_once(closed.as_mut(), &waker), Poll::Pending);
    poster.post(1).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(poll_once(closed.as_mut(), &waker), Poll::Pending);
    assert_eq!(
        counting.wakes(),
        0,
        "posts and dequeues wake no close waiter"
    );
    consumer.close();
    assert_eq!(counting.wakes(), 1);
    assert_eq!(poll_once(closed.as_mut(), &waker), Poll::Ready(()));
}

#[test]
fn every_closed_future_resolves() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let p = poster.clone();
            let ready = ready_tx.clone();
            std::thread::spawn(move || {
                let mut closed = pin!(p.closed());
                // Registered before the close, or the close came first.
                let first = poll_once(closed.as_mut(), &noop_waker());
                ready.send(()).unwrap();
                if first.is_pending() {
                    block_on(closed);
                }
            })
        })
        .collect();
    for _ in 0..8 {
        ready_rx.recv().unwrap();
    }
    drop(consumer);
    for w in waiters {
        w.join().unwrap();
    }
}

#[test]
fn a_dropped_closed_future_leaves_no_waker_registered() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let counting = Arc::new(Counting::default());
    let waker = Waker::from(counting.clone());
    {
        let mut closed = pin!(poster.closed());
        assert_eq!(poll_once(closed.as_mut(), &waker), Poll::Pending);
        assert_eq!(Arc::strong_count(&counting), 3, "the waiter holds a clone");
    }
    assert_eq!(Arc::strong_count(&counting), 2, "dropped with the future");
    consumer.close();
    assert_eq!(counting.wakes(), 0, "nothing was left to wake");
}

#[test]
fn a_repolled_closed_future_keeps_one_waker() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let first = Arc::new(Counting::default());
    let second = Arc::new(Counting::default());
    let mut closed = pin!(poster.closed());
    assert_eq!(
        poll_once(closed.as_mut(), &Waker::from(first.clone())),
        Poll::Pending
    );
    assert_eq!(
        poll_once(closed.as_mut(), &Waker::from(second.clone())),
        Poll::Pending
    );
    assert_eq!(Arc::strong_count(&first), 1, "the first waker was replaced");
    consumer.close();
    assert_eq!((first.wakes(), second.wakes()), (0, 1));
}

#[test]
fn a_panicking_close_waiter_does_not_stop_close_waking_the_others_and_the_consumer() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let closer = poster.clone();
    let other = Arc::new(Counting::default());
    let consumer_woken = Arc::new(Counting::default());
    let mut panicking = pin!(poster.closed());
    let mut counted = pin!(poster.closed());
    assert!(poll_once(panicking.as_mut(), &Waker::from(Arc::new(Panicking))).is_pending());
    assert!(poll_once(counted.as_mut(), &Waker::from(other.clone())).is_pending());
    let mut recv = pin!(consumer.recv());
    assert!(poll_once(recv.as_mut(), &Waker::from(consumer_woken.clone())).is_pending());
    closer.close(); // does not panic
    assert_eq!(other.wakes(), 1);
    assert_eq!(consumer_woken.wakes(), 1);
    assert_eq!(
        poll_once(recv.as_mut(), &noop_waker()),
        Poll::Ready(Err(RecvError::Closed))
    );
    assert_eq!(poll_once(counted.as_mut(), &noop_waker()), Poll::Ready(()));
    assert_eq!(
        poll_once(panicking.as_mut(), &noop_waker()),
        Poll::Ready(())
    );
}

#[test]
fn closed_futures_are_send_and_unpin() {
    fn send_unpin<F: Send + Unpin>(_: &F) {}
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    send_unpin(&poster.closed());
    let mut buf = Vec::new();
    send_unpin(&consumer.recv_batch(&mut buf, 4));
}

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
    let counting = Arc::new(Counting::default());
    let waker = Waker::from(counting.clone());
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

#[test]
fn recv_batch_with_a_threaded_poster_under_block_on() {
    let (poster, mut consumer) = evd::bounded::<u32>(64).unwrap();
    let producer = std::thread::spawn(move || {
        for i in 0..THREADED_EVENTS {
            block_on(poster.post_async(i)).unwrap();
        }
    });
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
    let (poster, mut consumer) = evd::bounded::<u32>(64).unwrap();
    let producer = std::thread::spawn(move || {
        for i in 0..THREADED_EVENTS {
            block_on(poster.post_async(i)).unwrap();
        }
    });
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

#[test]
fn a_tokio_producer_stops_when_the_consumer_goes_away() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let t = std::thread::spawn(move || consumer.dequeue().map(|_| consumer));
    rt.block_on(async {
        poster.post(1).unwrap();
        let consumer = t.join().unwrap().unwrap();
        drop(consumer);
        poster.closed().await;
    });
}
