//! Zero allocations on the hot path in steady state: post, batch post,
//! dequeue, batch dequeue, arm, the notification of an already-registered waker, the async
//! poll that registers it, and a post that runs a SingleInstance upcall.
//!
//! A counting global allocator counts the allocations made by this test's
//! thread while a thread-local switch is on.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Wake, Waker};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: defers to the system allocator; the bookkeeping touches only
// const-initialized thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(|a| a.get())
}

struct CountingWaker(AtomicU64);
impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

const ROUNDS: u64 = 1_000;

/// One steady-state round of every hot-path operation.
fn round(
    poster: &evd::Poster<u64>,
    consumer: &mut evd::Consumer<u64>,
    batch: &mut Vec<u64>,
    cx: &mut Context<'_>,
    i: u64,
) {
    poster.post(i).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(i));
    for k in 0..4 {
        poster.post(i + k).unwrap();
    }
    batch.clear();
    assert_eq!(consumer.dequeue_batch(batch, 8), Ok(4));
    // The same four again, through one batch post.
    assert_eq!(poster.post_batch(batch), Ok(4));
    assert_eq!(consumer.dequeue_batch(batch, 8), Ok(4));
    batch.clear();
    assert_eq!(consumer.arm(), evd::ArmStatus::Armed);
    // Register the task's waker and arm through the async path...
    let mut recv = consumer.recv();
    assert!(Pin::new(&mut recv).poll(cx).is_pending());
    drop(recv);
    // ...then a post notifies the registered waker.
    poster.post(i).unwrap();
    assert_eq!(consumer.try_dequeue(), Ok(i));
}

#[test]
fn hot_paths_do_not_allocate_in_steady_state() {
    let (poster, mut consumer) = evd::bounded::<u64>(64).unwrap();
    let wakes = Arc::new(CountingWaker(AtomicU64::new(0)));
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    let mut batch = Vec::with_capacity(8);

    round(&poster, &mut consumer, &mut batch, &mut cx, 0); // warm-up
    let n = allocations_in(|| {
        for i in 1..=ROUNDS {
            round(&poster, &mut consumer, &mut batch, &mut cx, i);
        }
    });
    assert_eq!(n, 0, "allocations on post/dequeue/batch/arm/notify");
    assert_eq!(
        wakes.0.load(Ordering::Relaxed),
        ROUNDS + 1,
        "each round notified the registered waker exactly once"
    );

    // Upcalls: a post into an idle SingleInstance EVD runs the handler.
    let delivered = Arc::new(AtomicU64::new(0));
    let d = delivered.clone();
    let upcalls = consumer.into_upcalls(
        evd::UpcallPolicy::SingleInstance,
        evd::Invoke::Any,
        move |ev, _| {
            d.fetch_add(ev.unwrap(), Ordering::Relaxed);
        },
    );
    poster.post(1).unwrap(); // warm-up: epoch handle, thread-locals
    let n = allocations_in(|| {
        for _ in 0..ROUNDS {
            poster.post(1).unwrap();
        }
    });
    assert_eq!(n, 0, "allocations on a post that runs an upcall");
    assert_eq!(delivered.load(Ordering::Relaxed), ROUNDS + 1);
    drop(upcalls);
}
