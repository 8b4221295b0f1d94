//! The side-by-side comparison behind `evd-bench compare`: every system,
//! every case, interleaved round-robin within one run so that drift on a
//! noisy machine hits all systems alike, inside a fixed time budget.

use crate::cno::{self, CnoInsnKind, CnoSystem, CnoWakeSystem, Feed, Variant};
use crate::latency::WakeSystem;
use crate::pair::{Pair, PairCalls, PairSystem};
use crate::payload::Event64;
use crate::pingpong::{self, PingPongSystem};
use crate::rearm::{count_instructions, count_mode, Rearm, RearmKind};
use crate::report::{self, Diagnostics, Machine, Measurement, Report, Role};
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

/// How much of everything to run, and within what time.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `--quick`.
    pub quick: bool,
    /// Hard upper bound of the whole run; sections stop adding rounds before it.
    pub budget: Duration,
    /// Share of the budget each section may use: throughput (calibration
    /// included), room throughput (calibration included), wake latency,
    /// room-wake latency, re-arm timing, single-thread pairs, busy
    /// ping-pong, CNO wake latency, CNO trigger cost, CNO throughput
    /// (calibration included); what a section leaves unused goes to the
    /// next. The rest is for callgrind.
    pub shares: [f64; 10],
    /// Interleaved throughput rounds (after one calibration round).
    pub throughput_rounds: usize,
    /// Events moved by each calibration run.
    pub calibration_messages: u64,
    /// Target wall time of one measured throughput run.
    pub throughput_run: Duration,
    /// Interleaved room throughput rounds (after one calibration round).
    pub room_rounds: usize,
    /// Events moved by each room calibration run.
    pub room_calibration_messages: u64,
    /// Target wall time of one measured room run.
    pub room_run: Duration,
    /// Interleaved wake-latency rounds (also the room-wake latency's).
    pub latency_rounds: usize,
    /// Wakes measured per system and round (also the room-wake latency's).
    pub latency_samples: u64,
    /// Interleaved re-arm timing rounds.
    pub rearm_rounds: usize,
    /// Re-arms per timing round.
    pub rearm_iters: u64,
    /// Interleaved single-thread pair rounds.
    pub pair_rounds: usize,
    /// Post+dequeue pairs per round.
    pub pair_iters: u64,
    /// Interleaved busy ping-pong rounds.
    pub pingpong_rounds: usize,
    /// Round trips measured per system and round (after
    /// [`pingpong::WARMUP`] unrecorded ones).
    pub pingpong_samples: u64,
    /// Interleaved CNO trigger-cost rounds (the CNO wake latency has the
    /// wake latency's rounds and samples).
    pub cno_trigger_rounds: usize,
    /// Timed length of one trigger-cost measurement (after a warm-up of a
    /// quarter of it).
    pub cno_trigger_run: Duration,
    /// Interleaved CNO throughput rounds (after one calibration round).
    pub cno_throughput_rounds: usize,
    /// Events moved by each CNO throughput calibration run.
    pub cno_calibration_messages: u64,
    /// Target wall time of one measured CNO throughput run.
    pub cno_throughput_run: Duration,
    /// Count re-arm instructions with callgrind, if valgrind is installed.
    pub callgrind: bool,
}

impl Plan {
    /// The full comparison: at most 70 s.
    pub fn full() -> Self {
        // Seconds per section, in the order of `shares`; callgrind has the
        // rest of the budget.
        const SECONDS: [f64; 10] = [30.0, 7.8, 5.6, 2.8, 1.7, 1.7, 2.0, 1.5, 3.5, 3.5];
        Plan {
            quick: false,
            budget: Duration::from_secs(68),
            shares: SECONDS.map(|s| s / 68.0),
            throughput_rounds: 7,
            calibration_messages: 40_000,
            throughput_run: Duration::from_millis(35),
            room_rounds: 7,
            room_calibration_messages: 8_000,
            room_run: Duration::from_millis(25),
            latency_rounds: 5,
            latency_samples: 1_500,
            rearm_rounds: 7,
            rearm_iters: 2_000_000,
            pair_rounds: 7,
            pair_iters: 1_000_000,
            pingpong_rounds: 7,
            pingpong_samples: 40_000,
            cno_trigger_rounds: 7,
            cno_trigger_run: Duration::from_millis(10),
            cno_throughput_rounds: 7,
            cno_calibration_messages: 40_000,
            cno_throughput_run: Duration::from_millis(25),
            callgrind: true,
        }
    }

    /// `--quick`: at most 20 s.
    pub fn quick() -> Self {
        // Seconds per section, in the order of `shares`; callgrind has the
        // rest of the budget.
        const SECONDS: [f64; 10] = [5.6, 1.7, 2.0, 0.85, 0.3, 0.3, 0.5, 0.7, 0.8, 1.0];
        Plan {
            quick: true,
            budget: Duration::from_millis(18_500),
            shares: SECONDS.map(|s| s / 18.5),
            throughput_rounds: 3,
            calibration_messages: 10_000,
            throughput_run: Duration::from_millis(12),
            room_rounds: 3,
            room_calibration_messages: 3_000,
            room_run: Duration::from_millis(8),
            latency_rounds: 3,
            latency_samples: 400,
            rearm_rounds: 3,
            rearm_iters: 1_000_000,
            pair_rounds: 3,
            pair_iters: 500_000,
            pingpong_rounds: 3,
            pingpong_samples: 10_000,
            cno_trigger_rounds: 3,
            cno_trigger_run: Duration::from_millis(3),
            cno_throughput_rounds: 3,
            cno_calibration_messages: 10_000,
            cno_throughput_run: Duration::from_millis(8),
            callgrind: true,
        }
    }

    fn steps(&self) -> u64 {
        let per_payload: usize = POSTERS
            .iter()
            .map(|&n| Queue::ALL.len() + Queue::FLOORS.iter().filter(|q| q.runs_with(n)).count())
            .sum();
        let tp = (PAYLOADS.len() * per_payload) as u64 * (1 + self.throughput_rounds as u64);
        let rm = (room::CAPACITIES.len() * room::POSTERS.len() * RoomSystem::ALL.len()) as u64
            * (1 + self.room_rounds as u64);
        let lat =
            (self.latency_rounds * (WakeSystem::ALL.len() + RoomWakeSystem::ALL.len())) as u64;
        let re = (self.rearm_rounds * RearmKind::ALL.len()) as u64;
        let pair = (self.pair_rounds * PairSystem::ALL.len() * PairCalls::ALL.len()) as u64;
        let pp = (self.pingpong_rounds * PingPongSystem::ALL.len()) as u64;
        let cno_lat = (self.latency_rounds * CnoWakeSystem::ALL.len()) as u64;
        let cno_trig = (self.cno_trigger_rounds * cno_trigger_jobs().len()) as u64;
        let cno_tp = cno_throughput_jobs().len() as u64 * (1 + self.cno_throughput_rounds as u64);
        let cg = if self.callgrind {
            (RearmKind::COUNTED.len() + CnoInsnKind::ALL.len()) as u64
        } else {
            0
        };
        tp + rm + lat + re + pair + pp + cno_lat + cno_trig + cno_tp + cg
    }
}

/// The case name of a throughput case.
pub fn throughput_case(payload: &str, posters: usize) -> String {
    format!("throughput/{payload}/{posters}p")
}

/// One system in one case of a section that moves events (throughput,
/// room): what it is called, how to run it, its record skeleton.
trait RunJob: Copy {
    /// See [`Measurement::system`].
    fn system(self) -> &'static str;
    /// See [`Measurement::case`].
    fn case(self) -> String;
    /// Move `messages` events.
    fn run(self, messages: u64) -> Result<RunStats, String>;
    /// The record skeleton of its row.
    fn measurement(self) -> Measurement;
}

/// A throughput job: one [`Queue`], payload and poster count.
#[derive(Clone, Copy)]
struct ThroughputJob {
    payload: &'static str,
    posters: usize,
    q: Queue,
}

impl RunJob for ThroughputJob {
    fn system(self) -> &'static str {
        self.q.name()
    }
    fn case(self) -> String {
        throughput_case(self.payload, self.posters)
    }
    fn run(self, messages: u64) -> Result<RunStats, String> {
        match self.payload {
            "u64" => self.q.run::<u64>(self.posters, messages),
            _ => self.q.run::<Event64>(self.posters, messages),
        }
    }
    fn measurement(self) -> Measurement {
        throughput_measurement(self.q, &self.case(), self.posters)
    }
}

/// A room job: one [`RoomSystem`], capacity and poster count, with the
/// consumer work every room job of the run shares.
#[derive(Clone, Copy)]
struct RoomJob {
    capacity: usize,
    posters: usize,
    s: RoomSystem,
    work: Work,
}

impl RunJob for RoomJob {
    fn system(self) -> &'static str {
        self.s.name()
    }
    fn case(self) -> String {
        room_case(self.capacity, self.posters)
    }
    fn run(self, messages: u64) -> Result<RunStats, String> {
        self.s.run(self.capacity, self.posters, messages, self.work)
    }
    fn measurement(self) -> Measurement {
        let mut m = Measurement::new(
            &self.case(),
            self.s.name(),
            role(self.s.is_evd()),
            self.s.style().label(),
            "ops_per_sec",
        );
        m.baseline = self.s.baseline().map(|b| b.name().into());
        m.threads = self.posters + 1;
        m
    }
}

/// A CNO throughput job: one [`CnoSystem`], EVD count and feed.
#[derive(Clone, Copy)]
struct CnoThroughputJob {
    evds: usize,
    feed: Feed,
    s: CnoSystem,
}

impl RunJob for CnoThroughputJob {
    fn system(self) -> &'static str {
        self.s.name()
    }
    fn case(self) -> String {
        self.feed.case(self.evds)
    }
    fn run(self, messages: u64) -> Result<RunStats, String> {
        self.s.run_throughput(self.evds, messages, self.feed)
    }
    fn measurement(self) -> Measurement {
        // The waiter sleeps when nothing is ready and drains a batch per EVD.
        let mut m = Measurement::new(
            &self.case(),
            self.s.name(),
            role(self.s.is_evd()),
            "blocking/batch",
            "ops_per_sec",
        );
        m.baseline = Some(CnoSystem::EvdCno.name().into());
        m.threads = cno::THROUGHPUT_POSTERS + 1;
        m
    }
}

/// Every CNO throughput job, in table order.
fn cno_throughput_jobs() -> Vec<CnoThroughputJob> {
    Feed::ALL
        .iter()
        .flat_map(|&feed| cno::THROUGHPUT_EVDS.map(|evds| (feed, evds)))
        .flat_map(|(feed, evds)| CnoSystem::ALL.map(|s| CnoThroughputJob { evds, feed, s }))
        .collect()
}

/// Every CNO trigger-cost job, in table order.
fn cno_trigger_jobs() -> Vec<(Variant, usize, CnoSystem)> {
    Variant::ALL
        .iter()
        .flat_map(|&v| cno::TRIGGER_EVDS.map(|n| (v, n)))
        .flat_map(|(v, n)| CnoSystem::ALL.map(|s| (v, n, s)))
        .collect()
}

/// The record skeleton of a trigger-cost row.
fn cno_trigger_measurement(v: Variant, n: usize, s: CnoSystem) -> Measurement {
    let mut m = Measurement::new(
        &v.case(n),
        s.name(),
        role(s.is_evd()),
        v.consumer(),
        cno::CYCLE_METRIC,
    );
    m.baseline = Some(CnoSystem::EvdCno.name().into());
    m.threads = v.threads();
    m
}

fn role(evd: bool) -> Role {
    if evd {
        Role::Evd
    } else {
        Role::Peer
    }
}

/// The record skeleton of a throughput row.
fn throughput_measurement(q: Queue, case: &str, posters: usize) -> Measurement {
    let r = if q.is_floor() {
        Role::Floor
    } else {
        role(q.is_evd())
    };
    let mut m = Measurement::new(case, q.name(), r, q.style().label(), "ops_per_sec");
    m.baseline = q.baseline().map(|b| b.name().into());
    // A busy evd row faster than the ring that does no RMW at all is noise.
    if q == Queue::EvdSingle && posters == 1 {
        m.floor = Some(Queue::FloorStampRing.name().into());
    }
    m.threads = posters + 1;
    m
}

/// One system of a latency section (wake latency, room-wake latency).
trait LatencyJob: Copy {
    /// See [`Measurement::system`].
    fn name(self) -> &'static str;
    /// Measure `samples` latencies, in ns, with the run's diagnostics if it
    /// has any.
    fn measure(self, samples: u64) -> Result<(Histogram<u64>, Option<Diagnostics>), String>;
    /// The record skeleton of its row for `metric`.
    fn measurement(self, metric: &str) -> Measurement;
}

impl LatencyJob for WakeSystem {
    fn name(self) -> &'static str {
        WakeSystem::name(self)
    }
    fn measure(self, samples: u64) -> Result<(Histogram<u64>, Option<Diagnostics>), String> {
        WakeSystem::measure(self, samples).map(|h| (h, None))
    }
    fn measurement(self, metric: &str) -> Measurement {
        latency_measurement(self, metric)
    }
}

impl LatencyJob for RoomWakeSystem {
    fn name(self) -> &'static str {
        RoomWakeSystem::name(self)
    }
    fn measure(self, samples: u64) -> Result<(Histogram<u64>, Option<Diagnostics>), String> {
        RoomWakeSystem::measure(self, samples).map(|h| (h, None))
    }
    fn measurement(self, metric: &str) -> Measurement {
        let r = if self.is_floor() {
            Role::Floor
        } else {
            role(self.is_evd())
        };
        // The one that sleeps is the poster, in a blocking send.
        let mut m = Measurement::new(ROOM_WAKE_CASE, self.name(), r, "blocking", metric);
        m.baseline = Some(self.baseline().name().into());
        m.floor = self.floor().map(|f| f.name().into());
        m.threads = 2;
        m
    }
}

impl LatencyJob for CnoWakeSystem {
    fn name(self) -> &'static str {
        CnoWakeSystem::name(self)
    }
    fn measure(self, samples: u64) -> Result<(Histogram<u64>, Option<Diagnostics>), String> {
        CnoWakeSystem::measure(self, samples).map(|h| (h, None))
    }
    fn measurement(self, metric: &str) -> Measurement {
        let r = if self.is_floor() {
            Role::Floor
        } else {
            role(self.is_evd())
        };
        let mut m = Measurement::new(cno::WAKE_CASE, self.name(), r, "blocking", metric);
        m.baseline = self.baseline().map(|b| b.name().into());
        m.floor = self.floor().map(|f| f.name().into());
        m.threads = 2;
        m
    }
}

impl LatencyJob for PingPongSystem {
    fn name(self) -> &'static str {
        PingPongSystem::name(self)
    }
    fn measure(self, samples: u64) -> Result<(Histogram<u64>, Option<Diagnostics>), String> {
        let (h, same_cpu_share) = PingPongSystem::measure(self, samples)?;
        let d = Diagnostics {
            empty_polls_per_msg: None,
            full_refusals_per_msg: None,
            room_wakes_per_msg: None,
            same_cpu_share,
        };
        Ok((h, Some(d)))
    }
    fn measurement(self, metric: &str) -> Measurement {
        let r = if self.is_floor() {
            Role::Floor
        } else {
            role(self.is_evd())
        };
        let mut m = Measurement::new(pingpong::CASE, self.name(), r, self.consumer(), metric);
        m.baseline = Some(self.baseline().name().into());
        m.floor = self.floor().map(|f| f.name().into());
        m.threads = 2;
        m
    }
}

/// The record skeleton of a wake-latency row.
fn latency_measurement(sys: WakeSystem, metric: &str) -> Measurement {
    let r = if sys.is_floor() {
        Role::Floor
    } else {
        role(sys.is_evd())
    };
    let mut m = Measurement::new("wake-latency", sys.name(), r, sys.consumer(), metric);
    m.baseline = Some(sys.baseline().name().into());
    m.floor = sys.floor().map(|f| f.name().into());
    m.threads = sys.threads();
    m
}

/// The record skeleton of a single-thread row (`case` `rearm` or the pair case).
fn single_thread_measurement(
    case: &str,
    system: &str,
    evd: bool,
    metric: &str,
    baseline: &str,
) -> Measurement {
    let mut m = Measurement::new(case, system, role(evd), "single-thread", metric);
    m.baseline = Some(baseline.into());
    m
}

/// Collected rounds, kept in first-seen order.
#[derive(Default)]
struct Collector {
    measurements: Vec<Measurement>,
}

impl Collector {
    /// Add round `round`'s value to the measurement `proto` describes
    /// (same case, system and metric), creating it from `proto` if new.
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
    let mut c = Collector::default();
    let mut notes = Vec::new();
    let load1: f64 = machine
        .load_average
        .split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(0.0);
    if machine.logical_cpus > 0 && load1 >= 0.5 {
        notes.push(format!(
            "load average {} at the start on {} CPUs: other work competed for the CPUs",
            machine.load_average, machine.logical_cpus
        ));
    }
    // Section i ends by the run's start plus the shares up to and including
    // its own, so time an earlier section did not use goes to the next.
    let deadline = |i: usize| started + plan.budget.mul_f64(plan.shares[..=i].iter().sum::<f64>());

    let mut times = Vec::new();
    let mut lap = Instant::now();
    let mut time = |name: &str| {
        times.push(format!("{name} {:.1} s", lap.elapsed().as_secs_f64()));
        lap = Instant::now();
    };
    throughput_section(plan, deadline(0), &pb, &mut c, &mut notes);
    time("throughput");
    room_section(plan, deadline(1), &pb, &mut c, &mut notes);
    time("room");
    let wake = Latency {
        section: "wake latency",
        case: "wake-latency",
        rounds: plan.latency_rounds,
        samples: plan.latency_samples,
    };
    latency_section(deadline(2), &pb, &mut c, &mut notes, wake, &WakeSystem::ALL);
    time("wake latency");
    let room_wake = Latency {
        section: "room-wake latency",
        case: ROOM_WAKE_CASE,
        rounds: plan.latency_rounds,
        samples: plan.latency_samples,
    };
    latency_section(
        deadline(3),
        &pb,
        &mut c,
        &mut notes,
        room_wake,
        &RoomWakeSystem::ALL,
    );
    time("room-wake latency");
    rearm_section(plan, deadline(4), &pb, &mut c, &mut notes);
    time("re-arm");
    pair_section(plan, deadline(5), &pb, &mut c, &mut notes);
    time("single-thread pair");
    let pingpong = Latency {
        section: "busy ping-pong",
        case: pingpong::CASE,
        rounds: plan.pingpong_rounds,
        samples: plan.pingpong_samples,
    };
    latency_section(
        deadline(6),
        &pb,
        &mut c,
        &mut notes,
        pingpong,
        &PingPongSystem::ALL,
    );
    time("busy ping-pong");
    let cno_wake = Latency {
        section: "cno wake latency",
        case: cno::WAKE_CASE,
        rounds: plan.latency_rounds,
        samples: plan.latency_samples,
    };
    latency_section(
        deadline(7),
        &pb,
        &mut c,
        &mut notes,
        cno_wake,
        &CnoWakeSystem::ALL,
    );
    time("cno wake latency");
    cno_trigger_section(plan, deadline(8), &pb, &mut c, &mut notes);
    time("cno trigger");
    let spec = RunSection {
        section: "cno throughput",
        prefix: "cno-throughput",
        rounds: plan.cno_throughput_rounds,
        calibration_messages: plan.cno_calibration_messages,
        run: plan.cno_throughput_run,
    };
    run_section(
        &spec,
        deadline(9),
        &pb,
        &mut c,
        &mut notes,
        &cno_throughput_jobs(),
    );
    time("cno throughput");
    if plan.callgrind {
        callgrind_section(plan, started, exe, &pb, &mut c, &mut notes);
        time("callgrind");
    }
    pb.finish_and_clear();
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

fn throughput_section(
    plan: &Plan,
    deadline: Instant,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
) {
    let jobs: Vec<ThroughputJob> = PAYLOADS
        .iter()
        .flat_map(|p| POSTERS.iter().map(move |n| (*p, *n)))
        .flat_map(|(payload, posters)| {
            Queue::ALL
                .into_iter()
                .chain(Queue::FLOORS)
                .filter(move |q| q.runs_with(posters))
                .map(move |q| ThroughputJob {
                    payload,
                    posters,
                    q,
                })
        })
        .collect();
    let spec = RunSection {
        section: "throughput",
        prefix: "throughput/",
        rounds: plan.throughput_rounds,
        calibration_messages: plan.calibration_messages,
        run: plan.throughput_run,
    };
    run_section(&spec, deadline, pb, c, notes, &jobs);
    // No poster waits for room here: a room wake would be a bug.
    for m in c
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
            notes.push(format!(
                "{} {}: {worst:.3} room wakes per event although no poster waits for room \
                 (non-blocking posts): the room signal woke someone it should not have",
                m.system, m.case
            ));
        }
    }
}

fn room_section(
    plan: &Plan,
    deadline: Instant,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
) {
    let work = Work::calibrate(room::WORK_NS);
    notes.push(format!(
        "room: the consumer's work per event is {} black_box iterations ({:.0} ns measured at \
         the start, calibrated to {:.0} ns), the same for every system; posters: {}",
        work.iters,
        work.ns_per_event(),
        room::WORK_NS,
        room::ROOM_POLICY
    ));
    let jobs: Vec<RoomJob> = room::CAPACITIES
        .iter()
        .flat_map(|cap| room::POSTERS.iter().map(move |n| (*cap, *n)))
        .flat_map(|(capacity, posters)| {
            RoomSystem::ALL.map(|s| RoomJob {
                capacity,
                posters,
                s,
                work,
            })
        })
        .collect();
    let spec = RunSection {
        section: "room",
        prefix: "room/",
        rounds: plan.room_rounds,
        calibration_messages: plan.room_calibration_messages,
        run: plan.room_run,
    };
    run_section(&spec, deadline, pb, c, notes, &jobs);
}

/// What a section that moves events runs, besides its jobs.
struct RunSection {
    /// Its name in notes.
    section: &'static str,
    /// The start of all its case names.
    prefix: &'static str,
    /// Interleaved rounds after the calibration.
    rounds: usize,
    /// Events of each calibration run.
    calibration_messages: u64,
    /// Target wall time of one measured run.
    run: Duration,
}

/// Calibrate every job (also the warm-up), then run `spec.rounds`
/// interleaved rounds of all of them within `deadline`, in an order that
/// rotates every round; leave the section's records in job order.
fn run_section<J: RunJob>(
    spec: &RunSection,
    deadline: Instant,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
    jobs: &[J],
) {
    // The calibration counts against the section's share.
    let mut clock = SectionClock::new(deadline);
    let first = c.measurements.len();
    // Calibration (also the warm-up): how many events make one run last
    // `spec.run` for this system and case.
    let mut sizes = Vec::new();
    for &job in jobs {
        pb.set_message(format!("calibrating {} {}", job.system(), job.case()));
        match job.run(spec.calibration_messages) {
            Ok(run) => {
                let msgs =
                    (run.ops_per_sec() * spec.run.as_secs_f64()).clamp(5_000.0, 200_000_000.0);
                sizes.push((job, msgs as u64));
            }
            Err(e) => notes.push(format!(
                "{} {}: calibration failed: {e}",
                job.system(),
                job.case()
            )),
        }
        pb.inc(1);
    }
    clock.round_done(clock.start);
    // The calibration is one round's worth of work, so it stands for the
    // first measured round's duration.
    let mut rounds_run = 0;
    for round in 0..spec.rounds {
        if !clock.may_start_round(round) {
            break;
        }
        let round_start = Instant::now();
        // Rotate the order every round so no system always runs first.
        let k = sizes.len();
        for i in 0..k {
            if clock.must_cut(round) {
                c.discard_round(round, |case| case.starts_with(spec.prefix));
                notes.push(format!(
                    "{}: round {} passed the time budget after {i} of {k} runs and was discarded",
                    spec.section,
                    round + 1
                ));
                // `skipped` counts the whole round as not run.
                pb.set_position(pb.position().saturating_sub(i as u64));
                break;
            }
            let slot = (i + round * 7) % k;
            let (job, msgs) = sizes[slot];
            let case = job.case();
            pb.set_message(format!("round {} {} {}", round + 1, job.system(), case));
            match job.run(msgs) {
                Ok(run) => {
                    sizes[slot].1 = resized(msgs, &run, spec.run);
                    c.push(
                        job.measurement(),
                        round,
                        run.ops_per_sec(),
                        Some(Diagnostics {
                            empty_polls_per_msg: run.empty_polls_per_msg(),
                            full_refusals_per_msg: run.full_refusals_per_msg(),
                            room_wakes_per_msg: run.room_wakes_per_msg(),
                            same_cpu_share: run.same_cpu_share(),
                        }),
                    );
                    if let Some(spread) = run.served_max_over_min {
                        c.push(
                            with_metric(job.measurement(), cno::FAIRNESS_METRIC),
                            round,
                            spread,
                            None,
                        );
                    }
                }
                Err(e) => notes.push(format!("{} {case} round {}: {e}", job.system(), round + 1)),
            }
            pb.inc(1);
        }
        if clock.must_cut(round) {
            break;
        }
        clock.round_done(round_start);
        rounds_run += 1;
    }
    skipped(
        pb,
        notes,
        spec.section,
        rounds_run,
        spec.rounds,
        sizes.len(),
    );
    // Keep the table in case order then system order (the jobs' order),
    // whatever order the rotated rounds first met them in.
    let rank = |m: &Measurement| {
        jobs.iter()
            .position(|j| j.case() == m.case && j.system() == m.system)
            .unwrap_or(usize::MAX)
    };
    c.measurements[first..].sort_by_cached_key(rank);
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

/// `m` for another metric of the same row (its unit and direction follow).
fn with_metric(m: Measurement, metric: &str) -> Measurement {
    let mut out = Measurement::new(&m.case, &m.system, m.role, &m.consumer, metric);
    out.baseline = m.baseline;
    out.threads = m.threads;
    out.floor = m.floor;
    out
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

/// A latency section: its name in notes, its case, its interleaved rounds
/// and the samples of each system per round.
#[derive(Clone, Copy)]
struct Latency {
    section: &'static str,
    case: &'static str,
    rounds: usize,
    samples: u64,
}

fn latency_section<S: LatencyJob>(
    deadline: Instant,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
    what: Latency,
    systems: &[S],
) {
    let mut clock = SectionClock::new(deadline);
    let mut rounds_run = 0;
    for round in 0..what.rounds {
        if !clock.may_start_round(round) {
            break;
        }
        let round_start = Instant::now();
        for i in 0..systems.len() {
            if clock.must_cut(round) {
                c.discard_round(round, |case| case == what.case);
                notes.push(format!(
                    "{}: round {} passed the time budget after {i} of {} systems and was discarded",
                    what.section,
                    round + 1,
                    systems.len()
                ));
                pb.set_position(pb.position().saturating_sub(i as u64));
                break;
            }
            let sys = systems[(i + round) % systems.len()];
            pb.set_message(format!(
                "round {} {} {}",
                round + 1,
                what.section,
                sys.name()
            ));
            match sys.measure(what.samples) {
                Ok((h, diag)) => {
                    for (metric, q) in [
                        ("latency_p50_ns", 0.50),
                        ("latency_p99_ns", 0.99),
                        ("latency_p999_ns", 0.999),
                    ] {
                        c.push(
                            sys.measurement(metric),
                            round,
                            h.value_at_quantile(q) as f64,
                            diag,
                        );
                    }
                }
                Err(e) => notes.push(format!(
                    "{} {} round {}: {e}",
                    what.section,
                    sys.name(),
                    round + 1
                )),
            }
            pb.inc(1);
        }
        if clock.must_cut(round) {
            break;
        }
        clock.round_done(round_start);
        rounds_run += 1;
    }
    skipped(
        pb,
        notes,
        what.section,
        rounds_run,
        what.rounds,
        systems.len(),
    );
    // Round 0 starts with the first system and pushes p50, p99, p99.9 in
    // that order, so first-seen order is already the table order.
}

/// The trigger-cost cases: every (variant, EVD count, system) once per
/// round, in an order that rotates every round; the records in job order.
fn cno_trigger_section(
    plan: &Plan,
    deadline: Instant,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
) {
    notes.push(
        "cno: atomic read-modify-writes per trigger are a design figure, not a measurement: two \
         beyond the post's reservation CAS while the waiter is awake (the slot word's CAS and the \
         ready ring's reservation CAS, core/src/cno/engine.rs), plus the ready ring's wake when \
         the waiter sleeps"
            .into(),
    );
    let jobs = cno_trigger_jobs();
    let k = jobs.len();
    let first = c.measurements.len();
    let mut clock = SectionClock::new(deadline);
    let mut rounds_run = 0;
    for round in 0..plan.cno_trigger_rounds {
        if !clock.may_start_round(round) {
            break;
        }
        let round_start = Instant::now();
        for i in 0..k {
            if clock.must_cut(round) {
                c.discard_round(round, |case| case.starts_with("cno-trigger"));
                notes.push(format!(
                    "cno trigger: round {} passed the time budget after {i} of {k} runs and was discarded",
                    round + 1
                ));
                pb.set_position(pb.position().saturating_sub(i as u64));
                break;
            }
            let (v, n, s) = jobs[(i + round * 7) % k];
            pb.set_message(format!("round {} {} {}", round + 1, s.name(), v.case(n)));
            match s.cycle_ns(v, n, plan.cno_trigger_run) {
                Ok(ns) => c.push(cno_trigger_measurement(v, n, s), round, ns, None),
                Err(e) => notes.push(format!(
                    "{} {} round {}: {e}",
                    s.name(),
                    v.case(n),
                    round + 1
                )),
            }
            pb.inc(1);
        }
        if clock.must_cut(round) {
            break;
        }
        clock.round_done(round_start);
        rounds_run += 1;
    }
    skipped(
        pb,
        notes,
        "cno trigger",
        rounds_run,
        plan.cno_trigger_rounds,
        k,
    );
    let rank = |m: &Measurement| {
        jobs.iter()
            .position(|&(v, n, s)| v.case(n) == m.case && s.name() == m.system)
            .unwrap_or(usize::MAX)
    };
    c.measurements[first..].sort_by_cached_key(rank);
}

fn rearm_section(
    plan: &Plan,
    deadline: Instant,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
) {
    notes.push(format!(
        "rearm: each timed loop runs {} iterations per round, the kinds interleaved in the same \
         rounds. `{}`: one arm() on an empty ring that is already armed (it loads the head, the \
         head slot and the state word, and its one CAS installs the armed word it found: it \
         succeeds, and no iteration disarms); `{}`: the same arm(), then one try_dequeue() that \
         finds nothing; `{}`: a Relaxed load and one compare_exchange (AcqRel, as arm's) that \
         succeeds, installing the word with its armed bit set, on a cache-padded AtomicU64 no \
         other thread touches: one RMW per iteration, as the arm loop",
        plan.rearm_iters,
        RearmKind::EvdArm.name(),
        RearmKind::ArmThenPoll.name(),
        RearmKind::CasFloor.name(),
    ));
    let mut r = Rearm::new();
    for k in RearmKind::ALL {
        r.run(k, plan.rearm_iters / 4); // warm-up
    }
    let mut clock = SectionClock::new(deadline);
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
            c.push(rearm_measurement(k, "ns_per_rearm"), round, ns, None);
            pb.inc(1);
        }
        clock.round_done(round_start);
    }
}

/// The record skeleton of a re-arm row: every kind against evd's arm; in
/// ns, the re-arms have the bare CAS as their floor.
fn rearm_measurement(k: RearmKind, metric: &str) -> Measurement {
    let mut m = single_thread_measurement(
        "rearm",
        k.name(),
        k == RearmKind::EvdArm,
        metric,
        RearmKind::EvdArm.name(),
    );
    if k.is_floor() {
        m.role = Role::Floor;
    } else if metric == "ns_per_rearm" {
        m.floor = Some(RearmKind::CasFloor.name().into());
    }
    m
}

fn pair_section(
    plan: &Plan,
    deadline: Instant,
    pb: &ProgressBar,
    c: &mut Collector,
    notes: &mut Vec<String>,
) {
    let mut p = Pair::new();
    let runs: Vec<(PairCalls, PairSystem)> = PairCalls::ALL
        .iter()
        .flat_map(|&c| PairSystem::ALL.iter().map(move |&s| (c, s)))
        .collect();
    for &(c, s) in &runs {
        let _ = p.run(s, c, plan.pair_iters / 4); // warm-up
    }
    let mut clock = SectionClock::new(deadline);
    let n = runs.len();
    for round in 0..plan.pair_rounds {
        if !clock.may_start_round(round) {
            pb.inc(((plan.pair_rounds - round) * n) as u64);
            notes.push(format!(
                "{PAIR_CASE}: {round} of {} rounds fitted in the time budget",
                plan.pair_rounds
            ));
            break;
        }
        let round_start = Instant::now();
        for i in 0..n {
            let (calls, s) = runs[(i + round) % n];
            pb.set_message(format!("round {} {} {}", round + 1, calls.case(), s.name()));
            match p.time_ns(s, calls, plan.pair_iters) {
                Ok(ns) => c.push(
                    single_thread_measurement(
                        calls.case(),
                        s.name(),
                        s == PairSystem::Evd,
                        "ns_per_pair",
                        PairSystem::Evd.name(),
                    ),
                    round,
                    ns,
                    None,
                ),
                Err(e) => notes.push(format!("{} round {}: {e}", calls.case(), round + 1)),
            }
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
        notes.push("re-arm and cno instructions: no path to this binary, callgrind skipped".into());
        pb.inc((RearmKind::COUNTED.len() + CnoInsnKind::ALL.len()) as u64);
        return;
    };
    for k in RearmKind::COUNTED {
        pb.set_message(format!("callgrind {}", k.name()));
        if started.elapsed() + CALLGRIND_ESTIMATE > plan.budget {
            notes.push("re-arm instructions: out of time budget, callgrind skipped".into());
            pb.inc(1);
            continue;
        }
        match count_instructions(exe, k) {
            Ok(insns) => c.push(
                rearm_measurement(k, "instructions_per_rearm"),
                0,
                insns,
                None,
            ),
            Err(e) => notes.push(format!("re-arm instructions of {}: {e}", k.name())),
        }
        pb.inc(1);
    }
    for k in CnoInsnKind::ALL {
        pb.set_message(format!("callgrind {}", k.name()));
        if started.elapsed() + CALLGRIND_ESTIMATE > plan.budget {
            notes.push("cno instructions: out of time budget, callgrind skipped".into());
            pb.inc(1);
            continue;
        }
        match count_mode(exe, &["cno-insns", "--kind", k.cli_name()]) {
            Ok(insns) => c.push(cno_insns_measurement(k), 0, insns, None),
            Err(e) => notes.push(format!("cno instructions of {}: {e}", k.name())),
        }
        pb.inc(1);
    }
    let insns = |k: CnoInsnKind| {
        c.measurements
            .iter()
            .find(|m| m.case == cno::INSNS_CASE && m.system == k.name())
            .and_then(|m| m.rounds.first().copied().flatten())
    };
    if let (Some(cycle), Some(plain)) =
        (insns(CnoInsnKind::CnoCycle), insns(CnoInsnKind::PlainPair))
    {
        notes.push(format!(
            "cno instructions: a CNO cycle ({}) is {cycle:.1} instructions, {:.1} more than a \
             plain post+try_dequeue ({plain:.1})",
            CnoInsnKind::CnoCycle.name(),
            cycle - plain
        ));
    }
    if let (Some(bound), Some(plain)) =
        (insns(CnoInsnKind::BoundPair), insns(CnoInsnKind::PlainPair))
    {
        notes.push(format!(
            "cno instructions: a post+try_dequeue on an EVD bound to a CNO but not enabled is              {bound:.1} instructions, against {plain:.1} on an unbound EVD"
        ));
    }
}

/// The record skeleton of a CNO instruction count: the CNO cycle is the
/// reference, so the plain pair's ratio is plain ÷ cycle.
fn cno_insns_measurement(k: CnoInsnKind) -> Measurement {
    single_thread_measurement(
        cno::INSNS_CASE,
        k.name(),
        true,
        "instructions_per_cycle",
        CnoInsnKind::CnoCycle.name(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_plan_is_smaller_than_full_and_within_20_s() {
        let (q, f) = (Plan::quick(), Plan::full());
        assert!(q.budget <= Duration::from_secs(20));
        assert!(f.budget <= Duration::from_secs(70));
        assert!(q.steps() < f.steps());
        for p in [&q, &f] {
            assert!(p.shares.iter().sum::<f64>() < 1.0);
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
        let m = latency_measurement(WakeSystem::EvdWait, "latency_p50_ns");
        assert_eq!(m.floor.as_deref(), Some("floor: raw park/unpark"));
        assert_eq!(m.role, Role::Evd);
        let m = latency_measurement(WakeSystem::ParkFloor, "latency_p50_ns");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
        let m = rearm_measurement(RearmKind::EvdArm, "ns_per_rearm");
        assert_eq!(m.floor.as_deref(), Some("floor: one uncontended CAS"));
        assert_eq!(m.baseline.as_deref(), Some("evd arm (one CAS)"));
        let m = rearm_measurement(RearmKind::EvdArm, "instructions_per_rearm");
        assert_eq!(m.floor, None);
        let m = rearm_measurement(RearmKind::CasFloor, "ns_per_rearm");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
        let m = PingPongSystem::EvdBatch.measurement("latency_p99_ns");
        assert_eq!((m.case.as_str(), m.threads), (pingpong::CASE, 2));
        assert_eq!(m.baseline.as_deref(), Some("evd try_dequeue"));
        assert_eq!(m.floor.as_deref(), Some("floor: two atomics"));
        assert_eq!((m.role, m.consumer.as_str()), (Role::Evd, "busy/batch"));
        let m = PingPongSystem::Floor.measurement("latency_p50_ns");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
    }

    #[test]
    fn room_skeletons_carry_cases_threads_baselines_and_floors() {
        let job = |s| RoomJob {
            capacity: 64,
            posters: 2,
            s,
            work: Work::fixed(1),
        };
        let m = job(RoomSystem::Flume).measurement();
        assert_eq!(m.case, "room/cap64/2p");
        assert_eq!(m.threads, 3);
        assert_eq!(m.baseline.as_deref(), Some("evd post_blocking+dequeue"));
        assert_eq!((m.role, m.consumer.as_str()), (Role::Peer, "blocking/item"));
        let m = job(RoomSystem::EvdBatchWait).measurement();
        assert_eq!((m.role, m.baseline), (Role::Evd, None));
        let m = RoomWakeSystem::CrossbeamSend.measurement("latency_p50_ns");
        assert_eq!(m.case, ROOM_WAKE_CASE);
        assert_eq!(m.floor.as_deref(), Some("floor: raw park/unpark"));
        assert_eq!(
            m.baseline.as_deref(),
            Some("evd post_blocking (park/unpark)")
        );
        let m = RoomWakeSystem::ParkFloor.measurement("latency_p50_ns");
        assert_eq!((m.role, m.floor), (Role::Floor, None));
    }

    #[test]
    fn cno_skeletons_carry_cases_threads_baselines_and_floors() {
        let job = CnoThroughputJob {
            evds: 256,
            feed: Feed::Batches,
            s: CnoSystem::Epoll,
        };
        let m = job.measurement();
        assert_eq!(m.case, "cno-throughput-batch/256");
        assert_eq!((m.threads, m.role), (3, Role::Peer));
        assert_eq!(m.baseline.as_deref(), Some(CnoSystem::EvdCno.name()));
        let f = with_metric(m, cno::FAIRNESS_METRIC);
        assert_eq!((f.unit.as_str(), f.higher_is_better), ("ratio", false));
        assert_eq!(f.threads, 3);
        let m = cno_trigger_measurement(Variant::CrossThread, 1024, CnoSystem::Scan);
        assert_eq!(m.case, "cno-trigger-xthread/1024");
        assert_eq!((m.threads, m.unit.as_str()), (2, "ns"));
        let m = CnoWakeSystem::EvdCno.measurement("latency_p50_ns");
        assert_eq!(m.floor.as_deref(), Some("floor: raw park/unpark"));
        assert_eq!(m.baseline.as_deref(), Some(CnoWakeSystem::EvdCno.name()));
        let m = CnoWakeSystem::EvdWait.measurement("latency_p50_ns");
        assert_eq!((m.role, m.baseline), (Role::Evd, None));
        let m = CnoWakeSystem::ParkFloor.measurement("latency_p50_ns");
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
    fn run_section_keeps_job_order_and_leaves_earlier_records_alone() {
        let mut c = Collector::default();
        c.push(
            Measurement::new("earlier", "x", Role::Evd, "busy/item", "ops_per_sec"),
            0,
            1.0,
            None,
        );
        let jobs: Vec<ThroughputJob> = [2, 1]
            .into_iter()
            .flat_map(|posters| {
                [Queue::Kanal, Queue::EvdSingle].map(|q| ThroughputJob {
                    payload: "u64",
                    posters,
                    q,
                })
            })
            .collect();
        let spec = RunSection {
            section: "throughput",
            prefix: "throughput/",
            rounds: 2,
            calibration_messages: 2_000,
            run: Duration::from_millis(1),
        };
        let mut notes = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        run_section(
            &spec,
            deadline,
            &ProgressBar::hidden(),
            &mut c,
            &mut notes,
            &jobs,
        );
        let got: Vec<(&str, &str)> = c
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
            "{notes:?}"
        );
        assert!(c.measurements[1..].iter().all(|m| m.rounds.len() == 2));
    }
}
