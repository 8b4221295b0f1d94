//! The feed's contract on the software CQ: batching and budgets, error
//! completions, the re-arm window, spurious events, backpressure, CQ
//! failures, and teardown.

mod common;

use common::hooked_cq::HookedCq;
use common::wc;
use evd::TryDequeueError;
use evd_verbs::soft::{PushError, SoftCq, SoftCqProducer, SoftDevice};
use evd_verbs::{
    AsyncElement, AsyncEvent, AsyncEventKind, CompletionQueue, CqId, Feed, FeedStatus, POLL_BATCH,
    PollError, Progress, VerbsEvent, WcStatus, WorkCompletion,
};

/// What an EVD held when it was emptied.
#[derive(Debug, Default)]
struct Held {
    /// The completions' work request ids, in order.
    ids: Vec<u64>,
    async_events: usize,
    overflow_reports: usize,
}

/// Empty the EVD.
fn take_all(consumer: &mut evd::Consumer<VerbsEvent>) -> Held {
    let mut held = Held::default();
    loop {
        match consumer.try_dequeue() {
            Ok(VerbsEvent::Completion { wc, .. }) => held.ids.push(wc.wr_id),
            Ok(VerbsEvent::Async(_)) => held.async_events += 1,
            Ok(other) => panic!("unexpected {other:?}"),
            Err(TryDequeueError::Overflow(_)) => held.overflow_reports += 1,
            Err(TryDequeueError::Empty) => return held,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}

/// The completions the EVD holds, which holds nothing else.
fn wr_ids(consumer: &mut evd::Consumer<VerbsEvent>) -> Vec<u64> {
    let held = take_all(consumer);
    assert_eq!(
        (held.async_events, held.overflow_reports),
        (0, 0),
        "{held:?}"
    );
    held.ids
}

/// An EVD of `capacity` and a feed into it (as `CqId(0)`) of a CQ
/// holding the completions of work requests `0..queued`, which has
/// delivered `first` of them.
fn raced(
    capacity: usize,
    queued: u64,
    first: usize,
) -> (evd::Consumer<VerbsEvent>, SoftCqProducer, Feed<SoftCq>) {
    let (poster, consumer) = evd::bounded(capacity).unwrap();
    let (cq, hca) = cq_holding(64, queued);
    let mut feed = Feed::new(cq, CqId(0), poster);
    assert_eq!(feed.progress(first).delivered, first);
    (consumer, hca, feed)
}

/// What a feed's step delivered, and why it stopped.
fn outcome(p: Progress) -> (usize, FeedStatus) {
    (p.delivered, p.status)
}

/// A soft CQ of `depth` holding the completions of work requests `0..n`.
fn cq_holding(depth: usize, n: u64) -> (SoftCq, SoftCqProducer) {
    let (cq, hca) = SoftCq::new(depth).unwrap();
    for i in 0..n {
        hca.push(wc(i)).unwrap();
    }
    (cq, hca)
}

#[test]
fn progress_respects_budget_and_batches() {
    let (poster, mut consumer) = evd::bounded(1024).unwrap();
    let (cq, hca) = cq_holding(1024, 100);
    let mut feed = Feed::new(cq, CqId(3), poster);
    assert_eq!(outcome(feed.progress(40)), (40, FeedStatus::Budget));
    // Polls are batched: 40 = 16 + 16 + 8.
    assert_eq!(feed.stats().polls, 3);
    assert_eq!(outcome(feed.progress(1000)), (60, FeedStatus::Drained));
    assert_eq!(wr_ids(&mut consumer), (0..100).collect::<Vec<_>>());
    assert_eq!(hca.stats().len, 0);
}

#[test]
fn completion_fields_and_errors_are_delivered() {
    let (poster, mut consumer) = evd::bounded(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(9), poster);
    let full = WorkCompletion::new(1)
        .with_status(WcStatus::REM_ACCESS_ERR)
        .with_opcode(evd_verbs::WcOpcode::RECV_RDMA_WITH_IMM)
        .with_vendor_err(0x81)
        .with_byte_len(4096)
        .with_imm_data(0xdead_beef)
        .with_qp_num(17)
        .with_src_qp(18)
        .with_flags(evd_verbs::WcFlags::WITH_IMM);
    hca.push(full).unwrap();
    hca.set_error_every(1);
    hca.push(wc(2)).unwrap();
    assert_eq!(feed.progress(16).delivered, 2);
    assert_eq!(
        consumer.try_dequeue(),
        Ok(VerbsEvent::Completion {
            cq: CqId(9),
            wc: full
        })
    );
    match consumer.try_dequeue() {
        Ok(VerbsEvent::Completion { wc, .. }) => {
            assert_eq!(wc.wr_id, 2);
            assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn completion_in_rearm_window_is_not_stranded() {
    let (poster, mut consumer) = evd::bounded(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster);
    assert_eq!(feed.arm_and_drain(64).unwrap().status, FeedStatus::Drained);
    hca.push(wc(1)).unwrap(); // armed: raises an event
    hca.complete_in_next_rearm_window(wc(2)); // lands between the drain and the re-arm
    let p = feed.on_channel_ready(64).unwrap();
    assert_eq!(p.status, FeedStatus::Drained);
    assert_eq!(wr_ids(&mut consumer), vec![1, 2]);
    // Armed, empty, nothing stranded: sleeping now is safe.
    let s = hca.stats();
    assert!(s.armed);
    assert_eq!(s.len, 0);
    assert!(!hca.is_stranded());
    assert_eq!(feed.stats().found_after_arm, 2);
}

#[test]
fn spurious_events_are_harmless_and_acked() {
    let (poster, mut consumer) = evd::bounded(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster);
    feed.arm_and_drain(64).unwrap();
    for _ in 0..40 {
        hca.inject_spurious_event();
    }
    assert_eq!(
        outcome(feed.on_channel_ready(64).unwrap()),
        (0, FeedStatus::Drained)
    );
    assert!(wr_ids(&mut consumer).is_empty());
    // Acked in batches of 16: 32 so far, 8 outstanding until teardown.
    let s = hca.stats();
    assert_eq!((s.events_got, s.events_acked), (40, 32));
    drop(feed);
    assert_eq!(hca.stats().unacked_at_destroy, Some(0));
}

#[test]
fn solicited_only_sleeps_through_unsolicited_completions() {
    let (poster, mut consumer) = evd::bounded(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster).solicited_only(true);
    feed.arm_and_drain(64).unwrap();
    hca.push(wc(1)).unwrap();
    assert_eq!(hca.stats().channel_events, 0);
    hca.push_solicited(wc(2)).unwrap();
    assert_eq!(hca.stats().channel_events, 1);
    feed.on_channel_ready(64).unwrap();
    assert_eq!(wr_ids(&mut consumer), vec![1, 2]);
}

#[test]
fn full_evd_applies_backpressure_without_loss() {
    let (poster, mut consumer) = evd::bounded(4).unwrap();
    let (cq, hca) = cq_holding(64, 10);
    let mut feed = Feed::new(cq, CqId(0), poster);
    assert_eq!(outcome(feed.progress(64)), (4, FeedStatus::Backpressure));
    // The rest waits in the CQ, not in the feed.
    assert_eq!(hca.stats().len, 6);
    // Event mode does not arm while blocked.
    assert_eq!(
        feed.arm_and_drain(64).unwrap().status,
        FeedStatus::Backpressure
    );
    assert!(!hca.stats().armed);
    let mut got = wr_ids(&mut consumer);
    assert_eq!(feed.progress(64).delivered, 4);
    got.extend(wr_ids(&mut consumer));
    assert_eq!(
        outcome(feed.arm_and_drain(64).unwrap()),
        (2, FeedStatus::Drained)
    );
    got.extend(wr_ids(&mut consumer));
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    // The feed never made the EVD refuse a post.
    assert_eq!(consumer.query().lost, 0);
    assert_eq!(feed.stats().backpressure, 3);
}

fn port_event() -> VerbsEvent {
    VerbsEvent::Async(evd_verbs::AsyncEvent::new(
        AsyncEventKind::PortActive,
        AsyncElement::Port(1),
    ))
}

/// During the feed's next poll (after it read the EVD's room), another
/// poster posts `n` events into the same EVD.
fn post_during_next_poll(
    hca: &evd_verbs::soft::SoftCqProducer,
    poster: &evd::Poster<VerbsEvent>,
    n: usize,
) {
    let p = poster.clone();
    hca.during_next_poll(move || {
        for _ in 0..n {
            p.post(port_event()).unwrap();
        }
    });
}

#[test]
fn a_feed_polls_only_what_the_evd_has_room_for() {
    let (poster, mut consumer) = evd::bounded(4).unwrap();
    let (cq, hca) = SoftCq::new(64).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster.clone());
    hca.push_batch(&[wc(0); 10]);
    poster.post(port_event()).unwrap();
    // Three free slots: three completions leave the CQ, seven stay there.
    assert_eq!(outcome(feed.progress(64)), (3, FeedStatus::Backpressure));
    assert_eq!(hca.stats().len, 7);
    assert_eq!(feed.stats().held, 0);
    // The EVD stays full: nothing more leaves the CQ.
    assert_eq!(feed.progress(64).delivered, 0);
    assert_eq!(hca.stats().len, 7);
    assert_eq!(feed.stats().polled, 3);
    assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(_))));
    assert_eq!(wr_ids(&mut consumer), [0, 0, 0]);
}

/// An arm that fails after the drain before it (completions held while the
/// EVD was full, and room since) delivered events: the call reports those
/// events and asks to be called again (`Budget`, unarmed); the next call
/// reports the arm's failure (a runner judges every failure: one hidden
/// behind each drain that delivered would never give the feed up), and the
/// one after arms, or fails again.
#[test]
fn an_arm_failing_after_a_drain_reports_what_the_drain_delivered_then_the_failure() {
    for lasting in [false, true] {
        let (mut consumer, hca, mut feed) = raced(4, 4, 2);
        post_during_next_poll(&hca, feed.poster(), 2);
        assert_eq!(outcome(feed.progress(64)), (0, FeedStatus::Backpressure));
        assert_eq!(feed.stats().held, 2);
        assert_eq!(take_all(&mut consumer).ids, [0, 1]);
        hca.fail_next_arm(libc::EIO);
        let p = feed.arm_and_drain(64).unwrap();
        assert_eq!(outcome(p), (2, FeedStatus::Budget), "lasting: {lasting}");
        assert!(!hca.stats().armed);
        assert_eq!(wr_ids(&mut consumer), [2, 3]);
        let e = feed.arm_and_drain(64).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "the arm's failure, next");
        if lasting {
            hca.fail_next_arm(libc::EIO);
            let e = feed.arm_and_drain(64).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EIO));
        } else {
            let p = feed.arm_and_drain(64).unwrap();
            assert_eq!(outcome(p), (0, FeedStatus::Drained));
            assert!(hca.stats().armed);
        }
    }
}

/// An arm's failure kept for the next call gives way to a failure of the
/// CQ itself meanwhile: the feed reports `Failed` (its `CqError`), not the
/// old arm error.
#[test]
fn a_kept_arm_failure_gives_way_to_the_cqs_own_failure() {
    let (mut consumer, hca, mut feed) = raced(4, 4, 2);
    post_during_next_poll(&hca, feed.poster(), 2);
    assert_eq!(outcome(feed.progress(64)), (0, FeedStatus::Backpressure));
    assert_eq!(take_all(&mut consumer).ids, [0, 1]);
    hca.fail_next_arm(libc::EIO);
    let p = feed.arm_and_drain(64).unwrap();
    assert_eq!(outcome(p), (2, FeedStatus::Budget));
    hca.push(wc(9)).unwrap();
    hca.fail_next_poll(libc::EIO);
    assert_eq!(feed.progress(64).status, FeedStatus::Failed);
    let p = feed
        .arm_and_drain(64)
        .expect("the failed feed's status, not the old arm error");
    assert_eq!(p.status, FeedStatus::Failed);
}

#[test]
fn refused_post_is_held_and_reposted_in_order() {
    let (mut consumer, hca, mut feed) = raced(4, 4, 2);
    // The feed reads 2 free slots and polls 2; another thread takes both
    // before the feed posts: the 2 are held, in order.
    post_during_next_poll(&hca, feed.poster(), 2);
    assert_eq!(outcome(feed.progress(64)), (0, FeedStatus::Backpressure));
    assert_eq!(hca.stats().len, 0);
    assert_eq!(feed.stats().held, 2);
    let Held {
        mut ids,
        overflow_reports,
        ..
    } = take_all(&mut consumer);
    // The refusal is backpressure, not a loss: nothing is reported.
    assert_eq!(overflow_reports, 0);
    assert_eq!(outcome(feed.progress(64)), (2, FeedStatus::Drained));
    ids.extend(wr_ids(&mut consumer));
    assert_eq!(ids, vec![0, 1, 2, 3]);
    // Re-offered completions are not counted twice.
    assert_eq!(feed.stats().held, 2);
}

#[test]
fn batch_that_partly_fits_posts_the_front_and_holds_the_rest_in_order() {
    let (mut consumer, hca, mut feed) = raced(4, 5, 1);
    // The feed reads 3 free slots and polls 3 in one batch; another thread
    // takes 1 of them: one post places the first 2 and holds the third.
    post_during_next_poll(&hca, feed.poster(), 1);
    assert_eq!(outcome(feed.progress(64)), (2, FeedStatus::Backpressure));
    assert_eq!(feed.stats().polled, 4);
    assert_eq!(feed.stats().held, 1);
    assert_eq!(hca.stats().len, 1);
    let held = take_all(&mut consumer);
    assert_eq!(held.overflow_reports, 0, "{held:?}");
    let (mut ids, ports) = (held.ids, held.async_events);
    assert_eq!((ids.as_slice(), ports), ([0, 1, 2].as_slice(), 1));
    // A short post is not a refusal: no overflow was reported.
    assert_eq!(consumer.query().lost, 0);
    // The held completion goes first, then the rest of the CQ.
    assert_eq!(outcome(feed.progress(64)), (2, FeedStatus::Drained));
    ids.extend(wr_ids(&mut consumer));
    assert_eq!(ids, vec![0, 1, 2, 3, 4]);
}

#[test]
fn held_completions_are_handed_back_at_teardown() {
    let (mut consumer, hca, mut feed) = raced(2, 3, 1);
    // One free slot read, one completion polled; another thread takes the
    // slot: the post is refused and the completion held.
    post_during_next_poll(&hca, feed.poster(), 1);
    assert_eq!(feed.progress(64).status, FeedStatus::Backpressure);
    let (_cq, undelivered) = feed.into_parts();
    assert_eq!(
        undelivered,
        vec![VerbsEvent::Completion {
            cq: CqId(0),
            wc: wc(1)
        }]
    );
    assert_eq!(hca.stats().len, 1);
    let _ = consumer.try_dequeue();
}

/// A CQ overrun, on the software CQ as on rxe: each completion that does
/// not fit is lost and reported by the CQ's device (one `CqError` each), not
/// by the feed. The overrun wakes nothing and fails nothing: the feed
/// delivers what the CQ holds, goes on (`Drained`, not `Failed`), and
/// delivers a later completion that fits.
#[test]
fn a_cq_overrun_loses_only_what_did_not_fit_and_is_reported_by_the_device() {
    use evd_verbs::AsyncEventSource;
    let (poster, mut consumer) = evd::bounded(16).unwrap();
    let (mut device_events, device) = SoftDevice::new().unwrap();
    let (cq, hca) = SoftCq::with_device(2, CqId(4), &device).unwrap();
    let mut feed = Feed::new(cq, CqId(4), poster);
    assert_eq!(
        outcome(feed.arm_and_drain(16).unwrap()),
        (0, FeedStatus::Drained)
    );
    hca.push(wc(0)).unwrap(); // fires the arm
    hca.push(wc(1)).unwrap();
    assert_eq!(hca.push(wc(2)), Err(PushError::Overrun));
    assert_eq!(hca.push(wc(3)), Err(PushError::Overrun));
    let s = hca.stats();
    assert_eq!((s.len, s.overruns, s.channel_events), (2, 2, 1), "{s:?}");
    // One CqError of this CQ per completion lost, on the device.
    let lost = AsyncEvent::new(AsyncEventKind::CqError, AsyncElement::Cq(CqId(4)));
    assert_eq!(device_events.next_event().unwrap(), Some(lost));
    assert_eq!(device_events.next_event().unwrap(), Some(lost));
    assert_eq!(device_events.next_event().unwrap(), None);
    // The feed delivers what the CQ holds, and nothing of its own.
    assert_eq!(
        outcome(feed.on_channel_ready(16).unwrap()),
        (2, FeedStatus::Drained)
    );
    assert_eq!(feed.failure(), None);
    assert_eq!(wr_ids(&mut consumer), [0, 1]);
    // A completion that fits is added, fires the new arm and is delivered.
    hca.push(wc(4)).unwrap();
    assert_eq!(
        outcome(feed.on_channel_ready(16).unwrap()),
        (1, FeedStatus::Drained)
    );
    assert_eq!(wr_ids(&mut consumer), [4]);
    assert_eq!(device_events.next_event().unwrap(), None);
}

#[test]
fn poll_failure_is_reported_once() {
    let (poster, mut consumer) = evd::bounded(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(1), poster);
    hca.fail_next_poll(libc::EIO);
    assert_eq!(feed.progress(16).status, FeedStatus::Failed);
    assert_eq!(feed.progress(16).status, FeedStatus::Failed);
    assert!(
        matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(a)) if a.kind == AsyncEventKind::CqError)
    );
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
}

#[test]
fn a_cq_error_refused_by_a_full_evd_is_held_and_delivered_once_there_is_room() {
    let (poster, mut consumer) = evd::bounded(2).unwrap();
    let (cq, hca) = SoftCq::new(8).unwrap();
    let mut feed = Feed::new(cq, CqId(5), poster.clone());
    // The feed reads two free slots, then its poll fails while another
    // poster takes both: the CqError cannot go in yet.
    hca.fail_next_poll(libc::EIO);
    post_during_next_poll(&hca, &poster, 2);
    assert_eq!(outcome(feed.progress(16)), (0, FeedStatus::Backpressure));
    assert_eq!(feed.failure(), Some(PollError::Failed(libc::EIO)));
    // Room: the held error goes in, and only then does the feed say Failed.
    assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(_))));
    assert_eq!(outcome(feed.progress(16)), (1, FeedStatus::Failed));
    assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(_)))); // the filler
    assert!(matches!(
        consumer.try_dequeue(),
        Ok(VerbsEvent::Async(a)) if a.kind == AsyncEventKind::CqError && a.element == AsyncElement::Cq(CqId(5))
    ));
    assert_eq!(outcome(feed.progress(16)), (0, FeedStatus::Failed));
}

#[test]
fn closed_evd_stops_the_feed_and_teardown_returns_held_events() {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(1), poster);
    hca.push(wc(1)).unwrap();
    drop(consumer);
    assert_eq!(feed.progress(16).status, FeedStatus::Closed);
    // Nothing was polled: the completion waits in the CQ.
    assert_eq!(hca.stats().len, 1);
    let (mut cq, undelivered) = feed.into_parts();
    assert!(undelivered.is_empty());
    let mut out = [WorkCompletion::default(); POLL_BATCH];
    assert_eq!(cq.poll(&mut out), Ok(1));
}

#[test]
fn teardown_acks_every_event_before_destroying_the_cq() {
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(1), poster);
    feed.arm_and_drain(16).unwrap();
    hca.push(wc(1)).unwrap();
    hca.inject_spurious_event();
    feed.on_channel_ready(16).unwrap();
    assert_eq!(hca.stats().events_got, 2);
    assert_eq!(hca.stats().events_acked, 0); // batched: not yet
    let (cq, _) = feed.into_parts();
    assert_eq!(hca.stats().events_acked, 2);
    assert!(cq.destroy().is_ok());
    assert_eq!(hca.stats().unacked_at_destroy, Some(0));
}

#[test]
fn arm_and_drain_delivers_at_most_its_budget_even_after_a_drain_before_the_arm() {
    // The feed holds one completion (refused earlier), so `arm_and_drain`
    // first drains without arming (the held one and 3 more), then arms; 8
    // completions land just before the arm. The budget of 8 covers both
    // drains together.
    let (poster, mut consumer) = evd::bounded(32).unwrap();
    let (cq, hca) = SoftCq::new(64).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster.clone());
    for _ in 0..31 {
        poster.post(port_event()).unwrap();
    }
    hca.push(wc(0)).unwrap();
    post_during_next_poll(&hca, &poster, 1);
    assert_eq!(feed.progress(16).status, FeedStatus::Backpressure);
    assert_eq!(feed.stats().held, 1);
    while consumer.try_dequeue().is_ok() {}
    for i in 1..4 {
        hca.push(wc(i)).unwrap();
    }
    for i in 4..12 {
        hca.complete_in_next_rearm_window(wc(i));
    }
    assert_eq!(
        outcome(feed.arm_and_drain(8).unwrap()),
        (8, FeedStatus::Budget)
    );
    assert_eq!(wr_ids(&mut consumer), (0..8).collect::<Vec<_>>());
    assert_eq!(
        outcome(feed.arm_and_drain(8).unwrap()),
        (4, FeedStatus::Drained)
    );
    assert_eq!(wr_ids(&mut consumer), (8..12).collect::<Vec<_>>());
}

#[test]
fn held_completions_count_against_the_budget() {
    // The feed reads 16 free slots and polls 16 completions; another thread
    // takes the room first, so all 16 are held. Once there is room again,
    // each call posts at most its budget of them, in order.
    let (poster, mut consumer) = evd::bounded(16).unwrap();
    let (cq, hca) = cq_holding(64, 16);
    let mut feed = Feed::new(cq, CqId(0), poster.clone());
    post_during_next_poll(&hca, &poster, 16);
    assert_eq!(outcome(feed.progress(64)), (0, FeedStatus::Backpressure));
    assert_eq!(feed.stats().held, 16);
    while consumer.try_dequeue().is_ok() {}
    for budget in [1, 4, 0, 3] {
        let p = feed.progress(budget);
        assert_eq!((p.delivered, p.status), (budget, FeedStatus::Budget));
    }
    assert_eq!(wr_ids(&mut consumer), (0..8).collect::<Vec<_>>());
    assert_eq!(
        outcome(feed.arm_and_drain(5).unwrap()),
        (5, FeedStatus::Budget)
    );
    assert_eq!(
        outcome(feed.arm_and_drain(5).unwrap()),
        (3, FeedStatus::Drained)
    );
    assert_eq!(wr_ids(&mut consumer), (8..16).collect::<Vec<_>>());
    assert_eq!(feed.stats().held, 16, "none refused after the first time");
}

/// An EVD full under an upcall policy with no instance running (upcalls
/// enabled with `Invoke::New` on the full ring): only the upcall that a
/// post refused as full starts can drain it, and a feed posts only into
/// free slots. The feed starts that upcall itself: run by the caller, by a
/// driver or by a poller, it delivers.
#[test]
fn a_feed_drains_a_full_evd_that_only_an_idle_upcall_policy_can_drain() {
    use evd::{Invoke, UpcallPolicy};
    use std::sync::Mutex;
    for runner in ["progress", "driver", "poller"] {
        let (poster, consumer) = evd::bounded::<VerbsEvent>(2).unwrap();
        poster
            .post(VerbsEvent::Completion {
                cq: CqId(9),
                wc: wc(100),
            })
            .unwrap();
        poster
            .post(VerbsEvent::Completion {
                cq: CqId(9),
                wc: wc(101),
            })
            .unwrap();
        let (tx, seen) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let _up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
            if let Ok(VerbsEvent::Completion { wc, .. }) = ev {
                tx.lock().unwrap().send(wc.wr_id).unwrap();
            }
        });
        let (cq, hca) = SoftCq::new(16).unwrap();
        let feed = Feed::new(cq, CqId(0), poster);
        hca.push(wc(1)).unwrap();
        let watchdog = std::time::Duration::from_secs(60);
        let got = |n: usize| -> Vec<u64> {
            (0..n)
                .map(|_| {
                    let got = seen.recv_timeout(watchdog);
                    got.unwrap_or_else(|_| panic!("{runner}: the feed never delivered"))
                })
                .collect()
        };
        match runner {
            "progress" => {
                let mut feed = feed;
                let p = feed.progress(16);
                assert_eq!(p.delivered, 1, "{runner}");
                assert_eq!(got(3), [100, 101, 1], "{runner}");
            }
            "driver" => {
                let mut driver = evd_verbs::Driver::new(Default::default()).unwrap();
                driver.register(feed, evd_verbs::FeedMode::Event).unwrap();
                let running = driver.spawn().unwrap();
                assert_eq!(got(3), [100, 101, 1], "{runner}");
                running.shutdown().unwrap();
            }
            _ => {
                let poller = evd_verbs::Poller::spawn(vec![feed], 16).unwrap();
                assert_eq!(got(3), [100, 101, 1], "{runner}");
                poller.stop().unwrap();
            }
        }
    }
}

/// The application's event type, whose `From` panics on the first CqError it
/// converts.
#[derive(Debug)]
struct PanicsOnTheFirstCqError(VerbsEvent);

static CQ_ERROR_CONVERSIONS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

impl From<VerbsEvent> for PanicsOnTheFirstCqError {
    fn from(ev: VerbsEvent) -> Self {
        if matches!(&ev, VerbsEvent::Async(a) if a.kind == AsyncEventKind::CqError)
            && CQ_ERROR_CONVERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0
        {
            panic!("the application's From fails on a CqError");
        }
        PanicsOnTheFirstCqError(ev)
    }
}

/// A failed CQ whose CqError the event type's `From` panics on once: the
/// feed is not left `Failed` with the error neither delivered nor held; its
/// next call converts the error again and delivers it, whether the CQ would
/// fail again (a CQ whose every poll fails from then on) or not (a poll that
/// failed once): it is not polled again.
#[test]
fn a_cq_error_whose_conversion_panics_is_converted_again_not_lost() {
    for failure in ["every poll fails from then on", "a poll that failed once"] {
        CQ_ERROR_CONVERSIONS.store(0, std::sync::atomic::Ordering::Relaxed);
        let (poster, mut consumer) = evd::bounded::<PanicsOnTheFirstCqError>(16).unwrap();
        let (cq, hca) = SoftCq::new(2).unwrap();
        let once = failure == "a poll that failed once";
        // A provider whose failing poll consumed what failed: its first poll
        // fails, and only that one.
        let mut hooked = HookedCq::new(cq);
        let mut fail = once;
        hooked.poll = Some(Box::new(move |_, want| {
            if std::mem::take(&mut fail) {
                return Err(PollError::Failed(libc::EIO));
            }
            Ok(want)
        }));
        let mut feed = Feed::new(hooked, CqId(4), poster);
        if !once {
            hca.push(wc(0)).unwrap();
            hca.push(wc(1)).unwrap();
            hca.fail_next_poll(libc::EIO); // and every poll after it
        }
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
        assert!(
            panicked.is_err(),
            "{failure}: the conversion's panic reaches the caller"
        );
        if once {
            // A poll now would succeed and take it.
            hca.push(wc(5)).unwrap();
        }
        assert_eq!(feed.progress(16).status, FeedStatus::Failed, "{failure}");
        let left = if once { 1 } else { 2 };
        assert_eq!(hca.stats().len, left, "{failure}: not polled again");
        assert_eq!(
            feed.failure(),
            Some(PollError::Failed(libc::EIO)),
            "{failure}"
        );
        assert!(
            matches!(
                consumer.try_dequeue(),
                Ok(PanicsOnTheFirstCqError(VerbsEvent::Async(a))) if a.kind == AsyncEventKind::CqError
            ),
            "{failure}"
        );
        assert_eq!(
            consumer.try_dequeue().err(),
            Some(TryDequeueError::Empty),
            "{failure}"
        );
    }
}

/// A full EVD, four events queued under a handler that panics on its
/// first event; what it handled.
fn full_evd_under_a_handler_that_panics_once() -> (
    evd::Poster<VerbsEvent>,
    evd::Upcalls<VerbsEvent>,
    impl Fn() -> Vec<u64>,
) {
    evd_under_a_handler_that_panics_once(4, 4)
}

/// An EVD of `capacity` with `queued` completions (`wr_id`s from 0) under a
/// handler that panics on its first event (`common::panics`); what it
/// handled: each completion's `wr_id`, and 100 for an async event.
fn evd_under_a_handler_that_panics_once(
    capacity: usize,
    queued: u64,
) -> (
    evd::Poster<VerbsEvent>,
    evd::Upcalls<VerbsEvent>,
    impl Fn() -> Vec<u64>,
) {
    let queued: Vec<VerbsEvent> = (0..queued)
        .map(|id| VerbsEvent::Completion {
            cq: CqId(9),
            wc: wc(id),
        })
        .collect();
    let (poster, up, handled) =
        common::panics::evd_under_a_handler_that_panics_once(capacity, &queued);
    let ids = move || {
        let id = |ev| match ev {
            VerbsEvent::Completion { wc, .. } => Some(wc.wr_id),
            VerbsEvent::Async(_) => Some(100),
            _ => None,
        };
        handled.try_iter().filter_map(id).collect()
    };
    (poster, up, ids)
}

/// The calls of a feed this test makes, whatever the feed.
trait RoomAndProgress {
    fn poll_room(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()>;
    fn progress(&mut self, budget: usize) -> Progress;
}

macro_rules! room_and_progress {
    ($($feed:ty),*) => {$(
        impl RoomAndProgress for $feed {
            fn poll_room(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
                <$feed>::poll_room(self, cx)
            }
            fn progress(&mut self, budget: usize) -> Progress {
                <$feed>::progress(self, budget)
            }
        }
    )*};
}
room_and_progress!(
    Feed<SoftCq>,
    evd_verbs::ChannelFeed<evd_verbs::soft::SoftChannel>,
    evd_verbs::AsyncFeed<evd_verbs::soft::SoftAsyncEvents>
);

/// A feed's room check on a full EVD under an idle upcall policy runs the
/// upcall that drains it; when its handler panics, the events behind the
/// one it panicked on stay queued with no upcall running, and a quiet
/// source posts nothing that would start one: the feed's next call starts
/// it again. For a CQ's feed, a shared channel's feed and a device's async
/// feed.
#[test]
fn a_room_check_whose_draining_upcall_panicked_is_taken_up_by_the_next_call() {
    fn check(kind: &str, make: impl FnOnce(evd::Poster<VerbsEvent>) -> Box<dyn RoomAndProgress>) {
        let (poster, _up, handled) = full_evd_under_a_handler_that_panics_once();
        let mut feed = make(poster);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.poll_room(&mut cx)));
        assert!(r.is_err(), "{kind}: the handler's panic comes out");
        feed.progress(16);
        let seen: Vec<u64> = handled();
        assert_eq!(seen, [0, 1, 2, 3], "{kind}");
    }
    check("cq", |p| {
        Box::new(Feed::new(SoftCq::new(4).unwrap().0, CqId(0), p))
    });
    check("channel", |p| {
        let channel = evd_verbs::soft::SoftChannel::new().unwrap();
        let mut feed = evd_verbs::ChannelFeed::new(channel.clone(), p);
        feed.add(channel.create_cq(4).unwrap().0, CqId(0)).unwrap();
        Box::new(feed)
    });
    check("async", |p| {
        Box::new(evd_verbs::AsyncFeed::new(SoftDevice::new().unwrap().0, p))
    });
}

/// An event whose `Drop` panics, made by a `From` that first posts a
/// [`RoomTaker::Filler`] into the EVD in `TAKE_ROOM` (if any): the room the
/// feed read is gone by its post, so the feed holds what it polled.
enum RoomTaker {
    Polled,
    Filler,
}

thread_local! {
    static TAKE_ROOM: std::cell::RefCell<Option<evd::Poster<RoomTaker>>> =
        const { std::cell::RefCell::new(None) };
}

impl From<VerbsEvent> for RoomTaker {
    fn from(_: VerbsEvent) -> Self {
        TAKE_ROOM.with(|p| {
            if let Some(p) = &*p.borrow() {
                assert!(p.post(RoomTaker::Filler).is_ok(), "room to take");
            }
        });
        RoomTaker::Polled
    }
}

impl Drop for RoomTaker {
    fn drop(&mut self) {
        if let RoomTaker::Polled = self {
            panic!("{}", common::panics::PROVOKED);
        }
    }
}

/// A dropped feed drops the events it holds (polled, then refused by a
/// full EVD) and its CQ one at a time: two held events that panic on drop,
/// and a CQ whose destroy panics, are not a second panic during the first's
/// unwinding (an abort of the process); the first reaches the caller that
/// dropped the feed.
#[test]
fn a_feed_holding_events_that_panic_on_drop_is_dropped_with_one_panic() {
    common::panics::quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<RoomTaker>(2).unwrap();
    let (soft, hca) = SoftCq::new(4).unwrap();
    let mut cq = HookedCq::new(soft);
    cq.at_drop = Some(Box::new(|| panic!("{}", common::panics::PROVOKED)));
    let mut feed = Feed::new(cq, CqId(0), poster.clone());
    assert_eq!(hca.push_batch(&[wc(0), wc(1)]), 2);
    TAKE_ROOM.with(|p| *p.borrow_mut() = Some(poster));
    assert_eq!(feed.progress(16).status, FeedStatus::Backpressure);
    TAKE_ROOM.with(|p| *p.borrow_mut() = None);
    assert_eq!(feed.stats().held, 2, "both polled completions are held");
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(feed)));
    assert!(dropped.is_err(), "the first panic reaches the caller");
    assert!(matches!(consumer.try_dequeue(), Ok(RoomTaker::Filler)));
    assert!(matches!(consumer.try_dequeue(), Ok(RoomTaker::Filler)));
}

/// A post whose upcall handler panicked leaves its feed owing a restart of
/// that upcall; a room check in between (which finds room and runs no
/// upcall) keeps it owed: the next call (or the check itself) restarts it.
#[test]
fn a_room_check_keeps_the_restart_a_panicked_post_owes() {
    fn check(
        kind: &str,
        make: impl FnOnce(evd::Poster<VerbsEvent>) -> (Box<dyn RoomAndProgress>, Box<dyn Fn()>),
    ) {
        // One event queued: the feed's post starts the upcall, whose
        // handler panics on it, leaving the feed's event queued behind.
        let (poster, _up, handled) = evd_under_a_handler_that_panics_once(8, 1);
        let (mut feed, arrive) = make(poster);
        arrive();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
        assert!(r.is_err(), "{kind}: the handler's panic comes out");
        let waker = futures::task::noop_waker();
        assert!(
            feed.poll_room(&mut std::task::Context::from_waker(&waker))
                .is_ready()
        );
        feed.progress(16);
        let seen: Vec<u64> = handled();
        assert_eq!(seen, [0, 100], "{kind}");
    }
    check("cq", |p| {
        let (cq, hca) = SoftCq::new(4).unwrap();
        let arrive = move || assert!(hca.push(wc(100)).is_ok());
        (Box::new(Feed::new(cq, CqId(0), p)), Box::new(arrive))
    });
    check("channel", |p| {
        let channel = evd_verbs::soft::SoftChannel::new().unwrap();
        let mut feed = evd_verbs::ChannelFeed::new(channel.clone(), p);
        let (cq, hca) = channel.create_cq(4).unwrap();
        feed.add(cq, CqId(0)).unwrap();
        let arrive = move || assert!(hca.push(wc(100)).is_ok());
        (Box::new(feed), Box::new(arrive))
    });
    check("async", |p| {
        let (events, device) = SoftDevice::new().unwrap();
        let port = evd_verbs::AsyncEvent::new(AsyncEventKind::PortActive, AsyncElement::Port(1));
        let arrive = move || device.raise(port);
        (
            Box::new(evd_verbs::AsyncFeed::new(events, p)),
            Box::new(arrive),
        )
    });
}

/// A shared channel's CQ whose call unwound (its post's upcall handler
/// panicked) stays due for service: the channel feed's next
/// `arm_and_drain` serves it and restarts the upcall, though it was clean
/// (armed and drained) before.
#[test]
fn a_channel_member_whose_call_unwound_is_served_by_the_next_arm_and_drain() {
    let (poster, _up, handled) = evd_under_a_handler_that_panics_once(8, 1);
    let channel = evd_verbs::soft::SoftChannel::new().unwrap();
    let mut feed = evd_verbs::ChannelFeed::new(channel.clone(), poster);
    let (cq, hca) = channel.create_cq(4).unwrap();
    feed.add(cq, CqId(0)).unwrap();
    assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Drained);
    hca.push(wc(100)).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    assert!(r.is_err(), "the handler's panic comes out");
    feed.arm_and_drain(16).unwrap();
    assert_eq!(handled(), [0, 100]);
}

/// An event type whose `From` panics on completions 1 and 2.
struct Picky(u64);

impl From<VerbsEvent> for Picky {
    fn from(ev: VerbsEvent) -> Self {
        let VerbsEvent::Completion { wc, .. } = ev else {
            return Picky(u64::MAX);
        };
        if matches!(wc.wr_id, 1 | 2) {
            panic!("{}", common::panics::PROVOKED);
        }
        Picky(wc.wr_id)
    }
}

/// A feed taken apart after a `From` panicked hands back what it polled
/// and converted: a `From` that panics again there loses only the one it
/// panicked on, as in `progress`.
#[test]
fn into_parts_after_a_from_panic_hands_back_every_event_but_the_ones_that_panicked() {
    common::panics::quiet_provoked_panics();
    let (poster, _consumer) = evd::bounded::<Picky>(8).unwrap();
    let (cq, hca) = SoftCq::new(8).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster);
    assert_eq!(hca.push_batch(&[wc(0), wc(1), wc(2), wc(3)]), 4);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    assert!(r.is_err(), "From panicked on 1");
    let parts = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.into_parts()));
    let (_cq, undelivered) = parts.expect("into_parts swallows the next From panic");
    let ids: Vec<u64> = undelivered.iter().map(|p| p.0).collect();
    assert_eq!(ids, [0, 3]);
}

/// A CQ whose `ack_events` acknowledges what it is given, then panics the
/// first time: user code the feed must survive without asking it for the
/// same events twice (more acknowledged than got, which `ibv_destroy_cq`
/// waits on for ever) or leaking the CQ and its poster.
fn cq_whose_first_ack_panics_after_acknowledging() -> (HookedCq, SoftCqProducer) {
    let (soft, hca) = SoftCq::new(64).unwrap();
    let mut cq = HookedCq::new(soft);
    let mut first = true;
    cq.ack_events = Some(Box::new(move |soft, count| {
        // SAFETY: the feed's call passes on its own contract's count.
        unsafe { soft.ack_events(count) };
        if std::mem::take(&mut first) {
            panic!("{}", common::panics::PROVOKED);
        }
    }));
    (cq, hca)
}

/// An ack that panics after acknowledging a batch is taken as having
/// acknowledged it: the feed never asks for those events again, at its
/// next batch or at teardown.
#[test]
fn a_batch_whose_ack_panics_is_never_acknowledged_again() {
    common::panics::quiet_provoked_panics();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, hca) = cq_whose_first_ack_panics_after_acknowledging();
    let mut feed = Feed::new(cq, CqId(0), poster);
    for _ in 0..evd_verbs::ACK_BATCH {
        hca.inject_spurious_event();
    }
    let woken =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.on_channel_ready(16)));
    assert!(woken.is_err(), "the ack's panic reaches the caller");
    assert_eq!(hca.stats().events_acked, u64::from(evd_verbs::ACK_BATCH));
    // One more event, then the teardown acknowledges it, and only it.
    hca.inject_spurious_event();
    assert_eq!(
        feed.on_channel_ready(16).unwrap().status,
        FeedStatus::Drained
    );
    let (cq, undelivered) = feed.into_parts();
    assert!(undelivered.is_empty());
    let stats = hca.stats();
    assert_eq!(stats.events_got, u64::from(evd_verbs::ACK_BATCH) + 1);
    assert_eq!(stats.events_acked, stats.events_got);
    drop(cq);
    assert_eq!(hca.stats().unacked_at_destroy, Some(0));
}

/// A teardown whose ack panics drops the feed on the way out: the CQ is
/// destroyed with every event acknowledged, and the EVD sees the feed's
/// poster go (nothing is leaked, no consumer waits for a poster that is
/// gone).
#[test]
fn a_teardown_whose_ack_panics_destroys_the_cq_and_lets_the_poster_go() {
    common::panics::quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, hca) = cq_whose_first_ack_panics_after_acknowledging();
    let mut feed = Feed::new(cq, CqId(0), poster);
    hca.inject_spurious_event();
    assert_eq!(
        feed.on_channel_ready(16).unwrap().status,
        FeedStatus::Drained
    );
    assert_eq!(
        hca.stats().events_acked,
        0,
        "one event got, not yet acknowledged"
    );
    let torn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || feed.into_parts()));
    assert!(torn.is_err(), "the ack's panic reaches the caller");
    let stats = hca.stats();
    assert_eq!((stats.events_got, stats.events_acked), (1, 1));
    assert_eq!(stats.unacked_at_destroy, Some(0), "the CQ was destroyed");
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
}

/// An event type whose `From` panics on every async event (an application
/// that never expected one: it registered no `AsyncFeed`).
#[derive(Debug)]
struct NoAsyncEvents(#[allow(dead_code)] VerbsEvent);

impl From<VerbsEvent> for NoAsyncEvents {
    fn from(ev: VerbsEvent) -> Self {
        if let VerbsEvent::Async(_) = ev {
            panic!("{}", common::panics::PROVOKED);
        }
        NoAsyncEvents(ev)
    }
}

/// A failed CQ's `CqError` whose `From` panics on every try is built once
/// more after the first panic, then lost (counted in `from_panics`): the
/// feed reports `Failed` instead of panicking on every call for ever.
#[test]
fn a_cq_error_whose_conversion_always_panics_is_lost_after_a_second_try() {
    common::panics::quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<NoAsyncEvents>(16).unwrap();
    let (cq, hca) = SoftCq::new(4).unwrap();
    let mut feed = Feed::new(cq, CqId(2), poster);
    hca.push(wc(0)).unwrap();
    hca.fail_next_poll(libc::EIO);
    for try_ in 1..=2 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
        assert!(
            r.is_err(),
            "try {try_}: the conversion's panic reaches the caller"
        );
    }
    assert_eq!(outcome(feed.progress(16)), (0, FeedStatus::Failed));
    assert_eq!(outcome(feed.progress(16)), (0, FeedStatus::Failed));
    assert_eq!(feed.stats().from_panics, 1);
    assert_eq!(feed.failure(), Some(PollError::Failed(libc::EIO)));
    assert_eq!(consumer.try_dequeue().err(), Some(TryDequeueError::Empty));
}

/// Completions converted after a `From` panic and refused by a full EVD
/// are counted as held: they are offered for the first time.
#[test]
fn completions_refused_after_a_from_panic_are_counted_as_held() {
    common::panics::quiet_provoked_panics();
    let (poster, _consumer) = evd::bounded::<Picky>(4).unwrap();
    let (cq, hca) = SoftCq::new(8).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster.clone());
    assert_eq!(hca.push_batch(&[wc(0), wc(1), wc(3)]), 3);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    assert!(r.is_err(), "From panicked on 1");
    while poster.post(Picky(u64::MAX)).is_ok() {} // another poster fills it
    let p = feed.progress(16);
    assert_eq!((p.delivered, p.status), (0, FeedStatus::Backpressure));
    let s = feed.stats();
    assert_eq!((s.held, s.from_panics), (2, 1), "{s:?}");
}

/// `found_after_arm` counts completions a drain right after an arm found,
/// not the events it posted: a failed poll's `CqError` is none.
#[test]
fn a_cq_error_after_an_arm_is_no_completion_found_after_it() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let mut feed = Feed::new(cq, CqId(0), poster);
    hca.fail_next_poll(libc::EIO);
    let p = feed.arm_and_drain(16).unwrap();
    assert_eq!((p.delivered, p.status), (1, FeedStatus::Failed));
    assert!(matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(_))));
    assert_eq!(feed.stats().found_after_arm, 0);
}
