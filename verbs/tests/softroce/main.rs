//! Real verbs on Soft-RoCE: run inside the guest that `run.sh` boots (it
//! needs an RDMA device; `rxe0` there). Not part of `cargo test` on the host
//! (`test = false`); built with
//! `cargo test --release -p evd-verbs --features ibverbs --test softroce --no-run`.
//!
//! Cases: RC loopback send/recv, RDMA write with immediate, error
//! completions (bad rkey; a send on an errored QP; a flushed receive),
//! the posting options (unsignaled, inline, send with immediate, RDMA
//! read, several SGEs each way), memory registered with chosen access (a
//! write refused without REMOTE_WRITE), objects brought from outside (the
//! caller's `cq_context` kept with async CQ errors still named; a raw CQ
//! wrapped Borrowed behind a feed; a raw context wrapped Borrowed and
//! Owned), the event-driven and adaptive modes through io_uring, the
//! feed's throughput against a raw poll loop on the same CQ, an explicit
//! teardown of every object, and the ping-pong latency table
//! (`latency.rs`).

mod cm;
#[path = "../common/mod.rs"]
mod common;
mod latency;
mod overrun;
mod scenario;
#[path = "../scenarios/mod.rs"]
mod scenarios;
mod shared_channel;

use common::{e2s, ensure, Res};
use evd::TryDequeueError;
use evd_verbs::ibv::{
    ffi, work_completion, AccessFlags, ConnectParams, Context, CqConfig, IbvCq, MemoryRegion,
    Ownership, PostWrError, ProtectionDomain, QpCaps, QpState, QueuePair, SendOp, SendRequest, Sge,
    MAX_SGES,
};
use evd_verbs::{
    teardown_failures, AdaptiveConfig, AsyncElement, AsyncEventKind, AsyncEventSource, AsyncFeed,
    CloseError, CompletionQueue, CqId, Driver, DriverConfig, Feed, FeedMode, VerbsEvent, WcFlags,
    WcOpcode, WcStatus, WorkCompletion, POLL_BATCH,
};
use std::ptr;
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
    QpCaps {
        max_send_wr: depth,
        max_recv_wr: depth,
        ..QpCaps::default()
    }
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
    let a = pd
        .create_rc_qp(&cq_a, &cq_a, caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    let b = pd
        .create_rc_qp(&cq_b, &cq_b, caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    connect_pair(&a, &b)?;
    let mr_a = pd.register(1 << 16).map_err(|e| format!("reg_mr: {e}"))?;
    let mr_b = pd.register(1 << 16).map_err(|e| format!("reg_mr: {e}"))?;
    Ok((Pair { a, b, mr_a, mr_b }, cq_a, cq_b))
}

/// Connect `a` and `b` to each other (`a` starts at PSN 0x1234, `b` at
/// 0xabcdef).
fn connect_pair(a: &QueuePair, b: &QueuePair) -> Res {
    let ea = a
        .endpoint(PORT, GID_INDEX, 0x1234)
        .map_err(|e| format!("gid: {e}"))?;
    let eb = b
        .endpoint(PORT, GID_INDEX, 0xab_cdef)
        .map_err(|e| format!("gid: {e}"))?;
    let params = ConnectParams {
        port: PORT,
        gid_index: GID_INDEX,
        ..ConnectParams::default()
    };
    a.connect(
        eb,
        &ConnectParams {
            sq_psn: ea.psn,
            ..params
        },
    )
    .map_err(|e| format!("connect a: {e}"))?;
    b.connect(
        ea,
        &ConnectParams {
            sq_psn: eb.psn,
            ..params
        },
    )
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

fn rc_send_recv(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (1, 2))?);
    p.post_recvs(10)?;
    for i in 0..10u64 {
        p.mr_a.as_mut_slice()[i as usize * 64..i as usize * 64 + 32].fill(i as u8 + 1);
        p.a.post_send(i, SendOp::Send, &p.mr_a, i as usize * 64, 32, false)
            .map_err(e2s)?;
    }
    let got = fed.collect(20)?;
    let sends = on(&got, CqId(1));
    let recvs = on(&got, CqId(2));
    ensure!(
        sends.len() == 10 && recvs.len() == 10,
        "sends {} recvs {}",
        sends.len(),
        recvs.len()
    );
    for (i, wc) in sends.iter().enumerate() {
        ensure!(done(wc, WcOpcode::SEND, i as u64), "send {i}: {wc:?}");
    }
    for (i, wc) in recvs.iter().enumerate() {
        ensure!(
            done(wc, WcOpcode::RECV, 100 + i as u64) && wc.byte_len == 32,
            "recv {i}: {wc:?}"
        );
        ensure!(wc.qp_num == p.b.qp_num(), "recv on QP {}", wc.qp_num);
        let data = &p.mr_b.as_slice()[i * 64..i * 64 + 32];
        ensure!(data.iter().all(|&x| x == i as u8 + 1), "payload {i} wrong");
    }
    Ok(())
}

fn rdma_write_with_imm(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (3, 4))?);
    p.b.post_recv(7, &p.mr_b, 0, 0).map_err(e2s)?;
    for (i, x) in p.mr_a.as_mut_slice()[..256].iter_mut().enumerate() {
        *x = i as u8;
    }
    let op = SendOp::WriteWithImm {
        remote_addr: p.mr_b.addr() + 1024,
        rkey: p.mr_b.rkey(),
        imm: 0x1234_5678,
    };
    p.a.post_send(8, op, &p.mr_a, 0, 256, true).map_err(e2s)?;
    let got = fed.collect(2)?;
    let write = got
        .iter()
        .find(|(c, _)| *c == CqId(3))
        .ok_or("no write completion")?
        .1;
    let recv = got
        .iter()
        .find(|(c, _)| *c == CqId(4))
        .ok_or("no receive completion")?
        .1;
    ensure!(done(&write, WcOpcode::RDMA_WRITE, 8), "write: {write:?}");
    ensure!(
        done(&recv, WcOpcode::RECV_RDMA_WITH_IMM, 7)
            && carries_imm(&recv, 0x1234_5678)
            && recv.byte_len == 256,
        "recv: {recv:?}"
    );
    ensure!(
        p.mr_b.as_slice()[1024..1280]
            .iter()
            .enumerate()
            .all(|(i, &x)| x == i as u8),
        "written data wrong"
    );
    Ok(())
}

fn error_completions(pd: &Arc<ProtectionDomain>) -> Res {
    let (p, mut fed) = fed(pair(pd, 64, (5, 6))?);
    // A write with a wrong rkey: the responder refuses it.
    let bad = SendOp::Write {
        remote_addr: p.mr_b.addr(),
        rkey: p.mr_b.rkey() ^ 0x5a5a,
    };
    p.a.post_send(1, bad, &p.mr_a, 0, 64, false).map_err(e2s)?;
    fed.refused(CqId(5), 1, "bad rkey")?;
    // The requester's QP is now in error: a send on it is flushed.
    p.a.post_send(2, SendOp::Send, &p.mr_a, 0, 8, false)
        .map_err(e2s)?;
    let got = fed.collect(1)?;
    ensure!(
        got[0].1.wr_id == 2 && got[0].1.status == WcStatus::WR_FLUSH_ERR,
        "send on errored QP: {got:?}"
    );
    // A receive outstanding when its QP is moved to error is flushed too.
    p.b.post_recv(3, &p.mr_b, 0, 64).map_err(e2s)?;
    p.b.set_error().map_err(e2s)?;
    let state = p.b.query_state().map_err(e2s)?;
    ensure!(state == QpState::Error, "after set_error: {state:?}");
    let got = fed.collect(1)?;
    ensure!(
        got[0].0 == CqId(6) && got[0].1.wr_id == 3 && got[0].1.status == WcStatus::WR_FLUSH_ERR,
        "flushed recv: {got:?}"
    );
    Ok(())
}

/// Ping-pong through a spawned io_uring driver: A's CQ event-driven,
/// B's adaptive; the application only waits on the EVD.
fn event_driven_io_uring(pd: &Arc<ProtectionDomain>) -> Res {
    const ROUNDS: u64 = 500;
    let (mut p, cq_a, cq_b) = pair(pd, 256, (7, 8))?;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).map_err(|e| format!("io_uring: {e}"))?;
    // Taken first, so the driver does not serve the device's events itself
    // when the CQs' feeds are registered.
    let async_events = pd.context().async_events().map_err(e2s)?;
    let key_a = driver
        .register(Feed::new(cq_a, CqId(7), poster.clone()), FeedMode::Event)
        .map_err(e2s)?;
    let key_b = driver
        .register(
            Feed::new(cq_b, CqId(8), poster.clone()),
            FeedMode::Adaptive(AdaptiveConfig::default()),
        )
        .map_err(e2s)?;
    driver
        .register_async(AsyncFeed::new(async_events, poster))
        .map_err(e2s)?;
    let driver = driver.spawn().map_err(e2s)?;
    // B echoes every message back; A sends the next one when the echo lands.
    for side in [&p.a, &p.b] {
        for i in 0..4 {
            side.post_recv(
                i,
                if std::ptr::eq(side, &p.a) {
                    &p.mr_a
                } else {
                    &p.mr_b
                },
                0,
                64,
            )
            .map_err(e2s)?;
        }
    }
    p.mr_a.as_mut_slice()[..8].copy_from_slice(&0u64.to_le_bytes());
    p.a.post_send(0, SendOp::Send, &p.mr_a, 0, 8, true)
        .map_err(e2s)?;
    let (mut pings, mut pongs, mut sends) = (0u64, 0u64, 0u64);
    let mut idle = 0;
    while pongs < ROUNDS {
        match consumer.try_dequeue() {
            Ok(VerbsEvent::Completion { cq, wc }) => {
                ensure!(wc.status.is_success(), "{cq:?}: {wc:?}");
                match (cq, wc.opcode) {
                    (_, WcOpcode::SEND) => sends += 1,
                    (CqId(8), WcOpcode::RECV) => {
                        let seq = u64::from_le_bytes(p.mr_b.as_slice()[..8].try_into().unwrap());
                        ensure!(seq == pings, "ping {seq}, expected {pings}");
                        pings += 1;
                        p.b.post_recv(wc.wr_id, &p.mr_b, 0, 64).map_err(e2s)?;
                        p.b.post_send(seq, SendOp::Send, &p.mr_b, 0, 8, true)
                            .map_err(e2s)?;
                    }
                    (CqId(7), WcOpcode::RECV) => {
                        let seq = u64::from_le_bytes(p.mr_a.as_slice()[..8].try_into().unwrap());
                        ensure!(seq == pongs, "pong {seq}, expected {pongs}");
                        pongs += 1;
                        p.a.post_recv(wc.wr_id, &p.mr_a, 0, 64).map_err(e2s)?;
                        if pongs < ROUNDS {
                            p.mr_a.as_mut_slice()[..8].copy_from_slice(&pongs.to_le_bytes());
                            p.a.post_send(pongs, SendOp::Send, &p.mr_a, 0, 8, true)
                                .map_err(e2s)?;
                        }
                    }
                    other => return Err(format!("unexpected completion {other:?}")),
                }
            }
            Ok(VerbsEvent::Async(a)) => return Err(format!("unexpected async event {a:?}")),
            Err(TryDequeueError::Empty) => {
                if consumer.wait(1, Some(Duration::from_millis(200))).is_err() {
                    idle += 1;
                    ensure!(
                        idle < 50,
                        "stalled at {pongs} round trips (a completion stranded?)"
                    );
                }
            }
            Err(e) => return Err(format!("dequeue: {e:?}")),
        }
    }
    let mut stopped = driver.shutdown().map_err(e2s)?;
    let mut got = 0;
    let feeds = [key_a, key_b].map(|k| stopped.take(k));
    for f in feeds.iter().flatten() {
        got += f.stats().events_got;
        eprintln!("    feed {:?}: {:?}", f.id(), f.stats());
    }
    ensure!(got > 0, "no channel event was used");
    // Dropping the feeds acks their events, then the QPs and CQs go.
    drop(feeds);
    drop(stopped);
    drop(p);
    ensure!(
        sends == 2 * ROUNDS - 1 || sends >= 2 * ROUNDS - 2,
        "{sends} send completions"
    );
    Ok(())
}

/// Completions per second through a feed against a raw poll loop on the
/// same CQ. Each round fills A's CQ first: 255 signaled RDMA writes then a
/// send, and waits (polling B's CQ, not A's) for the send to arrive at B, by
/// when the writes before it have executed. Only the drain of A's CQ is
/// timed: by a raw poll loop, or by a feed into an EVD plus a consumer
/// dequeuing in batches. (Timing post and drain together measures rxe under
/// emulation, where a tight poll loop slows the other vCPU down.)
fn throughput(pd: &Arc<ProtectionDomain>) -> Res {
    const BATCH: usize = 256;
    const ROUNDS: usize = 40;
    let (p, cq_a, mut cq_b) = pair(pd, 1024, (9, 10))?;
    let write = SendOp::Write {
        remote_addr: p.mr_b.addr(),
        rkey: p.mr_b.rkey(),
    };
    let mut wcs = [WorkCompletion::default(); POLL_BATCH];
    // Post a round and wait until it has executed at B.
    let fill = |cq_b: &mut IbvCq| -> Res {
        p.b.post_recv(0, &p.mr_b, 0, 64).map_err(e2s)?;
        for i in 0..BATCH - 1 {
            p.a.post_send(i as u64, write, &p.mr_a, 0, 8, false)
                .map_err(e2s)?;
        }
        p.a.post_send(BATCH as u64, SendOp::Send, &p.mr_a, 0, 8, false)
            .map_err(e2s)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut b = [WorkCompletion::default(); 1];
        while cq_b.poll(&mut b).map_err(e2s)? == 0 {
            ensure!(Instant::now() < deadline, "round never reached B");
        }
        ensure!(b[0].status.is_success(), "B: {:?}", b[0]);
        Ok(())
    };
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
    let mut out = Vec::with_capacity(1024);
    let (mut raw_time, mut feed_time) = (Duration::ZERO, Duration::ZERO);
    let mut raw_cq = cq_a;
    // Interleaved rounds, raw and feed alternately, on the same CQ and QP.
    for _ in 0..ROUNDS {
        fill(&mut cq_b)?;
        let t = Instant::now();
        let mut n = 0;
        while n < BATCH {
            let k = raw_cq.poll(&mut wcs).map_err(e2s)?;
            for wc in &wcs[..k] {
                ensure!(wc.status.is_success(), "raw: {wc:?}");
            }
            n += k;
        }
        raw_time += t.elapsed();

        let mut feed = Feed::new(raw_cq, CqId(9), poster.clone());
        fill(&mut cq_b)?;
        let t = Instant::now();
        let mut n = 0;
        while n < BATCH {
            feed.progress(BATCH);
            out.clear();
            n += consumer
                .dequeue_batch(&mut out, 1024)
                .map_err(|e| format!("{e:?}"))?;
        }
        feed_time += t.elapsed();
        raw_cq = feed.into_parts().0;
    }
    let total = (BATCH * ROUNDS) as f64;
    println!(
        "    Soft-RoCE drain of a filled CQ ({total} completions each way): raw poll loop {:.0}/s ({:.0} ns each), \
         feed + EVD {:.0}/s ({:.0} ns each), feed overhead {:+.1}%",
        total / raw_time.as_secs_f64(),
        raw_time.as_secs_f64() * 1e9 / total,
        total / feed_time.as_secs_f64(),
        feed_time.as_secs_f64() * 1e9 / total,
        (feed_time.as_secs_f64() / raw_time.as_secs_f64() - 1.0) * 100.0
    );
    Ok(())
}

/// Every object closed explicitly, children first (QP, MR, CQ, PD,
/// context), on a context of its own: each close is Ok, the shared ones
/// refuse while a child holds them, and no destroy fails in a Drop. The CQ
/// is closed holding a channel event not yet acknowledged, which its close
/// must acknowledge (else ibv_destroy_cq waits for it forever).
fn explicit_teardown(_shared: &Arc<ProtectionDomain>) -> Res {
    let failures = teardown_failures();
    let ctx = Context::open(None).map_err(|e| format!("open: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let mr = pd.register(4096).map_err(|e| format!("reg_mr: {e}"))?;
    let mut cq = ctx
        .create_cq(16, CqId(11))
        .map_err(|e| format!("create_cq: {e}"))?;
    let caps = room_for(8);
    let qp = pd
        .create_rc_qp(&cq, &cq, &caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    let me = qp
        .endpoint(PORT, GID_INDEX, 77)
        .map_err(|e| format!("gid: {e}"))?;
    qp.connect(
        me,
        &ConnectParams {
            sq_psn: me.psn,
            ..ConnectParams::default()
        },
    )
    .map_err(|e| format!("connect: {e}"))?;

    // A loopback send and its receive, with the CQ armed: one channel event.
    cq.req_notify(false).map_err(|e| format!("arm: {e}"))?;
    qp.post_recv(1, &mr, 0, 64).map_err(e2s)?;
    qp.post_send(2, SendOp::Send, &mr, 1024, 8, false)
        .map_err(e2s)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let channel = cq.channel_fd().expect("a channel");
    while !cq.get_event().map_err(|e| format!("get_event: {e}"))? {
        // Wait on the channel fd itself; the timeout is a watchdog.
        ensure!(
            latency::wait_fd(channel, 10_000),
            "no channel event after 10 s"
        );
    }
    let mut wcs = [WorkCompletion::default(); 4];
    let mut polled = 0;
    while polled < 2 {
        polled += cq.poll(&mut wcs[polled..]).map_err(e2s)?;
        ensure!(
            Instant::now() < deadline,
            "{polled} of 2 completions after 10 s"
        );
    }
    for wc in &wcs[..2] {
        ensure!(wc.status.is_success(), "{wc:?}");
    }

    // The QP holds the CQ and the PD, the PD the context.
    let cq = match cq.close() {
        Err(CloseError::InUse { handle, .. }) => handle,
        other => return Err(format!("close of a CQ a QP uses: {other:?}")),
    };
    let ctx = match ctx.close() {
        Err(CloseError::InUse { handle, .. }) => handle,
        other => return Err(format!("close of a context a PD uses: {other:?}")),
    };

    qp.close().map_err(|e| format!("qp: {e}"))?;
    ensure!(
        mr.close().map_err(|e| format!("mr: {e}"))?.is_some(),
        "an owned region gave no buffer back"
    );
    cq.close().map_err(|e| format!("cq: {e}"))?;
    pd.close().map_err(|e| format!("pd: {e}"))?;
    ctx.close().map_err(|e| format!("context: {e}"))?;
    ensure!(
        teardown_failures() == failures,
        "{} destroys failed in Drop",
        teardown_failures() - failures
    );
    Ok(())
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

/// The completions of `got` from `cq`.
fn on(got: &[(CqId, WorkCompletion)], cq: CqId) -> Vec<WorkCompletion> {
    got.iter()
        .filter(|(c, _)| *c == cq)
        .map(|(_, w)| *w)
        .collect()
}

/// Three unsignaled sends then a signaled one: all four arrive, and only
/// the signaled one completes at the sender.
fn unsignaled_sends(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (31, 32))?);
    p.post_recvs(4)?;
    for i in 0..4u64 {
        let off = i as usize * 64;
        p.mr_a.as_mut_slice()[off..off + 16].fill(0x40 + i as u8);
        let sges = [p.mr_a.sge(off, 16).map_err(e2s)?];
        let wr = SendRequest {
            signaled: i == 3,
            ..SendRequest::new(i, SendOp::Send, &sges)
        };
        p.a.post_send_wr(&wr).map_err(e2s)?;
    }
    let mut got = fed.collect(5)?;
    got.extend(fed.quiet(Duration::from_millis(300))?);
    let sends = on(&got, CqId(31));
    let recvs = on(&got, CqId(32));
    ensure!(
        sends.len() == 1 && sends[0].wr_id == 3 && sends[0].status.is_success(),
        "sender completions: {sends:?}"
    );
    ensure!(recvs.len() == 4, "{} receives", recvs.len());
    for (i, wc) in recvs.iter().enumerate() {
        ensure!(
            wc.status.is_success() && wc.wr_id == 100 + i as u64 && wc.byte_len == 16,
            "recv {i}: {wc:?}"
        );
        let data = &p.mr_b.as_slice()[i * 64..i * 64 + 16];
        ensure!(
            data.iter().all(|&x| x == 0x40 + i as u8),
            "payload {i} wrong"
        );
    }
    Ok(())
}

/// An inline send: the source is overwritten as soon as the post returns
/// and the receiver still sees what was posted; an unregistered buffer
/// (lkey 0) works inline; more than `max_inline_data` is refused.
fn inline_send(pd: &Arc<ProtectionDomain>) -> Res {
    let caps = QpCaps {
        max_inline_data: 64,
        ..QpCaps::default()
    };
    let (mut p, mut fed) = fed(pair_with(pd, 64, (33, 34), &caps)?);
    let max = p.a.caps().max_inline_data;
    ensure!(max >= 64, "granted max_inline_data {max}");
    p.b.post_recv(1, &p.mr_b, 0, 64).map_err(e2s)?;
    p.b.post_recv(2, &p.mr_b, 64, 64).map_err(e2s)?;
    let pattern: Vec<u8> = (0..48u8).map(|i| i ^ 0xa5).collect();
    p.mr_a.as_mut_slice()[..48].copy_from_slice(&pattern);
    let sges = [p.mr_a.sge(0, 48).map_err(e2s)?];
    p.a.post_send_wr(&SendRequest {
        inline: true,
        ..SendRequest::new(10, SendOp::Send, &sges)
    })
    .map_err(e2s)?;
    // Copied at post time: this must not reach the receiver.
    p.mr_a.as_mut_slice()[..48].fill(0);
    let unregistered = *b"inline from an unregistered stack buffer";
    // SAFETY: an inline send: the bytes are read during the post only, and
    // `unregistered` outlives it.
    let raw = unsafe { Sge::from_raw(unregistered.as_ptr() as u64, unregistered.len() as u32, 0) };
    p.a.post_send_wr(&SendRequest {
        inline: true,
        ..SendRequest::new(11, SendOp::Send, &[raw])
    })
    .map_err(e2s)?;
    let got = fed.collect_ok(4)?;
    let recvs = on(&got, CqId(34));
    ensure!(
        recvs.len() == 2
            && recvs[0].byte_len == 48
            && recvs[1].byte_len == unregistered.len() as u32,
        "receives: {recvs:?}"
    );
    ensure!(
        p.mr_b.as_slice()[..48] == pattern[..],
        "the inline payload is not what was posted: {:?}",
        &p.mr_b.as_slice()[..48]
    );
    ensure!(
        p.mr_b.as_slice()[64..64 + unregistered.len()] == unregistered[..],
        "unregistered inline payload wrong"
    );
    let long = [p.mr_a.sge(0, max as usize + 1).map_err(e2s)?];
    match p.a.post_send_wr(&SendRequest {
        inline: true,
        ..SendRequest::new(12, SendOp::Send, &long)
    }) {
        Err(PostWrError::InlineTooLong { len, max: m })
            if len == u64::from(max) + 1 && m == max => {}
        other => return Err(format!("an inline send over the limit: {other:?}")),
    }
    Ok(())
}

/// A send with immediate: the receiver's completion carries it.
fn send_with_imm(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (35, 36))?);
    p.b.post_recv(5, &p.mr_b, 0, 64).map_err(e2s)?;
    p.mr_a.as_mut_slice()[..16].copy_from_slice(b"with immediate!!");
    p.a.post_send(
        6,
        SendOp::SendWithImm { imm: 0xdead_beef },
        &p.mr_a,
        0,
        16,
        true,
    )
    .map_err(e2s)?;
    let got = fed.collect(2)?;
    let send = on(&got, CqId(35));
    let recv = on(&got, CqId(36));
    ensure!(
        send.len() == 1 && done(&send[0], WcOpcode::SEND, 6),
        "send: {send:?}"
    );
    ensure!(recv.len() == 1, "receives: {recv:?}");
    let r = recv[0];
    ensure!(
        done(&r, WcOpcode::RECV, 5) && carries_imm(&r, 0xdead_beef) && r.byte_len == 16,
        "recv: {r:?}"
    );
    ensure!(
        &p.mr_b.as_slice()[..16] == b"with immediate!!",
        "payload wrong"
    );
    Ok(())
}

/// An RDMA read of the peer's region lands in ours.
fn rdma_read(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (37, 38))?);
    for (i, x) in p.mr_b.as_mut_slice()[2048..2348].iter_mut().enumerate() {
        *x = (i * 7) as u8;
    }
    let sges = [p.mr_a.sge(4096, 300).map_err(e2s)?];
    let read = SendOp::Read {
        remote_addr: p.mr_b.addr() + 2048,
        rkey: p.mr_b.rkey(),
    };
    p.a.post_send_wr(&SendRequest::new(9, read, &sges))
        .map_err(e2s)?;
    let got = fed.collect(1)?;
    let (cq, wc) = got[0];
    ensure!(
        cq == CqId(37) && done(&wc, WcOpcode::RDMA_READ, 9),
        "read: {got:?}"
    );
    ensure!(
        p.mr_a.as_slice()[4096..4396]
            .iter()
            .enumerate()
            .all(|(i, &x)| x == (i * 7) as u8),
        "read data wrong"
    );
    Ok(())
}

/// A send gathered from three SGEs (two regions, one of them the caller's
/// own memory registered raw) into a receive scattered over two: the
/// receiver gets the concatenation. More than MAX_SGES is refused.
fn multi_sge_send(pd: &Arc<ProtectionDomain>) -> Res {
    let caps = QpCaps {
        max_send_sge: 3,
        max_recv_sge: 2,
        ..QpCaps::default()
    };
    let (mut p, mut fed) = fed(pair_with(pd, 64, (39, 40), &caps)?);
    ensure!(
        p.a.caps().max_send_sge >= 3 && p.b.caps().max_recv_sge >= 2,
        "granted {:?}",
        p.a.caps()
    );
    let mut own = vec![0u8; 256];
    // SAFETY: `own` outlives the region (closed below) and is used only
    // through it meanwhile.
    let mut own_mr =
        unsafe { pd.register_raw(own.as_mut_ptr(), own.len(), AccessFlags::LOCAL_WRITE) }
            .map_err(|e| format!("register_raw: {e}"))?;
    ensure!(
        own_mr.addr() == own.as_ptr() as u64 && own_mr.len() == 256,
        "{own_mr:?}"
    );
    p.mr_a.as_mut_slice()[..10].copy_from_slice(b"0123456789");
    p.mr_a.as_mut_slice()[1000..1020].copy_from_slice(b"abcdefghijklmnopqrst");
    own_mr.as_mut_slice()[100..130].copy_from_slice(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ!?#%");
    let expect: Vec<u8> = [
        &b"0123456789"[..],
        b"abcdefghijklmnopqrst",
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZ!?#%",
    ]
    .concat();
    p.b.post_recv_sges(
        7,
        &[
            p.mr_b.sge(0, 25).map_err(e2s)?,
            p.mr_b.sge(5000, 100).map_err(e2s)?,
        ],
    )
    .map_err(e2s)?;
    let sges = [
        p.mr_a.sge(0, 10).map_err(e2s)?,
        p.mr_a.sge(1000, 20).map_err(e2s)?,
        own_mr.sge(100, 30).map_err(e2s)?,
    ];
    p.a.post_send_wr(&SendRequest::new(8, SendOp::Send, &sges))
        .map_err(e2s)?;
    let got = fed.collect_ok(2)?;
    let recv = on(&got, CqId(40));
    ensure!(
        recv.len() == 1 && recv[0].byte_len == 60 && recv[0].wr_id == 7,
        "recv: {recv:?}"
    );
    let b = p.mr_b.as_slice();
    let got_bytes = [&b[..25], &b[5000..5035]].concat();
    ensure!(
        got_bytes == expect,
        "scattered {:?}",
        String::from_utf8_lossy(&got_bytes)
    );
    let many = [sges[0]; MAX_SGES + 1];
    match p.a.post_send_wr(&SendRequest::new(9, SendOp::Send, &many)) {
        Err(PostWrError::TooManySges { given, max })
            if given == MAX_SGES + 1 && max == MAX_SGES => {}
        other => return Err(format!("{} SGEs: {other:?}", MAX_SGES + 1)),
    }
    ensure!(
        own_mr.close().map_err(e2s)?.is_none(),
        "a raw region gave a buffer back"
    );
    drop(own);
    Ok(())
}

/// The caller's buffer registered without REMOTE_WRITE: an RDMA write to
/// it fails with a remote-access error and leaves it untouched, while the
/// same write to a buffer registered with REMOTE_WRITE lands; both
/// buffers come back on close.
fn remote_write_refused(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (41, 42))?);
    let writable = pd
        .register_buffer(
            vec![0x11; 4096].into_boxed_slice(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .map_err(|e| format!("register_buffer: {e}"))?;
    let read_only = pd
        .register_buffer(
            vec![0x22; 4096].into_boxed_slice(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .map_err(|e| format!("register_buffer: {e}"))?;
    ensure!(
        !read_only.access().contains(AccessFlags::REMOTE_WRITE),
        "{read_only:?}"
    );
    p.mr_a.as_mut_slice()[..64].fill(0x77);
    let write = |mr: &MemoryRegion| SendOp::Write {
        remote_addr: mr.addr(),
        rkey: mr.rkey(),
    };
    p.a.post_send(1, write(&writable), &p.mr_a, 0, 64, false)
        .map_err(e2s)?;
    let got = fed.collect(1)?;
    ensure!(
        got[0].1.wr_id == 1 && got[0].1.status.is_success(),
        "write to a writable region: {got:?}"
    );
    p.a.post_send(2, write(&read_only), &p.mr_a, 0, 64, false)
        .map_err(e2s)?;
    fed.refused(CqId(41), 2, "write without REMOTE_WRITE")?;
    let w = writable.close().map_err(e2s)?.ok_or("no buffer back")?;
    let r = read_only.close().map_err(e2s)?.ok_or("no buffer back")?;
    ensure!(
        w.len() == 4096 && w[..64].iter().all(|&x| x == 0x77) && w[64..].iter().all(|&x| x == 0x11),
        "the writable buffer"
    );
    ensure!(
        r.len() == 4096 && r.iter().all(|&x| x == 0x22),
        "the refused write changed the buffer"
    );
    Ok(())
}

/// A CQ made with the caller's `cq_context` keeps it, and an async error
/// on it (an overrun: more receive completions than it holds) still
/// names it by its CqId. On a context of its own, so that its async
/// events are this test's.
fn cq_context_kept(_shared: &Arc<ProtectionDomain>) -> Res {
    let ctx = Context::open(None).map_err(|e| format!("open: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let mut events = ctx.async_events().map_err(|e| format!("async: {e}"))?;
    let mut marker = 0u64;
    let sentinel: *mut libc::c_void = (&mut marker as *mut u64).cast();
    let small = ctx
        .create_cq_with(&CqConfig {
            cq_context: sentinel,
            ..CqConfig::new(1, CqId(44))
        })
        .map_err(|e| format!("create_cq_with: {e}"))?;
    // SAFETY: a live CQ.
    let (kept, cqe) = unsafe { ((*small.as_ptr()).cq_context, (*small.as_ptr()).cqe) };
    ensure!(
        kept == sentinel,
        "cq_context {kept:?}, made with {sentinel:?}"
    );
    let big = ctx
        .create_cq(64, CqId(43))
        .map_err(|e| format!("create_cq: {e}"))?;
    let caps = room_for(32);
    let sends = cqe as u64 + 4;
    ensure!(sends <= 32, "the small CQ holds {cqe}");
    let a = pd
        .create_rc_qp(&big, &big, &caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    let b = pd
        .create_rc_qp(&big, &small, &caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    connect_pair(&a, &b)?;
    let mr = pd.register(4096).map_err(|e| format!("reg_mr: {e}"))?;
    for i in 0..sends {
        b.post_recv(i, &mr, 0, 64).map_err(e2s)?;
    }
    let sge = [mr.sge(1024, 8).map_err(e2s)?];
    for i in 0..sends {
        a.post_send_wr(&SendRequest {
            signaled: false,
            ..SendRequest::new(i, SendOp::Send, &sge)
        })
        .map_err(e2s)?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        match events
            .next_event()
            .map_err(|e| format!("next_event: {e}"))?
        {
            Some(ev) if ev.kind == AsyncEventKind::CqError => {
                ensure!(
                    ev.element == AsyncElement::Cq(CqId(44)),
                    "the overrun names {:?} (other events: {seen:?})",
                    ev.element
                );
                break;
            }
            Some(ev) => seen.push(ev),
            None => {
                ensure!(
                    Instant::now() < deadline,
                    "no CQ error after 10 s (events: {seen:?})"
                );
                latency::wait_fd(events.fd(), 100);
            }
        }
    }
    // SAFETY: as above.
    let still = unsafe { (*small.as_ptr()).cq_context };
    ensure!(still == sentinel, "cq_context now {still:?}");
    drop((a, b, mr, small, big, events, pd));
    let _ = marker;
    ctx.close().map_err(|e| format!("context: {e:?}"))
}

/// A CQ and channel made with raw ffi calls, wrapped Borrowed: a feed on
/// it delivers receives through the event-driven driver, and dropping the
/// wrapper destroys neither (the test does, and both destroys return 0).
/// The sender's QP is on a raw CQ too (`create_rc_qp_raw`), polled with
/// `ibv_poll_cq` and converted with `work_completion`.
fn cq_from_raw_borrowed(pd: &Arc<ProtectionDomain>) -> Res {
    const N: u64 = 5;
    let ctx = pd.context();
    // SAFETY: a live context.
    let channel = unsafe { ffi::ibv_create_comp_channel(ctx.as_ptr()) };
    ensure!(!channel.is_null(), "ibv_create_comp_channel failed");
    // SAFETY: a live context and channel.
    let raw_b = unsafe { ffi::ibv_create_cq(ctx.as_ptr(), 64, ptr::null_mut(), channel, 0) };
    // SAFETY: a live context; no channel.
    let raw_a =
        unsafe { ffi::ibv_create_cq(ctx.as_ptr(), 64, ptr::null_mut(), ptr::null_mut(), 0) };
    ensure!(!raw_a.is_null() && !raw_b.is_null(), "ibv_create_cq failed");
    // SAFETY: `raw_b` was made on `ctx` with `channel`, which only it uses;
    // both are destroyed below, after the wrapper and the QP are gone.
    let cq_b = unsafe { IbvCq::from_raw(ctx, raw_b, channel, CqId(52), Ownership::Borrowed) }
        .map_err(|e| format!("from_raw: {e}"))?;
    ensure!(
        cq_b.as_ptr() == raw_b && cq_b.channel_ptr() == channel && cq_b.id() == CqId(52),
        "{cq_b:?}"
    );
    // SAFETY: `raw_a` stays alive until destroyed below, after the QP.
    let a = unsafe { pd.create_rc_qp_raw(raw_a, raw_a, &QpCaps::default(), PORT) }
        .map_err(|e| format!("create_rc_qp_raw: {e}"))?;
    let b = pd
        .create_rc_qp(&cq_b, &cq_b, &QpCaps::default(), PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    connect_pair(&a, &b)?;
    let mut mr = pd.register(4096).map_err(|e| format!("reg_mr: {e}"))?;

    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).map_err(|e| format!("io_uring: {e}"))?;
    let key = driver
        .register(Feed::new(cq_b, CqId(52), poster), FeedMode::Event)
        .map_err(e2s)?;
    let driver = driver.spawn().map_err(e2s)?;
    let mut wcs: [ffi::ibv_wc; 4] = [zeroed_wc(); 4];
    for i in 0..N {
        b.post_recv(i, &mr, 0, 64).map_err(e2s)?;
        mr.as_mut_slice()[1024..1032].copy_from_slice(&i.to_le_bytes());
        a.post_send(100 + i, SendOp::Send, &mr, 1024, 8, false)
            .map_err(e2s)?;
        // The receive, through the channel and the driver.
        let deadline = Instant::now() + Duration::from_secs(10);
        let wc = loop {
            match consumer.try_dequeue() {
                Ok(VerbsEvent::Completion { cq, wc }) => {
                    ensure!(cq == CqId(52), "completion from {cq:?}");
                    break wc;
                }
                Ok(other) => return Err(format!("unexpected {other:?}")),
                Err(TryDequeueError::Empty) => {
                    let _ = consumer.wait(1, Some(Duration::from_millis(100)));
                    ensure!(Instant::now() < deadline, "receive {i}: nothing after 10 s");
                }
                Err(e) => return Err(format!("dequeue: {e:?}")),
            }
        };
        ensure!(done(&wc, WcOpcode::RECV, i), "recv {i}: {wc:?}");
        ensure!(mr.as_slice()[..8] == i.to_le_bytes(), "payload {i} wrong");
        // The send, polled by hand from the raw CQ.
        let wc = loop {
            // SAFETY: a live CQ and room for 4 entries.
            let n = unsafe { ffi::ibv_poll_cq(raw_a, 4, wcs.as_mut_ptr()) };
            ensure!(n >= 0, "ibv_poll_cq: {n}");
            if n > 0 {
                ensure!(n == 1, "{n} send completions at once");
                break work_completion(&wcs[0]);
            }
            ensure!(Instant::now() < deadline, "send {i}: nothing after 10 s");
        };
        ensure!(done(&wc, WcOpcode::SEND, 100 + i), "send {i}: {wc:?}");
    }
    let mut stopped = driver.shutdown().map_err(e2s)?;
    let feed = stopped.take(key).ok_or("the feed is gone")?;
    let stats = feed.stats();
    ensure!(stats.events_got > 0, "no channel event was used: {stats:?}");
    // The feed acks its events; the wrapper destroys nothing.
    drop(feed);
    drop(stopped);
    drop((a, b, mr));
    // SAFETY: made above; no wrapper or QP uses them any more.
    let r = unsafe { ffi::ibv_destroy_cq(raw_b) };
    ensure!(r == 0, "ibv_destroy_cq of the borrowed CQ: {r}");
    // SAFETY: as above; its CQ is gone.
    let r = unsafe { ffi::ibv_destroy_comp_channel(channel) };
    ensure!(r == 0, "ibv_destroy_comp_channel: {r}");
    // SAFETY: as above.
    let r = unsafe { ffi::ibv_destroy_cq(raw_a) };
    ensure!(r == 0, "ibv_destroy_cq of the raw CQ: {r}");
    Ok(())
}

/// An all-zero work completion, for `ibv_poll_cq` to fill.
fn zeroed_wc() -> ffi::ibv_wc {
    // SAFETY: integers and a union of integers: all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// A context opened with raw ffi calls, wrapped Borrowed: objects made
/// from it work, and letting the wrapper go leaves the device open (the
/// test allocates a PD on it after, then closes it, which returns 0). One
/// wrapped Owned is closed by its wrapper.
fn context_from_raw(_shared: &Arc<ProtectionDomain>) -> Res {
    let open = || -> Result<*mut ffi::ibv_context, String> {
        let mut n = 0;
        // SAFETY: `n` is a live int; the list is freed below.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        ensure!(!list.is_null() && n > 0, "no device list");
        // SAFETY: the first device of a live list.
        let raw = unsafe { ffi::ibv_open_device(*list) };
        // SAFETY: from ibv_get_device_list, freed once.
        unsafe { ffi::ibv_free_device_list(list) };
        ensure!(!raw.is_null(), "ibv_open_device failed");
        Ok(raw)
    };
    let raw = open()?;
    // SAFETY: open until closed below, after the wrapper and everything
    // made from it are gone; wrapped once.
    let ctx = unsafe { Context::from_raw(raw, Ownership::Borrowed) };
    ensure!(
        ctx.as_ptr() == raw && ctx.ownership() == Ownership::Borrowed,
        "{ctx:?}"
    );
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(16, CqId(53))
        .map_err(|e| format!("create_cq: {e}"))?;
    let qp = pd
        .create_rc_qp(&cq, &cq, &QpCaps::default(), PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    ensure!(
        qp.query_state().map_err(e2s)? == QpState::Init,
        "a new QP is not in INIT"
    );
    qp.close().map_err(e2s)?;
    cq.close().map_err(|e| format!("cq: {e:?}"))?;
    pd.close().map_err(|e| format!("pd: {e:?}"))?;
    ctx.close().map_err(|e| format!("context: {e:?}"))?;
    // Still open.
    // SAFETY: the context is open (the wrapper did not close it).
    let pd = unsafe { ffi::ibv_alloc_pd(raw) };
    ensure!(!pd.is_null(), "ibv_alloc_pd on the borrowed context failed");
    // SAFETY: allocated above, once.
    let r = unsafe { ffi::ibv_dealloc_pd(pd) };
    ensure!(r == 0, "ibv_dealloc_pd: {r}");
    // SAFETY: opened above, closed once; nothing uses it.
    let r = unsafe { ffi::ibv_close_device(raw) };
    ensure!(r == 0, "ibv_close_device: {r}");

    let raw = open()?;
    // SAFETY: just opened, handed over: the wrapper closes it.
    let ctx = unsafe { Context::from_raw(raw, Ownership::Owned) };
    ctx.alloc_pd()
        .map_err(|e| format!("alloc_pd: {e}"))?
        .close()
        .map_err(|e| format!("pd: {e:?}"))?;
    ctx.close().map_err(|e| format!("owned context: {e:?}"))
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
    let cases: [(&str, Case); 21] = [
        ("rc_send_recv", rc_send_recv),
        ("rdma_write_with_imm", rdma_write_with_imm),
        ("error_completions", error_completions),
        ("unsignaled_sends", unsignaled_sends),
        ("inline_send", inline_send),
        ("send_with_imm", send_with_imm),
        ("rdma_read", rdma_read),
        ("multi_sge_send", multi_sge_send),
        ("remote_write_refused", remote_write_refused),
        ("cq_context_kept", cq_context_kept),
        ("cq_from_raw_borrowed", cq_from_raw_borrowed),
        ("context_from_raw", context_from_raw),
        ("event_driven_io_uring", event_driven_io_uring),
        ("throughput", throughput),
        ("explicit_teardown", explicit_teardown),
        ("pingpong_latency", latency::pingpong_latency),
        (
            "cm_connect_accept_disconnect",
            cm::cm_connect_accept_disconnect,
        ),
        ("cm_reject_and_unreachable", cm::cm_reject_and_unreachable),
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
