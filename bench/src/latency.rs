//! One-way wake latency of a consumer that is really asleep ([`WAKE`]), and the harness of every
//! latency run that waits for a thread to sleep (`asleep`: `S` in `/proc/self/task/TID/stat`
//! before each sample, so that no system is measured on a fixed gap). How: bench/README.md.

use crate::peers::Channel;
use crate::report::{Role::*, Row};
use hdrhistogram::Histogram;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long the harness waits for a thread to fall asleep.
const SLEEP_TIMEOUT: Duration = Duration::from_secs(5);

/// A latency measurement: its samples in ns, and the share of CPU samples that found both threads
/// on one CPU (the busy ping-pong's; `None` elsewhere).
pub type Sampled = Result<(Histogram<u64>, Option<f64>), String>;

/// A system of a latency section.
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    /// How its records name and compare it.
    pub row: Row,
    /// Threads the measurement runs.
    pub threads: usize,
    /// Measure this many samples.
    pub measure: fn(u64) -> Sampled,
}

impl Latency {
    /// A system, positionally.
    pub const fn new(row: Row, threads: usize, measure: fn(u64) -> Sampled) -> Self {
        Latency {
            row,
            threads,
            measure,
        }
    }
}

const EVD_WAIT: &str = "evd wait (park/unpark)";
const EVD_ASYNC: &str = "evd recv().await (tokio current-thread)";
const EVD_EVENTFD: &str = "evd eventfd + epoll";
const UPCALL: &str = "evd inline upcall";
/// The raw park/unpark floor: one thread stores a value and unparks the other.
pub const PARK_FLOOR: &str = "floor: raw park/unpark";
const EVENTFD_FLOOR: &str = "floor: raw eventfd read";

/// The wake-latency systems, evd first, floors last. Each row is compared with the evd row that
/// sleeps the same way; futex sleeps (a thread park, a tokio current-thread runtime's) have the
/// park/unpark floor, the epoll loop the eventfd floor.
#[rustfmt::skip]
pub const WAKE: [Latency; 9] = [
    Latency::new(Row::new(EVD_WAIT, Evd, "blocking", Some(EVD_WAIT), Some(PARK_FLOOR)), 2, evd_wait),
    Latency::new(Row::new(EVD_ASYNC, Evd, "async", Some(EVD_ASYNC), Some(PARK_FLOOR)), 2, evd_async),
    Latency::new(Row::new(EVD_EVENTFD, Evd, "epoll", Some(EVD_EVENTFD), Some(EVENTFD_FLOOR)), 2, evd_eventfd),
    Latency::new(Row::new(UPCALL, Evd, "inline", Some(UPCALL), None), 1, evd_upcall),
    Latency::new(Row::new("crossbeam-channel recv", Peer, "blocking", Some(EVD_WAIT), Some(PARK_FLOOR)), 2, peer::<crossbeam_channel::Receiver<u64>>),
    Latency::new(Row::new("tokio mpsc recv().await", Peer, "async", Some(EVD_ASYNC), Some(PARK_FLOOR)), 2, tokio_recv),
    Latency::new(Row::new("flume recv", Peer, "blocking", Some(EVD_WAIT), Some(PARK_FLOOR)), 2, peer::<flume::Receiver<u64>>),
    Latency::new(Row::new(PARK_FLOOR, Floor, "blocking", Some(EVD_WAIT), None), 2, park_floor),
    Latency::new(Row::new(EVENTFD_FLOOR, Floor, "blocking", Some(EVD_EVENTFD), None), 2, eventfd_floor),
];

/// evd `try_dequeue`, then `wait(1, None)` (arm, park; unparked by the post).
pub(crate) fn evd_wait(samples: u64) -> Sampled {
    evd_consumer(samples, move |rx, record| {
        for _ in 0..samples {
            loop {
                match rx.try_dequeue() {
                    Ok(t) => break record(t),
                    Err(evd::TryDequeueError::Empty) => {
                        _ = rx.wait(1, None).map_err(|e| e.to_string())?
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Ok(())
    })
}

/// evd `recv().await` on a tokio current-thread runtime.
fn evd_async(samples: u64) -> Sampled {
    evd_consumer(samples, move |rx, record| {
        current_thread_runtime()?.block_on(async {
            for _ in 0..samples {
                record(rx.recv().await.map_err(|e| e.to_string())?);
            }
            Ok(())
        })
    })
}

/// tokio mpsc `recv().await` on a current-thread runtime.
fn tokio_recv(samples: u64) -> Sampled {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1024);
    let consume = move |record: &mut dyn FnMut(u64)| {
        current_thread_runtime()?.block_on(async {
            for _ in 0..samples {
                record(rx.recv().await.ok_or("tokio channel closed")?);
            }
            Ok(())
        })
    };
    sleeping_consumer(samples, consume, move |t| {
        tx.try_send(t).map_err(|e| e.to_string())
    })
}

/// A peer's blocking `recv` woken by its blocking `send`.
fn peer<C: Channel<u64> + 'static>(samples: u64) -> Sampled {
    let (tx, mut rx) = C::bounded(1024);
    let consume = move |record: &mut dyn FnMut(u64)| {
        for _ in 0..samples {
            record(rx.recv().ok_or("channel closed")?);
        }
        Ok(())
    };
    sleeping_consumer(samples, consume, move |t| {
        C::send(&tx, t).map_err(|_| "channel closed".to_string())
    })
}

/// evd's eventfd in an epoll loop: drain, arm, `epoll_wait`, acknowledge.
fn evd_eventfd(samples: u64) -> Sampled {
    use rustix::event::epoll;
    evd_consumer(samples, move |rx, record| {
        let fd = rx.notify_fd().map_err(|e| e.to_string())?;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
        let data = epoll::EventData::new_u64(0);
        epoll::add(&ep, &fd, data, epoll::EventFlags::IN).map_err(|e| e.to_string())?;
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
                    let buf = rustix::buffer::spare_capacity(&mut events);
                    epoll::wait(&ep, buf, None).map_err(|e| e.to_string())?;
                    fd.acknowledge().map_err(|e| e.to_string())?;
                }
                evd::ArmStatus::Pending => {}
                evd::ArmStatus::Closed => return Err("evd closed early".into()),
            }
        }
        Ok(())
    })
}

/// [`sleeping_consumer`] on an evd ring of 1024 slots: `consume` runs the consumer's loop.
fn evd_consumer(
    samples: u64,
    consume: impl FnOnce(&mut evd::Consumer<u64>, &mut dyn FnMut(u64)) -> Result<(), String>
    + Send
    + 'static,
) -> Sampled {
    let (tx, mut rx) = evd::bounded::<u64>(1024).map_err(|e| e.to_string())?;
    let post = move |t| tx.post(t).map_err(|e| e.to_string());
    sleeping_consumer(samples, move |record| consume(&mut rx, record), post)
}

/// evd upcall (SingleInstance) run inline on the posting thread: no thread sleeps.
fn evd_upcall(samples: u64) -> Sampled {
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
    Ok((hist, None))
}

/// The floor of futex sleeps: an atomic slot plus `thread::park` / `Thread::unpark`.
pub(crate) fn park_floor(samples: u64) -> Sampled {
    let slot = Arc::new(AtomicU64::new(0));
    let consumer_slot = slot.clone();
    let (thread_tx, thread_rx) = std::sync::mpsc::channel::<std::thread::Thread>();
    let post_thread = std::sync::Mutex::new(None::<std::thread::Thread>);
    let consume = move |record: &mut dyn FnMut(u64)| {
        let _ = thread_tx.send(std::thread::current());
        for _ in 0..samples {
            loop {
                // Acquire: pairs with the harness's Release store.
                let t = consumer_slot.swap(0, Ordering::Acquire);
                if t != 0 {
                    break record(t);
                }
                std::thread::park();
            }
        }
        Ok(())
    };
    sleeping_consumer(samples, consume, move |t| {
        let mut guard = post_thread.lock().expect("not poisoned");
        if guard.is_none() {
            *guard = Some(thread_rx.recv().map_err(|e| e.to_string())?);
        }
        slot.store(t, Ordering::Release);
        guard.as_ref().expect("set above").unpark();
        Ok(())
    })
}

/// The floor of the epoll loop: a blocking `read` of an eventfd that the poster writes.
fn eventfd_floor(samples: u64) -> Sampled {
    use rustix::event::{EventfdFlags, eventfd};
    let fd = Arc::new(eventfd(0, EventfdFlags::CLOEXEC).map_err(|e| e.to_string())?);
    let rfd = fd.clone();
    let consume = move |record: &mut dyn FnMut(u64)| {
        for _ in 0..samples {
            let mut buf = [0u8; 8];
            rustix::io::read(&*rfd, &mut buf).map_err(|e| e.to_string())?;
            record(u64::from_ne_bytes(buf));
        }
        Ok(())
    };
    // The counter was 0 (the consumer read it), so the reader gets exactly `t`.
    sleeping_consumer(samples, consume, move |t| {
        rustix::io::write(&*fd, &t.to_ne_bytes())
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

/// Nanoseconds since a process-wide origin, never 0 (an eventfd write of 0 would not wake its
/// reader).
#[inline]
pub fn now_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    origin.elapsed().as_nanos() as u64 + 1
}

/// A histogram for latencies: 1 ns to 100 s, 3 significant digits.
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

/// The state field of a `/proc/.../stat` line: the first letter after the last `)` (the command
/// name in parentheses may itself contain `)`).
pub fn parse_stat_state(line: &[u8]) -> Option<u8> {
    let close = line.iter().rposition(|&b| b == b')')?;
    line[close + 1..]
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
}

/// [`asleep`] for a consumer thread running `consume`, which passes each event's post time to
/// `record` as soon as it has the event; the harness posts each sample's time with `post`.
fn sleeping_consumer(
    samples: u64,
    consume: impl FnOnce(&mut dyn FnMut(u64)) -> Result<(), String> + Send + 'static,
    post: impl Fn(u64) -> Result<(), String>,
) -> Sampled {
    let thread = move |record: &mut dyn FnMut(u64, u64)| consume(&mut |t| record(t, now_ns()));
    let (hist, _) = asleep(
        "wake-consumer",
        samples,
        thread,
        post,
        |_| true,
        |post, _| post(now_ns()),
    )?;
    Ok((hist, None))
}

/// Run `thread` on a new thread named `name`; it records each sample as `record(start, end)`.
/// Before each of `samples`, once that thread has recorded the previous one, `ready(&state)` holds
/// and the thread sleeps (`S`), the harness calls `act(&mut state, i)`: the post, or the receive
/// that frees a slot, that wakes it. On failure `state` is dropped first (a queue end: closing it
/// frees a thread blocked on it). Returns the samples in ns, and `state`.
pub(crate) fn asleep<S>(
    name: &str,
    samples: u64,
    thread: impl FnOnce(&mut dyn FnMut(u64, u64)) -> Result<(), String> + Send + 'static,
    mut state: S,
    ready: impl Fn(&S) -> bool,
    mut act: impl FnMut(&mut S, u64) -> Result<(), String>,
) -> Result<(Histogram<u64>, S), String> {
    let received = Arc::new(AtomicU64::new(0));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let counted = received.clone();
    let handle = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get());
            let mut hist = new_histogram();
            thread(&mut |start, end| {
                hist.saturating_record(end.saturating_sub(start).max(1));
                // Release: the harness sees the count only after the record, so it never acts while
                // this thread is busy.
                counted.fetch_add(1, Ordering::Release);
            })?;
            Ok::<_, String>(hist)
        })
        .map_err(|e| e.to_string())?;
    let tid = tid_rx.recv().map_err(|e| e.to_string())?;
    let mut stat = ThreadState::open(tid).map_err(|e| e.to_string())?;
    let mut failure = None;
    'samples: for i in 0..samples {
        let since = Instant::now();
        while received.load(Ordering::Acquire) != i
            || !ready(&state)
            || stat.state().ok() != Some(b'S')
        {
            if handle.is_finished() {
                failure = Some(format!("{name} ended early"));
                break 'samples;
            }
            if since.elapsed() > SLEEP_TIMEOUT {
                failure = Some(format!("{name} did not fall asleep after sample {i}"));
                break 'samples;
            }
            std::hint::spin_loop();
        }
        if let Err(e) = act(&mut state, i) {
            failure = Some(e);
            break;
        }
    }
    if let Some(f) = failure {
        // A thread that ended is joined for its own error; one that does not end is let go (it owns
        // only its end of the queue).
        drop(state);
        if let Some(Ok(Err(e))) = handle.is_finished().then(|| handle.join()) {
            return Err(format!("{f}: {e}"));
        }
        return Err(f);
    }
    let hist = handle.join().map_err(|_| format!("{name} panicked"))??;
    Ok((hist, state))
}
