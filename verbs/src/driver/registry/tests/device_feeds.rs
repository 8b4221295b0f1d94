//! The device feeds a driver adds itself, at their removal and at the
//! shutdown: a cancellation the backend refuses, a drop that panics.

use super::*;

/// A driver whose feed on `device` was removed after its CQ failed (so
/// that its own removal needed no cancellation) while the backend refused
/// its device feed's cancellation (`refuse`: how many times): the device
/// feed stopped, its cancellation owed. The removed feed's EVD, which had
/// the failed feed's `CqError` and nothing else.
fn device_feed_owed_its_cancellation(
    device: &crate::soft::SoftDevice,
    refuse: u32,
) -> (Driver, evd::Consumer<VerbsEvent>) {
    use crate::driver::cycle::Phase;
    use crate::{AsyncElement, AsyncEventKind};
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let (cq, hca) = SoftCq::with_device(1, CqId(0), device).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    let parent = key.id().index as usize;
    let child = driver.slots[parent].as_ref().unwrap().device_feed.unwrap();
    hca.fail_next_poll(libc::EIO); // the feed's first poll: it fails
    let settled = |d: &Driver| {
        let done = d.slots[parent].as_ref().unwrap().phase == Phase::Done;
        done && d.slots[child.index as usize]
            .as_ref()
            .unwrap()
            .poll_in_flight
    };
    let start = Instant::now();
    while !settled(&driver) {
        assert!(start.elapsed() < Duration::from_secs(60), "never settled");
        driver.process(Some(Duration::from_millis(10))).unwrap();
    }
    // The failed feed's CqError, and nothing else.
    match consumer.try_dequeue() {
        Ok(VerbsEvent::Async(a)) => {
            assert_eq!(
                (a.kind, a.element),
                (AsyncEventKind::CqError, AsyncElement::Cq(CqId(0)))
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(consumer.try_dequeue(), Err(evd::TryDequeueError::Empty));
    driver.faults.cancels = refuse;
    drop(driver.remove(key).unwrap());
    assert_eq!(driver.cancels_owed, [child]);
    (driver, consumer)
}

/// The device feed of a removed feed whose cancellation the backend
/// refuses is stopped all the same (nothing of the device reaches the
/// removed feed's EVD), and dropped once the cancellation, asked for again
/// every turn, goes through: the device's events are then nobody's, free
/// for the next registration.
#[test]
fn a_device_feed_whose_cancellation_is_refused_is_stopped_and_dropped_later() {
    use crate::soft::SoftDevice;
    use crate::{AsyncElement, AsyncEvent, AsyncEventKind};
    let device = SoftDevice::unheard().unwrap();
    let (mut driver, mut consumer) = device_feed_owed_its_cancellation(&device, 1);
    device.raise(AsyncEvent::new(
        AsyncEventKind::PortError,
        AsyncElement::Port(9),
    ));
    let start = Instant::now();
    while device.take_events().is_none() {
        assert!(start.elapsed() < Duration::from_secs(60), "never dropped");
        driver.process(Some(Duration::from_millis(10))).unwrap();
        let ev = consumer.try_dequeue();
        assert!(ev.is_err(), "nothing into the removed feed's EVD: {ev:?}");
    }
}

/// A shutdown while a device feed's cancellation is owed and refused for
/// good ends: the device feed is dropped (its poll ends with the backend).
#[test]
fn a_shutdown_with_a_cancellation_refused_for_good_ends() {
    let device = crate::soft::SoftDevice::unheard().unwrap();
    let (driver, _consumer) = device_feed_owed_its_cancellation(&device, u32::MAX);
    let running = driver.spawn().unwrap();
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(running.shutdown().map(|s| s.len()));
    });
    // A shutdown that never ends fails the test instead of hanging it (its
    // thread is left behind).
    let feeds = ended
        .recv_timeout(Duration::from_secs(60))
        .expect("the shutdown ended");
    assert_eq!(
        feeds.expect("a clean shutdown"),
        0,
        "the removed feed is not in it"
    );
    assert!(
        device.take_events().is_some(),
        "the device feed was dropped"
    );
}

/// A source standing in for a device feed whose drop panics.
struct PanicsOnDrop {
    fd: std::os::fd::OwnedFd,
}

impl crate::driver::source::Source for PanicsOnDrop {
    fn fd(&self) -> Option<std::os::fd::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(&self.fd))
    }
    fn take_events(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn arm_and_drain(&mut self, _budget: usize) -> std::io::Result<crate::feed::Progress> {
        Ok(self.poll(0))
    }
    fn poll(&mut self, _budget: usize) -> crate::feed::Progress {
        crate::feed::Progress {
            delivered: 0,
            status: crate::FeedStatus::Drained,
        }
    }
    fn poll_room(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        std::task::Poll::Ready(())
    }
    fn leave_room_queue(&mut self) {}
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("provoked: a device feed's drop");
    }
}

/// A device feed being dropped as its parent's removal asked (its
/// cancellation refused for good, so it is dropped at the shutdown) whose
/// drop panics costs no keyed feed: the panic is counted and swallowed, as
/// for the device feeds the shutdown drops itself.
#[test]
fn a_device_feed_whose_drop_panics_at_the_shutdown_costs_no_keyed_feed() {
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let (cq, _hca) = SoftCq::new(4).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
        .unwrap();
    let fd = crate::eventfd::new().unwrap();
    let child = driver
        .insert(Box::new(PanicsOnDrop { fd }), FeedMode::Event)
        .unwrap();
    driver.process(Some(Duration::ZERO)).unwrap(); // both asleep, polled
    driver.faults.cancels = u32::MAX;
    assert!(driver.begin_remove(child, Removal::Drop).unwrap());
    let stopped = driver.spawn().unwrap().shutdown();
    let stopped = stopped.expect("the keyed feed is handed back");
    assert_eq!(stopped.ids().collect::<Vec<_>>(), [key.id()]);
    assert_eq!(stopped.stats.handler_panics, 1);
}

/// A removal whose wait fails while the device feed it stopped still waits
/// for its poll's end is finished by the retry the docs ask for, which
/// waits for that device feed too: when it returns, the device feed is
/// dropped and the device's events given back.
#[test]
fn a_retried_removal_waits_for_the_device_feed_it_stopped() {
    let config = DriverConfig::default().with_backend(DriverBackend::Epoll);
    let mut driver = Driver::new(config).unwrap();
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    let device = crate::soft::SoftDevice::unheard().unwrap();
    let (cq, hca) = SoftCq::with_device(4, CqId(9), &device).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(9), poster.clone()), FeedMode::Event)
        .unwrap();
    driver.process(Some(Duration::ZERO)).unwrap(); // both asleep
    let index = key.id().index as usize;
    let child = driver.slots[index].as_ref().unwrap().device_feed.unwrap();
    // The feed awake with no poll to cancel: blocked on a full EVD.
    poster.post(port_active()).unwrap();
    hca.push(WorkCompletion::new(1)).unwrap();
    let start = Instant::now();
    while hca.stats().events_got == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "never woken");
        driver.process(Some(Duration::from_millis(10))).unwrap();
    }
    assert!(!driver.slots[index].as_ref().unwrap().poll_in_flight);
    let lingers = |driver: &Driver| {
        driver.slots[child.index as usize]
            .as_ref()
            .is_some_and(|s| s.generation == child.generation)
    };
    driver.faults.steps = 1;
    assert!(matches!(driver.remove(key), Err(DriverError::Io(_))));
    assert!(lingers(&driver), "the device feed waits for its poll's end");
    assert_eq!(driver.remove(key).unwrap().id(), CqId(9));
    assert!(
        !lingers(&driver),
        "the retry returned before the device feed went"
    );
    assert!(device.take_events().is_some());
}
