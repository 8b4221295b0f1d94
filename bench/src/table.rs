//! The report as Markdown: a line that names the run and the machine (CPU model first), one table
//! per section, the targets and the notes. Every table goes through one writer: a section is its
//! title and prose, how its records form rows (`Rows`) and its columns (`Col`); each cell reads
//! the row's records by metric, in their unit and direction, with the ratio to evd.

use crate::cno::{FAIRNESS_METRIC, THROUGHPUT_POSTERS, TRIGGER_EVDS, Variant, WAKE_CASE};
use crate::report::{Record, Report, Role, format_value, grouped};
use crate::stats::Summary;
use std::fmt::Write as _;

/// Write one Markdown table: `### title`, the prose, the header and the rows.
fn write_table(s: &mut String, title: &str, about: &str, head: &[String], rows: &[Vec<String>]) {
    let _ = writeln!(s, "### {title}\n\n{about}\n\n| {} |", head.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(head.len()));
    for row in rows {
        let _ = writeln!(s, "| {} |", row.join(" | "));
    }
    s.push('\n');
}

/// A column: its heading and how a row's records fill its cell.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Col {
    System,
    Consumer,
    Metric,
    /// The CNO trigger variant of the row's case.
    Variant,
    Median,
    /// `min – max`.
    Range,
    /// `median [min – max]` of the row's record of a metric, under a heading.
    Spread(&'static str, &'static str),
    /// `median [min – max] (ratio)` of the row's record at N bound EVDs.
    AtEvds(usize),
    /// The diagnostics: median over rounds (slowest round → fastest round).
    EmptyPolls,
    FullRefusals,
    /// `—` for a peer: not visible.
    RoomWakes,
    SameCpu,
    /// Threads, marked when oversubscribed.
    Threads,
    /// The ratio to the row's evd baseline, under a heading; with `true` marked as noise when
    /// either side is below its floor.
    Ratio(&'static str, bool),
}

/// How a section's records form rows.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rows {
    /// A row per record.
    Record,
    /// A row per system that has a record of this metric (the row's main record); its other
    /// metrics fill the other columns.
    System(&'static str),
    /// A row per CNO trigger variant and system, a column per EVD count.
    VariantSystem,
}

/// Write the table of `records` with [`write_table`].
fn write_section(s: &mut String, (title, about, rows, cols): Section, records: &[&Record]) {
    // The key of a record's row, and whether it is the row's main record.
    let key = |r: &Record| match rows {
        Rows::Record => ((r.system.clone(), r.metric.clone()), true),
        Rows::System(m) => ((r.system.clone(), String::new()), r.metric == m),
        Rows::VariantSystem => {
            let prefix = r.case.rsplit_once('/').map_or("", |(p, _)| p);
            ((prefix.into(), r.system.clone()), true)
        }
    };
    // A row per key that has a main record, in the order of the key's first record.
    let rows: Vec<Vec<String>> = grouped(records.iter().copied(), |r| key(r).0)
        .into_iter()
        .filter_map(|(_, row)| {
            let main = row.iter().copied().find(|r| key(r).1)?;
            Some(cols.iter().map(|&c| cell(c, main, &row, records)).collect())
        })
        .collect();
    let head: Vec<String> = cols.iter().map(|&c| heading(c)).collect();
    write_table(s, &title, &about, &head, &rows);
}

fn heading(c: Col) -> String {
    match c {
        Col::System => "system",
        Col::Consumer => "consumer",
        Col::Metric => "metric",
        Col::Variant => "variant",
        Col::Median => "median",
        Col::Range => "min – max",
        Col::Spread(head, _) | Col::Ratio(head, _) => head,
        Col::AtEvds(n) => return format!("N = {n}"),
        Col::EmptyPolls => "empty polls/msg",
        Col::FullRefusals => "full/msg",
        Col::RoomWakes => "room wakes/msg",
        Col::SameCpu => "same CPU",
        Col::Threads => "threads",
    }
    .into()
}

/// The cell of column `c` in the row of `main` (`row`: all the row's records; `section`: all the
/// section's).
fn cell(c: Col, main: &Record, row: &[&Record], section: &[&Record]) -> String {
    let below = |r: &Record| r.below_floor == Some(true);
    let three = |x: f64| format!("{x:.3}");
    match c {
        Col::System => main.system.clone(),
        Col::Consumer => main.consumer.clone(),
        Col::Metric => main.metric.clone(),
        Col::Variant => {
            let v = Variant::ALL
                .into_iter()
                .find(|v| main.case.starts_with(v.prefix));
            v.map_or("", |v| v.label).into()
        }
        Col::Median => format_value(main.median, &main.unit),
        Col::Range => {
            let (min, max) = (
                format_value(main.min, &main.unit),
                format_value(main.max, &main.unit),
            );
            format!("{min} – {max}")
        }
        Col::Spread(_, metric) => match row.iter().find(|r| r.metric == metric) {
            Some(r) if below(r) => format!("{} (below floor: noise)", spread(r)),
            Some(r) => spread(r),
            None => "n/a".into(),
        },
        Col::AtEvds(n) => {
            let Some(r) = row.iter().find(|r| r.case.ends_with(&format!("/{n}"))) else {
                return "n/a".into();
            };
            let ratio = match (&r.baseline, r.ratio_to_evd) {
                (Some(b), _) if *b == r.system => "reference".to_string(),
                (_, Some(x)) => format!("{x:.2}×"),
                _ => "n/a".into(),
            };
            format!("{} ({ratio})", spread(r))
        }
        Col::EmptyPolls => diagnostic(main, &main.empty_polls_per_msg, three),
        Col::FullRefusals => diagnostic(main, &main.full_refusals_per_msg, three),
        Col::RoomWakes if main.room_wakes_per_msg.is_none() && main.role != Role::Evd => "—".into(),
        Col::RoomWakes => diagnostic(main, &main.room_wakes_per_msg, three),
        Col::SameCpu => diagnostic(main, &main.same_cpu_share, |x| {
            format!("{:.0} %", x * 100.0)
        }),
        Col::Threads if main.oversubscribed => format!("{} (oversubscribed)", main.threads),
        Col::Threads => main.threads.to_string(),
        Col::Ratio(_, noise) => {
            let base_below = main.baseline.as_deref().is_some_and(|b| {
                let base = |r: &&&Record| r.system == b && r.metric == main.metric;
                section.iter().filter(base).any(|r| below(r))
            });
            let ratio = match (&main.baseline, main.ratio_to_evd) {
                (None, _) => "— (evd variant)".into(),
                (Some(b), _) if *b == main.system => "1.00× (reference)".into(),
                (Some(b), Some(x)) => format!("{x:.2}× (vs {b})"),
                (Some(b), None) => format!("n/a (vs {b})"),
            };
            if noise && (below(main) || base_below) {
                format!("{ratio} (noise: below floor)")
            } else {
                ratio
            }
        }
    }
}

/// `median [min – max]` of a record.
fn spread(r: &Record) -> String {
    let v = |x| format_value(x, &r.unit);
    format!("{} [{} – {}]", v(r.median), v(r.min), v(r.max))
}

/// `median (slowest → fastest round)` of a per-round diagnostic of `r`: the slowest round is the
/// lowest of a throughput record, the highest of a latency.
fn diagnostic(r: &Record, per_round: &Option<Vec<Option<f64>>>, fmt: fn(f64) -> String) -> String {
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
fn ratio_sentence(higher_is_better: bool, unit: &str) -> String {
    let (ratio, better) = if higher_is_better {
        ("evd ÷ peer", "evd faster")
    } else {
        ("peer ÷ evd", "evd faster or cheaper")
    };
    format!("ratio = {ratio} ({unit}, medians of this run): **above 1 = {better}**")
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

const CNO_THROUGHPUT_ABOUT: &str = "a poster moves to the next EVD after a refusal as after a \
post, so an EVD the waiter neglects stays full and gets nothing. served max/min = the most events \
the waiter served from one EVD over the fewest from another, over the run (1 = even)";

const CNO_THROUGHPUT_DIAGS: &str = "full = posts (post_batch calls) refused as full, per event; \
empty polls = drains that found nothing, per event; same CPU = share of CPU samples with a poster \
on the waiter's CPU.";

const PAIR_ABOUT: &str = " The loop as compiled: here the compiler inlines evd's post and \
try_dequeue and calls ArrayQueue's push and pop out of line (a crate that calls them from one \
place only gets them inlined, and then the two run about even); single-thread/pair-out-of-line has \
each operation of both behind a call.";

const PAIR_OUT_OF_LINE_ABOUT: &str = " Each post and each dequeue of both systems is a call to a \
non-inlined function of the bench: one call per operation each, the cost of the code and not of \
the inliner's choice.";

/// A section's table: its title, its prose, how its records form rows, and its columns.
type Section = (String, String, Rows, Vec<Col>);

/// The section of `case` (its records: `records`), as its table shows it.
fn section(case: &str, records: &[&Record], report: &Report) -> Section {
    use Col::*;
    let over = match records.iter().find(|r| r.oversubscribed) {
        Some(r) => format!(
            " **Oversubscribed**: {} threads on {} CPUs, so threads take turns on a CPU.",
            r.threads, report.machine.logical_cpus
        ),
        None => String::new(),
    };
    let ops = ratio_sentence(true, "ops/s");
    let moving = |diags: &[Col]| {
        let tail = [SameCpu, Threads, Ratio("ratio", false)];
        [&[System, Consumer, Median, Range][..], diags, &tail].concat()
    };
    let percentiles = |title: String, about: &str| {
        let mut cols = vec![System, Consumer];
        cols.push(Spread("p50", "latency_p50_ns"));
        cols.push(Spread("p99", "latency_p99_ns"));
        cols.push(Spread("p99.9", "latency_p999_ns"));
        if records.iter().any(|r| r.same_cpu_share.is_some()) {
            cols.push(SameCpu);
        }
        cols.extend([Threads, Ratio("p50 ratio", true)]);
        let about = format!("{} at p50. {about}{over}", ratio_sentence(false, "ns"));
        (title, about, Rows::System("latency_p50_ns"), cols)
    };
    let latency = |way: &str| {
        let title = format!("{case} (one way, {way}; median of rounds [min – max])");
        percentiles(title, LATENCY_ABOUT)
    };
    if case == "cno-trigger" {
        let about = format!("{}, {CNO_TRIGGER_ABOUT}{over}", ratio_sentence(false, "ns"));
        let cols = [
            &[Variant, System][..],
            &TRIGGER_EVDS.map(AtEvds),
            &[Threads],
        ]
        .concat();
        let title = "cno-trigger (ns per cycle: a post to a random enabled EVD → the waiter takes \
            it, drains it and re-enables it; median of rounds [min – max] (ratio))";
        (title.into(), about, Rows::VariantSystem, cols)
    } else if case == WAKE_CASE {
        latency("post → the CNO waiter's wait returning the key")
    } else if case == "wake-latency" {
        latency("post → consumer running")
    } else if case == "room-wake-latency" {
        latency("consumer's dequeue that frees the slot → blocked poster running")
    } else if case == crate::pingpong::CASE {
        let title = format!(
            "{case} (round trip of two busy-polling threads; median of rounds [min – max])"
        );
        percentiles(title, PINGPONG_ABOUT)
    } else if case.starts_with("cno-throughput") {
        let feed = if case.starts_with("cno-throughput-batch/") {
            "each poster posts batches of up to 16 events (one post_batch) to the next EVD in turn, \
             so that posters outrun the waiter (saturation; full/msg shows how often an EVD was full)"
        } else {
            "each poster posts one event at a time to the next EVD in turn"
        };
        let about = format!(
            "{ops}. Posters: {feed}; {CNO_THROUGHPUT_ABOUT}. {DIAG_INTRO}: {CNO_THROUGHPUT_DIAGS}{over}"
        );
        let title =
            format!("{case} (one waiter, {THROUGHPUT_POSTERS} poster threads; N = bound EVDs)");
        let diags = [
            Spread("served max/min", FAIRNESS_METRIC),
            FullRefusals,
            EmptyPolls,
        ];
        (title, about, Rows::System("ops_per_sec"), moving(&diags))
    } else if case.starts_with("throughput/") {
        let floors = records.iter().any(|r| r.role == Role::Floor);
        let floors = if floors { THROUGHPUT_FLOORS } else { "" };
        let about = format!(
            "{ops}. Each row is compared with the evd row of its consumer style (vs). Posters: \
             {}.{over}{floors}\n{DIAG_INTRO}: {THROUGHPUT_DIAGS}",
            report.poster_policy
        );
        (
            case.into(),
            about,
            Rows::Record,
            moving(&[EmptyPolls, FullRefusals, RoomWakes]),
        )
    } else if case.starts_with("room/") {
        let about = format!(
            "{ops}. Each row is compared with the evd row of its consumer style (vs). Posters wait \
             for room: {}; the ring is full most of the time, so posters sleep and the consumer \
             wakes them (the work per event is in the notes).{over}\n{DIAG_INTRO}: {ROOM_DIAGS}",
            crate::room::ROOM_POLICY
        );
        (
            case.into(),
            about,
            Rows::Record,
            moving(&[RoomWakes, EmptyPolls]),
        )
    } else {
        let mut sentences: Vec<String> = Vec::new();
        for r in records {
            let s = format!(
                "{}: {}",
                r.metric,
                ratio_sentence(r.higher_is_better, &r.unit)
            );
            if !sentences.contains(&s) {
                sentences.push(s);
            }
        }
        let about_case = match case {
            "single-thread/pair" => PAIR_ABOUT,
            "single-thread/pair-out-of-line" => PAIR_OUT_OF_LINE_ABOUT,
            _ => "",
        };
        let about = format!("{}.{about_case}{over}", sentences.join("; "));
        let cols = vec![
            System,
            Consumer,
            Metric,
            Median,
            Range,
            Threads,
            Ratio("ratio", false),
        ];
        (case.into(), about, Rows::Record, cols)
    }
}

/// The report as Markdown: a line that names the run and the machine (CPU model first), a table
/// per case (one for every CNO trigger case), the targets and the notes.
pub fn markdown(report: &Report) -> String {
    let mut s = String::new();
    let m = &report.machine;
    let _ = writeln!(
        s,
        "evd-bench compare{} on CPU {}, {} logical CPUs{}, kernel {}, load average {} at start \
         and {} at end, {:.1} s\n",
        if report.quick { " --quick" } else { "" },
        m.cpu_line(),
        m.logical_cpus,
        if m.hypervisor {
            " (under a hypervisor)"
        } else {
            ""
        },
        m.kernel,
        m.load_average,
        m.load_average_end,
        report.duration_s
    );
    // A section per case in first-seen order; every CNO trigger case is in one.
    let group = |r: &Record| {
        let trigger = r.case.starts_with("cno-trigger");
        if trigger { "cno-trigger" } else { &r.case }.to_owned()
    };
    for (g, records) in grouped(&report.records, group) {
        write_section(&mut s, section(&g, &records, report), &records);
    }
    if !report.targets.is_empty() {
        let head = ["target", "measured", "goal", "met", "rounds", "caveats"].map(String::from);
        let row = |t: &crate::report::TargetCheck| {
            let met = match t.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "not measured",
            };
            // Every target is a ratio (`TargetCheck::unit`).
            let value = t.value.map_or("n/a".into(), |v| format!("{v:.2}"));
            let rounds = format!("{} of {}", t.rounds_met, t.rounds_measured);
            let caveats = t.caveats.join("; ");
            vec![
                t.name.clone(),
                value,
                t.goal.clone(),
                met.into(),
                rounds,
                caveats,
            ]
        };
        let rows: Vec<Vec<String>> = report.targets.iter().map(row).collect();
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
