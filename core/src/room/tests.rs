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
/// A waker and its counter.
type NamedWaker = (Arc<Named>, Waker);
fn named(_n: usize) -> NamedWaker {
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

/// A queue `n` seats joined in order, each with a waker of its own: the
/// queue, the wakers (to join again with), their counters (for `who`) and
/// the seats.
fn joined(n: usize) -> (WaitQueue, Vec<NamedWaker>, Vec<Arc<Named>>, Vec<Seat>) {
    let mut q = WaitQueue::default();
    let ws: Vec<_> = (0..n).map(named).collect();
    let arcs: Vec<_> = ws.iter().map(|(a, _)| a.clone()).collect();
    let mut seats: Vec<Seat> = (0..n).map(|_| Seat::default()).collect();
    for (s, (_, w)) in seats.iter_mut().zip(&ws) {
        q.join(s, w.clone());
    }
    (q, ws, arcs, seats)
}

#[test]
fn waiters_are_woken_first_come_first_served() {
    let mut q = WaitQueue::default();
    let ws: Vec<_> = (0..3).map(named).collect();
    let mut seats: Vec<Seat> = (0..3).map(|_| Seat::default()).collect();
    for (s, (_, w)) in seats.iter_mut().zip(&ws) {
        assert_eq!(q.join(s, w.clone()).0, Joined::Now);
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
    q.join(&mut s0, w0.clone());
    q.join(&mut s1, w1.clone());
    assert_eq!(q.join(&mut s0, w2.clone()).0, Joined::Already);
    assert_eq!(q.len(), 2);
    let arcs = [a0, a1, a2];
    assert_eq!(who(&mut q, &arcs), Some(2), "seat 0, with its new waker");
    assert_eq!(who(&mut q, &arcs), Some(1));
}

#[test]
fn a_woken_waiter_that_rejoins_goes_to_the_front() {
    let (mut q, ws, arcs, mut seats) = joined(3);
    assert_eq!(who(&mut q, &arcs), Some(0));
    // Seat 0 lost the slot to another poster and waits again.
    assert_eq!(q.join(&mut seats[0], ws[0].1.clone()).0, Joined::Now);
    assert_eq!(who(&mut q, &arcs), Some(0));
    assert_eq!(who(&mut q, &arcs), Some(1));
}

#[test]
fn leaving_while_queued_wakes_nobody() {
    let mut q = WaitQueue::default();
    let (_a0, w0) = named(0);
    let (a1, w1) = named(1);
    let (mut s0, mut s1) = (Seat::default(), Seat::default());
    q.join(&mut s0, w0.clone());
    q.join(&mut s1, w1.clone());
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
    q.join(&mut s0, w0.clone());
    q.join(&mut s1, w1.clone());
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
    q.join(&mut s0, w0.clone());
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
        q.join(s, w.clone());
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
        q.join(&mut s0, w0.clone()).1.is_none(),
        "a new seat replaces nothing"
    );
    let (j, old) = q.join(&mut s0, w1.clone());
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

#[test]
fn waiters_woken_together_that_rejoin_keep_their_order() {
    let (mut q, ws, arcs, mut seats) = joined(4);
    // A batch dequeue frees two slots: seats 0 and 1 are woken, another
    // poster takes both slots, and they rejoin in the order they were woken.
    assert_eq!(who(&mut q, &arcs), Some(0));
    assert_eq!(who(&mut q, &arcs), Some(1));
    assert_eq!(q.join(&mut seats[0], ws[0].1.clone()).0, Joined::Now);
    assert_eq!(q.join(&mut seats[1], ws[1].1.clone()).0, Joined::Now);
    let order: Vec<_> = (0..4).map(|_| who(&mut q, &arcs).unwrap()).collect();
    assert_eq!(order, [0, 1, 2, 3], "first come, first served");
}

#[test]
fn waiters_that_all_rejoin_after_a_wake_all_keep_their_order() {
    let (mut q, ws, arcs, mut seats) = joined(3);
    // A growing resize wakes all three; the ring is full again by the time
    // they run, and they rejoin in the order they were woken.
    assert_eq!(q.take_all().count(), 3);
    for i in [0, 1, 2] {
        assert_eq!(q.join(&mut seats[i], ws[i].1.clone()).0, Joined::Now);
    }
    let order: Vec<_> = (0..3).map(|_| who(&mut q, &arcs).unwrap()).collect();
    assert_eq!(order, [0, 1, 2]);
}

#[test]
fn joining_again_with_the_same_task_hands_the_clone_back() {
    let mut q = WaitQueue::default();
    let (_a0, w0) = named(0);
    let mut s0 = Seat::default();
    q.join(&mut s0, w0.clone());
    let (j, unused) = q.join(&mut s0, w0.clone());
    assert_eq!(j, Joined::Already);
    assert!(unused.is_some(), "the caller drops it after unlocking");
    assert_eq!(q.len(), 1);
}

/// The queue behind its lock, with the flags (`RoomQueue`, `RoomFlags`):
/// the crate's lock and atomics, which loom and shuttle provide only inside
/// a model (their models are `core/tests/loom/room.rs` and the shuttle runs).
#[cfg(not(any(loom, shuttle)))]
mod behind_the_lock {
    use super::*;

    /// The consumer side and the lock, on a queue of its own: no EVD.
    fn room() -> (RoomQueue, RoomFlags, AtomicU64) {
        (RoomQueue::new(), RoomFlags::new(), AtomicU64::new(0))
    }

    #[test]
    fn a_head_store_that_frees_nothing_wakes_nobody() {
        let (room, flags, woken) = room();
        let (a0, w0) = named(0);
        let mut s0 = Seat::default();
        room.join(&flags, &mut s0, &w0);
        room.wake(&flags, 0, &woken);
        assert_eq!(a0.0.load(Ordering::Relaxed), 0);
        assert!(flags.waiting(), "still queued");
        room.wake(&flags, 1, &woken);
        assert_eq!(a0.0.load(Ordering::Relaxed), 1);
    }

    /// A waker whose `clone` panics; its other calls do nothing.
    fn waker_whose_clone_panics() -> Waker {
        fn clone(_: *const ()) -> std::task::RawWaker {
            panic!("the waker's clone");
        }
        fn nothing(_: *const ()) {}
        static VTABLE: std::task::RawWakerVTable =
            std::task::RawWakerVTable::new(clone, nothing, nothing, nothing);
        // SAFETY: no function of the vtable reads the data pointer, so a null
        // one keeps RawWaker's contract.
        unsafe { Waker::from_raw(std::task::RawWaker::new(std::ptr::null(), &VTABLE)) }
    }

    #[test]
    fn a_join_whose_waker_clone_panics_leaves_the_queue_and_the_seat_as_they_were() {
        let (room, flags, woken) = room();
        let (a0, w0) = named(0);
        let mut s0 = Seat::default();
        room.join(&flags, &mut s0, &w0);
        let mut s1 = Seat::default();
        let joined = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            room.join(&flags, &mut s1, &waker_whose_clone_panics())
        }));
        assert!(joined.is_err());
        assert!(!s1.is_taken(), "never queued, so not taken");
        // Leaving it (as its post's unwind guard does) wakes nobody: seat 0 was
        // never woken, and a seat that never joined has no wake to pass on.
        room.leave(&flags, &mut s1, false, || false, &woken);
        assert_eq!(a0.0.load(Ordering::Relaxed), 0);
        assert!(flags.waiting(), "seat 0 still queued");
    }
}
