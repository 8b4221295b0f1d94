//! The CQs a `ChannelFeed` serves, changed while it serves them: a CQ
//! removed is handed back with what it holds and the others keep their
//! turns; a CQ added to a feed a driver serves (asleep on the channel, on
//! the caller's driver or a spawned one) is armed and drained without an
//! event; a removal drained and dropped on the driver's thread leaves
//! nothing for the channel; a closure that panics is answered and the
//! driver serves on.
//!
//! The only clock is the watchdog of `common::driver`: no assertion depends
//! on timing.

mod common;

use common::driver::{
    BACKENDS, none, nothing_after, readable_within_watchdog, running_driver, take, take_processing,
};
use common::panics::{Trapped, quiet_provoked_panics};
use common::wc;
use evd::TryDequeueError;
use evd_verbs::soft::{SoftChannel, SoftCqProducer};
use evd_verbs::{
    AsyncEventKind, ChannelFeed, CqId, Driver, DriverConfig, DriverError, FeedMode, FeedStatus,
    VerbsEvent,
};
use std::time::Duration;

/// `n` soft CQs on one channel, in one feed into `poster`'s EVD, named
/// `CqId(0)`... in order.
fn feed_of(
    n: u32,
    poster: evd::Poster<VerbsEvent>,
) -> (SoftChannel, ChannelFeed<SoftChannel>, Vec<SoftCqProducer>) {
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let hcas = (0..n)
        .map(|i| {
            let (cq, hca) = channel.create_cq(64).unwrap();
            feed.add(cq, CqId(i)).unwrap();
            hca
        })
        .collect();
    (channel, feed, hcas)
}

/// The CQ and `wr_id` of a completion event.
fn completion(ev: VerbsEvent) -> (CqId, u64) {
    match ev {
        VerbsEvent::Completion { cq, wc } => (cq, wc.wr_id),
        other => panic!("not a completion: {other:?}"),
    }
}

#[test]
fn a_removed_cq_is_handed_back_with_its_credited_events_and_the_others_are_served_on() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (_channel, mut feed, hcas) = feed_of(3, poster);
    assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Drained);
    hcas[1].push(wc(10)).unwrap(); // armed: raises an event
    assert_eq!(feed.take_events().unwrap(), 1);
    let mut removed = feed.remove(CqId(1)).expect("served under CqId(1)");
    assert_eq!(removed.id(), CqId(1));
    assert_eq!(removed.stats().events_got, 1, "its event went with it");
    assert_eq!(feed.len(), 2);
    assert_eq!(
        feed.feeds().map(|f| f.id()).collect::<Vec<_>>(),
        [CqId(0), CqId(2)],
        "the others, in their order"
    );
    assert!(feed.remove(CqId(1)).is_none(), "served no more");
    // Its completion is its own feed's to deliver now.
    assert_eq!(feed.progress(16).delivered, 0);
    assert_eq!(removed.progress(16).delivered, 1);
    assert_eq!(completion(consumer.try_dequeue().unwrap()), (CqId(1), 10));
    drop(removed);
    assert_eq!(
        hcas[1].stats().unacked_at_destroy,
        Some(0),
        "acked at its drop"
    );
    // The others: armed, they raise events the channel feed serves.
    hcas[0].push(wc(20)).unwrap();
    hcas[2].push(wc(30)).unwrap();
    let p = feed.on_channel_ready(16).unwrap();
    assert_eq!((p.delivered, p.status), (2, FeedStatus::Drained));
    let mut got: Vec<_> = (0..2)
        .map(|_| completion(consumer.try_dequeue().unwrap()))
        .collect();
    got.sort_unstable();
    assert_eq!(got, [(CqId(0), 20), (CqId(2), 30)]);
    assert_eq!(feed.stats().unknown_events, 0);
}

/// Round robin with a budget of one: the next pass starts after the CQ
/// served last. A removal before that place moves the others down one: the
/// next CQ served is still the one after it, not one served already.
#[test]
fn a_removal_keeps_the_turn_of_the_cqs_after_it() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (_channel, mut feed, hcas) = feed_of(3, poster);
    for (i, hca) in hcas.iter().enumerate() {
        hca.push_batch(&[wc(i as u64); 2]);
    }
    assert_eq!(feed.progress(1).delivered, 1); // CQ 0
    assert_eq!(feed.progress(1).delivered, 1); // CQ 1
    let removed = feed.remove(CqId(0)).unwrap();
    assert_eq!(feed.progress(1).delivered, 1); // CQ 2's turn
    let served: Vec<_> = std::iter::from_fn(|| consumer.try_dequeue().ok())
        .map(|ev| completion(ev).0)
        .collect();
    assert_eq!(served, [CqId(0), CqId(1), CqId(2)]);
    drop(removed);
}

/// The CQ whose turn is next removed: the turn passes to the one after it.
#[test]
fn removing_the_cq_whose_turn_is_next_passes_the_turn_to_the_one_after_it() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (_channel, mut feed, hcas) = feed_of(3, poster);
    for (i, hca) in hcas.iter().enumerate() {
        hca.push_batch(&[wc(i as u64); 2]);
    }
    assert_eq!(feed.progress(1).delivered, 1); // CQ 0; CQ 1 is next
    let removed = feed.remove(CqId(1)).unwrap();
    assert_eq!(feed.progress(1).delivered, 1); // CQ 2
    assert_eq!(feed.progress(1).delivered, 1); // CQ 0 again
    let served: Vec<_> = std::iter::from_fn(|| consumer.try_dequeue().ok())
        .map(|ev| completion(ev).0)
        .collect();
    assert_eq!(served, [CqId(0), CqId(2), CqId(0)]);
    drop(removed);
}

/// A CQ removed while armed stays armed until it is destroyed: its event
/// then comes to the channel feed for a CQ it does not serve, acknowledged
/// at once and counted (the CQ's destroy does not wait for it).
#[test]
fn an_event_of_a_removed_cq_still_armed_is_acked_as_unknown() {
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (_channel, mut feed, hcas) = feed_of(2, poster);
    assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Drained);
    let removed = feed.remove(CqId(0)).unwrap();
    hcas[0].push(wc(1)).unwrap(); // its arm was still out
    assert_eq!(feed.take_events().unwrap(), 1);
    assert_eq!(feed.stats().unknown_events, 1);
    drop(removed);
    assert_eq!(hcas[0].stats().unacked_at_destroy, Some(0));
}

/// A CQ with a completion already in it, added to a channel feed asleep on
/// its channel, has no arm and raises no event: only the turn `with_feed`
/// gives the feed arms and drains it. A loop that waits on the driver's fd
/// next is woken for that turn. Armed then, the CQ's next completion
/// raises an event.
#[test]
fn a_cq_added_through_the_driver_to_a_sleeping_channel_feed_is_served_without_an_event() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (channel, feed, hcas) = feed_of(1, poster);
        let mut driver = Driver::new(DriverConfig::default().with_backend(backend)).unwrap();
        let key = driver.register_channel(feed, FeedMode::Event).unwrap();
        hcas[0].push(wc(1)).unwrap();
        take_processing(&mut driver, &mut consumer, 1, none);
        // Event mode: the wake's poll delivered; the next turns arm and
        // find the CQ empty, and the feed sleeps on the channel.
        for _ in 0..3 {
            driver.process(Some(Duration::ZERO)).unwrap();
        }
        let (cq, hca) = channel.create_cq(8).unwrap();
        hca.push(wc(2)).unwrap();
        assert_eq!(hca.stats().events_got, 0);
        driver
            .with_feed(key, |feed| feed.add(cq, CqId(7)))
            .unwrap()
            .unwrap();
        assert!(readable_within_watchdog(&driver), "the driver's fd");
        let got = take_processing(&mut driver, &mut consumer, 1, none);
        assert_eq!(completion(got.into_iter().next().unwrap()), (CqId(7), 2));
        let events_before = hca.stats().events_got;
        hca.push(wc(3)).unwrap();
        let got = take_processing(&mut driver, &mut consumer, 1, none);
        assert_eq!(completion(got.into_iter().next().unwrap()), (CqId(7), 3));
        assert!(
            hca.stats().events_got > events_before,
            "armed: it raised an event"
        );
        let mut removed = driver
            .with_feed(key, |feed| feed.remove(CqId(7)))
            .unwrap()
            .unwrap();
        assert_eq!(removed.progress(16).delivered, 0);
        drop(removed);
        assert_eq!(hca.stats().unacked_at_destroy, Some(0));
        drop(driver.remove(key).unwrap());
        nothing_after(&mut consumer, "after the removal");
    }
}

/// A channel feed whose every CQ failed is done: the driver serves it no
/// more. Changed in place (the failed CQ removed, a healthy one added), it
/// is served again.
#[test]
fn a_channel_feed_done_because_every_cq_failed_is_served_again_once_a_live_cq_joins() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (channel, feed, hcas) = feed_of(1, poster);
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver.register_channel(feed, FeedMode::Event).unwrap();
    driver.process(Some(Duration::ZERO)).unwrap();
    hcas[0].fail_next_poll(libc::EIO);
    hcas[0].push(wc(1)).unwrap();
    let got = take_processing(&mut driver, &mut consumer, 1, none);
    assert!(
        matches!(&got[0], VerbsEvent::Async(a) if a.kind == AsyncEventKind::CqError),
        "{got:?}"
    );
    // Done now: a few turns, nothing more.
    for _ in 0..3 {
        driver.process(Some(Duration::ZERO)).unwrap();
    }
    let (cq, hca) = channel.create_cq(8).unwrap();
    hca.push(wc(2)).unwrap();
    let failed = driver
        .with_feed(key, |feed| {
            feed.add(cq, CqId(1)).unwrap();
            feed.remove(CqId(0))
        })
        .unwrap()
        .expect("the failed CQ");
    drop(failed);
    let got = take_processing(&mut driver, &mut consumer, 1, none);
    assert_eq!(completion(got.into_iter().next().unwrap()), (CqId(1), 2));
    hca.push(wc(3)).unwrap();
    let got = take_processing(&mut driver, &mut consumer, 1, none);
    assert_eq!(completion(got.into_iter().next().unwrap()), (CqId(1), 3));
    drop(driver.remove(key).unwrap());
}

/// `with_feed`'s closure that panics: the panic comes out of the call, the
/// feed stays registered as the closure left it (a CQ added before the
/// panic is served), and the driver goes on.
#[test]
fn a_with_feed_closure_that_panics_leaves_the_feed_registered_and_served() {
    quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (channel, feed, _hcas) = feed_of(1, poster);
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver.register_channel(feed, FeedMode::Event).unwrap();
    driver.process(Some(Duration::ZERO)).unwrap();
    let (cq, hca) = channel.create_cq(8).unwrap();
    hca.push(wc(4)).unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        driver.with_feed(key, |feed| {
            feed.add(cq, CqId(1)).unwrap();
            Trapped::provoke()
        })
    }));
    assert!(Trapped::defuse(unwound.unwrap_err()), "the closure's panic");
    let got = take_processing(&mut driver, &mut consumer, 1, none);
    assert_eq!(completion(got.into_iter().next().unwrap()), (CqId(1), 4));
    let feed = driver.remove(key).unwrap();
    assert!(matches!(
        driver.with_feed(key, |feed| feed.len()),
        Err(DriverError::NoSuchFeed)
    ));
    drop(feed);
}

/// A spawned driver: a CQ added from another thread is served; removed,
/// drained and dropped in one closure on the driver's thread, it is
/// destroyed with every event acknowledged and none left for the channel
/// feed; a closure that panics is answered `Panicked` and counted, and the
/// driver serves on; a stopped driver answers `Stopped`.
#[test]
fn a_spawned_drivers_channel_feed_gains_and_loses_cqs_through_its_handle() {
    quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (channel, feed, hcas) = feed_of(1, poster);
    let running = running_driver();
    let handle = running.handle().clone();
    let key = handle.register_channel(feed, FeedMode::Event).unwrap();
    let (cq, hca) = channel.create_cq(8).unwrap();
    hca.push(wc(1)).unwrap(); // before the add: no arm, no event
    handle
        .with_feed(key, move |feed| {
            feed.add(cq, CqId(1)).map_err(|e| e.reason())
        })
        .unwrap()
        .unwrap();
    assert_eq!(completion(take(&mut consumer, 1).remove(0)), (CqId(1), 1));
    for i in 2..6 {
        hca.push(wc(i)).unwrap();
        hcas[0].push(wc(100 + i)).unwrap();
    }
    let mut got: Vec<_> = take(&mut consumer, 8).into_iter().map(completion).collect();
    got.sort_unstable();
    let mut want: Vec<_> = (2..6).map(|i| (CqId(1), i)).collect();
    want.extend((2..6).map(|i| (CqId(0), 100 + i)));
    want.sort_unstable();
    assert_eq!(got, want);
    // Removed where it runs: its last completion delivered, its CQ
    // destroyed before the channel feed takes another event.
    hca.push(wc(6)).unwrap();
    let status = handle
        .with_feed(key, |feed| {
            let mut removed = feed.remove(CqId(1)).expect("served");
            // The EVD has room: the feed drains, and goes here.
            removed.progress(usize::MAX).status
        })
        .unwrap();
    assert_eq!(status, FeedStatus::Drained);
    // Delivered by the driver's turn before, or by the closure: once (the
    // shutdown below finds nothing more).
    assert_eq!(completion(take(&mut consumer, 1).remove(0)), (CqId(1), 6));
    assert_eq!(hca.stats().unacked_at_destroy, Some(0));
    // A panicking closure.
    let before = handle.stats().handler_panics;
    match handle.with_feed(key, |_: &mut ChannelFeed<SoftChannel>| -> () {
        Trapped::provoke()
    }) {
        Err(DriverError::Panicked(p)) => assert!(Trapped::defuse(p.into_payload())),
        other => panic!("{other:?}"),
    }
    // The driver publishes its counters at the end of the turn that ran
    // the closure; the next call's answer comes from a later turn.
    assert_eq!(handle.with_feed(key, |feed| feed.len()).unwrap(), 1);
    assert_eq!(handle.stats().handler_panics, before + 1);
    hcas[0].push(wc(7)).unwrap();
    assert_eq!(completion(take(&mut consumer, 1).remove(0)), (CqId(0), 7));
    assert_eq!(
        handle
            .with_feed(key, |feed| feed.stats().unknown_events)
            .unwrap(),
        0
    );
    let mut stopped = running.shutdown().unwrap();
    assert!(matches!(
        handle.with_feed(key, |feed| feed.len()),
        Err(DriverError::Stopped)
    ));
    drop(stopped.take(key).unwrap());
    match consumer.try_dequeue() {
        Err(TryDequeueError::Closed) => {}
        other => panic!("after the shutdown: {other:?}"),
    }
}

/// Called from inside the driver's turn (an upcall of the EVD its feed
/// posts into), `DriverHandle::with_feed` would wait for its own thread:
/// it is refused.
#[test]
fn with_feed_from_the_drivers_own_thread_is_refused() {
    use std::sync::{Arc, Mutex, mpsc};
    type Key = evd_verbs::FeedKey<ChannelFeed<SoftChannel>>;
    let slot: Arc<Mutex<Option<(evd_verbs::DriverHandle, Key)>>> = Arc::default();
    let (poster, consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (tx, answered) = mpsc::channel();
    let in_handler = slot.clone();
    let up = consumer.into_upcalls(
        evd::UpcallPolicy::SingleInstance,
        evd::Invoke::Any,
        move |_, _| {
            if let Some((handle, key)) = in_handler.lock().unwrap().take() {
                let r = handle.with_feed(key, |feed| feed.len());
                let _ = tx.send(matches!(r, Err(DriverError::OnDriverThread)));
            }
        },
    );
    let (_channel, feed, hcas) = feed_of(1, poster);
    let running = running_driver();
    let key = running
        .handle()
        .register_channel(feed, FeedMode::Event)
        .unwrap();
    *slot.lock().unwrap() = Some((running.handle().clone(), key));
    hcas[0].push(wc(1)).unwrap();
    assert!(
        answered.recv_timeout(common::driver::WATCHDOG).unwrap(),
        "OnDriverThread"
    );
    let mut stopped = running.shutdown().unwrap();
    drop(stopped.take(key).unwrap());
    drop(up.teardown());
}

/// A second feed of one completion channel on the same driver (a second
/// channel feed on a clone of the channel, or a CQ's own feed handed back
/// by `remove` and registered alone) would take the events the first
/// one's CQs wait for: it is refused, named by the feed already there, on
/// the caller's driver and through a spawned one's handle; once the first
/// is removed, the channel can be registered again.
#[test]
fn a_second_feed_on_a_channel_a_driver_serves_is_refused() {
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let (channel, mut feed, _hcas) = feed_of(2, poster.clone());
    let removed = feed.remove(CqId(1)).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver.register_channel(feed, FeedMode::Event).unwrap();
    let second = ChannelFeed::new(channel.clone(), poster.clone());
    match driver.register_channel(second, FeedMode::Event) {
        Err(DriverError::FdInUse { feed }) => assert_eq!(feed, key.id()),
        other => panic!("a second channel feed: {other:?}"),
    }
    // A real channel's CQ reports the channel's fd (`FdInUse`); a soft
    // channel's CQ has none of its own (`NoChannel`): refused either way.
    match driver.register(removed, FeedMode::Event) {
        Err(DriverError::FdInUse { feed }) => assert_eq!(feed, key.id()),
        Err(DriverError::NoChannel) => {}
        other => panic!("a member's own feed: {other:?}"),
    }
    // Once the channel feed is removed, the channel is free again.
    let feed = driver.remove(key).unwrap();
    let key = driver.register_channel(feed, FeedMode::Event).unwrap();
    let running = driver.spawn().unwrap();
    let third = ChannelFeed::new(channel.clone(), poster);
    match running.handle().register_channel(third, FeedMode::Event) {
        Err(DriverError::FdInUse { feed }) => assert_eq!(feed, key.id()),
        other => panic!("through the handle: {other:?}"),
    }
    let mut stopped = running.shutdown().unwrap();
    drop(stopped.take(key).unwrap());
}
