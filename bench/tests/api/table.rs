use super::report::{diag, sample_report};
use evd_bench::cno::Variant;
use evd_bench::report::{Record, Role, records_from, targets};
use evd_bench::table::*;

#[test]
fn markdown_names_the_cpu_first_and_shows_ping_pong_percentiles() {
    let mut report = sample_report();
    let md = markdown(&report);
    let first = md.lines().next().unwrap();
    assert!(
        first.contains("on CPU cpu (GenuineIntel, family 6, model 207), 2 logical CPUs"),
        "{md}"
    );
    let pp = evd_bench::pingpong::CASE;
    let m = |system: &str, role, metric, v| {
        let mut m = Record::new(pp, system, role, "busy/item", metric);
        m.baseline = Some("evd try_dequeue".into());
        m.threads = 2;
        m.set_round(0, v, Some(diag(None, None, None, Some(0.0))));
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
fn latency_table_marks_figures_below_the_floor_as_noise() {
    let m = |system: &str, role, median| {
        let mut m = Record::new("wake-latency", system, role, "blocking", "latency_p50_ns");
        m.baseline = Some("evd wait".into());
        m.floor = (role != Role::Floor).then(|| "floor".into());
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
        let mut m = Record::new(
            "room/cap64/1p",
            system,
            role,
            "blocking/item",
            "ops_per_sec",
        );
        m.baseline = Some("evd post_blocking+dequeue".into());
        m.threads = 2;
        m.set_round(0, 1e6, Some(diag(None, None, wakes, Some(0.0))));
        m
    };
    let wake = |system: &str, role, median| {
        let mut m = Record::new(
            "room-wake-latency",
            system,
            role,
            "blocking",
            "latency_p50_ns",
        );
        m.baseline = Some("evd post_blocking (park/unpark)".into());
        m.floor = (role != Role::Floor).then(|| "floor: raw park/unpark".into());
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
    use evd_bench::cno::{CYCLE_METRIC, CnoSystem, FAIRNESS_METRIC, Feed, WAKE_CASE};
    let evd = CnoSystem::EvdCno.row().name;
    let scan = CnoSystem::Scan.row().name;
    let row = |case: &str, system: &str, metric: &str, v: f64| {
        let role = if system == evd { Role::Evd } else { Role::Peer };
        let mut m = Record::new(case, system, role, "blocking/batch", metric);
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
        let mut m = Record::new(WAKE_CASE, system, role, "blocking", "latency_p50_ns");
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
