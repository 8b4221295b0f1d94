//! The convenience API: accessors, blocking dequeue, iterators, fused
//! futures and streams. One test per promise, named after it.

use evd::{DequeueError, Lossy, Overflow, PostError, TryDequeueError, WaitError};
use std::future::Future;
use std::time::{Duration, Instant};

#[test]
fn accessors_agree_on_poster_and_consumer() {
    let (poster, mut consumer) = evd::bounded::<u32>(3).unwrap();
    for (len, cap) in [
        (poster.len(), poster.capacity()),
        (consumer.len(), consumer.capacity()),
    ] {
        assert_eq!((len, cap), (0, 4));
    }
    assert!(poster.is_empty() && consumer.is_empty());
    assert!(!poster.is_full() && !consumer.is_full());
    for i in 0..4 {
        poster.post(i).unwrap();
    }
    assert_eq!((poster.len(), consumer.len()), (4, 4));
    assert!(poster.is_full() && consumer.is_full());
    assert!(!poster.is_empty() && !consumer.is_empty());
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!((poster.len(), consumer.len()), (3, 3));
    assert!(!poster.is_full() && !consumer.is_full());
}

#[test]
fn accessors_match_query() {
    let (poster, mut consumer) = evd::bounded::<u32>(8).unwrap();
    for i in 0..5 {
        poster.post(i).unwrap();
    }
    consumer.try_dequeue().unwrap();
    let q = consumer.query();
    assert_eq!((consumer.len(), consumer.capacity()), (q.len, q.capacity));
    assert_eq!((poster.len(), poster.capacity()), (q.len, q.capacity));
    assert_eq!(consumer.is_closed(), q.closed);
}

#[test]
fn capacity_follows_resize_on_both_handles() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    consumer.resize(32).unwrap();
    assert_eq!((poster.capacity(), consumer.capacity()), (32, 32));
}

#[test]
fn is_closed_seen_by_both_handles_and_events_still_drain() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(7).unwrap();
    assert!(!poster.is_closed() && !consumer.is_closed());
    poster.close();
    assert!(poster.is_closed() && consumer.is_closed());
    assert_eq!(consumer.len(), 1);
    assert_eq!(consumer.try_dequeue(), Ok(7));
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    assert!(consumer.is_empty());
}

#[test]
fn post_error_is_full_and_is_closed() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    let full = poster.post(2).unwrap_err();
    assert!(full.is_full() && !full.is_closed());
    assert_eq!(full.into_inner(), 2);
    consumer.close();
    let closed = poster.post(3).unwrap_err();
    assert!(closed.is_closed() && !closed.is_full());
    assert_eq!(closed, PostError::Closed(3));
}

#[test]
fn dequeue_blocks_until_a_post_from_another_thread() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || {
        poster.post(5).unwrap();
        poster // keep it alive until joined
    });
    assert_eq!(consumer.dequeue(), Ok(5));
    drop(t.join().unwrap());
    assert_eq!(consumer.dequeue(), Err(DequeueError::Closed));
}

#[test]
fn dequeue_takes_what_is_left_after_close_then_reports_closed() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    drop(poster);
    assert_eq!(consumer.dequeue(), Ok(1));
    assert_eq!(consumer.dequeue(), Ok(2));
    assert_eq!(consumer.dequeue(), Err(DequeueError::Closed));
    assert_eq!(
        consumer.dequeue_timeout(Duration::ZERO),
        Err(DequeueError::Closed)
    );
}

#[test]
fn dequeue_reports_a_loss_once_before_the_events() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    assert_eq!(poster.post_lossy(1), Ok(Lossy::Posted));
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    assert_eq!(
        consumer.dequeue(),
        Err(DequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(consumer.dequeue(), Ok(1));
    drop(poster);
    assert_eq!(consumer.dequeue(), Err(DequeueError::Closed));
}

#[test]
fn dequeue_reports_a_loss_on_an_empty_ring_instead_of_blocking() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    assert_eq!(
        consumer.dequeue(),
        Err(DequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
    // After a report the event comes first; then the ring is empty with a
    // loss pending: the dequeue reports it rather than block.
    assert_eq!(consumer.dequeue(), Ok(1));
    assert!(consumer.is_empty());
    assert_eq!(
        consumer.dequeue(),
        Err(DequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(
        consumer.dequeue_timeout(Duration::ZERO),
        Err(DequeueError::Timeout)
    );
}

#[test]
fn dequeue_unwaitable_returns_unwaitable_but_ready_events_come_first() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    poster.set_unwaitable();
    assert_eq!(consumer.dequeue(), Ok(1));
    assert_eq!(consumer.dequeue(), Err(DequeueError::Unwaitable));
    poster.clear_unwaitable();
    poster.post(2).unwrap();
    assert_eq!(consumer.dequeue(), Ok(2));
}

#[test]
fn dequeue_unwaitable_wakes_a_blocked_dequeue() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || {
        poster.set_unwaitable();
        poster
    });
    assert_eq!(consumer.dequeue(), Err(DequeueError::Unwaitable));
    drop(t.join().unwrap());
}

#[test]
fn dequeue_timeout_zero_with_nothing_queued_returns_timeout_at_once() {
    let (_poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    assert_eq!(
        consumer.dequeue_timeout(Duration::ZERO),
        Err(DequeueError::Timeout)
    );
    assert!(
        !consumer.query().armed,
        "a timed-out dequeue leaves the EVD disarmed"
    );
}

#[test]
fn dequeue_timeout_zero_with_an_event_returns_it() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(9).unwrap();
    assert_eq!(consumer.dequeue_timeout(Duration::ZERO), Ok(9));
}

#[test]
fn dequeue_deadline_in_the_past_returns_timeout_or_the_event() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let past = Instant::now();
    assert_eq!(consumer.dequeue_deadline(past), Err(DequeueError::Timeout));
    poster.post(3).unwrap();
    assert_eq!(consumer.dequeue_deadline(past), Ok(3));
}

#[test]
fn dequeue_timeout_gets_an_event_posted_before_it_expires() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || {
        poster.post(11).unwrap();
        poster
    });
    assert_eq!(consumer.dequeue_timeout(Duration::from_secs(30)), Ok(11));
    drop(t.join().unwrap());
}

#[test]
fn dequeue_many_from_racing_posters_loses_nothing() {
    const PER: u32 = 20_000;
    let (poster, mut consumer) = evd::bounded::<u32>(64).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|id| {
            let p = poster.clone();
            std::thread::spawn(move || {
                for i in 0..PER {
                    let mut v = id * PER + i;
                    while let Err(e) = p.post(v) {
                        v = e.into_inner();
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    drop(poster);
    let mut seen = vec![false; 2 * PER as usize];
    let mut n = 0;
    loop {
        match consumer.dequeue() {
            Ok(v) => {
                assert!(!seen[v as usize]);
                seen[v as usize] = true;
                n += 1;
            }
            Err(DequeueError::Closed) => break,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(n, 2 * PER);
}

#[test]
fn dequeue_error_display_and_traits() {
    let e: Box<dyn std::error::Error> = Box::new(DequeueError::Timeout);
    assert!(!e.to_string().is_empty());
    let all = [
        DequeueError::Overflow(Overflow { lost: 2 }),
        DequeueError::Timeout,
        DequeueError::Unwaitable,
        DequeueError::Closed,
    ];
    for e in all {
        let copy = e;
        assert_eq!(copy, e);
        assert!(!format!("{e} {e:?}").is_empty());
    }
    assert!(DequeueError::Overflow(Overflow { lost: 2 })
        .to_string()
        .contains('2'));
}

#[test]
fn wait_zero_timeout_with_nothing_queued_returns_timeout_zero_at_once() {
    let (_poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.set_spin_budget(u32::MAX); // a spin phase would never end
    assert_eq!(
        consumer.wait(1, Some(Duration::ZERO)),
        Err(WaitError::Timeout { available: 0 })
    );
    assert!(!consumer.query().armed);
}

#[test]
fn wait_zero_timeout_with_threshold_met_returns_ok_at_once() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.set_spin_budget(u32::MAX);
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    assert_eq!(consumer.wait(2, Some(Duration::ZERO)), Ok(2));
    assert_eq!(
        consumer.wait(3, Some(Duration::ZERO)),
        Err(WaitError::Timeout { available: 2 })
    );
}

#[test]
fn wait_deadline_in_the_past_skips_the_spin_phase() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.set_spin_budget(u32::MAX);
    let past = Instant::now();
    assert_eq!(
        consumer.wait_deadline(1, past),
        Err(WaitError::Timeout { available: 0 })
    );
    poster.post(1).unwrap();
    assert_eq!(consumer.wait_deadline(1, past), Ok(1));
}

#[test]
fn wait_deadline_wakes_on_a_post() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || {
        poster.post(1).unwrap();
        poster
    });
    let far = Instant::now() + Duration::from_secs(30);
    assert_eq!(consumer.wait_deadline(1, far), Ok(1));
    drop(t.join().unwrap());
}

#[test]
fn wait_huge_timeout_does_not_panic() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    assert_eq!(consumer.wait(1, Some(Duration::MAX)), Ok(1));
    assert_eq!(consumer.dequeue_timeout(Duration::MAX), Ok(1));
}

#[test]
fn try_iter_yields_ready_events_then_ends_when_empty() {
    let (poster, mut consumer) = evd::bounded::<u32>(8).unwrap();
    for i in 0..3 {
        poster.post(i).unwrap();
    }
    let got: Vec<_> = consumer.try_iter().collect();
    assert_eq!(got, [Ok(0), Ok(1), Ok(2)]);
    assert_eq!(consumer.try_iter().next(), None);
    poster.post(3).unwrap();
    assert_eq!(consumer.try_iter().next(), Some(Ok(3)));
}

#[test]
fn try_iter_yields_loss_reports_as_items() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
    let got: Vec<_> = consumer.try_iter().collect();
    assert_eq!(got, [Err(Overflow { lost: 2 }), Ok(1)]);
}

#[test]
fn try_iter_ends_at_close_and_drained() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    drop(poster);
    let got: Vec<_> = consumer.try_iter().collect();
    assert_eq!(got, [Ok(1)]);
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
}

#[test]
fn iter_blocks_and_ends_at_end_of_stream_with_every_event_in_order() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || {
        for i in 0..1000 {
            let mut v = i;
            while let Err(e) = poster.post(v) {
                v = e.into_inner();
                std::thread::yield_now();
            }
        }
    });
    let got: Vec<u32> = consumer.iter().map(Result::unwrap).collect();
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
    t.join().unwrap();
}

#[test]
fn iter_yields_loss_reports_as_items_before_the_end() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    drop(poster);
    let got: Vec<_> = consumer.iter().collect();
    assert_eq!(got, [Err(Overflow { lost: 1 }), Ok(1)]);
}

#[test]
fn iter_ends_when_unwaitable_and_a_new_one_goes_on() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    poster.set_unwaitable();
    let got: Vec<_> = consumer.iter().collect();
    assert_eq!(got, [Ok(1)]);
    poster.clear_unwaitable();
    poster.post(2).unwrap();
    drop(poster);
    let got: Vec<_> = consumer.iter().collect();
    assert_eq!(got, [Ok(2)]);
}

#[test]
fn into_iter_owning_consumes_to_end_of_stream() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || {
        for i in 0..100 {
            let mut v = i;
            while let Err(e) = poster.post(v) {
                v = e.into_inner();
                std::thread::yield_now();
            }
        }
    });
    let mut n = 0;
    for ev in consumer {
        assert_eq!(ev, Ok(n));
        n += 1;
    }
    assert_eq!(n, 100);
    t.join().unwrap();
}

#[test]
fn into_iter_by_mut_ref_leaves_the_consumer_usable() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    poster.set_unwaitable();
    let mut seen = Vec::new();
    for ev in &mut consumer {
        seen.push(ev);
    }
    assert_eq!(seen, [Ok(1)]);
    poster.clear_unwaitable();
    poster.post(2).unwrap();
    assert_eq!(consumer.dequeue(), Ok(2));
}

#[test]
fn into_iter_into_inner_returns_the_consumer() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    let mut it = consumer.into_iter();
    assert_eq!(it.next(), Some(Ok(1)));
    let mut consumer = it.into_inner();
    poster.post(2).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(2));
}

#[test]
fn fused_stream_is_terminated_after_none_and_stays_none() {
    use futures::StreamExt;
    use futures_core::stream::FusedStream;
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    assert!(!consumer.is_terminated());
    assert_eq!(futures::executor::block_on(consumer.next()), Some(Ok(1)));
    assert!(!consumer.is_terminated());
    drop(poster);
    assert_eq!(futures::executor::block_on(consumer.next()), None);
    assert!(consumer.is_terminated());
    assert_eq!(futures::executor::block_on(consumer.next()), None);
    assert!(consumer.is_terminated());
}

#[test]
fn fused_stream_is_not_terminated_by_a_loss_report() {
    use futures::StreamExt;
    use futures_core::stream::FusedStream;
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    assert_eq!(
        futures::executor::block_on(consumer.next()),
        Some(Err(Overflow { lost: 1 }))
    );
    assert!(!consumer.is_terminated());
}

#[test]
fn fused_future_recv_is_terminated_after_ready() {
    use futures_core::future::FusedFuture;
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let mut recv = consumer.recv();
    assert!(!recv.is_terminated());
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(std::pin::Pin::new(&mut recv).poll(&mut cx).is_pending());
    assert!(!recv.is_terminated(), "pending is not terminated");
    poster.post(4).unwrap();
    assert_eq!(
        std::pin::Pin::new(&mut recv).poll(&mut cx),
        std::task::Poll::Ready(Ok(4))
    );
    assert!(recv.is_terminated());
}

#[test]
fn fused_future_recv_is_terminated_after_closed() {
    use futures_core::future::FusedFuture;
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    drop(poster);
    let mut recv = consumer.recv();
    assert_eq!(
        futures::executor::block_on(&mut recv),
        Err(evd::RecvError::Closed)
    );
    assert!(recv.is_terminated());
}
