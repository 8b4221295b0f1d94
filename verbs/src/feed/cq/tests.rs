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
