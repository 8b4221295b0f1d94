use evd_bench::report::*;

/// A one-round record, busy/item, evd if its system starts with `evd`.
pub(crate) fn rec(case: &str, system: &str, metric: &str, median: f64, baseline: &str) -> Record {
    let role = if system.starts_with("evd") {
        Role::Evd
    } else {
        Role::Peer
    };
    let mut m = Record::new(case, system, role, "busy/item", metric);
    m.baseline = Some(baseline.into());
    m.set_round(0, median, None);
    records_from(vec![m], 2).remove(0)
}

/// [`rec`] for each `(system, median, baseline)` of one case and metric.
pub(crate) fn recs(case: &str, metric: &str, rows: &[(&str, f64, &str)]) -> Vec<Record> {
    rows.iter()
        .map(|&(s, v, b)| rec(case, s, metric, v, b))
        .collect()
}

pub(crate) fn diag(
    empty: Option<f64>,
    full: Option<f64>,
    wakes: Option<f64>,
    cpu: Option<f64>,
) -> Diagnostics {
    Diagnostics {
        empty_polls_per_msg: empty,
        full_refusals_per_msg: full,
        room_wakes_per_msg: wakes,
        same_cpu_share: cpu,
    }
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
    let mut rs = recs(
        "r",
        "ns_per_rearm",
        &[("evd", 3.0, "evd"), ("peer", 6.0, "evd")],
    );
    fill_ratios(&mut rs);
    assert_eq!(rs[1].ratio_to_evd, Some(2.0), "peer costs twice as much");
}

#[test]
fn below_floor_and_oversubscription_are_marked() {
    let m = |system, role, v, threads| {
        let mut m = Record::new("w", system, role, "blocking", "latency_p50_ns");
        m.floor = (role != Role::Floor).then(|| "floor".into());
        m.threads = threads;
        m.set_round(0, v, None);
        m
    };
    let rs = records_from(
        vec![
            m("floor", Role::Floor, 10.0, 1),
            m("evd", Role::Evd, 9.0, 3),
            m("peer", Role::Peer, 11.0, 1),
        ],
        2,
    );
    assert_eq!(rs[0].below_floor, None);
    assert_eq!(rs[1].below_floor, Some(true));
    assert_eq!(rs[2].below_floor, Some(false));
    assert!(rs[1].oversubscribed && !rs[2].oversubscribed);
}

#[test]
fn diagnostics_follow_round_numbers() {
    let mut m = Record::new("t", "evd", Role::Evd, "busy/item", "ops_per_sec");
    let d = |e| diag(e, Some(0.5), None, Some(0.25));
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
    let mut m = Record::new("t", "peer", Role::Peer, "blocking/item", "ops_per_sec");
    m.set_round(0, 1.0, Some(d(None)));
    let r = records_from(vec![m], 2).remove(0);
    assert_eq!(r.empty_polls_per_msg, None, "not countable is null");
    assert_eq!(r.full_refusals_per_msg, Some(vec![Some(0.5)]));
    assert_eq!(r.room_wakes_per_msg, None, "a peer's room wakes are null");
    // A room row: blocking sends (no refusal count), evd's room wakes.
    let mut m = Record::new(
        "room/cap64/1p",
        "evd",
        Role::Evd,
        "blocking/item",
        "ops_per_sec",
    );
    m.set_round(0, 1.0, Some(diag(None, None, Some(0.75), None)));
    let r = records_from(vec![m], 2).remove(0);
    assert_eq!(r.full_refusals_per_msg, None);
    assert_eq!(r.room_wakes_per_msg, Some(vec![Some(0.75)]));
}

/// A report of one busy evd throughput record over three rounds.
pub(crate) fn sample_report() -> Report {
    let mut m = Record::new(
        "throughput/u64/1p",
        "evd try_dequeue",
        Role::Evd,
        "busy/item",
        "ops_per_sec",
    );
    m.baseline = Some("evd try_dequeue".into());
    m.threads = 2;
    for (i, v) in [1e6, 3e6, 2e6].into_iter().enumerate() {
        m.set_round(i, v, Some(diag(Some(0.1), Some(0.0), Some(0.0), Some(0.0))));
    }
    let machine = Machine {
        cpu: "cpu".into(),
        cpu_vendor: "GenuineIntel".into(),
        cpu_family: Some(6),
        cpu_model: Some(207),
        logical_cpus: 2,
        kernel: "k".into(),
        hypervisor: true,
        load_average: "0.00 0.00 0.00".into(),
        load_average_end: "0.10 0.00 0.00".into(),
    };
    Report {
        schema: SCHEMA.into(),
        command: "evd-bench compare".into(),
        quick: true,
        started_unix_s: 1,
        duration_s: 2.0,
        machine,
        ratio_convention: RATIO_CONVENTION.into(),
        poster_policy: "p".into(),
        records: records_from(vec![m], 2),
        targets: targets(&[]),
        notes: vec![],
    }
}

/// The fields the schema table that follows `heading` in
/// `bench/README.md` lists.
fn documented(heading: &str) -> Vec<String> {
    let readme = include_str!("../../README.md");
    let table = &readme[readme.find(heading).expect(heading)..];
    let table = &table[table.find("| field |").unwrap()..];
    let mut fields: Vec<String> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with("| "))
        .flat_map(|l| {
            l.split('|')
                .nth(1)
                .unwrap()
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    fields.sort();
    fields
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
    // Exactly the fields of bench/README.md's three schema tables.
    assert_eq!(keys(&v), documented("Top level:"));
    let r = &v["records"][0];
    assert_eq!(keys(r), documented("Each record:"));
    assert_eq!(keys(&v["targets"][0]), documented("Each target"));
    let machine = "cpu cpu_family cpu_model cpu_vendor hypervisor kernel load_average load_average_end logical_cpus";
    assert_eq!(keys(&v["machine"]).join(" "), machine);
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
fn every_system_a_target_names_is_one_the_comparison_runs() {
    use evd_bench::targets::{Side, TARGETS};
    use evd_bench::{cno, latency, pingpong, room, single, throughput::Queue};
    let mut known: Vec<&str> = Queue::ALL
        .into_iter()
        .chain(Queue::FLOORS)
        .map(|q| q.row().name)
        .collect();
    known.extend(
        single::REARM
            .iter()
            .chain(&single::PAIR)
            .map(|l| l.row.name),
    );
    known.extend(cno::CnoSystem::ALL.map(|s| s.row().name));
    let latency = [
        &latency::WAKE[..],
        &room::ROOM_WAKE,
        &pingpong::PINGPONG,
        &cno::CNO_WAKE,
    ];
    known.extend(latency.iter().flat_map(|s| s.iter().map(|s| s.row.name)));
    for t in TARGETS {
        let mut named: Vec<&str> = t.ceilings.0.to_vec();
        for side in [Some(t.a), t.b].into_iter().flatten() {
            match side {
                Side::System(s) | Side::Named(_, s) | Side::At(_, s, _) => named.push(s),
                Side::Best(_, ss) | Side::WorstEmptyPolls(_, ss) => named.extend(ss),
            }
        }
        for s in named {
            assert!(known.contains(&s), "{}: no system named {s:?}", t.label);
        }
    }
}

#[test]
fn targets_report_missing_sides_as_not_measured() {
    let ts = targets(&[]);
    assert_eq!(ts.len(), 39);
    assert!(ts.iter().all(|t| t.value.is_none() && t.met.is_none()));
}

#[test]
fn targets_compare_like_with_like_and_take_the_best_peer() {
    let mut rs = recs(
        "throughput/u64/1p",
        "ops_per_sec",
        &[
            ("evd try_dequeue", 90.0, "evd try_dequeue"),
            ("evd dequeue_batch", 95.0, "evd dequeue_batch"),
            ("crossbeam ArrayQueue", 30.0, "evd try_dequeue"),
            ("evd batch+wait", 90.0, "evd batch+wait"),
            ("crossbeam-channel try_iter+recv", 50.0, "evd batch+wait"),
            ("std sync_channel recv", 70.0, "evd try_dequeue+wait"),
            ("tokio mpsc blocking_recv_many", 89.0, "evd batch+wait"),
        ],
    );
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
    // The best of the peers measured: those of the list that were not are said.
    let unmeasured = peers.caveats.iter().find(|c| c.starts_with("not measured"));
    assert!(
        unmeasured.is_some_and(|c| c.contains("kanal recv")),
        "{:?}",
        peers.caveats
    );
    assert!(!unmeasured.unwrap().contains("std sync_channel recv"));
}

#[test]
fn ratio_targets_of_arm_ping_pong_loops_and_empty_polls() {
    let (case, ops, pp) = (
        "throughput/u64/1p",
        "ops_per_sec",
        evd_bench::pingpong::CASE,
    );
    let mut rs = recs(
        case,
        ops,
        &[
            ("evd batch+wait", 90.0, "evd batch+wait"),
            ("evd batch+arm+wait", 84.0, "evd batch+wait"),
            ("kanal recv", 60.0, "evd batch+wait"),
            ("evd try_dequeue+wait", 80.0, "evd try_dequeue+wait"),
        ],
    );
    let arm = &[
        ("evd arm (one CAS)", 6.0, "evd arm (one CAS)"),
        ("floor: one uncontended CAS", 5.0, "evd arm (one CAS)"),
    ];
    rs.extend(recs("rearm", "ns_per_rearm", arm));
    let pingpong = &[
        ("evd try_dequeue", 110.0, "evd try_dequeue"),
        ("floor: two atomics", 100.0, "evd try_dequeue"),
        ("rtrb pop", 200.0, "evd try_dequeue"),
    ];
    rs.extend(recs(pp, "latency_p50_ns", pingpong));
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
    let t = get("empty polls: worst evd blocking row (evd batch+arm+wait)");
    assert!(t.name.ends_with(case), "{}", t.name);
    assert_eq!((t.value, t.met), (Some(0.2), Some(false)));
    assert_eq!(t.rounds, [Some(0.2)]);
    let t = get("empty polls: worst evd busy row (not measured)");
    assert_eq!(t.met, None);
    assert_eq!(
        get("busy, any CPU: evd try_dequeue ÷ crossbeam ArrayQueue").goal,
        ">= 1.4"
    );
}

#[test]
fn busy_targets_name_the_ceiling_of_a_one_cas_ring() {
    let case = "throughput/u64/1p";
    let rs = recs(
        case,
        "ops_per_sec",
        &[
            ("evd try_dequeue", 90.0, "evd try_dequeue"),
            ("crossbeam ArrayQueue", 50.0, "evd try_dequeue"),
            (
                "floor: stamp ring + 1 CAS per post",
                80.0,
                "evd try_dequeue",
            ),
            (
                "floor: stamp ring + 1 fetch_add per post",
                70.0,
                "evd try_dequeue",
            ),
        ],
    );
    let t = targets(&rs);
    let busy = |c: &str| {
        let name = format!("busy: evd try_dequeue ÷ crossbeam ArrayQueue, ops/s, {c}");
        t.iter().find(|t| t.name == name).unwrap()
    };
    assert_eq!(busy(case).value, Some(1.8));
    let caveats = &busy(case).caveats;
    assert!(caveats.contains(&"floor: stamp ring + 1 CAS per post ÷ ArrayQueue: 1.60".to_string()));
    assert!(
        caveats
            .contains(&"floor: stamp ring + 1 fetch_add per post ÷ ArrayQueue: 1.40".to_string())
    );
    // No floor row in the 2-poster case here: no such caveat.
    assert!(busy("throughput/u64/2p").caveats.is_empty());
}

#[test]
fn time_targets_keep_the_goal_direction() {
    let evd = "evd post+try_dequeue";
    let rs = recs(
        "single-thread/pair",
        "ns_per_pair",
        &[
            (evd, 6.0, evd),
            ("crossbeam ArrayQueue push+pop", 10.0, evd),
        ],
    );
    let t = targets(&rs);
    let t = t
        .iter()
        .find(|t| t.name.starts_with("single thread"))
        .unwrap();
    assert_eq!(t.value, Some(0.6));
    assert_eq!(t.met, Some(true));
}

/// A record of `rounds` (`None`: a round a failed run voided), summarized.
fn rounds_rec(case: &str, system: &str, metric: &str, rounds: &[Option<f64>]) -> Record {
    let mut m = Record::new(case, system, Role::Evd, "single-thread", metric);
    for (i, v) in rounds.iter().enumerate() {
        match v {
            Some(v) => m.set_round(i, *v, None),
            None => m.fail_round(i),
        }
    }
    records_from(vec![m], 2).remove(0)
}

/// A target across two cases divides medians over the rounds both measured (a failed run voids
/// a round of its own case only), and says so; each side's voided rounds are a caveat.
#[test]
fn a_target_across_cases_compares_the_rounds_both_sides_measured() {
    let cno = "evd Cno (wait, drain, enable_cno)";
    let (m, at_1024, at_1) = ("ns_per_cycle", "cno-trigger/1024", "cno-trigger/1");
    let rs = vec![
        rounds_rec(at_1024, cno, m, &[Some(10.0), None, None, None, Some(10.0)]),
        rounds_rec(
            at_1,
            cno,
            m,
            &[Some(5.0), Some(6.0), Some(7.0), Some(8.0), Some(5.0)],
        ),
    ];
    let t = targets(&rs);
    let t = t
        .iter()
        .find(|t| t.name.contains("÷ cno-trigger/1"))
        .unwrap();
    // The medians of rounds 1 and 5 only: 10 ÷ 5, not 10 ÷ 7.
    assert_eq!(t.value, Some(2.0), "{t:?}");
    assert!(
        t.caveats
            .contains(&"over the 2 rounds both sides measured".to_string()),
        "{t:?}"
    );
    assert!(
        t.caveats
            .contains(&"rounds discarded: 3 (a run failed: notes)".to_string()),
        "{t:?}"
    );
    // Over the same rounds: no caveat of either kind.
    let rs = vec![
        rounds_rec(at_1024, cno, m, &[Some(10.0), Some(12.0)]),
        rounds_rec(at_1, cno, m, &[Some(5.0), Some(6.0)]),
    ];
    let t = targets(&rs);
    let t = t
        .iter()
        .find(|t| t.name.contains("÷ cno-trigger/1"))
        .unwrap();
    assert_eq!(t.value, Some(2.0));
    assert!(t.caveats.iter().all(|c| !c.contains("rounds")), "{t:?}");
}

/// A round voided at the end keeps its place (`null`), so a target still counts it.
#[test]
fn a_failed_last_round_stays_visible() {
    let r = rounds_rec("c", "evd", "ns_per_cycle", &[Some(1.0), Some(2.0), None]);
    assert_eq!(r.rounds, [Some(1.0), Some(2.0), None]);
    assert_eq!(r.samples, 2);
}

#[test]
fn records_from_orients_ratios_evd_better_above_1() {
    use evd_bench::report::{Record, Role, records_from};
    let m = |system: &str, role, rounds: &[f64]| {
        let mut m = Record::new("c", system, role, "busy/item", "ops_per_sec");
        m.baseline = Some("evd".into());
        for (i, v) in rounds.iter().enumerate() {
            m.set_round(i, *v, None);
        }
        m
    };
    let r = records_from(
        vec![
            m("evd", Role::Evd, &[10.0, 12.0, 11.0]),
            m("peer", Role::Peer, &[5.0, 6.0, 5.5]),
        ],
        2,
    );
    assert_eq!(r[0].ratio_to_evd, Some(1.0));
    assert_eq!(r[1].ratio_to_evd, Some(2.0)); // evd ÷ peer: evd twice as fast
}

#[test]
fn cpu_line_names_the_model_first() {
    let mut m = evd_bench::report::Machine::detect();
    m.cpu = "Xeon".into();
    m.cpu_vendor = "GenuineIntel".into();
    (m.cpu_family, m.cpu_model) = (Some(6), Some(207));
    assert_eq!(m.cpu_line(), "Xeon (GenuineIntel, family 6, model 207)");
    m.cpu_vendor = "unknown".into();
    m.cpu_model = None;
    assert_eq!(m.cpu_line(), "Xeon (family 6)");
}

#[test]
fn values_are_formatted_by_unit() {
    use evd_bench::report::format_value;
    assert_eq!(format_value(95_300_000.0, "ops/s"), "95.30 M/s");
    assert_eq!(format_value(8_612.0, "ns"), "8.61 µs");
    assert_eq!(format_value(12.34, "ns"), "12.3 ns");
}
