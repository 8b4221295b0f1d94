//! Consuming: `try_dequeue`, blocking `dequeue` and `wait` with their
//! timeouts, deadlines and spin budgets, the iterators, the fused future and
//! stream, and `set_unwaitable`. The wait rule itself (when a wait returns,
//! over random sequences) is the `wait_rule` module, the async batch receive
//! the `recv_batch` module. One test per promise.

#[path = "../common/mod.rs"]
mod common;
mod recv_batch;
mod wait_rule;
use common::{
    assert_report, assert_wait_ends, eventually, full_ring, lose, lose_twice_around_a_report,
    spawn_posters,
};
use evd::{DequeueError, Overflow, TryDequeueError, WaitError};
use std::future::Future;
use std::time::{Duration, Instant};

#[test]
fn dequeue_blocks_until_a_post_from_another_thread() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let t = std::thread::spawn(move || {
        // Armed: the dequeue is past its spin, about to block.
        eventually("the dequeue armed", || poster.query().armed);
        poster.post(5).unwrap();
        poster // keep it alive until joined
    });
    assert_eq!(consumer.dequeue(), Ok(5));
    drop(t.join().unwrap());
    assert_eq!(consumer.dequeue(), Err(DequeueError::Closed));
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
fn a_poll_of_an_unwaitable_evd_times_out_as_any_poll() {
    // A zero timeout never blocks: "nothing ready" is its `Timeout`, as
    // documented, unwaitable or not; only a wait that would block is refused.
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.set_unwaitable();
    assert_eq!(
        consumer.dequeue_timeout(Duration::ZERO),
        Err(DequeueError::Timeout)
    );
    assert_eq!(
        consumer.wait(1, Some(Duration::ZERO)),
        Err(WaitError::Timeout { available: 0 })
    );
    assert_eq!(
        consumer.dequeue_timeout(Duration::from_secs(3600)),
        Err(DequeueError::Unwaitable)
    );
    poster.post(1).unwrap();
    assert_eq!(consumer.dequeue_timeout(Duration::ZERO), Ok(1));
}

#[test]
fn dequeue_unwaitable_wakes_a_blocked_dequeue() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let waiter = std::thread::spawn(move || consumer.dequeue());
    // Armed: the dequeue is past its early check and parks (or is about
    // to), so only the wake `set_unwaitable` owes it can end it.
    eventually("the dequeue arms", || poster.query().armed);
    poster.set_unwaitable();
    assert_eq!(waiter.join().unwrap(), Err(DequeueError::Unwaitable));
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
        eventually("the dequeue armed", || poster.query().armed);
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
    let threads = spawn_posters(&poster, 2, PER, None);
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
    assert!(
        DequeueError::Overflow(Overflow { lost: 2 })
            .to_string()
            .contains('2')
    );
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
        eventually("the wait armed", || poster.query().armed);
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
    let (poster, mut consumer) = full_ring(&[1]);
    lose(&poster, 2);
    lose(&poster, 3);
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
    let (poster, mut consumer) = full_ring(&[1]);
    lose(&poster, 2);
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
    let (poster, mut consumer) = full_ring(&[1]);
    lose(&poster, 2);
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

#[test]
fn a_zero_max_takes_nothing_not_even_a_report() {
    // Reports and events alternate: a zero-sized batch right after a report
    // must not hand out a second report in a row while events are ready.
    let (poster, mut consumer) = full_ring(&[1]);
    lose(&poster, 2);
    assert_report(&mut consumer, 1);
    lose(&poster, 3);
    let mut out = Vec::new();
    assert_eq!(consumer.dequeue_batch(&mut out, 0), Ok(0));
    assert_eq!(consumer.dequeue_with(0, |_| unreachable!()), Ok(0));
    assert_eq!(
        consumer.try_dequeue(),
        Ok(1),
        "the event comes before the next report"
    );
    assert_report(&mut consumer, 1);
}

#[test]
fn a_wait_that_finds_its_threshold_met_leaves_the_report_to_the_next_dequeue() {
    for budget in [
        Duration::ZERO,
        Duration::from_nanos(1),
        evd::DEFAULT_SPIN_BUDGET,
    ] {
        for threshold in 1..=4 {
            for timeout in [None, Some(Duration::ZERO), Some(Duration::from_secs(1))] {
                let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
                consumer.set_spin_budget(budget);
                for i in 0..4 {
                    poster.post(i).unwrap();
                }
                lose(&poster, 9);
                assert_eq!(
                    consumer.wait(threshold, timeout),
                    Ok(4),
                    "budget {budget:?}, threshold {threshold}, timeout {timeout:?}"
                );
                assert_eq!(
                    consumer.try_dequeue(),
                    Err(TryDequeueError::Overflow(Overflow { lost: 1 })),
                    "the report waits for the next dequeue"
                );
                assert_eq!(consumer.try_dequeue(), Ok(0));
            }
        }
    }
}

#[test]
fn a_pending_report_ends_a_wait_that_would_block() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    consumer.set_spin_budget(Duration::ZERO);
    poster.post(0).unwrap();
    poster.post(1).unwrap();
    lose_twice_around_a_report(&poster, &mut consumer, [9, 9], 0, "");
    // One event ready, two wanted: the report ends the wait instead of a park.
    assert_eq!(
        consumer.wait(2, None),
        Err(WaitError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(consumer.try_dequeue(), Ok(1));
}

#[test]
fn a_wait_that_spins_without_end_still_ends_at_a_report_and_at_the_end_of_stream() {
    // `Duration::MAX` spins until events are ready and never parks: a report
    // or the end of stream must end it all the same.
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    consumer.set_spin_budget(Duration::MAX);
    poster.post(1).unwrap();
    lose_twice_around_a_report(&poster, &mut consumer, [2, 3], 1, "");
    assert_eq!(
        consumer.wait(1, None),
        Err(WaitError::Overflow(Overflow { lost: 1 })),
        "a report ends the spin"
    );
    drop(poster);
    assert_wait_ends(&mut consumer);
}

#[test]
fn a_wait_that_spins_without_end_still_ends_when_the_evd_is_made_unwaitable() {
    // Set before the wait's first look or during its spin, the flag ends it
    // either way; the spin's own check (which no public call shows running)
    // is pinned by the loom model
    // `a_wait_in_its_back_off_ends_when_made_unwaitable` and its mutant.
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    consumer.set_spin_budget(Duration::MAX);
    let (about_to_wait, waiting) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        about_to_wait.send(()).unwrap();
        consumer.wait(1, None)
    });
    waiting.recv().unwrap();
    poster.set_unwaitable();
    assert_eq!(waiter.join().unwrap(), Err(WaitError::Unwaitable));
}

#[test]
fn wait_threshold_counts_and_timeouts_dequeue_nothing() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    assert_eq!(
        consumer.wait(2, Some(Duration::from_millis(5))),
        Err(WaitError::Timeout { available: 1 })
    );
    assert_eq!(consumer.query().len, 1, "a timed-out wait dequeues nothing");
    assert!(!consumer.query().armed, "and withdraws its arm");
    assert_eq!(
        consumer.wait(5, None),
        Err(WaitError::InvalidThreshold {
            threshold: 5,
            capacity: 4
        })
    );
    let p = poster.clone();
    let t = std::thread::spawn(move || p.post(2).unwrap());
    assert_eq!(consumer.wait(2, None), Ok(2));
    t.join().unwrap();
}

#[test]
fn unwaitable_wakes_a_blocked_waiter_and_posts_keep_queueing() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let waiter = std::thread::spawn(move || {
        let r = consumer.wait(1, None);
        (r, consumer)
    });
    // Wait until the waiter is really blocked (armed), then make it unwaitable.
    while !poster.query().armed {
        std::thread::yield_now();
    }
    poster.set_unwaitable();
    let (r, mut consumer) = waiter.join().unwrap();
    assert_eq!(r, Err(WaitError::Unwaitable));
    poster.post(3).unwrap();
    assert_eq!(consumer.wait(1, None), Err(WaitError::Unwaitable));
    assert_eq!(
        consumer.try_dequeue(),
        Ok(3),
        "events still queue and dequeue"
    );
    poster.clear_unwaitable();
    poster.post(4).unwrap();
    assert_eq!(consumer.wait(1, None), Ok(1));
}
