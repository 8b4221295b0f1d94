//! One-way wake latency: the time from just before a post to the moment the
//! consumer thread runs with the event in hand, when that consumer was really
//! asleep.
//!
//! A fixed gap between posts would fake low latency for systems that spin or
//! yield before they park, so before every post the harness waits until the
//! consumer thread's state in `/proc/self/task/TID/stat` is `S` (sleeping in
//! the kernel: a futex, `epoll_wait`, a blocking `read`). The event carries its
//! post time (nanoseconds since a process-wide origin, from the same monotonic
//! clock on both threads); the consumer subtracts it from its own clock read
//! right after it receives the event and records the difference in an
//! hdrhistogram.
//!
//! The inline upcall is the exception: it has no sleeping consumer; the time
//! is from before the post to the start of the handler, on the posting thread.

use crate::peers::Channel;
use crate::report::{Role, System};
use hdrhistogram::Histogram;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long the harness waits for a consumer to fall asleep.
const SLEEP_TIMEOUT: Duration = Duration::from_secs(5);

/// A system under test in the wake-latency benches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WakeSystem {
    /// evd `try_dequeue`, then `wait(1, None)` (arm, park; unparked by the post).
    EvdWait,
    /// evd `recv().await` on a tokio current-thread runtime.
    EvdAsync,
    /// evd's eventfd in an epoll loop: drain, arm, `epoll_wait`, acknowledge.
    EvdEventfd,
    /// evd upcall (SingleInstance) run inline on the posting thread.
    EvdUpcall,
    /// crossbeam-channel `recv`.
    CrossbeamChannel,
    /// tokio mpsc `recv().await` on a current-thread runtime.
    TokioMpsc,
    /// flume `recv`.
    Flume,
    /// Floor: an atomic slot plus `thread::park` / `Thread::unpark`.
    ParkFloor,
    /// Floor: a blocking `read` of an eventfd that the poster writes.
    EventfdFloor,
}

/// Each row is compared with the evd row that sleeps the same way (a thread
/// park, a tokio current-thread runtime, an eventfd, no sleep at all); each
/// evd row is its own baseline. Futex-based sleeps (thread park, crossbeam's
/// and flume's blocking receive, a tokio current-thread runtime's park) have
/// the park/unpark floor, the epoll loop the eventfd floor; the inline upcall
/// wakes no thread and the floors are not measured against themselves.
impl System for WakeSystem {
    fn name(self) -> &'static str {
        self.row().0
    }

    fn role(self) -> Role {
        if matches!(self, WakeSystem::ParkFloor | WakeSystem::EventfdFloor) {
            Role::Floor
        } else if self.row().2 == self {
            Role::Evd
        } else {
            Role::Peer
        }
    }

    fn baseline(self) -> Option<WakeSystem> {
        Some(self.row().2)
    }

    fn floor(self) -> Option<WakeSystem> {
        self.row().3
    }
}

impl WakeSystem {
    /// Every system, evd first, floors last.
    pub const ALL: [WakeSystem; 9] = [
        WakeSystem::EvdWait,
        WakeSystem::EvdAsync,
        WakeSystem::EvdEventfd,
        WakeSystem::EvdUpcall,
        WakeSystem::CrossbeamChannel,
        WakeSystem::TokioMpsc,
        WakeSystem::Flume,
        WakeSystem::ParkFloor,
        WakeSystem::EventfdFloor,
    ];

    /// Its row: name, consumer, baseline and floor.
    fn row(self) -> (&'static str, &'static str, WakeSystem, Option<WakeSystem>) {
        use WakeSystem::*;
        match self {
            EvdWait => (
                "evd wait (park/unpark)",
                "blocking",
                EvdWait,
                Some(ParkFloor),
            ),
            EvdAsync => (
                "evd recv().await (tokio current-thread)",
                "async",
                EvdAsync,
                Some(ParkFloor),
            ),
            EvdEventfd => (
                "evd eventfd + epoll",
                "epoll",
                EvdEventfd,
                Some(EventfdFloor),
            ),
            EvdUpcall => ("evd inline upcall", "inline", EvdUpcall, None),
            CrossbeamChannel => (
                "crossbeam-channel recv",
                "blocking",
                EvdWait,
                Some(ParkFloor),
            ),
            TokioMpsc => (
                "tokio mpsc recv().await",
                "async",
                EvdAsync,
                Some(ParkFloor),
            ),
            Flume => ("flume recv", "blocking", EvdWait, Some(ParkFloor)),
            ParkFloor => ("floor: raw park/unpark", "blocking", EvdWait, None),
            EventfdFloor => ("floor: raw eventfd read", "blocking", EvdEventfd, None),
        }
    }

    /// How the consumer waits: `blocking`, `async`, `epoll` or `inline`.
    pub fn consumer(self) -> &'static str {
        self.row().1
    }

    /// Threads the measurement runs: 1 for the inline upcall, else 2.
    pub fn threads(self) -> usize {
        if self == WakeSystem::EvdUpcall {
            1
        } else {
            2
        }
    }

    /// Measure `samples` one-way wakes; the histogram is in nanoseconds.
    pub fn measure(self, samples: u64) -> Result<Histogram<u64>, String> {
        match self {
            WakeSystem::EvdUpcall => measure_upcall(samples),
            WakeSystem::EvdWait => {
                let (tx, mut rx) = evd::bounded::<u64>(1024).map_err(|e| e.to_string())?;
                sleeping_consumer(
                    samples,
                    move |record| {
                        let mut got = 0;
                        while got < samples {
                            match rx.try_dequeue() {
                                Ok(t) => {
                                    record(t);
                                    got += 1;
                                }
                                Err(evd::TryDequeueError::Empty) => {
                                    rx.wait(1, None).map_err(|e| e.to_string())?;
                                }
                                Err(e) => return Err(e.to_string()),
                            }
                        }
                        Ok(())
                    },
                    move |t| tx.post(t).map_err(|e| e.to_string()),
                )
            }
            WakeSystem::EvdAsync => {
                let (tx, mut rx) = evd::bounded::<u64>(1024).map_err(|e| e.to_string())?;
                sleeping_consumer(
                    samples,
                    move |record| {
                        current_thread_runtime()?.block_on(async {
                            for _ in 0..samples {
                                record(rx.recv().await.map_err(|e| e.to_string())?);
                            }
                            Ok(())
                        })
                    },
                    move |t| tx.post(t).map_err(|e| e.to_string()),
                )
            }
            WakeSystem::EvdEventfd => {
                let (tx, rx) = evd::bounded::<u64>(1024).map_err(|e| e.to_string())?;
                sleeping_consumer(
                    samples,
                    move |record| eventfd_loop(rx, samples, record),
                    move |t| tx.post(t).map_err(|e| e.to_string()),
                )
            }
            WakeSystem::CrossbeamChannel => {
                blocking_peer::<crossbeam_channel::Receiver<u64>>(samples)
            }
            WakeSystem::TokioMpsc => {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1024);
                sleeping_consumer(
                    samples,
                    move |record| {
                        current_thread_runtime()?.block_on(async {
                            for _ in 0..samples {
                                record(rx.recv().await.ok_or("tokio channel closed")?);
                            }
                            Ok(())
                        })
                    },
                    move |t| tx.try_send(t).map_err(|e| e.to_string()),
                )
            }
            WakeSystem::Flume => blocking_peer::<flume::Receiver<u64>>(samples),
            WakeSystem::ParkFloor => measure_park_floor(samples),
            WakeSystem::EventfdFloor => {
                use rustix::event::{eventfd, EventfdFlags};
                let fd = Arc::new(eventfd(0, EventfdFlags::CLOEXEC).map_err(|e| e.to_string())?);
                let rfd = fd.clone();
                sleeping_consumer(
                    samples,
                    move |record| {
                        for _ in 0..samples {
                            let mut buf = [0u8; 8];
                            rustix::io::read(&*rfd, &mut buf).map_err(|e| e.to_string())?;
                            record(u64::from_ne_bytes(buf));
                        }
                        Ok(())
                    },
                    move |t| {
                        // The counter was 0 (the consumer read it), so the
                        // reader gets exactly `t`.
                        rustix::io::write(&*fd, &t.to_ne_bytes())
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    },
                )
            }
        }
    }
}

/// A peer's blocking `recv` woken by its blocking `send`.
fn blocking_peer<C: Channel<u64> + 'static>(samples: u64) -> Result<Histogram<u64>, String> {
    let (tx, mut rx) = C::bounded(1024);
    sleeping_consumer(
        samples,
        move |record| {
            for _ in 0..samples {
                record(rx.recv().ok_or("channel closed")?);
            }
            Ok(())
        },
        move |t| C::send(&tx, t).map_err(|_| "channel closed".to_string()),
    )
}

/// Nanoseconds since a process-wide origin, never 0 (an eventfd write of 0
/// would not wake its reader).
#[inline]
pub fn now_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    origin.elapsed().as_nanos() as u64 + 1
}

/// A histogram for wake latencies: 1 ns to 100 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

fn current_thread_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())
}

/// A thread's scheduler state, read from `/proc/self/task/TID/stat`.
pub struct ThreadState {
    file: File,
    buf: Vec<u8>,
}

impl ThreadState {
    /// Open the stat file of thread `tid` of this process.
    pub fn open(tid: i32) -> std::io::Result<Self> {
        Ok(ThreadState {
            file: File::open(format!("/proc/self/task/{tid}/stat"))?,
            buf: vec![0; 1024],
        })
    }

    /// The state letter (`R` running, `S` sleeping, `D` disk sleep, ...).
    pub fn state(&mut self) -> std::io::Result<u8> {
        let n = self.file.read_at(&mut self.buf, 0)?;
        parse_stat_state(&self.buf[..n]).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "unparsable stat line")
        })
    }
}

/// The state field of a `/proc/.../stat` line: the first letter after the
/// last `)` (the command name in parentheses may itself contain `)`).
pub fn parse_stat_state(line: &[u8]) -> Option<u8> {
    let close = line.iter().rposition(|&b| b == b')')?;
    line[close + 1..]
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
}

/// Run `consume` on a new thread, which passes each post time to `record`;
/// the harness posts `samples` times, each once the consumer has recorded
/// the previous event and is asleep.
fn sleeping_consumer<C, P>(samples: u64, consume: C, post: P) -> Result<Histogram<u64>, String>
where
    C: FnOnce(&mut dyn FnMut(u64)) -> Result<(), String> + Send + 'static,
    P: Fn(u64) -> Result<(), String>,
{
    sleeping_consumer_timed(
        samples,
        move |record: &mut dyn FnMut(u64, u64)| consume(&mut |t| record(t, now_ns())),
        post,
    )
}

/// [`sleeping_consumer`] whose consumer takes `woken` itself (a
/// [`crate::cno`] waiter: when its wait returns the key) and records
/// `record(posted, woken)`.
pub(crate) fn sleeping_consumer_timed<C, P>(
    samples: u64,
    consume: C,
    post: P,
) -> Result<Histogram<u64>, String>
where
    C: FnOnce(&mut dyn FnMut(u64, u64)) -> Result<(), String> + Send + 'static,
    P: Fn(u64) -> Result<(), String>,
{
    let received = Arc::new(AtomicU64::new(0));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let consumer = {
        let received = received.clone();
        std::thread::Builder::new()
            .name("wake-consumer".into())
            .spawn(move || {
                let _ = tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get());
                let mut hist = new_histogram();
                let mut record = |t: u64, woken: u64| {
                    hist.saturating_record(woken.saturating_sub(t).max(1));
                    // Release: the harness sees the count only after the
                    // record, so it never posts into a busy consumer.
                    received.fetch_add(1, Ordering::Release);
                };
                consume(&mut record).map(|()| hist)
            })
            .map_err(|e| e.to_string())?
    };
    let tid = tid_rx.recv().map_err(|e| e.to_string())?;
    let mut state = ThreadState::open(tid).map_err(|e| e.to_string())?;
    let mut failure = None;
    for i in 0..samples {
        let since = Instant::now();
        loop {
            if received.load(Ordering::Acquire) == i && state.state().ok() == Some(b'S') {
                break;
            }
            if consumer.is_finished() {
                failure = Some("consumer ended early".to_string());
                break;
            }
            if since.elapsed() > SLEEP_TIMEOUT {
                failure = Some(format!("consumer did not fall asleep after event {i}"));
                break;
            }
            std::hint::spin_loop();
        }
        if failure.is_some() {
            break;
        }
        if let Err(e) = post(now_ns()) {
            failure = Some(e);
            break;
        }
    }
    if let Some(f) = failure {
        // The consumer may block forever now; let it go (it owns only its
        // channel end, freed at exit).
        drop(post);
        return Err(f);
    }
    drop(post);
    consumer
        .join()
        .map_err(|_| "consumer panicked".to_string())?
}

fn eventfd_loop(
    mut rx: evd::Consumer<u64>,
    samples: u64,
    record: &mut dyn FnMut(u64),
) -> Result<(), String> {
    use rustix::event::epoll;
    let fd = rx.notify_fd().map_err(|e| e.to_string())?;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
    epoll::add(
        &ep,
        &fd,
        epoll::EventData::new_u64(0),
        epoll::EventFlags::IN,
    )
    .map_err(|e| e.to_string())?;
    let mut events: Vec<epoll::Event> = Vec::with_capacity(4);
    let mut got = 0;
    while got < samples {
        match rx.try_dequeue() {
            Ok(t) => {
                record(t);
                got += 1;
                continue;
            }
            Err(evd::TryDequeueError::Empty) => {}
            Err(e) => return Err(e.to_string()),
        }
        match rx.arm() {
            evd::ArmStatus::Armed => {
                events.clear();
                epoll::wait(&ep, rustix::buffer::spare_capacity(&mut events), None)
                    .map_err(|e| e.to_string())?;
                fd.acknowledge().map_err(|e| e.to_string())?;
            }
            evd::ArmStatus::Pending => {}
            evd::ArmStatus::Closed => return Err("evd closed early".into()),
        }
    }
    Ok(())
}

fn measure_park_floor(samples: u64) -> Result<Histogram<u64>, String> {
    let slot = Arc::new(AtomicU64::new(0));
    let consumer_slot = slot.clone();
    let (thread_tx, thread_rx) = std::sync::mpsc::channel::<std::thread::Thread>();
    let post_thread = std::sync::Mutex::new(None::<std::thread::Thread>);
    sleeping_consumer(
        samples,
        move |record| {
            let _ = thread_tx.send(std::thread::current());
            for _ in 0..samples {
                loop {
                    // Acquire: pairs with the harness's Release store.
                    let t = consumer_slot.swap(0, Ordering::Acquire);
                    if t != 0 {
                        record(t);
                        break;
                    }
                    std::thread::park();
                }
            }
            Ok(())
        },
        move |t| {
            let mut guard = post_thread.lock().expect("not poisoned");
            if guard.is_none() {
                *guard = Some(thread_rx.recv().map_err(|e| e.to_string())?);
            }
            slot.store(t, Ordering::Release);
            guard.as_ref().expect("set above").unpark();
            Ok(())
        },
    )
}

fn measure_upcall(samples: u64) -> Result<Histogram<u64>, String> {
    let (tx, rx) = evd::bounded::<u64>(1024).map_err(|e| e.to_string())?;
    let last = Arc::new(AtomicU64::new(0));
    let handler_last = last.clone();
    let upcalls = rx.into_upcalls(
        evd::UpcallPolicy::SingleInstance,
        evd::Invoke::Any,
        move |ev, _more| {
            if let Ok(t) = ev {
                handler_last.store(now_ns().saturating_sub(t).max(1), Ordering::Relaxed);
            }
        },
    );
    let mut hist = new_histogram();
    for _ in 0..samples {
        last.store(0, Ordering::Relaxed);
        tx.post(now_ns()).map_err(|e| e.to_string())?;
        // The handler ran inline on this thread before `post` returned.
        let d = last.load(Ordering::Relaxed);
        if d == 0 {
            return Err("upcall did not run inline".into());
        }
        hist.saturating_record(d);
    }
    drop(upcalls);
    Ok(hist)
}
