//! loom models, one per race, in one binary (`--test loom`) with a file per
//! concern. Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p evd --release --features __loom --test loom`
//!
//! A lost wakeup shows up as a loom deadlock (every thread parked); a lost or
//! duplicated event as a failed assertion. Consumers run on spawned threads and
//! posters on the main thread, so an unpark never lands on a thread blocked in
//! `join` (loom issue 249).
//!
//! The concerns' files are included at the crate root, not declared as
//! modules, so that a model's test name is its function's name:
//! `scripts/loom-mutants` runs models by `--exact` name. They therefore hold
//! no `use` items of their own; the imports are here.
#![cfg(loom)]

use evd::{ArmStatus, Invoke, PostError, TryDequeueError, UpcallPolicy, WaitError};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use std::time::Duration;

// Post against arm: the arm-then-check protocol and its notification.
include!("arm.rs");
// Upcalls: single and many instances, FnMut handlers, teardown, INVOC_NEW.
include!("upcall.rs");
// Loss and close: reports, end of stream, unwaitable.
include!("close.rs");
// Resize under a post.
include!("resize.rs");
// Posters waiting for room.
include!("room.rs");
// User code that panics inside a post or a wake.
include!("panics.rs");
// The CNO: enable, disable, modify, unbind, close against posts.
include!("cno.rs");
// The consumer's pacing (`core/src/pace.rs`): the linger of a dequeue that
// finds nothing after a run, and the gaps of a wait's back-off. Under loom
// each is a yield (no clock), followed by the same look a dequeue makes
// anyway; these models check that the look after it, with posts and a close
// landing around it, loses no event and no wakeup.
include!("pace.rs");
// The async waits: a poster's `closed()` against close, a consumer's
// `recv_batch` against a post.
include!("async_waits.rs");
// Permits: taken against posts, sent against an arm, dropped against a
// poster waiting for room.
include!("permits.rs");
// The consumer's waker slot: a take, then the next registration.
include!("waker_slot.rs");
// The eventfd: made against a post or close that answers an arm, and the
// epoll-style loop that waits on it.
include!("eventfd.rs");

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

/// [`model`] with the EVDs' room barrier as on a system without
/// `membarrier`: `SeqCst` fences on both sides, the consumer's on the cold
/// path its always-set flag takes.
fn model_without_membarrier<F: Fn() + Sync + Send + 'static>(f: F) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            evd::model_room_barrier_without_membarrier(false);
        }
    }
    let _reset = Reset;
    evd::model_room_barrier_without_membarrier(true);
    model(f);
}

/// Drain everything, blocking until end of stream. Its models post nothing
/// lossy, so a loss report is a failure.
fn drain_to_end(consumer: &mut evd::Consumer<u32>) -> Vec<u32> {
    drain_until_closed(consumer, Duration::ZERO)
}

/// Take events until end of stream with busy `try_dequeue`, waiting (with
/// `budget` of spin and back-off) whenever nothing is ready. Its models
/// lose nothing: a loss report fails them.
fn drain_until_closed(consumer: &mut evd::Consumer<u32>, budget: Duration) -> Vec<u32> {
    consumer.set_spin_budget(budget);
    let mut got = Vec::new();
    loop {
        match consumer.try_dequeue() {
            Ok(v) => got.push(v),
            Err(TryDequeueError::Closed) => return got,
            Err(TryDequeueError::Empty) => match consumer.wait(1, None) {
                Ok(ready) => assert!(ready >= 1, "wait(1) returned with {ready} ready"),
                Err(WaitError::Closed { .. }) => {}
                Err(e) => panic!("unexpected {e}"),
            },
            Err(e) => panic!("unexpected {e}"),
        }
    }
}

/// One race: `before` posted to an EVD of `capacity` slots, a consumer
/// thread running `consume` on it while this thread posts `after` and drops
/// its poster (the EVD closes); `consume` must return every event, in order.
fn consumer_vs_last_post(
    capacity: usize,
    before: &[u32],
    after: u32,
    consume: fn(&mut evd::Consumer<u32>) -> Vec<u32>,
) {
    let (poster, mut consumer) = evd::bounded::<u32>(capacity).unwrap();
    for &ev in before {
        poster.post(ev).unwrap();
    }
    let c = thread::spawn(move || consume(&mut consumer));
    poster.post(after).unwrap();
    drop(poster);
    let mut all = before.to_vec();
    all.push(after);
    assert_eq!(c.join().unwrap(), all);
}

/// A one-slot ring, full: `first` is queued in it.
fn full_ring(first: u32) -> (evd::Poster<u32>, evd::Consumer<u32>) {
    let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(first).unwrap();
    (poster, consumer)
}

/// A thread that posts `ev` with `post_blocking` (waiting for room).
fn post_blocking_on_a_thread(
    poster: &evd::Poster<u32>,
    ev: u32,
) -> thread::JoinHandle<Result<(), PostError<u32>>> {
    let p = poster.clone();
    thread::spawn(move || p.post_blocking(ev))
}

/// Take events and loss reports, blocking whenever nothing is ready, until
/// the events plus the events reported lost make `n`; `take` gets each
/// event. Returns how many events came and how many were reported lost. The
/// EVD must stay open meanwhile.
fn take_events_and_reports<T>(
    consumer: &mut evd::Consumer<T>,
    n: u64,
    mut take: impl FnMut(T),
) -> (u64, u64) {
    let (mut events, mut reports) = (0, 0);
    while events + reports < n {
        match consumer.try_dequeue() {
            Ok(ev) => {
                take(ev);
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
}

/// `consumer` as upcalls under `policy` (for any event) whose handler adds
/// `count(event or report)` to the counter returned with them.
fn counting_upcalls<T: Send + 'static>(
    consumer: evd::Consumer<T>,
    policy: UpcallPolicy,
    count: impl Fn(Result<T, evd::Overflow>) -> usize + Send + Sync + 'static,
) -> (evd::Upcalls<T>, Arc<AtomicUsize>) {
    let counted = Arc::new(AtomicUsize::new(0));
    let c = counted.clone();
    let upcalls = consumer.into_upcalls(policy, Invoke::Any, move |ev, _| {
        c.fetch_add(count(ev), Ordering::SeqCst);
    });
    (upcalls, counted)
}

/// Tears `upcalls` down and returns `counted` plus what the teardown hands
/// back: one for each event left queued (given to `take`), and what each
/// loss report says was lost.
fn count_after_teardown<T: Send>(
    upcalls: evd::Upcalls<T>,
    counted: &AtomicUsize,
    mut take: impl FnMut(T),
) -> usize {
    let mut consumer = upcalls.teardown();
    let mut total = counted.load(Ordering::SeqCst);
    loop {
        match consumer.try_dequeue() {
            Ok(ev) => {
                take(ev);
                total += 1;
            }
            Err(TryDequeueError::Overflow(o)) => total += o.lost as usize,
            Err(_) => break,
        }
    }
    total
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
