//! The report as Markdown: a line that names the run and the machine (CPU model first), one table
//! per section, the targets and the notes.
//!
//! Every table goes through one writer, [`write_table`]. A section of records is a [`Section`]: its
//! title and prose, how its records form rows ([`Rows`]) and its columns ([`Col`]); each cell reads
//! the row's records by metric, in their unit and direction, with the ratio to evd.

use crate::cno::Variant;
use crate::report::{format_value, Record, Report, Role};
use crate::stats::Summary;
use std::fmt::Write as _;

/// Write one Markdown table: `### title`, the prose, the header and the rows.
pub fn write_table(
    s: &mut String,
    title: &str,
    about: &str,
    head: &[String],
    rows: &[Vec<String>],
) {
    let _ = writeln!(s, "### {title}\n\n{about}\n\n| {} |", head.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(head.len()));
    for row in rows {
        let _ = writeln!(s, "| {} |", row.join(" | "));
    }
    s.push('\n');
}

/// A per-round diagnostic of a record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Diag {
    /// [`Record::empty_polls_per_msg`].
    EmptyPolls,
    /// [`Record::full_refusals_per_msg`].
    FullRefusals,
    /// [`Record::room_wakes_per_msg`] (`—` for a peer: not visible).
    RoomWakes,
    /// [`Record::same_cpu_share`].
    SameCpu,
}

/// A column: its heading and how a row's records fill its cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Col {
    /// The row's system.
    System,
    /// How its consumer waits.
    Consumer,
    /// The metric of the row's record.
    Metric,
    /// The CNO trigger variant of the row's case.
    Variant,
    /// The median.
    Median,
    /// `min – max`.
    Range,
    /// `median [min – max]` of the row's record of a metric, under a heading.
    Spread(&'static str, &'static str),
    /// `median [min – max] (ratio)` of the row's record at N bound EVDs.
    AtEvds(usize),
    /// A diagnostic: median over rounds (slowest round → fastest round).
    Diag(Diag),
    /// Threads, marked when oversubscribed.
    Threads,
    /// The ratio to the row's evd baseline, under a heading.
    Ratio(&'static str),
    /// The ratio, marked as noise when either side is below its floor.
    RatioOrNoise(&'static str),
}

/// How a section's records form rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rows {
    /// A row per record.
    Record,
    /// A row per system that has a record of this metric (the row's main record); its other metrics
    /// fill the other columns.
    System(&'static str),
    /// A row per CNO trigger variant and system, a column per EVD count.
    VariantSystem,
}

/// One section of the report: a table of some of its records.
pub struct Section<'r> {
    /// The table's title.
    pub title: String,
    /// The prose under the title.
    pub about: String,
    /// The section's records.
    pub records: Vec<&'r Record>,
    /// How they form rows.
    pub rows: Rows,
    /// The columns.
    pub columns: Vec<Col>,
}

impl Section<'_> {
    /// The key of a record's row, and whether it is the row's main record.
    fn key(&self, r: &Record) -> ((String, String), bool) {
        match self.rows {
            Rows::Record => ((r.system.clone(), r.metric.clone()), true),
            Rows::System(m) => ((r.system.clone(), String::new()), r.metric == m),
            Rows::VariantSystem => {
                let prefix = r.case.rsplit_once('/').map_or("", |(p, _)| p);
                ((prefix.into(), r.system.clone()), true)
            }
        }
    }

    /// Write the section with [`write_table`].
    pub fn write(&self, s: &mut String) {
        let mut keys = Vec::new();
        for r in &self.records {
            let (k, main) = self.key(r);
            if main && !keys.contains(&k) {
                keys.push(k);
            }
        }
        let rows: Vec<Vec<String>> = keys
            .iter()
            .map(|k| {
                let row: Vec<&Record> = self
                    .records
                    .iter()
                    .copied()
                    .filter(|r| self.key(r).0 == *k)
                    .collect();
                let main = row
                    .iter()
                    .copied()
                    .find(|r| self.key(r).1)
                    .unwrap_or(row[0]);
                self.columns
                    .iter()
                    .map(|&c| cell(c, main, &row, &self.records))
                    .collect()
            })
            .collect();
        let head: Vec<String> = self.columns.iter().map(|&c| heading(c)).collect();
        write_table(s, &self.title, &self.about, &head, &rows);
    }
}

fn heading(c: Col) -> String {
    match c {
        Col::System => "system".into(),
        Col::Consumer => "consumer".into(),
        Col::Metric => "metric".into(),
        Col::Variant => "variant".into(),
        Col::Median => "median".into(),
        Col::Range => "min – max".into(),
        Col::Spread(head, _) | Col::Ratio(head) | Col::RatioOrNoise(head) => head.into(),
        Col::AtEvds(n) => format!("N = {n}"),
        Col::Diag(Diag::EmptyPolls) => "empty polls/msg".into(),
        Col::Diag(Diag::FullRefusals) => "full/msg".into(),
        Col::Diag(Diag::RoomWakes) => "room wakes/msg".into(),
        Col::Diag(Diag::SameCpu) => "same CPU".into(),
        Col::Threads => "threads".into(),
    }
}

/// The cell of column `c` in the row of `main` (`row`: all the row's records; `section`: all the
/// section's).
fn cell(c: Col, main: &Record, row: &[&Record], section: &[&Record]) -> String {
    let below = |r: &Record| r.below_floor == Some(true);
    match c {
        Col::System => main.system.clone(),
        Col::Consumer => main.consumer.clone(),
        Col::Metric => main.metric.clone(),
        Col::Variant => Variant::ALL
            .iter()
            .find(|v| main.case.starts_with(v.prefix()))
            .map_or("", |v| v.label())
            .into(),
        Col::Median => format_value(main.median, &main.unit),
        Col::Range => format!(
            "{} – {}",
            format_value(main.min, &main.unit),
            format_value(main.max, &main.unit)
        ),
        Col::Spread(_, metric) => row.iter().find(|r| r.metric == metric).map_or_else(
            || "n/a".into(),
            |r| {
                let noise = if below(r) {
                    " (below floor: noise)"
                } else {
                    ""
                };
                format!("{}{noise}", spread(r))
            },
        ),
        Col::AtEvds(n) => {
            let suffix = format!("/{n}");
            row.iter().find(|r| r.case.ends_with(&suffix)).map_or_else(
                || "n/a".into(),
                |r| {
                    let ratio = match (&r.baseline, r.ratio_to_evd) {
                        (Some(b), _) if *b == r.system => "reference".to_string(),
                        (_, Some(x)) => format!("{x:.2}×"),
                        _ => "n/a".into(),
                    };
                    format!("{} ({ratio})", spread(r))
                },
            )
        }
        Col::Diag(d) => diag_cell(main, d),
        Col::Threads if main.oversubscribed => format!("{} (oversubscribed)", main.threads),
        Col::Threads => main.threads.to_string(),
        Col::Ratio(_) => format_ratio(main),
        Col::RatioOrNoise(_) => {
            let base_below = main.baseline.as_deref().is_some_and(|b| {
                section
                    .iter()
                    .any(|r| r.system == b && r.metric == main.metric && below(r))
            });
            let noise = if below(main) || base_below {
                " (noise: below floor)"
            } else {
                ""
            };
            format!("{}{noise}", format_ratio(main))
        }
    }
}

/// `median [min – max]` of a record.
fn spread(r: &Record) -> String {
    let v = |x| format_value(x, &r.unit);
    format!("{} [{} – {}]", v(r.median), v(r.min), v(r.max))
}

fn format_ratio(r: &Record) -> String {
    match (&r.baseline, r.ratio_to_evd) {
        (None, _) => "— (evd variant)".into(),
        (Some(b), _) if *b == r.system => "1.00× (reference)".into(),
        (Some(b), Some(x)) => format!("{x:.2}× (vs {b})"),
        (Some(b), None) => format!("n/a (vs {b})"),
    }
}

/// `median (slowest → fastest round)` of a per-round diagnostic: the slowest round is the lowest of
/// a throughput record, the highest of a latency.
fn diag_cell(r: &Record, d: Diag) -> String {
    let (per_round, fmt): (_, fn(f64) -> String) = match d {
        Diag::EmptyPolls => (&r.empty_polls_per_msg, |x| format!("{x:.3}")),
        Diag::FullRefusals => (&r.full_refusals_per_msg, |x| format!("{x:.3}")),
        Diag::RoomWakes if r.room_wakes_per_msg.is_none() && r.role != Role::Evd => {
            return "—".into()
        }
        Diag::RoomWakes => (&r.room_wakes_per_msg, |x| format!("{x:.3}")),
        Diag::SameCpu => (&r.same_cpu_share, |x| format!("{:.0} %", x * 100.0)),
    };
    let Some(v) = per_round else {
        return "not countable".into();
    };
    let values: Vec<f64> = v.iter().flatten().copied().collect();
    let Some(s) = Summary::of(&values) else {
        return "n/a".into();
    };
    let valid = r
        .rounds
        .iter()
        .enumerate()
        .filter_map(|(i, v)| Some((i, (*v)?)));
    let low = valid
        .clone()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|x| x.0);
    let high = valid.max_by(|a, b| a.1.total_cmp(&b.1)).map(|x| x.0);
    let (slow, fast) = if r.higher_is_better {
        (low, high)
    } else {
        (high, low)
    };
    let at = |i: usize| v.get(i).copied().flatten().map_or("n/a".into(), fmt);
    match slow.zip(fast) {
        Some((slow, fast)) if slow != fast => {
            format!("{} ({} → {})", fmt(s.median), at(slow), at(fast))
        }
        _ => fmt(s.median),
    }
}

/// The sentence that states a table's ratio direction.
pub fn ratio_sentence(higher_is_better: bool, unit: &str) -> String {
    if higher_is_better {
        format!("ratio = evd ÷ peer ({unit}, medians of this run): **above 1 = evd faster**")
    } else {
        format!(
            "ratio = peer ÷ evd ({unit}, medians of this run): **above 1 = evd faster or cheaper**"
        )
    }
}

fn oversubscription(rows: &[&Record], cpus: usize) -> String {
    rows.iter()
        .find(|r| r.oversubscribed)
        .map_or_else(String::new, |r| {
            format!(
                " **Oversubscribed**: {} threads on {cpus} CPUs, so threads take turns on a CPU.",
                r.threads
            )
        })
}

const DIAG_INTRO: &str =
    "Diagnostics are medians over rounds, with (slowest round → fastest round)";

const THROUGHPUT_DIAGS: &str = "empty polls = consumer receive calls that returned nothing, per \
event (\"not countable\": the consumer only calls a blocking receive); full = posts refused as \
full, per event; room wakes = wakes evd sent to posters waiting for room, per event (evd rows; no \
poster waits here, so it is 0: these evd rows are the no-waiter cost of the room signal); same CPU \
= share of CPU samples with a poster on the consumer's CPU.";

const THROUGHPUT_FLOORS: &str = " The floor rows are rings of evd's slot layout that only move \
events: one with a single poster and no read-modify-write (1-poster cases only), one whose posters \
reserve with one CAS on a shared tail, as evd's reservation does, and one whose posters reserve \
with one fetch_add on it (a ticket taken cannot be handed back, so its posters wait for room \
instead of retrying): what a ring of these slots, and one that reserves with an RMW, reached in \
this run (their ratio is evd ÷ floor).";

const ROOM_DIAGS: &str = "room wakes = wakes evd sent to posters waiting for room, per event (evd \
rows; \"—\": a peer's wakes are not visible); empty polls = batch calls that returned nothing, per \
event; same CPU = share of CPU samples with a poster on the consumer's CPU. The cost of the room \
signal while no poster waits is in the evd rows of the throughput/ tables (room wakes 0 there).";

const LATENCY_ABOUT: &str = "Each row is compared with the evd row that sleeps the same way (vs). \
\"(below floor: noise)\" marks a median under the raw floor of the same sleep mechanism in this \
run: no system can wake faster than that, so the figure is noise, not a win; a p50 ratio with such \
a figure on either side is marked too.";

const PINGPONG_ABOUT: &str = "Two queues of capacity 1024 (A→B, B→A): one thread sends a u64 and \
polls until it comes back, the other polls and sends it back; both poll without ever sleeping \
(spin, and yield after 64 empty polls in a row), nothing is pinned, and each run starts with 2000 \
unrecorded round trips. Every row is compared with `evd try_dequeue`. The floor is two atomics on \
separate cache lines, each thread spinning on the other's: a figure below it is noise. Same CPU = \
share of CPU samples that found both threads on one CPU (median over rounds, with (slowest round → \
fastest round)): two busy threads on one CPU take turns, and their round trip is then a time \
slice.";

const CNO_TRIGGER_ABOUT: &str = "each against the evd Cno row of its column. N = bound EVDs. \
single-thread: post, then one pass of the waiter on the same thread; cross-thread: the harness \
posts, then spins until the waiter, on its own thread, has served the event (a ping-pong: the next \
post follows the acknowledgement at once, within the waiter's spin budget unless a thread is \
descheduled).";

const PAIR_ABOUT: &str = " The loop as compiled: here the compiler inlines evd's post and \
try_dequeue and calls ArrayQueue's push and pop out of line (a crate that calls them from one \
place only gets them inlined, and then the two run about even); single-thread/pair-out-of-line has \
each operation of both behind a call.";

const PAIR_OUT_OF_LINE_ABOUT: &str = " Each post and each dequeue of both systems is a call to a \
non-inlined function of the bench: one call per operation each, the cost of the code and not of \
the inliner's choice.";

/// The section of `case` (its records: `records`), as its table shows it.
fn section<'r>(case: &str, records: Vec<&'r Record>, report: &Report) -> Section<'r> {
    use Col::*;
    let over = oversubscription(&records, report.machine.logical_cpus);
    let ops = ratio_sentence(true, "ops/s");
    let head = [System, Consumer, Median, Range];
    let tail = [Diag(self::Diag::SameCpu), Threads, Ratio("ratio")];
    let percentiles = |title: String, about: &str, records: Vec<&'r Record>| {
        let mut columns = vec![System, Consumer];
        for (h, m) in [
            ("p50", "latency_p50_ns"),
            ("p99", "latency_p99_ns"),
            ("p99.9", "latency_p999_ns"),
        ] {
            columns.push(Spread(h, m));
        }
        if records.iter().any(|r| r.same_cpu_share.is_some()) {
            columns.push(Diag(self::Diag::SameCpu));
        }
        columns.extend([Threads, RatioOrNoise("p50 ratio")]);
        let about = format!("{} at p50. {about}{over}", ratio_sentence(false, "ns"));
        Section {
            title,
            about,
            records,
            rows: Rows::System("latency_p50_ns"),
            columns,
        }
    };
    let latency = |way: &str, records| {
        let title = format!("{case} (one way, {way}; median of rounds [min – max])");
        percentiles(title, LATENCY_ABOUT, records)
    };
    if case.starts_with("cno-trigger") {
        let about = format!("{}, {CNO_TRIGGER_ABOUT}{over}", ratio_sentence(false, "ns"));
        let mut columns = vec![Variant, System];
        columns.extend(crate::cno::TRIGGER_EVDS.map(AtEvds));
        columns.push(Threads);
        let title = "cno-trigger (ns per cycle: a post to a random enabled EVD → the waiter takes \
            it, drains it and re-enables it; median of rounds [min – max] (ratio))";
        Section {
            title: title.into(),
            about,
            records,
            rows: Rows::VariantSystem,
            columns,
        }
    } else if case == crate::cno::WAKE_CASE {
        latency("post → the CNO waiter's wait returning the key", records)
    } else if case == "wake-latency" {
        latency("post → consumer running", records)
    } else if case == "room-wake-latency" {
        latency(
            "consumer's dequeue that frees the slot → blocked poster running",
            records,
        )
    } else if case == crate::pingpong::CASE {
        let title = format!(
            "{case} (round trip of two busy-polling threads; median of rounds [min – max])"
        );
        percentiles(title, PINGPONG_ABOUT, records)
    } else if case.starts_with("cno-throughput") {
        let feed = if case.starts_with("cno-throughput-batch/") {
            "each poster posts batches of up to 16 events (one post_batch) to the next EVD in turn, \
             so that posters outrun the waiter (saturation; full/msg shows how often an EVD was full)"
        } else {
            "each poster posts one event at a time to the next EVD in turn"
        };
        let about = format!(
            "{ops}. Posters: {feed}; a poster moves to the next EVD after a refusal as after a \
             post, so an EVD the waiter neglects stays full and gets nothing. served max/min = the \
             most events the waiter served from one EVD over the fewest from another, over the run \
             (1 = even). {DIAG_INTRO}: full = posts (post_batch calls) refused as full, per event; \
             empty polls = drains that found nothing, per event; same CPU = share of CPU samples \
             with a poster on the waiter's CPU.{over}"
        );
        let mut columns = head.to_vec();
        columns.extend([
            Spread("served max/min", crate::cno::FAIRNESS_METRIC),
            Diag(self::Diag::FullRefusals),
            Diag(self::Diag::EmptyPolls),
        ]);
        columns.extend(tail);
        let title = format!(
            "{case} (one waiter, {} poster threads; N = bound EVDs)",
            crate::cno::THROUGHPUT_POSTERS
        );
        Section {
            title,
            about,
            records,
            rows: Rows::System("ops_per_sec"),
            columns,
        }
    } else if case.starts_with("throughput/") {
        let floors = if records.iter().any(|r| r.role == Role::Floor) {
            THROUGHPUT_FLOORS
        } else {
            ""
        };
        let about = format!(
            "{ops}. Each row is compared with the evd row of its consumer style (vs). Posters: \
             {}.{over}{floors}\n{DIAG_INTRO}: {THROUGHPUT_DIAGS}",
            report.poster_policy
        );
        let mut columns = head.to_vec();
        columns.extend([
            Diag(self::Diag::EmptyPolls),
            Diag(self::Diag::FullRefusals),
            Diag(self::Diag::RoomWakes),
        ]);
        columns.extend(tail);
        Section {
            title: case.into(),
            about,
            records,
            rows: Rows::Record,
            columns,
        }
    } else if case.starts_with("room/") {
        let about = format!(
            "{ops}. Each row is compared with the evd row of its consumer style (vs). Posters wait \
             for room: {}; the ring is full most of the time, so posters sleep and the consumer \
             wakes them (the work per event is in the notes).{over}\n{DIAG_INTRO}: {ROOM_DIAGS}",
            crate::room::ROOM_POLICY
        );
        let mut columns = head.to_vec();
        columns.extend([Diag(self::Diag::RoomWakes), Diag(self::Diag::EmptyPolls)]);
        columns.extend(tail);
        Section {
            title: case.into(),
            about,
            records,
            rows: Rows::Record,
            columns,
        }
    } else {
        let mut metrics: Vec<(&str, &str, bool)> = Vec::new();
        for r in &records {
            let m = (r.metric.as_str(), r.unit.as_str(), r.higher_is_better);
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
        let sentences: Vec<String> = metrics
            .iter()
            .map(|(m, unit, hib)| format!("{m}: {}", ratio_sentence(*hib, unit)))
            .collect();
        let about_case = match case {
            "single-thread/pair" => PAIR_ABOUT,
            "single-thread/pair-out-of-line" => PAIR_OUT_OF_LINE_ABOUT,
            _ => "",
        };
        let about = format!("{}.{about_case}{over}", sentences.join("; "));
        let columns = vec![
            System,
            Consumer,
            Metric,
            Median,
            Range,
            Threads,
            Ratio("ratio"),
        ];
        Section {
            title: case.into(),
            about,
            records,
            rows: Rows::Record,
            columns,
        }
    }
}

/// The report as Markdown: a line that names the run and the machine (CPU model first), tables, one
/// per case (one for every CNO trigger case), the targets and the notes.
pub fn markdown(report: &Report) -> String {
    let mut s = String::new();
    let m = &report.machine;
    let _ =
        writeln!(
        s,
        "evd-bench compare{} on CPU {}, {} logical CPUs{}, kernel {}, load average {} at start \
         and {} at end, {:.1} s\n",
        if report.quick { " --quick" } else { "" },
        m.cpu_line(),
        m.logical_cpus,
        if m.hypervisor { " (under a hypervisor)" } else { "" },
        m.kernel,
        m.load_average,
        m.load_average_end,
        report.duration_s
    );
    // A section per case in first-seen order; every CNO trigger case is in one.
    let group = |case: &str| {
        if case.starts_with("cno-trigger") {
            "cno-trigger".to_owned()
        } else {
            case.to_owned()
        }
    };
    let mut groups: Vec<String> = Vec::new();
    for r in &report.records {
        let g = group(&r.case);
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    for g in groups {
        let records = report
            .records
            .iter()
            .filter(|r| group(&r.case) == g)
            .collect();
        section(&g, records, report).write(&mut s);
    }
    if !report.targets.is_empty() {
        let head = ["target", "measured", "goal", "met", "rounds", "caveats"].map(String::from);
        let rows: Vec<Vec<String>> = report
            .targets
            .iter()
            .map(|t| {
                let met = match t.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "not measured",
                };
                let value = t.value.map_or_else(
                    || "n/a".into(),
                    |v| {
                        if t.unit == "ratio" {
                            format!("{v:.2}")
                        } else {
                            format_value(v, &t.unit)
                        }
                    },
                );
                let rounds = format!("{} of {}", t.rounds_met, t.rounds_measured);
                vec![
                    t.name.clone(),
                    value,
                    t.goal.clone(),
                    met.into(),
                    rounds,
                    t.caveats.join("; "),
                ]
            })
            .collect();
        let about = "Each value is computed from this run's medians in the direction its goal is \
            stated in (the name says what is divided by what); `rounds` counts the interleaved \
            rounds whose own ratio meets the goal.";
        write_table(&mut s, "targets", about, &head, &rows);
    }
    for n in &report.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}
