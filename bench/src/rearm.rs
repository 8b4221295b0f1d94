//! Re-arm cost: evd's one-CAS arm against the classic "arm, then poll again"
//! (verbs' `ibv_req_notify_cq` then `ibv_poll_cq`, UCX's and libfabric's
//! arm-then-progress), emulated on the same evd ring so that only the extra
//! poll differs, and against the floor of any arm: one bare uncontended CAS.
//!
//! Each iteration re-arms an empty, armed ring; evd's arm is idempotent there
//! and runs exactly the code of a first arm on an empty ring (load the head,
//! find the head slot unpublished and the tail it last saw behind the head,
//! load the word, compute the armed word, CAS it in). No iteration disarms:
//! the CAS installs the word it found, and succeeds. The floor's loop has
//! the same shape and the same RMW: a `Relaxed` load of an `AtomicU64` on
//! its own cache line, which no other thread touches, then one
//! `compare_exchange` (`AcqRel`, as evd's arm) that installs the word with
//! its "armed" bit set (the word it found, after the first iteration), and
//! succeeds.
//!
//! The instruction count comes from valgrind's callgrind: the binary's
//! `rearm-insns` mode runs N re-arms of one kind single-threaded, and two
//! runs with different N give the instructions of one re-arm by difference
//! (start-up and teardown cancel out exactly; callgrind's count is
//! deterministic).

use crate::report::{Role, System};
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
    /// Classic: `arm()`, then one more `try_dequeue()` to catch an event that
    /// landed between the last poll and the arm.
    ArmThenPoll,
    /// Floor: a load and one `compare_exchange` that succeeds, on an
    /// `AtomicU64` no other thread touches: what any one-CAS arm costs.
    CasFloor,
}

/// Every kind is compared with evd's arm; in ns, the re-arms have the bare
/// CAS as their floor.
impl System for RearmKind {
    fn name(self) -> &'static str {
        match self {
            RearmKind::EvdArm => "evd arm (one CAS)",
            RearmKind::ArmThenPoll => "arm, then poll again",
            RearmKind::CasFloor => "floor: one uncontended CAS",
        }
    }

    fn role(self) -> Role {
        match self {
            RearmKind::EvdArm => Role::Evd,
            RearmKind::ArmThenPoll => Role::Peer,
            RearmKind::CasFloor => Role::Floor,
        }
    }

    fn baseline(self) -> Option<RearmKind> {
        Some(RearmKind::EvdArm)
    }

    fn floor(self) -> Option<RearmKind> {
        (!self.is_floor()).then_some(RearmKind::CasFloor)
    }
}

impl RearmKind {
    /// Every kind, evd first, the floor last.
    pub const ALL: [RearmKind; 3] = [
        RearmKind::EvdArm,
        RearmKind::ArmThenPoll,
        RearmKind::CasFloor,
    ];

    /// The kinds whose instructions `compare` counts with callgrind (the
    /// floor is one CAS by construction).
    pub const COUNTED: [RearmKind; 2] = [RearmKind::EvdArm, RearmKind::ArmThenPoll];

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

    /// Run `iters` re-arms on an empty ring (single-threaded).
    pub fn run(self, rearm: &mut Rearm, iters: u64) {
        rearm.run(self, iters)
    }
}

/// An empty evd ring to re-arm (its poster is kept alive so it stays open),
/// and the floor's word, on its own cache line.
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

    /// Run `iters` re-arms of `kind`. Results go through `black_box` rather
    /// than checks inside the loop, so every kind pays only for its calls;
    /// the ring is checked once afterwards (armed and empty, hence every arm
    /// armed and every extra poll found nothing), the floor's word too (its
    /// bit set: the CAS, single-threaded, cannot fail).
    pub fn run(&mut self, kind: RearmKind, iters: u64) {
        let c = &mut self.consumer;
        match kind {
            RearmKind::CasFloor => {
                let word: &AtomicU64 = &self.word;
                for _ in 0..iters {
                    let _ = black_box(bare_cas(black_box(word)));
                }
                assert!(
                    iters == 0 || word.load(Ordering::Relaxed) == ARMED,
                    "the floor's CAS must succeed"
                );
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

/// The bit the floor's CAS sets.
const ARMED: u64 = 1;

/// The floor's re-arm: load the word, compute the armed word, CAS it in
/// (`AcqRel` on success, `Relaxed` on failure, as evd's arm).
#[inline(always)]
fn bare_cas(word: &AtomicU64) -> Result<u64, u64> {
    let w = word.load(Ordering::Relaxed);
    word.compare_exchange(w, w | ARMED, Ordering::AcqRel, Ordering::Relaxed)
}

/// The iteration counts of the two callgrind runs.
pub const INSN_RUNS: (u64, u64) = (1_000, 101_000);

/// Instructions of one re-arm of `kind`, counted by callgrind on `exe`'s
/// `rearm-insns` mode; `Err` if valgrind is missing or fails.
pub fn count_instructions(exe: &Path, kind: RearmKind) -> Result<f64, String> {
    count_mode(exe, &["rearm-insns", "--kind", kind.cli_name()])
}

/// Instructions of one iteration of `exe`'s mode `mode` (its arguments but
/// `--iters N`), counted by callgrind: the two runs of [`INSN_RUNS`], by
/// difference. The two runs go side by side (callgrind counts the
/// instructions of its own process, whatever else runs); `Err` if valgrind
/// is missing or fails.
pub fn count_mode(exe: &Path, mode: &[&str]) -> Result<f64, String> {
    let (n1, n2) = INSN_RUNS;
    let first = callgrind_start(exe, mode, n1)?;
    let second = match callgrind_start(exe, mode, n2) {
        Ok(c) => c,
        Err(e) => {
            let mut first = first;
            let _ = first.kill();
            let _ = first.wait();
            return Err(e);
        }
    };
    let i1 = callgrind_total(first);
    let i2 = callgrind_total(second);
    per_iteration(i1?, i2?, n2 - n1)
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
    if !out.status.success() {
        return Err(format!(
            "valgrind exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    parse_collected(&String::from_utf8_lossy(&out.stderr))
        .ok_or_else(|| "no `Collected :` line in callgrind's output".to_string())
}

/// The instruction count in callgrind's summary (`==PID== Collected : N`).
pub fn parse_collected(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|l| {
        let rest = l.split_once("Collected :")?.1;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_leaves_the_ring_armed_and_empty() {
        let mut r = Rearm::new();
        r.run(RearmKind::CasFloor, 100);
        assert_eq!(r.word.load(Ordering::Relaxed), ARMED);
        assert!(!r.consumer.query().armed, "the floor leaves the ring alone");
        for k in RearmKind::ALL {
            r.run(k, 100);
            let q = r.consumer.query();
            assert!(q.armed);
            assert_eq!(q.len, 0);
        }
    }
}
