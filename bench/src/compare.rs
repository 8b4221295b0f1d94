//! The side-by-side comparison behind `evd-bench compare`: every system of every section,
//! interleaved round-robin within one run so that drift on a noisy machine hits all systems alike,
//! inside a fixed time budget.

use crate::cno::{self, CnoSystem, Feed, Variant};
use crate::latency::{Latency, Sampled};
use crate::payload::Event64;
use crate::report::{self, Diagnostics, Machine, Record, Report};
use crate::room::{self, Work, room_case};
use crate::single::{CNO_INSNS, Loop, PAIR, REARM, Rings, count_mode};
use crate::throughput::{POSTER_POLICY, Queue, RunStats};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Wall time of the two callgrind runs (side by side) that count one kind.
const CALLGRIND_ESTIMATE: Duration = Duration::from_secs(2);

/// The payloads of the throughput cases.
pub const PAYLOADS: [&str; 2] = ["u64", "event64"];
/// The poster counts of the throughput cases.
pub const POSTERS: [usize; 3] = [1, 2, 4];

/// One section's part of a [`Plan`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share {
    /// Seconds of the budget it may use; what it leaves goes to the next.
    pub seconds: f64,
    /// Interleaved rounds, after one calibration or warm-up round.
    pub rounds: usize,
    /// Events per calibration run (moving sections), samples per system and round (latencies;
    /// ping-pong after its unrecorded warm-up) or iterations per round (re-arm, pair).
    pub size: u64,
    /// Target wall time of one measured run (moving sections) or the timed length of one
    /// trigger-cost measurement, after a warm-up of a quarter of it; zero elsewhere.
    pub run: Duration,
}

const fn share(seconds: f64, rounds: usize, size: u64, run_ms: u64) -> Share {
    let run = Duration::from_millis(run_ms);
    Share {
        seconds,
        rounds,
        size,
        run,
    }
}

/// How much of everything to run, and within what time.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `--quick`.
    pub quick: bool,
    /// Hard upper bound of the whole run; what the sections leave is for callgrind.
    pub budget: Duration,
    /// The sections' shares, in run order: throughput, room throughput, wake latency, room-wake
    /// latency, re-arm timing, single-thread pairs, busy ping-pong, CNO wake latency, CNO trigger
    /// cost, CNO throughput.
    pub sections: [Share; 10],
    /// Count instructions with callgrind, if valgrind is installed.
    pub callgrind: bool,
}

impl Plan {
    /// The full comparison: at most 70 s.
    pub fn full() -> Self {
        Plan {
            quick: false,
            budget: Duration::from_secs(68),
            sections: [
                share(30.0, 7, 40_000, 35),
                share(7.8, 7, 8_000, 25),
                share(5.6, 5, 1_500, 0),
                share(2.8, 5, 1_500, 0),
                share(1.7, 7, 2_000_000, 0),
                share(1.7, 7, 1_000_000, 0),
                share(2.0, 7, 40_000, 0),
                share(1.5, 5, 1_500, 0),
                share(3.5, 7, 0, 10),
                share(3.5, 7, 40_000, 25),
            ],
            callgrind: true,
        }
    }

    /// `--quick`: at most 20 s.
    pub fn quick() -> Self {
        Plan {
            quick: true,
            budget: Duration::from_millis(18_500),
            sections: [
                share(5.6, 3, 10_000, 12),
                share(1.7, 3, 3_000, 8),
                share(2.0, 3, 400, 0),
                share(0.85, 3, 400, 0),
                share(0.3, 3, 1_000_000, 0),
                share(0.3, 3, 500_000, 0),
                share(0.5, 3, 10_000, 0),
                share(0.7, 3, 400, 0),
                share(0.8, 3, 0, 3),
                share(1.0, 3, 10_000, 8),
            ],
            callgrind: true,
        }
    }
}

/// The case name of a throughput case.
pub fn throughput_case(payload: &str, posters: usize) -> String {
    format!("throughput/{payload}/{posters}p")
}

type Value = (Record, f64, Option<Diagnostics>);

/// One system in one case of a section: called with `true` once before the rounds (calibration or
/// warm-up, its values dropped), then with `false` once per round.
struct Job {
    case: String,
    system: String,
    run: Box<dyn FnMut(bool) -> Result<Vec<Value>, String>>,
}

impl Job {
    fn new(proto: &Record, run: impl FnMut(bool) -> Result<Vec<Value>, String> + 'static) -> Self {
        let (case, system) = (proto.case.clone(), proto.system.clone());
        let run = Box::new(run);
        Job { case, system, run }
    }

    /// A run that moves events: its calibration (also the warm-up) sizes the runs to last `target`;
    /// its records are `ops_per_sec` (with the run's diagnostics) and, for a CNO run, the spread of
    /// events served.
    fn moving(
        proto: Record,
        (calibration, target): (u64, Duration),
        mut run: impl FnMut(u64) -> Result<RunStats, String> + 'static,
    ) -> Self {
        let mut msgs = calibration;
        Job::new(&proto.clone(), move |calibrating| {
            let stats = run(msgs)?;
            if calibrating {
                let fit = stats.ops_per_sec() * target.as_secs_f64();
                msgs = fit.clamp(5_000.0, 200_000_000.0) as u64;
                return Ok(Vec::new());
            }
            msgs = resized(msgs, &stats, target);
            let ops = (
                proto.clone(),
                stats.ops_per_sec(),
                Some(stats.diagnostics()),
            );
            let served = stats.served_max_over_min;
            let spread = served.map(|x| (proto.with_metric(cno::FAIRNESS_METRIC), x, None));
            Ok([Some(ops), spread].into_iter().flatten().collect())
        })
    }

    /// A latency run of `samples` samples (no warm-up): its p50, p99 and p99.9 (`proto` is the p50
    /// record), and the busy ping-pong's same-CPU share.
    fn percentiles(proto: Record, samples: u64, measure: fn(u64) -> Sampled) -> Self {
        Job::new(&proto.clone(), move |warm_up| {
            if warm_up {
                return Ok(Vec::new());
            }
            let (h, share) = measure(samples)?;
            let diag = share.map(|s| Diagnostics {
                same_cpu_share: Some(s),
                ..Diagnostics::default()
            });
            let quantiles = [
                ("latency_p50_ns", 0.50),
                ("latency_p99_ns", 0.99),
                ("latency_p999_ns", 0.999),
            ];
            let at = |(m, q)| (proto.with_metric(m), h.value_at_quantile(q) as f64, diag);
            Ok(quantiles.map(at).into())
        })
    }

    /// A single-thread timing of `iters` iterations: `time(iters)` in ns, after a warm-up of
    /// `time(iters / 4)`.
    fn timed(
        proto: Record,
        iters: u64,
        mut time: impl FnMut(u64) -> Result<f64, String> + 'static,
    ) -> Self {
        Job::new(&proto.clone(), move |preparing| {
            if !preparing {
                return Ok(vec![(proto.clone(), time(iters)?, None)]);
            }
            time(iters / 4)?;
            Ok(Vec::new())
        })
    }
}

/// One section of the run: its name in notes and in the time summary, the step by which the order
/// of its jobs rotates every round (more than 1 where jobs of one case sit side by side, so that
/// consecutive rounds also change which case runs first), and how its jobs and the note its table
/// needs are built from its share of the plan.
struct Section {
    name: &'static str,
    stride: usize,
    build: fn(Share) -> (Vec<Job>, Option<String>),
}

/// Every section, in run order (that of [`Plan::sections`]).
#[rustfmt::skip]
const SECTIONS: [Section; 10] = [
    Section { name: "throughput", stride: 7, build: |s| (throughput_jobs(s), None) },
    Section { name: "room", stride: 7, build: room_jobs },
    Section { name: "wake latency", stride: 1, build: |s| (latency_jobs("wake-latency", &crate::latency::WAKE, s), None) },
    Section { name: "room-wake latency", stride: 1, build: |s| (latency_jobs("room-wake-latency", &room::ROOM_WAKE, s), None) },
    Section { name: "re-arm", stride: 1, build: rearm_jobs },
    Section { name: "single-thread pair", stride: 1, build: |s| (timed_jobs(&PAIR, "ns_per_pair", s), None) },
    Section { name: "busy ping-pong", stride: 1, build: |s| (latency_jobs(crate::pingpong::CASE, &crate::pingpong::PINGPONG, s), None) },
    Section { name: "cno wake latency", stride: 1, build: |s| (latency_jobs(cno::WAKE_CASE, &cno::CNO_WAKE, s), None) },
    Section { name: "cno trigger", stride: 7, build: cno_trigger_jobs },
    Section { name: "cno throughput", stride: 7, build: |s| (cno_throughput_jobs(s), None) },
];

/// Every throughput job: each payload and poster count, every system that runs with that many
/// posters.
fn throughput_jobs(share: Share) -> Vec<Job> {
    let mut jobs = Vec::new();
    for payload in PAYLOADS {
        for posters in POSTERS {
            let case = throughput_case(payload, posters);
            for q in Queue::ALL.into_iter().chain(Queue::FLOORS) {
                if !q.runs_with(posters) {
                    continue;
                }
                // No floor: the floor rings have none of evd's pacing, so evd may outrun them.
                let proto = q.row().record(&case, "ops_per_sec", posters + 1);
                let run = move |n| match payload {
                    "u64" => q.run::<u64>(posters, n),
                    _ => q.run::<Event64>(posters, n),
                };
                jobs.push(Job::moving(proto, (share.size, share.run), run));
            }
        }
    }
    jobs
}

/// Every room job, with the consumer work every room job of the run shares.
fn room_jobs(share: Share) -> (Vec<Job>, Option<String>) {
    let work = Work::calibrate(room::WORK_NS);
    let note = format!(
        "room: the consumer's work per event is {} black_box iterations ({:.0} ns measured at \
         the start, calibrated to {:.0} ns), the same for every system; posters: {}",
        work.iters,
        work.ns_per_event(),
        room::WORK_NS,
        room::ROOM_POLICY
    );
    let mut jobs = Vec::new();
    for capacity in room::CAPACITIES {
        for posters in room::POSTERS {
            for s in room::ROOM {
                let case = room_case(capacity, posters);
                let proto = s.row.record(&case, "ops_per_sec", posters + 1);
                let run = move |n| (s.run)(capacity, posters, n, work);
                jobs.push(Job::moving(proto, (share.size, share.run), run));
            }
        }
    }
    (jobs, Some(note))
}

fn latency_jobs(case: &str, systems: &[Latency], share: Share) -> Vec<Job> {
    let job = |s: &Latency| {
        let proto = s.row.record(case, "latency_p50_ns", s.threads);
        Job::percentiles(proto, share.size, s.measure)
    };
    systems.iter().map(job).collect()
}

fn rearm_jobs(share: Share) -> (Vec<Job>, Option<String>) {
    let names = REARM.map(|l| l.row.name);
    let note = format!(
        "rearm: each timed loop runs {} iterations per round, the kinds interleaved in the same \
         rounds. `{}`: one arm() on an empty ring that is already armed (it loads the head, the \
         head slot and the state word, and its one CAS installs the armed word it found: it \
         succeeds, and no iteration disarms); `{}`: the same arm(), then one try_dequeue() that \
         finds nothing; `{}`: a Relaxed load and one compare_exchange (AcqRel, as arm's) that \
         succeeds, installing the word with its armed bit set, on a cache-padded AtomicU64 no \
         other thread touches: one RMW per iteration, as the arm loop",
        share.size, names[0], names[1], names[2],
    );
    (timed_jobs(&REARM, "ns_per_rearm", share), Some(note))
}

/// A timed job per loop: `metric` in ns per iteration, after a warm-up of a quarter of the
/// iterations.
fn timed_jobs(loops: &[Loop], metric: &str, share: Share) -> Vec<Job> {
    let job = |l: &Loop| {
        let (l, mut rings) = (*l, Rings::new());
        let proto = l.row.record(l.case, metric, 1);
        Job::timed(proto, share.size, move |n| rings.time_ns(&l, n))
    };
    loops.iter().map(job).collect()
}

fn cno_trigger_jobs(share: Share) -> (Vec<Job>, Option<String>) {
    let note = "cno: atomic read-modify-writes per trigger are a design figure, not a \
        measurement: two beyond the post's reservation CAS while the waiter is awake (the slot \
        word's CAS and the ready ring's reservation CAS, core/src/cno/engine.rs), plus the ready \
        ring's wake when the waiter sleeps";
    let mut jobs = Vec::new();
    for v in Variant::ALL {
        for n in cno::TRIGGER_EVDS {
            for s in CnoSystem::ALL {
                let mut proto = s.row().record(&v.case(n), cno::CYCLE_METRIC, v.threads);
                proto.consumer = v.consumer.into();
                // Prepared by a check that the system can run here, so that a system that
                // cannot (epoll under a low descriptor limit) is dropped, not its case's rounds.
                jobs.push(Job::new(&proto.clone(), move |preparing| {
                    if preparing {
                        return s.check(n).map(|()| Vec::new());
                    }
                    Ok(vec![(proto.clone(), s.cycle_ns(v, n, share.run)?, None)])
                }));
            }
        }
    }
    (jobs, Some(note.into()))
}

/// CNO throughput: the waiter sleeps when nothing is ready and drains a batch per EVD.
fn cno_throughput_jobs(share: Share) -> Vec<Job> {
    let mut jobs = Vec::new();
    for feed in Feed::ALL {
        for evds in cno::THROUGHPUT_EVDS {
            for s in CnoSystem::ALL {
                let threads = cno::THROUGHPUT_POSTERS + 1;
                let proto = s.row().record(&feed.case(evds), "ops_per_sec", threads);
                let run = move |n| s.run_throughput(evds, n, feed);
                jobs.push(Job::moving(proto, (share.size, share.run), run));
            }
        }
    }
    jobs
}

/// The run so far: its progress bar, its records in first-seen order, its notes.
struct Run<'a> {
    pb: &'a ProgressBar,
    records: Vec<Record>,
    notes: Vec<String>,
}

impl Run<'_> {
    /// Add a value to the record of `proto`'s case, system and metric.
    fn push(&mut self, proto: Record, round: usize, value: f64, diag: Option<Diagnostics>) {
        let same = |r: &&mut Record| {
            r.case == proto.case && r.system == proto.system && r.metric == proto.metric
        };
        match self.records.iter_mut().find(same) {
            Some(r) => r.set_round(round, value, diag),
            None => {
                self.records.push(proto);
                let last = self.records.last_mut().expect("pushed");
                last.set_round(round, value, diag);
            }
        }
    }

    /// Prepare every job (a job whose preparation fails is dropped), then run `rounds`
    /// interleaved rounds of all of them within `deadline`, in an order that rotates every round;
    /// a round still running at the deadline is cut and discarded, so every system keeps the same
    /// rounds (single runs on a loaded, oversubscribed machine can take many times their calibrated
    /// length), and no round starts that would not end by the deadline. `name` names the section in
    /// notes. The section's records are left in job order.
    fn interleave(
        &mut self,
        name: &str,
        stride: usize,
        mut jobs: Vec<Job>,
        rounds: usize,
        deadline: Instant,
    ) {
        let start = Instant::now();
        let first = self.records.len();
        let keys: Vec<(String, String)> = jobs
            .iter()
            .map(|j| (j.case.clone(), j.system.clone()))
            .collect();
        jobs.retain_mut(|job| {
            let what = format!("{} {}", job.system, job.case);
            self.pb.set_message(format!("preparing {what}"));
            self.pb.inc(1);
            let prepared = (job.run)(true);
            if let Err(e) = &prepared {
                self.notes.push(format!("{what}: calibration failed: {e}"));
            }
            prepared.is_ok()
        });
        // The preparation is one round's worth of work: it stands for the first round's length.
        let mut last_round = start.elapsed();
        let cut = |round: usize| round > 0 && Instant::now() > deadline;
        let k = jobs.len();
        let mut rounds_run = 0;
        for round in 0..rounds {
            if round > 0 && Instant::now() + last_round > deadline {
                break;
            }
            let round_start = Instant::now();
            let (mut was_cut, mut failed) = (false, Vec::new());
            for i in 0..k {
                if cut(round) {
                    was_cut = true;
                    for r in &mut self.records[first..] {
                        r.discard_round(round);
                    }
                    let n = round + 1;
                    self.notes.push(format!(
                        "{name}: round {n} passed the time budget after {i} of {k} runs and was \
                         discarded"
                    ));
                    // The whole round counts as not run below.
                    self.pb
                        .set_position(self.pb.position().saturating_sub(i as u64));
                    break;
                }
                let job = &mut jobs[(i + round * stride) % k];
                let what = format!("{} {} round {}", job.system, job.case, round + 1);
                self.pb
                    .set_message(format!("round {} {} {}", round + 1, job.system, job.case));
                match (job.run)(false) {
                    Ok(values) => values
                        .into_iter()
                        .for_each(|(m, v, d)| self.push(m, round, v, d)),
                    Err(e) => {
                        self.notes.push(format!("{what}: {e}"));
                        failed.push(job.case.clone());
                    }
                }
                self.pb.inc(1);
            }
            if was_cut {
                break;
            }
            // Every system of a case keeps the same rounds: medians over other rounds than a
            // peer's would not compare.
            for case in failed.iter().collect::<std::collections::BTreeSet<_>>() {
                let of_case = self.records[first..].iter_mut().filter(|r| r.case == *case);
                of_case.for_each(|r| r.fail_round(round));
                let n = round + 1;
                self.notes
                    .push(format!("{case}: round {n} discarded: a run in it failed"));
            }
            last_round = round_start.elapsed();
            rounds_run += 1;
        }
        if rounds_run < rounds {
            let note = format!("{name}: {rounds_run} of {rounds} rounds fitted in the time budget");
            self.notes.push(note);
            self.pb.inc(((rounds - rounds_run) * k) as u64);
        }
        // Case order then system order (the jobs' order), whatever order the rotated rounds first
        // met them in.
        let rank = |r: &Record| {
            let key = |(case, system): &(String, String)| *case == r.case && *system == r.system;
            keys.iter().position(key).unwrap_or(usize::MAX)
        };
        self.records[first..].sort_by_cached_key(rank);
    }
}

/// The event count of a job's next run, after a run of `msgs` events that took `run.elapsed`: cut
/// to what lasts `target` at this run's rate when it took more than twice that, else unchanged. A
/// calibration that met the VM in a fast phase (rates here move 5x between phases) would otherwise
/// size every later run of that job for that phase, and a slow phase would then stretch a round
/// past the section's budget. Never raised, so a round never grows past the calibrated one.
fn resized(msgs: u64, run: &RunStats, target: Duration) -> u64 {
    if run.elapsed <= target * 2 {
        return msgs;
    }
    let fit = (run.ops_per_sec() * target.as_secs_f64()) as u64;
    fit.clamp(5_000, msgs)
}

/// Run the comparison. `exe` is this binary, for the callgrind runs.
pub fn compare(plan: &Plan, command: &str, exe: Option<&Path>, progress: bool) -> Report {
    let mut machine = Machine::detect();
    let started = Instant::now();
    let started_unix_s = SystemTime::now().duration_since(UNIX_EPOCH);
    let started_unix_s = started_unix_s.map_or(0, |d| d.as_secs());
    let built = SECTIONS.iter().zip(plan.sections);
    let built: Vec<_> = built.map(|(s, share)| (s.build)(share)).collect();
    let callgrind_steps = counted().count();
    let steps = built.iter().zip(&plan.sections);
    let steps = steps
        .map(|((jobs, _), share)| jobs.len() * (share.rounds + 1))
        .sum::<usize>();
    let steps = steps + if plan.callgrind { callgrind_steps } else { 0 };
    let pb = if progress {
        ProgressBar::new(steps as u64)
    } else {
        ProgressBar::hidden()
    };
    let style = ProgressStyle::with_template("{elapsed:>3} [{bar:40}] {pos}/{len} {msg}");
    pb.set_style(style.expect("valid template").progress_chars("=> "));
    let (records, notes) = (Vec::new(), Vec::new());
    let mut run = Run {
        pb: &pb,
        records,
        notes,
    };
    let load1 = machine.load_average.split_whitespace().next();
    let load1: f64 = load1.and_then(|l| l.parse().ok()).unwrap_or(0.0);
    if machine.logical_cpus > 0 && load1 >= 0.5 {
        run.notes.push(format!(
            "load average {} at the start on {} CPUs: other work competed for the CPUs",
            machine.load_average, machine.logical_cpus
        ));
    }
    // Section i ends by the run's start plus the seconds of the sections up to and including its
    // own, so time an earlier section did not use goes to the next.
    let mut times = Vec::new();
    let (mut lap, mut until) = (Instant::now(), Duration::ZERO);
    for ((s, (jobs, note)), share) in SECTIONS.iter().zip(built).zip(plan.sections) {
        until += Duration::from_secs_f64(share.seconds);
        let name = s.name;
        run.notes.extend(note);
        // The pair section's notes name its case.
        let pair = name == "single-thread pair";
        let in_notes = if pair { PAIR[0].case } else { name };
        run.interleave(in_notes, s.stride, jobs, share.rounds, started + until);
        times.push(format!("{name} {:.1} s", lap.elapsed().as_secs_f64()));
        if name == "throughput" {
            no_room_wakes_in_throughput(&mut run);
        }
        lap = Instant::now();
    }
    if plan.callgrind {
        callgrind_section(plan, started, exe, &mut run);
        times.push(format!("callgrind {:.1} s", lap.elapsed().as_secs_f64()));
    }
    pb.finish_and_clear();
    let Run {
        records, mut notes, ..
    } = run;
    notes.push(format!("time per section: {}", times.join(", ")));
    machine.load_average_end = report::load_average();
    let records = report::records_from(records, machine.logical_cpus);
    Report {
        schema: report::SCHEMA.into(),
        command: command.into(),
        quick: plan.quick,
        started_unix_s,
        duration_s: started.elapsed().as_secs_f64(),
        machine,
        ratio_convention: report::RATIO_CONVENTION.into(),
        poster_policy: POSTER_POLICY.into(),
        targets: report::targets(&records),
        records,
        notes,
    }
}

/// No poster waits for room in the throughput cases: a room wake there would be a bug, noted.
fn no_room_wakes_in_throughput(run: &mut Run) {
    for r in run
        .records
        .iter()
        .filter(|r| r.case.starts_with("throughput/"))
    {
        let wakes = r.room_wakes_per_msg.iter().flatten().flatten();
        let worst = wakes.copied().fold(0.0, f64::max);
        if worst > 0.0 {
            run.notes.push(format!(
                "{} {}: {worst:.3} room wakes per event although no poster waits for room \
                 (non-blocking posts): the room signal woke someone it should not have",
                r.system, r.case
            ));
        }
    }
}

/// The loops callgrind counts, their instruction metric and their mode of this binary: every re-arm
/// but the floor (one CAS by construction), and the CNO cycle with the pairs it is compared with.
fn counted() -> impl Iterator<Item = (Loop, &'static str, &'static str)> {
    let rearm = REARM
        .into_iter()
        .filter(|l| l.row.role != crate::report::Role::Floor);
    let rearm = rearm.map(|l| (l, "instructions_per_rearm", "rearm-insns"));
    rearm.chain(CNO_INSNS.map(|l| (l, "instructions_per_cycle", "cno-insns")))
}

/// Count instructions with callgrind, each loop once, while the budget allows.
fn callgrind_section(plan: &Plan, started: Instant, exe: Option<&Path>, run: &mut Run) {
    let Some(exe) = exe else {
        let note = "re-arm and cno instructions: no path to this binary, callgrind skipped";
        run.notes.push(note.into());
        run.pb.inc(counted().count() as u64);
        return;
    };
    for (l, metric, mode) in counted() {
        let what = if l.case == "rearm" { "re-arm" } else { "cno" };
        run.pb.set_message(format!("callgrind {}", l.row.name));
        if started.elapsed() + CALLGRIND_ESTIMATE > plan.budget {
            run.notes.push(format!(
                "{what} instructions: out of time budget, callgrind skipped"
            ));
            run.pb.inc(1);
            continue;
        }
        // The bare CAS is not counted: no floor.
        let proto = Record {
            floor: None,
            ..l.row.record(l.case, metric, 1)
        };
        match count_mode(exe, &[mode, "--kind", l.kind]) {
            Ok(insns) => run.push(proto, 0, insns, None),
            Err(e) => run
                .notes
                .push(format!("{what} instructions of {}: {e}", l.row.name)),
        }
        run.pb.inc(1);
    }
    let insns = |l: &Loop| {
        let r = run
            .records
            .iter()
            .find(|r| r.case == l.case && r.system == l.row.name);
        r.and_then(|r| r.rounds.first().copied().flatten())
    };
    let [cycle, plain, bound] = CNO_INSNS.each_ref().map(insns);
    if let (Some(cycle), Some(plain)) = (cycle, plain) {
        run.notes.push(format!(
            "cno instructions: a CNO cycle ({}) is {cycle:.1} instructions, {:.1} more than a \
             plain post+try_dequeue ({plain:.1})",
            CNO_INSNS[0].row.name,
            cycle - plain
        ));
    }
    if let (Some(bound), Some(plain)) = (bound, plain) {
        run.notes.push(format!(
            "cno instructions: a post+try_dequeue on an EVD bound to a CNO but not enabled is \
             {bound:.1} instructions, against {plain:.1} on an unbound EVD"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_in_which_a_run_failed_is_discarded_for_its_whole_case() {
        // Three systems of two cases, three rounds; one system of case "a" fails in round 2.
        let job = |case: &str, system: &str, fails_in: Option<usize>| {
            let proto = Record::new(case, system, report::Role::Peer, "x", "ops_per_sec");
            let mut round = 0;
            Job::new(&proto.clone(), move |warm_up| {
                if warm_up {
                    return Ok(Vec::new());
                }
                round += 1;
                if Some(round) == fails_in {
                    return Err("failed".into());
                }
                Ok(vec![(proto.clone(), round as f64, None)])
            })
        };
        let jobs = vec![
            job("a", "p", None),
            job("a", "q", Some(2)),
            job("b", "r", None),
        ];
        let pb = ProgressBar::hidden();
        let (records, notes) = (Vec::new(), Vec::new());
        let mut run = Run {
            pb: &pb,
            records,
            notes,
        };
        let deadline = Instant::now() + Duration::from_secs(3600);
        run.interleave("section", 1, jobs, 3, deadline);
        let rounds = |s: &str| {
            let r = run.records.iter().find(|r| r.system == s).unwrap();
            r.rounds.clone()
        };
        assert_eq!(rounds("p"), [Some(1.0), None, Some(3.0)]);
        assert_eq!(rounds("q"), [Some(1.0), None, Some(3.0)]);
        assert_eq!(
            rounds("r"),
            [Some(1.0), Some(2.0), Some(3.0)],
            "another case"
        );
        assert!(
            run.notes
                .iter()
                .any(|n| n == "a: round 2 discarded: a run in it failed")
        );
        assert!(
            !run.notes.iter().any(|n| n.contains("rounds fitted")),
            "{:?}",
            run.notes
        );
    }

    #[test]
    fn a_run_that_overstays_shrinks_the_next_and_none_grows() {
        let target = Duration::from_millis(35);
        let run = |messages: u64, ms: u64| RunStats {
            elapsed: Duration::from_millis(ms),
            messages,
            ..RunStats::default()
        };
        // 10 M events in 350 ms (10x over): sized for 35 ms at that rate.
        assert_eq!(
            resized(10_000_000, &run(10_000_000, 350), target),
            1_000_000
        );
        // Within twice the target, or faster: unchanged (never raised).
        assert_eq!(resized(1_000_000, &run(1_000_000, 70), target), 1_000_000);
        assert_eq!(resized(1_000_000, &run(1_000_000, 5), target), 1_000_000);
        // Never below the floor count.
        assert_eq!(resized(10_000, &run(10_000, 10_000), target), 5_000);
    }
}
