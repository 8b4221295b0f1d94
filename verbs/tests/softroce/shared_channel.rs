//! Four CQs on one real completion channel, served by one `ChannelFeed`
//! through the driver: two connected QP pairs (each QP with its own CQ),
//! sends and receives on all four, every completion delivered once, in
//! order per CQ, every channel event acknowledged before the CQs go.

use super::{connect_pair, Res, PORT};
use crate::ensure;
use evd::TryDequeueError;
use evd_verbs::ibv::{CompletionChannel, CqConfig, ProtectionDomain, QpCaps, SendOp};
use evd_verbs::{
    teardown_failures, ChannelFeed, CqId, Driver, DriverConfig, FeedMode, SharedChannel,
    VerbsEvent, WcOpcode,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: u64 = 50;
const PER_ROUND: u64 = 16;

pub fn shared_channel_four_cqs(pd: &Arc<ProtectionDomain>) -> Res {
    let failures_before = teardown_failures();
    let ctx = pd.context();
    let channel: Arc<CompletionChannel> = ctx
        .create_channel()
        .map_err(|e| format!("create_channel: {e}"))?;
    let mut cqs = Vec::new();
    for i in 0..4u32 {
        cqs.push(
            ctx.create_cq_on(&channel, &CqConfig::new(128, CqId(60 + i)))
                .map_err(|e| format!("create_cq_on: {e}"))?,
        );
    }
    ensure!(
        cqs.iter().all(|cq| channel.key_of(cq).is_some()),
        "a CQ is not on the channel"
    );
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 64,
        ..QpCaps::default()
    };
    // Pair 0: CQ 60 -> CQ 61; pair 1: CQ 62 -> CQ 63.
    let mut qps = Vec::new();
    for cq in &cqs {
        qps.push(
            pd.create_rc_qp(cq, cq, &caps, PORT)
                .map_err(|e| format!("create_qp: {e}"))?,
        );
    }
    connect_pair(&qps[0], &qps[1])?;
    connect_pair(&qps[2], &qps[3])?;
    let mrs: Vec<_> = (0..4)
        .map(|_| pd.register(1 << 16))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reg_mr: {e}"))?;

    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(256).unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    for (i, cq) in cqs.into_iter().enumerate() {
        feed.add(cq, CqId(60 + i as u32))
            .map_err(|_| "add refused a CQ of the channel".to_string())?;
    }
    let mut driver = Driver::new(DriverConfig::default()).map_err(|e| format!("io_uring: {e}"))?;
    let key = driver
        .register_channel(feed, FeedMode::Event)
        .map_err(|e| format!("register_channel: {e}"))?;
    let running = driver.spawn().map_err(|e| format!("spawn: {e}"))?;

    // Per CQ, the wr_ids in the order they came.
    let mut seen: [Vec<u64>; 4] = Default::default();
    for round in 0..ROUNDS {
        for i in 0..PER_ROUND {
            let wr = round * PER_ROUND + i;
            let off = (i * 64) as usize;
            for (send, recv) in [(0, 1), (2, 3)] {
                qps[recv]
                    .post_recv(wr, &mrs[recv], off, 64)
                    .map_err(|e| format!("post_recv: {e}"))?;
                qps[send]
                    .post_send(wr, SendOp::Send, &mrs[send], off, 32, false)
                    .map_err(|e| format!("post_send: {e}"))?;
            }
        }
        let want = (round + 1) * PER_ROUND * 4;
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.iter().map(Vec::len).sum::<usize>() < want as usize {
            match consumer.try_dequeue() {
                Ok(VerbsEvent::Completion { cq, wc }) => {
                    let i = cq.0.checked_sub(60).filter(|&i| i < 4);
                    let i = i.ok_or(format!("a completion on {cq:?}"))? as usize;
                    ensure!(wc.status.is_success(), "CQ {i}: {wc:?}");
                    let op = if i % 2 == 0 {
                        WcOpcode::SEND
                    } else {
                        WcOpcode::RECV
                    };
                    ensure!(wc.opcode == op, "CQ {i}: {wc:?}");
                    seen[i].push(wc.wr_id);
                }
                Ok(VerbsEvent::Async(a)) => return Err(format!("unexpected async event {a:?}")),
                Err(TryDequeueError::Empty) => {
                    ensure!(
                        Instant::now() < deadline,
                        "round {round}: {:?} of {want} completions per CQ after 20 s",
                        seen.iter().map(Vec::len).collect::<Vec<_>>()
                    );
                    let _ = consumer.wait(1, Some(Duration::from_millis(100)));
                }
                Err(e) => return Err(format!("dequeue: {e:?}")),
            }
        }
    }
    let total = ROUNDS * PER_ROUND;
    for (i, s) in seen.iter().enumerate() {
        ensure!(
            *s == (0..total).collect::<Vec<_>>(),
            "CQ {i}: not each completion once, in order ({} of {total})",
            s.len()
        );
    }
    let mut stopped = running.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    let feed = stopped
        .take(key)
        .ok_or("the channel feed was not handed back")?;
    let stats = feed.stats();
    let credited: u64 = feed.feeds().map(|f| f.stats().events_got).sum();
    ensure!(
        stats.unknown_events == 0 && credited == stats.events_got && stats.events_got > 0,
        "events: {stats:?}, credited {credited}"
    );
    for f in feed.feeds() {
        ensure!(f.stats().events_got > 0, "{:?} was never woken", f.id());
    }
    eprintln!("    {stats:?}");
    // The feeds ack what they got; the CQs go with the last QP, the
    // channel after the last CQ. A CQ destroy that waited for acks would
    // hang here (the watchdog fails the run); a failure is counted.
    drop(feed);
    drop(qps);
    drop(mrs);
    drop(channel);
    ensure!(
        teardown_failures() == failures_before,
        "teardown failures: {}",
        teardown_failures() - failures_before
    );
    Ok(())
}
