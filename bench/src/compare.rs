//! The side-by-side comparison behind `evd-bench compare`: every system,
//! every case, interleaved round-robin within one run so that drift on a
//! noisy machine hits all systems alike, inside a fixed time budget.

use crate::cno::{self, CnoInsnKind, CnoSystem, CnoWakeSystem, Feed, Variant};
use crate::latency::WakeSystem;
use crate::pair::{Pair, PairCalls, PairSystem};
use crate::payload::Event64;
use crate::pingpong::{self, PingPongSystem};
use crate::rearm::{count_mode, Rearm, RearmKind};
use crate::report::{self, Diagnostics, Machine, Measurement, Report, System};
use crate::room::{self, room_case, RoomSystem, RoomWakeSystem, Work};
use crate::throughput::{Queue, RunStats, POSTER_POLICY};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Wall time of the two callgrind runs (side by side) that count one kind.
const CALLGRIND_ESTIMATE: Duration = Duration::from_secs(2);

/// The payloads of the throughput cases.
pub const PAYLOADS: [&str; 2] = ["u64", "event64"];
/// The poster counts of the throughput cases.
pub const POSTERS: [usize; 3] = [1, 2, 4];
/// The case of the single-thread post+dequeue pairs.
pub const PAIR_CASE: &str = "single-thread/pair";
/// The case of the room-wake latency.
pub const ROOM_WAKE_CASE: &str = "room-wake-latency";

/// One section's part of a [`Plan`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share {
    /// Seconds of the budget it may use; what it leaves goes to the next.
    pub seconds: f64,
    /// Interleaved rounds, after one calibration or warm-up round.
    pub rounds: usize,
    /// Events per calibration run (moving sections), samples per system and
    /// round (latencies; ping-pong after [`pingpong::WARMUP`] unrecorded
    /// round trips) or iterations per round (re-arm, pair).
    pub size: u64,
    /// Target wall time of one measured run (moving sections) or the timed
    /// length of one trigger-cost measurement, after a warm-up of a quarter
    /// of it; zero elsewhere.
    pub run: Duration,
}

const fn share(seconds: f64, rounds: usize, size: u64, run_ms: u64) -> Share {
    Share {
        seconds,
        rounds,
        size,
        run: Duration::from_millis(run_ms),
    }
}

/// How much of everything to run, and within what time.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `--quick`.
    pub quick: bool,
    /// Hard upper bound of the whole run; what the sections leave is for
    /// callgrind.
    pub budget: Duration,
    /// The sections' shares, in run order: throughput, room throughput,
    /// wake latency, room-wake latency, re-arm timing, single-thread pairs,
    /// busy ping-pong, CNO wake latency, CNO trigger cost, CNO throughput.
    pub sections: [Share; 10],
    /// Count re-arm instructions with callgrind, if valgrind is installed.
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

    /// Progress-bar steps: every job's preparation and rounds, and the
    /// callgrind counts.
    fn steps(&self) -> u64 {
        let tp: usize = POSTERS
            .iter()
            .map(|&n| Queue::ALL.len() + Queue::FLOORS.iter().filter(|q| q.runs_with(n)).count())
            .sum();
        let jobs = [
            PAYLOADS.len() * tp,
            room::CAPACITIES.len() * room::POSTERS.len() * RoomSystem::ALL.len(),
            WakeSystem::ALL.len(),
            RoomWakeSystem::ALL.len(),
            RearmKind::ALL.len(),
            PairSystem::ALL.len() * PairCalls::ALL.len(),
            PingPongSystem::ALL.len(),
            CnoWakeSystem::ALL.len(),
            cno_trigger_jobs().len(),
            cno_throughput_jobs().len(),
        ];
        let callgrind = if self.callgrind {
            RearmKind::COUNTED.len() + CnoInsnKind::ALL.len()
        } else {
            0
        };
        let rounds = jobs.iter().zip(&self.sections);
        (rounds.map(|(jobs, s)| jobs * (s.rounds + 1)).sum::<usize>() + callgrind) as u64
    }
}

/// The case name of a throughput case.
pub fn throughput_case(payload: &str, posters: usize) -> String {
    format!("throughput/{payload}/{posters}p")
}

type Value = (Measurement, f64, Option<Diagnostics>);

/// One system in one case of a section.
struct Job {
    case: String,
    system: String,
    /// Called with `true` once before the rounds (calibration or warm-up,
    /// its values dropped), then with `false` once per round.
    run: Box<dyn FnMut(bool) -> Result<Vec<Value>, String>>,
}

impl Job {
    fn new(
        proto: &Measurement,
        run: impl FnMut(bool) -> Result<Vec<Value>, String> + 'static,
    ) -> Self {
        Job {
            case: proto.case.clone(),
            system: proto.system.clone(),
            run: Box::new(run),
        }
    }

    /// A run that moves events: its calibration (also the warm-up) sizes
    /// the runs to last `target`; its records are `ops_per_sec` (with the
    /// run's diagnostics) and, for a CNO run, the spread of events served.
    fn moving(
        proto: Measurement,
        calibration: u64,
        target: Duration,
        mut run: impl FnMut(u64) -> Result<RunStats, String> + 'static,
    ) -> Self {
        let mut msgs = calibration;
        Job::new(&proto.clone(), move |calibrating| {
            let stats = run(msgs)?;
            if calibrating {
                msgs = (stats.ops_per_sec() * target.as_secs_f64()).clamp(5_000.0, 200_000_000.0)
                    as u64;
                return Ok(Vec::new());
            }
            msgs = resized(msgs, &stats, target);
            let diag = Diagnostics {
                empty_polls_per_msg: stats.empty_polls_per_msg(),
                full_refusals_per_msg: stats.full_refusals_per_msg(),
                room_wakes_per_msg: stats.room_wakes_per_msg(),
                same_cpu_share: stats.same_cpu_share(),
            };
            let mut values = vec![(proto.clone(), stats.ops_per_sec(), Some(diag))];
            if let Some(spread) = stats.served_max_over_min {
                values.push((with_metric(&proto, cno::FAIRNESS_METRIC), spread, None));
            }
            Ok(values)
        })
    }

    /// A latency run of `samples` samples: its p50, p99 and p99.9 (`proto`
    /// is the p50 record).
    fn percentiles(
        proto: Measurement,
        samples: u64,
        mut measure: impl FnMut(u64) -> Result<(Histogram<u64>, Option<Diagnostics>), String> + 'static,
    ) -> Self {
        Job::new(&proto.clone(), move |warm_up| {
            if warm_up {
                return Ok(Vec::new());
            }
            let (h, diag) = measure(samples)?;
            let at = |metric, q| {
                (
                    with_metric(&proto, metric),
                    h.value_at_quantile(q) as f64,
                    diag,
                )
            };
            Ok(vec![
                at("latency_p50_ns", 0.50),
                at("latency_p99_ns", 0.99),
                at("latency_p999_ns", 0.999),
            ])
        })
    }

    /// A single-thread timing: `time(true)` is the warm-up.
    fn timed(
        proto: Measurement,
        mut time: impl FnMut(bool) -> Result<f64, String> + 'static,
    ) -> Self {
        Job::new(&proto.clone(), move |warm_up| {
            let ns = time(warm_up)?;
            Ok(if warm_up {
                Vec::new()
            } else {
                vec![(proto.clone(), ns, None)]
            })
        })
    }
}

/// `m` for another metric of the same row (its unit and direction follow).
fn with_metric(m: &Measurement, metric: &str) -> Measurement {
    let mut out = Measurement::new(&m.case, &m.system, m.role, &m.consumer, metric);
    out.baseline.clone_from(&m.baseline);
    out.threads = m.threads;
    out.floor.clone_from(&m.floor);
    out
}

fn throughput_measurement(q: Queue, case: &str, posters: usize) -> Measurement {
    let mut m = q.measurement([case, q.style().label(), "ops_per_sec"], posters + 1);
    // A busy evd row faster than the ring that does no RMW at all is noise.
    if q == Queue::EvdSingle && posters == 1 {
        m.floor = Some(Queue::FloorStampRing.name().into());
    }
    m
}

fn room_measurement(s: RoomSystem, capacity: usize, posters: usize) -> Measurement {
    let case = room_case(capacity, posters);
    s.measurement([&case, s.style().label(), "ops_per_sec"], posters + 1)
}

/// A CNO throughput row: the waiter sleeps when nothing is ready and drains
/// a batch per EVD.
fn cno_throughput_measurement(s: CnoSystem, evds: usize, feed: Feed) -> Measurement {
    let id = [&feed.case(evds), "blocking/batch", "ops_per_sec"];
    s.measurement(id, cno::THROUGHPUT_POSTERS + 1)
}

fn cno_trigger_measurement(v: Variant, n: usize, s: CnoSystem) -> Measurement {
    s.measurement([&v.case(n), v.consumer(), cno::CYCLE_METRIC], v.threads())
}

fn wake_measurement(s: WakeSystem, metric: &str) -> Measurement {
    s.measurement(["wake-latency", s.consumer(), metric], s.threads())
}

/// A room-wake-latency row: the one that sleeps is the poster, in a
/// blocking send.
fn room_wake_measurement(s: RoomWakeSystem, metric: &str) -> Measurement {
    s.measurement([ROOM_WAKE_CASE, "blocking", metric], 2)
}

fn cno_wake_measurement(s: CnoWakeSystem, metric: &str) -> Measurement {
    s.measurement([cno::WAKE_CASE, "blocking", metric], 2)
}

fn pingpong_measurement(s: PingPongSystem, metric: &str) -> Measurement {
    s.measurement([pingpong::CASE, s.consumer(), metric], 2)
}

/// Only the timed re-arms have a floor: the bare CAS is not counted.
fn rearm_measurement(k: RearmKind, metric: &str) -> Measurement {
    let mut m = k.measurement(["rearm", "single-thread", metric], 1);
    if metric != "ns_per_rearm" {
        m.floor = None;
    }
    m
}

fn pair_measurement(calls: PairCalls, s: PairSystem) -> Measurement {
    s.measurement([calls.case(), "single-thread", "ns_per_pair"], 1)
}

fn cno_insns_measurement(k: CnoInsnKind) -> Measurement {
    let id = [cno::INSNS_CASE, "single-thread", "instructions_per_cycle"];
    k.measurement(id, 1)
}

/// In table order.
fn cno_throughput_jobs() -> Vec<(CnoSystem, usize, Feed)> {
    Feed::ALL
        .iter()
        .flat_map(|&feed| cno::THROUGHPUT_EVDS.map(|evds| (feed, evds)))
        .flat_map(|(feed, evds)| CnoSystem::ALL.map(|s| (s, evds, feed)))
        .collect()
}

/// In table order.
fn cno_trigger_jobs() -> Vec<(Variant, usize, CnoSystem)> {
    Variant::ALL
        .iter()
        .flat_map(|&v| cno::TRIGGER_EVDS.map(|n| (v, n)))
        .flat_map(|(v, n)| CnoSystem::ALL.map(|s| (v, n, s)))
        .collect()
}

/// Collected rounds, kept in first-seen order.
#[derive(Default)]
struct Collector {
    measurements: Vec<Measurement>,
}

impl Collector {
    /// Add a value to the measurement of `proto`'s case, system and metric.
    fn push(&mut self, proto: Measurement, round: usize, value: f64, diag: Option<Diagnostics>) {
        let i = match self.measurements.iter().position(|m| {
            m.case == proto.case && m.system == proto.system && m.metric == proto.metric
        }) {
            Some(i) => i,
            None => {
                self.measurements.push(proto);
                self.measurements.len() - 1
            }
        };
        self.measurements[i].set_round(round, value, diag);
    }

    /// Forget round `round` of every measurement of a case `in_section`
    /// accepts, so that every system of the section keeps the same rounds.
    fn discard_round(&mut self, round: usize, in_section: impl Fn(&str) -> bool) {
        for m in self.measurements.iter_mut().filter(|m| in_section(&m.case)) {
            if let Some(v) = m.rounds.get_mut(round) {
                *v = None;
            }
            if let Some(d) = m.diagnostics.as_mut().and_then(|ds| ds.get_mut(round)) {
                *d = None;
            }
            while m.rounds.last() == Some(&None) {
                m.rounds.pop();
            }
            if let Some(ds) = m.diagnostics.as_mut() {
                ds.truncate(m.rounds.len());
            }
        }
    }
}

/// Stops a section from starting a round that would not end by its deadline.
struct SectionClock {
    start: Instant,
    deadline: Instant,
    last_round: Duration,
}

impl SectionClock {
    fn new(deadline: Instant) -> Self {
        SectionClock {
            start: Instant::now(),
            deadline,
            last_round: Duration::ZERO,
        }
    }

    fn may_start_round(&self, round: usize) -> bool {
        round == 0 || Instant::now() + self.last_round <= self.deadline
    }

    fn round_done(&mut self, round_start: Instant) {
        self.last_round = round_start.elapsed();
    }

    /// A round other than the first that is still running at the deadline
    /// is cut (and discarded by the caller): single runs on a loaded,
    /// oversubscribed machine can take many times their calibrated length.
    fn must_cut(&self, round: usize) -> bool {
        round > 0 && Instant::now() > self.deadline
    }
}

struct Run<'a> {
    pb: &'a ProgressBar,
    c: Collector,
    notes: Vec<String>,
}

/// A section's name in notes, its interleaved rounds, its deadline and
/// the step by which the order of its jobs rotates every round (more than
/// 1 where jobs of one case sit side by side, so that consecutive rounds
/// also change which case runs first).
struct Rounds {
    name: &'static str,
    rounds: usize,
    deadline: Instant,
    stride: usize,
}

impl Run<'_> {
    /// Prepare every job (a job whose preparation fails is dropped), then
    /// run `s.rounds` interleaved rounds of all of them within
    /// `s.deadline`, in an order that rotates every round; a round still
    /// running at the deadline is cut and discarded, so every system keeps
    /// the same rounds. The section's records are left in job order.
    fn interleave(&mut self, s: &Rounds, mut jobs: Vec<Job>) {
        let mut clock = SectionClock::new(s.deadline);
        let first = self.c.measurements.len();
        let keys: Vec<(String, String)> = jobs
            .iter()
            .map(|j| (j.case.clone(), j.system.clone()))
            .collect();
        jobs.retain_mut(|job| {
            self.pb
                .set_message(format!("preparing {} {}", job.system, job.case));
            self.pb.inc(1);
            (job.run)(true)
                .map_err(|e| {
                    self.notes.push(format!(
                        "{} {}: calibration failed: {e}",
                        job.system, job.case
                    ))
                })
                .is_ok()
        });
        // The preparation is one round's worth of work, so it stands for
        // the first measured round's duration.
        clock.round_done(clock.start);
        let k = jobs.len();
        let mut rounds_run = 0;
        for round in 0..s.rounds {
            if !clock.may_start_round(round) {
                break;
            }
            let round_start = Instant::now();
            for i in 0..k {
                if clock.must_cut(round) {
                    self.c
                        .discard_round(round, |case| keys.iter().any(|(c, _)| c == case));
                    self.notes.push(format!(
                        "{}: round {} passed the time budget after {i} of {k} runs and was discarded",
                        s.name,
                        round + 1
                    ));
                    // The whole round counts as not run below.
                    self.pb
                        .set_position(self.pb.position().saturating_sub(i as u64));
                    break;
                }
                let job = &mut jobs[(i + round * s.stride) % k];
                self.pb
                    .set_message(format!("round {} {} {}", round + 1, job.system, job.case));
                match (job.run)(false) {
                    Ok(values) => {
                        for (m, v, d) in values {
                            self.c.push(m, round, v, d);
                        }
                    }
                    Err(e) => self.notes.push(format!(
                        "{} {} round {}: {e}",
                        job.system,
                        job.case,
                        round + 1
                    )),
                }
                self.pb.inc(1);
            }
            if clock.must_cut(round) {
                break;
            }
            clock.round_done(round_start);
            rounds_run += 1;
        }
        if rounds_run < s.rounds {
            self.notes.push(format!(
                "{}: {rounds_run} of {} rounds fitted in the time budget",
                s.name, s.rounds
            ));
            self.pb.inc(((s.rounds - rounds_run) * k) as u64);
        }
        // Case order then system order (the jobs' order), whatever order
        // the rotated rounds first met them in.
        let rank = |m: &Measurement| {
            keys.iter()
                .position(|(case, system)| *case == m.case && *system == m.system)
                .unwrap_or(usize::MAX)
        };
        self.c.measurements[first..].sort_by_cached_key(rank);
    }
}

/// The event count of a job's next run, after a run of `msgs` events that
/// took `run.elapsed`: cut to what lasts `target` at this run's rate when
/// it took more than twice that, else unchanged. A calibration that met
/// the VM in a fast phase (rates here move 5x between phases) would
/// otherwise size every later run of that job for that phase, and a slow
/// phase would then stretch a round past the section's budget. Never
/// raised, so a round never grows past the calibrated one.
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
    let mut run = Run {
        pb: &pb,
        c: Collector::default(),
        notes: Vec::new(),
    };
    let load1: f64 = machine
        .load_average
        .split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(0.0);
    if machine.logical_cpus > 0 && load1 >= 0.5 {
        run.notes.push(format!(
            "load average {} at the start on {} CPUs: other work competed for the CPUs",
            machine.load_average, machine.logical_cpus
        ));
    }
    // Section i ends by the run's start plus the seconds of the sections up
    // to and including its own, so time an earlier section did not use goes
    // to the next.
    let mut times = Vec::new();
    let (mut lap, mut until) = (Instant::now(), Duration::ZERO);
    for (&(name, stride, jobs), &share) in SECTIONS.iter().zip(&plan.sections) {
        until += Duration::from_secs_f64(share.seconds);
        let jobs = jobs(share, &mut run.notes);
        let rounds = Rounds {
            // The pair section's notes name its case.
            name: if name == "single-thread pair" {
                PAIR_CASE
            } else {
                name
            },
            rounds: share.rounds,
            deadline: started + until,
            stride,
        };
        run.interleave(&rounds, jobs);
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
    let Run { c, mut notes, .. } = run;
    notes.push(format!("time per section: {}", times.join(", ")));

    machine.load_average_end = report::load_average();
    let records = report::records_from(c.measurements, machine.logical_cpus);
    let targets = report::targets(&records);
    Report {
        schema: report::SCHEMA.into(),
        command: command.into(),
        quick: plan.quick,
        started_unix_s,
        duration_s: started.elapsed().as_secs_f64(),
        machine,
        ratio_convention: report::RATIO_CONVENTION.into(),
        poster_policy: POSTER_POLICY.into(),
        records,
        targets,
        notes,
    }
}

/// Builds a section's jobs from its share, noting what its table needs.
type Jobs = fn(Share, &mut Vec<String>) -> Vec<Job>;

/// The sections in run order (that of [`Plan::sections`]): the name in notes
/// and in the time summary, the step by which the order of its jobs rotates
/// every round (more than 1 where jobs of one case sit side by side, so that
/// consecutive rounds also change which case runs first), and its jobs.
const SECTIONS: [(&str, usize, Jobs); 10] = [
    ("throughput", 7, throughput_jobs),
    ("room", 7, room_jobs),
    ("wake latency", 1, wake_jobs),
    ("room-wake latency", 1, room_wake_jobs),
    ("re-arm", 1, rearm_jobs),
    ("single-thread pair", 1, pair_jobs),
    ("busy ping-pong", 1, pingpong_jobs),
    ("cno wake latency", 1, cno_wake_jobs),
    ("cno trigger", 7, cno_trigger_section),
    ("cno throughput", 7, cno_throughput_section),
];

/// Every throughput job: each payload and poster count, every system that
/// runs with that many posters.
fn throughput_jobs(share: Share, _: &mut Vec<String>) -> Vec<Job> {
    PAYLOADS
        .iter()
        .flat_map(|p| POSTERS.iter().map(move |n| (*p, *n)))
        .flat_map(|(payload, posters)| {
            Queue::ALL
                .into_iter()
                .chain(Queue::FLOORS)
                .filter(move |q| q.runs_with(posters))
                .map(move |q| (payload, posters, q))
        })
        .map(|(payload, posters, q)| {
            let proto = throughput_measurement(q, &throughput_case(payload, posters), posters);
            Job::moving(proto, share.size, share.run, move |n| match payload {
                "u64" => q.run::<u64>(posters, n),
                _ => q.run::<Event64>(posters, n),
            })
        })
        .collect()
}

/// Every room job, with the consumer work every room job of the run shares.
fn room_jobs(share: Share, notes: &mut Vec<String>) -> Vec<Job> {
    let work = Work::calibrate(room::WORK_NS);
    notes.push(format!(
        "room: the consumer's work per event is {} black_box iterations ({:.0} ns measured at \
         the start, calibrated to {:.0} ns), the same for every system; posters: {}",
        work.iters,
        work.ns_per_event(),
        room::WORK_NS,
        room::ROOM_POLICY
    ));
    room::CAPACITIES
        .iter()
        .flat_map(|cap| room::POSTERS.iter().map(move |n| (*cap, *n)))
        .flat_map(|(capacity, posters)| RoomSystem::ALL.map(|s| (capacity, posters, s)))
        .map(|(capacity, posters, s)| {
            let proto = room_measurement(s, capacity, posters);
            Job::moving(proto, share.size, share.run, move |n| {
                s.run(capacity, posters, n, work)
            })
        })
        .collect()
}

fn wake_jobs(share: Share, _: &mut Vec<String>) -> Vec<Job> {
    let proto = |s| wake_measurement(s, "latency_p50_ns");
    let job =
        |s: WakeSystem| Job::percentiles(proto(s), share.size, move |n| Ok((s.measure(n)?, None)));
    WakeSystem::ALL.map(job).into()
}

fn room_wake_jobs(share: Share, _: &mut Vec<String>) -> Vec<Job> {
    let proto = |s| room_wake_measurement(s, "latency_p50_ns");
    let job = |s: RoomWakeSystem| {
        Job::percentiles(proto(s), share.size, move |n| Ok((s.measure(n)?, None)))
    };
    RoomWakeSystem::ALL.map(job).into()
}

fn rearm_jobs(share: Share, notes: &mut Vec<String>) -> Vec<Job> {
    notes.push(format!(
        "rearm: each timed loop runs {} iterations per round, the kinds interleaved in the same \
         rounds. `{}`: one arm() on an empty ring that is already armed (it loads the head, the \
         head slot and the state word, and its one CAS installs the armed word it found: it \
         succeeds, and no iteration disarms); `{}`: the same arm(), then one try_dequeue() that \
         finds nothing; `{}`: a Relaxed load and one compare_exchange (AcqRel, as arm's) that \
         succeeds, installing the word with its armed bit set, on a cache-padded AtomicU64 no \
         other thread touches: one RMW per iteration, as the arm loop",
        share.size,
        RearmKind::EvdArm.name(),
        RearmKind::ArmThenPoll.name(),
        RearmKind::CasFloor.name(),
    ));
    let iters = share.size;
    let rearm = RearmKind::ALL.map(|k| {
        let mut r = Rearm::new();
        Job::timed(rearm_measurement(k, "ns_per_rearm"), move |warm_up| {
            Ok(if warm_up {
                r.run(k, iters / 4);
                0.0
            } else {
                r.time_ns(k, iters)
            })
        })
    });
    rearm.into()
}

fn pair_jobs(share: Share, _: &mut Vec<String>) -> Vec<Job> {
    let iters = share.size;
    PairCalls::ALL
        .iter()
        .flat_map(|&calls| PairSystem::ALL.map(|s| (calls, s)))
        .map(|(calls, s)| {
            let mut p = Pair::new();
            Job::timed(pair_measurement(calls, s), move |warm_up| {
                if warm_up {
                    p.run(s, calls, iters / 4).map(|()| 0.0)
                } else {
                    p.time_ns(s, calls, iters)
                }
            })
        })
        .collect()
}

fn pingpong_jobs(share: Share, _: &mut Vec<String>) -> Vec<Job> {
    let pingpong = PingPongSystem::ALL.map(|s| {
        Job::percentiles(
            pingpong_measurement(s, "latency_p50_ns"),
            share.size,
            move |n| {
                let (h, same_cpu_share) = s.measure(n)?;
                let d = Diagnostics {
                    empty_polls_per_msg: None,
                    full_refusals_per_msg: None,
                    room_wakes_per_msg: None,
                    same_cpu_share,
                };
                Ok((h, Some(d)))
            },
        )
    });
    pingpong.into()
}

fn cno_wake_jobs(share: Share, _: &mut Vec<String>) -> Vec<Job> {
    let proto = |s| cno_wake_measurement(s, "latency_p50_ns");
    let job = |s: CnoWakeSystem| {
        Job::percentiles(proto(s), share.size, move |n| Ok((s.measure(n)?, None)))
    };
    CnoWakeSystem::ALL.map(job).into()
}

fn cno_trigger_section(share: Share, notes: &mut Vec<String>) -> Vec<Job> {
    notes.push(
        "cno: atomic read-modify-writes per trigger are a design figure, not a measurement: two \
         beyond the post's reservation CAS while the waiter is awake (the slot word's CAS and the \
         ready ring's reservation CAS, core/src/cno/engine.rs), plus the ready ring's wake when \
         the waiter sleeps"
            .into(),
    );
    let cycle = share.run;
    cno_trigger_jobs()
        .into_iter()
        .map(|(v, n, s)| {
            Job::timed(cno_trigger_measurement(v, n, s), move |warm_up| {
                if warm_up {
                    Ok(0.0)
                } else {
                    s.cycle_ns(v, n, cycle)
                }
            })
        })
        .collect()
}

fn cno_throughput_section(share: Share, _: &mut Vec<String>) -> Vec<Job> {
    cno_throughput_jobs()
        .into_iter()
        .map(|(s, evds, feed)| {
            let proto = cno_throughput_measurement(s, evds, feed);
            Job::moving(proto, share.size, share.run, move |n| {
                s.run_throughput(evds, n, feed)
            })
        })
        .collect()
}

/// No poster waits for room in the throughput cases: a room wake there
/// would be a bug, noted.
fn no_room_wakes_in_throughput(run: &mut Run) {
    for m in run
        .c
        .measurements
        .iter()
        .filter(|m| m.case.starts_with("throughput/"))
    {
        let worst = m
            .diagnostics
            .iter()
            .flatten()
            .flatten()
            .filter_map(|d| d.room_wakes_per_msg)
            .fold(0.0, f64::max);
        if worst > 0.0 {
            run.notes.push(format!(
                "{} {}: {worst:.3} room wakes per event although no poster waits for room \
                 (non-blocking posts): the room signal woke someone it should not have",
                m.system, m.case
            ));
        }
    }
}

/// Count instructions with callgrind: per re-arm of the counted kinds and
/// per CNO cycle (and plain pair), each once, while the budget allows.
fn callgrind_section(plan: &Plan, started: Instant, exe: Option<&Path>, run: &mut Run) {
    let Some(exe) = exe else {
        run.notes
            .push("re-arm and cno instructions: no path to this binary, callgrind skipped".into());
        run.pb
            .inc((RearmKind::COUNTED.len() + CnoInsnKind::ALL.len()) as u64);
        return;
    };
    let counts = RearmKind::COUNTED
        .map(|k| {
            (
                "re-arm",
                rearm_measurement(k, "instructions_per_rearm"),
                vec!["rearm-insns", "--kind", k.cli_name()],
            )
        })
        .into_iter()
        .chain(CnoInsnKind::ALL.map(|k| {
            (
                "cno",
                cno_insns_measurement(k),
                vec!["cno-insns", "--kind", k.cli_name()],
            )
        }));
    for (what, proto, mode) in counts {
        run.pb.set_message(format!("callgrind {}", proto.system));
        if started.elapsed() + CALLGRIND_ESTIMATE > plan.budget {
            run.notes.push(format!(
                "{what} instructions: out of time budget, callgrind skipped"
            ));
        } else {
            match count_mode(exe, &mode) {
                Ok(insns) => run.c.push(proto, 0, insns, None),
                Err(e) => run
                    .notes
                    .push(format!("{what} instructions of {}: {e}", proto.system)),
            }
        }
        run.pb.inc(1);
    }
    let insns = |k: CnoInsnKind| {
        run.c
            .measurements
            .iter()
            .find(|m| m.case == cno::INSNS_CASE && m.system == k.name())
            .and_then(|m| m.rounds.first().copied().flatten())
    };
    let (cycle, bound, plain) = (
        insns(CnoInsnKind::CnoCycle),
        insns(CnoInsnKind::BoundPair),
        insns(CnoInsnKind::PlainPair),
    );
    if let (Some(cycle), Some(plain)) = (cycle, plain) {
        run.notes.push(format!(
            "cno instructions: a CNO cycle ({}) is {cycle:.1} instructions, {:.1} more than a \
             plain post+try_dequeue ({plain:.1})",
            CnoInsnKind::CnoCycle.name(),
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
    use crate::report::Role;

    #[test]
    fn quick_plan_is_smaller_than_full_and_within_20_s() {
        let (q, f) = (Plan::quick(), Plan::full());
        assert!(q.budget <= Duration::from_secs(20));
        assert!(f.budget <= Duration::from_secs(70));
        assert!(q.steps() < f.steps());
        for p in [&q, &f] {
            let seconds: f64 = p.sections.iter().map(|s| s.seconds).sum();
            assert!(seconds < p.budget.as_secs_f64());
        }
    }

    #[test]
    fn section_clock_always_allows_a_first_round() {
        let clock = SectionClock::new(Instant::now());
        assert!(clock.may_start_round(0));
        std::thread::sleep(Duration::from_millis(1));
        assert!(!clock.may_start_round(1));
    }

    #[test]
    fn collector_groups_rounds_by_case_system_and_metric() {
        let mut c = Collector::default();
        let m = |metric| Measurement::new("a", "s", Role::Evd, "busy/item", metric);
        c.push(m("ops_per_sec"), 0, 1.0, None);
        c.push(m("ops_per_sec"), 1, 2.0, None);
        c.push(m("latency_p50_ns"), 0, 3.0, None);
        assert_eq!(c.measurements.len(), 2);
        assert_eq!(c.measurements[0].rounds, [Some(1.0), Some(2.0)]);
        c.discard_round(1, |case| case == "a");
        assert_eq!(c.measurements[0].rounds, [Some(1.0)]);
        c.discard_round(0, |case| case == "b");
        assert_eq!(c.measurements[0].rounds, [Some(1.0)]);
    }

    #[test]
    fn skeletons_carry_threads_baselines_and_floors() {
        let m = throughput_measurement(Queue::TokioRecvMany, "throughput/u64/2p", 2);
        assert_eq!(m.threads, 3);
        assert_eq!(m.baseline.as_deref(), Some("evd batch+wait"));
        assert_eq!(m.consumer, "blocking/batch");
        let m = throughput_measurement(Queue::EvdArmWait, "throughput/u64/2p", 2);
        assert_eq!(m.baseline, None);
        let m = wake_measurement(WakeSystem::EvdWait, "latency_p50_ns");
        assert_eq!(m.floor.as_deref(), Some("floor: raw park/unpark"));
        assert_eq!(m.role, Role::Evd);
        let m = wake_measurement(WakeSystem::ParkFloor, "latency_p50_ns");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
        let m = rearm_measurement(RearmKind::EvdArm, "ns_per_rearm");
        assert_eq!(m.floor.as_deref(), Some("floor: one uncontended CAS"));
        assert_eq!(m.baseline.as_deref(), Some("evd arm (one CAS)"));
        let m = rearm_measurement(RearmKind::EvdArm, "instructions_per_rearm");
        assert_eq!(m.floor, None);
        let m = rearm_measurement(RearmKind::CasFloor, "ns_per_rearm");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
        let m = pingpong_measurement(PingPongSystem::EvdBatch, "latency_p99_ns");
        assert_eq!((m.case.as_str(), m.threads), (pingpong::CASE, 2));
        assert_eq!(m.baseline.as_deref(), Some("evd try_dequeue"));
        assert_eq!(m.floor.as_deref(), Some("floor: two atomics"));
        assert_eq!((m.role, m.consumer.as_str()), (Role::Evd, "busy/batch"));
        let m = pingpong_measurement(PingPongSystem::Floor, "latency_p50_ns");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
    }

    #[test]
    fn room_skeletons_carry_cases_threads_baselines_and_floors() {
        let m = room_measurement(RoomSystem::Flume, 64, 2);
        assert_eq!(m.case, "room/cap64/2p");
        assert_eq!(m.threads, 3);
        assert_eq!(m.baseline.as_deref(), Some("evd post_blocking+dequeue"));
        assert_eq!((m.role, m.consumer.as_str()), (Role::Peer, "blocking/item"));
        let m = room_measurement(RoomSystem::EvdBatchWait, 64, 2);
        assert_eq!((m.role, m.baseline), (Role::Evd, None));
        let m = room_wake_measurement(RoomWakeSystem::CrossbeamSend, "latency_p50_ns");
        assert_eq!(m.case, ROOM_WAKE_CASE);
        assert_eq!(m.floor.as_deref(), Some("floor: raw park/unpark"));
        assert_eq!(
            m.baseline.as_deref(),
            Some("evd post_blocking (park/unpark)")
        );
        let m = room_wake_measurement(RoomWakeSystem::ParkFloor, "latency_p50_ns");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
    }

    #[test]
    fn cno_skeletons_carry_cases_threads_baselines_and_floors() {
        let m = cno_throughput_measurement(CnoSystem::Epoll, 256, Feed::Batches);
        assert_eq!(m.case, "cno-throughput-batch/256");
        assert_eq!((m.threads, m.role), (3, Role::Peer));
        assert_eq!(m.baseline.as_deref(), Some(CnoSystem::EvdCno.name()));
        let f = with_metric(&m, cno::FAIRNESS_METRIC);
        assert_eq!((f.unit.as_str(), f.higher_is_better), ("ratio", false));
        assert_eq!(f.threads, 3);
        let m = cno_trigger_measurement(Variant::CrossThread, 1024, CnoSystem::Scan);
        assert_eq!(m.case, "cno-trigger-xthread/1024");
        assert_eq!((m.threads, m.unit.as_str()), (2, "ns"));
        let m = cno_wake_measurement(CnoWakeSystem::EvdCno, "latency_p50_ns");
        assert_eq!(m.floor.as_deref(), Some("floor: raw park/unpark"));
        assert_eq!(m.baseline.as_deref(), Some(CnoWakeSystem::EvdCno.name()));
        let m = cno_wake_measurement(CnoWakeSystem::EvdWait, "latency_p50_ns");
        assert_eq!((m.role, m.baseline), (Role::Evd, None));
        let m = cno_wake_measurement(CnoWakeSystem::ParkFloor, "latency_p50_ns");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
        let m = cno_insns_measurement(CnoInsnKind::PlainPair);
        assert_eq!(m.unit, "instructions");
        assert_eq!(m.baseline.as_deref(), Some(CnoInsnKind::CnoCycle.name()));
        assert_eq!(cno_trigger_jobs().len(), 24);
        assert_eq!(cno_throughput_jobs().len(), 12);
    }

    #[test]
    fn a_run_that_overstays_shrinks_the_next_and_none_grows() {
        let target = Duration::from_millis(35);
        let run = |messages: u64, ms: u64| RunStats {
            elapsed: Duration::from_millis(ms),
            messages,
            empty_polls: None,
            full_refusals: None,
            room_wakes: None,
            cpu_samples: 0,
            same_cpu: 0,
            served_max_over_min: None,
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

    #[test]
    fn interleave_keeps_job_order_and_leaves_earlier_records_alone() {
        let pb = ProgressBar::hidden();
        let mut run = Run {
            pb: &pb,
            c: Collector::default(),
            notes: Vec::new(),
        };
        let earlier = Measurement::new("earlier", "x", Role::Evd, "busy/item", "ops_per_sec");
        run.c.push(earlier, 0, 1.0, None);
        let jobs = [2, 1]
            .into_iter()
            .flat_map(|posters| [Queue::Kanal, Queue::EvdSingle].map(|q| (posters, q)))
            .map(|(posters, q)| {
                let proto = throughput_measurement(q, &throughput_case("u64", posters), posters);
                Job::moving(proto, 2_000, Duration::from_millis(1), move |n| {
                    q.run::<u64>(posters, n)
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        run.interleave(
            &Rounds {
                name: "throughput",
                rounds: 2,
                deadline,
                stride: 7,
            },
            jobs,
        );
        let got: Vec<(&str, &str)> = run
            .c
            .measurements
            .iter()
            .map(|m| (m.case.as_str(), m.system.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("earlier", "x"),
                ("throughput/u64/2p", "kanal recv"),
                ("throughput/u64/2p", "evd try_dequeue"),
                ("throughput/u64/1p", "kanal recv"),
                ("throughput/u64/1p", "evd try_dequeue"),
            ],
            "{:?}",
            run.notes
        );
        assert!(run.c.measurements[1..].iter().all(|m| m.rounds.len() == 2));
    }
}
