//! Hardening: user code that panics (handlers, wakers, an event's `Drop`)
//! never wedges the EVD, loses an event or strands a notification, and an
//! allocation failure is a typed error. The exhaustive table of every place
//! user code runs is the `panics` module.

#[path = "../common/mod.rs"]
mod common;
use common::{Tracked, shared_vec, tally, tracked};
mod panics;
mod waker_slot;
use evd::{ArmStatus, CreateError, Invoke, PostError, TryDequeueError, UpcallPolicy};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::task::{Context, Poll, Wake, Waker};

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
fn panicking_upcall_does_not_wedge_the_evd() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let (got, g) = shared_vec();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        let v = ev.unwrap();
        if v == 13 {
            panic!("handler panics on 13");
        }
        g.lock().unwrap().push(v);
    });
    let p = poster.clone();
    let r = std::thread::spawn(move || p.post(13)).join();
    assert!(r.is_err(), "the panic reaches the posting thread");
    let q = up.query();
    assert!(!q.in_upcall, "in-upcall cleared on unwind");
    poster.post(14).unwrap();
    assert_eq!(
        *got.lock().unwrap(),
        [14],
        "the next post runs a fresh upcall"
    );
    drop(up);
}

fn panicking_upcall_keeps_every_event(policy: UpcallPolicy) {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    for i in 1..=5 {
        poster.post(i).unwrap();
    }
    let (seen, s) = shared_vec();
    let mut up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::Any, move |ev, _| {
        let v = ev.unwrap();
        s.lock().unwrap().push(v);
        if v == 3 {
            panic!("handler panics on 3");
        }
    });
    // INVOC_ANY runs the upcall on this thread; the panic reaches us.
    let r = catch_unwind(AssertUnwindSafe(|| up.set_policy(policy, Invoke::Any)));
    assert!(r.is_err(), "the handler's panic reaches the caller");
    let q = up.query();
    assert!(!q.in_upcall, "in_upcall cleared on unwind");
    assert_eq!(q.upcalls_in_flight, 0);
    assert_eq!(q.len, 2, "events after the panicking one stay queued");
    assert_eq!(q.policy, policy, "the policy survives the panic");
    // The next post starts a fresh upcall that delivers the rest.
    poster.post(6).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [1, 2, 3, 4, 5, 6],
        "exactly once, in order"
    );
    let q = up.query();
    assert!(!q.in_upcall);
    assert_eq!((q.len, q.dequeued, q.upcalls), (0, 6, 6));
    let mut consumer = up.teardown();
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
}

struct PanickingWaker {
    wakes: AtomicUsize,
}

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        panic!("waker panics on wake");
    }
}

/// Poll `recv` once with a waker that panics when woken; it must be pending.
fn register_panicking_waker(consumer: &mut evd::Consumer<u32>) -> Arc<PanickingWaker> {
    let w = Arc::new(PanickingWaker {
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(w.clone());
    let mut cx = Context::from_waker(&waker);
    let mut recv = consumer.recv();
    assert_eq!(Pin::new(&mut recv).poll(&mut cx), Poll::Pending);
    w
}

#[test]
fn allocation_failure_at_creation_is_a_typed_error_not_an_abort() {
    // 4 slots of 64 TiB: 256 TiB, more than the x86-64 user address space,
    // so the allocator refuses it whatever the overcommit policy.
    type Huge = [u8; 1 << 46];
    assert_eq!(
        evd::bounded::<Huge>(4).unwrap_err(),
        CreateError::AllocFailed { capacity: 4 }
    );
    // A byte size that overflows `isize`: refused before the allocator.
    type Big = [u8; 1 << 32];
    assert_eq!(
        evd::bounded::<Big>(evd::MAX_CAPACITY).unwrap_err(),
        CreateError::AllocFailed {
            capacity: evd::MAX_CAPACITY
        }
    );
    assert_eq!(
        evd::bounded::<u8>(usize::MAX).unwrap_err(),
        CreateError::CapacityTooLarge {
            requested: usize::MAX
        }
    );
}

#[test]
fn panicking_single_instance_upcall_loses_no_event() {
    panicking_upcall_keeps_every_event(UpcallPolicy::SingleInstance);
}

#[test]
fn panicking_many_instances_upcall_loses_no_event() {
    panicking_upcall_keeps_every_event(UpcallPolicy::ManyInstances);
}

#[test]
fn panicking_upcall_on_a_posting_thread_leaves_the_evd_usable() {
    let (poster, consumer) = evd::bounded::<u32>(8).unwrap();
    let (seen, s) = shared_vec();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        let v = ev.unwrap();
        s.lock().unwrap().push(v);
        if v % 2 == 0 {
            panic!("even");
        }
    });
    for i in 0..10u32 {
        let p = poster.clone();
        let r = std::thread::spawn(move || p.post(i)).join();
        // The event is posted either way; the panic unwinds the poster.
        assert_eq!(r.is_err(), i % 2 == 0, "event {i}");
    }
    assert_eq!(*seen.lock().unwrap(), (0..10).collect::<Vec<_>>());
    assert!(!up.query().in_upcall);
    drop(up);
}

#[test]
fn a_waker_that_panics_on_wake_does_not_lose_the_event() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let w = register_panicking_waker(&mut consumer);
    assert!(consumer.query().armed);
    let r = catch_unwind(AssertUnwindSafe(|| poster.post(1)));
    assert!(r.is_err(), "the waker's panic reaches the poster");
    assert_eq!(w.wakes.load(SeqCst), 1, "woken exactly once");
    let q = consumer.query();
    assert!(!q.armed && q.notified, "the post took the notification");
    assert_eq!(q.len, 1, "the event was published before the wake");
    assert_eq!(consumer.try_dequeue(), Ok(1));
    // Still usable: arm, post, dequeue, and nothing wakes the old waker.
    assert_eq!(consumer.arm(), ArmStatus::Armed);
    poster.post(2).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(2));
    assert_eq!(w.wakes.load(SeqCst), 1);
}

#[test]
fn a_waker_that_panics_on_wake_during_close_still_closes() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let w = register_panicking_waker(&mut consumer);
    let r = catch_unwind(AssertUnwindSafe(|| poster.close()));
    assert!(r.is_err());
    assert_eq!(w.wakes.load(SeqCst), 1);
    assert!(poster.is_closed());
    assert_eq!(poster.post(1), Err(PostError::Closed(1)));
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
}
