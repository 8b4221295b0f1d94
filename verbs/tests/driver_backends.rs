//! The driver behind both backends: io_uring, and the epoll fallback for
//! kernels and sandboxes that refuse io_uring. The same promises on each:
//! every event delivered exactly once and in order per CQ through
//! backpressure, removal while running, the caller's own loop waiting on
//! the driver's fd. `EVD_DRIVER_BACKEND=epoll` forces the fallback for every
//! driver built with `DriverBackend::Auto` (run the whole driver suite that
//! way to test it on epoll).

mod common;
use common::driver::{BACKENDS, WATCHDOG, nothing_after};
use common::load::produce_into;
use common::wc;
use evd_verbs::soft::{SoftChannel, SoftCq, SoftCqProducer, SoftDevice};
use evd_verbs::{
    AdaptiveConfig, AsyncElement, AsyncEvent, AsyncEventKind, AsyncFeed, ChannelFeed, CqId, Driver,
    DriverBackend, DriverConfig, DriverHandle, Feed, FeedKey, FeedMode, VerbsEvent,
};
use std::os::fd::AsFd;
use std::time::Duration;

fn config(backend: DriverBackend) -> DriverConfig {
    DriverConfig::default()
        .with_backend(backend)
        .with_budget(16)
}

#[test]
fn auto_takes_the_backend_the_environment_names_and_otherwise_one_that_works() {
    let driver = Driver::new(DriverConfig::default()).unwrap();
    match std::env::var("EVD_DRIVER_BACKEND").as_deref() {
        Ok("epoll") => assert_eq!(driver.backend(), DriverBackend::Epoll),
        Ok("io_uring") => assert_eq!(driver.backend(), DriverBackend::IoUring),
        _ => assert_ne!(driver.backend(), DriverBackend::Auto),
    }
}

#[test]
fn an_explicit_backend_is_the_one_used_whatever_the_environment_says() {
    for backend in BACKENDS {
        let driver = Driver::new(config(backend)).unwrap();
        assert_eq!(driver.backend(), backend);
    }
}

/// Refuse `io_uring_setup` with `EPERM` on this thread (and the threads it
/// spawns from now on), as Docker's default seccomp profile does. The
/// filter stays with the thread, which ends with the test.
fn refuse_io_uring_on_this_thread() {
    let ret_errno = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let mut filter = [
        // Load the system call's number (`seccomp_data.nr`, offset 0).
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        // io_uring_setup: fail it; anything else: allow.
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: ret_errno,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: plain prctl calls; the program points at `filter`, alive
    // across the call (the kernel copies it). No new privileges is what an
    // unprivileged seccomp filter requires.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
            ),
            0,
            "installing the seccomp filter failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn auto_falls_back_to_epoll_when_io_uring_is_refused_and_the_driver_serves() {
    // On a thread of its own: the filter must not reach the other tests.
    std::thread::spawn(|| {
        refuse_io_uring_on_this_thread();
        let refused = Driver::new(config(DriverBackend::IoUring)).unwrap_err();
        assert!(
            matches!(&refused, evd_verbs::DriverError::Io(e) if e.raw_os_error() == Some(libc::EPERM)),
            "an explicit io_uring is not replaced: {refused:?}"
        );
        if std::env::var("EVD_DRIVER_BACKEND").as_deref() == Ok("io_uring") {
            return; // Auto is told to use io_uring: nothing to fall back from.
        }
        let mut driver = Driver::new(DriverConfig::default()).unwrap();
        assert_eq!(driver.backend(), DriverBackend::Epoll);
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (cq, hca) = SoftCq::new(16).unwrap();
        driver
            .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
            .unwrap();
        let running = driver.spawn().unwrap();
        hca.push(wc(7)).unwrap();
        match consumer.dequeue_timeout(WATCHDOG).unwrap() {
            VerbsEvent::Completion { wc, .. } => assert_eq!(wc.wr_id, 7),
            other => panic!("{other:?}"),
        }
        running.shutdown().unwrap();
    })
    .join()
    .unwrap();
}

const PRODUCERS: u64 = 2;
const PER_PRODUCER: u64 = 5_000;

/// Take `n` completions of one CQ, checking each producer's are in order
/// (a duplicate among them breaks the order; one after them shows once the
/// driver is gone: [`nothing_after`]).
fn take_in_order(consumer: &mut evd::Consumer<VerbsEvent>, cq: CqId, n: u64) {
    let mut next = [0u64; PRODUCERS as usize];
    for i in 0..n {
        let ev = consumer
            .dequeue_timeout(WATCHDOG)
            .unwrap_or_else(|e| panic!("{cq:?}: event {i} of {n} never came: {e:?}"));
        let VerbsEvent::Completion { cq: got, wc } = ev else {
            panic!("{cq:?}: expected a completion, got {ev:?}")
        };
        assert_eq!(got, cq);
        let p = (wc.wr_id >> 32) as usize;
        assert_eq!(
            wc.wr_id & 0xffff_ffff,
            next[p],
            "{cq:?}: producer {p} out of order"
        );
        next[p] += 1;
    }
}

#[test]
fn every_backend_delivers_every_event_once_in_order_through_backpressure() {
    let per_cq = PRODUCERS * PER_PRODUCER;
    for backend in BACKENDS {
        let mut driver = Driver::new(config(backend)).unwrap();
        let (mut hcas, mut consumers, mut keys) = (Vec::new(), Vec::new(), Vec::new());
        for (id, mode) in [
            FeedMode::Event,
            FeedMode::Adaptive(AdaptiveConfig::default()),
            FeedMode::Event,
        ]
        .into_iter()
        .enumerate()
        {
            // An EVD far smaller than the load: the feeds wait for room.
            let (poster, consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
            let (cq, hca) = SoftCq::new(per_cq as usize + 1).unwrap();
            let key = driver
                .register(Feed::new(cq, CqId(id as u32), poster), mode)
                .unwrap();
            keys.push(key);
            hcas.push(hca);
            consumers.push(consumer);
        }
        let running = driver.spawn().unwrap();
        std::thread::scope(|s| {
            for (id, consumer) in consumers.iter_mut().enumerate() {
                s.spawn(move || {
                    // Not a slot freed before the feed is refused: each
                    // feed waits for room at least once.
                    let start = std::time::Instant::now();
                    while !consumer.query().room_wanted {
                        assert!(start.elapsed() < WATCHDOG, "{backend:?}: never full");
                        std::thread::yield_now();
                    }
                    take_in_order(consumer, CqId(id as u32), per_cq)
                });
            }
            produce_into(&hcas, PRODUCERS, PER_PRODUCER, 512);
        });
        let mut stopped = running
            .shutdown()
            .unwrap_or_else(|e| panic!("{backend:?}: {e}"));
        assert_eq!(stopped.len(), 3, "{backend:?}");
        for (key, consumer) in keys.into_iter().zip(&mut consumers) {
            let feed = stopped.take(key).expect("handed back");
            assert!(
                feed.stats().backpressure > 0,
                "{backend:?}: each feed waited for room: {:?}",
                feed.stats()
            );
            drop(feed);
            nothing_after(consumer, &format!("{backend:?}"));
        }
    }
}

#[test]
fn every_backend_removes_a_feed_while_running_and_serves_the_rest() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
        let running = Driver::new(config(backend)).unwrap().spawn().unwrap();
        let handle = running.handle().clone();
        let (cq0, hca0) = SoftCq::new(64).unwrap();
        let (cq1, hca1) = SoftCq::new(64).unwrap();
        let k0 = handle
            .register(Feed::new(cq0, CqId(0), poster.clone()), FeedMode::Event)
            .unwrap();
        let k1 = handle
            .register(Feed::new(cq1, CqId(1), poster), FeedMode::Event)
            .unwrap();
        hca0.push(wc(1)).unwrap();
        let ev = consumer.dequeue_timeout(WATCHDOG).unwrap();
        assert!(matches!(ev, VerbsEvent::Completion { cq: CqId(0), .. }));
        // Feed 0 sleeps on its fd once re-armed (the fd's poll is asked in
        // the turn that arms, and the removal is applied at a later turn's
        // start): its removal cancels that poll.
        let start = std::time::Instant::now();
        while !hca0.stats().armed {
            assert!(start.elapsed() < WATCHDOG, "{backend:?}: never re-armed");
            std::thread::yield_now();
        }
        let feed0: Feed<SoftCq> = handle.remove(k0).unwrap();
        assert_eq!(feed0.id(), CqId(0));
        hca0.push(wc(2)).unwrap();
        hca1.push(wc(3)).unwrap();
        match consumer.dequeue_timeout(WATCHDOG).unwrap() {
            VerbsEvent::Completion { cq, wc } => assert_eq!((cq, wc.wr_id), (CqId(1), 3)),
            other => panic!("{backend:?}: {other:?}"),
        }
        let mut stopped = running.shutdown().unwrap();
        assert!(stopped.take(k1).is_some(), "{backend:?}");
        // Both feeds gone: nothing came twice, and nothing from the removed
        // feed's CQ after its removal.
        drop((stopped, feed0));
        nothing_after(&mut consumer, &format!("{backend:?}"));
    }
}

/// Wait until `fd` is readable, failing (not hanging) if it never is.
fn wait_readable(fd: std::os::fd::BorrowedFd<'_>) {
    let mut fds = [libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: one valid pollfd, for the length given.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, WATCHDOG.as_millis() as i32) };
    assert_eq!(n, 1, "the driver's fd never became readable");
}

#[test]
fn every_backends_fd_wakes_the_callers_own_loop() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (cq, hca) = SoftCq::new(16).unwrap();
        let mut driver = Driver::new(config(backend)).unwrap();
        driver
            .register(Feed::new(cq, CqId(0), poster), FeedMode::Event)
            .unwrap();
        // Arms the CQ; a busy driver is called again without waiting.
        let mut busy = driver.process(Some(Duration::ZERO)).unwrap().busy;
        for id in 0..3 {
            hca.push(wc(id)).unwrap();
            let got = loop {
                if !busy {
                    wait_readable(driver.as_fd());
                }
                busy = driver.process(Some(Duration::ZERO)).unwrap().busy;
                if let Ok(ev) = consumer.try_dequeue() {
                    break ev;
                }
            };
            match got {
                VerbsEvent::Completion { wc, .. } => assert_eq!(wc.wr_id, id),
                other => panic!("{backend:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn readiness_collected_by_a_busy_turn_is_reported_busy_not_left_behind_the_fd() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (cq0, hca0) = SoftCq::new(16).unwrap();
        let (cq1, hca1) = SoftCq::new(16).unwrap();
        // Every busy turn collects the kernel's readiness reports.
        let mut driver =
            Driver::new(config(backend).with_busy_enter_interval(Duration::ZERO)).unwrap();
        driver
            .register(Feed::new(cq0, CqId(0), poster.clone()), FeedMode::Event)
            .unwrap();
        driver
            .register(Feed::new(cq1, CqId(1), poster), FeedMode::Event)
            .unwrap();
        let mut busy = driver.process(Some(Duration::ZERO)).unwrap().busy; // arms both
        let mut got = Vec::new();
        let mut take = |busy: &mut bool, driver: &mut Driver, n: usize| {
            while got.len() < n {
                if !*busy {
                    wait_readable(driver.as_fd());
                }
                *busy = driver.process(Some(Duration::ZERO)).unwrap().busy;
                while let Ok(VerbsEvent::Completion { cq, wc }) = consumer.try_dequeue() {
                    got.push((cq.0, wc.wr_id));
                }
            }
        };
        // Feed 0's wake delivers, then leaves it to re-arm next turn.
        hca0.push(wc(1)).unwrap();
        take(&mut busy, &mut driver, 1);
        // That turn drains feed 0 and sends it to sleep (nothing busy), and
        // its busy wait collects feed 1's readiness: the call must say
        // busy, as the driver's fd no longer shows it.
        hca0.push(wc(2)).unwrap();
        hca1.push(wc(3)).unwrap();
        take(&mut busy, &mut driver, 3);
        got.sort_unstable();
        assert_eq!(got, [(0, 1), (0, 2), (1, 3)], "{backend:?}");
    }
}

/// A removal runs the driver's turns (its cancellation's): what they leave
/// behind (another feed's readiness they collected, or that feed woken and
/// left to re-arm) shows on the driver's fd, so a loop that waits on it
/// after the removal is woken for it. With every busy turn collecting.
#[test]
fn the_work_a_removal_leaves_behind_shows_on_the_drivers_fd() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (cq_a, _hca_a) = SoftCq::new(16).unwrap();
        let (cq_b, hca_b) = SoftCq::new(16).unwrap();
        let cfg = config(backend).with_busy_enter_interval(Duration::ZERO);
        let mut driver = Driver::new(cfg).unwrap();
        let a = driver
            .register(Feed::new(cq_a, CqId(0), poster.clone()), FeedMode::Event)
            .unwrap();
        driver
            .register(Feed::new(cq_b, CqId(1), poster), FeedMode::Event)
            .unwrap();
        while driver.process(Some(Duration::ZERO)).unwrap().busy {}
        hca_b.push(wc(5)).unwrap();
        drop(driver.remove(a).unwrap());
        // The caller's loop: the EVD first, then the fd, then `process`
        // until it says idle.
        let got = loop {
            if let Ok(ev) = consumer.try_dequeue() {
                break ev;
            }
            wait_readable(driver.as_fd());
            while driver.process(Some(Duration::ZERO)).unwrap().busy {}
        };
        assert!(
            matches!(got, VerbsEvent::Completion { cq: CqId(1), wc } if wc.wr_id == 5),
            "{backend:?}: {got:?}"
        );
    }
}

/// A feed registered by a loop that waits on the driver's fd before its
/// first `process` is armed all the same: the registration shows on the fd.
#[test]
fn a_feed_registered_before_the_first_process_shows_on_the_drivers_fd() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
        let (cq, hca) = SoftCq::new(16).unwrap();
        let mut driver = Driver::new(config(backend)).unwrap();
        driver
            .register(Feed::new(cq, CqId(2), poster), FeedMode::Event)
            .unwrap();
        wait_readable(driver.as_fd());
        while driver.process(Some(Duration::ZERO)).unwrap().busy {}
        assert!(
            hca.stats().armed,
            "{backend:?}: the first turn armed the CQ"
        );
        hca.push(wc(6)).unwrap();
        let got = loop {
            wait_readable(driver.as_fd());
            while driver.process(Some(Duration::ZERO)).unwrap().busy {}
            if let Ok(ev) = consumer.try_dequeue() {
                break ev;
            }
        };
        assert!(
            matches!(got, VerbsEvent::Completion { cq: CqId(2), wc } if wc.wr_id == 6),
            "{backend:?}: {got:?}"
        );
    }
}

/// Block this thread in `epoll_wait` on an epoll fd of its own, while
/// another thread, once it sees this one blocked there, runs `rounds` rounds
/// of `work` (each a wake of a spawned driver's thread, answered), then
/// makes that epoll fd ready: the wait must end so, not interrupted
/// (`EINTR`). No duration decides anything: the rounds happen while this
/// thread is blocked, however slowly. The end of a poll the driver
/// cancelled is work the kernel gives this thread at its next kernel entry
/// (the epoll fd's creation here at the latest): the caller makes sure
/// every such cancel is submitted first.
fn assert_not_interrupted_while(rounds: usize, work: impl Fn() + Sync) {
    use rustix::event::{EventfdFlags, epoll};
    use std::sync::atomic::{AtomicBool, Ordering};
    let quiet = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
    let done_fd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC).unwrap();
    epoll::add(
        &quiet,
        &done_fd,
        epoll::EventData::new_u64(1),
        epoll::EventFlags::IN,
    )
    .unwrap();
    let me = rustix::thread::gettid();
    let ended = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            until_in_system_call(me, &EPOLL_WAITS, &ended);
            for _ in 0..rounds {
                if ended.load(Ordering::Relaxed) {
                    return;
                }
                work();
            }
            rustix::io::write(&done_fd, &1u64.to_ne_bytes()).unwrap();
        });
        let mut events = Vec::with_capacity(1);
        let waited = epoll::wait(&quiet, rustix::buffer::spare_capacity(&mut events), None);
        ended.store(true, Ordering::Relaxed);
        assert!(
            waited.is_ok(),
            "the creating thread's wait was interrupted: {waited:?}"
        );
    });
}

/// The system call numbers of epoll_wait, epoll_pwait, epoll_pwait2.
#[cfg(target_arch = "x86_64")]
const EPOLL_WAITS: [&str; 3] = ["232", "281", "441"];
#[cfg(target_arch = "aarch64")]
const EPOLL_WAITS: [&str; 3] = ["22", "22", "441"];
/// Elsewhere: [`until_in_system_call`] waits for any interruptible sleep.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const EPOLL_WAITS: [&str; 0] = [];

/// The driver's blocking waits: io_uring_enter, or an epoll wait.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const DRIVER_WAITS: [&str; 4] = ["426", EPOLL_WAITS[0], EPOLL_WAITS[1], EPOLL_WAITS[2]];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const DRIVER_WAITS: [&str; 0] = [];

/// Wait (yielding, under the watchdog) until thread `tid` of this process is
/// in one of the system calls `nrs` (`/proc`'s view of it; with no numbers,
/// in any interruptible sleep), or `ended`.
fn until_in_system_call(
    tid: rustix::thread::Pid,
    nrs: &[&str],
    ended: &std::sync::atomic::AtomicBool,
) {
    let path = format!("/proc/self/task/{}/syscall", tid.as_raw_nonzero());
    let stat = format!("/proc/self/task/{}/stat", tid.as_raw_nonzero());
    let start = std::time::Instant::now();
    loop {
        let now = std::fs::read_to_string(&path).unwrap();
        let nr = now.split_whitespace().next().unwrap_or("");
        let blocked = match nrs.is_empty() {
            true => std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") S ")),
            false => nrs.contains(&nr),
        };
        if blocked || ended.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        assert!(start.elapsed() < WATCHDOG, "never in {nrs:?}: {now}");
        std::thread::yield_now();
    }
}

/// Two commands answered by a spawned driver: the driver's thread answers
/// the first in its first step's turn and only then submits that step's
/// cancellations of the creator's polls; the second is answered in a later
/// turn, after that submission.
fn two_commands_answered(handle: &DriverHandle) -> [FeedKey<Feed<SoftCq, VerbsEvent>>; 2] {
    let feed = || {
        let (cq, _hca) = SoftCq::new(4).unwrap();
        Feed::new(cq, CqId(0), evd::bounded::<VerbsEvent>(4).unwrap().0)
    };
    [(); 2].map(|()| handle.register(feed(), FeedMode::Event).unwrap())
}

/// A spawned driver owns its wake poll on its own thread: the thread that
/// created it (here the test's) is not interrupted by the driver's wakes.
/// io_uring runs a poll's completion work on the thread that submitted it,
/// interrupting that thread for it (here: an `epoll_wait` of its own
/// returning `EINTR`), so a driver that kept the creator's poll would
/// route every wake through it. epoll has no such tie.
#[test]
fn a_spawned_drivers_wakes_do_not_interrupt_the_thread_that_created_it() {
    let driver = Driver::new(config(DriverBackend::IoUring)).unwrap();
    let running = driver.spawn().unwrap();
    let handle = running.handle().clone();
    let keys = two_commands_answered(&handle);
    // Commands, each a wake of the driver, answered.
    assert_not_interrupted_while(20, || register_a_feed(&handle));
    let mut stopped = running.shutdown().unwrap();
    assert!(keys.iter().all(|&k| stopped.take(k).is_some()));
}

/// A command, a wake of the driver: a feed registered (and answered).
fn register_a_feed(handle: &DriverHandle) {
    let feed = Feed::new(
        SoftCq::new(4).unwrap().0,
        CqId(1),
        evd::bounded::<VerbsEvent>(4).unwrap().0,
    );
    handle.register(feed, FeedMode::Event).unwrap();
}

/// The key of a CQ's feed on the soft provider.
type CqFeedKey = FeedKey<Feed<SoftCq, VerbsEvent>>;
/// A consumer another thread's rounds dequeue from.
type SharedConsumer = std::sync::Mutex<evd::Consumer<VerbsEvent>>;

/// An io_uring driver with one feed, processed on this thread until its
/// first turn armed the CQ: its channel's poll and its wake poll are this
/// thread's. The driver, the feed's key, its CQ's producer and its EVD's
/// consumer (behind a lock, for [`deliver_one`] from another thread).
fn driver_with_an_armed_feed() -> (Driver, CqFeedKey, SoftCqProducer, SharedConsumer) {
    let mut driver = Driver::new(config(DriverBackend::IoUring)).unwrap();
    let (poster, consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let (cq, hca) = SoftCq::new(64).unwrap();
    let key = driver
        .register(Feed::new(cq, CqId(3), poster), FeedMode::Event)
        .unwrap();
    while driver.process(Some(Duration::ZERO)).unwrap().busy {}
    assert!(hca.stats().armed, "the first turn armed the CQ");
    (driver, key, hca, std::sync::Mutex::new(consumer))
}

/// One completion (number `next`, counted up), a wake of the feed's
/// channel (its CQ re-armed by the driver), delivered before this returns.
fn deliver_one(
    hca: &SoftCqProducer,
    consumer: &SharedConsumer,
    next: &std::sync::atomic::AtomicU64,
) {
    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    hca.push(wc(i)).unwrap();
    let start = std::time::Instant::now();
    while consumer.lock().unwrap().try_dequeue().is_err() {
        assert!(start.elapsed() < WATCHDOG, "completion {i} never delivered");
        std::thread::yield_now();
    }
}

/// The same for the polls of the feeds' fds asked before the spawn (a
/// caller's `process` that armed a CQ and asked for its channel's
/// readiness): the spawned driver cancels them and asks again from its own
/// thread, so the completions of such a feed do not interrupt the thread
/// that created the driver either.
#[test]
fn a_feeds_poll_asked_before_the_spawn_does_not_interrupt_the_thread_that_created_it() {
    let (driver, key, hca, consumer) = driver_with_an_armed_feed();
    let running = driver.spawn().unwrap();
    let keys = two_commands_answered(running.handle());
    let next = std::sync::atomic::AtomicU64::new(0);
    assert_not_interrupted_while(20, || deliver_one(&hca, &consumer, &next));
    let mut stopped = running.shutdown().unwrap();
    assert!(stopped.take(key).is_some());
    assert!(keys.iter().all(|&k| stopped.take(k).is_some()));
}

/// The same for a driver the caller's own loop moves to another thread
/// (`Driver` is `Send`: an async runtime may step it from any worker): its
/// first step there ends the polls the creating thread asked for (the wake
/// fd's, a feed's channel) and asks again, so neither the driver's wakes
/// nor the feed's completions interrupt the thread that created it.
#[test]
fn a_driver_stepped_from_another_thread_does_not_interrupt_the_thread_that_created_it() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let (driver, key, hca, consumer) = driver_with_an_armed_feed();
    let handle = driver.handle();
    let stop = AtomicBool::new(false);
    let next = AtomicU64::new(0);
    std::thread::scope(|s| {
        let (stepped, first_step) = std::sync::mpsc::channel();
        let stop = &stop;
        let stepper = s.spawn(move || {
            let mut driver = driver;
            while !stop.load(Relaxed) {
                driver.process(Some(Duration::from_millis(10))).unwrap();
                let _ = stepped.send(());
            }
            driver
        });
        // Stops the stepper however this thread leaves the scope (a failed
        // assertion below would otherwise wait for it for ever).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Relaxed);
            }
        }
        let _stop = StopOnDrop(stop);
        // Its first steps there have asked for the cancellations; the
        // answers to the commands come from later ones.
        first_step.recv().unwrap();
        let keys = two_commands_answered(&handle);
        // Completions, each a wake of the feed's channel; commands, each a
        // wake of the driver.
        assert_not_interrupted_while(20, || deliver_one(&hca, &consumer, &next));
        assert_not_interrupted_while(5, || register_a_feed(&handle));
        stop.store(true, Relaxed);
        let mut driver = stepper.join().unwrap();
        assert!(driver.remove(key).is_ok());
        for k in keys {
            assert!(driver.remove(k).is_ok());
        }
    });
}

/// A channel feed blocked on a full EVD by a busy CQ still takes the events
/// of its quiet CQs: a quiet CQ's completion that arrives meanwhile is
/// served in the busy CQ's turn order (the freed slots shared among the
/// CQs with events), not after the busy CQ's whole backlog (which a quiet
/// CQ, kept waiting that long, would overrun). The caller runs the driver
/// step by step, so every backend sees the same sequence.
#[test]
fn every_backend_serves_a_quiet_cqs_event_that_arrives_while_a_busy_cq_blocks_the_channel_feed() {
    const EVD: usize = 4;
    const BUSY: u64 = 600;
    /// The quiet completion arrives behind the EVD's 4 and is served by
    /// the second refill at the latest (the busy CQ takes one freed slot,
    /// then the quiet CQ the next); 20 leaves room for any turn order.
    const WITHIN: usize = 20;
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(EVD).unwrap();
        let channel = SoftChannel::new().unwrap();
        let mut feed = ChannelFeed::new(channel.clone(), poster);
        let (busy, busy_hca) = channel.create_cq(1024).unwrap();
        let (quiet, quiet_hca) = channel.create_cq(64).unwrap();
        feed.add(busy, CqId(0)).unwrap();
        feed.add(quiet, CqId(1)).unwrap();
        let mut driver = Driver::new(config(backend)).unwrap();
        let key = driver.register_channel(feed, FeedMode::Event).unwrap();
        let turns = |driver: &mut Driver| {
            for _ in 0..4 {
                driver.process(Some(Duration::ZERO)).unwrap();
            }
        };
        turns(&mut driver); // armed, asleep on the channel's fd
        for i in 0..BUSY {
            busy_hca.push(wc(i)).unwrap();
        }
        turns(&mut driver);
        assert_eq!(consumer.len(), EVD, "{backend:?}: the EVD is full");
        quiet_hca.push(wc(1 << 32)).unwrap();
        turns(&mut driver);
        let mut dequeued = 0;
        loop {
            let ev = consumer.try_dequeue().unwrap();
            dequeued += 1;
            let VerbsEvent::Completion { cq, wc } = ev else {
                panic!("{backend:?}: {ev:?}")
            };
            if cq == CqId(1) {
                assert_eq!(wc.wr_id, 1 << 32);
                break;
            }
            assert!(
                dequeued <= WITHIN,
                "{backend:?}: the quiet CQ's completion not served within {WITHIN} dequeues"
            );
            turns(&mut driver);
        }
        let feed = driver.remove(key).unwrap();
        drop(feed);
        assert_eq!(quiet_hca.stats().unacked_at_destroy, Some(0), "{backend:?}");
    }
}

/// A stream feed (here a device's async events) blocked on a full EVD
/// leaves its events in the source, whose fd stays readable: the driver
/// must not poll that fd until room comes, or a level-triggered backend
/// reports it again at every step and the driver never sleeps. Room
/// delivers the event.
#[test]
fn every_backend_leaves_a_stream_feed_blocked_on_a_full_evd_unpolled_until_room_comes() {
    for backend in BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
        let filler = VerbsEvent::Completion {
            cq: CqId(9),
            wc: wc(0),
        };
        let (events, device) = SoftDevice::new().unwrap();
        let mut driver = Driver::new(config(backend)).unwrap();
        driver
            .register_async(AsyncFeed::new(events, poster.clone()))
            .unwrap();
        for _ in 0..4 {
            driver.process(Some(Duration::ZERO)).unwrap();
        }
        poster.post(filler).unwrap(); // the feed is asleep: now full
        device.raise(AsyncEvent::new(
            AsyncEventKind::PortActive,
            AsyncElement::Port(1),
        ));
        for _ in 0..20 {
            driver.process(Some(Duration::ZERO)).unwrap();
        }
        assert_eq!(
            driver.stats().fd_wakes,
            1,
            "{backend:?}: the blocked feed's fd was reported again: {:?}",
            driver.stats()
        );
        assert!(matches!(
            consumer.try_dequeue(),
            Ok(VerbsEvent::Completion { .. })
        ));
        for _ in 0..4 {
            driver.process(Some(Duration::ZERO)).unwrap();
        }
        assert!(
            matches!(consumer.try_dequeue(), Ok(VerbsEvent::Async(a)) if a.kind == AsyncEventKind::PortActive),
            "{backend:?}"
        );
    }
}

/// A timeout too long for the kernel's clock (here `Duration::MAX`) waits
/// on every backend, until a handle's command (from another thread) comes.
/// On io_uring it overflowed the kernel's deadline into one already past:
/// every such `process` returned at once as a timeout, and a caller's loop
/// spun. The command comes once the wait is in the kernel, so every round
/// tests it. A wait may end early as a timeout for a signal (a legal
/// outcome), not every one of them.
#[test]
fn every_backend_waits_out_a_timeout_too_long_for_the_kernel() {
    use std::sync::{Arc, atomic::AtomicBool, atomic::Ordering::Relaxed};
    const ROUNDS: u64 = 3;
    let me = rustix::thread::gettid();
    for backend in BACKENDS {
        let mut driver = Driver::new(config(backend)).unwrap();
        for _ in 0..ROUNDS {
            let handle = driver.handle();
            let returned = Arc::new(AtomicBool::new(false));
            let r = returned.clone();
            let registering = std::thread::spawn(move || {
                // Once this thread's `process` waits in the kernel (or has
                // returned: with the bug, at once, as a timeout).
                until_in_system_call(me, &DRIVER_WAITS, &r);
                let (poster, consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
                let feed = Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster);
                let r = handle.register(feed, FeedMode::Event).map(drop);
                drop(consumer);
                r
            });
            // Returns once the command is in; the zero-timeout calls count
            // no timeout.
            driver.process(Some(Duration::MAX)).unwrap();
            returned.store(true, Relaxed);
            while !registering.is_finished() {
                driver.process(Some(Duration::ZERO)).unwrap();
            }
            registering.join().unwrap().unwrap();
        }
        let timeouts = driver.stats().timeouts;
        assert!(
            timeouts < ROUNDS,
            "{backend:?}: every wait ended at once, as a timeout ({timeouts})"
        );
    }
}

/// Any `ring_entries` makes a driver on every backend: taken into what
/// the kernel allows (zero and values past its limit were refused as
/// invalid on io_uring, and a value past 2^31 overflowed its doubling).
#[test]
fn every_backend_takes_any_ring_entries_into_what_the_kernel_allows() {
    for backend in BACKENDS {
        for entries in [0, 1, 32_768, 32_769, 1 << 31, u32::MAX] {
            let driver = Driver::new(config(backend).with_ring_entries(entries));
            assert!(driver.is_ok(), "{backend:?}, {entries}: {driver:?}");
        }
    }
}
