//! Real verbs on Soft-RoCE: run inside the guest that `run.sh` boots (it
//! needs an RDMA device; `rxe0` there). Not part of `cargo test` on the host
//! (`test = false`); built with
//! `cargo test --release -p evd-verbs --features ibverbs --test softroce --no-run`.
//!
//! Cases: RC loopback send/recv, RDMA write with immediate, error
//! completions (bad rkey; a send on an errored QP; a flushed receive), the
//! event-driven and adaptive modes through io_uring, the feed's
//! throughput against a raw poll loop on the same CQ, an explicit
//! teardown of every object, and the ping-pong latency table
//! (`latency.rs`).

mod latency;

use evd::TryDequeueError;
use evd_verbs::ibv::{
    ConnectParams, Context, IbvCq, MemoryRegion, ProtectionDomain, QpCaps, QpState, QueuePair,
    SendOp,
};
use evd_verbs::{
    teardown_failures, AdaptiveConfig, AsyncFeed, CloseError, CompletionQueue, CqId, Driver,
    DriverConfig, Feed, FeedMode, VerbsEvent, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    POLL_BATCH,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Res = Result<(), String>;

#[macro_export]
macro_rules! ensure {
    ($c:expr, $($fmt:tt)+) => {
        if !$c { return Err(format!($($fmt)+)); }
    };
}

const GID_INDEX: u8 = 0;
const PORT: u8 = 1;

struct Pair {
    a: QueuePair,
    b: QueuePair,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
}

/// Two RC QPs on the same device connected to each other, each with its own CQ.
fn pair(
    pd: &Arc<ProtectionDomain>,
    depth: i32,
    ids: (u32, u32),
) -> Result<(Pair, IbvCq, IbvCq), String> {
    let caps = QpCaps {
        max_send_wr: depth as u32 / 2,
        max_recv_wr: depth as u32 / 2,
        ..QpCaps::default()
    };
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

/// Busy-poll the feeds until `n` completions are dequeued (10 s limit).
fn collect(
    feeds: &mut [&mut Feed<IbvCq>],
    consumer: &mut evd::Consumer<VerbsEvent>,
    n: usize,
) -> Result<Vec<(CqId, WorkCompletion)>, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < n {
        for f in feeds.iter_mut() {
            f.progress(64);
        }
        loop {
            match consumer.try_dequeue() {
                Ok(VerbsEvent::Completion { cq, wc }) => out.push((cq, wc)),
                Ok(VerbsEvent::Async(a)) => return Err(format!("unexpected async event {a:?}")),
                Err(TryDequeueError::Empty) => break,
                Err(e) => return Err(format!("dequeue: {e:?}")),
            }
        }
        ensure!(
            Instant::now() < deadline,
            "only {} of {n} completions after 10 s",
            out.len()
        );
    }
    Ok(out)
}

fn rc_send_recv(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, cq_a, cq_b) = pair(pd, 64, (1, 2))?;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(256).unwrap();
    let mut fa = Feed::new(cq_a, CqId(1), poster.clone());
    let mut fb = Feed::new(cq_b, CqId(2), poster);
    for i in 0..10u64 {
        p.b.post_recv(100 + i, &p.mr_b, i as usize * 64, 64)
            .map_err(|e| e.to_string())?;
    }
    for i in 0..10u64 {
        p.mr_a.as_mut_slice()[i as usize * 64..i as usize * 64 + 32].fill(i as u8 + 1);
        p.a.post_send(i, SendOp::Send, &p.mr_a, i as usize * 64, 32, false)
            .map_err(|e| e.to_string())?;
    }
    let got = collect(&mut [&mut fa, &mut fb], &mut consumer, 20)?;
    let sends: Vec<_> = got
        .iter()
        .filter(|(c, _)| *c == CqId(1))
        .map(|(_, w)| *w)
        .collect();
    let recvs: Vec<_> = got
        .iter()
        .filter(|(c, _)| *c == CqId(2))
        .map(|(_, w)| *w)
        .collect();
    ensure!(
        sends.len() == 10 && recvs.len() == 10,
        "sends {} recvs {}",
        sends.len(),
        recvs.len()
    );
    for (i, wc) in sends.iter().enumerate() {
        ensure!(
            wc.status.is_success() && wc.opcode == WcOpcode::SEND && wc.wr_id == i as u64,
            "send {i}: {wc:?}"
        );
    }
    for (i, wc) in recvs.iter().enumerate() {
        ensure!(
            wc.status.is_success()
                && wc.opcode == WcOpcode::RECV
                && wc.wr_id == 100 + i as u64
                && wc.byte_len == 32,
            "recv {i}: {wc:?}"
        );
        ensure!(wc.qp_num == p.b.qp_num(), "recv on QP {}", wc.qp_num);
        let data = &p.mr_b.as_slice()[i * 64..i * 64 + 32];
        ensure!(data.iter().all(|&x| x == i as u8 + 1), "payload {i} wrong");
    }
    Ok(())
}

fn rdma_write_with_imm(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, cq_a, cq_b) = pair(pd, 64, (3, 4))?;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let mut fa = Feed::new(cq_a, CqId(3), poster.clone());
    let mut fb = Feed::new(cq_b, CqId(4), poster);
    p.b.post_recv(7, &p.mr_b, 0, 0).map_err(|e| e.to_string())?;
    for (i, x) in p.mr_a.as_mut_slice()[..256].iter_mut().enumerate() {
        *x = i as u8;
    }
    let op = SendOp::WriteWithImm {
        remote_addr: p.mr_b.addr() + 1024,
        rkey: p.mr_b.rkey(),
        imm: 0x1234_5678,
    };
    p.a.post_send(8, op, &p.mr_a, 0, 256, true)
        .map_err(|e| e.to_string())?;
    let got = collect(&mut [&mut fa, &mut fb], &mut consumer, 2)?;
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
    ensure!(
        write.status.is_success() && write.opcode == WcOpcode::RDMA_WRITE && write.wr_id == 8,
        "write: {write:?}"
    );
    ensure!(
        recv.status.is_success()
            && recv.opcode == WcOpcode::RECV_RDMA_WITH_IMM
            && recv.wc_flags.contains(WcFlags::WITH_IMM)
            && recv.imm_data == 0x1234_5678
            && recv.byte_len == 256
            && recv.wr_id == 7,
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
    let (p, cq_a, cq_b) = pair(pd, 64, (5, 6))?;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let mut fa = Feed::new(cq_a, CqId(5), poster.clone());
    let mut fb = Feed::new(cq_b, CqId(6), poster);
    // A write with a wrong rkey: the responder refuses it.
    let bad = SendOp::Write {
        remote_addr: p.mr_b.addr(),
        rkey: p.mr_b.rkey() ^ 0x5a5a,
    };
    p.a.post_send(1, bad, &p.mr_a, 0, 64, false)
        .map_err(|e| e.to_string())?;
    let got = collect(&mut [&mut fa, &mut fb], &mut consumer, 1)?;
    let (cq, wc) = got[0];
    ensure!(cq == CqId(5) && wc.wr_id == 1, "{got:?}");
    ensure!(
        wc.status == WcStatus::REM_ACCESS_ERR,
        "bad rkey gave {:?}",
        wc.status
    );
    // The requester's QP is now in error: a send on it is flushed.
    p.a.post_send(2, SendOp::Send, &p.mr_a, 0, 8, false)
        .map_err(|e| e.to_string())?;
    let got = collect(&mut [&mut fa, &mut fb], &mut consumer, 1)?;
    ensure!(
        got[0].1.wr_id == 2 && got[0].1.status == WcStatus::WR_FLUSH_ERR,
        "send on errored QP: {got:?}"
    );
    // A receive outstanding when its QP is moved to error is flushed too.
    p.b.post_recv(3, &p.mr_b, 0, 64)
        .map_err(|e| e.to_string())?;
    p.b.set_error().map_err(|e| e.to_string())?;
    let state = p.b.query_state().map_err(|e| e.to_string())?;
    ensure!(state == QpState::Error, "after set_error: {state:?}");
    let got = collect(&mut [&mut fa, &mut fb], &mut consumer, 1)?;
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
    let async_events = pd.context().async_events().map_err(|e| e.to_string())?;
    let key_a = driver
        .register(Feed::new(cq_a, CqId(7), poster.clone()), FeedMode::Event)
        .map_err(|e| e.to_string())?;
    let key_b = driver
        .register(
            Feed::new(cq_b, CqId(8), poster.clone()),
            FeedMode::Adaptive(AdaptiveConfig::default()),
        )
        .map_err(|e| e.to_string())?;
    driver
        .register_async(AsyncFeed::new(async_events, poster))
        .map_err(|e| e.to_string())?;
    let driver = driver.spawn().map_err(|e| e.to_string())?;
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
            .map_err(|e| e.to_string())?;
        }
    }
    p.mr_a.as_mut_slice()[..8].copy_from_slice(&0u64.to_le_bytes());
    p.a.post_send(0, SendOp::Send, &p.mr_a, 0, 8, true)
        .map_err(|e| e.to_string())?;
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
                        p.b.post_recv(wc.wr_id, &p.mr_b, 0, 64)
                            .map_err(|e| e.to_string())?;
                        p.b.post_send(seq, SendOp::Send, &p.mr_b, 0, 8, true)
                            .map_err(|e| e.to_string())?;
                    }
                    (CqId(7), WcOpcode::RECV) => {
                        let seq = u64::from_le_bytes(p.mr_a.as_slice()[..8].try_into().unwrap());
                        ensure!(seq == pongs, "pong {seq}, expected {pongs}");
                        pongs += 1;
                        p.a.post_recv(wc.wr_id, &p.mr_a, 0, 64)
                            .map_err(|e| e.to_string())?;
                        if pongs < ROUNDS {
                            p.mr_a.as_mut_slice()[..8].copy_from_slice(&pongs.to_le_bytes());
                            p.a.post_send(pongs, SendOp::Send, &p.mr_a, 0, 8, true)
                                .map_err(|e| e.to_string())?;
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
    let mut stopped = driver.shutdown().map_err(|e| e.to_string())?;
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
        p.b.post_recv(0, &p.mr_b, 0, 64)
            .map_err(|e| e.to_string())?;
        for i in 0..BATCH - 1 {
            p.a.post_send(i as u64, write, &p.mr_a, 0, 8, false)
                .map_err(|e| e.to_string())?;
        }
        p.a.post_send(BATCH as u64, SendOp::Send, &p.mr_a, 0, 8, false)
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut b = [WorkCompletion::default(); 1];
        while cq_b.poll(&mut b).map_err(|e| e.to_string())? == 0 {
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
            let k = raw_cq.poll(&mut wcs).map_err(|e| e.to_string())?;
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
    let caps = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        ..QpCaps::default()
    };
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
    qp.post_recv(1, &mr, 0, 64).map_err(|e| e.to_string())?;
    qp.post_send(2, SendOp::Send, &mr, 1024, 8, false)
        .map_err(|e| e.to_string())?;
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
        polled += cq.poll(&mut wcs[polled..]).map_err(|e| e.to_string())?;
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
    let ctx = Context::open(None).expect("open the RDMA device");
    let pd = ctx.alloc_pd().expect("alloc_pd");
    type Case = fn(&Arc<ProtectionDomain>) -> Res;
    let cases: [(&str, Case); 7] = [
        ("rc_send_recv", rc_send_recv),
        ("rdma_write_with_imm", rdma_write_with_imm),
        ("error_completions", error_completions),
        ("event_driven_io_uring", event_driven_io_uring),
        ("throughput", throughput),
        ("explicit_teardown", explicit_teardown),
        ("pingpong_latency", latency::pingpong_latency),
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
