//! Zero allocations on the driver's path in steady state: a completion
//! arrives, the user's loop runs `Driver::process` (the ring's reap, the
//! feed's cycle, the post into the EVD, the re-arm) and dequeues it, in event
//! mode and in adaptive mode.
//!
//! A counting global allocator counts the allocations made by this test's
//! thread while a thread-local switch is on. Everything here runs on the test
//! thread (the software HCA's push too), so none is missed.

mod common;

use common::driver::driver_serving;
use evd_verbs::WorkCompletion;
use evd_verbs::soft::{SoftCq, SoftCqProducer};
use evd_verbs::{AdaptiveConfig, CqId, Driver, Feed, FeedMode, VerbsEvent};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

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

/// Completions per round trip: one, then a burst the size of one poll.
const BURSTS: [u64; 2] = [1, 16];

/// One completion round: the HCA completes `burst` work requests, the loop
/// drives the ring until the EVD holds them all, and takes them.
fn round(
    driver: &mut Driver,
    hca: &SoftCqProducer,
    consumer: &mut evd::Consumer<VerbsEvent>,
    first: u64,
    burst: u64,
) {
    for id in first..first + burst {
        hca.push(WorkCompletion::new(id)).unwrap();
    }
    let mut got = 0;
    let mut turns = 0;
    while got < burst {
        // A timeout bounds each wait (a watchdog: a lost wake fails the
        // turn count below instead of hanging).
        driver.process(Some(Duration::from_millis(100))).unwrap();
        while let Ok(event) = consumer.try_dequeue() {
            let VerbsEvent::Completion { wc, .. } = event else {
                panic!("unexpected {event:?}");
            };
            assert_eq!(wc.wr_id, first + got, "FIFO");
            got += 1;
        }
        turns += 1;
        assert!(turns < 1000, "completions not delivered");
    }
}

fn steady_state_allocates_nothing(mode: FeedMode) {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (cq, hca) = SoftCq::new(64).unwrap();
    let (mut driver, _) = driver_serving(Feed::new(cq, CqId(0), poster), mode);
    let mut next = 0;
    // Warm up: every scratch buffer reaches the largest batch it will hold.
    for _ in 0..64 {
        for burst in BURSTS {
            round(&mut driver, &hca, &mut consumer, next, burst);
            next += burst;
        }
    }
    let n = allocations_in(|| {
        for _ in 0..256 {
            for burst in BURSTS {
                round(&mut driver, &hca, &mut consumer, next, burst);
                next += burst;
            }
        }
    });
    assert_eq!(n, 0, "{mode:?}: allocations in 512 steady-state rounds");
}

#[test]
fn an_event_mode_round_trip_allocates_nothing() {
    steady_state_allocates_nothing(FeedMode::Event);
}

#[test]
fn an_adaptive_mode_round_trip_allocates_nothing() {
    steady_state_allocates_nothing(FeedMode::Adaptive(AdaptiveConfig::default()));
}
