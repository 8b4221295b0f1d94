//! Re-arm cost: evd's one-CAS arm against the classic "arm, then poll again" (verbs'
//! `ibv_req_notify_cq` then `ibv_poll_cq`), emulated on the same evd ring so that only the extra
//! poll differs, and against one bare uncontended CAS, the floor of any arm; in ns, and in
//! instructions counted by callgrind on this binary's `rearm-insns` mode. How the loops are built:
//! bench/README.md.

use crate::report::{Role, Row};
use crossbeam_utils::CachePadded;
use std::hint::black_box;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A way to re-enable notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RearmKind {
    /// evd: one `arm()`; `Pending` tells the caller to drain again.
    EvdArm,
    /// Classic: `arm()`, then one more `try_dequeue()` to catch an event that landed between the
    /// last poll and the arm.
    ArmThenPoll,
    /// Floor: a load and one `compare_exchange` that succeeds, on an `AtomicU64` no other thread
    /// touches: what any one-CAS arm costs.
    CasFloor,
}

impl RearmKind {
    /// Every kind, evd first, the floor last.
    pub const ALL: [RearmKind; 3] = [
        RearmKind::EvdArm,
        RearmKind::ArmThenPoll,
        RearmKind::CasFloor,
    ];

    /// The kinds whose instructions `compare` counts (the floor is one CAS by construction).
    pub const COUNTED: [RearmKind; 2] = [RearmKind::EvdArm, RearmKind::ArmThenPoll];

    /// Its row: compared with evd's arm; the re-arms' floor is the bare CAS (in ns only).
    pub fn row(self) -> Row {
        let (name, role) = match self {
            RearmKind::EvdArm => ("evd arm (one CAS)", Role::Evd),
            RearmKind::ArmThenPoll => ("arm, then poll again", Role::Peer),
            RearmKind::CasFloor => ("floor: one uncontended CAS", Role::Floor),
        };
        let floor = (role != Role::Floor).then_some("floor: one uncontended CAS");
        Row::new(
            name,
            role,
            "single-thread",
            Some("evd arm (one CAS)"),
            floor,
        )
    }

    /// The `--kind` value of the `rearm-insns` mode.
    pub fn cli_name(self) -> &'static str {
        match self {
            RearmKind::EvdArm => "evd",
            RearmKind::ArmThenPoll => "arm-then-poll",
            RearmKind::CasFloor => "cas-floor",
        }
    }

    /// Parse a `--kind` value.
    pub fn from_cli(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.cli_name() == s)
    }
}

/// An empty evd ring to re-arm (its poster is kept alive so it stays open), and the floor's word,
/// on its own cache line.
pub struct Rearm {
    _poster: evd::Poster<u64>,
    consumer: evd::Consumer<u64>,
    word: CachePadded<AtomicU64>,
}

impl Default for Rearm {
    fn default() -> Self {
        Self::new()
    }
}

/// The bit the floor's CAS sets.
const ARMED: u64 = 1;

impl Rearm {
    /// A fresh ring of capacity 1024.
    pub fn new() -> Self {
        let (poster, consumer) = evd::bounded(1024).expect("capacity 1024 is valid");
        Rearm {
            _poster: poster,
            consumer,
            word: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Run `iters` re-arms of `kind`. Results go through `black_box` rather than checks inside the
    /// loop, so every kind pays only for its calls; the ring is checked once afterwards (armed and
    /// empty: every arm armed, every extra poll found nothing), the floor's word too.
    pub fn run(&mut self, kind: RearmKind, iters: u64) {
        let c = &mut self.consumer;
        match kind {
            RearmKind::CasFloor => {
                let word: &AtomicU64 = &self.word;
                for _ in 0..iters {
                    let word = black_box(word);
                    let w = word.load(Ordering::Relaxed);
                    // AcqRel on success, Relaxed on failure, as evd's arm.
                    let cas =
                        word.compare_exchange(w, w | ARMED, Ordering::AcqRel, Ordering::Relaxed);
                    let _ = black_box(cas);
                }
                let armed = word.load(Ordering::Relaxed) == ARMED;
                assert!(iters == 0 || armed, "the floor's CAS must succeed");
                return;
            }
            RearmKind::EvdArm => {
                for _ in 0..iters {
                    let _ = black_box(black_box(&mut *c).arm());
                }
            }
            RearmKind::ArmThenPoll => {
                for _ in 0..iters {
                    let _ = black_box(black_box(&mut *c).arm());
                    let _ = black_box(black_box(&mut *c).try_dequeue());
                }
            }
        }
        let q = c.query();
        assert!(
            iters == 0 || (q.armed && q.len == 0 && !q.closed),
            "the re-arm loop must run on an empty, open, armed ring"
        );
    }

    /// Nanoseconds per re-arm over `iters` re-arms.
    pub fn time_ns(&mut self, kind: RearmKind, iters: u64) -> f64 {
        let start = Instant::now();
        self.run(kind, iters);
        start.elapsed().as_nanos() as f64 / iters.max(1) as f64
    }
}

/// The iteration counts of the two callgrind runs.
pub const INSN_RUNS: (u64, u64) = (1_000, 101_000);

/// Instructions of one iteration of `exe`'s mode `mode` (its arguments but `--iters N`), counted by
/// callgrind: the two runs of [`INSN_RUNS`], side by side (callgrind counts its own process's
/// instructions, whatever else runs), by difference, so start-up and teardown cancel out. `Err` if
/// valgrind is missing or fails.
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
