//! The comparison's results: records (one per case, system and metric), the
//! targets evaluated on them, the machine; serialized as `report.json`
//! (schema in `bench/README.md`), drawn by [`crate::table`] (Markdown) and
//! [`crate::chart`] (SVG).
//!
//! Every ratio in a record points the same way: **above 1 = evd better**
//! ([`RATIO_CONVENTION`], [`crate::stats::ratio_to_evd`]).

use crate::stats::{quotient, ratio_to_evd, Summary};
use crate::targets::{Goal, Side, Target, TARGETS};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The value of [`Report::schema`] for this layout.
pub const SCHEMA: &str = "evd-bench/report/v2";

/// What [`Record::ratio_to_evd`] means, as written to [`Report::ratio_convention`].
pub const RATIO_CONVENTION: &str = "ratio_to_evd is oriented so that above 1 = evd better: \
for higher_is_better metrics (throughput) it is baseline median / this median (evd ÷ peer, \
above 1 = evd faster); for the others (latency, ns, instructions) it is this median / baseline \
median (peer ÷ evd, above 1 = evd faster or cheaper). The baseline is the evd row of the same \
case, metric and consumer style.";

/// What a record's system is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An evd row.
    Evd,
    /// A peer crate's row.
    Peer,
    /// A raw mechanism that bounds what any system can do (wake-latency floors).
    Floor,
}

/// One measured quantity of one system in one case, over the interleaved
/// rounds (the fields of `report.json`'s records: `bench/README.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// What was measured: `throughput/<payload>/<N>p`,
    /// `room/cap<capacity>/<N>p`, `wake-latency`, `room-wake-latency`,
    /// `rearm`, `single-thread/pair`, `single-thread/pair-out-of-line`,
    /// `pingpong/u64` (busy round trip), `cno-wake-latency`,
    /// `cno-trigger/<N>`, `cno-trigger-xthread/<N>`, `cno-throughput/<N>`,
    /// `cno-throughput-batch/<N>` (N bound EVDs) or `cno-insns`.
    pub case: String,
    /// The system under test, e.g. `evd try_dequeue`, `tokio mpsc blocking_recv_many`.
    pub system: String,
    /// `evd`, `peer` or `floor`.
    pub role: Role,
    /// How its consumer waits: `busy/item`, `busy/batch`, `blocking/item`,
    /// `blocking/batch` (throughput and room), `blocking`, `async`, `epoll`,
    /// `inline` (wake latency; `blocking` for the room-wake latency, where
    /// the poster is the one that sleeps; `busy/item` or `busy/batch` in the
    /// busy ping-pong), or `single-thread`.
    pub consumer: String,
    /// `ops_per_sec`, `latency_p50_ns`, `latency_p99_ns`, `latency_p999_ns`,
    /// `ns_per_rearm`, `instructions_per_rearm`, `ns_per_pair`,
    /// `ns_per_cycle`, `served_max_over_min` or `instructions_per_cycle`.
    pub metric: String,
    /// Unit of `median`, `min`, `max` and `rounds`: `ops/s`, `ns`,
    /// `instructions` or `ratio` (`served_max_over_min`).
    pub unit: String,
    /// True if more is better (throughput), false if less is (latency, cost).
    pub higher_is_better: bool,
    /// Median over the rounds that produced a value.
    pub median: f64,
    /// Smallest round.
    pub min: f64,
    /// Largest round.
    pub max: f64,
    /// Number of rounds that produced a value.
    pub samples: usize,
    /// One value per interleaved round, by round number (`null`: that round
    /// failed or did not run for this system). Round `i` of two records of
    /// one section ran in the same pass.
    pub rounds: Vec<Option<f64>>,
    /// The evd system this record's ratio is taken against (same case,
    /// metric and consumer style; an evd reference row names itself); `null`
    /// for an evd variant that is no style's reference row (`evd
    /// batch+arm+wait` is compared with the best notifying peer by a target
    /// instead).
    pub baseline: Option<String>,
    /// See [`RATIO_CONVENTION`]: above 1 = evd better; `null` without a
    /// baseline or if its median is missing or 0.
    pub ratio_to_evd: Option<f64>,
    /// Threads the measurement runs (posters + consumer; 2 or 1 for wake
    /// latency; 1 for single-thread cases).
    pub threads: usize,
    /// `threads` > the logical CPUs available to the process.
    pub oversubscribed: bool,
    /// The raw floor this figure cannot physically beat (a system name in
    /// the same case and metric), or `null` where none applies.
    pub floor: Option<String>,
    /// The median beats the floor's median in this run (is below it; above
    /// it for a higher-is-better metric): the figure is noise, not a win.
    /// `null` without a floor (or if the floor was not measured).
    pub below_floor: Option<bool>,
    /// Throughput and room only, per round: consumer receive calls that
    /// returned no event, per event moved; `null` for consumers that only
    /// call a blocking receive (and for other cases).
    pub empty_polls_per_msg: Option<Vec<Option<f64>>>,
    /// Throughput only, per round: posts refused as full (and retried), per
    /// event moved; `null` for the room cases (a blocking send's waits are
    /// not visible) and other cases.
    pub full_refusals_per_msg: Option<Vec<Option<f64>>>,
    /// Throughput and room, evd rows only, per round: wakes evd sent to
    /// posters waiting for room (`Query::room_wakes`), per event moved; 0
    /// in the throughput cases, where no poster waits. `null` for peers and
    /// other cases.
    pub room_wakes_per_msg: Option<Vec<Option<f64>>>,
    /// Throughput, room, CNO throughput and busy ping-pong only, per round:
    /// share of the consumer's (ping-pong: the timing thread's) CPU samples
    /// that found a running poster's (the echo thread's) latest sample on the
    /// same CPU.
    pub same_cpu_share: Option<Vec<Option<f64>>>,
}

/// The per-round diagnostics of one throughput, room or busy ping-pong run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diagnostics {
    /// See [`Record::empty_polls_per_msg`].
    pub empty_polls_per_msg: Option<f64>,
    /// See [`Record::full_refusals_per_msg`].
    pub full_refusals_per_msg: Option<f64>,
    /// See [`Record::room_wakes_per_msg`].
    pub room_wakes_per_msg: Option<f64>,
    /// See [`Record::same_cpu_share`].
    pub same_cpu_share: Option<f64>,
}

/// Raw round values of one quantity, before summarizing.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// See [`Record::case`].
    pub case: String,
    /// See [`Record::system`].
    pub system: String,
    /// See [`Record::role`].
    pub role: Role,
    /// See [`Record::consumer`].
    pub consumer: String,
    /// See [`Record::metric`].
    pub metric: String,
    /// See [`Record::unit`].
    pub unit: String,
    /// See [`Record::higher_is_better`].
    pub higher_is_better: bool,
    /// See [`Record::baseline`].
    pub baseline: Option<String>,
    /// See [`Record::threads`].
    pub threads: usize,
    /// See [`Record::floor`].
    pub floor: Option<String>,
    /// One value per round, by round number.
    pub rounds: Vec<Option<f64>>,
    /// Per-round diagnostics, by round number (`None` for cases without).
    pub diagnostics: Option<Vec<Option<Diagnostics>>>,
}

impl Measurement {
    /// A measurement with no rounds yet, no baseline, floor or diagnostics,
    /// one thread.
    pub fn new(case: &str, system: &str, role: Role, consumer: &str, metric: &str) -> Self {
        let (unit, higher_is_better) = match metric {
            "ops_per_sec" => ("ops/s", true),
            m if m.starts_with("instructions_per_") => ("instructions", false),
            "served_max_over_min" => ("ratio", false),
            _ => ("ns", false),
        };
        Measurement {
            case: case.into(),
            system: system.into(),
            role,
            consumer: consumer.into(),
            metric: metric.into(),
            unit: unit.into(),
            higher_is_better,
            baseline: None,
            threads: 1,
            floor: None,
            rounds: Vec::new(),
            diagnostics: None,
        }
    }

    /// Record the value (and diagnostics) of round `round`.
    pub fn set_round(&mut self, round: usize, value: f64, diag: Option<Diagnostics>) {
        if self.rounds.len() <= round {
            self.rounds.resize(round + 1, None);
        }
        self.rounds[round] = Some(value);
        if let Some(d) = diag {
            let ds = self.diagnostics.get_or_insert_with(Vec::new);
            if ds.len() <= round {
                ds.resize(round + 1, None);
            }
            ds[round] = Some(d);
        }
    }
}

/// Summarize measurements into records (dropping those with no valid round),
/// mark oversubscription against `cpus` logical CPUs, and fill in every
/// record's ratio to its evd baseline and its floor check.
///
/// ```
/// use evd_bench::report::{records_from, Measurement, Role};
/// let m = |system: &str, role, rounds: &[f64]| {
///     let mut m = Measurement::new("c", system, role, "busy/item", "ops_per_sec");
///     m.baseline = Some("evd".into());
///     for (i, v) in rounds.iter().enumerate() { m.set_round(i, *v, None); }
///     m
/// };
/// let r = records_from(vec![m("evd", Role::Evd, &[10.0, 12.0, 11.0]), m("peer", Role::Peer, &[5.0, 6.0, 5.5])], 2);
/// assert_eq!(r[0].ratio_to_evd, Some(1.0));
/// assert_eq!(r[1].ratio_to_evd, Some(2.0)); // evd ÷ peer: evd twice as fast
/// ```
pub fn records_from(measurements: Vec<Measurement>, cpus: usize) -> Vec<Record> {
    let mut records: Vec<Record> = measurements
        .into_iter()
        .filter_map(|m| {
            let values: Vec<f64> = m.rounds.iter().flatten().copied().collect();
            let s = Summary::of(&values)?;
            let n = m.rounds.len();
            let diag = m.diagnostics.map(|mut ds| {
                ds.resize(n, None);
                ds
            });
            let per_round = |f: &dyn Fn(&Diagnostics) -> Option<f64>| {
                diag.as_ref()
                    .map(|ds| ds.iter().map(|d| d.as_ref().and_then(f)).collect())
            };
            // A diagnostic no round has (a consumer with only a blocking
            // receive, a blocking send, a peer's room wakes): null, not an
            // array of nulls.
            let counted = |v: Option<Vec<Option<f64>>>| v.filter(|v| v.iter().any(Option::is_some));
            Some(Record {
                case: m.case,
                system: m.system,
                role: m.role,
                consumer: m.consumer,
                metric: m.metric,
                unit: m.unit,
                higher_is_better: m.higher_is_better,
                median: s.median,
                min: s.min,
                max: s.max,
                samples: s.samples,
                rounds: m.rounds,
                baseline: m.baseline,
                ratio_to_evd: None,
                threads: m.threads,
                oversubscribed: m.threads > cpus,
                floor: m.floor,
                below_floor: None,
                empty_polls_per_msg: counted(per_round(&|d| d.empty_polls_per_msg)),
                full_refusals_per_msg: counted(per_round(&|d| d.full_refusals_per_msg)),
                room_wakes_per_msg: counted(per_round(&|d| d.room_wakes_per_msg)),
                same_cpu_share: per_round(&|d| d.same_cpu_share),
            })
        })
        .collect();
    fill_ratios(&mut records);
    fill_floors(&mut records);
    records
}

/// Set each record's `ratio_to_evd` from the record of its baseline system
/// with the same case and metric ([`ratio_to_evd`]: above 1 = evd better).
pub fn fill_ratios(records: &mut [Record]) {
    let ratios: Vec<Option<f64>> = records
        .iter()
        .map(|r| {
            let base = find(records, &r.case, r.baseline.as_deref()?, &r.metric)?;
            ratio_to_evd(r.median, base.median, r.higher_is_better)
        })
        .collect();
    for (r, ratio) in records.iter_mut().zip(ratios) {
        r.ratio_to_evd = ratio;
    }
}

/// Set each record's `below_floor` from the record of its floor system with
/// the same case and metric.
pub fn fill_floors(records: &mut [Record]) {
    let below: Vec<Option<bool>> = records
        .iter()
        .map(|r| {
            let floor = find(records, &r.case, r.floor.as_deref()?, &r.metric)?;
            Some(if r.higher_is_better {
                r.median > floor.median
            } else {
                r.median < floor.median
            })
        })
        .collect();
    for (r, b) in records.iter_mut().zip(below) {
        r.below_floor = b;
    }
}

/// The record of `system` for `case` and `metric`.
pub fn find<'a>(
    records: &'a [Record],
    case: &str,
    system: &str,
    metric: &str,
) -> Option<&'a Record> {
    records
        .iter()
        .find(|r| r.case == case && r.system == system && r.metric == metric)
}

/// The machine the report was made on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name (`model name` in `/proc/cpuinfo`).
    pub cpu: String,
    /// CPU vendor (`vendor_id`, e.g. `GenuineIntel`).
    pub cpu_vendor: String,
    /// CPU family number (`cpu family`); `None` where `/proc/cpuinfo` has none.
    pub cpu_family: Option<u32>,
    /// CPU model number (`model`); `None` where `/proc/cpuinfo` has none.
    pub cpu_model: Option<u32>,
    /// Logical CPUs available to the process (`available_parallelism`).
    pub logical_cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Whether the CPU reports running under a hypervisor.
    pub hypervisor: bool,
    /// `/proc/loadavg` when the run started: other work on the machine
    /// skews every figure.
    pub load_average: String,
    /// `/proc/loadavg` when the run ended.
    pub load_average_end: String,
}

impl Machine {
    /// The CPU in one phrase: its model name, then vendor, family and model
    /// where known.
    ///
    /// ```
    /// let mut m = evd_bench::report::Machine::detect();
    /// m.cpu = "Xeon".into();
    /// m.cpu_vendor = "GenuineIntel".into();
    /// (m.cpu_family, m.cpu_model) = (Some(6), Some(207));
    /// assert_eq!(m.cpu_line(), "Xeon (GenuineIntel, family 6, model 207)");
    /// m.cpu_vendor = "unknown".into();
    /// m.cpu_model = None;
    /// assert_eq!(m.cpu_line(), "Xeon (family 6)");
    /// ```
    pub fn cpu_line(&self) -> String {
        let mut parts = Vec::new();
        if self.cpu_vendor != "unknown" {
            parts.push(self.cpu_vendor.clone());
        }
        if let Some(f) = self.cpu_family {
            parts.push(format!("family {f}"));
        }
        if let Some(m) = self.cpu_model {
            parts.push(format!("model {m}"));
        }
        if parts.is_empty() {
            self.cpu.clone()
        } else {
            format!("{} ({})", self.cpu, parts.join(", "))
        }
    }
}

/// `/proc/loadavg`'s three load figures, or `"unknown"`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

impl Machine {
    /// Describe this machine (fields it cannot read are `"unknown"` or
    /// `None`); `load_average_end` starts equal to `load_average`.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
        };
        let load = load_average();
        let number = |name: &str| field(name).and_then(|v| v.parse().ok());
        Machine {
            cpu: field("model name").unwrap_or_else(|| "unknown".into()),
            cpu_vendor: field("vendor_id").unwrap_or_else(|| "unknown".into()),
            cpu_family: number("cpu family"),
            cpu_model: number("model"),
            logical_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            hypervisor: field("flags").is_some_and(|f| f.split(' ').any(|x| x == "hypervisor")),
            load_average: load.clone(),
            load_average_end: load,
        }
    }
}

/// One of the issue's targets, evaluated on this run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetCheck {
    /// What is compared, in the goal's own direction, e.g. `busy: evd
    /// try_dequeue ÷ crossbeam ArrayQueue, ops/s, throughput/u64/1p`.
    pub name: String,
    /// The measured value from the medians of this run: a ratio of medians
    /// (`unit` = `ratio`) or one median (`unit` = `ns`); `null` if a side is
    /// missing.
    pub value: Option<f64>,
    /// `ratio` or the unit of an absolute target (`ns`).
    pub unit: String,
    /// The goal, `>= G` or `<= G`, in the same direction as `value`.
    pub goal: String,
    /// Whether `value` meets the goal (`null` if not measured).
    pub met: Option<bool>,
    /// The same quantity per interleaved round (round `i` of each side),
    /// `null` where a side has no value for that round.
    pub rounds: Vec<Option<f64>>,
    /// In how many of the rounds with a value the goal was met.
    pub rounds_met: usize,
    /// Rounds with a value.
    pub rounds_measured: usize,
    /// Why the figure may not mean what it seems: `oversubscribed: ...`,
    /// `... below its floor: noise`, `met in k of n rounds`, and for the busy
    /// targets `floor: stamp ring + 1 CAS per post ÷ ArrayQueue: x` and
    /// `floor: stamp ring + 1 fetch_add per post ÷ ArrayQueue: x` (how far a
    /// ring that pays evd's one CAS per post, or one fetch_add, got against
    /// the same peer in the same run).
    pub caveats: Vec<String>,
}

/// The whole report, as written to `report.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The command line that made the report.
    pub command: String,
    /// True for a `--quick` run.
    pub quick: bool,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix_s: u64,
    /// Wall time of the run, in seconds.
    pub duration_s: f64,
    /// The machine.
    pub machine: Machine,
    /// [`RATIO_CONVENTION`].
    pub ratio_convention: String,
    /// What every throughput poster does when its send is refused as full
    /// ([`crate::throughput::POSTER_POLICY`]).
    pub poster_policy: String,
    /// Every record.
    pub records: Vec<Record>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
    /// Things the reader should know about this run (skipped parts, errors).
    pub notes: Vec<String>,
}

/// Evaluate every target of [`TARGETS`] on `records`, from the medians of
/// this run. Each target's value is written in the goal's own direction (its
/// name says which is divided by which).
pub fn targets(records: &[Record]) -> Vec<TargetCheck> {
    TARGETS.iter().map(|t| evaluate(records, t)).collect()
}

/// The record a side of `t` reads and the side's name in the target's name.
fn side(records: &[Record], t: &Target, s: Side) -> (Option<Record>, String) {
    let pick = |case: &str, system: &str| find(records, case, system, t.metric).cloned();
    let chosen = |r: Option<&Record>| r.map_or("not measured", |r| r.system.as_str()).to_owned();
    match s {
        Side::System(system) => (pick(t.case, system), system.into()),
        Side::Named(name, system) => (pick(t.case, system), name.into()),
        Side::At(name, system, case) => (pick(case, system), name.into()),
        Side::Best(name, systems) => {
            let best = systems
                .iter()
                .filter_map(|s| find(records, t.case, s, t.metric))
                .max_by(|a, b| {
                    let order = a.median.total_cmp(&b.median);
                    if a.higher_is_better {
                        order
                    } else {
                        order.reverse()
                    }
                });
            (best.cloned(), format!("{name} ({})", chosen(best)))
        }
        Side::WorstEmptyPolls(name, systems) => {
            let rows: Vec<(&Record, &Vec<Option<f64>>, f64)> = systems
                .iter()
                .filter_map(|system| {
                    let r = find(records, t.case, system, t.metric)?;
                    let v = r.empty_polls_per_msg.as_ref()?;
                    let values: Vec<f64> = v.iter().flatten().copied().collect();
                    Some((r, v, Summary::of(&values)?.median))
                })
                .collect();
            let worst = rows.iter().max_by(|a, b| a.2.total_cmp(&b.2));
            // The worst row's record, its figures replaced by its empty polls,
            // so that the target reads like any other absolute one.
            let proxy = worst.map(|&(r, _, median)| {
                let n = rows.iter().map(|(_, v, _)| v.len()).max().unwrap_or(0);
                let rounds = (0..n)
                    .map(|i| {
                        rows.iter()
                            .filter_map(|(_, v, _)| v.get(i).copied().flatten())
                            .reduce(f64::max)
                    })
                    .collect();
                Record {
                    median,
                    rounds,
                    below_floor: None,
                    ..r.clone()
                }
            });
            let name = format!("{name} ({})", chosen(worst.map(|w| w.0)));
            (proxy, name)
        }
    }
}

/// One target on `records`: `a`'s median alone, or the ratio of `a`'s to `b`'s.
fn evaluate(records: &[Record], t: &Target) -> TargetCheck {
    let (a, a_name) = side(records, t, t.a);
    let b = t.b.map(|s| side(records, t, s));
    let mut name = format!("{}: {a_name}", t.label);
    if let Some((_, b_name)) = &b {
        let _ = write!(name, " ÷ {b_name}");
    }
    let _ = write!(name, ", {}, {}", t.quantity, t.case);
    if let Some(Side::At(_, _, case)) = t.b {
        let _ = write!(name, " ÷ {case}");
    }
    let b_record = b.as_ref().and_then(|(r, _)| r.as_ref());
    let (value, rounds) = match (&a, &b) {
        (Some(a), None) => (Some(a.median), a.rounds.clone()),
        (Some(a), Some((Some(b), _))) => {
            let n = a.rounds.len().max(b.rounds.len());
            let at = |r: &Record, i: usize| r.rounds.get(i).copied().flatten();
            let rounds = (0..n).map(|i| quotient(at(a, i)?, at(b, i)?)).collect();
            (quotient(a.median, b.median), rounds)
        }
        _ => (None, Vec::new()),
    };
    let met = |v: f64| match t.goal {
        Goal::AtLeast(g) => v >= g,
        Goal::AtMost(g) => v <= g,
    };
    let measured: Vec<f64> = rounds.iter().flatten().copied().collect();
    let rounds_met = measured.iter().filter(|v| met(**v)).count();
    let mut caveats = Vec::new();
    let sides: Vec<&Record> = a.iter().chain(b_record).collect();
    if let Some(r) = sides.iter().find(|r| r.oversubscribed) {
        caveats.push(format!("oversubscribed: {} threads", r.threads));
    }
    for r in &sides {
        if r.below_floor == Some(true) {
            caveats.push(format!("{} below its floor: noise", r.system));
        }
    }
    if value.is_some() && rounds_met != 0 && rounds_met != measured.len() {
        caveats.push(format!("met in {rounds_met} of {} rounds", measured.len()));
    }
    let (floors, peer) = t.ceilings;
    for floor in floors {
        let ceiling = find(records, t.case, floor, t.metric);
        if let Some(x) = ceiling
            .zip(b_record)
            .and_then(|(f, p)| quotient(f.median, p.median))
        {
            caveats.push(format!("{floor} ÷ {peer}: {x:.2}"));
        }
    }
    TargetCheck {
        name,
        value,
        unit: "ratio".into(),
        goal: match t.goal {
            Goal::AtLeast(g) => format!(">= {g}"),
            Goal::AtMost(g) => format!("<= {g}"),
        },
        met: value.map(met),
        rounds,
        rounds_met,
        rounds_measured: measured.len(),
        caveats,
    }
}

/// A value in its unit, short: `95.3 M/s`, `8.61 µs`, `23.0 insns`.
///
/// ```
/// use evd_bench::report::format_value;
/// assert_eq!(format_value(95_300_000.0, "ops/s"), "95.30 M/s");
/// assert_eq!(format_value(8_612.0, "ns"), "8.61 µs");
/// assert_eq!(format_value(12.34, "ns"), "12.3 ns");
/// ```
pub fn format_value(v: f64, unit: &str) -> String {
    match unit {
        "ops/s" => format!("{:.2} M/s", v / 1e6),
        "ns" if v >= 1_000_000.0 => format!("{:.2} ms", v / 1e6),
        "ns" if v >= 1_000.0 => format!("{:.2} µs", v / 1e3),
        "ns" => format!("{v:.1} ns"),
        "instructions" => format!("{v:.1} insns"),
        "ratio" => format!("{v:.3}"),
        _ => format!("{v:.3} {unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::markdown;

    fn rec(case: &str, system: &str, metric: &str, median: f64, baseline: &str) -> Record {
        let mut m = Measurement::new(
            case,
            system,
            if system.starts_with("evd") {
                Role::Evd
            } else {
                Role::Peer
            },
            "busy/item",
            metric,
        );
        m.baseline = Some(baseline.into());
        m.set_round(0, median, None);
        records_from(vec![m], 2).remove(0)
    }

    #[test]
    fn ratios_use_the_same_case_and_metric_only() {
        let mut rs = vec![
            rec("a", "evd", "ops_per_sec", 100.0, "evd"),
            rec("b", "evd", "ops_per_sec", 10.0, "evd"),
            rec("a", "peer", "ops_per_sec", 50.0, "evd"),
            rec("b", "peer", "ops_per_sec", 50.0, "evd"),
            rec("a", "peer", "latency_p50_ns", 50.0, "evd"),
        ];
        fill_ratios(&mut rs);
        assert_eq!(rs[0].ratio_to_evd, Some(1.0));
        assert_eq!(
            rs[2].ratio_to_evd,
            Some(2.0),
            "evd 100 vs peer 50: evd 2× faster"
        );
        assert_eq!(
            rs[3].ratio_to_evd,
            Some(0.2),
            "evd 10 vs peer 50: evd slower"
        );
        assert_eq!(rs[4].ratio_to_evd, None, "no evd record for that metric");
    }

    #[test]
    fn cost_ratios_are_peer_over_evd() {
        let mut rs = vec![
            rec("r", "evd", "ns_per_rearm", 3.0, "evd"),
            rec("r", "peer", "ns_per_rearm", 6.0, "evd"),
        ];
        fill_ratios(&mut rs);
        assert_eq!(rs[1].ratio_to_evd, Some(2.0), "peer costs twice as much");
    }

    #[test]
    fn below_floor_and_oversubscription_are_marked() {
        let mut floor = Measurement::new("w", "floor", Role::Floor, "blocking", "latency_p50_ns");
        floor.set_round(0, 10.0, None);
        let mut fast = Measurement::new("w", "evd", Role::Evd, "blocking", "latency_p50_ns");
        fast.floor = Some("floor".into());
        fast.threads = 3;
        fast.set_round(0, 9.0, None);
        let mut slow = Measurement::new("w", "peer", Role::Peer, "blocking", "latency_p50_ns");
        slow.floor = Some("floor".into());
        slow.set_round(0, 11.0, None);
        let rs = records_from(vec![floor, fast, slow], 2);
        assert_eq!(rs[0].below_floor, None);
        assert_eq!(rs[1].below_floor, Some(true));
        assert_eq!(rs[2].below_floor, Some(false));
        assert!(rs[1].oversubscribed && !rs[2].oversubscribed);
    }

    #[test]
    fn diagnostics_follow_round_numbers() {
        let mut m = Measurement::new("t", "evd", Role::Evd, "busy/item", "ops_per_sec");
        let d = |e| Diagnostics {
            empty_polls_per_msg: e,
            full_refusals_per_msg: Some(0.5),
            room_wakes_per_msg: None,
            same_cpu_share: Some(0.25),
        };
        m.set_round(0, 1.0, Some(d(Some(0.1))));
        m.set_round(2, 3.0, Some(d(Some(0.3))));
        let r = records_from(vec![m], 2).remove(0);
        assert_eq!(r.rounds, [Some(1.0), None, Some(3.0)]);
        assert_eq!(
            r.empty_polls_per_msg,
            Some(vec![Some(0.1), None, Some(0.3)])
        );
        assert_eq!(r.same_cpu_share, Some(vec![Some(0.25), None, Some(0.25)]));
        assert_eq!(r.samples, 2);
        let mut m = Measurement::new("t", "peer", Role::Peer, "blocking/item", "ops_per_sec");
        m.set_round(0, 1.0, Some(d(None)));
        let r = records_from(vec![m], 2).remove(0);
        assert_eq!(r.empty_polls_per_msg, None, "not countable is null");
        assert_eq!(r.full_refusals_per_msg, Some(vec![Some(0.5)]));
        assert_eq!(r.room_wakes_per_msg, None, "a peer's room wakes are null");
        // A room row: blocking sends (no refusal count), evd's room wakes.
        let mut m = Measurement::new(
            "room/cap64/1p",
            "evd",
            Role::Evd,
            "blocking/item",
            "ops_per_sec",
        );
        m.set_round(
            0,
            1.0,
            Some(Diagnostics {
                empty_polls_per_msg: None,
                full_refusals_per_msg: None,
                room_wakes_per_msg: Some(0.75),
                same_cpu_share: None,
            }),
        );
        let r = records_from(vec![m], 2).remove(0);
        assert_eq!(r.full_refusals_per_msg, None);
        assert_eq!(r.room_wakes_per_msg, Some(vec![Some(0.75)]));
    }

    fn sample_report() -> Report {
        let mut m = Measurement::new(
            "throughput/u64/1p",
            "evd try_dequeue",
            Role::Evd,
            "busy/item",
            "ops_per_sec",
        );
        m.baseline = Some("evd try_dequeue".into());
        m.threads = 2;
        for (i, v) in [1e6, 3e6, 2e6].into_iter().enumerate() {
            m.set_round(
                i,
                v,
                Some(Diagnostics {
                    empty_polls_per_msg: Some(0.1),
                    full_refusals_per_msg: Some(0.0),
                    room_wakes_per_msg: Some(0.0),
                    same_cpu_share: Some(0.0),
                }),
            );
        }
        Report {
            schema: SCHEMA.into(),
            command: "evd-bench compare".into(),
            quick: true,
            started_unix_s: 1,
            duration_s: 2.0,
            machine: Machine {
                cpu: "cpu".into(),
                cpu_vendor: "GenuineIntel".into(),
                cpu_family: Some(6),
                cpu_model: Some(207),
                logical_cpus: 2,
                kernel: "k".into(),
                hypervisor: true,
                load_average: "0.00 0.00 0.00".into(),
                load_average_end: "0.10 0.00 0.00".into(),
            },
            ratio_convention: RATIO_CONVENTION.into(),
            poster_policy: "p".into(),
            records: records_from(vec![m], 2),
            targets: targets(&[]),
            notes: vec![],
        }
    }

    #[test]
    fn json_has_the_documented_fields() {
        let report = sample_report();
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let sorted = |a: &[&str]| {
            let mut a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
            a.sort();
            a
        };
        // Exactly these fields: bench/README.md's schema tables list the same.
        assert_eq!(
            keys(&v),
            sorted(&[
                "schema",
                "command",
                "quick",
                "started_unix_s",
                "duration_s",
                "machine",
                "ratio_convention",
                "poster_policy",
                "records",
                "targets",
                "notes",
            ])
        );
        assert_eq!(
            keys(&v["machine"]),
            sorted(&[
                "cpu",
                "cpu_vendor",
                "cpu_family",
                "cpu_model",
                "logical_cpus",
                "kernel",
                "hypervisor",
                "load_average",
                "load_average_end"
            ])
        );
        let r = &v["records"][0];
        assert_eq!(
            keys(r),
            sorted(&[
                "case",
                "system",
                "role",
                "consumer",
                "metric",
                "unit",
                "higher_is_better",
                "median",
                "min",
                "max",
                "samples",
                "rounds",
                "baseline",
                "ratio_to_evd",
                "threads",
                "oversubscribed",
                "floor",
                "below_floor",
                "empty_polls_per_msg",
                "full_refusals_per_msg",
                "room_wakes_per_msg",
                "same_cpu_share",
            ])
        );
        assert_eq!(
            keys(&v["targets"][0]),
            sorted(&[
                "name",
                "value",
                "unit",
                "goal",
                "met",
                "rounds",
                "rounds_met",
                "rounds_measured",
                "caveats"
            ])
        );
        assert_eq!(r["role"], "evd");
        assert_eq!(r["median"], 2e6);
        assert_eq!(r["min"], 1e6);
        assert_eq!(r["max"], 3e6);
        assert_eq!(r["ratio_to_evd"], 1.0);
        assert_eq!(r["empty_polls_per_msg"][2], 0.1);
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn targets_report_missing_sides_as_not_measured() {
        let ts = targets(&[]);
        assert_eq!(ts.len(), 39);
        assert!(ts.iter().all(|t| t.value.is_none() && t.met.is_none()));
    }

    #[test]
    fn targets_compare_like_with_like_and_take_the_best_peer() {
        let case = "throughput/u64/1p";
        let mut rs = vec![
            rec(
                case,
                "evd try_dequeue",
                "ops_per_sec",
                90.0,
                "evd try_dequeue",
            ),
            rec(
                case,
                "evd dequeue_batch",
                "ops_per_sec",
                95.0,
                "evd dequeue_batch",
            ),
            rec(
                case,
                "crossbeam ArrayQueue",
                "ops_per_sec",
                30.0,
                "evd try_dequeue",
            ),
            rec(
                case,
                "evd batch+wait",
                "ops_per_sec",
                90.0,
                "evd batch+wait",
            ),
            rec(
                case,
                "crossbeam-channel try_iter+recv",
                "ops_per_sec",
                50.0,
                "evd batch+wait",
            ),
            rec(
                case,
                "std sync_channel recv",
                "ops_per_sec",
                70.0,
                "evd try_dequeue+wait",
            ),
            rec(
                case,
                "tokio mpsc blocking_recv_many",
                "ops_per_sec",
                89.0,
                "evd batch+wait",
            ),
        ];
        rs[2].threads = 3;
        rs[2].oversubscribed = true;
        let ts = targets(&rs);
        let get = |s: &str| ts.iter().find(|t| t.name.contains(s)).unwrap();
        let aq = get("ArrayQueue, ops/s, throughput/u64/1p");
        assert_eq!(aq.value, Some(3.0));
        assert_eq!(aq.met, Some(true));
        assert_eq!((aq.rounds_met, aq.rounds_measured), (1, 1));
        assert!(aq.caveats[0].starts_with("oversubscribed"));
        let own = get("blocking vs busy");
        assert!(own.name.contains("(evd dequeue_batch)"), "{}", own.name);
        assert_eq!(own.value, Some(90.0 / 95.0));
        let peers = get("blocking vs peers: evd batch+wait ÷ best notifying peer (std");
        assert_eq!(peers.value, Some(90.0 / 70.0), "tokio is not in the list");
        assert_eq!(peers.met, Some(false));
    }

    #[test]
    fn ratio_targets_of_arm_ping_pong_loops_and_empty_polls() {
        let (case, ops, pp) = ("throughput/u64/1p", "ops_per_sec", crate::pingpong::CASE);
        let p50 = "latency_p50_ns";
        let mut rs = vec![
            rec(case, "evd batch+wait", ops, 90.0, "evd batch+wait"),
            rec(case, "evd batch+arm+wait", ops, 84.0, "evd batch+wait"),
            rec(case, "kanal recv", ops, 60.0, "evd batch+wait"),
            rec(
                case,
                "evd try_dequeue+wait",
                ops,
                80.0,
                "evd try_dequeue+wait",
            ),
            rec(
                "rearm",
                "evd arm (one CAS)",
                "ns_per_rearm",
                6.0,
                "evd arm (one CAS)",
            ),
            rec(
                "rearm",
                "floor: one uncontended CAS",
                "ns_per_rearm",
                5.0,
                "evd arm (one CAS)",
            ),
            rec(pp, "evd try_dequeue", p50, 110.0, "evd try_dequeue"),
            rec(pp, "floor: two atomics", p50, 100.0, "evd try_dequeue"),
            rec(pp, "rtrb pop", p50, 200.0, "evd try_dequeue"),
        ];
        rs[0].empty_polls_per_msg = Some(vec![Some(0.01)]);
        rs[1].empty_polls_per_msg = Some(vec![Some(0.2)]);
        rs[3].empty_polls_per_msg = Some(vec![Some(0.03)]);
        let ts = targets(&rs);
        let get = |s: &str| ts.iter().find(|t| t.name.starts_with(s)).unwrap();
        let t = get("explicit-arm loop: evd batch+arm+wait ÷ best notifying peer (kanal recv)");
        assert_eq!((t.value, t.met), (Some(1.4), Some(true)));
        let t = get("README loop: evd batch+wait ÷ best notifying peer (kanal recv)");
        assert_eq!((t.value, t.met), (Some(1.5), Some(true)));
        let t = get("arm(): evd arm (one CAS) ÷ floor: one uncontended CAS");
        assert_eq!((t.value, t.met), (Some(1.2), Some(true)));
        let t = get("busy ping-pong: evd try_dequeue ÷ floor: two atomics");
        assert_eq!((t.value, t.met), (Some(1.1), Some(true)));
        let t = get("busy ping-pong: evd try_dequeue ÷ rtrb pop");
        assert_eq!((t.value, t.met), (Some(0.55), Some(true)));
        let t = get("issue 30, empty polls: worst evd blocking row (evd batch+arm+wait)");
        assert!(t.name.ends_with(case), "{}", t.name);
        assert_eq!((t.value, t.met), (Some(0.2), Some(false)));
        assert_eq!(t.rounds, [Some(0.2)]);
        let t = get("issue 30, empty polls: worst evd busy row (not measured)");
        assert_eq!(t.met, None);
        assert_eq!(
            get("issue 30, busy: evd try_dequeue ÷ crossbeam ArrayQueue").goal,
            ">= 1.4"
        );
    }

    #[test]
    fn markdown_names_the_cpu_first_and_shows_ping_pong_percentiles() {
        let mut report = sample_report();
        let md = markdown(&report);
        assert!(
            md.lines()
                .next()
                .unwrap()
                .contains("on CPU cpu (GenuineIntel, family 6, model 207), 2 logical CPUs"),
            "{md}"
        );
        let pp = crate::pingpong::CASE;
        let m = |system: &str, role, metric, v| {
            let mut m = Measurement::new(pp, system, role, "busy/item", metric);
            m.baseline = Some("evd try_dequeue".into());
            m.threads = 2;
            let d = Diagnostics {
                empty_polls_per_msg: None,
                full_refusals_per_msg: None,
                room_wakes_per_msg: None,
                same_cpu_share: Some(0.0),
            };
            m.set_round(0, v, Some(d));
            m
        };
        report.records = records_from(
            vec![
                m("evd try_dequeue", Role::Evd, "latency_p50_ns", 150.0),
                m("evd try_dequeue", Role::Evd, "latency_p99_ns", 300.0),
                m("rtrb pop", Role::Peer, "latency_p50_ns", 300.0),
            ],
            2,
        );
        let md = markdown(&report);
        assert!(md.contains(&format!("### {pp} (round trip")), "{md}");
        assert!(md.contains("| p99.9 | same CPU | threads |"), "{md}");
        let evd = md
            .lines()
            .find(|l| l.starts_with("| evd try_dequeue |"))
            .unwrap();
        assert!(
            evd.contains("| 300.0 ns [300.0 ns – 300.0 ns] | n/a | 0 % | 2 |"),
            "{evd}"
        );
        let rtrb = md.lines().find(|l| l.starts_with("| rtrb pop |")).unwrap();
        assert!(rtrb.contains("2.00× (vs evd try_dequeue)"), "{rtrb}");
    }

    #[test]
    fn busy_targets_name_the_ceiling_of_a_one_cas_ring() {
        let case = "throughput/u64/1p";
        let ops = "ops_per_sec";
        let rs = vec![
            rec(case, "evd try_dequeue", ops, 90.0, "evd try_dequeue"),
            rec(case, "crossbeam ArrayQueue", ops, 50.0, "evd try_dequeue"),
            rec(
                case,
                "floor: stamp ring + 1 CAS per post",
                ops,
                80.0,
                "evd try_dequeue",
            ),
            rec(
                case,
                "floor: stamp ring + 1 fetch_add per post",
                ops,
                70.0,
                "evd try_dequeue",
            ),
        ];
        let t = targets(&rs);
        let busy = |c: &str| {
            t.iter()
                .find(|t| {
                    t.name == format!("busy: evd try_dequeue ÷ crossbeam ArrayQueue, ops/s, {c}")
                })
                .unwrap()
        };
        assert_eq!(busy(case).value, Some(1.8));
        assert!(busy(case)
            .caveats
            .contains(&"floor: stamp ring + 1 CAS per post ÷ ArrayQueue: 1.60".to_string()));
        assert!(busy(case)
            .caveats
            .contains(&"floor: stamp ring + 1 fetch_add per post ÷ ArrayQueue: 1.40".to_string()));
        // No floor row in the 2-poster case here: no such caveat.
        assert!(busy("throughput/u64/2p").caveats.is_empty());
    }

    #[test]
    fn time_targets_keep_the_goal_direction() {
        let pair = "single-thread/pair";
        let rs = vec![
            rec(
                pair,
                "evd post+try_dequeue",
                "ns_per_pair",
                6.0,
                "evd post+try_dequeue",
            ),
            rec(
                pair,
                "crossbeam ArrayQueue push+pop",
                "ns_per_pair",
                10.0,
                "evd post+try_dequeue",
            ),
        ];
        let t = targets(&rs);
        let t = t
            .iter()
            .find(|t| t.name.starts_with("single thread"))
            .unwrap();
        assert_eq!(t.value, Some(0.6));
        assert_eq!(t.met, Some(true));
    }

    #[test]
    fn latency_table_marks_figures_below_the_floor_as_noise() {
        let m = |system: &str, role, median| {
            let mut m =
                Measurement::new("wake-latency", system, role, "blocking", "latency_p50_ns");
            m.baseline = Some("evd wait".into());
            if role != Role::Floor {
                m.floor = Some("floor".into());
            }
            m.threads = 2;
            m.set_round(0, median, None);
            m
        };
        let mut report = sample_report();
        report.records = records_from(
            vec![
                m("evd wait", Role::Evd, 12_000.0),
                m("peer", Role::Peer, 9_000.0),
                m("floor", Role::Floor, 10_000.0),
            ],
            2,
        );
        let md = markdown(&report);
        assert!(md.contains("ratio = peer ÷ evd (ns"), "{md}");
        let peer = md.lines().find(|l| l.starts_with("| peer |")).unwrap();
        assert!(
            peer.contains("9.00 µs [9.00 µs – 9.00 µs] (below floor: noise)"),
            "{peer}"
        );
        assert!(
            peer.contains("0.75× (vs evd wait) (noise: below floor)"),
            "{peer}"
        );
        let evd = md.lines().find(|l| l.starts_with("| evd wait |")).unwrap();
        assert!(!evd.contains("noise"), "{evd}");
    }

    #[test]
    fn room_tables_show_room_wakes_and_the_room_wake_target() {
        let room = |system: &str, role, wakes: Option<f64>| {
            let mut m = Measurement::new(
                "room/cap64/1p",
                system,
                role,
                "blocking/item",
                "ops_per_sec",
            );
            m.baseline = Some("evd post_blocking+dequeue".into());
            m.threads = 2;
            let d = Diagnostics {
                empty_polls_per_msg: None,
                full_refusals_per_msg: None,
                room_wakes_per_msg: wakes,
                same_cpu_share: Some(0.0),
            };
            m.set_round(0, 1e6, Some(d));
            m
        };
        let wake = |system: &str, role, median| {
            let mut m = Measurement::new(
                "room-wake-latency",
                system,
                role,
                "blocking",
                "latency_p50_ns",
            );
            m.baseline = Some("evd post_blocking (park/unpark)".into());
            if role != Role::Floor {
                m.floor = Some("floor: raw park/unpark".into());
            }
            m.threads = 2;
            m.set_round(0, median, None);
            m
        };
        let mut report = sample_report();
        report.records = records_from(
            vec![
                room("evd post_blocking+dequeue", Role::Evd, Some(0.5)),
                room("flume send+recv", Role::Peer, None),
                wake("evd post_blocking (park/unpark)", Role::Evd, 5_500.0),
                wake("floor: raw park/unpark", Role::Floor, 5_000.0),
            ],
            2,
        );
        report.targets = targets(&report.records);
        let md = markdown(&report);
        assert!(md.contains("### room/cap64/1p"), "{md}");
        assert!(md.contains("blocking bounded send"), "{md}");
        let evd = md
            .lines()
            .find(|l| l.starts_with("| evd post_blocking+dequeue |"))
            .unwrap();
        assert!(evd.contains("| 0.500 |"), "{evd}");
        let peer = md
            .lines()
            .find(|l| l.starts_with("| flume send+recv |"))
            .unwrap();
        assert!(peer.contains("| — |"), "{peer}");
        assert!(
            md.contains("### room-wake-latency (one way, consumer's dequeue"),
            "{md}"
        );
        let t = report
            .targets
            .iter()
            .find(|t| t.name.starts_with("room wake:"))
            .unwrap();
        assert_eq!((t.value, t.met), (Some(1.1), Some(true)));
    }

    #[test]
    fn cno_tables_and_targets() {
        use crate::cno::{CnoSystem, Feed, Variant, CYCLE_METRIC, FAIRNESS_METRIC, WAKE_CASE};
        let evd = CnoSystem::EvdCno.name();
        let scan = CnoSystem::Scan.name();
        let row = |case: &str, system: &str, metric: &str, v: f64| {
            let role = if system == evd { Role::Evd } else { Role::Peer };
            let mut m = Measurement::new(case, system, role, "blocking/batch", metric);
            m.baseline = Some(evd.into());
            m.threads = 3;
            m.set_round(0, v, None);
            m
        };
        let mut ms = Vec::new();
        for v in Variant::ALL {
            for (n, e, sc) in [(1, 100.0, 50.0), (1024, 140.0, 2_000.0)] {
                ms.push(row(&v.case(n), evd, CYCLE_METRIC, e));
                ms.push(row(&v.case(n), scan, CYCLE_METRIC, sc));
            }
        }
        let tp = Feed::Batches.case(16);
        ms.push(row(&tp, evd, "ops_per_sec", 4e7));
        ms.push(row(&tp, evd, FAIRNESS_METRIC, 1.05));
        ms.push(row(&tp, scan, "ops_per_sec", 2e7));
        for (system, role, p50) in [
            ("evd Cno::wait (park/unpark)", Role::Evd, 5_200.0),
            ("floor: raw park/unpark", Role::Floor, 5_000.0),
        ] {
            let mut m = Measurement::new(WAKE_CASE, system, role, "blocking", "latency_p50_ns");
            m.baseline = Some("evd Cno::wait (park/unpark)".into());
            m.set_round(0, p50, None);
            ms.push(m);
        }
        let mut report = sample_report();
        report.records = records_from(ms, 2);
        report.targets = targets(&report.records);
        let md = markdown(&report);
        assert_eq!(md.matches("### cno-trigger").count(), 1, "{md}");
        let scan_single = md
            .lines()
            .find(|l| l.starts_with(&format!("| single-thread | {scan} |")))
            .unwrap();
        assert!(
            scan_single.contains("(0.50×)") && scan_single.contains("(14.29×)"),
            "{scan_single}"
        );
        assert!(md.contains("### cno-throughput-batch/16"), "{md}");
        let evd_tp = md
            .lines()
            .find(|l| l.starts_with(&format!("| {evd} | blocking/batch | 40.00 M/s")))
            .unwrap();
        assert!(evd_tp.contains("| 1.050 [1.050 – 1.050] |"), "{evd_tp}");
        assert!(md.contains("### cno-wake-latency"), "{md}");
        let get = |s: &str| report.targets.iter().find(|t| t.name.contains(s)).unwrap();
        let t = get("at 1 EVD, ns per cycle, cno-trigger/1024");
        assert_eq!((t.value, t.met), (Some(1.4), Some(true)));
        let t = get("evd Cno, ns per cycle, cno-trigger-xthread/1024");
        assert_eq!(t.value.map(|v| (v * 100.0).round()), Some(1429.0));
        let t = get("cno-throughput-batch/16");
        assert_eq!(
            (t.value, t.unit.as_str(), t.met),
            (Some(1.05), "ratio", Some(true))
        );
        let t = get("cno wake:");
        assert_eq!((t.value, t.met), (Some(1.04), Some(true)));
        assert_eq!(get("cno-throughput-batch/256").met, None);
    }

    #[test]
    fn markdown_states_the_ratio_direction_and_marks() {
        let mut report = sample_report();
        report.notes.push("n1".into());
        let md = markdown(&report);
        assert!(md.contains("ratio = evd ÷ peer (ops/s"));
        assert!(md.contains("above 1 = evd faster"));
        assert!(md.contains("| evd try_dequeue | busy/item | 2.00 M/s"));
        assert!(md.contains("1.00× (reference)"));
        assert!(md.contains("0.100"), "{md}");
        assert!(md.contains("note: n1"));
        report.records[0].oversubscribed = true;
        assert!(markdown(&report).contains("(oversubscribed)"));
    }
}
