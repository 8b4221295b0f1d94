//! The project's targets, as data, in report order ([`crate::report::targets`] evaluates them). A row
//! compares side `a` with side `b` on `metric` in `case` (or `a` alone when `b` is `None`), and is
//! named `<label>: <a> ÷ <b>, <quantity>, <case>`.

/// Which value a target reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Side {
    /// This system's median, in the target's case.
    System(&'static str),
    /// A system, under another name in the target's name.
    Named(&'static str, &'static str),
    /// A system in another case, under another name: `(name, system, case)`.
    At(&'static str, &'static str, &'static str),
    /// The best median of these systems, named `<name> (<best system>)`.
    Best(&'static str, &'static [&'static str]),
    /// The worst median of these systems' empty polls per event (of their `ops_per_sec` records),
    /// named `<name> (<worst system>)`; each round's value is that round's worst.
    WorstEmptyPolls(&'static str, &'static [&'static str]),
}

/// The goal of a target: at least or at most a value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// `value >= g`.
    AtLeast(f64),
    /// `value <= g`.
    AtMost(f64),
}

/// One target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Target {
    /// The start of its name.
    pub label: &'static str,
    /// The numerator (or the only side).
    pub a: Side,
    /// The denominator; `None` for a target on `a`'s value alone.
    pub b: Option<Side>,
    /// The metric both sides read.
    pub metric: &'static str,
    /// The quantity in words, in the name.
    pub quantity: &'static str,
    /// The case.
    pub case: &'static str,
    /// The goal of `a ÷ b` (or of `a`).
    pub goal: Goal,
    /// Floor rows of the same case whose ratio to side `b` is stated as a caveat, `<floor> ÷ <short
    /// name of b>: x` (the floors, then the short name): how far a ring that pays the same
    /// read-modify-write per post as evd got against the same peer in the same run.
    pub ceilings: (&'static [&'static str], &'static str),
}

use Goal::{AtLeast, AtMost};
use Side::{At, Best, Named, System, WorstEmptyPolls};

const EVD_BUSY: Side = System("evd try_dequeue");
const ARRAY_QUEUE: Side = System("crossbeam ArrayQueue");
const EVD_BLOCKING: Side = System("evd batch+wait");
const OPS: &str = "ops_per_sec";
const RMW_FLOORS: &[&str] = &[
    "floor: stamp ring + 1 CAS per post",
    "floor: stamp ring + 1 fetch_add per post",
];
const BEST_BUSY_EVD: Side = Best(
    "best busy evd row",
    &["evd try_dequeue", "evd dequeue_batch"],
);
/// The notifying peers of the blocking targets: every row of std sync_channel, thingbuf, kanal and
/// crossbeam-channel (item and batch consumers alike; the best one counts).
pub const NOTIFYING_PEERS: &[&str] = &[
    "std sync_channel recv",
    "thingbuf mpsc recv",
    "kanal recv",
    "crossbeam-channel recv",
    "crossbeam-channel try_iter+recv",
    "std sync_channel try_iter+recv",
];
const BEST_PEER: Side = Best("best notifying peer", NOTIFYING_PEERS);
const EVD_BUSY_ROWS: Side = WorstEmptyPolls(
    "worst evd busy row",
    &["evd try_dequeue", "evd dequeue_batch", "evd dequeue_with"],
);
const EVD_BLOCKING_ROWS: Side = WorstEmptyPolls(
    "worst evd blocking row",
    &[
        "evd try_dequeue+wait",
        "evd batch+wait",
        "evd batch+arm+wait",
    ],
);
const EVD_CNO: &str = "evd Cno (wait, drain, enable_cno)";
const SCAN_CNO: &str = "scan CNO (flag + park, scan every EVD)";
const PARK_FLOOR: Side = System("floor: raw park/unpark");

const fn ratio(
    label: &'static str,
    a: Side,
    b: Side,
    metric: &'static str,
    quantity: &'static str,
    case: &'static str,
    goal: Goal,
) -> Target {
    Target {
        label,
        a,
        b: Some(b),
        metric,
        quantity,
        case,
        goal,
        ceilings: (&[], ""),
    }
}

const fn busy(label: &'static str, case: &'static str, goal: f64) -> Target {
    let t = ratio(
        label,
        EVD_BUSY,
        ARRAY_QUEUE,
        OPS,
        "ops/s",
        case,
        AtLeast(goal),
    );
    Target {
        ceilings: (RMW_FLOORS, "ArrayQueue"),
        ..t
    }
}

/// A target on `a`'s value alone.
const fn alone(
    label: &'static str,
    a: Side,
    metric: &'static str,
    quantity: &'static str,
    case: &'static str,
    goal: Goal,
) -> Target {
    Target {
        b: None,
        ..ratio(label, a, a, metric, quantity, case, goal)
    }
}

const fn empty_polls(rows: Side, case: &'static str) -> Target {
    let quantity = "empty polls per event";
    alone("empty polls", rows, OPS, quantity, case, AtMost(0.05))
}

/// Every target, in report order.
#[rustfmt::skip]
pub const TARGETS: &[Target] = &[
    busy("busy", "throughput/u64/1p", 2.0),
    busy("busy", "throughput/u64/2p", 2.5),
    busy("busy", "throughput/event64/1p", 1.5),
    busy("busy", "throughput/event64/2p", 1.5),
    ratio("blocking vs busy", EVD_BLOCKING, BEST_BUSY_EVD, OPS, "ops/s", "throughput/u64/1p", AtLeast(0.9)),
    ratio("blocking vs peers", EVD_BLOCKING, BEST_PEER, OPS, "ops/s", "throughput/u64/1p", AtLeast(1.5)),
    ratio("README loop", EVD_BLOCKING, BEST_PEER, OPS, "ops/s", "throughput/u64/1p", AtLeast(1.4)),
    ratio("explicit-arm loop", System("evd batch+arm+wait"), BEST_PEER, OPS, "ops/s", "throughput/u64/1p", AtLeast(1.4)),
    ratio("blocking vs busy", EVD_BLOCKING, BEST_BUSY_EVD, OPS, "ops/s", "throughput/u64/2p", AtLeast(0.9)),
    ratio("blocking vs peers", EVD_BLOCKING, BEST_PEER, OPS, "ops/s", "throughput/u64/2p", AtLeast(1.5)),
    ratio("README loop", EVD_BLOCKING, BEST_PEER, OPS, "ops/s", "throughput/u64/2p", AtLeast(1.4)),
    ratio("explicit-arm loop", System("evd batch+arm+wait"), BEST_PEER, OPS, "ops/s", "throughput/u64/2p", AtLeast(1.4)),
    busy("busy, any CPU", "throughput/u64/1p", 1.4),
    empty_polls(EVD_BUSY_ROWS, "throughput/u64/1p"),
    empty_polls(EVD_BLOCKING_ROWS, "throughput/u64/1p"),
    busy("busy, any CPU", "throughput/u64/2p", 1.4),
    empty_polls(EVD_BUSY_ROWS, "throughput/u64/2p"),
    empty_polls(EVD_BLOCKING_ROWS, "throughput/u64/2p"),
    busy("busy, any CPU", "throughput/event64/1p", 1.4),
    empty_polls(EVD_BUSY_ROWS, "throughput/event64/1p"),
    empty_polls(EVD_BLOCKING_ROWS, "throughput/event64/1p"),
    busy("busy, any CPU", "throughput/event64/2p", 1.4),
    empty_polls(EVD_BUSY_ROWS, "throughput/event64/2p"),
    empty_polls(EVD_BLOCKING_ROWS, "throughput/event64/2p"),
    ratio("single thread", System("evd post+try_dequeue"), System("crossbeam ArrayQueue push+pop"), "ns_per_pair", "ns per pair (time ratio)", "single-thread/pair", AtMost(0.65)),
    ratio("single thread", System("evd post+try_dequeue"), System("crossbeam ArrayQueue push+pop"), "ns_per_pair", "ns per pair (time ratio)", "single-thread/pair-out-of-line", AtMost(0.65)),
    ratio("arm()", System("evd arm (one CAS)"), System("floor: one uncontended CAS"), "ns_per_rearm", "ns per re-arm", "rearm", AtMost(1.2)),
    ratio("arm()", System("evd arm (one CAS)"), System("arm, then poll again"), "instructions_per_rearm", "instructions per re-arm", "rearm", AtMost(0.5)),
    ratio("wake", System("evd wait (park/unpark)"), PARK_FLOOR, "latency_p50_ns", "p50 ns", "wake-latency", AtMost(1.1)),
    ratio("room wake", System("evd post_blocking (park/unpark)"), PARK_FLOOR, "latency_p50_ns", "p50 ns", "room-wake-latency", AtMost(1.1)),
    ratio("busy ping-pong", EVD_BUSY, System("floor: two atomics"), "latency_p50_ns", "p50 ns", "pingpong/u64", AtMost(1.1)),
    ratio("busy ping-pong", EVD_BUSY, System("rtrb pop"), "latency_p50_ns", "p50 ns", "pingpong/u64", AtMost(0.8)),
    ratio("cno wake", System("evd Cno::wait (park/unpark)"), PARK_FLOOR, "latency_p50_ns", "p50 ns", "cno-wake-latency", AtMost(1.1)),
    ratio("cno trigger", Named("evd Cno at 1024 EVDs", EVD_CNO), At("at 1 EVD", EVD_CNO, "cno-trigger/1"), "ns_per_cycle", "ns per cycle", "cno-trigger/1024", AtMost(1.5)),
    ratio("cno trigger", System(SCAN_CNO), Named("evd Cno", EVD_CNO), "ns_per_cycle", "ns per cycle", "cno-trigger/1024", AtLeast(10.0)),
    ratio("cno trigger", Named("evd Cno at 1024 EVDs", EVD_CNO), At("at 1 EVD", EVD_CNO, "cno-trigger-xthread/1"), "ns_per_cycle", "ns per cycle", "cno-trigger-xthread/1024", AtMost(1.5)),
    ratio("cno trigger", System(SCAN_CNO), Named("evd Cno", EVD_CNO), "ns_per_cycle", "ns per cycle", "cno-trigger-xthread/1024", AtLeast(10.0)),
    alone("cno fairness", Named("evd Cno", EVD_CNO), "served_max_over_min", "most ÷ fewest events served per EVD", "cno-throughput-batch/16", AtMost(1.1)),
    alone("cno fairness", Named("evd Cno", EVD_CNO), "served_max_over_min", "most ÷ fewest events served per EVD", "cno-throughput-batch/256", AtMost(1.1)),
];
