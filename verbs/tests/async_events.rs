//! The device's async events through the driver: delivered into the EVD
//! of the feeds registered with them, and served by the driver itself when
//! nobody registered an async feed (a CQ overrun, which only the device
//! reports, still reaches the EVD, of whatever event type), but never
//! twice.

mod common;

use common::driver::{driver_serving, none, take, take_counting_overflow, take_processing};
use common::wc;
use evd::TryDequeueError;
use evd_verbs::soft::{SoftCq, SoftCqProducer, SoftDevice};
use evd_verbs::{
    AsyncElement, AsyncEvent, AsyncEventKind, AsyncFeed, CqId, Driver, DriverConfig, Feed,
    FeedMode, FeedStatus, VerbsEvent, WorkCompletion,
};

/// An application's own event type: the verbs events, and its own.
#[derive(Debug)]
enum AppEvent {
    Verbs(VerbsEvent),
    Tick,
}

impl From<VerbsEvent> for AppEvent {
    fn from(ev: VerbsEvent) -> Self {
        AppEvent::Verbs(ev)
    }
}

/// How many of `evs` report an error of `cq`.
fn cq_errors(evs: &[VerbsEvent], cq: CqId) -> usize {
    evs.iter()
        .filter(|e| {
            matches!(e, VerbsEvent::Async(a)
                if a.kind == AsyncEventKind::CqError && a.element == AsyncElement::Cq(cq))
        })
        .count()
}

/// Raised on the device after an overrun: the device's events reach the
/// EVD in the order they were raised (one async feed takes them), so the
/// overrun's `CqError`s all come before it.
const MARKER: AsyncEvent = AsyncEvent::new(AsyncEventKind::PortActive, AsyncElement::Port(2));

/// Overrun `hca`'s CQ of two: three completions under one lock, so the
/// third (`wr_id` 2) does not fit; then raise [`MARKER`] on `device`.
fn overrun_a_cq_of_two(hca: &SoftCqProducer, device: &SoftDevice) {
    assert_eq!(
        hca.push_batch(&[wc(0), wc(1), wc(2)]),
        2,
        "the third overruns"
    );
    assert_eq!(hca.stats().overruns, 1);
    device.raise(MARKER);
}

/// What an overrun of `cq` ([`overrun_a_cq_of_two`]) brings into the EVD,
/// as rxe's does: its two completions in order (the overrun fails no poll),
/// and exactly one `CqError` of `cq` (one completion was lost), before the
/// marker; nothing else. `evs` are the first four events of the EVD.
fn assert_overrun_delivered(evs: &[VerbsEvent], cq: CqId) {
    assert_eq!(evs.len(), 4);
    let ids: Vec<u64> = evs
        .iter()
        .filter_map(|e| match e {
            VerbsEvent::Completion { cq: c, wc } if *c == cq => Some(wc.wr_id),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [0, 1], "{evs:?}");
    assert_eq!(cq_errors(evs, cq), 1, "{evs:?}");
    let at = |pred: &dyn Fn(&VerbsEvent) -> bool| evs.iter().position(pred);
    let error = at(&|e| matches!(e, VerbsEvent::Async(a) if a.kind == AsyncEventKind::CqError));
    let marker = at(&|e| matches!(e, VerbsEvent::Async(a) if *a == MARKER));
    assert!(error < marker && marker.is_some(), "{evs:?}");
}

/// After an overrun, the CQ's feed goes on (it was not failed): a
/// completion that fits now is delivered, and nothing else comes before it
/// (a failed feed's own `CqError` would).
fn assert_the_feed_goes_on<T: std::fmt::Debug>(
    hca: &SoftCqProducer,
    consumer: &mut evd::Consumer<T>,
    cq: CqId,
    verbs: fn(T) -> VerbsEvent,
) {
    hca.push(wc(3)).unwrap();
    let ev = verbs(take(consumer, 1).remove(0));
    assert!(
        matches!(ev, VerbsEvent::Completion { cq: c, wc } if c == cq && wc.wr_id == 3),
        "{ev:?}"
    );
    assert_eq!(consumer.try_dequeue().err(), Some(TryDequeueError::Empty));
}

#[test]
fn async_events_are_delivered_through_the_evd() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (events, device) = SoftDevice::new().unwrap();
    let (cq, hca) = SoftCq::with_device(2, CqId(8), &device).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver
        .register_async(AsyncFeed::new(events, poster.clone()))
        .unwrap();
    driver
        .register(Feed::new(cq, CqId(8), poster), FeedMode::Event)
        .unwrap();
    let running = driver.spawn().unwrap();
    device.raise(AsyncEvent::new(
        AsyncEventKind::PortActive,
        AsyncElement::Port(1),
    ));
    let evs = take(&mut consumer, 1);
    assert!(matches!(evs[0], VerbsEvent::Async(a) if a.kind == AsyncEventKind::PortActive));
    // An overrun reaches the EVD through the async feed only; the CQ's
    // feed delivers what the CQ holds, and goes on.
    overrun_a_cq_of_two(&hca, &device);
    assert_overrun_delivered(&take(&mut consumer, 4), CqId(8));
    assert_the_feed_goes_on(&hca, &mut consumer, CqId(8), |e| e);
    running.shutdown().unwrap();
}

#[test]
fn a_cq_overrun_reaches_the_evd_with_no_async_feed_registered() {
    // Nobody listens to the device: registering the CQ's feed makes the
    // driver serve the device's async events into the same EVD, so the
    // overrun's CqError (raised by the device only) arrives.
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let device = SoftDevice::unheard().unwrap();
    let (cq, hca) = SoftCq::with_device(2, CqId(9), &device).unwrap();
    let (driver, _) = driver_serving(Feed::new(cq, CqId(9), poster), FeedMode::Event);
    assert!(device.take_events().is_none(), "the driver took them");
    let running = driver.spawn().unwrap();
    overrun_a_cq_of_two(&hca, &device);
    assert_overrun_delivered(&take(&mut consumer, 4), CqId(9));
    assert_the_feed_goes_on(&hca, &mut consumer, CqId(9), |e| e);
    let s = running.shutdown().unwrap();
    assert_eq!(s.len(), 1, "the feed");
    assert!(
        device.take_events().is_some(),
        "the device's feed the driver added was dropped, its events given back"
    );
}

/// The shutdown hands back the feeds registered with keys, and only them:
/// a device feed the driver added itself is dropped there, which gives the
/// device's events back at once (a new driver, or `take_events`, gets them).
#[test]
fn the_shutdown_holds_only_keyed_feeds_and_gives_a_devices_events_back() {
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let device = SoftDevice::unheard().unwrap();
    let (cq, _hca) = SoftCq::with_device(2, CqId(9), &device).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(9), poster), FeedMode::Event)
        .unwrap();
    assert!(device.take_events().is_none(), "the driver took them");
    let mut stopped = driver.spawn().unwrap().shutdown().unwrap();
    assert_eq!(stopped.ids().collect::<Vec<_>>(), [key.id()]);
    assert!(device.take_events().is_some(), "given back at the shutdown");
    let _feed: Feed<SoftCq> = stopped.take(key).unwrap();
    assert!(stopped.is_empty());
}

#[test]
fn a_device_whose_events_are_taken_is_not_served_twice() {
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (_events, device) = SoftDevice::new().unwrap();
    let (cq, _hca) = SoftCq::with_device(2, CqId(9), &device).unwrap();
    let (driver, _) = driver_serving(Feed::new(cq, CqId(9), poster), FeedMode::Event);
    // The keyed feed only: no device feed was added for events the
    // application takes itself (the `Shutdown` would not show one).
    let shown = format!("{driver:?}");
    assert!(shown.contains("feeds: 1,"), "{shown}");
    assert_eq!(driver.spawn().unwrap().shutdown().unwrap().len(), 1);
}

#[test]
fn a_cq_overrun_reaches_an_app_evd_with_no_async_feed_registered() {
    // The driver builds the device's fallback async feed into the feed's own
    // EVD, of the feed's event type.
    let (poster, mut consumer) = evd::bounded::<AppEvent>(64).unwrap();
    let device = SoftDevice::unheard().unwrap();
    let (cq, hca) = SoftCq::with_device(2, CqId(9), &device).unwrap();
    let (driver, _) = driver_serving(Feed::new(cq, CqId(9), poster.clone()), FeedMode::Event);
    assert!(device.take_events().is_none(), "the driver took them");
    let running = driver.spawn().unwrap();
    poster.post(AppEvent::Tick).unwrap();
    overrun_a_cq_of_two(&hca, &device);
    // The tick first (posted first), then what the overrun brings.
    let mut overflow_reports = 0;
    let mut evs = take_counting_overflow(&mut consumer, 5, &mut overflow_reports).into_iter();
    assert_eq!(overflow_reports, 0);
    assert!(matches!(evs.next(), Some(AppEvent::Tick)));
    let verbs = |ev| match ev {
        AppEvent::Verbs(ev) => ev,
        other => panic!("{other:?}"),
    };
    assert_overrun_delivered(&evs.map(verbs).collect::<Vec<_>>(), CqId(9));
    assert_the_feed_goes_on(&hca, &mut consumer, CqId(9), verbs);
    let s = running.shutdown().unwrap();
    assert_eq!(s.len(), 1, "the feed");
    assert!(
        device.take_events().is_some(),
        "the device's feed the driver added was dropped, its events given back"
    );
}

/// An EVD of `capacity` holding one completion, under a handler that
/// panics on its first event (`common::panics`); what it handled, as each
/// event's `Debug` text.
fn a_completion_queued_under_a_handler_that_panics_once(
    capacity: usize,
) -> (
    evd::Poster<VerbsEvent>,
    evd::Upcalls<VerbsEvent>,
    impl Fn() -> Vec<String>,
) {
    let queued = VerbsEvent::Completion {
        cq: CqId(0),
        wc: WorkCompletion::new(7),
    };
    let (poster, up, handled) =
        common::panics::evd_under_a_handler_that_panics_once(capacity, &[queued]);
    let seen = move || handled.try_iter().map(|ev| format!("{ev:?}")).collect();
    (poster, up, seen)
}

/// A device's async events whose `next_event` first promises the EVD's last
/// free slot to another poster (a permit the test holds): as if that poster
/// took the room between the feed's look for it and the feed's post.
struct RoomTakenMeanwhile {
    events: evd_verbs::soft::SoftAsyncEvents,
    poster: evd::Poster<VerbsEvent>,
    permit: std::sync::Arc<std::sync::Mutex<Option<evd::OwnedPermit<VerbsEvent>>>>,
}

impl evd_verbs::AsyncEventSource for RoomTakenMeanwhile {
    fn fd(&self) -> std::os::fd::RawFd {
        self.events.fd()
    }
    fn next_event(&mut self) -> std::io::Result<Option<AsyncEvent>> {
        let mut permit = self.permit.lock().unwrap();
        if permit.is_none() {
            *permit = Some(self.poster.clone().try_reserve_owned().ok().unwrap());
        }
        self.events.next_event()
    }
}

/// The room the async feed saw is taken before its post, on a full EVD
/// under an idle upcall policy: the post runs the draining upcall, whose
/// handler panics, with the event taken out of the device. The event stays
/// in the feed, and the next call delivers it.
#[test]
fn a_handler_panic_in_a_post_that_found_the_room_taken_costs_no_event() {
    common::panics::quiet_provoked_panics();
    let (poster, _up, handled) = a_completion_queued_under_a_handler_that_panics_once(2); // one slot left
    let (events, device) = SoftDevice::new().unwrap();
    let permit = std::sync::Arc::default();
    let source = RoomTakenMeanwhile {
        events,
        poster: poster.clone(),
        permit: std::sync::Arc::clone(&permit),
    };
    let mut feed = AsyncFeed::new(source, poster);
    device.raise(AsyncEvent::new(
        AsyncEventKind::PortActive,
        AsyncElement::Port(1),
    ));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    assert!(r.is_err(), "the handler's panic comes out of the call");
    drop(permit.lock().unwrap().take());
    assert_eq!(feed.progress(16).delivered, 1, "the event in hand");
    let seen: Vec<String> = handled();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].contains("Completion"), "{seen:?}");
    assert!(seen[1].contains("Port(1)"), "{seen:?}");
}

/// A full EVD under an idle upcall policy is drained only by the upcall a
/// post starts. The async feed runs that upcall before it takes an event
/// out of the device, so a handler that panics there costs no event: the
/// next call delivers it.
#[test]
fn a_handler_panic_on_a_full_evd_costs_the_async_feed_no_event() {
    common::panics::quiet_provoked_panics();
    let (poster, _up, handled) = a_completion_queued_under_a_handler_that_panics_once(1); // full
    let (events, device) = SoftDevice::new().unwrap();
    let mut feed = AsyncFeed::new(events, poster);
    device.raise(AsyncEvent::new(
        AsyncEventKind::PortActive,
        AsyncElement::Port(1),
    ));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    assert!(r.is_err(), "the handler's panic comes out of the call");
    assert_eq!(feed.progress(16).delivered, 1);
    let seen: Vec<String> = handled();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].contains("Completion"), "{seen:?}");
    assert!(
        seen[1].contains("Port(1)"),
        "the port event was handled: {seen:?}"
    );
}

/// A post whose upcall handler panics leaves the events behind the one it
/// panicked on queued with no upcall running (here the feed's own event),
/// and a quiet device posts nothing that would start one: the feed's next
/// call starts it again.
#[test]
fn the_next_call_restarts_the_upcall_an_async_feeds_panicking_post_left() {
    common::panics::quiet_provoked_panics();
    let (poster, _up, handled) = a_completion_queued_under_a_handler_that_panics_once(8);
    let (events, device) = SoftDevice::new().unwrap();
    let mut feed = AsyncFeed::new(events, poster);
    device.raise(AsyncEvent::new(
        AsyncEventKind::PortActive,
        AsyncElement::Port(1),
    ));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    assert!(r.is_err(), "the handler's panic comes out of the call");
    assert_eq!(feed.progress(16).delivered, 0, "no new event");
    let seen: Vec<String> = handled();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].contains("Completion"), "{seen:?}");
    assert!(seen[1].contains("Port(1)"), "{seen:?}");
}

/// Process until `consumer` has an event, which must be an async one.
fn drive_to_async_event(
    driver: &mut Driver,
    consumer: &mut evd::Consumer<VerbsEvent>,
) -> AsyncEvent {
    match take_processing(driver, consumer, 1, none)
        .into_iter()
        .next()
    {
        Some(VerbsEvent::Async(a)) => a,
        other => panic!("{other:?}"),
    }
}

/// The device feed a registration brought lives as long as the feed that
/// brought it: removing that feed stops it (its EVD hears nothing of the
/// device after the removal) and offers the device's events to the feeds
/// left, so a feed on the same device registered while they were taken
/// gets them in its own EVD; the driver keeps no feed nobody can remove.
#[test]
fn a_device_feed_goes_with_the_feed_that_brought_it_and_its_events_to_a_feed_left() {
    let device = SoftDevice::unheard().unwrap();
    let (p1, mut c1) = evd::bounded::<VerbsEvent>(8).unwrap();
    let (p2, mut c2) = evd::bounded::<VerbsEvent>(8).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let (cq1, _hca1) = SoftCq::with_device(4, CqId(1), &device).unwrap();
    let first = driver
        .register(Feed::new(cq1, CqId(1), p1), FeedMode::Event)
        .unwrap();
    let (cq2, _hca2) = SoftCq::with_device(4, CqId(2), &device).unwrap();
    driver
        .register(Feed::new(cq2, CqId(2), p2), FeedMode::Event)
        .unwrap();
    let port = |n| AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(n));
    device.raise(port(1));
    assert_eq!(drive_to_async_event(&mut driver, &mut c1), port(1));
    drop(driver.remove(first).unwrap());
    device.raise(port(2));
    assert_eq!(drive_to_async_event(&mut driver, &mut c2), port(2));
    assert_eq!(
        c1.try_dequeue(),
        Err(TryDequeueError::Closed),
        "nothing more"
    );
    let running = driver.spawn().unwrap();
    assert_eq!(running.shutdown().unwrap().len(), 1, "the feed left");
}

/// A feed of a CQ of `device` registered with `driver`, into an EVD of its
/// own: its key and that EVD's consumer.
fn feed_on(
    driver: &mut Driver,
    device: &SoftDevice,
    id: u32,
) -> (evd_verbs::FeedKey<Feed<SoftCq>>, evd::Consumer<VerbsEvent>) {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let (cq, _hca) = SoftCq::with_device(4, CqId(id), device).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(id), poster), FeedMode::Event)
        .unwrap();
    (key, consumer)
}

/// The device's events a removed feed's device feed gave back are offered
/// to a feed left that still serves an open EVD: not to one whose consumer
/// is gone, where they would stop.
#[test]
fn a_device_feeds_events_are_offered_past_a_feed_whose_evd_is_closed() {
    let device = SoftDevice::unheard().unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let mut feed_on_device = |id| feed_on(&mut driver, &device, id);
    let (first, _c1) = feed_on_device(1);
    let (_closed, c2) = feed_on_device(2);
    let (_open, mut c3) = feed_on_device(3);
    drop(c2);
    drop(driver.remove(first).unwrap());
    let port = AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(3));
    device.raise(port);
    assert_eq!(drive_to_async_event(&mut driver, &mut c3), port);
}

/// A device feed whose EVD closes (its consumer dropped) while the feed
/// that brought it stays registered takes nothing more from the device: it
/// is dropped, and the device's events go on to a feed left that serves an
/// open EVD.
#[test]
fn a_device_feeds_events_go_on_to_a_feed_left_when_its_evd_closes() {
    let device = SoftDevice::unheard().unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let mut feed_on_device = |id| feed_on(&mut driver, &device, id);
    let (_first, c1) = feed_on_device(1);
    let (_second, mut c2) = feed_on_device(2);
    drop(c1);
    let port = AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(1));
    device.raise(port);
    assert_eq!(drive_to_async_event(&mut driver, &mut c2), port);
    let running = driver.spawn().unwrap();
    assert_eq!(running.shutdown().unwrap().len(), 2, "both feeds");
}

/// A device feed the driver added whose code panics when the shutdown
/// drops it costs the application none of its feeds: the shutdown hands
/// them back (the panic is swallowed, as when a `Shutdown` drops a feed).
#[test]
fn a_device_feed_that_panics_when_the_shutdown_drops_it_costs_no_keyed_feed() {
    use evd_verbs::AsyncEventSource;
    common::panics::quiet_provoked_panics();
    let device = SoftDevice::unheard().unwrap();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let hooked = common::hooked_cq::HookedCq::new(SoftCq::new(4).unwrap().0);
    *hooked.device_events.lock().unwrap() = Some(Box::new(move || {
        let events = device.take_events()?;
        Some(Box::new(common::panics::EventsThatPanicOnDrop(events)) as Box<dyn AsyncEventSource>)
    }));
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver
        .register(Feed::new(hooked, CqId(1), poster), FeedMode::Event)
        .unwrap();
    let stopped = driver.spawn().unwrap().shutdown();
    let stopped = stopped.expect("the keyed feed comes back");
    assert_eq!(stopped.ids().collect::<Vec<_>>(), [key.id()]);
}

/// A device's events whose `fd` panics (the provider's code).
struct PanickingFd;

impl evd_verbs::AsyncEventSource for PanickingFd {
    fn fd(&self) -> std::os::fd::RawFd {
        panic!("{}", common::panics::PROVOKED);
    }
    fn next_event(&mut self) -> std::io::Result<Option<AsyncEvent>> {
        Ok(None)
    }
}

/// The offer of a removed feed's device events runs the code of the feeds
/// left (their CQ's `device_events`, the offered source's `fd`): a panic
/// there is caught and reported by the next `process`, as a turn's, and the
/// removal returns the feed.
#[test]
fn a_panic_in_the_offer_of_a_device_feeds_events_is_a_turns() {
    common::panics::quiet_provoked_panics();
    let device = SoftDevice::unheard().unwrap();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let (cq, _hca) = SoftCq::with_device(4, CqId(1), &device).unwrap();
    let first = driver
        .register(Feed::new(cq, CqId(1), poster.clone()), FeedMode::Event)
        .unwrap();
    let hooked = common::hooked_cq::HookedCq::new(SoftCq::new(4).unwrap().0);
    let mut asked = 0;
    *hooked.device_events.lock().unwrap() = Some(Box::new(move || {
        asked += 1;
        // At its registration: taken (by the first feed's device feed).
        (asked > 1).then(|| Box::new(PanickingFd) as Box<dyn evd_verbs::AsyncEventSource>)
    }));
    driver
        .register(Feed::new(hooked, CqId(2), poster), FeedMode::Event)
        .unwrap();
    let removed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.remove(first)));
    let feed = removed.expect("no panic out of remove").expect("the feed");
    assert_eq!(feed.id(), CqId(1));
    let start = std::time::Instant::now();
    loop {
        assert!(start.elapsed() < common::driver::WATCHDOG, "never reported");
        match driver.process(Some(std::time::Duration::from_millis(10))) {
            Err(evd_verbs::DriverError::Panicked(p)) => {
                assert_eq!(p.message(), Some(common::panics::PROVOKED));
                break;
            }
            Err(e) => panic!("{e}"),
            Ok(_) => {}
        }
    }
}

/// A device's events whose source fails on every read.
struct FailsAtOnce(evd_verbs::soft::SoftAsyncEvents);

impl evd_verbs::AsyncEventSource for FailsAtOnce {
    fn fd(&self) -> std::os::fd::RawFd {
        self.0.fd()
    }
    fn next_event(&mut self) -> std::io::Result<Option<AsyncEvent>> {
        Err(std::io::Error::from_raw_os_error(libc::EIO))
    }
}

/// An event type whose `From` panics on a `SourceFailed` event.
#[derive(Debug)]
struct NoSourceFailed(#[allow(dead_code)] VerbsEvent);

impl From<VerbsEvent> for NoSourceFailed {
    fn from(ev: VerbsEvent) -> Self {
        if let VerbsEvent::Async(a) = ev {
            if a.kind == AsyncEventKind::SourceFailed {
                panic!("{}", common::panics::PROVOKED);
            }
        }
        NoSourceFailed(ev)
    }
}

/// Call `progress` until the source's failure is taken as lasting, and
/// return that call (its panic caught): a retry (`Budget`) instead means the
/// failure came more than the retry window after the last (a slow
/// machine's), which is legal.
fn past_the_retries(
    mut progress: impl FnMut() -> evd_verbs::Progress,
) -> std::thread::Result<evd_verbs::Progress> {
    let start = std::time::Instant::now();
    loop {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut progress));
        if !matches!(&r, Ok(p) if p.status == FeedStatus::Budget) {
            return r;
        }
        assert!(start.elapsed() < common::driver::WATCHDOG, "never failed");
    }
}

/// A failed source's `SourceFailed` event whose `From` panics on every try
/// is built once more, then lost: the feed reports `Failed` instead of
/// panicking on every call for ever.
#[test]
fn a_source_failed_event_whose_conversion_always_panics_is_lost_after_a_second_try() {
    common::panics::quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<NoSourceFailed>(8).unwrap();
    let (events, _device) = SoftDevice::new().unwrap();
    let mut feed = AsyncFeed::new(FailsAtOnce(events), poster);
    assert_eq!(feed.progress(16).status, FeedStatus::Budget, "retried");
    let first = past_the_retries(|| feed.progress(16));
    assert!(
        first.is_err(),
        "try 1: the conversion's panic reaches the caller"
    );
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
    assert!(
        r.is_err(),
        "try 2: the conversion's panic reaches the caller"
    );
    // Its last try panicked: lost, and counted at once (not by the call
    // that moves the feed on).
    assert_eq!(feed.from_panics(), 1, "lost");
    let p = feed.progress(16);
    assert_eq!((p.delivered, p.status), (0, FeedStatus::Failed));
    assert_eq!(feed.from_panics(), 1, "counted once");
    assert_eq!(feed.progress(16).status, FeedStatus::Failed);
    assert_eq!(feed.from_panics(), 1);
    assert_eq!(feed.failure(), Some(libc::EIO));
    assert_eq!(consumer.try_dequeue().err(), Some(TryDequeueError::Empty));
}

/// The owed event lost after its tries is counted, and the feed reports
/// `Failed`, even when the EVD closed or filled after the second try:
/// there is nothing left to post, so no room is waited for.
#[test]
fn a_source_failed_event_lost_after_its_tries_is_counted_with_the_evd_closed_or_full() {
    common::panics::quiet_provoked_panics();
    for closed in [true, false] {
        let (poster, consumer) = evd::bounded::<NoSourceFailed>(2).unwrap();
        let (events, _device) = SoftDevice::new().unwrap();
        let mut feed = AsyncFeed::new(FailsAtOnce(events), poster.clone());
        assert_eq!(feed.progress(16).status, FeedStatus::Budget, "retried");
        assert!(past_the_retries(|| feed.progress(16)).is_err());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
        assert!(r.is_err());
        let port_active = || {
            NoSourceFailed(VerbsEvent::Async(AsyncEvent::new(
                AsyncEventKind::PortActive,
                evd_verbs::AsyncElement::Port(1),
            )))
        };
        if closed {
            drop(consumer);
        } else {
            while poster.post(port_active()).is_ok() {}
        }
        let p = feed.progress(16);
        assert_eq!(
            (p.delivered, p.status),
            (0, FeedStatus::Failed),
            "closed: {closed}"
        );
        assert_eq!(feed.from_panics(), 1, "closed: {closed}");
    }
}

/// A device's events whose source fails with an error whose errno is 0.
struct FailsWithErrnoZero(evd_verbs::soft::SoftAsyncEvents);

impl evd_verbs::AsyncEventSource for FailsWithErrnoZero {
    fn fd(&self) -> std::os::fd::RawFd {
        self.0.fd()
    }
    fn next_event(&mut self) -> std::io::Result<Option<AsyncEvent>> {
        Err(std::io::Error::from_raw_os_error(0))
    }
}

/// A source's failure of errno 0 (a source of the caller's own) reads as
/// EIO, as one of no errno does: `failure` is never `Some(0)`.
#[test]
fn a_source_failure_of_errno_zero_reads_as_eio() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let (events, _device) = SoftDevice::new().unwrap();
    let mut feed = AsyncFeed::new(FailsWithErrnoZero(events), poster);
    assert_eq!(feed.progress(16).status, FeedStatus::Budget, "retried");
    let failed = past_the_retries(|| feed.progress(16)).unwrap();
    assert_eq!(failed.status, FeedStatus::Failed);
    assert_eq!(feed.failure(), Some(libc::EIO));
    assert!(matches!(
        consumer.try_dequeue(),
        Ok(VerbsEvent::Async(a)) if a.kind == AsyncEventKind::SourceFailed
    ));
}

/// `Driver::remove` of a feed that brought a device feed returns once that
/// device feed is dropped too, even when the feed itself had no poll to
/// cancel (awake, blocked on a full EVD, on epoll): the device's events are
/// given back, and no poster of the EVD is left in the driver, so the
/// EVD's consumer sees its end once the caller drops the feed and its own
/// posters.
#[test]
fn removing_a_feed_waits_for_the_device_feed_it_brought() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    let device = SoftDevice::unheard().unwrap();
    let (cq, hca) = SoftCq::with_device(4, CqId(9), &device).unwrap();
    let config = DriverConfig::default().with_backend(evd_verbs::DriverBackend::Epoll);
    let mut driver = Driver::new(config).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(9), poster.clone()), FeedMode::Event)
        .unwrap();
    driver.process(Some(std::time::Duration::ZERO)).unwrap(); // both feeds asleep
    assert!(device.take_events().is_none(), "the driver took them");
    // The EVD full: the feed's wake takes its channel event and waits for
    // room, the completion left in the CQ and its fd's one-shot poll spent.
    poster
        .post(VerbsEvent::Async(AsyncEvent::new(
            AsyncEventKind::PortActive,
            AsyncElement::Port(1),
        )))
        .unwrap();
    hca.push(wc(1)).unwrap();
    let start = std::time::Instant::now();
    while hca.stats().events_got == 0 {
        assert!(start.elapsed() < common::driver::WATCHDOG, "never woken");
        driver
            .process(Some(std::time::Duration::from_millis(10)))
            .unwrap();
    }
    let feed = driver.remove(key).unwrap();
    assert!(
        device.take_events().is_some(),
        "the device feed still held the device's events"
    );
    drop((feed, poster));
    assert!(consumer.try_dequeue().is_ok(), "the event that filled it");
    assert_eq!(
        consumer.try_dequeue().err(),
        Some(TryDequeueError::Closed),
        "a poster of the EVD is left in the driver"
    );
}
