//! Loss and close: loss reports (once, with the count, before the end of
//! stream, never starving the events), close and end of stream, and dropping
//! handles (every poster, the consumer, the EVD) with what each does to the
//! queued events and to posters mid-write, and `Poster::closed`, the future
//! that resolves once the EVD is closed.

mod common;
use common::{
    Counting, Panicking, Tracked, assert_report, assert_wait_ends, counting, eventually, full_ring,
    lose, lose_twice_around_a_report, next_of_its_poster, poll_once, shared_vec,
    spawn_tagged_posters, tracked,
};
use evd::{
    ArmStatus, DequeueError, Invoke, Lossy, Overflow, PostError, RecvError, TryDequeueError,
    UpcallPolicy, WaitError,
};
use futures::executor::block_on;
use futures::task::noop_waker;
use std::pin::pin;
use std::sync::atomic::Ordering::{SeqCst, *};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, mpsc};
use std::task::{Poll, Waker};
use std::time::Duration;

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
    lose(&poster, 2);
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
    let (poster, mut consumer) = full_ring(&[1]);
    lose(&poster, 2);
    assert_eq!(
        consumer.dequeue(),
        Err(DequeueError::Overflow(Overflow { lost: 1 }))
    );
    lose(&poster, 3);
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
            Ok(v) => panic!("event {v} before the pending report"),
            Err(TryDequeueError::Overflow(o)) => {
                assert_eq!(o.lost, 1, "exactly one loss per round");
                // The very next dequeue must be an event: one is queued.
                match consumer.try_dequeue() {
                    Ok(v) => got.push(v),
                    other => panic!("a report followed a report with events queued: {other:?}"),
                }
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(got.len(), 36, "an event on every round: {}", got.len());
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
    let (poster, mut consumer) = full_ring(&[1, 2]);
    lose_twice_around_a_report(&poster, &mut consumer, [3, 4], 1, "");
    assert_report(&mut consumer, 1);
    let mut out = Vec::new();
    assert_eq!(poster.post_lossy(5), Ok(Lossy::Posted));
    lose(&poster, 6);
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
fn dequeue_with_reports_a_loss_first_then_events_then_the_end() {
    let (poster, mut consumer) = full_ring(&[1, 2]);
    lose(&poster, 3);
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
    // The query counts the events the drop dropped as gone from the ring.
    let q = poster.query();
    assert_eq!((q.posted, q.dequeued, q.len), (5, 5, 0));
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
                std::thread::spawn(move || {
                    loop {
                        made.fetch_add(1, SeqCst);
                        match poster.post(tracked(&drops, false)) {
                            Ok(()) => {}
                            Err(PostError::Full(t)) => drop(t),
                            Err(PostError::Closed(t)) => {
                                drop(t);
                                return;
                            }
                        }
                    }
                })
            })
            .collect();
        // The posters are at it (four events made between them) before the
        // drop races them.
        eventually("the posters run", || made.load(SeqCst) >= 4);
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
fn close_hands_events_back_and_drains_to_end_of_stream() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    poster.close();
    assert_eq!(poster.post(2), Err(PostError::Closed(2)));
    assert_eq!(consumer.arm(), ArmStatus::Pending);
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(consumer.arm(), ArmStatus::Closed);
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    assert_wait_ends(&mut consumer);
}

#[test]
fn dropping_every_poster_ends_a_blocked_wait() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let p2 = poster.clone();
    let waiter = std::thread::spawn(move || consumer.wait(1, None));
    while !p2.query().armed {
        std::thread::yield_now();
    }
    drop(poster);
    drop(p2);
    assert_eq!(
        waiter.join().unwrap(),
        Err(WaitError::Closed { available: 0 })
    );
}

#[test]
fn a_lossy_posts_losses_are_reported_once_with_the_count() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    assert_eq!(poster.post_lossy(1), Ok(Lossy::Posted));
    assert_eq!(poster.post_lossy(2), Ok(Lossy::Posted));
    lose(&poster, 3);
    lose(&poster, 4);
    assert_report(&mut consumer, 2);
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(consumer.try_dequeue(), Ok(2));
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
    assert_eq!(consumer.query().lost, 2);
    consumer.close();
    assert_eq!(poster.post_lossy(5), Err(PostError::Closed(5)));
}

#[test]
fn dropping_the_evd_drops_queued_events_exactly_once() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Counted>(8).unwrap();
    for _ in 0..5 {
        poster.post(Counted(drops.clone())).unwrap();
    }
    drop(consumer.try_dequeue().unwrap());
    assert_eq!(drops.load(SeqCst), 1);
    consumer.resize(16).unwrap(); // moved, not dropped
    assert_eq!(drops.load(SeqCst), 1);
    drop(consumer);
    assert_eq!(
        drops.load(SeqCst),
        5,
        "the consumer's drop frees the four queued events at once, though a poster lives"
    );
    let refused = poster.post(Counted(drops.clone()));
    assert!(matches!(refused, Err(PostError::Closed(_))));
    drop(refused);
    assert_eq!(drops.load(SeqCst), 6);
    drop(poster);
    assert_eq!(drops.load(SeqCst), 6, "nothing dropped twice");
}

/// An event that counts its drops.
struct Counted {
    seq: u64,
    drops: Arc<AtomicU64>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

#[test]
fn post_arm_wait_and_dequeue_after_close() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    consumer.close();
    assert!(poster.is_closed());
    // Posts are refused and the event is handed back.
    assert_eq!(poster.post(3), Err(PostError::Closed(3)));
    // Arm: events are left, so pending; nothing more will come.
    assert_eq!(consumer.arm(), ArmStatus::Pending);
    // Wait: at or below what is left, it returns at once; above, Closed.
    assert_eq!(consumer.wait(2, None), Ok(2));
    assert_eq!(
        consumer.wait(3, None),
        Err(WaitError::Closed { available: 2 })
    );
    assert_eq!(consumer.try_dequeue(), Ok(1));
    let mut out = Vec::new();
    assert_eq!(consumer.dequeue_batch(&mut out, 8), Ok(1));
    assert_eq!(out, [2]);
    // Drained: end of stream everywhere, without blocking.
    assert_eq!(consumer.arm(), ArmStatus::Closed);
    assert_wait_ends(&mut consumer);
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    assert_eq!(
        consumer.dequeue_batch(&mut out, 8),
        Err(TryDequeueError::Closed)
    );
    assert_eq!(
        futures::executor::block_on(consumer.recv()),
        Err(RecvError::Closed)
    );
    // Closing again, and from the poster side, changes nothing.
    poster.close();
    consumer.close();
    assert_eq!(poster.post(4), Err(PostError::Closed(4)));
    // A poster made after close finds it closed.
    assert_eq!(consumer.poster().post(5), Err(PostError::Closed(5)));
    // Unwaitable after close: the wait still reports unwaitable first.
    poster.set_unwaitable();
    assert_eq!(consumer.wait(1, None), Err(WaitError::Unwaitable));
    let q = consumer.query();
    assert!(q.closed && !q.armed);
    assert_eq!((q.posted, q.dequeued, q.len), (2, 2, 0));
}

#[test]
fn upcalls_after_close_deliver_what_is_left_and_start_no_more() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(1).unwrap();
    poster.close();
    let (seen, s) = shared_vec();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        s.lock().unwrap().push(ev.unwrap())
    });
    assert_eq!(
        *seen.lock().unwrap(),
        [1],
        "INVOC_ANY delivers the queued event"
    );
    assert_eq!(poster.post(2), Err(PostError::Closed(2)));
    let mut consumer = up.teardown();
    assert_eq!(*seen.lock().unwrap(), [1]);
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
}

#[test]
fn dropping_the_consumer_while_posters_run_ends_them_and_drops_every_event_once() {
    const POSTERS: u64 = 2;
    let drops = Arc::new(AtomicU64::new(0));
    let (poster, mut consumer) = evd::bounded::<Counted>(64).unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let mut threads = Vec::new();
    for p in 0..POSTERS {
        let poster = poster.clone();
        let drops = drops.clone();
        let started = started_tx.clone();
        threads.push(std::thread::spawn(move || {
            let mut made = 0u64;
            let mut seq = p << 32;
            loop {
                let ev = Counted {
                    seq,
                    drops: drops.clone(),
                };
                made += 1;
                match poster.post(ev) {
                    Ok(()) => seq += 1,
                    Err(PostError::Full(ev)) => drop(ev),
                    // The refused event comes back and is dropped here.
                    Err(PostError::Closed(_)) => return made,
                }
                if made == 1000 {
                    started.send(()).unwrap();
                }
            }
        }));
    }
    drop(poster);
    for _ in 0..POSTERS {
        started_rx.recv().unwrap();
    }
    let mut last = [None::<u64>; POSTERS as usize];
    for _ in 0..500 {
        match consumer.try_dequeue() {
            Ok(ev) => {
                let p = (ev.seq >> 32) as usize;
                assert!(last[p] < Some(ev.seq), "FIFO per poster");
                last[p] = Some(ev.seq);
            }
            Err(TryDequeueError::Empty | TryDequeueError::Overflow(_)) => {}
            Err(TryDequeueError::Closed) => panic!("closed while posters hold handles"),
        }
    }
    drop(consumer);
    // Every poster sees Closed and returns: no hang.
    let made: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // Queued events went with the last handle: all dropped exactly once.
    assert_eq!(drops.load(SeqCst), made);
}

#[test]
fn dropping_every_poster_while_the_consumer_waits_is_end_of_stream() {
    const PER: u64 = 20_000;
    let (poster, mut consumer) = evd::bounded::<u64>(16).unwrap();
    let waiter = std::thread::spawn(move || {
        let mut got = [0u64; 2];
        loop {
            match consumer.try_dequeue() {
                Ok(v) => {
                    next_of_its_poster(&mut got, v);
                }
                // Posters retry refused posts: refusals are reported.
                Err(TryDequeueError::Overflow(_)) => {}
                Err(TryDequeueError::Closed) => return got,
                Err(TryDequeueError::Empty) => match consumer.wait(1, None) {
                    Ok(_) | Err(WaitError::Closed { .. } | WaitError::Overflow(_)) => {}
                    Err(e) => panic!("wait: {e}"),
                },
            }
        }
    });
    let posters = spawn_tagged_posters(&poster, 2, PER);
    drop(poster);
    for p in posters {
        p.join().unwrap();
    }
    assert_eq!(waiter.join().unwrap(), [PER, PER]);
}

#[test]
fn dropping_every_poster_ends_an_async_receiver() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        loop {
            match futures::executor::block_on(consumer.recv()) {
                Ok(v) => got.push(v),
                Err(RecvError::Closed) => return got,
                Err(RecvError::Overflow(_)) => {}
                Err(e) => panic!("unexpected {e}"),
            }
        }
    });
    let p2 = poster.clone();
    let t = std::thread::spawn(move || {
        for i in 0..100 {
            let mut v = i;
            while let Err(e) = p2.post(v) {
                let PostError::Full(back) = e else {
                    panic!("closed while this poster holds a handle")
                };
                v = back;
                std::thread::yield_now();
            }
        }
    });
    t.join().unwrap();
    drop(poster);
    assert_eq!(receiver.join().unwrap(), (0..100).collect::<Vec<_>>());
}

// ---- Poster::closed: the future that resolves once the EVD is closed -------

/// A thread awaiting `poster.closed()`, returned once its future has been
/// polled and found the EVD open (registered before the close to come).
fn awaiting_closed(poster: evd::Poster<u32>) -> std::thread::JoinHandle<()> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut closed = pin!(poster.closed());
        let (woken_tx, woken_rx) = mpsc::channel();
        let waker = Waker::from(Arc::new(SendOnWake(std::sync::Mutex::new(woken_tx))));
        assert!(poll_once(closed.as_mut(), &waker).is_pending(), "open");
        ready_tx.send(()).unwrap();
        woken_rx
            .recv_timeout(common::STALL_LIMIT)
            .expect("the close wakes the registered future");
        assert_eq!(poll_once(closed.as_mut(), &waker), Poll::Ready(()));
    });
    ready_rx.recv().unwrap();
    t
}

/// A waker that sends `()` on each wake.
struct SendOnWake(std::sync::Mutex<mpsc::Sender<()>>);

impl std::task::Wake for SendOnWake {
    fn wake(self: Arc<Self>) {
        let _ = self.0.lock().unwrap().send(());
    }
}

#[test]
fn closed_resolves_when_the_consumer_closes() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let t = awaiting_closed(poster);
    consumer.close();
    t.join().unwrap();
}

#[test]
fn closed_resolves_when_the_consumer_is_dropped() {
    let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    let t = awaiting_closed(poster);
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
    let (counting, waker) = counting();
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
    let (counting, waker) = counting();
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
