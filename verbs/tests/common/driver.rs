//! A driver serving a feed, and waiting for what it delivers.

use evd::TryDequeueError;
use evd_verbs::{
    CompletionQueue, Driver, DriverBackend, DriverConfig, DriverError, DriverHandle, Feed, FeedKey,
    FeedMode, VerbsEvent,
};
use std::time::Duration;

/// A watchdog, not a sleep: an event that never comes fails the test
/// instead of hanging it (generous, for a busy machine).
pub const WATCHDOG: Duration = Duration::from_secs(60);

/// Once every feed that posted into it is gone, the EVD holds nothing more
/// than what was taken: no event came twice (`what` names the case).
pub fn nothing_after<T: std::fmt::Debug>(consumer: &mut evd::Consumer<T>, what: &str) {
    match consumer.try_dequeue() {
        Err(TryDequeueError::Closed) => {}
        other => panic!("{what}: after every event, {other:?}"),
    }
}

/// Both backends, for the promises that hold on each.
pub const BACKENDS: [DriverBackend; 2] = [DriverBackend::IoUring, DriverBackend::Epoll];

/// A driver, not yet running, serving `feed` in `mode`; and the feed's key.
pub fn driver_serving<C, T>(feed: Feed<C, T>, mode: FeedMode) -> (Driver, FeedKey<Feed<C, T>>)
where
    C: CompletionQueue + 'static,
    T: From<VerbsEvent> + Send + 'static,
{
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver.register(feed, mode).unwrap();
    (driver, key)
}

/// Wait for `n` events, failing (not hanging) if they never come; overflow
/// reports are skipped.
pub fn take<T>(consumer: &mut evd::Consumer<T>, n: usize) -> Vec<T> {
    take_counting_overflow(consumer, n, &mut 0)
}

/// Wait for `n` events, failing (not hanging) if none comes for a minute;
/// counts overflow reports in `overflow_reports`.
pub fn take_counting_overflow<T>(
    consumer: &mut evd::Consumer<T>,
    n: usize,
    overflow_reports: &mut usize,
) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    // Timed-out waits since the last event: a stall, not a slow run.
    let mut idle_waits = 0;
    while out.len() < n {
        match consumer.try_dequeue() {
            Ok(ev) => {
                out.push(ev);
                idle_waits = 0;
            }
            Err(TryDequeueError::Overflow(_)) => *overflow_reports += 1,
            Err(TryDequeueError::Empty) => {
                if consumer.wait(1, Some(Duration::from_millis(100))).is_err() {
                    idle_waits += 1;
                    assert!(
                        idle_waits < 600,
                        "watchdog: got {} of {n} events, none for a minute",
                        out.len()
                    );
                }
            }
            Err(TryDequeueError::Closed) => panic!("closed after {} events", out.len()),
        }
    }
    out
}

/// `handle.remove(key)` under a watchdog: a removal that never completes
/// fails the test instead of hanging it (the limit is generous, for a busy
/// machine; a removal takes one ring round trip).
pub fn remove_within<F: Send + 'static>(
    handle: &DriverHandle,
    key: FeedKey<F>,
) -> Result<F, DriverError> {
    let handle = handle.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(handle.remove(key));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the removal did not complete within 60 s")
}

/// A running driver serving nothing yet.
pub fn running_driver() -> evd_verbs::RunningDriver {
    Driver::new(DriverConfig::default())
        .unwrap()
        .spawn()
        .unwrap()
}

/// Process `driver` until `consumer` has had `n` events, under the
/// watchdog. An error of `process` fails the test unless `provoked` says
/// the test causes it (a feed's failure).
pub fn take_processing<T: std::fmt::Debug>(
    driver: &mut Driver,
    consumer: &mut evd::Consumer<T>,
    n: usize,
    provoked: fn(&DriverError) -> bool,
) -> Vec<T> {
    let (mut got, start) = (Vec::new(), std::time::Instant::now());
    while got.len() < n {
        assert!(start.elapsed() < WATCHDOG, "{got:?}");
        match driver.process(Some(Duration::from_millis(100))) {
            Err(e) if !provoked(&e) => panic!("{e}"),
            _ => {}
        }
        got.extend(std::iter::from_fn(|| consumer.try_dequeue().ok()));
    }
    got
}

/// No error of `process` is provoked ([`take_processing`]).
pub fn none(_: &DriverError) -> bool {
    false
}

/// A waker that sends `()` on the channel whose end it returns, once per
/// wake: a test sees whether, and how often, a waiter was woken.
pub fn telling_waker() -> (std::task::Waker, std::sync::mpsc::Receiver<()>) {
    use std::sync::{Arc, Mutex, mpsc};
    struct Tell(Mutex<mpsc::Sender<()>>);
    impl std::task::Wake for Tell {
        fn wake(self: Arc<Self>) {
            let _ = self.0.lock().unwrap().send(());
        }
    }
    let (tx, rx) = mpsc::channel();
    (std::task::Waker::from(Arc::new(Tell(Mutex::new(tx)))), rx)
}

/// An application's event to fill an EVD with (a port came up).
pub fn port_active() -> VerbsEvent {
    use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind};
    VerbsEvent::Async(AsyncEvent::new(
        AsyncEventKind::PortActive,
        AsyncElement::Port(1),
    ))
}

/// Whether the driver's fd becomes readable (before the watchdog).
pub fn readable_within_watchdog(driver: &Driver) -> bool {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: driver.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the call's duration.
    unsafe { libc::poll(&mut fd, 1, WATCHDOG.as_millis() as i32) > 0 }
}
