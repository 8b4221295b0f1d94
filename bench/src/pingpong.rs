//! Busy ping-pong ([`PINGPONG`]): the round trip of two threads that never sleep, over two queues
//! of one system (A→B and B→A, [`CAPACITY`] slots), both polling in the crate's one busy loop
//! ([`BusyWait`]), after [`WARMUP`] unrecorded round trips. How: bench/README.md.

use crate::latency::{Latency, Sampled, new_histogram};
use crate::report::{Role::*, Row};
use crate::throughput::{BusyWait, CAPACITY, CPU_SAMPLE_EVERY, NO_CPU, current_cpu};
use crossbeam_utils::CachePadded;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The case of the busy ping-pong.
pub const CASE: &str = "pingpong/u64";
/// Round trips of every measurement before the recorded ones.
pub const WARMUP: u64 = 2_000;
/// The most events one `dequeue_batch` of the batch row takes.
pub const BATCH: usize = 16;
/// How long a side polls for a value before it declares the run broken.
const STALL_TIMEOUT: Duration = Duration::from_secs(5);

const EVD: Option<&str> = Some("evd try_dequeue");
const FLOOR: &str = "floor: two atomics";

/// The busy ping-pong systems, evd first, the floor last: every row is compared with `evd
/// try_dequeue` (each side takes one event per round trip, so a batch holds one too).
#[rustfmt::skip]
pub const PINGPONG: [Latency; 6] = [
    Latency::new(Row::new("evd try_dequeue", Evd, "busy/item", EVD, Some(FLOOR)), 2, evd_item),
    Latency::new(Row::new("evd dequeue_batch", Evd, "busy/batch", EVD, Some(FLOOR)), 2, evd_batch),
    Latency::new(Row::new("rtrb pop", Peer, "busy/item", EVD, Some(FLOOR)), 2, rtrb),
    Latency::new(Row::new("crossbeam ArrayQueue", Peer, "busy/item", EVD, Some(FLOOR)), 2, array_queue),
    Latency::new(Row::new("crossbeam-channel try_recv", Peer, "busy/item", EVD, Some(FLOOR)), 2, crossbeam_channel),
    Latency::new(Row::new(FLOOR, Floor, "busy/item", EVD, None), 2, floor),
];

/// evd: `post`, busy `try_dequeue`.
fn evd_item(samples: u64) -> Sampled {
    let poll = |rx: &mut evd::Consumer<u64>| match rx.try_dequeue() {
        Ok(v) => Ok(Some(v)),
        Err(evd::TryDequeueError::Empty) => Ok(None),
        Err(e) => Err(e.to_string()),
    };
    round_trips(
        samples,
        || evd::bounded(CAPACITY).expect("capacity"),
        evd_post,
        poll,
    )
}

/// evd: `post`, busy `dequeue_batch(&mut buf, 16)`.
fn evd_batch(samples: u64) -> Sampled {
    let queue = || {
        let (tx, rx) = evd::bounded(CAPACITY).expect("capacity");
        (tx, (rx, Vec::with_capacity(BATCH)))
    };
    let poll = |(rx, buf): &mut (evd::Consumer<u64>, Vec<u64>)| match rx.dequeue_batch(buf, BATCH) {
        Ok(0) | Err(evd::TryDequeueError::Empty) => Ok(None),
        Ok(1) => Ok(buf.pop()),
        Ok(n) => Err(format!("a batch of {n}: the ring held more than one")),
        Err(e) => Err(e.to_string()),
    };
    round_trips(samples, queue, evd_post, poll)
}

fn evd_post(tx: &mut evd::Poster<u64>, v: u64) -> Result<(), String> {
    tx.post(v).map_err(|e| e.to_string())
}

/// rtrb (the SPSC ring): `push`, busy `pop`.
fn rtrb(samples: u64) -> Sampled {
    let send = |tx: &mut rtrb::Producer<u64>, v| tx.push(v).map_err(|e| e.to_string());
    let poll = |rx: &mut rtrb::Consumer<u64>| Ok(rx.pop().ok());
    round_trips(samples, || rtrb::RingBuffer::new(CAPACITY), send, poll)
}

/// crossbeam-queue `ArrayQueue`: `push`, busy `pop`.
fn array_queue(samples: u64) -> Sampled {
    type Q = Arc<crossbeam_queue::ArrayQueue<u64>>;
    let send = |tx: &mut Q, v| tx.push(v).map_err(|_| "ArrayQueue full".to_string());
    let poll = |rx: &mut Q| Ok(rx.pop());
    let queue = || {
        let q = Arc::new(crossbeam_queue::ArrayQueue::new(CAPACITY));
        (q.clone(), q)
    };
    round_trips(samples, queue, send, poll)
}

/// crossbeam-channel `bounded`: `try_send`, busy `try_recv`.
fn crossbeam_channel(samples: u64) -> Sampled {
    use crossbeam_channel::{Receiver, Sender, TryRecvError};
    let send = |tx: &mut Sender<u64>, v| tx.try_send(v).map_err(|e| e.to_string());
    let poll = |rx: &mut Receiver<u64>| match rx.try_recv() {
        Ok(v) => Ok(Some(v)),
        Err(TryRecvError::Empty) => Ok(None),
        Err(e) => Err(e.to_string()),
    };
    round_trips(samples, || crossbeam_channel::bounded(CAPACITY), send, poll)
}

/// Floor: each side stores into its own counter and spins on the other's; the values sent are
/// distinct and never 0, so a change is a value.
fn floor(samples: u64) -> Sampled {
    type Counter = Arc<CachePadded<AtomicU64>>;
    // Release/Acquire: what a queue's publish and receive give.
    let send = |tx: &mut Counter, v| {
        tx.store(v, Ordering::Release);
        Ok(())
    };
    let poll = |(rx, last): &mut (Counter, u64)| {
        let v = rx.load(Ordering::Acquire);
        Ok((v != *last).then(|| {
            *last = v;
            v
        }))
    };
    let queue = || {
        let c = Arc::new(CachePadded::new(AtomicU64::new(0)));
        (c.clone(), (c, 0))
    };
    round_trips(samples, queue, send, poll)
}

/// A side's non-blocking receive: `None` if nothing is there. (A side's send fails if refused: the
/// queue holds nothing else.)
type Poll = Result<Option<u64>, String>;

/// Poll until a value comes; fails after [`STALL_TIMEOUT`] without one.
#[inline(always)]
fn receive<R>(rx: &mut R, poll: impl Fn(&mut R) -> Poll) -> Result<u64, String> {
    let mut wait = BusyWait::default();
    let mut spins = 0u32;
    let mut since = None;
    loop {
        if let Some(v) = poll(rx)? {
            return Ok(v);
        }
        wait.miss();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024)
            && since.get_or_insert_with(Instant::now).elapsed() > STALL_TIMEOUT
        {
            return Err("no value came back within 5 s".into());
        }
    }
}

/// Run [`WARMUP`] + `samples` round trips over two queues made by `queue` (A→B and B→A) between
/// this thread, which times them, and an echo thread; record the last `samples`.
fn round_trips<S: Send + 'static, R: Send + 'static>(
    samples: u64,
    queue: impl Fn() -> (S, R),
    send: impl Fn(&mut S, u64) -> Result<(), String> + Copy + Send + 'static,
    poll: impl Fn(&mut R) -> Poll + Copy + Send + 'static,
) -> Sampled {
    let ((mut ab_tx, mut ab_rx), (mut ba_tx, mut ba_rx)) = (queue(), queue());
    let trips = WARMUP + samples;
    let far_cpu = Arc::new(AtomicU32::new(NO_CPU));
    let echo_cpu = far_cpu.clone();
    let echo = std::thread::Builder::new()
        .name("pingpong-echo".into())
        .spawn(move || -> Result<(), String> {
            for i in 0..trips {
                let v = receive(&mut ab_rx, poll)?;
                send(&mut ba_tx, v)?;
                if i % CPU_SAMPLE_EVERY == 0 {
                    echo_cpu.store(current_cpu(), Ordering::Relaxed);
                }
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    let mut hist = new_histogram();
    let (mut cpu_samples, mut same_cpu) = (0u64, 0u64);
    let mut run = || -> Result<(), String> {
        for i in 0..trips {
            let v = i + 1;
            let start = Instant::now();
            send(&mut ab_tx, v)?;
            let back = receive(&mut ba_rx, poll)?;
            let ns = start.elapsed().as_nanos() as u64;
            if back != v {
                return Err(format!("sent {v}, got {back} back"));
            }
            if i >= WARMUP {
                hist.saturating_record(ns.max(1));
            }
            if i % CPU_SAMPLE_EVERY == CPU_SAMPLE_EVERY / 2 {
                let theirs = far_cpu.load(Ordering::Relaxed);
                if theirs != NO_CPU {
                    cpu_samples += 1;
                    same_cpu += u64::from(theirs == current_cpu());
                }
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        // An echo thread that failed says why; one still polling gives up on its own after the
        // stall timeout.
        if let Some(Ok(Err(echo_err))) = echo.is_finished().then(|| echo.join()) {
            return Err(format!("{e} (echo thread: {echo_err})"));
        }
        return Err(e);
    }
    echo.join()
        .map_err(|_| "the echo thread panicked".to_string())??;
    let share = (cpu_samples > 0).then(|| same_cpu as f64 / cpu_samples as f64);
    Ok((hist, share))
}
