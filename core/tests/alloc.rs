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
    /// Allocations of at least this many bytes fail (0: none).
    static FAIL_FROM: Cell<usize> = const { Cell::new(0) };
}

/// Count an allocation of `size` bytes on this thread (while counting);
/// true if it is to fail.
fn counted_and_fails(size: usize) -> bool {
    if COUNTING.with(|c| c.get()) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
    FAIL_FROM.with(|f| f.get() != 0 && size >= f.get())
}

// SAFETY: defers to the system allocator, or reports a failure (null) as it
// may; the bookkeeping touches only const-initialized thread-locals, which
// never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted_and_fails(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if counted_and_fails(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counted_and_fails(new_size) {
            return std::ptr::null_mut();
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

/// `f`'s result, allocations of at least `bytes` on this thread failing
/// while it runs.
fn failing_from<R>(bytes: usize, f: impl FnOnce() -> R) -> R {
    FAIL_FROM.with(|c| c.set(bytes));
    let r = f();
    FAIL_FROM.with(|c| c.set(0));
    r
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

#[test]
fn a_cno_whose_slot_table_cannot_be_allocated_is_refused_not_aborted() {
    const EVDS: usize = 4096;
    let slots = 2 * EVDS;
    // The ready ring (a stamp and a u32 per slot, 16 bytes) fits; the slot
    // table (a cache line per slot) and the free list's key log (two 16-byte
    // entries per slot) do not.
    let refused = failing_from(32 * slots, || evd::Cno::new(EVDS).err());
    assert_eq!(
        refused,
        Some(evd::CreateError::AllocFailed { capacity: slots })
    );
    assert!(
        evd::Cno::new(EVDS).is_ok(),
        "only the failing allocator refused it"
    );
    // A ready ring that cannot be allocated is refused too.
    let refused = failing_from(8 * slots, || evd::Cno::new(EVDS).err());
    assert!(
        matches!(refused, Some(evd::CreateError::AllocFailed { .. })),
        "{refused:?}"
    );
}

#[test]
fn binding_enabling_and_unbinding_a_cno_do_not_allocate() {
    let mut cno = evd::Cno::new(4).unwrap();
    let mut evds: Vec<_> = (0..4).map(|_| evd::bounded::<u64>(8).unwrap()).collect();
    let mut keys = Vec::with_capacity(8);
    let mut cycle = |evds: &mut [(evd::Poster<u64>, evd::Consumer<u64>)], i: u64| {
        for (k, (p, c)) in evds.iter_mut().enumerate() {
            c.bind_cno(&cno, k as u64).unwrap();
            assert_eq!(c.enable_cno(), Ok(evd::ArmStatus::Armed));
            p.post(i).unwrap();
        }
        keys.clear();
        cno.try_ready(&mut keys);
        assert_eq!(keys.len(), evds.len());
        for (k, (p, c)) in evds.iter_mut().enumerate() {
            assert_eq!(c.try_dequeue(), Ok(i));
            // Enabled and triggered again: unbound with its index queued,
            // its slot freed by the next cycle's pop of that stale index.
            assert_eq!(c.enable_cno(), Ok(evd::ArmStatus::Armed));
            p.post(i).unwrap();
            assert_eq!(c.unbind_cno(), Some(k as u64));
            assert_eq!(c.try_dequeue(), Ok(i));
        }
    };
    // The warm-up binds each EVD to this CNO once: an EVD keeps an entry
    // for every CNO it was bound to, made at the first binding. The CNO
    // made every list it will need when it was created.
    cycle(&mut evds, 0);
    let n = allocations_in(|| {
        for i in 1..=ROUNDS {
            cycle(&mut evds, i);
        }
    });
    assert_eq!(n, 0, "allocations on bind/enable/trigger/unbind");
}
