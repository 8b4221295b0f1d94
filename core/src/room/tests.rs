//! The wait queue's rules, on the queue alone (no EVD, no threads).

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Wake;

/// A waker that counts its wakes, with a name to tell them apart.
struct Named(AtomicUsize);
impl Wake for Named {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}
fn named(_n: usize) -> (Arc<Named>, Waker) {
    let a = Arc::new(Named(AtomicUsize::new(0)));
    (a.clone(), Waker::from(a))
}
fn who(q: &mut WaitQueue, wakers: &[Arc<Named>]) -> Option<usize> {
    let w = q.pop()?;
    w.wake();
    wakers
        .iter()
        .position(|a| a.0.swap(0, Ordering::Relaxed) == 1)
}

#[test]
fn waiters_are_woken_first_come_first_served() {
    let mut q = WaitQueue::default();
    let ws: Vec<_> = (0..3).map(named).collect();
    let mut seats: Vec<Seat> = (0..3).map(|_| Seat::default()).collect();
    for (s, (_, w)) in seats.iter_mut().zip(&ws) {
        assert_eq!(q.join(s, w).0, Joined::Now);
    }
    let arcs: Vec<_> = ws.iter().map(|(a, _)| a.clone()).collect();
    assert_eq!(who(&mut q, &arcs), Some(0));
    assert_eq!(who(&mut q, &arcs), Some(1));
    assert_eq!(who(&mut q, &arcs), Some(2));
    assert!(q.is_empty() && q.pop().is_none());
}

#[test]
fn joining_again_while_queued_keeps_the_place_and_replaces_the_waker() {
    let mut q = WaitQueue::default();
    let (a0, w0) = named(0);
    let (a1, w1) = named(1);
    let (a2, w2) = named(2);
    let (mut s0, mut s1) = (Seat::default(), Seat::default());
    q.join(&mut s0, &w0);
    q.join(&mut s1, &w1);
    assert_eq!(q.join(&mut s0, &w2).0, Joined::Already);
    assert_eq!(q.len(), 2);
    let arcs = [a0, a1, a2];
    assert_eq!(who(&mut q, &arcs), Some(2), "seat 0, with its new waker");
    assert_eq!(who(&mut q, &arcs), Some(1));
}

#[test]
fn a_woken_waiter_that_rejoins_goes_to_the_front() {
    let mut q = WaitQueue::default();
    let ws: Vec<_> = (0..3).map(named).collect();
    let arcs: Vec<_> = ws.iter().map(|(a, _)| a.clone()).collect();
    let mut seats: Vec<Seat> = (0..3).map(|_| Seat::default()).collect();
    for (s, (_, w)) in seats.iter_mut().zip(&ws) {
        q.join(s, w);
    }
    assert_eq!(who(&mut q, &arcs), Some(0));
    // Seat 0 lost the slot to another poster and waits again.
    assert_eq!(q.join(&mut seats[0], &ws[0].1).0, Joined::Now);
    assert_eq!(who(&mut q, &arcs), Some(0));
    assert_eq!(who(&mut q, &arcs), Some(1));
}

#[test]
fn leaving_while_queued_wakes_nobody() {
    let mut q = WaitQueue::default();
    let (_a0, w0) = named(0);
    let (a1, w1) = named(1);
    let (mut s0, mut s1) = (Seat::default(), Seat::default());
    q.join(&mut s0, &w0);
    q.join(&mut s1, &w1);
    assert_eq!(q.leave(&mut s0).0, Left::Queued);
    assert!(!s0.is_taken());
    assert_eq!(q.len(), 1);
    assert_eq!(who(&mut q, &[a1]), Some(0));
}

#[test]
fn leaving_after_a_wake_says_so() {
    let mut q = WaitQueue::default();
    let (a0, w0) = named(0);
    let (a1, w1) = named(1);
    let (mut s0, mut s1) = (Seat::default(), Seat::default());
    q.join(&mut s0, &w0);
    q.join(&mut s1, &w1);
    let arcs = [a0, a1];
    assert_eq!(who(&mut q, &arcs), Some(0));
    assert_eq!(q.leave(&mut s0).0, Left::Woken);
    assert_eq!(q.len(), 1, "the caller decides whether to pass the wake on");
    assert_eq!(who(&mut q, &arcs), Some(1));
    // Leaving twice, or leaving a seat that never joined, finds nothing.
    assert_eq!(q.leave(&mut s0).0, Left::Absent);
    assert_eq!(q.leave(&mut Seat::default()).0, Left::Absent);
}

#[test]
fn a_woken_waiter_alone_leaves_an_empty_queue() {
    let mut q = WaitQueue::default();
    let (_a0, w0) = named(0);
    let mut s0 = Seat::default();
    q.join(&mut s0, &w0);
    assert!(q.pop().is_some());
    assert_eq!(q.leave(&mut s0).0, Left::Woken);
    assert!(q.is_empty() && q.pop().is_none());
}

#[test]
fn take_all_empties_the_queue_front_first() {
    let mut q = WaitQueue::default();
    let ws: Vec<_> = (0..3).map(named).collect();
    let mut seats: Vec<Seat> = (0..3).map(|_| Seat::default()).collect();
    for (s, (_, w)) in seats.iter_mut().zip(&ws) {
        q.join(s, w);
    }
    let all: Vec<Waker> = q.take_all().collect();
    assert_eq!(all.len(), 3);
    assert!(q.is_empty());
    // Front first: waking the first taken wakes seat 0's waker only.
    // (Checked by waking, not `will_wake`, which may give false
    // negatives, as under Miri.)
    let mut all = all.into_iter();
    all.next().unwrap().wake();
    let counts: Vec<usize> = ws
        .iter()
        .map(|(a, _)| a.0.load(Ordering::Relaxed))
        .collect();
    assert_eq!(counts, [1, 0, 0]);
    all.for_each(Waker::wake);
    // Each taken seat is woken: leaving says so.
    assert_eq!(q.leave(&mut seats[1]).0, Left::Woken);
}

#[test]
fn replaced_and_removed_wakers_are_handed_back() {
    let mut q = WaitQueue::default();
    let (a0, w0) = named(0);
    let (a1, w1) = named(1);
    let mut s0 = Seat::default();
    assert!(
        q.join(&mut s0, &w0).1.is_none(),
        "a new seat replaces nothing"
    );
    let (j, old) = q.join(&mut s0, &w1);
    assert_eq!(j, Joined::Already);
    // Told apart by waking them (`will_wake` may give false negatives).
    old.expect("another task's waker replaces the old one")
        .wake();
    assert_eq!(a0.0.load(Ordering::Relaxed), 1);
    let (l, removed) = q.leave(&mut s0);
    assert_eq!(l, Left::Queued);
    removed.expect("the queued waker is handed back").wake();
    assert_eq!(a1.0.load(Ordering::Relaxed), 1);
}
