//! The comparison's results: records (one per case, system and metric), the targets of
//! [`crate::targets`] evaluated on them and the machine, written as `report.json`. Every field is
//! described in bench/README.md's schema tables; every ratio points one way: above 1 = evd better.

use crate::stats::{Summary, quotient, ratio_to_evd};
use crate::targets::{Goal, Side, TARGETS, Target};
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An evd row.
    #[default]
    Evd,
    /// Another crate, the classic re-arm, or a CNO built without evd's.
    Peer,
    /// A raw mechanism that bounds what any system can do.
    Floor,
}

/// A system as its records name and compare it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    /// [`Record::system`].
    pub name: &'static str,
    /// [`Record::role`].
    pub role: Role,
    /// [`Record::consumer`].
    pub consumer: &'static str,
    /// [`Record::baseline`]: `None` for an evd variant compared with nothing.
    pub baseline: Option<&'static str>,
    /// [`Record::floor`].
    pub floor: Option<&'static str>,
}

impl Row {
    /// A row, positionally.
    pub const fn new(
        name: &'static str,
        role: Role,
        consumer: &'static str,
        baseline: Option<&'static str>,
        floor: Option<&'static str>,
    ) -> Row {
        Row {
            name,
            role,
            consumer,
            baseline,
            floor,
        }
    }

    /// Its record of `metric` in `case`, with no rounds yet, the measurement running `threads`
    /// threads.
    pub fn record(&self, case: &str, metric: &str, threads: usize) -> Record {
        let mut r = Record::new(case, self.name, self.role, self.consumer, metric);
        r.baseline = self.baseline.map(Into::into);
        r.floor = self.floor.map(Into::into);
        r.threads = threads;
        r
    }
}

/// One measured quantity of one system in one case, over the interleaved rounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// What was measured, e.g. `throughput/u64/1p`.
    pub case: String,
    /// The system under test, e.g. `evd try_dequeue`.
    pub system: String,
    /// `evd`, `peer` or `floor`.
    pub role: Role,
    /// How its consumer waits, e.g. `busy/item`.
    pub consumer: String,
    /// The quantity, e.g. `ops_per_sec`.
    pub metric: String,
    /// `ops/s`, `ns`, `instructions` or `ratio`.
    pub unit: String,
    /// More is better (throughput).
    pub higher_is_better: bool,
    /// Median over the rounds that produced a value.
    pub median: f64,
    /// Smallest round.
    pub min: f64,
    /// Largest round.
    pub max: f64,
    /// Rounds that produced a value.
    pub samples: usize,
    /// One value per interleaved round, by round number.
    pub rounds: Vec<Option<f64>>,
    /// The evd row the ratio is taken against.
    pub baseline: Option<String>,
    /// Above 1 = evd better ([`RATIO_CONVENTION`]).
    pub ratio_to_evd: Option<f64>,
    /// Threads the measurement runs.
    pub threads: usize,
    /// `threads` > the logical CPUs.
    pub oversubscribed: bool,
    /// The raw floor this figure cannot physically beat.
    pub floor: Option<String>,
    /// The median beats the floor's: noise, not a win.
    pub below_floor: Option<bool>,
    /// Per round: receive calls that returned no event, per event.
    pub empty_polls_per_msg: Option<Vec<Option<f64>>>,
    /// Per round: posts refused as full, per event.
    pub full_refusals_per_msg: Option<Vec<Option<f64>>>,
    /// Per round, evd rows: wakes sent to posters waiting for room, per event.
    pub room_wakes_per_msg: Option<Vec<Option<f64>>>,
    /// Per round: share of CPU samples that found a poster on the consumer's CPU.
    pub same_cpu_share: Option<Vec<Option<f64>>>,
}

/// The per-round diagnostics of a run, in [`Record`]'s fields of the same names.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Diagnostics {
    /// [`Record::empty_polls_per_msg`].
    pub empty_polls_per_msg: Option<f64>,
    /// [`Record::full_refusals_per_msg`].
    pub full_refusals_per_msg: Option<f64>,
    /// [`Record::room_wakes_per_msg`].
    pub room_wakes_per_msg: Option<f64>,
    /// [`Record::same_cpu_share`].
    pub same_cpu_share: Option<f64>,
}

impl Record {
    /// A record with no rounds yet, no baseline, floor or diagnostics, one thread.
    pub fn new(case: &str, system: &str, role: Role, consumer: &str, metric: &str) -> Self {
        let (unit, higher_is_better) = match metric {
            "ops_per_sec" => ("ops/s", true),
            m if m.starts_with("instructions_per_") => ("instructions", false),
            "served_max_over_min" => ("ratio", false),
            _ => ("ns", false),
        };
        let [case, system, consumer, metric, unit] =
            [case, system, consumer, metric, unit].map(String::from);
        Record {
            case,
            system,
            role,
            consumer,
            metric,
            unit,
            higher_is_better,
            threads: 1,
            ..Record::default()
        }
    }

    /// The same row's record of another metric (its unit and direction follow), no rounds yet.
    pub fn with_metric(&self, metric: &str) -> Record {
        let mut r = Record::new(&self.case, &self.system, self.role, &self.consumer, metric);
        r.baseline.clone_from(&self.baseline);
        r.threads = self.threads;
        r.floor.clone_from(&self.floor);
        r
    }

    fn diagnostics_mut(&mut self) -> [&mut Option<Vec<Option<f64>>>; 4] {
        [
            &mut self.empty_polls_per_msg,
            &mut self.full_refusals_per_msg,
            &mut self.room_wakes_per_msg,
            &mut self.same_cpu_share,
        ]
    }

    /// Record the value (and diagnostics) of round `round`.
    pub fn set_round(&mut self, round: usize, value: f64, diag: Option<Diagnostics>) {
        let put = |v: &mut Vec<Option<f64>>, x| {
            v.resize(v.len().max(round + 1), None);
            v[round] = x;
        };
        put(&mut self.rounds, Some(value));
        if let Some(d) = diag {
            let values = [
                d.empty_polls_per_msg,
                d.full_refusals_per_msg,
                d.room_wakes_per_msg,
            ];
            let values = values.into_iter().chain([d.same_cpu_share]);
            for (per_round, x) in self.diagnostics_mut().into_iter().zip(values) {
                put(per_round.get_or_insert_with(Vec::new), x);
            }
        }
    }

    /// Void round `round` (value and diagnostics), keeping its place: a round in which a run of
    /// this case failed stays visible as `null` (the targets count it).
    pub fn fail_round(&mut self, round: usize) {
        if self.rounds.len() <= round {
            self.rounds.resize(round + 1, None);
        }
        self.rounds[round] = None;
        for per_round in self.diagnostics_mut().into_iter().flatten() {
            if let Some(v) = per_round.get_mut(round) {
                *v = None;
            }
        }
    }

    /// Forget round `round` (value and diagnostics); rounds left empty at the end are dropped.
    pub fn discard_round(&mut self, round: usize) {
        if let Some(v) = self.rounds.get_mut(round) {
            *v = None;
        }
        while self.rounds.last() == Some(&None) {
            self.rounds.pop();
        }
        let n = self.rounds.len();
        for per_round in self.diagnostics_mut().into_iter().flatten() {
            if let Some(v) = per_round.get_mut(round) {
                *v = None;
            }
            per_round.truncate(n);
        }
    }
}

/// Summarize records with rounds (dropping those with no valid round), mark oversubscription
/// against `cpus` logical CPUs, and fill in every record's ratio to its evd baseline and its floor
/// check.
pub fn records_from(records: Vec<Record>, cpus: usize) -> Vec<Record> {
    let mut records: Vec<Record> = records
        .into_iter()
        .filter_map(|mut r| {
            let values: Vec<f64> = r.rounds.iter().flatten().copied().collect();
            let s = Summary::of(&values)?;
            (r.median, r.min, r.max, r.samples) = (s.median, s.min, s.max, s.samples);
            r.oversubscribed = r.threads > cpus;
            let n = r.rounds.len();
            for (i, per_round) in r.diagnostics_mut().into_iter().enumerate() {
                if let Some(v) = per_round.as_mut() {
                    v.resize(n, None);
                }
                // A diagnostic no round has (a consumer with only a blocking receive, a blocking
                // send, a peer's room wakes) is null, not an array of nulls; a CPU share is kept.
                if i < 3
                    && per_round
                        .as_ref()
                        .is_some_and(|v| v.iter().all(Option::is_none))
                {
                    *per_round = None;
                }
            }
            Some(r)
        })
        .collect();
    fill_ratios(&mut records);
    records
}

/// Set each record's `ratio_to_evd` from the record of its baseline system with the same case and
/// metric ([`ratio_to_evd`]: above 1 = evd better), and its `below_floor` from its floor's.
pub fn fill_ratios(records: &mut [Record]) {
    let other =
        |r: &Record, system: &Option<String>| find(records, &r.case, system.as_deref()?, &r.metric);
    let filled: Vec<(Option<f64>, Option<bool>)> = records
        .iter()
        .map(|r| {
            let base = other(r, &r.baseline);
            let ratio = base.and_then(|b| ratio_to_evd(r.median, b.median, r.higher_is_better));
            let (mine, floor) = (r.median, other(r, &r.floor).map(|f| f.median));
            (
                ratio,
                floor.map(|f| {
                    if r.higher_is_better {
                        mine > f
                    } else {
                        mine < f
                    }
                }),
            )
        })
        .collect();
    for (r, (ratio, below)) in records.iter_mut().zip(filled) {
        (r.ratio_to_evd, r.below_floor) = (ratio, below);
    }
}

/// `records` grouped by `key`: the groups in the order their first record comes, each group's
/// records in their own order.
pub fn grouped<'a, K: PartialEq>(
    records: impl IntoIterator<Item = &'a Record>,
    key: impl Fn(&Record) -> K,
) -> Vec<(K, Vec<&'a Record>)> {
    let mut groups: Vec<(K, Vec<&Record>)> = Vec::new();
    for r in records {
        let k = key(r);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, group)) => group.push(r),
            None => groups.push((k, vec![r])),
        }
    }
    groups
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

/// The machine the report was made on (`machine` in bench/README.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` in `/proc/cpuinfo`.
    pub cpu: String,
    /// `vendor_id`, e.g. `GenuineIntel`.
    pub cpu_vendor: String,
    /// `cpu family`.
    pub cpu_family: Option<u32>,
    /// `model`.
    pub cpu_model: Option<u32>,
    /// Logical CPUs available to the process.
    pub logical_cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// The CPU reports running under a hypervisor.
    pub hypervisor: bool,
    /// `/proc/loadavg` when the run started.
    pub load_average: String,
    /// `/proc/loadavg` when the run ended.
    pub load_average_end: String,
}

impl Machine {
    /// Describe this machine (what it cannot read is `"unknown"` or `None`); `load_average_end`
    /// starts equal to `load_average`.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
        };
        let number = |name: &str| field(name).and_then(|v| v.parse().ok());
        let load = load_average();
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

    /// The CPU in one phrase: its model name, then vendor, family and model where known.
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

/// One of the targets of [`crate::targets`], evaluated on this run (the target table of
/// bench/README.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetCheck {
    /// What is compared, in the goal's own direction.
    pub name: String,
    /// The ratio of the medians (or one median); `None` if a side is missing.
    pub value: Option<f64>,
    /// `ratio`.
    pub unit: String,
    /// `>= G` or `<= G`.
    pub goal: String,
    /// Whether `value` meets the goal.
    pub met: Option<bool>,
    /// The same quantity per interleaved round.
    pub rounds: Vec<Option<f64>>,
    /// Rounds with a value that met the goal.
    pub rounds_met: usize,
    /// Rounds with a value.
    pub rounds_measured: usize,
    /// Why the figure may not mean what it seems.
    pub caveats: Vec<String>,
}

/// The whole report, as written to `report.json` (its top-level table in bench/README.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The command line that made the report.
    pub command: String,
    /// A `--quick` run.
    pub quick: bool,
    /// Start, in seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// Wall time of the run, in seconds.
    pub duration_s: f64,
    /// The machine.
    pub machine: Machine,
    /// [`RATIO_CONVENTION`].
    pub ratio_convention: String,
    /// [`crate::throughput::POSTER_POLICY`].
    pub poster_policy: String,
    /// Every record.
    pub records: Vec<Record>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
    /// What the reader should know about this run.
    pub notes: Vec<String>,
}

/// Evaluate every target of [`TARGETS`] on `records`, from the medians of this run, each value
/// written in the goal's own direction (its name says which is divided by which).
pub fn targets(records: &[Record]) -> Vec<TargetCheck> {
    TARGETS.iter().map(|t| evaluate(records, t)).collect()
}

/// The systems a best or worst side of `t` names that have no record (or, for empty polls,
/// none measured): its best or worst is only of the others, a caveat of the target.
fn unmeasured(records: &[Record], t: &Target, s: Side) -> Vec<&'static str> {
    let (systems, polls) = match s {
        Side::Best(_, systems) => (systems, false),
        Side::WorstEmptyPolls(_, systems) => (systems, true),
        _ => return Vec::new(),
    };
    let measured =
        |r: &Record| !polls || r.empty_polls_per_msg.iter().flatten().flatten().count() > 0;
    let missing = |s: &&str| !find(records, t.case, s, t.metric).is_some_and(measured);
    systems.iter().copied().filter(missing).collect()
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
            // The worst row's record, its figures replaced by its empty polls, so that the target
            // reads like any other absolute one.
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
            (proxy, format!("{name} ({})", chosen(worst.map(|w| w.0))))
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
    let mut caveats = Vec::new();
    let (value, rounds) = match (&a, &b) {
        (Some(a), None) => (Some(a.median), a.rounds.clone()),
        (Some(a), Some((Some(b), _))) => {
            let n = a.rounds.len().max(b.rounds.len());
            let at = |r: &Record, i: usize| r.rounds.get(i).copied().flatten();
            let rounds = (0..n).map(|i| quotient(at(a, i)?, at(b, i)?)).collect();
            // Medians over the same rounds only: sides of two cases (`Side::At`) may have lost
            // different rounds to a failed run.
            let both: Vec<usize> = (0..n)
                .filter(|&i| at(a, i).zip(at(b, i)).is_some())
                .collect();
            let median = |r: &Record| {
                let values: Vec<f64> = both.iter().filter_map(|&i| at(r, i)).collect();
                Summary::of(&values).map(|s| s.median)
            };
            if both.len() < a.samples.max(b.samples) {
                caveats.push(format!(
                    "over the {} rounds both sides measured",
                    both.len()
                ));
            }
            (
                median(a).zip(median(b)).and_then(|(x, y)| quotient(x, y)),
                rounds,
            )
        }
        _ => (None, Vec::new()),
    };
    let met = |v: f64| match t.goal {
        Goal::AtLeast(g) => v >= g,
        Goal::AtMost(g) => v <= g,
    };
    let measured: Vec<f64> = rounds.iter().flatten().copied().collect();
    let rounds_met = measured.iter().filter(|v| met(**v)).count();
    let sides: Vec<&Record> = a.iter().chain(b_record).collect();
    let sides_named = [Some(t.a), t.b].into_iter().flatten();
    let missing: Vec<&str> = sides_named
        .flat_map(|s| unmeasured(records, t, s))
        .collect();
    if value.is_some() && !missing.is_empty() {
        caveats.push(format!(
            "not measured, so not compared: {}",
            missing.join(", ")
        ));
    }
    if let Some(r) = sides.iter().find(|r| r.oversubscribed) {
        caveats.push(format!("oversubscribed: {} threads", r.threads));
    }
    for r in sides.iter().filter(|r| r.below_floor == Some(true)) {
        caveats.push(format!("{} below its floor: noise", r.system));
    }
    let failed = sides
        .iter()
        .map(|r| r.rounds.iter().filter(|v| v.is_none()).count());
    if let Some(k) = failed.max().filter(|&k| k > 0) {
        caveats.push(format!("rounds discarded: {k} (a run failed: notes)"));
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
