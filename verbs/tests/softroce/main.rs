//! Real verbs on Soft-RoCE: run inside the guest that `run.sh` boots (it
//! needs an RDMA device; `rxe0` there). Not part of `cargo test` on the host
//! (`test = false`); built with
//! `cargo test --release -p evd-verbs --features ibverbs --test softroce --no-run`.
//!
//! The cases, one module per concern: work requests and their completions
//! (`posting`), feeds on a driver and their throughput (`driven`), objects
//! brought from outside (`foreign`), an explicit teardown of every object
//! (`teardown`), four CQs on one completion channel (`shared_channel`), a
//! CQ overrun reaching the consumer (`overrun`), rdma_cm (`cm`), the
//! ping-pong latency table (`latency`), and the every-source scenario
//! (`scenario`). The shared-channel and every-source scenarios are the
//! ones `cargo test` runs on the soft devices (`../scenarios/`). Here: the
//! connected pairs and feeds the cases share, and the runner.

mod cm;
#[path = "../common/mod.rs"]
mod common;
mod cpu_time;
mod driven;
mod foreign;
mod latency;
mod overrun;
mod posting;
mod scenario;
#[path = "../scenarios/mod.rs"]
mod scenarios;
mod shared_channel;
mod teardown;

use common::{Res, e2s, ensure};
use evd::TryDequeueError;
use evd_verbs::ibv::{
    ConnectParams, Context, IbvCq, MemoryRegion, ProtectionDomain, QpCaps, QpState, QueuePair,
};
use evd_verbs::{CqId, Feed, VerbsEvent, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GID_INDEX: u8 = 0;
const PORT: u8 = 1;

struct Pair {
    a: QueuePair,
    b: QueuePair,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
}

impl Pair {
    /// `n` receives on `b`, the `i`th with work request `100 + i` into
    /// the `i`th 64 bytes of its region.
    fn post_recvs(&self, n: u64) -> Res {
        for i in 0..n {
            self.b
                .post_recv(100 + i, &self.mr_b, i as usize * 64, 64)
                .map_err(e2s)?;
        }
        Ok(())
    }
}

/// QP capabilities with room for `depth` outstanding sends and as many
/// receives.
fn room_for(depth: u32) -> QpCaps {
    let mut caps = QpCaps::default();
    caps.max_send_wr = depth;
    caps.max_recv_wr = depth;
    caps
}

/// Two RC QPs on the same device connected to each other, each with its own CQ.
fn pair(
    pd: &Arc<ProtectionDomain>,
    depth: i32,
    ids: (u32, u32),
) -> Result<(Pair, IbvCq, IbvCq), String> {
    let caps = room_for(depth as u32 / 2);
    pair_with(pd, depth, ids, &caps)
}

/// [`pair`] with QPs made with `caps`. The two sides start at different,
/// non-zero PSNs, so a PSN handed over wrongly fails the transfers.
fn pair_with(
    pd: &Arc<ProtectionDomain>,
    depth: i32,
    ids: (u32, u32),
    caps: &QpCaps,
) -> Result<(Pair, IbvCq, IbvCq), String> {
    let ctx = pd.context();
    let cq_a = ctx
        .create_cq(depth, CqId(ids.0))
        .map_err(|e| format!("create_cq: {e}"))?;
    let cq_b = ctx
        .create_cq(depth, CqId(ids.1))
        .map_err(|e| format!("create_cq: {e}"))?;
    let mut a = pd
        .create_rc_qp(&cq_a, &cq_a, caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    let mut b = pd
        .create_rc_qp(&cq_b, &cq_b, caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    connect_pair(&mut a, &mut b)?;
    let mr_a = pd.register(1 << 16).map_err(|e| format!("reg_mr: {e}"))?;
    let mr_b = pd.register(1 << 16).map_err(|e| format!("reg_mr: {e}"))?;
    Ok((Pair { a, b, mr_a, mr_b }, cq_a, cq_b))
}

/// Connect `a` and `b` to each other (`a` starts at PSN 0x1234, `b` at
/// 0xabcdef).
fn connect_pair(a: &mut QueuePair, b: &mut QueuePair) -> Res {
    let ea = a
        .endpoint(PORT, GID_INDEX, 0x1234)
        .map_err(|e| format!("gid: {e}"))?;
    let eb = b
        .endpoint(PORT, GID_INDEX, 0xab_cdef)
        .map_err(|e| format!("gid: {e}"))?;
    let mut params = ConnectParams::default();
    params.port = PORT;
    params.gid_index = GID_INDEX;
    params.sq_psn = ea.psn;
    a.connect(eb, &params)
        .map_err(|e| format!("connect a: {e}"))?;
    params.sq_psn = eb.psn;
    b.connect(ea, &params)
        .map_err(|e| format!("connect b: {e}"))?;
    for qp in [a, b] {
        let state = qp.query_state().map_err(|e| format!("query_qp: {e}"))?;
        ensure!(state == QpState::Rts, "connected QP in {state:?}");
    }
    Ok(())
}

/// The feeds of a pair's two CQs into one EVD, busy-polled by the test.
struct Fed {
    feeds: [Feed<IbvCq>; 2],
    consumer: evd::Consumer<VerbsEvent>,
}

/// [`pair`]'s QPs, their CQs in a [`Fed`].
fn fed((p, cq_a, cq_b): (Pair, IbvCq, IbvCq)) -> (Pair, Fed) {
    let (poster, consumer) = evd::bounded::<VerbsEvent>(256).unwrap();
    let (a, b) = (cq_a.id(), cq_b.id());
    let feeds = [
        Feed::new(cq_a, a, poster.clone()),
        Feed::new(cq_b, b, poster),
    ];
    (p, Fed { feeds, consumer })
}

impl Fed {
    /// One pass: poll both CQs, take what the EVD holds into `out`.
    fn pass(&mut self, out: &mut Vec<(CqId, WorkCompletion)>) -> Res {
        for f in &mut self.feeds {
            f.progress(64);
        }
        loop {
            match self.consumer.try_dequeue() {
                Ok(VerbsEvent::Completion { cq, wc }) => out.push((cq, wc)),
                Ok(VerbsEvent::Async(a)) => return Err(format!("unexpected async event {a:?}")),
                Ok(other) => return Err(format!("unexpected event {other:?}")),
                Err(TryDequeueError::Empty) => return Ok(()),
                Err(e) => return Err(format!("dequeue: {e:?}")),
            }
        }
    }

    /// Busy-poll until `n` completions are dequeued (10 s limit).
    fn collect(&mut self, n: usize) -> Result<Vec<(CqId, WorkCompletion)>, String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut out = Vec::new();
        while out.len() < n {
            self.pass(&mut out)?;
            ensure!(
                Instant::now() < deadline,
                "only {} of {n} completions after 10 s",
                out.len()
            );
        }
        Ok(out)
    }

    /// [`collect`](Self::collect), each completion a success.
    fn collect_ok(&mut self, n: usize) -> Result<Vec<(CqId, WorkCompletion)>, String> {
        let got = self.collect(n)?;
        for (cq, wc) in &got {
            ensure!(wc.status.is_success(), "{cq:?}: {wc:?}");
        }
        Ok(got)
    }

    /// The next completion is `cq`'s of work request `wr_id`, refused by
    /// the responder (`what` names the case).
    fn refused(&mut self, cq: CqId, wr_id: u64, what: &str) -> Res {
        let got = self.collect(1)?;
        let (from, wc) = got[0];
        ensure!(from == cq && wc.wr_id == wr_id, "{what}: {got:?}");
        ensure!(
            wc.status == WcStatus::REM_ACCESS_ERR,
            "{what} gave {:?}",
            wc.status
        );
        Ok(())
    }

    /// Busy-poll for `window` and return whatever arrives: what should
    /// not come.
    fn quiet(&mut self, window: Duration) -> Result<Vec<(CqId, WorkCompletion)>, String> {
        let end = Instant::now() + window;
        let mut out = Vec::new();
        while Instant::now() < end {
            self.pass(&mut out)?;
            std::thread::yield_now();
        }
        Ok(out)
    }
}

/// Whether `wc` is the successful `opcode` completion of work request
/// `wr_id`.
fn done(wc: &WorkCompletion, opcode: WcOpcode, wr_id: u64) -> bool {
    wc.status.is_success() && wc.opcode == opcode && wc.wr_id == wr_id
}

/// Whether `wc` carries the immediate `imm`.
fn carries_imm(wc: &WorkCompletion, imm: u32) -> bool {
    wc.wc_flags.contains(WcFlags::WITH_IMM) && wc.imm_data == imm
}

/// `len` bytes of `mr` at `at`, copied out: the device may be writing
/// other parts of the region (receives still posted), so no slice of it is
/// taken.
fn bytes(mr: &MemoryRegion, at: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    mr.read(at, &mut out).expect("inside the region");
    out
}

/// Copy `data` into `mr` at `at`.
fn put(mr: &mut MemoryRegion, at: usize, data: &[u8]) {
    mr.write(at, data).expect("inside the region");
}

/// The completions of `got` from `cq`.
fn on(got: &[(CqId, WorkCompletion)], cq: CqId) -> Vec<WorkCompletion> {
    got.iter()
        .filter(|(c, _)| *c == cq)
        .map(|(_, w)| *w)
        .collect()
}

fn main() {
    // A hang (a stranded completion, an unacked CQ destroy) fails the run.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(240));
        eprintln!("softroce: watchdog: no result after 240 s");
        std::process::exit(3);
    });
    let names = match evd_verbs::ibv::device_names() {
        Ok(n) if !n.is_empty() => n,
        Ok(_) => {
            eprintln!("softroce: no RDMA device");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("softroce: no RDMA devices: {e}");
            std::process::exit(2);
        }
    };
    println!("devices: {names:?}");
    if std::env::args().any(|a| a == "device-removal") {
        // Run alone, by the guest's script, which removes the device: this
        // process must hold no verbs context of its own, or the removal
        // would wait for it.
        match cm::device_removal() {
            Ok(()) => println!("test cm_device_removal ... ok"),
            Err(e) => {
                println!("test cm_device_removal ... FAILED: {e}");
                std::process::exit(1);
            }
        }
        std::process::exit(0);
    }
    let ctx = Context::open(None).expect("open the RDMA device");
    let pd = ctx.alloc_pd().expect("alloc_pd");
    type Case = fn(&Arc<ProtectionDomain>) -> Res;
    let cases: [(&str, Case); 25] = [
        ("rc_send_recv", posting::rc_send_recv),
        ("rdma_write_with_imm", posting::rdma_write_with_imm),
        ("error_completions", posting::error_completions),
        ("unsignaled_sends", posting::unsignaled_sends),
        ("inline_send", posting::inline_send),
        ("send_with_imm", posting::send_with_imm),
        ("rdma_read", posting::rdma_read),
        ("multi_sge_send", posting::multi_sge_send),
        ("remote_write_refused", posting::remote_write_refused),
        ("cq_context_kept", foreign::cq_context_kept),
        ("cq_from_raw_borrowed", foreign::cq_from_raw_borrowed),
        ("context_from_raw", foreign::context_from_raw),
        (
            "async_events_have_one_taker",
            foreign::async_events_have_one_taker,
        ),
        ("event_driven_io_uring", driven::event_driven_io_uring),
        ("throughput", driven::throughput),
        ("explicit_teardown", teardown::explicit_teardown),
        (
            "a_shared_channel_cq_acks_a_dropped_event_at_close",
            teardown::a_shared_channel_cq_acks_a_dropped_event_at_close,
        ),
        ("pingpong_latency", latency::pingpong_latency),
        (
            "cm_connect_accept_disconnect",
            cm::cm_connect_accept_disconnect,
        ),
        ("cm_reject_and_unreachable", cm::cm_reject_and_unreachable),
        (
            "cm_accept_refused_leaves_the_qp_in_error",
            cm::cm_accept_refused_leaves_the_qp_in_error,
        ),
        (
            "cm_calls_before_the_device_and_tokens_of_two_channels",
            cm::cm_calls_before_the_device_and_tokens_of_two_channels,
        ),
        (
            "shared_channel_four_cqs",
            shared_channel::shared_channel_four_cqs,
        ),
        (
            "cq_overrun_reaches_the_consumer",
            overrun::cq_overrun_reaches_the_consumer,
        ),
        // Last: it takes the link down and up.
        (
            "single_instance_every_source",
            scenario::single_instance_every_source,
        ),
    ];
    let (mut passed, mut failed) = (0, 0);
    for (name, case) in cases {
        match case(&pd) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(e) => {
                println!("test {name} ... FAILED: {e}");
                failed += 1;
            }
        }
    }
    println!("softroce: {passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
