//! The side-by-side comparison behind `evd-bench compare`: every system,
//! every case, interleaved round-robin within one run so that drift on a
//! noisy machine hits all systems alike, inside a fixed time budget.

use crate::latency::WakeSystem;
use crate::payload::Event64;
use crate::rearm::{count_instructions, Rearm, RearmKind};
use crate::report::{self, Machine, Measurement, Report};
use crate::throughput::Queue;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Wall time of the two callgrind runs that count one re-arm kind.
const CALLGRIND_ESTIMATE: Duration = Duration::from_secs(2);

/// The payloads of the throughput cases.
pub const PAYLOADS: [&str; 2] = ["u64", "event64"];
/// The poster counts of the throughput cases.
pub const POSTERS: [usize; 3] = [1, 2, 4];

/// How much of everything to run, and within what time.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `--quick`.
    pub quick: bool,
    /// Hard upper bound of the whole run; sections stop adding rounds before it.
    pub budget: Duration,
    /// Share of the budget each section may use: throughput, latency, re-arm timing.
    pub shares: [f64; 3],
    /// Interleaved throughput rounds (after one calibration round).
    pub throughput_rounds: usize,
    /// Events moved by each calibration run.
    pub calibration_messages: u64,
    /// Target wall time of one measured throughput run.
    pub throughput_run: Duration,
    /// Interleaved wake-latency rounds.
    pub latency_rounds: usize,
    /// Wakes measured per system and round.
    pub latency_samples: u64,
    /// Interleaved re-arm timing rounds.
    pub rearm_rounds: usize,
    /// Re-arms per timing round.
    pub rearm_iters: u64,
    /// Count re-arm instructions with callgrind, if valgrind is installed.
    pub callgrind: bool,
}

impl Plan {
    /// The full comparison: at most 60 s.
    pub fn full() -> Self {
        Plan {
            quick: false,
            budget: Duration::from_secs(56),
            shares: [0.62, 0.25, 0.03],
            throughput_rounds: 7,
            calibration_messages: 40_000,
            throughput_run: Duration::from_millis(40),
            latency_rounds: 5,
            latency_samples: 1_500,
            rearm_rounds: 7,
            rearm_iters: 2_000_000,
            callgrind: true,
        }
    }

    /// `--quick`: at most 15 s.
    pub fn quick() -> Self {
        Plan {
            quick: true,
            budget: Duration::from_secs(14),
            shares: [0.45, 0.22, 0.03],
            throughput_rounds: 3,
            calibration_messages: 10_000,
            throughput_run: Duration::from_millis(18),
            latency_rounds: 3,
            latency_samples: 400,
            rearm_rounds: 3,
            rearm_iters: 1_000_000,
            callgrind: true,
        }
    }

    fn steps(&self) -> u64 {
        let tp = (PAYLOADS.len() * POSTERS.len() * Queue::ALL.len()) as u64
            * (1 + self.throughput_rounds as u64);
        let lat = (self.latency_rounds * WakeSystem::ALL.len()) as u64;
        let re = (self.rearm_rounds * RearmKind::ALL.len()) as u64;
        let cg = if self.callgrind { 2 } else { 0 };
        tp + lat + re + cg
    }
}

/// The case name of a throughput case.
pub fn throughput_case(payload: &str, posters: usize) -> String {
    format!("throughput/{payload}/{posters}p")
}

fn run_throughput(
    q: Queue,
    payload: &str,
    posters: usize,
    messages: u64,
) -> Result<Duration, String> {
    match payload {
        "u64" => q.run::<u64>(posters, messages),
        _ => q.run::<Event64>(posters, messages),
    }
}

/// Collected rounds, kept in first-seen order.
#[derive(Default)]
struct Collector {
    measurements: Vec<Measurement>,
}

impl Collector {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        case: &str,
        system: &str,
        consumer: &str,
        metric: &str,
        unit: &str,
        higher_is_better: bool,
        baseline: &str,
        value: f64,
    ) {
        if let Some(m) = self
            .measurements
            .iter_mut()
            .find(|m| m.case == case && m.system == system && m.metric == metric)
        {
            m.rounds.push(value);
            return;
        }
        self.measurements.push(Measurement {
            case: case.into(),
            system: system.into(),
            consumer: consumer.into(),
            metric: metric.into(),
            unit: unit.into(),
            higher_is_better,
            baseline: baseline.into(),
            rounds: vec![value],
        });
    }
}

/// Stops a section from starting a round that would not end within its share.
struct SectionClock {
    start: Instant,
    share: Duration,
    last_round: Duration,
}

impl SectionClock {
    fn new(share: Duration) -> Self {
        SectionClock {
            start: Instant::now(),
            share,
            last_round: Duration::ZERO,
        }
    }

    fn may_start_round(&self, round: usize) -> bool {
        round == 0 || self.start.elapsed() + self.last_round <= self.share
    }

    fn round_done(&mut self, round_start: Instant) {
        self.last_round = round_start.elapsed();
    }
}

/// Run the comparison. `exe` is this binary, for the callgrind runs.
pub fn compare(plan: &Plan, command: &str, exe: Option<&Path>, progress: bool) -> Report {
    let machine = Machine::detect();
    let started = Instant::now();
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let pb = if progress {
        ProgressBar::new(plan.steps())
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template("{elapsed:>3} [{bar:40}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut c = Collector::default();
    let mut notes = Vec::new();
    let share = |i: usize| plan.budget.mul_f64(plan.shares[i]);

    throughput_section(plan, share(0), &pb, &mut c, &mut notes);
    latency_section(plan, share(1), &pb, &mut c, &mut notes);
    rearm_section(plan, share(2), &pb, &mut c);
    if plan.callgrind {
        callgrind_section(plan, started, exe, &pb, &mut c, &mut notes);
    }
    pb.finish_and_clear();

    let records = report::records_from(c.measurements);
    let targets = report::targets(&records);
    Report {
        schema: report::SCHEMA.into(),
        command: command.into(),
        quick: plan.quick,
        started_unix_s,
        duration_s: started.elapsed().as_secs_f64(),
        machine,
        records,
        targets,
        notes,
    }
}

fn throughput_section(
    plan: &Plan,
    share: Duration,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
) {
    let cases: Vec<(&str, usize)> = PAYLOADS
        .iter()
        .flat_map(|p| POSTERS.iter().map(move |n| (*p, *n)))
        .collect();
    // Calibration (also the warm-up): how many events make one run last
    // `throughput_run` for this system and case.
    let mut sizes = Vec::new();
    for &(payload, posters) in &cases {
        for q in Queue::ALL {
            pb.set_message(format!(
                "calibrating {} {}",
                q.name(),
                throughput_case(payload, posters)
            ));
            let n = plan.calibration_messages;
            match run_throughput(q, payload, posters, n) {
                Ok(d) => {
                    let rate = n as f64 / d.as_secs_f64().max(1e-9);
                    let msgs =
                        (rate * plan.throughput_run.as_secs_f64()).clamp(5_000.0, 200_000_000.0);
                    sizes.push(((payload, posters, q), msgs as u64));
                }
                Err(e) => notes.push(format!(
                    "{} {}: calibration failed: {e}",
                    q.name(),
                    throughput_case(payload, posters)
                )),
            }
            pb.inc(1);
        }
    }
    let mut clock = SectionClock::new(share);
    let mut rounds_run = 0;
    for round in 0..plan.throughput_rounds {
        if !clock.may_start_round(round) {
            break;
        }
        let round_start = Instant::now();
        // Rotate the order every round so no system always runs first.
        let k = sizes.len();
        for i in 0..k {
            let ((payload, posters, q), msgs) = sizes[(i + round * 7) % k];
            let case = throughput_case(payload, posters);
            pb.set_message(format!("round {} {} {}", round + 1, q.name(), case));
            match run_throughput(q, payload, posters, msgs) {
                Ok(d) => c.push(
                    &case,
                    q.name(),
                    q.style().label(),
                    "ops_per_sec",
                    "ops/s",
                    true,
                    Queue::evd_baseline(q.style()).name(),
                    msgs as f64 / d.as_secs_f64().max(1e-9),
                ),
                Err(e) => notes.push(format!("{} {case} round {}: {e}", q.name(), round + 1)),
            }
            pb.inc(1);
        }
        clock.round_done(round_start);
        rounds_run += 1;
    }
    skipped(
        pb,
        notes,
        "throughput",
        rounds_run,
        plan.throughput_rounds,
        sizes.len(),
    );
    order_throughput(c);
}

/// Keep the table in case order then system order, whatever order the
/// rotated rounds first met them in.
fn order_throughput(c: &mut Collector) {
    let case_rank = |case: &str| {
        PAYLOADS
            .iter()
            .flat_map(|p| POSTERS.iter().map(move |n| throughput_case(p, *n)))
            .position(|x| x == case)
            .unwrap_or(usize::MAX)
    };
    let sys_rank = |s: &str| {
        Queue::ALL
            .iter()
            .position(|q| q.name() == s)
            .unwrap_or(usize::MAX)
    };
    c.measurements
        .sort_by_key(|m| (case_rank(&m.case), sys_rank(&m.system)));
}

fn skipped(
    pb: &ProgressBar,
    notes: &mut Vec<String>,
    what: &str,
    ran: usize,
    planned: usize,
    per_round: usize,
) {
    if ran < planned {
        notes.push(format!(
            "{what}: {ran} of {planned} rounds fitted in the time budget"
        ));
        pb.inc(((planned - ran) * per_round) as u64);
    }
}

fn latency_section(
    plan: &Plan,
    share: Duration,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
) {
    let mut clock = SectionClock::new(share);
    let mut rounds_run = 0;
    let systems = WakeSystem::ALL;
    for round in 0..plan.latency_rounds {
        if !clock.may_start_round(round) {
            break;
        }
        let round_start = Instant::now();
        for i in 0..systems.len() {
            let sys = systems[(i + round) % systems.len()];
            pb.set_message(format!("round {} wake latency {}", round + 1, sys.name()));
            match sys.measure(plan.latency_samples) {
                Ok(h) => {
                    for (metric, q) in [
                        ("latency_p50_ns", 0.50),
                        ("latency_p99_ns", 0.99),
                        ("latency_p999_ns", 0.999),
                    ] {
                        c.push(
                            "wake-latency",
                            sys.name(),
                            sys.consumer(),
                            metric,
                            "ns",
                            false,
                            WakeSystem::BASELINE.name(),
                            h.value_at_quantile(q) as f64,
                        );
                    }
                }
                Err(e) => notes.push(format!(
                    "wake latency {} round {}: {e}",
                    sys.name(),
                    round + 1
                )),
            }
            pb.inc(1);
        }
        clock.round_done(round_start);
        rounds_run += 1;
    }
    skipped(
        pb,
        notes,
        "wake latency",
        rounds_run,
        plan.latency_rounds,
        systems.len(),
    );
    // Round 0 starts with the first system and pushes p50, p99, p99.9 in
    // that order, so first-seen order is already the table order.
}

fn rearm_section(plan: &Plan, share: Duration, pb: &ProgressBar, c: &mut Collector) {
    let mut r = Rearm::new();
    for k in RearmKind::ALL {
        r.run(k, plan.rearm_iters / 4); // warm-up
    }
    let mut clock = SectionClock::new(share);
    for round in 0..plan.rearm_rounds {
        if !clock.may_start_round(round) {
            pb.inc(((plan.rearm_rounds - round) * RearmKind::ALL.len()) as u64);
            break;
        }
        let round_start = Instant::now();
        for i in 0..RearmKind::ALL.len() {
            let k = RearmKind::ALL[(i + round) % RearmKind::ALL.len()];
            pb.set_message(format!("round {} re-arm {}", round + 1, k.name()));
            let ns = r.time_ns(k, plan.rearm_iters);
            c.push(
                "rearm",
                k.name(),
                "single-thread",
                "ns_per_rearm",
                "ns",
                false,
                RearmKind::EvdArm.name(),
                ns,
            );
            pb.inc(1);
        }
        clock.round_done(round_start);
    }
}

fn callgrind_section(
    plan: &Plan,
    started: Instant,
    exe: Option<&Path>,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
) {
    let Some(exe) = exe else {
        notes.push("re-arm instructions: no path to this binary, callgrind skipped".into());
        pb.inc(2);
        return;
    };
    for k in RearmKind::ALL {
        pb.set_message(format!("callgrind {}", k.name()));
        if started.elapsed() + CALLGRIND_ESTIMATE > plan.budget {
            notes.push("re-arm instructions: out of time budget, callgrind skipped".into());
            pb.inc(1);
            continue;
        }
        match count_instructions(exe, k) {
            Ok(insns) => c.push(
                "rearm",
                k.name(),
                "single-thread",
                "instructions_per_rearm",
                "instructions",
                false,
                RearmKind::EvdArm.name(),
                insns,
            ),
            Err(e) => notes.push(format!("re-arm instructions of {}: {e}", k.name())),
        }
        pb.inc(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_plan_is_smaller_than_full_and_within_15_s() {
        let (q, f) = (Plan::quick(), Plan::full());
        assert!(q.budget <= Duration::from_secs(15));
        assert!(f.budget <= Duration::from_secs(60));
        assert!(q.steps() < f.steps());
        for p in [&q, &f] {
            assert!(p.shares.iter().sum::<f64>() < 1.0);
        }
    }

    #[test]
    fn section_clock_always_allows_a_first_round() {
        let clock = SectionClock::new(Duration::ZERO);
        assert!(clock.may_start_round(0));
        assert!(!clock.may_start_round(1) || clock.start.elapsed() == Duration::ZERO);
    }

    #[test]
    fn collector_groups_rounds_by_case_system_and_metric() {
        let mut c = Collector::default();
        for v in [1.0, 2.0] {
            c.push("a", "s", "busy", "m", "ops/s", true, "s", v);
        }
        c.push("a", "s", "busy", "m2", "ops/s", true, "s", 3.0);
        assert_eq!(c.measurements.len(), 2);
        assert_eq!(c.measurements[0].rounds, [1.0, 2.0]);
    }
}
