//! A feed whose verbs calls fail (`req_notify`, `get_cq_event`, the ring's
//! poll of its channel fd): the driver reports the failure as that feed's,
//! retries it once, gives the feed up if it fails again within
//! `FEED_RETRY_WINDOW` (its CQ drained first, then a `CqError` in its EVD;
//! an async or CM feed's source drained, then a `SourceFailed` event), and
//! serves its other feeds on, from the caller's loop and on its own thread
//! alike, on both backends.

mod common;

use common::driver::{
    BACKENDS, WATCHDOG, none, port_active, readable_within_watchdog, take, take_processing,
    telling_waker,
};
use common::hooked_cq::HookedCq;
use common::panics::{PROVOKED, quiet_provoked_panics};
use common::wc;
use evd_verbs::soft::{SoftCm, SoftCq, SoftDevice};
use evd_verbs::{
    AsyncElement, AsyncEvent, AsyncEventKind, AsyncEventSource, AsyncFeed, CmEvent, CmEventKind,
    CmEventSource, CmFeed, CmToken, CompletionQueue, CqId, Driver, DriverBackend, DriverConfig,
    DriverError, Feed, FeedMode, PollError, VerbsEvent,
};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// What a [`Flaky`] call does next (the value of its knob).
const WORKS: u8 = 0;
/// Fails once (`EIO`), then works.
const FAILS_ONCE: u8 = 1;
/// Panics once, then works.
const PANICS_ONCE: u8 = 2;
/// Fails (`EIO`) from now on.
const ALWAYS_FAILS: u8 = 3;

/// What a knob says this call does: `Err` to fail it, a panic, or `Ok` to
/// let the soft CQ's own call run.
fn knob_says(knob: &AtomicU8) -> std::io::Result<()> {
    let eio = || Err(std::io::Error::from_raw_os_error(libc::EIO));
    if knob.load(Relaxed) == ALWAYS_FAILS {
        return eio();
    }
    match knob.swap(WORKS, Relaxed) {
        FAILS_ONCE => eio(),
        PANICS_ONCE => panic!("{PROVOKED}"),
        _ => Ok(()),
    }
}

/// A software CQ whose arm and `get_event` each do what their knob says,
/// and whose next poll hides what is queued (as if the wake's completion
/// had been polled already) when `hide_next_poll` is set.
struct Flaky {
    cq: HookedCq,
    arm: Arc<AtomicU8>,
    get_event: Arc<AtomicU8>,
    hide_next_poll: Arc<AtomicU8>,
}

impl Flaky {
    fn new(cq: SoftCq) -> Self {
        let (arm, get_event, hide) = <[Arc<AtomicU8>; 3]>::default().into();
        let mut cq = HookedCq::new(cq);
        let h = Arc::clone(&hide);
        cq.poll = Some(Box::new(move |_, want| {
            Ok(if h.swap(0, Relaxed) != 0 { 0 } else { want })
        }));
        let a = Arc::clone(&arm);
        cq.req_notify = Some(Box::new(move |cq, solicited_only| {
            knob_says(&a)?;
            cq.req_notify(solicited_only)
        }));
        let g = Arc::clone(&get_event);
        cq.get_event = Some(Box::new(move |cq, ()| {
            knob_says(&g)?;
            cq.get_event()
        }));
        Flaky {
            cq,
            arm,
            get_event,
            hide_next_poll: hide,
        }
    }
}

fn config(backend: DriverBackend) -> DriverConfig {
    DriverConfig::default().with_backend(backend)
}

fn wr_id(ev: &VerbsEvent) -> Option<u64> {
    match ev {
        VerbsEvent::Completion { wc, .. } => Some(wc.wr_id),
        _ => None,
    }
}

/// The `CqError` a given-up feed of CQ 0 delivers.
fn is_cq_error(ev: &VerbsEvent) -> bool {
    matches!(ev, VerbsEvent::Async(a)
        if a.kind == AsyncEventKind::CqError && a.element == AsyncElement::Cq(CqId(0)))
}

/// A CQ whose `get_event` fails or panics once, before it takes the channel
/// event of a completion: the failed turn is reported as the feed's, the
/// next re-arms the CQ and drains it, and the feed, asleep again, is woken
/// by the next completion (whose wake-up takes both events), on either
/// backend. (io_uring's multishot poll reports only new wake-ups: a feed
/// that slept believing its used-up arm still set would never hear from
/// its CQ again.) With sequenced arms (mlx4, mlx5, hns) the re-arm is
/// ignored until the waiting event is got: the feed must poll its fd
/// afresh to hear of that event, after a panic as after a failure.
#[test]
fn a_get_event_that_fails_or_panics_once_is_retried_and_the_feed_is_served_on() {
    quiet_provoked_panics();
    for (backend, sequenced) in BACKENDS.into_iter().flat_map(|b| [(b, false), (b, true)]) {
        for failure in [FAILS_ONCE, PANICS_ONCE] {
            let case = format!("{backend:?}, sequenced arms {sequenced}, failure {failure}");
            let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
            let (cq, hca) = SoftCq::new(64).unwrap();
            hca.set_sequenced_arms(sequenced);
            let flaky = Flaky::new(cq);
            let knob = Arc::clone(&flaky.get_event);
            let mut driver = Driver::new(config(backend)).unwrap();
            let key = driver
                .register(Feed::new(flaky.cq, CqId(0), poster), FeedMode::Event)
                .unwrap();
            driver.process(Some(Duration::ZERO)).unwrap();
            assert!(hca.stats().armed, "{case}: asleep on an armed CQ");
            knob.store(failure, Relaxed);
            hca.push(wc(1)).unwrap();
            let failed = first_error(&mut driver);
            let reported = match &failed {
                Some(DriverError::FeedFailed {
                    feed,
                    error,
                    given_up,
                }) => {
                    failure == FAILS_ONCE
                        && *feed == key.id()
                        && error.raw_os_error() == Some(libc::EIO)
                        && !given_up
                }
                Some(DriverError::Panicked(p)) => {
                    failure == PANICS_ONCE && p.message() == Some(PROVOKED)
                }
                _ => false,
            };
            assert!(reported, "{case}: the failed turn is reported: {failed:?}");
            assert_eq!(hca.stats().channel_events, 1, "{case}: the event was left");
            driver.process(Some(Duration::ZERO)).unwrap();
            assert_eq!(
                hca.stats().armed,
                !sequenced,
                "{case}: the retry re-armed the CQ (ignored if sequenced)"
            );
            let got: Vec<_> = take(&mut consumer, 1).iter().map(wr_id).collect();
            assert_eq!(got, [Some(1)], "{case}");
            hca.push(wc(2)).unwrap();
            let start = Instant::now();
            while consumer.is_empty() {
                assert!(
                    start.elapsed() < WATCHDOG,
                    "{case}: the feed was never woken again"
                );
                driver.process(Some(Duration::from_millis(100))).unwrap();
            }
            assert_eq!(
                consumer.try_dequeue().ok().as_ref().and_then(wr_id),
                Some(2),
                "{case}"
            );
            assert_eq!(hca.stats().channel_events, 0, "{case}: every event got");
            let stats = driver.stats();
            let failures = u64::from(failure == FAILS_ONCE);
            assert_eq!(stats.feed_failures, failures, "{case}");
            assert_eq!(stats.feeds_given_up, 0, "{case}");
        }
    }
}

/// A completion fires the CQ's arm; the wake's poll finds nothing (it is
/// hidden once), so the feed arms at once, and that arm fails. The retry
/// must arm and drain, and a caller that waits on the driver's fd after
/// the error must be woken for it (the error stands in for the `Activity`
/// that would have said the feed is busy): a feed left asleep on its
/// unarmed CQ would strand the completion for good.
#[test]
fn an_arm_that_fails_after_a_wake_is_retried_not_slept_on() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
        let (cq, hca) = SoftCq::new(64).unwrap();
        let flaky = Flaky::new(cq);
        let (hide, arm) = (flaky.hide_next_poll.clone(), flaky.arm.clone());
        let mut driver = Driver::new(config(backend)).unwrap();
        let key = driver
            .register(Feed::new(flaky.cq, CqId(0), poster), FeedMode::Event)
            .unwrap();
        driver.process(Some(Duration::ZERO)).unwrap();
        assert!(hca.stats().armed);
        hide.store(1, Relaxed);
        arm.store(FAILS_ONCE, Relaxed);
        hca.push(wc(9)).unwrap();
        let failed = first_error(&mut driver);
        assert!(
            matches!(&failed, Some(DriverError::FeedFailed { feed, error, given_up: false })
                if *feed == key.id() && error.raw_os_error() == Some(libc::EIO)),
            "{backend:?}: the failed arm is reported as the feed's, retried: {failed:?}"
        );
        assert!(!hca.stats().armed);
        assert!(
            hca.is_stranded(),
            "{backend:?}: queued, unarmed, no event: only a retry helps"
        );
        assert!(
            readable_within_watchdog(&driver),
            "{backend:?}: the driver's fd wakes the caller's loop for the retry"
        );
        driver.process(Some(Duration::ZERO)).unwrap();
        assert!(hca.stats().armed, "{backend:?}: the retry armed the CQ");
        assert!(
            matches!(consumer.try_dequeue(), Ok(VerbsEvent::Completion { wc, .. }) if wc.wr_id == 9),
            "{backend:?}"
        );
    }
}

/// The first error `process` returns while the driver serves (at most 100
/// calls of up to 100 ms each: a watchdog, not a timing).
fn first_error(driver: &mut Driver) -> Option<DriverError> {
    (0..100).find_map(|_| driver.process(Some(Duration::from_millis(100))).err())
}

/// A feed that is done (its CQ's poll failed: its `CqError` delivered) is
/// neither retried nor given up when its channel's calls fail later: it
/// takes no channel event at all, so nothing fails and nothing is counted.
#[test]
fn a_done_feed_takes_no_channel_event_and_reports_no_failure() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
        let (cq, hca) = SoftCq::new(64).unwrap();
        let flaky = Flaky::new(cq);
        let knob = Arc::clone(&flaky.get_event);
        let mut driver = Driver::new(config(backend)).unwrap();
        driver
            .register(Feed::new(flaky.cq, CqId(0), poster), FeedMode::Event)
            .unwrap();
        driver.process(Some(Duration::ZERO)).unwrap();
        hca.push(wc(1)).unwrap();
        let got = take_processing(&mut driver, &mut consumer, 1, none);
        assert_eq!(wr_id(&got[0]), Some(1), "{backend:?}");
        // The next turn arms, polls, and the poll fails: `CqError`, done.
        hca.fail_next_poll(libc::EIO);
        let got = take_processing(&mut driver, &mut consumer, 1, none);
        assert!(is_cq_error(&got[0]), "{backend:?}: {got:?}");
        knob.store(ALWAYS_FAILS, Relaxed);
        for _ in 0..3 {
            hca.inject_spurious_event();
            driver.process(Some(Duration::from_millis(10))).unwrap();
        }
        assert_eq!(driver.stats().feed_failures, 0, "{backend:?}");
    }
}

/// A CQ whose arm, or whose `get_event`, fails from some point on (a broken
/// device): the first failure is retried; one within the retry window of
/// the last gives the feed up. Every completion its CQ held is delivered,
/// then one `CqError` saying why, and the driver then sleeps: the feed is
/// neither retried in a busy loop (epoll's level-triggered fd reports the
/// events `get_event` cannot take at every turn) nor served again.
#[test]
fn a_verbs_call_that_keeps_failing_gives_the_feed_up_after_what_its_cq_holds() {
    for backend in BACKENDS {
        for call in ["arm", "get_event"] {
            let case = format!("{backend:?}, {call}");
            let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
            let (cq, hca) = SoftCq::new(64).unwrap();
            let flaky = Flaky::new(cq);
            let (knob, why) = match call {
                "arm" => (flaky.arm.clone(), PollError::ArmFailed(libc::EIO)),
                _ => (flaky.get_event.clone(), PollError::ChannelFailed(libc::EIO)),
            };
            let mut driver = Driver::new(config(backend)).unwrap();
            let key = driver
                .register(Feed::new(flaky.cq, CqId(0), poster), FeedMode::Event)
                .unwrap();
            driver.process(Some(Duration::ZERO)).unwrap();
            knob.store(ALWAYS_FAILS, Relaxed);
            // A new completion each time the last one came back, until a
            // failure gives the feed up (a failure later than the window
            // after the last is retried: legal on a slow machine).
            let (mut pushed, mut got, mut failures) = (0, Vec::new(), Vec::new());
            let start = Instant::now();
            while failures.last() != Some(&true) {
                assert!(start.elapsed() < WATCHDOG, "{case}: {failures:?}");
                if got.len() as u64 == pushed {
                    pushed += 1;
                    hca.push(wc(pushed)).unwrap();
                }
                match driver.process(Some(Duration::from_millis(100))) {
                    Ok(_) => {}
                    Err(DriverError::FeedFailed {
                        feed,
                        error,
                        given_up,
                    }) => {
                        assert_eq!(feed, key.id(), "{case}");
                        assert_eq!(error.raw_os_error(), Some(libc::EIO), "{case}");
                        failures.push(given_up);
                    }
                    Err(e) => panic!("{case}: {e}"),
                }
                got.extend(std::iter::from_fn(|| consumer.try_dequeue().ok()));
            }
            while !got.last().is_some_and(is_cq_error) {
                assert!(start.elapsed() < WATCHDOG, "{case}: no CqError: {got:?}");
                driver.process(Some(Duration::from_millis(100))).unwrap();
                got.extend(std::iter::from_fn(|| consumer.try_dequeue().ok()));
            }
            let (error, completions) = got.split_last().unwrap();
            assert!(is_cq_error(error));
            let ids: Vec<_> = completions.iter().map(wr_id).collect();
            let pushed_ids: Vec<_> = (1..=pushed).map(Some).collect();
            assert_eq!(ids, pushed_ids, "{case}: every completion, then the error");
            assert!(
                !failures[..failures.len() - 1].contains(&true),
                "{case}: given up once: {failures:?}"
            );
            let stats = driver.stats();
            assert_eq!(stats.feed_failures, failures.len() as u64, "{case}");
            assert_eq!(stats.feeds_given_up, 1, "{case}");
            let activity = driver.process(Some(Duration::ZERO)).unwrap();
            assert!(!activity.busy, "{case}: asleep, not retrying");
            // Given up: served no more, even with its channel readable (its
            // CQ is not armed, so the push alone raises no event).
            hca.push(wc(pushed + 1)).unwrap();
            hca.inject_spurious_event();
            driver.process(Some(Duration::from_millis(10))).unwrap();
            assert!(consumer.is_empty(), "{case}: a given-up feed was served");
            assert_eq!(driver.stats().feed_failures, failures.len() as u64);
            let feed = driver.remove(key).unwrap();
            assert_eq!(feed.failure(), Some(why), "{case}");
        }
    }
}

/// A channel that fails for good after one wake-up (a removed device: its
/// event queue is woken once, then every read fails) and never wakes again:
/// the feed is given up on the second failure, after it delivered what its
/// CQ held, on either backend. (The fd stays readable: epoll reports it at
/// each sleep; io_uring's multishot poll reports only new wake-ups, so a
/// failed take of the channel's events must ask for readiness afresh.)
#[test]
fn a_channel_that_fails_after_its_last_wake_up_gives_the_feed_up() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
        let (cq, hca) = SoftCq::new(64).unwrap();
        let flaky = Flaky::new(cq);
        let knob = Arc::clone(&flaky.get_event);
        let mut driver = Driver::new(config(backend)).unwrap();
        driver
            .register(Feed::new(flaky.cq, CqId(0), poster), FeedMode::Event)
            .unwrap();
        driver.process(Some(Duration::ZERO)).unwrap();
        assert!(hca.stats().armed, "{backend:?}: asleep on an armed CQ");
        knob.store(ALWAYS_FAILS, Relaxed);
        hca.push(wc(1)).unwrap();
        let (mut got, start) = (Vec::new(), Instant::now());
        while !got.last().is_some_and(is_cq_error) {
            assert!(
                start.elapsed() < WATCHDOG,
                "{backend:?}: never given up: {got:?}, {:?}",
                driver.stats()
            );
            let _ = driver.process(Some(Duration::from_millis(100)));
            got.extend(std::iter::from_fn(|| consumer.try_dequeue().ok()));
        }
        let ids: Vec<_> = got.iter().map(wr_id).collect();
        assert_eq!(
            ids,
            [Some(1), None],
            "{backend:?}: the completion, then the error"
        );
        assert_eq!(driver.stats().feeds_given_up, 1, "{backend:?}");
    }
}

/// A feed whose channel fd cannot be polled (a number that names no open
/// file, `EBADF`; an open file with no poll method, `EPERM`, which io_uring
/// would report ready at every poll) is given up as one whose verbs calls
/// fail, and the feed beside it, on the same driver, is served throughout.
#[test]
fn a_feed_whose_fd_cannot_be_polled_is_given_up_and_the_others_are_served_on() {
    let null = std::fs::File::open("/dev/null").unwrap();
    // Above any file-descriptor limit: never open.
    let unpollable = [(i32::MAX, libc::EBADF), (null.as_raw_fd(), libc::EPERM)];
    for (backend, (fd, errno)) in BACKENDS
        .into_iter()
        .flat_map(|b| unpollable.map(|u| (b, u)))
    {
        let (poster_a, mut consumer_a) = evd::bounded::<VerbsEvent>(64).unwrap();
        let (poster_b, mut consumer_b) = evd::bounded::<VerbsEvent>(64).unwrap();
        let (cq_a, hca_a) = SoftCq::new(64).unwrap();
        let (cq_b, hca_b) = SoftCq::new(64).unwrap();
        let mut cq_a = HookedCq::new(cq_a);
        cq_a.channel_fd = Some(fd);
        let mut driver = Driver::new(config(backend)).unwrap();
        let a = driver
            .register(Feed::new(cq_a, CqId(0), poster_a), FeedMode::Event)
            .unwrap();
        driver
            .register(Feed::new(cq_b, CqId(1), poster_b), FeedMode::Event)
            .unwrap();
        hca_a.push(wc(1)).unwrap();
        let (mut got_a, mut got_b, mut pushed_b) = (Vec::new(), Vec::new(), 0);
        let start = Instant::now();
        while !got_a.last().is_some_and(is_cq_error) {
            assert!(start.elapsed() < WATCHDOG, "{backend:?}: {got_a:?}");
            if got_b.len() as u64 == pushed_b {
                pushed_b += 1;
                hca_b.push(wc(pushed_b)).unwrap();
            }
            match driver.process(Some(Duration::from_millis(100))) {
                Ok(_) => {}
                Err(DriverError::FeedFailed { feed, error, .. }) => {
                    assert_eq!(feed, a.id(), "{backend:?}");
                    assert_eq!(error.raw_os_error(), Some(errno), "{backend:?}");
                }
                Err(e) => panic!("{backend:?}: {e}"),
            }
            got_a.extend(std::iter::from_fn(|| consumer_a.try_dequeue().ok()));
            got_b.extend(std::iter::from_fn(|| consumer_b.try_dequeue().ok()));
        }
        assert_eq!(got_a.len(), 2, "{backend:?}: {got_a:?}");
        assert_eq!(wr_id(&got_a[0]), Some(1), "{backend:?}");
        assert_eq!(driver.stats().feeds_given_up, 1);
        // B is served on after A is given up.
        let next = pushed_b + 1;
        hca_b.push(wc(next)).unwrap();
        while got_b.len() as u64 != next {
            assert!(start.elapsed() < WATCHDOG, "{backend:?}: B: {got_b:?}");
            driver.process(Some(Duration::from_millis(100))).unwrap();
            got_b.extend(std::iter::from_fn(|| consumer_b.try_dequeue().ok()));
        }
        let ids: Vec<_> = got_b.iter().map(wr_id).collect();
        assert_eq!(ids, (1..=next).map(Some).collect::<Vec<_>>());
        let feed = driver.remove(a).unwrap();
        assert_eq!(feed.failure(), Some(PollError::ChannelFailed(errno)));
    }
}

/// On its own thread, the driver does what `process` does for its caller:
/// a feed's failing verbs calls end neither the thread nor the service of
/// the feed beside it.
#[test]
fn a_spawned_driver_serves_on_when_one_feeds_verbs_calls_fail() {
    let (poster_a, mut consumer_a) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (poster_b, mut consumer_b) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (cq_a, hca_a) = SoftCq::new(64).unwrap();
    let (cq_b, hca_b) = SoftCq::new(64).unwrap();
    let flaky = Flaky::new(cq_a);
    flaky.get_event.store(ALWAYS_FAILS, Relaxed);
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let a = driver
        .register(Feed::new(flaky.cq, CqId(0), poster_a), FeedMode::Event)
        .unwrap();
    let b = driver
        .register(Feed::new(cq_b, CqId(1), poster_b), FeedMode::Event)
        .unwrap();
    let running = driver.spawn().unwrap();
    // A completion at a time, each waited for, until the `CqError` comes.
    let mut ids = Vec::new();
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < WATCHDOG, "never given up: {ids:?}");
        hca_a.push(wc(ids.len() as u64 + 1)).unwrap();
        let ev = take(&mut consumer_a, 1).remove(0);
        if is_cq_error(&ev) {
            break;
        }
        ids.push(wr_id(&ev).expect("a completion or the CqError"));
    }
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    hca_b.push(wc(7)).unwrap();
    assert_eq!(wr_id(&take(&mut consumer_b, 1)[0]), Some(7));
    assert!(running.is_running());
    let stats = running.stats();
    assert_eq!(stats.feeds_given_up, 1);
    assert!(stats.feed_failures >= 2, "{stats:?}");
    let mut stopped = running.shutdown().unwrap();
    let feed_a: Feed<HookedCq> = stopped.take(a).unwrap();
    assert_eq!(feed_a.failure(), Some(PollError::ChannelFailed(libc::EIO)));
    assert!(stopped.take(b).is_some());
}

/// A stream source whose fd cannot be polled (above any descriptor limit:
/// never open), its events those of `inner`.
struct Unpollable<S>(S);

impl<S: AsyncEventSource> AsyncEventSource for Unpollable<S> {
    fn fd(&self) -> RawFd {
        i32::MAX
    }
    fn next_event(&mut self) -> std::io::Result<Option<AsyncEvent>> {
        self.0.next_event()
    }
}

impl<S: CmEventSource> CmEventSource for Unpollable<S> {
    fn fd(&self) -> RawFd {
        i32::MAX
    }
    fn next_event(&mut self) -> std::io::Result<Option<CmEvent>> {
        self.0.next_event()
    }
}

/// The driver's report of a feed's failure, which the tests here provoke.
fn a_feed_failure(e: &DriverError) -> bool {
    matches!(e, DriverError::FeedFailed { .. })
}

/// A device's async events whose fd cannot be polled are given up as a
/// CQ feed whose channel fails: the events the source still has are
/// delivered, then a `SourceFailed` event, the last; the feed's `failure`
/// says why.
#[test]
fn a_given_up_async_feed_tells_its_evd_last() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
        let (events, device) = SoftDevice::new().unwrap();
        let port_down = AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(1));
        device.raise(port_down);
        let mut driver = Driver::new(config(backend)).unwrap();
        let key = driver
            .register_async(AsyncFeed::new(Unpollable(events), poster))
            .unwrap();
        let got = take_processing(&mut driver, &mut consumer, 2, a_feed_failure);
        let kinds: Vec<_> = got
            .iter()
            .map(|ev| match ev {
                VerbsEvent::Async(e) => (e.kind, e.element),
                other => panic!("{backend:?}: {other:?}"),
            })
            .collect();
        let failed = (AsyncEventKind::SourceFailed, AsyncElement::Device);
        assert_eq!(
            kinds,
            [(port_down.kind, port_down.element), failed],
            "{backend:?}"
        );
        assert_eq!(driver.stats().feeds_given_up, 1, "{backend:?}");
        device.raise(port_down);
        driver.process(Some(Duration::from_millis(10))).unwrap();
        assert!(consumer.is_empty(), "{backend:?}: nothing after the last");
        let feed = driver.remove(key).unwrap();
        assert_eq!(feed.failure(), Some(libc::EBADF), "{backend:?}");
        // Not taken by the given-up feed: still in the source.
        use evd_verbs::AsyncEventSource;
        let mut source = feed.into_source().0;
        assert_eq!(source.next_event().unwrap(), Some(port_down), "{backend:?}");
    }
}

/// The same for the connection manager's events: the `SourceFailed` event
/// names no identifier and carries the negative errno.
#[test]
fn a_given_up_cm_feed_tells_its_evd_last() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<CmEvent>(8).unwrap();
        let (events, cm) = SoftCm::new().unwrap();
        cm.raise(CmEvent::new(CmEventKind::Established, CmToken(3)));
        let mut driver = Driver::new(config(backend)).unwrap();
        let key = driver
            .register_cm(CmFeed::new(Unpollable(events), poster))
            .unwrap();
        let got = take_processing(&mut driver, &mut consumer, 2, a_feed_failure);
        let seen: Vec<_> = got.iter().map(|e| (e.kind, e.id, e.status)).collect();
        let failed = (CmEventKind::SourceFailed, CmToken::NONE, -libc::EBADF);
        assert_eq!(
            seen,
            [(CmEventKind::Established, CmToken(3), 0), failed],
            "{backend:?}"
        );
        let feed = driver.remove(key).unwrap();
        assert_eq!(feed.failure(), Some(libc::EBADF), "{backend:?}");
    }
}

/// A connection manager's channel whose next read fails once (a transient
/// `ENOMEM` of `rdma_get_cm_event`), its events those of `inner`.
struct FailsOnce<S> {
    inner: S,
    fail_next: bool,
}

impl<S: CmEventSource> CmEventSource for FailsOnce<S> {
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }
    fn next_event(&mut self) -> std::io::Result<Option<CmEvent>> {
        if std::mem::take(&mut self.fail_next) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        self.inner.next_event()
    }
}

/// A CM feed's channel whose read fails once is read again, not failed:
/// the driver delivers every event, no `SourceFailed`, and serves the feed
/// on.
#[test]
fn a_cm_feed_whose_read_fails_once_serves_on() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<CmEvent>(8).unwrap();
        let (events, cm) = SoftCm::new().unwrap();
        let established = |id| CmEvent::new(CmEventKind::Established, CmToken(id));
        cm.raise(established(1));
        cm.raise(established(2));
        let mut driver = Driver::new(config(backend)).unwrap();
        let source = FailsOnce {
            inner: events,
            fail_next: true,
        };
        let key = driver.register_cm(CmFeed::new(source, poster)).unwrap();
        let got = take_processing(&mut driver, &mut consumer, 2, none);
        let ids: Vec<_> = got.iter().map(|e| (e.kind, e.id)).collect();
        let want = [1, 2].map(|id| (CmEventKind::Established, CmToken(id)));
        assert_eq!(ids, want, "{backend:?}");
        cm.raise(established(3));
        let got = take_processing(&mut driver, &mut consumer, 1, none);
        assert_eq!(got[0].id, CmToken(3), "{backend:?}: still served");
        let feed = driver.remove(key).unwrap();
        assert_eq!(feed.failure(), None, "{backend:?}");
        assert_eq!(feed.source_errors(), 1, "{backend:?}");
    }
}

/// A feed waiting for room holds a place in its EVD's room queue; a turn
/// that fails while it waits (its channel's `get_event`, for a wake-up the
/// io_uring backend's multishot poll reports while the feed is blocked)
/// sends it back to arm and drain, and it must give that place up: kept,
/// the place would take the next freed slot's wake, and the feed, its CQ
/// empty, would pass it on to nobody, leaving the poster waiting behind it
/// asleep beside the free slot. (On epoll, whose one-shot poll is asked for
/// only while the feed sleeps, a blocked feed's turn runs only for room.)
#[test]
fn a_feed_whose_turn_fails_while_it_waits_for_room_leaves_the_room_queue() {
    use std::task::Context;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    let (cq, hca) = SoftCq::new(16).unwrap();
    let flaky = Flaky::new(cq);
    let knob = Arc::clone(&flaky.get_event);
    let mut driver = Driver::new(config(DriverBackend::IoUring)).unwrap();
    driver
        .register(
            Feed::new(flaky.cq, CqId(0), poster.clone()),
            FeedMode::Event,
        )
        .unwrap();
    driver.process(Some(Duration::ZERO)).unwrap(); // asleep on its armed CQ
    poster.post(port_active()).unwrap(); // full
    hca.inject_spurious_event(); // the feed wakes, finds the EVD full, waits
    let start = Instant::now();
    while !consumer.query().room_wanted {
        assert!(start.elapsed() < WATCHDOG, "the feed never waited for room");
        driver.process(Some(Duration::from_millis(10))).unwrap();
    }
    let (waker, rx) = telling_waker();
    let mut behind = poster.room_waiter();
    assert!(
        behind
            .poll_room(&mut Context::from_waker(&waker))
            .is_pending()
    );
    knob.store(FAILS_ONCE, Relaxed);
    hca.inject_spurious_event();
    assert!(
        matches!(
            first_error(&mut driver),
            Some(DriverError::FeedFailed { .. })
        ),
        "the blocked feed's turn failed"
    );
    assert!(consumer.try_dequeue().is_ok()); // frees the slot
    for _ in 0..3 {
        driver.process(Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(
        rx.try_recv(),
        Ok(()),
        "the freed slot's wake went to the feed, which posted nothing"
    );
    assert!(
        behind
            .poll_room(&mut Context::from_waker(&waker))
            .is_ready()
    );
}

/// A feed whose arm keeps failing: its first failure is retried, its second
/// gives it up, and each error's call leaves the driver's fd readable while
/// the feed has work (the retry, then the drain and its `CqError`), also
/// when that call's busy turn collected the readiness the previous error's
/// wake raised (epoll's one-shot report of the driver's own wake fd), and
/// with every busy turn collecting.
#[test]
fn each_error_of_a_feed_whose_arm_keeps_failing_leaves_the_fd_readable() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
        let (cq, hca) = SoftCq::new(64).unwrap();
        let flaky = Flaky::new(cq);
        let arm = flaky.arm.clone();
        let cfg = config(backend).with_busy_enter_interval(Duration::ZERO);
        let mut driver = Driver::new(cfg).unwrap();
        driver
            .register(Feed::new(flaky.cq, CqId(0), poster), FeedMode::Event)
            .unwrap();
        driver.process(Some(Duration::ZERO)).unwrap();
        arm.store(ALWAYS_FAILS, Relaxed);
        hca.push(wc(9)).unwrap();
        // Retried, then given up; retried again by a failure later than the
        // retry window after the last (a slow machine's), which is legal.
        let (start, mut errors) = (std::time::Instant::now(), 0);
        loop {
            let failed = first_error(&mut driver);
            let Some(DriverError::FeedFailed { given_up, .. }) = failed else {
                panic!("{backend:?}: {failed:?}");
            };
            assert!(errors > 0 || !given_up, "{backend:?}: the first is retried");
            assert!(
                readable_within_watchdog(&driver),
                "{backend:?}: the fd wakes the caller after the error (given up: {given_up})"
            );
            errors += 1;
            if given_up {
                break;
            }
            assert!(start.elapsed() < WATCHDOG, "{backend:?}: never given up");
        }
        let got = take_processing(&mut driver, &mut consumer, 2, |_| false);
        assert_eq!(wr_id(&got[0]), Some(9), "{backend:?}: drained first");
        assert!(
            matches!(got[1], VerbsEvent::Async(a) if a.kind == AsyncEventKind::CqError),
            "{backend:?}: then its CqError: {:?}",
            got[1]
        );
    }
}
