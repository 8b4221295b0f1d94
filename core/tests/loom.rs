//! loom models, one per race. Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p evd --release --features __loom --test loom`
//!
//! A lost wakeup shows up as a loom deadlock (every thread parked); a lost or
//! duplicated event as a failed assertion. Consumers run on spawned threads and
//! posters on the main thread, so an unpark never lands on a thread blocked in
//! `join` (loom issue 249).
#![cfg(loom)]

use evd::{ArmStatus, Invoke, PostError, TryDequeueError, UpcallPolicy, WaitError};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

/// Explore every interleaving with at most `LOOM_MAX_PREEMPTIONS` (default 3)
/// preemptions: bounded, as tokio's CI runs its models, so that models with
/// three threads finish in seconds; the races here need at most two.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    model_bounded(3, f)
}

/// [`model`] with a smaller default bound, for a model whose threads do
/// many atomic steps (`LOOM_MAX_PREEMPTIONS` still overrides it).
fn model_bounded<F: Fn() + Sync + Send + 'static>(bound: usize, f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    b.check(f);
}

/// Take exactly `n` events, blocking (drain, arm, park) whenever the ring is
/// empty; the EVD must stay open meanwhile.
fn take_exactly(consumer: &mut evd::Consumer<u32>, n: usize) -> Vec<u32> {
    consumer.set_spin_budget(Duration::ZERO);
    let mut got = Vec::new();
    while got.len() < n {
        match consumer.try_dequeue() {
            Ok(v) => got.push(v),
            Err(TryDequeueError::Empty) => match consumer.wait(1, None) {
                Ok(_) => {}
                Err(e) => panic!("unexpected {e}"),
            },
            Err(e) => panic!("unexpected {e}"),
        }
    }
    got
}

/// Drain everything, blocking until end of stream. No model loses events
/// except through `post_lossy`, whose reports are skipped here.
fn drain_to_end(consumer: &mut evd::Consumer<u32>) -> Vec<u32> {
    consumer.set_spin_budget(Duration::ZERO);
    let mut got = Vec::new();
    loop {
        match consumer.try_dequeue() {
            Ok(v) => got.push(v),
            Err(TryDequeueError::Closed) => return got,
            Err(TryDequeueError::Overflow(_)) => {}
            Err(TryDequeueError::Empty) => match consumer.wait(1, None) {
                Ok(_) | Err(WaitError::Closed { .. } | WaitError::Overflow(_)) => {}
                Err(e) => panic!("unexpected {e}"),
            },
        }
    }
}

#[test]
fn post_vs_arm_no_lost_notification() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || {
            // drain → arm → park, exactly the consumer loop the crate removes
            // the second poll from.
            loop {
                if let Ok(v) = consumer.try_dequeue() {
                    return v;
                }
                if consumer.wait(1, None).is_ok() {
                    continue;
                }
            }
        });
        poster.post(7).unwrap();
        assert_eq!(c.join().unwrap(), 7);
    });
}

#[test]
fn arm_reports_an_event_posted_after_the_last_dequeue() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            let before = consumer.try_dequeue();
            let status = consumer.arm();
            let after = consumer.try_dequeue();
            (before, status, after, consumer)
        });
        poster.post(1).unwrap();
        let (before, status, after, consumer) = c.join().unwrap();
        let q = consumer.query();
        match status {
            // Armed means the ring was empty when the arm CAS ran: either the
            // event had already been dequeued, or the post came after the arm
            // and took the notification.
            ArmStatus::Armed => assert!(before.is_ok() || q.notifications == 1),
            // Pending means the event is there to take.
            ArmStatus::Pending => assert!(before.is_ok() || after.is_ok() || q.len == 1),
            ArmStatus::Closed => panic!("not closed"),
        }
    });
}

/// Two posters, one event each (1 from this thread, 2 from another), while
/// `take` runs on the consumer's thread and returns what it took; asserts
/// each event came exactly once, and hands back the consumer and a poster
/// (still alive, so the EVD is open).
fn two_posters_each_post_once(
    take: impl FnOnce(&mut evd::Consumer<u32>) -> Vec<u32> + Send + 'static,
) -> (evd::Consumer<u32>, evd::Poster<u32>) {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    let p2 = poster.clone();
    let c = thread::spawn(move || {
        let got = take(&mut consumer);
        (got, consumer)
    });
    let t = thread::spawn(move || p2.post(2).unwrap());
    poster.post(1).unwrap();
    t.join().unwrap();
    let (mut got, consumer) = c.join().unwrap();
    got.sort_unstable();
    assert_eq!(got, [1, 2], "each event exactly once");
    (consumer, poster)
}

#[test]
fn two_posters_vs_arm() {
    model(|| {
        // The consumer waits for both events while both posters are alive:
        // close's wake cannot stand in for a notification a post owed, so a
        // lost one is a deadlock here, not a late end of stream.
        let (mut consumer, poster) = two_posters_each_post_once(|c| take_exactly(c, 2));
        drop(poster);
        assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    });
}

#[test]
fn explicit_arm_loop_vs_two_posters_then_arms_on_the_drained_ring() {
    // The DAT loop: drain, arm, and wait only when the arm says `Armed`. An
    // arm that knows of reserved events from an earlier look at the word
    // says `Pending` without looking again; it must never claim more than
    // were reserved (once both events are taken the arm must arm), and a
    // `Pending` for events still being written must not hide an arm the
    // posts then owe a notification (a lost one deadlocks the model).
    model(|| {
        let (mut consumer, poster) = two_posters_each_post_once(|consumer| {
            consumer.set_spin_budget(Duration::ZERO);
            let mut got = Vec::new();
            while got.len() < 2 {
                match consumer.dequeue_batch(&mut got, 2) {
                    Ok(0) => match consumer.arm() {
                        ArmStatus::Armed => {
                            consumer.wait(1, None).unwrap();
                        }
                        ArmStatus::Pending => thread::yield_now(),
                        ArmStatus::Closed => panic!("both posters are alive"),
                    },
                    Ok(_) => {}
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            got
        });
        assert_eq!(
            consumer.arm(),
            ArmStatus::Armed,
            "drained: nothing is pending"
        );
        drop(poster);
    });
}

#[test]
fn post_during_upcall_single_instance() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let delivered = Arc::new(AtomicUsize::new(0));
        let (f, d) = (in_flight.clone(), delivered.clone());
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
                assert_eq!(
                    f.fetch_add(1, Ordering::SeqCst),
                    0,
                    "a second concurrent upcall"
                );
                d.fetch_add(ev.unwrap() as usize, Ordering::SeqCst);
                f.fetch_sub(1, Ordering::SeqCst);
            });
        let p2 = poster.clone();
        let t = thread::spawn(move || p2.post(1).unwrap());
        poster.post(2).unwrap();
        t.join().unwrap();
        // Instances run inside the posts, so once both returned none runs,
        // and no event may be left queued for one: each was delivered once.
        assert_eq!(
            delivered.load(Ordering::SeqCst),
            3,
            "delivered exactly once"
        );
        let mut consumer = upcalls.teardown();
        assert_eq!(
            consumer.try_dequeue(),
            Err(TryDequeueError::Empty),
            "none stranded"
        );
    });
}

/// An `FnMut` handler's plain state, handed out when the handler is dropped.
struct Sink {
    seen: Vec<u32>,
    out: Arc<loom::sync::Mutex<Vec<u32>>>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        *self.out.lock().unwrap() = std::mem::take(&mut self.seen);
    }
}

#[test]
fn fnmut_handler_single_instance_two_posters_exactly_once() {
    // The handler mutates a plain Vec. It lives in loom's UnsafeCell inside
    // the EVD, so two calls not ordered by the token's hand-off would fail
    // the model as a causality violation, not only as a wrong count.
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let out = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let mut sink = Sink {
            seen: Vec::new(),
            out: out.clone(),
        };
        let upcalls = consumer.into_upcalls_mut(Invoke::Any, move |ev, _| {
            sink.seen.push(ev.unwrap());
        });
        let p2 = poster.clone();
        let t = thread::spawn(move || p2.post(1).unwrap());
        poster.post(2).unwrap();
        t.join().unwrap();
        // Both posts returned, so no instance runs and none is owed: every
        // event went to the handler. Teardown drops it, handing out `seen`.
        let mut consumer = upcalls.teardown();
        assert_eq!(
            consumer.try_dequeue(),
            Err(TryDequeueError::Empty),
            "none stranded"
        );
        let mut got = std::mem::take(&mut *out.lock().unwrap());
        got.sort_unstable();
        assert_eq!(got, [1, 2], "each event exactly once, by the handler");
    });
}

#[test]
fn many_instances_dequeue_exactly_once() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let delivered = Arc::new(AtomicUsize::new(0));
        let d = delivered.clone();
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, move |ev, _| {
                d.fetch_add(ev.unwrap() as usize, Ordering::SeqCst);
            });
        let p2 = poster.clone();
        let t = thread::spawn(move || p2.post(1).unwrap());
        poster.post(2).unwrap();
        t.join().unwrap();
        // As under SingleInstance: the instances ran inside the posts, and
        // an instance ends only when it finds nothing to take.
        assert_eq!(
            delivered.load(Ordering::SeqCst),
            3,
            "delivered exactly once"
        );
        let mut consumer = upcalls.teardown();
        assert_eq!(
            consumer.try_dequeue(),
            Err(TryDequeueError::Empty),
            "none stranded"
        );
    });
}

#[test]
fn teardown_vs_post_no_upcall_after_teardown() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let torn = Arc::new(AtomicUsize::new(0));
        let delivered = Arc::new(AtomicUsize::new(0));
        let (tn, d) = (torn.clone(), delivered.clone());
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
                assert_eq!(
                    tn.load(Ordering::SeqCst),
                    0,
                    "upcall after teardown returned"
                );
                d.fetch_add(ev.unwrap() as usize, Ordering::SeqCst);
            });
        let tear = thread::spawn(move || {
            let consumer = upcalls.teardown();
            torn.store(1, Ordering::SeqCst);
            consumer
        });
        // The post may start an upcall before the teardown, or queue behind it.
        let _ = poster.post(5);
        let mut consumer = tear.join().unwrap();
        let mut total = delivered.load(Ordering::SeqCst);
        while let Ok(v) = consumer.try_dequeue() {
            total += v as usize;
        }
        assert_eq!(total, 5);
    });
}

#[test]
fn close_vs_wait() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || consumer.wait(1, None));
        poster.close();
        assert_eq!(c.join().unwrap(), Err(WaitError::Closed { available: 0 }));
    });
}

#[test]
fn last_poster_drop_vs_wait_ends_the_stream() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || drain_to_end(&mut consumer));
        poster.post(3).unwrap();
        drop(poster);
        assert_eq!(c.join().unwrap(), [3]);
    });
}

#[test]
fn unwaitable_vs_wait() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || consumer.wait(1, None));
        poster.set_unwaitable();
        assert_eq!(c.join().unwrap(), Err(WaitError::Unwaitable));
    });
}

#[test]
fn waker_registration_vs_post() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || loom::future::block_on(consumer.recv()));
        poster.post(9).unwrap();
        assert_eq!(c.join().unwrap(), Ok(9));
    });
}

#[test]
fn resize_vs_post() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            if let Ok(v) = consumer.try_dequeue() {
                got.push(v);
            }
            consumer.resize(4).unwrap();
            got.extend(drain_to_end(&mut consumer));
            got
        });
        poster.post(1).unwrap();
        // The second post may find the 1-slot ring full before the resize.
        let mut second = 2;
        loop {
            match poster.post(second) {
                Ok(()) => break,
                Err(e) => {
                    second = e.into_inner();
                    thread::yield_now();
                }
            }
        }
        drop(poster);
        let got = c.join().unwrap();
        assert_eq!(got, [1, 2], "no loss, no duplicate, FIFO");
    });
}

#[test]
fn loss_vs_arm_no_lost_report() {
    // A lossy post commits its loss after the consumer's last dequeue but
    // before its arm: the arm must see the report as pending work, or the
    // loss must wake the armed consumer.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(0).unwrap(); // the ring is full
        consumer.set_spin_budget(Duration::ZERO); // park at once: the window is before the park
        let c = thread::spawn(move || {
            let (mut events, mut reports) = (0, 0);
            while events + reports < 2 {
                match consumer.try_dequeue() {
                    Ok(_) => events += 1,
                    Err(TryDequeueError::Overflow(o)) => reports += o.lost,
                    Err(TryDequeueError::Closed) => panic!("not closed"),
                    Err(TryDequeueError::Empty) => match consumer.wait(1, None) {
                        Err(WaitError::Overflow(o)) => reports += o.lost,
                        Ok(_) => {}
                        Err(e) => panic!("unexpected {e}"),
                    },
                }
            }
            (events, reports)
        });
        // Either queued (after the consumer made room) or lost and reported;
        // either way the consumer must hear of it.
        let _ = poster.post_lossy(1);
        let (events, reports) = c.join().unwrap();
        assert_eq!(events + reports, 2);
        drop(poster);
    });
}

#[test]
fn loss_vs_upcall_exit_no_stranded_report() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
        let heard = Arc::new(AtomicUsize::new(0));
        let h = heard.clone();
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
                h.fetch_add(
                    ev.map(|_| 1).unwrap_or_else(|o| o.lost as usize),
                    Ordering::SeqCst,
                );
            });
        let p2 = poster.clone();
        let t = thread::spawn(move || {
            let _ = p2.post_lossy(2);
        });
        let _ = poster.post_lossy(1);
        t.join().unwrap();
        // Both posts returned: each event was delivered or reported, except
        // what is still queued for the teardown to hand back.
        let mut consumer = upcalls.teardown();
        let mut total = heard.load(Ordering::SeqCst);
        loop {
            match consumer.try_dequeue() {
                Ok(_) => total += 1,
                Err(TryDequeueError::Overflow(o)) => total += o.lost as usize,
                Err(_) => break,
            }
        }
        assert_eq!(total, 2);
    });
}

#[test]
fn refused_post_vs_arm_reports_nothing() {
    // A post refused as full is backpressure: a consumer draining and arming
    // around it never sees an overflow report.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(0).unwrap();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match consumer.try_dequeue() {
                    Ok(v) => got.push(v),
                    Err(TryDequeueError::Overflow(o)) => panic!("false overflow report {o}"),
                    Err(TryDequeueError::Closed) => return got,
                    Err(TryDequeueError::Empty) => match consumer.arm() {
                        ArmStatus::Armed => {
                            if let Err(WaitError::Overflow(o)) = consumer.wait(1, None) {
                                panic!("false overflow report {o}");
                            }
                        }
                        ArmStatus::Pending => {}
                        ArmStatus::Closed => return got,
                    },
                }
            }
        });
        let queued = match poster.post(1) {
            Ok(()) => vec![0, 1],
            Err(PostError::Full(1)) => vec![0],
            Err(e) => panic!("unexpected {e}"),
        };
        drop(poster);
        assert_eq!(c.join().unwrap(), queued);
    });
}

#[test]
fn refused_post_vs_invoc_new_on_a_full_ring() {
    // Upcalls are enabled with INVOC_NEW while the ring is full and a poster
    // is refused: either the refusal came first (plain backpressure) or the
    // poster runs the upcall that drains the ring and its post goes in. No
    // event is stranded, none delivered twice, nothing reported as lost.
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(1).unwrap();
        let heard = Arc::new(AtomicUsize::new(0));
        let p2 = poster.clone();
        let t = thread::spawn(move || p2.post(2).is_ok());
        let h = heard.clone();
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
                assert!(ev.is_ok(), "nothing was lost");
                h.fetch_add(1, Ordering::SeqCst);
            });
        let second = t.join().unwrap();
        let mut consumer = upcalls.teardown();
        let mut total = heard.load(Ordering::SeqCst);
        while let Ok(_) = consumer.try_dequeue() {
            total += 1;
        }
        assert_eq!(total, if second { 2 } else { 1 });
        drop(poster);
    });
}

#[test]
fn close_vs_consumer_spinning_on_an_empty_ring() {
    // The consumer decides "empty" from the head slot's stamp and the loss
    // word alone; close must still end its stream: it gets the last event,
    // then Closed, and never spins forever.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match consumer.try_dequeue() {
                    Ok(v) => got.push(v),
                    Err(TryDequeueError::Closed) => return got,
                    Err(TryDequeueError::Overflow(o)) => panic!("nothing was lost: {o}"),
                    Err(TryDequeueError::Empty) => thread::yield_now(),
                }
            }
        });
        poster.post(1).unwrap();
        poster.close();
        assert_eq!(c.join().unwrap(), [1], "the last event, then the end");
        drop(poster);
    });
}

#[test]
fn batch_dequeue_vs_close_ends_after_the_last_event() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match consumer.dequeue_batch(&mut got, 2) {
                    Ok(0) => thread::yield_now(),
                    Ok(_) => {}
                    Err(TryDequeueError::Closed) => return got,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
        });
        let mut batch = vec![1, 2];
        assert_eq!(poster.post_batch(&mut batch), Ok(2));
        drop(poster); // the last poster closes
        assert_eq!(c.join().unwrap(), [1, 2]);
    });
}

#[test]
fn query_vs_dequeue_is_a_consistent_snapshot() {
    // An observer's query races the consumer's head store and a post whose
    // reservation needed that head: head and word must belong to one instant
    // (a stale head with a newer tail would report more than the capacity).
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(1).unwrap();
        let observer = poster.clone();
        let o = thread::spawn(move || {
            let q = observer.query();
            assert!(q.len <= q.capacity, "{q:?}");
            assert_eq!(q.posted, q.dequeued + q.len as u64, "{q:?}");
        });
        let c = thread::spawn(move || drain_to_end(&mut consumer));
        let second = poster.post(2).is_ok();
        drop(poster);
        o.join().unwrap();
        let got = c.join().unwrap();
        assert_eq!(got, if second { vec![1, 2] } else { vec![1] });
    });
}

#[test]
fn batch_post_vs_arm() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let c = thread::spawn(move || drain_to_end(&mut consumer));
        let mut batch = vec![1, 2];
        assert_eq!(poster.post_batch(&mut batch), Ok(2));
        drop(poster);
        assert_eq!(c.join().unwrap(), [1, 2], "exactly once, FIFO");
    });
}

#[test]
fn loss_vs_close_is_told_before_end_of_stream() {
    // A lossy post commits its loss after the consumer's last dequeue and
    // then closes the EVD: a consumer that stops at Closed must have heard
    // of the loss first.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(0).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || {
            let (mut events, mut reports) = (0, 0);
            loop {
                match consumer.try_dequeue() {
                    Ok(_) => events += 1,
                    Err(TryDequeueError::Overflow(o)) => reports += o.lost,
                    Err(TryDequeueError::Empty | TryDequeueError::Closed) => match consumer.arm() {
                        ArmStatus::Closed => break,
                        ArmStatus::Pending => {}
                        ArmStatus::Armed => {
                            if let Err(WaitError::Overflow(o)) = consumer.wait(1, None) {
                                reports += o.lost;
                            }
                        }
                    },
                }
            }
            (events, reports)
        });
        let _ = poster.post_lossy(1);
        drop(poster); // closes
        let (events, reports) = c.join().unwrap();
        assert_eq!(
            events + reports,
            2,
            "told of every loss before end of stream"
        );
    });
}

// ---- the room signal: posters waiting for a free slot ----

#[test]
fn room_wait_vs_one_freed_slot_no_lost_wakeup() {
    // The poster joins the room queue and posts again while the consumer
    // frees the one slot: either the second post sees the new head, or the
    // consumer's flag check sees the waiter. A lost wakeup leaves the poster
    // parked forever: a loom deadlock in `join`.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(1).unwrap();
        let p = poster.clone();
        let t = thread::spawn(move || p.post_blocking(2));
        assert_eq!(consumer.try_dequeue(), Ok(1));
        assert_eq!(t.join().unwrap(), Ok(()));
        assert_eq!(consumer.try_dequeue(), Ok(2));
        assert!(!consumer.query().room_wanted);
    });
}

#[test]
fn dequeue_with_whose_handler_panics_still_frees_the_slot_for_a_waiting_poster() {
    // The handler panics on the one event it is given. The unwind still
    // stores the head past that event, and the store's room check must wake
    // the poster waiting for the slot; a head left behind, or a check
    // skipped on the unwind, parks the poster forever: a loom deadlock.
    quiet_panics_from("handler fails");
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(1).unwrap();
        let p = poster.clone();
        let t = thread::spawn(move || p.post_blocking(2));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            consumer.dequeue_with(1, |_| panic!("handler fails"))
        }));
        assert!(r.is_err());
        assert_eq!(t.join().unwrap(), Ok(()));
        assert_eq!(consumer.try_dequeue(), Ok(2));
    });
}

/// Keep the panic hook from printing `message` (a model that panics on
/// purpose in every interleaving); other panics print as usual. Each model
/// adds its own message: the hook is installed once, for all of them.
fn quiet_panics_from(message: &'static str) {
    static QUIET: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    static ONCE: std::sync::Once = std::sync::Once::new();
    let quiet = |m: &str| QUIET.lock().unwrap_or_else(|e| e.into_inner()).contains(&m);
    if !quiet(message) {
        QUIET
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
    }
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            match info.payload().downcast_ref::<&str>() {
                Some(m) if quiet(m) => {}
                _ => default(info),
            }
        }));
    });
}

/// An event whose `Drop` panics while it is live: the handler (and the drain
/// after teardown) defuse the ones they are given, so only an event a lossy
/// post gives up panics.
struct Grenade {
    live: bool,
}

impl Drop for Grenade {
    fn drop(&mut self) {
        if self.live {
            panic!("a given-up event's drop fails");
        }
    }
}

#[test]
fn a_lossy_post_whose_event_panics_on_drop_still_wakes_the_consumer_it_disarmed() {
    // `loss_vs_arm_no_lost_report` with an event whose `Drop` panics: the
    // consumer drains the full ring and arms between the lossy post's
    // refusal and its RMW on the word, which takes the arm. The wake is owed
    // before the event is dropped; dropped first, its panic leaves the
    // consumer asleep with the report pending: a loom deadlock.
    quiet_panics_from("a given-up event's drop fails");
    model(|| {
        let (poster, mut consumer) = evd::bounded::<Grenade>(1).unwrap();
        poster.post(Grenade { live: false }).unwrap(); // the ring is full
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || {
            let (mut events, mut reports) = (0, 0);
            while events + reports < 2 {
                match consumer.try_dequeue() {
                    Ok(mut g) => {
                        g.live = false;
                        events += 1;
                    }
                    Err(TryDequeueError::Overflow(o)) => reports += o.lost,
                    Err(TryDequeueError::Closed) => panic!("not closed"),
                    Err(TryDequeueError::Empty) => match consumer.wait(1, None) {
                        Err(WaitError::Overflow(o)) => reports += o.lost,
                        Ok(_) => {}
                        Err(e) => panic!("unexpected {e}"),
                    },
                }
            }
            (events, reports)
        });
        let lossy = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            poster.post_lossy(Grenade { live: true })
        }));
        assert!(
            matches!(lossy, Ok(Ok(evd::Lossy::Posted)) | Err(_)),
            "a lossy post either queues or gives up"
        );
        let (events, reports) = c.join().unwrap();
        assert_eq!(
            events + reports,
            2,
            "each event taken once or reported lost"
        );
        drop(poster);
    });
}

#[test]
fn a_lossy_post_whose_event_panics_on_drop_still_delivers_the_upcall_it_took() {
    // Capacity 1, SingleInstance. The spawned thread's post takes the token
    // and runs the instance; this thread's lossy post finds the ring full
    // while that instance holds the token, the instance drains and exits,
    // then the loss's RMW on the word finds the token free and takes it (and
    // an instance count): an upcall is owed, to report the loss. It must be
    // run before the given-up event is dropped. Had the event's panicking
    // `Drop` run first, the token and the count would be taken forever: no
    // instance in flight could ever end, and teardown would hang.
    quiet_panics_from("a given-up event's drop fails");
    model(|| {
        let (poster, consumer) = evd::bounded::<Grenade>(1).unwrap();
        let heard = Arc::new(AtomicUsize::new(0));
        let h = heard.clone();
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
                let n = match ev {
                    Ok(mut g) => {
                        g.live = false;
                        1
                    }
                    Err(o) => o.lost as usize,
                };
                h.fetch_add(n, Ordering::SeqCst);
            });
        let p2 = poster.clone();
        // Refused as full while this thread's event is being delivered: then
        // it comes back (defused) and counts for nothing.
        let t = thread::spawn(move || match p2.post(Grenade { live: false }) {
            Ok(()) => 1,
            Err(PostError::Full(_)) => 0,
            Err(e) => panic!("unexpected {e}"),
        });
        let lossy = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            poster.post_lossy(Grenade { live: true })
        }));
        // Queued (and defused by the handler), or given up: its drop panics.
        assert!(
            matches!(lossy, Ok(Ok(evd::Lossy::Posted)) | Err(_)),
            "a lossy post either queues or gives up"
        );
        let posted = t.join().unwrap() + 1;
        // Both posts returned, and every instance runs inside a post.
        let q = upcalls.query();
        if (q.upcalls_in_flight, q.in_upcall) != (0, false) {
            // Its drop would wait for the stranded instance forever.
            std::mem::forget(upcalls);
            panic!("an upcall was taken and never run: {q:?}");
        }
        let mut consumer = upcalls.teardown();
        let mut total = heard.load(Ordering::SeqCst);
        loop {
            match consumer.try_dequeue() {
                Ok(mut g) => {
                    g.live = false;
                    total += 1;
                }
                Err(TryDequeueError::Overflow(o)) => total += o.lost as usize,
                Err(_) => break,
            }
        }
        assert_eq!(total, posted, "each event handled once or reported lost");
    });
}

#[test]
fn room_waiter_vs_one_freed_slot_no_lost_wakeup() {
    // A `RoomWaiter` (waiting for room with no event in hand, as a verbs
    // feed does before it polls its CQ) joins the room queue and looks again
    // while the consumer frees the one slot: either its look sees the new
    // head, or the consumer's check sees it queued and wakes it. A lost
    // wakeup leaves `block_on` parked forever: a loom deadlock.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(1).unwrap();
        let mut room = poster.room_waiter();
        let t = thread::spawn(move || {
            loom::future::block_on(std::future::poll_fn(|cx| room.poll_room(cx)))
        });
        assert_eq!(consumer.try_dequeue(), Ok(1));
        assert_eq!(t.join().unwrap(), Ok(1));
        assert!(!consumer.query().room_wanted);
    });
}

#[test]
fn room_two_waiters_one_slot_at_a_time_both_get_in() {
    // Two posters wait on a one-slot ring; the consumer frees one slot at a
    // time. One wake per freed slot must reach each waiter in turn: a herd
    // that wakes both for one slot must not leave the loser asleep, and
    // neither waits forever. A waiter asleep next to a free slot shows up as
    // a consumer that polls forever (loom's path-length limit). Bound 2: the
    // lost wakeup this guards against (a woken waiter that posted without
    // handing its wake on, see room.rs) needs two preemptions here, and is
    // found in seconds with the hand-on removed.
    model_bounded(2, || {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        poster.post(1).unwrap();
        let waiters: Vec<_> = [2, 3]
            .into_iter()
            .map(|v| {
                let p = poster.clone();
                thread::spawn(move || p.post_blocking(v))
            })
            .collect();
        // The consumer polls (yielding to loom) instead of parking: the race
        // is on the room side, and the consumer's own park/arm states would
        // multiply the model for nothing.
        let mut got = Vec::new();
        while got.len() < 3 {
            match consumer.try_dequeue() {
                Ok(v) => got.push(v),
                Err(_) => thread::yield_now(),
            }
        }
        for t in waiters {
            assert_eq!(t.join().unwrap(), Ok(()));
        }
        got.sort();
        assert_eq!(got, [1, 2, 3]);
    });
}

#[test]
fn room_wait_vs_close_hands_the_event_back() {
    // Close races with a poster joining the room queue: the poster is woken
    // (it joined first) or sees CLOSED in its post after joining (it joined
    // after close's wake-all), and gets its event back either way.
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(1).unwrap();
        let p = poster.clone();
        let t = thread::spawn(move || p.post_blocking(2));
        consumer.close();
        assert_eq!(t.join().unwrap(), Err(PostError::Closed(2)));
        assert_eq!(consumer.try_dequeue(), Ok(1));
        assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    });
}

// ---- the CNO: one waiter for many EVDs ----

/// The CNO consumer loop for the EVDs in `evds` (key = index): take ready
/// keys, check each was enabled, drain it, enable it again; until `want`
/// events are in. A lost key leaves the waiter parked: a loom deadlock.
fn serve(cno: &mut evd::Cno, evds: &mut [evd::Consumer<u32>], want: usize) -> Vec<u32> {
    cno.set_spin_budget(Duration::ZERO);
    let mut enabled = vec![false; evds.len()];
    let mut got = Vec::new();
    let mut ready: Vec<u64> = (0..evds.len() as u64).collect(); // enable each once
    loop {
        for &k in &ready {
            let e = &mut evds[k as usize];
            enabled[k as usize] = false;
            loop {
                while let Ok(v) = e.try_dequeue() {
                    got.push(v);
                }
                match e.enable_cno().unwrap() {
                    ArmStatus::Armed => break enabled[k as usize] = true,
                    // Reserved, not yet published: the poster is mid-post.
                    ArmStatus::Pending => thread::yield_now(),
                    ArmStatus::Closed => break,
                }
            }
        }
        if got.len() >= want {
            return got;
        }
        ready.clear();
        cno.wait(&mut ready);
        for &k in &ready {
            assert!(enabled[k as usize], "key {k} given while not enabled");
        }
    }
}

#[test]
fn cno_post_vs_enable_two_evds() {
    // Two EVDs on one CNO, each posted once while the waiter enables, takes
    // keys, drains and re-enables: each key comes once per enable, and no
    // EVD with work is missed (a miss parks the waiter forever).
    model_bounded(2, || {
        let mut cno = evd::Cno::new(2).unwrap();
        let (pa, mut a) = evd::bounded::<u32>(2).unwrap();
        let (pb, mut b) = evd::bounded::<u32>(2).unwrap();
        a.bind_cno(&cno, 0).unwrap();
        b.bind_cno(&cno, 1).unwrap();
        let c = thread::spawn(move || serve(&mut cno, &mut [a, b], 2));
        pa.post(1).unwrap();
        pb.post(2).unwrap();
        let mut got = c.join().unwrap();
        got.sort_unstable();
        assert_eq!(got, [1, 2], "each event exactly once");
    });
}

#[test]
fn cno_modify_vs_post_exactly_one_cno() {
    // An enabled EVD moves to another CNO while a post lands and the old
    // CNO's waiter looks for keys: the notification reaches exactly one of
    // the two, and the event stays in the EVD.
    model_bounded(2, || {
        let mut old = evd::Cno::new(1).unwrap();
        let mut new = evd::Cno::new(1).unwrap();
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.bind_cno(&old, 1).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        let new_handle = new.handle();
        let mover = thread::spawn(move || {
            consumer.modify_cno(&new_handle, 2).unwrap();
            consumer
        });
        let old_waiter = thread::spawn(move || old.try_next());
        poster.post(7).unwrap();
        let mut consumer = mover.join().unwrap();
        let from_old = old_waiter.join().unwrap();
        let from_new = new.try_next();
        match (from_old, from_new) {
            (Some(1), None) | (None, Some(2)) => {}
            other => panic!("exactly one CNO must be told, got {other:?}"),
        }
        assert_eq!(new.try_next(), None, "once");
        assert_eq!(consumer.try_dequeue(), Ok(7));
    });
}

#[test]
fn cno_disable_vs_post_is_a_barrier() {
    // Disable races with a post that may have taken the enable: once disable
    // returns, the key is not (and will not be) in the ready set, and the
    // event is still there to dequeue.
    model(|| {
        let mut cno = evd::Cno::new(1).unwrap();
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.bind_cno(&cno, 1).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        let c = thread::spawn(move || {
            consumer.disable_cno();
            assert_eq!(cno.try_next(), None, "no key after disable");
            loop {
                match consumer.try_dequeue() {
                    Ok(v) => break v,
                    Err(_) => thread::yield_now(),
                }
            }
        });
        poster.post(5).unwrap();
        assert_eq!(c.join().unwrap(), 5);
    });
}

#[test]
fn cno_direct_wait_preempts() {
    // A direct waiter on an enabled EVD is woken by the post (a miss is a
    // loom deadlock); the enable is spent exactly once over two posts: by the
    // first if it came before the waiter armed, else by the second.
    model(|| {
        let mut cno = evd::Cno::new(1).unwrap();
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.set_spin_budget(Duration::ZERO);
        consumer.bind_cno(&cno, 1).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        let c = thread::spawn(move || {
            assert!(consumer.wait(1, None).is_ok());
            assert_eq!(consumer.try_dequeue(), Ok(1));
            consumer
        });
        poster.post(1).unwrap();
        let mut consumer = c.join().unwrap();
        let first = cno.try_next();
        poster.post(2).unwrap();
        let second = cno.try_next();
        match (first, second) {
            (Some(1), None) | (None, Some(1)) => {}
            other => panic!("one key for one enable, got {other:?}"),
        }
        assert_eq!(consumer.try_dequeue(), Ok(2));
    });
}

#[test]
fn cno_wait_vs_close() {
    // Close of an enabled EVD races with the CNO's blocking wait: the key is
    // delivered once (a miss is a loom deadlock) and the drain ends the
    // stream.
    model(|| {
        let mut cno = evd::Cno::new(1).unwrap();
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.bind_cno(&cno, 3).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        let c = thread::spawn(move || {
            cno.set_spin_budget(Duration::ZERO);
            let mut keys = Vec::new();
            cno.wait(&mut keys);
            assert_eq!(keys, [3]);
            assert_eq!(cno.try_next(), None, "once");
            assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
            assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Closed));
        });
        poster.close();
        c.join().unwrap();
    });
}

#[test]
fn cno_wait_vs_unbind() {
    // An enabled EVD is unbound while a post's trigger is in flight, and the
    // freed slot is bound at once to another EVD: the old key is never
    // delivered after the unbind, the new binding's key is delivered exactly
    // once (a stale ring entry of the old binding, perhaps still being
    // pushed, carries it: the wait may have to wait for that push, as any
    // key waits for the triggers ahead of it in the ring), and the first
    // event stays in its EVD.
    model_bounded(2, || {
        let mut cno = evd::Cno::new(1).unwrap();
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.bind_cno(&cno, 1).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        let c = thread::spawn(move || {
            assert_eq!(consumer.unbind_cno(), Some(1));
            assert_eq!(cno.try_next(), None, "removed by the unbind");
            let (p2, mut other) = evd::bounded::<u32>(2).unwrap();
            other.bind_cno(&cno, 2).unwrap();
            assert_eq!(other.enable_cno(), Ok(ArmStatus::Armed));
            p2.post(9).unwrap();
            cno.set_spin_budget(Duration::ZERO);
            let mut keys = Vec::new();
            cno.wait(&mut keys);
            assert_eq!(keys, [2]);
            assert_eq!(cno.try_next(), None);
            consumer
        });
        poster.post(5).unwrap();
        let mut consumer = c.join().unwrap();
        assert_eq!(consumer.try_dequeue(), Ok(5));
    });
}

#[test]
fn cno_direct_wait_that_gives_up_hands_the_event_to_the_cno() {
    // A direct waiter preempts the CNO, then gives up (a timeout, a dropped
    // future) while the post that woke it is queued: the CNO must be told,
    // or an enabled EVD with work would never reach it.
    model(|| {
        let mut cno = evd::Cno::new(1).unwrap();
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        consumer.bind_cno(&cno, 4).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        let c = thread::spawn(move || {
            let _ = consumer.arm();
            consumer.disarm();
            consumer
        });
        poster.post(1).unwrap();
        let mut consumer = c.join().unwrap();
        assert_eq!(cno.try_next(), Some(4), "the enabled EVD has work");
        assert_eq!(cno.try_next(), None);
        assert_eq!(consumer.try_dequeue(), Ok(1));
    });
}

/// A waker that panics when woken (a broken executor's).
struct PanickingWaker;

impl std::task::Wake for PanickingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        panic!("a waker fails");
    }
}

#[test]
fn a_blocking_post_whose_notification_panics_leaves_the_room_queue() {
    // The ring is full; a blocking post finds it full, joins the room queue
    // and posts again. The consumer drains the ring and arms with a waker
    // that panics in between, so that second post goes in, takes the arm
    // and panics in its wake. The panic unwinds out of `post_blocking`
    // (caught on its thread); the post is over, so its seat must have left
    // the room queue. Left there, it stays `room_wanted` and eats the wake
    // of the next freed slot, which a real waiter behind it then misses.
    use std::future::Future;
    quiet_panics_from("a waker fails");
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(1).unwrap();
        let p = poster.clone();
        let t = thread::spawn(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.post_blocking(2))).is_err()
        });
        assert_eq!(consumer.try_dequeue(), Ok(1));
        let waker = std::task::Waker::from(std::sync::Arc::new(PanickingWaker));
        let mut cx = std::task::Context::from_waker(&waker);
        {
            // The poll may wake its own task (a reserved slot still being
            // written: it yields to the executor), and this waker panics.
            let mut recv = consumer.recv();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                std::pin::Pin::new(&mut recv).poll(&mut cx)
            }));
        }
        t.join().unwrap();
        assert!(
            !consumer.query().room_wanted,
            "a post_blocking that unwound left its seat in the room queue"
        );
    });
}
