//! The convenience API: accessors, blocking dequeue, iterators, fused
//! futures and streams, `FnMut` upcall handlers. One test per promise, named
//! after it.

use evd::{
    DequeueError, Invoke, Lossy, Overflow, PolicyError, PostError, TryDequeueError, UpcallPolicy,
    WaitError,
};
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
    consumer.set_spin_budget(Duration::MAX); // a back-off that would never end
    assert_eq!(
        consumer.wait(1, Some(Duration::ZERO)),
        Err(WaitError::Timeout { available: 0 })
    );
    assert!(!consumer.query().armed);
}

#[test]
fn wait_zero_timeout_with_threshold_met_returns_ok_at_once() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.set_spin_budget(Duration::MAX);
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
    consumer.set_spin_budget(Duration::MAX);
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

/// What an `FnMut` handler kept in plain (non-atomic) state, sent out when
/// the handler is dropped (by a teardown or a replacement).
struct Tally {
    /// Every event, in the order the handler saw it.
    seen: Vec<u32>,
    /// Handler calls that had `more` set.
    with_more: usize,
    out: std::sync::mpsc::Sender<(Vec<u32>, usize)>,
}

impl Drop for Tally {
    fn drop(&mut self) {
        let _ = self
            .out
            .send((std::mem::take(&mut self.seen), self.with_more));
    }
}

fn tally() -> (Tally, std::sync::mpsc::Receiver<(Vec<u32>, usize)>) {
    let (out, tallied) = std::sync::mpsc::channel();
    let t = Tally {
        seen: Vec::new(),
        with_more: 0,
        out,
    };
    (t, tallied)
}

#[test]
fn fnmut_handler_sees_every_event_of_racing_posters_exactly_once_and_fifo_per_poster() {
    const POSTERS: u32 = 4;
    const PER: u32 = 20_000;
    let (poster, consumer) = evd::bounded::<u32>(16).unwrap();
    let (mut t, tallied) = tally();
    // No atomics, no lock: SingleInstance never runs two calls at once.
    let mut next = vec![0u32; POSTERS as usize];
    let up = consumer.into_upcalls_mut(Invoke::Any, move |ev, more| {
        let v = ev.expect("no lossy posts, no report");
        let (p, seq) = ((v / PER) as usize, v % PER);
        assert_eq!(seq, next[p], "poster {p}: FIFO");
        next[p] += 1;
        t.seen.push(v);
        t.with_more += more as usize;
    });
    let threads: Vec<_> = (0..POSTERS)
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
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(up.query().policy, UpcallPolicy::SingleInstance);
    // Teardown waits for the running upcall and drops the handler, which
    // sends its tally; what it left queued is drained here.
    let mut consumer = up.teardown();
    let (mut seen, _) = tallied.try_recv().expect("teardown dropped the handler");
    let delivered = seen.len();
    while let Ok(v) = consumer.try_dequeue() {
        seen.push(v);
    }
    assert!(delivered > 0);
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..POSTERS * PER).collect::<Vec<_>>(),
        "each event exactly once"
    );
    assert_eq!(consumer.query().upcalls, delivered as u64);
}

#[test]
fn fnmut_handler_keeps_its_state_across_upcalls_and_gets_more() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let (mut t, tallied) = tally();
    let mut up = consumer.into_upcalls_mut(Invoke::Any, move |ev, more| {
        t.seen.push(ev.unwrap());
        t.with_more += more as usize;
    });
    up.set_policy(UpcallPolicy::Disabled, Invoke::New).unwrap();
    for i in 0..3 {
        poster.post(i).unwrap();
    }
    up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
        .unwrap(); // delivers the three queued ones on this thread
    poster.post(3).unwrap();
    drop(up);
    assert_eq!(tallied.try_recv().unwrap(), (vec![0, 1, 2, 3], 2));
}

#[test]
fn fnmut_handler_refuses_many_instances_until_an_fn_handler_replaces_it() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let (mut t, tallied) = tally();
    let mut up = consumer.into_upcalls_mut(Invoke::Any, move |ev, _| t.seen.push(ev.unwrap()));
    assert_eq!(
        up.set_policy(UpcallPolicy::ManyInstances, Invoke::Any),
        Err(PolicyError::FnMutHandler)
    );
    assert_eq!(
        up.query().policy,
        UpcallPolicy::SingleInstance,
        "left as it was"
    );
    // Not by way of Disabled either.
    up.set_policy(UpcallPolicy::Disabled, Invoke::New).unwrap();
    assert_eq!(
        up.set_policy(UpcallPolicy::ManyInstances, Invoke::Any),
        Err(PolicyError::FnMutHandler)
    );
    assert_eq!(up.query().policy, UpcallPolicy::Disabled);
    poster.post(1).unwrap(); // queued: upcalls are disabled
    up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
        .unwrap();
    // An Fn handler replaces it (and drops it): ManyInstances is allowed.
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    up.set_handler(move |_, _| {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(
        tallied.try_recv().unwrap().0,
        [1],
        "the replaced FnMut was dropped"
    );
    up.set_policy(UpcallPolicy::ManyInstances, Invoke::Any)
        .unwrap();
    assert_eq!(up.query().policy, UpcallPolicy::ManyInstances);
    poster.post(2).unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
    // Under ManyInstances an FnMut handler is refused, dropped, and the Fn
    // one stays.
    let (mut t, refused) = tally();
    assert_eq!(
        up.set_handler_mut(move |ev, _| t.seen.push(ev.unwrap())),
        Err(PolicyError::FnMutHandler)
    );
    assert_eq!(
        refused.try_recv().unwrap().0,
        Vec::<u32>::new(),
        "refused, dropped"
    );
    poster.post(3).unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    assert!(!PolicyError::FnMutHandler.to_string().is_empty());
    assert_ne!(
        PolicyError::FnMutHandler.to_string(),
        PolicyError::FromUpcall.to_string()
    );
}

#[test]
fn set_handler_mut_is_allowed_while_disabled_and_under_single_instance() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let mut up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, |_, _| {
        panic!("replaced before any upcall")
    });
    let (mut t, tallied) = tally();
    up.set_handler_mut(move |ev, _| t.seen.push(ev.unwrap()))
        .unwrap();
    poster.post(1).unwrap();
    up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
        .unwrap();
    let (mut t2, tallied2) = tally();
    up.set_handler_mut(move |ev, _| t2.seen.push(ev.unwrap()))
        .unwrap();
    assert_eq!(tallied.try_recv().unwrap().0, [1]);
    poster.post(2).unwrap();
    let mut consumer = up.teardown();
    assert_eq!(tallied2.try_recv().unwrap().0, [2]);
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
}

#[test]
fn a_panicking_fnmut_handler_does_not_wedge_the_evd_and_keeps_its_state() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let (mut t, tallied) = tally();
    let up = consumer.into_upcalls_mut(Invoke::Any, move |ev, _| {
        let v = ev.unwrap();
        t.seen.push(v);
        if v == 2 {
            panic!("handler panics on 2");
        }
    });
    poster.post(1).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poster.post(2)));
    assert!(r.is_err(), "the panic reaches the posting thread");
    assert_eq!(up.query().upcalls_in_flight, 0, "the token was given back");
    poster.post(3).unwrap();
    drop(up);
    assert_eq!(tallied.try_recv().unwrap().0, [1, 2, 3]);
}

#[test]
fn spin_budget_round_trips_and_defaults_to_default_spin_budget() {
    let (_poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    assert_eq!(consumer.spin_budget(), evd::DEFAULT_SPIN_BUDGET);
    for budget in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(50),
        Duration::from_secs(3600),
        Duration::MAX,
    ] {
        consumer.set_spin_budget(budget);
        assert_eq!(consumer.spin_budget(), budget);
    }
}

#[test]
fn a_zero_spin_budget_wait_arms_and_is_woken_by_the_next_post() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.set_spin_budget(Duration::ZERO);
    let waiter = std::thread::spawn(move || (consumer.wait(1, None), consumer));
    while !poster.query().armed {
        std::thread::yield_now();
    }
    poster.post(5).unwrap();
    let (r, mut consumer) = waiter.join().unwrap();
    assert_eq!(r, Ok(1));
    assert_eq!(
        consumer.query().notifications,
        1,
        "the post woke the armed wait"
    );
    assert_eq!(consumer.try_dequeue(), Ok(5));
}

#[test]
fn a_spin_budget_too_large_for_an_instant_backs_off_until_ready_and_never_arms() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.set_spin_budget(Duration::MAX);
    let t = std::thread::spawn(move || poster.post(7).unwrap());
    assert_eq!(consumer.wait(1, None), Ok(1));
    t.join().unwrap();
    let q = consumer.query();
    assert_eq!(
        q.notifications, 0,
        "never armed, so the post notified nobody"
    );
    assert!(!q.armed);
    assert_eq!(consumer.try_dequeue(), Ok(7));
}
