//! Promises the EVD makes in its docs, each tested as a user would see it:
//! losses never starve the consumer and are told before the end of stream,
//! `query()` is a consistent snapshot, replaced handlers (`Fn` and `FnMut`)
//! are dropped, a batch post fills the room there is, destructors that panic
//! leak nothing, and dropping the consumer frees what it leaves queued.
//!
//! The threaded tests assert properties that hold in every interleaving (no
//! timing, no sleeps used as synchronization), so they hold on a busy machine.

use evd::{
    ArmStatus, Invoke, Lossy, Overflow, PostError, TryDequeueError, UpcallPolicy, WaitError,
};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// Counts its drops; panics in `drop` if asked to.
struct Tracked {
    drops: Arc<AtomicUsize>,
    panic_on_drop: bool,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.panic_on_drop {
            panic!("a panicking destructor");
        }
    }
}

fn tracked(drops: &Arc<AtomicUsize>, panic_on_drop: bool) -> Tracked {
    Tracked {
        drops: drops.clone(),
        panic_on_drop,
    }
}

#[test]
fn loss_reports_and_events_alternate_so_a_flood_cannot_starve_the_consumer() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    for i in 0..4 {
        poster.post(i).unwrap();
    }
    let mut got = Vec::new();
    // A lossy poster keeps the ring full and loses one event before every
    // dequeue: the consumer still gets an event at least every other call.
    for i in 4..40 {
        while poster.post_lossy(i) == Ok(Lossy::Posted) {}
        match consumer.try_dequeue() {
            Ok(v) => got.push(v),
            Err(TryDequeueError::Overflow(o)) => {
                assert!(o.lost >= 1);
                // The very next dequeue must be an event: one is queued.
                match consumer.try_dequeue() {
                    Ok(v) => got.push(v),
                    other => panic!("a report followed a report with events queued: {other:?}"),
                }
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(got.len() >= 36, "an event on every round: {}", got.len());
    assert!(got.windows(2).all(|w| w[0] < w[1]), "FIFO: {got:?}");
}

#[test]
fn a_consumer_that_backs_off_keeps_getting_events_under_lossy_posters() {
    let (poster, mut consumer) = evd::bounded::<u64>(8).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..2)
        .map(|_| {
            let (poster, stop, attempts) = (poster.clone(), stop.clone(), attempts.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Relaxed) {
                    let _ = poster.post_lossy(n);
                    n += 1;
                }
                attempts.fetch_add(n, Relaxed);
            })
        })
        .collect();
    drop(poster);
    let (mut events, mut lost) = (0u64, 0u64);
    while events < 2_000 {
        match consumer.try_dequeue() {
            Ok(_) => {
                events += 1;
            }
            Err(TryDequeueError::Overflow(Overflow { lost: n })) => lost += n,
            Err(TryDequeueError::Empty) => {}
            Err(TryDequeueError::Closed) => panic!("posters are alive"),
        }
        // A consumer that does work between dequeues.
        std::thread::yield_now();
    }
    stop.store(true, Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    // Drain to the end: every loss is reported before Closed.
    loop {
        match consumer.try_dequeue() {
            Ok(_) => events += 1,
            Err(TryDequeueError::Overflow(o)) => lost += o.lost,
            Err(TryDequeueError::Closed) => break,
            Err(TryDequeueError::Empty) => std::thread::yield_now(),
        }
    }
    let q = consumer.query();
    assert_eq!(lost, q.lost, "the reports add up to the events lost");
    assert_eq!(
        events + lost,
        attempts.load(Relaxed),
        "each event queued or lost"
    );
}

#[test]
fn reports_never_come_twice_in_a_row_while_events_are_ready() {
    // Deterministic: a report, then the queued event, even when more losses
    // were committed in between.
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(poster.post_lossy(4), Ok(Lossy::Lost));
    assert_eq!(
        consumer.try_dequeue(),
        Ok(1),
        "the event before the next report"
    );
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
    let mut out = Vec::new();
    assert_eq!(poster.post_lossy(5), Ok(Lossy::Posted));
    assert_eq!(poster.post_lossy(6), Ok(Lossy::Lost));
    assert_eq!(
        consumer.dequeue_batch(&mut out, 8),
        Ok(2),
        "a batch after a report"
    );
    assert_eq!(out, [2, 5]);
    assert_eq!(
        consumer.dequeue_batch(&mut out, 8),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
    consumer.close();
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
}

#[test]
fn every_loss_is_reported_before_the_end_of_stream() {
    // Small rings, four lossy posters, closed from another thread while they
    // run; the consumer arms and waits. Whatever the interleaving, the
    // reports it hears before Closed add up to the losses.
    for round in 0..200u64 {
        let cap = 1 + (round % 8) as usize;
        let (poster, mut consumer) = evd::bounded::<u64>(cap).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        let queued = Arc::new(AtomicU64::new(0));
        let lost = Arc::new(AtomicU64::new(0));
        let posters: Vec<_> = (0..4)
            .map(|_| {
                let (poster, queued, lost) = (poster.clone(), queued.clone(), lost.clone());
                std::thread::spawn(move || {
                    for i in 0..200 {
                        match poster.post_lossy(i) {
                            Ok(Lossy::Posted) => queued.fetch_add(1, Relaxed),
                            Ok(Lossy::Lost) => lost.fetch_add(1, Relaxed),
                            Err(PostError::Closed(_)) => return,
                            Err(PostError::Full(_)) => {
                                panic!("a lossy post is never refused as full")
                            }
                        };
                    }
                })
            })
            .collect();
        let closer = {
            let poster = poster.clone();
            std::thread::spawn(move || {
                for _ in 0..round % 50 {
                    std::thread::yield_now();
                }
                poster.close();
            })
        };
        drop(poster);
        let (mut events, mut reported) = (0u64, 0u64);
        loop {
            match consumer.try_dequeue() {
                Ok(_) => events += 1,
                Err(TryDequeueError::Overflow(o)) => reported += o.lost,
                Err(TryDequeueError::Closed) => break,
                Err(TryDequeueError::Empty) => match consumer.arm() {
                    ArmStatus::Closed => break,
                    ArmStatus::Pending => {}
                    ArmStatus::Armed => match consumer.wait(1, None) {
                        Err(WaitError::Overflow(o)) => reported += o.lost,
                        Ok(_) | Err(WaitError::Closed { .. }) => {}
                        Err(e) => panic!("unexpected {e}"),
                    },
                },
            }
        }
        for p in posters {
            p.join().unwrap();
        }
        closer.join().unwrap();
        assert_eq!(
            reported,
            lost.load(Relaxed),
            "round {round}: every loss told before Closed"
        );
        assert_eq!(
            events,
            queued.load(Relaxed),
            "round {round}: every queued event delivered"
        );
    }
}

#[test]
fn query_snapshots_are_consistent_while_posters_and_the_consumer_run() {
    let (poster, mut consumer) = evd::bounded::<u64>(4).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let (poster, stop) = (poster.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Relaxed) || n < 1000 {
                let q = poster.query();
                assert!(q.len <= q.capacity, "impossible snapshot {q:?}");
                assert_eq!(q.posted, q.dequeued + q.len as u64, "{q:?}");
                n += 1;
            }
            n
        })
    };
    let producer = {
        let poster = poster.clone();
        std::thread::spawn(move || {
            for i in 0..200_000u64 {
                let mut v = i;
                while let Err(PostError::Full(back)) = poster.post(v) {
                    v = back;
                    std::hint::spin_loop();
                }
            }
        })
    };
    drop(poster);
    let mut got = 0u64;
    while got < 200_000 {
        if consumer.try_dequeue().is_ok() {
            got += 1;
        }
    }
    producer.join().unwrap();
    stop.store(true, Relaxed);
    assert!(observer.join().unwrap() >= 1000);
}

#[test]
fn a_replaced_handler_is_dropped_when_no_upcall_runs_it() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let make = |drops: &Arc<AtomicUsize>| {
        let owned = tracked(drops, false);
        move |_: Result<u32, Overflow>, _: bool| {
            let _keep = &owned;
        }
    };
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, make(&drops));
    for i in 1..=19 {
        poster.post(i).unwrap();
        up.set_handler(make(&drops));
        assert_eq!(
            drops.load(SeqCst),
            i as usize,
            "replacement {i} dropped at once"
        );
    }
    drop(up);
    assert_eq!(
        drops.load(SeqCst),
        20,
        "dropping the dispatcher drops the current handler too"
    );
    drop(poster);
    assert_eq!(drops.load(SeqCst), 20);
}

#[test]
fn a_handler_replaced_during_its_own_upcall_is_dropped_when_that_upcall_returns() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let slot: Arc<std::sync::Mutex<Option<evd::Upcalls<u32>>>> = Arc::default();
    let owned = tracked(&drops, false);
    let (s, d) = (slot.clone(), drops.clone());
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
        let _keep = &owned;
        if let Some(up) = s.lock().unwrap().as_ref() {
            let replacement = tracked(&d, false);
            up.set_handler(move |_, _| {
                let _keep = &replacement;
            });
            assert_eq!(d.load(SeqCst), 0, "still running: not dropped yet");
        }
    });
    *slot.lock().unwrap() = Some(up);
    poster.post(1).unwrap(); // runs the first handler, which replaces itself
    assert_eq!(
        drops.load(SeqCst),
        1,
        "dropped as soon as its call returned"
    );
    let up = slot.lock().unwrap().take().unwrap();
    drop(up);
    drop(poster);
    assert_eq!(drops.load(SeqCst), 2);
}

#[test]
fn a_replaced_fnmut_handler_is_dropped_when_no_upcall_runs_it() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let make = |drops: &Arc<AtomicUsize>| {
        let owned = tracked(drops, false);
        let mut calls = 0u32;
        move |_: Result<u32, Overflow>, _: bool| {
            let _keep = &owned;
            calls += 1;
            assert_eq!(calls, 1, "each handler here gets one event");
        }
    };
    let up = consumer.into_upcalls_mut(Invoke::Any, make(&drops));
    for i in 1..=19 {
        poster.post(i).unwrap();
        up.set_handler_mut(make(&drops)).unwrap();
        assert_eq!(
            drops.load(SeqCst),
            i as usize,
            "replacement {i} dropped at once"
        );
    }
    // An Fn handler replacing an FnMut one drops it the same way.
    poster.post(20).unwrap();
    up.set_handler(|_, _| {});
    assert_eq!(drops.load(SeqCst), 20);
    up.set_handler_mut(make(&drops)).unwrap();
    drop(up);
    assert_eq!(
        drops.load(SeqCst),
        21,
        "dropping the dispatcher drops the current FnMut handler too"
    );
    drop(poster);
    assert_eq!(drops.load(SeqCst), 21);
}

#[test]
fn an_fnmut_handler_replaced_during_its_own_upcall_is_dropped_when_that_upcall_returns() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let slot: Arc<std::sync::Mutex<Option<evd::Upcalls<u32>>>> = Arc::default();
    let owned = tracked(&drops, false);
    let (s, d) = (slot.clone(), drops.clone());
    let mut seen = Vec::new();
    let up = consumer.into_upcalls_mut(Invoke::Any, move |ev, _| {
        let _keep = &owned;
        seen.push(ev.unwrap());
        if let Some(up) = s.lock().unwrap().as_ref() {
            let replacement = tracked(&d, false);
            up.set_handler_mut(move |_, _| {
                let _keep = &replacement;
            })
            .unwrap();
            // Its own state is still there to use after the replacement.
            seen.push(0);
            assert_eq!(seen, [1, 0]);
            assert_eq!(d.load(SeqCst), 0, "still running: not dropped yet");
        }
    });
    *slot.lock().unwrap() = Some(up);
    poster.post(1).unwrap(); // runs the first handler, which replaces itself
    assert_eq!(
        drops.load(SeqCst),
        1,
        "dropped as soon as its call returned"
    );
    let up = slot.lock().unwrap().take().unwrap();
    drop(up);
    drop(poster);
    assert_eq!(drops.load(SeqCst), 2);
}

#[test]
fn post_batch_fills_the_room_of_an_empty_ring_whatever_the_cached_head() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let mut batch = vec![0, 1, 2, 3];
    assert_eq!(poster.post_batch(&mut batch), Ok(4));
    let mut out = Vec::new();
    assert_eq!(consumer.dequeue_batch(&mut out, 4), Ok(4)); // the poster's hint is stale now
    let mut batch = vec![10, 11, 12, 13, 14, 15];
    assert_eq!(poster.post_batch(&mut batch), Ok(4), "min(len, free room)");
    assert_eq!(batch, [14, 15]);
    // After a shrink, too.
    out.clear();
    consumer.dequeue_batch(&mut out, 8).unwrap();
    assert_eq!(consumer.resize(2), Ok(2));
    let mut batch = vec![20, 21, 22];
    assert_eq!(poster.post_batch(&mut batch), Ok(2));
    // Partly free ring: one queued, three free after a grow.
    assert_eq!(consumer.resize(4), Ok(4));
    out.clear();
    consumer.dequeue_batch(&mut out, 1).unwrap();
    let mut batch = vec![30, 31, 32, 33];
    assert_eq!(poster.post_batch(&mut batch), Ok(3));
}

#[test]
fn post_batch_up_to_posts_min_of_max_len_and_room_in_order() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let mut held = vec![0, 1, 2, 3, 4, 5];
    assert_eq!(poster.post_batch_up_to(&mut held, 3), Ok(3), "max");
    assert_eq!(held, [3, 4, 5]);
    assert_eq!(poster.post_batch_up_to(&mut held, 0), Ok(0), "max 0");
    assert_eq!(poster.post_batch_up_to(&mut held, 8), Ok(1), "room");
    assert_eq!(held, [4, 5]);
    assert_eq!(
        poster.post_batch_up_to(&mut held, 1),
        Err(evd::BatchPostError::Full),
        "no room: refused, nothing taken"
    );
    assert_eq!(held, [4, 5]);
    let mut out = Vec::new();
    assert_eq!(consumer.dequeue_batch(&mut out, 8), Ok(4));
    assert_eq!(out, [0, 1, 2, 3]);
    assert_eq!(poster.post_batch_up_to(&mut held, 8), Ok(2), "len");
    assert!(held.is_empty());
    assert_eq!(poster.post_batch_up_to(&mut held, 8), Ok(0), "empty");
    consumer.close();
    let mut more = vec![9];
    assert_eq!(
        poster.post_batch_up_to(&mut more, 1),
        Err(evd::BatchPostError::Closed)
    );
    assert_eq!(more, [9], "a closed EVD hands the events back");
}

#[test]
fn dequeue_with_reports_a_loss_first_then_events_then_the_end() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    assert_eq!(poster.post_lossy(3), Ok(evd::Lossy::Lost));
    let mut got = Vec::new();
    assert_eq!(
        consumer.dequeue_with(8, |v| got.push(v)),
        Err(TryDequeueError::Overflow(evd::Overflow { lost: 1 }))
    );
    assert!(got.is_empty(), "nothing taken with the report");
    assert_eq!(consumer.dequeue_with(1, |v| got.push(v)), Ok(1));
    assert_eq!(consumer.dequeue_with(8, |v| got.push(v)), Ok(1));
    assert_eq!(got, [1, 2]);
    assert_eq!(consumer.dequeue_with(8, |v| got.push(v)), Ok(0), "empty");
    assert_eq!(consumer.dequeue_with(0, |v| got.push(v)), Ok(0), "max 0");
    poster.post(4).unwrap();
    poster.close();
    assert_eq!(consumer.dequeue_with(8, |v| got.push(v)), Ok(1));
    assert_eq!(
        consumer.dequeue_with(8, |v| got.push(v)),
        Err(TryDequeueError::Closed)
    );
    assert_eq!(got, [1, 2, 4]);
}

#[test]
fn a_zero_max_takes_nothing_not_even_a_report() {
    // Reports and events alternate: a zero-sized batch right after a report
    // must not hand out a second report in a row while events are ready.
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
    let mut out = Vec::new();
    assert_eq!(consumer.dequeue_batch(&mut out, 0), Ok(0));
    assert_eq!(consumer.dequeue_with(0, |_| unreachable!()), Ok(0));
    assert_eq!(
        consumer.try_dequeue(),
        Ok(1),
        "the event comes before the next report"
    );
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
}

#[test]
fn dequeue_with_frees_room_for_a_waiting_poster() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(0).unwrap();
    let p = poster.clone();
    let waiter = std::thread::spawn(move || p.post_blocking(1));
    // However the waiter and this thread interleave, the waiter gets in once
    // the consumer has taken the first event: the head store wakes it.
    let mut got = Vec::new();
    while got.len() < 2 {
        consumer.dequeue_with(1, |v| got.push(v)).unwrap();
        std::hint::spin_loop();
    }
    assert_eq!(waiter.join().unwrap(), Ok(()));
    assert_eq!(got, [0, 1]);
}

#[test]
fn a_panicking_destructor_does_not_stop_the_others_being_dropped() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, consumer) = evd::bounded::<Tracked>(4).unwrap();
    poster.post(tracked(&drops, false)).unwrap();
    poster.post(tracked(&drops, true)).unwrap();
    poster.post(tracked(&drops, false)).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(consumer)));
    assert!(r.is_err(), "the destructor's panic is resumed");
    assert_eq!(drops.load(SeqCst), 3, "every queued event dropped");
    drop(poster);
    assert_eq!(drops.load(SeqCst), 3, "and none twice");
}

#[test]
fn dropping_the_consumer_frees_queued_events_at_once_and_refuses_later_posts() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, consumer) = evd::bounded::<Tracked>(8).unwrap();
    for _ in 0..5 {
        poster.post(tracked(&drops, false)).unwrap();
    }
    drop(consumer);
    assert_eq!(
        drops.load(SeqCst),
        5,
        "freed with the consumer, not with the last poster"
    );
    match poster.post(tracked(&drops, false)) {
        Err(PostError::Closed(t)) => drop(t),
        other => panic!("expected Closed, got {:?}", other.map(|_| ())),
    }
    assert_eq!(drops.load(SeqCst), 6);
    assert!(poster.is_closed());
}

#[test]
fn dropping_the_consumer_waits_out_posters_mid_write() {
    // Posters racing the drop: every event they got in is dropped exactly
    // once, either by the consumer's drop or refused back to its poster.
    for _ in 0..50 {
        let drops = Arc::new(AtomicUsize::new(0));
        let made = Arc::new(AtomicUsize::new(0));
        let (poster, consumer) = evd::bounded::<Tracked>(16).unwrap();
        let posters: Vec<_> = (0..2)
            .map(|_| {
                let (poster, drops, made) = (poster.clone(), drops.clone(), made.clone());
                std::thread::spawn(move || loop {
                    made.fetch_add(1, SeqCst);
                    match poster.post(tracked(&drops, false)) {
                        Ok(()) => {}
                        Err(PostError::Full(t)) => drop(t),
                        Err(PostError::Closed(t)) => {
                            drop(t);
                            return;
                        }
                    }
                })
            })
            .collect();
        std::thread::yield_now();
        drop(consumer);
        for p in posters {
            p.join().unwrap();
        }
        assert_eq!(
            drops.load(SeqCst),
            made.load(SeqCst),
            "no leak, no double drop"
        );
        drop(poster);
        assert_eq!(drops.load(SeqCst), made.load(SeqCst));
    }
}

#[test]
fn teardown_from_a_nested_upcall_of_another_evd_is_refused_not_a_deadlock() {
    // X's handler posts to Y, whose upcall runs inline on the same thread;
    // Y's handler tries to tear X down: X's upcall is further down this very
    // stack, so waiting for it would hang. It must be refused.
    type Slot = Arc<std::sync::Mutex<Option<evd::Upcalls<u32>>>>;
    let x_slot: Slot = Arc::default();
    let refused = Arc::new(AtomicBool::new(false));
    let (y_poster, y_consumer) = evd::bounded::<u32>(4).unwrap();
    let (xs, r) = (x_slot.clone(), refused.clone());
    let y = y_consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
        let mut guard = xs.lock().unwrap();
        let x = guard.as_mut().expect("x installed");
        let res = x.set_policy(UpcallPolicy::Teardown, Invoke::Any);
        assert_eq!(res, Err(evd::PolicyError::FromUpcall));
        r.store(true, SeqCst);
    });
    let (x_poster, x_consumer) = evd::bounded::<u32>(4).unwrap();
    let x = x_consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
        y_poster.post(7).unwrap();
    });
    *x_slot.lock().unwrap() = Some(x);
    x_poster.post(1).unwrap();
    assert!(
        refused.load(SeqCst),
        "the nested handler ran and was refused"
    );
    let x = x_slot.lock().unwrap().take().unwrap();
    drop(x.teardown());
    drop(y.teardown());
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
                assert_eq!(poster.post_lossy(9), Ok(Lossy::Lost));
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
    assert_eq!(poster.post_lossy(9), Ok(Lossy::Lost));
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(poster.post_lossy(9), Ok(Lossy::Lost));
    assert_eq!(
        consumer.try_dequeue(),
        Ok(0),
        "right after a report, an event"
    );
    // One event ready, two wanted: the report ends the wait instead of a park.
    assert_eq!(
        consumer.wait(2, None),
        Err(WaitError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(consumer.try_dequeue(), Ok(1));
}

#[test]
fn single_instance_re_enabled_from_its_own_upcall_delivers_the_next_post() {
    // The seed thread's pattern: the upcall disables itself
    // (`dat_evd_modify_upcall`), does its work, enables again, and drains.
    // Only other instances would be waited for; its own goes on.
    type Slot = Arc<std::sync::Mutex<Option<evd::Upcalls<u32>>>>;
    let slot: Slot = Arc::default();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (s, seen2) = (slot.clone(), seen.clone());
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        let v = ev.unwrap();
        seen2.lock().unwrap().push(v);
        if v == 1 {
            let mut guard = s.lock().unwrap();
            let up = guard.as_mut().expect("installed before the first post");
            up.set_policy(UpcallPolicy::Disabled, Invoke::Any).unwrap();
            assert_eq!(up.query().policy, UpcallPolicy::Disabled);
            up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
                .expect("re-enabling from its own upcall waits for no other instance");
            assert_eq!(up.query().policy, UpcallPolicy::SingleInstance);
        }
    });
    *slot.lock().unwrap() = Some(up);
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    assert_eq!(*seen.lock().unwrap(), [1, 2], "the next post was delivered");
    let up = slot.lock().unwrap().take().unwrap();
    let q = up.query();
    assert_eq!((q.len, q.upcalls_in_flight), (0, 0));
    drop(up.teardown());
}

#[test]
fn a_switch_to_single_instance_that_would_wait_for_other_instances_is_refused_from_an_upcall() {
    // Under ManyInstances other instances may be running: waiting for them
    // from inside a handler is refused, and the policy stays as it was.
    type Slot = Arc<std::sync::Mutex<Option<evd::Upcalls<u32>>>>;
    let slot: Slot = Arc::default();
    let result = Arc::new(std::sync::Mutex::new(None));
    let (s, r) = (slot.clone(), result.clone());
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, move |_, _| {
        if let Some(up) = s.lock().unwrap().as_mut() {
            let res = up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any);
            *r.lock().unwrap() = Some((res, up.query().policy));
        }
    });
    *slot.lock().unwrap() = Some(up);
    poster.post(1).unwrap();
    assert_eq!(
        *result.lock().unwrap(),
        Some((
            Err(evd::PolicyError::FromUpcall),
            UpcallPolicy::ManyInstances
        ))
    );
    let up = slot.lock().unwrap().take().unwrap();
    drop(up.teardown());
}

#[test]
fn teardown_drops_the_handler_so_a_poster_it_owns_cannot_keep_the_evd_open() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let own = consumer.poster();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |_, _| {
        let _ = &own; // a handler that re-posts would hold this
    });
    poster.post(1).unwrap();
    let mut consumer = up.teardown();
    drop(poster);
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Closed),
        "the handler's poster went with the handler"
    );
}

#[test]
fn an_arm_with_only_a_report_pending_says_pending_clears_notified_and_arms_nothing() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    assert_eq!(consumer.arm(), ArmStatus::Armed);
    poster.post(1).unwrap(); // disarms and notifies
    assert!(consumer.query().notified);
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
    assert_eq!(
        consumer.try_dequeue(),
        Ok(1),
        "right after a report, an event"
    );
    // The ring is empty; one report is pending.
    assert_eq!(consumer.arm(), ArmStatus::Pending, "a report is work");
    let q = consumer.query();
    assert!(!q.notified && !q.armed, "notified cleared, nothing armed");
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(consumer.arm(), ArmStatus::Armed);
}

#[test]
fn a_wait_that_spins_without_end_still_ends_at_a_report_and_at_the_end_of_stream() {
    // `Duration::MAX` spins until events are ready and never parks: a report
    // or the end of stream must end it all the same.
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    consumer.set_spin_budget(Duration::MAX);
    poster.post(1).unwrap();
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Lost));
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Overflow(Overflow { lost: 1 }))
    );
    assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(
        consumer.wait(1, None),
        Err(WaitError::Overflow(Overflow { lost: 1 })),
        "a report ends the spin"
    );
    drop(poster);
    assert_eq!(
        consumer.wait(1, None),
        Err(WaitError::Closed { available: 0 })
    );
}

#[test]
fn a_wait_that_spins_without_end_still_ends_when_the_evd_is_made_unwaitable() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    consumer.set_spin_budget(Duration::MAX);
    let waiter = std::thread::spawn(move || consumer.wait(1, None));
    poster.set_unwaitable();
    assert_eq!(waiter.join().unwrap(), Err(WaitError::Unwaitable));
}
