//! [`Consumer::wait`]'s threshold rule, checked against a model over random
//! operation sequences and random spin budgets.
//!
//! The rule, as `wait`'s doc states it: a wait that finds its `threshold`
//! met returns `Ok` and leaves a pending loss report to the next dequeue; a
//! pending report ends a wait that would otherwise block, as
//! `WaitError::Overflow` (once); a closed EVD with fewer than `threshold`
//! events left ends it as `WaitError::Closed` (a pending report first); a
//! zero timeout that finds none of these is `WaitError::Timeout`. Nothing is
//! dequeued. And a zero timeout is a poll: it neither arms nor disarms, so
//! an arm made with [`Consumer::arm`] stays in place (and the sticky
//! *notified* bit as it was); `dequeue_timeout(Duration::ZERO)` likewise is
//! a `try_dequeue` that reports "nothing ready" as `DequeueError::Timeout`.
//!
//! Everything runs on one thread, so every outcome is determined: the model
//! ([`Model`]) says what each operation returns and what
//! [`Consumer::query`] then shows (`len`, `armed`, `notified`,
//! `notifications`, `closed`, `lost`), and the spin budget must not change
//! any of it. A wait that could block is only ever made with a zero timeout;
//! `None` and a one-second timeout are used only where the model says the
//! wait returns at once, and [`Duration::MAX`] as a budget (which spins
//! until events are ready) only where every wait is a poll.
//!
//! Deterministic: each sequence comes from one 64-bit seed (splitmix64 and
//! xorshift64*, below). A failure prints the sequence's seed, the operation
//! and the history; `EVD_WAIT_RULE_SEED=<seed>` replays that sequence (and
//! runs the sequences derived from it as a base seed). No sleeps and no
//! timing assertions; the one clock is [`hang_guard`]'s, which only turns a
//! wait that the model says cannot block, and that blocks anyway, into an
//! abort with its seed instead of a silent hang.

use crate::common::{Rng, assert_report_in, lose_twice_around_a_report, splitmix64};
use evd::{
    ArmStatus, Consumer, DEFAULT_SPIN_BUDGET, DequeueError, Lossy, Overflow, PostError, Poster,
    TryDequeueError, WaitError,
};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;

/// The fixed base seeds; each runs [`SEQUENCES_PER_SEED`] sequences.
const SEEDS: [u64; 12] = [
    0x0000_0000_0000_0001,
    0x5eed_0fa1_17e5_7000,
    0x9e37_79b9_7f4a_7c15,
    0xdead_beef_cafe_f00d,
    0x0123_4567_89ab_cdef,
    0xfedc_ba98_7654_3210,
    0x7777_7777_7777_7777,
    0x0bad_c0de_0bad_c0de,
    0x2545_f491_4f6c_dd1d,
    0x3141_5926_5358_9793,
    0x2718_2818_2845_9045,
    0x1618_0339_8874_9894,
];
const SEQUENCES_PER_SEED: usize = 256;
/// A sequence is this many operations, plus up to [`EXTRA_OPS`].
const MIN_OPS: u64 = 8;
const EXTRA_OPS: u64 = 120;
/// Stop collecting failures after this many failing sequences.
const MAX_FAILURES: usize = 40;

const ONE_NANO: Duration = Duration::from_nanos(1);
const ONE_MICRO: Duration = Duration::from_micros(1);
/// The spin budgets a sequence starts with or switches to. `Duration::MAX`
/// spins until events are ready and never parks: while it is the budget,
/// every wait is a poll.
const BUDGETS: [Duration; 5] = [
    Duration::ZERO,
    ONE_NANO,
    ONE_MICRO,
    DEFAULT_SPIN_BUDGET,
    Duration::MAX,
];

/// One of [`BUDGETS`], picked by `rng`.
fn pick_budget(rng: &mut Rng) -> Duration {
    BUDGETS[rng.below(BUDGETS.len() as u64) as usize]
}

/// The sequence seeds derived from a base seed.
fn derived(base: u64, n: usize) -> impl Iterator<Item = u64> {
    let mut s = base;
    (0..n).map(move |_| splitmix64(&mut s))
}

// ---------------------------------------------------------------------------
// Operations and what they return.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timeout {
    Zero,
    OneSecond,
    Never,
}

impl Timeout {
    fn get(self) -> Option<Duration> {
        match self {
            Timeout::Zero => Some(Duration::ZERO),
            Timeout::OneSecond => Some(Duration::from_secs(1)),
            Timeout::Never => None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Post(u64),
    PostLossy(u64),
    TryDequeue,
    /// `prefix` values already in the `Vec` (a batch appends).
    DequeueBatch {
        max: usize,
        prefix: usize,
    },
    DequeueTimeoutZero,
    Arm,
    Disarm,
    Close,
    Wait {
        threshold: usize,
        timeout: Timeout,
    },
    SetSpinBudget(Duration),
}

/// A refused post, with its event (`PostError`'s `Debug` hides it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    Full(u64),
    Closed(u64),
}

fn refused(e: PostError<u64>) -> Refused {
    match e {
        PostError::Full(v) => Refused::Full(v),
        PostError::Closed(v) => Refused::Closed(v),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Post(Result<(), Refused>),
    PostLossy(Result<Lossy, Refused>),
    TryDequeue(Result<u64, TryDequeueError>),
    /// The result and the values appended to the `Vec`.
    DequeueBatch(Result<usize, TryDequeueError>, Vec<u64>),
    DequeueTimeout(Result<u64, DequeueError>),
    Arm(ArmStatus),
    Wait(Result<usize, WaitError>),
    Done,
}

/// What [`Consumer::query`] shows that the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    len: usize,
    armed: bool,
    notified: bool,
    notifications: u64,
    closed: bool,
    lost: u64,
}

fn seen(c: &Consumer<u64>) -> Seen {
    let q = c.query();
    Seen {
        len: q.len,
        armed: q.armed,
        notified: q.notified,
        notifications: q.notifications,
        closed: q.closed,
        lost: q.lost,
    }
}

// ---------------------------------------------------------------------------
// The model.

/// The EVD as its docs describe it, for one thread.
struct Model {
    capacity: usize,
    queue: VecDeque<u64>,
    /// Losses not yet reported.
    lost: u64,
    /// Every loss, reported or not (`Query::lost`).
    lost_total: u64,
    closed: bool,
    /// The consumer's last report-or-event was a report: with events ready,
    /// the next dequeue gives an event ("never twice in a row while events
    /// are ready").
    last_was_report: bool,
    armed: bool,
    notified: bool,
    notifications: u64,
}

impl Model {
    fn new(capacity: usize) -> Self {
        Model {
            capacity,
            queue: VecDeque::new(),
            lost: 0,
            lost_total: 0,
            closed: false,
            last_was_report: false,
            armed: false,
            notified: false,
            notifications: 0,
        }
    }

    fn seen(&self) -> Seen {
        Seen {
            len: self.queue.len(),
            armed: self.armed,
            notified: self.notified,
            notifications: self.notifications,
            closed: self.closed,
            lost: self.lost_total,
        }
    }

    /// A post, a lossy post's loss or a close that finds the EVD armed fires
    /// the arm's one notification and disarms it; *notified* is sticky.
    fn notify(&mut self) {
        if self.armed {
            self.armed = false;
            self.notified = true;
            self.notifications += 1;
        }
    }

    /// A full ring hands the event back (backpressure: nothing counted).
    fn post(&mut self, v: u64) -> Result<(), Refused> {
        if self.closed {
            return Err(Refused::Closed(v));
        }
        if self.queue.len() == self.capacity {
            return Err(Refused::Full(v));
        }
        self.queue.push_back(v);
        self.notify();
        Ok(())
    }

    /// A full ring gives the event up and counts it.
    fn post_lossy(&mut self, v: u64) -> Result<Lossy, Refused> {
        match self.post(v) {
            Ok(()) => Ok(Lossy::Posted),
            Err(Refused::Full(_)) => {
                self.lost += 1;
                self.lost_total += 1;
                self.notify();
                Ok(Lossy::Lost)
            }
            Err(e) => Err(e),
        }
    }

    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            self.notify();
        }
    }

    /// A pending report comes first, except right after a report while
    /// events are ready.
    fn report_first(&self) -> bool {
        let events_first = self.last_was_report && !self.queue.is_empty();
        self.lost > 0 && !events_first
    }

    fn take_report(&mut self) -> Overflow {
        let o = Overflow { lost: self.lost };
        self.lost = 0;
        self.last_was_report = true;
        o
    }

    /// Any dequeue that is not a report (an event, `Empty`, `Closed`)
    /// ends a run of reports.
    fn try_dequeue(&mut self) -> Result<u64, TryDequeueError> {
        if self.report_first() {
            return Err(TryDequeueError::Overflow(self.take_report()));
        }
        self.last_was_report = false;
        match self.queue.pop_front() {
            Some(v) => Ok(v),
            None if self.closed => Err(TryDequeueError::Closed),
            None => Err(TryDequeueError::Empty),
        }
    }

    fn dequeue_batch(&mut self, max: usize) -> (Result<usize, TryDequeueError>, Vec<u64>) {
        if self.report_first() {
            return (Err(TryDequeueError::Overflow(self.take_report())), vec![]);
        }
        self.last_was_report = false;
        let n = max.min(self.queue.len());
        if n == 0 && self.closed {
            return (Err(TryDequeueError::Closed), vec![]);
        }
        (Ok(n), self.queue.drain(..n).collect())
    }

    /// A zero timeout: a `try_dequeue` that reports "nothing ready" as
    /// `Timeout`.
    fn dequeue_timeout_zero(&mut self) -> Result<u64, DequeueError> {
        match self.try_dequeue() {
            Ok(v) => Ok(v),
            Err(TryDequeueError::Overflow(o)) => Err(DequeueError::Overflow(o)),
            Err(TryDequeueError::Closed) => Err(DequeueError::Closed),
            Err(TryDequeueError::Empty) => Err(DequeueError::Timeout),
        }
    }

    /// Pending with events queued (nothing changes); on an empty ring,
    /// `Closed` once closed and every loss reported, else an arm, which
    /// clears *notified*.
    fn arm(&mut self) -> ArmStatus {
        if !self.queue.is_empty() {
            return ArmStatus::Pending;
        }
        if self.closed {
            // Every loss is reported before the end of stream.
            return if self.lost > 0 {
                ArmStatus::Pending
            } else {
                ArmStatus::Closed
            };
        }
        self.notified = false;
        if self.lost > 0 {
            // With only a report pending, the arm clears *notified*, finds
            // the report and takes itself back (`Consumer::arm`'s docs).
            return ArmStatus::Pending;
        }
        self.armed = true;
        ArmStatus::Armed
    }

    /// The wait ends without blocking: its threshold is met, a report is
    /// pending, or the EVD is closed (fewer than `threshold` left is final).
    fn wait_returns_at_once(&self, threshold: usize) -> bool {
        self.queue.len() >= threshold || self.lost > 0 || self.closed
    }

    /// THE RULE UNDER TEST. Nothing is dequeued; met comes first and leaves
    /// the report pending; then the report; then the end; then the timeout
    /// (only a zero-timeout wait gets there).
    fn wait(&mut self, threshold: usize) -> Result<usize, WaitError> {
        let ready = self.queue.len();
        if ready >= threshold {
            Ok(ready)
        } else if self.lost > 0 {
            Err(WaitError::Overflow(self.take_report()))
        } else if self.closed {
            Err(WaitError::Closed { available: ready })
        } else {
            Err(WaitError::Timeout { available: ready })
        }
    }
}

// ---------------------------------------------------------------------------
// Coverage: the situations the rule is about must come up.

#[derive(Default, Debug)]
struct Coverage {
    /// A wait found its threshold met with a report pending.
    met_with_report: u64,
    /// ... with a zero spin budget (where the back-off's first look is skipped).
    met_with_report_zero_budget: u64,
    /// A wait ended by a pending report.
    ended_by_report: u64,
    /// A wait ended by a closed EVD.
    ended_by_close: u64,
    /// A non-poll wait (`None` or one second).
    long_waits: u64,
    /// A poll (wait or `dequeue_timeout`) while armed.
    poll_while_armed: u64,
    /// A poll while *notified* was set.
    poll_while_notified: u64,
    /// A dequeue gave an event before a pending report (after a report).
    event_before_report: u64,
}

impl Coverage {
    fn note(&mut self, op: &Op, m: &Model, budget: Duration) {
        match *op {
            Op::Wait { threshold, timeout } => {
                if m.queue.len() >= threshold && m.lost > 0 {
                    self.met_with_report += 1;
                    if budget.is_zero() {
                        self.met_with_report_zero_budget += 1;
                    }
                } else if m.lost > 0 {
                    self.ended_by_report += 1;
                } else if m.closed {
                    self.ended_by_close += 1;
                }
                if timeout != Timeout::Zero {
                    self.long_waits += 1;
                } else {
                    self.poll(m);
                }
            }
            Op::DequeueTimeoutZero => self.poll(m),
            Op::TryDequeue | Op::DequeueBatch { .. } if m.lost > 0 && !m.report_first() => {
                self.event_before_report += 1;
            }
            _ => {}
        }
    }

    fn poll(&mut self, m: &Model) {
        self.poll_while_armed += u64::from(m.armed);
        self.poll_while_notified += u64::from(m.notified);
    }

    fn assert_all(&self) {
        let c = self;
        for (name, n) in [
            ("met_with_report", c.met_with_report),
            ("met_with_report_zero_budget", c.met_with_report_zero_budget),
            ("ended_by_report", c.ended_by_report),
            ("ended_by_close", c.ended_by_close),
            ("long_waits", c.long_waits),
            ("poll_while_armed", c.poll_while_armed),
            ("poll_while_notified", c.poll_while_notified),
            ("event_before_report", c.event_before_report),
        ] {
            assert!(n >= 20, "too little coverage of {name}: {c:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// A guard against hangs (not a timing assertion).

/// A wait the model says returns at once is made with no timeout; if the
/// code blocks there instead, the test would hang with no seed. This watch
/// aborts the process after [`hang_guard::LIMIT`] with the seed and the
/// operation. It never affects a run whose waits return.
mod hang_guard {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, Once};
    use std::time::{Duration, Instant};

    pub const LIMIT: Duration = Duration::from_secs(30);
    static WATCHED: Mutex<Vec<(u64, Instant, String)>> = Mutex::new(Vec::new());
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static START: Once = Once::new();

    pub struct Guard(u64);

    pub fn watch(what: String) -> Guard {
        START.call_once(|| {
            std::thread::spawn(|| {
                loop {
                    std::thread::park_timeout(Duration::from_secs(1));
                    let watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some((_, _, what)) = watched.iter().find(|(_, t, _)| t.elapsed() > LIMIT)
                    {
                        eprintln!(
                            "wait_rule: a wait the model says returns at once blocked for over \
                         {LIMIT:?}: {what}"
                        );
                        std::process::abort();
                    }
                }
            });
        });
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        WATCHED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, Instant::now(), what));
        Guard(id)
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            WATCHED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(id, _, _)| *id != self.0);
        }
    }
}

// ---------------------------------------------------------------------------
// One sequence.

struct Failure {
    seed: u64,
    /// One line.
    summary: String,
    /// With the history.
    full: String,
}

fn gen_op(rng: &mut Rng, m: &Model, budget: Duration, next_value: &mut u64) -> Op {
    let len = m.queue.len();
    let threshold = |rng: &mut Rng| {
        if len > 0 && rng.one_in(2) {
            1 + rng.below(len as u64) as usize
        } else {
            1 + rng.below(m.capacity as u64) as usize
        }
    };
    let mut value = || {
        *next_value += 1;
        *next_value
    };
    match rng.below(200) {
        0..=37 => Op::Post(value()),
        38..=75 => Op::PostLossy(value()),
        76..=99 => Op::TryDequeue,
        100..=113 => Op::DequeueBatch {
            max: 1 + rng.below(m.capacity as u64 + 1) as usize,
            prefix: rng.below(3) as usize,
        },
        114..=127 => Op::Arm,
        128..=133 => Op::Disarm,
        134..=161 => Op::Wait {
            threshold: threshold(rng),
            timeout: Timeout::Zero,
        },
        162..=181 => {
            let threshold = threshold(rng);
            // Only where the model says the wait cannot block, and never
            // with the budget that spins until events are ready.
            let timeout = if budget != Duration::MAX && m.wait_returns_at_once(threshold) {
                if rng.one_in(2) {
                    Timeout::Never
                } else {
                    Timeout::OneSecond
                }
            } else {
                Timeout::Zero
            };
            Op::Wait { threshold, timeout }
        }
        182..=193 => Op::DequeueTimeoutZero,
        194..=197 => Op::SetSpinBudget(pick_budget(rng)),
        // Close rarely: about one sequence in two closes at some point.
        _ if rng.one_in(3) => Op::Close,
        _ => Op::TryDequeue,
    }
}

fn run_sequence(seed: u64, cov: &mut Coverage) -> Result<(), Failure> {
    let mut rng = Rng::new(seed);
    let capacity = 1usize << rng.below(4);
    let mut budget = pick_budget(&mut rng);
    let ops = MIN_OPS + rng.below(EXTRA_OPS + 1);
    let (poster, mut consumer): (Poster<u64>, Consumer<u64>) = evd::bounded(capacity).unwrap();
    assert_eq!(consumer.capacity(), capacity);
    consumer.set_spin_budget(budget);
    let mut m = Model::new(capacity);
    let mut next_value = 0;
    let mut history = String::new();
    let start_budget = budget;
    for index in 0..ops {
        let op = gen_op(&mut rng, &m, budget, &mut next_value);
        cov.note(&op, &m, budget);
        let before = m.seen();
        // Where the docs leave *notified* open, the model takes the EVD's.
        let mut notified_open = false;
        let (expected, actual) = match op {
            Op::Post(v) => (
                Outcome::Post(m.post(v)),
                Outcome::Post(poster.post(v).map_err(refused)),
            ),
            Op::PostLossy(v) => (
                Outcome::PostLossy(m.post_lossy(v)),
                Outcome::PostLossy(poster.post_lossy(v).map_err(refused)),
            ),
            Op::TryDequeue => (
                Outcome::TryDequeue(m.try_dequeue()),
                Outcome::TryDequeue(consumer.try_dequeue()),
            ),
            Op::DequeueBatch { max, prefix } => {
                let (r, taken) = m.dequeue_batch(max);
                let mut out: Vec<u64> = (0..prefix as u64).map(|i| u64::MAX - i).collect();
                let got = consumer.dequeue_batch(&mut out, max);
                let kept = out.len() >= prefix
                    && out[..prefix]
                        .iter()
                        .enumerate()
                        .all(|(i, &v)| v == u64::MAX - i as u64);
                let appended = if kept {
                    out.split_off(prefix)
                } else {
                    // Shown as is: the prefix was not kept.
                    out
                };
                (
                    Outcome::DequeueBatch(r, taken),
                    Outcome::DequeueBatch(got, appended),
                )
            }
            Op::DequeueTimeoutZero => (
                Outcome::DequeueTimeout(m.dequeue_timeout_zero()),
                Outcome::DequeueTimeout(consumer.dequeue_timeout(Duration::ZERO)),
            ),
            Op::Arm => {
                let expected = m.arm();
                let got = consumer.arm();
                // A closed, drained EVD: whether that "arm on an empty
                // ring" clears *notified* is not said.
                notified_open = m.closed && m.queue.is_empty();
                (Outcome::Arm(expected), Outcome::Arm(got))
            }
            Op::Disarm => {
                m.armed = false;
                consumer.disarm();
                (Outcome::Done, Outcome::Done)
            }
            Op::Close => {
                m.close();
                poster.close();
                (Outcome::Done, Outcome::Done)
            }
            Op::Wait { threshold, timeout } => {
                let expected = m.wait(threshold);
                let got = if timeout == Timeout::Never {
                    let _guard = hang_guard::watch(format!(
                        "sequence seed {seed:#018x}, op #{index} {op:?} (capacity {capacity}, \
                         spin budget {budget:?}); rerun with EVD_WAIT_RULE_SEED={seed:#x}"
                    ));
                    consumer.wait(threshold, None)
                } else {
                    consumer.wait(threshold, timeout.get())
                };
                // A wait that may park arms for itself: what that does to
                // *notified* is not said. A poll leaves it as it was.
                notified_open = timeout != Timeout::Zero;
                (Outcome::Wait(expected), Outcome::Wait(got))
            }
            Op::SetSpinBudget(b) => {
                budget = b;
                consumer.set_spin_budget(b);
                (Outcome::Done, Outcome::Done)
            }
        };
        let now = seen(&consumer);
        if notified_open {
            m.notified = now.notified;
        }
        let _ = writeln!(
            history,
            "  #{index:<3} {op:?} -> {actual:?}   [len {}, armed {}, notified {}, \
             notifications {}, pending lost {}, last was report {}]",
            now.len, now.armed, now.notified, now.notifications, m.lost, m.last_was_report
        );
        let model_now = m.seen();
        let mismatch = if expected != actual {
            Some(format!("returned {actual:?}, the model says {expected:?}"))
        } else if now != model_now {
            // Name the fields that differ.
            let mut d = String::new();
            macro_rules! field {
                ($f:ident) => {
                    if now.$f != model_now.$f {
                        let _ = write!(
                            d,
                            "{}: {:?}, the model says {:?} (before the op: {:?}); ",
                            stringify!($f),
                            now.$f,
                            model_now.$f,
                            before.$f
                        );
                    }
                };
            }
            field!(len);
            field!(armed);
            field!(notified);
            field!(notifications);
            field!(closed);
            field!(lost);
            Some(format!("query() after it: {d}"))
        } else {
            None
        };
        if let Some(what) = mismatch {
            let summary = format!(
                "seed {seed:#018x} op #{index} {op:?} (capacity {capacity}, spin budget \
                 {budget:?}): {what}"
            );
            let full = format!(
                "wait_rule mismatch: sequence seed {seed:#018x}, op #{index} of {ops}\n\
                 capacity {capacity}, spin budget at the start {start_budget:?}, now \
                 {budget:?}\n{op:?}: {what}\nhistory (the state is the EVD's, after each \
                 op; pending lost and last-was-report are the model's):\n{history}\
                 rerun: EVD_WAIT_RULE_SEED={seed:#x} cargo test -p evd --release --test \
                 wait_rule"
            );
            return Err(Failure {
                seed,
                summary,
                full,
            });
        }
    }
    Ok(())
}

fn seed_override() -> Option<u64> {
    let s = std::env::var("EVD_WAIT_RULE_SEED").ok()?;
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("EVD_WAIT_RULE_SEED={s:?}: {e}")))
}

#[test]
fn wait_follows_its_threshold_rule_over_random_sequences_and_spin_budgets() {
    let override_seed = seed_override();
    let seeds: Vec<u64> = match override_seed {
        // The sequence itself, then the ones derived from it as a base.
        Some(s) => std::iter::once(s)
            .chain(derived(s, SEQUENCES_PER_SEED))
            .collect(),
        None => SEEDS
            .iter()
            .flat_map(|&b| derived(b, SEQUENCES_PER_SEED))
            .collect(),
    };
    let mut cov = Coverage::default();
    let mut failures = Vec::new();
    for &seed in &seeds {
        if let Err(f) = run_sequence(seed, &mut cov) {
            failures.push(f);
            if failures.len() >= MAX_FAILURES {
                break;
            }
        }
    }
    if let Some(first) = failures.first() {
        let mut msg = format!(
            "{}\n\n{} failing sequences (of {} run; stops at {MAX_FAILURES}):\n",
            first.full,
            failures.len(),
            seeds.len()
        );
        for f in &failures {
            let _ = writeln!(msg, "  {}", f.summary);
        }
        let _ = writeln!(
            msg,
            "first failing seed: {:#x}; all: {:x?}",
            first.seed,
            failures.iter().map(|f| f.seed).collect::<Vec<_>>()
        );
        panic!("\n{msg}");
    }
    eprintln!("wait_rule: {} sequences, coverage {cov:?}", seeds.len());
    if override_seed.is_none() {
        cov.assert_all();
    }
}

// ---------------------------------------------------------------------------
// The promises, one case each.

/// A closed and drained EVD: a wait, whatever its timeout, and a dequeue
/// both say so.
#[track_caller]
fn assert_drained_and_closed(consumer: &mut Consumer<u64>, timeout: Option<Duration>, ctx: &str) {
    assert_eq!(
        consumer.wait(1, timeout),
        Err(WaitError::Closed { available: 0 }),
        "{ctx}"
    );
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Closed),
        "{ctx}"
    );
}

/// Budgets under which a wait may be made with any timeout where it cannot
/// block (not `Duration::MAX`, which spins until events are ready).
const FINITE_BUDGETS: [Duration; 4] = [Duration::ZERO, ONE_NANO, ONE_MICRO, DEFAULT_SPIN_BUDGET];
const TIMEOUTS: [Option<Duration>; 3] = [Some(Duration::ZERO), None, Some(Duration::from_secs(1))];

/// Runs `case` for each of [`FINITE_BUDGETS`] and [`TIMEOUTS`], with a
/// context naming both for its failure messages.
fn for_budgets_and_timeouts(mut case: impl FnMut(Duration, Option<Duration>, &str)) {
    for budget in FINITE_BUDGETS {
        for timeout in TIMEOUTS {
            case(
                budget,
                timeout,
                &format!("spin budget {budget:?}, timeout {timeout:?}"),
            );
        }
    }
}

#[test]
fn a_wait_that_finds_its_threshold_met_leaves_the_report_to_the_next_dequeue() {
    for_budgets_and_timeouts(|budget, timeout, ctx| {
        let (poster, mut consumer) = evd::bounded::<u64>(4).unwrap();
        consumer.set_spin_budget(budget);
        for v in 0..4 {
            poster.post(v).unwrap();
        }
        assert_eq!(poster.post_lossy(4), Ok(Lossy::Lost), "{ctx}");
        assert_eq!(consumer.wait(1, timeout), Ok(4), "{ctx}");
        assert_eq!(consumer.wait(4, timeout), Ok(4), "{ctx}");
        assert_eq!(consumer.query().len, 4, "nothing dequeued: {ctx}");
        assert_eq!(
            consumer.try_dequeue(),
            Err(TryDequeueError::Overflow(Overflow { lost: 1 })),
            "the report is still pending: {ctx}"
        );
        assert_eq!(consumer.try_dequeue(), Ok(0), "{ctx}");

        // One slot, one event and a loss.
        let (poster, mut consumer) = evd::bounded::<u64>(1).unwrap();
        consumer.set_spin_budget(budget);
        poster.post(7).unwrap();
        assert_eq!(poster.post_lossy(8), Ok(Lossy::Lost), "{ctx}");
        assert_eq!(consumer.wait(1, timeout), Ok(1), "{ctx}");
        assert_report_in(&mut consumer, 1, ctx);
        assert_eq!(consumer.try_dequeue(), Ok(7), "{ctx}");
    });
}

#[test]
fn a_zero_timeout_wait_leaves_an_arm_in_place() {
    for budget in BUDGETS {
        let ctx = format!("spin budget {budget:?}");
        let (poster, mut consumer) = evd::bounded::<u64>(4).unwrap();
        consumer.set_spin_budget(budget);
        assert_eq!(consumer.arm(), ArmStatus::Armed, "{ctx}");
        for threshold in 1..=4 {
            assert_eq!(
                consumer.wait(threshold, Some(Duration::ZERO)),
                Err(WaitError::Timeout { available: 0 }),
                "{ctx}"
            );
            assert!(consumer.query().armed, "wait({threshold}, ZERO): {ctx}");
        }
        assert_eq!(
            consumer.dequeue_timeout(Duration::ZERO),
            Err(DequeueError::Timeout),
            "{ctx}"
        );
        assert!(consumer.query().armed, "dequeue_timeout(ZERO): {ctx}");
        // The arm is still the caller's: the next post notifies it.
        poster.post(1).unwrap();
        let q = consumer.query();
        assert!(
            !q.armed && q.notified && q.notifications == 1,
            "{ctx}: {q:?}"
        );
        // And a poll leaves the sticky notified bit as it was.
        assert_eq!(consumer.try_dequeue(), Ok(1), "{ctx}");
        assert_eq!(
            consumer.wait(1, Some(Duration::ZERO)),
            Err(WaitError::Timeout { available: 0 }),
            "{ctx}"
        );
        assert_eq!(
            consumer.dequeue_timeout(Duration::ZERO),
            Err(DequeueError::Timeout),
            "{ctx}"
        );
        let q = consumer.query();
        assert!(!q.armed && q.notified, "{ctx}: {q:?}");
    }
}

#[test]
fn a_pending_report_ends_a_wait_that_would_otherwise_block_and_comes_before_its_end() {
    for_budgets_and_timeouts(|budget, timeout, ctx| {
        let (poster, mut consumer) = evd::bounded::<u64>(2).unwrap();
        consumer.set_spin_budget(budget);
        poster.post(0).unwrap();
        poster.post(1).unwrap();
        lose_twice_around_a_report(&poster, &mut consumer, [2, 3], 0, ctx);
        // One ready, a report pending: a wait for two would block.
        assert_eq!(
            consumer.wait(2, timeout),
            Err(WaitError::Overflow(Overflow { lost: 1 })),
            "{ctx}"
        );
        assert_eq!(
            consumer.wait(2, Some(Duration::ZERO)),
            Err(WaitError::Timeout { available: 1 }),
            "reported once: {ctx}"
        );
        assert_eq!(consumer.wait(1, timeout), Ok(1), "{ctx}");
        assert_eq!(consumer.try_dequeue(), Ok(1), "{ctx}");

        // Closed with two left and a report pending: met, the report stays.
        poster.post(4).unwrap();
        poster.post(5).unwrap();
        assert_eq!(poster.post_lossy(6), Ok(Lossy::Lost), "{ctx}");
        poster.close();
        assert_eq!(consumer.wait(2, timeout), Ok(2), "{ctx}");
        assert_report_in(&mut consumer, 1, ctx);
        assert_eq!(consumer.try_dequeue(), Ok(4), "{ctx}");
        // One left: a wait for two can never be met.
        assert_eq!(
            consumer.wait(2, timeout),
            Err(WaitError::Closed { available: 1 }),
            "{ctx}"
        );
        assert_eq!(consumer.try_dequeue(), Ok(5), "{ctx}");
        assert_drained_and_closed(&mut consumer, timeout, ctx);

        // Closed and drained with a report pending: the report, then the end.
        let (poster, mut consumer) = evd::bounded::<u64>(1).unwrap();
        consumer.set_spin_budget(budget);
        poster.post(0).unwrap();
        lose_twice_around_a_report(&poster, &mut consumer, [1, 2], 0, ctx);
        poster.close();
        assert_eq!(
            consumer.wait(1, timeout),
            Err(WaitError::Overflow(Overflow { lost: 1 })),
            "{ctx}"
        );
        assert_drained_and_closed(&mut consumer, timeout, ctx);
    });
}
