//! The comparison's results: records (one per case, system and metric), the
//! targets, the machine, and their outputs: a Markdown table, `report.json`
//! (schema in the workspace README, "`report.json` schema") and, through [`crate::chart`], an SVG.

use crate::stats::{ratio_to_evd, Summary};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The value of [`Report::schema`] for this layout.
pub const SCHEMA: &str = "evd-bench/report/v1";

/// One measured quantity of one system in one case, over the interleaved rounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// What was measured, e.g. `throughput/u64/2p`, `wake-latency`, `rearm`.
    pub case: String,
    /// The system under test, e.g. `evd try_dequeue`, `tokio mpsc`.
    pub system: String,
    /// How its consumer waits: `busy`, `blocking`, `async`, `epoll`, `inline`,
    /// or `single-thread` for the re-arm loops.
    pub consumer: String,
    /// `ops_per_sec`, `latency_p50_ns`, `latency_p99_ns`, `latency_p999_ns`,
    /// `ns_per_rearm` or `instructions_per_rearm`.
    pub metric: String,
    /// Unit of `median`, `min` and `max`: `ops/s`, `ns` or `instructions`.
    pub unit: String,
    /// True if more is better (throughput), false if less is (latency, cost).
    pub higher_is_better: bool,
    /// Median over the rounds.
    pub median: f64,
    /// Smallest round.
    pub min: f64,
    /// Largest round.
    pub max: f64,
    /// Number of rounds.
    pub samples: usize,
    /// The evd system this record's ratio is taken against (same case and metric).
    pub baseline: String,
    /// `median / baseline's median`; `null` if the baseline is missing or 0.
    pub ratio_to_evd: Option<f64>,
}

/// Raw round values of one quantity, before summarizing.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// See [`Record::case`].
    pub case: String,
    /// See [`Record::system`].
    pub system: String,
    /// See [`Record::consumer`].
    pub consumer: String,
    /// See [`Record::metric`].
    pub metric: String,
    /// See [`Record::unit`].
    pub unit: String,
    /// See [`Record::higher_is_better`].
    pub higher_is_better: bool,
    /// See [`Record::baseline`].
    pub baseline: String,
    /// One value per round.
    pub rounds: Vec<f64>,
}

/// Summarize measurements into records (dropping those with no valid round)
/// and fill in every record's ratio to its evd baseline.
///
/// ```
/// use evd_bench::report::{records_from, Measurement};
/// let m = |system: &str, rounds: Vec<f64>| Measurement {
///     case: "c".into(), system: system.into(), consumer: "busy".into(),
///     metric: "ops_per_sec".into(), unit: "ops/s".into(), higher_is_better: true,
///     baseline: "evd".into(), rounds,
/// };
/// let r = records_from(vec![m("evd", vec![10.0, 12.0, 11.0]), m("peer", vec![5.0, 6.0, 5.5])]);
/// assert_eq!(r[0].ratio_to_evd, Some(1.0));
/// assert_eq!(r[1].ratio_to_evd, Some(0.5));
/// ```
pub fn records_from(measurements: Vec<Measurement>) -> Vec<Record> {
    let mut records: Vec<Record> = measurements
        .into_iter()
        .filter_map(|m| {
            let s = Summary::of(&m.rounds)?;
            Some(Record {
                case: m.case,
                system: m.system,
                consumer: m.consumer,
                metric: m.metric,
                unit: m.unit,
                higher_is_better: m.higher_is_better,
                median: s.median,
                min: s.min,
                max: s.max,
                samples: s.samples,
                baseline: m.baseline,
                ratio_to_evd: None,
            })
        })
        .collect();
    fill_ratios(&mut records);
    records
}

/// Set each record's `ratio_to_evd` from the record of its baseline system
/// with the same case and metric.
pub fn fill_ratios(records: &mut [Record]) {
    let ratios: Vec<Option<f64>> = records
        .iter()
        .map(|r| {
            let base = find(records, &r.case, &r.baseline, &r.metric)?;
            ratio_to_evd(r.median, base.median)
        })
        .collect();
    for (r, ratio) in records.iter_mut().zip(ratios) {
        r.ratio_to_evd = ratio;
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
    /// CPU model from `/proc/cpuinfo`.
    pub cpu: String,
    /// Logical CPUs available to the process.
    pub logical_cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Whether the CPU reports running under a hypervisor.
    pub hypervisor: bool,
    /// `/proc/loadavg` when the run started: other work on the machine
    /// skews every figure.
    pub load_average: String,
}

impl Machine {
    /// Describe this machine (fields it cannot read are `"unknown"`).
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
        };
        Machine {
            cpu: field("model name").unwrap_or_else(|| "unknown".into()),
            logical_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            hypervisor: field("flags").is_some_and(|f| f.split(' ').any(|x| x == "hypervisor")),
            load_average: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|_| "unknown".into()),
        }
    }
}

/// One of the issue's targets, evaluated on this run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetCheck {
    /// What is compared, e.g. `evd try_dequeue / crossbeam ArrayQueue, throughput/u64/1p`.
    pub name: String,
    /// The measured ratio of medians (`null` if a side is missing).
    pub value: Option<f64>,
    /// The goal, e.g. `>= 1.0`.
    pub goal: String,
    /// Whether the goal is met (`null` if not measured).
    pub met: Option<bool>,
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
    /// Every record.
    pub records: Vec<Record>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
    /// Things the reader should know about this run (skipped parts, errors).
    pub notes: Vec<String>,
}

/// The ratio of `a`'s median to `b`'s for one case and metric.
fn ratio_of(records: &[Record], case: &str, metric: &str, a: &str, b: &str) -> Option<f64> {
    let a = find(records, case, a, metric)?;
    let b = find(records, case, b, metric)?;
    ratio_to_evd(a.median, b.median)
}

fn check(
    name: String,
    value: Option<f64>,
    goal_at_least: Option<f64>,
    goal_at_most: Option<f64>,
) -> TargetCheck {
    let (goal, met) = match (goal_at_least, goal_at_most) {
        (Some(g), _) => (format!(">= {g}"), value.map(|v| v >= g)),
        (_, Some(g)) => (format!("<= {g}"), value.map(|v| v <= g)),
        _ => (String::new(), None),
    };
    TargetCheck {
        name,
        value,
        goal,
        met,
    }
}

/// Evaluate the issue's targets on `records`.
///
/// Throughput targets compare like with like: evd's busy `try_dequeue`
/// against ArrayQueue's busy `pop`, and evd's blocking consumer against
/// tokio's `blocking_recv`.
pub fn targets(records: &[Record]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    for payload in ["u64", "event64"] {
        for posters in [1, 2] {
            let case = format!("throughput/{payload}/{posters}p");
            for (evd, peer, goal) in [
                ("evd try_dequeue", "crossbeam ArrayQueue", 1.0),
                ("evd batch+wait", "tokio mpsc", 2.0),
            ] {
                out.push(check(
                    format!("{evd} / {peer}, {case}"),
                    ratio_of(records, &case, "ops_per_sec", evd, peer),
                    Some(goal),
                    None,
                ));
            }
        }
    }
    out.push(check(
        "evd wait (park/unpark) / floor: raw park/unpark, wake-latency p50".into(),
        ratio_of(
            records,
            "wake-latency",
            "latency_p50_ns",
            "evd wait (park/unpark)",
            "floor: raw park/unpark",
        ),
        None,
        Some(1.1),
    ));
    out.push(check(
        "evd arm / arm then poll, instructions per re-arm".into(),
        ratio_of(
            records,
            "rearm",
            "instructions_per_rearm",
            "evd arm (one CAS)",
            "arm, then poll again",
        ),
        None,
        Some(0.5),
    ));
    out
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
        _ => format!("{v:.3} {unit}"),
    }
}

fn format_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".into(), |r| format!("{r:.2}×"))
}

/// The report as Markdown tables, one per case, plus the targets.
pub fn markdown(report: &Report) -> String {
    let mut s = String::new();
    let mut cases: Vec<&str> = Vec::new();
    for r in &report.records {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
    }
    for case in cases {
        let rows: Vec<&Record> = report.records.iter().filter(|r| r.case == case).collect();
        if case == "wake-latency" {
            latency_table(&mut s, case, &rows);
        } else {
            generic_table(&mut s, case, &rows);
        }
    }
    if !report.targets.is_empty() {
        let _ = writeln!(
            s,
            "### targets\n\n| target | measured | goal | met |\n|---|---|---|---|"
        );
        for t in &report.targets {
            let met = match t.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "not measured",
            };
            let v = t.value.map_or_else(|| "n/a".into(), |v| format!("{v:.2}"));
            let _ = writeln!(s, "| {} | {} | {} | {} |", t.name, v, t.goal, met);
        }
        s.push('\n');
    }
    for n in &report.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

fn generic_table(s: &mut String, case: &str, rows: &[&Record]) {
    let _ = writeln!(
        s,
        "### {case}\n\n| system | consumer | metric | median | min – max | ratio to evd (vs) |\n|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} – {} | {} ({}) |",
            r.system,
            r.consumer,
            r.metric,
            format_value(r.median, &r.unit),
            format_value(r.min, &r.unit),
            format_value(r.max, &r.unit),
            format_ratio(r.ratio_to_evd),
            r.baseline,
        );
    }
    s.push('\n');
}

fn latency_table(s: &mut String, case: &str, rows: &[&Record]) {
    let _ = writeln!(
        s,
        "### {case} (one way, post → consumer running; median of rounds [min – max])\n\n| system | consumer | p50 | p99 | p99.9 | p50 ratio to evd wait |\n|---|---|---|---|---|---|"
    );
    let mut systems: Vec<&str> = Vec::new();
    for r in rows {
        if !systems.contains(&r.system.as_str()) {
            systems.push(&r.system);
        }
    }
    for sys in systems {
        let get = |metric: &str| rows.iter().find(|r| r.system == sys && r.metric == metric);
        let cell = |metric: &str| {
            get(metric).map_or_else(
                || "n/a".to_string(),
                |r| {
                    format!(
                        "{} [{} – {}]",
                        format_value(r.median, "ns"),
                        format_value(r.min, "ns"),
                        format_value(r.max, "ns")
                    )
                },
            )
        };
        let consumer = get("latency_p50_ns").map_or("", |r| r.consumer.as_str());
        let ratio = get("latency_p50_ns").and_then(|r| r.ratio_to_evd);
        let _ = writeln!(
            s,
            "| {sys} | {consumer} | {} | {} | {} | {} |",
            cell("latency_p50_ns"),
            cell("latency_p99_ns"),
            cell("latency_p999_ns"),
            format_ratio(ratio)
        );
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(case: &str, system: &str, metric: &str, median: f64, baseline: &str) -> Record {
        Record {
            case: case.into(),
            system: system.into(),
            consumer: "busy".into(),
            metric: metric.into(),
            unit: "ops/s".into(),
            higher_is_better: true,
            median,
            min: median,
            max: median,
            samples: 1,
            baseline: baseline.into(),
            ratio_to_evd: None,
        }
    }

    #[test]
    fn ratios_use_the_same_case_and_metric_only() {
        let mut rs = vec![
            rec("a", "evd", "m", 100.0, "evd"),
            rec("b", "evd", "m", 10.0, "evd"),
            rec("a", "peer", "m", 50.0, "evd"),
            rec("b", "peer", "m", 50.0, "evd"),
            rec("a", "peer", "other", 50.0, "evd"),
        ];
        fill_ratios(&mut rs);
        assert_eq!(rs[0].ratio_to_evd, Some(1.0));
        assert_eq!(rs[2].ratio_to_evd, Some(0.5));
        assert_eq!(rs[3].ratio_to_evd, Some(5.0));
        assert_eq!(rs[4].ratio_to_evd, None, "no evd record for that metric");
    }

    #[test]
    fn json_has_the_documented_fields() {
        let report = Report {
            schema: SCHEMA.into(),
            command: "evd-bench compare".into(),
            quick: true,
            started_unix_s: 1,
            duration_s: 2.0,
            machine: Machine {
                cpu: "cpu".into(),
                logical_cpus: 2,
                kernel: "k".into(),
                hypervisor: true,
                load_average: "0.00 0.00 0.00".into(),
            },
            records: records_from(vec![Measurement {
                case: "throughput/u64/1p".into(),
                system: "evd try_dequeue".into(),
                consumer: "busy".into(),
                metric: "ops_per_sec".into(),
                unit: "ops/s".into(),
                higher_is_better: true,
                baseline: "evd try_dequeue".into(),
                rounds: vec![1.0, 3.0, 2.0],
            }]),
            targets: vec![],
            notes: vec![],
        };
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        for key in [
            "schema",
            "command",
            "quick",
            "started_unix_s",
            "duration_s",
            "machine",
            "records",
            "targets",
            "notes",
        ] {
            assert!(v.get(key).is_some(), "top-level {key}");
        }
        let r = &v["records"][0];
        for key in [
            "case",
            "system",
            "consumer",
            "metric",
            "unit",
            "higher_is_better",
            "median",
            "min",
            "max",
            "samples",
            "baseline",
            "ratio_to_evd",
        ] {
            assert!(r.get(key).is_some(), "record field {key}");
        }
        assert_eq!(r["median"], 2.0);
        assert_eq!(r["min"], 1.0);
        assert_eq!(r["max"], 3.0);
        assert_eq!(r["ratio_to_evd"], 1.0);
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn targets_report_missing_sides_as_not_measured() {
        let ts = targets(&[]);
        assert!(!ts.is_empty());
        assert!(ts.iter().all(|t| t.value.is_none() && t.met.is_none()));
    }

    #[test]
    fn targets_compare_like_with_like() {
        let case = "throughput/u64/1p";
        let rs = vec![
            rec(
                case,
                "evd try_dequeue",
                "ops_per_sec",
                90.0,
                "evd try_dequeue",
            ),
            rec(
                case,
                "crossbeam ArrayQueue",
                "ops_per_sec",
                100.0,
                "evd try_dequeue",
            ),
            rec(
                case,
                "evd batch+wait",
                "ops_per_sec",
                30.0,
                "evd batch+wait",
            ),
            rec(case, "tokio mpsc", "ops_per_sec", 10.0, "evd batch+wait"),
        ];
        let ts = targets(&rs);
        let aq = ts
            .iter()
            .find(|t| t.name.contains("ArrayQueue, throughput/u64/1p"))
            .unwrap();
        assert_eq!(aq.value, Some(0.9));
        assert_eq!(aq.met, Some(false));
        let tk = ts
            .iter()
            .find(|t| t.name.contains("tokio mpsc, throughput/u64/1p"))
            .unwrap();
        assert_eq!(tk.value, Some(3.0));
        assert_eq!(tk.met, Some(true));
    }

    #[test]
    fn markdown_lists_every_record() {
        let rs = vec![
            rec("x", "evd", "ops_per_sec", 2e6, "evd"),
            rec("x", "peer", "ops_per_sec", 1e6, "evd"),
        ];
        let report = Report {
            schema: SCHEMA.into(),
            command: String::new(),
            quick: false,
            started_unix_s: 0,
            duration_s: 0.0,
            machine: Machine::detect(),
            records: rs,
            targets: vec![],
            notes: vec!["n1".into()],
        };
        let md = markdown(&report);
        assert!(md.contains("| evd | busy | ops_per_sec | 2.00 M/s"));
        assert!(md.contains("| peer |"));
        assert!(md.contains("note: n1"));
    }
}
