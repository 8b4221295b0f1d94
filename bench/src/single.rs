//! The single-thread loops, timed in ns and counted by callgrind through this binary's
//! `rearm-insns` and `cno-insns` modes: the re-arms ([`REARM`]), one post and one dequeue
//! ([`PAIR`]) and a CNO cycle against a plain post and dequeue ([`CNO_INSNS`]). Each loop checks
//! its result once, after the loop. How the loops are built: bench/README.md.

use crate::cno::{EVD_CAPACITY, INSNS_CASE};
use crate::payload::sum_below;
use crate::report::{Role::*, Row};
use crossbeam_utils::CachePadded;
use std::hint::black_box;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A single-thread loop.
#[derive(Clone, Copy, Debug)]
pub struct Loop {
    /// Its case.
    pub case: &'static str,
    /// How its records name and compare it.
    pub row: Row,
    /// Its `--kind` in this binary's callgrind mode of its case.
    pub kind: &'static str,
    /// Run this many iterations on the rings; fails unless every event came back.
    pub run: fn(&mut Rings, u64) -> Result<(), String>,
}

const ARM: &str = "evd arm (one CAS)";
const CAS: &str = "floor: one uncontended CAS";

/// The re-arms, evd first, the floor last: compared with evd's arm, the re-arms' floor is the
/// bare CAS (in ns; it is not counted).
#[rustfmt::skip]
pub const REARM: [Loop; 3] = [
    Loop { case: "rearm", row: Row::new(ARM, Evd, "single-thread", Some(ARM), Some(CAS)), kind: "evd", run: arm },
    Loop { case: "rearm", row: Row::new("arm, then poll again", Peer, "single-thread", Some(ARM), Some(CAS)), kind: "arm-then-poll", run: arm_then_poll },
    Loop { case: "rearm", row: Row::new(CAS, Floor, "single-thread", Some(ARM), None), kind: "cas-floor", run: cas },
];

const EVD: &str = "evd post+try_dequeue";
const ARRAY_QUEUE: &str = "crossbeam ArrayQueue push+pop";
const OUT_OF_LINE: &str = "single-thread/pair-out-of-line";

/// The post+dequeue pairs, as compiled first, evd first: `ArrayQueue` is compared with evd.
#[rustfmt::skip]
pub const PAIR: [Loop; 4] = [
    Loop { case: "single-thread/pair", row: Row::new(EVD, Evd, "single-thread", Some(EVD), None), kind: "", run: evd },
    Loop { case: "single-thread/pair", row: Row::new(ARRAY_QUEUE, Peer, "single-thread", Some(EVD), None), kind: "", run: array_queue },
    Loop { case: OUT_OF_LINE, row: Row::new(EVD, Evd, "single-thread", Some(EVD), None), kind: "", run: evd_calls },
    Loop { case: OUT_OF_LINE, row: Row::new(ARRAY_QUEUE, Peer, "single-thread", Some(EVD), None), kind: "", run: array_queue_calls },
];

const CYCLE: &str = "evd post+trigger, try_next, try_dequeue, enable_cno";

/// The CNO cycle and the plain pairs it is compared with (every count an evd row): a post to a
/// bound, enabled EVD (the trigger), `Cno::try_next`, `try_dequeue`, `enable_cno`; a post and a
/// `try_dequeue` on an EVD bound to nothing, and on one bound to a CNO but not enabled.
#[rustfmt::skip]
pub const CNO_INSNS: [Loop; 3] = [
    Loop { case: INSNS_CASE, row: Row::new(CYCLE, Evd, "single-thread", Some(CYCLE), None), kind: "cno", run: cno_cycle },
    Loop { case: INSNS_CASE, row: Row::new("evd post+try_dequeue, no CNO", Evd, "single-thread", Some(CYCLE), None), kind: "plain", run: |_, n| cno_pair(n, false) },
    Loop { case: INSNS_CASE, row: Row::new("evd post+try_dequeue, bound to a CNO, not enabled", Evd, "single-thread", Some(CYCLE), None), kind: "bound", run: |_, n| cno_pair(n, true) },
];

/// The rings the loops run on, reused across runs: an empty evd ring to re-arm (its poster kept so
/// that it stays open) and the floor's word on its own cache line; an evd ring and an
/// `ArrayQueue` for the pairs, both of capacity 1024.
pub struct Rings {
    _armed_poster: evd::Poster<u64>,
    armed: evd::Consumer<u64>,
    word: CachePadded<AtomicU64>,
    poster: evd::Poster<u64>,
    consumer: evd::Consumer<u64>,
    queue: crossbeam_queue::ArrayQueue<u64>,
}

impl Default for Rings {
    fn default() -> Self {
        Self::new()
    }
}

impl Rings {
    /// Fresh, empty rings.
    pub fn new() -> Self {
        let (_armed_poster, armed) = evd::bounded(1024).expect("capacity 1024 is valid");
        let (poster, consumer) = evd::bounded(1024).expect("capacity 1024 is valid");
        Rings {
            _armed_poster,
            armed,
            word: CachePadded::new(AtomicU64::new(0)),
            poster,
            consumer,
            queue: crossbeam_queue::ArrayQueue::new(1024),
        }
    }

    /// Nanoseconds per iteration of `l` over `iters` iterations.
    pub fn time_ns(&mut self, l: &Loop, iters: u64) -> Result<f64, String> {
        let start = Instant::now();
        (l.run)(self, iters)?;
        Ok(start.elapsed().as_nanos() as f64 / iters.max(1) as f64)
    }
}

/// evd: one `arm()` on an empty ring that is already armed (the code of a first arm: its CAS
/// installs the armed word it found, and succeeds).
fn arm(r: &mut Rings, iters: u64) -> Result<(), String> {
    let c = &mut r.armed;
    for _ in 0..iters {
        let _ = black_box(black_box(&mut *c).arm());
    }
    still_armed(c, iters)
}

/// Classic: `arm()`, then one more `try_dequeue()` that finds nothing.
fn arm_then_poll(r: &mut Rings, iters: u64) -> Result<(), String> {
    let c = &mut r.armed;
    for _ in 0..iters {
        let _ = black_box(black_box(&mut *c).arm());
        let _ = black_box(black_box(&mut *c).try_dequeue());
    }
    still_armed(c, iters)
}

/// Every arm armed and every extra poll found nothing.
fn still_armed(c: &evd::Consumer<u64>, iters: u64) -> Result<(), String> {
    let q = c.query();
    let ok = iters == 0 || (q.armed && q.len == 0 && !q.closed);
    ok.then_some(())
        .ok_or("the re-arm loop must run on an empty, open, armed ring".into())
}

/// The bit the floor's CAS sets.
const ARMED: u64 = 1;

/// Floor: a `Relaxed` load and one `compare_exchange` (`AcqRel` on success, `Relaxed` on failure,
/// as evd's arm) that installs the word with its armed bit set, and succeeds.
fn cas(r: &mut Rings, iters: u64) -> Result<(), String> {
    let word: &AtomicU64 = &r.word;
    for _ in 0..iters {
        let word = black_box(word);
        let w = word.load(Ordering::Relaxed);
        let _ = black_box(word.compare_exchange(w, w | ARMED, Ordering::AcqRel, Ordering::Relaxed));
    }
    let ok = iters == 0 || word.load(Ordering::Relaxed) == ARMED;
    ok.then_some(())
        .ok_or("the floor's CAS must succeed".into())
}

fn evd(r: &mut Rings, iters: u64) -> Result<(), String> {
    let (tx, rx) = (&r.poster, &mut r.consumer);
    pairs(iters, |v| _ = tx.post(v), || rx.try_dequeue().ok())
}

fn array_queue(r: &mut Rings, iters: u64) -> Result<(), String> {
    let q = &r.queue;
    pairs(iters, |v| _ = q.push(v), || q.pop())
}

fn evd_calls(r: &mut Rings, iters: u64) -> Result<(), String> {
    let (tx, rx) = (&r.poster, &mut r.consumer);
    pairs(iters, |v| evd_post(tx, v), || evd_dequeue(rx))
}

fn array_queue_calls(r: &mut Rings, iters: u64) -> Result<(), String> {
    let q = &r.queue;
    pairs(iters, |v| array_queue_push(q, v), || array_queue_pop(q))
}

/// The one loop shape of every pair: post the iteration number, dequeue, add what came out to the
/// sum, checked once afterwards.
#[inline(always)]
fn pairs(
    iters: u64,
    mut post: impl FnMut(u64),
    mut dequeue: impl FnMut() -> Option<u64>,
) -> Result<(), String> {
    let mut sum = 0u64;
    for i in 0..iters {
        post(black_box(i));
        if let Some(v) = dequeue() {
            sum = sum.wrapping_add(v);
        }
    }
    let want = sum_below(iters);
    if black_box(sum) != want {
        return Err(format!("sum {sum} of dequeued events, expected {want}"));
    }
    Ok(())
}

#[inline(never)]
fn evd_post(tx: &evd::Poster<u64>, v: u64) {
    let _ = tx.post(v);
}

#[inline(never)]
fn evd_dequeue(rx: &mut evd::Consumer<u64>) -> Option<u64> {
    rx.try_dequeue().ok()
}

#[inline(never)]
fn array_queue_push(q: &crossbeam_queue::ArrayQueue<u64>, v: u64) {
    let _ = q.push(v);
}

#[inline(never)]
fn array_queue_pop(q: &crossbeam_queue::ArrayQueue<u64>) -> Option<u64> {
    q.pop()
}

/// A post that triggers, `Cno::try_next`, `try_dequeue`, `enable_cno`.
fn cno_cycle(_: &mut Rings, iters: u64) -> Result<(), String> {
    let (tx, mut rx) = evd::bounded::<u64>(EVD_CAPACITY).map_err(|e| e.to_string())?;
    let mut cno = evd::Cno::new(1).map_err(|e| e.to_string())?;
    rx.bind_cno(&cno, 1).map_err(|e| e.to_string())?;
    if rx.enable_cno().map_err(|e| e.to_string())? != evd::ArmStatus::Armed {
        return Err("a fresh EVD's enable did not arm".into());
    }
    let (mut sum, mut keys) = (0u64, 0u64);
    for i in 0..iters {
        let _ = tx.post(black_box(i));
        if let Some(k) = cno.try_next() {
            keys = keys.wrapping_add(k);
        }
        if let Ok(v) = rx.try_dequeue() {
            sum = sum.wrapping_add(v);
        }
        let _ = black_box(rx.enable_cno());
    }
    checksum(sum, keys, iters)
}

/// A post and a `try_dequeue` on an EVD bound to a CNO if `bound` (never enabled: it must never
/// put its key in the ready set), on one bound to nothing otherwise: the same loop.
fn cno_pair(iters: u64, bound: bool) -> Result<(), String> {
    let (tx, mut rx) = evd::bounded::<u64>(EVD_CAPACITY).map_err(|e| e.to_string())?;
    let mut cno = evd::Cno::new(1).map_err(|e| e.to_string())?;
    if bound {
        rx.bind_cno(&cno, 1).map_err(|e| e.to_string())?;
    }
    let mut sum = 0u64;
    for i in 0..iters {
        let _ = tx.post(black_box(i));
        if let Ok(v) = rx.try_dequeue() {
            sum = sum.wrapping_add(v);
        }
    }
    if let Some(key) = cno.try_next() {
        return Err(format!("the CNO of an EVD never enabled got its key {key}"));
    }
    checksum(sum, iters, iters)
}

fn checksum(sum: u64, keys: u64, iters: u64) -> Result<(), String> {
    let want = sum_below(iters);
    if (black_box(sum), keys) != (want, iters) {
        return Err(format!(
            "checksum {sum} and {keys} keys, expected {want} and {iters}"
        ));
    }
    Ok(())
}

/// The iteration counts of the two callgrind runs.
pub const INSN_RUNS: (u64, u64) = (1_000, 101_000);

/// Instructions of one iteration of `exe`'s mode `mode` (its arguments but `--iters N`), counted
/// by callgrind: the two runs of [`INSN_RUNS`], side by side (callgrind counts its own process's
/// instructions, whatever else runs), by difference, so start-up and teardown cancel out. `Err`
/// if valgrind is missing or fails.
pub fn count_mode(exe: &Path, mode: &[&str]) -> Result<f64, String> {
    let (n1, n2) = INSN_RUNS;
    let mut first = callgrind_start(exe, mode, n1)?;
    let second = match callgrind_start(exe, mode, n2) {
        Ok(second) => second,
        Err(e) => {
            let _ = first.kill();
            let _ = first.wait();
            return Err(e);
        }
    };
    let i1 = callgrind_total(first);
    per_iteration(i1?, callgrind_total(second)?, n2 - n1)
}

/// `(i2 - i1) / iters`, refusing a decrease.
pub fn per_iteration(i1: u64, i2: u64, iters: u64) -> Result<f64, String> {
    if i2 < i1 || iters == 0 {
        return Err(format!(
            "callgrind counts {i1} then {i2}: no per-iteration cost"
        ));
    }
    Ok((i2 - i1) as f64 / iters as f64)
}

fn callgrind_start(exe: &Path, mode: &[&str], iters: u64) -> Result<Child, String> {
    Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(exe)
        .args(mode)
        .arg("--iters")
        .arg(iters.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("valgrind: {e}"))
}

fn callgrind_total(child: Child) -> Result<u64, String> {
    let out = child
        .wait_with_output()
        .map_err(|e| format!("valgrind: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("valgrind exited with {}: {stderr}", out.status));
    }
    parse_collected(&stderr).ok_or_else(|| "no `Collected :` line in callgrind's output".into())
}

/// The instruction count in callgrind's summary (`==PID== Collected : N`).
pub fn parse_collected(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|l| {
        let rest = l.split_once("Collected :")?.1;
        rest.split_whitespace().next()?.parse().ok()
    })
}
