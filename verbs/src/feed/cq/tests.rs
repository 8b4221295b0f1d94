//! The feed's unit tests on the software CQ.

use super::*;
use crate::event::{AsyncEvent, AsyncEventKind};
use crate::soft::SoftCq;

/// An application's event type, bigger than `VerbsEvent`, so a `held`
/// sized for the wrong type would show.
#[derive(Debug)]
enum AppEvent {
    Verbs(VerbsEvent),
    #[allow(dead_code)]
    Tick([u64; 8]),
}
impl From<VerbsEvent> for AppEvent {
    fn from(ev: VerbsEvent) -> Self {
        AppEvent::Verbs(ev)
    }
}

fn tick() -> AppEvent {
    AppEvent::Tick([0; 8])
}

#[test]
fn held_keeps_its_one_allocation_through_refusals_and_a_failure() {
    let (poster, mut consumer) = evd::bounded::<AppEvent>(4).unwrap();
    let (cq, hca) = SoftCq::new(256).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster.clone());
    let buffer = (feed.held.as_ptr(), feed.held.capacity());
    assert_eq!(buffer.1, POLL_BATCH);
    for round in 0..20u64 {
        hca.push_batch(&[WorkCompletion::new(round); 3]);
        // Another poster takes the room the feed read (4 free, 3
        // polled): 2 ticks leave room for 2 of them, 4 for none; the
        // rest is held as `AppEvent`s.
        let p = poster.clone();
        let ticks = if round % 2 == 0 { 2 } else { 4 };
        hca.during_next_poll(move || {
            for _ in 0..ticks {
                p.post(tick()).unwrap();
            }
        });
        feed.progress(64);
        while consumer.try_dequeue().is_ok() {}
        feed.progress(64);
        while consumer.try_dequeue().is_ok() {}
    }
    // Half the rounds hold 1 of 3, the other half all 3.
    assert_eq!(feed.stats().held, 10 + 10 * 3, "{:?}", feed.stats());
    assert_eq!(feed.stats().delivered, 60);
    hca.fail_next_poll(5);
    assert_eq!(feed.progress(64).status, FeedStatus::Failed);
    assert!(matches!(
        consumer.try_dequeue(),
        Ok(AppEvent::Verbs(VerbsEvent::Async(AsyncEvent {
            kind: AsyncEventKind::CqError,
            ..
        })))
    ));
    assert_eq!((feed.held.as_ptr(), feed.held.capacity()), buffer);
}

/// An event type whose `From` panics on the completion with `wr_id` 1.
#[derive(Debug)]
struct PanicsOnOne(u64);
impl From<VerbsEvent> for PanicsOnOne {
    fn from(ev: VerbsEvent) -> Self {
        match ev {
            VerbsEvent::Completion { wc, .. } => {
                assert_ne!(wc.wr_id, 1, "this From fails on completion 1");
                PanicsOnOne(wc.wr_id)
            }
            _ => PanicsOnOne(u64::MAX),
        }
    }
}

/// A `From` that panics on one completion of a poll loses that one only:
/// the next call converts and posts the rest of the poll, in order, and
/// counts the loss.
#[test]
fn a_panicking_from_loses_only_the_completion_it_panicked_on() {
    let (poster, mut consumer) = evd::bounded::<PanicsOnOne>(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster);
    hca.push_batch(&[0, 1, 2, 3].map(WorkCompletion::new));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    assert!(r.is_err(), "the From's panic comes out of the call");
    assert_eq!(feed.stats().from_panics, 1, "counted before the next call");
    let p = feed.progress(16);
    assert_eq!(p.status, FeedStatus::Drained);
    let got: Vec<u64> = std::iter::from_fn(|| consumer.try_dequeue().ok().map(|e| e.0)).collect();
    assert_eq!(got, [0, 2, 3]);
    assert_eq!(feed.stats().from_panics, 1, "once");
    assert_eq!(feed.stats().polled, 4);
}
